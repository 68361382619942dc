//! The verdict on small multi-file jobs written in the real formats (NCCL, PyTorch's
//! watchdog, torchrun, the kernel, Slurm): the right root cause, culprit and category,
//! the effects explained, and no blame where the evidence does not decide.

use flare_log_diagnosis::{diagnose, Collector, Limits, LogDiagnosis};
use flare_model::{FailureCategory as C, JobStage, LineRole, LogSignature as S};

/// Files of one job: (path, lines).
fn run(files: &[(&str, &[&str])], baseline: &[&str]) -> LogDiagnosis {
    let mut c = Collector::new(Limits::default());
    for l in baseline {
        c.baseline_line(l);
    }
    for (path, lines) in files {
        let id = c.file(path);
        for l in *lines {
            c.line(id, l);
        }
        c.end_file(id);
    }
    diagnose(c.finish())
}

/// What a case expects of the top finding.
struct Want {
    category: C,
    rank: Option<u32>,
    host: Option<&'static str>,
    /// A substring of the root line (the first line shown), if one is expected.
    root: Option<&'static str>,
    stage: Option<JobStage>,
}

fn check(name: &str, d: &LogDiagnosis, w: &Want) {
    let f = d
        .findings
        .first()
        .unwrap_or_else(|| panic!("{name}: no finding"));
    let fd = f.failure.as_ref().expect("a failure detail");
    assert_eq!(fd.category, w.category, "{name}: category ({})", f.summary);
    let c = f.culprits.first();
    assert_eq!(
        c.and_then(|c| c.rank),
        w.rank,
        "{name}: rank ({})",
        f.summary
    );
    assert_eq!(
        c.and_then(|c| c.host.as_deref()),
        w.host,
        "{name}: host ({})",
        f.summary
    );
    match w.root {
        Some(r) => assert!(
            fd.lines.first().is_some_and(|l| l.text.contains(r)),
            "{name}: root line {:?}, want {r:?}",
            fd.lines.first().map(|l| &l.text)
        ),
        None => assert!(
            fd.lines.iter().all(|l| l.role != LineRole::Cascade),
            "{name}: an effect shown as the cause"
        ),
    }
    if let Some(s) = w.stage {
        assert_eq!(fd.stage, s, "{name}: stage");
    }
}

const WATCHDOG: &str = "[rank{R}]:[E1125 10:00:{S}.000000000 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank {R}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1200, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.";

fn watchdog(rank: u32, second: u32) -> String {
    WATCHDOG
        .replace("{R}", &rank.to_string())
        .replace("{S}", &format!("{second:02}"))
}

#[test]
fn oom_on_one_rank_among_watchdog_timeouts() {
    let w: Vec<String> = (0..8)
        .filter(|&r| r != 3)
        .map(|r| watchdog(r, 30 + r))
        .collect();
    let mut lines: Vec<&str> = vec![
        "[rank3]:[W1125 09:59:10.000000000 x.cpp:1] iteration 1199/ 5000 | consumed samples: 9592 | elapsed time per iteration (ms): 512.3 | lm loss: 2.1E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        "[rank3]: Traceback (most recent call last):",
        "[rank3]:   File \"/job/train.py\", line 210, in train_step",
        "[rank3]:     loss.backward()",
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.21 GiB is free.",
    ];
    lines.extend(w.iter().map(String::as_str));
    lines.push("W1125 10:00:40.000000 4242 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1365 closing signal SIGTERM");
    let d = run(&[("job/console.log", &lines)], &[]);
    check(
        "oom",
        &d,
        &Want {
            category: C::OutOfMemory,
            rank: Some(3),
            host: None,
            root: Some("CUDA out of memory"),
            stage: Some(JobStage::Training),
        },
    );
    let fd = d.findings[0].failure.as_ref().unwrap();
    let watchdog_group = fd
        .cascade
        .iter()
        .find(|g| g.signature == S::WatchdogTimeout)
        .expect("the timeouts are effects");
    assert_eq!(watchdog_group.ranks.len(), 7);
    assert_eq!(watchdog_group.rank_count, 7);
    assert!(fd.cascade.iter().any(|g| g.signature == S::LauncherSigterm));
}

