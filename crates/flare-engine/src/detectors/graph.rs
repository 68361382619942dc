//! Cross-iteration ranking of what the graph search ([`crate::graph`]) blamed, with a
//! topology-aware decay for shared fabric elements.
//!
//! Every iteration's search credits ranks (their own work) and communicators (their
//! paths) with the waiting and slow transfers they caused. Over the window:
//!
//! - a rank whose blame is a clear share of the job's time is a device finding, explained
//!   by its own figures (slow GPU, host stall, launch-bound). When many ranks share the
//!   blame evenly (a whole stage, a data-parallel replica) the cause is structural, not a
//!   device, and is left to the imbalance detectors;
//! - communicators' blame is spread over the elements their paths cross, and each
//!   element's score is decayed by the share of the communicators crossing it that were
//!   *not* slow, squared: a NIC whose every group is slow keeps its score, the leaf switch
//!   above it (crossed by many healthy groups too) loses most of it, so shared switches
//!   are not over-blamed; a congested switch keeps its score because everything through
//!   it is slow, while each NIC under it explains only part of the slow groups.
//!
//! Blame that appears in some iterations only (an intermittent fault) counts when it is a
//! clear share of those iterations, in two of them at least. A path slowdown that comes
//! and goes must also be strong (transfers at least twice as long), which keeps transient
//! background traffic of other jobs out.

use super::cause::rank_cause;
use super::iteration_ranges;
use crate::graph::Root;
use crate::stats::{confidence, median};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{DetectorId, Evidence, EvidenceKey, Finding, PathElement, Severity, Unit};
use std::collections::HashMap;

/// When the graph search's blame is reported (the topology detector weighs paths by the
/// same bound).
#[derive(Clone, Debug)]
pub struct GraphConfig {
    /// A rank or path is to blame when the waiting it caused is at least this share of
    /// the job's time over the window...
    pub min_blame_share: f64,
    /// ...or at least this share of the time of two or more iterations (intermittent).
    pub min_iteration_blame_share: f64,
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig {
            min_blame_share: 0.005,
            min_iteration_blame_share: 0.02,
        }
    }
}

pub struct GraphDetector;

impl Detector for GraphDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Graph
    }
    fn localizes(&self) -> bool {
        true
    }
    fn summary(&self) -> &'static str {
        "abnormal ops traced back through the op/communicator graph to the rank or path that caused them (Holmes)"
    }
    fn needs(&self) -> &'static str {
        "collectives or P2P with communicator and sequence on their members, arrival and end times"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let n_its = a.n_its();
        let n_ranks = a.n_ranks();
        if n_ranks < 3 {
            // Abnormal ops are judged against the same op on other ranks.
            return Outcome::NotEnoughData(format!(
                "{n_ranks} ranks with data; at least 3 are needed"
            ));
        }
        if n_its == 0 || a.digests.iter().all(|d| d.complete_instances == 0) {
            return Outcome::NotEnoughData(
                "no collective or P2P exchange that every member recorded and completed".into(),
            );
        }
        // The job's time per iteration, to weigh blame against.
        let mut known: Vec<f64> = a.iteration_ns.iter().flatten().copied().collect();
        let typical = if known.is_empty() {
            0.0
        } else {
            median(&mut known)
        };
        let rank_time: Vec<f64> = a
            .iteration_ns
            .iter()
            .map(|t| t.unwrap_or(typical) * n_ranks as f64)
            .collect();
        let total_time: f64 = rank_time.iter().sum();
        if total_time <= 0.0 {
            return Outcome::NotEnoughData("no iteration with a duration".into());
        }
        let mut rank_blame = vec![0.0f64; n_ranks];
        let mut rank_per_it: HashMap<usize, Vec<f64>> = HashMap::new();
        // Per iteration, the rank blamed most and its blame over the next rank's.
        let mut top_rank: Vec<Option<(usize, f64)>> = vec![None; n_its];
        let mut comm_blame: HashMap<u32, Vec<f64>> = HashMap::new();
        // A rank blamed in an iteration where its whole data-parallel replica carried
        // more work (longer sequences) waited on its own data, not on a slow device: as
        // for slow_rank, that blame is left to the sequence-imbalance detector.
        let loads = a.replica_loads();
        let replica_heavy = loads.any_heavy(cfg.imbalance.min_ratio);
        let explained = |r: usize, i: usize| {
            replica_heavy
                && a.ctx
                    .replica
                    .get(r)
                    .is_some_and(|&dp| loads.heavy(dp, i, cfg.imbalance.min_ratio))
        };
        for (i, d) in a.digests.iter().enumerate() {
            let (mut best, mut second, mut who) = (0.0f64, 0.0f64, None);
            for b in &d.blame {
                match b.root {
                    Root::Rank(ri) => {
                        let ri = ri as usize;
                        if ri >= n_ranks || explained(ri, i) {
                            continue;
                        }
                        rank_blame[ri] += b.ns;
                        rank_per_it.entry(ri).or_insert_with(|| vec![0.0; n_its])[i] += b.ns;
                        if b.ns > best {
                            second = best;
                            best = b.ns;
                            who = Some(ri);
                        } else {
                            second = second.max(b.ns);
                        }
                    }
                    Root::Comm(c) => {
                        comm_blame.entry(c).or_insert_with(|| vec![0.0; n_its])[i] += b.ns;
                    }
                }
            }
            top_rank[i] = who.map(|r| (r, if second > 0.0 { best / second } else { 10.0 }));
        }
        let mut findings = Vec::new();
        let rb = RankBlame {
            total: rank_blame,
            per_it: rank_per_it,
            top: top_rank,
        };
        if let Some(f) = self.rank_finding(a, cfg, &rb, &rank_time, total_time) {
            findings.push(f);
        }
        if let Some(f) = self.path_finding(a, cfg, &comm_blame, &rank_time, total_time) {
            findings.push(f);
        }
        Outcome::Findings(findings)
    }
}

