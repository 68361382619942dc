//! A trace as one timeline a person opens in Perfetto (ui.perfetto.dev) or
//! `chrome://tracing`: the Chrome trace-event JSON format, every rank on the trace's one
//! (aligned) clock. A process per rank, named by its place in the job (stage, data-parallel
//! rank, tensor-parallel rank, node) and ordered by it, so that a parallel group's ranks sit
//! together; tracks for its compute, communication and host work and, where launches were
//! recorded, a CPU track with a flow arrow from each launch to its op; the iterations as
//! slices of their own track; the culprits of a diagnosis named on their process and their
//! ops marked. Written as it goes (nothing but the trace is held).

mod windows;

pub use windows::write_window_timeline;

use flare_model::{Op, OpKind, ParallelConfig, Trace};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// What to mark and what to write.
#[derive(Clone, Debug, Default)]
pub struct TimelineOptions {
    /// Ranks a diagnosis blames, with what it says of each (shown on the rank's process).
    pub culprits: BTreeMap<u32, String>,
    /// Only the iterations in this inclusive range (all when `None`).
    pub iterations: Option<(u32, u32)>,
    /// Launch-to-op flow arrows (one slice and two flow events per op with a launch).
    pub flows: bool,
}

/// What was written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimelineStats {
    /// Ranks (processes) written.
    pub ranks: usize,
    /// Slices written: ops (or, for window summaries, iterations and stuck ops).
    pub ops: u64,
    /// Launch-to-op flow arrows written.
    pub flows: u64,
}

const TRACK_ITERATIONS: u32 = 0;
const TRACK_COMPUTE: u32 = 1;
const TRACK_COMMUNICATION: u32 = 2;
const TRACK_HOST: u32 = 3;
const TRACK_LAUNCH: u32 = 4;

fn track(kind: OpKind) -> u32 {
    if kind.is_sync() {
        TRACK_COMMUNICATION
    } else if kind.is_host() {
        TRACK_HOST
    } else {
        TRACK_COMPUTE
    }
}

/// Each rank's place in the timeline's process list: a parallel group's ranks next to
/// each other (by stage, then data-parallel rank, then tensor-parallel rank), else in
/// rank order.
fn sort_indices(
    ranks: impl Iterator<Item = u32>,
    parallel: Option<&ParallelConfig>,
) -> BTreeMap<u32, usize> {
    let mut order: Vec<u32> = ranks.collect();
    order.sort_unstable();
    order.dedup();
    if let Some(p) = parallel {
        order.sort_by_key(|&r| {
            let c = p.coords(r);
            (c.pp, c.dp, c.cp, c.tp, r)
        });
    }
    order.iter().enumerate().map(|(i, &r)| (r, i)).collect()
}

/// "rank 5 · stage 1 · dp 0 · tp 1 · node n0 ◀ culprit: ...".
fn process_name(
    rank: u32,
    parallel: Option<&ParallelConfig>,
    node: &str,
    culprit: Option<&str>,
) -> String {
    let mut name = format!("rank {rank}");
    if let Some(p) = parallel.filter(|p| rank < p.world_size()) {
        let c = p.coords(rank);
        name.push_str(&format!(" · stage {} · dp {} · tp {}", c.pp, c.dp, c.tp));
    }
    name.push_str(&format!(" · node {node}"));
    if let Some(why) = culprit {
        name.push_str(&format!(" ◀ culprit: {why}"));
    }
    name
}

