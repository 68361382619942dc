//! Named causes of a regression, each from its own evidence in the comparison: the shape
//! of the GEMMs, the host calls that synchronize or manage memory, host phases (GC, the
//! DataLoader), the host's own time between steps, the collectives' sizes, and small ops
//! that became slow. A cause whose
//! evidence is a change of structure (a new shape, a new sync per step, other message
//! sizes) is named whatever it cost on this run, since its cost depends on the hardware;
//! a cause whose evidence is time must stand above the run's noise.

mod gemm;
mod host;
pub(super) mod launch;
mod precision;
mod recompute;
mod structure;
mod sync;
pub(super) use structure::collective_of;

use super::CompareConfig;
use flare_model::{
    Comparison, DetectorId, Evidence, Finding, FindingKind, RegressionCause, Severity,
    TimeClassChange,
};

/// The causes the comparison's evidence names, each with its finding.
pub fn named_causes(c: &Comparison, cfg: &CompareConfig) -> Vec<(RegressionCause, Finding)> {
    type Rule = fn(&Comparison, &CompareConfig) -> Option<Finding>;
    let causes: [(RegressionCause, Rule); 11] = [
        (RegressionCause::TensorCoreMisalignment, gemm::misalignment),
        (
            RegressionCause::PrecisionChange,
            precision::precision_change,
        ),
        (
            RegressionCause::DeviceSynchronization,
            sync::synchronization,
        ),
        (RegressionCause::LaunchBound, launch::launch_bound),
        (RegressionCause::MemoryChurn, structure::memory_churn),
        (
            RegressionCause::ActivationRecompute,
            recompute::activation_recompute,
        ),
        (
            RegressionCause::CollectiveChange,
            structure::collective_change,
        ),
        (RegressionCause::GarbageCollection, host::garbage_collection),
        (RegressionCause::Dataloader, host::dataloader),
        (RegressionCause::HostBetweenSteps, host::between_steps),
        (RegressionCause::MinorityKernel, host::minority_kernel),
    ];
    causes
        .into_iter()
        .filter_map(|(name, rule)| rule(c, cfg).map(|finding| (name, finding)))
        .collect()
}

/// A warning where the current run pays for a change (`slower`), else an info.
pub(super) fn severity(slower: bool) -> Severity {
    if slower {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// A finding of kind `regression` from the comparison detector.
pub(super) fn finding(
    severity: Severity,
    summary: String,
    confidence: f64,
    evidence: Vec<Evidence>,
    action: String,
) -> Finding {
    Finding {
        kind: FindingKind::Regression,
        severity,
        summary,
        confidence,
        culprits: vec![],
        evidence,
        action,
        iterations: vec![],
        detector: DetectorId::Compare,
        corroborated_by: vec![],
        failure: None,
    }
}

/// A class's growth of time per step worth naming (beyond its share of the machine's,
/// where the step's change is the machine's speed): with `cfg.min_steps` steps in each
/// run, at least `cfg.min_cause_share` of the baseline's step, a quarter of the class's
/// time, and `cfg.min_change_se` standard errors (two runs of the same job differ by
/// noise); and where reruns of the same code were given, past every baseline run's time
/// (a t-test of the drift would drop a real cause wherever one baseline run drifted far,
/// as a process's first profiled run does; the step's own finding keeps that test).
fn time_grew(r: &TimeClassChange, c: &Comparison, cfg: &CompareConfig) -> bool {
    let delta = super::scale::own_delta_ms(r, super::machine_scale(c).as_ref());
    enough_steps(c, cfg)
        && delta >= cfg.min_cause_share * c.baseline.step_ms
        && delta >= 0.25 * r.baseline_ms.max(r.current_ms)
        && delta
            >= cfg.min_change_se
                * r.delta_se_ms(
                    c.baseline.independent_steps(),
                    c.current.independent_steps(),
                )
        && r.reruns
            .as_ref()
            .is_none_or(flare_model::ClassRunToRun::grew_past_every_baseline_run)
}

/// Whether both runs have the steps a spread is estimated from.
fn enough_steps(c: &Comparison, cfg: &CompareConfig) -> bool {
    c.baseline.independent_steps() >= cfg.min_steps
        && c.current.independent_steps() >= cfg.min_steps
}

/// "train.py(88): step (40), model.py(12): forward (2)".
fn sites_text(sites: &[(String, u64)]) -> String {
    sites
        .iter()
        .take(3)
        .map(|(s, n)| format!("{s} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The words a CPU run needs for a cause whose cost is a GPU's.
fn cpu_caveat(c: &Comparison) -> &'static str {
    if c.current.cpu_compute {
        " (this run's compute is on CPUs: the cost a GPU would pay does not show in its step time)"
    } else {
        ""
    }
}

#[cfg(test)]
pub(super) mod tests;
