//! Quick check of the native format's size and speed on a realistic synthetic trace.
//!
//! ```text
//! cargo run --release -p flare-import --example native_speed -- [ranks] [iterations]
//! ```
//!
//! Defaults: 8,192 ranks x 10 iterations x 100 ops (about 8.2 million ops), the size the
//! format is designed for. Prints bytes per op and write/read throughput (single thread).

use flare_import::native::{read_native, write_native};
use flare_model::{
    ClusterTopology, Communicator, GroupKind, IterationSpan, JobInfo, Op, OpKind, RankTrace,
    Trace, TraceMeta,
};
use std::time::Instant;

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

fn build(ranks: u32, iterations: u32) -> Trace {
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ranks: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8192);
    let iterations: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let t0 = Instant::now();
    let trace = build(ranks, iterations);
    let n_ops = trace.op_count();
    let model_bytes = n_ops * std::mem::size_of::<Op>();
    println!(
        "built {ranks} ranks x {iterations} iterations = {n_ops} ops in {:.2?}",
        t0.elapsed()
    );

    let t1 = Instant::now();
    let mut buf = Vec::with_capacity(n_ops * 12);
    write_native(&trace, &mut buf).expect("write");
    let w = t1.elapsed().as_secs_f64();

    let t2 = Instant::now();
    let back = read_native(&buf[..], "memory").expect("read");
    let r = t2.elapsed().as_secs_f64();
    lz4_only(&buf);
    assert!(back == trace, "round trip differs");

    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "file: {:.1} MB, {:.2} bytes/op",
        mb(buf.len()),
        buf.len() as f64 / n_ops as f64
    );
    println!(
        "write: {w:.2} s, {:.1} M ops/s, {:.0} MB/s of file, {:.0} MB/s of in-memory ops",
        n_ops as f64 / w / 1e6,
        mb(buf.len()) / w,
        mb(model_bytes) / w
    );
    println!(
        "read:  {r:.2} s, {:.1} M ops/s, {:.0} MB/s of file, {:.0} MB/s of in-memory ops",
        n_ops as f64 / r / 1e6,
        mb(buf.len()) / r,
        mb(model_bytes) / r
    );
}

#[allow(dead_code)]
fn lz4_only(buf: &[u8]) {
    use std::io::Read;
    let t = Instant::now();
    let mut out = Vec::new();
    lz4_flex::frame::FrameDecoder::new(&buf[12..])
        .read_to_end(&mut out)
        .unwrap();
    println!(
        "lz4 alone: {:.2?} for {:.1} MB payload",
        t.elapsed(),
        out.len() as f64 / 1e6
    );
}
