//! The published methods of the tools Flare is compared with, implemented here so that
//! the accuracy benchmark can run them on the same traces. They are baselines, not
//! Flare's detectors: each follows its tool's own definition, limitations included.
//!
//! - [`hta_stragglers`]: Holistic Trace Analysis' straggler heuristic
//!   (`hta/analyzers/straggler.py`, `find_stragglers_with_late_start_comm_kernels`):
//!   among communication kernels longer than 1% of the mean iteration, the last one per
//!   (rank, stream, iteration, name); the (stream, name) whose normalised duration varies
//!   most across ranks is the dominant kernel; in each iteration the `k` ranks that start
//!   it latest are stragglers, and ranks are ranked by how often they were.
//! - [`nvrx_scores`]: NVIDIA nvidia-resiliency-ext's straggler detection
//!   (`straggler/reporting.py`): per rank, a GPU *relative* score (for each non-NCCL
//!   kernel, the lowest median over ranks divided by this rank's median, averaged with
//!   the kernel's total time as weight, kernels that some rank did not run skipped), an
//!   *individual* score (the same against the rank's own best median over earlier report
//!   intervals, one interval per iteration here), and the same two scores per section
//!   (host phases, which users mark as sections); a rank whose score falls below 0.75 is
//!   a straggler.

use flare_engine::stats::median;
use flare_model::{GroupKind, Op, OpKind, Trace};
use std::collections::{BTreeMap, HashMap};

/// HTA's potential stragglers: (rank, iterations in which it was among the `k` latest to
/// start the dominant communication kernel), most often first (ties: the later mean
/// start first). Empty when the trace has no communication kernel long enough.
pub fn hta_stragglers(trace: &Trace, k: usize) -> Vec<(u32, u32)> {
    let its = trace.iterations_with_ops();
    if its.len() < 2 {
        return vec![];
    }
    let (mut t_min, mut t_max) = (i64::MAX, i64::MIN);
    for r in &trace.ranks {
        for o in &r.ops {
            t_min = t_min.min(o.start_ns);
            if let Some(e) = o.end() {
                t_max = t_max.max(e);
            }
        }
    }
    if t_max <= t_min {
        return vec![];
    }
    let mean_iter = (t_max - t_min) as f64 / its.len() as f64;
    let min_dur = 0.01 * mean_iter;
    // The stream a kernel runs on: NCCL runs each process group on its own stream.
    let stream = |o: &Op| -> u8 {
        trace
            .communicators
            .get(o.comm as usize)
            .map_or(255, |c| group_code(c.kind))
    };
    // Last long communication kernel per (rank, stream, iteration, name), skipping the
    // first iteration as HTA does.
    let mut last: HashMap<(u32, u8, u32, u32), (i64, i64)> = HashMap::new();
    for r in &trace.ranks {
        for o in &r.ops {
            if !o.kind.is_sync() || o.iteration == its[0] {
                continue;
            }
            let Some(d) = o.duration() else { continue };
            if (d as f64) < min_dur {
                continue;
            }
            let e = last
                .entry((r.rank, stream(o), o.iteration, o.name))
                .or_insert((o.start_ns, d));
            if o.start_ns >= e.0 {
                *e = (o.start_ns, d);
            }
        }
    }
    if last.is_empty() {
        return vec![];
    }
    // The (stream, name) with the largest mean (over iterations) of the standard
    // deviation across ranks of the normalised duration.
    let mut per_key_it: HashMap<(u8, u32, u32), Vec<f64>> = HashMap::new();
    for (&(_, s, it, name), &(_, d)) in &last {
        per_key_it
            .entry((s, name, it))
            .or_default()
            .push(d as f64 / mean_iter);
    }
    let mut per_key: BTreeMap<(u8, u32), Vec<f64>> = BTreeMap::new();
    for ((s, name, _), v) in &per_key_it {
        if v.len() >= 2 {
            per_key.entry((*s, *name)).or_default().push(sample_std(v));
        }
    }
    let Some((&dominant, _)) = per_key.iter().max_by(|a, b| {
        let ma = a.1.iter().sum::<f64>() / a.1.len() as f64;
        let mb = b.1.iter().sum::<f64>() / b.1.len() as f64;
        ma.total_cmp(&mb)
    }) else {
        return vec![];
    };
    // Per iteration, the k ranks that started it latest.
    let mut starts: BTreeMap<u32, Vec<(i64, u32)>> = BTreeMap::new();
    for (&(rank, s, it, name), &(ts, _)) in &last {
        if (s, name) == dominant {
            starts.entry(it).or_default().push((ts, rank));
        }
    }
    let mut count: BTreeMap<u32, (u32, f64, u32)> = BTreeMap::new();
    for v in starts.values_mut() {
        v.sort_unstable_by(|a, b| b.cmp(a));
        for (i, &(ts, rank)) in v.iter().enumerate() {
            let e = count.entry(rank).or_default();
            e.1 += (ts - t_min) as f64 / mean_iter;
            e.2 += 1;
            if i < k.max(1) {
                e.0 += 1;
            }
        }
    }
    let mut out: Vec<(u32, u32, f64)> = count
        .into_iter()
        .filter(|(_, c)| c.0 > 0)
        .map(|(r, c)| (r, c.0, c.1 / c.2.max(1) as f64))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.total_cmp(&a.2)));
    out.into_iter().map(|(r, c, _)| (r, c)).collect()
}

