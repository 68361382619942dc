//! Per-rank, per-window accumulators and their conversion into the wire format.

use crate::nccl::{KernelAcc, LinkAcc};
use crate::stats::{IntervalUnion, Samples};
use flare_model::{
    CommMembership, IterationSample, KernelStats, LinkStats, NcclProgress, OpKind, OpStats,
    RankSummary, StalledLink, StartupRecord, SteppingTime,
};
use flare_tracer::NameId;
use std::collections::HashMap;

/// Window geometry: index `i` covers `[i * len, (i + 1) * len)` Unix ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    pub len_ns: u64,
}

impl Windows {
    pub fn index(&self, unix_ns: u64) -> u64 {
        unix_ns / self.len_ns
    }

    pub fn start(&self, index: u64) -> u64 {
        index.saturating_mul(self.len_ns)
    }

    pub fn end(&self, index: u64) -> u64 {
        index.saturating_add(1).saturating_mul(self.len_ns)
    }
}

/// One op (name, kind, communicator) of one rank in one window.
#[derive(Clone, Debug)]
pub struct OpAcc {
    pub name: String,
    pub kind: OpKind,
    pub group: Option<String>,
    pub group_size: Option<u32>,
    durations: Samples,
    /// Bus bandwidth per span, bytes/s.
    bus_bw: Samples,
    issue: Samples,
    bytes: u64,
    flops: u64,
}

impl OpAcc {
    pub fn new(name: String, kind: OpKind, group: Option<String>, cap: usize) -> OpAcc {
        OpAcc {
            name,
            kind,
            group,
            group_size: None,
            durations: Samples::new(cap),
            bus_bw: Samples::new(cap),
            issue: Samples::new(cap),
            bytes: 0,
            flops: 0,
        }
    }

    /// Adds one completed span. `amount` is flops for compute and bytes for everything
    /// else (communication, data loading, checkpoints).
    pub fn record(&mut self, duration_ns: u64, amount: u64, group_size: u32, issue_ns: u32) {
        self.durations.record(duration_ns);
        if group_size > 0 {
            self.group_size = Some(group_size);
        }
        if self.kind == OpKind::Compute {
            self.flops = self.flops.saturating_add(amount);
        } else {
            self.bytes = self.bytes.saturating_add(amount);
            if self.kind.is_sync() && amount > 0 && duration_ns > 0 && group_size > 0 {
                // NCCL's bus bandwidth: algorithm bandwidth times the bus factor, so
                // collectives over different group sizes compare against the link speed.
                let bw =
                    amount as f64 * self.kind.bus_factor(group_size) * 1e9 / duration_ns as f64;
                self.bus_bw.record(bw.round() as u64);
            }
        }
        if issue_ns > 0 {
            self.issue.record(issue_ns as u64);
        }
    }

    pub fn merge(&mut self, other: &OpAcc) {
        self.durations.merge(&other.durations);
        self.bus_bw.merge(&other.bus_bw);
        self.issue.merge(&other.issue);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.flops = self.flops.saturating_add(other.flops);
        if other.group_size.is_some() {
            self.group_size = other.group_size;
        }
    }

    pub fn finish(mut self) -> OpStats {
        let total_ns = self.durations.sum();
        OpStats {
            count: self.durations.count(),
            total_ns,
            p50_ns: self.durations.quantile(0.5).unwrap_or(0),
            p99_ns: self.durations.quantile(0.99).unwrap_or(0),
            max_ns: self.durations.max(),
            bytes: self.bytes,
            flops: self.flops,
            bus_gbps: self.bus_bw.quantile(0.5).map(|b| b as f64 / 1e9),
            tflops: (self.flops > 0 && total_ns > 0)
                .then(|| self.flops as f64 / total_ns as f64 / 1e3),
            issue_p50_ns: self.issue.quantile(0.5),
            issue_p99_ns: self.issue.quantile(0.99),
            name: self.name,
            kind: self.kind,
            group: self.group,
            group_size: self.group_size,
        }
    }
}

/// Ops are keyed by the file's name ids while accumulating (no string hashing per span).
pub type OpKey = (NameId, OpKind, NameId);

