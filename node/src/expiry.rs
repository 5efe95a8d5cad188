//! Lease expiry (SPEC "Time and expiry"), the part of baton that reads a clock.
//!
//! Every node keeps a `Countdown` per held key, started at the instant *it* applied the
//! lease's grant or latest renewal (the entry named by the lease's `basis`). Only the leader
//! acts on them: when a countdown runs out it proposes `Expire{key, token, basis}`, and the
//! key becomes free only when that entry is committed and applied. An `Expire` that raced a
//! renewal names an old basis and the state machine ignores it.
//!
//! Why this is safe: a node applies an entry only after the client sent it, so a countdown
//! started at a local apply never ends before the client's own countdown (started at send
//! time). A new leader keeps the countdowns it started when it applied the entries itself,
//! so leases neither expire early nor get a fresh full TTL on every election. A node that
//! learns leases from a snapshot or a restart starts their countdowns then: later, so safe.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::ServerState;

use crate::clock::Clock;
use crate::core::limits::PROPOSAL_COMMANDS_MAX;
use crate::core::{FencingToken, LogCommand, Op, Proposal, Waiter};
use crate::limits::{EXPIRE_IN_FLIGHT_MAX, EXPIRE_PROPOSAL_TIMEOUT};
use crate::raft_types::Raft;

/// One lease's countdown on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Countdown {
    pub token: FencingToken,
    /// The entry (grant or renewal) this countdown started at.
    pub basis: u64,
    pub ttl: Duration,
    /// This node's apply instant of `basis`.
    pub started: Instant,
}

impl Countdown {
    fn deadline(&self) -> Instant {
        self.started + self.ttl
    }
}

/// All countdowns of this node, keyed by lease key, with an index by deadline so that the
/// expiry tick looks only at countdowns that ran out, not at every lease.
pub struct Countdowns {
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// B-trees, not a hash map (at a million keys a hash table is a power of two of buckets,
    /// up to twice the entries), sharing one allocation of each key.
    by_key: BTreeMap<Arc<str>, Stored>,
    /// `(deadline, key)` of every countdown in `by_key`.
    by_deadline: BTreeSet<(Instant, Arc<str>)>,
}

/// A `Countdown` as kept: the TTL in ms, not a `Duration`, to keep a million of them small.
#[derive(Clone, Copy)]
struct Stored {
    token: FencingToken,
    basis: u64,
    ttl_ms: u64,
    started: Instant,
}

impl Stored {
    fn countdown(&self) -> Countdown {
        Countdown {
            token: self.token,
            basis: self.basis,
            ttl: Duration::from_millis(self.ttl_ms),
            started: self.started,
        }
    }

    fn deadline(&self) -> Instant {
        self.countdown().deadline()
    }
}

impl Inner {
    fn insert(&mut self, key: Arc<str>, stored: Stored) {
        let key: Arc<str> = match self.by_key.get_key_value(&*key) {
            Some((k, old)) => {
                let k = k.clone();
                self.by_deadline.remove(&(old.deadline(), k.clone()));
                k
            }
            None => key,
        };
        self.by_deadline.insert((stored.deadline(), key.clone()));
        self.by_key.insert(key, stored);
    }

    fn remove(&mut self, key: &str) {
        if let Some((k, old)) = self.by_key.remove_entry(key) {
            self.by_deadline.remove(&(old.deadline(), k));
        }
    }
}

