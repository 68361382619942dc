//! The built plugin, driven the way NCCL drives it, one child process per run (the tracer
//! is process-wide): the child re-executes this test binary, `dlopen`s
//! `libnccl-profiler-flare.so` as NCCL does (`RTLD_NOW | RTLD_LOCAL`), looks up
//! `ncclProfiler_v<N>`, and calls init / startEvent / recordEventState / stopEvent /
//! finalize in NCCL's order for that version (host side: API events, Group, Coll and P2p
//! started then stopped at enqueue; proxy side later: ProxyCtrl, KernelCh, ProxyOp,
//! ProxyStep, NetPlugin naming the already stopped Coll as parent). The parent process then
//! reads the dump (`FLARE_DUMP`) with `flare_tracer`'s reader and checks every event.

use flare_model::OpKind;
use flare_tracer::{Assembler, Event, Item, NameId, RingFile, Span, Tag};
use nccl_profiler_flare::abi::*;
use nccl_profiler_flare::{mask, FLAG_DETAIL, FLAG_NCCL, ID_TAG, TYPE_COMM, TYPE_DROPS, TYPE_MASK};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/plugin_lib.rs"]
mod plugin_lib;
use plugin_lib::{built, dlopen, dlsym, plugin_path};

const CHILD: &str = "FLARE_NCCL_TEST_CHILD";
const HASH: u64 = 0x1234_5678_9abc_def0;
const COMM_NAME: &CStr = c"trainer-tp";
const NRANKS: c_int = 8;
const COMM_RANK: c_int = 3;
const NNODES: c_int = 2;
const NCOLL: u64 = 5;
const COUNT: usize = 1 << 20;
const N_STEPS: i32 = 4;
const CHUNK: i32 = 4096;
const GPU_T0: u64 = 1_000_000_000;
/// The user tag v7 callers give every call in the test.
const USER_TAG: u64 = 0x7A6;
/// Kernel phases per channel (v7): initial sync, compute, final sync, each 100 ns.
const PHASES: u8 = 3;

// ---------------------------------------------------------------------------------------
// The child: an NCCL stand-in.

/// An event as the test describes it; each version's driver encodes it the way NCCL (or
/// NCCL's adapter for that version) fills the descriptor.
#[derive(Clone, Copy, Debug)]
enum Ev {
    Group,
    GroupApi,
    CollApi,
    P2pApi { send: bool },
    KernelLaunch,
    Coll { seq: u64 },
    P2p { send: bool },
    ProxyOp { send: bool, pid: i32 },
    ProxyStep { step: i32 },
    ProxyCtrl,
    KernelCh { timer: u64 },
    NetPlugin,
    CeColl { seq: u64 },
    CeSync,
    CeBatch,
    KernelPhase { phase: u8, timer: u64 },
}

impl Ev {
    fn bit(self) -> u64 {
        match self {
            Ev::Group => event::GROUP,
            Ev::GroupApi => event::GROUP_API,
            Ev::CollApi => event::COLL_API,
            Ev::P2pApi { .. } => event::P2P_API,
            Ev::KernelLaunch => event::KERNEL_LAUNCH,
            Ev::Coll { .. } => event::COLL,
            Ev::P2p { .. } => event::P2P,
            Ev::ProxyOp { .. } => event::PROXY_OP,
            Ev::ProxyStep { .. } => event::PROXY_STEP,
            Ev::ProxyCtrl => event::PROXY_CTRL,
            Ev::KernelCh { .. } => event::KERNEL_CH,
            Ev::NetPlugin => event::NET_PLUGIN,
            Ev::CeColl { .. } => event::CE_COLL,
            Ev::CeSync => event::CE_SYNC,
            Ev::CeBatch => event::CE_BATCH,
            Ev::KernelPhase { .. } => event::KERNEL_PHASE,
        }
    }
}

fn func(send: bool) -> &'static CStr {
    if send {
        c"Send"
    } else {
        c"Recv"
    }
}

fn proxy_op(send: bool, pid: i32) -> ProxyOpDescr {
    ProxyOpDescr {
        pid,
        channel_id: 2,
        peer: 1,
        n_steps: N_STEPS,
        chunk_size: CHUNK,
        is_send: send as c_int,
    }
}

/// State arguments as NCCL fills them.
#[derive(Clone, Copy, Default)]
struct Args {
    trans_size: usize,
    steps: i32,
    appended: i32,
    timer: u64,
}

/// `Sync`: NCCL calls one table from several threads (see the `threads` scenario).
trait Driver: Sync {
    fn version(&self) -> u8;
    /// # Safety
    /// NCCL's calling contract.
    unsafe fn init(&self, ctx: *mut *mut c_void, mask: *mut c_int, logfn: LogFn) -> NcclResult;
    /// Fills this version's descriptor and calls startEvent; NULL for types the version
    /// does not carry (NCCL's adapters drop them).
    unsafe fn start_raw(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        group: *mut c_void,
    ) -> (NcclResult, *mut c_void);
    unsafe fn record(&self, h: *mut c_void, state: c_int, args: Option<Args>) -> NcclResult;
    unsafe fn stop(&self, h: *mut c_void) -> NcclResult;
    unsafe fn finalize(&self, ctx: *mut c_void) -> NcclResult;

    fn start(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        group: *mut c_void,
    ) -> *mut c_void {
        if ev.bit() & mask::supported(self.version()) == 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: a context from init and handles from earlier starts.
        let (r, h) = unsafe { self.start_raw(ctx, ev, parent, group) };
        assert_eq!(r, NCCL_SUCCESS);
        h
    }
    fn state(&self, h: *mut c_void, state: c_int, args: Option<Args>) {
        // SAFETY: a handle from start (or NULL).
        assert_eq!(unsafe { self.record(h, state, args) }, NCCL_SUCCESS);
    }
    fn end(&self, h: *mut c_void) {
        // SAFETY: a handle from start (or NULL).
        assert_eq!(unsafe { self.stop(h) }, NCCL_SUCCESS);
    }
}

/// A zeroed descriptor, as NCCL's `= {0}` / `= {}` initializers give.
fn zeroed<T>() -> T {
    // SAFETY: only used for descriptor structs and unions of integers and raw pointers,
    // for which all-zero is valid.
    unsafe { std::mem::MaybeUninit::<T>::zeroed().assume_init() }
}

fn args_v1(a: Option<Args>, state: c_int) -> Option<StateArgsV1> {
    let a = a?;
    let mut s: StateArgsV1 = zeroed();
    if (state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END).contains(&state) {
        s.proxy_ctrl = ProxyCtrlStateArgs {
            appended_proxy_ops: a.appended,
        };
    } else {
        s.proxy_op = ProxyOpStateArgsV1 {
            trans_size: a.trans_size,
            steps: a.steps,
        };
    }
    Some(s)
}

fn args_v4(a: Option<Args>, state: c_int) -> Option<StateArgsV4> {
    let a = a?;
    let mut s: StateArgsV4 = zeroed();
    match state {
        state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END => {
            s.proxy_ctrl = ProxyCtrlStateArgs {
                appended_proxy_ops: a.appended,
            }
        }
        state::KERNEL_CH_STOP | state::KERNEL_PHASE_STOP => {
            s.kernel_ch = KernelChStateArgs { p_timer: a.timer }
        }
        _ => {
            s.proxy_step = ProxyStepStateArgs {
                trans_size: a.trans_size,
            }
        }
    }
    Some(s)
}

fn opt_ptr<T>(v: &mut Option<T>) -> *mut T {
    v.as_mut().map_or(std::ptr::null_mut(), |v| v as *mut T)
}

macro_rules! driver_common {
    ($ver:expr, $args:ident) => {
        fn version(&self) -> u8 {
            $ver
        }
        unsafe fn record(&self, h: *mut c_void, state: c_int, args: Option<Args>) -> NcclResult {
            let mut a = $args(args, state);
            unsafe { (self.0.record_event_state)(h, state, opt_ptr(&mut a)) }
        }
        unsafe fn stop(&self, h: *mut c_void) -> NcclResult {
            unsafe { (self.0.stop_event)(h) }
        }
        unsafe fn finalize(&self, ctx: *mut c_void) -> NcclResult {
            unsafe { (self.0.finalize)(ctx) }
        }
    };
}

