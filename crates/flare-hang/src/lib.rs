//! Hang diagnosis from PyTorch Flight Recorder dumps (one per rank): pure computation over
//! [`FrJob`], no I/O.
//!
//! Per process group (identified by its global name; `pg_id` is rank-local) every member's
//! recorded ops are ordered by `collective_seq_id` (P2P by `p2p_seq_id`). Counters are per
//! group and per rank, so they are only compared within one group. A collective some
//! members entered (recorded, not completed) while others never reached it (their latest
//! op on the group is older, or they have none) is where the group diverged: the latter are
//! the missing ranks. Op-type, size and dtype mismatches for the same sequence number,
//! unmatched send/recv, members without a dump and members still holding ops their peers
//! completed are reported too. Several diverged groups are ranked as the engine's hang
//! detector does: the group whose missing ranks are not themselves waiting in another
//! group's op is the root cause; among several, the one whose op was entered first.

use flare_model::flight_recorder::{shapes, FrDump, FrEntry, FrJob, FrPgStatus, FrState};
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, FindingsDocument,
    JobSummary, Severity, Unit,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The detector name findings carry.
pub const DETECTOR: DetectorId = DetectorId::FlightRecorder;

/// What one group's divergence looks like.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    /// Group name (global), e.g. `"72"`.
    pub group: String,
    pub desc: String,
    pub members: Vec<u32>,
    pub kind: DivergenceKind,
    /// The op (from a rank that reached it).
    pub op: String,
    pub seq: u64,
    pub input_sizes: Vec<Vec<i64>>,
    pub input_dtypes: Vec<String>,
    pub output_sizes: Vec<Vec<i64>>,
    /// Ranks that entered the op (they wait in it) or passed it.
    pub reached: Vec<u32>,
    /// Ranks that never reached it: the ones to blame.
    pub missing: Vec<u32>,
    /// Members without a dump: unknown.
    pub no_dump: Vec<u32>,
    /// Earliest creation time of the op on the ranks that entered it.
    pub time_created_ns: u64,
    /// For each missing rank, its latest op on this group (seq, name, state).
    pub missing_latest: BTreeMap<u32, Option<(u64, String, FrState)>>,
    /// States of the op on the ranks that recorded it.
    pub states: BTreeMap<u32, FrState>,
    /// Ranks of the group still holding ops (not completed) that other members completed or
    /// passed: behind the others.
    pub behind: Vec<u32>,
    /// Stack of the op on one rank that recorded it, innermost first (empty if not dumped).
    pub frames: Vec<String>,
    pub frames_rank: Option<u32>,
    /// Ranks whose op differs from the majority (mismatch kinds), with their value.
    pub odd: BTreeMap<u32, String>,
    pub majority: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DivergenceKind {
    /// Some members never reached a collective the others entered.
    MissingRanks,
    /// Every member with a dump entered it; only members without a dump can be to blame.
    NoDumpOnly,
    /// A send/recv whose peer never posted the matching op.
    P2pUnmatched,
    /// Different collectives for the same sequence number.
    OpMismatch,
    SizeMismatch,
    DtypeMismatch,
}

struct RankView<'a> {
    /// Entries per group name, in record order.
    by_group: HashMap<&'a str, Vec<&'a FrEntry>>,
    /// pg_status per group name (the dump keys it by local pg_id).
    status: HashMap<String, FrPgStatus>,
}

fn numeric_then_lexical(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        _ => a.cmp(b),
    }
}

impl<'a> RankView<'a> {
    fn new(dump: &'a FrDump) -> Self {
        let mut by_group: HashMap<&str, Vec<&FrEntry>> = HashMap::new();
        let mut local: HashMap<String, String> = HashMap::new();
        for e in &dump.entries {
            by_group
                .entry(e.process_group.name.as_str())
                .or_default()
                .push(e);
            local
                .entry(e.pg_id.to_string())
                .or_insert_with(|| e.process_group.name.clone());
        }
        // Groups without entries: local ids and global names are both handed out in creation
        // order, so when the dump lists as many of each, and the pairs the entries show agree,
        // the n-th smallest id is the n-th smallest name.
        if dump.pg_status.len() == dump.pg_config.len() {
            let mut ids: Vec<&String> = dump.pg_status.keys().collect();
            ids.sort_by(|a, b| numeric_then_lexical(a, b));
            let mut names: Vec<&String> = dump.pg_config.keys().collect();
            names.sort_by(|a, b| numeric_then_lexical(a, b));
            let consistent = ids
                .iter()
                .zip(&names)
                .all(|(i, n)| local.get(*i).is_none_or(|m| m == *n));
            if consistent {
                for (i, n) in ids.iter().zip(&names) {
                    local.entry((*i).clone()).or_insert_with(|| (*n).clone());
                }
            }
        }
        let status = dump
            .pg_status
            .iter()
            .filter_map(|(id, s)| local.get(id).map(|n| (n.clone(), *s)))
            .collect();
        RankView { by_group, status }
    }

    fn entries(&self, group: &str) -> &[&'a FrEntry] {
        self.by_group.get(group).map_or(&[], |v| v.as_slice())
    }

    /// Highest collective sequence number this rank issued on the group, if known. P2P
    /// entries carry the collective counter at their time, a lower bound.
    fn reached(&self, group: &str) -> Option<u64> {
        let es = self.entries(group);
        if let Some(m) = es.iter().map(|e| e.collective_seq_id).max() {
            return Some(m);
        }
        self.status
            .get(group)
            .and_then(|s| u64::try_from(s.last_enqueued_collective).ok())
    }

    /// Highest collective sequence number known completed on this rank.
    fn completed(&self, group: &str) -> Option<u64> {
        let from_entries = self
            .entries(group)
            .iter()
            .filter(|e| !e.is_p2p_op() && e.state == FrState::Completed)
            .map(|e| e.collective_seq_id)
            .max();
        let from_status = self
            .status
            .get(group)
            .filter(|_| self.entries(group).iter().all(|e| !e.is_p2p_op()))
            .and_then(|s| u64::try_from(s.last_completed_collective).ok());
        from_entries.max(from_status)
    }
}

struct Group {
    desc: String,
    members: Vec<u32>,
}

