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
        /// Time no traced op covers, inside a step's own ops' extent.
        Untraced => "untraced",
        /// Time no traced op covers at a marked step's edges, before its own first op or
        /// after its last: the training loop's own host work between steps (logging,
        /// metrics, reading values back) while the device idles.
        BetweenSteps => "between_steps",
    }
}

string_enum! {
    /// A cause of a regression that `flare compare` names from its evidence.
    pub enum RegressionCause {
        /// GEMM dimensions that are not multiples of what the element type needs for
        /// tensor cores (8 for fp16/bf16, 4 for TF32, 16 for 8-bit types).
        TensorCoreMisalignment => "tensor_core_misalignment",
        /// Most GEMM calls run in another element type than the baseline's (autocast lost
        /// or added, the model cast, a mixed-precision setting changed).
        PrecisionChange => "precision_change",
        /// The host waits for the device more often per step (`.item()`, `nonzero`,
        /// `cudaStreamSynchronize`, ...).
        DeviceSynchronization => "device_synchronization",
        /// Python's garbage collector pauses longer per step.
        GarbageCollection => "garbage_collection",
        /// The DataLoader takes longer to hand over each batch.
        Dataloader => "dataloader",
        /// A collective runs with other message sizes, counts, or another algorithm.
        CollectiveChange => "collective_change",
        /// More device memory allocated and freed per step outside the caching pool.
        MemoryChurn => "memory_churn",
        /// A compute op that is a small share of the step runs slower per call.
        MinorityKernel => "minority_kernel",
        /// The GPU waits for the CPU: kernels start soon after they are launched, where
        /// the baseline's queued ahead (a shift of the issue-latency distribution).
        LaunchBound => "launch_bound",
        /// The host's own time between steps grew: after a step's last op no op runs
        /// while the training loop does its work outside the model (logging, metrics,
        /// timers), and the device idles.
        HostBetweenSteps => "host_between_steps",
        /// More checkpointed blocks' forwards run again in the backward per step
        /// (activation checkpointing turned on or widened).
        ActivationRecompute => "activation_recompute",
    }
}

impl RegressionCause {
    /// Whether its evidence is a change of what the program runs (shapes, element types,
    /// syncs, allocations, messages per step), counted rather than timed: a machine that
    /// is slower overall cannot make it.
    pub fn is_structural(self) -> bool {
        matches!(
            self,
            Self::TensorCoreMisalignment
                | Self::PrecisionChange
                | Self::DeviceSynchronization
                | Self::MemoryChurn
                | Self::CollectiveChange
                | Self::ActivationRecompute
        )
    }
}

/// Calls of one name per step of a rank (see [`crate::HostCallCount`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostCallRate {
    pub kind: crate::HostCallKind,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    pub per_step: f64,
    /// Their time on the host per step, ms.
    pub ms_per_step: f64,
    /// A GEMM's kernels on the device per step, ms, where the trace links them to the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_ms_per_step: Option<f64>,
    /// What those kernels achieved: the calls' FLOPs (2·M·N·K from the shapes) over the
    /// kernels' time, TFLOPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    /// Where the program made them, most frequent first (synchronizations, GC pauses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<(String, u64)>,
}

/// The distribution of GPU kernels' issue latency (their start minus their launch on the
/// CPU): a deep queue when the host runs ahead, near zero when the GPU waits for the host.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyQuantiles {
    /// Kernels with both times.
    pub count: u64,
    pub p10_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    /// The distribution's quantiles 0.05, 0.10, ..., 0.95 and 0.99 (its CDF, µs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cdf_us: Vec<f64>,
}

impl LatencyQuantiles {
    /// The probabilities of `cdf_us`.
    pub fn cdf_probabilities() -> Vec<f64> {
        let mut p: Vec<f64> = (1..=19).map(|i| i as f64 * 0.05).collect();
        p.push(0.99);
        p
    }
}

