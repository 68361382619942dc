//! PyTorch profiler (Kineto / Chrome trace JSON) traces: one file per rank, plain or gzip.
//!
//! Reading turns each rank's file into that rank's ops:
//!
//! * NCCL kernels (`cat: "kernel"`, name starting with `nccl`) become sync ops. The kind
//!   comes from the `Collective name` argument, else from the kernel name; the
//!   communicator from `Process Group Ranks` (+ `Process Group Name`), else from
//!   `distributedInfo.pg_config`, else a synthetic `unknown:<kind>` communicator of all
//!   ranks in the input; `seq` from `Seq`, else the op's ordinal on its communicator on
//!   that rank; bytes from `In msg nelems` x the size of `dtype`; the peer of a P2P op from
//!   `Src Rank` / `Dst Rank`, else from a two-rank communicator. NCCL kernels whose kind
//!   cannot be told (`ncclDevKernel_Generic` without arguments) are kept as compute ops
//!   and counted in [`KinetoImportStats::nccl_unrecognised`]. The collective arguments
//!   are read from the kernel events, where PyTorch 2.x puts them; a kernel without
//!   them takes those of the `record_param_comms` CPU op that launched it (the innermost
//!   one around its launch call on the launching thread), where older versions put them.
//! * Communicators are deduplicated across files by (process group name, members). A
//!   group of every rank is `World`; otherwise the kind comes from Flare's own
//!   `flare_group_kind` in `pg_config` or a Megatron-style description
//!   (`TENSOR_MODEL_PARALLEL_GROUP`, `DATA_PARALLEL_GROUP`, ...), else `Other`.
//! * Other kernels become [`OpKind::Compute`](flare_model::OpKind::Compute) ops named
//!   after the kernel, with `FLOPs` as the amount when present; a kernel without them
//!   that a GEMM op with recorded shapes launched (`aten::addmm`, ...; the innermost one
//!   around its launch call) takes the GEMM's 2·M·N·K·batch, the op's first kernel only.
//! * `cpu_op` / `user_annotation` spans whose names say DataLoader, gc, optimizer or
//!   checkpoint become host ops, issued at their start since the CPU runs them itself (a
//!   span nested in another of the same kind is merged into it and counted in
//!   [`KinetoImportStats::nested_host_spans`]). With `with_stack=True`, the frames of
//!   the libraries' checkpoint saves (`torch.save`, `torch.distributed.checkpoint.save`
//!   and `async_save`, safetensors' `save_file`) are checkpoint host ops too.
//! * `ProfilerStep#N` spans give the iterations. An op belongs to the last step that began
//!   at or before its CPU time: the `cudaLaunchKernel` (or `cudaLaunchKernelExC`,
//!   `cuLaunchKernel`) call with the same `correlation` for a kernel, which also gives its
//!   issue time, else the kernel's own GPU start; an op before the first step belongs to
//!   the first step. A rank without steps gets one iteration, 0, spanning its ops.
//! * Everything else (memcpy, memset, other CPU ops, runtime calls, flows, metadata) is
//!   skipped and counted per category in [`KinetoImportStats::skipped`].
//!
//! Times: `ts` and `dur` are microseconds in the Chrome trace format whatever
//! `displayTimeUnit` says (it only sets the viewer's display unit). They are converted to
//! nanoseconds exactly from their decimal text, and `baseTimeNanoseconds`, which recent
//! Kineto versions subtract from every timestamp, is added back so that ranks align.
//!
//! Writing ([`write_kineto_rank`], [`write_kineto_dir`]) produces files in the shape
//! torch.profiler writes. Kineto cannot represent a kernel that never ended, so in-flight
//! ops are left out (and counted in [`KinetoWriteStats::in_flight_omitted`]).

mod assemble;
mod comm;
mod cpu_side;
mod host_calls;
mod names;
mod nesting;
mod parse;
mod write;

pub use write::{write_kineto_dir, write_kineto_rank, KinetoWriteStats};

use crate::limits::{self, InflateError, LimitError, Limits};
use flare_model::Trace;
use parse::ParsedFile;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest world size accepted, to keep a corrupt `world_size` from allocating
/// gigabytes for the list of missing ranks.
pub const MAX_WORLD_SIZE: u64 = 1 << 22;

/// How to place the ranks of an imported trace on a cluster (Kineto files do not say), and
/// how much the import may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinetoOptions {
    pub gpus_per_node: u32,
    pub nodes_per_pod: u32,
    pub limits: Limits,
}

impl Default for KinetoOptions {
    fn default() -> Self {
        KinetoOptions {
            gpus_per_node: 8,
            nodes_per_pod: 32,
            limits: Limits::default(),
        }
    }
}

