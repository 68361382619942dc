//! `flare serve`: the ingest server node agents post window summaries to.

use anyhow::{bail, Result};
use clap::Args;
use flare_server::{ServerConfig, DEFAULT_MAX_BODY_BYTES};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

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
        listen: args.listen,
        db: args.db,
        token,
        max_body_bytes: args.max_body_bytes,
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
