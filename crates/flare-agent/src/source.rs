//! One traced process: its mapped tracer file, the span assembler fed from its rings, and
//! its per-window accumulators.

use crate::inspector::InspectorRecord;
use crate::nccl::{Ended, NcclTracker, OpDone};
use crate::procfs;
use crate::stacks::RingStack;
use crate::startup::StartupTracker;
use crate::window::{add_to, OpAcc, RankWindow, Windows};
use flare_model::{
    CommMembership, HangRecord, IterationSample, ParallelConfig, PeerStacks, StalledLink,
    SteppingTime,
};
use flare_tracer::{Assembler, Item, NameId, OpenSpan, ProcessInfo, RingEvent, RingFile, Span};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// What the collector knows at this poll, shared by every source.
#[derive(Clone, Copy, Debug)]
pub struct PollCtx {
    pub windows: Windows,
    /// The oldest window still open; earlier ones were emitted.
    pub open_from: u64,
    /// `CLOCK_MONOTONIC` now (the clock the tracer stamps events with).
    pub now_mono: u64,
    pub grace_ns: u64,
    pub max_exact: usize,
    /// Events before this (Unix ns) are not summarised (the agent's backlog horizon).
    pub horizon_unix: u64,
    /// Whether NCCL operations are kept as Inspector records (`--inspector-out`).
    pub inspector: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainStats {
    pub events: u64,
    /// Events or spans that fell into windows already emitted (or implausibly far ahead).
    pub late: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    Alive,
    /// The process called the tracer's shutdown.
    Exited,
    /// The process is gone (crashed, killed, or its pid now belongs to another process).
    Dead,
}

/// A name from the file's table, cached once resolved (the file may be gone when a
/// window closes). Unresolved ids are not cached: an id may be published after its use.
fn resolve(file: Option<&RingFile>, cache: &mut HashMap<NameId, String>, id: NameId) -> String {
    if let Some(n) = cache.get(&id) {
        return n.clone();
    }
    match file {
        Some(f) => match f.name(id) {
            Some(n) => {
                cache.insert(id, n.to_string());
                n.to_string()
            }
            None => f.name_or(id),
        },
        None => format!("<name {}>", id.0),
    }
}

/// Identifies an open span across polls, so the watchdog reports it once.
type SpanKey = (u32, u64, u64, u32);

fn span_key(o: &OpenSpan) -> SpanKey {
    (o.ring, o.start_ns, o.async_id, o.name.0)
}

/// Which of a window's time unions a span adds to.
#[derive(Clone, Copy)]
enum Busy {
    /// Any top-level span.
    Any,
    /// A collective or P2P span, at any depth.
    Sync,
}

pub struct Source {
    pub path: PathBuf,
    file: Option<RingFile>,
    pub info: ProcessInfo,
    asm: Assembler,
    events: Vec<RingEvent>,
    items: Vec<Item>,
    /// Each ring's owner at the last drain; a new owner means a reused ring.
    ring_tids: Vec<u32>,
    /// Per ring: the last step marker (step, Unix ns), closed by the next one.
    last_step: HashMap<u32, (u64, u64)>,
    pub windows: BTreeMap<u64, RankWindow>,
    observed_from: Option<u64>,
    pub observed_to: u64,
    pub dropped_total: u64,
    /// Agent monotonic time of the last drain that returned events.
    last_activity_mono: u64,
    fired: HashSet<SpanKey>,
    /// Names resolved once per id (the file may be gone when a window closes).
    names: HashMap<NameId, String>,
    /// Whether the process uses a GPU, as `/proc` last said (asked until it says yes).
    gpu: Option<bool>,
    /// The job's parallel layout as the process states it, read once (see
    /// [`Source::parallel`]).
    parallel: Option<Option<ParallelConfig>>,
    /// The last reading of its CPU time.
    cpu_last: Option<CpuReading>,
    /// NCCL's transfers and kernels in flight (Flare's NCCL profiler plugin).
    nccl: NcclTracker,
    /// NCCL operations completed since the collector last took them (Inspector output).
    pub inspector: Vec<InspectorRecord>,
    /// The process's start-up phases.
    pub startup: StartupTracker,
    /// Time since its last step in closed windows, with its sync time: the part before
    /// the window of the iteration that will end in a later one, counted there whole.
    pub stepping_carry: Option<SteppingTime>,
}

/// A reading of a process's CPU time and its main thread's run-queue wait.
#[derive(Clone, Copy)]
struct CpuReading {
    unix_ns: u64,
    cpu_ns: u64,
    wait_ns: Option<u64>,
}

impl Source {
    pub fn new(file: RingFile, now_mono: u64) -> Source {
        let info = file.info().clone();
        Source {
            path: file.path().to_path_buf(),
            ring_tids: vec![0; info.max_rings as usize],
            file: Some(file),
            info,
            asm: Assembler::new(),
            events: Vec::new(),
            items: Vec::new(),
            last_step: HashMap::new(),
            windows: BTreeMap::new(),
            observed_from: None,
            observed_to: 0,
            dropped_total: 0,
            last_activity_mono: now_mono,
            fired: HashSet::new(),
            names: HashMap::new(),
            gpu: None,
            parallel: None,
            cpu_last: None,
            nccl: NcclTracker::default(),
            inspector: Vec::new(),
            startup: StartupTracker::default(),
            stepping_carry: None,
        }
    }

