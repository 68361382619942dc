//! The ranks' start-up timelines compared: who entered a phase the ranks meet in after
//! the others (and why: which of its earlier phases took longer than its peers', or its
//! process started late), and where the job's start-up time went.

use crate::live::LiveWindow;
use crate::stats::median;
use flare_model::{StartupPhase, StartupPhaseRecord, StartupRecord};
use std::collections::BTreeMap;

/// Every rank's start-up as the latest windows tell it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StartupView {
    /// Ascending rank.
    pub ranks: Vec<RankStartup>,
    /// The job's size as its ranks reported it (0: unknown).
    pub world_size: u32,
    /// The end of the window diagnosed (Unix ns): how long an open phase has lasted.
    pub now_unix_ns: u64,
    /// Ranks that reported data in the windows without a start-up record (traced with
    /// start-up off, or by an older package): not judged.
    pub without_record: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RankStartup {
    pub rank: u32,
    /// The host that reported it.
    pub node: String,
    pub record: StartupRecord,
}

impl StartupView {
    /// The latest record of each rank over `windows` (oldest first, the diagnosed window
    /// last); `None` when the diagnosed window carries no start-up record (start-up was
    /// reported in earlier windows, or never).
    pub fn from_windows(windows: &[&LiveWindow]) -> Option<StartupView> {
        let current = windows.last()?;
        if !current.ranks.iter().any(|r| r.startup.is_some()) {
            return None;
        }
        let mut ranks: BTreeMap<u32, RankStartup> = BTreeMap::new();
        for w in windows {
            for r in &w.ranks {
                if let Some(record) = &r.startup {
                    ranks.insert(
                        r.rank,
                        RankStartup {
                            rank: r.rank,
                            node: r.node.clone(),
                            record: record.clone(),
                        },
                    );
                }
            }
        }
        let without_record: std::collections::BTreeSet<u32> = windows
            .iter()
            .flat_map(|w| w.with_data().map(|r| r.rank))
            .filter(|r| !ranks.contains_key(r))
            .collect();
        Some(StartupView {
            without_record: without_record.into_iter().collect(),
            ranks: ranks.into_values().collect(),
            world_size: windows.iter().map(|w| w.world_size).max().unwrap_or(0),
            now_unix_ns: current.end_unix_ns,
        })
    }

    fn rank(&self, rank: u32) -> Option<&RankStartup> {
        self.ranks
            .binary_search_by_key(&rank, |r| r.rank)
            .ok()
            .map(|i| &self.ranks[i])
    }

    /// The ranks expected: the whole job where its size is known, but for ranks that
    /// report without a record.
    pub fn expected(&self) -> Vec<u32> {
        let known = self.ranks.iter().map(|r| r.rank + 1).max().unwrap_or(0);
        (0..self.world_size.max(known))
            .filter(|r| self.without_record.binary_search(r).is_err())
            .collect()
    }

    /// Whether every expected rank finished its first step.
    pub fn complete(&self) -> bool {
        let expected = self.expected();
        !expected.is_empty()
            && expected
                .iter()
                .all(|&r| self.rank(r).is_some_and(|s| s.record.complete))
    }
}

/// What made a rank late to a phase.
#[derive(Clone, Debug, PartialEq)]
pub enum Cause {
    /// Nothing from the rank: its process has not started, or not reached `flare.init`.
    NotTraced,
    /// Its process started this much after its peers' (median), ns.
    StartedLate(f64),
    /// One of its phases took longer than its peers'; `ongoing` while it is still in it.
    Phase {
        label: String,
        phase: StartupPhase,
        own_ns: f64,
        peers_ns: f64,
        ongoing: bool,
    },
    /// Time between its phases that no phase covers (program code nobody marked).
    Untraced {
        /// The phase it came after, if any.
        after: Option<String>,
        own_ns: f64,
        peers_ns: f64,
    },
    /// No phase of its own differs enough from its peers' to explain it.
    Unexplained,
}

/// A rank that entered (or has not yet entered) a phase the ranks meet in after the others.
#[derive(Clone, Debug, PartialEq)]
pub struct Late {
    pub rank: u32,
    /// Its host, where its agent reported it.
    pub node: Option<String>,
    pub phase: StartupPhase,
    /// Its entry after the typical rank's (so far, while it has not entered), ns.
    pub late_ns: f64,
    /// Whether it entered the phase (else it is still on its way there).
    pub arrived: bool,
    /// Ranks that were there before it, and their total wait for it (rank-ns).
    pub waiting_ranks: usize,
    pub wait_rank_ns: f64,
    pub cause: Cause,
}

