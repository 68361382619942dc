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
//!   and counted in [`KinetoImportStats::nccl_unrecognised`].
//! * Other kernels become [`OpKind::Compute`] ops named after the kernel, with `FLOPs`
//!   as the amount when present.
//! * `cpu_op` / `user_annotation` spans whose names say DataLoader, gc, optimizer or
//!   checkpoint become host ops (a span nested in another of the same kind is merged into
//!   it and counted in [`KinetoImportStats::nested_host_spans`]).
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

mod names;
mod parse;
mod write;

pub use write::{write_kineto_dir, write_kineto_rank, KinetoWriteStats};

use flare_model::trace::NameTable;
use flare_model::{
    ClusterTopology, Communicator, GroupKind, IterationSpan, JobInfo, Op, OpKind, RankTrace,
    Trace, TraceMeta,
};
use names::RankList;
use parse::{NcclArgs, ParsedFile, PgConfig};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest world size accepted, to keep a corrupt `world_size` from allocating
/// gigabytes for the list of missing ranks.
pub const MAX_WORLD_SIZE: u64 = 1 << 22;

/// How to place the ranks of an imported trace on a cluster (Kineto files do not say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KinetoOptions {
    pub gpus_per_node: u32,
    pub nodes_per_pod: u32,
}

impl Default for KinetoOptions {
    fn default() -> Self {
        KinetoOptions {
            gpus_per_node: 8,
            nodes_per_pod: 32,
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
    /// Ranks whose file has no `ProfilerStep#N` span.
    pub ranks_without_steps: u64,
    /// Communicators made up because the trace did not say which group an NCCL kernel ran on.
    pub synthetic_communicators: u64,
    /// Events not imported, by category (`cat`, or `ph:<ph>` when there is none).
    pub skipped: BTreeMap<String, u64>,
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
}

/// Reads every `*.json` / `*.json.gz` file of `dir` (not recursing), one rank per file.
pub fn read_kineto_dir(dir: &Path, opts: &KinetoOptions) -> Result<Trace, KinetoError> {
    read_kineto_dir_with_stats(dir, opts).map(|(t, _)| t)
}

/// [`read_kineto_dir`], with the import statistics.
pub fn read_kineto_dir_with_stats(
    dir: &Path,
    opts: &KinetoOptions,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    let files = list_trace_files(dir)?;
    read_kineto_files_with_stats(&files, opts)
}

/// The trace files of a directory, sorted by name.
pub fn list_trace_files(dir: &Path) -> Result<Vec<PathBuf>, KinetoError> {
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
                        out.push((i, read_one(&files[i])));
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
    assemble(parsed, opts, job_id)
}

/// Reads one trace held in memory (plain or gzip JSON). `name` stands for the file in
/// errors and, when the trace lacks `distributedInfo.rank`, gives the rank.
pub fn read_kineto_bytes(
    name: &str,
    data: &[u8],
    opts: &KinetoOptions,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    let parsed = parse_bytes(name, data)?;
    let job = Path::new(name)
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| name.to_string());
    assemble(vec![parsed], opts, job)
}

fn read_one(path: &Path) -> Result<ParsedFile, KinetoError> {
    let name = path.display().to_string();
    let data = std::fs::read(path).map_err(|source| KinetoError::Io {
        path: name.clone(),
        source,
    })?;
    parse_bytes(&name, &data)
}

fn parse_bytes(name: &str, data: &[u8]) -> Result<ParsedFile, KinetoError> {
    if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(data.len().saturating_mul(8).min(1 << 30));
        flate2::read::MultiGzDecoder::new(data)
            .read_to_end(&mut out)
            .map_err(|source| KinetoError::Gzip {
                path: name.to_string(),
                source,
            })?;
        parse::parse_file(name, &out)
    } else {
        parse::parse_file(name, data)
    }
}

fn job_id_for(files: &[PathBuf]) -> String {
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

/// Identity of a communicator across files.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct CommKey {
    name: String,
    members: Vec<u32>,
}

#[derive(Debug, Default)]
struct CommInfo {
    desc: Option<String>,
    kind_hint: Option<GroupKind>,
    synthetic: bool,
}

