//! Window summaries: what a node agent ships to the server instead of raw events.
//!
//! A summary holds, for one node and one time window, per local rank: its iterations, and
//! per op (name, kind, communicator) the count and the duration distribution, bytes, bus
//! bandwidth, issue latency, plus the rank's busy time (spans open) and drops. It is
//! a few kilobytes however many events the window held, which is what keeps the wire
//! cost of always-on tracing at a small fraction of the raw event bytes.
//!
//! The JSON form is the wire format (zstd-compressed on the wire); fields are only added.

use crate::OpKind;
use serde::{Deserialize, Serialize};

/// The wire format's version; the server rejects summaries with a newer major.
pub const SUMMARY_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowSummary {
    pub version: u32,
    pub job_id: String,
    /// The node's host name.
    pub node: String,
    /// Window index: `start_unix_ns / window_ns`, the same on every node of a job.
    pub window: u64,
    pub window_ns: u64,
    /// Wall-clock bounds of the window (Unix ns).
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    /// Job size as the ranks reported it.
    pub world_size: u32,
    pub ranks: Vec<RankSummary>,
    /// Ops that stayed in flight without progress past the watchdog's limit.
    #[serde(default)]
    pub hangs: Vec<HangRecord>,
    /// Stacks of the local ranks that were not stuck when ranks of their job on this node
    /// were: the rank the others wait for is usually one of them, and its stack says where
    /// it is. Absent from agents older than this field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_stacks: Vec<PeerStacks>,
    /// What the agent read of the job's log files on the node in the window (`flare
    /// agent --logs`): a summary may carry only this, when the job's processes are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<LogExcerpt>,
    /// The job's parallel layout, where the agent could tell it (`FLARE_PARALLEL` in a
    /// rank's environment, or the sizes on its command line); absent otherwise and from
    /// older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<crate::ParallelConfig>,
}

/// The part of a node's log files worth sending, for one window: the lines the
/// diagnosis reads (see `flare_log_diagnosis::excerpt`), bounded, and the counts of the
/// window's most frequent line templates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogExcerpt {
    /// Lines read in the window, every file.
    pub lines_read: u64,
    /// Lines worth sending that were not sent: over the window's budget.
    pub lines_dropped: u64,
    /// Failure lines and what explains them (tracebacks, torchrun's summary, the lines
    /// that say who a process is or which stage it entered), in each file's order.
    pub lines: Vec<LogExcerptLine>,
    /// Each writer's latest progress line in the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub progress: Vec<LogProgressLine>,
    /// The window's most frequent line templates, most frequent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<TemplateCount>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogExcerptLine {
    /// The file's path on the node.
    pub file: String,
    /// Its number in the file (from where the agent began reading it).
    pub line: u64,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogProgressLine {
    pub file: String,
    /// Which writer of the file (a rank's prefix): the receiver keeps the latest per
    /// writer.
    pub writer: String,
    pub line: u64,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplateCount {
    pub template: String,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    pub rank: u32,
    pub local_rank: u32,
    pub pid: u32,
    /// Iterations (`step` markers) that ended inside the window.
    pub iterations: Vec<IterationSample>,
    /// Per op: one entry per (name, kind, communicator).
    pub ops: Vec<OpStats>,
    /// Time with at least one top-level span open, in ns (the rest is "void": the
    /// process did nothing Flare can see).
    pub busy_ns: u64,
    /// Time with at least one collective or P2P span open, in ns (overlapping spans,
    /// async ones included, count once); absent from agents older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_busy_ns: Option<u64>,
    /// The part of the window this rank was observed in, in ns.
    pub observed_ns: u64,
    /// Events recorded by the rank's tracer in the window.
    pub events: u64,
    /// Events the rank's tracer dropped because its ring was full (cumulative).
    pub dropped_total: u64,
    /// Whether the rank's process uses a GPU (it loaded the GPU driver or holds a device
    /// open); absent when the agent could not tell (or is older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<bool>,
    /// CPU time its process used in the window (user + system, all threads), in ns:
    /// a rank that is slower with the CPU time of its peers spent the difference off the
    /// CPU (sleeping or blocked); absent when the agent could not read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// Time its main thread was runnable but waited for a CPU in the window, in ns: off
    /// the CPU because other processes held its cores, not because it slept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runqueue_ns: Option<u64>,
    /// Progress inside NCCL's collectives, where Flare's NCCL profiler plugin recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<NcclProgress>,
    /// The rank's start-up so far, sent while it is in progress and for a few windows
    /// after it ended (so that every rank's record meets the others' in some window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<crate::StartupRecord>,
    /// The part of the window inside its iterations that ended there, with its time in
    /// collectives: what its peers compare per iteration, without its start-up before
    /// its first step or its shutdown after its last; absent without iterations (or from
    /// agents older than this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stepping: Option<SteppingTime>,
}

/// A rank's time from the start of its first iteration that ended in a window (or the
/// window's start, if that iteration began before it) to its last step in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SteppingTime {
    pub span_ns: u64,
    /// Time inside the span with at least one collective or P2P span open.
    pub sync_ns: u64,
}

