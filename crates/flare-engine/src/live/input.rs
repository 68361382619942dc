//! Live windows turned into the analysis input the detectors read for files: a
//! [`JobContext`] and one [`IterationDigest`] per window.
//!
//! A summary holds per-rank totals, not events, so a window's digest holds each rank's
//! figures for one typical iteration of the window (its totals over the iterations it
//! finished there), and its self time is its time outside collectives and P2P against
//! its peers' median: a rank that spends longer on its own work than its peers arrives
//! last at every collective, which is what the self time of a file's digest measures
//! collective by collective. Peers are ranks that run the same kernels every iteration
//! (in practice one pipeline stage), so stages that do different work are not compared.
//! What summaries cannot give (collective instances, arrivals, transfer ratios, issue
//! timing of each launch) stays empty, and the detectors that need it say so.

use super::window::{LiveRank, LiveWindow};
use super::{plural, rank_list, LiveConfig};
use crate::context::{JobContext, RankHosts};
use crate::digest::{IterationDigest, NameStat, RankIteration, SelfTime};
use crate::stats::{median, median_mad};
use flare_model::trace::NameTable;
use flare_model::{ClusterTopology, JobInfo, TraceMeta};
use std::collections::{BTreeMap, HashMap};

/// The analysis input of a run of windows (earlier ones first).
pub(super) struct LiveInput {
    pub ctx: JobContext,
    pub digests: Vec<IterationDigest>,
    pub notes: Vec<String>,
}

/// Builds the context and the digests of `windows` (the last is the one being
/// diagnosed; its ranks define the peer groups).
pub(super) fn build(windows: &[&LiveWindow], cfg: &LiveConfig) -> LiveInput {
    let mut notes = Vec::new();
    let current = windows.last().copied();
    let mut ranks: Vec<u32> = windows
        .iter()
        .flat_map(|w| w.with_data().map(|r| r.rank))
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    let index: HashMap<u32, usize> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    let mut names = NameTable::default();
    let peer_group = current.map_or_else(
        || vec![0; ranks.len()],
        |w| peer_groups(w, &ranks, &index, cfg, &mut notes),
    );
    let world_size = windows
        .iter()
        .map(|w| w.world_size)
        .chain(ranks.last().map(|&r| r + 1))
        .max()
        .unwrap_or(0);
    let per_node = current.map_or(1, |w| {
        let mut n: BTreeMap<&str, u32> = BTreeMap::new();
        for r in &w.ranks {
            *n.entry(r.node.as_str()).or_default() += 1;
        }
        n.values().copied().max().unwrap_or(1)
    });
    let job = JobInfo {
        job_id: String::new(),
        world_size,
        cluster: ClusterTopology::for_world(world_size, per_node, 1),
        // Stated by the ranks' environment or command line: pipeline stages and
        // data-parallel replicas for the detectors that read them.
        parallel: current
            .and_then(|w| w.parallel.clone())
            .filter(|p| p.world_size() == world_size),
        microbatches: None,
    };
    let meta = TraceMeta {
        source: "agent".into(),
        // Compute timed on CPUs: the causes name the CPU, never the GPU.
        cpu_compute: current.is_some_and(|w| w.cpu_only()),
        ..TraceMeta::default()
    };
    // Names are interned while the digests are built; the context takes them after.
    let mut digests: Vec<IterationDigest> = windows
        .iter()
        .map(|w| digest(w, &index, &peer_group, cfg, &mut names, &mut notes))
        .collect();
    let mut ctx = JobContext::new(job, meta, Vec::new(), names.names, ranks);
    ctx.peer_group = peer_group;
    let mut hosts = RankHosts::default();
    for w in windows {
        for r in &w.ranks {
            hosts.of_rank.insert(r.rank, (r.node.clone(), r.local_rank));
        }
    }
    ctx.hosts = Some(hosts);
    for d in digests.iter_mut() {
        d.peer_medians = crate::digest::peer_medians(&ctx, &d.ranks, &d.compute_names);
        d.rank_figures = crate::digest::rank_figures(&ctx, &d.ranks, &[]);
    }
    notes.dedup();
    LiveInput {
        ctx,
        digests,
        notes,
    }
}

