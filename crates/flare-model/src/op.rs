//! Op records: what one rank did, when.
//!
//! One record is 56 bytes so that a 10,000-rank job's window fits in memory; optional
//! fields use sentinels behind accessor methods.

use crate::comm::CommId;
use serde::{Deserialize, Serialize};

/// What an op is. Collective and P2P ops synchronise ranks; compute ops run on the GPU;
/// host phases run on the CPU and keep the GPU idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum OpKind {
    Compute = 0,
    AllReduce = 1,
    AllGather = 2,
    ReduceScatter = 3,
    AllToAll = 4,
    Broadcast = 5,
    Reduce = 6,
    Barrier = 7,
    Send = 8,
    Recv = 9,
    /// A grouped send and receive with one peer (Megatron's `send_forward_recv_backward`).
    SendRecv = 10,
    DataLoader = 11,
    GarbageCollection = 12,
    Optimizer = 13,
    Checkpoint = 14,
    HostOther = 15,
}

// Small predicates and accessors called per op in the engine's hot loops: inlined across
// the crate boundary.
impl OpKind {
    pub const ALL: [OpKind; 16] = [
        OpKind::Compute,
        OpKind::AllReduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::AllToAll,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::Barrier,
        OpKind::Send,
        OpKind::Recv,
        OpKind::SendRecv,
        OpKind::DataLoader,
        OpKind::GarbageCollection,
        OpKind::Optimizer,
        OpKind::Checkpoint,
        OpKind::HostOther,
    ];

    pub fn from_u8(v: u8) -> Option<OpKind> {
        Self::ALL.get(v as usize).copied()
    }

    #[inline]
    pub fn is_collective(self) -> bool {
        (1..=7).contains(&(self as u8))
    }

    #[inline]
    pub fn is_p2p(self) -> bool {
        matches!(self, OpKind::Send | OpKind::Recv | OpKind::SendRecv)
    }

    /// Collectives and P2P: ops that end only when every member has arrived.
    #[inline]
    pub fn is_sync(self) -> bool {
        self.is_collective() || self.is_p2p()
    }

    #[inline]
    pub fn is_host(self) -> bool {
        (self as u8) >= 11
    }

    /// The kind [`OpKind::as_str`] names `s`.
    pub fn from_name(s: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Compute => "compute",
            OpKind::AllReduce => "all_reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::AllToAll => "all_to_all",
            OpKind::Broadcast => "broadcast",
            OpKind::Reduce => "reduce",
            OpKind::Barrier => "barrier",
            OpKind::Send => "send",
            OpKind::Recv => "recv",
            OpKind::SendRecv => "send_recv",
            OpKind::DataLoader => "dataloader",
            OpKind::GarbageCollection => "gc",
            OpKind::Optimizer => "optimizer",
            OpKind::Checkpoint => "checkpoint",
            OpKind::HostOther => "host",
        }
    }

    /// Bus-bandwidth factor of a collective over `n` ranks (NCCL's convention), used to
    /// turn bytes and time into bandwidth comparable across group sizes.
    #[inline]
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = n.max(1) as f64;
        match self {
            OpKind::AllReduce => 2.0 * (n - 1.0) / n,
            OpKind::AllGather | OpKind::ReduceScatter | OpKind::AllToAll => (n - 1.0) / n,
            _ => 1.0,
        }
    }
}

/// One op on one rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    /// Interned name (index into [`crate::Trace::names`]): kernel or phase name.
    pub name: u32,
    /// Training iteration the op belongs to.
    pub iteration: u32,
    /// Communicator of a collective or P2P op, [`Op::NO_COMM`] otherwise.
    pub comm: CommId,
    /// Sequence number of the op on its communicator (per direction for P2P pairs is not
    /// needed: a P2P pair shares one counter), 0 for local ops.
    pub seq: u32,
    /// Peer global rank of a P2P op, [`Op::NO_PEER`] otherwise.
    pub peer: u32,
    /// When the op started on the device (for a sync op: when this rank arrived), ns.
    pub start_ns: i64,
    /// When it ended, ns; [`Op::IN_FLIGHT`] if it never ended before the trace did.
    pub end_ns: i64,
    /// When the CPU issued (launched) it, ns; [`Op::UNKNOWN`] if not recorded.
    pub issue_ns: i64,
    /// Bytes moved per rank for communication ops, FLOPs for compute ops, 0 if unknown.
    pub amount: u64,
}

impl Op {
    pub const NO_COMM: CommId = u32::MAX;
    pub const NO_PEER: u32 = u32::MAX;
    pub const IN_FLIGHT: i64 = i64::MAX;
    pub const UNKNOWN: i64 = i64::MIN;

    #[inline]
    pub fn end(&self) -> Option<i64> {
        (self.end_ns != Self::IN_FLIGHT).then_some(self.end_ns)
    }

    #[inline]
    pub fn issue(&self) -> Option<i64> {
        (self.issue_ns != Self::UNKNOWN).then_some(self.issue_ns)
    }

    #[inline]
    pub fn comm(&self) -> Option<CommId> {
        (self.comm != Self::NO_COMM).then_some(self.comm)
    }

    #[inline]
    pub fn peer(&self) -> Option<u32> {
        (self.peer != Self::NO_PEER).then_some(self.peer)
    }

    /// Duration in ns, or `None` while in flight.
    #[inline]
    pub fn duration(&self) -> Option<i64> {
        self.end().map(|e| e - self.start_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_stays_compact_and_kinds_round_trip() {
        assert!(std::mem::size_of::<Op>() <= 56);
        for k in OpKind::ALL {
            assert_eq!(OpKind::from_u8(k as u8), Some(k));
        }
        assert!(OpKind::AllToAll.is_collective() && !OpKind::Send.is_collective());
        assert!(OpKind::SendRecv.is_sync() && OpKind::GarbageCollection.is_host());
        assert!((OpKind::AllReduce.bus_factor(8) - 1.75).abs() < 1e-12);
    }
}
