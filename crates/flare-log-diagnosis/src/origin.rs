//! Where one line came from, read from its prefixes: which rank, host and GPU wrote it and
//! when. Launchers and libraries stack prefixes, and each is peeled in turn:
//!
//! | prefix | written by | gives |
//! |---|---|---|
//! | `[rank3]:` | torchrun's line prefix, PyTorch's C++ logs | global rank |
//! | `[default3]:` | torchrun `--tee` (role name + local rank) | local rank |
//! | `[1,3]<stderr>:` | `mpirun --tag-output` | global rank |
//! | `3: ` | `srun -l` (task id) | global rank (files without a rank of their own) |
//! | `node-17: ` | pdsh (DeepSpeed's multi-node runner) | host |
//! | `node-17:1234:1290 [3] NCCL` | NCCL's debug output | host, GPU |
//! | `[E1125 10:00:00.123 ...]`, `E1125 10:00:00.123 1234 f.cc:1]` | glog (PyTorch C++) | level, time |
//! | `2024-01-02 03:04:05,678`, `[2024-01-02 03:04:05]` | Python logging, Megatron | time |
//! | `Jan  2 03:04:05 node-17 kernel:` | syslog, journald short | time, host |
//! | `2024-01-02T03:04:05.678+00:00 node-17 kernel:` | rsyslog RFC 3339, journald short-iso | time, host |
//! | `2024-01-02T03:04:05.678Z stderr F` | a container's log as kubelet keeps it (CRI) | time |
//! | `[12345.678901]`, `[Tue Jan  2 03:04:05 2024]` | dmesg, dmesg -T | time |
//! | `kern  :err   : ` | dmesg -x (facility and level) | nothing; the time after it is read |
//! | `{"__REALTIME_TIMESTAMP":"…","_HOSTNAME":"node-17",…,"MESSAGE":"…"}` | `journalctl -o json` | time, host; the message is its `MESSAGE` |
//! | `01/02/2024 03:04:05 - INFO -` | Hugging Face's example scripts (`%m/%d/%Y`) | time |
//! | `[titan] 2025-04-14 22:55:21,491 -` | torchtitan (a tag before a time) | time |
//! | `[NeMo I 2024-01-02 03:04:05 exp_manager:394]` | NeMo | time |
//! | `(RayTrainWorker pid=3812, ip=10.0.0.5)` | Ray | host (its address), pid |
//! | `[pod/trainer-worker-3/pytorch]` | `kubectl logs --prefix` | host (the pod) |
//!
//! Ranks, hosts and GPUs named inside the message itself (`[Rank 3]`, `peer 10.0.0.5`)
//! are read by the signature that matched the line.

use crate::time::{self, Stamp};

/// What a line's prefixes say about it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Origin<'a> {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<&'a str>,
    /// The CUDA device NCCL names (`[3]` in its prefix).
    pub local_gpu: Option<u32>,
    /// The process id NCCL's prefix names.
    pub pid: Option<u32>,
    pub time: Option<Stamp>,
    /// The timestamp as written.
    pub time_text: Option<&'a str>,
    /// Where the message starts, after the prefixes.
    pub message: &'a str,
}

/// An [`Origin`] with its text as offsets into its line, to send it to another thread
/// beside the line and read it back there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OriginAt {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    host: Option<(u32, u32)>,
    pub local_gpu: Option<u32>,
    pub pid: Option<u32>,
    pub time: Option<Stamp>,
    time_text: Option<(u32, u32)>,
    message: u32,
}

/// Where `part` (a slice of `line`) starts and ends in it.
fn span(line: &str, part: &str) -> (u32, u32) {
    let start = part.as_ptr() as usize - line.as_ptr() as usize;
    (start as u32, (start + part.len()) as u32)
}

impl<'a> Origin<'a> {
    /// The origin as offsets into `line`, the line it was read from.
    pub fn at(&self, line: &str) -> OriginAt {
        OriginAt {
            rank: self.rank,
            local_rank: self.local_rank,
            host: self.host.map(|h| span(line, h)),
            local_gpu: self.local_gpu,
            pid: self.pid,
            time: self.time,
            time_text: self.time_text.map(|t| span(line, t)),
            message: span(line, self.message).0,
        }
    }
}

