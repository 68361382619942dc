//! The shared-memory layout: one file per traced process, mapped by the process (the
//! producer) and by the node agent (the consumer).
//!
//! ```text
//! offset 0            FileHeader (one page): identity, clock anchor, counters
//! offset PAGE         name table: `names_capacity` bytes of (u16 length, UTF-8 bytes) entries
//! offset rings_offset max_rings x (RingHeader 192 bytes, ring_capacity x Event 48 bytes)
//! ```
//!
//! Each ring is single-producer (one thread of the traced process) single-consumer (the
//! agent): the producer owns `head`, the consumer owns `tail`, each on its own cache line.
//! All multi-byte fields are native-endian: producer and consumer run on the same host.

use std::sync::atomic::{AtomicU32, AtomicU64};

pub const MAGIC: [u8; 8] = *b"FLARERNG";
/// Bumped on any incompatible layout change; readers refuse other versions.
pub const LAYOUT_VERSION: u32 = 1;
pub const PAGE: usize = 4096;
pub const EVENT_SIZE: usize = std::mem::size_of::<Event>();
pub const RING_HEADER_SIZE: usize = std::mem::size_of::<RingHeader>();
pub const JOB_ID_LEN: usize = 64;
pub const THREAD_NAME_LEN: usize = 32;

/// Process state in [`FileHeader::state`].
pub const STATE_LIVE: u32 = 1;
pub const STATE_EXITED: u32 = 2;

/// Ring ownership in [`RingHeader::owner`].
pub const RING_FREE: u32 = 0;
pub const RING_OWNED: u32 = 1;
/// The owning thread exited; the ring can be reused once the consumer drained it.
pub const RING_RELEASED: u32 = 2;

/// What an event means. Stored in [`Event::tag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Tag {
    /// A nested span opens on this thread (closed by the next matching `End`).
    Begin = 1,
    End = 2,
    /// A span that may overlap others, paired by [`Event::id`] (NCCL ops, kernels, proxy ops).
    AsyncBegin = 3,
    AsyncEnd = 4,
    /// An iteration boundary: iteration `a` starts now.
    Step = 5,
    /// A counter sample: `a` is the value.
    Counter = 6,
    /// A point event.
    Instant = 7,
    /// Progress of an async span (`id`): `a` is a state code (NCCL proxy step states).
    AsyncState = 8,
}

impl Tag {
    pub fn from_u8(v: u8) -> Option<Tag> {
        Some(match v {
            1 => Tag::Begin,
            2 => Tag::End,
            3 => Tag::AsyncBegin,
            4 => Tag::AsyncEnd,
            5 => Tag::Step,
            6 => Tag::Counter,
            7 => Tag::Instant,
            8 => Tag::AsyncState,
            _ => return None,
        })
    }
}

/// One recorded event: 48 bytes, written with one copy.
///
/// Field meaning by tag and kind:
/// - `ts_ns`: `CLOCK_MONOTONIC` nanoseconds; [`FileHeader::anchor_unix_ns`] maps them to
///   wall-clock time so ranks on different nodes can be aligned.
/// - `name`: a [`NameId`] from the process's name table (0: none).
/// - `kind`: a `flare_model::OpKind` as `u8`.
/// - `id`: pairs async begin/end/state events; 0 for nested spans.
/// - `a`: bytes moved (communication), flops (compute), iteration (`Step`), value (`Counter`),
///   state code (`AsyncState`).
/// - `b`: communicator name id (high 32 bits) and sequence number (low 32 bits).
/// - `c`: communicator size (high 32 bits) and issue latency in ns, saturated (low 32 bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Event {
    pub ts_ns: u64,
    pub name: u32,
    pub tag: u8,
    pub kind: u8,
    pub flags: u16,
    pub id: u64,
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

/// An index into the process's name table (offset + 1; 0 means no name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct NameId(pub u32);

impl NameId {
    pub const NONE: NameId = NameId(0);
    /// Returned when the name table is full: events keep flowing, unnamed.
    pub const OVERFLOW: NameId = NameId(u32::MAX);
}

