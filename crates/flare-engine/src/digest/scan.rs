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

/// What pass 1b reads, the same for every chunk of ranks.
#[derive(Clone, Copy)]
pub(super) struct ScanJob<'a> {
    pub(super) ctx: &'a JobContext,
    pub(super) iteration: u32,
    /// Per rank index: its ops, when it has data for the iteration.
    pub(super) by_index: &'a [Option<&'a RankSlice<'a>>],
    /// Per rank index: when its last sync op ended before the iteration.
    pub(super) carry: &'a [Option<i64>],
    /// The slot map, and how many slots it has.
    pub(super) map: &'a SlotMap,
    pub(super) n_slots: usize,
    /// The map is predicted: the previous iteration's slot order stands, and every
    /// member's slot is checked against it.
    pub(super) predicted: bool,
}

/// A host op: (rank index, host slot, name, duration).
pub(super) type HostOp = (u32, u8, u32, f64);

/// Output of the per-rank pass over one chunk of ranks.
#[derive(Default)]
pub(super) struct RankPass {
    pub(super) names: Vec<NameStat>,
    pub(super) host_ops: Vec<HostOp>,
    pub(super) carry: Vec<Option<i64>>,
    pub(super) last: Vec<u32>,
    /// The predicted slot map did not fit this iteration.
    pub(super) mispredicted: bool,
}

/// Pass 1b over every chunk, one thread each, writing each chunk's ranks' figures into
/// its part of `ranks`.
pub(super) fn scan_all(
    job: &ScanJob,
    range_of: &(dyn Fn(usize) -> std::ops::Range<usize> + Sync),
    chunks: &mut [Chunk],
    ranks: &mut [RankIteration],
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
        **out = Some(scan_chunk(job, range_of(t), c, part));
    });
    passes.into_iter().flatten().collect()
}

/// Pass 1b over one chunk of ranks: per-rank figures, and the chunk's members written
/// in rank order, each with its slot noted (and counted into the slot order).
fn scan_chunk(
    job: &ScanJob,
    range: std::ops::Range<usize>,
    c: &mut Chunk,
    ranks_out: &mut [RankIteration],
) -> RankPass {
    let (n_members, mut fill) = prepare(job, c, range.start);
    let mut out = RankPass::default();
    let mut latencies = Latencies::default();
    let first = range.start;
    for ri in range {
        c.rank_first.push(c.members.len() as u32);
        let Some(slice) = job.by_index[ri] else {
            ranks_out[ri - first] = RankIteration::default();
            out.carry.push(job.carry[ri]);
            out.last.push(u32::MAX);
            continue;
        };
        let Some((r, prev_end, prev_member)) =
            scan_rank(job, ri, slice, c, &mut fill, &mut out, &mut latencies)
        else {
            // Not the predicted schedule: the caller starts over.
            out.mispredicted = true;
            c.fill = fill;
            return out;
        };
        ranks_out[ri - first] = r;
        out.carry.push(prev_end);
        out.last.push(prev_member);
    }
    c.rank_first.push(c.members.len() as u32);
    // Fewer members than predicted: fewer ops than last time.
    if job.predicted && c.members.len() != n_members {
        out.mispredicted = true;
    }
    c.fill = fill;
    out
}

/// Readies a chunk for pass 1b: the counting sort of its keys by slot, unless the map is
/// predicted (then the previous iteration's order stands, and every member's slot is
/// checked against it), and its buffers emptied. Returns how many members the chunk will
/// have and the sort's cursors (one per slot).
fn prepare(job: &ScanJob, c: &mut Chunk, first_rank: usize) -> (usize, Vec<u32>) {
    let (map, n_slots, predicted) = (job.map, job.n_slots, job.predicted);
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
    c.first_rank = first_rank as u32;
    c.rank_first.clear();
    c.rank_durations.clear();
    c.group_run.clear();
    (n_members, fill)
}

/// Scratch for a rank's latencies, reused from rank to rank. Integer latencies: their
/// medians select on integers, cheaper than on floats.
#[derive(Default)]
struct Latencies {
    /// Issue latency (GPU start minus CPU launch) of each compute op.
    issue: Vec<i64>,
    /// Interval between the launch of a compute op and the launch of the op after it.
    launch_gaps: Vec<i64>,
}

/// One rank's sync ops as the scan goes: what its next member needs to know.
struct SyncState {
    rank_index: u32,
    /// When its previous sync op ended (or its iteration began).
    prev_end: Option<i64>,
    /// Self time since its previous sync op of 3+ members: waiting inside P2P exchanges
    /// in between is excluded, being late to them is not.
    acc: Option<i64>,
    /// Id of its last member, `u32::MAX` before the first.
    prev_member: u32,
    /// Where its op groups start in the chunk, and the last two it used.
    first_group: usize,
    recent_groups: [usize; 2],
}

