//! The native format: exact round trips of arbitrary traces, and clear errors on damage.

mod common;

use common::{hand_built, temp_dir};
use flare_import::native::{read_native, read_native_file, write_native, write_native_file};
use flare_import::NativeError;
use flare_model::{
    ClusterTopology, Communicator, Dim, GroupKind, IterationSpan, JobInfo, Op, OpKind,
    ParallelConfig, RankTrace, Trace, TraceMeta,
};
use proptest::prelude::*;

fn arb_kind() -> impl Strategy<Value = OpKind> {
    (0u8..16).prop_map(|k| OpKind::from_u8(k).unwrap())
}

/// Times: arbitrary 64-bit values (sentinels included) or realistic nearby ones.
fn arb_time() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        (1_700_000_000_000_000_000i64..1_700_000_000_100_000_000),
        (-1000i64..1000),
    ]
}

fn arb_op() -> impl Strategy<Value = Op> {
    (
        arb_kind(),
        prop_oneof![0u32..20, any::<u32>()],
        prop_oneof![0u32..20, any::<u32>()],
        prop_oneof![Just(Op::NO_COMM), 0u32..6, any::<u32>()],
        prop_oneof![0u32..100, any::<u32>()],
        prop_oneof![Just(Op::NO_PEER), 0u32..64, any::<u32>()],
        arb_time(),
        prop_oneof![Just(Op::IN_FLIGHT), arb_time()],
        prop_oneof![Just(Op::UNKNOWN), arb_time()],
        prop_oneof![Just(0u64), any::<u64>(), 0u64..1_000_000],
    )
        .prop_map(
            |(kind, name, iteration, comm, seq, peer, start_ns, end_ns, issue_ns, amount)| Op {
                kind,
                name,
                iteration,
                comm,
                seq,
                peer,
                start_ns,
                end_ns,
                issue_ns,
                amount,
            },
        )
}

fn arb_span() -> impl Strategy<Value = IterationSpan> {
    (any::<u32>(), arb_time(), proptest::option::of(arb_time())).prop_map(
        |(iteration, start_ns, end_ns)| IterationSpan {
            iteration,
            start_ns,
            end_ns,
        },
    )
}

fn arb_rank() -> impl Strategy<Value = RankTrace> {
    (
        any::<u32>(),
        proptest::collection::vec(arb_op(), 0..40),
        proptest::collection::vec(arb_span(), 0..5),
    )
        .prop_map(|(rank, ops, iterations)| RankTrace {
            rank,
            ops,
            iterations,
        })
}

fn arb_comm() -> impl Strategy<Value = Communicator> {
    (
        any::<u32>(),
        prop_oneof![
            Just(GroupKind::Tp),
            Just(GroupKind::Cp),
            Just(GroupKind::Ep),
            Just(GroupKind::Dp),
            Just(GroupKind::Pp),
            Just(GroupKind::World),
            Just(GroupKind::Other),
        ],
        proptest::collection::vec(any::<u32>(), 0..8),
        ".*",
    )
        .prop_map(|(id, kind, members, label)| Communicator {
            id,
            kind,
            members,
            label,
        })
}

