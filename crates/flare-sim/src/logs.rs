//! The logs a large job writes, and how they look when it fails: one file per rank
//! (NCCL's init lines, a training line per iteration as torchtitan prints it), and per
//! node the launcher's output (torchrun) and the kernel log, in the formats the real
//! tools write. A failure puts its root-cause line where the real one appears (the
//! node's kernel log for an Xid, the rank's own output for an OOM) and the cascade a real
//! job shows after it: every other rank's NCCL watchdog timeout ten minutes later, the
//! launchers' SIGTERMs and failure summaries. For diagnosis at scale (10,240 ranks,
//! thousands of lines each) and for tests, with the truth beside it.
//!
//! Deterministic for a seed; lines are written into the caller's buffer one at a time, so
//! a job far larger than memory can be generated or streamed.

use crate::noise::Noise;
use std::fmt::Write;

/// How the job fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFault {
    None,
    /// Xid 79 on one GPU: its rank's CUDA calls fail.
    GpuFellOffBus,
    /// Xid 48 and an uncorrectable ECC error on one GPU.
    UncorrectableEcc,
    /// A rank runs out of GPU memory.
    CudaOom,
    /// A node's NIC link goes down: its ranks see a port error, their peers IB errors.
    NicDown,
    /// A rank stops without a word; the others time out waiting for it.
    Hang,
    /// A rank's gradients become NaN (Megatron's check).
    NanLoss,
}

impl LogFault {
    pub const ALL: &'static [LogFault] = &[
        LogFault::None,
        LogFault::GpuFellOffBus,
        LogFault::UncorrectableEcc,
        LogFault::CudaOom,
        LogFault::NicDown,
        LogFault::Hang,
        LogFault::NanLoss,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LogFault::None => "none",
            LogFault::GpuFellOffBus => "gpu_fell_off_bus",
            LogFault::UncorrectableEcc => "uncorrectable_ecc",
            LogFault::CudaOom => "cuda_oom",
            LogFault::NicDown => "nic_down",
            LogFault::Hang => "hang",
            LogFault::NanLoss => "nan_loss",
        }
    }

    pub fn parse(s: &str) -> Option<LogFault> {
        LogFault::ALL.iter().copied().find(|f| f.name() == s)
    }
}

/// The job whose logs are written.
#[derive(Clone, Debug)]
pub struct LogSimConfig {
    pub ranks: u32,
    pub gpus_per_node: u32,
    /// Training iterations (one line per rank each).
    pub iterations: u32,
    pub fault: LogFault,
    pub seed: u64,
}

/// What one file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFileKind {
    Rank(u32),
    /// A node's kernel log.
    Dmesg(u32),
    /// A node's launcher (torchrun) output.
    Launcher(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFile {
    /// Relative path: `<node>/rank<R>.log`, `<node>/dmesg.log`, `<node>/torchrun.log`.
    pub path: String,
    pub kind: LogFileKind,
}

/// What was injected, in the terms of the failure-log corpus's `truth.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct LogTruth {
    /// `none` for a healthy job.
    pub category: &'static str,
    pub culprit_rank: Option<u32>,
    pub culprit_host: Option<String>,
    pub stage: &'static str,
    pub restart_helps: Option<bool>,
    /// Substrings of the lines that show the cause (empty: none does, as in a hang).
    pub root_lines: Vec<String>,
}

/// A job's logs.
pub struct JobLogs {
    cfg: LogSimConfig,
    noise: Noise,
    culprit: u32,
    /// The iteration the failure happens in.
    fail_at: u32,
}

/// Seconds of NCCL's watchdog timeout: the others time out this long after the failure.
const WATCHDOG_S: f64 = 600.0;
/// 2026-11-25 10:00:00, seconds into the day; the job starts then.
const START_S: f64 = 10.0 * 3600.0;
const INIT_S: f64 = 75.0;
const STEP_S: f64 = 1.35;

fn host(node: u32) -> String {
    format!("gpu-node-{node:04}")
}

