//! `flare._native`: the Python bindings of Flare's in-process tracer.
//!
//! A thin layer over `flare_tracer`'s process-wide tracer: the recording calls (`begin`,
//! `end`, `step`, `counter`, and the [`Span`] context manager) convert their arguments and
//! make one call into the tracer, which copies 48 bytes into the calling thread's ring.
//! The pure-Python package `flare` builds the user-facing API and the framework hooks on
//! top of this module.
//!
//! Two rules hold everywhere: Rust errors become Python exceptions carrying the tracer's
//! message (`ValueError` for configuration and file-format problems, `OSError` with the
//! errno for I/O), and nothing here panics on input from Python.
//!
//! The module also exports Flare's C ABI (`flare_*`, from `flare-capi`): `flare.init()`
//! points `FLARE_LIBRARY` at this module, so the NCCL profiler plugin that NCCL loads into
//! the same process records into this tracer instead of starting a second one.
//!
//! After `fork()` the child would share the parent's rings, which have exactly one
//! producer each; a `pthread_atfork` handler therefore turns recording off in children
//! (the tracer is one per process and cannot be re-created there).

// Linked for its exported `flare_*` C functions (see the module docs).
use flare as _;
use flare_model::{OpKind, StartupPhase};
use flare_tracer::{
    Assembler, Config, Event, Item, NameId, OpenSpan, RingFile, SpanArgs, Tag, TracerError,
};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Set in a child process after `fork()`: recording is off there (see the module docs).
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Registers the fork handler once; the result is remembered so every `init` reports it.
fn register_fork_handler() -> PyResult<()> {
    static REGISTERED: OnceLock<i32> = OnceLock::new();
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe and valid
    // in a freshly forked child.
    let rc = *REGISTERED
        .get_or_init(|| unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) });
    if rc == 0 {
        Ok(())
    } else {
        Err(PyOSError::new_err((
            rc,
            format!(
                "pthread_atfork failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ),
        )))
    }
}

/// Whether this process may record: false in a forked child.
#[inline]
fn recording() -> bool {
    !FORKED.load(Ordering::Relaxed)
}

/// Maps a tracer error onto the Python exception a caller would expect.
fn to_py_err(e: TracerError) -> PyErr {
    let message = e.to_string();
    match e {
        TracerError::Config(_) | TracerError::Format { .. } => PyValueError::new_err(message),
        TracerError::AlreadyInitialized(_) => PyRuntimeError::new_err(message),
        TracerError::Io { path, source } => match source.raw_os_error() {
            // OSError(errno, strerror, filename) picks the matching subclass
            // (FileNotFoundError, PermissionError, ...), as Python's own I/O does.
            Some(code) => {
                let strerror = source.to_string();
                let strerror = strerror
                    .strip_suffix(&format!(" (os error {code})"))
                    .unwrap_or(&strerror)
                    .to_string();
                PyOSError::new_err((code, strerror, path.into_os_string()))
            }
            None => PyOSError::new_err(message),
        },
    }
}

/// The names of op kinds as the Python API spells them: `OpKind::as_str`, plus the
/// model's serde names where they differ (`garbage_collection`, `data_loader`, ...).
fn kind_from_str(s: &str) -> Option<OpKind> {
    OpKind::ALL
        .iter()
        .copied()
        .find(|k| k.as_str() == s)
        .or(match s {
            "data_loader" => Some(OpKind::DataLoader),
            "garbage_collection" => Some(OpKind::GarbageCollection),
            "host_other" => Some(OpKind::HostOther),
            _ => None,
        })
}

fn unknown_kind(what: impl std::fmt::Display) -> PyErr {
    let names: Vec<&str> = OpKind::ALL.iter().map(|k| k.as_str()).collect();
    PyValueError::new_err(format!(
        "unknown span kind {what}; expected one of: {}",
        names.join(", ")
    ))
}

fn kind_from_u8(v: u8) -> PyResult<OpKind> {
    OpKind::from_u8(v).ok_or_else(|| unknown_kind(v))
}

