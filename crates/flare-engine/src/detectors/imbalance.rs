//! Structural stragglers: a pipeline stage that computes more than the others, and
//! data-parallel replicas that get unequal work per iteration (sequence lengths).

use crate::stats::{confidence, median};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{Component, Culprit, Evidence, Finding, FindingKind, Severity};
use std::collections::BTreeMap;

/// Compute time per (rank index, iteration index), ns.
fn compute_per_rank_iteration(a: &Analysis) -> Vec<f64> {
    let n_its = a.n_its();
    let mut out = vec![0.0; a.n_ranks() * n_its];
    // Iteration by iteration: each digest's ranks lie together in memory.
    for (i, d) in a.digests.iter().enumerate() {
        for (ri, r) in d.ranks.iter().enumerate() {
            out[ri * n_its + i] = r.compute_ns;
        }
    }
    out
}

pub struct StageImbalanceDetector;

impl Detector for StageImbalanceDetector {
    fn id(&self) -> &'static str {
        "stage_imbalance"
    }
    fn summary(&self) -> &'static str {
        "a pipeline stage whose compute per iteration exceeds the other stages'"
    }
    fn needs(&self) -> &'static str {
        "pipeline stage of each rank (parallel layout) and compute ops"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let Some(par) = a.ctx.job.parallel.as_ref().filter(|p| p.pp > 1) else {
            return Outcome::NotEnoughData("needs the pipeline layout (pp > 1)".into());
        };
        let n_its = a.n_its();
        let c = compute_per_rank_iteration(a);
        let mut per_stage: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for ri in 0..a.n_ranks() {
            let row = &c[ri * n_its..(ri + 1) * n_its];
            let total: f64 = row.iter().sum();
            if total > 0.0 {
                per_stage
                    .entry(par.coords(a.rank_id(ri)).pp)
                    .or_default()
                    .push(total);
            }
        }
        if per_stage.len() < 2 {
            return Outcome::NotEnoughData("compute ops on fewer than 2 stages".into());
        }
        let stage_load: Vec<(u32, f64)> = per_stage
            .into_iter()
            .map(|(s, mut v)| (s, median(&mut v)))
            .collect();
        let &(stage, heaviest) = stage_load
            .iter()
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .expect("two stages");
        // The heaviest stage against the others (with two stages, the median of all would
        // be their mean and halve the imbalance).
        let mut loads: Vec<f64> = stage_load
            .iter()
            .filter(|x| x.0 != stage)
            .map(|x| x.1)
            .collect();
        let typical = median(&mut loads);
        let ratio = heaviest / typical;
        if ratio < cfg.min_imbalance {
            return Outcome::Findings(vec![]);
        }
        let mut culprit = Culprit::new(Component::Stage);
        culprit.stage = Some(stage);
        let idle_share = 1.0 - typical / heaviest;
        Outcome::Findings(vec![Finding {
            kind: FindingKind::StageImbalance,
            severity: Severity::Warning,
            summary: format!(
                "pipeline stage {stage} computes x{ratio:.2} as much as a typical stage: the other stages idle about {:.0}% of their compute time waiting for it",
                idle_share * 100.0
            ),
            confidence: confidence(ratio - 1.0, 0.05),
            culprits: vec![culprit],
            evidence: stage_load
                .iter()
                .map(|(s, l)| {
                    Evidence::new(
                        "stage_compute_ms",
                        l / 1e6 / n_its.max(1) as f64,
                        Some(typical / 1e6 / n_its.max(1) as f64),
                        "ms/iteration",
                        format!("median compute per iteration of a rank in stage {s}"),
                    )
                })
                .collect(),
            action: format!(
                "rebalance the pipeline: move layers off stage {stage} (Megatron --decoder-last-pipeline-num-layers / --decoder-first-pipeline-num-layers, or account for the embedding and loss layers)"
            ),
            iterations: vec![],
            detector: self.id().into(),
        }])
    }
}

pub struct SequenceImbalanceDetector;

