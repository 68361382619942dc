//! `flare compare` on real torch.profiler traces (`tests/fixtures/real_jobs`): a run
//! against itself changes nothing; a run whose rank 2 does extra forward passes against a
//! healthy run of the same job is slower, its classes' changes add up to the step's, and
//! the extra ops run more often per step.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(job: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real_jobs")
        .join(job)
        .join("traces")
}

/// `flare ARGS`, which must succeed; its standard output.
fn flare<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args(args)
        .output()
        .expect("flare runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn compare(baseline: &str, current: &str) -> serde_json::Value {
    compare_dirs(&fixture(baseline), &fixture(current))
}

/// `flare compare BASELINE CURRENT --json`'s document.
fn compare_dirs(baseline: &Path, current: &Path) -> serde_json::Value {
    let out = flare([
        "compare".as_ref(),
        baseline.as_os_str(),
        current.as_os_str(),
        "--json".as_ref(),
    ]);
    serde_json::from_slice(&out).expect("a findings document")
}

fn step_sums_add_up(doc: &serde_json::Value) {
    let c = &doc["comparison"];
    for (side, field) in [("baseline", "baseline_ms"), ("current", "current_ms")] {
        let sum: f64 = c["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[field].as_f64().unwrap())
            .sum();
        let step = c[side]["step_ms"].as_f64().unwrap();
        assert!(
            (sum - step).abs() < 1e-6 * step.max(1.0),
            "{side}: {sum} against {step}"
        );
    }
}

#[test]
fn a_run_against_itself_changes_nothing() {
    let doc = compare("ddp_none", "ddp_none");
    step_sums_add_up(&doc);
    assert!(doc["findings"].as_array().unwrap().is_empty(), "{doc:#}");
    for r in doc["comparison"]["classes"].as_array().unwrap() {
        assert_eq!(r["baseline_ms"], r["current_ms"], "{r}");
    }
}

/// The DDP fixtures' layers: a linear over a batch of 64 with 256 features.
const LINEAR: &str = "aten::linear [[64,256],[256,256],[256]]";

#[test]
fn extra_work_on_one_rank_is_a_slower_step_with_ops_run_more_often() {
    let doc = compare("ddp_none", "ddp_extra_work");
    step_sums_add_up(&doc);
    let c = &doc["comparison"];
    assert!(
        c["current"]["step_ms"].as_f64() > c["baseline"]["step_ms"].as_f64(),
        "{c:#}"
    );
    let f = &doc["findings"][0];
    assert_eq!(f["kind"], "regression", "{doc:#}");
    assert_eq!(f["severity"], "warning");
    // Rank 2's 4 extra forward passes: the forward's linear layers (4 per pass, one shape,
    // read inside DDP's forward annotation) run 8 times per step of a rank instead of 4
    // (4 + 16/4), and nothing else runs more often.
    let more_often: Vec<&str> = c["classes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["current_count"].as_f64().unwrap() > r["baseline_count"].as_f64().unwrap() + 0.5
        })
        .map(|r| r["class"].as_str().unwrap())
        .collect();
    assert_eq!(more_often, [LINEAR], "{c:#}");
    // Rank 2 alone runs them more often (4 + 16 per step)...
    let forward = c["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["class"] == LINEAR)
        .unwrap();
    let on = &forward["changed_on"];
    assert_eq!(on["ranks"], serde_json::json!([2]), "{forward:#}");
    assert_eq!(
        (on["baseline_count"].as_f64(), on["current_count"].as_f64()),
        (Some(4.0), Some(20.0))
    );
    let elsewhere = c["classes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r != &forward)
        .all(|r| r.get("changed_on").is_none());
    assert!(elsewhere, "{c:#}");
    // ...and the finding leads with it, though the all-reduce, where the others wait for
    // rank 2 on Gloo's ring (and share the 2-core machine with its extra work), took more
    // of the mean step: not "the network", which changed nothing.
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!(
            "compute {LINEAR} runs 20.0 times per step on rank 2 against 4.0"
        )),
        "{summary}"
    );
    let action = f["action"].as_str().unwrap();
    assert!(action.contains("on rank 2 alone"), "{action}");
    assert!(!action.contains("network"), "{action}");
}

#[test]
fn a_pipeline_stage_that_runs_a_model_of_its_own_is_named_over_its_peers_wait() {
    // Rank 2 runs four forward passes of a local model of the stage's layers per step; the
    // stages after it wait, and most of the mean step's change is untraced or waiting.
    let doc = compare("pipeline_none", "pipeline_extra_work");
    step_sums_add_up(&doc);
    let f = &doc["findings"][0];
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains("compute aten::linear [[64,512],[512,512],[512]] runs 8.0 times per step on rank 2 against 0.0"),
        "{summary}"
    );
}

