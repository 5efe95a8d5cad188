//! Watch streams: every event of a key prefix, from a revision on, served by any node from
//! its own window of recent events (`crate::watch`), with progress markers for quiet
//! prefixes and the grant checked again at each wake-up.

use std::time::Instant;

use baton_proto::v1 as pb;
use tonic::Status;

use super::baton::BatonServer;
use super::convert;
use crate::core::validate;
use crate::limits::{WATCH_BATCH_EVENTS_MAX, WATCH_STREAM_BUFFER};

/// Counts one open stream (a watch, an endings stream) in its gauge while it lives.
pub(super) struct StreamOpen(prometheus_client::metrics::gauge::Gauge);

impl StreamOpen {
    pub(super) fn new(gauge: &prometheus_client::metrics::gauge::Gauge) -> StreamOpen {
        gauge.inc();
        StreamOpen(gauge.clone())
    }
}

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub(super) type EventStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::Event, Status>> + Send + 'static>>;

impl BatonServer {
    /// Serves a watch from this node's own window (see `crate::watch`).
    pub(super) async fn watch_stream(
        &self,
        req: pb::WatchRequest,
        from_addr: Option<std::net::IpAddr>,
        still_allowed: super::auth::WatchGrant,
    ) -> Result<EventStream, Status> {
        validate::prefix(&req.prefix).map_err(convert::invalid)?;
        let slot = match from_addr {
            None => None,
            Some(addr) => {
                let max = self.ctx.watches_per_address_max;
                match self.ctx.watches.open(addr, max) {
                    Some(slot) => Some(slot),
                    None => {
                        self.ctx.metrics.requests_limited.inc();
                        return Err(Status::resource_exhausted(format!(
                            "{addr} has {max} watch streams open already \
                             (watches_per_address_max); close one, or watch a wider prefix"
                        )));
                    }
                }
            }
        };
        let hub = self.ctx.sm.watch_hub().clone();
        let mut from = match req.from_revision {
            0 => hub.latest() + 1,
            r => r,
        };
        if from > hub.latest() + 1 {
            self.ctx.future_watch(from).await?;
        }
        // Refuse a compacted start at once, as an error rather than mid-stream.
        hub.read_from(&req.prefix, from, 0)
            .map_err(|c| c.status())?;
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_STREAM_BUFFER);
        let prefix = req.prefix;
        let open = StreamOpen::new(&self.ctx.metrics.watch_streams);
        let sm = self.ctx.sm.clone();
        tokio::spawn(async move {
            let _open = (open, slot);
            let mut grew = hub.subscribe();
            let progress_every =
                std::time::Duration::from_millis(baton_proto::WATCH_PROGRESS_INTERVAL_MS);
            // The revision the watcher knows it is up to date with, and when it learned so.
            let mut told = from.saturating_sub(1);
            let mut told_at = Instant::now();
            loop {
                grew.borrow_and_update();
                // A revoked token or a policy that took the grant away ends the stream.
                if let Err(ended) = still_allowed.check(&prefix, &sm) {
                    let _ = tx.send(Err(ended)).await;
                    return;
                }
                let (events, next) = match hub.read_from(&prefix, from, WATCH_BATCH_EVENTS_MAX) {
                    Ok(read) => read,
                    Err(c) => {
                        // The window moved past this watcher (a slow reader, or a snapshot
                        // install): tell it, rather than skip events.
                        let _ = tx.send(Err(c.status())).await;
                        return;
                    }
                };
                let more = next > from;
                from = next;
                for (key, event) in &events {
                    if tx.send(Ok(convert::pb_event(key, event))).await.is_err() {
                        return;
                    }
                    told = event.revision;
                    told_at = Instant::now();
                }
                if more {
                    continue;
                }
                // Caught up. If only other prefixes' events went by, say how far we are, now
                // and then, so a quiet watcher's resume point does not fall out of the window.
                if from - 1 > told && told_at.elapsed() >= progress_every {
                    let marker = pb::Event {
                        revision: from - 1,
                        kind: baton_proto::WATCH_PROGRESS_KIND.into(),
                        ..pb::Event::default()
                    };
                    if tx.send(Ok(marker)).await.is_err() {
                        return;
                    }
                    told = from - 1;
                    told_at = Instant::now();
                }
                tokio::select! {
                    changed = grew.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                    // Wake up to send a pending progress marker.
                    _ = tokio::time::sleep(progress_every), if from - 1 > told => {}
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}
