//! What the names and metadata strings of a Kineto trace mean: NCCL kernel and collective
//! names, dtypes, host phases, rank lists, and rank numbers in file names.
//!
//! Kept apart from parsing so the tables can be read (and tested) at a glance.

use flare_model::{GroupKind, OpKind};

/// The op kind named by a PyTorch `Collective name` argument (`allreduce`,
/// `_allgather_base`, `reduce_scatter_tensor_coalesced`, `all_to_allv`, `send`, ...).
/// `None` for names Flare has no kind for (`gather`, `scatter`, ...): the caller then
/// falls back to the kernel name.
pub fn kind_from_collective(name: &str) -> Option<OpKind> {
    let lower = name.trim().to_ascii_lowercase();
    let lower = lower.strip_prefix("nccl:").unwrap_or(&lower);
    let n: String = lower
        .chars()
        .filter(|c| !matches!(c, '_' | ' ' | '-'))
        .collect();
    let kind = if n.contains("reducescatter") {
        OpKind::ReduceScatter
    } else if n.contains("allreduce") {
        OpKind::AllReduce
    } else if n.contains("allgather") {
        OpKind::AllGather
    } else if n.contains("alltoall") {
        OpKind::AllToAll
    } else if n.contains("broadcast") {
        OpKind::Broadcast
    } else if n.contains("barrier") {
        OpKind::Barrier
    } else if n.contains("sendrecv") {
        OpKind::SendRecv
    } else if n == "send" || n == "isend" {
        OpKind::Send
    } else if n == "recv" || n == "irecv" || n == "recvanysource" {
        OpKind::Recv
    } else if n == "reduce" || n == "reduceoop" {
        OpKind::Reduce
    } else {
        return None;
    };
    Some(kind)
}

/// The op kind named by an NCCL kernel name, old style (`ncclKernel_AllReduce_RING_LL_Sum_float(...)`,
/// `ncclAllReduceRingLLKernel_sum_f32`) or new (`ncclDevKernel_AllGather_RING_LL(...)`).
/// `None` for kernels that do not say (`ncclDevKernel_Generic`).
pub fn kind_from_kernel(name: &str) -> Option<OpKind> {
    let base = name.split('(').next().unwrap_or(name).trim();
    let rest = base
        .strip_prefix("ncclDevKernel_")
        .or_else(|| base.strip_prefix("ncclKernel_"))
        .or_else(|| base.strip_prefix("nccl"))?;
    // Longest names first: ReduceScatter before Reduce, SendRecv before Send.
    const TABLE: [(&str, OpKind); 9] = [
        ("ReduceScatter", OpKind::ReduceScatter),
        ("AllReduce", OpKind::AllReduce),
        ("AllGather", OpKind::AllGather),
        ("AllToAll", OpKind::AllToAll),
        ("Broadcast", OpKind::Broadcast),
        ("SendRecv", OpKind::SendRecv),
        ("Reduce", OpKind::Reduce),
        ("Send", OpKind::Send),
        ("Recv", OpKind::Recv),
    ];
    TABLE
        .iter()
        .find(|(prefix, _)| rest.starts_with(prefix))
        .map(|&(_, k)| k)
}

/// Bytes per element of a `c10::ScalarType` name as PyTorch prints it in `dtype`.
pub fn dtype_bytes(dtype: &str) -> Option<u64> {
    let b = match dtype.trim() {
        "Bool" | "Byte" | "Char" | "QInt8" | "QUInt8" | "QUInt4x2" | "QUInt2x4" | "UInt8"
        | "Int8" => 1,
        s if s.starts_with("Float8") => 1,
        "Short" | "Half" | "BFloat16" | "UInt16" | "Int16" => 2,
        "Int" | "Float" | "QInt32" | "ComplexHalf" | "UInt32" | "Int32" => 4,
        "Long" | "Double" | "ComplexFloat" | "UInt64" | "Int64" => 8,
        "ComplexDouble" => 16,
        _ => return None,
    };
    Some(b)
}

