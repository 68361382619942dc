//! Dumps of NCCL's example profiler plugin (`plugins/profiler/example/`, formerly
//! `ext-profiler/example/`): Chrome-trace event arrays written at communicator finalize.
//!
//! # What the format holds
//!
//! Read from the writer (`print_event.cc` / `print_event.c`, `plugin.cc` / `plugin.c`):
//!
//! * Files: since NCCL 2.27 one per communicator and rank, `${NCCL_PROFILE_DUMP_FILE}_<commHash>_<rank>.json`;
//!   in 2.23-2.26 one per thread, `${NCCL_PROFILE_DUMP_FILE}-<hostname>-<tid>.txt`. Each
//!   starts with `[`, holds one event per line (`{...},`), and ends with the sentinel `{}]`.
//!   A process killed while dumping leaves a file without it.
//! * Events are Chrome async events: `ph` `"b"`/`"e"`, `cat`, `name`, `id`, `pid` (the
//!   process), `tid` (always 1) and `ts`: microseconds (`%f`) of `steady_clock` since the
//!   plugin was initialised in that process. Every process has its own zero.
//! * Events are printed as a tree, each parent's `b`, its children, then its `e`:
//!   `GROUP_API` > `KERNEL_LAUNCH`, `COLL_API` > `COLL` > `GPU` (`KernelCh`, one per
//!   channel) > `PROXY` > `NET`; `P2P_API` > `P2P` > `GPU` > ... (2.28+; before, `GROUP` >
//!   `COLL`/`P2P` > `PROXY`). The `id` is a per-category counter, except that `KernelCh`
//!   never advances its counter, so `GPU` events are tied to the `COLL`/`P2P` they are
//!   printed inside, not by id.
//! * `COLL` `b` args: `SeqNum`, `CommHash` (decimal), `Rank` (in the communicator),
//!   `Count`, `Datatype` (`"ncclFloat32"`; an enum number in 2.23), `Algorithm`,
//!   `Protocol`, `nChannels` (`nMaxChannels` before 2.27). `P2P` `b` args: `CommHash`,
//!   `Rank`, `Peer` (communicator ranks), `Count`, `Datatype`, `nChannels` (2.27+). The
//!   event `name` is the function (`AllReduce`, `Send`, ...).
//! * `GPU` `KernelCh` `b` args: `Channel`, and since 2.27 `StartGpuClk`/`StopGpuClk`, the
//!   GPU global timer (ns) when the channel's kernel started and stopped.
//! * NCCL 2.28.x prints `COLL_API`/`P2P_API`/`KERNEL_LAUNCH` args unquoted
//!   (`"datatype": ncclFloat32`, `"Stream": 0x262ca50`, `(nil)`): not JSON. Bare words are
//!   quoted before parsing ([`quote_bare_words`]).
//! * An op still running at finalize (communicator abort during a hang) is printed with
//!   the stop time of whatever last used its pool slot (0 for a fresh slot), so an `e` that
//!   is not after its `b` means in flight, as does a `b` without `e` (truncated file).
//!
//! # Mapping
//!
//! A process is (directory, `pid`): the files of one process share its clock. Ranks,
//! communicators and P2P numbering as for the Inspector ([`crate::nccl_inspector`]): global
//! ranks are the ranks of a communicator every process reports, else the order of
//! (directory, pid). `seq` is `SeqNum`; P2P ops are numbered per peer pair and direction.
//!
//! Times. GPU timing is preferred: when every process has ops with `KernelCh` GPU clocks,
//! an op starts at its first channel's `StartGpuClk` (the kernel started on this GPU, i.e.
//! the rank arrived) and ends at the last `StopGpuClk`; the global timer is comparable
//! across GPUs, unlike the per-process host clocks. Ops without GPU clocks on such a
//! process are moved onto its GPU clock by the median offset of its other ops. Otherwise
//! host times are used: start at the first `KernelCh` `b` (else the `COLL`/`P2P` `b`), end
//! at the `COLL`/`P2P` `e`, and each process's clock is shifted so that the ends of the
//! collectives it shares with already aligned processes match (median); collectives end
//! together on all members. The `COLL`/`P2P` `b` is the issue time.

