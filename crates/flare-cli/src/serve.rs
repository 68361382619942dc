//! `flare serve`: the ingest server node agents post window summaries to.

use anyhow::{bail, Result};
use clap::Args;
use flare_model::Severity;
use flare_server::store::DbLocation;
use flare_server::{ConnLimits, IngestRate, ServerConfig, TlsFiles, DEFAULT_MAX_BODY_BYTES};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed on the first line).
    #[arg(long, default_value = "127.0.0.1:7470")]
    pub listen: SocketAddr,
    /// Where the data is kept: a SQLite file, created if missing (one server per file;
    /// default flare-server.db), or a PostgreSQL database as
    /// `postgres://USER:PASSWORD@HOST:PORT/DATABASE`, shared by any number of servers.
    /// Prefer the FLARE_DB environment variable for a URL with a password: a
    /// command-line argument is visible to other users in `ps`.
    #[arg(long, value_name = "FILE|URL", value_parser = db_location)]
    pub db: Option<DbLocation>,
    /// The operator's token: posts, reads and silences (clients send tokens as
    /// `Authorization: Bearer TOKEN`). Prefer the FLARE_TOKEN environment variable: a
    /// command-line argument is visible to other users in `ps`.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A token that may only post summaries (give it to the agents). Repeatable; also
    /// FLARE_INGEST_TOKEN.
    #[arg(long = "ingest-token", value_name = "TOKEN")]
    pub ingest_tokens: Vec<String>,
    /// A token that may only read: the API's GETs and the dashboard (give it to people).
    /// Repeatable; also FLARE_READ_TOKEN.
    #[arg(long = "read-token", value_name = "TOKEN")]
    pub read_tokens: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs --tls-key and a
    /// server built with `--features flare-server/tls`.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Open connections in all (lowered to what the file-descriptor limit allows).
    #[arg(long, default_value_t = ConnLimits::default().max_connections)]
    pub max_connections: usize,
    /// Open connections from one IP address; 0 for no bound (behind a proxy every client
    /// comes through).
    #[arg(long, default_value_t = ConnLimits::default().max_connections_per_ip)]
    pub max_connections_per_ip: usize,
    /// Time a client has to send a request's header; idle connections close after it too.
    #[arg(long, default_value = "20s", value_parser = crate::agent::duration)]
    pub header_timeout: Duration,
    /// Summaries one IP address may post per second, sustained (429 beyond, and agents
    /// retry); 0 for no bound (behind a proxy every agent comes through).
    #[arg(long, default_value_t = IngestRate::default().per_s)]
    pub ingest_rate: f64,
    /// Summaries one IP address may post at once.
    #[arg(long, default_value_t = IngestRate::default().burst)]
    pub ingest_burst: u32,
    /// Where the dashboard opens timelines: Perfetto's UI, or a copy the cluster hosts
    /// (where browsers have no internet access).
    #[arg(long, value_name = "URL", default_value = flare_server::PERFETTO_UI)]
    pub perfetto_url: String,
    /// How long a window missing some ranks waits for them after its latest summary
    /// before it is analysed as it is (a node died, or posts late); a window is analysed
    /// at once when every rank is in.
    #[arg(long, default_value = "1s", value_parser = crate::agent::duration)]
    pub analysis_delay: Duration,
    /// Memory kept between posts for decoded summaries and merged windows (`1GiB`,
    /// `256MiB`).
    #[arg(long, value_name = "SIZE", value_parser = bytes, default_value = "384MiB")]
    pub cache_bytes: u64,
    /// Largest request body accepted, in bytes; also bounds a summary once decompressed.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Where alerts go when a finding opens, escalates or resolves: `slack=URL` (a
    /// Slack-compatible incoming webhook), `json=URL` or a bare URL (the alert event as
    /// JSON). Repeatable.
    #[arg(long = "alert-webhook", value_name = "[slack=|json=]URL")]
    pub alert_webhooks: Vec<flare_server::alerts::Webhook>,
    /// Findings below this severity never alert.
    #[arg(long, value_enum, default_value_t = AlertSeverity::Warning)]
    pub alert_min_severity: AlertSeverity,
    /// Consecutive windows a finding must be seen in before its alert opens (critical
    /// findings, hangs and failures, page at once).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub alert_after_windows: u32,
    /// Consecutive windows without it before an open alert resolves.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub resolve_after_windows: u32,
    /// Delete jobs not heard from for this long (`30d`, `12h`); by default nothing is
    /// deleted. Checked every minute.
    #[arg(long, value_name = "AGE", value_parser = crate::agent::duration)]
    pub retain: Option<Duration>,
    /// Also store the summaries agents publish to NATS JetStream at this URL
    /// (`nats://host:4222`; `flare agent --server nats://...`). Any number of servers
    /// sharing a PostgreSQL --db consume the stream together, each summary stored by one.
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// Keep at most this much of stored summaries (`20GiB`, `500MiB`, bytes): the oldest
    /// windows' summaries go first (their diagnoses stay).
    #[arg(long, value_name = "SIZE", value_parser = bytes)]
    pub retain_summary_bytes: Option<u64>,
}