/// Thresholds of [`late_ranks`].
#[derive(Clone, Debug)]
pub struct StartupConfig {
    /// A rank is late to a phase the ranks meet in when it enters it at least this many
    /// seconds after the typical rank...
    pub min_late_s: f64,
    /// ...and this many times the spread of the ranks' entries (robust standard
    /// deviations): a job whose ranks arrive over a minute has no single late rank.
    pub spread_factor: f64,
}

impl Default for StartupConfig {
    fn default() -> Self {
        StartupConfig {
            min_late_s: 5.0,
            spread_factor: 3.0,
        }
    }
}

const SYNC_PHASES: [StartupPhase; 3] = [
    StartupPhase::InitProcessGroup,
    StartupPhase::ModelWrap,
    StartupPhase::FirstStep,
];

/// Whether `r` is past `phase` without having recorded it (a later meeting phase, or its
/// start-up is over): the phase was not hooked for it (`flare.init` after it).
fn past(r: &StartupRecord, phase: StartupPhase) -> bool {
    let order = |p: StartupPhase| SYNC_PHASES.iter().position(|&s| s == p);
    r.complete
        || r.phases
            .iter()
            .any(|p| order(p.phase).is_some_and(|o| Some(o) > order(phase)))
}

fn end_or(p: &StartupPhaseRecord, now: f64) -> f64 {
    p.end_unix_ns.map_or(now, |e| e as f64)
}

/// The ranks late to each phase the ranks meet in (`init_process_group`, DDP's
/// constructor, the first step), with why.
pub fn late_ranks(v: &StartupView, cfg: &StartupConfig) -> Vec<Late> {
    let now = v.now_unix_ns as f64;
    let expected = v.expected();
    let mut out = Vec::new();
    for &phase in &SYNC_PHASES {
        // (rank, entry): arrived ranks with their entry, pending ones with none.
        let mut arrived: Vec<(u32, f64)> = Vec::new();
        let mut pending: Vec<u32> = Vec::new();
        for &rank in &expected {
            match v.rank(rank) {
                Some(r) => match r.record.phase(phase) {
                    Some(p) => arrived.push((rank, p.start_unix_ns as f64)),
                    None if past(&r.record, phase) => {}
                    None => pending.push(rank),
                },
                None => pending.push(rank),
            }
        }
        let n = arrived.len() + pending.len();
        if arrived.is_empty() || arrived.len() * 2 < n {
            continue;
        }
        let mut entries: Vec<f64> = arrived.iter().map(|a| a.1).collect();
        entries.sort_by(f64::total_cmp);
        // The typical rank's entry: the median with pending ranks counted as not yet.
        let typical = entries[(n - 1) / 2];
        // The entries' spread around the typical one (robust: a late node's ranks do
        // not widen it).
        let mut deviations: Vec<f64> = entries.iter().map(|e| (e - typical).abs()).collect();
        let spread = 1.4826 * median(&mut deviations);
        let bar = (cfg.min_late_s * 1e9).max(cfg.spread_factor * spread);
        let mut lates: Vec<(u32, f64, bool)> = arrived
            .iter()
            .filter(|a| a.1 - typical >= bar)
            .map(|a| (a.0, a.1, true))
            .collect();
        if now - typical >= bar {
            lates.extend(pending.iter().map(|&r| (r, now, false)));
        }
        // Peers: the ranks that were on time.
        let on_time: Vec<u32> = arrived
            .iter()
            .filter(|a| a.1 - typical < bar)
            .map(|a| a.0)
            .collect();
        for (rank, entry, is_arrived) in lates {
            let before: Vec<f64> = arrived
                .iter()
                .filter(|a| a.1 < entry && on_time.contains(&a.0))
                .map(|a| entry - a.1)
                .collect();
            out.push(Late {
                rank,
                node: v.rank(rank).map(|r| r.node.clone()),
                phase,
                late_ns: entry - typical,
                arrived: is_arrived,
                waiting_ranks: before.len(),
                wait_rank_ns: before.iter().sum(),
                cause: cause(v, rank, phase, &on_time, now),
            });
        }
    }
    out
}