#[test]
fn an_effect_counts_every_rank_past_the_listed_ones() {
    let root = ["[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.21 GiB is free."];
    let timeouts: Vec<[String; 1]> = (1..200).map(|r| [watchdog(r, 30)]).collect();
    let paths: Vec<String> = (0..200).map(|r| format!("job/rank{r}.log")).collect();
    let mut files: Vec<(&str, Vec<&str>)> = vec![(paths[0].as_str(), root.to_vec())];
    for (i, t) in timeouts.iter().enumerate() {
        files.push((paths[i + 1].as_str(), vec![t[0].as_str()]));
    }
    let files: Vec<(&str, &[&str])> = files.iter().map(|(p, l)| (*p, l.as_slice())).collect();
    let d = run(&files, &[]);
    let fd = d.findings[0].failure.as_ref().expect("a failure detail");
    let g = fd
        .cascade
        .iter()
        .find(|g| g.signature == S::WatchdogTimeout)
        .expect("the timeouts are effects");
    assert_eq!((g.lines, g.rank_count, g.ranks.len()), (199, 199, 64));
}

#[test]
fn the_host_every_ib_error_names_is_the_culprit() {
    let a: &[&str] = &[
        "node-a:100:200 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.1<0>",
        "node-a:100:210 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4242> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
        "node-a:101:211 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4243> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
    ];
    let b: &[&str] = &[
        "node-b:300:310 [2] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.3<4244> with status=12 opcode=0 len=0 vendor err 129 (Send)",
    ];
    let c: &[&str] =
        &["node-c:500:510 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.3<0>"];
    let d = run(
        &[("node-a.log", a), ("node-b.log", b), ("node-c.log", c)],
        &[],
    );
    check(
        "ib",
        &d,
        &Want {
            category: C::Network,
            rank: None,
            host: Some("node-c"),
            root: Some("Got completion from peer 10.0.0.3"),
            stage: None,
        },
    );
}

#[test]
fn the_kernel_outweighs_what_the_processes_saw() {
    let dmesg: &[&str] = &[
        "[ 8123.000001] NVRM: GPU at PCI:0000:3b:00: GPU-6a2f7b2c-1111-2222-3333-444455556666",
        "[ 8123.000002] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
    ];
    let rank: &[&str] = &[
        "node-2:4242:4300 [3] NCCL WARN Cuda failure 'unspecified launch failure'",
        "[rank11]: RuntimeError: CUDA error: unspecified launch failure",
    ];
    let d = run(
        &[("logs/node-2.dmesg", dmesg), ("logs/rank11.log", rank)],
        &[],
    );
    check(
        "xid",
        &d,
        &Want {
            category: C::GpuHardware,
            rank: None,
            host: Some("node-2"),
            root: Some("GPU has fallen off the bus"),
            stage: None,
        },
    );
    assert_eq!(
        d.findings[0].failure.as_ref().unwrap().restart_helps,
        Some(true)
    );
}

#[test]
fn a_rank_that_never_timed_out_is_the_one_the_others_waited_for() {
    let files: Vec<(String, Vec<String>)> = (0..4)
        .map(|r| {
            let mut v = vec![format!("2024-05-01 10:00:00,000 INFO step 41 | loss 1.9")];
            if r != 2 {
                v.push(watchdog(r, 10 + r));
            }
            (format!("job/rank{r}.log"), v)
        })
        .collect();
    let refs: Vec<(&str, Vec<&str>)> = files
        .iter()
        .map(|(p, v)| (p.as_str(), v.iter().map(String::as_str).collect()))
        .collect();
    let refs2: Vec<(&str, &[&str])> = refs.iter().map(|(p, v)| (*p, v.as_slice())).collect();
    let d = run(&refs2, &[]);
    check(
        "silent",
        &d,
        &Want {
            category: C::Unknown,
            rank: Some(2),
            host: None,
            root: None,
            stage: Some(JobStage::Training),
        },
    );
}

#[test]
fn different_collectives_at_one_sequence_number_are_a_mismatch() {
    let a = watchdog(0, 1);
    let b = watchdog(1, 1).replace(
        "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576",
        "OpType=BROADCAST, NumelIn=1, NumelOut=1",
    );
    let d = run(&[("console.log", &[a.as_str(), b.as_str()])], &[]);
    check(
        "mismatch",
        &d,
        &Want {
            category: C::CollectiveMismatch,
            rank: None,
            host: None,
            root: Some("Watchdog caught collective operation timeout"),
            stage: None,
        },
    );
}

#[test]
fn a_configuration_error_on_every_host_blames_none() {
    let lines: Vec<String> = (0..4)
        .map(|r| {
            format!(
                "host-{}:{}:{} [{}] NCCL WARN Bootstrap : no socket interface found",
                r / 2,
                100 + r,
                200 + r,
                r % 2
            )
        })
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(&[("console.log", &refs)], &[]);
    check(
        "ifname",
        &d,
        &Want {
            category: C::Configuration,
            rank: None,
            host: None,
            root: Some("no socket interface found"),
            stage: Some(JobStage::Init),
        },
    );
}

