//! Which files are a job's text logs: by name (`.log`, `.txt`, `.out`, `.err`, `.dmesg`,
//! `stdout`/`stderr`, rotated `.log.1`, no extension; each possibly `.gz`) and, for a
//! name that says little (no extension), by content (text, not a binary dump such as a
//! Flight Recorder pickle). Directories are walked in sorted order, so what is read does
//! not depend on the file system's order. Used by `flare logs diagnose` and by `flare
//! diagnose` for the logs beside traces or dumps.

use crate::limits::{self, read_head, InputKind, LimitError, Limits};
use std::path::{Path, PathBuf};

pub use flare_log_diagnosis::source::{is_log_file_name, looks_like_text};

/// The log files under some paths, and what was passed over.
#[derive(Debug, Default)]
pub struct LogFiles {
    pub files: Vec<PathBuf>,
    /// Files passed over, with why (not a log by name, binary, not a regular file).
    pub skipped: Vec<String>,
}

/// The log files of `paths`: a file as given; a directory's files whose name says log
/// (and, without an extension, whose start is text), walked in sorted order. At most
/// `limits.max_files` per directory given.
pub fn list_log_files(paths: &[PathBuf], limits: &Limits) -> Result<LogFiles, LimitError> {
    let mut out = LogFiles::default();
    for p in paths {
        match limits::check_input(p)? {
            InputKind::File { .. } => out.files.push(p.clone()),
            InputKind::Directory => {
                let before = out.files.len();
                walk(p, &mut out)?;
                limits::check_file_count(p, out.files.len() - before, limits)?;
            }
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut LogFiles) -> Result<(), LimitError> {
    let io = |source| LimitError::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .map_err(io)?;
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        match limits::check_input(&p) {
            Ok(InputKind::Directory) => walk(&p, out)?,
            Ok(InputKind::File { .. }) => {
                let named = is_log_file_name(name);
                // a name without an extension says little: a dump has none either (and a
                // Flight Recorder dump in JSON is text)
                let text = name.contains('.')
                    || (read_head(&p, 4096).is_some_and(|h| looks_like_text(&h))
                        && !crate::flight_recorder::looks_like_fr_dump(&p));
                if named && text {
                    out.files.push(p);
                } else {
                    out.skipped.push(p.display().to_string());
                }
            }
            Err(e) => out.skipped.push(e.to_string()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_lists_its_logs_and_passes_over_dumps() {
        let dir = std::env::temp_dir().join(format!("flare-text-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("node-1")).unwrap();
        std::fs::write(dir.join("node-1/rank3.log"), "[rank3]: step 1\n").unwrap();
        std::fs::write(dir.join("dmesg"), "[ 1.0] NVRM: Xid 79\n").unwrap();
        std::fs::write(dir.join("trace.json"), "{}").unwrap();
        // Flight Recorder dumps have no extension: a pickle, and one written as JSON
        std::fs::write(dir.join("nccl_trace_rank_0"), b"\x80\x02}q\x00(X\x07\x00").unwrap();
        std::fs::write(
            dir.join("nccl_trace_rank_1"),
            r#"{"version": "2.9", "pg_config": {}, "entries": []}"#,
        )
        .unwrap();
        let l = list_log_files(std::slice::from_ref(&dir), &Limits::default()).unwrap();
        let names: Vec<_> = l
            .files
            .iter()
            .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["dmesg", "node-1/rank3.log"]);
        assert_eq!(l.skipped.len(), 3, "{:?}", l.skipped);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
