//! The lease table: baton's deterministic state machine.
//!
//! `LeaseTable::apply(index, command)` is the only way state changes. It reads no clock and
//! does no I/O, so every node that applies the same log reaches the same table. The sled
//! adapter (`store::state_machine`) persists what `apply` reports as changed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::access::AccessState;
use super::case::{Assignment, CaseFile, Event};
use super::limits::{DEDUP_ANSWERS_PER_CLIENT_MAX, DEDUP_CLIENTS_MAX, KEYS_MAX};
use super::line::Line;
use super::refusal::Refusal;
use super::types::{Blocked, Holder, Lease, LogCommand, Op, Outcome, RequestId};
use super::validate;

#[cfg(debug_assertions)]
mod invariants;
mod line;
mod memory;
mod next;
mod permits;
mod set;
mod step;
mod unfinished;

pub use next::Walk;
use step::Step;
use unfinished::Unfinished;

/// What the state machine remembers of one client for de-duplication.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSession {
    /// Revision of this client's latest request: orders clients for eviction.
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
    /// The revision the first attempt was decided at, which a retry's answer carries too
    /// (data format 4; 0 for answers remembered by format 3, which did not keep it).
    pub revision: u64,
}

/// A countdown a node runs on its own monotonic clock, from its own apply of an entry: when
/// it runs out on the leader, the leader proposes the entry that ends what it counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// A lease's TTL; its end is an `Expire`.
    Lease,
    /// A pending offer's TTL; its end is a `Lapse`.
    Offer,
    /// A quarantine's delay; its end is an `EndQuarantine`.
    Quarantine,
    /// A waiter's place in a key's line (its key is `Waiter::countdown_id`); its end is a
    /// `DropWaiter`.
    Waiter,
}

/// What an apply asks of the node besides the table: the core decides, the adapter
/// (`store::state_machine`) carries it out. Each `Step` fills these in as it changes the
/// table, so no one re-derives them by reading the table again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Start (or restart) `key`'s countdown of this kind now, for `ms`; it names `token` and
    /// `basis`, which the entry that ends it must name (a lease's token and grant or renewal;
    /// an offer's giver token and revision; a quarantine's revision, twice).
    Start {
        timer: Timer,
        key: Arc<str>,
        token: u64,
        basis: u64,
        ms: u64,
    },
    /// Stop `key`'s countdown of this kind: what it counted has ended.
    Stop { timer: Timer, key: Arc<str> },
}

/// What applies added besides the table, in order: the history events (what watchers are
/// told), the lease endings and grants from a line (what each holder's session is told)
/// and the countdown effects.
/// Empty for a retry answered from memory: it changes nothing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// History events appended, with their keys, in revision order.
    pub events: Vec<(Arc<str>, Event)>,
    /// Leases that ended other than by their holder's own release, and leases a line
    /// granted (kind `Claimed`), in revision order.
    pub endings: Vec<Ending>,
    /// Countdowns to start and stop, in the order the steps asked.
    pub effects: Vec<Effect>,
}

/// A lease that ended other than by its holder's own release (revoked, handed off,
/// expired), or that a key's line granted (kind `Claimed`), with the facts its holding
/// session is told. Not stored: the history keeps the same facts as events; this is what
/// the node pushes to the session as the entry applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    pub key: Arc<str>,
    /// The holder of the ended lease: its `client_id` is the session to tell.
    pub holder: Holder,
    pub token: u64,
    /// `Revoked`, `Accepted` (handed off) or `Expired`; `Claimed` for a grant from the line.
    pub kind: super::case::EventKind,
    /// Who ended it: the operator, the taker; `None` for the leader's own expiry; the
    /// waiter itself for a grant from the line.
    pub by: Option<super::types::Actor>,
    /// The operator's reason; the cluster's words for the others.
    pub reason: String,
    /// For a handoff: the new holder's name and token.
    pub successor: Option<(String, u64)>,
    /// For a grant from the line: the key's assignment, as a claim's answer gives it.
    pub assignment: Option<super::case::Assignment>,
    /// The ending entry's revision.
    pub revision: u64,
    /// The proposing leader's wall clock, for people.
    pub unix_ms: u64,
}