/// What one run's steps took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunProfile {
    /// The input it was read from.
    pub source: String,
    pub ranks: u32,
    /// The steps averaged over, all ranks together: a rank's (rank, iteration) pairs, its
    /// last iteration counted only where the trace marks its end.
    pub rank_iterations: u64,
    /// A rank's mean step, ms: from an iteration's first op (its first device op on a
    /// GPU) to the next iteration's, the last to the end the trace marks for it.
    pub step_ms: f64,
    /// The standard deviation of those steps, ms: the noise a change is judged against.
    #[serde(default)]
    pub step_sd_ms: f64,
    /// The median of those steps, ms.
    #[serde(default)]
    pub step_median_ms: f64,
    /// Their spread without the rare long ones, ms: 1.4826 times the median absolute
    /// deviation (the standard deviation where steps vary normally). A few very long steps
    /// (full garbage collections, checkpoints) make the standard deviation too wide to
    /// tell a change that slowed every step; this measure is not moved by them.
    #[serde(default)]
    pub step_robust_sd_ms: f64,
    /// The compute is CPU work (no GPU activity in the trace).
    #[serde(default)]
    pub cpu_compute: bool,
    /// Host calls the ops do not show, per step, where the source records them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_calls: Vec<HostCallRate>,
    /// Where the program's GC pauses happened, most frequent first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gc_sites: Vec<(String, u64)>,
    /// The longest GC pause, ms: the collector's rare full collections, which a mean per
    /// pause hides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gc_longest_ms: Option<f64>,
    /// GPU kernels' issue latency, where the trace has launches (not on CPU runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_latency: Option<LatencyQuantiles>,
}

impl RunProfile {
    /// The steps a mean over this run's (rank, iteration) pairs rests on: its iterations,
    /// not its pairs, since the ranks of a synchronous job wait for each other and share
    /// each step's machine and data, so they do not vary independently (20 pairs of 2
    /// ranks are 10 samples, not 20).
    pub fn independent_steps(&self) -> u64 {
        (self.rank_iterations / u64::from(self.ranks.max(1))).max(1)
    }
}

/// One class of time in both runs, per step of a rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeClassChange {
    pub kind: TimeClassKind,
    /// The op name, `{collective} {size}`, the host phase, or `waiting` / `untraced`.
    pub class: String,
    pub baseline_ms: f64,
    pub current_ms: f64,
    /// Standard deviation of its time from one step of a rank to the next, ms.
    #[serde(default)]
    pub baseline_sd_ms: f64,
    #[serde(default)]
    pub current_sd_ms: f64,
    /// The algorithms and protocols its collectives ran with, where the kernels' names
    /// say (`RING/LL`, `TREE/SIMPLE`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_algorithms: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub current_algorithms: Vec<String>,
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
    /// Where its ops per step changed, when only some ranks' did: a code path those ranks
    /// alone take (absent when every rank changed alike, or none did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_on: Option<ChangedOnRanks>,
    /// Its time over every run of each side, where reruns of the same code were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reruns: Option<crate::ClassRunToRun>,
}

/// The ranks whose ops per step of a class differ from the same rank's in the baseline by
/// half an op or more, when they are not all the ranks both runs have.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChangedOnRanks {
    /// The first of them, in order (at most [`ChangedOnRanks::LISTED`]).
    pub ranks: Vec<u32>,
    /// How many ranks changed, of how many both runs have.
    pub changed: u32,
    pub compared: u32,
    /// Ops and time per step on those ranks, in each run.
    pub baseline_count: f64,
    pub current_count: f64,
    pub baseline_ms: f64,
    pub current_ms: f64,
}

impl ChangedOnRanks {
    pub const LISTED: usize = 16;

    /// Its change of time per step on those ranks, ms.
    pub fn delta_ms(&self) -> f64 {
        self.current_ms - self.baseline_ms
    }

    /// "rank 2: 1.0 -> 5.0": its ops per step on those ranks, in the baseline and now.
    pub fn counts(&self) -> String {
        format!(
            "{}: {:.1} -> {:.1}",
            self.label(),
            self.baseline_count,
            self.current_count
        )
    }

    /// "rank 2", "ranks 0, 4 and 9", "8 of 64 ranks (0, 8, ...)".
    pub fn label(&self) -> String {
        ranks_label(&self.ranks, self.changed, self.compared)
    }
}

/// "rank 2", "ranks 0, 4 and 9", "8 of 64 ranks (0, 8, ...)": `count` ranks of `compared`,
/// the first of them `listed`.
pub fn ranks_label(listed: &[u32], count: u32, compared: u32) -> String {
    let listed: Vec<String> = listed.iter().map(u32::to_string).collect();
    match (count as usize, listed.split_last()) {
        (1, Some((one, []))) => format!("rank {one}"),
        (n, Some((last, rest))) if n == listed.len() => {
            format!("ranks {} and {last}", rest.join(", "))
        }
        (n, _) => format!("{n} of {compared} ranks ({}, ...)", listed.join(", ")),
    }
}

