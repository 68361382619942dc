//! Preallocated event handles.
//!
//! NCCL keeps an event's handle after `stopEvent`: a Coll is stopped on the host right
//! after it is enqueued, and its ProxyOps and KernelChs, started later by the proxy
//! thread, name it as their parent. So a handle's slot must stay intact for a while after
//! its event ends:
//! - a slot holds references: its own (until `stopEvent`) and one per child that named it
//!   as parent (until that child ends); it is recycled when the last one goes;
//! - recycled slots queue FIFO, so a slot is reused as late as possible and a late child
//!   still reads its parent's id from it.
//!
//! The free queue is a bounded lock-free MPMC ring of slot indices (sequence number per
//! cell): taking and returning a slot is one CAS, never a lock, never an allocation; when
//! no slot is free the caller drops the event.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// One event handle. Every field is atomic: the event starts on one thread (NCCL's
/// application thread) and is stopped or updated on another (the proxy thread).
pub struct Slot {
    /// Position in its pool, for returning it.
    pub(crate) index: u32,
    /// Which of its context's pools holds it.
    pub(crate) pool: u8,
    /// Between startEvent and stopEvent.
    pub(crate) open: AtomicBool,
    /// The slot's own reference plus one per child that holds it as parent.
    pub(crate) refs: AtomicU32,
    /// The event's async id.
    pub(crate) id: AtomicU64,
    /// name (bits 0-31), kind (32-39), flags (40-55): what the end and state events repeat.
    pub(crate) meta: AtomicU64,
    /// The parent slot this event holds a reference on (null: none).
    pub(crate) parent: AtomicPtr<Slot>,
    /// The event's communicator name id (the high half of every event's `b`).
    pub(crate) group: AtomicU32,
    /// Per-type value carried to the end event (KernelCh: the GPU stop timer).
    pub(crate) aux: AtomicU64,
    /// Its context (set once, before the context is handed to NCCL).
    pub(crate) ctx: AtomicPtr<crate::context::Context>,
}

impl Slot {
    fn new(index: u32, pool: u8) -> Slot {
        Slot {
            index,
            pool,
            open: AtomicBool::new(false),
            refs: AtomicU32::new(0),
            id: AtomicU64::new(0),
            meta: AtomicU64::new(0),
            parent: AtomicPtr::new(std::ptr::null_mut()),
            group: AtomicU32::new(0),
            aux: AtomicU64::new(0),
            ctx: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Takes a reference unless the slot is already free (its events and children ended).
    pub(crate) fn try_retain(&self) -> bool {
        self.refs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                (r > 0).then(|| r + 1)
            })
            .is_ok()
    }
}

pub(crate) fn pack_meta(name: u32, kind: u8, flags: u16) -> u64 {
    name as u64 | (kind as u64) << 32 | (flags as u64) << 40
}

pub(crate) fn unpack_meta(m: u64) -> (u32, u8, u16) {
    (m as u32, (m >> 32) as u8, (m >> 40) as u16)
}

struct Cell {
    seq: AtomicUsize,
    value: AtomicU32,
}

/// Bounded MPMC FIFO of slot indices.
struct FreeQueue {
    cells: Box<[Cell]>,
    mask: usize,
    enqueue_pos: AtomicUsize,
    dequeue_pos: AtomicUsize,
}

impl FreeQueue {
    /// A full queue of `0..capacity` (a power of two).
    fn full(capacity: usize) -> FreeQueue {
        debug_assert!(capacity.is_power_of_two());
        let cells = (0..capacity)
            .map(|i| Cell {
                // Filled: cell i holds i, ready to be dequeued at position i.
                seq: AtomicUsize::new(i + 1),
                value: AtomicU32::new(i as u32),
            })
            .collect();
        FreeQueue {
            cells,
            mask: capacity - 1,
            enqueue_pos: AtomicUsize::new(capacity),
            dequeue_pos: AtomicUsize::new(0),
        }
    }

