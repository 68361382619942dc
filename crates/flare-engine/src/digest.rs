//! One iteration, preprocessed once when it arrives.
//!
//! The engine never keeps raw ops: each iteration is reduced to an [`IterationDigest`]
//! (per-rank figures, the collective *instances* with their arrivals and transfer times,
//! and what the hang detector needs), so a window of 20 iterations of a 10,000-rank job
//! costs tens of megabytes instead of gigabytes, and a new iteration costs one pass over
//! its own ops. Offline diagnosis feeds a trace's iterations through the same code.
//!
//! Building a digest takes three passes, split over threads:
//! 1. per rank: its ops in order (self time before each sync op, compute, host phases,
//!    issue latency, busy time), producing one *member* record per sync op;
//! 2. grouping: members ordered by (communicator, sequence number) into instances, by
//!    counting sort over each communicator's sequence range (the members themselves stay
//!    in rank order; the order is an index, kept while the schedule repeats);
//! 3. per instance: arrivals, transfer time, and each member's self time against the
//!    other members' (the excess is delay the rank made itself).

use crate::context::JobContext;
use crate::stats::{median, median_i64};
use flare_model::{IterationSpan, Op, OpKind};

/// Host-phase kinds, in the order of [`RankIteration::host_ns`].
pub const HOST_KINDS: [OpKind; 5] = [
    OpKind::DataLoader,
    OpKind::GarbageCollection,
    OpKind::Optimizer,
    OpKind::Checkpoint,
    OpKind::HostOther,
];

/// Slot of a host kind in [`HOST_KINDS`].
pub fn host_slot(kind: OpKind) -> Option<usize> {
    HOST_KINDS.iter().position(|&k| k == kind)
}

/// Bins of the issue-latency histogram: log-spaced, 4 per power of two from 1 us.
pub const ISSUE_BINS: usize = 48;

/// The histogram bin of an issue latency in ns.
pub fn issue_bin(ns: f64) -> usize {
    if ns <= 1e3 {
        return 0;
    }
    ((4.0 * (ns / 1e3).log2()) as usize + 1).min(ISSUE_BINS - 1)
}

/// The lower edge of an issue-latency bin, ns.
pub fn issue_bin_floor(bin: usize) -> f64 {
    if bin == 0 {
        0.0
    } else {
        1e3 * 2f64.powf((bin - 1) as f64 / 4.0)
    }
}

/// One collective or P2P exchange: the same (communicator, sequence number) on every member.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub comm: u32,
    pub seq: u32,
    pub iteration: u32,
    pub kind: OpKind,
    pub name: u32,
    pub bytes: u64,
    /// Members the communicator has.
    pub expected: u32,
    /// Members the communicator has that the trace holds data for.
    pub expected_traced: u32,
    /// Members that recorded the op.
    pub present: u32,
    pub in_flight: u32,
    pub last_arrival: i64,
    pub second_last_arrival: i64,
    /// Rank id of the last member to arrive.
    pub last_rank: u32,
    /// Median end over members, when every present member finished.
    pub end: Option<i64>,
}

impl Instance {
    /// Time from the last arrival to the end: the transfer itself, without waiting.
    pub fn transfer_ns(&self) -> Option<i64> {
        self.end.map(|e| (e - self.last_arrival).max(0))
    }

    /// Every member the trace could hold recorded it.
    pub fn complete(&self) -> bool {
        self.present == self.expected_traced
    }

    /// The transfer time of an instance it can be compared by: complete, with 2 or
    /// more members, ended.
    pub fn compared_transfer(&self) -> Option<i64> {
        if self.complete() && self.present >= 2 {
            self.transfer_ns()
        } else {
            None
        }
    }
}

/// The last op a rank recorded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LastOp {
    pub kind: OpKind,
    pub name: u32,
    pub iteration: u32,
    pub ended: bool,
}

/// One rank's figures for one iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankIteration {
    /// The rank's iteration span, when it recorded one.
    pub start_ns: Option<i64>,
    /// `None` while unfinished (or without a span).
    pub end_ns: Option<i64>,
    pub ops: u32,
    pub compute_ns: f64,
    pub compute_ops: u32,
    /// FLOPs of compute ops that carry them, and those ops' time.
    pub flops: f64,
    pub flops_ns: f64,
    /// Time inside sync ops (collectives and P2P), ns.
    pub sync_ns: f64,
    /// The part of it spent waiting for the last member to arrive, ns.
    pub wait_ns: f64,
    /// Bytes x bus factor of its completed collectives, and their transfer time.
    pub bus_bytes: f64,
    pub bus_ns: f64,
    /// Host-phase time per [`HOST_KINDS`] slot, ns.
    pub host_ns: [f64; 5],
    /// Host-phase time beyond the median of the same phase (by name) on all ranks, ns.
    pub host_excess_ns: [f64; 5],
    /// Time covered by at least one traced op, ns.
    pub busy_ns: f64,
    /// Median issue latency (GPU start minus CPU launch) of its compute ops, ns.
    pub issue_p50_ns: f64,
    pub issue_hist: [u16; ISSUE_BINS],
    /// Median interval between the CPU launch of a compute op and the launch of the op
    /// after it, ns: how fast its CPU issues work (long on a launch-bound rank).
    pub launch_gap_p50_ns: f64,
    /// Compute ops with a launch time, and those that started within four times the
    /// rank's quickest start of the iteration (launched just in time: the GPU waited).
    pub issue_count: u32,
    pub immediate_launches: u32,
    /// A sync op of this rank never ended.
    pub stuck: bool,
    pub last_op: Option<LastOp>,
}

impl Default for RankIteration {
    fn default() -> Self {
        RankIteration {
            start_ns: None,
            end_ns: None,
            ops: 0,
            compute_ns: 0.0,
            compute_ops: 0,
            flops: 0.0,
            flops_ns: 0.0,
            sync_ns: 0.0,
            wait_ns: 0.0,
            bus_bytes: 0.0,
            bus_ns: 0.0,
            host_ns: [0.0; 5],
            host_excess_ns: [0.0; 5],
            busy_ns: 0.0,
            issue_p50_ns: f64::NAN,
            launch_gap_p50_ns: f64::NAN,
            issue_count: 0,
            immediate_launches: 0,
            issue_hist: [0; ISSUE_BINS],
            stuck: false,
            last_op: None,
        }
    }
}

impl RankIteration {
    pub fn host_total(&self) -> f64 {
        self.host_ns.iter().sum()
    }

    /// Length of its iteration span, when finished.
    pub fn span_ns(&self) -> Option<f64> {
        match (self.start_ns, self.end_ns) {
            (Some(s), Some(e)) if e > s => Some((e - s) as f64),
            _ => None,
        }
    }
}

/// One rank's self time in one iteration: the time before its sync ops (of 3+ members)
/// beyond the other members' median, and the matching sum of those medians (the self
/// time expected of it), ns. Kept apart from [`RankIteration`]: the slow-rank detector
/// reads it for every rank and iteration of the window on each diagnosis.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SelfTime {
    pub excess_ns: f64,
    pub expected_ns: f64,
}

impl SelfTime {
    /// Excess over expected; NaN without an expected self time.
    pub fn relative(&self) -> f64 {
        if self.expected_ns > 0.0 {
            self.excess_ns / self.expected_ns
        } else {
            f64::NAN
        }
    }
}

/// What the window's per-rank metrics ([`crate::detectors::metrics`]) sum from one
/// rank's iteration, kept apart from [`RankIteration`] so that each diagnosis reads one
/// cache line per rank and iteration instead of the whole record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankFigures {
    pub flops: f64,
    pub flops_ns: f64,
    pub bus_bytes: f64,
    pub bus_ns: f64,
    /// Busy time within its span, and the span; both NaN without a finished span.
    pub busy_ns: f64,
    pub span_ns: f64,
    /// Mean compute-kernel time per unit of its replica's work (`load`); NaN without
    /// compute ops.
    pub kernel_ns: f64,
    pub issued: u32,
    pub immediate: u32,
}

impl RankFigures {
    pub fn of(r: &RankIteration, load: f64) -> Self {
        let span = r.span_ns();
        RankFigures {
            flops: r.flops,
            flops_ns: r.flops_ns,
            bus_bytes: r.bus_bytes,
            bus_ns: r.bus_ns,
            busy_ns: span.map_or(f64::NAN, |s| r.busy_ns.min(s)),
            span_ns: span.unwrap_or(f64::NAN),
            kernel_ns: if r.compute_ops > 0 {
                r.compute_ns / r.compute_ops as f64 / load
            } else {
                f64::NAN
            },
            issued: r.issue_count,
            immediate: r.immediate_launches,
        }
    }
}

/// Total duration and count of one compute op name on one rank in one iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NameStat {
    pub rank_index: u32,
    pub name: u32,
    pub sum_ns: f64,
    pub count: u32,
}

/// An instance some members are still in at the end of the iteration's data.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlight {
    pub instance: Instance,
    /// Rank ids that arrived.
    pub arrived: Vec<u32>,
}

