//! Watches: every event of a key prefix, in revision order, resumable.
//!
//! Each node keeps a window of the latest events it applied (its own, so followers serve
//! watches too). A watcher names the first revision it wants; it gets every event from
//! there on and then live ones. A revision older than the window is refused as
//! `compacted`, so a client never silently misses events: it re-reads the board and
//! watches on from that revision. The window is rebuilt from the keys' histories at start
//! and after a snapshot install, so a restart does not forget it.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::core::{Event, LeaseTable};
use crate::limits::WATCH_WINDOW_EVENTS_MAX;

/// A revision older than the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "compacted: revision {requested} is older than this node's watch window, which starts at \
     {first_available}; re-read the board and watch from its revision"
)]
pub struct Compacted {
    pub requested: u64,
    pub first_available: u64,
}

impl Compacted {
    /// The status a watcher gets: OUT_OF_RANGE, this message, and the numbers as a
    /// `pb::Compacted` in the details, so that clients read fields rather than text.
    pub fn status(&self) -> tonic::Status {
        let details = baton_proto::v1::Compacted {
            requested: self.requested,
            first_available: self.first_available,
        };
        tonic::Status::with_details(
            tonic::Code::OutOfRange,
            self.to_string(),
            prost::Message::encode_to_vec(&details).into(),
        )
    }
}

struct Window {
    /// (key, event), in revision order.
    events: VecDeque<(String, Event)>,
    /// Every event with a revision at or above this is in `events`.
    complete_from: u64,
}

/// The node's watch window and the signal that it grew.
pub struct WatchHub {
    window: Mutex<Window>,
    capacity: usize,
    /// The latest applied revision, bumped after each apply batch.
    latest: tokio::sync::watch::Sender<u64>,
}

impl WatchHub {
    pub fn new(capacity: usize) -> WatchHub {
        WatchHub {
            window: Mutex::new(Window {
                events: VecDeque::new(),
                complete_from: 1,
            }),
            capacity: capacity.clamp(1, WATCH_WINDOW_EVENTS_MAX),
            latest: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().expect("watch window lock")
    }

    /// Rebuilds the window from the keys' histories (at start, after a snapshot install).
    pub fn reset(&self, table: &LeaseTable, applied: u64) {
        let mut all: Vec<(String, Event)> = Vec::new();
        // A key whose history was compacted is complete only from its first kept event.
        let mut complete_from = 1;
        for (key, case) in table.cases() {
            if case.history.dropped > 0 {
                if let Some(first) = case.history.events.front() {
                    complete_from = complete_from.max(first.revision);
                }
            }
            all.extend(
                case.history
                    .events
                    .iter()
                    .map(|e| (key.to_string(), e.clone())),
            );
        }
        all.sort_by_key(|(_, e)| e.revision);
        if all.len() > self.capacity {
            let cut = all.len() - self.capacity;
            complete_from = complete_from.max(all[cut - 1].1.revision + 1);
            all.drain(..cut);
        }
        let mut window = self.lock();
        window.events = all.into();
        window.complete_from = complete_from;
        drop(window);
        self.latest.send_replace(applied);
    }

    /// Adds the events of an apply batch (in revision order) and wakes the watchers.
    pub fn publish(&self, events: impl IntoIterator<Item = (String, Event)>, applied: u64) {
        let mut window = self.lock();
        for item in events {
            window.events.push_back(item);
        }
        while window.events.len() > self.capacity {
            if let Some((_, dropped)) = window.events.pop_front() {
                window.complete_from = window.complete_from.max(dropped.revision + 1);
            }
        }
        drop(window);
        self.latest.send_replace(applied);
    }

    /// The latest applied revision this node published.
    pub fn latest(&self) -> u64 {
        *self.latest.borrow()
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.latest.subscribe()
    }

    /// Events of keys under `prefix` from revision `from` on, at most `limit`, and the
    /// revision to read from next time.
    pub fn read_from(
        &self,
        prefix: &str,
        from: u64,
        limit: usize,
    ) -> Result<(Vec<(String, Event)>, u64), Compacted> {
        let window = self.lock();
        if from < window.complete_from {
            return Err(Compacted {
                requested: from,
                first_available: window.complete_from,
            });
        }
        let start = window.events.partition_point(|(_, e)| e.revision < from);
        let mut next = from;
        let mut out = Vec::new();
        for (key, event) in window.events.range(start..) {
            // Never between two events of one revision (a set's keys, a release and the
            // hand-on to a waiter): the next read starts at the revision after.
            if out.len() >= limit && event.revision + 1 != next {
                break;
            }
            next = event.revision + 1;
            if key.starts_with(prefix) {
                out.push((key.clone(), event.clone()));
            }
        }
        Ok((out, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::EventKind;

    fn ev(rev: u64) -> Event {
        Event {
            revision: rev,
            kind: EventKind::Claimed,
            actor: None,
            attribution: crate::core::Attribution::Requester,
            token: rev,
            unix_ms: 0,
            detail: String::new(),
        }
    }

    #[test]
    fn reads_resume_without_gaps_or_repeats_and_old_revisions_are_compacted() {
        let hub = WatchHub::new(4);
        hub.publish([("a/1".to_string(), ev(1)), ("b/1".to_string(), ev(2))], 2);
        hub.publish([("a/2".to_string(), ev(3))], 3);
        let (got, next) = hub.read_from("a/", 1, 10).unwrap();
        assert_eq!(
            got.iter().map(|(_, e)| e.revision).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(next, 4);
        let (got, next) = hub.read_from("a/", next, 10).unwrap();
        assert!(got.is_empty());
        assert_eq!(next, 4);
        hub.publish([("a/3".to_string(), ev(4)), ("a/4".to_string(), ev(5))], 5);
        // Capacity 4: revision 1 fell out of the window.
        assert_eq!(
            hub.read_from("a/", 1, 10).unwrap_err(),
            Compacted {
                requested: 1,
                first_available: 2
            }
        );
        let (got, _) = hub.read_from("a/", 4, 1).unwrap();
        assert_eq!(
            got[0].1.revision, 4,
            "a limit stops early; the rest comes next read"
        );
    }
}
