//! One profiler context per NCCL communicator: its identity, mask, handle pools, and the
//! translation of NCCL events into tracer events (the encoding is documented in lib.rs).

use crate::abi::{event, state, LogFn, NCCL_LOG_INFO, NCCL_SUBSYS_PROFILE};
use crate::backend::Backend;
use crate::names::{self, Names};
use crate::pool::{pack_meta, unpack_meta, Pool, Slot};
use crate::{FLAG_DETAIL, FLAG_NCCL, ID_TAG, TYPE_COMM, TYPE_DROPS};
use flare_model::OpKind;
use flare_tracer::{clock, nccl, Event, NameId, Tag};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

const TASK_POOL: u8 = 0;
const PROXY_POOL: u8 = 1;

/// Event ids: "NC" in the top 16 bits keeps them apart from other async ids in the process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    ID_TAG | (NEXT_ID.fetch_add(1, Ordering::Relaxed) & 0x0000_FFFF_FFFF_FFFF)
}

/// A function name resolved to the tracer's vocabulary.
#[derive(Clone, Copy, Debug)]
pub struct Func {
    pub name: NameId,
    pub kind: OpKind,
}

/// A collective (Coll, CeColl) as every version describes it.
#[derive(Clone, Copy, Debug)]
pub struct CollInfo {
    /// v1-v3 carry the communicator per event (0: unknown).
    pub comm_hash: u64,
    pub seq: u64,
    pub func: Func,
    pub count: u64,
    pub dtype: u8,
    pub root: i32,
    pub n_channels: u8,
    pub n_warps: u8,
    /// Indices into `names::ALGOS` / `names::PROTOS` (their length: unknown).
    pub algo: usize,
    pub proto: usize,
    /// v7: a symmetric-memory kernel variant.
    pub sym: bool,
    /// v7: the call's user profiler tag (0: untagged, and before v7).
    pub user_tag: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct P2pInfo {
    pub comm_hash: u64,
    pub func: Func,
    pub count: u64,
    pub dtype: u8,
    pub peer: i32,
    pub n_channels: u8,
    /// v7: the call's user profiler tag (0: untagged).
    pub user_tag: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct ApiInfo {
    pub func: Func,
    pub count: u64,
    pub dtype: u8,
    pub root: i32,
    pub graph_captured: bool,
}

/// What a detail `Instant` carries.
struct Detail {
    n_channels: u8,
    n_warps: u8,
    dtype: u8,
    sym: bool,
    root_or_peer: i32,
    count: u64,
    user_tag: u64,
}

impl Detail {
    fn of_coll(c: &CollInfo, n_channels: u8, n_warps: u8) -> Detail {
        Detail {
            n_channels,
            n_warps,
            dtype: c.dtype,
            sym: c.sym,
            root_or_peer: c.root,
            count: c.count,
            user_tag: c.user_tag,
        }
    }
}

/// An event NCCL starts, independent of the descriptor version.
#[derive(Clone, Copy, Debug)]
pub enum Descr {
    Group,
    Coll(CollInfo),
    P2p(P2pInfo),
    ProxyOp {
        pid: i32,
        channel: u8,
        peer: i32,
        n_steps: i32,
        chunk_size: i32,
        is_send: bool,
    },
    ProxyStep {
        step: i32,
    },
    ProxyCtrl,
    KernelCh {
        channel: u8,
        /// GPU global timer at the channel's start (v4+; 0 before).
        start_timer: u64,
    },
    NetPlugin {
        id: i64,
    },
    /// v7: one phase of a kernel on one channel.
    KernelPhase {
        channel: u8,
        phase: u8,
        /// GPU global timer at the phase's start.
        start_timer: u64,
    },
    GroupApi {
        graph_captured: bool,
        depth: i32,
    },
    CollApi(ApiInfo),
    P2pApi(ApiInfo),
    KernelLaunch,
    CeColl(CollInfo),
    CeSync {
        is_complete: bool,
        nranks: i32,
    },
    CeBatch {
        num_ops: i32,
        total_bytes: u64,
    },
}

/// `startEvent`'s arguments.
pub struct Start {
    /// The `ncclProfile*` bit.
    pub type_bit: u64,
    pub parent: *mut c_void,
    /// v5+ Coll/P2p: the Group event, used when `parent` (the API event) is not ours.
    pub parent_group: *mut c_void,
    pub rank: i32,
    /// v1-v3: the communicator's user name, with the hash in `CollInfo`/`P2pInfo`.
    pub comm_name: *const c_char,
    pub descr: Descr,
}

/// How `init` described the communicator (v4+), or what v1-v3 leave unknown.
pub struct CommInit {
    pub comm_hash: Option<u64>,
    pub comm_name: *const c_char,
    pub n_nodes: i32,
    pub nranks: i32,
    pub rank: i32,
}

pub struct Context {
    pub mask: u64,
    pid: i32,
    nranks: u32,
    /// Communicator name id: from init (v4+) or the first event carrying it (v1-v3).
    group: OnceLock<u32>,
    pools: [Pool; 2],
    /// Per (peer, direction) P2P counters: Flare numbers P2P ops per peer pair and
    /// direction so a send meets its receive across ranks.
    p2p_seq: Box<[AtomicU32]>,
    /// One reference for NCCL (until finalize) plus one per slot in use.
    refs: AtomicUsize,
    finalized: AtomicBool,
    dropped: AtomicU64,
    names: &'static Names,
    backend: &'static Backend,
    logfn: LogFn,
}

// Shared between NCCL's threads through the raw context pointer: every mutable field is
// atomic or set before the pointer is published; the raw pointers inside (slot
// back-references, the log function) point at 'static or context-owned data.
unsafe impl Sync for Context {}
unsafe impl Send for Context {}

/// Sizes from the environment.
pub struct PoolSizes {
    pub task: usize,
    pub proxy: usize,
}

impl PoolSizes {
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<PoolSizes, String> {
        let size = |k: &str, default: usize| -> Result<usize, String> {
            match get(k) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<usize>() {
                    Ok(n) if (16..=1 << 22).contains(&n) => Ok(n),
                    _ => Err(format!(
                        "{k}={v:?}: expected an event count in 16..=4194304"
                    )),
                },
            }
        };
        Ok(PoolSizes {
            task: size("FLARE_NCCL_TASK_EVENTS", 1024)?,
            proxy: size("FLARE_NCCL_PROXY_EVENTS", 4096)?,
        })
    }
}

fn type_index(bit: u64) -> u16 {
    bit.trailing_zeros() as u16
}

fn pool_of(type_bit: u64) -> u8 {
    const TASKS: u64 = event::GROUP
        | event::COLL
        | event::P2P
        | event::GROUP_API
        | event::COLL_API
        | event::P2P_API
        | event::KERNEL_LAUNCH
        | event::CE_COLL;
    if type_bit & TASKS != 0 {
        TASK_POOL
    } else {
        PROXY_POOL
    }
}

impl Context {
    /// A new context, leaked to a raw pointer for NCCL; freed when finalized and idle.
    pub fn create(
        mask: u64,
        sizes: &PoolSizes,
        comm: &CommInit,
        peers: usize,
        names: &'static Names,
        backend: &'static Backend,
        logfn: LogFn,
    ) -> *mut Context {
        let ctx = Box::new(Context {
            mask,
            pid: std::process::id() as i32,
            nranks: comm.nranks.max(0) as u32,
            group: OnceLock::new(),
            pools: [
                Pool::new(sizes.task, TASK_POOL),
                Pool::new(sizes.proxy, PROXY_POOL),
            ],
            p2p_seq: (0..peers.clamp(1, 1 << 20) * 2)
                .map(|_| AtomicU32::new(0))
                .collect(),
            refs: AtomicUsize::new(1),
            finalized: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            names,
            backend,
            logfn,
        });
        let raw = Box::into_raw(ctx);
        // SAFETY: just allocated; not yet shared with anyone.
        let ctx = unsafe { &*raw };
        for pool in &ctx.pools {
            for slot in pool.slots.iter() {
                slot.ctx.store(raw, Ordering::Relaxed);
            }
        }
        if let Some(hash) = comm.comm_hash {
            ctx.learn_comm(hash, comm.comm_name, comm.rank, comm.n_nodes);
        }
        raw
    }