/// Everything the detectors need from one iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct IterationDigest {
    pub iteration: u32,
    /// Median over ranks of their own iteration span; `None` when some rank never
    /// finished it or no rank recorded a span.
    pub duration_ns: Option<f64>,
    /// Per rank index of the job context.
    pub ranks: Vec<RankIteration>,
    /// Compute ops by name, grouped by rank index (ascending).
    pub compute_names: Vec<NameStat>,
    /// Instances some members are still in (the others are in [`Members::instances`]
    /// while the iteration is analysed, and not kept).
    pub in_flight: Vec<InFlight>,
    /// Instances in the iteration, and those every member the trace holds recorded and
    /// completed (the ones that can be compared and searched).
    pub n_instances: u32,
    pub complete_instances: u32,
    /// Per communicator with ops in the iteration: (communicator, lowest sequence number,
    /// highest). Overlapping ranges in two iterations mean an instance was split between
    /// them (members tagged with different iterations).
    pub seq_ranges: Vec<(u32, u32, u32)>,
    /// Median and robust deviation (scaled MAD) over ranks of their relative self-time
    /// excess (NaN when no rank has one).
    pub excess_median: f64,
    pub excess_mad: f64,
    /// Per (peer group, compute op name): the median over the group's ranks of the op's
    /// mean duration, ns; sorted. `name == u32::MAX` holds the median issue latency,
    /// `u32::MAX - 1` the median launch interval.
    pub peer_medians: Vec<(u32, u32, f64)>,
    /// Per communicator with complete transfers comparable to others' (the same op kind,
    /// bytes and group size on 3 or more communicators in the iteration): the median of
    /// its transfer times over the class median, by communicator id.
    pub comm_transfer: Vec<(u32, f32)>,
    /// Per class of comparable instances (op kind, bytes, group size, pods spanned): the
    /// median transfer time and the instance count, to weigh what crossing pods costs.
    pub span_transfer: Vec<SpanTransfer>,
    /// What the graph search blamed this iteration's waiting and slow transfers on.
    pub blame: Vec<crate::graph::Blame>,
    /// Op groups judged abnormal, and those the classifier scored.
    pub abnormal_groups: u32,
    pub scored_groups: u32,
    /// The most abnormal groups: (rank index, communicator, name, mean over its class).
    pub abnormal_examples: Vec<(u32, u32, u32, f32)>,
    /// Drift factor of iteration time the classifier's thresholds were shifted by.
    pub drift: f32,
    /// Ops read.
    pub ops: u64,
    /// Ranks with a sync op that never ended (stuck), so that a window without any is
    /// told apart without reading every rank again.
    pub stuck_ranks: u32,
    /// Each data-parallel replica's compute load and the heaviest replica (see
    /// [`crate::detectors::imbalance::ReplicaLoads`]); empty without the layout.
    pub replica_load: Vec<f64>,
    /// Per rank index: its figures for the window's metrics.
    pub rank_figures: Vec<RankFigures>,
    /// Per rank index: its self time.
    pub self_time: Vec<SelfTime>,
    pub heaviest_replica: Option<(u32, f64)>,
}

/// (op kind, bytes, group size, pods spanned, median transfer ns, instances).
pub type SpanTransfer = (OpKind, u64, u32, u32, f32, u32);

/// Whether some communicator's sequence numbers overlap between two digests: an
/// instance whose members were tagged with different iterations.
pub fn split_instances(digests: &[&IterationDigest]) -> bool {
    let mut seen: std::collections::HashMap<u32, Vec<(u32, u32)>> = Default::default();
    for d in digests {
        for &(c, lo, hi) in &d.seq_ranges {
            let v = seen.entry(c).or_default();
            if v.iter().any(|&(a, b)| lo <= b && a <= hi) {
                return true;
            }
            v.push((lo, hi));
        }
    }
    false
}

impl IterationDigest {
    /// A digest with nothing in it but the iteration's duration (for tests and for
    /// iterations a source reports only as a duration).
    pub fn empty(iteration: u32, duration_ns: Option<f64>, n_ranks: usize) -> Self {
        IterationDigest {
            iteration,
            duration_ns,
            ranks: vec![RankIteration::default(); n_ranks],
            compute_names: Vec::new(),
            in_flight: Vec::new(),
            n_instances: 0,
            complete_instances: 0,
            excess_median: f64::NAN,
            excess_mad: f64::NAN,
            peer_medians: Vec::new(),
            seq_ranges: Vec::new(),
            comm_transfer: Vec::new(),
            span_transfer: Vec::new(),
            blame: Vec::new(),
            abnormal_groups: 0,
            scored_groups: 0,
            abnormal_examples: Vec::new(),
            drift: 1.0,
            ops: 0,
            stuck_ranks: 0,
            replica_load: Vec::new(),
            heaviest_replica: None,
            rank_figures: vec![RankFigures::of(&RankIteration::default(), 1.0); n_ranks],
            self_time: vec![SelfTime::default(); n_ranks],
        }
    }

    /// The compute name statistics of one rank.
    pub fn names_of(&self, rank_index: usize) -> &[NameStat] {
        let ri = rank_index as u32;
        let lo = self.compute_names.partition_point(|s| s.rank_index < ri);
        let hi = self.compute_names.partition_point(|s| s.rank_index <= ri);
        &self.compute_names[lo..hi]
    }
}

/// One rank's ops for the iteration being digested: `ops` may hold ops of other
/// iterations too (they are skipped), `span` is its iteration span if it recorded one.
#[derive(Clone, Copy, Debug)]
pub struct RankSlice<'a> {
    pub rank_index: usize,
    pub ops: &'a [Op],
    pub span: Option<IterationSpan>,
}

/// One sync op of one rank, as the instance pass reads it. 32 bytes on a 32-byte
/// boundary: the instance pass reads members out of order, one cache line each. What
/// only the graph search needs is kept apart ([`Members::gap`], [`Members::prev`]).
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
pub struct Member {
    pub rank_index: u32,
    /// Its op group, an index into its chunk's groups (global ids are offset by the
    /// chunk's first: see [`Members::group_chunks`]).
    pub group: u32,
    pub arrival: i64,
    /// `Op::IN_FLIGHT` while in flight.
    pub end: i64,
    /// Time outside sync ops since its previous sync op of 3+ members (P2P waits
    /// excluded), `i64::MIN` when unknown or when this op has fewer than 3 members.
    pub gap3: i64,
}

/// What an instance takes from its first member's op. Kept per slot, not per member:
/// every byte of a member costs memory traffic.
#[derive(Clone, Copy, Debug)]
struct SlotOp {
    bytes: u64,
    name: u32,
    kind: OpKind,
}

/// One rank's ops of one name on one communicator in one iteration: Holmes' unit of
/// abnormal-op detection ("an op on a GPU").
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpGroup {
    pub rank_index: u32,
    pub comm: u32,
    pub name: u32,
    pub kind: OpKind,
    pub bytes: u64,
    /// Ops that ended, and those in flight.
    pub n: u32,
    pub in_flight: u32,
    /// Durations (arrival to end) of the ended ops, ns.
    pub sum_d: f64,
    pub sum_d2: f64,
    pub min_d: f64,
    pub max_d: f64,
    /// Waiting for the last member (sum), and transfer after it (sum), ns.
    pub sum_wait: f64,
    pub sum_transfer: f64,
}

impl OpGroup {
    pub fn mean_d(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum_d / self.n as f64
        }
    }

    pub fn std_d(&self) -> f64 {
        if self.n < 2 {
            return 0.0;
        }
        let m = self.mean_d();
        (self.sum_d2 / self.n as f64 - m * m).max(0.0).sqrt()
    }
}

/// One thread's members: the ranks of one contiguous range, rank by rank in op order,
/// and their order by instance slot (within a slot, by rank index).
///
/// Members stay in the order the per-rank pass makes them: written in place, they stream
/// out; scattered into slot order, nearly every one missed the cache (a third of the
/// pass, and most of it when the machine's memory is contended). The instance pass reads
/// them through `order` instead, and reads gather better than writes scatter. In steady
/// state the schedule repeats, so `order` is kept from the previous iteration and only
/// checked, member by member, against `slot_of`.
#[derive(Default)]
struct Chunk {
    members: Vec<Member>,
    /// Per member: time since its rank's previous sync op ended (or its iteration
    /// began), `i64::MIN` when unknown.
    gaps: Vec<i64>,
    /// Member indexes in slot order: slot `s` holds `order[starts[s]..starts[s + 1]]`.
    order: Vec<u32>,
    /// Per member: its slot, with [`FIRST_OF_SLOT`] set on the first member of its slot
    /// in the chunk.
    slot_of: Vec<u32>,
    starts: Vec<u32>,
    /// The chunk's first rank index, and where each of its ranks' members start (one
    /// more entry at the end).
    first_rank: u32,
    rank_first: Vec<u32>,
    /// Per slot with members in the chunk: its first member's op.
    slot_op: Vec<SlotOp>,
    /// Ids are `base + index`.
    base: u32,
    /// The (communicator, sequence) key of every sync op of the chunk's ranks, in op order.
    keys: Vec<(u32, u32)>,
    lo: Vec<u32>,
    hi: Vec<u32>,
    unknown_comm: bool,
    /// Scratch for the counting sort.
    fill: Vec<u32>,
    /// The chunk's op groups, rank by rank; ids are `group_base + index`.
    groups: Vec<OpGroup>,
    group_base: u32,
    /// (op group, duration) of every ended sync op in op order, rank by rank, and per op
    /// group where its rank's run starts and how long it is (for quartiles on demand).
    rank_durations: Vec<(u32, f32)>,
    group_run: Vec<(u32, u32)>,
}

/// Marks, in [`Chunk::slot_of`], the member whose op stands for its slot's instance.
const FIRST_OF_SLOT: u32 = 1 << 31;

