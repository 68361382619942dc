//! Delivery to NATS JetStream (`--server nats://HOST:4222`): each summary published to
//! its job's subject in the summaries stream, with a message id so that the stream drops
//! a summary published twice, and acknowledged by JetStream once stored there. The
//! servers consume the stream (`flare serve --nats`).

use super::{Failure, Pending};
use async_nats::jetstream;
use flare_model::summary_queue::{message_id, subject};
use std::time::Duration;

pub(super) struct NatsSink {
    url: String,
    token: Option<String>,
    // The push thread's own runtime: the agent's collection loop never waits on it.
    rt: tokio::runtime::Runtime,
    connected: Option<(async_nats::Client, jetstream::Context)>,
}

impl NatsSink {
    pub(super) fn new(url: &str, token: Option<String>) -> std::io::Result<NatsSink> {
        Ok(NatsSink {
            url: url.to_string(),
            token,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            connected: None,
        })
    }

    pub(super) fn send(&mut self, item: &Pending, timeout: Duration) -> Result<(), Failure> {
        if self.connected.is_none() {
            let mut opts = async_nats::ConnectOptions::new()
                .name(concat!("flare-agent/", env!("CARGO_PKG_VERSION")))
                .connection_timeout(timeout);
            if let Some(t) = &self.token {
                opts = opts.token(t.clone());
            }
            let client = self
                .rt
                .block_on(opts.connect(self.url.as_str()))
                .map_err(|e| Failure::Retry(format!("cannot connect to NATS: {e}")))?;
            let js = jetstream::new(client.clone());
            self.connected = Some((client, js));
        }
        let (client, js) = self.connected.as_ref().expect("connected above");
        let max = client.server_info().max_payload;
        if max > 0 && item.body.len() > max {
            return Err(Failure::Permanent(format!(
                "{} bytes, over the NATS server's max_payload of {max}",
                item.body.len()
            )));
        }
        let publish = jetstream::context::Publish::build()
            .payload(item.body.clone().into())
            .message_id(message_id(&item.job, item.window, &item.node))
            .header("Content-Encoding", "zstd");
        let to = subject(&item.job);
        let acked = self.rt.block_on(async {
            tokio::time::timeout(timeout, async { js.send_publish(to, publish).await?.await }).await
        });
        match acked {
            Ok(Ok(_)) => Ok(()),
            // No stream yet (no server has started), a lost connection, no ack in time:
            // the summary stays queued.
            Ok(Err(e)) => Err(Failure::Retry(format!("JetStream publish: {e}"))),
            Err(_) => Err(Failure::Retry(format!(
                "JetStream publish: no acknowledgement in {} ms",
                timeout.as_millis()
            ))),
        }
    }
}
