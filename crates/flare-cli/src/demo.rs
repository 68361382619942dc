//! `flare demo`: the main job. Simulates a 1,024-GPU Megatron job with a fault, diagnoses
//! it, tells a person what is wrong, and writes report.html.

use crate::sim::JobArgs;
use anyhow::{Context, Result};
use clap::Args;
use flare_engine::{diagnose_whole, EngineConfig};
use flare_sim::simulate;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Where to write the HTML report.
    #[arg(long, default_value = "report.html")]
    pub report: PathBuf,
    /// Also keep the simulated trace and truth here.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Print the findings as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: DemoArgs) -> Result<ExitCode> {
    let cfg = a.job.config()?;
    let p = &cfg.parallel;
    let shape = format!(
        "TP{} x PP{} x DP{}{}{}",
        p.tp,
        p.pp,
        p.dp,
        if p.cp > 1 {
            format!(" x CP{}", p.cp)
        } else {
            String::new()
        },
        if p.ep > 1 {
            format!(" (EP{})", p.ep)
        } else {
            String::new()
        }
    );
    eprintln!(
        "Flare demo: a {}-GPU job ({shape}), {} iterations, fault: {}",
        p.world_size(),
        cfg.iterations,
        cfg.fault.name()
    );
    let sp = crate::present::spinner("simulating the job");
    let t0 = Instant::now();
    let out = simulate(&cfg)?;
    sp.finish_and_clear();
    eprintln!(
        "[1/3] simulated {} ops in {:.1} s",
        out.trace.op_count(),
        t0.elapsed().as_secs_f64()
    );
    if let Some(dir) = &a.save {
        crate::sim::write_outputs(&out, dir, false)?;
    }
    let sp = crate::present::spinner("diagnosing");
    let t1 = Instant::now();
    let run = diagnose_whole(&out.trace, None, &EngineConfig::default());
    let d = &run.diagnosis;
    let ms = t1.elapsed().as_secs_f64() * 1e3;
    sp.finish_and_clear();
    eprintln!("[2/3] diagnosed in {ms:.0} ms");
    let doc = run.document(ms);
    if a.json {
        println!("{}", doc.to_json());
    } else {
        print!("{}", crate::present::text(&doc));
        println!("Injected (ground truth): {}", out.truth.description);
        let verdict = match d.localized().next() {
            None if out.truth.expected_finding.is_none() => {
                "correct: healthy job reported healthy".to_string()
            }
            None => "MISSED: nothing localized".to_string(),
            Some(f) if out.truth.matches(f.kind, &f.culprits[0]) => {
                format!("correct: top finding names {}", f.culprits[0].describe())
            }
            Some(f) => format!("WRONG: top finding names {}", f.culprits[0].describe()),
        };
        println!("Verdict against ground truth: {verdict}");
    }
    let html = crate::present::report_html(
        &run.ctx,
        d,
        &doc,
        &format!(
            "Flare diagnosis — simulated {}-GPU job ({shape})",
            p.world_size()
        ),
        &format!(
            "seed {}, fault {}, {} iterations, {} ops, diagnosed in {ms:.0} ms. Ground truth: {}",
            cfg.seed,
            cfg.fault.name(),
            cfg.iterations,
            out.trace.op_count(),
            out.truth.description
        ),
    );
    std::fs::write(&a.report, html).with_context(|| format!("writing {}", a.report.display()))?;
    eprintln!("[3/3] wrote {}", a.report.display());
    Ok(ExitCode::SUCCESS)
}
