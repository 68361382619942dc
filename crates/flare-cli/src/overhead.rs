//! `flare bench overhead`: what always-on tracing costs a training loop, and what it sends.
//!
//! A loop of spans, each around a fixed amount of real CPU work (a dependent chain of
//! floating-point operations calibrated to `--work-us`), runs in blocks that alternate
//! traced and untraced (in an A-B-B-A order, so a drift of the machine's speed cancels
//! out). A real agent collector drains the rings on another thread as the node agent does,
//! folds the spans into window summaries and compresses them as the pusher would.
//! Printed: the time per span untraced and traced (median over blocks), the overhead, the
//! raw event bytes the tracer wrote, and the compressed summary bytes that would go on the
//! wire.

use anyhow::{Context, Result};
use clap::Args;
use flare_engine::stats::{mean, median};
use flare_model::OpKind;
use flare_tracer::SpanArgs;
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct OverheadArgs {
    /// Traced spans in all (the same number runs untraced).
    #[arg(long, default_value_t = 1_000_000)]
    pub spans: u64,
    /// CPU work inside each span, in microseconds.
    #[arg(long, default_value_t = 20.0)]
    pub work_us: f64,
    /// Spans per block; blocks alternate traced and untraced.
    #[arg(long, default_value_t = 10_000)]
    pub block: u64,
    /// The agent's summary window, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub window_s: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// A dependent chain of multiply-adds: the compiler cannot vectorise or skip it.
#[inline(never)]
fn work(iters: u64) -> f64 {
    let mut x = 1.000_000_1f64;
    for _ in 0..iters {
        x = x * 1.000_000_01 + 1e-9;
    }
    x
}

/// Iterations of [`work`] that take `us` microseconds on this machine (best of several).
fn calibrate(us: f64) -> u64 {
    let probe = 200_000u64;
    let mut best = f64::MAX;
    for _ in 0..20 {
        let t = Instant::now();
        black_box(work(black_box(probe)));
        best = best.min(t.elapsed().as_secs_f64());
    }
    ((us * 1e-6 / best) * probe as f64).max(1.0) as u64
}

pub fn overhead(a: OverheadArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        a.block > 0 && a.spans >= a.block,
        "--spans must be at least --block"
    );
    let base = if std::path::Path::new(flare_tracer::DEFAULT_SHM_DIR).is_dir() {
        std::path::PathBuf::from(flare_tracer::DEFAULT_SHM_DIR)
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("flare-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let job = "bench-overhead".to_string();
    flare_tracer::init(flare_tracer::Config {
        job_id: job.clone(),
        shm_dir: dir.clone(),
        ring_capacity: 1 << 16,
        ..flare_tracer::Config::default()
    })
    .context("starting the tracer")?;

    // The agent's collector on its own thread, as on a node.
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = flare_agent::AgentConfig {
        shm_dir: dir.clone(),
        job: Some(job),
        window: Duration::from_secs_f64(a.window_s),
        grace: Duration::from_millis(300),
        poll: Duration::from_millis(100),
        heartbeat: true,
        ..flare_agent::AgentConfig::default()
    };
    let mut collector = flare_agent::Collector::new(cfg).context("starting the collector")?;
    let s = stop.clone();
    let agent = std::thread::spawn(move || -> Result<(u64, u64, u64)> {
        let (mut summaries, mut wire, mut json) = (0u64, 0u64, 0u64);
        let mut account = |sums: Vec<flare_model::WindowSummary>| -> Result<()> {
            for sm in sums {
                summaries += 1;
                json += serde_json::to_vec(&sm)?.len() as u64;
                wire += flare_agent::encode_summary(&sm)?.len() as u64;
            }
            Ok(())
        };
        while !s.load(Ordering::Relaxed) {
            account(collector.poll())?;
            std::thread::sleep(Duration::from_millis(100));
        }
        account(collector.poll())?;
        account(collector.flush())?;
        Ok((summaries, wire, json))
    });

    let iters = calibrate(a.work_us);
    let name = flare_tracer::intern("train_step_work");
    let args = SpanArgs::default();
    let pairs = a.spans / a.block;
    let mut traced_ns = Vec::new();
    let mut plain_ns = Vec::new();
    let run_block = |traced: bool| -> f64 {
        let t = Instant::now();
        for _ in 0..a.block {
            if traced {
                flare_tracer::begin(name, OpKind::Compute, &args);
            }
            black_box(work(black_box(iters)));
            if traced {
                flare_tracer::end(name, OpKind::Compute);
            }
        }
        t.elapsed().as_nanos() as f64 / a.block as f64
    };
    let t_all = Instant::now();
    for p in 0..pairs {
        // A-B-B-A: even pairs traced second, odd pairs traced first.
        let order = if p % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for traced in order {
            let ns = run_block(traced);
            if traced {
                traced_ns.push(ns);
            } else {
                plain_ns.push(ns);
            }
        }
    }
    let wall = t_all.elapsed();
    // Let the collector close the last window before it stops.
    std::thread::sleep(Duration::from_secs_f64(a.window_s) + Duration::from_millis(500));
    let st = flare_tracer::stats();
    stop.store(true, Ordering::Relaxed);
    let (summaries, wire_bytes, json_bytes) = agent
        .join()
        .map_err(|_| anyhow::anyhow!("the collector thread panicked"))??;
    let _ = flare_tracer::shutdown();
    let _ = std::fs::remove_dir_all(&dir);

    // Means first: `median` reorders the samples.
    let mean_pct = (mean(&traced_ns) - mean(&plain_ns)) / mean(&plain_ns) * 100.0;
    let plain = median(&mut plain_ns);
    let traced = median(&mut traced_ns);
    let overhead_pct = (traced - plain) / plain * 100.0;
    let raw_bytes = st.written * flare_tracer::layout::EVENT_SIZE as u64;
    let wire_pct = wire_bytes as f64 / raw_bytes.max(1) as f64 * 100.0;
    let out = serde_json::json!({
        "spans_traced": pairs * a.block,
        "spans_untraced": pairs * a.block,
        "work_us_target": a.work_us,
        "untraced_ns_per_span": plain,
        "traced_ns_per_span": traced,
        "overhead_percent_median": overhead_pct,
        "overhead_percent_mean": mean_pct,
        "events_written": st.written,
        "events_dropped": st.dropped_full + st.dropped_no_ring,
        "raw_event_bytes": raw_bytes,
        "summaries": summaries,
        "summary_json_bytes": json_bytes,
        "summary_wire_bytes": wire_bytes,
        "wire_percent_of_raw": wire_pct,
        "wall_s": wall.as_secs_f64(),
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} spans traced and {} untraced, {:.1} us of work each, blocks of {} alternating A-B-B-A ({:.0} s)",
        pairs * a.block,
        pairs * a.block,
        plain / 1e3,
        a.block,
        wall.as_secs_f64()
    );
    println!(
        "  per span: untraced {:.0} ns, traced {:.0} ns (medians over {} blocks each)",
        plain,
        traced,
        plain_ns.len()
    );
    println!("  overhead: {overhead_pct:+.2}% (median), {mean_pct:+.2}% (mean); target <= 1%");
    println!(
        "  tracer: {} events written ({:.1} MB raw), {} dropped",
        st.written,
        raw_bytes as f64 / 1e6,
        st.dropped_full + st.dropped_no_ring
    );
    println!(
        "  agent: {summaries} window summaries, {json_bytes} bytes of JSON, {wire_bytes} bytes on the wire (zstd) = {wire_pct:.3}% of the raw event bytes; target <= 2%"
    );
    Ok(ExitCode::SUCCESS)
}
