//! What-if analysis of the OSDI'25 artifact's traces against its published results:
//! S (`blocking_slowdown` in `result-*.json`), M_W (`Mw` in `mw-*.json`) and M_S (`Ms`
//! in `ms-*.json`) within 2%.

use flare_import::ndtimeline::read_ndtimeline;
use flare_model::ndtimeline::{BandAxis, HeatPattern, WhatIfReport};
use flare_whatif::analyze;
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/stragglers"
    ))
}

fn json(name: &str) -> serde_json::Value {
    let p = data_dir().join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn run(trial: &str) -> WhatIfReport {
    let trace = read_ndtimeline(&data_dir().join(format!("trace-{trial}.parquet"))).unwrap();
    assert_eq!(trace.meta.trial_name, trial);
    analyze(&trace).unwrap()
}

fn within(name: &str, got: f64, want: f64, rel: f64) {
    let err = (got - want).abs() / want.abs();
    assert!(
        err <= rel,
        "{name}: got {got}, expected {want} (off by {:.3}%)",
        err * 100.0
    );
}

fn check(trial: &str) -> WhatIfReport {
    let r = run(trial);
    let result = json(&format!("result-{trial}.json"));
    let mw = json(&format!("mw-{trial}.json"));
    let ms = json(&format!("ms-{trial}.json"));
    eprintln!(
        "{trial}: S {} (expected {}), M_W {} (expected {}), M_S {} (expected {})",
        r.slowdown,
        result["blocking_slowdown"].as_f64().unwrap(),
        r.m_w,
        mw["Mw"].as_f64().unwrap(),
        r.m_s,
        ms["Ms"].as_f64().unwrap()
    );
    within(
        "S",
        r.slowdown,
        result["blocking_slowdown"].as_f64().unwrap(),
        0.02,
    );
    within("M_W", r.m_w, mw["Mw"].as_f64().unwrap(), 0.02);
    within("M_S", r.m_s, ms["Ms"].as_f64().unwrap(), 0.02);
    within(
        "original step time",
        r.step_time_s,
        mw["tori"].as_f64().unwrap(),
        0.02,
    );
    within(
        "ideal step time",
        r.ideal_step_time_s,
        mw["tideal"].as_f64().unwrap(),
        0.02,
    );
    // Attribution per op type and per stage, as published.
    for o in &r.by_op_type {
        let want = result["blocking_decompose_by_optype"][&o.op_type]
            .as_f64()
            .unwrap_or_else(|| panic!("{trial}: no reference for {}", o.op_type));
        within(&format!("by op type {}", o.op_type), o.slowdown, want, 0.02);
    }
    for s in &r.by_stage {
        let want = result["blocking_decompose_by_stage"][s.index.to_string()]
            .as_f64()
            .unwrap();
        within(&format!("by stage {}", s.index), s.slowdown, want, 0.02);
    }
    for d in &r.by_dp_rank {
        let want = result["blocking_decompose_by_dp_rank"][d.index.to_string()]
            .as_f64()
            .unwrap();
        within(&format!("by dp rank {}", d.index), d.slowdown, want, 0.02);
    }
    // The JSON has the keys the CLI prints.
    let v = serde_json::to_value(&r).unwrap();
    for k in [
        "slowdown",
        "m_w",
        "m_s",
        "by_op_type",
        "by_worker",
        "heatmap",
    ] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    r
}

#[test]
fn stage_imbalance_trace_matches_reference() {
    let r = check("ST");
    // Heavy last stage: the last stage's band is hot.
    assert_eq!(r.heatmap.pattern, HeatPattern::Band);
    let band = r.heatmap.band.unwrap();
    assert_eq!((band.axis, band.index), (BandAxis::Stage, 3));
}

#[test]
fn sequence_imbalance_trace_matches_reference() {
    let r = check("SE");
    // Sequence-length imbalance strikes workers at random.
    assert_eq!(r.heatmap.pattern, HeatPattern::Scatter);
}
