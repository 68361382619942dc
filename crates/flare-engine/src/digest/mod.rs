//! One iteration, preprocessed once when it arrives.
//!
//! The engine never keeps raw ops: each iteration is reduced to an [`IterationDigest`]
//! (per-rank figures, the collective *instances* with their arrivals and transfer times,
//! and what the hang detector needs), so a window of 20 iterations of a 10,000-rank job
//! costs tens of megabytes instead of gigabytes, and a new iteration costs one pass over
//! its own ops. Offline diagnosis feeds a trace's iterations through the same code.
//!
//! Building a digest takes three passes, split over threads:
//! 1. per rank: its ops in order (self time before each sync op, compute, host phases,
//!    issue latency, busy time), producing one *member* record per sync op;
//! 2. grouping: members ordered by (communicator, sequence number) into instances, by
//!    counting sort over each communicator's sequence range (the members themselves stay
//!    in rank order; the order is an index, kept while the schedule repeats);
//! 3. per instance: arrivals, transfer time, and each member's self time against the
//!    other members' (the excess is delay the rank made itself).
//!
//! The modules, by what they do: `record` and `iteration` hold what a digest keeps;
//! `input` what a build reads; `members` the members and op groups; `slots` the slot
//! map (pass 1a); `scan` the per-rank pass (1b); `instances` the instance pass (2) over one
//! part of the slots, `instance_parts` its split into parts and their merge; `transfer` transfer classes and ratios; `peers` each rank against its peers; `build`
//! the passes in order.

mod build;
mod input;
mod instance_parts;
mod instances;
mod iteration;
mod members;
mod peers;
mod record;
mod scan;
mod slots;
#[cfg(test)]
mod tests;
mod transfer;

pub use build::{build, build_with, PhaseTimes};
pub use input::{iteration_ranges, Carry, RankSlice};
pub use iteration::{
    split_instances, Blame, InFlight, Instance, IterationDigest, Root, SpanTransfer,
};
pub use members::{Member, Members, OpGroup};
pub(crate) use peers::{host_excess, peer_medians, rank_figures};
pub use peers::{iteration_replica_loads, load_factor};
pub use record::{
    host_slot, issue_bin, issue_bin_floor, LastOp, NameStat, RankFigures, RankIteration, SelfTime,
    HOST_KINDS, ISSUE_BINS,
};
