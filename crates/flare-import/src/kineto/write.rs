//! Writing a rank's ops as a torch.profiler (Kineto) trace, so that Flare's simulated
//! traces can be fed to other tools (HTA, Perfetto, chrome://tracing) and so that the
//! reader is tested against files of the real shape.
//!
//! Layout of one file: `schemaVersion`, `distributedInfo` (backend, rank, world size, the
//! process groups the rank belongs to), `traceEvents`, `traceName`, `displayTimeUnit` and
//! `baseTimeNanoseconds`. Events: `ProfilerStep#N` spans and host phases on the CPU thread
//! (pid = rank, tid = 1), compute kernels on stream 7 and NCCL kernels on one stream per
//! communicator (tid = 20 + the communicator's position among the rank's groups), each
//! kernel with a `cudaLaunchKernel` call at its issue time linked by `correlation` (and an
//! `ac2g` flow for viewers). Timestamps are microseconds with three decimals, relative to
//! `baseTimeNanoseconds` like recent Kineto versions, so they are exact to the nanosecond.
//!
//! What Kineto cannot carry is lost or marked: in-flight ops are left out (counted in
//! [`KinetoWriteStats`]); the names of sync ops become NCCL kernel names; a host op's issue
//! time is read back as its start (the CPU runs host phases itself, so they are the same in
//! Flare's simulator and in any real trace). Two arguments of Flare's own keep round trips exact and are
//! harmless to other tools: `Flare kind` on host spans and `Flare unfinished` on a
//! `ProfilerStep` that never ended (written as lasting until the rank's last event).

use flare_model::{Communicator, Op, OpKind, RankTrace, Trace};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::names;

/// What [`write_kineto_dir`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KinetoWriteStats {
    pub files: usize,
    pub ops_written: u64,
    /// Ops left out because they never ended (Kineto has no in-flight kernels).
    pub in_flight_omitted: u64,
}

const CPU_TID: u32 = 1;
const COMPUTE_STREAM: u32 = 7;
const FIRST_COMM_STREAM: u32 = 20;

/// Writes rank `trace.ranks[rank_index]` as one Kineto JSON trace (uncompressed; wrap `w`
/// in a gzip encoder for `.json.gz`). In-flight ops are omitted.
pub fn write_kineto_rank<W: Write>(trace: &Trace, rank_index: usize, w: W) -> io::Result<()> {
    let base = base_time(trace);
    let (_, _, mut w) = write_rank(trace, rank_index, base, w)?;
    w.flush()
}

/// Writes every rank of `trace` into `dir` as `rank-<R>.json.gz` (created if absent).
pub fn write_kineto_dir(trace: &Trace, dir: &Path) -> io::Result<KinetoWriteStats> {
    std::fs::create_dir_all(dir)?;
    let base = base_time(trace);
    let mut stats = KinetoWriteStats::default();
    for (i, rt) in trace.ranks.iter().enumerate() {
        let path = dir.join(format!("rank-{}.json.gz", rt.rank));
        let f = File::create(&path)?;
        let gz = flate2::write::GzEncoder::new(BufWriter::new(f), flate2::Compression::fast());
        let (written, omitted, gz) = write_rank(trace, i, base, gz)?;
        let mut inner = gz.finish()?;
        inner.flush()?;
        stats.files += 1;
        stats.ops_written += written;
        stats.in_flight_omitted += omitted;
    }
    Ok(stats)
}

/// A base time shared by all ranks: a whole second at least one second before the
/// earliest first event of any rank, so that every file's timestamps stay small (viewers
/// parse them as doubles) and align across ranks.
fn base_time(trace: &Trace) -> i64 {
    let mut min = i64::MAX;
    for rt in &trace.ranks {
        if let Some(op) = rt.ops.first() {
            min = min.min(op.start_ns);
            if let Some(issue) = op.issue() {
                min = min.min(issue);
            }
        }
        if let Some(span) = rt.iterations.first() {
            min = min.min(span.start_ns);
        }
    }
    if min == i64::MAX || min < 2_000_000_000 {
        return 0;
    }
    (min / 1_000_000_000 - 1) * 1_000_000_000
}

/// Writes nanoseconds relative to `base` as microseconds with three decimals.
fn us(out: &mut Vec<u8>, ns: i64, base: i64) {
    let rel = (ns as i128) - (base as i128);
    let neg = rel < 0;
    let abs = rel.unsigned_abs();
    if neg {
        out.push(b'-');
    }
    let _ = write!(out, "{}.{:03}", abs / 1000, abs % 1000);
}

