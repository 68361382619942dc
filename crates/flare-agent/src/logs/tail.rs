//! Following log files as they grow: the files under the paths given (a directory is
//! walked for files whose name says log, see `flare_log_diagnosis::source`), new files
//! as they appear, rotation (the path names another file: the old one is read to its
//! end first) and truncation (read again from the start). A file found when following
//! starts is read from its last [`INITIAL_TAIL`] bytes; one that appears later, whole.
//! Line numbers count from the file's start where the agent could count them, and go on
//! across a rotation (the receiver keys lines by them).

use flare_log_diagnosis::source::{is_log_file_name, looks_like_text};
use flare_log_diagnosis::Excerpter;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes of an existing file read when following starts.
pub const INITIAL_TAIL: u64 = 8 << 20;
/// Longest line kept whole; a longer one is cut there (the rest dropped, counted).
const MAX_LINE: usize = 64 << 10;
/// Files followed at most.
const MAX_FILES: usize = 4096;
/// Skipped bytes whose lines are counted (to number the lines read after them); past
/// it, numbers count from where reading began.
const MAX_COUNTED: u64 = 4 << 30;
/// Directory levels walked below a path given.
const MAX_DEPTH: usize = 8;

/// One followed file.
pub struct Tailed {
    file: File,
    /// (device, inode) of the open file.
    id: (u64, u64),
    offset: u64,
    partial: Vec<u8>,
    pub excerpter: Excerpter,
}

/// What reading found beside the lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TailStats {
    pub files: usize,
    /// Bytes of lines longer than the cut, dropped.
    pub cut_bytes: u64,
    /// Files not followed: past the limit, or unreadable.
    pub not_followed: u64,
    pub rotations: u64,
    pub truncations: u64,
}

pub struct Tailer {
    roots: Vec<PathBuf>,
    files: BTreeMap<PathBuf, Tailed>,
    /// (device, inode) of every file followed: a rotated file that shows up under its
    /// new name (`train.log.1`) was read already.
    seen: std::collections::HashSet<(u64, u64)>,
    /// Whether the first scan was done: files found later are read whole.
    scanned: bool,
    /// Where the next read starts, for fairness between files.
    next: usize,
    pub stats: TailStats,
}

impl Tailer {
    pub fn new(roots: Vec<PathBuf>) -> Tailer {
        Tailer {
            roots,
            files: BTreeMap::new(),
            seen: std::collections::HashSet::new(),
            scanned: false,
            next: 0,
            stats: TailStats::default(),
        }
    }

    /// Finds files not followed yet.
    pub fn scan(&mut self) {
        let mut found = Vec::new();
        for root in &self.roots {
            match std::fs::metadata(root) {
                Ok(m) if m.is_dir() => walk(root, 0, &mut found),
                Ok(m) if m.is_file() => found.push(root.clone()),
                _ => {}
            }
        }
        for p in found {
            if self.files.contains_key(&p) {
                continue;
            }
            if self.files.len() >= MAX_FILES {
                self.stats.not_followed += 1;
                continue;
            }
            if let Ok(m) = std::fs::metadata(&p) {
                if self.seen.contains(&(m.dev(), m.ino())) {
                    continue;
                }
            }
            match open(&p, self.scanned) {
                Some(t) => {
                    self.seen.insert(t.id);
                    self.files.insert(p, t);
                }
                None => self.stats.not_followed += 1,
            }
        }
        self.stats.files = self.files.len();
        self.scanned = true;
    }

    /// Reads what the files gained, at most about `budget` bytes, and gives each whole
    /// line to `sink` with its file's path and excerpter.
    pub fn read(&mut self, budget: usize, mut sink: impl FnMut(&Path, &mut Excerpter, &str)) {
        let paths: Vec<PathBuf> = self.files.keys().cloned().collect();
        if paths.is_empty() {
            return;
        }
        let mut left = budget;
        let start = self.next % paths.len();
        for i in 0..paths.len() {
            if left == 0 {
                self.next = start + i;
                return;
            }
            let path = &paths[(start + i) % paths.len()];
            let t = self.files.get_mut(path).expect("listed");
            left -= follow(path, t, left, &mut self.stats, &mut self.seen, &mut sink);
        }
        self.next = start + 1;
    }

    /// Each followed file, for what its excerpter kept.
    pub fn files_mut(&mut self) -> impl Iterator<Item = (&PathBuf, &mut Tailed)> {
        self.files.iter_mut()
    }
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        let Ok(m) = std::fs::metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if depth < MAX_DEPTH {
                walk(&p, depth + 1, out);
            }
        } else if m.is_file() && is_log_file_name(name) && !name.ends_with(".gz") {
            // a name without an extension says little: a dump has none either
            if name.contains('.') || is_text_file(&p) {
                out.push(p);
            }
        }
    }
}

