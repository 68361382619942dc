//! Live diagnosis of one window from the summaries node agents ship.
//!
//! Summaries carry per-rank aggregates, not events, so ranks are compared by their totals
//! rather than by collective arrivals. A rank that spends more time on its own work (time
//! outside collectives and P2P) than its peers arrives last at every collective: its peers
//! wait for it, so its own time *in* sync ops is shorter than theirs, which corroborates
//! the verdict. Peers are ranks that run the same kernels (in practice the same pipeline
//! stage), so stages that legitimately do different work are not compared with each other.
//! Watchdog hang records are grouped per op; for a collective, the ranks not stuck in it
//! are the likely cause.

use crate::stats::{confidence, median, median_mad};
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, HangRecord,
    OpKind, Severity, Unit, WindowSummary,
};
use std::collections::{BTreeMap, BTreeSet};

/// Thresholds of the live detectors. Defaults are the documented behaviour.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// A rank is slow when its own time exceeds its peers' median by this fraction...
    pub min_rank_excess: f64,
    /// ...and by this many robust standard deviations of its peers.
    pub min_rank_z: f64,
    /// Floor on the robust deviation, as a fraction of the median: near-identical ranks
    /// would otherwise turn sub-percent noise into huge z-scores.
    pub mad_floor: f64,
    /// A rank whose relative performance score (best peer's time / its own) is below
    /// this is reported.
    pub min_relative_score: f64,
    /// Fewest ranks with data (and fewest peers in a comparison) for a slow-rank verdict.
    pub min_ranks: usize,
    /// Peers whose own time (outside collectives) is below this share of the time they
    /// were observed did next to nothing in the window (a job starting or ending, ranks
    /// idle between phases): a few stray milliseconds must not read as a huge excess.
    pub min_own_share: f64,
    /// A slow-rank warning whose excess is under this fraction stands only when the
    /// previous window flagged the same rank too (see [`confirm_with_previous`]): a few
    /// seconds of a live job hold few iterations, and one window's 5-10% blip on one rank
    /// (a scheduling hiccup) is not a straggler. Stronger excesses are reported at once.
    pub confirm_below_excess: f64,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            min_rank_excess: 0.05,
            min_rank_z: 3.0,
            mad_floor: 0.01,
            min_relative_score: 0.75,
            min_ranks: 3,
            min_own_share: 0.01,
            confirm_below_excess: 0.15,
        }
    }
}

/// The live engine's answer for one window of one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveDiagnosis {
    /// Most important first: severity, then confidence.
    pub findings: Vec<Finding>,
    /// Whether the window held enough ranks to call it healthy when nothing was found.
    pub conclusive: bool,
    /// Ranks with data in the window.
    pub ranks: usize,
    /// What a person should know about the data itself (drops, skipped comparisons).
    pub notes: Vec<String>,
}

const DETECTOR_SLOW: DetectorId = DetectorId::LiveSlowRank;
const DETECTOR_SCORE: DetectorId = DetectorId::LiveScore;
const DETECTOR_HANG: DetectorId = DetectorId::LiveHang;
/// Most slow-rank findings per window; more than this is a job-wide pattern, and the
/// notes say how many were left out.
const MAX_SLOW_FINDINGS: usize = 8;

/// One rank's totals for the window.
struct RankAgg<'a> {
    rank: u32,
    pid: u32,
    node: &'a str,
    observed_ns: f64,
    iterations: usize,
    /// Time outside collectives and P2P.
    own_ns: f64,
    sync_ns: f64,
    compute_ns: f64,
    /// Host-phase time per `OpKind` (indexed by its discriminant).
    host_ns: [f64; OpKind::ALL.len()],
    /// Whether it traced compute or host ops (else nothing says why it is slow).
    has_work_ops: bool,
    /// Compute op names it runs every iteration: ranks with the same set are peers.
    signature: Vec<&'a str>,
    /// Communicators it used, as the tracer named them.
    groups: BTreeSet<&'a str>,
    dropped: u64,
}

impl RankAgg<'_> {
    fn host_total(&self) -> f64 {
        self.host_ns.iter().sum()
    }
}

/// Diagnoses one window of one job from the summaries of all its nodes, with the
/// continuity rule across windows: `previous` is the job's previous window's findings
/// (`None` when there is none), which confirm or demote this window's mild verdicts (see
/// [`confirm_with_previous`]). What the server calls for every window; pure.
pub fn diagnose_window(
    window: &[WindowSummary],
    previous: Option<&[Finding]>,
    cfg: &LiveConfig,
) -> LiveDiagnosis {
    let mut d = analyze_window(window, cfg);
    confirm_with_previous(&mut d, previous, cfg);
    d
}

/// Diagnoses one window of one job from the summaries of all its nodes, without the
/// continuity rule (see [`diagnose_window`]).
pub fn analyze_window(window: &[WindowSummary], cfg: &LiveConfig) -> LiveDiagnosis {
    let mut notes = Vec::new();
    let aggs = aggregate(window, &mut notes);
    let with_data: Vec<&RankAgg> = aggs.values().filter(|a| a.observed_ns > 0.0).collect();
    let world_size = window.iter().map(|s| s.world_size).max().unwrap_or(0);

    let mut findings = hang_findings(window, &aggs, world_size);
    let mut compared = false;
    if !findings.is_empty() {
        // A stuck job's totals measure the hang, not the ranks' speed.
        notes.push("slow-rank comparison skipped: ranks are stuck (see the hang finding)".into());
    } else if with_data.len() < cfg.min_ranks {
        notes.push(format!(
            "only {} rank{} reported data in this window; comparing ranks needs {}",
            with_data.len(),
            if with_data.len() == 1 { "" } else { "s" },
            cfg.min_ranks
        ));
    } else {
        compared = slow_rank_findings(&with_data, cfg, &mut findings, &mut notes);
    }
    drop_note(&aggs, &mut notes);

    findings.sort_by(Finding::by_importance);
    let localized = findings
        .iter()
        .any(|f| f.severity > Severity::Info && !f.culprits.is_empty());
    LiveDiagnosis {
        conclusive: compared || localized,
        ranks: with_data.len(),
        findings,
        notes,
    }
}

