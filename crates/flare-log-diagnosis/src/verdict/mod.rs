//! From what the pass gathered to the findings: which line is the root cause, who the
//! culprit is, what the rest of the failure lines are effects of.
//!
//! 1. Lines a row called a root cause or a symptom are grouped by what they say (one
//!    group for an OOM logged by three ranks).
//! 2. The root cause is the group of the heaviest evidence (the row's weight: the kernel's
//!    word on hardware outweighs a process-local error, which outweighs a network error a
//!    dead peer also causes, which outweighs a symptom that names no cause); among equals,
//!    the earliest where clocks compare, then the one on the rank the cascade points at,
//!    then the one on fewest ranks.
//! 3. The culprit is where the root cause's lines came from; when many ranks report it,
//!    the host their failed peers have in common, or the rank the cascade points at
//!    (`culprit`); a configuration or platform cause on every rank has none.
//! 4. The other lines are the root cause's symptoms on the culprit, or effects elsewhere
//!    (cascade groups, each with what it is an effect of), or other root causes, reported
//!    beside it.
//! 5. With no root cause and no symptom, the statistical part's most unusual line is
//!    reported as an unexplained failure; with only a cascade, its structure names the
//!    culprit and says the cause is unknown.

mod build;
pub mod culprit;

use crate::collect::{Collected, Hit};
use crate::signatures::Role;
use crate::stats;
use crate::time::Stamp;
use flare_model::{FailureCategory, Finding, JobStage, LogSignature};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The answer for a job's logs.
pub struct LogDiagnosis {
    /// Most important first (the root cause, then other causes seen beside it).
    pub findings: Vec<Finding>,
    pub files: usize,
    pub lines: u64,
    pub baseline_lines: u64,
    pub ranks: BTreeSet<u32>,
    pub hosts: BTreeSet<String>,
    /// The host of each rank whose logs say one (and only one).
    pub rank_hosts: BTreeMap<u32, String>,
    pub notes: Vec<String>,
}

/// Hits that say the same thing: one failure as several ranks logged it.
#[derive(Clone, Debug)]
struct Group {
    hits: Vec<usize>,
    weight: u8,
}

impl Group {
    fn first<'a>(&self, hits: &'a [Hit]) -> &'a Hit {
        &hits[self.hits[0]]
    }
}

/// Calendar seconds comparable across hosts (the year, when missing, taken as the one
/// most stamps have): `None` for stamps that compare only within a host.
fn absolute(stamp: &Option<Stamp>, year: u16) -> Option<f64> {
    match stamp {
        Some(Stamp::Calendar {
            year: y,
            second_of_year,
        }) => Some(y.unwrap_or(year) as f64 * 400.0 * 86_400.0 + second_of_year),
        _ => None,
    }
}

fn usual_year(hits: &[Hit]) -> u16 {
    let mut n: HashMap<u16, usize> = HashMap::new();
    for h in hits {
        if let Some(Stamp::Calendar { year: Some(y), .. }) = h.time {
            *n.entry(y).or_insert(0) += 1;
        }
    }
    n.into_iter().max_by_key(|(_, c)| *c).map_or(0, |(y, _)| y)
}

/// Fills in what other lines told about a line's rank: a NCCL line's from its host and
/// pid; a line of a per-local-rank file from the global rank that file's own `[rankN]:`
/// lines, or torchrun's summary, give that local rank (on its host).
fn resolve(c: &Collected, hits: &mut [Hit]) -> LocalRanks {
    let mut local = LocalRanks::default();
    for f in &c.files {
        let agent = f.source.agent.as_deref();
        for (r, l, h) in f.stream_keys() {
            if let (Some(r), Some(l)) = (r, l) {
                local.saw(agent, h, l, r);
            }
        }
    }
    for h in hits.iter() {
        if let (Some(r), Some(l)) = (h.rank, h.local_rank) {
            local.saw(
                c.files[h.file].source.agent.as_deref(),
                h.host.clone(),
                l,
                r,
            );
        }
    }
    for h in hits.iter_mut() {
        if h.rank.is_none() {
            if let (Some(host), Some(pid)) = (&h.host, h.pid) {
                h.rank = c.pid_ranks.get(&(host.clone(), pid)).copied();
            }
        }
        if let (None, Some(l)) = (h.rank, h.local_rank) {
            h.rank = local.global(c.files[h.file].source.agent.as_deref(), &h.host, l);
        }
    }
    local
}

