//! The functions NCCL calls, one set per profiler API version: each converts its version's
//! descriptor into [`Descr`] and hands it to the context.
//!
//! Every function runs under `catch_unwind` and never unwinds into NCCL. Only `init` can
//! fail; the others always return `ncclSuccess` (a NULL handle, a NULL context and a panic
//! all mean "nothing recorded"), as NCCL expects of event calls.

use crate::abi::*;
use crate::backend::{self, Backend};
use crate::context::{
    self, ApiInfo, CollInfo, CommInit, Context, Descr, Func, P2pInfo, PoolSizes, Start,
};
use crate::mask;
use crate::names::{self, Names, FUNCS};
use crate::pool::Slot;
use flare_model::OpKind;
use flare_tracer::NameId;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

static NAMES: OnceLock<Names> = OnceLock::new();

fn guard(on_panic: NcclResult, f: impl FnOnce() -> NcclResult) -> NcclResult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Reports an init failure: NCCL's log when it gave us one, else stderr (v1-v3 have no
/// logger, and a silently disabled profiler is worse than a line on stderr).
fn init_failed(logfn: LogFn, code: NcclResult, msg: &str) -> NcclResult {
    if logfn.is_some() {
        Context::log(logfn, NCCL_LOG_WARN, &format!("Flare NCCL profiler: {msg}"));
    } else {
        eprintln!("[flare] NCCL profiler plugin disabled: {msg}");
    }
    code
}

/// The world size, to size v1-v3's per-peer counters (they learn no communicator size;
/// no communicator is larger than the job).
fn world_size_from_env() -> usize {
    flare_tracer::Config::from_env()
        .map(|c| c.world_size as usize)
        .unwrap_or(1024)
}

/// The shared part of every version's `init`.
///
/// # Safety
/// `context` and `mask_out` are NULL or valid for writes (NCCL's pointers).
unsafe fn init_common(
    version: u8,
    context: *mut *mut c_void,
    mask_out: *mut c_int,
    comm: CommInit,
    logfn: LogFn,
) -> NcclResult {
    if context.is_null() {
        return NCCL_INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL, NCCL's out pointer.
    unsafe { context.write(std::ptr::null_mut()) };
    guard(NCCL_INTERNAL_ERROR, || {
        let env = |k: &str| std::env::var(k).ok();
        let mask = match mask::from_lookup(env, version) {
            Ok(m) => m,
            Err(e) => return init_failed(logfn, NCCL_INVALID_ARGUMENT, &e),
        };
        let sizes = match PoolSizes::from_lookup(env) {
            Ok(s) => s,
            Err(e) => return init_failed(logfn, NCCL_INVALID_ARGUMENT, &e),
        };
        let attached = match backend::attach() {
            Ok(a) => a,
            Err(e) => return init_failed(logfn, e.code, &e.msg),
        };
        let backend = &attached.backend;
        let names = NAMES.get_or_init(|| Names::new(&|s| backend.intern(s)));
        let peers = if comm.nranks > 0 {
            comm.nranks as usize
        } else {
            world_size_from_env()
        };
        let ctx = Context::create(mask, &sizes, &comm, peers, names, backend, logfn);
        if !mask_out.is_null() {
            // SAFETY: NCCL's int, which it reads atomically from other threads.
            unsafe { AtomicI32::from_ptr(mask_out) }.store(mask as i32, Ordering::Relaxed);
        }
        // SAFETY: checked non-NULL above.
        unsafe { context.write(ctx.cast()) };
        Context::log(
            logfn,
            NCCL_LOG_INFO,
            &format!(
                "Flare NCCL profiler (API v{version}): event mask 0x{mask:x}, {}",
                backend.describe()
            ),
        );
        NCCL_SUCCESS
    })
}

/// The shared part of every `startEvent`: the handle is NULL unless an event starts.
///
/// # Safety
/// `ctx` is NULL or a context from `init`; `handle` is NULL or writable.
unsafe fn start_common(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    type_bit: u64,
    convert: impl FnOnce(&Names, &Backend) -> Option<Start>,
) -> NcclResult {
    if handle.is_null() {
        return NCCL_SUCCESS;
    }
    // SAFETY: non-NULL, NCCL's out pointer. Written first so a panic leaves NULL.
    unsafe { handle.write(std::ptr::null_mut()) };
    if ctx.is_null() {
        return NCCL_SUCCESS;
    }
    guard(NCCL_SUCCESS, || {
        // SAFETY: NCCL passes back the context init returned.
        let ctx = unsafe { &*(ctx as *const Context) };
        if type_bit & ctx.mask == 0 {
            return NCCL_SUCCESS;
        }
        let (Some(a), Some(names)) = (backend::attached(), NAMES.get()) else {
            return NCCL_SUCCESS;
        };
        if let Some(start) = convert(names, &a.backend) {
            let h = ctx.start(&start);
            // SAFETY: as above.
            unsafe { handle.write(h) };
        }
        NCCL_SUCCESS
    })
}

/// `stopEvent` of every version.
unsafe extern "C" fn stop_event(handle: *mut c_void) -> NcclResult {
    if handle.is_null() {
        return NCCL_SUCCESS;
    }
    guard(NCCL_SUCCESS, || {
        // SAFETY: a non-NULL handle is one startEvent returned.
        unsafe { context::stop(&*(handle as *const Slot)) };
        NCCL_SUCCESS
    })
}

/// `finalize` of every version.
unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    if ctx.is_null() {
        return NCCL_SUCCESS;
    }
    guard(NCCL_SUCCESS, || {
        // SAFETY: the context init returned, finalized once by NCCL.
        unsafe { Context::finalize(ctx.cast()) };
        NCCL_SUCCESS
    })
}

