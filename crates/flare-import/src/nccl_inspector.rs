//! NCCL Inspector logs: the JSON lines that NVIDIA's NCCL Inspector profiler plugin
//! (`plugins/profiler/inspector/`, formerly `ext-profiler/inspector/`) writes, one file
//! per process named `<hostname>-pid<pid>.log`.
//!
//! # What the format holds
//!
//! Read from the writer, `inspector_json.cc` (NCCL 2.29/2.30, output format `v4.0`) and
//! `inspector.cc` (2.28, same format string): every line is one JSON object
//!
//! ```text
//! {"header":{"id":"0x<comm hash>","comm_name":"...","rank":R,"n_ranks":N,"nnodes":K},
//!  "metadata":{"inspector_output_format_version":"v4.0","git_rev":"...","rec_mechanism":"...",
//!              "dump_timestamp_us":T,"hostname":"...","pid":P},
//!  "coll_perf":{"coll":"AllReduce","coll_sn":S,"coll_msg_size_bytes":B,"coll_exec_time_us":E,
//!               "coll_timing_source":"kernel_gpu","coll_algobw_gbs":..,"coll_busbw_gbs":..,
//!               ["user_tag":"..."], ["event_trace_sn":{..}, "event_trace_ts":{..}]}}
//! ```
//!
//! or the same with `"p2p_perf"` (`p2p`, `p2p_sn`, `p2p_peer`, `p2p_msg_size_bytes`,
//! `p2p_exec_time_us`, ...; NCCL 2.30). `comm_name` appeared in 2.30, `user_tag` in 2.29.x,
//! `p2p_perf` in 2.30; 2.28 headers have only `id`, `rank`, `n_ranks`, `nnodes`. All are read.
//!
//! * `header.rank` is the rank *inside the communicator*; no record carries a global rank.
//!   Global ranks are derived (see [`read_inspector_files`]).
//! * Only completed operations are written (the plugin drains a ring of completed ops), so
//!   nothing is ever in flight in these logs.
//! * Times: `coll_exec_time_us` is a duration (the longest channel's kernel time, from GPU
//!   clocks when `coll_timing_source` is `kernel_gpu`). Timestamps exist only with
//!   `NCCL_INSPECTOR_DUMP_VERBOSE=1`: `event_trace_ts` holds host wall-clock microseconds
//!   (`gettimeofday`) of the collective's start/stop events (the enqueue on the host) and,
//!   per channel, of the kernel start/stop events. An op then starts (arrives) at its first
//!   channel's `kernel_start_ts` and ends at the last `kernel_stop_ts`; its issue time is
//!   `coll_start_ts`. Without kernel events it starts at `coll_start_ts` and lasts the exec
//!   time. Without `event_trace_ts` the only timestamp is `dump_timestamp_us`, when the
//!   record was written (after completion, possibly much later): the op is placed to end
//!   there, which keeps durations but not arrivals; the trace's `meta.detail` says so.
//! * P2P: `p2p_sn` is the plugin's own per-communicator counter on each process, so it does
//!   not match across ranks; P2P ops are numbered per peer pair instead (see below).
//! * `inf`/`nan` bandwidths (printed by `%lf` as bare words or `"nan"`) are tolerated.
//!
//! # Mapping
//!
//! One process (hostname + pid) is one rank. A collective becomes a sync op of the kind
//! named by `coll`, on the communicator of its comm hash, with `seq = coll_sn` and the
//! message size as amount. Communicators: one per comm hash, members the global ranks
//! that report it, in the order of their communicator rank. A P2P op goes on a two-member
//! communicator per (comm hash, peer pair), with `seq` the op's ordinal in its direction
//! on that pair (`3 * ordinal + direction`), so that the k-th send from A to B meets B's
//! k-th receive from A. Iterations: the logs have no step markers, so every op is in
//! iteration 0 unless [`NcclOptions::iteration_window_ns`] cuts time into windows of that
//! length from the first op.