/// Turns parsed files into one trace.
fn assemble(
    files: Vec<ParsedFile>,
    opts: &KinetoOptions,
    job_id: String,
) -> Result<(Trace, KinetoImportStats), KinetoError> {
    let mut stats = KinetoImportStats {
        files: files.len(),
        ..Default::default()
    };

    // Ranks and world size.
    let mut ranks: Vec<u32> = Vec::with_capacity(files.len());
    let mut by_rank: HashMap<u32, usize> = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        let rank = match f.rank {
            Some(r) => u32::try_from(r).map_err(|_| KinetoError::Invalid {
                path: f.path.clone(),
                what: format!("distributedInfo.rank is {r}, expected a rank below 2^32"),
            })?,
            None => {
                let file_name = Path::new(&f.path)
                    .file_name()
                    .map(|s| s.to_string_lossy().to_string())
                    .unwrap_or_default();
                names::rank_from_file_name(&file_name).map_err(|detail| KinetoError::NoRank {
                    path: f.path.clone(),
                    detail,
                })?
            }
        };
        if let Some(&j) = by_rank.get(&rank) {
            return Err(KinetoError::DuplicateRank {
                rank,
                first: files[j].path.clone(),
                second: f.path.clone(),
            });
        }
        by_rank.insert(rank, i);
        ranks.push(rank);
    }
    let mut world: Option<(u64, usize)> = None;
    for (i, f) in files.iter().enumerate() {
        if let Some(w) = f.world_size {
            match world {
                Some((w0, j)) if w0 != w => {
                    return Err(KinetoError::WorldSizeMismatch {
                        path: f.path.clone(),
                        found: w,
                        other_path: files[j].path.clone(),
                        other: w0,
                    })
                }
                None => world = Some((w, i)),
                _ => {}
            }
        }
    }
    let max_rank = ranks.iter().copied().max().unwrap_or(0) as u64;
    let world_size = match world {
        Some((w, j)) => {
            if w == 0 || w > MAX_WORLD_SIZE {
                return Err(KinetoError::Invalid {
                    path: files[j].path.clone(),
                    what: format!(
                        "distributedInfo.world_size is {w}, expected 1 to {MAX_WORLD_SIZE}"
                    ),
                });
            }
            w
        }
        None => inferred_world(&files, max_rank),
    };
    if world_size > MAX_WORLD_SIZE {
        return Err(KinetoError::Invalid {
            path: files[0].path.clone(),
            what: format!(
                "the files imply a world of {world_size} ranks (no distributedInfo.world_size), more than the {MAX_WORLD_SIZE} supported"
            ),
        });
    }
    for (f, &r) in files.iter().zip(&ranks) {
        if r as u64 >= world_size {
            return Err(KinetoError::Invalid {
                path: f.path.clone(),
                what: format!("rank {r} is not below the world size {world_size}"),
            });
        }
    }
    let world_size = world_size as u32;
    let mut present: Vec<u32> = ranks.clone();
    present.sort_unstable();

    // Names.
    let mut names = NameTable::default();
    let name_maps: Vec<Vec<u32>> = files
        .iter()
        .map(|f| f.names.names.iter().map(|n| names.intern(n)).collect())
        .collect();

    // Communicators: those pg_config lists, then those the kernels name.
    let mut comms: HashMap<CommKey, CommInfo> = HashMap::new();
    let mut pg_by_name: HashMap<String, CommKey> = HashMap::new();
    for f in &files {
        for pg in &f.pg_config {
            if let Some(members) = pg_members(pg, world_size) {
                check_members(&members, world_size, &f.path, "distributedInfo.pg_config")?;
                let key = CommKey {
                    name: pg.name.clone(),
                    members,
                };
                let info = comms.entry(key.clone()).or_default();
                if info.desc.is_none() {
                    info.desc = pg.desc.clone();
                }
                if info.kind_hint.is_none() {
                    info.kind_hint = pg
                        .kind_hint
                        .as_deref()
                        .and_then(names::group_kind_from_text)
                        .or_else(|| pg.desc.as_deref().and_then(names::group_kind_from_text));
                }
                pg_by_name.entry(pg.name.clone()).or_insert(key);
            }
        }
    }

    // Per kernel: its kind and communicator key.
    struct SyncInfo {
        kind: OpKind,
        key: CommKey,
    }
    let mut sync_infos: Vec<Vec<Option<SyncInfo>>> = Vec::with_capacity(files.len());
    for f in &files {
        let mut per = Vec::with_capacity(f.kernels.len());
        for k in &f.kernels {
            let Some(args) = k.nccl.as_deref() else {
                per.push(None);
                continue;
            };
            let kernel_name = &f.names.names[k.name as usize];
            let kind = args
                .collective
                .as_deref()
                .and_then(names::kind_from_collective)
                .or_else(|| names::kind_from_kernel(kernel_name));
            let Some(kind) = kind else {
                stats.nccl_unrecognised += 1;
                per.push(None);
                continue;
            };
            let (key, synthetic) = resolve_comm(args, kind, f, &pg_by_name, world_size, &present);
            let where_ = format!("traceEvents[{}] (\"{kernel_name}\")", k.index);
            check_members(&key.members, world_size, &f.path, &where_)?;
            let info = comms.entry(key.clone()).or_default();
            info.synthetic |= synthetic;
            if info.desc.is_none() {
                info.desc = args.pg_desc.clone();
            }
            if info.kind_hint.is_none() {
                info.kind_hint = args.pg_desc.as_deref().and_then(names::group_kind_from_text);
            }
            per.push(Some(SyncInfo { kind, key }));
        }
        sync_infos.push(per);
    }

    // Communicator ids: numeric process group names in order, then other names, then
    // synthetic ones; ties by member list.
    let mut keys: Vec<&CommKey> = comms.keys().collect();
    keys.sort_by(|a, b| comm_order(a).cmp(&comm_order(b)));
    let mut communicators = Vec::with_capacity(keys.len());
    let mut comm_ids: HashMap<CommKey, u32> = HashMap::new();
    for key in keys {
        let info = &comms[key];
        let id = communicators.len() as u32;
        let kind = if is_world(&key.members, world_size) {
            GroupKind::World
        } else {
            info.kind_hint.unwrap_or(GroupKind::Other)
        };
        let label = match info.desc.as_deref() {
            Some(d) if !d.is_empty() && d != "undefined" => d.to_string(),
            _ if key.name.is_empty() => "unnamed process group".to_string(),
            _ if key.name.starts_with("unknown:") => key.name.clone(),
            _ => format!("pg {}", key.name),
        };
        if info.synthetic {
            stats.synthetic_communicators += 1;
        }
        communicators.push(Communicator {
            id,
            kind,
            members: key.members.clone(),
            label,
        });
        comm_ids.insert(key.clone(), id);
    }

    // Ranks.
    let mut rank_traces = Vec::with_capacity(files.len());
    for (fi, f) in files.iter().enumerate() {
        let rank = ranks[fi];
        let map = &name_maps[fi];
        stats.events += f.stats.events;
        stats.kernels += f.stats.kernels;
        stats.nccl_kernels += f.stats.nccl_kernels;
        stats.kernels_without_duration += f.stats.kernels_without_duration;
        stats.profiler_steps += f.stats.profiler_steps;
        for (cat, n) in &f.stats.skipped {
            *stats.skipped.entry(cat.clone()).or_insert(0) += n;
        }

        let mut steps = f.steps.clone();
        steps.sort_by_key(|s| s.start);
        let step_starts: Vec<i64> = steps.iter().map(|s| s.start).collect();
        let iteration_at = |t: i64| -> u32 {
            if steps.is_empty() {
                return 0;
            }
            let i = step_starts.partition_point(|&s| s <= t);
            steps[i.saturating_sub(1)].iteration
        };

        let mut ops: Vec<Op> = Vec::with_capacity(f.kernels.len() + f.hosts.len());
        let mut order: Vec<usize> = (0..f.kernels.len()).collect();
        order.sort_by_key(|&i| f.kernels[i].start);
        let mut ordinals: HashMap<u32, u32> = HashMap::new();
        for i in order {
            let k = &f.kernels[i];
            let issue = k.correlation.and_then(|c| f.launches.get(&c).copied());
            if issue.is_none() {
                stats.kernels_without_launch += 1;
            }
            let iteration = iteration_at(issue.unwrap_or(k.start));
            let mut op = Op {
                kind: OpKind::Compute,
                name: map[k.name as usize],
                iteration,
                comm: Op::NO_COMM,
                seq: 0,
                peer: Op::NO_PEER,
                start_ns: k.start,
                end_ns: k.end.unwrap_or(Op::IN_FLIGHT),
                issue_ns: issue.unwrap_or(Op::UNKNOWN),
                amount: k.flops,
            };
            if let (Some(args), Some(Some(sync))) = (k.nccl.as_deref(), sync_infos[fi].get(i)) {
                let comm = comm_ids[&sync.key];
                let ordinal = ordinals.entry(comm).or_insert(0);
                let seq = match args.seq {
                    Some(s) => u32::try_from(s).map_err(|_| KinetoError::Invalid {
                        path: f.path.clone(),
                        what: format!(
                            "traceEvents[{}]: Seq is {s}, expected a sequence number below 2^32",
                            k.index
                        ),
                    })?,
                    None => *ordinal,
                };
                *ordinal += 1;
                op.kind = sync.kind;
                op.comm = comm;
                op.seq = seq;
                op.amount = nccl_bytes(args);
                op.peer = peer_of(args, sync.kind, &communicators[comm as usize], rank, &comms[&sync.key]);
            }
            ops.push(op);
        }

        // Host phases, with nested spans of the same kind merged into their parent.
        let mut hosts = f.hosts.clone();
        hosts.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
        let mut open_end: HashMap<OpKind, i64> = HashMap::new();
        for h in hosts {
            if let Some(&end) = open_end.get(&h.kind) {
                if h.end <= end {
                    stats.nested_host_spans += 1;
                    continue;
                }
            }
            open_end.insert(h.kind, h.end);
            stats.host_ops += 1;
            ops.push(Op {
                kind: h.kind,
                name: map[h.name as usize],
                iteration: iteration_at(h.start),
                comm: Op::NO_COMM,
                seq: 0,
                peer: Op::NO_PEER,
                start_ns: h.start,
                end_ns: h.end,
                issue_ns: Op::UNKNOWN,
                amount: 0,
            });
        }
        ops.sort_by_key(|o| o.start_ns);

        let iterations: Vec<IterationSpan> = if steps.is_empty() {
            stats.ranks_without_steps += 1;
            match (ops.first(), ops.iter().filter_map(Op::end).max()) {
                (Some(first), end) => vec![IterationSpan {
                    iteration: 0,
                    start_ns: first.start_ns,
                    end_ns: end,
                }],
                (None, _) => Vec::new(),
            }
        } else {
            steps
                .iter()
                .map(|s| IterationSpan {
                    iteration: s.iteration,
                    start_ns: s.start,
                    end_ns: s.end,
                })
                .collect()
        };
        rank_traces.push(RankTrace {
            rank,
            ops,
            iterations,
        });
    }
    rank_traces.sort_by_key(|r| r.rank);

    let present_set: BTreeSet<u32> = present.iter().copied().collect();
    let missing_ranks: Vec<u32> = (0..world_size)
        .filter(|r| !present_set.contains(r))
        .collect();
    let detail = if files.len() <= 8 {
        files
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        format!("{} files, first {}", files.len(), files[0].path)
    };
    let trace = Trace {
        meta: TraceMeta {
            source: "kineto".into(),
            detail,
            missing_ranks,
        },
        job: JobInfo {
            job_id,
            world_size,
            cluster: ClusterTopology::for_world(world_size, opts.gpus_per_node, opts.nodes_per_pod),
            parallel: None,
            microbatches: None,
        },
        communicators,
        names: names.names,
        ranks: rank_traces,
    };
    Ok((trace, stats))
}

