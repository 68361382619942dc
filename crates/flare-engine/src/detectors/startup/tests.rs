use super::*;
use crate::live::{LiveRank, LiveWindow};
use flare_model::{StartupPhaseRecord, StartupRecord};

const S: u64 = 1_000_000_000;
const T0: u64 = 1_800_000_000 * S;

/// A rank's phases as (phase, start s, end s or None), seconds after T0.
fn record(phases: &[(StartupPhase, f64, Option<f64>)], complete: bool) -> StartupRecord {
    let at = |s: f64| T0 + (s * 1e9) as u64;
    StartupRecord {
        phases: phases
            .iter()
            .map(|&(phase, start, end)| StartupPhaseRecord {
                phase,
                name: None,
                start_unix_ns: at(start),
                end_unix_ns: end.map(at),
            })
            .collect(),
        complete,
    }
}

fn view(ranks: Vec<(u32, &str, StartupRecord)>, world: u32, now_s: f64) -> StartupView {
    StartupView {
        ranks: ranks
            .into_iter()
            .map(|(rank, node, record)| RankStartup {
                rank,
                node: node.into(),
                record,
            })
            .collect(),
        world_size: world,
        now_unix_ns: T0 + (now_s * 1e9) as u64,
        without_record: vec![],
    }
}

use timeline::RankStartup;
use StartupPhase::*;

/// A healthy rank: launch 0-3 s, PG init 3-(pg_end), DDP 6-7, first batch 7-8, first
/// step 8-10; `launch_end` and `start` shift its own work.
fn rank_phases(start: f64, launch_end: f64, pg_end: f64) -> StartupRecord {
    record(
        &[
            (Launch, start, Some(launch_end)),
            (InitProcessGroup, launch_end, Some(pg_end)),
            (ModelWrap, pg_end + 1.0, Some(pg_end + 2.0)),
            (FirstBatch, pg_end + 2.0, Some(pg_end + 3.0)),
            (FirstStep, pg_end + 3.0, Some(pg_end + 5.0)),
        ],
        true,
    )
}

