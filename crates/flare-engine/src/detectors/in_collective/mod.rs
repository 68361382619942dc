//! Inside NCCL's collectives (live windows from jobs that load Flare's NCCL profiler
//! plugin): where the transfers between ranks spent their time, per communicator, peer and
//! channel. When every member arrives on time, arrival times say nothing; the transfers
//! still tell a slow link (one path between two ranks slow, the others through the same
//! ranks normal), a slow NIC (every path into and out of one rank slow) and a rank whose
//! own kernel is slow inside the collective (NCCL's proxy waiting for that rank's GPU while
//! its peers wait for it). For transfers that stopped, which rank's progress stopped, on
//! which channel and for which peer.
//!
//! NCCL's proxy moves each chunk of a transfer through states (see
//! `flare_model::LinkStats`): a sender waits for its own GPU to fill the chunk, for the
//! receiver's free slot, then the network; a receiver waits for the chunk to arrive, then
//! for its own GPU to take it. The plugin records them with proxy steps on
//! (`FLARE_NCCL_EVENT_MASK=default,proxy_step`); with the default mask only whole
//! transfers are timed, which finds slow paths but not whose GPU was late.

mod paths;
mod stalled;
#[cfg(test)]
mod tests;

use crate::live::{LiveRank, LiveWindow};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{Component, Culprit, DetectorId, LinkStats};
use std::collections::BTreeMap;

/// How far above its baseline a path or a rank must be to be named.
const RATIO: f64 = 3.0;
/// And the time that costs in the window, at least (ns).
const MIN_EXCESS_NS: f64 = 5e6;

pub struct InCollectiveDetector;

impl Detector for InCollectiveDetector {
    fn id(&self) -> DetectorId {
        DetectorId::InCollective
    }
    fn localizes(&self) -> bool {
        true
    }
    fn summary(&self) -> &'static str {
        "inside NCCL's collectives: a slow link, a slow NIC, a rank whose kernel is slow, where a stuck collective stopped"
    }
    fn needs(&self) -> &'static str {
        "live capture with Flare's NCCL profiler plugin (proxy ops; proxy steps for whose GPU waited)"
    }
    fn detect(&self, a: &Analysis, _cfg: &EngineConfig) -> Outcome {
        let Some(w) = a.live else {
            // Trace files carry no NCCL proxy progress.
            return Outcome::NotApplicable;
        };
        let comms = Comms::of(w);
        if comms.by_group.is_empty() {
            return Outcome::NotEnoughData(
                "no progress inside NCCL's collectives: load Flare's NCCL profiler plugin (NCCL_PROFILER_PLUGIN) to see it".into(),
            );
        }
        let mut findings = stalled::findings(a, &comms);
        findings.extend(paths::findings(a, &comms));
        Outcome::Findings(findings)
    }
}

/// One rank's transfers with one peer in one direction, with the rank's job-wide id.
#[derive(Clone, Copy)]
pub(super) struct Side<'a> {
    pub rank: u32,
    pub link: &'a LinkStats,
}

/// The window's NCCL progress, per communicator.
#[derive(Default)]
pub(super) struct Comms<'a> {
    pub by_group: BTreeMap<Option<&'a str>, Comm<'a>>,
}

/// One communicator: its members' ranks in the job, and every rank's transfers.
#[derive(Default)]
pub(super) struct Comm<'a> {
    /// Rank in the communicator -> rank in the job, as the members reported.
    pub members: BTreeMap<u32, u32>,
    pub sides: Vec<Side<'a>>,
    /// (job rank, the stalled transfer).
    pub stalled: Vec<(u32, &'a flare_model::StalledLink)>,
    /// Per job rank: kernel channels, their compute-phase time (v7).
    pub compute: BTreeMap<u32, (u64, u64)>,
}

impl<'a> Comms<'a> {
    pub fn of(w: &'a LiveWindow) -> Comms<'a> {
        let mut c = Comms::default();
        for r in w.with_data() {
            c.add(r);
        }
        c
    }

    fn add(&mut self, r: &'a LiveRank) {
        let Some(p) = &r.nccl else { return };
        for m in &p.comms {
            let comm = self.by_group.entry(m.group.as_deref()).or_default();
            comm.members.insert(m.rank, r.rank);
        }
        for l in &p.links {
            let comm = self.by_group.entry(l.group.as_deref()).or_default();
            if l.self_rank != u32::MAX {
                comm.members.insert(l.self_rank, r.rank);
            }
            comm.sides.push(Side {
                rank: r.rank,
                link: l,
            });
        }
        for s in &p.stalled {
            let comm = self.by_group.entry(s.group.as_deref()).or_default();
            if s.self_rank != u32::MAX {
                comm.members.insert(s.self_rank, r.rank);
            }
            comm.stalled.push((r.rank, s));
        }
        for k in &p.kernels {
            if k.compute_ns > 0 {
                let comm = self.by_group.entry(k.group.as_deref()).or_default();
                let e = comm.compute.entry(r.rank).or_default();
                e.0 += k.channels;
                e.1 += k.compute_ns;
            }
        }
    }
}

impl Comm<'_> {
    /// A member's job rank, if it reported.
    pub fn job_rank(&self, comm_rank: u32) -> Option<u32> {
        self.members.get(&comm_rank).copied()
    }

    /// `rank R` (its rank in the job), or `member M of the communicator` when no summary
    /// said which rank it is.
    pub fn who(&self, member: u32) -> String {
        self.job_rank(member).map_or_else(
            || format!("member {member} of the communicator"),
            |r| format!("rank {r}"),
        )
    }

    /// A culprit for a member: placed at its rank in the job when known.
    pub fn culprit(&self, a: &Analysis, component: Component, member: u32) -> Culprit {
        match self.job_rank(member) {
            Some(r) => a.ctx.rank_culprit(component, r),
            None => Culprit::new(component),
        }
    }
}

/// How a communicator is named in text.
pub(super) fn comm_name(group: Option<&str>) -> String {
    group.map_or_else(
        || "an unnamed communicator".into(),
        |g| format!("communicator {g}"),
    )
}
