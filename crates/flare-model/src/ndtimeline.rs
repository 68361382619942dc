//! NDTimeline traces (ByteDance's per-op Megatron timeline, one row per recorded op) and
//! the result of a what-if straggler analysis over them.
//!
//! The format is the one of the artifact of "Understanding Stragglers in Large Model
//! Training Using What-if Analysis" (OSDI'25): one row per op with the worker's data- and
//! pipeline-parallel coordinates, the training step, the op type, start and duration in
//! seconds, and the op's sequence number among ops of its type on its worker in its step.
//! Pure data; readers live in `flare-import`, the analysis in `flare-engine::whatif`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Op types recorded by NDTimeline for a Megatron step.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NdOpType {
    ForwardCompute,
    BackwardCompute,
    ForwardSend,
    ForwardRecv,
    BackwardSend,
    BackwardRecv,
    ParamsAllGather,
    GradsReduceScatter,
    SeparateGradsAllReduce,
    LayernormGradsAllReduce,
    EmbeddingGradsAllReduce,
    OptimizerClipMainGrad,
    Optimizer,
    Gc,
    /// Anything else, kept as written.
    Other(String),
}

impl NdOpType {
    /// Every documented op type, in a fixed order.
    pub const KNOWN: [NdOpType; 14] = [
        NdOpType::ForwardCompute,
        NdOpType::BackwardCompute,
        NdOpType::ForwardSend,
        NdOpType::ForwardRecv,
        NdOpType::BackwardSend,
        NdOpType::BackwardRecv,
        NdOpType::ParamsAllGather,
        NdOpType::GradsReduceScatter,
        NdOpType::SeparateGradsAllReduce,
        NdOpType::LayernormGradsAllReduce,
        NdOpType::EmbeddingGradsAllReduce,
        NdOpType::OptimizerClipMainGrad,
        NdOpType::Optimizer,
        NdOpType::Gc,
    ];

    /// Parses the name as written in traces (`forward-compute`, ...).
    pub fn parse(s: &str) -> NdOpType {
        match s {
            "forward-compute" => NdOpType::ForwardCompute,
            "backward-compute" => NdOpType::BackwardCompute,
            "forward-send" => NdOpType::ForwardSend,
            "forward-recv" => NdOpType::ForwardRecv,
            "backward-send" => NdOpType::BackwardSend,
            "backward-recv" => NdOpType::BackwardRecv,
            "params-all-gather" => NdOpType::ParamsAllGather,
            "grads-reduce-scatter" => NdOpType::GradsReduceScatter,
            "separate-grads-all-reduce" => NdOpType::SeparateGradsAllReduce,
            "layernorm-grads-all-reduce" => NdOpType::LayernormGradsAllReduce,
            "embedding-grads-all-reduce" => NdOpType::EmbeddingGradsAllReduce,
            "optimizer-clip-main-grad" => NdOpType::OptimizerClipMainGrad,
            "optimizer" => NdOpType::Optimizer,
            "gc" => NdOpType::Gc,
            other => NdOpType::Other(other.to_string()),
        }
    }

    /// The name as written in traces.
    pub fn as_str(&self) -> &str {
        match self {
            NdOpType::ForwardCompute => "forward-compute",
            NdOpType::BackwardCompute => "backward-compute",
            NdOpType::ForwardSend => "forward-send",
            NdOpType::ForwardRecv => "forward-recv",
            NdOpType::BackwardSend => "backward-send",
            NdOpType::BackwardRecv => "backward-recv",
            NdOpType::ParamsAllGather => "params-all-gather",
            NdOpType::GradsReduceScatter => "grads-reduce-scatter",
            NdOpType::SeparateGradsAllReduce => "separate-grads-all-reduce",
            NdOpType::LayernormGradsAllReduce => "layernorm-grads-all-reduce",
            NdOpType::EmbeddingGradsAllReduce => "embedding-grads-all-reduce",
            NdOpType::OptimizerClipMainGrad => "optimizer-clip-main-grad",
            NdOpType::Optimizer => "optimizer",
            NdOpType::Gc => "gc",
            NdOpType::Other(s) => s,
        }
    }

