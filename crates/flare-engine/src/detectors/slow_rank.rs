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

use super::cause::rank_cause;
use super::iteration_ranges;
use crate::stats::{confidence, median_mad};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{DetectorId, Direction, Evidence, EvidenceKey, Finding, Severity, Unit};

/// When a rank is a suspect: the bounds every detector that compares ranks with their
/// peers uses (slow-rank, metrics, the cause of a late rank), so that they agree.
#[derive(Clone, Debug)]
pub struct SlowRankConfig {
    /// Its self time exceeds its peers' by this fraction...
    pub min_excess: f64,
    /// ...and by this many robust standard deviations of the ranks' excess.
    pub min_z: f64,
}

impl Default for SlowRankConfig {
    fn default() -> Self {
        SlowRankConfig {
            min_excess: 0.02,
            min_z: 6.0,
        }
    }
}

pub struct SlowRankDetector;

/// Self-time excess under which a rank of a job computing on CPUs is an `info`: the
/// spread that scheduling alone gives ranks sharing cores (profiled healthy 4-rank Gloo
/// jobs on 2 cores: up to 20.5%; the faults injected on the same jobs: 50% and more).
const CPU_NOISE: f64 = 0.30;

struct Suspect {
    rank_index: usize,
    excess_ns: f64,
    rel: f64,
    z: f64,
    iterations: Vec<usize>,
    sustained: bool,
    /// The iterations its cause is read from: the hits, or every iteration its replica's
    /// load does not explain.
    scope: Vec<usize>,
}

impl Detector for SlowRankDetector {
    fn id(&self) -> DetectorId {
        DetectorId::SlowRank
    }
    fn localizes(&self) -> bool {
        true
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
                .all(|d| d.self_time.iter().all(|t| t.expected_ns == 0.0))
        {
            return Outcome::NotEnoughData(
                "no collective with 3 or more members seen by all of them".into(),
            );
        }
        // Iterations in which a rank's whole data-parallel replica carried more work
        // (longer sequences) explain its lateness there: they are left out, and the
        // sequence-imbalance detector reports them.
        let loads = a.replica_loads();
        let replica_heavy = loads.any_heavy(cfg.imbalance.min_ratio);
        let explained = |r: usize, i: usize| -> bool {
            replica_heavy
                && a.ctx
                    .replica
                    .get(r)
                    .is_some_and(|&dp| loads.heavy(dp, i, cfg.imbalance.min_ratio))
        };
        // Sustained: excess over the whole window.
        let mut rel = vec![f64::NAN; n_ranks];
        let mut tot = vec![0.0; n_ranks];
        // Iteration by iteration: each digest's ranks lie together in memory.
        let mut expected = vec![0.0; n_ranks];
        // Per iteration, for faults that come and go (computed when digested): whether
        // each rank is clearly late in it, rank by rank, `n_its` flags each.
        let mut late = vec![false; n_ranks * n_its];
        for (i, d) in a.digests.iter().enumerate() {
            let (mi, si) = (d.excess_median, d.excess_mad.max(0.003));
            let bar = (3.0 * cfg.slow_rank.min_excess).max(cfg.slow_rank.min_z * si);
            for (r, x) in d.self_time.iter().enumerate().take(n_ranks) {
                if explained(r, i) {
                    continue;
                }
                tot[r] += x.excess_ns;
                expected[r] += x.expected_ns;
                // NaN without an expected self time: not late.
                let v = x.relative();
                late[r * n_its + i] = v.is_finite() && v - mi >= bar;
            }
        }
        for r in 0..n_ranks {
            if expected[r] > 0.0 {
                rel[r] = tot[r] / expected[r];
            } else {
                tot[r] = 0.0;
            }
        }
        let valid: Vec<f64> = rel.iter().copied().filter(|v| v.is_finite()).collect();
        if valid.len() < 3 {
            return Outcome::NotEnoughData("fewer than 3 ranks with comparable sync ops".into());
        }
        let (m, s) = median_mad(&valid);
        let s = s.max(0.002);
        let min_hits = if n_its >= 4 { 2 } else { 1 };
        let mut suspects = Vec::new();
        for r in 0..n_ranks {
            if !rel[r].is_finite() {
                continue;
            }
            let z = (rel[r] - m) / s;
            let hits: Vec<usize> = (0..n_its).filter(|&i| late[r * n_its + i]).collect();
            let sustained = rel[r] - m >= cfg.slow_rank.min_excess && z >= cfg.slow_rank.min_z;
            if sustained || hits.len() >= min_hits {
                let excess: f64 = if sustained {
                    tot[r]
                } else {
                    hits.iter()
                        .map(|&i| a.digests[i].self_time[r].excess_ns)
                        .sum()
                };
                let scope = if sustained {
                    (0..n_its).filter(|&i| !explained(r, i)).collect()
                } else {
                    hits.clone()
                };
                suspects.push(Suspect {
                    rank_index: r,
                    excess_ns: excess,
                    rel: rel[r],
                    z,
                    iterations: hits,
                    sustained,
                    scope,
                });
            }
        }
        if suspects.is_empty() {
            return Outcome::Findings(vec![]);
        }
        suspects.sort_by(|x, y| y.excess_ns.total_cmp(&x.excess_ns));
        // Many ranks late by about as much, across nodes, is a structural effect (a stage
        // or a data-parallel replica with more work), not a device: leave it to the
        // imbalance detectors.
        let top = suspects[0].excess_ns;
        let sharing: Vec<usize> = suspects
            .iter()
            .filter(|s| s.excess_ns >= 0.5 * top)
            .map(|s| s.rank_index)
            .collect();
        if super::structural(a, &sharing) {
            return Outcome::Findings(vec![]);
        }
        suspects.truncate(5);
        let top_excess = suspects[0].excess_ns.max(1.0);
        let findings = suspects
            .iter()
            .map(|s| self.explain(a, cfg, s, top_excess, m))
            .collect();
        Outcome::Findings(findings)
    }
}

