//! One answer from traces or dumps and the job's logs. A trace or a Flight Recorder dump
//! says where the job stopped or slowed (which rank never reached the collective); the
//! logs often say why (that rank's GPU fell off the bus). When both name the same rank,
//! or the logs name the host the rank ran on, they are one finding: led by the one that
//! knows the cause (the logs, when a known signature names it; else the trace), with the
//! other's summary, evidence and culprits joined and recorded as corroboration. Log
//! findings that match nothing stay findings of their own; the logs' guess from unusual
//! lines or effects alone drops to information beside a trace that localizes, and when
//! the two sources blame different places the document says so rather than pick one.

use crate::LogDiagnosis;
use flare_model::{Corroboration, Culprit, FailureCategory, Finding, Severity};
use std::collections::BTreeSet;

/// Findings and notes after merging.
#[derive(Debug, Default)]
pub struct Merged {
    /// Not sorted: the findings document orders them.
    pub findings: Vec<Finding>,
    pub notes: Vec<String>,
}

/// The ranks and hosts a finding blames, with the hosts of its ranks and the ranks of
/// its hosts where the logs say them.
#[derive(Debug, Default)]
struct Places {
    ranks: BTreeSet<u32>,
    hosts: BTreeSet<String>,
}

impl Places {
    fn of(culprits: &[Culprit], logs: &LogDiagnosis) -> Places {
        let mut p = Places::default();
        for c in culprits {
            if let Some(r) = c.rank {
                p.ranks.insert(r);
                if let Some(h) = logs.rank_hosts.get(&r) {
                    p.hosts.insert(h.clone());
                }
            }
            if let Some(h) = &c.host {
                p.hosts.insert(h.clone());
            }
        }
        for (r, h) in &logs.rank_hosts {
            if p.hosts.contains(h) {
                p.ranks.insert(*r);
            }
        }
        p
    }

    fn meets(&self, other: &Places) -> bool {
        !self.ranks.is_disjoint(&other.ranks) || !self.hosts.is_disjoint(&other.hosts)
    }

    fn is_empty(&self) -> bool {
        self.ranks.is_empty() && self.hosts.is_empty()
    }
}

/// Whether the logs know the cause (a signature, not only effects or an unusual line).
fn knows_cause(f: &Finding) -> bool {
    f.failure
        .as_ref()
        .is_some_and(|d| d.category != FailureCategory::Unknown)
}

/// Merges the logs' findings into the findings of traces or dumps of the same job.
/// `source` names the other evidence for notes (`Flight Recorder dumps`, `the trace`).
pub fn merge(findings: Vec<Finding>, logs: &LogDiagnosis, source: &str) -> Merged {
    let mut out = findings;
    // the logs say where each rank ran: every culprit rank gets its host
    for f in out.iter_mut() {
        for c in f.culprits.iter_mut() {
            if let (None, Some(r)) = (&c.host, c.rank) {
                c.host = logs.rank_hosts.get(&r).cloned();
            }
        }
    }
    let places: Vec<Places> = out.iter().map(|f| Places::of(&f.culprits, logs)).collect();
    let other_localizes = out.iter().any(Finding::localizes);
    let mut explained = vec![false; out.len()];
    let mut notes = Vec::new();
    let mut unmatched = Vec::new();
    for (i, l) in logs.findings.iter().enumerate() {
        let lp = Places::of(&l.culprits, logs);
        let target = (!lp.is_empty())
            .then(|| (0..out.len()).find(|&k| !explained[k] && places[k].meets(&lp)))
            .flatten();
        match target {
            Some(k) => {
                explained[k] = true;
                let t = std::mem::replace(&mut out[k], l.clone());
                out[k] = join(t, l, source);
            }
            None => {
                let mut l = l.clone();
                if i == 0 && knows_cause(&l) {
                    if let Some(t) = out.iter().find(|f| f.localizes()) {
                        notes.push(disagreement(&l, t, source, lp.is_empty()));
                    }
                } else if !knows_cause(&l) && other_localizes {
                    // a guess from unusual lines or effects alone, beside evidence that localizes
                    l.severity = Severity::Info;
                }
                unmatched.push(l);
            }
        }
    }
    out.extend(unmatched);
    Merged {
        findings: out,
        notes,
    }
}