    /// Pipeline send/receive ops.
    pub fn is_p2p(&self) -> bool {
        matches!(
            self,
            NdOpType::ForwardSend
                | NdOpType::ForwardRecv
                | NdOpType::BackwardSend
                | NdOpType::BackwardRecv
        )
    }

    /// Forward or backward compute of a microbatch.
    pub fn is_compute(&self) -> bool {
        matches!(self, NdOpType::ForwardCompute | NdOpType::BackwardCompute)
    }

    /// Communication in the what-if sense: its ideal duration is the median transfer time,
    /// while every other op's is the mean duration.
    pub fn is_communication(&self) -> bool {
        self.is_p2p()
            || matches!(
                self,
                NdOpType::ParamsAllGather
                    | NdOpType::GradsReduceScatter
                    | NdOpType::SeparateGradsAllReduce
                    | NdOpType::LayernormGradsAllReduce
                    | NdOpType::EmbeddingGradsAllReduce
                    | NdOpType::OptimizerClipMainGrad
            )
    }

    /// The label slowdown is attributed to: pipeline sends and receives are pooled into
    /// `forward-pp-comm` and `backward-pp-comm`, other types keep their name.
    pub fn attribution_label(&self) -> &str {
        match self {
            NdOpType::ForwardSend | NdOpType::ForwardRecv => "forward-pp-comm",
            NdOpType::BackwardSend | NdOpType::BackwardRecv => "backward-pp-comm",
            other => other.as_str(),
        }
    }
}

impl fmt::Display for NdOpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One recorded op.
#[derive(Clone, Debug, PartialEq)]
pub struct NdOp {
    /// Data-parallel rank of the worker.
    pub dp_rank: u32,
    /// Pipeline stage of the worker.
    pub stage: u32,
    /// Global rank of the worker.
    pub rank: u32,
    /// Training step.
    pub step: i64,
    pub optype: NdOpType,
    /// Start, seconds (any origin; the artifact's traces start each step at 0).
    pub start_s: f64,
    pub duration_s: f64,
    /// Order among ops of this type on this worker in this step, by start time.
    pub seq_id: i64,
    /// Model chunk (virtual stage) within the pipeline stage.
    pub mc: i64,
    /// Microbatch; meaningful for forward and backward compute only.
    pub mb_id: i64,
    /// Global model chunk (virtual stage) in the whole model.
    pub gmc: i64,
}

impl NdOp {
    pub fn end_s(&self) -> f64 {
        self.start_s + self.duration_s
    }
}

/// Parallel sizes of the job (`meta-*.yaml`). Traces may hold a subset of the workers
/// (e.g. one context-parallel rank per pipeline stage and data-parallel rank).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NdMeta {
    pub trial_name: String,
    pub run_id: u32,
    pub dp_size: u32,
    pub pp_size: u32,
    pub tp_size: u32,
    /// Context ("distributed sequence") parallel size.
    pub dsp_size: u32,
    pub vpp_size: u32,
    pub world_size: u32,
}

impl Default for NdMeta {
    fn default() -> Self {
        NdMeta {
            trial_name: String::new(),
            run_id: 0,
            dp_size: 1,
            pp_size: 1,
            tp_size: 1,
            dsp_size: 1,
            vpp_size: 1,
            world_size: 1,
        }
    }
}

/// A whole NDTimeline trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NdTrace {
    pub ops: Vec<NdOp>,
    pub meta: NdMeta,
}

// ---------------------------------------------------------------------------------------
// What-if analysis result
// ---------------------------------------------------------------------------------------

