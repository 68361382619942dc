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
        /// A checkpointed block's forward run again in the backward (activation
        /// checkpointing: `torch.utils.checkpoint`, Megatron's and DeepSpeed's), from the
        /// Python frame that recomputes it.
        Recompute => "recompute",
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
    /// A GEMM's kernels on the device (those its calls launched), their time summed, ns;
    /// 0 where the trace links none (a CPU run, a trace without launches).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub device_ns: i64,
    /// The FLOPs (2·M·N·K) of the calls whose kernels are in `device_ns`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flops: u64,
}

fn is_zero<T: Default + PartialEq>(x: &T) -> bool {
    *x == T::default()
}

/// Calls of one key summed: how many, their host time, their kernels' device time and
/// FLOPs (see [`HostCallCount`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CallSums {
    pub count: u64,
    pub ns: i64,
    pub device_ns: i64,
    pub flops: u64,
}

impl CallSums {
    pub fn add(&mut self, o: CallSums) {
        self.count = self.count.saturating_add(o.count);
        self.ns = self.ns.saturating_add(o.ns);
        self.device_ns = self.device_ns.saturating_add(o.device_ns);
        self.flops = self.flops.saturating_add(o.flops);
    }
}

impl HostCallCount {
    pub fn sums(&self) -> CallSums {
        CallSums {
            count: self.count,
            ns: self.ns,
            device_ns: self.device_ns,
            flops: self.flops,
        }
    }

    /// A count of `kind` and `name` in `iteration` with the sums `s`.
    pub fn new(
        kind: HostCallKind,
        name: String,
        iteration: u32,
        dtype: Option<String>,
        s: CallSums,
    ) -> HostCallCount {
        HostCallCount {
            kind,
            name,
            iteration,
            count: s.count,
            ns: s.ns,
            dtype,
            device_ns: s.device_ns,
            flops: s.flops,
        }
    }
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

/// A GEMM's problem size: `batch` products of an M x K by a K x N matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub batch: u64,
}

impl Gemm {
    /// Its floating-point operations (a multiply and an add per term); `None` where that
    /// overflows (shapes come from a file).
    pub fn flops(&self) -> Option<u64> {
        2u64.checked_mul(self.m)?
            .checked_mul(self.n)?
            .checked_mul(self.k)?
            .checked_mul(self.batch)
    }
}

/// The span the autograd engine runs each backward function in (its name follows).
pub const BACKWARD_FUNCTION: &str = "autograd::engine::evaluate_function: ";

/// The name of the syncs the autograd engine makes itself under anomaly detection
/// (`torch.autograd.set_detect_anomaly(True)`, `detect_anomaly()`): after each backward
/// function it reads back `isnan(output)._is_any_true()` for every output (PyTorch's
/// `validate_outputs`), an `aten::item` with an `aten::isnan` beside it inside
/// `autograd::engine::evaluate_function`, where no program code runs.
pub const AUTOGRAD_ANOMALY_CHECK: &str = "aten::_local_scalar_dense (autograd anomaly check)";

/// The op and input shapes of a call named `op [[..],[..]]` (a GEMM host call, a compute
/// class recorded with its shapes).
pub fn call_shapes(name: &str) -> Option<(&str, Vec<Vec<u64>>)> {
    let (op, dims) = name.split_once(" [")?;
    let v: Vec<serde_json::Value> = serde_json::from_str(&format!("[{dims}")).ok()?;
    let shapes = v
        .iter()
        .map(|s| {
            s.as_array()
                .map(|d| d.iter().filter_map(serde_json::Value::as_u64).collect())
                .unwrap_or_default()
        })
        .collect();
    Some((op, shapes))
}

/// M, N, K and the batch of a GEMM op from its input shapes, when they make one.
pub fn gemm_of(op: &str, inputs: &[Vec<u64>]) -> Option<Gemm> {
    let mk_kn = |a: &[u64], b: &[u64]| -> Option<Gemm> {
        let (&k, rest) = a.split_last()?;
        let (&m, lead) = rest.split_last()?;
        let n = *b.last()?;
        // Shapes come from a file: a product that overflows is no GEMM.
        let batch = lead.iter().try_fold(1u64, |x, &d| x.checked_mul(d))?;
        (b.len() >= 2 && b[b.len() - 2] == k).then_some(Gemm { m, n, k, batch })
    };
    match op {
        "aten::mm" | "aten::bmm" | "aten::_scaled_mm" | "aten::matmul" => {
            mk_kn(inputs.first()?, inputs.get(1)?)
        }
        "aten::addmm" | "aten::baddbmm" => mk_kn(inputs.get(1)?, inputs.get(2)?),
        "aten::linear" => {
            let (x, w) = (inputs.first()?, inputs.get(1)?);
            let (&k, lead) = x.split_last()?;
            let m = lead.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
            (w.len() == 2 && w[1] == k).then_some(Gemm {
                m,
                n: w[0],
                k,
                batch: 1,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_sizes_from_the_ops_input_shapes() {
        // (host call, (M, N, K, batch), FLOPs)
        for (name, want, flops) in [
            (
                "aten::mm [[64,1022],[1022,512]]",
                Some((64, 512, 1022, 1)),
                Some(2 * 64 * 512 * 1022),
            ),
            (
                "aten::addmm [[512],[64,1024],[1024,512]]",
                Some((64, 512, 1024, 1)),
                Some(2 * 64 * 512 * 1024),
            ),
            (
                "aten::bmm [[8,128,64],[8,64,128]]",
                Some((128, 128, 64, 8)),
                Some(2 * 8 * 128 * 128 * 64),
            ),
            (
                "aten::matmul [[4,16,1022],[1022,512]]",
                Some((16, 512, 1022, 4)),
                Some(2 * 4 * 16 * 512 * 1022),
            ),
            (
                "aten::linear [[4,16,1022],[512,1022],[512]]",
                Some((64, 512, 1022, 1)),
                Some(2 * 64 * 512 * 1022),
            ),
            ("aten::linear [[4,16,1022],[512,1000],[512]]", None, None),
            ("aten::mm [[64],[64,3]]", None, None),
            (
                "aten::linear [[18446744073709551615,4,8],[16,8],[16]]",
                None,
                None,
            ),
            (
                "aten::mm [[4294967296,4294967296],[4294967296,8]]",
                Some((4294967296, 8, 4294967296, 1)),
                None,
            ),
        ] {
            let (op, inputs) = call_shapes(name).unwrap();
            let g = gemm_of(op, &inputs);
            assert_eq!(g.map(|g| (g.m, g.n, g.k, g.batch)), want, "{name}");
            assert_eq!(g.and_then(|g| g.flops()), flops, "{name}");
        }
    }
}
