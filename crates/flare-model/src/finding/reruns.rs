//! Runs of the same code beside the two that `flare compare` explains (`--baseline-rerun`,
//! `--current-rerun`): how much a run's mean step, and each class's time, differs from one
//! run of the same code to the next (other machines, their load, their clocks). Each run's
//! own noise does not include that drift, and one run of each side cannot measure it.

use serde::{Deserialize, Serialize};

/// The runs of each side and the drift between runs of the same code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunToRun {
    /// Each baseline run's mean step, the one compared class by class first.
    pub baseline: Vec<RunStep>,
    /// Each current run's mean step, the one compared class by class first.
    pub current: Vec<RunStep>,
    /// The standard deviation of a run's mean step among runs of the same code, ms: each
    /// run about its own side's mean, pooled over both sides.
    pub step_sd_ms: f64,
    /// That estimate's degrees of freedom: the runs less the two sides.
    pub degrees_of_freedom: u32,
    /// How many standard errors of the difference of the sides' means a change must reach
    /// to be told from the drift: Student's t at the one-sided level `LEVEL` with these
    /// degrees of freedom (few runs know the drift poorly, so it is wide).
    pub critical_t: f64,
}

/// One run's mean step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunStep {
    /// The input it was read from.
    pub source: String,
    pub step_ms: f64,
}

/// One class's time per step over every run of each side.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClassRunToRun {
    /// Its mean over the baseline's runs and over the current's, ms per step.
    pub baseline_mean_ms: f64,
    pub current_mean_ms: f64,
    /// Its standard deviation among runs of the same code, pooled as the step's, ms.
    pub sd_ms: f64,
}

impl RunToRun {
    /// The one-sided level a change must pass: a healthy pair's drift passes it once in a
    /// hundred.
    pub const LEVEL: f64 = 0.99;

    /// The change of the sides' mean steps, ms.
    pub fn mean_change_ms(&self) -> f64 {
        mean(&self.current) - mean(&self.baseline)
    }

    /// The standard error of a change of the sides' means with this drift (`sd_ms`), ms.
    pub fn change_se_ms(&self, sd_ms: f64) -> f64 {
        let n = |runs: &[RunStep]| runs.len().max(1) as f64;
        sd_ms * (1.0 / n(&self.baseline) + 1.0 / n(&self.current)).sqrt()
    }

    /// The smallest change of the sides' means told from a drift of `sd_ms`, ms.
    pub fn least_told_ms(&self, sd_ms: f64) -> f64 {
        self.critical_t * self.change_se_ms(sd_ms)
    }

    /// Whether the step's change of the sides' means goes the way of `delta` and stands
    /// past the drift.
    pub fn step_told(&self, delta: f64) -> bool {
        told(
            self.mean_change_ms(),
            self.least_told_ms(self.step_sd_ms),
            delta,
        )
    }

    /// Whether a class's change of the sides' means goes the way of `delta` and stands
    /// past its drift.
    pub fn class_told(&self, class: &ClassRunToRun, delta: f64) -> bool {
        told(
            class.current_mean_ms - class.baseline_mean_ms,
            self.least_told_ms(class.sd_ms),
            delta,
        )
    }
}

fn told(change: f64, least: f64, delta: f64) -> bool {
    change * delta > 0.0 && change.abs() >= least
}

fn mean(runs: &[RunStep]) -> f64 {
    runs.iter().map(|r| r.step_ms).sum::<f64>() / runs.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(steps: &[f64]) -> Vec<RunStep> {
        steps
            .iter()
            .map(|&step_ms| RunStep {
                source: String::new(),
                step_ms,
            })
            .collect()
    }

    #[test]
    fn a_change_is_told_past_the_drift_the_way_the_step_moved() {
        // 3 baseline runs and 1 current: se = sd * sqrt(1/3 + 1).
        let r = RunToRun {
            baseline: runs(&[100.0, 104.0, 96.0]),
            current: runs(&[120.0]),
            step_sd_ms: 4.0,
            degrees_of_freedom: 2,
            critical_t: 3.0,
        };
        assert!((r.mean_change_ms() - 20.0).abs() < 1e-9);
        assert!((r.least_told_ms(4.0) - 3.0 * 4.0 * (4.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert!(r.step_told(1.0));
        assert!(!r.step_told(-1.0), "the means moved the other way");
        let wide = RunToRun {
            step_sd_ms: 10.0,
            ..r.clone()
        };
        assert!(!wide.step_told(1.0), "20 ms is within 3 x 11.5 ms");
        let class = ClassRunToRun {
            baseline_mean_ms: 10.0,
            current_mean_ms: 12.0,
            sd_ms: 0.5,
        };
        assert!(r.class_told(&class, 1.0));
        assert!(!r.class_told(
            &ClassRunToRun {
                sd_ms: 1.0,
                ..class
            },
            1.0
        ));
    }
}
