//! OTLP/HTTP export of each window's metrics (`flare agent --otlp-endpoint URL`, or the
//! OpenTelemetry SDKs' `OTEL_EXPORTER_OTLP_*` variables), for backends that take OTLP
//! rather than scrape Prometheus: an OpenTelemetry Collector, Grafana Alloy, most
//! vendors. JSON encoding (`encode`); a thread of its own with a bounded queue, so a slow
//! or absent collector never holds the agent's loop: what does not fit is dropped and
//! counted, as the OTLP specification allows for metrics.

mod encode;

pub use encode::request;

use crate::AgentError;
use flare_model::WindowSummary;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The OTLP/HTTP path of metrics, appended to a base endpoint.
pub const METRICS_PATH: &str = "/v1/metrics";
/// Windows waiting to be exported.
const QUEUE: usize = 64;
/// Tries per export (the first and two retries) for errors the specification calls
/// retryable: 429, 502, 503, 504 and the transport's.
const TRIES: u32 = 3;

/// Where and how metrics are exported.
#[derive(Clone, Debug)]
pub struct OtlpConfig {
    /// The full metrics URL (`http://collector:4318/v1/metrics`).
    pub url: String,
    /// Headers sent with each export (an API key, a tenant).
    pub headers: Vec<(String, String)>,
    /// Whole-request timeout.
    pub timeout: Duration,
}

impl OtlpConfig {
    /// From a base endpoint (`http://collector:4318`, to which the metrics path is
    /// appended, as the OpenTelemetry SDKs do) or a URL ending in `/v1/metrics`.
    pub fn new(endpoint: &str) -> Result<OtlpConfig, AgentError> {
        let e = endpoint.trim().trim_end_matches('/');
        let bad = |why: &str| AgentError::Config(format!("OTLP endpoint {endpoint:?}: {why}"));
        let rest = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .ok_or_else(|| bad("must start with http:// or https://"))?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(bad("no host"));
        }
        if e.starts_with("https://") && !cfg!(feature = "tls") {
            return Err(bad(
                "https needs the agent built with the `tls` feature (cargo build --features flare-agent/tls)",
            ));
        }
        let url = if e.ends_with(METRICS_PATH) {
            e.to_string()
        } else {
            format!("{e}{METRICS_PATH}")
        };
        Ok(OtlpConfig {
            url,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
        })
    }

    /// Parses `OTEL_EXPORTER_OTLP_HEADERS`' form: `key=value,key2=value2`, values
    /// percent-encoded.
    pub fn parse_headers(s: &str) -> Result<Vec<(String, String)>, AgentError> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').ok_or_else(|| {
                    AgentError::Config(format!("OTLP header {p:?} is not key=value"))
                })?;
                Ok((k.trim().to_string(), percent_decode(v.trim())))
            })
            .collect()
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the exporter did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OtlpStats {
    pub exported: u64,
    /// Windows dropped from a full queue.
    pub dropped: u64,
    /// Exports that failed after their tries, or that the collector refused.
    pub failed: u64,
}

/// The export thread and its queue.
pub struct OtlpExporter {
    tx: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
    stats: Arc<Mutex<OtlpStats>>,
}

impl OtlpExporter {
    pub fn start(cfg: OtlpConfig) -> Result<OtlpExporter, AgentError> {
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let stats = Arc::new(Mutex::new(OtlpStats::default()));
        let thread = {
            let stats = stats.clone();
            std::thread::Builder::new()
                .name("flare-otlp".into())
                .spawn(move || export_loop(cfg, rx, stats))
                .map_err(|source| AgentError::Thread {
                    what: "OTLP export",
                    source,
                })?
        };
        Ok(OtlpExporter {
            tx: Some(tx),
            thread: Some(thread),
            stats,
        })
    }

    /// Queues one window's metrics; never blocks.
    pub fn submit(&self, s: &WindowSummary) {
        let Some(tx) = &self.tx else { return };
        let body = match serde_json::to_vec(&request(s)) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode OTLP metrics");
                return;
            }
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(body) {
            self.lock().dropped += 1;
        }
    }

    pub fn stats(&self) -> OtlpStats {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OtlpStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Exports what is queued (each request bounded by its timeout) and stops.
    pub fn shutdown(mut self) -> OtlpStats {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }
}

fn export_loop(cfg: OtlpConfig, rx: Receiver<Vec<u8>>, stats: Arc<Mutex<OtlpStats>>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(cfg.timeout))
        .user_agent(concat!("flare-agent/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut warned = false;
    for body in rx {
        let mut outcome = Err(String::new());
        for attempt in 0..TRIES {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500 << attempt));
            }
            outcome = export(&agent, &cfg, &body);
            match &outcome {
                Ok(()) => break,
                Err(why) if why.starts_with("refused") => break,
                Err(_) => {}
            }
        }
        let mut st = stats.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(()) => st.exported += 1,
            Err(why) => {
                st.failed += 1;
                if !warned {
                    tracing::warn!(url = %cfg.url, %why, "OTLP export failed (further failures are counted, not logged)");
                    warned = true;
                }
            }
        }
    }
}

/// One try; `Err("refused ...")` for what retrying cannot fix.
fn export(agent: &ureq::Agent, cfg: &OtlpConfig, body: &[u8]) -> Result<(), String> {
    let mut req = agent
        .post(&cfg.url)
        .header("Content-Type", "application/json");
    for (k, v) in &cfg.headers {
        req = req.header(k, v);
    }
    let mut resp = req.send(body).map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let text = crate::pusher::reply_text(&mut resp);
    match status {
        429 | 502 | 503 | 504 => Err(format!("HTTP {status}: {text}")),
        _ => Err(format!("refused: HTTP {status}: {text}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_headers() {
        assert_eq!(
            OtlpConfig::new("http://c:4318").unwrap().url,
            "http://c:4318/v1/metrics"
        );
        assert_eq!(
            OtlpConfig::new("http://c:4318/v1/metrics/").unwrap().url,
            "http://c:4318/v1/metrics"
        );
        assert!(OtlpConfig::new("c:4318").is_err());
        assert_eq!(
            OtlpConfig::parse_headers("api-key=a%2Cb, x-tenant = t1").unwrap(),
            vec![
                ("api-key".to_string(), "a,b".to_string()),
                ("x-tenant".to_string(), "t1".to_string())
            ]
        );
        assert!(OtlpConfig::parse_headers("novalue").is_err());
    }
}