/// `recordEventState` of v1-v3 (`ncclProfilerEventStateArgs_v1_t` layout).
unsafe extern "C" fn record_v1(
    handle: *mut c_void,
    state_code: c_int,
    args: *mut StateArgsV1,
) -> NcclResult {
    if handle.is_null() {
        return NCCL_SUCCESS;
    }
    guard(NCCL_SUCCESS, || {
        // SAFETY: NULL or NCCL's args; each state reads only the member NCCL fills for it.
        let (b, c) = match unsafe { args.as_ref() } {
            Some(a) => match state_code {
                state::PROXY_OP_SEND_POSTED..=state::PROXY_OP_RECV_DONE => unsafe {
                    (a.proxy_op.trans_size as u64, a.proxy_op.steps as u32 as u64)
                },
                state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END => unsafe {
                    (a.proxy_ctrl.appended_proxy_ops as u32 as u64, 0)
                },
                _ => (0, 0),
            },
            None => (0, 0),
        };
        // SAFETY: a non-NULL handle is one startEvent returned.
        context::record_state(unsafe { &*(handle as *const Slot) }, state_code, b, c);
        NCCL_SUCCESS
    })
}

/// `recordEventState` of v4-v7 (`ncclProfilerEventStateArgs_v4_t` layout; v7 adds a state).
unsafe extern "C" fn record_v4(
    handle: *mut c_void,
    state_code: c_int,
    args: *mut StateArgsV4,
) -> NcclResult {
    if handle.is_null() {
        return NCCL_SUCCESS;
    }
    guard(NCCL_SUCCESS, || {
        // SAFETY: NULL or NCCL's args; each state reads only the member NCCL fills for it
        // (NCCL leaves the union uninitialized for the other states).
        let b = match unsafe { args.as_ref() } {
            Some(a) => match state_code {
                state::PROXY_STEP_SEND_GPU_WAIT..=state::PROXY_STEP_RECV_GPU_WAIT
                | state::PROXY_STEP_SEND_PEER_WAIT_V4 => unsafe { a.proxy_step.trans_size as u64 },
                state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END => unsafe {
                    a.proxy_ctrl.appended_proxy_ops as u32 as u64
                },
                state::KERNEL_CH_STOP | state::KERNEL_PHASE_STOP => unsafe { a.kernel_ch.p_timer },
                _ => 0,
            },
            None => 0,
        };
        // SAFETY: a non-NULL handle is one startEvent returned.
        context::record_state(unsafe { &*(handle as *const Slot) }, state_code, b, 0);
        NCCL_SUCCESS
    })
}

