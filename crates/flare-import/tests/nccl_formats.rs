//! NCCL Inspector logs and NCCL example-profiler dumps.
//!
//! Fixtures (`tests/fixtures/nccl/`), each written by replaying its writer's printf formats:
//!
//! * `inspector/`: NCCL Inspector output format v4.0 as written by NCCL 2.30
//!   (`plugins/profiler/inspector/inspector_json.cc`: header with `comm_name`,
//!   `NCCL_INSPECTOR_DUMP_VERBOSE=1` so `event_trace_sn`/`event_trace_ts` are present,
//!   `p2p_perf` records), files `<hostname>-pid<pid>.log`. Three ranks on one node; a
//!   3-rank world communicator with six AllReduces (`coll_sn` 0-5) on which rank 2 arrives
//!   3 ms late every time; a 2-rank `tp` communicator with one AllGather; one Send/Recv.
//! * `inspector_v2_28/`: the NCCL 2.28 layout (`ext-profiler/inspector/inspector.cc`): no
//!   `comm_name`, not verbose (no timestamps but `dump_timestamp_us`), and one record with
//!   `coll_exec_time_us` 0 whose bandwidths `%lf` prints as bare `inf`.
//! * `profiler/`: example profiler plugin dumps as written by NCCL 2.29
//!   (`plugins/profiler/example/print_event.cc`, `plugin.cc`: files
//!   `<prefix>_<commHash>_<rank>.json`, `[` ... `{}]`, GROUP_API > KERNEL_LAUNCH, COLL_API >
//!   COLL > KernelCh with `StartGpuClk`/`StopGpuClk`). Three ranks, six AllReduces, rank 2
//!   3 ms late, each process's host clock with its own zero.
//! * `profiler_hang/`: NCCL 2.28.3 layout (`ext-profiler/example/print_event.cc` of
//!   2.28.3: unquoted `datatype`, `Stream` values). Three AllReduces and one Send/Recv;
//!   ranks 0 and 1 are stuck in the third AllReduce (rank 1's dump prints its stop time as
//!   0, the fresh pool slot; rank 0's dump was cut while being written), rank 2 never
//!   called it.

use flare_import::nccl_inspector::{self, read_inspector_dir, NcclOptions};
use flare_import::nccl_profiler::{self, read_profiler_dump_dir};
use flare_model::{DetectorId, Op, OpKind, Trace};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nccl")
        .join(name)
}

fn opts() -> NcclOptions {
    NcclOptions::default()
}

fn sync_ops(t: &Trace, rank: u32, kind: OpKind) -> Vec<Op> {
    t.ranks
        .iter()
        .find(|r| r.rank == rank)
        .map(|r| r.ops.iter().copied().filter(|o| o.kind == kind).collect())
        .unwrap_or_default()
}

fn detectors_with_findings(t: &Trace) -> Vec<(DetectorId, Vec<u32>)> {
    let d = flare_engine::diagnose(t, &flare_engine::EngineConfig::default());
    d.findings
        .iter()
        .map(|f| {
            (
                f.detector,
                f.culprits.iter().filter_map(|c| c.rank).collect(),
            )
        })
        .collect()
}