fn groups(job: &FrJob, views: &BTreeMap<u32, RankView>) -> BTreeMap<String, Group> {
    let mut out: BTreeMap<String, Group> = BTreeMap::new();
    for d in job.dumps.values() {
        for (name, pg) in &d.pg_config {
            let g = out.entry(name.clone()).or_insert_with(|| Group {
                desc: pg.desc.clone(),
                members: vec![],
            });
            if g.members.is_empty() {
                g.members = pg.ranks.clone();
            }
            if g.desc.is_empty() {
                g.desc = pg.desc.clone();
            }
        }
    }
    // Groups only entries name: members are the ranks that recorded ops on them.
    let configured: BTreeSet<String> = out
        .iter()
        .filter(|(_, g)| !g.members.is_empty())
        .map(|(n, _)| n.clone())
        .collect();
    for (&rank, v) in views {
        for (&name, es) in &v.by_group {
            let g = out.entry(name.to_string()).or_insert_with(|| Group {
                desc: es[0].process_group.desc.clone(),
                members: vec![],
            });
            if g.desc.is_empty() {
                g.desc = es[0].process_group.desc.clone();
            }
            if !configured.contains(name) && !g.members.contains(&rank) {
                g.members.push(rank);
            }
        }
    }
    for g in out.values_mut() {
        let mut seen = BTreeSet::new();
        g.members.retain(|r| seen.insert(*r));
    }
    out
}

fn is_coalesced(es: &[&FrEntry]) -> bool {
    es.len() > 1 || es.iter().any(|e| e.profiling_name.contains("coalesced"))
}

/// Collectives whose inputs legitimately differ in size across ranks.
fn sizes_may_differ(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("all_to_all")
        || n.contains("alltoall")
        || n.contains("gather") && !n.contains("all_gather") && !n.contains("allgather")
        || n.contains("scatter") && !n.contains("reduce_scatter")
        || n.contains("coalesced")
        || n.contains("barrier")
}

/// `8, 10-13, 15` (runs of 3 or more as ranges).
fn ranks_str(r: &[u32]) -> String {
    if r.is_empty() {
        return "none".into();
    }
    let mut sorted = r.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}-{}", sorted[i], sorted[j]));
        } else {
            parts.extend(sorted[i..=j].iter().map(|x| x.to_string()));
        }
        i = j + 1;
    }
    parts.join(", ")
}

fn frames_of(e: &FrEntry) -> Vec<String> {
    e.frames
        .iter()
        .take(12)
        .map(|f| format!("{} ({}:{})", f.name, f.filename, f.line))
        .collect()
}

fn base_div(name: &str, g: &Group, kind: DivergenceKind, e: &FrEntry, seq: u64) -> Divergence {
    Divergence {
        group: name.to_string(),
        desc: g.desc.clone(),
        members: g.members.clone(),
        kind,
        op: e.profiling_name.clone(),
        seq,
        input_sizes: e.input_sizes.clone(),
        input_dtypes: e.input_dtypes.clone(),
        output_sizes: e.output_sizes.clone(),
        reached: vec![],
        missing: vec![],
        no_dump: vec![],
        time_created_ns: e.time_created_ns,
        missing_latest: BTreeMap::new(),
        states: BTreeMap::new(),
        behind: vec![],
        frames: frames_of(e),
        frames_rank: None,
        odd: BTreeMap::new(),
        majority: String::new(),
    }
}

/// Collective divergence of one group: the first sequence number some members entered and
/// others never reached.
fn collective_divergence(
    name: &str,
    g: &Group,
    views: &BTreeMap<u32, RankView>,
) -> Option<Divergence> {
    let present: Vec<(u32, &RankView)> = g
        .members
        .iter()
        .filter_map(|r| views.get(r).map(|v| (*r, v)))
        .collect();
    let no_dump: Vec<u32> = g
        .members
        .iter()
        .copied()
        .filter(|r| !views.contains_key(r))
        .collect();
    // seq -> (rank -> entries of that rank with that seq)
    let mut by_seq: BTreeMap<u64, BTreeMap<u32, Vec<&FrEntry>>> = BTreeMap::new();
    for (r, v) in &present {
        for e in v.entries(name) {
            if !e.is_p2p_op() {
                by_seq
                    .entry(e.collective_seq_id)
                    .or_default()
                    .entry(*r)
                    .or_default()
                    .push(e);
            }
        }
    }
    let reached: BTreeMap<u32, Option<u64>> =
        present.iter().map(|(r, v)| (*r, v.reached(name))).collect();
    let mut no_dump_candidate: Option<Divergence> = None;
    for (&seq, recs) in &by_seq {
        let done_somewhere = recs
            .values()
            .flatten()
            .any(|e| e.state == FrState::Completed);
        if done_somewhere {
            continue;
        }
        let missing: Vec<u32> = present
            .iter()
            .map(|(r, _)| *r)
            .filter(|r| !recs.contains_key(r) && reached[r].is_none_or(|m| m < seq))
            .collect();
        let reached_ranks: Vec<u32> = present
            .iter()
            .map(|(r, _)| *r)
            .filter(|r| !missing.contains(r))
            .collect();
        if missing.is_empty() && (no_dump.is_empty() || no_dump_candidate.is_some()) {
            continue;
        }
        // The op as most ranks that recorded it see it.
        let rep = majority_entry(recs);
        let kind = if missing.is_empty() {
            DivergenceKind::NoDumpOnly
        } else {
            DivergenceKind::MissingRanks
        };
        let mut d = base_div(name, g, kind, rep, seq);
        d.time_created_ns = recs
            .values()
            .flatten()
            .map(|e| e.time_created_ns)
            .min()
            .unwrap_or(0);
        d.reached = reached_ranks;
        d.missing = missing.clone();
        d.no_dump = no_dump.clone();
        d.states = recs
            .iter()
            .map(|(r, es)| (*r, es.iter().map(|e| e.state).max().unwrap_or_default()))
            .collect();
        if d.frames.is_empty() {
            if let Some((r, fr)) = recs
                .iter()
                .flat_map(|(r, es)| es.iter().map(move |e| (*r, e)))
                .find(|(_, e)| !e.frames.is_empty())
            {
                d.frames = frames_of(fr);
                d.frames_rank = Some(r);
            }
        } else {
            d.frames_rank = recs
                .iter()
                .find(|(_, es)| es.iter().any(|e| std::ptr::eq(*e, rep)))
                .map(|(r, _)| *r);
        }
        for &m in &missing {
            let v = &views[&m];
            let latest = v
                .entries(name)
                .iter()
                .filter(|e| !e.is_p2p_op())
                .max_by_key(|e| (e.collective_seq_id, e.record_id))
                .map(|e| (e.collective_seq_id, e.profiling_name.clone(), e.state))
                .or_else(|| reached[&m].map(|s| (s, String::new(), FrState::Completed)));
            d.missing_latest.insert(m, latest);
        }
        // Behind: members holding ops not completed below `seq` that others passed.
        // The two highest completion marks, so "another member completed s" is O(1).
        let mut top: [(Option<u64>, u32); 2] = [(None, u32::MAX), (None, u32::MAX)];
        for (r, v) in &present {
            let c = v.completed(name);
            if c > top[0].0 {
                top[1] = top[0];
                top[0] = (c, *r);
            } else if c > top[1].0 {
                top[1] = (c, *r);
            }
        }
        let passed_by_others = |r: u32, s: u64| {
            let best = if top[0].1 == r { top[1].0 } else { top[0].0 };
            best.is_some_and(|c| c >= s)
        };
        for (r, v) in &present {
            let pending_old = v
                .entries(name)
                .iter()
                .filter(|e| !e.is_p2p_op() && e.state != FrState::Completed)
                .map(|e| e.collective_seq_id)
                .filter(|&s| s < seq)
                .min();
            if let Some(s) = pending_old {
                if passed_by_others(*r, s) {
                    d.behind.push(*r);
                }
            }
        }
        if kind == DivergenceKind::MissingRanks {
            return Some(d);
        }
        no_dump_candidate = Some(d);
    }
    no_dump_candidate
}

