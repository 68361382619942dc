//! Helpers shared by the integration tests: real tracer files written with the
//! tracer's own producer, events at chosen wall-clock times, and a recording HTTP server.

#![allow(dead_code)]

use flare_agent::AgentConfig;
use flare_model::{OpKind, WindowSummary};
use flare_tracer::{Config, Event, FileProducer, NameId, ProcessInfo, RingFile, SpanArgs, Tag};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const SEC: u64 = 1_000_000_000;
pub const MS: u64 = 1_000_000;

/// A tracer file written from the test, with the clock anchor it was created with.
pub struct Ring {
    pub producer: FileProducer,
    pub info: ProcessInfo,
    pub path: PathBuf,
}

impl Ring {
    pub fn create(dir: &Path, job: &str, rank: u32, world: u32, pid: u32) -> Ring {
        Ring::create_sized(dir, job, rank, world, pid, 8, 1 << 14)
    }

    pub fn create_sized(
        dir: &Path,
        job: &str,
        rank: u32,
        world: u32,
        pid: u32,
        rings: u32,
        capacity: u32,
    ) -> Ring {
        let cfg = Config {
            job_id: job.into(),
            rank,
            local_rank: rank % 8,
            world_size: world,
            shm_dir: dir.to_path_buf(),
            max_rings: rings,
            ring_capacity: capacity,
            ..Config::default()
        };
        let path = dir.join(format!(
            "flare-{}-r{rank}-p{pid}.ring",
            Config::file_job_id(job)
        ));
        let producer = FileProducer::create(&path, &cfg, pid).unwrap();
        let info = RingFile::open(&path).unwrap().info().clone();
        Ring {
            producer,
            info,
            path,
        }
    }

    /// The monotonic time the file's anchor maps to `unix_ns`.
    pub fn mono(&self, unix_ns: u64) -> u64 {
        (self.info.anchor_mono_ns as i128 + unix_ns as i128 - self.info.anchor_unix_ns as i128)
            as u64
    }

    pub fn name(&mut self, n: &str) -> NameId {
        self.producer.intern(n)
    }

    fn push(&mut self, ring: u32, ev: Event) {
        assert!(self.producer.push(ring, &ev), "test ring full");
    }

    /// A nested span [start, end) (Unix ns) on `ring`, with `inner` pushed between.
    pub fn begin(&mut self, ring: u32, name: &str, kind: OpKind, unix: u64, args: SpanArgs) {
        let id = self.name(name);
        let (a, b, c) = args.pack();
        let ts = self.mono(unix);
        self.push(
            ring,
            Event {
                ts_ns: ts,
                name: id.0,
                tag: Tag::Begin as u8,
                kind: kind as u8,
                a,
                b,
                c,
                ..Event::default()
            },
        );
    }

    pub fn end(&mut self, ring: u32, name: &str, kind: OpKind, unix: u64) {
        let id = self.name(name);
        let ts = self.mono(unix);
        self.push(
            ring,
            Event {
                ts_ns: ts,
                name: id.0,
                tag: Tag::End as u8,
                kind: kind as u8,
                ..Event::default()
            },
        );
    }

    pub fn span(
        &mut self,
        ring: u32,
        name: &str,
        kind: OpKind,
        start: u64,
        end: u64,
        args: SpanArgs,
    ) {
        self.begin(ring, name, kind, start, args);
        self.end(ring, name, kind, end);
    }

    pub fn async_begin(
        &mut self,
        ring: u32,
        id: u64,
        name: &str,
        kind: OpKind,
        unix: u64,
        args: SpanArgs,
    ) {
        let n = self.name(name);
        let (a, b, c) = args.pack();
        let ts = self.mono(unix);
        self.push(
            ring,
            Event {
                ts_ns: ts,
                name: n.0,
                tag: Tag::AsyncBegin as u8,
                kind: kind as u8,
                id,
                a,
                b,
                c,
                ..Event::default()
            },
        );
    }