use crate::limits::{self, LimitError, Limits};
use flare_model::trace::NameTable;
use flare_model::{
    ClusterTopology, Communicator, GroupKind, IterationSpan, JobInfo, Op, OpKind, RankTrace, Trace,
    TraceMeta,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// How to place ranks on a cluster, how to cut time into iterations, and how much the
/// import may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclOptions {
    pub gpus_per_node: u32,
    pub nodes_per_pod: u32,
    /// `None`: every op in iteration 0. `Some(w)`: iteration `k` holds the ops that start
    /// in `[t0 + k*w, t0 + (k+1)*w)`, `t0` the first op's start.
    pub iteration_window_ns: Option<u64>,
    pub limits: Limits,
}

impl Default for NcclOptions {
    fn default() -> Self {
        NcclOptions {
            gpus_per_node: 8,
            nodes_per_pod: 32,
            iteration_window_ns: None,
            limits: Limits::default(),
        }
    }
}

impl From<&crate::kineto::KinetoOptions> for NcclOptions {
    fn from(k: &crate::kineto::KinetoOptions) -> Self {
        NcclOptions {
            gpus_per_node: k.gpus_per_node,
            nodes_per_pod: k.nodes_per_pod,
            iteration_window_ns: None,
            limits: k.limits,
        }
    }
}

/// Errors reading NCCL Inspector logs. Each names the file and, where there is one, the line.
#[derive(Debug, thiserror::Error)]
pub enum InspectorError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line}, column {column}: malformed JSON: {message} (expected one NCCL Inspector JSON object per line)")]
    Json {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: line {line}: {what}")]
    Record {
        path: String,
        line: usize,
        what: String,
    },
    #[error("{path}: no NCCL Inspector logs here: expected files named <host>-pid<pid>.log (or *.json / *.jsonl)")]
    EmptyDirectory { path: String },
    #[error("no NCCL Inspector files were given")]
    NoFiles,
    #[error("{path}: no collective or P2P records: expected lines with \"header\" and \"coll_perf\" or \"p2p_perf\"")]
    NoRecords { path: String },
    #[error("{0}")]
    Assemble(String),
    #[error(transparent)]
    Limit(LimitError),
}

crate::limits::limit_error_into!(InspectorError, path);

/// Whether the start of a file looks like an NCCL Inspector log.
pub fn sniff(first_bytes: &[u8]) -> bool {
    let s = String::from_utf8_lossy(first_bytes);
    let t = s.trim_start();
    t.starts_with('{')
        && t.contains("\"header\"")
        && (t.contains("inspector_output_format_version")
            || t.contains("\"coll_perf\"")
            || t.contains("\"p2p_perf\""))
}

/// Reads the Inspector logs of a directory (`*.log`, `*.json`, `*.jsonl`; subdirectories one
/// level down too, as when each node's logs are collected into its own folder).
pub fn read_inspector_dir(dir: &Path, opts: &NcclOptions) -> Result<Trace, InspectorError> {
    let files = list_files(dir, &["log", "json", "jsonl"], &opts.limits).map_err(|e| match e {
        ListError::Io(path, source) => InspectorError::Io { path, source },
        ListError::Empty(path) => InspectorError::EmptyDirectory { path },
        ListError::Limit(e) => InspectorError::Limit(e),
    })?;
    read_inspector_files(&files, opts)
}

