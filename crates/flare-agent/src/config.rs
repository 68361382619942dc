//! The agent's configuration, with the defaults the CLI documents.

use crate::AgentError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the agent needs to run. [`AgentConfig::default`] is the production setup
/// minus the sinks (no server, no output directory, no metrics listener).
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Where traced processes create their ring files.
    pub shm_dir: PathBuf,
    /// Only files of this job (by the tracer's job id); all jobs when `None`.
    pub job: Option<String>,
    /// The node name in summaries (the host name by default).
    pub node: String,
    /// Summary window; windows are aligned to Unix time so every node cuts the same ones.
    pub window: Duration,
    /// How long after a window's end its summary waits for late events.
    pub grace: Duration,
    /// How often the rings are drained.
    pub poll: Duration,
    /// How often the directory is scanned for new files and processes checked for life.
    pub scan_interval: Duration,
    /// How far before the agent's start buffered events are still summarised (a
    /// restarted agent picks up what the rings kept; older events are skipped).
    pub backlog: Duration,
    /// A process whose pid is gone is considered dead only after its rings stayed quiet
    /// this long (guards against a pid namespace the agent cannot see into).
    pub liveness_grace: Duration,
    /// An open span with no progress for this long is reported as a hang.
    pub hang_timeout: Duration,
    /// An explicit py-spy binary; otherwise `py-spy` on PATH, then the repository venv.
    pub py_spy: Option<PathBuf>,
    /// Longest a stack capture (py-spy) may take before it is killed.
    pub stack_timeout: Duration,
    /// Exact duration samples kept per op per window before switching to a histogram.
    pub max_exact_samples: usize,
    /// Write the agent heartbeat into the files (tells producers an agent collects
    /// them, so they leave their file for the agent at exit). Off for one-shot runs.
    pub heartbeat: bool,
    pub push: Option<PushConfig>,
    /// Export each window's metrics over OTLP/HTTP.
    pub otlp: Option<crate::otlp::OtlpConfig>,
    /// Write every summary as JSON into this directory.
    pub out_dir: Option<PathBuf>,
    /// Write NCCL Inspector's JSON lines and Prometheus files here (`--inspector-out`),
    /// from the events of Flare's NCCL plugin.
    pub inspector_dir: Option<PathBuf>,
    /// Serve Prometheus metrics here (`/metrics`).
    pub metrics_listen: Option<SocketAddr>,
    /// Op names per rank that get their own metric label; the rest become `other`.
    pub metrics_top_k: usize,
    /// Log files and directories of the job to follow (`--logs`): needs `job`.
    pub logs: Option<crate::LogConfig>,
}

/// Where and how summaries are pushed.
#[derive(Clone, Debug)]
pub struct PushConfig {
    /// The server's base URL (`http://host:port`), or the full summaries endpoint.
    pub server: String,
    pub token: Option<String>,
    /// PEM certificates to trust for an https server (a cluster's own CA) instead of the
    /// public roots.
    pub ca_cert: Option<PathBuf>,
    /// Summaries kept while the server is unreachable; the oldest go first.
    pub max_queue: usize,
    /// Compressed bytes kept while the server is unreachable.
    pub max_queue_bytes: usize,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Whole-request timeout (connect, send, response).
    pub request_timeout: Duration,
    /// At shutdown, how long to keep trying to deliver what is queued.
    pub shutdown_timeout: Duration,
}

impl PushConfig {
    pub fn new(server: impl Into<String>, token: Option<String>) -> PushConfig {
        PushConfig {
            server: server.into(),
            token,
            ca_cert: None,
            max_queue: 1024,
            max_queue_bytes: 64 << 20,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(10),
        }
    }
}

pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9470";

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            shm_dir: PathBuf::from(flare_tracer::DEFAULT_SHM_DIR),
            job: None,
            node: hostname(),
            window: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            poll: Duration::from_millis(100),
            scan_interval: Duration::from_secs(1),
            backlog: Duration::from_secs(60),
            liveness_grace: Duration::from_secs(3),
            hang_timeout: Duration::from_secs(300),
            py_spy: None,
            stack_timeout: Duration::from_secs(10),
            max_exact_samples: 4096,
            heartbeat: true,
            push: None,
            otlp: None,
            out_dir: None,
            inspector_dir: None,
            metrics_listen: None,
            metrics_top_k: 16,
            logs: None,
        }
    }
}

impl AgentConfig {
    pub fn validate(&self) -> Result<(), AgentError> {
        let bad = |m: String| Err(AgentError::Config(m));
        if self.window < Duration::from_millis(10) {
            return bad(format!("window {:?} is shorter than 10ms", self.window));
        }
        if self.poll.is_zero() || self.poll > self.window {
            return bad(format!(
                "poll interval {:?} must be positive and at most the window {:?}",
                self.poll, self.window
            ));
        }
        if self.scan_interval.is_zero() {
            return bad("scan interval must be positive".into());
        }
        if self.hang_timeout.is_zero() {
            return bad("hang timeout must be positive".into());
        }
        if self.max_exact_samples == 0 {
            return bad("max exact samples must be positive".into());
        }
        if self.metrics_top_k == 0 {
            return bad("metrics top-K must be at least 1".into());
        }
        if self.node.is_empty() {
            return bad("empty node name".into());
        }
        if let Some(l) = &self.logs {
            if self.job.is_none() {
                return bad(
                    "following logs needs the job's id (--job): the logs say nothing of which job they belong to".into(),
                );
            }
            if l.paths.is_empty() || l.max_lines == 0 || l.read_budget == 0 {
                return bad("log following needs paths, and positive line and read budgets".into());
            }
        }
        if let Some(p) = &self.push {
            if p.max_queue == 0 || p.max_queue_bytes == 0 {
                return bad("the push queue limits must be positive".into());
            }
            if p.initial_backoff.is_zero() || p.max_backoff < p.initial_backoff {
                return bad(format!(
                    "push backoff {:?}..{:?} must be positive and increasing",
                    p.initial_backoff, p.max_backoff
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn window_ns(&self) -> u64 {
        self.window.as_nanos() as u64
    }
}

/// Parses "10s", "500ms", "2m", "1h", "250us", "1.5s" (a bare number is seconds).
pub fn parse_duration(input: &str) -> Result<Duration, AgentError> {
    let err = |why: &str| AgentError::Duration {
        input: input.to_string(),
        why: why.to_string(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        return Err(err("no number"));
    }
    let value: f64 = num.parse().map_err(|_| err("not a number"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" | "day" | "days" => 86_400.0,
        _ => return Err(err("unknown unit (use ns, us, ms, s, m, h, d)")),
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(err("out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The host name, as `gethostname` reports it ("localhost" when it cannot be read).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into the buffer we own.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
        if !name.is_empty() {
            return name;
        }
    }
    "localhost".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn defaults_validate_and_bad_values_are_named() {
        AgentConfig::default().validate().unwrap();
        let c = AgentConfig {
            poll: Duration::from_secs(20),
            ..AgentConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("poll interval"), "{e}");
        assert!(!hostname().is_empty());
    }
}