/// The dtype name (as [`dtype_bytes`] reads it) of an element type as the profiler writes
/// it in a CPU op's `Input type` (`float`, `c10::BFloat16`, `long int`, ...).
pub fn dtype_of_input_type(t: &str) -> Option<&'static str> {
    Some(match t.trim() {
        "float" => "Float",
        "double" => "Double",
        "c10::Half" | "half" => "Half",
        "c10::BFloat16" => "BFloat16",
        "long int" | "long" | "int64_t" => "Long",
        "int" | "int32_t" => "Int",
        "short int" | "short" => "Short",
        "signed char" | "int8_t" => "Char",
        "unsigned char" | "uint8_t" => "Byte",
        "bool" => "Bool",
        _ => return None,
    })
}

/// The host phase a CPU span (`cpu_op` or `user_annotation`) stands for, from its name.
///
/// Matches `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`, `gc.collect`,
/// `Optimizer.step#AdamW.step`, `## optimizer ##`, `checkpoint.save`, ... case-insensitively.
/// Activation checkpointing (`CheckpointFunction`, recomputation) is compute, not a host
/// phase, and is not matched.
pub fn host_kind(name: &str) -> Option<OpKind> {
    let l = name.to_ascii_lowercase();
    if l.contains("dataloader") {
        Some(OpKind::DataLoader)
    } else if l == "gc"
        || l.starts_with("gc.")
        || l.starts_with("gc ")
        || l.starts_with("gc:")
        || l.contains("gc.collect")
        || l.contains("garbage_collect")
        || l.contains("garbage collection")
    {
        Some(OpKind::GarbageCollection)
    } else if l.contains("optimizer") {
        Some(OpKind::Optimizer)
    } else if l.contains("checkpoint")
        && !l.contains("checkpointfunction")
        && !l.contains("recompute")
        && !l.contains("activation")
    {
        Some(OpKind::Checkpoint)
    } else {
        None
    }
}

/// Library functions that save a checkpoint, by the file that defines them (as a
/// `python_function` frame names it, relative to the installed packages) and their names.
/// Loading is left out: a Dataset may load its samples with `torch.load`.
const CHECKPOINT_SAVES: [(&str, &[&str]); 3] = [
    ("torch/serialization.py", &["save"]),
    (
        "torch/distributed/checkpoint/state_dict_saver.py",
        &["save", "async_save", "save_state_dict"],
    ),
    ("safetensors/torch.py", &["save_file", "save_model"]),
];

/// Library functions that run a checkpointed block's forward again in the backward
/// (activation checkpointing), by their file and name: PyTorch's non-reentrant
/// `recompute_fn` and reentrant `CheckpointFunction.backward`, Megatron's and DeepSpeed's
/// `CheckpointFunction.backward`.
const RECOMPUTES: [(&str, &[&str]); 3] = [
    ("torch/utils/checkpoint.py", &["recompute_fn", "backward"]),
    ("megatron/core/tensor_parallel/random.py", &["backward"]),
    (
        "deepspeed/runtime/activation_checkpointing/checkpointing.py",
        &["backward"],
    ),
];

/// Whether a `python_function` frame (`torch/serialization.py(945): save`, with
/// `with_stack=True`) is a call that saves a checkpoint: a host phase, where no
/// annotation names it.
pub fn saves_checkpoint(frame: &str) -> bool {
    frame_in(frame, &CHECKPOINT_SAVES)
}

/// Whether a `python_function` frame recomputes a checkpointed block's forward in the
/// backward (see [`RECOMPUTES`]).
pub fn recomputes_activations(frame: &str) -> bool {
    frame_in(frame, &RECOMPUTES)
}

/// Whether a frame (`path/file.py(line): function`) is one of `functions`' (by file, as a
/// path's tail, and name).
fn frame_in(frame: &str, functions: &[(&str, &[&str])]) -> bool {
    let Some((place, function)) = frame.split_once("): ") else {
        return false;
    };
    let Some((path, _line)) = place.rsplit_once('(') else {
        return false;
    };
    // Read for every frame of a trace: no allocation.
    functions.iter().any(|(file, names)| {
        names.contains(&function)
            && path
                .strip_suffix(file)
                .is_some_and(|dir| dir.is_empty() || dir.ends_with('/'))
    })
}

