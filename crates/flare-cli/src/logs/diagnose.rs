//! `flare logs diagnose PATH... [--baseline PATH...] [--json]`: the root cause of a
//! failed job from its logs (`flare-log-diagnosis`), as the findings document.
//!
//! Directories are walked (sorted, so the answer does not depend on the file system's
//! order); a file is read when its name says it is a log (`.log`, `.txt`, `.out`, `.err`,
//! `.dmesg`, `stdout`/`stderr`, rotated `.log.1`, no extension, each possibly `.gz`), and
//! the rest are skipped with a note. Files are read line by line, never whole; bytes
//! that are not UTF-8 are decoded lossily and counted, never dropped.

use super::direct::{self, DirectReaders};
use crate::present;
use anyhow::{bail, Context, Result};
use clap::Args;
use flare_import::limits::{self, Limits};
use flare_log_diagnosis::{diagnose, Collector, LogDiagnosis};
use flare_model::{FindingsDocument, JobSummary};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct DiagnoseArgs {
    /// Log files or directories of one failed job (per-rank and per-node files,
    /// torchrun's --log-dir, Slurm output, pod logs, dmesg and journal exports).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Logs of earlier runs of the job that went well: lines like theirs are not blamed.
    #[arg(long, num_args = 1..)]
    pub baseline: Vec<PathBuf>,
    /// Print the findings document (JSON) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Bytes read from one file at most.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_INPUT_BYTES)]
    pub max_input_bytes: u64,
    /// Bytes inflated from one .gz file at most.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_INFLATED_BYTES)]
    pub max_inflated_bytes: u64,
    /// Files read from one directory at most.
    #[arg(long, default_value_t = limits::DEFAULT_MAX_FILES)]
    pub max_files: usize,
}

/// What reading the inputs noticed.
#[derive(Default)]
struct Reading {
    lossy_lines: u64,
    skipped: Vec<String>,
    bytes: u64,
}

/// Whether a file name says it holds log text.
pub fn is_log_name(name: &str) -> bool {
    flare_import::text_logs::is_log_file_name(name)
}

/// Lines of a file read at once: one buffer, each line's span in it (its end of line
/// left out).
#[derive(Default)]
struct Chunk {
    text: String,
    spans: Vec<(usize, usize)>,
}

impl Chunk {
    fn lines(&self) -> impl Iterator<Item = &str> + '_ {
        self.spans.iter().map(|&(a, b)| &self.text[a..b])
    }

    /// The whole lines of `block` after its first `from` bytes (padding, in no line);
    /// lines that are not UTF-8 are decoded lossily (and counted in `lossy`), never
    /// dropped.
    fn of(mut block: Vec<u8>, from: usize, lossy: &mut u64) -> Chunk {
        // the padding as NULs: valid UTF-8, whatever an earlier chunk left there
        block[..from].fill(0);
        let (text, from) = match String::from_utf8(block) {
            Ok(t) => (t, from),
            Err(e) => {
                let block = e.into_bytes();
                let mut t = String::with_capacity(block.len());
                for line in block[from..].split_inclusive(|&b| b == b'\n') {
                    match std::str::from_utf8(line) {
                        Ok(s) => t.push_str(s),
                        Err(_) => {
                            *lossy += 1;
                            t.push_str(&String::from_utf8_lossy(line));
                        }
                    }
                }
                (t, 0)
            }
        };
        let bytes = text.as_bytes();
        let mut spans = Vec::with_capacity((bytes.len() - from) / 64);
        let mut start = from;
        let mut span = |start: usize, mut end: usize| {
            while end > start && bytes[end - 1] == b'\r' {
                end -= 1;
            }
            spans.push((start, end));
        };
        for i in memchr::memchr_iter(b'\n', &bytes[from..]).map(|i| i + from) {
            span(start, i);
            start = i + 1;
        }
        if start < bytes.len() {
            span(start, bytes.len());
        }
        Chunk { text, spans }
    }
}

/// Bytes read at once from a file (whole lines: a longer line grows its chunk).
const CHUNK_BYTES: u64 = 1 << 18;

/// Chunk buffers folded and handed back for the next reads: a large job's logs are read
/// through a few of them, not a fresh allocation (and its page faults) per chunk. A
/// buffer comes back with its bytes as they were (all initialized), so a read writes into
/// it without zeroing it first (std's `read_to_end` zeroes the room of a reader that has
/// no `read_buf`, as the direct reader: 2% of a cold run).
#[derive(Default)]
struct Buffers(std::sync::Mutex<Vec<Vec<u8>>>);

