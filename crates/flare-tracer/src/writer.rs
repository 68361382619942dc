//! The producer: one tracer per process, one ring per thread.
//!
//! The hot path (`begin`, `end`, `record`, ...) reads the clock, copies 48 bytes into the
//! thread's ring and publishes them with one release store. It takes no lock, makes no
//! system call beyond the vDSO clock read, never allocates, and never waits: a full ring
//! (no agent, or an agent that fell behind) drops the event and counts it. A thread claims
//! its ring on its first event (the slow path) and releases it when it exits.

use crate::clock;
use crate::layout::*;
use crate::shm::{Identity, Mapping, RingRef};
use crate::{Config, TracerError};
use flare_model::OpKind;
use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock};

pub(crate) struct Tracer {
    pub(crate) map: Mapping,
    pub(crate) config: Config,
    names: Mutex<HashMap<String, NameId>>,
    shut_down: std::sync::atomic::AtomicBool,
}

static TRACER: OnceLock<Tracer> = OnceLock::new();

/// The calling thread's ring.
#[derive(Clone, Copy)]
enum ThreadRing {
    /// No event yet.
    Unclaimed,
    /// None was free, or the thread is exiting: events are dropped and counted.
    None,
    Claimed(RingRef<'static>),
}

thread_local! {
    static RING: Cell<ThreadRing> = const { Cell::new(ThreadRing::Unclaimed) };
    static RELEASE: Cell<Option<RingRelease>> = const { Cell::new(None) };
}

/// Marks the thread's ring released when the thread exits, so another thread can reuse it.
struct RingRelease {
    index: u32,
}

impl Drop for RingRelease {
    fn drop(&mut self) {
        if let Some(t) = TRACER.get() {
            let r = t.map.ring(self.index);
            r.header.owner.store(RING_RELEASED, Ordering::Release);
        }
        // The ring pointer cached in RING is dead after this; a late event on this thread
        // (from another TLS destructor) takes the slow path and is dropped.
        let _ = RING.try_with(|c| c.set(ThreadRing::None));
    }
}

/// Initializes the process's tracer: creates its shared-memory file. Idempotent for the
/// same configuration; a second, different configuration is an error.
pub fn init(config: Config) -> Result<PathBuf, TracerError> {
    if let Some(t) = TRACER.get() {
        return if t.config.same_identity(&config) {
            Ok(t.map.path().to_path_buf())
        } else {
            Err(TracerError::AlreadyInitialized(t.map.path().to_path_buf()))
        };
    }
    let path = config.ring_path();
    std::fs::create_dir_all(&config.shm_dir).map_err(|e| TracerError::io(&config.shm_dir, e))?;
    let (mono, unix) = clock::anchor();
    let map = Mapping::create(
        &path,
        config.geometry(),
        &Identity {
            job_id: &config.job_id,
            rank: config.rank,
            local_rank: config.local_rank,
            world_size: config.world_size,
            pid: std::process::id(),
            anchor_mono_ns: mono,
            anchor_unix_ns: unix,
        },
    )?;
    let tracer = Tracer {
        map,
        config,
        names: Mutex::new(HashMap::new()),
        shut_down: false.into(),
    };
    match TRACER.set(tracer) {
        Ok(()) => Ok(path),
        Err(lost) => {
            // Another thread won the race; remove our file and defer to the winner.
            let _ = std::fs::remove_file(lost.map.path());
            let t = TRACER.get().expect("set by the winner");
            Ok(t.map.path().to_path_buf())
        }
    }
}

pub fn is_initialized() -> bool {
    TRACER.get().is_some()
}

/// The tracer file's path, once initialized.
pub fn ring_path() -> Option<PathBuf> {
    TRACER.get().map(|t| t.map.path().to_path_buf())
}

/// Interns a name in the shared name table. Takes a lock: call it once per name, off the
/// hot path (at decoration or registration time), and keep the id.
pub fn intern(name: &str) -> NameId {
    match TRACER.get() {
        Some(t) => t.intern(name),
        None => NameId::NONE,
    }
}

impl Tracer {
    fn intern(&self, name: &str) -> NameId {
        let mut names = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&id) = names.get(name) {
            return id;
        }
        let id = intern_into(&self.map, name);
        if id != NameId::OVERFLOW {
            names.insert(name.to_string(), id);
        }
        id
    }

    /// Claims a ring for the calling thread: a free one, or a released one the consumer
    /// has drained.
    fn claim(&self) -> Option<u32> {
        let geo = self.map.geometry();
        for i in 0..geo.max_rings {
            let r = self.map.ring(i);
            let owner = r.header.owner.load(Ordering::Acquire);
            let claimable = owner == RING_FREE || (owner == RING_RELEASED && r.pending() == 0);
            if claimable
                && r.header
                    .owner
                    .compare_exchange(owner, RING_OWNED, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                r.header.generation.fetch_add(1, Ordering::Relaxed);
                r.header.tid.store(clock::thread_id(), Ordering::Relaxed);
                let name = std::thread::current().name().unwrap_or("").to_string();
                // SAFETY: the identity line is written only by the ring's owner, now us;
                // consumers read it as a best-effort label.
                unsafe {
                    let p = r.header.thread_name.as_ptr() as *mut u8;
                    write_fixed(std::slice::from_raw_parts_mut(p, THREAD_NAME_LEN), &name);
                }
                return Some(i);
            }
        }
        None
    }
}