/// Per rank index, its peer group: ranks of the current window that run the same
/// kernels every iteration, when enough of them do. Ranks in a group too small to
/// compare get a group of their own (and no self time); when no kernel set is shared by
/// enough ranks (names differ per rank), every rank is one group.
fn peer_groups(
    w: &LiveWindow,
    ranks: &[u32],
    index: &HashMap<u32, usize>,
    cfg: &LiveConfig,
    notes: &mut Vec<String>,
) -> Vec<u32> {
    let mut classes: BTreeMap<Vec<&str>, Vec<u32>> = BTreeMap::new();
    for r in w.with_data() {
        classes.entry(r.signature()).or_default().push(r.rank);
    }
    let min_peers = cfg.min_ranks.max(2);
    let mut group = vec![u32::MAX; ranks.len()];
    if classes.values().all(|c| c.len() < min_peers) {
        group.iter_mut().for_each(|g| *g = 0);
        return group;
    }
    let mut alone = Vec::new();
    let mut next = 0u32;
    for members in classes.values() {
        if members.len() < min_peers {
            alone.extend_from_slice(members);
            continue;
        }
        for r in members {
            group[index[r]] = next;
        }
        next += 1;
    }
    // Ranks without a group (too few peers, or absent from the current window) each
    // get their own.
    for g in group.iter_mut().filter(|g| **g == u32::MAX) {
        *g = next;
        next += 1;
    }
    if !alone.is_empty() {
        alone.sort_unstable();
        notes.push(format!(
            "rank{} {} run kernels fewer than {} other ranks run; not compared",
            plural(alone.len()),
            rank_list(&alone, 8),
            min_peers - 1
        ));
    }
    group
}

/// The comparison unit of a group of peers' window totals in one window: per iteration
/// when every peer finished the same number of iterations in it, otherwise per typical
/// iteration of the time it was observed (per second when none finished one). Dividing
/// by unequal iteration counts would turn a window edge (one rank's step ending just
/// after it) into a 1/n difference.
pub(super) fn scale(peers: &[&LiveRank]) -> Vec<f64> {
    let n = peers[0].iterations;
    if n > 0 && peers.iter().all(|r| r.iterations == n) {
        return vec![1.0 / n as f64; peers.len()];
    }
    let mut its: Vec<f64> = peers
        .iter()
        .map(|r| r.iteration_ns)
        .filter(|t| t.is_finite() && *t > 0.0)
        .collect();
    let unit = if its.is_empty() {
        1e9
    } else {
        median(&mut its)
    };
    peers
        .iter()
        .map(|r| unit / r.observed_ns.max(1.0))
        .collect()
}

/// The same for the peers' own time ([`LiveRank::own_ns`]): per typical iteration of
/// the stepping span it was counted over, where every peer's agent reported one (the
/// span's first iteration may have begun before the window: counts of iterations would
/// not measure it); else as [`scale`]. For peers from [`comparable`].
pub(super) fn own_scale(peers: &[&LiveRank]) -> Vec<f64> {
    match typical_stepping_iteration(peers) {
        Some(unit) => peers.iter().map(|r| unit / r.stepping_ns).collect(),
        None => scale(peers),
    }
}

/// The peers whose own time can be put per iteration: where every peer reported its
/// stepping span, those whose span holds at least one typical iteration (a sliver of
/// one at the window's start, the end of a collective and a step, measures nothing).
pub(super) fn comparable<'a>(peers: &[&'a LiveRank]) -> Vec<&'a LiveRank> {
    match typical_stepping_iteration(peers) {
        Some(unit) => peers
            .iter()
            .copied()
            .filter(|r| r.stepping_ns >= unit)
            .collect(),
        None => peers.to_vec(),
    }
}

/// The peers' median iteration, where every one of them reported its stepping span.
fn typical_stepping_iteration(peers: &[&LiveRank]) -> Option<f64> {
    if peers.is_empty() || !peers.iter().all(|r| r.stepped()) {
        return None;
    }
    let mut its: Vec<f64> = peers.iter().map(|r| r.iteration_ns).collect();
    Some(median(&mut its))
}

fn digest(
    w: &LiveWindow,
    index: &HashMap<u32, usize>,
    peer_group: &[u32],
    cfg: &LiveConfig,
    names: &mut NameTable,
    notes: &mut Vec<String>,
) -> IterationDigest {
    let n = peer_group.len();
    let duration = w.typical_iteration_ns();
    // Window indices stand for iteration numbers: the window is the live engine's unit.
    let mut d = IterationDigest::empty(w.window as u32, duration, n);
    let mut groups: BTreeMap<u32, Vec<&LiveRank>> = BTreeMap::new();
    for r in w.with_data() {
        groups
            .entry(peer_group[index[&r.rank]])
            .or_default()
            .push(r);
    }
    let mut host_ops: Vec<(u32, u8, u32, f64)> = Vec::new();
    let mut compute_names: Vec<NameStat> = Vec::new();
    for peers in groups.values() {
        let f = scale(peers);
        self_times(peers, cfg, index, &mut d.self_time, notes);
        for (r, &f) in peers.iter().zip(&f) {
            let ri = index[&r.rank];
            d.ranks[ri] = rank_iteration(r, f);
            host_ops.extend(
                r.host_ops
                    .iter()
                    .map(|(name, slot, t)| (ri as u32, *slot, names.intern(name), t * f)),
            );
            compute_names.extend(r.compute.iter().map(|(name, t, count)| NameStat {
                rank_index: ri as u32,
                name: names.intern(name),
                // A name's mean duration is what peers compare: kept exact.
                sum_ns: *t,
                count: (*count).min(u32::MAX as u64) as u32,
            }));
        }
    }
    crate::digest::host_excess(&mut d.ranks, &mut host_ops);
    compute_names.sort_by_key(|s| (s.rank_index, s.name));
    d.compute_names = compute_names;
    let rel: Vec<f64> = d
        .self_time
        .iter()
        .map(SelfTime::relative)
        .filter(|v| v.is_finite())
        .collect();
    (d.excess_median, d.excess_mad) = median_mad(&rel);
    d.ops = w
        .with_data()
        .map(|r| r.compute_ops + r.host_ops.len() as u64)
        .sum();
    d
}

