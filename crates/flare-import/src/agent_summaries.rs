//! The node agents' window summaries as `flare agent --out DIR` writes them: one JSON
//! file per job, node and window (`<job>-<node>-w<window>.json`). Read back whole: the
//! live engine replays them window by window, as the server would have.

use crate::limits::{self, LimitError, Limits};
use crate::nccl_inspector::{list_files, ListError};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::WindowSummary;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no window summaries (*.json) in it")]
    EmptyDirectory { path: String },
    #[error("{path}: line {line}, column {column}: not a window summary: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: summary format version {version}; this Flare reads up to {supported}")]
    Version {
        path: String,
        version: u32,
        supported: u32,
    },
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// Whether a file's first bytes are those of a window summary (a JSON object naming its
/// window length and ranks).
pub fn sniff(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    text.trim_start().starts_with('{')
        && text.contains("\"window_ns\"")
        && text.contains("\"job_id\"")
        && text.contains("\"version\"")
}

/// Reads every summary of a directory (and of its direct subdirectories: one per node).
pub fn read_dir(dir: &Path, limits: &Limits) -> Result<Vec<WindowSummary>, SummaryError> {
    let files = list_files(dir, &["json"], limits).map_err(|e| match e {
        ListError::Io(path, source) => SummaryError::Io { path, source },
        ListError::Empty(path) => SummaryError::EmptyDirectory { path },
        ListError::Limit(e) => SummaryError::Limit(e),
    })?;
    read_files(&files, limits)
}

/// Reads the given summary files, in window order.
pub fn read_files(files: &[PathBuf], limits: &Limits) -> Result<Vec<WindowSummary>, SummaryError> {
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let path = f.display().to_string();
        let data = limits::read_file(f, limits)?;
        out.push(parse(&path, &data)?);
    }
    out.sort_by(|a, b| (a.window, &a.node).cmp(&(b.window, &b.node)));
    Ok(out)
}

/// One summary file's content.
pub fn parse(path: &str, data: &[u8]) -> Result<WindowSummary, SummaryError> {
    let s: WindowSummary = serde_json::from_slice(data).map_err(|e| SummaryError::Parse {
        path: path.to_string(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    if s.version > SUMMARY_VERSION {
        return Err(SummaryError::Version {
            path: path.to_string(),
            version: s.version,
            supported: SUMMARY_VERSION,
        });
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = r#"{"version":1,"job_id":"j","node":"n0","window":5,"window_ns":2000000000,
        "start_unix_ns":10000000000,"end_unix_ns":12000000000,"world_size":2,"ranks":[]}"#;

    #[test]
    fn a_summary_is_recognised_and_read() {
        assert!(sniff(SUMMARY.as_bytes()));
        assert!(!sniff(b"{\"traceEvents\": []}"));
        let s = parse("w5.json", SUMMARY.as_bytes()).unwrap();
        assert_eq!((s.job_id.as_str(), s.window, s.world_size), ("j", 5, 2));
    }

    #[test]
    fn bad_input_is_refused_with_the_file_and_place() {
        let e = parse("w.json", b"{\"version\":1,\n\"job_id\":3}").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("w.json: line 2, column"), "{msg}");
        let newer = SUMMARY.replace("\"version\":1", "\"version\":9");
        let e = parse("w.json", newer.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("version 9"), "{e}");
    }
}
