//! The hang watchdog: a span open without progress past the timeout is reported (its
//! stacks captured once) in every window until it ends; one that shows progress is not.

mod common;

use common::*;
use flare_agent::{stacks, Collector};
use flare_model::{HangRecord, OpKind, WindowSummary};
use flare_tracer::SpanArgs;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn hangs(all: &[WindowSummary]) -> Vec<&HangRecord> {
    all.iter().flat_map(|s| &s.hangs).collect()
}

#[test]
fn a_stalled_span_is_captured_once_with_native_stacks_and_a_progressing_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Ring::create(dir.path(), "hang", 3, 8, std::process::id());
    let now = unix_now();
    r.begin(0, "train_step", OpKind::HostOther, now, SpanArgs::default());
    let dp = r.comm("dp_group", 8, 1 << 20, 0);
    r.begin(0, "stuck_all_reduce", OpKind::AllReduce, now, dp);
    let tp = r.comm("tp_group", 4, 1 << 20, 0);
    r.async_begin(1, 42, "progressing_all_gather", OpKind::AllGather, now, tp);

    let mut cfg = config(dir.path(), "hang");
    cfg.hang_timeout = Duration::from_secs(1);
    // This test binary is not Python: native stacks whether or not py-spy is installed.
    cfg.py_spy = None;
    let mut c = Collector::new(cfg).unwrap();
    let mut all = Vec::new();
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    while t0.elapsed() < Duration::from_millis(2600) {
        if last_progress.elapsed() >= Duration::from_millis(200) {
            r.async_state(1, 42, unix_now());
            last_progress = Instant::now();
        }
        all.extend(c.poll());
        std::thread::sleep(Duration::from_millis(50));
    }
    all.extend(c.flush());
    let h = hangs(&all);
    // One hang, captured once; a window edge inside the run reports it in both windows.
    assert!(!h.is_empty() && h.len() <= 2, "{h:#?}");
    assert!(
        h.iter().all(|x| x.op == h[0].op && x.stacks == h[0].stacks),
        "{h:#?}"
    );
    let h = h[0];
    assert_eq!((h.rank, h.pid), (3, std::process::id()));
    assert_eq!(
        (h.op.as_str(), h.kind),
        ("stuck_all_reduce", OpKind::AllReduce)
    );
    assert_eq!(h.group.as_deref(), Some("dp_group"));
    assert!(
        h.in_flight_ns > SEC && h.in_flight_ns < 3 * SEC,
        "{}",
        h.in_flight_ns
    );
    assert_eq!(h.stack_source, "native");
    let frames: Vec<&String> = h.stacks.iter().flat_map(|t| &t.frames).collect();
    let has = |s: &str| frames.iter().any(|f| f.contains(s));
    assert!(
        has("stuck_all_reduce") && has("train_step"),
        "{:#?}",
        h.stacks
    );
    assert!(has("group=dp_group"), "{frames:#?}");
    // The async op on another ring shows in the native view (it is open), not as a hang.
    assert!(has("progressing_all_gather"), "{frames:#?}");
    // /proc adds the kernel's view of every thread of the process.
    assert!(has("[kernel] wchan="), "{frames:#?}");
    assert_eq!(c.stats().hangs, 1);
}

