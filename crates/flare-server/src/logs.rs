//! A job's logs as its agents send them (`flare agent --logs`: per window, the excerpt of
//! each followed file, see `flare_log_diagnosis::excerpt`): kept in the database, bounded per
//! file and per job, and followed in memory by one log collector per job, so that each
//! window's diagnosis can say why the job failed seconds after its logs said it.
//!
//! The lines are persisted first (in the summary's transaction), then folded into the
//! job's collector. A job not followed in memory (a restarted server, an evicted job) is
//! rebuilt from its stored lines: what is stored is each file's kept lines and each
//! writer's latest progress line, so a rebuilt verdict may know less of the iterations
//! at which early lines were written; the root cause, culprit and category come from the
//! kept lines. A followed job is rebuilt too when the database holds lines it did not
//! fold (another server sharing the database stored them).

use crate::store::db::{params, Db};
use crate::store::{to_i64, StoreError};
use flare_log_diagnosis::{Collector, Limits, LogDiagnosis};
use flare_model::{LogExcerpt, WindowSummary};
use std::collections::HashMap;

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log_lines (
    job_id TEXT NOT NULL REFERENCES jobs(job_id),
    node   TEXT NOT NULL,
    file   TEXT NOT NULL,
    line   INTEGER NOT NULL,
    text   TEXT NOT NULL,
    PRIMARY KEY (job_id, node, file, line)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_progress (
    job_id TEXT NOT NULL REFERENCES jobs(job_id),
    node   TEXT NOT NULL,
    file   TEXT NOT NULL,
    writer TEXT NOT NULL,
    line   INTEGER NOT NULL,
    text   TEXT NOT NULL,
    PRIMARY KEY (job_id, node, file, writer)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_windows (
    job_id        TEXT NOT NULL REFERENCES jobs(job_id),
    node          TEXT NOT NULL,
    window_index  INTEGER NOT NULL,
    lines_read    INTEGER NOT NULL,
    lines_sent    INTEGER NOT NULL,
    lines_dropped INTEGER NOT NULL,
    over_cap      INTEGER NOT NULL,
    PRIMARY KEY (job_id, node, window_index)
) WITHOUT ROWID;
";

/// Lines kept per file of a node: the first ones (the cause comes before its effects).
pub const MAX_LINES_PER_FILE: i64 = 4_096;
/// Lines kept per job, every node and file.
pub const MAX_LINES_PER_JOB: i64 = 262_144;
/// Jobs followed in memory at once; the least recently fed is dropped (and rebuilt from
/// its stored lines when it sends again).
const MAX_JOBS_FOLLOWED: usize = 64;
/// Windows a log verdict stays on a job's diagnoses after the last failure line came:
/// a job that died has no later windows; one that goes on training was not stopped by it.
pub const FRESH_WINDOWS: u64 = 5;

/// Lines of an excerpt that were stored (new, within the caps), in each file's order,
/// for the collector: (file, line, text).
pub struct Stored {
    lines: Vec<(String, u64, String)>,
    /// The excerpt held failure lines that were stored.
    failure_lines: bool,
    /// The job's stored failure lines before these and after, as the database counted.
    lines_before: i64,
    lines_after: i64,
}

/// Stores `s`'s excerpt within the caps (in the summary's transaction).
pub fn persist(tx: &Db, s: &WindowSummary, x: &LogExcerpt) -> Result<Stored, StoreError> {
    let w = to_i64("window", s.window)?;
    let lines_before = tx
        .query_one(
            "SELECT COUNT(*) FROM log_lines WHERE job_id = ?1",
            params![&s.job_id],
        )?
        .int(0)?;
    let mut job_lines = lines_before;
    let mut file_lines: HashMap<&str, i64> = HashMap::new();
    let mut out = Stored {
        lines: Vec::new(),
        failure_lines: false,
        lines_before,
        lines_after: lines_before,
    };
    let mut over_cap = 0i64;
    for l in &x.lines {
        let n = match file_lines.get_mut(l.file.as_str()) {
            Some(n) => n,
            None => {
                let n = tx
                    .query_one(
                        "SELECT COUNT(*) FROM log_lines WHERE job_id = ?1 AND node = ?2 AND file = ?3",
                        params![&s.job_id, &s.node, &l.file],
                    )?
                    .int(0)?;
                file_lines.entry(l.file.as_str()).or_insert(n)
            }
        };
        if *n >= MAX_LINES_PER_FILE || job_lines >= MAX_LINES_PER_JOB {
            over_cap += 1;
            continue;
        }
        let added = tx.execute(
            "INSERT INTO log_lines (job_id, node, file, line, text) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT DO NOTHING",
            params![
                &s.job_id,
                &s.node,
                &l.file,
                to_i64("line", l.line)?,
                &l.text
            ],
        )?;
        if added > 0 {
            *n += 1;
            job_lines += 1;
            out.failure_lines = true;
            out.lines.push((l.file.clone(), l.line, l.text.clone()));
        }
    }
    // each writer's latest progress line replaces its earlier one
    for p in &x.progress {
        let changed = tx.execute(
            "INSERT INTO log_progress (job_id, node, file, writer, line, text) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(job_id, node, file, writer) DO UPDATE SET line = excluded.line, text = excluded.text
             WHERE excluded.line > log_progress.line",
            params![
                &s.job_id,
                &s.node,
                &p.file,
                &p.writer,
                to_i64("line", p.line)?,
                &p.text
            ],
        )?;
        if changed > 0 {
            out.lines.push((p.file.clone(), p.line, p.text.clone()));
        }
    }
    tx.execute(
        "INSERT INTO log_windows (job_id, node, window_index, lines_read, lines_sent, lines_dropped, over_cap)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(job_id, node, window_index) DO UPDATE SET
            lines_read = excluded.lines_read, lines_sent = excluded.lines_sent,
            lines_dropped = excluded.lines_dropped, over_cap = excluded.over_cap",
        params![
            &s.job_id,
            &s.node,
            w,
            to_i64("lines", x.lines_read)?,
            x.lines.len() as i64,
            to_i64("lines", x.lines_dropped)?,
            over_cap
        ],
    )?;
    out.lines_after = job_lines;
    // each file in its order (its progress lines among its other lines)
    out.lines.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    Ok(out)
}

/// One job's logs, followed.
struct JobLogs {
    collector: Collector,
    /// (node, file) -> the collector's file.
    files: HashMap<(String, String), usize>,
    /// The latest window whose excerpt brought failure lines.
    last_failure_window: Option<u64>,
    /// The verdict, while no line came since.
    verdict: Option<LogDiagnosis>,
    used: u64,
    /// The job's stored failure lines folded in.
    lines_folded: i64,
}

impl JobLogs {
    fn new() -> JobLogs {
        JobLogs {
            collector: Collector::new(Limits::default()),
            files: HashMap::new(),
            last_failure_window: None,
            verdict: None,
            used: 0,
            lines_folded: 0,
        }
    }

    /// One line of a node's file, in the file's order.
    fn fold(&mut self, node: &str, file: &str, line: u64, text: &str) {
        let key = (node.to_string(), file.to_string());
        let id = match self.files.get(&key) {
            Some(&id) => id,
            None => {
                // `node:path`, as scp writes it: the node is the file's host
                let id = self.collector.file_on_host(&format!("{node}:{file}"), node);
                self.files.insert(key, id);
                id
            }
        };
        self.collector.numbered_line(id, line, text);
        self.verdict = None;
    }
}

/// Every job's followed logs.
#[derive(Default)]
pub struct Logs {
    jobs: HashMap<String, JobLogs>,
    clock: u64,
}

impl Logs {
    /// Folds what `persist` stored for `s` into the job's collector (rebuilding the job
    /// from the database first when it is not followed, or when the database held lines
    /// it had not folded; the rebuilt job holds the new ones already).
    pub fn follow(&mut self, db: &Db, s: &WindowSummary, stored: Stored) -> Result<(), StoreError> {
        self.clock += 1;
        let clock = self.clock;
        match self.jobs.get_mut(&s.job_id) {
            Some(job) if job.lines_folded == stored.lines_before => {
                for (file, line, text) in &stored.lines {
                    job.fold(&s.node, file, *line, text);
                }
            }
            _ => {
                let job = rebuild(db, &s.job_id)?;
                self.insert(s.job_id.clone(), job);
            }
        }
        let job = self.jobs.get_mut(&s.job_id).expect("followed");
        job.used = clock;
        job.lines_folded = stored.lines_after;
        if stored.failure_lines {
            job.last_failure_window = job.last_failure_window.max(Some(s.window));
        }
        Ok(())
    }

    /// Stops following a job (its rows were deleted).
    pub fn forget(&mut self, job_id: &str) {
        self.jobs.remove(job_id);
    }

    fn insert(&mut self, job_id: String, job: JobLogs) {
        if self.jobs.len() >= MAX_JOBS_FOLLOWED {
            if let Some(oldest) = self
                .jobs
                .iter()
                .min_by_key(|(_, j)| j.used)
                .map(|(k, _)| k.clone())
            {
                self.jobs.remove(&oldest);
            }
        }
        self.jobs.insert(job_id, job);
    }

    /// The job's log verdict for window `window`: while failure lines are recent (see
    /// [`FRESH_WINDOWS`]); `None` for a job without logs or whose logs went quiet.
    pub fn verdict_for(&mut self, job_id: &str, window: u64) -> Option<&LogDiagnosis> {
        let job = self.jobs.get_mut(job_id)?;
        let last = job.last_failure_window?;
        if window > last + FRESH_WINDOWS {
            return None;
        }
        if job.verdict.is_none() {
            job.verdict = Some(job.collector.diagnosis());
        }
        job.verdict.as_ref()
    }
}

/// A job's collector from its stored lines and latest progress lines, each file in order.
fn rebuild(db: &Db, job_id: &str) -> Result<JobLogs, StoreError> {
    let mut job = JobLogs::new();
    let mut rows = db.query(
        "SELECT node, file, line, text FROM log_lines WHERE job_id = ?1
         UNION ALL
         SELECT node, file, line, text FROM log_progress WHERE job_id = ?1",
        params![job_id],
    )?;
    // Byte order, whatever the database's collation.
    let mut lines = Vec::with_capacity(rows.len());
    for r in &mut rows {
        lines.push((r.text(0)?, r.text(1)?, r.uint(2)?, r.text(3)?));
    }
    lines.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
    for (node, file, line, text) in &lines {
        job.fold(node, file, *line, text);
    }
    // the latest window that brought failure lines, as stored
    let last = db
        .query_one(
            "SELECT max(window_index) FROM log_windows WHERE job_id = ?1 AND lines_sent > 0",
            params![job_id],
        )?
        .opt_int(0)?;
    job.last_failure_window = last.map(|w| w.max(0) as u64);
    Ok(job)
}

/// What the job's logs cost and lost, for the notes: (lines read, sent, dropped by the
/// agents, over the server's caps).
pub fn totals(db: &Db, job_id: &str) -> Result<(u64, u64, u64, u64), StoreError> {
    let mut t = db.query_one(
        "SELECT CAST(coalesce(sum(lines_read), 0) AS BIGINT), CAST(coalesce(sum(lines_sent), 0) AS BIGINT),
                CAST(coalesce(sum(lines_dropped), 0) AS BIGINT), CAST(coalesce(sum(over_cap), 0) AS BIGINT)
         FROM log_windows WHERE job_id = ?1",
        params![job_id],
    )?;
    Ok((t.uint(0)?, t.uint(1)?, t.uint(2)?, t.uint(3)?))
}

#[cfg(test)]
mod tests {
    use crate::store::{DbLocation, Store};
    use flare_log_diagnosis::Excerpter;
    use flare_model::summary::SUMMARY_VERSION;
    use flare_model::{
        FailureCategory, FindingKind, LogExcerpt, LogExcerptLine, LogProgressLine, WindowSummary,
    };
    use std::path::Path;

    /// A real failed torchrun job's console (rank 2 raised an IndexError), as an agent
    /// would send it over two windows.
    fn excerpts() -> (LogExcerpt, LogExcerpt) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/logs/real_jobs/exception/console.log");
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let file = "/jobs/42/console.log";
        let mut x = Excerpter::for_path(file);
        let mut cut = |part: &[&str]| {
            let mut e = LogExcerpt {
                lines_read: part.len() as u64,
                ..LogExcerpt::default()
            };
            for l in part {
                if x.line(l).is_some() {
                    e.lines.push(LogExcerptLine {
                        file: file.into(),
                        line: x.line_no(),
                        text: l.to_string(),
                    });
                }
            }
            e.progress = x
                .take_progress()
                .into_iter()
                .map(|(writer, line, text)| LogProgressLine {
                    file: file.into(),
                    writer,
                    line,
                    text,
                })
                .collect();
            e
        };
        let half = lines.len() / 2;
        (cut(&lines[..half]), cut(&lines[half..]))
    }

    /// A summary with logs only: the job's processes are gone.
    fn logs_only(window: u64, logs: LogExcerpt) -> WindowSummary {
        WindowSummary {
            parallel: None,
            version: SUMMARY_VERSION,
            job_id: "job".into(),
            node: "node-a".into(),
            window,
            window_ns: 2_000_000_000,
            start_unix_ns: window * 2_000_000_000,
            end_unix_ns: (window + 1) * 2_000_000_000,
            world_size: 0,
            ranks: vec![],
            hangs: vec![],
            peer_stacks: vec![],
            logs: Some(logs),
        }
    }

    fn put(store: &mut Store, s: WindowSummary) {
        let z = zstd::encode_all(serde_json::to_vec(&s).unwrap().as_slice(), 3).unwrap();
        store.ingest(s, z, 42).unwrap();
    }

    /// The window's top finding, read as the API reads (pending windows analysed first).
    fn top(store: &mut Store, window: u64) -> Option<(FindingKind, Option<u32>, FailureCategory)> {
        store.settle(Some("job"), 43).unwrap();
        let d = store.diagnosis("job", window).unwrap().unwrap();
        d.findings.first().map(|f| {
            (
                f.kind,
                f.first_rank(),
                f.failure
                    .as_ref()
                    .map_or(FailureCategory::Unknown, |x| x.category),
            )
        })
    }

    #[test]
    fn a_job_s_logs_say_why_it_failed_across_windows_and_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let db = DbLocation::Sqlite(dir.path().join("db.sqlite"));
        let (first, second) = excerpts();
        let want = Some((FindingKind::JobFailure, Some(2), FailureCategory::UserCode));
        {
            let mut store = Store::open(&db).unwrap();
            put(&mut store, logs_only(10, first));
            put(&mut store, logs_only(11, second.clone()));
            assert_eq!(top(&mut store, 11), want);
            // re-sent: nothing doubles
            put(&mut store, logs_only(11, second));
            store.settle(Some("job"), 43).unwrap();
            let d = store.diagnosis("job", 11).unwrap().unwrap();
            assert_eq!(
                d.findings
                    .iter()
                    .filter(|f| f.kind == FindingKind::JobFailure && f.first_rank() == Some(2))
                    .count(),
                1
            );
            assert!(
                d.notes
                    .iter()
                    .any(|n| n.starts_with("logs: the agents read")),
                "{:?}",
                d.notes
            );
        }
        // a restarted server rebuilds the job from its stored lines
        let mut store = Store::open(&db).unwrap();
        put(&mut store, logs_only(12, LogExcerpt::default()));
        assert_eq!(top(&mut store, 12), want);
        // windows long after the last failure line no longer carry it
        put(
            &mut store,
            logs_only(11 + super::FRESH_WINDOWS + 1, LogExcerpt::default()),
        );
        assert_eq!(top(&mut store, 11 + super::FRESH_WINDOWS + 1), None);
    }

    #[test]
    fn lines_over_the_file_cap_are_counted_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&DbLocation::Sqlite(dir.path().join("db.sqlite"))).unwrap();
        let n = super::MAX_LINES_PER_FILE as u64 + 10;
        let x = LogExcerpt {
            lines_read: n,
            lines: (1..=n)
                .map(|i| LogExcerptLine {
                    file: "/l/rank0.log".into(),
                    line: i,
                    text: format!("[rank0]: RuntimeError: boom {i}"),
                })
                .collect(),
            ..LogExcerpt::default()
        };
        put(&mut store, logs_only(3, x));
        let totals = super::totals(&store.db, "job").unwrap();
        assert_eq!(totals, (n, n, 0, 10));
    }
}