/// The members of one iteration grouped into instances. Kept while the iteration is
/// analysed (the graph search walks them) and reused for the next one, so that a
/// streaming engine does not allocate (and fault in) fresh memory every iteration.
#[derive(Default)]
pub struct Members {
    chunks: Vec<Chunk>,
    /// Per slot: its instance index, `u32::MAX` for an empty slot.
    slot_instance: Vec<u32>,
    /// Per instance: its slot.
    instance_slot: Vec<u32>,
    /// Per rank index: id of its last member, `u32::MAX` if none.
    last_of_rank: Vec<u32>,
    /// Per thread of the instance pass: its sums per rank and per op group.
    sums: Vec<InstanceSums>,
    /// Per part of the instance pass: what it found besides the instances.
    parts: Vec<InstancePart>,
    /// The iteration's instances, in slot order (by communicator, then sequence).
    pub instances: Vec<Instance>,
    /// Per instance: its transfer time over the median of the same op (kind, bytes, group
    /// size) on other communicators in the iteration (1.0 without comparison).
    pub transfer_ratio: Vec<f32>,
    /// How long the last build's phases took.
    pub times: PhaseTimes,
    /// The iteration's slot map, to find the same op on another communicator (and to
    /// predict the next iteration's).
    map: SlotMap,
    /// (ranks, threads) of the last build.
    shape: (usize, usize),
    /// Iterations built on a predicted slot map.
    pub predicted: u64,
    /// Buffers of a digest that left the window, reused for the next one.
    pub(crate) spare_ranks: Vec<RankIteration>,
    pub(crate) spare_names: Vec<NameStat>,
}

impl Members {
    /// Keeps the buffers of a digest that left the window for the next iteration.
    pub fn recycle(&mut self, d: IterationDigest) {
        self.spare_ranks = d.ranks;
        self.spare_names = d.compute_names;
    }
}

impl Chunk {
    /// Indexes of the chunk's members of slot `s`, in rank order.
    fn in_slot(&self, s: usize) -> &[u32] {
        &self.order[self.starts[s] as usize..self.starts[s + 1] as usize]
    }
}

impl Members {
    /// The chunk holding member `id`, and the member's index in it.
    fn locate(&self, id: u32) -> (&Chunk, usize) {
        let c = &self.chunks[self.chunks.partition_point(|c| c.base <= id) - 1];
        (c, (id - c.base) as usize)
    }

    /// The member with this id.
    pub fn get(&self, id: u32) -> &Member {
        let (c, local) = self.locate(id);
        &c.members[local]
    }

    /// Ids of the members of instance `i`, in rank-index order.
    pub fn of_instance(&self, i: usize) -> impl Iterator<Item = u32> + '_ {
        let s = self.instance_slot[i] as usize;
        self.chunks
            .iter()
            .flat_map(move |c| c.in_slot(s).iter().map(move |&k| c.base + k))
    }

    /// Instance index of the member with this id.
    pub fn instance_of(&self, id: u32) -> u32 {
        let (c, local) = self.locate(id);
        let slot = c.slot_of[local] & !FIRST_OF_SLOT;
        self.slot_instance[slot as usize]
    }

    /// Id of the same rank's previous member in the iteration, if any (members are kept
    /// rank by rank in op order).
    pub fn prev(&self, id: u32) -> Option<u32> {
        let (c, local) = self.locate(id);
        (local > 0 && c.members[local - 1].rank_index == c.members[local].rank_index)
            .then(|| id - 1)
    }

    /// Time since member `id`'s rank's previous sync op ended (or its iteration began),
    /// ns; `None` when unknown.
    pub fn gap(&self, id: u32) -> Option<i64> {
        let (c, local) = self.locate(id);
        Some(c.gaps[local]).filter(|&g| g != i64::MIN)
    }

    /// The instances with members in a flagged op group (`abnormal`, by global group
    /// id), in instance order: (instance, how many such members, how long they waited
    /// for the last arrival in all, ns). Reads only the members of ranks with a flagged
    /// group: a rank's op groups and members are both kept together.
    pub fn abnormal_waits(
        &self,
        abnormal: &[bool],
        instances: &[Instance],
    ) -> Vec<(u32, u32, f64)> {
        let mut hits: Vec<(u32, f64)> = Vec::new();
        for c in &self.chunks {
            let flagged = |g: u32| {
                abnormal
                    .get(c.group_base as usize + g as usize)
                    .copied()
                    .unwrap_or(false)
            };
            let mut k = 0;
            while k < c.groups.len() {
                let rank = c.groups[k].rank_index;
                let mut any = false;
                while k < c.groups.len() && c.groups[k].rank_index == rank {
                    any |= flagged(k as u32);
                    k += 1;
                }
                if !any {
                    continue;
                }
                let at = (rank - c.first_rank) as usize;
                let (lo, hi) = (c.rank_first[at] as usize, c.rank_first[at + 1] as usize);
                for (local, m) in c.members[lo..hi].iter().enumerate() {
                    if !flagged(m.group) {
                        continue;
                    }
                    let slot = c.slot_of[lo + local] & !FIRST_OF_SLOT;
                    let i = self.slot_instance[slot as usize];
                    if let Some(inst) = instances.get(i as usize) {
                        hits.push((i, (inst.last_arrival - m.arrival).max(0) as f64));
                    }
                }
            }
        }
        // Stable: an instance's members stay in rank order.
        hits.sort_by_key(|h| h.0);
        let mut out: Vec<(u32, u32, f64)> = Vec::new();
        for (i, wait) in hits {
            match out.last_mut() {
                Some(last) if last.0 == i => {
                    last.1 += 1;
                    last.2 += wait;
                }
                _ => out.push((i, 1, wait)),
            }
        }
        out
    }

    /// Id of a rank's last member of the iteration (walk back with [`Members::prev`]).
    pub fn last_of_rank(&self, rank_index: usize) -> Option<u32> {
        self.last_of_rank
            .get(rank_index)
            .copied()
            .filter(|&m| m != u32::MAX)
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.members.len()).sum()
    }

    /// Op groups of the iteration, rank by rank: `(global id, group)`.
    pub fn groups(&self) -> impl Iterator<Item = (u32, &OpGroup)> + '_ {
        self.chunks.iter().flat_map(|c| {
            c.groups
                .iter()
                .enumerate()
                .map(move |(k, g)| (c.group_base + k as u32, g))
        })
    }

    /// The op groups of each thread's chunk: `(first global id, groups)`.
    pub fn group_chunks(&self) -> impl Iterator<Item = (u32, &[OpGroup])> + '_ {
        self.chunks
            .iter()
            .map(|c| (c.group_base, c.groups.as_slice()))
    }

    /// Op groups in all.
    pub fn n_groups(&self) -> usize {
        self.chunks.iter().map(|c| c.groups.len()).sum()
    }

    /// The op group with this global id.
    pub fn group(&self, id: u32) -> &OpGroup {
        let t = self.chunks.partition_point(|c| c.group_base <= id) - 1;
        &self.chunks[t].groups[(id - self.chunks[t].group_base) as usize]
    }

    /// The instance holding the op of `comm` that comes `offset` ops after its first in
    /// the iteration: the same point of the schedule on another communicator.
    pub fn instance_at(&self, comm: u32, offset: u32) -> Option<usize> {
        let first = self.map.first_seq(comm)?;
        let slot = self.map.find(comm, first.checked_add(offset)?)?;
        self.slot_instance
            .get(slot)
            .copied()
            .filter(|&i| i != u32::MAX)
            .map(|i| i as usize)
    }

    /// How many ops of its communicator precede the op `seq` of `comm` in the iteration.
    pub fn offset_of(&self, comm: u32, seq: u32) -> u32 {
        self.map
            .first_seq(comm)
            .map_or(0, |f| seq.saturating_sub(f))
    }

    /// Durations (arrival to end) of the ended ops of an op group, in op order.
    pub fn durations(&self, group_id: u32, out: &mut Vec<f64>) {
        out.clear();
        let t = self.chunks.partition_point(|c| c.group_base <= group_id) - 1;
        let c = &self.chunks[t];
        let local = group_id - c.group_base;
        let (start, len) = c.group_run[local as usize];
        out.extend(
            c.rank_durations[start as usize..(start + len) as usize]
                .iter()
                .filter(|x| x.0 == local)
                .map(|x| x.1 as f64),
        );
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Wall time of the phases of the last digest built, for the speed benchmark.
#[derive(Clone, Copy, Debug, Default)]
pub struct PhaseTimes {
    /// Pass 1a: the keys of sync ops and each communicator's sequence range.
    pub keys: std::time::Duration,
    /// Pass 1b (per rank) and the host-phase medians.
    pub ranks: std::time::Duration,
    /// Pass 2: per instance.
    pub instances: std::time::Duration,
    /// Gathering the results.
    pub merge: std::time::Duration,
    /// The iteration's summaries: transfer ratios, peer medians, spans.
    pub summaries: std::time::Duration,
    /// Abnormal-op detection, the graph search, and the history update.
    pub abnormal: std::time::Duration,
    pub graph: std::time::Duration,
    pub history: std::time::Duration,
}

/// Per-rank state carried from one iteration to the next: when its last sync op ended.
#[derive(Clone, Debug, Default)]
pub struct Carry {
    pub last_sync_end: Vec<Option<i64>>,
}

impl Carry {
    pub fn new(n_ranks: usize) -> Self {
        Carry {
            last_sync_end: vec![None; n_ranks],
        }
    }
}

/// Runs `f` over `n` items split into contiguous ranges, one per thread, and returns the
/// results in range order.
pub(crate) fn par_ranges<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(std::ops::Range<usize>) -> T + Sync,
) -> Vec<T> {
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        return vec![f(0..n)];
    }
    let per = n.div_ceil(threads);
    // The calling thread takes the first range itself (see `par_each`).
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads)
            .map(|t| {
                let lo = (t * per).min(n);
                let hi = ((t + 1) * per).min(n);
                let f = &f;
                s.spawn(move || f(lo..hi))
            })
            .collect();
        let mut out = vec![f(0..per.min(n))];
        out.extend(
            handles
                .into_iter()
                .map(|h| h.join().expect("engine worker panicked")),
        );
        out
    })
}

