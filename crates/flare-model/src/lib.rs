//! Flare's shared vocabulary.
//!
//! Everything the simulator, the importers, the engine and the CLI exchange is defined
//! here: where ranks run ([`topology`], [`parallel`]), which communicators they share
//! ([`comm`]), what they did ([`op`], [`trace`]), what a node agent ships per window
//! ([`summary`]), and what the engine concluded ([`finding`]). The crate does no I/O.

#[macro_use]
mod string_enum;

pub mod comm;
pub mod finding;
pub mod flight_recorder;
pub mod host_calls;
pub mod machine;
pub mod ndtimeline;
pub mod op;
pub mod parallel;
pub mod startup;
pub mod summary;
pub mod summary_queue;
pub mod symbol;
pub mod topology;
pub mod trace;

pub use comm::{CommId, Communicator, GroupKind};
pub use finding::{
    distinct_kinds, ranks_label, CascadeGroup, ChangedOnRanks, ClassRunToRun, Comparison,
    Component, Corroboration, Culprit, DetectorId, Direction, Evidence, EvidenceKey,
    FailureCategory, FailureDetail, Finding, FindingKind, FindingsDocument, GemmShapeRow,
    HostCallRate, JobStage, JobSummary, LatencyQuantiles, LineRole, LogLine, LogSignature,
    RankClassGrowth, RankMetrics, RankTime, RegressionCause, RunProfile, RunStep, RunToRun,
    SequenceChange, Severity, SkippedDetector, TimeClassChange, TimeClassKind, Unit, Verdict,
    WaitedFor, WindowHistory,
};
pub use host_calls::{CallSites, CallSums, HostCallCount, HostCallKind, HostCalls};
pub use machine::{Machine, MachineMetric, MachineMetrics, MetricSeries};
pub use op::{Op, OpKind};
pub use parallel::{Dim, ParallelConfig, ParallelConfigError, RankCoords, PARALLEL_ENV};
pub use startup::{StartupPhase, StartupPhaseRecord, StartupRecord};
pub use summary::{
    CommMembership, HangRecord, IterationSample, KernelStats, LinkStats, LogExcerpt,
    LogExcerptLine, LogProgressLine, NcclProgress, OpStats, PeerStacks, RankSummary, StalledLink,
    SteppingTime, TemplateCount, ThreadStack, WindowSummary,
};
pub use symbol::short_symbol;
pub use topology::{ClusterTopology, GpuLoc, PathElement};
pub use trace::{iterations_with_ops, IterationSpan, JobInfo, RankTrace, Trace, TraceMeta, Window};

/// A global rank in the job (0..world_size).
pub type Rank = u32;