/// Writes a duration in nanoseconds as microseconds with three decimals.
fn dur(out: &mut Vec<u8>, ns: i64) {
    us(out, ns, 0)
}

/// Writes `s` as a JSON string.
fn jstr(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out.push(b'"');
}

fn rank_list(members: &[u32]) -> String {
    let parts: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// The NCCL kernel name and PyTorch collective name for a sync op kind.
fn nccl_names(kind: OpKind) -> (&'static str, &'static str) {
    match kind {
        OpKind::AllReduce => (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "allreduce",
        ),
        OpKind::Barrier => (
            "ncclDevKernel_AllReduce_Sum_u8_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "barrier",
        ),
        OpKind::AllGather => (
            "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "allgather",
        ),
        OpKind::ReduceScatter => (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "reduce_scatter",
        ),
        OpKind::Broadcast => (
            "ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "broadcast",
        ),
        OpKind::Reduce => (
            "ncclDevKernel_Reduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "reduce",
        ),
        OpKind::AllToAll => (
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            "all_to_all",
        ),
        OpKind::Send => (
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            "send",
        ),
        OpKind::Recv => (
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            "recv",
        ),
        _ => (
            "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
            "sendrecv",
        ),
    }
}

/// The name a host op is written under: its own when the reader will recognise it as the
/// same kind, else the name torch.profiler gives that phase.
fn host_name(trace: &Trace, op: &Op) -> String {
    let own = trace.name(op.name);
    if names::host_kind(own) == Some(op.kind) {
        return own.to_string();
    }
    match op.kind {
        OpKind::DataLoader => "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__".into(),
        OpKind::GarbageCollection => "gc.collect".into(),
        OpKind::Optimizer => "Optimizer.step#AdamW.step".into(),
        OpKind::Checkpoint => "checkpoint.save".into(),
        _ => own.to_string(),
    }
}

fn find_comm(trace: &Trace, id: u32) -> Option<&Communicator> {
    match trace.communicators.get(id as usize) {
        Some(c) if c.id == id => Some(c),
        _ => trace.communicators.iter().find(|c| c.id == id),
    }
}

/// Writes one rank; returns (ops written, in-flight ops omitted, the writer).
fn write_rank<W: Write>(
    trace: &Trace,
    rank_index: usize,
    base: i64,
    w: W,
) -> io::Result<(u64, u64, W)> {
    let rt: &RankTrace = trace.ranks.get(rank_index).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "rank index {rank_index} is out of range: the trace holds {} ranks",
                trace.ranks.len()
            ),
        )
    })?;
    let mut w = BufWriter::with_capacity(1 << 16, w);
    let rank = rt.rank;
    let gpus = trace.job.cluster.gpus_per_node.max(1);

    // The communicators this rank belongs to, in id order: they get a stream each.
    let my_comms: Vec<&Communicator> = trace
        .communicators
        .iter()
        .filter(|c| c.members.contains(&rank))
        .collect();
    let stream_of = |comm: u32| -> u32 {
        my_comms
            .iter()
            .position(|c| c.id == comm)
            .map(|p| FIRST_COMM_STREAM + p as u32)
            .unwrap_or(FIRST_COMM_STREAM + my_comms.len() as u32)
    };

    let mut out: Vec<u8> = Vec::with_capacity(1 << 16);
    out.extend_from_slice(
        b"{\n  \"schemaVersion\": 1,\n  \"distributedInfo\": {\"backend\": \"nccl\", ",
    );
    let _ = write!(
        out,
        "\"rank\": {rank}, \"world_size\": {}, \"pg_count\": {}, \"pg_config\": [",
        trace.job.world_size,
        my_comms.len()
    );
    for (i, c) in my_comms.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        let _ = write!(out, "{{\"pg_name\": \"{}\", \"pg_desc\": ", c.id);
        jstr(&mut out, &c.label);
        let _ = write!(
            out,
            ", \"backend_config\": \"cuda:nccl\", \"pg_size\": {}, \"ranks\": {}, \"flare_group_kind\": \"{}\"}}",
            c.members.len(),
            rank_list(&c.members),
            c.kind.as_str()
        );
    }
    out.extend_from_slice(b"], \"nccl_version\": \"2.21.5\"},\n  \"traceEvents\": [\n");

    let mut first = true;
    let mut sep = |out: &mut Vec<u8>| {
        if first {
            first = false;
        } else {
            out.extend_from_slice(b",\n");
        }
    };

    // Metadata for viewers.
    sep(&mut out);
    let _ = write!(
        out,
        "  {{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": {rank}, \"tid\": 0, \"args\": {{\"name\": \"rank {rank}\"}}}}"
    );
    sep(&mut out);
    let _ = write!(
        out,
        "  {{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": {rank}, \"tid\": {CPU_TID}, \"args\": {{\"name\": \"python main thread\"}}}}"
    );
    sep(&mut out);
    let _ = write!(
        out,
        "  {{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": {rank}, \"tid\": {COMPUTE_STREAM}, \"args\": {{\"name\": \"stream {COMPUTE_STREAM}\"}}}}"
    );
    for c in &my_comms {
        sep(&mut out);
        let _ = write!(
            out,
            "  {{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": {rank}, \"tid\": {}, \"args\": {{\"name\": ",
            stream_of(c.id)
        );
        jstr(
            &mut out,
            &format!("stream {} (nccl {})", stream_of(c.id), c.label),
        );
        out.extend_from_slice(b"}}");
    }

    // The last timestamp of the rank, for iterations that never ended.
    let last_ts = rt
        .ops
        .iter()
        .map(|o| o.end().unwrap_or(o.start_ns))
        .chain(rt.iterations.iter().map(|s| s.end_ns.unwrap_or(s.start_ns)))
        .max()
        .unwrap_or(0);

    let mut ext_id: u64 = 1;
    for span in &rt.iterations {
        sep(&mut out);
        let (d, unfinished) = match span.end_ns {
            Some(e) => (e.saturating_sub(span.start_ns).max(0), false),
            None => (last_ts.saturating_sub(span.start_ns).max(0), true),
        };
        let _ = write!(
            out,
            "  {{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#{}\", \"pid\": {rank}, \"tid\": {CPU_TID}, \"ts\": ",
            span.iteration
        );
        us(&mut out, span.start_ns, base);
        out.extend_from_slice(b", \"dur\": ");
        dur(&mut out, d);
        let _ = write!(out, ", \"args\": {{\"External id\": {ext_id}");
        if unfinished {
            out.extend_from_slice(b", \"Flare unfinished\": 1");
        }
        out.extend_from_slice(b"}}");
        ext_id += 1;
    }

    let mut written = 0u64;
    let mut omitted = 0u64;
    let mut correlation: u64 = 1;
    for op in &rt.ops {
        let Some(end) = op.end() else {
            omitted += 1;
            continue;
        };
        let d = end.saturating_sub(op.start_ns).max(0);
        written += 1;
        if op.kind.is_host() {
            sep(&mut out);
            out.extend_from_slice(b"  {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": ");
            jstr(&mut out, &host_name(trace, op));
            let _ = write!(out, ", \"pid\": {rank}, \"tid\": {CPU_TID}, \"ts\": ");
            us(&mut out, op.start_ns, base);
            out.extend_from_slice(b", \"dur\": ");
            dur(&mut out, d);
            let _ = write!(
                out,
                ", \"args\": {{\"External id\": {ext_id}, \"Flare kind\": \"{}\"}}}}",
                op.kind.as_str()
            );
            ext_id += 1;
            continue;
        }

        let corr = correlation;
        correlation += 1;
        let sync = op.kind.is_sync();
        let stream = if sync {
            stream_of(op.comm)
        } else {
            COMPUTE_STREAM
        };
        let (kernel_name, coll_name) = if sync {
            let (k, c) = nccl_names(op.kind);
            (k.to_string(), c)
        } else {
            (trace.name(op.name).to_string(), "")
        };

        if let Some(issue) = op.issue() {
            let launch = if sync {
                "cudaLaunchKernelExC"
            } else {
                "cudaLaunchKernel"
            };
            let launch_dur = op.start_ns.saturating_sub(issue).clamp(0, 4_000);
            sep(&mut out);
            let _ = write!(
                out,
                "  {{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"{launch}\", \"pid\": {rank}, \"tid\": {CPU_TID}, \"ts\": "
            );
            us(&mut out, issue, base);
            out.extend_from_slice(b", \"dur\": ");
            dur(&mut out, launch_dur);
            let _ = write!(
                out,
                ", \"args\": {{\"External id\": {corr}, \"cbid\": 211, \"correlation\": {corr}}}}}"
            );
            sep(&mut out);
            let _ = write!(
                out,
                "  {{\"ph\": \"s\", \"id\": {corr}, \"pid\": {rank}, \"tid\": {CPU_TID}, \"ts\": "
            );
            us(&mut out, issue, base);
            out.extend_from_slice(b", \"cat\": \"ac2g\", \"name\": \"ac2g\"}");
            sep(&mut out);
            let _ = write!(
                out,
                "  {{\"ph\": \"f\", \"id\": {corr}, \"pid\": {rank}, \"tid\": {stream}, \"ts\": "
            );
            us(&mut out, op.start_ns, base);
            out.extend_from_slice(b", \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}");
        }

        sep(&mut out);
        out.extend_from_slice(b"  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": ");
        jstr(&mut out, &kernel_name);
        let _ = write!(out, ", \"pid\": {rank}, \"tid\": {stream}, \"ts\": ");
        us(&mut out, op.start_ns, base);
        out.extend_from_slice(b", \"dur\": ");
        dur(&mut out, d);
        let _ = write!(
            out,
            ", \"args\": {{\"External id\": {corr}, \"queued\": 0, \"device\": {}, \"context\": 1, \"stream\": {stream}, \"correlation\": {corr}",
            rank % gpus
        );
        if sync {
            write_nccl_args(&mut out, trace, op, rank, coll_name);
        } else if op.amount > 0 {
            let _ = write!(out, ", \"FLOPs\": {}", op.amount);
        }
        out.extend_from_slice(b"}}");

        if out.len() > (1 << 16) - 4096 {
            w.write_all(&out)?;
            out.clear();
        }
    }

    out.extend_from_slice(b"\n  ],\n  \"traceName\": ");
    jstr(&mut out, &format!("rank-{rank}.json"));
    let _ = write!(
        out,
        ",\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": {base}\n}}\n"
    );
    w.write_all(&out)?;
    let inner = w.into_inner().map_err(|e| e.into_error())?;
    Ok((written, omitted, inner))
}

