//! Storage: jobs, the summaries agents posted (zstd-compressed JSON, one row per job,
//! window and node; a re-sent summary replaces its row), the ranks seen, and one
//! diagnosis per job and window; in SQLite (the default) or PostgreSQL ([`db`]).
//!
//! One connection behind a mutex serves every request of a server (callers run it on
//! blocking threads). Ingest must read-modify-write a window atomically so two nodes
//! posting at once cannot leave a diagnosis that misses one: SQLite serialises writers
//! and one server owns the file; servers sharing PostgreSQL take the job's advisory lock
//! for the whole ingest, and check what they cached against the database first.

mod cache;
pub mod db;
mod pending;

pub use cache::DEFAULT_CACHE_BYTES;
pub use db::DbLocation;
pub use pending::{ArrivingWindow, ANALYSIS_DELAY_NS};

use crate::ingest;
use cache::{LiveWindowCache, Stamp, WindowCache};
use db::{params, Db};
use flare_engine::live::{diagnose_window, LiveConfig, LiveDiagnosis, LiveWindow};
use flare_model::{
    Finding, FindingKind, FindingsDocument, JobSummary, RankTime, SkippedDetector, WindowHistory,
    WindowSummary,
};
use pending::PendingJobs;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Version of the tables below, kept in SQLite's `user_version` (PostgreSQL:
/// `flare_schema`).
pub const SCHEMA_VERSION: i64 = 1;

/// The store's tables in SQLite's DDL (see [`db::postgres::ddl`] for PostgreSQL's).
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    job_id             TEXT PRIMARY KEY NOT NULL,
    world_size         INTEGER NOT NULL,
    first_window       INTEGER NOT NULL,
    last_window        INTEGER NOT NULL,
    first_seen_unix_ns INTEGER NOT NULL,
    last_seen_unix_ns  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS summaries (
    job_id           TEXT NOT NULL REFERENCES jobs(job_id),
    window_index     INTEGER NOT NULL,
    node             TEXT NOT NULL,
    received_unix_ns INTEGER NOT NULL,
    ranks            INTEGER NOT NULL,
    body             BLOB NOT NULL,
    PRIMARY KEY (job_id, window_index, node)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ranks (
    job_id      TEXT NOT NULL REFERENCES jobs(job_id),
    rank        INTEGER NOT NULL,
    node        TEXT NOT NULL,
    last_window INTEGER NOT NULL,
    PRIMARY KEY (job_id, rank)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS findings (
    job_id          TEXT NOT NULL REFERENCES jobs(job_id),
    window_index    INTEGER NOT NULL,
    findings        INTEGER NOT NULL,
    kinds           TEXT NOT NULL,
    diagnosis       TEXT NOT NULL,
    created_unix_ns INTEGER NOT NULL,
    PRIMARY KEY (job_id, window_index)
) WITHOUT ROWID;
";

/// Every table and index, this module's and those of the logs, alerts and retention.
pub(crate) fn schema() -> String {
    [
        SCHEMA,
        crate::logs::SCHEMA,
        crate::alerts::SCHEMA,
        crate::retention::SCHEMA,
    ]
    .concat()
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {at}: {source}")]
    Open {
        at: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("database {at} has schema version {found}, newer than this server's {supported}: run a newer flare")]
    SchemaTooNew {
        at: String,
        found: i64,
        supported: i64,
    },
    #[error("database {path} cannot use write-ahead logging (journal_mode is {mode:?}); put it on a local file system")]
    NoWal { path: PathBuf, mode: String },
    #[error("backup {path}: {why}")]
    Backup { path: PathBuf, why: String },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("database error: {0}")]
    Postgres(#[from] postgres::Error),
    #[error("database column {index} holds {found}, expected {expected}")]
    Column {
        index: usize,
        expected: &'static str,
        found: &'static str,
    },
    #[error("database column {index} has type {found}, which the store does not read")]
    ColumnType { index: usize, found: String },
    #[error("the database returned no row for {0}")]
    NoRow(String),
    #[error(transparent)]
    File(#[from] crate::files::FileError),
    #[error(
        "stored summary of job {job_id}, window {window}, node {node} is unreadable: {reason}"
    )]
    CorruptSummary {
        job_id: String,
        window: u64,
        node: String,
        reason: String,
    },
    #[error("stored diagnosis of job {job_id}, window {window} is unreadable: {source}")]
    CorruptDiagnosis {
        job_id: String,
        window: u64,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot encode the diagnosis: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("{what} {value} does not fit the database's 64-bit integers")]
    OutOfRange { what: &'static str, value: u64 },
}

/// One window's diagnosis as stored and served.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowDiagnosis {
    /// Most important first.
    pub findings: Vec<Finding>,
    pub conclusive: bool,
    pub ranks_with_data: usize,
    pub notes: Vec<String>,
    /// Detectors that could not run on the window, with why.
    #[serde(default)]
    pub skipped: Vec<SkippedDetector>,
    pub world_size: u32,
    pub nodes: usize,
    /// Ranks below `world_size` with no summary, as inclusive ranges: compact while a
    /// large job's nodes are still posting.
    pub missing: Vec<(u32, u32)>,
    pub analysed_unix_ns: u64,
    /// The window's figures for the dashboard's charts (absent from older servers' rows).
    #[serde(default)]
    pub figures: WindowFigures,
    /// In a shared database, the stamp of the summaries it was made from: a server
    /// finding the window's summaries unchanged since leaves it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<Stamp>,
    /// The job's parallel layout, as the window's summaries state it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<flare_model::ParallelConfig>,
}

/// What the dashboard charts of one window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowFigures {
    /// The median rank's mean iteration time in the window, ms.
    pub iteration_ms: Option<f64>,
    /// Per rank that stepped in the window (ascending), its time outside collectives per
    /// second observed over the median rank's, minus one, in percent: who the others
    /// wait for.
    pub rank_excess_pct: Vec<(u32, f32)>,
    /// The ranks with the most idle and exposed communication time (at most
    /// [`BREAKDOWN_RANKS`]), their window split into traced work, communication and
    /// idle time.
    #[serde(default)]
    pub breakdown: Vec<RankTime>,
}

/// Ranks a window's breakdown keeps (the document's, as for traces).
const BREAKDOWN_RANKS: usize = 20;

