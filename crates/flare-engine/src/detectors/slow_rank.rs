//! Slow-rank localization from collective arrivals.
//!
//! Before every sync op, each member spends some time on its own (compute, host work,
//! kernel launches) since its previous sync op ended. Members of one collective do the
//! same work, so a member that arrives late *because its own stretch took longer* is the
//! cause, while members that arrive late because they waited earlier carry no excess of
//! their own. Excess is accumulated per rank across instances and iterations, compared
//! across ranks robustly, and the suspect's own ops say why: GPU kernels slower than its
//! peers' (slow GPU), host phases longer (GC, dataloader), or kernels issued too late for
//! the GPU to stay busy (launch-bound: low issue latency with starved kernels).

use super::{iteration_ranges, rank_culprit};
use crate::stats::{confidence, median, median_mad};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{Component, Evidence, Finding, FindingKind, OpKind, Severity};
use std::collections::HashMap;

pub struct SlowRankDetector;

struct Suspect {
    rank_index: usize,
    excess_ns: f64,
    rel: f64,
    z: f64,
    iterations: Vec<usize>,
    sustained: bool,
}

impl Detector for SlowRankDetector {
    fn id(&self) -> &'static str {
        "slow_rank"
    }
    fn summary(&self) -> &'static str {
        "the rank whose own work delays the collectives its peers wait in, and why (GPU, host, launch)"
    }
    fn needs(&self) -> &'static str {
        "sync ops with communicator and sequence on every member (3+ members), arrival and end times"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let n_its = a.n_its();
        let n_ranks = a.trace.ranks.len();
        if n_its == 0 || a.self_expected_ns.iter().all(|&e| e == 0.0) {
            return Outcome::NotEnoughData(
                "no collective with 3 or more members seen by all of them".into(),
            );
        }
        // Sustained: excess over the whole window.
        let mut rel = vec![f64::NAN; n_ranks];
        let mut tot = vec![0.0; n_ranks];
        for (r, (rel_r, tot_r)) in rel.iter_mut().zip(tot.iter_mut()).enumerate() {
            let (mut e, mut x) = (0.0, 0.0);
            for i in 0..n_its {
                e += a.self_excess_ns[r * n_its + i];
                x += a.self_expected_ns[r * n_its + i];
            }
            if x > 0.0 {
                *rel_r = e / x;
                *tot_r = e;
            }
        }
        let valid: Vec<f64> = rel.iter().copied().filter(|v| v.is_finite()).collect();
        if valid.len() < 3 {
            return Outcome::NotEnoughData("fewer than 3 ranks with comparable sync ops".into());
        }
        let (m, s) = median_mad(&valid);
        let s = s.max(0.002);
        // Per iteration, for faults that come and go.
        let mut per_it_stats = Vec::with_capacity(n_its);
        for i in 0..n_its {
            let v: Vec<f64> = (0..n_ranks)
                .map(|r| a.relative_excess(r, i))
                .filter(|v| v.is_finite())
                .collect();
            let (mi, si) = median_mad(&v);
            per_it_stats.push((mi, si.max(0.003)));
        }
        let min_hits = if n_its >= 4 { 2 } else { 1 };
        let mut suspects = Vec::new();
        for r in 0..n_ranks {
            if !rel[r].is_finite() {
                continue;
            }
            let z = (rel[r] - m) / s;
            let hits: Vec<usize> = (0..n_its)
                .filter(|&i| {
                    let v = a.relative_excess(r, i);
                    let (mi, si) = per_it_stats[i];
                    v.is_finite() && v - mi >= (3.0 * cfg.min_rank_excess).max(cfg.min_rank_z * si)
                })
                .collect();
            let sustained = rel[r] - m >= cfg.min_rank_excess && z >= cfg.min_rank_z;
            if sustained || hits.len() >= min_hits {
                let excess: f64 = if sustained {
                    tot[r]
                } else {
                    hits.iter().map(|&i| a.self_excess_ns[r * n_its + i]).sum()
                };
                suspects.push(Suspect {
                    rank_index: r,
                    excess_ns: excess,
                    rel: rel[r],
                    z,
                    iterations: hits,
                    sustained,
                });
            }
        }
        if suspects.is_empty() {
            return Outcome::Findings(vec![]);
        }
        suspects.sort_by(|x, y| y.excess_ns.total_cmp(&x.excess_ns));
        // Many suspects at once is a structural effect, not a device: leave it to the
        // imbalance detectors and report only the clearest few.
        if suspects.len() > (n_ranks / 8).max(4) {
            suspects.truncate(2);
        } else {
            suspects.truncate(5);
        }
        let peers = PeerStats::new(a);
        let top_excess = suspects[0].excess_ns.max(1.0);
        let findings = suspects
            .iter()
            .map(|s| self.explain(a, cfg, s, &peers, top_excess, m))
            .collect();
        Outcome::Findings(findings)
    }
}