/// What the logs say of local ranks' global ones.
#[derive(Default)]
struct LocalRanks {
    /// (host, local rank) -> the global ranks it was seen as.
    by_host: HashMap<(Option<String>, u32), BTreeSet<u32>>,
    /// torchrun agent's log folder -> global less local rank, as seen. torchrun numbers a
    /// node's processes from the node's first global rank, so one agent has one offset,
    /// and a process that never printed its global rank (a hung one, typically) gets it
    /// from its siblings.
    agent_offsets: HashMap<String, BTreeSet<i64>>,
}

impl LocalRanks {
    fn saw(&mut self, agent: Option<&str>, host: Option<String>, l: u32, r: u32) {
        self.by_host.entry((host, l)).or_default().insert(r);
        if let Some(a) = agent {
            self.agent_offsets
                .entry(a.to_string())
                .or_default()
                .insert(i64::from(r) - i64::from(l));
        }
    }

    /// The global rank a local rank was, when one: from its agent's offset, else what
    /// its host (or, no host said, any host) saw.
    fn global(&self, agent: Option<&str>, host: &Option<String>, l: u32) -> Option<u32> {
        fn one<T: Copy + Ord>(s: &BTreeSet<T>) -> Option<T> {
            (s.len() == 1).then(|| *s.first().expect("one"))
        }
        if let Some(offset) = agent.and_then(|a| self.agent_offsets.get(a)).and_then(one) {
            return u32::try_from(offset + i64::from(l)).ok();
        }
        if let Some(r) = self.by_host.get(&(host.clone(), l)).and_then(one) {
            return Some(r);
        }
        let all: BTreeSet<u32> = self
            .by_host
            .iter()
            .filter(|((_, ll), _)| *ll == l)
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        one(&all).filter(|_| host.is_none())
    }
}

fn is_failure(h: &Hit) -> bool {
    matches!(h.reading.role, Role::Root | Role::Symptom)
}

/// A process's exit is as telling as the error that ended it: the exit (its code,
/// signal or Slurm's report) of a rank whose own lines already show an effect of a
/// failure elsewhere (a timeout waiting for a peer, a broken connection) is an effect
/// too, not a failure of its own; so is its abort in native code as it goes down with
/// that error (`terminate called without an active exception`: a thread still running
/// at exit). An abort in native code is also an effect where the line next to it, from
/// the same writer, is one: PyTorch's watchdog announces that it takes the process down
/// (`Some NCCL operations have failed or timed out ...`), throws, and the C++ runtime
/// prints `terminate called after throwing ...` and then the exception's `what():`, the
/// timeout itself. That holds in a console whose lines name no rank, too.
fn explain_exits(hits: &mut [Hit]) {
    let cascade_lines: BTreeSet<(usize, u64, Option<u32>)> = hits
        .iter()
        .filter(|h| h.reading.role == Role::Cascade)
        .map(|h| (h.file, h.line, h.rank))
        .collect();
    let after_cascade: BTreeSet<u32> = cascade_lines.iter().filter_map(|k| k.2).collect();
    for h in hits.iter_mut() {
        let exit = matches!(
            h.reading.signature,
            LogSignature::ProcessExit
                | LogSignature::ProcessSignal
                | LogSignature::SrunTaskExit
                | LogSignature::CxxTerminate
        );
        let beside_cascade = h.reading.signature == LogSignature::CxxTerminate
            && [h.line.wrapping_sub(1), h.line + 1]
                .iter()
                .any(|&l| cascade_lines.contains(&(h.file, l, h.rank)));
        if exit
            && h.reading.role == Role::Symptom
            && (h.rank.is_some_and(|r| after_cascade.contains(&r)) || beside_cascade)
        {
            h.reading.role = Role::Cascade;
            h.reading.meaning = format!("{}, after its own error above", h.reading.meaning);
        }
    }
}

/// Failure hits grouped by what they say, in the order their first line arrived.
fn groups(hits: &[Hit]) -> Vec<Group> {
    let mut index: HashMap<(LogSignature, FailureCategory, &str), usize> = HashMap::new();
    let mut out: Vec<Group> = Vec::new();
    let mut order: Vec<usize> = (0..hits.len()).filter(|&i| is_failure(&hits[i])).collect();
    order.sort_by_key(|&i| hits[i].order);
    for i in order {
        let h = &hits[i];
        let r = &h.reading;
        let key = (r.signature, r.category, r.meaning.as_str());
        let weight = if h.in_baseline {
            r.weight.min(5)
        } else {
            r.weight
        };
        match index.get(&key) {
            Some(&g) => {
                out[g].hits.push(i);
                out[g].weight = out[g].weight.max(weight);
            }
            None => {
                index.insert(key, out.len());
                out.push(Group {
                    hits: vec![i],
                    weight,
                });
            }
        }
    }
    out
}