/// What the graph search blamed on ranks over the window.
struct RankBlame {
    /// Per rank index: blame summed over the window, ns.
    total: Vec<f64>,
    /// Per blamed rank index: blame per iteration.
    per_it: HashMap<usize, Vec<f64>>,
    /// Per iteration: the rank blamed most, and its blame over the next rank's.
    top: Vec<Option<(usize, f64)>>,
}

/// A rank's blame must be this many times the next rank's to point at it.
const RUNNER_UP: f64 = 1.5;

/// Share of a job's rank time below which the waiting blamed on one rank of a job
/// computing on CPUs is an `info` in a trace: where ranks share cores, the scheduler's
/// draw alone puts this much on one rank (profiled healthy 4-rank Gloo pipelines on 2
/// cores: 14-24% in 3 of 6 runs; the faults injected on the same jobs: 54-71%). Live,
/// the next window confirms a mild verdict instead.
const CPU_BLAME_NOISE: f64 = 0.30;

/// Blame that keeps this many GPUs' worth of time waiting (over the window) is worth
/// reporting when it points at the same rank or path in most iterations.
const MIN_GPUS_WORTH: f64 = 0.1;

/// In one iteration, blame worth this many GPUs idle for the iteration weighs on it.
const MIN_ITERATION_GPUS: f64 = 0.25;

/// Blame (rank time, ns) as the number of GPUs it would keep idle for the whole of a
/// stretch of iterations whose rank time (summed over `n_ranks`) is `rank_time`.
fn gpus_worth(blame: f64, rank_time: f64, n_ranks: usize) -> f64 {
    let window = rank_time / n_ranks.max(1) as f64;
    if window > 0.0 {
        blame / window
    } else {
        0.0
    }
}

/// Iterations where a blame series is a clear share of the iteration's time.
fn hit_iterations(per_it: &[f64], rank_time: &[f64], min_share: f64) -> Vec<usize> {
    (0..per_it.len())
        .filter(|&i| rank_time[i] > 0.0 && per_it[i] / rank_time[i] >= min_share)
        .collect()
}