/// Buffers kept at most: as many as chunks can be in flight with the least direct
/// readers (more are made afresh, zeroed: 2% of a cold run when 32 were kept).
const BUFFERS_KEPT: usize = AHEAD + AHEAD_PER_DIRECT_READER * DIRECT_READERS_MIN + 16;

impl Buffers {
    fn get(&self) -> Vec<u8> {
        self.0
            .lock()
            .expect("not poisoned")
            .pop()
            .unwrap_or_default()
    }

    fn put(&self, b: Vec<u8>) {
        let mut kept = self.0.lock().expect("not poisoned");
        if kept.len() < BUFFERS_KEPT {
            kept.push(b);
        }
    }
}

/// Reads `path` in chunks of whole lines, in order, into `each`; counts lines that are
/// not UTF-8 (decoded lossily, never dropped).
fn read_chunks(
    path: &Path,
    lim: &Limits,
    buffers: &Buffers,
    direct: &DirectReaders,
    mut each: impl FnMut(Chunk) -> Result<()>,
) -> Result<(u64, u64)> {
    let (file, len) = limits::open_file(path, lim)?;
    let name = path.display().to_string();
    let gz = name.to_ascii_lowercase().ends_with(".gz");
    // a compressed file's bytes are few: read as usual
    let (file, _reading) = direct.open(file, if gz { 0 } else { len });
    let raw = file.take(lim.max_input_bytes.saturating_add(1));
    let (mut stream, cap, what): (Box<dyn Read>, u64, &str) = if gz {
        (
            Box::new(
                flate2::read::MultiGzDecoder::new(raw)
                    .take(lim.max_inflated_bytes.saturating_add(1)),
            ),
            lim.max_inflated_bytes,
            "inflated",
        )
    } else {
        (Box::new(raw), lim.max_input_bytes, "read")
    };
    let (mut total, mut lines, mut lossy) = (0u64, 0u64, 0u64);
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut block = buffers.get();
        let kept = carry.len();
        // zeroed only where the buffer grows (its first use, a long line's carry)
        let room = direct::ALIGN + kept + CHUNK_BYTES as usize;
        if block.len() < room {
            block.resize(room, 0);
        }
        // the read lands at an aligned place, the carried bytes just before it: a file
        // read directly is written there by the disk, not copied (the chunk's text starts
        // after `pad` bytes)
        let pad = (block.as_ptr() as usize + kept).next_multiple_of(direct::ALIGN)
            - (block.as_ptr() as usize + kept);
        block[pad..pad + kept].copy_from_slice(&carry);
        carry.clear();
        let read_at = pad + kept;
        let n = read_full(
            &mut stream,
            &mut block[read_at..read_at + CHUNK_BYTES as usize],
        )
        .with_context(|| format!("{name}: reading after line {lines}"))?;
        block.truncate(read_at + n);
        let n = n as u64;
        total += n;
        if total > cap {
            bail!(
                "{name}: more than {cap} bytes {what}, the limit for one file (raise it with --max-{}-bytes)",
                if gz { "inflated" } else { "input" }
            );
        }
        let end = n < CHUNK_BYTES;
        if !end {
            // whole lines only: the rest goes with the next chunk
            match memchr::memrchr(b'\n', &block[pad..]) {
                Some(i) => {
                    carry.extend_from_slice(&block[pad + i + 1..]);
                    block.truncate(pad + i + 1);
                }
                None => {
                    block.drain(..pad);
                    carry = block;
                    continue;
                }
            }
        }
        if block.len() == pad {
            buffers.put(block);
        } else {
            let chunk = Chunk::of(block, pad, &mut lossy);
            lines += chunk.spans.len() as u64;
            each(chunk)?;
        }
        if end {
            break;
        }
    }
    Ok((total, lossy))
}

