//! Start-up (after Bootseer, whose jobs spent more than 3.5% of their GPU time starting):
//! the ranks' start-up phases as Flare's Python package records them (launch, `import
//! torch`, `init_process_group`, checkpoint load, DDP's constructor, the first batch, the
//! first step, and the program's own phases). Two findings: a rank (or node) that the
//! others waited for in a phase the ranks meet in, with the phase of its own that made it
//! late, while they wait and once start-up is over; and, once every rank finished its
//! first step, where the job's start-up time went. Runs on live windows; traces from
//! other tools carry no start-up phases.

#[cfg(test)]
mod tests;
mod timeline;

pub use timeline::{breakdown, late_ranks, Breakdown, Cause, Late, StartupConfig, StartupView};

use crate::live::{plural, rank_list};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity,
    StartupPhase, Unit,
};
use std::collections::BTreeMap;

pub struct StartupDetector;

impl Detector for StartupDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Startup
    }
    fn summary(&self) -> &'static str {
        "start-up phase by phase: the rank or node the others waited for, and where start-up time went"
    }
    fn needs(&self) -> &'static str {
        "live capture of ranks traced by Flare's Python package from flare.init() (its start-up phases)"
    }
    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        match (a.startup, a.live) {
            (Some(v), _) => Outcome::Findings(findings(v, &cfg.startup)),
            // A live window without start-up records: the job started before the window.
            (None, Some(_)) => Outcome::Findings(vec![]),
            (None, None) => Outcome::NotApplicable,
        }
    }
}

/// The findings for one view of the job's start-up.
pub fn findings(v: &StartupView, cfg: &StartupConfig) -> Vec<Finding> {
    let mut out = late_findings(v, cfg);
    if v.complete() {
        if let Some(b) = breakdown(v) {
            let waited = !out.is_empty();
            out.push(breakdown_finding(&b, v.ranks.len(), waited));
        }
    }
    out
}

fn secs(ns: f64) -> f64 {
    ns / 1e9
}

/// A duration for a person: seconds, or milliseconds under a tenth of a second.
fn duration(ns: f64) -> String {
    if ns >= 0.1e9 {
        format!("{:.1} s", secs(ns))
    } else {
        format!("{:.0} ms", ns / 1e6)
    }
}

/// One finding per late rank, or per node whose every rank was late to the same phase.
fn late_findings(v: &StartupView, cfg: &StartupConfig) -> Vec<Finding> {
    let lates = late_ranks(v, cfg);
    // A node whose every known rank is late to a phase is one culprit (a node that came
    // up late, its filesystem); ranks nothing was heard from have no node.
    let mut by_node: BTreeMap<(StartupPhase, &str), Vec<&Late>> = BTreeMap::new();
    let mut alone: Vec<Vec<&Late>> = Vec::new();
    for l in &lates {
        match &l.node {
            Some(n) => by_node.entry((l.phase, n.as_str())).or_default().push(l),
            None => alone.push(vec![l]),
        }
    }
    let mut groups: Vec<(Option<&str>, Vec<&Late>)> = Vec::new();
    for ((_, node), ls) in by_node {
        let node_ranks = v.ranks.iter().filter(|r| r.node == node).count();
        if ls.len() >= 2 && ls.len() == node_ranks {
            groups.push((Some(node), ls));
        } else {
            groups.extend(ls.into_iter().map(|l| (None, vec![l])));
        }
    }
    // Ranks nothing was heard from, late to the same phase: one finding.
    let mut untraced: BTreeMap<StartupPhase, Vec<&Late>> = BTreeMap::new();
    for g in alone {
        untraced.entry(g[0].phase).or_default().extend(g);
    }
    groups.extend(untraced.into_values().map(|ls| (None, ls)));
    groups
        .into_iter()
        .map(|(node, ls)| late_finding(node, &ls))
        .collect()
}

