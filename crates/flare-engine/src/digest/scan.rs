//! Pass 1b, per rank: each rank's ops in order (self time before each sync op, compute,
//! host phases, issue latency, busy time) into its [`RankIteration`], and one
//! [`Member`] per sync op, written in place with its slot noted for the instance pass.

use super::members::{Chunk, SlotOp, FIRST_OF_SLOT};
use super::record::issue_bin_fast;
use super::slots::SlotMap;
use super::{host_slot, LastOp, Member, NameStat, OpGroup, RankIteration, RankSlice};
use crate::context::JobContext;
use crate::par::par_each;
use crate::stats::median_i64;
use flare_model::{Op, OpKind};

/// Pass 1b over one chunk of ranks: per-rank figures, and the chunk's members written
/// straight into slot order.
#[allow(clippy::too_many_arguments)]
fn scan_chunk(
    ctx: &JobContext,
    iteration: u32,
    by_index: &[Option<&RankSlice>],
    range: std::ops::Range<usize>,
    map: &SlotMap,
    n_slots: usize,
    carry: &[Option<i64>],
    c: &mut Chunk,
    ranks_out: &mut [RankIteration],
    predicted: bool,
) -> RankPass {
    // Counting sort of the chunk's keys by slot; when the map is predicted, the previous
    // iteration's order stands, and every member's slot is checked against it.
    if !predicted {
        c.starts.clear();
        c.starts.resize(n_slots + 1, 0);
        for &(comm, seq) in &c.keys {
            c.starts[map.slot(comm, seq) + 1] += 1;
        }
        for i in 1..c.starts.len() {
            c.starts[i] += c.starts[i - 1];
        }
    }
    let n_members = c.starts.get(n_slots).copied().unwrap_or(0) as usize;
    let mut fill = std::mem::take(&mut c.fill);
    if !predicted {
        fill.clear();
        fill.extend_from_slice(&c.starts[..n_slots]);
        // Every position is written below: the counts are exact.
        c.order.resize(n_members, 0);
        c.slot_of.clear();
    }
    c.members.clear();
    c.members.reserve(n_members);
    c.gaps.clear();
    c.gaps.reserve(n_members);
    // Like the members, every slot read later is written below.
    c.slot_op.resize(
        n_slots,
        SlotOp {
            bytes: 0,
            name: 0,
            kind: OpKind::Compute,
        },
    );
    c.groups.clear();
    c.first_rank = range.start as u32;
    c.rank_first.clear();
    c.rank_durations.clear();
    c.group_run.clear();
    let mut out = RankPass::default();
    // Integer latencies: their medians select on integers, cheaper than on floats.
    let mut issue: Vec<i64> = Vec::new();
    let mut launch_gaps: Vec<i64> = Vec::new();
    let first = range.start;
    for ri in range {
        c.rank_first.push(c.members.len() as u32);
        let Some(slice) = by_index[ri] else {
            ranks_out[ri - first] = RankIteration::default();
            out.carry.push(carry[ri]);
            out.last.push(u32::MAX);
            continue;
        };
        let mut r = RankIteration {
            start_ns: slice.span.map(|s| s.start_ns),
            end_ns: slice.span.and_then(|s| s.end_ns),
            ..RankIteration::default()
        };
        // Self time since the previous sync op (of 3+ members for `acc`): waiting inside
        // P2P exchanges in between is excluded, being late to them is not.
        let (mut prev_end, mut acc) = match slice.span {
            Some(s) => (
                Some(carry[ri].map_or(s.start_ns, |c| c.max(s.start_ns))),
                Some(0i64),
            ),
            None => (carry[ri], carry[ri].map(|_| 0)),
        };
        let mut prev_member = u32::MAX;
        issue.clear();
        let (mut busy_lo, mut busy_hi) = (i64::MIN, i64::MIN);
        let first_name = out.names.len();
        let first_group = c.groups.len();
        let mut recent_groups = [usize::MAX; 2];
        let run_start = c.rank_durations.len() as u32;
        launch_gaps.clear();
        let mut pending_launch: Option<i64> = None;
        for o in slice.ops.iter().filter(|o| o.iteration == iteration) {
            r.ops += 1;
            if let Some(i) = o.issue() {
                if let Some(p) = pending_launch.take() {
                    if i >= p {
                        launch_gaps.push(i - p);
                    }
                }
                if o.kind == OpKind::Compute {
                    pending_launch = Some(i);
                }
            }
            let end = o.end();
            r.last_op = Some(LastOp {
                kind: o.kind,
                name: o.name,
                iteration,
                ended: end.is_some(),
            });
            if let Some(e) = end {
                // Union of op intervals: ops come sorted by start.
                if o.start_ns > busy_hi {
                    if busy_hi > busy_lo {
                        r.busy_ns += (busy_hi - busy_lo) as f64;
                    }
                    busy_lo = o.start_ns;
                    busy_hi = e;
                } else {
                    busy_hi = busy_hi.max(e);
                }
            }
            let dur = o.duration().map(|d| d as f64);
            if o.kind.is_sync() {
                match dur {
                    Some(d) => r.sync_ns += d,
                    None => r.stuck = true,
                }
                if o.comm != Op::NO_COMM {
                    let gap = prev_end.map_or(i64::MIN, |p| (o.start_ns - p).max(0));
                    acc = match (acc, prev_end) {
                        (Some(a), Some(p)) => Some(a + (o.start_ns - p).max(0)),
                        _ => None,
                    };
                    let gap3 = if ctx.comm_sizes.get(o.comm as usize).is_some_and(|&n| n >= 3) {
                        let g = acc.unwrap_or(i64::MIN);
                        acc = Some(0);
                        g
                    } else {
                        i64::MIN
                    };
                    prev_end = end;
                    if end.is_none() {
                        acc = None;
                    }
                    let local = c.members.len() as u32;
                    let (slot, first_of_slot) = if predicted {
                        let known = c.slot_of.get(local as usize).copied();
                        match (map.dense_slot(o.comm, o.seq), known) {
                            (Some(s), Some(k)) if k & !FIRST_OF_SLOT == s as u32 => {
                                (s, k & FIRST_OF_SLOT != 0)
                            }
                            // Not the predicted schedule: the caller starts over.
                            _ => {
                                out.mispredicted = true;
                                c.fill = fill;
                                return out;
                            }
                        }
                    } else {
                        let s = map.slot(o.comm, o.seq);
                        let at = fill[s];
                        fill[s] += 1;
                        c.order[at as usize] = local;
                        let first = at == c.starts[s];
                        c.slot_of
                            .push(s as u32 | if first { FIRST_OF_SLOT } else { 0 });
                        (s, first)
                    };
                    // Its op group: the rank's ops of this name on this communicator.
                    // The rank's last two groups first: its ops alternate between a few.
                    let hit = |k: usize| {
                        k >= first_group
                            && k < c.groups.len()
                            && c.groups[k].comm == o.comm
                            && c.groups[k].name == o.name
                    };
                    let found = if hit(recent_groups[0]) {
                        Some(recent_groups[0])
                    } else if hit(recent_groups[1]) {
                        Some(recent_groups[1])
                    } else {
                        c.groups[first_group..]
                            .iter()
                            .position(|g| g.comm == o.comm && g.name == o.name)
                            .map(|k| first_group + k)
                    };
                    let gi = match found {
                        Some(k) => k,
                        None => {
                            c.groups.push(OpGroup {
                                rank_index: ri as u32,
                                comm: o.comm,
                                name: o.name,
                                kind: o.kind,
                                bytes: o.amount,
                                n: 0,
                                in_flight: 0,
                                sum_d: 0.0,
                                sum_d2: 0.0,
                                min_d: f64::INFINITY,
                                max_d: 0.0,
                                sum_wait: 0.0,
                                sum_transfer: 0.0,
                            });
                            c.groups.len() - 1
                        }
                    };
                    if recent_groups[0] != gi {
                        recent_groups[1] = recent_groups[0];
                        recent_groups[0] = gi;
                    }
                    let g = &mut c.groups[gi];
                    match dur {
                        Some(d) => {
                            g.n += 1;
                            g.sum_d += d;
                            g.sum_d2 += d * d;
                            g.min_d = g.min_d.min(d);
                            g.max_d = g.max_d.max(d);
                        }
                        None => g.in_flight += 1,
                    }
                    if let Some(d) = dur {
                        c.rank_durations.push((gi as u32, d as f32));
                    }
                    c.members.push(Member {
                        rank_index: ri as u32,
                        group: gi as u32,
                        arrival: o.start_ns,
                        end: o.end_ns,
                        gap3,
                    });
                    c.gaps.push(gap);
                    if first_of_slot {
                        c.slot_op[slot] = SlotOp {
                            bytes: o.amount,
                            name: o.name,
                            kind: o.kind,
                        };
                    }
                    prev_member = c.base + local;
                }
            } else if o.kind == OpKind::Compute {
                if let Some(d) = dur {
                    r.compute_ns += d;
                    r.compute_ops += 1;
                    if o.amount > 0 {
                        r.flops += o.amount as f64;
                        r.flops_ns += d;
                    }
                    match out.names[first_name..]
                        .iter_mut()
                        .find(|s| s.name == o.name)
                    {
                        Some(s) => {
                            s.sum_ns += d;
                            s.count += 1;
                        }
                        None => out.names.push(NameStat {
                            rank_index: ri as u32,
                            name: o.name,
                            sum_ns: d,
                            count: 1,
                        }),
                    }
                    if let Some(i) = o.issue() {
                        let lat = o.start_ns - i;
                        issue.push(lat);
                        let b = issue_bin_fast(lat as f64);
                        r.issue_hist[b] = r.issue_hist[b].saturating_add(1);
                    }
                }
            } else if let (Some(slot), Some(d)) = (host_slot(o.kind), dur) {
                r.host_ns[slot] += d;
                out.host_ops.push((ri as u32, slot as u8, o.name, d));
            }
        }
        let run = (run_start, c.rank_durations.len() as u32 - run_start);
        c.group_run.resize(c.groups.len(), run);
        if busy_hi > busy_lo {
            r.busy_ns += (busy_hi - busy_lo) as f64;
        }
        if !issue.is_empty() {
            let floor = issue.iter().copied().min().unwrap_or(0).max(1000);
            r.issue_count = issue.len() as u32;
            r.immediate_launches = issue.iter().filter(|&&l| l <= 4 * floor).count() as u32;
            r.issue_p50_ns = median_i64(&mut issue);
        }
        if !launch_gaps.is_empty() {
            r.launch_gap_p50_ns = median_i64(&mut launch_gaps);
        }
        ranks_out[ri - first] = r;
        out.carry.push(prev_end);
        out.last.push(prev_member);
    }
    c.rank_first.push(c.members.len() as u32);
    // Fewer members than predicted: fewer ops than last time.
    if predicted && c.members.len() != n_members {
        out.mispredicted = true;
    }
    c.fill = fill;
    out
}