    pub fn async_state(&mut self, ring: u32, id: u64, unix: u64) {
        let ts = self.mono(unix);
        self.push(
            ring,
            Event {
                ts_ns: ts,
                tag: Tag::AsyncState as u8,
                id,
                a: 1,
                ..Event::default()
            },
        );
    }

    pub fn async_end(&mut self, ring: u32, id: u64, name: &str, kind: OpKind, unix: u64) {
        let n = self.name(name);
        let ts = self.mono(unix);
        self.push(
            ring,
            Event {
                ts_ns: ts,
                name: n.0,
                tag: Tag::AsyncEnd as u8,
                kind: kind as u8,
                id,
                ..Event::default()
            },
        );
    }

    pub fn step(&mut self, ring: u32, step: u64, unix: u64) {
        let ts = self.mono(unix);
        self.push(
            ring,
            Event {
                ts_ns: ts,
                tag: Tag::Step as u8,
                a: step,
                ..Event::default()
            },
        );
    }

    pub fn comm(&mut self, group: &str, size: u32, bytes: u64, issue_ns: u32) -> SpanArgs {
        SpanArgs {
            amount: bytes,
            group: self.name(group),
            seq: 0,
            group_size: size,
            issue_latency_ns: issue_ns,
        }
    }
}

pub fn unix_now() -> u64 {
    flare_tracer::clock::unix_ns()
}

/// A configuration for tests: the given directory and job, no sinks, quick scans.
pub fn config(dir: &Path, job: &str) -> AgentConfig {
    AgentConfig {
        shm_dir: dir.to_path_buf(),
        job: Some(job.to_string()),
        node: "test-node".into(),
        window: Duration::from_secs(10),
        poll: Duration::from_millis(50),
        scan_interval: Duration::from_millis(50),
        liveness_grace: Duration::ZERO,
        heartbeat: false,
        ..AgentConfig::default()
    }
}

/// Summaries of one window (one per job; tests use one job).
pub fn window(all: &[WindowSummary], w: u64) -> &WindowSummary {
    all.iter().find(|s| s.window == w).unwrap_or_else(|| {
        panic!(
            "no summary for window {w} in {:?}",
            all.iter().map(|s| s.window).collect::<Vec<_>>()
        )
    })
}

/// What the recording server received.
#[derive(Clone, Debug)]
pub struct Received {
    pub authorization: Option<String>,
    pub encoding: Option<String>,
    pub summary: WindowSummary,
}

/// A real HTTP server (axum) that accepts summaries like `flare serve` does: bearer
/// token, zstd body, JSON summary; 401 on a wrong token, 400 on a bad body.
pub struct TestServer {
    pub addr: std::net::SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    pub fn start(addr: &str, token: &'static str) -> TestServer {
        use axum::http::{HeaderMap, StatusCode};
        let listener = std::net::TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let rec = received.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let handler = move |headers: HeaderMap, body: axum::body::Bytes| {
                    let rec = rec.clone();
                    async move {
                        let h = |k: &str| {
                            headers
                                .get(k)
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_string)
                        };
                        let authorization = h("authorization");
                        if authorization.as_deref() != Some(&format!("Bearer {token}")) {
                            return StatusCode::UNAUTHORIZED;
                        }
                        let Ok(json) = zstd::stream::decode_all(&body[..]) else {
                            return StatusCode::BAD_REQUEST;
                        };
                        let Ok(summary) = serde_json::from_slice::<WindowSummary>(&json) else {
                            return StatusCode::BAD_REQUEST;
                        };
                        rec.lock().unwrap().push(Received {
                            authorization,
                            encoding: h("content-encoding"),
                            summary,
                        });
                        StatusCode::OK
                    }
                };
                let app =
                    axum::Router::new().route("/api/v1/summaries", axum::routing::post(handler));
                let l = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(l, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        TestServer {
            addr,
            received,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// Waits until `n` summaries arrived (or panics after `timeout`).
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = std::time::Instant::now() + timeout;
        while self.count() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "only {} of {n} summaries arrived",
                self.count()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.received.lock().unwrap().clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
