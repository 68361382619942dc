// The Rust side of tests/c/abi_layout.c: the same keys, measured on src/abi.rs.
// Included by tests/abi_layout.rs; every key has its twin in tests/c/abi_layout.c.

use nccl_profiler_flare::abi::*;
use std::mem::{offset_of, size_of};

pub fn rust_layout() -> Vec<(&'static str, usize)> {
    vec![
        (
            "sizeof ncclProfilerEventDescr_v1_t",
            size_of::<EventDescrV1>(),
        ),
        (
            "ncclProfilerEventDescr_v1_t.type",
            offset_of!(EventDescrV1, type_),
        ),
        (
            "ncclProfilerEventDescr_v1_t.parentObj",
            offset_of!(EventDescrV1, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v1_t.rank",
            offset_of!(EventDescrV1, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v1_t.coll",
            size_of::<CollDescrV1>(),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.name",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, name),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.commHash",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, comm_hash),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.seqNumber",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.func",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, func),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.sendBuff",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.recvBuff",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.count",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, count),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.root",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, root),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.datatype",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, datatype),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.op",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, op),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.trafficBytes",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, traffic_bytes),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.nMaxChannels",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, n_max_channels),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.nWarps",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.algo",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, algo),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.proto",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, proto),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.isCollnet",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, is_collnet),
        ),
        (
            "ncclProfilerEventDescr_v1_t.coll.isNvls",
            offset_of!(EventDescrV1, u) + offset_of!(CollDescrV1, is_nvls),
        ),
        (
            "sizeof ncclProfilerEventDescr_v1_t.p2p",
            size_of::<P2pDescrV1>(),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.name",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, name),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.commHash",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, comm_hash),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.func",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, func),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.buff",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, buff),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.datatype",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, datatype),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.count",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, count),
        ),
        (
            "ncclProfilerEventDescr_v1_t.p2p.peer",
            offset_of!(EventDescrV1, u) + offset_of!(P2pDescrV1, peer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v1_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyOp.pid",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyOp.channelId",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyOp.peer",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyOp.nSteps",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyOp.chunkSize",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyOp.isSend",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v1_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v1_t.proxyStep.step",
            offset_of!(EventDescrV1, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v1_t",
            size_of::<StateArgsV1>(),
        ),
        (
            "ncclProfilerEventStateArgs_v1_t.proxyOp.transSize",
            offset_of!(ProxyOpStateArgsV1, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v1_t.proxyOp.steps",
            offset_of!(ProxyOpStateArgsV1, steps),
        ),
        (
            "ncclProfilerEventStateArgs_v1_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        ("sizeof ncclProfiler_v1_t", size_of::<ProfilerV1>()),
        ("ncclProfiler_v1_t.name", offset_of!(ProfilerV1, name)),
        ("ncclProfiler_v1_t.init", offset_of!(ProfilerV1, init)),
        (
            "ncclProfiler_v1_t.startEvent",
            offset_of!(ProfilerV1, start_event),
        ),
        (
            "ncclProfiler_v1_t.stopEvent",
            offset_of!(ProfilerV1, stop_event),
        ),
        (
            "ncclProfiler_v1_t.recordEventState",
            offset_of!(ProfilerV1, record_event_state),
        ),
        (
            "ncclProfiler_v1_t.finalize",
            offset_of!(ProfilerV1, finalize),
        ),
        (
            "sizeof ncclProfilerEventDescr_v2_t",
            size_of::<EventDescrV2>(),
        ),
        (
            "ncclProfilerEventDescr_v2_t.type",
            offset_of!(EventDescrV2, type_),
        ),
        (
            "ncclProfilerEventDescr_v2_t.parentObj",
            offset_of!(EventDescrV2, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v2_t.rank",
            offset_of!(EventDescrV2, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v2_t.coll",
            size_of::<CollDescrV2>(),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.name",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, name),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.commHash",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, comm_hash),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.seqNumber",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.func",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, func),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.sendBuff",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.recvBuff",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.count",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, count),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.root",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, root),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.datatype",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, datatype),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.trafficBytes",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, traffic_bytes),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.nMaxChannels",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, n_max_channels),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.nWarps",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.algo",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, algo),
        ),
        (
            "ncclProfilerEventDescr_v2_t.coll.proto",
            offset_of!(EventDescrV2, u) + offset_of!(CollDescrV2, proto),
        ),
        (
            "sizeof ncclProfilerEventDescr_v2_t.p2p",
            size_of::<P2pDescrV2>(),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.name",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, name),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.commHash",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, comm_hash),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.func",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, func),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.buff",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, buff),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.datatype",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, datatype),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.count",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, count),
        ),
        (
            "ncclProfilerEventDescr_v2_t.p2p.peer",
            offset_of!(EventDescrV2, u) + offset_of!(P2pDescrV2, peer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v2_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyOp.pid",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyOp.channelId",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyOp.peer",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyOp.nSteps",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyOp.chunkSize",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyOp.isSend",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v2_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v2_t.proxyStep.step",
            offset_of!(EventDescrV2, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v2_t",
            size_of::<StateArgsV2>(),
        ),
        (
            "ncclProfilerEventStateArgs_v2_t.proxyOp.transSize",
            offset_of!(ProxyOpStateArgsV1, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v2_t.proxyOp.steps",
            offset_of!(ProxyOpStateArgsV1, steps),
        ),
        (
            "ncclProfilerEventStateArgs_v2_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        ("sizeof ncclProfiler_v2_t", size_of::<ProfilerV2>()),
        ("ncclProfiler_v2_t.name", offset_of!(ProfilerV2, name)),
        ("ncclProfiler_v2_t.init", offset_of!(ProfilerV2, init)),
        (
            "ncclProfiler_v2_t.startEvent",
            offset_of!(ProfilerV2, start_event),
        ),
        (
            "ncclProfiler_v2_t.stopEvent",
            offset_of!(ProfilerV2, stop_event),
        ),
        (
            "ncclProfiler_v2_t.recordEventState",
            offset_of!(ProfilerV2, record_event_state),
        ),
        (
            "ncclProfiler_v2_t.finalize",
            offset_of!(ProfilerV2, finalize),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t",
            size_of::<EventDescrV3>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.type",
            offset_of!(EventDescrV3, type_),
        ),
        (
            "ncclProfilerEventDescr_v3_t.parentObj",
            offset_of!(EventDescrV3, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v3_t.rank",
            offset_of!(EventDescrV3, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t.coll",
            size_of::<CollDescrV3>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.name",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, name),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.commHash",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, comm_hash),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.seqNumber",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.func",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, func),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.sendBuff",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.recvBuff",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.count",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, count),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.root",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, root),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.datatype",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, datatype),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.nMaxChannels",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, n_max_channels),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.nWarps",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.algo",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, algo),
        ),
        (
            "ncclProfilerEventDescr_v3_t.coll.proto",
            offset_of!(EventDescrV3, u) + offset_of!(CollDescrV3, proto),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t.p2p",
            size_of::<P2pDescrV2>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.name",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, name),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.commHash",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, comm_hash),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.func",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, func),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.buff",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, buff),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.datatype",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, datatype),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.count",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, count),
        ),
        (
            "ncclProfilerEventDescr_v3_t.p2p.peer",
            offset_of!(EventDescrV3, u) + offset_of!(P2pDescrV2, peer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyOp.pid",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyOp.channelId",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyOp.peer",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyOp.nSteps",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyOp.chunkSize",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyOp.isSend",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.proxyStep.step",
            offset_of!(EventDescrV3, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t.kernelCh",
            size_of::<KernelChDescrV3>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.kernelCh.channelId",
            offset_of!(EventDescrV3, u) + offset_of!(KernelChDescrV3, channel_id),
        ),
        (
            "sizeof ncclProfilerEventDescr_v3_t.netPlugin",
            size_of::<NetPluginDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v3_t.netPlugin.id",
            offset_of!(EventDescrV3, u) + offset_of!(NetPluginDescr, id),
        ),
        (
            "ncclProfilerEventDescr_v3_t.netPlugin.data",
            offset_of!(EventDescrV3, u) + offset_of!(NetPluginDescr, data),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v3_t",
            size_of::<StateArgsV3>(),
        ),
        (
            "ncclProfilerEventStateArgs_v3_t.proxyOp.transSize",
            offset_of!(ProxyOpStateArgsV1, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v3_t.proxyOp.steps",
            offset_of!(ProxyOpStateArgsV1, steps),
        ),
        (
            "ncclProfilerEventStateArgs_v3_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        ("sizeof ncclProfiler_v3_t", size_of::<ProfilerV3>()),
        ("ncclProfiler_v3_t.name", offset_of!(ProfilerV3, name)),
        ("ncclProfiler_v3_t.init", offset_of!(ProfilerV3, init)),
        (
            "ncclProfiler_v3_t.startEvent",
            offset_of!(ProfilerV3, start_event),
        ),
        (
            "ncclProfiler_v3_t.stopEvent",
            offset_of!(ProfilerV3, stop_event),
        ),
        (
            "ncclProfiler_v3_t.recordEventState",
            offset_of!(ProfilerV3, record_event_state),
        ),
        (
            "ncclProfiler_v3_t.finalize",
            offset_of!(ProfilerV3, finalize),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t",
            size_of::<EventDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.type",
            offset_of!(EventDescrV4, type_),
        ),
        (
            "ncclProfilerEventDescr_v4_t.parentObj",
            offset_of!(EventDescrV4, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v4_t.rank",
            offset_of!(EventDescrV4, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t.coll",
            size_of::<CollDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.seqNumber",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.func",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, func),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.sendBuff",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.recvBuff",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.count",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, count),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.root",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, root),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.datatype",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, datatype),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.nChannels",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.nWarps",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.algo",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, algo),
        ),
        (
            "ncclProfilerEventDescr_v4_t.coll.proto",
            offset_of!(EventDescrV4, u) + offset_of!(CollDescrV4, proto),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t.p2p",
            size_of::<P2pDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.p2p.func",
            offset_of!(EventDescrV4, u) + offset_of!(P2pDescrV4, func),
        ),
        (
            "ncclProfilerEventDescr_v4_t.p2p.buff",
            offset_of!(EventDescrV4, u) + offset_of!(P2pDescrV4, buff),
        ),
        (
            "ncclProfilerEventDescr_v4_t.p2p.datatype",
            offset_of!(EventDescrV4, u) + offset_of!(P2pDescrV4, datatype),
        ),
        (
            "ncclProfilerEventDescr_v4_t.p2p.count",
            offset_of!(EventDescrV4, u) + offset_of!(P2pDescrV4, count),
        ),
        (
            "ncclProfilerEventDescr_v4_t.p2p.peer",
            offset_of!(EventDescrV4, u) + offset_of!(P2pDescrV4, peer),
        ),
        (
            "ncclProfilerEventDescr_v4_t.p2p.nChannels",
            offset_of!(EventDescrV4, u) + offset_of!(P2pDescrV4, n_channels),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyOp.pid",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyOp.channelId",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyOp.peer",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyOp.nSteps",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyOp.chunkSize",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyOp.isSend",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.proxyStep.step",
            offset_of!(EventDescrV4, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t.kernelCh",
            size_of::<KernelChDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.kernelCh.channelId",
            offset_of!(EventDescrV4, u) + offset_of!(KernelChDescrV4, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v4_t.kernelCh.pTimer",
            offset_of!(EventDescrV4, u) + offset_of!(KernelChDescrV4, p_timer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v4_t.netPlugin",
            size_of::<NetPluginDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v4_t.netPlugin.id",
            offset_of!(EventDescrV4, u) + offset_of!(NetPluginDescr, id),
        ),
        (
            "ncclProfilerEventDescr_v4_t.netPlugin.data",
            offset_of!(EventDescrV4, u) + offset_of!(NetPluginDescr, data),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v4_t",
            size_of::<StateArgsV4>(),
        ),
        (
            "ncclProfilerEventStateArgs_v4_t.proxyStep.transSize",
            offset_of!(ProxyStepStateArgs, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v4_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        (
            "ncclProfilerEventStateArgs_v4_t.netPlugin.data",
            offset_of!(NetPluginStateArgs, data),
        ),
        (
            "ncclProfilerEventStateArgs_v4_t.kernelCh.pTimer",
            offset_of!(KernelChStateArgs, p_timer),
        ),
        ("sizeof ncclProfiler_v4_t", size_of::<ProfilerV4>()),
        ("ncclProfiler_v4_t.name", offset_of!(ProfilerV4, name)),
        ("ncclProfiler_v4_t.init", offset_of!(ProfilerV4, init)),
        (
            "ncclProfiler_v4_t.startEvent",
            offset_of!(ProfilerV4, start_event),
        ),
        (
            "ncclProfiler_v4_t.stopEvent",
            offset_of!(ProfilerV4, stop_event),
        ),
        (
            "ncclProfiler_v4_t.recordEventState",
            offset_of!(ProfilerV4, record_event_state),
        ),
        (
            "ncclProfiler_v4_t.finalize",
            offset_of!(ProfilerV4, finalize),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t",
            size_of::<EventDescrV5>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.type",
            offset_of!(EventDescrV5, type_),
        ),
        (
            "ncclProfilerEventDescr_v5_t.parentObj",
            offset_of!(EventDescrV5, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v5_t.rank",
            offset_of!(EventDescrV5, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.groupApi",
            size_of::<GroupApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.groupApi.graphCaptured",
            offset_of!(EventDescrV5, u) + offset_of!(GroupApiDescr, graph_captured),
        ),
        (
            "ncclProfilerEventDescr_v5_t.groupApi.groupDepth",
            offset_of!(EventDescrV5, u) + offset_of!(GroupApiDescr, group_depth),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.collApi",
            size_of::<CollApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.collApi.func",
            offset_of!(EventDescrV5, u) + offset_of!(CollApiDescr, func),
        ),
        (
            "ncclProfilerEventDescr_v5_t.collApi.count",
            offset_of!(EventDescrV5, u) + offset_of!(CollApiDescr, count),
        ),
        (
            "ncclProfilerEventDescr_v5_t.collApi.datatype",
            offset_of!(EventDescrV5, u) + offset_of!(CollApiDescr, datatype),
        ),
        (
            "ncclProfilerEventDescr_v5_t.collApi.root",
            offset_of!(EventDescrV5, u) + offset_of!(CollApiDescr, root),
        ),
        (
            "ncclProfilerEventDescr_v5_t.collApi.stream",
            offset_of!(EventDescrV5, u) + offset_of!(CollApiDescr, stream),
        ),
        (
            "ncclProfilerEventDescr_v5_t.collApi.graphCaptured",
            offset_of!(EventDescrV5, u) + offset_of!(CollApiDescr, graph_captured),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.p2pApi",
            size_of::<P2pApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2pApi.func",
            offset_of!(EventDescrV5, u) + offset_of!(P2pApiDescr, func),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2pApi.count",
            offset_of!(EventDescrV5, u) + offset_of!(P2pApiDescr, count),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2pApi.datatype",
            offset_of!(EventDescrV5, u) + offset_of!(P2pApiDescr, datatype),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2pApi.stream",
            offset_of!(EventDescrV5, u) + offset_of!(P2pApiDescr, stream),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2pApi.graphCaptured",
            offset_of!(EventDescrV5, u) + offset_of!(P2pApiDescr, graph_captured),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.kernelLaunch",
            size_of::<KernelLaunchDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.kernelLaunch.stream",
            offset_of!(EventDescrV5, u) + offset_of!(KernelLaunchDescr, stream),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.coll",
            size_of::<CollDescrV5>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.seqNumber",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.func",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, func),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.sendBuff",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.recvBuff",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.count",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, count),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.root",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, root),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.datatype",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, datatype),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.nChannels",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.nWarps",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.algo",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, algo),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.proto",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, proto),
        ),
        (
            "ncclProfilerEventDescr_v5_t.coll.parentGroup",
            offset_of!(EventDescrV5, u) + offset_of!(CollDescrV5, parent_group),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.p2p",
            size_of::<P2pDescrV5>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.func",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, func),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.buff",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, buff),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.datatype",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, datatype),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.count",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, count),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.peer",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, peer),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.nChannels",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v5_t.p2p.parentGroup",
            offset_of!(EventDescrV5, u) + offset_of!(P2pDescrV5, parent_group),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyOp.pid",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyOp.channelId",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyOp.peer",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyOp.nSteps",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyOp.chunkSize",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyOp.isSend",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.proxyStep.step",
            offset_of!(EventDescrV5, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.kernelCh",
            size_of::<KernelChDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.kernelCh.channelId",
            offset_of!(EventDescrV5, u) + offset_of!(KernelChDescrV4, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v5_t.kernelCh.pTimer",
            offset_of!(EventDescrV5, u) + offset_of!(KernelChDescrV4, p_timer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v5_t.netPlugin",
            size_of::<NetPluginDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v5_t.netPlugin.id",
            offset_of!(EventDescrV5, u) + offset_of!(NetPluginDescr, id),
        ),
        (
            "ncclProfilerEventDescr_v5_t.netPlugin.data",
            offset_of!(EventDescrV5, u) + offset_of!(NetPluginDescr, data),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v5_t",
            size_of::<StateArgsV5>(),
        ),
        (
            "ncclProfilerEventStateArgs_v5_t.proxyStep.transSize",
            offset_of!(ProxyStepStateArgs, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v5_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        (
            "ncclProfilerEventStateArgs_v5_t.netPlugin.data",
            offset_of!(NetPluginStateArgs, data),
        ),
        (
            "ncclProfilerEventStateArgs_v5_t.kernelCh.pTimer",
            offset_of!(KernelChStateArgs, p_timer),
        ),
        ("sizeof ncclProfiler_v5_t", size_of::<ProfilerV5>()),
        ("ncclProfiler_v5_t.name", offset_of!(ProfilerV5, name)),
        ("ncclProfiler_v5_t.init", offset_of!(ProfilerV5, init)),
        (
            "ncclProfiler_v5_t.startEvent",
            offset_of!(ProfilerV5, start_event),
        ),
        (
            "ncclProfiler_v5_t.stopEvent",
            offset_of!(ProfilerV5, stop_event),
        ),
        (
            "ncclProfiler_v5_t.recordEventState",
            offset_of!(ProfilerV5, record_event_state),
        ),
        (
            "ncclProfiler_v5_t.finalize",
            offset_of!(ProfilerV5, finalize),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t",
            size_of::<EventDescrV6>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.type",
            offset_of!(EventDescrV6, type_),
        ),
        (
            "ncclProfilerEventDescr_v6_t.parentObj",
            offset_of!(EventDescrV6, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v6_t.rank",
            offset_of!(EventDescrV6, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.groupApi",
            size_of::<GroupApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.groupApi.graphCaptured",
            offset_of!(EventDescrV6, u) + offset_of!(GroupApiDescr, graph_captured),
        ),
        (
            "ncclProfilerEventDescr_v6_t.groupApi.groupDepth",
            offset_of!(EventDescrV6, u) + offset_of!(GroupApiDescr, group_depth),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.collApi",
            size_of::<CollApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.collApi.func",
            offset_of!(EventDescrV6, u) + offset_of!(CollApiDescr, func),
        ),
        (
            "ncclProfilerEventDescr_v6_t.collApi.count",
            offset_of!(EventDescrV6, u) + offset_of!(CollApiDescr, count),
        ),
        (
            "ncclProfilerEventDescr_v6_t.collApi.datatype",
            offset_of!(EventDescrV6, u) + offset_of!(CollApiDescr, datatype),
        ),
        (
            "ncclProfilerEventDescr_v6_t.collApi.root",
            offset_of!(EventDescrV6, u) + offset_of!(CollApiDescr, root),
        ),
        (
            "ncclProfilerEventDescr_v6_t.collApi.stream",
            offset_of!(EventDescrV6, u) + offset_of!(CollApiDescr, stream),
        ),
        (
            "ncclProfilerEventDescr_v6_t.collApi.graphCaptured",
            offset_of!(EventDescrV6, u) + offset_of!(CollApiDescr, graph_captured),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.p2pApi",
            size_of::<P2pApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2pApi.func",
            offset_of!(EventDescrV6, u) + offset_of!(P2pApiDescr, func),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2pApi.count",
            offset_of!(EventDescrV6, u) + offset_of!(P2pApiDescr, count),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2pApi.datatype",
            offset_of!(EventDescrV6, u) + offset_of!(P2pApiDescr, datatype),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2pApi.stream",
            offset_of!(EventDescrV6, u) + offset_of!(P2pApiDescr, stream),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2pApi.graphCaptured",
            offset_of!(EventDescrV6, u) + offset_of!(P2pApiDescr, graph_captured),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.kernelLaunch",
            size_of::<KernelLaunchDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.kernelLaunch.stream",
            offset_of!(EventDescrV6, u) + offset_of!(KernelLaunchDescr, stream),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.coll",
            size_of::<CollDescrV5>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.seqNumber",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.func",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, func),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.sendBuff",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.recvBuff",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.count",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, count),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.root",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, root),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.datatype",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, datatype),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.nChannels",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.nWarps",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.algo",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, algo),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.proto",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, proto),
        ),
        (
            "ncclProfilerEventDescr_v6_t.coll.parentGroup",
            offset_of!(EventDescrV6, u) + offset_of!(CollDescrV5, parent_group),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.p2p",
            size_of::<P2pDescrV5>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.func",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, func),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.buff",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, buff),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.datatype",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, datatype),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.count",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, count),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.peer",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, peer),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.nChannels",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v6_t.p2p.parentGroup",
            offset_of!(EventDescrV6, u) + offset_of!(P2pDescrV5, parent_group),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyOp.pid",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyOp.channelId",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyOp.peer",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyOp.nSteps",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyOp.chunkSize",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyOp.isSend",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.proxyStep.step",
            offset_of!(EventDescrV6, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.kernelCh",
            size_of::<KernelChDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.kernelCh.channelId",
            offset_of!(EventDescrV6, u) + offset_of!(KernelChDescrV4, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v6_t.kernelCh.pTimer",
            offset_of!(EventDescrV6, u) + offset_of!(KernelChDescrV4, p_timer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.netPlugin",
            size_of::<NetPluginDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.netPlugin.id",
            offset_of!(EventDescrV6, u) + offset_of!(NetPluginDescr, id),
        ),
        (
            "ncclProfilerEventDescr_v6_t.netPlugin.data",
            offset_of!(EventDescrV6, u) + offset_of!(NetPluginDescr, data),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.ceColl",
            size_of::<CeCollDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.seqNumber",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.func",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, func),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.sendBuff",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.recvBuff",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.count",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, count),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.root",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, root),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.datatype",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, datatype),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.syncStrategy",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, sync_strategy),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.intraBatchSync",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, intra_batch_sync),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.batchSize",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, batch_size),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.numBatches",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, num_batches),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.ceSeqNum",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, ce_seq_num),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceColl.stream",
            offset_of!(EventDescrV6, u) + offset_of!(CeCollDescr, stream),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.ceCollSync",
            size_of::<CeSyncDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceCollSync.isComplete",
            offset_of!(EventDescrV6, u) + offset_of!(CeSyncDescr, is_complete),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceCollSync.nRanks",
            offset_of!(EventDescrV6, u) + offset_of!(CeSyncDescr, n_ranks),
        ),
        (
            "sizeof ncclProfilerEventDescr_v6_t.ceCollBatch",
            size_of::<CeBatchDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceCollBatch.numOps",
            offset_of!(EventDescrV6, u) + offset_of!(CeBatchDescr, num_ops),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceCollBatch.totalBytes",
            offset_of!(EventDescrV6, u) + offset_of!(CeBatchDescr, total_bytes),
        ),
        (
            "ncclProfilerEventDescr_v6_t.ceCollBatch.useIntraSync",
            offset_of!(EventDescrV6, u) + offset_of!(CeBatchDescr, use_intra_sync),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v6_t",
            size_of::<StateArgsV6>(),
        ),
        (
            "ncclProfilerEventStateArgs_v6_t.proxyStep.transSize",
            offset_of!(ProxyStepStateArgs, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v6_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        (
            "ncclProfilerEventStateArgs_v6_t.netPlugin.data",
            offset_of!(NetPluginStateArgs, data),
        ),
        (
            "ncclProfilerEventStateArgs_v6_t.kernelCh.pTimer",
            offset_of!(KernelChStateArgs, p_timer),
        ),
        ("sizeof ncclProfiler_v6_t", size_of::<ProfilerV6>()),
        ("ncclProfiler_v6_t.name", offset_of!(ProfilerV6, name)),
        ("ncclProfiler_v6_t.init", offset_of!(ProfilerV6, init)),
        (
            "ncclProfiler_v6_t.startEvent",
            offset_of!(ProfilerV6, start_event),
        ),
        (
            "ncclProfiler_v6_t.stopEvent",
            offset_of!(ProfilerV6, stop_event),
        ),
        (
            "ncclProfiler_v6_t.recordEventState",
            offset_of!(ProfilerV6, record_event_state),
        ),
        (
            "ncclProfiler_v6_t.finalize",
            offset_of!(ProfilerV6, finalize),
        ),
    ]
}

/// v7's keys (printed by the C side only where the headers have v7).
pub fn rust_layout_v7() -> Vec<(&'static str, usize)> {
    vec![
        (
            "sizeof ncclProfilerEventDescr_v7_t",
            size_of::<EventDescrV7>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.type",
            offset_of!(EventDescrV7, type_),
        ),
        (
            "ncclProfilerEventDescr_v7_t.parentObj",
            offset_of!(EventDescrV7, parent_obj),
        ),
        (
            "ncclProfilerEventDescr_v7_t.rank",
            offset_of!(EventDescrV7, rank),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.groupApi",
            size_of::<GroupApiDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.groupApi.graphCaptured",
            offset_of!(EventDescrV7, u) + offset_of!(GroupApiDescr, graph_captured),
        ),
        (
            "ncclProfilerEventDescr_v7_t.groupApi.groupDepth",
            offset_of!(EventDescrV7, u) + offset_of!(GroupApiDescr, group_depth),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.collApi",
            size_of::<CollApiDescrV7>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.func",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, func),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.count",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, count),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.datatype",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, datatype),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.root",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, root),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.stream",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, stream),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.graphCaptured",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, graph_captured),
        ),
        (
            "ncclProfilerEventDescr_v7_t.collApi.userTag",
            offset_of!(EventDescrV7, u) + offset_of!(CollApiDescrV7, user_tag),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.p2pApi",
            size_of::<P2pApiDescrV7>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2pApi.func",
            offset_of!(EventDescrV7, u) + offset_of!(P2pApiDescrV7, func),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2pApi.count",
            offset_of!(EventDescrV7, u) + offset_of!(P2pApiDescrV7, count),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2pApi.datatype",
            offset_of!(EventDescrV7, u) + offset_of!(P2pApiDescrV7, datatype),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2pApi.stream",
            offset_of!(EventDescrV7, u) + offset_of!(P2pApiDescrV7, stream),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2pApi.graphCaptured",
            offset_of!(EventDescrV7, u) + offset_of!(P2pApiDescrV7, graph_captured),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2pApi.userTag",
            offset_of!(EventDescrV7, u) + offset_of!(P2pApiDescrV7, user_tag),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.kernelLaunch",
            size_of::<KernelLaunchDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelLaunch.stream",
            offset_of!(EventDescrV7, u) + offset_of!(KernelLaunchDescr, stream),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.coll",
            size_of::<CollDescrV7>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.seqNumber",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.func",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, func),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.sendBuff",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.recvBuff",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.count",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, count),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.root",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, root),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.datatype",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, datatype),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.nChannels",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.nWarps",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, n_warps),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.algo",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, algo),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.proto",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, proto),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.parentGroup",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, parent_group),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.kernelVariant",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, kernel_variant),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.isSymColl",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, is_sym_coll),
        ),
        (
            "ncclProfilerEventDescr_v7_t.coll.userTag",
            offset_of!(EventDescrV7, u) + offset_of!(CollDescrV7, user_tag),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.p2p",
            size_of::<P2pDescrV7>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.func",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, func),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.buff",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, buff),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.datatype",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, datatype),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.count",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, count),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.peer",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, peer),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.nChannels",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, n_channels),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.parentGroup",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, parent_group),
        ),
        (
            "ncclProfilerEventDescr_v7_t.p2p.userTag",
            offset_of!(EventDescrV7, u) + offset_of!(P2pDescrV7, user_tag),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.proxyOp",
            size_of::<ProxyOpDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyOp.pid",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyOpDescr, pid),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyOp.channelId",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyOpDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyOp.peer",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyOpDescr, peer),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyOp.nSteps",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyOpDescr, n_steps),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyOp.chunkSize",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyOpDescr, chunk_size),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyOp.isSend",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyOpDescr, is_send),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.proxyStep",
            size_of::<ProxyStepDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.proxyStep.step",
            offset_of!(EventDescrV7, u) + offset_of!(ProxyStepDescr, step),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.kernelCh",
            size_of::<KernelChDescrV4>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelCh.channelId",
            offset_of!(EventDescrV7, u) + offset_of!(KernelChDescrV4, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelCh.pTimer",
            offset_of!(EventDescrV7, u) + offset_of!(KernelChDescrV4, p_timer),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.netPlugin",
            size_of::<NetPluginDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.netPlugin.id",
            offset_of!(EventDescrV7, u) + offset_of!(NetPluginDescr, id),
        ),
        (
            "ncclProfilerEventDescr_v7_t.netPlugin.data",
            offset_of!(EventDescrV7, u) + offset_of!(NetPluginDescr, data),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.ceColl",
            size_of::<CeCollDescrV7>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.seqNumber",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, seq_number),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.func",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, func),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.sendBuff",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, send_buff),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.recvBuff",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, recv_buff),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.count",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, count),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.root",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, root),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.datatype",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, datatype),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.syncStrategy",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, sync_strategy),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.intraBatchSync",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, intra_batch_sync),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.batchSize",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, batch_size),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.numBatches",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, num_batches),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.ceSeqNum",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, ce_seq_num),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.stream",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, stream),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceColl.userTag",
            offset_of!(EventDescrV7, u) + offset_of!(CeCollDescrV7, user_tag),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.ceCollSync",
            size_of::<CeSyncDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceCollSync.isComplete",
            offset_of!(EventDescrV7, u) + offset_of!(CeSyncDescr, is_complete),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceCollSync.nRanks",
            offset_of!(EventDescrV7, u) + offset_of!(CeSyncDescr, n_ranks),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.ceCollBatch",
            size_of::<CeBatchDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceCollBatch.numOps",
            offset_of!(EventDescrV7, u) + offset_of!(CeBatchDescr, num_ops),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceCollBatch.totalBytes",
            offset_of!(EventDescrV7, u) + offset_of!(CeBatchDescr, total_bytes),
        ),
        (
            "ncclProfilerEventDescr_v7_t.ceCollBatch.useIntraSync",
            offset_of!(EventDescrV7, u) + offset_of!(CeBatchDescr, use_intra_sync),
        ),
        (
            "sizeof ncclProfilerEventDescr_v7_t.kernelPhase",
            size_of::<KernelPhaseDescr>(),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelPhase.channelId",
            offset_of!(EventDescrV7, u) + offset_of!(KernelPhaseDescr, channel_id),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelPhase.phaseId",
            offset_of!(EventDescrV7, u) + offset_of!(KernelPhaseDescr, phase_id),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelPhase.phaseName",
            offset_of!(EventDescrV7, u) + offset_of!(KernelPhaseDescr, phase_name),
        ),
        (
            "ncclProfilerEventDescr_v7_t.kernelPhase.pTimer",
            offset_of!(EventDescrV7, u) + offset_of!(KernelPhaseDescr, p_timer),
        ),
        (
            "sizeof ncclProfilerEventStateArgs_v7_t",
            size_of::<StateArgsV6>(),
        ),
        (
            "ncclProfilerEventStateArgs_v7_t.proxyStep.transSize",
            offset_of!(ProxyStepStateArgs, trans_size),
        ),
        (
            "ncclProfilerEventStateArgs_v7_t.proxyCtrl.appendedProxyOps",
            offset_of!(ProxyCtrlStateArgs, appended_proxy_ops),
        ),
        (
            "ncclProfilerEventStateArgs_v7_t.netPlugin.data",
            offset_of!(NetPluginStateArgs, data),
        ),
        (
            "ncclProfilerEventStateArgs_v7_t.kernelCh.pTimer",
            offset_of!(KernelChStateArgs, p_timer),
        ),
        ("sizeof ncclProfiler_v7_t", size_of::<ProfilerV7>()),
        ("ncclProfiler_v7_t.name", offset_of!(ProfilerV7, name)),
        ("ncclProfiler_v7_t.init", offset_of!(ProfilerV7, init)),
        (
            "ncclProfiler_v7_t.startEvent",
            offset_of!(ProfilerV7, start_event),
        ),
        (
            "ncclProfiler_v7_t.stopEvent",
            offset_of!(ProfilerV7, stop_event),
        ),
        (
            "ncclProfiler_v7_t.recordEventState",
            offset_of!(ProfilerV7, record_event_state),
        ),
        (
            "ncclProfiler_v7_t.finalize",
            offset_of!(ProfilerV7, finalize),
        ),
    ]
}