/// Continuity across windows: a slow-rank warning with an own-time excess under
/// `cfg.confirm_below_excess` stays a warning only if `previous` (the job's previous
/// window's findings) flagged the same rank, warning or not; otherwise it becomes an
/// `info` finding marked unconfirmed, and the next window confirms it if it persists.
/// Pure: the caller (the server) passes the previous window's findings.
pub fn confirm_with_previous(
    d: &mut LiveDiagnosis,
    previous: Option<&[Finding]>,
    cfg: &LiveConfig,
) {
    let flagged_before = |rank: Option<u32>| {
        previous.is_some_and(|p| {
            p.iter().any(|f| {
                f.detector == DETECTOR_SLOW && f.culprits.first().and_then(|c| c.rank) == rank
            })
        })
    };
    for f in d.findings.iter_mut() {
        if f.detector != DETECTOR_SLOW || f.severity != Severity::Warning {
            continue;
        }
        let excess = f
            .evidence
            .iter()
            .find(|e| e.metric == EvidenceKey::OwnTimeRatio)
            .map(|e| e.value - 1.0)
            .unwrap_or(f64::INFINITY);
        let rank = f.culprits.first().and_then(|c| c.rank);
        if excess < cfg.confirm_below_excess && !flagged_before(rank) {
            f.severity = Severity::Info;
            f.summary = format!(
                "unconfirmed (first window with it; a warning if the next window shows it too): {}",
                f.summary
            );
        }
    }
    d.findings.sort_by(Finding::by_importance);
}

/// Per-rank totals, one entry per rank (a rank reported twice keeps its longer record).
fn aggregate<'a>(
    window: &'a [WindowSummary],
    notes: &mut Vec<String>,
) -> BTreeMap<u32, RankAgg<'a>> {
    let mut out: BTreeMap<u32, RankAgg<'a>> = BTreeMap::new();
    let mut duplicates = BTreeSet::new();
    for s in window {
        for r in &s.ranks {
            let mut a = RankAgg {
                rank: r.rank,
                pid: r.pid,
                node: &s.node,
                observed_ns: r.observed_ns as f64,
                iterations: r.iterations.len(),
                own_ns: 0.0,
                sync_ns: 0.0,
                compute_ns: 0.0,
                host_ns: [0.0; OpKind::ALL.len()],
                has_work_ops: false,
                signature: Vec::new(),
                groups: BTreeSet::new(),
                dropped: r.dropped_total,
            };
            let per_iteration = r.iterations.len().max(1) as u64;
            for o in &r.ops {
                let t = o.total_ns as f64;
                if o.kind.is_sync() {
                    a.sync_ns += t;
                } else if o.kind == OpKind::Compute {
                    a.compute_ns += t;
                    a.has_work_ops = true;
                    // Ops that run every iteration define the rank's work; rare ones
                    // (a one-off kernel) must not split peers apart.
                    if o.count >= per_iteration {
                        a.signature.push(&o.name);
                    }
                } else {
                    a.host_ns[o.kind as usize] += t;
                    a.has_work_ops = true;
                }
                if let Some(g) = &o.group {
                    a.groups.insert(g);
                }
            }
            a.signature.sort_unstable();
            a.signature.dedup();
            // Busy time minus sync time is the rank's own time whatever it traced; the
            // sum of its work ops stands in when the tracer did not report busy time.
            let work = a.compute_ns + a.host_total();
            a.own_ns = if r.busy_ns > 0 {
                (r.busy_ns as f64 - a.sync_ns).max(0.0)
            } else {
                work
            };
            match out.get(&r.rank) {
                Some(prev) => {
                    duplicates.insert(r.rank);
                    if prev.observed_ns < a.observed_ns {
                        out.insert(r.rank, a);
                    }
                }
                None => {
                    out.insert(r.rank, a);
                }
            }
        }
    }
    if !duplicates.is_empty() {
        let d: Vec<u32> = duplicates.into_iter().collect();
        notes.push(format!(
            "rank{} {} reported by more than one summary; the longest-observed record was used",
            if d.len() == 1 { "" } else { "s" },
            rank_list(&d, 8)
        ));
    }
    out
}

fn drop_note(aggs: &BTreeMap<u32, RankAgg>, notes: &mut Vec<String>) {
    let mut dropped: Vec<&RankAgg> = aggs.values().filter(|a| a.dropped > 0).collect();
    if dropped.is_empty() {
        return;
    }
    dropped.sort_by_key(|a| (std::cmp::Reverse(a.dropped), a.rank));
    let top: Vec<String> = dropped
        .iter()
        .take(4)
        .map(|a| format!("rank {} on {}: {}", a.rank, a.node, a.dropped))
        .collect();
    notes.push(format!(
        "{} rank{} dropped trace events (ring full; cumulative counts: {}{}); their op statistics undercount",
        dropped.len(),
        if dropped.len() == 1 { "" } else { "s" },
        top.join(", "),
        if dropped.len() > 4 { ", ..." } else { "" }
    ));
}

/// The unit ranks are compared in: per iteration when every peer finished the same
/// number of iterations in the window, otherwise per second observed. Dividing by unequal
/// iteration counts would turn a window edge (one rank's step ending just after it) into
/// a 1/n difference in time per iteration.
#[derive(Clone, Copy)]
enum Basis {
    Iteration,
    Second,
}

impl Basis {
    fn of(peers: &[&RankAgg]) -> Basis {
        let n = peers[0].iterations;
        if n > 0 && peers.iter().all(|a| a.iterations == n) {
            Basis::Iteration
        } else {
            Basis::Second
        }
    }
    fn divisor(self, a: &RankAgg) -> f64 {
        match self {
            Basis::Iteration => a.iterations as f64,
            Basis::Second => a.observed_ns / 1e9,
        }
    }
    fn label(self) -> Unit {
        match self {
            Basis::Iteration => Unit::MsPerIteration,
            Basis::Second => Unit::MsPerSecond,
        }
    }
    fn words(self) -> &'static str {
        match self {
            Basis::Iteration => "per iteration",
            Basis::Second => "per second observed",
        }
    }
}

/// One rank's figures in its comparison unit (ns per unit).
struct Norm {
    own: f64,
    sync: f64,
    compute: f64,
    host: f64,
    host_by_kind: [f64; OpKind::ALL.len()],
}

