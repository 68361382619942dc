//! Flare's C ABI: the process-wide tracer of `flare_tracer` behind plain C functions.
//!
//! The header `include/flare.h` is generated from this file by `build.rs` (cbindgen) and
//! committed; a test fails when it is stale. The library is built as `libflare.so` (soname
//! `libflare.so`, so a plugin can find an already loaded copy with `RTLD_NOLOAD`) and
//! `libflare.a`.
//!
//! Contract of every function:
//! - it never unwinds into C: each body runs under `catch_unwind`, a panic becomes
//!   `FLARE_ERR_INTERNAL` (or the documented neutral value) and a message in
//!   [`flare_last_error`];
//! - NULL pointers and invalid UTF-8 are reported as `FLARE_ERR_INVALID_ARGUMENT`, never
//!   dereferenced;
//! - the recording calls (`flare_span_begin`, `flare_span_end`, `flare_step`,
//!   `flare_counter`, `flare_instant`, `flare_record`) take no lock and do not allocate.
//!
//! Errors are kept per thread (like `dlerror`): [`flare_last_error`] describes the latest
//! failed call of the calling thread.

use flare_model::OpKind;
use flare_tracer::{Config, Event, NameId, SpanArgs, Tag, TracerError};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Version of this C ABI. Bumped on any incompatible change of a function or a struct.
pub const FLARE_ABI_VERSION: u32 = 1;

/// No name (an event without a name, or a failed `flare_intern`).
pub const FLARE_NAME_NONE: u32 = 0;
/// Returned by `flare_intern` when the name table is full: events still record, unnamed.
pub const FLARE_NAME_OVERFLOW: u32 = 0xFFFF_FFFF;

/// Op kinds (`flare_span_begin`, `flare_event_t.kind`): the values of `flare_model::OpKind`.
pub const FLARE_KIND_COMPUTE: u8 = 0;
pub const FLARE_KIND_ALL_REDUCE: u8 = 1;
pub const FLARE_KIND_ALL_GATHER: u8 = 2;
pub const FLARE_KIND_REDUCE_SCATTER: u8 = 3;
pub const FLARE_KIND_ALL_TO_ALL: u8 = 4;
pub const FLARE_KIND_BROADCAST: u8 = 5;
pub const FLARE_KIND_REDUCE: u8 = 6;
pub const FLARE_KIND_BARRIER: u8 = 7;
pub const FLARE_KIND_SEND: u8 = 8;
pub const FLARE_KIND_RECV: u8 = 9;
pub const FLARE_KIND_SEND_RECV: u8 = 10;
pub const FLARE_KIND_DATA_LOADER: u8 = 11;
pub const FLARE_KIND_GARBAGE_COLLECTION: u8 = 12;
pub const FLARE_KIND_OPTIMIZER: u8 = 13;
pub const FLARE_KIND_CHECKPOINT: u8 = 14;
pub const FLARE_KIND_HOST_OTHER: u8 = 15;

/// Event tags (`flare_event_t.tag`): the values of `flare_tracer::Tag`.
pub const FLARE_TAG_BEGIN: u8 = 1;
pub const FLARE_TAG_END: u8 = 2;
pub const FLARE_TAG_ASYNC_BEGIN: u8 = 3;
pub const FLARE_TAG_ASYNC_END: u8 = 4;
pub const FLARE_TAG_STEP: u8 = 5;
pub const FLARE_TAG_COUNTER: u8 = 6;
pub const FLARE_TAG_INSTANT: u8 = 7;
pub const FLARE_TAG_ASYNC_STATE: u8 = 8;