impl SlowRankDetector {
    fn explain(
        &self,
        a: &Analysis,
        cfg: &EngineConfig,
        s: &Suspect,
        top_excess: f64,
        median_rel: f64,
    ) -> Finding {
        let rank = a.rank_id(s.rank_index);
        let its: Vec<u32> = if s.sustained {
            vec![]
        } else {
            s.iterations.iter().map(|&i| a.iterations[i]).collect()
        };
        let mut evidence = vec![Evidence::new(
            EvidenceKey::SelfTimeExcess,
            s.rel * 100.0,
            Some(median_rel * 100.0),
            Unit::Percent,
            self_time_detail(s.rel, median_rel, s.excess_ns, s.z),
        )
        .decisive()];
        if !s.iterations.is_empty() {
            evidence.push(
                Evidence::new(
                    EvidenceKey::IrregularIterations,
                    s.iterations.len() as f64,
                    Some(a.n_its() as f64),
                    Unit::Iterations,
                    format!(
                        "clearly late in iterations {}",
                        iteration_ranges(
                            &s.iterations
                                .iter()
                                .map(|&i| a.iterations[i])
                                .collect::<Vec<_>>()
                        )
                    ),
                )
                .decisive(),
            );
        }
        let c = rank_cause(a, cfg, s.rank_index, &s.scope, s.excess_ns);
        evidence.extend(c.evidence);
        let (kind, component, what, action) = (c.kind, c.component, c.what, c.action);
        // On CPUs shared by the ranks' processes, a rank's time between collectives
        // varies with scheduling (see CPU_NOISE); in a trace, below it, a verdict is not
        // worth a warning (live, a mild verdict stands once the next window confirms it).
        let noise = a.live.is_none() && a.ctx.meta.cpu_compute && s.rel - median_rel < CPU_NOISE;
        let info_only = c.node_wide || noise;
        let mut culprit = a.ctx.rank_culprit(component, rank);
        culprit.score = (s.excess_ns / top_excess).clamp(0.0, 1.0);
        let where_ = culprit.describe();
        Finding {
            kind,
            severity: if info_only {
                Severity::Info
            } else {
                Severity::Warning
            },
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
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }
    }
}

/// The self-time excess of a suspect (`rel`, relative) against the typical rank's
/// (`median_rel`), worded from the direction of the difference: a suspect flagged for some
/// iterations can be below the typical rank over the whole window.
fn self_time_detail(rel: f64, median_rel: f64, excess_ns: f64, z: f64) -> String {
    let diff = (rel - median_rel) * 100.0;
    let how = match Direction::of(rel, median_rel, 0.0) {
        Direction::Above => format!("exceeds the other members' by {diff:.1}%"),
        Direction::Below => format!("falls short of the other members' by {:.1}%", -diff),
        Direction::Level => "matches the other members'".to_string(),
    };
    let side = if z < 0.0 { "below" } else { "above" };
    format!(
        "time between its collectives {how} over the window ({:.1} ms in all), {:.1} robust standard deviations {side} the typical rank",
        excess_ns / 1e6,
        z.abs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_time_wording_follows_the_excess() {
        for (rel, median, z, want) in [
            (0.5, 0.0, 60.0, "exceeds the other members' by 50.0% over the window (10.0 ms in all), 60.0 robust standard deviations above"),
            (-0.1, 0.0, -2.0, "falls short of the other members' by 10.0% over the window (10.0 ms in all), 2.0 robust standard deviations below"),
            (0.0, 0.0, 0.0, "matches the other members' over the window"),
        ] {
            let d = self_time_detail(rel, median, 10e6, z);
            assert!(d.contains(want), "{rel} vs {median}: {d}");
        }
    }
}