/// Per-rank op statistics and the medians of peers (ranks of the same pipeline stage).
struct PeerStats {
    /// Per rank index: mean duration of compute ops by name.
    compute_mean: Vec<HashMap<u32, f64>>,
    /// Per rank index: median issue latency of compute ops, ns.
    issue_latency: Vec<f64>,
    /// (name, iteration) -> median host op duration over all ranks.
    host_median: HashMap<(u32, u32), f64>,
    /// Peer group of each rank index.
    group: Vec<u32>,
    /// Per group: median of compute_mean by name, median issue latency.
    group_compute: HashMap<(u32, u32), f64>,
    group_issue: HashMap<u32, f64>,
}

impl PeerStats {
    fn new(a: &Analysis) -> Self {
        let trace = a.trace;
        let group: Vec<u32> = trace
            .ranks
            .iter()
            .map(|r| {
                trace
                    .job
                    .parallel
                    .as_ref()
                    .map_or(0, |p| p.coords(r.rank).pp)
            })
            .collect();
        let mut compute_mean = Vec::with_capacity(trace.ranks.len());
        let mut issue_latency = Vec::with_capacity(trace.ranks.len());
        let mut host: HashMap<(u32, u32), Vec<f64>> = HashMap::new();
        let mut lat = Vec::new();
        for r in &trace.ranks {
            let mut sums: HashMap<u32, (f64, u32)> = HashMap::new();
            lat.clear();
            for o in &r.ops {
                let Some(d) = o.duration() else { continue };
                if o.kind == OpKind::Compute {
                    let e = sums.entry(o.name).or_default();
                    e.0 += d as f64;
                    e.1 += 1;
                    if let Some(i) = o.issue() {
                        lat.push((o.start_ns - i) as f64);
                    }
                } else if o.kind.is_host() {
                    host.entry((o.name, o.iteration))
                        .or_default()
                        .push(d as f64);
                }
            }
            compute_mean.push(
                sums.into_iter()
                    .map(|(k, (s, n))| (k, s / n as f64))
                    .collect(),
            );
            issue_latency.push(if lat.is_empty() {
                f64::NAN
            } else {
                median(&mut lat)
            });
        }
        let host_median = host
            .into_iter()
            .map(|(k, mut v)| (k, median(&mut v)))
            .collect();
        let mut gc: HashMap<(u32, u32), Vec<f64>> = HashMap::new();
        let mut gi: HashMap<u32, Vec<f64>> = HashMap::new();
        for (ri, means) in compute_mean.iter().enumerate() {
            for (&name, &m) in means {
                gc.entry((group[ri], name)).or_default().push(m);
            }
            if issue_latency[ri].is_finite() {
                gi.entry(group[ri]).or_default().push(issue_latency[ri]);
            }
        }
        PeerStats {
            compute_mean,
            issue_latency,
            host_median,
            group_compute: gc
                .into_iter()
                .map(|(k, mut v)| (k, median(&mut v)))
                .collect(),
            group_issue: gi
                .into_iter()
                .map(|(k, mut v)| (k, median(&mut v)))
                .collect(),
            group,
        }
    }

    /// Weighted ratio of this rank's compute time to its peers' for the same ops.
    fn compute_ratio(&self, ri: usize) -> Option<f64> {
        let (mut own, mut peer) = (0.0, 0.0);
        for (&name, &m) in &self.compute_mean[ri] {
            if let Some(&p) = self.group_compute.get(&(self.group[ri], name)) {
                own += m;
                peer += p;
            }
        }
        (peer > 0.0).then(|| own / peer)
    }
}