/// A world size for traces that do not state one: large enough for every rank, every
/// process group member and every group size the files mention.
fn inferred_world(files: &[ParsedFile], max_rank: u64) -> u64 {
    let mut w = max_rank + 1;
    let list_max = |l: &Option<RankList>| match l {
        Some(RankList::Complete(m)) => m.iter().map(|&r| r as u64 + 1).max().unwrap_or(0),
        _ => 0,
    };
    for f in files {
        for pg in &f.pg_config {
            w = w.max(list_max(&pg.ranks)).max(pg.size.unwrap_or(0));
        }
        for a in f.kernels.iter().filter_map(|k| k.nccl.as_deref()) {
            w = w.max(list_max(&a.pg_ranks)).max(a.group_size.unwrap_or(0));
            if let (Some(start), Some(stride), Some(size)) =
                (a.global_start, a.global_stride, a.group_size)
            {
                let last = stride
                    .checked_mul(size.saturating_sub(1))
                    .and_then(|x| x.checked_add(start));
                w = w.max(last.map_or(0, |l| l.saturating_add(1)));
            }
        }
    }
    w
}

/// Whether `members` is every rank of the world, in any order.
fn is_world(members: &[u32], world: u32) -> bool {
    if members.len() != world as usize {
        return false;
    }
    let mut seen = vec![false; world as usize];
    for &m in members {
        match seen.get_mut(m as usize) {
            Some(s) if !*s => *s = true,
            _ => return false,
        }
    }
    true
}