/// Per-op arguments packed into an event's `a`, `b`, `c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpanArgs {
    /// Bytes moved (communication) or flops (compute).
    pub amount: u64,
    pub group: NameId,
    pub seq: u32,
    pub group_size: u32,
    pub issue_latency_ns: u32,
}

impl SpanArgs {
    #[inline]
    pub fn pack(&self) -> (u64, u64, u64) {
        (
            self.amount,
            ((self.group.0 as u64) << 32) | self.seq as u64,
            ((self.group_size as u64) << 32) | self.issue_latency_ns as u64,
        )
    }

    pub fn unpack(ev: &Event) -> SpanArgs {
        SpanArgs {
            amount: ev.a,
            group: NameId((ev.b >> 32) as u32),
            seq: ev.b as u32,
            group_size: (ev.c >> 32) as u32,
            issue_latency_ns: ev.c as u32,
        }
    }
}

/// The first page of the file.
#[repr(C)]
pub struct FileHeader {
    pub magic: [u8; 8],
    pub version: u32,
    pub event_size: u32,
    pub header_size: u32,
    pub ring_header_size: u32,
    pub max_rings: u32,
    pub ring_capacity: u32,
    pub names_capacity: u32,
    pub rank: u32,
    pub local_rank: u32,
    pub world_size: u32,
    pub pid: u32,
    pub _pad0: u32,
    pub rings_offset: u64,
    pub file_size: u64,
    /// A `CLOCK_MONOTONIC` reading and the `CLOCK_REALTIME` reading taken with it.
    pub anchor_mono_ns: u64,
    pub anchor_unix_ns: u64,
    pub job_id: [u8; JOB_ID_LEN],
    pub state: AtomicU32,
    /// Bytes of the name table in use (entries are complete before this is published).
    pub names_used: AtomicU32,
    /// Events dropped because every ring was taken.
    pub dropped_no_ring: AtomicU64,
    /// Unix ns of the consumer's last visit; the producer reads it to know an agent is there.
    pub agent_heartbeat_unix_ns: AtomicU64,
}

/// One ring's control block: producer line, consumer line, identity line.
#[repr(C, align(64))]
pub struct RingHeader {
    /// Events written (monotonic count; slot = head % capacity). Producer-owned.
    pub head: AtomicU64,
    /// Events dropped because the ring was full. Producer-owned.
    pub dropped: AtomicU64,
    /// The producer's last reading of `tail`, so a push touches the consumer's line only
    /// when the ring looks full. Producer-owned.
    pub tail_cache: AtomicU64,
    _pad_producer: [u8; 40],
    /// Events consumed. Consumer-owned.
    pub tail: AtomicU64,
    _pad_consumer: [u8; 56],
    pub owner: AtomicU32,
    /// The owning thread's OS thread id.
    pub tid: AtomicU32,
    /// Incremented on every claim, so a consumer can tell a reused ring from the old one.
    pub generation: AtomicU32,
    _pad_id: u32,
    pub thread_name: [u8; THREAD_NAME_LEN],
    _pad_tail: [u8; 16],
}

const _: () = assert!(EVENT_SIZE == 48);
const _: () = assert!(RING_HEADER_SIZE == 192);
const _: () = assert!(std::mem::size_of::<FileHeader>() <= PAGE);

/// Sizes derived from a configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub max_rings: u32,
    pub ring_capacity: u32,
    pub names_capacity: u32,
}

impl Geometry {
    pub fn rings_offset(&self) -> usize {
        let end = PAGE + self.names_capacity as usize;
        end.div_ceil(PAGE) * PAGE
    }

    pub fn ring_stride(&self) -> usize {
        RING_HEADER_SIZE + self.ring_capacity as usize * EVENT_SIZE
    }

    pub fn file_size(&self) -> usize {
        self.rings_offset() + self.max_rings as usize * self.ring_stride()
    }
}

/// Copies a string into a fixed NUL-padded field, truncating at a character boundary.
pub fn write_fixed(dst: &mut [u8], s: &str) {
    dst.fill(0);
    let mut n = s.len().min(dst.len());
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Reads a NUL-padded field.
pub fn read_fixed(src: &[u8]) -> String {
    let end = src.iter().position(|&b| b == 0).unwrap_or(src.len());
    String::from_utf8_lossy(&src[..end]).into_owned()
}
