//! The server end to end: a real server on 127.0.0.1:0 with a SQLite file in a scratch
//! directory, and a blocking HTTP client as the agents use (helpers in `common`).

mod common;

use common::*;
use flare_model::summary::SUMMARY_VERSION;
use flare_server::alerts::Webhook;
use serde_json::Value;
use std::net::SocketAddr;

#[test]
fn unauthorized_requests_get_401() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    let body = serde_json::to_vec(&node_summary("j", 0, 1, None)).unwrap();
    for token in [None, Some("wrong"), Some("")] {
        let (status, v) = post(&s, token, None, &body);
        assert_eq!(status, 401, "{token:?}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    let (status, v) = get(&s, "/api/jobs", None);
    assert_eq!(status, 401);
    assert!(v["error"].as_str().unwrap().contains("Bearer"), "{v}");
    let (status, _) = get(&s, "/api/jobs/j/findings", Some("nope"));
    assert_eq!(status, 401);
    // Liveness needs no token.
    let (status, v) = get(&s, "/healthz", None);
    assert_eq!((status, v["status"].as_str()), (200, Some("ok")));
    // Nothing was stored.
    let (status, v) = get(&s, "/api/jobs", Some(TOKEN));
    assert_eq!(status, 200);
    assert_eq!(v, serde_json::json!([]));
}

#[test]
fn bad_bodies_get_400_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    let good = node_summary("j", 0, 1, None);
    let mut newer = serde_json::to_value(&good).unwrap();
    newer["version"] = (SUMMARY_VERSION + 1).into();
    let mut no_node = serde_json::to_value(&good).unwrap();
    no_node.as_object_mut().unwrap().remove("node");
    let cases: Vec<(Option<&str>, Vec<u8>, u16, &str)> = vec![
        (
            None,
            b"{not json".to_vec(),
            400,
            "not a valid window summary",
        ),
        (
            None,
            serde_json::to_vec(&no_node).unwrap(),
            400,
            "missing field `node`",
        ),
        (Some("zstd"), b"plain bytes".to_vec(), 400, "not valid zstd"),
        (None, zstd_json(&good), 400, "Content-Encoding: zstd"),
        (
            None,
            serde_json::to_vec(&newer).unwrap(),
            400,
            "newer than this server",
        ),
        (None, vec![], 400, "empty"),
        (
            Some("gzip"),
            serde_json::to_vec(&good).unwrap(),
            415,
            "not supported",
        ),
        (None, vec![b' '; MAX_BODY * 3], 413, "larger than"),
        // A small zstd body that decompresses past the bound.
        (
            Some("zstd"),
            zstd::encode_all(vec![b' '; MAX_BODY * 4].as_slice(), 3).unwrap(),
            413,
            "decompressed",
        ),
    ];
    for (encoding, body, want_status, want) in cases {
        let (status, v) = post(&s, Some(TOKEN), encoding, &body);
        let msg = v["error"].as_str().unwrap_or_default();
        assert_eq!(status, want_status, "{want}: {v}");
        assert!(msg.contains(want), "{want:?} not in {msg:?}");
    }
    let (status, v) = get(&s, "/api/jobs", Some(TOKEN));
    assert_eq!((status, v), (200, serde_json::json!([])));
}

