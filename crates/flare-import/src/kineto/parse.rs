//! Parsing one Kineto file into the few facts Flare needs, without building a JSON tree.
//!
//! Events are deserialized one at a time from the `traceEvents` array into a borrowed
//! struct (names and strings point into the input buffer when they hold no escapes) with
//! an `args` struct that names only the keys Flare reads; everything else is skipped by
//! the parser. Timestamps are taken as the raw JSON text and converted from microseconds
//! to nanoseconds exactly, in decimal, so `12.345` is 12,345 ns and never 12,344.

use super::comm::{self, CommEvent};
use super::host_calls::{self, HostCallRecords};
use super::names::{self, RankList};
use super::nesting::Nested;
use super::KinetoError;
use flare_model::trace::NameTable;
use flare_model::{CallSites, HostCallCount, HostCallKind, OpKind};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// A string that borrows from the input when it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Str<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// An argument value of whatever JSON type the producer chose: PyTorch writes some numbers
/// as strings and some strings as numbers across versions, so Flare accepts both.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Lenient<'a> {
    Int(i128),
    Float(f64),
    Str(Cow<'a, str>),
    Bool(bool),
    /// A JSON array whose elements are all integers (rank lists).
    List(Vec<i128>),
    /// null, an object, or an array of something else.
    #[default]
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Lenient<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(Lenient::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Lenient::Int(v as i128))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Lenient::Int(v as i128))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Lenient::Float(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Lenient::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Lenient::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Lenient::Str(Cow::Owned(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Lenient::Other)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Lenient::Other)
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
                Lenient::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                let mut all_ints = true;
                while let Some(v) = seq.next_element::<Lenient<'de>>()? {
                    match v {
                        Lenient::Int(i) if all_ints => out.push(i),
                        _ => all_ints = false,
                    }
                }
                Ok(if all_ints {
                    Lenient::List(out)
                } else {
                    Lenient::Other
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Lenient::Other)
            }
        }
        d.deserialize_any(V)
    }
}

impl Lenient<'_> {
    /// A non-negative integer, from a number or a numeric string.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Lenient::Int(i) => u64::try_from(*i).ok(),
            Lenient::Float(f) if f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19 => Some(*f as u64),
            Lenient::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Lenient::Int(i) => i64::try_from(*i).ok(),
            Lenient::Float(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Some(*f as i64),
            Lenient::Str(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Lenient::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Truthy: `1`, `true`, `"1"`, `"true"`.
    pub fn is_true(&self) -> bool {
        match self {
            Lenient::Bool(b) => *b,
            Lenient::Int(i) => *i != 0,
            Lenient::Str(s) => matches!(s.trim(), "1" | "true" | "True"),
            _ => false,
        }
    }

    /// A rank list: a JSON array of integers or a string like `"[0, 1, 2]"`.
    pub fn as_rank_list(&self) -> Option<RankList> {
        match self {
            Lenient::List(v) => v
                .iter()
                .map(|&i| u32::try_from(i).ok())
                .collect::<Option<Vec<u32>>>()
                .map(RankList::Complete),
            Lenient::Str(s) => names::parse_rank_list(s),
            _ => None,
        }
    }

    /// A name: strings as they are, integers printed.
    pub fn as_name(&self) -> Option<String> {
        match self {
            Lenient::Str(s) => Some(s.to_string()),
            Lenient::Int(i) => Some(i.to_string()),
            _ => None,
        }
    }
}

/// The arguments Flare reads. Unknown keys are skipped by the parser.
#[derive(Deserialize, Default)]
struct Args<'a> {
    #[serde(default)]
    correlation: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Collective name")]
    collective: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "In msg nelems")]
    in_nelems: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Group size")]
    group_size: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    dtype: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Process Group Name")]
    pg_name: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Process Group Description")]
    pg_desc: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Process Group Ranks")]
    pg_ranks: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Seq")]
    seq: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Src Rank")]
    src_rank: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Dst Rank")]
    dst_rank: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Global rank start")]
    global_start: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Global rank stride")]
    global_stride: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "FLOPs")]
    flops_upper: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "flops")]
    flops_lower: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Flare kind")]
    flare_kind: Option<Lenient<'a>>,
    #[serde(borrow, default, rename = "Flare unfinished")]
    flare_unfinished: Option<Lenient<'a>>,
    /// Shapes and element types of a CPU op's inputs (`record_shapes=True`).
    #[serde(borrow, default, rename = "Input Dims")]
    input_dims: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "Input type")]
    input_type: Option<&'a RawValue>,
    /// The values of a CPU op's scalar inputs, as text (`record_shapes=True`).
    #[serde(borrow, default, rename = "Concrete Inputs")]
    concrete_inputs: Option<&'a RawValue>,
}

/// One trace event, borrowing from the input.
struct Event<'a> {
    /// Kept raw: only launches and `record_param_comms` need it.
    tid: Option<&'a RawValue>,
    ph: Option<Str<'a>>,
    cat: Option<Str<'a>>,
    name: Option<Str<'a>>,
    ts: Option<&'a RawValue>,
    dur: Option<&'a RawValue>,
    args: EventArgs<'a>,
}