/// A JSON string literal.
fn js(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Microseconds since `t0`, as the format wants them.
fn us(ns: i64, t0: i64) -> f64 {
    (ns.saturating_sub(t0)) as f64 / 1e3
}

/// Writes `trace` as a Chrome trace-event JSON document.
pub fn write_timeline(
    trace: &Trace,
    opts: &TimelineOptions,
    out: &mut impl Write,
) -> io::Result<TimelineStats> {
    let keep = |it: u32| opts.iterations.is_none_or(|(a, b)| (a..=b).contains(&it));
    let t0 = trace
        .ranks
        .iter()
        .flat_map(|r| r.ops.iter().filter(|o| keep(o.iteration)))
        .map(|o| o.issue().map_or(o.start_ns, |i| i.min(o.start_ns)))
        .min()
        .unwrap_or(0);
    let t_end = trace
        .ranks
        .iter()
        .flat_map(|r| r.ops.iter().filter(|o| keep(o.iteration)))
        .map(|o| o.end().unwrap_or(o.start_ns))
        .max()
        .unwrap_or(t0);
    let sort_index = sort_indices(
        trace.ranks.iter().map(|r| r.rank),
        trace.job.parallel.as_ref(),
    );
    let mut stats = TimelineStats::default();
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    write!(
        out,
        "{{\"job\":{},\"source\":{},\"generator\":\"flare timeline\"}}",
        js(&trace.job.job_id),
        js(&trace.meta.source)
    )?;
    out.write_all(b",\"traceEvents\":[\n")?;
    let mut first = true;
    let mut sep = |out: &mut dyn Write| -> io::Result<()> {
        if first {
            first = false;
            Ok(())
        } else {
            out.write_all(b",\n")
        }
    };
    let mut flow_id: u64 = 0;
    for r in &trace.ranks {
        stats.ranks += 1;
        let pid = r.rank;
        let loc = trace.job.cluster.loc(r.rank);
        let culprit = opts.culprits.get(&r.rank);
        let name = process_name(
            r.rank,
            trace.job.parallel.as_ref(),
            &loc.node.to_string(),
            culprit.map(String::as_str),
        );
        sep(out)?;
        write!(
            out,
            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"args\":{{\"name\":{}}}}}",
            js(&name)
        )?;
        sep(out)?;
        write!(
            out,
            "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"args\":{{\"sort_index\":{}}}}}",
            sort_index.get(&r.rank).copied().unwrap_or(0)
        )?;
        for (tid, tname) in [
            (TRACK_ITERATIONS, "iterations"),
            (TRACK_COMPUTE, "compute"),
            (TRACK_COMMUNICATION, "communication"),
            (TRACK_HOST, "host"),
            (TRACK_LAUNCH, "CPU launches"),
        ] {
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
                js(tname)
            )?;
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"sort_index\":{tid}}}}}"
            )?;
        }
        for it in r.iterations.iter().filter(|i| keep(i.iteration)) {
            let end = it.end_ns.unwrap_or(t_end);
            sep(out)?;
            write!(
                out,
                "{{\"ph\":\"X\",\"name\":\"iteration {}\",\"cat\":\"iteration\",\"pid\":{pid},\"tid\":{TRACK_ITERATIONS},\"ts\":{:.3},\"dur\":{:.3}}}",
                it.iteration,
                us(it.start_ns, t0),
                end.saturating_sub(it.start_ns).max(0) as f64 / 1e3
            )?;
        }
        for o in r.ops.iter().filter(|o| keep(o.iteration)) {
            write_op(
                out,
                trace,
                pid,
                o,
                t0,
                t_end,
                culprit.is_some(),
                &mut sep,
                opts.flows,
                &mut flow_id,
                &mut stats,
            )?;
        }
    }
    out.write_all(b"\n]}\n")?;
    Ok(stats)
}

#[allow(clippy::too_many_arguments)]
fn write_op(
    out: &mut impl Write,
    trace: &Trace,
    pid: u32,
    o: &Op,
    t0: i64,
    t_end: i64,
    culprit: bool,
    sep: &mut impl FnMut(&mut dyn Write) -> io::Result<()>,
    flows: bool,
    flow_id: &mut u64,
    stats: &mut TimelineStats,
) -> io::Result<()> {
    let end = o.end().unwrap_or(t_end);
    let tid = track(o.kind);
    let mut args = format!(
        "\"iteration\":{},\"kind\":\"{}\"",
        o.iteration,
        o.kind.as_str()
    );
    if o.amount > 0 {
        let what = if o.kind == OpKind::Compute {
            "flops"
        } else {
            "bytes"
        };
        args.push_str(&format!(",\"{what}\":{}", o.amount));
    }
    if o.comm != Op::NO_COMM {
        if let Some(c) = trace.communicators.get(o.comm as usize) {
            args.push_str(&format!(
                ",\"communicator\":{},\"seq\":{}",
                js(&c.label),
                o.seq
            ));
        }
    }
    if o.peer != Op::NO_PEER {
        args.push_str(&format!(",\"peer\":{}", o.peer));
    }
    if o.end().is_none() {
        args.push_str(",\"in_flight\":true");
    }
    if culprit {
        args.push_str(",\"culprit\":true");
    }
    sep(out)?;
    write!(
        out,
        "{{\"ph\":\"X\",\"name\":{},\"cat\":\"{}\",\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3}{},\"args\":{{{args}}}}}",
        js(trace.name(o.name)),
        o.kind.as_str(),
        us(o.start_ns, t0),
        (end.saturating_sub(o.start_ns)).max(0) as f64 / 1e3,
        if culprit { ",\"cname\":\"terrible\"" } else { "" },
    )?;
    stats.ops += 1;
    if let (true, Some(issue)) = (flows, o.issue()) {
        *flow_id += 1;
        let id = *flow_id;
        let at = us(issue, t0);
        sep(out)?;
        write!(
            out,
            "{{\"ph\":\"X\",\"name\":{},\"cat\":\"launch\",\"pid\":{pid},\"tid\":{TRACK_LAUNCH},\"ts\":{at:.3},\"dur\":0.001}}",
            js(&format!("launch {}", trace.name(o.name)))
        )?;
        sep(out)?;
        write!(out, "{{\"ph\":\"s\",\"name\":\"launch\",\"cat\":\"launch\",\"id\":{id},\"pid\":{pid},\"tid\":{TRACK_LAUNCH},\"ts\":{at:.3}}}")?;
        sep(out)?;
        write!(
            out,
            "{{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"launch\",\"cat\":\"launch\",\"id\":{id},\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3}}}",
            us(o.start_ns, t0)
        )?;
        stats.flows += 1;
    }
    Ok(())
}