#[test]
fn a_hang_is_reported_in_every_window_until_its_op_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Ring::create(dir.path(), "long", 1, 4, std::process::id());
    let dp = r.comm("dp_group", 4, 1 << 20, 0);
    r.begin(0, "stuck_all_reduce", OpKind::AllReduce, unix_now(), dp);
    let mut cfg = config(dir.path(), "long");
    cfg.hang_timeout = Duration::from_millis(400);
    cfg.window = Duration::from_secs(1);
    cfg.py_spy = None;
    let mut c = Collector::new(cfg).unwrap();
    let mut all: Vec<WindowSummary> = Vec::new();
    let poll_for = |c: &mut Collector, all: &mut Vec<WindowSummary>, ms: u64| {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(ms) {
            all.extend(c.poll());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Until three windows have closed with the hang in them (a loaded machine stretches
    // the capture and the windows' grace: no fixed sleep is long enough).
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30)
        && all.iter().filter(|s| !s.hangs.is_empty()).count() < 3
    {
        poll_for(&mut c, &mut all, 200);
    }
    // The collective completes: the hang is over.
    r.end(0, "stuck_all_reduce", OpKind::AllReduce, unix_now());
    let ended = unix_now();
    poll_for(&mut c, &mut all, 2500);
    all.extend(c.flush());
    // One capture, reported again in each window while the op stayed stuck.
    assert_eq!(c.stats().hangs, 1);
    let reported: Vec<(u64, &HangRecord)> = all
        .iter()
        .flat_map(|s| s.hangs.iter().map(move |h| (s.window, h)))
        .collect();
    let windows: Vec<u64> = reported.iter().map(|(w, _)| *w).collect();
    assert!(windows.len() >= 3, "{windows:?}");
    assert!(windows.windows(2).all(|p| p[1] == p[0] + 1), "{windows:?}");
    let first = reported[0].1;
    for pair in reported.windows(2) {
        let (a, b) = (pair[0].1, pair[1].1);
        assert_eq!((b.rank, b.op.as_str()), (1, "stuck_all_reduce"));
        assert_eq!(b.stacks, first.stacks, "the first capture's stacks");
        assert!(
            b.in_flight_ns > a.in_flight_ns,
            "{} <= {}",
            b.in_flight_ns,
            a.in_flight_ns
        );
    }
    // Nothing for the windows that start after the op ended.
    let after: Vec<u64> = all
        .iter()
        .filter(|s| s.start_unix_ns > ended && !s.hangs.is_empty())
        .map(|s| s.window)
        .collect();
    assert!(after.is_empty(), "reported after it ended: {after:?}");
}

fn py_spy() -> Option<PathBuf> {
    let venv = PathBuf::from("/tmp/agent-venv/bin/py-spy");
    stacks::find_py_spy(None).or_else(|| stacks::find_py_spy(Some(&venv)))
}

/// A Python process sleeping for 30 s, once its interpreter is up (launcher shims exec
/// into it); `None` without python3.
fn python_sleeper() -> Option<std::process::Child> {
    let child = Command::new("python3")
        .args(["-c", "import time; time.sleep(30)"])
        .spawn()
        .ok()?;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).unwrap_or_default();
        if exe.to_string_lossy().contains("python") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(child)
}

#[test]
fn a_hung_python_process_gets_py_spy_stacks() {
    let Some(py_spy) = py_spy() else {
        eprintln!("skipped: py-spy not found (PATH, target/flare-venv, /tmp/agent-venv)");
        return;
    };
    let Some(mut child) = python_sleeper() else {
        eprintln!("skipped: python3 not found");
        return;
    };
    std::thread::sleep(Duration::from_millis(300));
    let dir = tempfile::tempdir().unwrap();
    let mut r = Ring::create(dir.path(), "pyhang", 0, 1, child.id());
    r.begin(
        0,
        "py_stuck_op",
        OpKind::Barrier,
        unix_now(),
        SpanArgs::default(),
    );
    let mut cfg = config(dir.path(), "pyhang");
    cfg.hang_timeout = Duration::from_secs(1);
    cfg.py_spy = Some(py_spy);
    let mut c = Collector::new(cfg).unwrap();
    let mut all = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        all.extend(c.poll());
        std::thread::sleep(Duration::from_millis(50));
    }
    all.extend(c.flush());
    let _ = child.kill();
    let _ = child.wait();
    let h = hangs(&all);
    // Captured once; a window edge inside the run reports it in both windows.
    assert!(!h.is_empty() && h.len() <= 2, "{h:#?}");
    assert!(h.iter().all(|x| x.stacks == h[0].stacks), "{h:#?}");
    assert_eq!(h[0].op, "py_stuck_op");
    assert_eq!(h[0].stack_source, "py-spy", "{:#?}", h[0].stacks);
    let frames: Vec<&String> = h[0].stacks.iter().flat_map(|t| &t.frames).collect();
    assert!(
        frames.iter().any(|f| f.contains("<module>")),
        "{:#?}",
        h[0].stacks
    );
    assert!(h[0].stacks.iter().any(|t| t.thread.contains("MainThread")));
}

