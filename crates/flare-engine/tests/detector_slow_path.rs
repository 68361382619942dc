//! The slow-path detector alone: NICs, links and switches whose transfers are slow for
//! every member of the groups crossing them.

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

detector_cases! { DetectorId::SlowPath;
    healthy_64: Case::new(None, Scale(64), 41, Silent),
    healthy_128: Case::new(None, Scale(128), 42, Silent),
    slow_nic_64: Case::new(SlowNic, Scale(64), 41, Culprit(FindingKind::SlowLink)),
    slow_nic_128: Case::new(SlowNic, Scale(128), 43, Culprit(FindingKind::SlowLink)),
    congested_switch_128: Case::new(CongestedSwitch, Scale(128), 41, Culprit(FindingKind::SlowSwitch)),
    // A NIC slow in iterations 1-2 only.
    intermittent_nic_64: Case::new(Intermittent, Scale(64), 1, Culprit(FindingKind::SlowLink)),
    // A slow GPU delays arrivals, not transfers.
    silent_on_slow_gpu: Case::new(SlowGpu, Scale(64), 41, Silent),
    silent_on_intermittent_gpu: Case::new(Intermittent, Scale(64), 2, Silent),
    silent_on_host_stall: Case::new(HostStall, Scale(64), 41, Silent),
    silent_on_stage_imbalance: Case::new(StageImbalance, Scale(64), 41, Silent),
    // One communicator doing each op: nothing to compare transfers with.
    two_ranks_not_enough_data: Case::new(SlowNic, TWO_RANKS, 41, NotEnoughData("3 or more communicators")),
    // Spikes slow every communicator alike: comparing within the iteration cancels them.
    silent_on_spikes: Case::new(None, Scale(64), 44, Silent).spikes(0.4),
    compute_only_not_enough_data: Case::new(SlowNic, Scale(64), 41, NotEnoughData("3 or more communicators"))
        .edit(common::compute_only),
}

/// Hand-built jobs with a single communicator: whatever the rank count, there is no other
/// communicator doing the same op to compare transfers with.
#[test]
fn hand_built_edges() {
    use common::TinyExpect::*;
    common::check_tiny(
        DetectorId::SlowPath,
        &[
            (
                "8 ranks, one communicator",
                8,
                Option::None,
                Skips("3 or more communicators"),
            ),
            (
                "4 ranks, rank 2 x1.3",
                4,
                Some((2, 1.3)),
                Skips("3 or more communicators"),
            ),
        ],
    );
}
