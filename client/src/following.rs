//! The session's endings stream (`crate::endings`): started by the first guard that follows
//! a lease or wait in line that listens for its grant, kept at the leader it can find,
//! resumed from the last revision heard, and past the leader's window replaced by a
//! linearizable re-read of each followed lease (and a renewal of each wait's place).

use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use tokio::sync::oneshot;
use tonic::Code;

use crate::client::Client;
use crate::endings::{
    deliver, deliver_grant, recheck_waits, EndedHow, Ending, Feed, Heard, LineGrant, Listener,
    WaitListener, ENDINGS_UNSUPPORTED_RETRY, LEASES_PER_SESSION_MAX,
};
use crate::retry::Backoff;
use crate::types::{LeaseInfo, ReadMode};

fn line_grant(message: pb::LeaseEnding) -> LineGrant {
    LineGrant {
        key: message.key,
        token: message.token,
        revision: message.revision,
        at_unix_ms: message.at_unix_ms,
        assignment: message.assignment.map(crate::convert::assignment),
        // Holders the client cannot read are as none: the waiter confirms with a wait.
        permits: message
            .permits
            .and_then(|p| crate::convert::key_holders(p).ok())
            .filter(|p| p.holders.iter().any(|l| l.token == message.token)),
    }
}

fn ending(message: pb::LeaseEnding) -> Ending {
    let what = match message.what.as_str() {
        baton_proto::ENDED_HANDED_OFF => EndedHow::HandedOff,
        baton_proto::ENDED_EXPIRED => EndedHow::Expired,
        baton_proto::ENDED_REVOKED => EndedHow::Revoked,
        _ => EndedHow::Gone,
    };
    Ending {
        what,
        key: message.key,
        token: message.token,
        by: message.by.map(crate::convert::actor),
        reason: message.reason,
        new_holder: Some(message.new_holder).filter(|h| !h.is_empty()),
        new_token: Some(message.new_token).filter(|t| *t != 0),
        revision: message.revision,
        at_unix_ms: message.at_unix_ms,
    }
}

/// A wait's place at the feed; dropping it leaves.
pub(crate) struct LineRegistration {
    client: Client,
    key: String,
    id: u64,
    /// Completes with the next grant of the key to this session the stream hears of (or a
    /// call to ask the cluster).
    pub(crate) heard: oneshot::Receiver<Heard>,
}

/// A guard's place at the feed; dropping it leaves.
pub(crate) struct Registration {
    client: Client,
    key: String,
    token: u64,
    id: u64,
    /// Completes with the lease's ending.
    pub(crate) ended: oneshot::Receiver<Ending>,
}

static NEXT_LISTENER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Client {
    /// Follows the lease `token` of `key` through this session's endings stream, starting
    /// the stream if it is not running. `None` past [`LEASES_PER_SESSION_MAX`].
    pub(crate) fn follow_lease(&self, key: &str, token: u64) -> Option<Registration> {
        let feed = self.feed();
        let (tell, ended) = oneshot::channel();
        let id = NEXT_LISTENER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut state = feed.lock();
        if state.count >= LEASES_PER_SESSION_MAX {
            return None;
        }
        if let Some(at) = state
            .early
            .iter()
            .position(|e| e.token == token && e.key == key)
        {
            let early = state.early.remove(at).expect("found above");
            let _ = tell.send(early);
        } else {
            let lease = (key.to_owned(), token);
            state
                .listeners
                .entry(lease)
                .or_default()
                .push(Listener { id, tell });
            state.count += 1;
        }
        // Nothing ran, so nothing was heard: the ending of this lease comes after its
        // grant, at `token` + 1 or later.
        self.keep_stream(&mut state, token + 1);
        drop(state);
        Some(Registration {
            client: self.clone(),
            key: key.to_owned(),
            token,
            id,
            ended,
        })
    }

    /// Listens for the line's grant of `key` to this session, whose latest wait answered
    /// "in line" at revision `after`, starting the stream if it is not running. A grant
    /// the stream heard before this call, of a later revision, is told at once.
    pub(crate) fn follow_line(&self, key: &str, after: u64) -> LineRegistration {
        let feed = self.feed();
        let (tell, heard) = oneshot::channel();
        let id = NEXT_LISTENER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut state = feed.lock();
        // Grants of this key up to `after` are of earlier waits: forget them.
        let mut early = None;
        state.early_grants.retain(|g| {
            if g.key != key {
                return true;
            }
            if g.revision > after && early.is_none() {
                early = Some(g.clone());
            }
            false
        });
        match early {
            Some(grant) => {
                let _ = tell.send(Heard::Granted(grant));
            }
            None => {
                state
                    .waits
                    .entry(key.to_owned())
                    .or_default()
                    .push(WaitListener { id, tell });
                state.waiting += 1;
            }
        }
        // The grant comes in an entry after the wait's.
        self.keep_stream(&mut state, after + 1);
        drop(state);
        LineRegistration {
            client: self.clone(),
            key: key.to_owned(),
            id,
            heard,
        }
    }

    /// Starts the stream task from revision `from` unless it runs (then it goes on from where
    /// it is: what it heard already is in the early endings and grants).
    fn keep_stream(&self, state: &mut crate::endings::FeedState, from: u64) {
        if !state.running {
            state.running = true;
            state.next = from;
            tokio::spawn(run(self.clone()));
        }
    }

    /// Checks whether a guard beyond [`LEASES_PER_SESSION_MAX`] would be refused.
    pub(crate) fn feed_full(&self) -> bool {
        self.feed().lock().count >= LEASES_PER_SESSION_MAX
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let feed = self.client.feed();
        let mut state = feed.lock();
        let lease = (std::mem::take(&mut self.key), self.token);
        if let Some(listeners) = state.listeners.get_mut(&lease) {
            let before = listeners.len();
            listeners.retain(|l| l.id != self.id);
            let gone = before - listeners.len();
            if listeners.is_empty() {
                state.listeners.remove(&lease);
            }
            state.count -= gone;
        }
        if state.idle() {
            drop(state);
            feed.idle.notify_one();
        }
    }
}

