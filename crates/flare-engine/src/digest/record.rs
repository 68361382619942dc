//! What one rank did in one iteration: the per-rank records of a digest (its figures,
//! its self time, what the window's metrics sum, its compute op names) and the bins its
//! host phases and issue latencies are kept in.

use flare_model::OpKind;

/// Host-phase kinds, in the order of [`RankIteration::host_ns`].
pub const HOST_KINDS: [OpKind; 5] = [
    OpKind::DataLoader,
    OpKind::GarbageCollection,
    OpKind::Optimizer,
    OpKind::Checkpoint,
    OpKind::HostOther,
];

/// Slot of a host kind in [`HOST_KINDS`].
pub fn host_slot(kind: OpKind) -> Option<usize> {
    HOST_KINDS.iter().position(|&k| k == kind)
}

/// Bins of the issue-latency histogram: log-spaced, 4 per power of two from 1 us.
pub const ISSUE_BINS: usize = 48;

/// The histogram bin of an issue latency in ns.
pub fn issue_bin(ns: f64) -> usize {
    if ns <= 1e3 {
        return 0;
    }
    ((4.0 * (ns / 1e3).log2()) as usize + 1).min(ISSUE_BINS - 1)
}

/// The lower edge of an issue-latency bin, ns.
pub fn issue_bin_floor(bin: usize) -> f64 {
    if bin == 0 {
        0.0
    } else {
        1e3 * 2f64.powf((bin - 1) as f64 / 4.0)
    }
}

/// A fast log2 in quarters for the issue histogram.
#[inline]
pub(super) fn issue_bin_fast(ns: f64) -> usize {
    if ns <= 1e3 {
        return 0;
    }
    let x = ns / 1e3;
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let quarter = ((bits >> 50) & 0x3) as i64; // top two mantissa bits: an approximation
    ((4 * exp + quarter + 1).max(0) as usize).min(ISSUE_BINS - 1)
}

/// The last op a rank recorded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LastOp {
    pub kind: OpKind,
    pub name: u32,
    pub iteration: u32,
    pub ended: bool,
}

/// One rank's figures for one iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankIteration {
    /// The rank's iteration span, when it recorded one.
    pub start_ns: Option<i64>,
    /// `None` while unfinished (or without a span).
    pub end_ns: Option<i64>,
    pub ops: u32,
    pub compute_ns: f64,
    pub compute_ops: u32,
    /// FLOPs of compute ops that carry them, and those ops' time.
    pub flops: f64,
    pub flops_ns: f64,
    /// Time inside sync ops (collectives and P2P), ns.
    pub sync_ns: f64,
    /// The part of it spent waiting for the last member to arrive, ns.
    pub wait_ns: f64,
    /// Bytes x bus factor of its completed collectives, and their transfer time.
    pub bus_bytes: f64,
    pub bus_ns: f64,
    /// Host-phase time per [`HOST_KINDS`] slot, ns.
    pub host_ns: [f64; 5],
    /// Host-phase time beyond the median of the same phase (by name) on all ranks, ns.
    pub host_excess_ns: [f64; 5],
    /// Time covered by at least one traced op, ns.
    pub busy_ns: f64,
    /// Median issue latency (GPU start minus CPU launch) of its compute ops, ns.
    pub issue_p50_ns: f64,
    pub issue_hist: [u16; ISSUE_BINS],
    /// Median interval between the CPU launch of a compute op and the launch of the op
    /// after it, ns: how fast its CPU issues work (long on a launch-bound rank).
    pub launch_gap_p50_ns: f64,
    /// Compute ops with a launch time, and those that started within four times the
    /// rank's quickest start of the iteration (launched just in time: the GPU waited).
    pub issue_count: u32,
    pub immediate_launches: u32,
    /// A sync op of this rank never ended.
    pub stuck: bool,
    pub last_op: Option<LastOp>,
}

impl Default for RankIteration {
    fn default() -> Self {
        RankIteration {
            start_ns: None,
            end_ns: None,
            ops: 0,
            compute_ns: 0.0,
            compute_ops: 0,
            flops: 0.0,
            flops_ns: 0.0,
            sync_ns: 0.0,
            wait_ns: 0.0,
            bus_bytes: 0.0,
            bus_ns: 0.0,
            host_ns: [0.0; 5],
            host_excess_ns: [0.0; 5],
            busy_ns: 0.0,
            issue_p50_ns: f64::NAN,
            launch_gap_p50_ns: f64::NAN,
            issue_count: 0,
            immediate_launches: 0,
            issue_hist: [0; ISSUE_BINS],
            stuck: false,
            last_op: None,
        }
    }
}

impl RankIteration {
    pub fn host_total(&self) -> f64 {
        self.host_ns.iter().sum()
    }

    /// Length of its iteration span, when finished.
    pub fn span_ns(&self) -> Option<f64> {
        match (self.start_ns, self.end_ns) {
            (Some(s), Some(e)) if e > s => Some((e - s) as f64),
            _ => None,
        }
    }
}

/// One rank's self time in one iteration: the time before its sync ops (of 3+ members)
/// beyond the other members' median, and the matching sum of those medians (the self
/// time expected of it), ns. Kept apart from [`RankIteration`]: the slow-rank detector
/// reads it for every rank and iteration of the window on each diagnosis.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SelfTime {
    pub excess_ns: f64,
    pub expected_ns: f64,
}

impl SelfTime {
    /// Excess over expected; NaN without an expected self time.
    pub fn relative(&self) -> f64 {
        if self.expected_ns > 0.0 {
            self.excess_ns / self.expected_ns
        } else {
            f64::NAN
        }
    }
}

/// What the window's per-rank metrics ([`crate::detectors::metrics`]) sum from one
/// rank's iteration, kept apart from [`RankIteration`] so that each diagnosis reads one
/// cache line per rank and iteration instead of the whole record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankFigures {
    pub flops: f64,
    pub flops_ns: f64,
    pub bus_bytes: f64,
    pub bus_ns: f64,
    /// Busy time within its span, and the span; both NaN without a finished span.
    pub busy_ns: f64,
    pub span_ns: f64,
    /// Mean compute-kernel time per unit of its replica's work (`load`); NaN without
    /// compute ops.
    pub kernel_ns: f64,
    pub issued: u32,
    pub immediate: u32,
}

impl RankFigures {
    pub fn of(r: &RankIteration, load: f64) -> Self {
        let span = r.span_ns();
        RankFigures {
            flops: r.flops,
            flops_ns: r.flops_ns,
            bus_bytes: r.bus_bytes,
            bus_ns: r.bus_ns,
            busy_ns: span.map_or(f64::NAN, |s| r.busy_ns.min(s)),
            span_ns: span.unwrap_or(f64::NAN),
            kernel_ns: if r.compute_ops > 0 {
                r.compute_ns / r.compute_ops as f64 / load
            } else {
                f64::NAN
            },
            issued: r.issue_count,
            immediate: r.immediate_launches,
        }
    }
}

/// Total duration and count of one compute op name on one rank in one iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NameStat {
    pub rank_index: u32,
    pub name: u32,
    pub sum_ns: f64,
    pub count: u32,
}