    /// Whether the process uses a GPU (see [`crate::procfs::uses_gpu`]), asked again
    /// until it does: a job may touch its device only after its tracer started.
    pub fn uses_gpu(&mut self) -> Option<bool> {
        if self.gpu != Some(true) && self.is_open() {
            self.gpu = crate::procfs::uses_gpu(self.info.pid).or(self.gpu);
        }
        self.gpu
    }

    /// The job's parallel layout as the process states it (see
    /// [`crate::procfs::parallel_layout`]), read once, while `/proc` still shows the
    /// process that wrote the file; a layout that does not fit the job is said once and
    /// not used.
    pub fn parallel(&mut self) -> Option<&ParallelConfig> {
        if self.parallel.is_none() {
            let i = &self.info;
            if procfs::same_process(i.pid, i.anchor_mono_ns) != Some(true) {
                return None;
            }
            self.parallel = Some(match procfs::parallel_layout(i.pid, i.world_size) {
                Some(Ok(p)) => Some(p),
                Some(Err(e)) => {
                    tracing::warn!(rank = i.rank, pid = i.pid, error = %e, "the job's parallel layout (FLARE_PARALLEL or its command line) does not fit it; ranks are shown in rank order");
                    None
                }
                None => None,
            });
        }
        self.parallel.as_ref().and_then(Option::as_ref)
    }

    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    pub fn liveness(&self, now_mono: u64, grace_ns: u64) -> Liveness {
        let Some(file) = &self.file else {
            return Liveness::Dead;
        };
        if file.exited() {
            return Liveness::Exited;
        }
        let alive = match procfs::same_process(self.info.pid, self.info.anchor_mono_ns) {
            Some(same) => same,
            None => file.process_alive(),
        };
        // A process that still writes events is alive whatever /proc says (the agent
        // may not share its pid namespace).
        if alive || now_mono.saturating_sub(self.last_activity_mono) < grace_ns {
            Liveness::Alive
        } else {
            Liveness::Dead
        }
    }

    /// The process called the tracer's shutdown (one atomic load: checked every poll).
    pub fn exited(&self) -> bool {
        self.file.as_ref().is_some_and(RingFile::exited)
    }

    pub fn heartbeat(&self, unix_ns: u64) {
        if let Some(f) = &self.file {
            f.heartbeat(unix_ns);
        }
    }

    fn name(&mut self, id: NameId) -> String {
        resolve(self.file.as_ref(), &mut self.names, id)
    }

    fn group_name(&mut self, id: NameId) -> Option<String> {
        (id != NameId::NONE).then(|| self.name(id))
    }