/// A rank's window as the breakdown table shows it. Summaries hold totals, not spans: the
/// communication that overlapped work is at least what work and communication add up to
/// beyond the time any span was open, and only that much is counted as overlapped.
fn rank_time(r: &flare_engine::live::LiveRank) -> RankTime {
    let ms = |ns: f64| if ns.is_finite() { ns / 1e6 } else { 0.0 };
    let work = r.compute_ns + r.host_total();
    let comm = r.in_sync_ns();
    let busy = if r.busy_ns > 0.0 {
        r.busy_ns
    } else {
        work + comm
    };
    let overlap = (work + comm - busy).max(0.0).min(comm);
    RankTime {
        rank: r.rank,
        window_ms: ms(r.observed_ns),
        compute_ms: ms(work),
        communication_ms: ms(comm),
        exposed_communication_ms: ms(comm - overlap),
        idle_ms: ms((r.observed_ns - busy).max(0.0)),
    }
}

impl WindowFigures {
    pub fn of(w: &LiveWindow) -> WindowFigures {
        let mut its: Vec<f64> = w
            .ranks
            .iter()
            .map(|r| r.iteration_ns)
            .filter(|v| v.is_finite())
            .collect();
        its.sort_by(f64::total_cmp);
        // Ranks that stepped in the window: a window where ranks start or stop compares
        // start-up and shutdown, not speed.
        let share: Vec<(u32, f64)> = w
            .with_data()
            .filter(|r| r.iterations > 0)
            .map(|r| (r.rank, r.own_ns() / r.observed_ns))
            .filter(|(_, s)| s.is_finite())
            .collect();
        let mut sorted: Vec<f64> = share.iter().map(|s| s.1).collect();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
        let mut breakdown: Vec<RankTime> = w.with_data().map(rank_time).collect();
        breakdown.sort_by(|a, b| {
            (b.idle_ms + b.exposed_communication_ms)
                .total_cmp(&(a.idle_ms + a.exposed_communication_ms))
                .then(a.rank.cmp(&b.rank))
        });
        breakdown.truncate(BREAKDOWN_RANKS);
        WindowFigures {
            breakdown,
            iteration_ms: its.get(its.len() / 2).map(|v| v / 1e6),
            rank_excess_pct: if median > 0.0 {
                share
                    .iter()
                    .map(|&(r, s)| (r, ((s / median - 1.0) * 100.0) as f32))
                    .collect()
            } else {
                vec![]
            },
        }
    }
}

impl WindowDiagnosis {
    fn new(window: &[WindowSummary], d: LiveDiagnosis, now_ns: u64) -> Self {
        let world_size = window.iter().map(|s| s.world_size).max().unwrap_or(0);
        let present: BTreeSet<u32> = window
            .iter()
            .flat_map(|s| s.ranks.iter().map(|r| r.rank))
            .collect();
        // The gaps between the ranks present, in one pass over them.
        let mut missing: Vec<(u32, u32)> = Vec::new();
        let mut next = 0u32;
        for &r in present.iter().chain(std::iter::once(&world_size)) {
            if r > next && next < world_size {
                missing.push((next, r.min(world_size) - 1));
            }
            next = next.max(r.saturating_add(1));
        }
        WindowDiagnosis {
            findings: d.findings,
            conclusive: d.conclusive,
            ranks_with_data: d.ranks,
            notes: d.notes,
            skipped: d.skipped,
            world_size,
            nodes: window.len(),
            missing,
            analysed_unix_ns: now_ns,
            figures: WindowFigures::default(),
            basis: None,
            parallel: window.iter().find_map(|s| s.parallel.clone()),
        }
    }

    /// The job's log verdict merged in (`totals`: lines read, sent, dropped by the
    /// agents and over the server's caps, for the notes).
    fn merge_logs(
        &mut self,
        logs: &flare_log_diagnosis::LogDiagnosis,
        totals: (u64, u64, u64, u64),
    ) {
        let m =
            flare_log_diagnosis::merge(std::mem::take(&mut self.findings), logs, "the live traces");
        self.findings = m.findings;
        self.findings.sort_by(Finding::by_importance);
        let (read, sent, dropped, over_cap) = totals;
        let mut note = format!(
            "logs: the agents read {read} lines and sent {sent}, from {} ranks and {} hosts; their findings are merged where they name the same rank or host",
            logs.ranks.len(),
            logs.hosts.len()
        );
        if dropped + over_cap > 0 {
            note.push_str(&format!(
                " ({dropped} lines over the agents' budget and {over_cap} over the server's caps were not kept)"
            ));
        }
        self.notes.push(note);
        self.notes.extend(logs.notes.iter().cloned());
        self.notes.extend(m.notes);
    }

    /// The findings document of this window, as the API serves it.
    pub fn document(
        &self,
        job_id: &str,
        window: u64,
        windows_analysed: u64,
        history: Vec<WindowHistory>,
    ) -> FindingsDocument {
        let mut job = JobSummary {
            id: job_id.to_string(),
            source: "agent".into(),
            world_size: self.world_size,
            ranks_with_data: self.ranks_with_data,
            nodes: Some(self.nodes),
            window: Some(window),
            windows_analysed: Some(windows_analysed),
            analysed_unix_ns: Some(self.analysed_unix_ns),
            parallel: self.parallel.clone(),
            ..JobSummary::default()
        };
        job.set_missing_rank_ranges(&self.missing);
        let mut doc = FindingsDocument::new(job, self.findings.clone(), self.conclusive);
        doc.rank_breakdown = self.figures.breakdown.clone();
        doc.notes = self.notes.clone();
        doc.skipped_detectors = self.skipped.clone();
        doc.history = history;
        doc
    }

    /// Distinct finding kinds, most important first.
    pub fn kinds(&self) -> Vec<FindingKind> {
        flare_model::distinct_kinds(&self.findings)
    }
}

