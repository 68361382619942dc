//! Hang reports: stack captures run on their own threads (py-spy can take seconds, and a
//! `/proc` read of a process stuck in the kernel can block), so the collector never waits.

use crate::stacks::{self, RingStack};
use flare_model::{HangRecord, PeerStacks};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

/// Captures running at once; more wait in a queue (a job-wide hang stalls every rank of
/// the node at the same moment, and eight py-spy runs at once are enough).
const MAX_IN_FLIGHT: usize = 8;

/// What a capture is for; its stacks are filled in when it is done.
#[derive(Debug)]
pub enum Capture {
    /// Ops of the process stalled past the limit.
    Stuck(Vec<HangRecord>),
    /// A process that is not stuck, while peers of its job on this node are.
    Peer(PeerStacks),
}

impl Capture {
    /// When the capture was asked for (Unix ns).
    pub fn asked_unix_ns(&self) -> u64 {
        match self {
            Capture::Stuck(records) => records.first().map_or(0, |h| h.detected_unix_ns),
            Capture::Peer(p) => p.captured_unix_ns,
        }
    }
}

/// One process whose stacks are wanted.
pub struct CaptureRequest {
    pub job: String,
    pub pid: u32,
    pub capture: Capture,
    pub rings: Vec<RingStack>,
}

/// A finished capture: the job and what it was for, with its stacks.
pub type Captured = (String, Capture);

pub struct Watchdog {
    py_spy: Option<PathBuf>,
    stack_timeout: Duration,
    tx: Sender<Captured>,
    rx: Receiver<Captured>,
    in_flight: usize,
    queue: VecDeque<CaptureRequest>,
}

impl Watchdog {
    pub fn new(py_spy: Option<PathBuf>, stack_timeout: Duration) -> Watchdog {
        let (tx, rx) = channel();
        Watchdog {
            py_spy,
            stack_timeout,
            tx,
            rx,
            in_flight: 0,
            queue: VecDeque::new(),
        }
    }

    pub fn py_spy(&self) -> Option<&std::path::Path> {
        self.py_spy.as_deref()
    }

    pub fn submit(&mut self, req: CaptureRequest) {
        if self.in_flight >= MAX_IN_FLIGHT {
            self.queue.push_back(req);
            return;
        }
        self.start(req);
    }

    fn start(&mut self, req: CaptureRequest) {
        let py_spy = self.py_spy.clone();
        let timeout = self.stack_timeout;
        let tx = self.tx.clone();
        let (job, pid) = (req.job.clone(), req.pid);
        // The request moves into the thread; if the thread cannot start, the fast native
        // view is taken here rather than losing the report.
        let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(req)));
        let thread_slot = slot.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("flare-stacks-{pid}"))
            .spawn(move || {
                let req = thread_slot.lock().ok().and_then(|mut s| s.take());
                if let Some(req) = req {
                    let _ = tx.send(finish(req, py_spy.as_deref(), timeout));
                }
            });
        match spawned {
            Ok(_) => self.in_flight += 1,
            Err(e) => {
                tracing::warn!(pid, %job, error = %e, "cannot start a stack capture thread; using native stacks inline");
                let req = slot.lock().ok().and_then(|mut s| s.take());
                if let Some(req) = req {
                    let _ = self.tx.send(finish(req, None, timeout));
                    // Accounted as if a thread had run, so collect() balances it.
                    self.in_flight += 1;
                }
            }
        }
    }

    /// Captures whose stacks are ready.
    pub fn collect(&mut self) -> Vec<Captured> {
        let mut out = Vec::new();
        while let Ok(done) = self.rx.try_recv() {
            self.in_flight = self.in_flight.saturating_sub(1);
            out.push(done);
        }
        while self.in_flight < MAX_IN_FLIGHT {
            match self.queue.pop_front() {
                Some(req) => self.start(req),
                None => break,
            }
        }
        out
    }

    /// Waits (up to `deadline`) for the captures under way, for a final flush.
    pub fn wait_idle(&mut self, deadline: Instant) -> Vec<Captured> {
        let mut out = self.collect();
        while self.in_flight > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.rx.recv_timeout(left) {
                Ok(done) => {
                    self.in_flight -= 1;
                    out.push(done);
                    out.extend(self.collect());
                }
                Err(_) => break,
            }
        }
        out
    }

    pub fn busy(&self) -> bool {
        self.in_flight > 0 || !self.queue.is_empty()
    }
}

fn finish(req: CaptureRequest, py_spy: Option<&std::path::Path>, timeout: Duration) -> Captured {
    let (stacks, source) = stacks::capture(req.pid, &req.rings, py_spy, timeout);
    let capture = match req.capture {
        Capture::Stuck(records) => Capture::Stuck(
            records
                .into_iter()
                .map(|mut r| {
                    r.stacks = stacks.clone();
                    r.stack_source = source.to_string();
                    tracing::warn!(
                        rank = r.rank,
                        pid = r.pid,
                        op = %r.op,
                        kind = r.kind.as_str(),
                        group = r.group.as_deref().unwrap_or("-"),
                        in_flight_s = r.in_flight_ns as f64 / 1e9,
                        stack_source = source,
                        threads = stacks.len(),
                        "hang: op in flight with no progress past the watchdog limit"
                    );
                    r
                })
                .collect(),
        ),
        Capture::Peer(mut p) => {
            tracing::info!(
                rank = p.rank,
                pid = p.pid,
                open_op = p.open_op.as_deref().unwrap_or("-"),
                stack_source = source,
                threads = stacks.len(),
                "hang: stacks of a rank not stuck while peers of its job are"
            );
            p.stacks = stacks;
            p.stack_source = source.to_string();
            Capture::Peer(p)
        }
    };
    (req.job, capture)
}
