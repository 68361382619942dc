//! Pass 2 split into parts of about as many members each, that threads take as they
//! finish one; each part writes its instances straight into its share of the
//! iteration's array, and the threads' sums are merged afterwards.

use super::instances::{instance_pass, InstanceJob, InstancePart, InstanceSums};
use super::members::Chunk;
use super::slots::SlotMap;
use super::{InFlight, Instance, Members, RankIteration, SelfTime};
use crate::context::JobContext;
use crate::par::par_each;
use flare_model::OpKind;

/// Parts of the instance pass per thread. Threads take the next part as they finish one:
/// the parts cost differently (collectives, P2P exchanges and data-parallel reductions
/// differ per member), and so do this machine's two cores from one moment to the next.
/// Every sum a thread keeps is of whole numbers (nanoseconds, bytes) or halves, so it
/// comes out the same whichever thread took which part.
const PARTS_PER_THREAD: usize = 8;

/// Pass 2 over the `n_slots` slots of `map` on `threads`: the iteration's instances (in
/// slot order) and how many each part made; each op group's waiting and transfer are
/// added to it, and each thread's per-rank sums are left in `members.sums` (see
/// [`merge_instance_sums`]).
pub(super) fn instance_passes(
    ctx: &JobContext,
    iteration: u32,
    map: &SlotMap,
    n_slots: usize,
    threads: usize,
    members: &mut Members,
) -> (Vec<Instance>, Vec<usize>) {
    let n_ranks = ctx.n_ranks();
    let n_groups = members.n_groups();
    let chunks = &members.chunks;
    // Parts of about as many members each.
    let n_parts = if threads > 1 {
        threads * PARTS_PER_THREAD
    } else {
        1
    };
    let bounds = part_bounds(chunks, n_slots, n_parts);
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
    let job = InstanceJob {
        ctx,
        iteration,
        chunks,
        map,
    };
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
            instance_pass(&job, part, inst, slots, sums);
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
    (instances, counts)
}

/// Where the parts of the instance pass start (and the last ends): `n_parts` ranges of
/// slots with about as many members each.
fn part_bounds(chunks: &[Chunk], n_slots: usize, n_parts: usize) -> Vec<usize> {
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
    bounds
}

/// After [`instance_passes`] (`counts`: the instances of each part): each slot's
/// instance, the instances still in flight, each rank's self time, and its waiting and
/// bus figures added into `ranks`.
pub(super) fn merge_instance_sums(
    members: &mut Members,
    instances: &[Instance],
    counts: &[usize],
    n_slots: usize,
    ranks: &mut [RankIteration],
) -> (Vec<InFlight>, Vec<SelfTime>) {
    let mut in_flight = Vec::new();
    let mut self_time = vec![SelfTime::default(); ranks.len()];
    members.slot_instance.clear();
    members.slot_instance.resize(n_slots, u32::MAX);
    for (i, &slot) in members.instance_slot.iter().enumerate() {
        members.slot_instance[slot as usize] = i as u32;
    }
    let mut base = 0usize;
    for (part, &count) in members.parts.iter_mut().zip(counts) {
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
    (in_flight, self_time)
}
