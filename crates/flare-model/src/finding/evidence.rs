//! Evidence: the numbers that convinced the engine, each named by an [`EvidenceKey`] and
//! measured in a [`Unit`].

use crate::{GroupKind, MachineMetric};
use serde::{Deserialize, Serialize};

string_enum! {
    /// What a piece of evidence measures. The strings are part of the findings JSON.
    pub enum EvidenceKey {
        // A rank's own delay (self time before its collectives) and its cause.
        /// A rank's self time over the other members' median, minus 1.
        SelfTimeExcess => "self_time_excess",
        /// Iterations in which the rank's excess stands out.
        IrregularIterations => "irregular_iterations",
        /// The rank's compute kernel time over its stage peers'.
        ComputeTimeRatio => "compute_time_ratio",
        /// Median kernel issue latency (GPU start minus CPU launch).
        IssueLatencyMs => "issue_latency_ms",
        /// Share of kernels that started as soon as they were launched.
        ImmediateLaunchShare => "immediate_launch_share",
        /// Median interval between kernel launches.
        LaunchIntervalMs => "launch_interval_ms",
        /// Host-phase (GC, dataloader) time beyond its peers'.
        HostPhaseExcessMs => "host_phase_excess_ms",
        /// CPU time its process used per iteration against its peers' (a job computing on
        /// CPUs): on the CPU or off it, where its extra time went.
        CpuTimePerIterationMs => "cpu_time_per_iteration_ms",

        // The graph search (Holmes).
        /// Share of the job's time its peers waited for the culprit.
        BlameShare => "blame_share",
        /// The waiting it caused, in GPUs kept idle.
        GpusWorthOfWaiting => "gpus_worth_of_waiting",
        /// Its blame over the runner-up's.
        BlameOverRunnerUp => "blame_over_runner_up",
        /// Op groups the classifier judged abnormal.
        AbnormalOpGroups => "abnormal_op_groups",
        /// Transfer time over comparable communicators'.
        TransferTimeRatio => "transfer_time_ratio",
        /// Share of the communicators crossing a fabric element that are slow.
        SlowShareOfCrossingGroups => "slow_share_of_crossing_groups",
        /// Slow communicators whose paths cross the element.
        SlowGroupsThroughElement => "slow_groups_through_element",

        // Hangs in a trace.
        /// Ranks in flight in the stuck collective.
        RanksWaiting => "ranks_waiting",
        /// Members of the stuck collective that arrived.
        ArrivedMembers => "arrived_members",
        /// The culprit's last op.
        LastOp => "last_op",

        // Structure.
        /// Compute per iteration of the heaviest stage.
        StageComputeMs => "stage_compute_ms",
        /// The heaviest data-parallel replica's compute over the median.
        HeaviestReplicaRatio => "heaviest_replica_ratio",

        // Iteration time.
        /// Iteration time after the change point over before it.
        IterationTimeRatio => "iteration_time_ratio",
        /// Posterior probability of the change point.
        ChangeProbability => "change_probability",
        /// The slowest iteration over its segment's median.
        MaxIterationRatio => "max_iteration_ratio",

        // Per-rank metrics (nvidia-resiliency-ext and XPUTimer).
        /// Best peer's time over the rank's own.
        RelativeScore => "relative_score",
        /// The rank's own best time over its current time.
        IndividualScore => "individual_score",
        /// Achieved TFLOPS over its peers' median.
        TflopsRatio => "tflops_ratio",
        /// Bus bandwidth over its peers' median.
        BusBandwidthRatio => "bus_bandwidth_ratio",
        /// Share of the iteration with no traced op running.
        VoidShare => "void_share",

        // Machine metrics (Minder): a machine's distance to the per-device median.
        GpuUtilDeviation => "gpu_util_deviation",
        SmClockDeviation => "sm_clock_deviation",
        PowerDeviation => "power_deviation",
        GpuTempDeviation => "gpu_temp_deviation",
        PcieTxDeviation => "pcie_tx_deviation",
        NvlinkTxDeviation => "nvlink_tx_deviation",
        NicTxDeviation => "nic_tx_deviation",
        CpuUtilDeviation => "cpu_util_deviation",

        // Topology (Arnold).
        /// Pods (leaf-switch domains) the job spans, against the packed placement's.
        PodsSpanned => "pods_spanned",
        /// Groups of one kind that span more pods than packed.
        TpGroupsMisaligned => "tp_groups_misaligned",
        CpGroupsMisaligned => "cp_groups_misaligned",
        EpGroupsMisaligned => "ep_groups_misaligned",
        DpGroupsMisaligned => "dp_groups_misaligned",
        PpGroupsMisaligned => "pp_groups_misaligned",
        WorldGroupsMisaligned => "world_groups_misaligned",
        OtherGroupsMisaligned => "other_groups_misaligned",
        /// Measured slowdown of cross-pod transfers.
        CrossPodSlowdown => "cross_pod_slowdown",
        /// Upper bound of the cross-pod slowdown when it cannot be measured.
        CrossPodSlowdownBound => "cross_pod_slowdown_bound",
        /// Estimated cost in step time.
        EstimatedCost => "estimated_cost",

        // Flight Recorder hangs.
        RanksWithoutDump => "ranks_without_dump",
        JobRanksWithoutDump => "job_ranks_without_dump",
        ProcessGroup => "process_group",
        CollectiveSeqId => "collective_seq_id",
        P2pSeqId => "p2p_seq_id",
        RanksReached => "ranks_reached",
        RanksMissing => "ranks_missing",
        RanksBehind => "ranks_behind",
        P2pWaiting => "p2p_waiting",
        MismatchedRanks => "mismatched_ranks",
        /// A captured stack.
        Stack => "stack",
        /// What the divergence caused downstream.
        Consequence => "consequence",

        // Logs.
        /// Ranks whose logs show the root cause's signature.
        LogRanksReporting => "log_ranks_reporting",
        /// Hosts whose logs show the root cause's signature.
        LogHostsReporting => "log_hosts_reporting",
        /// Lines explained as effects of the root cause.
        LogCascadeLines => "log_cascade_lines",
        /// How long the root cause came before the first effect, where clocks compare.
        LogRootLeadSeconds => "log_root_lead_s",
        /// Reporters that name the culprit as their failed peer.
        LogPeerReports => "log_peer_reports",

        /// Ops per iteration a rank runs beyond ranks that otherwise run the same ops.
        ExtraOpsPerIteration => "extra_ops_per_iteration",
        /// What those extra ops take per iteration, at the rank's own speed.
        ExtraWorkMs => "extra_work_ms",

        // Two runs compared.
        /// A rank's mean step in the current run; baseline: in the baseline run.
        StepTimeMs => "step_time_ms",
        /// One class of a step's time in the current run; baseline: in the baseline run.
        ClassTimeMs => "class_time_ms",
        /// Jensen-Shannon divergence of the runs' consecutive-op-pair distributions.
        SequenceDivergenceBits => "sequence_divergence_bits",
        /// Op names the current run runs and the baseline never did.
        OpsAppeared => "ops_appeared",
        /// Op names the baseline ran and the current run never does.
        OpsDisappeared => "ops_disappeared",
        /// GEMMs per step whose dimensions miss the tensor-core alignment; baseline: the
        /// baseline's.
        MisalignedGemmsPerStep => "misaligned_gemms_per_step",
        /// GEMM time per step on the host (the compute itself on a CPU run).
        GemmTimeMs => "gemm_time_ms",
        /// Host-device synchronizations per step.
        SyncsPerStep => "syncs_per_step",
        /// Checkpointed blocks whose forward runs again in the backward, per step.
        RecomputesPerStep => "recomputes_per_step",
        /// Garbage-collection pauses per step.
        GcPausesPerStep => "gc_pauses_per_step",
        /// Time in garbage collection per step.
        GcTimeMs => "gc_time_ms",
        /// What GEMM kernels achieved: their FLOPs (from the shapes of the GEMM ops that
        /// launched them) over their time.
        GemmTflops => "gemm_tflops",
        /// Time the DataLoader took to hand over a step's batches.
        DataloaderTimeMs => "dataloader_time_ms",
        /// Time per step after the step's last op that no op covers: the host's own
        /// work between steps.
        BetweenStepsMs => "between_steps_ms",
        /// Collectives of one kind per step; baseline: the baseline's.
        CollectivesPerStep => "collectives_per_step",
        /// Time per step in collectives of one kind (waiting excluded).
        CollectiveTimeMs => "collective_time_ms",
        /// Memory-management calls per step (`cudaMalloc`, `cudaFree`, ...).
        MemoryCallsPerStep => "memory_calls_per_step",
        /// One compute op's time per call, current against baseline.
        OpTimePerCallMs => "op_time_per_call_ms",
        /// The step's change over its noise (standard errors of the difference of means).
        StepChangeSe => "step_change_se",
        /// The change of the median step over the noise of medians (standard errors from
        /// each run's median absolute deviation), where a few very long steps make the
        /// means' noise too wide to judge.
        StepMedianChangeSe => "step_median_change_se",
        /// The change of the mean step over every run of each side, in standard errors of
        /// the drift between runs of the same code; threshold: Student's t the change must
        /// reach.
        RunToRunChangeSe => "run_to_run_change_se",
        /// One part of a step's time (compute, communication with its waiting, or the
        /// host's) in the current run; baseline: in the baseline run.
        PartTimeMs => "part_time_ms",
        /// The share of the step's change that classes of time carry beyond their share of
        /// a uniform change of the step (0: the step scaled as a whole).
        ConcentratedShare => "concentrated_share",
        /// The median GPU kernel's issue latency (start minus launch), current against
        /// baseline.
        IssueLatencyP50Us => "issue_latency_p50_us",
        /// Time a rank's main thread waited for a CPU (run queue) per iteration, median
        /// rank; baseline: before the change it explains.
        RunqueueMsPerIteration => "runqueue_ms_per_iteration",

        // Inside NCCL's collectives (Flare's NCCL profiler plugin, live windows).
        /// Time NCCL's proxy waited for this rank's own GPU (kernel), per step.
        ProxyGpuWaitUs => "proxy_gpu_wait_us",
        /// Time this rank's proxy waited for its peers' data, per step.
        ProxyPeerWaitUs => "proxy_peer_wait_us",
        /// Time a transfer between two ranks took, per KiB moved.
        TransferUsPerKib => "transfer_us_per_kib",
        /// GPU time of a collective kernel's compute phase per channel (v7 kernel phases).
        KernelComputeUs => "kernel_compute_us",
        /// Transfers in flight that stopped progressing.
        StalledTransfers => "stalled_transfers",
        /// How long they had made no progress.
        StalledForS => "stalled_for_s",

        // Start-up phases.
        /// How long after the typical rank a rank entered a phase the ranks meet in.
        StartupLateS => "startup_late_s",
        /// Time the other ranks spent waiting for it there, in GPU-seconds.
        StartupWaitGpuS => "startup_wait_gpu_s",
        /// A rank's time in one start-up phase (or before its first phase, or untraced
        /// between phases); baseline: the other ranks' median.
        StartupPhaseS => "startup_phase_s",
        /// Start-up from the process's launch to the end of the first step.
        StartupTotalS => "startup_total_s",

        // Live windows (agent summaries).
        ComputeTime => "compute_time",
        RanksStuck => "ranks_stuck",
        InFlight => "in_flight",
        NotStuck => "not_stuck",
        RanksWithoutData => "ranks_without_data",
        /// Consecutive windows of a live job, up to this one, in which the rank was found
        /// slow (warning or not): what a small excess must reach to be a warning.
        WindowsRunning => "windows_running",
    }
}

