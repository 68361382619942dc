//! The hang detector alone: ranks that never joined the collective the others wait in.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_model::{DetectorId, FindingKind};
use flare_sim::fault::FaultKind::*;

detector_cases! { DetectorId::Hang;
    hang_64: Case::new(Hang, Scale(64), 41, Culprit(FindingKind::Hang)),
    hang_128: Case::new(Hang, Scale(128), 42, Culprit(FindingKind::Hang)),
    hang_megatron: Case::new(Hang, Megatron { tp: 2, pp: 2, dp: 4 }, 43, Culprit(FindingKind::Hang)),
    // Slow is not stuck: every collective ends.
    silent_when_healthy: Case::new(None, Scale(64), 41, Silent),
    silent_on_slow_gpu: Case::new(SlowGpu, Scale(64), 41, Silent),
    silent_on_host_stall: Case::new(HostStall, Scale(64), 41, Silent),
    silent_on_slow_nic: Case::new(SlowNic, Scale(64), 41, Silent),
}
