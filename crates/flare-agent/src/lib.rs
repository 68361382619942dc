//! Flare's node agent.
//!
//! One agent runs per node. Every poll it drains the shared-memory rings of the traced
//! processes on the node ([`flare_tracer`]), pairs events into spans and folds them
//! into per-rank accumulators for fixed, Unix-aligned windows (so every node cuts the
//! same windows). When a window's end plus a grace has passed it becomes one
//! [`WindowSummary`] per job: per rank, iterations, per-op counts and duration
//! percentiles, bytes, bus bandwidth, TFLOPS, busy time and drops.
//!
//! Around the [`Collector`]:
//! - a watchdog reports spans open without progress past a timeout, with stacks from
//!   py-spy (Python processes) or from the tracer's open spans and `/proc`;
//! - a [`Pusher`] ships summaries to the server from its own thread, buffering (bounded)
//!   while the server is down;
//! - [`Metrics`] exposes Prometheus metrics with bounded label sets;
//! - summaries can also be written as JSON files ([`write_summary`]).
//!
//! The collector is single-threaded and never waits on the network or on a stack
//! capture; what it holds is bounded by the number of ops per window, not events.

mod collector;
mod config;
mod error;
mod inspector;
mod logs;
mod metrics;
mod nccl;
pub mod otlp;
mod procfs;
mod pusher;
pub mod replay;
mod source;
pub mod stacks;
mod startup;
mod stats;
mod watchdog;
mod window;

pub use collector::{Collector, CollectorStats};
pub use config::{hostname, parse_duration, AgentConfig, PushConfig, DEFAULT_METRICS_LISTEN};
pub use error::AgentError;
pub use logs::{LogConfig, LogStats};
pub use metrics::{Metrics, MetricsServer, OpLabels, RankLabels, CONTENT_TYPE, OTHER};
pub use pusher::{encode as encode_summary, endpoint, is_nats, PushStats, Pusher, SUMMARIES_PATH};
pub use stats::{IntervalUnion, LogHistogram, Samples};

use flare_model::WindowSummary;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a run did, for the final log line and the exit status.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// Summaries produced (one per job per window).
    pub summaries: u64,
    pub files_written: u64,
    pub write_errors: u64,
    pub events: u64,
    pub hangs: u64,
    /// Push totals at the end; `queued` is what was not delivered.
    pub push: Option<PushStats>,
    /// What following the logs read, sent and dropped (`--logs`).
    pub logs: Option<LogStats>,
    /// OTLP export totals (`--otlp-endpoint`).
    pub otlp: Option<otlp::OtlpStats>,
}

/// The collector wired to its sinks.
pub struct Agent {
    cfg: AgentConfig,
    collector: Collector,
    pusher: Option<Pusher>,
    otlp: Option<otlp::OtlpExporter>,
    metrics: Option<Arc<Metrics>>,
    server: Option<MetricsServer>,
    logs: Option<logs::LogFollower>,
    report: RunReport,
}

impl Agent {
    /// Validates the configuration and starts the metrics server and the pusher.
    pub fn new(cfg: AgentConfig) -> Result<Agent, AgentError> {
        cfg.validate()?;
        if let Some(dir) = &cfg.out_dir {
            std::fs::create_dir_all(dir).map_err(|e| AgentError::io(dir, e))?;
        }
        let collector = Collector::new(cfg.clone())?;
        let metrics = cfg
            .metrics_listen
            .map(|_| Arc::new(Metrics::new(cfg.metrics_top_k)));
        let server = match (cfg.metrics_listen, &metrics) {
            (Some(addr), Some(m)) => Some(MetricsServer::start(addr, m.clone())?),
            _ => None,
        };
        let pusher = cfg.push.clone().map(Pusher::start).transpose()?;
        let otlp = cfg
            .otlp
            .clone()
            .map(otlp::OtlpExporter::start)
            .transpose()?;
        let logs = match (&cfg.logs, &cfg.job) {
            (Some(l), Some(job)) => Some(logs::LogFollower::start(
                l.clone(),
                job.clone(),
                cfg.node.clone(),
                cfg.window,
                cfg.grace,
            )?),
            _ => None,
        };
        tracing::info!(
            shm_dir = %cfg.shm_dir.display(),
            job = cfg.job.as_deref().unwrap_or("*"),
            node = %cfg.node,
            window = ?cfg.window,
            poll = ?cfg.poll,
            hang_timeout = ?cfg.hang_timeout,
            "flare agent started"
        );
        Ok(Agent {
            cfg,
            collector,
            pusher,
            otlp,
            metrics,
            server,
            logs,
            report: RunReport::default(),
        })
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(MetricsServer::addr)
    }

    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// One poll: drains, and emits the windows that closed. Returns them too.
    pub fn poll(&mut self) -> Vec<WindowSummary> {
        let mut out = self.collector.poll();
        if let Some(l) = &mut self.logs {
            l.attach(&mut out, false);
        }
        self.emit(&out);
        out
    }

