//! Lease endings, per client session: what a holder is pushed when its lease ends other
//! than by its own release (revoked, handed off, expired).
//!
//! The node keeps a window of the latest endings it applied, in revision order, and a wake
//! signal per session with an open stream, so an apply wakes only the streams whose
//! sessions lost a lease (not every stream, as one watch signal would). A stream names the
//! first revision it wants; a revision older than the window is refused as `compacted`, and
//! the client then re-reads its leases. The window starts empty at the node's applied
//! revision (at start, after a snapshot install): endings are not kept in the state, the
//! history is, and a client that missed some re-reads.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::core::Ending;
use crate::watch::Compacted;

struct Window {
    /// In revision order.
    endings: VecDeque<Arc<Ending>>,
    /// Every ending with a revision at or above this is in `endings`.
    complete_from: u64,
    /// The latest applied revision: the window is complete up to it.
    applied: u64,
    /// One wake signal per session with open streams (the value counts wakes).
    sessions: HashMap<String, tokio::sync::watch::Sender<u64>>,
    /// Streams open (subscriptions alive).
    streams: usize,
}

/// The node's window of lease endings and the per-session wake signals.
pub struct EndingsHub {
    window: Mutex<Window>,
    capacity: usize,
    streams_max: usize,
}

/// An open stream's hold on its session's wake signal; dropping it lets go.
pub struct Subscription {
    hub: Arc<EndingsHub>,
    session: String,
    wake: tokio::sync::watch::Receiver<u64>,
}

/// More streams than the node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this node serves {max} endings streams already (ENDINGS_STREAMS_MAX)")]
pub struct TooManyStreams {
    pub max: usize,
}

/// What a stream reads: the endings of its session from a revision on, and where to read
/// next.
#[derive(Debug)]
pub struct Read {
    pub endings: Vec<Arc<Ending>>,
    /// The revision to read from next time: every ending of the session below it was in
    /// this read or an earlier one.
    pub next: u64,
}

