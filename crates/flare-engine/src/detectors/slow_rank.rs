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

use super::iteration_ranges;
use crate::digest::HOST_KINDS;
use crate::stats::{confidence, median, median_mad};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{Component, Evidence, Finding, FindingKind, OpKind, Severity};

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
        let n_ranks = a.n_ranks();
        if n_its == 0
            || a.digests
                .iter()
                .all(|d| d.ranks.iter().all(|r| r.self_expected_ns == 0.0))
        {
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
                let ri = a.rank(r, i);
                e += ri.self_excess_ns;
                x += ri.self_expected_ns;
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
        // Per iteration, for faults that come and go (computed when digested).
        let per_it_stats: Vec<(f64, f64)> = a
            .digests
            .iter()
            .map(|d| (d.excess_median, d.excess_mad.max(0.003)))
            .collect();
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
                    hits.iter().map(|&i| a.rank(r, i).self_excess_ns).sum()
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
        let top_excess = suspects[0].excess_ns.max(1.0);
        let all: Vec<usize> = (0..n_its).collect();
        let findings = suspects
            .iter()
            .map(|s| {
                let peers = PeerStats::of(a, s.rank_index, &all);
                self.explain(a, cfg, s, &peers, top_excess, m)
            })
            .collect();
        Outcome::Findings(findings)
    }
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
}

impl PeerStats {
    fn of(a: &Analysis, ri: usize, scope: &[usize]) -> Self {
        let group = a.ctx.peer_group[ri];
        let mut own: Vec<(u32, f64, u32)> = Vec::new();
        let mut peer: Vec<(u32, Vec<f64>)> = Vec::new();
        let mut lat = Vec::new();
        let mut peer_lat = Vec::new();
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
        }
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
        let rank = a.rank_id(s.rank_index);
        let its: Vec<u32> = if s.sustained {
            vec![]
        } else {
            s.iterations.iter().map(|&i| a.iterations[i]).collect()
        };
        // Host phases longer than the same phase on other ranks.
        let mut host_excess = [0.0f64; 5];
        let scope: Vec<usize> = if s.sustained {
            (0..a.n_its()).collect()
        } else {
            s.iterations.clone()
        };
        for &i in &scope {
            for (slot, v) in a.rank(s.rank_index, i).host_excess_ns.iter().enumerate() {
                host_excess[slot] += v;
            }
        }
        let (host_kind, host_ns) = (0..HOST_KINDS.len())
            .max_by(|&x, &y| host_excess[x].total_cmp(&host_excess[y]))
            .map(|slot| (HOST_KINDS[slot], host_excess[slot]))
            .unwrap_or((OpKind::HostOther, 0.0));
        let compute_ratio = peers.compute_ratio;
        let issue = peers.issue_latency;
        let peer_issue = peers.peer_issue;
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
        let mut culprit = a.ctx.rank_culprit(component, rank);
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
