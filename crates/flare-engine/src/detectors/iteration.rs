//! Iteration time: delta-irregular iterations (Holmes: longer than `delta` times the
//! typical one, down to delta = 1.05) and Bayesian online change points
//! ([`crate::changepoint`]), kept only when the level shifts by 10% or more. A change that
//! lasts is a fail-slow onset (or a speed-up); one that comes back within two iterations
//! is a spike. None of these names a culprit: the localization detectors do, and a
//! cluster-wide spike must not be blamed on anyone.

use super::iteration_ranges;
use crate::changepoint::{change_points, ChangeConfig};
use crate::stats::median;
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit};

/// The iteration detector's thresholds.
#[derive(Clone, Debug)]
pub struct IterationConfig {
    /// An iteration is irregular when it takes more than `delta` times the window's
    /// typical iteration (Holmes' delta-irregularity).
    pub delta: f64,
}

impl Default for IterationConfig {
    fn default() -> Self {
        IterationConfig { delta: 1.05 }
    }
}

pub struct IterationDetector;

/// The lasting shift of iteration time under which a job computing on CPUs is an `info`:
/// ranks sharing cores with each other and with everything else on the host drift that
/// much when healthy (the window medians of healthy 4-rank FSDP jobs on 2 cores, six runs
/// of 16 s: up to x1.19 apart within a run, and x1.11 "onsets" lasting two windows).
const CPU_DRIFT: f64 = 0.25;

