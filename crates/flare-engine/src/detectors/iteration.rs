//! Iteration irregularity (Holmes' delta-irregularity): iterations that take more than
//! `delta` times the typical one. A run of irregular iterations to the end of the window
//! is a persistent shift; isolated ones are spikes. Neither names a culprit: that is the
//! other detectors' job, and a cluster-wide spike must not be blamed on anyone.

use super::iteration_ranges;
use crate::stats::median;
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{Evidence, Finding, FindingKind, Severity};

pub struct IterationDetector;

impl Detector for IterationDetector {
    fn id(&self) -> &'static str {
        "iteration"
    }
    fn summary(&self) -> &'static str {
        "delta-irregular iterations: spikes versus a persistent slowdown"
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
        let mut v: Vec<f64> = times.iter().map(|t| t.1).collect();
        let typical = median(&mut v);
        let irregular: Vec<usize> = (0..times.len())
            .filter(|&i| times[i].1 > cfg.delta * typical)
            .collect();
        if irregular.is_empty() {
            return Outcome::Findings(vec![]);
        }
        // A persistent shift: from some point on, (almost) every iteration is slower.
        let n = times.len();
        let mut best: Option<(usize, f64)> = None;
        for onset in 2..n.saturating_sub(2) {
            let mut before: Vec<f64> = times[..onset].iter().map(|t| t.1).collect();
            let mut after: Vec<f64> = times[onset..].iter().map(|t| t.1).collect();
            let (b, af) = (median(&mut before), median(&mut after));
            let frac_irregular =
                irregular.iter().filter(|&&i| i >= onset).count() as f64 / (n - onset) as f64;
            if af > cfg.delta * b && frac_irregular >= 0.8 && best.is_none_or(|x| af / b > x.1) {
                best = Some((onset, af / b));
            }
        }
        let mut findings = Vec::new();
        if let Some((onset, ratio)) = best {
            findings.push(Finding {
                kind: FindingKind::IterationSlowdown,
                severity: Severity::Warning,
                summary: format!(
                    "iterations slowed down x{ratio:.2} from iteration {} on",
                    times[onset].0
                ),
                confidence: crate::stats::confidence(ratio - 1.0, cfg.delta - 1.0),
                culprits: vec![],
                evidence: vec![Evidence::new(
                    "iteration_time_ratio",
                    ratio,
                    Some(1.0),
                    "x",
                    format!("median iteration after the onset over median before ({:.1} ms typical)", typical / 1e6),
                )],
                action: "see the localized findings for the cause; if none, compare the software and data of the iterations before and after the onset".into(),
                iterations: times[onset..].iter().map(|t| t.0).collect(),
                detector: self.id().into(),
            });
        }
        let spikes: Vec<u32> = irregular
            .iter()
            .filter(|&&i| best.is_none_or(|(onset, _)| i < onset))
            .map(|&i| times[i].0)
            .collect();
        if !spikes.is_empty() {
            let worst = irregular
                .iter()
                .map(|&i| times[i].1 / typical)
                .fold(0.0, f64::max);
            findings.push(Finding {
                kind: FindingKind::IterationSpike,
                severity: Severity::Info,
                summary: format!(
                    "{} irregular iteration{} ({}), up to x{worst:.2} the typical {:.1} ms",
                    spikes.len(),
                    if spikes.len() > 1 { "s" } else { "" },
                    iteration_ranges(&spikes),
                    typical / 1e6
                ),
                confidence: crate::stats::confidence(worst - 1.0, cfg.delta - 1.0),
                culprits: vec![],
                evidence: vec![Evidence::new(
                    "max_iteration_ratio",
                    worst,
                    Some(cfg.delta),
                    "x",
                    "slowest irregular iteration over the median iteration".into(),
                )],
                action: "spikes that no rank explains are cluster-wide (storage, network, scheduler); act only if they recur".into(),
                iterations: spikes,
                detector: self.id().into(),
            });
        }
        Outcome::Findings(findings)
    }
}
