//! Host calls a profile records that the trace's ops do not carry (see
//! [`flare_model::host_calls`]), read at any depth of the op tree:
//!
//! | event | read as |
//! |---|---|
//! | `cpu_op` `aten::_local_scalar_dense` (under `.item()`, `.tolist()`, `if tensor:`), `aten::nonzero`, `aten::masked_select`, `aten::_unique2`, `aten::unique_consecutive`, `aten::unique_dim` | a synchronization: on a GPU the host waits for the device to produce the value |
//! | `cuda_runtime` / `cuda_driver` `cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaEventSynchronize`, blocking `cudaMemcpy`, their driver and HIP twins; `cuda_sync` events | a synchronization |
//! | `cudaMalloc`, `cudaFree`, `cudaMallocAsync`, `cudaFreeAsync`, `cudaMallocHost`, `cudaHostAlloc`, `cudaFreeHost`, `cuMemAlloc*`, `cuMemFree*`, `cuMemCreate`, `cuMemMap`, `cuMemUnmap`, `cuMemRelease`, `hipMalloc`, `hipFree` | memory management outside the caching allocator's pool |
//! | `cpu_op` `aten::mm`, `aten::addmm`, `aten::bmm`, `aten::baddbmm`, `aten::matmul`, `aten::linear`, `aten::_scaled_mm` with `Input Dims` | a GEMM, named with its shapes, with its element type |
//! | `python_function` (`with_stack=True`) | the Python frame a call or a GC pause happened in: the innermost frame of the program's own code (not PyTorch's, not the standard library's, not an installed package's), and the call it made out of the program's code on the way (`train.py(20): step -> Tensor.item`), since the line in the profiler's frame name is not the call's (the function's first line, or the line it was at when tracing began) |
//! | `python_function` `Python GC` (`record_python_gc_info=True`) | a garbage collection pause (a host phase of the trace, read in `parse`) |

use super::nesting::Nested;
use flare_model::host_calls::{AUTOGRAD_ANOMALY_CHECK, BACKWARD_FUNCTION};
use flare_model::{CallSites, CallSums, HostCallCount, HostCallKind};
use std::collections::{BTreeMap, HashMap};

const SYNC_OPS: [&str; 6] = [
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::unique_dim",
];

const SYNC_CALLS: [&str; 13] = [
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH_v2",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
];

const MEMORY_CALLS: [&str; 16] = [
    "cudaMalloc",
    "cudaFree",
    "cudaMallocAsync",
    "cudaFreeAsync",
    "cudaMallocHost",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAllocAsync",
    "cuMemCreate",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemRelease",
    "hipMalloc",
    "hipFree",
];

const GEMM_OPS: [&str; 7] = [
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
    "aten::_scaled_mm",
];

/// What a profiler event is as a host call, from its category and name.
pub fn call_kind(cat: &str, name: &str) -> Option<HostCallKind> {
    match cat {
        "cpu_op" if SYNC_OPS.contains(&name) => Some(HostCallKind::Synchronize),
        "cpu_op" if GEMM_OPS.contains(&name) => Some(HostCallKind::Gemm),
        "cuda_runtime" | "cuda_driver" if SYNC_CALLS.contains(&name) => {
            Some(HostCallKind::Synchronize)
        }
        "cuda_runtime" | "cuda_driver" if MEMORY_CALLS.contains(&name) => {
            Some(HostCallKind::Memory)
        }
        "cuda_sync" => Some(HostCallKind::Synchronize),
        _ => None,
    }
}

/// Whether a CPU op tells who made a sync: a backward function the autograd engine runs,
/// or an `aten::isnan` (see [`HostCallRecords::name_anomaly_checks`]).
pub fn is_engine_op(name: &str) -> bool {
    name == "aten::isnan" || name.starts_with(BACKWARD_FUNCTION)
}