/// FxHash (as in rustc) for the per-span op lookup: keys are small integers from files
/// on this host, so SipHash's flooding resistance buys nothing and costs ~10% of a drain.
#[derive(Clone, Copy, Default)]
pub struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        self.add(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FxBuild = std::hash::BuildHasherDefault<FxHasher>;

/// What one process (rank) did in one window.
#[derive(Debug, Default)]
pub struct RankWindow {
    pub ops: HashMap<OpKey, OpAcc, FxBuild>,
    pub iterations: Vec<IterationSample>,
    pub busy: IntervalUnion,
    /// Time with a collective or P2P span open (async ones included: DDP's buckets
    /// overlap each other and the backward pass, so their durations do not add up).
    pub sync: IntervalUnion,
    pub events: u64,
    /// CPU time of the process in the window, where `/proc` gave it.
    pub cpu_ns: Option<u64>,
    /// Time its main thread waited for a CPU in the window, where `/proc` gave it.
    pub runqueue_ns: Option<u64>,
    /// NCCL transfers per (communicator, peer, send) and kernels per communicator.
    pub links: HashMap<NcclLinkKey, LinkAcc>,
    pub kernels: HashMap<Option<String>, KernelAcc>,
    /// Its iterations that ended in the window, as one span with its sync time.
    pub stepping: Option<SteppingSpan>,
    /// The time since the process's last step before this window, with its sync time
    /// (set when the window closes, from [`RankWindow::carry_out`] of the one before).
    pub carried_in: Option<SteppingTime>,
}

/// The part of a window inside a rank's iterations that ended in it, `[from, to)` in
/// Unix ns, and the sync time covered before each end. The sync union folds what the
/// floor passed, so each end's reading is taken before the floor passes it.
#[derive(Debug, Clone, Copy)]
pub struct SteppingSpan {
    from: u64,
    to: u64,
    sync_at_from: Option<u64>,
    sync_at_to: Option<u64>,
    /// Its first iteration began before the window: the carried part of it (see
    /// [`RankWindow::stepping_time`]) belongs to the span.
    continues: bool,
}

impl RankWindow {
    /// Adds an iteration `[start, end)` that ended in this window, which starts at
    /// `window_start` (an iteration that began before it continues what was carried in).
    pub fn add_iteration(&mut self, sample: IterationSample, window_start: u64) {
        let from = sample.start_unix_ns.max(window_start);
        let to = sample.start_unix_ns + sample.duration_ns;
        let continues = sample.start_unix_ns < window_start;
        self.iterations.push(sample);
        let s = self.stepping.get_or_insert(SteppingSpan {
            from,
            to,
            sync_at_from: None,
            sync_at_to: None,
            continues,
        });
        if from < s.from {
            s.from = from;
            s.sync_at_from = None;
        }
        s.continues |= continues;
        if to > s.to {
            s.to = to;
            s.sync_at_to = None;
        }
    }

    /// Finalizes busy and sync time before `floor`, reading the stepping span's sync
    /// time first where the floor passes its ends.
    pub fn advance(&mut self, floor: u64) {
        if let Some(s) = &mut self.stepping {
            for (at, reading) in [(s.from, &mut s.sync_at_from), (s.to, &mut s.sync_at_to)] {
                if at < floor && reading.is_none() {
                    *reading = Some(self.sync.total_before(at));
                }
            }
        }
        self.busy.advance(floor);
        self.sync.advance(floor);
    }

    /// The stepping span's length and its sync time, with what was carried in where the
    /// span's first iteration began before the window: every iteration is counted whole
    /// in the window where it ends.
    pub fn stepping_time(&self) -> Option<SteppingTime> {
        let s = self.stepping?;
        let before = self.carried_in.filter(|_| s.continues).unwrap_or_default();
        Some(SteppingTime {
            span_ns: s.to.saturating_sub(s.from) + before.span_ns,
            sync_ns: self
                .sync_before(s.to, s.sync_at_to)
                .saturating_sub(self.sync_before(s.from, s.sync_at_from))
                + before.sync_ns,
        })
    }

    /// Sync time before `t`: the reading taken before the floor passed it, else now.
    fn sync_before(&self, t: u64, reading: Option<u64>) -> u64 {
        reading.unwrap_or_else(|| self.sync.total_before(t))
    }

    /// What the next window's first iteration carries from this one, observed over
    /// `[from, to)`: the time after the last step here, or, without a step here, what was
    /// carried in and all of this window. `None` before the process's first step
    /// (start-up is no iteration's).
    pub fn carry_out(&self, (from, to): (u64, u64)) -> Option<SteppingTime> {
        match self.stepping {
            Some(s) => Some(SteppingTime {
                span_ns: to.saturating_sub(s.to),
                sync_ns: self
                    .sync
                    .total()
                    .saturating_sub(self.sync_before(s.to, s.sync_at_to)),
            }),
            None => self.carried_in.map(|c| SteppingTime {
                span_ns: c.span_ns + to.saturating_sub(from),
                sync_ns: c.sync_ns + self.sync.total(),
            }),
        }
    }
}

/// A rank's NCCL transfers by communicator name, peer and direction (send: true).
pub type NcclLinkKey = (Option<String>, u32, bool);

impl RankWindow {
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.iterations.is_empty() && self.events == 0
    }
}

