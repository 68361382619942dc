//! NCCL's profiler plugin ABI, versions 1 to 7, as `#[repr(C)]` Rust types.
//!
//! Written from NCCL's headers (`plugins/profiler/example/nccl/profiler_v{1..7}.h`,
//! `profiler.h`, `common.h`, `err.h`, `types.h`; `ext-profiler/example/nccl/` before 2.30)
//! field for field, in the same order. Rust names are snake_case; each type says which C
//! type it mirrors. Choices that keep reads sound whatever NCCL writes:
//! - C `bool` fields are `u8` (same size and alignment; any byte value is a valid `u8`,
//!   while a Rust `bool` other than 0 or 1 would be undefined behaviour). NCCL 2.28 had
//!   `int graphCaptured` in v5's `groupApi`; its low byte, at the same offset on the
//!   little-endian targets NCCL supports, carries the same 0/1 value.
//! - C enums passed by value (`ncclProfilerEventState_t`, `ncclResult_t`,
//!   `ncclDebugLogLevel`) are `c_int`, never Rust enums.
//!
//! Layouts are asserted at compile time for 64-bit targets, and `tests/abi_layout.rs`
//! compares every offset with NCCL's own headers when they are available.

#![allow(missing_docs)]

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`.
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
pub const NCCL_INVALID_USAGE: NcclResult = 5;
pub const NCCL_REMOTE_ERROR: NcclResult = 6;

/// `ncclDebugLogLevel`.
pub const NCCL_LOG_NONE: c_int = 0;
pub const NCCL_LOG_VERSION: c_int = 1;
pub const NCCL_LOG_WARN: c_int = 2;
pub const NCCL_LOG_INFO: c_int = 3;
pub const NCCL_LOG_ABORT: c_int = 4;
pub const NCCL_LOG_TRACE: c_int = 5;
/// `ncclDebugLogSubSys::NCCL_INIT`.
pub const NCCL_SUBSYS_INIT: c_ulong = 1;
/// `ncclDebugLogSubSys::NCCL_PROFILE`.
pub const NCCL_SUBSYS_PROFILE: c_ulong = 16384;

/// `ncclDebugLogger_t`: `void (*)(level, flags, file, line, fmt, ...)`; NULL allowed.
pub type LogFn = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;

/// Event types (`ncclProfileGroup`, ...): one bit each, also the bits of the activation
/// mask.
pub mod event {
    pub const GROUP: u64 = 1 << 0;
    pub const COLL: u64 = 1 << 1;
    pub const P2P: u64 = 1 << 2;
    pub const PROXY_OP: u64 = 1 << 3;
    pub const PROXY_STEP: u64 = 1 << 4;
    pub const PROXY_CTRL: u64 = 1 << 5;
    pub const KERNEL_CH: u64 = 1 << 6;
    pub const NET_PLUGIN: u64 = 1 << 7;
    pub const GROUP_API: u64 = 1 << 8;
    pub const COLL_API: u64 = 1 << 9;
    pub const P2P_API: u64 = 1 << 10;
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
    pub const CE_COLL: u64 = 1 << 12;
    pub const CE_SYNC: u64 = 1 << 13;
    pub const CE_BATCH: u64 = 1 << 14;
    /// v7: a phase of a kernel (initial sync, compute, final sync), GPU-timed.
    pub const KERNEL_PHASE: u64 = 1 << 15;
}

/// `ncclProfilerEventState_t` values.
pub mod state {
    use std::ffi::c_int;
    // ProxyOp states of v1-v3 (deprecated in v4).
    pub const PROXY_OP_SEND_POSTED: c_int = 0;
    pub const PROXY_OP_SEND_REM_FIFO_WAIT: c_int = 1;
    pub const PROXY_OP_SEND_TRANSMITTED: c_int = 2;
    pub const PROXY_OP_SEND_DONE: c_int = 3;
    pub const PROXY_OP_RECV_POSTED: c_int = 4;
    pub const PROXY_OP_RECV_RECEIVED: c_int = 5;
    pub const PROXY_OP_RECV_TRANSMITTED: c_int = 6;
    pub const PROXY_OP_RECV_DONE: c_int = 7;
    pub const PROXY_OP_IN_PROGRESS_V4: c_int = 19;
    // ProxyStep states.
    pub const PROXY_STEP_SEND_GPU_WAIT: c_int = 8;
    pub const PROXY_STEP_SEND_PEER_WAIT_V4: c_int = 20;
    pub const PROXY_STEP_SEND_WAIT: c_int = 9;
    pub const PROXY_STEP_RECV_WAIT: c_int = 10;
    pub const PROXY_STEP_RECV_FLUSH_WAIT: c_int = 11;
    pub const PROXY_STEP_RECV_GPU_WAIT: c_int = 12;
    // ProxyCtrl states.
    pub const PROXY_CTRL_IDLE: c_int = 13;
    pub const PROXY_CTRL_ACTIVE: c_int = 14;
    pub const PROXY_CTRL_SLEEP: c_int = 15;
    pub const PROXY_CTRL_WAKEUP: c_int = 16;
    pub const PROXY_CTRL_APPEND: c_int = 17;
    pub const PROXY_CTRL_APPEND_END: c_int = 18;
    pub const NET_PLUGIN_UPDATE: c_int = 21;
    pub const KERNEL_CH_STOP: c_int = 22;
    pub const GROUP_START_API_STOP: c_int = 23;
    pub const GROUP_END_API_START: c_int = 24;
    // CE states (v6).
    pub const CE_COLL_START: c_int = 25;
    pub const CE_COLL_COMPLETE: c_int = 26;
    pub const CE_SYNC_START: c_int = 27;
    pub const CE_SYNC_COMPLETE: c_int = 28;
    pub const CE_BATCH_START: c_int = 29;
    pub const CE_BATCH_COMPLETE: c_int = 30;
    // v7: a kernel phase's GPU stop timer (in the `kernelCh` member of the state args).
    pub const KERNEL_PHASE_STOP: c_int = 31;
}

// ---------------------------------------------------------------------------------------
// Members shared by several versions.

/// `proxyOp` member of every descriptor version.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProxyOpDescr {
    /// `pid_t pid`: the process that created the op (PXN ops come from other processes).
    pub pid: libc::pid_t,
    pub channel_id: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub chunk_size: c_int,
    pub is_send: c_int,
}

/// `proxyStep` member of every descriptor version.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProxyStepDescr {
    pub step: c_int,
}

/// `netPlugin` member (v3+).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NetPluginDescr {
    pub id: i64,
    pub data: *mut c_void,
}

/// `proxyCtrl` member of every state-args version.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProxyCtrlStateArgs {
    pub appended_proxy_ops: c_int,
}

// ---------------------------------------------------------------------------------------
// v1 (NCCL 2.23): enum codes instead of strings.

/// `coll` member of `ncclProfilerEventDescr_v1_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollDescrV1 {
    /// The communicator's user-assigned name.
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    /// `ncclFunc_t` code.
    pub func: u8,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    /// `ncclDataType_t` code.
    pub datatype: u8,
    pub op: u32,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    /// `NCCL_ALGO_*` code.
    pub algo: u8,
    /// `NCCL_PROTO_*` code.
    pub proto: u8,
    pub is_collnet: c_int,
    pub is_nvls: c_int,
}

