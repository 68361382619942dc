//! The collector: finds tracer files, drains their rings, runs the watchdog and closes
//! windows into [`WindowSummary`]s. Single-threaded and non-blocking: everything slow
//! (stack captures, pushes) happens on other threads.

use crate::inspector::InspectorOut;
use crate::source::{Liveness, PollCtx, Source};
use crate::watchdog::{Capture, CaptureRequest, Captured, Watchdog};
use crate::window::{RankParts, RankWindow, Windows};
use crate::{stacks, AgentConfig, AgentError};
use flare_model::summary::SUMMARY_VERSION;
use flare_model::{HangRecord, PeerStacks, WindowSummary};
use flare_tracer::RingFile;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Running totals, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Files being drained now.
    pub files_open: u64,
    pub files_attached: u64,
    /// Files of exited processes, drained and removed.
    pub files_removed: u64,
    /// Files that could not be opened (retried with backoff).
    pub files_rejected: u64,
    /// Files refused because another live process's file already claims the same rank of
    /// the same job (each such file counted once; it is retried while the other lives).
    pub rank_conflicts: u64,
    pub events: u64,
    /// Events and spans that arrived after their window was emitted.
    pub late: u64,
    pub hangs: u64,
    pub windows_closed: u64,
}

/// A file that failed to open: retried with backoff (it may still be being created),
/// logged once.
struct Rejected {
    attempts: u32,
    next_try: Instant,
    logged: bool,
    /// Refused for claiming a live process's rank (counted once).
    conflict: bool,
}

/// Failures before a file is reported (a file caught mid-creation opens on the retry).
const REJECT_LOG_AFTER: u32 = 3;

/// Counts one more refusal of `path` and sets its next try: the scan interval doubled per
/// attempt (up to 64 times), at most a minute away.
fn reject<'a>(
    rejected: &'a mut HashMap<PathBuf, Rejected>,
    path: &Path,
    now: Instant,
    scan_interval: Duration,
) -> &'a mut Rejected {
    let r = rejected.entry(path.to_path_buf()).or_insert(Rejected {
        attempts: 0,
        next_try: now,
        logged: false,
        conflict: false,
    });
    r.attempts += 1;
    r.next_try = now
        + scan_interval
            .saturating_mul(1 << r.attempts.min(6))
            .min(Duration::from_secs(60));
    r
}

/// Takes the entries of `pending` (window, job, item) due by window `w`, by job.
fn take_due<T>(pending: &mut Vec<(u64, String, T)>, w: u64) -> BTreeMap<String, Vec<T>> {
    let mut due: BTreeMap<String, Vec<T>> = BTreeMap::new();
    let (now, later): (Vec<_>, Vec<_>) =
        std::mem::take(pending).into_iter().partition(|p| p.0 <= w);
    *pending = later;
    for (_, job, item) in now {
        due.entry(job).or_default().push(item);
    }
    due
}

/// One job's part of a window on this node: its world size, its parallel layout where a
/// rank states it, and its ranks' parts.
type JobParts = (
    u32,
    Option<flare_model::ParallelConfig>,
    BTreeMap<u32, RankParts>,
);

/// A reported hang: its job, its first record (with the stacks), and the last time (Unix
/// ns) its op was seen still stuck. A window is closed a grace after it ends; what the
/// op did by its end, not at the close, says whether the window shows it (a job being
/// stopped loses its stuck ranks one by one in between).
struct Ongoing {
    job: String,
    first: HangRecord,
    stuck_until: u64,
}