impl Countdowns {
    pub fn new(clock: Arc<dyn Clock>) -> Countdowns {
        Countdowns {
            clock,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("countdown lock poisoned")
    }

    /// A countdown with the same clock, for another kind of deadline (offers).
    pub fn sibling(&self) -> Countdowns {
        Countdowns::new(self.clock.clone())
    }

    /// The entry `basis`, just applied by this node, started a countdown of `ttl_ms` for
    /// `key` (a lease's grant or renewal, or an offer). Given an `Arc<str>` (the lease's), the
    /// countdown shares that string.
    pub fn start(&self, key: impl Into<Arc<str>>, token: FencingToken, basis: u64, ttl_ms: u64) {
        let stored = Stored {
            token,
            basis,
            ttl_ms,
            started: self.clock.now(),
        };
        self.lock().insert(key.into(), stored);
    }

    /// The lease or offer ended.
    pub fn stop(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Restarts every countdown now: after loading leases from disk or a snapshot, the node
    /// does not know when it applied them, and "now" is later than that, so it is safe.
    /// Items are `(key, token, basis, ttl_ms)`.
    pub fn restart_all(&self, items: impl Iterator<Item = (Arc<str>, FencingToken, u64, u64)>) {
        let now = self.clock.now();
        let mut inner = self.lock();
        *inner = Inner::default();
        for (key, token, basis, ttl_ms) in items {
            inner.insert(
                key,
                Stored {
                    token,
                    basis,
                    ttl_ms,
                    started: now,
                },
            );
        }
    }

    /// This node's estimate of the time left on the lease of `key` with `basis`.
    pub fn remaining(&self, key: &str, basis: u64) -> Option<Duration> {
        let inner = self.lock();
        let c = inner.by_key.get(key).filter(|c| c.basis == basis)?;
        Some(c.deadline().saturating_duration_since(self.clock.now()))
    }

    /// Countdowns that have run out, at most `limit`, skipping those in `skip`; earliest
    /// deadline first.
    pub fn due(&self, limit: usize, skip: &HashSet<(String, u64)>) -> Vec<(String, Countdown)> {
        let now = self.clock.now();
        let inner = self.lock();
        inner
            .by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .filter_map(|(_, key)| {
                let c = inner.by_key.get(key)?;
                (!skip.contains(&(key.to_string(), c.basis)))
                    .then(|| (key.to_string(), c.countdown()))
            })
            .take(limit)
            .collect()
    }

    /// The countdowns of keys starting with `prefix` and after `start_after`, in key order,
    /// at most `limit`: `(key, basis, ttl_ms, time left)`. Scans every countdown: for the
    /// few there are of a kind (quarantines), not for leases.
    pub fn under_prefix(
        &self,
        prefix: &str,
        start_after: &str,
        limit: usize,
    ) -> Vec<(String, u64, u64, Duration)> {
        let now = self.clock.now();
        let inner = self.lock();
        let mut found: Vec<(String, u64, u64, Duration)> = inner
            .by_key
            .iter()
            .filter(|(key, _)| key.starts_with(prefix) && &***key > start_after)
            .map(|(key, c)| {
                (
                    key.to_string(),
                    c.basis,
                    c.ttl_ms,
                    c.deadline().saturating_duration_since(now),
                )
            })
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found.truncate(limit);
        found
    }

    pub fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Milliseconds since the Unix epoch on this node's wall clock: stamped on entries for
/// people to read, never used to decide anything.
pub fn wall_clock_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The leader's expiry loop: every `tick`, if this node is the leader, propose `Expire` for
/// each lease countdown, `Lapse` for each offer countdown, `EndQuarantine` for each
/// quarantine countdown, `DropWaiter` for each waiter's place that ran out and `HandOn` for
/// each key whose line asked to be handed on again. Runs until
/// `shutdown` resolves.
pub async fn run(
    raft: Raft,
    leases: Arc<Countdowns>,
    offers: Arc<Countdowns>,
    quarantines: Arc<Countdowns>,
    waiters: Arc<Countdowns>,
    tick: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let in_flight: Arc<Mutex<HashSet<(String, u64)>>> = Arc::default();
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            _ = shutdown.changed() => return,
        }
        if raft.metrics().borrow().state != ServerState::Leader {
            continue;
        }
        // A permit's countdown is kept under its key and token (`core::permits`).
        let expire = |id: String, c: Countdown| Op::Expire {
            key: crate::core::permits::countdown_key(&id).to_owned(),
            token: c.token,
            basis: c.basis,
        };
        let lapse = |key: String, c: Countdown| Op::Lapse {
            key,
            offer_revision: c.basis,
        };
        let end_quarantine = |key: String, c: Countdown| Op::EndQuarantine {
            key,
            revision: c.basis,
        };
        // A waiter's countdown is kept under its key and session (`Waiter::countdown_id`);
        // a key's hand-on nudge under its key and no session (`Waiter::hand_on_id`).
        let drop_waiter = |id: String, c: Countdown| match Waiter::parse_countdown_id(&id) {
            Some((key, "")) => Op::HandOn {
                key: key.to_owned(),
                basis: c.basis,
            },
            found => {
                let (key, client_id) = found.unwrap_or((&id, ""));
                Op::DropWaiter {
                    key: key.to_owned(),
                    client_id: client_id.to_owned(),
                    basis: c.basis,
                }
            }
        };
        // Everything due this tick, within the room left in flight, in entries of up to
        // `PROPOSAL_COMMANDS_MAX` commands: one entry (one fsync, one replication round) for
        // many countdowns, not one each.
        let mut due: Vec<((String, u64), LogCommand)> = Vec::new();
        // In flight, and taken this tick. Revisions are unique across leases, offers,
        // quarantines and places in line, so one set serves all four.
        let mut skip = in_flight.lock().expect("in-flight lock").clone();
        for (countdowns, make_op) in [
            (&leases, &expire as &dyn Fn(String, Countdown) -> Op),
            (&offers, &lapse),
            (&quarantines, &end_quarantine),
            (&waiters, &drop_waiter),
        ] {
            let room = EXPIRE_IN_FLIGHT_MAX.saturating_sub(skip.len());
            for (key, countdown) in countdowns.due(room, &skip) {
                let id = (key.clone(), countdown.basis);
                skip.insert(id.clone());
                let cmd = LogCommand {
                    request_id: None,
                    leader_unix_ms: wall_clock_unix_ms(),
                    op: make_op(key, countdown),
                    sender: None,
                };
                due.push((id, cmd));
            }
        }
        while !due.is_empty() {
            let rest = due.split_off(due.len().min(PROPOSAL_COMMANDS_MAX));
            let batch = std::mem::replace(&mut due, rest);
            let (ids, commands): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            in_flight
                .lock()
                .expect("in-flight lock")
                .extend(ids.iter().cloned());
            let raft = raft.clone();
            let in_flight = in_flight.clone();
            let term = raft.metrics().borrow().current_term;
            tokio::spawn(async move {
                let n = commands.len();
                let write = raft.client_write(Proposal { commands });
                // Each id leaves `in_flight` when the write is answered, when this node no
                // longer leads the term it proposed in, or at `EXPIRE_PROPOSAL_TIMEOUT`,
                // whichever is first: a write never answered (its entry covered by a
                // snapshot install) must not keep its countdowns from the next leader term.
                let answered = tokio::select! {
                    answered = write => Some(answered),
                    () = left_term(&raft, term) => None,
                    () = tokio::time::sleep(EXPIRE_PROPOSAL_TIMEOUT) => None,
                };
                match answered {
                    Some(Ok(resp)) => tracing::info!(
                        commands = n, first = ?ids.first(), answers = resp.data.len(),
                        "proposed expiries"
                    ),
                    Some(Err(e)) => {
                        tracing::debug!(commands = n, error = %e, "expiry proposal failed; will retry")
                    }
                    None => tracing::info!(
                        commands = n, first = ?ids.first(),
                        "expiry proposal unanswered (leadership moved or timed out); due again"
                    ),
                }
                let mut in_flight = in_flight.lock().expect("in-flight lock");
                for id in &ids {
                    in_flight.remove(id);
                }
            });
        }
    }
}

/// Completes once this node is no longer the leader of `term` (or Raft has shut down).
async fn left_term(raft: &Raft, term: u64) {
    let mut watch = raft.metrics();
    loop {
        {
            let m = watch.borrow_and_update();
            if m.state != ServerState::Leader || m.current_term != term {
                return;
            }
        }
        if watch.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock that moves only when told.
    struct ManualClock {
        base: Instant,
        offset_ms: Mutex<u64>,
    }

    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            self.base + Duration::from_millis(*self.offset_ms.lock().unwrap())
        }
    }

