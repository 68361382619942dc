//! The Kineto writer and reader against each other, and the reader on bad input.

mod common;

use common::{hand_built, temp_dir};
use flare_import::{
    read_kineto_bytes, read_kineto_dir, read_kineto_dir_with_stats, read_kineto_files,
    write_kineto_dir, write_kineto_rank, KinetoError, KinetoOptions,
};
use flare_model::{Op, OpKind, Trace};
use std::io::Write;
use std::path::PathBuf;

/// Ops of a rank in a canonical order, without in-flight ops (Kineto cannot hold them).
/// (start, kind, end, issue, iteration, comm, seq, peer, amount).
type OpKey = (i64, OpKind, i64, i64, u32, u32, u32, u32, u64);

fn comparable(t: &Trace, rank: usize) -> Vec<OpKey> {
    let mut v: Vec<_> = t.ranks[rank]
        .ops
        .iter()
        .filter(|o| o.end().is_some())
        .map(|o| {
            (
                o.start_ns,
                o.kind,
                o.end_ns,
                o.issue_ns,
                o.iteration,
                o.comm,
                o.seq,
                o.peer,
                o.amount,
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn writer_output_reads_back_exactly() {
    let original = hand_built();
    let dir = temp_dir("roundtrip");
    let stats = write_kineto_dir(&original, &dir).unwrap();
    assert_eq!(stats.files, 3);
    assert_eq!(stats.in_flight_omitted, 1);
    let (back, import) = read_kineto_dir_with_stats(&dir, &KinetoOptions::default()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(back.job.world_size, 4);
    assert_eq!(back.meta.missing_ranks, vec![3]);
    assert_eq!(
        back.communicators, original.communicators,
        "ids, kinds, members, labels"
    );
    assert_eq!(import.nccl_unrecognised, 0);
    assert_eq!(
        import.kernels_without_launch,
        3 * 2,
        "the flash kernels have no issue time"
    );
    assert_eq!(import.synthetic_communicators, 0);
    for r in 0..3 {
        assert_eq!(back.ranks[r].rank, original.ranks[r].rank);
        assert_eq!(
            back.ranks[r].iterations, original.ranks[r].iterations,
            "rank {r}: iterations, the unfinished one included"
        );
        assert_eq!(comparable(&back, r), comparable(&original, r), "rank {r}");
        // Names of compute and host ops survive; sync ops are named after NCCL kernels.
        let names = |t: &Trace| {
            let mut v: Vec<(i64, String)> = t.ranks[r]
                .ops
                .iter()
                .filter(|o| !o.kind.is_sync())
                .map(|o| (o.start_ns, t.name(o.name).to_string()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(&back), names(&original), "rank {r}");
    }
    let hung = original.ranks[2]
        .ops
        .iter()
        .filter(|o| o.end().is_none())
        .count();
    assert_eq!(hung, 1);
    assert_eq!(
        back.ranks[2].ops.len(),
        original.ranks[2].ops.len() - 1,
        "the in-flight op is left out"
    );
}

#[test]
fn plain_json_from_a_single_writer_call_reads_back() {
    let original = hand_built();
    let mut buf = Vec::new();
    write_kineto_rank(&original, 1, &mut buf).unwrap();
    let text = std::str::from_utf8(&buf).unwrap();
    assert!(text.contains("\"distributedInfo\""));
    assert!(text.contains("\"Process Group Ranks\": \"[1, 2]\""));
    assert!(text.contains("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"));
    assert!(text.contains("\"Collective name\": \"all_to_all\""));
    assert!(text.contains("ProfilerStep#100"));
    // Valid JSON for any other tool.
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    assert_eq!(v["distributedInfo"]["rank"], 1);
    let (back, _) = read_kineto_bytes("trace.json", &buf, &KinetoOptions::default()).unwrap();
    assert_eq!(back.ranks[0].rank, 1);
    assert_eq!(comparable(&back, 0), comparable(&original, 1));
    assert!(write_kineto_rank(&original, 9, Vec::new()).is_err());
}

fn write(dir: &std::path::Path, name: &str, data: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

const MINIMAL: &str = r#"{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2}
]}"#;

#[test]
fn bad_input_gives_clear_errors() {
    let opts = KinetoOptions::default();
    let dir = temp_dir("bad");

    // Malformed JSON: file, line and column.
    let p = write(
        &dir,
        "rank0.json",
        b"{\"traceEvents\": [\n  {\"ph\": \"X\",, }\n]}",
    );
    let e = read_kineto_files(std::slice::from_ref(&p), &opts).unwrap_err();
    match &e {
        KinetoError::Json { path, line, .. } => {
            assert!(path.ends_with("rank0.json"));
            assert_eq!(*line, 2);
        }
        other => panic!("expected a JSON error, got {other}"),
    }
    assert!(e.to_string().contains("rank0.json"), "{e}");

    // Not a trace.
    let p = write(&dir, "rank0.json", b"{\"schemaVersion\": 1}");
    let e = read_kineto_files(&[p], &opts).unwrap_err();
    assert!(matches!(e, KinetoError::MissingTraceEvents { .. }), "{e}");
    assert!(e.to_string().contains("traceEvents"), "{e}");

    // A bad timestamp: the event index is named.
    let p = write(
        &dir,
        "rank0.json",
        br#"{"traceEvents": [{"ph": "M"}, {"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]}"#,
    );
    let e = read_kineto_files(&[p], &opts).unwrap_err();
    match &e {
        KinetoError::BadEvent { index, what, .. } => {
            assert_eq!(*index, 1);
            assert!(what.contains("ts"), "{what}");
        }
        other => panic!("expected a bad event, got {other}"),
    }

    // Negative duration.
    let p = write(
        &dir,
        "rank0.json",
        br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -1}]}"#,
    );
    assert!(matches!(
        read_kineto_files(&[p], &opts).unwrap_err(),
        KinetoError::BadEvent { index: 0, .. }
    ));

    // No rank anywhere.
    let p = write(&dir, "trace.json", br#"{"traceEvents": []}"#);
    let e = read_kineto_files(&[p], &opts).unwrap_err();
    assert!(matches!(e, KinetoError::NoRank { .. }), "{e}");
    assert!(e.to_string().contains("trace.json"), "{e}");

    // The rank from the file name when distributedInfo is absent.
    let p = write(&dir, "worker_rank-3.json", br#"{"traceEvents": []}"#);
    let t = read_kineto_files(&[p], &opts).unwrap();
    assert_eq!(t.ranks[0].rank, 3);
    assert_eq!(t.job.world_size, 4);

    // Truncated gzip.
    let gz = gzip(MINIMAL.as_bytes());
    let p = write(&dir, "rank0.json.gz", &gz[..gz.len() / 2]);
    let e = read_kineto_files(&[p], &opts).unwrap_err();
    assert!(matches!(e, KinetoError::Gzip { .. }), "{e}");

    // Same rank twice; world sizes that disagree; a rank outside the world.
    let a = write(&dir, "a.json", MINIMAL.as_bytes());
    let b = write(&dir, "b.json", MINIMAL.as_bytes());
    assert!(matches!(
        read_kineto_files(&[a.clone(), b], &opts).unwrap_err(),
        KinetoError::DuplicateRank { rank: 0, .. }
    ));
    let c = write(
        &dir,
        "c.json",
        MINIMAL
            .replace(
                "\"rank\": 0, \"world_size\": 2",
                "\"rank\": 1, \"world_size\": 3",
            )
            .as_bytes(),
    );
    assert!(matches!(
        read_kineto_files(&[a, c], &opts).unwrap_err(),
        KinetoError::WorldSizeMismatch { .. }
    ));
    let d = write(
        &dir,
        "d.json",
        MINIMAL.replace("\"rank\": 0", "\"rank\": 5").as_bytes(),
    );
    assert!(matches!(
        read_kineto_files(&[d], &opts).unwrap_err(),
        KinetoError::Invalid { .. }
    ));

    // No files.
    assert!(matches!(
        read_kineto_files(&[], &opts).unwrap_err(),
        KinetoError::NoFiles
    ));
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("notes.txt"), b"not a trace").unwrap();
    let e = read_kineto_dir(&empty, &opts).unwrap_err();
    assert!(matches!(e, KinetoError::EmptyDirectory { .. }), "{e}");
    let e = read_kineto_dir(&dir.join("absent"), &opts).unwrap_err();
    assert!(matches!(e, KinetoError::Io { .. }), "{e}");

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lenient_where_producers_differ() {
    let opts = KinetoOptions::default();
    // A bare JSON array of events (the Chrome "array format"), a kernel without dur (in
    // flight), numbers as strings, a truncated rank list resolved from start and stride,
    // a Generic NCCL kernel with no arguments (kept as compute, counted).
    let json = r#"[
      {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "ts": 0, "dur": 100},
      {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(x)", "ts": "1.000", "dur": "2.5",
       "args": {"Collective name": "_allgather_base", "In msg nelems": "10", "dtype": "Float",
                "Group size": 40, "Global rank start": 0, "Global rank stride": 1,
                "Process Group Name": "3", "Seq": "41",
                "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, ..., 39]"}},
      {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 5},
      {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_Generic_4(x)", "ts": 6, "dur": 1}
    ]"#;
    let (t, stats) = read_kineto_bytes("rank-0.json", json.as_bytes(), &opts).unwrap();
    assert_eq!(stats.kernels_without_duration, 1);
    assert_eq!(stats.nccl_unrecognised, 1);
    let r = &t.ranks[0];
    let ag = r.ops.iter().find(|o| o.kind == OpKind::AllGather).unwrap();
    assert_eq!(
        (ag.start_ns, ag.end_ns, ag.seq, ag.amount),
        (1000, 3500, 41, 40)
    );
    assert_eq!(
        t.communicators[ag.comm as usize].members,
        (0..40).collect::<Vec<u32>>()
    );
    let gemm = r.ops.iter().find(|o| t.name(o.name) == "gemm").unwrap();
    assert_eq!(gemm.end_ns, Op::IN_FLIGHT);
    assert!(r.ops.iter().all(|o| o.iteration == 7));
}