fn normalise(a: &RankAgg, unit: Basis) -> Norm {
    let d = unit.divisor(a).max(1e-12);
    Norm {
        own: a.own_ns / d,
        sync: a.sync_ns / d,
        compute: a.compute_ns / d,
        host: a.host_total() / d,
        host_by_kind: a.host_ns.map(|h| h / d),
    }
}

/// Median of `f` over every member but `skip`.
fn peer_median(norms: &[Norm], skip: usize, f: impl Fn(&Norm) -> f64) -> f64 {
    let mut v: Vec<f64> = norms
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .map(|(_, n)| f(n))
        .collect();
    median(&mut v)
}

/// Slow-rank and relative-score findings; returns whether any group of peers could be
/// compared.
fn slow_rank_findings(
    ranks: &[&RankAgg],
    cfg: &LiveConfig,
    findings: &mut Vec<Finding>,
    notes: &mut Vec<String>,
) -> bool {
    let mut classes: BTreeMap<&[&str], Vec<&RankAgg>> = BTreeMap::new();
    for a in ranks {
        classes.entry(a.signature.as_slice()).or_default().push(a);
    }
    let min_peers = cfg.min_ranks.max(2);
    let (big, small): (Vec<_>, Vec<_>) = classes.into_values().partition(|c| c.len() >= min_peers);
    let classes = if big.is_empty() {
        // No kernel set is shared by enough ranks (names differ per rank): compare all.
        vec![ranks.to_vec()]
    } else {
        let mut alone: Vec<u32> = small.iter().flatten().map(|a| a.rank).collect();
        if !alone.is_empty() {
            alone.sort_unstable();
            notes.push(format!(
                "rank{} {} run kernels fewer than {} other ranks run; not compared",
                if alone.len() == 1 { "" } else { "s" },
                rank_list(&alone, 8),
                min_peers - 1
            ));
        }
        big
    };

    let mut compared = false;
    let mut slow = Vec::new();
    let mut low_scores: Vec<(f64, &RankAgg, bool)> = Vec::new();
    for peers in &classes {
        let unit = Basis::of(peers);
        let norms: Vec<Norm> = peers.iter().map(|a| normalise(a, unit)).collect();
        let own: Vec<f64> = norms.iter().map(|n| n.own).collect();
        let (med, mad) = median_mad(&own);
        if med.is_nan() || med <= 0.0 {
            continue;
        }
        let share = |a: &RankAgg| a.own_ns / a.observed_ns.max(1.0);
        let shares: Vec<f64> = peers.iter().map(|a| share(a)).collect();
        if median(&mut shares.clone()) < cfg.min_own_share {
            notes.push(format!(
                "ranks {} spent under {:.0}% of the window outside collectives; not compared",
                rank_list(&peers.iter().map(|a| a.rank).collect::<Vec<_>>(), 8),
                cfg.min_own_share * 100.0
            ));
            continue;
        }
        compared = true;
        let sd = mad.max(cfg.mad_floor * med);
        // Relative score on compute when every peer traced kernels, else on own time.
        let on_compute = norms.iter().all(|n| n.compute > 0.0);
        let score_of = |n: &Norm| if on_compute { n.compute } else { n.own };
        let best = norms
            .iter()
            .map(score_of)
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        for (i, a) in peers.iter().enumerate() {
            let n = &norms[i];
            let score = if best.is_finite() && score_of(n) > 0.0 {
                best / score_of(n)
            } else {
                1.0
            };
            let z = (n.own - med) / sd;
            let rel = n.own / med - 1.0;
            // The others (without this rank) must have done something comparable too.
            // Checked only for a suspect: a median per rank would be quadratic in ranks.
            let others_active = || {
                let mut others: Vec<f64> = shares
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, v)| *v)
                    .collect();
                median(&mut others) >= cfg.min_own_share
            };
            if z >= cfg.min_rank_z && rel >= cfg.min_rank_excess && others_active() {
                slow.push(slow_finding(a, i, &norms, peers.len(), unit, z, score, cfg));
            } else if score < cfg.min_relative_score {
                low_scores.push((score, a, on_compute));
            }
        }
    }
    slow.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    if slow.len() > MAX_SLOW_FINDINGS {
        notes.push(format!(
            "{} ranks are slower than their peers; the {} most certain are reported",
            slow.len(),
            MAX_SLOW_FINDINGS
        ));
        slow.truncate(MAX_SLOW_FINDINGS);
    }
    findings.append(&mut slow);
    if !low_scores.is_empty() {
        findings.push(score_finding(&mut low_scores, cfg));
    }
    if !compared {
        notes.push(
            "no rank reported time outside collectives and P2P (busy time or compute/host ops); ranks were not compared".into(),
        );
    }
    compared
}