/// All leases and de-duplication sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTable {
    /// Leases and case files are boxed: a B-tree node keeps room for 11 values and is often
    /// half full, so inline values would waste about as much as they use (measured with
    /// `baton-scale`: a million held leases).
    ///
    /// A key's string is allocated once and shared (`Arc<str>`) by both maps and the lease.
    leases: BTreeMap<Arc<str>, Box<Lease>>,
    /// Case files (record, offer, history) of every key that ever had one.
    cases: BTreeMap<Arc<str>, Box<CaseFile>>,
    /// The keys of `cases` whose status is not finished (`FINISHED_STATUSES`), and their
    /// assignees: what `claim-next` walks from data format 14 on, and the board's open tasks.
    /// Derived from `cases` (`unfinished`).
    #[serde(skip)]
    unfinished: Unfinished,
    /// Quarantine rules: key prefix -> delay after an involuntary expiry, in ms.
    quarantine_rules: BTreeMap<String, u64>,
    /// A lower `KEYS_MAX`, set only by tests (`with_keys_max`); never serialized.
    #[serde(skip)]
    keys_max_for_tests: Option<usize>,
    sessions: BTreeMap<String, ClientSession>,
    /// `last_index -> client_id`, to find the least recently active client in O(log n).
    /// Derived from `sessions`; rebuilt on load.
    #[serde(skip)]
    by_activity: BTreeMap<u64, String>,
    /// Keys' lines of waiters (data format 11), oldest first; a key with none has no entry.
    /// Not serialized with the table: `store::SmState` encodes them after everything else,
    /// and only when there are any, so a state without waiters encodes as format 10 did.
    #[serde(skip)]
    lines: BTreeMap<Arc<str>, Line>,
    /// How many wait in all lines. Derived from `lines`.
    #[serde(skip)]
    waiters: usize,
    /// Keys held by permits (data format 12), each with its holders; a key is here or in
    /// `leases`, never both. Not serialized with the table: `store::SmState` encodes them
    /// after the lines, and only when there are any, as it does the lines.
    #[serde(skip)]
    holders: BTreeMap<Arc<str>, Box<crate::core::permits::Holders>>,
    /// How many permits are held in all. Derived from `holders`.
    #[serde(skip)]
    permit_holders: usize,
}

impl LeaseTable {
    /// Builds a table from stored leases and sessions (load from disk or snapshot).
    pub fn from_parts(
        leases: impl IntoIterator<Item = Lease>,
        cases: impl IntoIterator<Item = (String, CaseFile)>,
        quarantine_rules: impl IntoIterator<Item = (String, u64)>,
        sessions: impl IntoIterator<Item = (String, ClientSession)>,
    ) -> Self {
        let mut table = LeaseTable {
            leases: leases
                .into_iter()
                .map(|l| (l.key.clone(), Box::new(l)))
                .collect(),
            cases: cases
                .into_iter()
                .map(|(k, c)| (Arc::from(k), Box::new(c)))
                .collect(),
            quarantine_rules: quarantine_rules.into_iter().collect(),
            sessions: sessions.into_iter().collect(),
            ..Default::default()
        };
        table.rebuild_index();
        table
    }

    /// Restores what deserializing does not: the activity index, the index of unfinished
    /// keys, and one shared string per key (a deserialized map has a string per occurrence).
    pub fn rebuild_index(&mut self) {
        self.unfinished = Unfinished::build(self.cases.iter().map(|(k, c)| (k, &**c)));
        self.by_activity = self
            .sessions
            .iter()
            .map(|(id, s)| (s.last_index, id.clone()))
            .collect();
        let leases = std::mem::take(&mut self.leases);
        self.leases = leases
            .into_values()
            .map(|mut lease| {
                lease.key = self.shared_key(&lease.key);
                (lease.key.clone(), lease)
            })
            .collect();
        // The holder's name and session, one string each again, as apply left them: its
        // events name the same holder (a million held leases, each with its claim event).
        for (key, lease) in &self.leases {
            let Some(case) = self.cases.get_mut(key) else {
                continue;
            };
            let holder = &lease.holder;
            for actor in case
                .history
                .events
                .iter_mut()
                .filter_map(|e| e.actor.as_mut())
            {
                if actor.name == holder.name {
                    actor.name = holder.name.clone();
                }
                if actor.client_id == holder.client_id {
                    actor.client_id = holder.client_id.clone();
                }
            }
        }
    }

