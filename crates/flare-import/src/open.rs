//! One entry point for every trace input: [`open`] checks the paths, picks the format (or
//! takes the one given), reads within [`Limits`] and returns a timeline [`Trace`] or a
//! Flight Recorder job.

use crate::flight_recorder::{FrError, FrJob};
use crate::kineto::{KinetoError, KinetoOptions};
use crate::limits::{check_input, InputKind, LimitError, Limits};
use crate::native::{NativeError, NativeReader};
use crate::nccl_inspector::{InspectorError, NcclOptions};
use crate::nccl_profiler::ProfilerDumpError;
use crate::sniff::{detect, Detected};
use flare_model::Trace;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

/// The input formats [`open`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Decide from the file's magic bytes or the directory's contents.
    Auto,
    /// Flare's native trace (`trace.flare`, or a directory holding one).
    Flare,
    /// PyTorch profiler (Kineto) JSON, one file per rank, plain or gzipped.
    Kineto,
    /// PyTorch Flight Recorder dumps (pickle or JSON), one file per rank: hang analysis.
    FlightRecorder,
    /// NCCL Inspector JSON lines, one file per process.
    NcclInspector,
    /// Dumps of NCCL's example profiler plugin (Chrome trace `b`/`e` events).
    NcclProfiler,
    /// Flare's node agents' window summaries (`flare agent --out DIR`).
    AgentSummaries,
}

/// How [`open`] reads its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    pub format: Format,
    /// GPUs per node, to map ranks to nodes for traces that do not say.
    pub gpus_per_node: u32,
    /// Nodes per pod (leaf-switch domain), for traces that do not say.
    pub nodes_per_pod: u32,
    pub limits: Limits,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            format: Format::Auto,
            gpus_per_node: 8,
            nodes_per_pod: 32,
            limits: Limits::default(),
        }
    }
}

/// What [`open`] read: a timeline, or Flight Recorder dumps (collective state per rank, no
/// timeline), which have their own analysis.
#[derive(Debug)]
pub enum Opened {
    Trace(Box<Trace>),
    FlightRecorder(Box<FrJob>),
    /// Window summaries, in window order: the live engine's input.
    AgentSummaries(Vec<flare_model::WindowSummary>),
}

/// Why [`open`] failed: the input was refused, or the importer of the format it tried
/// failed (the importer's error is the [`source`](std::error::Error::source)).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no input paths were given")]
    NoPaths,
    #[error(transparent)]
    Input(#[from] LimitError),
    #[error("a Flare trace is one file; got {count} paths")]
    FlareManyPaths { count: usize },
    #[error("Flight Recorder dumps are read from one directory; got {count} paths")]
    FlightRecorderManyPaths { count: usize },
    #[error("reading Flare trace {path} ({how})")]
    Native {
        path: String,
        how: String,
        #[source]
        source: Box<NativeError>,
    },
    #[error("reading {what} ({how})")]
    Kineto {
        what: String,
        how: String,
        #[source]
        source: Box<KinetoError>,
    },
    #[error("reading Flight Recorder dumps in {path} ({how})")]
    FlightRecorder {
        path: String,
        how: String,
        #[source]
        source: Box<FrError>,
    },
    #[error("reading NCCL Inspector output in {path} ({how})")]
    NcclInspector {
        path: String,
        how: String,
        #[source]
        source: Box<InspectorError>,
    },
    #[error("reading agent window summaries in {path} ({how})")]
    AgentSummaries {
        path: String,
        how: String,
        #[source]
        source: Box<crate::agent_summaries::SummaryError>,
    },
    #[error("reading NCCL profiler dumps in {path} ({how})")]
    NcclProfiler {
        path: String,
        how: String,
        #[source]
        source: Box<ProfilerDumpError>,
    },
}