impl OriginAt {
    /// Where the message starts in its line (a journald entry's is inside its JSON).
    pub(crate) fn message_at(&self) -> usize {
        self.message as usize
    }

    /// The origin again, over the line it was read from.
    pub fn of<'a>(&self, line: &'a str) -> Origin<'a> {
        let part = |(a, b): (u32, u32)| &line[a as usize..b as usize];
        Origin {
            rank: self.rank,
            local_rank: self.local_rank,
            host: self.host.map(part),
            local_gpu: self.local_gpu,
            pid: self.pid,
            time: self.time,
            time_text: self.time_text.map(part),
            message: &line[self.message as usize..],
        }
    }
}

/// Which reader read a stamp, to read it again at the same place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum StampReader {
    /// [`time::parse_at`]
    #[default]
    Any,
    /// [`time::parse_glog`]
    Glog,
}

impl StampReader {
    /// The stamp at `at` in `line`, and its length.
    pub(crate) fn read(self, line: &str, at: usize) -> Option<(Stamp, usize)> {
        match self {
            StampReader::Any => time::parse_at(line, at),
            StampReader::Glog => time::parse_glog(line, at),
        }
    }
}

/// Stamps a line's prefixes held at most for [`Stamps`] to note them all.
pub(crate) const MAX_STAMPS: usize = 3;

/// The stamps a parse read in a line's prefixes, each with its place (start, end) and
/// reader, and which became the line's time: what `shapes` reads again in a line of the
/// same shape.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stamps {
    pub(crate) n: usize,
    pub(crate) at: [(u32, u32, StampReader); MAX_STAMPS],
    /// Index of the line's time among them.
    pub(crate) chosen: Option<usize>,
    /// The prefixes held more stamps than are noted, or a form read without a place
    /// (journald's JSON): a line of the same shape cannot be read from these.
    pub(crate) incomplete: bool,
}

impl Stamps {
    /// Notes a stamp read at `text` (a slice of `line`); returns its index.
    fn note(&mut self, line: &str, text: &str, reader: StampReader) -> Option<usize> {
        if self.n == MAX_STAMPS {
            self.incomplete = true;
            return None;
        }
        let (a, b) = span(line, text);
        self.at[self.n] = (a, b, reader);
        self.n += 1;
        Some(self.n - 1)
    }
}

/// Whether a bare `3: ` may be read as `srun -l`'s task id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskPrefix {
    Allowed,
    #[default]
    Ignored,
}

/// Peels at most this many prefixes: no real line has more.
const MAX_PREFIXES: usize = 8;

/// Where `pat` (ASCII) starts within the first `max` bytes of `s`: prefixes are short, so
/// no search runs the length of a line.
fn find_within(s: &str, pat: &[u8], max: usize) -> Option<usize> {
    let b = s.as_bytes();
    let end = b.len().min(max + pat.len());
    match pat {
        [one] => b[..end].iter().position(|c| c == one),
        _ => b[..end].windows(pat.len()).position(|w| w == pat),
    }
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 7 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `[rank3]:` or `[default3]:` / `[trainer3]:` at the start: (is global, number, length).
fn bracket_rank(s: &str) -> Option<(bool, u32, usize)> {
    let rest = s.strip_prefix('[')?;
    // the first `]` closes it (a later `]:` would leave a `]` inside, never a rank)
    let close = find_within(rest, b"]", 24)?;
    if rest.as_bytes().get(close + 1) != Some(&b':') {
        return None;
    }
    let inner = &rest[..close];
    let split = inner.find(|c: char| c.is_ascii_digit())?;
    let (word, num) = inner.split_at(split);
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_') {
        return None;
    }
    let n = number(num)?;
    let global = word.eq_ignore_ascii_case("rank");
    Some((global, n, close + 3))
}

