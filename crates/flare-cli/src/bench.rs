//! `flare bench`: figures, not assertions. `accuracy` runs seeded scenarios (every fault
//! kind at several scales plus fault-free runs, with seeds disjoint from the unit tests')
//! and prints top-1/top-3 localization accuracy, the false-positive rate and latency;
//! `speed` times simulation, the native format and diagnosis at scale; `overhead` measures
//! what always-on tracing costs a loop of spans and what the agent sends for it.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use flare_engine::{diagnose, EngineConfig};
use flare_sim::fault::FaultKind;
use flare_sim::{simulate, SimConfig};
use serde_json::json;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: Which,
}

#[derive(Subcommand)]
pub enum Which {
    /// Localization accuracy over seeded simulated scenarios.
    Accuracy(AccuracyArgs),
    /// Simulation, native format and diagnosis speed at scale.
    Speed(SpeedArgs),
    /// What tracing costs a loop of spans with real work, and the summary bytes sent.
    Overhead(crate::overhead::OverheadArgs),
}

#[derive(Args)]
pub struct AccuracyArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Scales (ranks) to run.
    #[arg(long, value_delimiter = ',', default_value = "64,512,2048,8192")]
    pub scales: Vec<u32>,
    /// Runs per fault kind and scale (default: 12 at <=512 ranks, 6 at 2,048, 3 at 8,192).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Iterations per scenario.
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// Worker threads.
    #[arg(long, default_value_t = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))]
    pub threads: usize,
}

#[derive(Args)]
pub struct SpeedArgs {
    /// Ranks of the streamed job (simulated iteration by iteration, each iteration
    /// pushed into the streaming engine and the window re-diagnosed).
    #[arg(long, default_value_t = 10240)]
    pub ranks: u32,
    /// Iterations of the streamed job.
    #[arg(long, default_value_t = 20)]
    pub iterations: u32,
    /// Iterations the streaming engine keeps (its window).
    #[arg(long, default_value_t = 20)]
    pub window: u32,
    /// Ranks and iterations of the batch run: simulated, written to a native file, read
    /// back and diagnosed as `flare diagnose` does (0 skips it).
    #[arg(long, default_value_t = 8192)]
    pub batch_ranks: u32,
    #[arg(long, default_value_t = 10)]
    pub batch_iterations: u32,
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    match a.which {
        Which::Accuracy(a) => accuracy(a),
        Which::Speed(a) => speed(a),
        Which::Overhead(a) => crate::overhead::overhead(a),
    }
}

#[derive(Clone, Debug)]
struct Scenario {
    kind: FaultKind,
    scale: u32,
    seed: u64,
}

#[derive(Clone, Debug)]
struct Outcome {
    sc: Scenario,
    top1: bool,
    top3: bool,
    false_positive: bool,
    latency_ms: f64,
    got: String,
    truth: String,
}

fn runs_for(scale: u32, kind: FaultKind, runs: Option<usize>) -> usize {
    let base = runs.unwrap_or(match scale {
        0..=512 => 12,
        513..=2048 => 6,
        _ => 3,
    });
    if kind == FaultKind::None {
        // Fault-free runs measure the false-positive rate: more of them.
        base * 3
    } else {
        base
    }
}

/// Seeds from 1,000,000 up: the unit and scenario tests use seeds below 1,000.
fn bench_seed(kind: FaultKind, scale: u32, i: usize) -> u64 {
    1_000_000 + (kind as u64) * 100_000 + (scale as u64 % 10_000) * 10 + i as u64 * 7919
}