/// What the cascade points at, to break ties between root causes.
struct Pointers {
    ranks: BTreeSet<u32>,
    hosts: BTreeSet<String>,
}

impl Pointers {
    fn supports(&self, g: &Group, hits: &[Hit]) -> bool {
        g.hits.iter().any(|&i| {
            let h = &hits[i];
            h.first_observed
                || h.rank.is_some_and(|r| self.ranks.contains(&r))
                || h.host.as_ref().is_some_and(|x| self.hosts.contains(x))
        })
    }
}

/// Whether `a` is a better root cause than `b`.
fn better(a: &Group, b: &Group, hits: &[Hit], year: u16, pointers: &Pointers) -> bool {
    if a.weight != b.weight {
        return a.weight > b.weight;
    }
    let (ta, tb) = (earliest(a, hits, year), earliest(b, hits, year));
    if let (Some(ta), Some(tb)) = (ta, tb) {
        if (ta - tb).abs() > 1e-6 {
            return ta < tb;
        }
    }
    let (sa, sb) = (pointers.supports(a, hits), pointers.supports(b, hits));
    if sa != sb {
        return sa;
    }
    let spread = |g: &Group| {
        g.hits
            .iter()
            .map(|&i| (hits[i].rank, hits[i].host.clone()))
            .collect::<BTreeSet<_>>()
            .len()
    };
    let (na, nb) = (spread(a), spread(b));
    if na != nb {
        return na < nb;
    }
    a.first(hits).order < b.first(hits).order
}

fn earliest(g: &Group, hits: &[Hit], year: u16) -> Option<f64> {
    g.hits
        .iter()
        .filter_map(|&i| absolute(&hits[i].time, year))
        .min_by(f64::total_cmp)
}

/// How far each rank got: its last stage and iteration.
fn progress(c: &Collected, local: &LocalRanks) -> HashMap<u32, (Option<JobStage>, Option<u64>)> {
    let mut out: HashMap<u32, (Option<JobStage>, Option<u64>)> = HashMap::new();
    for f in &c.files {
        let agent = f.source.agent.as_deref();
        for ((r, l, h), stage, iteration) in f.stream_progress() {
            let Some(r) = r.or_else(|| l.and_then(|l| local.global(agent, h, l))) else {
                continue;
            };
            let e = out.entry(r).or_default();
            if iteration > e.1 {
                e.1 = iteration;
            }
            if stage.is_some() {
                e.0 = stage;
            }
        }
    }
    out
}

/// The host each rank's lines came from, where one host is said.
fn rank_hosts(c: &Collected, hits: &[Hit], local: &LocalRanks) -> HashMap<u32, String> {
    let mut seen: HashMap<u32, BTreeSet<String>> = HashMap::new();
    for f in &c.files {
        let agent = f.source.agent.as_deref();
        for (r, l, h) in f.stream_keys() {
            if let (Some(r), Some(h)) =
                (r.or_else(|| l.and_then(|l| local.global(agent, &h, l))), h)
            {
                seen.entry(r).or_default().insert(h);
            }
        }
    }
    for h in hits {
        if let (Some(r), Some(x)) = (h.rank, &h.host) {
            seen.entry(r).or_default().insert(x.clone());
        }
    }
    seen.into_iter()
        .filter(|(_, h)| h.len() == 1)
        .map(|(r, h)| (r, h.into_iter().next().expect("one")))
        .collect()
}

/// Ranks and hosts the logs came from.
fn seen(c: &Collected, hits: &[Hit], local: &LocalRanks) -> (BTreeSet<u32>, BTreeSet<String>) {
    let mut ranks = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for f in &c.files {
        for (r, l, h) in f.stream_keys() {
            if let Some(r) =
                r.or_else(|| l.and_then(|l| local.global(f.source.agent.as_deref(), &h, l)))
            {
                ranks.insert(r);
            }
            if let Some(h) = h {
                hosts.insert(h);
            }
        }
    }
    for h in hits {
        if let Some(r) = h.rank {
            ranks.insert(r);
        }
        if let Some(x) = &h.host {
            hosts.insert(x.clone());
        }
    }
    (ranks, hosts)
}

/// The diagnosis of one job's logs.
pub fn diagnose(mut c: Collected) -> LogDiagnosis {
    let hits = std::mem::take(&mut c.hits);
    verdict(&c, hits)
}