    pub fn lease(&self, key: &str) -> Option<&Lease> {
        self.leases.get(key).map(|l| &**l)
    }

    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values().map(|l| &**l)
    }

    pub fn case(&self, key: &str) -> Option<&CaseFile> {
        self.cases.get(key).map(|c| &**c)
    }

    pub fn cases(&self) -> impl Iterator<Item = (&str, &CaseFile)> {
        self.cases.iter().map(|(k, c)| (&**k, &**c))
    }

    /// The string of `key` as this table already holds it, or a new one.
    fn shared_key(&self, key: &str) -> Arc<str> {
        if let Some((k, _)) = self.cases.get_key_value(key) {
            return k.clone();
        }
        match self.leases.get_key_value(key) {
            Some((k, _)) => k.clone(),
            None => Arc::from(key),
        }
    }

    /// Brings `unfinished` up to date for `key` after a step touched its case file.
    fn sync_unfinished(&mut self, key: &str) {
        if let Some((shared, case)) = self.cases.get_key_value(key) {
            self.unfinished.sync(shared, case);
        }
    }

    /// How many keys have a case file.
    pub fn case_count(&self) -> usize {
        self.cases.len()
    }

    /// How many keys the table keeps: `KEYS_MAX`, or less in tests.
    fn keys_max(&self) -> usize {
        self.keys_max_for_tests.unwrap_or(KEYS_MAX)
    }

    /// The refusal of a new key `key` at the key limit.
    fn key_limit(&self, key: &str) -> Outcome {
        Outcome::Refused {
            refusal: Refusal::KeyLimit {
                key: key.to_owned(),
                keys: self.cases.len() as u64,
                keys_max: self.keys_max() as u64,
            },
        }
    }

    /// A table with a lower key limit, so that tests can reach it.
    #[cfg(test)]
    pub fn with_keys_max(keys_max: usize) -> LeaseTable {
        LeaseTable {
            keys_max_for_tests: Some(keys_max),
            ..LeaseTable::default()
        }
    }

    /// Whether the quarantine of `key` that `revision` started was started by a revoke
    /// (`Op::RevokeHeld`: the key is held back for the revoked holder's window) rather than
    /// by an expiry under a quarantine rule: the history says which entry it was.
    pub fn held_back_by_revoke(&self, key: &str, revision: u64) -> bool {
        self.cases.get(key).is_some_and(|c| {
            c.history
                .events
                .iter()
                .rev()
                .find(|e| e.revision == revision)
                .is_some_and(|e| e.kind == super::case::EventKind::Revoked)
        })
    }

    pub fn quarantine_rules(&self) -> &BTreeMap<String, u64> {
        &self.quarantine_rules
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
        let mut matching = self
            .leases
            .range::<str, _>(page_range(prefix, start_after))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, l)| &**l);
        let page: Vec<&Lease> = matching.by_ref().take(limit).collect();
        let truncated = matching.next().is_some();
        (page, truncated)
    }

    /// Keys that start with `prefix`, after `start_after`, that no one holds but a dispatcher
    /// assigned, and that are not finished (tasks waiting for their assignee), at most
    /// `limit` of them, with their assignments; the flag says whether more match. Walks the
    /// index of assigned unfinished keys.
    pub fn unclaimed(
        &self,
        prefix: &str,
        start_after: &str,
        limit: usize,
    ) -> (Vec<(&str, &Assignment)>, bool) {
        let mut matching = self
            .unfinished
            .assigned_range(page_range(prefix, start_after))
            .take_while(|k| k.starts_with(prefix))
            .filter(|k| !self.is_held(k))
            .filter_map(|k| Some((&**k, self.cases[&**k].record.assigned_to.as_deref()?)));
        let page: Vec<(&str, &Assignment)> = matching.by_ref().take(limit).collect();
        let truncated = matching.next().is_some();
        (page, truncated)
    }

    /// Applies the command of log entry `index`. Deterministic: same table, same index, same
    /// command, same result, on every node.
    pub fn apply(&mut self, index: u64, cmd: &LogCommand) -> Outcome {
        self.apply_tracked(
            index,
            cmd,
            &mut Changes::default(),
            &mut AccessState::default(),
        )
    }

    /// `apply`, also noting in `changes` the history events it added, for the watch window.
    pub fn apply_tracked(
        &mut self,
        index: u64,
        cmd: &LogCommand,
        changes: &mut Changes,
        access: &mut AccessState,
    ) -> Outcome {
        self.apply_decided(index, cmd, changes, access).0
    }

    /// `apply_tracked`, also answering the revision the outcome was decided at: `index`, or,
    /// for a retry answered from memory, its first attempt's revision.
    pub fn apply_decided(
        &mut self,
        index: u64,
        cmd: &LogCommand,
        changes: &mut Changes,
        access: &mut AccessState,
    ) -> (Outcome, u64) {
        if let Some(id) = &cmd.request_id {
            if let Err(e) = validate::request_id(id) {
                return (Outcome::Invalid { message: e.0 }, index);
            }
            if let Some((earlier, decided)) = self.remembered(id, &cmd.op) {
                return (earlier, if decided == 0 { index } else { decided });
            }
        }
        if let Op::Retry { op } = &cmd.op {
            // Not remembered: applied as its own operation only if it was never applied.
            if let Some(too_old) = cmd
                .request_id
                .as_ref()
                .and_then(|id| self.unmatched_retry(id))
            {
                return (too_old, index);
            }
            let plain = LogCommand {
                op: op.plain().clone(),
                ..cmd.clone()
            };
            return self.apply_decided(index, &plain, changes, access);
        }
        let outcome = match cmd.op.validate().and_then(|()| holder_is_sender(cmd)) {
            Err(e) => Outcome::Invalid { message: e.0 },
            Ok(()) => match &cmd.op {
                // The policy is not the table's; retries of it are de-duplicated here all
                // the same.
                Op::SetAccess { policy, by } => Outcome::AccessSet {
                    version: access.set(index, cmd.leader_unix_ms, by, policy.clone()),
                },
                _ => self.apply_op(index, cmd, changes),
            },
        };
        // A format-3 command answers as format 3 did (see `Refusal::format_3_outcome`).
        let outcome = match outcome {
            Outcome::Refused { refusal } if cmd.is_format_3() => refusal.format_3_outcome(),
            outcome => outcome,
        };
        if let Some(id) = &cmd.request_id {
            // A format-3 command's answer keeps no revision, as format 3 kept none: the same
            // answer whether a format-3 node applied it or this one replays it.
            let decided = if cmd.is_format_3() { 0 } else { index };
            self.remember(index, id, cmd.op.fingerprint(), &outcome, decided);
        }
        #[cfg(debug_assertions)]
        self.check_invariants(index, cmd);
        (outcome, index)
    }

    /// The first answer to a retried request with the revision it was decided at (0: not
    /// known), or a refusal if that answer was forgotten.
    /// A claim of `key` by `holder` that is refused without changing anything: the key is
    /// quarantined, or someone else holds it (a claim never renames or adopts a lease; format
    /// 3 matched on the client id alone). `None`: the claim grants, or renews the claimant's
    /// own lease.
    pub(crate) fn claim_refused(
        &self,
        key: &str,
        holder: &Holder,
        format_3: bool,
    ) -> Option<Outcome> {
        self.claim_blocked(key, holder, format_3)
            .map(Blocked::into_outcome)
    }

    /// Why a claim of `key` by `holder` is refused (see `claim_refused`), as one key of a set
    /// names it.
    pub(crate) fn claim_blocked(
        &self,
        key: &str,
        holder: &Holder,
        format_3: bool,
    ) -> Option<Blocked> {
        let case = self.cases.get(key);
        if let Some(q) = case.and_then(|c| c.quarantine.as_ref()) {
            return Some(Blocked::Quarantined {
                key: key.to_owned(),
                revision: q.revision,
                delay_ms: q.delay_ms,
            });
        }
        if let Some(held) = self.holders(key) {
            return Some(Blocked::Holders {
                key: key.to_owned(),
                sharing: held.sharing,
                holders: held.leases.clone(),
                assignment: case.and_then(|c| c.record.assigned_to.as_deref().cloned()),
            });
        }
        let lease = self.lease(key)?;
        let same =
            lease.holder == *holder || (format_3 && lease.holder.client_id == holder.client_id);
        (!same).then(|| Blocked::Held {
            same_name_other_process: lease.holder.name == holder.name,
            lease: lease.clone(),
            assignment: case.and_then(|c| c.record.assigned_to.as_deref().cloned()),
        })
    }

    /// What applying `cmd` would answer, when it would change nothing but this table's memory
    /// of answers for retries: a claim of a key another session holds (or a quarantined
    /// one), a renew, release or update whose token is not the key's current one or comes
    /// from another session than its holder's. The leader answers those from a
    /// linearizable read instead of a log entry. `None`: the command goes through
    /// the log (it may change something, it is not valid, it is a format-3 or leader's
    /// command, or it retries a request the table remembers).
    pub fn unchanged_answer(&self, cmd: &LogCommand) -> Option<Outcome> {
        let id = cmd.request_id.as_ref()?;
        let session = cmd.sender.as_ref()?.client_id.as_str();
        let valid = validate::request_id(id).is_ok()
            && cmd.op.validate().is_ok()
            && holder_is_sender(cmd).is_ok();
        if !valid || self.remembered(id, &cmd.op).is_some() {
            return None;
        }
        let fenced = |key: &str, token: u64| self.held_by(key, token, session, false).err();
        match &cmd.op {
            Op::Claim { key, holder, .. } => self.claim_refused(key, holder, false),
            Op::ClaimPermit {
                key,
                holder,
                sharing,
                ..
            } => match self.permit_blocked(key, holder, *sharing) {
                Err(refusal) => Some(Outcome::Refused { refusal }),
                Ok(blocked) => blocked.map(Blocked::into_outcome),
            },
            Op::Renew { key, token } | Op::Release { key, token, .. } => {
                fenced(key, *token).map(|refusal| match refusal {
                    Refusal::StaleToken { current, .. } => Outcome::Lost {
                        current: current.map(|l| *l),
                    },
                    refusal => Outcome::Refused { refusal },
                })
            }
            Op::Update { key, token, .. } => {
                fenced(key, *token).map(|refusal| Outcome::Refused { refusal })
            }
            Op::ClaimSet { keys, holder, .. } => {
                let blocked = self.set_blocked(keys, holder);
                (!blocked.is_empty()).then_some(Outcome::BlockedSet { blocked })
            }
            _ => None,
        }
    }

    /// Equal leases, case files and quarantine rules (the sessions' memory of answers aside).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn same_but_sessions(&self, other: &LeaseTable) -> bool {
        self.leases == other.leases
            && self.holders == other.holders
            && self.lines == other.lines
            && self.cases == other.cases
            && self.quarantine_rules == other.quarantine_rules
    }

    fn apply_op(&mut self, index: u64, cmd: &LogCommand, changes: &mut Changes) -> Outcome {
        let op = &cmd.op;
        // A set is claimed one step per key, all or none.
        if let Op::ClaimSet {
            keys,
            holder,
            ttl_ms,
        } = op
        {
            return self.claim_set(index, cmd, keys, holder, *ttl_ms, changes);
        }
        // `claim-next` picks its key first, then claims it like a claim of that key.
        let next = match self.claim_next_pick(op) {
            Some(Ok(key)) => Some(key),
            Some(Err(nothing)) => return nothing,
            None => None,
        };
        let key = next.as_deref().unwrap_or(op.key());
        let creates_key = !self.cases.contains_key(key)
            && matches!(
                op,
                Op::Claim { .. }
                    | Op::Assign { .. }
                    | Op::Revoke { .. }
                    | Op::RevokeHeld { .. }
                    | Op::Post { .. }
                    | Op::Wait { .. }
                    | Op::ClaimPermit { .. }
                    | Op::WaitPermit { .. }
            );
        if creates_key && self.cases.len() >= self.keys_max() {
            return self.key_limit(key);
        }
        let mut step = Step::new(self, key, index, cmd, changes);
        let outcome = match op {
            Op::Claim { holder, ttl_ms, .. } => step.claim(holder, *ttl_ms, ""),
            Op::ClaimNext {
                prefix,
                holder,
                ttl_ms,
                ..
            }
            | Op::ClaimNextUnfinished {
                prefix,
                holder,
                ttl_ms,
                ..
            } => step.claim(holder, *ttl_ms, &format!("next under {prefix}")),
            Op::Post {
                patch,
                to,
                by,
                update,
                ..
            } => step.post(patch, to.as_deref(), by, *update),
            Op::Renew { token, .. } => step.renew(*token),
            Op::Release {
                token,
                final_status,
                ..
            } => step.release(*token, final_status.as_deref()),
            Op::Expire { token, basis, .. } => step.expire(*token, *basis),
            Op::Revoke { reason, .. } => step.revoke(reason, false),
            Op::RevokeHeld { reason, .. } => step.revoke(reason, true),
            Op::Update { token, patch, .. } => step.update(*token, patch),
            Op::Assign { to, by, reason, .. } => step.assign(to, by, reason),
            Op::Unassign { by, reason, .. } => step.unassign(by, reason),
            Op::Offer {
                token,
                to,
                note,
                offer_ttl_ms,
                ..
            } => step.offer_handoff(*token, to, note, *offer_ttl_ms),
            Op::Accept { holder, ttl_ms, .. } => step.accept(holder, *ttl_ms),
            Op::Decline { holder, .. } => step.decline(holder),
            Op::Cancel { token, .. } => step.cancel(*token),
            Op::Lapse { offer_revision, .. } => step.lapse(*offer_revision),
            Op::SetQuarantine { prefix, delay_ms } => step.set_quarantine(prefix, *delay_ms),
            Op::EndQuarantine { revision, .. } => step.end_quarantine(*revision),
            Op::Wait { holder, ttl_ms, .. } => step.wait(holder, *ttl_ms, None),
            Op::WaitPermit {
                holder,
                ttl_ms,
                sharing,
                ..
            } => step.wait(holder, *ttl_ms, Some(*sharing)),
            Op::HandOn { .. } => step.hand_on_nudged(),
            Op::ClaimPermit {
                holder,
                ttl_ms,
                sharing,
                ..
            } => step.claim_permit(holder, *ttl_ms, *sharing),
            Op::LeaveLine { holder, .. } => step.leave_line(holder),
            Op::DropWaiter {
                client_id, basis, ..
            } => step.drop_waiter(client_id, *basis),
            // Applied before a step is made: by `apply_tracked`, which has the access state;
            // by `claim_set` above, one step per key; a retry as its own operation, by
            // `apply_decided`.
            Op::SetAccess { .. } | Op::ClaimSet { .. } | Op::Retry { .. } => Outcome::None,
        };
        // Whatever freed the key (or a permit of it, or a waiter's place ahead of others)
        // hands it on to the oldest waiter, in this entry.
        // A write that changed nothing hands nothing on (a grant a nudge waits for is the
        // nudge's to make): so a write answered from a read would have changed nothing.
        if matches!(
            outcome,
            Outcome::Released { .. }
                | Outcome::Expired { .. }
                | Outcome::Revoked { .. }
                | Outcome::QuarantineEnded
                | Outcome::LeftLine {
                    was_waiting: true,
                    ..
                }
                | Outcome::WaiterDropped
        ) {
            step.hand_on();
        }
        outcome
    }
}

/// Refuses a claim, accept or decline whose holder is not its sender's session: a process
/// claims for itself, never for another client id. (Format-3 commands knew no sender.)
fn holder_is_sender(cmd: &LogCommand) -> Result<(), validate::InvalidInput> {
    let Some(holder) = cmd.op.claimant() else {
        return Ok(());
    };
    match &cmd.sender {
        Some(sender) if sender.client_id != holder.client_id => {
            Err(validate::InvalidInput(format!(
                "the holder's client id {:?} is not the session {:?} the request comes from: \
                 a process claims, accepts and declines as its own session",
                holder.client_id, sender.client_id
            )))
        }
        _ => Ok(()),
    }
}

/// The keys a page of a board starts at: from `prefix`, or after `start_after` when that is
/// past it. The caller stops where keys no longer start with `prefix`.
fn page_range<'a>(
    prefix: &'a str,
    start_after: &'a str,
) -> (std::ops::Bound<&'a str>, std::ops::Bound<&'a str>) {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    if start_after.is_empty() || start_after < prefix {
        (Included(prefix), Unbounded)
    } else {
        (Excluded(start_after), Unbounded)
    }
}
