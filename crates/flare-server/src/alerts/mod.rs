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

use crate::store::db::{params, Db};
use crate::store::StoreError;
use flare_model::{Culprit, DetectorId, Finding, FindingKind, Severity};
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
pub fn silence(db: &Db, job_id: &str, now: u64) -> Result<Option<(u64, String)>, StoreError> {
    let Some(mut row) = db.query_opt(
        "SELECT until_unix_ns, reason FROM silences WHERE job_id = ?1",
        params![job_id],
    )?
    else {
        return Ok(None);
    };
    let (until, reason) = (row.uint(0)?, row.text(1)?);
    Ok(Some((until, reason)).filter(|(u, _)| *u > now))
}

pub fn set_silence(db: &Db, job_id: &str, until: u64, reason: &str) -> Result<(), StoreError> {
    db.execute(
        "INSERT INTO silences (job_id, until_unix_ns, reason) VALUES (?1, ?2, ?3)
         ON CONFLICT(job_id) DO UPDATE SET until_unix_ns = excluded.until_unix_ns, reason = excluded.reason",
        params![job_id, i64::try_from(until).unwrap_or(i64::MAX), reason],
    )?;
    Ok(())
}

pub fn clear_silence(db: &Db, job_id: &str) -> Result<bool, StoreError> {
    Ok(db.execute("DELETE FROM silences WHERE job_id = ?1", params![job_id])? > 0)
}

/// The latest alert events, newest first (of one job, or of all).
pub fn events(db: &Db, job_id: Option<&str>, limit: usize) -> Result<Vec<AlertEvent>, StoreError> {
    let limit = crate::store::limit_i64(limit);
    let rows = match job_id {
        Some(j) => db.query(
            "SELECT event FROM alert_events WHERE job_id = ?1 ORDER BY id DESC LIMIT ?2",
            params![j, limit],
        )?,
        None => db.query(
            "SELECT event FROM alert_events ORDER BY id DESC LIMIT ?1",
            params![limit],
        )?,
    };
    // An event that no longer parses (written by a newer server) is skipped, not fatal.
    let mut out = Vec::new();
    for mut r in rows {
        if let Ok(e) = serde_json::from_str(&r.text(0)?) {
            out.push(e);
        }
    }
    Ok(out)
}

/// Advances the job's alerts after window `window` was (re)diagnosed with `current`:
/// the complete windows since the last one advanced (read with `findings_of`), then the
/// critical findings of `current`. Returns the events to send (none while the job is
/// silenced; they are recorded all the same).
pub fn evaluate(
    db: &Db,
    job_id: &str,
    window: u64,
    current: &[Finding],
    rules: &AlertRules,
    now: u64,
    mut findings_of: impl FnMut(u64) -> Result<Option<Vec<Finding>>, StoreError>,
) -> Result<Vec<AlertEvent>, StoreError> {
    let last = match db.query_opt(
        "SELECT last_window FROM alert_progress WHERE job_id = ?1",
        params![job_id],
    )? {
        Some(mut r) => Some(r.int(0)?),
        None => None,
    };
    let mut states = load(db, job_id)?;
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
    let silenced = silence(db, job_id, now)?.is_some();
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
    db.transaction(|tx| {
        save(tx, job_id, &states)?;
        if let Some(w) = advanced {
            tx.execute(
                "INSERT INTO alert_progress (job_id, last_window) VALUES (?1, ?2)
                 ON CONFLICT(job_id) DO UPDATE SET last_window =
                    CASE WHEN excluded.last_window > alert_progress.last_window
                         THEN excluded.last_window ELSE alert_progress.last_window END",
                params![job_id, i64::try_from(w).unwrap_or(i64::MAX)],
            )?;
        }
        for e in &events {
            let text = serde_json::to_string(e).map_err(StoreError::Encode)?;
            tx.execute(
                "INSERT INTO alert_events (job_id, event) VALUES (?1, ?2)",
                params![job_id, &text],
            )?;
        }
        if !events.is_empty() {
            tx.execute(
                "DELETE FROM alert_events WHERE job_id = ?1 AND id <= (SELECT id FROM alert_events WHERE job_id = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                params![job_id, EVENTS_KEPT],
            )?;
        }
        Ok(())
    })?;
    Ok(events.into_iter().filter(|e| !e.silenced).collect())
}

fn load(db: &Db, job_id: &str) -> Result<BTreeMap<String, AlertState>, StoreError> {
    let rows = db.query(
        "SELECT alert_key, state FROM alerts WHERE job_id = ?1",
        params![job_id],
    )?;
    // A state that no longer parses starts over (it may page again; it is never lost
    // silently: the log says so).
    let mut out = BTreeMap::new();
    for mut r in rows {
        let (k, s) = (r.text(0)?, r.text(1)?);
        match serde_json::from_str(&s) {
            Ok(state) => {
                out.insert(k, state);
            }
            Err(e) => {
                tracing::warn!(job = job_id, alert = %k, "alert state unreadable, starting over: {e}");
            }
        }
    }
    Ok(out)
}

fn save(db: &Db, job_id: &str, states: &BTreeMap<String, AlertState>) -> Result<(), StoreError> {
    db.execute("DELETE FROM alerts WHERE job_id = ?1", params![job_id])?;
    for (k, s) in states {
        let text = serde_json::to_string(s).map_err(StoreError::Encode)?;
        db.execute(
            "INSERT INTO alerts (job_id, alert_key, state) VALUES (?1, ?2, ?3)",
            params![job_id, k, &text],
        )?;
    }
    Ok(())
}
