//! How Flare's NCCL profiler plugin encodes NCCL's events in tracer events: shared by the
//! plugin (which writes them) and the node agent (which reads a collective's progress
//! from them). The full field table is in the plugin's crate documentation.
//!
//! Every plugin event has [`FLAG_NCCL`] set and the NCCL event type's bit index in the low
//! byte of `flags` ([`TYPE_MASK`]). Async ids carry [`ID_TAG`] in their top 16 bits; a
//! child names its parent by the low 32 bits of the parent's id in the low half of `c`.
//! The numbers of types and states are NCCL's own (`ncclProfile*` bit indices,
//! `ncclProfilerEventState_t`).

use crate::layout::{Event, NameId};

/// Set on every event the plugin records.
pub const FLAG_NCCL: u16 = 0x8000;
/// Set on the detail `Instant` that follows a Coll, P2p or CeColl begin.
pub const FLAG_DETAIL: u16 = 0x4000;
/// The low byte of `flags`: the NCCL event type's bit index, or one of the `TYPE_*` below.
pub const TYPE_MASK: u16 = 0x00FF;
/// The communicator identity `Instant` recorded at init.
pub const TYPE_COMM: u16 = 0x20;
/// The dropped-events `Counter` recorded at finalize.
pub const TYPE_DROPS: u16 = 0x21;
/// The top 16 bits of every async id the plugin assigns ("NC").
pub const ID_TAG: u64 = 0x4E43 << 48;

/// NCCL event types the agent reads, by bit index (`ncclProfileColl` = 1 << 1: 1).
pub const TYPE_COLL: u16 = 1;
pub const TYPE_P2P: u16 = 2;
pub const TYPE_PROXY_OP: u16 = 3;
pub const TYPE_PROXY_STEP: u16 = 4;
pub const TYPE_KERNEL_CH: u16 = 6;
pub const TYPE_KERNEL_PHASE: u16 = 15;

/// A proxy step's states (`AsyncState` events carry the code in `a`): where a chunk of a
/// transfer between two ranks is. Send steps go GPU wait, peer wait (v4+), network; receive
/// steps go peer's data, flush, GPU wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepState {
    /// Sender: waiting for its own GPU (kernel) to put the chunk in the buffer.
    SendGpuWait,
    /// Sender: waiting for the receiver to free a buffer slot (clear to send).
    SendPeerWait,
    /// Sender: the chunk is on the network, until the send completes.
    SendNetwork,
    /// Receiver: waiting for the chunk to arrive from the sender.
    RecvPeerWait,
    /// Receiver: flushing the received chunk to GPU memory.
    RecvFlush,
    /// Receiver: waiting for its own GPU (kernel) to consume the chunk.
    RecvGpuWait,
}

impl StepState {
    pub const ALL: [StepState; 6] = [
        StepState::SendGpuWait,
        StepState::SendPeerWait,
        StepState::SendNetwork,
        StepState::RecvPeerWait,
        StepState::RecvFlush,
        StepState::RecvGpuWait,
    ];

    /// From NCCL's state code (`ncclProfilerProxyStep*`).
    pub fn from_code(code: u64) -> Option<StepState> {
        Some(match code {
            8 => StepState::SendGpuWait,
            20 => StepState::SendPeerWait,
            9 => StepState::SendNetwork,
            10 => StepState::RecvPeerWait,
            11 => StepState::RecvFlush,
            12 => StepState::RecvGpuWait,
            _ => return None,
        })
    }

    pub fn code(self) -> u64 {
        match self {
            StepState::SendGpuWait => 8,
            StepState::SendPeerWait => 20,
            StepState::SendNetwork => 9,
            StepState::RecvPeerWait => 10,
            StepState::RecvFlush => 11,
            StepState::RecvGpuWait => 12,
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The NCCL type of a plugin event (its bit index), or `None` for other events and for the
/// plugin's detail, identity and drop-count events.
pub fn event_type(ev: &Event) -> Option<u16> {
    if ev.flags & FLAG_NCCL == 0 || ev.flags & FLAG_DETAIL != 0 {
        return None;
    }
    let t = ev.flags & TYPE_MASK;
    (t < TYPE_COMM).then_some(t)
}

/// The communicator name id of a plugin event (`b`'s high half; NONE when unknown).
pub fn group(ev: &Event) -> NameId {
    NameId((ev.b >> 32) as u32)
}

/// The low 32 bits of the parent's id (0: none), from an `AsyncBegin`.
pub fn parent(ev: &Event) -> u32 {
    ev.c as u32
}

/// What a ProxyOp begin says: `b` low = peer, `c` high = channel << 24 | send << 23 |
/// steps, `a` = steps x chunk size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyOp {
    pub peer: u32,
    pub channel: u8,
    pub send: bool,
    pub n_steps: u32,
    pub bytes: u64,
}

/// The largest step count the encoding holds.
pub const MAX_STEPS: u32 = (1 << 23) - 1;

impl ProxyOp {
    /// `c`'s high half.
    pub fn pack_c_hi(channel: u8, send: bool, n_steps: u32) -> u32 {
        (channel as u32) << 24 | (send as u32) << 23 | n_steps.min(MAX_STEPS)
    }

    pub fn unpack(ev: &Event) -> ProxyOp {
        let hi = (ev.c >> 32) as u32;
        ProxyOp {
            peer: ev.b as u32,
            channel: (hi >> 24) as u8,
            send: hi & 1 << 23 != 0,
            n_steps: hi & MAX_STEPS,
            bytes: ev.a,
        }
    }
}
