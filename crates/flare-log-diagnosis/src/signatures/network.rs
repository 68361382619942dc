//! NICs, InfiniBand/RoCE and sockets, as NCCL, Gloo and the kernel report them.

use super::{Reading, Role, Rule};
use flare_model::{FailureCategory as C, JobStage, LogSignature as S};

pub const RULES: &[Rule] = &[
    Rule {
        signature: S::NicLinkDown,
        role: Role::Root,
        category: C::Network,
        needles: &["link down", "lost carrier", "port module event", "IBV_EVENT_PORT_ERR", "flap", "state down", "to down", "port error"],
        pattern: r"(?i)(?:\bLink down\b|lost carrier|Port module event[^\n]*(?:unplugged|error)|IBV_EVENT_PORT_ERR|link[^\n]{0,20}flapp?ing|\bstate:? DOWN\b|state (?:changed )?to DOWN|Got async event ?: port error)",
        meaning: "a NIC port or its link went down",
        action: "drain the node and have its NIC, cable and switch port checked (ibstat, `rdma link`, the switch's port counters; a flapping link needs the cable or transceiver replaced); restart the job on other nodes",
        restart_helps: Some(true),
        stage: None,
        weight: 100,
        refine: None,
        example: "...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
        example_source: "https://github.com/Lightning-AI/lit-llama/issues/380",
    },
    Rule {
        signature: S::IbAsyncError,
        role: Role::Root,
        category: C::Network,
        needles: &["async event"],
        pattern: r"(?i)NET/IB ?: Got async (?:event|error) ?: ?(?P<detail>[^\n]*)",
        meaning: "the InfiniBand device reported an asynchronous error",
        action: "drain the node and check its NIC (ibstat, dmesg for mlx5 errors); restart the job on other nodes",
        restart_helps: Some(true),
        stage: None,
        weight: 90,
        refine: None,
        example: "node-7:1234:1290 [0] NCCL WARN NET/IB : Got async event : local catastrophic error",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/transport/net_ib.cc",
    },
    Rule {
        signature: S::IbCompletionError,
        role: Role::Root,
        category: C::Network,
        needles: &["Got completion"],
        // NCCL < 2.19: `Got completion with error 12, opcode 0, len 0, vendor err 129`
        // NCCL >= 2.19: `Got completion from peer 10.0.0.5<34567> with status=12 opcode=0 ...`
        //   (some versions `with error 12`)
        pattern: r"(?i)NET/IB ?: Got completion (?:from peer (?P<peer>[^\s<]+)(?:<\d+>)? )?with (?:error |status=)(?P<status>\d+)",
        meaning: "an InfiniBand transfer failed",
        action: "check the links between the hosts named (ibstat, the switch's port counters) and whether the peer process was still alive",
        restart_helps: Some(true),
        stage: None,
        weight: 70,
        refine: Some(ib_status),
        example: "ip-172-31-8-8:1278:1392 [1] NCCL INFO NET/IB : Got completion from peer 172.31.11.148<53522> with error 12, opcode 129, len 0, vendor err 129",
        example_source: "https://github.com/NVIDIA/nccl/issues/733",
    },
    Rule {
        signature: S::NcclNoInterface,
        role: Role::Root,
        category: C::Configuration,
        needles: &["interface", "Unable to find address for"],
        pattern: r"(?i)(?:no socket interface found|No usable listening interface found|no (?:IP )?interface found|NCCL_SOCKET_IFNAME[^\n]{0,80}(?:not found|no interface|does not exist)|Unable to find address for:? ?(?P<detail>\S+)|Bootstrap ?: no socket interface)",
        meaning: "no network interface matched the one the job was told to use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) or none was usable",
        action: "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to an interface that exists on every node and routes between them (`ip -br addr`), or unset it",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 80,
        refine: None,
        example: "misc/socket.cc:386 NCCL WARN Bootstrap : no socket interface found",
        example_source: "https://github.com/NVIDIA/nccl/issues/210",
    },
    Rule {
        signature: S::SocketConnectRefused,
        role: Role::Symptom,
        category: C::Configuration,
        needles: &["Connection refused", "No route to host"],
        pattern: r"(?i)(?:connect(?:ion)?(?: to)? (?P<peer>[0-9a-fA-F.:]+)?[^\n]{0,40}(?:failed|returned)[^\n]{0,20}(?:Connection refused|No route to host)|Connection refused|No route to host)",
        meaning: "a connection to another host was refused or had no route: the address or port is wrong, a firewall blocks it, or the process there is not listening (it has not started or has died)",
        action: "check MASTER_ADDR/MASTER_PORT and the network interface every node uses, that the ports are open between nodes, and whether the process on the other side was running",
        restart_helps: None,
        stage: Some(JobStage::Init),
        weight: 40,
        refine: None,
        example: "misc/socket.cc:456 NCCL WARN Net : Connect to 10.1.1.2<45327> failed : Connection refused",
        example_source: "https://github.com/NVIDIA/nccl/issues/",
    },
];

/// The reading of an IB completion error from its status (`ibv_wc_status`).
fn ib_status(caps: &regex::Captures) -> Option<Reading> {
    let status: u32 = caps.name("status")?.as_str().parse().ok()?;
    let base = |role, category, weight, meaning: &str, action: &str, restart| Reading {
        signature: S::IbCompletionError,
        role,
        category,
        weight,
        meaning: meaning.to_string(),
        action: action.to_string(),
        restart_helps: restart,
        stage: None,
    };
    Some(match status {
        5 => base(
            Role::Cascade,
            C::Unknown,
            0,
            "IB status 5 (work request flushed): the connection was already in error",
            "look for the error before it",
            None,
        ),
        4 => base(
            Role::Root,
            C::Interconnect,
            70,
            "IB status 4 (local protection error): the NIC could not access the registered memory, usually GPU memory through GPUDirect RDMA blocked by PCIe ACS or the IOMMU",
            "disable PCIe ACS on the switches between NIC and GPU (or the IOMMU), check nvidia-peermem is loaded, or try NCCL_NET_GDR_LEVEL=LOC to confirm",
            Some(false),
        ),
        12 | 13 => base(
            Role::Root,
            C::Network,
            70,
            "IB status 12/13 (transport or receiver-not-ready retry counter exceeded): the peer stopped answering, because the link or switch failed, the fabric is misconfigured (RoCE GID index, PFC) or the peer process died",
            "check the links and switch ports between the hosts named (ibstat, port counters) and whether the peer process died first; on RoCE check NCCL_IB_GID_INDEX",
            Some(true),
        ),
        _ => base(
            Role::Root,
            C::Network,
            70,
            &format!("an InfiniBand transfer failed with status {status}"),
            "check the NICs and links between the hosts named (ibstat, dmesg for mlx5 errors)",
            None,
        ),
    })
}