/// `p2p` member of `ncclProfilerEventDescr_v1_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pDescrV1 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: u8,
    pub buff: *mut c_void,
    pub datatype: u8,
    pub count: usize,
    pub peer: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV1 {
    pub coll: CollDescrV1,
    pub p2p: P2pDescrV1,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
}

/// `ncclProfilerEventDescr_v1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV1 {
    /// `uint8_t type`: one of [`event`].
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV1,
}

/// `proxyOp` member of `ncclProfilerEventStateArgs_v1_t` (v1-v3).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProxyOpStateArgsV1 {
    pub trans_size: usize,
    pub steps: c_int,
}

/// `ncclProfilerEventStateArgs_v1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV1 {
    pub proxy_op: ProxyOpStateArgsV1,
    pub proxy_ctrl: ProxyCtrlStateArgs,
}

/// `ncclProfiler_v1_t`.
#[repr(C)]
pub struct ProfilerV1 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        e_activation_mask: *mut c_int,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV1,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV1,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// ---------------------------------------------------------------------------------------
// v2 (NCCL 2.24): strings for func, datatype, algo, proto.

/// `coll` member of `ncclProfilerEventDescr_v2_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollDescrV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub traffic_bytes: usize,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// `p2p` member of `ncclProfilerEventDescr_v2_t` and `_v3_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pDescrV2 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV2 {
    pub coll: CollDescrV2,
    pub p2p: P2pDescrV2,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
}