#[test]
fn a_time_limit_is_the_platform_and_no_node() {
    let d = run(
        &[(
            "slurm-4242.out",
            &[
                "0: step 900 | loss 1.2",
                "1: step 900 | loss 1.3",
                "slurmstepd: error: *** JOB 4242 ON gpu042 CANCELLED AT 2024-08-30T23:01:04 DUE TO TIME LIMIT ***",
                "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            ],
        )],
        &[],
    );
    check(
        "time limit",
        &d,
        &Want {
            category: C::Platform,
            rank: None,
            host: None,
            root: Some("DUE TO TIME LIMIT"),
            stage: None,
        },
    );
    assert_eq!(
        d.findings[0].failure.as_ref().unwrap().restart_helps,
        Some(true)
    );
}

#[test]
fn a_healthy_run_has_no_finding() {
    let d = run(
        &[(
            "rank0.log",
            &[
                "2024-05-01 10:00:00,000 INFO initializing process group",
                "node-1:100:200 [0] NCCL INFO comm 0x55d1 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x42 - Init COMPLETE",
                " iteration      100/    1000 | consumed samples:   800 | elapsed time per iteration (ms): 512.3 | lm loss: 2.1E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
                "2024-05-01 10:05:00,000 INFO training completed",
            ],
        )],
        &[],
    );
    assert!(
        d.findings.is_empty(),
        "{:?}",
        d.findings.first().map(|f| &f.summary)
    );
}

#[test]
fn a_line_seen_in_good_runs_is_not_blamed() {
    let line =
        "2024-05-01 10:00:00,000 WARNING data: shard cache miss, unable to prefetch block 17";
    let job: &[&str] = &[line, "2024-05-01 10:00:01,000 INFO step 3 | loss 1.0"];
    let without = run(&[("rank0.log", job)], &[]);
    assert_eq!(without.findings.len(), 1, "an unusual line, no baseline");
    assert_eq!(
        without.findings[0].failure.as_ref().unwrap().category,
        C::Unknown
    );
    let with = run(
        &[("rank0.log", job)],
        &["2024-04-01 09:00:00,000 WARNING data: shard cache miss, unable to prefetch block 3"],
    );
    assert!(
        with.findings.is_empty(),
        "{:?}",
        with.findings.first().map(|f| &f.summary)
    );
}

#[test]
fn torchrun_names_the_rank_that_was_killed() {
    let lines: &[&str] = &[
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-02-09_09:09:15",
        "  host      : gpu-node-7",
        "  rank      : 13 (local_rank: 5)",
        "  exitcode  : -9 (pid: 170581)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 170581",
        "============================================================",
    ];
    let d = run(&[("console.log", lines)], &[]);
    check(
        "sigkill",
        &d,
        &Want {
            category: C::Unknown,
            rank: Some(13),
            host: Some("gpu-node-7"),
            root: Some("exitcode  : -9"),
            stage: None,
        },
    );
}

#[test]
fn garbage_does_not_panic() {
    let junk: Vec<String> = vec![
        String::new(),
        "\u{0}\u{1}\u{2}".into(),
        "[".repeat(10_000),
        "NVRM: Xid (PCI:".into(),
        "[rank".into(),
        "E1125".into(),
        "  exitcode  :".into(),
        "Traceback (most recent call last):".into(),
        "File \"".into(),
        "é".repeat(5_000),
        "1: 2: 3: 4: 5: 6: 7: 8: 9:".into(),
    ];
    let refs: Vec<&str> = junk.iter().map(String::as_str).collect();
    let _ = run(&[("x.log", &refs)], &refs);
}

/// torchrun's `--log-dir` on two nodes: a file per local rank, no host in the paths. The
/// hung process prints nothing with its global rank; its siblings' files give its node's
/// offset, so it is named, and the other node's local rank 0 is not confused with it.
#[test]
fn a_silent_local_rank_gets_its_global_rank_from_its_node_s_files() {
    let gloo = |r: u32| {
        format!("[rank{r}]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv operation to complete")
    };
    let (r0, r1, r3) = (gloo(0), gloo(1), gloo(3));
    let step = "2026-11-25 10:00:01,000 INFO train: step 2 | loss 0.4";
    let d = run(
        &[
            ("job/a/attempt_0/0/stderr.log", &[step, r0.as_str()]),
            ("job/a/attempt_0/1/stderr.log", &[step, r1.as_str()]),
            ("job/b/attempt_0/0/stderr.log", &[step]),
            ("job/b/attempt_0/1/stderr.log", &[step, r3.as_str()]),
        ],
        &[],
    );
    assert_eq!(d.ranks.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    let f = &d.findings[0];
    assert_eq!(f.first_rank(), Some(2), "{}", f.summary);
}

#[test]
fn a_failure_line_long_before_the_root_cause_is_not_its_effect() {
    // rank 1 lost its connection to rank 0 at 03:00 (NCCL retried, or an attempt before a
    // restart); at 09:00 rank 3 ran out of memory and ranks 1 and 2 lost their connections
    // to it
    let d = run(
        &[
            (
                "job/rank1.log",
                &[
                    "[2024-01-02 03:00:00,000] [rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.1]:29500",
                    "[2024-01-02 09:00:03,000] [rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.4]:29500",
                ],
            ),
            (
                "job/rank3.log",
                &["[2024-01-02 09:00:00,000] [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.21 GiB is free."],
            ),
            (
                "job/rank2.log",
                &["[2024-01-02 09:00:02,000] [rank2]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.4]:29500"],
            ),
        ],
        &[],
    );
    check(
        "early effect",
        &d,
        &Want {
            category: C::OutOfMemory,
            rank: Some(3),
            host: None,
            root: Some("CUDA out of memory"),
            stage: None,
        },
    );
    let f = &d.findings[0];
    let fd = f.failure.as_ref().unwrap();
    // rank 1's later line is an effect like rank 2's; its earlier one is counted apart
    let effects: Vec<(u64, Vec<u32>)> = fd
        .cascade
        .iter()
        .map(|g| (g.lines, g.ranks.clone()))
        .collect();
    assert_eq!(effects, vec![(2, vec![1, 2])], "{:?}", fd.cascade);
    assert_eq!(fd.earlier.len(), 1, "{:?}", fd.earlier);
    let early = &fd.earlier[0];
    assert_eq!((early.lines, early.ranks.clone()), (1, vec![1]));
    assert!(
        early.explanation.contains("6.0 hours before"),
        "{}",
        early.explanation
    );
    assert!(
        f.summary
            .contains("1 failure lines came too long before it"),
        "{}",
        f.summary
    );
}

#[test]
fn a_ray_train_console_names_the_workers_node() {
    // Ray Train prints every worker's output in the driver's console, each line behind
    // its worker's prefix; the node is only in that prefix
    let ip = |r: u32| format!("10.0.0.{}", 10 + r / 2);
    let mut lines: Vec<String> = (0..4)
        .filter(|&r| r != 3)
        .map(|r| {
            format!(
                "(RayTrainWorker pid={}, ip={}) {}",
                4000 + r,
                ip(r),
                watchdog(r, 30 + r)
            )
        })
        .collect();
    lines.insert(
        0,
        format!(
            "(RayTrainWorker pid=4003, ip={}) [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 1.21 GiB is free.",
            ip(3)
        ),
    );
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let d = run(&[("ray/driver.log", &lines)], &[]);
    check(
        "ray",
        &d,
        &Want {
            category: C::OutOfMemory,
            rank: Some(3),
            host: Some("10.0.0.11"),
            root: Some("CUDA out of memory"),
            stage: None,
        },
    );
}

#[test]
fn a_collected_rsyslog_names_the_node_in_its_rfc3339_lines() {
    // rsyslog's default high-precision format, several nodes' lines in one file: the node
    // is only in each line's host field
    let syslog: &[&str] = &[
        "2025-11-25T10:00:01.000100+00:00 gpu-node-03 systemd[1]: Started Session 12 of User slurm.",
        "2025-11-25T10:00:20.481922+00:00 gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
        "2025-11-25T10:00:20.482001+00:00 gpu-node-07 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "2025-11-25T10:00:21.100000+00:00 gpu-node-03 kernel: nvidia-nvswitch: link training complete",
    ];
    let watchdogs: Vec<String> = (0..4).map(|r| watchdog(r, 30 + r)).collect();
    let ranks: Vec<&str> = watchdogs.iter().map(String::as_str).collect();
    let d = run(&[("logs/syslog", syslog), ("logs/train.log", &ranks)], &[]);
    check(
        "rsyslog",
        &d,
        &Want {
            category: C::GpuHardware,
            rank: None,
            host: Some("gpu-node-07"),
            root: Some("GPU has fallen off the bus"),
            stage: None,
        },
    );
}

#[test]
fn a_journald_json_export_names_the_node() {
    // `journalctl -k -o json > node-17.journal.json`: one JSON object per line, the node
    // in `_HOSTNAME`, the kernel's line in `MESSAGE`
    let journal: &[&str] = &[
        r#"{"__CURSOR":"s=0a1b;i=2001","__REALTIME_TIMESTAMP":"1764064801000100","_HOSTNAME":"gpu-node-17","SYSLOG_IDENTIFIER":"kernel","PRIORITY":"6","MESSAGE":"nvidia-nvswitch: Probing device 0000:05:00.0"}"#,
        r#"{"__CURSOR":"s=0a1b;i=2002","__REALTIME_TIMESTAMP":"1764064820481922","_HOSTNAME":"gpu-node-17","SYSLOG_IDENTIFIER":"kernel","PRIORITY":"3","MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."}"#,
    ];
    let watchdogs: Vec<String> = (0..4).map(|r| watchdog(r, 30 + r)).collect();
    let ranks: Vec<&str> = watchdogs.iter().map(String::as_str).collect();
    let d = run(
        &[
            ("logs/node-17.journal.json", journal),
            ("logs/train.log", &ranks),
        ],
        &[],
    );
    check(
        "journald json",
        &d,
        &Want {
            category: C::GpuHardware,
            rank: None,
            host: Some("gpu-node-17"),
            root: Some("GPU has fallen off the bus"),
            stage: None,
        },
    );
}

/// PyTorch's watchdog takes a process down in four lines: the timeout, the notice, the
/// C++ runtime's `terminate called`, the exception's `what():`. In a console whose lines
/// name no rank, the abort is still an effect of the timeout beside it; and a timeout
/// the job set below PyTorch's default, with no error anywhere, reads as the timeout's
/// configuration, where the default's would be no cause at all.
#[test]
fn a_watchdog_abort_is_an_effect_and_a_short_timeout_its_configuration() {
    for (timeout_ms, category) in [("60000", C::Configuration), ("600000", C::Unknown)] {
        let watchdog = format!("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)={timeout_ms}) ran for 69479 milliseconds before timing out.");
        let lines = [
            "Starting training for 300 epochs...".to_string(),
            format!("[E ProcessGroupNCCL.cpp:567] {watchdog}"),
            "[E ProcessGroupNCCL.cpp:327] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we are taking the entire process down.".to_string(),
            "terminate called after throwing an instance of 'std::runtime_error'".to_string(),
            format!("  what():  {watchdog}"),
        ];
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        let d = run(&[("job/console.log", &lines)], &[]);
        let name = format!("timeout {timeout_ms}");
        check(
            &name,
            &d,
            &Want {
                category,
                rank: None,
                host: None,
                root: None,
                stage: None,
            },
        );
        let f = &d.findings[0];
        let fd = f.failure.as_ref().expect("a failure detail");
        assert!(
            fd.cascade.iter().any(|e| e.signature == S::CxxTerminate),
            "{name}: the abort is not among the effects: {}",
            f.summary
        );
        assert_eq!(
            f.summary.contains("60 s"),
            category == C::Configuration,
            "{name}: {}",
            f.summary
        );
    }
}

/// Lightning's validation bar counts validation batches: a failure under it is in
/// evaluation, not at training step 45.
#[test]
fn a_failure_under_a_validation_bar_is_in_evaluation() {
    let lines = [
        "Epoch 3: 100%|██████████| 500/500 [01:02<00:00,  8.01it/s, v_num=0]",
        "Validation DataLoader 0:  45%|████▌     | 45/100 [00:02<00:03, 17.30it/s]",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.02 GiB is free.",
    ];
    let d = run(&[("job/rank0.log", &lines)], &[]);
    check(
        "validation",
        &d,
        &Want {
            category: C::OutOfMemory,
            rank: Some(0),
            host: None,
            root: Some("CUDA out of memory"),
            stage: Some(JobStage::Evaluation),
        },
    );
}

/// Megatron announces a checkpoint with its iteration: a failure while writing it is in
/// checkpointing, at that iteration.
#[test]
fn a_failure_while_saving_a_checkpoint_names_its_iteration() {
    let lines = [
        " iteration      500/    1000 | consumed samples:       512000 | lm loss: 2.104E+00 |",
        "saving checkpoint at iteration     500 to /ckpt",
        "OSError: [Errno 28] No space left on device",
    ];
    let d = run(&[("job/rank0.log", &lines)], &[]);
    check(
        "checkpoint",
        &d,
        &Want {
            category: C::DataStorage,
            rank: Some(0),
            host: None,
            root: Some("No space left on device"),
            stage: Some(JobStage::Checkpointing),
        },
    );
    let fd = d.findings[0].failure.as_ref().expect("a failure detail");
    assert_eq!(fd.iteration, Some(500), "{}", d.findings[0].summary);
    assert!(
        d.findings[0]
            .summary
            .contains("while saving a checkpoint at iteration 500"),
        "{}",
        d.findings[0].summary
    );
}
