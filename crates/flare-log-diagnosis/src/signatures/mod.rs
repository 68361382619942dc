//! The table of known log signatures: how each is recognised, what it is to a failure
//! (the root cause, a symptom on the rank that failed, or a cascade effect of a failure
//! elsewhere), its category, the stage it implies, the action, whether a restart helps,
//! and a real line it matches (tested: each row matches its own line first).
//!
//! A line is matched against the rows in table order and the first row whose pattern
//! matches wins, so specific rows (an IB completion error) come before generic ones (any
//! `NCCL WARN`). Rows are grouped by what they are about, one module each: `nccl`
//! (NCCL's own warnings about its setup and use, first: exact texts), `hardware`,
//! `network`, `process` (memory, numerics, code, configuration, data), `platform`
//! (schedulers), `cascade`; `xid` and `exit` refine a row from what it captured (the Xid
//! number, the exit code or signal), and `exceptions` from a Python exception's type.
//!
//! Each row is written from how the message is specified (the format string in NCCL,
//! PyTorch, the kernel, Slurm), so it matches the message whatever the prefixes before
//! it. A row's `weight` orders root causes found together: hardware seen by the kernel
//! (100) outweighs a scheduler's node failure (90), a process-local cause (OOM, an
//! exception, a configuration error: 80), a network error seen by NCCL (70, below
//! process-local causes because a peer that dies also makes its links fail), a software
//! fault (60), a scheduler's time limit (50) and symptoms whose cause is not named (30
//! to 45).

mod cascade;
mod exceptions;
pub mod exit;
mod hardware;
mod nccl;
mod network;
mod platform;
mod process;
mod xid;

use flare_model::{FailureCategory, JobStage, LineRole, LogSignature};
use regex::Regex;
use std::sync::OnceLock;

/// What a row says a matching line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Root,
    Symptom,
    Cascade,
    /// Recognised, and not a failure (a refinement's answer: IB fabric events): the line
    /// is no hit.
    Context,
}

impl Role {
    pub fn line_role(self) -> Option<LineRole> {
        match self {
            Role::Root => Some(LineRole::Root),
            Role::Symptom => Some(LineRole::Symptom),
            Role::Cascade => Some(LineRole::Cascade),
            Role::Context => None,
        }
    }
}

/// One row of the table.
pub struct Rule {
    pub signature: LogSignature,
    pub role: Role,
    pub category: FailureCategory,
    /// Substrings (ASCII case-insensitive) of which a line must hold one before the
    /// pattern is tried: the fast filter that keeps most lines from any regex.
    pub needles: &'static [&'static str],
    /// A regex over the line's message. Named groups it may capture: `rank`, `host`,
    /// `gpu`, `pci`, `peer` (an address), `xid`, `status`, `code` (an exit code),
    /// `signal`, `seq`, `op`, `numel`, `exc` (an exception type), `detail`, `enqueued`,
    /// `completed`, `suspect` (a rank the line waits for); a second alternative that
    /// captures the same thing names it `<name>2`.
    pub pattern: &'static str,
    /// What the line means, for a person.
    pub meaning: &'static str,
    /// What to do.
    pub action: &'static str,
    pub restart_helps: Option<bool>,
    /// The stage such a line implies, if any (NCCL bootstrap errors: init).
    pub stage: Option<JobStage>,
    pub weight: u8,
    /// Turns what the pattern captured into a more precise reading (Xid numbers, exit
    /// codes, exception types).
    pub refine: Option<fn(&regex::Captures) -> Option<Reading>>,
    /// A real line this row matches, and where it was published.
    pub example: &'static str,
    pub example_source: &'static str,
}

/// What a matched line is, after refinement.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub signature: LogSignature,
    pub role: Role,
    pub category: FailureCategory,
    pub weight: u8,
    pub meaning: String,
    pub action: String,
    pub restart_helps: Option<bool>,
    pub stage: Option<JobStage>,
}

impl Rule {
    pub fn reading(&self) -> Reading {
        Reading {
            signature: self.signature,
            role: self.role,
            category: self.category,
            weight: self.weight,
            meaning: self.meaning.to_string(),
            action: self.action.to_string(),
            restart_helps: self.restart_helps,
            stage: self.stage,
        }
    }
}