/// Pass 1b over every chunk, one thread each, writing each chunk's ranks' figures into
/// its part of `ranks`.
#[allow(clippy::too_many_arguments)]
pub(super) fn scan_all(
    ctx: &JobContext,
    iteration: u32,
    by_index: &[Option<&RankSlice>],
    range_of: &(dyn Fn(usize) -> std::ops::Range<usize> + Sync),
    map: &SlotMap,
    n_slots: usize,
    carry_in: &[Option<i64>],
    chunks: &mut [Chunk],
    ranks: &mut [RankIteration],
    predicted: bool,
) -> Vec<RankPass> {
    let n_chunks = chunks.len();
    let mut passes: Vec<Option<RankPass>> = (0..n_chunks).map(|_| None).collect();
    let mut parts: Vec<&mut [RankIteration]> = Vec::with_capacity(n_chunks);
    let mut rest: &mut [RankIteration] = ranks;
    for t in 0..n_chunks {
        let (a, b) = rest.split_at_mut(range_of(t).len());
        parts.push(a);
        rest = b;
    }
    type Work<'w> = (
        (&'w mut Chunk, &'w mut Option<RankPass>),
        &'w mut [RankIteration],
    );
    let mut work: Vec<Work> = chunks
        .iter_mut()
        .zip(passes.iter_mut())
        .zip(parts)
        .collect();
    par_each(&mut work, |t, ((c, out), part)| {
        **out = Some(scan_chunk(
            ctx,
            iteration,
            by_index,
            range_of(t),
            map,
            n_slots,
            carry_in,
            c,
            part,
            predicted,
        ));
    });
    passes.into_iter().flatten().collect()
}

/// Output of the per-rank pass over one chunk of ranks.
#[derive(Default)]
pub(super) struct RankPass {
    pub(super) names: Vec<NameStat>,
    /// (rank index, host slot, name, duration)
    pub(super) host_ops: Vec<(u32, u8, u32, f64)>,
    pub(super) carry: Vec<Option<i64>>,
    pub(super) last: Vec<u32>,
    /// The predicted slot map did not fit this iteration.
    pub(super) mispredicted: bool,
}
