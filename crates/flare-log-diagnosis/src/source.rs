//! What a log file is, from its path: a rank's output, a host's kernel log, a scheduler's
//! output, and which rank and host it belongs to. Launchers lay logs out in a few ways,
//! and the names are read generally rather than per launcher:
//!
//! | layout | example | gives |
//! |---|---|---|
//! | torchrun `--log-dir` | `logs/<run>/attempt_0/3/stderr.log` | local rank 3 |
//! | a file per rank | `rank3.log`, `rank_03.txt`, `train-rank-3.err` | global rank |
//! | a file per local rank | `local_rank3.log`, `localrank-3.out` | local rank |
//! | a folder per host | `node-17/rank3.log`, `hosts/10.0.0.5/...` | host |
//! | Slurm | `slurm-1234.out`, `slurm-1234_5.err` | scheduler output (`srun -l` task ids inside) |
//! | Kubernetes pods | `job-worker-3.log`, `job-master-0.log` | host (the pod) |
//! | kernel logs | `dmesg.txt`, `node-17.dmesg`, `kern.log`, `dmesg-node17.log`, `journal.txt` | host's kernel |
//!
//! Lines can say more (their prefixes, see `origin`), and what a line says wins.

/// What kind of log a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// Output of training processes (one rank, or a launcher's combined console).
    Process,
    /// A host's kernel or system log (dmesg, kern.log, syslog, journald).
    System,
    /// A scheduler's output for the job (Slurm's `slurm-<job>.out`).
    Scheduler,
}

/// What a file's path says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSource {
    pub kind: FileKind,
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<String>,
    /// The torchrun agent's log folder (`.../attempt_0`) the file is in: one node's
    /// processes, whose global ranks are consecutive from the node's first.
    pub agent: Option<String>,
}

const SYSTEM_WORDS: &[&str] = &["dmesg", "kern", "kernel", "syslog", "messages", "journal"];

/// The number right after `word` (and an optional `-`, `_` or `.`) in `s`.
fn number_after(s: &str, word: &str) -> Option<u32> {
    let mut from = 0;
    while let Some(i) = s[from..].find(word) {
        let at = from + i;
        // `word` must start the name or follow a separator (`prerank3` is not rank 3)
        let starts = at == 0 || !s.as_bytes()[at - 1].is_ascii_alphabetic();
        let mut rest = &s[at + word.len()..];
        rest = rest.strip_prefix(['-', '_', '.']).unwrap_or(rest);
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if starts && digits > 0 && digits <= 7 {
            return rest[..digits].parse().ok();
        }
        from = at + word.len();
    }
    None
}

/// A folder or file stem that names a host: `node-17`, `gpu17`, `dgx-a100-03`,
/// `10.0.0.5`, `worker-3` (a pod); not `gpu_error_2nd`.
fn host_like(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let ip = lower.split('.').count() == 4
        && lower
            .split('.')
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()));
    if ip {
        return true;
    }
    const HOST_WORDS: &[&str] = &[
        "node", "host", "gpu", "worker", "master", "compute", "dgx", "cn", "server", "machine",
    ];
    // cluster hosts are numbered: the first label ends in its index (`node17.cluster`),
    // which a folder named for what it holds (`gpu_error_2nd`) does not
    let label = lower.split('.').next().unwrap_or("");
    label.bytes().last().is_some_and(|b| b.is_ascii_digit())
        && HOST_WORDS.iter().any(|w| lower.starts_with(w))
        && lower
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && number_after(&lower, "rank").is_none()
}

/// The file's stem: its name without the extensions that say it is a log or compressed.
fn stem(name: &str) -> &str {
    let mut s = name;
    loop {
        let before = s;
        for ext in [
            ".gz", ".zst", ".log", ".txt", ".out", ".err", ".dmesg", ".json",
        ] {
            if s.len() > ext.len() && s.to_ascii_lowercase().ends_with(ext) {
                s = &s[..s.len() - ext.len()];
            }
        }
        if s == before {
            return s;
        }
    }
}

