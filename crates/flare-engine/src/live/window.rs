//! One window of a live job as the engine reads it: the node agents' summaries merged
//! into one record per rank ([`LiveWindow`]), kept by the server for the next windows'
//! analyses (a few kilobytes per rank, however many events the window held).

use crate::digest::{host_slot, HOST_KINDS};
use flare_model::{HangRecord, OpKind, ParallelConfig, PeerStacks, WindowSummary};
use std::collections::{BTreeMap, BTreeSet};

/// One window of one job: every rank's totals, the watchdog's hang records, and what a
/// person should know about the data itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveWindow {
    pub window: u64,
    pub world_size: u32,
    /// One record per rank, ascending (a rank two summaries report keeps the longer-observed
    /// record).
    pub ranks: Vec<LiveRank>,
    /// Hang records with the host that sent them.
    pub hangs: Vec<(HangRecord, String)>,
    /// Stacks of ranks not stuck while peers were, with the host that sent them.
    pub peer_stacks: Vec<(PeerStacks, String)>,
    /// Duplicates and dropped events.
    pub notes: Vec<String>,
    /// The window's end (Unix ns; 0 when no summary said).
    pub end_unix_ns: u64,
    /// The job's parallel layout, as the first summary stating one that fits the job's
    /// world says it.
    pub parallel: Option<ParallelConfig>,
}

/// One rank's totals over a window, ns unless said otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveRank {
    pub rank: u32,
    pub local_rank: u32,
    pub pid: u32,
    /// The host that reported it.
    pub node: String,
    /// Iterations that ended in the window, and their mean duration (NaN without any).
    pub iterations: u32,
    pub iteration_ns: f64,
    /// Its longest and its median iteration in the window (NaN without any).
    pub longest_iteration_ns: f64,
    pub median_iteration_ns: f64,
    pub observed_ns: f64,
    /// The part of the window inside its iterations, and its time in collectives there
    /// (NaN when the agent did not report them).
    pub stepping_ns: f64,
    pub stepping_sync_ns: f64,
    /// Time with a span open; 0 when the tracer did not report it.
    pub busy_ns: f64,
    /// Time in collectives and P2P (the sum of their durations).
    pub sync_ns: f64,
    /// Time with one open (overlapping ones counted once); NaN when the agent did not
    /// report it.
    pub sync_busy_ns: f64,
    pub compute_ns: f64,
    pub compute_ops: u64,
    /// FLOPs of the compute ops that carry them, and those ops' time.
    pub flops: f64,
    pub flops_ns: f64,
    /// Bytes x bus factor of its collectives (from their bus bandwidth), and their time.
    pub bus_bytes: f64,
    pub bus_ns: f64,
    /// Host-phase time per [`HOST_KINDS`] slot.
    pub host_ns: [f64; 5],
    /// Host phases by name: (name, slot, time).
    pub host_ops: Vec<(String, u8, f64)>,
    /// Compute ops: (name, time, count).
    pub compute: Vec<(String, f64, u64)>,
    /// Median issue latency of its compute ops (count-weighted over op names' medians;
    /// NaN when no op carried one). Summaries hold no per-launch latencies, so the
    /// issue-latency distribution (immediate launches) stays unknown live.
    pub issue_p50_ns: f64,
    /// Communicators it used, as the tracer named them.
    pub groups: BTreeSet<String>,
    /// Events its tracer dropped (cumulative).
    pub dropped: u64,
    /// Whether its process uses a GPU (`None`: the agent could not tell).
    pub gpu: Option<bool>,
    /// CPU time its process used in the window; NaN when the agent did not report it.
    pub cpu_ns: f64,
    /// Time its main thread waited for a CPU in the window; NaN when not reported.
    pub runqueue_ns: f64,
    /// Progress inside NCCL's collectives, where Flare's NCCL plugin recorded it.
    pub nccl: Option<flare_model::NcclProgress>,
    /// Its start-up so far, while the agent sends it.
    pub startup: Option<flare_model::StartupRecord>,
}

impl LiveRank {
    /// A rank that reported nothing, on host "n0" (for tests).
    #[cfg(test)]
    pub(crate) fn blank(rank: u32) -> LiveRank {
        rank_totals(&flare_model::RankSummary::empty(rank, rank, 0), "n0")
    }

    pub fn host_total(&self) -> f64 {
        self.host_ns.iter().sum()
    }

    /// Whether it traced compute or host ops (else nothing says why it is slow).
    pub fn has_work_ops(&self) -> bool {
        self.compute_ops > 0 || !self.host_ops.is_empty()
    }

    /// Time in collectives and P2P: the union of their spans where the agent reported
    /// it (overlapping async spans count once), else the sum of their durations.
    pub fn in_sync_ns(&self) -> f64 {
        if self.sync_busy_ns.is_finite() {
            self.sync_busy_ns
        } else {
            self.sync_ns
        }
    }

