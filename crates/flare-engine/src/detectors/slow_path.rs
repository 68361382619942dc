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
use flare_model::{Component, Culprit, Evidence, Finding, FindingKind, PathElement, Severity};
use std::collections::{BTreeMap, HashMap, HashSet};

pub struct SlowPathDetector;

#[derive(Default)]
struct CommSlowness {
    /// Per iteration: median ratio of its transfers to comparable ones.
    per_iteration: BTreeMap<u32, Vec<f64>>,
}

impl Detector for SlowPathDetector {
    fn id(&self) -> &'static str {
        "slow_path"
    }
    fn summary(&self) -> &'static str {
        "NICs, links and switches whose transfers are slow for every member of the groups crossing them"
    }
    fn needs(&self) -> &'static str {
        "complete collectives on several communicators doing the same op, rank-to-node placement"
    }

    fn detect(&self, a: &Analysis, cfg: &EngineConfig) -> Outcome {
        let trace = a.trace;
        // Class of comparable instances: same op kind, bytes and group size, per iteration.
        let mut class_times: HashMap<(u8, u64, u32, u32), Vec<f64>> = HashMap::new();
        for inst in &a.instances {
            if inst.present != inst.expected_traced || inst.present < 2 {
                continue;
            }
            if let Some(t) = inst.transfer_ns() {
                class_times
                    .entry((inst.kind as u8, inst.bytes, inst.expected, inst.iteration))
                    .or_default()
                    .push(t as f64);
            }
        }
        let class_stats: HashMap<(u8, u64, u32, u32), (f64, usize)> = class_times
            .into_iter()
            .map(|(k, mut v)| {
                let n = v.len();
                (k, (median(&mut v), n))
            })
            .collect();
        // Comms per class across the window: need several to compare.
        let mut class_comms: HashMap<(u8, u64, u32), HashSet<u32>> = HashMap::new();
        for inst in &a.instances {
            class_comms
                .entry((inst.kind as u8, inst.bytes, inst.expected))
                .or_default()
                .insert(inst.comm);
        }
        let mut per_comm: HashMap<u32, CommSlowness> = HashMap::new();
        for inst in &a.instances {
            if inst.present != inst.expected_traced || inst.present < 2 {
                continue;
            }
            let Some(t) = inst.transfer_ns() else {
                continue;
            };
            if class_comms[&(inst.kind as u8, inst.bytes, inst.expected)].len() < 3 {
                continue;
            }
            let (med, n) =
                class_stats[&(inst.kind as u8, inst.bytes, inst.expected, inst.iteration)];
            if n < 3 || med <= 0.0 {
                continue;
            }
            per_comm
                .entry(inst.comm)
                .or_default()
                .per_iteration
                .entry(inst.iteration)
                .or_default()
                .push(t as f64 / med);
        }
        if per_comm.is_empty() {
            return Outcome::NotEnoughData(
                "no op seen on 3 or more communicators with complete transfers".into(),
            );
        }
        let n_its = a.n_its();
        let mut slow: HashMap<u32, (f64, Vec<u32>)> = HashMap::new();
        let mut normal: Vec<u32> = Vec::new();
        for (&comm, s) in &per_comm {
            let ratios: Vec<(u32, f64)> = s
                .per_iteration
                .iter()
                .map(|(&it, v)| (it, median(&mut v.clone())))
                .collect();
            let mut all: Vec<f64> = ratios.iter().map(|r| r.1).collect();
            let overall = median(&mut all);
            let bad: Vec<u32> = ratios
                .iter()
                .filter(|r| r.1 >= cfg.min_transfer_ratio.max(1.5))
                .map(|r| r.0)
                .collect();
            let min_hits = if n_its >= 4 { 2 } else { 1 };
            if overall >= cfg.min_transfer_ratio {
                slow.insert(comm, (overall, vec![]));
            } else if bad.len() >= min_hits {
                let worst = ratios.iter().map(|r| r.1).fold(0.0, f64::max);
                slow.insert(comm, (worst, bad));
            } else {
                normal.push(comm);
            }
        }
        if slow.is_empty() {
            return Outcome::Findings(vec![]);
        }
        // Map communicators onto the fabric.
        let cluster = &trace.job.cluster;
        let mut buf = Vec::new();
        let elements_of = |comm: u32, buf: &mut Vec<PathElement>| -> HashSet<PathElement> {
            let mut set = HashSet::new();
            let Some(c) = trace.communicators.get(comm as usize) else {
                return set;
            };
            let n = c.members.len();
            for i in 0..n {
                let (x, y) = (
                    cluster.loc(c.members[i]),
                    cluster.loc(c.members[(i + 1) % n]),
                );
                cluster.path(x, y, buf);
                set.extend(buf.iter().copied());
                cluster.path(y, x, buf);
                set.extend(buf.iter().copied());
            }
            set
        };
        let slow_elements: HashMap<u32, HashSet<PathElement>> = slow
            .keys()
            .map(|&c| (c, elements_of(c, &mut buf)))
            .collect();
        let mut candidates: HashMap<PathElement, (usize, usize)> = HashMap::new();
        for set in slow_elements.values() {
            for e in set {
                candidates.entry(*e).or_default().0 += 1;
            }
        }
        for &c in &normal {
            for e in elements_of(c, &mut buf) {
                if let Some(v) = candidates.get_mut(&e) {
                    v.1 += 1;
                }
            }
        }
        let mut unexplained: HashSet<u32> = slow.keys().copied().collect();
        let mut findings = Vec::new();
        while !unexplained.is_empty() && findings.len() < 3 {
            let best = candidates
                .iter()
                .map(|(e, &(_, normal_through))| {
                    let explains = unexplained
                        .iter()
                        .filter(|c| slow_elements[c].contains(e))
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
                .filter(|c| slow_elements[c].contains(&element))
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
        let trace = a.trace;
        let mut ratios: Vec<f64> = explained.iter().map(|c| slow[c].0).collect();
        let ratio = median(&mut ratios);
        let mut its: Vec<u32> = explained.iter().flat_map(|c| slow[c].1.clone()).collect();
        its.sort_unstable();
        its.dedup();
        let mut examples: Vec<&str> = explained
            .iter()
            .filter_map(|&c| {
                trace
                    .communicators
                    .get(c as usize)
                    .map(|c| c.label.as_str())
            })
            .collect();
        examples.sort_unstable();
        examples.truncate(4);
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
                "check the leaf switch's port counters, congestion and routing; move traffic off it or fix the flapping/congested ports",
            ),
            PathElement::Spine => (
                FindingKind::SlowSwitch,
                Component::Network,
                "inter-pod traffic is slow: check spine congestion and adaptive routing",
            ),
        };
        let mut culprit = Culprit::new(component);
        culprit.element = Some(element.label());
        if let PathElement::Nic { node, rail } = element {
            culprit.node = Some(node);
            culprit.local_gpu = Some(rail);
            let rank = node * trace.job.cluster.gpus_per_node + rail;
            if rank < trace.job.world_size {
                culprit.rank = Some(rank);
            }
        }
        if let PathElement::NvLink { node } = element {
            culprit.node = Some(node);
        }
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
                    "transfer_time_ratio",
                    ratio,
                    Some(1.0),
                    "x",
                    "median transfer time (end minus last arrival) of the affected communicators over the same op on other communicators".into(),
                ),
                Evidence::new(
                    "slow_groups_through_element",
                    explains as f64,
                    Some((explains + normal_through) as f64),
                    "communicators",
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
            detector: self.id().into(),
        }
    }
}
