//! Continuity across a live job's windows: a slow-rank verdict held until enough windows
//! running show it ([`confirm_with_previous`]), and a rank kept named while it stays the
//! slowest past half the usual bar ([`name_by_continuity`]).

use super::{run, LiveConfig, LiveDiagnosis, LiveRank, LiveWindow};
use flare_model::{DetectorId, Evidence, EvidenceKey, Finding, Severity, Unit};

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
        f.first_rank()
            .filter(|_| f.detector == DetectorId::SlowRank && f.severity >= Severity::Warning)
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
        .and_then(|p| p.iter().find(|f| named(f).is_some()))
        .and_then(|prior| {
            let f = now.iter().find(|f| named(f) == named(prior))?;
            Some((f, windows_running(prior) + 1))
        });
    let (mut f, why, running) = if let Some((f, running)) = held {
        (
            f.clone(),
            "still (named in the previous window; in this one past half the usual bar)",
            running,
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
        (
            f.clone(),
            "in two windows running past half the usual bar",
            2,
        )
    };
    let Some(rank) = named(&f) else {
        return;
    };
    if warned(rank) {
        return;
    }
    f.summary = format!("{why}: {}", f.summary);
    f.evidence.push(windows_running_evidence(running));
    // An unconfirmed info note of the same rank is this finding's weaker twin.
    d.findings
        .retain(|g| !(g.detector == DetectorId::SlowRank && g.first_rank() == Some(rank)));
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

/// The self-time excess a slow-rank finding reports (its excess over the typical rank's,
/// as a fraction), when it carries one.
fn self_time_excess(f: &Finding) -> Option<f64> {
    f.evidence
        .iter()
        .find(|e| e.metric == EvidenceKey::SelfTimeExcess)
        .map(|e| (e.value - e.baseline.unwrap_or(0.0)) / 100.0)
}

/// Windows running (this one included) in which a slow-rank finding's rank was found
/// slow: its `windows_running` evidence (a finding without it, one named by continuity
/// before this evidence existed, counts as one).
fn windows_running(f: &Finding) -> u32 {
    f.evidence
        .iter()
        .find(|e| e.metric == EvidenceKey::WindowsRunning)
        .map_or(1, |e| e.value.max(1.0) as u32)
}

fn windows_running_evidence(running: u32) -> Evidence {
    Evidence::new(
        EvidenceKey::WindowsRunning,
        running as f64,
        None,
        Unit::Windows,
        format!(
            "found slow in {running} window{} running",
            super::plural(running as usize)
        ),
    )
}

/// Continuity across windows. Every slow-rank finding carries how many windows running
/// (`previous`, the job's previous window's findings, tells the count before this one)
/// have found its rank slow, warning or not. A warning stands at once only when it is
/// strong: a self-time excess of at least `cfg.confirm_below_excess`, a cost of at least
/// `cfg.confirm_below_step_share` of the step, and not one stall. A mild excess or one
/// stall needs two windows running; a rank that costs its job under
/// `cfg.confirm_below_step_share` of the step needs `cfg.small_cost_windows` (the ranks
/// of a job on shared cores differ by a few percent of the step, and one of them can stay
/// behind for two windows by chance). Until then it is an `info` finding marked
/// unconfirmed. A rank the previous window warned about stays a warning. Pure: the caller
/// (the server) passes the previous window's findings.
pub fn confirm_with_previous(
    d: &mut LiveDiagnosis,
    current: &LiveWindow,
    previous: Option<&[Finding]>,
    cfg: &LiveConfig,
) {
    let before = |rank: Option<u32>| {
        previous.and_then(|p| {
            p.iter()
                .find(|f| f.detector == DetectorId::SlowRank && f.first_rank() == rank)
        })
    };
    for f in d.findings.iter_mut() {
        if f.detector != DetectorId::SlowRank {
            continue;
        }
        let rank = f.first_rank();
        let prior = before(rank);
        let running = 1 + prior.map_or(0, windows_running);
        f.evidence.push(windows_running_evidence(running));
        if f.severity != Severity::Warning {
            continue;
        }
        let excess = self_time_excess(f).unwrap_or(f64::INFINITY);
        let share = rank.map_or(f64::INFINITY, |r| step_share(current, r));
        let stall = rank.and_then(|r| one_stall(current, r));
        let needed = if share < cfg.confirm_below_step_share {
            cfg.small_cost_windows
        } else if excess < cfg.confirm_below_excess || stall.is_some() {
            2
        } else {
            1
        };
        let warned_before = prior.is_some_and(|p| p.severity >= Severity::Warning);
        if running >= needed || warned_before {
            continue;
        }
        f.severity = Severity::Info;
        let why = match stall {
            Some(s) => format!(
                "one stall (an iteration {:.0} ms longer than its median)",
                s / 1e6
            ),
            None if running == 1 => "first window with it".to_string(),
            None => format!(
                "{running} windows running; it costs the job {:.1}% of the step",
                share * 100.0
            ),
        };
        let then = match needed - running {
            1 => "a warning if the next window shows it too".to_string(),
            n => format!("a warning if the next {n} windows show it too"),
        };
        f.summary = format!("unconfirmed ({why}; {then}): {}", f.summary);
    }
    d.findings.sort_by(Finding::by_importance);
}
