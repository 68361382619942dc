//! Sending alert events to webhooks, on a thread of its own: ingest never waits for a
//! webhook. A bounded queue (the oldest events are dropped, and counted, when a webhook
//! is down for long), a timeout per request and a few retries with backoff.

use super::{AlertEvent, Webhook, WebhookFormat};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Events waiting to be sent, at most.
const QUEUE: usize = 1024;
/// Tries per event and webhook, and the first wait between them (doubled each time).
const TRIES: u32 = 3;
const BACKOFF: Duration = Duration::from_millis(500);
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Queue {
    events: VecDeque<AlertEvent>,
    closing: bool,
}

/// What the sender did so far.
#[derive(Debug, Default)]
pub struct NotifyStats {
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    pub dropped: AtomicU64,
}

/// The sending thread and its queue.
pub struct Notifier {
    shared: Arc<(Mutex<Queue>, Condvar)>,
    pub stats: Arc<NotifyStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Notifier {
    pub fn start(webhooks: Vec<Webhook>) -> Notifier {
        let shared = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let stats = Arc::new(NotifyStats::default());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .user_agent(concat!("flare-server/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let thread = {
            let (shared, stats) = (shared.clone(), stats.clone());
            std::thread::Builder::new()
                .name("flare-alerts".into())
                .spawn(move || run(&shared, &stats, &webhooks, &agent))
                .expect("spawning the alert thread")
        };
        Notifier {
            shared,
            stats,
            thread: Some(thread),
        }
    }

    /// Queues events; never blocks on the network.
    pub fn send(&self, events: Vec<AlertEvent>) {
        if events.is_empty() {
            return;
        }
        let (lock, cv) = &*self.shared;
        let mut q = lock.lock().unwrap_or_else(|p| p.into_inner());
        for e in events {
            if q.events.len() >= QUEUE {
                q.events.pop_front();
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            q.events.push_back(e);
        }
        cv.notify_one();
    }
}

impl Drop for Notifier {
    /// Sends what is queued, then stops.
    fn drop(&mut self) {
        {
            let (lock, cv) = &*self.shared;
            lock.lock().unwrap_or_else(|p| p.into_inner()).closing = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    shared: &(Mutex<Queue>, Condvar),
    stats: &NotifyStats,
    hooks: &[Webhook],
    agent: &ureq::Agent,
) {
    let (lock, cv) = shared;
    loop {
        let event = {
            let mut q = lock.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(e) = q.events.pop_front() {
                    break e;
                }
                if q.closing {
                    return;
                }
                q = cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        for hook in hooks {
            let body = match hook.format {
                WebhookFormat::Json => serde_json::to_vec(&event),
                WebhookFormat::Slack => {
                    serde_json::to_vec(&serde_json::json!({ "text": event.text() }))
                }
            }
            .expect("an alert event serializes");
            match post(agent, &hook.url, &body) {
                Ok(()) => {
                    stats.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(why) => {
                    stats.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(url = %hook.url, job = %event.job_id, "alert not delivered: {why}");
                }
            }
        }
    }
}

/// Posts `body`, retrying what may succeed later (network errors, 429, 5xx).
fn post(agent: &ureq::Agent, url: &str, body: &[u8]) -> Result<(), String> {
    let mut wait = BACKOFF;
    let mut last = String::new();
    for attempt in 0..TRIES {
        if attempt > 0 {
            std::thread::sleep(wait);
            wait *= 2;
        }
        match agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body)
        {
            Ok(resp) => {
                let status = resp.status().as_u16();
                if (200..300).contains(&status) {
                    return Ok(());
                }
                last = format!("HTTP {status}");
                if !(status == 429 || status >= 500) {
                    return Err(last);
                }
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("{last} (after {TRIES} tries)"))
}
