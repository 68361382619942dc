//! Fuzz-style checks: arbitrary bytes and mutated valid inputs never panic the readers.
//! (Errors are fine; panics, hangs and aborts are not.)

mod common;

use common::hand_built;
use flare_import::{
    read_kineto_bytes, read_native, write_kineto_rank, write_native, KinetoOptions,
};
use proptest::prelude::*;
use std::io::Write;
use std::sync::OnceLock;

fn valid_kineto() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        let mut buf = Vec::new();
        write_kineto_rank(&hand_built(), 1, &mut buf).unwrap();
        buf
    })
}

/// A CPU-side trace (a rank of a real Gloo DDP job, its first 150 events): the Gloo
/// work spans, c10d launches and CPU spans the CPU-side reading turns into ops.
fn valid_cpu_kineto() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/real_jobs/ddp_host_stall/traces/rank2.json.gz");
        let mut json = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()),
            &mut json,
        )
        .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let events = v["traceEvents"].as_array_mut().unwrap();
        // Keep the Gloo spans and the launches among the first events.
        events.sort_by_key(|e| {
            !e["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gloo:") || n.starts_with("c10d::"))
        });
        events.truncate(150);
        // And the host calls a profile with shapes, stacks and GC records (see the
        // reader's host_calls): a program frame, a GC pause and a sync inside it, a GEMM
        // with its shapes, a runtime sync and a `cuda_sync` event.
        let (pid, tid) = (events[0]["pid"].clone(), events[0]["tid"].clone());
        let t0 = events.iter().filter_map(|e| e["ts"].as_f64()).fold(f64::MAX, f64::min);
        let event = |cat: &str, name: &str, ts: f64, dur: f64, args: serde_json::Value| {
            serde_json::json!({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                               "ts": t0 + ts, "dur": dur, "args": args})
        };
        events.extend([
            event("python_function", "train.py(88): step", 1.0, 50.0, serde_json::json!({})),
            event("python_function", "Python GC", 2.0, 3.0, serde_json::json!({})),
            event("cpu_op", "aten::_local_scalar_dense", 10.0, 2.0, serde_json::json!({})),
            event(
                "cpu_op",
                "aten::addmm",
                20.0,
                5.0,
                serde_json::json!({"Input Dims": [[1022], [64, 1022], [1022, 1022], [], []],
                                   "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]}),
            ),
            event("cuda_runtime", "cudaStreamSynchronize", 30.0, 1.0, serde_json::json!({})),
            event("cuda_sync", "Stream Sync", 31.0, 1.0, serde_json::json!({})),
            // torch.save from the program: a checkpoint no annotation names
            event("python_function", "torch/serialization.py(945): save", 35.0, 10.0, serde_json::json!({})),
        ]);
        serde_json::to_vec(&v).unwrap()
    })
}

fn valid_prometheus() -> &'static [u8] {
    br#"{"status":"success","data":{"resultType":"matrix","result":[
      {"metric":{"__name__":"DCGM_FI_DEV_SM_CLOCK","Hostname":"node3","gpu":"2"},"values":[[100,"1980"],[102,"1975"],[104,"1970"]]},
      {"metric":{"__name__":"node_infiniband_port_data_transmitted_bytes_total","instance":"node4:9100","device":"mlx5_1"},"values":[[100,"1000"],[102,"5000"]]}
    ]}}"#
}

/// A window summary as `flare agent --out` writes it, with a rank's start-up record.
fn valid_summary() -> &'static [u8] {
    br#"{"version":1,"job_id":"j","node":"n0","window":5,"window_ns":2000000000,
      "start_unix_ns":10000000000,"end_unix_ns":12000000000,"world_size":2,"ranks":[
      {"rank":1,"local_rank":1,"pid":42,"iterations":[{"step":3,"start_unix_ns":10000000000,"duration_ns":5000000}],
       "ops":[],"busy_ns":100,"observed_ns":2000000000,"events":10,"dropped_total":0,
       "startup":{"phases":[{"phase":"launch","start_unix_ns":9000000000,"end_unix_ns":9500000000},
                            {"phase":"custom","name":"tokenize","start_unix_ns":9500000000}],"complete":false}}]}"#
}

fn valid_native() -> &'static [u8] {
    static V: OnceLock<Vec<u8>> = OnceLock::new();
    V.get_or_init(|| {
        let mut buf = Vec::new();
        write_native(&hand_built(), &mut buf).unwrap();
        buf
    })
}