/// Adds `v` to a total that stays unknown (`None`) until something is added to it.
pub fn add_to(total: &mut Option<u64>, v: u64) {
    *total = Some(total.unwrap_or(0) + v);
}

/// A rank's window gathered from one or more processes (a restarted rank has two),
/// ready to become a [`RankSummary`].
pub struct RankParts {
    pub rank: u32,
    pub local_rank: u32,
    pub pid: u32,
    pub ops: Vec<OpAcc>,
    pub iterations: Vec<IterationSample>,
    pub busy_ns: u64,
    pub sync_busy_ns: u64,
    pub observed: IntervalUnion,
    pub events: u64,
    pub dropped_total: u64,
    /// Whether its processes use a GPU (`None`: unknown).
    pub gpu: Option<bool>,
    pub cpu_ns: Option<u64>,
    pub runqueue_ns: Option<u64>,
    pub links: HashMap<NcclLinkKey, LinkAcc>,
    pub kernels: HashMap<Option<String>, KernelAcc>,
    pub stalled: Vec<StalledLink>,
    pub comms: Vec<CommMembership>,
    pub startup: Option<StartupRecord>,
    /// Its processes' stepping spans, added up.
    pub stepping: Option<SteppingTime>,
}

impl RankParts {
    pub fn new(rank: u32, local_rank: u32, pid: u32) -> RankParts {
        RankParts {
            rank,
            local_rank,
            pid,
            ops: Vec::new(),
            iterations: Vec::new(),
            busy_ns: 0,
            sync_busy_ns: 0,
            observed: IntervalUnion::default(),
            events: 0,
            dropped_total: 0,
            gpu: None,
            cpu_ns: None,
            runqueue_ns: None,
            links: HashMap::new(),
            kernels: HashMap::new(),
            stalled: Vec::new(),
            comms: Vec::new(),
            startup: None,
            stepping: None,
        }
    }

    /// A process's start-up record; of a rank's several processes (a restart), the one
    /// that started last.
    pub fn add_startup(&mut self, r: StartupRecord) {
        let start = |r: &StartupRecord| r.phases.first().map(|p| p.start_unix_ns);
        if self
            .startup
            .as_ref()
            .is_none_or(|old| start(&r) >= start(old))
        {
            self.startup = Some(r);
        }
    }

    /// What a process's NCCL plugin state says at the window's end: its stalled transfers
    /// and its communicators.
    pub fn add_nccl_state(&mut self, stalled: Vec<StalledLink>, comms: Vec<CommMembership>) {
        self.stalled.extend(stalled);
        for c in comms {
            if !self.comms.contains(&c) {
                self.comms.push(c);
            }
        }
    }

    /// Adds one process's window. `observed` is the part of the window it was watched.
    pub fn absorb(
        &mut self,
        w: RankWindow,
        observed: (u64, u64),
        dropped_total: u64,
        pid: u32,
        gpu: Option<bool>,
    ) {
        // Any of its processes on a GPU puts the rank on one.
        self.gpu = match (self.gpu, gpu) {
            (Some(true), _) | (_, Some(true)) => Some(true),
            (Some(false), _) | (_, Some(false)) => Some(false),
            _ => None,
        };
        if let Some(c) = w.cpu_ns {
            add_to(&mut self.cpu_ns, c);
        }
        if let Some(c) = w.runqueue_ns {
            add_to(&mut self.runqueue_ns, c);
        }
        self.busy_ns += w.busy.total();
        self.sync_busy_ns += w.sync.total();
        if let Some(t) = w.stepping_time() {
            let s = self.stepping.get_or_insert_with(SteppingTime::default);
            s.span_ns += t.span_ns;
            s.sync_ns += t.sync_ns;
        }
        self.observed.add(observed.0, observed.1);
        self.events += w.events;
        self.dropped_total += dropped_total;
        self.iterations.extend(w.iterations);
        self.ops.extend(w.ops.into_values());
        for (k, l) in w.links {
            self.links.entry(k).or_default().merge(&l);
        }
        for (k, acc) in w.kernels {
            self.kernels.entry(k).or_default().merge(&acc);
        }
        // The latest process of a rank names it.
        self.pid = self.pid.max(pid);
    }

