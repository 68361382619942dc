//! Why a rank is slow: its own figures against its peers' (ranks of the same pipeline
//! stage) over some iterations. Shared by the detectors that name a rank.

use crate::digest::{issue_bin_floor, HOST_KINDS, ISSUE_BINS};
use crate::live::TimeSpent;
use crate::stats::median;
use crate::{Analysis, EngineConfig};
use flare_model::{Component, Direction, Evidence, EvidenceKey, FindingKind, OpKind, Unit};

/// A rank's slowness, explained.
pub(crate) struct RankCause {
    pub kind: FindingKind,
    pub component: Component,
    /// Words for the summary: "through {what}".
    pub what: String,
    pub action: String,
    pub evidence: Vec<Evidence>,
    /// The cause weighs on its peers about as much (its node's cores are oversubscribed
    /// and it got fewer turns this time): worth knowing, not the rank's fault, so the
    /// finding is an `info`.
    pub node_wide: bool,
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
            compute_ratio_detail(cr, device(a)),
        ));
    }
    let issue_known = issue.is_finite() && peer_issue.is_finite();
    if issue_known {
        evidence.push(Evidence::new(
            EvidenceKey::IssueLatencyMs,
            issue / 1e6,
            Some(peer_issue / 1e6),
            Unit::Ms,
            issue_latency_detail(issue, peer_issue),
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
            immediate_share_detail(own_low, peer_low, limit),
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
            launch_interval_detail(gap, peer_gap),
        ));
    }
    let quick_issue = issue_known && issue < 0.5 * peer_issue;
    let excess = excess_ns.max(1.0);
    // What slower compute ops cost it: weighed against extra ops and against the delay.
    let slowdown = slowdown_ns(a, ri, scope, compute_ratio);
    let window_ns: f64 = scope.iter().filter_map(|&i| a.iteration_ns[i]).sum();
    let mut node_wide = false;
    let (kind, component, what, action) = if host_ns >= 0.4 * excess {
        evidence.push(
            Evidence::new(
                EvidenceKey::HostPhaseExcessMs,
                host_ns / 1e6,
                None,
                Unit::Ms,
                host_excess_detail(host_kind, host_ns, window_ns),
            )
            .decisive_if(!negligible_host_excess(host_ns, window_ns)),
        );
        let (what, action) = host_pause(host_kind);
        (FindingKind::HostStall, Component::Host, what, action)
    } else if (steep || slow_launches || quick_issue)
        && compute_ratio.is_some_and(|c| c > 1.0 + cfg.slow_rank.min_excess / 2.0)
        // CPU-side compute is run, not launched: nothing for a GPU to starve on.
        && !a.ctx.meta.cpu_compute
    {
        // Decisive: the compute ratio and the first launch sign that held.
        let sign = if steep {
            EvidenceKey::ImmediateLaunchShare
        } else if slow_launches {
            EvidenceKey::LaunchIntervalMs
        } else {
            EvidenceKey::IssueLatencyMs
        };
        mark(&mut evidence, &[EvidenceKey::ComputeTimeRatio, sign]);
        (
            FindingKind::LaunchBound,
            Component::Process,
            "kernel launches that cannot keep its GPU busy",
            "the CPU of this rank is the bottleneck: check CPU contention and pinning on its node, accidental device syncs, and use CUDA graphs or fewer, larger kernels",
        )
    } else if let Some((split, spent)) = compute_ratio
        .is_none()
        .then(|| cpu_split(a, ri))
        .flatten()
        .and_then(|c| Some((c, c.spent()?)))
    {
        evidence.push(
            Evidence::new(
                EvidenceKey::CpuTimePerIterationMs,
                split.cpu_ns / 1e6,
                Some(split.peer_cpu_ns / 1e6),
                Unit::Ms,
                cpu_split_detail(&split, spent),
            )
            .decisive(),
        );
        match spent {
            TimeSpent::OnCpu => (
                FindingKind::SlowCpu,
                Component::Process,
                "more CPU work per step than its peers (the trace has no compute ops to say which: more work or the same work slower)",
                "profile this rank (py-spy top --pid, or torch.profiler) for what its CPU does that its peers' do not: work only it runs (extra forward passes, evaluation, logging, metrics) or the same work slower (throttling, thread pinning, OMP_NUM_THREADS)",
            ),
            TimeSpent::WaitingForCpu if split.peer_runqueue_ns >= 0.5 * split.extra_ns => {
                // Its peers wait for a CPU about as long as it was late: the node has
                // fewer free cores than busy threads, and who waits most is the
                // scheduler's draw.
                node_wide = true;
                (
                    FindingKind::SlowCpu,
                    Component::Host,
                    "waiting for a CPU on an oversubscribed node (its peers wait for one too)",
                    "the node runs more busy threads than it has cores: keep ranks x OMP_NUM_THREADS (plus data-loader workers) within its cores, pin ranks to their own cores (taskset, numactl), and move other work off it",
                )
            }
            TimeSpent::WaitingForCpu => (
                FindingKind::SlowCpu,
                Component::Host,
                "waiting for a CPU: other processes held its cores",
                "find what else runs on its node's cores (top, pidstat -u 1): other jobs, data-loader workers, the OS; pin the ranks to their own cores (taskset, numactl) and keep OMP_NUM_THREADS x ranks within the node's cores; the rank's own code is not at fault",
            ),
            TimeSpent::OffCpu if split.peer_runqueue_ns >= split.extra_ns => {
                // Its main thread was off the CPU, but every peer's main thread waited
                // for a CPU as long as it was late: the agent watches main threads only,
                // and one blocked on its own helper threads (a DDP reducer's, Gloo's),
                // themselves waiting for a core, looks the same as a sleep. The evidence
                // does not decide between a pause of its own and the node's
                // oversubscription.
                node_wide = true;
                (
                    FindingKind::SlowCpu,
                    Component::Host,
                    "pauses off its CPU on an oversubscribed node (its peers wait for a CPU as long as it was late; its main thread may have waited for its own threads waiting for one)",
                    "the node runs more busy threads than it has cores: keep ranks x OMP_NUM_THREADS (plus data-loader workers) within its cores and move other work off it; if this rank stays the late one, see what it waits for (py-spy dump --pid)",
                )
            }
            TimeSpent::OffCpu => (
                FindingKind::HostStall,
                Component::Host,
                "pauses off its CPU before its collectives (sleeping or blocked: its CPU time per step matches its peers')",
                "see what it waits for: py-spy dump --pid a few times (or py-spy record --idle) on its node; look for sleeps, blocking I/O (checkpoints, logging to a slow filesystem), locks, a data loader with too few workers; the hardware is not at fault",
            ),
        }
    } else if compute_ratio.is_none() && a.ctx.meta.cpu_compute {
        (
            FindingKind::SlowRank,
            Component::Process,
            "its own delays before collectives (the trace has no compute or host ops to tell slow compute from a stall)",
            "trace this rank's compute and host side (flare.span around forward/backward, or torch.profiler) to tell slow compute from a stall; meanwhile check its node's CPU load and pinning",
        )
    } else if compute_ratio.is_none() {
        (
            FindingKind::SlowRank,
            Component::Process,
            "its own delays before collectives (the trace has no compute or host ops to tell GPU from host)",
            "trace this rank's compute and host side (torch.profiler or flare's tracer) to tell a slow GPU from a host stall; meanwhile check its GPU clocks and its node's CPU load",
        )
    } else if let Some(work) =
        ComputeWork::of(a, ri, scope).filter(|w| w.explains(excess, slowdown))
    {
        // More ops than its peers, at about their speed: extra work, not slow hardware.
        evidence.push(work.evidence().decisive());
        mark(&mut evidence, &[EvidenceKey::ComputeTimeRatio]);
        (
            FindingKind::ExtraWork,
            Component::Process,
            "more compute than its peers (it runs more ops than they do)",
            "find what this rank computes that its peers do not: a code path only it takes (extra forward passes, evaluation, logging or metrics on one rank), or more data; the hardware is not at fault",
        )
    } else if compute_ratio.is_some_and(|c| !slower_compute_explains(a, c, slowdown, excess)) {
        // Its kernels run at its peers' speed: the delay is elsewhere, and draining a
        // healthy GPU would not remove it.
        mark(&mut evidence, &[EvidenceKey::ComputeTimeRatio]);
        (
            FindingKind::SlowRank,
            Component::Process,
            "delays outside its compute and traced host phases (its compute runs at its peers' speed)",
            if a.ctx.meta.cpu_compute {
                "its compute is not slower: look at what else holds it before its collectives (CPU contention, untraced host work, its network); profile it (py-spy, torch.profiler)"
            } else {
                "its GPU is not slower: look at what else holds it before its collectives (communication outside them over a slow NIC or link, CPU contention, untraced host work); profile it (py-spy, torch.profiler) and check its node's NICs (ibstat, port counters)"
            },
        )
    } else if a.ctx.meta.cpu_compute {
        mark(&mut evidence, &[EvidenceKey::ComputeTimeRatio]);
        (
            FindingKind::SlowCpu,
            Component::Host,
            "slow compute on its CPU",
            "its CPU runs the same ops slower than its peers': check other processes on its cores (top, pidstat), CPU frequency and thermal throttling, thread pinning and OMP_NUM_THREADS; a node with more ranks than cores slows them all",
        )
    } else {
        mark(&mut evidence, &[EvidenceKey::ComputeTimeRatio]);
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
        node_wide,
    }
}