/// What an import read, kept, and skipped. Nothing is dropped without being counted here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KinetoImportStats {
    pub files: usize,
    /// Entries of `traceEvents`, all files together.
    pub events: u64,
    /// GPU kernels (`cat: "kernel"`), NCCL ones included.
    pub kernels: u64,
    pub nccl_kernels: u64,
    /// NCCL kernels whose collective could not be told; imported as compute ops.
    pub nccl_unrecognised: u64,
    /// Kernels with no correlated launch call: their issue time is unknown and their
    /// iteration comes from their GPU start.
    pub kernels_without_launch: u64,
    /// Kernels with no `dur`: imported as in flight.
    pub kernels_without_duration: u64,
    /// Host spans imported as host ops.
    pub host_ops: u64,
    /// Host spans nested in a span of the same kind, merged into it.
    pub nested_host_spans: u64,
    pub profiler_steps: u64,
    /// Kernel launch calls (`cudaLaunchKernel`, ...) read for issue times.
    pub launch_calls: u64,
    /// Runtime and driver calls read as host calls (syncs, memory management; see
    /// `TraceMeta::host_calls`).
    pub runtime_host_calls: u64,
    /// Communication kernels outside NCCL (DeepEP, NVSHMEM, MSCCL++) read as sync ops.
    pub other_comm_kernels: u64,
    /// Communication kernels outside NCCL whose collective their name does not tell
    /// (imported as compute).
    pub other_comm_kernels_unknown: u64,
    /// Files without GPU kernels are read from their CPU side: collective work spans on a
    /// backend's thread (`gloo:*`) read as sync ops...
    pub cpu_collectives: u64,
    /// ...those of ranks in several process groups that do not say which (not read)...
    pub cpu_collectives_unattributed: u64,
    /// ...sends and receives whose peer the trace does not give (not read: a message
    /// cannot be matched without it)...
    pub cpu_p2p_without_peer: u64,
    /// ...top-level CPU spans read as compute...
    pub cpu_compute_spans: u64,
    /// ...and collectives launched (`c10d::*`, `nccl:*`) whose work the file does not
    /// hold: an NCCL job profiled without `ProfilerActivity.CUDA`.
    pub cpu_launches_without_work: u64,
    /// NCCL kernels without collective arguments that took them from the
    /// `record_param_comms` CPU op that launched them (older PyTorch traces).
    pub nccl_args_from_param_comms: u64,
    /// GPU kernels without `FLOPs` whose FLOPs came from the shapes of the GEMM op that
    /// launched them.
    pub kernel_flops_from_gemm_ops: u64,
    /// Ranks whose file has no `ProfilerStep#N` span.
    pub ranks_without_steps: u64,
    /// Communicators made up because the trace did not say which group an NCCL kernel ran on.
    pub synthetic_communicators: u64,
    /// Events not imported, by category (`cat`, or `ph:<ph>` when there is none).
    pub skipped: BTreeMap<String, u64>,
}

impl KinetoImportStats {
    /// What a person should know about what was not read (and why), one sentence each.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.cpu_collectives_unattributed > 0 {
            out.push(format!(
                "{} CPU-side collectives were not read: their ranks are in several process groups and the trace does not say which group each ran on (torch.profiler's Gloo spans do not name it; flare's tracer records it)",
                self.cpu_collectives_unattributed
            ));
        }
        if self.cpu_p2p_without_peer > 0 {
            out.push(format!(
                "{} CPU-side sends or receives were not read: the trace does not give their peer (the c10d call's rank argument is recorded with record_shapes=True; a transfer posted before the profiled window has no call)",
                self.cpu_p2p_without_peer
            ));
        }
        if self.cpu_launches_without_work > 0 {
            out.push(format!(
                "{} collectives were launched on the CPU but the trace holds no GPU activity: their waiting is invisible (profile with ProfilerActivity.CUDA too)",
                self.cpu_launches_without_work
            ));
        }
        if self.nccl_unrecognised > 0 {
            out.push(format!(
                "{} NCCL kernels do not say which collective they run (no arguments): read as compute",
                self.nccl_unrecognised
            ));
        }
        if self.other_comm_kernels_unknown > 0 {
            out.push(format!(
                "{} communication kernels outside NCCL (DeepEP, NVSHMEM, MSCCL++) do not say which exchange they run: read as compute",
                self.other_comm_kernels_unknown
            ));
        }
        if self.synthetic_communicators > 0 {
            out.push(format!(
                "{} made up (the trace does not say which process group some collectives ran on): collectives of one kind are matched across all ranks in order",
                match self.synthetic_communicators {
                    1 => "1 communicator was".to_string(),
                    n => format!("{n} communicators were"),
                }
            ));
        }
        out
    }
}

