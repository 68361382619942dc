//! Slow-path localization from transfer times.
//!
//! A collective's transfer time (end minus last arrival) excludes waiting, so when it is
//! long, every member is slow together and the shared path is to blame. Transfers are
//! compared with the same op (kind, bytes, group size) on other communicators in the same
//! iteration, which cancels cluster-wide network spikes. The slow communicators are then
//! mapped through the topology to fabric elements, and a greedy cover picks the elements
//! that explain most slow communicators while crossing few normal ones: one NIC explains
//! a few slow groups and nothing else; a congested leaf switch explains many.

use crate::stats::{confidence, median};
use crate::{Analysis, Detector, EngineConfig, Outcome};
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, Finding, FindingKind, PathElement,
    Severity, Unit,
};
use std::collections::{HashMap, HashSet};

/// When a communicator's transfers are slow (the graph search judges transfers by the
/// same bounds).
#[derive(Clone, Debug)]
pub struct SlowPathConfig {
    /// Slow at this ratio to comparable communicators' transfers...
    pub min_transfer_ratio: f64,
    /// ...and when the slowness comes and goes (in some iterations only), at this ratio:
    /// milder transient slowdowns are background traffic of other jobs, not a fault to
    /// act on.
    pub min_transient_ratio: f64,
}

impl Default for SlowPathConfig {
    fn default() -> Self {
        SlowPathConfig {
            min_transfer_ratio: 1.3,
            min_transient_ratio: 2.0,
        }
    }
}

pub struct SlowPathDetector;

impl Detector for SlowPathDetector {
    fn id(&self) -> DetectorId {
        DetectorId::SlowPath
    }
    fn localizes(&self) -> bool {
        true
    }
    fn summary(&self) -> &'static str {
        "NICs, links and switches whose transfers are slow for every member of the groups crossing them"
    }
    fn needs(&self) -> &'static str {
        "complete collectives on several communicators doing the same op, rank-to-node placement"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let ctx = a.ctx;
        // Per communicator and iteration: its transfers against comparable ones (the same
        // op kind, bytes and group size on other communicators in the same iteration),
        // computed when the iteration was digested.
        let transfers = a.comm_transfers();
        if transfers.is_empty() {
            return Outcome::NotEnoughData(
                "no op seen on 3 or more communicators with complete transfers".into(),
            );
        }
        let n_its = a.n_its();
        let mut slow: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        let mut normal: Vec<u32> = Vec::new();
        let mut all: Vec<f64> = Vec::new();
        for comm in transfers.comms() {
            let ratios = transfers.of(comm);
            all.clear();
            all.extend(ratios.iter().map(|r| r.1 as f64));
            let overall = median(&mut all);
            let bad: Vec<u32> = ratios
                .iter()
                .filter(|r| r.1 as f64 >= cfg.slow_path.min_transient_ratio)
                .map(|r| a.iterations[r.0 as usize])
                .collect();
            let min_hits = if n_its >= 4 { 2 } else { 1 };
            if overall >= cfg.slow_path.min_transfer_ratio {
                slow.insert(comm, (overall, vec![]));
            } else if bad.len() >= min_hits {
                let worst = ratios.iter().map(|r| r.1 as f64).fold(0.0, f64::max);
                slow.insert(comm, (worst, bad));
            } else {
                normal.push(comm);
            }
        }
        if slow.is_empty() {
            return Outcome::Findings(vec![]);
        }
        // Map communicators onto the fabric (each one's elements, sorted, computed once
        // per job).
        let fabric = ctx.fabric();
        let elements_of = |comm: u32| -> &[PathElement] {
            fabric
                .elements
                .get(comm as usize)
                .map_or(&[][..], |v| v.as_slice())
        };
        let slow_elements: HashMap<u32, &[PathElement]> =
            slow.keys().map(|&c| (c, elements_of(c))).collect();
        let mut candidates: HashMap<PathElement, (usize, usize)> = HashMap::new();
        for set in slow_elements.values() {
            for e in set.iter() {
                candidates.entry(*e).or_default().0 += 1;
            }
        }
        // Normal communicators through each candidate, from the element's side: a few
        // candidates against thousands of normal communicators.
        let mut is_normal = vec![false; ctx.communicators.len()];
        for &c in &normal {
            is_normal[c as usize] = true;
        }
        for (e, v) in candidates.iter_mut() {
            v.1 = fabric.crossing.get(e).map_or(0, |cs| {
                cs.iter().filter(|&&c| is_normal[c as usize]).count()
            });
        }
        let mut unexplained: HashSet<u32> = slow.keys().copied().collect();
        let mut findings = Vec::new();
        while !unexplained.is_empty() && findings.len() < 3 {
            let best = candidates
                .iter()
                .map(|(e, &(_, normal_through))| {
                    let explains = unexplained
                        .iter()
                        .filter(|c| slow_elements[c].binary_search(e).is_ok())
                        .count();
                    (e, explains, normal_through)
                })
                .filter(|&(_, explains, n)| {
                    explains > 0 && explains as f64 / (explains + n) as f64 >= 0.6
                })
                .max_by(|x, y| {
                    let px = x.1 as f64 / (x.1 + x.2) as f64;
                    let py = y.1 as f64 / (y.1 + y.2) as f64;
                    x.1.cmp(&y.1).then(px.total_cmp(&py)).then(y.0.cmp(x.0))
                });
            let Some((&element, explains, normal_through)) = best else {
                break;
            };
            let explained: Vec<u32> = unexplained
                .iter()
                .copied()
                .filter(|c| slow_elements[c].binary_search(&element).is_ok())
                .collect();
            for c in &explained {
                unexplained.remove(c);
            }
            findings.push(self.finding(a, element, &explained, &slow, explains, normal_through));
        }
        Outcome::Findings(findings)
    }
}