#[allow(clippy::too_many_arguments)]
fn slow_finding(
    a: &RankAgg,
    i: usize,
    norms: &[Norm],
    n_peers: usize,
    unit: Basis,
    z: f64,
    score: f64,
    cfg: &LiveConfig,
) -> Finding {
    let n = &norms[i];
    let peer_own = peer_median(norms, i, |n| n.own);
    let peer_sync = peer_median(norms, i, |n| n.sync);
    let peer_compute = peer_median(norms, i, |n| n.compute);
    let peer_host = peer_median(norms, i, |n| n.host);
    let excess = (n.own - peer_own).max(1e-9);
    let compute_excess = n.compute - peer_compute;
    let host_excess = n.host - peer_host;
    // The host phase that grew the most names the stall (GC, dataloader, ...).
    let host_kind = OpKind::ALL
        .iter()
        .copied()
        .filter(|k| k.is_host())
        .max_by(|x, y| {
            let ex = n.host_by_kind[*x as usize]
                - peer_median(norms, i, |p| p.host_by_kind[*x as usize]);
            let ey = n.host_by_kind[*y as usize]
                - peer_median(norms, i, |p| p.host_by_kind[*y as usize]);
            ex.total_cmp(&ey)
        })
        .unwrap_or(OpKind::HostOther);
    // The slow rank arrives last, so it waits least: the share of its excess that its
    // shorter sync time gives back says how well the picture holds together.
    let waited_less = peer_sync - n.sync;
    let corroboration = (waited_less / excess).clamp(0.0, 1.0);
    // Callers only get here when the peers' own time is a real share of the window.
    let ratio = n.own / peer_own.max(1e-9);
    let ul = unit.label();

    let mut evidence = vec![
        Evidence::new(
            EvidenceKey::OwnTimeRatio,
            ratio,
            Some(1.0),
            Unit::Ratio,
            format!(
                "time outside collectives and P2P {} over the median of its {} peers (ranks running the same kernels)",
                unit.words(),
                n_peers - 1
            ),
        ),
        Evidence::new(
            EvidenceKey::OwnTime,
            n.own / 1e6,
            Some(peer_own / 1e6),
            ul,
            "its time outside collectives and P2P; baseline: its peers' median".into(),
        ),
        Evidence::new(
            EvidenceKey::RobustZ,
            z,
            Some(cfg.min_rank_z),
            Unit::Sd,
            format!(
                "robust z-score of its own time among its peers (median/MAD, MAD floored at {:.0}% of the median)",
                cfg.mad_floor * 100.0
            ),
        ),
        Evidence::new(
            EvidenceKey::SyncTime,
            n.sync / 1e6,
            Some(peer_sync / 1e6),
            ul,
            if waited_less > 0.0 {
                format!(
                    "time in collectives and P2P, {:.1}% shorter than its peers': they wait for it, it waits least",
                    waited_less / peer_sync.max(1e-9) * 100.0
                )
            } else {
                "time in collectives and P2P, not shorter than its peers': weak corroboration that they wait for it".into()
            },
        ),
    ];
    let (kind, component, what, action) = if !a.has_work_ops {
        (
            FindingKind::SlowRank,
            Component::Process,
            "its own time (it traced no compute or host ops to tell GPU from host)".to_string(),
            "trace this rank's compute and host ops to tell a slow GPU from a host stall; meanwhile check its GPU clocks and its node's CPU load".to_string(),
        )
    } else if compute_excess >= host_excess && compute_excess >= 0.4 * excess {
        evidence.push(Evidence::new(
            EvidenceKey::ComputeTime,
            n.compute / 1e6,
            Some(peer_compute / 1e6),
            ul,
            "time in its compute kernels; baseline: its peers' median".into(),
        ));
        (
            FindingKind::SlowGpu,
            Component::Gpu,
            "slow compute".to_string(),
            "check the GPU's clocks, temperature and power cap (nvidia-smi -q -d PERFORMANCE); if it stays slow, drain the node and replace the GPU".to_string(),
        )
    } else if host_excess > compute_excess && host_excess >= 0.4 * excess {
        evidence.push(Evidence::new(
            EvidenceKey::HostPhaseTime,
            n.host / 1e6,
            Some(peer_host / 1e6),
            ul,
            format!(
                "time in host phases (most of the excess in {}); baseline: its peers' median",
                host_kind.as_str()
            ),
        ));
        let (what, action) = crate::detectors::cause::host_pause(host_kind);
        (
            FindingKind::HostStall,
            Component::Host,
            what.to_string(),
            action.to_string(),
        )
    } else {
        (
            FindingKind::SlowRank,
            Component::Process,
            "time outside the ops it traced (launch gaps, untraced host work)".to_string(),
            "profile this rank (py-spy, torch.profiler) for work between its traced ops; check CPU contention and pinning on its node".to_string(),
        )
    };
    if score < 1.0 {
        evidence.push(Evidence::new(
            EvidenceKey::RelativeScore,
            score,
            Some(cfg.min_relative_score),
            Unit::None,
            "best peer's time over its own (1.0: as fast as the fastest peer)".into(),
        ));
    }
    // Decisive: how much longer its own time is and how sure, that its peers wait for it,
    // and where the excess went (compute or host phases).
    for e in evidence.iter_mut() {
        e.decisive = matches!(
            e.metric,
            EvidenceKey::OwnTimeRatio
                | EvidenceKey::RobustZ
                | EvidenceKey::SyncTime
                | EvidenceKey::ComputeTime
                | EvidenceKey::HostPhaseTime
        );
    }
    let mut culprit = Culprit::new(component);
    culprit.rank = Some(a.rank);
    culprit.element = Some(a.node.to_string());
    Finding {
        kind,
        severity: Severity::Warning,
        summary: format!(
            "rank {} on {} spends {:.1}% more time on its own work than its peers, through {}{}",
            a.rank,
            a.node,
            (ratio - 1.0) * 100.0,
            what,
            if waited_less > 0.0 {
                "; its peers wait for it in collectives"
            } else {
                ""
            }
        ),
        confidence: confidence(z * (0.5 + corroboration), cfg.min_rank_z / 2.0),
        culprits: vec![culprit],
        evidence,
        action,
        iterations: vec![],
        detector: DETECTOR_SLOW,
        corroborated_by: vec![],
    }
}

/// One information finding for the ranks whose relative score is low but that the robust
/// test did not single out (several slow ranks widen the spread).
fn score_finding(low: &mut [(f64, &RankAgg, bool)], cfg: &LiveConfig) -> Finding {
    low.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.rank.cmp(&b.1.rank)));
    let worst = low[0].0;
    let on_compute = low.iter().all(|l| l.2);
    let component = if on_compute {
        Component::Gpu
    } else {
        Component::Process
    };
    let culprits = low
        .iter()
        .take(8)
        .map(|(s, a, _)| {
            let mut c = Culprit::new(component);
            c.rank = Some(a.rank);
            c.element = Some(a.node.to_string());
            c.score = ((1.0 - s) / (1.0 - worst).max(1e-9)).clamp(0.0, 1.0);
            c
        })
        .collect();
    let listed: Vec<String> = low
        .iter()
        .take(8)
        .map(|(s, a, _)| format!("rank {} on {} ({s:.2})", a.rank, a.node))
        .collect();
    let what = if on_compute { "compute" } else { "own" };
    Finding {
        kind: if on_compute {
            FindingKind::SlowGpu
        } else {
            FindingKind::SlowRank
        },
        severity: Severity::Info,
        summary: format!(
            "{} rank{} score below {:.2} of the fastest peer's {what} time: {}{}",
            low.len(),
            if low.len() == 1 { "" } else { "s" },
            cfg.min_relative_score,
            listed.join(", "),
            if low.len() > 8 { ", ..." } else { "" }
        ),
        confidence: (1.0 - worst).clamp(0.0, 0.999),
        culprits,
        evidence: vec![Evidence::new(
            EvidenceKey::RelativeScore,
            worst,
            Some(cfg.min_relative_score),
            Unit::None,
            format!("lowest relative score: the fastest peer's {what} time over the rank's"),
        )],
        action: "compare these ranks' GPU clocks, thermals and host load with their peers'; several slow ranks at once point at shared causes (a node, a rack's cooling)".into(),
        iterations: vec![],
        detector: DETECTOR_SCORE,
        corroborated_by: vec![],
    }
}

