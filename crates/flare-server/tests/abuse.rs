//! The server probed as a hostile or broken client would: connections that never finish
//! their headers, absurd values, a huge declared world, tokens of the wrong role, floods,
//! a second server on the same database. Each was a way to hurt every other user.

mod common;

use common::*;
use flare_server::{ConnLimits, IngestRate, Server};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A blocking connection from a chosen local address (127.0.0.0/8 is all loopback, so
/// one test plays many clients); `None` when refused. std has no bind-before-connect.
fn connect_from(local: &str, server: SocketAddr) -> Option<TcpStream> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local: SocketAddr = format!("{local}:0").parse().unwrap();
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4().ok()?;
        sock.bind(local).ok()?;
        tokio::time::timeout(Duration::from_secs(2), sock.connect(server))
            .await
            .ok()?
            .ok()
    })?;
    let s = s.into_std().ok()?;
    s.set_nonblocking(false).ok()?;
    Some(s)
}

/// An HTTP/1.1 request from a chosen local address: the reply's status line, or `None`
/// when the server refused or closed the connection.
fn request_from(local: &str, server: SocketAddr, request: &str) -> Option<String> {
    let mut s = connect_from(local, server)?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(request.as_bytes()).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines()
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

fn healthz() -> &'static str {
    "GET /healthz HTTP/1.1\r\nHost: flare\r\nConnection: close\r\n\r\n"
}

/// Opens up to `n` connections from `local` that send half a header and stop (those
/// the server refuses at once are not kept).
fn slowloris(local: &str, server: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| {
            let mut s = connect_from(local, server)?;
            s.write_all(b"POST /api/v1/summaries HTTP/1.1\r\nHost: flare\r\nX-Slow: ")
                .ok()?;
            Some(s)
        })
        .collect()
}

/// Whether the server has closed this connection: the read ends (after whatever it
/// said) rather than waiting.
fn closed_by_server(s: &TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = [0u8; 512];
    let mut reader = s;
    loop {
        match reader.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn connections_that_never_finish_their_headers_lock_nobody_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir.path().join("flare.db"));
    cfg.connections = ConnLimits {
        header_read_timeout: Duration::from_secs(2),
        max_connections: 300,
        max_connections_per_ip: 50,
    };
    let s = TestServer::start_cfg(cfg);
    // One address opens far more than its share: the rest are closed at once.
    let held = slowloris("127.0.0.1", s.addr, 400);
    let t = Instant::now();
    let status = request_from("127.0.0.2", s.addr, healthz());
    assert_eq!(status.as_deref(), Some("HTTP/1.1 200 OK"));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Within the header deadline (and a margin), the half-sent ones are closed.
    std::thread::sleep(Duration::from_secs(3));
    let open = held.iter().filter(|c| !closed_by_server(c)).count();
    assert_eq!(open, 0, "{open} slow connections still open");
    drop(held);

    // Many addresses together fill the server's cap: a new client waits at most the
    // header deadline for a place.
    let mut held: Vec<TcpStream> = (3..10)
        .flat_map(|i| slowloris(&format!("127.0.0.{i}"), s.addr, 50))
        .collect();
    assert!(held.len() >= 300);
    let t = Instant::now();
    let served = loop {
        if let Some(st) = request_from("127.0.0.20", s.addr, healthz()) {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(8), "never served");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(served, "HTTP/1.1 200 OK");
    held.clear();
}

#[test]
fn absurd_values_are_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    type Edit = fn(&mut flare_model::WindowSummary);
    let cases: &[(&str, Edit, &str)] = &[
        (
            "u64::MAX",
            |w| w.ranks[0].ops[0].total_ns = u64::MAX,
            "total_ns is 18446744073709551615 ns, more than 30 days",
        ),
        (
            "negative throughput",
            |w| w.ranks[0].ops[0].tflops = Some(-1.0),
            "tflops is -1",
        ),
        (
            "end before start",
            |w| w.end_unix_ns = w.start_unix_ns - 1,
            "before it starts",
        ),
    ];
    for (what, edit, expected) in cases {
        let mut w = node_summary("absurd", 0, 1, None);
        edit(&mut w);
        let (status, body) = post(&s, Some(TOKEN), Some("zstd"), &zstd_json(&w));
        assert_eq!(status, 400, "{what}: {body}");
        let msg = body["error"].as_str().unwrap();
        assert!(msg.contains(expected), "{what}: {msg}");
    }
    let (status, jobs) = get(&s, "/api/jobs", Some(TOKEN));
    assert_eq!(status, 200);
    assert_eq!(jobs, serde_json::json!([]));
}

