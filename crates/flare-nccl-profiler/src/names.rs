//! NCCL's vocabulary (functions, datatypes, algorithms, protocols) and the tracer names
//! the plugin records, interned once so the hot path only looks them up.

use flare_model::OpKind;
use flare_tracer::NameId;

/// NCCL functions by `ncclFunc_t` code (the v1 descriptor's `func`), with the string
/// `ncclFuncToString` gives (v2+) and the op kind Flare files them under. One-to-all and
/// all-to-one functions without a kind of their own map to the closest pattern.
pub(crate) const FUNCS: [(&str, OpKind); 15] = [
    ("Broadcast", OpKind::Broadcast),
    ("Reduce", OpKind::Reduce),
    ("AllGather", OpKind::AllGather),
    ("ReduceScatter", OpKind::ReduceScatter),
    ("AllReduce", OpKind::AllReduce),
    ("SendRecv", OpKind::SendRecv),
    ("Send", OpKind::Send),
    ("Recv", OpKind::Recv),
    ("AlltoAll", OpKind::AllToAll),
    ("Scatter", OpKind::Broadcast),
    ("Gather", OpKind::Reduce),
    ("AllGatherV", OpKind::AllGather),
    ("PutSignal", OpKind::Send),
    ("Signal", OpKind::Send),
    ("WaitSignal", OpKind::Recv),
];

/// `ncclDataType_t` by code: the `ncclDatatypeToString` name and the element size.
pub(crate) const DTYPES: [(&str, u64); 12] = [
    ("ncclInt8", 1),
    ("ncclUint8", 1),
    ("ncclInt32", 4),
    ("ncclUint32", 4),
    ("ncclInt64", 8),
    ("ncclUint64", 8),
    ("ncclFloat16", 2),
    ("ncclFloat32", 4),
    ("ncclFloat64", 8),
    ("ncclBfloat16", 2),
    ("ncclFloat8e4m3", 1),
    ("ncclFloat8e5m2", 1),
];
/// Datatype code recorded when NCCL names one this table does not know.
pub(crate) const DTYPE_UNKNOWN: u8 = 0xFF;

/// `NCCL_ALGO_*` by code; index `ALGOS.len()` stands for an unknown algorithm.
pub(crate) const ALGOS: [&str; 7] = [
    "TREE",
    "RING",
    "COLLNET_DIRECT",
    "COLLNET_CHAIN",
    "NVLS",
    "NVLS_TREE",
    "PAT",
];
/// `NCCL_PROTO_*` by code; index `PROTOS.len()` stands for an unknown protocol.
pub(crate) const PROTOS: [&str; 3] = ["LL", "LL128", "SIMPLE"];

/// v7 kernel phases by `phaseId`; a phase NCCL adds later is `nccl:kernel_phase`.
pub(crate) const KERNEL_PHASES: [&str; 4] = [
    "nccl:initial_sync",
    "nccl:compute",
    "nccl:final_sync",
    "nccl:kernel_phase",
];

fn index_of(table: impl IntoIterator<Item = &'static str>, s: &[u8]) -> Option<usize> {
    table.into_iter().position(|t| t.as_bytes() == s)
}

pub(crate) fn func_index(s: &[u8]) -> Option<usize> {
    index_of(FUNCS.iter().map(|f| f.0), s)
}

pub(crate) fn dtype_code(s: &[u8]) -> u8 {
    index_of(DTYPES.iter().map(|d| d.0), s).map_or(DTYPE_UNKNOWN, |i| i as u8)
}

/// Element size of a datatype code; 0 when unknown (bytes are then recorded as 0).
pub(crate) fn dtype_size(code: u8) -> u64 {
    DTYPES.get(code as usize).map_or(0, |d| d.1)
}

pub(crate) fn algo_index(s: &[u8]) -> usize {
    index_of(ALGOS, s).unwrap_or(ALGOS.len())
}

pub(crate) fn proto_index(s: &[u8]) -> usize {
    index_of(PROTOS, s).unwrap_or(PROTOS.len())
}

/// Every name the plugin records, interned when the tracer is attached.
pub(crate) struct Names {
    pub func: [NameId; FUNCS.len()],
    /// `"<ALGO>/<PROTO>"`, the name of a collective's detail event.
    pub algo_proto: [[NameId; PROTOS.len() + 1]; ALGOS.len() + 1],
    pub group: NameId,
    pub proxy_send: NameId,
    pub proxy_recv: NameId,
    pub proxy_step: NameId,
    pub proxy_ctrl: NameId,
    pub kernel_ch: NameId,
    pub kernel_phase: [NameId; KERNEL_PHASES.len()],
    pub net: NameId,
    pub group_api: NameId,
    pub kernel_launch: NameId,
    pub p2p_detail: NameId,
    pub ce_detail: NameId,
    pub ce_sync: NameId,
    pub ce_batch: NameId,
    pub dropped: NameId,
}

impl Names {
    pub fn new(intern: &dyn Fn(&str) -> NameId) -> Names {
        let func = std::array::from_fn(|i| intern(FUNCS[i].0));
        let algo_proto = std::array::from_fn(|a| {
            std::array::from_fn(|p| {
                let algo = ALGOS.get(a).copied().unwrap_or("Unknown");
                let proto = PROTOS.get(p).copied().unwrap_or("Unknown");
                intern(&format!("{algo}/{proto}"))
            })
        });
        Names {
            func,
            algo_proto,
            group: intern("nccl:group"),
            proxy_send: intern("nccl:proxy_send"),
            proxy_recv: intern("nccl:proxy_recv"),
            proxy_step: intern("nccl:proxy_step"),
            proxy_ctrl: intern("nccl:proxy_ctrl"),
            kernel_ch: intern("nccl:kernel_ch"),
            kernel_phase: KERNEL_PHASES.map(intern),
            net: intern("nccl:net"),
            group_api: intern("nccl:group_api"),
            kernel_launch: intern("nccl:kernel_launch"),
            p2p_detail: intern("nccl:p2p"),
            ce_detail: intern("nccl:ce"),
            ce_sync: intern("nccl:ce_sync"),
            ce_batch: intern("nccl:ce_batch"),
            dropped: intern("nccl:dropped_events"),
        }
    }
}

/// The tracer name of a communicator: `nccl:` and its hash as 16 hex digits.
pub(crate) fn comm_name(hash: u64) -> String {
    format!("nccl:{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_follow_nccls_codes_and_strings() {
        assert_eq!(func_index(b"AllReduce"), Some(4));
        assert_eq!(FUNCS[4].1, OpKind::AllReduce);
        assert_eq!(
            func_index(b"AlltoAll").map(|i| FUNCS[i].1),
            Some(OpKind::AllToAll)
        );
        assert_eq!(func_index(b"Nope"), None);
        assert_eq!(dtype_code(b"ncclFloat32"), 7);
        assert_eq!(dtype_size(dtype_code(b"ncclBfloat16")), 2);
        assert_eq!(dtype_size(DTYPE_UNKNOWN), 0);
        assert_eq!(algo_index(b"RING"), 1);
        assert_eq!(algo_index(b"???"), ALGOS.len());
        assert_eq!(proto_index(b"SIMPLE"), 2);
        assert_eq!(comm_name(0xabc), "nccl:0000000000000abc");
    }
}
