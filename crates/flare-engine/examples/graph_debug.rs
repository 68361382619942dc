//! Prints what the graph search blamed per iteration (development aid).
use flare_engine::{Engine, EngineConfig, JobContext};
use flare_sim::{fault::FaultKind, simulate, SimConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ranks: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64);
    let fault = FaultKind::parse(args.get(2).map(String::as_str).unwrap_or("slow_gpu")).unwrap();
    let seed: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut cfg = SimConfig::for_scale(ranks);
    cfg.iterations = 10;
    cfg.fault = fault;
    cfg.seed = seed;
    let out = simulate(&cfg).unwrap();
    println!("truth: {}", out.truth.description);
    let mut e = Engine::new(
        JobContext::from_trace(&out.trace),
        EngineConfig::default(),
        10,
    );
    e.push(&out.trace).unwrap();
    for d in e.digests() {
        let mut b = d.blame.clone();
        b.sort_by(|x, y| y.ns.total_cmp(&x.ns));
        println!(
            "it {} dur {:.1} ms: {} abnormal of {} scored, drift {:.2}; top blame {:?}; examples {:?}",
            d.iteration,
            d.duration_ns.unwrap_or(0.0) / 1e6,
            d.abnormal_groups,
            d.scored_groups,
            d.drift,
            &b[..b.len().min(4)],
            &d.abnormal_examples[..d.abnormal_examples.len().min(3)]
        );
    }
    let d = e.diagnose();
    for f in &d.findings {
        println!(
            "{} {} {:.2}: {}",
            f.detector,
            f.kind.as_str(),
            f.confidence,
            f.summary
        );
    }
}