/// A kind given as its name or its number.
fn kind_from_py(obj: &Bound<'_, PyAny>) -> PyResult<OpKind> {
    if let Ok(s) = obj.extract::<String>() {
        return kind_from_str(&s).ok_or_else(|| unknown_kind(format!("{s:?}")));
    }
    match obj.extract::<i64>() {
        Ok(v) => u8::try_from(v)
            .map_err(|_| unknown_kind(v))
            .and_then(kind_from_u8),
        Err(_) => Err(unknown_kind(format!(
            "of type {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))),
    }
}

/// An unsigned 64-bit value, with errors that name what it is: `TypeError` for a
/// non-integer, `ValueError` for an integer out of range.
fn u64_arg(what: &str, obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|_| {
        if !obj.is_instance_of::<PyInt>() {
            let ty = obj
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into());
            return PyTypeError::new_err(format!("{what} must be an int, got {ty}"));
        }
        let shown = obj
            .repr()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| "?".into());
        PyValueError::new_err(format!(
            "{what} must be an integer in 0..2**64, got {shown}"
        ))
    })
}

/// Interns `name` unless recording is off; 0 (no name) when the tracer is not initialized.
fn intern_now(name: &str) -> u32 {
    if recording() {
        flare_tracer::intern(name).0
    } else {
        0
    }
}

/// Async span ids from Python carry "PY" in their top 16 bits, as the NCCL profiler
/// plugin's carry "NC": producers sharing the process's file never reuse each other's ids.
const PY_ASYNC_TAG: u64 = 0x5059 << 48;

fn next_async_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    PY_ASYNC_TAG | (NEXT.fetch_add(1, Ordering::Relaxed) & ((1 << 48) - 1))
}

fn record_async(tag: Tag, name: NameId, kind: OpKind, id: u64, args: SpanArgs) {
    let (a, b, c) = args.pack();
    flare_tracer::record(&Event {
        ts_ns: flare_tracer::clock::now_ns(),
        name: name.0,
        tag: tag as u8,
        kind: kind as u8,
        flags: 0,
        id,
        a,
        b,
        c,
    });
}

/// A reusable span: `with span: ...` records a begin and an end on the current thread.
///
/// The object holds no per-use state, so one instance may be entered many times, nested
/// and from several threads at once. Names are interned on first use after `init`
/// (spans created at import time, before `init`, work once the tracer exists).
#[pyclass(frozen, subclass, module = "flare._native")]
struct Span {
    name: String,
    kind: OpKind,
    amount: u64,
    group: Option<String>,
    seq: u32,
    group_size: u32,
    /// The interned name; 0 until the tracer exists.
    name_id: AtomicU32,
    group_id: AtomicU32,
}

impl Span {
    #[inline]
    fn resolve(cell: &AtomicU32, name: &str) -> NameId {
        let id = cell.load(Ordering::Relaxed);
        if id != 0 {
            return NameId(id);
        }
        // Racing threads intern the same name to the same id: the store is idempotent.
        let id = intern_now(name);
        cell.store(id, Ordering::Relaxed);
        NameId(id)
    }

    #[inline]
    fn open(&self) {
        if !recording() {
            return;
        }
        let name = Span::resolve(&self.name_id, &self.name);
        let group = match &self.group {
            Some(g) => Span::resolve(&self.group_id, g),
            None => NameId::NONE,
        };
        flare_tracer::begin(name, self.kind, &self.args(group));
    }

    #[inline]
    fn args(&self, group: NameId) -> SpanArgs {
        SpanArgs {
            amount: self.amount,
            group,
            seq: self.seq,
            group_size: self.group_size,
            issue_latency_ns: 0,
        }
    }

    #[inline]
    fn close(&self) {
        if !recording() {
            return;
        }
        let name = Span::resolve(&self.name_id, &self.name);
        flare_tracer::end(name, self.kind);
    }
}

