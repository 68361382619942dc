//! Why a job failed, as its logs tell it: the category of the root cause, the stage the
//! job was in, whether a restart can help, the lines that show the cause, and what the
//! failure caused elsewhere (the cascade: watchdog timeouts, peer resets, the launcher's
//! SIGTERMs), each with what it is an effect of.

use serde::{Deserialize, Serialize};

string_enum! {
    /// What kind of cause failed the job.
    pub enum FailureCategory {
        /// The GPU itself: Xid errors, ECC, fell off the bus, GPU lost.
        GpuHardware => "gpu_hardware",
        /// NVLink, NVSwitch or PCIe between devices.
        Interconnect => "interconnect",
        /// NICs, InfiniBand/RoCE links and switches: port down, retries exceeded.
        Network => "network",
        /// The environment or configuration: network interfaces, NCCL settings, versions,
        /// drivers, libraries, shared-memory size, ports.
        Configuration => "configuration",
        /// Device or host memory ran out.
        OutOfMemory => "out_of_memory",
        /// NaN or infinite loss, loss-scale collapse.
        Numerical => "numerical",
        /// An error in the training program: an exception, a device-side assert.
        UserCode => "user_code",
        /// Ranks called different collectives, sizes or orders.
        CollectiveMismatch => "collective_mismatch",
        /// Datasets, checkpoints and file systems.
        DataStorage => "data_storage",
        /// The scheduler or cluster: time limit, preemption, node failure, eviction.
        Platform => "platform",
        /// A fault in a library or runtime (NCCL, PyTorch, driver), not in the job's code.
        Software => "software",
        /// The logs show a failure but nothing says what caused it.
        Unknown => "unknown",
    }
}

string_enum! {
    /// Where in its life the job was when it failed.
    pub enum JobStage {
        /// Starting processes: the launcher, the container, the environment.
        Launch => "launch",
        /// Rendezvous, process groups, NCCL communicators.
        Init => "init",
        /// Loading data, building the model, loading a checkpoint.
        Loading => "loading",
        Training => "training",
        Checkpointing => "checkpointing",
        Evaluation => "evaluation",
        /// Tearing down after the work was done.
        Shutdown => "shutdown",
        Unknown => "unknown",
    }
}

string_enum! {
    /// What a log line is to the failure.
    pub enum LineRole {
        /// It names a cause.
        Root => "root",
        /// A failure on this rank whose cause it does not name (an exit code, a signal, a
        /// generic library error).
        Symptom => "symptom",
        /// An effect of a failure elsewhere (timeouts, peer resets, the launcher stopping
        /// the other ranks).
        Cascade => "cascade",
        /// Unlike the job's other lines, earlier runs' and earlier iterations' (the
        /// statistical part), with no known signature.
        Anomaly => "anomaly",
    }
}

