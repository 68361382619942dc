//! The server end to end: a real server on 127.0.0.1:0 with a SQLite file in a scratch
//! directory, and a blocking HTTP client as the agents use. Shared by the tests.
#![allow(dead_code)]

use flare_model::summary::SUMMARY_VERSION;
use flare_model::{IterationSample, OpKind, OpStats, RankSummary, WindowSummary};
use flare_server::alerts::Webhook;
use flare_server::store::DbLocation;
use flare_server::{run_blocking, ServerConfig};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

pub const TOKEN: &str = "test-token-0123456789";
pub const MAX_BODY: usize = 32 << 10;
pub const MS: u64 = 1_000_000;

/// The tests' server configuration: port 0, the test token, a small body limit.
pub fn config(db: &Path) -> ServerConfig {
    config_at(db.to_path_buf().into())
}

/// [`config`] on any database.
pub fn config_at(db: DbLocation) -> ServerConfig {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), db, TOKEN.into());
    cfg.max_body_bytes = MAX_BODY;
    cfg
}

pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    pub fn start(db: &Path) -> TestServer {
        TestServer::start_with(db, vec![])
    }

    pub fn start_with(db: &Path, webhooks: Vec<Webhook>) -> TestServer {
        let mut cfg = config(db);
        cfg.webhooks = webhooks;
        TestServer::start_cfg(cfg)
    }

    pub fn start_cfg(cfg: ServerConfig) -> TestServer {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            run_blocking(cfg, move |addr| addr_tx.send(addr).unwrap(), async move {
                let _ = stop_rx.await;
            })
            .expect("server failed");
        });
        let addr = addr_rx.recv().expect("server did not start");
        TestServer {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread panicked");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

pub fn reply(mut resp: ureq::http::Response<ureq::Body>) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, v)
}

pub fn post(
    s: &TestServer,
    token: Option<&str>,
    encoding: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let mut req = client()
        .post(s.url("/api/v1/summaries"))
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    if let Some(e) = encoding {
        req = req.header("Content-Encoding", e);
    }
    reply(req.send(body).unwrap())
}

pub fn get(s: &TestServer, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = client().get(s.url(path));
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    reply(req.call().unwrap())
}

pub fn op(name: &str, kind: OpKind, group: Option<&str>, count: u64, total_ns: u64) -> OpStats {
    OpStats {
        name: name.into(),
        kind,
        group: group.map(str::to_string),
        group_size: group.map(|_| 8),
        count,
        total_ns,
        p50_ns: total_ns / count,
        p99_ns: total_ns / count,
        max_ns: total_ns / count,
        bytes: 0,
        flops: 0,
        bus_gbps: None,
        tflops: None,
        issue_p50_ns: None,
        issue_p99_ns: None,
    }
}

/// One node's summary of a synchronous 8-rank job (4 ranks per node) in which
/// `slow_rank` computes 1.3x slower and the others wait for it in the all-reduce.
pub fn node_summary(job: &str, node: u32, window: u64, slow_rank: Option<u32>) -> WindowSummary {
    let its = 10u64;
    let jitter = |r: u32| 1.0 + 0.01 * ((r * 7 + window as u32) % 5) as f64 / 4.0;
    let compute = |r: u32| 100.0 * jitter(r) * if Some(r) == slow_rank { 1.3 } else { 1.0 };
    let iter_ms = (0..8).map(compute).fold(0.0, f64::max) + 10.0 + 20.0;
    let ns = |ms: f64| (ms * its as f64 * MS as f64) as u64;
    WindowSummary {
        parallel: None,
        version: SUMMARY_VERSION,
        job_id: job.into(),
        node: format!("host-{node}"),
        window,
        window_ns: 60_000 * MS,
        start_unix_ns: window * 60_000 * MS,
        end_unix_ns: (window + 1) * 60_000 * MS,
        world_size: 8,
        ranks: (node * 4..node * 4 + 4)
            .map(|r| {
                let c = compute(r);
                RankSummary {
                    iterations: (0..its)
                        .map(|i| IterationSample {
                            step: window * its + i,
                            start_unix_ns: window * 60_000 * MS + i * iter_ms as u64 * MS,
                            duration_ns: (iter_ms * MS as f64) as u64,
                        })
                        .collect(),
                    ops: vec![
                        op("gemm", OpKind::Compute, None, its * 50, ns(c)),
                        op("dataloader", OpKind::DataLoader, None, its, ns(10.0)),
                        op(
                            "allreduce",
                            OpKind::AllReduce,
                            Some("dp"),
                            its,
                            ns(iter_ms - c - 10.0),
                        ),
                    ],
                    busy_ns: ns(iter_ms),
                    observed_ns: ns(iter_ms),
                    events: its * 52,
                    ..RankSummary::empty(r, r % 4, 4000 + r)
                }
            })
            .collect(),
        hangs: vec![],
        peer_stacks: Vec::new(),
        logs: None,
    }
}

pub fn zstd_json(s: &WindowSummary) -> Vec<u8> {
    zstd::encode_all(serde_json::to_vec(s).unwrap().as_slice(), 3).unwrap()
}