fn late_finding(node: Option<&str>, ls: &[&Late]) -> Finding {
    let worst = ls
        .iter()
        .copied()
        .max_by(|a, b| a.late_ns.total_cmp(&b.late_ns))
        .expect("a group has a late rank");
    let ranks: Vec<u32> = ls.iter().map(|l| l.rank).collect();
    let who = match (node, ranks.len()) {
        (Some(n), _) => format!(
            "node {n} (rank{} {})",
            plural(ranks.len()),
            rank_list(&ranks, 8)
        ),
        (None, 1) => match &worst.node {
            Some(n) => format!("rank {} (host {n})", worst.rank),
            None => format!("rank {}", worst.rank),
        },
        (None, _) => format!("ranks {}", rank_list(&ranks, 8)),
    };
    let phase = worst.phase;
    let waited = ls.iter().map(|l| l.wait_rank_ns).fold(0.0, f64::max);
    let waiting = ls.iter().map(|l| l.waiting_ranks).max().unwrap_or(0);
    let when = if worst.arrived {
        format!(
            "entered {} {:.1} s after the typical rank",
            phase.as_str(),
            secs(worst.late_ns)
        )
    } else {
        format!(
            "has not entered {} yet, {:.1} s after the typical rank did",
            phase.as_str(),
            secs(worst.late_ns)
        )
    };
    let (why, action) = explain(&worst.cause, node.or(worst.node.as_deref()));
    let summary = format!(
        "{who} {when}: {waiting} rank{} {} for it ({:.0} GPU-seconds{}); {why}",
        plural(waiting),
        if worst.arrived { "waited" } else { "wait" },
        secs(waited),
        if worst.arrived { "" } else { " so far" },
    );
    let mut evidence = vec![
        Evidence::new(
            EvidenceKey::StartupLateS,
            secs(worst.late_ns),
            Some(0.0),
            Unit::Seconds,
            format!(
                "entry into {} after the typical rank's{}",
                phase.describe(),
                if worst.arrived {
                    ""
                } else {
                    " (it is not there yet)"
                }
            ),
        )
        .decisive(),
        Evidence::new(
            EvidenceKey::StartupWaitGpuS,
            secs(waited),
            None,
            Unit::Seconds,
            format!(
                "time the {waiting} rank{} already there spent waiting for it",
                plural(waiting)
            ),
        )
        .decisive(),
    ];
    match &worst.cause {
        Cause::StartedLate(by) => evidence.push(
            Evidence::new(
                EvidenceKey::StartupPhaseS,
                secs(*by),
                Some(0.0),
                Unit::Seconds,
                "its process started this long after its peers' (median)".into(),
            )
            .decisive(),
        ),
        Cause::Phase {
            label,
            own_ns,
            peers_ns,
            ..
        } => evidence.push(
            Evidence::new(
                EvidenceKey::StartupPhaseS,
                secs(*own_ns),
                Some(secs(*peers_ns)),
                Unit::Seconds,
                format!("its time in {label}; baseline: the on-time ranks' median"),
            )
            .decisive(),
        ),
        Cause::Untraced {
            own_ns, peers_ns, ..
        } => evidence.push(
            Evidence::new(
                EvidenceKey::StartupPhaseS,
                secs(*own_ns),
                Some(secs(*peers_ns)),
                Unit::Seconds,
                "its time between phases that no phase covers; baseline: the on-time ranks' median"
                    .into(),
            )
            .decisive(),
        ),
        Cause::NotTraced | Cause::Unexplained => {}
    }
    let culprits = match node {
        Some(n) => {
            let mut c = Culprit::new(Component::Host);
            c.host = Some(n.to_string());
            c.rank = Some(worst.rank);
            vec![c]
        }
        None => ls
            .iter()
            .map(|l| {
                let mut c = Culprit::new(Component::Process);
                c.rank = Some(l.rank);
                c.host = l.node.clone();
                c.score = (l.late_ns / worst.late_ns.max(1.0)).clamp(0.0, 1.0);
                c
            })
            .collect(),
    };
    let explained = !matches!(worst.cause, Cause::Unexplained);
    Finding {
        kind: FindingKind::SlowStartup,
        severity: Severity::Warning,
        summary,
        confidence: if explained { 0.85 } else { 0.6 },
        culprits,
        evidence,
        action,
        iterations: vec![],
        detector: DetectorId::Startup,
        corroborated_by: vec![],
        failure: None,
    }
}

/// What made it late, for a person, and what to do.
fn explain(cause: &Cause, host: Option<&str>) -> (String, String) {
    let on = host.map(|h| format!(" on {h}")).unwrap_or_default();
    match cause {
        Cause::NotTraced => (
            "nothing was heard from it: its process has not started, or has not reached flare.init()".into(),
            format!("check the launcher and the node of the rank{on}: a pod pending or pulling its image, a node not ready, a launcher that failed to start it (its log)"),
        ),
        Cause::StartedLate(by) => (
            format!("its process started {:.1} s after its peers'", secs(*by)),
            format!("the launcher, the scheduler or the node{on} started it late (container start, image pull, node readiness): check that node's pod or job-step events"),
        ),
        Cause::Phase {
            label,
            phase,
            own_ns,
            peers_ns,
            ongoing,
        } => (
            format!(
                "it spent {:.1} s in {} against {:.1} s on its peers{}",
                secs(*own_ns),
                if *phase == StartupPhase::Custom { label.as_str() } else { phase.describe() },
                secs(*peers_ns),
                if *ongoing { " (and is still in it)" } else { "" }
            ),
            phase_advice(*phase, label, &on),
        ),
        Cause::Untraced {
            after,
            own_ns,
            peers_ns,
        } => (
            format!(
                "it spent {:.1} s {} in code no phase covers, against {:.1} s on its peers",
                secs(*own_ns),
                after
                    .as_deref()
                    .map(|a| format!("after {a}"))
                    .unwrap_or_else(|| "before its first phase".into()),
                secs(*peers_ns)
            ),
            "mark the program's start-up work there with flare.startup_phase(\"...\") (building the model, tokenizing, reading configuration), or capture the rank's stack with py-spy while the others wait".into(),
        ),
        Cause::Unexplained => (
            "none of its recorded phases took markedly longer than its peers' (the nodes' clocks may disagree, or the time went where no phase is recorded)".into(),
            "check the nodes' clock synchronization, and mark the program's start-up work with flare.startup_phase(\"...\")".into(),
        ),
    }
}