/// Reads into all of `buf` unless the stream ends first: the bytes read.
fn read_full(stream: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match stream.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads `path` line by line into `each` (the baseline's lines).
fn read_lines(
    path: &Path,
    lim: &Limits,
    r: &mut Reading,
    mut each: impl FnMut(&str),
) -> Result<()> {
    let buffers = Buffers::default();
    let (bytes, lossy) = read_chunks(path, lim, &buffers, &DirectReaders::default(), |c| {
        c.lines().for_each(&mut each);
        buffers.put(c.text.into_bytes());
        Ok(())
    })?;
    r.bytes += bytes;
    r.lossy_lines += lossy;
    Ok(())
}

/// A file's chunk, read and prepared on a worker thread.
struct Prepared {
    file: usize,
    chunk: Chunk,
    lines: flare_log_diagnosis::Prepared,
    /// The file's last chunk: (bytes, lossy lines), or its error.
    end: Option<Result<(u64, u64)>>,
}

/// Chunks read ahead of the fold at most (the file being folded is never held back): a
/// few MB, so the fold reads lines their preparing left in the cache...
const AHEAD: usize = 16;
/// ... and more per reader reading a file directly: it has no read-ahead, so each needs
/// room to have its next read outstanding while the fold works through the files before
/// its own (a per-rank file is a few chunks).
const AHEAD_PER_DIRECT_READER: usize = 8;

/// Reader threads at least when files are read directly (the reads a disk needs
/// outstanding: with the pass at 21 CPU-seconds for the 10,240-rank job, 16 readers read
/// it cold in 12.8-13.5 s on this machine's virtual disk, 8 in 13.2-15.8 s), and at most
/// (past it the one fold is the limit).
const DIRECT_READERS_MIN: usize = 16;
const READERS_MAX: usize = 64;

/// Where the readers and the fold stand, shared.
#[derive(Default)]
struct Flow {
    /// The file being folded.
    folding: usize,
    /// Chunks sent and not yet folded.
    ahead: usize,
    /// Readers waiting for room (a wake-up is a system call and a context switch: only
    /// waiting readers are woken, one per chunk folded).
    waiting: usize,
    /// The fold gave up.
    stopped: bool,
}

impl Flow {
    /// A chunk taken to fold: whether a reader waits for its room.
    fn room_freed(&mut self) -> bool {
        self.ahead -= 1;
        self.waiting > 0
    }
}

/// Reads the job's files on `threads` threads (each reads a file and prepares its
/// lines: prefixes, the scan, signatures), folding them into `c` in file order here.
fn read_parallel(
    files: &[PathBuf],
    lim: &Limits,
    c: &mut Collector,
    r: &mut Reading,
    threads: usize,
) -> Result<()> {
    use std::sync::{mpsc, Condvar, Mutex};
    let ids: Vec<usize> = files
        .iter()
        .map(|f| c.file(&f.display().to_string()))
        .collect();
    let state = Mutex::new(Flow::default());
    let turn = Condvar::new();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let buffers = Buffers::default();
    let direct = &DirectReaders::default();
    let (tx, rx) = mpsc::channel::<Prepared>();
    std::thread::scope(|s| -> Result<()> {
        for _ in 0..threads {
            let (tx, state, turn, next, buffers) = (tx.clone(), &state, &turn, &next, &buffers);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= files.len() {
                    return;
                }
                let mut prep =
                    flare_log_diagnosis::LinePreparer::for_path(&files[i].display().to_string());
                let send = |p: Prepared| -> Result<()> {
                    let mut st = state.lock().expect("not poisoned");
                    while st.ahead >= AHEAD + AHEAD_PER_DIRECT_READER * direct.now()
                        && st.folding != i
                        && !st.stopped
                    {
                        st.waiting += 1;
                        st = turn.wait(st).expect("not poisoned");
                        st.waiting -= 1;
                    }
                    if st.stopped {
                        bail!("stopped");
                    }
                    st.ahead += 1;
                    drop(st);
                    let _ = tx.send(p);
                    Ok(())
                };
                let result = read_chunks(&files[i], lim, buffers, direct, |chunk| {
                    let lines = prep.prepare(chunk.lines());
                    send(Prepared {
                        file: i,
                        chunk,
                        lines,
                        end: None,
                    })
                });
                if state.lock().expect("not poisoned").stopped {
                    return;
                }
                let _ = send(Prepared {
                    file: i,
                    chunk: Chunk::default(),
                    lines: prep.prepare([]),
                    end: Some(result),
                });
            });
        }
        drop(tx);
        let fold = |c: &mut Collector, r: &mut Reading| -> Result<()> {
            let mut pending: std::collections::BTreeMap<
                usize,
                std::collections::VecDeque<Prepared>,
            > = Default::default();
            let mut current = 0;
            while current < files.len() {
                let p = rx.recv().context("a reader thread ended early")?;
                pending.entry(p.file).or_default().push_back(p);
                while let Some(p) = pending.get_mut(&current).and_then(|q| q.pop_front()) {
                    // a chunk's room is free: one waiting reader may send
                    if state.lock().expect("not poisoned").room_freed() {
                        turn.notify_one();
                    }
                    c.fold(ids[current], p.chunk.lines(), p.lines);
                    buffers.put(p.chunk.text.into_bytes());
                    if let Some(end) = p.end {
                        let (bytes, lossy) = end?;
                        r.bytes += bytes;
                        r.lossy_lines += lossy;
                        c.end_file(ids[current]);
                        pending.remove(&current);
                        current += 1;
                        // the next file's reader sends whatever the room: it may be waiting
                        let mut st = state.lock().expect("not poisoned");
                        st.folding = current;
                        if st.waiting > 0 {
                            turn.notify_all();
                        }
                    }
                }
            }
            Ok(())
        };
        let result = fold(c, r);
        if result.is_err() {
            // the readers stop instead of waiting for a fold that will not come
            state.lock().expect("not poisoned").stopped = true;
            turn.notify_all();
        }
        result
    })
}