fn run_one(sc: &Scenario, iterations: u32) -> Result<Outcome> {
    let mut cfg = SimConfig::for_scale(sc.scale);
    cfg.iterations = iterations;
    cfg.seed = sc.seed;
    cfg.fault = sc.kind;
    let out = simulate(&cfg)?;
    let t0 = Instant::now();
    let d = diagnose(&out.trace, &EngineConfig::default());
    let latency_ms = t0.elapsed().as_secs_f64() * 1e3;
    let localized: Vec<_> = d.localized().collect();
    let flat: Vec<_> = localized
        .iter()
        .flat_map(|f| f.culprits.iter().map(move |c| (f.kind, c)))
        .take(3)
        .collect();
    let (top1, top3, false_positive) = if sc.kind == FaultKind::None {
        let fp = !localized.is_empty();
        (!fp, !fp, fp)
    } else {
        let first = localized.first().map(|f| (f.kind, &f.culprits[0]));
        (
            first.is_some_and(|(k, c)| out.truth.matches(k, c)),
            flat.iter().any(|(k, c)| out.truth.matches(*k, c)),
            false,
        )
    };
    Ok(Outcome {
        sc: sc.clone(),
        top1,
        top3,
        false_positive,
        latency_ms,
        got: localized
            .first()
            .map(|f| format!("{}: {}", f.kind.as_str(), f.summary))
            .unwrap_or_else(|| "nothing localized".into()),
        truth: out.truth.description,
    })
}

#[derive(Default, Clone)]
struct Tally {
    n: usize,
    top1: usize,
    top3: usize,
}

