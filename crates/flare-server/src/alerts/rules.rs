//! When a finding pages someone: the alert state machine, pure.
//!
//! An alert is one finding followed over windows: same detector, kind and culprits (see
//! [`Finding::subject_key`]). It **opens** when its finding is in [`AlertRules::open_after`]
//! consecutive complete windows (a critical one, a hang, at once), **escalates** when its
//! severity rises, and **resolves** after [`AlertRules::resolve_after`] consecutive
//! windows without it. So one noisy window pages nobody, and a finding that flickers
//! does not open and close an alert every window.

use flare_model::{Finding, Severity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The thresholds of the state machine.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertRules {
    /// Findings below this severity never alert.
    pub min_severity: Severity,
    /// Consecutive windows with the finding before its alert opens (criticals: at once).
    pub open_after: u32,
    /// Consecutive windows without it before an open alert resolves.
    pub resolve_after: u32,
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules {
            min_severity: Severity::Warning,
            open_after: 2,
            resolve_after: 2,
        }
    }
}

/// One alert's state, kept between windows (stored as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertState {
    pub open: bool,
    /// Consecutive windows with the finding, and without it.
    pub streak: u32,
    pub missing: u32,
    /// The severity it was last reported at (opened or escalated).
    pub severity: Severity,
    pub opened_window: Option<u64>,
    pub last_window: u64,
    /// Whether its opening was sent (not silenced): its resolution is sent only then.
    pub notified: bool,
    /// The latest finding behind it.
    pub finding: Finding,
}

/// What happened to an alert in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    Opened,
    Escalated,
    Resolved,
}

/// An alert that changed: its key, what happened, and its state then.
pub type Change = (String, Transition, AlertState);

/// Advances every alert of a job by one complete window with `findings`; returns the
/// changes: openings and escalations in key order, then resolutions.
pub fn advance(
    states: &mut BTreeMap<String, AlertState>,
    window: u64,
    findings: &[Finding],
    rules: &AlertRules,
) -> Vec<Change> {
    let mut present: BTreeMap<String, &Finding> = BTreeMap::new();
    for f in findings.iter().filter(|f| f.severity >= rules.min_severity) {
        let k = f.subject_key();
        // Two findings with one key: the more severe stands for both.
        if present.get(&k).is_none_or(|p| f.severity > p.severity) {
            present.insert(k, f);
        }
    }
    let mut out = Vec::new();
    for (k, f) in &present {
        let s = states.entry(k.clone()).or_insert_with(|| AlertState {
            open: false,
            streak: 0,
            missing: 0,
            severity: f.severity,
            opened_window: None,
            last_window: window,
            notified: false,
            finding: (*f).clone(),
        });
        if s.last_window + 1 < window && !s.open {
            // A gap in the windows breaks a streak that had not opened yet.
            s.streak = 0;
        }
        s.streak += 1;
        s.missing = 0;
        s.last_window = window;
        s.finding = (*f).clone();
        if s.open {
            if f.severity > s.severity {
                s.severity = f.severity;
                out.push((k.clone(), Transition::Escalated, s.clone()));
            }
        } else if s.streak >= rules.open_after || f.severity == Severity::Critical {
            s.open = true;
            s.severity = f.severity;
            s.opened_window = Some(window);
            out.push((k.clone(), Transition::Opened, s.clone()));
        }
    }
    let absent: Vec<String> = states
        .keys()
        .filter(|k| !present.contains_key(*k))
        .cloned()
        .collect();
    for k in absent {
        let s = states.get_mut(&k).expect("a key just listed");
        s.streak = 0;
        s.missing += 1;
        if s.open && s.missing >= rules.resolve_after {
            s.open = false;
            out.push((k.clone(), Transition::Resolved, s.clone()));
        }
        if !s.open {
            // Nothing to remember of a closed alert.
            states.remove(&k);
        }
    }
    out
}

