//! Flare's ingest server.
//!
//! Node agents `POST` one [`flare_model::WindowSummary`] per node and time window. The
//! server stores it in SQLite, re-runs the live engine
//! ([`flare_engine::live::diagnose_window`]) on every summary of that job and window, and
//! stores the diagnosis; `GET` endpoints list jobs and serve a window's findings in the
//! same JSON shape as `flare diagnose --json`. Summaries may carry an excerpt of the
//! node's log files (`flare agent --logs`): the server keeps each job's, follows them
//! with a log collector and merges the logs' verdict into the window's findings (`logs`).
//! Findings that persist open alerts, sent to webhooks (`alerts`).
//!
//! Endpoints (all under `/api` need `Authorization: Bearer <token>`, of the role said:
//! `ingest` for agents, `read` for people and dashboards, the operator's for all; see
//! `auth`):
//!
//! | method | path | role | what |
//! |---|---|---|---|
//! | `POST` | `/api/v1/summaries` | ingest | one summary, JSON, plain or `Content-Encoding: zstd` |
//! | `GET` | `/api/jobs` | read | every job with its latest window's finding count |
//! | `GET` | `/api/jobs/{id}/findings[?window=N]` | read | one window's diagnosis and the history |
//! | `GET` | `/api/jobs/{id}/summaries[?from=A&to=B]` | read | the stored window summaries |
//! | `GET` | `/api/alerts[?job=ID&limit=N]` | read | the latest alert events, newest first |
//! | `PUT` | `/api/jobs/{id}/silence` | operator | `{"for_s": N, "reason": "..."}`: no webhook calls for the job |
//! | `DELETE` | `/api/jobs/{id}/silence` | operator | lifts the silence |
//! | `GET` | `/healthz` | none | liveness |
//! | `GET` | `/`, `/jobs/{id}` | none | the dashboard (it asks for a read token; see `dashboard`) |
//! | `GET` | `/api/ui/jobs`, `/api/ui/jobs/{id}` | read | the dashboard's content, HTML |
//!
//! Connections are accepted by `connections` (header deadline, caps per address and in
//! all), summaries checked by `ingest` before anything is stored.
//!
//! Errors are JSON objects `{"error": "..."}` with the HTTP status saying which kind.

pub mod alerts;
mod api;
mod auth;
mod connections;
mod dashboard;
pub use dashboard::PERFETTO_UI;
pub mod files;
mod ingest;
mod logs;
pub mod nats;
pub mod retention;
pub mod store;
#[cfg(feature = "tls")]
mod tls;

pub use connections::{ConnCounters, ConnLimits};
pub use ingest::IngestError;
pub use store::{StoreError, WindowDiagnosis, SCHEMA_VERSION};

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tracing::info;

/// Default bound on a request body, and on a summary once decompressed. A summary is a
/// few kilobytes per node; this leaves room for nodes with many ranks and ops.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 << 20;

/// Summaries one client address may post: `per_s` on average, `burst` at once (an
/// agent catching up after an outage sends its buffered windows together). Over it, 429
/// with `Retry-After`; agents retry. `per_s` 0: no bound (behind a proxy or ingress
/// that every agent comes through, one address is everyone).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IngestRate {
    pub per_s: f64,
    pub burst: u32,
}

impl Default for IngestRate {
    /// A node's agent posts one summary per window (seconds apart).
    fn default() -> Self {
        IngestRate {
            per_s: 20.0,
            burst: 400,
        }
    }
}

/// What the server needs to run.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    /// Where the data is: a SQLite file (created if missing; one server at a time) or a
    /// PostgreSQL database (shared by any number of servers).
    pub db: store::DbLocation,
    /// Shared secret clients send as `Authorization: Bearer <token>`: everything,
    /// silences included (the operators').
    pub token: String,
    /// Tokens that may only post summaries (the agents').
    pub ingest_tokens: Vec<String>,
    /// Tokens that may only read: the API's `GET`s and the dashboard (people's).
    pub read_tokens: Vec<String>,
    /// Summaries one address may post: a sustained rate and a burst.
    pub ingest_rate: IngestRate,
    /// Largest request body accepted, and largest summary once decompressed (413 above).
    pub max_body_bytes: usize,
    /// Where alert events go (none: alerts are recorded and listed, not sent).
    pub webhooks: Vec<alerts::Webhook>,
    /// When a finding opens, escalates and resolves an alert.
    pub alert_rules: alerts::AlertRules,
    /// What the database keeps (nothing is deleted by default).
    pub retention: retention::Retention,
    /// Memory the store keeps between posts, estimated bytes.
    pub cache_bytes: usize,
    /// How long a window missing ranks waits for them after its latest summary before it
    /// is analysed as it is.
    pub analysis_delay: std::time::Duration,
    /// Bounds on connections: header deadline, caps in all and per address.
    pub connections: ConnLimits,
    /// HTTPS: the certificate chain and key, PEM (needs the `tls` feature).
    pub tls: Option<TlsFiles>,
    /// Also store the summaries agents publish to NATS JetStream (see [`nats`]).
    pub nats: Option<nats::NatsConfig>,
    /// Where the dashboard opens timelines: Perfetto's UI, or a copy a cluster without
    /// internet access hosts (an http(s) URL, checked when the server binds).
    pub perfetto_ui: String,
}

