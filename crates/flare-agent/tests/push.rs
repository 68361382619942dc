//! The pusher against a real HTTP server: buffering while it is down, oldest-first
//! dropping past the queue limit, delivery once it is up; and the whole agent pushing
//! and writing a one-shot summary.

mod common;

use common::*;
use flare_agent::{Agent, PushConfig, Pusher};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{OpKind, WindowSummary};
use std::time::{Duration, Instant};

fn summary(window: u64) -> WindowSummary {
    WindowSummary {
        parallel: None,
        version: SUMMARY_VERSION,
        job_id: "push".into(),
        node: "n1".into(),
        window,
        window_ns: 10 * SEC,
        start_unix_ns: window * 10 * SEC,
        end_unix_ns: (window + 1) * 10 * SEC,
        world_size: 1,
        ranks: Vec::new(),
        hangs: Vec::new(),
        peer_stacks: Vec::new(),
        logs: None,
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn quick(url: String, token: &str, max_queue: usize) -> PushConfig {
    PushConfig {
        max_queue,
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        request_timeout: Duration::from_secs(2),
        shutdown_timeout: Duration::from_secs(5),
        ..PushConfig::new(url, Some(token.to_string()))
    }
}

#[test]
fn summaries_wait_for_a_server_that_is_down_and_the_oldest_are_dropped() {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let pusher = Pusher::start(quick(url, "s3cret", 3)).unwrap();
    for w in 1..=5 {
        pusher.submit(&summary(w)).unwrap();
    }
    // Nothing listens: attempts fail and are retried; the queue holds the newest three.
    let t0 = Instant::now();
    while pusher.stats().failures < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{:?}",
            pusher.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = pusher.stats();
    assert_eq!((st.queued, st.dropped, st.sent), (3, 2, 0), "{st:?}");
    assert!(st.queued_bytes > 0);

    let server = TestServer::start(&format!("127.0.0.1:{port}"), "s3cret");
    let got = server.wait_for(3, Duration::from_secs(10));
    let windows: Vec<u64> = got.iter().map(|r| r.summary.window).collect();
    assert_eq!(windows, vec![3, 4, 5], "delivered in order, oldest dropped");
    for r in &got {
        assert_eq!(r.authorization.as_deref(), Some("Bearer s3cret"));
        assert_eq!(r.encoding.as_deref(), Some("zstd"));
        assert_eq!(r.summary.job_id, "push");
    }
    let st = pusher.shutdown(Duration::from_secs(1));
    assert_eq!((st.queued, st.dropped, st.sent), (0, 2, 3), "{st:?}");
}

#[test]
fn a_wrong_token_is_retried_and_shutdown_gives_up_at_its_deadline() {
    let server = TestServer::start("127.0.0.1:0", "right");
    let pusher = Pusher::start(quick(server.url(), "wrong", 10)).unwrap();
    pusher.submit(&summary(1)).unwrap();
    let t0 = Instant::now();
    while pusher.stats().failures < 1 {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    let st = pusher.shutdown(Duration::from_millis(300));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_eq!((st.queued, st.sent, st.rejected), (1, 0, 0), "{st:?}");
    assert_eq!(server.count(), 0);
}

#[test]
fn a_one_shot_agent_pushes_and_writes_the_current_window() {
    let dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let server = TestServer::start("127.0.0.1:0", "tok");
    let mut r = Ring::create(dir.path(), "once", 0, 1, std::process::id());
    let now = unix_now();
    let args = r.comm("world", 2, 1 << 30, 0);
    r.span(
        0,
        "all_reduce",
        OpKind::AllReduce,
        now - 50 * MS,
        now - 10 * MS,
        args,
    );
    let mut cfg = config(dir.path(), "once");
    cfg.out_dir = Some(out.path().to_path_buf());
    cfg.push = Some(quick(server.url(), "tok", 16));
    let agent = Agent::new(cfg).unwrap();
    let (summaries, report) = agent.run_once();
    let p = report.push.unwrap();
    assert_eq!((p.sent, p.queued), (summaries.len() as u64, 0), "{p:?}");
    let got = server.wait_for(summaries.len(), Duration::from_secs(5));
    let ops: Vec<_> = got
        .iter()
        .flat_map(|r| &r.summary.ranks)
        .flat_map(|r| &r.ops)
        .collect();
    assert_eq!(ops.len(), 1);
    assert_eq!(
        (ops[0].name.as_str(), ops[0].count, ops[0].bytes),
        ("all_reduce", 1, 1 << 30)
    );
    // 1 GiB x 2(2-1)/2 / 40 ms.
    let want = (1u64 << 30) as f64 / 0.040 / 1e9;
    assert!((ops[0].bus_gbps.unwrap() - want).abs() < 1e-6);
    let files: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), summaries.len());
    assert_eq!(report.files_written, summaries.len() as u64);
    let back: WindowSummary = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert!(summaries.contains(&back));
    assert!(files[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("once-test-node-w"));
}