    /// Drains every ring and folds the events into the window accumulators.
    pub fn drain(&mut self, ctx: &PollCtx) -> DrainStats {
        let mut stats = DrainStats::default();
        let Some(file) = &mut self.file else {
            return stats;
        };
        // Owners are read before draining: a ring is reclaimed only once drained, so a
        // new owner seen now has written nothing we already drained.
        for (r, known) in self.ring_tids.iter_mut().enumerate() {
            let (tid, _) = file.thread(r as u32);
            if tid != *known {
                if *known != 0 {
                    self.asm.reset_ring(r as u32);
                    self.last_step.remove(&(r as u32));
                }
                *known = tid;
            }
        }
        let dropped = file.drops().total();
        if dropped > self.dropped_total {
            // The ring lost events: an NCCL transfer in flight may have lost its end, and
            // would look stalled forever. What is in flight now is forgotten; what starts
            // after this drain is tracked again.
            self.nccl.forget_in_flight();
        }
        self.dropped_total = dropped;
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        let n = file.drain(&mut events);
        let now_unix = self.info.to_unix_ns(ctx.now_mono);
        if n > 0 {
            self.last_activity_mono = ctx.now_mono;
        }
        if self.observed_from.is_none() {
            // Watched since the tracer started (or its oldest buffered event, for
            // files written with explicit times), but not before the backlog horizon.
            // Rings that overflowed before the agent came lost the recent past: the
            // watch then starts now, rather than report that time as idle.
            let first = events
                .iter()
                .map(|e| self.info.to_unix_ns(e.event.ts_ns))
                .min()
                .unwrap_or(u64::MAX);
            let from = if self.dropped_total > 0 {
                now_unix
            } else {
                self.info.anchor_unix_ns.min(first).max(ctx.horizon_unix)
            };
            self.observed_from = Some(from.min(now_unix));
        }
        let future = now_unix.saturating_add(ctx.windows.len_ns);
        let mut items = std::mem::take(&mut self.items);
        // Events per window, counted in runs (events come in time order per ring), so
        // the window map is touched once per run rather than once per event.
        let mut run: Option<(u64, u64)> = None;
        let mut ended = Vec::new();
        for e in &events {
            stats.events += 1;
            let ts = self.info.to_unix_ns(e.event.ts_ns);
            if let Some(phase) = flare_tracer::startup::phase_of(&e.event) {
                // Not an op, and never late: kept whole, whatever window its times fall
                // in (the launch phase starts before the tracer did).
                let (file, names) = (self.file.as_ref(), &mut self.names);
                self.startup
                    .feed(&e.event, phase, ts, |id| resolve(file, names, id));
                continue;
            }
            let w = ctx.windows.index(ts);
            if w < ctx.open_from || ts < ctx.horizon_unix || ts > future {
                stats.late += 1;
            } else {
                match &mut run {
                    Some((rw, n)) if *rw == w => *n += 1,
                    _ => {
                        if let Some((rw, n)) = run.replace((w, 1)) {
                            self.windows.entry(rw).or_default().events += n;
                        }
                    }
                }
            }
            if e.event.flags & flare_tracer::nccl::FLAG_NCCL != 0 {
                self.nccl.feed(&e.event, ts, &mut ended);
                for done in ended.drain(..) {
                    stats.late += self.add_nccl(done, ctx, future);
                }
            }
            items.clear();
            self.asm.feed(e.ring, &e.event, &mut items);
            for item in items.drain(..) {
                stats.late += self.apply(item, ctx, future);
            }
        }
        if let Some((rw, n)) = run {
            self.windows.entry(rw).or_default().events += n;
        }
        self.events = events;
        self.items = items;
        self.observed_to = self.observed_to.max(now_unix);
        stats
    }

    /// Folds one assembled item into its window; returns 1 when it was too late.
    fn apply(&mut self, item: Item, ctx: &PollCtx, future: u64) -> u64 {
        let win = ctx.windows;
        let usable =
            |ts: u64| ts >= ctx.horizon_unix && ts <= future && win.index(ts) >= ctx.open_from;
        match item {
            Item::Span(s) => {
                let start = self.info.to_unix_ns(s.start_ns);
                let end = self.info.to_unix_ns(s.end_ns);
                if s.depth == 0 {
                    self.add_busy(start, end, ctx, Busy::Any);
                }
                if s.kind.is_sync() {
                    self.add_busy(start, end, ctx, Busy::Sync);
                }
                if !usable(end) {
                    return 1;
                }
                self.record_span(&s, win.index(end), ctx.max_exact);
                0
            }
            Item::Step { ring, step, ts_ns } => {
                let ts = self.info.to_unix_ns(ts_ns);
                let prev = self.last_step.insert(ring, (step, ts));
                match prev {
                    Some((pstep, pts)) if ts >= pts => {
                        if !usable(ts) {
                            return 1;
                        }
                        let w = win.index(ts);
                        self.windows.entry(w).or_default().add_iteration(
                            IterationSample {
                                step: pstep,
                                start_unix_ns: pts,
                                duration_ns: ts - pts,
                            },
                            win.start(w),
                        );
                        0
                    }
                    _ => 0,
                }
            }
            // Counters and instants are counted as events; the summary has no place
            // for free-form series (they would make its size unbounded).
            Item::Counter { .. } | Item::Instant { .. } => 0,
        }
    }