/// A PEM certificate chain (leaf first) and its private key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ServerConfig {
    pub fn new(listen: SocketAddr, db: impl Into<store::DbLocation>, token: String) -> Self {
        ServerConfig {
            listen,
            db: db.into(),
            token,
            ingest_tokens: Vec::new(),
            read_tokens: Vec::new(),
            ingest_rate: IngestRate::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            webhooks: Vec::new(),
            alert_rules: alerts::AlertRules::default(),
            retention: retention::Retention::default(),
            cache_bytes: store::DEFAULT_CACHE_BYTES,
            analysis_delay: std::time::Duration::from_nanos(store::ANALYSIS_DELAY_NS),
            connections: ConnLimits::default(),
            tls: None,
            nats: None,
            perfetto_ui: dashboard::PERFETTO_UI.to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid server configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    File(#[from] files::FileError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("opening the database failed unexpectedly: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("{0}")]
    Nats(String),
}

/// A server bound to its address, not yet serving: tests bind port 0 and read the port.
pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    router: axum::Router,
    state: api::AppState,
    retention: retention::Retention,
    limits: ConnLimits,
    counters: Arc<ConnCounters>,
    nats: Option<async_nats::jetstream::consumer::PullConsumer>,
    #[cfg(feature = "tls")]
    tls: Option<tls::Tls>,
}

/// How often retention runs.
/// Now, as Unix nanoseconds (the store's clock).
pub(crate) fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as u64)
        .unwrap_or(0)
}