/// (culprit rank or host, the phase it was late to, what its cause must be)
type Expected = (&'static str, StartupPhase, fn(&Cause) -> bool);

struct Case {
    name: &'static str,
    view: StartupView,
    expect: Vec<Expected>,
}

fn cases() -> Vec<Case> {
    let healthy = |r: u32| {
        (
            r,
            if r < 2 { "n0" } else { "n1" },
            rank_phases(0.0, 3.0 + r as f64 * 0.1, 3.5),
        )
    };
    vec![
        Case {
            name: "healthy",
            view: view((0..4).map(healthy).collect(), 4, 20.0),
            expect: vec![],
        },
        Case {
            name: "slow imports on one rank",
            view: view(
                (0..4)
                    .map(|r| {
                        if r == 2 {
                            (2, "n1", rank_phases(0.0, 13.0, 13.5))
                        } else {
                            (
                                r,
                                if r < 2 { "n0" } else { "n1" },
                                rank_phases(0.0, 3.0, 13.5),
                            )
                        }
                    })
                    .collect(),
                4,
                30.0,
            ),
            expect: vec![("rank 2", InitProcessGroup, |c| {
                matches!(c, Cause::Phase { phase: Launch, .. })
            })],
        },
        Case {
            name: "a process launched late",
            view: view(
                (0..4)
                    .map(|r| {
                        if r == 1 {
                            (1, "n0", rank_phases(10.0, 13.0, 13.5))
                        } else {
                            (
                                r,
                                if r < 2 { "n0" } else { "n1" },
                                rank_phases(0.0, 3.0, 13.5),
                            )
                        }
                    })
                    .collect(),
                4,
                30.0,
            ),
            expect: vec![(
                "rank 1",
                InitProcessGroup,
                |c| matches!(c, Cause::StartedLate(d) if (*d - 10e9).abs() < 1e6),
            )],
        },
        Case {
            name: "still loading its checkpoint while the others wait in DDP",
            view: view(
                (0..4)
                    .map(|r| {
                        let mut rec = record(
                            &[
                                (Launch, 0.0, Some(3.0)),
                                (InitProcessGroup, 3.0, Some(4.0)),
                                (CheckpointLoad, 4.0, Some(6.0)),
                            ],
                            false,
                        );
                        if r == 3 {
                            rec.phases[2].end_unix_ns = None;
                        } else {
                            rec.phases.push(StartupPhaseRecord {
                                phase: ModelWrap,
                                name: None,
                                start_unix_ns: T0 + 6 * S,
                                end_unix_ns: None,
                            });
                        }
                        (r, if r < 2 { "n0" } else { "n1" }, rec)
                    })
                    .collect(),
                4,
                30.0,
            ),
            expect: vec![("rank 3", ModelWrap, |c| {
                matches!(
                    c,
                    Cause::Phase {
                        phase: CheckpointLoad,
                        ongoing: true,
                        ..
                    }
                )
            })],
        },
        Case {
            name: "a rank never heard from",
            view: view(
                (0..3)
                    .map(|r| {
                        (
                            r,
                            "n0",
                            record(
                                &[(Launch, 0.0, Some(3.0)), (InitProcessGroup, 3.0, None)],
                                false,
                            ),
                        )
                    })
                    .collect(),
                4,
                20.0,
            ),
            expect: vec![("rank 3", InitProcessGroup, |c| *c == Cause::NotTraced)],
        },
        Case {
            name: "a whole node late",
            view: view(
                (0..4)
                    .map(|r| {
                        if r >= 2 {
                            (r, "n1", rank_phases(0.0, 13.0, 13.5))
                        } else {
                            (r, "n0", rank_phases(0.0, 3.0, 13.5))
                        }
                    })
                    .chain((4..6).map(|r| (r, "n2", rank_phases(0.0, 3.0, 13.5))))
                    .collect(),
                6,
                30.0,
            ),
            expect: vec![("node n1", InitProcessGroup, |c| {
                matches!(c, Cause::Phase { phase: Launch, .. })
            })],
        },
        Case {
            name: "ranks spread widely: none stands out",
            view: view(
                (0..8)
                    .map(|r| (r, "n0", rank_phases(0.0, 3.0 + r as f64 * 2.0, 18.0)))
                    .collect(),
                8,
                40.0,
            ),
            expect: vec![],
        },
        Case {
            name: "a late rank whose time went where no phase is recorded",
            view: view(
                (0..4)
                    .map(|r| {
                        let delay = if r == 0 { 9.0 } else { 0.0 };
                        (
                            r,
                            "n0",
                            record(
                                &[
                                    (Launch, 0.0, Some(2.0)),
                                    (InitProcessGroup, 2.0, Some(3.0)),
                                    (ModelWrap, 4.0 + delay, Some(14.0)),
                                    (FirstStep, 15.0, Some(16.0)),
                                ],
                                true,
                            ),
                        )
                    })
                    .collect(),
                4,
                30.0,
            ),
            expect: vec![(
                "rank 0",
                ModelWrap,
                |c| matches!(c, Cause::Untraced { after: Some(a), .. } if a == "init_process_group"),
            )],
        },
    ]
}

#[test]
fn late_ranks_are_named_with_the_phase_that_made_them_late() {
    let cfg = StartupConfig::default();
    for case in cases() {
        let lates = late_ranks(&case.view, &cfg);
        let found = findings(&case.view, &cfg);
        let warned: Vec<&Finding> = found
            .iter()
            .filter(|f| f.kind == FindingKind::SlowStartup)
            .collect();
        assert_eq!(
            warned.len(),
            case.expect.len(),
            "{}: {:#?}",
            case.name,
            warned.iter().map(|f| &f.summary).collect::<Vec<_>>()
        );
        for ((who, phase, cause), f) in case.expect.iter().zip(&warned) {
            assert!(f.summary.starts_with(who), "{}: {}", case.name, f.summary);
            let l = lates
                .iter()
                .find(|l| l.phase == *phase)
                .unwrap_or_else(|| panic!("{}: nobody late to {phase}: {lates:#?}", case.name));
            assert!(cause(&l.cause), "{}: cause {:?}", case.name, l.cause);
            assert!(f.severity == Severity::Warning && !f.culprits.is_empty());
        }
    }
}

#[test]
fn a_complete_start_up_is_broken_down_by_phase() {
    let v = view(
        (0..4)
            .map(|r| (r, "n0", rank_phases(0.0, 3.0, 3.5 + r as f64 * 0.01)))
            .collect(),
        4,
        30.0,
    );
    let b = breakdown(&v).unwrap();
    assert_eq!(b.ranks, 4);
    // Launch 3 s, PG 0.5 s, a 1-s gap, DDP 1, batch 1, first step 2: 8.5 s.
    assert!((b.total_median_ns / 1e9 - 8.5).abs() < 0.05, "{b:#?}");
    let get = |l: &str| b.phases.iter().find(|p| p.label == l).unwrap().median_ns / 1e9;
    assert!((get("launch") - 3.0).abs() < 1e-6);
    assert!((get("first_step") - 2.0).abs() < 1e-6);
    assert!((get("untraced") - 1.0).abs() < 0.05, "{b:#?}");
    let labels: Vec<&str> = b.phases.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "launch",
            "init_process_group",
            "model_wrap",
            "first_batch",
            "first_step",
            "untraced"
        ]
    );
    let f = findings(&v, &StartupConfig::default());
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::Startup);
    assert_eq!(f[0].severity, Severity::Info);
    assert!(
        f[0].summary.contains("start-up took 8.5 s"),
        "{}",
        f[0].summary
    );
    assert!(
        f[0].action.starts_with("the longest phase is launch"),
        "{}",
        f[0].action
    );
}

