//! Why a rank is slow: its own figures against its peers' (ranks of the same pipeline
//! stage) over some iterations. Shared by the detectors that name a rank.

use crate::digest::{issue_bin_floor, HOST_KINDS, ISSUE_BINS};
use crate::stats::median;
use crate::{Analysis, EngineConfig};
use flare_model::{Component, Evidence, EvidenceKey, FindingKind, OpKind, Unit};

/// A rank's slowness, explained.
pub(crate) struct RankCause {
    pub kind: FindingKind,
    pub component: Component,
    /// Words for the summary: "through {what}".
    pub what: String,
    pub action: String,
    pub evidence: Vec<Evidence>,
}

/// A suspect's compute and issue latency against its peers' (ranks of the same pipeline
/// stage), from the per-iteration peer medians of the digests.
struct PeerStats {
    /// Weighted ratio of its compute time to its peers' for the same ops.
    compute_ratio: Option<f64>,
    /// Its median issue latency (median of its per-iteration medians), ns.
    issue_latency: f64,
    /// Its peers' (median over iterations of the per-iteration peer median), ns.
    peer_issue: f64,
    /// Its median launch interval and its peers', ns.
    launch_gap: f64,
    peer_launch_gap: f64,
}

impl PeerStats {
    fn of(a: &Analysis, ri: usize, scope: &[usize]) -> Self {
        let group = a.ctx.peer_group[ri];
        let mut own: Vec<(u32, f64, u32)> = Vec::new();
        let mut peer: Vec<(u32, Vec<f64>)> = Vec::new();
        let mut lat = Vec::new();
        let mut peer_lat = Vec::new();
        let mut gap = Vec::new();
        let mut peer_gap = Vec::new();
        for &i in scope {
            let d = a.digests[i];
            for st in d.names_of(ri) {
                match own.iter_mut().find(|x| x.0 == st.name) {
                    Some(x) => {
                        x.1 += st.sum_ns;
                        x.2 += st.count;
                    }
                    None => own.push((st.name, st.sum_ns, st.count)),
                }
            }
            let lo = d.peer_medians.partition_point(|p| p.0 < group);
            for &(g, name, m) in d.peer_medians[lo..].iter().take_while(|p| p.0 == group) {
                debug_assert_eq!(g, group);
                if name == u32::MAX {
                    peer_lat.push(m);
                } else if name == u32::MAX - 1 {
                    peer_gap.push(m);
                } else {
                    match peer.iter_mut().find(|x| x.0 == name) {
                        Some(x) => x.1.push(m),
                        None => peer.push((name, vec![m])),
                    }
                }
            }
            let p = d.ranks[ri].issue_p50_ns;
            if p.is_finite() {
                lat.push(p);
            }
            let g = d.ranks[ri].launch_gap_p50_ns;
            if g.is_finite() {
                gap.push(g);
            }
        }
        let (mut own_sum, mut peer_sum) = (0.0, 0.0);
        for (name, sum, count) in &own {
            if let Some((_, v)) = peer.iter_mut().find(|x| x.0 == *name) {
                own_sum += sum / (*count).max(1) as f64;
                peer_sum += median(v);
            }
        }
        let med = |v: &mut Vec<f64>| if v.is_empty() { f64::NAN } else { median(v) };
        PeerStats {
            compute_ratio: (peer_sum > 0.0).then(|| own_sum / peer_sum),
            issue_latency: med(&mut lat),
            peer_issue: med(&mut peer_lat),
            launch_gap: med(&mut gap),
            peer_launch_gap: med(&mut peer_gap),
        }
    }
}

/// Share of a histogram's kernels whose issue latency is below `limit_ns`.
fn share_below(hist: &[u64; ISSUE_BINS], limit_ns: f64) -> f64 {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return f64::NAN;
    }
    let low: u64 = (0..ISSUE_BINS)
        .filter(|&b| issue_bin_floor(b + 1) <= limit_ns)
        .map(|b| hist[b])
        .sum();
    low as f64 / total as f64
}

/// The issue-latency histograms of a rank and of its peer group over `scope`.
fn issue_histograms(
    a: &Analysis,
    ri: usize,
    scope: &[usize],
) -> ([u64; ISSUE_BINS], Vec<[u64; ISSUE_BINS]>) {
    let group = a.ctx.peer_group[ri];
    let mut own = [0u64; ISSUE_BINS];
    let mut peers: Vec<[u64; ISSUE_BINS]> = Vec::new();
    let members: Vec<usize> = (0..a.n_ranks())
        .filter(|&r| a.ctx.peer_group[r] == group && r != ri)
        .take(64)
        .collect();
    for &i in scope {
        let d = a.digests[i];
        for (b, v) in d.ranks[ri].issue_hist.iter().enumerate() {
            own[b] += *v as u64;
        }
    }
    for &r in &members {
        let mut h = [0u64; ISSUE_BINS];
        for &i in scope {
            for (b, v) in a.digests[i].ranks[r].issue_hist.iter().enumerate() {
                h[b] += *v as u64;
            }
        }
        peers.push(h);
    }
    (own, peers)
}