/// An event's `args`, handled by what the event is: parsed in the same pass for kernels
/// (Flare reads them all), kept raw for CPU ops and runtime calls (only launches and a few
/// ops carrying Flare's own arguments are read), skipped for everything else. Kineto writes `cat` before
/// `args`; when it comes after, they are kept raw and parsed on demand.
enum EventArgs<'a> {
    Absent,
    Parsed(Box<Args<'a>>),
    Raw(&'a RawValue),
    Skipped,
}

impl<'de> Deserialize<'de> for Event<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Event<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace event object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Event<'de>, A::Error> {
                let mut ev = Event {
                    tid: None,
                    ph: None,
                    cat: None,
                    name: None,
                    ts: None,
                    dur: None,
                    args: EventArgs::Absent,
                };
                while let Some(key) = map.next_key::<Str<'de>>()? {
                    match key.0.as_ref() {
                        "ph" => ev.ph = map.next_value()?,
                        "tid" => ev.tid = map.next_value()?,
                        "cat" => ev.cat = map.next_value()?,
                        "name" => ev.name = map.next_value()?,
                        "ts" => ev.ts = map.next_value()?,
                        "dur" => ev.dur = map.next_value()?,
                        "args" => {
                            ev.args = match ev.cat.as_ref().map(|c| c.0.as_ref()) {
                                Some("kernel") => match map.next_value::<Option<Args<'de>>>()? {
                                    Some(a) => EventArgs::Parsed(Box::new(a)),
                                    None => EventArgs::Absent,
                                },
                                Some(
                                    "cpu_op" | "user_annotation" | "cuda_runtime" | "cuda_driver",
                                )
                                | None => match map.next_value::<Option<&'de RawValue>>()? {
                                    Some(r) => EventArgs::Raw(r),
                                    None => EventArgs::Absent,
                                },
                                Some(_) => {
                                    map.next_value::<IgnoredAny>()?;
                                    EventArgs::Skipped
                                }
                            }
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(ev)
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> EventArgs<'a> {
    /// The arguments, parsed.
    fn parse(self, name: &str) -> Result<Args<'a>, String> {
        match self {
            EventArgs::Absent | EventArgs::Skipped => Ok(Args::default()),
            EventArgs::Parsed(a) => Ok(*a),
            EventArgs::Raw(raw) => serde_json::from_str(raw.get()).map_err(|e| {
                format!("\"{name}\": \"args\" is not an object of the expected arguments: {e}")
            }),
        }
    }

    /// Whether the arguments may hold a key (a fast pre-check on raw arguments).
    fn mention(&self, key: &str) -> bool {
        match self {
            EventArgs::Raw(r) => r.get().contains(key),
            EventArgs::Parsed(_) => true,
            EventArgs::Absent | EventArgs::Skipped => false,
        }
    }
}

/// One entry of `distributedInfo.pg_config`.
#[derive(Deserialize, Debug, Clone)]
struct PgConfigIn<'a> {
    #[serde(borrow, default)]
    pg_name: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    pg_desc: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    pg_size: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    ranks: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    flare_group_kind: Option<Lenient<'a>>,
}

/// `distributedInfo.pg_config`: a list of entries, or (some versions) an object of them.
struct PgConfigList<'a>(Vec<PgConfigIn<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for PgConfigList<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PgConfigList<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of process group configurations")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<PgConfigIn<'de>>()? {
                    out.push(v);
                }
                Ok(PgConfigList(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((key, mut v)) = map.next_entry::<Lenient<'de>, PgConfigIn<'de>>()? {
                    if v.pg_name.is_none() {
                        v.pg_name = Some(key);
                    }
                    out.push(v);
                }
                Ok(PgConfigList(out))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(PgConfigList(Vec::new()))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct DistInfo<'a> {
    #[serde(borrow, default)]
    rank: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    world_size: Option<Lenient<'a>>,
    #[serde(borrow, default)]
    pg_config: Option<PgConfigList<'a>>,
}

/// A process group as `distributedInfo.pg_config` describes it.
#[derive(Debug, Clone)]
pub struct PgConfig {
    pub name: String,
    pub desc: Option<String>,
    pub size: Option<u64>,
    pub ranks: Option<RankList>,
    pub kind_hint: Option<String>,
}

/// What an NCCL kernel's arguments say.
#[derive(Debug, Clone, Default)]
pub struct NcclArgs {
    pub collective: Option<String>,
    pub in_nelems: Option<u64>,
    pub group_size: Option<u64>,
    pub dtype: Option<String>,
    pub pg_name: Option<String>,
    pub pg_desc: Option<String>,
    pub pg_ranks: Option<RankList>,
    pub seq: Option<u64>,
    pub src_rank: Option<u64>,
    pub dst_rank: Option<u64>,
    pub global_start: Option<u64>,
    pub global_stride: Option<u64>,
    /// The peer of a CPU-side P2P op as its rank in the process group (the `dstRank` or
    /// `srcRank` argument of the c10d call that posted it).
    pub group_peer: Option<u64>,
}

/// A kernel launch call (`cudaLaunchKernel`, ...): when the CPU issued the kernel, and on
/// which thread (to find the `record_param_comms` op around it).
#[derive(Debug, Clone, Copy)]
pub struct LaunchRec {
    pub ts: i64,
    pub tid: Option<u64>,
}

/// A GPU kernel.
#[derive(Debug, Clone)]
pub struct KernelRec {
    /// Index of the event in `traceEvents`, for error messages.
    pub index: u64,
    /// Local name id (in [`ParsedFile::names`]).
    pub name: u32,
    pub start: i64,
    /// `None` when the event has no `dur`.
    pub end: Option<i64>,
    pub correlation: Option<u64>,
    pub flops: u64,
    /// `Some` for communication kernels ([`super::comm`]): NCCL's, or another library's
    /// whose kind the name tells.
    pub nccl: Option<Box<NcclArgs>>,
    /// Read from the CPU side of a trace without GPU activity (a Gloo collective's work, a
    /// top-level CPU span as compute), not from a GPU kernel.
    pub cpu_side: bool,
    /// When the CPU issued it, when known without a launch call (CPU-side records).
    pub issue: Option<i64>,
}

/// A host phase on the CPU.
#[derive(Debug, Clone)]
pub struct HostRec {
    pub kind: OpKind,
    pub name: u32,
    pub start: i64,
    pub end: i64,
}

/// A `ProfilerStep#N` span.
#[derive(Debug, Clone, Copy)]
pub struct StepRec {
    pub iteration: u32,
    pub start: i64,
    pub end: Option<i64>,
}

/// The iteration of a CPU time: the last step that began at or before it, or the first
/// step for times before every step; 0 when there are no steps.
pub(super) struct StepIndex<'a> {
    /// Sorted by start.
    pub steps: &'a [StepRec],
}

