//! Structural stragglers: a pipeline stage that computes more than the others, and
//! data-parallel replicas that get unequal work per iteration (sequence lengths).

#[cfg(doc)]
use crate::context::JobContext;
pub use crate::digest::{iteration_replica_loads, load_factor};
use crate::stats::{confidence, median};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit,
};
use std::collections::BTreeMap;

/// When a stage or a data-parallel replica is imbalanced (the detectors that name ranks
/// leave delays such a load explains to these two).
#[derive(Clone, Debug)]
pub struct ImbalanceConfig {
    /// Its compute over the median's.
    pub min_ratio: f64,
}

impl Default for ImbalanceConfig {
    fn default() -> Self {
        ImbalanceConfig { min_ratio: 1.08 }
    }
}

pub struct StageImbalanceDetector;

impl Detector for StageImbalanceDetector {
    fn id(&self) -> DetectorId {
        DetectorId::StageImbalance
    }
    fn summary(&self) -> &'static str {
        "a pipeline stage whose compute per iteration exceeds the other stages'"
    }
    fn needs(&self) -> &'static str {
        "pipeline stage of each rank (the parallel layout, or transfers that chain the ranks) and compute ops"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let Some(stages) = a.ctx.stages.as_ref() else {
            return Outcome::NotEnoughData("needs the pipeline layout (pp > 1)".into());
        };
        if stages.inferred && a.ctx.meta.cpu_compute {
            // Read from the transfers, the stages are right, but a CPU job's stages take
            // turns on shared cores: their compute times differ by half between healthy
            // runs (profiled 4-stage Gloo pipelines on 2 cores).
            return Outcome::NotEnoughData(
                "stages read from transfers on a job computing on CPUs, whose stage times vary with scheduling".into(),
            );
        }
        let n_its = a.n_its();
        // Each rank's compute over the window, iteration by iteration: each digest's
        // ranks lie together in memory.
        let mut totals = vec![0.0f64; a.n_ranks()];
        for d in &a.digests {
            for (t, r) in totals.iter_mut().zip(&d.ranks) {
                *t += r.compute_ns;
            }
        }
        let mut per_stage: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for (ri, &total) in totals.iter().enumerate() {
            if total > 0.0 {
                per_stage.entry(stages.of[ri]).or_default().push(total);
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
        if ratio < cfg.imbalance.min_ratio {
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
                        EvidenceKey::StageComputeMs,
                        l / 1e6 / n_its.max(1) as f64,
                        Some(typical / 1e6 / n_its.max(1) as f64),
                        Unit::MsPerIteration,
                        format!("median compute per iteration of a rank in stage {s}"),
                    )
                })
                .collect(),
            action: format!(
                "rebalance the pipeline: move layers off stage {stage} (Megatron --decoder-last-pipeline-num-layers / --decoder-first-pipeline-num-layers, or account for the embedding and loss layers)"
            ),
            iterations: vec![],
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }])
    }
}

/// Per iteration, each data-parallel replica's compute load: the median over its ranks of
/// their compute time over their stage's median (so stage imbalance does not leak in),
/// divided by the median replica's. Several detectors read it: a rank late only when its
/// whole replica carried more work is not a device fault.
#[derive(Clone, Debug, Default)]
pub struct ReplicaLoads {
    /// `[iteration index][dp rank]`; NaN where the replica has no compute.
    pub load: Vec<Vec<f64>>,
    /// Per iteration: the heaviest replica and its load, when 2 or more have compute.
    pub heaviest: Vec<Option<(u32, f64)>>,
}

impl ReplicaLoads {
    /// The window's loads, from its digests.
    pub fn compute(a: &Analysis) -> ReplicaLoads {
        let Some(par) = a.ctx.job.parallel.as_ref().filter(|p| p.dp > 1) else {
            return ReplicaLoads::default();
        };
        let mut out = ReplicaLoads {
            load: Vec::with_capacity(a.n_its()),
            heaviest: Vec::with_capacity(a.n_its()),
        };
        for d in &a.digests {
            if d.replica_load.len() == par.dp as usize {
                out.load.push(d.replica_load.clone());
                out.heaviest.push(d.heaviest_replica);
            } else {
                // A digest made without its ranks' compute (a duration only).
                out.load.push(vec![f64::NAN; par.dp as usize]);
                out.heaviest.push(None);
            }
        }
        out
    }

    /// Whether replica `dp` (a rank's [`JobContext::replica`]) carried at least `min`
    /// times the median replica's work in iteration index `i`.
    pub fn heavy(&self, dp: u32, i: usize, min: f64) -> bool {
        self.load
            .get(i)
            .and_then(|l| l.get(dp as usize))
            .is_some_and(|&x| x >= min)
    }

    /// Whether any iteration had a replica at least `min` times the median's work.
    pub fn any_heavy(&self, min: f64) -> bool {
        self.heaviest.iter().flatten().any(|h| h.1 >= min)
    }
}

pub struct SequenceImbalanceDetector;

impl Detector for SequenceImbalanceDetector {
    fn id(&self) -> DetectorId {
        DetectorId::SequenceImbalance
    }
    fn summary(&self) -> &'static str {
        "data-parallel replicas with unequal compute in the same iteration (sequence-length imbalance)"
    }
    fn needs(&self) -> &'static str {
        "data-parallel rank of each rank (parallel layout) and compute ops"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        if a.ctx.job.parallel.as_ref().is_none_or(|p| p.dp <= 1) {
            return Outcome::NotEnoughData("needs the data-parallel layout (dp > 1)".into());
        }
        if a.live.is_some() {
            // Which replica gets the long sequences changes from step to step: a window's
            // totals average it away, and a replica slower in every step is a slow
            // replica (its ranks' slow_rank findings), not unequal data.
            return Outcome::NotEnoughData(
                "needs each iteration's compute per replica; a live window holds totals over its iterations".into(),
            );
        }
        let loads = a.replica_loads();
        let heavy_per_it: Vec<(u32, u32, f64)> = loads
            .heaviest
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.map(|(d, l)| (a.iterations[i], d, l)))
            .collect();
        if heavy_per_it.len() < 2 {
            return Outcome::NotEnoughData(
                "fewer than 2 iterations with compute on 2+ replicas".into(),
            );
        }
        let mut ratios: Vec<f64> = heavy_per_it.iter().map(|x| x.2).collect();
        let ratio = median(&mut ratios);
        if ratio < cfg.imbalance.min_ratio {
            return Outcome::Findings(vec![]);
        }
        let imbalanced: Vec<&(u32, u32, f64)> = heavy_per_it
            .iter()
            .filter(|x| x.2 >= cfg.imbalance.min_ratio)
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
                        EvidenceKey::HeaviestReplicaRatio,
                        *r,
                        Some(1.0),
                        Unit::Ratio,
                        format!("iteration {it}: DP rank {d} computed x{r:.2} the median replica"),
                    )
                })
                .collect(),
            action: "balance tokens, not samples, across data-parallel ranks: sequence packing, length-aware batching or sorting within the global batch".into(),
            iterations: imbalanced.iter().map(|x| x.0).collect(),
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }])
    }
}