// ---------------------------------------------------------------------------------------
// Descriptor conversion.

/// # Safety
/// `p` is NULL or a NUL-terminated string (NCCL's static names).
unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        b""
    } else {
        // SAFETY: per the contract.
        unsafe { CStr::from_ptr(p) }.to_bytes()
    }
}

/// A function given by name (v2+). A name NCCL added after this plugin was written is
/// interned as is (the only event-path call that may take the tracer's name lock).
fn func_named(s: &[u8], n: &Names, b: &Backend) -> Func {
    match names::func_index(s) {
        Some(i) => Func {
            name: n.func[i],
            kind: FUNCS[i].1,
        },
        None => Func {
            name: if s.is_empty() {
                NameId::NONE
            } else {
                b.intern(&String::from_utf8_lossy(s))
            },
            kind: OpKind::HostOther,
        },
    }
}

/// A function given by `ncclFunc_t` code (v1).
fn func_coded(code: u8, n: &Names, b: &Backend) -> Func {
    match FUNCS.get(code as usize) {
        Some(f) => Func {
            name: n.func[code as usize],
            kind: f.1,
        },
        None => Func {
            name: b.intern(&format!("ncclFunc{code}")),
            kind: OpKind::HostOther,
        },
    }
}

fn dtype_coded(code: u8) -> u8 {
    if (code as usize) < names::DTYPES.len() {
        code
    } else {
        names::DTYPE_UNKNOWN
    }
}

fn proxy_op(p: &ProxyOpDescr) -> Descr {
    Descr::ProxyOp {
        pid: p.pid,
        channel: p.channel_id,
        peer: p.peer,
        n_steps: p.n_steps,
        chunk_size: p.chunk_size,
        is_send: p.is_send != 0,
    }
}

fn start(type_bit: u64, parent: *mut c_void, rank: c_int, descr: Descr) -> Start {
    Start {
        type_bit,
        parent,
        parent_group: std::ptr::null_mut(),
        rank,
        comm_name: std::ptr::null(),
        descr,
    }
}

/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v1(d: &EventDescrV1, n: &Names, b: &Backend) -> Option<Start> {
    let t = d.type_ as u64;
    let mut comm_name = std::ptr::null();
    // SAFETY (union reads): the member matching `type`.
    let descr = match t {
        event::GROUP => Descr::Group,
        event::COLL => {
            let c = unsafe { &d.u.coll };
            comm_name = c.name;
            Descr::Coll(CollInfo {
                comm_hash: c.comm_hash,
                seq: c.seq_number,
                func: func_coded(c.func, n, b),
                count: c.count as u64,
                dtype: dtype_coded(c.datatype),
                root: c.root,
                n_channels: c.n_max_channels,
                n_warps: c.n_warps,
                algo: (c.algo as usize).min(names::ALGOS.len()),
                proto: (c.proto as usize).min(names::PROTOS.len()),
                sym: false,
                user_tag: 0,
            })
        }
        event::P2P => {
            let p = unsafe { &d.u.p2p };
            comm_name = p.name;
            Descr::P2p(P2pInfo {
                comm_hash: p.comm_hash,
                func: func_coded(p.func, n, b),
                count: p.count as u64,
                dtype: dtype_coded(p.datatype),
                peer: p.peer,
                n_channels: 0,
                user_tag: 0,
            })
        }
        event::PROXY_OP => proxy_op(unsafe { &d.u.proxy_op }),
        event::PROXY_STEP => Descr::ProxyStep {
            step: unsafe { d.u.proxy_step.step },
        },
        event::PROXY_CTRL => Descr::ProxyCtrl,
        _ => return None,
    };
    Some(Start {
        comm_name,
        ..start(t, d.parent_obj, d.rank, descr)
    })
}

