//! End-to-end tests of the `flare` binary: the commands a user runs.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn flare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flare"))
}

/// A scratch directory removed when the test ends.
struct TmpDir(PathBuf);

impl std::ops::Deref for TmpDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TmpDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TmpDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(name: &str) -> TmpDir {
    let d = std::env::temp_dir().join(format!("flare-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TmpDir(d)
}

fn shared_data() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    assert!(p.is_dir(), "shared data not found at {}", p.display());
    p
}

fn run_json(cmd: &mut Command) -> Value {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn demo_names_the_injected_gpu_and_writes_a_report() {
    let d = tmp("demo");
    let report = d.join("report.html");
    let out = flare()
        .args([
            "demo",
            "--dp",
            "4",
            "--pp",
            "2",
            "--iterations",
            "8",
            "--seed",
            "5",
            "--report",
        ])
        .arg(&report)
        .args(["--save"])
        .arg(d.join("job"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("slow_gpu"), "{text}");
    assert!(
        text.contains("Verdict against ground truth: correct"),
        "{text}"
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("<svg") && html.contains("slow_gpu"));
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("job/truth.json")).unwrap()).unwrap();
    // The saved trace diagnoses to the same culprit.
    let v = run_json(flare().arg("diagnose").arg(d.join("job")).arg("--json"));
    assert_eq!(
        v["findings"][0]["culprits"][0]["rank"],
        truth["culprits"][0]["rank"]
    );
}

#[test]
fn demo_reports_a_healthy_job_as_healthy() {
    let d = tmp("healthy");
    let v = run_json(
        flare()
            .args([
                "demo",
                "--fault",
                "none",
                "--dp",
                "4",
                "--pp",
                "2",
                "--iterations",
                "8",
                "--json",
                "--report",
            ])
            .arg(d.join("r.html")),
    );
    assert_eq!(v["healthy"], true, "{v:#}");
}

#[test]
fn simulated_kineto_traces_diagnose_like_the_native_trace() {
    let d = tmp("kineto");
    let status = flare()
        .args([
            "sim",
            "--fault",
            "slow_nic",
            "--dp",
            "4",
            "--pp",
            "2",
            "--iterations",
            "6",
            "--seed",
            "9",
            "--kineto",
            "--out",
        ])
        .arg(&d)
        .status()
        .unwrap();
    assert!(status.success());
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("truth.json")).unwrap()).unwrap();
    let native = run_json(flare().arg("diagnose").arg(&d).arg("--json"));
    let kineto = run_json(
        flare()
            .arg("diagnose")
            .arg(d.join("kineto"))
            .args(["--format", "kineto", "--json"]),
    );
    // Kineto files do not say the layout; the user states it, and the report lays the
    // ranks out by it.
    let p = &native["job"]["parallel"];
    assert_eq!((&p["dp"], &p["pp"]), (&4.into(), &2.into()), "{p:#}");
    assert!(
        kineto["job"].get("parallel").is_none(),
        "{:#}",
        kineto["job"]
    );
    let spec = format!("tp={},pp={}", p["tp"], p["pp"]);
    let report = d.join("stated.html");
    let stated = run_json(
        flare()
            .arg("diagnose")
            .arg(d.join("kineto"))
            .args([
                "--format",
                "kineto",
                "--json",
                "--parallel",
                &spec,
                "--report",
            ])
            .arg(&report),
    );
    assert_eq!(&stated["job"]["parallel"], p);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("id=\"layout\"") && html.contains("By parallel group"));
    for v in [&native, &kineto, &stated] {
        let c = &v["findings"][0]["culprits"][0];
        assert_eq!(v["findings"][0]["kind"], "slow_link", "{v:#}");
        assert_eq!(c["node"], truth["culprits"][0]["node"]);
        assert_eq!(c["local_gpu"], truth["culprits"][0]["local_gpu"]);
    }
    let wrong = flare()
        .arg("diagnose")
        .arg(d.join("kineto"))
        .args(["--format", "kineto", "--parallel", "tp=3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success()
            && err.contains("--parallel \"tp=3\"")
            && err.contains("cannot hold"),
        "{err}"
    );
}

