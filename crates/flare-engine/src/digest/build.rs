//! [`build`]: one iteration's ops into its [`IterationDigest`], the passes in order,
//! on a slot map predicted from the previous iteration when the schedule repeats.

use super::instance_parts::{instance_passes, merge_instance_sums};
use super::instances::InstancePart;
use super::members::Chunk;
use super::peers::{host_excess, peer_medians, rank_figures};
use super::scan::{scan_all, HostOp, RankPass, ScanJob};
use super::slots::{collect_keys, slot_map, SlotMap};
use super::transfer::{comm_transfer, PartClasses};
use super::{
    iteration_replica_loads, Carry, IterationDigest, Members, NameStat, RankFigures, RankIteration,
    RankSlice, SelfTime, SpanTransfer,
};
use crate::context::JobContext;
use crate::par::{join, par_each, threads_for};
use crate::stats::median;
use std::time::{Duration, Instant};

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

    let t0 = Instant::now();
    let mut ranks = std::mem::take(&mut members.spare_ranks);
    ranks.clear();
    ranks.resize(n_ranks, RankIteration::default());
    let input = RankInput {
        ctx,
        iteration,
        by_index: &by_index,
        range_of: &range_of,
        carry: &carry.last_sync_end,
    };
    let pass = rank_pass(&input, members, &mut ranks, predict, t0);
    members.shape = (n_ranks, threads);
    let (names, mut host_ops) = merge_rank_passes(pass.passes, carry, members);
    number_groups(&mut members.chunks);
    // Host phases against the same phase on the other ranks.
    host_excess(&mut ranks, &mut host_ops);
    let t3 = t0.elapsed();

    // Pass 2: per instance, over slot ranges.
    let (instances, counts) =
        instance_passes(ctx, iteration, &pass.map, pass.n_slots, threads, members);
    let t4 = t0.elapsed();
    let (in_flight, self_time) =
        merge_instance_sums(members, &instances, &counts, pass.n_slots, &mut ranks);
    members.times = PhaseTimes {
        keys: pass.keys_time,
        ranks: t3 - pass.keys_time,
        instances: t4 - t3,
        merge: t0.elapsed() - t4,
        ..PhaseTimes::default()
    };
    let duration_ns = iteration_duration(&by_index, n_ranks);
    members.map = pass.map;
    // The iteration's summaries: the per-rank ones on a thread of their own while the
    // transfer ratios take the workers.
    let (transfers, rank_summaries) = join(
        threads > 1,
        || {
            transfer_summaries(
                &members.parts,
                instances.len(),
                &mut members.transfer_ratio,
                threads,
            )
        },
        || per_rank_summaries(ctx, &ranks, &names, &self_time),
    );
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
        complete_instances: transfers.complete_instances,
        excess_median: rank_summaries.excess_median,
        excess_mad: rank_summaries.excess_mad,
        peer_medians: rank_summaries.peer_medians,
        seq_ranges: pass.seq_ranges,
        comm_transfer: transfers.comm_transfer,
        span_transfer: transfers.span_transfer,
        blame: Vec::new(),
        abnormal_groups: 0,
        scored_groups: 0,
        abnormal_examples: Vec::new(),
        drift: 1.0,
        ops: ops as u64,
        stuck_ranks: rank_summaries.stuck_ranks,
        replica_load: rank_summaries.replica_load,
        heaviest_replica: rank_summaries.heaviest_replica,
        rank_figures: rank_summaries.rank_figures,
        self_time,
    }
}

/// What pass 1 reads: the ranks' ops by rank index, the ranks of each chunk, and each
/// rank's last sync end before the iteration.
struct RankInput<'a> {
    ctx: &'a JobContext,
    iteration: u32,
    by_index: &'a [Option<&'a RankSlice<'a>>],
    range_of: &'a (dyn Fn(usize) -> std::ops::Range<usize> + Sync),
    carry: &'a [Option<i64>],
}

/// What pass 1 found: the slot map and its slots, each communicator's sequence range,
/// each chunk's per-rank pass, and how long the key pass took (zero when skipped).
struct RankPassOutcome {
    map: SlotMap,
    n_slots: usize,
    seq_ranges: Vec<(u32, u32, u32)>,
    passes: Vec<RankPass>,
    keys_time: Duration,
}

