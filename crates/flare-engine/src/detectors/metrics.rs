//! Flare's (XPUTimer's) aggregated metrics per rank, compared across ranks, and NVIDIA-style
//! performance scores.
//!
//! Per rank over the window: achieved FLOPS of its compute kernels, bus bandwidth of its
//! collectives (bytes x NCCL's bus factor over transfer time), the share of its kernels
//! launched just in time (a steep issue-latency CDF: the GPU waits for the CPU), the void
//! share (time with no traced op running), and throughput. Scores as
//! nvidia-resiliency-ext defines them: the *relative* score is the best peer's mean
//! kernel time over the rank's (1.0: as fast as the fastest peer), the *individual* score
//! the rank's own best iteration over its latest (1.0: as fast as it has been); a score
//! under 0.75 (configurable) is reported. Peers are ranks of the same pipeline stage.
//! Kernel times are taken per unit of the rank's data-parallel replica's work in that
//! iteration ([`ReplicaLoads`](super::imbalance::ReplicaLoads)), so longer sequences on a
//! replica do not read as its GPUs slowing down.

use super::cause::rank_cause;
use crate::stats::{confidence, median, median_mad};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit};

/// The metrics detector's threshold (its outlier tests use [`super::slow_rank::SlowRankConfig`]).
#[derive(Clone, Debug)]
pub struct MetricsConfig {
    /// A rank's relative or individual performance score (nvidia-resiliency-ext's: best
    /// peer's or its own best kernel time over its own) below this is reported.
    pub min_relative_score: f64,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            min_relative_score: 0.75,
        }
    }
}

pub struct MetricsDetector;

/// One rank's metrics over the window (the findings document's type).
pub use flare_model::RankMetrics;

/// Sums over the window of one rank's figures.
#[derive(Clone, Copy, Default)]
struct Acc {
    flops: f64,
    flops_ns: f64,
    bus: f64,
    bus_ns: f64,
    busy: f64,
    span: f64,
    spans: u32,
    issued: u64,
    immediate: u64,
    best: f64,
    latest: f64,
}

/// Every rank's metrics over the window, in rank-index order.
pub fn rank_metrics(a: &Analysis) -> Vec<RankMetrics> {
    let n_its = a.n_its();
    let n = a.n_ranks();
    // Iteration by iteration: each digest's ranks lie together in memory.
    let mut acc = vec![
        Acc {
            best: f64::INFINITY,
            latest: f64::NAN,
            ..Acc::default()
        };
        n
    ];
    let mut means: Vec<f64> = vec![f64::NAN; n * n_its];
    for (i, d) in a.digests.iter().enumerate() {
        for (ri, r) in d.rank_figures.iter().enumerate().take(n) {
            let x = &mut acc[ri];
            x.flops += r.flops;
            x.flops_ns += r.flops_ns;
            x.bus += r.bus_bytes;
            x.bus_ns += r.bus_ns;
            if !r.span_ns.is_nan() {
                x.busy += r.busy_ns;
                x.span += r.span_ns;
                x.spans += 1;
            }
            x.issued += r.issued as u64;
            x.immediate += r.immediate as u64;
            // Mean kernel time of the iteration, per unit of its replica's work.
            if !r.kernel_ns.is_nan() {
                let k = r.kernel_ns;
                means[ri * n_its + i] = k;
                // The individual score compares finished iterations only: the one a
                // hang or the end of the trace cut short ran some of its kernels, not
                // its usual mix, and is no sign that the GPU slowed down.
                if !r.span_ns.is_nan() {
                    x.best = x.best.min(k);
                    x.latest = k;
                }
            }
        }
    }
    let mut buf: Vec<f64> = Vec::with_capacity(n_its);
    let window_mean: Vec<f64> = (0..n)
        .map(|ri| {
            buf.clear();
            buf.extend(
                means[ri * n_its..(ri + 1) * n_its]
                    .iter()
                    .copied()
                    .filter(|v| v.is_finite()),
            );
            if buf.is_empty() {
                f64::NAN
            } else {
                median(&mut buf)
            }
        })
        .collect();
    // The best (lowest) mean kernel time per peer group.
    let mut best: std::collections::HashMap<u32, f64> = Default::default();
    for (ri, &m) in window_mean.iter().enumerate() {
        if m.is_finite() && m > 0.0 {
            let b = best.entry(a.ctx.peer_group[ri]).or_insert(f64::INFINITY);
            *b = b.min(m);
        }
    }
    (0..n)
        .map(|ri| {
            let x = &acc[ri];
            // Individual score: its best iteration against its latest.
            let individual = if x.best.is_finite() && x.latest > 0.0 {
                x.best / x.latest
            } else {
                f64::NAN
            };
            let relative = match best.get(&a.ctx.peer_group[ri]) {
                Some(&b) if window_mean[ri] > 0.0 => b / window_mean[ri],
                _ => f64::NAN,
            };
            RankMetrics {
                rank: a.rank_id(ri),
                tflops: if x.flops_ns > 0.0 {
                    x.flops / x.flops_ns / 1e3
                } else {
                    f64::NAN
                },
                bus_gbps: if x.bus_ns > 0.0 {
                    x.bus / x.bus_ns
                } else {
                    f64::NAN
                },
                immediate_launch_share: if x.issued > 0 {
                    x.immediate as f64 / x.issued as f64
                } else {
                    f64::NAN
                },
                void_share: if x.span > 0.0 {
                    1.0 - x.busy / x.span
                } else {
                    f64::NAN
                },
                iterations_per_s: if x.span > 0.0 {
                    x.spans as f64 / (x.span / 1e9)
                } else {
                    f64::NAN
                },
                relative_score: relative,
                individual_score: individual,
            }
        })
        .collect()
}