/// Rank 2 alone is slower, each step, outside its ops (a slower DataLoader; a host stall):
/// the others wait for it at every collective, and the wait carries most of the mean step.
/// The comparison names the rank and what grew on it, not only "ranks wait".
#[test]
fn the_rank_the_others_wait_for_is_named_with_what_grew_on_it() {
    for (baseline, current, grew) in [
        ("ddp_none", "ddp_dataloader", "host dataloader grew +"),
        ("ddp_none", "ddp_host_stall", "untraced time grew +"),
        (
            "pipeline_none",
            "pipeline_dataloader",
            "host dataloader grew +",
        ),
        (
            "pipeline_none",
            "pipeline_host_stall",
            "untraced time grew +",
        ),
    ] {
        let doc = compare(baseline, current);
        let w = &doc["comparison"]["waited_for"];
        assert_eq!(w["ranks"], serde_json::json!([2]), "{current}: {w}");
        let summary = doc["findings"][0]["summary"].as_str().unwrap();
        assert!(
            summary.contains("the most of it: waiting for other ranks")
                && summary.contains("longer for rank 2, where ")
                && summary.contains(grew),
            "{current}: {summary}"
        );
    }
}

/// FSDP2 on Gloo: rank 2 runs a local model of the layers four times per step (20 linear
/// ops against 4), and the runs' steps are noisier than what that costs: no warning, but
/// the code path rank 2 alone takes is told (an `info`), which the mean over the ranks
/// (8 against 4) would not place.
#[test]
fn a_code_path_of_one_rank_is_told_while_the_step_is_within_its_noise() {
    let doc = compare("fsdp_none", "fsdp_extra_work");
    let f = doc["findings"].as_array().unwrap();
    assert_eq!(f.len(), 1, "{doc:#}");
    assert_eq!(f[0]["severity"], "info");
    let summary = f[0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("runs 20.0 times per step on rank 2 against 4.0"),
        "{summary}"
    );
}

#[test]
fn a_missing_input_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args(["compare", "/nonexistent/a", "/nonexistent/b"])
        .output()
        .expect("flare runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/a"), "{err}");
}

/// A simulated run written to a fresh directory.
fn simulated(fault: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flare-compare-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.display().to_string();
    flare([
        "sim",
        "--tp",
        "8",
        "--pp",
        "2",
        "--dp",
        "4",
        "--iterations",
        "30",
        "--seed",
        "1",
        "--fault",
        fault,
        "--out",
        &dir_arg,
    ]);
    dir
}

#[test]
fn one_run_is_split_where_its_step_changed_for_good() {
    // A NIC at 1/6.5 of its bandwidth in iterations 5-11 (seed 1): the step jumps there.
    let dir = simulated("intermittent", "intermittent");
    let out = flare(["compare".as_ref(), dir.as_os_str(), "--json".as_ref()]);
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    step_sums_add_up(&doc);
    let c = &doc["comparison"];
    let (before, after) = (
        c["baseline"]["step_ms"].as_f64().unwrap(),
        c["current"]["step_ms"].as_f64().unwrap(),
    );
    assert!(after > 1.2 * before, "{c:#}");
    assert!(
        c["current"]["source"]
            .as_str()
            .unwrap()
            .contains("iterations"),
        "{c:#}"
    );
    assert_eq!(doc["findings"][0]["kind"], "regression");
    // A steady run: nothing to split.
    let steady = simulated("none", "steady");
    let out = String::from_utf8(flare(["compare".as_ref(), steady.as_os_str()])).unwrap();
    assert!(out.contains("no persistent change of the step"), "{out}");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(steady);
}