pub struct Collector {
    cfg: AgentConfig,
    windows: Windows,
    sources: Vec<Source>,
    rejected: HashMap<PathBuf, Rejected>,
    /// The oldest window not emitted yet.
    open_from: u64,
    horizon_unix: u64,
    /// The agent's clock: a monotonic reading and the Unix time it corresponds to.
    /// Windows close on monotonic time, so wall-clock steps do not close them early.
    anchor: (u64, u64),
    last_scan: Option<Instant>,
    watchdog: Watchdog,
    /// Hang records waiting for their window to close: (window, job, record).
    hangs: Vec<(u64, String, HangRecord)>,
    /// Hangs reported and not over. Each later window reports them again while the op
    /// stays stuck, so a hang stays open until it ends instead of showing once.
    ongoing: Vec<Ongoing>,
    /// Stacks of not-stuck ranks waiting for their window to close: (window, job, stacks).
    peers: Vec<(u64, String, PeerStacks)>,
    /// Peer captures of hangs not over, reported again each window like `ongoing`.
    ongoing_peers: Vec<(String, PeerStacks)>,
    /// (job, rank) whose peer stacks were asked for during the job's current hang.
    peers_asked: HashSet<(String, u32)>,
    /// Stack captures under way, per window of the moment they were asked for: the window
    /// waits for them (up to the stack timeout), so a hang is not first shown with only
    /// the ranks whose capture happened to finish first.
    capturing: BTreeMap<u64, usize>,
    stats: CollectorStats,
    dir_error: Option<String>,
    /// NCCL Inspector output (`--inspector-out`), and whether writing it failed already.
    inspector: Option<InspectorOut>,
    inspector_failed: bool,
}

impl Collector {
    pub fn new(cfg: AgentConfig) -> Result<Collector, AgentError> {
        cfg.validate()?;
        if let Some(p) = &cfg.py_spy {
            if stacks::find_py_spy(Some(p)).is_none() {
                return Err(AgentError::Config(format!(
                    "py-spy path {} is not an executable file",
                    p.display()
                )));
            }
        }
        let py_spy = stacks::find_py_spy(cfg.py_spy.as_deref());
        match &py_spy {
            Some(p) => {
                tracing::info!(py_spy = %p.display(), "hang stacks of Python processes via py-spy")
            }
            None => tracing::info!("py-spy not found: hang stacks come from the tracer and /proc"),
        }
        let windows = Windows {
            len_ns: cfg.window_ns(),
        };
        let anchor = flare_tracer::clock::anchor();
        let horizon_unix = anchor.1.saturating_sub(cfg.backlog.as_nanos() as u64);
        let inspector = match &cfg.inspector_dir {
            Some(d) => Some(
                InspectorOut::new(d, &cfg.node, cfg.job.as_deref())
                    .map_err(|e| AgentError::io(d, e))?,
            ),
            None => None,
        };
        Ok(Collector {
            watchdog: Watchdog::new(py_spy, cfg.stack_timeout),
            open_from: windows.index(horizon_unix),
            horizon_unix,
            windows,
            cfg,
            sources: Vec::new(),
            rejected: HashMap::new(),
            anchor,
            last_scan: None,
            hangs: Vec::new(),
            ongoing: Vec::new(),
            peers: Vec::new(),
            ongoing_peers: Vec::new(),
            peers_asked: HashSet::new(),
            capturing: BTreeMap::new(),
            stats: CollectorStats::default(),
            dir_error: None,
            inspector,
            inspector_failed: false,
        })
    }

    pub fn stats(&self) -> CollectorStats {
        CollectorStats {
            files_open: self.sources.iter().filter(|s| s.is_open()).count() as u64,
            files_rejected: self.rejected.len() as u64,
            ..self.stats
        }
    }

    pub fn py_spy(&self) -> Option<&std::path::Path> {
        self.watchdog.py_spy()
    }

    /// (monotonic ns, Unix ns) now, on the agent's clock.
    fn now(&self) -> (u64, u64) {
        let mono = flare_tracer::clock::now_ns();
        (mono, self.anchor.1 + mono.saturating_sub(self.anchor.0))
    }