impl Detector for MetricsDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Metrics
    }
    fn summary(&self) -> &'static str {
        "per-rank FLOPS, bus bandwidth, launch and void shares against peers; relative and individual performance scores"
    }
    fn needs(&self) -> &'static str {
        "compute ops (durations, FLOPs, launch times) or collectives with bytes, on 3 or more ranks"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        if a.n_ranks() < 3 || a.n_its() == 0 {
            return Outcome::NotEnoughData("fewer than 3 ranks".into());
        }
        let m = a.rank_metrics();
        if m.iter()
            .all(|r| r.relative_score.is_nan() && r.bus_gbps.is_nan())
        {
            return Outcome::NotEnoughData(
                "no compute kernel or collective with bytes to compare".into(),
            );
        }
        let mut findings = Vec::new();
        // FLOPS against stage peers: a robust outlier (the per-kernel view of a slow GPU).
        let flops_z = robust_low_z(a, m, |r| r.tflops);
        // Scores below the threshold.
        let mut low: Vec<(usize, f64)> = m
            .iter()
            .enumerate()
            .map(|(ri, r)| (ri, r.relative_score.min(r.individual_score)))
            .filter(|(_, s)| s.is_finite() && *s < cfg.metrics.min_relative_score)
            .collect();
        low.sort_by(|x, y| x.1.total_cmp(&y.1));
        if super::structural(a, &low.iter().map(|x| x.0).collect::<Vec<_>>()) {
            // Many ranks slower at once: a stage or replica with more work.
            return Outcome::Findings(vec![]);
        }
        let mut flagged: Vec<usize> = low.iter().map(|x| x.0).take(4).collect();
        let mut by_z: Vec<(usize, f64)> = flops_z
            .iter()
            .enumerate()
            .filter(|(_, z)| z.is_finite() && **z >= cfg.slow_rank.min_z)
            .map(|(ri, z)| (ri, *z))
            .collect();
        by_z.sort_by(|x, y| y.1.total_cmp(&x.1));
        for (ri, _) in by_z.into_iter().take(4) {
            if !flagged.contains(&ri) {
                flagged.push(ri);
            }
        }
        if super::structural(a, &flagged) {
            // Many ranks slower at once: a stage or replica with more work.
            return Outcome::Findings(vec![]);
        }
        let all: Vec<usize> = (0..a.n_its()).collect();
        for ri in flagged {
            let r = &m[ri];
            let rel_flops = peer_ratio(a, m, ri, |x| x.tflops);
            // Ignore tiny FLOPS differences that pass the z-test on near-identical peers.
            let score = r.relative_score.min(r.individual_score);
            if score >= cfg.metrics.min_relative_score
                && rel_flops.is_some_and(|x| x > 1.0 - cfg.slow_rank.min_excess)
            {
                continue;
            }
            // Host phases explain the rank only if they account for a good part of the
            // delay it made (its self-time excess over the window), as for slow_rank: with
            // no delay to weigh them against, any host-phase noise would win.
            let delay: f64 = a
                .digests
                .iter()
                .map(|d| d.self_time[ri].excess_ns)
                .filter(|x| x.is_finite())
                .sum();
            let cause = rank_cause(a, cfg, ri, &all, delay.max(0.0));
            let mut evidence = vec![
                Evidence::new(
                    EvidenceKey::RelativeScore,
                    r.relative_score,
                    Some(cfg.metrics.min_relative_score),
                    Unit::None,
                    "the best peer's mean kernel time over its own (nvidia-resiliency-ext's relative score; 1.0: as fast as the fastest rank of its stage)".into(),
                )
                .decisive_if(r.relative_score < cfg.metrics.min_relative_score),
                Evidence::new(
                    EvidenceKey::IndividualScore,
                    r.individual_score,
                    Some(cfg.metrics.min_relative_score),
                    Unit::None,
                    "its own best iteration's mean kernel time over its latest (1.0: as fast as it has been)".into(),
                )
                .decisive_if(r.individual_score < cfg.metrics.min_relative_score),
            ];
            if let Some(x) = rel_flops {
                evidence.push(
                    Evidence::new(
                        EvidenceKey::TflopsRatio,
                        x,
                        Some(1.0),
                        Unit::Ratio,
                        format!(
                        "achieved FLOPS of its kernels ({:.1} TFLOPS) over its stage peers' median",
                        r.tflops
                    ),
                    )
                    .decisive_if(x < 1.0 - cfg.slow_rank.min_excess),
                );
            }
            if let Some(x) = peer_ratio(a, m, ri, |x| x.bus_gbps) {
                evidence.push(Evidence::new(
                    EvidenceKey::BusBandwidthRatio,
                    x,
                    Some(1.0),
                    Unit::Ratio,
                    format!(
                        "bus bandwidth of its collectives ({:.1} GB/s) over its peers' median",
                        r.bus_gbps
                    ),
                ));
            }
            if r.void_share.is_finite() {
                evidence.push(Evidence::new(
                    EvidenceKey::VoidShare,
                    r.void_share,
                    peer_median(a, m, ri, |x| x.void_share),
                    Unit::None,
                    "share of its iterations with no traced op running; baseline: its peers' median".into(),
                ));
            }
            let rank = r.rank;
            let mut culprit = a.ctx.rank_culprit(cause.component, rank);
            culprit.score = 1.0;
            let what = cause.what.clone();
            evidence.extend(cause.evidence);
            findings.push(Finding {
                kind: cause.kind,
                // A low score against the fastest peer, while its ops run at the speed of
                // the median peer (the cause says so), is the fastest peer's luck, not a
                // fault. CPU ops on shared cores vary with scheduling by tens of percent:
                // scores alone are no verdict there (the arrival-based detectors give it),
                // but op counts (extra work) do not vary with scheduling.
                severity: if cause.kind == FindingKind::SlowRank
                    || (a.ctx.meta.cpu_compute && cause.kind != FindingKind::ExtraWork)
                {
                    Severity::Info
                } else {
                    Severity::Warning
                },
                summary: format!(
                    "rank {rank} runs its {} at {:.0}% of the fastest peer's speed{} through {what} ({})",
                    if a.ctx.meta.cpu_compute { "compute ops" } else { "kernels" },
                    r.relative_score * 100.0,
                    if r.individual_score < cfg.metrics.min_relative_score {
                        format!(", {:.0}% of its own best", r.individual_score * 100.0)
                    } else {
                        String::new()
                    },
                    culprit.describe()
                ),
                confidence: confidence((1.0 - score).max(0.0) / 0.05 + flops_z[ri].max(0.0) / 6.0, 2.0),
                culprits: vec![culprit],
                evidence,
                action: cause.action,
                iterations: vec![],
                detector: self.id(),
                corroborated_by: vec![],
                failure: None,
            });
        }
        Outcome::Findings(findings)
    }
}