use crate::limits::LimitError;
use crate::nccl_inspector::{
    assemble, kind_of, list_files, ListError, NcclOptions, Notes, RawOp, RawProcess,
};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Errors reading profiler dumps. Each names the file and the place in it.
#[derive(Debug, thiserror::Error)]
pub enum ProfilerDumpError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: line {line} (byte {offset}): {what}")]
    Syntax {
        path: String,
        line: usize,
        offset: usize,
        what: String,
    },
    #[error("{path}: line {line}: event {index}: {what}")]
    Event {
        path: String,
        line: usize,
        index: usize,
        what: String,
    },
    #[error("{path}: no NCCL profiler dumps here: expected files named <prefix>_<commHash>_<rank>.json or <prefix>-<host>-<tid>.txt")]
    EmptyDirectory { path: String },
    #[error("no NCCL profiler dump files were given")]
    NoFiles,
    #[error("{path}: no COLL or P2P events: expected an NCCL example profiler dump (a JSON array of events with \"cat\": \"COLL\" / \"P2P\")")]
    NoOps { path: String },
    #[error("{0}")]
    Assemble(String),
    #[error(transparent)]
    Limit(LimitError),
}

crate::limits::limit_error_into!(ProfilerDumpError, path);

/// Whether the start of a file looks like an NCCL example profiler dump.
pub fn sniff(first_bytes: &[u8]) -> bool {
    let s = String::from_utf8_lossy(first_bytes);
    let t = s.trim_start();
    if !t.starts_with('[') {
        return false;
    }
    let compact: String = t.chars().filter(|c| !c.is_whitespace()).collect();
    [
        "GROUP_API",
        "COLL_API",
        "P2P_API",
        "KERNEL_LAUNCH",
        "GROUP",
        "COLL",
        "P2P",
        "PROXY",
    ]
    .iter()
    .any(|c| compact.contains(&format!("\"cat\":\"{c}\"")))
        && (compact.contains("\"ph\":\"b\"") || compact.contains("\"ph\":\"e\""))
}

/// Reads the dumps of a directory (`*.json`, `*.txt`; subdirectories one level down too,
/// e.g. one per node, which also keeps equal pids of different nodes apart).
pub fn read_profiler_dump_dir(dir: &Path, opts: &NcclOptions) -> Result<Trace, ProfilerDumpError> {
    let files = list_files(dir, &["json", "txt"], &opts.limits).map_err(|e| match e {
        ListError::Io(path, source) => ProfilerDumpError::Io { path, source },
        ListError::Empty(path) => ProfilerDumpError::EmptyDirectory { path },
        ListError::Limit(e) => ProfilerDumpError::Limit(e),
    })?;
    read_profiler_dump_files(&files, opts)
}

use flare_model::Trace;

/// Reads the given dump files (any number per process).
pub fn read_profiler_dump_files(
    files: &[PathBuf],
    opts: &NcclOptions,
) -> Result<Trace, ProfilerDumpError> {
    if files.is_empty() {
        return Err(ProfilerDumpError::NoFiles);
    }
    let mut notes = Notes::default();
    let mut procs: BTreeMap<String, ProcOps> = BTreeMap::new();
    for f in files {
        let path = f.display().to_string();
        let data = crate::limits::read_file(f, &opts.limits)?;
        let dir = f
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        parse_dump(&path, &dir, &data, &mut procs, &mut notes)?;
    }
    finish(
        procs,
        opts,
        crate::kineto::job_id_for(files),
        notes,
        &files[0].display().to_string(),
    )
}

/// Reads one dump held in memory (for tests and fuzzing).
pub fn read_profiler_dump_bytes(
    name: &str,
    data: &[u8],
    opts: &NcclOptions,
) -> Result<Trace, ProfilerDumpError> {
    let mut notes = Notes::default();
    let mut procs = BTreeMap::new();
    parse_dump(name, "", data, &mut procs, &mut notes)?;
    finish(procs, opts, name.to_string(), notes, name)
}

/// One COLL or P2P event as printed, host times in µs of its process's clock.
#[derive(Debug, Clone)]
struct DumpOp {
    raw: RawOp,
    b_us: f64,
    e_us: Option<f64>,
    kernel_b_us: Option<f64>,
    gpu_start: Option<u64>,
    gpu_end: Option<u64>,
    /// A channel started on the GPU and did not stop.
    gpu_open: bool,
}