const _: () = {
    assert!(FLARE_KIND_COMPUTE == OpKind::Compute as u8);
    assert!(FLARE_KIND_ALL_REDUCE == OpKind::AllReduce as u8);
    assert!(FLARE_KIND_ALL_GATHER == OpKind::AllGather as u8);
    assert!(FLARE_KIND_REDUCE_SCATTER == OpKind::ReduceScatter as u8);
    assert!(FLARE_KIND_ALL_TO_ALL == OpKind::AllToAll as u8);
    assert!(FLARE_KIND_BROADCAST == OpKind::Broadcast as u8);
    assert!(FLARE_KIND_REDUCE == OpKind::Reduce as u8);
    assert!(FLARE_KIND_BARRIER == OpKind::Barrier as u8);
    assert!(FLARE_KIND_SEND == OpKind::Send as u8);
    assert!(FLARE_KIND_RECV == OpKind::Recv as u8);
    assert!(FLARE_KIND_SEND_RECV == OpKind::SendRecv as u8);
    assert!(FLARE_KIND_DATA_LOADER == OpKind::DataLoader as u8);
    assert!(FLARE_KIND_GARBAGE_COLLECTION == OpKind::GarbageCollection as u8);
    assert!(FLARE_KIND_OPTIMIZER == OpKind::Optimizer as u8);
    assert!(FLARE_KIND_CHECKPOINT == OpKind::Checkpoint as u8);
    assert!(FLARE_KIND_HOST_OTHER == OpKind::HostOther as u8);
    assert!(FLARE_TAG_BEGIN == Tag::Begin as u8);
    assert!(FLARE_TAG_END == Tag::End as u8);
    assert!(FLARE_TAG_ASYNC_BEGIN == Tag::AsyncBegin as u8);
    assert!(FLARE_TAG_ASYNC_END == Tag::AsyncEnd as u8);
    assert!(FLARE_TAG_STEP == Tag::Step as u8);
    assert!(FLARE_TAG_COUNTER == Tag::Counter as u8);
    assert!(FLARE_TAG_INSTANT == Tag::Instant as u8);
    assert!(FLARE_TAG_ASYNC_STATE == Tag::AsyncState as u8);
    assert!(FLARE_NAME_OVERFLOW == NameId::OVERFLOW.0);
};

/// What a call did. Every function that can fail returns one of these.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum FlareStatus {
    FLARE_OK = 0,
    /// A NULL pointer, a string that is not UTF-8, an unknown kind or tag, an out-of-range
    /// configuration value.
    FLARE_ERR_INVALID_ARGUMENT = 1,
    /// The configuration (arguments or environment) is inconsistent, e.g. rank >= world size.
    FLARE_ERR_CONFIG = 2,
    /// Creating the shared-memory file or writing the dump failed.
    FLARE_ERR_IO = 3,
    /// The tracer already runs with another identity (job, rank, local rank, world size).
    FLARE_ERR_ALREADY_INITIALIZED = 4,
    /// Call `flare_init` (or `flare_init_from_env`) first.
    FLARE_ERR_NOT_INITIALIZED = 5,
    /// A bug in Flare (a caught panic); the message says where.
    FLARE_ERR_INTERNAL = 6,
}

use FlareStatus::*;

/// Who this process is. Fill it with `flare_config_default` (everything "from the
/// environment"), then set what you know. Pointers are read during `flare_init` only.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct FlareConfig {
    /// Job id (UTF-8). NULL: `FLARE_JOB_ID`, `TORCHELASTIC_RUN_ID` (unless "none"),
    /// `SLURM_JOB_ID`, "torchrun-MASTER_ADDR-MASTER_PORT" for plain torchrun, "local".
    pub job_id: *const c_char,
    /// Directory of the shared-memory ring file. NULL: `FLARE_SHM_DIR`, else `/dev/shm`.
    pub shm_dir: *const c_char,
    /// File the unconsumed events are written to at `flare_shutdown`. NULL: `FLARE_DUMP`;
    /// an empty string: no dump.
    pub dump_path: *const c_char,
    /// Global rank. -1: `RANK`, `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, else 0.
    pub rank: i32,
    /// Rank on this node. -1: `LOCAL_RANK`, `SLURM_LOCALID`, ..., else 0.
    pub local_rank: i32,
    /// Number of ranks. -1: `WORLD_SIZE`, `SLURM_NTASKS`, ..., else 1.
    pub world_size: i32,
    /// Events per thread ring (a power of two >= 64). 0: `FLARE_RING_EVENTS`, else 16384.
    pub ring_events: u32,
    /// Most threads that record at once. 0: `FLARE_MAX_THREADS`, else 64.
    pub max_threads: u32,
}

/// Arguments of a span: bytes moved (or flops), the communicator, and the op's place in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlareSpanArgs {
    /// Bytes moved (communication) or flops (compute).
    pub amount: u64,
    /// Communicator name (from `flare_intern`), 0 when none.
    pub group: u32,
    /// Sequence number of the op in its communicator.
    pub seq: u32,
    /// Number of ranks in the communicator.
    pub group_size: u32,
    /// Time from the host issuing the op to it starting, when known.
    pub issue_latency_ns: u32,
}