#[test]
fn the_report_shows_the_waterfall_and_the_findings() {
    let dir = std::env::temp_dir().join(format!("flare-compare-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("compare.html");
    let (b, c) = (fixture("ddp_none"), fixture("ddp_extra_work"));
    flare([
        "compare".as_ref(),
        b.as_os_str(),
        c.as_os_str(),
        "--report".as_ref(),
        report.as_os_str(),
    ]);
    let html = std::fs::read_to_string(&report).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(html.contains("Where the change went"), "{html}");
    assert!(html.contains("steps slower by"), "{html}");
    assert!(html.contains(LINEAR), "{html}");
}

/// Two ranks of one real GPU job (HolisticTraceAnalysis' sampled traces: other ranks run
/// other embedding tables, other token counts, other data-dependent syncs, two steps
/// each): nothing that a person should act on. Found by running it: before the causes
/// were judged by shares and spreads, this pair read as misaligned GEMMs, a new sync and
/// a slow minor kernel.
#[test]
fn two_ranks_of_a_real_gpu_job_raise_no_warning() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/kineto");
    let (b, c) = (
        data.join("sampled_rank-0.json.gz"),
        data.join("sampled_rank-1.json.gz"),
    );
    let out = flare([
        "compare".as_ref(),
        b.as_os_str(),
        c.as_os_str(),
        "--json".as_ref(),
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let warnings: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "info")
        .map(|f| f["summary"].as_str().unwrap())
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
    assert!(doc["comparison"].get("causes").is_none(), "{doc}");
    // What it read: GEMM shapes and syncs from the CPU side of a GPU trace.
    let calls = doc["comparison"]["current"]["host_calls"]
        .as_array()
        .unwrap();
    assert!(calls.iter().any(|h| h["kind"] == "gemm"), "{calls:?}");
    assert!(
        calls.iter().any(|h| h["kind"] == "synchronize"),
        "{calls:?}"
    );
    assert!(
        doc["comparison"]["current"]["issue_latency"]["count"]
            .as_u64()
            .unwrap()
            > 1000
    );
}

/// Pairs of runs of one real job on an H100 (`tests/fixtures/real_gpu`): the runs differ
/// by `loss.item()` per step, by a hidden width off the tensor cores' alignment, or by
/// nothing.
fn gpu_compare(current: &str) -> serde_json::Value {
    gpu_compare_in("h100_regressions", current)
}

/// `current` against the baseline of the same run of the script, in `run`.
fn gpu_compare_in(run: &str, current: &str) -> serde_json::Value {
    compare_dirs(&gpu_run(run, "baseline"), &gpu_run(run, current))
}

/// One variant's traces in one run of the script on the H100.
fn gpu_run(run: &str, variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real_gpu")
        .join(run)
        .join(variant)
}

fn warnings(doc: &serde_json::Value) -> Vec<&serde_json::Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] != "info")
        .collect()
}

/// A sync per step is a change though the framework syncs seven times a step on its own
/// in both runs (DDP's first-iterations statistics): judged call by call, and placed at
/// the program's function and the call it made (the profiler's line number is not the
/// call's).
#[test]
fn a_real_gpu_jobs_new_sync_is_named_beside_the_frameworks_own() {
    let doc = gpu_compare("item_sync");
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["device_synchronization"]),
        "{doc}"
    );
    let w = warnings(&doc);
    assert_eq!(w.len(), 1, "{w:#?}");
    let e = &w[0]["evidence"][0];
    assert_eq!(e["metric"], "syncs_per_step");
    let (now, before) = (
        e["value"].as_f64().unwrap(),
        e["baseline"].as_f64().unwrap(),
    );
    assert!(before >= 7.0 && (now - before - 1.0).abs() < 0.05, "{e}");
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.contains("cudaStreamSynchronize 0.0 -> 1.0"),
        "{detail}"
    );
    assert!(detail.contains("run_variant -> Tensor.item"), "{detail}");
    assert!(
        !detail.contains("cudaEventSynchronize"),
        "the framework's syncs did not grow: {detail}"
    );
}

/// cuBLAS's aligned `nvjet` kernels give way to `cutlass ... align2` ones: the GEMM
/// shapes off alignment are named with their dimensions and element type, and the kernel
/// names a person reads are short.
#[test]
fn a_real_gpu_jobs_misaligned_gemms_are_named_with_their_shapes() {
    let doc = gpu_compare("misaligned");
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["tensor_core_misalignment"]),
        "{doc}"
    );
    let w = warnings(&doc);
    assert_eq!(w.len(), 1, "{w:#?}");
    let summary = w[0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("M=4096 N=4094 K=4094, BFloat16"),
        "{summary}"
    );
    // What the kernels achieved, from the launching GEMM ops' shapes: cuBLAS's aligned
    // kernels ran at over 800 TFLOPS, the align2 ones at about a third of that.
    let tflops = w[0]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metric"] == "gemm_tflops")
        .expect("the GEMM kernels' TFLOPS");
    let (now, before) = (
        tflops["value"].as_f64().unwrap(),
        tflops["baseline"].as_f64().unwrap(),
    );
    assert!(before > 700.0 && now < before / 2.5, "{tflops}");
    let text = String::from_utf8(flare([
        "compare".as_ref(),
        gpu_run("h100_regressions", "baseline").as_os_str(),
        gpu_run("h100_regressions", "misaligned").as_os_str(),
    ]))
    .unwrap();
    assert!(
        text.contains("Kernel2 [cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nt_align2]"),
        "{text}"
    );
    assert!(
        !text.contains("TensorIteratorBase"),
        "signatures shortened: {text}"
    );
}