    fn at(clock: &ManualClock, ms: u64) {
        *clock.offset_ms.lock().unwrap() = ms;
    }

    #[test]
    fn under_prefix_lists_keys_in_order_after_start_after_with_time_left() {
        let clock = Arc::new(ManualClock {
            base: Instant::now(),
            offset_ms: Mutex::new(0),
        });
        let cd = Countdowns::new(clock.clone());
        cd.start("p/b", 0, 7, 30_000);
        cd.start("p/a", 0, 5, 10_000);
        cd.start("q/c", 0, 9, 10_000);
        at(&clock, 4_000);
        assert_eq!(
            cd.under_prefix("p/", "", 10),
            [
                ("p/a".to_string(), 5, 10_000, Duration::from_secs(6)),
                ("p/b".to_string(), 7, 30_000, Duration::from_secs(26)),
            ]
        );
        assert_eq!(
            cd.under_prefix("p/", "p/a", 10).len(),
            1,
            "after start_after"
        );
        assert_eq!(cd.under_prefix("", "", 2).len(), 2, "at most limit");
        assert!(cd.under_prefix("z/", "", 10).is_empty());
    }

    #[test]
    fn due_lists_only_countdowns_that_ran_out_earliest_first_and_follows_restarts_and_stops() {
        let clock = Arc::new(ManualClock {
            base: Instant::now(),
            offset_ms: Mutex::new(0),
        });
        let cd = Countdowns::new(clock.clone());
        cd.start("a", 1, 1, 300);
        cd.start("b", 2, 2, 100);
        cd.start("c", 3, 3, 200);
        let keys = |due: Vec<(String, Countdown)>| -> Vec<String> {
            due.into_iter().map(|(k, _)| k).collect()
        };
        let none = HashSet::new();
        assert!(cd.due(10, &none).is_empty(), "nothing ran out at 0 ms");
        at(&clock, 250);
        assert_eq!(
            keys(cd.due(10, &none)),
            ["b", "c"],
            "earliest deadline first"
        );
        assert_eq!(keys(cd.due(1, &none)), ["b"], "at most `limit`");
        let skip: HashSet<(String, u64)> = [("b".to_string(), 2)].into();
        assert_eq!(keys(cd.due(10, &skip)), ["c"], "in-flight ones skipped");
        // A renewal restarts b's countdown from now; stopping c removes it.
        cd.start("b", 2, 4, 100);
        cd.stop("c");
        assert!(cd.due(10, &none).is_empty());
        at(&clock, 360);
        let due = cd.due(10, &none);
        assert_eq!(
            keys(due.clone()),
            ["a", "b"],
            "a at 300 ms, b at 250 + 100 ms"
        );
        assert_eq!(
            due[1].1.basis, 4,
            "the renewal's countdown, not the grant's"
        );
        assert_eq!(cd.len(), 2);
        // A restart (load from a snapshot) starts every countdown again from now.
        cd.restart_all([(Arc::from("x"), 9, 9, 50)].into_iter());
        assert_eq!(cd.len(), 1);
        assert!(cd.due(10, &none).is_empty());
        at(&clock, 410);
        assert_eq!(keys(cd.due(10, &none)), ["x"]);
    }
}
