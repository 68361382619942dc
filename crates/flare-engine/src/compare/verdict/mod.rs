//! What a comparison says: the change of the step and the classes of time that carry it,
//! with the action their kind calls for.

mod launches;
mod machine;
mod noise;
mod sequence;
mod words;
pub(super) mod work;

use machine::machine_finding;
use noise::{few_long_steps, median_change_se, median_evidence, step_evidence, step_se};
use sequence::sequence_finding;
use words::{action, class_detail};

use flare_model::{
    ChangedOnRanks, Comparison, Evidence, EvidenceKey, Finding, TimeClassChange, TimeClassKind,
    Unit, WaitedFor,
};

#[derive(Clone, Debug)]
pub struct CompareConfig {
    /// A change of the step below this share of the baseline's is not reported.
    pub min_change: f64,
    /// Ops per step this much more (or less) often count as a different amount of work.
    pub count_change: f64,
    /// The runs' op orders differ when their pair distributions diverge this much (bits),
    /// even with the same op names.
    pub min_divergence_bits: f64,
    /// A change of the step must also be this many standard errors of the difference of
    /// the runs' mean steps: two runs of the same job differ by noise.
    pub min_change_se: f64,
    /// A cause read from time must change by at least this share of the baseline's step.
    pub min_cause_share: f64,
    /// Independent steps (iterations, see `RunProfile::independent_steps`) each run
    /// needs before a change of time is told from its noise: fewer say nothing of the
    /// spread.
    pub min_steps: u64,
    /// Both sides come from one run (before and after a change within it), so a change
    /// of the machine's speed is an event of that run, not a difference of machines.
    pub within_one_run: bool,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            min_change: 0.02,
            count_change: 0.05,
            min_divergence_bits: 0.2,
            min_change_se: 3.0,
            min_cause_share: 0.01,
            min_steps: 5,
            within_one_run: false,
        }
    }
}

/// Classes listed as evidence.
const SHOWN: usize = 4;

/// The findings of kind `regression` for a comparison: the step's change (a warning when
/// the current run is slower, an `info` when faster; none when it changed by less than
/// `cfg.min_change` or within the noise), each cause the evidence names (recorded in
/// `c.causes`), and a change of the op sequence.
pub fn regression_findings(c: &mut Comparison, cfg: &CompareConfig) -> Vec<Finding> {
    let causes = super::causes::named_causes(c, cfg);
    c.causes = causes.iter().map(|(cause, _)| *cause).collect();
    let mut out = step_findings(c, cfg);
    let quiet = out.is_empty();
    out.extend(causes.into_iter().map(|(_, f)| f));
    out.extend(sequence_finding(c, cfg, quiet));
    out
}

/// How sure a step's change is whose lead is a class that took longer, as often (see
/// `step_findings`).
const TIME_ONLY_CONFIDENCE: f64 = 0.8;

