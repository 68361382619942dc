//! The members of an iteration: one [`Member`] per sync op per rank, kept per thread in
//! [`Chunk`]s, each rank's [`OpGroup`]s (ops of one name on one communicator), and the
//! lookups the abnormal-op detection and the graph search make on them ([`Members`]).

use super::instances::{InstancePart, InstanceSums};
use super::slots::SlotMap;
use super::{Instance, IterationDigest, NameStat, PhaseTimes, RankIteration};
use flare_model::OpKind;

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
pub(super) struct SlotOp {
    pub(super) bytes: u64,
    pub(super) name: u32,
    pub(super) kind: OpKind,
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
pub(super) struct Chunk {
    pub(super) members: Vec<Member>,
    /// Per member: time since its rank's previous sync op ended (or its iteration
    /// began), `i64::MIN` when unknown.
    pub(super) gaps: Vec<i64>,
    /// Member indexes in slot order: slot `s` holds `order[starts[s]..starts[s + 1]]`.
    pub(super) order: Vec<u32>,
    /// Per member: its slot, with [`FIRST_OF_SLOT`] set on the first member of its slot
    /// in the chunk.
    pub(super) slot_of: Vec<u32>,
    pub(super) starts: Vec<u32>,
    /// The chunk's first rank index, and where each of its ranks' members start (one
    /// more entry at the end).
    pub(super) first_rank: u32,
    pub(super) rank_first: Vec<u32>,
    /// Per slot with members in the chunk: its first member's op.
    pub(super) slot_op: Vec<SlotOp>,
    /// Ids are `base + index`.
    pub(super) base: u32,
    /// The (communicator, sequence) key of every sync op of the chunk's ranks, in op order.
    pub(super) keys: Vec<(u32, u32)>,
    pub(super) lo: Vec<u32>,
    pub(super) hi: Vec<u32>,
    pub(super) unknown_comm: bool,
    /// Scratch for the counting sort.
    pub(super) fill: Vec<u32>,
    /// The chunk's op groups, rank by rank; ids are `group_base + index`.
    pub(super) groups: Vec<OpGroup>,
    pub(super) group_base: u32,
    /// (op group, duration) of every ended sync op in op order, rank by rank, and per op
    /// group where its rank's run starts and how long it is (for quartiles on demand).
    pub(super) rank_durations: Vec<(u32, f32)>,
    pub(super) group_run: Vec<(u32, u32)>,
}

/// Marks, in [`Chunk::slot_of`], the member whose op stands for its slot's instance.
pub(super) const FIRST_OF_SLOT: u32 = 1 << 31;

/// The members of one iteration grouped into instances. Kept while the iteration is
/// analysed (the graph search walks them) and reused for the next one, so that a
/// streaming engine does not allocate (and fault in) fresh memory every iteration.
#[derive(Default)]
pub struct Members {
    pub(super) chunks: Vec<Chunk>,
    /// Per slot: its instance index, `u32::MAX` for an empty slot.
    pub(super) slot_instance: Vec<u32>,
    /// Per instance: its slot.
    pub(super) instance_slot: Vec<u32>,
    /// Per rank index: id of its last member, `u32::MAX` if none.
    pub(super) last_of_rank: Vec<u32>,
    /// Per thread of the instance pass: its sums per rank and per op group.
    pub(super) sums: Vec<InstanceSums>,
    /// Per part of the instance pass: what it found besides the instances.
    pub(super) parts: Vec<InstancePart>,
    /// The iteration's instances, in slot order (by communicator, then sequence).
    pub instances: Vec<Instance>,
    /// Per instance: its transfer time over the median of the same op (kind, bytes, group
    /// size) on other communicators in the iteration (1.0 without comparison).
    pub transfer_ratio: Vec<f32>,
    /// How long the last build's phases took.
    pub times: PhaseTimes,
    /// The iteration's slot map, to find the same op on another communicator (and to
    /// predict the next iteration's).
    pub(super) map: SlotMap,
    /// (ranks, threads) of the last build.
    pub(super) shape: (usize, usize),
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
    pub(super) fn in_slot(&self, s: usize) -> &[u32] {
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