/// The rank's value over the median of its peers' (same peer group).
fn peer_ratio(
    a: &Analysis,
    m: &[RankMetrics],
    ri: usize,
    f: impl Fn(&RankMetrics) -> f64,
) -> Option<f64> {
    let own = f(&m[ri]);
    let med = peer_median(a, m, ri, f)?;
    (own.is_finite() && med > 0.0).then(|| own / med)
}

fn peer_median(
    a: &Analysis,
    m: &[RankMetrics],
    ri: usize,
    f: impl Fn(&RankMetrics) -> f64,
) -> Option<f64> {
    let g = a.ctx.peer_group[ri];
    let mut v: Vec<f64> = m
        .iter()
        .enumerate()
        .filter(|(r, x)| *r != ri && a.ctx.peer_group[*r] == g && f(x).is_finite())
        .map(|(_, x)| f(x))
        .collect();
    (!v.is_empty()).then(|| median(&mut v))
}

/// Per rank: how many robust deviations below its peer group's median it sits (higher:
/// slower). The deviation is floored at 0.5% of the median.
fn robust_low_z(a: &Analysis, m: &[RankMetrics], f: impl Fn(&RankMetrics) -> f64) -> Vec<f64> {
    let mut groups: std::collections::HashMap<u32, Vec<f64>> = Default::default();
    for (ri, r) in m.iter().enumerate() {
        let v = f(r);
        if v.is_finite() {
            groups.entry(a.ctx.peer_group[ri]).or_default().push(v);
        }
    }
    let stats: std::collections::HashMap<u32, (f64, f64)> = groups
        .into_iter()
        .filter(|(_, v)| v.len() >= 3)
        .map(|(g, v)| {
            let (med, mad) = median_mad(&v);
            (g, (med, mad.max(0.005 * med.abs())))
        })
        .collect();
    m.iter()
        .enumerate()
        .map(|(ri, r)| match stats.get(&a.ctx.peer_group[ri]) {
            Some(&(med, sd)) if sd > 0.0 && f(r).is_finite() => (med - f(r)) / sd,
            _ => f64::NAN,
        })
        .collect()
}