/// On a live job computing on CPUs, a rank's extra time against its extra CPU time.
fn cpu_split(a: &Analysis, ri: usize) -> Option<crate::live::CpuSplit> {
    let w = a.live?;
    let group = a.ctx.peer_group[ri];
    let peers = (0..a.n_ranks())
        .filter(|&r| a.ctx.peer_group[r] == group)
        .map(|r| a.rank_id(r));
    w.cpu_split(a.rank_id(ri), peers)
}

fn cpu_split_detail(c: &crate::live::CpuSplit, spent: TimeSpent) -> String {
    let pct = |share: f64| format!("{:.0}%", (share * 100.0).clamp(0.0, 100.0));
    let head = format!(
        "{:.1} ms of CPU per step against {:.1} ms on its peers, of its {:.1} ms extra per step",
        c.cpu_ns / 1e6,
        c.peer_cpu_ns / 1e6,
        c.extra_ns / 1e6
    );
    match spent {
        TimeSpent::OnCpu => format!("{head}: {} was CPU work", pct(c.on_cpu_share())),
        TimeSpent::WaitingForCpu => format!(
            "{head}: {} waiting for a CPU ({:.1} ms per step in the run queue against {:.1} ms)",
            pct(c.runqueue_share()),
            c.runqueue_ns / 1e6,
            c.peer_runqueue_ns / 1e6
        ),
        TimeSpent::OffCpu => format!(
            "{head}: {} on the CPU, the rest off it (sleeping or blocked)",
            pct(c.on_cpu_share())
        ),
    }
}

