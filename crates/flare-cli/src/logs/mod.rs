//! `flare logs`: work on text logs. `templates` mines the templates of log files in one
//! streaming pass (see the `flare-logs` crate).

mod bench;
mod templates;

pub use bench::{bench, LogsBenchArgs};

use anyhow::Result;
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Args)]
pub struct LogsArgs {
    #[command(subcommand)]
    pub which: Which,
}

#[derive(Subcommand)]
pub enum Which {
    /// Mine log templates, one streaming pass: a summary by count, or one JSON object
    /// per line with --json.
    Templates(templates::TemplatesArgs),
}

pub fn run(a: LogsArgs) -> Result<ExitCode> {
    match a.which {
        Which::Templates(a) => templates::run(a),
    }
}
