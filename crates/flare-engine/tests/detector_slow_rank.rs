//! The slow-rank detector alone: the rank whose own work delays its peers, and why.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_model::{DetectorId, FindingKind};
use flare_sim::fault::FaultKind::*;

const TWO_RANKS: common::Shape = Megatron {
    tp: 1,
    pp: 1,
    dp: 2,
};

detector_cases! { DetectorId::SlowRank;
    healthy_64: Case::new(None, Scale(64), 11, Silent),
    healthy_128: Case::new(None, Scale(128), 12, Silent),
    slow_gpu_64: Case::new(SlowGpu, Scale(64), 11, Culprit(FindingKind::SlowGpu)),
    slow_gpu_128: Case::new(SlowGpu, Scale(128), 13, Culprit(FindingKind::SlowGpu)),
    host_stall_64: Case::new(HostStall, Scale(64), 11, Culprit(FindingKind::HostStall)),
    launch_bound_64: Case::new(LaunchBound, Scale(64), 11, Culprit(FindingKind::LaunchBound)),
    // A GPU slow in iterations 0-1 only.
    intermittent_gpu_64: Case::new(Intermittent, Scale(64), 2, Culprit(FindingKind::SlowGpu)),
    // Other detectors' faults: a slow NIC is the path's, imbalances are structural.
    silent_on_slow_nic: Case::new(SlowNic, Scale(64), 11, Silent),
    silent_on_intermittent_nic: Case::new(Intermittent, Scale(64), 1, Silent),
    silent_on_congested_switch: Case::new(CongestedSwitch, Scale(64), 11, Silent),
    silent_on_stage_imbalance: Case::new(StageImbalance, Scale(64), 11, Silent),
    silent_on_sequence_imbalance: Case::new(SequenceImbalance, Scale(64), 11, Silent),
    // Collectives of two members have no third to compare with.
    two_ranks_not_enough_data: Case::new(SlowGpu, TWO_RANKS, 11, NotEnoughData("3 or more members")),
    // Cluster-wide spikes slow every rank alike: nobody's fault.
    silent_on_spikes: Case::new(None, Scale(64), 14, Silent).spikes(0.4),
    compute_only_not_enough_data: Case::new(SlowGpu, Scale(64), 11, NotEnoughData("3 or more members"))
        .edit(common::compute_only),
}

/// Hand-built, noise-free jobs on one world communicator: how few ranks it needs, and
/// that a rank computing longer before every all-reduce is named as a slow GPU.
#[test]
fn hand_built_edges() {
    use common::TinyExpect::*;
    common::check_tiny(
        DetectorId::SlowRank,
        &[
            (
                "4 ranks, rank 2 x1.3",
                4,
                Some((2, 1.3)),
                Names(FindingKind::SlowGpu, 2),
            ),
            (
                "3 ranks, rank 0 x1.5",
                3,
                Some((0, 1.5)),
                Names(FindingKind::SlowGpu, 0),
            ),
            ("8 ranks, healthy", 8, Option::None, Silent),
            ("3 ranks, healthy", 3, Option::None, Silent),
            (
                "2 ranks, rank 1 x1.5",
                2,
                Some((1, 1.5)),
                Skips("3 or more members"),
            ),
        ],
    );
}