/// The `regression` finding of the step's change (see [`regression_findings`]).
fn step_findings(c: &Comparison, cfg: &CompareConfig) -> Vec<Finding> {
    let (before, after) = (c.baseline.step_ms, c.current.step_ms);
    if !(before > 0.0 && after > 0.0) {
        return vec![];
    }
    let delta = after - before;
    let se = step_se(c);
    // With too few steps to estimate the noise, only a change far beyond any run-to-run
    // spread (ten times the threshold) is told.
    let few = c.baseline.independent_steps() < cfg.min_steps
        || c.current.independent_steps() < cfg.min_steps;
    let min_change = if few {
        10.0 * cfg.min_change
    } else {
        cfg.min_change
    };
    // Reruns of the same code measure how much whole runs drift apart (machines, their
    // load and clocks), which each run's own noise leaves out. Where the step's change is
    // within that drift, what is told is what the program runs differently, and a class
    // whose time alone changed past its own drift by `min_change` of the step (a smaller
    // one among a hundred classes passes its test by chance).
    let drifting = c.reruns.as_ref().is_some_and(|r| !r.step_told(delta));
    let past_drift = |r: &TimeClassChange| {
        count_changed(r, cfg)
            || (noise::class_past_drift(c, r, delta)
                && r.delta_ms().abs() >= cfg.min_change * before)
    };
    // The classes that moved the way the step did, most first.
    let movers: Vec<&TimeClassChange> = c
        .classes
        .iter()
        .filter(|r| r.delta_ms() * delta > 0.0)
        .filter(|r| !drifting || past_drift(r))
        .take(SHOWN)
        .collect();
    // Ops run more or less often per step are a change of what the program runs: when
    // they carry `min_change` of the step in its direction, it is told whatever the noise
    // of time says; a change of time alone must stand above the noise.
    let counted_classes = || {
        c.classes.iter().filter(|r| {
            matches!(
                r.kind,
                TimeClassKind::Compute | TimeClassKind::Communication
            ) && count_changed(r, cfg)
        })
    };
    let structural_classes = || counted_classes().filter(|r| reach_ms(r) * delta > 0.0);
    let structural_ms: f64 = structural_classes()
        .map(|r| reach_ms(r).abs().min(delta.abs()))
        .sum();
    // Within the drift, what the program runs differently is told by its net change over
    // every class whose count changed (messages cut into other sizes add some and remove
    // others; a micro-batch split runs other shapes), and that net must stand past those
    // classes' own drift: what they cost is time, measured in runs that drift.
    let structural = if let Some(r) = c.reruns.as_ref().filter(|_| drifting) {
        let net: f64 = counted_classes().map(reach_ms).sum();
        let runs = flare_model::ClassRunToRun::summed(
            counted_classes().filter_map(|k| k.reruns.as_ref()),
            r.degrees_of_freedom,
        );
        net * delta.signum() >= cfg.min_change * before && r.class_told(&runs, delta)
    } else {
        structural_ms >= cfg.min_change * before
    };
    // Told by the medians where the means' noise is too wide.
    let by_median = median_change_se(c, delta)
        .filter(|&z| delta.abs() < cfg.min_change_se * se && z >= cfg.min_change_se);
    if (delta / before).abs() < min_change
        || (!structural && delta.abs() < cfg.min_change_se * se && by_median.is_none())
    {
        return vec![];
    }
    if drifting && !structural && movers.iter().all(|r| count_changed(r, cfg)) {
        return vec![];
    }
    let slower = delta > 0.0;
    // (Within the drift, the classes past their own are what is told, not the step as a
    // whole.)
    if !structural && !drifting {
        if let Some(scale) = super::machine_scale(c) {
            return vec![machine_finding(c, cfg, &scale, se)];
        }
    }
    // A change of what the program runs leads over a class that only took longer when
    // what it adds to a step (on the ranks it changed on: each of their steps holds every
    // rank at the next collective) is at least as large, or half the step's change: the
    // other class may be where that wait or the shared machine's load shows, while the
    // reverse cannot hold.
    let program_change = structural_classes()
        .filter(|_| structural)
        .max_by(|x, y| reach_ms(x).abs().total_cmp(&reach_ms(y).abs()));
    // Many more small kernels on a GPU that waits for the host: their launches, not their
    // device time, are what the step pays, and they show as time no op covers.
    let added = launches::added(c, cfg);
    let launch_ms: f64 = added
        .iter()
        .map(|&(r, n)| n * launches::HOST_MS_PER_LAUNCH + r.delta_ms().max(0.0))
        .sum();
    let by_launches = movers.first().filter(|m| {
        slower
            && matches!(
                m.kind,
                TimeClassKind::Untraced | TimeClassKind::BetweenSteps
            )
            && program_change.is_none_or(|p| !program_leads(p, m, delta))
            && launch_ms >= m.delta_ms()
    });
    let top = match (program_change, movers.first()) {
        _ if by_launches.is_some() => added[0].0,
        (Some(p), Some(m)) if !program_leads(p, m, delta) => *m,
        (Some(p), _) => p,
        (None, Some(m)) => *m,
        (None, None) => return vec![],
    };
    let more_often = count_changed(top, cfg);
    let mut evidence = step_evidence(c, cfg, se);
    evidence.extend(by_median.map(|z| median_evidence(c, cfg, z)));
    let shown = std::iter::once(top)
        .chain(movers.iter().copied().filter(|r| *r != top))
        .take(SHOWN);
    for (i, r) in shown.enumerate() {
        evidence.push(
            Evidence::new(
                EvidenceKey::ClassTimeMs,
                r.current_ms,
                Some(r.baseline_ms),
                Unit::Ms,
                class_detail(r, delta),
            )
            .decisive_if(i == 0),
        );
    }
    let appeared: Vec<&TimeClassChange> = c
        .classes
        .iter()
        .filter(|r| r.baseline_count == 0.0 && r.current_count > 0.0 && !movers.contains(r))
        .take(SHOWN)
        .collect();
    for r in appeared {
        evidence.push(Evidence::new(
            EvidenceKey::ClassTimeMs,
            r.current_ms,
            Some(0.0),
            Unit::Ms,
            class_detail(r, delta),
        ));
    }
    let head = format!(
        "steps {} by {:.1}% ({before:.2} -> {after:.2} ms per step of a rank{})",
        if slower { "slower" } else { "faster" },
        (delta / before).abs() * 100.0,
        if drifting {
            "; within the drift between runs of the same code, but for what follows"
        } else {
            ""
        }
    );
    let waited = waited_for(c, top);
    // Where the lead is an op the baseline never ran on any rank, with others beside it:
    // what they add together (ms per step, classes) is the new code path's cost; and what
    // the current run no longer runs (the path it took before), which it replaced.
    let only_in = |is_current: bool| {
        c.classes
            .iter()
            .filter(move |r| {
                let (here, there) = if is_current {
                    (r.current_count, r.baseline_count)
                } else {
                    (r.baseline_count, r.current_count)
                };
                r.kind == TimeClassKind::Compute
                    && there == 0.0
                    && here > 0.0
                    && r.changed_on.is_none()
            })
            .fold((0.0, 0usize), |(ms, n), r| (ms + r.delta_ms(), n + 1))
    };
    let new_path = if slower
        && top.kind == TimeClassKind::Compute
        && top.baseline_count == 0.0
        && top.changed_on.is_none()
    {
        only_in(true)
    } else {
        (0.0, 0)
    };
    let replaced = if new_path.1 > 0 {
        only_in(false)
    } else {
        (0.0, 0)
    };
    // Most op classes run one multiple as often, or the same ops take a multiple of the
    // inputs: more work per step, told as one.
    let scaled = work::work_scale(c)
        .or_else(|| work::input_scale(c))
        .or_else(|| work::split_scale(c))
        .filter(|w| {
            by_launches.is_none()
                && w.delta_ms * delta > 0.0
                && w.delta_ms.abs() >= 0.5 * delta.abs()
        });
    // How sure the step changed, which this finding tells before the causes that explain
    // it: ops run more or less often are counted, not sampled, and a change of time alone
    // is told only past `min_change_se` standard errors of the noise (a chance under one
    // in 700); with too few steps to know the noise, a change ten times the threshold is
    // still a guess. The lead's share of the change is in the words, not here.
    let certainty: f64 = if few { 0.8 } else { 0.99 };
    // A class that took longer running as often is measured against each run's own noise
    // only: between two runs the same ops also vary with the machines (load, clocks), which
    // one run of each cannot tell apart, so it is less sure than a change the program
    // made, and the causes read from what the program does come first; unless reruns
    // measured that drift and its change stands past it.
    let same_ops = if noise::class_past_drift(c, top, delta) {
        certainty
    } else {
        certainty.min(TIME_ONLY_CONFIDENCE)
    };
    let (summary, confidence) = match (&scaled, &top.changed_on, by_launches) {
        (Some(w), _, _) => (
            format!("{head}; the most of it: {}", w.words(delta)),
            certainty.min(0.95),
        ),
        (_, _, Some(idle)) => (
            format!(
                "{head}: {:.0} more kernels per step ({}): the GPU waits for their launches, which shows as {} {:+.2} ms",
                added.iter().map(|a| a.1).sum::<f64>(),
                launches::listed(&added),
                idle.label(),
                idle.delta_ms()
            ),
            // that the launches, not the kernels, are what the step pays is inferred
            certainty.min(0.8),
        ),
        (_, Some(on), _) if more_often => {
            // Where the others' time shows it: the largest other class that moved.
            let shows = movers
                .iter()
                .find(|r| *r != &top && r.kind != TimeClassKind::Compute)
                .map(|r| format!(" (it shows most as {} {:+.2} ms)", r.label(), r.delta_ms()))
                .unwrap_or_default();
            let synchronous = c.classes.iter().any(|r| {
                matches!(
                    r.kind,
                    TimeClassKind::Communication | TimeClassKind::Waiting
                )
            });
            (
                format!(
                    "{head}: {}{}",
                    words::on_ranks(top, on),
                    if synchronous {
                        format!(", which every rank waits for at its collectives{shows}")
                    } else {
                        String::new()
                    }
                ),
                // What it adds on those ranks is only the most it can cost the others.
                (on.delta_ms() / delta).min(0.9).min(certainty),
            )
        }
        _ if new_path.1 > 1 => (
            format!(
                "{head}; the most of it: {} op classes the baseline never ran (a new code path), {:+.2} ms per step ({:.0}% of the change), the largest {} {:+.2} ms{}",
                new_path.1,
                new_path.0,
                new_path.0 / delta * 100.0,
                top.label(),
                top.delta_ms(),
                if replaced.1 > 0 {
                    format!(
                        "; in place of {} op class{} it no longer runs ({:+.2} ms): a net {:+.2} ms per step",
                        replaced.1,
                        if replaced.1 == 1 { "" } else { "es" },
                        replaced.0,
                        new_path.0 + replaced.0
                    )
                } else {
                    String::new()
                }
            ),
            certainty,
        ),
        _ => (
            format!(
                "{head}; the most of it: {} {:+.2} ms ({:.0}% of the change){}",
                top.label(),
                top.delta_ms(),
                top.delta_ms() / delta * 100.0,
                if more_often {
                    format!(
                        ", run {:.1} times per step against {:.1}{}{}",
                        top.current_count,
                        top.baseline_count,
                        recut_net(c, top, cfg).map_or(String::new(), |net| format!(
                            "; {kind}'s messages are cut into other sizes, a net {net:+.2} ms per step over them",
                            kind = crate::compare::causes::collective_of(&top.class)
                        )),
                        reshaped(c, top, cfg).map_or(String::new(), |r| format!(
                            ": its shapes changed ({} runs {:.1} times per step against {:.1}, {:+.2} ms)",
                            r.class,
                            r.current_count,
                            r.baseline_count,
                            r.delta_ms()
                        ))
                    )
                } else if let Some((w, grown)) = waited {
                    format!(
                        ": the other ranks wait {:+.2} ms per step longer for {}, where {} grew {:+.2} ms per step",
                        w.others_wait_ms,
                        w.label(),
                        grown.label(),
                        w.grew[0].delta_ms
                    )
                } else {
                    String::new()
                }
            ),
            if more_often || waited.is_some() {
                certainty
            } else {
                same_ops
            },
        ),
    };
    let action = match (waited, by_launches) {
        (_, Some(_)) => "the step launches many more small kernels (a Python loop of tensor ops: per-parameter or per-element updates, metrics kept on the device), and the host's time to issue them, not the GPU, sets the step: fuse them (torch._foreach_* ops, one op over a stacked tensor, torch.compile) or capture them in a CUDA graph; find what calls them (torch.profiler with with_stack=True)".to_string(),
        (Some((w, grown)), None) => format!(
            "the other ranks wait for {} at their collectives, where {} grew {:+.2} ms per step: {}",
            w.label(),
            grown.label(),
            w.grew[0].delta_ms,
            if grown.kind == TimeClassKind::Compute
                && !count_changed(grown, cfg)
                && grew_there_alone(w, grown)
            {
                // the same ops, slower on some ranks alone: not the code or the libraries,
                // which every rank shares
                words::slower_on_some(&w.label(), c.current.cpu_compute)
            } else {
                action(grown, slower, count_changed(grown, cfg), c.current.cpu_compute)
            }
        ),
        (None, None) => action(top, slower, more_often, c.current.cpu_compute),
    };
    let action = scaled.as_ref().map_or(action, work::WorkScale::action);
    let action = match optimizer_unfused(c, top) {
        Some(gone) if slower => gone,
        _ => action,
    };
    let action = match few_long_steps(c, delta) {
        Some(tail)
            if slower
                && matches!(
                    top.kind,
                    TimeClassKind::Untraced | TimeClassKind::BetweenSteps
                ) =>
        {
            format!("{action}. {tail}")
        }
        _ => action,
    };
    vec![crate::compare::causes::finding(
        crate::compare::causes::severity(slower),
        summary,
        confidence.clamp(0.0, 0.99),
        evidence,
        action,
    )]
}