fn majority_entry<'a>(recs: &BTreeMap<u32, Vec<&'a FrEntry>>) -> &'a FrEntry {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for es in recs.values() {
        for e in es {
            *count.entry(e.profiling_name.as_str()).or_default() += 1;
        }
    }
    let best = count
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(n, _)| *n)
        .unwrap_or("");
    recs.values()
        .flatten()
        .find(|e| e.profiling_name == best)
        .copied()
        .unwrap_or_else(|| recs.values().flatten().next().copied().expect("non-empty"))
}

/// Op-type, size and dtype mismatches between members for the same sequence number.
fn mismatches(name: &str, g: &Group, views: &BTreeMap<u32, RankView>) -> Vec<Divergence> {
    let mut by_seq: BTreeMap<u64, BTreeMap<u32, Vec<&FrEntry>>> = BTreeMap::new();
    for r in &g.members {
        if let Some(v) = views.get(r) {
            for e in v.entries(name) {
                if !e.is_p2p_op() {
                    by_seq
                        .entry(e.collective_seq_id)
                        .or_default()
                        .entry(*r)
                        .or_default()
                        .push(e);
                }
            }
        }
    }
    let mut out = Vec::new();
    for (&seq, recs) in &by_seq {
        if recs.len() < 2 {
            continue;
        }
        let sig = |es: &[&FrEntry], k: DivergenceKind| -> String {
            if is_coalesced(es) {
                return match k {
                    DivergenceKind::OpMismatch => "nccl:coalesced".into(),
                    _ => String::new(),
                };
            }
            let e = es[0];
            match k {
                DivergenceKind::OpMismatch => e.profiling_name.clone(),
                DivergenceKind::SizeMismatch if !sizes_may_differ(&e.profiling_name) => {
                    shapes(&e.input_sizes)
                }
                DivergenceKind::DtypeMismatch => e.input_dtypes.join(", "),
                _ => String::new(),
            }
        };
        for kind in [
            DivergenceKind::OpMismatch,
            DivergenceKind::SizeMismatch,
            DivergenceKind::DtypeMismatch,
        ] {
            let vals: BTreeMap<u32, String> =
                recs.iter().map(|(r, es)| (*r, sig(es, kind))).collect();
            let mut count: BTreeMap<&str, usize> = BTreeMap::new();
            for v in vals.values() {
                *count.entry(v.as_str()).or_default() += 1;
            }
            if count.len() < 2 {
                continue;
            }
            let majority = count
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(v, _)| v.to_string())
                .unwrap_or_default();
            let rep = recs
                .iter()
                .find(|(r, _)| vals[r] == majority)
                .map(|(_, es)| es[0])
                .unwrap_or(recs.values().next().expect("non-empty")[0]);
            let mut d = base_div(name, g, kind, rep, seq);
            d.reached = recs.keys().copied().collect();
            d.odd = vals
                .iter()
                .filter(|(_, v)| **v != majority)
                .map(|(r, v)| (*r, v.clone()))
                .collect();
            d.missing = d.odd.keys().copied().collect();
            d.majority = majority;
            d.states = recs
                .iter()
                .map(|(r, es)| (*r, es.iter().map(|e| e.state).max().unwrap_or_default()))
                .collect();
            if let Some((r, e)) = recs
                .iter()
                .filter(|(r, _)| d.odd.contains_key(r))
                .flat_map(|(r, es)| es.iter().map(move |e| (*r, e)))
                .find(|(_, e)| !e.frames.is_empty())
            {
                d.frames = frames_of(e);
                d.frames_rank = Some(r);
            }
            out.push(d);
            break; // one mismatch kind per sequence number: the most basic one
        }
    }
    out
}