#[test]
fn a_huge_declared_world_does_not_make_reads_huge() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    let mut w = node_summary("wide", 0, 0, None);
    w.world_size = 1 << 20;
    w.ranks.truncate(1);
    let body = serde_json::to_vec(&w).unwrap();
    let (status, reply) = post(&s, Some(TOKEN), None, &body);
    assert_eq!(status, 200, "{reply}");
    let mut resp = client()
        .get(s.url("/api/jobs/wide/findings"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    let text = resp.body_mut().read_to_string().unwrap();
    assert!(text.len() < 64 << 10, "{} bytes", text.len());
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["job"]["missing_rank_count"], (1u64 << 20) - 1);
    assert_eq!(doc["job"]["missing_ranks"].as_array().unwrap().len(), 1024);
}

#[test]
fn each_token_does_only_what_its_role_allows_and_never_from_a_url() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir.path().join("flare.db"));
    cfg.ingest_tokens = vec!["agent-token-1".into()];
    cfg.read_tokens = vec!["viewer-token-1".into()];
    let s = TestServer::start_cfg(cfg);
    let body = zstd_json(&node_summary("roles", 0, 0, None));
    let (st, _) = post(&s, Some("agent-token-1"), Some("zstd"), &body);
    assert_eq!(st, 200);
    let (st, err) = post(&s, Some("viewer-token-1"), Some("zstd"), &body);
    assert_eq!(st, 403, "{err}");
    let (st, err) = get(&s, "/api/jobs/roles/findings", Some("agent-token-1"));
    assert_eq!(st, 403, "{err}");
    assert!(err["error"].as_str().unwrap().contains("may not read"));
    let (st, _) = get(&s, "/api/jobs/roles/findings", Some("viewer-token-1"));
    assert_eq!(st, 200);
    let ui = client()
        .get(s.url("/api/ui/jobs"))
        .header("Authorization", "Bearer viewer-token-1")
        .call()
        .unwrap();
    assert_eq!(ui.status(), 200);
    let silence = |token: &str| {
        let resp = client()
            .put(s.url("/api/jobs/roles/silence"))
            .header("Authorization", format!("Bearer {token}"))
            .header("Content-Type", "application/json")
            .send(br#"{"for_s": 60}"#.as_slice())
            .unwrap();
        reply(resp).0
    };
    assert_eq!(silence("viewer-token-1"), 403);
    assert_eq!(silence("agent-token-1"), 403);
    assert_eq!(silence(TOKEN), 200);
    // A token in the query string is not a token.
    for q in [
        format!("/api/jobs?token={TOKEN}"),
        format!("/api/jobs?access_token={TOKEN}"),
    ] {
        let (st, _) = get(&s, &q, None);
        assert_eq!(st, 401, "{q}");
    }
}

#[test]
fn an_address_that_posts_too_fast_is_told_when_to_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(&dir.path().join("flare.db"));
    cfg.ingest_rate = IngestRate {
        per_s: 0.5,
        burst: 3,
    };
    let s = TestServer::start_cfg(cfg);
    for w in 0..3 {
        let (st, body) = post(
            &s,
            Some(TOKEN),
            Some("zstd"),
            &zstd_json(&node_summary("fast", 0, w, None)),
        );
        assert_eq!(st, 200, "{body}");
    }
    let resp = client()
        .post(s.url("/api/v1/summaries"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Encoding", "zstd")
        .send(zstd_json(&node_summary("fast", 0, 3, None)).as_slice())
        .unwrap();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let (st, body) = reply(resp);
    assert_eq!(st, 429, "{body}");
    assert_eq!(retry.as_deref(), Some("2"));
    // Reads are not rate-limited.
    assert_eq!(get(&s, "/api/jobs", Some(TOKEN)).0, 200);
}

#[test]
fn a_second_server_on_one_database_is_refused_until_the_first_stops() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flare.db");
    let first = TestServer::start(&db);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let err = rt
        .block_on(Server::bind(config(&db)))
        .err()
        .expect("a second server started")
        .to_string();
    assert!(err.contains("in use by another flare server"), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    first.stop();
    rt.block_on(Server::bind(config(&db)))
        .expect("the database is free again");
}

#[test]
fn replies_are_not_sniffed_and_the_database_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flare.db");
    let s = TestServer::start(&db);
    let body = zstd_json(&node_summary("<script>x</script>", 0, 0, None));
    assert_eq!(post(&s, Some(TOKEN), Some("zstd"), &body).0, 200);
    for path in ["/api/jobs", "/api/jobs/nope/findings", "/nowhere"] {
        let resp = client()
            .get(s.url(path))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        let h = resp.headers();
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["cache-control"], "no-store", "{path}");
        assert!(
            h["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{path}"
        );
    }
    use std::os::unix::fs::PermissionsExt;
    for f in ["flare.db", "flare.db-wal", "flare.db.lock"] {
        let mode = std::fs::metadata(dir.path().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{f} is readable by others: {mode:o}");
    }
}