/// A rank's compute against its peers' over the iterations it is explained in: its time
/// and op count, its peer group's (ranks of its stage) medians, and the time of the ops it
/// runs beyond its peers' count of the same op (at its own mean time for that op).
struct ComputeWork {
    own_ns: f64,
    peers_ns: f64,
    own_ops: f64,
    peer_ops: f64,
    extra_ns: f64,
}

impl ComputeWork {
    /// `None` without peers to compare with.
    fn of(a: &Analysis, ri: usize, scope: &[usize]) -> Option<Self> {
        let group = a.ctx.peer_group[ri];
        let peers: Vec<usize> = (0..a.n_ranks())
            .filter(|&r| r != ri && a.ctx.peer_group[r] == group)
            .take(256)
            .collect();
        if peers.is_empty() {
            return None;
        }
        let mut w = ComputeWork {
            own_ns: 0.0,
            peers_ns: 0.0,
            own_ops: 0.0,
            peer_ops: 0.0,
            extra_ns: 0.0,
        };
        let mut buf = Vec::with_capacity(peers.len());
        for &i in scope {
            let d = a.digests[i];
            let own = a.rank(ri, i);
            w.own_ns += own.compute_ns;
            w.own_ops += own.compute_ops as f64;
            buf.clear();
            buf.extend(peers.iter().map(|&r| a.rank(r, i).compute_ns));
            w.peers_ns += median(&mut buf);
            buf.clear();
            buf.extend(peers.iter().map(|&r| a.rank(r, i).compute_ops as f64));
            w.peer_ops += median(&mut buf);
            for st in d.names_of(ri) {
                buf.clear();
                buf.extend(peers.iter().map(|&r| {
                    d.names_of(r)
                        .iter()
                        .find(|p| p.name == st.name)
                        .map_or(0.0, |p| p.count as f64)
                }));
                let peer_count = median(&mut buf);
                let more = st.count as f64 - peer_count;
                if more > 0.0 {
                    w.extra_ns += more * st.sum_ns / st.count.max(1) as f64;
                }
            }
        }
        Some(w)
    }