/// One rank's window as a typical iteration of it (`f` scales totals to one).
fn rank_iteration(r: &LiveRank, f: f64) -> RankIteration {
    let span = (r.observed_ns * f).round() as i64;
    RankIteration {
        start_ns: Some(0),
        end_ns: Some(span.max(1)),
        ops: 0,
        compute_ns: r.compute_ns * f,
        compute_ops: ((r.compute_ops as f64 * f).round() as u32).max(u32::from(r.compute_ops > 0)),
        flops: r.flops * f,
        flops_ns: r.flops_ns * f,
        sync_ns: r.sync_ns * f,
        bus_bytes: r.bus_bytes * f,
        bus_ns: r.bus_ns * f,
        host_ns: r.host_ns.map(|h| h * f),
        busy_ns: if r.busy_ns > 0.0 {
            r.busy_ns * f
        } else {
            (r.compute_ns + r.host_total() + r.sync_ns) * f
        },
        issue_p50_ns: r.issue_p50_ns,
        ..RankIteration::default()
    }
}

/// Each peer's own time against the median of the other peers' ([`SelfTime`]), when the
/// group is large enough and did real work in the window: a few stray milliseconds of
/// ranks that were nearly idle (a job starting or ending) must not read as a huge excess.
fn self_times(
    peers: &[&LiveRank],
    cfg: &LiveConfig,
    index: &HashMap<u32, usize>,
    out: &mut [SelfTime],
    notes: &mut Vec<String>,
) {
    let peers = &comparable(peers)[..];
    if peers.len() < cfg.min_ranks.max(2) {
        return;
    }
    let mut shares: Vec<f64> = peers
        .iter()
        .map(|r| r.own_ns() / r.own_span_ns().max(1.0))
        .collect();
    if median(&mut shares) < cfg.min_own_share {
        let mut who: Vec<u32> = peers.iter().map(|r| r.rank).collect();
        who.sort_unstable();
        notes.push(format!(
            "ranks {} spent under {:.0}% of the window outside collectives; not compared",
            rank_list(&who, 8),
            cfg.min_own_share * 100.0
        ));
        return;
    }
    let own: Vec<f64> = peers
        .iter()
        .zip(own_scale(peers))
        .map(|(r, f)| r.own_ns() * f)
        .collect();
    let mut sorted = own.clone();
    sorted.sort_by(f64::total_cmp);
    for (i, r) in peers.iter().enumerate() {
        let expected = median_without(&sorted, own[i]);
        if expected > 0.0 {
            out[index[&r.rank]] = SelfTime {
                excess_ns: own[i] - expected,
                expected_ns: expected,
            };
        }
    }
}

/// The median of `sorted` with one occurrence of `x` (one of its values) left out.
fn median_without(sorted: &[f64], x: f64) -> f64 {
    let n = sorted.len();
    if n < 2 {
        return f64::NAN;
    }
    let p = sorted.partition_point(|v| *v < x);
    let at = |j: usize| if j < p { sorted[j] } else { sorted[j + 1] };
    let m = n - 1;
    if m % 2 == 1 {
        at(m / 2)
    } else {
        (at(m / 2 - 1) + at(m / 2)) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median_without;

    #[test]
    fn the_median_of_the_others() {
        let v = [1.0, 2.0, 3.0, 10.0];
        for (x, want) in [(1.0, 3.0), (2.0, 3.0), (3.0, 2.0), (10.0, 2.0)] {
            assert_eq!(median_without(&v, x), want, "{x}");
        }
        assert_eq!(median_without(&[1.0, 2.0, 3.0], 2.0), 2.0);
        assert!(median_without(&[5.0], 5.0).is_nan());
    }
}
