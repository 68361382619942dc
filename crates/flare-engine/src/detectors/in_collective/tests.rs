//! Table-driven: a four-rank ring in one communicator (each rank sends to the next and
//! receives from the previous, 1000 steps per window each way), with one thing changed.

use crate::live::{analyze_window, LiveConfig, LiveDiagnosis, LiveWindow};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{
    CommMembership, Component, DetectorId, Finding, FindingKind, HangRecord, LinkStats,
    NcclProgress, OpKind, RankSummary, StalledLink, WindowSummary,
};

const N: u32 = 4;
const STEPS: u64 = 1000;
const US: u64 = 1000;
const KIB: u64 = 1024;

/// Per step, in us: the sender's own-GPU, peer and network waits; the receiver's peer-data
/// and own-GPU waits.
#[derive(Clone, Copy)]
struct Step {
    send_gpu: u64,
    send_peer: u64,
    network: u64,
    recv_peer: u64,
    recv_gpu: u64,
}

const NORMAL: Step = Step {
    send_gpu: 10,
    send_peer: 5,
    network: 20,
    recv_peer: 25,
    recv_gpu: 10,
};

fn link(me: u32, peer: u32, send: bool, s: Step, steps: u64) -> LinkStats {
    let per = |us: u64| us * US * STEPS;
    let (gpu, peer_wait, net) = if send {
        (per(s.send_gpu), per(s.send_peer), per(s.network))
    } else {
        (per(s.recv_gpu), per(s.recv_peer), 0)
    };
    let op_ns = gpu + peer_wait + net;
    LinkStats {
        group: Some("tp".into()),
        self_rank: me,
        peer,
        send,
        ops: 100,
        bytes: STEPS * 64 * KIB,
        op_ns,
        steps,
        gpu_wait_ns: if steps > 0 { gpu } else { 0 },
        peer_wait_ns: if steps > 0 { peer_wait } else { 0 },
        network_ns: if steps > 0 { net } else { 0 },
        flush_ns: 0,
        slowest_channel: 1,
        slowest_channel_ns: op_ns / 2,
        channels: 2,
    }
}

/// The window: `step(src, dst)` gives each path's per-step waits; `stalled` adds stalled
/// transfers per rank; ranks in `silent` report nothing of NCCL.
fn window(
    step: impl Fn(u32, u32) -> Step,
    steps: u64,
    stalled: &[(u32, StalledLink)],
    silent: &[u32],
) -> LiveWindow {
    LiveWindow::from_summaries(&[summary(step, steps, stalled, silent)])
}

/// The window's one summary; a silent rank still says which communicators it is in.
fn summary(
    step: impl Fn(u32, u32) -> Step,
    steps: u64,
    stalled: &[(u32, StalledLink)],
    silent: &[u32],
) -> WindowSummary {
    let ranks = (0..N)
        .map(|r| {
            let (next, prev) = ((r + 1) % N, (r + N - 1) % N);
            let comms = vec![CommMembership {
                group: Some("tp".into()),
                rank: r,
                size: N,
            }];
            let nccl = Some(if silent.contains(&r) {
                NcclProgress {
                    comms,
                    ..NcclProgress::default()
                }
            } else {
                NcclProgress {
                    links: vec![
                        link(r, next, true, step(r, next), steps),
                        link(r, prev, false, step(prev, r), steps),
                    ],
                    kernels: vec![],
                    stalled: stalled
                        .iter()
                        .filter(|(o, _)| *o == r)
                        .map(|(_, s)| s.clone())
                        .collect(),
                    comms,
                }
            });
            RankSummary {
                busy_ns: 1_000 * 1_000_000,
                observed_ns: 10_000 * 1_000_000,
                events: 1000,
                gpu: Some(true),
                nccl,
                ..RankSummary::empty(r, r, 100 + r)
            }
        })
        .collect();
    WindowSummary {
        parallel: None,
        version: SUMMARY_VERSION,
        job_id: "j".into(),
        node: "n0".into(),
        window: 7,
        window_ns: 10_000 * 1_000_000,
        start_unix_ns: 0,
        end_unix_ns: 10_000 * 1_000_000,
        world_size: N,
        ranks,
        hangs: vec![],
        peer_stacks: vec![],
        logs: None,
    }
}

