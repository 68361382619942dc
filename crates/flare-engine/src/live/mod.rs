//! Live diagnosis: the node agents' window summaries through the same detectors as files.
//!
//! Each window's summaries become a [`LiveWindow`] (one record per rank); the window being
//! diagnosed and up to [`LiveConfig::history`] earlier ones become a [`JobContext`] and
//! one digest per window ([`input`]), and the registry runs on them as on a file's
//! iterations: a window is the live engine's iteration. Detectors that need what
//! summaries do not carry (collective instances, transfer times; the parallel layout
//! where the ranks do not state it) are skipped with their reason; the watchdog
//! detector reads the window's hang records.
//! Continuity across windows is here too: the earlier windows give the iteration
//! detector its series (fail-slow onsets), and [`confirm_with_previous`] holds a mild
//! slow-rank verdict until a second window shows it.

mod contention;
mod cpu;
mod input;
pub mod replay;
#[cfg(test)]
pub(crate) mod tests;
mod window;

pub use cpu::{CpuSplit, TimeSpent, UntracedWait};
pub use window::{LiveRank, LiveWindow};

use crate::stream::run_detectors;
use crate::{Analysis, EngineConfig};
use flare_model::{
    Component, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, SkippedDetector,
    Unit,
};

/// Thresholds of live diagnosis. Defaults are the documented behaviour.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    /// The detectors' thresholds (the same as for files).
    pub engine: EngineConfig,
    /// Earlier windows analysed with the current one (the iteration detector needs 4
    /// windows with iterations).
    pub history: usize,
    /// Fewest ranks in a peer group (ranks running the same kernels) for its ranks to be
    /// compared.
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
    /// Likewise for a rank that costs its job less than this share of the step (its time
    /// beyond its peers' per step over the typical step): the ranks of a small job on
    /// shared cores differ by a few percent of the step window to window, and a rank
    /// that costs the job that little once is not worth a page.
    pub confirm_below_step_share: f64,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            engine: EngineConfig::default(),
            history: 7,
            min_ranks: 3,
            min_own_share: 0.01,
            confirm_below_excess: 0.15,
            confirm_below_step_share: 0.1,
        }
    }
}

/// The live engine's answer for one window of one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveDiagnosis {
    /// Most important first: severity, then confidence.
    pub findings: Vec<Finding>,
    /// Whether a detector that localizes slowdowns could look at the window (or a
    /// finding names a culprit): nothing found is then evidence of health.
    pub conclusive: bool,
    /// Ranks with data in the window.
    pub ranks: usize,
    /// Detectors that could not run on the window, with why.
    pub skipped: Vec<SkippedDetector>,
    /// What a person should know about the data itself (drops, ranks not compared).
    pub notes: Vec<String>,
}

/// Diagnoses `current` with up to [`LiveConfig::history`] of the job's `earlier` windows
/// (any order; later windows than `current` are ignored), then applies the continuity
/// rule with `previous`, the job's previous window's findings (`None` when there is
/// none). What the server calls for every window; pure.
pub fn diagnose_window(
    current: &LiveWindow,
    earlier: &[&LiveWindow],
    previous: Option<&[Finding]>,
    cfg: &LiveConfig,
) -> LiveDiagnosis {
    let mut d = analyze_window(current, earlier, cfg);
    confirm_with_previous(&mut d, current, previous, cfg);
    name_by_continuity(&mut d, current, earlier, previous, cfg);
    d
}

/// The z-score bar, as a fraction of the one that names a rank, that a rank must clear to
/// be named by continuity (see [`name_by_continuity`]). A job of a few ranks spreads its
/// peers' time widely at times, so that a rank clearly slower in every window clears the
/// full bar in most of them only; a verdict that flickers window to window, or comes three
/// windows late, is one nobody can act on.
const CONTINUITY_Z_FRACTION: f64 = 0.5;