/// What an ingest did.
#[derive(Clone, Debug, PartialEq)]
pub struct Ingested {
    pub job_id: String,
    pub window: u64,
    /// The window's findings when it was analysed at once (it holds every rank); `None`
    /// while its analysis is pending.
    pub findings: Option<usize>,
    /// Alert events to send (not silenced).
    pub alerts: Vec<crate::alerts::AlertEvent>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobRow {
    pub job_id: String,
    pub world_size: u32,
    pub nodes: u64,
    pub ranks_seen: u64,
    pub first_window: u64,
    pub last_window: u64,
    pub last_seen_unix_ns: u64,
    /// The latest window with a diagnosis, and its number of findings.
    pub latest_analysed_window: Option<u64>,
    pub open_findings: u64,
}

/// Windows analysed, with their findings, and the alert events to send.
#[derive(Default)]
struct Analysed {
    windows: Vec<(u64, usize)>,
    alerts: Vec<crate::alerts::AlertEvent>,
}

/// What [`Store::persist`] did.
struct Persisted {
    logs: Option<crate::logs::Stored>,
    /// The window's stamp (in a shared database; the default otherwise).
    stamp: Stamp,
    /// The window's ranks as stored (in a shared database).
    stored_ranks: Option<usize>,
}

pub struct Store {
    pub(crate) db: Db,
    /// Per job, its windows pending analysis.
    pending: PendingJobs,
    analysis_delay_ns: u64,
    /// Diagnoses are stamped with the system clock when done (a server), not with the
    /// time the caller gave (tests).
    system_clock: bool,
    cache: WindowCache,
    windows: LiveWindowCache,
    live: LiveConfig,
    logs: crate::logs::Logs,
    alert_rules: crate::alerts::AlertRules,
}

impl Store {
    /// Opens the database (creating a SQLite file if missing) and brings its schema up
    /// to date.
    pub fn open(at: &DbLocation) -> Result<Store, StoreError> {
        let db = Db::open(at)?;
        let pending = pending::recover(&db, crate::unix_ns())?;
        Ok(Store {
            db,
            pending,
            analysis_delay_ns: ANALYSIS_DELAY_NS,
            system_clock: false,
            cache: cache::summaries_cache(DEFAULT_CACHE_BYTES / 3 * 2),
            windows: cache::windows_cache(DEFAULT_CACHE_BYTES / 3),
            live: LiveConfig::default(),
            logs: crate::logs::Logs::default(),
            alert_rules: crate::alerts::AlertRules::default(),
        })
    }

    /// Stores one summary (replacing the node's earlier one for the window) in one
    /// transaction: once this returns, the summary survives a crash. The window is then
    /// pending analysis, done outside any transaction, from every stored summary of it
    /// (the engine's live diagnosis, continuity with the previous window included): at
    /// once when the window holds every rank of the job, else once no summary came for
    /// [`ANALYSIS_DELAY_NS`] ([`Store::analyse_due`]) or a reader asks
    /// ([`Store::settle`]). A window of 1,280 nodes is analysed once, not 1,280 times.
    /// A job's windows are analysed in order: a window due is analysed after every
    /// earlier window not analysed since its summaries came, in a shared database those
    /// other servers stored too. Servers sharing the database ingest one job at a time.
    pub fn ingest(
        &mut self,
        summary: WindowSummary,
        compressed: Vec<u8>,
        now_ns: u64,
    ) -> Result<Ingested, StoreError> {
        let job_id = summary.job_id.clone();
        self.db.lock_job(&job_id)?;
        let out = self.ingest_locked(summary, compressed, now_ns);
        let unlocked = self.db.unlock_job(&job_id);
        let out = out?;
        unlocked?;
        Ok(out)
    }

    fn ingest_locked(
        &mut self,
        summary: WindowSummary,
        compressed: Vec<u8>,
        now_ns: u64,
    ) -> Result<Ingested, StoreError> {
        let key = (summary.job_id.clone(), summary.window);
        // What another server changed of the window since it was cached goes.
        self.drop_stale(&key.0, key.1, key.1)?;
        // The window's first summary starts its cache entry, complete by construction;
        // later ones join the entry while it is held. The window is never loaded here:
        // a job of 1,280 nodes would decode it once per post.
        let first_of_window = match self.db.query_opt(
            "SELECT last_window FROM jobs WHERE job_id = ?1",
            params![&key.0],
        )? {
            Some(mut r) => r.int(0)? < to_i64("window", key.1)?,
            None => true,
        };
        let stored = self.persist(&summary, compressed, now_ns)?;
        if let Some(logs) = stored.logs {
            self.logs.follow(&self.db, &summary, logs)?;
        }
        let known = self
            .pending
            .get(&key.0)
            .is_some_and(|p| p.contains_key(&key.1));
        let cached = match self.cache.take(&key) {
            Some((mut summaries, _)) => {
                match summaries.binary_search_by(|s| s.node.as_str().cmp(&summary.node)) {
                    Ok(i) => summaries[i] = summary.clone(),
                    Err(i) => summaries.insert(i, summary.clone()),
                }
                let ranks = summaries.iter().map(|s| s.ranks.len()).sum();
                self.cache.put(key.clone(), summaries, stored.stamp);
                Some(ranks)
            }
            None if first_of_window => {
                let ranks = summary.ranks.len();
                self.cache
                    .put(key.clone(), vec![summary.clone()], stored.stamp);
                Some(ranks)
            }
            None => None,
        };
        // The window's ranks: as stored where the database counted them, else from its
        // cache entry; a window neither holds is counted once (after a restart).
        let stored_ranks = match (stored.stored_ranks.or(cached), known) {
            (Some(r), _) => Some(r),
            (None, true) => None,
            (None, false) => Some(
                self.db
                    .query_one(
                        "SELECT CAST(coalesce(SUM(ranks), 0) AS BIGINT) FROM summaries
                         WHERE job_id = ?1 AND window_index = ?2",
                        params![&key.0, to_i64("window", key.1)?],
                    )?
                    .uint(0)? as usize,
            ),
        };
        self.pending
            .entry(key.0.clone())
            .or_default()
            .entry(key.1)
            .or_default()
            .posted(&summary, stored_ranks, now_ns);
        let analysed = self.analyse_in_order(&key.0, now_ns, false)?;
        Ok(Ingested {
            findings: analysed
                .windows
                .iter()
                .find(|(w, _)| *w == key.1)
                .map(|(_, n)| *n),
            job_id: key.0,
            window: key.1,
            alerts: analysed.alerts,
        })
    }

    /// The first window the analysis of `window` reads (the earlier ones with it).
    fn first_read(&self, window: u64) -> u64 {
        window.saturating_sub(self.live.history as u64)
    }

    /// The latest of the job's pending windows due at `now_ns` (the latest of them when
    /// `all`).
    fn last_due(&self, job_id: &str, now_ns: u64, all: bool) -> Option<u64> {
        let delay = self.analysis_delay_ns;
        self.pending
            .get(job_id)?
            .iter()
            .filter(|(_, p)| all || p.due(now_ns, delay))
            .map(|(w, _)| *w)
            .max()
    }