#[test]
fn inspector_v4_verbose_imports_ops_comms_and_seq() {
    let t = read_inspector_dir(&fixture("inspector"), &opts()).unwrap();
    assert_eq!(t.meta.source, "nccl-inspector");
    assert_eq!(t.job.world_size, 3);
    assert!(t.meta.missing_ranks.is_empty());
    assert_eq!(t.ranks.len(), 3);
    // world (3 members), tp (ranks 0 and 1), and the P2P pair 0-1.
    let world = t
        .communicators
        .iter()
        .find(|c| c.label.starts_with("world"))
        .unwrap();
    assert_eq!(world.members, vec![0, 1, 2]);
    let tp = t
        .communicators
        .iter()
        .find(|c| c.label.starts_with("tp"))
        .unwrap();
    assert_eq!(tp.members, vec![0, 1]);
    for r in 0..3 {
        let ars = sync_ops(&t, r, OpKind::AllReduce);
        assert_eq!(ars.len(), 6, "rank {r}");
        assert_eq!(
            ars.iter().map(|o| o.seq).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert!(ars
            .iter()
            .all(|o| o.comm == world.id && o.amount == 268_435_456));
        assert!(ars.iter().all(|o| o.end().is_some() && o.issue().is_some()));
    }
    // Rank 2 arrives 3 ms after the others; all end together.
    let a0 = sync_ops(&t, 0, OpKind::AllReduce);
    let a2 = sync_ops(&t, 2, OpKind::AllReduce);
    for (x, y) in a0.iter().zip(&a2) {
        assert_eq!(y.start_ns - x.start_ns, 3_000_000);
        assert_eq!(y.end_ns, x.end_ns);
    }
    // Send on rank 0 and Recv on rank 1 meet on one pair communicator with one seq.
    let s = sync_ops(&t, 0, OpKind::Send);
    let r = sync_ops(&t, 1, OpKind::Recv);
    assert_eq!((s.len(), r.len()), (1, 1));
    assert_eq!((s[0].comm, s[0].seq, s[0].peer), (r[0].comm, r[0].seq, 1));
    assert_eq!(r[0].peer, 0);
    assert_eq!(t.communicators[s[0].comm as usize].members, vec![0, 1]);
    assert!(t.ranks.iter().all(|r| r.iterations.len() == 1));
}

#[test]
fn inspector_late_rank_is_found_by_slow_rank() {
    let t = read_inspector_dir(&fixture("inspector"), &opts()).unwrap();
    let f = detectors_with_findings(&t);
    assert!(
        f.iter()
            .any(|(d, r)| *d == DetectorId::SlowRank && r.contains(&2)),
        "findings: {f:?}"
    );
    assert!(
        !f.iter()
            .any(|(d, r)| *d == DetectorId::SlowRank && (r.contains(&0) || r.contains(&1))),
        "findings: {f:?}"
    );
}

#[test]
fn inspector_iteration_windows() {
    let o = NcclOptions {
        iteration_window_ns: Some(20_000_000),
        ..opts()
    };
    let t = read_inspector_dir(&fixture("inspector"), &o).unwrap();
    let its = t.iterations();
    assert!(its.len() >= 6, "{its:?}");
    let a0 = sync_ops(&t, 0, OpKind::AllReduce);
    assert_eq!(
        a0.iter().map(|o| o.iteration).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 5]
    );
}

