//! A traced process for trying the agent by hand: it runs a fake training loop through
//! the real process-wide tracer (forward, an all-reduce, backward per iteration) and can
//! hang inside an all-reduce to exercise the watchdog.
//!
//! ```text
//! cargo run --release -p flare-agent --example synthetic_rank -- \
//!     --shm-dir /tmp/flare-shm --job demo --rank 0 --world 2 --iters 200 --hang-at 50
//! flare agent --shm-dir /tmp/flare-shm --job demo --hang-timeout 2s --out /tmp/flare-out
//! ```

use flare_model::OpKind;
use flare_tracer::{Config, SpanArgs};
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    let mut cfg = Config::default();
    let mut iters = 100u64;
    let mut step_ms = 20u64;
    let mut hang_at: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--shm-dir" => cfg.shm_dir = PathBuf::from(val()),
            "--job" => cfg.job_id = val(),
            "--rank" => cfg.rank = val().parse().expect("--rank N"),
            "--world" => cfg.world_size = val().parse().expect("--world N"),
            "--iters" => iters = val().parse().expect("--iters N"),
            "--step-ms" => step_ms = val().parse().expect("--step-ms N"),
            "--hang-at" => hang_at = Some(val().parse().expect("--hang-at N")),
            other => panic!("unknown argument {other}"),
        }
    }
    cfg.local_rank = cfg.rank;
    std::fs::create_dir_all(&cfg.shm_dir).expect("creating the shm dir");
    let path = flare_tracer::init(cfg.clone()).expect("tracer init");
    eprintln!("rank {} tracing into {}", cfg.rank, path.display());
    let fwd = flare_tracer::intern("forward");
    let bwd = flare_tracer::intern("backward");
    let ar = flare_tracer::intern("all_reduce");
    let dp = flare_tracer::intern("dp");
    let flops = SpanArgs {
        amount: 50_000_000_000,
        ..SpanArgs::default()
    };
    let phase = Duration::from_millis(step_ms / 4);
    for i in 0..iters {
        flare_tracer::step(i);
        flare_tracer::begin(fwd, OpKind::Compute, &flops);
        std::thread::sleep(phase);
        flare_tracer::end(fwd, OpKind::Compute);
        let comm = SpanArgs {
            amount: 256 << 20,
            group: dp,
            seq: i as u32,
            group_size: cfg.world_size,
            issue_latency_ns: 15_000,
        };
        flare_tracer::begin(ar, OpKind::AllReduce, &comm);
        if hang_at == Some(i) {
            eprintln!("rank {} hangs in all_reduce (seq {i})", cfg.rank);
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        std::thread::sleep(phase);
        flare_tracer::end(ar, OpKind::AllReduce);
        flare_tracer::begin(bwd, OpKind::Compute, &flops);
        std::thread::sleep(phase * 2);
        flare_tracer::end(bwd, OpKind::Compute);
    }
    flare_tracer::shutdown().expect("tracer shutdown");
}