/// The table in match order: specific rows first.
pub fn rules() -> &'static [&'static Rule] {
    static ALL: OnceLock<Vec<&'static Rule>> = OnceLock::new();
    ALL.get_or_init(|| {
        nccl::RULES
            .iter()
            .chain(hardware::RULES)
            .chain(network::RULES)
            .chain(platform::RULES)
            .chain(process::RULES)
            .chain(cascade::RULES)
            .chain(process::GENERIC)
            .collect()
    })
}

/// A line's match: the row, its reading and what it captured.
#[derive(Clone, Debug, PartialEq)]
pub struct Match {
    pub rule: usize,
    pub reading: Reading,
    pub captures: Captured,
}

/// The named groups a row captured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Captured {
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<String>,
    pub gpu: Option<u32>,
    /// A process id the message names (an Xid's channel owner).
    pub pid: Option<u32>,
    pub pci: Option<String>,
    pub peer: Option<String>,
    pub seq: Option<u64>,
    pub op: Option<String>,
    pub numel: Option<u64>,
    pub exception: Option<String>,
    pub detail: Option<String>,
    /// A watchdog's last enqueued and last completed work (sequence numbers).
    pub enqueued: Option<u64>,
    pub completed: Option<u64>,
    /// A rank the line says it waits for or heard the failure from.
    pub suspect: Option<u32>,
}

/// The compiled table. A row's regex is compiled the first time one of its needles
/// shows up (the needles are scanned for by `lexicon`, with the other words a line is
/// looked at for): a job's logs need a few of them.
pub struct Matcher {
    patterns: Vec<OnceLock<Regex>>,
}

impl Matcher {
    /// The table compiled once per process.
    pub fn get() -> &'static Matcher {
        static M: OnceLock<Matcher> = OnceLock::new();
        M.get_or_init(|| Matcher::new(rules()))
    }

    fn new(rules: &[&Rule]) -> Matcher {
        Matcher {
            patterns: rules.iter().map(|_| OnceLock::new()).collect(),
        }
    }

    fn pattern(&self, row: usize) -> &Regex {
        self.patterns[row].get_or_init(|| {
            let r = rules()[row];
            Regex::new(r.pattern).unwrap_or_else(|e| {
                panic!("signature {} pattern does not compile: {e}", r.signature)
            })
        })
    }

    /// The first row (in table order) that matches `message`, if any.
    pub fn find(&self, message: &str) -> Option<Match> {
        self.find_among(message, &crate::lexicon::scan(message).rows)
    }

    /// The first of `rows` (in table order: the rows whose needles a scan found) whose
    /// pattern matches `message`.
    pub fn find_among(&self, message: &str, rows: &[usize]) -> Option<Match> {
        let rules = rules();
        for &row in rows {
            let Some(caps) = self.pattern(row).captures(message) else {
                continue;
            };
            let rule = rules[row];
            let reading = match rule.refine.and_then(|f| f(&caps)) {
                Some(r) => r,
                None => rule.reading(),
            };
            if reading.role == Role::Context {
                return None;
            }
            return Some(Match {
                rule: row,
                reading,
                captures: captured(&caps),
            });
        }
        None
    }
}