    /// Counts an NCCL transfer or kernel in the window it ended in; returns 1 when too late.
    fn add_nccl(&mut self, ended: Ended, ctx: &PollCtx, future: u64) -> u64 {
        let end = match ended {
            Ended::Link { end_unix, .. } | Ended::Kernel { end_unix, .. } => end_unix,
            // Inspector records go out per operation, whatever the window.
            Ended::Op { end_unix, op } => {
                if ctx.inspector {
                    let record = self.inspector_record(&op, end_unix);
                    self.inspector.push(record);
                }
                return 0;
            }
        };
        let w = ctx.windows.index(end);
        if end < ctx.horizon_unix || end > future || w < ctx.open_from {
            return 1;
        }
        match ended {
            Ended::Link {
                key: (group, peer, send),
                acc,
                ..
            } => {
                let group = self.group_name(group);
                let rw = self.windows.entry(w).or_default();
                rw.links.entry((group, peer, send)).or_default().merge(&acc);
            }
            Ended::Kernel { group, acc, .. } => {
                let group = self.group_name(group);
                let rw = self.windows.entry(w).or_default();
                rw.kernels.entry(group).or_default().merge(&acc);
            }
            Ended::Op { .. } => {}
        }
        0
    }

    fn inspector_record(&mut self, op: &OpDone, end_unix: u64) -> InspectorRecord {
        let named = |s: &mut Self, id: NameId| (id != NameId::NONE).then(|| s.name(id));
        InspectorRecord {
            rank: self.info.rank,
            pid: self.info.pid,
            comm_hash: op.comm_hash,
            comm_name: named(self, op.comm_label),
            comm_rank: op.comm_rank,
            nranks: op.nranks,
            nnodes: op.nnodes,
            func: self.name(op.func),
            kind: op.kind,
            algo_proto: named(self, op.algo_proto),
            peer: op.peer,
            seq: op.seq,
            bytes: op.bytes,
            exec_ns: op.exec_ns,
            dump_unix_us: end_unix / 1_000,
        }
    }

    /// The communicators this process belongs to (as its NCCL plugin said at init).
    pub fn memberships(&mut self) -> Vec<CommMembership> {
        self.nccl
            .memberships()
            .into_iter()
            .map(|(g, rank, size)| CommMembership {
                group: self.group_name(g),
                rank,
                size,
            })
            .collect()
    }

    /// NCCL transfers in flight without progress at `unix_ns`.
    pub fn stalled_links(&mut self, unix_ns: u64) -> Vec<StalledLink> {
        let file = self.file.as_ref();
        let names = &mut self.names;
        self.nccl.stalled(unix_ns, |id| {
            (id != NameId::NONE).then(|| resolve(file, names, id))
        })
    }

