//! Findings: what the engine concluded, in a form both people and tools consume.
//!
//! The JSON form is a stable interface: fields are only added. The whole document that
//! leaves the process is [`document::FindingsDocument`]; its JSON Schema is generated from
//! these types (`schema/findings.schema.json`, checked by a test).

pub mod comparison;
pub mod detector;
pub mod document;
pub mod evidence;
pub mod failure;
pub(crate) mod finite;
pub mod reruns;

pub use comparison::{
    ranks_label, ChangedOnRanks, Comparison, GemmShapeRow, HostCallRate, LatencyQuantiles,
    RankClassGrowth, RegressionCause, RunProfile, SequenceChange, TimeClassChange, TimeClassKind,
    WaitedFor,
};
pub use detector::{Corroboration, DetectorId};
pub use document::{
    FindingsDocument, JobSummary, RankMetrics, RankTime, SkippedDetector, Verdict, WindowHistory,
};
pub use evidence::{Direction, Evidence, EvidenceKey, Unit};
pub use failure::{
    CascadeGroup, FailureCategory, FailureDetail, JobStage, LineRole, LogLine, LogSignature,
};
pub use reruns::{ClassRunToRun, RunStep, RunToRun};

use serde::{Deserialize, Serialize};

string_enum! {
    /// What is wrong.
    pub enum FindingKind {
        /// Cluster-wide irregular iterations (delta-irregular spikes) not attributable to a rank.
        IterationSpike => "iteration_spike",
        /// A persistent shift of iteration time from some iteration on.
        IterationSlowdown => "iteration_slowdown",
        /// One rank arrives late at its collectives by its own doing, but the trace holds no
        /// compute or host ops to say why (communication-only traces).
        SlowRank => "slow_rank",
        /// One GPU computes slower than its peers.
        SlowGpu => "slow_gpu",
        /// One rank's CPU computes slower than its peers' (a trace whose compute is CPU
        /// work: no GPU activity).
        SlowCpu => "slow_cpu",
        /// One rank computes more than its peers (more ops at their speed): a code path or
        /// data only it has, not slow hardware.
        ExtraWork => "extra_work",
        /// Host-side pauses (GC, dataloader) on one rank keep its GPU idle.
        HostStall => "host_stall",
        /// The CPU cannot issue kernels fast enough on one rank: the GPU starves between kernels.
        LaunchBound => "launch_bound",
        /// A NIC or its link moves data slower than its peers.
        SlowLink => "slow_link",
        /// Every path through one switch is slow.
        SlowSwitch => "slow_switch",
        /// One pipeline stage does more work than the others.
        StageImbalance => "stage_imbalance",
        /// Data-parallel ranks get unequal work per iteration (sequence lengths).
        SequenceImbalance => "sequence_imbalance",
        /// Ranks never joined a collective that the others wait in.
        Hang => "hang",
        /// The job's communication groups span more pods than it needs (scattered placement).
        TopologyMisalignment => "topology_misalignment",
        /// The job failed (crashed or was stopped); its `failure` says why, from its logs.
        JobFailure => "job_failure",
        /// A run slower than another of the same job (`flare compare`): what changed.
        Regression => "regression",
        /// A rank (or node) that kept the others waiting at start-up.
        SlowStartup => "slow_startup",
        /// Where a job's start-up time went, phase by phase (information).
        Startup => "startup",
    }
}

string_enum! {
    /// How bad it is; ordered from least to most.
    pub enum Severity {
        /// Worth knowing, nothing to fix (cluster-wide noise).
        Info => "info",
        /// Slows the job down.
        Warning => "warning",
        /// The job is stuck or failing.
        Critical => "critical",
    }
}

string_enum! {
    /// What kind of thing a culprit is.
    pub enum Component {
        Gpu => "gpu",
        Nic => "nic",
        Link => "link",
        Switch => "switch",
        Host => "host",
        Process => "process",
        Stage => "stage",
        Network => "network",
    }
}

/// One thing to blame, as precisely as the evidence allows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The host by name, as logs write it (`node` is an index into the job's topology).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub host: Option<String>,
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
            host: None,
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
        if let Some(h) = &self.host {
            place.push(if self.component == Component::Host {
                h.clone()
            } else {
                format!("host {h}")
            });
        }
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
        let comp = self.component.as_str();
        if place.is_empty() {
            format!("{comp} {}", parts.join(" "))
        } else if parts.is_empty() {
            format!("{comp} {}", place.join(", "))
        } else {
            format!("{comp} {} ({})", parts.join(" "), place.join(", "))
        }
    }
}

/// One thing the engine concluded: what is wrong, where, how sure, why, and what to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    pub detector: DetectorId,
    /// Other detectors that named the same culprit, merged into this finding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corroborated_by: Vec<Corroboration>,
    /// Why the job failed, from its logs (findings of kind `job_failure`, and findings
    /// that logs explain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Box<FailureDetail>>,
}