/// Ranks stuck in one op (same name, kind and communicator).
struct HangGroup<'a> {
    op: &'a str,
    kind: OpKind,
    group: Option<&'a str>,
    /// Per stuck rank, its record (the longest in flight) and its node.
    ranks: BTreeMap<u32, (&'a HangRecord, &'a str)>,
}

fn hang_findings(
    window: &[WindowSummary],
    aggs: &BTreeMap<u32, RankAgg>,
    world_size: u32,
) -> Vec<Finding> {
    let mut groups: BTreeMap<(&str, OpKind, Option<&str>), HangGroup> = BTreeMap::new();
    for s in window {
        for h in &s.hangs {
            let key = (h.op.as_str(), h.kind, h.group.as_deref());
            let g = groups.entry(key).or_insert_with(|| HangGroup {
                op: &h.op,
                kind: h.kind,
                group: h.group.as_deref(),
                ranks: BTreeMap::new(),
            });
            // The watchdog may fire more than once for one op: keep the longest.
            let e = g.ranks.entry(h.rank).or_insert((h, &s.node));
            if h.in_flight_ns > e.0.in_flight_ns {
                *e = (h, &s.node);
            }
        }
    }
    if groups.is_empty() {
        return vec![];
    }
    // Ranks waiting on peers; a rank stuck in its own compute or host work is not waiting,
    // it is what the others wait for.
    let waiting: BTreeSet<u32> = groups
        .values()
        .filter(|g| g.kind.is_sync())
        .flat_map(|g| g.ranks.keys().copied())
        .collect();
    groups
        .values()
        .map(|g| {
            if g.kind.is_sync() {
                sync_hang(g, aggs, &waiting, world_size)
            } else {
                local_hang(g)
            }
        })
        .collect()
}

fn hang_evidence(g: &HangGroup, present: usize) -> Vec<Evidence> {
    let longest = g
        .ranks
        .values()
        .map(|(h, _)| h.in_flight_ns)
        .max()
        .unwrap_or(0);
    let mut ev = vec![
        Evidence::new(
            EvidenceKey::RanksStuck,
            g.ranks.len() as f64,
            Some(present as f64),
            Unit::Ranks,
            format!(
                "ranks stuck in {} {}{}: {}",
                g.kind.as_str(),
                g.op,
                g.group
                    .map(|x| format!(" on group {x}"))
                    .unwrap_or_default(),
                rank_list(&g.ranks.keys().copied().collect::<Vec<_>>(), 16)
            ),
        ),
        Evidence::new(
            EvidenceKey::InFlight,
            longest as f64 / 1e9,
            None,
            Unit::Seconds,
            "longest time in flight without progress when the watchdog fired".into(),
        ),
    ];
    // Identical stacks are shown once, with how many ranks share them.
    let mut stacks: BTreeMap<String, Vec<(u32, &str, &str)>> = BTreeMap::new();
    for (&r, (h, node)) in &g.ranks {
        if let Some((thread, top)) = top_frames(h, 6) {
            stacks.entry(top).or_default().push((r, node, thread));
        }
    }
    let mut stacks: Vec<_> = stacks.into_iter().collect();
    stacks.sort_by_key(|(_, who)| std::cmp::Reverse(who.len()));
    for (top, who) in stacks.iter().take(3) {
        let (r, node, thread) = who[0];
        let source = &g.ranks[&r].0.stack_source;
        ev.push(Evidence::new(
            EvidenceKey::Stack,
            r as f64,
            None,
            Unit::Rank,
            format!(
                "rank {r} on {node} ({source}), thread {thread}{}: {top}",
                if who.len() > 1 {
                    format!(", same on {} stuck ranks", who.len())
                } else {
                    String::new()
                }
            ),
        ));
    }
    ev
}

/// The innermost frames of the most telling thread: the main thread when named, else the
/// first one captured.
fn top_frames(h: &HangRecord, n: usize) -> Option<(&str, String)> {
    let t = h
        .stacks
        .iter()
        .find(|t| t.thread.contains("MainThread") || t.thread == "main")
        .or_else(|| h.stacks.iter().find(|t| !t.frames.is_empty()))?;
    if t.frames.is_empty() {
        return None;
    }
    let mut top = t
        .frames
        .iter()
        .take(n)
        .cloned()
        .collect::<Vec<_>>()
        .join(" <- ");
    if t.frames.len() > n {
        top.push_str(" <- ...");
    }
    Some((&t.thread, top))
}

