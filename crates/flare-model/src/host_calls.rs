//! What a profiler saw the host do that the ops do not show: calls that make the host wait
//! for the device, memory-management calls, the shapes GEMMs ran with, and where in the
//! program some of them were made. Read by `flare compare` to name a regression's cause.

use serde::{Deserialize, Serialize};

string_enum! {
    /// What a host call is.
    pub enum HostCallKind {
        /// The host waits for the device (`aten::_local_scalar_dense` under `.item()`,
        /// `aten::nonzero`, `cudaStreamSynchronize`, ...).
        Synchronize => "synchronize",
        /// Device memory allocated or freed outside the caching allocator's pool
        /// (`cudaMalloc`, `cudaFree`, ...).
        Memory => "memory",
        /// A matrix multiply (`aten::mm`, `aten::addmm`, `aten::linear`, ...) with its input
        /// shapes, at any depth of the op tree.
        Gemm => "gemm",
    }
}

/// Calls of one name in one iteration, summed over ranks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostCallCount {
    pub kind: HostCallKind,
    /// The call's name; for a GEMM with its input shapes (`aten::mm [[64,1022],[1022,1022]]`).
    pub name: String,
    pub iteration: u32,
    pub count: u64,
    /// Their time on the host, summed, ns.
    pub ns: i64,
    /// A GEMM's element type (`Float`, `BFloat16`, ...), where recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
}

/// Where in the program calls of one name were made: the innermost frame of the program's
/// own code around them (`train.py(88): step`), most frequent first, with counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallSites {
    pub name: String,
    pub sites: Vec<(String, u64)>,
}

/// A trace's host calls (empty where the source records none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostCalls {
    pub counts: Vec<HostCallCount>,
    pub sites: Vec<CallSites>,
}

impl HostCalls {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.sites.is_empty()
    }

    /// The sites of calls named `name`, most frequent first.
    pub fn sites_of(&self, name: &str) -> &[(String, u64)] {
        self.sites
            .iter()
            .find(|s| s.name == name)
            .map_or(&[], |s| s.sites.as_slice())
    }

    /// Only the counts of iterations `keep` accepts.
    pub fn retain_iterations(&mut self, keep: impl Fn(u32) -> bool) {
        self.counts.retain(|c| keep(c.iteration));
    }
}