    /// Writes a message to NCCL's log (v4+; earlier versions pass no logger).
    pub fn log(logfn: LogFn, level: c_int, msg: &str) {
        let Some(f) = logfn else { return };
        let Ok(text) = CString::new(msg.replace('\0', " ")) else {
            return;
        };
        // SAFETY: NCCL's logger is printf-like; "%s" with one C string argument.
        unsafe {
            f(
                level,
                NCCL_SUBSYS_PROFILE,
                c"flare-nccl-profiler".as_ptr(),
                0,
                c"%s".as_ptr(),
                text.as_ptr(),
            )
        };
    }

    fn group(&self) -> u32 {
        self.group.get().copied().unwrap_or(0)
    }

    /// Names the communicator (once) and records its identity as an instant event.
    fn learn_comm(&self, hash: u64, comm_name: *const c_char, rank: i32, n_nodes: i32) {
        self.group.get_or_init(|| {
            let group = self.backend.intern(&names::comm_name(hash)).0;
            let label = if comm_name.is_null() {
                NameId::NONE
            } else {
                // SAFETY: NCCL passes NULL or a NUL-terminated communicator name.
                let s = unsafe { CStr::from_ptr(comm_name) }.to_string_lossy();
                if s.is_empty() {
                    NameId::NONE
                } else {
                    self.backend.intern(&s)
                }
            };
            self.backend.record(&Event {
                ts_ns: clock::now_ns(),
                name: label.0,
                tag: Tag::Instant as u8,
                kind: OpKind::HostOther as u8,
                flags: FLAG_NCCL | TYPE_COMM,
                id: 0,
                a: hash,
                b: (group as u64) << 32 | rank as u32 as u64,
                c: (self.nranks as u64) << 32 | n_nodes as u32 as u64,
            });
            group
        });
    }

