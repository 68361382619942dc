//! `flare sim-logs`: the logs a simulated job writes, failing one way or not at all
//! (`flare_sim::logs`): a file per rank, each node's kernel log and launcher output, and
//! `truth.json` in the failure-log corpus's format, so that `flare bench logs-corpus`
//! scores a folder of them and `flare logs diagnose` can be timed on a job of any size.

use anyhow::{Context, Result};
use clap::Args;
use flare_sim::logs::{JobLogs, LogFault, LogSimConfig};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct SimLogsArgs {
    #[arg(long, default_value_t = 64)]
    pub ranks: u32,
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// Training iterations: a line per rank each.
    #[arg(long, default_value_t = 200)]
    pub iterations: u32,
    /// none, gpu_fell_off_bus, uncorrectable_ecc, cuda_oom, nic_down, hang, nan_loss.
    #[arg(long, default_value = "gpu_fell_off_bus", value_parser = parse_fault)]
    pub fault: LogFault,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory (a folder per node).
    #[arg(long, short)]
    pub out: PathBuf,
}

pub fn parse_fault(s: &str) -> Result<LogFault, String> {
    LogFault::parse(s).ok_or_else(|| {
        format!(
            "unknown fault {s:?}: expected one of {}",
            LogFault::ALL
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

pub fn run(a: SimLogsArgs) -> Result<ExitCode> {
    let logs = JobLogs::new(LogSimConfig {
        ranks: a.ranks,
        gpus_per_node: a.gpus_per_node,
        iterations: a.iterations,
        fault: a.fault,
        seed: a.seed,
    });
    let mut bytes = 0u64;
    let files = logs.files();
    for f in &files {
        let path = a.out.join(&f.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        let mut err = None;
        logs.lines(f, &mut |l| {
            if err.is_none() {
                bytes += l.len() as u64 + 1;
                err = w
                    .write_all(l.as_bytes())
                    .and_then(|_| w.write_all(b"\n"))
                    .err();
            }
        });
        if let Some(e) = err {
            return Err(e).with_context(|| format!("writing {}", path.display()));
        }
        w.flush()
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let t = logs.truth();
    let truth = serde_json::json!({
        "id": format!("sim-{}-{}r-seed{}", a.fault.name(), a.ranks, a.seed),
        "source": "flare sim-logs",
        "title": format!("simulated job of {} ranks: {}", a.ranks, a.fault.name()),
        "category": t.category,
        "root_cause": format!("injected: {}", a.fault.name()),
        "evidence_of_truth": "injected by flare_sim::logs",
        "root_lines": t.root_lines,
        "cascade_lines": [],
        "culprit": {"rank": t.culprit_rank, "node": t.culprit_host},
        "stage": t.stage,
        "restart_helps": t.restart_helps,
    });
    std::fs::write(
        a.out.join("truth.json"),
        serde_json::to_string_pretty(&truth)? + "\n",
    )
    .with_context(|| format!("cannot write {}", a.out.join("truth.json").display()))?;
    eprintln!(
        "wrote {} files, {:.1} MB, under {}",
        files.len(),
        bytes as f64 / 1e6,
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
