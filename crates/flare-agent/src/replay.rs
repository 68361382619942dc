//! What the agents would have shipped for a recorded trace: its ops replayed through the
//! agent's own per-window aggregation ([`OpAcc`], [`RankParts`]), one summary per node
//! and window. It lets the live path be judged on the same job as the batch engine (a
//! simulated fault, a real trace) without a cluster.

use crate::stats::IntervalUnion;
use crate::window::{OpAcc, RankParts, RankWindow};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{IterationSample, Op, Trace, WindowSummary};
use std::collections::{BTreeMap, HashMap};

/// Samples kept per op and window for its percentiles (as the agent's default).
const SAMPLES: usize = 256;

/// The trace's windows of `window_ns` (starting at its first op), each as the summaries
/// its nodes would have posted (ranks grouped by the trace's cluster topology). Times are
/// the trace's, taken as Unix nanoseconds. Spans and iterations count in the window
/// they end in, as the agent counts them; ops that never ended are left out.
pub fn summaries_of_trace(trace: &Trace, job_id: &str, window_ns: u64) -> Vec<Vec<WindowSummary>> {
    let window_ns = window_ns.max(1);
    let t0 = trace
        .ranks
        .iter()
        .flat_map(|r| r.ops.first().map(|o| o.start_ns))
        .min()
        .unwrap_or(0);
    let at = |t: i64| -> u64 { (t - t0).max(0) as u64 };
    let index = |t: i64| at(t) / window_ns;
    let cluster = &trace.job.cluster;
    // (window, node) -> ranks' parts.
    let mut parts: BTreeMap<(u64, u32), Vec<RankParts>> = BTreeMap::new();
    for r in &trace.ranks {
        let loc = cluster.loc(r.rank);
        let mut per_window: BTreeMap<u64, Acc> = BTreeMap::new();
        let (first, last) = match (r.ops.first(), r.ops.iter().filter_map(Op::end).max()) {
            (Some(f), Some(l)) => (at(f.start_ns), at(l)),
            _ => continue,
        };
        for o in &r.ops {
            let Some(end) = o.end() else { continue };
            let wi = index(end);
            // Busy (and sync) time in every window the op overlaps, as the agent settles
            // it: an op across a window edge is busy on both sides.
            let (a, b) = (at(o.start_ns), at(end));
            for wj in (a / window_ns).min(wi)..=wi {
                let (ws, we) = (wj * window_ns, (wj + 1) * window_ns);
                let (s, e) = (a.max(ws), b.min(we));
                if e > s {
                    let w = per_window.entry(wj).or_default();
                    w.busy.add(s, e);
                    if o.kind.is_sync() {
                        w.sync.add(s, e);
                    }
                }
            }
            let w = per_window.entry(wi).or_default();
            w.events += 1;
            let group = o.comm().map(|c| {
                let size = trace
                    .communicators
                    .get(c as usize)
                    .map_or(0, |c| c.members.len() as u32);
                (c, size)
            });
            let acc = w
                .ops
                .entry((o.name, o.kind as u8, o.comm))
                .or_insert_with(|| {
                    OpAcc::new(
                        trace.name(o.name).to_string(),
                        o.kind,
                        group.map(|(c, _)| format!("comm{c}")),
                        SAMPLES,
                    )
                });
            let issue = o
                .issue()
                .map_or(0, |i| (o.start_ns - i).clamp(0, u32::MAX as i64) as u32);
            acc.record(
                (end - o.start_ns).max(0) as u64,
                o.amount,
                group.map_or(0, |g| g.1),
                issue,
            );
        }
        for it in &r.iterations {
            let Some(end) = it.end_ns else { continue };
            per_window
                .entry(index(end))
                .or_default()
                .iterations
                .push(IterationSample {
                    step: it.iteration as u64,
                    start_unix_ns: at(it.start_ns),
                    duration_ns: (end - it.start_ns).max(0) as u64,
                });
        }
        // Stepping time as the live agent counts it: what follows the last step of a
        // window is carried into the window where the next one ends.
        let mut carry: Option<flare_model::SteppingTime> = None;
        let mut next_w = None;
        for (w, acc) in per_window {
            let (ws, we) = (w * window_ns, (w + 1) * window_ns);
            let mut p = RankParts::new(r.rank, loc.local, 10_000 + r.rank);
            p.busy_ns = acc.busy.total();
            p.sync_busy_ns = acc.sync.total();
            let observed = (ws.max(first), we.min(last).max(ws.max(first)));
            p.observed.add(observed.0, observed.1);
            p.events = acc.events;
            // Windows in between with nothing of this rank: watched, idle.
            if let (Some(c), Some(n)) = (carry.as_mut(), next_w) {
                c.span_ns += (w - n) * window_ns;
            }
            let mut rw = RankWindow {
                sync: acc.sync,
                carried_in: carry,
                ..RankWindow::default()
            };
            for it in acc.iterations {
                rw.add_iteration(it, ws);
            }
            p.stepping = rw.stepping_time();
            carry = rw.carry_out(observed);
            next_w = Some(w + 1);
            p.iterations = rw.iterations;
            p.ops = acc.ops.into_values().collect();
            parts.entry((w, loc.node)).or_default().push(p);
        }
    }
    let mut windows: BTreeMap<u64, Vec<WindowSummary>> = BTreeMap::new();
    for ((w, node), ranks) in parts {
        windows.entry(w).or_default().push(WindowSummary {
            parallel: trace.job.parallel.clone(),
            version: SUMMARY_VERSION,
            job_id: job_id.to_string(),
            node: format!("node{node}"),
            window: w,
            window_ns,
            start_unix_ns: w * window_ns,
            end_unix_ns: (w + 1) * window_ns,
            world_size: trace.job.world_size,
            ranks: ranks.into_iter().map(RankParts::finish).collect(),
            hangs: Vec::new(),
            peer_stacks: Vec::new(),
            logs: None,
        });
    }
    windows.into_values().collect()
}

#[derive(Default)]
struct Acc {
    ops: HashMap<(u32, u8, u32), OpAcc>,
    iterations: Vec<IterationSample>,
    busy: IntervalUnion,
    sync: IntervalUnion,
    events: u64,
}