/// Sort key of communicators: numeric names by value, then other names, then synthetic.
fn comm_order(k: &CommKey) -> (u8, u64, &str, &[u32]) {
    if k.name.starts_with("unknown:") {
        (2, 0, &k.name, &k.members)
    } else if let Ok(n) = k.name.parse::<u64>() {
        (0, n, "", &k.members)
    } else {
        (1, 0, &k.name, &k.members)
    }
}

/// The members `pg_config` gives for a group, when it gives them all.
fn pg_members(pg: &PgConfig, world: u32) -> Option<Vec<u32>> {
    match &pg.ranks {
        Some(RankList::Complete(m)) if !m.is_empty() => Some(m.clone()),
        // The default group is sometimes listed with no ranks: a group as large as the
        // world holds every rank.
        _ if pg.size == Some(world as u64) => Some((0..world).collect()),
        _ => None,
    }
}

/// Which communicator an NCCL kernel ran on (see the module docs for the order of
/// rules), and whether Flare had to make it up.
fn resolve_comm(
    args: &NcclArgs,
    kind: OpKind,
    f: &ParsedFile,
    pg_by_name: &HashMap<String, CommKey>,
    world: u32,
    present: &[u32],
) -> (CommKey, bool) {
    match known_comm(args, f, pg_by_name, world) {
        Some(key) => (key, false),
        None => (
            CommKey {
                name: format!("unknown:{}", kind.as_str()),
                members: present.to_vec(),
            },
            true,
        ),
    }
}

