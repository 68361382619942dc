//! Which events of a Kineto trace are communication: one table of rules ([`RULES`]),
//! read top to bottom, the first match wins. Every place of the importer that asks "is
//! this a collective?" asks [`classify`].
//!
//! | event | name | what it is | used as |
//! |---|---|---|---|
//! | `kernel` | `nccl…` (`ncclKernel_*`, `ncclDevKernel_*`, `nccl<Coll>…Kernel`; RCCL keeps the names) | an NCCL/RCCL collective or P2P on the GPU | the sync op (kind from `Collective name`, else the kernel name) |
//! | `kernel` | `…get_dispatch_layout…` | DeepEP's local token layout | compute |
//! | `kernel` | `…deep_ep::…` or `…dpsk::ep::…` (DeepSeek's build) with `dispatch`, `combine` or `notify` | DeepEP's expert-parallel exchange (all-to-all by NVLink/RDMA, outside NCCL) | a sync op of kind all-to-all (its group from the arguments when they say, else unknown) |
//! | `kernel` | `nvshmem…`, `…mscclpp…` | NVSHMEM or MSCCL++ communication | a sync op when the name names a collective, else counted as communication of unknown kind |
//! | `user_annotation` | `gloo:<collective>` | the collective's work on Gloo's own worker thread (a `send` or `recv` on the thread that posted it): it starts when the rank enqueued it and ends when every member has taken part (for a transfer, when the posting thread's `wait()` saw it done) | the sync op when the file has no GPU communication |
//! | `user_annotation` | `nccl:<collective>` | ProcessGroupNCCL's CPU-side call: it only launches the kernel | the launch (issue time) of the NCCL kernel |
//! | `cpu_op` | `c10d::<collective>_` (`allreduce_`, `_allgather_base_`, `send`, ...) | the Python/C++ call that enqueues the collective on its backend | the launch (issue time) of the backend's work |
//! | `cpu_op` | `record_param_comms` | PyTorch's wrapper of every c10d collective; older traces carry the collective's arguments only here | arguments for the kernel it launched |
//!
//! When a file has both a GPU side and a CPU side, the GPU side is the collective and the
//! CPU side gives its arguments and launch time; a file with no GPU communication at all is
//! read from its CPU-side work (Gloo). A CPU-side call without the work it launched (a
//! CPU-only profile of an NCCL job) shows no waiting, so it is not a sync op: it is counted
//! so that the user learns the GPU side was not profiled.

use super::names::kind_from_collective;
use flare_model::OpKind;

/// What a communication event is (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommEvent {
    /// A collective or P2P kernel on the GPU from NCCL or RCCL.
    NcclKernel,
    /// A communication kernel outside NCCL; its kind when the name tells it.
    OtherKernel(CommLibrary, Option<OpKind>),
    /// A collective's work on a CPU backend's own thread (Gloo).
    CpuWork(OpKind),
    /// A CPU-side call that launches a collective (ProcessGroupNCCL's annotation, c10d's
    /// op); `None` when the name does not say which collective.
    CpuLaunch(Option<OpKind>),
    /// `record_param_comms`: arguments only.
    ParamComms,
}

/// Communication libraries outside NCCL that real traces show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommLibrary {
    DeepEp,
    Nvshmem,
    Mscclpp,
}

/// Where a rule looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    Kernel,
    /// `cpu_op` or `user_annotation`.
    Cpu,
}