/// Where the optimizer leads and its multi-tensor ops (`aten::_foreach_*`, the fused
/// kernels) are gone from the current run, what says so: its updates became a
/// per-parameter loop.
fn optimizer_unfused(c: &Comparison, top: &TimeClassChange) -> Option<String> {
    if top.kind != TimeClassKind::Host || top.class != flare_model::OpKind::Optimizer.as_str() {
        return None;
    }
    let seq = c.sequence.as_ref()?;
    let gone: Vec<&str> = seq
        .disappeared
        .iter()
        .filter(|n| n.starts_with("aten::_foreach_") || n.starts_with("aten::_fused_"))
        .map(String::as_str)
        .collect();
    (!gone.is_empty()).then(|| {
        format!(
            "the optimizer no longer runs its multi-tensor ops ({}{}), so it loops over the parameters: pass foreach=True (or fused=True) to the optimizer, or find what turned it off",
            gone.iter().take(3).copied().collect::<Vec<_>>().join(", "),
            if gone.len() > 3 { ", ..." } else { "" }
        )
    })
}

/// Where `top` is a size of a collective whose other sizes changed count too (its messages
/// cut otherwise: one size gone, others new), what that collective's time changed over all
/// its sizes, ms per step: one size's change alone overstates it.
fn recut_net(c: &Comparison, top: &TimeClassChange, cfg: &CompareConfig) -> Option<f64> {
    if top.kind != TimeClassKind::Communication {
        return None;
    }
    let kind = crate::compare::causes::collective_of(&top.class);
    let sizes: Vec<&TimeClassChange> = c
        .classes
        .iter()
        .filter(|r| {
            r.kind == TimeClassKind::Communication
                && crate::compare::causes::collective_of(&r.class) == kind
                && count_changed(r, cfg)
        })
        .collect();
    let fewer = sizes.iter().any(|r| r.current_count < r.baseline_count);
    let more = sizes.iter().any(|r| r.current_count > r.baseline_count);
    (fewer && more).then(|| sizes.iter().map(|r| r.delta_ms()).sum())
}