    /// Analyses the job's pending windows that are due at `now_ns` (all of them when
    /// `all`), and every window before them not analysed since its summaries came, in
    /// order: in a shared database those another server stored and left pending too
    /// (it died with them, or waits for their last node), so that no window is analysed
    /// before the windows it follows, whichever servers stored them. Returns (window,
    /// findings) per window analysed and the alert events to send. The caller holds the
    /// job's lock.
    fn analyse_in_order(
        &mut self,
        job_id: &str,
        now_ns: u64,
        all: bool,
    ) -> Result<Analysed, StoreError> {
        let Some(last) = self.last_due(job_id, now_ns, all) else {
            return Ok(Analysed::default());
        };
        if self.db.shared() && last > 0 {
            let from = last.saturating_sub(pending::ORDER_LOOKBACK);
            let left = pending::unanalysed_windows(&self.db, job_id, from, last - 1)?;
            let pending = self.pending.entry(job_id.to_string()).or_default();
            for (w, p) in left {
                pending.entry(w).or_insert(p);
            }
        }
        let pending = &self.pending[job_id];
        let first = pending.keys().next().copied().unwrap_or(last);
        let stamps = self.drop_stale(job_id, self.first_read(first), last)?;
        self.analyse_pending(job_id, last, now_ns, &stamps)
    }

    /// Analyses the job's pending windows up to `last`, in order; `stamps`: the windows'
    /// stamps in a shared database.
    fn analyse_pending(
        &mut self,
        job_id: &str,
        last: u64,
        now_ns: u64,
        stamps: &BTreeMap<u64, Stamp>,
    ) -> Result<Analysed, StoreError> {
        let Some(pending) = self.pending.get(job_id) else {
            return Ok(Analysed::default());
        };
        let windows: Vec<u64> = pending.range(..=last).map(|(w, _)| *w).collect();
        let mut out = Analysed::default();
        for w in windows {
            // Another server sharing the database analysed these very summaries already.
            let done_elsewhere = self.db.shared()
                && stamps.contains_key(&w)
                && matches!(read_diagnosis(&self.db, job_id, w), Ok(Some(d)) if d.basis.as_ref() == stamps.get(&w));
            let (n, a) = if done_elsewhere {
                (0, Vec::new())
            } else {
                self.analyse(job_id, w, now_ns, stamps)?
            };
            // Done only once analysed: a failure leaves it pending for the next try.
            if let Some(p) = self.pending.get_mut(job_id) {
                p.remove(&w);
                if p.is_empty() {
                    self.pending.remove(job_id);
                }
            }
            if !done_elsewhere {
                out.windows.push((w, n));
                out.alerts.extend(a);
            }
        }
        Ok(out)
    }

    /// Analyses one window from its stored summaries (with the earlier windows the live
    /// analysis reads), stores its diagnosis and advances the job's alerts.
    fn analyse(
        &mut self,
        job_id: &str,
        window: u64,
        now_ns: u64,
        stamps: &BTreeMap<u64, Stamp>,
    ) -> Result<(usize, Vec<crate::alerts::AlertEvent>), StoreError> {
        let key = (job_id.to_string(), window);
        let (summaries, stamp) = match self.cache.take(&key) {
            Some(v) => v,
            None => (
                load_window(&self.db, job_id, window)?,
                stamps.get(&window).copied().unwrap_or_default(),
            ),
        };
        // A stored diagnosis that no longer parses only costs the continuity check; the
        // API reports it as corrupt when asked for that window.
        let previous = match window.checked_sub(1) {
            Some(prev) => match read_diagnosis(&self.db, job_id, prev) {
                Err(StoreError::CorruptDiagnosis { .. }) => None,
                other => other?,
            },
            None => None,
        };
        let current = LiveWindow::from_summaries(&summaries);
        let first = self.first_read(window);
        self.cache_earlier_windows(job_id, first..window, stamps)?;
        // Read in place: a merged window holds a record per rank, too much to copy per post.
        let earlier: Vec<&LiveWindow> = (first..window)
            .filter_map(|w| self.windows.peek(&(job_id.to_string(), w)))
            .collect();
        let live = diagnose_window(
            &current,
            &earlier,
            previous.as_ref().map(|p| p.findings.as_slice()),
            &self.live,
        );
        let figures = WindowFigures::of(&current);
        self.windows.put(key.clone(), current, stamp);
        // Stamped when the analysis is done, on a server: the time a finding became
        // readable. Tests give their own time.
        let done_ns = if self.system_clock {
            crate::unix_ns().max(now_ns)
        } else {
            now_ns
        };
        let mut diagnosis = WindowDiagnosis::new(&summaries, live, done_ns);
        diagnosis.figures = figures;
        diagnosis.basis = self.db.shared().then_some(stamp);
        if let Some(logs) = self.logs.verdict_for(job_id, window) {
            let totals = crate::logs::totals(&self.db, job_id)?;
            diagnosis.merge_logs(logs, totals);
        }
        let n = diagnosis.findings.len();
        self.store_diagnosis(job_id, window, &diagnosis, done_ns)?;
        self.cache.put(key, summaries, stamp);
        let db = &self.db;
        let alerts = crate::alerts::evaluate(
            db,
            job_id,
            window,
            &diagnosis.findings,
            &self.alert_rules,
            now_ns,
            |w| match read_diagnosis(db, job_id, w) {
                Ok(d) => Ok(d.map(|d| d.findings)),
                // A diagnosis that no longer parses counts as a window without data.
                Err(StoreError::CorruptDiagnosis { .. }) => Ok(None),
                Err(e) => Err(e),
            },
        )?;
        Ok((n, alerts))
    }

    /// Analyses the pending windows that are due at `now_ns`, every job's (the server
    /// calls it a few times a second); returns the alert events to send.
    pub fn analyse_due(
        &mut self,
        now_ns: u64,
    ) -> Result<Vec<crate::alerts::AlertEvent>, StoreError> {
        let delay = self.analysis_delay_ns;
        let jobs: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| p.values().any(|p| p.due(now_ns, delay)))
            .map(|(j, _)| j.clone())
            .collect();
        let mut alerts = Vec::new();
        for job in jobs {
            alerts.extend(self.analyse_locked(&job, now_ns, false)?);
        }
        Ok(alerts)
    }

    /// Analyses every pending window of `job_id` (of every job when `None`), so that
    /// what is read next holds every summary stored; returns the alert events to send.
    pub fn settle(
        &mut self,
        job_id: Option<&str>,
        now_ns: u64,
    ) -> Result<Vec<crate::alerts::AlertEvent>, StoreError> {
        let jobs: Vec<String> = match job_id {
            Some(j) if self.pending.contains_key(j) => vec![j.to_string()],
            Some(_) => vec![],
            None => self.pending.keys().cloned().collect(),
        };
        let mut alerts = Vec::new();
        for job in jobs {
            alerts.extend(self.analyse_locked(&job, now_ns, true)?);
        }
        Ok(alerts)
    }