impl EvidenceKey {
    /// A machine's deviation from its peers on one machine metric.
    pub fn deviation_of(m: MachineMetric) -> EvidenceKey {
        match m {
            MachineMetric::GpuUtil => EvidenceKey::GpuUtilDeviation,
            MachineMetric::SmClock => EvidenceKey::SmClockDeviation,
            MachineMetric::Power => EvidenceKey::PowerDeviation,
            MachineMetric::GpuTemp => EvidenceKey::GpuTempDeviation,
            MachineMetric::PcieTx => EvidenceKey::PcieTxDeviation,
            MachineMetric::NvlinkTx => EvidenceKey::NvlinkTxDeviation,
            MachineMetric::NicTx => EvidenceKey::NicTxDeviation,
            MachineMetric::CpuUtil => EvidenceKey::CpuUtilDeviation,
        }
    }

    /// Whether it is a machine-metric deviation.
    pub fn is_machine_deviation(self) -> bool {
        MachineMetric::ALL
            .iter()
            .any(|&m| EvidenceKey::deviation_of(m) == self)
    }

    /// Groups of one kind that span more pods than packed.
    pub fn groups_misaligned(k: GroupKind) -> EvidenceKey {
        match k {
            GroupKind::Tp => EvidenceKey::TpGroupsMisaligned,
            GroupKind::Cp => EvidenceKey::CpGroupsMisaligned,
            GroupKind::Ep => EvidenceKey::EpGroupsMisaligned,
            GroupKind::Dp => EvidenceKey::DpGroupsMisaligned,
            GroupKind::Pp => EvidenceKey::PpGroupsMisaligned,
            GroupKind::World => EvidenceKey::WorldGroupsMisaligned,
            GroupKind::Other => EvidenceKey::OtherGroupsMisaligned,
        }
    }
}