/// The kinds of `findings`, each once, in their order (most important first when the
/// findings are).
pub fn distinct_kinds(findings: &[Finding]) -> Vec<FindingKind> {
    let mut out: Vec<FindingKind> = Vec::new();
    for f in findings {
        if !out.contains(&f.kind) {
            out.push(f.kind);
        }
    }
    out
}

impl Finding {
    /// What a finding is about, the same from one window to the next however its wording
    /// and numbers change: its detector, kind and culprits (each by rank, else host, else
    /// element, else component), e.g. `slow_rank/slow_gpu/rank 5`.
    pub fn subject_key(&self) -> String {
        let who: Vec<String> = self
            .culprits
            .iter()
            .map(|c| match (c.rank, &c.host, &c.element) {
                (Some(r), _, _) => format!("rank {r}"),
                (None, Some(h), _) => format!("host {h}"),
                (None, None, Some(e)) => e.clone(),
                (None, None, None) => c.component.as_str().to_string(),
            })
            .collect();
        format!("{}/{}/{}", self.detector, self.kind, who.join(","))
    }

    /// Fewest pieces of evidence marked decisive, when the finding has that many.
    pub const MIN_DECISIVE: usize = 3;
    /// Most pieces of evidence marked decisive.
    pub const MAX_DECISIVE: usize = 5;

    /// The evidence that decided it, in its order.
    pub fn decisive_evidence(&self) -> impl Iterator<Item = &Evidence> {
        self.evidence.iter().filter(|e| e.decisive)
    }

    /// The rule that every finding marks three to five decisive pieces of evidence:
    /// detectors mark what decided the finding where they build it; beyond
    /// [`Self::MAX_DECISIVE`] the later marks are dropped, and below
    /// [`Self::MIN_DECISIVE`] the first unmarked pieces of the finding's own evidence
    /// (detectors put the strongest first) are marked until there are three or none is
    /// left. Idempotent; consolidation settles each finding before merging, so evidence
    /// merged from other detectors never becomes decisive.
    pub fn settle_decisive(&mut self) {
        let mut marked = 0;
        for e in self.evidence.iter_mut() {
            if e.decisive {
                marked += 1;
                e.decisive = marked <= Self::MAX_DECISIVE;
            }
        }
        for e in self.evidence.iter_mut() {
            if marked >= Self::MIN_DECISIVE {
                break;
            }
            if !e.decisive {
                e.decisive = true;
                marked += 1;
            }
        }
    }

    /// Ordering key: severity first, then confidence.
    pub fn rank_key(&self) -> (Severity, f64) {
        (self.severity, self.confidence)
    }

    /// The rank of its first culprit, the one it names first, if that is a rank.
    pub fn first_rank(&self) -> Option<u32> {
        self.culprits.first().and_then(|c| c.rank)
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
            detector: DetectorId::SlowRank,
            corroborated_by: vec![],
            failure: None,
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "slow_gpu");
        assert_eq!(v["culprits"][0]["component"], "gpu");
        assert!(v["culprits"][0].get("stage").is_none());
        assert_eq!(c.describe(), "gpu rank 139 (node 17, GPU 3)");
        let back: Finding = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
    }

    #[test]
    fn three_to_five_pieces_of_evidence_are_decisive() {
        let ev = |decisive: bool| {
            Evidence::new(
                EvidenceKey::BlameShare,
                1.0,
                None,
                Unit::None,
                String::new(),
            )
            .decisive_if(decisive)
        };
        let with = |marks: &[bool]| Finding {
            kind: FindingKind::SlowGpu,
            severity: Severity::Warning,
            summary: String::new(),
            confidence: 0.5,
            culprits: vec![],
            evidence: marks.iter().map(|&d| ev(d)).collect(),
            action: String::new(),
            iterations: vec![],
            detector: DetectorId::SlowRank,
            corroborated_by: vec![],
            failure: None,
        };
        let settled = |marks: &[bool]| {
            let mut f = with(marks);
            f.settle_decisive();
            let once: Vec<bool> = f.evidence.iter().map(|e| e.decisive).collect();
            f.settle_decisive();
            assert_eq!(
                once,
                f.evidence.iter().map(|e| e.decisive).collect::<Vec<_>>()
            );
            once
        };
        let (t, n) = (true, false);
        // Nothing marked: the first three.
        assert_eq!(settled(&[n, n, n, n]), [t, t, t, n]);
        // Fewer pieces than three: all of them.
        assert_eq!(settled(&[n, n]), [t, t]);
        assert_eq!(settled(&[]), Vec::<bool>::new());
        // Marked ones stay; the first unmarked fill up to three.
        assert_eq!(settled(&[n, t, n, n, t]), [t, t, n, n, t]);
        // Three to five marked: as the detector said.
        assert_eq!(settled(&[n, t, t, n, t, n]), [n, t, t, n, t, n]);
        // More than five: the first five.
        assert_eq!(settled(&[t; 7]), [t, t, t, t, t, n, n]);
    }
}