    /// The job's latest window stored and not analysed yet, with its ranks so far.
    pub fn arriving(&self, job_id: &str) -> Option<ArrivingWindow> {
        let (w, p) = self.pending.get(job_id)?.iter().next_back()?;
        Some(p.arriving(*w))
    }

    /// [`Store::analyse_in_order`] under the job's lock; the alerts it made.
    fn analyse_locked(
        &mut self,
        job_id: &str,
        now_ns: u64,
        all: bool,
    ) -> Result<Vec<crate::alerts::AlertEvent>, StoreError> {
        if self.last_due(job_id, now_ns, all).is_none() {
            return Ok(Vec::new());
        }
        self.db.lock_job(job_id)?;
        let out = self.analyse_in_order(job_id, now_ns, all);
        let unlocked = self.db.unlock_job(job_id);
        let out = out?;
        unlocked?;
        Ok(out.alerts)
    }

    /// In a shared database, drops what the caches hold of the job's windows
    /// `from..=to` that another server changed since it was cached; returns the
    /// windows' stamps as stored. A single server's caches are the database's: nothing
    /// to check.
    fn drop_stale(
        &mut self,
        job_id: &str,
        from: u64,
        to: u64,
    ) -> Result<BTreeMap<u64, Stamp>, StoreError> {
        if !self.db.shared() {
            return Ok(Default::default());
        }
        let stamps: BTreeMap<u64, Stamp> = window_stamps(&self.db, job_id, from, to)?
            .into_iter()
            .map(|(w, (stamp, _))| (w, stamp))
            .collect();
        for w in from..=to {
            let key = (job_id.to_string(), w);
            let stored = stamps.get(&w).copied().unwrap_or_default();
            if self.cache.stamp(&key).is_some_and(|s| s != stored) {
                self.cache.take(&key);
            }
            if self.windows.stamp(&key).is_some_and(|s| s != stored) {
                self.windows.take(&key);
            }
        }
        Ok(stamps)
    }

    /// The job's latest `limit` analysed windows, oldest first, each with its diagnosis
    /// (for the dashboard's charts).
    pub fn timeline(
        &self,
        job_id: &str,
        limit: usize,
    ) -> Result<Vec<(u64, WindowDiagnosis)>, StoreError> {
        // One query for the rows; a diagnosis that no longer parses is left out.
        let rows = self.db.query(
            "SELECT window_index, diagnosis FROM findings WHERE job_id = ?1
             ORDER BY window_index DESC LIMIT ?2",
            params![job_id, limit_i64(limit)],
        )?;
        let mut out = Vec::new();
        for mut r in rows {
            if let Ok(d) = serde_json::from_str(&r.text(1)?) {
                out.push((r.uint(0)?, d));
            }
        }
        out.reverse();
        Ok(out)
    }

    /// One retention pass (see [`crate::retention`]); the deleted jobs leave the caches.
    pub fn prune(
        &mut self,
        policy: crate::retention::Retention,
        now_ns: u64,
    ) -> Result<crate::retention::Pruned, StoreError> {
        let (gone, pruned) = crate::retention::prune(&self.db, policy, now_ns)?;
        for job in &gone {
            self.pending.remove(job);
            self.cache.forget_job(job);
            self.windows.forget_job(job);
            self.logs.forget(job);
        }
        Ok(pruned)
    }