/// Whether a `python_function` frame (`train.py(88): step`, `torch/nn/modules/module.py(1751):
/// _call_impl`, `<built-in method item ...>`) is the program's own code.
pub fn is_program_frame(name: &str) -> bool {
    let file = name.split("): ").next().unwrap_or("");
    file.contains(".py(")
        && !name.starts_with('<')
        && !file.starts_with("torch/")
        && !file.starts_with("torch_")
        && !file.contains("site-packages/")
        && !file.contains("dist-packages/")
        && !file.contains("/lib/python3")
        && !file.starts_with("threading.py")
        && !file.starts_with("multiprocessing/")
}

/// One host call, as recorded.
#[derive(Debug, Clone, Copy)]
struct CallRec {
    kind: HostCallKind,
    /// Into the records' call names (a GEMM's with its input shapes).
    name: u32,
    tid: Option<u64>,
    start: i64,
    end: i64,
    dtype: Option<&'static str>,
    /// A GEMM's kernels on the device and its FLOPs, once they are linked to it.
    device_ns: i64,
    flops: u64,
}

/// A Python frame: the program's own code, or a call out of it (PyTorch's, a builtin).
#[derive(Debug, Clone, Copy)]
struct Frame {
    tid: u64,
    start: i64,
    end: i64,
    name: u32,
    program: bool,
}

/// How a call out of the program's code is named: `Tensor.item` for `<built-in method
/// item of Tensor object at 0x7f..>` (the address differs per object), `print` for
/// `<built-in function print>`, a library frame as the profiler names it.
fn call_out_name(name: &str) -> String {
    let inner = name.trim_start_matches('<').trim_end_matches('>');
    if let Some(rest) = inner.strip_prefix("built-in method ") {
        let (method, of) = rest.split_once(" of ").unwrap_or((rest, ""));
        let object = of.split(" object").next().unwrap_or("").trim();
        return if object.is_empty() {
            method.to_string()
        } else {
            format!("{object}.{method}")
        };
    }
    if let Some(function) = inner.strip_prefix("built-in function ") {
        return function.to_string();
    }
    name.to_string()
}

/// A file's host calls, Python frames and GC pauses, gathered while it is parsed.
#[derive(Debug, Default)]
pub struct HostCallRecords {
    calls: Vec<CallRec>,
    call_names: Vec<String>,
    call_index: HashMap<String, u32>,
    /// GC pauses: thread, start, end.
    gc: Vec<(u64, i64, i64)>,
    frames: Vec<Frame>,
    frame_names: Vec<String>,
    frame_index: HashMap<String, u32>,
    /// `autograd::engine::evaluate_function` spans: thread, start, end.
    backward_functions: Vec<(u64, i64, i64)>,
    /// `aten::isnan` calls: thread, start.
    nan_checks: Vec<(u64, i64)>,
}

impl HostCallRecords {
    /// Records a call over `[start, end]` (a GEMM named with its input shapes).
    pub fn call(
        &mut self,
        kind: HostCallKind,
        name: String,
        tid: Option<u64>,
        (start, end): (i64, i64),
        dtype: Option<&'static str>,
    ) {
        let name = intern(&mut self.call_names, &mut self.call_index, name);
        self.calls.push(CallRec {
            kind,
            name,
            tid,
            start,
            end,
            dtype,
            device_ns: 0,
            flops: 0,
        });
    }

    /// The index the next call recorded will have (for [`HostCallRecords::device_work`]).
    pub fn next_index(&self) -> usize {
        self.calls.len()
    }

    /// A recorded GEMM call's kernels: their time on the device and the call's FLOPs.
    pub fn device_work(&mut self, call: usize, ns: i64, flops: u64) {
        let c = &mut self.calls[call];
        c.device_ns = c.device_ns.saturating_add(ns);
        c.flops = c.flops.saturating_add(flops);
    }