/// Each GEMM shape's device time and TFLOPS in both runs, from the kernels its op
/// launched: the aligned shapes ran at over 800 TFLOPS, the misaligned ones at about a
/// third; the same shape in two runs of the same job is one row, at the same rate.
#[test]
fn a_real_gpu_jobs_gemms_are_compared_by_shape() {
    let shapes = |doc: &serde_json::Value, run: &str| -> Vec<(String, f64)> {
        doc["comparison"][run]["host_calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["kind"] == "gemm" && h.get("tflops").is_some())
            .map(|h| {
                (
                    h["name"].as_str().unwrap().to_string(),
                    h["tflops"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let doc = gpu_compare("misaligned");
    let (before, now) = (shapes(&doc, "baseline"), shapes(&doc, "current"));
    assert_eq!(before.len(), 2, "{before:?}");
    assert!(before.iter().all(|(_, t)| *t > 700.0), "{before:?}");
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(
        now.iter().all(|(n, t)| n.contains("4094") && *t < 350.0),
        "{now:?}"
    );
    let again = gpu_compare("baseline_again");
    let (a, b) = (shapes(&again, "baseline"), shapes(&again, "current"));
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    for ((_, x), (_, y)) in a.iter().zip(&b) {
        assert!((x / y - 1.0).abs() < 0.1, "{a:?} {b:?}");
    }
    let text = String::from_utf8(flare([
        "compare".as_ref(),
        gpu_run("h100_regressions", "baseline").as_os_str(),
        gpu_run("h100_regressions", "baseline_again").as_os_str(),
    ]))
    .unwrap();
    let table = text
        .split("GEMMs by shape")
        .nth(1)
        .expect("the shapes' table");
    assert!(
        table.contains("7.0 -> 7.0")
            && table.contains("aten::mm [[4096,4096],[4096,4096]] (BFloat16)"),
        "{table}"
    );
}

/// The same job twice on the GPU: nothing to act on.
#[test]
fn a_real_gpu_job_against_itself_raises_no_warning() {
    let doc = gpu_compare("baseline_again");
    assert!(warnings(&doc).is_empty(), "{doc}");
    assert!(doc["comparison"].get("causes").is_none(), "{doc}");
}

/// `torch.cuda.empty_cache()` after each step: the caching allocator gives its blocks back
/// and every step allocates them again.
#[test]
fn a_real_gpu_jobs_allocator_churn_is_named() {
    let doc = gpu_compare_in("h100_run2", "empty_cache");
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["memory_churn"]),
        "{doc}"
    );
    let e = &warnings(&doc)[0]["evidence"][0];
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.contains("cudaMalloc 0.0 -> 16.0") && detail.contains("cudaFree 0.0 -> 16."),
        "{detail}"
    );
}

/// The loop formats its metrics in Python after each step: the device idles between
/// steps, where a step from first op to last never looked.
#[test]
fn a_real_gpu_jobs_work_between_steps_is_named() {
    let doc = gpu_compare_in("h100_run2", "loop_work");
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["host_between_steps"]),
        "{doc}"
    );
    let between = doc["comparison"]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "between_steps")
        .unwrap();
    let grew = between["current_ms"].as_f64().unwrap() - between["baseline_ms"].as_f64().unwrap();
    assert!(grew > 5.0, "{between}");
    assert_eq!(
        doc["comparison"]["classes"][0]["kind"], "between_steps",
        "the largest change"
    );
}

/// The same job twice on an H200: nothing to act on.
#[test]
fn a_real_h200_job_against_itself_raises_no_warning() {
    let doc = gpu_compare_in("h200_run3", "baseline_again");
    assert!(warnings(&doc).is_empty(), "{doc}");
}

