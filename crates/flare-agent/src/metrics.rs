//! Prometheus metrics (OpenMetrics text on `/metrics`), with bounded label sets.
//!
//! Labels are `rank` and `kind`, plus `name` for the top-K op names of each rank by time
//! in the last window; every other op is aggregated under `name="other"`. Series of a
//! name that loses its seat are removed, so a rank never has more than K+1 name values
//! however many distinct ops it runs. Gauges describe the last window; counters add up
//! every window since the agent started.

use crate::collector::CollectorStats;
use crate::pusher::PushStats;
use crate::AgentError;
use flare_model::{OpStats, RankSummary, WindowSummary};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub const OTHER: &str = "other";
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub rank: u32,
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RankLabels {
    pub rank: u32,
}

type FGauge = Gauge<f64, AtomicU64>;
type FCounter = Counter<f64, AtomicU64>;

#[derive(Default)]
struct Seen {
    /// Per rank: op series with counters, and those whose gauges the last window set.
    counter_labels: HashMap<u32, HashSet<OpLabels>>,
    gauge_labels: HashMap<u32, HashSet<OpLabels>>,
    /// Per (job, rank): the process and its cumulative drops at the last window.
    drops: HashMap<(String, u32), (u32, u64)>,
    /// Per job: the ranks of its last window (gauges of ranks that left are removed).
    ranks: HashMap<String, HashSet<u32>>,
    collector: CollectorStats,
    push: PushStats,
}

pub struct Metrics {
    registry: Registry,
    top_k: usize,
    op_p50: Family<OpLabels, FGauge>,
    op_p99: Family<OpLabels, FGauge>,
    op_bus_bw: Family<OpLabels, FGauge>,
    op_count: Family<OpLabels, Counter>,
    op_bytes: Family<OpLabels, Counter>,
    op_time: Family<OpLabels, FCounter>,
    iteration: Family<RankLabels, FGauge>,
    iterations: Family<RankLabels, Counter>,
    void_share: Family<RankLabels, FGauge>,
    events: Family<RankLabels, Counter>,
    dropped: Family<RankLabels, Counter>,
    hangs: Family<RankLabels, Counter>,
    last_window: Gauge,
    files_open: Gauge,
    late: Counter,
    rank_conflicts: Counter,
    push_queue: Gauge,
    push_queue_bytes: Gauge,
    push_sent: Counter,
    push_dropped: Counter,
    push_failures: Counter,
    push_rejected: Counter,
    seen: Mutex<Seen>,
}