/// What Flare's NCCL profiler plugin saw of a rank's collectives in a window: its
/// transfers per peer (NCCL's proxy ops and, where recorded, their steps), its kernels'
/// GPU time, and the transfers in flight that stopped progressing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclProgress {
    /// One entry per (communicator, peer, direction), transfers that ended in the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkStats>,
    /// One entry per communicator: its kernels on the GPU's clock.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelStats>,
    /// Transfers in flight at the window's end with no progress for a while.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalled: Vec<StalledLink>,
    /// The communicators the rank belongs to and its rank in each (as NCCL said at init):
    /// who a peer is, even in a window where that peer moved nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comms: Vec<CommMembership>,
}

/// A rank's place in one communicator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommMembership {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    /// Its rank in the communicator, and the communicator's size.
    pub rank: u32,
    pub size: u32,
}

/// A rank's transfers with one peer in one direction over a window. Times are summed over
/// the transfers (ns); bytes are what their steps moved when proxy steps were recorded,
/// else steps x chunk size (the most they could move). The state split is there when proxy
/// steps were recorded (`steps` > 0): sender: own GPU (its kernel had not filled the chunk), peer (no free slot at the
/// receiver), network (on the wire until sent); receiver: peer (the chunk had not
/// arrived), flush, own GPU (its kernel had not taken the chunk).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkStats {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    /// This rank's and the peer's ranks in the communicator.
    pub self_rank: u32,
    pub peer: u32,
    pub send: bool,
    /// Proxy ops (one per channel and operation) and their bytes.
    pub ops: u64,
    pub bytes: u64,
    /// Their durations, summed.
    pub op_ns: u64,
    /// Steps whose states were timed.
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub gpu_wait_ns: u64,
    #[serde(default)]
    pub peer_wait_ns: u64,
    #[serde(default)]
    pub network_ns: u64,
    #[serde(default)]
    pub flush_ns: u64,
    /// The channel whose transfers took longest in total, and that time.
    pub slowest_channel: u8,
    pub slowest_channel_ns: u64,
    /// Distinct channels used.
    pub channels: u32,
}

/// A communicator's kernels on one rank over a window, timed on the GPU (NCCL's kernel
/// channel events; v7 kernel phases split sync waits from work).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelStats {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    /// Kernel channels timed, and their GPU time summed.
    pub channels: u64,
    pub gpu_ns: u64,
    /// Phases (v7): time in the initial and final syncs (waiting for peers) and computing.
    #[serde(default)]
    pub sync_ns: u64,
    #[serde(default)]
    pub compute_ns: u64,
}

/// A transfer in flight at the end of a window that had not progressed for a while: where
/// it stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StalledLink {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    pub self_rank: u32,
    pub peer: u32,
    pub send: bool,
    pub channel: u8,
    /// The state of its latest step (`send_gpu_wait`, `send_peer_wait`, `send_network`,
    /// `recv_peer_wait`, `recv_flush`, `recv_gpu_wait`), absent without proxy steps.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub state: Option<String>,
    /// Steps finished and steps in the transfer.
    pub steps_done: u32,
    pub steps: u32,
    /// Time since its last progress (ns).
    pub stalled_ns: u64,
}