/// One rank's ops of the iteration, in order: its figures, its compute names and host
/// ops into `out`, its members and op groups into the chunk. Returns its figures, when
/// its last sync op ended, and its last member's id; `None` when a member does not fit
/// the predicted slot map.
#[inline]
fn scan_rank(
    job: &ScanJob,
    ri: usize,
    slice: &RankSlice,
    c: &mut Chunk,
    fill: &mut [u32],
    out: &mut RankPass,
    latencies: &mut Latencies,
) -> Option<(RankIteration, Option<i64>, u32)> {
    let (iteration, carry) = (job.iteration, job.carry);
    let mut r = RankIteration {
        start_ns: slice.span.map(|s| s.start_ns),
        end_ns: slice.span.and_then(|s| s.end_ns),
        ..RankIteration::default()
    };
    let (prev_end, acc) = match slice.span {
        Some(s) => (
            Some(carry[ri].map_or(s.start_ns, |c| c.max(s.start_ns))),
            Some(0i64),
        ),
        None => (carry[ri], carry[ri].map(|_| 0)),
    };
    let mut sync = SyncState {
        rank_index: ri as u32,
        prev_end,
        acc,
        prev_member: u32::MAX,
        first_group: c.groups.len(),
        recent_groups: [usize::MAX; 2],
    };
    let Latencies { issue, launch_gaps } = latencies;
    issue.clear();
    let (mut busy_lo, mut busy_hi) = (i64::MIN, i64::MIN);
    let first_name = out.names.len();
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
                sync.member(job, c, fill, o, end, dur)?;
            }
        } else if o.kind == OpKind::Compute {
            if let Some(d) = dur {
                compute_op(&mut r, &mut out.names, first_name, issue, o, d, ri as u32);
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
        r.issue_p50_ns = median_i64(issue);
    }
    if !launch_gaps.is_empty() {
        r.launch_gap_p50_ns = median_i64(launch_gaps);
    }
    Some((r, sync.prev_end, sync.prev_member))
}

/// A compute op that ended, `d` long: the rank's compute time, FLOPs, its name's
/// statistics (the rank's start at `first_name` in `names`) and its issue latency.
#[inline(always)]
fn compute_op(
    r: &mut RankIteration,
    names: &mut Vec<NameStat>,
    first_name: usize,
    issue: &mut Vec<i64>,
    o: &Op,
    d: f64,
    rank_index: u32,
) {
    r.compute_ns += d;
    r.compute_ops += 1;
    if o.amount > 0 {
        r.flops += o.amount as f64;
        r.flops_ns += d;
    }
    match names[first_name..].iter_mut().find(|s| s.name == o.name) {
        Some(s) => {
            s.sum_ns += d;
            s.count += 1;
        }
        None => names.push(NameStat {
            rank_index,
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

impl SyncState {
    /// A sync op on a communicator (`end` and `dur` its end and duration, when it
    /// ended): its member, written to the chunk with its slot, op group and self time.
    /// `None` when it does not fit the predicted slot map.
    #[inline(always)]
    fn member(
        &mut self,
        job: &ScanJob,
        c: &mut Chunk,
        fill: &mut [u32],
        o: &Op,
        end: Option<i64>,
        dur: Option<f64>,
    ) -> Option<()> {
        let gap = self.prev_end.map_or(i64::MIN, |p| (o.start_ns - p).max(0));
        self.acc = match (self.acc, self.prev_end) {
            (Some(a), Some(p)) => Some(a + (o.start_ns - p).max(0)),
            _ => None,
        };
        let gap3 = if job
            .ctx
            .comm_sizes
            .get(o.comm as usize)
            .is_some_and(|&n| n >= 3)
        {
            let g = self.acc.unwrap_or(i64::MIN);
            self.acc = Some(0);
            g
        } else {
            i64::MIN
        };
        self.prev_end = end;
        if end.is_none() {
            self.acc = None;
        }
        let local = c.members.len() as u32;
        let (slot, first_of_slot) = place(job, c, fill, local, o)?;
        let gi = self.op_group(c, o);
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
            rank_index: self.rank_index,
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
        self.prev_member = c.base + local;
        Some(())
    }

    /// The index in the chunk of the rank's op group of `o` (its ops of this name on this
    /// communicator), added when new. The rank's last two groups first: its ops alternate
    /// between a few.
    #[inline(always)]
    fn op_group(&mut self, c: &mut Chunk, o: &Op) -> usize {
        let first_group = self.first_group;
        let recent_groups = &mut self.recent_groups;
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
                    rank_index: self.rank_index,
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
        gi
    }
}

/// The slot of member `local` (op `o`), and whether its op stands for its slot's
/// instance: on a predicted map, checked against the previous iteration's (`None` when it
/// does not fit); else counted into the chunk's slot order.
#[inline(always)]
fn place(
    job: &ScanJob,
    c: &mut Chunk,
    fill: &mut [u32],
    local: u32,
    o: &Op,
) -> Option<(usize, bool)> {
    if job.predicted {
        let known = c.slot_of.get(local as usize).copied();
        match (job.map.dense_slot(o.comm, o.seq), known) {
            (Some(s), Some(k)) if k & !FIRST_OF_SLOT == s as u32 => {
                Some((s, k & FIRST_OF_SLOT != 0))
            }
            _ => None,
        }
    } else {
        let s = job.map.slot(o.comm, o.seq);
        let at = fill[s];
        fill[s] += 1;
        c.order[at as usize] = local;
        let first = at == c.starts[s];
        c.slot_of
            .push(s as u32 | if first { FIRST_OF_SLOT } else { 0 });
        Some((s, first))
    }
}