    /// Whether it runs more ops than its peers (beyond a rounding of their count), and
    /// they account for a good part of the delay it made and for more of it than slower
    /// ops would (`slowdown_ns`).
    fn explains(&self, excess_ns: f64, slowdown_ns: f64) -> bool {
        self.peer_ops > 0.0
            && kernels_slower(self.own_ops / self.peer_ops)
            && self.extra_ns >= 0.4 * excess_ns
            && self.extra_ns > slowdown_ns
    }

    fn evidence(&self) -> Evidence {
        Evidence::new(
            EvidenceKey::ComputeTime,
            self.own_ns / 1e6,
            Some(self.peers_ns / 1e6),
            Unit::Ms,
            format!(
                "its compute time over these iterations, x{:.2} its peers' median: it ran {:.0} ops against their {:.0}, the extra ones taking {:.1} ms",
                self.own_ns / self.peers_ns.max(1.0),
                self.own_ops,
                self.peer_ops,
                self.extra_ns / 1e6
            ),
        )
    }
}

/// Kernels this much slower than their peers' on average are a slower GPU; below it,
/// the difference is the spread healthy GPUs show. The evidence is worded by the same
/// bound, so a finding never calls a GPU slow while its evidence says it is not.
const SLOWER_KERNELS: f64 = 0.02;

/// The compute time its ops being slower than its peers' cost it over `scope` (0 when
/// they are not slower).
fn slowdown_ns(a: &Analysis, ri: usize, scope: &[usize], ratio: Option<f64>) -> f64 {
    match ratio {
        Some(r) if r > 1.0 => {
            let compute_ns: f64 = scope.iter().map(|&i| a.rank(ri, i).compute_ns).sum();
            compute_ns * (r - 1.0) / r
        }
        _ => 0.0,
    }
}

/// Whether its compute ops being `ratio` times slower than its peers' (costing it
/// `slowdown_ns`) names the cause. On GPUs, kernels measurably slower are (a GPU's kernel
/// times hardly vary). CPU ops on shared cores vary with scheduling by tens of percent, so
/// there the slowdown must also account for a good part of the delay the rank made.
fn slower_compute_explains(a: &Analysis, ratio: f64, slowdown_ns: f64, excess_ns: f64) -> bool {
    kernels_slower(ratio) && (!a.ctx.meta.cpu_compute || slowdown_ns >= 0.4 * excess_ns)
}

/// Whether a compute-time ratio to the peers says the GPU is slower.
fn kernels_slower(ratio: f64) -> bool {
    Direction::of(ratio, 1.0, SLOWER_KERNELS) == Direction::Above
}

/// Marks the evidence of these keys as decisive.
fn mark(evidence: &mut [Evidence], keys: &[EvidenceKey]) {
    for e in evidence.iter_mut() {
        if keys.contains(&e.metric) {
            e.decisive = true;
        }
    }
}

/// Relative difference under which a value reads as its baseline's ("about the same").
const LEVEL: f64 = 0.05;

/// Host-phase excess below this share of the time of the iterations it was summed over
/// is noise (0.8 ms of dataloader time in a window of seconds): it is still reported when
/// it names the cause, but never as decisive evidence.
const HOST_NOISE_SHARE: f64 = 0.01;