/// What the tracer did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlareStats {
    /// Events written into rings (all threads).
    pub written: u64,
    /// Events dropped because a ring was full (no agent draining, or it fell behind).
    pub dropped_full: u64,
    /// Events dropped because every ring was taken (more threads than `max_threads`).
    pub dropped_no_ring: u64,
    /// Rings claimed so far.
    pub rings_in_use: u32,
}

/// A raw event, exactly as stored in the rings (48 bytes). See `flare_record`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FlareEvent {
    /// `CLOCK_MONOTONIC` nanoseconds (`flare_now_ns`); 0: now.
    pub ts_ns: u64,
    /// A name id from `flare_intern`.
    pub name: u32,
    /// One of `FLARE_TAG_*`.
    pub tag: u8,
    /// One of `FLARE_KIND_*`.
    pub kind: u8,
    /// Producer-defined bits (the NCCL profiler plugin documents its own).
    pub flags: u16,
    /// Pairs async begin, state and end events; 0 for nested spans.
    pub id: u64,
    /// Bytes or flops (spans), iteration (step), value (counter), state code (async state).
    pub a: u64,
    /// Communicator name id (high 32 bits) and sequence number (low 32 bits).
    pub b: u64,
    /// Communicator size (high 32 bits) and issue latency in ns (low 32 bits).
    pub c: u64,
}

// `flare_record` hands a `flare_event_t*` to the tracer as an `Event`: same layout.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<FlareEvent>() == size_of::<Event>());
    assert!(align_of::<FlareEvent>() == align_of::<Event>());
    assert!(offset_of!(FlareEvent, ts_ns) == offset_of!(Event, ts_ns));
    assert!(offset_of!(FlareEvent, name) == offset_of!(Event, name));
    assert!(offset_of!(FlareEvent, tag) == offset_of!(Event, tag));
    assert!(offset_of!(FlareEvent, kind) == offset_of!(Event, kind));
    assert!(offset_of!(FlareEvent, flags) == offset_of!(Event, flags));
    assert!(offset_of!(FlareEvent, id) == offset_of!(Event, id));
    assert!(offset_of!(FlareEvent, a) == offset_of!(Event, a));
    assert!(offset_of!(FlareEvent, b) == offset_of!(Event, b));
    assert!(offset_of!(FlareEvent, c) == offset_of!(Event, c));
    assert!(size_of::<FlareEvent>() == 48);
    assert!(size_of::<FlareSpanArgs>() == 24);
};

thread_local! {
    // One reusable buffer per thread, so reporting an error on a hot path does not
    // allocate once the buffer has grown.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_error(msg: &str) {
    // try_with: during thread teardown the slot may be gone; the status code still says it.
    let _ = LAST_ERROR.try_with(|e| {
        if let Ok(mut e) = e.try_borrow_mut() {
            e.clear();
            e.push_str(msg);
        }
    });
}

fn fail(status: FlareStatus, msg: &str) -> FlareStatus {
    set_error(msg);
    status
}

/// Runs `f`, turning a panic into `on_panic` and a last-error message: nothing unwinds
/// into the caller's C frames.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("unknown panic");
            set_error(&format!("internal error in libflare: {what}"));
            on_panic
        }
    }
}

fn status_of(e: &TracerError) -> FlareStatus {
    match e {
        TracerError::Config(_) => FLARE_ERR_CONFIG,
        TracerError::Io { .. } | TracerError::Format { .. } => FLARE_ERR_IO,
        TracerError::AlreadyInitialized(_) => FLARE_ERR_ALREADY_INITIALIZED,
    }
}

/// Borrows a C string's bytes; `what` names the argument in the error.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn c_bytes<'a>(p: *const c_char, what: &str) -> Result<&'a [u8], String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// # Safety
/// As [`c_bytes`].
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, String> {
    let b = unsafe { c_bytes(p, what) }?;
    std::str::from_utf8(b).map_err(|e| format!("{what} is not valid UTF-8 ({e})"))
}

fn kind_of(kind: u8) -> Option<OpKind> {
    OpKind::from_u8(kind)
}

const NOT_INITIALIZED: &str = "the tracer is not initialized: call flare_init first";

/// The version of the ABI this library implements; compare with `FLARE_ABI_VERSION`.
#[no_mangle]
pub extern "C" fn flare_abi_version() -> u32 {
    FLARE_ABI_VERSION
}