#[test]
fn finds_the_slow_rank_lists_the_job_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flare.db");
    let s = TestServer::start(&db);
    for window in [100, 101] {
        for node in 0..2 {
            let summary = node_summary("llama-70b", node, window, Some(6));
            // One node compresses, the other does not: both are accepted.
            let (status, v) = if node == 0 {
                post(&s, Some(TOKEN), Some("zstd"), &zstd_json(&summary))
            } else {
                post(
                    &s,
                    Some(TOKEN),
                    None,
                    &serde_json::to_vec(&summary).unwrap(),
                )
            };
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["job_id"], "llama-70b");
            assert_eq!(v["window"], window);
        }
    }
    // Re-sending a summary replaces it rather than adding a node.
    let again = node_summary("llama-70b", 1, 101, Some(6));
    let (status, v) = post(&s, Some(TOKEN), Some("zstd"), &zstd_json(&again));
    assert_eq!((status, v["findings"].as_u64()), (200, Some(1)), "{v}");

    let check = |s: &TestServer| {
        let (status, doc) = get(s, "/api/jobs/llama-70b/findings", Some(TOKEN));
        assert_eq!(status, 200, "{doc}");
        assert_eq!(doc["job"]["id"], "llama-70b");
        assert_eq!(doc["job"]["source"], "agent");
        assert_eq!(doc["job"]["world_size"], 8);
        assert_eq!(doc["job"]["ranks_with_data"], 8);
        assert_eq!(doc["job"]["missing_ranks"], serde_json::json!([]));
        assert_eq!(doc["job"]["window"], 101);
        assert_eq!(doc["job"]["windows_analysed"], 2);
        assert_eq!(doc["healthy"], false);
        assert_eq!(doc["conclusive"], true);
        let f = &doc["findings"][0];
        assert_eq!(f["kind"], "slow_gpu", "{doc:#}");
        assert_eq!(f["severity"], "warning");
        assert_eq!(f["culprits"][0]["rank"], 6);
        assert_eq!(f["culprits"][0]["element"], "host-1");
        // Each rank's window split up: its peers wait for rank 6 in the all-reduce, so
        // it spends the least time communicating.
        let b = doc["rank_breakdown"].as_array().unwrap();
        assert_eq!(b.len(), 8, "{doc:#}");
        let exposed = |x: &Value| x["exposed_communication_ms"].as_f64().unwrap();
        let least = b
            .iter()
            .min_by(|x, y| exposed(x).total_cmp(&exposed(y)))
            .unwrap();
        assert_eq!(least["rank"], 6, "{b:#?}");
        assert!(b.iter().all(|x| x["window_ms"].as_f64().unwrap() > 0.0));
        let history = doc["history"].as_array().unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[0]["window"], 100);
        assert_eq!(history[0]["findings"], 1);
        assert_eq!(history[0]["kinds"], serde_json::json!(["slow_gpu"]));

        let (status, doc) = get(s, "/api/jobs/llama-70b/findings?window=100", Some(TOKEN));
        assert_eq!(status, 200);
        assert_eq!(doc["job"]["window"], 100);
        assert_eq!(doc["findings"][0]["culprits"][0]["rank"], 6);
    };
    check(&s);

    let (status, jobs) = get(&s, "/api/jobs", Some(TOKEN));
    assert_eq!(status, 200);
    let jobs = jobs.as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let j = &jobs[0];
    assert_eq!(j["job_id"], "llama-70b");
    assert_eq!(j["world_size"], 8);
    assert_eq!(j["nodes"], 2);
    assert_eq!(j["ranks_seen"], 8);
    assert_eq!(j["first_window"], 100);
    assert_eq!(j["last_window"], 101);
    assert_eq!(j["open_findings"], 1);
    assert!(j["last_seen_unix_ns"].as_u64().unwrap() > 0);

    let (status, v) = get(&s, "/api/jobs/nope/findings", Some(TOKEN));
    assert_eq!(status, 404);
    assert!(v["error"].as_str().unwrap().contains("unknown job"), "{v}");
    let (status, v) = get(&s, "/api/jobs/llama-70b/findings?window=7", Some(TOKEN));
    assert_eq!(status, 404);
    assert!(v["error"].as_str().unwrap().contains("window 7"), "{v}");
    let (status, v) = get(&s, "/api/jobs/llama-70b/findings?window=x", Some(TOKEN));
    assert_eq!(status, 400, "{v}");

    s.stop();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let summaries: i64 = conn
        .query_row("SELECT COUNT(*) FROM summaries", [], |r| r.get(0))
        .unwrap();
    assert_eq!(summaries, 4);
    drop(conn);

    let s = TestServer::start(&db);
    check(&s);
}