/// Where the compute op `top` stopped or started running and the same op runs as often on
/// other shapes instead (a layer's width changed): the class that took its place.
fn reshaped<'a>(
    c: &'a Comparison,
    top: &TimeClassChange,
    cfg: &CompareConfig,
) -> Option<&'a TimeClassChange> {
    let (op, _) = top.class.split_once(" [[")?;
    let gone = top.current_count == 0.0;
    if top.kind != TimeClassKind::Compute || gone == (top.baseline_count == 0.0) {
        return None;
    }
    let count = top.baseline_count.max(top.current_count);
    c.classes.iter().find(|r| {
        r.kind == TimeClassKind::Compute
            && r.class != top.class
            && r.class.split_once(" [[").is_some_and(|(o, _)| o == op)
            && (if gone {
                r.baseline_count
            } else {
                r.current_count
            }) == 0.0
            && (r.baseline_count.max(r.current_count) - count).abs() <= cfg.count_change * count
    })
}

/// Where a wait that leads comes from: the ranks the others wait for, and the class that
/// grew most on them (its row), when the comparison has each rank's time.
fn waited_for<'a>(
    c: &'a Comparison,
    top: &TimeClassChange,
) -> Option<(&'a WaitedFor, &'a TimeClassChange)> {
    if top.kind != TimeClassKind::Waiting {
        return None;
    }
    let w = c.waited_for.as_ref()?;
    let first = w.grew.first()?;
    let row = c
        .classes
        .iter()
        .find(|r| r.kind == first.kind && r.class == first.class)?;
    Some((w, row))
}