/// The collector on, with 600,000 live lists and 20,000 new ones per step: its pauses, and
/// where, on the host; not the GPU, whose kernels ran as fast. One full collection of 225
/// ms widens the steps' spread past the change of their mean, but the median step moved
/// (8.9 -> 13.6 ms by the script's clock): the step's finding leads with the collector.
#[test]
fn a_real_gpu_jobs_garbage_collection_is_named_with_its_site() {
    let doc = gpu_compare_in("h200_run3", "gc");
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["garbage_collection"]),
        "{doc}"
    );
    let w = warnings(&doc);
    let step = w[0]["summary"].as_str().unwrap();
    assert!(
        step.contains("the most of it: host gc")
            && w[0].to_string().contains("step_median_change_se"),
        "{step}"
    );
    let f = &w[1];
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("garbage collection: 0.00 -> ")
            && summary.contains("the longest 225.4 ms")
            && summary.contains("most often in regressions.py(198): run_variant"),
        "{summary}"
    );
}

/// A 384 x 384 mask built per sample in the training process: the DataLoader, and nothing
/// else; not the loop around it, which runs slower on the same thread (1.9 -> 3.1 ms
/// between steps) while doing no more.
#[test]
fn a_real_gpu_jobs_heavier_dataloader_is_named_alone() {
    let doc = gpu_compare_in("h200_run3", "dataloader");
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["dataloader"]),
        "{doc}"
    );
    let w = warnings(&doc);
    // The cause leads (0.85), the step's change it explains next (0.8: a class that took
    // longer, as often).
    assert!(
        w[0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("the DataLoader is slower"),
        "{doc}"
    );
    assert!(
        w[1]["summary"]
            .as_str()
            .unwrap()
            .contains("the most of it: host dataloader"),
        "{doc}"
    );
    let actions: Vec<&str> = w.iter().map(|f| f["action"].as_str().unwrap()).collect();
    assert!(
        actions
            .iter()
            .all(|a| !a.contains("GPU clocks") && !a.contains("training loop does more")),
        "{actions:?}"
    );
}

/// 400 tiny in-place updates of a device tensor after each step: 800 kernels of about a
/// microsecond, whose launches the GPU waits for. Their device time is 0.8 ms of a 26 ms
/// change; the rest is the device idle while the host issues them, which the step's
/// finding must put on them rather than on "untraced time" (CPU work in general).
#[test]
fn a_real_gpu_jobs_many_small_kernels_are_named_as_launches_the_gpu_waits_for() {
    let doc = gpu_compare_in("h200_run4", "small_ops");
    let w = warnings(&doc);
    let summary = w[0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("800 more kernels per step (")
            && summary.contains("0.0 -> 400.0")
            && summary.contains("the GPU waits for their launches, which shows as untraced time +"),
        "{summary}"
    );
    assert!(
        w[0]["action"].as_str().unwrap().contains("fuse them"),
        "{}",
        w[0]["action"]
    );
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["launch_bound"]),
        "{doc}"
    );
    let again = gpu_compare_in("h200_run4", "baseline_again");
    assert!(warnings(&again).is_empty(), "{again}");
}

/// `tests/fixtures/real_pairs`: real runs made after the rules, other slow ranks.
fn real_pair(run: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/real_pairs")
        .join(run)
        .join("traces")
}

/// Hand-written data parallelism: rank 3 runs four more forward passes per step (2.8 ms
/// there); the mean over ranks puts more on the 256 KiB all-reduces (+2.86 ms), where the
/// others wait for it. The code path, half the step's change, leads.
#[test]
fn a_code_path_adding_half_the_step_on_one_rank_leads() {
    let doc = compare_dirs(
        &real_pair("allreduce_none_r2"),
        &real_pair("allreduce_extra_work_r3"),
    );
    let summary = doc["findings"][0]["summary"].as_str().unwrap();
    assert!(
        summary.contains("runs 20.0 times per step on rank 3 against 4.0"),
        "{summary}"
    );
}

/// A pipeline whose last stage stalls 30 ms per step: sends move between step windows as
/// the timing shifts, while every rank sends as often per iteration. No code path changed.
#[test]
fn ops_moving_between_step_windows_are_no_code_path() {
    let doc = compare_dirs(
        &real_pair("pipeline_none_r2"),
        &real_pair("pipeline_host_stall_r3"),
    );
    let changed: Vec<&serde_json::Value> = doc["comparison"]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r.get("changed_on").is_some())
        .collect();
    assert!(changed.is_empty(), "{changed:#?}");
}

