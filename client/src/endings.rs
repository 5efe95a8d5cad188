//! Hearing at once that a lease ended: one stream per client session from the leader
//! (`Endings`), shared by every [`crate::LeaseGuard`] of the [`crate::Client`]. The stream
//! itself is `crate::following`; here are what it tells and where it keeps its listeners.
//! The same stream tells the session's waits in line ([`crate::Client::wait_in_line`]) that
//! the line granted them their key, as the granting entry applies on the leader.
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
use std::time::Duration;

use tokio::sync::{oneshot, Notify};

use crate::types::ActorInfo;

/// Leases one session's guards follow through its stream; a guard beyond it is refused
/// ([`crate::Error::InvalidArgument`]) before anything is claimed.
pub const LEASES_PER_SESSION_MAX: usize = 100_000;

/// Endings kept for leases no guard has registered yet (a lease ended in the moment
/// between its grant's answer and its guard's start); the oldest is dropped first.
pub const EARLY_ENDINGS_MAX: usize = 1_024;

/// Grants from a line kept for a wait that is not listening yet (the grant came while it
/// renewed its place); the oldest is dropped first.
pub const EARLY_GRANTS_MAX: usize = 1_024;

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

/// A grant a key's line made to this session, as the leader pushed it on the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineGrant {
    pub(crate) key: String,
    pub(crate) token: u64,
    /// The granting entry's revision.
    pub(crate) revision: u64,
    pub(crate) at_unix_ms: u64,
    /// The key's assignment, if it has one.
    pub(crate) assignment: Option<crate::types::AssignmentInfo>,
    /// For a permit or a share: the key's holders, this grant among them, as the leader
    /// read them when it pushed the grant (`None` from an older node).
    pub(crate) permits: Option<crate::types::KeyHolders>,
}

/// What a wait in line hears from the stream.
#[derive(Debug)]
pub(crate) enum Heard {
    /// The line granted the key to this session (maybe a grant of an earlier wait: the
    /// waiter compares its revision with its place's).
    Granted(LineGrant),
    /// The stream cannot say (the session was away longer than the leader's window): the
    /// waiter asks the cluster by renewing its place.
    Recheck,
}

/// The session's stream and the guards and waits that listen to it.
#[derive(Default)]
pub(crate) struct Feed {
    pub(crate) state: Mutex<FeedState>,
    /// Pinged when the last guard unregisters, so that the stream closes.
    pub(crate) idle: Notify,
}

#[derive(Default)]
pub(crate) struct FeedState {
    /// (Key, token) -> the guards of that lease (a claim of a key already held returns the
    /// same token, so two guards may share one; the keys of a set claimed together share
    /// their token, so a token alone does not name a lease).
    pub(crate) listeners: HashMap<(String, u64), Vec<Listener>>,
    /// How many listeners, over all leases.
    pub(crate) count: usize,
    /// Endings that came for leases nobody listened to, newest last.
    pub(crate) early: VecDeque<Ending>,
    /// Key -> the waits in its line listening for their grant.
    pub(crate) waits: HashMap<String, Vec<WaitListener>>,
    /// How many wait listeners, over all keys.
    pub(crate) waiting: usize,
    /// Grants that came for keys no wait listened to, newest last.
    pub(crate) early_grants: VecDeque<LineGrant>,
    /// Whether the stream task runs.
    pub(crate) running: bool,
    /// The revision the stream resumes from.
    pub(crate) next: u64,
}

pub(crate) struct WaitListener {
    pub(crate) id: u64,
    pub(crate) tell: oneshot::Sender<Heard>,
}

pub(crate) struct Listener {
    pub(crate) id: u64,
    pub(crate) tell: oneshot::Sender<Ending>,
}