/// The verdict on what a pass gathered, with its hits apart (resolving ranks changes
/// them; a live collector keeps its own).
pub(crate) fn verdict(c: &Collected, mut hits: Vec<Hit>) -> LogDiagnosis {
    let local = resolve(c, &mut hits);
    explain_exits(&mut hits);
    let (ranks, hosts) = seen(c, &hits, &local);
    let rank_progress = progress(c, &local);
    let rank_host = rank_hosts(c, &hits, &local);
    let year = usual_year(&hits);
    let wd = culprit::watchdogs(&hits, &ranks);
    let calls = culprit::calls(&hits);
    let cascade_hits = || hits.iter().filter(|h| h.reading.role == Role::Cascade);
    let peer = culprit::peer_consensus(cascade_hits(), &c.ip_hosts)
        .map(|(h, n, m)| (culprit::known_host(&h, &hosts).unwrap_or(h), n, m));
    let named = culprit::named_rank(cascade_hits());
    let mut pointers = Pointers {
        ranks: wd.behind.iter().copied().collect(),
        hosts: BTreeSet::new(),
    };
    if wd.behind.is_empty() && wd.silent.len() <= 2 {
        pointers.ranks.extend(wd.silent.iter().copied());
    }
    if let Some((r, _)) = named {
        pointers.ranks.insert(r);
    }
    pointers.ranks.extend(calls.odd.iter().copied());
    if let Some((h, _, _)) = &peer {
        pointers.hosts.insert(h.clone());
    }

    let mut groups = groups(&hits);
    let mut best: Option<usize> = None;
    for (i, g) in groups.iter().enumerate() {
        if best.is_none_or(|b| better(g, &groups[b], &hits, year, &pointers)) {
            best = Some(i);
        }
    }
    let ctx = build::Context {
        c,
        hits: &hits,
        hosts: &hosts,
        ranks: &ranks,

        watchdogs: &wd,
        calls: &calls,
        progress: &rank_progress,
        rank_hosts: &rank_host,
        peer: peer.clone(),
        named,
        year,
    };
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    // a collective mismatch the watchdogs show outweighs symptoms and weaker causes
    let mismatch = !wd.mismatched.is_empty() || calls.mismatched();
    match best {
        Some(b) if groups[b].weight >= 80 || !mismatch => {
            let root = groups.remove(b);
            findings.extend(ctx.root_cause(&root, &groups));
        }
        _ if mismatch => findings.push(ctx.mismatch()),
        _ => {
            let last_iteration = last_iterations(c);
            let process_files = c
                .files
                .iter()
                .filter(|f| f.source.kind == crate::source::FileKind::Process)
                .count();
            let scored = stats::score(&c.anomalies, &c.templates, process_files, &last_iteration);
            // an unusual line explains the failure unless the cascade points at another
            // rank or host than the line's
            let pointed = !pointers.ranks.is_empty() || !pointers.hosts.is_empty();
            let on_pointed = |s: &stats::Scored| {
                s.anomaly.rank.is_some_and(|r| pointers.ranks.contains(&r))
                    || s.anomaly
                        .host
                        .as_ref()
                        .is_some_and(|h| pointers.hosts.contains(h))
            };
            let anomaly = scored.first().filter(|s| !pointed || on_pointed(s));
            match anomaly.and_then(|_| ctx.unexplained(&scored)) {
                Some(f) => findings.push(f),
                None => findings.extend(ctx.cascade_only()),
            }
        }
    }
    if c.templates.dropped_anomalies > 0 {
        notes.push(format!(
            "{} error-looking line templates beyond the first 200,000 were counted, not kept",
            c.templates.dropped_anomalies
        ));
    }
    if c.templates.has_baseline() {
        notes.push(format!(
            "{} lines of earlier good runs were read as the baseline: lines like theirs are not blamed",
            c.baseline_lines
        ));
    }
    LogDiagnosis {
        findings,
        files: c.files.len(),
        lines: c.lines,
        baseline_lines: c.baseline_lines,
        ranks,
        hosts,
        rank_hosts: rank_host.into_iter().collect(),
        notes,
    }
}

/// The last iteration each file reached.
fn last_iterations(c: &Collected) -> HashMap<usize, u64> {
    let mut out = HashMap::new();
    for (i, f) in c.files.iter().enumerate() {
        if let Some(it) = f.last_iteration() {
            out.insert(i, it);
        }
    }
    out
}