fn sync_hang(
    g: &HangGroup,
    aggs: &BTreeMap<u32, RankAgg>,
    waiting: &BTreeSet<u32>,
    world_size: u32,
) -> Finding {
    let free: Vec<&RankAgg> = aggs
        .values()
        .filter(|a| !waiting.contains(&a.rank))
        .collect();
    // Members of the communicator first, when the tracer named it the same on every rank.
    let members: Vec<&RankAgg> = match g.group {
        Some(name) => free
            .iter()
            .copied()
            .filter(|a| a.groups.contains(name))
            .collect(),
        None => vec![],
    };
    let (suspects, why) = if !members.is_empty() {
        (members, "used the same group but are not stuck in it")
    } else {
        (free, "are not stuck in any collective")
    };
    let absent: Vec<u32> = if world_size as usize <= 1 << 20 {
        (0..world_size).filter(|r| !aggs.contains_key(r)).collect()
    } else {
        vec![]
    };
    let mut ev = hang_evidence(g, aggs.len());
    let stuck: Vec<u32> = g.ranks.keys().copied().collect();
    let what = format!(
        "{} {}{}",
        g.kind.as_str(),
        g.op,
        g.group
            .map(|x| format!(" on group {x}"))
            .unwrap_or_default()
    );
    let longest_s = g
        .ranks
        .values()
        .map(|(h, _)| h.in_flight_ns)
        .max()
        .unwrap_or(0) as f64
        / 1e9;
    let mut culprits = Vec::new();
    let (summary, action, confidence) = if !suspects.is_empty() {
        let ranks: Vec<u32> = suspects.iter().map(|a| a.rank).collect();
        for a in suspects.iter().take(8) {
            let mut c = Culprit::new(Component::Process);
            c.rank = Some(a.rank);
            c.element = Some(a.node.to_string());
            culprits.push(c);
            ev.push(Evidence::new(
                EvidenceKey::NotStuck,
                a.rank as f64,
                None,
                Unit::Rank,
                format!(
                    "rank {} on {} (pid {}) {why}; it finished {} iteration{} in this window",
                    a.rank,
                    a.node,
                    a.pid,
                    a.iterations,
                    if a.iterations == 1 { "" } else { "s" }
                ),
            ));
        }
        let first = suspects[0];
        (
            format!(
                "job hangs in {what}: rank{} {} stuck up to {longest_s:.0} s; rank{} {} {why} (likely cause)",
                plural(stuck.len()),
                rank_list(&stuck, 8),
                plural(ranks.len()),
                rank_list(&ranks, 8),
            ),
            format!(
                "see where rank {} is: py-spy dump --pid {} on {}; it never entered the collective its peers wait in (a code path that skips it, an exception, a stuck dataloader)",
                first.rank, first.pid, first.node
            ),
            if ranks.len() <= 2 { 0.9 } else { 0.7 },
        )
    } else if !absent.is_empty() {
        for &r in absent.iter().take(8) {
            let mut c = Culprit::new(Component::Host);
            c.rank = Some(r);
            culprits.push(c);
        }
        ev.push(Evidence::new(
            EvidenceKey::RanksWithoutData,
            absent.len() as f64,
            Some(world_size as f64),
            Unit::Ranks,
            format!(
                "no summary from rank{} {}",
                plural(absent.len()),
                rank_list(&absent, 16)
            ),
        ));
        (
            format!(
                "job hangs in {what}: rank{} {} stuck up to {longest_s:.0} s; rank{} {} sent no data (node down or agent dead?)",
                plural(stuck.len()),
                rank_list(&stuck, 8),
                plural(absent.len()),
                rank_list(&absent, 8),
            ),
            "check the nodes of the ranks that sent no data: is the node up, is the training process alive, is flare's agent running".to_string(),
            0.6,
        )
    } else {
        culprits.push(Culprit::new(Component::Process));
        (
            format!(
                "job hangs in {what}: every rank with data is stuck in a collective (up to {longest_s:.0} s); deadlock from inconsistent collective order?"
            ),
            "compare the stuck ranks' stacks and collective order; fix the code path that issues collectives in a different order on some ranks".to_string(),
            0.5,
        )
    };
    Finding {
        kind: FindingKind::Hang,
        severity: Severity::Critical,
        summary,
        confidence,
        culprits,
        evidence: ev,
        action,
        iterations: vec![],
        detector: DETECTOR_HANG,
        corroborated_by: vec![],
    }
}

