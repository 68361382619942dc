//! [`build`]: one iteration's ops into its [`IterationDigest`], the passes in order,
//! on a slot map predicted from the previous iteration when the schedule repeats.

use super::instances::{instance_pass, InstancePart, InstanceSums, PARTS_PER_THREAD};
use super::members::Chunk;
use super::peers::{host_excess, peer_medians, rank_figures};
use super::scan::scan_all;
use super::slots::{collect_keys, slot_map, SlotMap};
use super::transfer::{comm_transfer, PartClasses};
use super::{
    iteration_replica_loads, Carry, InFlight, Instance, IterationDigest, Members, RankIteration,
    RankSlice, SelfTime,
};
use crate::context::JobContext;
use crate::par::{par_each, threads_for};
use crate::stats::median;
use flare_model::OpKind;

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
        let (replica_load, heaviest) = iteration_replica_loads(ctx, &ranks);
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