impl StepIndex<'_> {
    pub fn iteration_at(&self, t: i64) -> u32 {
        if self.steps.is_empty() {
            return 0;
        }
        let i = self.steps.partition_point(|s| s.start <= t);
        self.steps[i.saturating_sub(1)].iteration
    }
}

/// Counters of one file, merged into [`super::KinetoImportStats`].
#[derive(Debug, Clone, Default)]
pub struct FileStats {
    pub events: u64,
    pub kernels: u64,
    pub nccl_kernels: u64,
    pub kernels_without_duration: u64,
    pub launches: u64,
    /// Runtime calls and `cuda_sync` events read as host calls.
    pub runtime_host_calls: u64,
    /// NCCL kernels whose collective arguments came from the `record_param_comms` op
    /// that launched them (traces that put them only there).
    pub args_from_param_comms: u64,
    /// Kernels without `FLOPs` that took theirs from the GEMM op that launched them.
    pub flops_from_gemm_ops: u64,
    pub host_spans: u64,
    pub profiler_steps: u64,
    /// Communication kernels outside NCCL (DeepEP, NVSHMEM, MSCCL++) read as sync ops,
    /// and those whose collective the name does not tell (kept as compute).
    pub other_comm_kernels: u64,
    pub other_comm_kernels_unknown: u64,
    /// CPU-side reading (files without GPU kernels): collectives' work spans read as sync
    /// ops, top-level CPU spans read as compute, and collectives launched whose work the
    /// file does not hold (a CPU-only profile of an NCCL job).
    pub cpu_collectives: u64,
    pub cpu_compute_spans: u64,
    pub cpu_launches_without_work: u64,
    pub skipped: BTreeMap<String, u64>,
}

/// Everything Flare keeps of one file. Times are absolute nanoseconds
/// (`baseTimeNanoseconds` added).
#[derive(Debug)]
pub struct ParsedFile {
    pub path: String,
    pub rank: Option<u64>,
    pub world_size: Option<u64>,
    pub pg_config: Vec<PgConfig>,
    pub names: NameTable,
    pub steps: Vec<StepRec>,
    pub kernels: Vec<KernelRec>,
    /// Correlation id to the CPU launch call.
    pub launches: HashMap<u64, LaunchRec>,
    pub hosts: Vec<HostRec>,
    /// Its host calls, counted per name and iteration.
    pub host_calls: Vec<HostCallCount>,
    pub call_sites: Vec<CallSites>,
    pub stats: FileStats,
}

/// The name PyTorch's profiler gives a Python garbage collection (`python_function`).
pub const GC_PAUSE: &str = "Python GC";

/// Launch calls whose correlation id links a CPU call to the kernel it started.
const LAUNCH_NAMES: [&str; 6] = [
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel",
    "hipLaunchKernel",
];

/// A problem found while handling one event, reported with the event's index.
struct EventProblem {
    index: u64,
    what: String,
}

/// Receives events as the parser produces them.
struct Collector {
    names: NameTable,
    steps: Vec<StepRec>,
    kernels: Vec<KernelRec>,
    launches: HashMap<u64, LaunchRec>,
    /// `record_param_comms` CPU ops: (thread, start, end, their collective arguments).
    param_comms: Vec<(u64, i64, i64, NcclArgs)>,
    /// GEMM CPU ops with shapes: (thread, start, end, FLOPs, its host call's index).
    gemm_ops: Vec<(u64, i64, i64, u64, usize)>,
    /// The CPU side, for a file without GPU kernels (see [`super::cpu_side`]).
    cpu: super::cpu_side::CpuRecords,
    hosts: Vec<HostRec>,
    /// Synchronizations, memory calls, GEMM shapes and where they were made.
    calls: HostCallRecords,
    stats: FileStats,
    problem: Option<EventProblem>,
    saw_events: bool,
}

impl Collector {
    /// A host phase of kind `kind` from `start` to `end` (ns), named `name`.
    fn host_span(&mut self, kind: OpKind, name: &str, start: i64, end: i64) {
        let name = self.names.intern(name);
        self.hosts.push(HostRec {
            kind,
            name,
            start,
            end,
        });
        self.stats.host_spans += 1;
    }

    fn skip(&mut self, category: &str) {
        if let Some(n) = self.stats.skipped.get_mut(category) {
            *n += 1;
        } else {
            self.stats.skipped.insert(category.to_string(), 1);
        }
    }

