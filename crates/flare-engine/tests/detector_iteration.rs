//! The iteration detector alone: spikes and fail-slow onsets of iteration time are
//! reported without a culprit, whatever the fault (naming one is the localization
//! detectors' job), and it needs a series.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_model::DetectorId;
use flare_sim::fault::FaultKind::*;

detector_cases! { DetectorId::Iteration;
    never_blames_on_spikes: Case::new(None, Scale(64), 44, Silent).spikes(0.4),
    never_blames_on_a_slow_gpu: Case::new(SlowGpu, Scale(64), 41, Silent),
    never_blames_on_an_intermittent_fault: Case::new(Intermittent, Scale(64), 1, Silent),
    never_blames_on_a_host_stall: Case::new(HostStall, Scale(64), 41, Silent),
    three_iterations_not_enough_data: Case::new(SlowGpu, Scale(64), 41, NotEnoughData("at least 4"))
        .iterations(3),
}

/// What it reports, not whom: a cluster-wide spike is named as a spike.
#[test]
fn spikes_are_reported_as_spikes() {
    let case = Case::new(None, Scale(64), 44, Silent).spikes(0.4);
    let out = common::simulated(&case);
    let d = flare_engine::diagnose(&out.trace, &flare_engine::EngineConfig::default());
    let spike = d
        .findings
        .iter()
        .find(|f| f.detector == DetectorId::Iteration)
        .unwrap_or_else(|| panic!("{:#?}", d.findings));
    assert_eq!(
        spike.kind,
        flare_model::FindingKind::IterationSpike,
        "{spike:#?}"
    );
    assert!(spike.culprits.is_empty());
    for it in &out.truth.spike_iterations {
        assert!(
            spike.iterations.contains(it),
            "{it}: {:?}",
            spike.iterations
        );
    }
}
