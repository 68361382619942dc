//! The Kineto reader on real torch.profiler traces (HolisticTraceAnalysis test data, MIT).

mod common;

use common::{kineto_file, temp_dir};
use flare_import::{read_kineto_dir_with_stats, read_kineto_files_with_stats, KinetoOptions};
use flare_model::{GroupKind, Op, OpKind};

#[test]
fn nccl_data_has_collectives_with_process_group_metadata() {
    let (trace, stats) = read_kineto_files_with_stats(
        &[kineto_file("nccl_data.json.gz")],
        &KinetoOptions::default(),
    )
    .expect("nccl_data.json.gz imports");
    assert_eq!(stats.files, 1);
    assert_eq!(stats.nccl_kernels, 21);
    assert_eq!(stats.kernels, 2700);
    assert_eq!(stats.nccl_unrecognised, 0);
    assert_eq!(stats.kernels_without_launch, 0);
    assert_eq!(stats.skipped.get("gpu_memcpy"), Some(&960));
    assert_eq!(stats.skipped.get("gpu_memset"), Some(&114));
    // Every event is either imported or counted.
    let skipped: u64 = stats.skipped.values().sum();
    assert_eq!(
        stats.events,
        skipped
            + stats.kernels
            + stats.profiler_steps
            + stats.host_ops
            + stats.nested_host_spans
            + stats.launch_calls
            + stats.runtime_host_calls,
    );
    assert_eq!(
        stats.launch_calls,
        2550 + 150,
        "cudaLaunchKernel and cudaLaunchKernelExC"
    );

    // The runtime calls the ops do not show: syncs and memory management.
    let calls: std::collections::BTreeMap<(flare_model::HostCallKind, &str), u64> = trace
        .meta
        .host_calls
        .counts
        .iter()
        .fold(Default::default(), |mut m, c| {
            *m.entry((c.kind, c.name.as_str())).or_default() += c.count;
            m
        });
    use flare_model::HostCallKind::Synchronize;
    assert_eq!(
        calls.into_iter().collect::<Vec<_>>(),
        [
            ((Synchronize, "cudaDeviceSynchronize"), 1),
            ((Synchronize, "cudaEventSynchronize"), 24)
        ]
    );
    assert_eq!(stats.runtime_host_calls, 25);
    assert_eq!(trace.job.world_size, 2);
    assert_eq!(trace.meta.missing_ranks, vec![1]);
    assert_eq!(trace.meta.source, "kineto");
    assert_eq!(trace.ranks.len(), 1);
    assert_eq!(trace.communicators.len(), 1);
    let c = &trace.communicators[0];
    assert_eq!(c.members, vec![0, 1]);
    assert_eq!(c.kind, GroupKind::World);
    assert_eq!(c.label, "default_pg");

    let r = &trace.ranks[0];
    assert_eq!(r.rank, 0);
    let its: Vec<u32> = r.iterations.iter().map(|s| s.iteration).collect();
    assert_eq!(its, vec![4, 5, 6]);
    // ProfilerStep#4: ts 4458676416788.066 us, dur 222442.191 us, plus baseTimeNanoseconds.
    let base = 1_711_964_646_000_000_000i64;
    assert_eq!(r.iterations[0].start_ns, base + 4_458_676_416_788_066);
    assert_eq!(
        r.iterations[0].end_ns,
        Some(base + 4_458_676_416_788_066 + 222_442_191)
    );

    let sync: Vec<&Op> = r.ops.iter().filter(|o| o.kind.is_sync()).collect();
    assert_eq!(sync.len(), 21);
    assert_eq!(
        sync.iter().filter(|o| o.kind == OpKind::AllReduce).count(),
        15
    );
    assert_eq!(
        sync.iter().filter(|o| o.kind == OpKind::Broadcast).count(),
        6
    );
    for (i, o) in sync.iter().enumerate() {
        assert_eq!(o.comm, 0);
        assert_eq!(o.seq, i as u32, "seq is the ordinal on the communicator");
        assert!(o.issue().is_some_and(|t| t <= o.start_ns));
        assert_eq!(o.peer, Op::NO_PEER);
    }
    // 7 collectives per step, assigned through their launch times.
    for it in [4, 5, 6] {
        assert_eq!(sync.iter().filter(|o| o.iteration == it).count(), 7);
    }
    // The first all-reduce: In msg nelems 2049000 floats.
    let first_ar = sync.iter().find(|o| o.kind == OpKind::AllReduce).unwrap();
    assert_eq!(first_ar.amount, 2_049_000 * 4);
    // ts 4458677009853.422 us, dur 2636.669 us: exact to the nanosecond.
    let late = sync
        .iter()
        .find(|o| o.start_ns == base + 4_458_677_009_853_422)
        .expect("the all-reduce at 4458677009853.422 us");
    assert_eq!(late.duration(), Some(2_636_669));

    assert!(r.ops.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
    let host: Vec<&Op> = r.ops.iter().filter(|o| o.kind.is_host()).collect();
    assert_eq!(host.len(), 6);
    assert!(host.iter().all(|o| o.kind == OpKind::Optimizer));
    let computes = r.ops.iter().filter(|o| o.kind == OpKind::Compute).count();
    assert_eq!(computes, 2700 - 21);
}

#[test]
fn sampled_ranks_have_send_recv_without_metadata() {
    let dir = temp_dir("sampled");
    for name in ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"] {
        std::fs::copy(kineto_file(name), dir.join(name)).unwrap();
    }
    let (trace, stats) =
        read_kineto_dir_with_stats(&dir, &KinetoOptions::default()).expect("sampled ranks import");
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(stats.files, 2);
    assert_eq!(stats.nccl_kernels, 20);
    assert_eq!(stats.synthetic_communicators, 1);
    assert_eq!(trace.job.world_size, 128);
    assert_eq!(trace.job.cluster.nodes, 16);
    assert_eq!(trace.meta.missing_ranks, (2..128).collect::<Vec<u32>>());
    assert_eq!(trace.communicators.len(), 1);
    let c = &trace.communicators[0];
    assert_eq!(c.members, vec![0, 1]);
    assert_eq!(c.kind, GroupKind::Other);
    assert_eq!(c.label, "unknown:send_recv");

    assert_eq!(
        trace.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
        vec![0, 1]
    );
    for r in &trace.ranks {
        let its: Vec<u32> = r.iterations.iter().map(|s| s.iteration).collect();
        assert_eq!(its, vec![551, 552]);
        let sr: Vec<&Op> = r.ops.iter().filter(|o| o.kind.is_sync()).collect();
        assert_eq!(sr.len(), 10, "rank {}", r.rank);
        for (i, o) in sr.iter().enumerate() {
            assert_eq!(o.kind, OpKind::SendRecv);
            assert_eq!(o.comm, 0);
            assert_eq!(o.seq, i as u32);
            assert_eq!(o.peer, Op::NO_PEER, "no metadata says who the peer is");
            assert_eq!(o.amount, 0, "no metadata gives the size");
            assert!(o.issue().is_some());
        }
    }
}

