//! NCCL profiler plugin that records NCCL's events into Flare's in-process tracer.
//!
//! Build it as `libnccl-profiler-flare.so` and run with `NCCL_PROFILER_PLUGIN=flare`
//! (README.md). The library exports `ncclProfiler_v1` to `ncclProfiler_v7`; NCCL takes the
//! newest it knows, so NCCL 2.23 and later all find a table. The ABI types are in [`abi`].
//!
//! # What NCCL calls do
//!
//! - `init` (one per communicator) attaches to the process's tracer (`backend.rs`: the
//!   application's `libflare` when loaded, else the plugin's own, initialized from the
//!   environment), reads the event mask ([`mask`]), writes it to NCCL's
//!   `eActivationMask`, and returns a context holding two preallocated handle pools
//!   (`pool.rs`). It is the only call that can fail.
//! - `startEvent` takes a handle from the pool (none free: NULL handle, the drop is
//!   counted), records an `AsyncBegin`; `recordEventState` records an `AsyncState`;
//!   `stopEvent` records an `AsyncEnd`. No lock, no allocation, no blocking on these
//!   paths (a function name NCCL added after this plugin was written is interned on first
//!   sight, the one exception).
//! - `finalize` records the communicator's drop count. Events still open stay open in the
//!   trace (a hung collective's in-flight ops are what diagnosis looks for).
//!
//! # Event encoding
//!
//! Every event the plugin records has `flags = FLAG_NCCL | t` where `t` is the NCCL event
//! type's bit index (`ncclProfileColl` = 1 << 1: `t` = 1); `id` is the event's async id
//! (`ID_TAG` in the top 16 bits); the high 32 bits of `b` are the communicator's name id,
//! `nccl:<commHash as 16 hex digits>` (0 when NCCL did not say: v1-v3 under NCCL >= 2.27);
//! the low 32 bits of `c` are the low 32 bits of the parent event's id (0: none). Per type:
//!
//! | NCCL event | name | kind | `a` | `b` low 32 | `c` high 32 |
//! |---|---|---|---|---|---|
//! | Group | `nccl:group` | HostOther | 0 | 0 | nranks |
//! | Coll | function (`AllReduce`) | its op kind | count x datatype size (bytes) | seqNumber | nranks |
//! | P2p | `Send` / `Recv` | Send / Recv | bytes | number of the op per (peer, direction) | nranks |
//! | ProxyOp | `nccl:proxy_send` / `nccl:proxy_recv` | HostOther | nSteps x chunkSize | peer | channel << 24 \| send << 23 \| nSteps |
//! | ProxyStep | `nccl:proxy_step` | HostOther | 0 | step | 0 |
//! | ProxyCtrl | `nccl:proxy_ctrl` | HostOther | 0 | 0 | 0 |
//! | KernelCh | `nccl:kernel_ch` | HostOther | GPU start timer (ns, v4+) | channel | 0 |
//! | KernelPhase (v7) | `nccl:initial_sync` / `nccl:compute` / `nccl:final_sync` | HostOther | GPU start timer | channel | phaseId |
//! | NetPlugin | `nccl:net` | HostOther | plugin event id | 0 | 0 |
//! | GroupApi | `nccl:group_api` | HostOther | 0 | group depth | graph captured (0/1) |
//! | CollApi / P2pApi | function | HostOther | bytes | root (-1 for P2P) | graph captured (0/1) |
//! | KernelLaunch | `nccl:kernel_launch` | HostOther | 0 | 0 | 0 |
//! | CeColl | function | its op kind | bytes | seqNumber | nranks |
//! | CeSync | `nccl:ce_sync` | HostOther | nRanks | isComplete | 0 |
//! | CeBatch | `nccl:ce_batch` | HostOther | totalBytes | numOps | 0 |
//!
//! nranks is the communicator size from `init` (v4+), 0 when unknown (v1-v3). Only Coll,
//! P2p and CeColl carry a communication kind: children (channels, proxy ops) are
//! `HostOther` so nothing counts an operation twice.
//!
//! Right after a Coll, P2p or CeColl `AsyncBegin`, an `Instant` with the same `id` and
//! `flags | FLAG_DETAIL` carries the details: name `<ALGO>/<PROTO>` (`RING/SIMPLE`;
//! `nccl:p2p`, `nccl:ce`), `a` = nChannels | nWarps << 8 | datatype code << 16 |
//! symmetric kernel (v7 `isSymColl`) << 24 | (root or peer as u32) << 32, `b` = count
//! (elements), `c` = the call's user tag (v7 `userTag`; 0: untagged). Datatype codes are
//! `ncclDataType_t`'s (0xFF: unknown, bytes then 0).
//!
//! `AsyncState`: `a` = the `ncclProfilerEventState_t` code; `b` = its argument: transSize
//! (ProxyStep states, v4+; ProxyOp states, v1-v3, with steps in `c`), appendedProxyOps
//! (ProxyCtrl states), the GPU stop timer (`KernelChStop`, 22; `KernelPhaseStop`, 31). A
//! KernelCh's or KernelPhase's `AsyncEnd` repeats the GPU stop timer in `a`.
//!
//! Also: at `init` (v4+; v1-v3 at the first event naming the communicator) an `Instant`
//! with `flags = FLAG_NCCL | TYPE_COMM`, name = the communicator's user name, `a` =
//! commHash, `b` = group name id << 32 | rank in the communicator, `c` = nranks << 32 |
//! nNodes; at `finalize` a `Counter` `nccl:dropped_events` (`flags = FLAG_NCCL |
//! TYPE_DROPS`, `b` = group << 32) with the events dropped for lack of handles.
//!
//! Times are the host's `CLOCK_MONOTONIC` at the call. A Coll's `AsyncEnd` is when NCCL
//! stopped it on the host (right after enqueueing); the operation ends with its last
//! KernelCh (GPU timers) or ProxyOp.

pub mod abi;
mod backend;
mod context;
pub mod mask;
mod names;
mod plugin;
mod pool;

pub use backend::FLARE_C_ABI_VERSION;

pub use flare_tracer::nccl::{FLAG_DETAIL, FLAG_NCCL, ID_TAG, TYPE_COMM, TYPE_DROPS, TYPE_MASK};

// The tables NCCL looks up by name (dlsym), newest first.
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v7: abi::ProfilerV7 = plugin::V7;
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v6: abi::ProfilerV6 = plugin::V6;
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v5: abi::ProfilerV5 = plugin::V5;
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v4: abi::ProfilerV4 = plugin::V4;
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v3: abi::ProfilerV3 = plugin::V3;
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v2: abi::ProfilerV2 = plugin::V2;
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclProfiler_v1: abi::ProfilerV1 = plugin::V1;
