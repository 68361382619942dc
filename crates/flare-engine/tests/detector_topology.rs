//! The topology detector alone: it needs to know where the job's nodes are, and a fault
//! on a device is not a placement problem.

#[macro_use]
mod common;

use common::{Case, Expect::*, Shape::*};
use flare_model::DetectorId;
use flare_sim::fault::FaultKind::*;

detector_cases! { DetectorId::Topology;
    dense_placement_not_enough_data: Case::new(None, Scale(64), 41, NotEnoughData("where the job's nodes are")),
    slow_nic_dense_not_enough_data: Case::new(SlowNic, Scale(64), 41, NotEnoughData("where the job's nodes are")),
}