/// Where a rank's time went from the previous meeting phase (or its launch) to its
/// entry into `phase`: the part that differs most from its on-time peers'.
fn cause(v: &StartupView, rank: u32, phase: StartupPhase, peers: &[u32], now: f64) -> Cause {
    let Some(me) = v.rank(rank) else {
        return Cause::NotTraced;
    };
    let mine = Leg::of(&me.record, phase, now);
    let legs: Vec<Leg> = peers
        .iter()
        .filter_map(|&p| v.rank(p))
        .map(|p| Leg::of(&p.record, phase, now))
        .collect();
    if legs.is_empty() {
        return Cause::Unexplained;
    }
    let peer_median = |f: &dyn Fn(&Leg) -> Option<f64>| {
        let mut xs: Vec<f64> = legs.iter().filter_map(f).collect();
        (!xs.is_empty()).then(|| median(&mut xs))
    };
    let mut best: (f64, Cause) = (0.0, Cause::Unexplained);
    let mut consider = |excess: f64, c: Cause| {
        if excess > best.0 {
            best = (excess, c);
        }
    };
    if let (Some(own), Some(peers)) = (mine.process_start, peer_median(&|l| l.process_start)) {
        consider(own - peers, Cause::StartedLate(own - peers));
    }
    for (label, &(phase, own)) in &mine.phases {
        let peers = peer_median(&|l| Some(l.phases.get(label).map_or(0.0, |p| p.1))).unwrap_or(0.0);
        consider(
            own - peers,
            Cause::Phase {
                label: label.clone(),
                phase,
                own_ns: own,
                peers_ns: peers,
                ongoing: mine.open.as_deref() == Some(label.as_str()),
            },
        );
    }
    let peers_untraced = peer_median(&|l| Some(l.untraced)).unwrap_or(0.0);
    consider(
        mine.untraced - peers_untraced,
        Cause::Untraced {
            after: mine.last_before_gap.clone(),
            own_ns: mine.untraced,
            peers_ns: peers_untraced,
        },
    );
    let late = mine.entry - peer_median(&|l| Some(l.entry)).unwrap_or(mine.entry);
    // A cause must account for a good part of the lateness (clocks of different nodes
    // agree to milliseconds, not better).
    if best.0 < 0.5 * late {
        return Cause::Unexplained;
    }
    best.1
}

/// A rank's way to a meeting phase: from the end of the previous one it recorded (or its
/// launch) to its entry (or now).
struct Leg {
    /// Its process's start, when the leg starts at launch.
    process_start: Option<f64>,
    entry: f64,
    /// Time per phase label in the leg (clipped to it), with the phase.
    phases: BTreeMap<String, (StartupPhase, f64)>,
    /// The phase still open at the leg's end, if any.
    open: Option<String>,
    /// Time in the leg that no phase covers.
    untraced: f64,
    /// The phase that ended last before the longest uncovered stretch.
    last_before_gap: Option<String>,
}

impl Leg {
    fn of(r: &StartupRecord, phase: StartupPhase, now: f64) -> Leg {
        let entry = r.phase(phase).map_or(now, |p| p.start_unix_ns as f64);
        let prev = r
            .phases
            .iter()
            .filter(|p| p.phase.synchronizes() && p.phase != phase)
            .filter_map(|p| p.end_unix_ns.map(|e| (e as f64, p)))
            .filter(|&(e, _)| e <= entry)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let prev_sync = prev.map(|(e, _)| e);
        let launch = r
            .phase(StartupPhase::Launch)
            .map(|p| p.start_unix_ns as f64);
        let from = prev_sync
            .or(launch)
            .or_else(|| r.phases.first().map(|p| p.start_unix_ns as f64))
            .unwrap_or(entry);
        let mut leg = Leg {
            process_start: if prev_sync.is_none() { launch } else { None },
            entry,
            phases: BTreeMap::new(),
            open: None,
            untraced: 0.0,
            last_before_gap: None,
        };
        let mut covered_to = from;
        let mut longest_gap = 0.0;
        let mut last_label: Option<String> = prev.map(|(_, p)| p.label().to_string());
        let mut inside: Vec<&StartupPhaseRecord> = r
            .phases
            .iter()
            .filter(|p| !p.phase.synchronizes())
            .filter(|p| (p.start_unix_ns as f64) < entry && end_or(p, now) > from)
            .collect();
        inside.sort_by_key(|p| p.start_unix_ns);
        for p in inside {
            let start = (p.start_unix_ns as f64).max(from);
            let end = end_or(p, now).min(entry);
            let e = leg
                .phases
                .entry(p.label().to_string())
                .or_insert((p.phase, 0.0));
            e.1 += (end - start).max(0.0);
            if p.end_unix_ns.is_none() {
                leg.open = Some(p.label().to_string());
            }
            if start > covered_to {
                let gap = start - covered_to;
                leg.untraced += gap;
                if gap > longest_gap {
                    longest_gap = gap;
                    leg.last_before_gap = last_label.clone();
                }
            }
            covered_to = covered_to.max(end);
            last_label = Some(p.label().to_string());
        }
        if entry > covered_to {
            let gap = entry - covered_to;
            leg.untraced += gap;
            if gap > longest_gap {
                leg.last_before_gap = last_label;
            }
        }
        leg
    }
}

