//! Who found it: the detectors, by id.

use super::FindingKind;
use serde::{Deserialize, Serialize};

string_enum! {
    /// A detector's stable id: `Finding::detector`, skipped detectors, the registry.
    pub enum DetectorId {
        /// Ranks that never joined the collective the others wait in.
        Hang => "hang",
        /// Spikes and fail-slow onsets of iteration time.
        Iteration => "iteration",
        /// A rank that delays its collective peers by its own doing.
        SlowRank => "slow_rank",
        /// Holmes' abnormal ops and graph search.
        Graph => "graph",
        /// Per-rank throughput metrics and scores.
        Metrics => "metrics",
        /// Minder on machine metrics.
        Machine => "machine",
        /// Arnold's topology misalignment.
        Topology => "topology",
        /// Slow communicators mapped onto the fabric.
        SlowPath => "slow_path",
        StageImbalance => "stage_imbalance",
        SequenceImbalance => "sequence_imbalance",
        /// A rank that runs ops beyond the work of ranks that otherwise run the same ops.
        ExtraWork => "extra_work",
        /// Two runs compared (`flare compare`).
        Compare => "compare",
        /// Hang analysis of PyTorch Flight Recorder dumps.
        FlightRecorder => "flight_recorder",
        /// Live windows: the agents' watchdog hang records.
        Watchdog => "watchdog",
        /// Live windows: progress inside NCCL's collectives, per rank, peer and channel.
        InCollective => "in_collective",
        /// The root cause of a failure in the job's logs (`flare logs diagnose`).
        Logs => "logs",
        /// Start-up phases per rank: where start-up time goes, who delays the start.
        Startup => "startup",
    }
}

/// Another detector that named the same culprit (see consolidation in the engine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Corroboration {
    pub detector: DetectorId,
    /// What that detector called it.
    pub kind: FindingKind,
    /// That detector's own confidence.
    pub confidence: f64,
}