    /// Runs until `stop` is set (by [`install_stop_handlers`] on SIGINT/SIGTERM), then
    /// flushes the current window and delivers what it can.
    pub fn run(mut self, stop: &AtomicBool) -> RunReport {
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            self.poll();
            // Sleep the rest of the poll in short slices, so a signal is seen at once.
            while !stop.load(Ordering::Relaxed) {
                let left = self.cfg.poll.saturating_sub(started.elapsed());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(50)));
            }
        }
        tracing::info!("stopping: flushing the current window");
        self.finish().1
    }

    /// Drains what is there, emits every window up to the current partial one, and
    /// delivers what it can. Returns the summaries too (for printing).
    pub fn run_once(self) -> (Vec<WindowSummary>, RunReport) {
        self.finish()
    }

    fn finish(mut self) -> (Vec<WindowSummary>, RunReport) {
        let mut out = self.collector.flush();
        if let Some(l) = &mut self.logs {
            l.stop();
            l.attach(&mut out, true);
            self.report.logs = Some(l.stats);
        }
        self.emit(&out);
        let mut report = std::mem::take(&mut self.report);
        let stats = self.collector.stats();
        report.events = stats.events;
        report.hangs = stats.hangs;
        if let Some(p) = self.pusher.take() {
            let timeout = self
                .cfg
                .push
                .as_ref()
                .map_or(Duration::ZERO, |c| c.shutdown_timeout);
            let final_stats = p.shutdown(timeout);
            if final_stats.queued > 0 {
                tracing::warn!(
                    undelivered = final_stats.queued,
                    "summaries not delivered before the shutdown deadline"
                );
            }
            report.push = Some(final_stats);
        }
        if let Some(o) = self.otlp.take() {
            let st = o.shutdown();
            if st.dropped + st.failed > 0 {
                tracing::warn!(
                    exported = st.exported,
                    dropped = st.dropped,
                    failed = st.failed,
                    "some windows' OTLP metrics were not exported"
                );
            }
            report.otlp = Some(st);
        }
        if let Some(m) = &self.metrics {
            m.update_agent(&stats, report.push.as_ref());
        }
        tracing::info!(
            summaries = report.summaries,
            events = report.events,
            hangs = report.hangs,
            "flare agent stopped"
        );
        (out, report)
    }

    fn emit(&mut self, summaries: &[WindowSummary]) {
        for s in summaries {
            self.report.summaries += 1;
            tracing::debug!(
                job = %s.job_id,
                window = s.window,
                ranks = s.ranks.len(),
                hangs = s.hangs.len(),
                "window summarised"
            );
            if let Some(m) = &self.metrics {
                m.observe(s);
            }
            if let Some(dir) = &self.cfg.out_dir {
                match write_summary(dir, s) {
                    Ok(_) => self.report.files_written += 1,
                    Err(e) => {
                        self.report.write_errors += 1;
                        tracing::error!(error = %e, "cannot write a summary");
                    }
                }
            }
            if let Some(o) = &self.otlp {
                o.submit(s);
            }
            if let Some(p) = &self.pusher {
                if let Err(e) = p.submit(s) {
                    tracing::error!(error = %e, window = s.window, "cannot queue a summary");
                }
            }
        }
        if let Some(m) = &self.metrics {
            let push = self.pusher.as_ref().map(Pusher::stats);
            m.update_agent(&self.collector.stats(), push.as_ref());
        }
    }
}

/// Writes a summary as `<job>-<node>-w<window>.json` into `dir` (atomically: a reader
/// never sees half a file). A second summary of the same window (after an agent
/// restart) gets a numbered name instead of replacing the first.
pub fn write_summary(dir: &Path, s: &WindowSummary) -> Result<PathBuf, AgentError> {
    let base = format!(
        "{}-{}-w{}",
        flare_tracer::Config::file_job_id(&s.job_id),
        flare_tracer::Config::file_job_id(&s.node),
        s.window
    );
    let mut path = dir.join(format!("{base}.json"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{base}-{n}.json"));
    }
    let json = serde_json::to_vec_pretty(s).map_err(|e| AgentError::Encode(e.to_string()))?;
    let tmp = dir.join(format!(".{base}.json.tmp"));
    std::fs::write(&tmp, json).map_err(|e| AgentError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| AgentError::io(&path, e))?;
    Ok(path)
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // A second signal means "now": the flush may be stuck on an unreachable server.
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// Installs SIGINT and SIGTERM handlers that set the returned flag (a second signal
/// exits at once).
pub fn install_stop_handlers() -> Result<&'static AtomicBool, AgentError> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic and
        // calls _exit, both async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(AgentError::Signal(std::io::Error::last_os_error()));
            }
        }
    }
    Ok(&STOP)
}

/// Logs to stderr at the level in `FLARE_LOG` (error, warn, info, debug, trace; info by
/// default). Does nothing if a subscriber is already installed.
pub fn init_logging() {
    let level = match std::env::var("FLARE_LOG")
        .unwrap_or_default()
        .to_ascii_lowercase()
        .as_str()
    {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .try_init();
}