/// Text, and not a JSON document (a Flight Recorder dump written as JSON).
fn is_text_file(p: &Path) -> bool {
    let mut head = Vec::with_capacity(4096);
    let Ok(f) = File::open(p) else {
        return false;
    };
    if f.take(4096).read_to_end(&mut head).is_err() {
        return false;
    }
    looks_like_text(&head) && head.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{')
}

/// Opens a file to follow: from its last [`INITIAL_TAIL`] bytes when `later` is false
/// (it was there when following started), else whole.
fn open(p: &Path, later: bool) -> Option<Tailed> {
    let mut file = File::open(p).ok()?;
    let m = file.metadata().ok()?;
    let size = m.len();
    let path = p.to_string_lossy();
    let mut excerpter = Excerpter::for_path(&path);
    let mut offset = 0;
    // whether reading starts inside a line (skipped to the next line's start)
    let mut inside_line = false;
    if !later && size > INITIAL_TAIL {
        offset = size - INITIAL_TAIL;
        let mut before = [0u8; 1];
        file.seek(SeekFrom::Start(offset - 1)).ok()?;
        file.read_exact(&mut before).ok()?;
        inside_line = before[0] != b'\n';
        // number the lines after the skipped part, where counting them is cheap enough
        if offset <= MAX_COUNTED {
            file.seek(SeekFrom::Start(0)).ok()?;
            let mut counted = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            let mut left = offset;
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = file.read(&mut buf[..want]).ok()?;
                if n == 0 {
                    break;
                }
                counted += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                left -= n as u64;
            }
            // the cut line is line `counted + 1`: the first one read whole follows it
            excerpter = excerpter.starting_at(counted + 1 + u64::from(inside_line));
        }
        file.seek(SeekFrom::Start(offset)).ok()?;
    }
    let mut t = Tailed {
        file,
        id: (m.dev(), m.ino()),
        offset,
        partial: Vec::new(),
        excerpter,
    };
    if inside_line {
        // a marker: skip to the next line's start
        t.partial.push(b'\0');
    }
    Some(t)
}

/// Reads what `t` gained (after a rotation, the old file's rest, then the new file),
/// at most about `budget` bytes. Returns the bytes read.
fn follow(
    path: &Path,
    t: &mut Tailed,
    budget: usize,
    stats: &mut TailStats,
    seen: &mut std::collections::HashSet<(u64, u64)>,
    sink: &mut impl FnMut(&Path, &mut Excerpter, &str),
) -> usize {
    let mut read = drain(path, t, budget, stats, sink);
    let Ok(m) = std::fs::metadata(path) else {
        return read; // gone for now; its open handle was read to its end
    };
    if (m.dev(), m.ino()) != t.id {
        if read >= budget {
            return read; // the old file may hold more: finish it first
        }
        if let Ok(file) = File::open(path) {
            stats.rotations += 1;
            t.file = file;
            t.id = (m.dev(), m.ino());
            seen.insert(t.id);
            t.offset = 0;
            end_partial(path, t, sink);
            read += drain(path, t, budget - read, stats, sink);
        }
    } else if m.len() < t.offset {
        stats.truncations += 1;
        t.offset = 0;
        end_partial(path, t, sink);
        if t.file.seek(SeekFrom::Start(0)).is_ok() {
            read += drain(path, t, budget - read, stats, sink);
        }
    }
    read
}

/// A line left without its end by a rotation or truncation, given as it is.
fn end_partial(path: &Path, t: &mut Tailed, sink: &mut impl FnMut(&Path, &mut Excerpter, &str)) {
    if !t.partial.is_empty() && t.partial != [b'\0'] {
        let line = String::from_utf8_lossy(&t.partial).into_owned();
        sink(path, &mut t.excerpter, &line);
    }
    t.partial.clear();
}