impl GraphDetector {
    fn rank_finding(
        &self,
        a: &Analysis,
        cfg: &EngineConfig,
        rb: &RankBlame,
        rank_time: &[f64],
        total_time: f64,
    ) -> Option<Finding> {
        let (blame, per_it, top_rank) = (&rb.total, &rb.per_it, &rb.top);
        // Cross-iteration evidence first: a rank blamed most in most iterations
        // is the one, whatever a single iteration's spike adds to another rank's total.
        // A job's share shrinks with its size while a device's victims (its groups) do
        // not grow with it, so this needs only GPUs' worth of waiting; chance makes a
        // different rank the most blamed in each iteration of a healthy job.
        let mut most: HashMap<usize, Vec<f64>> = HashMap::new();
        for &(r, over_next) in top_rank.iter().flatten() {
            most.entry(r).or_default().push(over_next);
        }
        let consistent = most
            .into_iter()
            .filter(|(r, v)| {
                v.len() * 2 > a.n_its()
                    && gpus_worth(blame[*r], total_time, a.n_ranks()) >= MIN_GPUS_WORTH
            })
            .max_by(|x, y| x.1.len().cmp(&y.1.len()).then(y.0.cmp(&x.0)));
        let (top, w) = match &consistent {
            Some((r, _)) => (*r, blame[*r]),
            None => blame
                .iter()
                .copied()
                .enumerate()
                .max_by(|x, y| x.1.total_cmp(&y.1).then(y.0.cmp(&x.0)))?,
        };
        if w <= 0.0 {
            return None;
        }
        let sharing_ranks: Vec<usize> = (0..blame.len()).filter(|&r| blame[r] >= 0.5 * w).collect();
        let sharing = sharing_ranks.len();
        if super::structural(a, &sharing_ranks) {
            return None;
        }
        let share = w / total_time;
        let series = &per_it[&top];
        // Iterations it weighs on: a clear share of the iteration, or (scale-free) the
        // rank blamed most by far, with GPUs' worth of waiting.
        let mut hits = hit_iterations(series, rank_time, cfg.graph.min_iteration_blame_share);
        for (i, t) in top_rank.iter().enumerate() {
            if t.is_some_and(|(r, over_next)| r == top && over_next >= 2.0)
                && gpus_worth(series[i], rank_time[i], a.n_ranks()) >= MIN_ITERATION_GPUS
                && !hits.contains(&i)
            {
                hits.push(i);
            }
        }
        hits.sort_unstable();
        let gpus = gpus_worth(w, total_time, a.n_ranks());
        let top_its = top_rank
            .iter()
            .filter(|t| t.is_some_and(|(r, _)| r == top))
            .count();
        let sustained = consistent.is_some()
            || (share >= cfg.graph.min_blame_share && hits.len() * 2 > a.n_its());
        if !sustained && hits.len() < 2 {
            return None;
        }
        let scope: Vec<usize> = if sustained {
            (0..a.n_its()).collect()
        } else {
            hits.clone()
        };
        let scoped: f64 = scope.iter().map(|&i| series[i]).sum();
        let scoped_time: f64 = scope.iter().map(|&i| rank_time[i]).sum();
        let scoped_gpus = gpus_worth(scoped, scoped_time, a.n_ranks());
        // The blame must point at one rank: a near tie says the search could not tell.
        // Over the window, or (consistent) in the iterations where it was blamed most.
        let runner_up = blame
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != top)
            .map(|(_, b)| *b)
            .fold(0.0, f64::max);
        let over_window = if runner_up > 0.0 { w / runner_up } else { 10.0 };
        let over_next = match &consistent {
            Some((_, v)) => median(&mut v.clone()).max(over_window),
            None => over_window,
        };
        if over_next < RUNNER_UP {
            return None;
        }
        let cause = rank_cause(a, cfg, top, &scope, scoped / a.n_ranks().max(1) as f64);
        let rank = a.rank_id(top);
        let its: Vec<u32> = if sustained {
            vec![]
        } else {
            hits.iter().map(|&i| a.iterations[i]).collect()
        };
        let abnormal: u32 = scope.iter().map(|&i| a.digests[i].abnormal_groups).sum();
        let mut evidence = vec![
            Evidence::new(
                EvidenceKey::BlameShare,
                scoped / scoped_time * 100.0,
                Some(cfg.graph.min_blame_share * 100.0),
                Unit::Percent,
                format!(
                    "the waiting it caused: {:.1} ms of rank time ({} iterations), traced back from abnormal ops through the collective/P2P graph to its own work",
                    scoped / 1e6,
                    scope.len()
                ),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::GpusWorthOfWaiting,
                scoped_gpus,
                Some(MIN_GPUS_WORTH),
                Unit::Gpus,
                format!(
                    "the same waiting as GPUs idle for the whole window; it was the rank blamed most in {top_its} of {} iterations",
                    a.n_its()
                ),
            ),
            Evidence::new(
                EvidenceKey::BlameOverRunnerUp,
                over_next,
                Some(RUNNER_UP),
                Unit::Ratio,
                format!(
                    "its blame over the next rank's ({}); {} rank(s) hold at least half of its blame",
                    if consistent.is_some() {
                        "over the window, or the median over the iterations it was blamed most"
                    } else {
                        "over the window"
                    },
                    sharing
                ),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::AbnormalOpGroups,
                abnormal as f64,
                None,
                Unit::OpGroups,
                format!(
                    "op groups (a rank's ops of one name on one communicator in one iteration) judged abnormal by the {} in those iterations",
                    method_name(cfg)
                ),
            ),
        ];
        evidence.extend(cause.evidence);
        let mut culprit = a.ctx.rank_culprit(cause.component, rank);
        culprit.score = 1.0;
        let c = over_next;
        // Ranks sharing cores take turns: in a trace of a job computing on CPUs, who
        // waited for whom moves with the scheduler's draw (see CPU_BLAME_NOISE).
        let noise =
            a.live.is_none() && a.ctx.meta.cpu_compute && scoped / scoped_time < CPU_BLAME_NOISE;
        Some(Finding {
            kind: cause.kind,
            severity: if cause.node_wide || noise {
                Severity::Info
            } else {
                Severity::Warning
            },
            summary: format!(
                "rank {rank} makes its peers wait {scoped_gpus:.1} {}s' worth of time ({:.2}% of the job's) through {}{} ({})",
                    super::cause::device(a),
                scoped / scoped_time * 100.0,
                cause.what,
                if its.is_empty() {
                    String::new()
                } else {
                    format!(" in iterations {}", iteration_ranges(&its))
                },
                culprit.describe()
            ),
            confidence: confidence(
                (scoped / scoped_time / cfg.graph.min_blame_share).max(gpus / MIN_GPUS_WORTH / 4.0)
                    * (c - 1.0).clamp(0.0, 10.0),
                4.0,
            ),
            culprits: vec![culprit],
            evidence,
            action: cause.action,
            iterations: its,
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        })
    }

    fn path_finding(
        &self,
        a: &Analysis,
        cfg: &EngineConfig,
        comm_blame: &HashMap<u32, Vec<f64>>,
        rank_time: &[f64],
        total_time: f64,
    ) -> Option<Finding> {
        if comm_blame.is_empty() {
            return None;
        }
        let fabric = a.ctx.fabric();
        // Per communicator, its transfers against the same op elsewhere in each iteration;
        // slow ones are slow over the window, or strongly in two iterations or more.
        let transfers = a.comm_transfers();
        let is_slow = |v: &[(u32, f32)]| {
            let mut all: Vec<f64> = v.iter().map(|x| x.1 as f64).collect();
            let strong = v
                .iter()
                .filter(|x| x.1 as f64 >= cfg.slow_path.min_transient_ratio)
                .count();
            median(&mut all) >= cfg.slow_path.min_transfer_ratio || strong >= 2
        };
        let mut slow: Vec<u32> = comm_blame
            .keys()
            .copied()
            .filter(|&c| {
                let v = transfers.of(c);
                !v.is_empty() && is_slow(v)
            })
            .collect();
        slow.sort_unstable();
        if slow.is_empty() {
            return None;
        }
        // Per element: blame of its slow communicators, how many of them, and how many
        // measured communicators cross it.
        let mut through: HashMap<PathElement, (f64, u32, Vec<f64>)> = HashMap::new();
        for &c in &slow {
            let Some(elements) = fabric.elements.get(c as usize) else {
                continue;
            };
            for &e in elements {
                let entry = through
                    .entry(e)
                    .or_insert_with(|| (0.0, 0, vec![0.0; a.n_its()]));
                entry.1 += 1;
                for (i, v) in comm_blame[&c].iter().enumerate() {
                    entry.0 += v;
                    entry.2[i] += v;
                }
            }
        }
        // Measured communicators through each element, from the element's side.
        let measured: HashMap<PathElement, u32> = through
            .keys()
            .map(|e| {
                let n = fabric.crossing.get(e).map_or(0, |cs| {
                    cs.iter().filter(|&&c| !transfers.of(c).is_empty()).count()
                });
                (*e, n as u32)
            })
            .filter(|&(_, n)| n > 0)
            .collect();
        // Topology-aware decay: the share of the element's measured communicators that
        // were slow, squared.
        let precision = |e: &PathElement, n_slow: u32| {
            n_slow as f64
                / measured
                    .get(e)
                    .copied()
                    .unwrap_or(n_slow)
                    .max(n_slow)
                    .max(1) as f64
        };
        let score = |e: &PathElement, w: f64, n_slow: u32| {
            let p = precision(e, n_slow);
            w * p * p
        };
        let (element, (w, n_slow, series)) = through
            .iter()
            .max_by(|x, y| {
                score(x.0, x.1 .0, x.1 .1)
                    .total_cmp(&score(y.0, y.1 .0, y.1 .1))
                    .then(y.0.cmp(x.0))
            })
            .map(|(e, v)| (*e, v.clone()))?;
        let share = w / total_time;
        let mut hits = hit_iterations(&series, rank_time, cfg.graph.min_iteration_blame_share);
        for (i, &b) in series.iter().enumerate() {
            if gpus_worth(b, rank_time[i], a.n_ranks()) >= MIN_ITERATION_GPUS && !hits.contains(&i)
            {
                hits.push(i);
            }
        }
        hits.sort_unstable();
        // How much slower its slow communicators' transfers were, per iteration.
        let through_element: Vec<u32> = slow
            .iter()
            .copied()
            .filter(|&c| fabric.elements[c as usize].binary_search(&element).is_ok())
            .collect();
        let ratio_in = |i: usize| -> f64 {
            let mut v: Vec<f64> = through_element
                .iter()
                .flat_map(|&c| transfers.of(c).iter())
                .filter(|(k, _)| *k as usize == i)
                .map(|(_, r)| *r as f64)
                .collect();
            if v.is_empty() {
                1.0
            } else {
                median(&mut v)
            }
        };
        // Scale-free alternative, as for ranks: GPUs' worth of waiting, on a path slow in
        // most iterations (a healthy path is slow in one at most, when another job's
        // traffic crosses it).
        let slow_its = (0..a.n_its())
            .filter(|&i| ratio_in(i) >= cfg.slow_path.min_transfer_ratio)
            .count();
        let gpus = gpus_worth(w, total_time, a.n_ranks());
        let sustained = (share >= cfg.graph.min_blame_share && hits.len() * 2 > a.n_its())
            || (gpus >= MIN_GPUS_WORTH && slow_its * 2 > a.n_its());
        let strong_hits: Vec<usize> = hits
            .iter()
            .copied()
            .filter(|&i| ratio_in(i) >= crate::graph::STRONG_PATH_RATIO as f64)
            .collect();
        if !sustained && strong_hits.len() < 2 {
            return None;
        }
        let scope: Vec<usize> = if sustained {
            (0..a.n_its()).collect()
        } else {
            strong_hits
        };
        let mut ratios: Vec<f64> = scope.iter().map(|&i| ratio_in(i)).collect();
        let ratio = median(&mut ratios);
        let scoped: f64 = scope.iter().map(|&i| series[i]).sum();
        let scoped_time: f64 = scope.iter().map(|&i| rank_time[i]).sum();
        let crossing = measured
            .get(&element)
            .copied()
            .unwrap_or(n_slow)
            .max(n_slow);
        let (kind, culprit, action) = super::slow_path::path_culprit(a.ctx, element);
        let its: Vec<u32> = if sustained {
            vec![]
        } else {
            scope.iter().map(|&i| a.iterations[i]).collect()
        };
        let precision = precision(&element, n_slow);
        Some(Finding {
            kind,
            severity: Severity::Warning,
            summary: format!(
                "{} is slow: transfers through it take x{ratio:.2} as long as the same ops elsewhere, costing the job {:.1}% of its time ({} of the {} communicators crossing it are slow{})",
                element.label(),
                scoped / scoped_time * 100.0,
                n_slow,
                crossing,
                if its.is_empty() {
                    String::new()
                } else {
                    format!(", iterations {}", iteration_ranges(&its))
                }
            ),
            confidence: confidence(
                (ratio - 1.0)
                    * precision
                    * (scoped / scoped_time / cfg.graph.min_blame_share).max(gpus / MIN_GPUS_WORTH / 4.0),
                1.0,
            ),
            culprits: vec![culprit],
            evidence: vec![
                Evidence::new(
                    EvidenceKey::TransferTimeRatio,
                    ratio,
                    Some(1.0),
                    Unit::Ratio,
                    "median transfer time (end minus last arrival) of its slow communicators over the same op on other communicators".into(),
                ),
                Evidence::new(
                    EvidenceKey::BlameShare,
                    scoped / scoped_time * 100.0,
                    Some(cfg.graph.min_blame_share * 100.0),
                    Unit::Percent,
                    "excess transfer time and the waiting it caused, traced through the collective/P2P graph".into(),
                ),
                Evidence::new(
                    EvidenceKey::SlowShareOfCrossingGroups,
                    precision,
                    None,
                    Unit::None,
                    format!(
                        "{n_slow} slow communicators cross it out of {crossing}: the decay that keeps a shared switch from being blamed for one NIC"
                    ),
                ),
            ],
            action: action.into(),
            iterations: its,
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        })
    }
}

fn method_name(cfg: &EngineConfig) -> &'static str {
    cfg.abnormal.describe()
}
