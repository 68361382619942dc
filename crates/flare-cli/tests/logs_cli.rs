//! `flare logs templates` end to end: JSON lines, ids shared by lines of one event, the
//! summary, and errors that name the file.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn flare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flare"))
}

/// A scratch file removed when the test ends.
struct TmpFile(PathBuf);

impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn fixture(name: &str, body: &[u8]) -> TmpFile {
    let p = std::env::temp_dir().join(format!("flare-logs-test-{}-{name}", std::process::id()));
    std::fs::write(&p, body).unwrap();
    TmpFile(p)
}

/// (line, event): three events, values and headers varying.
const LINES: &[(&str, &str)] = &[
    (
        "2024-05-01 10:00:01,101 INFO [rank0] NCCL: connected to 10.0.0.1:29500 in 12ms",
        "connect",
    ),
    (
        "2024-05-01 10:00:01,245 INFO [rank1] NCCL: connected to 10.0.0.2:29500 in 9ms",
        "connect",
    ),
    (
        "2024-05-01 10:00:02,001 WARN step 100 loss=2.31 lr=0.0003 took 1.2s",
        "step",
    ),
    (
        "2024-05-01 10:00:03,002 WARN step 101 loss=2.29 lr=0.0003 took 1.1s",
        "step",
    ),
    (
        "2024-05-01 10:00:04,500 ERROR checkpoint saved to /ckpt/run7/step100.pt (3.5GB)",
        "ckpt",
    ),
    (
        "2024-05-01 10:00:05,900 INFO [rank7] NCCL: connected to 10.0.0.8:29500 in 15ms",
        "connect",
    ),
    (
        "2024-05-01 10:00:09,002 WARN step 102 loss=2.27 lr=0.0003 took 1.3s",
        "step",
    ),
    (
        "2024-05-01 10:01:04,500 ERROR checkpoint saved to /ckpt/run7/step200.pt (3.6GB)",
        "ckpt",
    ),
];

#[test]
fn json_one_object_per_line_and_events_share_ids() {
    let body: String = LINES.iter().map(|(l, _)| format!("{l}\n")).collect();
    let f = fixture("events.log", body.as_bytes());
    let out = flare()
        .args(["logs", "templates", "--json"])
        .arg(&f.0)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(rows.len(), LINES.len(), "one object per input line");
    for (i, (r, _)) in rows.iter().zip(LINES).enumerate() {
        assert_eq!(r["line"], i as u64 + 1);
        assert!(r["template"].is_string());
        assert!(r["template_id"].is_u64());
    }
    for (i, (_, ei)) in LINES.iter().enumerate() {
        for (j, (_, ej)) in LINES.iter().enumerate() {
            let same = rows[i]["template_id"] == rows[j]["template_id"];
            assert_eq!(same, ei == ej, "lines {} and {}", i + 1, j + 1);
        }
    }
    // the last line of an event shows the generalised template; the header (time,
    // level, `[rank0]`, `NCCL:`) is stripped
    assert_eq!(rows[5]["template"], "connected to <*> in <*>");
}

#[test]
fn summary_lists_templates_by_count() {
    let body: String = LINES.iter().map(|(l, _)| format!("{l}\n")).collect();
    let f = fixture("summary.log", body.as_bytes());
    let out = flare()
        .args(["logs", "templates"])
        .arg(&f.0)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("8 lines, 3 templates"), "{text}");
    let counts: Vec<u64> = text
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(counts, [3, 3, 2], "{text}");
}

#[test]
fn a_missing_file_is_named() {
    let out = flare()
        .args(["logs", "templates", "/nonexistent/flare-x.log"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/flare-x.log"), "{err}");
}

#[test]
fn non_utf8_lines_are_kept_and_reported() {
    let f = fixture("latin1.log", b"caf\xe9 opened 1\ncaf\xe9 opened 2\n");
    let out = flare()
        .args(["logs", "templates", "--json", "--content"])
        .arg(&f.0)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(":1: not UTF-8"), "{err}");
}
