//! `flare train`: trains the abnormal-op classifier (a random forest, after Holmes) on
//! simulated jobs and writes the model the engine compiles in
//! (`crates/flare-engine/models/abnormal_op.json`).
//!
//! Each training scenario is a simulated job with a fault and its fault-free twin (same
//! seed, so the same noise): an op group is abnormal when the fault made it noticeably
//! longer. Seeds start at 2,000,000 and the job shapes differ from the benchmark's, so
//! `flare bench accuracy` measures the model on jobs it has never seen. The same command
//! and seed give the same file, byte for byte.

mod forest;

use crate::labels::{labeled_rows, Confusion, GateCounts, LabeledRow};
use anyhow::{Context, Result};
use clap::Args;
use flare_engine::abnormal::{Gate, Model, FEATURE_NAMES, N_FEATURES};
use flare_model::ParallelConfig;
use flare_sim::fault::FaultKind;
use flare_sim::{simulate, SimConfig};
use forest::{train, TrainConfig};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct TrainArgs {
    /// Where to write the model.
    #[arg(long, default_value = "crates/flare-engine/models/abnormal_op.json")]
    pub out: PathBuf,
    /// Seed of the scenarios and of the forest.
    #[arg(long, default_value_t = 2_000_000)]
    pub seed: u64,
    /// Scenarios per (shape, fault kind).
    #[arg(long, default_value_t = 2)]
    pub runs: usize,
    /// Iterations per scenario.
    #[arg(long, default_value_t = 8)]
    pub iterations: u32,
    /// Trees, depth and leaf size of the forest.
    #[arg(long, default_value_t = 24)]
    pub trees: usize,
    #[arg(long, default_value_t = 10)]
    pub max_depth: usize,
    #[arg(long, default_value_t = 50)]
    pub min_leaf: usize,
    /// Normal rows kept per abnormal row in each scenario (normal rows far outnumber the
    /// abnormal ones).
    #[arg(long, default_value_t = 2.0)]
    pub normal_per_abnormal: f64,
    /// A small, fast configuration (64-rank jobs only, fewer trees), for tests.
    #[arg(long)]
    pub quick: bool,
    /// Worker threads.
    #[arg(long, default_value_t = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))]
    pub threads: usize,
}

/// Training job shapes, (tp, cp, ep, dp, pp): none of them is a benchmark shape.
fn training_shapes(quick: bool) -> Vec<(u32, u32, u32, u32, u32)> {
    let mut v = vec![(8, 1, 1, 2, 4), (2, 1, 1, 16, 2), (4, 2, 1, 4, 2)];
    if !quick {
        v.extend([
            (8, 1, 1, 8, 4),
            (4, 1, 2, 16, 4),
            (2, 2, 1, 16, 4),
            (4, 1, 1, 32, 4),
            (8, 2, 1, 8, 4),
            (8, 1, 8, 16, 4),
        ]);
    }
    v
}

struct Scenario {
    index: usize,
    shape: (u32, u32, u32, u32, u32),
    kind: FaultKind,
    seed: u64,
}

/// SplitMix64 for the deterministic subsampling of normal rows.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn scenario_rows(
    sc: &Scenario,
    iterations: u32,
    keep_normal: f64,
    gate: &Gate,
) -> Result<(Vec<LabeledRow>, GateCounts)> {
    let (tp, cp, ep, dp, pp) = sc.shape;
    let mut cfg = SimConfig::megatron(tp, pp, dp);
    cfg.parallel = ParallelConfig::new(tp, cp, ep, dp, pp)?;
    cfg.iterations = iterations;
    cfg.seed = sc.seed;
    cfg.fault = sc.kind;
    let fault = simulate(&cfg)?;
    cfg.fault = FaultKind::None;
    let twin = simulate(&cfg)?;
    let (rows, counts) = labeled_rows(&fault.trace, &twin.trace, gate);
    let positives = rows.iter().filter(|r| r.abnormal).count();
    let budget = ((positives as f64 * keep_normal) as usize).max(200);
    let normals = rows.len() - positives;
    // Keep every abnormal row and a deterministic sample of the normal ones.
    let mut k = 0usize;
    let kept = rows
        .into_iter()
        .filter(|r| {
            if r.abnormal {
                return true;
            }
            k += 1;
            normals <= budget
                || mix(sc.seed ^ ((k as u64) << 20)) % (normals as u64) < (budget as u64)
        })
        .collect();
    Ok((kept, counts))
}

