//! Communicators: the sets of ranks that run collectives or P2P transfers together.

use serde::{Deserialize, Serialize};

/// Index of a communicator in [`crate::Trace::communicators`].
pub type CommId = u32;

/// Which parallel dimension a communicator serves, when known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    Tp,
    Cp,
    Ep,
    Dp,
    /// A pipeline pair: two adjacent stages exchanging activations and gradients.
    Pp,
    World,
    Other,
}

impl GroupKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            GroupKind::Tp => "tp",
            GroupKind::Cp => "cp",
            GroupKind::Ep => "ep",
            GroupKind::Dp => "dp",
            GroupKind::Pp => "pp",
            GroupKind::World => "world",
            GroupKind::Other => "other",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Communicator {
    pub id: CommId,
    pub kind: GroupKind,
    /// Global ranks, in the communicator's own rank order.
    pub members: Vec<u32>,
    /// A name from the source (process group name and description), or generated.
    pub label: String,
}