/// One phase (by label) over the job's ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseTotals {
    pub label: String,
    pub phase: Option<StartupPhase>,
    /// Median over ranks of a rank's time in it (0 for ranks without it), ns.
    pub median_ns: f64,
    /// The longest, and whose.
    pub max_ns: f64,
    pub max_rank: u32,
}

/// Where start-up time went, over ranks whose start-up is complete.
#[derive(Clone, Debug, PartialEq)]
pub struct Breakdown {
    pub ranks: usize,
    /// Launch to the end of the first step, median and longest (and whose), ns.
    pub total_median_ns: f64,
    pub total_max_ns: f64,
    pub total_max_rank: u32,
    /// Phases in their usual order, then the untraced time (`phase: None`).
    pub phases: Vec<PhaseTotals>,
}

/// One phase label's (phase, per-rank time, earliest start after its rank's first phase:
/// the phases' usual order).
type LabelTimes = (StartupPhase, Vec<(u32, f64)>, f64);

/// The start-up breakdown of the ranks whose start-up is complete; `None` without any.
pub fn breakdown(v: &StartupView) -> Option<Breakdown> {
    let done: Vec<&RankStartup> = v.ranks.iter().filter(|r| r.record.complete).collect();
    if done.is_empty() {
        return None;
    }
    let mut totals = Vec::new();
    let mut per_label: BTreeMap<String, LabelTimes> = BTreeMap::new();
    let mut untraced = Vec::new();
    for r in &done {
        let end = r.record.end_unix_ns().unwrap_or(0) as f64;
        let start = r
            .record
            .phases
            .iter()
            .map(|p| p.start_unix_ns as f64)
            .fold(f64::INFINITY, f64::min);
        totals.push((r.rank, (end - start).max(0.0)));
        let mut covered = 0.0;
        let mut covered_to = start;
        let mut phases: Vec<&StartupPhaseRecord> = r.record.phases.iter().collect();
        phases.sort_by_key(|p| p.start_unix_ns);
        for p in phases {
            let (s, e) = (p.start_unix_ns as f64, end_or(p, end).min(end));
            let entry = per_label.entry(p.label().to_string()).or_insert((
                p.phase,
                Vec::new(),
                f64::INFINITY,
            ));
            entry.2 = entry.2.min(s - start);
            match entry.1.last_mut() {
                Some((rank, t)) if *rank == r.rank => *t += (e - s).max(0.0),
                _ => entry.1.push((r.rank, (e - s).max(0.0))),
            }
            if e > covered_to {
                covered += e - s.max(covered_to);
                covered_to = e;
            }
        }
        untraced.push((r.rank, ((end - start) - covered).max(0.0)));
    }
    let summarize = |label: String, phase: Option<StartupPhase>, xs: &[(u32, f64)]| {
        let mut all: Vec<f64> = done
            .iter()
            .map(|r| xs.iter().find(|x| x.0 == r.rank).map_or(0.0, |x| x.1))
            .collect();
        let (max_rank, max_ns) = xs
            .iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .unwrap_or((0, 0.0));
        PhaseTotals {
            label,
            phase,
            median_ns: median(&mut all),
            max_ns,
            max_rank,
        }
    };
    let mut ordered: Vec<(String, LabelTimes)> = per_label.into_iter().collect();
    ordered.sort_by(|a, b| a.1 .2.total_cmp(&b.1 .2));
    let mut phases: Vec<PhaseTotals> = ordered
        .into_iter()
        .map(|(label, (phase, xs, _))| summarize(label, Some(phase), &xs))
        .collect();
    phases.push(summarize("untraced".into(), None, &untraced));
    let total = summarize("total".into(), None, &totals);
    Some(Breakdown {
        ranks: done.len(),
        total_median_ns: total.median_ns,
        total_max_ns: total.max_ns,
        total_max_rank: total.max_rank,
        phases,
    })
}