/// Edits applied to a valid input.
#[derive(Debug, Clone)]
enum Edit {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Delete(prop::sample::Index, usize),
    Insert(prop::sample::Index, Vec<u8>),
    Truncate(prop::sample::Index),
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    // JSON-significant bytes make the mutations reach deeper than random noise.
    let token = prop_oneof![
        Just(b'"'),
        Just(b','),
        Just(b':'),
        Just(b'{'),
        Just(b'}'),
        Just(b'['),
        Just(b']'),
        Just(b'-'),
        Just(b'.'),
        Just(b'e'),
        Just(b'9'),
        Just(b'0'),
        Just(b'\\'),
        any::<u8>(),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<prop::sample::Index>(), token.clone()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<prop::sample::Index>(), 1usize..64).prop_map(|(i, n)| Edit::Delete(i, n)),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(token, 1..16)
        )
            .prop_map(|(i, v)| Edit::Insert(i, v)),
        any::<prop::sample::Index>().prop_map(Edit::Truncate),
    ]
}

fn apply(input: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut v = input.to_vec();
    for e in edits {
        if v.is_empty() {
            break;
        }
        match e {
            Edit::Flip(i, b) => {
                let i = i.index(v.len());
                v[i] ^= 1 << b;
            }
            Edit::Set(i, b) => {
                let i = i.index(v.len());
                v[i] = *b;
            }
            Edit::Delete(i, n) => {
                let i = i.index(v.len());
                let end = (i + n).min(v.len());
                v.drain(i..end);
            }
            Edit::Insert(i, bytes) => {
                let i = i.index(v.len());
                v.splice(i..i, bytes.iter().copied());
            }
            Edit::Truncate(i) => {
                let i = i.index(v.len());
                v.truncate(i);
            }
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn kineto_reader_survives_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_kineto_bytes("fuzz-rank0.json", &data, &KinetoOptions::default());
    }

    #[test]
    fn kineto_reader_survives_mutated_traces(edits in prop::collection::vec(arb_edit(), 1..6)) {
        let data = apply(valid_kineto(), &edits);
        if let Err(e) = read_kineto_bytes("fuzz-rank0.json", &data, &KinetoOptions::default()) {
            prop_assert!(e.to_string().contains("fuzz-rank0.json"), "{}", e);
        }
    }

    #[test]
    fn kineto_reader_survives_mutated_cpu_side_traces(edits in prop::collection::vec(arb_edit(), 1..6)) {
        let data = apply(valid_cpu_kineto(), &edits);
        if let Err(e) = read_kineto_bytes("fuzz-rank2.json", &data, &KinetoOptions::default()) {
            prop_assert!(e.to_string().contains("fuzz-rank2.json"), "{}", e);
        }
    }

    #[test]
    fn kineto_reader_survives_mutated_gzip(edits in prop::collection::vec(arb_edit(), 1..3)) {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(valid_kineto()).unwrap();
        let data = apply(&gz.finish().unwrap(), &edits);
        let _ = read_kineto_bytes("fuzz-rank0.json.gz", &data, &KinetoOptions::default());
    }

    #[test]
    fn native_reader_survives_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(read_native(&data[..], "fuzz.flare").is_err());
    }

    #[test]
    fn prometheus_reader_survives_mutated_documents(edits in prop::collection::vec(arb_edit(), 1..6)) {
        let data = apply(valid_prometheus(), &edits);
        if let Err(e) = flare_import::prometheus::read_machine_metrics_bytes(&data, "fuzz-prom.json") {
            prop_assert!(e.to_string().contains("fuzz-prom.json"), "{}", e);
        }
    }

    #[test]
    fn prometheus_reader_survives_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = flare_import::prometheus::read_machine_metrics_bytes(&data, "fuzz-prom.json");
    }

    #[test]
    fn summary_reader_survives_mutated_summaries(edits in prop::collection::vec(arb_edit(), 1..6)) {
        let data = apply(valid_summary(), &edits);
        if let Err(e) = flare_import::agent_summaries::parse("fuzz-w5.json", &data) {
            prop_assert!(e.to_string().contains("fuzz-w5.json"), "{}", e);
        }
    }

    #[test]
    fn native_reader_survives_mutated_files(edits in prop::collection::vec(arb_edit(), 1..6)) {
        let data = apply(valid_native(), &edits);
        let _ = read_native(&data[..], "fuzz.flare");
    }
}