/// `ncclProfilerEventDescr_v2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV2 {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV2,
}

/// `ncclProfilerEventStateArgs_v2_t`: the same members as v1.
pub type StateArgsV2 = StateArgsV1;

/// `ncclProfiler_v2_t`.
#[repr(C)]
pub struct ProfilerV2 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        e_activation_mask: *mut c_int,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV2,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV2,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// ---------------------------------------------------------------------------------------
// v3 (NCCL 2.26): no trafficBytes; KernelCh and NetPlugin events.

/// `coll` member of `ncclProfilerEventDescr_v3_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollDescrV3 {
    pub name: *const c_char,
    pub comm_hash: u64,
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_max_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// `kernelCh` member of `ncclProfilerEventDescr_v3_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelChDescrV3 {
    pub channel_id: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV3 {
    pub coll: CollDescrV3,
    pub p2p: P2pDescrV2,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
    pub kernel_ch: KernelChDescrV3,
    pub net_plugin: NetPluginDescr,
}

/// `ncclProfilerEventDescr_v3_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV3 {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV3,
}

/// `ncclProfilerEventStateArgs_v3_t`: the same members as v1.
pub type StateArgsV3 = StateArgsV1;

/// `ncclProfiler_v3_t`.
#[repr(C)]
pub struct ProfilerV3 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        e_activation_mask: *mut c_int,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV3,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV3,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// ---------------------------------------------------------------------------------------
// v4 (NCCL 2.27): communicator identity moves to init; GPU timers on KernelCh.

/// `coll` member of `ncclProfilerEventDescr_v4_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollDescrV4 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
}

/// `p2p` member of `ncclProfilerEventDescr_v4_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pDescrV4 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
}

/// `kernelCh` member of `ncclProfilerEventDescr_v4_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelChDescrV4 {
    pub channel_id: u8,
    /// Start time from the GPU's global timer (ns).
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV4 {
    pub coll: CollDescrV4,
    pub p2p: P2pDescrV4,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
    pub kernel_ch: KernelChDescrV4,
    pub net_plugin: NetPluginDescr,
}

/// `ncclProfilerEventDescr_v4_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV4 {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV4,
}

/// `proxyStep` member of `ncclProfilerEventStateArgs_v4_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProxyStepStateArgs {
    pub trans_size: usize,
}

/// `netPlugin` member of `ncclProfilerEventStateArgs_v4_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NetPluginStateArgs {
    pub data: *mut c_void,
}

/// `kernelCh` member of `ncclProfilerEventStateArgs_v4_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelChStateArgs {
    /// Stop time from the GPU's global timer (ns).
    pub p_timer: u64,
}

/// `ncclProfilerEventStateArgs_v4_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV4 {
    pub proxy_step: ProxyStepStateArgs,
    pub proxy_ctrl: ProxyCtrlStateArgs,
    pub net_plugin: NetPluginStateArgs,
    pub kernel_ch: KernelChStateArgs,
}

/// `ncclProfiler_v4_t`.
#[repr(C)]
pub struct ProfilerV4 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        e_activation_mask: *mut c_int,
        comm_name: *const c_char,
        comm_hash: u64,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: LogFn,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV4,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV4,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// ---------------------------------------------------------------------------------------
// v5 (NCCL 2.28): 64-bit type, API events, Coll/P2p parented by their API event.