fn group_code(k: GroupKind) -> u8 {
    match k {
        GroupKind::Tp => 0,
        GroupKind::Cp => 1,
        GroupKind::Ep => 2,
        GroupKind::Dp => 3,
        GroupKind::Pp => 4,
        GroupKind::World => 5,
        GroupKind::Other => 6,
    }
}

fn sample_std(v: &[f64]) -> f64 {
    if v.len() < 2 {
        return 0.0;
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64).sqrt()
}

/// nvidia-resiliency-ext's performance scores of one rank (1.0: as fast as the reference).
#[derive(Clone, Debug, PartialEq)]
pub struct NvrxRankScores {
    pub rank: u32,
    /// Against the fastest rank's medians (NaN without common kernels).
    pub gpu_relative: f64,
    /// Against its own best interval (the lowest over intervals).
    pub gpu_individual: f64,
    /// The lowest section relative score and its section.
    pub section_relative: f64,
    pub section_individual: f64,
}

impl NvrxRankScores {
    /// The lowest of its scores.
    pub fn min(&self) -> f64 {
        [
            self.gpu_relative,
            self.gpu_individual,
            self.section_relative,
            self.section_individual,
        ]
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(f64::INFINITY, f64::min)
    }
}

/// Per rank: per kernel (compute op name) the durations, per section (host op name) the
/// durations, each with its iteration.
struct Samples {
    kernels: HashMap<u32, Vec<(u32, f64)>>,
    sections: HashMap<u32, Vec<(u32, f64)>>,
}

/// The scores NVRx would report for every rank of a trace.
pub fn nvrx_scores(trace: &Trace) -> Vec<NvrxRankScores> {
    let samples: Vec<Samples> = trace
        .ranks
        .iter()
        .map(|r| {
            let mut s = Samples {
                kernels: HashMap::new(),
                sections: HashMap::new(),
            };
            for o in &r.ops {
                let Some(d) = o.duration() else { continue };
                match o.kind {
                    // NCCL kernels are left out, as NVRx does.
                    OpKind::Compute => s
                        .kernels
                        .entry(o.name)
                        .or_default()
                        .push((o.iteration, d as f64)),
                    k if k.is_host() => s
                        .sections
                        .entry(o.name)
                        .or_default()
                        .push((o.iteration, d as f64)),
                    _ => {}
                }
            }
            s
        })
        .collect();
    let kernels = relative_and_individual(&samples, |s| &s.kernels, true);
    let sections = relative_and_individual(&samples, |s| &s.sections, false);
    trace
        .ranks
        .iter()
        .enumerate()
        .map(|(i, r)| NvrxRankScores {
            rank: r.rank,
            gpu_relative: kernels[i].0,
            gpu_individual: kernels[i].1,
            section_relative: sections[i].0,
            section_individual: sections[i].1,
        })
        .collect()
}

/// Per rank: (relative score, individual score). `weighted`: one score over all names
/// weighted by total time (the GPU score); else the lowest score over names (sections
/// are scored one by one).
fn relative_and_individual(
    samples: &[Samples],
    of: impl Fn(&Samples) -> &HashMap<u32, Vec<(u32, f64)>>,
    weighted: bool,
) -> Vec<(f64, f64)> {
    // Reference: the lowest median over ranks, for names every rank has.
    let mut reference: HashMap<u32, f64> = HashMap::new();
    let mut seen: HashMap<u32, usize> = HashMap::new();
    let medians: Vec<HashMap<u32, f64>> = samples
        .iter()
        .map(|s| {
            of(s)
                .iter()
                .map(|(&name, v)| {
                    let mut d: Vec<f64> = v.iter().map(|x| x.1).collect();
                    (name, median(&mut d))
                })
                .collect()
        })
        .collect();
    for m in &medians {
        for (&name, &v) in m {
            let r = reference.entry(name).or_insert(f64::INFINITY);
            *r = r.min(v);
            *seen.entry(name).or_default() += 1;
        }
    }
    reference.retain(|name, _| seen[name] == samples.len());
    samples
        .iter()
        .zip(&medians)
        .map(|(s, m)| {
            let (mut rel_sum, mut w_sum, mut rel_min) = (0.0, 0.0, f64::INFINITY);
            for (name, v) in of(s) {
                let (Some(&r), Some(&med)) = (reference.get(name), m.get(name)) else {
                    continue;
                };
                if med <= 0.0 {
                    continue;
                }
                let score = r / med;
                let w: f64 = v.iter().map(|x| x.1).sum();
                rel_sum += score * w;
                w_sum += w;
                rel_min = rel_min.min(score);
            }
            let relative = if weighted {
                if w_sum > 0.0 {
                    rel_sum / w_sum
                } else {
                    f64::NAN
                }
            } else if rel_min.is_finite() {
                rel_min
            } else {
                f64::NAN
            };
            (relative, individual(of(s), weighted))
        })
        .collect()
}