impl EndingsHub {
    pub fn new(capacity: usize, streams_max: usize) -> EndingsHub {
        EndingsHub {
            window: Mutex::new(Window {
                endings: VecDeque::new(),
                complete_from: 1,
                applied: 0,
                sessions: HashMap::new(),
                streams: 0,
            }),
            capacity: capacity.max(1),
            streams_max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().expect("endings window lock")
    }

    /// Starts the window afresh at `applied` (at start, after a snapshot install): endings
    /// before it are not known here. Every stream is woken, to find itself compacted.
    pub fn reset(&self, applied: u64) {
        let mut window = self.lock();
        window.endings.clear();
        window.complete_from = applied + 1;
        window.applied = applied;
        for wake in window.sessions.values() {
            wake.send_modify(|n| *n += 1);
        }
    }

    /// Adds the endings of an apply batch (in revision order) and wakes their sessions.
    pub fn publish(&self, endings: Vec<Ending>, applied: u64) {
        let mut window = self.lock();
        for ending in endings {
            if let Some(wake) = window.sessions.get(&*ending.holder.client_id) {
                wake.send_modify(|n| *n += 1);
            }
            window.endings.push_back(Arc::new(ending));
        }
        while window.endings.len() > self.capacity {
            if let Some(dropped) = window.endings.pop_front() {
                window.complete_from = window.complete_from.max(dropped.revision + 1);
            }
        }
        window.applied = window.applied.max(applied);
    }

    /// The latest applied revision.
    pub fn applied(&self) -> u64 {
        self.lock().applied
    }

    /// Opens a stream for `session`, unless the node serves its maximum already.
    pub fn subscribe(self: &Arc<Self>, session: &str) -> Result<Subscription, TooManyStreams> {
        let mut window = self.lock();
        if window.streams >= self.streams_max {
            return Err(TooManyStreams {
                max: self.streams_max,
            });
        }
        window.streams += 1;
        let wake = window
            .sessions
            .entry(session.to_owned())
            .or_insert_with(|| tokio::sync::watch::Sender::new(0))
            .subscribe();
        Ok(Subscription {
            hub: Arc::clone(self),
            session: session.to_owned(),
            wake,
        })
    }

    /// The endings of `session` from revision `from` on, at most about `limit` (a revision's
    /// endings are never split).
    pub fn read(&self, session: &str, from: u64, limit: usize) -> Result<Read, Compacted> {
        let window = self.lock();
        if from < window.complete_from {
            return Err(Compacted {
                requested: from,
                first_available: window.complete_from,
            });
        }
        let start = window.endings.partition_point(|e| e.revision < from);
        let mut endings: Vec<Arc<Ending>> = Vec::new();
        for ending in window.endings.range(start..) {
            if endings.len() >= limit && endings.last().map(|e| e.revision) != Some(ending.revision)
            {
                return Ok(Read {
                    next: ending.revision,
                    endings,
                });
            }
            if &*ending.holder.client_id == session {
                endings.push(Arc::clone(ending));
            }
        }
        Ok(Read {
            endings,
            next: from.max(window.applied + 1),
        })
    }

    /// Streams open now.
    pub fn streams(&self) -> usize {
        self.lock().streams
    }
}

impl Subscription {
    /// Completes when an ending of this session applies (or the window was reset).
    pub async fn woken(&mut self) {
        // The sender lives as long as this subscription does.
        let _ = self.wake.changed().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut window = self.hub.lock();
        window.streams -= 1;
        // This receiver is still counted while it is being dropped.
        let last = window
            .sessions
            .get(&self.session)
            .is_some_and(|wake| wake.receiver_count() <= 1);
        if last {
            window.sessions.remove(&self.session);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{EventKind, Holder, Name};

    fn ending(session: &str, revision: u64) -> Ending {
        Ending {
            key: Arc::from(format!("k/{revision}")),
            holder: Holder {
                name: Name::from("h"),
                client_id: Name::from(session),
            },
            token: revision - 1,
            kind: EventKind::Revoked,
            by: None,
            reason: String::new(),
            successor: None,
            assignment: None,
            revision,
            unix_ms: 0,
        }
    }

    #[test]
    fn a_session_reads_only_its_own_endings_resumes_without_gaps_and_old_revisions_are_compacted() {
        let hub = Arc::new(EndingsHub::new(3, 10));
        hub.reset(10);
        hub.publish(vec![ending("a", 11), ending("b", 12)], 12);
        let read = hub.read("a", 11, 10).unwrap();
        assert_eq!(read.endings.len(), 1);
        assert_eq!(read.endings[0].revision, 11);
        assert_eq!(read.next, 13, "up to date with every applied revision");
        assert!(hub.read("a", 13, 10).unwrap().endings.is_empty());
        hub.publish(vec![ending("a", 13), ending("a", 14)], 20);
        // Capacity 3: revision 11 fell out.
        assert_eq!(
            hub.read("a", 11, 10).unwrap_err(),
            Compacted {
                requested: 11,
                first_available: 12
            }
        );
        let read = hub.read("a", 12, 1).unwrap();
        assert_eq!(read.endings.len(), 1, "a limit stops early");
        assert_eq!(
            read.next, 14,
            "and the next read starts at the first one left"
        );
        let read = hub.read("a", read.next, 1).unwrap();
        assert_eq!(read.endings[0].revision, 14);
        assert_eq!(read.next, 21);
        // Before the reset's revision: not known here.
        hub.reset(30);
        assert!(hub.read("a", 21, 10).is_err());
        assert!(hub.read("a", 31, 10).unwrap().endings.is_empty());
    }

    #[tokio::test]
    async fn streams_are_counted_limited_and_woken_only_by_their_session() {
        let hub = Arc::new(EndingsHub::new(100, 2));
        let mut a = hub.subscribe("a").unwrap();
        let b = hub.subscribe("b").unwrap();
        assert_eq!(
            hub.subscribe("c").err(),
            Some(TooManyStreams { max: 2 }),
            "the third stream is refused"
        );
        hub.publish(vec![ending("b", 2)], 2);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), a.woken())
                .await
                .is_err(),
            "b's ending does not wake a"
        );
        hub.publish(vec![ending("a", 3)], 3);
        tokio::time::timeout(std::time::Duration::from_secs(5), a.woken())
            .await
            .expect("a's ending wakes a");
        drop(b);
        assert_eq!(hub.streams(), 1);
        assert!(
            hub.subscribe("c").is_ok(),
            "a closed stream frees its place"
        );
        drop(a);
        assert!(
            !hub.lock().sessions.contains_key("a"),
            "no signal is kept for a closed session"
        );
    }
}