    fn event(&mut self, index: u64, mut ev: Event<'_>) -> Result<(), String> {
        let args = std::mem::replace(&mut ev.args, EventArgs::Absent);
        self.stats.events += 1;
        let cat = ev.cat.as_ref().map(|s| s.0.as_ref()).unwrap_or("");
        let ph = ev.ph.as_ref().map(|s| s.0.as_ref()).unwrap_or("");
        if ph != "X" {
            let label = if cat.is_empty() {
                format!("ph:{ph}")
            } else {
                cat.to_string()
            };
            self.skip(&label);
            return Ok(());
        }
        let name = ev.name.as_ref().map(|s| s.0.as_ref()).unwrap_or("");
        match cat {
            "kernel" => self.kernel(index, name, &ev, args),
            "cuda_runtime" | "cuda_driver" => {
                if LAUNCH_NAMES.contains(&name) {
                    let corr = args
                        .parse(name)?
                        .correlation
                        .as_ref()
                        .and_then(Lenient::as_u64);
                    match corr {
                        Some(c) => {
                            let ts = required_ts(&ev, name)?;
                            let tid = thread_id(&ev);
                            self.launches.insert(c, LaunchRec { ts, tid });
                            self.stats.launches += 1;
                        }
                        None => self.skip("launch without correlation"),
                    }
                } else if let Some(kind) = host_calls::call_kind(cat, name) {
                    self.host_call(kind, name, &ev, None)?;
                    self.stats.runtime_host_calls += 1;
                } else {
                    self.skip(cat);
                }
                Ok(())
            }
            "cuda_sync" => {
                self.stats.runtime_host_calls += 1;
                self.host_call(HostCallKind::Synchronize, name, &ev, None)
                    .map(drop)
            }
            "python_function" => {
                let (Some(dur), Some(tid)) = (optional_dur(&ev, name)?, thread_id(&ev)) else {
                    self.skip(cat);
                    return Ok(());
                };
                let start = required_ts(&ev, name)?;
                let end = add(start, dur, name)?;
                if name == GC_PAUSE {
                    // `record_python_gc_info=True`: a collection, a host phase.
                    self.host_span(OpKind::GarbageCollection, name, start, end);
                    self.calls.gc_pause(tid, start, end);
                } else if names::saves_checkpoint(name) {
                    // `torch.save` and its kin from the program: a checkpoint, which no
                    // annotation names.
                    self.calls.frame(tid, start, end, name);
                    self.host_span(OpKind::Checkpoint, name, start, end);
                } else if names::recomputes_activations(name) {
                    // A checkpointed block's forward run again in the backward: its ops are
                    // the backward function's compute; the recompute itself is counted.
                    self.calls.frame(tid, start, end, name);
                    self.calls.call(
                        HostCallKind::Recompute,
                        name.to_string(),
                        Some(tid),
                        (start, end),
                        None,
                    );
                    self.skip(cat);
                } else {
                    self.calls.frame(tid, start, end, name);
                    self.skip(cat);
                }
                Ok(())
            }
            "cpu_op" | "user_annotation" => {
                if let Some(step) = name.strip_prefix("ProfilerStep#") {
                    let iteration: u32 = step.trim().parse().map_err(|_| {
                        format!(
                            "\"{name}\": expected ProfilerStep#<iteration number> with a number that fits 32 bits"
                        )
                    })?;
                    let start = required_ts(&ev, name)?;
                    let dur = optional_dur(&ev, name)?;
                    let unfinished = args.mention("Flare unfinished")
                        && args
                            .parse(name)?
                            .flare_unfinished
                            .as_ref()
                            .is_some_and(Lenient::is_true);
                    let end = match dur {
                        Some(d) if !unfinished => Some(add(start, d, name)?),
                        _ => None,
                    };
                    self.steps.push(StepRec {
                        iteration,
                        start,
                        end,
                    });
                    self.stats.profiler_steps += 1;
                    return Ok(());
                }
                match comm::classify_cpu(name) {
                    Some(CommEvent::ParamComms) => {
                        // PyTorch's wrapper of every c10d collective: older traces carry the
                        // collective's arguments here only, not on the kernel.
                        if let (Some(tid), Some(dur)) = (thread_id(&ev), optional_dur(&ev, name)?) {
                            let start = required_ts(&ev, name)?;
                            let end = add(start, dur, name)?;
                            let a = args.parse(name)?;
                            self.param_comms.push((tid, start, end, nccl_args(&a)));
                        }
                        self.skip(cat);
                        return Ok(());
                    }
                    Some(CommEvent::CpuWork(kind)) => {
                        let start = required_ts(&ev, name)?;
                        let end = match optional_dur(&ev, name)? {
                            Some(d) => Some(add(start, d, name)?),
                            None => None,
                        };
                        let a = args.parse(name)?;
                        let mut nccl = nccl_args(&a);
                        nccl.collective = Some(kind.as_str().to_string());
                        if nccl.in_nelems.is_none() {
                            nccl.in_nelems = input_elements(&a);
                        }
                        if nccl.dtype.is_none() {
                            nccl.dtype = input_dtype(&a);
                        }
                        let name = self.names.intern(name);
                        self.cpu.work.push(super::cpu_side::CpuWork {
                            index,
                            name,
                            tid: thread_id(&ev),
                            start,
                            end,
                            args: nccl,
                        });
                        return Ok(());
                    }
                    Some(CommEvent::CpuLaunch(kind)) => {
                        let ts = required_ts(&ev, name)?;
                        let peer = if kind.is_some_and(OpKind::is_p2p)
                            && args.mention("Concrete Inputs")
                        {
                            p2p_group_peer(&args.parse(name)?)
                        } else {
                            None
                        };
                        self.cpu.launches.push(super::cpu_side::CpuLaunch {
                            kind,
                            ts,
                            tid: thread_id(&ev),
                            peer,
                        });
                        self.skip(cat);
                        return Ok(());
                    }
                    _ => {}
                }
                if cat == "cpu_op" && host_calls::is_engine_op(name) {
                    if let (Some(tid), Some(dur)) = (thread_id(&ev), optional_dur(&ev, name)?) {
                        let start = required_ts(&ev, name)?;
                        self.calls
                            .engine_op(name, tid, (start, add(start, dur, name)?));
                    }
                }
                // Kept for the shapes of a compute span (parsing the kind consumes them).
                let raw_args = match &args {
                    EventArgs::Raw(raw) => Some(*raw),
                    _ => None,
                };
                // A GEMM's shapes, read once for its host call and its CPU span.
                let gemm_shapes = match host_calls::call_kind(cat, name) {
                    Some(kind) => self.host_call(kind, name, &ev, raw_args)?,
                    None => None,
                };
                let flare_kind = if args.mention("Flare kind") {
                    args.parse(name)?
                        .flare_kind
                        .as_ref()
                        .and_then(Lenient::as_str)
                        .and_then(OpKind::from_name)
                        .filter(|k| k.is_host())
                } else {
                    None
                };
                match flare_kind.or_else(|| names::host_kind(name)) {
                    Some(kind) => {
                        let start = required_ts(&ev, name)?;
                        let dur = optional_dur(&ev, name)?.ok_or_else(|| {
                            format!("host span \"{name}\" has no \"dur\": expected its duration in microseconds")
                        })?;
                        let end = add(start, dur, name)?;
                        self.host_span(kind, name, start, end);
                    }
                    None if self.kernels.is_empty() => {
                        // Until a GPU kernel shows up, CPU spans may be the file's compute.
                        if let (Some(dur), Some(tid)) = (optional_dur(&ev, name)?, thread_id(&ev)) {
                            let start = required_ts(&ev, name)?;
                            let end = add(start, dur, name)?;
                            // The same op on inputs of other shapes is other work (a
                            // matmul on a microbatch against one on the whole batch): with
                            // shapes recorded, they are told apart as the profiler's
                            // `group_by_input_shape` does.
                            let shapes = match (gemm_shapes, raw_args) {
                                (Some(dims), _) => Some(dims),
                                (None, Some(raw)) if raw.get().contains("Input Dims") => {
                                    EventArgs::Raw(raw)
                                        .parse(name)?
                                        .input_dims
                                        .and_then(shape_key)
                                }
                                _ => None,
                            };
                            let name = match shapes {
                                Some(dims) => self.names.intern(&format!("{name} {dims}")),
                                None => self.names.intern(name),
                            };
                            self.cpu.spans.push(super::cpu_side::CpuSpan {
                                index,
                                name,
                                tid,
                                start,
                                end,
                                annotation: cat == "user_annotation",
                            });
                        } else {
                            self.skip(cat);
                        }
                    }
                    None => self.skip(cat),
                }
                Ok(())
            }
            "" => {
                self.skip("(no cat)");
                Ok(())
            }
            other => {
                self.skip(other);
                Ok(())
            }
        }
    }