/// Keeps freed memory in the process: each chunk's buffers (its lines, their spans and
/// what was read of them, hundreds of KB) are freed after the fold, and glibc would hand
/// such blocks back to the system and take the page faults again for the next chunk: a
/// tenth of the run's time on a large job.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; any value is valid.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

/// Reads the inputs and diagnoses them.
pub fn diagnose_paths(
    paths: &[PathBuf],
    baseline: &[PathBuf],
    lim: &Limits,
) -> Result<(LogDiagnosis, Vec<String>)> {
    let listed = flare_import::text_logs::list_log_files(paths, lim)?;
    if listed.files.is_empty() {
        bail!(
            "no log files under {}: expected .log, .txt, .out, .err, .dmesg or extension-less files{}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            if listed.skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} other files skipped)", listed.skipped.len())
            }
        );
    }
    diagnose_listed(listed, baseline, lim)
}

/// Reads the listed log files (at least one) and diagnoses them.
pub fn diagnose_listed(
    listed: flare_import::text_logs::LogFiles,
    baseline: &[PathBuf],
    lim: &Limits,
) -> Result<(LogDiagnosis, Vec<String>)> {
    let mut r = Reading {
        skipped: listed.skipped,
        ..Reading::default()
    };
    let files = listed.files;
    keep_freed_memory();
    let base_files = flare_import::text_logs::list_log_files(baseline, lim)?.files;
    let mut c = Collector::new(flare_log_diagnosis::Limits::default());
    for f in &base_files {
        read_lines(f, lim, &mut r, |l| c.baseline_line(l))?;
    }
    // twice the cores: a reader waiting for the disk leaves its core to another; and when
    // the files are read directly (no read-ahead: each reader waits for its reads), never
    // fewer than a disk needs reads outstanding
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let least = if super::direct::mostly_cold(&files) {
        DIRECT_READERS_MIN
    } else {
        1
    };
    let threads = (2 * cores).clamp(least, READERS_MAX);
    read_parallel(&files, lim, &mut c, &mut r, threads.min(files.len()).max(1))?;
    let d = diagnose(c.finish());
    let mut notes = Vec::new();
    if r.lossy_lines > 0 {
        notes.push(format!(
            "{} lines were not UTF-8 and were decoded lossily",
            r.lossy_lines
        ));
    }
    if !r.skipped.is_empty() {
        notes.push(format!(
            "{} files were skipped as not logs (by name), e.g. {}",
            r.skipped.len(),
            r.skipped[0]
        ));
    }
    Ok((d, notes))
}

/// The findings document of a log diagnosis.
pub fn document(
    paths: &[PathBuf],
    d: &LogDiagnosis,
    mut notes: Vec<String>,
    ms: f64,
) -> FindingsDocument {
    let id = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let world = d.ranks.iter().next_back().map_or(0, |r| r + 1);
    let job = JobSummary {
        id,
        source: "logs".into(),
        world_size: world,
        ranks_with_data: d.ranks.len(),
        missing_ranks: Vec::new(),
        nodes: (!d.hosts.is_empty()).then_some(d.hosts.len()),
        ..JobSummary::default()
    };
    let mut doc = FindingsDocument::new(job, d.findings.clone(), d.lines > 0);
    notes.extend(d.notes.iter().cloned());
    notes.insert(
        0,
        format!(
            "read {} files, {} lines, from {} ranks and {} hosts",
            d.files,
            d.lines,
            d.ranks.len(),
            d.hosts.len()
        ),
    );
    doc.notes = notes;
    doc.diagnosis_ms = Some(ms);
    doc
}

