//! Times reading and analysing the SE what-if trace (64 workers, 43 steps, 107k ops).
//!
//! `cargo run --release -p flare-import --example whatif_speed [TRACE.parquet]`

use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let path = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/data/stragglers/trace-SE.parquet"
            ))
        });
    let t0 = Instant::now();
    let trace = match flare_import::ndtimeline::read_ndtimeline(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let t_read = t0.elapsed();
    let t1 = Instant::now();
    let report = match flare_whatif::analyze(&trace) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1);
        }
    };
    let t_analyze = t1.elapsed();
    println!(
        "{}: {} ops, {} workers, {} steps",
        path.display(),
        trace.ops.len(),
        report.workers,
        report.steps
    );
    println!(
        "S {:.4}  M_W {:.4}  M_S {:.4}  heatmap {:?}",
        report.slowdown, report.m_w, report.m_s, report.heatmap.pattern
    );
    println!(
        "read {:.1} ms, analysis {:.1} ms, total {:.1} ms",
        t_read.as_secs_f64() * 1e3,
        t_analyze.as_secs_f64() * 1e3,
        (t_read + t_analyze).as_secs_f64() * 1e3
    );
}