impl Feed {
    pub(crate) fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl FeedState {
    /// Whether nobody listens: no guard, no wait (the stream then closes).
    pub(crate) fn idle(&self) -> bool {
        self.count == 0 && self.waiting == 0
    }
}

/// Hands `grant` to the waits in its key's line, or keeps it for one that listens late.
pub(crate) fn deliver_grant(feed: &Feed, grant: LineGrant) {
    let mut state = feed.lock();
    match state.waits.remove(&grant.key) {
        Some(waits) => {
            state.waiting -= waits.len();
            for wait in waits {
                let _ = wait.tell.send(Heard::Granted(grant.clone()));
            }
        }
        None => {
            if state.early_grants.contains(&grant) {
                return;
            }
            if state.early_grants.len() >= EARLY_GRANTS_MAX {
                state.early_grants.pop_front();
            }
            state.early_grants.push_back(grant);
        }
    }
}

/// Tells every wait that the stream missed what it was to hear: each asks the cluster.
pub(crate) fn recheck_waits(feed: &Feed) {
    let mut state = feed.lock();
    state.waiting = 0;
    state.early_grants.clear();
    for (_, waits) in state.waits.drain() {
        for wait in waits {
            let _ = wait.tell.send(Heard::Recheck);
        }
    }
}

/// Hands `ending` to its lease's listeners, or keeps it for one that registers late.
pub(crate) fn deliver(feed: &Feed, ending: Ending) {
    let mut state = feed.lock();
    match state.listeners.remove(&(ending.key.clone(), ending.token)) {
        Some(listeners) => {
            state.count -= listeners.len();
            for listener in listeners {
                let _ = listener.tell.send(ending.clone());
            }
        }
        None => {
            if state
                .early
                .iter()
                .any(|e| e.token == ending.token && e.key == ending.key)
            {
                return;
            }
            if state.early.len() >= EARLY_ENDINGS_MAX {
                state.early.pop_front();
            }
            state.early.push_back(ending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(key: &str, revision: u64) -> LineGrant {
        LineGrant {
            key: key.to_owned(),
            token: revision,
            revision,
            at_unix_ms: 0,
            assignment: None,
            permits: None,
        }
    }

    fn listen(feed: &Feed, key: &str) -> oneshot::Receiver<Heard> {
        let (tell, heard) = oneshot::channel();
        let mut state = feed.lock();
        state
            .waits
            .entry(key.to_owned())
            .or_default()
            .push(WaitListener { id: 1, tell });
        state.waiting += 1;
        heard
    }

    #[test]
    fn a_grant_goes_to_the_waits_of_its_key_or_is_kept_for_a_late_one_within_bounds() {
        let feed = Feed::default();
        let mut waiting = listen(&feed, "k");
        deliver_grant(&feed, grant("other", 5));
        assert!(
            waiting.try_recv().is_err(),
            "another key's grant is not this wait's"
        );
        deliver_grant(&feed, grant("k", 7));
        match waiting.try_recv() {
            Ok(Heard::Granted(g)) => assert_eq!((g.key.as_str(), g.revision), ("k", 7)),
            other => panic!("{other:?}"),
        }
        let state = feed.lock();
        assert_eq!(state.waiting, 0, "a told wait no longer listens");
        assert!(state.idle());
        assert_eq!(state.early_grants, [grant("other", 5)]);
        drop(state);
        // Kept once, and no more than EARLY_GRANTS_MAX, the oldest dropped first.
        deliver_grant(&feed, grant("other", 5));
        assert_eq!(feed.lock().early_grants.len(), 1, "a repeat is kept once");
        for revision in 10..10 + EARLY_GRANTS_MAX as u64 {
            deliver_grant(&feed, grant("many", revision));
        }
        let state = feed.lock();
        assert_eq!(state.early_grants.len(), EARLY_GRANTS_MAX);
        assert_eq!(state.early_grants.front(), Some(&grant("many", 10)));
    }

    #[test]
    fn a_recheck_tells_every_wait_to_ask_the_cluster_and_forgets_early_grants() {
        let feed = Feed::default();
        let mut a = listen(&feed, "a");
        let mut b = listen(&feed, "b");
        deliver_grant(&feed, grant("c", 3));
        recheck_waits(&feed);
        assert!(matches!(a.try_recv(), Ok(Heard::Recheck)));
        assert!(matches!(b.try_recv(), Ok(Heard::Recheck)));
        let state = feed.lock();
        assert!(state.waits.is_empty() && state.waiting == 0 && state.early_grants.is_empty());
    }
}