/// Result of a what-if straggler analysis (see `flare-whatif`). Slowdowns are
/// ratios of mean step times: 1.0 means no effect, 1.18 means steps are 18% longer than
/// in the ideal.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIfReport {
    pub trial: String,
    pub steps: usize,
    pub workers: usize,
    pub dp_size: u32,
    pub pp_size: u32,
    /// S: mean simulated step time with measured durations over the mean simulated step
    /// time with every op idealized.
    pub slowdown: f64,
    /// Mean step time as recorded in the trace (first start to last end), seconds.
    pub trace_step_time_s: f64,
    /// Mean simulated step time with measured durations, seconds.
    pub step_time_s: f64,
    /// Mean simulated step time with idealized durations, seconds.
    pub ideal_step_time_s: f64,
    /// M_W: fraction of the slowdown removed by idealizing only the worst 3% of workers.
    pub m_w: f64,
    /// M_S: fraction of the slowdown removed by idealizing only the last pipeline stage.
    pub m_s: f64,
    pub m_w_detail: FixEffect,
    pub m_s_detail: FixEffect,
    /// Slowdown left when only the ops of this type keep their measured durations,
    /// largest first.
    pub by_op_type: Vec<OpTypeSlowdown>,
    /// The same for every data-parallel rank and every pipeline stage.
    pub by_dp_rank: Vec<IndexSlowdown>,
    pub by_stage: Vec<IndexSlowdown>,
    /// Per worker: the smaller of its data-parallel rank's and its stage's slowdown,
    /// largest first.
    pub by_worker: Vec<WorkerSlowdown>,
    pub heatmap: WhatIfHeatmap,
    pub per_step: Vec<StepSlowdown>,
    /// Ops the dependency model does not know (unknown types), left out of simulation.
    pub ignored_ops: usize,
    pub warnings: Vec<String>,
}

/// What idealizing a set of ops does (the artifact's `explain_slowdown`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FixEffect {
    /// Mean step time with the selected ops idealized and the rest measured.
    pub fixed_step_time_s: f64,
    /// Mean step time with only the selected ops measured and the rest idealized.
    pub only_step_time_s: f64,
    /// `(original - fixed) / (original - ideal)`: this is M_W or M_S.
    pub removed_fraction: f64,
    /// `(only - ideal) / (original - ideal)`.
    pub added_fraction: f64,
    /// The workers whose ops were selected.
    pub workers: Vec<WorkerRef>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRef {
    pub dp_rank: u32,
    pub stage: u32,
    pub rank: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpTypeSlowdown {
    pub op_type: String,
    pub slowdown: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexSlowdown {
    pub index: u32,
    pub slowdown: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerSlowdown {
    pub dp_rank: u32,
    pub stage: u32,
    pub rank: u32,
    pub slowdown: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepSlowdown {
    pub step: i64,
    pub step_time_s: f64,
    pub ideal_step_time_s: f64,
    pub slowdown: f64,
}

/// Shape of the worker heatmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeatPattern {
    /// No worker contributes a slowdown worth reporting.
    #[default]
    None,
    /// A few workers (at most 3% of them, at least one): individual worker issues.
    HotCell,
    /// A whole pipeline stage or data-parallel replica: partitioning or replica issue.
    Band,
    /// Hot workers spread over stages and replicas: random, e.g. sequence-length imbalance.
    Scatter,
}

/// Whether a band runs along a stage (row) or a data-parallel rank (column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BandAxis {
    Stage,
    DpRank,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Band {
    pub axis: BandAxis,
    pub index: u32,
}

/// Per-worker slowdown laid out as pipeline stage (rows) x data-parallel rank (columns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIfHeatmap {
    pub dp_size: u32,
    pub pp_size: u32,
    /// `values[stage][dp_rank]`; NaN-free: workers missing from the trace read 1.0.
    pub values: Vec<Vec<f64>>,
    pub pattern: HeatPattern,
    /// Workers counted as hot.
    pub hot: Vec<WorkerRef>,
    pub band: Option<Band>,
    /// A worker is hot at or above this slowdown.
    pub threshold: f64,
}