    /// Records a host call (see [`super::host_calls`]); a GEMM with its shapes and type,
    /// whose shape key (`[[64,512],[512,512]]`) it returns.
    fn host_call(
        &mut self,
        kind: HostCallKind,
        name: &str,
        ev: &Event<'_>,
        raw_args: Option<&RawValue>,
    ) -> Result<Option<String>, String> {
        let start = required_ts(ev, name)?;
        let end = match optional_dur(ev, name)? {
            Some(d) => add(start, d, name)?,
            None => start,
        };
        let (mut call_name, mut dtype, mut dims) = (name.to_string(), None, None);
        if kind == HostCallKind::Gemm {
            let Some(raw) = raw_args.filter(|r| r.get().contains("Input Dims")) else {
                // Without shapes a GEMM says nothing about its alignment.
                return Ok(None);
            };
            let a = EventArgs::Raw(raw).parse(name)?;
            let Some(key) = a.input_dims.and_then(shape_key) else {
                return Ok(None);
            };
            call_name = format!("{name} {key}");
            dtype = input_dtype_any(&a);
            let flops = flare_model::host_calls::call_shapes(&call_name)
                .and_then(|(op, inputs)| flare_model::host_calls::gemm_of(op, &inputs))
                .and_then(|g| g.flops());
            if let (Some(flops), Some(tid)) = (flops, thread_id(ev)) {
                let call = self.calls.next_index();
                self.gemm_ops.push((tid, start, end, flops, call));
            }
            dims = Some(key);
        }
        self.calls
            .call(kind, call_name, thread_id(ev), (start, end), dtype);
        Ok(dims)
    }

    fn kernel(
        &mut self,
        index: u64,
        name: &str,
        ev: &Event<'_>,
        args: EventArgs<'_>,
    ) -> Result<(), String> {
        let start = required_ts(ev, name)?;
        let end = match optional_dur(ev, name)? {
            Some(d) => Some(add(start, d, name)?),
            None => {
                self.stats.kernels_without_duration += 1;
                None
            }
        };
        let args = args.parse(name)?;
        let correlation = args.correlation.as_ref().and_then(Lenient::as_u64);
        let flops = args
            .flops_upper
            .as_ref()
            .or(args.flops_lower.as_ref())
            .and_then(Lenient::as_u64)
            .unwrap_or(0);
        let nccl = match comm::classify_kernel(name) {
            Some(CommEvent::NcclKernel) => {
                self.stats.nccl_kernels += 1;
                Some(Box::new(nccl_args(&args)))
            }
            Some(CommEvent::OtherKernel(_, Some(kind))) => {
                self.stats.other_comm_kernels += 1;
                let mut a = nccl_args(&args);
                if a.collective.is_none() {
                    a.collective = Some(kind.as_str().to_string());
                }
                Some(Box::new(a))
            }
            Some(CommEvent::OtherKernel(_, None)) => {
                self.stats.other_comm_kernels_unknown += 1;
                None
            }
            _ => None,
        };
        if self.kernels.is_empty() {
            // A GPU trace: its CPU spans are not its compute.
            self.cpu.forget_spans(&mut self.stats.skipped);
        }
        let name = self.names.intern(name);
        self.kernels.push(KernelRec {
            index,
            name,
            start,
            end,
            correlation,
            flops,
            nccl,
            cpu_side: false,
            issue: None,
        });
        self.stats.kernels += 1;
        Ok(())
    }
}

/// Elements of a CPU op's first input (`Input Dims`: `[[1024]]`, or `[[[1024]]]` for a
/// tensor list), when the profiler recorded shapes.
fn input_elements(args: &Args<'_>) -> Option<u64> {
    let dims: serde_json::Value = serde_json::from_str(args.input_dims?.get()).ok()?;
    let mut first = dims.as_array()?.first()?;
    // A tensor list: its first tensor.
    while let Some(inner) = first
        .as_array()
        .and_then(|a| a.first())
        .filter(|v| v.is_array())
    {
        first = inner;
    }
    first
        .as_array()?
        .iter()
        .try_fold(1u64, |n, d| n.checked_mul(d.as_u64()?))
}

/// A CPU op's `Input Dims` as a compact key (`[[16,512],[512,512],[512]]`), when it
/// gives any dimension.
fn shape_key(dims: &RawValue) -> Option<String> {
    let key: String = dims.get().chars().filter(|c| !c.is_whitespace()).collect();
    key.bytes().any(|b| b.is_ascii_digit()).then_some(key)
}

/// The peer of a c10d P2P call, from its arguments' values: c10d's `send(Tensor[] tensors,
/// ProcessGroup process_group, int dstRank, int tag)` and `recv_(..., int srcRank, int
/// tag)` take it third, as the peer's rank in the group. `None` when the profiler did not
/// record it (an empty string: `record_shapes=False` or a version without values).
fn p2p_group_peer(args: &Args<'_>) -> Option<u64> {
    let values: Vec<String> = serde_json::from_str(args.concrete_inputs?.get()).ok()?;
    values.get(2)?.trim().parse().ok()
}

