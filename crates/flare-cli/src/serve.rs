//! `flare serve`: the ingest server node agents post window summaries to.

use anyhow::{bail, Result};
use clap::Args;
use flare_model::Severity;
use flare_server::{ServerConfig, DEFAULT_MAX_BODY_BYTES};
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
    /// SQLite database file, created if missing.
    #[arg(long, default_value = "flare-server.db")]
    pub db: PathBuf,
    /// Token clients must send as `Authorization: Bearer TOKEN`. Prefer the FLARE_TOKEN
    /// environment variable: a command-line argument is visible to other users in `ps`.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
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
    #[arg(long, value_name = "AGE", value_parser = duration)]
    pub retain: Option<Duration>,
    /// Keep at most this much of stored summaries (`20GiB`, `500MiB`, bytes): the oldest
    /// windows' summaries go first (their diagnoses stay).
    #[arg(long, value_name = "SIZE", value_parser = bytes)]
    pub retain_summary_bytes: Option<u64>,
}

/// `flare backup`: a consistent copy of the server's database, taken while it runs.
#[derive(Args)]
pub struct BackupArgs {
    /// The server's SQLite database.
    #[arg(long, default_value = "flare-server.db")]
    pub db: PathBuf,
    /// The copy to write (a new file).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run_backup(args: BackupArgs) -> Result<ExitCode> {
    let t = std::time::Instant::now();
    let size = flare_server::retention::backup(&args.db, &args.out)?;
    println!(
        "copied {} to {} ({size} bytes) in {:.1} s",
        args.db.display(),
        args.out.display(),
        t.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn duration(s: &str) -> Result<Duration, String> {
    flare_agent::parse_duration(s).map_err(|e| e.to_string())
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
    flare_server::init_logging();
    let cfg = ServerConfig {
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
        retention: flare_server::retention::Retention {
            max_age_ns: args
                .retain
                .map(|d| d.as_nanos().min(u64::MAX as u128) as u64),
            max_summary_bytes: args.retain_summary_bytes,
        },
        ..ServerConfig::new(args.listen, args.db, token)
    };
    flare_server::run_blocking(
        cfg,
        |addr| {
            // Scripts and tests read the real address (port 0) from this first line.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "listening on http://{addr}");
            let _ = out.flush();
        },
        flare_server::shutdown_signal(),
    )?;
    Ok(ExitCode::SUCCESS)
}