    /// Its time outside collectives and P2P, what its peers compare, over
    /// [`LiveRank::own_span_ns`]. For a rank that stepped in the window: all of it inside
    /// its iterations, traced or not (a host stall outside any span, or work nothing
    /// traces, delays its peers as much as slow compute does; the batch engine's self
    /// time between collectives counts it too), but not its start-up before its first
    /// step or its shutdown after its last, which are not an iteration's work and differ
    /// between healthy ranks by whole seconds (from agents that do not report the
    /// stepping span, all its observed time). Otherwise (a window where the job starts
    /// or ends): busy time minus sync time; the sum of its work ops when the tracer did
    /// not report busy time.
    pub fn own_ns(&self) -> f64 {
        if self.stepped() {
            (self.stepping_ns - self.stepping_sync_ns).max(0.0)
        } else if self.iterations > 0 && self.observed_ns > 0.0 {
            (self.observed_ns - self.in_sync_ns()).max(0.0)
        } else if self.busy_ns > 0.0 {
            (self.busy_ns - self.in_sync_ns()).max(0.0)
        } else {
            self.compute_ns + self.host_total()
        }
    }

    /// The time [`LiveRank::own_ns`] is counted over: its stepping span where the agent
    /// reported one, else its observed time.
    pub fn own_span_ns(&self) -> f64 {
        if self.stepped() {
            self.stepping_ns
        } else {
            self.observed_ns
        }
    }

    /// Whether it stepped in the window and its agent reported the stepping span.
    pub fn stepped(&self) -> bool {
        self.iterations > 0 && self.stepping_ns > 0.0 && self.stepping_sync_ns.is_finite()
    }

    /// Its own time per iteration: its share of its stepping span times its mean
    /// iteration where the span holds one, else its own time over its iterations.
    pub fn own_per_iteration(&self) -> f64 {
        if self.stepped() && self.stepping_ns >= self.iteration_ns {
            self.own_ns() / self.stepping_ns * self.iteration_ns
        } else {
            self.own_ns() / self.iterations.max(1) as f64
        }
    }

    /// Compute op names it runs every iteration: ranks with the same set are peers (rare
    /// ones, a one-off kernel, must not split peers apart). One count short of the
    /// iterations is every iteration: an iteration that began in the window before ends
    /// in this one, while its ops were counted there.
    pub fn signature(&self) -> Vec<&str> {
        let per_iteration = (self.iterations as u64).saturating_sub(1).max(1);
        let mut s: Vec<&str> = self
            .compute
            .iter()
            .filter(|c| c.2 >= per_iteration)
            .map(|c| c.0.as_str())
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }
}

impl LiveWindow {
    /// Whether the job runs on CPUs alone: some rank's agent saw its process without a
    /// GPU and none saw one with a GPU (unknown ranks do not decide).
    pub fn cpu_only(&self) -> bool {
        self.ranks.iter().any(|r| r.gpu == Some(false))
            && !self.ranks.iter().any(|r| r.gpu == Some(true))
    }

    /// Merges the summaries every node sent for one window of one job.
    pub fn from_summaries(summaries: &[WindowSummary]) -> LiveWindow {
        let mut ranks: BTreeMap<u32, LiveRank> = BTreeMap::new();
        let mut duplicates = BTreeSet::new();
        let mut hangs = Vec::new();
        let mut peer_stacks = Vec::new();
        for s in summaries {
            for r in &s.ranks {
                let lr = rank_totals(r, &s.node);
                match ranks.get(&r.rank) {
                    Some(prev) => {
                        duplicates.insert(r.rank);
                        if prev.observed_ns < lr.observed_ns {
                            ranks.insert(r.rank, lr);
                        }
                    }
                    None => {
                        ranks.insert(r.rank, lr);
                    }
                }
            }
            hangs.extend(s.hangs.iter().map(|h| (h.clone(), s.node.clone())));
            peer_stacks.extend(s.peer_stacks.iter().map(|p| (p.clone(), s.node.clone())));
        }
        let mut notes = Vec::new();
        if !duplicates.is_empty() {
            let d: Vec<u32> = duplicates.into_iter().collect();
            notes.push(format!(
                "rank{} {} reported by more than one summary; the longest-observed record was used",
                super::plural(d.len()),
                super::rank_list(&d, 8)
            ));
        }
        let ranks: Vec<LiveRank> = ranks.into_values().collect();
        drop_note(&ranks, &mut notes);
        let world_size = summaries.iter().map(|s| s.world_size).max().unwrap_or(0);
        LiveWindow {
            window: summaries.first().map_or(0, |s| s.window),
            world_size,
            ranks,
            hangs,
            peer_stacks,
            notes,
            end_unix_ns: summaries.iter().map(|s| s.end_unix_ns).max().unwrap_or(0),
            parallel: summaries
                .iter()
                .filter_map(|s| s.parallel.as_ref())
                .find(|p| p.world_size() == world_size)
                .cloned(),
        }
    }

    /// The record of `rank`, if it reported in the window.
    pub fn rank(&self, rank: u32) -> Option<&LiveRank> {
        self.ranks
            .binary_search_by_key(&rank, |r| r.rank)
            .ok()
            .map(|i| &self.ranks[i])
    }