impl Detector for IterationDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Iteration
    }
    fn summary(&self) -> &'static str {
        "delta-irregular iterations and change points of iteration time: fail-slow onsets versus spikes"
    }
    fn needs(&self) -> &'static str {
        "iteration markers on the ranks (ProfilerStep#N, flare.step())"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let times: Vec<(u32, f64)> = a
            .iterations
            .iter()
            .zip(&a.iteration_ns)
            .filter_map(|(&it, t)| t.map(|t| (it, t)))
            .collect();
        if times.len() < 4 {
            return Outcome::NotEnoughData(format!(
                "{} complete iterations; at least 4 are needed",
                times.len()
            ));
        }
        let series: Vec<f64> = times.iter().map(|t| t.1).collect();
        let changes = change_points(&series, &ChangeConfig::default());
        // The level each iteration is compared with: its own segment's median, so that a
        // fail-slow onset does not make every later iteration "irregular".
        let mut level = vec![0.0; series.len()];
        let bounds: Vec<usize> = std::iter::once(0)
            .chain(changes.iter().filter(|c| !c.spike).map(|c| c.index))
            .chain(std::iter::once(series.len()))
            .collect();
        for w in bounds.windows(2) {
            let m = median(&mut series[w[0]..w[1]].to_vec());
            level[w[0]..w[1]].iter_mut().for_each(|l| *l = m);
        }
        let typical = median(&mut series.clone());
        let mut findings = Vec::new();
        for c in changes.iter().filter(|c| !c.spike) {
            let ratio = c.ratio();
            let onset = times[c.index].0;
            let its: Vec<u32> = times[c.index..c.index + c.len]
                .iter()
                .map(|t| t.0)
                .collect();
            let slower = ratio > 1.0;
            // One iteration at the new level, the last one: a bump at the end of the data
            // (a checkpoint, a slow last step) looks the same until the next iteration.
            let confirmed = c.len >= 2;
            let drift = a.ctx.meta.cpu_compute && ratio < 1.0 + CPU_DRIFT;
            findings.push(Finding {
                kind: FindingKind::IterationSlowdown,
                severity: if slower && confirmed && !drift {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                summary: if slower && !confirmed {
                    format!(
                        "the last iteration ({onset}) took x{ratio:.2} the usual time ({:.1} ms to {:.1} ms): a fail-slow onset if the next ones stay there (unconfirmed)",
                        c.before / 1e6,
                        c.after / 1e6
                    )
                } else if slower && drift {
                    format!(
                        "iterations slowed down x{ratio:.2} from iteration {onset} on ({:.1} ms to {:.1} ms): within the x{:.2} that a job computing on shared CPUs drifts by when healthy",
                        c.before / 1e6,
                        c.after / 1e6,
                        1.0 + CPU_DRIFT
                    )
                } else if slower {
                    format!(
                        "iterations slowed down x{ratio:.2} from iteration {onset} on ({:.1} ms to {:.1} ms): a fail-slow onset",
                        c.before / 1e6,
                        c.after / 1e6
                    )
                } else {
                    format!(
                        "iterations sped up x{:.2} from iteration {onset} on ({:.1} ms to {:.1} ms)",
                        1.0 / ratio,
                        c.before / 1e6,
                        c.after / 1e6
                    )
                },
                confidence: (c.probability * crate::stats::confidence((ratio - 1.0).abs(), 0.05))
                    .clamp(0.0, 0.999),
                culprits: vec![],
                evidence: vec![
                    Evidence::new(
                        EvidenceKey::IterationTimeRatio,
                        ratio,
                        Some(1.0),
                        Unit::Ratio,
                        format!(
                            "median iteration after the change over the median before ({} iterations after it)",
                            c.len
                        ),
                    ),
                    Evidence::new(
                        EvidenceKey::ChangeProbability,
                        c.probability,
                        None,
                        Unit::None,
                        "posterior probability of a change at that iteration (Bayesian online change-point detection on log iteration time)".into(),
                    ),
                ],
                action: if slower {
                    "see the localized findings for the cause; if none, compare what changed at the onset: software, data, co-located jobs, the cluster's network".into()
                } else {
                    "nothing to fix; the job got faster (a fault cleared, or a lighter phase)".into()
                },
                iterations: its,
                detector: self.id(),
                corroborated_by: vec![],
                failure: None,
            });
        }
        // Delta-irregular iterations against their segment's level, and change-point
        // spikes.
        let mut spikes: Vec<(u32, f64)> = (0..series.len())
            .filter(|&i| series[i] > cfg.iteration.delta * level[i])
            .map(|i| (times[i].0, series[i] / level[i]))
            .collect();
        for c in changes.iter().filter(|c| c.spike) {
            for i in c.index..(c.index + c.len).min(series.len()) {
                if !spikes.iter().any(|s| s.0 == times[i].0) {
                    spikes.push((times[i].0, series[i] / c.before));
                }
            }
        }
        spikes.sort_by_key(|s| s.0);
        if !spikes.is_empty() {
            let worst = spikes.iter().map(|s| s.1).fold(0.0, f64::max);
            let its: Vec<u32> = spikes.iter().map(|s| s.0).collect();
            findings.push(Finding {
                kind: FindingKind::IterationSpike,
                severity: Severity::Info,
                summary: format!(
                    "{} irregular iteration{} ({}), up to x{worst:.2} the typical {:.1} ms",
                    its.len(),
                    if its.len() > 1 { "s" } else { "" },
                    iteration_ranges(&its),
                    typical / 1e6
                ),
                confidence: crate::stats::confidence(worst - 1.0, cfg.iteration.delta - 1.0),
                culprits: vec![],
                evidence: vec![Evidence::new(
                    EvidenceKey::MaxIterationRatio,
                    worst,
                    Some(cfg.iteration.delta),
                    Unit::Ratio,
                    format!(
                        "slowest irregular iteration over its level; irregular above x{:.2} (delta)",
                        cfg.iteration.delta
                    ),
                )],
                action: "spikes that no rank explains are cluster-wide (storage, network, scheduler); act only if they recur".into(),
                iterations: its,
                detector: self.id(),
                corroborated_by: vec![],
                failure: None,
            });
        }
        Outcome::Findings(findings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::JobContext;
    use crate::digest::IterationDigest;
    use flare_model::{ClusterTopology, JobInfo, TraceMeta};

    fn run(series: &[f64]) -> Vec<Finding> {
        run_on(series, false)
    }

    fn run_on(series: &[f64], cpu_compute: bool) -> Vec<Finding> {
        let ctx = JobContext::new(
            JobInfo {
                job_id: "t".into(),
                world_size: 8,
                cluster: ClusterTopology::for_world(8, 8, 4),
                parallel: None,
                microbatches: None,
            },
            TraceMeta {
                cpu_compute,
                ..TraceMeta::default()
            },
            vec![],
            vec![],
            (0..8).collect(),
        );
        let digests: Vec<IterationDigest> = series
            .iter()
            .enumerate()
            .map(|(i, &t)| IterationDigest::empty(i as u32, Some(t), 8))
            .collect();
        let a = Analysis::new(&ctx, digests.iter().collect());
        match IterationDetector.detect(&a, &EngineConfig::default()) {
            Outcome::Findings(f) => f,
            Outcome::NotEnoughData(why) => panic!("{why}"),
            Outcome::NotApplicable => panic!("not applicable"),
        }
    }

    /// A steady series with 1% noise around `level` ms.
    fn steady(n: usize, level: f64) -> Vec<f64> {
        (0..n)
            .map(|i| level * 1e6 * (1.0 + 0.01 * (((i * 7919) % 11) as f64 / 10.0 - 0.5)))
            .collect()
    }

    #[test]
    fn onsets_spikes_and_five_percent_irregularity() {
        // Fail-slow onset x1.25 at iteration 10.
        let mut s = steady(10, 100.0);
        s.extend(steady(10, 125.0));
        let f = run(&s);
        let slow = f
            .iter()
            .find(|f| f.kind == FindingKind::IterationSlowdown)
            .expect("an onset");
        assert_eq!(slow.iterations.first(), Some(&10), "{}", slow.summary);
        assert_eq!(slow.severity, Severity::Warning);
        assert!(
            !f.iter().any(|f| f.kind == FindingKind::IterationSpike),
            "the slower iterations after an onset are not spikes: {f:#?}"
        );
        // Two 6% slower iterations are irregular (delta 1.05), not an onset.
        let mut s = steady(20, 100.0);
        s[7] *= 1.06;
        s[15] *= 1.06;
        let f = run(&s);
        assert!(
            !f.iter().any(|f| f.kind == FindingKind::IterationSlowdown),
            "{f:#?}"
        );
        let spike = f
            .iter()
            .find(|f| f.kind == FindingKind::IterationSpike)
            .expect("irregular iterations");
        assert_eq!(spike.iterations, vec![7, 15]);
        assert!(spike.culprits.is_empty());
        // A steady job: nothing.
        assert!(run(&steady(20, 100.0)).is_empty());
    }

    #[test]
    fn a_job_on_shared_cpus_must_slow_past_its_drift_to_warn() {
        for (shift, cpu, want) in [
            (1.15, false, Severity::Warning),
            (1.15, true, Severity::Info),
            (1.4, true, Severity::Warning),
        ] {
            let mut s = steady(10, 100.0);
            s.extend(steady(10, 100.0 * shift));
            let f = run_on(&s, cpu);
            let slow = f
                .iter()
                .find(|f| f.kind == FindingKind::IterationSlowdown)
                .unwrap_or_else(|| panic!("x{shift}, cpu {cpu}: {f:#?}"));
            assert_eq!(slow.severity, want, "x{shift}, cpu {cpu}: {}", slow.summary);
            assert_eq!(
                slow.summary.contains("drifts by when healthy"),
                want == Severity::Info,
                "{}",
                slow.summary
            );
        }
    }
}