/// Reads the given Inspector logs.
///
/// Global ranks: records carry only communicator ranks. When one communicator is reported
/// by every process with distinct ranks (the world communicator, usually), its ranks are the
/// global ranks, and its `n_ranks` the world size (ranks without a log are missing ranks).
/// Otherwise processes are numbered in the order of (hostname, pid), and `meta.detail` says
/// so. A process that reports two ranks of one communicator drives several GPUs; that is
/// accepted only when it reports a single communicator (each rank is then its own GPU).
pub fn read_inspector_files(
    files: &[PathBuf],
    opts: &NcclOptions,
) -> Result<Trace, InspectorError> {
    if files.is_empty() {
        return Err(InspectorError::NoFiles);
    }
    let mut procs: BTreeMap<String, RawProcess> = BTreeMap::new();
    let mut notes = Notes::default();
    for f in files {
        let path = f.display().to_string();
        let data = limits::read_file(f, &opts.limits)?;
        parse_inspector(&path, &data, &mut procs, &mut notes)?;
    }
    if procs.values().all(|p| p.ops.is_empty()) {
        return Err(InspectorError::NoRecords {
            path: files[0].display().to_string(),
        });
    }
    let procs: Vec<RawProcess> = procs.into_values().collect();
    assemble(
        procs,
        opts,
        "nccl-inspector",
        crate::kineto::job_id_for(files),
        notes,
    )
    .map_err(InspectorError::Assemble)
}

/// Parses one log held in memory into the processes it reports (public for fuzzing).
pub fn read_inspector_bytes(
    name: &str,
    data: &[u8],
    opts: &NcclOptions,
) -> Result<Trace, InspectorError> {
    let mut procs = BTreeMap::new();
    let mut notes = Notes::default();
    parse_inspector(name, data, &mut procs, &mut notes)?;
    if procs.values().all(|p: &RawProcess| p.ops.is_empty()) {
        return Err(InspectorError::NoRecords { path: name.into() });
    }
    assemble(
        procs.into_values().collect(),
        opts,
        "nccl-inspector",
        name.to_string(),
        notes,
    )
    .map_err(InspectorError::Assemble)
}