/// `[1,3]<stderr>:` (mpirun --tag-output): (rank, length).
fn mpirun_tag(s: &str) -> Option<(u32, usize)> {
    let rest = s.strip_prefix('[')?;
    let close = find_within(rest, b"]", 24)?;
    let (_job, rank) = rest[..close].split_once(',')?;
    let rank = number(rank)?;
    let after = &rest[close + 1..];
    let tag_end = after.find(">:")?;
    if !after.starts_with('<') || tag_end > 8 {
        return None;
    }
    Some((rank, 1 + close + 1 + tag_end + 2))
}

/// `3: ` (srun -l): (task, length).
fn task_id(s: &str) -> Option<(u32, usize)> {
    if !s.as_bytes().first()?.is_ascii_digit() {
        return None;
    }
    let colon = find_within(s, b": ", 8)?;
    let n = number(s[..colon].trim_start())?;
    Some((n, colon + 2))
}

/// Host names as schedulers write them: lower case (Kubernetes requires it; exception
/// names are CamelCase), with a digit.
fn is_host_name(h: &str) -> bool {
    h.len() <= 64
        && h.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && h.bytes().all(is_host_byte)
        && h.bytes().any(|b| b.is_ascii_digit())
        && h.bytes().any(|b| b.is_ascii_lowercase() || b == b'.')
}

fn is_host_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'_')
}

/// `node-17:1234:1290 [3] NCCL`: (host, pid, gpu, length up to NCCL).
fn nccl_prefix(s: &str) -> Option<(&str, u32, u32, usize)> {
    let space = find_within(s, b" ", 96)?;
    if s.as_bytes().get(space + 1) != Some(&b'[') {
        return None;
    }
    let head = &s[..space];
    let mut parts = head.rsplitn(3, ':');
    let tid = parts.next()?;
    let pid = parts.next()?;
    let host = parts.next()?;
    number(tid)?;
    let pid = number(pid)?;
    let rest = &s[space + 1..];
    let rest_inner = rest.strip_prefix('[')?;
    let close = rest_inner.find(']')?;
    let gpu = number(&rest_inner[..close])?;
    if host.is_empty() || host.contains(char::is_whitespace) {
        return None;
    }
    Some((host, pid, gpu, space + 1 + close + 2))
}

/// `host: ` (pdsh): (host, length).
fn pdsh_host(s: &str) -> Option<(&str, usize)> {
    // the first byte a host name cannot hold must be the `: ` (within 64 bytes)
    let b = s.as_bytes();
    let colon = b.iter().take(65).position(|&c| !is_host_byte(c))?;
    if b[colon] != b':' || b.get(colon + 1) != Some(&b' ') {
        return None;
    }
    let h = &s[..colon];
    is_host_name(h).then_some((h, colon + 2))
}

/// A framework's name tag before its time stamp, `[titan] 2025-04-14 22:55:21,491 - ...`
/// (torchtitan), read only where a time stamp follows: the stamp as [`leading_time`]
/// reads it, its length counted from the tag.
fn tag_before_time(s: &str) -> Option<(Stamp, &str, Option<&str>, usize)> {
    let rest = s.strip_prefix('[')?;
    let close = find_within(rest, b"]", 24)?;
    let tag = &rest[..close];
    if tag.is_empty()
        || !tag
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
    {
        return None;
    }
    let after = rest[close + 1..].strip_prefix(' ')?;
    let (stamp, text, host, len) = leading_time(after)?;
    Some((stamp, text, host, close + 3 + len))
}

/// Ray's prefix on a worker's line, `(RayTrainWorker pid=3812, ip=10.0.0.5) `: (the
/// node's address, the pid, length).
fn ray_prefix(s: &str) -> Option<(Option<&str>, Option<u32>, usize)> {
    let rest = s.strip_prefix('(')?;
    let close = find_within(rest, b")", 160)?;
    let inner = &rest[..close];
    let field = |key: &str| {
        inner
            .split([',', ' '])
            .find_map(|f| f.strip_prefix(key))
            .filter(|v| !v.is_empty())
    };
    let (ip, pid) = (field("ip="), field("pid=").and_then(number));
    if ip.is_none() && pid.is_none() {
        return None;
    }
    Some((ip, pid, close + 2))
}

