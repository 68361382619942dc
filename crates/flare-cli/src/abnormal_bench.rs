//! `flare bench abnormal`: the abnormal-op classifiers judged op group by op group.
//!
//! Each scenario is a held-out benchmark job (the shapes and seeds of `flare bench
//! accuracy`, none of them trained on) with a fault, and its fault-free twin (same seed,
//! so the same noise): an op group is truly abnormal when the fault made it noticeably
//! longer than in the twin. Both methods judge every op group of every iteration, as the
//! engine does, and the table gives precision, recall and F1 per fault kind and scale.
//! Hangs are left out: a hung job has no durations to compare.

use crate::accuracy::{parse_kinds, scenario_config, scenarios, Scenario};
use crate::labels::{evaluate, Confusion};
use anyhow::Result;
use clap::Args;
use flare_engine::abnormal::AbnormalMethod;
use flare_sim::fault::FaultKind;
use flare_sim::simulate;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct AbnormalArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Scales (ranks) to run.
    #[arg(long, value_delimiter = ',', default_value = "64,512,2048")]
    pub scales: Vec<u32>,
    /// Runs per fault kind and scale.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Only these fault kinds (default: every kind but hang); fault-free jobs always
    /// run, for the share of op groups flagged without a fault.
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Iterations per scenario.
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// Worker threads.
    #[arg(long, default_value_t = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))]
    pub threads: usize,
}

type Scores = [(AbnormalMethod, Confusion); 2];

fn run_one(sc: &Scenario, iterations: u32) -> Result<Scores> {
    let mut cfg = scenario_config(sc.scale, sc.seed, sc.kind, iterations);
    let fault = simulate(&cfg)?;
    if sc.kind == FaultKind::None {
        // A fault-free job is its own twin: every flag is a false positive.
        return Ok(evaluate(&fault.trace, &fault.trace));
    }
    cfg.fault = FaultKind::None;
    let twin = simulate(&cfg)?;
    Ok(evaluate(&fault.trace, &twin.trace))
}

fn kinds(names: &[String]) -> Result<Vec<FaultKind>> {
    let v = parse_kinds(names, FaultKind::with_durations().collect())?;
    if v.contains(&FaultKind::Hang) {
        anyhow::bail!("a hang has no durations to compare with a twin");
    }
    Ok(v)
}

pub fn run(a: AbnormalArgs) -> Result<ExitCode> {
    let kinds = kinds(&a.faults)?;
    let scenarios = scenarios(&a.scales, &kinds, |_, _| a.runs);
    let wall = Instant::now();
    let results = crate::bench::run_parallel(
        &scenarios,
        a.threads,
        "scenario pairs",
        |sc| run_one(sc, a.iterations),
        |sc| format!("{} at {} ranks, seed {}", sc.kind.name(), sc.scale, sc.seed),
    )?;
    // (method, kind name or "all", scale or 0 for all scales) -> counts.
    let mut cells: BTreeMap<(AbnormalMethod, &str, u32), Confusion> = BTreeMap::new();
    for (i, scores) in results {
        let sc = &scenarios[i];
        for (m, c) in scores {
            let mut keys = vec![(m, sc.kind.name(), sc.scale), (m, sc.kind.name(), 0)];
            if sc.kind != FaultKind::None {
                keys.extend([(m, "all", sc.scale), (m, "all", 0)]);
            }
            for key in keys {
                cells.entry(key).or_default().merge(&c);
            }
        }
    }
    let seconds = wall.elapsed().as_secs_f64();
    if a.json {
        let mut methods = serde_json::Map::new();
        for m in AbnormalMethod::ALL {
            let mut rows = serde_json::Map::new();
            for ((mm, kind, scale), c) in &cells {
                if *mm != m {
                    continue;
                }
                let scale = if *scale == 0 {
                    "all".to_string()
                } else {
                    scale.to_string()
                };
                let mut row = json!({
                    "true_positives": c.true_positives,
                    "false_positives": c.false_positives,
                    "false_negatives": c.false_negatives,
                    "true_negatives": c.true_negatives,
                });
                if *kind == "none" {
                    row["flagged_share"] = json!(c.false_positive_rate());
                } else {
                    row["precision"] = json!(c.precision());
                    row["recall"] = json!(c.recall());
                    row["f1"] = json!(c.f1());
                }
                rows.insert(format!("{kind}@{scale}"), row);
            }
            methods.insert(m.name().into(), serde_json::Value::Object(rows));
        }
        let out = json!({
            "scenarios": scenarios.len(),
            "scales": a.scales,
            "runs": a.runs,
            "iterations": a.iterations,
            "seconds": seconds,
            "methods": methods,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Abnormal op groups, {} fault/twin pairs ({} runs per fault kind and scale, {} iterations each), {:.0} s",
        scenarios.len(),
        a.runs,
        a.iterations,
        seconds
    );
    println!("cells: precision / recall / F1 (truly abnormal groups in brackets); fault-free jobs: share of op groups flagged (op groups in brackets)");
    let names: Vec<&str> = kinds
        .iter()
        .filter(|k| **k != FaultKind::None)
        .map(|k| k.name())
        .chain(["all", "none"])
        .collect();
    let mut scales = a.scales.clone();
    scales.push(0);
    for m in AbnormalMethod::ALL {
        println!("\n{}", m.describe());
        print!("{:<20}", "fault");
        for &s in &scales {
            let label = if s == 0 {
                "all".to_string()
            } else {
                format!("{s} ranks")
            };
            print!(" {label:>24}");
        }
        println!();
        for kind in &names {
            print!("{kind:<20}");
            for &s in &scales {
                let c = cells.get(&(m, *kind, s)).copied().unwrap_or_default();
                let cell = if *kind == "none" {
                    format!(
                        "{:.2}% [{}]",
                        c.false_positive_rate() * 100.0,
                        c.false_positives + c.true_negatives
                    )
                } else {
                    format!(
                        "{:.2}/{:.2}/{:.2} [{}]",
                        c.precision(),
                        c.recall(),
                        c.f1(),
                        c.true_positives + c.false_negatives
                    )
                };
                print!(" {cell:>24}");
            }
            println!();
        }
    }
    Ok(ExitCode::SUCCESS)
}