fn parse_inspector(
    path: &str,
    data: &[u8],
    procs: &mut BTreeMap<String, RawProcess>,
    notes: &mut Notes,
) -> Result<(), InspectorError> {
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let last_nonempty = lines
        .iter()
        .rposition(|l| !l.iter().all(|b| b.is_ascii_whitespace()));
    for (i, raw) in lines.iter().enumerate() {
        let line = i + 1;
        if raw.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let v: Value = match serde_json::from_slice(raw) {
            Ok(v) => v,
            Err(e) => {
                // `%lf` prints inf as a bare word; quote bare words and retry.
                let fixed = crate::nccl_profiler::quote_bare_words(raw);
                match serde_json::from_slice(&fixed) {
                    Ok(v) => v,
                    Err(_) if e.is_eof() && Some(i) == last_nonempty => {
                        notes.add(format!("{path}: last line {line} is truncated, skipped"));
                        continue;
                    }
                    Err(_) => {
                        return Err(InspectorError::Json {
                            path: path.into(),
                            line,
                            column: e.column(),
                            message: e.to_string(),
                        })
                    }
                }
            }
        };
        let rec_err = |what: String| InspectorError::Record {
            path: path.into(),
            line,
            what,
        };
        let Some(obj) = v.as_object() else {
            return Err(rec_err("expected a JSON object".into()));
        };
        let (perf, is_p2p) = match (obj.get("coll_perf"), obj.get("p2p_perf")) {
            (Some(p), _) => (p, false),
            (None, Some(p)) => (p, true),
            (None, None) => {
                notes.count("records without coll_perf or p2p_perf skipped");
                continue;
            }
        };
        let header = obj
            .get("header")
            .and_then(Value::as_object)
            .ok_or_else(|| rec_err("no \"header\" object".into()))?;
        let comm = match header.get("id") {
            Some(Value::String(s)) => parse_hash(s),
            Some(Value::Number(n)) => n.as_u64(),
            _ => None,
        }
        .ok_or_else(|| {
            rec_err("header.id: expected the communicator hash, e.g. \"0x7f8c496ae9f661\"".into())
        })?;
        let comm_rank = get_u32(header.get("rank"))
            .ok_or_else(|| rec_err("header.rank: expected a non-negative integer".into()))?;
        let n_ranks = get_u32(header.get("n_ranks"));
        let comm_name = header
            .get("comm_name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && *s != "unknown")
            .map(str::to_string);
        let meta = obj.get("metadata").and_then(Value::as_object);
        let host = meta.and_then(|m| m.get("hostname")).and_then(Value::as_str);
        let pid = meta.and_then(|m| m.get("pid")).and_then(Value::as_u64);
        let key = match (host, pid) {
            (Some(h), Some(p)) => format!("{h}/pid{p:010}"),
            _ => path.to_string(),
        };
        let dump_us = meta
            .and_then(|m| m.get("dump_timestamp_us"))
            .and_then(Value::as_u64);
        let perf = perf
            .as_object()
            .ok_or_else(|| rec_err("coll_perf / p2p_perf: expected an object".into()))?;
        let pre = if is_p2p { "p2p" } else { "coll" };
        let func = perf
            .get(pre)
            .and_then(Value::as_str)
            .ok_or_else(|| rec_err(format!("{pre}_perf.{pre}: expected the operation name")))?;
        let Some(kind) = kind_of(func) else {
            notes.count(&format!("{func} records skipped (no matching op kind)"));
            continue;
        };
        let seq = perf.get(&format!("{pre}_sn")).and_then(Value::as_u64);
        let bytes = perf
            .get(&format!("{pre}_msg_size_bytes"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let exec_us = perf
            .get(&format!("{pre}_exec_time_us"))
            .and_then(Value::as_u64)
            .ok_or_else(|| {
                rec_err(format!(
                    "{pre}_perf.{pre}_exec_time_us: expected microseconds"
                ))
            })?;
        let peer = if is_p2p {
            Some(
                get_u32(perf.get("p2p_peer"))
                    .ok_or_else(|| rec_err("p2p_perf.p2p_peer: expected the peer's rank".into()))?,
            )
        } else {
            None
        };
        let ts = perf.get("event_trace_ts").and_then(Value::as_object);
        let us = |v: Option<&Value>| v.and_then(Value::as_u64).filter(|&t| t > 0);
        let mut kstart: Option<u64> = None;
        let mut kend: Option<u64> = None;
        let mut op_start = None;
        if let Some(ts) = ts {
            op_start = us(ts.get(&format!("{pre}_start_ts")));
            if let Some(evs) = ts.get("kernel_events").and_then(Value::as_array) {
                for ev in evs {
                    let s = us(ev.get("kernel_start_ts"));
                    let e = us(ev.get("kernel_stop_ts"));
                    if let Some(s) = s {
                        kstart = Some(kstart.map_or(s, |k| k.min(s)));
                        if let Some(e) = e.filter(|&e| e >= s) {
                            kend = Some(kend.map_or(e, |k| k.max(e)));
                        }
                    }
                }
            }
        }
        let (start_us, end_us, issue_us) = match (kstart, op_start) {
            (Some(s), issue) => (s, kend.unwrap_or(s.saturating_add(exec_us)), issue),
            (None, Some(s)) => {
                notes.count("ops timed from the host enqueue (no kernel events)");
                (s, s.saturating_add(exec_us), Some(s))
            }
            (None, None) => {
                let Some(d) = dump_us else {
                    return Err(rec_err(
                        "no timestamps: expected event_trace_ts or metadata.dump_timestamp_us"
                            .into(),
                    ));
                };
                notes.count("ops without event_trace_ts, placed to end at their dump time (arrival times unknown; set NCCL_INSPECTOR_DUMP_VERBOSE=1)");
                (d.saturating_sub(exec_us), d, None)
            }
        };
        let ns = |u: u64| -> Result<i64, InspectorError> {
            i64::try_from(u)
                .ok()
                .and_then(|u| u.checked_mul(1000))
                .ok_or_else(|| rec_err(format!("timestamp {u} us is out of range")))
        };
        let p = procs.entry(key.clone()).or_insert_with(|| RawProcess {
            key,
            source: path.to_string(),
            ..Default::default()
        });
        let info = p.comms.entry(comm).or_default();
        if let Some(n) = n_ranks {
            info.nranks = Some(info.nranks.map_or(n, |m: u32| m.max(n)));
        }
        if comm_name.is_some() {
            info.name = comm_name;
        }
        p.ops.push(RawOp {
            comm,
            comm_rank,
            func: func.to_string(),
            kind,
            seq: if is_p2p { None } else { seq },
            peer,
            bytes,
            start_ns: ns(start_us)?,
            end_ns: Some(ns(end_us)?),
            issue_ns: issue_us.map(ns).transpose()?,
        });
    }
    Ok(())
}

fn get_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

pub(crate) fn parse_hash(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The op kind of an NCCL function name (`AllReduce`, `ncclAllReduce`, `AlltoAll`, ...).
pub(crate) fn kind_of(func: &str) -> Option<OpKind> {
    let f: String = func
        .trim()
        .trim_start_matches("nccl")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    Some(match f.as_str() {
        "allreduce" => OpKind::AllReduce,
        "allgather" | "allgatherv" => OpKind::AllGather,
        "reducescatter" => OpKind::ReduceScatter,
        "alltoall" | "all2all" | "alltoallv" => OpKind::AllToAll,
        "broadcast" | "bcast" => OpKind::Broadcast,
        "reduce" => OpKind::Reduce,
        "barrier" => OpKind::Barrier,
        "send" => OpKind::Send,
        "recv" => OpKind::Recv,
        "sendrecv" => OpKind::SendRecv,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------
// Shared by the Inspector and profiler-plugin readers: from per-process ops keyed by comm
// hash and communicator rank to a `Trace`.

/// One op as a reader found it; times in ns on one clock for the whole job.
#[derive(Debug, Clone)]
pub(crate) struct RawOp {
    pub comm: u64,
    pub comm_rank: u32,
    pub func: String,
    pub kind: OpKind,
    /// Collectives: NCCL's sequence number; P2P: `None` (numbered per pair here).
    pub seq: Option<u64>,
    /// P2P: the peer's rank in `comm`.
    pub peer: Option<u32>,
    pub bytes: u64,
    pub start_ns: i64,
    /// `None`: in flight.
    pub end_ns: Option<i64>,
    pub issue_ns: Option<i64>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct CommInfo {
    pub nranks: Option<u32>,
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct RawProcess {
    /// Orders processes when no communicator gives global ranks (host/pid).
    pub key: String,
    /// A file it came from, for messages.
    pub source: String,
    pub ops: Vec<RawOp>,
    pub comms: BTreeMap<u64, CommInfo>,
}

/// Notes for `meta.detail`: counted kinds of approximations and skips.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    counts: BTreeMap<String, u64>,
    lines: Vec<String>,
}

impl Notes {
    pub fn count(&mut self, what: &str) {
        *self.counts.entry(what.to_string()).or_default() += 1;
    }
    pub fn add(&mut self, line: String) {
        if self.lines.len() < 32 {
            self.lines.push(line);
        }
    }
    fn render(&self) -> String {
        let mut out: Vec<String> = self.lines.clone();
        out.extend(self.counts.iter().map(|(k, n)| format!("{n} {k}")));
        out.join("; ")
    }
}

struct Device {
    source: String,
    key: String,
    ops: Vec<RawOp>,
    comm_ranks: BTreeMap<u64, u32>,
}

pub(crate) fn assemble(
    procs: Vec<RawProcess>,
    opts: &NcclOptions,
    source: &str,
    job_id: String,
    mut notes: Notes,
) -> Result<Trace, String> {
    // Processes to devices (GPUs).
    let mut comm_info: BTreeMap<u64, CommInfo> = BTreeMap::new();
    let mut devices: Vec<Device> = Vec::new();
    for p in procs {
        for (h, i) in &p.comms {
            let e = comm_info.entry(*h).or_default();
            if let Some(n) = i.nranks {
                e.nranks = Some(e.nranks.map_or(n, |m| m.max(n)));
            }
            if i.name.is_some() {
                e.name = i.name.clone();
            }
        }
        let mut ranks_by_comm: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
        for o in &p.ops {
            ranks_by_comm.entry(o.comm).or_default().insert(o.comm_rank);
        }
        let multi = ranks_by_comm.iter().find(|(_, r)| r.len() > 1);
        match multi {
            None => {
                let comm_ranks = ranks_by_comm
                    .iter()
                    .filter_map(|(h, r)| r.iter().next().map(|&r| (*h, r)))
                    .collect();
                devices.push(Device {
                    source: p.source,
                    key: p.key,
                    ops: p.ops,
                    comm_ranks,
                });
            }
            Some((h, r)) if ranks_by_comm.len() == 1 => {
                let h = *h;
                for &rank in r {
                    devices.push(Device {
                        source: p.source.clone(),
                        key: format!("{}/{rank:08}", p.key),
                        ops: p
                            .ops
                            .iter()
                            .filter(|o| o.comm_rank == rank)
                            .cloned()
                            .collect(),
                        comm_ranks: [(h, rank)].into_iter().collect(),
                    });
                }
            }
            Some((h, r)) => {
                return Err(format!(
                    "{}: process {} reports ranks {:?} of communicator {h:#x} and other communicators too: it drives several GPUs, and which GPU ran which op cannot be told",
                    p.source, p.key, r
                ));
            }
        }
    }
    if devices.is_empty() {
        return Err("no ops in the input".into());
    }
    devices.sort_by(|a, b| a.key.cmp(&b.key));
    // Members of each comm hash: (comm rank, device).
    let mut members: BTreeMap<u64, Vec<(u32, usize)>> = BTreeMap::new();
    for (d, dev) in devices.iter().enumerate() {
        for (h, r) in &dev.comm_ranks {
            members.entry(*h).or_default().push((*r, d));
        }
    }
    for (h, m) in members.iter_mut() {
        m.sort_unstable();
        for w in m.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(format!(
                    "rank {} of communicator {h:#x} is reported by two processes: {} ({}) and {} ({})",
                    w[0].0, devices[w[0].1].key, devices[w[0].1].source, devices[w[1].1].key, devices[w[1].1].source
                ));
            }
        }
    }
    let declared = |h: u64, m: &[(u32, usize)]| {
        comm_info
            .get(&h)
            .and_then(|i| i.nranks)
            .unwrap_or(0)
            .max(m.len() as u32)
    };
    // Anchor: the largest communicator every device is in.
    let n_dev = devices.len();
    let anchor = members
        .iter()
        .filter(|(h, m)| m.len() == n_dev && m.iter().all(|&(r, _)| r < declared(**h, m)))
        .max_by_key(|(h, m)| (declared(**h, m), std::cmp::Reverse(**h)))
        .map(|(h, m)| (*h, declared(*h, m)));
    let mut global = vec![0u32; n_dev];
    let world: u32;
    match anchor {
        Some((h, n)) => {
            for &(r, d) in &members[&h] {
                global[d] = r;
            }
            world = n;
            notes.add(format!(
                "global ranks are the ranks in communicator {h:#x}, which every process reports"
            ));
        }
        None => {
            for (d, g) in global.iter_mut().enumerate() {
                *g = d as u32;
            }
            world = n_dev as u32;
            if n_dev > 1 {
                notes.add("no communicator spans every process: global ranks numbered in the order of host and pid".into());
            }
        }
    }
    if world as u64 > crate::kineto::MAX_WORLD_SIZE {
        return Err(format!("world size {world} is too large"));
    }
    let world_comm = anchor.map(|a| a.0);
    // Communicators.
    let mut comms: Vec<Communicator> = Vec::new();
    let mut comm_id: HashMap<u64, u32> = HashMap::new();
    let mut rank_of: HashMap<(u64, u32), u32> = HashMap::new();
    for (h, m) in &members {
        let mut mem: Vec<u32> = m.iter().map(|&(_, d)| global[d]).collect();
        for &(r, d) in m {
            rank_of.insert((*h, r), global[d]);
        }
        let decl = declared(*h, m);
        if Some(*h) == world_comm {
            mem = (0..world).collect();
        } else if decl as usize > m.len() {
            notes.add(format!(
                "communicator {h:#x} has {decl} ranks but only {} report it; the others are unknown",
                m.len()
            ));
        }
        let id = comms.len() as u32;
        let is_world = mem.len() as u32 == world && world > 1;
        let label = match comm_info.get(h).and_then(|i| i.name.clone()) {
            Some(n) => format!("{n} ({h:#x})"),
            None => format!("{h:#x}"),
        };
        comms.push(Communicator {
            id,
            kind: if is_world {
                GroupKind::World
            } else {
                GroupKind::Other
            },
            members: mem,
            label,
        });
        comm_id.insert(*h, id);
    }
    // Ops.
    let mut names = NameTable::default();
    let mut pair_comm: HashMap<(u64, u32, u32), u32> = HashMap::new();
    let mut per_rank: Vec<(u32, Vec<Op>)> = Vec::with_capacity(n_dev);
    let mut t0 = i64::MAX;
    for (d, dev) in devices.iter_mut().enumerate() {
        let me = global[d];
        dev.ops.sort_by_key(|o| o.start_ns);
        let mut ordinal: HashMap<(u32, u8), u32> = HashMap::new();
        let mut coll_ordinal: HashMap<u32, u32> = HashMap::new();
        let mut seen: BTreeSet<(u32, u32)> = BTreeSet::new();
        let mut ops = Vec::with_capacity(dev.ops.len());
        for o in &dev.ops {
            let Some(&cid) = comm_id.get(&o.comm) else {
                continue;
            };
            let (comm, seq, peer) = if o.kind.is_p2p() {
                let Some(&pg) = o.peer.and_then(|p| rank_of.get(&(o.comm, p))) else {
                    notes.count("P2P ops whose peer reported nothing, skipped");
                    continue;
                };
                if pg == me {
                    notes.count("P2P ops with themselves, skipped");
                    continue;
                }
                let (lo, hi) = (me.min(pg), me.max(pg));
                let pc = *pair_comm.entry((o.comm, lo, hi)).or_insert_with(|| {
                    let id = comms.len() as u32;
                    comms.push(Communicator {
                        id,
                        kind: GroupKind::Other,
                        members: vec![lo, hi],
                        label: format!("p2p {:#x} {lo}-{hi}", o.comm),
                    });
                    id
                });
                let from_lo = match o.kind {
                    OpKind::Send => me == lo,
                    _ => pg == lo,
                };
                let dir = if o.kind == OpKind::SendRecv {
                    2
                } else if from_lo {
                    0
                } else {
                    1
                };
                let k = ordinal.entry((pc, dir)).or_default();
                let seq = k.saturating_mul(3).saturating_add(dir as u32);
                *k += 1;
                (pc, seq, pg)
            } else {
                let seq = match o.seq {
                    Some(s) => u32::try_from(s).unwrap_or(u32::MAX),
                    None => {
                        let k = coll_ordinal.entry(cid).or_default();
                        *k += 1;
                        *k - 1
                    }
                };
                (cid, seq, Op::NO_PEER)
            };
            if !seen.insert((comm, seq)) {
                notes.count("duplicate (communicator, seq) ops on one rank, skipped");
                continue;
            }
            t0 = t0.min(o.start_ns);
            ops.push(Op {
                kind: o.kind,
                name: names.intern(&o.func),
                iteration: 0,
                comm,
                seq,
                peer,
                start_ns: o.start_ns,
                end_ns: o.end_ns.map_or(Op::IN_FLIGHT, |e| e.max(o.start_ns)),
                issue_ns: o.issue_ns.unwrap_or(Op::UNKNOWN),
                amount: o.bytes,
            });
        }
        per_rank.push((me, ops));
    }
    if t0 == i64::MAX {
        t0 = 0;
    }
    let w = opts.iteration_window_ns.filter(|&w| w > 0);
    let mut ranks = Vec::with_capacity(per_rank.len());
    for (rank, mut ops) in per_rank {
        let mut spans: BTreeMap<u32, (i64, bool)> = BTreeMap::new();
        for o in ops.iter_mut() {
            o.iteration = match w {
                Some(w) => u32::try_from((o.start_ns.saturating_sub(t0).max(0) as u64) / w)
                    .unwrap_or(u32::MAX),
                None => 0,
            };
            let e = spans.entry(o.iteration).or_insert((i64::MIN, false));
            match o.end() {
                Some(end) => e.0 = e.0.max(end),
                None => e.1 = true,
            }
        }
        ops.sort_by_key(|o| o.start_ns);
        let iterations = spans
            .into_iter()
            .map(|(it, (end, open))| IterationSpan {
                iteration: it,
                start_ns: match w {
                    Some(w) => t0.saturating_add((it as i64).saturating_mul(w as i64)),
                    None => t0,
                },
                end_ns: (!open && end != i64::MIN).then_some(end),
            })
            .collect();
        ranks.push(RankTrace {
            rank,
            ops,
            iterations,
        });
    }
    ranks.sort_by_key(|r| r.rank);
    let present: BTreeSet<u32> = ranks.iter().map(|r| r.rank).collect();
    let missing_ranks = (0..world).filter(|r| !present.contains(r)).collect();
    Ok(Trace {
        meta: TraceMeta {
            source: source.to_string(),
            detail: notes.render(),
            missing_ranks,
            cpu_compute: false,
            notes: Vec::new(),
            host_calls: Default::default(),
        },
        job: JobInfo {
            job_id,
            world_size: world,
            cluster: ClusterTopology::for_world(world, opts.gpus_per_node, opts.nodes_per_pod),
            parallel: None,
            microbatches: None,
        },
        communicators: comms,
        names: names.names,
        ranks,
    })
}

pub(crate) enum ListError {
    Io(String, std::io::Error),
    Empty(String),
    Limit(LimitError),
}

/// Files of `dir` and of its direct subdirectories with one of the extensions, sorted (at
/// most [`Limits::max_files`]).
pub(crate) fn list_files(
    dir: &Path,
    exts: &[&str],
    limits: &Limits,
) -> Result<Vec<PathBuf>, ListError> {
    let mut files = Vec::new();
    collect(dir, exts, 1, &mut files, (dir, limits))?;
    if files.is_empty() {
        return Err(ListError::Empty(dir.display().to_string()));
    }
    files.sort();
    Ok(files)
}

fn collect(
    dir: &Path,
    exts: &[&str],
    depth: u32,
    out: &mut Vec<PathBuf>,
    top: (&Path, &Limits),
) -> Result<(), ListError> {
    let path = dir.display().to_string();
    let entries = std::fs::read_dir(dir).map_err(|e| ListError::Io(path.clone(), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ListError::Io(path.clone(), e))?;
        let p = entry.path();
        let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
        if name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            if depth > 0 {
                collect(&p, exts, depth - 1, out, top)?;
            }
        } else if p.is_file() && exts.iter().any(|e| name.ends_with(&format!(".{e}"))) {
            out.push(p);
            limits::check_file_count(top.0, out.len(), top.1).map_err(ListError::Limit)?;
        }
    }
    Ok(())
}