    fn pop(&self) -> Option<u32> {
        let mut pos = self.dequeue_pos.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos.wrapping_add(1) as isize;
            if diff == 0 {
                match self.dequeue_pos.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let v = cell.value.load(Ordering::Relaxed);
                        cell.seq
                            .store(pos.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(v);
                    }
                    Err(cur) => pos = cur,
                }
            } else if diff < 0 {
                // Empty (or a push not yet published): report exhaustion, never wait.
                return None;
            } else {
                pos = self.dequeue_pos.load(Ordering::Relaxed);
            }
        }
    }

    /// Returns an index. Never full: only indices taken by `pop` come back.
    fn push(&self, v: u32) {
        let mut spins = 0u32;
        let mut pos = self.enqueue_pos.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                match self.enqueue_pos.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        cell.value.store(v, Ordering::Relaxed);
                        cell.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return;
                    }
                    Err(cur) => pos = cur,
                }
            } else if diff < 0 {
                // The cell still holds an index a pop has claimed but not yet released
                // (between its CAS and its `seq` store). The queue never holds more than
                // its capacity, so this is transient: wait for that pop to finish rather
                // than drop the index, which would leak the slot from the pool for good
                // (it did: a stress test lost 62 of 64 slots under load).
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
                pos = self.enqueue_pos.load(Ordering::Relaxed);
            } else {
                pos = self.enqueue_pos.load(Ordering::Relaxed);
            }
        }
    }
}

/// A context's slots of one category.
pub struct Pool {
    pub(crate) slots: Box<[Slot]>,
    free: FreeQueue,
}

impl Pool {
    /// `size` rounded up to a power of two.
    pub(crate) fn new(size: usize, id: u8) -> Pool {
        let n = size.max(2).next_power_of_two();
        Pool {
            slots: (0..n).map(|i| Slot::new(i as u32, id)).collect(),
            free: FreeQueue::full(n),
        }
    }

    pub(crate) fn take(&self) -> Option<&Slot> {
        self.free.pop().map(|i| &self.slots[i as usize])
    }

    pub(crate) fn give_back(&self, slot: &Slot) {
        self.free.push(slot.index);
    }

    /// The slot at `p`, if `p` points at one of this pool's slots.
    pub(crate) fn slot_at(&self, p: *const std::ffi::c_void) -> Option<&Slot> {
        let size = std::mem::size_of::<Slot>();
        let base = self.slots.as_ptr() as usize;
        let off = (p as usize).checked_sub(base)?;
        (off % size == 0).then(|| self.slots.get(off / size))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn the_queue_hands_out_every_slot_once_and_recycles_fifo() {
        let q = FreeQueue::full(4);
        let taken: Vec<u32> = (0..4).map(|_| q.pop().unwrap()).collect();
        assert_eq!(taken, vec![0, 1, 2, 3]);
        assert_eq!(q.pop(), None);
        q.push(2);
        q.push(0);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(2), Some(0), None));
    }

    #[test]
    fn concurrent_takers_and_givers_never_share_a_slot() {
        let pool = Arc::new(Pool::new(64, 0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    for _ in 0..20_000 {
                        let mut held = Vec::new();
                        for _ in 0..8 {
                            if let Some(s) = pool.take() {
                                // Exclusive ownership: nobody else may hold this slot.
                                assert!(!s.open.swap(true, Ordering::AcqRel));
                                held.push(s);
                            }
                        }
                        for s in held {
                            s.open.store(false, Ordering::Release);
                            pool.give_back(s);
                            seen += 1;
                        }
                    }
                    seen
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(total > 0);
        let mut all = HashSet::new();
        while let Some(s) = pool.take() {
            assert!(all.insert(s.index));
        }
        assert_eq!(all.len(), 64);
    }

    #[test]
    fn slot_lookup_accepts_only_slot_addresses() {
        let pool = Pool::new(3, 1);
        assert_eq!(pool.slots.len(), 4);
        let s = &pool.slots[2] as *const Slot as *const std::ffi::c_void;
        assert_eq!(pool.slot_at(s).map(|s| s.index), Some(2));
        let inside = (s as usize + 1) as *const std::ffi::c_void;
        assert!(pool.slot_at(inside).is_none());
        let past = pool.slots.as_ptr_range().end as *const std::ffi::c_void;
        assert!(pool.slot_at(past).is_none());
        assert!(pool.slot_at(std::ptr::null()).is_none());
        assert_eq!(unpack_meta(pack_meta(7, 3, 0x8001)), (7, 3, 0x8001));
    }
}
