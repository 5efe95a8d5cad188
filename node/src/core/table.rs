//! The lease table: baton's deterministic state machine.
//!
//! `LeaseTable::apply(index, command)` is the only way state changes. It reads no clock and
//! does no I/O, so every node that applies the same log reaches the same table. The sled
//! adapter (`store::state_machine`) persists what `apply` reports as changed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::limits::{DEDUP_ANSWERS_PER_CLIENT_MAX, DEDUP_CLIENTS_MAX};
use super::types::{Lease, LogCommand, Op, Outcome, RequestId};
use super::validate;

/// What the state machine remembers of one client for de-duplication.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSession {
    /// Log index of this client's latest request: orders clients for eviction.
    pub last_index: u64,
    /// The answers to the highest seqs seen, ordered by seq, at most
    /// `DEDUP_ANSWERS_PER_CLIENT_MAX`.
    pub answers: VecDeque<Answer>,
    /// Highest seq whose answer was dropped from `answers`. A request at or below it that is
    /// not in `answers` may have been applied already, so it is refused rather than applied
    /// a second time.
    pub forgotten_seq_max: u64,
}

/// One remembered answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub seq: u64,
    /// `Op::fingerprint` of the request that got this answer.
    pub op_fingerprint: u64,
    pub outcome: Outcome,
}

/// What an apply changed, for the storage adapter to write back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub keys: BTreeSet<String>,
    /// Clients whose session header (activity, forgotten seq) changed or who were forgotten.
    pub clients: BTreeSet<String>,
    /// Remembered answers added, as (client id, seq). Stored one per record so that no stored
    /// value grows large (sled never fsyncs values over ~128 KiB).
    pub answers_added: BTreeSet<(String, u64)>,
    /// Remembered answers dropped, as (client id, seq).
    pub answers_dropped: BTreeSet<(String, u64)>,
}

/// All leases and de-duplication sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTable {
    leases: BTreeMap<String, Lease>,
    sessions: BTreeMap<String, ClientSession>,
    /// `last_index -> client_id`, to find the least recently active client in O(log n).
    /// Derived from `sessions`; rebuilt on load.
    #[serde(skip)]
    by_activity: BTreeMap<u64, String>,
}

impl LeaseTable {
    /// Builds a table from stored leases and sessions (load from disk or snapshot).
    pub fn from_parts(
        leases: impl IntoIterator<Item = Lease>,
        sessions: impl IntoIterator<Item = (String, ClientSession)>,
    ) -> Self {
        let mut table = LeaseTable {
            leases: leases.into_iter().map(|l| (l.key.clone(), l)).collect(),
            sessions: sessions.into_iter().collect(),
            ..Default::default()
        };
        table.rebuild_index();
        table
    }

    /// Restores the derived index after deserializing.
    pub fn rebuild_index(&mut self) {
        self.by_activity = self
            .sessions
            .iter()
            .map(|(id, s)| (s.last_index, id.clone()))
            .collect();
    }