/// Reads the open file from its offset to its end (or the budget), giving whole lines.
fn drain(
    path: &Path,
    t: &mut Tailed,
    budget: usize,
    stats: &mut TailStats,
    sink: &mut impl FnMut(&Path, &mut Excerpter, &str),
) -> usize {
    let mut buf = vec![0u8; budget.clamp(1, 1 << 20)];
    let mut read = 0;
    while read < budget {
        let want = (budget - read).min(buf.len());
        let n = match t.file.read(&mut buf[..want]) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        read += n;
        t.offset += n as u64;
        let mut chunk = &buf[..n];
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            let skip_cut = t.partial == [b'\0'];
            if !skip_cut {
                extend_capped(&mut t.partial, &chunk[..i], stats);
                let end = if t.partial.last() == Some(&b'\r') {
                    t.partial.len() - 1
                } else {
                    t.partial.len()
                };
                let line = String::from_utf8_lossy(&t.partial[..end]);
                sink(path, &mut t.excerpter, &line);
            }
            t.partial.clear();
            chunk = &chunk[i + 1..];
        }
        if t.partial != [b'\0'] {
            extend_capped(&mut t.partial, chunk, stats);
        }
    }
    read
}

fn extend_capped(partial: &mut Vec<u8>, more: &[u8], stats: &mut TailStats) {
    let room = MAX_LINE.saturating_sub(partial.len());
    let take = room.min(more.len());
    partial.extend_from_slice(&more[..take]);
    stats.cut_bytes += (more.len() - take) as u64;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(t: &mut Tailer) -> Vec<(String, u64, String)> {
        let mut out = Vec::new();
        t.read(1 << 20, |p, x, l| {
            x.line(l);
            out.push((
                p.file_name().unwrap().to_string_lossy().into_owned(),
                x.line_no(),
                l.to_string(),
            ))
        });
        out
    }

    fn append(p: &Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    #[test]
    fn follows_growth_partial_lines_new_files_rotation_and_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("rank0.log");
        append(&a, "one\ntwo\nthr");
        // not logs: a JSON dump without an extension, a binary one, a trace
        std::fs::write(
            dir.path().join("nccl_trace_rank_0"),
            b"{\"version\": \"2.9\"}",
        )
        .unwrap();
        std::fs::write(dir.path().join("nccl_trace_rank_1"), b"\x80\x02}q\x00").unwrap();
        std::fs::write(dir.path().join("trace.json"), b"{}").unwrap();
        let mut t = Tailer::new(vec![dir.path().to_path_buf()]);
        t.scan();
        assert_eq!(t.stats.files, 1);
        let got = lines(&mut t);
        assert_eq!(
            got.iter().map(|g| (g.1, g.2.as_str())).collect::<Vec<_>>(),
            [(1, "one"), (2, "two")]
        );
        append(&a, "ee\r\n");
        let b = dir.path().join("node-1").join("stderr.log");
        std::fs::create_dir_all(b.parent().unwrap()).unwrap();
        append(&b, "b1\n");
        t.scan();
        let got = lines(&mut t);
        assert!(
            got.contains(&("rank0.log".into(), 3, "three".into())),
            "{got:?}"
        );
        assert!(
            got.contains(&("stderr.log".into(), 1, "b1".into())),
            "{got:?}"
        );
        // rotation: the old file's last lines, then the new file, numbering going on
        append(&a, "four\n");
        std::fs::rename(&a, dir.path().join("rank0.log.1")).unwrap();
        append(&a, "five\n");
        let got = lines(&mut t);
        assert_eq!(
            got.iter().map(|g| (g.1, g.2.as_str())).collect::<Vec<_>>(),
            [(4, "four"), (5, "five")]
        );
        assert_eq!(t.stats.rotations, 1);
        // truncation (copytruncate)
        std::fs::write(&a, "six\n").unwrap();
        let got = lines(&mut t);
        assert_eq!(
            got.iter().map(|g| g.2.as_str()).collect::<Vec<_>>(),
            ["six"]
        );
        assert_eq!(t.stats.truncations, 1);
        // the rotated file, under its new name, was read already
        t.scan();
        assert!(lines(&mut t).is_empty());
        assert_eq!(t.stats.files, 2);
    }

    #[test]
    fn a_large_existing_file_is_read_from_its_tail_with_true_line_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("train.log");
        let line = "x".repeat(99) + "\n";
        let n = (INITIAL_TAIL as usize / line.len()) * 3;
        append(&a, &line.repeat(n));
        append(&a, "last line\n");
        let mut t = Tailer::new(vec![a.clone()]);
        t.scan();
        let mut got = Vec::new();
        loop {
            let more = lines(&mut t);
            if more.is_empty() {
                break;
            }
            got.extend(more);
        }
        let last = got.last().unwrap();
        assert_eq!((last.1, last.2.as_str()), (n as u64 + 1, "last line"));
        // the cut first line was skipped: every line read is whole
        assert!(got.iter().all(|g| g.2 == "last line" || g.2.len() == 99));
        assert!(got.len() < n / 2);
    }
}