    /// The calls counted per kind, name, iteration (`iteration_at` their start) and type.
    pub fn counts(self, iteration_at: impl Fn(i64) -> u32) -> Vec<HostCallCount> {
        type Key = (HostCallKind, u32, u32, Option<&'static str>);
        let mut sums: BTreeMap<Key, CallSums> = BTreeMap::new();
        for c in &self.calls {
            sums.entry((c.kind, c.name, iteration_at(c.start), c.dtype))
                .or_default()
                .add(CallSums {
                    count: 1,
                    ns: c.end - c.start,
                    device_ns: c.device_ns,
                    flops: c.flops,
                });
        }
        sums.into_iter()
            .map(|((kind, name, iteration, dtype), s)| {
                HostCallCount::new(
                    kind,
                    self.call_names[name as usize].clone(),
                    iteration,
                    dtype.map(str::to_string),
                    s,
                )
            })
            .collect()
    }

    /// Keeps a `python_function` frame.
    pub fn frame(&mut self, tid: u64, start: i64, end: i64, name: &str) {
        let program = is_program_frame(name);
        let label = if program {
            name.to_string()
        } else {
            call_out_name(name)
        };
        let id = intern(&mut self.frame_names, &mut self.frame_index, label);
        self.frames.push(Frame {
            tid,
            start,
            end,
            name: id,
            program,
        });
    }

    pub fn gc_pause(&mut self, tid: u64, start: i64, end: i64) {
        self.gc.push((tid, start, end));
    }

    /// Records a CPU op that tells who made a sync ([`is_engine_op`]).
    pub fn engine_op(&mut self, name: &str, tid: u64, (start, end): (i64, i64)) {
        if name.starts_with(BACKWARD_FUNCTION) {
            self.backward_functions.push((tid, start, end));
        } else if name == "aten::isnan" {
            self.nan_checks.push((tid, start));
        }
    }

    /// Renames the syncs that anomaly detection makes (a `_local_scalar_dense` inside a
    /// backward function that also ran an `aten::isnan` before it) to
    /// [`AUTOGRAD_ANOMALY_CHECK`]: the program did not ask for them, and no line of it
    /// can drop them. Before [`HostCallRecords::sites`] and the counts, which go by name.
    pub fn name_anomaly_checks(&mut self) {
        if self.nan_checks.is_empty() {
            return;
        }
        let mut functions = std::mem::take(&mut self.backward_functions);
        functions.sort_unstable();
        self.nan_checks.sort_unstable();
        let checked = intern(
            &mut self.call_names,
            &mut self.call_index,
            AUTOGRAD_ANOMALY_CHECK.to_string(),
        );
        for c in &mut self.calls {
            let (Some(tid), HostCallKind::Synchronize) = (c.tid, c.kind) else {
                continue;
            };
            if self.call_names[c.name as usize] != "aten::_local_scalar_dense" {
                continue;
            }
            // The latest backward function on the thread to start before the call.
            let i = functions.partition_point(|&(t, s, _)| (t, s) <= (tid, c.start));
            let Some(&(_, f_start, f_end)) = i
                .checked_sub(1)
                .map(|i| &functions[i])
                .filter(|&&(t, _, e)| t == tid && c.end <= e)
            else {
                continue;
            };
            let j = self
                .nan_checks
                .partition_point(|&(t, s)| (t, s) < (tid, f_start));
            if self
                .nan_checks
                .get(j)
                .is_some_and(|&(t, s)| t == tid && s < c.start && s < f_end)
            {
                c.name = checked;
            }
        }
        self.nan_checks = Vec::new();
    }

    /// Where the synchronizations and GC pauses were made (see [`CallSites`]), then
    /// forgets the frames.
    pub fn sites(&mut self, gc_name: &str) -> Vec<CallSites> {
        let frames = std::mem::take(&mut self.frames);
        if frames.is_empty() {
            return vec![];
        }
        let frames = Nested::new(frames, |f| (f.tid, f.start, f.end));
        // Per call name, (program frame, call out of it) -> calls.
        let mut by_name: BTreeMap<&str, BTreeMap<(u32, Option<u32>), u64>> = BTreeMap::new();
        let sited = self
            .calls
            .iter()
            .filter(|c| c.kind == HostCallKind::Synchronize)
            .filter_map(|c| {
                Some((
                    self.call_names[c.name as usize].as_str(),
                    c.tid?,
                    c.start,
                    c.end,
                ))
            })
            .chain(self.gc.iter().map(|&(t, s, e)| (gc_name, t, s, e)));
        for (name, tid, start, end) in sited {
            if let Some(site) = placed(&frames, tid, start, end) {
                *by_name.entry(name).or_default().entry(site).or_default() += 1;
            }
        }
        let names = &self.frame_names;
        let out = by_name
            .into_iter()
            .map(|(name, counts)| {
                call_sites(
                    name,
                    counts.into_iter().map(|((f, via), n)| {
                        let site = &names[f as usize];
                        match via {
                            Some(v) => (format!("{site} -> {}", names[v as usize]), n),
                            None => (site.clone(), n),
                        }
                    }),
                )
            })
            .collect();
        self.frame_names.clear();
        self.frame_index.clear();
        out
    }
}

/// `name`'s index in `names`, added if new.
fn intern(names: &mut Vec<String>, index: &mut HashMap<String, u32>, name: String) -> u32 {
    if let Some(&i) = index.get(&name) {
        return i;
    }
    let i = names.len() as u32;
    names.push(name.clone());
    index.insert(name, i);
    i
}

/// Where calls named `name` were made, most frequent first, the first few.
pub fn call_sites(name: &str, counts: impl IntoIterator<Item = (String, u64)>) -> CallSites {
    let mut sites: Vec<(String, u64)> = counts.into_iter().collect();
    sites.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sites.truncate(5);
    CallSites {
        name: name.to_string(),
        sites,
    }
}

/// Where a call over `[start, end]` on thread `tid` was made: the innermost program frame
/// around it, and the outermost other frame inside that one around it (the call out of
/// the program's code).
fn placed(frames: &Nested<Frame>, tid: u64, start: i64, end: i64) -> Option<(u32, Option<u32>)> {
    let mut via = None;
    for f in frames.around(tid, start, end).map(|i| frames.get(i)) {
        if f.program {
            return Some((f.name, via));
        }
        via = Some(f.name);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_frames_are_told_from_library_frames() {
        for (name, program) in [
            ("train.py(88): step", true),
            ("/home/me/job/model.py(12): forward", true),
            ("torch/nn/modules/module.py(1751): _call_impl", false),
            ("<built-in method item of Tensor object at 0x7f>", false),
            ("<frozen os>(674): __getitem__", false),
            ("/usr/lib/python3.11/threading.py(320): wait", false),
            (
                "/venv/lib/python3.11/site-packages/transformers/trainer.py(10): train",
                false,
            ),
            ("Python GC", false),
        ] {
            assert_eq!(is_program_frame(name), program, "{name}");
        }
    }

    #[test]
    fn calls_are_classified_by_category_and_name() {
        for (cat, name, kind) in [
            (
                "cpu_op",
                "aten::_local_scalar_dense",
                Some(HostCallKind::Synchronize),
            ),
            ("cpu_op", "aten::item", None),
            ("cpu_op", "aten::addmm", Some(HostCallKind::Gemm)),
            (
                "cuda_runtime",
                "cudaStreamSynchronize",
                Some(HostCallKind::Synchronize),
            ),
            ("cuda_runtime", "cudaMemcpyAsync", None),
            ("cuda_runtime", "cudaFree", Some(HostCallKind::Memory)),
            ("cuda_driver", "cuMemCreate", Some(HostCallKind::Memory)),
            ("cuda_sync", "Stream Sync", Some(HostCallKind::Synchronize)),
            ("kernel", "cudaFree", None),
        ] {
            assert_eq!(call_kind(cat, name), kind, "{cat} {name}");
        }
    }

    #[test]
    fn a_call_is_placed_in_its_innermost_program_frame() {
        let mut r = HostCallRecords::default();
        r.frame(1, 0, 100, "train.py(10): main");
        r.frame(1, 10, 50, "train.py(20): step");
        r.frame(1, 12, 14, "train.py(30): helper"); // ended before the call
        r.frame(1, 15, 40, "torch/_tensor.py(5): item"); // PyTorch's: the call out
        r.frame(
            1,
            19,
            23,
            "<built-in method item of Tensor object at 0x7f0>",
        );
        r.frame(2, 0, 100, "other.py(1): thread");
        r.frame(
            1,
            55,
            80,
            "<built-in method append of list object at 0x7f1>",
        );
        r.frame(1, 81, 99, "<built-in function print>");
        r.call(
            HostCallKind::Synchronize,
            "aten::_local_scalar_dense".into(),
            Some(1),
            (20, 22),
            None,
        );
        r.gc_pause(1, 60, 70);
        let sites = r.sites("Python GC");
        assert_eq!(sites.len(), 2);
        assert_eq!(sites[0].name, "Python GC");
        assert_eq!(
            sites[0].sites,
            vec![("train.py(10): main -> list.append".to_string(), 1)]
        );
        assert_eq!(sites[1].name, "aten::_local_scalar_dense");
        assert_eq!(
            sites[1].sites,
            vec![(
                "train.py(20): step -> torch/_tensor.py(5): item".to_string(),
                1
            )]
        );
    }

    #[test]
    fn the_autograd_engines_nan_checks_are_told_from_the_programs_syncs() {
        // Thread 1 runs backward: a function whose outputs anomaly detection checks
        // (isnan, then item), one that reads a value itself (a custom backward's
        // .item(), no isnan), and, after both, the program's own .item(); thread 2 ran
        // an isnan and a sync of its own outside any backward function.
        let mut r = HostCallRecords::default();
        let sync = |r: &mut HostCallRecords, tid: u64, at: i64| {
            r.call(
                HostCallKind::Synchronize,
                "aten::_local_scalar_dense".into(),
                Some(tid),
                (at, at + 1),
                None,
            )
        };
        r.engine_op(
            "autograd::engine::evaluate_function: ConvolutionBackward0",
            1,
            (100, 200),
        );
        r.engine_op("aten::isnan", 1, (150, 160));
        sync(&mut r, 1, 170);
        r.engine_op(
            "autograd::engine::evaluate_function: MyFnBackward",
            1,
            (300, 400),
        );
        sync(&mut r, 1, 350);
        sync(&mut r, 1, 500);
        r.engine_op("aten::isnan", 2, (10, 20));
        sync(&mut r, 2, 30);
        r.name_anomaly_checks();
        let names: Vec<(u64, String)> = r
            .counts(|_| 0)
            .into_iter()
            .map(|c| (c.count, c.name))
            .collect();
        assert_eq!(
            names,
            [
                (3, "aten::_local_scalar_dense".to_string()),
                (1, AUTOGRAD_ANOMALY_CHECK.to_string())
            ]
        );
    }

    #[test]
    fn calls_out_of_the_program_are_named_without_their_address() {
        for (frame, name) in [
            (
                "<built-in method item of Tensor object at 0x7f3a2c>",
                "Tensor.item",
            ),
            ("<built-in method cpu of Tensor object>", "Tensor.cpu"),
            ("<built-in function print>", "print"),
            ("<built-in method sleep>", "sleep"),
            (
                "torch/nn/modules/module.py(1751): _call_impl",
                "torch/nn/modules/module.py(1751): _call_impl",
            ),
        ] {
            assert_eq!(call_out_name(frame), name, "{frame}");
        }
    }

    #[test]
    fn a_call_outside_every_frame_or_thread_has_no_site() {
        let mut r = HostCallRecords::default();
        r.frame(1, 10, 20, "train.py(1): step");
        r.frame(1, 30, 40, "<built-in function print>");
        for (tid, at) in [(1, 5), (1, 25), (1, 35), (2, 15)] {
            r.call(
                HostCallKind::Synchronize,
                "cudaStreamSynchronize".into(),
                Some(tid),
                (at, at + 1),
                None,
            );
        }
        let sites = r.sites("Python GC");
        assert!(sites.is_empty(), "{sites:?}");
    }
}