/// Runs `f` on each item of `items` on its own thread (one item per thread).
pub(crate) fn par_each<T: Send>(items: &mut [T], f: impl Fn(usize, &mut T) + Sync) {
    if items.len() <= 1 {
        if let Some(x) = items.first_mut() {
            f(0, x);
        }
        return;
    }
    // The calling thread takes the first item itself rather than wait: on this machine
    // threads it spawned and waited on were measured to take up to twice as long over
    // the same share (the per-rank pass: 25 against 19 ms).
    let (first, rest) = items.split_first_mut().expect("two items or more");
    std::thread::scope(|s| {
        for (i, x) in rest.iter_mut().enumerate() {
            let f = &f;
            s.spawn(move || f(i + 1, x));
        }
        f(0, first);
    });
}

/// Threads for an iteration of this many ops: spawning is not worth it for small ones.
pub(crate) fn threads_for(ops: usize, configured: usize) -> usize {
    if ops < 40_000 {
        1
    } else {
        configured.max(1)
    }
}

/// Maps (communicator, sequence) to instance slots: a dense range per communicator, or
/// for sparse sequence numbers the position in the sorted list of distinct keys.
enum SlotMap {
    Dense {
        base: Vec<u32>,
        lo: Vec<u32>,
        hi: Vec<u32>,
        /// (first slot, communicator) of the communicators with ops, by first slot.
        firsts: Vec<(u32, u32)>,
        /// Slots in all.
        n: usize,
    },
    Sparse {
        keys: Vec<(u32, u32)>,
    },
}

impl Default for SlotMap {
    fn default() -> Self {
        SlotMap::Sparse { keys: Vec::new() }
    }
}

impl SlotMap {
    /// The (communicator, sequence) of a slot.
    fn key(&self, slot: usize) -> (u32, u32) {
        match self {
            SlotMap::Dense { lo, firsts, .. } => {
                let k = firsts.partition_point(|f| f.0 as usize <= slot) - 1;
                let (first, comm) = firsts[k];
                (comm, lo[comm as usize] + (slot as u32 - first))
            }
            SlotMap::Sparse { keys } => keys[slot],
        }
    }

    /// The keys of slots `from`, `from + 1`, ... in order: one search, then a walk.
    fn keys_from(&self, from: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
        let mut k = match self {
            SlotMap::Dense { firsts, .. } => firsts.partition_point(|f| f.0 as usize <= from),
            SlotMap::Sparse { .. } => 0,
        }
        .saturating_sub(1);
        (from..).map_while(move |slot| match self {
            SlotMap::Dense { lo, firsts, .. } => {
                while k + 1 < firsts.len() && firsts[k + 1].0 as usize <= slot {
                    k += 1;
                }
                let (first, comm) = *firsts.get(k)?;
                Some((comm, lo[comm as usize] + (slot as u32 - first)))
            }
            SlotMap::Sparse { keys } => keys.get(slot).copied(),
        })
    }

    /// The slot of a key, if the iteration has it.
    fn find(&self, comm: u32, seq: u32) -> Option<usize> {
        match self {
            SlotMap::Dense { base, lo, n, .. } => {
                let l = *lo.get(comm as usize)?;
                if l == u32::MAX || seq < l {
                    return None;
                }
                let slot = (base[comm as usize] + (seq - l)) as usize;
                // The next communicator's range starts where this one's ends.
                (slot < *n && self.key(slot) == (comm, seq)).then_some(slot)
            }
            SlotMap::Sparse { keys } => keys.binary_search(&(comm, seq)).ok(),
        }
    }

    /// The first sequence number of a communicator in the iteration.
    fn first_seq(&self, comm: u32) -> Option<u32> {
        match self {
            SlotMap::Dense { lo, .. } => lo.get(comm as usize).copied().filter(|&l| l != u32::MAX),
            SlotMap::Sparse { keys } => {
                let i = keys.partition_point(|k| k.0 < comm);
                keys.get(i).filter(|k| k.0 == comm).map(|k| k.1)
            }
        }
    }

    /// The next iteration's map if every communicator runs as many ops again, numbered
    /// on from this iteration's last (a training job repeats itself); `None` for a sparse
    /// map.
    fn predict_next(&self) -> Option<SlotMap> {
        let SlotMap::Dense {
            base,
            lo,
            hi,
            firsts,
            n,
        } = self
        else {
            return None;
        };
        let mut lo2 = lo.clone();
        let mut hi2 = hi.clone();
        for c in 0..lo.len() {
            if lo[c] != u32::MAX {
                let len = hi[c] - lo[c] + 1;
                lo2[c] = hi[c].checked_add(1)?;
                hi2[c] = hi[c].checked_add(len)?;
            }
        }
        Some(SlotMap::Dense {
            base: base.clone(),
            lo: lo2,
            hi: hi2,
            firsts: firsts.clone(),
            n: *n,
        })
    }

    /// The slot of a key in a dense map, `None` when out of its communicator's range.
    #[inline]
    fn dense_slot(&self, comm: u32, seq: u32) -> Option<usize> {
        match self {
            SlotMap::Dense { base, lo, hi, .. } => {
                let (l, h) = (*lo.get(comm as usize)?, hi[comm as usize]);
                (l != u32::MAX && seq >= l && seq <= h)
                    .then(|| (base[comm as usize] + (seq - l)) as usize)
            }
            SlotMap::Sparse { .. } => None,
        }
    }

    /// The (communicator, lowest, highest sequence) of each communicator with ops.
    fn ranges(&self) -> Vec<(u32, u32, u32)> {
        match self {
            SlotMap::Dense { lo, hi, .. } => (0..lo.len())
                .filter(|&c| lo[c] != u32::MAX)
                .map(|c| (c as u32, lo[c], hi[c]))
                .collect(),
            SlotMap::Sparse { keys } => {
                let mut out: Vec<(u32, u32, u32)> = Vec::new();
                for &(c, q) in keys {
                    match out.last_mut() {
                        Some(last) if last.0 == c => last.2 = q,
                        _ => out.push((c, q, q)),
                    }
                }
                out
            }
        }
    }

    #[inline]
    fn slot(&self, comm: u32, seq: u32) -> usize {
        match self {
            SlotMap::Dense { base, lo, .. } => {
                (base[comm as usize] + (seq - lo[comm as usize])) as usize
            }
            SlotMap::Sparse { keys } => keys
                .binary_search(&(comm, seq))
                .expect("every key was collected"),
        }
    }
}

/// A fast log2 in quarters for the issue histogram.
#[inline]
fn issue_bin_fast(ns: f64) -> usize {
    if ns <= 1e3 {
        return 0;
    }
    let x = ns / 1e3;
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let quarter = ((bits >> 50) & 0x3) as i64; // top two mantissa bits: an approximation
    ((4 * exp + quarter + 1).max(0) as usize).min(ISSUE_BINS - 1)
}

/// Pass 1a over one chunk of ranks: the keys of their sync ops and each
/// communicator's sequence range.
fn collect_keys(
    ctx: &JobContext,
    iteration: u32,
    by_index: &[Option<&RankSlice>],
    range: std::ops::Range<usize>,
    c: &mut Chunk,
) {
    let n_comms = ctx.communicators.len();
    c.keys.clear();
    c.lo.clear();
    c.lo.resize(n_comms, u32::MAX);
    c.hi.clear();
    c.hi.resize(n_comms, 0);
    c.unknown_comm = false;
    for slice in range.filter_map(|ri| by_index[ri]) {
        for o in slice.ops {
            if o.iteration != iteration || !o.kind.is_sync() || o.comm == Op::NO_COMM {
                continue;
            }
            c.keys.push((o.comm, o.seq));
            match c.lo.get_mut(o.comm as usize) {
                Some(l) => {
                    *l = (*l).min(o.seq);
                    let h = &mut c.hi[o.comm as usize];
                    *h = (*h).max(o.seq);
                }
                None => c.unknown_comm = true,
            }
        }
    }
}