#[test]
fn the_ranks_not_stuck_get_their_stacks_taken_while_the_hang_lasts() {
    let dir = tempfile::tempdir().unwrap();
    let pid = std::process::id();
    // Rank 0 waits in the collective; rank 1 never joins it (it is in its own step).
    let mut stuck = Ring::create(dir.path(), "peers", 0, 2, pid);
    let mut free = Ring::create(dir.path(), "peers", 1, 2, pid);
    let dp = stuck.comm("dp_group", 2, 1 << 20, 0);
    stuck.begin(0, "stuck_all_reduce", OpKind::AllReduce, unix_now(), dp);
    free.begin(
        0,
        "load_batch",
        OpKind::DataLoader,
        unix_now(),
        SpanArgs::default(),
    );
    let mut cfg = config(dir.path(), "peers");
    cfg.hang_timeout = Duration::from_millis(400);
    cfg.window = Duration::from_secs(1);
    cfg.py_spy = None;
    let mut c = Collector::new(cfg).unwrap();
    let mut all: Vec<WindowSummary> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(30)
        && all.iter().filter(|s| !s.peer_stacks.is_empty()).count() < 2
    {
        // Rank 1 keeps loading batches: one short span after another, never stuck.
        free.end(0, "load_batch", OpKind::DataLoader, unix_now());
        free.begin(
            0,
            "load_batch",
            OpKind::DataLoader,
            unix_now(),
            SpanArgs::default(),
        );
        all.extend(c.poll());
        std::thread::sleep(Duration::from_millis(50));
    }
    stuck.end(0, "stuck_all_reduce", OpKind::AllReduce, unix_now());
    free.end(0, "load_batch", OpKind::DataLoader, unix_now());
    let ended = unix_now();
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_millis(2500) {
        all.extend(c.poll());
        std::thread::sleep(Duration::from_millis(50));
    }
    all.extend(c.flush());
    let with_peers: Vec<&WindowSummary> =
        all.iter().filter(|s| !s.peer_stacks.is_empty()).collect();
    assert!(with_peers.len() >= 2, "{all:#?}");
    for s in &with_peers {
        // Only the rank that was not stuck, with the stack of its open span; the same
        // capture in every window, beside the hang it belongs to.
        assert_eq!(s.peer_stacks.len(), 1, "{:#?}", s.peer_stacks);
        let p = &s.peer_stacks[0];
        assert_eq!((p.rank, p.pid), (1, pid));
        assert_eq!(p.open_op.as_deref(), Some("load_batch"));
        assert_eq!(p.stacks, with_peers[0].peer_stacks[0].stacks);
        assert!(
            p.stacks
                .iter()
                .flat_map(|t| &t.frames)
                .any(|f| f.contains("load_batch")),
            "{:#?}",
            p.stacks
        );
        assert!(
            !s.hangs.is_empty(),
            "window {} has peers but no hang",
            s.window
        );
    }
    let after: Vec<u64> = all
        .iter()
        .filter(|s| s.start_unix_ns > ended && !s.peer_stacks.is_empty())
        .map(|s| s.window)
        .collect();
    assert!(
        after.is_empty(),
        "peer stacks after the hang ended: {after:?}"
    );
}

#[test]
fn a_window_waits_for_the_stack_captures_of_the_hangs_found_in_it() {
    // A Python process and a py-spy that takes 2.5 s (then fails: native stacks); 1-s
    // windows with 0.2 s of grace would close the window of the hang long before.
    let Some(mut child) = python_sleeper() else {
        eprintln!("skipped: python3 not found");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let slow_py_spy = dir.path().join("slow-py-spy");
    std::fs::write(&slow_py_spy, "#!/bin/sh\nsleep 2.5\nexit 1\n").unwrap();
    Command::new("chmod")
        .args(["755", slow_py_spy.to_str().unwrap()])
        .status()
        .unwrap();
    let mut r = Ring::create(dir.path(), "slowcap", 0, 2, child.id());
    let dp = r.comm("dp_group", 2, 1 << 20, 0);
    r.begin(0, "stuck_all_reduce", OpKind::AllReduce, unix_now(), dp);
    let mut cfg = config(dir.path(), "slowcap");
    cfg.hang_timeout = Duration::from_millis(300);
    cfg.window = Duration::from_secs(1);
    cfg.grace = Duration::from_millis(200);
    cfg.py_spy = Some(slow_py_spy);
    let mut c = Collector::new(cfg).unwrap();
    let mut all: Vec<WindowSummary> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) && hangs(&all).is_empty() {
        all.extend(c.poll());
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let first = all
        .iter()
        .find(|s| !s.hangs.is_empty())
        .expect("the hang was reported");
    let h = &first.hangs[0];
    assert_eq!(
        h.stack_source, "native",
        "the slow py-spy failed: native stacks"
    );
    // Reported in the window it was found in, not in whichever was open when the
    // capture finished.
    assert!(
        h.detected_unix_ns >= first.start_unix_ns && h.detected_unix_ns < first.end_unix_ns,
        "detected at {} but reported in window [{}, {})",
        h.detected_unix_ns,
        first.start_unix_ns,
        first.end_unix_ns
    );
}
