//! NICs, InfiniBand/RoCE and sockets, as NCCL, Gloo and the kernel report them.

use super::{Reading, Role, Rule};
use flare_model::{FailureCategory as C, JobStage, LogSignature as S};

pub const RULES: &[Rule] = &[
    Rule {
        signature: S::NicLinkDown,
        role: Role::Root,
        category: C::Network,
        needles: &["link down", "lost carrier", "port module event", "PORT_ERR", "flap", "state down", "to down", "port error"],
        // `event: PORT_ERR`: mlx5_ib's report of IB_EVENT_PORT_ERR in the kernel log
        pattern: r"(?i)(?:\bLink down\b|lost carrier|Port module event[^\n]*(?:unplugged|error)|(?:IBV_EVENT_|event: )PORT_ERR\b|link[^\n]{0,20}flapp?ing|\bstate:? DOWN\b|state (?:changed )?to DOWN|Got async event ?: port error)",
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
        signature: S::NicDriverFailure,
        role: Role::Root,
        category: C::Network,
        needles: &["leak of a command resource", "health compromised", "unrecoverable hardware error", "firmware internal error", "irisc not responding", "HW fatal error", "Fatal error", "polling) timeout", "any completion for admin cmd", "Admin queue is closed", "Reset indication didn't", "Device isn't ready"],
        // the kernel's NIC drivers: mlx5_core's command interface (cmd.c) and health poll
        // (health.c, its syndromes), AWS EFA's admin queue (efa_com.c)
        pattern: r"(?:(?P<pci>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])[^\n]*?)?(?:timeout\. Will cause a leak of a command resource|device's health compromised|synd 0x[0-9a-f]+: (?P<detail>unrecoverable hardware error|firmware internal error|irisc not responding|HW fatal error|firmware CRC error|ICM fetch PCI error|High temp(?:e)?rature)|mlx5[^\n]*Fatal error \d+ detected|Wait for completion \(polling\) timeout|didn't send any completion for admin cmd|Admin queue is closed|Reset indication didn't turn (?:on|off)|Device isn't ready, (?:can't reset device|abort com init))",
        meaning: "the NIC's firmware stopped answering its driver (a command timed out, its health counter stopped, or it reported a fatal error): the NIC is failing",
        action: "drain the node; reset the NIC (mlxfwreset, or a reboot), update its firmware, and replace it if it happens again; restart the job on other nodes",
        restart_helps: Some(true),
        stage: None,
        weight: 100,
        refine: None,
        example: "mlx5_core 0000:3b:00.0: wait_func:1165:(pid 1234): ACCESS_REG(0x805) timeout. Will cause a leak of a command resource",
        example_source: "https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/cmd.c",
    },
    Rule {
        signature: S::NicDriverFailure,
        role: Role::Symptom,
        category: C::Network,
        needles: &["NETDEV WATCHDOG", "TX timeout detected", "RX timeout on channel"],
        // net/sched/sch_generic.c's transmit watchdog; mlx5e's own reports of it
        pattern: r"(?:NETDEV WATCHDOG: (?P<detail>\S+) [^\n]*transmit queue \d+ timed out|TX timeout detected|RX timeout on channel)",
        meaning: "a NIC stopped sending on one of its queues for seconds and its driver reset it: the NIC, its firmware or its driver on this node is failing, and traffic through it stalled",
        action: "check the NIC on this node (dmesg around the line, ethtool -S, the firmware version); drain the node if it happens again or the job hung at the time",
        restart_helps: None,
        stage: None,
        weight: 55,
        refine: None,
        example: "NETDEV WATCHDOG: ens1f0np0 (mlx5_core): transmit queue 3 timed out 5016 ms",
        example_source: "https://github.com/torvalds/linux/blob/master/net/sched/sch_generic.c",
    },
    Rule {
        signature: S::IbAsyncError,
        role: Role::Root,
        category: C::Network,
        needles: &["async event", "async error event", "async fatal event"],
        // <= 2.19 `Got async event : %s`; 2.20+ `NET/IB : mlx5_0:1 Got async event : %s`;
        // 2.23+ `... async fatal event on QP (0x..): %s`, `Got async error event: %s`
        pattern: r"NET/IB ?: (?:[\w.-]+:\d+ )?(?:Got (?:non-fatal )?async (?:error )?event ?: ?|async fatal event(?: on (?P<op>CQ|QP|SRQ)[^:]*)?: )(?P<detail>[^\n(]*)",
        meaning: "the InfiniBand device reported an asynchronous error",
        action: "drain the node and check its NIC (ibstat, dmesg for mlx5 errors); restart the job on other nodes",
        restart_helps: Some(true),
        stage: None,
        weight: 90,
        refine: Some(ib_event),
        example: "... transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
        example_source: "https://github.com/NVIDIA/nccl/issues/230",
    },
    Rule {
        signature: S::IbCompletionError,
        role: Role::Root,
        category: C::Network,
        needles: &["Got completion"],
        // NCCL < 2.19: `Got completion with error 12, opcode 0, len 0, vendor err 129`
        // NCCL >= 2.19: `Got completion from peer 10.0.0.5<34567> with status=12 opcode=0 ...`
        //   (some versions `with error 12`)
        pattern: r"(?i)NET/IB(?:/GIN)? ?P? ?: ?Got completion (?:from peer (?P<peer>[^\s<]+)(?:<\d+>)? )?with (?:error |status=)(?:\w+\()?(?P<status>\d+)",
        meaning: "an InfiniBand transfer failed",
        action: "check the links between the hosts named (ibstat, the switch's port counters) and whether the peer process was still alive",
        restart_helps: Some(true),
        stage: None,
        weight: 70,
        refine: Some(ib_status),
        example: "task-646--1-mhpnk:91:123 [0] transport/net_ib.cc:881 NCCL WARN NET/IB : Got completion from peer 172.17.127.143<49577> with error 12, opcode 1, len 0, vendor err 129",
        example_source: "https://github.com/NVIDIA/nccl/issues/733",
    },
    Rule {
        signature: S::NcclNoInterface,
        role: Role::Root,
        category: C::Configuration,
        needles: &["interface", "Unable to find address for", "no device found", "NCCL_COMM_ID", "Socket creation failed", "AF_INET"],
        pattern: r"(?i)(?:no socket interface found|No usable listening interface found|no (?:IP )?interface found|No interface found in the same subnet|no device found (?:matching|after excluding)|Invalid NCCL_COMM_ID|NCCL_SOCKET_IFNAME[^\n]{0,80}(?:not found|no interface|does not exist)|Unable to find address for:? ?(?P<detail>\S+)|Bootstrap ?: no socket interface|Socket creation failed|neither AF_INET)",
        meaning: "no network interface matched the one the job was told to use (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) or none was usable",
        action: "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to an interface that exists on every node and routes between them (`ip -br addr`), or unset it",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 80,
        refine: None,
        example: "NCCL WARN Bootstrap : no socket interface found",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/bootstrap.cc",
    },
    Rule {
        signature: S::SocketConnectRefused,
        role: Role::Symptom,
        category: C::Configuration,
        needles: &["Connection refused", "No route to host", "client socket has"],
        pattern: r"(?i)(?:connect(?:ion)?(?: to)? (?P<peer>[0-9a-fA-F.:]+)?[^\n]{0,40}(?:failed|returned)[^\n]{0,20}(?:Connection refused|No route to host)|Connection refused|No route to host|The client socket has (?:timed out after \S+ while trying to connect|failed to connect) to)",
        meaning: "a connection to another host was refused or had no route: the address or port is wrong, a firewall blocks it, or the process there is not listening (it has not started or has died)",
        action: "check MASTER_ADDR/MASTER_PORT and the network interface every node uses, that the ports are open between nodes, and whether the process on the other side was running",
        restart_helps: None,
        stage: Some(JobStage::Init),
        weight: 40,
        refine: None,
        example: "NCCL WARN Call to connect timeout : Connection refused",
        example_source: "https://github.com/horovod/horovod/issues/666",
    },
];