/// Sends/receives whose peer has no matching op posted and has not passed it.
fn p2p_unmatched(name: &str, g: &Group, views: &BTreeMap<u32, RankView>) -> Option<Divergence> {
    let global = |local: u32| -> u32 {
        if g.members.is_empty() {
            local
        } else {
            g.members.get(local as usize).copied().unwrap_or(local)
        }
    };
    let two = g.members.len() == 2;
    let mut waiting: BTreeMap<u32, &FrEntry> = BTreeMap::new();
    let mut missing: BTreeSet<u32> = BTreeSet::new();
    let mut no_dump: BTreeSet<u32> = BTreeSet::new();
    let mut first: Option<&FrEntry> = None;
    let mut latest: BTreeMap<u32, Option<(u64, String, FrState)>> = BTreeMap::new();
    for r in &g.members {
        let Some(v) = views.get(r) else { continue };
        for e in v.entries(name) {
            if e.state == FrState::Completed {
                continue;
            }
            let Some((is_send, _me, peer_local)) = e.p2p_kind() else {
                continue;
            };
            let peer = global(peer_local);
            if peer == *r {
                continue;
            }
            let Some(pv) = views.get(&peer) else {
                no_dump.insert(peer);
                continue;
            };
            let peer_p2p: Vec<&&FrEntry> = pv
                .entries(name)
                .iter()
                .filter(|x| {
                    x.p2p_kind()
                        .is_some_and(|(s, _, p)| s != is_send && global(p) == *r)
                })
                .collect();
            let matched = peer_p2p
                .iter()
                .any(|x| x.state != FrState::Completed && (!two || x.p2p_seq_id == e.p2p_seq_id))
                || (two
                    && pv
                        .entries(name)
                        .iter()
                        .filter(|x| x.is_p2p_op())
                        .any(|x| x.p2p_seq_id >= e.p2p_seq_id && x.state == FrState::Completed));
            if matched {
                continue;
            }
            // Passed it: a later P2P on the peer (2-member groups count the same ops).
            if two
                && pv
                    .entries(name)
                    .iter()
                    .any(|x| x.is_p2p_op() && x.p2p_seq_id > e.p2p_seq_id)
            {
                continue;
            }
            missing.insert(peer);
            latest.entry(peer).or_insert_with(|| {
                pv.entries(name)
                    .iter()
                    .filter(|x| x.is_p2p_op())
                    .max_by_key(|x| (x.p2p_seq_id, x.record_id))
                    .map(|x| (x.p2p_seq_id, x.profiling_name.clone(), x.state))
            });
            let w = waiting.entry(*r).or_insert(e);
            if e.time_created_ns < w.time_created_ns {
                *w = e;
            }
            if first.is_none_or(|f| e.time_created_ns < f.time_created_ns) {
                first = Some(e);
            }
        }
    }
    let first = first?;
    let mut d = base_div(
        name,
        g,
        DivergenceKind::P2pUnmatched,
        first,
        first.p2p_seq_id,
    );
    d.reached = waiting
        .keys()
        .copied()
        .filter(|r| !missing.contains(r))
        .collect();
    if d.reached.is_empty() {
        d.reached = waiting.keys().copied().collect();
    }
    d.missing = missing.into_iter().collect();
    d.no_dump = no_dump.into_iter().collect();
    d.missing_latest = latest;
    d.states = waiting.iter().map(|(r, e)| (*r, e.state)).collect();
    d.odd = waiting
        .iter()
        .map(|(r, e)| (*r, format!("{} (p2p #{})", e.profiling_name, e.p2p_seq_id)))
        .collect();
    if d.frames.is_empty() {
        if let Some((r, e)) = waiting.iter().find(|(_, e)| !e.frames.is_empty()) {
            d.frames = frames_of(e);
            d.frames_rank = Some(*r);
        }
    } else {
        d.frames_rank = waiting
            .iter()
            .find(|(_, e)| std::ptr::eq(**e, first))
            .map(|(r, _)| *r);
    }
    Some(d)
}

/// Every divergence in the job, root cause first.
pub fn divergences(job: &FrJob) -> Vec<Divergence> {
    let views: BTreeMap<u32, RankView> = job
        .dumps
        .iter()
        .map(|(r, d)| (*r, RankView::new(d)))
        .collect();
    let groups = groups(job, &views);
    let mut divs = Vec::new();
    for (name, g) in &groups {
        divs.extend(mismatches(name, g, &views));
        if let Some(d) = collective_divergence(name, g, &views) {
            divs.push(d);
        }
        if let Some(d) = p2p_unmatched(name, g, &views) {
            divs.push(d);
        }
    }
    rank_divergences(&mut divs);
    divs
}

/// Ranks waiting in some diverged op: they entered it and others did not come.
fn stuck_ranks(divs: &[Divergence]) -> BTreeSet<u32> {
    divs.iter()
        .filter(|d| is_hang(d))
        .flat_map(waiting)
        .collect()
}

fn is_root(d: &Divergence, stuck: &BTreeSet<u32>) -> bool {
    match d.kind {
        DivergenceKind::MissingRanks | DivergenceKind::P2pUnmatched => {
            d.missing.iter().any(|r| !stuck.contains(r))
        }
        _ => false,
    }
}

fn waiting(d: &Divergence) -> impl Iterator<Item = u32> + '_ {
    d.states.keys().copied().filter(|r| !d.missing.contains(r))
}

fn is_hang(d: &Divergence) -> bool {
    matches!(
        d.kind,
        DivergenceKind::MissingRanks | DivergenceKind::P2pUnmatched
    )
}

/// Ranks a divergence holds up, directly (they wait in its op) or through others (they
/// wait for a rank it holds up): the wait-for graph's reach from its waiters.
fn impact(i: usize, divs: &[Divergence], missing_in: &HashMap<u32, Vec<usize>>) -> usize {
    let mut seen_div = vec![false; divs.len()];
    let mut blocked: BTreeSet<u32> = BTreeSet::new();
    let mut queue: Vec<usize> = vec![i];
    seen_div[i] = true;
    while let Some(k) = queue.pop() {
        for w in waiting(&divs[k]) {
            if blocked.insert(w) {
                for &j in missing_in.get(&w).map_or(&[][..], |v| v.as_slice()) {
                    if !seen_div[j] {
                        seen_div[j] = true;
                        queue.push(j);
                    }
                }
            }
        }
    }
    blocked.len()
}

