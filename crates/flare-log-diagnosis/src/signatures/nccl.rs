//! NCCL's own account of what it could not set up or was asked to do wrongly, read from
//! its `WARN` format strings (`src/` of NVIDIA/nccl): bootstrap, topology, transports,
//! settings, verbs calls, misuse of its API. These rows come first in the table: each is
//! one of NCCL's exact texts, and some hold words the general rows also look for (an
//! `NVLink error` that is a topology lookup, a `Cannot allocate memory` that is the
//! locked-memory limit, an `Unexpected EOF` in NCCL's XML), which would read them as
//! something else.

use super::{Reading, Role, Rule};
use flare_model::{FailureCategory as C, JobStage, LogSignature as S};

pub const RULES: &[Rule] = &[
    Rule {
        signature: S::NcclNoInterface,
        role: Role::Symptom,
        category: C::Configuration,
        // (no digits in needles: lines that differ only in their digits share a scan)
        needles: &["Connect to"],
        // misc/socket.cc: `socketStartConnect: Connect to %s failed : %s`. NCCL leaves `lo`
        // out of its interfaces unless nothing else exists, so a peer at a loopback address
        // comes from NCCL_SOCKET_IFNAME=lo or a host name that resolves to the node itself
        // (Debian's /etc/hosts maps it to 127.0.1.1). A symptom: on one node, a peer process
        // that exited gives the same line, and its own error then leads.
        pattern: r"Connect to (?:127\.\d+\.\d+\.\d+|\[?::1\]?)<\d+> failed",
        meaning: "NCCL tried to reach a peer at a loopback address (127.x, ::1), which between nodes can never work: the interface it was told to use is `lo`, or a host name resolves to the node itself, so MASTER_ADDR or the bootstrap address points back at the node",
        action: "set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface that routes between the nodes (`ip -br addr`), and make MASTER_ADDR an address the others reach (`getent hosts $(hostname)` must not give 127.0.x.1); on one node, look for the error of the peer that exited",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 60,
        refine: None,
        example: "Last error: socketStartConnect: Connect to 127.0.0.1<45069> failed : Software caused connection abort",
        example_source: "https://github.com/awslabs/awsome-distributed-ai/issues/192",
    },
    Rule {
        signature: S::NcclTopologyFailed,
        role: Role::Root,
        category: C::Configuration,
        needles: &["XML Parse", "XML graph file", "XML parser is limited", "error : could not find", "CPU close to GPU", "local path from gpu"],
        // graph/xml.cc, graph/topo.cc, graph/paths.cc
        pattern: r"(?:XML Parse(?: error)? : (?P<detail>[^\n]+)|Could not open XML graph file|XML parser is limited to|Add (?:NVLink|PCI Link|C2c) error : could not find|could not find CPU close to GPU (?P<gpu>\d+)|Could not find any local path from gpu)",
        meaning: "NCCL could not build this node's hardware topology: the PCI tree it sees under /sys is incomplete (a container or virtual machine hides or renames devices), or the topology file it was given (NCCL_TOPO_FILE, NCCL_GRAPH_FILE) is malformed or for another node type",
        action: "check the file NCCL_TOPO_FILE or NCCL_GRAPH_FILE names (or the cloud image's topology file) is valid XML for this node type, and that the container sees /sys whole; NCCL_TOPO_DUMP_FILE=/tmp/topo.xml writes what NCCL found",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 75,
        refine: None,
        example: "ip-0AB85F07:24352:24369 [0] graph/paths.cc:155 NCCL WARN Error : could not find CPU close to GPU 0",
        example_source: "https://github.com/NVIDIA/nccl-tests/issues/41",
    },
    Rule {
        signature: S::NcclBootstrapMismatch,
        role: Role::Root,
        category: C::Configuration,
        needles: &["Bootstrap Root"],
        // bootstrap.cc: the root checks what each process says of the job
        pattern: r"Bootstrap Root : (?:mismatch in (?:info|rank count) from procs,? (?:nranks )?(?P<detail>\d+ (?:vs|:) \d+)|rank (?P<rank>\d+) of \d+ ranks has already checked in)",
        meaning: "the processes that met at NCCL's bootstrap disagree about the job: they were started with different world sizes, or the same rank joined twice (a process of an earlier attempt still running, two jobs sharing one rendezvous address and port)",
        action: "give each job its own rendezvous address and port, check that no process of an earlier attempt still runs (`ps` on every node) and that every node was launched with the same world size",
        restart_helps: None,
        stage: Some(JobStage::Init),
        weight: 80,
        refine: None,
        example: "hpc-25-14:18569:18835 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has already checked in",
        example_source: "https://github.com/Lightning-AI/pytorch-lightning/issues/14986",
    },
    Rule {
        signature: S::NcclBootstrapMismatch,
        role: Role::Symptom,
        category: C::Unknown,
        needles: &["Message truncated : received"],
        // bootstrap.cc: a setup message longer than the receiver expects. Reported from
        // NCCL 2.19 and 2.20 at init, gone with another NCCL (NVIDIA/nccl#1176, #1273), so
        // the line alone does not tell a bug from a mismatch
        pattern: r"(?:^|\bWARN )Message truncated : received \d+(?:,\d+)? bytes instead of",
        meaning: "two processes exchanged NCCL setup messages of different sizes: they run different NCCL versions or builds, a process of another job or attempt reached this one's bootstrap, or it is a bug of NCCL 2.19 and 2.20 (NVIDIA/nccl#1176, #1273)",
        action: "check that every node runs the same NCCL (python -c 'import torch; print(torch.cuda.nccl.version())') and no process of an earlier attempt still runs; on NCCL 2.19 or 2.20, try another NCCL version",
        restart_helps: None,
        stage: Some(JobStage::Init),
        weight: 50,
        refine: None,
        example: "0: compute-st-p4de24xlarge-1:34639:36718 [5] bootstrap.cc:77 NCCL WARN Message truncated : received 256 bytes instead of 4",
        example_source: "https://github.com/NVIDIA/nccl/issues/1176",
    },
    Rule {
        signature: S::CollectiveMismatch,
        role: Role::Root,
        category: C::CollectiveMismatch,
        needles: &["message truncated", "collective mismatch error"],
        // transport/net_socket.cc, and NET/IB's check of the size its peer posted (its
        // wording before 2.12: `collective mismatch error local size %d remote %d`)
        pattern: r"(?i)(?:NET/Socket : (?:peer (?P<peer>\S+) )?message truncated : receiving \d+ bytes instead of \d+|NET/IB : [^\n]*collective mismatch error,? local size \d+ remote(?: size)? \d+)",
        meaning: "a rank sent more data than its peer posted to receive: the ranks called a collective or a send and receive with different sizes, or run with different NCCL settings (NCCL_PROTO, NCCL_ALGO) that cut the data differently",
        action: "make every rank call the same collectives with the same sizes (TORCH_DISTRIBUTED_DEBUG=DETAIL names the op on each rank), and set the NCCL_* variables the same on every node",
        restart_helps: Some(false),
        stage: None,
        weight: 80,
        refine: None,
        example: "lzm-h200-10:74737:75914 [1] transport/net_socket.cc:488 NCCL WARN NET/Socket : peer 10.0.5.194<41988> message truncated : receiving 4 bytes instead of 2.",
        example_source: "https://github.com/sail-sg/zero-bubble-pipeline-parallelism/issues/60",
    },
    Rule {
        signature: S::NcclConfigInvalid,
        role: Role::Root,
        category: C::Configuration,
        needles: &["No algorithm/protocol available", "No transport found", "Invalid config", "incompatible devices", "device is incompatible", "any NET plugin", "different NUMA domains", "SUBNET_PREFIX_LEN"],
        // enqueue.cc, transport.cc, init.cc, transport/net_ib, plugin/net.cc; before 2.22
        // `Error : no algorithm/protocol available` named no function, and before 2.12
        // `No transport found !` no ranks
        pattern: r"(?:(?i:no) algorithm/protocol available(?: for function (?P<op>\w+))?|No transport found(?: for rank| !)|Invalid config \w+ attribute value|Attempted to (?:connect|merge) incompatible devices|Remote \S+ device is incompatible with the local|Failed to initialize any NET plugin|Fusing NET devices from different NUMA domains|NCCL_IB_SUBNET_PREFIX_LEN=\d+ is out of range)",
        meaning: "NCCL's settings ask for something this system cannot do: NCCL_ALGO or NCCL_PROTO leave nothing to run a collective, the transports between two ranks are all disabled, NICs of different link types are paired, or the network plugin asked for does not load",
        action: "unset the NCCL_* variables the warning is about, or set them the same on every node (NCCL_ALGO, NCCL_PROTO, NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_IB_HCA, NCCL_NET, NCCL_NET_PLUGIN); NCCL_DEBUG=INFO shows what NCCL found",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 80,
        refine: None,
        example: "Error : no algorithm/protocol available for function AllReduce with datatype ncclInt64. NCCL_ALGO was set to reducescatter:nvls;allreduce:nvls.",
        example_source: "https://github.com/NVIDIA/nccl/issues/1898",
    },
    Rule {
        signature: S::NicCountMismatch,
        role: Role::Root,
        category: C::Network,
        needles: &["Detected mixed local"],
        // init.cc: the ranks compare how many NICs each node found
        pattern: r"Detected mixed local (?:Net|CollNet) device counts across ranks \(min (?P<detail>\d+), max \d+\)",
        meaning: "the job's nodes found different numbers of NICs: a NIC is missing or down on some node (or the job spans nodes of different types)",
        action: "compare `ibv_devinfo` or `ibstat` across the job's nodes and drain the one with fewer active ports until its NIC is fixed; NCCL_IGNORE_NET_MISMATCH=1 runs anyway, slower",
        restart_helps: Some(true),
        stage: Some(JobStage::Init),
        weight: 85,
        refine: None,
        example: "NCCL WARN Detected mixed local Net device counts across ranks (min 7, max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to continue.",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/init.cc",
    },
    Rule {
        signature: S::NicLinkDown,
        role: Role::Root,
        category: C::Network,
        needles: &["failed devices out of", "marked as failed"],
        // transport/net_ib/p2p_resiliency.cc: NCCL's IB resiliency gave a NIC up
        pattern: r"NET/IB: (?:Fatal error\. Detected \d+ failed devices out of \d+|Device (?P<detail>\d+) marked as failed)",
        meaning: "NCCL found a NIC no longer working and stopped using it",
        action: "drain the node and have its NIC, cable and switch port checked (ibstat, `rdma link`, dmesg for mlx5 errors); restart the job on other nodes",
        restart_helps: Some(true),
        stage: None,
        weight: 90,
        refine: None,
        example: "NCCL WARN NET/IB: Device 1 marked as failed. Initiating recovery? yes (send comm=0x7f3c2c0a1b20, outstandingRecovery=0)",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/transport/net_ib/p2p_resiliency.cc",
    },
    Rule {
        signature: S::IbVerbsFailed,
        role: Role::Symptom,
        category: C::Network,
        needles: &["Call to ibv_", "Call to mlx", "Got CQE with error"],
        // misc/ibvwrap.cc: `Call to <verb> failed with error %s`, `... failed with %d %s, %s`
        pattern: r"(?:Call to (?P<op>ibv_\w+|mlx5dv_\w+)(?:\(\))? (?:failed|returned)(?: with(?: error)?)? ?(?P<detail>[^\n]*)|NET/IB: Got CQE with error)",
        meaning: "a verbs call of NCCL's InfiniBand or RoCE transport failed",
        action: "check the NICs and links between the hosts (ibstat, dmesg for mlx5 errors) and the lines before it",
        restart_helps: None,
        stage: None,
        weight: 45,
        refine: Some(verbs_call),
        example: "[2026-03-13 22:26:02] host-01.example.com:XXXXXX [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx_x:1, curr state INIT, next state RTR,",
        example_source: "https://github.com/NVIDIA/nccl/issues/2013",
    },
    Rule {
        signature: S::NvlinkError,
        role: Role::Root,
        category: C::Interconnect,
        needles: &["is disabled between NVLINK connected"],
        // graph/paths.cc: NCCL's own verdict on two GPUs it sees NVLink between
        pattern: r"P2P is disabled between NVLINK connected GPUs (?P<gpu>\d+) and \d+",
        meaning: "two GPUs joined by NVLink cannot reach each other's memory, which NCCL says is most likely a hardware fault",
        action: "drain the node; check `nvidia-smi nvlink -s` and `nvidia-smi topo -p2p n` for the two GPUs, then reset them or have the node serviced",
        restart_helps: Some(true),
        stage: Some(JobStage::Init),
        weight: 95,
        refine: None,
        example: "P2P is disabled between NVLINK connected GPUs 1 and 0. This should not be the case given their connectivity, and is probably due to a hardware issue. If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.",
        example_source: "https://github.com/NVIDIA/nccl/issues/2329",
    },
    Rule {
        signature: S::FabricNotReady,
        role: Role::Root,
        category: C::Interconnect,
        needles: &["MNNVL"],
        // mnnvl.cc: multi-node NVLink needs the IMEX daemon and its channel device
        pattern: r"MNNVL \(cliqueSize \d+\) is available but not working on this system",
        meaning: "multi-node NVLink is present but not usable on this node: its IMEX daemon or IMEX channels are not set up",
        action: "check `nvidia-imex-ctl -N` and /dev/nvidia-caps-imex-channels on the node (the pod needs an IMEX channel); drain it until IMEX is up, or set NCCL_MNNVL_ENABLE=0 to use the network instead",
        restart_helps: None,
        stage: Some(JobStage::Init),
        weight: 85,
        refine: None,
        example: "NCCL WARN MNNVL (cliqueSize 72) is available but not working on this system. Check the IMEX channel configuration (/dev/nvidia-caps-imex-channels). Set NCCL_MNNVL_ENABLE=0 to ignore this issue.",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/mnnvl.cc",
    },
    Rule {
        signature: S::NcclVersionMismatch,
        role: Role::Root,
        category: C::Configuration,
        needles: &["NCCL library is", "too old version of NCCL"],
        // dev_runtime.cc, devcomm: the device API's compiled-against version check
        pattern: r"(?:NCCL library is (?:too old|not backwards compatible)\. This application was compiled with NCCL version (?P<detail>\S+)|compiled with too old version of NCCL)",
        meaning: "the application was built against another NCCL version than the one it loaded",
        action: "load the NCCL the application was built with (check LD_LIBRARY_PATH and LD_PRELOAD for another libnccl), or rebuild it against this one",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 80,
        refine: None,
        example: "NCCL WARN NCCL library is too old. This application was compiled with NCCL version 2.29.2, but is running with NCCL 2.28.9.",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/dev_runtime.cc",
    },
    Rule {
        signature: S::CudaDriverTooOld,
        role: Role::Root,
        category: C::Configuration,
        needles: &["CUDA Driver version found"],
        // misc/cudawrap.cc
        pattern: r"CUDA Driver version found is (?P<detail>\d+)\. Minimum requirement is \d+",
        meaning: "the GPU driver is older than the oldest this NCCL supports",
        action: "run on nodes with a newer driver, or use an NCCL (and framework build) for this driver",
        restart_helps: Some(false),
        stage: Some(JobStage::Init),
        weight: 80,
        refine: None,
        example: "NCCL WARN CUDA Driver version found is 11040. Minimum requirement is 12000",
        example_source: "https://github.com/NVIDIA/nccl/blob/master/src/misc/cudawrap.cc",
    },
    Rule {
        signature: S::NcclInvalidUsage,
        role: Role::Root,
        category: C::UserCode,
        needles: &["invalid root", "is not a valid pointer", "mismatchs with NCCL device", "argument is NULL", "invalid reduction operation", "unknown to this communicator", "to self without a matching", "user-created ncclRedOp", "reduction support begins with"],
        // misc/argcheck.cc, enqueue.cc: NCCL's checks of a call's arguments
        pattern: r"(?:: invalid root \d+|: (?P<detail>\w+) (?:0x[0-9a-f]+|\(nil\)) is not a valid pointer|allocated on device (?P<gpu>\d+) mismatchs with NCCL device \d+|: \w+ argument is NULL|: invalid (?:reduction operation|type) \d+|reduction operation \d+ unknown to this communicator|Trying to (?:send to|recv to|recv from) self without a matching|Data type supplied to user-created ncclRedOp_t does not match|FP8 reduction support begins with)",
        meaning: "NCCL refused a call whose arguments are wrong: a buffer on another GPU than the communicator's or not device memory, a root or type out of range, a send to itself with no matching receive",
        action: "fix the call NCCL names (the first word of the warning): put the tensors on the rank's own GPU (torch.cuda.set_device(LOCAL_RANK) before creating them), and check the arguments agree across ranks",
        restart_helps: Some(false),
        stage: None,
        weight: 80,
        refine: None,
        example: "9306dc444753:248281:248319 [2] misc/argcheck.cc:39 NCCL WARN Send : invalid root 3 (root should be in the 0..0 range)",
        example_source: "https://github.com/NVIDIA/nccl/issues/963",
    },
];

