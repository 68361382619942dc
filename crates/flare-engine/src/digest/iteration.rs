//! The digest of one iteration ([`IterationDigest`]) and what it holds besides the
//! per-rank records: the collective instances, those still in flight, and what the graph
//! search blamed the iteration's delays on ([`Blame`], kept here so that the digest does
//! not depend on the search that fills it in).

use super::{NameStat, RankFigures, RankIteration, SelfTime};
use flare_model::OpKind;
use serde::{Deserialize, Serialize};

/// One collective or P2P exchange: the same (communicator, sequence number) on every member.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub comm: u32,
    pub seq: u32,
    pub iteration: u32,
    pub kind: OpKind,
    pub name: u32,
    pub bytes: u64,
    /// Members the communicator has.
    pub expected: u32,
    /// Members the communicator has that the trace holds data for.
    pub expected_traced: u32,
    /// Members that recorded the op.
    pub present: u32,
    pub in_flight: u32,
    pub last_arrival: i64,
    pub second_last_arrival: i64,
    /// Rank id of the last member to arrive.
    pub last_rank: u32,
    /// Median end over members, when every present member finished.
    pub end: Option<i64>,
}

impl Instance {
    /// Time from the last arrival to the end: the transfer itself, without waiting.
    pub fn transfer_ns(&self) -> Option<i64> {
        self.end.map(|e| (e - self.last_arrival).max(0))
    }

    /// Every member the trace could hold recorded it.
    pub fn complete(&self) -> bool {
        self.present == self.expected_traced
    }

    /// The transfer time of an instance it can be compared by: complete, with 2 or
    /// more members, ended.
    pub fn compared_transfer(&self) -> Option<i64> {
        if self.complete() && self.present >= 2 {
            self.transfer_ns()
        } else {
            None
        }
    }
}

/// An instance some members are still in at the end of the iteration's data.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlight {
    pub instance: Instance,
    /// Rank ids that arrived.
    pub arrived: Vec<u32>,
}

/// Everything the detectors need from one iteration.
#[derive(Clone, Debug, PartialEq)]
pub struct IterationDigest {
    pub iteration: u32,
    /// Median over ranks of their own iteration span; `None` when some rank never
    /// finished it or no rank recorded a span.
    pub duration_ns: Option<f64>,
    /// Per rank index of the job context.
    pub ranks: Vec<RankIteration>,
    /// Compute ops by name, grouped by rank index (ascending).
    pub compute_names: Vec<NameStat>,
    /// Instances some members are still in (the others are in [`Members::instances`](super::Members::instances)
    /// while the iteration is analysed, and not kept).
    pub in_flight: Vec<InFlight>,
    /// Instances in the iteration, and those every member the trace holds recorded and
    /// completed (the ones that can be compared and searched).
    pub n_instances: u32,
    pub complete_instances: u32,
    /// Per communicator with ops in the iteration: (communicator, lowest sequence number,
    /// highest). Overlapping ranges in two iterations mean an instance was split between
    /// them (members tagged with different iterations).
    pub seq_ranges: Vec<(u32, u32, u32)>,
    /// Median and robust deviation (scaled MAD) over ranks of their relative self-time
    /// excess (NaN when no rank has one).
    pub excess_median: f64,
    pub excess_mad: f64,
    /// Per (peer group, compute op name): the median over the group's ranks of the op's
    /// mean duration, ns; sorted. `name == u32::MAX` holds the median issue latency,
    /// `u32::MAX - 1` the median launch interval.
    pub peer_medians: Vec<(u32, u32, f64)>,
    /// Per communicator with complete transfers comparable to others' (the same op kind,
    /// bytes and group size on 3 or more communicators in the iteration): the median of
    /// its transfer times over the class median, by communicator id.
    pub comm_transfer: Vec<(u32, f32)>,
    /// Per class of comparable instances (op kind, bytes, group size, pods spanned): the
    /// median transfer time and the instance count, to weigh what crossing pods costs.
    pub span_transfer: Vec<SpanTransfer>,
    /// What the graph search blamed this iteration's waiting and slow transfers on.
    pub blame: Vec<Blame>,
    /// Op groups judged abnormal, and those the classifier scored.
    pub abnormal_groups: u32,
    pub scored_groups: u32,
    /// The most abnormal groups: (rank index, communicator, name, mean over its class).
    pub abnormal_examples: Vec<(u32, u32, u32, f32)>,
    /// Drift factor of iteration time the classifier's thresholds were shifted by.
    pub drift: f32,
    /// Ops read.
    pub ops: u64,
    /// Ranks with a sync op that never ended (stuck), so that a window without any is
    /// told apart without reading every rank again.
    pub stuck_ranks: u32,
    /// Each data-parallel replica's compute load and the heaviest replica (see
    /// [`crate::detectors::imbalance::ReplicaLoads`]); empty without the layout.
    pub replica_load: Vec<f64>,
    /// Per rank index: its figures for the window's metrics.
    pub rank_figures: Vec<RankFigures>,
    /// Per rank index: its self time.
    pub self_time: Vec<SelfTime>,
    pub heaviest_replica: Option<(u32, f64)>,
}

