//! File lifecycle: files of dead or exited processes are drained one last time, then
//! removed; foreign files are skipped and left alone.

mod common;

use common::*;
use flare_agent::Collector;
use flare_model::OpKind;
use flare_tracer::SpanArgs;
use std::process::Command;
use std::time::Duration;

fn op_count(all: &[flare_model::WindowSummary], name: &str) -> u64 {
    all.iter()
        .flat_map(|s| &s.ranks)
        .flat_map(|r| &r.ops)
        .filter(|o| o.name == name)
        .map(|o| o.count)
        .sum()
}

#[test]
fn the_file_of_a_dead_process_is_drained_then_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let mut r = Ring::create(dir.path(), "dead", 0, 1, child.id());
    let now = unix_now();
    r.span(
        0,
        "before_attach",
        OpKind::Compute,
        now - 2 * SEC,
        now - SEC,
        SpanArgs::default(),
    );
    let mut c = Collector::new(config(dir.path(), "dead")).unwrap();
    let mut all = c.poll();
    assert_eq!(c.stats().files_open, 1);

    // Written after the agent's last drain, just before the process dies.
    let now = unix_now();
    r.span(
        0,
        "last_words",
        OpKind::Compute,
        now - 100 * MS,
        now,
        SpanArgs::default(),
    );
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    all.extend(c.poll());
    assert!(!r.path.exists(), "the dead process's file is removed");
    let st = c.stats();
    assert_eq!((st.files_open, st.files_removed), (0, 1));
    all.extend(c.flush());
    assert_eq!(op_count(&all, "before_attach"), 1);
    assert_eq!(
        op_count(&all, "last_words"),
        1,
        "the final drain lost nothing"
    );
    // Nothing is re-attached.
    c.poll();
    assert_eq!(c.stats().files_open, 0);
}

#[test]
fn an_exited_process_file_is_removed_and_foreign_files_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("flare-exit-r9-p1.ring");
    std::fs::write(&junk, vec![0x5au8; 8192]).unwrap();
    let short = dir.path().join("flare-exit-r8-p1.ring");
    std::fs::write(&short, b"hello").unwrap();
    let mut r = Ring::create(dir.path(), "exit", 0, 1, std::process::id());
    let now = unix_now();
    r.span(
        0,
        "work",
        OpKind::Compute,
        now - SEC,
        now - 500 * MS,
        SpanArgs::default(),
    );
    let mut cfg = config(dir.path(), "exit");
    cfg.scan_interval = Duration::from_millis(1);
    let mut c = Collector::new(cfg).unwrap();
    let mut all = Vec::new();
    for _ in 0..5 {
        all.extend(c.poll());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.stats().files_open, 1);
    assert_eq!(c.stats().files_rejected, 2);
    r.span(
        0,
        "work",
        OpKind::Compute,
        now - 400 * MS,
        now - 300 * MS,
        SpanArgs::default(),
    );
    r.producer.mark_exited();
    all.extend(c.poll());
    assert!(!r.path.exists());
    assert!(
        junk.exists() && short.exists(),
        "files that are not ours stay"
    );
    all.extend(c.flush());
    assert_eq!(op_count(&all, "work"), 2);
}

#[test]
fn two_live_processes_claiming_one_rank_are_reported_not_merged() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let mut a = Ring::create(dir.path(), "dup", 3, 4, std::process::id());
    let mut b = Ring::create(dir.path(), "dup", 3, 4, child.id());
    let now = unix_now();
    a.span(
        0,
        "from_a",
        OpKind::Compute,
        now - 2 * SEC,
        now - SEC,
        SpanArgs::default(),
    );
    b.span(
        0,
        "from_b",
        OpKind::Compute,
        now - 2 * SEC,
        now - SEC,
        SpanArgs::default(),
    );
    let mut c = Collector::new(config(dir.path(), "dup")).unwrap();
    let mut all = c.poll();
    let st = c.stats();
    assert_eq!(st.files_open, 1, "only one file of rank 3 is drained");
    assert_eq!(st.rank_conflicts, 1);
    std::thread::sleep(Duration::from_millis(120));
    all.extend(c.poll());
    assert_eq!(c.stats().rank_conflicts, 1, "a conflict is counted once");
    all.extend(c.flush());
    assert_eq!(
        op_count(&all, "from_a") + op_count(&all, "from_b"),
        1,
        "one process's ops, not both merged into rank 3"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
