//! Slow paths and slow kernels, from the transfers that completed in the window.
//!
//! A path is one direction between two members of a communicator; its cost is the time
//! its transfers took per KiB on the sender (the time on the network when proxy steps were
//! recorded, the whole transfer otherwise). A path is slow against the paths that share
//! no member with it (they cannot be slowed by the same NIC), or, where every path shares
//! one (two or three members), against the faster of the others. Every path into and out
//! of one member slow, with paths elsewhere normal, is that member's NIC; otherwise each
//! slow path is a link. A member whose proxy waited far longer than its peers' for its own
//! GPU, without waiting longer for their data, has a kernel that is slow inside the
//! collective.

use super::{comm_name, Comm, Comms, MIN_EXCESS_NS, RATIO};
use crate::stats::median;
use crate::Analysis;
use flare_model::{
    Component, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, Severity, Unit,
};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn findings(a: &Analysis, comms: &Comms) -> Vec<Finding> {
    let mut out = Vec::new();
    for (group, comm) in &comms.by_group {
        out.extend(slow_paths(a, *group, comm));
        out.extend(slow_kernels(a, *group, comm));
    }
    out
}

/// One direction between two members (ranks in the communicator), as its sender saw it.
struct Path {
    src: u32,
    dst: u32,
    /// ns per KiB.
    cost: f64,
    kib: f64,
    channel: u8,
    /// Whether the cost is network time alone (proxy steps recorded).
    network: bool,
}

fn paths(comm: &Comm) -> Vec<Path> {
    // Network time where every sender timed its steps; whole transfers otherwise (the two
    // do not compare).
    let network = comm
        .sides
        .iter()
        .filter(|s| s.link.send)
        .all(|s| s.link.steps > 0);
    let mut by: BTreeMap<(u32, u32), Path> = BTreeMap::new();
    for s in comm
        .sides
        .iter()
        .filter(|s| s.link.send && s.link.bytes > 0)
    {
        let l = s.link;
        if l.self_rank == u32::MAX {
            continue;
        }
        let kib = l.bytes as f64 / 1024.0;
        let ns = if network { l.network_ns } else { l.op_ns } as f64;
        by.insert(
            (l.self_rank, l.peer),
            Path {
                src: l.self_rank,
                dst: l.peer,
                cost: ns / kib,
                kib,
                channel: l.slowest_channel,
                network,
            },
        );
    }
    by.into_values().collect()
}

/// The baseline of path `i`: the median of the paths sharing no member with it, else the
/// lower quartile of the others (None: too few paths to compare).
fn baseline(ps: &[Path], i: usize) -> Option<f64> {
    let p = &ps[i];
    let touches = |q: &Path| [q.src, q.dst].iter().any(|m| *m == p.src || *m == p.dst);
    let mut disjoint: Vec<f64> = ps.iter().filter(|q| !touches(q)).map(|q| q.cost).collect();
    if !disjoint.is_empty() {
        return Some(median(&mut disjoint));
    }
    let mut others: Vec<f64> = ps
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, q)| q.cost)
        .collect();
    if others.len() < 2 {
        return None;
    }
    others.sort_by(f64::total_cmp);
    Some(others[(others.len() - 1) / 4])
}

fn confidence(ratio: f64) -> f64 {
    (0.5 + 0.5 * ((ratio - RATIO) / RATIO).clamp(0.0, 1.0)).min(0.95)
}

fn slow_paths(a: &Analysis, group: Option<&str>, comm: &Comm) -> Vec<Finding> {
    let ps = paths(comm);
    if ps.len() < 2 {
        return Vec::new();
    }
    // (index, baseline) of the slow paths.
    let slow: BTreeMap<usize, f64> = (0..ps.len())
        .filter_map(|i| {
            let b = baseline(&ps, i)?;
            let p = &ps[i];
            (b > 0.0 && p.cost >= RATIO * b && (p.cost - b) * p.kib >= MIN_EXCESS_NS)
                .then_some((i, b))
        })
        .collect();
    if slow.is_empty() {
        return Vec::new();
    }
    let members: BTreeSet<u32> = ps.iter().flat_map(|p| [p.src, p.dst]).collect();
    let mut explained: BTreeSet<usize> = BTreeSet::new();
    let mut out = Vec::new();
    for &m in &members {
        let touching: Vec<usize> = (0..ps.len())
            .filter(|&i| ps[i].src == m || ps[i].dst == m)
            .collect();
        let elsewhere_normal =
            (0..ps.len()).any(|i| !touching.contains(&i) && !slow.contains_key(&i));
        if touching.len() >= 2 && elsewhere_normal && touching.iter().all(|i| slow.contains_key(i))
        {
            explained.extend(&touching);
            out.push(nic_finding(a, group, comm, m, &ps, &touching, &slow));
        }
    }
    for (&i, &b) in &slow {
        if !explained.contains(&i) {
            out.push(link_finding(a, group, comm, &ps[i], b));
        }
    }
    out
}