/// Opens at once the alerts of the critical findings of a window still in progress (a
/// hang must page within seconds of being seen, not a window later).
pub fn open_criticals(
    states: &mut BTreeMap<String, AlertState>,
    window: u64,
    findings: &[Finding],
) -> Vec<Change> {
    let mut out = Vec::new();
    for f in findings.iter().filter(|f| f.severity == Severity::Critical) {
        let k = f.subject_key();
        match states.get_mut(&k) {
            Some(s) if s.open => {
                if f.severity > s.severity {
                    s.severity = f.severity;
                    s.finding = f.clone();
                    out.push((k, Transition::Escalated, s.clone()));
                }
            }
            _ => {
                let s = AlertState {
                    open: true,
                    streak: 1,
                    missing: 0,
                    severity: f.severity,
                    opened_window: Some(window),
                    last_window: window,
                    notified: false,
                    finding: f.clone(),
                };
                states.insert(k.clone(), s.clone());
                out.push((k, Transition::Opened, s));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::{Component, Culprit, DetectorId, FindingKind};

    fn finding(rank: u32, severity: Severity) -> Finding {
        let mut c = Culprit::new(Component::Gpu);
        c.rank = Some(rank);
        Finding {
            kind: FindingKind::SlowGpu,
            severity,
            summary: format!("rank {rank} is slow"),
            confidence: 0.9,
            culprits: vec![c],
            evidence: vec![],
            action: "drain it".into(),
            iterations: vec![],
            detector: DetectorId::SlowRank,
            corroborated_by: vec![],
            failure: None,
        }
    }

    use Transition::*;

    /// A window's findings (rank, severity), and the transitions expected after it.
    type Window = (Vec<(u32, Severity)>, Vec<(u32, Transition)>);

    struct Case {
        name: &'static str,
        windows: Vec<Window>,
    }

    #[test]
    fn alerts_open_escalate_and_resolve_by_the_continuity_rule() {
        use Severity::*;
        let cases = vec![
            Case {
                name: "one noisy window pages nobody",
                windows: vec![
                    (vec![(5, Warning)], vec![]),
                    (vec![], vec![]),
                    (vec![(5, Warning)], vec![]),
                    (vec![], vec![]),
                ],
            },
            Case {
                name: "two windows running open it once; two without resolve it",
                windows: vec![
                    (vec![(5, Warning)], vec![]),
                    (vec![(5, Warning)], vec![(5, Opened)]),
                    (vec![(5, Warning)], vec![]),
                    (vec![], vec![]),
                    (vec![], vec![(5, Resolved)]),
                    (vec![], vec![]),
                ],
            },
            Case {
                name: "a flicker while open does not resolve it",
                windows: vec![
                    (vec![(5, Warning)], vec![]),
                    (vec![(5, Warning)], vec![(5, Opened)]),
                    (vec![], vec![]),
                    (vec![(5, Warning)], vec![]),
                    (vec![], vec![]),
                    (vec![(5, Warning)], vec![]),
                ],
            },
            Case {
                name: "a critical opens at once and escalation is said once",
                windows: vec![
                    (vec![(2, Critical)], vec![(2, Opened)]),
                    (vec![(2, Critical)], vec![]),
                    (vec![(3, Warning)], vec![]),
                    (vec![(3, Critical)], vec![(3, Opened), (2, Resolved)]),
                ],
            },
            Case {
                name: "a warning that turns critical escalates",
                windows: vec![
                    (vec![(1, Warning)], vec![]),
                    (vec![(1, Warning)], vec![(1, Opened)]),
                    (vec![(1, Critical)], vec![(1, Escalated)]),
                    (vec![(1, Critical)], vec![]),
                ],
            },
            Case {
                name: "info findings never alert",
                windows: vec![(vec![(4, Info)], vec![]), (vec![(4, Info)], vec![])],
            },
        ];
        for case in cases {
            let mut states = BTreeMap::new();
            for (i, (present, expected)) in case.windows.iter().enumerate() {
                let findings: Vec<Finding> = present.iter().map(|&(r, s)| finding(r, s)).collect();
                let got: Vec<(String, Transition)> = advance(
                    &mut states,
                    10 + i as u64,
                    &findings,
                    &AlertRules::default(),
                )
                .into_iter()
                .map(|(k, t, _)| (k, t))
                .collect();
                let want: Vec<(String, Transition)> = expected
                    .iter()
                    .map(|&(r, t)| (finding(r, Warning).subject_key(), t))
                    .collect();
                assert_eq!(got, want, "{}: window {i}", case.name);
            }
        }
    }

    #[test]
    fn a_window_in_progress_opens_critical_alerts_at_once_and_only_once() {
        let mut states = BTreeMap::new();
        let hang = [
            finding(7, Severity::Critical),
            finding(1, Severity::Warning),
        ];
        let got = open_criticals(&mut states, 3, &hang);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (&got[0].0, got[0].1),
            (&hang[0].subject_key(), Transition::Opened)
        );
        assert_eq!(got[0].2.opened_window, Some(3));
        assert!(open_criticals(&mut states, 3, &hang).is_empty());
        // The window, once complete, does not open it again.
        assert!(advance(&mut states, 3, &hang, &AlertRules::default()).is_empty());
    }

    #[test]
    fn keys_name_detector_kind_and_culprits() {
        assert_eq!(
            finding(5, Severity::Warning).subject_key(),
            "slow_rank/slow_gpu/rank 5"
        );
    }
}