/// `groupApi` member of `ncclProfilerEventDescr_v5_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct GroupApiDescr {
    /// C `bool`.
    pub graph_captured: u8,
    pub group_depth: c_int,
}

/// `collApi` member of `ncclProfilerEventDescr_v5_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollApiDescr {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    /// C `bool`.
    pub graph_captured: u8,
}

/// `p2pApi` member of `ncclProfilerEventDescr_v5_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pApiDescr {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    /// C `bool`.
    pub graph_captured: u8,
}

/// `kernelLaunch` member of `ncclProfilerEventDescr_v5_t` and later.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelLaunchDescr {
    pub stream: *mut c_void,
}

/// `coll` member of `ncclProfilerEventDescr_v5_t` and `_v6_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollDescrV5 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    /// The Group event (the v4 parent); `parentObj` is the CollApi event.
    pub parent_group: *mut c_void,
}

/// `p2p` member of `ncclProfilerEventDescr_v5_t` and `_v6_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pDescrV5 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    /// The Group event (the v4 parent); `parentObj` is the P2pApi event.
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV5 {
    pub group_api: GroupApiDescr,
    pub coll_api: CollApiDescr,
    pub p2p_api: P2pApiDescr,
    pub kernel_launch: KernelLaunchDescr,
    pub coll: CollDescrV5,
    pub p2p: P2pDescrV5,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
    pub kernel_ch: KernelChDescrV4,
    pub net_plugin: NetPluginDescr,
}

/// `ncclProfilerEventDescr_v5_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV5 {
    /// `uint64_t type`: one of [`event`].
    pub type_: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV5,
}

/// `ncclProfilerEventStateArgs_v5_t`: the same members as v4.
pub type StateArgsV5 = StateArgsV4;

/// `ncclProfiler_v5_t`.
#[repr(C)]
pub struct ProfilerV5 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        comm_id: u64,
        e_activation_mask: *mut c_int,
        comm_name: *const c_char,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: LogFn,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV5,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV5,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// ---------------------------------------------------------------------------------------
// v6 (NCCL 2.30): copy-engine (CE) collectives.

/// `ceColl` member of `ncclProfilerEventDescr_v6_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CeCollDescr {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    /// C `bool`.
    pub intra_batch_sync: u8,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
}

/// `ceCollSync` member of `ncclProfilerEventDescr_v6_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CeSyncDescr {
    /// C `bool`.
    pub is_complete: u8,
    pub n_ranks: c_int,
}

/// `ceCollBatch` member of `ncclProfilerEventDescr_v6_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CeBatchDescr {
    pub num_ops: c_int,
    pub total_bytes: usize,
    /// C `bool`.
    pub use_intra_sync: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV6 {
    pub group_api: GroupApiDescr,
    pub coll_api: CollApiDescr,
    pub p2p_api: P2pApiDescr,
    pub kernel_launch: KernelLaunchDescr,
    pub coll: CollDescrV5,
    pub p2p: P2pDescrV5,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
    pub kernel_ch: KernelChDescrV4,
    pub net_plugin: NetPluginDescr,
    pub ce_coll: CeCollDescr,
    pub ce_coll_sync: CeSyncDescr,
    pub ce_coll_batch: CeBatchDescr,
}

/// `ncclProfilerEventDescr_v6_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV6 {
    pub type_: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV6,
}

/// `ncclProfilerEventStateArgs_v6_t`: the same members as v5.
pub type StateArgsV6 = StateArgsV5;

/// `ncclProfiler_v6_t`.
#[repr(C)]
pub struct ProfilerV6 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        comm_id: u64,
        e_activation_mask: *mut c_int,
        comm_name: *const c_char,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: LogFn,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV6,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV6,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// ---------------------------------------------------------------------------------------
// v7 (NCCL after 2.30): a user tag per call, the kernel variant, GPU-timed kernel phases.
// The members v7 extends gain fields at their end; the others are v6's.

/// `collApi` member of `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollApiDescrV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    /// C `bool`.
    pub graph_captured: u8,
    /// The call's user profiler tag (0: untagged; NCCL reserves the top bit).
    pub user_tag: u64,
}