/// The element type of a CPU op's first input, as a dtype name (`float` -> `Float`).
fn input_dtype(args: &Args<'_>) -> Option<String> {
    let types: serde_json::Value = serde_json::from_str(args.input_type?.get()).ok()?;
    names::dtype_of_input_type(types.as_array()?.first()?.as_str()?).map(str::to_string)
}

/// The element type of a CPU op's first tensor input (a GEMM's `addmm` starts with its
/// bias, which may be absent: the first input that has a type).
fn input_dtype_any(args: &Args<'_>) -> Option<&'static str> {
    let types: serde_json::Value = serde_json::from_str(args.input_type?.get()).ok()?;
    types
        .as_array()?
        .iter()
        .find_map(|t| names::dtype_of_input_type(t.as_str()?))
}

/// The collective arguments PyTorch writes (on NCCL kernels, or on `record_param_comms`).
fn nccl_args(args: &Args<'_>) -> NcclArgs {
    let u = |v: &Option<Lenient<'_>>| v.as_ref().and_then(Lenient::as_u64);
    let s = |v: &Option<Lenient<'_>>| v.as_ref().and_then(Lenient::as_name);
    NcclArgs {
        collective: s(&args.collective),
        in_nelems: u(&args.in_nelems),
        group_size: u(&args.group_size),
        dtype: s(&args.dtype),
        pg_name: s(&args.pg_name),
        pg_desc: s(&args.pg_desc),
        pg_ranks: args.pg_ranks.as_ref().and_then(Lenient::as_rank_list),
        seq: u(&args.seq),
        src_rank: u(&args.src_rank),
        dst_rank: u(&args.dst_rank),
        global_start: u(&args.global_start),
        global_stride: u(&args.global_stride),
        group_peer: None,
    }
}

/// A CPU thread id: a number, or a name hashed to one (Chrome traces allow both).
fn thread_id(ev: &Event<'_>) -> Option<u64> {
    let raw = ev.tid?.get().trim();
    raw.parse::<u64>().ok().or_else(|| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        raw.hash(&mut h);
        Some(h.finish())
    })
}

impl NcclArgs {
    /// Nothing that says which collective, how big or on which group.
    fn is_empty(&self) -> bool {
        self.collective.is_none()
            && self.in_nelems.is_none()
            && self.pg_name.is_none()
            && self.pg_ranks.is_none()
    }
}

impl Collector {
    /// The CPU thread and time of the call that launched kernel `k`, where recorded.
    fn launch_of(&self, k: &KernelRec) -> Option<(u64, i64)> {
        match self.launches.get(&k.correlation?) {
            Some(&LaunchRec { ts, tid: Some(tid) }) => Some((tid, ts)),
            _ => None,
        }
    }

    /// Gives NCCL kernels without arguments those of the `record_param_comms` op that
    /// launched them: the innermost one on the launching thread around the launch call.
    fn args_from_param_comms(&mut self) {
        if self.param_comms.is_empty() {
            return;
        }
        let ops = Nested::new(std::mem::take(&mut self.param_comms), |p| (p.0, p.1, p.2));
        for i in 0..self.kernels.len() {
            let k = &self.kernels[i];
            if !k.nccl.as_deref().is_some_and(NcclArgs::is_empty) {
                continue;
            }
            let Some((tid, ts)) = self.launch_of(k) else {
                continue;
            };
            if let Some(op) = ops.around(tid, ts, ts).next() {
                if let Some(args) = self.kernels[i].nccl.as_deref_mut() {
                    *args = ops.get(op).3.clone();
                }
                self.stats.args_from_param_comms += 1;
            }
        }
    }

    /// Links GPU kernels to the GEMM op (`aten::mm`, `aten::addmm`, ... with its input
    /// shapes) that launched them: the innermost GEMM op on the launching thread around
    /// the launch call, when it wraps no other GEMM op (`aten::linear` around `aten::addmm`
    /// launches autocast's casts, not the GEMM). Its longest kernel without `FLOPs` of its
    /// own gets the op's (a bias copy or a split-K reduction beside it does no GEMM's
    /// work), so that a GEMM kernel's achieved TFLOPS can be read; the op's host call gets
    /// all its kernels' device time and its FLOPs, so that each GEMM shape's can.
    fn flops_from_gemm_ops(&mut self) {
        if self.gemm_ops.is_empty() {
            return;
        }
        let ops = Nested::new(std::mem::take(&mut self.gemm_ops), |g| (g.0, g.1, g.2));
        let wraps = ops.holds_others();
        // Per op: its longest kernel without FLOPs (kernel, duration), its kernels' time.
        let mut longest: HashMap<usize, (usize, i64)> = HashMap::new();
        let mut device: HashMap<usize, i64> = HashMap::new();
        for (i, k) in self.kernels.iter().enumerate() {
            if k.nccl.is_some() || k.cpu_side {
                continue;
            }
            let (Some((tid, ts)), Some(end)) = (self.launch_of(k), k.end) else {
                continue;
            };
            let Some(op) = ops.around(tid, ts, ts).next().filter(|&op| !wraps[op]) else {
                continue;
            };
            *device.entry(op).or_default() += end - k.start;
            if k.flops == 0 {
                let e = longest.entry(op).or_insert((i, end - k.start));
                if end - k.start > e.1 {
                    *e = (i, end - k.start);
                }
            }
        }
        for (op, (kernel, _)) in longest {
            self.kernels[kernel].flops = ops.get(op).3;
            self.stats.flops_from_gemm_ops += 1;
        }
        for (op, ns) in device {
            let &(_, _, _, flops, call) = ops.get(op);
            self.calls.device_work(call, ns, flops);
        }
    }
}

fn required_ts(ev: &Event<'_>, name: &str) -> Result<i64, String> {
    let raw = ev.ts.ok_or_else(|| {
        format!("\"{name}\" has no \"ts\": expected a start time in microseconds")
    })?;
    us_to_ns(raw.get())
        .ok_or_else(|| format!("\"{name}\": \"ts\" is {}, expected a number of microseconds that fits in 64-bit nanoseconds", raw.get()))
}