fn slot_map(ctx: &JobContext, chunks: &[Chunk]) -> (SlotMap, usize, Vec<(u32, u32, u32)>) {
    let n_comms = ctx.communicators.len();
    let mut lo = vec![u32::MAX; n_comms];
    let mut hi = vec![0u32; n_comms];
    let mut unknown = false;
    let mut keys = 0usize;
    for c in chunks {
        unknown |= c.unknown_comm;
        keys += c.keys.len();
        for k in 0..n_comms {
            lo[k] = lo[k].min(c.lo[k]);
            hi[k] = hi[k].max(c.hi[k]);
        }
    }
    let mut ranges: Vec<(u32, u32, u32)> = (0..n_comms)
        .filter(|&k| lo[k] != u32::MAX)
        .map(|k| (k as u32, lo[k], hi[k]))
        .collect();
    let dense_slots: u64 = ranges.iter().map(|r| (r.2 - r.1) as u64 + 1).sum();
    if unknown || dense_slots > 4 * keys as u64 + 65_536 {
        let mut all: Vec<(u32, u32)> = chunks.iter().flat_map(|c| c.keys.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        if unknown {
            // Ranges of communicators the context does not know, for the split check.
            ranges.clear();
            let mut i = 0;
            while i < all.len() {
                let mut j = i;
                while j < all.len() && all[j].0 == all[i].0 {
                    j += 1;
                }
                ranges.push((all[i].0, all[i].1, all[j - 1].1));
                i = j;
            }
        }
        let n = all.len();
        return (SlotMap::Sparse { keys: all }, n, ranges);
    }
    let mut base = vec![0u32; n_comms];
    let mut firsts = Vec::with_capacity(ranges.len());
    let mut next = 0u32;
    for k in 0..n_comms {
        if lo[k] != u32::MAX {
            base[k] = next;
            firsts.push((next, k as u32));
            next += hi[k] - lo[k] + 1;
        }
    }
    (
        SlotMap::Dense {
            base,
            lo,
            hi,
            firsts,
            n: next as usize,
        },
        next as usize,
        ranges,
    )
}

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
fn scan_all(
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
struct RankPass {
    names: Vec<NameStat>,
    /// (rank index, host slot, name, duration)
    host_ops: Vec<(u32, u8, u32, f64)>,
    carry: Vec<Option<i64>>,
    last: Vec<u32>,
    /// The predicted slot map did not fit this iteration.
    mispredicted: bool,
}

/// Digests one iteration. `slices` hold every rank with data for it (any order);
/// `carry` holds each rank's last sync end from the previous iteration and is updated;
/// `members` is scratch space that holds this iteration's members afterwards.
pub fn build(
    ctx: &JobContext,
    iteration: u32,
    slices: &[RankSlice],
    carry: &mut Carry,
    threads: usize,
    members: &mut Members,
) -> IterationDigest {
    build_with(ctx, iteration, slices, carry, threads, members, true)
}

/// [`build`], choosing whether the previous iteration's slot layout may be reused.
pub fn build_with(
    ctx: &JobContext,
    iteration: u32,
    slices: &[RankSlice],
    carry: &mut Carry,
    threads: usize,
    members: &mut Members,
    predict: bool,
) -> IterationDigest {
    let n_ranks = ctx.n_ranks();
    let ops: usize = slices.iter().map(|s| s.ops.len()).sum();
    let threads = threads_for(ops, threads).min(n_ranks.max(1));
    let mut by_index: Vec<Option<&RankSlice>> = vec![None; n_ranks];
    for s in slices {
        if s.rank_index < n_ranks {
            by_index[s.rank_index] = Some(s);
        }
    }
    let per = n_ranks.div_ceil(threads).max(1);
    let range_of = |t: usize| (t * per).min(n_ranks)..((t + 1) * per).min(n_ranks);
    members.chunks.resize_with(threads, Chunk::default);

    let t0 = std::time::Instant::now();
    let carry_in = &carry.last_sync_end;
    let mut ranks = std::mem::take(&mut members.spare_ranks);
    ranks.clear();
    ranks.resize(n_ranks, RankIteration::default());
    // In steady state the previous iteration's slot map, numbered on, and its slot counts
    // fit this iteration: the key pass is skipped, and every key is checked (pass 1b
    // starts over with the key pass at the first that does not fit).
    let predicted = (predict && members.shape == (n_ranks, threads))
        .then(|| members.map.predict_next())
        .flatten()
        .filter(|p| match p {
            SlotMap::Dense { n, .. } => members.chunks.iter().all(|c| c.starts.len() == n + 1),
            SlotMap::Sparse { .. } => false,
        });
    // Pass 1b on a slot map, predicted or found by the key pass.
    let scan = |map: &SlotMap,
                n_slots: usize,
                chunks: &mut [Chunk],
                ranks: &mut [RankIteration],
                predicted: bool| {
        scan_all(
            ctx, iteration, &by_index, &range_of, map, n_slots, carry_in, chunks, ranks, predicted,
        )
    };
    let mut outcome = None;
    if let Some(map) = predicted {
        let n_slots = match &map {
            SlotMap::Dense { n, .. } => *n,
            SlotMap::Sparse { keys } => keys.len(),
        };
        let mut base = 0u32;
        for c in members.chunks.iter_mut() {
            c.base = base;
            base += c.starts[n_slots];
        }
        let passes = scan(&map, n_slots, &mut members.chunks, &mut ranks, true);
        if !passes.iter().any(|p| p.mispredicted) {
            members.predicted += 1;
            let ranges = map.ranges();
            outcome = Some((map, n_slots, ranges, passes, std::time::Duration::ZERO));
        }
    }
    let (map, n_slots, seq_ranges, passes, t1) = match outcome {
        Some(o) => o,
        None => {
            // Pass 1a: keys and sequence ranges.
            par_each(&mut members.chunks, |t, c| {
                collect_keys(ctx, iteration, &by_index, range_of(t), c)
            });
            let t1 = t0.elapsed();
            let (map, n_slots, seq_ranges) = slot_map(ctx, &members.chunks);
            let mut base = 0u32;
            for c in members.chunks.iter_mut() {
                c.base = base;
                base += c.keys.len() as u32;
            }
            // Pass 1b: per rank, members into slot order.
            let passes = scan(&map, n_slots, &mut members.chunks, &mut ranks, false);
            (map, n_slots, seq_ranges, passes, t1)
        }
    };
    members.shape = (n_ranks, threads);
    let mut names = std::mem::take(&mut members.spare_names);
    names.clear();
    let mut host_ops = Vec::new();
    members.last_of_rank.clear();
    let mut ri = 0;
    for p in passes {
        names.extend(p.names);
        host_ops.extend(p.host_ops);
        members.last_of_rank.extend(p.last);
        for c in p.carry {
            carry.last_sync_end[ri] = c;
            ri += 1;
        }
    }

    let mut group_base = 0u32;
    for c in members.chunks.iter_mut() {
        c.group_base = group_base;
        group_base += c.groups.len() as u32;
    }
    let n_groups = group_base as usize;
    // Host phases against the same phase on the other ranks.
    host_excess(&mut ranks, &mut host_ops);
    let t3 = t0.elapsed();

    // Pass 2: per instance, over slot ranges.
    let chunks = &members.chunks;
    // Parts of about as many members each.
    let n_parts = if threads > 1 {
        threads * PARTS_PER_THREAD
    } else {
        1
    };
    let before = |slot: usize| -> u64 { chunks.iter().map(|c| c.starts[slot] as u64).sum() };
    let total = before(n_slots);
    let mut bounds = vec![0usize];
    for t in 1..n_parts {
        let target = total * t as u64 / n_parts as u64;
        let (mut lo, mut hi) = (*bounds.last().expect("one bound"), n_slots);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if before(mid) < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        bounds.push(lo);
    }
    bounds.push(n_slots);
    // Each part writes its instances straight into its share of the iteration's array:
    // count them first (a slot with no member makes none). The array keeps its length
    // from the last iteration, so in steady state nothing is written twice.
    let made = |slot: usize| chunks.iter().any(|c| !c.in_slot(slot).is_empty());
    let counts: Vec<usize> = bounds
        .windows(2)
        .map(|w| (w[0]..w[1]).filter(|&s| made(s)).count())
        .collect();
    let n_instances: usize = counts.iter().sum();
    let mut instances = std::mem::take(&mut members.instances);
    // Every position is overwritten by its part.
    let unset = Instance {
        comm: 0,
        seq: 0,
        iteration,
        kind: OpKind::Compute,
        name: 0,
        bytes: 0,
        expected: 0,
        expected_traced: 0,
        present: 0,
        in_flight: 0,
        last_arrival: 0,
        second_last_arrival: 0,
        last_rank: 0,
        end: None,
    };
    instances.resize(n_instances, unset);
    members.instance_slot.resize(n_instances, 0);
    members.parts.resize_with(n_parts, InstancePart::default);
    members.sums.resize_with(threads, InstanceSums::default);
    type PartWork<'w> = (&'w mut InstancePart, &'w mut [Instance], &'w mut [u32]);
    let mut work: Vec<std::sync::Mutex<PartWork>> = Vec::with_capacity(n_parts);
    {
        let (mut inst_rest, mut slot_rest) = (&mut instances[..], &mut members.instance_slot[..]);
        for (k, part) in members.parts.iter_mut().enumerate() {
            let (i, ir) = inst_rest.split_at_mut(counts[k]);
            let (sl, sr) = slot_rest.split_at_mut(counts[k]);
            (inst_rest, slot_rest) = (ir, sr);
            part.slots = bounds[k]..bounds[k + 1];
            work.push(std::sync::Mutex::new((part, i, sl)));
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    par_each(&mut members.sums, |_, sums| {
        sums.per_rank.clear();
        sums.per_rank.resize(n_ranks, [0.0; 5]);
        sums.per_group.clear();
        sums.per_group.resize(n_groups, [0.0; 2]);
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(part) = work.get(k) else { break };
            // Each part is taken once: the lock is never contended.
            let mut part = part.lock().unwrap_or_else(|e| e.into_inner());
            let (part, inst, slots) = &mut *part;
            instance_pass(ctx, iteration, chunks, &map, part, inst, slots, sums);
        }
    });
    drop(work);
    // Waiting and transfer per op group, from every thread's share of the instances.
    for res in &members.sums {
        for c in members.chunks.iter_mut() {
            let base = c.group_base as usize;
            for (k, g) in c.groups.iter_mut().enumerate() {
                let acc = res.per_group[base + k];
                g.sum_wait += acc[0];
                g.sum_transfer += acc[1];
            }
        }
    }
    let t4 = t0.elapsed();
    let mut in_flight = Vec::new();
    let mut self_time = vec![SelfTime::default(); n_ranks];
    members.slot_instance.clear();
    members.slot_instance.resize(n_slots, u32::MAX);
    for (i, &slot) in members.instance_slot.iter().enumerate() {
        members.slot_instance[slot as usize] = i as u32;
    }
    let mut base = 0usize;
    for (part, &count) in members.parts.iter_mut().zip(&counts) {
        for (k, arrived) in part.arrived.drain(..) {
            in_flight.push(InFlight {
                instance: instances[base + k as usize].clone(),
                arrived,
            });
        }
        base += count;
    }
    for res in &members.sums {
        for (ri, acc) in res.per_rank.iter().enumerate() {
            let r = &mut ranks[ri];
            self_time[ri].excess_ns += acc[0];
            self_time[ri].expected_ns += acc[1];
            r.wait_ns += acc[2];
            r.bus_bytes += acc[3];
            r.bus_ns += acc[4];
        }
    }

    members.times = PhaseTimes {
        keys: t1,
        ranks: t3 - t1,
        instances: t4 - t3,
        merge: t0.elapsed() - t4,
        ..PhaseTimes::default()
    };
    let mut spans: Vec<f64> = Vec::with_capacity(n_ranks);
    let mut unfinished = false;
    for s in by_index.iter().flatten().filter_map(|s| s.span) {
        match s.end_ns {
            Some(e) if e > s.start_ns => spans.push((e - s.start_ns) as f64),
            Some(_) => {}
            None => unfinished = true,
        }
    }
    let duration_ns = (!unfinished && !spans.is_empty()).then(|| median(&mut spans));
    members.map = map;
    // The iteration's summaries: the per-rank ones on a thread of their own while the
    // transfer ratios take the workers.
    let transfer_ratio = &mut members.transfer_ratio;
    let per_rank = || {
        let rel: Vec<f64> = self_time
            .iter()
            .filter(|t| t.expected_ns > 0.0)
            .map(SelfTime::relative)
            .collect();
        let (replica_load, heaviest) =
            crate::detectors::imbalance::iteration_replica_loads(ctx, &ranks);
        let figures = rank_figures(ctx, &ranks, &replica_load);
        (
            crate::stats::median_mad(&rel),
            peer_medians(ctx, &ranks, &names),
            ranks.iter().filter(|r| r.stuck).count() as u32,
            (replica_load, heaviest),
            figures,
        )
    };
    let instance_parts = &members.parts;
    let mut transfers = || {
        let mut span_transfer = Vec::new();
        // Small iterations: threads would cost more than they save.
        let workers = if instances.len() < 20_000 { 1 } else { threads };
        let parts: Vec<&PartClasses> = instance_parts.iter().map(|p| &p.classes).collect();
        let by_comm = comm_transfer(&parts, transfer_ratio, &mut span_transfer, workers);
        let complete = instance_parts.iter().map(|p| p.complete).sum::<u32>();
        (by_comm, span_transfer, complete)
    };
    let ((comm_transfer, span_transfer, complete_instances), rank_summaries) = if threads > 1 {
        std::thread::scope(|s| {
            let other = s.spawn(per_rank);
            let mine = transfers();
            (mine, other.join().expect("engine worker panicked"))
        })
    } else {
        (transfers(), per_rank())
    };
    let (
        (excess_median, excess_mad),
        peer_medians,
        stuck_ranks,
        (replica_load, heaviest_replica),
        rank_figures,
    ) = rank_summaries;
    let n_instances = instances.len() as u32;
    members.instances = instances;
    members.times.summaries = t0.elapsed() - t4 - members.times.merge;
    IterationDigest {
        iteration,
        duration_ns,
        ranks,
        compute_names: names,
        in_flight,
        n_instances,
        complete_instances,
        excess_median,
        excess_mad,
        peer_medians,
        seq_ranges,
        comm_transfer,
        span_transfer,
        blame: Vec::new(),
        abnormal_groups: 0,
        scored_groups: 0,
        abnormal_examples: Vec::new(),
        drift: 1.0,
        ops: ops as u64,
        stuck_ranks,
        replica_load,
        heaviest_replica,
        rank_figures,
        self_time,
    }
}

/// Each rank's [`RankFigures`], its kernel time per unit of its data-parallel replica's
/// load in the iteration (`replica_load` is empty without the layout: 1.0 then).
fn rank_figures(
    ctx: &JobContext,
    ranks: &[RankIteration],
    replica_load: &[f64],
) -> Vec<RankFigures> {
    ranks
        .iter()
        .zip(&ctx.replica)
        .map(|(r, &dp)| {
            RankFigures::of(
                r,
                crate::detectors::imbalance::load_factor(replica_load, dp),
            )
        })
        .collect()
}

/// Per (peer group, compute op name): the median over the group's ranks of the op's
/// mean duration; and per group (name `u32::MAX`) the median issue latency.
fn peer_medians(
    ctx: &JobContext,
    ranks: &[RankIteration],
    names: &[NameStat],
) -> Vec<(u32, u32, f64)> {
    // Each value packed with its key into one integer that sorts as (group, name, value
    // by `total_cmp`): one integer sort instead of a sort on tuples.
    let pack = |group: u32, name: u32, v: f64| -> u128 {
        (group as u128) << 96 | (name as u128) << 64 | total_order_bits(v) as u128
    };
    let mut v: Vec<u128> = Vec::with_capacity(names.len() + 2 * ranks.len());
    v.extend(names.iter().map(|s| {
        pack(
            ctx.peer_group[s.rank_index as usize],
            s.name,
            s.sum_ns / s.count.max(1) as f64,
        )
    }));
    for (ri, r) in ranks.iter().enumerate() {
        if r.issue_p50_ns.is_finite() {
            v.push(pack(ctx.peer_group[ri], u32::MAX, r.issue_p50_ns));
        }
    }
    for (ri, r) in ranks.iter().enumerate() {
        if r.launch_gap_p50_ns.is_finite() {
            v.push(pack(ctx.peer_group[ri], u32::MAX - 1, r.launch_gap_p50_ns));
        }
    }
    v.sort_unstable();
    let key = |x: u128| ((x >> 96) as u32, (x >> 64) as u32);
    let value = |x: u128| from_total_order_bits(x as u64);
    let mut out = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let k = key(v[i]);
        let mut j = i;
        while j < v.len() && key(v[j]) == k {
            j += 1;
        }
        // Sorted by value within the key: the median directly.
        let n = j - i;
        let m = if n % 2 == 1 {
            value(v[i + n / 2])
        } else {
            (value(v[i + n / 2 - 1]) + value(v[i + n / 2])) / 2.0
        };
        out.push((k.0, k.1, m));
        i = j;
    }
    out
}

/// An integer that orders as `f64::total_cmp` orders the floats (the same mapping, with
/// the sign bit flipped to order unsigned).
fn total_order_bits(v: f64) -> u64 {
    let bits = v.to_bits() as i64;
    (bits ^ (((bits >> 63) as u64) >> 1) as i64) as u64 ^ (1 << 63)
}

/// The float [`total_order_bits`] was made from.
fn from_total_order_bits(x: u64) -> f64 {
    let bits = (x ^ (1 << 63)) as i64;
    f64::from_bits((bits ^ (((bits >> 63) as u64) >> 1) as i64) as u64)
}

/// A class of comparable instances: (op kind, bytes, group size, pods spanned).
type TransferClass = (OpKind, u64, u32, u32);

/// One class of one part: its key, transfer times, how many times its communicator
/// changed from one instance to the next (counting the first), and the first and last
/// communicators.
struct PartClass {
    key: TransferClass,
    times: Vec<i64>,
    comms: u32,
    first_comm: u32,
    last_comm: u32,
}

/// An instance as the transfer ratios see it: its class (`u32::MAX` for none), its
/// communicator, and its transfer time when it has a class.
#[derive(Clone, Copy, Debug)]
struct Classified {
    class: u32,
    comm: u32,
    transfer: i64,
}

/// One part's transfer classes in order of first appearance, and each instance's class
/// (local index): pass 1 of [`comm_transfer`], filled by the instance pass as it makes
/// the instances, so that pass 2 reads these instead of the instances.
#[derive(Default)]
struct PartClasses {
    classes: Vec<PartClass>,
    class_of: Vec<Classified>,
    /// The classes used last: a communicator's ops cycle through a few of them (P2P
    /// send, receive, ...).
    recent: [usize; 4],
}

impl PartClasses {
    fn clear(&mut self) {
        self.classes.clear();
        self.class_of.clear();
    }

    /// Classifies the part's next instance.
    fn add(&mut self, ctx: &JobContext, inst: &Instance) {
        let Some(t) = inst.compared_transfer() else {
            self.class_of.push(Classified {
                class: u32::MAX,
                comm: inst.comm,
                transfer: 0,
            });
            return;
        };
        let pods = ctx.comm_pods.get(inst.comm as usize).copied().unwrap_or(1);
        let key = (inst.kind, inst.bytes, inst.expected, pods);
        // A handful of classes per job: a linear map is faster than hashing.
        let classes = &mut self.classes;
        let c = match self
            .recent
            .iter()
            .copied()
            .find(|&c| c < classes.len() && classes[c].key == key)
        {
            Some(c) => c,
            None => match classes.iter().position(|c| c.key == key) {
                Some(c) => c,
                None => {
                    classes.push(PartClass {
                        key,
                        times: Vec::new(),
                        comms: 0,
                        first_comm: inst.comm,
                        last_comm: u32::MAX,
                    });
                    classes.len() - 1
                }
            },
        };
        if self.recent[0] != c {
            self.recent.rotate_right(1);
            self.recent[0] = c;
        }
        let entry = &mut classes[c];
        entry.times.push(t);
        if entry.last_comm != inst.comm {
            entry.comms += 1;
            entry.last_comm = inst.comm;
        }
        self.class_of.push(Classified {
            class: c as u32,
            comm: inst.comm,
            transfer: t,
        });
    }
}

/// Pass 2 of [`comm_transfer`] over one part: each instance's transfer over its class
/// median (1 where there is none) into `ratios`, and each communicator's median ratio.
fn transfer_ratios(
    instances: &[Classified],
    medians: &[Option<f64>],
    ratios: &mut [f32],
) -> Vec<(u32, f32)> {
    let ratio = |x: &Classified| {
        medians
            .get(x.class as usize)
            .copied()
            .flatten()
            .map(|m| x.transfer as f64 / m)
    };
    for (r, x) in ratios.iter_mut().zip(instances) {
        *r = ratio(x).map_or(1.0, |q| q as f32);
    }
    let mut out = Vec::new();
    let mut of_comm: Vec<f64> = Vec::new();
    for run in instances.chunk_by(|a, b| a.comm == b.comm) {
        of_comm.clear();
        of_comm.extend(run.iter().filter_map(ratio));
        if !of_comm.is_empty() {
            out.push((run[0].comm, median(&mut of_comm) as f32));
        }
    }
    out
}

/// Each communicator's transfer times against comparable instances of the iteration (same
/// op kind, bytes and group size on other communicators spanning as many pods): the
/// per-iteration input of the slow-path detector. The instance pass classified the
/// instances part by part (`parts`, in instance order); the classes are merged here in
/// order of first appearance (as one pass would number them), and the ratios computed in
/// `threads` parts cut at communicator boundaries.
fn comm_transfer(
    parts: &[&PartClasses],
    per_instance: &mut Vec<f32>,
    class_medians: &mut Vec<SpanTransfer>,
    threads: usize,
) -> Vec<(u32, f32)> {
    // Merge: one class list, each part's classes mapped onto it. A communicator cut
    // between two parts is counted once.
    let mut classes: Vec<(TransferClass, Vec<i64>, u32, u32)> = Vec::new();
    let n: usize = parts.iter().map(|p| p.class_of.len()).sum();
    let mut classified: Vec<Classified> = Vec::with_capacity(n);
    let mut global = Vec::new();
    for part in parts {
        global.clear();
        for c in &part.classes {
            let g = match classes.iter().position(|g| g.0 == c.key) {
                Some(g) => {
                    let cut = classes[g].3 == c.first_comm;
                    classes[g].1.extend_from_slice(&c.times);
                    classes[g].2 += c.comms - u32::from(cut);
                    classes[g].3 = c.last_comm;
                    g
                }
                None => {
                    classes.push((c.key, c.times.clone(), c.comms, c.last_comm));
                    classes.len() - 1
                }
            };
            global.push(g as u32);
        }
        classified.extend(part.class_of.iter().map(|&x| Classified {
            class: global.get(x.class as usize).copied().unwrap_or(u32::MAX),
            ..x
        }));
    }
    // Pass 2 in parts cut at communicator boundaries: each communicator's median ratio
    // is taken in one part.
    let threads = threads.clamp(1, classified.len().max(1));
    let mut bounds = vec![0usize];
    for t in 1..threads {
        let mut b = (classified.len() * t / threads).max(*bounds.last().unwrap_or(&0));
        while b > 0 && b < classified.len() && classified[b].comm == classified[b - 1].comm {
            b += 1;
        }
        bounds.push(b);
    }
    bounds.push(classified.len());
    let ranges: Vec<std::ops::Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
    let medians: Vec<Option<f64>> = classes
        .iter_mut()
        .map(|(key, v, comms, _)| {
            let n = v.len();
            let m = median_i64(v);
            if m > 0.0 {
                class_medians.push((key.0, key.1, key.2, key.3, m as f32, n as u32));
            }
            (n >= 3 && *comms >= 3 && m > 0.0).then_some(m)
        })
        .collect();
    per_instance.clear();
    per_instance.resize(classified.len(), 1.0);
    // Pass 2, each part writing its own share of `per_instance`.
    let mut work = Vec::new();
    let mut rest: &mut [f32] = per_instance;
    for r in ranges {
        let (mine, others) = rest.split_at_mut(r.len());
        work.push((r, mine, Vec::<(u32, f32)>::new()));
        rest = others;
    }
    par_each(&mut work, |_, (r, ratios, by_comm)| {
        *by_comm = transfer_ratios(&classified[r.clone()], &medians, ratios)
    });
    work.into_iter()
        .flat_map(|(_, _, by_comm)| by_comm)
        .collect()
}

/// Each host op's excess over the median of the same phase (by name) on all ranks.
fn host_excess(ranks: &mut [RankIteration], host_ops: &mut [(u32, u8, u32, f64)]) {
    if host_ops.is_empty() {
        return;
    }
    host_ops.sort_unstable_by(|a, b| a.2.cmp(&b.2).then(a.0.cmp(&b.0)));
    let mut buf = Vec::new();
    let mut i = 0;
    while i < host_ops.len() {
        let mut j = i;
        while j < host_ops.len() && host_ops[j].2 == host_ops[i].2 {
            j += 1;
        }
        buf.clear();
        buf.extend(host_ops[i..j].iter().map(|h| h.3));
        let med = median(&mut buf);
        for &(ri, slot, _, d) in &host_ops[i..j] {
            ranks[ri as usize].host_excess_ns[slot as usize] += (d - med).max(0.0);
        }
        i = j;
    }
}

/// One thread's sums over the parts of the instance pass it took; reused from iteration
/// to iteration.
#[derive(Default)]
struct InstanceSums {
    /// Per rank index: self excess, self expected, wait, bus bytes, bus time.
    per_rank: Vec<[f64; 5]>,
    /// Per op group (global id): waiting, transfer.
    per_group: Vec<[f64; 2]>,
}

/// One part of the instance pass: a range of slots, whose instances and slots it writes
/// into its share of the iteration's arrays.
#[derive(Default)]
struct InstancePart {
    slots: std::ops::Range<usize>,
    /// (index into the part's instances, rank ids that arrived) of instances in flight.
    arrived: Vec<(u32, Vec<u32>)>,
    /// The instances' transfer classes.
    classes: PartClasses,
    /// Instances complete, with 2+ members and an end.
    complete: u32,
}

/// Parts of the instance pass per thread. Threads take the next part as they finish one:
/// the parts cost differently (collectives, P2P exchanges and data-parallel reductions
/// differ per member), and so do this machine's two cores from one moment to the next.
/// Every sum a thread keeps is of whole numbers (nanoseconds, bytes) or halves, so it
/// comes out the same whichever thread took which part.
const PARTS_PER_THREAD: usize = 8;

/// How many slots ahead the instance pass prefetches members.
const PREFETCH_SLOTS: usize = 8;

#[inline(always)]
fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint that never faults; the pointer comes from a
        // reference anyway.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>()) };
    }
}