impl SlowRankDetector {
    fn explain(
        &self,
        a: &Analysis,
        cfg: &EngineConfig,
        s: &Suspect,
        peers: &PeerStats,
        top_excess: f64,
        median_rel: f64,
    ) -> Finding {
        let trace = a.trace;
        let rt = &trace.ranks[s.rank_index];
        let rank = rt.rank;
        let its: Vec<u32> = if s.sustained {
            vec![]
        } else {
            s.iterations.iter().map(|&i| a.iterations[i]).collect()
        };
        let in_scope = |it: u32| its.is_empty() || its.binary_search(&it).is_ok();
        // Host phases longer than the same phase on other ranks.
        let mut host_excess: HashMap<OpKind, f64> = HashMap::new();
        for o in rt
            .ops
            .iter()
            .filter(|o| o.kind.is_host() && in_scope(o.iteration))
        {
            if let (Some(d), Some(&med)) =
                (o.duration(), peers.host_median.get(&(o.name, o.iteration)))
            {
                *host_excess.entry(o.kind).or_default() += (d as f64 - med).max(0.0);
            }
        }
        let (host_kind, host_ns) = host_excess
            .iter()
            .max_by(|x, y| x.1.total_cmp(y.1))
            .map(|(k, v)| (*k, *v))
            .unwrap_or((OpKind::HostOther, 0.0));
        let compute_ratio = peers.compute_ratio(s.rank_index);
        let issue = peers.issue_latency[s.rank_index];
        let peer_issue = peers
            .group_issue
            .get(&peers.group[s.rank_index])
            .copied()
            .unwrap_or(f64::NAN);
        let mut evidence = vec![Evidence::new(
            "self_time_excess",
            s.rel * 100.0,
            Some(median_rel * 100.0),
            "%",
            format!(
                "time between its collectives exceeds the other members' by {:.1}% over the window ({:.1} ms in all), {:.1} robust standard deviations above the typical rank",
                (s.rel - median_rel) * 100.0,
                s.excess_ns / 1e6,
                s.z
            ),
        )];
        if !s.iterations.is_empty() {
            evidence.push(Evidence::new(
                "irregular_iterations",
                s.iterations.len() as f64,
                Some(a.n_its() as f64),
                "iterations",
                format!(
                    "clearly late in iterations {}",
                    iteration_ranges(
                        &s.iterations
                            .iter()
                            .map(|&i| a.iterations[i])
                            .collect::<Vec<_>>()
                    )
                ),
            ));
        }
        if let Some(cr) = compute_ratio {
            evidence.push(Evidence::new(
                "compute_time_ratio",
                cr,
                Some(1.0),
                "x",
                "mean duration of its compute kernels over the same kernels on ranks of the same stage".into(),
            ));
        }
        if issue.is_finite() && peer_issue.is_finite() {
            evidence.push(Evidence::new(
                "issue_latency_ms",
                issue / 1e6,
                Some(peer_issue / 1e6),
                "ms",
                "median time from CPU launch to GPU start of its kernels (low: the GPU waits for the CPU)".into(),
            ));
        }
        let window_excess = s.excess_ns.max(1.0);
        let (kind, component, what, action) = if host_ns >= 0.4 * window_excess {
            evidence.push(Evidence::new(
                "host_phase_excess_ms",
                host_ns / 1e6,
                None,
                "ms",
                format!(
                    "{} took this much longer than on the other ranks",
                    host_kind.as_str()
                ),
            ));
            let (what, action) = match host_kind {
                OpKind::GarbageCollection => (
                    "garbage-collection pauses",
                    "schedule Python GC (gc.freeze() after start-up, gc.disable() with gc.collect() every N steps on all ranks at once)",
                ),
                OpKind::DataLoader => (
                    "dataloader stalls",
                    "fix the input pipeline on this rank: more dataloader workers, prefetching, check its node's storage and CPU load",
                ),
                OpKind::Checkpoint => ("checkpoint writes", "make checkpointing asynchronous or stagger it"),
                _ => ("host-side pauses", "profile the host side of this rank (py-spy) and remove the pause"),
            };
            (
                FindingKind::HostStall,
                Component::Host,
                what,
                action.to_string(),
            )
        } else if issue.is_finite()
            && peer_issue.is_finite()
            && issue < 0.5 * peer_issue
            && compute_ratio.is_some_and(|c| c > 1.0 + cfg.min_rank_excess / 2.0)
        {
            (
                FindingKind::LaunchBound,
                Component::Process,
                "kernel launches that cannot keep its GPU busy",
                "the CPU of this rank is the bottleneck: check CPU contention and pinning on its node, accidental device syncs, and use CUDA graphs or fewer, larger kernels".to_string(),
            )
        } else if compute_ratio.is_none() {
            (
                FindingKind::SlowRank,
                Component::Process,
                "its own delays before collectives (the trace has no compute or host ops to tell GPU from host)",
                "trace this rank's compute and host side (torch.profiler or flare's tracer) to tell a slow GPU from a host stall; meanwhile check its GPU clocks and its node's CPU load".to_string(),
            )
        } else {
            (
                FindingKind::SlowGpu,
                Component::Gpu,
                "slow compute",
                "check the GPU's clocks, temperature and power cap (nvidia-smi -q -d PERFORMANCE); if it stays slow, drain the node and replace the GPU".to_string(),
            )
        };
        let mut culprit = rank_culprit(trace, component, rank);
        culprit.score = (s.excess_ns / top_excess).clamp(0.0, 1.0);
        let where_ = culprit.describe();
        Finding {
            kind,
            severity: Severity::Warning,
            summary: format!(
                "rank {rank} delays its peers by {:.1}% through {what}{} ({})",
                (s.rel - median_rel).max(0.0) * 100.0,
                if its.is_empty() {
                    String::new()
                } else {
                    format!(" in iterations {}", iteration_ranges(&its))
                },
                where_
            ),
            confidence: confidence(
                s.z.max(if s.iterations.len() >= 2 { 12.0 } else { 0.0 }),
                2.0,
            ),
            culprits: vec![culprit],
            evidence,
            action,
            iterations: its,
            detector: self.id().into(),
        }
    }
}