fn ip(node: u32) -> String {
    format!(
        "10.{}.{}.{}",
        16 + node / 65536,
        (node / 256) % 256,
        node % 256
    )
}

fn pid(rank: u32) -> u32 {
    20_000 + rank * 7
}

/// PCI bus of a node's GPU (the usual 8-GPU layout).
fn bus(gpu: u32) -> &'static str {
    ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"][(gpu % 8) as usize]
}

/// `2026-11-25 10:02:03,123`
fn stamp(out: &mut String, s: f64) {
    let day = s.div_euclid(86_400.0) as u32;
    let t = s.rem_euclid(86_400.0);
    let (h, m, sec) = ((t / 3600.0) as u32, ((t % 3600.0) / 60.0) as u32, t % 60.0);
    let _ = write!(
        out,
        "2026-11-{:02} {h:02}:{m:02}:{:02},{:03}",
        25 + day,
        sec as u32,
        ((sec.fract()) * 1000.0) as u32
    );
}

/// `I1125 10:02:03.123456` (glog, as torchrun and PyTorch's C++ logs write)
fn glog(out: &mut String, level: char, s: f64) {
    let t = s.rem_euclid(86_400.0);
    let (h, m, sec) = ((t / 3600.0) as u32, ((t % 3600.0) / 60.0) as u32, t % 60.0);
    let _ = write!(
        out,
        "{level}1125 {h:02}:{m:02}:{:02}.{:06}",
        sec as u32,
        (sec.fract() * 1e6) as u32
    );
}

impl JobLogs {
    pub fn new(cfg: LogSimConfig) -> JobLogs {
        let noise = Noise::new(cfg.seed);
        let culprit = (noise.uniform(&[0x10C5, 1]) * cfg.ranks as f64) as u32 % cfg.ranks.max(1);
        let fail_at = ((cfg.iterations as f64) * (0.5 + 0.4 * noise.uniform(&[0x10C5, 2]))) as u32;
        let fail_at = fail_at.min(cfg.iterations.saturating_sub(1));
        JobLogs {
            cfg,
            noise,
            culprit,
            fail_at,
        }
    }

    fn nodes(&self) -> u32 {
        self.cfg.ranks.div_ceil(self.cfg.gpus_per_node.max(1))
    }

    fn node_of(&self, rank: u32) -> u32 {
        rank / self.cfg.gpus_per_node.max(1)
    }

    fn failing(&self) -> bool {
        self.cfg.fault != LogFault::None
    }

    /// When a rank's iteration `i` ends (seconds into the day).
    fn t(&self, rank: u32, i: u32) -> f64 {
        START_S + INIT_S + i as f64 * STEP_S + 0.05 * self.noise.uniform(&[rank as u64, i as u64])
    }

    /// When the failure happens.
    fn t_fail(&self) -> f64 {
        self.t(self.culprit, self.fail_at) + 0.4
    }

    /// The iterations a rank logs.
    fn last_iteration(&self, rank: u32) -> u32 {
        if !self.failing() {
            self.cfg.iterations
        } else if rank == self.culprit && self.cfg.fault != LogFault::NicDown {
            self.fail_at
        } else {
            self.fail_at + 1
        }
    }

    pub fn files(&self) -> Vec<LogFile> {
        let mut v = Vec::with_capacity(self.cfg.ranks as usize + 2 * self.nodes() as usize);
        for n in 0..self.nodes() {
            let h = host(n);
            v.push(LogFile {
                path: format!("{h}/torchrun.log"),
                kind: LogFileKind::Launcher(n),
            });
            v.push(LogFile {
                path: format!("{h}/dmesg.log"),
                kind: LogFileKind::Dmesg(n),
            });
            let first = n * self.cfg.gpus_per_node;
            for r in first..(first + self.cfg.gpus_per_node).min(self.cfg.ranks) {
                v.push(LogFile {
                    path: format!("{h}/rank{r}.log"),
                    kind: LogFileKind::Rank(r),
                });
            }
        }
        v
    }