pub fn run(a: TrainArgs) -> Result<ExitCode> {
    let wall = Instant::now();
    let shapes = training_shapes(a.quick);
    let runs = if a.quick { 1 } else { a.runs };
    let mut scenarios = Vec::new();
    for &shape in &shapes {
        // Every kind but a hang (no durations to compare with a twin), and fault-free runs.
        for kind in FaultKind::TRAINING {
            for _ in 0..runs {
                let index = scenarios.len();
                scenarios.push(Scenario {
                    index,
                    shape,
                    kind,
                    seed: a.seed + index as u64 * 7919,
                });
            }
        }
    }
    let gate = Gate::default();
    let mut results: Vec<(usize, (Vec<LabeledRow>, GateCounts))> = crate::bench::run_parallel(
        &scenarios,
        a.threads,
        "training scenarios",
        |sc| scenario_rows(sc, a.iterations, a.normal_per_abnormal, &gate),
        |sc| format!("scenario {}", sc.index),
    )?;
    // Scenario order, whatever the threads did: the model depends only on the seed.
    results.sort_by_key(|r| r.0);
    // Every fifth scenario is held out to report the model's quality.
    let (mut xtr, mut ytr, mut xva, mut yva) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut gate_counts = GateCounts::default();
    for (_, (_, c)) in &results {
        gate_counts.merge(c);
    }
    for (i, (rows, _)) in &results {
        for r in rows {
            if i % 5 == 4 {
                xva.extend_from_slice(&r.features);
                yva.push(r.abnormal);
            } else {
                xtr.extend_from_slice(&r.features);
                ytr.push(r.abnormal as u8);
            }
        }
    }
    if ytr.iter().all(|&y| y == 0) || ytr.iter().all(|&y| y == 1) {
        anyhow::bail!("the training rows hold a single class ({} rows)", ytr.len());
    }
    let cfg = TrainConfig {
        trees: if a.quick { 8 } else { a.trees },
        max_depth: a.max_depth,
        min_leaf: a.min_leaf,
        mtry: 0,
        sample_fraction: 1.0,
        seed: a.seed,
    };
    let t = Instant::now();
    let forest = train(&xtr, &ytr, N_FEATURES, &cfg, a.threads);
    let train_s = t.elapsed().as_secs_f64();
    let threshold = 0.5f32;
    let mut m = Confusion::default();
    for (i, &truth) in yva.iter().enumerate() {
        m.add(
            forest.predict(&xva[i * N_FEATURES..(i + 1) * N_FEATURES]) >= threshold,
            truth,
        );
    }
    let splits = forest.split_counts();
    let model = Model {
        format: "flare-abnormal-op-forest".into(),
        version: 1,
        features: FEATURE_NAMES.map(String::from).to_vec(),
        drift_features: flare_engine::abnormal::DRIFT_FEATURES.to_vec(),
        gate,
        threshold,
        training: json!({
            "command": format!(
                "flare train --seed {} --runs {} --iterations {} --trees {} --max-depth {} --min-leaf {} --normal-per-abnormal {}{}",
                a.seed, runs, a.iterations, cfg.trees, a.max_depth, a.min_leaf, a.normal_per_abnormal,
                if a.quick { " --quick" } else { "" }
            ),
            "scenarios": scenarios.len(),
            "shapes": shapes.iter().map(|(tp, cp, ep, dp, pp)| format!("TP{tp} CP{cp} EP{ep} DP{dp} PP{pp}")).collect::<Vec<_>>(),
            "fault_kinds": FaultKind::TRAINING.map(|k| k.name()).to_vec(),
            "gate": {
                "op_groups": gate_counts.groups,
                "passed": gate_counts.gated,
                "abnormal": gate_counts.abnormal,
                "abnormal_passed": gate_counts.gated_abnormal,
                "recall": round4(gate_counts.gated_abnormal as f64 / gate_counts.abnormal.max(1) as f64),
                "pass_rate": round4(gate_counts.gated as f64 / gate_counts.groups.max(1) as f64),
            },
            "rows": ytr.len(),
            "abnormal_rows": ytr.iter().filter(|&&y| y == 1).count(),
            "validation": {
                "scenarios": "every fifth",
                "rows": yva.len(),
                "abnormal_rows": yva.iter().filter(|&&y| y).count(),
                "precision": round4(m.precision()),
                "recall": round4(m.recall()),
                "f1": round4(m.f1()),
            },
            "splits_per_feature": FEATURE_NAMES.iter().zip(&splits).map(|(n, c)| (n.to_string(), json!(c))).collect::<serde_json::Map<_, _>>(),
        }),
        forest,
    };
    let text = model_json(&model)?;
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&a.out, &text).with_context(|| format!("writing {}", a.out.display()))?;
    println!(
        "gate: {} of {} op groups passed ({:.1}%), keeping {:.1}% of the {} abnormal ones",
        gate_counts.gated,
        gate_counts.groups,
        gate_counts.gated as f64 / gate_counts.groups.max(1) as f64 * 100.0,
        gate_counts.gated_abnormal as f64 / gate_counts.abnormal.max(1) as f64 * 100.0,
        gate_counts.abnormal
    );
    println!(
        "trained {} trees on {} rows ({} abnormal) from {} scenarios in {:.1} s (forest {train_s:.1} s); held-out rows: precision {:.3}, recall {:.3}, F1 {:.3}; wrote {} ({} KB)",
        model.forest.trees.len(),
        ytr.len(),
        ytr.iter().filter(|&&y| y == 1).count(),
        scenarios.len(),
        wall.elapsed().as_secs_f64(),
        m.precision(),
        m.recall(),
        m.f1(),
        a.out.display(),
        text.len() / 1024
    );
    Ok(ExitCode::SUCCESS)
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The model as JSON: the header pretty-printed, one tree per line, so that a retrained
/// model's diff stays readable.
fn model_json(m: &Model) -> Result<String> {
    let mut head = serde_json::to_value(m)?;
    let forest = head
        .as_object_mut()
        .and_then(|o| o.remove("forest"))
        .context("model has a forest")?;
    let mut out = serde_json::to_string_pretty(&head)?;
    out.truncate(out.trim_end().len() - 1); // the closing brace
    out.push_str(",\n  \"forest\": {\n    \"n_features\": ");
    out.push_str(&forest["n_features"].to_string());
    out.push_str(",\n    \"trees\": [\n");
    let trees = forest["trees"].as_array().context("trees")?;
    for (i, t) in trees.iter().enumerate() {
        out.push_str("      ");
        out.push_str(&serde_json::to_string(t)?);
        out.push_str(if i + 1 < trees.len() { ",\n" } else { "\n" });
    }
    out.push_str("    ]\n  }\n}\n");
    Ok(out)
}