    /// The main-thread stacks the agents captured in a window, one per rank (the stuck
    /// ranks', and those of the ranks beside them), outermost frame first.
    pub fn stacks(
        &self,
        job_id: &str,
        window: u64,
    ) -> Result<Vec<flare_report::RankStack>, StoreError> {
        let mut out: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
        // The window's decoded summaries when ingest still holds them: a page refreshing
        // every 2 s must not decode them again each time. Another server may have
        // changed a shared database's since.
        let key = (job_id.to_string(), window);
        let loaded;
        let summaries = match self.cache.peek(&key).filter(|_| !self.db.shared()) {
            Some(v) => v,
            None => {
                loaded = load_window(&self.db, job_id, window)?;
                &loaded
            }
        };
        for s in summaries {
            let captured = s
                .hangs
                .iter()
                .map(|h| (h.rank, &h.stacks))
                .chain(s.peer_stacks.iter().map(|p| (p.rank, &p.stacks)));
            for (rank, stacks) in captured {
                if let Some(t) = flare_model::ThreadStack::main_of(stacks) {
                    out.entry(rank)
                        .or_insert_with(|| t.frames.iter().rev().cloned().collect());
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|(rank, frames)| flare_report::RankStack { rank, frames })
            .collect())
    }

    /// Stamps diagnoses with the system clock when their analysis is done (servers).
    pub fn use_system_clock(&mut self) {
        self.system_clock = true;
    }

    /// How long a window missing ranks waits for them after its latest summary.
    pub fn set_analysis_delay(&mut self, delay: std::time::Duration) {
        self.analysis_delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    }

    /// The rules alerts follow (the default until set).
    pub fn set_alert_rules(&mut self, rules: crate::alerts::AlertRules) {
        self.alert_rules = rules;
    }

    /// Bounds the memory the store keeps between posts (decoded summaries two thirds,
    /// merged windows one third); empties both caches.
    pub fn set_cache_bytes(&mut self, bytes: usize) {
        let summaries = bytes / 3 * 2;
        self.cache = cache::summaries_cache(summaries);
        self.windows = cache::windows_cache(bytes - summaries);
    }

    /// The latest alert events, newest first, of one job or of all.
    pub fn alert_events(
        &self,
        job_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<crate::alerts::AlertEvent>, StoreError> {
        crate::alerts::events(&self.db, job_id, limit)
    }

    /// Silences a job's alerts until `until` (Unix ns); false when the job is unknown.
    pub fn silence(&self, job_id: &str, until: u64, reason: &str) -> Result<bool, StoreError> {
        if !self.job_exists(job_id)? {
            return Ok(false);
        }
        crate::alerts::set_silence(&self.db, job_id, until, reason)?;
        Ok(true)
    }

    /// Lifts a job's silence; false when it had none.
    pub fn unsilence(&self, job_id: &str) -> Result<bool, StoreError> {
        crate::alerts::clear_silence(&self.db, job_id)
    }

    fn job_exists(&self, job_id: &str) -> Result<bool, StoreError> {
        Ok(self
            .db
            .query_opt("SELECT 1 FROM jobs WHERE job_id = ?1", params![job_id])?
            .is_some())
    }

    /// Brings the job's `windows` (those before the one analysed that the live analysis
    /// reads with it) into the merged-window cache, from the decoded summaries or else
    /// from the stored ones; windows without summaries stay out. `stamps`: the windows'
    /// stamps in a shared database.
    fn cache_earlier_windows(
        &mut self,
        job_id: &str,
        windows: std::ops::Range<u64>,
        stamps: &BTreeMap<u64, Stamp>,
    ) -> Result<(), StoreError> {
        for w in windows {
            let key = (job_id.to_string(), w);
            if self.windows.get(&key).is_some() {
                continue;
            }
            let stamp = stamps.get(&w).copied().unwrap_or_default();
            let merged = match self.cache.take(&key) {
                Some((v, stamp)) => {
                    let lw = LiveWindow::from_summaries(&v);
                    self.cache.put(key.clone(), v, stamp);
                    lw
                }
                None => {
                    let v = load_window(&self.db, job_id, w)?;
                    if v.is_empty() {
                        continue;
                    }
                    LiveWindow::from_summaries(&v)
                }
            };
            self.windows.put(key, merged, stamp);
        }
        Ok(())
    }

    /// The job, its ranks, the summary and its log lines, in one transaction.
    fn persist(
        &mut self,
        summary: &WindowSummary,
        compressed: Vec<u8>,
        now_ns: u64,
    ) -> Result<Persisted, StoreError> {
        let w = to_i64("window", summary.window)?;
        let now = to_i64("time", now_ns)?;
        let stored = self.db.transaction(|tx| {
            tx.execute(
                "INSERT INTO jobs (job_id, world_size, first_window, last_window, first_seen_unix_ns, last_seen_unix_ns)
                 VALUES (?1, ?2, ?3, ?3, ?4, ?4)
                 ON CONFLICT(job_id) DO UPDATE SET
                    world_size = CASE WHEN excluded.world_size > jobs.world_size THEN excluded.world_size ELSE jobs.world_size END,
                    first_window = CASE WHEN excluded.first_window < jobs.first_window THEN excluded.first_window ELSE jobs.first_window END,
                    last_window = CASE WHEN excluded.last_window > jobs.last_window THEN excluded.last_window ELSE jobs.last_window END,
                    last_seen_unix_ns = CASE WHEN excluded.last_seen_unix_ns > jobs.last_seen_unix_ns THEN excluded.last_seen_unix_ns ELSE jobs.last_seen_unix_ns END",
                params![&summary.job_id, summary.world_size, w, now],
            )?;
            for r in &summary.ranks {
                tx.execute(
                    "INSERT INTO ranks (job_id, rank, node, last_window) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(job_id, rank) DO UPDATE SET
                        node = CASE WHEN excluded.last_window >= ranks.last_window THEN excluded.node ELSE ranks.node END,
                        last_window = CASE WHEN excluded.last_window > ranks.last_window THEN excluded.last_window ELSE ranks.last_window END",
                    params![&summary.job_id, r.rank, &summary.node, w],
                )?;
            }
            tx.execute(
                "INSERT INTO summaries (job_id, window_index, node, received_unix_ns, ranks, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(job_id, window_index, node) DO UPDATE SET
                    received_unix_ns = excluded.received_unix_ns, ranks = excluded.ranks, body = excluded.body",
                params![
                    &summary.job_id,
                    w,
                    &summary.node,
                    now,
                    summary.ranks.len() as i64,
                    &compressed
                ],
            )?;
            match &summary.logs {
                Some(x) => Ok(Some(crate::logs::persist(tx, summary, x)?)),
                None => Ok(None),
            }
        })?;
        let (stamp, ranks) = if self.db.shared() {
            let (stamp, ranks) =
                window_stamps(&self.db, &summary.job_id, summary.window, summary.window)?
                    .remove(&summary.window)
                    .unwrap_or_default();
            (stamp, Some(ranks))
        } else {
            (Stamp::default(), None)
        };
        Ok(Persisted {
            logs: stored,
            stamp,
            stored_ranks: ranks,
        })
    }

    /// Stores a window's diagnosis (one statement, so atomic by itself).
    fn store_diagnosis(
        &self,
        job_id: &str,
        window: u64,
        diagnosis: &WindowDiagnosis,
        now_ns: u64,
    ) -> Result<(), StoreError> {
        let kinds = serde_json::to_string(&diagnosis.kinds()).map_err(StoreError::Encode)?;
        let body = serde_json::to_string(diagnosis).map_err(StoreError::Encode)?;
        self.db.execute(
            "INSERT INTO findings (job_id, window_index, findings, kinds, diagnosis, created_unix_ns)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(job_id, window_index) DO UPDATE SET
                findings = excluded.findings, kinds = excluded.kinds,
                diagnosis = excluded.diagnosis, created_unix_ns = excluded.created_unix_ns",
            params![
                job_id,
                to_i64("window", window)?,
                diagnosis.findings.len() as i64,
                &kinds,
                &body,
                to_i64("time", now_ns)?
            ],
        )?;
        Ok(())
    }

    pub fn jobs(&self) -> Result<Vec<JobRow>, StoreError> {
        self.job_rows(None)
    }

    pub fn job(&self, job_id: &str) -> Result<Option<JobRow>, StoreError> {
        Ok(self.job_rows(Some(job_id))?.into_iter().next())
    }

    fn job_rows(&self, only: Option<&str>) -> Result<Vec<JobRow>, StoreError> {
        let rows = self.db.query(
            "SELECT j.job_id, j.world_size, j.first_window, j.last_window, j.last_seen_unix_ns,
                    (SELECT COUNT(DISTINCT node) FROM ranks r WHERE r.job_id = j.job_id),
                    (SELECT COUNT(*) FROM ranks r WHERE r.job_id = j.job_id),
                    f.window_index, f.findings
             FROM jobs j
             LEFT JOIN findings f ON f.job_id = j.job_id AND f.window_index =
                 (SELECT max(window_index) FROM findings g WHERE g.job_id = j.job_id)
             WHERE CAST(?1 AS TEXT) IS NULL OR j.job_id = ?1
             ORDER BY j.last_seen_unix_ns DESC, j.job_id",
            params![only],
        )?;
        rows.into_iter()
            .map(|mut r| {
                Ok(JobRow {
                    job_id: r.text(0)?,
                    world_size: u32::try_from(r.uint(1)?).unwrap_or(u32::MAX),
                    first_window: r.uint(2)?,
                    last_window: r.uint(3)?,
                    last_seen_unix_ns: r.uint(4)?,
                    nodes: r.uint(5)?,
                    ranks_seen: r.uint(6)?,
                    latest_analysed_window: r.opt_int(7)?.map(|w| w.max(0) as u64),
                    open_findings: r.opt_int(8)?.unwrap_or(0).max(0) as u64,
                })
            })
            .collect()
    }

    /// The window to show when none is asked for: the latest with findings, else the
    /// latest analysed.
    pub fn default_window(&self, job_id: &str) -> Result<Option<u64>, StoreError> {
        let w = self
            .db
            .query_one(
                "SELECT coalesce(
                    (SELECT max(window_index) FROM findings WHERE job_id = ?1 AND findings > 0),
                    (SELECT max(window_index) FROM findings WHERE job_id = ?1))",
                params![job_id],
            )?
            .opt_int(0)?;
        Ok(w.map(|w| w.max(0) as u64))
    }

    pub fn diagnosis(
        &self,
        job_id: &str,
        window: u64,
    ) -> Result<Option<WindowDiagnosis>, StoreError> {
        read_diagnosis(&self.db, job_id, window)
    }

    /// A job's stored summaries of windows `from..=to`, every node's, in window order
    /// (`flare compare` of live jobs), when there are at most `max` of them (counted
    /// before any is read).
    pub fn summaries(
        &self,
        job_id: &str,
        from: u64,
        to: u64,
        max: usize,
    ) -> Result<StoredSummaries, StoreError> {
        if self.job(job_id)?.is_none() {
            return Ok(StoredSummaries::UnknownJob);
        }
        let range = params![job_id, to_i64("from", from)?, to_i64("to", to)?];
        let count = self
            .db
            .query_one(
                "SELECT COUNT(*) FROM summaries WHERE job_id = ?1 AND window_index BETWEEN ?2 AND ?3",
                range,
            )?
            .uint(0)?;
        if count as usize > max {
            return Ok(StoredSummaries::TooMany(count as usize));
        }
        let windows = self.db.query(
            "SELECT DISTINCT window_index FROM summaries WHERE job_id = ?1 AND window_index BETWEEN ?2 AND ?3 ORDER BY window_index",
            range,
        )?;
        let mut out = Vec::new();
        for mut w in windows {
            out.extend(load_window(&self.db, job_id, w.uint(0)?)?);
        }
        Ok(StoredSummaries::Summaries(out))
    }

    pub fn windows_analysed(&self, job_id: &str) -> Result<u64, StoreError> {
        self.db
            .query_one(
                "SELECT COUNT(*) FROM findings WHERE job_id = ?1",
                params![job_id],
            )?
            .uint(0)
    }

    /// Per window, oldest first, the last `limit` analysed windows: count and kinds.
    pub fn history(&self, job_id: &str, limit: usize) -> Result<Vec<WindowHistory>, StoreError> {
        let rows = self.db.query(
            "SELECT window_index, findings, kinds FROM findings WHERE job_id = ?1
             ORDER BY window_index DESC LIMIT ?2",
            params![job_id, limit_i64(limit)],
        )?;
        let mut out = Vec::new();
        for mut row in rows {
            let (window, findings, kinds) = (row.uint(0)?, row.uint(1)?, row.text(2)?);
            let kinds =
                serde_json::from_str(&kinds).map_err(|source| StoreError::CorruptDiagnosis {
                    job_id: job_id.to_string(),
                    window,
                    source,
                })?;
            out.push(WindowHistory {
                window,
                findings,
                kinds,
            });
        }
        out.reverse();
        Ok(out)
    }
}

pub(crate) fn to_i64(what: &'static str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange { what, value })
}

/// A row limit as SQL's 64-bit integer (`usize::MAX`: no limit).
pub(crate) fn limit_i64(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Per window of `from..=to` that has summaries: how many, and the sum of their arrival
/// times modulo a prime. A summary added or replaced (by any server) changes it.
fn window_stamps(
    db: &Db,
    job_id: &str,
    from: u64,
    to: u64,
) -> Result<BTreeMap<u64, (Stamp, usize)>, StoreError> {
    let rows = db.query(
        "SELECT window_index, COUNT(*), CAST(SUM(received_unix_ns % 1000000007) AS BIGINT),
                CAST(SUM(ranks) AS BIGINT)
         FROM summaries WHERE job_id = ?1 AND window_index BETWEEN ?2 AND ?3
         GROUP BY window_index",
        params![job_id, to_i64("window", from)?, to_i64("window", to)?],
    )?;
    rows.into_iter()
        .map(|mut r| {
            Ok((
                r.uint(0)?,
                (Stamp(r.int(1)?, r.int(2)?), r.uint(3)? as usize),
            ))
        })
        .collect()
}

/// The stored diagnosis of one window (in or out of a transaction).
fn read_diagnosis(
    db: &Db,
    job_id: &str,
    window: u64,
) -> Result<Option<WindowDiagnosis>, StoreError> {
    let Ok(w) = i64::try_from(window) else {
        return Ok(None);
    };
    let Some(mut row) = db.query_opt(
        "SELECT diagnosis FROM findings WHERE job_id = ?1 AND window_index = ?2",
        params![job_id, w],
    )?
    else {
        return Ok(None);
    };
    serde_json::from_str(&row.text(0)?)
        .map(Some)
        .map_err(|source| StoreError::CorruptDiagnosis {
            job_id: job_id.to_string(),
            window,
            source,
        })
}

/// Every stored summary of a window, sorted by node (byte order, whatever the
/// database's collation).
fn load_window(db: &Db, job_id: &str, window: u64) -> Result<Vec<WindowSummary>, StoreError> {
    let rows = db.query(
        "SELECT node, body FROM summaries WHERE job_id = ?1 AND window_index = ?2",
        params![job_id, to_i64("window", window)?],
    )?;
    let mut out = Vec::new();
    for mut row in rows {
        let (node, body) = (row.text(0)?, row.bytes(1)?);
        let corrupt = |reason: String| StoreError::CorruptSummary {
            job_id: job_id.to_string(),
            window,
            node: node.clone(),
            reason,
        };
        // Stored bodies passed the size check on the way in; the bound here only guards
        // against a database edited by hand.
        let json = ingest::decompress(&body, usize::MAX / 2).map_err(|e| corrupt(e.to_string()))?;
        let s: WindowSummary = serde_json::from_slice(&json).map_err(|e| corrupt(e.to_string()))?;
        out.push(s);
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(out)
}

/// What [`Store::summaries`] found.
pub enum StoredSummaries {
    UnknownJob,
    /// More than asked for: how many.
    TooMany(usize),
    Summaries(Vec<WindowSummary>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_model::summary::SUMMARY_VERSION;
    use flare_model::RankSummary;

    fn summary(node: &str, window: u64, ranks: &[u32]) -> WindowSummary {
        WindowSummary {
            parallel: None,
            version: SUMMARY_VERSION,
            job_id: "job".into(),
            node: node.into(),
            window,
            window_ns: 1_000,
            start_unix_ns: window * 1_000,
            end_unix_ns: (window + 1) * 1_000,
            world_size: 8,
            ranks: ranks
                .iter()
                .map(|&rank| RankSummary {
                    observed_ns: 1_000,
                    ..RankSummary::empty(rank, rank % 4, rank)
                })
                .collect(),
            hangs: vec![],
            peer_stacks: Vec::new(),
            logs: None,
        }
    }

    fn put(store: &mut Store, s: WindowSummary) -> Ingested {
        let z = zstd::encode_all(serde_json::to_vec(&s).unwrap().as_slice(), 3).unwrap();
        store.ingest(s, z, 42).unwrap()
    }

    #[test]
    fn resent_summaries_replace_and_missing_ranks_are_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&DbLocation::Sqlite(dir.path().join("db.sqlite"))).unwrap();
        put(&mut store, summary("a", 5, &[0, 1]));
        put(&mut store, summary("a", 5, &[0, 1]));
        put(&mut store, summary("b", 5, &[4]));
        // Three ranks of eight: pending until read (or a second passes).
        assert_eq!(store.diagnosis("job", 5).unwrap(), None);
        store.settle(Some("job"), 43).unwrap();
        let d = store.diagnosis("job", 5).unwrap().unwrap();
        assert_eq!(d.nodes, 2);
        assert_eq!(d.missing, vec![(2, 3), (5, 7)]);
        let doc = d.document("j", 0, 1, vec![]);
        assert_eq!(doc.job.missing_ranks, vec![2, 3, 5, 6, 7]);
        assert_eq!(doc.job.missing_rank_count, 5);
        let n = store
            .db
            .query_one("SELECT COUNT(*) FROM summaries", &[])
            .unwrap()
            .int(0)
            .unwrap();
        assert_eq!(n, 2);
        let jobs = store.jobs().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!((jobs[0].nodes, jobs[0].ranks_seen), (2, 3));
        assert_eq!(jobs[0].latest_analysed_window, Some(5));
    }

    fn put_at(store: &mut Store, s: WindowSummary, now_ns: u64) -> Ingested {
        let z = zstd::encode_all(serde_json::to_vec(&s).unwrap().as_slice(), 3).unwrap();
        store.ingest(s, z, now_ns).unwrap()
    }

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_window_is_analysed_once_when_every_rank_is_in_or_when_its_posts_stop() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&DbLocation::Sqlite(dir.path().join("db.sqlite"))).unwrap();
        let t = 100 * SECOND;
        // Window 1: four nodes of two ranks; analysed at the fourth post only.
        let analysed: Vec<Option<usize>> = (0..4u32)
            .map(|n| {
                put_at(
                    &mut store,
                    summary(&format!("n{n}"), 1, &[2 * n, 2 * n + 1]),
                    t,
                )
                .findings
            })
            .collect();
        assert_eq!(analysed, [None, None, None, Some(0)]);
        assert_eq!(store.windows_analysed("job").unwrap(), 1);
        // Window 2: one node posts, then nothing: due a second after its last post.
        assert_eq!(
            put_at(&mut store, summary("n0", 2, &[0, 1]), t).findings,
            None
        );
        store.analyse_due(t + SECOND / 2).unwrap();
        assert_eq!(store.diagnosis("job", 2).unwrap(), None);
        store.analyse_due(t + SECOND).unwrap();
        let d = store.diagnosis("job", 2).unwrap().unwrap();
        assert_eq!(d.missing, vec![(2, 7)]);
        // Window 3 pending, window 4 complete: 3 is analysed first, then 4.
        put_at(&mut store, summary("n0", 3, &[0, 1]), t + 2 * SECOND);
        for n in 0..4u32 {
            put_at(
                &mut store,
                summary(&format!("n{n}"), 4, &[2 * n, 2 * n + 1]),
                t + 2 * SECOND,
            );
        }
        assert_eq!(
            store.diagnosis("job", 3).unwrap().unwrap().missing,
            vec![(2, 7)]
        );
        assert!(store
            .diagnosis("job", 4)
            .unwrap()
            .unwrap()
            .missing
            .is_empty());
        assert_eq!(store.windows_analysed("job").unwrap(), 4);
    }

