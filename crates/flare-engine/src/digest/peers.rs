//! Each rank against its peers, once per iteration: the peer groups' median compute op
//! times and issue latencies, host phases against the same phase elsewhere, and each
//! data-parallel replica's load (what a rank's kernel times are divided by).

use super::{NameStat, RankFigures, RankIteration};
use crate::context::JobContext;
use crate::stats::median;

/// Each rank's [`RankFigures`], its kernel time per unit of its data-parallel replica's
/// load in the iteration (`replica_load` is empty without the layout: 1.0 then).
pub(crate) fn rank_figures(
    ctx: &JobContext,
    ranks: &[RankIteration],
    replica_load: &[f64],
) -> Vec<RankFigures> {
    ranks
        .iter()
        .zip(&ctx.replica)
        .map(|(r, &dp)| RankFigures::of(r, load_factor(replica_load, dp)))
        .collect()
}

/// Per (peer group, compute op name): the median over the group's ranks of the op's
/// mean duration; and per group (name `u32::MAX`) the median issue latency.
pub(crate) fn peer_medians(
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
pub(super) fn total_order_bits(v: f64) -> u64 {
    let bits = v.to_bits() as i64;
    (bits ^ (((bits >> 63) as u64) >> 1) as i64) as u64 ^ (1 << 63)
}

/// The float [`total_order_bits`] was made from.
pub(super) fn from_total_order_bits(x: u64) -> f64 {
    let bits = (x ^ (1 << 63)) as i64;
    f64::from_bits((bits ^ (((bits >> 63) as u64) >> 1) as i64) as u64)
}

/// Each host op's excess over the median of the same phase (by name) on all ranks.
pub(crate) fn host_excess(ranks: &mut [RankIteration], host_ops: &mut [(u32, u8, u32, f64)]) {
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

/// One iteration's part of [`ReplicaLoads`](crate::detectors::imbalance::ReplicaLoads):
/// each replica's load (`[dp rank]`, NaN where it has no compute; empty without the
/// layout) and the heaviest replica, when 2 or more have compute. Computed when the
/// iteration is digested, so that a window's loads are gathered, not computed again for
/// every diagnosis.
pub fn iteration_replica_loads(
    ctx: &JobContext,
    ranks: &[RankIteration],
) -> (Vec<f64>, Option<(u32, f64)>) {
    let Some(par) = ctx.job.parallel.as_ref().filter(|p| p.dp > 1) else {
        return (Vec::new(), None);
    };
    // With the layout known, the peer group is the stage.
    let coords: Vec<(u32, u32)> = ctx
        .peer_group
        .iter()
        .copied()
        .zip(ctx.replica.iter().copied())
        .collect();
    let mut stage_vals: Vec<Vec<f64>> = vec![Vec::new(); par.pp as usize];
    for (r, &(pp, _)) in ranks.iter().zip(&coords) {
        if r.compute_ns > 0.0 {
            stage_vals[pp as usize].push(r.compute_ns);
        }
    }
    let stage_med: Vec<f64> = stage_vals
        .iter_mut()
        .map(|v| if v.is_empty() { f64::NAN } else { median(v) })
        .collect();
    let mut replica: Vec<Vec<f64>> = vec![Vec::new(); par.dp as usize];
    for (r, &(pp, dp)) in ranks.iter().zip(&coords) {
        let m = stage_med[pp as usize];
        if r.compute_ns > 0.0 && m > 0.0 {
            replica[dp as usize].push(r.compute_ns / m);
        }
    }
    let mut load: Vec<f64> = replica
        .iter_mut()
        .map(|v| if v.is_empty() { f64::NAN } else { median(v) })
        .collect();
    let mut present: Vec<f64> = load.iter().copied().filter(|x| x.is_finite()).collect();
    if present.len() < 2 {
        load.iter_mut().for_each(|x| *x = f64::NAN);
        return (load, None);
    }
    let typical = median(&mut present);
    load.iter_mut().for_each(|x| *x /= typical);
    let heaviest = load
        .iter()
        .enumerate()
        .filter(|(_, x)| x.is_finite())
        .max_by(|x, y| x.1.total_cmp(y.1))
        .map(|(d, &l)| (d as u32, l));
    (load, heaviest)
}

/// Replica `dp`'s load in one iteration's loads (`[dp rank]`), as kernel times are
/// divided by it: 1.0 where unknown.
pub fn load_factor(load: &[f64], dp: u32) -> f64 {
    load.get(dp as usize)
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .unwrap_or(1.0)
}
