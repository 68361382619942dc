//! Topology misalignment after Arnold (topology-aware scheduling): communication groups
//! that span more pods (leaf-switch domains) than the job needs, because the scheduler
//! scattered its nodes over a fragmented cluster.
//!
//! Each communicator's pod span is compared with the span it would have if the job's nodes
//! were packed into as few pods as possible in the same rank order (what a topology-aware
//! scheduler gives): the excess is traffic that crosses the spine only because of where
//! the job landed. The cost is measured from the trace when it holds both kinds of
//! groups (the transfer time of the same op on communicators spanning the compact number
//! of pods against the actual one), and otherwise bounded by Arnold's published figures
//! (collectives up to 17% slower, P2P up to 70%).

use crate::stats::median;
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    ClusterTopology, Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind,
    GroupKind, Severity, Unit,
};
use std::collections::BTreeMap;

pub struct TopologyDetector;

/// Pods spanned by `members` under `cluster`.
fn pods(cluster: &ClusterTopology, members: &[u32]) -> u32 {
    let mut p: Vec<u32> = members
        .iter()
        .map(|&m| cluster.pod_of(cluster.loc(m).node))
        .collect();
    p.sort_unstable();
    p.dedup();
    p.len() as u32
}

/// Per group kind: groups, groups spanning more pods than compactly placed, and the sum
/// of actual and compact spans.
#[derive(Default, Clone, Copy)]
struct KindSpan {
    kind: Option<GroupKind>,
    groups: u32,
    misaligned: u32,
    actual: u32,
    compact: u32,
}