/// Errors reading Kineto traces. Each names the file and, where there is one, the place.
#[derive(Debug, thiserror::Error)]
pub enum KinetoError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: the gzip stream is corrupt or truncated: {source}")]
    Gzip {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: malformed JSON at line {line}, column {column}: {message}")]
    Json {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{path}: no \"traceEvents\" array: expected a PyTorch profiler (Kineto) trace, a JSON object with \"traceEvents\""
    )]
    MissingTraceEvents { path: String },
    #[error("{path}: traceEvents[{index}] (line {line}, column {column}): {what}")]
    BadEvent {
        path: String,
        index: u64,
        line: usize,
        column: usize,
        what: String,
    },
    #[error(
        "{path}: no Kineto trace files here: expected files named *.json or *.json.gz, one per rank"
    )]
    EmptyDirectory { path: String },
    #[error("no Kineto trace files were given")]
    NoFiles,
    #[error("{path}: cannot tell which rank this file holds: it has no distributedInfo.rank and {detail}")]
    NoRank { path: String, detail: String },
    #[error("rank {rank} appears in two files: {first} and {second}")]
    DuplicateRank {
        rank: u32,
        first: String,
        second: String,
    },
    #[error("{path}: distributedInfo.world_size is {found}, but {other_path} says {other}")]
    WorldSizeMismatch {
        path: String,
        found: u64,
        other_path: String,
        other: u64,
    },
    #[error("{path}: {what}")]
    Invalid { path: String, what: String },
    #[error(transparent)]
    Limit(LimitError),
}

crate::limits::limit_error_into!(KinetoError, path);

/// Reads every `*.json` / `*.json.gz` file of `dir` (not recursing), one rank per file.
pub fn read_kineto_dir(dir: &Path, opts: &KinetoOptions) -> Result<Trace, KinetoError> {
    read_kineto_dir_with_stats(dir, opts).map(|(t, _)| t)
}

/// [`read_kineto_dir`], with the import statistics.
pub fn read_kineto_dir_with_stats(
    dir: &Path,
    opts: &KinetoOptions,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    let files = list_trace_files(dir, &opts.limits)?;
    read_kineto_files_with_stats(&files, opts)
}

/// The trace files of a directory, sorted by name (at most [`Limits::max_files`]).
pub fn list_trace_files(dir: &Path, limits: &Limits) -> Result<Vec<PathBuf>, KinetoError> {
    let path = dir.display().to_string();
    let entries = std::fs::read_dir(dir).map_err(|source| KinetoError::Io {
        path: path.clone(),
        source,
    })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| KinetoError::Io {
            path: path.clone(),
            source,
        })?;
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        if name.starts_with('.') || !(name.ends_with(".json") || name.ends_with(".json.gz")) {
            continue;
        }
        if p.is_file() {
            files.push(p);
            limits::check_file_count(dir, files.len(), limits)?;
        }
    }
    if files.is_empty() {
        return Err(KinetoError::EmptyDirectory { path });
    }
    files.sort();
    Ok(files)
}

/// Reads the given files, one rank per file.
pub fn read_kineto_files(files: &[PathBuf], opts: &KinetoOptions) -> Result<Trace, KinetoError> {
    read_kineto_files_with_stats(files, opts).map(|(t, _)| t)
}

/// [`read_kineto_files`], with the import statistics. Files are parsed in parallel, one
/// thread per core.
pub fn read_kineto_files_with_stats(
    files: &[PathBuf],
    opts: &KinetoOptions,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    if files.is_empty() {
        return Err(KinetoError::NoFiles);
    }
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(files.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<Option<Result<ParsedFile, KinetoError>>> =
        (0..files.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= files.len() {
                            break;
                        }
                        out.push((i, read_one(&files[i], &opts.limits)));
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(out) => {
                    for (i, r) in out {
                        results[i] = Some(r);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    let mut parsed = Vec::with_capacity(files.len());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(r) => parsed.push(r?),
            None => {
                return Err(KinetoError::Invalid {
                    path: files[i].display().to_string(),
                    what: "internal error: the file was not parsed".into(),
                })
            }
        }
    }
    let job_id = job_id_for(files);
    assemble::assemble(parsed, opts, job_id)
}

/// Reads one trace held in memory (plain or gzip JSON). `name` stands for the file in
/// errors and, when the trace lacks `distributedInfo.rank`, gives the rank.
pub fn read_kineto_bytes(
    name: &str,
    data: &[u8],
    opts: &KinetoOptions,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    let parsed = parse_bytes(name, data, &opts.limits)?;
    let job = Path::new(name)
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| name.to_string());
    assemble::assemble(vec![parsed], opts, job)
}

fn read_one(path: &Path, limits: &Limits) -> Result<ParsedFile, KinetoError> {
    let name = path.display().to_string();
    let data = limits::read_file(path, limits)?;
    parse_bytes(&name, &data, limits)
}

fn parse_bytes(name: &str, data: &[u8], limits: &Limits) -> Result<ParsedFile, KinetoError> {
    if data.starts_with(&[0x1f, 0x8b]) {
        let out = limits::gunzip(name, data, limits).map_err(|e| match e {
            InflateError::Corrupt(source) => KinetoError::Gzip {
                path: name.to_string(),
                source,
            },
            InflateError::Limit(e) => KinetoError::Limit(e),
        })?;
        parse::parse_file(name, &out)
    } else {
        parse::parse_file(name, data)
    }
}

/// A job id for a set of per-rank files: their directory's name, or the one file's name.
pub(crate) fn job_id_for(files: &[PathBuf]) -> String {
    let first = &files[0];
    if files.len() > 1 {
        if let Some(dir) = first.parent().and_then(|p| p.file_name()) {
            return dir.to_string_lossy().to_string();
        }
    }
    first
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default()
}