    fn record_span(&mut self, s: &Span, w: u64, cap: usize) {
        let key = (s.name, s.kind, s.args.group);
        let rw = self.windows.entry(w).or_default();
        let acc = match rw.ops.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                let file = self.file.as_ref();
                let name = resolve(file, &mut self.names, s.name);
                let group = (s.args.group != NameId::NONE)
                    .then(|| resolve(file, &mut self.names, s.args.group));
                v.insert(OpAcc::new(name, s.kind, group, cap))
            }
        };
        acc.record(
            s.duration_ns(),
            s.args.amount,
            s.args.group_size,
            s.args.issue_latency_ns,
        );
    }

    /// Adds `[start, end)` (Unix ns) to the busy (or sync) time of every open window it
    /// overlaps.
    fn add_busy(&mut self, start: u64, end: u64, ctx: &PollCtx, which: Busy) {
        if end <= start {
            return;
        }
        let win = ctx.windows;
        let last = win.index(end - 1);
        let first = win.index(start).max(ctx.open_from);
        for w in first..=last {
            let (ws, we) = (win.start(w), win.end(w));
            let rw = self.windows.entry(w).or_default();
            let union = match which {
                Busy::Any => &mut rw.busy,
                Busy::Sync => &mut rw.sync,
            };
            union.add(start.max(ws), end.min(we));
        }
    }

    /// Reads the process's CPU time and its main thread's run-queue wait, and spreads
    /// what they grew by since the last reading over the windows in between, in
    /// proportion to their share of that time.
    pub fn sample_cpu(&mut self, ctx: &PollCtx) {
        if self.file.is_none() {
            return;
        }
        let Some(cpu) = crate::procfs::cpu_time_ns(self.info.pid) else {
            return;
        };
        let wait = crate::procfs::runqueue_wait_ns(self.info.pid);
        let now = self.info.to_unix_ns(ctx.now_mono);
        if let Some(last) = self.cpu_last.filter(|l| now > l.unix_ns) {
            let used = cpu.saturating_sub(last.cpu_ns) as f64;
            let waited = wait
                .zip(last.wait_ns)
                .map(|(w, w0)| w.saturating_sub(w0) as f64);
            let span = (now - last.unix_ns) as f64;
            let win = ctx.windows;
            for w in win.index(last.unix_ns).max(ctx.open_from)..=win.index(now - 1) {
                let part = (now.min(win.end(w)) - last.unix_ns.max(win.start(w))) as f64 / span;
                let rw = self.windows.entry(w).or_default();
                add_to(&mut rw.cpu_ns, (used * part).round() as u64);
                if let Some(waited) = waited {
                    add_to(&mut rw.runqueue_ns, (waited * part).round() as u64);
                }
            }
        }
        self.cpu_last = Some(CpuReading {
            unix_ns: now,
            cpu_ns: cpu,
            wait_ns: wait,
        });
    }

    /// Counts top-level spans still open as busy up to now, then finalizes busy time
    /// older than the grace (later spans start after it).
    pub fn settle_busy(&mut self, ctx: &PollCtx) {
        if self.file.is_none() {
            return;
        }
        let now_unix = self.info.to_unix_ns(ctx.now_mono);
        let open: Vec<(u64, bool, bool)> = self
            .asm
            .open_spans()
            .iter()
            .map(|o| {
                (
                    self.info.to_unix_ns(o.start_ns),
                    o.depth == 0,
                    o.kind.is_sync(),
                )
            })
            .collect();
        for (start, top, sync) in open {
            if top {
                self.add_busy(start, now_unix, ctx, Busy::Any);
            }
            if sync {
                self.add_busy(start, now_unix, ctx, Busy::Sync);
            }
        }
        let floor = now_unix.saturating_sub(ctx.grace_ns);
        for w in self.windows.values_mut() {
            w.advance(floor);
        }
    }

    /// The part of window `w` this process was watched, `(from, to)` in Unix ns.
    pub fn observed_in(&self, w: u64, win: Windows) -> (u64, u64) {
        let from = self.observed_from.unwrap_or(u64::MAX).max(win.start(w));
        let to = self.observed_to.min(win.end(w));
        (from, to.max(from))
    }

    /// Whether this (closed) source still has windows not yet emitted.
    pub fn has_windows_from(&self, open_from: u64, win: Windows) -> bool {
        self.windows.keys().any(|&w| w >= open_from)
            || (self.observed_from.is_some() && win.index(self.observed_to) >= open_from)
    }

    /// Open spans stalled past `timeout_ns` and not reported yet: the innermost per
    /// thread, and every stalled async span.
    pub fn new_stuck_spans(&mut self, now_mono: u64, timeout_ns: u64) -> Vec<OpenSpan> {
        let open = self.asm.open_spans();
        let live: HashSet<SpanKey> = open.iter().map(span_key).collect();
        self.fired.retain(|k| live.contains(k));
        let mut innermost: BTreeMap<u32, OpenSpan> = BTreeMap::new();
        let mut out = Vec::new();
        for o in open {
            if o.async_id != 0 {
                out.push(o);
            } else if innermost.get(&o.ring).is_none_or(|i| o.depth > i.depth) {
                innermost.insert(o.ring, o);
            }
        }
        out.extend(innermost.into_values());
        out.retain(|o| {
            now_mono.saturating_sub(o.last_progress_ns) > timeout_ns
                && !self.fired.contains(&span_key(o))
                && self.thread_alive(o)
        });
        for o in &out {
            self.fired.insert(span_key(o));
        }
        out
    }

    /// Whether a span the watchdog reported (op `name`, `kind`, `group`) is still open.
    pub fn still_stuck(
        &mut self,
        name: &str,
        kind: flare_model::OpKind,
        group: Option<&str>,
    ) -> bool {
        if !self.is_open() || self.fired.is_empty() {
            return false;
        }
        let open: Vec<OpenSpan> = self
            .asm
            .open_spans()
            .into_iter()
            .filter(|o| self.fired.contains(&span_key(o)))
            .collect();
        open.iter().any(|o| {
            let (n, k, g) = self.reported_as(o);
            k == kind && n == name && g.as_deref() == group
        })
    }

    /// A thread that exited inside a span left it open; that is not a hang.
    fn thread_alive(&self, o: &OpenSpan) -> bool {
        let tid = self.ring_tids.get(o.ring as usize).copied().unwrap_or(0);
        if o.async_id != 0 || tid == 0 {
            return true;
        }
        let proc_dir = PathBuf::from(format!("/proc/{}", self.info.pid));
        !proc_dir.exists() || proc_dir.join("task").join(tid.to_string()).exists()
    }

    /// The tracer's open spans per thread, innermost first, for the native stacks.
    pub fn ring_stacks(&mut self, now_mono: u64) -> Vec<RingStack> {
        let open = self.asm.open_spans();
        let mut by_ring: BTreeMap<u32, RingStack> = BTreeMap::new();
        for o in open.iter().rev() {
            let frame = self.describe(o, now_mono);
            let r = by_ring.entry(o.ring).or_insert_with(|| RingStack {
                ring: o.ring,
                ..RingStack::default()
            });
            if o.async_id != 0 {
                r.async_frames.push(frame);
            } else {
                r.frames.push(frame);
            }
        }
        let mut out: Vec<RingStack> = by_ring.into_values().collect();
        for r in &mut out {
            // Open spans come sorted by (ring, depth); reversed, the innermost is first.
            r.async_frames.reverse();
            if let Some(f) = &self.file {
                let (tid, name) = f.thread(r.ring);
                r.tid = tid;
                r.thread_name = name;
            }
        }
        out
    }

    fn describe(&mut self, o: &OpenSpan, now_mono: u64) -> String {
        let name = self.name(o.name);
        let mut d = format!("{name} [{}", o.kind.as_str());
        if let Some(g) = self.group_name(o.args.group) {
            d.push_str(&format!(" group={g} seq={}", o.args.seq));
        }
        d.push_str(&format!(
            ", open {:.1}s, idle {:.1}s]",
            now_mono.saturating_sub(o.start_ns) as f64 / 1e9,
            now_mono.saturating_sub(o.last_progress_ns) as f64 / 1e9
        ));
        d
    }

    /// What the watchdog reports a stalled span as: its own name, kind and communicator,
    /// except for the NCCL plugin's kernel channels, proxy ops and steps, which are parts
    /// of a collective: the collective they run for (a rank inside a collective waits for
    /// its peers; the part that stalled is for the in-collective progress to say).
    fn reported_as(&mut self, o: &OpenSpan) -> (String, flare_model::OpKind, Option<String>) {
        if let Some((func, kind, group)) = self.nccl.collective_of(o.async_id) {
            return (self.name(func), kind, self.group_name(group));
        }
        (self.name(o.name), o.kind, self.group_name(o.args.group))
    }

    /// A hang record for a stalled span (stacks are filled in by the capture).
    pub fn hang_record(&mut self, o: &OpenSpan, now_mono: u64) -> HangRecord {
        let (op, kind, group) = self.reported_as(o);
        HangRecord {
            rank: self.info.rank,
            pid: self.info.pid,
            op,
            kind,
            group,
            in_flight_ns: now_mono.saturating_sub(o.start_ns),
            detected_unix_ns: self.info.to_unix_ns(now_mono),
            stacks: Vec::new(),
            stack_source: "none".into(),
        }
    }

    /// A record for this rank's stacks when it is not stuck but peers of its job on this
    /// node are (stacks are filled in by the capture).
    pub fn peer_stacks(&mut self, now_mono: u64) -> PeerStacks {
        let open = self.asm.open_spans();
        // The innermost span of the thread with the deepest one: its current work.
        let open_op = open
            .iter()
            .filter(|o| o.async_id == 0)
            .max_by_key(|o| o.depth)
            .map(|o| o.name);
        PeerStacks {
            rank: self.info.rank,
            pid: self.info.pid,
            open_op: open_op.map(|n| self.name(n)),
            captured_unix_ns: self.info.to_unix_ns(now_mono),
            stacks: Vec::new(),
            stack_source: "none".into(),
        }
    }

    /// Drops the mapping and removes the file (the process is gone; all is drained).
    pub fn close_and_remove(&mut self) -> std::io::Result<()> {
        self.file = None;
        self.asm = Assembler::new();
        self.fired.clear();
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