/// The v2 and v3 Coll member, whose fields v3 only shortened.
struct CollV2Fields {
    name: *const c_char,
    comm_hash: u64,
    seq: u64,
    func: *const c_char,
    count: usize,
    root: c_int,
    datatype: *const c_char,
    n_channels: u8,
    n_warps: u8,
    algo: *const c_char,
    proto: *const c_char,
}

/// # Safety
/// The strings are NULL or NCCL's NUL-terminated names.
unsafe fn coll_named(c: CollV2Fields, n: &Names, b: &Backend) -> (Descr, *const c_char) {
    let d = unsafe {
        CollInfo {
            comm_hash: c.comm_hash,
            seq: c.seq,
            func: func_named(bytes(c.func), n, b),
            count: c.count as u64,
            dtype: names::dtype_code(bytes(c.datatype)),
            root: c.root,
            n_channels: c.n_channels,
            n_warps: c.n_warps,
            algo: names::algo_index(bytes(c.algo)),
            proto: names::proto_index(bytes(c.proto)),
            sym: false,
            user_tag: 0,
        }
    };
    (Descr::Coll(d), c.name)
}

/// # Safety
/// As [`coll_named`].
unsafe fn p2p_v2(p: &P2pDescrV2, n: &Names, b: &Backend) -> (Descr, *const c_char) {
    let d = unsafe {
        P2pInfo {
            comm_hash: p.comm_hash,
            func: func_named(bytes(p.func), n, b),
            count: p.count as u64,
            dtype: names::dtype_code(bytes(p.datatype)),
            peer: p.peer,
            n_channels: 0,
            user_tag: 0,
        }
    };
    (Descr::P2p(d), p.name)
}

/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v2(d: &EventDescrV2, n: &Names, b: &Backend) -> Option<Start> {
    let t = d.type_ as u64;
    // SAFETY (union reads): the member matching `type`.
    let (descr, comm_name) = match t {
        event::GROUP => (Descr::Group, std::ptr::null()),
        event::COLL => {
            let c = unsafe { &d.u.coll };
            let f = CollV2Fields {
                name: c.name,
                comm_hash: c.comm_hash,
                seq: c.seq_number,
                func: c.func,
                count: c.count,
                root: c.root,
                datatype: c.datatype,
                n_channels: c.n_max_channels,
                n_warps: c.n_warps,
                algo: c.algo,
                proto: c.proto,
            };
            unsafe { coll_named(f, n, b) }
        }
        event::P2P => unsafe { p2p_v2(&d.u.p2p, n, b) },
        event::PROXY_OP => (proxy_op(unsafe { &d.u.proxy_op }), std::ptr::null()),
        event::PROXY_STEP => (
            Descr::ProxyStep {
                step: unsafe { d.u.proxy_step.step },
            },
            std::ptr::null(),
        ),
        event::PROXY_CTRL => (Descr::ProxyCtrl, std::ptr::null()),
        _ => return None,
    };
    Some(Start {
        comm_name,
        ..start(t, d.parent_obj, d.rank, descr)
    })
}

