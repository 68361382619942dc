//! Keeping the database bounded, and copying it while the server runs.
//!
//! Retention: jobs not heard from for longer than the age limit are deleted whole (every
//! table); then, while the stored summaries (the bulk of the database) exceed the size
//! limit, the oldest windows' summaries are deleted, oldest first across jobs (their
//! diagnoses stay: the history and the dashboard's charts keep them). SQLite reuses the
//! freed pages, so the file stops growing rather than shrinking; PostgreSQL's autovacuum
//! does the same for its tables.
//!
//! Backup (SQLite; PostgreSQL has `pg_dump`): `VACUUM INTO` from a connection of its own
//! reads one consistent snapshot (WAL lets the server go on writing meanwhile) into a
//! new, compact file.

use crate::store::db::{params, Db};
use crate::store::StoreError;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// What to keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Jobs whose last summary is older than this (ns) are deleted.
    pub max_age_ns: Option<u64>,
    /// Stored summary bytes kept at most.
    pub max_summary_bytes: Option<u64>,
}

/// What a pass deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub jobs: u64,
    pub summaries: u64,
    pub bytes: u64,
}

/// Tables that hold a job's rows, children before `jobs` (foreign keys).
const JOB_TABLES: &[&str] = &[
    "summaries",
    "ranks",
    "findings",
    "log_lines",
    "log_progress",
    "log_windows",
    "alerts",
    "alert_progress",
    "silences",
    "alert_events",
    "jobs",
];

/// The index the size limit reads summaries by.
pub const SCHEMA: &str =
    "CREATE INDEX IF NOT EXISTS summaries_received ON summaries (received_unix_ns);";

/// Summaries read at a time while the oldest are chosen for deletion.
const VICTIMS_PER_PASS: i64 = 1_000;

/// One retention pass at `now_ns`; returns the ids of the jobs deleted with the counts.
pub fn prune(db: &Db, policy: Retention, now_ns: u64) -> Result<(Vec<String>, Pruned), StoreError> {
    let mut out = Pruned::default();
    let mut gone = Vec::new();
    if let Some(age) = policy.max_age_ns {
        let cutoff = i64::try_from(now_ns.saturating_sub(age)).unwrap_or(i64::MAX);
        let old = db.query(
            "SELECT job_id FROM jobs WHERE last_seen_unix_ns < ?1",
            params![cutoff],
        )?;
        for mut row in old {
            let job = row.text(0)?;
            let mut size = db.query_one(
                "SELECT count(*), CAST(coalesce(sum(length(body)), 0) AS BIGINT) FROM summaries WHERE job_id = ?1",
                params![&job],
            )?;
            let (n, bytes) = (size.uint(0)?, size.uint(1)?);
            db.transaction(|tx| {
                for t in JOB_TABLES {
                    tx.execute(&format!("DELETE FROM {t} WHERE job_id = ?1"), params![&job])?;
                }
                Ok(())
            })?;
            out.jobs += 1;
            out.summaries += n;
            out.bytes += bytes;
            gone.push(job);
        }
    }
    if let Some(cap) = policy.max_summary_bytes {
        let total = db
            .query_one(
                "SELECT CAST(coalesce(sum(length(body)), 0) AS BIGINT) FROM summaries",
                &[],
            )?
            .int(0)?;
        let mut excess = total - i64::try_from(cap).unwrap_or(i64::MAX);
        // The oldest summaries first (by when they arrived, across jobs), until enough is
        // freed; read a page at a time, each deleted before the next is read.
        while excess > 0 {
            let page = db.query(
                "SELECT job_id, window_index, node, length(body) FROM summaries
                 ORDER BY received_unix_ns LIMIT ?1",
                params![VICTIMS_PER_PASS],
            )?;
            let full = page.len() as i64 == VICTIMS_PER_PASS;
            let mut victims = Vec::new();
            for mut r in page {
                if excess <= 0 {
                    break;
                }
                let v = (r.text(0)?, r.int(1)?, r.text(2)?, r.int(3)?);
                excess -= v.3;
                victims.push(v);
            }
            db.transaction(|tx| {
                for (job, window, node, len) in &victims {
                    tx.execute(
                        "DELETE FROM summaries WHERE job_id = ?1 AND window_index = ?2 AND node = ?3",
                        params![job, *window, node],
                    )?;
                    out.summaries += 1;
                    out.bytes += (*len).max(0) as u64;
                }
                Ok(())
            })?;
            if !full {
                break;
            }
        }
    }
    Ok((gone, out))
}

/// Copies the database at `db` into `out` (a new file) while the server may be writing
/// it; returns the copy's size in bytes.
pub fn backup(db: &Path, out: &Path) -> Result<u64, StoreError> {
    let io = |path: &Path, source: std::io::Error| StoreError::Backup {
        path: path.to_path_buf(),
        why: source.to_string(),
    };
    if out.exists() {
        return Err(StoreError::Backup {
            path: out.to_path_buf(),
            why: "exists already; give a new file".into(),
        });
    }
    if !db.is_file() {
        return Err(StoreError::Backup {
            path: db.to_path_buf(),
            why: "no such database file".into(),
        });
    }
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StoreError::Backup {
        path: db.to_path_buf(),
        why: e.to_string(),
    })?;
    conn.execute_batch("PRAGMA busy_timeout=5000;")?;
    let target = out.to_str().ok_or_else(|| StoreError::Backup {
        path: out.to_path_buf(),
        why: "the path is not valid UTF-8".into(),
    })?;
    // VACUUM INTO writes into an empty file as into a new one: made first, it is private.
    crate::files::create_private(out)?;
    conn.execute("VACUUM INTO ?1", rusqlite::params![target])
        .map_err(|e| {
            // Not left behind half-written, nor in the way of the next try.
            let _ = std::fs::remove_file(out);
            StoreError::Backup {
                path: out.to_path_buf(),
                why: e.to_string(),
            }
        })?;
    std::fs::metadata(out)
        .map(|m| m.len())
        .map_err(|e| io(out, e))
}