/// The collective arguments PyTorch records on NCCL kernels.
fn write_nccl_args(out: &mut Vec<u8>, trace: &Trace, op: &Op, rank: u32, coll_name: &str) {
    let comm = op.comm().and_then(|c| find_comm(trace, c));
    let group_size = comm.map(|c| c.members.len() as u64).unwrap_or(1).max(1);
    // bf16 elements when the byte count allows it, else bytes, so the reader gets the
    // exact byte count back.
    let (dtype, elem) = if op.amount.is_multiple_of(2) {
        ("BFloat16", 2)
    } else {
        ("Byte", 1)
    };
    let in_nelems = op.amount / elem;
    let out_nelems = match op.kind {
        OpKind::AllGather => in_nelems.saturating_mul(group_size),
        OpKind::ReduceScatter => in_nelems / group_size,
        _ => in_nelems,
    };
    let _ = write!(
        out,
        ", \"Collective name\": \"{coll_name}\", \"In msg nelems\": {in_nelems}, \"Out msg nelems\": {out_nelems}, \"Group size\": {group_size}, \"dtype\": \"{dtype}\", \"In split size\": \"[]\", \"Out split size\": \"[]\""
    );
    if let Some(c) = comm {
        if let Some((start, stride)) = arithmetic(&c.members) {
            let _ = write!(
                out,
                ", \"Global rank start\": {start}, \"Global rank stride\": {stride}"
            );
        }
        let _ = write!(
            out,
            ", \"Process Group Name\": \"{}\", \"Process Group Description\": ",
            c.id
        );
        jstr(out, &c.label);
        out.extend_from_slice(b", \"Process Group Ranks\": ");
        jstr(out, &rank_list(&c.members));
        if let Some(pos) = c.members.iter().position(|&m| m == rank) {
            let _ = write!(out, ", \"Rank\": {pos}");
        }
    }
    if let Some(peer) = op.peer() {
        match op.kind {
            OpKind::Send => {
                let _ = write!(out, ", \"Dst Rank\": {peer}");
            }
            OpKind::Recv => {
                let _ = write!(out, ", \"Src Rank\": {peer}");
            }
            _ => {
                let _ = write!(out, ", \"Src Rank\": {peer}, \"Dst Rank\": {peer}");
            }
        }
    }
    let _ = write!(out, ", \"Seq\": {}", op.seq);
}

/// `(start, stride)` when the members are `start, start + stride, ...` with stride >= 1.
fn arithmetic(members: &[u32]) -> Option<(u32, u32)> {
    let start = *members.first()?;
    if members.len() == 1 {
        return Some((start, 1));
    }
    let stride = members[1].checked_sub(start)?;
    if stride == 0 {
        return None;
    }
    members
        .windows(2)
        .all(|w| w[1].checked_sub(w[0]) == Some(stride))
        .then_some((start, stride))
}
