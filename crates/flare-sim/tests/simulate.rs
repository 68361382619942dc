use flare_model::{Op, OpKind};
use flare_sim::fault::FaultKind;
use flare_sim::{simulate, SimConfig};

fn iteration_ms(out: &flare_sim::SimOutput) -> Vec<f64> {
    let t = &out.trace;
    let n = t.ranks[0].iterations.len();
    (0..n)
        .map(|i| {
            let s = t
                .ranks
                .iter()
                .map(|r| r.iterations[i].start_ns)
                .min()
                .unwrap();
            let e = t
                .ranks
                .iter()
                .map(|r| r.iterations[i].end_ns.unwrap())
                .max()
                .unwrap();
            (e - s) as f64 / 1e6
        })
        .collect()
}

#[test]
fn healthy_job_completes_every_op_deterministically() {
    let mut cfg = SimConfig::for_scale(64);
    cfg.iterations = 6;
    cfg.seed = 7;
    let a = simulate(&cfg).unwrap();
    let b = simulate(&cfg).unwrap();
    assert_eq!(a.trace.ranks, b.trace.ranks, "same seed, same trace");
    for r in &a.trace.ranks {
        assert_eq!(r.iterations.len(), 6);
        assert!(
            r.ops.iter().all(|o| o.end().is_some()),
            "rank {} has an op in flight",
            r.rank
        );
    }
    let its = iteration_ms(&a);
    eprintln!("iteration ms: {its:?}");
    assert!(its.iter().all(|&t| t > 20.0 && t < 1000.0));
}

#[test]
fn collectives_end_after_their_last_member_arrives() {
    let mut cfg = SimConfig::for_scale(64);
    cfg.iterations = 2;
    let out = simulate(&cfg).unwrap();
    let t = &out.trace;
    let mut inst: std::collections::HashMap<(u32, u32), Vec<Op>> = Default::default();
    for r in &t.ranks {
        for o in r.ops.iter().filter(|o| o.kind.is_sync()) {
            inst.entry((o.comm, o.seq)).or_default().push(*o);
        }
    }
    for ((comm, _), ops) in &inst {
        assert_eq!(ops.len(), t.communicators[*comm as usize].members.len());
        let last = ops.iter().map(|o| o.start_ns).max().unwrap();
        assert!(ops.iter().all(|o| o.end_ns > last));
    }
    assert!(inst.values().flatten().any(|o| o.kind == OpKind::SendRecv));
}

#[test]
fn hang_leaves_ops_in_flight_and_the_culprit_absent() {
    let mut cfg = SimConfig::for_scale(64);
    cfg.iterations = 6;
    cfg.fault = FaultKind::Hang;
    let out = simulate(&cfg).unwrap();
    let culprit = out.truth.culprits[0].rank.unwrap();
    let in_flight: usize = out
        .trace
        .ranks
        .iter()
        .map(|r| r.ops.iter().filter(|o| o.end().is_none()).count())
        .sum();
    assert!(in_flight > 0);
    assert!(out.trace.ranks[culprit as usize]
        .ops
        .iter()
        .all(|o| o.end().is_some()));
}

#[test]
fn slow_gpu_slows_the_job() {
    let mut cfg = SimConfig::for_scale(64);
    cfg.iterations = 4;
    cfg.spike_probability = 0.0;
    let base: f64 = iteration_ms(&simulate(&cfg).unwrap()).iter().sum();
    cfg.fault = FaultKind::SlowGpu;
    let slow = simulate(&cfg).unwrap();
    let t: f64 = iteration_ms(&slow).iter().sum();
    eprintln!("{} : {base} -> {t}", slow.truth.description);
    assert!(t > base * 1.02);
}

#[test]
fn context_and_expert_parallel_jobs_run_to_completion() {
    let mut cfg = SimConfig::megatron(2, 2, 4);
    cfg.parallel = flare_model::ParallelConfig::new(2, 2, 2, 4, 2).unwrap();
    cfg.iterations = 3;
    let out = simulate(&cfg).unwrap();
    assert_eq!(out.trace.ranks.len(), 32);
    let kinds: std::collections::BTreeSet<OpKind> = out
        .trace
        .ranks
        .iter()
        .flat_map(|r| r.ops.iter().map(|o| o.kind))
        .collect();
    assert!(kinds.contains(&OpKind::AllToAll) && kinds.contains(&OpKind::AllGather));
    for r in &out.trace.ranks {
        assert_eq!(r.iterations.len(), 3);
        assert!(r.ops.iter().all(|o| o.end().is_some()));
    }
}

#[test]
fn ten_thousand_ranks_simulate_with_memory_proportional_to_output() {
    // Scale check without timing: 10,240 ranks x 2 iterations completes and every rank
    // has exactly its program's ops.
    let mut cfg = SimConfig::for_scale(10240);
    cfg.iterations = 2;
    let out = simulate(&cfg).unwrap();
    assert_eq!(out.trace.ranks.len(), 10240);
    let per_rank = out.trace.ranks[0].ops.len();
    assert!(per_rank > 50);
    assert!(out
        .trace
        .ranks
        .iter()
        .all(|r| r.ops.capacity() <= r.ops.len() * 2 + 16));
}
