//! Findings: what the engine concluded, in a form both people and tools consume.
//!
//! The JSON form (documented in the README) is a stable interface: fields are only added.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Cluster-wide irregular iterations (delta-irregular spikes) not attributable to a rank.
    IterationSpike,
    /// A persistent shift of iteration time from some iteration on.
    IterationSlowdown,
    /// One rank arrives late at its collectives by its own doing, but the trace holds no
    /// compute or host ops to say why (communication-only traces).
    SlowRank,
    /// One GPU computes slower than its peers.
    SlowGpu,
    /// Host-side pauses (GC, dataloader) on one rank keep its GPU idle.
    HostStall,
    /// The CPU cannot issue kernels fast enough on one rank: the GPU starves between kernels.
    LaunchBound,
    /// A NIC or its link moves data slower than its peers.
    SlowLink,
    /// Every path through one switch is slow.
    SlowSwitch,
    /// One pipeline stage does more work than the others.
    StageImbalance,
    /// Data-parallel ranks get unequal work per iteration (sequence lengths).
    SequenceImbalance,
    /// Ranks never joined a collective that the others wait in.
    Hang,
    /// The job's communication groups span more pods than it needs (scattered placement).
    TopologyMisalignment,
}

impl FindingKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            FindingKind::IterationSpike => "iteration_spike",
            FindingKind::IterationSlowdown => "iteration_slowdown",
            FindingKind::SlowRank => "slow_rank",
            FindingKind::SlowGpu => "slow_gpu",
            FindingKind::HostStall => "host_stall",
            FindingKind::LaunchBound => "launch_bound",
            FindingKind::SlowLink => "slow_link",
            FindingKind::SlowSwitch => "slow_switch",
            FindingKind::StageImbalance => "stage_imbalance",
            FindingKind::SequenceImbalance => "sequence_imbalance",
            FindingKind::Hang => "hang",
            FindingKind::TopologyMisalignment => "topology_misalignment",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing, nothing to fix (cluster-wide noise).
    Info,
    /// Slows the job down.
    Warning,
    /// The job is stuck or failing.
    Critical,
}

/// What kind of thing a culprit is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Gpu,
    Nic,
    Link,
    Switch,
    Host,
    Process,
    Stage,
    Network,
}

/// One thing to blame, as precisely as the evidence allows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Culprit {
    pub component: Component,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub node: Option<u32>,
    /// GPU index inside the node (also its rail).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub local_gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stage: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dp_rank: Option<u32>,
    /// A fabric element or other named thing, e.g. `pod2/leaf-rail3`, `node17/nic3`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub element: Option<String>,
    /// How strongly the evidence points here, relative to the other culprits (0..1].
    pub score: f64,
}

impl Culprit {
    pub fn new(component: Component) -> Self {
        Culprit {
            component,
            rank: None,
            node: None,
            local_gpu: None,
            stage: None,
            dp_rank: None,
            element: None,
            score: 1.0,
        }
    }

    /// A culprit for one rank: its node and GPU, and its stage and DP rank when the
    /// parallel layout is known.
    pub fn at_rank(
        component: Component,
        rank: u32,
        cluster: &crate::ClusterTopology,
        parallel: Option<&crate::ParallelConfig>,
    ) -> Self {
        let loc = cluster.loc(rank);
        let mut c = Culprit::new(component);
        c.rank = Some(rank);
        c.node = Some(loc.node);
        c.local_gpu = Some(loc.local);
        if let Some(p) = parallel {
            let co = p.coords(rank);
            c.stage = Some(co.pp);
            c.dp_rank = Some(co.dp);
        }
        c
    }

    /// A short human description, e.g. `gpu rank 139 (node 17, GPU 3)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.rank {
            parts.push(format!("rank {r}"));
        }
        let mut place = Vec::new();
        if let Some(n) = self.node {
            place.push(format!("node {n}"));
        }
        if let Some(g) = self.local_gpu {
            place.push(format!("GPU {g}"));
        }
        if let Some(s) = self.stage {
            place.push(format!("stage {s}"));
        }
        if let Some(d) = self.dp_rank {
            place.push(format!("DP rank {d}"));
        }
        if let Some(e) = &self.element {
            place.push(e.clone());
        }
        let comp = serde_json::to_value(self.component)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        if place.is_empty() {
            format!("{comp} {}", parts.join(" "))
        } else if parts.is_empty() {
            format!("{comp} {}", place.join(", "))
        } else {
            format!("{comp} {} ({})", parts.join(" "), place.join(", "))
        }
    }
}

/// One number that convinced the engine, with what it was compared against.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub metric: String,
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub baseline: Option<f64>,
    pub unit: String,
    pub detail: String,
}

impl Evidence {
    pub fn new(
        metric: &str,
        value: f64,
        baseline: Option<f64>,
        unit: &str,
        detail: String,
    ) -> Self {
        Evidence {
            metric: metric.to_string(),
            value,
            baseline,
            unit: unit.to_string(),
            detail,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    /// One line for a person.
    pub summary: String,
    /// In [0, 1].
    pub confidence: f64,
    /// Most likely first.
    pub culprits: Vec<Culprit>,
    pub evidence: Vec<Evidence>,
    /// What to do about it.
    pub action: String,
    /// Iterations where the anomaly shows (empty: all of the window).
    #[serde(default)]
    pub iterations: Vec<u32>,
    /// The detector that produced it.
    pub detector: String,
}

impl Finding {
    /// Ordering key: severity first, then confidence.
    pub fn rank_key(&self) -> (Severity, f64) {
        (self.severity, self.confidence)
    }

    /// Whether it blames something (a culprit, above `info`): what localization means.
    pub fn localizes(&self) -> bool {
        self.severity > Severity::Info && !self.culprits.is_empty()
    }

    /// The order of every findings list, most important first: severity, then confidence.
    /// For `sort_by`.
    pub fn by_importance(a: &Finding, b: &Finding) -> std::cmp::Ordering {
        b.severity
            .cmp(&a.severity)
            .then(b.confidence.total_cmp(&a.confidence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finding_json_uses_snake_case_and_skips_empty_fields() {
        let mut c = Culprit::new(Component::Gpu);
        c.rank = Some(139);
        c.node = Some(17);
        c.local_gpu = Some(3);
        let f = Finding {
            kind: FindingKind::SlowGpu,
            severity: Severity::Warning,
            summary: "s".into(),
            confidence: 0.9,
            culprits: vec![c.clone()],
            evidence: vec![],
            action: "drain".into(),
            iterations: vec![],
            detector: "slow_rank".into(),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "slow_gpu");
        assert_eq!(v["culprits"][0]["component"], "gpu");
        assert!(v["culprits"][0].get("stage").is_none());
        assert_eq!(c.describe(), "gpu rank 139 (node 17, GPU 3)");
        let back: Finding = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }
}