/// The lowest, over report intervals (iterations), of the score against the rank's own
/// best median in earlier intervals.
fn individual(per_name: &HashMap<u32, Vec<(u32, f64)>>, weighted: bool) -> f64 {
    let mut by_it: BTreeMap<u32, HashMap<u32, Vec<f64>>> = BTreeMap::new();
    for (&name, v) in per_name {
        for &(it, d) in v {
            by_it
                .entry(it)
                .or_default()
                .entry(name)
                .or_default()
                .push(d);
        }
    }
    let mut best: HashMap<u32, f64> = HashMap::new();
    let mut lowest = f64::INFINITY;
    for (_, names) in by_it {
        let meds: Vec<(u32, f64, f64)> = names
            .into_iter()
            .map(|(name, mut v)| {
                let total: f64 = v.iter().sum();
                (name, median(&mut v), total)
            })
            .collect();
        for &(name, med, _) in &meds {
            let b = best.entry(name).or_insert(med);
            *b = b.min(med);
        }
        let (mut s, mut w, mut m) = (0.0, 0.0, f64::INFINITY);
        for &(name, med, total) in &meds {
            if med > 0.0 {
                let score = best[&name] / med;
                s += score * total;
                w += total;
                m = m.min(score);
            }
        }
        let score = if weighted && w > 0.0 { s / w } else { m };
        if score.is_finite() {
            lowest = lowest.min(score);
        }
    }
    if lowest.is_finite() {
        lowest
    } else {
        f64::NAN
    }
}

impl NvrxRankScores {
    /// The lower of its GPU scores (kernels only, no user sections).
    pub fn min_gpu(&self) -> f64 {
        [self.gpu_relative, self.gpu_individual]
            .into_iter()
            .filter(|v| v.is_finite())
            .fold(f64::INFINITY, f64::min)
    }
}

/// NVRx's stragglers: ranks with a score below `threshold`, the lowest score first.
pub fn nvrx_stragglers(scores: &[NvrxRankScores], threshold: f64) -> Vec<(u32, f64)> {
    stragglers_by(scores, threshold, NvrxRankScores::min)
}

/// NVRx's stragglers by GPU scores only (the default of its Megatron integration; sections
/// are what a user chooses to time).
pub fn nvrx_gpu_stragglers(scores: &[NvrxRankScores], threshold: f64) -> Vec<(u32, f64)> {
    stragglers_by(scores, threshold, NvrxRankScores::min_gpu)
}

fn stragglers_by(
    scores: &[NvrxRankScores],
    threshold: f64,
    score: impl Fn(&NvrxRankScores) -> f64,
) -> Vec<(u32, f64)> {
    let mut v: Vec<(u32, f64)> = scores
        .iter()
        .map(|s| (s.rank, score(s)))
        .filter(|(_, m)| *m < threshold)
        .collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_sim::{fault::FaultKind, simulate, SimConfig};

    #[test]
    fn both_baselines_see_a_clearly_slow_gpu() {
        let mut cfg = SimConfig::for_scale(64);
        cfg.iterations = 8;
        cfg.fault = FaultKind::SlowGpu;
        // The first seed whose slow GPU is well below NVRx's 0.75 threshold.
        let out = (1..100)
            .map(|seed| {
                cfg.seed = seed;
                simulate(&cfg).unwrap()
            })
            .find(|out| match &out.truth.fault.as_ref().unwrap().fault {
                flare_sim::fault::Fault::SlowGpu { factor, .. } => *factor > 1.6,
                _ => false,
            })
            .expect("a seed with a clearly slow GPU");
        let rank = out.truth.culprits[0].rank.unwrap();
        let s = nvrx_stragglers(&nvrx_scores(&out.trace), 0.75);
        assert_eq!(s.first().map(|x| x.0), Some(rank), "{s:?}");
        assert!(!hta_stragglers(&out.trace, 2).is_empty());
        // A healthy job: no GPU scores low; HTA still names ranks (it always does).
        cfg.fault = FaultKind::None;
        cfg.spike_probability = 0.0;
        let out = simulate(&cfg).unwrap();
        let scores = nvrx_scores(&out.trace);
        assert!(scores
            .iter()
            .all(|s| s.gpu_relative > 0.75 && s.gpu_individual > 0.75));
        assert!(!hta_stragglers(&out.trace, 2).is_empty());
    }
}