    /// Ranks observed in the window.
    pub fn with_data(&self) -> impl Iterator<Item = &LiveRank> {
        self.ranks.iter().filter(|r| r.observed_ns > 0.0)
    }

    /// The window's iteration time: the median of its ranks' median iterations (ranks
    /// without an iteration have none). What the iteration detector's series holds: a
    /// level, which one stalled iteration among dozens must not move (a one-second
    /// pause once took a window's mean from 31 to 52 ms, and two such windows read as
    /// a fail-slow onset); a lasting slowdown moves every iteration.
    pub fn typical_iteration_ns(&self) -> Option<f64> {
        let mut its: Vec<f64> = self
            .with_data()
            .map(|r| r.median_iteration_ns)
            .filter(|t| t.is_finite())
            .collect();
        (!its.is_empty()).then(|| crate::stats::median(&mut its))
    }
}

fn rank_totals(r: &flare_model::RankSummary, node: &str) -> LiveRank {
    let mut a = LiveRank {
        rank: r.rank,
        local_rank: r.local_rank,
        pid: r.pid,
        node: node.to_string(),
        iterations: r.iterations.len() as u32,
        iteration_ns: if r.iterations.is_empty() {
            f64::NAN
        } else {
            r.iterations
                .iter()
                .map(|i| i.duration_ns as f64)
                .sum::<f64>()
                / r.iterations.len() as f64
        },
        longest_iteration_ns: r
            .iterations
            .iter()
            .map(|i| i.duration_ns as f64)
            .fold(f64::NAN, f64::max),
        median_iteration_ns: crate::stats::median(
            &mut r
                .iterations
                .iter()
                .map(|i| i.duration_ns as f64)
                .collect::<Vec<_>>(),
        ),
        observed_ns: r.observed_ns as f64,
        stepping_ns: r.stepping.map_or(f64::NAN, |t| t.span_ns as f64),
        stepping_sync_ns: r.stepping.map_or(f64::NAN, |t| t.sync_ns as f64),
        busy_ns: r.busy_ns as f64,
        sync_ns: 0.0,
        compute_ns: 0.0,
        compute_ops: 0,
        flops: 0.0,
        flops_ns: 0.0,
        bus_bytes: 0.0,
        bus_ns: 0.0,
        host_ns: [0.0; 5],
        host_ops: Vec::new(),
        compute: Vec::new(),
        issue_p50_ns: f64::NAN,
        groups: BTreeSet::new(),
        dropped: r.dropped_total,
        gpu: r.gpu,
        sync_busy_ns: r.sync_busy_ns.map_or(f64::NAN, |v| v as f64),
        cpu_ns: r.cpu_ns.map_or(f64::NAN, |v| v as f64),
        runqueue_ns: r.runqueue_ns.map_or(f64::NAN, |v| v as f64),
        nccl: r.nccl.clone(),
        startup: r.startup.clone(),
    };
    let mut issue: Vec<(u64, u64)> = Vec::new();
    for o in &r.ops {
        let t = o.total_ns as f64;
        if let Some(g) = &o.group {
            a.groups.insert(g.clone());
        }
        if o.kind.is_sync() {
            a.sync_ns += t;
            if let (Some(gbps), true) = (o.bus_gbps, o.total_ns > 0) {
                // Bus bandwidth is bytes x bus factor over time: the bytes back.
                a.bus_bytes += gbps * t;
                a.bus_ns += t;
            }
        } else if o.kind == OpKind::Compute {
            a.compute_ns += t;
            a.compute_ops += o.count;
            a.compute.push((o.name.clone(), t, o.count));
            if o.flops > 0 {
                a.flops += o.flops as f64;
                a.flops_ns += t;
            }
            if let Some(p) = o.issue_p50_ns {
                issue.push((p, o.count));
            }
        } else if let Some(slot) = host_slot(o.kind) {
            a.host_ns[slot] += t;
            a.host_ops.push((o.name.clone(), slot as u8, t));
        }
    }
    if !issue.is_empty() {
        issue.sort_unstable();
        let total: u64 = issue.iter().map(|x| x.1).sum();
        let mut seen = 0;
        for (p, c) in issue {
            seen += c;
            if 2 * seen >= total {
                a.issue_p50_ns = p as f64;
                break;
            }
        }
    }
    debug_assert_eq!(HOST_KINDS.len(), a.host_ns.len());
    a
}

fn drop_note(ranks: &[LiveRank], notes: &mut Vec<String>) {
    let mut dropped: Vec<&LiveRank> = ranks.iter().filter(|a| a.dropped > 0).collect();
    if dropped.is_empty() {
        return;
    }
    dropped.sort_by_key(|a| (std::cmp::Reverse(a.dropped), a.rank));
    let top: Vec<String> = dropped
        .iter()
        .take(4)
        .map(|a| format!("rank {} on {}: {}", a.rank, a.node, a.dropped))
        .collect();
    notes.push(format!(
        "{} rank{} dropped trace events (ring full; cumulative counts: {}{}); their op statistics undercount",
        dropped.len(),
        super::plural(dropped.len()),
        top.join(", "),
        if dropped.len() > 4 { ", ..." } else { "" }
    ));
}