fn optional_dur(ev: &Event<'_>, name: &str) -> Result<Option<i64>, String> {
    let Some(raw) = ev.dur else { return Ok(None) };
    let d = us_to_ns(raw.get()).ok_or_else(|| {
        format!(
            "\"{name}\": \"dur\" is {}, expected a number of microseconds",
            raw.get()
        )
    })?;
    if d < 0 {
        return Err(format!(
            "\"{name}\": \"dur\" is {}, expected a duration of zero or more microseconds",
            raw.get()
        ));
    }
    Ok(Some(d))
}

fn add(start: i64, dur: i64, name: &str) -> Result<i64, String> {
    start
        .checked_add(dur)
        .ok_or_else(|| format!("\"{name}\": ts + dur overflows 64-bit nanoseconds"))
}

/// Converts a JSON number of microseconds, as written, to nanoseconds: exactly when it has
/// at most three decimals, rounded half away from zero otherwise. Accepts a quoted number.
/// `None` for anything that is not a number or does not fit an `i64` of nanoseconds.
pub fn us_to_ns(text: &str) -> Option<i64> {
    let mut s = text.trim();
    if let Some(inner) = s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        s = inner.trim();
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let neg = match bytes.first() {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut mantissa: u128 = 0;
    let mut digits = 0u32;
    let mut frac_digits: i32 = 0;
    let mut seen_point = false;
    let mut any_digit = false;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'0'..=b'9' => {
                any_digit = true;
                if digits < 36 {
                    mantissa = mantissa * 10 + (b - b'0') as u128;
                    if mantissa != 0 {
                        digits += 1;
                    }
                    if seen_point {
                        frac_digits += 1;
                    }
                } else if !seen_point {
                    // Too many integer digits to be a timestamp in nanoseconds.
                    return None;
                }
                // Further fractional digits are below a nanosecond by 17 orders of
                // magnitude at least: ignored.
            }
            b'.' if !seen_point => seen_point = true,
            b'e' | b'E' => break,
            _ => return None,
        }
        i += 1;
    }
    if !any_digit {
        return None;
    }
    let mut exp: i32 = 0;
    if i < bytes.len() {
        // Exponent.
        let e = std::str::from_utf8(&bytes[i + 1..]).ok()?;
        exp = e.parse::<i32>().ok()?;
        if !(-400..=400).contains(&exp) {
            return None;
        }
    }
    // value_ns = mantissa * 10^(3 + exp - frac_digits)
    let scale = 3 + exp - frac_digits;
    let ns: u128 = if scale >= 0 {
        if mantissa == 0 {
            0
        } else {
            let p = 10u128.checked_pow(scale as u32)?;
            mantissa.checked_mul(p)?
        }
    } else {
        let down = (-scale) as u32;
        if down > 38 {
            0
        } else {
            let p = 10u128.pow(down);
            let q = mantissa / p;
            let r = mantissa % p;
            // Half away from zero.
            if r * 2 >= p {
                q + 1
            } else {
                q
            }
        }
    };
    if neg {
        let v = i128::try_from(ns).ok()?.checked_neg()?;
        i64::try_from(v).ok()
    } else {
        i64::try_from(ns).ok()
    }
}

/// The deserialization entry point: a visitor over the top-level object that streams
/// `traceEvents` into the collector.
struct FileSeed<'c> {
    collector: &'c mut Collector,
    dist: &'c mut Option<DistOwned>,
    base_ns: &'c mut Option<i64>,
}

/// The owned parts of `distributedInfo`.
#[derive(Debug, Default)]
struct DistOwned {
    rank: Option<u64>,
    world_size: Option<u64>,
    pg_config: Vec<PgConfig>,
}

impl<'de> DeserializeSeed<'de> for FileSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FileSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(
            "a Kineto trace: a JSON object with \"traceEvents\" (or a JSON array of events)",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match key.0.as_ref() {
                "traceEvents" => {
                    map.next_value_seed(EventsSeed {
                        collector: &mut *self.collector,
                    })?;
                }
                "distributedInfo" => {
                    let d: Option<DistInfo<'de>> = map.next_value()?;
                    if let Some(d) = d {
                        *self.dist = Some(DistOwned {
                            rank: d.rank.as_ref().and_then(Lenient::as_u64),
                            world_size: d.world_size.as_ref().and_then(Lenient::as_u64),
                            pg_config: d
                                .pg_config
                                .map(|l| l.0.iter().map(pg_config_owned).collect())
                                .unwrap_or_default(),
                        });
                    }
                }
                "baseTimeNanoseconds" => {
                    let v: Lenient<'de> = map.next_value()?;
                    *self.base_ns = v.as_i64();
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        EventsSeed {
            collector: self.collector,
        }
        .visit_seq(seq)
    }
}

fn pg_config_owned(p: &PgConfigIn<'_>) -> PgConfig {
    PgConfig {
        name: p
            .pg_name
            .as_ref()
            .and_then(Lenient::as_name)
            .unwrap_or_default(),
        desc: p.pg_desc.as_ref().and_then(Lenient::as_name),
        size: p.pg_size.as_ref().and_then(Lenient::as_u64),
        ranks: p.ranks.as_ref().and_then(Lenient::as_rank_list),
        kind_hint: p.flare_group_kind.as_ref().and_then(Lenient::as_name),
    }
}

struct EventsSeed<'c> {
    collector: &'c mut Collector,
}

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("\"traceEvents\": an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let c = self.collector;
        c.saw_events = true;
        let mut index: u64 = 0;
        while let Some(ev) = seq.next_element::<Event<'de>>()? {
            if let Err(what) = c.event(index, ev) {
                c.problem = Some(EventProblem { index, what });
                return Err(de::Error::custom("invalid trace event"));
            }
            index += 1;
        }
        Ok(())
    }
}