#[test]
fn an_incomplete_start_up_is_not_broken_down() {
    let mut v = view(
        (0..2)
            .map(|r| (r, "n0", rank_phases(0.0, 3.0, 3.5)))
            .collect(),
        3,
        30.0,
    );
    assert!(!v.complete());
    v.world_size = 2;
    assert!(v.complete());
}

#[test]
fn the_view_takes_each_rank_s_latest_record_and_needs_one_in_the_current_window() {
    let rank = |r: u32, rec: Option<StartupRecord>| LiveRank {
        startup: rec,
        ..LiveRank::blank(r)
    };
    let early = record(&[(Launch, 0.0, Some(1.0))], false);
    let later = record(
        &[(Launch, 0.0, Some(1.0)), (InitProcessGroup, 1.0, None)],
        false,
    );
    let w1 = LiveWindow {
        window: 1,
        world_size: 2,
        ranks: vec![rank(0, Some(early.clone())), rank(1, Some(early.clone()))],
        ..LiveWindow::default()
    };
    let w2 = LiveWindow {
        window: 2,
        world_size: 2,
        ranks: vec![rank(0, Some(later.clone())), rank(1, None)],
        end_unix_ns: T0 + 5 * S,
        ..LiveWindow::default()
    };
    let v = StartupView::from_windows(&[&w1, &w2]).unwrap();
    assert_eq!(v.ranks.len(), 2);
    assert_eq!(v.ranks[0].record, later);
    assert_eq!(v.ranks[1].record, early);
    assert_eq!(v.now_unix_ns, T0 + 5 * S);
    let w3 = LiveWindow {
        window: 3,
        ranks: vec![rank(0, None)],
        ..LiveWindow::default()
    };
    assert_eq!(StartupView::from_windows(&[&w1, &w3]), None);
}
