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
//! detector its series (fail-slow onsets), and [`continuity`] holds a mild slow-rank
//! verdict until enough windows running show it.

mod contention;
mod continuity;
mod cpu;
mod input;
pub mod replay;
#[cfg(test)]
pub(crate) mod tests;
mod window;

pub use continuity::{confirm_with_previous, name_by_continuity};
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
    /// Likewise, for `small_cost_windows`, a rank that costs its job less than this share
    /// of the step (its time beyond its peers' per step over the typical step): the ranks
    /// of a small job on shared cores differ by a few percent of the step window to
    /// window, and a rank that costs the job that little is not worth a page at once.
    pub confirm_below_step_share: f64,
    /// Windows running that must find a rank costing under `confirm_below_step_share` of
    /// the step slow before it is a warning: two windows of a healthy CPU job on shared
    /// cores have shown one rank 5% of the step behind (CI, a1db1b6), and the chance
    /// falls with each window.
    pub small_cost_windows: u32,
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
            small_cost_windows: 3,
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