/// What to do about a phase that takes too long.
fn phase_advice(phase: StartupPhase, label: &str, on: &str) -> String {
    match phase {
        StartupPhase::Launch | StartupPhase::ImportTorch => format!(
            "Python start-up and imports{on}: keep the environment (site-packages, CUDA libraries) on local disk or in the container image rather than a shared filesystem, and check that node's filesystem and CPU load"
        ),
        StartupPhase::InitProcessGroup => format!(
            "the rendezvous{on}: the store's host (MASTER_ADDR) and the network to it; at scale, a store that serves thousands of ranks"
        ),
        StartupPhase::ModelBuild => format!(
            "building the model{on}: build it on the meta device and materialize it sharded, or load weights straight to the device"
        ),
        StartupPhase::CheckpointLoad => format!(
            "the checkpoint's storage{on} (network filesystem, object store): load a sharded checkpoint (each rank reads its part) or stage it on local disk"
        ),
        StartupPhase::ModelWrap => format!(
            "DDP's construction{on} broadcasts rank 0's parameters: check the network of the ranks that wait, or start every rank from the same checkpoint"
        ),
        StartupPhase::FirstBatch => format!(
            "the first batch{on}: the dataset's storage and the DataLoader's worker start-up (persistent workers, prefetching, a dataset index cached locally)"
        ),
        StartupPhase::FirstStep => format!(
            "the first step's one-time costs{on} (communicator set-up, autotuning, compilation): warm the compilation caches, or set up NCCL eagerly (device_id in init_process_group)"
        ),
        StartupPhase::Custom => format!("the program's own phase \"{label}\"{on}"),
    }
}

/// The `info` saying where start-up time went.
/// `waited`: ranks waited for a late one, in the phases ranks meet in.
fn breakdown_finding(b: &Breakdown, ranks: usize, waited: bool) -> Finding {
    let parts: Vec<String> = b
        .phases
        .iter()
        .map(|p| format!("{} {}", p.label, duration(p.median_ns)))
        .collect();
    let gpu_hours = secs(b.total_median_ns) * ranks as f64 / 3600.0;
    // Time in the phases ranks meet in is mostly waiting when a rank was late: the
    // advice is then about the ranks' own phases.
    let longest = b
        .phases
        .iter()
        .filter(|p| !(waited && p.phase.is_some_and(StartupPhase::synchronizes)))
        .max_by(|a, b| a.median_ns.total_cmp(&b.median_ns));
    let summary = format!(
        "start-up took {:.1} s per rank from launch to the end of the first step (median; longest {:.1} s on rank {}), {:.2} GPU-hours over {} rank{}: {}",
        secs(b.total_median_ns),
        secs(b.total_max_ns),
        b.total_max_rank,
        gpu_hours,
        b.ranks,
        plural(b.ranks),
        parts.join(", ")
    );
    let mut evidence = vec![Evidence::new(
        EvidenceKey::StartupTotalS,
        secs(b.total_median_ns),
        None,
        Unit::Seconds,
        format!(
            "median over ranks from the process's start to the end of its first step; longest {:.1} s (rank {})",
            secs(b.total_max_ns),
            b.total_max_rank
        ),
    )
    .decisive()];
    let mut by_time: Vec<_> = b.phases.iter().collect();
    by_time.sort_by(|a, b| b.median_ns.total_cmp(&a.median_ns));
    evidence.extend(by_time.into_iter().map(|p| {
        Evidence::new(
            EvidenceKey::StartupPhaseS,
            secs(p.median_ns),
            None,
            Unit::Seconds,
            format!(
                "{}: median over ranks; longest {:.1} s (rank {})",
                if p.phase.is_none() {
                    "untraced (between phases)"
                } else {
                    p.label.as_str()
                },
                secs(p.max_ns),
                p.max_rank
            ),
        )
    }));
    let action = match longest {
        Some(p) if p.median_ns > 0.0 => match p.phase {
            Some(phase) => format!(
                "the longest phase is {} ({:.0}% of start-up): {}",
                p.label,
                p.median_ns / b.total_median_ns.max(1.0) * 100.0,
                phase_advice(phase, &p.label, "")
            ),
            None => format!(
                "the longest is the time no phase covers ({:.0}% of start-up): mark the program's start-up work with flare.startup_phase(\"...\") to see where it goes",
                p.median_ns / b.total_median_ns.max(1.0) * 100.0
            ),
        },
        _ => "nothing to do".into(),
    };
    let action = if waited {
        format!("the ranks' time in the phases they meet in was mostly spent waiting for the late rank named beside this; of their own phases, {action}")
    } else {
        action
    };
    Finding {
        kind: FindingKind::Startup,
        severity: Severity::Info,
        summary,
        confidence: 1.0,
        culprits: vec![],
        evidence,
        action,
        iterations: vec![],
        detector: DetectorId::Startup,
        corroborated_by: vec![],
        failure: None,
    }
}
