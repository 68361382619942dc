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
use flare_model::{FailureCategory, Finding, LogSignature};
use std::collections::{BTreeSet, HashMap};

/// The answer for a job's logs.
pub struct LogDiagnosis {
    /// Most important first (the root cause, then other causes seen beside it).
    pub findings: Vec<Finding>,
    pub files: usize,
    pub lines: u64,
    pub baseline_lines: u64,
    pub ranks: BTreeSet<u32>,
    pub hosts: BTreeSet<String>,
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

/// Fills in what later lines told about earlier ones: a NCCL line's rank from its host
/// and pid.
fn resolve(c: &mut Collected) {
    for h in c.hits.iter_mut() {
        if h.rank.is_none() {
            if let (Some(host), Some(pid)) = (&h.host, h.pid) {
                h.rank = c.pid_ranks.get(&(host.clone(), pid)).copied();
            }
        }
    }
}

fn is_failure(h: &Hit) -> bool {
    matches!(h.reading.role, Role::Root | Role::Symptom)
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

/// Ranks and hosts the logs came from.
fn seen(c: &Collected) -> (BTreeSet<u32>, BTreeSet<String>) {
    let mut ranks = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for f in &c.files {
        for (r, _, h) in f.stream_keys() {
            if let Some(r) = r {
                ranks.insert(r);
            }
            if let Some(h) = h {
                hosts.insert(h);
            }
        }
    }
    for h in &c.hits {
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
    resolve(&mut c);
    let (ranks, hosts) = seen(&c);
    let year = usual_year(&c.hits);
    let wd = culprit::watchdogs(&c.hits, &ranks);
    let cascade_hits = || c.hits.iter().filter(|h| h.reading.role == Role::Cascade);
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
    if let Some((h, _, _)) = &peer {
        pointers.hosts.insert(h.clone());
    }

    let mut groups = groups(&c.hits);
    let mut best: Option<usize> = None;
    for (i, g) in groups.iter().enumerate() {
        if best.is_none_or(|b| better(g, &groups[b], &c.hits, year, &pointers)) {
            best = Some(i);
        }
    }
    let ctx = build::Context {
        c: &c,
        hosts: &hosts,

        watchdogs: &wd,
        peer: peer.clone(),
        named,
        year,
    };
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    // a collective mismatch the watchdogs show outweighs symptoms and weaker causes
    let mismatch = !wd.mismatched.is_empty();
    match best {
        Some(b) if groups[b].weight >= 80 || !mismatch => {
            let root = groups.remove(b);
            findings.extend(ctx.root_cause(&root, &groups));
        }
        _ if mismatch => findings.push(ctx.mismatch_from_watchdogs(&groups)),
        _ => {
            let last_iteration = last_iterations(&c);
            let process_files = c
                .files
                .iter()
                .filter(|f| f.source.kind == crate::source::FileKind::Process)
                .count();
            let scored = stats::score(&c.anomalies, &c.templates, process_files, &last_iteration);
            if let Some(f) = ctx.unexplained(&scored) {
                findings.push(f);
            } else if let Some(f) = ctx.cascade_only() {
                findings.push(f);
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