/// Fills `config` with "everything from the environment" (NULL strings, -1 ranks, 0 sizes).
///
/// # Safety
/// `config` is NULL or points to writable memory for one `flare_config_t`.
#[no_mangle]
pub unsafe extern "C" fn flare_config_default(config: *mut FlareConfig) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        if config.is_null() {
            return fail(FLARE_ERR_INVALID_ARGUMENT, "config is NULL");
        }
        let d = FlareConfig {
            job_id: std::ptr::null(),
            shm_dir: std::ptr::null(),
            dump_path: std::ptr::null(),
            rank: -1,
            local_rank: -1,
            world_size: -1,
            ring_events: 0,
            max_threads: 0,
        };
        // SAFETY: non-NULL and writable per the contract; write() does not read the old value.
        unsafe { config.write(d) };
        FLARE_OK
    })
}

/// An explicit rank-like value: -1 means "from the environment".
fn explicit(v: i32, what: &str) -> Result<Option<u32>, String> {
    match v {
        -1 => Ok(None),
        v if v >= 0 => Ok(Some(v as u32)),
        v => Err(format!(
            "{what} = {v}: expected >= 0, or -1 for the environment"
        )),
    }
}

/// The tracer configuration: the environment, overridden by what `c` sets.
///
/// # Safety
/// The pointers in `c` are NULL or valid C strings.
unsafe fn build_config(c: &FlareConfig) -> Result<Config, (FlareStatus, String)> {
    let bad = |m: String| (FLARE_ERR_INVALID_ARGUMENT, m);
    let rank = explicit(c.rank, "rank").map_err(bad)?;
    let local_rank = explicit(c.local_rank, "local_rank").map_err(bad)?;
    let world_size = explicit(c.world_size, "world_size").map_err(bad)?;
    let job_id = if c.job_id.is_null() {
        None
    } else {
        Some(
            unsafe { c_str(c.job_id, "job_id") }
                .map_err(bad)?
                .to_string(),
        )
    };
    let shm_dir = if c.shm_dir.is_null() {
        None
    } else {
        let b = unsafe { c_bytes(c.shm_dir, "shm_dir") }.map_err(bad)?;
        if b.is_empty() {
            return Err(bad("shm_dir is empty".into()));
        }
        Some(PathBuf::from(OsStr::from_bytes(b)))
    };
    let dump_path = if c.dump_path.is_null() {
        None
    } else {
        let b = unsafe { c_bytes(c.dump_path, "dump_path") }.map_err(bad)?;
        Some((!b.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(b))))
    };
    // Explicit values shadow the first (preferred) variable of each environment lookup, so
    // an unrelated or stale variable (say WORLD_SIZE when the caller passes its own) is
    // never parsed against them.
    let shadow = |k: &str| -> Option<String> {
        match k {
            "RANK" => rank.map(|v| v.to_string()),
            "LOCAL_RANK" => local_rank.map(|v| v.to_string()),
            "WORLD_SIZE" => world_size.map(|v| v.to_string()),
            "FLARE_JOB_ID" => job_id.clone(),
            "FLARE_RING_EVENTS" => (c.ring_events != 0).then(|| c.ring_events.to_string()),
            "FLARE_MAX_THREADS" => (c.max_threads != 0).then(|| c.max_threads.to_string()),
            _ => None,
        }
    };
    let mut cfg = Config::from_lookup(|k| shadow(k).or_else(|| std::env::var(k).ok()))
        .map_err(|e| (status_of(&e), e.to_string()))?;
    if let Some(d) = shm_dir {
        cfg.shm_dir = d;
    }
    if let Some(d) = dump_path {
        cfg.dump_path = d;
    }
    cfg.validate().map_err(|e| (status_of(&e), e.to_string()))?;
    Ok(cfg)
}

fn init_with(cfg: Config) -> FlareStatus {
    match flare_tracer::init(cfg) {
        Ok(_) => FLARE_OK,
        Err(e) => fail(status_of(&e), &e.to_string()),
    }
}

/// Initializes the process's tracer. `config` NULL: everything from the environment.
/// Calling it again with the same identity is a no-op; another identity is
/// `FLARE_ERR_ALREADY_INITIALIZED`.
///
/// # Safety
/// `config` is NULL or points to a `flare_config_t` whose strings are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn flare_init(config: *const FlareConfig) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        // SAFETY: NULL or a valid config per the contract.
        let cfg = match unsafe { config.as_ref() } {
            None => Config::from_env().map_err(|e| (status_of(&e), e.to_string())),
            Some(c) => unsafe { build_config(c) },
        };
        match cfg {
            Ok(cfg) => init_with(cfg),
            Err((status, msg)) => fail(status, &msg),
        }
    })
}