fn arb_trace() -> impl Strategy<Value = Trace> {
    (
        (".*", ".*", proptest::collection::vec(any::<u32>(), 0..4)),
        (".*", any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        any::<bool>(),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(arb_comm(), 0..6),
        proptest::collection::vec(".*", 0..6),
        proptest::collection::vec(arb_rank(), 0..5),
    )
        .prop_map(
            |(
                (source, detail, missing_ranks),
                (job_id, world, nodes, gpn, npp),
                par,
                mb,
                communicators,
                names,
                ranks,
            )| {
                Trace {
                    meta: TraceMeta {
                        source,
                        detail,
                        missing_ranks,
                        cpu_compute: false,
                        notes: Vec::new(),
                        host_calls: Default::default(),
                    },
                    job: JobInfo {
                        job_id,
                        world_size: world,
                        cluster: ClusterTopology {
                            nodes,
                            gpus_per_node: gpn,
                            nodes_per_pod: npp,
                            placement: (nodes % 2 == 0 && nodes <= 64)
                                .then(|| (0..nodes).rev().collect()),
                        },
                        parallel: par.then(|| {
                            ParallelConfig::with_order(
                                2,
                                1,
                                1,
                                2,
                                2,
                                &[Dim::Pp, Dim::Tp, Dim::Cp, Dim::Dp],
                            )
                            .unwrap()
                        }),
                        microbatches: mb,
                    },
                    communicators,
                    names,
                    ranks,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn round_trips_exactly(trace in arb_trace()) {
        let mut buf = Vec::new();
        write_native(&trace, &mut buf).unwrap();
        let back = read_native(&buf[..], "prop").unwrap();
        prop_assert_eq!(back, trace);
    }

    #[test]
    fn damaged_files_error_and_never_panic(trace in arb_trace(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let mut buf = Vec::new();
        write_native(&trace, &mut buf).unwrap();
        let n = cut.index(buf.len());
        let e = read_native(&buf[..n], "cut.flare").unwrap_err();
        prop_assert!(e.to_string().starts_with("cut.flare: "), "{}", e);
        let mut flipped = buf.clone();
        let i = flip.index(flipped.len());
        flipped[i] ^= 1 << bit;
        // The checksums catch any flipped bit in the compressed part; a flip in the magic
        // or version is caught by those checks.
        prop_assert!(read_native(&flipped[..], "flip.flare").is_err());
    }
}

#[test]
fn truncated_at_every_point_reports_truncation() {
    let trace = hand_built();
    let mut buf = Vec::new();
    write_native(&trace, &mut buf).unwrap();
    for n in 0..buf.len() {
        let e = read_native(&buf[..n], "t.flare").unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("t.flare: "), "{text}");
        match (n, &e) {
            (0, NativeError::BadMagic { .. }) => {}
            (1..=11, NativeError::Truncated { .. }) => {}
            (12.., NativeError::Truncated { .. }) => {}
            (12.., NativeError::Compression { .. }) => {}
            _ => panic!("cut at {n}: unexpected error {text}"),
        }
    }
    // The ends of a few regions name where they are.
    let e = read_native(&buf[..10], "t.flare").unwrap_err();
    assert!(e.to_string().contains("version"), "{e}");
}

#[test]
fn bad_magic_version_and_garbage() {
    let trace = hand_built();
    let mut buf = Vec::new();
    write_native(&trace, &mut buf).unwrap();

    let mut bad = buf.clone();
    bad[0] = b'X';
    let e = read_native(&bad[..], "m.flare").unwrap_err();
    assert!(matches!(e, NativeError::BadMagic { .. }), "{e}");
    assert!(e.to_string().contains("FLARETRC"), "{e}");

    for version in [0u32, 3] {
        let mut v = buf.clone();
        v[8..12].copy_from_slice(&version.to_le_bytes());
        let e = read_native(&v[..], "v.flare").unwrap_err();
        assert!(
            matches!(
                e,
                NativeError::UnsupportedVersion {
                    found,
                    supported: 2,
                    ..
                } if found == version
            ),
            "{e}"
        );
    }
    // A version 2 payload labelled version 1 fails on its header, not later.
    let mut v1 = buf.clone();
    v1[8..12].copy_from_slice(&1u32.to_le_bytes());
    let e = read_native(&v1[..], "v1.flare").unwrap_err();
    assert!(matches!(e, NativeError::Header { .. }), "{e}");

    let e = read_native(&b"{\"traceEvents\": []}"[..], "g.json").unwrap_err();
    assert!(matches!(e, NativeError::BadMagic { .. }), "{e}");

    let mut garbage = buf[..12].to_vec();
    garbage.extend((0..4000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    let e = read_native(&garbage[..], "g.flare").unwrap_err();
    assert!(
        matches!(
            e,
            NativeError::Compression { .. } | NativeError::Truncated { .. }
        ),
        "{e}"
    );

    // Trailing bytes after the frame are not silently ignored.
    let mut trailing = buf.clone();
    trailing.extend_from_slice(b"extra");
    assert!(read_native(&trailing[..], "x.flare").is_err());
}

#[test]
fn files_round_trip_and_missing_files_error() {
    let trace = hand_built();
    let dir = temp_dir("native");
    let path = dir.join("t.flare");
    write_native_file(&trace, &path).unwrap();
    assert_eq!(read_native_file(&path).unwrap(), trace);
    let e = read_native_file(dir.join("absent.flare")).unwrap_err();
    assert!(matches!(e, NativeError::Io { .. }));
    assert!(e.to_string().contains("absent.flare"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