fn link_finding(a: &Analysis, group: Option<&str>, comm: &Comm, p: &Path, base: f64) -> Finding {
    let ratio = p.cost / base;
    let what = if p.network {
        "on the network"
    } else {
        "in all"
    };
    let mut culprit = comm.culprit(a, Component::Link, p.src);
    culprit.element = Some(format!(
        "{} -> {}, channel {}",
        comm.who(p.src),
        comm.who(p.dst),
        p.channel
    ));
    Finding {
        kind: FindingKind::SlowLink,
        severity: Severity::Warning,
        summary: format!(
            "transfers from {} to {} in {} take {:.1} us per KiB {what}, {ratio:.1}x the paths that share neither rank ({:.1} us), slowest on channel {}: the path between the two is slow while both ranks' other paths are not",
            comm.who(p.src),
            comm.who(p.dst),
            comm_name(group),
            p.cost / 1e3,
            base / 1e3,
            p.channel,
        ),
        confidence: confidence(ratio),
        culprits: vec![culprit],
        evidence: vec![
            Evidence::new(
                EvidenceKey::TransferUsPerKib,
                p.cost / 1e3,
                Some(base / 1e3),
                Unit::Us,
                format!("{what} per KiB from the sender's proxy, against paths sharing no rank with it"),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::TransferTimeRatio,
                ratio,
                Some(1.0),
                Unit::Ratio,
                "its time per KiB over the baseline".into(),
            )
            .decisive(),
        ],
        action: "check the link between the two ranks' nodes: NIC port counters (symbol and link-down errors), negotiated speed, the cable or optic, the switch port; NCCL_IB_HCA pins which NIC each rank uses".into(),
        iterations: Vec::new(),
        detector: DetectorId::InCollective,
        corroborated_by: Vec::new(),
        failure: None,
    }
}

fn nic_finding(
    a: &Analysis,
    group: Option<&str>,
    comm: &Comm,
    member: u32,
    ps: &[Path],
    touching: &[usize],
    slow: &BTreeMap<usize, f64>,
) -> Finding {
    let mut costs: Vec<f64> = touching.iter().map(|&i| ps[i].cost).collect();
    let mut bases: Vec<f64> = touching.iter().map(|&i| slow[&i]).collect();
    let (cost, base) = (median(&mut costs), median(&mut bases));
    let ratio = cost / base;
    let culprit = comm.culprit(a, Component::Nic, member);
    Finding {
        kind: FindingKind::SlowLink,
        severity: Severity::Warning,
        summary: format!(
            "every transfer into and out of {} in {} is slow ({} paths, {:.1} us per KiB, {ratio:.1}x the paths elsewhere): its NIC or the link from it to the switch",
            comm.who(member),
            comm_name(group),
            touching.len(),
            cost / 1e3,
        ),
        confidence: confidence(ratio),
        culprits: vec![culprit],
        evidence: vec![
            Evidence::new(
                EvidenceKey::TransferUsPerKib,
                cost / 1e3,
                Some(base / 1e3),
                Unit::Us,
                "median of its paths, against paths that do not touch it".into(),
            )
            .decisive(),
            Evidence::new(
                EvidenceKey::TransferTimeRatio,
                ratio,
                Some(1.0),
                Unit::Ratio,
                "its paths' time per KiB over the others'".into(),
            )
            .decisive(),
        ],
        action: "check the NIC of this rank's node (port counters, link speed, PCIe link width and errors, firmware); if it stays slow, take the node out of the job".into(),
        iterations: Vec::new(),
        detector: DetectorId::InCollective,
        corroborated_by: Vec::new(),
        failure: None,
    }
}

/// Per job rank: (own-GPU wait per step, peer-data wait per step, steps) from its sides.
fn gpu_waits(comm: &Comm) -> BTreeMap<u32, (f64, f64, u64)> {
    let mut acc: BTreeMap<u32, (u64, u64, u64, u64)> = BTreeMap::new();
    for s in &comm.sides {
        let l = s.link;
        if l.steps == 0 {
            continue;
        }
        let e = acc.entry(s.rank).or_default();
        e.0 += l.gpu_wait_ns;
        e.1 += l.steps;
        if !l.send {
            e.2 += l.peer_wait_ns;
            e.3 += l.steps;
        }
    }
    acc.into_iter()
        .map(|(r, (gpu, steps, wait, recv_steps))| {
            let per = |ns: u64, n: u64| if n == 0 { 0.0 } else { ns as f64 / n as f64 };
            (r, (per(gpu, steps), per(wait, recv_steps), steps))
        })
        .collect()
}