/// Reads a trace from one file or directory, or from several per-rank files of one job.
///
/// Every path must be a regular file or a directory (FIFOs, devices and sockets are
/// refused before they are opened). With [`Format::Auto`] the format is detected as
/// [`crate::sniff::detect`] says. Reads stay within `opts.limits`.
pub fn open(paths: &[PathBuf], opts: &OpenOptions) -> Result<Opened, OpenError> {
    let Resolved {
        format,
        how,
        one_dir,
    } = resolve(paths, opts)?;
    let limits = &opts.limits;
    let path = paths[0].as_path();
    let shown = path.display().to_string();
    let nccl_opts = NcclOptions {
        gpus_per_node: opts.gpus_per_node,
        nodes_per_pod: opts.nodes_per_pod,
        limits: *limits,
        ..Default::default()
    };
    match format {
        Format::Flare => open_chunked_native(paths, one_dir, how.clone(), limits)?
            .into_trace()
            .map(|t| Opened::Trace(Box::new(t)))
            .map_err(|source| OpenError::Native {
                path: native_path(path, one_dir).display().to_string(),
                how,
                source: Box::new(source),
            }),
        Format::FlightRecorder => {
            if paths.len() > 1 {
                return Err(OpenError::FlightRecorderManyPaths { count: paths.len() });
            }
            read_fr(path, one_dir, limits)
                .map(|j| Opened::FlightRecorder(Box::new(j)))
                .map_err(|source| OpenError::FlightRecorder {
                    path: shown,
                    how,
                    source: Box::new(source),
                })
        }
        Format::NcclInspector => if one_dir {
            crate::nccl_inspector::read_inspector_dir(path, &nccl_opts)
        } else {
            crate::nccl_inspector::read_inspector_files(paths, &nccl_opts)
        }
        .map(|t| Opened::Trace(Box::new(t)))
        .map_err(|source| OpenError::NcclInspector {
            path: shown,
            how,
            source: Box::new(source),
        }),
        Format::NcclProfiler => if one_dir {
            crate::nccl_profiler::read_profiler_dump_dir(path, &nccl_opts)
        } else {
            crate::nccl_profiler::read_profiler_dump_files(paths, &nccl_opts)
        }
        .map(|t| Opened::Trace(Box::new(t)))
        .map_err(|source| OpenError::NcclProfiler {
            path: shown,
            how,
            source: Box::new(source),
        }),
        Format::AgentSummaries => if one_dir {
            crate::agent_summaries::read_dir(path, limits)
        } else {
            crate::agent_summaries::read_files(paths, limits)
        }
        .map(Opened::AgentSummaries)
        .map_err(|source| OpenError::AgentSummaries {
            path: shown,
            how,
            source: Box::new(source),
        }),
        Format::Kineto | Format::Auto => {
            let kopts = KinetoOptions {
                gpus_per_node: opts.gpus_per_node,
                nodes_per_pod: opts.nodes_per_pod,
                limits: *limits,
            };
            let (r, what) = if paths.len() > 1 {
                (
                    crate::kineto::read_kineto_files(paths, &kopts),
                    format!("{} Kineto trace files", paths.len()),
                )
            } else if one_dir {
                (
                    crate::kineto::read_kineto_dir(path, &kopts),
                    format!("Kineto traces in {shown}"),
                )
            } else {
                (
                    crate::kineto::read_kineto_files(paths, &kopts),
                    format!("Kineto trace {shown}"),
                )
            };
            r.map(|t| Opened::Trace(Box::new(t)))
                .map_err(|source| OpenError::Kineto {
                    what,
                    how,
                    source: Box::new(source),
                })
        }
    }
}

/// What [`open_chunked`] opened: a native file ready to be read chunk by chunk (one
/// iteration of every rank at a time), or what [`open`] reads whole.
pub enum Chunked {
    Native(Box<NativeReader<BufReader<File>>>),
    Whole(Opened),
}

/// [`open`], except that a native file is opened to be read chunk by chunk (its header
/// read, its ops not yet), so that a caller can process it without holding it whole.
pub fn open_chunked(paths: &[PathBuf], opts: &OpenOptions) -> Result<Chunked, OpenError> {
    let Resolved {
        format,
        how,
        one_dir,
    } = resolve(paths, opts)?;
    if format == Format::Flare {
        let reader = open_chunked_native(paths, one_dir, how, &opts.limits)?;
        return Ok(Chunked::Native(Box::new(reader)));
    }
    open(paths, opts).map(Chunked::Whole)
}

/// The paths checked and the format chosen.
struct Resolved {
    format: Format,
    /// How the format was chosen, for messages.
    how: String,
    /// The input is one directory.
    one_dir: bool,
}

fn resolve(paths: &[PathBuf], opts: &OpenOptions) -> Result<Resolved, OpenError> {
    if paths.is_empty() {
        return Err(OpenError::NoPaths);
    }
    let mut kinds = Vec::with_capacity(paths.len());
    for p in paths {
        kinds.push(check_input(p)?);
    }
    let Detected { format, why } = match opts.format {
        Format::Auto => detect(paths),
        f => Detected {
            format: f,
            why: "format given".into(),
        },
    };
    let how = if opts.format == Format::Auto {
        format!("detected: {why}")
    } else {
        why
    };
    Ok(Resolved {
        format,
        how,
        one_dir: paths.len() == 1 && kinds[0] == InputKind::Directory,
    })
}

/// The native file a path names: the file, or `trace.flare` in the directory.
fn native_path(path: &Path, one_dir: bool) -> PathBuf {
    if one_dir {
        path.join("trace.flare")
    } else {
        path.to_path_buf()
    }
}

fn open_chunked_native(
    paths: &[PathBuf],
    one_dir: bool,
    how: String,
    limits: &Limits,
) -> Result<NativeReader<BufReader<File>>, OpenError> {
    if paths.len() > 1 {
        return Err(OpenError::FlareManyPaths { count: paths.len() });
    }
    let native_path = native_path(&paths[0], one_dir);
    crate::native::open_native_file(&native_path, limits).map_err(|source| OpenError::Native {
        path: native_path.display().to_string(),
        how,
        source: Box::new(source),
    })
}

fn read_fr(path: &Path, dir: bool, limits: &Limits) -> Result<FrJob, FrError> {
    if dir {
        crate::flight_recorder::read_fr_dir_with_limits(path, limits)
    } else {
        let name = path.display().to_string();
        let d = crate::flight_recorder::read_fr_file_with_limits(path, limits)?;
        crate::flight_recorder::assemble_job(&name, vec![(name.clone(), d)])
    }
}