#[pymethods]
impl Span {
    #[new]
    #[pyo3(signature = (name, kind = None, *, amount = 0, group = None, seq = 0, group_size = 0))]
    fn new(
        name: String,
        kind: Option<&Bound<'_, PyAny>>,
        amount: u64,
        group: Option<String>,
        seq: u32,
        group_size: u32,
    ) -> PyResult<Self> {
        let kind = match kind {
            Some(k) => kind_from_py(k)?,
            None => OpKind::Compute,
        };
        Ok(Span {
            name,
            kind,
            amount,
            group,
            seq,
            group_size,
            name_id: AtomicU32::new(0),
            group_id: AtomicU32::new(0),
        })
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>) -> Bound<'py, Self> {
        slf.get().open();
        slf.clone()
    }

    /// Closes the span whether or not the block raised; never suppresses the exception.
    fn __exit__(
        &self,
        _exc_type: &Bound<'_, PyAny>,
        _exc: &Bound<'_, PyAny>,
        _traceback: &Bound<'_, PyAny>,
    ) {
        self.close();
    }

    /// Opens the span as an async span (one that may overlap others on the same thread,
    /// as coroutines do) and returns the id that `end_async` takes.
    fn begin_async(&self) -> u64 {
        let id = next_async_id();
        if recording() {
            let name = Span::resolve(&self.name_id, &self.name);
            let group = match &self.group {
                Some(g) => Span::resolve(&self.group_id, g),
                None => NameId::NONE,
            };
            record_async(Tag::AsyncBegin, name, self.kind, id, self.args(group));
        }
        id
    }

    /// Closes the async span `id` (from any thread).
    fn end_async(&self, id: u64) {
        if recording() {
            let name = Span::resolve(&self.name_id, &self.name);
            record_async(Tag::AsyncEnd, name, self.kind, id, SpanArgs::default());
        }
    }

    /// Records the begin event (for callers that cannot use `with`).
    fn begin(&self) {
        self.open();
    }

    /// Records the end event.
    fn end(&self) {
        self.close();
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    #[getter]
    fn kind(&self) -> &'static str {
        self.kind.as_str()
    }

    #[getter]
    fn amount(&self) -> u64 {
        self.amount
    }

    #[getter]
    fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    #[getter]
    fn seq(&self) -> u32 {
        self.seq
    }

    #[getter]
    fn group_size(&self) -> u32 {
        self.group_size
    }

    fn __repr__(&self) -> String {
        format!("flare.Span({:?}, kind={:?})", self.name, self.kind.as_str())
    }
}

/// A config override as the environment string `Config::from_lookup` parses.
fn count_override(name: &str, v: Option<i64>) -> PyResult<Option<String>> {
    match v {
        None => Ok(None),
        Some(v) if (0..=u32::MAX as i64).contains(&v) => Ok(Some(v.to_string())),
        Some(v) => Err(PyValueError::new_err(format!(
            "{name}={v} is not a non-negative 32-bit integer"
        ))),
    }
}

/// Starts the process's tracer and returns the path of its shared-memory ring file.
///
/// The launcher's environment is read first (torchrun, Slurm, Open MPI, `FLARE_*`);
/// keyword arguments take precedence over it. Idempotent for the same identity; a
/// second call with a different identity raises `RuntimeError`.
#[pyfunction]
#[pyo3(signature = (*, job_id = None, rank = None, local_rank = None, world_size = None,
                    shm_dir = None, dump = None, ring_events = None, max_threads = None))]
#[allow(clippy::too_many_arguments)] // mirrors the Python keyword arguments one to one
fn init(
    py: Python<'_>,
    job_id: Option<String>,
    rank: Option<i64>,
    local_rank: Option<i64>,
    world_size: Option<i64>,
    shm_dir: Option<PathBuf>,
    dump: Option<PathBuf>,
    ring_events: Option<i64>,
    max_threads: Option<i64>,
) -> PyResult<OsString> {
    if !recording() {
        return Err(PyRuntimeError::new_err(
            "flare: the tracer cannot be initialized in a forked child process \
             (it belongs to the parent); start children with the 'spawn' method to trace them",
        ));
    }
    // Overrides enter through the keys Config reads first, so precedence and the
    // validation messages stay those of the environment path.
    let mut over: HashMap<&'static str, String> = HashMap::new();
    for (key, value) in [
        ("RANK", count_override("rank", rank)?),
        ("LOCAL_RANK", count_override("local_rank", local_rank)?),
        ("WORLD_SIZE", count_override("world_size", world_size)?),
        (
            "FLARE_RING_EVENTS",
            count_override("ring_events", ring_events)?,
        ),
        (
            "FLARE_MAX_THREADS",
            count_override("max_threads", max_threads)?,
        ),
        ("FLARE_JOB_ID", job_id),
    ] {
        if let Some(v) = value {
            over.insert(key, v);
        }
    }
    let mut config =
        Config::from_lookup(|k| over.get(k).cloned().or_else(|| std::env::var(k).ok()))
            .map_err(to_py_err)?;
    if let Some(dir) = shm_dir {
        config.shm_dir = dir;
    }
    if let Some(d) = dump {
        // An empty path turns off a dump requested by FLARE_DUMP.
        config.dump_path = (!d.as_os_str().is_empty()).then_some(d);
    }
    register_fork_handler()?;
    let path = py
        .detach(move || flare_tracer::init(config))
        .map_err(to_py_err)?;
    Ok(path.into_os_string())
}