impl RankSummary {
    /// A rank that reported nothing yet: no iterations, ops or optional figures; callers
    /// fill in what they have (`RankSummary { ops, ..RankSummary::empty(r, r % 8, pid) }`).
    pub fn empty(rank: u32, local_rank: u32, pid: u32) -> RankSummary {
        RankSummary {
            rank,
            local_rank,
            pid,
            iterations: Vec::new(),
            ops: Vec::new(),
            busy_ns: 0,
            sync_busy_ns: None,
            observed_ns: 0,
            events: 0,
            dropped_total: 0,
            gpu: None,
            cpu_ns: None,
            runqueue_ns: None,
            nccl: None,
            startup: None,
            stepping: None,
        }
    }

    /// Share of the observed time with no span open.
    pub fn void_share(&self) -> f64 {
        if self.observed_ns == 0 {
            return 0.0;
        }
        1.0 - (self.busy_ns.min(self.observed_ns) as f64 / self.observed_ns as f64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationSample {
    pub step: u64,
    /// Unix ns.
    pub start_unix_ns: u64,
    pub duration_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    pub name: String,
    pub kind: OpKind,
    /// The communicator (process group) for collectives and P2P, as the tracer named it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    /// Members of the communicator (for bus bandwidth).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group_size: Option<u32>,
    pub count: u64,
    pub total_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Bytes moved (communication) summed over the window.
    #[serde(default)]
    pub bytes: u64,
    /// Floating-point operations (compute) summed over the window.
    #[serde(default)]
    pub flops: u64,
    /// Median bus bandwidth in GB/s (bytes x bus factor / duration).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bus_gbps: Option<f64>,
    /// Achieved TFLOPS (flops / total time).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tflops: Option<f64>,
    /// Issue latency (GPU start minus CPU launch) percentiles, where the events carry it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub issue_p50_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub issue_p99_ns: Option<u64>,
}

/// An op that stayed in flight with no progress past the watchdog's limit, with the
/// stacks captured from the local ranks at that moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HangRecord {
    pub rank: u32,
    pub pid: u32,
    /// The innermost open span.
    pub op: String,
    pub kind: OpKind,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub group: Option<String>,
    /// How long it had been in flight when the watchdog fired (ns).
    pub in_flight_ns: u64,
    /// Unix ns when the watchdog fired.
    pub detected_unix_ns: u64,
    /// Captured stacks, one entry per thread, innermost frame first.
    #[serde(default)]
    pub stacks: Vec<ThreadStack>,
    /// `py-spy`, `native` (the tracer's open spans and /proc), or `none`.
    pub stack_source: String,
}

/// The stacks of a rank that was not stuck in any op past the watchdog's limit, captured
/// because ranks of its job on the same node were.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerStacks {
    pub rank: u32,
    pub pid: u32,
    /// Its innermost open span when captured, if any (a span open for less than the
    /// watchdog's limit).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub open_op: Option<String>,
    /// Unix ns when the capture was asked for.
    pub captured_unix_ns: u64,
    /// One entry per thread, innermost frame first.
    pub stacks: Vec<ThreadStack>,
    /// As in [`HangRecord::stack_source`].
    pub stack_source: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadStack {
    pub thread: String,
    pub frames: Vec<String>,
}

impl ThreadStack {
    /// A process's main thread among its captured threads (Python's `MainThread`, the
    /// native view's `main`), else its first thread with frames.
    pub fn main_of(stacks: &[ThreadStack]) -> Option<&ThreadStack> {
        stacks
            .iter()
            .find(|t| t.thread.contains("MainThread") || t.thread == "main")
            .or_else(|| stacks.iter().find(|t| !t.frames.is_empty()))
    }
}
