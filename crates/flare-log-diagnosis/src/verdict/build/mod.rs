//! Findings from the chosen root cause: the culprit, the evidence a person reads (the
//! lines, grouped effects with what they are effects of), the numbers, the action.

mod effects;
mod timeout;

use super::culprit::{self, Calls, Watchdogs};
use super::{absolute, Group};
use crate::collect::{Collected, Hit};
use crate::signatures::Role;
use crate::stats::Scored;
use flare_model::{
    Component, Culprit, DetectorId, Evidence, EvidenceKey, FailureCategory, FailureDetail, Finding,
    FindingKind, JobStage, LineRole, LogLine, LogSignature, Severity, Unit,
};
use std::collections::{BTreeMap, BTreeSet};

/// Supporting lines of the culprit shown after the root line.
const SUPPORTING: usize = 5;
/// Other causes reported beside the root cause.
const OTHERS: usize = 3;

pub(super) struct Context<'a> {
    pub c: &'a Collected,
    /// The pass's hits, ranks resolved.
    pub hits: &'a [Hit],
    pub hosts: &'a BTreeSet<String>,
    pub ranks: &'a BTreeSet<u32>,
    pub watchdogs: &'a Watchdogs,
    pub calls: &'a Calls,
    /// Each rank's last stage and iteration.
    pub progress: &'a std::collections::HashMap<u32, (Option<JobStage>, Option<u64>)>,
    /// The host each rank's lines came from, where they say.
    pub rank_hosts: &'a std::collections::HashMap<u32, String>,
    /// The host most peers lost: (host, reporters naming it, reporters).
    pub peer: Option<(String, usize, usize)>,
    pub named: Option<(u32, usize)>,
    pub year: u16,
}

/// Where the failure is.
#[derive(Clone, Debug, Default, PartialEq)]
struct Place {
    rank: Option<u32>,
    local_rank: Option<u32>,
    host: Option<String>,
    gpu: Option<u32>,
    pci: Option<String>,
    /// How it was found, when not from the root line itself.
    why: Option<String>,
}

impl Place {
    fn describe(&self) -> String {
        let mut s = match (self.rank, self.local_rank) {
            (Some(r), _) => format!("rank {r}"),
            (None, Some(l)) => format!("local rank {l}"),
            _ => String::new(),
        };
        if let Some(h) = &self.host {
            if s.is_empty() {
                s = format!("host {h}");
            } else {
                s.push_str(&format!(" on {h}"));
            }
        }
        if let Some(p) = &self.pci {
            s.push_str(&format!(" (GPU at PCI {p})"));
        } else if let Some(g) = self.gpu {
            if !s.is_empty() {
                s.push_str(&format!(" (GPU {g})"));
            }
        }
        if s.is_empty() {
            "the job".to_string()
        } else {
            s
        }
    }

    fn is_known(&self) -> bool {
        self.rank.is_some() || self.local_rank.is_some() || self.host.is_some()
    }

    fn culprit(&self, component: Component, score: f64) -> Culprit {
        let mut c = Culprit::new(component);
        c.rank = self.rank;
        c.local_gpu = self.gpu;
        c.host = self.host.clone();
        c.element = self.pci.as_ref().map(|p| format!("PCI {p}"));
        c.score = score;
        c
    }
}

fn component(category: FailureCategory, place: &Place) -> Component {
    match category {
        FailureCategory::GpuHardware => Component::Gpu,
        FailureCategory::Interconnect => Component::Link,
        FailureCategory::Network => Component::Nic,
        FailureCategory::Platform | FailureCategory::Configuration if place.rank.is_none() => {
            Component::Host
        }
        _ if place.rank.is_some() || place.local_rank.is_some() => Component::Process,
        _ => Component::Host,
    }
}

/// Whether a failure in `stage` happened at a training iteration: in training, or while
/// saving the checkpoint of one.
fn counts_iterations(stage: JobStage) -> bool {
    matches!(stage, JobStage::Training | JobStage::Checkpointing)
}

