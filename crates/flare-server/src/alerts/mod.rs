//! Alerts: a webhook call when a finding opens, escalates or resolves (the rules in
//! [`rules`]), deduplicated per job and finding, silenced per job on request. The state
//! lives in the database, so a restarted server neither re-pages nor forgets an open
//! alert. Complete windows advance the alerts (a window is complete once the job's next
//! window has begun: every node has posted it); a critical finding pages from the window
//! in progress.

mod notify;
pub mod rules;

pub use notify::{Notifier, NotifyStats};
pub use rules::{AlertRules, AlertState, Transition};

use crate::store::StoreError;
use flare_model::{Culprit, DetectorId, Finding, FindingKind, Severity};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS alerts (
    job_id    TEXT NOT NULL REFERENCES jobs(job_id),
    alert_key TEXT NOT NULL,
    state     TEXT NOT NULL,
    PRIMARY KEY (job_id, alert_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS alert_progress (
    job_id      TEXT PRIMARY KEY NOT NULL REFERENCES jobs(job_id),
    last_window INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS silences (
    job_id        TEXT PRIMARY KEY NOT NULL,
    until_unix_ns INTEGER NOT NULL,
    reason        TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS alert_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL,
    event   TEXT NOT NULL
);
";

/// Complete windows caught up with at most, when a job's windows jumped ahead (a server
/// restarted after a while): older ones are history, not news.
const MAX_CATCH_UP: u64 = 50;
/// Alert events kept per job for the API.
const EVENTS_KEPT: i64 = 1000;

/// How a webhook wants its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookFormat {
    /// `{"text": "..."}`: Slack's incoming webhooks, and Mattermost's, Rocket.Chat's.
    Slack,
    /// The [`AlertEvent`] itself.
    Json,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    pub format: WebhookFormat,
}

impl std::str::FromStr for Webhook {
    type Err = String;

    /// `slack=URL`, `json=URL`, or a bare URL (JSON).
    fn from_str(s: &str) -> Result<Webhook, String> {
        let (format, url) = match s.split_once('=') {
            Some(("slack", u)) => (WebhookFormat::Slack, u),
            Some(("json", u)) => (WebhookFormat::Json, u),
            _ => (WebhookFormat::Json, s),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "{s:?}: expected slack=URL, json=URL or a URL starting with http:// or https://"
            ));
        }
        Ok(Webhook {
            url: url.to_string(),
            format,
        })
    }
}

/// The body of a JSON webhook call, and what `GET /api/alerts` lists: one type,
/// serialized here. Fields are only added.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertEvent {
    pub event: Transition,
    pub job_id: String,
    /// Which alert: the finding's detector, kind and culprits.
    pub alert_key: String,
    pub severity: Severity,
    pub kind: FindingKind,
    pub detector: DetectorId,
    pub summary: String,
    pub action: String,
    pub culprits: Vec<Culprit>,
    /// The window that caused the event, and the one the alert opened in.
    pub window: u64,
    pub opened_window: Option<u64>,
    /// Sent to no webhook: the job was silenced.
    pub silenced: bool,
    pub unix_ns: u64,
}

impl AlertEvent {
    fn new(job_id: &str, key: &str, t: Transition, s: &AlertState, window: u64, now: u64) -> Self {
        let f = &s.finding;
        AlertEvent {
            event: t,
            job_id: job_id.to_string(),
            alert_key: key.to_string(),
            severity: s.severity,
            kind: f.kind,
            detector: f.detector,
            summary: f.summary.clone(),
            action: f.action.clone(),
            culprits: f.culprits.clone(),
            window,
            opened_window: s.opened_window,
            silenced: false,
            unix_ns: now,
        }
    }

    /// One line for a chat channel.
    pub fn text(&self) -> String {
        let what = match self.event {
            Transition::Opened => format!(
                "[{}] Flare: job {}",
                self.severity.as_str().to_uppercase(),
                self.job_id
            ),
            Transition::Escalated => format!(
                "[ESCALATED to {}] Flare: job {}",
                self.severity, self.job_id
            ),
            Transition::Resolved => format!("[RESOLVED] Flare: job {}", self.job_id),
        };
        match self.event {
            Transition::Resolved => format!("{what}: no longer seen: {}", self.summary),
            _ => format!("{what}: {}\nAction: {}", self.summary, self.action),
        }
    }
}

/// A job's silence, if one is in force at `now`.
pub fn silence(
    conn: &Connection,
    job_id: &str,
    now: u64,
) -> Result<Option<(u64, String)>, StoreError> {
    let row: Option<(i64, String)> = conn
        .prepare_cached("SELECT until_unix_ns, reason FROM silences WHERE job_id = ?1")?
        .query_row(params![job_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row
        .map(|(u, r)| (u.max(0) as u64, r))
        .filter(|(u, _)| *u > now))
}

pub fn set_silence(
    conn: &Connection,
    job_id: &str,
    until: u64,
    reason: &str,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO silences (job_id, until_unix_ns, reason) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![
        job_id,
        i64::try_from(until).unwrap_or(i64::MAX),
        reason
    ])?;
    Ok(())
}

