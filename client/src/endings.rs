//! Hearing at once that a lease ended: one stream per client session from the leader
//! (`Endings`), shared by every [`crate::LeaseGuard`] of the [`Client`].
//!
//! When a lease ends other than by its holder's own release (revoked, handed off,
//! expired), the leader pushes an [`Ending`] with the facts to the session that held it, as
//! the ending entry applies. The client keeps one stream per session however many leases it
//! holds, open while any guard is registered, and hands each ending to the guards of its
//! token. It resumes after a break (a node died, the leader changed, the stream went quiet
//! for [`baton_proto::ENDINGS_SILENCE_MS`]) from the revision after the last it heard, at
//! the leader it can find, so no ending is missed; past the leader's window it re-reads
//! each registered lease linearizably and tells the guards of the ones that are gone.
//!
//! The stream only speeds the news up: a guard still renews and still stops at its safe
//! deadline, which is what holds when no news can arrive (a holder cut off from the
//! cluster).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use tokio::sync::{oneshot, Notify};
use tonic::Code;

use crate::client::Client;
use crate::retry::Backoff;
use crate::types::{ActorInfo, LeaseInfo, ReadMode};

/// Leases one session's guards follow through its stream; a guard beyond it is refused
/// ([`crate::Error::InvalidArgument`]) before anything is claimed.
pub const LEASES_PER_SESSION_MAX: usize = 100_000;

/// Endings kept for tokens no guard has registered yet (a lease ended in the moment
/// between its grant's answer and its guard's start); the oldest is dropped first.
pub const EARLY_ENDINGS_MAX: usize = 1_024;

/// After a node answered that it does not know the `Endings` call (a node older than this
/// client), the stream is tried again after this long; the guards renew as before.
pub const ENDINGS_UNSUPPORTED_RETRY: Duration = Duration::from_secs(30);

/// How a lease ended, as the cluster pushed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedHow {
    /// An operator revoked it.
    Revoked,
    /// The taker of a handoff accepted it: the lease is the taker's.
    HandedOff,
    /// The leader expired it: no renewal reached the cluster in time.
    Expired,
    /// The stream could not say (the session was away longer than the leader's window):
    /// a linearizable read found the lease gone; the key's history says how.
    Gone,
}

impl EndedHow {
    /// `revoked`, `handed_off`, `expired`, `gone`.
    pub fn as_str(self) -> &'static str {
        match self {
            EndedHow::Revoked => baton_proto::ENDED_REVOKED,
            EndedHow::HandedOff => baton_proto::ENDED_HANDED_OFF,
            EndedHow::Expired => baton_proto::ENDED_EXPIRED,
            EndedHow::Gone => "gone",
        }
    }
}

/// A lease of this session that ended, with the facts the cluster recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Ending {
    pub what: EndedHow,
    pub key: String,
    /// The ended lease's token.
    pub token: u64,
    /// Who ended it: the operator who revoked it, the taker who accepted it; `None` for an
    /// expiry (the leader's own entry) and for [`EndedHow::Gone`].
    pub by: Option<ActorInfo>,
    /// The operator's reason for a revoke; the cluster's words otherwise.
    pub reason: String,
    /// For a handoff, the new holder's name; for [`EndedHow::Gone`], the key's holder now.
    pub new_holder: Option<String>,
    /// The new holder's token, when there is one.
    pub new_token: Option<u64>,
    /// The revision of the entry that ended it (for [`EndedHow::Gone`], of the read).
    pub revision: u64,
    /// The proposing leader's wall clock, for people (0 for [`EndedHow::Gone`]).
    pub at_unix_ms: u64,
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by = self
            .by
            .as_ref()
            .map(|a| {
                let mut text = format!("{} (client {})", a.name_or_operator(), a.client_id);
                if let Some(p) = &a.principal {
                    text.push_str(&format!(", principal {p}"));
                }
                text
            })
            .unwrap_or_default();
        match self.what {
            EndedHow::Revoked => write!(f, "revoked by {by}")?,
            EndedHow::HandedOff => write!(f, "handed off, accepted by {by}")?,
            EndedHow::Expired => write!(f, "expired: no renewal reached the cluster in time")?,
            EndedHow::Gone => write!(f, "ended while this session was not listening")?,
        }
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        if let (EndedHow::Gone, Some(holder)) = (self.what, &self.new_holder) {
            write!(f, "; held by {holder} now")?;
        }
        write!(f, " (revision {})", self.revision)
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

