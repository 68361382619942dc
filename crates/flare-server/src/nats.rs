//! Summaries through NATS JetStream, for deployments past one server: agents publish each
//! window summary to `flare.summaries.<job>` in the stream [`STREAM`] (`flare agent
//! --server nats://HOST:4222`), and every `flare serve --nats nats://HOST:4222` sharing
//! one PostgreSQL database pulls from the one durable consumer [`CONSUMER`]: the servers
//! share the stream as a work queue, each message going to one of them.
//!
//! Delivery is at least once. A message is acknowledged once its summary is stored; a
//! server killed before its acknowledgement leaves the message to be delivered again, to
//! any server, after [`ACK_WAIT`]. Storing is idempotent (a summary stored again replaces
//! its row, and its window is analysed from what is stored), and the stream drops a
//! summary an agent published twice (message id: job, window and node). Messages reach
//! the servers in the stream's order but are stored in parallel, so a job's summaries
//! can be stored out of order (one delivered again after its server died comes 10 s
//! late); its windows are analysed in order all the same: a window is analysed once its
//! ranks are in, and a server analysing a window first analyses the job's earlier windows
//! that another server stored and left unanalysed (see `Store::ingest`).
//!
//! Only JetStream APIs that nats-server 2.9 serves are used.

use crate::api::AppState;
use crate::ingest::Encoding;
use async_nats::jetstream::{self, consumer, stream, AckKind};
use futures_util::StreamExt;
use std::time::Duration;
use tracing::{error, info, warn};

// A NATS URL in logs and errors hides its token or password.
pub use flare_model::summary_queue::{redact, STREAM, SUBJECT_PREFIX};

/// The durable consumer the servers share.
pub const CONSUMER: &str = "flare-serve";
/// How long a delivered message may go unacknowledged before it is delivered again (a
/// server died, or hangs, with it).
pub const ACK_WAIT: Duration = Duration::from_secs(10);
/// Re-published summaries within this long are dropped by the stream.
const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// Messages a server holds unacknowledged at once: what another server gets again, late,
/// if this one dies.
const BATCH: usize = 64;

/// Where the stream is: a `nats://` URL (credentials in it, as `nats://user:pass@host`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsConfig {
    pub url: String,
}

/// The stream and the servers' consumer, created if missing (by any server, any number of
/// times: creation is idempotent).
pub(crate) async fn connect(cfg: &NatsConfig) -> Result<consumer::PullConsumer, String> {
    let client = async_nats::connect(&cfg.url)
        .await
        .map_err(|e| format!("cannot connect to NATS at {}: {e}", redact(&cfg.url)))?;
    let js = jetstream::new(client);
    let stream = js
        .get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{SUBJECT_PREFIX}.>")],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("JetStream stream {STREAM}: {e}"))?;
    stream
        .get_or_create_consumer(
            CONSUMER,
            consumer::pull::Config {
                durable_name: Some(CONSUMER.into()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: ACK_WAIT,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("JetStream consumer {CONSUMER}: {e}"))
}

/// Stores the summaries the consumer delivers, until the task is dropped.
pub(crate) async fn consume(consumer: consumer::PullConsumer, state: AppState) {
    info!(
        stream = STREAM,
        consumer = CONSUMER,
        "consuming summaries from NATS"
    );
    loop {
        let messages = consumer
            .stream()
            .max_messages_per_batch(BATCH)
            .messages()
            .await;
        let mut messages = match messages {
            Ok(m) => m,
            Err(e) => {
                warn!("cannot pull from NATS ({e}); retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        while let Some(message) = messages.next().await {
            match message {
                Ok(m) => store(&state, m).await,
                Err(e) => {
                    warn!("NATS delivery failed ({e}); pulling again");
                    break;
                }
            }
        }
    }
}

/// One message: stored then acknowledged; a summary that can never be stored is
/// terminated (not delivered again); anything else is delivered again in a second.
async fn store(state: &AppState, m: jetstream::Message) {
    let encoding = m
        .headers
        .as_ref()
        .and_then(|h| h.get("Content-Encoding"))
        .map(|v| v.as_str().to_string());
    let subject = m.subject.to_string();
    let outcome = match Encoding::parse(encoding.as_deref()) {
        Ok(encoding) => state.ingest(m.payload.clone(), encoding).await,
        Err(e) => Err(e.into()),
    };
    let ack = match outcome {
        Ok(_) => m.ack().await,
        Err(e) if e.is_client_error() => {
            warn!(%subject, "summary refused, not delivered again: {}", e.message());
            m.ack_with(AckKind::Term).await
        }
        Err(e) => {
            error!(%subject, "summary not stored, delivered again: {}", e.message());
            m.ack_with(AckKind::Nak(Some(Duration::from_secs(1)))).await
        }
    };
    if let Err(e) = ack {
        // Delivered again after ACK_WAIT; storing it again changes nothing.
        warn!(%subject, "acknowledgement lost ({e})");
    }
}