/// Whether `init` succeeded in this process (false in a forked child).
#[pyfunction]
fn is_initialized() -> bool {
    recording() && flare_tracer::is_initialized()
}

/// Interns a name in the ring file's name table; 0 before `init`. Takes a lock: call it
/// once per name and keep the id.
#[pyfunction]
fn intern(name: &str) -> u32 {
    intern_now(name)
}

/// Opens a nested span on the calling thread.
#[pyfunction]
#[pyo3(signature = (name_id, kind, amount = 0, group = 0, seq = 0, group_size = 0))]
fn begin(
    name_id: u32,
    kind: u8,
    amount: u64,
    group: u32,
    seq: u32,
    group_size: u32,
) -> PyResult<()> {
    let kind = kind_from_u8(kind)?;
    if recording() {
        flare_tracer::begin(
            NameId(name_id),
            kind,
            &SpanArgs {
                amount,
                group: NameId(group),
                seq,
                group_size,
                issue_latency_ns: 0,
            },
        );
    }
    Ok(())
}

/// Closes the innermost open span with this name on the calling thread.
#[pyfunction]
fn end(name_id: u32, kind: u8) -> PyResult<()> {
    let kind = kind_from_u8(kind)?;
    if recording() {
        flare_tracer::end(NameId(name_id), kind);
    }
    Ok(())
}

/// Marks the start of iteration `n`.
#[pyfunction]
fn step(n: &Bound<'_, PyAny>) -> PyResult<()> {
    let n = u64_arg("step", n)?;
    if recording() {
        flare_tracer::step(n);
    }
    Ok(())
}

/// Records a counter sample.
#[pyfunction]
fn counter(name_id: u32, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let value = u64_arg("counter value", value)?;
    if recording() {
        flare_tracer::counter(NameId(name_id), value);
    }
    Ok(())
}

/// The start-up phase named `phase` (one of `STARTUP_PHASES`).
fn startup_phase(phase: &str) -> PyResult<StartupPhase> {
    StartupPhase::parse(phase).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown start-up phase {phase:?}; expected one of: {}",
            StartupPhase::ALL
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

fn record_startup(tag: Tag, phase: StartupPhase, name_id: u32, id: u64, ts_ns: u64) {
    flare_tracer::record(&flare_tracer::startup::event(
        tag,
        phase,
        NameId(name_id),
        id,
        ts_ns,
    ));
}

/// Opens start-up phase `phase` now (`name_id`: the program's name for a `custom` one)
/// and returns the id that `startup_end` takes.
#[pyfunction]
#[pyo3(signature = (phase, name_id = 0))]
fn startup_begin(phase: &str, name_id: u32) -> PyResult<u64> {
    let phase = startup_phase(phase)?;
    let id = next_async_id();
    if recording() {
        record_startup(
            Tag::AsyncBegin,
            phase,
            name_id,
            id,
            flare_tracer::clock::now_ns(),
        );
    }
    Ok(id)
}

/// Closes start-up phase `id` now (from any thread).
#[pyfunction]
#[pyo3(signature = (phase, id, name_id = 0))]
fn startup_end(phase: &str, id: u64, name_id: u32) -> PyResult<()> {
    let phase = startup_phase(phase)?;
    if recording() {
        record_startup(
            Tag::AsyncEnd,
            phase,
            name_id,
            id,
            flare_tracer::clock::now_ns(),
        );
    }
    Ok(())
}

/// Records a whole start-up phase after the fact, from `start_ns` to `end_ns`
/// (`CLOCK_MONOTONIC`, as `now_ns`).
#[pyfunction]
#[pyo3(signature = (phase, start_ns, end_ns, name_id = 0))]
fn startup_span(phase: &str, start_ns: u64, end_ns: u64, name_id: u32) -> PyResult<()> {
    let phase = startup_phase(phase)?;
    if end_ns < start_ns {
        return Err(PyValueError::new_err(format!(
            "a start-up phase cannot end ({end_ns}) before it starts ({start_ns})"
        )));
    }
    if recording() {
        let id = next_async_id();
        record_startup(Tag::AsyncBegin, phase, name_id, id, start_ns);
        record_startup(Tag::AsyncEnd, phase, name_id, id, end_ns);
    }
    Ok(())
}

/// When this process started, on the clock of `now_ns`; `None` where `/proc` does not
/// say.
#[pyfunction]
fn process_start_ns() -> Option<u64> {
    flare_tracer::clock::process_start_ns()
}

/// `CLOCK_MONOTONIC` nanoseconds: the clock of every recorded event.
#[pyfunction]
fn now_ns() -> u64 {
    flare_tracer::clock::now_ns()
}

/// What the tracer did so far: events written and dropped, rings claimed.
#[pyfunction]
fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = flare_tracer::stats();
    let d = PyDict::new(py);
    d.set_item("initialized", flare_tracer::is_initialized())?;
    d.set_item("recording", recording() && flare_tracer::is_initialized())?;
    d.set_item("written", s.written)?;
    d.set_item("dropped_full", s.dropped_full)?;
    d.set_item("dropped_no_ring", s.dropped_no_ring)?;
    d.set_item("dropped", s.dropped_full + s.dropped_no_ring)?;
    d.set_item("rings_in_use", s.rings_in_use)?;
    Ok(d)
}