/// Hand-picked hostile Kineto inputs: deep nesting, huge numbers, odd types.
#[test]
fn kineto_reader_rejects_hostile_values() {
    let opts = KinetoOptions::default();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    for (name, json) in [
        ("deep", deep.as_str()),
        (
            "huge-world",
            r#"{"distributedInfo": {"rank": 0, "world_size": 99999999999}, "traceEvents": []}"#,
        ),
        (
            "huge-rank",
            r#"{"distributedInfo": {"rank": 4294967296}, "traceEvents": []}"#,
        ),
        (
            "huge-ts",
            r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e300, "dur": 1}]}"#,
        ),
        (
            "overflow",
            r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 9223372036854775, "dur": 9223372036854775}]}"#,
        ),
        (
            "base-overflow",
            r#"{"baseTimeNanoseconds": 9223372036854775807, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 1}]}"#,
        ),
        (
            "group-huge",
            r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": 5, "dur": 1, "args": {"Group size": 18446744073709551615, "Global rank start": 18446744073709551615, "Global rank stride": 18446744073709551615}}]}"#,
        ),
        (
            "dup-member",
            r#"{"distributedInfo": {"rank": 0, "world_size": 4}, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": 5, "dur": 1, "args": {"Process Group Ranks": "[0, 0]"}}]}"#,
        ),
        (
            "member-outside",
            r#"{"distributedInfo": {"rank": 0, "world_size": 4}, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": 5, "dur": 1, "args": {"Process Group Ranks": [0, 9]}}]}"#,
        ),
        (
            "step",
            r#"{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#x", "ts": 0, "dur": 1}]}"#,
        ),
        (
            "types",
            r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": {"a": [1]}, "Seq": [1, "x"], "dtype": 5}}]}"#,
        ),
        ("not-object", "42"),
        ("empty", ""),
    ] {
        let file = format!("rank0-{name}.json");
        match read_kineto_bytes(&file, json.as_bytes(), &opts) {
            Ok(_) => assert!(name == "types", "{name}: expected an error"),
            Err(e) => assert!(e.to_string().contains(&file), "{name}: {e}"),
        }
    }
}

/// The CPU-side seed of the fuzz cases reads as a CPU-side trace with its collectives.
#[test]
fn the_cpu_side_seed_reads_its_collectives() {
    let (t, stats) =
        read_kineto_bytes("rank2.json", valid_cpu_kineto(), &KinetoOptions::default()).unwrap();
    assert!(t.meta.cpu_compute);
    assert!(stats.cpu_collectives > 0, "{stats:?}");
    // Its host calls: each counted once, the GEMM with its shapes and type, the sync and
    // the GC pause placed in the program's frame.
    let calls = &t.meta.host_calls;
    let mut names: Vec<(&str, u64, Option<&str>)> = calls
        .counts
        .iter()
        .map(|c| (c.name.as_str(), c.count, c.dtype.as_deref()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("Stream Sync", 1, None),
            ("aten::_local_scalar_dense", 1, None),
            (
                "aten::addmm [[1022],[64,1022],[1022,1022],[],[]]",
                1,
                Some("BFloat16")
            ),
            (
                "aten::addmm [[256],[64,256],[256,256],[],[]]",
                4,
                Some("Float")
            ),
            ("aten::linear [[64,256],[256,256],[256]]", 4, Some("Float")),
            ("aten::mm [[256,64],[64,256]]", 1, Some("Float")),
            ("aten::mm [[64,256],[256,256]]", 1, Some("Float")),
            ("cudaStreamSynchronize", 1, None),
        ]
    );
    let site = [("train.py(88): step".to_string(), 1)];
    assert_eq!(calls.sites_of("aten::_local_scalar_dense"), site);
    assert_eq!(calls.sites_of("Python GC"), site);
    assert!(t.ranks[0]
        .ops
        .iter()
        .any(|o| o.kind == flare_model::OpKind::GarbageCollection));
    let saves: Vec<i64> = t.ranks[0]
        .ops
        .iter()
        .filter(|o| o.kind == flare_model::OpKind::Checkpoint)
        .map(|o| o.end_ns - o.start_ns)
        .collect();
    assert_eq!(saves, [10_000], "one checkpoint of 10 us");
}

#[test]
fn the_summary_seed_reads_its_start_up_record() {
    let s = flare_import::agent_summaries::parse("w5.json", valid_summary()).unwrap();
    let r = s.ranks[0].startup.as_ref().unwrap();
    assert_eq!(r.phases.len(), 2);
    assert_eq!(r.phases[1].label(), "tokenize");
}