/// A rank stuck in its own compute kernel or host phase: it is the cause.
fn local_hang(g: &HangGroup) -> Finding {
    let stuck: Vec<u32> = g.ranks.keys().copied().collect();
    let (component, action) = if g.kind == OpKind::Compute {
        (
            Component::Gpu,
            "check the GPU (nvidia-smi, kernel log for Xid errors); restart from the last checkpoint without this node if it is faulty",
        )
    } else {
        (
            Component::Host,
            "see where the process is (py-spy dump --pid on its node): a stuck dataloader worker, I/O or lock",
        )
    };
    let culprits = g
        .ranks
        .iter()
        .take(8)
        .map(|(&r, (_, node))| {
            let mut c = Culprit::new(component);
            c.rank = Some(r);
            c.element = Some(node.to_string());
            c
        })
        .collect();
    let longest_s = g
        .ranks
        .values()
        .map(|(h, _)| h.in_flight_ns)
        .max()
        .unwrap_or(0) as f64
        / 1e9;
    Finding {
        kind: FindingKind::Hang,
        severity: Severity::Critical,
        summary: format!(
            "rank{} {} stuck in {} {} for up to {longest_s:.0} s",
            plural(stuck.len()),
            rank_list(&stuck, 8),
            g.kind.as_str(),
            g.op
        ),
        confidence: 0.9,
        culprits,
        evidence: hang_evidence(g, g.ranks.len()),
        action: action.into(),
        iterations: vec![],
        detector: DETECTOR_HANG,
        corroborated_by: vec![],
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Ranks as compact ranges (`0-3, 5, 7-9`), at most `max` ranges.
fn rank_list(ranks: &[u32], max: usize) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        if out.len() == max {
            out.push(format!("... ({} ranks in all)", ranks.len()));
            break;
        }
        out.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::summary::SUMMARY_VERSION;
    use flare_model::{IterationSample, OpStats, RankSummary, ThreadStack};

    const MS: u64 = 1_000_000;

    fn op(name: &str, kind: OpKind, group: Option<&str>, count: u64, total_ns: u64) -> OpStats {
        OpStats {
            name: name.into(),
            kind,
            group: group.map(str::to_string),
            group_size: group.map(|_| 8),
            count,
            total_ns,
            p50_ns: total_ns / count.max(1),
            p99_ns: total_ns / count.max(1),
            max_ns: total_ns / count.max(1),
            bytes: 0,
            flops: 0,
            bus_gbps: None,
            tflops: None,
            issue_p50_ns: None,
            issue_p99_ns: None,
        }
    }

    /// Deterministic jitter in [-amp, +amp] from a rank number.
    fn jitter(rank: u32, salt: u32, amp: f64) -> f64 {
        let h = (rank.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503)) % 1000;
        1.0 + amp * (h as f64 / 500.0 - 1.0)
    }

    /// A synchronous job: every iteration lasts as long as the slowest rank's own work;
    /// the others spend the difference waiting in the all-reduce.
    /// `compute_x` / `host_extra_ms` per rank scale its work.
    fn job(
        n: u32,
        compute_x: impl Fn(u32) -> f64,
        host_extra_ms: impl Fn(u32) -> f64,
    ) -> Vec<WindowSummary> {
        let its = 10u64;
        let comm_ms = 20.0;
        let own = |r: u32| -> (f64, f64) {
            let c = 100.0 * compute_x(r) * jitter(r, 1, 0.02);
            let h = 10.0 * jitter(r, 2, 0.02) + host_extra_ms(r);
            (c, h)
        };
        let slowest = (0..n).map(|r| own(r).0 + own(r).1).fold(0.0, f64::max);
        let iter_ms = slowest + comm_ms;
        let mut nodes: BTreeMap<u32, WindowSummary> = BTreeMap::new();
        for r in 0..n {
            let (c, h) = own(r);
            let sync = iter_ms - c - h;
            let node = r / 4;
            let s = nodes.entry(node).or_insert_with(|| WindowSummary {
                version: SUMMARY_VERSION,
                job_id: "job".into(),
                node: format!("node-{node}"),
                window: 7,
                window_ns: 60_000 * MS,
                start_unix_ns: 0,
                end_unix_ns: 60_000 * MS,
                world_size: n,
                ranks: vec![],
                hangs: vec![],
            });
            let ns = |ms: f64| (ms * its as f64 * MS as f64) as u64;
            s.ranks.push(RankSummary {
                rank: r,
                local_rank: r % 4,
                pid: 1000 + r,
                iterations: (0..its)
                    .map(|i| IterationSample {
                        step: i,
                        start_unix_ns: i * (iter_ms as u64) * MS,
                        duration_ns: (iter_ms * MS as f64) as u64,
                    })
                    .collect(),
                ops: vec![
                    op("gemm", OpKind::Compute, None, its * 40, ns(c * 0.8)),
                    op("attn", OpKind::Compute, None, its * 20, ns(c * 0.2)),
                    op("gc", OpKind::GarbageCollection, None, its, ns(h)),
                    op("allreduce", OpKind::AllReduce, Some("dp"), its, ns(sync)),
                ],
                busy_ns: ns(iter_ms),
                observed_ns: ns(iter_ms),
                events: its * 62,
                dropped_total: 0,
            });
        }
        nodes.into_values().collect()
    }

    #[test]
    fn stray_milliseconds_in_a_nearly_idle_window_are_not_a_straggler() {
        // The window after a job ended: every rank is observed for 2 s, none ran an
        // iteration; half did nothing, three ran a short GC pass at exit and one a long
        // one (the peers' median without it is 0, which made a ratio explode).
        let mut s = job(8, |_| 1.0, |_| 0.0).remove(0);
        let mut all = Vec::new();
        for node in 0..2u32 {
            s.node = format!("node-{node}");
            s.ranks = (0..4u32)
                .map(|l| {
                    let r = node * 4 + l;
                    RankSummary {
                        rank: r,
                        local_rank: l,
                        pid: 1000 + r,
                        iterations: vec![],
                        ops: match r {
                            0..=3 => vec![],
                            7 => vec![op("gc", OpKind::GarbageCollection, None, 1, 40 * MS)],
                            _ => vec![op(
                                "gc",
                                OpKind::GarbageCollection,
                                None,
                                1,
                                MS + 10_000 * r as u64,
                            )],
                        },
                        busy_ns: 0,
                        observed_ns: 2_000 * MS,
                        events: 2,
                        dropped_total: 0,
                    }
                })
                .collect();
            all.push(s.clone());
        }
        let d = analyze_window(&all, &LiveConfig::default());
        let warn: Vec<_> = d
            .findings
            .iter()
            .filter(|f| f.severity != Severity::Info)
            .map(|f| f.summary.clone())
            .collect();
        assert!(warn.is_empty(), "{warn:?}");
    }

    #[test]
    fn a_mild_excess_needs_a_second_window_and_a_strong_one_does_not() {
        let cfg = LiveConfig::default();
        let mild = job(8, |r| if r == 5 { 1.08 } else { 1.0 }, |_| 0.0);
        let mut first = analyze_window(&mild, &cfg);
        confirm_with_previous(&mut first, None, &cfg);
        assert!(
            first.findings.iter().all(|f| f.severity == Severity::Info),
            "{:#?}",
            first.findings
        );
        let slow = first
            .findings
            .iter()
            .find(|f| f.detector == DETECTOR_SLOW)
            .expect("kept as info");
        assert!(slow.summary.starts_with("unconfirmed"), "{}", slow.summary);
        let mut second = analyze_window(&mild, &cfg);
        confirm_with_previous(&mut second, Some(&first.findings), &cfg);
        assert_eq!(second.findings[0].severity, Severity::Warning);
        assert_eq!(second.findings[0].culprits[0].rank, Some(5));

        let strong = job(8, |r| if r == 5 { 1.3 } else { 1.0 }, |_| 0.0);
        let mut at_once = analyze_window(&strong, &cfg);
        confirm_with_previous(&mut at_once, None, &cfg);
        assert_eq!(at_once.findings[0].severity, Severity::Warning);
        assert_eq!(at_once.findings[0].culprits[0].rank, Some(5));
    }

    #[test]
    fn finds_a_slow_gpu_among_eight() {
        let w = job(8, |r| if r == 5 { 1.2 } else { 1.0 }, |_| 0.0);
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(d.conclusive);
        assert_eq!(d.ranks, 8);
        let warn: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .collect();
        assert_eq!(warn.len(), 1, "{:#?}", d.findings);
        assert_eq!(warn[0].kind, FindingKind::SlowGpu);
        assert_eq!(warn[0].culprits[0].rank, Some(5));
        assert_eq!(warn[0].culprits[0].element.as_deref(), Some("node-1"));
        let sync = warn[0]
            .evidence
            .iter()
            .find(|e| e.metric == EvidenceKey::SyncTime)
            .unwrap();
        assert!(
            sync.value < sync.baseline.unwrap(),
            "the slow rank waits least"
        );
        assert!(warn[0].confidence > 0.8, "{}", warn[0].confidence);
    }

    #[test]
    fn healthy_jittery_ranks_give_no_finding() {
        for n in [3, 8, 64] {
            let w = job(n, |_| 1.0, |_| 0.0);
            let d = analyze_window(&w, &LiveConfig::default());
            assert!(d.conclusive);
            assert!(d.findings.is_empty(), "{n} ranks: {:#?}", d.findings);
            assert!(d.notes.is_empty(), "{:?}", d.notes);
        }
    }

    #[test]
    fn tells_a_host_stall_from_a_slow_gpu() {
        let w = job(8, |_| 1.0, |r| if r == 2 { 25.0 } else { 0.0 });
        let d = analyze_window(&w, &LiveConfig::default());
        assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
        let f = &d.findings[0];
        assert_eq!(f.kind, FindingKind::HostStall);
        assert_eq!(f.culprits[0].component, Component::Host);
        assert_eq!(f.culprits[0].rank, Some(2));
        assert!(f.summary.contains("garbage-collection"), "{}", f.summary);
    }

    #[test]
    fn pipeline_stages_with_different_kernels_are_not_compared() {
        // Ranks 4-7 run an extra kernel (the loss of the last stage) and take longer:
        // that is their work, not a fault.
        let mut w = job(8, |r| if r >= 4 { 1.3 } else { 1.0 }, |_| 0.0);
        for s in &mut w {
            for r in &mut s.ranks {
                if r.rank >= 4 {
                    r.ops.push(op("loss", OpKind::Compute, None, 10, 10 * MS));
                }
            }
        }
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(d.findings.is_empty(), "{:#?}", d.findings);
        assert!(d.conclusive);
    }

    #[test]
    fn half_the_ranks_slow_get_low_scores() {
        // Four of eight at half speed: the median sits between the two halves, so the
        // robust test singles out no one, but the relative score still names them.
        let w = job(8, |r| if r < 4 { 2.0 } else { 1.0 }, |_| 0.0);
        let d = analyze_window(&w, &LiveConfig::default());
        assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
        let f = &d.findings[0];
        assert_eq!((f.kind, f.severity), (FindingKind::SlowGpu, Severity::Info));
        let named: BTreeSet<u32> = f.culprits.iter().filter_map(|c| c.rank).collect();
        assert_eq!(named, BTreeSet::from([0, 1, 2, 3]));
        assert!(f.evidence[0].value < 0.6, "{:?}", f.evidence);
    }

    #[test]
    fn a_hang_record_gives_a_critical_hang_naming_the_rank_not_stuck() {
        let mut w = job(8, |_| 1.0, |_| 0.0);
        for s in &mut w {
            let node = s.node.clone();
            for r in &s.ranks {
                if r.rank == 6 {
                    continue;
                }
                s.hangs.push(HangRecord {
                    rank: r.rank,
                    pid: r.pid,
                    op: "allreduce".into(),
                    kind: OpKind::AllReduce,
                    group: Some("dp".into()),
                    in_flight_ns: 300_000 * MS,
                    detected_unix_ns: 1,
                    stacks: vec![ThreadStack {
                        thread: "MainThread".into(),
                        frames: vec![
                            "all_reduce (torch/distributed/distributed_c10d.py:2501)".into(),
                            "train_step (train.py:88)".into(),
                        ],
                    }],
                    stack_source: format!("py-spy on {node}"),
                });
            }
        }
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(d.conclusive);
        assert_eq!(d.findings.len(), 1, "{:#?}", d.findings);
        let f = &d.findings[0];
        assert_eq!(f.kind, FindingKind::Hang);
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.culprits[0].rank, Some(6));
        assert!(f.summary.contains("0-5, 7"), "{}", f.summary);
        let stack = f
            .evidence
            .iter()
            .find(|e| e.metric == EvidenceKey::Stack)
            .unwrap();
        assert!(stack.detail.contains("train.py:88"), "{}", stack.detail);
        assert!(
            stack.detail.contains("same on 7 stuck ranks"),
            "{}",
            stack.detail
        );
    }

    #[test]
    fn a_rank_stuck_in_a_kernel_is_its_own_cause() {
        let mut w = job(4, |_| 1.0, |_| 0.0);
        w[0].hangs.push(HangRecord {
            rank: 1,
            pid: 1001,
            op: "gemm".into(),
            kind: OpKind::Compute,
            group: None,
            in_flight_ns: 120_000 * MS,
            detected_unix_ns: 1,
            stacks: vec![],
            stack_source: "none".into(),
        });
        let d = analyze_window(&w, &LiveConfig::default());
        assert_eq!(d.findings.len(), 1);
        assert_eq!(d.findings[0].culprits[0].component, Component::Gpu);
        assert_eq!(d.findings[0].culprits[0].rank, Some(1));
    }

    #[test]
    fn fewer_than_three_ranks_is_inconclusive() {
        let w = job(2, |r| if r == 1 { 2.0 } else { 1.0 }, |_| 0.0);
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(!d.conclusive);
        assert_eq!(d.ranks, 2);
        assert!(d.findings.is_empty());
        assert!(d.notes[0].contains("only 2 ranks"), "{:?}", d.notes);
    }

    #[test]
    fn ranks_with_only_collectives_and_no_busy_time_are_not_compared() {
        let mut w = job(4, |_| 1.0, |_| 0.0);
        for s in &mut w {
            for r in &mut s.ranks {
                r.busy_ns = 0;
                r.ops.retain(|o| o.kind.is_sync());
            }
        }
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(!d.conclusive);
        assert!(d.findings.is_empty());
        assert!(d.notes[0].contains("were not compared"), "{:?}", d.notes);
    }

    #[test]
    fn dropped_events_are_noted() {
        let mut w = job(4, |_| 1.0, |_| 0.0);
        w[0].ranks[3].dropped_total = 1234;
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(d.findings.is_empty());
        assert!(
            d.notes.iter().any(|n| n.contains("rank 3 on node-0: 1234")),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn unequal_iteration_counts_compare_per_second() {
        // One rank's last step ended just after the window: one iteration fewer, same work.
        let mut w = job(8, |_| 1.0, |_| 0.0);
        w[0].ranks[0].iterations.pop();
        let d = analyze_window(&w, &LiveConfig::default());
        assert!(d.findings.is_empty(), "{:#?}", d.findings);
    }

    #[test]
    fn rank_lists_are_compact() {
        assert_eq!(rank_list(&[0, 1, 2, 3, 5, 7, 8], 8), "0-3, 5, 7-8");
        assert_eq!(rank_list(&[0, 2, 4], 2), "0, 2, ... (3 ranks in all)");
    }
}