/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v3(d: &EventDescrV3, n: &Names, b: &Backend) -> Option<Start> {
    let t = d.type_ as u64;
    // SAFETY (union reads): the member matching `type`.
    let (descr, comm_name) = match t {
        event::GROUP => (Descr::Group, std::ptr::null()),
        event::COLL => {
            let c = unsafe { &d.u.coll };
            let f = CollV2Fields {
                name: c.name,
                comm_hash: c.comm_hash,
                seq: c.seq_number,
                func: c.func,
                count: c.count,
                root: c.root,
                datatype: c.datatype,
                n_channels: c.n_max_channels,
                n_warps: c.n_warps,
                algo: c.algo,
                proto: c.proto,
            };
            unsafe { coll_named(f, n, b) }
        }
        event::P2P => unsafe { p2p_v2(&d.u.p2p, n, b) },
        event::PROXY_OP => (proxy_op(unsafe { &d.u.proxy_op }), std::ptr::null()),
        event::PROXY_STEP => (
            Descr::ProxyStep {
                step: unsafe { d.u.proxy_step.step },
            },
            std::ptr::null(),
        ),
        event::PROXY_CTRL => (Descr::ProxyCtrl, std::ptr::null()),
        event::KERNEL_CH => (
            Descr::KernelCh {
                channel: unsafe { d.u.kernel_ch.channel_id },
                start_timer: 0,
            },
            std::ptr::null(),
        ),
        event::NET_PLUGIN => (
            Descr::NetPlugin {
                id: unsafe { d.u.net_plugin.id },
            },
            std::ptr::null(),
        ),
        _ => return None,
    };
    Some(Start {
        comm_name,
        ..start(t, d.parent_obj, d.rank, descr)
    })
}

/// # Safety
/// The strings are NULL or NCCL's NUL-terminated names.
#[allow(clippy::too_many_arguments)]
unsafe fn coll_v4_fields(
    seq: u64,
    func: *const c_char,
    count: usize,
    root: c_int,
    datatype: *const c_char,
    n_channels: u8,
    n_warps: u8,
    algo: *const c_char,
    proto: *const c_char,
    n: &Names,
    b: &Backend,
) -> CollInfo {
    unsafe {
        CollInfo {
            comm_hash: 0,
            seq,
            func: func_named(bytes(func), n, b),
            count: count as u64,
            dtype: names::dtype_code(bytes(datatype)),
            root,
            n_channels,
            n_warps,
            algo: names::algo_index(bytes(algo)),
            proto: names::proto_index(bytes(proto)),
            sym: false,
            user_tag: 0,
        }
    }
}

/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v4(d: &EventDescrV4, n: &Names, b: &Backend) -> Option<Start> {
    let t = d.type_ as u64;
    // SAFETY (union reads): the member matching `type`; strings are NCCL's.
    let descr = match t {
        event::GROUP => Descr::Group,
        event::COLL => {
            let c = unsafe { &d.u.coll };
            Descr::Coll(unsafe {
                coll_v4_fields(
                    c.seq_number,
                    c.func,
                    c.count,
                    c.root,
                    c.datatype,
                    c.n_channels,
                    c.n_warps,
                    c.algo,
                    c.proto,
                    n,
                    b,
                )
            })
        }
        event::P2P => {
            let p = unsafe { &d.u.p2p };
            Descr::P2p(P2pInfo {
                comm_hash: 0,
                func: func_named(unsafe { bytes(p.func) }, n, b),
                count: p.count as u64,
                dtype: names::dtype_code(unsafe { bytes(p.datatype) }),
                peer: p.peer,
                n_channels: p.n_channels,
                user_tag: 0,
            })
        }
        event::PROXY_OP => proxy_op(unsafe { &d.u.proxy_op }),
        event::PROXY_STEP => Descr::ProxyStep {
            step: unsafe { d.u.proxy_step.step },
        },
        event::PROXY_CTRL => Descr::ProxyCtrl,
        event::KERNEL_CH => {
            let k = unsafe { &d.u.kernel_ch };
            Descr::KernelCh {
                channel: k.channel_id,
                start_timer: k.p_timer,
            }
        }
        event::NET_PLUGIN => Descr::NetPlugin {
            id: unsafe { d.u.net_plugin.id },
        },
        _ => return None,
    };
    Some(start(t, d.parent_obj, d.rank, descr))
}