pub fn clear_silence(conn: &Connection, job_id: &str) -> Result<bool, StoreError> {
    Ok(conn
        .prepare_cached("DELETE FROM silences WHERE job_id = ?1")?
        .execute(params![job_id])?
        > 0)
}

/// The latest alert events, newest first (of one job, or of all).
pub fn events(
    conn: &Connection,
    job_id: Option<&str>,
    limit: usize,
) -> Result<Vec<AlertEvent>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<String> = match job_id {
        Some(j) => conn
            .prepare_cached(
                "SELECT event FROM alert_events WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2",
            )?
            .query_map(params![j, limit], |r| r.get(0))?
            .collect::<Result<_, _>>()?,
        None => conn
            .prepare_cached("SELECT event FROM alert_events ORDER BY id DESC LIMIT ?1")?
            .query_map(params![limit], |r| r.get(0))?
            .collect::<Result<_, _>>()?,
    };
    // An event that no longer parses (written by a newer server) is skipped, not fatal.
    Ok(rows
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect())
}

/// Advances the job's alerts after window `window` was (re)diagnosed with `current`:
/// the complete windows since the last one advanced (read with `findings_of`), then the
/// critical findings of `current`. Returns the events to send (none while the job is
/// silenced; they are recorded all the same).
pub fn evaluate(
    conn: &Connection,
    job_id: &str,
    window: u64,
    current: &[Finding],
    rules: &AlertRules,
    now: u64,
    mut findings_of: impl FnMut(u64) -> Result<Option<Vec<Finding>>, StoreError>,
) -> Result<Vec<AlertEvent>, StoreError> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT last_window FROM alert_progress WHERE job_id = ?1")?
        .query_row(params![job_id], |r| r.get(0))
        .optional()?;
    let mut states = load(conn, job_id)?;
    // Windows before this one are complete: advance through those not yet advanced.
    let from = match last {
        Some(l) => (l.max(-1) + 1) as u64,
        None => window.saturating_sub(1),
    }
    .max(window.saturating_sub(MAX_CATCH_UP));
    let mut changes = Vec::new();
    let mut advanced = None;
    for w in from..window {
        if let Some(findings) = findings_of(w)? {
            changes.extend(
                rules::advance(&mut states, w, &findings, rules)
                    .into_iter()
                    .map(|c| (w, c)),
            );
        }
        advanced = Some(w);
    }
    changes.extend(
        rules::open_criticals(&mut states, window, current)
            .into_iter()
            .map(|c| (window, c)),
    );
    let silenced = silence(conn, job_id, now)?.is_some();
    let mut events = Vec::new();
    for (w, (key, t, state)) in changes {
        match t {
            Transition::Opened => {
                if let Some(s) = states.get_mut(&key) {
                    s.notified = !silenced;
                }
            }
            // A resolution whose opening nobody was told of is not news either.
            Transition::Resolved if !state.notified => continue,
            _ => {}
        }
        let mut e = AlertEvent::new(job_id, &key, t, &state, w, now);
        e.silenced = silenced;
        events.push(e);
    }
    let tx = conn.unchecked_transaction()?;
    save(&tx, job_id, &states)?;
    if let Some(w) = advanced {
        tx.prepare_cached(
            "INSERT INTO alert_progress (job_id, last_window) VALUES (?1, ?2)
             ON CONFLICT(job_id) DO UPDATE SET last_window = max(last_window, excluded.last_window)",
        )?
        .execute(params![job_id, i64::try_from(w).unwrap_or(i64::MAX)])?;
    }
    for e in &events {
        let text = serde_json::to_string(e).map_err(StoreError::Encode)?;
        tx.prepare_cached("INSERT INTO alert_events (job_id, event) VALUES (?1, ?2)")?
            .execute(params![job_id, text])?;
    }
    if !events.is_empty() {
        tx.prepare_cached(
            "DELETE FROM alert_events WHERE job_id = ?1 AND id <= (SELECT id FROM alert_events WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
        )?
        .execute(params![job_id, EVENTS_KEPT])?;
    }
    tx.commit()?;
    Ok(events.into_iter().filter(|e| !e.silenced).collect())
}

fn load(conn: &Connection, job_id: &str) -> Result<BTreeMap<String, AlertState>, StoreError> {
    let rows: Vec<(String, String)> = conn
        .prepare_cached("SELECT alert_key, state FROM alerts WHERE job_id = ?1")?
        .query_map(params![job_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    // A state that no longer parses starts over (it may page again; it is never lost
    // silently: the log says so).
    Ok(rows
        .into_iter()
        .filter_map(|(k, s)| match serde_json::from_str(&s) {
            Ok(state) => Some((k, state)),
            Err(e) => {
                tracing::warn!(job = job_id, alert = %k, "alert state unreadable, starting over: {e}");
                None
            }
        })
        .collect())
}

fn save(
    conn: &Connection,
    job_id: &str,
    states: &BTreeMap<String, AlertState>,
) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM alerts WHERE job_id = ?1")?
        .execute(params![job_id])?;
    for (k, s) in states {
        let text = serde_json::to_string(s).map_err(StoreError::Encode)?;
        conn.prepare_cached("INSERT INTO alerts (job_id, alert_key, state) VALUES (?1, ?2, ?3)")?
            .execute(params![job_id, k, text])?;
    }
    Ok(())
}
