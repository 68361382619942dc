//! Abnormal-op detection after Holmes (NSDI'25).
//!
//! The unit is an *op group*: one rank's ops of one name on one communicator in one
//! iteration ([`OpGroup`]). Each gets Holmes' per-op features (mean, standard deviation,
//! z-score, quartiles and interquartile range of its durations, its size and pattern)
//! relative to the same op on the other ranks in the same iteration, plus the split of its
//! time into waiting for the last member and transfer, its duration against its own
//! history, and the iteration's duration against the window's: 16 numbers
//! ([`FEATURE_NAMES`]). A random forest trained offline on simulated jobs (`flare train`,
//! the model in `models/abnormal_op.json`) says which groups are abnormal; groups that are
//! clearly normal by a cheap gate skip it. Thresholds of the time-valued features are
//! shifted by the drift of iteration time ([`crate::changepoint::drift_factor`]) as Holmes
//! does, so that a job that became slower everywhere does not flag every op.
//!
//! The 3-sigma rule (an op group is abnormal when its mean duration exceeds the mean of
//! its class by three standard deviations) is kept as the baseline the benchmark compares
//! the forest with.

mod classes;
mod detect;
mod history;
#[cfg(test)]
mod tests;

pub use classes::{features, Classes};
pub use detect::{detect, Verdicts};
pub use history::History;

use crate::forest::{BatchForest, Forest};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

pub const N_FEATURES: usize = 16;

pub const FEATURE_NAMES: [&str; N_FEATURES] = [
    "mean_ratio",
    "std_ratio",
    "z_score",
    "q1_ratio",
    "median_ratio",
    "q3_ratio",
    "iqr_ratio",
    "max_ratio",
    "log2_bytes",
    "log2_group_size",
    "p2p",
    "log2_count",
    "wait_share",
    "transfer_ratio",
    "history_ratio",
    "iteration_ratio",
];

/// Features whose scale follows the job's iteration time (the op against its own history,
/// the iteration against the window): their thresholds move with the drift factor.
pub const DRIFT_FEATURES: [usize; 2] = [14, 15];

/// How op groups are judged abnormal.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum AbnormalMethod {
    /// The random forest (Holmes).
    #[default]
    Forest,
    /// Mean duration above the class mean plus three standard deviations.
    ThreeSigma,
}

impl AbnormalMethod {
    pub const ALL: [AbnormalMethod; 2] = [AbnormalMethod::Forest, AbnormalMethod::ThreeSigma];

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            AbnormalMethod::Forest => "forest",
            AbnormalMethod::ThreeSigma => "three_sigma",
        }
    }

    /// What the method is, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            AbnormalMethod::Forest => "random forest",
            AbnormalMethod::ThreeSigma => "3-sigma rule",
        }
    }

    /// Parses [`AbnormalMethod::name`] (a dash may stand for the underscore).
    pub fn parse(s: &str) -> Option<AbnormalMethod> {
        let s = s.replace('-', "_");
        Self::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// The gate in front of the forest: a group below every one of these is normal without
/// asking the forest (most groups of a healthy iteration). The forest is trained on the
/// rows that pass it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    /// Mean duration over the class median...
    pub mean_ratio: f32,
    /// ...or its robust z-score over the class...
    pub z_score: f32,
    /// ...or the mean over its own history...
    pub history_ratio: f32,
    /// ...or its mean transfer over the class's.
    pub transfer_ratio: f32,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            mean_ratio: 1.10,
            z_score: 4.0,
            history_ratio: 1.10,
            transfer_ratio: 1.20,
        }
    }
}

impl Gate {
    pub fn passes(&self, f: &[f32; N_FEATURES]) -> bool {
        self.passes_on(f[0], f[2], f[14], f[13], 1.0)
    }

    /// The gate on its four figures; `drift` shifts the history threshold.
    #[inline]
    pub fn passes_on(&self, mean: f32, z: f32, history: f32, transfer: f32, drift: f32) -> bool {
        mean >= self.mean_ratio
            || z >= self.z_score
            || history >= self.history_ratio * drift
            || transfer >= self.transfer_ratio
    }
}

/// A trained model as stored in the repository.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Model {
    pub format: String,
    pub version: u32,
    pub features: Vec<String>,
    pub drift_features: Vec<usize>,
    pub gate: Gate,
    /// Forest probability at or above which a group is abnormal.
    pub threshold: f32,
    /// How it was trained (for people; the command reproduces it).
    pub training: serde_json::Value,
    pub forest: Forest,
}

/// The model compiled into the engine.
pub fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        serde_json::from_str(include_str!("../../models/abnormal_op.json"))
            .expect("the embedded abnormal-op model parses (a test checks it)")
    })
}

/// The embedded model's forest laid out for batched inference.
pub(crate) fn batch_forest() -> &'static BatchForest {
    static FOREST: OnceLock<BatchForest> = OnceLock::new();
    FOREST.get_or_init(|| BatchForest::new(&model().forest))
}
