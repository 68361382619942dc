//! The agent's errors. Only start-up and shutdown fail: once running, the agent logs and
//! counts what goes wrong (a bad file, a failed push) and carries on.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("invalid agent configuration: {0}")]
    Config(String),
    #[error("invalid duration {input:?}: {why} (expected e.g. \"10s\", \"500ms\", \"2m\")")]
    Duration { input: String, why: String },
    #[error("invalid server URL {url:?}: {why}")]
    ServerUrl { url: String, why: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen for metrics on {addr}: {source}")]
    MetricsListen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode a window summary: {0}")]
    Encode(String),
    #[error("cannot install the signal handlers: {0}")]
    Signal(std::io::Error),
}

impl AgentError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        AgentError::Io {
            path: path.into(),
            source,
        }
    }
}