/// The ring file's path, or None before `init`.
#[pyfunction]
fn ring_path() -> Option<OsString> {
    flare_tracer::ring_path().map(PathBuf::into_os_string)
}

/// Ends tracing: marks the file exited, writes the dump if one was configured (returns
/// its path) and removes the ring file unless an agent collects it. Later calls, and
/// calls in a forked child, do nothing and return None.
#[pyfunction]
fn shutdown(py: Python<'_>) -> PyResult<Option<OsString>> {
    if !recording() {
        return Ok(None);
    }
    let dumped = py.detach(flare_tracer::shutdown).map_err(to_py_err)?;
    Ok(dumped.map(PathBuf::into_os_string))
}

/// Tracer files in `directory`, optionally of one job only.
#[pyfunction]
#[pyo3(signature = (directory, job_id = None))]
fn discover(directory: PathBuf, job_id: Option<String>) -> PyResult<Vec<OsString>> {
    let found = flare_tracer::discover(&directory, job_id.as_deref()).map_err(|e| {
        to_py_err(TracerError::Io {
            path: directory,
            source: e,
        })
    })?;
    Ok(found.into_iter().map(PathBuf::into_os_string).collect())
}

/// Everything `read_ring` returns, gathered without the GIL.
struct Snapshot {
    path: PathBuf,
    info: flare_tracer::ProcessInfo,
    exited: bool,
    alive: bool,
    drops: flare_tracer::Drops,
    events: usize,
    items: Vec<Item>,
    open: Vec<OpenSpan>,
    names: HashMap<u32, String>,
    threads: Vec<(u32, u32, String)>,
    unmatched_ends: u64,
    unclosed_begins: u64,
    /// Start-up phases: (phase, custom name, start, end), in start order.
    startup: Vec<(StartupPhase, Option<String>, u64, Option<u64>)>,
}