/// `dmesg -x`'s facility and level, `kern  :err   : `: its length.
fn dmesg_level(s: &str) -> Option<usize> {
    const FACILITIES: &[&str] = &[
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "cron", "authpriv",
    ];
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
    ];
    let field = |s: &str, names: &[&str]| {
        let colon = find_within(s, b":", 12)?;
        names.contains(&s[..colon].trim_end()).then_some(colon + 1)
    };
    let a = field(s, FACILITIES)?;
    let b = field(&s[a..], LEVELS)?;
    let rest = &s[a + b..];
    let spaces = rest.len() - rest.trim_start_matches(' ').len();
    (spaces > 0).then_some(a + b + spaces)
}

/// `kubectl logs --prefix`: `[pod/trainer-worker-3/pytorch] `: (the pod, length).
fn kubectl_prefix(s: &str) -> Option<(&str, usize)> {
    let rest = s.strip_prefix("[pod/")?;
    let close = find_within(rest, b"] ", 320)?;
    let (pod, _container) = rest[..close].split_once('/')?;
    (!pod.is_empty()).then_some((pod, 5 + close + 2))
}

/// NeMo's header, `[NeMo I 2024-01-02 03:04:05 exp_manager:394] `: (time, its text,
/// length through the `]`).
fn nemo(s: &str) -> Option<(Stamp, &str, usize)> {
    let rest = s.strip_prefix("[NeMo ")?;
    let level = rest.as_bytes().first()?;
    if !matches!(level, b'I' | b'W' | b'E' | b'D' | b'C') || rest.as_bytes().get(1) != Some(&b' ') {
        return None;
    }
    let (stamp, n) = time::parse_at(rest, 2)?;
    let close = find_within(&rest[2 + n..], b"]", 96)? + 2 + n;
    Some((stamp, &rest[2..2 + n], 6 + close + 1))
}

/// glog: `E1125 10:00:00.123456 1234 file.cc:12]` or bracketed `[E1125 10:00:00.123 ...]`
/// (PyTorch writes the month unpadded: `E321` is March 21): (time, its text, length
/// through the closing `]`).
fn glog(s: &str) -> Option<(Stamp, &str, usize)> {
    let (inner, offset) = match s.strip_prefix('[') {
        Some(r) => (r, 1),
        None => (s, 0),
    };
    let level = inner.as_bytes().first()?;
    if !matches!(level, b'I' | b'W' | b'E' | b'F' | b'D')
        || !inner.as_bytes().get(1).is_some_and(u8::is_ascii_digit)
    {
        return None;
    }
    let (stamp, n) = time::parse_glog(inner, 1)?;
    let close = inner[1 + n..].find(']')? + 1 + n;
    // the header is short: pid, file:line, maybe a thread name
    if close > 1 + n + 120 {
        return None;
    }
    Some((stamp, &inner[1..1 + n], offset + close + 1))
}

/// A leading timestamp, bracketed or not, with a following `host prog[pid]:` for syslog:
/// (time, its text, host, length).
fn leading_time(s: &str) -> Option<(Stamp, &str, Option<&str>, usize)> {
    let bracketed = s.starts_with('[');
    let start = if bracketed {
        1 + s[1..].len() - s[1..].trim_start().len()
    } else {
        0
    };
    let (stamp, n) = time::parse_at(s, start)?;
    let text = &s[start..start + n];
    let mut end = start + n;
    if bracketed {
        let close = find_within(&s[end..], b"]", 12)?;
        end += close + 1;
    }
    let mut host = None;
    // syslog / journald short: `Jan  2 03:04:05 node-17 kernel: ...`; rsyslog's and
    // journald's RFC 3339 forms: `2025-11-25T10:03:12.123456+00:00 node-17 kernel: ...`
    if !bracketed
        && (matches!(stamp, Stamp::Calendar { year: None, .. }) || time::is_rfc3339_offset(text))
    {
        let rest = &s[end..];
        let t = rest.trim_start();
        if let Some(sp) = find_within(t, b" ", 64) {
            let h = &t[..sp];
            let after = &t[sp + 1..];
            let tag_end = find_within(after, b": ", 40);
            if h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
                && tag_end.is_some_and(|e| e <= 40 && !after[..e].contains(' '))
            {
                host = Some(h);
                end += rest.len() - t.len() + sp + 1 + tag_end.unwrap_or(0) + 2;
            }
        }
    }
    // a container runtime's log (CRI, as kubelet keeps it under /var/log/containers):
    // `<RFC 3339 time> stdout|stderr F|P <the container's line>`
    if let Some(n) = cri_stream(&s[end..]).filter(|_| host.is_none()) {
        end += n;
    }
    // separators after a timestamp: ` - `, ` | `, `,`, `: `
    let rest = &s[end..];
    end += rest
        .bytes()
        .take_while(|b| matches!(b, b' ' | b'-' | b'|' | b',' | b':'))
        .count();
    Some((stamp, text, host, end))
}

