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
use std::process::ExitCode;
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
    /// Abnormal-op classification (random forest vs 3-sigma), op group by op group.
    Abnormal(crate::abnormal_bench::AbnormalArgs),
    /// What tracing costs a loop of spans with real work, and the summary bytes sent.
    Overhead(crate::overhead::OverheadArgs),
    /// Log template mining: grouping accuracy on LogHub-2k and lines/s on one core.
    Logs(crate::logs::LogsBenchArgs),
    /// `flare logs diagnose` on labelled real failure logs: root-cause line, category,
    /// culprit, stage, restart, and effects never named as the cause.
    LogsCorpus(crate::logs::CorpusArgs),
    /// The server's storage (SQLite or PostgreSQL): summaries ingested per second and
    /// the time each takes, stored and its window re-analysed.
    Store(crate::store_bench::StoreBenchArgs),
    /// A 10,240-GPU job's agents against real servers (HTTP + SQLite, or NATS
    /// JetStream + PostgreSQL): loss, finding latency, server CPU and memory, bytes.
    Load(crate::load_bench::LoadBenchArgs),
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
    /// Only these fault kinds (default: all).
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Skip the baselines (HTA, NVRx) to save time.
    #[arg(long)]
    pub no_baselines: bool,
    /// How the engine judges op groups abnormal: forest (the default) or three-sigma, to
    /// compare what the classifier is worth end to end.
    #[arg(long, default_value = "forest", value_parser = parse_abnormal)]
    pub abnormal: flare_engine::abnormal::AbnormalMethod,
    /// Iterations per scenario.
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// Whose top-1 misses to list: flare, graph, hta, nvrx_gpu, nvrx or minder.
    #[arg(long, default_value = "flare")]
    pub misses: String,
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
    /// Iterations of the streamed job: those past the window measure the steady state
    /// (each new iteration pushes the oldest out).
    #[arg(long, default_value_t = 30)]
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

fn parse_abnormal(s: &str) -> Result<flare_engine::abnormal::AbnormalMethod, String> {
    flare_engine::abnormal::AbnormalMethod::parse(s)
        .ok_or_else(|| format!("'{s}' is not forest or three-sigma"))
}

pub fn run(a: BenchArgs) -> Result<ExitCode> {
    match a.which {
        Which::Accuracy(a) => crate::accuracy::accuracy(a),
        Which::Speed(a) => speed(a),
        Which::Abnormal(a) => crate::abnormal_bench::run(a),
        Which::Overhead(a) => crate::overhead::overhead(a),
        Which::Logs(a) => crate::logs::bench(a),
        Which::LogsCorpus(a) => crate::logs::corpus::run(a),
        Which::Store(a) => crate::store_bench::run(a),
        Which::Load(a) => crate::load_bench::run(a),
    }
}

/// Peak resident memory of this process so far, in MB (Linux), for the figures.
pub(crate) fn peak_rss_mb() -> Option<f64> {
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
    let window = (a.window as usize).max(1);
    // Whole window: its iterations digested from a cold start, then localized once.
    let first = window.min(push_ms.len());
    let window_s = (push_ms[..first].iter().sum::<f64>()
        + detect_ms.get(first.wrapping_sub(1)).copied().unwrap_or(0.0))
        / 1e3;
    // Per new iteration: once the window is full (the steady state of a live job), or
    // every iteration when the job is no longer than the window.
    let from = if push_ms.len() > window { window } else { 0 };
    let steady = |v: &[f64]| v[from.min(v.len())..].to_vec();
    let (push_s, detect_s) = (steady(&push_ms), steady(&detect_ms));
    let per_it: Vec<f64> = push_s.iter().zip(&detect_s).map(|(p, d)| p + d).collect();
    let top = last
        .as_ref()
        .and_then(|d| d.localized().next().map(|f| f.summary.clone()))
        .unwrap_or_else(|| "nothing localized".into());
    let phases = &phases[from.min(phases.len())..];
    let ms_of = |f: fn(&flare_engine::digest::PhaseTimes) -> std::time::Duration| {
        let mut v: Vec<f64> = phases.iter().map(|p| f(p).as_secs_f64() * 1e3).collect();
        crate::accuracy::percentile(&mut v, 0.5)
    };
    let pct = |v: &[f64], q: f64| crate::accuracy::percentile(&mut v.to_vec(), q);
    println!(
        "streaming {} ranks x {} iterations ({ops} ops, window {window}): per new iteration {} (n={}): digest p50 {:.1} ms (max {:.1}) + localization of the window p50 {:.1} ms (max {:.1}) = p50 {:.1} ms (max {:.1})",
        a.ranks,
        a.iterations,
        if from > 0 {
            format!("once the window is full, iterations {}-{}", from + 1, push_ms.len())
        } else {
            "while the window fills".to_string()
        },
        per_it.len(),
        pct(&push_s, 0.5),
        pct(&push_s, 1.0),
        pct(&detect_s, 0.5),
        pct(&detect_s, 1.0),
        pct(&per_it, 0.5),
        pct(&per_it, 1.0),
    );
    println!(
        "  whole window: its first {first} iterations digested from a cold start + their localization = {window_s:.2} s of engine time; digest phases p50: keys {:.1} ms, ranks {:.1} ms, instances {:.1} ms, merge {:.1} ms, summaries {:.1} ms, abnormal ops {:.1} ms, graph search {:.1} ms, history {:.1} ms",
        ms_of(|p| p.keys),
        ms_of(|p| p.ranks),
        ms_of(|p| p.instances),
        ms_of(|p| p.merge),
        ms_of(|p| p.summaries),
        ms_of(|p| p.abnormal),
        ms_of(|p| p.graph),
        ms_of(|p| p.history),
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

/// Runs `job` on every item over `threads` threads, each taking the next item as it
/// finishes one (the largest first keeps them busy to the end), with a progress bar.
/// Returns each item's index with its result, in no particular order, or every item's
/// error, named by `describe`.
pub fn run_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    what: &str,
    job: impl Fn(&T) -> Result<R> + Sync,
    describe: impl Fn(&T) -> String + Sync,
) -> Result<Vec<(usize, R)>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let bar = crate::present::bar(items.len() as u64, what);
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(items.len()));
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                match job(item) {
                    Ok(r) => results.lock().expect("lock").push((i, r)),
                    Err(e) => errors
                        .lock()
                        .expect("lock")
                        .push(format!("{}: {e:#}", describe(item))),
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let errors = errors.into_inner().expect("lock");
    if !errors.is_empty() {
        anyhow::bail!("{what} failed: {errors:#?}");
    }
    Ok(results.into_inner().expect("lock"))
}