fn rank_divergences(divs: &mut [Divergence]) {
    let stuck = stuck_ranks(divs);
    let mut missing_in: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, d) in divs.iter().enumerate() {
        if is_hang(d) {
            for r in &d.missing {
                missing_in.entry(*r).or_default().push(i);
            }
        }
    }
    let impacts: Vec<usize> = (0..divs.len())
        .map(|i| {
            if is_hang(&divs[i]) {
                impact(i, divs, &missing_in)
            } else {
                0
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..divs.len()).collect();
    let key = |i: usize| {
        let d = &divs[i];
        let root = is_root(d, &stuck);
        let mismatch = matches!(
            d.kind,
            DivergenceKind::OpMismatch
                | DivergenceKind::SizeMismatch
                | DivergenceKind::DtypeMismatch
        );
        // Missing ranks that also hold ops their peers completed are broken, not just late.
        let behind = d.missing.iter().any(|r| d.behind.contains(r));
        (
            std::cmp::Reverse(root),
            std::cmp::Reverse(mismatch),
            d.kind == DivergenceKind::NoDumpOnly,
            std::cmp::Reverse(impacts[i]),
            std::cmp::Reverse(behind),
            d.time_created_ns,
            d.group.clone(),
            d.seq,
        )
    };
    order.sort_by_cached_key(|&i| key(i));
    let sorted: Vec<Divergence> = order.iter().map(|&i| divs[i].clone()).collect();
    divs.clone_from_slice(&sorted);
}

fn group_label(d: &Divergence) -> String {
    if d.desc.is_empty() {
        format!("process group {}", d.group)
    } else {
        format!("process group {} ({})", d.group, d.desc)
    }
}

fn op_label(d: &Divergence) -> String {
    let mut s = d.op.clone();
    let shape = shapes(&d.input_sizes);
    if !shape.is_empty() {
        s.push(' ');
        s.push_str(&shape);
    }
    if !d.input_dtypes.is_empty() {
        s.push(' ');
        s.push_str(&d.input_dtypes.join(", "));
    }
    s
}

/// Findings for a job's Flight Recorder dumps, the root cause first (confidence decreases
/// in that order, so sorting by severity then confidence keeps it).
pub fn analyze(job: &FrJob) -> Vec<Finding> {
    let divs = divergences(job);
    let stuck = stuck_ranks(&divs);
    let root_groups: Vec<String> = divs
        .iter()
        .filter(|d| is_root(d, &stuck))
        .map(group_label)
        .collect();
    let mut out = Vec::with_capacity(divs.len());
    for (i, d) in divs.iter().enumerate() {
        let root = i == 0 || is_root(d, &stuck);
        let base: f64 = match d.kind {
            DivergenceKind::MissingRanks | DivergenceKind::P2pUnmatched if root => 0.95,
            DivergenceKind::OpMismatch
            | DivergenceKind::SizeMismatch
            | DivergenceKind::DtypeMismatch => 0.9,
            DivergenceKind::NoDumpOnly => 0.5,
            _ => 0.6,
        };
        let confidence = (base - 0.001 * i as f64).clamp(0.05, 1.0);
        out.push(finding(job, d, root, confidence, &root_groups, &stuck));
    }
    if out.is_empty() && !job.missing_ranks.is_empty() {
        let mut f = Finding {
            kind: FindingKind::Hang,
            severity: Severity::Warning,
            summary: format!(
                "no diverged op among the dumps; ranks {} wrote no dump",
                ranks_str(&job.missing_ranks)
            ),
            confidence: 0.3,
            culprits: vec![],
            evidence: vec![Evidence::new(
                EvidenceKey::RanksWithoutDump,
                job.missing_ranks.len() as f64,
                Some(job.world().len() as f64),
                Unit::Ranks,
                format!("ranks {} have no dump", ranks_str(&job.missing_ranks)),
            )],
            action: "collect the missing ranks' dumps (or their logs: a crashed process writes none) and run again".into(),
            iterations: vec![],
            detector: DETECTOR,
            corroborated_by: vec![],
            failure: None,
        };
        for r in &job.missing_ranks {
            let mut c = Culprit::new(Component::Process);
            c.rank = Some(*r);
            f.culprits.push(c);
        }
        out.push(f);
    }
    out
}

fn finding(
    job: &FrJob,
    d: &Divergence,
    root: bool,
    confidence: f64,
    root_groups: &[String],
    stuck: &BTreeSet<u32>,
) -> Finding {
    let group = group_label(d);
    let op = op_label(d);
    let mut ev = Vec::new();
    let group_num = d.group.parse::<f64>().unwrap_or(f64::NAN);
    ev.push(Evidence::new(
        EvidenceKey::ProcessGroup,
        if group_num.is_finite() {
            group_num
        } else {
            0.0
        },
        None,
        Unit::None,
        format!("{group}, members {}", ranks_str(&d.members)),
    ));
    let seq_name = if d.kind == DivergenceKind::P2pUnmatched {
        EvidenceKey::P2pSeqId
    } else {
        EvidenceKey::CollectiveSeqId
    };
    ev.push(Evidence::new(
        seq_name,
        d.seq as f64,
        None,
        Unit::None,
        format!(
            "op {op}{}",
            if d.output_sizes.is_empty() {
                String::new()
            } else {
                format!(", output {}", shapes(&d.output_sizes))
            }
        ),
    ));
    let states = |rs: &[u32]| -> String {
        let mut by: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for r in rs {
            if let Some(s) = d.states.get(r) {
                by.entry(s.as_str()).or_default().push(*r);
            }
        }
        by.iter()
            .map(|(s, r)| format!("{s} on {}", ranks_str(r)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let (summary, action, culprit_ranks): (String, String, Vec<u32>) = match d.kind {
        DivergenceKind::MissingRanks | DivergenceKind::NoDumpOnly => {
            ev.push(Evidence::new(
                EvidenceKey::RanksReached,
                d.reached.len() as f64,
                Some(d.members.len() as f64),
                Unit::Ranks,
                format!(
                    "ranks {} reached #{} (state: {})",
                    ranks_str(&d.reached),
                    d.seq,
                    states(&d.reached)
                ),
            ));
            if !d.missing.is_empty() {
                let latest = d
                    .missing
                    .iter()
                    .map(|r| match d.missing_latest.get(r).cloned().flatten() {
                        Some((s, n, st)) if !n.is_empty() => {
                            format!("rank {r}: latest op #{s} {n} ({})", st.as_str())
                        }
                        Some((s, _, _)) => {
                            format!("rank {r}: last enqueued #{s} (pg_status), no op recorded")
                        }
                        None => format!("rank {r}: no op on this group in its dump"),
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                ev.push(Evidence::new(
                    EvidenceKey::RanksMissing,
                    d.missing.len() as f64,
                    Some(d.members.len() as f64),
                    Unit::Ranks,
                    format!(
                        "ranks {} never reached #{}: {latest}",
                        ranks_str(&d.missing),
                        d.seq
                    ),
                ));
            }
            let behind: Vec<u32> = d.behind.clone();
            if !behind.is_empty() {
                ev.push(Evidence::new(
                    EvidenceKey::RanksBehind,
                    behind.len() as f64,
                    None,
                    Unit::Ranks,
                    format!(
                        "ranks {} still hold earlier ops on this group that other members completed (their GPU work is not progressing)",
                        ranks_str(&behind)
                    ),
                ));
            }
            if d.kind == DivergenceKind::NoDumpOnly {
                (
                    format!(
                        "{group}: every rank with a dump waits in {op} #{}; ranks {} wrote no dump and are the likely cause",
                        d.seq,
                        ranks_str(&d.no_dump)
                    ),
                    format!(
                        "find out why ranks {} wrote no Flight Recorder dump (crashed, killed, node down: check their logs, dmesg for Xid errors); restart from the last checkpoint without their nodes if hardware failed",
                        ranks_str(&d.no_dump)
                    ),
                    d.no_dump.clone(),
                )
            } else {
                (
                    format!(
                        "hang in {group}: ranks {} never reached {op} (#{}) that ranks {} wait in",
                        ranks_str(&d.missing),
                        d.seq,
                        ranks_str(&d.reached)
                    ),
                    format!(
                        "inspect ranks {} (py-spy dump of the process for a Python-side stall such as a held GIL, dataloader or checkpoint; nvidia-smi and dmesg for Xid/ECC GPU errors); restart the job from the last checkpoint, draining their nodes if the hardware failed",
                        ranks_str(&d.missing)
                    ),
                    d.missing.clone(),
                )
            }
        }
        DivergenceKind::P2pUnmatched => {
            let waits = d
                .odd
                .iter()
                .map(|(r, s)| format!("rank {r}: {s}"))
                .collect::<Vec<_>>()
                .join("; ");
            ev.push(Evidence::new(
                EvidenceKey::P2pWaiting,
                d.odd.len() as f64,
                None,
                Unit::Ranks,
                format!("pending send/recv with no matching op on the peer: {waits}"),
            ));
            ev.push(Evidence::new(
                EvidenceKey::RanksMissing,
                d.missing.len() as f64,
                None,
                Unit::Ranks,
                format!(
                    "peers {} never posted the matching send/recv",
                    ranks_str(&d.missing)
                ),
            ));
            (
                format!(
                    "hang in {group}: {op} (p2p #{}) waits for ranks {} that never posted the matching send/recv",
                    d.seq,
                    ranks_str(&d.missing)
                ),
                format!(
                    "inspect ranks {} (py-spy dump, GPU health); if both sides are alive, compare the send/recv order of the pipeline stages (inconsistent P2P ordering deadlocks)",
                    ranks_str(&d.missing)
                ),
                d.missing.clone(),
            )
        }
        DivergenceKind::OpMismatch
        | DivergenceKind::SizeMismatch
        | DivergenceKind::DtypeMismatch => {
            let what = match d.kind {
                DivergenceKind::OpMismatch => "different collectives",
                DivergenceKind::SizeMismatch => "different input sizes",
                _ => "different dtypes",
            };
            let odd = d
                .odd
                .iter()
                .map(|(r, v)| format!("rank {r}: {v}"))
                .collect::<Vec<_>>()
                .join("; ");
            ev.push(Evidence::new(
                EvidenceKey::MismatchedRanks,
                d.odd.len() as f64,
                Some(d.reached.len() as f64),
                Unit::Ranks,
                format!(
                    "{what} for #{}: most ranks have {}; {odd}",
                    d.seq, d.majority
                ),
            ));
            (
                format!(
                    "{what} in {group} at #{}: ranks {} disagree with the others ({})",
                    d.seq,
                    ranks_str(&d.missing),
                    d.majority
                ),
                format!(
                    "the code paths on ranks {} issue collectives that do not match their peers' (a rank-dependent branch or shape); fix the program so every member issues the same collective with the same shape and dtype",
                    ranks_str(&d.missing)
                ),
                d.missing.clone(),
            )
        }
    };
    if !d.no_dump.is_empty() && d.kind != DivergenceKind::NoDumpOnly {
        ev.push(Evidence::new(
            EvidenceKey::RanksWithoutDump,
            d.no_dump.len() as f64,
            Some(d.members.len() as f64),
            Unit::Ranks,
            format!(
                "ranks {} of the group wrote no dump: their state is unknown",
                ranks_str(&d.no_dump)
            ),
        ));
    }
    if !d.frames.is_empty() {
        ev.push(Evidence::new(
            EvidenceKey::Stack,
            d.frames.len() as f64,
            None,
            Unit::Frames,
            format!(
                "stack of the op{}: {}",
                d.frames_rank
                    .map(|r| format!(" on rank {r}"))
                    .unwrap_or_default(),
                d.frames.join(" <- ")
            ),
        ));
    }
    if !root {
        let waiting: Vec<u32> = d
            .missing
            .iter()
            .copied()
            .filter(|r| stuck.contains(r))
            .collect();
        ev.push(Evidence::new(
            EvidenceKey::Consequence,
            waiting.len() as f64,
            None,
            Unit::Ranks,
            format!(
                "ranks {} wait in another group's op; likely a consequence of {}",
                ranks_str(&waiting),
                if root_groups.is_empty() {
                    "a cycle of waits".to_string()
                } else {
                    root_groups.join(", ")
                }
            ),
        ));
    }
    let missing_dumps: Vec<u32> = job.missing_ranks.clone();
    if root && !missing_dumps.is_empty() {
        ev.push(Evidence::new(
            EvidenceKey::JobRanksWithoutDump,
            missing_dumps.len() as f64,
            Some(job.world().len() as f64),
            Unit::Ranks,
            format!(
                "ranks {} of the job wrote no dump",
                ranks_str(&missing_dumps)
            ),
        ));
    }
    let n = culprit_ranks.len().max(1) as f64;
    let culprits = culprit_ranks
        .iter()
        .map(|r| {
            let mut c = Culprit::new(Component::Process);
            c.rank = Some(*r);
            c.score = 1.0 / n * n; // equal weight
            c
        })
        .collect();
    // Decisive: the group, who arrived and who did not (or who disagrees), and for a
    // consequence what it follows from; the op's sequence number, stacks and missing dumps
    // support it.
    const DECISIVE: [EvidenceKey; 7] = [
        EvidenceKey::ProcessGroup,
        EvidenceKey::RanksReached,
        EvidenceKey::RanksMissing,
        EvidenceKey::RanksBehind,
        EvidenceKey::P2pWaiting,
        EvidenceKey::MismatchedRanks,
        EvidenceKey::Consequence,
    ];
    for e in ev.iter_mut() {
        e.decisive = DECISIVE.contains(&e.metric);
    }
    Finding {
        kind: FindingKind::Hang,
        severity: Severity::Critical,
        summary,
        confidence,
        culprits,
        evidence: ev,
        action,
        iterations: vec![],
        detector: DETECTOR,
        corroborated_by: vec![],
        failure: None,
    }
}

/// The findings document of a hang analysis: `findings` from [`analyze`] of the dumps
/// read from `id`. Dumps say which collectives each rank reached, which is all a hang
/// analysis needs: it is always conclusive.
pub fn document(
    id: &str,
    job: &FrJob,
    findings: Vec<Finding>,
    diagnosis_ms: f64,
) -> FindingsDocument {
    let summary = JobSummary {
        id: id.to_string(),
        source: "flight_recorder".into(),
        world_size: job.world().len() as u32,
        ranks_with_data: job.dumps.len(),
        missing_ranks: job.missing_ranks.clone(),
        ..JobSummary::default()
    };
    let mut doc = FindingsDocument::new(summary, findings, true);
    doc.diagnosis_ms = Some(diagnosis_ms);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::flight_recorder::{FrFrame, FrPgConfig, FrPgRef};

    struct G(&'static str, &'static str, &'static [u32]);

    fn entry(pg: &str, seq: u64, name: &str, size: i64, dtype: &str, state: FrState) -> FrEntry {
        FrEntry {
            pg_id: pg.len() as u64,
            process_group: FrPgRef {
                name: pg.into(),
                desc: format!("{pg}_GROUP"),
            },
            collective_seq_id: seq,
            op_id: seq,
            profiling_name: name.into(),
            time_created_ns: 1_000 + seq,
            input_sizes: vec![vec![size, 8]],
            input_dtypes: vec![dtype.into()],
            output_sizes: vec![vec![size, 8]],
            output_dtypes: vec![dtype.into()],
            state,
            frames: vec![FrFrame {
                name: "forward".into(),
                filename: "model.py".into(),
                line: 42,
            }],
            ..Default::default()
        }
    }

    fn ar(pg: &str, seq: u64, state: FrState) -> FrEntry {
        entry(pg, seq, "nccl:all_reduce", 1024, "BFloat16", state)
    }

    fn p2p(pg: &str, cseq: u64, pseq: u64, name: &str, state: FrState) -> FrEntry {
        FrEntry {
            is_p2p: true,
            p2p_seq_id: pseq,
            ..entry(pg, cseq, name, 16, "Float", state)
        }
    }

    fn dump(rank: u32, groups: &[G], entries: Vec<FrEntry>) -> (u32, FrDump) {
        let pg_config = groups
            .iter()
            .map(|g| {
                (
                    g.0.to_string(),
                    FrPgConfig {
                        name: g.0.into(),
                        desc: g.1.into(),
                        ranks: g.2.to_vec(),
                    },
                )
            })
            .filter(|(_, c)| c.ranks.contains(&rank))
            .collect();
        // Rank-local pg ids differ per rank.
        let entries = entries
            .into_iter()
            .map(|mut e| {
                e.pg_id = 100 * rank as u64 + e.process_group.name.len() as u64;
                e
            })
            .collect();
        (
            rank,
            FrDump {
                rank,
                version: "2.9".into(),
                pg_config,
                entries,
                ..Default::default()
            },
        )
    }

    fn job(dumps: Vec<(u32, FrDump)>) -> FrJob {
        let mut j = FrJob {
            dumps: dumps.into_iter().collect(),
            ..Default::default()
        };
        j.missing_ranks = j
            .world()
            .into_iter()
            .filter(|r| !j.dumps.contains_key(r))
            .collect();
        j
    }

    use FrState::{Completed as C, Scheduled as S, Started as St};
    const TP: G = G("tp", "TENSOR_MODEL_PARALLEL_GROUP", &[0, 1, 2, 3]);
    const PP: G = G("pp", "PIPELINE_MODEL_PARALLEL_GROUP", &[0, 1]);
    const DP: G = G("dp", "DATA_PARALLEL_GROUP", &[1, 4]);

    struct Case {
        name: &'static str,
        job: FrJob,
        group: &'static str,
        kind: DivergenceKind,
        culprits: Vec<u32>,
        /// Text the first finding must contain.
        says: &'static [&'static str],
    }

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "missing rank",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 9, C), ar("tp", 10, St)]),
                    dump(1, &[TP], vec![ar("tp", 10, S)]),
                    dump(2, &[TP], vec![ar("tp", 10, S)]),
                    dump(3, &[TP], vec![ar("tp", 9, C)]),
                ]),
                group: "tp",
                kind: DivergenceKind::MissingRanks,
                culprits: vec![3],
                says: &[
                    "nccl:all_reduce",
                    "1024x8",
                    "BFloat16",
                    "#10",
                    "TENSOR_MODEL_PARALLEL_GROUP",
                    "model.py:42",
                ],
            },
            Case {
                name: "zero-entry rank",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 10, S)]),
                    dump(1, &[TP], vec![ar("tp", 10, S)]),
                    dump(2, &[TP], vec![]),
                    dump(3, &[TP], vec![ar("tp", 10, S)]),
                ]),
                group: "tp",
                kind: DivergenceKind::MissingRanks,
                culprits: vec![2],
                says: &["no op on this group"],
            },
            Case {
                name: "missing dump file",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 10, S)]),
                    dump(1, &[TP], vec![ar("tp", 10, S)]),
                    dump(2, &[TP], vec![ar("tp", 10, S)]),
                ]),
                group: "tp",
                kind: DivergenceKind::NoDumpOnly,
                culprits: vec![3],
                says: &["no dump"],
            },
            Case {
                name: "missing rank and a missing dump",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 10, S)]),
                    dump(1, &[TP], vec![ar("tp", 9, C)]),
                    dump(2, &[TP], vec![ar("tp", 10, S)]),
                ]),
                group: "tp",
                kind: DivergenceKind::MissingRanks,
                culprits: vec![1],
                says: &["ranks 3 of the group wrote no dump"],
            },
            Case {
                name: "size mismatch",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 5, S)]),
                    dump(1, &[TP], vec![ar("tp", 5, S)]),
                    dump(
                        2,
                        &[TP],
                        vec![entry("tp", 5, "nccl:all_reduce", 2048, "BFloat16", S)],
                    ),
                    dump(3, &[TP], vec![ar("tp", 5, S)]),
                ]),
                group: "tp",
                kind: DivergenceKind::SizeMismatch,
                culprits: vec![2],
                says: &["2048x8", "1024x8"],
            },
            Case {
                name: "dtype mismatch",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 5, S)]),
                    dump(
                        1,
                        &[TP],
                        vec![entry("tp", 5, "nccl:all_reduce", 1024, "Float", S)],
                    ),
                    dump(2, &[TP], vec![ar("tp", 5, S)]),
                    dump(3, &[TP], vec![ar("tp", 5, S)]),
                ]),
                group: "tp",
                kind: DivergenceKind::DtypeMismatch,
                culprits: vec![1],
                says: &["rank 1: Float"],
            },
            Case {
                name: "op-type mismatch",
                job: job(vec![
                    dump(0, &[TP], vec![ar("tp", 5, S)]),
                    dump(1, &[TP], vec![ar("tp", 5, S)]),
                    dump(2, &[TP], vec![ar("tp", 5, S)]),
                    dump(
                        3,
                        &[TP],
                        vec![entry("tp", 5, "nccl:broadcast", 1024, "BFloat16", S)],
                    ),
                ]),
                group: "tp",
                kind: DivergenceKind::OpMismatch,
                culprits: vec![3],
                says: &["nccl:broadcast"],
            },
            Case {
                name: "p2p hang",
                job: job(vec![
                    dump(0, &[PP], vec![p2p("pp", 3, 7, "nccl:send 0->1", S)]),
                    dump(1, &[PP], vec![p2p("pp", 3, 6, "nccl:recv 1<-0", C)]),
                ]),
                group: "pp",
                kind: DivergenceKind::P2pUnmatched,
                culprits: vec![1],
                says: &["nccl:send 0->1", "p2p #7"],
            },
            Case {
                name: "coalesced op",
                job: job(vec![
                    dump(
                        0,
                        &[TP],
                        vec![
                            entry("tp", 4, "nccl:coalesced", 1, "BFloat16", S),
                            entry("tp", 4, "nccl:all_reduce", 64, "BFloat16", S),
                        ],
                    ),
                    dump(
                        1,
                        &[TP],
                        vec![
                            entry("tp", 4, "nccl:coalesced", 1, "BFloat16", S),
                            entry("tp", 4, "nccl:all_reduce", 32, "BFloat16", S),
                        ],
                    ),
                    dump(2, &[TP], vec![ar("tp", 3, C)]),
                    dump(
                        3,
                        &[TP],
                        vec![entry("tp", 4, "nccl:coalesced", 1, "BFloat16", S)],
                    ),
                ]),
                group: "tp",
                kind: DivergenceKind::MissingRanks,
                culprits: vec![2],
                says: &["nccl:coalesced", "#4"],
            },
            Case {
                // Counters are per group and per rank: tp is at 100+, dp at 5; local pg ids
                // differ per rank. Rank 1 blocks both groups; tp's op came first.
                name: "differing per-rank seq counters",
                job: job(vec![
                    dump(0, &[TP, DP], vec![ar("tp", 101, S)]),
                    dump(1, &[TP, DP], vec![ar("tp", 100, C), ar("dp", 5, C)]),
                    dump(2, &[TP, DP], vec![ar("tp", 101, S)]),
                    dump(3, &[TP, DP], vec![ar("tp", 101, S)]),
                    dump(
                        4,
                        &[TP, DP],
                        vec![FrEntry {
                            time_created_ns: 5_000,
                            ..ar("dp", 6, S)
                        }],
                    ),
                ]),
                group: "tp",
                kind: DivergenceKind::MissingRanks,
                culprits: vec![1],
                says: &["#101"],
            },
            Case {
                // tp waits for rank 1, but rank 1 itself waits in dp for rank 4: dp is the cause.
                name: "consequence ranked after the root cause",
                job: job(vec![
                    dump(0, &[TP, DP], vec![ar("tp", 11, S)]),
                    dump(1, &[TP, DP], vec![ar("tp", 10, C), ar("dp", 3, S)]),
                    dump(2, &[TP, DP], vec![ar("tp", 11, S)]),
                    dump(3, &[TP, DP], vec![ar("tp", 11, S)]),
                    dump(4, &[TP, DP], vec![ar("dp", 2, C)]),
                ]),
                group: "dp",
                kind: DivergenceKind::MissingRanks,
                culprits: vec![4],
                says: &["DATA_PARALLEL_GROUP"],
            },
        ]
    }

    #[test]
    fn table() {
        for c in cases() {
            let divs = divergences(&c.job);
            assert!(!divs.is_empty(), "{}: no divergence", c.name);
            assert_eq!(divs[0].group, c.group, "{}: {:?}", c.name, divs);
            assert_eq!(divs[0].kind, c.kind, "{}", c.name);
            let f = analyze(&c.job);
            let culprits: Vec<u32> = f[0].culprits.iter().filter_map(|x| x.rank).collect();
            assert_eq!(culprits, c.culprits, "{}: {:#?}", c.name, f[0]);
            assert_eq!(f[0].kind, FindingKind::Hang);
            assert_eq!(f[0].severity, Severity::Critical);
            let text = format!(
                "{} {}",
                f[0].summary,
                f[0].evidence
                    .iter()
                    .map(|e| e.detail.clone())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            for s in c.says {
                assert!(text.contains(s), "{}: {s:?} not in {text}", c.name);
            }
            for w in f.windows(2) {
                assert!(w[0].confidence > w[1].confidence, "{}: order", c.name);
            }
        }
    }

    #[test]
    fn healthy_job_has_no_findings() {
        let j = job(vec![
            dump(0, &[TP], vec![ar("tp", 10, C)]),
            dump(1, &[TP], vec![ar("tp", 10, C)]),
            dump(2, &[TP], vec![ar("tp", 10, S)]),
            dump(3, &[TP], vec![ar("tp", 10, S)]),
        ]);
        assert!(analyze(&j).is_empty());
        assert!(analyze(&FrJob::default()).is_empty());
    }

    #[test]
    fn pg_status_fills_groups_without_entries() {
        // Rank 2 recorded nothing; its pg_status (keyed by local id) says tp is at 10.
        let (_, mut d2) = dump(2, &[TP], vec![]);
        d2.pg_status.insert(
            "7".into(),
            FrPgStatus {
                last_enqueued_collective: 10,
                last_started_collective: -1,
                last_completed_collective: 10,
            },
        );
        let j = job(vec![
            dump(0, &[TP], vec![ar("tp", 11, S)]),
            dump(1, &[TP], vec![ar("tp", 11, S)]),
            (2, d2),
            dump(3, &[TP], vec![ar("tp", 11, S)]),
        ]);
        let divs = divergences(&j);
        assert_eq!(divs[0].missing, vec![2]);
        assert_eq!(divs[0].missing_latest[&2], Some((10, String::new(), C)));
    }
}