/// Continuity over windows, past the bar of one window: a rank the previous window warned
/// about as slow stays named while it is still the slowest of its peers past half the
/// usual bar; a rank past half the bar in this window and the one before, costing the
/// job at least `cfg.confirm_below_step_share` of the step in both (a rank a few percent
/// behind window after window is how ranks differ: the one that hosts the store, the
/// one that logs), is named. A note in the summary says which.
pub fn name_by_continuity(
    d: &mut LiveDiagnosis,
    current: &LiveWindow,
    earlier: &[&LiveWindow],
    previous: Option<&[Finding]>,
    cfg: &LiveConfig,
) {
    let named = |f: &Finding| {
        (f.detector == DetectorId::SlowRank && f.severity >= Severity::Warning)
            .then(|| f.culprits.first().and_then(|c| c.rank))
            .flatten()
    };
    if d.findings
        .iter()
        .any(|f| f.detector == DetectorId::Watchdog && f.severity == Severity::Critical)
    {
        return;
    }
    let mut lower = cfg.clone();
    lower.engine.slow_rank.min_z *= CONTINUITY_Z_FRACTION;
    let relaxed = |w: &LiveWindow| run(&[w], w, None, &lower).0.findings;
    let now = relaxed(current);
    let warned = |rank: u32| {
        d.findings.iter().any(|f| {
            f.severity >= Severity::Warning && f.culprits.iter().any(|c| c.rank == Some(rank))
        })
    };
    let held = previous
        .and_then(|p| p.iter().find_map(named))
        .and_then(|rank| now.iter().find(|f| named(f) == Some(rank)));
    let (mut f, why) = if let Some(f) = held {
        (
            f.clone(),
            "still (named in the previous window; in this one past half the usual bar)",
        )
    } else {
        let Some((f, rank)) = now.iter().find_map(|f| named(f).map(|r| (f, r))) else {
            return;
        };
        let before = earlier.iter().find(|w| w.window + 1 == current.window);
        let twice = before.is_some_and(|b| {
            relaxed(b).iter().find_map(named) == Some(rank)
                && step_share(b, rank) >= cfg.confirm_below_step_share
        }) && step_share(current, rank) >= cfg.confirm_below_step_share;
        if !twice {
            return;
        }
        (f.clone(), "in two windows running past half the usual bar")
    };
    let Some(rank) = named(&f) else {
        return;
    };
    if warned(rank) {
        return;
    }
    f.summary = format!("{why}: {}", f.summary);
    // An unconfirmed info note of the same rank is this finding's weaker twin.
    d.findings.retain(|g| {
        !(g.detector == DetectorId::SlowRank
            && g.culprits.first().and_then(|c| c.rank) == Some(rank))
    });
    d.findings.push(f);
    d.findings.sort_by(Finding::by_importance);
}

/// The excess of `rank`'s longest iteration over its median one, where that one
/// iteration holds at least half of what the rank cost its peers over `w`: one stall (a
/// process descheduled or paging once, a one-off pause), which a persistent straggler is
/// not: it spreads its cost over every iteration. One stall is no verdict until the next
/// window shows the rank again.
fn one_stall(w: &LiveWindow, rank: u32) -> Option<f64> {
    let r = w.rank(rank).filter(|r| r.iterations >= 3)?;
    let spike = r.longest_iteration_ns - r.median_iteration_ns;
    let cost = excess_per_step_ns(w, rank)? * r.iterations as f64;
    (spike.is_finite() && cost > 0.0 && spike >= ONE_STALL_SHARE * cost).then_some(spike)
}

/// The share of a rank's cost over a window that one iteration must hold to be one stall.
const ONE_STALL_SHARE: f64 = 0.5;

/// How far `rank` is behind the median of the other ranks per step, as a share of the
/// typical step (0 when it cannot tell).
fn step_share(w: &LiveWindow, rank: u32) -> f64 {
    let mut steps: Vec<f64> = w
        .with_data()
        .map(|r| r.iteration_ns)
        .filter(|t| t.is_finite() && *t > 0.0)
        .collect();
    match excess_per_step_ns(w, rank) {
        Some(excess) if !steps.is_empty() => excess / crate::stats::median(&mut steps),
        _ => 0.0,
    }
}

/// How far `rank`'s own time per step is beyond the median of the other ranks' (`None`
/// when it or they did not step).
fn excess_per_step_ns(w: &LiveWindow, rank: u32) -> Option<f64> {
    let per_step = LiveRank::own_per_iteration;
    let own = w.rank(rank).filter(|r| r.iterations > 0)?;
    let mut others: Vec<f64> = w
        .with_data()
        .filter(|r| r.rank != rank && r.iterations > 0)
        .map(per_step)
        .collect();
    (!others.is_empty()).then(|| per_step(own) - crate::stats::median(&mut others))
}