    /// The slot behind a handle NCCL passed as a parent, if it is one of ours.
    fn own_slot(&self, p: *mut c_void) -> Option<&Slot> {
        if p.is_null() {
            return None;
        }
        self.pools.iter().find_map(|pool| pool.slot_at(p))
    }

    /// Links `child` to the parent event; returns the parent's id (0: none).
    fn link_parent(&self, child: &Slot, s: &Start) -> u64 {
        let foreign = matches!(s.descr, Descr::ProxyOp { pid, .. } if pid != self.pid);
        if foreign {
            // A PXN proxy op: its parent lives in another process's address space.
            return 0;
        }
        let Some(parent) = self
            .own_slot(s.parent)
            .or_else(|| self.own_slot(s.parent_group))
        else {
            return 0;
        };
        if parent.try_retain() {
            child
                .parent
                .store(parent as *const Slot as *mut Slot, Ordering::Release);
        }
        // Read after retaining: while we hold it, the id is the parent's. A parent already
        // recycled (no reference left) still holds its id until reused, FIFO-late.
        parent.id.load(Ordering::Acquire)
    }

    fn p2p_seq(&self, peer: i32, kind: OpKind) -> u32 {
        let dir = usize::from(kind == OpKind::Recv);
        match usize::try_from(peer) {
            Ok(p) if p * 2 + 1 < self.p2p_seq.len() => {
                self.p2p_seq[p * 2 + dir].fetch_add(1, Ordering::Relaxed)
            }
            _ => u32::MAX,
        }
    }

    /// The detail `Instant` after a Coll, P2p or CeColl begin (see lib.rs).
    fn detail(&self, id: u64, name: NameId, flags: u16, d: Detail) {
        self.backend.record(&Event {
            ts_ns: clock::now_ns(),
            name: name.0,
            tag: Tag::Instant as u8,
            kind: OpKind::HostOther as u8,
            flags: flags | FLAG_DETAIL,
            id,
            a: d.n_channels as u64
                | (d.n_warps as u64) << 8
                | (d.dtype as u64) << 16
                | (d.sym as u64) << 24
                | (d.root_or_peer as u32 as u64) << 32,
            b: d.count,
            c: d.user_tag,
        });
    }