/// One part of the instance pass: writes the instances of its slots, in slot order, into
/// `instances` and their slots into `slots` (both exactly as long as the part has
/// instances), and adds into `sums`.
#[allow(clippy::too_many_arguments)]
fn instance_pass(
    ctx: &JobContext,
    iteration: u32,
    chunks: &[Chunk],
    map: &SlotMap,
    out: &mut InstancePart,
    instances: &mut [Instance],
    slots: &mut [u32],
    sums: &mut InstanceSums,
) {
    out.arrived.clear();
    out.classes.clear();
    out.complete = 0;
    let range = out.slots.clone();
    let mut made = 0usize;
    // References into the chunks, not copies: a slot's members are read a few times.
    let mut ms: Vec<(&Member, u32)> = Vec::new();
    // Integer timestamps: sorting them is cheaper than sorting floats.
    let mut ends: Vec<i64> = Vec::new();
    let mut gaps: Vec<i64> = Vec::new();
    let mut keys = map.keys_from(range.start);
    let end_slot = range.end;
    for slot in range {
        let (comm, seq) = keys.next().expect("a key for every slot");
        // Members are read out of order: ask for a later slot's lines ahead of time.
        let ahead = slot + PREFETCH_SLOTS;
        if ahead < end_slot {
            for c in chunks {
                for &k in c.in_slot(ahead) {
                    prefetch(&c.members[k as usize]);
                }
            }
        }
        ms.clear();
        let mut first_op = None;
        for c in chunks {
            let in_slot = c.in_slot(slot);
            if first_op.is_none() && !in_slot.is_empty() {
                first_op = Some(c.slot_op[slot]);
            }
            ms.extend(in_slot.iter().map(|&k| {
                let m = &c.members[k as usize];
                (m, c.group_base + m.group)
            }));
        }
        let Some(op) = first_op else {
            continue;
        };
        ends.clear();
        let (mut last, mut second, mut last_rank, mut in_flight) = (i64::MIN, i64::MIN, 0u32, 0u32);
        for (m, _) in &ms {
            if m.arrival > last {
                second = last;
                last = m.arrival;
                last_rank = ctx.ranks[m.rank_index as usize];
            } else if m.arrival > second {
                second = m.arrival;
            }
            if m.end == Op::IN_FLIGHT {
                in_flight += 1;
            } else {
                ends.push(m.end);
            }
        }
        let n = ms.len() as u32;
        let end = (in_flight == 0).then(|| median_i64(&mut ends) as i64);
        let known = (comm as usize) < ctx.communicators.len();
        let expected = if known { ctx.comm_size(comm) } else { n };
        let expected_traced = if known {
            ctx.comm_traced[comm as usize]
        } else {
            n
        };
        let inst = Instance {
            comm,
            seq,
            iteration,
            kind: op.kind,
            name: op.name,
            bytes: op.bytes,
            expected,
            expected_traced,
            present: n,
            in_flight,
            last_arrival: last,
            second_last_arrival: if n > 1 { second } else { last },
            last_rank,
            end,
        };
        // Waiting and bandwidth per member.
        if let Some(e) = end {
            let transfer = (e - last).max(0) as f64;
            // Whole bytes: sums of integers come out the same in any order, and threads
            // take parts of the pass in no fixed order.
            let bus_bytes = (inst.bytes as f64 * inst.kind.bus_factor(expected)).round();
            for (m, g) in &ms {
                let wait = (last - m.arrival).max(0) as f64;
                let acc = &mut sums.per_rank[m.rank_index as usize];
                acc[2] += wait;
                if inst.bytes > 0 && transfer > 0.0 {
                    acc[3] += bus_bytes;
                    acc[4] += transfer;
                }
                let ga = &mut sums.per_group[*g as usize];
                ga[0] += wait;
                ga[1] += (m.end - last).max(0) as f64;
            }
        }
        // Self time against the other members': same work, so the excess is the rank's own.
        if n >= 3 && n == expected_traced {
            gaps.clear();
            gaps.extend(ms.iter().map(|(m, _)| m.gap3).filter(|&g| g != i64::MIN));
            if gaps.len() == ms.len() {
                let med = median_i64(&mut gaps);
                for (m, _) in &ms {
                    let acc = &mut sums.per_rank[m.rank_index as usize];
                    acc[0] += m.gap3 as f64 - med;
                    acc[1] += med;
                }
            }
        }
        if in_flight > 0 {
            out.arrived.push((
                made as u32,
                ms.iter()
                    .map(|(m, _)| ctx.ranks[m.rank_index as usize])
                    .collect(),
            ));
        }
        out.classes.add(ctx, &inst);
        out.complete += u32::from(inst.compared_transfer().is_some());
        instances[made] = inst;
        slots[made] = slot as u32;
        made += 1;
    }
    debug_assert_eq!(made, instances.len(), "instances counted before the pass");
}