/// Whether a host-phase excess is noise against the time of the iterations it was summed
/// over (see [`HOST_NOISE_SHARE`]); without iteration times it is not.
fn negligible_host_excess(host_ns: f64, window_ns: f64) -> bool {
    host_ns <= 0.0 || (window_ns > 0.0 && host_ns < HOST_NOISE_SHARE * window_ns)
}

/// "x1.80", in words that follow the value against the baseline.
fn times(value: f64, baseline: f64) -> String {
    if baseline > 0.0 {
        format!("x{:.2}", value / baseline)
    } else {
        "unlike".into()
    }
}

/// The compute-time ratio (its kernels' time over the same kernels' on its stage peers).
fn compute_ratio_detail(ratio: f64, device: &str) -> String {
    let ops = if device == "GPU" { "kernels" } else { "ops" };
    let what = format!(
        "mean duration of its compute {ops} over the same {ops} on ranks of the same stage"
    );
    match Direction::of(ratio, 1.0, SLOWER_KERNELS) {
        Direction::Above => format!(
            "{what}: {:.0}% longer (its {device} computes slower)",
            (ratio - 1.0) * 100.0
        ),
        Direction::Below => format!(
            "{what}: {:.0}% shorter (its {device} computes faster)",
            (1.0 - ratio) * 100.0
        ),
        Direction::Level => format!("{what}: about the same (its {device} computes like theirs)"),
    }
}

/// What computes the trace's compute ops: its GPUs, or its CPUs when it holds no GPU
/// activity.
pub(crate) fn device(a: &Analysis) -> &'static str {
    if a.ctx.meta.cpu_compute {
        "CPU"
    } else {
        "GPU"
    }
}

/// The median issue latency against its peers' (both in ns). Short: kernels start as soon
/// as they are launched, the GPU waits for the CPU; long: kernels queue behind a busy GPU.
fn issue_latency_detail(issue: f64, peer_issue: f64) -> String {
    let what = "median time from CPU launch to GPU start of its kernels";
    match Direction::of(issue, peer_issue, LEVEL) {
        Direction::Above => format!(
            "{what}, {} its peers' median: its kernels queue behind a busy GPU (the CPU launches ahead of it)",
            times(issue, peer_issue)
        ),
        Direction::Below => format!(
            "{what}, {} its peers' median: its kernels start as soon as they are launched (the GPU waits for the CPU)",
            times(issue, peer_issue)
        ),
        Direction::Level => format!("{what}, about its peers' median"),
    }
}

/// The share of kernels started within `limit_ns` of their launch against its peers'.
fn immediate_share_detail(own: f64, peers: f64, limit_ns: f64) -> String {
    let what = format!(
        "share of its kernels that started within {:.0} us of their launch; baseline: its peers' median",
        limit_ns / 1e3
    );
    match Direction::of(own, peers, LEVEL) {
        Direction::Above => format!(
            "{what}: more than theirs (a steep issue-latency CDF: the GPU waits for the CPU)"
        ),
        Direction::Below => {
            format!("{what}: fewer than theirs (its kernels wait for the GPU more often)")
        }
        Direction::Level => format!("{what}: about theirs"),
    }
}

/// The median launch interval against its peers' (both in ns).
fn launch_interval_detail(gap: f64, peer_gap: f64) -> String {
    let what = "median time between the CPU launch of a compute op and the next launch";
    match Direction::of(gap, peer_gap, LEVEL) {
        Direction::Above => format!(
            "{what}, {} its peers' median: its CPU issues work slower than theirs",
            times(gap, peer_gap)
        ),
        Direction::Below => format!(
            "{what}, {} its peers' median: its CPU issues work faster than theirs",
            times(gap, peer_gap)
        ),
        Direction::Level => {
            format!("{what}, about its peers' median: its CPU issues work as fast as theirs")
        }
    }
}