impl Metrics {
    pub fn new(top_k: usize) -> Metrics {
        let mut registry = Registry::with_prefix("flare");
        let m = Metrics {
            registry: Registry::default(),
            top_k: top_k.max(1),
            op_p50: Family::default(),
            op_p99: Family::default(),
            op_bus_bw: Family::default(),
            op_count: Family::default(),
            op_bytes: Family::default(),
            op_time: Family::default(),
            iteration: Family::default(),
            iterations: Family::default(),
            void_share: Family::default(),
            events: Family::default(),
            dropped: Family::default(),
            hangs: Family::default(),
            last_window: Gauge::default(),
            files_open: Gauge::default(),
            late: Counter::default(),
            rank_conflicts: Counter::default(),
            push_queue: Gauge::default(),
            push_queue_bytes: Gauge::default(),
            push_sent: Counter::default(),
            push_dropped: Counter::default(),
            push_failures: Counter::default(),
            push_rejected: Counter::default(),
            seen: Mutex::new(Seen::default()),
        };
        let r = &mut registry;
        r.register_with_unit(
            "op_duration_p50",
            "Median op duration in the last window",
            Unit::Seconds,
            m.op_p50.clone(),
        );
        r.register_with_unit(
            "op_duration_p99",
            "99th percentile op duration in the last window",
            Unit::Seconds,
            m.op_p99.clone(),
        );
        r.register(
            "op_bus_bandwidth_gbps",
            "Median bus bandwidth (GB/s) of communication ops in the last window",
            m.op_bus_bw.clone(),
        );
        r.register("ops", "Ops completed", m.op_count.clone());
        r.register_with_unit("op", "Bytes moved by ops", Unit::Bytes, m.op_bytes.clone());
        r.register_with_unit("op", "Time spent in ops", Unit::Seconds, m.op_time.clone());
        r.register_with_unit(
            "iteration",
            "Median iteration duration in the last window",
            Unit::Seconds,
            m.iteration.clone(),
        );
        r.register("iterations", "Iterations completed", m.iterations.clone());
        r.register(
            "void_share",
            "Share of the last window with no top-level span open",
            m.void_share.clone(),
        );
        r.register("events", "Tracer events drained", m.events.clone());
        r.register(
            "dropped_events",
            "Tracer events dropped by full rings",
            m.dropped.clone(),
        );
        r.register(
            "hangs",
            "Ops reported stuck by the watchdog",
            m.hangs.clone(),
        );
        r.register(
            "last_window",
            "Index of the last window summarised",
            m.last_window.clone(),
        );
        r.register(
            "agent_files_open",
            "Tracer files being drained",
            m.files_open.clone(),
        );
        r.register("agent_late_events", "Events outside the open windows (after their window was emitted, or older than the backlog)", m.late.clone());
        r.register("agent_rank_conflicts", "Tracer files refused because another live process claims the same rank of the same job", m.rank_conflicts.clone());
        r.register(
            "push_queue_length",
            "Summaries waiting to be pushed",
            m.push_queue.clone(),
        );
        r.register_with_unit(
            "push_queue",
            "Compressed bytes waiting to be pushed",
            Unit::Bytes,
            m.push_queue_bytes.clone(),
        );
        r.register("push_sent", "Summaries delivered", m.push_sent.clone());
        r.register(
            "push_dropped",
            "Summaries dropped from a full push queue",
            m.push_dropped.clone(),
        );
        r.register(
            "push_failures",
            "Failed push attempts (retried)",
            m.push_failures.clone(),
        );
        r.register(
            "push_rejected",
            "Summaries the server refused",
            m.push_rejected.clone(),
        );
        Metrics { registry, ..m }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The exposition text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Updates every metric from a window's summary.
    pub fn observe(&self, s: &WindowSummary) {
        let mut seen = self.seen();
        self.last_window.set(
            self.last_window
                .get()
                .max(s.window.min(i64::MAX as u64) as i64),
        );
        for r in &s.ranks {
            self.observe_rank(&mut seen, &s.job_id, r);
        }
        // Gauges describe the last window: a rank absent from it (its process ended)
        // keeps its counters but loses its gauges.
        let now: HashSet<u32> = s.ranks.iter().map(|r| r.rank).collect();
        let before = seen.ranks.insert(s.job_id.clone(), now.clone());
        for gone in before.unwrap_or_default().difference(&now) {
            if let Some(labels) = seen.gauge_labels.remove(gone) {
                for l in &labels {
                    self.op_p50.remove(l);
                    self.op_p99.remove(l);
                    self.op_bus_bw.remove(l);
                }
            }
            let rank = RankLabels { rank: *gone };
            self.iteration.remove(&rank);
            self.void_share.remove(&rank);
        }
        for h in &s.hangs {
            self.hangs.get_or_create(&RankLabels { rank: h.rank }).inc();
        }
    }

    fn observe_rank(&self, seen: &mut Seen, job: &str, r: &RankSummary) {
        let rank = RankLabels { rank: r.rank };
        let top = top_names(&r.ops, self.top_k);
        let label = |op: &OpStats, named: bool| OpLabels {
            rank: r.rank,
            kind: op.kind.as_str().to_string(),
            name: if named { op.name.clone() } else { OTHER.into() },
        };

        // Counters: named ops and the aggregated rest.
        let counters = seen.counter_labels.entry(r.rank).or_default();
        counters.retain(|l| {
            let keep = l.name == OTHER || top.contains(l.name.as_str());
            if !keep {
                self.op_count.remove(l);
                self.op_bytes.remove(l);
                self.op_time.remove(l);
            }
            keep
        });
        for op in &r.ops {
            let l = label(op, top.contains(op.name.as_str()));
            self.op_count.get_or_create(&l).inc_by(op.count);
            self.op_bytes.get_or_create(&l).inc_by(op.bytes);
            self.op_time
                .get_or_create(&l)
                .inc_by(op.total_ns as f64 / 1e9);
            counters.insert(l);
        }

        // Gauges of the last window, named ops only (percentiles of "other" would mix
        // unrelated ops). Several communicators of one name: the busiest one speaks.
        let mut best: HashMap<OpLabels, &OpStats> = HashMap::new();
        for op in r.ops.iter().filter(|o| top.contains(o.name.as_str())) {
            let l = label(op, true);
            match best.get(&l) {
                Some(b) if b.total_ns >= op.total_ns => {}
                _ => {
                    best.insert(l, op);
                }
            }
        }
        let gauges = seen.gauge_labels.entry(r.rank).or_default();
        for l in gauges.iter().filter(|l| !best.contains_key(*l)) {
            self.op_p50.remove(l);
            self.op_p99.remove(l);
            self.op_bus_bw.remove(l);
        }
        gauges.clear();
        for (l, op) in best {
            let p99 = r
                .ops
                .iter()
                .filter(|o| o.name == op.name && o.kind == op.kind)
                .map(|o| o.p99_ns)
                .max()
                .unwrap_or(op.p99_ns);
            self.op_p50.get_or_create(&l).set(op.p50_ns as f64 / 1e9);
            self.op_p99.get_or_create(&l).set(p99 as f64 / 1e9);
            match op.bus_gbps {
                Some(bw) => {
                    self.op_bus_bw.get_or_create(&l).set(bw);
                }
                None => {
                    self.op_bus_bw.remove(&l);
                }
            }
            gauges.insert(l);
        }

        let mut durations: Vec<u64> = r.iterations.iter().map(|i| i.duration_ns).collect();
        if durations.is_empty() {
            self.iteration.remove(&rank);
        } else {
            durations.sort_unstable();
            let median = durations[(durations.len() - 1) / 2];
            self.iteration.get_or_create(&rank).set(median as f64 / 1e9);
        }
        self.iterations
            .get_or_create(&rank)
            .inc_by(r.iterations.len() as u64);
        if r.observed_ns > 0 {
            self.void_share.get_or_create(&rank).set(r.void_share());
        }
        self.events.get_or_create(&rank).inc_by(r.events);
        // Drops are cumulative per process: count what is new since the last window,
        // and everything of a new process.
        let prev = seen
            .drops
            .insert((job.to_string(), r.rank), (r.pid, r.dropped_total));
        let new = match prev {
            Some((pid, before)) if pid == r.pid => r.dropped_total.saturating_sub(before),
            _ => r.dropped_total,
        };
        self.dropped.get_or_create(&rank).inc_by(new);
    }

    /// Agent-level gauges and counters, after each poll.
    pub fn update_agent(&self, c: &CollectorStats, p: Option<&PushStats>) {
        let mut seen = self.seen();
        self.files_open.set(c.files_open as i64);
        self.late.inc_by(c.late.saturating_sub(seen.collector.late));
        self.rank_conflicts.inc_by(
            c.rank_conflicts
                .saturating_sub(seen.collector.rank_conflicts),
        );
        seen.collector = *c;
        if let Some(p) = p {
            self.push_queue.set(p.queued as i64);
            self.push_queue_bytes.set(p.queued_bytes as i64);
            self.push_sent.inc_by(p.sent.saturating_sub(seen.push.sent));
            self.push_dropped
                .inc_by(p.dropped.saturating_sub(seen.push.dropped));
            self.push_failures
                .inc_by(p.failures.saturating_sub(seen.push.failures));
            self.push_rejected
                .inc_by(p.rejected.saturating_sub(seen.push.rejected));
            seen.push = *p;
        }
    }
}

/// The `k` names with the most time (summed over kinds and communicators); ties by name.
fn top_names(ops: &[OpStats], k: usize) -> HashSet<&str> {
    let mut time: HashMap<&str, u64> = HashMap::new();
    for op in ops {
        *time.entry(op.name.as_str()).or_default() += op.total_ns;
    }
    let mut names: Vec<(&str, u64)> = time.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    // A real op called "other" would be confused with the aggregate; it never gets a seat.
    names
        .into_iter()
        .filter(|(n, _)| *n != OTHER)
        .take(k)
        .map(|(n, _)| n)
        .collect()
}

/// The `/metrics` endpoint: axum on a one-thread tokio runtime of its own, so scrapes
/// never compete with the collector.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    pub fn start(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<MetricsServer, AgentError> {
        let listen_err = |source| AgentError::MetricsListen { addr, source };
        // Bound here, so a taken port fails start-up rather than a background thread.
        let listener = std::net::TcpListener::bind(addr).map_err(listen_err)?;
        listener.set_nonblocking(true).map_err(listen_err)?;
        let local = listener.local_addr().map_err(listen_err)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("flare-metrics".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot start the metrics runtime");
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "cannot serve metrics");
                            return;
                        }
                    };
                    let app = axum::Router::new()
                        .route("/metrics", axum::routing::get(scrape))
                        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
                        .with_state(metrics);
                    let served = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                    if let Err(e) = served {
                        tracing::error!(error = %e, "metrics server stopped");
                    }
                });
            })
            .map_err(|source| AgentError::Thread {
                what: "metrics",
                source,
            })?;
        tracing::info!(addr = %local, "serving Prometheus metrics on /metrics");
        Ok(MetricsServer {
            addr: local,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn scrape(
    axum::extract::State(metrics): axum::extract::State<Arc<Metrics>>,
) -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)],
        metrics.encode(),
    )
}