fn slow_kernels(a: &Analysis, group: Option<&str>, comm: &Comm) -> Vec<Finding> {
    let waits = gpu_waits(comm);
    let mut out = Vec::new();
    if waits.len() >= 2 {
        for (&r, &(gpu, data, steps)) in &waits {
            let others: Vec<(f64, f64)> = waits
                .iter()
                .filter(|(o, _)| **o != r)
                .map(|(_, w)| (w.0, w.1))
                .collect();
            let base_gpu = median(&mut others.iter().map(|o| o.0).collect::<Vec<_>>());
            let base_data = median(&mut others.iter().map(|o| o.1).collect::<Vec<_>>());
            let starved = base_data > 0.0 && data >= RATIO * base_data;
            if gpu >= RATIO * base_gpu.max(1.0)
                && (gpu - base_gpu) * steps as f64 >= MIN_EXCESS_NS
                && !starved
            {
                out.push(kernel_finding(
                    a, group, r, gpu, base_gpu, data, base_data, None,
                ));
            }
        }
    }
    // v7 kernel phases: compute time per channel, where NCCL timed the phases.
    if comm.compute.len() >= 2 && out.is_empty() {
        let per: BTreeMap<u32, (f64, u64)> = comm
            .compute
            .iter()
            .filter(|(_, (ch, _))| *ch > 0)
            .map(|(r, (ch, ns))| (*r, (*ns as f64 / *ch as f64, *ch)))
            .collect();
        for (&r, &(c, ch)) in &per {
            let mut others: Vec<f64> = per
                .iter()
                .filter(|(o, _)| **o != r)
                .map(|(_, v)| v.0)
                .collect();
            let base = median(&mut others);
            if !others.is_empty()
                && base > 0.0
                && c >= RATIO * base
                && (c - base) * ch as f64 >= MIN_EXCESS_NS
            {
                out.push(kernel_finding(
                    a,
                    group,
                    r,
                    f64::NAN,
                    f64::NAN,
                    f64::NAN,
                    f64::NAN,
                    Some((c, base)),
                ));
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn kernel_finding(
    a: &Analysis,
    group: Option<&str>,
    rank: u32,
    gpu: f64,
    base_gpu: f64,
    data: f64,
    base_data: f64,
    compute: Option<(f64, f64)>,
) -> Finding {
    let (summary, mut evidence, ratio) = match compute {
        Some((c, base)) => (
            format!(
                "rank {rank}'s collective kernels in {} compute {:.1}x longer per channel than its peers' ({:.1} us against {:.1} us, NCCL's kernel phases): its GPU is slow inside the collective",
                comm_name(group),
                c / base,
                c / 1e3,
                base / 1e3
            ),
            vec![Evidence::new(
                EvidenceKey::KernelComputeUs,
                c / 1e3,
                Some(base / 1e3),
                Unit::Us,
                "compute phase per kernel channel, against its peers' median".into(),
            )
            .decisive()],
            c / base,
        ),
        None => (
            format!(
                "rank {rank}'s NCCL kernel is slow inside the collectives of {}: NCCL's proxy waited {:.1} us per step for its GPU, {:.1}x its peers' {:.1} us, while it did not wait longer than they did for their data",
                comm_name(group),
                gpu / 1e3,
                gpu / base_gpu.max(1.0),
                base_gpu / 1e3
            ),
            vec![
                Evidence::new(
                    EvidenceKey::ProxyGpuWaitUs,
                    gpu / 1e3,
                    Some(base_gpu / 1e3),
                    Unit::Us,
                    "per step, the proxy waiting for this rank's own kernel, against its peers' median".into(),
                )
                .decisive(),
                Evidence::new(
                    EvidenceKey::ProxyPeerWaitUs,
                    data / 1e3,
                    Some(base_data / 1e3),
                    Unit::Us,
                    "per step, waiting for peers' data: not above theirs, so it was not starved by a peer".into(),
                )
                .decisive(),
            ],
            gpu / base_gpu.max(1.0),
        ),
    };
    evidence.push(
        Evidence::new(
            EvidenceKey::TransferTimeRatio,
            ratio,
            Some(1.0),
            Unit::Ratio,
            "over its peers'".into(),
        )
        .decisive(),
    );
    Finding {
        kind: FindingKind::SlowGpu,
        severity: Severity::Warning,
        summary,
        confidence: confidence(ratio),
        culprits: vec![a.ctx.rank_culprit(Component::Gpu, rank)],
        evidence,
        action: "check what shares this GPU during collectives (compute kernels overlapping NCCL's take its SMs; NCCL_MAX_CTAS / stream priorities), its SM clock and throttling, and XID/ECC errors in the kernel log; drain the node only if it stays slow with nothing sharing the GPU".into(),
        iterations: Vec::new(),
        detector: DetectorId::InCollective,
        corroborated_by: Vec::new(),
        failure: None,
    }
}