/// The reading of an IB asynchronous event from its text (`ibv_event_type_str`): a
/// device's catastrophic error is the NIC failing; errors of one queue pair or completion
/// queue follow a failed transfer; fabric events (GID table, SM, LID changes) are not
/// failures.
fn ib_event(caps: &regex::Captures) -> Option<Reading> {
    let event = caps
        .name("detail")
        .map_or("", |m| m.as_str())
        .trim()
        .to_ascii_lowercase();
    let on_queue = caps.name("op").is_some();
    let r = |role, category, weight, meaning: &str, action: &str, restart| Reading {
        signature: S::IbAsyncError,
        role,
        category,
        weight,
        meaning: meaning.to_string(),
        action: action.to_string(),
        restart_helps: restart,
        stage: None,
    };
    Some(
        if event.contains("catastrophic") && !event.contains("work queue") && !on_queue {
            r(
            Role::Root,
            C::Network,
            100,
            "the InfiniBand device reported a catastrophic error: the NIC failed",
            "drain the node; reset or replace its NIC (mlxfwreset, check firmware and dmesg for mlx5 errors); restart the job on other nodes",
            Some(true),
        )
        } else if [
            "gid table",
            "sm change",
            "lid change",
            "p_key change",
            "client reregistration",
            "port active",
            "path migration",
        ]
        .iter()
        .any(|e| event.contains(e))
        {
            r(
                Role::Context,
                C::Unknown,
                0,
                "a fabric event, not a failure",
                "",
                None,
            )
        } else {
            r(
            Role::Cascade,
            C::Unknown,
            0,
            "an InfiniBand queue pair or completion queue went into error, as it does after a failed transfer",
            "look for the error before it",
            None,
        )
        },
    )
}

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