impl Detector for SequenceImbalanceDetector {
    fn id(&self) -> &'static str {
        "sequence_imbalance"
    }
    fn summary(&self) -> &'static str {
        "data-parallel replicas with unequal compute in the same iteration (sequence-length imbalance)"
    }
    fn needs(&self) -> &'static str {
        "data-parallel rank of each rank (parallel layout) and compute ops"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let Some(par) = a.ctx.job.parallel.as_ref().filter(|p| p.dp > 1) else {
            return Outcome::NotEnoughData("needs the data-parallel layout (dp > 1)".into());
        };
        let n_its = a.n_its();
        let c = compute_per_rank_iteration(a);
        let coords: Vec<_> = a.ctx.ranks.iter().map(|&r| par.coords(r)).collect();
        let mut heavy_per_it: Vec<(u32, u32, f64)> = Vec::new();
        let mut stage_vals: Vec<Vec<f64>> = vec![Vec::new(); par.pp as usize];
        let mut replica: Vec<Vec<f64>> = vec![Vec::new(); par.dp as usize];
        for i in 0..n_its {
            // Normalise each rank by its stage's median, so stage imbalance does not leak in.
            stage_vals.iter_mut().for_each(Vec::clear);
            for (ri, co) in coords.iter().enumerate() {
                let v = c[ri * n_its + i];
                if v > 0.0 {
                    stage_vals[co.pp as usize].push(v);
                }
            }
            let stage_med: Vec<f64> = stage_vals
                .iter_mut()
                .map(|v| if v.is_empty() { f64::NAN } else { median(v) })
                .collect();
            replica.iter_mut().for_each(Vec::clear);
            for (ri, co) in coords.iter().enumerate() {
                let v = c[ri * n_its + i];
                let m = stage_med[co.pp as usize];
                if v > 0.0 && m > 0.0 {
                    replica[co.dp as usize].push(v / m);
                }
            }
            let loads: Vec<(u32, f64)> = replica
                .iter_mut()
                .enumerate()
                .filter(|(_, v)| !v.is_empty())
                .map(|(d, v)| (d as u32, median(v)))
                .collect();
            if loads.len() < 2 {
                continue;
            }
            let mut all: Vec<f64> = loads.iter().map(|x| x.1).collect();
            let typical = median(&mut all);
            let &(d, l) = loads
                .iter()
                .max_by(|x, y| x.1.total_cmp(&y.1))
                .expect("2 replicas");
            heavy_per_it.push((a.iterations[i], d, l / typical));
        }
        if heavy_per_it.len() < 2 {
            return Outcome::NotEnoughData(
                "fewer than 2 iterations with compute on 2+ replicas".into(),
            );
        }
        let mut ratios: Vec<f64> = heavy_per_it.iter().map(|x| x.2).collect();
        let ratio = median(&mut ratios);
        if ratio < cfg.min_imbalance {
            return Outcome::Findings(vec![]);
        }
        let imbalanced: Vec<&(u32, u32, f64)> = heavy_per_it
            .iter()
            .filter(|x| x.2 >= cfg.min_imbalance)
            .collect();
        let mut replicas: Vec<u32> = imbalanced.iter().map(|x| x.1).collect();
        replicas.sort_unstable();
        replicas.dedup();
        let culprits = replicas
            .iter()
            .take(8)
            .map(|&d| {
                let mut c = Culprit::new(Component::Process);
                c.dp_rank = Some(d);
                c.score =
                    imbalanced.iter().filter(|x| x.1 == d).count() as f64 / imbalanced.len() as f64;
                c
            })
            .collect();
        Outcome::Findings(vec![Finding {
            kind: FindingKind::SequenceImbalance,
            severity: Severity::Warning,
            summary: format!(
                "data-parallel replicas get unequal work: in a typical iteration the heaviest replica computes x{ratio:.2} the median ({} different replicas were heaviest), and every other replica waits for it at the gradient reduction",
                replicas.len()
            ),
            confidence: confidence(ratio - 1.0, 0.05),
            culprits,
            evidence: imbalanced
                .iter()
                .take(10)
                .map(|(it, d, r)| {
                    Evidence::new(
                        "heaviest_replica_ratio",
                        *r,
                        Some(1.0),
                        "x",
                        format!("iteration {it}: DP rank {d} computed x{r:.2} the median replica"),
                    )
                })
                .collect(),
            action: "balance tokens, not samples, across data-parallel ranks: sequence packing, length-aware batching or sorting within the global batch".into(),
            iterations: imbalanced.iter().map(|x| x.0).collect(),
            detector: self.id().into(),
        }])
    }
}