/// A host phase's time beyond its peers', against the time of the iterations it was
/// summed over.
fn host_excess_detail(kind: OpKind, host_ns: f64, window_ns: f64) -> String {
    let share = if window_ns > 0.0 {
        format!(
            " ({:.2}% of those iterations' time)",
            host_ns / window_ns * 100.0
        )
    } else {
        String::new()
    };
    if host_ns > 0.0 {
        format!(
            "{} took this much longer than on the other ranks{share}",
            kind.as_str()
        )
    } else {
        format!("{} took no longer than on the other ranks", kind.as_str())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wording_follows_the_value_against_its_baseline() {
        // (value, baseline, words the detail must hold, words it must not)
        let issue = [
            (
                2.0e6,
                1.0e6,
                "x2.00 its peers' median: its kernels queue",
                "waits for the CPU",
            ),
            (
                0.25e6,
                1.0e6,
                "x0.25 its peers' median: its kernels start as soon",
                "queue",
            ),
            (1.0e6, 1.0e6, "about its peers' median", "waits"),
        ];
        for (v, b, has, not) in issue {
            let d = issue_latency_detail(v, b);
            assert!(d.contains(has) && !d.contains(not), "{v} vs {b}: {d}");
        }
        let gap = [
            (
                3.0e6,
                1.0e6,
                "x3.00 its peers' median: its CPU issues work slower",
                "faster",
            ),
            (
                0.5e6,
                1.0e6,
                "x0.50 its peers' median: its CPU issues work faster",
                "slower",
            ),
            (1.0e6, 1.0e6, "as fast as theirs", "slower"),
        ];
        for (v, b, has, not) in gap {
            let d = launch_interval_detail(v, b);
            assert!(d.contains(has) && !d.contains(not), "{v} vs {b}: {d}");
        }
        let share = [
            (0.95, 0.4, "more than theirs", "fewer"),
            (0.1, 0.4, "fewer than theirs", "more than"),
            (0.4, 0.4, "about theirs", "waits"),
        ];
        for (v, b, has, not) in share {
            let d = immediate_share_detail(v, b, 8e3);
            assert!(d.contains(has) && !d.contains(not), "{v} vs {b}: {d}");
            assert!(d.contains("within 8 us"), "{d}");
        }
        let ratio = [
            (1.3, "30% longer (its GPU computes slower)", "faster"),
            (0.8, "20% shorter (its GPU computes faster)", "slower"),
            (1.0, "about the same", "slower"),
        ];
        for (v, has, not) in ratio {
            let d = compute_ratio_detail(v, "GPU");
            assert!(d.contains(has) && !d.contains(not), "{v}: {d}");
        }
        let host = [
            (
                5e6,
                100e6,
                "took this much longer than on the other ranks (5.00% of",
            ),
            (0.0, 100e6, "took no longer"),
            (5e6, 0.0, "took this much longer than on the other ranks"),
        ];
        for (v, w, has) in host {
            let d = host_excess_detail(OpKind::DataLoader, v, w);
            assert!(d.contains(has), "{v} of {w}: {d}");
        }
    }

    #[test]
    fn kernels_two_percent_slower_are_a_slower_gpu_and_the_wording_agrees() {
        for (ratio, slower) in [
            (1.3, true),
            (1.047, true),
            (1.025, true),
            (1.016, false),
            (1.0, false),
            (0.9, false),
        ] {
            assert_eq!(kernels_slower(ratio), slower, "{ratio}");
            let d = compute_ratio_detail(ratio, "GPU");
            assert_eq!(
                d.contains("its GPU computes slower"),
                slower,
                "{ratio}: {d}"
            );
        }
    }

    #[test]
    fn host_excess_under_one_percent_of_the_iterations_is_noise() {
        for (host_ns, window_ns, noise) in [
            // 0.8 ms of dataloader time in 2 s of iterations: noise.
            (0.8e6, 2e9, true),
            (19.9e6, 2e9, true),
            (20e6, 2e9, false),
            (500e6, 2e9, false),
            (0.0, 2e9, true),
            // No iteration times to weigh it against: not noise.
            (0.8e6, 0.0, false),
        ] {
            assert_eq!(
                negligible_host_excess(host_ns, window_ns),
                noise,
                "{host_ns} of {window_ns}"
            );
        }
    }
}
