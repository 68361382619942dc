//! Scenario tests as data: a simulator fault and scale, and the culprit the engine must
//! put first. Seeds here are below 1000; the accuracy benchmark uses seeds from 1,000,000.

use flare_engine::{diagnose, EngineConfig};
use flare_sim::{fault::FaultKind, simulate, SimConfig};

fn top1(kind: FaultKind, world: u32, seed: u64) -> (bool, String) {
    let mut cfg = SimConfig::for_scale(world);
    cfg.iterations = 10;
    cfg.seed = seed;
    cfg.fault = kind;
    let out = simulate(&cfg).unwrap();
    let d = diagnose(&out.trace, &EngineConfig::default());
    let first = d.localized().next();
    let ok = match (kind, first) {
        (FaultKind::None, f) => f.is_none(),
        (_, Some(f)) => out.truth.matches(f.kind, &f.culprits[0]),
        (_, None) => false,
    };
    let got = first
        .map(|f| format!("{}: {}", f.kind.as_str(), f.summary))
        .unwrap_or_else(|| "no localized finding".into());
    (
        ok,
        format!(
            "{} | truth: {} | got: {}",
            kind.name(),
            out.truth.description,
            got
        ),
    )
}

#[test]
fn every_fault_kind_is_localized_at_64_ranks() {
    let mut failures = Vec::new();
    for kind in FaultKind::ALL {
        for seed in [11, 12, 13] {
            let (ok, line) = top1(kind, 64, seed);
            eprintln!("{} {line}", if ok { "ok  " } else { "FAIL" });
            if !ok {
                failures.push(line);
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_fault_kind_is_localized_at_512_ranks() {
    let mut failures = Vec::new();
    for kind in FaultKind::ALL {
        let (ok, line) = top1(kind, 512, 21);
        eprintln!("{} {line}", if ok { "ok  " } else { "FAIL" });
        if !ok {
            failures.push(line);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