/// A group kind from a Megatron-style process group description
/// (`TENSOR_MODEL_PARALLEL_GROUP`, `DATA_PARALLEL_GROUP`, ...) or from Flare's own
/// `flare_group_kind` (`tp`, `dp`, ...).
pub fn group_kind_from_text(s: &str) -> Option<GroupKind> {
    let u = s.trim().to_ascii_uppercase();
    let k = match u.as_str() {
        "TP" => GroupKind::Tp,
        "CP" => GroupKind::Cp,
        "EP" => GroupKind::Ep,
        "DP" => GroupKind::Dp,
        "PP" => GroupKind::Pp,
        "WORLD" => GroupKind::World,
        "OTHER" => GroupKind::Other,
        _ if u.contains("TENSOR_MODEL_PARALLEL") || u.contains("TENSOR_PARALLEL") => GroupKind::Tp,
        _ if u.contains("CONTEXT_PARALLEL") => GroupKind::Cp,
        _ if u.contains("EXPERT_MODEL_PARALLEL") => GroupKind::Ep,
        _ if u.contains("DATA_PARALLEL") => GroupKind::Dp,
        _ if u.contains("PIPELINE_MODEL_PARALLEL") || u.contains("PIPELINE_PARALLEL") => {
            GroupKind::Pp
        }
        _ => return None,
    };
    Some(k)
}

/// A rank list as PyTorch prints it: `[0, 1, 2]`, or truncated after 29 entries as
/// `[0, 1, ..., 28, ..., 127]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankList {
    Complete(Vec<u32>),
    Truncated,
}

pub fn parse_rank_list(s: &str) -> Option<RankList> {
    let inner = s.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(RankList::Complete(Vec::new()));
    }
    let mut out = Vec::new();
    for part in inner.split(',') {
        let p = part.trim();
        if p == "..." {
            return Some(RankList::Truncated);
        }
        out.push(p.parse::<u32>().ok()?);
    }
    Some(RankList::Complete(out))
}

