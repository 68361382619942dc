//! The sequence-imbalance detector alone: data-parallel replicas with unequal compute in
//! the same iteration.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_model::{DetectorId, FindingKind};
use flare_sim::fault::FaultKind::*;

detector_cases! { DetectorId::SequenceImbalance;
    healthy_64: Case::new(None, Scale(64), 61, Silent),
    healthy_128: Case::new(None, Scale(128), 62, Silent),
    sequence_imbalance_64: Case::new(SequenceImbalance, Scale(64), 61, Culprit(FindingKind::SequenceImbalance)),
    sequence_imbalance_128: Case::new(SequenceImbalance, Scale(128), 63, Culprit(FindingKind::SequenceImbalance)),
    // A heavier stage is the same on every replica; a slow GPU is one rank, not a replica.
    silent_on_stage_imbalance: Case::new(StageImbalance, Scale(64), 61, Silent),
    silent_on_slow_gpu: Case::new(SlowGpu, Scale(64), 61, Silent),
    silent_on_slow_nic: Case::new(SlowNic, Scale(64), 61, Silent),
    no_layout_not_enough_data: Case::new(SequenceImbalance, Scale(64), 61, NotEnoughData("data-parallel layout"))
        .edit(common::without_layout),
    one_replica_not_enough_data: Case::new(None, Megatron { tp: 8, pp: 2, dp: 1 }, 61, NotEnoughData("dp > 1")),
    one_iteration_not_enough_data: Case::new(SequenceImbalance, Scale(64), 61, NotEnoughData("fewer than 2 iterations"))
        .iterations(1),
    silent_on_spikes: Case::new(None, Scale(64), 64, Silent).spikes(0.4),
}

/// A hand-built job that states no parallel layout at all.
#[test]
fn hand_built_edges() {
    use common::TinyExpect::*;
    common::check_tiny(
        DetectorId::SequenceImbalance,
        &[(
            "8 ranks, no layout",
            8,
            Option::None,
            Skips("data-parallel layout"),
        )],
    );
}