/// [`diagnose_window`] without the continuity rule.
pub fn analyze_window(
    current: &LiveWindow,
    earlier: &[&LiveWindow],
    cfg: &LiveConfig,
) -> LiveDiagnosis {
    let mut windows: Vec<&LiveWindow> = earlier
        .iter()
        .copied()
        .filter(|w| w.window < current.window)
        .collect();
    windows.sort_by_key(|w| w.window);
    windows.dedup_by_key(|w| w.window);
    let keep = windows.len().saturating_sub(cfg.history);
    windows.drain(..keep);
    windows.push(current);
    // The window itself, for what the ranks do now; with the earlier ones, for the
    // series of iteration times (a rank slow only in an earlier window was reported then).
    // Start-up is read over every window at hand: ranks' records meet in a few windows.
    let startup = crate::detectors::startup::StartupView::from_windows(&windows);
    let (now, input_notes) = run(
        &windows[windows.len() - 1..],
        current,
        startup.as_ref(),
        cfg,
    );
    let mut notes = current.notes.clone();
    notes.extend(input_notes);
    let mut findings: Vec<Finding> = now
        .findings
        .into_iter()
        .filter(|f| f.detector != DetectorId::Iteration)
        .collect();
    let mut skipped = now.skipped;
    let localizer_ran = now.localizer_ran;
    if windows.len() > 1 {
        let (series, _) = run(&windows, current, None, cfg);
        let this = current.window as u32;
        findings.extend(series.findings.into_iter().filter(|f| {
            f.detector == DetectorId::Iteration
                && (f.iterations.is_empty() || f.iterations.contains(&this))
        }));
        contention::explain_slowdowns(&mut findings, &windows);
        skipped.retain(|s| s.detector != DetectorId::Iteration);
        skipped.extend(
            series
                .skipped
                .into_iter()
                .filter(|s| s.detector == DetectorId::Iteration),
        );
    }
    // Stuck ranks: the watchdog's hang, or where the in-collective progress stopped (the
    // two merge when they name the same rank).
    let hung = findings
        .iter()
        .any(|f| f.kind == FindingKind::Hang && f.severity == Severity::Critical);
    if hung {
        // A stuck job's totals measure the hang, not the ranks' speed.
        // Other hang findings (where inside the collective progress stopped) stay.
        let before = findings.len();
        findings.retain(|f| f.detector == DetectorId::Watchdog || f.kind == FindingKind::Hang);
        if findings.len() < before {
            notes.push(
                "other findings withheld: ranks are stuck (see the hang finding), so their times measure the hang".into(),
            );
        }
    }
    let ranks = current.with_data().count();
    if ranks < cfg.min_ranks {
        notes.push(format!(
            "only {ranks} rank{} reported data in this window; comparing ranks needs {}",
            plural(ranks),
            cfg.min_ranks
        ));
    }
    if windows.len() > 1 {
        notes.push(format!(
            "iteration times read with the {} window{} before it; iterations in findings are window indices",
            windows.len() - 1,
            plural(windows.len() - 1)
        ));
    }
    let mut blind = false;
    if let Some(u) = current.untraced_wait().filter(|u| {
        // A hang is what the window says (its ranks' CPU times measure the hang).
        !hung
            && !findings.iter().any(|f| {
                f.severity > Severity::Info && f.culprits.iter().any(|c| c.rank == Some(u.rank))
            })
    }) {
        // Flare cannot see where the job waits: saying "healthy" would be a guess.
        blind = true;
        notes.push(format!(
            "the ranks' traced time does not show where they wait: rank {} works more on its CPU per step than its peers, who must wait for it outside every traced collective; this window is not judged",
            u.rank
        ));
        findings.push(untraced_wait_finding(&u, current));
    }
    findings.sort_by(Finding::by_importance);
    let localized = findings
        .iter()
        .any(|f| f.severity > Severity::Info && f.localizes());
    LiveDiagnosis {
        conclusive: !blind && (localizer_ran || localized),
        ranks,
        findings,
        skipped,
        notes,
    }
}