/// v5 to v7 share their first ten union members (v7 adds fields at the end of some, read
/// by name): one body converts them all, v6 and v7 adding their own members.
macro_rules! convert_v5_like {
    ($d:expr, $n:expr, $b:expr, $($extra:tt)*) => {{
        let d = $d;
        let (n, b) = ($n, $b);
        let t = d.type_;
        let mut parent_group = std::ptr::null_mut();
        // SAFETY (union reads): the member matching `type`; strings are NCCL's.
        let descr = match t {
            event::GROUP => Descr::Group,
            event::GROUP_API => {
                let g = unsafe { &d.u.group_api };
                Descr::GroupApi {
                    graph_captured: g.graph_captured != 0,
                    depth: g.group_depth,
                }
            }
            event::COLL_API => {
                let c = unsafe { &d.u.coll_api };
                Descr::CollApi(ApiInfo {
                    func: func_named(unsafe { bytes(c.func) }, n, b),
                    count: c.count as u64,
                    dtype: names::dtype_code(unsafe { bytes(c.datatype) }),
                    root: c.root,
                    graph_captured: c.graph_captured != 0,
                })
            }
            event::P2P_API => {
                let p = unsafe { &d.u.p2p_api };
                Descr::P2pApi(ApiInfo {
                    func: func_named(unsafe { bytes(p.func) }, n, b),
                    count: p.count as u64,
                    dtype: names::dtype_code(unsafe { bytes(p.datatype) }),
                    root: -1,
                    graph_captured: p.graph_captured != 0,
                })
            }
            event::KERNEL_LAUNCH => Descr::KernelLaunch,
            event::COLL => {
                let c = unsafe { &d.u.coll };
                parent_group = c.parent_group;
                Descr::Coll(unsafe {
                    coll_v4_fields(
                        c.seq_number,
                        c.func,
                        c.count,
                        c.root,
                        c.datatype,
                        c.n_channels,
                        c.n_warps,
                        c.algo,
                        c.proto,
                        n,
                        b,
                    )
                })
            }
            event::P2P => {
                let p = unsafe { &d.u.p2p };
                parent_group = p.parent_group;
                Descr::P2p(P2pInfo {
                    comm_hash: 0,
                    func: func_named(unsafe { bytes(p.func) }, n, b),
                    count: p.count as u64,
                    dtype: names::dtype_code(unsafe { bytes(p.datatype) }),
                    peer: p.peer,
                    n_channels: p.n_channels,
                    user_tag: 0,
                })
            }
            event::PROXY_OP => proxy_op(unsafe { &d.u.proxy_op }),
            event::PROXY_STEP => Descr::ProxyStep {
                step: unsafe { d.u.proxy_step.step },
            },
            event::PROXY_CTRL => Descr::ProxyCtrl,
            event::KERNEL_CH => {
                let k = unsafe { &d.u.kernel_ch };
                Descr::KernelCh {
                    channel: k.channel_id,
                    start_timer: k.p_timer,
                }
            }
            event::NET_PLUGIN => Descr::NetPlugin {
                id: unsafe { d.u.net_plugin.id },
            },
            $($extra)*
            _ => return None,
        };
        Some(Start {
            parent_group,
            ..start(t, d.parent_obj, d.rank, descr)
        })
    }};
}

/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v5(d: &EventDescrV5, n: &Names, b: &Backend) -> Option<Start> {
    convert_v5_like!(d, n, b,)
}

/// A copy-engine collective (v6+).
///
/// # Safety
/// The strings are NULL or NCCL's NUL-terminated names.
#[allow(clippy::too_many_arguments)]
unsafe fn ce_coll(
    seq: u64,
    func: *const c_char,
    count: usize,
    root: c_int,
    datatype: *const c_char,
    n: &Names,
    b: &Backend,
) -> Descr {
    let null = std::ptr::null();
    Descr::CeColl(unsafe {
        coll_v4_fields(seq, func, count, root, datatype, 0, 0, null, null, n, b)
    })
}