/// Per rank, the range of its ops holding iteration `it`, for a trace whose ops are
/// (mostly) grouped by iteration: from the first op tagged `it` to the last.
pub fn iteration_ranges(ops: &[Op], iterations: &[u32]) -> Vec<(usize, usize)> {
    // One iteration whose first and last ops are tagged with it (a live or streamed
    // chunk): the range is every op, known without reading the ones in between.
    if let ([it], Some(first), Some(last)) = (iterations, ops.first(), ops.last()) {
        if first.iteration == *it && last.iteration == *it {
            return vec![(0, ops.len())];
        }
    }
    let mut out = vec![(usize::MAX, 0usize); iterations.len()];
    let mut cursor = 0usize;
    for (i, o) in ops.iter().enumerate() {
        // Iterations usually come in order: try the current one first.
        let k = if iterations.get(cursor) == Some(&o.iteration) {
            cursor
        } else {
            match iterations.binary_search(&o.iteration) {
                Ok(k) => {
                    cursor = k;
                    k
                }
                Err(_) => continue,
            }
        };
        let r = &mut out[k];
        r.0 = r.0.min(i);
        r.1 = i + 1;
    }
    out.into_iter()
        .map(|(a, b)| if a == usize::MAX { (0, 0) } else { (a, b) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{ClusterTopology, Communicator, GroupKind, JobInfo, TraceMeta};

    fn op(kind: OpKind, comm: u32, seq: u32, start: i64, end: i64) -> Op {
        Op {
            kind,
            name: 0,
            iteration: 0,
            comm,
            seq,
            peer: Op::NO_PEER,
            start_ns: start,
            end_ns: end,
            issue_ns: Op::UNKNOWN,
            amount: 0,
        }
    }

    fn ctx(ranks: u32) -> JobContext {
        JobContext::new(
            JobInfo {
                job_id: "t".into(),
                world_size: ranks,
                cluster: ClusterTopology::for_world(ranks, 8, 4),
                parallel: None,
                microbatches: None,
            },
            TraceMeta::default(),
            vec![Communicator {
                id: 0,
                kind: GroupKind::World,
                members: (0..ranks).collect(),
                label: "world".into(),
            }],
            vec!["x".into()],
            (0..ranks).collect(),
        )
    }

    #[test]
    fn instances_arrivals_and_self_excess() {
        // Four ranks compute then all-reduce twice; rank 2 computes 30 longer before the
        // first, and everyone waits for it.
        let c = ctx(4);
        let ops: Vec<Vec<Op>> = (0..4)
            .map(|r| {
                let late = if r == 2 { 30 } else { 0 };
                vec![
                    op(OpKind::Compute, Op::NO_COMM, 0, 0, 100 + late),
                    op(OpKind::AllReduce, 0, 0, 100 + late, 140),
                    op(OpKind::Compute, Op::NO_COMM, 0, 140, 240),
                    op(OpKind::AllReduce, 0, 1, 240, 260),
                ]
            })
            .collect();
        let slices: Vec<RankSlice> = ops
            .iter()
            .enumerate()
            .map(|(i, o)| RankSlice {
                rank_index: i,
                ops: o,
                span: Some(IterationSpan {
                    iteration: 0,
                    start_ns: 0,
                    end_ns: Some(260),
                }),
            })
            .collect();
        let mut carry = Carry::new(4);
        let mut m = Members::default();
        let d = build(&c, 0, &slices, &mut carry, 1, &mut m);
        assert_eq!(d.n_instances, 2);
        let i0 = &m.instances[0];
        assert_eq!((i0.present, i0.last_rank, i0.last_arrival), (4, 2, 130));
        assert_eq!(i0.transfer_ns(), Some(10));
        assert_eq!(d.self_time[2].excess_ns, 30.0);
        assert_eq!(d.self_time[0].excess_ns, 0.0);
        assert_eq!(d.ranks[0].wait_ns, 30.0);
        assert_eq!(d.duration_ns, Some(260.0));
        assert_eq!(m.of_instance(1).count(), 4);
        let last = m.last_of_rank(2).unwrap();
        let first = m.prev(last).unwrap();
        assert_eq!(m.prev(first), None);
        assert_eq!(m.instance_of(first), 0);
        assert_eq!(m.get(first).gap3, 130);
        assert_eq!(carry.last_sync_end[3], Some(260));
        // The same with sparse sequence numbers (sort-based grouping).
        let sparse: Vec<Vec<Op>> = ops
            .iter()
            .map(|v| {
                v.iter()
                    .map(|o| Op {
                        seq: o.seq * 1_000_000,
                        ..*o
                    })
                    .collect()
            })
            .collect();
        let slices: Vec<RankSlice> = sparse
            .iter()
            .enumerate()
            .map(|(i, o)| RankSlice {
                rank_index: i,
                ops: o,
                span: None,
            })
            .collect();
        let d2 = build(&c, 0, &slices, &mut Carry::new(4), 1, &mut m);
        assert_eq!(d2.n_instances, 2);
        assert_eq!(m.instances[0].last_rank, 2);
    }

    /// Transfer ratios come out the same whether the instances are classified in one
    /// part or in several cut anywhere (classes merged in order of first appearance),
    /// and whatever the threads of the ratio pass, on a job with a slow NIC.
    #[test]
    fn transfer_ratios_do_not_depend_on_the_split() {
        let mut cfg = flare_sim::SimConfig::for_scale(512);
        cfg.iterations = 2;
        cfg.seed = 5;
        cfg.fault = flare_sim::fault::FaultKind::SlowNic;
        let out = flare_sim::simulate(&cfg).unwrap();
        let c = JobContext::from_trace(&out.trace);
        let mut engine = crate::Engine::new(c.clone(), crate::EngineConfig::default(), 2);
        engine.push(&out.trace).unwrap();
        let instances = engine.members.instances.clone();
        assert!(instances.len() > 1000);
        // Classified in `parts` parts cut anywhere (inside a communicator's instances
        // too, as the instance pass cuts them), the ratios computed on `threads`.
        let run = |parts: usize, threads: usize| {
            let mut classes: Vec<PartClasses> =
                (0..parts).map(|_| PartClasses::default()).collect();
            for (k, inst) in instances.iter().enumerate() {
                classes[k * parts / instances.len()].add(&c, inst);
            }
            let parts: Vec<&PartClasses> = classes.iter().collect();
            let (mut per_instance, mut medians) = (Vec::new(), Vec::new());
            let by_comm = comm_transfer(&parts, &mut per_instance, &mut medians, threads);
            (by_comm, per_instance, medians)
        };
        let one = run(1, 1);
        assert!(one.0.iter().any(|&(_, r)| r > 1.5), "the slow NIC's groups");
        for (parts, threads) in [(2, 1), (3, 2), (7, 3), (1, 7), (5, 5)] {
            assert!(
                one == run(parts, threads),
                "{parts} parts, {threads} threads"
            );
        }
    }

    /// A rank's ops for each iteration: from the first op tagged with it to the last, a
    /// straggler tagged with an earlier iteration in between included; one iteration
    /// whose ends carry it spans the whole slice.
    #[test]
    fn iteration_ranges_span_first_to_last_tagged_op() {
        let tagged = |its: &[u32]| -> Vec<Op> {
            its.iter()
                .map(|&it| Op {
                    iteration: it,
                    ..op(OpKind::Compute, Op::NO_COMM, 0, 0, 1)
                })
                .collect()
        };
        let ops = tagged(&[3, 3, 4, 3, 4, 4, 6]);
        assert_eq!(
            iteration_ranges(&ops, &[3, 4, 5, 6]),
            vec![(0, 4), (2, 6), (0, 0), (6, 7)]
        );
        assert_eq!(iteration_ranges(&ops, &[4]), vec![(2, 6)]);
        let ops = tagged(&[7, 8, 7]);
        assert_eq!(iteration_ranges(&ops, &[7]), vec![(0, 3)]);
        assert_eq!(iteration_ranges(&ops, &[8]), vec![(1, 2)]);
        assert_eq!(iteration_ranges(&[], &[8]), vec![(0, 0)]);
    }

    #[test]
    fn total_order_bits_sort_as_total_cmp() {
        let mut v = vec![
            3.5,
            -0.0,
            0.0,
            -2.25,
            1e-300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            42.0,
            -42.0,
            5e-324,
        ];
        for x in &v {
            assert_eq!(
                from_total_order_bits(total_order_bits(*x)).to_bits(),
                x.to_bits()
            );
        }
        let mut by_bits = v.clone();
        by_bits.sort_by_key(|&x| total_order_bits(x));
        v.sort_by(|a, b| a.total_cmp(b));
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&by_bits), bits(&v));
    }

    #[test]
    fn issue_bins_are_monotone() {
        let mut prev = 0;
        for ns in [0.0, 500.0, 1e3, 2e3, 1e4, 1e5, 1e6, 1e9, 1e12] {
            let b = issue_bin(ns);
            assert!(b >= prev && b < ISSUE_BINS, "{ns}");
            assert!(issue_bin_floor(b) <= ns.max(0.0) + 1e-9, "{ns}");
            prev = b;
        }
    }
}