string_enum! {
    /// A known log signature: one row of the rule table (`flare-log-diagnosis`'s
    /// `signatures`), which says how it is recognised and what it means.
    pub enum LogSignature {
        // GPU hardware
        GpuXid => "gpu_xid",
        GpuFellOffBus => "gpu_fell_off_bus",
        GpuEccError => "gpu_ecc_error",
        GpuLost => "gpu_lost",
        GpuRowRemapFailure => "gpu_row_remap_failure",
        // Interconnect
        NvlinkError => "nvlink_error",
        PcieError => "pcie_error",
        NvlsFailure => "nvls_failure",
        PeerAccessFailed => "peer_access_failed",
        FabricNotReady => "fabric_not_ready",
        // Network
        IbCompletionError => "ib_completion_error",
        IbAsyncError => "ib_async_error",
        NicLinkDown => "nic_link_down",
        NicCountMismatch => "nic_count_mismatch",
        IbVerbsFailed => "ib_verbs_failed",
        NicDriverFailure => "nic_driver_failure",
        // Configuration
        NcclNoInterface => "nccl_no_interface",
        NcclInvalidUsage => "nccl_invalid_usage",
        DuplicateGpu => "duplicate_gpu",
        NcclVersionMismatch => "nccl_version_mismatch",
        NcclBootstrapMismatch => "nccl_bootstrap_mismatch",
        NcclConfigInvalid => "nccl_config_invalid",
        NcclTopologyFailed => "nccl_topology_failed",
        SocketConnectRefused => "socket_connect_refused",
        AddressInUse => "address_in_use",
        CudaDriverTooOld => "cuda_driver_too_old",
        NoCudaDevice => "no_cuda_device",
        UnsupportedGpuArch => "unsupported_gpu_arch",
        SharedMemoryTooSmall => "shared_memory_too_small",
        MissingModule => "missing_module",
        UndefinedSymbol => "undefined_symbol",
        RendezvousTimeout => "rendezvous_timeout",
        ResourceLimit => "resource_limit",
        // Out of memory
        CudaOutOfMemory => "cuda_out_of_memory",
        HostOomKill => "host_oom_kill",
        HostAllocFailed => "host_alloc_failed",
        // Numerical
        NanLoss => "nan_loss",
        LossScaleAtMinimum => "loss_scale_at_minimum",
        GradientOverflow => "gradient_overflow",
        // User code
        PythonException => "python_exception",
        BadArguments => "bad_arguments",
        DeviceSideAssert => "device_side_assert",
        // Collective mismatch
        CollectiveMismatch => "collective_mismatch",
        UnfinishedReduction => "unfinished_reduction",
        // Data and storage
        DiskFull => "disk_full",
        CorruptCheckpoint => "corrupt_checkpoint",
        IoError => "io_error",
        PathMissing => "path_missing",
        // Platform
        SlurmTimeLimit => "slurm_time_limit",
        SlurmPreemption => "slurm_preemption",
        JobPreempted => "job_preempted",
        SlurmNodeFailure => "slurm_node_failure",
        SlurmCancelled => "slurm_cancelled",
        PodEvicted => "pod_evicted",
        PodOomKilled => "pod_oom_killed",
        // Software
        IllegalMemoryAccess => "illegal_memory_access",
        CudaLaunchFailure => "cuda_launch_failure",
        CublasFailure => "cublas_failure",
        NcclInternalError => "nccl_internal_error",
        Segfault => "segfault",
        CxxTerminate => "cxx_terminate",
        KernelLockup => "kernel_lockup",
        // Symptoms: a failure whose cause the line does not name
        CudaError => "cuda_error",
        NcclSystemError => "nccl_system_error",
        NcclWarning => "nccl_warning",
        ProcessExit => "process_exit",
        ProcessSignal => "process_signal",
        SrunTaskExit => "srun_task_exit",
        // Cascade: effects of a failure elsewhere
        WatchdogTimeout => "watchdog_timeout",
        NcclAbortAll => "nccl_abort_all",
        WatchdogThreadDied => "watchdog_thread_died",
        HeartbeatTimeout => "heartbeat_timeout",
        CommunicatorAborted => "communicator_aborted",
        RemotePeerGone => "remote_peer_gone",
        PeerConnectionLost => "peer_connection_lost",
        NcclProxyFailed => "nccl_proxy_failed",
        StoreConnectionLost => "store_connection_lost",
        LauncherSigterm => "launcher_sigterm",
        DeathSignal => "death_signal",
        ChildFailed => "child_failed",
        SrunStepAborted => "srun_step_aborted",
        DistBackendError => "dist_backend_error",
        GpuXidCleanup => "gpu_xid_cleanup",
        CollectiveTimeout => "collective_timeout",
    }
}

/// One log line, where it was and what it is to the failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogLine {
    pub file: String,
    /// 1-based line number in `file`.
    pub line: u64,
    /// The line as read (cut at 2,000 bytes).
    pub text: String,
    pub role: LineRole,
    /// The known signature it matched, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub signature: Option<LogSignature>,
    /// The global rank the line came from, when the file or the line says it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rank: Option<u32>,
    /// The host the line came from, when the file or the line says it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host: Option<String>,
    /// Its timestamp as written, when it has one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time: Option<String>,
}

/// Lines of one cascade signature, folded: how many, from where, the first of them, and
/// what they are an effect of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CascadeGroup {
    pub signature: LogSignature,
    pub lines: u64,
    /// Ranks that logged it (at most 64 listed; `rank_count` counts them all).
    pub ranks: Vec<u32>,
    /// How many ranks logged it.
    pub rank_count: u32,
    /// Hosts that logged it (at most 64 listed).
    pub hosts: Vec<String>,
    /// How many hosts logged it.
    pub host_count: u32,
    pub first: LogLine,
    /// What these lines are an effect of, for a person.
    pub explanation: String,
}

/// Why a job failed: attached to the finding that names the root cause.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailureDetail {
    pub category: FailureCategory,
    pub stage: JobStage,
    /// The last training iteration the culprit's logs reached before the failure.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub iteration: Option<u64>,
    /// Whether running the job again, unchanged, can succeed (`null`: the logs do not
    /// say). A hardware fault needs the part drained first; a code or configuration
    /// error fails again.
    pub restart_helps: Option<bool>,
    /// The lines that show the cause, the root first, then the culprit's own symptoms.
    pub lines: Vec<LogLine>,
    /// What the failure caused elsewhere, largest first.
    #[serde(default)]
    pub cascade: Vec<CascadeGroup>,
    /// Lines that read as a failure's effects but were logged too long before the root
    /// cause to be its effects (more than 31 minutes, where clocks compare): an earlier
    /// failure the logs do not explain.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub earlier: Vec<CascadeGroup>,
}