impl Drop for LineRegistration {
    fn drop(&mut self) {
        let feed = self.client.feed();
        let mut state = feed.lock();
        if let Some(waits) = state.waits.get_mut(&self.key) {
            let before = waits.len();
            waits.retain(|w| w.id != self.id);
            let gone = before - waits.len();
            if waits.is_empty() {
                state.waits.remove(&self.key);
            }
            state.waiting -= gone;
        }
        if state.idle() {
            drop(state);
            feed.idle.notify_one();
        }
    }
}

/// What one stream's life ended with.
enum Broke {
    /// No guard or wait listens any more: stop.
    Idle,
    /// The revision is older than the leader's window: re-read the leases.
    Compacted,
    /// The node does not know the call.
    Unsupported,
    /// Try again (at the leader named, if any), after `wait`.
    Retry { wait: bool },
}

/// The stream task: runs while any guard or wait listens.
async fn run(client: Client) {
    let feed = client.feed();
    let mut backoff = Backoff::new();
    loop {
        {
            let mut state = feed.lock();
            if state.idle() {
                state.running = false;
                return;
            }
        }
        let broke = stream_once(&client, &feed, &mut backoff).await;
        match broke {
            Broke::Idle => {
                let mut state = feed.lock();
                if state.idle() {
                    state.running = false;
                    return;
                }
            }
            Broke::Compacted => {
                if !recheck(&client, &feed).await {
                    let delay = backoff.next_delay(rand::random::<f64>());
                    idle_or(&feed, delay).await;
                }
            }
            Broke::Unsupported => {
                tracing::debug!("the cluster does not push lease endings; guards renew only");
                idle_or(&feed, ENDINGS_UNSUPPORTED_RETRY).await;
            }
            Broke::Retry { wait: false } => {}
            Broke::Retry { wait: true } => {
                let delay = backoff.next_delay(rand::random::<f64>());
                idle_or(&feed, delay).await;
            }
        }
    }
}

/// Sleeps `delay`, or less if the last guard leaves.
async fn idle_or(feed: &Feed, delay: Duration) {
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = feed.idle.notified() => {}
    }
}

/// Opens one stream at the leader (as far as the client knows it) and reads it until it
/// breaks or no guard listens.
async fn stream_once(client: &Client, feed: &Feed, backoff: &mut Backoff) -> Broke {
    let endpoint = client.pick_endpoint();
    let from = feed.lock().next;
    let silence = Duration::from_millis(baton_proto::ENDINGS_SILENCE_MS);
    let opened = async {
        // The client's own connection to the node, shared with its calls: a session costs
        // the leader no connection of its own, and the progress markers, not HTTP/2 pings,
        // tell a live stream from a dead one.
        let channel = client.channel(&endpoint).ok()?;
        let request = client.request(pb::EndingsRequest {
            client_id: client.client_id().to_owned(),
            from_revision: from,
            grants: true,
        });
        Some(BatonClient::new(channel).endings(request).await)
    };
    let mut stream = match tokio::time::timeout(client.config().request_timeout, opened).await {
        Ok(Some(Ok(response))) => response.into_inner(),
        Ok(Some(Err(status))) => return refused(client, &endpoint, &status),
        Ok(None) | Err(_) => {
            client.note_failure(&endpoint);
            return Broke::Retry { wait: true };
        }
    };
    tracing::debug!(endpoint = %endpoint, from, "endings stream opened");
    let opened_at = Instant::now();
    loop {
        let message = tokio::select! {
            message = tokio::time::timeout(silence, stream.message()) => message,
            () = feed.idle.notified() => return Broke::Idle,
        };
        match message {
            Ok(Ok(Some(message))) => {
                if opened_at.elapsed() > silence {
                    *backoff = Backoff::new();
                }
                if message.what == baton_proto::ENDINGS_PROGRESS {
                    let mut state = feed.lock();
                    state.next = state.next.max(message.revision + 1);
                    continue;
                }
                // Resume from this revision, not the next: an entry may end several leases
                // of the session, and a repeat is harmless (a token is told once).
                let revision = message.revision;
                if message.what == baton_proto::GRANTED_FROM_LINE {
                    deliver_grant(feed, line_grant(message));
                } else {
                    deliver(feed, ending(message));
                }
                let mut state = feed.lock();
                state.next = state.next.max(revision);
            }
            Ok(Ok(None)) => {
                client.note_failure(&endpoint);
                return Broke::Retry { wait: true };
            }
            Ok(Err(status)) => return refused(client, &endpoint, &status),
            // Silence: the node is cut off or no longer leads with a quorum.
            Err(_) => {
                tracing::debug!(endpoint = %endpoint, "endings stream went quiet");
                client.note_failure(&endpoint);
                return Broke::Retry { wait: false };
            }
        }
    }
}