/// The reading of a failed verbs call from the call and its error: registering memory
/// fails with ENOMEM at the locked-memory limit; moving a queue pair to ready fails when
/// the two ends cannot address each other (RoCE's GID index, a port not active); any call
/// fails with ENODEV where the process cannot use the device at all.
fn verbs_call(caps: &regex::Captures) -> Option<Reading> {
    let call = caps.name("op").map_or("", |m| m.as_str());
    let detail = caps.name("detail").map_or("", |m| m.as_str());
    let r = |signature, role, category, weight, meaning: &str, action: &str, restart| Reading {
        signature,
        role,
        category,
        weight,
        meaning: meaning.to_string(),
        action: action.to_string(),
        restart_helps: restart,
        stage: Some(JobStage::Init),
    };
    if call.starts_with("ibv_reg") && detail.contains("Cannot allocate memory") {
        Some(r(
            S::ResourceLimit,
            Role::Root,
            C::Configuration,
            80,
            "the NIC could not register (pin) the job's buffers: the process's locked-memory limit is too low",
            "raise the locked-memory limit to unlimited where the job runs (docker --ulimit memlock=-1, the container runtime's default ulimits, Slurm's PropagateResourceLimits, /etc/security/limits.conf)",
            Some(false),
        ))
    } else if detail.contains("No such device") {
        // ENODEV: the kernel has no such verbs device for this process
        Some(r(
            S::IbVerbsFailed,
            Role::Root,
            C::Configuration,
            75,
            "the RDMA device NCCL chose cannot be used from this process: the container does not expose it (its /dev/infiniband devices, the RDMA device plugin) or its user-space verbs (rdma-core, MOFED) do not match the host's driver; if the NIC worked earlier in the job, it was removed (a NIC reset: its host's dmesg shows mlx5 errors)",
            "run `ibv_devinfo` where the job runs; expose the device to the container or match its rdma-core/MOFED to the host's; to run without it, exclude it (NCCL_IB_HCA=^<device>) or set NCCL_IB_DISABLE=1 (sockets, slower)",
            Some(false),
        ))
    } else if call == "ibv_modify_qp" {
        Some(r(
            S::IbVerbsFailed,
            Role::Root,
            C::Network,
            70,
            "connecting two NICs failed while their queue pair was being brought up: the ends cannot address each other (on RoCE a wrong GID index or mismatched VLAN or subnet; on InfiniBand a port not active) or the peer is gone",
            "on RoCE set NCCL_IB_GID_INDEX to the RoCE v2 GID every node has (`show_gids`); check both ports are Active (ibstat) and the hosts named reach each other",
            None,
        ))
    } else {
        None
    }
}