#[test]
fn a_healthy_window_is_healthy_and_partial_windows_list_missing_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    let (status, v) = post(
        &s,
        Some(TOKEN),
        Some("zstd"),
        &zstd_json(&node_summary("ok", 0, 5, None)),
    );
    // Half the ranks: stored, its analysis pending until the rest come, a second passes
    // without them, or someone reads it (as here).
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["analysed"], &v["findings"]),
        (&Value::Bool(false), &Value::Null)
    );
    let (_, doc) = get(&s, "/api/jobs/ok/findings", Some(TOKEN));
    assert_eq!(doc["job"]["missing_ranks"], serde_json::json!([4, 5, 6, 7]));
    assert_eq!(doc["healthy"], true, "{doc:#}");
    post(
        &s,
        Some(TOKEN),
        Some("zstd"),
        &zstd_json(&node_summary("ok", 1, 5, None)),
    );
    let (_, doc) = get(&s, "/api/jobs/ok/findings", Some(TOKEN));
    assert_eq!(doc["job"]["missing_ranks"], serde_json::json!([]));
    assert_eq!(doc["job"]["ranks_with_data"], 8);
    assert_eq!(doc["findings"], serde_json::json!([]));
    assert_eq!(doc["healthy"], true);
}

/// The dashboard shows the windows analysed and says which is still arriving; it does
/// not analyse a half-arrived window on each of its polls (the API's reads do: they see
/// every summary stored before them).
#[test]
fn the_dashboard_shows_an_arriving_window_without_analysing_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::config(&dir.path().join("flare.db"));
    cfg.analysis_delay = std::time::Duration::from_secs(600);
    let s = TestServer::start_cfg(cfg);
    let page = || {
        let mut resp = client()
            .get(s.url("/api/ui/jobs/arrive"))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.body_mut().read_to_string().unwrap()
    };
    for node in 0..2 {
        post(
            &s,
            Some(TOKEN),
            Some("zstd"),
            &zstd_json(&node_summary("arrive", node, 5, None)),
        );
    }
    post(
        &s,
        Some(TOKEN),
        Some("zstd"),
        &zstd_json(&node_summary("arrive", 0, 6, None)),
    );
    for _ in 0..2 {
        let html = page();
        assert!(html.contains("window 5 · 8 of 8 ranks with data"), "{html}");
        assert!(
            html.contains("window 6 arriving (4 of 8 ranks in"),
            "{html}"
        );
    }
    let (_, doc) = get(&s, "/api/jobs/arrive/findings", Some(TOKEN));
    assert_eq!(doc["job"]["window"], 6);
    assert_eq!(doc["job"]["missing_ranks"], serde_json::json!([4, 5, 6, 7]));
    let html = page();
    assert!(html.contains("window 6 · 4 of 8 ranks with data"), "{html}");
    assert!(!html.contains("arriving"), "{html}");
}

/// A webhook receiver: a plain HTTP/1.1 listener on 127.0.0.1:0 that answers 200 and
/// keeps each request's path and body.
struct Receiver {
    addr: SocketAddr,
    got: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl Receiver {
    fn start() -> Receiver {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let mut len = 0;
                loop {
                    let mut h = String::new();
                    reader.read_line(&mut h).unwrap();
                    if h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            len = v.trim().parse().unwrap();
                        }
                    }
                }
                let mut body = vec![0; len];
                reader.read_exact(&mut body).unwrap();
                keep.lock()
                    .unwrap()
                    .push((path, serde_json::from_slice(&body).unwrap()));
                conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .unwrap();
            }
        });
        Receiver { addr, got }
    }

    fn hook(&self, spec: &str, path: &str) -> Webhook {
        format!("{spec}http://{}{path}", self.addr).parse().unwrap()
    }

    /// What arrived at `path`, once `n` requests did there (or after 10 s).
    fn wait(&self, path: &str, n: usize) -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let got: Vec<Value> = self
                .got
                .lock()
                .unwrap()
                .iter()
                .filter(|(p, _)| p == path)
                .map(|(_, v)| v.clone())
                .collect();
            if got.len() >= n || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