    /// One collection round: scan when due, drain every file, watch for hangs, and
    /// return the summaries of windows whose end plus the grace has passed.
    pub fn poll(&mut self) -> Vec<WindowSummary> {
        let scan = self
            .last_scan
            .is_none_or(|t| t.elapsed() >= self.cfg.scan_interval);
        let now_unix = self.collect(scan);
        let grace = self.cfg.grace.as_nanos() as u64;
        let hold = (self.cfg.stack_timeout + Duration::from_secs(1)).as_nanos() as u64;
        let mut out = Vec::new();
        while self.windows.end(self.open_from).saturating_add(grace) <= now_unix {
            let capturing = self.capturing.range(..=self.open_from).any(|(_, &n)| n > 0);
            if capturing
                && now_unix
                    < self
                        .windows
                        .end(self.open_from)
                        .saturating_add(grace + hold)
            {
                break;
            }
            out.extend(self.close_window(self.open_from));
            self.open_from += 1;
        }
        self.forget_finished_sources();
        out
    }

    /// Drains everything now and closes every window up to the current, partial one
    /// (at shutdown, or for a one-shot run). Waits up to the stack timeout for hang
    /// captures under way, so their records make it into the summary.
    pub fn flush(&mut self) -> Vec<WindowSummary> {
        let now_unix = self.collect(true);
        if self.watchdog.busy() {
            let deadline = Instant::now() + self.cfg.stack_timeout + Duration::from_secs(1);
            let done = self.watchdog.wait_idle(deadline);
            self.file_hangs(done);
        }
        let mut last = self.windows.index(now_unix);
        for s in &self.sources {
            if let Some((&w, _)) = s.windows.last_key_value() {
                last = last.max(w);
            }
        }
        if let Some(w) = self.hangs.iter().map(|h| h.0).max() {
            last = last.max(w);
        }
        if let Some(w) = self.peers.iter().map(|h| h.0).max() {
            last = last.max(w);
        }
        let mut out = Vec::new();
        while self.open_from <= last {
            out.extend(self.close_window(self.open_from));
            self.open_from += 1;
        }
        self.forget_finished_sources();
        out
    }

    /// Scans (if asked), drains, settles busy time and runs the watchdog. Returns the
    /// agent's Unix time.
    fn collect(&mut self, scan: bool) -> u64 {
        if scan {
            self.last_scan = Some(Instant::now());
            self.scan();
        }
        let (now_mono, now_unix) = self.now();
        let ctx = PollCtx {
            windows: self.windows,
            open_from: self.open_from,
            now_mono,
            grace_ns: self.cfg.grace.as_nanos() as u64,
            max_exact: self.cfg.max_exact_samples,
            horizon_unix: self.horizon_unix,
            inspector: self.inspector.is_some(),
        };
        let liveness_grace = self.cfg.liveness_grace.as_nanos() as u64;
        let timeout = self.cfg.hang_timeout.as_nanos() as u64;
        let mut requests = Vec::new();
        for s in self.sources.iter_mut().filter(|s| s.is_open()) {
            // Decided before the drain, so the drain is the last one and loses nothing.
            let dying = if s.exited() {
                Some("exited")
            } else if scan && s.liveness(now_mono, liveness_grace) == Liveness::Dead {
                Some("died")
            } else {
                None
            };
            let d = s.drain(&ctx);
            self.stats.events += d.events;
            self.stats.late += d.late;
            if let Some(out) = &mut self.inspector {
                let records = std::mem::take(&mut s.inspector);
                if let Err(e) = out.write(&records) {
                    if !std::mem::replace(&mut self.inspector_failed, true) {
                        tracing::warn!(error = %e, "could not write NCCL Inspector output");
                    }
                }
            }
            s.settle_busy(&ctx);
            s.sample_cpu(&ctx);
            if let Some(how) = dying {
                let (rank, pid) = (s.info.rank, s.info.pid);
                match s.close_and_remove() {
                    Ok(()) => {
                        tracing::info!(rank, pid, file = %s.path().display(), "process {how}: drained and removed its tracer file")
                    }
                    Err(e) => {
                        tracing::warn!(rank, pid, file = %s.path().display(), error = %e, "process {how}: drained, but its tracer file could not be removed")
                    }
                }
                self.stats.files_removed += 1;
                continue;
            }
            if self.cfg.heartbeat {
                s.heartbeat(now_unix);
            }
            let stuck = s.new_stuck_spans(now_mono, timeout);
            if !stuck.is_empty() {
                let records = stuck.iter().map(|o| s.hang_record(o, now_mono)).collect();
                requests.push(CaptureRequest {
                    job: s.info.job_id.clone(),
                    pid: s.info.pid,
                    capture: Capture::Stuck(records),
                    rings: s.ring_stacks(now_mono),
                });
            }
        }
        self.ask_peer_stacks(&mut requests, now_mono);
        self.track_ongoing(now_unix);
        for r in requests {
            let w = self.windows.index(r.capture.asked_unix_ns());
            *self.capturing.entry(w).or_default() += 1;
            self.watchdog.submit(r);
        }
        let done = self.watchdog.collect();
        self.file_hangs(done);
        now_unix
    }