/// The communicator the kernel's arguments or `pg_config` identify, if any.
fn known_comm(
    args: &NcclArgs,
    f: &ParsedFile,
    pg_by_name: &HashMap<String, CommKey>,
    world: u32,
) -> Option<CommKey> {
    let name = args.pg_name.clone().unwrap_or_default();
    // 1. The full rank list on the kernel.
    if let Some(RankList::Complete(m)) = &args.pg_ranks {
        if !m.is_empty() {
            return Some(CommKey {
                name,
                members: m.clone(),
            });
        }
    }
    // 2. The group of that name in pg_config (this file's, then any file's).
    if let Some(n) = &args.pg_name {
        let here = f
            .pg_config
            .iter()
            .find(|p| &p.name == n)
            .and_then(|p| pg_members(p, world))
            .map(|members| CommKey {
                name: n.clone(),
                members,
            });
        if let Some(key) = here.or_else(|| pg_by_name.get(n).cloned()) {
            return Some(key);
        }
    }
    // 3. A strided group: start, stride and size.
    if let (Some(start), Some(stride), Some(size)) =
        (args.global_start, args.global_stride, args.group_size)
    {
        if size >= 1 && size <= world as u64 && stride >= 1 {
            let last = stride
                .checked_mul(size - 1)
                .and_then(|x| x.checked_add(start));
            if last.is_some_and(|l| l < world as u64) {
                return Some(CommKey {
                    name,
                    members: (0..size).map(|i| (start + i * stride) as u32).collect(),
                });
            }
        }
    }
    // 4. A group as large as the world holds every rank.
    if args.group_size == Some(world as u64) {
        return Some(CommKey {
            name,
            members: (0..world).collect(),
        });
    }
    // 5. The only group of pg_config with that size (or the only group, size unknown).
    let candidates: Vec<&PgConfig> = match args.group_size {
        Some(size) => f.pg_config.iter().filter(|p| p.size == Some(size)).collect(),
        None => f.pg_config.iter().collect(),
    };
    if let [only] = candidates.as_slice() {
        if let Some(members) = pg_members(only, world) {
            return Some(CommKey {
                name: only.name.clone(),
                members,
            });
        }
    }
    None
}

fn check_members(members: &[u32], world: u32, path: &str, place: &str) -> Result<(), KinetoError> {
    let mut seen = BTreeSet::new();
    for &m in members {
        if m >= world {
            return Err(KinetoError::Invalid {
                path: path.to_string(),
                what: format!(
                    "{place}: process group lists rank {m}, but the world size is {world}"
                ),
            });
        }
        if !seen.insert(m) {
            return Err(KinetoError::Invalid {
                path: path.to_string(),
                what: format!("{place}: process group lists rank {m} twice"),
            });
        }
    }
    Ok(())
}

/// Bytes this rank sends: input elements times the element size, when both are known.
fn nccl_bytes(args: &NcclArgs) -> u64 {
    match (args.in_nelems, args.dtype.as_deref().and_then(names::dtype_bytes)) {
        (Some(n), Some(b)) => n.saturating_mul(b),
        _ => 0,
    }
}

fn peer_of(args: &NcclArgs, kind: OpKind, comm: &Communicator, rank: u32, info: &CommInfo) -> u32 {
    if !kind.is_p2p() {
        return Op::NO_PEER;
    }
    let explicit = match kind {
        OpKind::Send => args.dst_rank.or(args.src_rank),
        _ => args.src_rank.or(args.dst_rank),
    };
    if let Some(p) = explicit.and_then(|p| u32::try_from(p).ok()) {
        if p != Op::NO_PEER {
            return p;
        }
    }
    if !info.synthetic && comm.members.len() == 2 && comm.members.contains(&rank) {
        return comm.members.iter().copied().find(|&m| m != rank).unwrap_or(Op::NO_PEER);
    }
    Op::NO_PEER
}