/// Pass 1. In steady state the previous iteration's slot map, numbered on, and its slot
/// counts fit this iteration: the key pass is skipped, and every key is checked (pass 1b
/// starts over with the key pass at the first that does not fit).
fn rank_pass(
    input: &RankInput,
    members: &mut Members,
    ranks: &mut [RankIteration],
    predict: bool,
    t0: Instant,
) -> RankPassOutcome {
    let (ctx, iteration, by_index, range_of) =
        (input.ctx, input.iteration, input.by_index, input.range_of);
    let predicted = (predict && members.shape == (ranks.len(), members.chunks.len()))
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
        let job = ScanJob {
            ctx,
            iteration,
            by_index,
            carry: input.carry,
            map,
            n_slots,
            predicted,
        };
        scan_all(&job, range_of, chunks, ranks)
    };
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
        let passes = scan(&map, n_slots, &mut members.chunks, ranks, true);
        if !passes.iter().any(|p| p.mispredicted) {
            members.predicted += 1;
            let seq_ranges = map.ranges();
            return RankPassOutcome {
                map,
                n_slots,
                seq_ranges,
                passes,
                keys_time: Duration::ZERO,
            };
        }
    }
    // Pass 1a: keys and sequence ranges.
    par_each(&mut members.chunks, |t, c| {
        collect_keys(ctx, iteration, by_index, range_of(t), c)
    });
    let keys_time = t0.elapsed();
    let (map, n_slots, seq_ranges) = slot_map(ctx, &members.chunks);
    let mut base = 0u32;
    for c in members.chunks.iter_mut() {
        c.base = base;
        base += c.keys.len() as u32;
    }
    // Pass 1b: per rank, members into slot order.
    let passes = scan(&map, n_slots, &mut members.chunks, ranks, false);
    RankPassOutcome {
        map,
        n_slots,
        seq_ranges,
        passes,
        keys_time,
    }
}

/// Gathers the chunks' per-rank passes: the compute names and host ops (returned), each
/// rank's last member and last sync end (into `members` and `carry`).
fn merge_rank_passes(
    passes: Vec<RankPass>,
    carry: &mut Carry,
    members: &mut Members,
) -> (Vec<NameStat>, Vec<HostOp>) {
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
    (names, host_ops)
}

/// Numbers the op groups across chunks: each chunk's ids start after the previous one's.
fn number_groups(chunks: &mut [Chunk]) {
    let mut group_base = 0u32;
    for c in chunks.iter_mut() {
        c.group_base = group_base;
        group_base += c.groups.len() as u32;
    }
}

/// Median over ranks of their own iteration span; `None` when some rank never finished
/// it or no rank recorded a span.
fn iteration_duration(by_index: &[Option<&RankSlice>], n_ranks: usize) -> Option<f64> {
    let mut spans: Vec<f64> = Vec::with_capacity(n_ranks);
    let mut unfinished = false;
    for s in by_index.iter().flatten().filter_map(|s| s.span) {
        match s.end_ns {
            Some(e) if e > s.start_ns => spans.push((e - s.start_ns) as f64),
            Some(_) => {}
            None => unfinished = true,
        }
    }
    (!unfinished && !spans.is_empty()).then(|| median(&mut spans))
}

/// The iteration's summaries over its instances.
struct TransferSummaries {
    comm_transfer: Vec<(u32, f32)>,
    span_transfer: Vec<SpanTransfer>,
    complete_instances: u32,
}

/// Transfer ratios (per instance into `transfer_ratio`, per communicator and per class
/// returned) and the complete instances, from the instance pass's parts.
fn transfer_summaries(
    instance_parts: &[InstancePart],
    n_instances: usize,
    transfer_ratio: &mut Vec<f32>,
    threads: usize,
) -> TransferSummaries {
    let mut span_transfer = Vec::new();
    // Small iterations: threads would cost more than they save.
    let workers = if n_instances < 20_000 { 1 } else { threads };
    let parts: Vec<&PartClasses> = instance_parts.iter().map(|p| &p.classes).collect();
    let comm_transfer = comm_transfer(&parts, transfer_ratio, &mut span_transfer, workers);
    let complete_instances = instance_parts.iter().map(|p| p.complete).sum::<u32>();
    TransferSummaries {
        comm_transfer,
        span_transfer,
        complete_instances,
    }
}

/// The iteration's summaries over its ranks.
struct RankSummaries {
    excess_median: f64,
    excess_mad: f64,
    peer_medians: Vec<(u32, u32, f64)>,
    stuck_ranks: u32,
    replica_load: Vec<f64>,
    heaviest_replica: Option<(u32, f64)>,
    rank_figures: Vec<RankFigures>,
}

/// Self-time spread, peer medians, stuck ranks, replica loads and each rank's figures.
fn per_rank_summaries(
    ctx: &JobContext,
    ranks: &[RankIteration],
    names: &[NameStat],
    self_time: &[SelfTime],
) -> RankSummaries {
    let rel: Vec<f64> = self_time
        .iter()
        .filter(|t| t.expected_ns > 0.0)
        .map(SelfTime::relative)
        .collect();
    let (replica_load, heaviest_replica) = iteration_replica_loads(ctx, ranks);
    let rank_figures = rank_figures(ctx, ranks, &replica_load);
    let (excess_median, excess_mad) = crate::stats::median_mad(&rel);
    RankSummaries {
        excess_median,
        excess_mad,
        peer_medians: peer_medians(ctx, ranks, names),
        stuck_ranks: ranks.iter().filter(|r| r.stuck).count() as u32,
        replica_load,
        heaviest_replica,
        rank_figures,
    }
}