const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
/// How often windows pending analysis are checked for being due (see `Store::ingest`).
const ANALYSE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl Server {
    /// Opens (or creates) the database and binds the listening socket.
    pub async fn bind(mut cfg: ServerConfig) -> Result<Server, ServerError> {
        let mut seen = std::collections::HashSet::new();
        for t in std::iter::once(&cfg.token)
            .chain(&cfg.ingest_tokens)
            .chain(&cfg.read_tokens)
        {
            if t.trim().is_empty() {
                return Err(ServerError::Config("a token must not be empty".into()));
            }
            if !seen.insert(t.trim()) {
                return Err(ServerError::Config(
                    "the same token is given for two roles: each role needs its own".into(),
                ));
            }
        }
        let rate = cfg.ingest_rate;
        if !(rate.per_s >= 0.0 && rate.per_s.is_finite()) || (rate.per_s > 0.0 && rate.burst == 0) {
            return Err(ServerError::Config(
                "the ingest rate must be 0 (no bound) or positive, with a burst of at least 1"
                    .into(),
            ));
        }
        if let Some(h) = cfg
            .webhooks
            .iter()
            .find(|h| h.url.starts_with("https://") && !cfg!(feature = "tls"))
        {
            return Err(ServerError::Config(format!(
                "webhook {}: https needs the server built with the `tls` feature (cargo build --release -p flare-cli --features flare-server/tls)",
                h.url
            )));
        }
        cfg.perfetto_ui = dashboard::perfetto_ui(&cfg.perfetto_ui).map_err(ServerError::Config)?;
        if cfg.max_body_bytes == 0 {
            return Err(ServerError::Config(
                "max_body_bytes must be greater than 0".into(),
            ));
        }
        #[cfg(feature = "tls")]
        let tls = match &cfg.tls {
            Some(f) => Some(tls::load(&f.cert, &f.key)?),
            None => None,
        };
        #[cfg(not(feature = "tls"))]
        if cfg.tls.is_some() {
            return Err(ServerError::Config(
                "--tls-cert needs the server built with the `tls` feature (cargo build --release -p flare-cli --features flare-server/tls)".into(),
            ));
        }
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| ServerError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: cfg.listen,
            source,
        })?;
        // Claimed once the real address is known: the refusal of a second server names
        // it. Servers sharing PostgreSQL take each job's lock in turn instead.
        let lock = match &cfg.db {
            store::DbLocation::Sqlite(path) => Some(files::ServerLock::claim(path, addr)?),
            store::DbLocation::Postgres(_) => None,
        };
        let path = cfg.db.clone();
        let (rules, cache_bytes) = (cfg.alert_rules.clone(), cfg.cache_bytes);
        let delay = cfg.analysis_delay;
        let store = tokio::task::spawn_blocking(move || {
            store::Store::open(&path).map(|mut s| {
                s.set_alert_rules(rules);
                s.set_cache_bytes(cache_bytes);
                s.set_analysis_delay(delay);
                s.use_system_clock();
                s
            })
        })
        .await??;
        info!(%addr, db = %cfg.db, https = cfg.tls.is_some(), "flare server bound");
        let state = api::AppState::new(store, lock, &cfg);
        let router = api::router(state.clone());
        let nats = match &cfg.nats {
            Some(n) => Some(nats::connect(n).await.map_err(ServerError::Nats)?),
            None => None,
        };
        Ok(Server {
            listener,
            addr,
            router,
            state,
            retention: cfg.retention,
            limits: cfg.connections,
            counters: Arc::new(ConnCounters::default()),
            nats,
            #[cfg(feature = "tls")]
            tls,
        })
    }

    /// The address the server listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections refused at a cap so far.
    pub fn counters(&self) -> Arc<ConnCounters> {
        self.counters.clone()
    }

    /// Serves until `shutdown` resolves, then lets in-flight requests finish.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        info!(addr = %self.addr, "serving");
        if let Some(consumer) = self.nats {
            tokio::spawn(nats::consume(consumer, self.state.clone()));
        }
        {
            let state = self.state.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(ANALYSE_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    if let Err(e) = state.analyse_due().await {
                        tracing::error!("analysis of pending windows failed: {}", e.message());
                    }
                }
            });
        }
        if self.retention != retention::Retention::default() {
            let (state, policy) = (self.state.clone(), self.retention);
            tokio::spawn(async move {
                let mut every = tokio::time::interval(PRUNE_EVERY);
                loop {
                    every.tick().await;
                    match state.prune(policy).await {
                        Ok(p) if p.jobs + p.summaries > 0 => info!(
                            jobs = p.jobs,
                            summaries = p.summaries,
                            bytes = p.bytes,
                            "retention deleted old data"
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::error!("retention failed: {}", e.message()),
                    }
                }
            });
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = self.tls {
            connections::serve(
                self.listener,
                self.router,
                tls,
                self.limits,
                self.counters,
                shutdown,
            )
            .await;
            info!("server stopped");
            return Ok(());
        }
        connections::serve(
            self.listener,
            self.router,
            connections::PlainTcp,
            self.limits,
            self.counters,
            shutdown,
        )
        .await;
        info!("server stopped");
        Ok(())
    }
}

/// Binds and serves until `shutdown` resolves.
pub async fn serve(
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    Server::bind(cfg).await?.run(shutdown).await
}

/// For callers without a runtime (the CLI): builds one, binds, tells `on_ready` the
/// address, and serves until `shutdown` resolves.
pub fn run_blocking<F>(
    cfg: ServerConfig,
    on_ready: impl FnOnce(SocketAddr),
    shutdown: F,
) -> Result<(), ServerError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("flare-server")
        .build()
        .map_err(ServerError::Runtime)?;
    rt.block_on(async move {
        let server = Server::bind(cfg).await?;
        on_ready(server.local_addr());
        server.run(shutdown).await
    })
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => info!("SIGINT received, shutting down"),
        _ = terminate => info!("SIGTERM received, shutting down"),
    }
}

/// Logs to stderr (stdout is left to the caller) at the level in `FLARE_LOG`
/// (`error`, `warn`, `info`, `debug`, `trace`; default `info`). Does nothing when a
/// subscriber is already installed.
pub fn init_logging() {
    let requested = std::env::var("FLARE_LOG").ok();
    let level = requested
        .as_deref()
        .and_then(|v| v.trim().parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::INFO);
    let installed = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .try_init()
        .is_ok();
    if let (true, Some(v)) = (installed, requested) {
        if v.trim().parse::<tracing::Level>().is_err() {
            tracing::warn!(
                "FLARE_LOG={v:?} is not a level (error, warn, info, debug, trace); using info"
            );
        }
    }
}