#[derive(Default)]
struct ProcOps {
    source: String,
    ops: Vec<DumpOp>,
}

fn finish(
    procs: BTreeMap<String, ProcOps>,
    opts: &NcclOptions,
    job_id: String,
    mut notes: Notes,
    first: &str,
) -> Result<Trace, ProfilerDumpError> {
    if procs.values().all(|p| p.ops.is_empty()) {
        return Err(ProfilerDumpError::NoOps { path: first.into() });
    }
    let procs: Vec<(String, ProcOps)> = procs
        .into_iter()
        .filter(|(_, p)| !p.ops.is_empty())
        .collect();
    let gpu_domain = procs.iter().all(|(_, p)| {
        p.ops
            .iter()
            .any(|o| o.gpu_start.is_some() && o.gpu_end.is_some())
    });
    let mut out: Vec<RawProcess> = Vec::with_capacity(procs.len());
    let ns = |us: f64| (us * 1000.0).round() as i64;
    if gpu_domain {
        notes.add("times from the GPU global timer (KernelCh StartGpuClk/StopGpuClk)".into());
        for (key, p) in procs {
            let mut offs: Vec<i64> = p
                .ops
                .iter()
                .filter_map(|o| {
                    o.gpu_start
                        .map(|g| (g as i64).saturating_sub(ns(o.kernel_b_us.unwrap_or(o.b_us))))
                })
                .collect();
            let off = median_i64(&mut offs).unwrap_or(0);
            let mut raw = Vec::with_capacity(p.ops.len());
            for o in p.ops {
                let mut r = o.raw;
                let cpu_start = ns(o.kernel_b_us.unwrap_or(o.b_us)).saturating_add(off);
                r.issue_ns = Some(ns(o.b_us).saturating_add(off));
                r.start_ns = o.gpu_start.map_or(cpu_start, |g| g as i64);
                r.end_ns = match o.e_us {
                    None => None,
                    Some(_) if o.gpu_open => None,
                    Some(e) => Some(o.gpu_end.map_or(ns(e).saturating_add(off), |g| g as i64)),
                };
                if o.gpu_start.is_none() {
                    notes.count("ops without GPU clocks, moved onto their process's GPU clock");
                }
                raw.push(r);
            }
            out.push(RawProcess {
                key,
                source: p.source,
                ops: raw,
                comms: BTreeMap::new(),
            });
        }
    } else {
        notes.add("times from the host clocks of the processes, aligned on collective ends".into());
        let mut host: Vec<(String, String, Vec<RawOp>)> = procs
            .into_iter()
            .map(|(key, p)| {
                let ops = p
                    .ops
                    .into_iter()
                    .map(|o| {
                        let mut r = o.raw;
                        r.issue_ns = Some(ns(o.b_us));
                        r.start_ns = ns(o.kernel_b_us.unwrap_or(o.b_us));
                        r.end_ns = o.e_us.map(ns);
                        r
                    })
                    .collect();
                (key, p.source, ops)
            })
            .collect();
        let offsets = align(&host, &mut notes);
        for ((key, source, ops), off) in host.drain(..).zip(offsets) {
            let ops = ops
                .into_iter()
                .map(|mut r| {
                    r.start_ns = r.start_ns.saturating_add(off);
                    r.end_ns = r.end_ns.map(|e| e.saturating_add(off));
                    r.issue_ns = r.issue_ns.map(|e| e.saturating_add(off));
                    r
                })
                .collect();
            out.push(RawProcess {
                key,
                source,
                ops,
                comms: BTreeMap::new(),
            });
        }
    }
    assemble(out, opts, "nccl-profiler", job_id, notes).map_err(ProfilerDumpError::Assemble)
}

