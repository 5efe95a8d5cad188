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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::ServerState;

use crate::clock::Clock;
use crate::core::{FencingToken, Lease, LogCommand, Op, Proposal};
use crate::raft_types::Raft;

/// `Expire` proposals the leader has in flight at most; the rest wait for the next tick.
pub const EXPIRE_IN_FLIGHT_MAX: usize = 256;

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

/// All countdowns of this node, keyed by lease key.
pub struct Countdowns {
    clock: Arc<dyn Clock>,
    by_key: Mutex<HashMap<String, Countdown>>,
}

impl Countdowns {
    pub fn new(clock: Arc<dyn Clock>) -> Countdowns {
        Countdowns {
            clock,
            by_key: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Countdown>> {
        self.by_key.lock().expect("countdown lock poisoned")
    }

    /// A countdown with the same clock, for another kind of deadline (offers).
    pub fn sibling(&self) -> Countdowns {
        Countdowns::new(self.clock.clone())
    }

    /// The entry `basis`, just applied by this node, started a countdown of `ttl_ms` for
    /// `key` (a lease's grant or renewal, or an offer).
    pub fn start(&self, key: &str, token: FencingToken, basis: u64, ttl_ms: u64) {
        let countdown = Countdown {
            token,
            basis,
            ttl: Duration::from_millis(ttl_ms),
            started: self.clock.now(),
        };
        self.map().insert(key.to_string(), countdown);
    }

    /// The lease or offer ended.
    pub fn stop(&self, key: &str) {
        self.map().remove(key);
    }

    /// Restarts every countdown now: after loading leases from disk or a snapshot, the node
    /// does not know when it applied them, and "now" is later than that, so it is safe.
    /// Items are `(key, token, basis, ttl_ms)`.
    pub fn restart_all<'a>(&self, items: impl Iterator<Item = (&'a str, FencingToken, u64, u64)>) {
        let now = self.clock.now();
        let mut map = self.map();
        map.clear();
        for (key, token, basis, ttl_ms) in items {
            map.insert(
                key.to_string(),
                Countdown {
                    token,
                    basis,
                    ttl: Duration::from_millis(ttl_ms),
                    started: now,
                },
            );
        }
    }

    /// `restart_all` for leases.
    pub fn restart_leases<'a>(&self, leases: impl Iterator<Item = &'a Lease>) {
        self.restart_all(leases.map(|l| (l.key.as_str(), l.token, l.basis, l.ttl_ms)));
    }

    /// This node's estimate of the time left on the lease of `key` with `basis`.
    pub fn remaining(&self, key: &str, basis: u64) -> Option<Duration> {
        let map = self.map();
        let c = map.get(key).filter(|c| c.basis == basis)?;
        Some(c.deadline().saturating_duration_since(self.clock.now()))
    }

    /// Countdowns that have run out, at most `limit`, skipping those in `skip`.
    pub fn due(&self, limit: usize, skip: &HashSet<(String, u64)>) -> Vec<(String, Countdown)> {
        let now = self.clock.now();
        self.map()
            .iter()
            .filter(|(key, c)| c.deadline() <= now && !skip.contains(&((*key).clone(), c.basis)))
            .take(limit)
            .map(|(k, c)| (k.clone(), *c))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.map().len()
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
/// each lease countdown, `Lapse` for each offer countdown and `EndQuarantine` for each
/// quarantine countdown that ran out. Runs until
/// `shutdown` resolves.
pub async fn run(
    raft: Raft,
    leases: Arc<Countdowns>,
    offers: Arc<Countdowns>,
    quarantines: Arc<Countdowns>,
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
        let expire = |key: String, c: Countdown| Op::Expire {
            key,
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
        for (countdowns, make_op) in [
            (&leases, &expire as &dyn Fn(String, Countdown) -> Op),
            (&offers, &lapse),
            (&quarantines, &end_quarantine),
        ] {
            let skip = in_flight.lock().expect("in-flight lock").clone();
            let room = EXPIRE_IN_FLIGHT_MAX.saturating_sub(skip.len());
            for (key, countdown) in countdowns.due(room, &skip) {
                // Revisions are unique across leases and offers, so one in-flight set serves.
                let id = (key.clone(), countdown.basis);
                in_flight.lock().expect("in-flight lock").insert(id.clone());
                let op = make_op(key.clone(), countdown);
                let raft = raft.clone();
                let in_flight = in_flight.clone();
                tokio::spawn(async move {
                    let cmd = LogCommand {
                        request_id: None,
                        leader_unix_ms: wall_clock_unix_ms(),
                        op,
                    };
                    match raft.client_write(Proposal::one(cmd)).await {
                        Ok(resp) => tracing::info!(
                            key = %key, token = countdown.token, basis = countdown.basis,
                            answer = ?resp.data, "proposed expiry"
                        ),
                        Err(e) => {
                            tracing::debug!(key = %key, error = %e, "expiry proposal failed; will retry")
                        }
                    }
                    in_flight.lock().expect("in-flight lock").remove(&id);
                });
            }
        }
    }
}