    /// startEvent: a handle, or null when the type is masked out or no slot is free.
    pub fn start(&self, s: &Start) -> *mut c_void {
        if s.type_bit & self.mask == 0 || !s.type_bit.is_power_of_two() {
            return std::ptr::null_mut();
        }
        // v1-v3 identify the communicator per event.
        if let Descr::Coll(CollInfo { comm_hash, .. }) | Descr::P2p(P2pInfo { comm_hash, .. }) =
            s.descr
        {
            if comm_hash != 0 && self.group.get().is_none() {
                self.learn_comm(comm_hash, s.comm_name, s.rank, 0);
            }
        }
        let Some(slot) = self.pools[pool_of(s.type_bit) as usize].take() else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return std::ptr::null_mut();
        };
        self.refs.fetch_add(1, Ordering::Relaxed);
        let id = next_id();
        let flags = FLAG_NCCL | type_index(s.type_bit);
        let n = self.names;
        let group = self.group();
        slot.parent.store(std::ptr::null_mut(), Ordering::Relaxed);
        slot.aux.store(0, Ordering::Relaxed);
        let parent_id = self.link_parent(slot, s);
        // name, kind, a, low half of b, high half of c (see the table in lib.rs).
        let (name, kind, a, b_lo, c_hi): (NameId, OpKind, u64, u32, u32) = match s.descr {
            Descr::Group => (n.group, OpKind::HostOther, 0, 0, self.nranks),
            Descr::Coll(c) | Descr::CeColl(c) => (
                c.func.name,
                c.func.kind,
                c.count.saturating_mul(names::dtype_size(c.dtype)),
                c.seq as u32,
                self.nranks,
            ),
            Descr::P2p(p) => (
                p.func.name,
                p.func.kind,
                p.count.saturating_mul(names::dtype_size(p.dtype)),
                self.p2p_seq(p.peer, p.func.kind),
                self.nranks,
            ),
            Descr::ProxyOp {
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
                ..
            } => (
                if is_send { n.proxy_send } else { n.proxy_recv },
                OpKind::HostOther,
                (n_steps.max(0) as u64).saturating_mul(chunk_size.max(0) as u64),
                peer as u32,
                nccl::ProxyOp::pack_c_hi(channel, is_send, n_steps.max(0) as u32),
            ),
            Descr::ProxyStep { step } => (n.proxy_step, OpKind::HostOther, 0, step as u32, 0),
            Descr::ProxyCtrl => (n.proxy_ctrl, OpKind::HostOther, 0, 0, 0),
            Descr::KernelCh {
                channel,
                start_timer,
            } => (
                n.kernel_ch,
                OpKind::HostOther,
                start_timer,
                channel as u32,
                0,
            ),
            Descr::KernelPhase {
                channel,
                phase,
                start_timer,
            } => (
                n.kernel_phase[(phase as usize).min(names::KERNEL_PHASES.len() - 1)],
                OpKind::HostOther,
                start_timer,
                channel as u32,
                phase as u32,
            ),
            Descr::NetPlugin { id: plugin_id } => {
                (n.net, OpKind::HostOther, plugin_id as u64, 0, 0)
            }
            Descr::GroupApi {
                graph_captured,
                depth,
            } => (
                n.group_api,
                OpKind::HostOther,
                0,
                depth as u32,
                graph_captured as u32,
            ),
            Descr::CollApi(api) | Descr::P2pApi(api) => (
                api.func.name,
                OpKind::HostOther,
                api.count.saturating_mul(names::dtype_size(api.dtype)),
                api.root as u32,
                api.graph_captured as u32,
            ),
            Descr::KernelLaunch => (n.kernel_launch, OpKind::HostOther, 0, 0, 0),
            Descr::CeSync {
                is_complete,
                nranks,
            } => (
                n.ce_sync,
                OpKind::HostOther,
                nranks.max(0) as u64,
                is_complete as u32,
                0,
            ),
            Descr::CeBatch {
                num_ops,
                total_bytes,
            } => (
                n.ce_batch,
                OpKind::HostOther,
                total_bytes,
                num_ops as u32,
                0,
            ),
        };
        slot.id.store(id, Ordering::Relaxed);
        slot.meta
            .store(pack_meta(name.0, kind as u8, flags), Ordering::Relaxed);
        slot.group.store(group, Ordering::Relaxed);
        slot.open.store(true, Ordering::Relaxed);
        // Publishes the fields above to whichever thread stops or updates the event.
        slot.refs.store(1, Ordering::Release);
        self.backend.record(&Event {
            ts_ns: clock::now_ns(),
            name: name.0,
            tag: Tag::AsyncBegin as u8,
            kind: kind as u8,
            flags,
            id,
            a,
            b: (group as u64) << 32 | b_lo as u64,
            c: (c_hi as u64) << 32 | parent_id as u32 as u64,
        });
        match s.descr {
            Descr::Coll(c) => self.detail(
                id,
                n.algo_proto[c.algo][c.proto],
                flags,
                Detail::of_coll(&c, c.n_channels, c.n_warps),
            ),
            Descr::CeColl(c) => self.detail(id, n.ce_detail, flags, Detail::of_coll(&c, 0, 0)),
            Descr::P2p(p) => self.detail(
                id,
                n.p2p_detail,
                flags,
                Detail {
                    n_channels: p.n_channels,
                    n_warps: 0,
                    dtype: p.dtype,
                    sym: false,
                    root_or_peer: p.peer,
                    count: p.count,
                    user_tag: p.user_tag,
                },
            ),
            _ => {}
        }
        slot as *const Slot as *mut c_void
    }

