//! Transfers that stopped progressing: which member the stalled ranks wait for, and why
//! that member does not move. A stalled receive waiting for the peer's data, or a send
//! waiting for the peer's free slot, waits for that peer; a transfer waiting for its own
//! GPU waits for its own kernel; one on the network waits for the path. The member others
//! wait for that waits for no peer itself is where progress stopped: its kernel (stuck
//! waiting for its GPU), the path (stuck on the network), or the rank itself (nothing in
//! flight: it never reached this collective, or its process is stuck elsewhere).

use super::{comm_name, Comm, Comms};
use crate::live::{plural, rank_list};
use crate::Analysis;
use flare_model::{
    Component, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, StalledLink, Unit,
};
use std::collections::{BTreeMap, BTreeSet};

/// What a stalled transfer waits for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Waits {
    /// The peer (its data or its free slot).
    Peer,
    /// Its own rank's GPU (kernel) or the flush to it.
    OwnGpu,
    /// The network path to the peer.
    Network,
}

fn waits(s: &StalledLink) -> Waits {
    match s.state.as_deref() {
        Some("send_gpu_wait" | "recv_gpu_wait" | "recv_flush") => Waits::OwnGpu,
        Some("send_network") => Waits::Network,
        // Waiting for the peer's data or slot; without steps, a transfer that does not
        // finish waits for the other end as far as this side can tell.
        _ => Waits::Peer,
    }
}

pub(super) fn findings(a: &Analysis, comms: &Comms) -> Vec<Finding> {
    comms
        .by_group
        .iter()
        .filter(|(_, c)| !c.stalled.is_empty())
        .filter_map(|(g, c)| stopped(a, *g, c))
        .collect()
}

/// The finding for one communicator's stalled transfers: where progress stopped.
fn stopped(a: &Analysis, group: Option<&str>, comm: &Comm) -> Option<Finding> {
    // Per member (rank in the communicator): what its stalled transfers wait for.
    let mut by_member: BTreeMap<u32, Vec<&StalledLink>> = BTreeMap::new();
    for (_, s) in &comm.stalled {
        by_member.entry(s.self_rank).or_default().push(s);
    }
    let waits_for_peer = |m: u32| {
        by_member
            .get(&m)
            .is_some_and(|v| v.iter().any(|s| waits(s) == Waits::Peer))
    };
    // Members waited for, with who waits and on which channel.
    let mut waited: BTreeMap<u32, Vec<&StalledLink>> = BTreeMap::new();
    for v in by_member.values() {
        for s in v.iter().filter(|s| waits(s) == Waits::Peer) {
            waited.entry(s.peer).or_default().push(s);
        }
    }
    // Where progress stopped: waited for, waiting for no peer itself; else (a cycle, or
    // only own-GPU and network stalls) the members with stalls of their own.
    let mut stopped: Vec<u32> = waited
        .keys()
        .copied()
        .filter(|&m| !waits_for_peer(m))
        .collect();
    if stopped.is_empty() {
        stopped = by_member
            .iter()
            .filter(|(_, v)| v.iter().any(|s| waits(s) != Waits::Peer))
            .map(|(m, _)| *m)
            .collect();
    }
    let longest = comm
        .stalled
        .iter()
        .map(|(_, s)| s.stalled_ns)
        .max()
        .unwrap_or(0) as f64
        / 1e9;
    let stuck_ranks: BTreeSet<u32> = comm.stalled.iter().map(|(r, _)| *r).collect();
    let stuck_ranks: Vec<u32> = stuck_ranks.into_iter().collect();
    let mut parts = Vec::new();
    let mut culprits = Vec::new();
    for &m in stopped.iter().take(4) {
        let name = comm.who(m);
        let waiting: Vec<&&StalledLink> = waited
            .get(&m)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let own: Vec<&StalledLink> = by_member.get(&m).cloned().unwrap_or_default();
        let channels: BTreeSet<u8> = waiting
            .iter()
            .map(|s| s.channel)
            .chain(own.iter().map(|s| s.channel))
            .collect();
        let channels: Vec<String> = channels.iter().map(|c| c.to_string()).collect();
        let waiters: BTreeSet<u32> = waiting
            .iter()
            .filter_map(|s| comm.job_rank(s.self_rank))
            .collect();
        let waiters: Vec<u32> = waiters.into_iter().collect();
        let (why, component) = if own.iter().any(|s| waits(s) == Waits::OwnGpu) {
            (
                "its own transfers wait for its GPU: its kernel stopped",
                Component::Gpu,
            )
        } else if own.iter().any(|s| waits(s) == Waits::Network) {
            ("its sends are stuck on the network", Component::Link)
        } else if own.is_empty() {
            ("it has no transfer in flight: it never reached this collective, or its process is stuck elsewhere", Component::Process)
        } else {
            ("its transfers stopped", Component::Process)
        };
        let who_waits = if waiters.is_empty() {
            String::new()
        } else {
            format!(
                "rank{} {} wait{} for it on channel{} {}; ",
                plural(waiters.len()),
                rank_list(&waiters, 8),
                if waiters.len() == 1 { "s" } else { "" },
                plural(channels.len()),
                channels.join(", ")
            )
        };
        parts.push(format!("{name}: {who_waits}{why}"));
        let mut c = comm.culprit(a, component, m);
        c.element = Some(format!(
            "{}, channel{} {}",
            comm_name(group),
            plural(channels.len()),
            channels.join(", ")
        ));
        culprits.push(c);
    }
    if culprits.is_empty() {
        return None;
    }
    Some(Finding {
        kind: FindingKind::Hang,
        severity: Severity::Critical,
        summary: format!(
            "progress inside {} stopped ({} transfer{} on rank{} {} made no progress for {longest:.0} s): {}",
            comm_name(group),
            comm.stalled.len(),
            plural(comm.stalled.len()),
            plural(stuck_ranks.len()),
            rank_list(&stuck_ranks, 8),
            parts.join("; ")
        ),
        confidence: if stopped.len() == 1 { 0.9 } else { 0.6 },
        culprits,
        evidence: vec![
            Evidence::new(
                EvidenceKey::StalledTransfers,
                comm.stalled.len() as f64,
                None,
                Unit::None,
                "NCCL proxy transfers in flight without progress".into(),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::StalledForS,
                longest,
                None,
                Unit::Seconds,
                "the longest time one of them made no progress".into(),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::RanksStuck,
                stuck_ranks.len() as f64,
                None,
                Unit::Ranks,
                "ranks with stalled transfers".into(),
            )
            .decisive(),
        ],
        action: "look at the named rank first: its stack (py-spy dump), its GPU (XID errors, a kernel that never finished) and, for a path, the NICs and switch between the two ranks; the ranks waiting for it are victims".into(),
        iterations: Vec::new(),
        detector: DetectorId::InCollective,
        corroborated_by: Vec::new(),
        failure: None,
    })
}