impl Snapshot {
    fn take(path: &Path) -> Result<Snapshot, TracerError> {
        let mut file = RingFile::open(path)?;
        let mut events = Vec::new();
        let n = file.drain(&mut events);
        let mut asm = Assembler::new();
        let mut items = Vec::with_capacity(n);
        let mut startup = Vec::new();
        let mut open_phases: HashMap<u64, usize> = HashMap::new();
        for e in &events {
            // Start-up phases are not spans of the program's work: read apart.
            if let Some(phase) = flare_tracer::startup::phase_of(&e.event) {
                if e.event.tag == Tag::AsyncBegin as u8 {
                    let name = (e.event.name != 0).then(|| file.name_or(NameId(e.event.name)));
                    open_phases.insert(e.event.id, startup.len());
                    startup.push((phase, name, e.event.ts_ns, None));
                } else if let Some(i) = open_phases.remove(&e.event.id) {
                    startup[i].3 = Some(e.event.ts_ns);
                }
                continue;
            }
            asm.feed(e.ring, &e.event, &mut items);
        }
        startup.sort_by_key(|p| p.2);
        let open = asm.open_spans();
        // Every name an item refers to, resolved once.
        let mut names = HashMap::new();
        let mut want = |id: NameId| {
            names.entry(id.0).or_insert_with(|| file.name_or(id));
        };
        for it in &items {
            match it {
                Item::Span(s) => {
                    want(s.name);
                    want(s.args.group);
                }
                Item::Counter { name, .. } | Item::Instant { name, .. } => want(*name),
                Item::Step { .. } => {}
            }
        }
        for o in &open {
            want(o.name);
            want(o.args.group);
        }
        let mut rings: Vec<u32> = events.iter().map(|e| e.ring).collect();
        rings.sort_unstable();
        rings.dedup();
        let threads = rings
            .into_iter()
            .map(|r| {
                let (tid, name) = file.thread(r);
                (r, tid, name)
            })
            .collect();
        // Spans come out in end order; start order reads naturally (parents first).
        items.sort_by_key(|it| match it {
            Item::Span(s) => (s.start_ns, s.depth),
            Item::Step { ts_ns, .. }
            | Item::Counter { ts_ns, .. }
            | Item::Instant { ts_ns, .. } => (*ts_ns, 0),
        });
        Ok(Snapshot {
            path: path.to_path_buf(),
            info: file.info().clone(),
            exited: file.exited(),
            alive: file.process_alive(),
            drops: file.drops(),
            events: n,
            items,
            open,
            names,
            threads,
            unmatched_ends: asm.unmatched_ends,
            unclosed_begins: asm.unclosed_begins,
            startup,
        })
    }

    fn name(&self, id: NameId) -> &str {
        self.names.get(&id.0).map(String::as_str).unwrap_or("")
    }

    fn group(&self, id: NameId) -> Option<&str> {
        (id != NameId::NONE).then(|| self.name(id))
    }

    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = PyDict::new(py);
        info.set_item("path", self.path.as_os_str())?;
        info.set_item("job_id", &self.info.job_id)?;
        info.set_item("rank", self.info.rank)?;
        info.set_item("local_rank", self.info.local_rank)?;
        info.set_item("world_size", self.info.world_size)?;
        info.set_item("pid", self.info.pid)?;
        info.set_item("anchor_mono_ns", self.info.anchor_mono_ns)?;
        info.set_item("anchor_unix_ns", self.info.anchor_unix_ns)?;
        info.set_item("max_rings", self.info.max_rings)?;
        info.set_item("ring_capacity", self.info.ring_capacity)?;
        info.set_item("exited", self.exited)?;
        info.set_item("process_alive", self.alive)?;

        let spans = PyList::empty(py);
        let steps = PyList::empty(py);
        let counters = PyList::empty(py);
        let instants = PyList::empty(py);
        for it in &self.items {
            match *it {
                Item::Span(s) => {
                    let d = PyDict::new(py);
                    d.set_item("name", self.name(s.name))?;
                    d.set_item("kind", s.kind.as_str())?;
                    d.set_item("start_ns", s.start_ns)?;
                    d.set_item("end_ns", s.end_ns)?;
                    d.set_item("duration_ns", s.duration_ns())?;
                    d.set_item("depth", s.depth)?;
                    d.set_item("bytes", s.args.amount)?;
                    d.set_item("group", self.group(s.args.group))?;
                    d.set_item("group_size", s.args.group_size)?;
                    d.set_item("seq", s.args.seq)?;
                    d.set_item("ring", s.ring)?;
                    d.set_item("async_id", s.async_id)?;
                    spans.append(d)?;
                }
                Item::Step { ring, step, ts_ns } => {
                    let d = PyDict::new(py);
                    d.set_item("step", step)?;
                    d.set_item("ts_ns", ts_ns)?;
                    d.set_item("ring", ring)?;
                    steps.append(d)?;
                }
                Item::Counter {
                    ring,
                    name,
                    value,
                    ts_ns,
                } => {
                    let d = PyDict::new(py);
                    d.set_item("name", self.name(name))?;
                    d.set_item("value", value)?;
                    d.set_item("ts_ns", ts_ns)?;
                    d.set_item("ring", ring)?;
                    counters.append(d)?;
                }
                Item::Instant { ring, name, ts_ns } => {
                    let d = PyDict::new(py);
                    d.set_item("name", self.name(name))?;
                    d.set_item("ts_ns", ts_ns)?;
                    d.set_item("ring", ring)?;
                    instants.append(d)?;
                }
            }
        }
        let startup = PyList::empty(py);
        for (phase, name, start, end) in &self.startup {
            let d = PyDict::new(py);
            d.set_item("phase", phase.as_str())?;
            d.set_item("name", name)?;
            d.set_item("start_ns", start)?;
            d.set_item("end_ns", end)?;
            startup.append(d)?;
        }
        let open = PyList::empty(py);
        for o in &self.open {
            let d = PyDict::new(py);
            d.set_item("name", self.name(o.name))?;
            d.set_item("kind", o.kind.as_str())?;
            d.set_item("start_ns", o.start_ns)?;
            d.set_item("last_progress_ns", o.last_progress_ns)?;
            d.set_item("depth", o.depth)?;
            d.set_item("bytes", o.args.amount)?;
            d.set_item("group", self.group(o.args.group))?;
            d.set_item("group_size", o.args.group_size)?;
            d.set_item("seq", o.args.seq)?;
            d.set_item("ring", o.ring)?;
            d.set_item("async_id", o.async_id)?;
            open.append(d)?;
        }
        let threads = PyList::empty(py);
        for (ring, tid, name) in &self.threads {
            let d = PyDict::new(py);
            d.set_item("ring", ring)?;
            d.set_item("tid", tid)?;
            d.set_item("name", name)?;
            threads.append(d)?;
        }
        let drops = PyDict::new(py);
        drops.set_item("ring_full", self.drops.ring_full)?;
        drops.set_item("no_ring", self.drops.no_ring)?;
        drops.set_item("total", self.drops.total())?;

