//! A seeded generator of realistic traces for the examples (not a simulator: a fixed
//! per-iteration schedule with jitter, enough to measure formats).

use flare_model::{
    ClusterTopology, Communicator, GroupKind, IterationSpan, JobInfo, Op, OpKind, RankTrace, Trace,
    TraceMeta,
};

/// SplitMix64: a tiny deterministic generator, enough for jitter.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-spread, spread].
    fn jitter(&mut self, spread: i64) -> i64 {
        (self.next() % (2 * spread as u64 + 1)) as i64 - spread
    }
}

/// One slot of the per-iteration schedule.
struct Slot {
    kind: OpKind,
    name: u32,
    dur_ns: i64,
    amount: u64,
    comm: u32,
}

pub fn build(ranks: u32, iterations: u32) -> Trace {
    let tp = 8u32;
    let n_tp = ranks / tp;
    // Communicators: one TP group per node, one DP group per TP index.
    let mut communicators = Vec::new();
    for g in 0..n_tp {
        communicators.push(Communicator {
            id: communicators.len() as u32,
            kind: GroupKind::Tp,
            members: (g * tp..(g + 1) * tp).collect(),
            label: format!("tp{g}"),
        });
    }
    for t in 0..tp {
        communicators.push(Communicator {
            id: communicators.len() as u32,
            kind: GroupKind::Dp,
            members: (0..n_tp).map(|g| g * tp + t).collect(),
            label: format!("dp{t}"),
        });
    }
    let names: Vec<String> = [
        "dataloader",
        "sm90_xmma_gemm_bf16bf16_bf16f32",
        "flash_fwd_kernel",
        "flash_bwd_kernel",
        "layer_norm_fwd",
        "layer_norm_bwd",
        "allreduce",
        "reduce_scatter",
        "all_gather",
        "optimizer_step",
        "gc",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();

    let mut schedule = Vec::new();
    schedule.push(Slot {
        kind: OpKind::DataLoader,
        name: 0,
        dur_ns: 2_000_000,
        amount: 0,
        comm: Op::NO_COMM,
    });
    for layer in 0..12u64 {
        for (name, dur) in [(1u32, 180_000i64), (2, 120_000), (4, 15_000)] {
            schedule.push(Slot {
                kind: OpKind::Compute,
                name,
                dur_ns: dur,
                amount: 4_000_000_000_000 + layer * 1_000_000,
                comm: Op::NO_COMM,
            });
        }
        schedule.push(Slot {
            kind: OpKind::AllReduce,
            name: 6,
            dur_ns: 90_000,
            amount: 16 << 20,
            comm: u32::MAX - 1, // TP group of the rank
        });
    }
    for layer in 0..12u64 {
        for (name, dur) in [(1u32, 360_000i64), (3, 250_000), (5, 20_000)] {
            schedule.push(Slot {
                kind: OpKind::Compute,
                name,
                dur_ns: dur,
                amount: 8_000_000_000_000 + layer * 1_000_000,
                comm: Op::NO_COMM,
            });
        }
        schedule.push(Slot {
            kind: OpKind::AllReduce,
            name: 6,
            dur_ns: 90_000,
            amount: 16 << 20,
            comm: u32::MAX - 1,
        });
    }
    for (kind, name) in [(OpKind::ReduceScatter, 7u32), (OpKind::AllGather, 8)] {
        schedule.push(Slot {
            kind,
            name,
            dur_ns: 3_000_000,
            amount: 512 << 20,
            comm: u32::MAX - 2, // DP group of the rank
        });
    }
    schedule.push(Slot {
        kind: OpKind::Optimizer,
        name: 9,
        dur_ns: 1_500_000,
        amount: 0,
        comm: Op::NO_COMM,
    });
    schedule.push(Slot {
        kind: OpKind::GarbageCollection,
        name: 10,
        dur_ns: 300_000,
        amount: 0,
        comm: Op::NO_COMM,
    });

    let mut rng = Rng(42);
    let mut out = Vec::with_capacity(ranks as usize);
    for rank in 0..ranks {
        let tp_comm = rank / tp;
        let dp_comm = n_tp + rank % tp;
        let mut ops = Vec::with_capacity(schedule.len() * iterations as usize);
        let mut spans = Vec::new();
        let mut seq = vec![0u32; communicators.len()];
        let mut t: i64 = 1_700_000_000_000_000_000 + rng.jitter(5_000);
        for it in 0..iterations {
            let it_start = t;
            for slot in &schedule {
                let comm = match slot.comm {
                    c if c == u32::MAX - 1 => tp_comm,
                    c if c == u32::MAX - 2 => dp_comm,
                    c => c,
                };
                let gap = 2_000 + rng.jitter(1_500);
                let start = t + gap;
                let dur = slot.dur_ns + rng.jitter(slot.dur_ns / 50);
                let issue = if slot.kind.is_host() {
                    Op::UNKNOWN
                } else {
                    start - 8_000 - rng.jitter(6_000)
                };
                let s = if comm != Op::NO_COMM {
                    seq[comm as usize] += 1;
                    seq[comm as usize] - 1
                } else {
                    0
                };
                ops.push(Op {
                    kind: slot.kind,
                    name: slot.name,
                    iteration: it,
                    comm,
                    seq: s,
                    peer: Op::NO_PEER,
                    start_ns: start,
                    end_ns: start + dur,
                    issue_ns: issue,
                    amount: slot.amount,
                });
                t = start + dur;
            }
            spans.push(IterationSpan {
                iteration: it,
                start_ns: it_start,
                end_ns: Some(t),
            });
        }
        out.push(RankTrace {
            rank,
            ops,
            iterations: spans,
        });
    }
    Trace {
        meta: TraceMeta {
            source: "native_speed example".into(),
            detail: format!("{ranks} ranks x {iterations} iterations"),
            missing_ranks: vec![],
            cpu_compute: false,
            notes: Vec::new(),
            host_calls: Default::default(),
        },
        job: JobInfo {
            job_id: "speed".into(),
            world_size: ranks,
            cluster: ClusterTopology::for_world(ranks, 8, 32),
            parallel: None,
            microbatches: None,
        },
        communicators,
        names,
        ranks: out,
    }
}