/// What a journald JSON entry (`journalctl -o json`, one object per line) says.
struct JournalEntry<'a> {
    host: Option<&'a str>,
    time: Option<Stamp>,
    time_text: Option<&'a str>,
    message: &'a str,
}

/// A journald JSON entry's fields the diagnosis reads: `MESSAGE` (as written, escapes and
/// all: the signatures match it as text), `_HOSTNAME`, `__REALTIME_TIMESTAMP`.
fn journal_json(s: &str) -> Option<JournalEntry<'_>> {
    if !s.starts_with("{\"") {
        return None;
    }
    let message = json_string(s, "MESSAGE")?;
    let time_text = json_string(s, "__REALTIME_TIMESTAMP");
    Some(JournalEntry {
        host: json_string(s, "_HOSTNAME").filter(|h| !h.is_empty()),
        time: time_text
            .and_then(|t| t.parse().ok())
            .and_then(time::from_unix_micros),
        time_text,
        message,
    })
}

/// The program a journald JSON entry names (`SYSLOG_IDENTIFIER`, else the process's
/// `_COMM`), the syslog tag's program of a text log.
pub(crate) fn journal_program(s: &str) -> Option<&str> {
    if !s.starts_with("{\"") {
        return None;
    }
    json_string(s, "SYSLOG_IDENTIFIER").or_else(|| json_string(s, "_COMM"))
}

/// The text of a string field of a flat JSON object, between its quotes. A key is found
/// as `"KEY":"` after `{` or `,`: inside a string value every quote is escaped, so no
/// value can imitate it.
fn json_string<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let b = s.as_bytes();
    let mut from = 0;
    while let Some(i) = s[from..].find(key) {
        let at = from + i;
        from = at + key.len();
        let opens = at >= 2 && b[at - 1] == b'"' && matches!(b[at - 2], b'{' | b',');
        if !opens || !s[from..].starts_with("\":\"") {
            continue;
        }
        let start = from + 3;
        let mut i = start;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => return s.get(start..i),
                _ => i += 1,
            }
        }
        return None;
    }
    None
}

/// The length of a CRI log's stream and tag after its time (` stderr F `), if there.
fn cri_stream(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let stream = b.get(1..7)?;
    (b[0] == b' '
        && (stream == b"stdout" || stream == b"stderr")
        && b.get(7) == Some(&b' ')
        && matches!(b.get(8), Some(b'F' | b'P'))
        && matches!(b.get(9), Some(b' ') | None))
    .then_some(9)
}

/// Reads a line's prefixes.
pub fn parse(line: &str, task_prefix: TaskPrefix) -> Origin<'_> {
    parse_noting(line, task_prefix, &mut Stamps::default())
}