fn stalled(me: u32, peer: u32, send: bool, state: Option<&str>) -> StalledLink {
    StalledLink {
        group: Some("tp".into()),
        self_rank: me,
        peer,
        send,
        channel: 3,
        state: state.map(str::to_string),
        steps_done: 2,
        steps: 8,
        stalled_ns: 30_000_000_000,
    }
}

fn run(w: &LiveWindow) -> LiveDiagnosis {
    analyze_window(w, &[], &LiveConfig::default())
}

/// The in-collective detector's findings (alone or leading a merged one).
fn mine(d: &LiveDiagnosis) -> Vec<&Finding> {
    d.findings
        .iter()
        .filter(|f| {
            f.detector == DetectorId::InCollective
                || f.corroborated_by
                    .iter()
                    .any(|c| c.detector == DetectorId::InCollective)
        })
        .collect()
}

fn slower(mut s: Step, f: impl Fn(&mut Step)) -> Step {
    f(&mut s);
    s
}

/// (case, window, expected: kind, component, rank, text in the summary) or no finding.
type Case = (
    &'static str,
    LiveWindow,
    Option<(FindingKind, Component, u32, &'static str)>,
);

#[test]
fn slow_links_nics_and_kernels_are_told_apart() {
    let cases: Vec<Case> = vec![
        ("healthy", window(|_, _| NORMAL, STEPS, &[], &[]), None),
        (
            "slow link 1 -> 2",
            window(
                |s, d| match (s, d) {
                    (1, 2) => slower(NORMAL, |x| {
                        x.network *= 8;
                        x.recv_peer *= 6
                    }),
                    _ => NORMAL,
                },
                STEPS,
                &[],
                &[],
            ),
            Some((
                FindingKind::SlowLink,
                Component::Link,
                1,
                "rank 1 to rank 2",
            )),
        ),
        (
            "slow NIC on rank 2: its paths in and out",
            window(
                |s, d| {
                    if s == 2 || d == 2 {
                        slower(NORMAL, |x| x.network *= 6)
                    } else {
                        NORMAL
                    }
                },
                STEPS,
                &[],
                &[],
            ),
            Some((
                FindingKind::SlowLink,
                Component::Nic,
                2,
                "into and out of rank 2",
            )),
        ),
        (
            "rank 3's kernel slow inside the collective",
            window(
                |s, d| match (s, d) {
                    // Its proxy waits for its GPU both ways; its peers wait for it.
                    (3, _) => slower(NORMAL, |x| {
                        x.send_gpu *= 8;
                        x.recv_peer *= 4
                    }),
                    (_, 3) => slower(NORMAL, |x| {
                        x.recv_gpu *= 8;
                        x.send_peer *= 8
                    }),
                    _ => NORMAL,
                },
                STEPS,
                &[],
                &[],
            ),
            Some((FindingKind::SlowGpu, Component::Gpu, 3, "proxy waited")),
        ),
        (
            "slow link, no proxy steps (default mask): whole transfers",
            window(
                |s, d| match (s, d) {
                    (0, 1) => slower(NORMAL, |x| x.network *= 10),
                    _ => NORMAL,
                },
                0,
                &[],
                &[],
            ),
            Some((FindingKind::SlowLink, Component::Link, 0, "in all")),
        ),
        (
            "stuck: rank 2's kernel stopped, rank 3 waits for its data",
            window(
                |_, _| NORMAL,
                STEPS,
                &[
                    (3, stalled(3, 2, false, Some("recv_peer_wait"))),
                    (2, stalled(2, 3, true, Some("send_gpu_wait"))),
                ],
                &[],
            ),
            Some((FindingKind::Hang, Component::Gpu, 2, "its kernel stopped")),
        ),
        (
            "stuck: rank 1 never reached the collective",
            window(
                |_, _| NORMAL,
                STEPS,
                &[
                    (2, stalled(2, 1, false, Some("recv_peer_wait"))),
                    (0, stalled(0, 1, true, Some("send_peer_wait"))),
                ],
                &[],
            ),
            Some((FindingKind::Hang, Component::Process, 1, "never reached")),
        ),
    ];
    for (name, w, expect) in cases {
        let d = run(&w);
        let found = mine(&d);
        assert!(
            d.skipped
                .iter()
                .all(|s| s.detector != DetectorId::InCollective),
            "{name}: skipped"
        );
        match expect {
            None => assert!(found.is_empty(), "{name}: {found:#?}"),
            Some((kind, component, rank, text)) => {
                assert_eq!(found.len(), 1, "{name}: {found:#?}");
                let f = found[0];
                assert_eq!(f.kind, kind, "{name}: {}", f.summary);
                assert_eq!(f.culprits[0].component, component, "{name}: {}", f.summary);
                assert_eq!(f.culprits[0].rank, Some(rank), "{name}: {}", f.summary);
                assert!(f.summary.contains(text), "{name}: {}", f.summary);
            }
        }
    }
}

#[test]
fn a_rank_starved_by_a_late_peer_is_not_called_slow() {
    // As measured on an H200 (BENCHMARKS.md): a rank waiting for a late peer's data shows
    // its proxy waiting for its own GPU too (its kernel forwards nothing until the data
    // arrives). It is starved, not slow.
    let w = window(
        |s, d| match (s, d) {
            // Rank 1 sends late: rank 2's receives wait for its data.
            (1, 2) => slower(NORMAL, |x| x.recv_peer *= 10),
            // Rank 2's kernel forwards nothing until that data arrives.
            (2, 3) => slower(NORMAL, |x| x.send_gpu *= 6),
            _ => NORMAL,
        },
        STEPS,
        &[],
        &[],
    );
    let d = run(&w);
    assert!(
        mine(&d).iter().all(|f| f.kind != FindingKind::SlowGpu),
        "{:#?}",
        mine(&d)
    );
}

#[test]
fn a_rank_that_moved_nothing_is_named_by_its_membership() {
    // Measured on an H200: rank 1 never joins; its summary holds no transfer, only the
    // communicators it belongs to. The watchdog's record of rank 0 stuck in the
    // collective does not hide where progress stopped.
    let mut s = summary(
        |_, _| NORMAL,
        STEPS,
        &[(0, stalled(0, 1, true, Some("send_peer_wait")))],
        &[1],
    );
    s.hangs.push(HangRecord {
        rank: 0,
        pid: 100,
        op: "AllReduce".into(),
        kind: OpKind::AllReduce,
        group: Some("tp".into()),
        in_flight_ns: 30_000_000_000,
        detected_unix_ns: 1,
        stacks: vec![],
        stack_source: "none".into(),
    });
    let d = run(&LiveWindow::from_summaries(&[s]));
    let f = mine(&d);
    assert_eq!(f.len(), 1, "{:#?}", d.findings);
    assert_eq!(f[0].kind, FindingKind::Hang);
    assert_eq!(f[0].culprits[0].rank, Some(1), "{}", f[0].summary);
    assert!(
        f[0].summary.contains("rank 1: rank 0 waits for it"),
        "{}",
        f[0].summary
    );
    // The watchdog named the same rank (rank 0 waits in a collective rank 1 never
    // joined): merged into this finding.
    assert!(
        f[0].corroborated_by
            .iter()
            .any(|c| c.detector == DetectorId::Watchdog),
        "{:#?}",
        d.findings
    );
}

#[test]
fn without_the_plugin_it_says_what_to_load() {
    let mut s = summary(|_, _| NORMAL, STEPS, &[], &[]);
    for r in &mut s.ranks {
        r.nccl = None;
    }
    let w = LiveWindow::from_summaries(&[s]);
    let d = run(&w);
    let reason = d
        .skipped
        .iter()
        .find(|s| s.detector == DetectorId::InCollective)
        .map(|s| s.reason.as_str());
    assert!(
        reason.is_some_and(|r| r.contains("NCCL_PROFILER_PLUGIN")),
        "{reason:?}"
    );
}