/// A simulated job whose one GPU computes 1.5 times slower, against the same job healthy:
/// every rank waits for that one, whose kernels (as many, same shapes) grew there alone;
/// the action points at its GPU, not at shapes or libraries every rank shares.
#[test]
fn the_rank_whose_gpu_slowed_is_named_with_its_device() {
    let (healthy, slow) = (simulated("none", "gpu-a"), simulated("slow_gpu", "gpu-b"));
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(slow.join("truth.json")).unwrap()).unwrap();
    let rank = truth["fault"]["fault"]["rank"].as_u64().unwrap();
    let doc = compare_dirs(&healthy, &slow);
    assert_eq!(
        doc["comparison"]["waited_for"]["ranks"],
        serde_json::json!([rank]),
        "{doc:#}"
    );
    let f = &doc["findings"][0];
    let action = f["action"].as_str().unwrap();
    assert!(
        action.contains(&format!("the same kernels run slower on rank {rank} alone"))
            && action.contains("their GPUs"),
        "{action}"
    );
    let _ = std::fs::remove_dir_all(&healthy);
    let _ = std::fs::remove_dir_all(&slow);
}

/// `flare compare BASELINE CURRENT --baseline-rerun RUN ...`'s document.
fn gpu_compare_with_rerun(run: &str, current: &str) -> serde_json::Value {
    let out = flare([
        "compare".as_ref(),
        gpu_run(run, "baseline").as_os_str(),
        gpu_run(run, current).as_os_str(),
        "--baseline-rerun".as_ref(),
        gpu_run(run, "baseline_again").as_os_str(),
        "--json".as_ref(),
    ]);
    serde_json::from_slice(&out).expect("a findings document")
}

/// A second run of the baseline's code measures how far runs drift apart: the H200's
/// DataLoader change stands past it (and is then sure), while the H100's 6.5% faster
/// steps beside its misaligned GEMMs, time between steps alone, are within it.
#[test]
fn a_rerun_of_the_baseline_measures_the_drift_a_change_of_time_must_pass() {
    let doc = gpu_compare_with_rerun("h200_run3", "dataloader");
    let r = &doc["comparison"]["reruns"];
    assert_eq!(r["baseline"].as_array().unwrap().len(), 2, "{r}");
    assert_eq!(r["current"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["degrees_of_freedom"], 1);
    assert_eq!(r["critical_t"], 31.821);
    let w = warnings(&doc);
    let step = w
        .iter()
        .find(|f| f["summary"].as_str().unwrap().starts_with("steps slower"))
        .unwrap();
    assert!(
        step["summary"]
            .as_str()
            .unwrap()
            .contains("the most of it: host dataloader"),
        "{step}"
    );
    assert_eq!(step["confidence"], 0.99, "{step}");
    assert!(step["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["metric"] == "run_to_run_change_se"));
    assert_eq!(
        doc["comparison"]["causes"],
        serde_json::json!(["dataloader"])
    );

    let plain = gpu_compare("misaligned");
    let told = |doc: &serde_json::Value| -> Vec<String> {
        doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["summary"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(
        told(&plain).iter().any(|s| s.starts_with("steps faster")),
        "{:?}",
        told(&plain)
    );
    let rerun = gpu_compare_with_rerun("h100_regressions", "misaligned");
    let summaries = told(&rerun);
    assert!(
        !summaries.iter().any(|s| s.starts_with("steps faster"))
            && summaries[0].starts_with("tensor-core misalignment"),
        "{summaries:?}"
    );
}

#[test]
fn reruns_without_two_runs_or_of_another_kind_are_a_clear_error() {
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(env!("CARGO_BIN_EXE_flare"))
            .arg("compare")
            .args(args)
            .output()
            .expect("flare runs");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let baseline = gpu_run("h200_run3", "baseline");
    let err = run(&[
        baseline.as_os_str(),
        "--baseline-rerun".as_ref(),
        baseline.as_os_str(),
    ]);
    assert!(err.contains("need two runs to compare"), "{err}");
    let err = run(&[
        baseline.as_os_str(),
        baseline.as_os_str(),
        "--current-rerun".as_ref(),
        "http://127.0.0.1:9/jobs/j".as_ref(),
    ]);
    assert!(
        err.contains(
            "http://127.0.0.1:9/jobs/j: a rerun must be of the kind the compared runs are (a trace)"
        ),
        "{err}"
    );
    let missing = baseline.join("no_such_run");
    let err = run(&[
        baseline.as_os_str(),
        baseline.as_os_str(),
        "--baseline-rerun".as_ref(),
        missing.as_os_str(),
    ]);
    assert!(err.contains("no_such_run"), "the rerun is named: {err}");
}