fn median_i64(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// Clock offsets per process: shifts that make the ends of shared collectives meet.
fn align(procs: &[(String, String, Vec<RawOp>)], notes: &mut Notes) -> Vec<i64> {
    let ends: Vec<HashMap<(u64, u64), i64>> = procs
        .iter()
        .map(|(_, _, ops)| {
            ops.iter()
                .filter(|o| !o.kind.is_p2p())
                .filter_map(|o| Some(((o.comm, o.seq?), o.end_ns?)))
                .collect()
        })
        .collect();
    let n = procs.len();
    let mut off: Vec<Option<i64>> = vec![None; n];
    // Start from the process with the most collectives.
    let Some(first) = (0..n).max_by_key(|&i| (ends[i].len(), std::cmp::Reverse(i))) else {
        return vec![];
    };
    off[first] = Some(0);
    loop {
        let mut progressed = false;
        for q in 0..n {
            if off[q].is_some() {
                continue;
            }
            let mut diffs = Vec::new();
            for (p, op) in off.iter().enumerate() {
                let Some(o) = op else { continue };
                for (k, &e) in &ends[q] {
                    if let Some(&ep) = ends[p].get(k) {
                        diffs.push(ep.saturating_add(*o).saturating_sub(e));
                    }
                }
            }
            if let Some(m) = median_i64(&mut diffs) {
                off[q] = Some(m);
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    off.into_iter()
        .enumerate()
        .map(|(i, o)| {
            o.unwrap_or_else(|| {
                notes.add(format!(
                    "process {} shares no completed collective with the others: its clock is not aligned",
                    procs[i].0
                ));
                0
            })
        })
        .collect()
}

/// Quotes bare words outside strings (`ncclFloat32`, `0x262ca50`, `(nil)`, `inf`) so that
/// the NCCL 2.28 dumps and `%lf` infinities parse as JSON. Numbers, `true`, `false` and
/// `null` are kept.
pub fn quote_bare_words(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() + 16);
    let mut i = 0;
    let mut in_str = false;
    while i < src.len() {
        let c = src[i];
        if in_str {
            out.push(c);
            if c == b'\\' {
                if let Some(&n) = src.get(i + 1) {
                    out.push(n);
                    i += 1;
                }
            } else if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            b'{' | b'}' | b'[' | b']' | b':' | b',' => {
                out.push(c);
                i += 1;
            }
            c if c.is_ascii_whitespace() => {
                out.push(c);
                i += 1;
            }
            _ => {
                let s = i;
                while i < src.len()
                    && !matches!(src[i], b'{' | b'}' | b'[' | b']' | b':' | b',' | b'"')
                    && !src[i].is_ascii_whitespace()
                {
                    i += 1;
                }
                let word = &src[s..i];
                let keep = matches!(word, b"true" | b"false" | b"null")
                    || serde_json::from_slice::<serde_json::Number>(word).is_ok();
                if keep {
                    out.extend_from_slice(word);
                } else {
                    out.push(b'"');
                    for &b in word {
                        if b == b'\\' {
                            out.push(b'\\');
                        }
                        out.push(b);
                    }
                    out.push(b'"');
                }
            }
        }
    }
    out
}

fn line_of(data: &[u8], offset: usize) -> usize {
    data[..offset.min(data.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Splits the top-level array into event objects: (offset, bytes). A truncated last object
/// ends the list (`truncated` set).
fn split_events<'a>(
    path: &str,
    data: &'a [u8],
    truncated: &mut bool,
) -> Result<Vec<(usize, &'a [u8])>, ProfilerDumpError> {
    let syntax = |offset: usize, what: String| ProfilerDumpError::Syntax {
        path: path.into(),
        line: line_of(data, offset),
        offset,
        what,
    };
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < data.len() && (data[*i].is_ascii_whitespace() || data[*i] == 0) {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if data.get(i) != Some(&b'[') {
        return Err(syntax(i, "expected '[' opening the event array".into()));
    }
    i += 1;
    let mut out = Vec::new();
    loop {
        skip_ws(&mut i);
        match data.get(i) {
            None => {
                *truncated = true;
                return Ok(out);
            }
            Some(b',') => i += 1,
            Some(b']') => return Ok(out),
            Some(b'{') => {
                let s = i;
                let mut depth = 0usize;
                let mut in_str = false;
                let mut end = None;
                while i < data.len() {
                    let c = data[i];
                    if in_str {
                        if c == b'\\' {
                            i += 1;
                        } else if c == b'"' {
                            in_str = false;
                        }
                    } else if c == b'"' {
                        in_str = true;
                    } else if c == b'{' || c == b'[' {
                        depth += 1;
                    } else if c == b'}' || c == b']' {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    i += 1;
                }
                match end {
                    Some(e) => {
                        out.push((s, &data[s..e]));
                        i = e;
                    }
                    None => {
                        *truncated = true;
                        return Ok(out);
                    }
                }
            }
            Some(&c) => {
                return Err(syntax(
                    i,
                    format!(
                        "unexpected {:?}: expected an event object, ',' or ']'",
                        c as char
                    ),
                ))
            }
        }
    }
}

fn parse_dump(
    path: &str,
    dir: &str,
    data: &[u8],
    procs: &mut BTreeMap<String, ProcOps>,
    notes: &mut Notes,
) -> Result<(), ProfilerDumpError> {
    let mut truncated = false;
    let events = split_events(path, data, &mut truncated)?;
    if truncated {
        notes.add(format!(
            "{path}: truncated (no closing ']'): events after the last complete one are lost"
        ));
    }
    // Per process in this file: ops, the open COLL/P2P, and open ones by (cat, id, name).
    struct Open {
        pid: u64,
        idx: usize,
    }
    let mut current: Option<Open> = None;
    let mut by_id: HashMap<(String, u64, u64, String), usize> = HashMap::new();
    let mut file_ops: BTreeMap<u64, Vec<DumpOp>> = BTreeMap::new();
    for (index, (offset, bytes)) in events.into_iter().enumerate() {
        let line = line_of(data, offset);
        let ev_err = |what: String| ProfilerDumpError::Event {
            path: path.into(),
            line,
            index,
            what,
        };
        let fixed = quote_bare_words(bytes);
        let v: Value =
            serde_json::from_slice(&fixed).map_err(|e| ev_err(format!("malformed event: {e}")))?;
        let Some(o) = v.as_object() else { continue };
        if o.is_empty() {
            continue; // the `{}` sentinel
        }
        let cat = o.get("cat").and_then(Value::as_str).unwrap_or("");
        let ph = o.get("ph").and_then(Value::as_str).unwrap_or("");
        let name = o.get("name").and_then(Value::as_str).unwrap_or("");
        let id = o.get("id").and_then(Value::as_u64).unwrap_or(0);
        let pid = o.get("pid").and_then(Value::as_u64).unwrap_or(0);
        let ts = match o.get("ts") {
            Some(Value::Number(n)) => n.as_f64().filter(|t| t.is_finite() && t.abs() < 1e15),
            _ => None,
        };
        match (cat, ph) {
            ("COLL" | "P2P", "b") => {
                let ts = ts.ok_or_else(|| ev_err("\"ts\": expected microseconds".into()))?;
                let args = o
                    .get("args")
                    .and_then(Value::as_object)
                    .ok_or_else(|| ev_err("no \"args\" object".into()))?;
                let hash = match args.get("CommHash") {
                    Some(Value::Number(n)) => n.as_u64(),
                    Some(Value::String(s)) => crate::nccl_inspector::parse_hash(s),
                    _ => None,
                }
                .ok_or_else(|| ev_err("args.CommHash: expected the communicator hash".into()))?;
                let rank = args
                    .get("Rank")
                    .and_then(Value::as_u64)
                    .and_then(|r| u32::try_from(r).ok())
                    .ok_or_else(|| {
                        ev_err("args.Rank: expected the rank in the communicator".into())
                    })?;
                let Some(kind) = kind_of(name) else {
                    notes.count(&format!(
                        "{cat} events named {name:?} skipped (no matching op kind)"
                    ));
                    current = None;
                    continue;
                };
                let (seq, peer) = if cat == "COLL" {
                    let s = args.get("SeqNum").and_then(Value::as_u64).ok_or_else(|| {
                        ev_err("args.SeqNum: expected the sequence number".into())
                    })?;
                    (Some(s), None)
                } else {
                    let p = args
                        .get("Peer")
                        .and_then(Value::as_u64)
                        .and_then(|r| u32::try_from(r).ok())
                        .ok_or_else(|| ev_err("args.Peer: expected the peer's rank".into()))?;
                    (None, Some(p))
                };
                let count = args.get("Count").and_then(Value::as_u64).unwrap_or(0);
                let size = args.get("Datatype").map_or(0, dtype_size);
                let ops = file_ops.entry(pid).or_default();
                ops.push(DumpOp {
                    raw: RawOp {
                        comm: hash,
                        comm_rank: rank,
                        func: name.to_string(),
                        kind,
                        seq,
                        peer,
                        bytes: count.saturating_mul(size),
                        start_ns: 0,
                        end_ns: None,
                        issue_ns: None,
                    },
                    b_us: ts,
                    e_us: None,
                    kernel_b_us: None,
                    gpu_start: None,
                    gpu_end: None,
                    gpu_open: false,
                });
                let idx = ops.len() - 1;
                by_id.insert((cat.to_string(), pid, id, name.to_string()), idx);
                current = Some(Open { pid, idx });
            }
            ("COLL" | "P2P", "e") => {
                if let Some(idx) = by_id.remove(&(cat.to_string(), pid, id, name.to_string())) {
                    if let Some(op) = file_ops.get_mut(&pid).and_then(|v| v.get_mut(idx)) {
                        // A stop not after the start is a stale pool slot: still running.
                        op.e_us = ts.filter(|&t| t > 0.0 && t >= op.b_us);
                    }
                } else {
                    notes.count("end events without a begin, skipped");
                }
                if current.as_ref().is_some_and(|c| c.pid == pid) {
                    current = None;
                }
            }
            ("GPU", ph) => {
                let Some(c) = current.as_ref().filter(|c| c.pid == pid) else {
                    continue;
                };
                let Some(op) = file_ops.get_mut(&c.pid).and_then(|v| v.get_mut(c.idx)) else {
                    continue;
                };
                if ph == "b" {
                    if let Some(t) = ts {
                        op.kernel_b_us = Some(op.kernel_b_us.map_or(t, |k| k.min(t)));
                    }
                    let args = o.get("args");
                    let clk = |k: &str| {
                        args.and_then(|a| a.get(k))
                            .and_then(Value::as_u64)
                            .unwrap_or(0)
                    };
                    // The global timer is ns since an epoch; larger values are garbage.
                    let (s, e) = (clk("StartGpuClk"), clk("StopGpuClk"));
                    let (s, e) = if s < 1 << 62 && e < 1 << 62 {
                        (s, e)
                    } else {
                        (0, 0)
                    };
                    if s > 0 {
                        op.gpu_start = Some(op.gpu_start.map_or(s, |g| g.min(s)));
                        if e > s {
                            op.gpu_end = Some(op.gpu_end.map_or(e, |g| g.max(e)));
                        } else {
                            op.gpu_open = true;
                        }
                    }
                }
            }
            _ => notes.count("other events (API, launch, proxy, net) not imported"),
        }
    }
    for (pid, ops) in file_ops {
        let key = format!("{dir}/pid{pid:010}");
        let p = procs.entry(key).or_default();
        if p.source.is_empty() {
            p.source = path.to_string();
        }
        for o in &ops {
            if o.e_us.is_none() {
                notes.count("ops in flight (no end, or an end before the start)");
            }
        }
        p.ops.extend(ops);
    }
    Ok(())
}

/// Bytes per element of an NCCL datatype, by name or by enum value (2.23 prints numbers).
fn dtype_size(v: &Value) -> u64 {
    if let Some(n) = v.as_u64() {
        return match n {
            0 | 1 | 10 | 11 => 1,
            6 | 9 => 2,
            2 | 3 | 7 => 4,
            4 | 5 | 8 => 8,
            _ => 0,
        };
    }
    let s = v
        .as_str()
        .unwrap_or("")
        .trim_start_matches("nccl")
        .to_ascii_lowercase();
    match s.as_str() {
        "int8" | "uint8" | "char" | "float8e4m3" | "float8e5m2" => 1,
        "float16" | "half" | "bfloat16" => 2,
        "int32" | "uint32" | "int" | "float32" | "float" => 4,
        "int64" | "uint64" | "float64" | "double" => 8,
        _ => 0,
    }
}
