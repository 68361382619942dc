//! `flare bench store`: what the server's storage costs per summary, on SQLite or
//! PostgreSQL, with the same job. A simulated job (a slow GPU) is replayed through the
//! agent's own aggregation into the summaries its nodes would post, window by window;
//! each is ingested as the server does (stored, its window re-analysed, the diagnosis and
//! alerts stored), timed one by one, without HTTP.

use anyhow::{bail, Context, Result};
use clap::Args;
use flare_model::WindowSummary;
use flare_server::store::{DbLocation, Store};
use flare_sim::{fault::FaultKind, simulate, SimConfig};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct StoreBenchArgs {
    /// A new SQLite file, or a `postgres://` URL of a database with no Flare data (the
    /// job is stored as `bench-store`).
    #[arg(long, value_name = "FILE|URL")]
    pub db: String,
    /// Ranks of the simulated job (8 per node).
    #[arg(long, default_value_t = 1024)]
    pub ranks: u32,
    /// Iterations simulated.
    #[arg(long, default_value_t = 24)]
    pub iterations: u32,
    /// Iterations per window.
    #[arg(long, default_value_t = 4)]
    pub window_iterations: u32,
    /// Servers sharing the database, each ingesting every n-th node's summaries in turn
    /// (PostgreSQL only): what sharing costs in checks and locks.
    #[arg(long, default_value_t = 1)]
    pub servers: usize,
}

/// A simulated job of `ranks` with a slow GPU, as its agents would have summarised it
/// (its ops replayed through the agent's aggregation): windows of `window_iterations`
/// iterations, each the summaries its nodes post; and the slow GPU's rank. The
/// simulation itself is dropped here (2 GB at 10,240 ranks).
pub(crate) fn slow_gpu_job(
    ranks: u32,
    iterations: u32,
    window_iterations: u32,
    job_id: &str,
) -> Result<(Vec<Vec<WindowSummary>>, Option<u32>)> {
    let mut cfg = SimConfig::for_scale(ranks);
    cfg.iterations = iterations;
    cfg.fault = FaultKind::SlowGpu;
    let sim = simulate(&cfg).context("simulating the job")?;
    let batch = flare_engine::diagnose(&sim.trace, &flare_engine::EngineConfig::default());
    let its: Vec<f64> = batch.iteration_ns.iter().flatten().copied().collect();
    let window_ns =
        (f64::from(window_iterations) * its.iter().sum::<f64>() / its.len().max(1) as f64) as u64;
    let windows = flare_agent::replay::summaries_of_trace(&sim.trace, job_id, window_ns);
    Ok((windows, sim.truth.culprits.first().and_then(|c| c.rank)))
}

pub fn run(a: StoreBenchArgs) -> Result<ExitCode> {
    let at = DbLocation::parse(&a.db);
    if let DbLocation::Sqlite(path) = &at {
        if path.exists() {
            bail!("{}: give a new file", path.display());
        }
        if a.servers > 1 {
            bail!("one server per SQLite file: --servers needs a postgres:// URL");
        }
    }
    let (windows, truth) = slow_gpu_job(a.ranks, a.iterations, a.window_iterations, "bench-store")?;
    let mut posts = Vec::new();
    for w in &windows {
        for s in w {
            let z = flare_agent::encode_summary(s).context("encoding a summary")?;
            posts.push((s.clone(), z));
        }
    }
    let bytes: usize = posts.iter().map(|p| p.1.len()).sum();
    let mut stores = (0..a.servers.max(1))
        .map(|_| Store::open(&at))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("opening {at}"))?;
    // Stored only, and stored with the window's analysis (the post that completed it).
    let (mut ms, mut analysed_ms) = (Vec::with_capacity(posts.len()), Vec::new());
    let wall = Instant::now();
    let mut now = 0;
    for (i, (s, z)) in posts.into_iter().enumerate() {
        let t = Instant::now();
        now = s.end_unix_ns;
        let store = &mut stores[i % a.servers.max(1)];
        let done = store.ingest(s, z, now).context("ingesting")?;
        let took = t.elapsed().as_secs_f64() * 1e3;
        match done.findings {
            Some(_) => analysed_ms.push(took),
            None => ms.push(took),
        }
    }
    // The last window is partial (the job ended inside it): analysed as a reader would.
    let t = Instant::now();
    for s in &mut stores {
        s.settle(None, now).context("analysing what is pending")?;
    }
    let settle_ms = t.elapsed().as_secs_f64() * 1e3;
    let wall_s = wall.elapsed().as_secs_f64();
    let n = ms.len() + analysed_ms.len();
    ms.sort_by(f64::total_cmp);
    analysed_ms.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| {
        v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    println!(
        "{} ranks on {} nodes, {} windows of {} iterations: {n} summaries, {:.1} KB each (zstd JSON)",
        a.ranks,
        windows.first().map_or(0, Vec::len),
        windows.len(),
        a.window_iterations,
        bytes as f64 / n.max(1) as f64 / 1e3
    );
    println!(
        "stored on {at} by {} server(s): {:.0} summaries/s in all; a summary stored: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        a.servers.max(1),
        n as f64 / wall_s,
        pct(&ms, 0.5),
        pct(&ms, 0.99),
        ms.last().copied().unwrap_or(0.0),
    );
    println!(
        "a summary that completed its window, stored and the window analysed ({} of them): p50 {:.1} ms, max {:.1} ms; the partial last window settled in {settle_ms:.1} ms; peak RSS {:.0} MB",
        analysed_ms.len(),
        pct(&analysed_ms, 0.5),
        analysed_ms.last().copied().unwrap_or(0.0),
        crate::bench::peak_rss_mb().unwrap_or(0.0)
    );
    // The answer is the same whatever the store: each window's top culprit.
    let mut named = 0;
    for w in &windows {
        let Some(window) = w.first().map(|s| s.window) else {
            continue;
        };
        let d = stores[0].diagnosis("bench-store", window)?;
        let top = d.and_then(|d| d.findings.into_iter().next());
        if top
            .as_ref()
            .and_then(|f| f.culprits.first())
            .and_then(|c| c.rank)
            == truth
        {
            named += 1;
        }
    }
    println!(
        "windows whose top finding names the simulated slow GPU (rank {}): {named} of {}",
        truth.map_or("none".into(), |r| r.to_string()),
        windows.len()
    );
    Ok(ExitCode::SUCCESS)
}
