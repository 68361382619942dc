//! Helpers shared by the integration tests.
#![allow(dead_code)]

use flare_model::{
    ClusterTopology, Communicator, GroupKind, IterationSpan, JobInfo, Op, OpKind, RankTrace, Trace,
    TraceMeta,
};
use std::path::PathBuf;

/// `../shared/data` of the project; tests that need it fail with a clear message if absent.
pub fn data_dir() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"));
    assert!(
        p.is_dir(),
        "the shared test data is missing: expected the directory {} (the project's ../shared/data)",
        p.display()
    );
    p
}

pub fn kineto_file(name: &str) -> PathBuf {
    let p = data_dir().join("kineto").join(name);
    assert!(p.is_file(), "missing test data file {}", p.display());
    p
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "flare-import-test-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("create temp dir");
    p
}

pub fn op(kind: OpKind, name: u32, iteration: u32, start: i64, dur: i64) -> Op {
    Op {
        kind,
        name,
        iteration,
        comm: Op::NO_COMM,
        seq: 0,
        peer: Op::NO_PEER,
        start_ns: start,
        end_ns: start + dur,
        issue_ns: Op::UNKNOWN,
        amount: 0,
    }
}

/// A small hand-built job: world of 4 ranks, ranks 0..3 present (rank 3 missing), every op
/// kind, P2P ops with peers, an in-flight op, an unknown issue time, an odd byte count, an
/// unfinished iteration, and nanosecond-precise times far from zero.
pub fn hand_built() -> Trace {
    let base: i64 = 1_716_423_322_416_788_066;
    let names: Vec<String> = [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
        "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>",
        "allreduce",
        "dataloader",
        "gc",
        "optimizer",
        "checkpoint",
        "host:barrier_wait \"quoted\"\n",
        "send_forward",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let communicators = vec![
        Communicator {
            id: 0,
            kind: GroupKind::World,
            members: vec![0, 1, 2, 3],
            label: "default_pg".into(),
        },
        Communicator {
            id: 1,
            kind: GroupKind::Tp,
            members: vec![0, 1],
            label: "tp0".into(),
        },
        Communicator {
            id: 2,
            kind: GroupKind::Pp,
            members: vec![1, 2],
            label: "pp1-2".into(),
        },
        Communicator {
            id: 3,
            kind: GroupKind::Dp,
            members: vec![0, 2],
            label: "dp\"0\"".into(),
        },
    ];
    let mut ranks = Vec::new();
    for rank in 0..3u32 {
        let t0 = base + rank as i64 * 1_013;
        let mut ops = Vec::new();
        let mut iterations = Vec::new();
        let mut seq = [0u32; 4];
        for it in 0..2u32 {
            let s = t0 + it as i64 * 10_000_000;
            iterations.push(IterationSpan {
                iteration: 100 + it,
                start_ns: s,
                end_ns: if rank == 2 && it == 1 {
                    None
                } else {
                    Some(s + 9_999_001)
                },
            });
            let mut t = s + 17;
            let mut push = |mut o: Op, issue_lag: Option<i64>, ops: &mut Vec<Op>| {
                o.start_ns = t;
                o.end_ns = if o.end_ns == Op::IN_FLIGHT {
                    Op::IN_FLIGHT
                } else {
                    t + 123_457 + ops.len() as i64
                };
                o.issue_ns = issue_lag.map(|l| t - l).unwrap_or(Op::UNKNOWN);
                t += 200_003;
                ops.push(o);
            };
            // Host phases are issued when they start, as the simulator and Kineto see them.
            push(op(OpKind::DataLoader, 3, 100 + it, 0, 0), Some(0), &mut ops);
            let mut gemm = op(OpKind::Compute, 0, 100 + it, 0, 0);
            gemm.amount = 1_234_567_890_123;
            push(gemm, Some(7_001), &mut ops);
            push(op(OpKind::Compute, 1, 100 + it, 0, 0), None, &mut ops);
            let mut sync = |kind: OpKind, comm: u32, amount: u64, peer: u32| {
                let mut o = op(kind, 2, 100 + it, 0, 0);
                o.comm = comm;
                o.seq = seq[comm as usize];
                seq[comm as usize] += 1;
                o.amount = amount;
                o.peer = peer;
                o
            };
            if rank < 2 {
                push(
                    sync(OpKind::AllReduce, 1, 4 << 20, Op::NO_PEER),
                    Some(3_333),
                    &mut ops,
                );
                push(
                    sync(OpKind::AllGather, 1, 2 << 20, Op::NO_PEER),
                    Some(3_334),
                    &mut ops,
                );
                push(
                    sync(OpKind::ReduceScatter, 1, 6 << 20, Op::NO_PEER),
                    Some(3_335),
                    &mut ops,
                );
            }
            push(
                sync(OpKind::AllToAll, 0, 1 << 20, Op::NO_PEER),
                Some(1_000),
                &mut ops,
            );
            push(
                sync(OpKind::Broadcast, 0, 1001, Op::NO_PEER),
                Some(1_001),
                &mut ops,
            );
            push(
                sync(OpKind::Reduce, 0, 64, Op::NO_PEER),
                Some(1_002),
                &mut ops,
            );
            push(
                sync(OpKind::Barrier, 0, 0, Op::NO_PEER),
                Some(1_003),
                &mut ops,
            );
            if rank == 1 {
                push(sync(OpKind::Send, 2, 8 << 20, 2), Some(2_000), &mut ops);
                push(sync(OpKind::SendRecv, 2, 8 << 20, 2), Some(2_001), &mut ops);
            }
            if rank == 2 {
                push(sync(OpKind::Recv, 2, 8 << 20, 1), Some(2_000), &mut ops);
                push(sync(OpKind::SendRecv, 2, 8 << 20, 1), Some(2_001), &mut ops);
            }
            if rank != 1 {
                push(
                    sync(OpKind::AllReduce, 3, 12_345, Op::NO_PEER),
                    Some(999),
                    &mut ops,
                );
            }
            push(
                op(OpKind::GarbageCollection, 4, 100 + it, 0, 0),
                Some(0),
                &mut ops,
            );
            push(op(OpKind::Optimizer, 5, 100 + it, 0, 0), Some(0), &mut ops);
            push(op(OpKind::Checkpoint, 6, 100 + it, 0, 0), Some(0), &mut ops);
            push(op(OpKind::HostOther, 7, 100 + it, 0, 0), Some(0), &mut ops);
            if rank == 2 && it == 1 {
                // Hung: the last collective never ended.
                let mut hung = sync(OpKind::AllReduce, 3, 12_345, Op::NO_PEER);
                hung.end_ns = Op::IN_FLIGHT;
                push(hung, Some(500), &mut ops);
            }
        }
        ranks.push(RankTrace {
            rank,
            ops,
            iterations,
        });
    }
    Trace {
        meta: TraceMeta {
            source: "hand".into(),
            detail: "hand-built".into(),
            missing_ranks: vec![3],
            cpu_compute: false,
            notes: Vec::new(),
            host_calls: Default::default(),
        },
        job: JobInfo {
            job_id: "hand".into(),
            world_size: 4,
            cluster: ClusterTopology::for_world(4, 8, 32),
            parallel: None,
            microbatches: None,
        },
        communicators,
        names,
        ranks,
    }
}
