//! The step's noise: whether its change stands above what two runs of one job differ by,
//! judged on the runs' means, and on their medians where a few very long steps widen a
//! run's spread; and the evidence that says so.

use super::CompareConfig;
use flare_model::{Comparison, Evidence, EvidenceKey, RunProfile, RunToRun, TimeClassChange, Unit};

/// The standard error of the difference of the runs' mean steps, ms.
pub(super) fn step_se(c: &Comparison) -> f64 {
    let var = |r: &RunProfile| r.step_sd_ms * r.step_sd_ms / r.independent_steps() as f64;
    (var(&c.baseline) + var(&c.current)).sqrt()
}

/// The change of the runs' median steps over the standard error of that difference
/// (from each run's robust spread: a median's standard error is about 1.2533 times a
/// mean's where steps vary normally), where a run's few very long steps (full garbage
/// collections, checkpoints) widen its standard deviation past twice its robust spread,
/// and the medians moved the way the means did (`delta`); else `None`. Such steps widen
/// the means' noise past any change while every other step shows it; without them, the
/// means judge alone, and the medians could tell no more than they do.
pub(super) fn median_change_se(c: &Comparison, delta: f64) -> Option<f64> {
    let (b, cur) = (&c.baseline, &c.current);
    let tailed = |r: &RunProfile| r.step_sd_ms > 2.0 * r.step_robust_sd_ms;
    let var =
        |r: &RunProfile| r.step_robust_sd_ms * r.step_robust_sd_ms / r.independent_steps() as f64;
    let se = 1.2533 * (var(b) + var(cur)).sqrt();
    let moved = cur.step_median_ms - b.step_median_ms;
    ((tailed(b) || tailed(cur))
        && se > 0.0
        && b.step_median_ms > 0.0
        && cur.step_median_ms > 0.0
        && moved * delta > 0.0)
        .then(|| moved.abs() / se)
}

/// Where most of the step's growth (`delta`) comes in a few long steps (the mean's excess
/// over the median grew by half the change or more), what that says: time no op covers
/// that only some steps pay is periodic work, which a trace shows only where it records
/// it.
pub(super) fn few_long_steps(c: &Comparison, delta: f64) -> Option<String> {
    let (b, cur) = (&c.baseline, &c.current);
    let tail = |r: &RunProfile| r.step_ms - r.step_median_ms;
    (b.step_median_ms > 0.0 && cur.step_median_ms > 0.0 && tail(cur) - tail(b) >= 0.5 * delta)
        .then(|| {
            format!(
                "Most of it comes in a few long steps (the current mean step {:.2} ms against a median of {:.2}): periodic work such as Python's full garbage collections, checkpoints or evaluation every N steps; a torch.profiler trace shows GC pauses with experimental_config=torch._C._profiler._ExperimentalConfig(record_python_gc_info=True) (or log them with gc.callbacks)",
                cur.step_ms, cur.step_median_ms
            )
        })
}

/// The step's evidence: its time against the baseline's (decisive), and its change over
/// the noise where the runs have a spread.
pub(super) fn step_evidence(c: &Comparison, cfg: &CompareConfig, se: f64) -> Vec<Evidence> {
    let mut evidence = vec![Evidence::new(
        EvidenceKey::StepTimeMs,
        c.current.step_ms,
        Some(c.baseline.step_ms),
        Unit::Ms,
        format!(
            "a rank's mean step, from an iteration's first op (on a GPU its first device op) to the next one's: {} against {} (ranks x iterations: {} against {})",
            c.current.source, c.baseline.source, c.current.rank_iterations, c.baseline.rank_iterations
        ),
    )
    .decisive()];
    evidence.extend(c.reruns.as_ref().map(drift_evidence));
    if se > 0.0 {
        evidence.push(Evidence::new(
            EvidenceKey::StepChangeSe,
            (c.current.step_ms - c.baseline.step_ms).abs() / se,
            Some(cfg.min_change_se),
            Unit::None,
            format!(
                "the change over the noise: steps vary by {:.2} ms (sd) in the baseline and {:.2} in the current run",
                c.baseline.step_sd_ms, c.current.step_sd_ms
            ),
        ));
    }
    evidence
}

/// The evidence of a change the medians told (`z`, see [`median_change_se`]).
pub(super) fn median_evidence(c: &Comparison, cfg: &CompareConfig, z: f64) -> Evidence {
    Evidence::new(
        EvidenceKey::StepMedianChangeSe,
        z,
        Some(cfg.min_change_se),
        Unit::None,
        format!(
            "the median step moved {:.2} -> {:.2} ms, beyond the medians' noise (robust sd {:.2} and {:.2} ms): most steps changed, not only the few longest",
            c.baseline.step_median_ms,
            c.current.step_median_ms,
            c.baseline.step_robust_sd_ms,
            c.current.step_robust_sd_ms
        ),
    )
}

/// The step's change over every run of each side against the drift between runs of the
/// same code.
fn drift_evidence(r: &RunToRun) -> Evidence {
    let se = r.change_se_ms(r.step_sd_ms);
    let steps = |runs: &[flare_model::RunStep]| {
        runs.iter()
            .map(|s| format!("{:.2}", s.step_ms))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Evidence::new(
        EvidenceKey::RunToRunChangeSe,
        if se > 0.0 {
            r.mean_change_ms().abs() / se
        } else {
            f64::INFINITY
        },
        Some(r.critical_t),
        Unit::None,
        format!(
            "over every run of each side the mean step moved {:+.2} ms (baseline runs {} ms; current runs {} ms); runs of the same code differ by {:.2} ms (sd, {} degrees of freedom), so a change under {:.2} ms is not told from that drift",
            r.mean_change_ms(),
            steps(&r.baseline),
            steps(&r.current),
            r.step_sd_ms,
            r.degrees_of_freedom,
            r.least_told_ms(r.step_sd_ms)
        ),
    )
}

/// Whether reruns measured the drift between runs of the same code and the class's change
/// over every run of each side stands past its own drift, the way of `delta`.
pub(super) fn class_past_drift(c: &Comparison, class: &TimeClassChange, delta: f64) -> bool {
    c.reruns
        .as_ref()
        .zip(class.reruns.as_ref())
        .is_some_and(|(r, k)| r.class_told(k, delta))
}