/// What a refusal (at open, or ending the stream) means.
fn refused(client: &Client, endpoint: &str, status: &tonic::Status) -> Broke {
    match status.code() {
        Code::OutOfRange => Broke::Compacted,
        Code::Unimplemented => Broke::Unsupported,
        _ => {
            tracing::debug!(endpoint, %status, "endings stream refused or broke");
            match client.learn_leader(status.metadata()) {
                Some(leader) if leader != endpoint => Broke::Retry { wait: false },
                _ => {
                    client.note_failure(endpoint);
                    Broke::Retry { wait: true }
                }
            }
        }
    }
}

/// Whether `token` still holds the probed key: its one lease, or any of its permit or shared
/// holders (`probe.lease` is then only the first of them: the others were told "gone", and a
/// `baton run --permits` child was stopped, when the stream fell behind).
fn still_held(probe: &crate::Probe, token: u64) -> bool {
    probe.lease.as_ref().is_some_and(|l| l.token == token)
        || probe
            .permits
            .as_ref()
            .is_some_and(|p| p.holders.iter().any(|h| h.token == token))
}

/// Past the leader's window: tells each wait to renew its place (its answer says if the
/// line granted the key), reads each followed lease linearizably, tells the guards of the
/// ones that are gone, and resumes from before the earliest read. With waits, the first read
/// comes before they are told: a grant after it is on the stream, one before it is in the
/// renewal's answer (resuming from a later revision lost a grant between the two until the
/// wait's next renewal, a third of its TTL). With nothing to read, from the leader's current
/// revision. False if a read failed (the stream is tried again later; the guards' renewals
/// go on meanwhile).
async fn recheck(client: &Client, feed: &Feed) -> bool {
    let waited = feed.lock().waits.keys().next().cloned();
    let mut resume: Option<u64> = None;
    if let Some(key) = waited {
        let Ok(probe) = client.probe(&key, ReadMode::Linearizable).await else {
            return false;
        };
        resume = Some(probe.revision);
    }
    recheck_waits(feed);
    let leases: Vec<(u64, String)> = feed
        .lock()
        .listeners
        .iter()
        .filter(|(_, l)| !l.is_empty())
        .map(|((key, token), _)| (*token, key.clone()))
        .collect();
    for (token, key) in leases {
        let Ok(probe) = client.probe(&key, ReadMode::Linearizable).await else {
            return false;
        };
        resume = Some(resume.map_or(probe.revision, |r| r.min(probe.revision)));
        let current: Option<&LeaseInfo> = probe.lease.as_ref();
        if still_held(&probe, token) {
            continue;
        }
        deliver(
            feed,
            Ending {
                what: EndedHow::Gone,
                key,
                token,
                by: None,
                reason: String::new(),
                new_holder: current.map(|l| l.holder_name.clone()),
                new_token: current.map(|l| l.token),
                revision: probe.revision,
                at_unix_ms: 0,
            },
        );
    }
    feed.lock().next = resume.map_or(0, |revision| revision + 1);
    true
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::still_held;
    use crate::{KeyHolders, LeaseInfo, Probe};

    fn lease(token: u64) -> LeaseInfo {
        LeaseInfo {
            key: "k".into(),
            holder_name: format!("h{token}"),
            holder_client_id: format!("c{token}"),
            token,
            ttl: Duration::from_secs(10),
            held_since_unix_ms: 0,
            renewed_at_unix_ms: 0,
            remaining: Duration::from_secs(10),
            basis: token,
        }
    }

    #[test]
    fn every_permit_holder_still_holds_its_key_not_only_the_first() {
        let permits = |shared| Probe {
            lease: Some(lease(3)),
            revision: 9,
            line: None,
            permits: Some(KeyHolders {
                permits: 3,
                holders: vec![lease(3), lease(5), lease(8)],
                shared,
            }),
        };
        for shared in [false, true] {
            for token in [3, 5, 8] {
                assert!(still_held(&permits(shared), token), "token {token}");
            }
            assert!(!still_held(&permits(shared), 4), "a token no holder has");
        }
        let exclusive = Probe {
            lease: Some(lease(7)),
            revision: 9,
            line: None,
            permits: None,
        };
        assert!(still_held(&exclusive, 7));
        assert!(!still_held(&exclusive, 6));
        let free = Probe {
            permits: None,
            lease: None,
            ..exclusive
        };
        assert!(!still_held(&free, 7));
    }
}
