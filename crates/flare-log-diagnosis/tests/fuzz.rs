//! Any line, however malformed, is read without a panic: the prefix parser, the
//! signature table, the traceback and summary readers and the verdict.

use flare_log_diagnosis::lexicon::{scan, ScanCache};
use flare_log_diagnosis::{diagnose, Collector, Excerpter, Limits};
use proptest::prelude::*;

/// Pieces real lines are made of, to build lines near the formats' edges.
const PIECES: &[&str] = &[
    "[rank3]:",
    "[default1]:",
    "[1,2]<stderr>:",
    "12: ",
    "node-7: ",
    "host:12:34 [5] ",
    "NCCL WARN ",
    "[E1125 10:00:00.1 ProcessGroupNCCL.cpp:1] ",
    "E321 02:07:08.4 ",
    "2024-01-02 03:04:05,678 ",
    "Jan  2 03:04:05 h kernel: ",
    "[ 123.456] ",
    "[Tue Jan  2 03:04:05 2024] ",
    "NVRM: Xid (PCI:0000:3b:00): ",
    "79, pid=1, ",
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=",
    "OpType=",
    "Root Cause (first observed failure):",
    "[0]:",
    "  rank      : ",
    "  exitcode  : -9 (pid: 1)",
    "Traceback (most recent call last):",
    "File \"x.py\", line 3, in f",
    "ValueError: ",
    "Got completion from peer ",
    "<1>",
    " with status=",
    "CUDA out of memory",
    "srun: error: h: task ",
    ": Exited with exit code ",
    "*** JOB 1 ON h CANCELLED AT x DUE TO TIME LIMIT ***",
    "[titan] ",
    "[NeMo I ",
    "01/02/2024 03:04:05 ",
    "(RayTrainWorker pid=",
    ", ip=10.0.0.5) ",
    "[pod/w-3/",
    "pytorch] ",
    "sshd[12]: ",
    "2025-11-25T10:03:12.123456+00:00 h kernel: ",
    "2025-11-25T10:03:12+0000 ",
    "+00:",
    " stderr F ",
    " stdout P",
    "Message truncated : received ",
    "Call to ibv_reg_mr failed with error ",
    "Bootstrap Root : rank ",
    "Ranks 5, ",
    " failed to pass monitoredBarrier",
    "{\"MESSAGE\":\"",
    ",\"_HOSTNAME\":\"",
    ",\"__REALTIME_TIMESTAMP\":\"99999999999999999999",
    "\\",
    "\"",
    "Address already in use",
    "(",
    ")",
    "[",
    "]",
    ":",
    " ",
    "\t",
    "é",
    "\u{0}",
    "999999999999999999999",
    "-",
];

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(proptest::sample::select(PIECES), 0..12).prop_map(|v| v.concat()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn any_lines_are_read(files in proptest::collection::vec(
        ("[a-z0-9/._-]{0,24}", proptest::collection::vec(line(), 0..24)), 1..4)) {
        let mut c = Collector::new(Limits::default());
        for (path, lines) in &files {
            let id = c.file(path);
            for l in lines {
                c.line(id, l);
            }
            c.end_file(id);
        }
        let d = diagnose(c.finish());
        for f in &d.findings {
            prop_assert!(f.confidence >= 0.0 && f.confidence <= 1.0);
        }
    }

    /// The excerpt of any lines: numbered in order, its progress lines among them, and a
    /// collector reads it as it reads the lines.
    #[test]
    fn any_lines_are_excerpted(path in "[a-z0-9/._-]{0,24}", lines in proptest::collection::vec(line(), 0..40), first in 1u64..1_000_000) {
        let mut x = Excerpter::for_path(&path).starting_at(first);
        let mut kept = Vec::new();
        for l in &lines {
            if x.line(l).is_some() {
                kept.push((x.line_no(), l.clone()));
            }
        }
        prop_assert_eq!(x.line_no(), first + lines.len() as u64 - 1);
        let progress = x.take_progress();
        prop_assert!(x.take_progress().is_empty());
        for (_, n, t) in &progress {
            prop_assert!(*n >= first && *n < first + lines.len() as u64);
            prop_assert_eq!(t, &lines[(*n - first) as usize]);
        }
        kept.extend(progress.into_iter().map(|(_, n, t)| (n, t)));
        kept.sort();
        let mut c = Collector::new(Limits::default());
        let id = c.file(&path);
        for (n, t) in &kept {
            c.numbered_line(id, *n, t);
        }
        c.end_file(id);
        let _ = c.diagnosis();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// The scan cache answers every line as a fresh scan would, lines of one skeleton
    /// (digits changed) included.
    #[test]
    fn the_scan_cache_agrees(lines in proptest::collection::vec(line(), 1..30), digits in "[0-9]{1,6}") {
        let mut cache = ScanCache::default();
        for l in lines.iter().chain(lines.iter().map(|l| l.replace('1', &digits)).collect::<Vec<_>>().iter()) {
            let want = scan(l);
            let got = cache.scan(l);
            if !want.rows.is_empty() {
                // lines a signature concerns are scanned afresh, never answered from the cache
                prop_assert_eq!(&got.rows, &want.rows);
            }
            prop_assert_eq!(got.error_like, want.error_like, "{}", l);
            prop_assert_eq!(got.stage, want.stage, "{}", l);
            prop_assert_eq!(got.counter, want.counter, "{}", l);
        }
    }
}