    pub fn lease(&self, key: &str) -> Option<&Lease> {
        self.leases.get(key)
    }

    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }

    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    pub fn sessions(&self) -> impl Iterator<Item = (&String, &ClientSession)> {
        self.sessions.iter()
    }

    pub fn session(&self, client_id: &str) -> Option<&ClientSession> {
        self.sessions.get(client_id)
    }

    /// Leases whose key starts with `prefix`, after `start_after`, at most `limit` of them;
    /// the flag says whether more match.
    pub fn board(&self, prefix: &str, start_after: &str, limit: usize) -> (Vec<&Lease>, bool) {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let lower = if start_after.is_empty() || start_after < prefix {
            Included(prefix.to_string())
        } else {
            Excluded(start_after.to_string())
        };
        let mut matching = self
            .leases
            .range((lower, Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, l)| l);
        let page: Vec<&Lease> = matching.by_ref().take(limit).collect();
        let truncated = matching.next().is_some();
        (page, truncated)
    }

    /// Applies the command of log entry `index`. Deterministic: same table, same index, same
    /// command, same result, on every node.
    pub fn apply(&mut self, index: u64, cmd: &LogCommand) -> Outcome {
        self.apply_tracked(index, cmd, &mut Changes::default())
    }

    /// `apply`, also noting in `changes` which keys and client sessions it changed, for the
    /// storage adapter to write back.
    pub fn apply_tracked(
        &mut self,
        index: u64,
        cmd: &LogCommand,
        changes: &mut Changes,
    ) -> Outcome {
        if let Some(id) = &cmd.request_id {
            if let Err(e) = validate::request_id(id) {
                return Outcome::Invalid { message: e.0 };
            }
            if let Some(earlier) = self.remembered(id, &cmd.op) {
                return earlier;
            }
        }
        let outcome = match validate::op(&cmd.op) {
            Err(e) => Outcome::Invalid { message: e.0 },
            Ok(()) => self.apply_op(index, cmd.leader_unix_ms, &cmd.op, changes),
        };
        if let Some(id) = &cmd.request_id {
            self.remember(index, id, cmd.op.fingerprint(), &outcome, changes);
        }
        #[cfg(debug_assertions)]
        self.check_invariants(index, cmd);
        outcome
    }

    /// The first answer to a retried request, or a refusal if that answer was forgotten.
    fn remembered(&self, id: &RequestId, op: &Op) -> Option<Outcome> {
        let session = self.sessions.get(&id.client_id)?;
        if let Some(answer) = session.answers.iter().find(|a| a.seq == id.seq) {
            if answer.op_fingerprint != op.fingerprint() {
                return Some(Outcome::Invalid {
                    message: format!(
                        "request id ({}, {}) was already used for a different request: \
                         give each request its own seq",
                        id.client_id, id.seq
                    ),
                });
            }
            return Some(answer.outcome.clone());
        }
        if id.seq <= session.forgotten_seq_max {
            return Some(Outcome::RetryTooOld {
                message: format!(
                    "request seq {} of client {} is too old to tell whether it was applied \
                     (only the latest {} answers are kept): probe the key to see its state",
                    id.seq, id.client_id, DEDUP_ANSWERS_PER_CLIENT_MAX
                ),
            });
        }
        None
    }

    fn remember(
        &mut self,
        index: u64,
        id: &RequestId,
        op_fingerprint: u64,
        outcome: &Outcome,
        changes: &mut Changes,
    ) {
        if !self.sessions.contains_key(&id.client_id) && self.sessions.len() >= DEDUP_CLIENTS_MAX {
            // Forget the client idle for the longest. Deterministic: ordered by log index.
            if let Some((_, idle)) = self.by_activity.pop_first() {
                if let Some(forgotten) = self.sessions.remove(&idle) {
                    for answer in forgotten.answers {
                        changes.answers_dropped.insert((idle.clone(), answer.seq));
                    }
                }
                changes.clients.insert(idle);
            }
        }
        let session = self.sessions.entry(id.client_id.clone()).or_default();
        if session.last_index != 0 {
            self.by_activity.remove(&session.last_index);
        }
        session.last_index = index;
        self.by_activity.insert(index, id.client_id.clone());
        let at = session.answers.partition_point(|a| a.seq < id.seq);
        session.answers.insert(
            at,
            Answer {
                seq: id.seq,
                op_fingerprint,
                outcome: outcome.clone(),
            },
        );
        changes.answers_added.insert((id.client_id.clone(), id.seq));
        if session.answers.len() > DEDUP_ANSWERS_PER_CLIENT_MAX {
            // Forget the lowest seq, not the first applied: requests in flight together can
            // commit out of order, and forgetting a high seq would refuse the first attempts
            // of the lower ones still on their way. With at most this many requests in flight
            // per client, no first attempt is ever refused.
            if let Some(dropped) = session.answers.pop_front() {
                session.forgotten_seq_max = session.forgotten_seq_max.max(dropped.seq);
                changes
                    .answers_dropped
                    .insert((id.client_id.clone(), dropped.seq));
            }
        }
        changes.clients.insert(id.client_id.clone());
    }

    fn apply_op(
        &mut self,
        index: u64,
        now_unix_ms: u64,
        op: &Op,
        changes: &mut Changes,
    ) -> Outcome {
        let key = op.key();
        let current = self.leases.get(key);
        let outcome = match op {
            Op::Claim { holder, ttl_ms, .. } => match current {
                None => {
                    let lease = Lease {
                        key: key.to_string(),
                        holder: holder.clone(),
                        token: index,
                        basis: index,
                        ttl_ms: *ttl_ms,
                        since_unix_ms: now_unix_ms,
                        renewed_unix_ms: now_unix_ms,
                    };
                    self.leases.insert(key.to_string(), lease.clone());
                    Outcome::Granted {
                        lease,
                        already_held: false,
                    }
                }
                Some(l) if l.holder.client_id == holder.client_id => {
                    // The same process claims again (e.g. it lost our answer): it keeps its
                    // token and the lease is renewed. The TTL never shrinks: another task of
                    // that process may be counting on the longer one it was granted, and
                    // restarting the countdown later with a TTL at least as long never ends
                    // it earlier.
                    let mut lease = l.clone();
                    lease.basis = index;
                    lease.ttl_ms = lease.ttl_ms.max(*ttl_ms);
                    lease.renewed_unix_ms = now_unix_ms;
                    lease.holder.name = holder.name.clone();
                    self.leases.insert(key.to_string(), lease.clone());
                    Outcome::Granted {
                        lease,
                        already_held: true,
                    }
                }
                Some(l) => Outcome::Held {
                    same_name_other_process: l.holder.name == holder.name,
                    lease: l.clone(),
                },
            },
            Op::Renew { token, .. } => match current {
                Some(l) if l.token == *token => {
                    let mut lease = l.clone();
                    lease.basis = index;
                    lease.renewed_unix_ms = now_unix_ms;
                    self.leases.insert(key.to_string(), lease.clone());
                    Outcome::Renewed { lease }
                }
                _ => Outcome::Lost {
                    current: current.cloned(),
                },
            },
            Op::Release { token, .. } => match current {
                Some(l) if l.token == *token => Outcome::Released {
                    lease: self.leases.remove(key).expect("checked above"),
                },
                _ => Outcome::Lost {
                    current: current.cloned(),
                },
            },
            Op::Expire { token, basis, .. } => match current {
                Some(l) if l.token == *token && l.basis == *basis => Outcome::Expired {
                    lease: self.leases.remove(key).expect("checked above"),
                },
                _ => Outcome::ExpireIgnored,
            },
            Op::Revoke { .. } => Outcome::Revoked {
                previous: self.leases.remove(key),
            },
        };
        if !matches!(
            outcome,
            Outcome::Held { .. } | Outcome::Lost { .. } | Outcome::ExpireIgnored
        ) {
            changes.keys.insert(key.to_string());
        }
        outcome
    }

    /// Invariants that hold after every apply (debug builds check them each time). Only what
    /// the entry could have touched is checked, so the cost stays O(log n) per apply.
    #[cfg(debug_assertions)]
    fn check_invariants(&self, index: u64, cmd: &LogCommand) {
        let key = cmd.op.key();
        if let Some(lease) = self.leases.get(key) {
            assert_eq!(key, lease.key, "lease stored under another key");
            assert!(lease.token >= 1, "token 0 on {key}");
            assert!(lease.token <= lease.basis, "basis before token on {key}");
            assert!(lease.basis <= index, "basis from the future on {key}");
        }
        assert!(
            self.sessions.len() <= DEDUP_CLIENTS_MAX,
            "too many sessions"
        );
        assert_eq!(
            self.sessions.len(),
            self.by_activity.len(),
            "activity index"
        );
        if let Some(id) = &cmd.request_id {
            if let Some(session) = self.sessions.get(&id.client_id) {
                assert!(session.answers.len() <= DEDUP_ANSWERS_PER_CLIENT_MAX);
                assert!(
                    session
                        .answers
                        .iter()
                        .zip(session.answers.iter().skip(1))
                        .all(|(a, b)| a.seq < b.seq),
                    "answers ordered by seq"
                );
                assert_eq!(
                    self.by_activity.get(&session.last_index),
                    Some(&id.client_id)
                );
            }
        }
    }
}