fn ce_sync(s: &CeSyncDescr) -> Descr {
    Descr::CeSync {
        is_complete: s.is_complete != 0,
        nranks: s.n_ranks,
    }
}

fn ce_batch(s: &CeBatchDescr) -> Descr {
    Descr::CeBatch {
        num_ops: s.num_ops,
        total_bytes: s.total_bytes as u64,
    }
}

/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v6(d: &EventDescrV6, n: &Names, b: &Backend) -> Option<Start> {
    convert_v5_like!(d, n, b,
        event::CE_COLL => {
            let c = unsafe { &d.u.ce_coll };
            unsafe { ce_coll(c.seq_number, c.func, c.count, c.root, c.datatype, n, b) }
        }
        event::CE_SYNC => ce_sync(unsafe { &d.u.ce_coll_sync }),
        event::CE_BATCH => ce_batch(unsafe { &d.u.ce_coll_batch }),
    )
}

/// v7: v6's members, the user tag and symmetric-kernel flag added to the operations, and
/// kernel phases.
///
/// # Safety
/// `d` is NCCL's descriptor: the member its type names is initialized.
unsafe fn convert_v7(d: &EventDescrV7, n: &Names, b: &Backend) -> Option<Start> {
    let mut start = convert_v5_like!(d, n, b,
        event::CE_COLL => {
            let c = unsafe { &d.u.ce_coll };
            unsafe { ce_coll(c.seq_number, c.func, c.count, c.root, c.datatype, n, b) }
        }
        event::CE_SYNC => ce_sync(unsafe { &d.u.ce_coll_sync }),
        event::CE_BATCH => ce_batch(unsafe { &d.u.ce_coll_batch }),
        event::KERNEL_PHASE => {
            let p = unsafe { &d.u.kernel_phase };
            Descr::KernelPhase {
                channel: p.channel_id,
                phase: p.phase_id,
                start_timer: p.p_timer,
            }
        }
    )?;
    // SAFETY (union reads): the member matching the converted type.
    match &mut start.descr {
        Descr::Coll(c) => {
            let v7 = unsafe { &d.u.coll };
            c.user_tag = v7.user_tag;
            c.sym = v7.is_sym_coll != 0;
        }
        Descr::P2p(p) => p.user_tag = unsafe { d.u.p2p.user_tag },
        Descr::CeColl(c) => c.user_tag = unsafe { d.u.ce_coll.user_tag },
        _ => {}
    }
    Some(start)
}

// ---------------------------------------------------------------------------------------
// Per-version entry points.

unsafe extern "C" fn init_v1(context: *mut *mut c_void, mask: *mut c_int) -> NcclResult {
    unsafe { init_v123(1, context, mask) }
}
unsafe extern "C" fn init_v2(context: *mut *mut c_void, mask: *mut c_int) -> NcclResult {
    unsafe { init_v123(2, context, mask) }
}
unsafe extern "C" fn init_v3(context: *mut *mut c_void, mask: *mut c_int) -> NcclResult {
    unsafe { init_v123(3, context, mask) }
}