pub fn run(a: DiagnoseArgs) -> Result<ExitCode> {
    super::quiet_on_broken_pipe(diagnose_and_print(a))
}

fn diagnose_and_print(a: DiagnoseArgs) -> Result<ExitCode> {
    let lim = Limits {
        max_input_bytes: a.max_input_bytes,
        max_inflated_bytes: a.max_inflated_bytes,
        max_files: a.max_files,
    };
    let t = Instant::now();
    let (d, notes) = diagnose_paths(&a.paths, &a.baseline, &lim)?;
    let doc = document(&a.paths, &d, notes, t.elapsed().as_secs_f64() * 1e3);
    let text = if a.json {
        doc.to_json() + "\n"
    } else {
        present::logs_text(&doc)
    };
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `path` as the chunks give them back (each chunk's buffer handed back
    /// for the next), the bytes read and the lines decoded lossily.
    fn read_back(path: &Path, buffers: &Buffers) -> (Vec<String>, u64, u64) {
        let mut back: Vec<String> = Vec::new();
        let (bytes, lossy) = read_chunks(
            path,
            &Limits::default(),
            buffers,
            &DirectReaders::default(),
            |c| {
                back.extend(c.lines().map(str::to_string));
                buffers.put(c.text.into_bytes());
                Ok(())
            },
        )
        .expect("read");
        (back, bytes, lossy)
    }

    /// Lines come back whole and in order however the chunks cut them: a line split by
    /// a chunk's end, a line longer than two chunks, CRLF ends, a last line without an
    /// end; each file read through buffers the one before handed back.
    #[test]
    fn chunks_give_back_every_line_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let chunk = CHUNK_BYTES as usize;
        let mut lines: Vec<String> = (0..40_000)
            .map(|i| format!("[rank{}]: step {i} loss {}", i % 8, "x".repeat(i % 37)))
            .collect();
        lines.insert(20_000, "long ".repeat(2 * chunk / 5 + 3));
        lines.insert(5, "crlf line".to_string());
        let mut text = lines.join("\n");
        text = text.replacen("crlf line\n", "crlf line\r\n", 1);
        let buffers = Buffers::default();
        for (name, body) in [("a.log", text.clone()), ("b.log", format!("{text}\n"))] {
            let path = dir.path().join(name);
            std::fs::write(&path, &body).expect("write");
            let (back, bytes, lossy) = read_back(&path, &buffers);
            assert_eq!((bytes, lossy), (body.len() as u64, 0), "{name}");
            assert_eq!(back.len(), lines.len(), "{name}");
            assert!(back == lines, "{name}: a line differs");
        }
    }

    /// Lines that are not UTF-8 come back decoded lossily and counted, the others as
    /// they are, whatever bytes the reused buffers held before the chunk's text.
    #[test]
    fn lines_that_are_not_utf8_come_back_decoded_and_counted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut body: Vec<u8> = Vec::new();
        let mut want: Vec<String> = Vec::new();
        for i in 0..30_000 {
            let mut line = format!("[rank{}]: step {i} ", i % 8).into_bytes();
            if i % 5_000 == 7 {
                line.extend_from_slice(&[0xff, 0xfe, b'x', 0xc3]);
            }
            want.push(String::from_utf8_lossy(&line).into_owned());
            body.extend_from_slice(&line);
            body.push(b'\n');
        }
        let path = dir.path().join("rank0.log");
        std::fs::write(&path, &body).expect("write");
        let buffers = Buffers::default();
        // buffers that held bytes that are not UTF-8 where the padding goes
        for _ in 0..4 {
            buffers.put(vec![0xff; 2 * CHUNK_BYTES as usize]);
        }
        let (back, bytes, lossy) = read_back(&path, &buffers);
        assert_eq!((bytes, lossy), (body.len() as u64, 6));
        assert!(back == want, "a line differs");
    }
}