struct V1(&'static ProfilerV1);
struct V2(&'static ProfilerV2);
struct V3(&'static ProfilerV3);
struct V4(&'static ProfilerV4);
struct V5(&'static ProfilerV5);
struct V6(&'static ProfilerV6);
struct V7(&'static ProfilerV7);

impl Driver for V1 {
    driver_common!(1, args_v1);
    unsafe fn init(&self, ctx: *mut *mut c_void, mask: *mut c_int, _: LogFn) -> NcclResult {
        unsafe { (self.0.init)(ctx, mask) }
    }
    unsafe fn start_raw(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        _: *mut c_void,
    ) -> (NcclResult, *mut c_void) {
        let mut d: EventDescrV1 = zeroed();
        d.type_ = ev.bit() as u8;
        d.parent_obj = parent;
        d.rank = COMM_RANK;
        match ev {
            Ev::Coll { seq } => {
                d.u.coll = CollDescrV1 {
                    name: COMM_NAME.as_ptr(),
                    comm_hash: HASH,
                    seq_number: seq,
                    func: 4, // ncclFuncAllReduce
                    send_buff: std::ptr::null(),
                    recv_buff: std::ptr::null_mut(),
                    count: COUNT,
                    root: 0,
                    datatype: 7, // ncclFloat32
                    op: 0,
                    traffic_bytes: 0,
                    n_max_channels: 4,
                    n_warps: 8,
                    algo: 1,  // NCCL_ALGO_RING
                    proto: 2, // NCCL_PROTO_SIMPLE
                    is_collnet: 0,
                    is_nvls: 0,
                }
            }
            Ev::P2p { send } => {
                d.u.p2p = P2pDescrV1 {
                    name: COMM_NAME.as_ptr(),
                    comm_hash: HASH,
                    func: if send { 6 } else { 7 },
                    buff: std::ptr::null_mut(),
                    datatype: 7,
                    count: COUNT,
                    peer: 1,
                }
            }
            Ev::ProxyOp { send, pid } => d.u.proxy_op = proxy_op(send, pid),
            Ev::ProxyStep { step } => d.u.proxy_step = ProxyStepDescr { step },
            _ => {}
        }
        let mut h = std::ptr::dangling_mut::<c_void>();
        let r = unsafe { (self.0.start_event)(ctx, &mut h, &mut d) };
        (r, h)
    }
}

fn coll_v2(seq: u64, with_traffic: bool) -> CollDescrV2 {
    CollDescrV2 {
        name: COMM_NAME.as_ptr(),
        comm_hash: HASH,
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: COUNT,
        root: 0,
        datatype: c"ncclFloat32".as_ptr(),
        traffic_bytes: if with_traffic { COUNT * 8 } else { 0 },
        n_max_channels: 4,
        n_warps: 8,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
    }
}

fn p2p_v2(send: bool) -> P2pDescrV2 {
    P2pDescrV2 {
        name: COMM_NAME.as_ptr(),
        comm_hash: HASH,
        func: func(send).as_ptr(),
        buff: std::ptr::null_mut(),
        datatype: c"ncclFloat32".as_ptr(),
        count: COUNT,
        peer: 1,
    }
}

impl Driver for V2 {
    driver_common!(2, args_v1);
    unsafe fn init(&self, ctx: *mut *mut c_void, mask: *mut c_int, _: LogFn) -> NcclResult {
        unsafe { (self.0.init)(ctx, mask) }
    }
    unsafe fn start_raw(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        _: *mut c_void,
    ) -> (NcclResult, *mut c_void) {
        let mut d: EventDescrV2 = zeroed();
        d.type_ = ev.bit() as u8;
        d.parent_obj = parent;
        d.rank = COMM_RANK;
        match ev {
            Ev::Coll { seq } => d.u.coll = coll_v2(seq, true),
            Ev::P2p { send } => d.u.p2p = p2p_v2(send),
            Ev::ProxyOp { send, pid } => d.u.proxy_op = proxy_op(send, pid),
            Ev::ProxyStep { step } => d.u.proxy_step = ProxyStepDescr { step },
            _ => {}
        }
        let mut h = std::ptr::dangling_mut::<c_void>();
        let r = unsafe { (self.0.start_event)(ctx, &mut h, &mut d) };
        (r, h)
    }
}

impl Driver for V3 {
    driver_common!(3, args_v1);
    unsafe fn init(&self, ctx: *mut *mut c_void, mask: *mut c_int, _: LogFn) -> NcclResult {
        unsafe { (self.0.init)(ctx, mask) }
    }
    unsafe fn start_raw(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        _: *mut c_void,
    ) -> (NcclResult, *mut c_void) {
        let mut d: EventDescrV3 = zeroed();
        d.type_ = ev.bit() as u8;
        d.parent_obj = parent;
        d.rank = COMM_RANK;
        match ev {
            Ev::Coll { seq } => {
                let c = coll_v2(seq, false);
                d.u.coll = CollDescrV3 {
                    name: c.name,
                    comm_hash: c.comm_hash,
                    seq_number: c.seq_number,
                    func: c.func,
                    send_buff: c.send_buff,
                    recv_buff: c.recv_buff,
                    count: c.count,
                    root: c.root,
                    datatype: c.datatype,
                    n_max_channels: c.n_max_channels,
                    n_warps: c.n_warps,
                    algo: c.algo,
                    proto: c.proto,
                }
            }
            Ev::P2p { send } => d.u.p2p = p2p_v2(send),
            Ev::ProxyOp { send, pid } => d.u.proxy_op = proxy_op(send, pid),
            Ev::ProxyStep { step } => d.u.proxy_step = ProxyStepDescr { step },
            Ev::KernelCh { .. } => d.u.kernel_ch = KernelChDescrV3 { channel_id: 2 },
            Ev::NetPlugin => {
                d.u.net_plugin = NetPluginDescr {
                    id: 0x10001,
                    data: std::ptr::null_mut(),
                }
            }
            _ => {}
        }
        let mut h = std::ptr::dangling_mut::<c_void>();
        let r = unsafe { (self.0.start_event)(ctx, &mut h, &mut d) };
        (r, h)
    }
}

fn coll_v4(seq: u64) -> CollDescrV4 {
    CollDescrV4 {
        seq_number: seq,
        func: c"AllReduce".as_ptr(),
        send_buff: std::ptr::null(),
        recv_buff: std::ptr::null_mut(),
        count: COUNT,
        root: 0,
        datatype: c"ncclFloat32".as_ptr(),
        n_channels: 4,
        n_warps: 8,
        algo: c"RING".as_ptr(),
        proto: c"SIMPLE".as_ptr(),
    }
}

fn p2p_v4(send: bool) -> P2pDescrV4 {
    P2pDescrV4 {
        func: func(send).as_ptr(),
        buff: std::ptr::null_mut(),
        datatype: c"ncclFloat32".as_ptr(),
        count: COUNT,
        peer: 1,
        n_channels: 1,
    }
}

impl Driver for V4 {
    driver_common!(4, args_v4);
    unsafe fn init(&self, ctx: *mut *mut c_void, mask: *mut c_int, logfn: LogFn) -> NcclResult {
        unsafe {
            (self.0.init)(
                ctx,
                mask,
                COMM_NAME.as_ptr(),
                HASH,
                NNODES,
                NRANKS,
                COMM_RANK,
                logfn,
            )
        }
    }
    unsafe fn start_raw(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        _: *mut c_void,
    ) -> (NcclResult, *mut c_void) {
        let mut d: EventDescrV4 = zeroed();
        d.type_ = ev.bit() as u8;
        d.parent_obj = parent;
        d.rank = COMM_RANK;
        match ev {
            Ev::Coll { seq } => d.u.coll = coll_v4(seq),
            Ev::P2p { send } => d.u.p2p = p2p_v4(send),
            Ev::ProxyOp { send, pid } => d.u.proxy_op = proxy_op(send, pid),
            Ev::ProxyStep { step } => d.u.proxy_step = ProxyStepDescr { step },
            Ev::KernelCh { timer } => {
                d.u.kernel_ch = KernelChDescrV4 {
                    channel_id: 2,
                    p_timer: timer,
                }
            }
            Ev::NetPlugin => {
                d.u.net_plugin = NetPluginDescr {
                    id: 0x10001,
                    data: std::ptr::null_mut(),
                }
            }
            _ => {}
        }
        let mut h = std::ptr::dangling_mut::<c_void>();
        let r = unsafe { (self.0.start_event)(ctx, &mut h, &mut d) };
        (r, h)
    }
}

/// Fills the union members v5 and v6 share.
macro_rules! fill_v5_like {
    ($d:ident, $ev:expr, $group:expr) => {
        match $ev {
            Ev::GroupApi => {
                $d.u.group_api = GroupApiDescr {
                    graph_captured: 0,
                    group_depth: 1,
                }
            }
            Ev::CollApi => {
                $d.u.coll_api = CollApiDescr {
                    func: c"AllReduce".as_ptr(),
                    count: COUNT,
                    datatype: c"ncclFloat32".as_ptr(),
                    root: 0,
                    stream: std::ptr::null_mut(),
                    graph_captured: 0,
                }
            }
            Ev::P2pApi { send } => {
                $d.u.p2p_api = P2pApiDescr {
                    func: func(send).as_ptr(),
                    count: COUNT,
                    datatype: c"ncclFloat32".as_ptr(),
                    stream: std::ptr::null_mut(),
                    graph_captured: 1,
                }
            }
            Ev::Coll { seq } => {
                let c = coll_v4(seq);
                $d.u.coll = CollDescrV5 {
                    seq_number: c.seq_number,
                    func: c.func,
                    send_buff: c.send_buff,
                    recv_buff: c.recv_buff,
                    count: c.count,
                    root: c.root,
                    datatype: c.datatype,
                    n_channels: c.n_channels,
                    n_warps: c.n_warps,
                    algo: c.algo,
                    proto: c.proto,
                    parent_group: $group,
                }
            }
            Ev::P2p { send } => {
                let p = p2p_v4(send);
                $d.u.p2p = P2pDescrV5 {
                    func: p.func,
                    buff: p.buff,
                    datatype: p.datatype,
                    count: p.count,
                    peer: p.peer,
                    n_channels: p.n_channels,
                    parent_group: $group,
                }
            }
            Ev::ProxyOp { send, pid } => $d.u.proxy_op = proxy_op(send, pid),
            Ev::ProxyStep { step } => $d.u.proxy_step = ProxyStepDescr { step },
            Ev::KernelCh { timer } => {
                $d.u.kernel_ch = KernelChDescrV4 {
                    channel_id: 2,
                    p_timer: timer,
                }
            }
            Ev::NetPlugin => {
                $d.u.net_plugin = NetPluginDescr {
                    id: 0x10001,
                    data: std::ptr::null_mut(),
                }
            }
            _ => {}
        }
    };
}

impl Driver for V5 {
    driver_common!(5, args_v4);
    unsafe fn init(&self, ctx: *mut *mut c_void, mask: *mut c_int, logfn: LogFn) -> NcclResult {
        unsafe {
            (self.0.init)(
                ctx,
                HASH,
                mask,
                COMM_NAME.as_ptr(),
                NNODES,
                NRANKS,
                COMM_RANK,
                logfn,
            )
        }
    }
    unsafe fn start_raw(
        &self,
        ctx: *mut c_void,
        ev: Ev,
        parent: *mut c_void,
        group: *mut c_void,
    ) -> (NcclResult, *mut c_void) {
        let mut d: EventDescrV5 = zeroed();
        d.type_ = ev.bit();
        d.parent_obj = parent;
        d.rank = COMM_RANK;
        fill_v5_like!(d, ev, group);
        let mut h = std::ptr::dangling_mut::<c_void>();
        let r = unsafe { (self.0.start_event)(ctx, &mut h, &mut d) };
        (r, h)
    }
}

/// The v6 descriptor NCCL would fill for `ev`.
fn descr_v6(ev: Ev, parent: *mut c_void, group: *mut c_void) -> EventDescrV6 {
    let mut d: EventDescrV6 = zeroed();
    d.type_ = ev.bit();
    d.parent_obj = parent;
    d.rank = COMM_RANK;
    match ev {
        Ev::CeColl { seq } => {
            d.u.ce_coll = CeCollDescr {
                seq_number: seq,
                func: c"AllGather".as_ptr(),
                send_buff: std::ptr::null(),
                recv_buff: std::ptr::null_mut(),
                count: COUNT,
                root: 0,
                datatype: c"ncclBfloat16".as_ptr(),
                sync_strategy: c"mc".as_ptr(),
                intra_batch_sync: 1,
                batch_size: 4,
                num_batches: 2,
                ce_seq_num: 9,
                stream: std::ptr::null_mut(),
            }
        }
        Ev::CeSync => {
            d.u.ce_coll_sync = CeSyncDescr {
                is_complete: 1,
                n_ranks: NRANKS,
            }
        }
        Ev::CeBatch => {
            d.u.ce_coll_batch = CeBatchDescr {
                num_ops: 3,
                total_bytes: 3 * COUNT * 2,
                use_intra_sync: 0,
            }
        }
        _ => fill_v5_like!(d, ev, group),
    }
    d
}

/// The v7 descriptor: v6's, with the user tag on every operation, the operations' new
/// members, and kernel phases. The members v7 leaves as in v6 are copied byte for byte
/// (same types at the same offsets).
fn descr_v7(ev: Ev, parent: *mut c_void, group: *mut c_void) -> EventDescrV7 {
    let v6 = descr_v6(ev, parent, group);
    let mut d: EventDescrV7 = zeroed();
    d.type_ = v6.type_;
    d.parent_obj = v6.parent_obj;
    d.rank = v6.rank;
    // SAFETY: both unions are plain data; v6's is the smaller.
    unsafe {
        std::ptr::copy_nonoverlapping(
            &v6.u as *const DescrUnionV6 as *const u8,
            &mut d.u as *mut DescrUnionV7 as *mut u8,
            size_of::<DescrUnionV6>(),
        )
    };
    // SAFETY (union reads): the member `ev` filled.
    unsafe {
        match ev {
            Ev::CollApi => {
                let c = v6.u.coll_api;
                d.u.coll_api = CollApiDescrV7 {
                    func: c.func,
                    count: c.count,
                    datatype: c.datatype,
                    root: c.root,
                    stream: c.stream,
                    graph_captured: c.graph_captured,
                    user_tag: USER_TAG,
                }
            }
            Ev::P2pApi { .. } => {
                let p = v6.u.p2p_api;
                d.u.p2p_api = P2pApiDescrV7 {
                    func: p.func,
                    count: p.count,
                    datatype: p.datatype,
                    stream: p.stream,
                    graph_captured: p.graph_captured,
                    user_tag: USER_TAG,
                }
            }
            Ev::Coll { .. } => {
                let c = v6.u.coll;
                d.u.coll = CollDescrV7 {
                    seq_number: c.seq_number,
                    func: c.func,
                    send_buff: c.send_buff,
                    recv_buff: c.recv_buff,
                    count: c.count,
                    root: c.root,
                    datatype: c.datatype,
                    n_channels: c.n_channels,
                    n_warps: c.n_warps,
                    algo: c.algo,
                    proto: c.proto,
                    parent_group: c.parent_group,
                    kernel_variant: c"AllReduce_Sum_f32_RING_SIMPLE".as_ptr(),
                    is_sym_coll: 1,
                    user_tag: USER_TAG,
                }
            }
            Ev::P2p { .. } => {
                let p = v6.u.p2p;
                d.u.p2p = P2pDescrV7 {
                    func: p.func,
                    buff: p.buff,
                    datatype: p.datatype,
                    count: p.count,
                    peer: p.peer,
                    n_channels: p.n_channels,
                    parent_group: p.parent_group,
                    user_tag: USER_TAG,
                }
            }
            Ev::CeColl { .. } => {
                let c = v6.u.ce_coll;
                d.u.ce_coll = CeCollDescrV7 {
                    seq_number: c.seq_number,
                    func: c.func,
                    send_buff: c.send_buff,
                    recv_buff: c.recv_buff,
                    count: c.count,
                    root: c.root,
                    datatype: c.datatype,
                    sync_strategy: c.sync_strategy,
                    intra_batch_sync: c.intra_batch_sync,
                    batch_size: c.batch_size,
                    num_batches: c.num_batches,
                    ce_seq_num: c.ce_seq_num,
                    stream: c.stream,
                    user_tag: USER_TAG,
                }
            }
            Ev::KernelPhase { phase, timer } => {
                d.u.kernel_phase = KernelPhaseDescr {
                    channel_id: 2,
                    phase_id: phase,
                    phase_name: [c"initial_sync", c"compute", c"final_sync"][phase as usize]
                        .as_ptr(),
                    p_timer: timer,
                }
            }
            _ => {}
        }
    }
    d
}

macro_rules! driver_v5_on {
    ($ty:ident, $ver:expr, $descr:ident) => {
        impl Driver for $ty {
            driver_common!($ver, args_v4);
            unsafe fn init(
                &self,
                ctx: *mut *mut c_void,
                mask: *mut c_int,
                logfn: LogFn,
            ) -> NcclResult {
                unsafe {
                    (self.0.init)(
                        ctx,
                        HASH,
                        mask,
                        COMM_NAME.as_ptr(),
                        NNODES,
                        NRANKS,
                        COMM_RANK,
                        logfn,
                    )
                }
            }
            unsafe fn start_raw(
                &self,
                ctx: *mut c_void,
                ev: Ev,
                parent: *mut c_void,
                group: *mut c_void,
            ) -> (NcclResult, *mut c_void) {
                let mut d = $descr(ev, parent, group);
                let mut h = std::ptr::dangling_mut::<c_void>();
                let r = unsafe { (self.0.start_event)(ctx, &mut h, &mut d) };
                (r, h)
            }
        }
    };
}

driver_v5_on!(V6, 6, descr_v6);
driver_v5_on!(V7, 7, descr_v7);

fn driver(lib: *mut c_void, version: u8) -> Box<dyn Driver> {
    let sym = dlsym(lib, &format!("ncclProfiler_v{version}"));
    // SAFETY: each symbol is the table of its version, 'static in the loaded library.
    unsafe {
        match version {
            1 => Box::new(V1(&*(sym as *const ProfilerV1))),
            2 => Box::new(V2(&*(sym as *const ProfilerV2))),
            3 => Box::new(V3(&*(sym as *const ProfilerV3))),
            4 => Box::new(V4(&*(sym as *const ProfilerV4))),
            5 => Box::new(V5(&*(sym as *const ProfilerV5))),
            6 => Box::new(V6(&*(sym as *const ProfilerV6))),
            _ => Box::new(V7(&*(sym as *const ProfilerV7))),
        }
    }
}

fn logger() -> LogFn {
    let so = std::env::var("FLARE_TEST_LOGGER_SO").ok()?;
    let h = dlopen(Path::new(&so), libc::RTLD_NOW | libc::RTLD_LOCAL);
    // SAFETY: flare_test_logger has ncclDebugLogger_t's signature (tests/c/logger.c).
    Some(unsafe {
        std::mem::transmute::<
            *mut c_void,
            unsafe extern "C" fn(
                c_int,
                std::ffi::c_ulong,
                *const c_char,
                c_int,
                *const c_char,
                ...
            ),
        >(dlsym(h, "flare_test_logger"))
    })
}

fn report(key: &str, value: impl std::fmt::Display) {
    println!("FLARE-CHILD {key} {value}");
}

fn load_plugin(version: u8) -> Box<dyn Driver> {
    let lib = dlopen(&plugin_path(), libc::RTLD_NOW | libc::RTLD_LOCAL);
    driver(lib, version)
}

fn init(d: &dyn Driver) -> *mut c_void {
    let mut ctx = std::ptr::dangling_mut::<c_void>();
    let mut m: c_int = 0;
    // SAFETY: valid out pointers.
    let r = unsafe { d.init(&mut ctx, &mut m, logger()) };
    assert_eq!(r, NCCL_SUCCESS, "init failed");
    assert!(!ctx.is_null());
    report("mask", m);
    ctx
}

/// One communicator's worth of NCCL activity, in NCCL's order.
fn drive_full(d: &dyn Driver, ctx: *mut c_void) {
    let v = d.version();
    let null = std::ptr::null_mut();
    let pid = std::process::id() as i32;
    let api = v >= 5;
    let none = || Some(Args::default());

    // Host: ncclGroupStart; N x ncclAllReduce, a send and a receive; ncclGroupEnd.
    let group_api = if api {
        d.start(ctx, Ev::GroupApi, null, null)
    } else {
        null
    };
    if api {
        // NCCL passes no arguments for the group API states.
        d.state(group_api, state::GROUP_START_API_STOP, None);
    }
    let mut coll_api = Vec::new();
    for _ in 0..NCOLL {
        let h = if api {
            d.start(ctx, Ev::CollApi, group_api, null)
        } else {
            null
        };
        d.end(h);
        coll_api.push(h);
    }
    let send_api = if api {
        d.start(ctx, Ev::P2pApi { send: true }, group_api, null)
    } else {
        null
    };
    d.end(send_api);
    let recv_api = if api {
        d.start(ctx, Ev::P2pApi { send: false }, group_api, null)
    } else {
        null
    };
    d.end(recv_api);
    if api {
        d.state(group_api, state::GROUP_END_API_START, None);
    }
    // Kernel plan launch: Group, then the task events, all stopped at enqueue.
    let launch = if api {
        d.start(ctx, Ev::KernelLaunch, group_api, null)
    } else {
        null
    };
    let group = d.start(ctx, Ev::Group, null, null);
    let parent_of = |api_h: *mut c_void| if api { api_h } else { group };
    let colls: Vec<_> = (0..NCOLL)
        .map(|seq| {
            d.start(
                ctx,
                Ev::Coll { seq },
                parent_of(coll_api[seq as usize]),
                group,
            )
        })
        .collect();
    let send = d.start(ctx, Ev::P2p { send: true }, parent_of(send_api), group);
    let recv = d.start(ctx, Ev::P2p { send: false }, parent_of(recv_api), group);
    for &h in colls.iter().chain([&send, &recv]) {
        assert!(!h.is_null() || d.version() == 0, "task handle");
        d.end(h);
    }
    d.end(group);
    d.end(launch);

    // Proxy thread, later: control loop, then each op's channel, proxy op and steps.
    let ctrl = d.start(ctx, Ev::ProxyCtrl, null, null);
    for (st, appended) in [
        (state::PROXY_CTRL_IDLE, 0),
        (state::PROXY_CTRL_WAKEUP, 0),
        (state::PROXY_CTRL_APPEND, 3),
        (state::PROXY_CTRL_APPEND_END, 3),
        (state::PROXY_CTRL_ACTIVE, 0),
        (state::PROXY_CTRL_SLEEP, 0),
    ] {
        d.state(
            ctrl,
            st,
            Some(Args {
                appended,
                ..Args::default()
            }),
        );
    }
    let transfers = colls
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, true, i as u64))
        .chain([(send, true, 100), (recv, false, 101)]);
    for (task, is_send, k) in transfers {
        let timer = GPU_T0 + k * 1000;
        let kch = d.start(ctx, Ev::KernelCh { timer }, task, null);
        let op = d.start(ctx, Ev::ProxyOp { send: is_send, pid }, task, null);
        if v <= 3 {
            let posted = if is_send {
                state::PROXY_OP_SEND_POSTED
            } else {
                state::PROXY_OP_RECV_POSTED
            };
            d.state(
                op,
                posted,
                Some(Args {
                    steps: N_STEPS,
                    ..Args::default()
                }),
            );
        } else {
            d.state(op, state::PROXY_OP_IN_PROGRESS_V4, none());
        }
        for step in 0..N_STEPS {
            let s = d.start(ctx, Ev::ProxyStep { step }, op, null);
            let states: &[c_int] = match (is_send, v <= 3) {
                (true, true) => &[state::PROXY_STEP_SEND_GPU_WAIT, state::PROXY_STEP_SEND_WAIT],
                (true, false) => &[
                    state::PROXY_STEP_SEND_GPU_WAIT,
                    state::PROXY_STEP_SEND_PEER_WAIT_V4,
                    state::PROXY_STEP_SEND_WAIT,
                ],
                (false, _) => &[
                    state::PROXY_STEP_RECV_WAIT,
                    state::PROXY_STEP_RECV_FLUSH_WAIT,
                    state::PROXY_STEP_RECV_GPU_WAIT,
                ],
            };
            for &st in states {
                let trans_size = if v <= 3 {
                    0
                } else {
                    CHUNK as usize * (step as usize + 1)
                };
                d.state(
                    s,
                    st,
                    Some(Args {
                        trans_size,
                        ..Args::default()
                    }),
                );
            }
            if step == 0 {
                let net = d.start(ctx, Ev::NetPlugin, s, null);
                d.state(net, state::NET_PLUGIN_UPDATE, none());
                d.end(net);
            }
            d.end(s);
        }
        if v <= 3 {
            let (tx, done) = if is_send {
                (state::PROXY_OP_SEND_TRANSMITTED, state::PROXY_OP_SEND_DONE)
            } else {
                (state::PROXY_OP_RECV_RECEIVED, state::PROXY_OP_RECV_DONE)
            };
            let total = (N_STEPS * CHUNK) as usize;
            d.state(
                op,
                tx,
                Some(Args {
                    trans_size: total,
                    steps: N_STEPS,
                    ..Args::default()
                }),
            );
            d.state(
                op,
                done,
                Some(Args {
                    trans_size: total,
                    steps: N_STEPS,
                    ..Args::default()
                }),
            );
        }
        d.end(op);
        // v7: the kernel's phases on this channel, read from the GPU after it ran.
        for phase in 0..PHASES {
            let start = timer + 100 * phase as u64;
            let h = d.start(
                ctx,
                Ev::KernelPhase {
                    phase,
                    timer: start,
                },
                kch,
                null,
            );
            d.state(
                h,
                state::KERNEL_PHASE_STOP,
                Some(Args {
                    timer: start + 100,
                    ..Args::default()
                }),
            );
            d.end(h);
        }
        if v >= 4 {
            d.state(
                kch,
                state::KERNEL_CH_STOP,
                Some(Args {
                    timer: timer + 500,
                    ..Args::default()
                }),
            );
        }
        d.end(kch);
    }
    // A PXN proxy op: created by another process, its parent pointer is not ours to read.
    let pxn = d.start(
        ctx,
        Ev::ProxyOp {
            send: true,
            pid: pid + 1,
        },
        colls[0],
        null,
    );
    d.end(pxn);
    d.end(ctrl);

    if v >= 6 {
        let ce = d.start(ctx, Ev::CeColl { seq: 0 }, group_api, null);
        let sync = d.start(ctx, Ev::CeSync, ce, null);
        d.end(sync);
        let batch = d.start(ctx, Ev::CeBatch, ce, null);
        d.end(batch);
        d.end(ce);
    }
    d.end(group_api);

    // NULL handles, double stops and stops without args are harmless.
    d.end(null);
    d.state(null, state::PROXY_STEP_SEND_WAIT, Some(Args::default()));
    d.state(null, state::KERNEL_CH_STOP, None);
    d.end(colls[0]);
    // SAFETY: a NULL context or descriptor must be ignored.
    unsafe {
        let (r, h) = d.start_raw(null, Ev::Group, null, null);
        assert_eq!((r, h), (NCCL_SUCCESS, null));
        assert_eq!(d.finalize(null), NCCL_SUCCESS);
    }
}

fn child_full(version: u8) {
    let d = load_plugin(version);
    let ctx = init(&*d);
    drive_full(&*d, ctx);
    // SAFETY: the context from init, finalized once.
    assert_eq!(unsafe { d.finalize(ctx) }, NCCL_SUCCESS);
    // The process exits next: the plugin's exit handler writes FLARE_DUMP.
}

/// More proxy steps in flight than the pool holds: the excess get NULL handles and are
/// counted.
fn child_exhaust(version: u8) {
    let d = load_plugin(version);
    let ctx = init(&*d);
    let null = std::ptr::null_mut();
    let handles: Vec<_> = (0..20)
        .map(|step| d.start(ctx, Ev::ProxyStep { step }, null, null))
        .collect();
    let nulls = handles.iter().filter(|h| h.is_null()).count();
    report("nulls", nulls);
    for h in handles {
        d.state(h, state::PROXY_STEP_SEND_WAIT, Some(Args::default()));
        d.end(h);
    }
    // Slots came back: new events get handles again.
    let again = d.start(ctx, Ev::ProxyStep { step: 99 }, null, null);
    assert!(!again.is_null());
    d.end(again);
    assert_eq!(unsafe { d.finalize(ctx) }, NCCL_SUCCESS);
}

/// init fails with a code, and nothing else does; the failure is not sticky.
fn child_bad_env(version: u8) {
    let d = load_plugin(version);
    let try_init = |d: &dyn Driver| {
        let mut ctx = std::ptr::dangling_mut::<c_void>();
        let mut m: c_int = -7;
        // SAFETY: valid out pointers.
        let r = unsafe { d.init(&mut ctx, &mut m, logger()) };
        (r, ctx, m)
    };
    let (r, ctx, m) = try_init(&*d);
    report("bad_mask", r);
    assert!(ctx.is_null(), "no context on failure");
    assert_eq!(m, -7, "mask untouched on failure");
    std::env::remove_var("NCCL_PROFILE_EVENT_MASK");
    std::env::set_var("FLARE_NCCL_PROXY_EVENTS", "3");
    report("bad_pool", try_init(&*d).0);
    std::env::remove_var("FLARE_NCCL_PROXY_EVENTS");
    std::env::set_var("RANK", "17");
    report("bad_rank", try_init(&*d).0);
    std::env::set_var("RANK", "5");
    // NULL out pointer.
    // SAFETY: NULL context pointer must be refused, not written.
    let r = unsafe { d.init(std::ptr::null_mut(), std::ptr::null_mut(), None) };
    report("null_ctx", r);
    // The other calls never fail, with or without a context.
    let null = std::ptr::null_mut();
    unsafe {
        assert_eq!(d.finalize(null), NCCL_SUCCESS);
        assert_eq!(d.stop(null), NCCL_SUCCESS);
        assert_eq!(d.record(null, state::PROXY_CTRL_IDLE, None), NCCL_SUCCESS);
        let (r, h) = d.start_raw(null, Ev::Coll { seq: 0 }, null, null);
        assert_eq!((r, h), (NCCL_SUCCESS, null));
    }
    // Fixed environment: init works now.
    let (r, ctx, _) = try_init(&*d);
    report("fixed", r);
    assert!(!ctx.is_null());
    let c = d.start(ctx, Ev::Coll { seq: 0 }, null, null);
    d.end(c);
    assert_eq!(unsafe { d.finalize(ctx) }, NCCL_SUCCESS);
}

/// NCCL's threads at once: proxy ops and steps started, updated and stopped from four
/// threads against a small pool, so slots are recycled under contention.
fn child_threads(version: u8) {
    let d: &'static dyn Driver = Box::leak(load_plugin(version));
    let ctx = init(d);
    let null = std::ptr::null_mut();
    let coll = d.start(ctx, Ev::Coll { seq: 0 }, null, null);
    d.end(coll); // stopped at enqueue, still the proxy ops' parent
    struct Shared(*mut c_void, *mut c_void);
    // SAFETY: the context and the handle are shared with NCCL's threads by design.
    unsafe impl Send for Shared {}
    unsafe impl Sync for Shared {}
    let shared = std::sync::Arc::new(Shared(ctx, coll));
    // All threads hold their first ops at once: more than the pool has.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let pid = std::process::id() as i32;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let sh = std::sync::Arc::clone(&shared);
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::spawn(move || {
                let (ctx, coll) = (sh.0, sh.1);
                let null = std::ptr::null_mut();
                let (mut started, mut nulls) = (0u64, 0u64);
                let mut count = |h: *mut c_void| {
                    if h.is_null() {
                        nulls += 1
                    } else {
                        started += 1
                    }
                    h
                };
                for i in 0..300 {
                    let ops: Vec<_> = (0..8)
                        .map(|_| count(d.start(ctx, Ev::ProxyOp { send: true, pid }, coll, null)))
                        .collect();
                    if i == 0 {
                        barrier.wait();
                    }
                    for &op in &ops {
                        for step in 0..N_STEPS {
                            let s = count(d.start(ctx, Ev::ProxyStep { step }, op, null));
                            d.state(s, state::PROXY_STEP_SEND_WAIT, Some(Args::default()));
                            d.end(s);
                        }
                    }
                    for op in ops {
                        d.end(op);
                    }
                }
                (started, nulls)
            })
        })
        .collect();
    let (mut started, mut nulls) = (0, 0);
    for t in threads {
        let (s, n) = t.join().unwrap();
        started += s;
        nulls += n;
    }
    report("started", started);
    report("nulls", nulls);
    assert_eq!(unsafe { d.finalize(ctx) }, NCCL_SUCCESS);
}

type FlareInit = unsafe extern "C" fn() -> c_int;
type FlareIntern = unsafe extern "C" fn(*const c_char) -> u32;
type FlareBegin = unsafe extern "C" fn(u32, u8, *const c_void) -> c_int;
type FlareEnd = unsafe extern "C" fn(u32, u8) -> c_int;

/// The application loaded libflare (RTLD_LOCAL, as Python's ctypes does) and, with
/// `app_init`, initialized it; the plugin must record into that tracer, not its own.
fn child_shared(version: u8, app_init: bool) {
    let lib = dlopen(&built("libflare.so"), libc::RTLD_NOW | libc::RTLD_LOCAL);
    // SAFETY: flare.h's signatures.
    let (init_env, intern, begin, end, shutdown) = unsafe {
        (
            std::mem::transmute::<*mut c_void, FlareInit>(dlsym(lib, "flare_init_from_env")),
            std::mem::transmute::<*mut c_void, FlareIntern>(dlsym(lib, "flare_intern")),
            std::mem::transmute::<*mut c_void, FlareBegin>(dlsym(lib, "flare_span_begin")),
            std::mem::transmute::<*mut c_void, FlareEnd>(dlsym(lib, "flare_span_end")),
            std::mem::transmute::<*mut c_void, FlareInit>(dlsym(lib, "flare_shutdown")),
        )
    };
    let train = if app_init {
        unsafe {
            assert_eq!(init_env(), 0);
            let n = intern(c"train_step".as_ptr());
            assert_eq!(begin(n, OpKind::Compute as u8, std::ptr::null()), 0);
            Some(n)
        }
    } else {
        None
    };
    let d = load_plugin(version);
    let ctx = init(&*d);
    let null = std::ptr::null_mut();
    let group = d.start(ctx, Ev::Group, null, null);
    let coll = d.start(ctx, Ev::Coll { seq: 0 }, null, group);
    d.end(coll);
    d.end(group);
    assert_eq!(unsafe { d.finalize(ctx) }, NCCL_SUCCESS);
    let shm = std::env::var("FLARE_SHM_DIR").unwrap();
    report("ring_files", std::fs::read_dir(shm).unwrap().count());
    if let Some(n) = train {
        unsafe {
            assert_eq!(end(n, OpKind::Compute as u8), 0);
            // The application owns its tracer: it shuts it down (writing the dump).
            assert_eq!(shutdown(), 0);
        }
    }
}

#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var(CHILD) else {
        return; // Not a child: nothing to do (the tests below spawn it).
    };
    let (scenario, version) = spec.split_once(':').expect("scenario:version");
    let version: u8 = version.parse().unwrap();
    match scenario {
        "full" | "masked" => child_full(version),
        "exhaust" => child_exhaust(version),
        "threads" => child_threads(version),
        "bad_env" => child_bad_env(version),
        "shared" => child_shared(version, true),
        "shared_env" => child_shared(version, false),
        other => panic!("unknown scenario {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// The parent: runs a child, reads its dump.

struct Run {
    _dir: tempfile::TempDir,
    dump: PathBuf,
    log: PathBuf,
    reports: HashMap<String, String>,
}

fn logger_so(dir: &Path) -> PathBuf {
    let so = dir.join("liblogger.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/logger.c"))
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

fn run_child(scenario: &str, version: u8, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let dump = dir.path().join("dump.ring");
    let log = dir.path().join("nccl.log");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_process_entry",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, format!("{scenario}:{version}"))
    .env("FLARE_SHM_DIR", &shm)
    .env("FLARE_DUMP", &dump)
    .env("FLARE_JOB_ID", "nccl-plugin-test")
    .env("RANK", "5")
    .env("LOCAL_RANK", "1")
    .env("WORLD_SIZE", "16")
    .env("FLARE_TEST_LOG", &log)
    .env("FLARE_TEST_LOGGER_SO", logger_so(dir.path()));
    for k in [
        "NCCL_PROFILE_EVENT_MASK",
        "FLARE_NCCL_EVENT_MASK",
        "FLARE_NCCL_TASK_EVENTS",
        "FLARE_NCCL_PROXY_EVENTS",
        "FLARE_LIBRARY",
        "FLARE_RING_EVENTS",
        "FLARE_MAX_THREADS",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawning the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {scenario}:{version} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let reports = stdout
        .lines()
        // libtest prints the test's name on the same line as the first report.
        .filter_map(|l| l.split_once("FLARE-CHILD ").map(|(_, r)| r))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Run {
        _dir: dir,
        dump,
        log,
        reports,
    }
}

/// A dump, read back: raw events, assembled spans, names.
struct Trace {
    file: RingFile,
    events: Vec<Event>,
    spans: Vec<Span>,
    items: Vec<Item>,
    open: usize,
    unmatched: u64,
}

impl Trace {
    fn read(path: &Path) -> Trace {
        let mut file = RingFile::open(path).expect("opening the dump");
        let mut raw = Vec::new();
        file.drain(&mut raw);
        let mut asm = Assembler::new();
        let mut items = Vec::new();
        for e in &raw {
            asm.feed(e.ring, &e.event, &mut items);
        }
        let spans = items
            .iter()
            .filter_map(|i| match i {
                Item::Span(s) => Some(*s),
                _ => None,
            })
            .collect();
        Trace {
            events: raw.iter().map(|e| e.event).collect(),
            spans,
            items,
            open: asm.open_spans().len(),
            unmatched: asm.unmatched_ends,
            file,
        }
    }

    fn name(&self, id: NameId) -> String {
        self.file.name_or(id)
    }

    fn spans_named(&self, name: &str) -> Vec<Span> {
        self.spans
            .iter()
            .filter(|s| self.name(s.name) == name)
            .copied()
            .collect()
    }

    /// The begin event of an async span.
    fn begin(&self, id: u64) -> &Event {
        self.events
            .iter()
            .find(|e| e.id == id && e.tag == Tag::AsyncBegin as u8)
            .expect("begin event")
    }

    fn ty(&self, id: u64) -> u16 {
        self.begin(id).flags & TYPE_MASK
    }

    /// The type of a span's parent (from the low half of its begin's `c`), if any.
    fn parent_type(&self, s: &Span) -> Option<u16> {
        let p = self.begin(s.async_id).c as u32;
        if p == 0 {
            return None;
        }
        let parent = self
            .events
            .iter()
            .find(|e| e.tag == Tag::AsyncBegin as u8 && e.id as u32 == p)
            .expect("parent begin event");
        Some(parent.flags & TYPE_MASK)
    }

    fn states(&self, id: u64) -> Vec<(u64, u64, u64)> {
        self.events
            .iter()
            .filter(|e| e.id == id && e.tag == Tag::AsyncState as u8)
            .map(|e| (e.a, e.b, e.c))
            .collect()
    }

    fn of_type(&self, bit: u64) -> Vec<Span> {
        let t = bit.trailing_zeros() as u16;
        self.spans
            .iter()
            .filter(|s| self.ty(s.async_id) == t)
            .copied()
            .collect()
    }

    fn dropped(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter(|e| e.tag == Tag::Counter as u8 && e.flags == FLAG_NCCL | TYPE_DROPS)
            .map(|e| e.a)
            .collect()
    }
}

fn t(bit: u64) -> u16 {
    bit.trailing_zeros() as u16
}

fn check_full(version: u8, run: &Run, expect_mask: u64) {
    let v = version;
    assert_eq!(
        run.reports["mask"],
        expect_mask.to_string(),
        "eActivationMask"
    );
    let tr = Trace::read(&run.dump);
    let info = tr.file.info();
    assert_eq!((info.rank, info.local_rank, info.world_size), (5, 1, 16));
    assert_eq!(info.job_id, "nccl-plugin-test");
    assert_eq!(tr.file.drops().total(), 0);
    assert_eq!(
        (tr.open, tr.unmatched),
        (0, 0),
        "every span closed, every end matched"
    );
    assert!(
        tr.events.iter().all(|e| e.flags & FLAG_NCCL != 0),
        "all flagged NCCL"
    );
    assert!(tr
        .events
        .iter()
        .filter(|e| e.tag == Tag::AsyncBegin as u8)
        .all(|e| e.id >> 48 == ID_TAG >> 48));
    let group_name = format!("nccl:{HASH:016x}");
    let nranks = if v >= 4 { NRANKS as u32 } else { 0 };

    // The communicator's identity.
    let comm: Vec<_> = tr
        .events
        .iter()
        .filter(|e| e.flags == FLAG_NCCL | TYPE_COMM)
        .collect();
    assert_eq!(comm.len(), 1);
    let c = comm[0];
    assert_eq!(tr.name(NameId(c.name)), "trainer-tp");
    assert_eq!(c.a, HASH);
    assert_eq!(tr.name(NameId((c.b >> 32) as u32)), group_name);
    assert_eq!(c.b as u32, COMM_RANK as u32);
    assert_eq!((c.c >> 32) as u32, nranks);
    assert_eq!(c.c as u32, if v >= 4 { NNODES as u32 } else { 0 });

    // Collectives: name, kind, bytes, seq, communicator, size, parent.
    let colls = tr.of_type(event::COLL);
    assert_eq!(colls.len() as u64, NCOLL);
    for (i, s) in colls.iter().enumerate() {
        assert_eq!(tr.name(s.name), "AllReduce");
        assert_eq!(s.kind, OpKind::AllReduce);
        assert_eq!(s.args.amount, COUNT as u64 * 4);
        assert_eq!(s.args.seq, i as u32);
        assert_eq!(tr.name(s.args.group), group_name);
        assert_eq!(s.args.group_size, nranks);
        let parent = if v >= 5 {
            event::COLL_API
        } else {
            event::GROUP
        };
        assert_eq!(tr.parent_type(s), Some(t(parent)), "coll parent");
        // The detail event.
        let detail = tr
            .events
            .iter()
            .find(|e| e.id == s.async_id && e.tag == Tag::Instant as u8)
            .expect("detail instant");
        assert_eq!(detail.flags, FLAG_NCCL | FLAG_DETAIL | t(event::COLL));
        assert_eq!(tr.name(NameId(detail.name)), "RING/SIMPLE");
        let sym = if v >= 7 { 1 << 24 } else { 0 };
        assert_eq!(detail.a & 0xFFFF_FFFF, 4 | 8 << 8 | 7 << 16 | sym);
        assert_eq!(detail.b, COUNT as u64);
        assert_eq!(detail.c, if v >= 7 { USER_TAG } else { 0 }, "user tag");
    }

    // Point-to-point: numbered per peer and direction.
    let p2p = tr.of_type(event::P2P);
    assert_eq!(p2p.len(), 2);
    let (send, recv) = (p2p[0], p2p[1]);
    assert_eq!(
        (tr.name(send.name).as_str(), send.kind),
        ("Send", OpKind::Send)
    );
    assert_eq!(
        (tr.name(recv.name).as_str(), recv.kind),
        ("Recv", OpKind::Recv)
    );
    assert_eq!((send.args.seq, recv.args.seq), (0, 0));
    assert_eq!(send.args.amount, COUNT as u64 * 4);
    let peer_detail = tr
        .events
        .iter()
        .find(|e| e.id == send.async_id && e.tag == Tag::Instant as u8)
        .unwrap();
    assert_eq!(tr.name(NameId(peer_detail.name)), "nccl:p2p");
    assert_eq!(peer_detail.a >> 32, 1, "peer");
    assert_eq!(peer_detail.c, if v >= 7 { USER_TAG } else { 0 }, "user tag");

    // Proxy ops: one per transfer plus the PXN one, children of their task.
    let ops = tr.of_type(event::PROXY_OP);
    assert_eq!(ops.len() as u64, NCOLL + 3);
    for s in &ops[..NCOLL as usize] {
        assert_eq!(tr.name(s.name), "nccl:proxy_send");
        assert_eq!(tr.parent_type(s), Some(t(event::COLL)), "proxy op parent");
        assert_eq!(s.args.amount, (N_STEPS * CHUNK) as u64);
        assert_eq!(s.args.seq, 1, "peer in b");
        assert_eq!(
            s.args.group_size,
            2 << 24 | 1 << 23 | N_STEPS as u32,
            "channel, send and steps in c"
        );
        let states = tr.states(s.async_id);
        if v <= 3 {
            let codes: Vec<u64> = states.iter().map(|s| s.0).collect();
            assert_eq!(codes, vec![0, 2, 3]);
            assert_eq!(states[2].1, (N_STEPS * CHUNK) as u64, "transSize");
            assert_eq!(states[2].2, N_STEPS as u64, "steps");
        } else {
            assert_eq!(states.iter().map(|s| s.0).collect::<Vec<_>>(), vec![19]);
        }
        assert_eq!(s.progress as usize, states.len());
    }
    assert_eq!(tr.name(ops[NCOLL as usize + 1].name), "nccl:proxy_recv");
    assert_eq!(tr.parent_type(&ops[NCOLL as usize]), Some(t(event::P2P)));
    let pxn = &ops[NCOLL as usize + 2];
    assert_eq!(
        tr.parent_type(pxn),
        None,
        "a PXN op's parent is not followed"
    );

    // Proxy steps with their state transitions.
    let steps = tr.of_type(event::PROXY_STEP);
    assert_eq!(steps.len() as u64, (NCOLL + 2) * N_STEPS as u64);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(tr.name(s.name), "nccl:proxy_step");
        assert_eq!(tr.parent_type(s), Some(t(event::PROXY_OP)));
        assert_eq!(s.args.seq, (i as i32 % N_STEPS) as u32, "step index");
        let is_recv = i / N_STEPS as usize == NCOLL as usize + 1;
        let expect = match (is_recv, v <= 3) {
            (false, true) => vec![8, 9],
            (false, false) => vec![8, 20, 9],
            (true, _) => vec![10, 11, 12],
        };
        let states = tr.states(s.async_id);
        assert_eq!(states.iter().map(|s| s.0).collect::<Vec<_>>(), expect);
        assert_eq!(s.progress as usize, expect.len());
        if v >= 4 {
            let trans = (CHUNK as u64) * (i as u64 % N_STEPS as u64 + 1);
            assert!(states.iter().all(|s| s.1 == trans), "transSize");
        }
    }

    // Kernel channels: GPU start and stop timers (v4+).
    let kch = tr.of_type(event::KERNEL_CH);
    let nets = tr.of_type(event::NET_PLUGIN);
    if v >= 3 {
        assert_eq!(kch.len() as u64, NCOLL + 2);
        assert_eq!(nets.len() as u64, NCOLL + 2);
        for (i, s) in kch.iter().enumerate() {
            assert_eq!(s.args.seq, 2, "channel");
            let task = if i < NCOLL as usize {
                event::COLL
            } else {
                event::P2P
            };
            assert_eq!(tr.parent_type(s), Some(t(task)));
            let k = if i < NCOLL as usize {
                i as u64
            } else {
                100 + (i as u64 - NCOLL)
            };
            if v >= 4 {
                let start = GPU_T0 + k * 1000;
                assert_eq!(s.args.amount, start);
                assert_eq!(tr.states(s.async_id), vec![(22, start + 500, 0)]);
                let end = tr
                    .events
                    .iter()
                    .find(|e| e.id == s.async_id && e.tag == Tag::AsyncEnd as u8)
                    .unwrap();
                assert_eq!(end.a, start + 500);
            } else {
                assert_eq!(s.args.amount, 0);
            }
        }
        for s in &nets {
            assert_eq!(tr.parent_type(s), Some(t(event::PROXY_STEP)));
            assert_eq!(s.args.amount, 0x10001);
            assert_eq!(s.progress, 1);
        }
    } else {
        assert!(kch.is_empty() && nets.is_empty());
    }

    // Kernel phases (v7): three per channel, under it, each with its GPU start and stop.
    let phases = tr.of_type(event::KERNEL_PHASE);
    if v >= 7 {
        assert_eq!(phases.len() as u64, (NCOLL + 2) * PHASES as u64);
        let names = ["nccl:initial_sync", "nccl:compute", "nccl:final_sync"];
        for (i, s) in phases.iter().enumerate() {
            let phase = i % PHASES as usize;
            assert_eq!(tr.name(s.name), names[phase]);
            assert_eq!(tr.parent_type(s), Some(t(event::KERNEL_CH)));
            assert_eq!(s.args.seq, 2, "channel");
            assert_eq!(s.args.group_size, phase as u32, "phase id");
            let j = i as u64 / PHASES as u64;
            let k = if j < NCOLL { j } else { 100 + (j - NCOLL) };
            let start = GPU_T0 + k * 1000 + 100 * phase as u64;
            assert_eq!(s.args.amount, start);
            assert_eq!(tr.states(s.async_id), vec![(31, start + 100, 0)]);
            let end = tr
                .events
                .iter()
                .find(|e| e.id == s.async_id && e.tag == Tag::AsyncEnd as u8)
                .unwrap();
            assert_eq!(end.a, start + 100);
        }
    } else {
        assert!(phases.is_empty());
    }

    // The proxy control loop.
    let ctrl = tr.of_type(event::PROXY_CTRL);
    assert_eq!(ctrl.len(), 1);
    let st = tr.states(ctrl[0].async_id);
    assert_eq!(
        st.iter().map(|s| s.0).collect::<Vec<_>>(),
        vec![13, 16, 17, 18, 14, 15]
    );
    assert_eq!(st[2].1, 3, "appendedProxyOps");

    // API events and kernel launch (v5+).
    let group_api = tr.of_type(event::GROUP_API);
    let coll_api = tr.of_type(event::COLL_API);
    let p2p_api = tr.of_type(event::P2P_API);
    let launch = tr.of_type(event::KERNEL_LAUNCH);
    if v >= 5 {
        assert_eq!(group_api.len(), 1);
        assert_eq!(
            tr.states(group_api[0].async_id)
                .iter()
                .map(|s| s.0)
                .collect::<Vec<_>>(),
            vec![23, 24]
        );
        assert_eq!(group_api[0].args.seq, 1, "group depth");
        assert_eq!(coll_api.len() as u64, NCOLL);
        for s in &coll_api {
            assert_eq!(
                (tr.name(s.name).as_str(), s.kind),
                ("AllReduce", OpKind::HostOther)
            );
            assert_eq!(tr.parent_type(s), Some(t(event::GROUP_API)));
        }
        assert_eq!(p2p_api.len(), 2);
        assert_eq!(p2p_api[0].args.group_size, 1, "graph captured");
        assert_eq!(launch.len(), 1);
        assert_eq!(tr.parent_type(&launch[0]), Some(t(event::GROUP_API)));
    } else {
        assert!(group_api.is_empty() && coll_api.is_empty() && launch.is_empty());
    }

    // Copy-engine collectives (v6).
    let ce = tr.of_type(event::CE_COLL);
    if v >= 6 {
        assert_eq!(ce.len(), 1);
        assert_eq!(
            (tr.name(ce[0].name).as_str(), ce[0].kind),
            ("AllGather", OpKind::AllGather)
        );
        assert_eq!(ce[0].args.amount, COUNT as u64 * 2);
        assert_eq!(ce[0].args.group_size, NRANKS as u32);
        let sync = tr.of_type(event::CE_SYNC);
        let batch = tr.of_type(event::CE_BATCH);
        assert_eq!((sync.len(), batch.len()), (1, 1));
        assert_eq!(tr.parent_type(&sync[0]), Some(t(event::CE_COLL)));
        assert_eq!(batch[0].args.amount, 3 * COUNT as u64 * 2);
        assert_eq!(batch[0].args.seq, 3, "numOps");
    } else {
        assert!(ce.is_empty());
    }

    // Nothing dropped; the groups.
    assert_eq!(tr.dropped(), vec![0]);
    assert_eq!(tr.of_type(event::GROUP).len(), 1);
    assert!(tr.items.iter().any(|i| matches!(i, Item::Counter { .. })));
}

#[test]
fn every_api_version_records_nccls_events_with_names_sizes_and_hierarchy() {
    plugin_path();
    for version in 1..=7u8 {
        let run = run_child("full", version, &[("NCCL_PROFILE_EVENT_MASK", "all")]);
        check_full(version, &run, mask::supported(version));
        if version >= 4 {
            let log = std::fs::read_to_string(&run.log).unwrap_or_default();
            assert!(
                log.contains(&format!(
                    "Flare NCCL profiler (API v{version}): event mask 0x"
                )),
                "init logs through NCCL's logger:\n{log}"
            );
        }
    }
}

#[test]
fn masked_out_event_types_are_not_recorded() {
    for version in [1u8, 4, 6, 7] {
        let run = run_child(
            "masked",
            version,
            &[("FLARE_NCCL_EVENT_MASK", "coll,p2p,proxy_op")],
        );
        assert_eq!(
            run.reports["mask"],
            (event::COLL | event::P2P | event::PROXY_OP).to_string()
        );
        let tr = Trace::read(&run.dump);
        assert_eq!(tr.of_type(event::COLL).len() as u64, NCOLL);
        assert_eq!(tr.of_type(event::PROXY_OP).len() as u64, NCOLL + 3);
        for bit in [
            event::GROUP,
            event::PROXY_STEP,
            event::PROXY_CTRL,
            event::KERNEL_CH,
            event::NET_PLUGIN,
            event::GROUP_API,
            event::COLL_API,
            event::KERNEL_LAUNCH,
            event::CE_COLL,
            event::KERNEL_PHASE,
        ] {
            assert!(
                tr.of_type(bit).is_empty(),
                "v{version}: type {bit:#x} recorded"
            );
        }
        // The masked parents are gone, so colls have none.
        for s in tr.of_type(event::COLL) {
            assert_eq!(tr.parent_type(&s), None);
        }
        assert_eq!((tr.open, tr.unmatched), (0, 0));
    }
}

#[test]
fn the_default_mask_is_used_without_variables() {
    let run = run_child("full", 7, &[]);
    assert_eq!(run.reports["mask"], mask::DEFAULT_MASK.to_string());
    let tr = Trace::read(&run.dump);
    assert_eq!(tr.of_type(event::COLL).len() as u64, NCOLL);
    assert_eq!(tr.of_type(event::KERNEL_CH).len() as u64, NCOLL + 2);
    assert_eq!(
        tr.of_type(event::KERNEL_PHASE).len() as u64,
        (NCOLL + 2) * PHASES as u64
    );
    assert!(tr.of_type(event::PROXY_STEP).is_empty());
}

#[test]
fn an_exhausted_pool_drops_and_counts_events() {
    for version in [2u8, 6] {
        let run = run_child(
            "exhaust",
            version,
            &[
                ("NCCL_PROFILE_EVENT_MASK", "proxystep"),
                ("FLARE_NCCL_PROXY_EVENTS", "16"),
            ],
        );
        assert_eq!(run.reports["nulls"], "4");
        let tr = Trace::read(&run.dump);
        let steps = tr.of_type(event::PROXY_STEP);
        assert_eq!(
            steps.len(),
            17,
            "16 from the full pool, then one after slots came back"
        );
        assert_eq!(steps.iter().filter(|s| s.progress == 1).count(), 16);
        assert_eq!(tr.dropped(), vec![4]);
    }
}

#[test]
fn init_fails_with_a_code_on_a_bad_environment_and_nothing_else_fails() {
    for version in [1u8, 4, 6] {
        let run = run_child("bad_env", version, &[("NCCL_PROFILE_EVENT_MASK", "banana")]);
        assert_eq!(run.reports["bad_mask"], NCCL_INVALID_ARGUMENT.to_string());
        assert_eq!(run.reports["bad_pool"], NCCL_INVALID_ARGUMENT.to_string());
        assert_eq!(run.reports["bad_rank"], NCCL_INVALID_USAGE.to_string());
        assert_eq!(run.reports["null_ctx"], NCCL_INVALID_ARGUMENT.to_string());
        assert_eq!(run.reports["fixed"], NCCL_SUCCESS.to_string());
        let tr = Trace::read(&run.dump);
        assert_eq!(tr.spans_named("AllReduce").len(), 1);
        if version >= 4 {
            let log = std::fs::read_to_string(&run.log).unwrap();
            assert!(log.contains("NCCL_PROFILE_EVENT_MASK=\"banana\""), "{log}");
            assert!(log.contains("FLARE_NCCL_PROXY_EVENTS=\"3\""), "{log}");
            assert!(log.contains("rank 17 is outside a world of 16"), "{log}");
            assert!(log.contains(&format!("level={NCCL_LOG_WARN}")), "{log}");
        }
    }
}

#[test]
fn the_plugin_shares_the_applications_libflare_tracer() {
    // The application initialized libflare: one ring file, its spans and NCCL's together.
    let run = run_child("shared", 6, &[]);
    assert_eq!(run.reports["ring_files"], "1");
    let tr = Trace::read(&run.dump);
    assert_eq!(tr.spans_named("train_step").len(), 1);
    let coll = tr.spans_named("AllReduce");
    assert_eq!(coll.len(), 1);
    assert_eq!(tr.parent_type(&coll[0]), Some(t(event::GROUP)));
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(log.contains("application's tracer in libflare.so"), "{log}");

    // Loaded but not initialized, named by FLARE_LIBRARY: the plugin initializes it and
    // shuts it down at exit.
    let lib = built("libflare.so");
    let run = run_child("shared_env", 4, &[("FLARE_LIBRARY", lib.to_str().unwrap())]);
    assert_eq!(run.reports["ring_files"], "1");
    let tr = Trace::read(&run.dump);
    assert_eq!(tr.spans_named("AllReduce").len(), 1);
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(
        log.contains("application's tracer in FLARE_LIBRARY="),
        "{log}"
    );
}

#[test]
fn the_plugin_speaks_the_c_abi_version_libflare_implements() {
    assert_eq!(
        nccl_profiler_flare::FLARE_C_ABI_VERSION,
        flare::FLARE_ABI_VERSION
    );
}

#[test]
fn the_library_exports_every_version_under_nccls_names() {
    let lib = dlopen(&plugin_path(), libc::RTLD_NOW | libc::RTLD_LOCAL);
    for v in 1..=7 {
        let table = dlsym(lib, &format!("ncclProfiler_v{v}"));
        // SAFETY: every table starts with `const char* name`.
        let name = unsafe { CStr::from_ptr(*(table as *const *const c_char)) };
        assert_eq!(name.to_str().unwrap(), "Flare");
    }
}

#[test]
fn concurrent_threads_recycle_handles_and_keep_parent_links() {
    let run = run_child(
        "threads",
        6,
        &[
            ("NCCL_PROFILE_EVENT_MASK", "coll,proxyop,proxystep"),
            ("FLARE_NCCL_PROXY_EVENTS", "16"),
            ("FLARE_RING_EVENTS", "65536"),
        ],
    );
    let started: u64 = run.reports["started"].parse().unwrap();
    let nulls: u64 = run.reports["nulls"].parse().unwrap();
    assert_eq!(started + nulls, 4 * 300 * 8 * (1 + N_STEPS as u64));
    assert!(
        nulls >= 16,
        "32 ops asked at once of a 16-slot pool: {nulls} dropped"
    );
    let tr = Trace::read(&run.dump);
    assert_eq!((tr.open, tr.unmatched), (0, 0));
    assert_eq!(tr.file.drops().total(), 0, "rings large enough");
    let ops = tr.of_type(event::PROXY_OP);
    let steps = tr.of_type(event::PROXY_STEP);
    assert_eq!((ops.len() + steps.len()) as u64, started);
    assert_eq!(tr.dropped(), vec![nulls]);
    assert!(ops
        .iter()
        .all(|s| tr.parent_type(s) == Some(t(event::COLL))));
    // Each step names the op it ran under: same thread, inside the op's lifetime.
    let by_low: HashMap<u32, &Span> = ops.iter().map(|s| (s.async_id as u32, s)).collect();
    for s in &steps {
        let p = tr.begin(s.async_id).c as u32;
        if p == 0 {
            continue; // its op got no handle
        }
        let op = by_low[&p];
        assert_eq!(op.ring, s.ring);
        assert!(op.start_ns <= s.start_ns && s.end_ns <= op.end_ns);
    }
}