        let out = PyDict::new(py);
        out.set_item("info", info)?;
        out.set_item("events", self.events)?;
        out.set_item("spans", spans)?;
        out.set_item("steps", steps)?;
        out.set_item("counters", counters)?;
        out.set_item("instants", instants)?;
        out.set_item("open_spans", open)?;
        out.set_item("startup", startup)?;
        out.set_item("threads", threads)?;
        out.set_item("drops", drops)?;
        out.set_item("unmatched_ends", self.unmatched_ends)?;
        out.set_item("unclosed_begins", self.unclosed_begins)?;
        Ok(out)
    }
}

/// Reads a ring file (live, or a dump written at shutdown): the writer's identity, the
/// spans paired from begin/end events, steps, counters, spans still open, and drops.
///
/// Reading consumes: the events returned are marked read in the file, as the node agent
/// does, so a second read returns only events recorded since.
#[pyfunction]
fn read_ring<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let snap = py
        .detach(move || Snapshot::take(&path))
        .map_err(to_py_err)?;
    snap.to_py(py)
}

/// The name of an op kind number (`KINDS` maps the other way).
#[pyfunction]
fn kind_name(kind: u8) -> PyResult<&'static str> {
    Ok(kind_from_u8(kind)?.as_str())
}

/// Flare's in-process tracer (native part of the `flare` package).
#[pymodule]
#[pyo3(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Span>()?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(intern, m)?)?;
    m.add_function(wrap_pyfunction!(begin, m)?)?;
    m.add_function(wrap_pyfunction!(end, m)?)?;
    m.add_function(wrap_pyfunction!(step, m)?)?;
    m.add_function(wrap_pyfunction!(counter, m)?)?;
    m.add_function(wrap_pyfunction!(now_ns, m)?)?;
    m.add_function(wrap_pyfunction!(startup_begin, m)?)?;
    m.add_function(wrap_pyfunction!(startup_end, m)?)?;
    m.add_function(wrap_pyfunction!(startup_span, m)?)?;
    m.add_function(wrap_pyfunction!(process_start_ns, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(ring_path, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(discover, m)?)?;
    m.add_function(wrap_pyfunction!(read_ring, m)?)?;
    m.add_function(wrap_pyfunction!(kind_name, m)?)?;
    let kinds = PyDict::new(m.py());
    for k in OpKind::ALL {
        kinds.set_item(k.as_str(), k as u8)?;
    }
    m.add("KINDS", kinds)?;
    let phases: Vec<&str> = StartupPhase::ALL.iter().map(|p| p.as_str()).collect();
    m.add("STARTUP_PHASES", phases)?;
    m.add("DEFAULT_SHM_DIR", flare_tracer::DEFAULT_SHM_DIR)?;
    Ok(())
}