    pub fn truth(&self) -> LogTruth {
        let r = self.culprit;
        let h = host(self.node_of(r));
        let (category, rank, host_, restart, root): (
            &str,
            Option<u32>,
            Option<String>,
            Option<bool>,
            &[&str],
        ) = match self.cfg.fault {
            LogFault::None => ("none", None, None, None, &[]),
            LogFault::GpuFellOffBus => (
                "gpu_hardware",
                Some(r),
                Some(h),
                Some(true),
                &["GPU has fallen off the bus"],
            ),
            LogFault::UncorrectableEcc => (
                "gpu_hardware",
                Some(r),
                Some(h),
                Some(true),
                &["): 48, pid=", "uncorrectable ECC error encountered"],
            ),
            LogFault::CudaOom => (
                "out_of_memory",
                Some(r),
                Some(h),
                Some(false),
                &["CUDA out of memory"],
            ),
            LogFault::NicDown => (
                "network",
                None,
                Some(h),
                Some(true),
                &["Link down", "port error"],
            ),
            LogFault::Hang => ("unknown", Some(r), Some(h), None, &[]),
            LogFault::NanLoss => (
                "numerical",
                Some(r),
                Some(h),
                Some(false),
                &["found NaN in local grad norm"],
            ),
        };
        LogTruth {
            category,
            culprit_rank: rank,
            culprit_host: host_,
            stage: if self.failing() { "training" } else { "none" },
            restart_helps: restart,
            root_lines: root.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Writes `file`'s lines, one at a time, through `each` (the line without its newline).
    pub fn lines(&self, file: &LogFile, each: &mut dyn FnMut(&str)) {
        let mut buf = String::with_capacity(256);
        match file.kind {
            LogFileKind::Rank(r) => self.rank_lines(r, &mut buf, each),
            LogFileKind::Dmesg(n) => self.dmesg_lines(n, &mut buf, each),
            LogFileKind::Launcher(n) => self.launcher_lines(n, &mut buf, each),
        }
    }

    fn rank_lines(&self, r: u32, b: &mut String, each: &mut dyn FnMut(&str)) {
        let n = self.node_of(r);
        let g = r % self.cfg.gpus_per_node.max(1);
        let (h, p) = (host(n), pid(r));
        let world = self.cfg.ranks;
        let nccl = |b: &mut String, tid: u32| {
            b.clear();
            let _ = write!(b, "{h}:{p}:{tid} [{g}] NCCL INFO ");
        };
        let mut emit = |b: &mut String| each(b);
        if r == 0 {
            b.clear();
            b.push_str("NCCL version 2.21.5+cuda12.4");
            emit(b);
        }
        nccl(b, p);
        let _ = write!(b, "Bootstrap : Using ib0:{}<0>", ip(n));
        emit(b);
        nccl(b, p);
        b.push_str("NET/Plugin: No plugin found (libnccl-net.so), using internal implementation");
        emit(b);
        nccl(b, p);
        b.push_str("cudaDriverVersion 12040");
        emit(b);
        let tid = p + 115;
        nccl(b, tid);
        let _ = write!(b, "NET/IB : Using [0]mlx5_{g}:1/IB ; OOB ib0:{}<0>", ip(n));
        emit(b);
        nccl(b, tid);
        b.push_str("Using network IB");
        emit(b);
        nccl(b, tid);
        let _ = write!(
            b,
            "comm 0x{:x} rank {r} nRanks {world} nNodes {} localRanks {} localRank {g} MNNVL 0",
            0x55d0_0000_0000u64 + r as u64 * 0x1000,
            self.nodes(),
            self.cfg.gpus_per_node
        );
        emit(b);
        for c in 0..4 {
            nccl(b, tid);
            let _ = write!(
                b,
                "Channel {c:02}/0 : {r}[{g}] -> {}[{}] via P2P/CUMEM/read",
                (r + 1) % world,
                (g + 1) % self.cfg.gpus_per_node.max(1)
            );
            emit(b);
        }
        nccl(b, tid);
        b.push_str("Connected all rings");
        emit(b);
        nccl(b, tid);
        let _ = write!(
            b,
            "ncclCommInitRank comm 0x{:x} rank {r} nranks {world} cudaDev {g} nvmlDev {g} busId {}000 commId 0x{:x} - Init COMPLETE",
            0x55d0_0000_0000u64 + r as u64 * 0x1000,
            bus(g),
            0x7f3a_9c11_u64 ^ self.cfg.seed
        );
        emit(b);
        let last = self.last_iteration(r);
        for i in 0..last {
            let t = self.t(r, i);
            b.clear();
            let _ = write!(b, "[rank{r}]:[titan] ");
            stamp(b, t);
            let loss = 11.0 * (-(i as f64) / 400.0).exp()
                + 2.1
                + 0.05 * self.noise.normal(&[7, r as u64, i as u64]);
            let _ = write!(
                b,
                " - root - INFO - step: {:>5}  loss: {loss:.4}  memory: 61.{:02}GiB(77.{:02}%)  tps: 3,{:03}  tflops: 182.{:02}  mfu: 58.{:02}%",
                i + 1,
                (i * 7 + r) % 100,
                (i * 3 + r) % 100,
                (i * 13 + r) % 1000,
                (i + r) % 100,
                (i * 11) % 100
            );
            emit(b);
        }
        if !self.failing() {
            b.clear();
            let _ = write!(b, "[rank{r}]:[titan] ");
            stamp(b, self.t(r, self.cfg.iterations) + 1.0);
            b.push_str(" - root - INFO - Training completed");
            emit(b);
            return;
        }
        let tf = self.t_fail();
        let seq = 40 + self.fail_at as u64 * 3 + 1;
        if r == self.culprit {
            match self.cfg.fault {
                LogFault::GpuFellOffBus | LogFault::UncorrectableEcc => {
                    let what = if self.cfg.fault == LogFault::GpuFellOffBus {
                        "unspecified launch failure"
                    } else {
                        "uncorrectable ECC error encountered"
                    };
                    for l in [
                        "Traceback (most recent call last):".to_string(),
                        "  File \"/workspace/torchtitan/train.py\", line 412, in train_step".into(),
                        "    loss.backward()".into(),
                        format!("RuntimeError: CUDA error: {what}"),
                        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.".into(),
                    ] {
                        b.clear();
                        let _ = write!(b, "[rank{r}]: {l}");
                        emit(b);
                    }
                    return;
                }
                LogFault::CudaOom => {
                    for l in [
                        "Traceback (most recent call last):".to_string(),
                        "  File \"/workspace/torchtitan/train.py\", line 398, in train_step".into(),
                        "    pred = model(inputs)".into(),
                        format!("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU {g} has a total capacity of 79.11 GiB of which 2.07 GiB is free. Including non-PyTorch memory, this process has 77.02 GiB memory in use."),
                    ] {
                        b.clear();
                        let _ = write!(b, "[rank{r}]: {l}");
                        emit(b);
                    }
                    return;
                }
                LogFault::NanLoss => {
                    for l in [
                        "Traceback (most recent call last):".to_string(),
                        "  File \"/workspace/Megatron-LM/megatron/core/distributed/param_and_grad_buffer.py\", line 165, in check_grads".into(),
                        format!("AssertionError: Rank {r}: found NaN in local grad norm in backward pass before data-parallel communication collective. Device: {g}, node: {h}"),
                    ] {
                        b.clear();
                        let _ = write!(b, "[rank{r}]: {l}");
                        emit(b);
                    }
                    return;
                }
                LogFault::Hang => return,
                LogFault::NicDown | LogFault::None => {}
            }
        }
        let failed_node = self.node_of(self.culprit);
        if self.cfg.fault == LogFault::NicDown && n == failed_node {
            nccl(b, p + 203);
            b.truncate(b.len() - "NCCL INFO ".len());
            let _ = write!(
                b,
                "transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error"
            );
            emit(b);
        }
        // the ranks next to the failed node's on the ring lose their connections to it
        let ring_next_there = self.node_of((r + 1) % world) == failed_node;
        let ring_prev_there = self.node_of((r + world - 1) % world) == failed_node;
        if self.cfg.fault == LogFault::NicDown
            && n != failed_node
            && (ring_next_there || ring_prev_there)
        {
            nccl(b, p + 203);
            b.truncate(b.len() - "NCCL INFO ".len());
            let _ = write!(
                b,
                "transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer {}<{}> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
                ip(failed_node),
                40_000 + g
            );
            emit(b);
        }
        // every rank still waiting times out
        let tw = tf + WATCHDOG_S + 0.01 * (r % 97) as f64;
        b.clear();
        let _ = write!(b, "[rank{r}]:[");
        glog(b, 'E', tw);
        let _ = write!(
            b,
            "000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=134217728, NumelOut=134217728, Timeout(ms)=600000) ran for 600{:03} milliseconds before timing out.",
            r % 1000
        );
        emit(b);
        for l in [
            "Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            "To avoid data inconsistency, we are taking the entire process down.",
        ] {
            b.clear();
            let _ = write!(b, "[rank{r}]:[");
            glog(b, 'E', tw + 0.002);
            let _ = write!(b, "000 ProcessGroupNCCL.cpp:1680] [PG ID 0 PG GUID 0(default_pg) Rank {r}] {l}");
            emit(b);
        }
    }

    fn dmesg_lines(&self, n: u32, b: &mut String, each: &mut dyn FnMut(&str)) {
        let up0 = 1_000.0 + 37.0 * n as f64;
        let mut line = |b: &mut String, up: f64, text: &str| {
            b.clear();
            let _ = write!(b, "[{up:>12.6}] {text}");
            each(b);
        };
        line(b, 0.0, "Linux version 5.15.0-119-generic (buildd@lcy02-amd64-075) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38)");
        for g in 0..self.cfg.gpus_per_node.min(8) {
            line(
                b,
                9.5 + g as f64 * 0.01,
                &format!(
                    "mlx5_core 0000:{}:00.1: firmware version: 28.39.1002",
                    bus(g)
                ),
            );
        }
        line(b, 21.2, "nvidia: loading out-of-tree module taints kernel.");
        line(b, 21.9, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024");
        if !self.failing() || self.node_of(self.culprit) != n {
            return;
        }
        let g = self.culprit % self.cfg.gpus_per_node.max(1);
        let up = up0 + (self.t_fail() - START_S) - 0.3;
        let p = pid(self.culprit);
        match self.cfg.fault {
            LogFault::GpuFellOffBus => {
                line(
                    b,
                    up,
                    &format!(
                        "NVRM: GPU at PCI:0000:{}:00: GPU-4d2f9a1e-7b3c-4e5d-9f60-{:012x}",
                        bus(g),
                        0x1b2c3d4e5f60u64 + g as u64
                    ),
                );
                line(b, up + 0.0001, &format!("NVRM: Xid (PCI:0000:{}:00): 79, pid={p}, name=python, GPU has fallen off the bus.", bus(g)));
                line(
                    b,
                    up + 0.0002,
                    &format!(
                        "NVRM: GPU 0000:{}:00.0: GPU has fallen off the bus.",
                        bus(g)
                    ),
                );
                line(
                    b,
                    up + 0.0003,
                    "NVRM: A GPU crash dump has been created. If possible, please run",
                );
            }
            LogFault::UncorrectableEcc => {
                line(b, up, &format!("NVRM: Xid (PCI:0000:{}:00): 48, pid={p}, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.", bus(g)));
                line(b, up + 0.0001, &format!("NVRM: Xid (PCI:0000:{}:00): 63, pid={p}, name=python, Row Remapper: New row marked for remapping, reset gpu to activate.", bus(g)));
            }
            LogFault::NicDown => {
                line(
                    b,
                    up,
                    &format!("mlx5_core 0000:{}:00.1 ib{g}: Link down", bus(g)),
                );
            }
            _ => {}
        }
    }

    fn launcher_lines(&self, n: u32, b: &mut String, each: &mut dyn FnMut(&str)) {
        let apid = 10_000 + n;
        let first = n * self.cfg.gpus_per_node;
        let last = (first + self.cfg.gpus_per_node).min(self.cfg.ranks);
        let mut line = |b: &mut String, level: char, t: f64, file: &str, text: &str| {
            b.clear();
            glog(b, level, t);
            let _ = write!(b, " {apid} torch/distributed/{file}] {text}");
            each(b);
        };
        line(b, 'W', START_S, "run.py:793", "");
        line(
            b,
            'W',
            START_S,
            "run.py:793",
            "*****************************************",
        );
        line(b, 'W', START_S, "run.py:793", "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed.");
        line(
            b,
            'W',
            START_S,
            "run.py:793",
            "*****************************************",
        );
        if !self.failing() {
            return;
        }
        let culprit_here = (first..last).contains(&self.culprit)
            && matches!(
                self.cfg.fault,
                LogFault::GpuFellOffBus
                    | LogFault::UncorrectableEcc
                    | LogFault::CudaOom
                    | LogFault::NanLoss
            );
        // the first of this node's workers to end: the culprit (its own error), else one
        // whose watchdog took its process down
        let (first_rank, code, t_end) = if culprit_here {
            (self.culprit, 1, self.t_fail() + 0.5)
        } else {
            (first, -6, self.t_fail() + WATCHDOG_S + 0.2)
        };
        for r in first..last {
            if r != first_rank {
                line(
                    b,
                    'W',
                    t_end + 0.1,
                    "elastic/multiprocessing/api.py:897",
                    &format!("Sending process {} closing signal SIGTERM", pid(r)),
                );
            }
        }
        line(
            b,
            'E',
            t_end + 0.3,
            "elastic/multiprocessing/api.py:869",
            &format!(
                "failed (exitcode: {code}) local_rank: {} (pid: {}) of binary: /usr/bin/python",
                first_rank - first,
                pid(first_rank)
            ),
        );
        for text in [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ".to_string(),
            "============================================================".into(),
            "train.py FAILED".into(),
            "------------------------------------------------------------".into(),
            "Failures:".into(),
            "  <NO_OTHER_FAILURES>".into(),
            "------------------------------------------------------------".into(),
            "Root Cause (first observed failure):".into(),
            "[0]:".into(),
            format!("  time      : 2026-11-25_{}", {
                let mut s = String::new();
                stamp(&mut s, t_end);
                s[11..19].to_string()
            }),
            format!("  host      : {}", host(n)),
            format!(
                "  rank      : {first_rank} (local_rank: {})",
                first_rank - first
            ),
            format!(
                "  exitcode  : {code} (pid: {}){}",
                pid(first_rank),
                if code == -6 { "  (SIGABRT)" } else { "" }
            ),
            "  error_file: <N/A>".into(),
            if code == -6 {
                format!(
                    "  traceback : Signal 6 (SIGABRT) received by PID {}",
                    pid(first_rank)
                )
            } else {
                "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html".into()
            },
            "============================================================".into(),
        ] {
            b.clear();
            b.push_str(&text);
            each(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(fault: LogFault) -> LogSimConfig {
        LogSimConfig {
            ranks: 32,
            gpus_per_node: 8,
            iterations: 50,
            fault,
            seed: 7,
        }
    }

    #[test]
    fn the_same_seed_writes_the_same_logs_and_a_root_line_where_the_truth_says() {
        for &fault in LogFault::ALL {
            let a = JobLogs::new(cfg(fault));
            let b = JobLogs::new(cfg(fault));
            let mut all = String::new();
            for f in a.files() {
                let mut x = Vec::new();
                a.lines(&f, &mut |l| x.push(l.to_string()));
                let mut y = Vec::new();
                b.lines(&f, &mut |l| y.push(l.to_string()));
                assert_eq!(x, y, "{}", f.path);
                for l in x {
                    all.push_str(&l);
                    all.push('\n');
                }
            }
            let t = a.truth();
            for r in &t.root_lines {
                assert!(all.contains(r.as_str()), "{}: {r}", fault.name());
            }
            assert_eq!(
                all.contains("Watchdog caught"),
                fault != LogFault::None,
                "{}",
                fault.name()
            );
        }
    }
}