    pub fn finish(mut self) -> RankSummary {
        // Merge ops that several processes (or several name ids) share.
        let mut merged: HashMap<(String, OpKind, Option<String>), OpAcc> = HashMap::new();
        for op in self.ops {
            let key = (op.name.clone(), op.kind, op.group.clone());
            match merged.get_mut(&key) {
                Some(m) => m.merge(&op),
                None => {
                    merged.insert(key, op);
                }
            }
        }
        let mut ops: Vec<OpStats> = merged.into_values().map(OpAcc::finish).collect();
        // Heaviest first, then by name so the order is stable across runs.
        ops.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.kind.cmp(&b.kind))
                .then_with(|| a.group.cmp(&b.group))
        });
        self.iterations.sort_by_key(|i| (i.start_unix_ns, i.step));
        let observed_ns = self.observed.total();
        let nccl = nccl_progress(self.links, self.kernels, self.stalled, self.comms);
        RankSummary {
            rank: self.rank,
            local_rank: self.local_rank,
            pid: self.pid,
            iterations: self.iterations,
            ops,
            busy_ns: self.busy_ns.min(observed_ns),
            sync_busy_ns: Some(self.sync_busy_ns.min(observed_ns)),
            observed_ns,
            events: self.events,
            dropped_total: self.dropped_total,
            gpu: self.gpu,
            cpu_ns: self.cpu_ns,
            runqueue_ns: self.runqueue_ns,
            nccl,
            startup: self.startup,
            stepping: self.stepping,
        }
    }
}

/// The rank's NCCL progress in the summary's order (communicator, peer, direction), or
/// none when the plugin recorded nothing.
fn nccl_progress(
    links: HashMap<NcclLinkKey, LinkAcc>,
    kernels: HashMap<Option<String>, KernelAcc>,
    stalled: Vec<StalledLink>,
    comms: Vec<CommMembership>,
) -> Option<NcclProgress> {
    if links.is_empty() && kernels.is_empty() && stalled.is_empty() && comms.is_empty() {
        return None;
    }
    let mut links: Vec<LinkStats> = links
        .into_iter()
        .map(|((group, peer, send), acc)| acc.finish(group, peer, send))
        .collect();
    links.sort_by(|a, b| (&a.group, a.peer, a.send).cmp(&(&b.group, b.peer, b.send)));
    let mut kernels: Vec<KernelStats> = kernels
        .into_iter()
        .map(|(group, acc)| acc.finish(group))
        .collect();
    kernels.sort_by(|a, b| a.group.cmp(&b.group));
    Some(NcclProgress {
        links,
        kernels,
        stalled,
        comms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_stats_carry_bus_bandwidth_and_tflops() {
        let mut ar = OpAcc::new("ar".into(), OpKind::AllReduce, Some("dp".into()), 16);
        // 1 GB over 8 ranks in 10 ms: algbw 100 GB/s, busbw 175 GB/s; in 20 ms, 87.5.
        ar.record(10_000_000, 1_000_000_000, 8, 5_000);
        ar.record(20_000_000, 1_000_000_000, 8, 0);
        let s = ar.finish();
        assert_eq!(
            (s.count, s.total_ns, s.bytes),
            (2, 30_000_000, 2_000_000_000)
        );
        // Nearest rank: the median of two is the lower one.
        assert_eq!(s.p50_ns, 10_000_000);
        assert_eq!(s.bus_gbps, Some(87.5));
        assert_eq!(s.issue_p50_ns, Some(5_000));
        assert_eq!(s.tflops, None);
        let mut mm = OpAcc::new("gemm".into(), OpKind::Compute, None, 16);
        mm.record(1_000_000, 500_000_000_000, 0, 0);
        let s = mm.finish();
        assert_eq!(s.tflops, Some(500.0));
        assert_eq!((s.bytes, s.bus_gbps), (0, None));
    }

    #[test]
    fn windows_are_aligned_to_unix_time() {
        let w = Windows {
            len_ns: 10_000_000_000,
        };
        assert_eq!(w.index(25_000_000_000), 2);
        assert_eq!((w.start(2), w.end(2)), (20_000_000_000, 30_000_000_000));
    }
}