/// (op kind, bytes, group size, pods spanned, median transfer ns, instances).
pub type SpanTransfer = (OpKind, u64, u32, u32, f32, u32);

/// Whether some communicator's sequence numbers overlap between two digests: an
/// instance whose members were tagged with different iterations.
pub fn split_instances(digests: &[&IterationDigest]) -> bool {
    let mut seen: std::collections::HashMap<u32, Vec<(u32, u32)>> = Default::default();
    for d in digests {
        for &(c, lo, hi) in &d.seq_ranges {
            let v = seen.entry(c).or_default();
            if v.iter().any(|&(a, b)| lo <= b && a <= hi) {
                return true;
            }
            v.push((lo, hi));
        }
    }
    false
}

impl IterationDigest {
    /// A digest with nothing in it but the iteration's duration (for tests and for
    /// iterations a source reports only as a duration).
    pub fn empty(iteration: u32, duration_ns: Option<f64>, n_ranks: usize) -> Self {
        IterationDigest {
            iteration,
            duration_ns,
            ranks: vec![RankIteration::default(); n_ranks],
            compute_names: Vec::new(),
            in_flight: Vec::new(),
            n_instances: 0,
            complete_instances: 0,
            excess_median: f64::NAN,
            excess_mad: f64::NAN,
            peer_medians: Vec::new(),
            seq_ranges: Vec::new(),
            comm_transfer: Vec::new(),
            span_transfer: Vec::new(),
            blame: Vec::new(),
            abnormal_groups: 0,
            scored_groups: 0,
            abnormal_examples: Vec::new(),
            drift: 1.0,
            ops: 0,
            stuck_ranks: 0,
            replica_load: Vec::new(),
            heaviest_replica: None,
            rank_figures: vec![RankFigures::of(&RankIteration::default(), 1.0); n_ranks],
            self_time: vec![SelfTime::default(); n_ranks],
        }
    }

    /// The compute name statistics of one rank.
    pub fn names_of(&self, rank_index: usize) -> &[NameStat] {
        let ri = rank_index as u32;
        let lo = self.compute_names.partition_point(|s| s.rank_index < ri);
        let hi = self.compute_names.partition_point(|s| s.rank_index <= ri);
        &self.compute_names[lo..hi]
    }
}

/// What an instance's delay is blamed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Root {
    /// A rank's own work (rank index).
    Rank(u32),
    /// A communicator's path (transfers slow for every member).
    Comm(u32),
}

/// The time an iteration's waiting and slow transfers are blamed on one root.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Blame {
    pub root: Root,
    /// Waiting (or excess transfer) caused, summed over the members that suffered it, ns.
    pub ns: f64,
    /// Instances whose delay led to it.
    pub instances: u32,
}