    #[test]
    fn a_window_left_pending_by_a_stopped_server_is_analysed_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        let now = crate::unix_ns();
        {
            let mut store = Store::open(&DbLocation::Sqlite(path.clone())).unwrap();
            put_at(&mut store, summary("n0", 7, &[0, 1, 2, 3]), now);
        }
        let mut store = Store::open(&DbLocation::Sqlite(path.clone())).unwrap();
        store.analyse_due(now + SECOND / 2).unwrap();
        assert_eq!(store.diagnosis("job", 7).unwrap(), None);
        store.analyse_due(now + SECOND).unwrap();
        let d = store.diagnosis("job", 7).unwrap().unwrap();
        assert_eq!((d.ranks_with_data, d.missing.clone()), (4, vec![(4, 7)]));
        // Analysed: a third server has nothing left to do.
        drop(store);
        let store = Store::open(&DbLocation::Sqlite(path)).unwrap();
        assert!(store.pending.is_empty());
    }

    #[test]
    fn a_cold_cache_reloads_the_window_from_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        {
            let mut store = Store::open(&DbLocation::Sqlite(path.clone())).unwrap();
            put(&mut store, summary("a", 1, &[0, 1, 2, 3]));
        }
        let mut store = Store::open(&DbLocation::Sqlite(path.clone())).unwrap();
        put(&mut store, summary("b", 1, &[4, 5, 6, 7]));
        let d = store.diagnosis("job", 1).unwrap().unwrap();
        assert_eq!((d.nodes, d.ranks_with_data), (2, 8));
        assert!(d.missing.is_empty());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.sqlite");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA user_version=99")
            .unwrap();
        let err = Store::open(&DbLocation::Sqlite(path.clone()))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("schema version 99"), "{err}");
    }
}
