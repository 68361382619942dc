//! The slot map, pass 1a: every (communicator, sequence number) of the iteration's sync
//! ops gets a slot, one per instance, so that members can be grouped into instances by
//! counting sort instead of a sort or a hash map.

use super::members::Chunk;
use super::RankSlice;
use crate::context::JobContext;
use flare_model::Op;

/// Maps (communicator, sequence) to instance slots: a dense range per communicator, or
/// for sparse sequence numbers the position in the sorted list of distinct keys.
pub(super) enum SlotMap {
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
    pub(super) fn key(&self, slot: usize) -> (u32, u32) {
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
    pub(super) fn keys_from(&self, from: usize) -> impl Iterator<Item = (u32, u32)> + '_ {
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
    pub(super) fn find(&self, comm: u32, seq: u32) -> Option<usize> {
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
    pub(super) fn first_seq(&self, comm: u32) -> Option<u32> {
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
    pub(super) fn predict_next(&self) -> Option<SlotMap> {
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
    pub(super) fn dense_slot(&self, comm: u32, seq: u32) -> Option<usize> {
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
    pub(super) fn ranges(&self) -> Vec<(u32, u32, u32)> {
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
    pub(super) fn slot(&self, comm: u32, seq: u32) -> usize {
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

/// Pass 1a over one chunk of ranks: the keys of their sync ops and each
/// communicator's sequence range.
pub(super) fn collect_keys(
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

pub(super) fn slot_map(
    ctx: &JobContext,
    chunks: &[Chunk],
) -> (SlotMap, usize, Vec<(u32, u32, u32)>) {
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