/// The rank a file name gives: the number after `rank` (`rank3.json`, `sampled_rank-0.json.gz`,
/// `trace_rank_12.pt.trace.json`), else the only number in the name.
pub fn rank_from_file_name(name: &str) -> Result<u32, String> {
    let lower = name.to_ascii_lowercase();
    let mut search = lower.as_str();
    while let Some(i) = search.find("rank") {
        let after = &search[i + 4..];
        let digits_at = after.trim_start_matches(['-', '_', '.', ' ']);
        let digits: String = digits_at
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if !digits.is_empty() {
            return digits
                .parse()
                .map_err(|_| format!("the rank number {digits} in the file name is too large"));
        }
        search = after;
    }
    let stem = lower
        .trim_end_matches(".gz")
        .trim_end_matches(".json")
        .trim_end_matches(".pt.trace");
    let numbers: Vec<&str> = stem
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect();
    match numbers.as_slice() {
        [one] => one
            .parse()
            .map_err(|_| format!("the number {one} in the file name is too large for a rank")),
        [] => Err("the file name holds no rank number".into()),
        _ => Err(format!(
            "the file name holds several numbers ({}) and none follows \"rank\"",
            numbers.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collective_names() {
        for (name, kind) in [
            ("allreduce", Some(OpKind::AllReduce)),
            ("allreduce_coalesced", Some(OpKind::AllReduce)),
            ("_allgather_base", Some(OpKind::AllGather)),
            ("allgather_into_tensor_coalesced", Some(OpKind::AllGather)),
            (
                "reduce_scatter_tensor_coalesced",
                Some(OpKind::ReduceScatter),
            ),
            ("_reduce_scatter_base", Some(OpKind::ReduceScatter)),
            ("all_to_all", Some(OpKind::AllToAll)),
            ("all_to_allv", Some(OpKind::AllToAll)),
            ("nccl:all_to_all", Some(OpKind::AllToAll)),
            ("broadcast", Some(OpKind::Broadcast)),
            ("reduce", Some(OpKind::Reduce)),
            ("barrier", Some(OpKind::Barrier)),
            ("send", Some(OpKind::Send)),
            ("recv", Some(OpKind::Recv)),
            ("sendrecv", Some(OpKind::SendRecv)),
            ("gather", None),
            ("scatter", None),
        ] {
            assert_eq!(kind_from_collective(name), kind, "{name}");
        }
    }

    #[test]
    fn kernel_names() {
        for (name, kind) in [
            (
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                Some(OpKind::AllReduce),
            ),
            (
                "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
                Some(OpKind::SendRecv),
            ),
            (
                "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                Some(OpKind::ReduceScatter),
            ),
            ("ncclDevKernel_Reduce_Sum_f32_RING_LL", Some(OpKind::Reduce)),
            ("ncclAllReduceRingLLKernel_sum_f32(ncclColl)", Some(OpKind::AllReduce)),
            ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", None),
            ("void gemm(float*)", None),
        ] {
            assert_eq!(kind_from_kernel(name), kind, "{name}");
        }
    }

    #[test]
    fn host_phases() {
        for (name, kind) in [
            (
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                Some(OpKind::DataLoader),
            ),
            ("gc.collect", Some(OpKind::GarbageCollection)),
            ("Optimizer.step#AdamW.step", Some(OpKind::Optimizer)),
            ("## optimizer ##", Some(OpKind::Optimizer)),
            ("checkpoint.save", Some(OpKind::Checkpoint)),
            ("CheckpointFunctionBackward", None),
            ("aten::gcd", None),
            ("aten::mm", None),
        ] {
            assert_eq!(host_kind(name), kind, "{name}");
        }
    }

    #[test]
    fn checkpoint_saves_by_their_frames() {
        for (frame, saves) in [
            ("torch/serialization.py(945): save", true),
            (
                "/usr/lib/python3/site-packages/torch/serialization.py(945): save",
                true,
            ),
            (
                "torch/distributed/checkpoint/state_dict_saver.py(120): async_save",
                true,
            ),
            ("safetensors/torch.py(286): save_file", true),
            // a Dataset may load its samples with torch.load: not a checkpoint
            ("torch/serialization.py(1250): load", false),
            ("torch/serialization.py(1250): persistent_id", false),
            ("mytorch/serialization.py(9): save", false),
            ("train.py(20): save", false),
            ("save", false),
        ] {
            assert_eq!(saves_checkpoint(frame), saves, "{frame}");
        }
    }

    #[test]
    fn activation_recomputes_by_their_frames() {
        for (frame, recomputes) in [
            ("torch/utils/checkpoint.py(1988): recompute_fn", true),
            ("torch/utils/checkpoint.py(301): backward", true),
            (
                "/opt/venv/lib/python3.11/site-packages/megatron/core/tensor_parallel/random.py(284): backward",
                true,
            ),
            (
                "deepspeed/runtime/activation_checkpointing/checkpointing.py(700): backward",
                true,
            ),
            // the forward's own checkpoint call, and its saved-tensor hooks: not a recompute
            ("torch/utils/checkpoint.py(422): checkpoint", false),
            ("torch/utils/checkpoint.py(1351): unpack_hook", false),
            ("megatron/core/tensor_parallel/random.py(250): forward", false),
            ("my/torch/utils/checkpoint.py.bak(1): backward", false),
            ("train.py(20): backward", false),
        ] {
            assert_eq!(recomputes_activations(frame), recomputes, "{frame}");
        }
    }

    #[test]
    fn rank_lists_and_file_names() {
        assert_eq!(
            parse_rank_list("[0, 1]"),
            Some(RankList::Complete(vec![0, 1]))
        );
        assert_eq!(parse_rank_list("[]"), Some(RankList::Complete(vec![])));
        assert_eq!(
            parse_rank_list("[0, 1, ..., 127]"),
            Some(RankList::Truncated)
        );
        assert_eq!(parse_rank_list("0, 1"), None);
        assert_eq!(parse_rank_list("[a]"), None);
        assert_eq!(rank_from_file_name("sampled_rank-1.json.gz"), Ok(1));
        assert_eq!(rank_from_file_name("rank17.pt.trace.json"), Ok(17));
        assert_eq!(rank_from_file_name("worker_12.json"), Ok(12));
        assert!(rank_from_file_name("host3_worker_12.json").is_err());
        assert!(rank_from_file_name("trace.json").is_err());
        assert_eq!(dtype_bytes("BFloat16"), Some(2));
        assert_eq!(dtype_bytes("Float"), Some(4));
        assert_eq!(dtype_bytes("Mystery"), None);
        assert_eq!(
            group_kind_from_text("TENSOR_MODEL_PARALLEL_GROUP"),
            Some(GroupKind::Tp)
        );
        assert_eq!(
            group_kind_from_text("EXPERT_MODEL_PARALLEL_GROUP"),
            Some(GroupKind::Ep)
        );
        assert_eq!(group_kind_from_text("default_pg"), None);
    }
}