    /// When ranks of a job are newly stuck, the stacks of the job's other local ranks too:
    /// in a hung collective, the rank the others wait for is stuck nowhere the watchdog
    /// sees (it never entered the collective), and only its stack says where it is.
    fn ask_peer_stacks(&mut self, requests: &mut Vec<CaptureRequest>, now_mono: u64) {
        let stuck: HashSet<(String, u32)> = requests
            .iter()
            .filter_map(|r| match &r.capture {
                Capture::Stuck(records) => records.first().map(|h| (r.job.clone(), h.rank)),
                Capture::Peer(_) => None,
            })
            .chain(self.ongoing.iter().map(|o| (o.job.clone(), o.first.rank)))
            .collect();
        let jobs: HashSet<String> = requests.iter().map(|r| r.job.clone()).collect();
        for s in self.sources.iter_mut().filter(|s| s.is_open()) {
            let key = (s.info.job_id.clone(), s.info.rank);
            if !jobs.contains(&key.0) || stuck.contains(&key) || self.peers_asked.contains(&key) {
                continue;
            }
            self.peers_asked.insert(key.clone());
            requests.push(CaptureRequest {
                job: key.0,
                pid: s.info.pid,
                capture: Capture::Peer(s.peer_stacks(now_mono)),
                rings: s.ring_stacks(now_mono),
            });
        }
    }

    fn file_hangs(&mut self, done: Vec<Captured>) {
        for (job, capture) in done {
            let w = self.windows.index(capture.asked_unix_ns());
            if let Some(n) = self.capturing.get_mut(&w) {
                *n = n.saturating_sub(1);
            }
            match capture {
                Capture::Stuck(records) => {
                    for r in records {
                        self.stats.hangs += 1;
                        let w = self.windows.index(r.detected_unix_ns).max(self.open_from);
                        self.ongoing.push(Ongoing {
                            job: job.clone(),
                            stuck_until: r.detected_unix_ns,
                            first: r.clone(),
                        });
                        self.hangs.push((w, job.clone(), r));
                    }
                }
                Capture::Peer(p) => {
                    let w = self.windows.index(p.captured_unix_ns).max(self.open_from);
                    self.ongoing_peers.push((job.clone(), p.clone()));
                    self.peers.push((w, job, p));
                }
            }
        }
        self.capturing.retain(|_, n| *n > 0);
    }