/// Appends a name to the file's table. The caller serializes calls (one writer).
pub(crate) fn intern_into(map: &Mapping, name: &str) -> NameId {
    let mut n = name.len().min(u16::MAX as usize);
    while !name.is_char_boundary(n) {
        n -= 1;
    }
    let bytes = &name.as_bytes()[..n];
    let h = map.header();
    let used = h.names_used.load(Ordering::Relaxed) as usize;
    let need = 2 + bytes.len();
    if used + need > h.names_capacity as usize {
        return NameId::OVERFLOW;
    }
    // SAFETY: [used, used+need) is unpublished and the caller is the only writer.
    unsafe {
        let p = map.names_ptr().add(used);
        std::ptr::copy_nonoverlapping((bytes.len() as u16).to_ne_bytes().as_ptr(), p, 2);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(2), bytes.len());
    }
    h.names_used.store((used + need) as u32, Ordering::Release);
    NameId(used as u32 + 1)
}

#[cold]
fn slow_ring() -> Option<RingRef<'static>> {
    let t = TRACER.get()?;
    if t.shut_down.load(Ordering::Relaxed) {
        return None;
    }
    let cached = RING.try_with(|c| c.get()).unwrap_or(ThreadRing::None);
    if !matches!(cached, ThreadRing::Unclaimed) {
        t.map
            .header()
            .dropped_no_ring
            .fetch_add(1, Ordering::Relaxed);
        return None;
    }
    match t.claim() {
        Some(i) => {
            let ring = t.map.ring(i);
            let _ = RING.try_with(|c| c.set(ThreadRing::Claimed(ring)));
            let _ = RELEASE.try_with(|c| c.set(Some(RingRelease { index: i })));
            Some(ring)
        }
        None => {
            let _ = RING.try_with(|c| c.set(ThreadRing::None));
            t.map
                .header()
                .dropped_no_ring
                .fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[inline]
fn push(ev: &Event) {
    if let Ok(ThreadRing::Claimed(ring)) = RING.try_with(|c| c.get()) {
        ring.push(ev);
        return;
    }
    if let Some(ring) = slow_ring() {
        ring.push(ev);
    }
}

/// Opens a nested span on this thread.
#[inline]
pub fn begin(name: NameId, kind: OpKind, args: &SpanArgs) {
    let (a, b, c) = args.pack();
    push(&Event {
        ts_ns: clock::now_ns(),
        name: name.0,
        tag: Tag::Begin as u8,
        kind: kind as u8,
        flags: 0,
        id: 0,
        a,
        b,
        c,
    });
}

/// Closes the innermost open span named `name` on this thread.
#[inline]
pub fn end(name: NameId, kind: OpKind) {
    push(&Event {
        ts_ns: clock::now_ns(),
        name: name.0,
        tag: Tag::End as u8,
        kind: kind as u8,
        ..Event::default()
    });
}

/// Marks the start of iteration `step`.
#[inline]
pub fn step(step: u64) {
    push(&Event {
        ts_ns: clock::now_ns(),
        tag: Tag::Step as u8,
        a: step,
        ..Event::default()
    });
}

/// Records a counter sample.
#[inline]
pub fn counter(name: NameId, value: u64) {
    push(&Event {
        ts_ns: clock::now_ns(),
        name: name.0,
        tag: Tag::Counter as u8,
        a: value,
        ..Event::default()
    });
}

/// Records a fully formed event (explicit timestamps, async ids): for the NCCL plugin and
/// importers of other timing sources. `ts_ns` must be `CLOCK_MONOTONIC` nanoseconds.
#[inline]
pub fn record(ev: &Event) {
    push(ev);
}

/// What the tracer did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events written into rings (all threads).
    pub written: u64,
    /// Events dropped because a ring was full.
    pub dropped_full: u64,
    /// Events dropped because no ring was free for the thread.
    pub dropped_no_ring: u64,
    /// Rings claimed so far (in use or released).
    pub rings_in_use: u32,
}

pub fn stats() -> Stats {
    let Some(t) = TRACER.get() else {
        return Stats::default();
    };
    let mut s = Stats {
        dropped_no_ring: t.map.header().dropped_no_ring.load(Ordering::Relaxed),
        ..Stats::default()
    };
    for i in 0..t.map.geometry().max_rings {
        let r = t.map.ring(i);
        if r.header.owner.load(Ordering::Relaxed) != RING_FREE {
            s.rings_in_use += 1;
            s.written += r.header.head.load(Ordering::Relaxed);
            s.dropped_full += r.header.dropped.load(Ordering::Relaxed);
        }
    }
    s
}

/// Ends tracing for the process: marks the file exited, writes the dump when the
/// configuration asks for one, and removes the shared-memory file unless an agent is
/// attached (the agent drains what is left and removes it). Returns the dump's path.
/// Threads that record afterwards write into a ring nobody reads (the mapping stays
/// valid), so late events from exit handlers are harmless.
pub fn shutdown() -> Result<Option<PathBuf>, TracerError> {
    let Some(t) = TRACER.get() else {
        return Ok(None);
    };
    if t.shut_down.swap(true, Ordering::AcqRel) {
        return Ok(None);
    }
    let h = t.map.header();
    h.state.store(STATE_EXITED, Ordering::Release);
    let mut dumped = None;
    if let Some(out) = &t.config.dump_path {
        crate::dump::write_dump(&t.map, out)?;
        dumped = Some(out.clone());
    }
    let beat = h.agent_heartbeat_unix_ns.load(Ordering::Acquire);
    let agent_fresh = beat > 0 && clock::unix_ns().saturating_sub(beat) < 10_000_000_000;
    if !agent_fresh {
        let _ = std::fs::remove_file(t.map.path());
    }
    Ok(dumped)
}