/// What `path` says about the log it names. `path` uses `/` or the platform's separator.
pub fn classify(path: &str) -> FileSource {
    let parts: Vec<&str> = path
        .split(['/', '\\'])
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let name = parts.last().copied().unwrap_or("");
    let lower_name = name.to_ascii_lowercase();
    let lower_stem = stem(&lower_name).to_string();
    let dirs = &parts[..parts.len().saturating_sub(1)];

    let mut src = FileSource {
        kind: FileKind::Process,
        rank: None,
        local_rank: None,
        host: None,
        agent: None,
    };
    if lower_name.starts_with("slurm-") || lower_name.starts_with("slurm_") {
        src.kind = FileKind::Scheduler;
    }
    let system_word = SYSTEM_WORDS.iter().find(|w| {
        lower_stem
            .split(['-', '_', '.'])
            .any(|part| part == **w || (part.starts_with(**w) && part.len() <= w.len() + 2))
    });
    if system_word.is_some() || name.ends_with(".dmesg") {
        src.kind = FileKind::System;
        // `node-17.dmesg`, `dmesg-node17`, `node17_kern`: the stem less the system word
        src.host = host_beside_word(stem(name));
    }

    // torchrun --log-dir: .../attempt_<n>/<local_rank>/{stdout,stderr}.log
    if let [.., attempt, local, _] = parts.as_slice() {
        if attempt.starts_with("attempt_") && local.bytes().all(|b| b.is_ascii_digit()) {
            src.local_rank = local.parse().ok();
            src.agent = Some(parts[..parts.len() - 2].join("/"));
        }
    }
    if src.kind != FileKind::System {
        if let Some(r) = number_after(&lower_stem, "local_rank")
            .or_else(|| number_after(&lower_stem, "localrank"))
            .or_else(|| number_after(&lower_stem, "local-rank"))
        {
            src.local_rank = Some(r);
        } else if let Some(r) = number_after(&lower_stem, "rank") {
            src.rank = Some(r);
        } else if host_like(stem(name)) {
            src.host = Some(stem(name).to_string());
        } else if let Some(pod) = pod_name(stem(name)) {
            src.host = Some(pod.to_string());
        }
    }
    // a folder that names a host, nearest first
    if src.host.is_none() {
        if let Some(d) = dirs.iter().rev().find(|d| host_like(d)) {
            src.host = Some(d.to_string());
        }
    }
    src
}

/// `dmesg-node17` -> `node17`, `node-17_kern` -> `node-17`, `dmesg` -> none.
fn host_beside_word(stem: &str) -> Option<String> {
    let lower = stem.to_ascii_lowercase();
    for w in SYSTEM_WORDS {
        for sep in ['-', '_', '.'] {
            if let Some(rest) = lower.strip_prefix(&format!("{w}{sep}")) {
                return Some(stem[stem.len() - rest.len()..].to_string());
            }
            if let Some(rest) = lower.strip_suffix(&format!("{sep}{w}")) {
                return Some(stem[..rest.len()].to_string());
            }
        }
    }
    let is_word = SYSTEM_WORDS.iter().any(|w| lower.starts_with(w));
    (!is_word && !lower.is_empty()).then(|| stem.to_string())
}

/// A Kubernetes training pod's name: `<job>-worker-3`, `<job>-master-0`,
/// `<job>-launcher`, with a `-<suffix>` after.
fn pod_name(stem: &str) -> Option<&str> {
    let lower = stem.to_ascii_lowercase();
    for role in ["-worker-", "-master-", "-node-"] {
        if let Some(i) = lower.find(role) {
            let after = &lower[i + role.len()..];
            if after.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
                return Some(stem);
            }
        }
    }
    None
}

/// Whether a file name says it holds log text (or says nothing: no extension).
pub fn is_log_file_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let lower = lower.strip_suffix(".gz").unwrap_or(&lower);
    // rotated logs: `train.log.1`
    let base = match lower.rsplit_once('.') {
        Some((b, n)) if n.bytes().all(|c| c.is_ascii_digit()) && !n.is_empty() => b,
        _ => lower,
    };
    let Some((_, ext)) = base.rsplit_once('.') else {
        return !base.starts_with('.');
    };
    matches!(
        ext,
        "log" | "txt" | "out" | "err" | "dmesg" | "stdout" | "stderr" | "journal" | "messages"
    ) || ext.bytes().all(|c| c.is_ascii_digit())
        // `journalctl -o json > node-17.journal.json`: JSON lines a name says are a journal
        || (matches!(ext, "json" | "jsonl") && base.contains("journal"))
}