    fn scan(&mut self) {
        let found = match flare_tracer::discover(&self.cfg.shm_dir, self.cfg.job.as_deref()) {
            Ok(f) => {
                if self.dir_error.take().is_some() {
                    tracing::info!(dir = %self.cfg.shm_dir.display(), "tracer directory readable again");
                }
                f
            }
            Err(e) => {
                let msg = e.to_string();
                if self.dir_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(dir = %self.cfg.shm_dir.display(), error = %msg, "cannot list the tracer directory");
                    self.dir_error = Some(msg);
                }
                return;
            }
        };
        let now = Instant::now();
        let (now_mono, _) = self.now();
        let liveness_grace = self.cfg.liveness_grace.as_nanos() as u64;
        let open: HashSet<PathBuf> = self
            .sources
            .iter()
            .filter(|s| s.is_open())
            .map(|s| s.path.clone())
            .collect();
        for path in &found {
            if open.contains(path) {
                continue;
            }
            if self.rejected.get(path).is_some_and(|r| now < r.next_try) {
                continue;
            }
            let result = RingFile::open(path).and_then(|f| match &self.cfg.job {
                // File names carry a sanitized job id; the header has the real one.
                Some(job) if &f.info().job_id != job => Err(flare_tracer::TracerError::Format {
                    path: path.clone(),
                    what: format!("belongs to job {:?}, not {job:?}", f.info().job_id),
                }),
                _ => Ok(f),
            });
            // Two live processes claiming one rank of one job: a copied or stale file, or
            // a launcher bug. Their data must not be merged into one rank: the file found
            // first is kept, the other refused (and retried) while the first lives.
            let conflict = result.as_ref().ok().and_then(|f| {
                let i = f.info();
                self.sources.iter().find(|s| {
                    s.is_open()
                        && s.info.job_id == i.job_id
                        && s.info.rank == i.rank
                        && s.info.pid != i.pid
                        && s.liveness(now_mono, liveness_grace) == Liveness::Alive
                })
            });
            if let (Some(other), Ok(f)) = (conflict, &result) {
                let i = f.info();
                let r = reject(&mut self.rejected, path, now, self.cfg.scan_interval);
                if !r.conflict {
                    r.conflict = true;
                    self.stats.rank_conflicts += 1;
                    tracing::warn!(
                        job = %i.job_id, rank = i.rank, pid = i.pid, file = %path.display(),
                        other_pid = other.info.pid, other_file = %other.path().display(),
                        "two live processes claim the same rank of the same job: not merged; this file is skipped while the other process lives"
                    );
                }
                continue;
            }
            match result {
                Ok(f) => {
                    let i = f.info();
                    tracing::info!(
                        job = %i.job_id, rank = i.rank, local_rank = i.local_rank,
                        pid = i.pid, file = %path.display(), "attached to a traced process"
                    );
                    self.rejected.remove(path);
                    self.stats.files_attached += 1;
                    self.sources.push(Source::new(f, now_mono));
                }
                Err(e) => {
                    let r = reject(&mut self.rejected, path, now, self.cfg.scan_interval);
                    if r.attempts >= REJECT_LOG_AFTER && !r.logged {
                        r.logged = true;
                        tracing::warn!(error = %e, "skipping a file that is not a readable tracer file");
                    } else {
                        tracing::debug!(error = %e, attempts = r.attempts, "cannot open a tracer file yet");
                    }
                }
            }
        }
        let found: HashSet<&PathBuf> = found.iter().collect();
        self.rejected.retain(|p, _| found.contains(p));
    }

    /// Emits window `w`: one summary per job with data in it.
    fn close_window(&mut self, w: u64) -> Vec<WindowSummary> {
        let win = self.windows;
        if let Some(out) = &mut self.inspector {
            if let Err(e) = out.write_prometheus() {
                if !std::mem::replace(&mut self.inspector_failed, true) {
                    tracing::warn!(error = %e, "could not write NCCL Inspector's Prometheus files");
                }
            }
        }
        // job -> (world size, its parallel layout, rank -> parts)
        let mut jobs: BTreeMap<String, JobParts> = BTreeMap::new();
        for s in &mut self.sources {
            let mut rw = s.windows.remove(&w).unwrap_or_else(RankWindow::default);
            let observed = s.observed_in(w, win);
            rw.carried_in = s.stepping_carry.take();
            s.stepping_carry = rw.carry_out(observed);
            if rw.is_empty() && observed.1 <= observed.0 {
                continue;
            }
            let gpu = s.uses_gpu();
            let parallel = s.parallel().cloned();
            // Transfers stopped at the window's end (or at the last drain, if earlier).
            let stalled = s.stalled_links(win.end(w).min(s.observed_to));
            let comms = s.memberships();
            let i = &s.info;
            let job = jobs.entry(i.job_id.clone()).or_default();
            job.0 = job.0.max(i.world_size);
            job.1 = job.1.take().or(parallel);
            let parts = job
                .2
                .entry(i.rank)
                .or_insert_with(|| RankParts::new(i.rank, i.local_rank, i.pid));
            parts.absorb(rw, observed, s.dropped_total, i.pid, gpu);
            parts.add_nccl_state(stalled, comms);
            if let Some(r) = s.startup.for_window() {
                parts.add_startup(r);
            }
        }
        self.carry_ongoing_hangs(w);
        let mut hangs = take_due(&mut self.hangs, w);
        let mut peers = take_due(&mut self.peers, w);
        // A job with only hang records in this window still gets its summary.
        for job in hangs.keys().chain(peers.keys()) {
            jobs.entry(job.clone()).or_default();
        }
        let out: Vec<WindowSummary> = jobs
            .into_iter()
            .map(|(job_id, (world_size, parallel, ranks))| WindowSummary {
                parallel,
                version: SUMMARY_VERSION,
                hangs: hangs.remove(&job_id).unwrap_or_default(),
                peer_stacks: peers.remove(&job_id).unwrap_or_default(),
                logs: None,
                job_id,
                node: self.cfg.node.clone(),
                window: w,
                window_ns: win.len_ns,
                start_unix_ns: win.start(w),
                end_unix_ns: win.end(w),
                world_size,
                ranks: ranks.into_values().map(RankParts::finish).collect(),
            })
            .collect();
        self.stats.windows_closed += out.len() as u64;
        out
    }

    /// Notes, for each reported hang, whether its op is still stuck now.
    fn track_ongoing(&mut self, now_unix: u64) {
        for o in &mut self.ongoing {
            let h = &o.first;
            let stuck = self.sources.iter_mut().any(|s| {
                s.info.pid == h.pid
                    && s.info.rank == h.rank
                    && s.still_stuck(&h.op, h.kind, h.group.as_deref())
            });
            if stuck {
                o.stuck_until = now_unix;
            }
        }
    }

    /// Files again, for window `w`, each reported hang whose op was still stuck in it
    /// (same stacks, longer in flight), unless `w` already has a record of it; forgets
    /// the hangs that ended before it.
    fn carry_ongoing_hangs(&mut self, w: u64) {
        let (start_unix, end_unix) = (self.windows.start(w), self.windows.end(w));
        let hangs = &mut self.hangs;
        self.ongoing.retain(|o| {
            if o.stuck_until < start_unix {
                return false;
            }
            let first = &o.first;
            let filed = hangs.iter().any(|(hw, hj, h)| {
                *hw == w && *hj == o.job && h.pid == first.pid && h.op == first.op
            });
            let until = o.stuck_until.min(end_unix);
            if !filed && until > first.detected_unix_ns {
                let mut again = first.clone();
                again.in_flight_ns += until - first.detected_unix_ns;
                hangs.push((w, o.job.clone(), again));
            }
            true
        });
        // Peer stacks stay with their job's hang: shown again while it lasts, dropped (and
        // asked for afresh at the next hang) when it ends.
        let hung: HashSet<&str> = self.ongoing.iter().map(|o| o.job.as_str()).collect();
        let peers = &mut self.peers;
        self.ongoing_peers.retain(|(job, first)| {
            if !hung.contains(job.as_str()) {
                return false;
            }
            let filed = peers
                .iter()
                .any(|(pw, pj, p)| *pw == w && pj == job && p.rank == first.rank);
            if !filed && end_unix > first.captured_unix_ns {
                peers.push((w, job.clone(), first.clone()));
            }
            true
        });
        // A hang whose first records are still waiting for their window keeps its askings.
        let filed = &self.hangs;
        self.peers_asked.retain(|(job, _)| {
            hung.contains(job.as_str()) || filed.iter().any(|(_, j, _)| j == job)
        });
    }

    /// Drops closed files whose windows have all been emitted.
    fn forget_finished_sources(&mut self) {
        let (open_from, win) = (self.open_from, self.windows);
        let inspector = &mut self.inspector;
        self.sources.retain(|s| {
            let keep = s.is_open() || s.has_windows_from(open_from, win);
            if !keep {
                // Its process is gone: its Inspector log gets no more lines.
                if let Some(out) = inspector.as_mut() {
                    out.close(s.info.pid);
                }
            }
            keep
        });
    }
}
