//! One run against another (`flare compare`): where a step's time went in each, class by
//! class, so that the classes' changes add up to the change of the step.

use serde::{Deserialize, Serialize};

string_enum! {
    /// What a class of time is.
    pub enum TimeClassKind {
        /// Compute ops of one name (kernel or CPU op, with its shapes where the source
        /// records them).
        Compute => "compute",
        /// Collectives or transfers of one kind and size, from the last member's arrival
        /// to the end: moving the data.
        Communication => "communication",
        /// Time in collectives before their last member arrived: waiting for other ranks.
        Waiting => "waiting",
        /// A host phase (GC, dataloader, optimizer, checkpoint, ...).
        Host => "host",
        /// Time no traced op covers.
        Untraced => "untraced",
    }
}

/// What one run's steps took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunProfile {
    /// The input it was read from.
    pub source: String,
    pub ranks: u32,
    /// (rank, iteration) pairs averaged over.
    pub rank_iterations: u64,
    /// A rank's mean step, from its first op's start to its last op's end, ms.
    pub step_ms: f64,
}

/// One class of time in both runs, per step of a rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeClassChange {
    pub kind: TimeClassKind,
    /// The op name, `{collective} {size}`, the host phase, or `waiting` / `untraced`.
    pub class: String,
    pub baseline_ms: f64,
    pub current_ms: f64,
    /// Ops started per step (0 for waiting and untraced time).
    pub baseline_count: f64,
    pub current_count: f64,
    /// What its ops achieved while they ran, where the source gives their work: TFLOPS
    /// for compute ops (their FLOPs over their durations), bus bandwidth in GB/s for
    /// communication (NCCL's convention: bytes per rank times the collective's bus factor,
    /// over the time from the last member's arrival to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_rate: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_rate: Option<f64>,
}

impl TimeClassChange {
    pub fn delta_ms(&self) -> f64 {
        self.current_ms - self.baseline_ms
    }
}

/// The comparison: both runs' steps, and every class of time, most changed first. The
/// classes partition each step, so their changes sum to the change of the step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    pub baseline: RunProfile,
    pub current: RunProfile,
    pub classes: Vec<TimeClassChange>,
    /// How the order of ops changed, whatever their time (absent from older documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<SequenceChange>,
}

/// The runs' op sequences compared (after DistAD's runtime entropy): the distribution of
/// consecutive op pairs on a rank, so that a new code path shows even when its ops cost
/// next to nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SequenceChange {
    /// Jensen-Shannon divergence between the two runs' distributions of consecutive op
    /// pairs, in bits: 0 for the same sequences, 1 for sequences with no pair in common.
    pub divergence_bits: f64,
    /// Entropy of each run's distribution of op pairs, in bits.
    pub baseline_entropy_bits: f64,
    pub current_entropy_bits: f64,
    /// Ops the current run runs and the baseline never did, and the reverse, by name.
    pub appeared: Vec<String>,
    pub disappeared: Vec<String>,
}
