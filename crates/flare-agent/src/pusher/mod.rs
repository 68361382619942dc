//! Ships window summaries to the server from its own thread: zstd-compressed JSON, a
//! bounded queue while the server is unreachable (the oldest go first), and capped
//! exponential backoff with jitter (so a restarted server is not hit by every node at
//! the same instant). Submitting never blocks on the network.

use crate::{AgentError, PushConfig};
use flare_model::WindowSummary;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod nats;

pub const SUMMARIES_PATH: &str = "/api/v1/summaries";

/// What the pusher did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Summaries waiting (including one being sent).
    pub queued: usize,
    pub queued_bytes: usize,
    pub sent: u64,
    /// Dropped from a full queue (oldest first).
    pub dropped: u64,
    /// Refused by the server as malformed (not retried).
    pub rejected: u64,
    /// Failed attempts (retried).
    pub failures: u64,
}

struct Pending {
    job: String,
    window: u64,
    node: String,
    body: Vec<u8>,
}

struct State {
    items: VecDeque<Pending>,
    bytes: usize,
    /// Size of the summary being sent.
    in_flight: Option<usize>,
    /// The summary being sent is the oldest and the queue overflowed: if this attempt
    /// fails it is dropped rather than queued again (strict oldest-first dropping).
    in_flight_doomed: bool,
    /// Set at shutdown: deliver what is left until then.
    closing: Option<Instant>,
    stats: PushStats,
    /// The server is failing (logged once per outage).
    down: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not stop delivery; the queue stays consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Pusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    cfg: PushConfig,
    url: String,
}

enum Failure {
    /// Worth retrying: network errors, 408, 429, 5xx, and auth errors (a token fixed on
    /// the server side makes the queued summaries deliverable).
    Retry(String),
    /// The server refused this summary; sending it again would not help.
    Permanent(String),
}

/// Where summaries go: the server's summaries endpoint, or NATS JetStream.
enum Transport {
    Http { agent: ureq::Agent, url: String },
    // Boxed: it holds its own runtime, several times the HTTP agent's size.
    Nats(Box<nats::NatsSink>),
}

impl Transport {
    fn send(
        &mut self,
        item: &Pending,
        token: Option<&str>,
        timeout: Duration,
    ) -> Result<(), Failure> {
        match self {
            Transport::Http { agent, url } => send(agent, url, token, &item.body, timeout),
            Transport::Nats(sink) => sink.send(item, timeout),
        }
    }
}

/// A `nats://` URL: summaries go to NATS JetStream rather than to a server over HTTP.
pub fn is_nats(server: &str) -> bool {
    server.trim().to_ascii_lowercase().starts_with("nats://")
}

/// The summaries endpoint for a server URL (a base URL or the endpoint itself).
pub fn endpoint(server: &str) -> Result<String, AgentError> {
    let bad = |why: &str| AgentError::ServerUrl {
        url: server.to_string(),
        why: why.to_string(),
    };
    let s = server.trim().trim_end_matches('/');
    let rest = if let Some(r) = s.strip_prefix("http://") {
        r
    } else if let Some(r) = s.strip_prefix("https://") {
        if !cfg!(feature = "tls") {
            return Err(bad(
                "https needs the agent built with the `tls` feature (cargo build --features flare-agent/tls)",
            ));
        }
        r
    } else {
        return Err(bad("must start with http:// or https://"));
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("no host"));
    }
    if s.ends_with(SUMMARIES_PATH) {
        Ok(s.to_string())
    } else {
        Ok(format!("{s}{SUMMARIES_PATH}"))
    }
}