#[test]
fn real_kineto_traces_are_diagnosed() {
    let k = shared_data().join("kineto");
    // Two ranks sampled from a 128-rank job.
    let v = run_json(
        flare()
            .arg("diagnose")
            .arg(k.join("sampled_rank-0.json.gz"))
            .arg(k.join("sampled_rank-1.json.gz"))
            .arg("--json"),
    );
    assert_eq!(v["job"]["world_size"], 128, "{v:#}");
    assert_eq!(v["job"]["ranks_with_data"], 2);
    assert_eq!(v["job"]["missing_ranks"].as_array().unwrap().len(), 126);
    assert_eq!(v["job"]["iterations"], serde_json::json!([551, 552]));
    // Two ranks with no communicator metadata cannot show a straggler: never "healthy".
    assert_eq!(v["conclusive"], false);
    assert_eq!(v["healthy"], false);
    // Rank 0 of a 2-rank job with NCCL metadata.
    let v = run_json(
        flare()
            .arg("diagnose")
            .arg(k.join("nccl_data.json.gz"))
            .arg("--json"),
    );
    assert_eq!(v["job"]["world_size"], 2, "{v:#}");
    assert_eq!(v["job"]["iterations"], serde_json::json!([4, 5, 6]));
    // The directory mixes two jobs: that is an error that names both files.
    let out = flare().arg("diagnose").arg(&k).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nccl_data.json.gz") && err.contains("sampled_rank-0.json.gz"),
        "{err}"
    );
}

#[test]
fn bad_input_gives_a_clear_error_not_a_panic() {
    let d = tmp("bad");
    let f = d.join("rank_0.json");
    std::fs::write(&f, "{\"traceEvents\": [ {\"ph\": \"X\", ").unwrap();
    let out = flare().arg("diagnose").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank_0.json"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let out = flare()
        .arg("diagnose")
        .arg(d.join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let empty = tmp("empty");
    let out = flare().arg("diagnose").arg(&empty).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(unix)]
#[test]
fn special_files_and_oversized_inputs_fail_fast_with_a_clear_message() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("skipping: no /dev/zero");
        return;
    }
    let t0 = std::time::Instant::now();
    let out = flare().arg("diagnose").arg("/dev/zero").output().unwrap();
    assert!(t0.elapsed().as_secs() < 20, "took {:?}", t0.elapsed());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/dev/zero: is a character device, not a regular file or directory"),
        "{err}"
    );
    // Over a limit: the message names the file, the limit and the flag.
    let d = tmp("limits");
    let f = d.join("rank_0.json");
    std::fs::write(&f, vec![b' '; 5000]).unwrap();
    let out = flare()
        .args(["diagnose", "--max-input-bytes", "100"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rank_0.json: 5000 bytes, more than the limit of 100 bytes")
            && err.contains("--max-input-bytes"),
        "{err}"
    );
}

#[test]
fn bench_accuracy_prints_the_documented_json() {
    let v = run_json(flare().args([
        "bench",
        "accuracy",
        "--json",
        "--scales",
        "64",
        "--runs",
        "1",
        "--iterations",
        "6",
    ]));
    for method in ["flare", "hta", "nvrx_gpu", "nvrx"] {
        for k in ["top1", "top3", "false_positive_rate", "scenarios"] {
            assert!(
                v[method]["overall"].get(k).is_some(),
                "{method} {k} missing: {v:#}"
            );
        }
        assert!(v[method]["by_scale"]["64"]["top1"].is_number());
        assert!(v[method]["by_fault"]["slow_gpu"]["scenarios"].as_u64() == Some(1));
    }
    // HTA always names stragglers, so every fault-free run counts against it.
    assert_eq!(
        v["hta"]["overall"]["false_positive_rate"].as_f64(),
        Some(1.0)
    );
    assert!(v["latency_ms"].is_object());
}