impl Tally {
    fn add(&mut self, o: &Outcome) {
        self.n += 1;
        self.top1 += o.top1 as usize;
        self.top3 += o.top3 as usize;
    }
    fn json(&self) -> serde_json::Value {
        json!({"top1": self.rate(self.top1), "top3": self.rate(self.top3), "scenarios": self.n})
    }
    /// A table cell: `top-1%/top-3% (scenarios)`, with `decimals` digits.
    fn cell(&self, decimals: usize) -> String {
        format!(
            "{:>21}",
            format!(
                "{:.*}%/{:.*}% ({})",
                decimals,
                self.rate(self.top1) * 100.0,
                decimals,
                self.rate(self.top3) * 100.0,
                self.n
            )
        )
    }
    fn rate(&self, k: usize) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            k as f64 / self.n as f64
        }
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn accuracy(a: AccuracyArgs) -> Result<ExitCode> {
    let mut scenarios = Vec::new();
    for &scale in &a.scales {
        for kind in FaultKind::ALL {
            for i in 0..runs_for(scale, kind, a.runs) {
                scenarios.push(Scenario {
                    kind,
                    scale,
                    seed: bench_seed(kind, scale, i),
                });
            }
        }
    }
    // Big scenarios first so the threads finish together.
    scenarios.sort_by_key(|s| std::cmp::Reverse(s.scale));
    let bar = crate::present::bar(scenarios.len() as u64, "scenarios");
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let wall = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..a.threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(sc) = scenarios.get(i) else { break };
                match run_one(sc, a.iterations) {
                    Ok(o) => results.lock().expect("lock").push(o),
                    Err(e) => errors.lock().expect("lock").push(format!("{sc:?}: {e:#}")),
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let errors = errors.into_inner().expect("lock");
    if !errors.is_empty() {
        anyhow::bail!("scenarios failed: {errors:#?}");
    }
    let results = results.into_inner().expect("lock");
    let mut overall = Tally::default();
    let mut by_scale: BTreeMap<u32, Tally> = BTreeMap::new();
    let mut by_fault: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut by_both: BTreeMap<(&str, u32), Tally> = BTreeMap::new();
    let (mut clean, mut fps) = (0, 0);
    let mut lat_by_scale: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for o in &results {
        lat_by_scale
            .entry(o.sc.scale)
            .or_default()
            .push(o.latency_ms);
        if o.sc.kind == FaultKind::None {
            clean += 1;
            fps += o.false_positive as usize;
            continue;
        }
        overall.add(o);
        by_scale.entry(o.sc.scale).or_default().add(o);
        by_fault.entry(o.sc.kind.name()).or_default().add(o);
        by_both
            .entry((o.sc.kind.name(), o.sc.scale))
            .or_default()
            .add(o);
    }
    let fp_rate = if clean == 0 {
        0.0
    } else {
        fps as f64 / clean as f64
    };
    let mut all_lat: Vec<f64> = results.iter().map(|o| o.latency_ms).collect();
    let latency = json!({
        "p50": percentile(&mut all_lat.clone(), 0.5),
        "p95": percentile(&mut all_lat, 0.95),
        "by_scale": lat_by_scale.iter_mut().map(|(k, v)| (k.to_string(), json!({"p50": percentile(v, 0.5), "max": percentile(v, 1.0)}))).collect::<serde_json::Map<_, _>>(),
    });
    if a.json {
        let mut overall_json = overall.json();
        overall_json["false_positive_rate"] = json!(fp_rate);
        overall_json["fault_free_scenarios"] = json!(clean);
        let doc = json!({
            "overall": overall_json,
            "by_scale": by_scale.iter().map(|(k, t)| (k.to_string(), t.json())).collect::<serde_json::Map<_, _>>(),
            "by_fault": by_fault.iter().map(|(k, t)| (k.to_string(), t.json())).collect::<serde_json::Map<_, _>>(),
            "latency_ms": latency,
            "iterations": a.iterations,
            "wall_s": wall.elapsed().as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Flare localization accuracy: {} scenarios ({} with a fault, {} fault-free), {} iterations each, {:.0} s",
        results.len(),
        overall.n,
        clean,
        a.iterations,
        wall.elapsed().as_secs_f64()
    );
    println!(
        "\n{:<20}{}{:>21}",
        "fault \\ ranks",
        a.scales
            .iter()
            .map(|s| format!("{:>21}", s))
            .collect::<String>(),
        "all"
    );
    for kind in FaultKind::ALL.iter().filter(|k| **k != FaultKind::None) {
        let mut line = format!("{:<20}", kind.name());
        for &s in &a.scales {
            let t = by_both.get(&(kind.name(), s)).cloned().unwrap_or_default();
            line.push_str(&t.cell(0));
        }
        let t = by_fault.get(kind.name()).cloned().unwrap_or_default();
        line.push_str(&t.cell(0));
        println!("{line}");
    }
    let mut line = format!("{:<20}", "all faults");
    for &s in &a.scales {
        let t = by_scale.get(&s).cloned().unwrap_or_default();
        line.push_str(&t.cell(1));
    }
    line.push_str(&format!(
        "{:>21}",
        format!(
            "{:.1}%/{:.1}%",
            overall.rate(overall.top1) * 100.0,
            overall.rate(overall.top3) * 100.0
        )
    ));
    println!("{line}\n(cells: top-1 / top-3 (scenarios))");
    println!(
        "\nfalse positives on fault-free runs: {fps}/{clean} = {:.1}%",
        fp_rate * 100.0
    );
    println!("diagnosis latency: {latency}");
    let misses: Vec<&Outcome> = results.iter().filter(|o| !o.top1).collect();
    if !misses.is_empty() {
        println!("\nmisses (top-1):");
        for o in misses.iter().take(30) {
            println!(
                "  {} {} ranks seed {}: truth: {} | got: {}",
                o.sc.kind.name(),
                o.sc.scale,
                o.sc.seed,
                o.truth,
                o.got
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Peak resident memory of this process so far, in MB (Linux), for the figures.
fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn speed(a: SpeedArgs) -> Result<ExitCode> {
    // 1. Streaming: each iteration is digested as soon as the simulator has it, then the
    //    window is localized again, as a live deployment would.
    let mut cfg = SimConfig::for_scale(a.ranks);
    cfg.iterations = a.iterations;
    cfg.fault = FaultKind::SlowGpu;
    let wall = Instant::now();
    let mut engine: Option<flare_engine::Engine> = None;
    let mut push_ms = Vec::new();
    let mut detect_ms = Vec::new();
    let mut phases: Vec<flare_engine::digest::PhaseTimes> = Vec::new();
    let mut ops = 0usize;
    let mut last = None;
    let mut failed = None;
    flare_sim::simulate_streaming(&cfg, |event| match event {
        flare_sim::SimEvent::Start(job) => {
            let ctx = flare_engine::JobContext::new(
                job.job.clone(),
                job.meta.clone(),
                job.communicators.clone(),
                job.names.clone(),
                (0..job.job.world_size).collect(),
            );
            engine = Some(flare_engine::Engine::new(
                ctx,
                EngineConfig::default(),
                a.window as usize,
            ));
        }
        flare_sim::SimEvent::Iteration(chunk) => {
            let Some(engine) = engine.as_mut() else {
                return;
            };
            ops += chunk.ranks.iter().map(|r| r.ops.len()).sum::<usize>();
            let t = Instant::now();
            if let Err(e) = engine.push_ranks(&chunk.ranks, &[chunk.iteration]) {
                failed = Some(e);
                return;
            }
            push_ms.push(t.elapsed().as_secs_f64() * 1e3);
            phases.push(engine.last_phase_times());
            drop(chunk);
            let t = Instant::now();
            last = Some(engine.diagnose());
            detect_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    })?;
    if let Some(e) = failed {
        anyhow::bail!("streaming engine refused an iteration: {e}");
    }
    let wall_s = wall.elapsed().as_secs_f64();
    let rss = peak_rss_mb().unwrap_or(f64::NAN);
    let per_it: Vec<f64> = push_ms.iter().zip(&detect_ms).map(|(p, d)| p + d).collect();
    let engine_s = (push_ms.iter().sum::<f64>() + detect_ms.last().copied().unwrap_or(0.0)) / 1e3;
    let top = last
        .as_ref()
        .and_then(|d| d.localized().next().map(|f| f.summary.clone()))
        .unwrap_or_else(|| "nothing localized".into());
    let ms_of = |f: fn(&flare_engine::digest::PhaseTimes) -> std::time::Duration| {
        let mut v: Vec<f64> = phases.iter().map(|p| f(p).as_secs_f64() * 1e3).collect();
        percentile(&mut v, 0.5)
    };
    println!(
        "streaming {} ranks x {} iterations ({ops} ops, window {}): per new iteration digest p50 {:.1} ms (max {:.1}) + localization of the window p50 {:.1} ms (max {:.1}) = p50 {:.1} ms (max {:.1})",
        a.ranks,
        a.iterations,
        a.window,
        percentile(&mut push_ms.clone(), 0.5),
        percentile(&mut push_ms.clone(), 1.0),
        percentile(&mut detect_ms.clone(), 0.5),
        percentile(&mut detect_ms.clone(), 1.0),
        percentile(&mut per_it.clone(), 0.5),
        percentile(&mut per_it.clone(), 1.0),
    );
    println!(
        "  whole window: every iteration digested + the final localization = {engine_s:.2} s of engine time; digest phases p50: keys {:.1} ms, ranks {:.1} ms, instances {:.1} ms, merge {:.1} ms",
        ms_of(|p| p.keys),
        ms_of(|p| p.ranks),
        ms_of(|p| p.instances),
        ms_of(|p| p.merge),
    );
    println!(
        "  top finding: {top}; wall {wall_s:.1} s with the simulator; peak RSS {rss:.0} MB (simulator included)"
    );
    if a.batch_ranks == 0 {
        return Ok(ExitCode::SUCCESS);
    }
    // 2. Batch: a trace file diagnosed as `flare diagnose` does.
    let dir = std::env::temp_dir().join(format!("flare-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cfg = SimConfig::for_scale(a.batch_ranks);
    cfg.iterations = a.batch_iterations;
    cfg.fault = FaultKind::SlowGpu;
    let t = Instant::now();
    let out = simulate(&cfg)?;
    let sim_s = t.elapsed().as_secs_f64();
    let path = dir.join("diag.flare");
    let t = Instant::now();
    flare_import::native::write_native_file(&out.trace, &path)?;
    let write_s = t.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path)?.len();
    let ops = out.trace.op_count();
    drop(out);
    let t = Instant::now();
    let trace = flare_import::native::read_native_file(&path)?;
    let read_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let d = diagnose(&trace, &EngineConfig::default());
    let diag_s = t.elapsed().as_secs_f64();
    let top = d
        .localized()
        .next()
        .map(|f| f.summary.clone())
        .unwrap_or_else(|| "nothing localized".into());
    println!(
        "batch {} ranks x {} iterations ({ops} ops): simulate {sim_s:.2} s ({:.1} M ops/s), native write {write_s:.2} s ({:.1} bytes/op), read {read_s:.2} s + engine {diag_s:.2} s = {:.2} s; top finding: {top}; peak RSS {:.0} MB",
        a.batch_ranks,
        a.batch_iterations,
        ops as f64 / sim_s / 1e6,
        bytes as f64 / ops as f64,
        read_s + diag_s,
        peak_rss_mb().unwrap_or(f64::NAN)
    );
    std::fs::remove_dir_all(&dir).ok();
    Ok(ExitCode::SUCCESS)
}