    /// finalize: records the drop count and gives up NCCL's reference.
    ///
    /// # Safety
    /// `raw` came from [`Context::create`] and NCCL finalizes it once.
    pub unsafe fn finalize(raw: *mut Context) {
        // SAFETY: alive until its last reference goes, which is at the earliest below.
        let ctx = unsafe { &*raw };
        if ctx.finalized.swap(true, Ordering::AcqRel) {
            return;
        }
        let dropped = ctx.dropped.load(Ordering::Relaxed);
        ctx.backend.record(&Event {
            ts_ns: clock::now_ns(),
            name: ctx.names.dropped.0,
            tag: Tag::Counter as u8,
            kind: OpKind::HostOther as u8,
            flags: FLAG_NCCL | TYPE_DROPS,
            id: 0,
            a: dropped,
            b: (ctx.group() as u64) << 32,
            c: 0,
        });
        if dropped > 0 {
            Context::log(
                ctx.logfn,
                NCCL_LOG_INFO,
                &format!("Flare: {dropped} NCCL events dropped: no free handle (raise FLARE_NCCL_TASK_EVENTS / FLARE_NCCL_PROXY_EVENTS)"),
            );
        }
        // SAFETY: forwarded contract.
        unsafe { Context::release(raw) };
    }

    /// Drops one reference; the last one frees the context.
    ///
    /// # Safety
    /// The caller owns one reference of `raw`'s count.
    unsafe fn release(raw: *mut Context) {
        // SAFETY: the caller's reference keeps it alive until this decrement.
        if unsafe { &*raw }.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: last reference: nobody can reach the context any more.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

/// The end of an event: AsyncEnd, then the handle's own reference goes.
///
/// # Safety
/// `slot` is a handle this plugin returned from startEvent.
pub unsafe fn stop(slot: &Slot) {
    if !slot.open.swap(false, Ordering::AcqRel) {
        return; // stopped already
    }
    let (name, kind, flags) = unpack_meta(slot.meta.load(Ordering::Relaxed));
    let ctx = slot.ctx.load(Ordering::Relaxed);
    // SAFETY: the slot's reference keeps its context alive.
    let backend = unsafe { &*ctx }.backend;
    backend.record(&Event {
        ts_ns: clock::now_ns(),
        name,
        tag: Tag::AsyncEnd as u8,
        kind,
        flags,
        id: slot.id.load(Ordering::Relaxed),
        a: slot.aux.load(Ordering::Relaxed),
        b: (slot.group.load(Ordering::Relaxed) as u64) << 32,
        c: 0,
    });
    // SAFETY: the slot's own reference, held since start.
    unsafe { release(slot) };
}

/// Drops one reference of a slot; the last one recycles it and releases its parent.
///
/// # Safety
/// The caller owns one reference of `slot`.
unsafe fn release(slot: &Slot) {
    let mut cur = slot;
    loop {
        if cur.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // Read everything before the slot goes back: it may be reused at once.
        let parent = cur.parent.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let ctx = cur.ctx.load(Ordering::Relaxed);
        // SAFETY: the slot was in use, so its context holds a reference for it.
        let c = unsafe { &*ctx };
        c.pools[cur.pool as usize].give_back(cur);
        // SAFETY: the reference taken for this slot at start.
        unsafe { Context::release(ctx) };
        if parent.is_null() {
            return;
        }
        // SAFETY: the child held a reference on the parent, so it is still a live slot.
        cur = unsafe { &*parent };
    }
}

/// A state transition: AsyncState with the state code in `a` and its argument in `b`, `c`.
pub fn record_state(slot: &Slot, state_code: c_int, b: u64, c: u64) {
    if !slot.open.load(Ordering::Acquire) {
        return;
    }
    if state_code == state::KERNEL_CH_STOP || state_code == state::KERNEL_PHASE_STOP {
        slot.aux.store(b, Ordering::Relaxed);
    }
    let (name, kind, flags) = unpack_meta(slot.meta.load(Ordering::Relaxed));
    let ctx = slot.ctx.load(Ordering::Relaxed);
    // SAFETY: an open slot holds its context.
    let backend = unsafe { &*ctx }.backend;
    backend.record(&Event {
        ts_ns: clock::now_ns(),
        name,
        tag: Tag::AsyncState as u8,
        kind,
        flags,
        id: slot.id.load(Ordering::Relaxed),
        a: state_code as u32 as u64,
        b,
        c,
    });
}