/// # Safety
/// NCCL's pointers.
unsafe fn init_v123(version: u8, context: *mut *mut c_void, mask: *mut c_int) -> NcclResult {
    let comm = CommInit {
        comm_hash: None,
        comm_name: std::ptr::null(),
        n_nodes: 0,
        nranks: 0,
        rank: -1,
    };
    unsafe { init_common(version, context, mask, comm, None) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    context: *mut *mut c_void,
    mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: LogFn,
) -> NcclResult {
    let comm = CommInit {
        comm_hash: Some(comm_hash),
        comm_name,
        n_nodes,
        nranks,
        rank,
    };
    unsafe { init_common(4, context, mask, comm, logfn) }
}

/// Generates the `init` of a version from v5 on (one signature since v5).
macro_rules! init_fn {
    ($name:ident, $version:expr) => {
        #[allow(clippy::too_many_arguments)]
        unsafe extern "C" fn $name(
            context: *mut *mut c_void,
            comm_id: u64,
            mask: *mut c_int,
            comm_name: *const c_char,
            n_nodes: c_int,
            nranks: c_int,
            rank: c_int,
            logfn: LogFn,
        ) -> NcclResult {
            let comm = CommInit {
                comm_hash: Some(comm_id),
                comm_name,
                n_nodes,
                nranks,
                rank,
            };
            unsafe { init_common($version, context, mask, comm, logfn) }
        }
    };
}

init_fn!(init_v5, 5);
init_fn!(init_v6, 6);
init_fn!(init_v7, 7);

/// Generates a version's `startEvent`: reads the type (its width differs by version)
/// before anything else, then converts.
macro_rules! start_fn {
    ($name:ident, $descr:ty, $convert:ident) => {
        unsafe extern "C" fn $name(
            ctx: *mut c_void,
            handle: *mut *mut c_void,
            d: *mut $descr,
        ) -> NcclResult {
            // SAFETY: NULL or NCCL's descriptor for this call.
            let Some(d) = (unsafe { d.as_ref() }) else {
                if !handle.is_null() {
                    // SAFETY: NCCL's out pointer.
                    unsafe { handle.write(std::ptr::null_mut()) };
                }
                return NCCL_SUCCESS;
            };
            let type_bit = d.type_ as u64;
            // SAFETY: forwarded NCCL pointers; the descriptor outlives the call.
            unsafe { start_common(ctx, handle, type_bit, |n, b| $convert(d, n, b)) }
        }
    };
}

start_fn!(start_v1, EventDescrV1, convert_v1);
start_fn!(start_v2, EventDescrV2, convert_v2);
start_fn!(start_v3, EventDescrV3, convert_v3);
start_fn!(start_v4, EventDescrV4, convert_v4);
start_fn!(start_v5, EventDescrV5, convert_v5);
start_fn!(start_v6, EventDescrV6, convert_v6);
start_fn!(start_v7, EventDescrV7, convert_v7);

const NAME: &CStr = c"Flare";

pub(crate) const V1: ProfilerV1 = ProfilerV1 {
    name: NAME.as_ptr(),
    init: init_v1,
    start_event: start_v1,
    stop_event,
    record_event_state: record_v1,
    finalize,
};
pub(crate) const V2: ProfilerV2 = ProfilerV2 {
    name: NAME.as_ptr(),
    init: init_v2,
    start_event: start_v2,
    stop_event,
    record_event_state: record_v1,
    finalize,
};
pub(crate) const V3: ProfilerV3 = ProfilerV3 {
    name: NAME.as_ptr(),
    init: init_v3,
    start_event: start_v3,
    stop_event,
    record_event_state: record_v1,
    finalize,
};
pub(crate) const V4: ProfilerV4 = ProfilerV4 {
    name: NAME.as_ptr(),
    init: init_v4,
    start_event: start_v4,
    stop_event,
    record_event_state: record_v4,
    finalize,
};
pub(crate) const V5: ProfilerV5 = ProfilerV5 {
    name: NAME.as_ptr(),
    init: init_v5,
    start_event: start_v5,
    stop_event,
    record_event_state: record_v4,
    finalize,
};
pub(crate) const V6: ProfilerV6 = ProfilerV6 {
    name: NAME.as_ptr(),
    init: init_v6,
    start_event: start_v6,
    stop_event,
    record_event_state: record_v4,
    finalize,
};
pub(crate) const V7: ProfilerV7 = ProfilerV7 {
    name: NAME.as_ptr(),
    init: init_v7,
    start_event: start_v7,
    stop_event,
    record_event_state: record_v4,
    finalize,
};