/// One finding from a trace's (or dumps') finding `t` and a log finding `l` about the same
/// place. The one that knows the cause leads (its kind, summary, action and culprits
/// come first); the other's summary follows, its evidence and culprits join, and it is
/// recorded as corroboration.
fn join(t: Finding, l: &Finding, source: &str) -> Finding {
    let logs_lead = knows_cause(l);
    let (mut lead, other) = if logs_lead {
        (l.clone(), t)
    } else {
        (t, l.clone())
    };
    lead.summary = if logs_lead {
        format!(
            "{}. {}: {}",
            lead.summary,
            capitalized(source),
            other.summary
        )
    } else {
        format!("{}. Its logs: {}", lead.summary, other.summary)
    };
    for e in &other.evidence {
        if !lead.evidence.iter().any(|p| p.metric == e.metric) {
            lead.evidence.push(e.clone().decisive_if(false));
        }
    }
    // each names what the other cannot: the dumps the rank, the logs its host and GPU
    let mut joined = vec![false; other.culprits.len()];
    for c in lead.culprits.iter_mut() {
        if let Some(k) = other.culprits.iter().position(|o| same_place(c, o)) {
            joined[k] = true;
            let o = &other.culprits[k];
            c.rank = c.rank.or(o.rank);
            c.host = c.host.take().or_else(|| o.host.clone());
            c.element = c.element.take().or_else(|| o.element.clone());
            c.local_gpu = c.local_gpu.or(o.local_gpu);
        }
    }
    for (o, _) in other.culprits.iter().zip(&joined).filter(|(_, j)| !**j) {
        let mut o = o.clone();
        o.score *= 0.5;
        lead.culprits.push(o);
    }
    lead.corroborated_by.push(Corroboration {
        detector: other.detector,
        kind: other.kind,
        confidence: other.confidence,
    });
    lead.corroborated_by.extend(other.corroborated_by);
    // two independent sources agreeing: more than either alone, never certainty
    let (hi, lo) = (
        lead.confidence.max(other.confidence),
        lead.confidence.min(other.confidence),
    );
    lead.confidence = (hi + 0.5 * (1.0 - hi) * lo).min(0.999);
    lead.severity = lead.severity.max(other.severity);
    if lead.iterations.is_empty() {
        lead.iterations = other.iterations;
    }
    if lead.failure.is_none() {
        lead.failure = other.failure;
    }
    lead
}

/// Whether two culprits are the same place: the same rank, or the same host where one
/// of them names no rank.
fn same_place(a: &Culprit, b: &Culprit) -> bool {
    match (a.rank, b.rank) {
        (Some(x), Some(y)) => x == y,
        _ => a.host.is_some() && a.host == b.host,
    }
}

fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn disagreement(l: &Finding, t: &Finding, source: &str, logs_name_nothing: bool) -> String {
    let who = |f: &Finding| {
        f.culprits
            .iter()
            .map(Culprit::describe)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if logs_name_nothing {
        format!(
            "the logs' root cause names no rank or host ({}); {source} blame {}: whether they are one failure is not decided here",
            l.summary,
            who(t)
        )
    } else {
        format!(
            "the logs and {source} blame different places: the logs {} ({}), {source} {}; both are shown with their own evidence{}",
            who(l),
            l.summary,
            who(t),
            if l.culprits.iter().any(|c| c.rank.is_none()) && t.culprits.iter().any(|c| c.host.is_none()) {
                " (the logs do not say which host every rank ran on, so a host and a rank could not be matched)"
            } else {
                ""
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{
        Component, DetectorId, Evidence, EvidenceKey, FailureDetail, FindingKind, JobStage, Unit,
    };
    use std::collections::BTreeMap;

    fn culprit(rank: Option<u32>, host: Option<&str>) -> Culprit {
        let mut c = Culprit::new(Component::Process);
        c.rank = rank;
        c.host = host.map(str::to_string);
        c
    }

    /// A trace's finding blaming `ranks`.
    fn traced(kind: FindingKind, ranks: &[u32]) -> Finding {
        Finding {
            kind,
            severity: Severity::Critical,
            summary: format!("{kind} on {ranks:?}"),
            confidence: 0.9,
            culprits: ranks.iter().map(|&r| culprit(Some(r), None)).collect(),
            evidence: vec![Evidence::new(
                EvidenceKey::RanksMissing,
                ranks.len() as f64,
                None,
                Unit::Ranks,
                String::new(),
            )
            .decisive()],
            action: "inspect the ranks".into(),
            iterations: vec![],
            detector: DetectorId::FlightRecorder,
            corroborated_by: vec![],
            failure: None,
        }
    }

    /// A log finding of `category` at a rank or a host.
    fn logged(category: FailureCategory, rank: Option<u32>, host: Option<&str>) -> Finding {
        let mut c = culprit(rank, host);
        c.component = Component::Gpu;
        c.element = host.map(|_| "PCI 0000:3a:00".to_string());
        Finding {
            kind: FindingKind::JobFailure,
            severity: Severity::Critical,
            summary: format!("{category} at {rank:?} {host:?}"),
            confidence: if category == FailureCategory::Unknown {
                0.25
            } else {
                0.8
            },
            culprits: if rank.is_some() || host.is_some() {
                vec![c]
            } else {
                vec![]
            },
            evidence: vec![Evidence::new(
                EvidenceKey::LogCascadeLines,
                12.0,
                None,
                Unit::None,
                String::new(),
            )],
            action: format!("fix {category}"),
            iterations: vec![],
            detector: DetectorId::Logs,
            corroborated_by: vec![],
            failure: Some(Box::new(FailureDetail {
                category,
                stage: JobStage::Training,
                iteration: None,
                restart_helps: None,
                lines: vec![],
                cascade: vec![],
                earlier: vec![],
            })),
        }
    }

    fn logs(findings: Vec<Finding>, rank_hosts: &[(u32, &str)]) -> LogDiagnosis {
        LogDiagnosis {
            findings,
            files: 1,
            lines: 1,
            baseline_lines: 0,
            ranks: BTreeSet::new(),
            hosts: BTreeSet::new(),
            rank_hosts: rank_hosts
                .iter()
                .map(|&(r, h)| (r, h.to_string()))
                .collect::<BTreeMap<_, _>>(),
            notes: vec![],
        }
    }

    /// What a merged finding looks like: kind, severity, culprits (rank, host), corroborating
    /// detectors, failure category.
    type Shape = (
        FindingKind,
        Severity,
        Vec<(Option<u32>, Option<String>)>,
        Vec<DetectorId>,
        Option<FailureCategory>,
    );

    fn shape(f: &Finding) -> Shape {
        (
            f.kind,
            f.severity,
            f.culprits
                .iter()
                .map(|c| (c.rank, c.host.clone()))
                .collect(),
            f.corroborated_by.iter().map(|c| c.detector).collect(),
            f.failure.as_ref().map(|d| d.category),
        )
    }

    fn at(rank: u32, host: Option<&str>) -> (Option<u32>, Option<String>) {
        (Some(rank), host.map(str::to_string))
    }

    #[test]
    fn merges() {
        use FailureCategory as C;
        use FindingKind as K;
        use Severity::*;
        let node1 = Some("gpu-node-1");
        // (name, trace findings, log findings, rank -> host, merged findings, notes)
        type Case<'a> = (
            &'a str,
            Vec<Finding>,
            Vec<Finding>,
            Vec<(u32, &'a str)>,
            Vec<Shape>,
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                "an Xid on the host of a rank the dumps name: one finding, the logs' cause first",
                vec![traced(K::Hang, &[9, 14])],
                vec![logged(C::GpuHardware, None, node1)],
                vec![(9, "gpu-node-1"), (14, "gpu-node-2")],
                vec![(
                    K::JobFailure,
                    Critical,
                    vec![at(9, node1), at(14, Some("gpu-node-2"))],
                    vec![DetectorId::FlightRecorder],
                    Some(C::GpuHardware),
                )],
                0,
            ),
            (
                "logs with only effects at the rank the dumps name: the dumps lead",
                vec![traced(K::Hang, &[1])],
                vec![logged(C::Unknown, Some(1), None)],
                vec![],
                vec![(
                    K::Hang,
                    Critical,
                    vec![at(1, None)],
                    vec![DetectorId::Logs],
                    Some(C::Unknown),
                )],
                0,
            ),
            (
                "the two name different ranks: both kept, and said",
                vec![traced(K::SlowGpu, &[3])],
                vec![logged(C::OutOfMemory, Some(7), None)],
                vec![],
                vec![
                    (K::SlowGpu, Critical, vec![at(3, None)], vec![], None),
                    (
                        K::JobFailure,
                        Critical,
                        vec![at(7, None)],
                        vec![],
                        Some(C::OutOfMemory),
                    ),
                ],
                1,
            ),
            (
                "an unusual line that names nothing beside a trace that localizes: information",
                vec![traced(K::SlowGpu, &[3])],
                vec![logged(C::Unknown, None, None)],
                vec![],
                vec![
                    (K::SlowGpu, Critical, vec![at(3, None)], vec![], None),
                    (K::JobFailure, Info, vec![], vec![], Some(C::Unknown)),
                ],
                0,
            ),
            (
                "a host the logs never tie to a rank: not matched, and said",
                vec![traced(K::Hang, &[9])],
                vec![logged(C::GpuHardware, None, node1)],
                vec![],
                vec![
                    (K::Hang, Critical, vec![at(9, None)], vec![], None),
                    (
                        K::JobFailure,
                        Critical,
                        vec![(None, node1.map(str::to_string))],
                        vec![],
                        Some(C::GpuHardware),
                    ),
                ],
                1,
            ),
            (
                "nothing in the trace: the logs' findings as they are",
                vec![],
                vec![logged(C::OutOfMemory, Some(7), None)],
                vec![(7, "node-3")],
                vec![(
                    K::JobFailure,
                    Critical,
                    vec![at(7, None)],
                    vec![],
                    Some(C::OutOfMemory),
                )],
                0,
            ),
        ];
        for (name, traced, logged, hosts, want, notes) in cases {
            let m = merge(traced, &logs(logged, &hosts), "the dumps");
            let got: Vec<Shape> = m.findings.iter().map(shape).collect();
            assert_eq!(got, want, "{name}");
            assert_eq!(m.notes.len(), notes, "{name}: {:?}", m.notes);
        }
    }

    #[test]
    fn the_lead_keeps_its_action_and_the_other_its_say() {
        let m = merge(
            vec![traced(FindingKind::Hang, &[9])],
            &logs(
                vec![logged(FailureCategory::GpuHardware, Some(9), None)],
                &[],
            ),
            "the Flight Recorder dumps",
        );
        let f = &m.findings[0];
        assert_eq!(f.action, "fix gpu_hardware");
        assert!(
            f.summary
                .contains(". The Flight Recorder dumps: hang on [9]"),
            "{}",
            f.summary
        );
        // the dumps' evidence joins, never decisive in another's finding
        let e = f
            .evidence
            .iter()
            .find(|e| e.metric == EvidenceKey::RanksMissing)
            .expect("the dumps' evidence");
        assert!(!e.decisive);
        assert!(f.confidence > 0.9 && f.confidence < 1.0);
    }
}