/// Reads a line's prefixes, noting in `stamps` the stamps it read.
pub(crate) fn parse_noting<'a>(
    line: &'a str,
    task_prefix: TaskPrefix,
    stamps: &mut Stamps,
) -> Origin<'a> {
    let mut o = Origin {
        message: line,
        ..Origin::default()
    };
    let mut s = line.trim_start();
    // pdsh's `host: ` comes before all else; later, `nvidia-nvswitch2: ` or `eth0: ` is a
    // kernel device's name
    let mut first_prefix = true;
    for _ in 0..MAX_PREFIXES {
        let Some(&first) = s.as_bytes().first() else {
            break;
        };
        if first != b'[' {
            // NCCL's host may be anything (`...-48` where a post redacted it)
            if let Some((host, pid, gpu, len)) = nccl_prefix(s) {
                o.host = Some(host);
                o.pid = Some(pid);
                o.local_gpu = Some(gpu);
                s = &s[len..];
                break; // the NCCL message follows
            }
            if let Some((ip, pid, len)) = (first == b'(').then(|| ray_prefix(s)).flatten() {
                o.host = o.host.or(ip);
                o.pid = o.pid.or(pid);
                s = s[len..].trim_start();
                continue;
            }
            if first == b'{' && first_prefix {
                if let Some(entry) = journal_json(s) {
                    stamps.incomplete = true;
                    o.host = entry.host;
                    o.time = entry.time;
                    o.time_text = entry.time_text;
                    o.message = entry.message;
                    return o;
                }
            }
            // every other prefix starts with `[`, a letter or a digit: a message that
            // does not is told at once, as most are after their prefixes
            if !first.is_ascii_alphanumeric() {
                break;
            }
        }
        if let Some((global, n, len)) = bracket_rank(s) {
            if global {
                o.rank = Some(n);
            } else {
                o.local_rank = Some(n);
            }
            s = &s[len..];
        } else if let Some((rank, len)) = mpirun_tag(s) {
            o.rank = Some(rank);
            s = &s[len..];
        } else if let Some((stamp, text, len)) = glog(s) {
            o.time = Some(stamp);
            o.time_text = Some(text);
            stamps.chosen = stamps.note(line, text, StampReader::Glog);
            s = &s[len..];
        } else if let Some((stamp, text, host, len)) =
            leading_time(s).or_else(|| tag_before_time(s))
        {
            let noted = stamps.note(line, text, StampReader::Any);
            if o.time.is_none() {
                o.time = Some(stamp);
                o.time_text = Some(text);
                stamps.chosen = noted;
            }
            if host.is_some() {
                o.host = host;
            }
            s = &s[len..];
        } else if let Some((task, len)) = task_id(s).filter(|&(_, len)| {
            o.rank.is_none()
                // where task ids are not read as ranks (yet: a file's first lines), one
                // before NCCL's prefix is still peeled, so its host is read
                && (task_prefix == TaskPrefix::Allowed || nccl_prefix(&s[len..]).is_some())
        }) {
            if task_prefix == TaskPrefix::Allowed {
                o.rank = Some(task);
            }
            s = &s[len..];
        } else if let Some((host, len)) = pdsh_host(s).filter(|_| o.host.is_none() && first_prefix)
        {
            // Slurm's step daemon writes `slurmstepd-<node>: error: ...`
            o.host = Some(host.strip_prefix("slurmstepd-").unwrap_or(host));
            s = &s[len..];
        } else if let Some(len) = dmesg_level(s).filter(|_| first_prefix) {
            s = &s[len..];
        } else if let Some((pod, len)) = kubectl_prefix(s).filter(|_| o.host.is_none()) {
            o.host = Some(pod);
            s = &s[len..];
        } else if let Some((stamp, text, len)) = nemo(s) {
            let noted = stamps.note(line, text, StampReader::Any);
            if o.time.is_none() {
                o.time = Some(stamp);
                o.time_text = Some(text);
                stamps.chosen = noted;
            }
            s = &s[len..];
        } else {
            break;
        }
        s = s.trim_start();
        first_prefix = false;
    }
    o.message = s.trim_start();
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        struct Case {
            line: &'static str,
            rank: Option<u32>,
            local_rank: Option<u32>,
            host: Option<&'static str>,
            gpu: Option<u32>,
            timed: bool,
            message: &'static str,
        }
        let c = |line, rank, local_rank, host, gpu, timed, message| Case {
            line,
            rank,
            local_rank,
            host,
            gpu,
            timed,
            message,
        };
        let cases = [
            c(
                "[rank3]:[E1125 10:00:00.123456789 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught",
                Some(3), None, None, None, true, "[Rank 3] Watchdog caught",
            ),
            c("[default5]:Traceback (most recent call last):", None, Some(5), None, None, false, "Traceback (most recent call last):"),
            c("[1,7]<stderr>:RuntimeError: x", Some(7), None, None, None, false, "RuntimeError: x"),
            c("12: iteration 5", Some(12), None, None, None, false, "iteration 5"),
            c(
                "node-17:1234:1290 [3] NCCL WARN NET/IB : Got completion",
                None, None, Some("node-17"), Some(3), false, "NCCL WARN NET/IB : Got completion",
            ),
            c(
                "worker-1: [rank9]: torch.OutOfMemoryError: CUDA out of memory.",
                Some(9), None, Some("worker-1"), None, false, "torch.OutOfMemoryError: CUDA out of memory.",
            ),
            c(
                "E1125 10:00:00.123456 1234 ProcessGroupNCCL.cpp:1]  Some NCCL operations",
                None, None, None, None, true, "Some NCCL operations",
            ),
            // rsyslog's RFC 3339 default and journalctl -o short-iso
            c(
                "2025-11-25T10:03:12.123456+00:00 gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
                None, None, Some("gpu-node-07"), None, true, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
            ),
            c(
                "2025-11-25T10:03:12+0000 gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79",
                None, None, Some("gpu-node-07"), None, true, "NVRM: Xid (PCI:0000:3b:00): 79",
            ),
            // an application's own offset time is followed by no host
            c(
                "2025-11-25T10:03:12.123+00:00 INFO: step 5",
                None, None, None, None, true, "INFO: step 5",
            ),
            // dmesg -x --time-format iso; the device's name is no host
            c(
                "kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Fatal, Link 32 egress non-posted PRIV error",
                None, None, None, None, true, "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Fatal, Link 32 egress non-posted PRIV error",
            ),
            c(
                "[   25.948274] nvidia-nvswitch1: SXid (PCI:0000:02:00.0): 22013, Non-fatal, Link 00 Minion Link DLREQ interrupt",
                None, None, None, None, true, "nvidia-nvswitch1: SXid (PCI:0000:02:00.0): 22013, Non-fatal, Link 00 Minion Link DLREQ interrupt",
            ),
            // pdsh's host before dmesg's time
            c(
                "b1360: [14280.445226] mlx5_core 0000:61:00.0: wait_func:1132:(pid 141181): CREATE_DCT(0x710) timeout. Will cause a leak of a command resource",
                None, None, Some("b1360"), None, true, "mlx5_core 0000:61:00.0: wait_func:1132:(pid 141181): CREATE_DCT(0x710) timeout. Will cause a leak of a command resource",
            ),
            // a job system's time with a colon, then mpirun's tag and NCCL's prefix
            c(
                "2019-06-02T16:13:44.884Z: [1,12]<stdout>:container-e275-1553839402050-12124-01-000057:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
                Some(12), None, Some("container-e275-1553839402050-12124-01-000057"), Some(0), true, "transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
            ),
            // journalctl -o json
            c(
                "{\"__CURSOR\":\"s=1a2b;i=1\",\"__REALTIME_TIMESTAMP\":\"1764064992123456\",\"_HOSTNAME\":\"gpu-node-07\",\"SYSLOG_IDENTIFIER\":\"kernel\",\"MESSAGE\":\"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\",\"PRIORITY\":\"3\"}",
                None, None, Some("gpu-node-07"), None, true, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
            ),
            // a container's log as kubelet keeps it (CRI)
            c(
                "2025-11-25T10:03:12.123456789Z stderr F [rank3]: RuntimeError: boom",
                Some(3), None, None, None, true, "RuntimeError: boom",
            ),
            c(
                "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog",
                Some(0), None, None, None, true, "[Rank 0] Watchdog",
            ),
            c(
                "W0409 07:28:49.531000 1359 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1365",
                None, None, None, None, true, "Sending process 1365",
            ),
            c(
                "[2026-04-22 21:34:20] mt-l-workflow:202016:202235 [0] misc/shmutils.cc:88 NCCL WARN Error",
                None, None, Some("mt-l-workflow"), Some(0), true, "misc/shmutils.cc:88 NCCL WARN Error",
            ),
            c("2024-01-02 03:04:05,678 - INFO - step 3", None, None, None, None, true, "INFO - step 3"),
            c("[2024-01-02 03:04:05] iteration 10/ 100", None, None, None, None, true, "iteration 10/ 100"),
            c(
                "Jan  2 03:04:05 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3b:00): 79",
                None, None, Some("gpu-node-17"), None, true, "NVRM: Xid (PCI:0000:3b:00): 79",
            ),
            c("[12345.678901] NVRM: Xid (PCI:0000:3b:00): 79", None, None, None, None, true, "NVRM: Xid (PCI:0000:3b:00): 79"),
            c("[Tue Jan  2 03:04:05 2024] NVRM: Xid", None, None, None, None, true, "NVRM: Xid"),
            c(
                "[titan] 2025-04-14 22:55:21,491 - root - INFO - step:  1  loss: 12.2521",
                None, None, None, None, true, "root - INFO - step:  1  loss: 12.2521",
            ),
            c(
                "[rank2]:[titan] 2025-04-14 22:55:21,491 - root - ERROR - x",
                Some(2), None, None, None, true, "root - ERROR - x",
            ),
            c(
                "[NeMo I 2024-01-02 03:04:05 exp_manager:394] Experiments will be logged at /results",
                None, None, None, None, true, "Experiments will be logged at /results",
            ),
            c(
                "01/02/2024 03:04:05 - INFO - __main__ - Training/evaluation parameters",
                None, None, None, None, true, "INFO - __main__ - Training/evaluation parameters",
            ),
            c(
                "(RayTrainWorker pid=3812, ip=10.0.0.5) [rank3]: torch.OutOfMemoryError: CUDA out of memory.",
                Some(3), None, Some("10.0.0.5"), None, false, "torch.OutOfMemoryError: CUDA out of memory.",
            ),
            c(
                "[pod/llama-worker-3/pytorch] [rank3]: RuntimeError: x",
                Some(3), None, Some("llama-worker-3"), None, false, "RuntimeError: x",
            ),
            // parentheses that are no Ray prefix are the message's own
            c("(see above) RuntimeError: x", None, None, None, None, false, "(see above) RuntimeError: x"),
            // a tag with no time after it is the message's own
            c("[INFO] step 3", None, None, None, None, false, "[INFO] step 3"),
            c(
                "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
                None, None, Some("...-48"), Some(0), false, "transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
            ),
            c("RuntimeError: CUDA error", None, None, None, None, false, "RuntimeError: CUDA error"),
            c("ValueError2: not a host", None, None, None, None, false, "ValueError2: not a host"),
            c("[rank0]: Traceback", Some(0), None, None, None, false, "Traceback"),
            c(
                "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s)",
                None, None, Some("gpu20-15"), None, false, "error: Detected 1 oom-kill event(s)",
            ),
        ];
        for k in cases {
            let o = parse(k.line, TaskPrefix::Allowed);
            assert_eq!(
                (
                    o.rank,
                    o.local_rank,
                    o.host,
                    o.local_gpu,
                    o.time.is_some(),
                    o.message
                ),
                (k.rank, k.local_rank, k.host, k.gpu, k.timed, k.message),
                "{}",
                k.line
            );
        }
        // a task id is read only where allowed
        assert_eq!(parse("3: x", TaskPrefix::Ignored).rank, None);
        // not a rank, but peeled so that NCCL's host behind it is read
        let o = parse(
            "1: compute-st-p4de24xlarge-2:4827:6900 [4] bootstrap.cc:77 NCCL WARN Message truncated : received 256 bytes instead of 4",
            TaskPrefix::Ignored,
        );
        assert_eq!((o.rank, o.host), (None, Some("compute-st-p4de24xlarge-2")));
        // offsets round-trip
        for line in [
            "node-17:1234:1290 [3] NCCL WARN x",
            "[rank3]:[E1125 10:00:00.1 a.cc:1] y",
            "plain",
        ] {
            let o = parse(line, TaskPrefix::Allowed);
            assert_eq!(o.at(line).of(line), o, "{line}");
        }
    }
}