/// The `info` naming a rank whose extra CPU work its peers wait for untraced.
fn untraced_wait_finding(u: &UntracedWait, current: &LiveWindow) -> Finding {
    let extra = u.cpu_ns - u.peer_cpu_ns;
    let mut culprit = flare_model::Culprit::new(Component::Process);
    culprit.rank = Some(u.rank);
    culprit.element = current.rank(u.rank).map(|r| r.node.clone());
    Finding {
        kind: FindingKind::SlowCpu,
        severity: Severity::Info,
        summary: format!(
            "rank {} works {:.1} ms more on its CPU per step than its peers ({:.0}% of a step), yet its time outside traced collectives matches theirs: its peers wait for it where Flare traces nothing",
            u.rank,
            extra / 1e6,
            extra / u.step_ns * 100.0
        ),
        confidence: 0.5,
        culprits: vec![culprit],
        evidence: vec![Evidence::new(
            EvidenceKey::CpuTimePerIterationMs,
            u.cpu_ns / 1e6,
            Some(u.peer_cpu_ns / 1e6),
            Unit::Ms,
            format!(
                "CPU time per step against its peers' median; its time outside collectives is {:.1} ms per step beyond theirs",
                u.own_extra_ns / 1e6
            ),
        )
        .decisive()],
        action: format!(
            "trace the job's communication: Flare sees torch.distributed's calls, DDP's buckets and FSDP's gathers; collectives made another way (functional collectives under torch.compile or DTensor, a custom backend) are not seen, so who waits for whom cannot be measured; meanwhile profile rank {} (py-spy) for the CPU work its peers do not do",
            u.rank
        ),
        iterations: vec![],
        detector: DetectorId::SlowRank,
        corroborated_by: vec![],
        failure: None,
    }
}

/// The registry on `windows` (the last is `current`), with the notes on its input (peer
/// groups not compared).
fn run(
    windows: &[&LiveWindow],
    current: &LiveWindow,
    startup: Option<&crate::detectors::startup::StartupView>,
    cfg: &LiveConfig,
) -> (crate::Diagnosis, Vec<String>) {
    let input = input::build(windows, cfg);
    let mut a = Analysis::new(&input.ctx, input.digests.iter().collect());
    a.live = Some(current);
    a.startup = startup;
    let d = run_detectors(&a, &cfg.engine);
    (d, input.notes)
}

/// The self-time excess a slow-rank finding reports (its excess over the typical rank's,
/// as a fraction), when it carries one.
fn self_time_excess(f: &Finding) -> Option<f64> {
    f.evidence
        .iter()
        .find(|e| e.metric == EvidenceKey::SelfTimeExcess)
        .map(|e| (e.value - e.baseline.unwrap_or(0.0)) / 100.0)
}

/// Continuity across windows: a slow-rank warning with a self-time excess under
/// `cfg.confirm_below_excess`, or that costs under `cfg.confirm_below_step_share` of the
/// step in `current`, stays a warning only if `previous` (the job's previous window's
/// findings) named the same rank, warning or not; otherwise it becomes an `info` finding
/// marked unconfirmed, and the next window confirms it if it persists. Pure: the caller
/// (the server) passes the previous window's findings.
pub fn confirm_with_previous(
    d: &mut LiveDiagnosis,
    current: &LiveWindow,
    previous: Option<&[Finding]>,
    cfg: &LiveConfig,
) {
    let first_rank = |f: &Finding| f.culprits.first().and_then(|c| c.rank);
    let flagged_before = |rank: Option<u32>| {
        previous.is_some_and(|p| {
            p.iter()
                .any(|f| f.detector == DetectorId::SlowRank && first_rank(f) == rank)
        })
    };
    for f in d.findings.iter_mut() {
        if f.detector != DetectorId::SlowRank || f.severity != Severity::Warning {
            continue;
        }
        let excess = self_time_excess(f).unwrap_or(f64::INFINITY);
        let costly =
            first_rank(f).is_none_or(|r| step_share(current, r) >= cfg.confirm_below_step_share);
        let stall = first_rank(f).and_then(|r| one_stall(current, r));
        let mild = excess < cfg.confirm_below_excess || !costly || stall.is_some();
        if mild && !flagged_before(first_rank(f)) {
            f.severity = Severity::Info;
            let why = match stall {
                Some(s) => format!(
                    "one stall (an iteration {:.0} ms longer than its median)",
                    s / 1e6
                ),
                None => "first window with it".to_string(),
            };
            f.summary = format!(
                "unconfirmed ({why}; a warning if the next window shows it too): {}",
                f.summary
            );
        }
    }
    d.findings.sort_by(Finding::by_importance);
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Ranks as compact ranges (`0-3, 5, 7-9`), at most `max` ranges.
pub(crate) fn rank_list(ranks: &[u32], max: usize) -> String {
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
