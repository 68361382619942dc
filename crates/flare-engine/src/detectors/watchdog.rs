//! The node agents' watchdog: ops in flight without progress past its limit, with the
//! stacks it captured. Grouped per op; for a collective, the ranks not stuck in it are the
//! likely cause, and a rank stuck in its own kernel or host phase is its own cause. Runs
//! on live windows (files have no watchdog; their hangs are the hang detector's).

use crate::live::{plural, rank_list, LiveRank, LiveWindow};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, HangRecord,
    OpKind, PeerStacks, Severity, ThreadStack, Unit,
};
use std::collections::{BTreeMap, BTreeSet};

pub struct WatchdogDetector;

impl Detector for WatchdogDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Watchdog
    }
    fn summary(&self) -> &'static str {
        "ops stuck past the agent's watchdog limit, with stacks: who never joined the collective the others wait in"
    }
    fn needs(&self) -> &'static str {
        "live capture: the node agents' watchdog records"
    }
    fn detect(&self, a: &Analysis, _cfg: &EngineConfig) -> Outcome {
        match a.live {
            Some(w) => Outcome::Findings(hang_findings(w)),
            // Files have no watchdog; the hang detector reads their in-flight ops.
            None => Outcome::NotApplicable,
        }
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

/// The window's hang findings, one per op ranks are stuck in.
fn hang_findings(w: &LiveWindow) -> Vec<Finding> {
    let aggs: BTreeMap<u32, &LiveRank> = w.with_data().map(|r| (r.rank, r)).collect();
    let aggs = &aggs;
    let world_size = w.world_size;
    let mut groups: BTreeMap<(&str, OpKind, Option<&str>), HangGroup> = BTreeMap::new();
    for (h, node) in &w.hangs {
        let key = (h.op.as_str(), h.kind, h.group.as_deref());
        let g = groups.entry(key).or_insert_with(|| HangGroup {
            op: &h.op,
            kind: h.kind,
            group: h.group.as_deref(),
            ranks: BTreeMap::new(),
        });
        // The watchdog may fire more than once for one op: keep the longest.
        let e = g.ranks.entry(h.rank).or_insert((h, node));
        if h.in_flight_ns > e.0.in_flight_ns {
            *e = (h, node);
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
    let cpu_only = w.cpu_only();
    let peers: BTreeMap<u32, (&PeerStacks, &str)> = w
        .peer_stacks
        .iter()
        .map(|(p, node)| (p.rank, (p, node.as_str())))
        .collect();
    groups
        .values_mut()
        .filter_map(|g| {
            if g.kind.is_sync() {
                return Some(sync_hang(g, aggs, &waiting, &peers, world_size));
            }
            // A rank waiting in a collective (DDP's bucket all-reduce inside `backward`, a
            // collective inside a traced step) is stuck in its enclosing span because of
            // that wait: the span is not its own hang.
            g.ranks.retain(|r, _| !waiting.contains(r));
            (!g.ranks.is_empty()).then(|| local_hang(g, cpu_only))
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
    // Identical stacks are shown once, with the ranks that share them (the odd one out
    // stands out as a stack of its own).
    let mut stacks: BTreeMap<String, Vec<(u32, &str, &str)>> = BTreeMap::new();
    for (&r, (h, node)) in &g.ranks {
        if let Some((thread, top)) = top_frames(&h.stacks, 6) {
            stacks.entry(top).or_default().push((r, node, thread));
        }
    }
    let mut stacks: Vec<_> = stacks.into_iter().collect();
    stacks.sort_by_key(|(_, who)| std::cmp::Reverse(who.len()));
    for (top, who) in stacks.iter().take(3) {
        let (r, node, thread) = who[0];
        let source = &g.ranks[&r].0.stack_source;
        let ranks: Vec<u32> = who.iter().map(|w| w.0).collect();
        ev.push(Evidence::new(
            EvidenceKey::Stack,
            r as f64,
            None,
            Unit::Rank,
            if who.len() > 1 {
                format!(
                    "stuck ranks {} ({source}, e.g. rank {r} on {node}), thread {thread}: {top}",
                    rank_list(&ranks, 16)
                )
            } else {
                format!("stuck rank {r} on {node} ({source}), thread {thread}: {top}")
            },
        ));
    }
    ev
}

/// The innermost frames of the most telling thread: the main thread when named, else the
/// first one captured.
fn top_frames(stacks: &[ThreadStack], n: usize) -> Option<(&str, String)> {
    let t = ThreadStack::main_of(stacks)?;
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
    aggs: &BTreeMap<u32, &LiveRank>,
    waiting: &BTreeSet<u32>,
    peers: &BTreeMap<u32, (&PeerStacks, &str)>,
    world_size: u32,
) -> Finding {
    let free: Vec<&LiveRank> = aggs
        .values()
        .copied()
        .filter(|a| !waiting.contains(&a.rank))
        .collect();
    // Members of the communicator first, when the tracer named it the same on every rank.
    let members: Vec<&LiveRank> = match g.group {
        Some(name) => free
            .iter()
            .copied()
            .filter(|a| a.groups.contains(name))
            .collect(),
        None => vec![],
    };
    let same_group = !members.is_empty();
    let suspects = if same_group { members } else { free };
    // What the suspects did, for one rank or several.
    let why = |one: bool| {
        let are = if one { "is" } else { "are" };
        if same_group {
            format!("used the same group but {are} not stuck in it")
        } else {
            format!("{are} not stuck in any collective")
        }
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
                    "rank {} on {} (pid {}) {}; it finished {} iteration{} in this window",
                    a.rank,
                    a.node,
                    a.pid,
                    why(true),
                    a.iterations,
                    if a.iterations == 1 { "" } else { "s" }
                ),
            ));
            if let Some(e) = peers
                .get(&a.rank)
                .and_then(|p| peer_stack_evidence(p.0, p.1))
            {
                ev.push(e);
            }
        }
        let first = suspects[0];
        // Where the first suspect is, from its own stack when the agent captured it.
        let at = peers
            .get(&first.rank)
            .and_then(|(p, _)| top_frames(&p.stacks, 1))
            .map(|(_, frame)| frame);
        let look = match &at {
            Some(frame) => format!(
                "rank {} is at {frame} (its stack is in the evidence)",
                first.rank
            ),
            None => format!(
                "see where rank {} is: py-spy dump --pid {} on {}",
                first.rank, first.pid, first.node
            ),
        };
        (
            format!(
                "job hangs in {what}: rank{} {} stuck up to {longest_s:.0} s; rank{} {} {} (likely cause)",
                plural(stuck.len()),
                rank_list(&stuck, 8),
                plural(ranks.len()),
                rank_list(&ranks, 8),
                why(ranks.len() == 1),
            ),
            format!(
                "{look}; it never entered the collective its peers wait in (a code path that skips it, an exception, a stuck dataloader)"
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
        detector: DetectorId::Watchdog,
        corroborated_by: vec![],
        failure: None,
    }
}

/// The stack of a rank that was not stuck, as evidence of where it is.
fn peer_stack_evidence(p: &PeerStacks, node: &str) -> Option<Evidence> {
    let (thread, top) = top_frames(&p.stacks, 6)?;
    let inside = p
        .open_op
        .as_deref()
        .map(|op| format!(", inside {op}"))
        .unwrap_or_default();
    Some(Evidence::new(
        EvidenceKey::Stack,
        p.rank as f64,
        None,
        Unit::Rank,
        format!(
            "rank {} on {node} ({}), not stuck{inside}, thread {thread}: {top}",
            p.rank, p.stack_source
        ),
    ))
}

/// A rank stuck in its own compute kernel or host phase: it is the cause. A job without
/// GPUs computes on the CPU: its process, not a GPU, is what to look at.
fn local_hang(g: &HangGroup, cpu_only: bool) -> Finding {
    let stuck: Vec<u32> = g.ranks.keys().copied().collect();
    let (component, action) = if g.kind == OpKind::Compute && cpu_only {
        (
            Component::Process,
            "see where the process is (py-spy dump --pid on its node): its compute runs on the CPU, so a loop that never ends, a lock or a blocked thread",
        )
    } else if g.kind == OpKind::Compute {
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
        detector: DetectorId::Watchdog,
        corroborated_by: vec![],
        failure: None,
    }
}