impl Detector for TopologyDetector {
    fn id(&self) -> DetectorId {
        DetectorId::Topology
    }
    fn summary(&self) -> &'static str {
        "communication groups that span more pods than the job needs (scattered placement)"
    }
    fn needs(&self) -> &'static str {
        "communicators and a placement of the job's nodes that is not the packed one"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let cluster = &a.ctx.job.cluster;
        if cluster.placement.is_none() {
            return Outcome::NotEnoughData(
                "the trace does not say where the job's nodes are (ranks placed densely)".into(),
            );
        }
        if a.ctx.communicators.is_empty() {
            return Outcome::NotEnoughData("no communicators".into());
        }
        let compact = ClusterTopology {
            placement: None,
            ..cluster.clone()
        };
        let blocks = a.ctx.job.world_size.div_ceil(cluster.gpus_per_node.max(1));
        let job_pods = {
            let mut p: Vec<u32> = (0..blocks)
                .map(|b| cluster.pod_of(cluster.loc(b * cluster.gpus_per_node).node))
                .collect();
            p.sort_unstable();
            p.dedup();
            p.len() as u32
        };
        let needed_pods = blocks.div_ceil(cluster.nodes_per_pod.max(1));
        // Keyed by name: the evidence lists the kinds in alphabetical order.
        let mut kinds: BTreeMap<&'static str, KindSpan> = BTreeMap::new();
        for c in &a.ctx.communicators {
            let actual = pods(cluster, &c.members);
            let packed = pods(&compact, &c.members);
            let k = kinds.entry(c.kind.as_str()).or_default();
            k.kind = Some(c.kind);
            k.groups += 1;
            k.actual += actual;
            k.compact += packed;
            if actual > packed {
                k.misaligned += 1;
            }
        }
        let total_misaligned: u32 = kinds.values().map(|k| k.misaligned).sum();
        if total_misaligned == 0 {
            return Outcome::Findings(vec![]);
        }
        // Measured cost: the same op on groups spanning the compact and the actual number
        // of pods, from the window's transfer medians.
        let mut by_class: BTreeMap<(u8, u64, u32, u32), Vec<f64>> = BTreeMap::new();
        for d in &a.digests {
            for &(kind, bytes, size, p, t, _) in &d.span_transfer {
                by_class
                    .entry((kind as u8, bytes, size, p))
                    .or_default()
                    .push(t as f64);
            }
        }
        let mut slowdowns: Vec<f64> = Vec::new();
        for (&(kind, bytes, size, p), v) in &by_class {
            for (&(k2, b2, s2, p2), w) in &by_class {
                if (k2, b2, s2) == (kind, bytes, size) && p2 < p {
                    let (x, y) = (median(&mut v.clone()), median(&mut w.clone()));
                    if y > 0.0 {
                        slowdowns.push(x / y);
                    }
                }
            }
        }
        let measured = (!slowdowns.is_empty()).then(|| median(&mut slowdowns));
        // The time the misaligned groups' transfers lose: per class of transfers (a group
        // size stands for a kind of group), its rank time times the share of groups of
        // that size that are misaligned, times what crossing pods costs.
        let mut sizes: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
        for c in &a.ctx.communicators {
            let e = sizes.entry(c.members.len() as u32).or_default();
            e.0 += 1;
            if pods(cluster, &c.members) > pods(&compact, &c.members) {
                e.1 += 1;
            }
        }
        let mut known: Vec<f64> = a.iteration_ns.iter().flatten().copied().collect();
        let iteration = if known.is_empty() {
            f64::NAN
        } else {
            median(&mut known)
        };
        let rank_time = iteration * a.n_its().max(1) as f64 * a.n_ranks().max(1) as f64;
        let mut misaligned_time = 0.0;
        for d in &a.digests {
            for &(_, _, size, p, t, n) in &d.span_transfer {
                if p < 2 {
                    continue;
                }
                let frac = sizes
                    .get(&size)
                    .map_or(0.0, |&(all, bad)| bad as f64 / all.max(1) as f64);
                misaligned_time += t as f64 * n as f64 * size as f64 * frac;
            }
        }
        let transfer_share = misaligned_time / rank_time;
        let cost = measured.map(|s| (1.0 - 1.0 / s.max(1.0)) * transfer_share);
        let mut evidence = vec![Evidence::new(
            EvidenceKey::PodsSpanned,
            job_pods as f64,
            Some(needed_pods as f64),
            Unit::Pods,
            format!(
                "the job's {blocks} nodes sit in {job_pods} pods; {needed_pods} would hold them ({} nodes per pod)",
                cluster.nodes_per_pod
            ),
        )];
        for (kind, k) in &kinds {
            if k.misaligned == 0 {
                continue;
            }
            evidence.push(Evidence::new(
                EvidenceKey::groups_misaligned(k.kind.unwrap_or(GroupKind::Other)),
                k.misaligned as f64,
                Some(k.groups as f64),
                Unit::Groups,
                format!(
                    "{} of {} {kind} groups cross more pods than packed ({:.2} pods per group against {:.2})",
                    k.misaligned,
                    k.groups,
                    k.actual as f64 / k.groups as f64,
                    k.compact as f64 / k.groups as f64
                ),
            ));
        }
        match measured {
            Some(s) => evidence.push(Evidence::new(
                EvidenceKey::CrossPodSlowdown,
                s,
                Some(1.0),
                Unit::Ratio,
                "transfer time of the same op on groups spanning more pods over groups spanning fewer, measured in this trace".into(),
            )),
            None => evidence.push(Evidence::new(
                EvidenceKey::CrossPodSlowdownBound,
                1.7,
                Some(1.0),
                Unit::Ratio,
                "not measurable here (every group of a kind spans the same pods); Arnold measured collectives up to 17% and P2P up to 70% slower across pods".into(),
            )),
        }
        if let Some(c) = cost {
            evidence.push(Evidence::new(
                EvidenceKey::EstimatedCost,
                c * 100.0,
                None,
                Unit::Percent,
                format!(
                    "of the job's time: {:.1}% of rank time goes to transfers of misaligned groups, each x{:.2} as long as packed",
                    transfer_share * 100.0,
                    measured.unwrap_or(1.0)
                ),
            ));
        }
        let heavy = kinds
            .iter()
            .filter(|(_, s)| {
                s.misaligned > 0
                    && matches!(
                        s.kind,
                        Some(GroupKind::Dp | GroupKind::Tp | GroupKind::Ep | GroupKind::Cp)
                    )
            })
            .count()
            > 0;
        let warning =
            cost.is_some_and(|c| c >= cfg.graph.min_blame_share) || (cost.is_none() && heavy);
        let mut culprit = Culprit::new(Component::Network);
        culprit.element = Some(format!("placement ({job_pods} pods for {needed_pods})"));
        let worst = kinds
            .iter()
            .filter(|(_, s)| s.misaligned > 0)
            .max_by_key(|(_, s)| s.misaligned)
            .map(|(k, _)| *k)
            .unwrap_or("pp");
        Outcome::Findings(vec![Finding {
            kind: FindingKind::TopologyMisalignment,
            severity: if warning { Severity::Warning } else { Severity::Info },
            summary: format!(
                "the job's nodes are spread over {job_pods} pods where {needed_pods} would do: {total_misaligned} communication groups (mostly {worst}) cross pods they need not{}",
                match cost {
                    Some(c) => format!(", costing about {:.1}% of the job's time", c * 100.0),
                    None => String::new(),
                }
            ),
            confidence: if measured.is_some() { 0.9 } else { 0.6 },
            culprits: vec![culprit],
            evidence,
            action: format!(
                "ask for topology-aware placement: pack the job into {needed_pods} pod(s) (Slurm --switches, Kubernetes topology-aware scheduling), or order the parallel dimensions so that the heaviest groups ({worst}) stay inside a pod"
            ),
            iterations: vec![],
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }])
    }
}

#[cfg(test)]
mod tests {
    use crate::{diagnose, EngineConfig};
    use flare_model::{DetectorId, EvidenceKey, FindingKind, Severity};
    use flare_sim::{simulate, Placement, SimConfig};

    #[test]
    fn scattered_nodes_are_misaligned_and_packed_ones_are_not() {
        let mut cfg = SimConfig::for_scale(512);
        cfg.iterations = 4;
        cfg.placement = Placement::Scattered { spread: 3 };
        let out = simulate(&cfg).unwrap();
        let d = diagnose(&out.trace, &EngineConfig::default());
        let f = d
            .findings
            .iter()
            .find(|f| f.kind == FindingKind::TopologyMisalignment)
            .expect("a misalignment finding");
        assert_eq!(f.severity, Severity::Warning, "{f:#?}");
        assert!(
            f.evidence
                .iter()
                .any(|e| e.metric == EvidenceKey::CrossPodSlowdown && e.value > 1.05),
            "{f:#?}"
        );
        cfg.placement = Placement::Dense;
        let out = simulate(&cfg).unwrap();
        let d = diagnose(&out.trace, &EngineConfig::default());
        assert!(!d
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::TopologyMisalignment));
        assert!(d.skipped_reason(DetectorId::Topology).is_some());
    }
}