#[test]
fn demo_names_the_culprit_for_every_fault_kind_at_1024_gpus() {
    let d = tmp("every-fault");
    for fault in [
        "none",
        "slow_gpu",
        "slow_nic",
        "congested_switch",
        "host_stall",
        "launch_bound",
        "stage_imbalance",
        "sequence_imbalance",
        "intermittent",
        "hang",
    ] {
        let out = flare()
            .args(["demo", "--fault", fault, "--report"])
            .arg(d.join(format!("{fault}.html")))
            .output()
            .unwrap();
        assert!(out.status.success(), "{fault}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("Verdict against ground truth: correct"),
            "{fault}: {text}"
        );
    }
}

#[test]
fn flight_recorder_dumps_name_the_ranks_that_never_arrived() {
    for scenario in ["gpu_error_2nd", "lock_gil_1st"] {
        let v = run_json(
            flare()
                .arg("diagnose")
                .arg(shared_data().join("flight-recorder").join(scenario))
                .arg("--json"),
        );
        assert_eq!(v["job"]["source"], "flight_recorder");
        assert_eq!(
            v["culprit_ranks"],
            serde_json::json!([9, 14]),
            "{scenario}: {v:#}"
        );
        let f = &v["findings"][0];
        assert_eq!(f["kind"], "hang");
        let summary = f["summary"].as_str().unwrap();
        assert!(summary.contains("process group 72"), "{summary}");
        assert!(summary.contains("EXPERT_MODEL_PARALLEL_GROUP"), "{summary}");
        assert!(summary.contains("nccl:all_to_all"), "{summary}");
    }
}

#[test]
fn whatif_matches_the_published_analysis_within_two_percent() {
    let dir = shared_data().join("stragglers");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
    };
    let d = tmp("whatif");
    for t in ["ST", "SE"] {
        let svg = d.join(format!("{t}.svg"));
        let v = run_json(
            flare()
                .arg("whatif")
                .arg(dir.join(format!("trace-{t}.parquet")))
                .arg("--json")
                .arg("--svg")
                .arg(&svg),
        );
        let close = |got: &Value, want: &Value, what: &str| {
            let (g, w) = (got.as_f64().unwrap(), want.as_f64().unwrap());
            assert!((g - w).abs() <= 0.02 * w.abs(), "{t} {what}: {g} vs {w}");
        };
        close(
            &v["slowdown"],
            &read(&format!("result-{t}.json"))["blocking_slowdown"],
            "S",
        );
        close(&v["m_w"], &read(&format!("mw-{t}.json"))["Mw"], "M_W");
        close(&v["m_s"], &read(&format!("ms-{t}.json"))["Ms"], "M_S");
        for k in ["by_op_type", "by_worker", "heatmap"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    }
}

#[test]
fn whatif_on_flare_traces_points_at_the_slow_worker_and_the_heavy_stage() {
    let d = tmp("whatif-sim");
    let sim = |fault: &str| {
        let out = d.join(fault);
        let st = flare()
            .args([
                "sim",
                "--tp",
                "2",
                "--pp",
                "4",
                "--dp",
                "8",
                "--iterations",
                "6",
            ])
            .args(["--fault", fault, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let truth: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("truth.json")).unwrap())
                .unwrap();
        (out, truth)
    };
    let (slow, truth) = sim("slow_gpu");
    let v = run_json(flare().arg("whatif").arg(&slow).arg("--json"));
    assert!(v["slowdown"].as_f64().unwrap() > 1.05, "{}", v["slowdown"]);
    let c = &truth["culprits"][0];
    let worst = v["by_worker"]
        .as_array()
        .unwrap()
        .iter()
        .max_by(|a, b| {
            a["slowdown"]
                .as_f64()
                .unwrap()
                .total_cmp(&b["slowdown"].as_f64().unwrap())
        })
        .unwrap();
    assert_eq!(
        (&worst["dp_rank"], &worst["stage"]),
        (&c["dp_rank"], &c["stage"])
    );
    assert!(
        v["m_w"].as_f64().unwrap() > 0.5,
        "fixing that one worker fixes most: {}",
        v["m_w"]
    );

    let (heavy, _) = sim("stage_imbalance");
    let v = run_json(flare().arg("whatif").arg(&heavy).arg("--json"));
    assert!(
        v["m_s"].as_f64().unwrap() > 0.8,
        "fixing the last stage fixes it: {}",
        v["m_s"]
    );

    let (none, _) = sim("none");
    let v = run_json(flare().arg("whatif").arg(&none).arg("--json"));
    assert!(v["slowdown"].as_f64().unwrap() < 1.03, "{}", v["slowdown"]);
}