/// Parses one decompressed file.
pub fn parse_file(path: &str, data: &[u8]) -> Result<ParsedFile, KinetoError> {
    let mut collector = Collector {
        names: NameTable::default(),
        steps: Vec::new(),
        kernels: Vec::new(),
        launches: HashMap::new(),
        param_comms: Vec::new(),
        gemm_ops: Vec::new(),
        cpu: Default::default(),
        hosts: Vec::new(),
        calls: HostCallRecords::default(),
        stats: FileStats::default(),
        problem: None,
        saw_events: false,
    };
    let mut dist = None;
    let mut base_ns = None;
    let mut de = serde_json::Deserializer::from_slice(data);
    let result = FileSeed {
        collector: &mut collector,
        dist: &mut dist,
        base_ns: &mut base_ns,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    if let Err(e) = result {
        if let Some(p) = collector.problem.take() {
            return Err(KinetoError::BadEvent {
                path: path.to_string(),
                index: p.index,
                line: e.line(),
                column: e.column(),
                what: p.what,
            });
        }
        return Err(KinetoError::Json {
            path: path.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        });
    }
    if !collector.saw_events {
        return Err(KinetoError::MissingTraceEvents {
            path: path.to_string(),
        });
    }
    let dist = dist.unwrap_or_default();
    let mut c = collector;
    c.args_from_param_comms();
    // before the host calls are counted: it gives GEMM calls their kernels' time
    c.flops_from_gemm_ops();
    c.calls.name_anomaly_checks();
    let call_sites = c.calls.sites(GC_PAUSE);
    // Counted by the file's own steps, before either is shifted by the same base.
    let host_calls = {
        let mut steps = c.steps.clone();
        steps.sort_by_key(|s| s.start);
        let index = StepIndex { steps: &steps };
        std::mem::take(&mut c.calls).counts(|t| index.iteration_at(t))
    };
    if c.kernels.is_empty() {
        c.kernels = std::mem::take(&mut c.cpu).into_kernels(&mut c.stats);
    } else {
        c.cpu.forget_spans(&mut c.stats.skipped);
    }
    if let Some(base) = base_ns.filter(|&b| b != 0) {
        let shift = |t: i64| -> Result<i64, KinetoError> {
            t.checked_add(base).ok_or_else(|| KinetoError::Invalid {
                path: path.to_string(),
                what: format!(
                    "baseTimeNanoseconds {base} plus an event time of {t} ns overflows 64-bit nanoseconds"
                ),
            })
        };
        for s in &mut c.steps {
            s.start = shift(s.start)?;
            if let Some(e) = s.end.as_mut() {
                *e = shift(*e)?;
            }
        }
        for k in &mut c.kernels {
            k.start = shift(k.start)?;
            if let Some(e) = k.end.as_mut() {
                *e = shift(*e)?;
            }
            if let Some(i) = k.issue.as_mut() {
                *i = shift(*i)?;
            }
        }
        for h in &mut c.hosts {
            h.start = shift(h.start)?;
            h.end = shift(h.end)?;
        }
        for l in c.launches.values_mut() {
            l.ts = shift(l.ts)?;
        }
    }
    Ok(ParsedFile {
        path: path.to_string(),
        rank: dist.rank,
        world_size: dist.world_size,
        pg_config: dist.pg_config,
        names: c.names,
        steps: c.steps,
        kernels: c.kernels,
        launches: c.launches,
        hosts: c.hosts,
        host_calls,
        call_sites,
        stats: c.stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_without_args_take_those_of_the_record_param_comms_that_launched_them() {
        // An older PyTorch trace: the NCCL kernel names its collective only by its kernel
        // name; `record_param_comms` around the launch holds the arguments. The second
        // kernel's launch is outside any record_param_comms: it stays without arguments.
        let json = br#"{"traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7, "ts": 200, "dur": 30, "args": {"correlation": 7, "stream": 7}},
          {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 0, "tid": 1, "ts": 100, "dur": 50,
           "args": {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "dtype": "Float",
                    "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}},
          {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 0, "tid": 2, "ts": 100, "dur": 500,
           "args": {"Collective name": "broadcast", "In msg nelems": 8, "Group size": 2, "dtype": "Float"}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, "ts": 120, "dur": 5, "args": {"correlation": 7}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, "ts": 300, "dur": 5, "args": {"correlation": 9}},
          {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7, "ts": 400, "dur": 30, "args": {"correlation": 9}}
        ]}"#;
        let f = parse_file("old.json", json).unwrap();
        let first = f.kernels[0].nccl.as_deref().unwrap();
        assert_eq!(first.collective.as_deref(), Some("allreduce"));
        assert_eq!(first.in_nelems, Some(1024));
        assert_eq!(first.pg_name.as_deref(), Some("0"));
        let second = f.kernels[1].nccl.as_deref().unwrap();
        assert!(
            second.is_empty(),
            "the broadcast on another thread is not its launcher"
        );
        assert_eq!(f.stats.args_from_param_comms, 1);
    }

    #[test]
    fn microseconds_convert_exactly() {
        for (text, ns) in [
            ("0", Some(0)),
            ("1", Some(1000)),
            ("1.5", Some(1500)),
            ("4458677009853.422", Some(4_458_677_009_853_422)),
            ("1682725898236567", Some(1_682_725_898_236_567_000)),
            ("-2.001", Some(-2001)),
            ("0.0004", Some(0)),
            ("0.0005", Some(1)),
            ("-0.0005", Some(-1)),
            ("1e3", Some(1_000_000)),
            ("1.5E-3", Some(2)),
            ("\"12.345\"", Some(12_345)),
            ("1682725898236567.25", Some(1_682_725_898_236_567_250)),
            ("9223372036854775.807", Some(i64::MAX)),
            ("9223372036854775.808", None),
            ("-9223372036854775.808", Some(i64::MIN)),
            ("abc", None),
            ("", None),
            ("-", None),
            ("1.2.3", None),
            ("null", None),
            ("true", None),
            ("1e999999", None),
        ] {
            assert_eq!(us_to_ns(text), ns, "{text}");
        }
    }
}