/// How a rule matches a name.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    Prefix(&'static str),
    /// Anywhere in the name (demangled C++ kernels start with their return type).
    Contains(&'static str),
    Exact(&'static str),
}

impl Pattern {
    fn matches(self, name: &str) -> bool {
        match self {
            Pattern::Prefix(p) => name.starts_with(p),
            Pattern::Contains(p) => name.contains(p),
            Pattern::Exact(p) => name == p,
        }
    }
}

/// What a matched rule makes of the name.
#[derive(Clone, Copy, Debug)]
enum Then {
    Nccl,
    Library(CommLibrary),
    /// The kind after this prefix names the collective.
    Work(&'static str),
    Launch(&'static str),
    ParamComms,
    /// Not communication (a library's local kernel that an earlier rule would misread).
    Local,
}

struct Rule {
    category: Category,
    pattern: Pattern,
    then: Then,
}

/// The rules, first match wins.
const RULES: &[Rule] = &[
    Rule {
        category: Category::Kernel,
        pattern: Pattern::Prefix("nccl"),
        then: Then::Nccl,
    },
    // DeepEP's layout kernel computes where tokens go on the rank itself.
    Rule {
        category: Category::Kernel,
        pattern: Pattern::Contains("get_dispatch_layout"),
        then: Then::Local,
    },
    Rule {
        category: Category::Kernel,
        pattern: Pattern::Contains("deep_ep::"),
        then: Then::Library(CommLibrary::DeepEp),
    },
    // DeepSeek's own build of it (their public training profile).
    Rule {
        category: Category::Kernel,
        pattern: Pattern::Contains("dpsk::ep::"),
        then: Then::Library(CommLibrary::DeepEp),
    },
    Rule {
        category: Category::Kernel,
        pattern: Pattern::Prefix("nvshmem"),
        then: Then::Library(CommLibrary::Nvshmem),
    },
    Rule {
        category: Category::Kernel,
        pattern: Pattern::Contains("mscclpp"),
        then: Then::Library(CommLibrary::Mscclpp),
    },
    Rule {
        category: Category::Cpu,
        pattern: Pattern::Prefix("gloo:"),
        then: Then::Work("gloo:"),
    },
    Rule {
        category: Category::Cpu,
        pattern: Pattern::Prefix("nccl:"),
        then: Then::Launch("nccl:"),
    },
    Rule {
        category: Category::Cpu,
        pattern: Pattern::Prefix("c10d::"),
        then: Then::Launch("c10d::"),
    },
    Rule {
        category: Category::Cpu,
        pattern: Pattern::Exact("record_param_comms"),
        then: Then::ParamComms,
    },
];

/// What a `kernel` event is, when it is communication.
pub fn classify_kernel(name: &str) -> Option<CommEvent> {
    classify(Category::Kernel, name)
}

/// What a `cpu_op` or `user_annotation` event is, when it is communication.
pub fn classify_cpu(name: &str) -> Option<CommEvent> {
    classify(Category::Cpu, name)
}

fn classify(category: Category, name: &str) -> Option<CommEvent> {
    let rule = RULES
        .iter()
        .find(|r| r.category == category && r.pattern.matches(name))?;
    Some(match rule.then {
        Then::Nccl => CommEvent::NcclKernel,
        Then::Library(lib) => CommEvent::OtherKernel(lib, library_kind(lib, name)),
        // A Gloo span whose name is no collective Flare knows (gather, scatter) is
        // communication of no comparable kind: not a sync op.
        Then::Work(prefix) => CommEvent::CpuWork(collective_after(name, prefix)?),
        Then::Launch(prefix) => CommEvent::CpuLaunch(collective_after(name, prefix)),
        Then::ParamComms => CommEvent::ParamComms,
        Then::Local => return None,
    })
}

/// The collective a prefixed CPU-side name names (`c10d::_allgather_base_`,
/// `gloo:all_reduce`, `nccl:all_to_all`).
fn collective_after(name: &str, prefix: &str) -> Option<OpKind> {
    let rest = name.strip_prefix(prefix)?;
    kind_from_collective(rest.trim_matches('_'))
}

/// The kind of a communication kernel outside NCCL, when its name tells it.
fn library_kind(lib: CommLibrary, name: &str) -> Option<OpKind> {
    match lib {
        // Dispatch and combine send each token to the ranks of its experts and back; the
        // notify kernels exchange the counts first: all three are all-to-all exchanges.
        CommLibrary::DeepEp
            if ["dispatch", "combine", "notify"]
                .iter()
                .any(|w| name.contains(w)) =>
        {
            Some(OpKind::AllToAll)
        }
        CommLibrary::DeepEp => None,
        CommLibrary::Nvshmem | CommLibrary::Mscclpp => {
            let base = name.split('(').next().unwrap_or(name);
            // `nvshmemi_..._allreduce...`, `mscclpp::...AllGather...`: the name's words.
            let words: String = base
                .to_ascii_lowercase()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { ' ' })
                .collect();
            words.split_whitespace().find_map(kind_from_collective)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CommEvent::*;
    use OpKind::*;

    #[test]
    fn kernels() {
        for (name, want) in [
            (
                "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                Some(NcclKernel),
            ),
            (
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                Some(NcclKernel),
            ),
            (
                "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)",
                Some(NcclKernel),
            ),
            (
                "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            (
                "void deep_ep::internode_ll::combine<false>(void*, void*, int*)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            (
                "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            (
                "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*)",
                None,
            ),
            (
                "void deep_ep::intranode::cached_notify_combine<8>(void**)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            (
                "void deep_ep::barrier<8>(int**, int)",
                Some(OtherKernel(CommLibrary::DeepEp, None)),
            ),
            // Names from DeepSeek's public training profile (deepseek-ai/profile-data).
            (
                "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*, float*, dpsk::ep::internode::SourceMeta*)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            (
                "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            (
                "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*)",
                Some(OtherKernel(CommLibrary::DeepEp, Some(AllToAll))),
            ),
            ("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)", None),
            (
                "nvshmemi_allreduce_sum_kernel(float*)",
                Some(OtherKernel(CommLibrary::Nvshmem, Some(AllReduce))),
            ),
            (
                "nvshmemi_proxy_kernel()",
                Some(OtherKernel(CommLibrary::Nvshmem, None)),
            ),
            (
                "void mscclpp::allgather6<true>(void*)",
                Some(OtherKernel(CommLibrary::Mscclpp, Some(AllGather))),
            ),
            ("ampere_sgemm_128x64_nn", None),
            (
                "void at::native::vectorized_elementwise_kernel<4>(int)",
                None,
            ),
            // A kernel of an op named after NCCL's but not NCCL's (no prefix) is compute.
            ("my_allreduce_fused_kernel", None),
        ] {
            assert_eq!(classify_kernel(name), want, "{name}");
        }
    }

    #[test]
    fn cpu_side() {
        for (name, want) in [
            ("gloo:all_reduce", Some(CpuWork(AllReduce))),
            ("gloo:broadcast", Some(CpuWork(Broadcast))),
            ("gloo:all_gather", Some(CpuWork(AllGather))),
            ("gloo:reduce_scatter", Some(CpuWork(ReduceScatter))),
            ("gloo:all_to_all", Some(CpuWork(AllToAll))),
            ("gloo:send", Some(CpuWork(Send))),
            ("gloo:recv", Some(CpuWork(Recv))),
            ("gloo:barrier", Some(CpuWork(Barrier))),
            // Gather and scatter have no comparable kind.
            ("gloo:gather", None),
            ("nccl:all_reduce", Some(CpuLaunch(Some(AllReduce)))),
            (
                "nccl:_reduce_scatter_base",
                Some(CpuLaunch(Some(ReduceScatter))),
            ),
            ("c10d::allreduce_", Some(CpuLaunch(Some(AllReduce)))),
            ("c10d::_allgather_base_", Some(CpuLaunch(Some(AllGather)))),
            (
                "c10d::_reduce_scatter_base_",
                Some(CpuLaunch(Some(ReduceScatter))),
            ),
            ("c10d::alltoall_base_", Some(CpuLaunch(Some(AllToAll)))),
            ("c10d::broadcast_", Some(CpuLaunch(Some(Broadcast)))),
            ("c10d::send", Some(CpuLaunch(Some(Send)))),
            ("c10d::recv_", Some(CpuLaunch(Some(Recv)))),
            ("c10d::barrier", Some(CpuLaunch(Some(Barrier)))),
            ("c10d::gather_", Some(CpuLaunch(None))),
            ("record_param_comms", Some(ParamComms)),
            ("aten::mm", None),
            ("DistributedDataParallel.forward", None),
            ("torch.distributed.ddp.reducer::copy_bucket_to_grad", None),
        ] {
            assert_eq!(classify_cpu(name), want, "{name}");
        }
    }
}
