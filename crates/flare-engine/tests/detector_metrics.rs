//! The metrics detector alone: per-rank FLOPS, bus bandwidth and NVIDIA-style
//! performance scores against peers.

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

detector_cases! { DetectorId::Metrics;
    healthy_64: Case::new(None, Scale(64), 31, Silent),
    healthy_128: Case::new(None, Scale(128), 32, Silent),
    // The slow GPU's kernels are slower than its stage peers': its rank is named...
    slow_gpu_64_rank: Case::new(SlowGpu, Scale(64), 31, CulpritRank),
    slow_gpu_128_rank: Case::new(SlowGpu, Scale(128), 33, CulpritRank),
    // ...and so should the cause be.
    slow_gpu_64: Case::new(SlowGpu, Scale(64), 31, Culprit(FindingKind::SlowGpu)),
    slow_gpu_128: Case::new(SlowGpu, Scale(128), 33, Culprit(FindingKind::SlowGpu)),
    launch_bound_64_rank: Case::new(LaunchBound, Scale(64), 31, CulpritRank),
    launch_bound_64: Case::new(LaunchBound, Scale(64), 31, Culprit(FindingKind::LaunchBound)),
    // A slow NIC slows transfers, not kernels; a host stall pauses between kernels;
    // imbalances are many ranks at once.
    silent_on_slow_nic: Case::new(SlowNic, Scale(64), 31, Silent),
    silent_on_host_stall: Case::new(HostStall, Scale(64), 31, Silent),
    silent_on_stage_imbalance: Case::new(StageImbalance, Scale(64), 31, Silent),
    silent_on_sequence_imbalance: Case::new(SequenceImbalance, Scale(64), 31, Silent),
    two_ranks_not_enough_data: Case::new(SlowGpu, TWO_RANKS, 31, NotEnoughData("fewer than 3 ranks")),
    silent_on_spikes: Case::new(None, Scale(64), 34, Silent).spikes(0.4),
    no_kernels_or_bytes_not_enough_data: Case::new(SlowGpu, Scale(64), 31, NotEnoughData("no compute kernel or collective with bytes"))
        .edit(common::collectives_without_bytes),
}

/// Hand-built, noise-free jobs (no host phases): a rank whose kernels take longer is a
/// slow GPU here, down to 3 ranks.
#[test]
fn hand_built_edges() {
    use common::TinyExpect::*;
    common::check_tiny(
        DetectorId::Metrics,
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
                Skips("fewer than 3 ranks"),
            ),
        ],
    );
}