/// Traces from an independent generator (scripts/gen_ddp_kineto.py: DDP buckets on an
/// overlapping NCCL stream, no `Seq` args, skewed host clocks), not Flare's simulator.
#[test]
fn kineto_traces_from_another_generator_are_diagnosed() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gen_ddp_kineto.py");
    let cases: &[(&[&str], Option<u64>)] = &[
        (
            &["--slow-rank", "3", "--factor", "1.05", "--seed", "1"],
            Some(3),
        ),
        (
            &[
                "--slow-rank",
                "6",
                "--factor",
                "1.3",
                "--seed",
                "5",
                "--ranks",
                "16",
            ],
            Some(6),
        ),
        (&["--slow-rank", "-1", "--seed", "2"], None),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let d = tmp(&format!("ddp{i}"));
        let st = Command::new("python3")
            .arg(&script)
            .arg(&*d)
            .args(*args)
            .status()
            .unwrap();
        assert!(st.success(), "generator failed");
        let v = run_json(flare().arg("diagnose").arg(&d).arg("--json"));
        match want {
            Some(rank) => {
                assert_eq!(v["findings"][0]["kind"], "slow_gpu", "{args:?}: {v:#}");
                assert_eq!(v["findings"][0]["culprits"][0]["rank"], *rank, "{args:?}");
            }
            None => assert_eq!(v["healthy"], true, "{args:?}: {v:#}"),
        }
    }
}