string_enum! {
    /// The unit of an evidence value (and of its baseline).
    pub enum Unit {
        /// Dimensionless: a share, a score, a probability, an id.
        None => "",
        /// A ratio to a baseline (`2.0 x`).
        Ratio => "x",
        Percent => "%",
        Ms => "ms",
        Us => "us",
        Seconds => "s",
        /// Information, in bits.
        Bits => "bits",
        /// Robust standard deviations.
        Sd => "sd",
        MsPerIteration => "ms/iteration",
        GbPerSecond => "GB/s",
        Ranks => "ranks",
        /// A rank id.
        Rank => "rank",
        Iterations => "iterations",
        /// GPUs' worth (of waiting).
        Gpus => "GPUs",
        OpGroups => "op groups",
        Communicators => "communicators",
        Groups => "groups",
        Pods => "pods",
        Frames => "frames",
        /// Windows of a live job.
        Windows => "windows",
        Tflops => "TFLOPS",
    }
}

/// One number that convinced the engine, with what it was compared against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Evidence {
    pub metric: EvidenceKey,
    /// `null` in JSON when not finite.
    #[serde(with = "crate::finding::finite")]
    #[schemars(with = "Option<f64>")]
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub baseline: Option<f64>,
    pub unit: Unit,
    /// What the number means, for a person.
    pub detail: String,
    /// Whether this number decided the finding (three to five per finding); the rest
    /// supports it. Text output shows only the decisive evidence. Always `false` for
    /// evidence merged in from other detectors.
    #[serde(default)]
    pub decisive: bool,
}

