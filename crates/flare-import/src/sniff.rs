//! Which format an input is in, from its first bytes or its directory's contents.
//!
//! Only regular files are opened (see [`crate::limits::read_head`]), and only their first
//! few KB are read.

use crate::limits::read_head;
use crate::open::Format;
use std::path::{Path, PathBuf};

/// A format picked by [`detect`], and why (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// Never [`Format::Auto`].
    pub format: Format,
    pub why: String,
}

/// Whether `path` is a regular file that starts with the native format's magic bytes.
pub fn is_native_file(path: &Path) -> bool {
    read_head(path, 8).is_some_and(|h| h == crate::native::MAGIC)
}

/// The first regular, non-hidden file of a directory, by name.
fn first_file(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files.into_iter().next()
}

/// Recognises NCCL Inspector logs, NCCL profiler dumps and agent window summaries from
/// their first bytes (of the file, or of the first file in a directory).
pub fn sniff_head(path: &Path) -> Option<Format> {
    let file = if path.is_dir() {
        first_file(path)?
    } else {
        path.to_path_buf()
    };
    let head = read_head(&file, 4096)?;
    if crate::nccl_inspector::sniff(&head) {
        Some(Format::NcclInspector)
    } else if crate::nccl_profiler::sniff(&head) {
        Some(Format::NcclProfiler)
    } else if crate::agent_summaries::sniff(&head) {
        Some(Format::AgentSummaries)
    } else {
        None
    }
}

/// Why [`sniff_head`] picked a format.
fn sniffed(f: Format) -> &'static str {
    match f {
        Format::NcclInspector => "the first file starts like an NCCL Inspector log",
        Format::AgentSummaries => "the first file starts like a Flare agent's window summary",
        _ => "the first file starts like an NCCL profiler dump",
    }
}

/// The format of `paths` (one file or directory, or several per-rank files): the native
/// format by its magic bytes (a file, or a directory holding `trace.flare`), then Flight
/// Recorder dumps, NCCL Inspector logs, NCCL profiler dumps and agent window summaries by
/// their first bytes, else Kineto JSON. Several paths are Kineto files unless the first is
/// one of those.
pub fn detect(paths: &[PathBuf]) -> Detected {
    let d = |format, why: &str| Detected {
        format,
        why: why.to_string(),
    };
    let Some(p) = paths.first() else {
        return d(Format::Kineto, "no paths");
    };
    if paths.len() > 1 {
        return match sniff_head(p) {
            Some(f) => d(f, sniffed(f)),
            None => d(
                Format::Kineto,
                "several files: read as Kineto traces, one per rank",
            ),
        };
    }
    let in_dir = p.join("trace.flare");
    if p.is_dir() {
        if is_native_file(&in_dir) {
            return d(Format::Flare, "the directory holds a Flare trace.flare");
        }
    } else if is_native_file(p) {
        return d(Format::Flare, "the file starts with FLARETRC");
    }
    if !in_dir.is_file() && crate::flight_recorder::looks_like_fr_dump(p) {
        return d(
            Format::FlightRecorder,
            "the first bytes are those of a Flight Recorder dump",
        );
    }
    match sniff_head(p) {
        Some(f) => d(f, sniffed(f)),
        None if p.is_file() && read_head(p, 4).is_some_and(|h| h.starts_with(b"PAR1")) => d(
            Format::Kineto,
            "a parquet file (an NDTimeline trace?): only `flare whatif` reads parquet; read as Kineto JSON",
        ),
        None => d(
            Format::Kineto,
            "not a Flare trace, Flight Recorder dump or NCCL log: read as Kineto JSON",
        ),
    }
}