fn captured(c: &regex::Captures) -> Captured {
    // a row with two alternatives that capture the same thing names the second `<name>2`
    let s = |name: &str| {
        c.name(name)
            .or_else(|| c.name(&format!("{name}2")))
            .map(|m| m.as_str().to_string())
    };
    fn n<T: std::str::FromStr>(c: &regex::Captures, name: &str) -> Option<T> {
        c.name(name).and_then(|m| m.as_str().parse().ok())
    }
    Captured {
        rank: n(c, "rank"),
        local_rank: n(c, "local"),
        pid: n(c, "pid"),
        host: s("host"),
        gpu: n(c, "gpu"),
        pci: s("pci"),
        peer: s("peer"),
        seq: n(c, "seq").or_else(|| n(c, "seq2")),
        op: s("op"),
        numel: n(c, "numel"),
        exception: s("exc"),
        detail: s("detail"),
        enqueued: n(c, "enqueued").or_else(|| n(c, "enqueued2")),
        completed: n(c, "completed").or_else(|| n(c, "completed2")),
        suspect: n(c, "suspect"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line's reading as the pass makes it: its prefixes read first, then the table.
    fn reading_of(line: &str) -> Option<Match> {
        Matcher::get().find(crate::origin::parse(line, crate::origin::TaskPrefix::Allowed).message)
    }

    #[test]
    fn every_row_matches_its_own_example_first() {
        for (row, rule) in rules().iter().enumerate() {
            let got = reading_of(rule.example)
                .unwrap_or_else(|| panic!("{}: its example matches no row", rule.signature));
            assert_eq!(
                got.rule,
                row,
                "{}: its example is taken by {} first",
                rule.signature,
                rules()[got.rule].signature
            );
            assert!(
                rule.example_source.starts_with("https://"),
                "{}: the example's source must be a link",
                rule.signature
            );
            assert!(!rule.needles.is_empty(), "{}: no needle", rule.signature);
        }
    }

    /// Lines a row's words are in that are, or are not, the failure the row names:
    /// (line, where it was published, the signature and a word of the meaning it must
    /// get, or `None` for no reading of that signature).
    const LOOK_ALIKES: &[(&str, &str, LogSignature, Option<&str>)] = &[
        // a peer at a loopback address is the interface's configuration; at a routable
        // one, a refused connection
        (
            "[1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 127.0.1.1<56457> failed : Connection refused",
            "https://github.com/NVIDIA/nccl/blob/master/src/misc/socket.cc",
            LogSignature::NcclNoInterface,
            Some("loopback"),
        ),
        (
            "[1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.5<56457> failed : Connection refused",
            "https://github.com/NVIDIA/nccl/blob/master/src/misc/socket.cc",
            LogSignature::NcclNoInterface,
            None,
        ),
        // a node's daemons binding their own ports
        (
            "- 1131567055 2005.11.09 tbird-admin1 Nov 9 12:10:55 local@tbird-admin1 sshd[1761]: error: Bind to port 22 on 0.0.0.0 failed: Address already in use.",
            "https://github.com/logpai/loghub/tree/master/Thunderbird",
            LogSignature::AddressInUse,
            None,
        ),
        (
            "[Server] WARN: bind() failed with: Address already in use (98)",
            "https://github.com/madMAx43v3r/chia-plotter/issues/984",
            LogSignature::AddressInUse,
            None,
        ),
        (
            "Error: listen EADDRINUSE",
            "https://github.com/twilson63/w3/issues/2",
            LogSignature::AddressInUse,
            None,
        ),
        // the training stack's own
        (
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
            "https://github.com/vllm-project/vllm/issues/39015",
            LogSignature::AddressInUse,
            Some("rendezvous port"),
        ),
        (
            "RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
            "https://github.com/showlab/Tune-A-Video/issues/90",
            LogSignature::AddressInUse,
            Some("rendezvous port"),
        ),
        (
            "misc/socket.cc:409 NCCL WARN Call to bind failed: Address already in use",
            "https://github.com/NVIDIA/nccl/issues/1882",
            LogSignature::AddressInUse,
            Some("ephemeral port range"),
        ),
        // an NVSwitch's non-fatal SXid, logged at driver probe on a node that works
        (
            "[   25.948274] nvidia-nvswitch1: SXid (PCI:0000:02:00.0): 22013, Non-fatal, Link 00 Minion Link DLREQ interrupt",
            "https://github.com/NVIDIA/nvtrust/issues/124",
            LogSignature::NvlinkError,
            None,
        ),
        (
            "OSError: [Errno 98] Address already in use",
            "https://docs.python.org/3/library/socket.html",
            LogSignature::AddressInUse,
            Some("could not listen on a port"),
        ),
    ];

    #[test]
    fn look_alikes_are_told_apart() {
        for (line, source, signature, meaning) in LOOK_ALIKES {
            assert!(source.starts_with("https://"), "{line}");
            let got = reading_of(line).filter(|g| g.reading.signature == *signature);
            match (meaning, got) {
                (None, None) => {}
                (None, Some(g)) => panic!("{line}: read as {signature}: {}", g.reading.meaning),
                (Some(_), None) => panic!("{line}: not read as {signature}"),
                (Some(word), Some(g)) => {
                    assert!(
                        g.reading.meaning.contains(word),
                        "{line}: {}",
                        g.reading.meaning
                    )
                }
            }
        }
    }

    /// Lines of NCCL, CUDA and PyTorch as published (or, where no published one was
    /// found, as the format string prints them), with the reading each must get: the
    /// signature and the role. Among them the lines the general rows used to misread: NCCL's XML
    /// as a corrupt checkpoint, a topology lookup as a broken NVLink, the locked-memory
    /// limit as host memory running out, a cleanup as shared memory too small.
    const SOURCE_TEXTS: &[(&str, &str, LogSignature, Role)] = &[
        ("0: compute-st-p4de24xlarge-1:34639:36718 [5] bootstrap.cc:77 NCCL WARN Message truncated : received 256 bytes instead of 4", "https://github.com/NVIDIA/nccl/issues/1176", LogSignature::NcclBootstrapMismatch, Role::Symptom),
        ("transport/net_socket.cc:424 NCCL WARN NET/Socket : peer 192.168.161.30<59210> message truncated : receiving 1048576 bytes instead of 65536", "https://github.com/NVIDIA/nccl/issues/626", LogSignature::CollectiveMismatch, Role::Root),
        ("hvd1:2918:3333 [0] external/nccl_archive/src/transport/net_socket.cc:200 NCCL WARN NET/Socket : message truncated : receiving 696320 bytes instead of 32768", "https://github.com/NVIDIA/nccl/issues/268", LogSignature::CollectiveMismatch, Role::Root),
        ("bootstrap.cc:190 NCCL WARN Bootstrap Root : mismatch in rank count from procs 6 : 3", "https://github.com/pytorch/pytorch/issues/46248", LogSignature::NcclBootstrapMismatch, Role::Root),
        ("misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory", "https://github.com/NVIDIA/nccl-tests/issues/206", LogSignature::ResourceLimit, Role::Root),
        ("hai-a100-3:3778851:3779883 [4] ibvwrap.c:130 NCCL WARN Call to ibv_create_qp failed", "https://github.com/NVIDIA/nccl/issues/562", LogSignature::IbVerbsFailed, Role::Symptom),
        ("Test fail caused by ibvwrap.c:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out.", "https://github.com/NVIDIA/nccl-tests/issues/227", LogSignature::IbVerbsFailed, Role::Root),
        ("lzm-h200-10:74737:74737 [1] init.cc:290 NCCL WARN Attempt to use communicator before the previous operation returned ncclSuccess", "https://github.com/sail-sg/zero-bubble-pipeline-parallelism/issues/60", LogSignature::CommunicatorAborted, Role::Cascade),
        ("238: [rank238]: Error : no algorithm/protocol available for function AllGather with datatype ncclInt8.", "https://github.com/NVIDIA/nccl/issues/1709", LogSignature::NcclConfigInvalid, Role::Root),
        ("Broadcast : sendbuff (nil) is not a valid pointer", "https://github.com/NVIDIA/nccl/issues/1558", LogSignature::NcclInvalidUsage, Role::Root),
        ("RuntimeError: cuda runtime error (802) : system not yet initialized at /opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50", "https://github.com/pytorch/pytorch/issues/35710", LogSignature::FabricNotReady, Role::Root),
        ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", "https://github.com/pytorch/pytorch/issues/100691", LogSignature::NoCudaDevice, Role::Root),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "https://github.com/justchenhao/STANet/issues/57", LogSignature::UnsupportedGpuArch, Role::Root),
        ("NCCL WARN XML Parse : Unexpected EOF", "https://github.com/NVIDIA/nccl/blob/master/src/graph/xml.cc", LogSignature::NcclTopologyFailed, Role::Root),
        ("NCCL WARN Add NVLink error : could not find DEV for GPU 0000:1b:00.0", "https://github.com/NVIDIA/nccl/blob/master/src/graph/topo.cc", LogSignature::NcclTopologyFailed, Role::Root),
        ("NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size 1073741824 : CUDA error 1 'invalid argument'. This is usually caused by a system or configuration error in the Fabric Manager or NVLink fabric.", "https://github.com/NVIDIA/nccl/blob/master/src/transport/nvls.cc", LogSignature::NvlsFailure, Role::Root),
        ("NCCL WARN unlink shared memory /dev/shm/nccl-d5rTd0 failed, error: No such file or directory", "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting/runtime_and_mpi_issues.html", LogSignature::SharedMemoryTooSmall, Role::Symptom),
        ("NCCL WARN Detected mixed local Net device counts across ranks (min 7, max 8). Set NCCL_IGNORE_NET_MISMATCH=1 to continue.", "https://github.com/NVIDIA/nccl/blob/master/src/init.cc", LogSignature::NicCountMismatch, Role::Root),
        ("NCCL WARN NET/IB : collective mismatch error local size 1048576 remote 524288 addr 7f1c2a000000 rkey 1a2b seq 3/4", "https://github.com/NVIDIA/nccl/blob/v2.7.8-1/src/transport/net_ib.cc", LogSignature::CollectiveMismatch, Role::Root),
        ("NCCL WARN Error : no algorithm/protocol available", "https://github.com/NVIDIA/nccl/blob/v2.14.3-1/src/enqueue.cc", LogSignature::NcclConfigInvalid, Role::Root),
        ("NCCL WARN No transport found !", "https://github.com/NVIDIA/nccl/blob/v2.10.3-1/src/transport.cc", LogSignature::NcclConfigInvalid, Role::Root),
        ("NCCL WARN XML Parse error : expecting '<', got 'x'", "https://github.com/NVIDIA/nccl/blob/v2.10.3-1/src/graph/xml.cc", LogSignature::NcclTopologyFailed, Role::Root),
        ("NCCL WARN Failed to CUDA malloc 2097152 bytes", "https://github.com/NVIDIA/nccl/blob/master/src/include/alloc.h", LogSignature::CudaOutOfMemory, Role::Root),
        ("mpirun noticed that process rank 140 with PID 363 on node 10.87.102.19 exited on signal 9 (Killed).", "https://github.com/PaddlePaddle/Paddle/issues/13288", LogSignature::ProcessSignal, Role::Symptom),
        ("An MPI communication peer process has unexpectedly disconnected.  This", "https://github.com/horovod/horovod/issues/1950", LogSignature::ChildFailed, Role::Cascade),
        ("a non-zero exit code. Per user-direction, the job has been aborted.", "https://github.com/horovod/horovod/issues/642", LogSignature::ChildFailed, Role::Cascade),
        ("b1360: [14280.445226] mlx5_core 0000:61:00.0: wait_func:1132:(pid 141181): CREATE_DCT(0x710) timeout. Will cause a leak of a command resource", "https://github.com/openucx/ucx/issues/7738", LogSignature::NicDriverFailure, Role::Root),
        ("kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Fatal, Link 32 egress non-posted PRIV error", "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html", LogSignature::NvlinkError, Role::Root),
        ("mlx5_core 0000:3b:00.0: poll_health:800:(pid 0): device's health compromised - reached miss count", "https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/health.c", LogSignature::NicDriverFailure, Role::Root),
        ("mlx5_core 0000:3b:00.0: print_health_info:435:(pid 0): synd 0x8: unrecoverable hardware error", "https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/health.c", LogSignature::NicDriverFailure, Role::Root),
        ("efa 0000:10:1d.0: Wait for completion (polling) timeout", "https://github.com/torvalds/linux/blob/master/drivers/infiniband/hw/efa/efa_com.c", LogSignature::NicDriverFailure, Role::Root),
        ("mlx5_core 0000:3b:00.0 ens1f0np0: TX timeout detected", "https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/en_main.c", LogSignature::NicDriverFailure, Role::Symptom),
        ("infiniband mlx5_0: mlx5_ib_event:3123:(pid 0): port 1 event: PORT_ERR", "https://github.com/torvalds/linux/blob/master/drivers/infiniband/hw/mlx5/main.c", LogSignature::NicLinkDown, Role::Root),
        ("[ 9124.331] watchdog: BUG: soft lockup - CPU#12 stuck for 22s! [ksoftirqd/12:98]", "https://github.com/torvalds/linux/blob/master/kernel/watchdog.c", LogSignature::KernelLockup, Role::Symptom),
        ("[rank0]:[E1218 20:27:21.426415540 ProcessGroupGloo.cpp:130] [Rank 0]: Ranks 5, 7 failed to pass monitoredBarrier in 1800000 ms", "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupGloo.cpp", LogSignature::CollectiveTimeout, Role::Cascade),
        ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.", "https://github.com/pytorch/pytorch/blob/main/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", LogSignature::PythonException, Role::Symptom),
        ("[W1218 20:27:21.426415540 TCPStoreLibUvBackend.cpp:1033] [c10d] Failed to accept client due to Failed to accept socket. code: -24, name: EMFILE, message: too many open files", "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp", LogSignature::ResourceLimit, Role::Root),
        ("[Rank 3] Work WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=300000) timed out in blocking wait.", "https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp", LogSignature::CollectiveTimeout, Role::Cascade),
        ("misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error No such device", "https://github.com/NVIDIA/nccl/blob/v2.7.8-1/src/misc/ibvwrap.cc", LogSignature::IbVerbsFailed, Role::Root),
        // PyTorch 1.9 and older: no SeqNum in the work's description
        ("[E ProcessGroupNCCL.cpp:567] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=60000) ran for 69479 milliseconds before timing out.", "https://github.com/ultralytics/yolov5/issues/4400", LogSignature::WatchdogTimeout, Role::Cascade),
    ];

    #[test]
    fn the_libraries_own_texts_get_their_reading() {
        for (line, source, signature, role) in SOURCE_TEXTS {
            assert!(source.starts_with("https://"), "{line}");
            let got = reading_of(line).unwrap_or_else(|| panic!("{line}: no reading"));
            assert_eq!(
                (got.reading.signature, got.reading.role),
                (*signature, *role),
                "{line}: {}",
                got.reading.meaning
            );
        }
    }

    #[test]
    fn a_monitored_barrier_names_the_rank_it_waited_for() {
        let m = Matcher::get();
        for (line, suspect) in [
            ("[Rank 0]: Ranks 5, 7 failed to pass monitoredBarrier in 1800000 ms", Some(5)),
            ("[Rank 0]: Rank 6 failed to pass monitoredBarrier in 30000 ms", Some(6)),
            ("[rank0]:[E1127 11:00:58.012334642 ProcessGroupGloo.cpp:2949] [Rank 0]: Rank 2 failed to pass monitoredBarrier in 10000 ms", Some(2)),
            // the others point at rank 0's logs, not at rank 0 (a real job's lines:
            // tests/fixtures/logs/real_jobs/barrier)
            ("Rank 3 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.", None),
        ] {
            let got = m.find(line).unwrap_or_else(|| panic!("{line}: no reading"));
            assert_eq!(got.captures.suspect, suspect, "{line}");
        }
    }

    /// A failed verbs call's error decides its category: ENOMEM at registration is the
    /// locked-memory limit, ENODEV a device the process cannot use, the rest the network.
    #[test]
    fn a_verbs_call_is_read_by_its_error() {
        for (line, category) in [
            ("misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory", FailureCategory::Configuration),
            ("misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error No such device", FailureCategory::Configuration),
            ("ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev mlx_x:1, curr state INIT, next state RTR,", FailureCategory::Network),
        ] {
            let got = reading_of(line).expect("a reading");
            assert_eq!(got.reading.category, category, "{line}");
        }
    }

    #[test]
    fn the_mpi_launchers_report_names_the_rank_and_its_node() {
        let line = "mpirun noticed that process rank 140 with PID 363 on node 10.87.102.19 exited on signal 9 (Killed).";
        let got = Matcher::get().find(line).expect("a reading");
        assert_eq!(got.captures.rank, Some(140));
        assert_eq!(got.captures.host.as_deref(), Some("10.87.102.19"));
        assert!(
            got.reading.meaning.contains("SIGKILL"),
            "{}",
            got.reading.meaning
        );
    }

    #[test]
    fn every_pattern_compiles() {
        let m = Matcher::get();
        for row in 0..rules().len() {
            m.pattern(row);
        }
    }

    /// The scan cache keys a line by its skeleton, digits folded: two lines that differ
    /// only in digits share one scan, so a needle with a digit would be found in one and
    /// assumed absent from the other.
    #[test]
    fn no_needle_holds_a_digit() {
        for rule in rules() {
            for n in rule.needles {
                assert!(
                    !n.bytes().any(|b| b.is_ascii_digit()),
                    "{n:?} ({})",
                    rule.example
                );
            }
        }
    }

    #[test]
    fn every_signature_has_a_row() {
        for &s in LogSignature::ALL {
            assert!(
                rules().iter().any(|r| r.signature == s) || xid::REFINED.contains(&s),
                "{s} has no row"
            );
        }
    }
}