/// Whether the class that grew most on the ranks waited for (`grown`, its row over every
/// rank) grew on the other ranks by at most a quarter as much.
fn grew_there_alone(w: &WaitedFor, grown: &TimeClassChange) -> bool {
    let (n, late) = (f64::from(w.compared), f64::from(w.count));
    let there = w.grew.first().map_or(0.0, |g| g.delta_ms);
    let elsewhere = (grown.delta_ms() * n - there * late) / (n - late).max(1.0);
    there > 0.0 && elsewhere <= 0.25 * there
}

/// Whether a class runs a different number of ops per step (beyond `cfg.count_change`
/// over all ranks, or on some of them).
fn count_changed(r: &TimeClassChange, cfg: &CompareConfig) -> bool {
    let (b, c) = (r.baseline_count, r.current_count);
    r.changed_on.is_some() || (c - b).abs() > cfg.count_change * b.max(c) && (b > 0.0 || c > 0.0)
}

/// Whether the program's change `p` leads over the class `m` that moved most (see
/// [`step_findings`]), the step having changed by `delta` ms: when it adds as much, or,
/// where only some ranks changed, half the step's change (every rank runs the same code
/// and shapes, so a change on some alone is a code path they take, not a shape or a
/// library that renamed the class on every rank).
fn program_leads(p: &TimeClassChange, m: &TimeClassChange, delta: f64) -> bool {
    let reach = reach_ms(p).abs();
    reach >= m.delta_ms().abs() || (p.changed_on.is_some() && reach >= 0.5 * delta.abs())
}

/// What a class's change adds to a step: on the ranks it changed on where only some did
/// (what a synchronous job's every rank then waits for), else its mean.
fn reach_ms(r: &TimeClassChange) -> f64 {
    r.changed_on
        .as_ref()
        .map_or(r.delta_ms(), ChangedOnRanks::delta_ms)
}