/// `flare_init(NULL)`: identity and sizes from the launcher's environment.
#[no_mangle]
pub extern "C" fn flare_init_from_env() -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || match Config::from_env() {
        Ok(cfg) => init_with(cfg),
        Err(e) => fail(status_of(&e), &e.to_string()),
    })
}

/// Whether `flare_init` succeeded in this process.
#[no_mangle]
pub extern "C" fn flare_is_initialized() -> bool {
    guard(false, flare_tracer::is_initialized)
}

/// Interns a UTF-8 name in the shared name table and returns its id. Takes a lock: call
/// it once per name and keep the id. Returns `FLARE_NAME_NONE` (see `flare_last_error`)
/// for a NULL or non-UTF-8 name or before `flare_init`, `FLARE_NAME_OVERFLOW` when the
/// table is full.
///
/// # Safety
/// `name` is NULL or a valid C string.
#[no_mangle]
pub unsafe extern "C" fn flare_intern(name: *const c_char) -> u32 {
    guard(FLARE_NAME_NONE, || {
        // SAFETY: NULL or a valid C string per the contract.
        let name = match unsafe { c_str(name, "name") } {
            Ok(s) => s,
            Err(m) => {
                set_error(&m);
                return FLARE_NAME_NONE;
            }
        };
        if !flare_tracer::is_initialized() {
            set_error(NOT_INITIALIZED);
            return FLARE_NAME_NONE;
        }
        flare_tracer::intern(name).0
    })
}

/// The shared checks of the recording calls.
fn ready(kind: u8) -> Result<OpKind, FlareStatus> {
    let Some(kind) = kind_of(kind) else {
        return Err(fail(
            FLARE_ERR_INVALID_ARGUMENT,
            "kind is not one of FLARE_KIND_*",
        ));
    };
    if !flare_tracer::is_initialized() {
        return Err(fail(FLARE_ERR_NOT_INITIALIZED, NOT_INITIALIZED));
    }
    Ok(kind)
}

/// Opens a nested span on the calling thread. `args` may be NULL (no arguments).
///
/// # Safety
/// `args` is NULL or points to a `flare_span_args_t`.
#[no_mangle]
pub unsafe extern "C" fn flare_span_begin(
    name: u32,
    kind: u8,
    args: *const FlareSpanArgs,
) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        let kind = match ready(kind) {
            Ok(k) => k,
            Err(s) => return s,
        };
        // SAFETY: NULL or a valid struct per the contract.
        let a = unsafe { args.as_ref() }.copied().unwrap_or_default();
        let args = SpanArgs {
            amount: a.amount,
            group: NameId(a.group),
            seq: a.seq,
            group_size: a.group_size,
            issue_latency_ns: a.issue_latency_ns,
        };
        flare_tracer::begin(NameId(name), kind, &args);
        FLARE_OK
    })
}

/// Closes the innermost open span named `name` on the calling thread.
#[no_mangle]
pub extern "C" fn flare_span_end(name: u32, kind: u8) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || match ready(kind) {
        Ok(kind) => {
            flare_tracer::end(NameId(name), kind);
            FLARE_OK
        }
        Err(s) => s,
    })
}

/// Marks the start of training iteration `step`.
#[no_mangle]
pub extern "C" fn flare_step(step: u64) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        if !flare_tracer::is_initialized() {
            return fail(FLARE_ERR_NOT_INITIALIZED, NOT_INITIALIZED);
        }
        flare_tracer::step(step);
        FLARE_OK
    })
}

/// Records a counter sample (`name` from `flare_intern`).
#[no_mangle]
pub extern "C" fn flare_counter(name: u32, value: u64) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        if !flare_tracer::is_initialized() {
            return fail(FLARE_ERR_NOT_INITIALIZED, NOT_INITIALIZED);
        }
        flare_tracer::counter(NameId(name), value);
        FLARE_OK
    })
}

/// Records a point event.
#[no_mangle]
pub extern "C" fn flare_instant(name: u32) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        if !flare_tracer::is_initialized() {
            return fail(FLARE_ERR_NOT_INITIALIZED, NOT_INITIALIZED);
        }
        flare_tracer::record(&Event {
            ts_ns: flare_tracer::clock::now_ns(),
            name,
            tag: Tag::Instant as u8,
            ..Event::default()
        });
        FLARE_OK
    })
}