/// `p2pApi` member of `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pApiDescrV7 {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    /// C `bool`.
    pub graph_captured: u8,
    pub user_tag: u64,
}

/// `coll` member of `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CollDescrV7 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parent_group: *mut c_void,
    /// The kernel's variant name (NULL or NCCL's static string).
    pub kernel_variant: *const c_char,
    /// C `bool`: a symmetric-memory kernel (the ones whose phases NCCL times).
    pub is_sym_coll: u8,
    pub user_tag: u64,
}

/// `p2p` member of `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct P2pDescrV7 {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    pub parent_group: *mut c_void,
    pub user_tag: u64,
}

/// `ceColl` member of `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CeCollDescrV7 {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    /// C `bool`.
    pub intra_batch_sync: u8,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
    pub user_tag: u64,
}

/// `kernelPhase` member of `ncclProfilerEventDescr_v7_t`: one barrier phase of a kernel
/// on one channel, its start on the GPU's global timer.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelPhaseDescr {
    pub channel_id: u8,
    /// 0: initial sync, 1: compute, 2: final sync.
    pub phase_id: u8,
    pub phase_name: *const c_char,
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union DescrUnionV7 {
    pub group_api: GroupApiDescr,
    pub coll_api: CollApiDescrV7,
    pub p2p_api: P2pApiDescrV7,
    pub kernel_launch: KernelLaunchDescr,
    pub coll: CollDescrV7,
    pub p2p: P2pDescrV7,
    pub proxy_op: ProxyOpDescr,
    pub proxy_step: ProxyStepDescr,
    pub kernel_ch: KernelChDescrV4,
    pub net_plugin: NetPluginDescr,
    pub ce_coll: CeCollDescrV7,
    pub ce_coll_sync: CeSyncDescr,
    pub ce_coll_batch: CeBatchDescr,
    pub kernel_phase: KernelPhaseDescr,
}

/// `ncclProfilerEventDescr_v7_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescrV7 {
    pub type_: u64,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: DescrUnionV7,
}

/// `ncclProfilerEventStateArgs_v7_t`: v6's members; a kernel phase's stop timer uses
/// `kernel_ch`.
pub type StateArgsV7 = StateArgsV6;

/// `ncclProfiler_v7_t`: v6's functions with v7's descriptor.
#[repr(C)]
pub struct ProfilerV7 {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        comm_id: u64,
        e_activation_mask: *mut c_int,
        comm_name: *const c_char,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: LogFn,
    ) -> NcclResult,
    pub start_event: unsafe extern "C" fn(
        context: *mut c_void,
        e_handle: *mut *mut c_void,
        e_descr: *mut EventDescrV7,
    ) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state: unsafe extern "C" fn(
        e_handle: *mut c_void,
        e_state: c_int,
        e_state_args: *mut StateArgsV7,
    ) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// The function tables are immutable data that NCCL reads from any thread; the only raw
// pointer in them is the name, a 'static C string.
unsafe impl Sync for ProfilerV1 {}
unsafe impl Sync for ProfilerV2 {}
unsafe impl Sync for ProfilerV3 {}
unsafe impl Sync for ProfilerV4 {}
unsafe impl Sync for ProfilerV5 {}
unsafe impl Sync for ProfilerV6 {}
unsafe impl Sync for ProfilerV7 {}

