//! One finding per culprit. Several detectors can name the same device by different
//! methods (self-time against collective peers, the graph search, per-rank metrics,
//! machine metrics); a person wants one finding with all the evidence, and the agreement
//! of independent methods is itself evidence.

use flare_model::{Component, Corroboration, Finding, Severity};

/// What a culprit is, for merging: findings naming the same thing merge.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identity {
    Rank(u32),
    Nic(u32, u32),
    Element(String),
    Stage(u32),
    Node(u32),
}

fn identity(f: &Finding) -> Option<Identity> {
    if f.severity < Severity::Warning {
        return None;
    }
    let c = f.culprits.first()?;
    match c.component {
        Component::Gpu | Component::Host | Component::Process => match (c.rank, c.node) {
            (Some(r), _) => Some(Identity::Rank(r)),
            (None, Some(n)) => Some(Identity::Node(n)),
            _ => None,
        },
        Component::Nic | Component::Link => match (c.node, c.local_gpu) {
            (Some(n), Some(g)) => Some(Identity::Nic(n, g)),
            _ => c.element.clone().map(Identity::Element),
        },
        Component::Switch | Component::Network => c.element.clone().map(Identity::Element),
        Component::Stage => c.stage.map(Identity::Stage),
    }
}

/// Merges findings that blame the same culprit into the most confident one, which keeps
/// its kind and summary and gains the others' evidence (keys it lacks) and their
/// detectors in `corroborated_by`. Findings that blame nothing (cluster-wide information) stay as they are.
/// Each finding's decisive evidence is settled first ([`Finding::settle_decisive`]): the
/// primary's stays decisive, the evidence merged into it never is.
pub fn consolidate(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::with_capacity(findings.len());
    let mut ids: Vec<Option<Identity>> = Vec::new();
    let mut sorted = findings;
    sorted.sort_by(Finding::by_importance);
    for mut f in sorted {
        f.settle_decisive();
        let id = identity(&f);
        let existing = id
            .as_ref()
            .and_then(|id| ids.iter().position(|x| x.as_ref() == Some(id)));
        match existing {
            None => {
                ids.push(id);
                out.push(f);
            }
            Some(k) => {
                let primary = &mut out[k];
                for e in f.evidence {
                    if !primary.evidence.iter().any(|p| p.metric == e.metric) {
                        primary.evidence.push(e.decisive_if(false));
                    }
                }
                primary.corroborated_by.push(Corroboration {
                    detector: f.detector,
                    kind: f.kind,
                    confidence: f.confidence,
                });
                // Independent methods agreeing: a little more confidence, never certainty.
                primary.confidence = (primary.confidence
                    + 0.5 * (1.0 - primary.confidence) * f.confidence)
                    .min(0.999);
                if primary.iterations.is_empty() || f.iterations.is_empty() {
                    primary.iterations.clear();
                } else {
                    primary.iterations.extend(f.iterations);
                    primary.iterations.sort_unstable();
                    primary.iterations.dedup();
                }
            }
        }
    }
    out.sort_by(Finding::by_importance);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{Culprit, DetectorId, Evidence, EvidenceKey, FindingKind, Unit};

    fn finding(
        detector: DetectorId,
        key: EvidenceKey,
        kind: FindingKind,
        rank: u32,
        confidence: f64,
    ) -> Finding {
        let mut c = Culprit::new(Component::Gpu);
        c.rank = Some(rank);
        Finding {
            kind,
            severity: Severity::Warning,
            summary: format!("{detector} on {rank}"),
            confidence,
            culprits: vec![c],
            evidence: vec![Evidence::new(key, 1.0, None, Unit::None, String::new())],
            action: String::new(),
            iterations: vec![],
            detector,
            corroborated_by: vec![],
            failure: None,
        }
    }

    #[test]
    fn same_culprit_merges_into_the_most_confident() {
        let out = consolidate(vec![
            finding(
                DetectorId::SlowRank,
                EvidenceKey::SelfTimeExcess,
                FindingKind::SlowGpu,
                7,
                0.9,
            ),
            finding(
                DetectorId::Graph,
                EvidenceKey::BlameShare,
                FindingKind::SlowGpu,
                7,
                0.95,
            ),
            finding(
                DetectorId::Graph,
                EvidenceKey::BlameShare,
                FindingKind::SlowGpu,
                3,
                0.5,
            ),
            finding(
                DetectorId::Metrics,
                EvidenceKey::BlameShare,
                FindingKind::SlowGpu,
                7,
                0.6,
            ),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].detector, DetectorId::Graph);
        assert_eq!(out[0].culprits[0].rank, Some(7));
        assert!(out[0].confidence > 0.95 && out[0].confidence < 1.0);
        let by: Vec<_> = out[0]
            .corroborated_by
            .iter()
            .map(|c| (c.detector, c.kind, c.confidence))
            .collect();
        assert_eq!(
            by,
            [
                (DetectorId::SlowRank, FindingKind::SlowGpu, 0.9),
                (DetectorId::Metrics, FindingKind::SlowGpu, 0.6)
            ]
        );
        // Each key once: the primary's own, then what the others added.
        let keys: Vec<_> = out[0].evidence.iter().map(|e| e.metric).collect();
        assert_eq!(keys, [EvidenceKey::BlameShare, EvidenceKey::SelfTimeExcess]);
        // The primary's own evidence decided it; what the others added did not.
        let decisive: Vec<_> = out[0].evidence.iter().map(|e| e.decisive).collect();
        assert_eq!(decisive, [true, false]);
        assert_eq!(out[1].culprits[0].rank, Some(3));
        assert!(out[1].corroborated_by.is_empty());
    }

    #[test]
    fn information_does_not_merge() {
        let mut a = finding(
            DetectorId::Metrics,
            EvidenceKey::RelativeScore,
            FindingKind::SlowGpu,
            7,
            0.9,
        );
        a.severity = Severity::Info;
        let b = finding(
            DetectorId::SlowRank,
            EvidenceKey::SelfTimeExcess,
            FindingKind::SlowGpu,
            7,
            0.8,
        );
        let out = consolidate(vec![a, b]);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|f| f.corroborated_by.is_empty()));
    }
}