/// `flare backup`: a consistent copy of the server's database, taken while it runs.
#[derive(Args)]
pub struct BackupArgs {
    /// The server's SQLite database (PostgreSQL is copied with its own `pg_dump`).
    #[arg(long, default_value = "flare-server.db", value_parser = db_location)]
    pub db: DbLocation,
    /// The copy to write (a new file).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run_backup(args: BackupArgs) -> Result<ExitCode> {
    let DbLocation::Sqlite(db) = &args.db else {
        bail!(
            "{} is a PostgreSQL database: back it up with PostgreSQL's own tools (pg_dump, or the server's base backups); `flare backup` copies SQLite files",
            args.db
        );
    };
    let t = std::time::Instant::now();
    let size = flare_server::retention::backup(db, &args.out)?;
    println!(
        "copied {} to {} ({size} bytes) in {:.1} s",
        db.display(),
        args.out.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn db_location(s: &str) -> Result<DbLocation, String> {
    if s.trim().is_empty() {
        return Err("give a SQLite file or a postgres:// URL".into());
    }
    Ok(DbLocation::parse(s))
}

/// A size: a number of bytes, or with a unit (KiB, MiB, GiB, TiB; KB, MB, GB, TB).
fn bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a size like 20GiB, 500MB or 1048576"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
        "tib" | "t" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    let b = v * scale;
    if !b.is_finite() || b < 1.0 || b > u64::MAX as f64 {
        return Err(format!("{s:?}: out of range"));
    }
    Ok(b as u64)
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AlertSeverity {
    Warning,
    Critical,
}

/// A token from the environment, if set.
fn env_token(var: &str) -> Result<Option<String>> {
    match std::env::var(var) {
        Ok(t) if t.trim().is_empty() => bail!("{var} is set but empty"),
        Ok(t) => Ok(Some(t)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => bail!("{var} is not valid UTF-8"),
    }
}

pub fn run(args: ServeArgs) -> Result<ExitCode> {
    let token = match args.token {
        Some(t) => t,
        None => match std::env::var("FLARE_TOKEN") {
            Ok(t) => t,
            Err(std::env::VarError::NotPresent) => {
                bail!("a token is required: pass --token TOKEN or set FLARE_TOKEN")
            }
            Err(std::env::VarError::NotUnicode(_)) => bail!("FLARE_TOKEN is not valid UTF-8"),
        },
    };
    if token.trim().is_empty() {
        bail!("the token is empty: pass --token TOKEN or set FLARE_TOKEN to a non-empty secret");
    }
    let db = match args.db {
        Some(db) => db,
        None => match env_token("FLARE_DB")? {
            Some(url) => DbLocation::parse(url.trim()),
            None => DbLocation::Sqlite("flare-server.db".into()),
        },
    };
    let mut ingest_tokens = args.ingest_tokens;
    ingest_tokens.extend(env_token("FLARE_INGEST_TOKEN")?);
    let mut read_tokens = args.read_tokens;
    read_tokens.extend(env_token("FLARE_READ_TOKEN")?);
    flare_server::init_logging();
    let cfg = ServerConfig {
        ingest_tokens,
        read_tokens,
        tls: match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            _ => None,
        },
        connections: ConnLimits {
            header_read_timeout: args.header_timeout,
            max_connections: args.max_connections,
            max_connections_per_ip: args.max_connections_per_ip,
        },
        ingest_rate: IngestRate {
            per_s: args.ingest_rate,
            burst: args.ingest_burst,
        },
        cache_bytes: usize::try_from(args.cache_bytes).unwrap_or(usize::MAX),
        analysis_delay: args.analysis_delay,
        perfetto_ui: args.perfetto_url,
        webhooks: args.alert_webhooks,
        alert_rules: flare_server::alerts::AlertRules {
            min_severity: match args.alert_min_severity {
                AlertSeverity::Warning => Severity::Warning,
                AlertSeverity::Critical => Severity::Critical,
            },
            open_after: args.alert_after_windows,
            resolve_after: args.resolve_after_windows,
        },
        max_body_bytes: args.max_body_bytes,
        nats: args.nats.map(|url| flare_server::nats::NatsConfig { url }),
        retention: flare_server::retention::Retention {
            max_age_ns: args
                .retain
                .map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            max_summary_bytes: args.retain_summary_bytes,
        },
        ..ServerConfig::new(args.listen, db, token)
    };
    let scheme = if cfg.tls.is_some() { "https" } else { "http" };
    flare_server::run_blocking(
        cfg,
        |addr| {
            // Scripts and tests read the real address (port 0) from this first line.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "listening on {scheme}://{addr}");
            let _ = out.flush();
        },
        flare_server::shutdown_signal(),
    )?;
    Ok(ExitCode::SUCCESS)
}