/// Whether the first bytes of a file look like text: no NUL byte and few control bytes
/// (a pickle, an image or a compressed stream fail).
pub fn looks_like_text(head: &[u8]) -> bool {
    if head.contains(&0) {
        return false;
    }
    let odd = head
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x1b))
        .count();
    odd * 20 <= head.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        use FileKind::*;
        type Case<'a> = (&'a str, FileKind, Option<u32>, Option<u32>, Option<&'a str>);
        let cases: &[Case] = &[
            (
                "logs/none_abc/attempt_0/3/stderr.log",
                Process,
                None,
                Some(3),
                None,
            ),
            ("run/rank3.log", Process, Some(3), None, None),
            ("run/rank_03.txt", Process, Some(3), None, None),
            ("run/train-rank-12.err", Process, Some(12), None, None),
            ("run/local_rank5.log", Process, None, Some(5), None),
            (
                "run/node-17/rank3.log",
                Process,
                Some(3),
                None,
                Some("node-17"),
            ),
            (
                "hosts/10.0.0.5/out.log",
                Process,
                None,
                None,
                Some("10.0.0.5"),
            ),
            ("slurm-1234.out", Scheduler, None, None, None),
            ("slurm-1234_5.err", Scheduler, None, None, None),
            (
                "pods/llama-worker-3.log",
                Process,
                None,
                None,
                Some("llama-worker-3"),
            ),
            (
                "pods/pytorchjob-master-0.txt",
                Process,
                None,
                None,
                Some("pytorchjob-master-0"),
            ),
            ("dmesg.txt", System, None, None, None),
            ("node-17.dmesg", System, None, None, Some("node-17")),
            ("logs/dmesg-node17.log", System, None, None, Some("node17")),
            (
                "gpu-node-3/kern.log",
                System,
                None,
                None,
                Some("gpu-node-3"),
            ),
            ("journal.txt", System, None, None, None),
            ("console.log", Process, None, None, None),
            ("node17.log", Process, None, None, Some("node17")),
            ("prerank3.log", Process, None, None, None),
            ("gpu_error_2nd/fault.log", Process, None, None, None),
            (
                "node17.cluster.local/out.log",
                Process,
                None,
                None,
                Some("node17.cluster.local"),
            ),
        ];
        assert_eq!(
            classify("logs/none_abc/attempt_0/3/stderr.log")
                .agent
                .as_deref(),
            Some("logs/none_abc/attempt_0")
        );
        for (path, kind, rank, local, host) in cases {
            let s = classify(path);
            assert_eq!(
                (s.kind, s.rank, s.local_rank, s.host.as_deref()),
                (*kind, *rank, *local, *host),
                "{path}"
            );
        }
    }

    #[test]
    fn log_names() {
        for yes in [
            "rank0.log",
            "stderr.log",
            "slurm-12.out",
            "x.err",
            "node3.dmesg",
            "dmesg",
            "train.log.1",
            "console.txt.gz",
            "stdout",
            "node-17.journal.json",
            "journal.jsonl",
        ] {
            assert!(is_log_file_name(yes), "{yes}");
        }
        for no in [
            "truth.json",
            "trace.flare",
            "model.pt",
            "a.parquet",
            "x.json.gz",
            "rank0.pt.trace.json",
            ".hidden",
        ] {
            assert!(!is_log_file_name(no), "{no}");
        }
    }

    #[test]
    fn text_and_binary() {
        assert!(looks_like_text(b"[rank0]: step 3\n\tat x\n"));
        assert!(!looks_like_text(b"\x80\x02}q\x00(X\x07\x00\x00\x00version"));
        assert!(looks_like_text(b""));
    }
}
