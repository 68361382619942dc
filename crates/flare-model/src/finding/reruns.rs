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

/// One class's time per step in every run of each side (the compared ones first), ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClassRunToRun {
    pub baseline_ms: Vec<f64>,
    pub current_ms: Vec<f64>,
    /// Its standard deviation among runs of the same code, pooled as the step's, ms.
    pub sd_ms: f64,
}

impl ClassRunToRun {
    /// From each run's time of the class, with its drift pooled over `dof` degrees of
    /// freedom (see [`pooled_sd`]).
    pub fn new(baseline_ms: Vec<f64>, current_ms: Vec<f64>, dof: u32) -> Self {
        let sd_ms = pooled_sd([&baseline_ms, &current_ms], dof);
        ClassRunToRun {
            baseline_ms,
            current_ms,
            sd_ms,
        }
    }

    /// The change of its mean over each side's runs, ms.
    pub fn mean_change_ms(&self) -> f64 {
        mean(&self.current_ms) - mean(&self.baseline_ms)
    }

    /// Whether every current run took longer in it than every baseline run did: a growth
    /// no run of the baseline's code shows, however one of them drifted.
    pub fn grew_past_every_baseline_run(&self) -> bool {
        let most = self.baseline_ms.iter().copied().fold(f64::MIN, f64::max);
        let least = self.current_ms.iter().copied().fold(f64::MAX, f64::min);
        !self.current_ms.is_empty() && least > most
    }

    /// Several classes as one: each run's times summed (their drift measured together,
    /// since the classes of one run drift together).
    pub fn summed<'a>(classes: impl IntoIterator<Item = &'a ClassRunToRun>, dof: u32) -> Self {
        let mut sides: [Vec<f64>; 2] = [vec![], vec![]];
        for c in classes {
            for (sum, runs) in sides.iter_mut().zip([&c.baseline_ms, &c.current_ms]) {
                sum.resize(sum.len().max(runs.len()), 0.0);
                for (s, x) in sum.iter_mut().zip(runs) {
                    *s += x;
                }
            }
        }
        let [b, c] = sides;
        ClassRunToRun::new(b, c, dof)
    }
}

/// The standard deviation of values among runs of one side, each about its side's mean,
/// pooled over both sides (`dof`: the runs less the sides).
pub fn pooled_sd(sides: [&[f64]; 2], dof: u32) -> f64 {
    let squares: f64 = sides
        .iter()
        .map(|runs| {
            let m = mean(runs);
            runs.iter().map(|x| (x - m).powi(2)).sum::<f64>()
        })
        .sum();
    (squares / f64::from(dof.max(1))).sqrt()
}

impl RunToRun {
    /// The one-sided level a change must pass: a healthy pair's drift passes it once in a
    /// hundred.
    pub const LEVEL: f64 = 0.99;

    /// The change of the sides' mean steps, ms.
    pub fn mean_change_ms(&self) -> f64 {
        mean_step(&self.current) - mean_step(&self.baseline)
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
            class.mean_change_ms(),
            self.least_told_ms(class.sd_ms),
            delta,
        )
    }
}

fn told(change: f64, least: f64, delta: f64) -> bool {
    change * delta > 0.0 && change.abs() >= least
}

fn mean_step(runs: &[RunStep]) -> f64 {
    mean(&runs.iter().map(|r| r.step_ms).collect::<Vec<_>>())
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
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
            baseline_ms: vec![10.0],
            current_ms: vec![12.0],
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

    #[test]
    fn classes_summed_drift_together() {
        // Two classes that trade time from run to run: each drifts, their sum does not.
        let a = ClassRunToRun::new(vec![10.0, 12.0, 8.0], vec![11.0], 2);
        let b = ClassRunToRun::new(vec![5.0, 3.0, 7.0], vec![4.0], 2);
        assert!((a.sd_ms - 2.0).abs() < 1e-9, "{a:?}");
        let sum = ClassRunToRun::summed([&a, &b], 2);
        assert_eq!(sum.baseline_ms, [15.0, 15.0, 15.0]);
        assert_eq!(sum.current_ms, [15.0]);
        assert_eq!(sum.sd_ms, 0.0);
        assert_eq!(pooled_sd([&[1.0, 3.0], &[10.0]], 1), 2f64.sqrt());
        assert!(!a.grew_past_every_baseline_run(), "11 is within 8..12");
        assert!(
            ClassRunToRun::new(vec![10.0, 12.0, 8.0], vec![12.5, 13.0], 3)
                .grew_past_every_baseline_run()
        );
    }
}