fn stage_word(s: JobStage) -> &'static str {
    match s {
        JobStage::Launch => "at launch",
        JobStage::Init => "while setting up process groups",
        JobStage::Loading => "while loading data, the model or a checkpoint",
        JobStage::Training => "in training",
        JobStage::Checkpointing => "while saving a checkpoint",
        JobStage::Evaluation => "in evaluation",
        JobStage::Shutdown => "while shutting down",
        JobStage::Unknown => "at an unknown stage",
    }
}

impl Context<'_> {
    fn hits(&self) -> &[Hit] {
        self.hits
    }

    fn log_line(&self, h: &Hit, role: LineRole) -> LogLine {
        LogLine {
            file: self.c.files[h.file].path.clone(),
            line: h.line,
            text: h.text.clone(),
            role,
            signature: Some(h.reading.signature),
            rank: h.rank,
            host: h.host.clone(),
            time: h.time_text.clone(),
        }
    }

    fn line_role(h: &Hit) -> LineRole {
        h.reading.role.line_role().unwrap_or(LineRole::Symptom)
    }

    /// Where a root cause group is, and how that was found.
    fn place_of(&self, g: &Group) -> Place {
        let hits: Vec<&Hit> = g.hits.iter().map(|&i| &self.hits()[i]).collect();
        let first = hits[0];
        let ranks: BTreeSet<u32> = hits.iter().filter_map(|h| h.rank).collect();
        let hosts: BTreeSet<String> = hits.iter().filter_map(|h| h.host.clone()).collect();
        let sig = first.reading.signature;
        let from = |h: &Hit| Place {
            rank: h.rank,
            local_rank: h.local_rank,
            host: h.host.clone(),
            gpu: h.gpu,
            pci: h.captured.pci.clone(),
            why: None,
        };
        // a network error names the peer it lost; the host most reporters lost is the culprit
        if sig == LogSignature::IbCompletionError {
            if let Some((host, n, m)) =
                culprit::peer_consensus(hits.iter().copied(), &self.c.ip_hosts)
            {
                let host = culprit::known_host(&host, self.hosts).unwrap_or(host);
                if !hosts.contains(&host) || hosts.len() > 1 {
                    return Place {
                        host: Some(host),
                        why: Some(format!(
                            "{n} of the {m} reporters name it as the peer they lost"
                        )),
                        ..Place::default()
                    };
                }
            }
        }
        if sig == LogSignature::SlurmNodeFailure {
            let failed = hits
                .iter()
                .find(|h| h.text.contains("ailure on"))
                .and_then(|h| h.captured.host.clone());
            return Place {
                host: failed,
                ..Place::default()
            };
        }
        if matches!(
            sig,
            LogSignature::SlurmTimeLimit
                | LogSignature::SlurmPreemption
                | LogSignature::SlurmCancelled
        ) {
            return Place::default();
        }
        let single_rank = ranks.len() == 1 && hits.iter().all(|h| h.rank.is_some());
        if single_rank || (ranks.len() <= 1 && hosts.len() <= 1) {
            // the line with the most to say about where
            let best = hits
                .iter()
                .max_by_key(|h| (h.rank.is_some(), h.host.is_some(), h.captured.pci.is_some()))
                .copied()
                .unwrap_or(first);
            let mut p = from(best);
            p.host = p.host.or_else(|| hosts.iter().next().cloned());
            p.rank = p.rank.or_else(|| ranks.iter().next().copied());
            return p;
        }
        if hosts.len() == 1
            && matches!(
                first.reading.category,
                FailureCategory::GpuHardware
                    | FailureCategory::Network
                    | FailureCategory::Interconnect
            )
        {
            return Place {
                host: hosts.iter().next().cloned(),
                ..Place::default()
            };
        }
        // a cause of the whole job's (configuration, platform), or a failure every rank
        // logged alike (a library that crashes everywhere): no one rank is at fault
        let every_rank = ranks.len() >= 2 && ranks == *self.ranks;
        let job_wide = every_rank
            || matches!(
                first.reading.category,
                FailureCategory::Configuration
                    | FailureCategory::Platform
                    | FailureCategory::CollectiveMismatch
            );
        if job_wide {
            return Place {
                why: Some(format!(
                    "logged by {} ranks and {} hosts alike",
                    ranks.len(),
                    hosts.len()
                )),
                ..Place::default()
            };
        }
        // several ranks: the one the launcher saw fail first, else the earliest
        let pick = hits
            .iter()
            .find(|h| h.first_observed)
            .copied()
            .or_else(|| {
                hits.iter()
                    .filter(|h| absolute(&h.time, self.year).is_some())
                    .min_by(|a, b| {
                        absolute(&a.time, self.year)
                            .unwrap_or(0.0)
                            .total_cmp(&absolute(&b.time, self.year).unwrap_or(0.0))
                    })
                    .copied()
            })
            .unwrap_or(first);
        let mut p = from(pick);
        p.why = Some(format!(
            "the first of {} ranks that logged it",
            ranks.len().max(hosts.len())
        ));
        p
    }

    /// Whether `h` belongs to the culprit: its rank, or its host where ranks are unknown.
    fn at(&self, h: &Hit, place: &Place) -> bool {
        if let (Some(a), Some(b)) = (place.rank, h.rank) {
            return a == b;
        }
        matches!((&place.host, &h.host), (Some(a), Some(b)) if a == b)
    }

    /// The root cause finding, and other causes seen beside it.
    pub(super) fn root_cause(&self, root: &Group, others: &[Group]) -> Vec<Finding> {
        let hits = self.hits();
        let first = root.first(hits);
        let place = self.place_of(root);
        let r = &first.reading;
        // the first line of the cause that may be the culprit's (its rank and host, or
        // none said)
        let root_hit = root
            .hits
            .iter()
            .map(|&i| &hits[i])
            .find(|h| {
                place.rank.is_none_or(|r| h.rank.is_none_or(|x| x == r))
                    && place
                        .host
                        .as_ref()
                        .is_none_or(|p| h.host.as_ref().is_none_or(|x| x == p))
            })
            .unwrap_or(first);
        // where the line says nothing of progress (a kernel log), the culprit's own
        let theirs = place.rank.and_then(|x| self.progress.get(&x).copied());
        let stage = root_hit
            .stage
            .or(theirs.and_then(|p| p.0))
            .or(r.stage)
            .unwrap_or(JobStage::Unknown);
        let iteration = root_hit
            .iteration
            .or(theirs.and_then(|p| p.1))
            .filter(|_| counts_iterations(stage));
        let mut cause = r.meaning.clone();
        if let Some(loc) = &root_hit.location {
            cause.push_str(&format!(" (raised at {})", loc.describe()));
        }
        // supporting lines: the culprit's other failure lines, then the root's other reporters
        let in_root: BTreeSet<usize> = root.hits.iter().copied().collect();
        let mut lines = vec![self.log_line(root_hit, Self::line_role(root_hit))];
        let mut supporting: Vec<usize> = (0..hits.len())
            .filter(|i| {
                let h = &hits[*i];
                !in_root.contains(i)
                    && h.reading.role == Role::Symptom
                    && place.is_known()
                    && self.at(h, &place)
            })
            .collect();
        supporting.sort_by_key(|&i| hits[i].order);
        let supporting_idx: BTreeSet<usize> = supporting.iter().copied().collect();
        for &i in supporting.iter().take(SUPPORTING) {
            lines.push(self.log_line(&hits[i], LineRole::Symptom));
        }
        // other causes of real weight on other ranks are reported apart
        let mut also: Vec<&Group> = others
            .iter()
            .filter(|g| {
                let h = g.first(hits);
                h.reading.role == Role::Root
                    && g.weight >= 60
                    && !g.hits.iter().any(|&i| supporting_idx.contains(&i))
            })
            .collect();
        also.sort_by(|a, b| {
            b.weight
                .cmp(&a.weight)
                .then(a.first(hits).order.cmp(&b.first(hits).order))
        });
        let also: Vec<&Group> = also.into_iter().take(OTHERS).collect();
        let mut skip: BTreeSet<usize> = in_root.clone();
        skip.extend(supporting_idx.iter().copied());
        for g in &also {
            skip.extend(g.hits.iter().copied());
        }
        let early = self.too_early(root, &place, &skip);
        let earlier = self.earlier(root, &early);
        skip.extend(early.iter().copied());
        let (cascade, effect_lines) = self.cascade(&place, &cause, &skip, &early);

        let reporting_ranks: BTreeSet<u32> =
            root.hits.iter().filter_map(|&i| hits[i].rank).collect();
        let reporting_hosts: BTreeSet<&String> = root
            .hits
            .iter()
            .filter_map(|&i| hits[i].host.as_ref())
            .collect();
        let mut evidence = Vec::new();
        if !reporting_ranks.is_empty() {
            evidence.push(
                Evidence::new(
                    EvidenceKey::LogRanksReporting,
                    reporting_ranks.len() as f64,
                    None,
                    Unit::Ranks,
                    format!("ranks whose logs show it: {}", list(&reporting_ranks)),
                )
                .decisive(),
            );
        }
        evidence.push(
            Evidence::new(
                EvidenceKey::LogCascadeLines,
                effect_lines as f64,
                None,
                Unit::None,
                format!(
                    "lines explained as its effects, in {} groups",
                    cascade.len()
                ),
            )
            .decisive(),
        );
        if !reporting_hosts.is_empty() {
            evidence.push(Evidence::new(
                EvidenceKey::LogHostsReporting,
                reporting_hosts.len() as f64,
                None,
                Unit::None,
                format!("hosts whose logs show it: {}", list(&reporting_hosts)),
            ));
        }
        if let Some(lead) = self.lead(root, &skip, &in_root) {
            evidence.push(
                Evidence::new(
                    EvidenceKey::LogRootLeadSeconds,
                    lead,
                    None,
                    Unit::Seconds,
                    if lead >= 0.0 {
                        "it came this long before the first effect".into()
                    } else {
                        "it came after the first effect (clocks of different hosts may disagree)"
                            .into()
                    },
                )
                .decisive(),
            );
        }
        if let (Some((host, n, m)), Some(h)) = (&self.peer, &place.host) {
            if host == h {
                evidence.push(
                    Evidence::new(
                        EvidenceKey::LogPeerReports,
                        *n as f64,
                        Some(*m as f64),
                        Unit::None,
                        format!("{n} of {m} reporters of a lost connection name {host}"),
                    )
                    .decisive(),
                );
            }
        }

        let confidence = confidence(root.weight, r.role, root_hit.in_baseline);
        let severity = if root.weight >= 30 && !root_hit.in_baseline {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let mut summary = self.summary(&place, &cause, stage, iteration, effect_lines, r.category);
        let early_lines: u64 = earlier.iter().map(|g| g.lines).sum();
        if early_lines > 0 {
            summary.push_str(&format!(
                "; {early_lines} failure lines came too long before it to be its effects"
            ));
        }
        let action = action(&place, &r.action, r.restart_helps, r.category);
        let culprits = if place.is_known() {
            vec![place.culprit(component(r.category, &place), 1.0)]
        } else {
            Vec::new()
        };
        let mut findings = vec![Finding {
            kind: FindingKind::JobFailure,
            severity,
            summary,
            confidence,
            culprits,
            evidence,
            action,
            iterations: iteration.map(|i| vec![i as u32]).unwrap_or_default(),
            detector: DetectorId::Logs,
            corroborated_by: vec![],
            failure: Some(Box::new(FailureDetail {
                category: r.category,
                stage,
                iteration,
                restart_helps: r.restart_helps,
                lines,
                cascade,
                earlier,
            })),
        }];
        for g in also {
            findings.push(self.also_seen(g));
        }
        findings
    }

    fn summary(
        &self,
        place: &Place,
        cause: &str,
        stage: JobStage,
        iteration: Option<u64>,
        effects: u64,
        category: FailureCategory,
    ) -> String {
        let mut s = format!("{}: {cause}", place.describe());
        s.push_str(&format!(" ({}", category));
        if stage != JobStage::Unknown {
            s.push_str(&format!(", {}", stage_word(stage)));
        }
        if let Some(i) = iteration {
            s.push_str(&format!(" at iteration {i}"));
        }
        s.push(')');
        if let Some(why) = &place.why {
            s.push_str(&format!("; {why}"));
        }
        if effects > 0 {
            s.push_str(&format!("; {effects} other failure lines are its effects"));
        }
        s
    }

    /// A cause seen beside the root cause, reported on its own.
    fn also_seen(&self, g: &Group) -> Finding {
        let hits = self.hits();
        let h = g.first(hits);
        let place = self.place_of(g);
        let r = &h.reading;
        let stage = h.stage.or(r.stage).unwrap_or(JobStage::Unknown);
        Finding {
            kind: FindingKind::JobFailure,
            severity: Severity::Warning,
            summary: format!("also in the logs: {}: {}", place.describe(), r.meaning),
            confidence: confidence(g.weight, r.role, h.in_baseline) * 0.7,
            culprits: if place.is_known() {
                vec![place.culprit(component(r.category, &place), 0.5)]
            } else {
                Vec::new()
            },
            evidence: vec![Evidence::new(
                EvidenceKey::LogRanksReporting,
                g.hits
                    .iter()
                    .filter_map(|&i| hits[i].rank)
                    .collect::<BTreeSet<_>>()
                    .len() as f64,
                None,
                Unit::Ranks,
                "ranks whose logs show it".into(),
            )
            .decisive()],
            action: action(&place, &r.action, r.restart_helps, r.category),
            iterations: vec![],
            detector: DetectorId::Logs,
            corroborated_by: vec![],
            failure: Some(Box::new(FailureDetail {
                category: r.category,
                stage,
                iteration: h.iteration.filter(|_| counts_iterations(stage)),
                restart_helps: r.restart_helps,
                lines: g
                    .hits
                    .iter()
                    .take(SUPPORTING)
                    .map(|&i| self.log_line(&hits[i], Self::line_role(&hits[i])))
                    .collect(),
                cascade: vec![],
                earlier: vec![],
            })),
        }
    }

    /// Ranks that waited at one point in different collectives (the watchdogs' sequence
    /// numbers, or the torch.distributed calls their tracebacks were in): their code
    /// paths diverged. The fewer ranks, when one side is fewer, are the odd ones.
    pub(super) fn mismatch(&self) -> Finding {
        let wd = self.watchdogs;
        let hits = self.hits();
        let (cause, involved, odd): (String, BTreeSet<u32>, BTreeSet<u32>) = if !wd
            .mismatched
            .is_empty()
        {
            let variants: Vec<String> = wd
                .mismatched
                .iter()
                .map(|(r, op, n)| match n {
                    Some(n) => format!("rank {r} in {op} of {n} elements"),
                    None => format!("rank {r} in {op}"),
                })
                .collect();
            (
                format!(
                    "the ranks waited at collective sequence number {} in different collectives ({}): their code paths diverged",
                    wd.common_seq.unwrap_or(0),
                    variants.join(", ")
                ),
                wd.mismatched.iter().map(|(r, _, _)| *r).collect(),
                BTreeSet::new(),
            )
        } else {
            let mut by_call: BTreeMap<&str, (BTreeSet<u32>, Option<&String>)> = BTreeMap::new();
            for (r, (call, loc)) in &self.calls.by_rank {
                let e = by_call
                    .entry(call.as_str())
                    .or_insert((BTreeSet::new(), loc.as_ref()));
                e.0.insert(*r);
            }
            let variants: Vec<String> = by_call
                .iter()
                .map(|(call, (ranks, loc))| {
                    let at = loc.map(|l| format!(" at {l}")).unwrap_or_default();
                    format!(
                        "rank{} {} in {call}{at}",
                        if ranks.len() > 1 { "s" } else { "" },
                        list(ranks)
                    )
                })
                .collect();
            (
                format!(
                    "when their collectives failed, the ranks were in different torch.distributed calls ({}): their code paths diverged",
                    variants.join("; ")
                ),
                self.calls.by_rank.keys().copied().collect(),
                self.calls.odd.clone(),
            )
        };
        // the lines: the odd ranks' first, then one of the others
        let mut shown: Vec<usize> = Vec::new();
        for want_odd in [true, false] {
            for (i, h) in hits.iter().enumerate() {
                let Some(r) = h.rank else { continue };
                let relevant = (h.reading.signature == LogSignature::WatchdogTimeout
                    && h.captured.op.is_some())
                    || h.collective.is_some();
                if relevant
                    && involved.contains(&r)
                    && odd.contains(&r) == want_odd
                    && !shown.iter().any(|&j| hits[j].rank == Some(r))
                    && shown.len() < SUPPORTING
                    && (want_odd || shown.len() < odd.len() + 1)
                {
                    shown.push(i);
                }
            }
        }
        let lines: Vec<LogLine> = shown
            .iter()
            .map(|&i| self.log_line(&hits[i], LineRole::Root))
            .collect();
        let skip: BTreeSet<usize> = shown.iter().copied().collect();
        let place = if odd.len() == 1 {
            Place {
                rank: odd.first().copied(),
                host: hits
                    .iter()
                    .find(|h| h.rank == odd.first().copied() && h.host.is_some())
                    .and_then(|h| h.host.clone()),
                why: Some(format!(
                    "the one rank in another call than the other {}",
                    involved.len() - 1
                )),
                ..Place::default()
            }
        } else {
            Place::default()
        };
        let (cascade, effects) = self.cascade(&place, &cause, &skip, &BTreeSet::new());
        let mut evidence = Vec::new();
        if let Some(seq) = wd.common_seq.filter(|_| !wd.mismatched.is_empty()) {
            evidence.push(
                Evidence::new(
                    EvidenceKey::CollectiveSeqId,
                    seq as f64,
                    None,
                    Unit::None,
                    "the sequence number the ranks waited at".into(),
                )
                .decisive(),
            );
        }
        evidence.push(
            Evidence::new(
                EvidenceKey::RanksWaiting,
                involved.len() as f64,
                None,
                Unit::Ranks,
                format!("ranks whose collective failed: {}", list(&involved)),
            )
            .decisive(),
        );
        evidence.push(
            Evidence::new(
                EvidenceKey::LogCascadeLines,
                effects as f64,
                None,
                Unit::None,
                "lines explained as its effects".into(),
            )
            .decisive(),
        );
        let stage = shown
            .first()
            .and_then(|&i| hits[i].stage)
            .unwrap_or(JobStage::Unknown);
        let iteration = shown
            .first()
            .and_then(|&i| hits[i].iteration)
            .filter(|_| counts_iterations(stage));
        Finding {
            kind: FindingKind::JobFailure,
            severity: Severity::Critical,
            summary: format!(
                "{}: {cause} (collective_mismatch); {effects} other failure lines are its effects",
                place.describe()
            ),
            confidence: 0.75,
            culprits: if place.is_known() {
                vec![place.culprit(Component::Process, 1.0)]
            } else {
                Vec::new()
            },
            evidence,
            action: "make every rank issue the same collectives in the same order with the same shapes (a rank-dependent branch, data-dependent control flow, or a collective inside a condition); TORCH_DISTRIBUTED_DEBUG=DETAIL names each rank's op".into(),
            iterations: iteration.map(|i| vec![i as u32]).unwrap_or_default(),
            detector: DetectorId::Logs,
            corroborated_by: vec![],
            failure: Some(Box::new(FailureDetail {
                category: FailureCategory::CollectiveMismatch,
                stage,
                iteration,
                restart_helps: Some(false),
                lines,
                cascade,
                earlier: vec![],
            })),
        }
    }

    /// No known cause: the most unusual error-looking line, reported as unexplained.
    pub(super) fn unexplained(&self, scored: &[Scored]) -> Option<Finding> {
        let top = scored.first()?;
        let a = &top.anomaly;
        let place = Place {
            rank: a.rank,
            host: a.host.clone(),
            ..Place::default()
        };
        let line = LogLine {
            file: self.c.files[a.file].path.clone(),
            line: a.line,
            text: a.text.clone(),
            role: LineRole::Anomaly,
            signature: None,
            rank: a.rank,
            host: a.host.clone(),
            time: None,
        };
        let mut lines = vec![line];
        for s in scored.iter().skip(1).take(SUPPORTING - 1) {
            lines.push(LogLine {
                file: self.c.files[s.anomaly.file].path.clone(),
                line: s.anomaly.line,
                text: s.anomaly.text.clone(),
                role: LineRole::Anomaly,
                signature: None,
                rank: s.anomaly.rank,
                host: s.anomaly.host.clone(),
                time: None,
            });
        }
        let (cascade, effects) = self.cascade(
            &place,
            "an error no known signature describes",
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        let stage = a.stage.unwrap_or(JobStage::Unknown);
        Some(Finding {
            kind: FindingKind::JobFailure,
            severity: Severity::Warning,
            summary: format!(
                "{}: no known failure signature; the most unusual error line is shown (logged by {:.0}% of the files{})",
                place.describe(),
                top.spread * 100.0,
                if self.c.templates.has_baseline() { ", never in the good runs" } else { "" }
            ),
            confidence: 0.25,
            culprits: if place.is_known() {
                vec![place.culprit(Component::Process, 0.3)]
            } else {
                Vec::new()
            },
            evidence: vec![
                Evidence::new(
                    EvidenceKey::LogHostsReporting,
                    top.spread,
                    None,
                    Unit::None,
                    "share of the job's files whose logs hold this line's template".into(),
                )
                .decisive(),
                Evidence::new(
                    EvidenceKey::LogCascadeLines,
                    effects as f64,
                    None,
                    Unit::None,
                    "known effect lines besides".into(),
                ),
            ],
            action: "the cause is not one Flare knows: read the line shown and those around it; nothing here justifies draining a node".into(),
            iterations: vec![],
            detector: DetectorId::Logs,
            corroborated_by: vec![],
            failure: Some(Box::new(FailureDetail {
                category: FailureCategory::Unknown,
                stage,
                iteration: a.iteration.filter(|_| counts_iterations(stage)),
                restart_helps: None,
                lines,
                cascade,
                earlier: vec![],
            })),
        })
    }

    /// Only effects: the cascade's structure names the culprit; the cause is unknown.
    pub(super) fn cascade_only(&self) -> Option<Finding> {
        let hits = self.hits();
        if !hits.iter().any(|h| h.reading.role == Role::Cascade) {
            return None;
        }
        let wd = self.watchdogs;
        let mut place = Place::default();
        let mut why = String::new();
        if wd.behind.len() == 1 {
            place.rank = wd.behind.iter().next().copied();
            why = format!(
                "its watchdog stood at another collective than the {} other ranks'",
                wd.waiting.len().saturating_sub(1)
            );
        } else if !wd.silent.is_empty() && wd.silent.len() <= 2 {
            place.rank = wd.silent.iter().next().copied();
            why = format!(
                "{} ranks said they waited for a peer (a timeout, a lost connection) and it did not",
                wd.waited.len()
            );
        } else if let Some((h, n, m)) = &self.peer {
            place.host = Some(h.clone());
            why = format!("{n} of {m} reporters of a lost connection name it");
        } else if let Some((r, n)) = self.named {
            place.rank = Some(r);
            why = format!("{n} lines say they wait for it");
        } else if let Some(h) = hits.iter().find(|h| h.first_observed) {
            place.rank = h.rank;
            place.host = h.host.clone();
            why = "torchrun saw it fail first".into();
        }
        if let (Some(r), None) = (place.rank, &place.host) {
            place.host = self.rank_hosts.get(&r).cloned();
        }
        // a timeout the job set short, with no error anywhere: the likeliest reading is a
        // rank busy alone past it, not a fault
        let short = timeout::short_collective_timeout(hits);
        let cause = match short {
            Some(ms) => format!(
                "the collectives' timeout ({}, set below PyTorch's default of 10 min) ran out and no line shows an error",
                timeout::describe_ms(ms)
            ),
            None => "the logs show only effects: no line says why it stopped".to_string(),
        };
        let (cascade, effects) = self.cascade(&place, &cause, &BTreeSet::new(), &BTreeSet::new());
        let known = place.is_known();
        let (stage, iteration) = place
            .rank
            .and_then(|r| self.progress.get(&r).copied())
            .unwrap_or((None, None));
        let stage = stage.unwrap_or(JobStage::Unknown);
        let iteration = iteration.filter(|_| counts_iterations(stage));
        if let Some(i) = iteration {
            why.push_str(&format!("; its last logged iteration was {i}"));
        }
        Some(Finding {
            kind: FindingKind::JobFailure,
            severity: Severity::Critical,
            summary: match (known, short.is_some()) {
                (true, false) => format!("{} stopped first ({why}); its logs here say nothing of why; {effects} failure lines are effects", place.describe()),
                (false, false) => format!("the job failed, but its logs hold only effects ({effects} lines): nothing says where it started"),
                (true, true) => format!("{cause}: {} stopped first ({why}); {effects} failure lines are effects", place.describe()),
                (false, true) => format!("{cause}; {effects} failure lines are effects"),
            },
            confidence: match (known, short.is_some()) {
                (true, _) => 0.35,
                (false, true) => 0.3,
                (false, false) => 0.1,
            },
            culprits: if known {
                vec![place.culprit(Component::Process, 0.5)]
            } else {
                Vec::new()
            },
            evidence: vec![
                Evidence::new(
                    EvidenceKey::RanksWaiting,
                    wd.waited.len() as f64,
                    None,
                    Unit::Ranks,
                    format!(
                        "ranks that said they waited for a peer (timeouts, lost connections): {}",
                        list(&wd.waited)
                    ),
                )
                .decisive(),
                Evidence::new(
                    EvidenceKey::LogCascadeLines,
                    effects as f64,
                    None,
                    Unit::None,
                    "effect lines".into(),
                )
                .decisive(),
            ],
            action: match (known, short) {
                (_, Some(ms)) => format!("raise the process group's timeout (`init_process_group(timeout=...)`, now {}) above the longest stretch one rank works while the others wait (evaluation or checkpointing on rank 0, data preparation), or make the others wait for it at a barrier with a long timeout; if the ranks still time out at PyTorch's default, look for the rank that stopped (its log, its stack with py-spy dump)", timeout::describe_ms(ms)),
                (true, None) => format!("look at {} itself: its full log, its host's kernel log (dmesg: Xid, OOM killer), and, if it still runs, its stack (py-spy dump); nothing here justifies draining a node yet", place.describe()),
                (false, None) => "collect the logs of every rank and the hosts' kernel logs; these hold only the effects".into(),
            },
            iterations: vec![],
            detector: DetectorId::Logs,
            corroborated_by: vec![],
            failure: Some(Box::new(FailureDetail {
                category: if short.is_some() {
                    FailureCategory::Configuration
                } else {
                    FailureCategory::Unknown
                },
                stage,
                iteration,
                restart_helps: None,
                lines: vec![],
                cascade,
                earlier: vec![],
            })),
        })
    }
}

fn list<T: std::fmt::Display>(items: &BTreeSet<T>) -> String {
    let shown: Vec<String> = items.iter().take(16).map(|x| x.to_string()).collect();
    let more = items.len().saturating_sub(16);
    if shown.is_empty() {
        "none".into()
    } else if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

fn confidence(weight: u8, role: Role, in_baseline: bool) -> f64 {
    if in_baseline {
        return 0.2;
    }
    match (role, weight) {
        (Role::Root, w) if w >= 90 => 0.9,
        (Role::Root, w) if w >= 70 => 0.8,
        (Role::Root, _) => 0.6,
        (Role::Symptom, w) if w >= 40 => 0.45,
        _ => 0.35,
    }
}

/// The action, with where to take it and whether to run again.
fn action(place: &Place, what: &str, restart: Option<bool>, category: FailureCategory) -> String {
    let mut s = if place.is_known() {
        format!("{}: {what}.", place.describe())
    } else {
        format!("{what}.")
    };
    let restart_word = match (restart, category) {
        (
            Some(true),
            FailureCategory::GpuHardware | FailureCategory::Network | FailureCategory::Interconnect,
        ) => " A restart can succeed once the faulty part is out of the job.",
        (Some(true), _) => " Restarting the job can succeed.",
        (Some(false), _) => " Restarting it unchanged will fail again.",
        (None, _) => "",
    };
    s.push_str(restart_word);
    s
}
