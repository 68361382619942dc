//! The stage-imbalance detector alone: a pipeline stage that computes more than the
//! others.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_model::{DetectorId, FindingKind};
use flare_sim::fault::FaultKind::*;

detector_cases! { DetectorId::StageImbalance;
    healthy_64: Case::new(None, Scale(64), 51, Silent),
    healthy_128: Case::new(None, Scale(128), 52, Silent),
    stage_imbalance_64: Case::new(StageImbalance, Scale(64), 51, Culprit(FindingKind::StageImbalance)),
    stage_imbalance_128: Case::new(StageImbalance, Scale(128), 53, Culprit(FindingKind::StageImbalance)),
    // Faults of one device or one path are not a stage's.
    silent_on_slow_nic: Case::new(SlowNic, Scale(64), 51, Silent),
    silent_on_slow_gpu: Case::new(SlowGpu, Scale(64), 51, Silent),
    silent_on_sequence_imbalance: Case::new(SequenceImbalance, Scale(64), 51, Silent),
    // Without the layout, the stages are read from the pipeline's transfers.
    no_layout_stages_from_transfers: Case::new(StageImbalance, Scale(64), 51, Culprit(FindingKind::StageImbalance))
        .edit(common::without_layout),
    no_layout_healthy: Case::new(None, Scale(128), 52, Silent).edit(common::without_layout),
    no_layout_no_transfers_not_enough_data: Case::new(StageImbalance, Scale(64), 51, NotEnoughData("pipeline layout"))
        .edit(common::without_layout_or_transfers),
    one_stage_not_enough_data: Case::new(None, Megatron { tp: 8, pp: 1, dp: 4 }, 51, NotEnoughData("pp > 1")),
    // A sampled profile with the ranks of one stage only.
    one_stage_sampled_not_enough_data: Case::new(StageImbalance, Scale(64), 51, NotEnoughData("fewer than 2 stages"))
        .edit(common::first_stage_only),
    silent_on_spikes: Case::new(None, Scale(64), 54, Silent).spikes(0.4),
}

/// A hand-built job that states no parallel layout at all.
#[test]
fn hand_built_edges() {
    use common::TinyExpect::*;
    common::check_tiny(
        DetectorId::StageImbalance,
        &[(
            "8 ranks, no layout",
            8,
            Option::None,
            Skips("pipeline layout"),
        )],
    );
}