fn put_silence(s: &TestServer, job: &str, body: &str) -> (u16, Value) {
    reply(
        client()
            .put(s.url(&format!("/api/jobs/{job}/silence")))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/json")
            .send(body.as_bytes())
            .unwrap(),
    )
}

/// Posts both nodes' summaries of windows `windows`, rank 5 slow in `slow`.
fn post_windows(s: &TestServer, job: &str, windows: std::ops::Range<u64>, slow: &[u64]) {
    for w in windows {
        for node in 0..2 {
            let summary = node_summary(job, node, w, slow.contains(&w).then_some(5));
            let (status, v) = post(s, Some(TOKEN), Some("zstd"), &zstd_json(&summary));
            assert_eq!(status, 200, "{v}");
        }
    }
}

fn about_rank(e: &Value, rank: u64) -> bool {
    e["culprits"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["rank"].as_u64() == Some(rank)))
}

#[test]
fn a_persistent_finding_pages_once_resolves_once_and_a_silenced_job_pages_nobody() {
    let dir = tempfile::tempdir().unwrap();
    let r = Receiver::start();
    let s = TestServer::start_with(
        &dir.path().join("flare.db"),
        vec![r.hook("json=", "/hook"), r.hook("slack=", "/slack")],
    );
    // Window 1 healthy, 2 a one-window blip of rank 5, 3 healthy, 4-7 rank 5 slow, 8-11
    // healthy; window 12 completes window 11.
    post_windows(&s, "train", 1..13, &[2, 4, 5, 6, 7]);
    // A summary posted again changes nothing.
    post_windows(&s, "train", 6..7, &[6]);
    let json = r.wait("/hook", 2);
    let rank5: Vec<(&str, u64)> = json
        .iter()
        .filter(|e| about_rank(e, 5))
        .map(|e| (e["event"].as_str().unwrap(), e["window"].as_u64().unwrap()))
        .collect();
    // Opened with its second window running (5), resolved with its second window
    // without (9): the blip of window 2 paged nobody.
    assert_eq!(rank5, [("opened", 5), ("resolved", 9)], "{json:#?}");
    assert!(
        json.iter().all(|e| e["culprits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["rank"].as_u64().is_none_or(|r| r == 5))),
        "only rank 5 is named: {json:#?}"
    );
    let opened = json
        .iter()
        .find(|e| e["event"] == "opened" && about_rank(e, 5))
        .unwrap();
    assert_eq!(
        (opened["job_id"].as_str(), opened["severity"].as_str()),
        (Some("train"), Some("warning"))
    );
    assert!(opened["action"].as_str().is_some_and(|a| !a.is_empty()));
    let slack = r.wait("/slack", json.len());
    assert_eq!(slack.len(), json.len());
    assert!(
        slack.iter().any(|m| m["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("[WARNING] Flare: job train") && t.contains("rank 5"))),
        "{slack:#?}"
    );
    // The API lists them, newest first.
    let (status, listed) = get(&s, "/api/alerts?job=train", Some(TOKEN));
    assert_eq!(status, 200);
    let listed: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| about_rank(e, 5))
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["resolved", "opened"]);

    // A silenced job: the alert is recorded, no webhook is called.
    post_windows(&s, "quiet", 1..2, &[]);
    assert_eq!(
        put_silence(&s, "quiet", r#"{"for_s": 3600, "reason": "maintenance"}"#).0,
        200
    );
    assert_eq!(put_silence(&s, "nope", r#"{"for_s": 60}"#).0, 404);
    assert_eq!(put_silence(&s, "quiet", r#"{"for_s": 0}"#).0, 400);
    post_windows(&s, "quiet", 2..6, &[2, 3, 4, 5]);
    let (_, listed) = get(&s, "/api/alerts?job=quiet", Some(TOKEN));
    let quiet: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| about_rank(e, 5))
        .collect();
    assert_eq!(quiet.len(), 1, "{listed:#?}");
    assert_eq!(
        (quiet[0]["event"].as_str(), quiet[0]["silenced"].as_bool()),
        (Some("opened"), Some(true))
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        r.wait("/hook", 0).iter().all(|e| e["job_id"] == "train"),
        "a silenced job paged"
    );
    s.stop();
}

#[test]
fn webhooks_are_checked_at_start() {
    assert!("ftp://x".parse::<Webhook>().is_err());
    assert!("slack=localhost:80".parse::<Webhook>().is_err());
    let h: Webhook = "slack=http://127.0.0.1:9/x".parse().unwrap();
    assert_eq!(h.url, "http://127.0.0.1:9/x");
}

#[test]
fn retention_deletes_quiet_jobs_whole_and_trims_summaries_to_size() {
    use flare_server::retention::Retention;
    use flare_server::store::Store;
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("flare.db").into()).unwrap();
    let s = 1_000_000_000u64;
    let mut t = 1_000 * s;
    let mut body_bytes = 0;
    for job in ["quiet", "busy"] {
        if job == "busy" {
            // Heard from an hour after the quiet one went quiet.
            t += 3_600 * s;
        }
        for w in 1..=4 {
            for node in 0..2 {
                let summary = node_summary(job, node, w, Some(5));
                let z = zstd_json(&summary);
                body_bytes = z.len() as u64;
                store.ingest(summary, z, t).unwrap();
                t += s;
            }
        }
    }
    // Jobs quiet for 30 minutes: the first one goes, whole.
    let p = store
        .prune(
            Retention {
                max_age_ns: Some(1_800 * s),
                max_summary_bytes: None,
            },
            t,
        )
        .unwrap();
    assert_eq!((p.jobs, p.summaries), (1, 8));
    let jobs: Vec<String> = store
        .jobs()
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(jobs, ["busy"]);
    assert!(store.history("quiet", 50).unwrap().is_empty());
    assert!(store.alert_events(Some("quiet"), 10).unwrap().is_empty());
    // Room for about three summaries: the oldest windows' go, their diagnoses stay.
    let p = store
        .prune(
            Retention {
                max_age_ns: None,
                max_summary_bytes: Some(3 * body_bytes + body_bytes / 2),
            },
            t,
        )
        .unwrap();
    assert_eq!(p.summaries, 5, "{p:?}");
    assert_eq!(store.history("busy", 50).unwrap().len(), 4);
    // Nothing to do a second time.
    let again = store
        .prune(
            Retention {
                max_age_ns: Some(1_800 * s),
                max_summary_bytes: Some(3 * body_bytes + body_bytes / 2),
            },
            t,
        )
        .unwrap();
    assert_eq!((again.jobs, again.summaries), (0, 0));
    // The job goes on: a new window is stored and analysed as before.
    let mut found = None;
    for node in 0..2 {
        let next = node_summary("busy", node, 5, Some(5));
        let z = zstd_json(&next);
        found = store.ingest(next, z, t).unwrap().findings;
    }
    // Analysed when its second node completed it.
    assert!(found.is_some_and(|n| n >= 1), "{found:?}");
}

#[test]
fn a_backup_taken_while_the_server_runs_opens_with_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flare.db");
    let s = TestServer::start(&db);
    for w in 1..=3 {
        for node in 0..2 {
            let (status, v) = post(
                &s,
                Some(TOKEN),
                Some("zstd"),
                &zstd_json(&node_summary("job", node, w, Some(2))),
            );
            assert_eq!(status, 200, "{v}");
        }
    }
    let out = dir.path().join("copy.db");
    let size = flare_server::retention::backup(&db, &out).unwrap();
    assert!(size > 0);
    // The server is still running and writing.
    let (status, _) = post(
        &s,
        Some(TOKEN),
        None,
        &serde_json::to_vec(&node_summary("job", 0, 4, Some(2))).unwrap(),
    );
    assert_eq!(status, 200);
    let copy = flare_server::store::Store::open(&out.clone().into()).unwrap();
    let jobs = copy.jobs().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].last_window, 3);
    assert_eq!(copy.history("job", 10).unwrap().len(), 3);
    // An existing file is never overwritten.
    let e = flare_server::retention::backup(&db, &out).unwrap_err();
    assert!(e.to_string().contains("exists already"), "{e}");
    s.stop();
}

#[test]
fn a_jobs_stored_summaries_come_back_by_window_range() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    post_windows(&s, "hist", 10..16, &[]);
    let (status, v) = get(&s, "/api/jobs/hist/summaries?from=11&to=13", Some(TOKEN));
    assert_eq!(status, 200, "{v}");
    let got: Vec<(u64, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["window"].as_u64().unwrap(),
                w["node"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(u64, String)> = (11..=13)
        .flat_map(|w| (0..2).map(move |n| (w, format!("host-{n}"))))
        .collect();
    assert_eq!(got, want);
    // The whole history by default; a job nobody posted, a reversed range, no token.
    let (status, v) = get(&s, "/api/jobs/hist/summaries", Some(TOKEN));
    assert_eq!((status, v.as_array().map(Vec::len)), (200, Some(12)));
    let (status, v) = get(&s, "/api/jobs/nobody/summaries", Some(TOKEN));
    assert_eq!(status, 404, "{v}");
    let (status, v) = get(&s, "/api/jobs/hist/summaries?from=9&to=3", Some(TOKEN));
    assert_eq!(status, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("after"), "{v}");
    let (status, _) = get(&s, "/api/jobs/hist/summaries", None);
    assert_eq!(status, 401);
}

#[test]
fn a_jobs_windows_come_back_as_one_perfetto_timeline_with_the_culprit_named() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(&dir.path().join("flare.db"));
    post_windows(&s, "tl", 0..40, &(0..40).collect::<Vec<_>>());
    // The latest 30 windows by default, as a file to save.
    let resp = client()
        .get(s.url("/api/jobs/tl/timeline"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap();
    let disposition = resp.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        disposition,
        "attachment; filename=\"flare-tl-windows-10-39.json\""
    );
    let (status, v) = reply(resp);
    assert_eq!(status, 200, "{v}");
    let events = v["traceEvents"].as_array().unwrap();
    let windows: std::collections::BTreeSet<u64> = events
        .iter()
        .filter(|e| e["cat"] == "window")
        .map(|e| e["args"]["window"].as_u64().unwrap())
        .collect();
    assert_eq!(windows, (10..40).collect());
    let culprits: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .filter(|n| n.contains("culprit"))
        .collect();
    assert_eq!(culprits.len(), 1, "{culprits:?}");
    assert!(
        culprits[0].starts_with("rank 5 · node host-1"),
        "{culprits:?}"
    );
    // A range of the caller's; a job nobody posted, a reversed range, no token.
    let (status, v) = get(&s, "/api/jobs/tl/timeline?from=3&to=4", Some(TOKEN));
    assert_eq!(status, 200);
    assert_eq!(v["otherData"]["summaries"], 4, "2 nodes x 2 windows");
    assert_eq!(get(&s, "/api/jobs/nobody/timeline", Some(TOKEN)).0, 404);
    assert_eq!(
        get(&s, "/api/jobs/tl/timeline?from=9&to=3", Some(TOKEN)).0,
        400
    );
    assert_eq!(get(&s, "/api/jobs/tl/timeline", None).0, 401);
}
