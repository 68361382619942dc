//! Times the engine on a simulated job: digest per iteration, then the detectors.
//! `cargo run --release -p flare-engine --example engine_speed -- [ranks] [iterations]`

use flare_engine::{Engine, EngineConfig, JobContext};
use flare_sim::{fault::FaultKind, simulate, SimConfig};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ranks: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(8192);
    let iterations: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut cfg = SimConfig::for_scale(ranks);
    cfg.iterations = iterations;
    cfg.fault = FaultKind::SlowGpu;
    let t = Instant::now();
    let out = simulate(&cfg).expect("simulate");
    eprintln!(
        "simulated {} ops in {:.2} s",
        out.trace.op_count(),
        t.elapsed().as_secs_f64()
    );
    let ecfg = EngineConfig::default();
    let mut engine = Engine::new(
        JobContext::from_trace(&out.trace),
        ecfg.clone(),
        iterations as usize,
    );
    let t = Instant::now();
    engine.push(&out.trace).expect("push");
    let push = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let d = engine.diagnose();
    let det = t.elapsed().as_secs_f64();
    println!(
        "{} ranks x {} iterations: digest {:.3} s ({:.0} ns/op, {:.1} ms/iteration), detectors {:.3} s; top: {}",
        ranks,
        iterations,
        push,
        push * 1e9 / out.trace.op_count() as f64,
        push * 1e3 / iterations as f64,
        det,
        d.findings.first().map(|f| f.summary.as_str()).unwrap_or("-")
    );
}
