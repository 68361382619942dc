//! `flare logs`: work on text logs. `templates` mines the templates of log files in one
//! streaming pass (see the `flare-logs` crate); `diagnose` finds the root cause of a
//! failed job in its logs (see `flare-log-diagnosis`).

mod bench;
pub mod corpus;
pub mod diagnose;
mod direct;
mod templates;

pub use bench::{bench, LogsBenchArgs};
pub use corpus::CorpusArgs;

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
    /// The root cause of a failed job from its logs: the failure-indicating lines, the
    /// root cause told from the cascade, the culprit rank and host, the category, the
    /// stage, the action and whether a restart helps.
    Diagnose(diagnose::DiagnoseArgs),
}

/// `flare logs ... | head`: the reader has all it wanted; the write error ends the run
/// quietly.
pub(crate) fn quiet_on_broken_pipe(r: Result<ExitCode>) -> Result<ExitCode> {
    match r {
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            Ok(ExitCode::SUCCESS)
        }
        r => r,
    }
}

pub fn run(a: LogsArgs) -> Result<ExitCode> {
    match a.which {
        Which::Templates(a) => templates::run(a),
        Which::Diagnose(a) => diagnose::run(a),
    }
}