// Layouts on LP64 targets (x86_64, aarch64, ppc64le: where NCCL runs), checked by hand
// against the headers and by tests/abi_layout.rs against the headers themselves.
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ProxyOpDescr>() == 24);
    assert!(offset_of!(ProxyOpDescr, channel_id) == 4);
    assert!(offset_of!(ProxyOpDescr, is_send) == 20);
    assert!(size_of::<NetPluginDescr>() == 16);

    assert!(size_of::<CollDescrV1>() == 96);
    assert!(offset_of!(CollDescrV1, func) == 24);
    assert!(offset_of!(CollDescrV1, datatype) == 60);
    assert!(offset_of!(CollDescrV1, op) == 64);
    assert!(offset_of!(CollDescrV1, traffic_bytes) == 72);
    assert!(offset_of!(CollDescrV1, proto) == 83);
    assert!(offset_of!(CollDescrV1, is_nvls) == 88);
    assert!(size_of::<P2pDescrV1>() == 56);
    assert!(offset_of!(EventDescrV1, parent_obj) == 8);
    assert!(offset_of!(EventDescrV1, rank) == 16);
    assert!(offset_of!(EventDescrV1, u) == 24);
    assert!(size_of::<EventDescrV1>() == 120);
    assert!(size_of::<StateArgsV1>() == 16);
    assert!(size_of::<ProfilerV1>() == 48);

    assert!(size_of::<CollDescrV2>() == 104);
    assert!(offset_of!(CollDescrV2, traffic_bytes) == 72);
    assert!(offset_of!(CollDescrV2, algo) == 88);
    assert!(size_of::<P2pDescrV2>() == 56);
    assert!(size_of::<EventDescrV2>() == 128);

    assert!(size_of::<CollDescrV3>() == 96);
    assert!(offset_of!(CollDescrV3, n_max_channels) == 72);
    assert!(offset_of!(CollDescrV3, proto) == 88);
    assert!(size_of::<EventDescrV3>() == 120);

    assert!(size_of::<CollDescrV4>() == 80);
    assert!(offset_of!(CollDescrV4, n_channels) == 56);
    assert!(size_of::<P2pDescrV4>() == 40);
    assert!(offset_of!(P2pDescrV4, n_channels) == 36);
    assert!(offset_of!(KernelChDescrV4, p_timer) == 8);
    assert!(size_of::<EventDescrV4>() == 104);
    assert!(size_of::<StateArgsV4>() == 8);

    assert!(size_of::<CollApiDescr>() == 48);
    assert!(offset_of!(CollApiDescr, graph_captured) == 40);
    assert!(size_of::<CollDescrV5>() == 88);
    assert!(offset_of!(CollDescrV5, parent_group) == 80);
    assert!(size_of::<P2pDescrV5>() == 48);
    assert!(offset_of!(P2pDescrV5, parent_group) == 40);
    assert!(offset_of!(EventDescrV5, u) == 24);
    assert!(size_of::<EventDescrV5>() == 112);
    assert!(size_of::<ProfilerV5>() == 48);

    assert!(size_of::<CeCollDescr>() == 88);
    assert!(offset_of!(CeCollDescr, intra_batch_sync) == 64);
    assert!(offset_of!(CeCollDescr, ce_seq_num) == 76);
    assert!(offset_of!(CeCollDescr, stream) == 80);
    assert!(size_of::<CeBatchDescr>() == 24);
    assert!(size_of::<EventDescrV6>() == 112);

    assert!(size_of::<CollApiDescrV7>() == 56);
    assert!(offset_of!(CollApiDescrV7, user_tag) == 48);
    assert!(size_of::<P2pApiDescrV7>() == 48);
    assert!(offset_of!(P2pApiDescrV7, user_tag) == 40);
    assert!(size_of::<CollDescrV7>() == 112);
    assert!(offset_of!(CollDescrV7, kernel_variant) == 88);
    assert!(offset_of!(CollDescrV7, is_sym_coll) == 96);
    assert!(offset_of!(CollDescrV7, user_tag) == 104);
    assert!(size_of::<P2pDescrV7>() == 56);
    assert!(offset_of!(P2pDescrV7, user_tag) == 48);
    assert!(size_of::<CeCollDescrV7>() == 96);
    assert!(offset_of!(CeCollDescrV7, user_tag) == 88);
    assert!(size_of::<KernelPhaseDescr>() == 24);
    assert!(offset_of!(KernelPhaseDescr, phase_id) == 1);
    assert!(offset_of!(KernelPhaseDescr, p_timer) == 16);
    assert!(offset_of!(EventDescrV7, u) == 24);
    assert!(size_of::<EventDescrV7>() == 136);
    assert!(size_of::<ProfilerV7>() == 48);
};