/// The certificates of a PEM file (a cluster's CA): at least one.
#[cfg(feature = "tls")]
fn read_ca(path: &std::path::Path) -> Result<Vec<ureq::tls::Certificate<'static>>, AgentError> {
    let pem = std::fs::read(path).map_err(|e| AgentError::io(path, e))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => {
                return Err(AgentError::Config(format!(
                    "{}: not a PEM file: {e}",
                    path.display()
                )))
            }
        }
    }
    if certs.is_empty() {
        return Err(AgentError::Config(format!(
            "{}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

impl Pusher {
    pub fn start(cfg: PushConfig) -> Result<Pusher, AgentError> {
        let nats = is_nats(&cfg.server);
        let url = if nats {
            let rest = cfg.server.trim()["nats://".len()..].trim_end_matches('/');
            if rest.is_empty() || rest.starts_with('@') {
                return Err(AgentError::ServerUrl {
                    url: cfg.server.clone(),
                    why: "no host".into(),
                });
            }
            cfg.server.trim().to_string()
        } else {
            endpoint(&cfg.server)?
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                items: VecDeque::new(),
                bytes: 0,
                in_flight: None,
                in_flight_doomed: false,
                closing: None,
                stats: PushStats::default(),
                down: false,
            }),
            wake: Condvar::new(),
        });
        let builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(cfg.request_timeout))
            .user_agent(concat!("flare-agent/", env!("CARGO_PKG_VERSION")));
        #[cfg(not(feature = "tls"))]
        if cfg.ca_cert.is_some() {
            return Err(AgentError::Config(
                "--ca-cert needs the agent built with the `tls` feature (cargo build --features flare-agent/tls)".into(),
            ));
        }
        #[cfg(feature = "tls")]
        let builder = match &cfg.ca_cert {
            None => builder,
            Some(ca) => builder.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::new_with_certs(&read_ca(ca)?))
                    .build(),
            ),
        };
        let mut transport = if nats {
            let sink = nats::NatsSink::new(&url, cfg.token.clone()).map_err(|source| {
                AgentError::Thread {
                    what: "NATS runtime",
                    source,
                }
            })?;
            Transport::Nats(Box::new(sink))
        } else {
            Transport::Http {
                agent: builder.build().into(),
                url: url.clone(),
            }
        };
        // Logs never show a password in the URL.
        let url = flare_model::summary_queue::redact(&url);
        let thread = {
            let (shared, cfg, url) = (shared.clone(), cfg.clone(), url.clone());
            std::thread::Builder::new()
                .name("flare-push".into())
                .spawn(move || deliver(&shared, &cfg, &url, &mut transport))
                .map_err(|source| AgentError::Thread {
                    what: "push",
                    source,
                })?
        };
        tracing::info!(url = %url, "pushing window summaries");
        Ok(Pusher {
            shared,
            thread: Some(thread),
            cfg,
            url,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queues a summary (serialized and compressed here: a few kilobytes, well under a
    /// millisecond). Drops the oldest queued summaries past the queue's limits.
    pub fn submit(&self, summary: &WindowSummary) -> Result<(), AgentError> {
        let body = encode(summary)?;
        let mut st = self.shared.lock();
        if body.len() > self.cfg.max_queue_bytes {
            st.stats.dropped += 1;
            tracing::warn!(
                window = summary.window,
                bytes = body.len(),
                limit = self.cfg.max_queue_bytes,
                "summary larger than the whole push queue; dropped"
            );
            return Ok(());
        }
        st.bytes += body.len();
        st.items.push_back(Pending {
            job: summary.job_id.clone(),
            window: summary.window,
            node: summary.node.clone(),
            body,
        });
        enforce_limits(&mut st, &self.cfg);
        drop(st);
        self.shared.wake.notify_all();
        Ok(())
    }

    pub fn stats(&self) -> PushStats {
        let st = self.shared.lock();
        let in_flight = if st.in_flight_doomed {
            None
        } else {
            st.in_flight
        };
        PushStats {
            queued: st.items.len() + in_flight.map_or(0, |_| 1),
            queued_bytes: st.bytes + in_flight.unwrap_or(0),
            ..st.stats
        }
    }

    /// Tries to deliver what is queued for up to `deadline`, then stops the thread.
    /// Returns the final statistics (`queued` is what was not delivered).
    pub fn shutdown(mut self, deadline: Duration) -> PushStats {
        self.close(deadline);
        self.stats()
    }

    fn close(&mut self, deadline: Duration) {
        {
            let mut st = self.shared.lock();
            st.closing = Some(Instant::now() + deadline);
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Pusher {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.close(Duration::ZERO);
        }
    }
}

/// The wire form: JSON, zstd level 3 (summaries compress ~5-10x).
pub fn encode(summary: &WindowSummary) -> Result<Vec<u8>, AgentError> {
    let json = serde_json::to_vec(summary).map_err(|e| AgentError::Encode(e.to_string()))?;
    zstd::bulk::compress(&json, 3).map_err(|e| AgentError::Encode(e.to_string()))
}

fn enforce_limits(st: &mut State, cfg: &PushConfig) {
    loop {
        let in_flight = if st.in_flight_doomed {
            None
        } else {
            st.in_flight
        };
        if st.items.len() + in_flight.map_or(0, |_| 1) <= cfg.max_queue
            && st.bytes + in_flight.unwrap_or(0) <= cfg.max_queue_bytes
        {
            break;
        }
        if in_flight.is_some() {
            // The summary on the wire is the oldest: it goes first, unless it gets through.
            st.in_flight_doomed = true;
            continue;
        }
        let Some(old) = st.items.pop_front() else {
            break;
        };
        st.bytes -= old.body.len();
        st.stats.dropped += 1;
        tracing::warn!(
            job = %old.job,
            window = old.window,
            dropped_total = st.stats.dropped,
            "push queue full: dropped the oldest summary"
        );
    }
}

fn deliver(shared: &Shared, cfg: &PushConfig, url: &str, transport: &mut Transport) {
    let mut backoff = cfg.initial_backoff;
    loop {
        let (item, closing) = {
            let mut st = shared.lock();
            loop {
                if let Some(closing) = st.closing {
                    if Instant::now() >= closing {
                        return;
                    }
                }
                if let Some(p) = st.items.pop_front() {
                    st.bytes -= p.body.len();
                    st.in_flight = Some(p.body.len());
                    break (p, st.closing);
                }
                if st.closing.is_some() {
                    return;
                }
                st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let timeout = match closing {
            Some(c) => cfg
                .request_timeout
                .min(c.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
            None => cfg.request_timeout,
        };
        let result = transport.send(&item, cfg.token.as_deref(), timeout);
        let mut st = shared.lock();
        st.in_flight = None;
        let doomed = std::mem::take(&mut st.in_flight_doomed);
        match result {
            Ok(()) => {
                st.stats.sent += 1;
                if st.down {
                    st.down = false;
                    tracing::info!(url, queued = st.items.len(), "server reachable again");
                }
                backoff = cfg.initial_backoff;
                tracing::debug!(job = %item.job, window = item.window, "summary delivered");
            }
            Err(Failure::Permanent(why)) => {
                st.stats.rejected += 1;
                tracing::error!(job = %item.job, window = item.window, %why, "server rejected a summary; not retried");
            }
            Err(Failure::Retry(why)) => {
                st.stats.failures += 1;
                if !st.down {
                    st.down = true;
                    tracing::warn!(url, %why, "cannot deliver summaries; buffering and retrying");
                } else {
                    tracing::debug!(url, %why, "push attempt failed");
                }
                if doomed {
                    st.stats.dropped += 1;
                    tracing::warn!(
                        job = %item.job,
                        window = item.window,
                        dropped_total = st.stats.dropped,
                        "push queue full: dropped the oldest summary"
                    );
                } else {
                    st.bytes += item.body.len();
                    st.items.push_front(item);
                    enforce_limits(&mut st, cfg);
                }
                let mut wait = jitter(backoff);
                if let Some(c) = st.closing {
                    wait = wait.min(c.saturating_duration_since(Instant::now()));
                }
                backoff = (backoff * 2).min(cfg.max_backoff);
                // Woken early only when shutdown begins (to retry at once): new
                // summaries do not shorten the backoff of a server that is down.
                let was_closing = st.closing.is_some();
                let (g, _) = shared
                    .wake
                    .wait_timeout_while(st, wait, |s| s.closing.is_some() == was_closing)
                    .unwrap_or_else(|p| p.into_inner());
                drop(g);
            }
        }
    }
}

/// Backoff with ±25% jitter drawn from the clock's low bits (no RNG dependency needed
/// for spreading retries).
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    let f = 0.75 + (nanos % 1000) as f64 / 2000.0;
    d.mul_f64(f)
}

fn send(
    agent: &ureq::Agent,
    url: &str,
    token: Option<&str>,
    body: &[u8],
    timeout: Duration,
) -> Result<(), Failure> {
    let mut req = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Content-Encoding", "zstd");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = req
        .config()
        .timeout_global(Some(timeout))
        .build()
        .send(body)
        .map_err(|e| Failure::Retry(e.to_string()))?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(());
    }
    let why = format!("HTTP {status}: {}", reply_text(&mut resp));
    match status {
        408 | 429 | 401 | 403 => Err(Failure::Retry(why)),
        s if s >= 500 => Err(Failure::Retry(why)),
        _ => Err(Failure::Permanent(why)),
    }
}

/// The start of an error reply's body, for the log: bounded, since a misbehaving server
/// or collector may send anything.
pub(crate) fn reply_text(resp: &mut ureq::http::Response<ureq::Body>) -> String {
    resp.body_mut()
        .with_config()
        .limit(16 * 1024)
        .read_to_string()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_logs_hide_credentials() {
        for (url, shown) in [
            ("nats://a:secret@h:4222", "nats://a:***@h:4222"),
            ("nats://tok3n@h:4222", "nats://***@h:4222"),
            (
                "http://h:7470/api/v1/summaries",
                "http://h:7470/api/v1/summaries",
            ),
        ] {
            assert_eq!(flare_model::summary_queue::redact(url), shown);
        }
        assert!(is_nats(" NATS://h:4222") && !is_nats("http://h"));
    }

    #[test]
    fn endpoints_accept_a_base_or_the_full_path() {
        assert_eq!(
            endpoint("http://srv:8080").unwrap(),
            "http://srv:8080/api/v1/summaries"
        );
        assert_eq!(
            endpoint("http://srv:8080/").unwrap(),
            "http://srv:8080/api/v1/summaries"
        );
        assert_eq!(
            endpoint("http://srv/api/v1/summaries").unwrap(),
            "http://srv/api/v1/summaries"
        );
        assert!(endpoint("srv:8080").is_err());
        assert!(endpoint("http://").is_err());
        #[cfg(not(feature = "tls"))]
        assert!(endpoint("https://srv")
            .unwrap_err()
            .to_string()
            .contains("tls"));
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(4));
            assert!(
                j >= Duration::from_secs(3) && j <= Duration::from_secs(5),
                "{j:?}"
            );
        }
    }
}