#[test]
fn real_files_read_through_the_writer_and_back() {
    // Real trace -> Flare writer -> reader: the same ops come back.
    let opts = KinetoOptions::default();
    let (trace, _) =
        read_kineto_files_with_stats(&[kineto_file("nccl_data.json.gz")], &opts).unwrap();
    let mut buf = Vec::new();
    flare_import::write_kineto_rank(&trace, 0, &mut buf).unwrap();
    let (back, _) = flare_import::read_kineto_bytes("rank0.json", &buf, &opts).unwrap();
    assert_eq!(back.ranks.len(), 1);
    assert_eq!(back.communicators, trace.communicators);
    assert_eq!(back.ranks[0].iterations, trace.ranks[0].iterations);
    let key = |o: &Op| {
        (
            o.start_ns, o.kind, o.end_ns, o.issue_ns, o.comm, o.seq, o.amount,
        )
    };
    let mut a: Vec<_> = trace.ranks[0].ops.iter().map(key).collect();
    let mut b: Vec<_> = back.ranks[0].ops.iter().map(key).collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// A real H100 trace (tests/fixtures/real_gpu): cuBLAS's kernels carry no `FLOPs`, so each
/// GEMM kernel takes those of the `aten::addmm` / `aten::mm` that launched it, and nothing
/// else does (autocast's casts under `aten::linear`, elementwise kernels).
#[test]
fn gpu_gemm_kernels_take_their_flops_from_the_gemm_op_that_launched_them() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real_gpu/h100_regressions/baseline");
    let (trace, stats) = read_kineto_dir_with_stats(&dir, &KinetoOptions::default())
        .expect("the H100 trace imports");
    let with_flops: Vec<&Op> = trace.ranks[0]
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Compute && o.amount > 0)
        .collect();
    assert_eq!(with_flops.len() as u64, stats.kernel_flops_from_gemm_ops);
    // 4 forward and 7 backward GEMMs a step, over the profiled steps.
    assert!(with_flops.len() >= 4 * 11, "{}", with_flops.len());
    assert_eq!(with_flops.len() % 11, 0, "{}", with_flops.len());
    for o in &with_flops {
        let name = trace.name(o.name);
        assert!(name.starts_with("nvjet_sm90"), "{name}");
        // 2 x 4096^3: every GEMM of this model is 4096 x 4096 x 4096.
        assert_eq!(o.amount, 2 * 4096u64.pow(3), "{name}");
    }
}

/// The same H100 trace: each GEMM op's host call carries the device time of the kernels it
/// launched and its FLOPs, so each shape's TFLOPS can be read whatever kernel ran it.
#[test]
fn gpu_gemm_calls_carry_their_kernels_device_time() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real_gpu/h100_regressions/baseline");
    let (trace, _) = read_kineto_dir_with_stats(&dir, &KinetoOptions::default())
        .expect("the H100 trace imports");
    let gemms: Vec<_> = trace
        .meta
        .host_calls
        .counts
        .iter()
        .filter(|c| c.kind == flare_model::HostCallKind::Gemm && c.device_ns > 0)
        .collect();
    let names: std::collections::BTreeSet<&str> = gemms.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "aten::addmm [[4096],[4096,4096],[4096,4096],[],[]]",
            "aten::mm [[4096,4096],[4096,4096]]"
        ],
        "the wrappers (aten::linear) launch no GEMM kernel"
    );
    for c in &gemms {
        assert_eq!(c.flops, c.count * 2 * 4096u64.pow(3), "{c:?}");
        // the kernels ran at 700-900 TFLOPS on this H100 (the nvjet kernels' own rate)
        let tflops = c.flops as f64 / (c.device_ns as f64 / 1e9) / 1e12;
        assert!((700.0..900.0).contains(&tflops), "{c:?}: {tflops}");
    }
}