impl Evidence {
    pub fn new(
        metric: EvidenceKey,
        value: f64,
        baseline: Option<f64>,
        unit: Unit,
        detail: String,
    ) -> Self {
        Evidence {
            metric,
            value,
            baseline,
            unit,
            detail,
            decisive: false,
        }
    }

    /// The same evidence, marked as one that decided the finding.
    pub fn decisive(self) -> Self {
        self.decisive_if(true)
    }

    /// The same evidence, marked as decisive when `yes`.
    pub fn decisive_if(mut self, yes: bool) -> Self {
        self.decisive = yes;
        self
    }
}

/// How a value compares with its baseline, for wording evidence: the direction comes
/// from the numbers, never from what the detector expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Above,
    Below,
    /// Within `tolerance` (relative) of the baseline, or either is not finite.
    Level,
}

impl Direction {
    /// `value` against `baseline`: level within a relative `tolerance` (e.g. 0.05: 5%).
    pub fn of(value: f64, baseline: f64, tolerance: f64) -> Direction {
        if !value.is_finite() || !baseline.is_finite() {
            return Direction::Level;
        }
        let margin = tolerance * baseline.abs().max(value.abs());
        if value > baseline + margin {
            Direction::Above
        } else if value < baseline - margin {
            Direction::Below
        } else {
            Direction::Level
        }
    }

    /// The word for it among `(above, below, level)`.
    pub fn pick<'a>(self, above: &'a str, below: &'a str, level: &'a str) -> &'a str {
        match self {
            Direction::Above => above,
            Direction::Below => below,
            Direction::Level => level,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parametric_keys_cover_every_metric_and_group_kind() {
        for &m in MachineMetric::ALL.iter() {
            let k = EvidenceKey::deviation_of(m);
            assert_eq!(k.as_str(), format!("{}_deviation", m.as_str()));
            assert!(k.is_machine_deviation());
        }
        for k in [
            GroupKind::Tp,
            GroupKind::Cp,
            GroupKind::Ep,
            GroupKind::Dp,
            GroupKind::Pp,
            GroupKind::World,
            GroupKind::Other,
        ] {
            assert_eq!(
                EvidenceKey::groups_misaligned(k).as_str(),
                format!("{}_groups_misaligned", k.as_str())
            );
        }
        assert!(!EvidenceKey::BlameShare.is_machine_deviation());
    }

    #[test]
    fn direction_follows_the_value_against_its_baseline() {
        for (value, baseline, want) in [
            (2.0, 1.0, Direction::Above),
            (0.5, 1.0, Direction::Below),
            (1.0, 1.0, Direction::Level),
            (1.02, 1.0, Direction::Level),
            (0.98, 1.0, Direction::Level),
            (0.0, 0.0, Direction::Level),
            (f64::NAN, 1.0, Direction::Level),
            (-2.0, -1.0, Direction::Below),
        ] {
            assert_eq!(
                Direction::of(value, baseline, 0.05),
                want,
                "{value} vs {baseline}"
            );
        }
        assert_eq!(Direction::Below.pick("a", "b", "c"), "b");
    }

    #[test]
    fn decisive_defaults_to_false_in_json() {
        let e = Evidence::new(
            EvidenceKey::BlameShare,
            1.0,
            None,
            Unit::Percent,
            "x".into(),
        );
        assert!(!e.decisive && e.clone().decisive().decisive);
        let mut v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["decisive"], false);
        v.as_object_mut().unwrap().remove("decisive");
        assert_eq!(serde_json::from_value::<Evidence>(v).unwrap(), e);
    }

    #[test]
    fn strings_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for &k in EvidenceKey::ALL {
            assert!(seen.insert(k.as_str()), "{k} twice");
            assert_eq!(EvidenceKey::parse(k.as_str()), Some(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
        for &u in Unit::ALL {
            assert_eq!(
                serde_json::from_str::<Unit>(&format!("\"{u}\"")).unwrap(),
                u
            );
        }
    }
}