/// The abnormal-op model in the repository is what `flare train` produces with its default
/// seed and settings, byte for byte (training is reproducible; nobody hand-edited it).
#[test]
fn committed_model_is_reproduced_by_flare_train() {
    let d = tmp("train");
    let out = d.join("model.json");
    let status = flare().args(["train", "--out"]).arg(&out).output().unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let committed = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../flare-engine/models/abnormal_op.json"),
    )
    .unwrap();
    let trained = std::fs::read(&out).unwrap();
    assert!(
        committed == trained,
        "flare train no longer reproduces crates/flare-engine/models/abnormal_op.json: retrain it with `flare train` and commit the result"
    );
    // A different seed gives a different forest.
    let other = d.join("other.json");
    let status = flare()
        .args(["train", "--quick", "--seed", "7", "--out"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(status.status.success());
    assert_ne!(std::fs::read(&other).unwrap(), trained);
}

#[test]
fn timeline_writes_every_rank_on_one_clock_grouped_with_the_culprit_marked() {
    let dir = tmp("timeline");
    let st = flare()
        .args([
            "sim",
            "--fault",
            "slow_gpu",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "2",
            "--iterations",
            "4",
            "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let truth: Value =
        serde_json::from_slice(&std::fs::read(dir.join("truth.json")).unwrap()).unwrap();
    let culprit = truth["culprits"][0]["rank"]
        .as_u64()
        .expect("the simulator names its culprit");
    let out = dir.join("timeline.json");
    let st = flare()
        .arg("timeline")
        .arg(&dir)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    let named = |name: &str| -> Vec<&Value> { ev.iter().filter(|e| e["name"] == name).collect() };
    // A process per rank, ordered by stage, then data-parallel rank, then tensor-parallel rank.
    let procs = named("process_name");
    assert_eq!(procs.len(), 8);
    let mut by_index: Vec<(u64, String)> = named("process_sort_index")
        .iter()
        .map(|e| {
            let pid = e["pid"].as_u64().unwrap();
            let name = procs.iter().find(|p| p["pid"] == pid).unwrap()["args"]["name"]
                .as_str()
                .unwrap();
            (e["args"]["sort_index"].as_u64().unwrap(), name.to_string())
        })
        .collect();
    by_index.sort();
    assert!(
        by_index[0].1.starts_with("rank 0 · stage 0 · dp 0 · tp 0"),
        "{by_index:?}"
    );
    assert!(
        by_index[4].1.contains("stage 1 · dp 0 · tp 0"),
        "{by_index:?}"
    );
    // The culprit's process and ops are marked, no one else's.
    let marked: Vec<u64> = procs
        .iter()
        .filter(|p| p["args"]["name"].as_str().unwrap().contains("culprit"))
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(marked, [culprit], "{procs:?}");
    let ops: Vec<&Value> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "launch" && e["cat"] != "iteration")
        .collect();
    assert!(ops
        .iter()
        .all(|e| (e["args"]["culprit"] == true) == (e["pid"] == culprit)));
    // One clock from zero; every flow starts and ends once.
    assert!(ev.iter().filter_map(|e| e["ts"].as_f64()).all(|t| t >= 0.0));
    assert!(ops.iter().all(|e| e["dur"].as_f64().unwrap() >= 0.0));
    let ids = |ph: &str| -> Vec<u64> {
        let mut v: Vec<u64> = ev
            .iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| e["id"].as_u64().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids("s"), ids("f"));
    assert!(!ids("s").is_empty());
    // Tracks: compute, communication and host per rank; the stdout counts match.
    assert!(ops.iter().any(|e| e["tid"] == 1) && ops.iter().any(|e| e["tid"] == 2));
    let said = String::from_utf8_lossy(&st.stdout);
    assert!(
        said.contains(&format!("8 ranks, {} ops", ops.len())),
        "{said}"
    );

    // Some iterations only.
    let st = flare()
        .arg("timeline")
        .arg(&dir)
        .args([
            "--iterations",
            "1-2",
            "--no-flows",
            "--no-diagnosis",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    let its: std::collections::BTreeSet<u64> = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] != "iteration")
        .map(|e| e["args"]["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(its.into_iter().collect::<Vec<_>>(), [1, 2]);
    assert!(ev.iter().all(|e| e["ph"] != "s"));
    let st = flare()
        .arg("timeline")
        .arg(&dir)
        .args(["--iterations", "3-1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("expected A-B"));

    // The same job traced live: the summaries its agents would have written, as a
    // timeline of steps and windows on the wall clock, the culprit named by the live
    // engine, its ranks ordered by the layout the summaries carry.
    let trace =
        flare_import::open(&[dir.to_path_buf()], &flare_import::OpenOptions::default()).unwrap();
    let flare_import::Opened::Trace(trace) = trace else {
        panic!("the simulator writes a trace")
    };
    let live = dir.join("summaries");
    std::fs::create_dir(&live).unwrap();
    let windows = flare_agent::replay::summaries_of_trace(&trace, "live", 200_000_000);
    for s in windows.iter().flatten() {
        flare_agent::write_summary(&live, s).unwrap();
    }
    let st = flare()
        .arg("timeline")
        .arg(&live)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&st.stdout);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(
        said.contains("8 ranks from") && said.contains("1 culprit rank(s) marked"),
        "{said}"
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    let name = |pid: u64| {
        ev.iter()
            .find(|e| e["name"] == "process_name" && e["pid"] == pid)
            .unwrap()["args"]["name"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(name(culprit).contains("◀ culprit"), "{}", name(culprit));
    assert!(name(culprit).contains(" · stage "), "{}", name(culprit));
    let steps = ev.iter().filter(|e| e["cat"] == "iteration").count();
    assert_eq!(steps, 8 * 4, "every rank's 4 steps");
    let st = flare()
        .arg("timeline")
        .arg(&live)
        .args(["--iterations", "1-2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!st.status.success());
    assert!(String::from_utf8_lossy(&st.stderr).contains("read by window"));
}
