//! Endings streams: the lease endings of one client session (revoke, handoff, expiry), and
//! if it asks, its grants from a key's line, pushed from the leader's window
//! (`crate::endings`) as each entry applies.
//!
//! Only the leader serves them, and only while it hears from a quorum: a follower may be
//! behind or cut off, and a leader that lost its quorum may already be deposed; either
//! would leave a holder believing. Another node answers UNAVAILABLE naming the leader; a
//! leader that loses its quorum or its leadership ends the stream the same way, and stops
//! the progress markers the client counts on, so the client looks for the leader again.

use std::time::Duration;

use baton_proto::v1 as pb;
use baton_proto::{
    ENDED_EXPIRED, ENDED_HANDED_OFF, ENDED_REVOKED, ENDINGS_PROGRESS, GRANTED_FROM_LINE,
};
use tonic::Status;

use super::baton::{unavailable, BatonServer, Ctx};
use super::convert;
use super::watch_stream::StreamOpen;
use crate::core::{validate, Ending, EventKind};
use crate::limits::{ENDINGS_BATCH_MAX, ENDINGS_STREAM_BUFFER};

pub(super) type EndingStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<pb::LeaseEnding, Status>> + Send + 'static>,
>;

/// The wire form of an ending.
pub(super) fn pb_ending(ending: &Ending) -> pb::LeaseEnding {
    let what = match ending.kind {
        EventKind::Accepted => ENDED_HANDED_OFF,
        EventKind::Expired => ENDED_EXPIRED,
        EventKind::Claimed => GRANTED_FROM_LINE,
        _ => ENDED_REVOKED,
    };
    let (new_holder, new_token) = ending.successor.clone().unwrap_or_default();
    pb::LeaseEnding {
        what: what.into(),
        key: ending.key.to_string(),
        token: ending.token,
        holder_name: ending.holder.name.to_string(),
        by: ending.by.as_ref().map(convert::pb_actor),
        reason: ending.reason.clone(),
        new_holder,
        new_token,
        revision: ending.revision,
        at_unix_ms: ending.unix_ms,
        assignment: ending.assignment.as_ref().map(convert::assignment),
        permits: None,
    }
}

/// For a permit or a share granted from the line: the key's holders now, as the grant's
/// answer would name them, if the granted lease is still one of them. Read as the push goes
/// out, after the grant applied, as the wait that used to confirm each such grant read them
/// one round later: with them, the waiter's hand-on is the one round of the freeing write.
fn holders_now(ctx: &Ctx, key: &str, token: u64) -> Option<pb::KeyHolders> {
    let held = ctx.sm.read(|s| s.table.holders(key).cloned())?;
    held.leases
        .iter()
        .any(|lease| lease.token == token)
        .then(|| convert::key_holders(held.sharing, &held.leases, ctx.sm.countdowns()))
}

fn progress(revision: u64) -> pb::LeaseEnding {
    pb::LeaseEnding {
        what: ENDINGS_PROGRESS.into(),
        revision,
        ..pb::LeaseEnding::default()
    }
}

/// Whether this node leads and heard from a quorum within the longest election timeout
/// (else another node may lead already); if not, the status to end with.
fn leads_with_quorum(ctx: &Ctx) -> Result<(), Status> {
    let fresh_ms = ctx.raft.config().election_timeout_max;
    let leads = {
        let metrics = ctx.raft.metrics();
        let m = metrics.borrow();
        m.current_leader == Some(m.id) && m.millis_since_quorum_ack.is_some_and(|ms| ms <= fresh_ms)
    };
    if leads {
        return Ok(());
    }
    let leader = ctx.leader_elsewhere();
    Err(unavailable(
        leader.as_deref(),
        "endings streams are served by a leader that hears from a quorum",
    ))
}

impl BatonServer {
    /// Serves a session's endings from the leader's window.
    pub(super) async fn endings_stream(
        &self,
        req: pb::EndingsRequest,
        grant: super::auth::WatchGrant,
    ) -> Result<EndingStream, Status> {
        validate::client_id(&req.client_id).map_err(convert::invalid)?;
        leads_with_quorum(&self.ctx)?;
        let hub = self.ctx.sm.endings_hub().clone();
        let mut from = match req.from_revision {
            0 => hub.applied() + 1,
            r => r,
        };
        if from > hub.applied() + 1 {
            self.ctx.future_watch(from).await?;
        }
        // Refuse a compacted start at once, as an error rather than mid-stream.
        hub.read(&req.client_id, from, 0).map_err(|c| c.status())?;
        let mut subscription = hub.subscribe(&req.client_id).map_err(|e| {
            self.ctx.metrics.requests_limited.inc();
            Status::resource_exhausted(format!(
                "{e}; the client falls back to its renewals to learn of a loss"
            ))
        })?;
        let (tx, rx) = tokio::sync::mpsc::channel(ENDINGS_STREAM_BUFFER);
        let open = StreamOpen::new(&self.ctx.metrics.endings_streams);
        let ctx = self.ctx.clone();
        let session = req.client_id;
        let grants = req.grants;
        tokio::spawn(async move {
            let _open = open;
            let every = Duration::from_millis(baton_proto::ENDINGS_PROGRESS_INTERVAL_MS);
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let read = match hub.read(&session, from, ENDINGS_BATCH_MAX) {
                    Ok(read) => read,
                    // The window moved past this stream (a snapshot install): say so, and
                    // the client re-reads its leases.
                    Err(c) => {
                        let _ = tx.send(Err(c.status())).await;
                        return;
                    }
                };
                let more = read.endings.len() >= ENDINGS_BATCH_MAX;
                for ending in &read.endings {
                    // A grant from the line only to a stream that asked (an older client
                    // would take it for an ending).
                    if ending.kind == EventKind::Claimed && !grants {
                        continue;
                    }
                    // Only what the caller may read (auth on): its own keys, as a rule.
                    if grant.check(&ending.key, &ctx.sm).is_err() {
                        continue;
                    }
                    // The chaos suite's notice canary (test builds only): no ending is sent.
                    if crate::chaos::mute_endings() {
                        continue;
                    }
                    let mut pushed = pb_ending(ending);
                    if ending.kind == EventKind::Claimed {
                        pushed.permits = holders_now(&ctx, &ending.key, ending.token);
                    }
                    if tx.send(Ok(pushed)).await.is_err() {
                        return;
                    }
                }
                from = read.next;
                if more {
                    continue;
                }
                tokio::select! {
                    () = subscription.woken() => {}
                    _ = tx.closed() => return,
                    _ = tick.tick() => {
                        if let Err(status) = leads_with_quorum(&ctx) {
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                        if tx.send(Ok(progress(from - 1))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}