#[test]
fn inspector_2_28_layout_without_timestamps() {
    let t = read_inspector_dir(&fixture("inspector_v2_28"), &opts()).unwrap();
    assert_eq!(t.job.world_size, 2);
    assert_eq!(t.communicators.len(), 1);
    assert_eq!(t.communicators[0].members, vec![0, 1]);
    for r in 0..2 {
        let ars = sync_ops(&t, r, OpKind::AllReduce);
        assert_eq!(ars.iter().map(|o| o.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(ars.iter().all(|o| o.issue().is_none()));
    }
    // Durations are kept; placement is by dump time, which the detail says.
    assert_eq!(
        sync_ops(&t, 0, OpKind::AllReduce)[0].duration(),
        Some(4_100_000)
    );
    assert!(t.meta.detail.contains("dump time"), "{}", t.meta.detail);
}

#[test]
fn profiler_2_29_dump_uses_gpu_clocks_and_finds_the_late_rank() {
    let t = read_profiler_dump_dir(&fixture("profiler"), &opts()).unwrap();
    assert_eq!(t.meta.source, "nccl-profiler");
    assert_eq!(t.job.world_size, 3);
    assert_eq!(t.communicators.len(), 1);
    assert_eq!(t.communicators[0].members, vec![0, 1, 2]);
    let a0 = sync_ops(&t, 0, OpKind::AllReduce);
    let a2 = sync_ops(&t, 2, OpKind::AllReduce);
    assert_eq!(
        a0.iter().map(|o| o.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 5]
    );
    assert_eq!(a0[0].amount, 134_217_728 * 2);
    for (x, y) in a0.iter().zip(&a2) {
        // GPU clocks: first channel start and last channel stop.
        assert_eq!(y.start_ns - x.start_ns, 3_000_000);
        assert_eq!(x.end_ns, y.end_ns);
        assert!(x.issue_ns < x.start_ns);
    }
    assert!(t.meta.detail.contains("GPU"), "{}", t.meta.detail);
    let f = detectors_with_findings(&t);
    assert!(
        f.iter()
            .any(|(d, r)| *d == DetectorId::SlowRank && r.contains(&2)),
        "findings: {f:?}"
    );
}

#[test]
fn profiler_2_28_dump_with_bare_words_and_a_hang() {
    let t = read_profiler_dump_dir(&fixture("profiler_hang"), &opts()).unwrap();
    assert_eq!(t.job.world_size, 3);
    let world = t
        .communicators
        .iter()
        .find(|c| c.members.len() == 3)
        .unwrap();
    for r in 0..2 {
        let ars = sync_ops(&t, r, OpKind::AllReduce);
        assert_eq!(ars.iter().map(|o| o.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert!(ars.iter().all(|o| o.comm == world.id));
        assert!(ars[0].end().is_some() && ars[1].end().is_some());
        assert_eq!(ars[2].end_ns, Op::IN_FLIGHT, "rank {r}");
    }
    let a2 = sync_ops(&t, 2, OpKind::AllReduce);
    assert_eq!(a2.iter().map(|o| o.seq).collect::<Vec<_>>(), vec![0, 1]);
    assert!(a2.iter().all(|o| o.end().is_some()));
    let s = sync_ops(&t, 0, OpKind::Send);
    let r = sync_ops(&t, 1, OpKind::Recv);
    assert_eq!((s.len(), r.len()), (1, 1));
    assert_eq!((s[0].comm, s[0].seq), (r[0].comm, r[0].seq));
    assert_eq!(s[0].amount, 4_194_304 * 2);
    assert!(t.meta.detail.contains("truncated"), "{}", t.meta.detail);
    let f = detectors_with_findings(&t);
    assert!(
        f.iter()
            .any(|(d, r)| *d == DetectorId::Hang && r.contains(&2)),
        "findings: {f:?}"
    );
}

#[test]
fn sniffers_tell_the_formats_apart() {
    let read = |p: PathBuf| {
        let f = std::fs::read_dir(p)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        std::fs::read(f).unwrap()[..512].to_vec()
    };
    let insp = read(fixture("inspector"));
    let prof = read(fixture("profiler"));
    let hang = read(fixture("profiler_hang"));
    assert!(nccl_inspector::sniff(&insp) && !nccl_profiler::sniff(&insp));
    assert!(nccl_profiler::sniff(&prof) && !nccl_inspector::sniff(&prof));
    assert!(nccl_profiler::sniff(&hang));
    let kineto = br#"{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel"}]}"#;
    assert!(!nccl_inspector::sniff(kineto) && !nccl_profiler::sniff(kineto));
}

#[test]
fn bare_words_are_quoted() {
    let q = nccl_profiler::quote_bare_words(
        br#"{"datatype": ncclFloat32, "Stream": 0x262ca50, "s": (nil), "x": 1.5e3, "b": true, "n": -inf, "str": "a b\" c"}"#,
    );
    let v: serde_json::Value = serde_json::from_slice(&q).unwrap();
    assert_eq!(v["datatype"], "ncclFloat32");
    assert_eq!(v["Stream"], "0x262ca50");
    assert_eq!(v["s"], "(nil)");
    assert_eq!(v["x"], 1500.0);
    assert_eq!(v["b"], true);
    assert_eq!(v["n"], "-inf");
    assert_eq!(v["str"], "a b\" c");
}

#[test]
fn errors_name_the_file_and_place() {
    let e = nccl_inspector::read_inspector_bytes(
        "x.log",
        b"{\"header\":{\"id\":\"0x1\",\"rank\":0},\"coll_perf\":{\"coll\":\"AllReduce\"}}\n{}\n",
        &opts(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("x.log") && e.contains("line 1"), "{e}");
    let e =
        nccl_inspector::read_inspector_bytes("y.log", b"{\"a\":1}\n{oops\n{\"b\":2}\n", &opts())
            .unwrap_err()
            .to_string();
    assert!(e.contains("y.log") && e.contains("line 2"), "{e}");
    let e = nccl_profiler::read_profiler_dump_bytes("d.json", b"[\n{}, x\n", &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("d.json") && e.contains("line 2"), "{e}");
    let e = nccl_profiler::read_profiler_dump_bytes("e.json", b"{\"traceEvents\": []}", &opts())
        .unwrap_err()
        .to_string();
    assert!(e.contains("e.json") && e.contains("'['"), "{e}");
}

/// Every prefix of every fixture file, and byte-level corruptions of it, import or fail
/// with an error, never a panic.
#[test]
fn truncations_and_corruptions_never_panic() {
    for dir in ["inspector", "inspector_v2_28", "profiler", "profiler_hang"] {
        for f in std::fs::read_dir(fixture(dir)).unwrap() {
            let data = std::fs::read(f.unwrap().path()).unwrap();
            let step = (data.len() / 97).max(1);
            for cut in (0..data.len()).step_by(step) {
                let part = &data[..cut];
                let _ = nccl_inspector::read_inspector_bytes("f", part, &opts());
                let _ = nccl_profiler::read_profiler_dump_bytes("f", part, &opts());
                let mut bad = data.clone();
                for (k, b) in [b'"', b'{', b']', b'\\', 0xff, b'9', b'-']
                    .iter()
                    .enumerate()
                {
                    let i = (cut + k * 7919) % bad.len();
                    bad[i] = *b;
                }
                let _ = nccl_inspector::read_inspector_bytes("f", &bad, &opts());
                let _ = nccl_profiler::read_profiler_dump_bytes("f", &bad, &opts());
            }
        }
    }
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = nccl_inspector::read_inspector_bytes("f", &data, &opts());
            let _ = nccl_profiler::read_profiler_dump_bytes("f", &data, &opts());
            let _ = nccl_profiler::quote_bare_words(&data);
            let _ = nccl_inspector::sniff(&data);
            let _ = nccl_profiler::sniff(&data);
        }

        #[test]
        fn event_shaped_garbage_never_panics(
            parts in proptest::collection::vec(prop_oneof![
                Just("{\"name\": \"AllReduce\", \"cat\": \"COLL\", \"ph\": \"b\", \"id\": 0, \"pid\": 1, \"tid\": 1, \"ts\": 1.0, \"args\": {\"SeqNum\": 0, \"CommHash\": 5, \"Rank\": 0, \"Count\": 4, \"Datatype\": \"ncclFloat32\"}},\n".to_string()),
                Just("{\"name\": \"AllReduce\", \"cat\": \"COLL\", \"ph\": \"e\", \"id\": 0, \"pid\": 1, \"tid\": 1, \"ts\": 2.0},\n".to_string()),
                Just("{\"name\": \"KernelCh\", \"cat\": \"GPU\", \"ph\": \"b\", \"id\": 0, \"pid\": 1, \"tid\": 1, \"ts\": 1.5, \"args\": {\"Channel\": 0, \"StartGpuClk\": 18446744073709551615, \"StopGpuClk\": 1}},\n".to_string()),
                Just("{\"name\": \"Send\", \"cat\": \"P2P\", \"ph\": \"b\", \"id\": 0, \"pid\": 2, \"tid\": 1, \"ts\": 1e300, \"args\": {\"CommHash\": 5, \"Rank\": 1, \"Peer\": 1, \"Count\": 18446744073709551615, \"Datatype\": 9}},\n".to_string()),
                Just("{}]".to_string()),
                "[ -~]{0,40}",
            ], 0..24)
        ) {
            let mut s = String::from("[\n");
            for p in parts { s.push_str(&p); }
            let _ = nccl_profiler::read_profiler_dump_bytes("f", s.as_bytes(), &opts());
        }
    }
}

/// Without GPU clocks (as before NCCL 2.27, or `StartGpuClk` 0), host times are used and
/// every process's clock is shifted so that shared collectives end together.
#[test]
fn profiler_host_clocks_are_aligned_on_collective_ends() {
    let dir = std::env::temp_dir().join(format!("flare-nccl-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(fixture("profiler")).unwrap() {
        let p = f.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        let stripped: String = text
            .lines()
            .map(|l| match l.find("\"StartGpuClk\"") {
                Some(i) => format!("{}\"StartGpuClk\": 0, \"StopGpuClk\": 0}}}},", &l[..i]),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join(p.file_name().unwrap()), stripped).unwrap();
    }
    let t = read_profiler_dump_dir(&dir, &opts()).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(t.meta.detail.contains("host clocks"), "{}", t.meta.detail);
    let a0 = sync_ops(&t, 0, OpKind::AllReduce);
    let a1 = sync_ops(&t, 1, OpKind::AllReduce);
    let a2 = sync_ops(&t, 2, OpKind::AllReduce);
    assert_eq!(a0.len(), 6);
    for ((x, y), z) in a0.iter().zip(&a1).zip(&a2) {
        assert_eq!(x.end_ns, y.end_ns);
        assert_eq!(x.end_ns, z.end_ns);
        assert_eq!(z.start_ns - x.start_ns, 3_000_000);
        assert_eq!(y.start_ns, x.start_ns);
    }
    let f = detectors_with_findings(&t);
    assert!(
        f.iter()
            .any(|(d, r)| *d == DetectorId::SlowRank && r.contains(&2)),
        "findings: {f:?}"
    );
}