/// The session's stream and the guards that listen to it.
#[derive(Default)]
pub(crate) struct Feed {
    state: Mutex<FeedState>,
    /// Pinged when the last guard unregisters, so that the stream closes.
    idle: Notify,
}

#[derive(Default)]
struct FeedState {
    /// Token -> the guards of that lease (a claim of a key already held returns the same
    /// token, so two guards may share one).
    listeners: HashMap<u64, Vec<Listener>>,
    /// How many listeners, over all tokens.
    count: usize,
    /// Endings that came for tokens nobody listened to, newest last.
    early: VecDeque<Ending>,
    /// Whether the stream task runs.
    running: bool,
    /// The revision the stream resumes from.
    next: u64,
}

struct Listener {
    id: u64,
    key: String,
    tell: oneshot::Sender<Ending>,
}

/// A guard's place at the feed; dropping it leaves.
pub(crate) struct Registration {
    client: Client,
    token: u64,
    id: u64,
    /// Completes with the lease's ending.
    pub(crate) ended: oneshot::Receiver<Ending>,
}

static NEXT_LISTENER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Feed {
    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

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
        if let Some(at) = state.early.iter().position(|e| e.token == token) {
            let early = state.early.remove(at).expect("found above");
            let _ = tell.send(early);
        } else {
            state.listeners.entry(token).or_default().push(Listener {
                id,
                key: key.to_owned(),
                tell,
            });
            state.count += 1;
        }
        if !state.running {
            // Nothing ran, so nothing was heard: the ending of this lease comes after its
            // grant, at `token` + 1 or later.
            state.running = true;
            state.next = token + 1;
            tokio::spawn(run(self.clone()));
        }
        drop(state);
        Some(Registration {
            client: self.clone(),
            token,
            id,
            ended,
        })
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
        if let Some(listeners) = state.listeners.get_mut(&self.token) {
            let before = listeners.len();
            listeners.retain(|l| l.id != self.id);
            let gone = before - listeners.len();
            if listeners.is_empty() {
                state.listeners.remove(&self.token);
            }
            state.count -= gone;
        }
        if state.count == 0 {
            drop(state);
            feed.idle.notify_one();
        }
    }
}

/// Hands `ending` to its token's listeners, or keeps it for one that registers late.
fn deliver(feed: &Feed, ending: Ending) {
    let mut state = feed.lock();
    match state.listeners.remove(&ending.token) {
        Some(listeners) => {
            state.count -= listeners.len();
            for listener in listeners {
                let _ = listener.tell.send(ending.clone());
            }
        }
        None => {
            if state.early.iter().any(|e| e.token == ending.token) {
                return;
            }
            if state.early.len() >= EARLY_ENDINGS_MAX {
                state.early.pop_front();
            }
            state.early.push_back(ending);
        }
    }
}

/// What one stream's life ended with.
enum Broke {
    /// No guard listens any more: stop.
    Idle,
    /// The revision is older than the leader's window: re-read the leases.
    Compacted,
    /// The node does not know the call.
    Unsupported,
    /// Try again (at the leader named, if any), after `wait`.
    Retry { wait: bool },
}

/// The stream task: runs while any guard listens.
async fn run(client: Client) {
    let feed = client.feed();
    let mut backoff = Backoff::new();
    loop {
        {
            let mut state = feed.lock();
            if state.count == 0 {
                state.running = false;
                return;
            }
        }
        let broke = stream_once(&client, &feed, &mut backoff).await;
        match broke {
            Broke::Idle => {
                let mut state = feed.lock();
                if state.count == 0 {
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
                deliver(feed, ending(message));
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

/// Past the leader's window: reads each followed lease linearizably, tells the guards of
/// the ones that are gone, and resumes from before the earliest read. False if a read
/// failed (the stream is tried again later; the guards' renewals go on meanwhile).
async fn recheck(client: &Client, feed: &Feed) -> bool {
    let leases: Vec<(u64, String)> = feed
        .lock()
        .listeners
        .iter()
        .filter_map(|(token, l)| l.first().map(|l| (*token, l.key.clone())))
        .collect();
    let mut resume: Option<u64> = None;
    for (token, key) in leases {
        let Ok(probe) = client.probe(&key, ReadMode::Linearizable).await else {
            return false;
        };
        resume = Some(resume.map_or(probe.revision, |r| r.min(probe.revision)));
        let current: Option<&LeaseInfo> = probe.lease.as_ref();
        if current.is_some_and(|l| l.token == token) {
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
    if let Some(revision) = resume {
        feed.lock().next = revision + 1;
    }
    true
}