/// The ranks the others wait for longer than in the baseline at their collectives (their
/// own wait grew by at most a quarter of the most any rank's did), and what grew on them:
/// where a wait every other rank shares comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaitedFor {
    /// The first of them, in order (at most [`ChangedOnRanks::LISTED`]).
    pub ranks: Vec<u32>,
    /// How many they are, of how many ranks both runs have.
    pub count: u32,
    pub compared: u32,
    /// The growth of the wait per step, ms: the other ranks' mean, and theirs.
    pub others_wait_ms: f64,
    pub own_wait_ms: f64,
    /// The classes whose time per step grew most on them (their mean), most first.
    pub grew: Vec<RankClassGrowth>,
}

impl WaitedFor {
    pub fn label(&self) -> String {
        ranks_label(&self.ranks, self.count, self.compared)
    }
}

/// A class's growth of time per step on some ranks, ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RankClassGrowth {
    pub kind: TimeClassKind,
    pub class: String,
    pub delta_ms: f64,
}

impl TimeClassChange {
    pub fn delta_ms(&self) -> f64 {
        self.current_ms - self.baseline_ms
    }

    /// "compute gemm", "communication all_reduce 4.0 MiB"; waiting and untraced time by
    /// their class alone; a kernel's C++ signature shortened ([`crate::short_symbol`]).
    pub fn label(&self) -> String {
        match self.kind {
            TimeClassKind::Waiting | TimeClassKind::Untraced | TimeClassKind::BetweenSteps => {
                self.class.clone()
            }
            k => format!("{} {}", k.as_str(), self.short_class()),
        }
    }

    /// The class as a person reads it: a kernel's C++ signature shortened.
    pub fn short_class(&self) -> std::borrow::Cow<'_, str> {
        crate::short_symbol(&self.class)
    }

    /// The standard error of `delta_ms` with `n` independent steps in each run (see
    /// [`RunProfile::independent_steps`]).
    pub fn delta_se_ms(&self, baseline_n: u64, current_n: u64) -> f64 {
        let v = |sd: f64, n: u64| sd * sd / n.max(1) as f64;
        (v(self.baseline_sd_ms, baseline_n) + v(self.current_sd_ms, current_n)).sqrt()
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
    /// The causes the findings name, in their order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<RegressionCause>,
    /// The ranks the others wait for longer, where the source has each rank's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_for: Option<WaitedFor>,
    /// The drift between runs of the same code, where reruns of either side were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reruns: Option<crate::RunToRun>,
}

/// One GEMM shape in both runs: its calls per step in each, with its kernels' device time
/// and TFLOPS where the run's trace links the kernels to the call that launched them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmShapeRow<'a> {
    pub name: &'a str,
    pub dtype: Option<&'a str>,
    pub baseline: Option<&'a HostCallRate>,
    pub current: Option<&'a HostCallRate>,
}

impl GemmShapeRow<'_> {
    /// Its kernels' device time per step in a run, ms (0 where the run has none linked).
    pub fn device_ms(run: Option<&HostCallRate>) -> f64 {
        run.and_then(|h| h.device_ms_per_step).unwrap_or(0.0)
    }

    pub fn device_delta_ms(&self) -> f64 {
        Self::device_ms(self.current) - Self::device_ms(self.baseline)
    }
}

impl Comparison {
    /// The GEMM shapes whose kernels either run's trace links to them, most changed device
    /// time first: what each GEMM shape took on the device and achieved, whatever kernel
    /// the library picked for it in each run.
    pub fn gemm_shapes(&self) -> Vec<GemmShapeRow<'_>> {
        fn on_device(r: &RunProfile) -> impl Iterator<Item = &HostCallRate> {
            r.host_calls
                .iter()
                .filter(|h| h.kind == crate::HostCallKind::Gemm && h.device_ms_per_step.is_some())
        }
        fn find<'a>(
            r: &'a RunProfile,
            name: &str,
            dtype: Option<&str>,
        ) -> Option<&'a HostCallRate> {
            on_device(r).find(|h| h.name == name && h.dtype.as_deref() == dtype)
        }
        let mut keys: Vec<(&str, Option<&str>)> = on_device(&self.baseline)
            .chain(on_device(&self.current))
            .map(|h| (h.name.as_str(), h.dtype.as_deref()))
            .collect();
        keys.sort();
        keys.dedup();
        let mut rows: Vec<GemmShapeRow> = keys
            .into_iter()
            .map(|(name, dtype)| GemmShapeRow {
                name,
                dtype,
                baseline: find(&self.baseline, name, dtype),
                current: find(&self.current, name, dtype),
            })
            .collect();
        rows.sort_by(|x, y| {
            y.device_delta_ms()
                .abs()
                .total_cmp(&x.device_delta_ms().abs())
                .then_with(|| x.name.cmp(y.name))
        });
        rows
    }
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
