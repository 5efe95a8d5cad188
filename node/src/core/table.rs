//! The lease table: baton's deterministic state machine.
//!
//! `LeaseTable::apply(index, command)` is the only way state changes. It reads no clock and
//! does no I/O, so every node that applies the same log reaches the same table. The sled
//! adapter (`store::state_machine`) persists what `apply` reports as changed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::access::AccessState;
use super::case::{
    Assignment, Attribution, CaseFile, Event, EventKind, HandoffNote, Offer, Quarantine,
    RecordPatch,
};
use super::limits::{
    DEDUP_ANSWERS_PER_CLIENT_MAX, DEDUP_CLIENTS_MAX, FIELDS_MAX, KEYS_MAX, QUARANTINE_RULES_MAX,
    RECORD_BYTES_MAX,
};
use super::refusal::Refusal;
use super::types::{Actor, Holder, Lease, LogCommand, Op, Outcome, RequestId};
use super::validate;

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
/// told) and the countdown effects. Empty for a retry answered from memory: it changes
/// nothing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// History events appended, with their keys, in revision order.
    pub events: Vec<(Arc<str>, Event)>,
    /// Countdowns to start and stop, in the order the steps asked.
    pub effects: Vec<Effect>,
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

    /// Restores what deserializing does not: the activity index, and one shared string per
    /// key (a deserialized map has a string per occurrence).
    pub fn rebuild_index(&mut self) {
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

    /// How many keys have a case file.
    pub fn case_count(&self) -> usize {
        self.cases.len()
    }

    /// How many keys the table keeps: `KEYS_MAX`, or less in tests.
    fn keys_max(&self) -> usize {
        self.keys_max_for_tests.unwrap_or(KEYS_MAX)
    }

    /// A table with a lower key limit, so that tests can reach it.
    #[cfg(test)]
    pub fn with_keys_max(keys_max: usize) -> LeaseTable {
        LeaseTable {
            keys_max_for_tests: Some(keys_max),
            ..LeaseTable::default()
        }
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
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let lower = if start_after.is_empty() || start_after < prefix {
            Included(prefix)
        } else {
            Excluded(start_after)
        };
        let mut matching = self
            .leases
            .range::<str, _>((lower, Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, l)| &**l);
        let page: Vec<&Lease> = matching.by_ref().take(limit).collect();
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
    fn remembered(&self, id: &RequestId, op: &Op) -> Option<(Outcome, u64)> {
        let session = self.sessions.get(&id.client_id)?;
        if let Some(answer) = session.answers.iter().find(|a| a.seq == id.seq) {
            if answer.op_fingerprint != op.fingerprint() {
                let refusal = Outcome::Invalid {
                    message: format!(
                        "request id ({}, {}) was already used for a different request: \
                         give each request its own seq",
                        id.client_id, id.seq
                    ),
                };
                return Some((refusal, 0));
            }
            return Some((answer.outcome.clone(), answer.revision));
        }
        if id.seq <= session.forgotten_seq_max {
            let too_old = Outcome::RetryTooOld {
                message: format!(
                    "request seq {} of client {} is too old to tell whether it was applied \
                     (only the latest {} answers are kept): probe the key to see its state",
                    id.seq, id.client_id, DEDUP_ANSWERS_PER_CLIENT_MAX
                ),
            };
            return Some((too_old, 0));
        }
        None
    }

    fn remember(
        &mut self,
        index: u64,
        id: &RequestId,
        op_fingerprint: u64,
        outcome: &Outcome,
        decided: u64,
    ) {
        if !self.sessions.contains_key(&id.client_id) && self.sessions.len() >= DEDUP_CLIENTS_MAX {
            // Forget the client idle for the longest. Deterministic: ordered by revision.
            if let Some((_, idle)) = self.by_activity.pop_first() {
                self.sessions.remove(&idle);
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
                revision: decided,
            },
        );
        if session.answers.len() > DEDUP_ANSWERS_PER_CLIENT_MAX {
            // Forget the lowest seq, not the first applied: requests in flight together can
            // commit out of order, and forgetting a high seq would refuse the first attempts
            // of the lower ones still on their way. With at most this many requests in flight
            // per client, no first attempt is ever refused.
            if let Some(dropped) = session.answers.pop_front() {
                session.forgotten_seq_max = session.forgotten_seq_max.max(dropped.seq);
            }
        }
    }

    fn apply_op(&mut self, index: u64, cmd: &LogCommand, changes: &mut Changes) -> Outcome {
        let op = &cmd.op;
        let key = op.key();
        let creates_key = !self.cases.contains_key(key)
            && matches!(op, Op::Claim { .. } | Op::Assign { .. } | Op::Revoke { .. });
        if creates_key && self.cases.len() >= self.keys_max() {
            return Outcome::Refused {
                refusal: Refusal::KeyLimit {
                    key: key.to_owned(),
                    keys: self.cases.len() as u64,
                    keys_max: self.keys_max() as u64,
                },
            };
        }
        let mut step = Step {
            table: self,
            key,
            index,
            now_unix_ms: cmd.leader_unix_ms,
            cmd,
            changes,
        };
        match op {
            Op::Claim { holder, ttl_ms, .. } => step.claim(holder, *ttl_ms),
            Op::Renew { token, .. } => step.renew(*token),
            Op::Release {
                token,
                final_status,
                ..
            } => step.release(*token, final_status.as_deref()),
            Op::Expire { token, basis, .. } => step.expire(*token, *basis),
            Op::Revoke { reason, .. } => step.revoke(reason),
            Op::Update { token, patch, .. } => step.update(*token, patch),
            Op::Assign { to, by, reason, .. } => step.assign(to, by, reason),
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
            // Applied by `apply_tracked`, which has the access state.
            Op::SetAccess { .. } => Outcome::None,
        }
    }

    /// Invariants that hold after every apply (debug builds check them each time). Only what
    /// the entry could have touched is checked, so the cost stays O(log n) per apply.
    #[cfg(debug_assertions)]
    fn check_invariants(&self, index: u64, cmd: &LogCommand) {
        let key = cmd.op.key();
        if let Some(lease) = self.leases.get(key) {
            assert_eq!(key, &*lease.key, "lease stored under another key");
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

/// One entry's application to one key: the table, the key, the entry's index and leader
/// time, and where to note what changed.
struct Step<'a> {
    table: &'a mut LeaseTable,
    key: &'a str,
    index: u64,
    now_unix_ms: u64,
    /// The command: who sent it (its session and principal) decides who may act and is
    /// recorded as the actor.
    cmd: &'a LogCommand,
    changes: &'a mut Changes,
}

impl Step<'_> {
    fn lease(&self) -> Option<&Lease> {
        self.table.leases.get(self.key).map(|l| &**l)
    }

    fn assignment(&self) -> Option<Assignment> {
        self.table
            .cases
            .get(self.key)
            .and_then(|c| c.record.assigned_to.as_deref().cloned())
    }

    fn pending_offer(&self) -> Option<&Offer> {
        self.table
            .cases
            .get(self.key)
            .and_then(|c| c.offer.as_deref())
    }

    /// Stores a lease granted or renewed by this entry: its countdown starts now.
    fn set_lease(&mut self, lease: Lease) {
        debug_assert_eq!(
            lease.basis, self.index,
            "a lease set by this entry counts from it"
        );
        self.start(Timer::Lease, lease.token, lease.basis, lease.ttl_ms);
        self.table.leases.insert(lease.key.clone(), Box::new(lease));
    }

    fn start(&mut self, timer: Timer, token: u64, basis: u64, ms: u64) {
        let key = self.table.shared_key(self.key);
        self.changes.effects.push(Effect::Start {
            timer,
            key,
            token,
            basis,
            ms,
        });
    }

    fn stop(&mut self, timer: Timer) {
        let key = self.table.shared_key(self.key);
        self.changes.effects.push(Effect::Stop { timer, key });
    }

    /// A new lease for `holder` whose token is this entry's index: a claim of a free key or
    /// an accepted handoff.
    fn grant(&mut self, holder: &Holder, ttl_ms: u64) -> Lease {
        let lease = Lease {
            key: self.table.shared_key(self.key),
            holder: holder.clone(),
            token: self.index,
            basis: self.index,
            renewals: 0,
            ttl_ms,
            since_unix_ms: self.now_unix_ms,
            renewed_unix_ms: self.now_unix_ms,
        };
        self.set_lease(lease.clone());
        lease
    }

    fn take_lease(&mut self) -> Option<Lease> {
        let lease = self.table.leases.remove(self.key).map(|l| *l);
        if lease.is_some() {
            self.stop(Timer::Lease);
        }
        lease
    }

    fn case_mut(&mut self) -> &mut CaseFile {
        if !self.table.cases.contains_key(self.key) {
            let key = self.table.shared_key(self.key);
            self.table.cases.insert(key, Box::default());
        }
        self.table.cases.get_mut(self.key).expect("inserted above")
    }

    /// Who sent this entry's command, acting as holder name `name`. A format-3 command
    /// knows no sender: it is credited as that format did, to `lease_holder` (the holder of
    /// the lease it was made under), and marked so.
    fn actor(&self, name: &str, lease_holder: Option<&Holder>) -> (Option<Actor>, Attribution) {
        if self.cmd.is_format_3() {
            let actor = lease_holder.map(|h| Actor {
                name: h.name.clone(),
                client_id: h.client_id.clone(),
                principal: None,
            });
            return (actor, Attribution::RecordedBeforeFormat4);
        }
        (self.cmd.actor(name), Attribution::Requester)
    }

    /// The session this request acts as ("" for the leader's own entries).
    fn session(&self) -> &str {
        self.cmd
            .sender
            .as_ref()
            .map_or("", |s| s.client_id.as_str())
    }

    /// The current lease, if `token` is its token and the request comes from its holder's
    /// session; otherwise the refusal, with the facts. A format-3 command is bound by its
    /// token alone, as that format was.
    fn held_by_sender(&self, token: u64) -> Result<Lease, Refusal> {
        match self.lease() {
            Some(l) if l.token == token => {
                if self.cmd.is_format_3() || l.holder.client_id == self.session() {
                    Ok(l.clone())
                } else {
                    Err(Refusal::WrongSession {
                        lease: Box::new(l.clone()),
                        client_id: self.session().to_owned(),
                    })
                }
            }
            current => Err(Refusal::StaleToken {
                key: self.key.to_owned(),
                token,
                current: current.cloned().map(Box::new),
            }),
        }
    }

    /// Appends this entry's event to the key's history, credited to `actor`.
    fn event(
        &mut self,
        kind: EventKind,
        (actor, attribution): (Option<Actor>, Attribution),
        token: u64,
        detail: String,
    ) {
        let event = Event {
            revision: self.index,
            kind,
            actor,
            attribution,
            token,
            unix_ms: self.now_unix_ms,
            detail,
        };
        let key = self.table.shared_key(self.key);
        self.changes.events.push((key, event.clone()));
        self.case_mut().history.push(event);
    }

    /// Ends a pending offer, keeping its note on the record; says how it ended for people.
    fn end_offer(&mut self) -> Option<Offer> {
        let case = self.case_mut();
        let offer = *case.offer.take()?;
        case.last_note = Some(Box::new(offer.note.clone()));
        self.stop(Timer::Offer);
        Some(offer)
    }

    fn refused(refusal: Refusal) -> Outcome {
        Outcome::Refused { refusal }
    }

    fn claim(&mut self, holder: &Holder, ttl_ms: u64) -> Outcome {
        if let Some(q) = self
            .table
            .cases
            .get(self.key)
            .and_then(|c| c.quarantine.as_ref())
        {
            return Self::refused(Refusal::Quarantined {
                key: self.key.to_owned(),
                revision: q.revision,
                delay_ms: q.delay_ms,
            });
        }
        let assignment = self.assignment();
        match self.lease().cloned() {
            None => {
                let lease = self.grant(holder, ttl_ms);
                let detail = match &assignment {
                    Some(a) if a.to != holder.name => {
                        format!("assigned to {}, claimed by {}", a.to, holder.name)
                    }
                    _ => String::new(),
                };
                let actor = self.actor(&holder.name, Some(holder));
                self.event(EventKind::Claimed, actor, self.index, detail);
                Outcome::Granted {
                    lease,
                    already_held: false,
                    assignment,
                }
            }
            // The same session under the same name claims again (it lost our answer, or it
            // restarted with its client id): it keeps its token and the lease is renewed.
            // Anything else is refused below, naming the holder: a claim never renames or
            // adopts a lease (format 3 matched on the client id alone, and renamed).
            Some(mut lease)
                if lease.holder == *holder
                    || (self.cmd.is_format_3() && lease.holder.client_id == holder.client_id) =>
            {
                // The TTL never shrinks: another task of that process may be counting on
                // the longer one it was granted, and restarting the countdown later with a
                // TTL at least as long never ends it earlier.
                lease.basis = self.index;
                lease.renewals += 1;
                lease.ttl_ms = lease.ttl_ms.max(ttl_ms);
                lease.renewed_unix_ms = self.now_unix_ms;
                lease.holder.name = holder.name.clone();
                self.set_lease(lease.clone());
                Outcome::Granted {
                    lease,
                    already_held: true,
                    assignment,
                }
            }
            Some(lease) => Outcome::Held {
                same_name_other_process: lease.holder.name == holder.name,
                lease,
                assignment,
            },
        }
    }

    fn renew(&mut self, token: u64) -> Outcome {
        match self.held_by_sender(token) {
            Ok(mut lease) => {
                lease.basis = self.index;
                lease.renewals += 1;
                lease.renewed_unix_ms = self.now_unix_ms;
                self.set_lease(lease.clone());
                Outcome::Renewed { lease }
            }
            Err(Refusal::StaleToken { current, .. }) => Outcome::Lost {
                current: current.map(|l| *l),
            },
            Err(refusal) => Self::refused(refusal),
        }
    }

    /// Ends the current stint (release, expiry, revoke): frees the key, ends a pending offer
    /// (its note stays on the record) and records the event.
    fn end_stint(
        &mut self,
        kind: EventKind,
        actor: (Option<Actor>, Attribution),
        mut detail: String,
    ) -> Lease {
        let lease = self.take_lease().expect("the caller checked the lease");
        if lease.renewals > 0 {
            detail = join(&format!("renewed {} times", lease.renewals), &detail);
        }
        if let Some(offer) = self.end_offer() {
            detail = join(
                &detail,
                &format!(
                    "the offer to {} ended; its note stays on the record",
                    offer.to
                ),
            );
        }
        self.event(kind, actor, lease.token, detail);
        lease
    }

    fn release(&mut self, token: u64, final_status: Option<&str>) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(Refusal::StaleToken { current, .. }) => {
                return Outcome::Lost {
                    current: current.map(|l| *l),
                }
            }
            Err(refusal) => return Self::refused(refusal),
        };
        let mut detail = String::new();
        if let Some(status) = final_status {
            let patch = RecordPatch {
                status: Some(status.to_string()),
                ..RecordPatch::default()
            };
            let index = self.index;
            let record = &mut self.case_mut().record;
            detail = patch.apply_to(record);
            if !detail.is_empty() {
                record.updated_revision = index;
            }
        }
        let actor = self.actor(&lease.holder.name, Some(&lease.holder));
        let lease = self.end_stint(EventKind::Released, actor, detail);
        Outcome::Released { lease }
    }

    fn expire(&mut self, token: u64, basis: u64) -> Outcome {
        match self.lease() {
            Some(l) if l.token == token && l.basis == basis => {
                // An involuntary end: a matching quarantine rule (the longest prefix) keeps
                // the key unclaimable for a while.
                let delay_ms = self
                    .table
                    .quarantine_rules
                    .iter()
                    .filter(|(prefix, _)| self.key.starts_with(prefix.as_str()))
                    .max_by_key(|(prefix, _)| prefix.len())
                    .map(|(_, delay)| *delay)
                    .unwrap_or(0);
                let detail = if delay_ms > 0 {
                    let index = self.index;
                    self.case_mut().quarantine = Some(Box::new(Quarantine {
                        revision: index,
                        delay_ms,
                    }));
                    self.start(Timer::Quarantine, index, index, delay_ms);
                    format!("quarantined for {} s", delay_ms / 1000)
                } else {
                    String::new()
                };
                let lease = self.end_stint(EventKind::Expired, LEADER, detail);
                Outcome::Expired { lease }
            }
            _ => Outcome::ExpireIgnored,
        }
    }

    fn revoke(&mut self, reason: &str) -> Outcome {
        // An operator acts as no holder: the actor is its session and principal.
        let actor = self.actor("", None);
        if self.lease().is_none() {
            self.event(
                EventKind::Revoked,
                actor,
                0,
                format!("(key was free) {reason}"),
            );
            return Outcome::Revoked { previous: None };
        }
        let lease = self.end_stint(EventKind::Revoked, actor, reason.to_string());
        Outcome::Revoked {
            previous: Some(lease),
        }
    }

    /// The pending offer, if any, as the refusal of a write it freezes.
    fn frozen(&self) -> Option<Refusal> {
        self.pending_offer().map(|offer| Refusal::Frozen {
            key: self.key.to_owned(),
            offer_to: offer.to.clone(),
            offer_revision: offer.revision,
        })
    }

    fn update(&mut self, token: u64, patch: &RecordPatch) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(refusal) => return Self::refused(refusal),
        };
        if let Some(refusal) = self.frozen() {
            return Self::refused(refusal);
        }
        let mut record = self
            .table
            .cases
            .get(self.key)
            .map(|c| c.record.clone())
            .unwrap_or_default();
        let detail = patch.apply_to(&mut record);
        if record.fields.len() > FIELDS_MAX || record.size_bytes() > RECORD_BYTES_MAX {
            return Outcome::Invalid {
                message: format!(
                    "the record would hold {} fields and {} bytes: the limits are {FIELDS_MAX} \
                     fields and {RECORD_BYTES_MAX} bytes",
                    record.fields.len(),
                    record.size_bytes()
                ),
            };
        }
        if !detail.is_empty() {
            record.updated_revision = self.index;
            self.case_mut().record = record.clone();
            let actor = self.actor(&lease.holder.name, Some(&lease.holder));
            self.event(EventKind::Updated, actor, lease.token, detail);
        }
        Outcome::Updated { record }
    }

    fn assign(&mut self, to: &str, by: &str, reason: &str) -> Outcome {
        let assignment = Assignment {
            to: to.to_string(),
            by: by.to_string(),
            reason: reason.to_string(),
            unix_ms: self.now_unix_ms,
            revision: self.index,
        };
        self.case_mut().record.assigned_to = Some(Box::new(assignment));
        let detail = join(&format!("to {to} by {by}"), reason);
        let token = self.lease().map(|l| l.token).unwrap_or(0);
        // Format 3 credited an assignment to no one.
        let actor = match self.cmd.is_format_3() {
            true => (None, Attribution::RecordedBeforeFormat4),
            false => self.actor(by, None),
        };
        self.event(EventKind::Assigned, actor, token, detail);
        let record = self.table.cases[self.key].record.clone();
        Outcome::Assigned { record }
    }

    fn offer_handoff(
        &mut self,
        token: u64,
        to: &str,
        note: &HandoffNote,
        offer_ttl_ms: u64,
    ) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(refusal) => return Self::refused(refusal),
        };
        if let Some(pending) = self.pending_offer() {
            return Self::refused(Refusal::OfferPending {
                key: self.key.to_owned(),
                offer_to: pending.to.clone(),
                offer_revision: pending.revision,
            });
        }
        if lease.holder.name == to {
            return Self::refused(Refusal::OfferToHolder {
                key: self.key.to_owned(),
                name: to.to_owned(),
            });
        }
        let offer = Offer {
            from: lease.holder.clone(),
            from_token: lease.token,
            to: to.to_string(),
            note: note.clone(),
            offer_ttl_ms,
            offered_unix_ms: self.now_unix_ms,
            revision: self.index,
        };
        self.case_mut().offer = Some(Box::new(offer.clone()));
        self.start(Timer::Offer, offer.from_token, offer.revision, offer_ttl_ms);
        let detail = format!("to {to}, lapses after {} s", offer_ttl_ms / 1000);
        let actor = self.actor(&lease.holder.name, Some(&lease.holder));
        self.event(EventKind::Offered, actor, lease.token, detail);
        Outcome::Offered { offer }
    }

    /// The pending offer, if `holder` is its addressee; otherwise the refusal.
    fn addressed_to(&self, holder: &Holder) -> Result<Offer, Refusal> {
        match self.pending_offer() {
            None => Err(Refusal::NoOffer {
                key: self.key.to_owned(),
            }),
            Some(o) if o.to != holder.name => Err(Refusal::NotAddressee {
                key: self.key.to_owned(),
                offer_to: o.to.clone(),
                name: holder.name.clone(),
            }),
            Some(o) => Ok(o.clone()),
        }
    }

    fn accept(&mut self, holder: &Holder, ttl_ms: u64) -> Outcome {
        let offer = match self.addressed_to(holder) {
            Ok(o) => o,
            Err(refusal) => return Self::refused(refusal),
        };
        // In one entry: the giver's token dies and the taker's is born. No gap, no overlap.
        let lease = self.grant(holder, ttl_ms);
        self.end_offer();
        let detail = format!("from {} (token {})", offer.from.name, offer.from_token);
        let actor = self.actor(&holder.name, Some(holder));
        self.event(EventKind::Accepted, actor, self.index, detail);
        Outcome::Accepted {
            lease,
            note: offer.note,
            from: offer.from,
        }
    }

    fn decline(&mut self, holder: &Holder) -> Outcome {
        let offer = match self.addressed_to(holder) {
            Ok(o) => o,
            Err(refusal) => return Self::refused(refusal),
        };
        self.end_offer();
        let detail = format!("offer from {}", offer.from.name);
        let actor = self.actor(&holder.name, Some(holder));
        self.event(EventKind::Declined, actor, offer.from_token, detail);
        Outcome::Declined
    }

    fn cancel(&mut self, token: u64) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(refusal) => return Self::refused(refusal),
        };
        let Some(offer) = self.end_offer() else {
            return Self::refused(Refusal::NoOffer {
                key: self.key.to_owned(),
            });
        };
        let detail = format!("offer to {}", offer.to);
        let actor = self.actor(&lease.holder.name, Some(&lease.holder));
        self.event(EventKind::Cancelled, actor, token, detail);
        Outcome::Cancelled
    }

    fn set_quarantine(&mut self, prefix: &str, delay_ms: u64) -> Outcome {
        let rules = &mut self.table.quarantine_rules;
        if delay_ms == 0 {
            rules.remove(prefix);
        } else {
            if !rules.contains_key(prefix) && rules.len() >= QUARANTINE_RULES_MAX {
                return Outcome::Invalid {
                    message: format!(
                        "there are {QUARANTINE_RULES_MAX} quarantine rules already: remove one first"
                    ),
                };
            }
            rules.insert(prefix.to_string(), delay_ms);
        }
        Outcome::QuarantineRules {
            rules: self.table.quarantine_rules.clone(),
        }
    }

    fn end_quarantine(&mut self, revision: u64) -> Outcome {
        let on = self
            .table
            .cases
            .get(self.key)
            .and_then(|c| c.quarantine.as_ref())
            .is_some_and(|q| q.revision == revision);
        if !on {
            return Outcome::QuarantineEndIgnored;
        }
        self.case_mut().quarantine = None;
        self.stop(Timer::Quarantine);
        Outcome::QuarantineEnded
    }

    fn lapse(&mut self, offer_revision: u64) -> Outcome {
        match self.pending_offer() {
            Some(o) if o.revision == offer_revision => {
                let offer = self.end_offer().expect("checked above");
                let detail = format!(
                    "offer to {} lapsed; {} keeps the key",
                    offer.to, offer.from.name
                );
                self.event(EventKind::Lapsed, LEADER, offer.from_token, detail);
                Outcome::Lapsed
            }
            _ => Outcome::LapseIgnored,
        }
    }
}

/// The actor of the leader's own entries (expired, lapsed): no one sent them.
const LEADER: (Option<Actor>, Attribution) = (None, Attribution::Requester);

/// Refuses a claim, accept or decline whose holder is not its sender's session: a process
/// claims for itself, never for another client id. (Format-3 commands knew no sender.)
fn holder_is_sender(cmd: &LogCommand) -> Result<(), validate::InvalidInput> {
    let holder = match &cmd.op {
        Op::Claim { holder, .. } | Op::Accept { holder, .. } | Op::Decline { holder, .. } => holder,
        _ => return Ok(()),
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

/// Joins two detail phrases with "; ", skipping empty ones.
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}; {b}"),
    }
}