/// Explains why rank index `ri` is slow over the iterations `scope` (indices), given the
/// delay it caused (`excess_ns`) to weigh host phases against.
pub(crate) fn rank_cause(
    a: &Analysis,
    cfg: &EngineConfig,
    ri: usize,
    scope: &[usize],
    excess_ns: f64,
) -> RankCause {
    let mut host_excess = [0.0f64; 5];
    for &i in scope {
        for (slot, v) in a.rank(ri, i).host_excess_ns.iter().enumerate() {
            host_excess[slot] += v;
        }
    }
    let (host_kind, host_ns) = (0..HOST_KINDS.len())
        .max_by(|&x, &y| host_excess[x].total_cmp(&host_excess[y]))
        .map(|slot| (HOST_KINDS[slot], host_excess[slot]))
        .unwrap_or((OpKind::HostOther, 0.0));
    let peers = PeerStats::of(a, ri, scope);
    let compute_ratio = peers.compute_ratio;
    let issue = peers.issue_latency;
    let peer_issue = peers.peer_issue;
    let mut evidence = Vec::new();
    if let Some(cr) = compute_ratio {
        evidence.push(Evidence::new(
            EvidenceKey::ComputeTimeRatio,
            cr,
            Some(1.0),
            Unit::Ratio,
            "mean duration of its compute kernels over the same kernels on ranks of the same stage"
                .into(),
        ));
    }
    if issue.is_finite() && peer_issue.is_finite() {
        evidence.push(Evidence::new(
            EvidenceKey::IssueLatencyMs,
            issue / 1e6,
            Some(peer_issue / 1e6),
            Unit::Ms,
            "median time from CPU launch to GPU start of its kernels (low: the GPU waits for the CPU)".into(),
        ));
    }
    // XPUTimer's steep issue-latency CDF: nearly every kernel starts as soon as it is
    // launched, far more often than on its peers. Launches within 4x the rank's own
    // floor count as immediate.
    let (own_hist, peer_hists) = issue_histograms(a, ri, scope);
    let floor_bin = (0..ISSUE_BINS).find(|&b| own_hist[b] > 0).unwrap_or(0);
    let limit = issue_bin_floor(floor_bin + 1) * 4.0;
    let own_low = share_below(&own_hist, limit);
    let mut peer_low: Vec<f64> = peer_hists
        .iter()
        .map(|h| share_below(h, limit))
        .filter(|v| v.is_finite())
        .collect();
    let peer_low = if peer_low.is_empty() {
        f64::NAN
    } else {
        median(&mut peer_low)
    };
    if own_low.is_finite() && peer_low.is_finite() {
        evidence.push(Evidence::new(
            EvidenceKey::ImmediateLaunchShare,
            own_low,
            Some(peer_low),
            Unit::None,
            format!(
                "share of its kernels that started within {:.0} us of their launch (a steep issue-latency CDF: the GPU waits for the CPU); baseline: its peers' median",
                limit / 1e3
            ),
        ));
    }
    let steep =
        own_low.is_finite() && peer_low.is_finite() && own_low >= 0.8 && own_low >= peer_low + 0.3;
    // The CPU's launch rate: a launch-bound rank takes longer between launches than its
    // peers; a slow GPU's CPU launches as fast as theirs and waits.
    let (gap, peer_gap) = (peers.launch_gap, peers.peer_launch_gap);
    let slow_launches =
        gap.is_finite() && peer_gap.is_finite() && peer_gap > 0.0 && gap >= 1.5 * peer_gap;
    if gap.is_finite() && peer_gap.is_finite() {
        evidence.push(Evidence::new(
            EvidenceKey::LaunchIntervalMs,
            gap / 1e6,
            Some(peer_gap / 1e6),
            Unit::Ms,
            "median time between the CPU launch of a compute op and the next launch (long: the CPU cannot issue work fast enough); baseline: its peers' median".into(),
        ));
    }
    let excess = excess_ns.max(1.0);
    let (kind, component, what, action) = if host_ns >= 0.4 * excess {
        evidence.push(Evidence::new(
            EvidenceKey::HostPhaseExcessMs,
            host_ns / 1e6,
            None,
            Unit::Ms,
            format!(
                "{} took this much longer than on the other ranks",
                host_kind.as_str()
            ),
        ));
        let (what, action) = host_pause(host_kind);
        (FindingKind::HostStall, Component::Host, what, action)
    } else if (steep
        || slow_launches
        || (issue.is_finite() && peer_issue.is_finite() && issue < 0.5 * peer_issue))
        && compute_ratio.is_some_and(|c| c > 1.0 + cfg.min_rank_excess / 2.0)
    {
        (
            FindingKind::LaunchBound,
            Component::Process,
            "kernel launches that cannot keep its GPU busy",
            "the CPU of this rank is the bottleneck: check CPU contention and pinning on its node, accidental device syncs, and use CUDA graphs or fewer, larger kernels",
        )
    } else if compute_ratio.is_none() {
        (
            FindingKind::SlowRank,
            Component::Process,
            "its own delays before collectives (the trace has no compute or host ops to tell GPU from host)",
            "trace this rank's compute and host side (torch.profiler or flare's tracer) to tell a slow GPU from a host stall; meanwhile check its GPU clocks and its node's CPU load",
        )
    } else {
        (
            FindingKind::SlowGpu,
            Component::Gpu,
            "slow compute",
            "check the GPU's clocks, temperature and power cap (nvidia-smi -q -d PERFORMANCE); if it stays slow, drain the node and replace the GPU",
        )
    };
    RankCause {
        kind,
        component,
        what: what.to_string(),
        action: action.to_string(),
        evidence,
    }
}

/// What a host phase's pauses are, and what to do about them.
pub(crate) fn host_pause(kind: OpKind) -> (&'static str, &'static str) {
    match kind {
        OpKind::GarbageCollection => (
            "garbage-collection pauses",
            "schedule Python GC (gc.freeze() after start-up, gc.disable() with gc.collect() every N steps on all ranks at once)",
        ),
        OpKind::DataLoader => (
            "dataloader stalls",
            "fix the input pipeline on this rank: more dataloader workers, prefetching; check its node's storage and CPU load",
        ),
        OpKind::Checkpoint => (
            "checkpoint writes",
            "make checkpointing asynchronous or stagger it across ranks",
        ),
        _ => (
            "host-side pauses",
            "profile the host side of this rank (py-spy) and remove the pause",
        ),
    }
}