/// Records a fully formed event: explicit timestamps and async ids, for other timing
/// sources (GPU timers, the NCCL profiler plugin). `ts_ns` 0 means now.
///
/// # Safety
/// `event` is NULL or points to a `flare_event_t`.
#[no_mangle]
pub unsafe extern "C" fn flare_record(event: *const FlareEvent) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        // SAFETY: NULL or a valid event per the contract.
        let Some(e) = (unsafe { event.as_ref() }) else {
            return fail(FLARE_ERR_INVALID_ARGUMENT, "event is NULL");
        };
        if Tag::from_u8(e.tag).is_none() {
            return fail(
                FLARE_ERR_INVALID_ARGUMENT,
                "event.tag is not one of FLARE_TAG_*",
            );
        }
        if let Err(s) = ready(e.kind) {
            return s;
        }
        flare_tracer::record(&Event {
            ts_ns: if e.ts_ns == 0 {
                flare_tracer::clock::now_ns()
            } else {
                e.ts_ns
            },
            name: e.name,
            tag: e.tag,
            kind: e.kind,
            flags: e.flags,
            id: e.id,
            a: e.a,
            b: e.b,
            c: e.c,
        });
        FLARE_OK
    })
}

/// The tracer's clock: `CLOCK_MONOTONIC` in nanoseconds.
#[no_mangle]
pub extern "C" fn flare_now_ns() -> u64 {
    guard(0, flare_tracer::clock::now_ns)
}

/// Copies the tracer's counters into `out` (zeros and `FLARE_ERR_NOT_INITIALIZED` before
/// `flare_init`).
///
/// # Safety
/// `out` is NULL or points to writable memory for one `flare_stats_t`.
#[no_mangle]
pub unsafe extern "C" fn flare_stats(out: *mut FlareStats) -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || {
        if out.is_null() {
            return fail(FLARE_ERR_INVALID_ARGUMENT, "out is NULL");
        }
        let s = flare_tracer::stats();
        let v = FlareStats {
            written: s.written,
            dropped_full: s.dropped_full,
            dropped_no_ring: s.dropped_no_ring,
            rings_in_use: s.rings_in_use,
        };
        // SAFETY: non-NULL and writable per the contract.
        unsafe { out.write(v) };
        if flare_tracer::is_initialized() {
            FLARE_OK
        } else {
            fail(FLARE_ERR_NOT_INITIALIZED, NOT_INITIALIZED)
        }
    })
}

/// Ends tracing: writes the dump when configured and removes the shared-memory file unless
/// an agent collects it. Later recording calls are harmless. A no-op before `flare_init`
/// and on the second call.
#[no_mangle]
pub extern "C" fn flare_shutdown() -> FlareStatus {
    guard(FLARE_ERR_INTERNAL, || match flare_tracer::shutdown() {
        Ok(_) => FLARE_OK,
        Err(e) => fail(status_of(&e), &e.to_string()),
    })
}

/// Copies `s` and a NUL into `buf` (truncated to `len`), returns `s`'s full length.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
unsafe fn copy_out(s: &[u8], buf: *mut c_char, len: usize) -> usize {
    if !buf.is_null() && len > 0 {
        let n = s.len().min(len - 1);
        // SAFETY: buf holds len >= n + 1 writable bytes per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    s.len()
}

/// Copies the message of the calling thread's latest failed call into `buf` (NUL
/// terminated, truncated to `len` bytes) and returns its full length (0 when there is
/// none), like `snprintf`: call with `buf` NULL and `len` 0 to size a buffer.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn flare_last_error(buf: *mut c_char, len: usize) -> usize {
    guard(0, || {
        LAST_ERROR
            .try_with(|e| match e.try_borrow() {
                // SAFETY: forwarded contract.
                Ok(e) => unsafe { copy_out(e.as_bytes(), buf, len) },
                Err(_) => 0,
            })
            .unwrap_or(0)
    })
}

/// Copies the path of the tracer's shared-memory file like `flare_last_error`; returns 0
/// before `flare_init`.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn flare_ring_path(buf: *mut c_char, len: usize) -> usize {
    guard(0, || match flare_tracer::ring_path() {
        // SAFETY: forwarded contract.
        Some(p) => unsafe { copy_out(p.as_os_str().as_bytes(), buf, len) },
        None => 0,
    })
}