impl SlowPathDetector {
    fn finding(
        &self,
        a: &Analysis,
        element: PathElement,
        explained: &[u32],
        slow: &HashMap<u32, (f64, Vec<u32>)>,
        explains: usize,
        normal_through: usize,
    ) -> Finding {
        let ctx = a.ctx;
        let mut ratios: Vec<f64> = explained.iter().map(|c| slow[c].0).collect();
        let ratio = median(&mut ratios);
        let mut its: Vec<u32> = explained.iter().flat_map(|c| slow[c].1.clone()).collect();
        its.sort_unstable();
        its.dedup();
        let mut examples: Vec<&str> = explained
            .iter()
            .filter_map(|&c| ctx.communicators.get(c as usize).map(|c| c.label.as_str()))
            .collect();
        examples.sort_unstable();
        examples.truncate(4);
        let (kind, culprit, action) = path_culprit(ctx, element);
        Finding {
            kind,
            severity: Severity::Warning,
            summary: format!(
                "{} is slow: transfers through it take x{ratio:.2} as long as comparable ones ({} communicators affected{})",
                element.label(),
                explained.len(),
                if its.is_empty() {
                    String::new()
                } else {
                    format!(", iterations {}", super::iteration_ranges(&its))
                }
            ),
            confidence: confidence((ratio - 1.0) * explains as f64 / (1.0 + normal_through as f64), 0.3),
            culprits: vec![culprit],
            evidence: vec![
                Evidence::new(
                    EvidenceKey::TransferTimeRatio,
                    ratio,
                    Some(1.0),
                    Unit::Ratio,
                    "median transfer time (end minus last arrival) of the affected communicators over the same op on other communicators".into(),
                ),
                Evidence::new(
                    EvidenceKey::SlowGroupsThroughElement,
                    explains as f64,
                    Some((explains + normal_through) as f64),
                    Unit::Communicators,
                    format!(
                        "{} slow communicators cross it, {} normal ones do; e.g. {}",
                        explains,
                        normal_through,
                        examples.join(", ")
                    ),
                ),
            ],
            action: action.into(),
            iterations: its,
            detector: self.id(),
            corroborated_by: vec![],
            failure: None,
        }
    }
}

/// What a slow fabric element is, whom it names (a NIC's node, rail and the rank behind
/// it; an NVLink's node) and what to do about it.
pub(super) fn path_culprit(
    ctx: &crate::JobContext,
    element: PathElement,
) -> (FindingKind, Culprit, &'static str) {
    let (kind, component, action) = match element {
        PathElement::Nic { .. } => (
            FindingKind::SlowLink,
            Component::Nic,
            "check the NIC and its cable and switch port (ibstat, port error counters, link width and speed); reseat or replace, or drain the node",
        ),
        PathElement::NvLink { .. } => (
            FindingKind::SlowLink,
            Component::Link,
            "check NVLink status and error counters on this node (nvidia-smi nvlink -s -e); drain the node if links are degraded",
        ),
        PathElement::Leaf { .. } => (
            FindingKind::SlowSwitch,
            Component::Switch,
            "check the leaf switch's port counters, congestion and routing; move traffic off it or fix the flapping or congested ports",
        ),
        PathElement::Spine => (
            FindingKind::SlowSwitch,
            Component::Network,
            "inter-pod traffic is slow: check spine congestion and adaptive routing",
        ),
    };
    let mut culprit = Culprit::new(component);
    culprit.element = Some(element.label());
    match element {
        PathElement::Nic { node, rail } => {
            culprit.node = Some(node);
            culprit.local_gpu = Some(rail);
            let rank = ctx.job.cluster.rank_at(node, rail).unwrap_or(u32::MAX);
            if rank < ctx.job.world_size {
                culprit.rank = Some(rank);
            }
        }
        PathElement::NvLink { node } => culprit.node = Some(node),
        _ => {}
    }
    (kind, culprit, action)
}
