//! The lease core's domain types: what a log entry asks for and what applying it answered.
//!
//! These are baton's own types; protobuf never reaches the core (conversions live in
//! `server::convert`). They are serde-encoded into the Raft log and snapshots, so changing
//! them changes the on-disk format.

use serde::{Deserialize, Serialize};

use super::case::{Assignment, HandoffNote, Offer, Record, RecordPatch};
pub use super::ids::{Actor, FencingToken, Holder, Name, RequestId, Sender};
pub use super::lease::Lease;
use super::limits::{
    HOLDER_NAME_BYTES_MAX, QUARANTINE_MS_MAX, REASON_BYTES_MAX, TTL_MS_FLOOR, TTL_MS_MAX,
};
use super::refusal::Refusal;
use super::validate::{self, InvalidInput};

/// One Raft log entry's payload: the commands the leader batched into it, applied in order,
/// each at its own revision. Batching is what lets one log append and one fsync carry many
/// concurrent requests (openraft 0.9 appends each proposal on its own, waiting for the flush).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub commands: Vec<LogCommand>,
}

impl Proposal {
    pub fn one(cmd: LogCommand) -> Proposal {
        Proposal {
            commands: vec![cmd],
        }
    }
}

/// What applying one command produced, and the revision it was applied at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub outcome: Outcome,
    pub revision: u64,
}

/// One command: an operation plus who sent it and the proposing leader's wall clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCommand {
    /// Set for client requests (de-duplicated); `None` for the leader's own entries (`Expire`).
    pub request_id: Option<RequestId>,
    /// The proposing leader's wall-clock time in ms since the Unix epoch. Informational:
    /// recorded as "since"/"renewed at", never compared to decide anything.
    pub leader_unix_ms: u64,
    pub op: Op,
    /// Who sent it (data format 4): its session and principal. `None` for the leader's own
    /// entries, and for client commands logged by data format 3, which are applied by that
    /// format's rules (no session binding; see `Sender`) so that every node, whatever its
    /// version, reaches the same state from the same log.
    pub sender: Option<Sender>,
}

impl LogCommand {
    /// Who sent this command, acting as `name`; `None` for the leader's own entries and
    /// format-3 commands.
    pub fn actor(&self, name: &Name) -> Option<Actor> {
        self.sender.as_ref().map(|s| Actor {
            name: name.clone(),
            client_id: s.client_id.clone(),
            principal: s.principal.clone(),
        })
    }

    /// A client command logged by data format 3: applied by that format's rules.
    pub fn is_format_3(&self) -> bool {
        self.request_id.is_some() && self.sender.is_none()
    }
}

/// The mutating operations. Each is one Raft log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Claim {
        key: String,
        holder: Holder,
        ttl_ms: u64,
    },
    Renew {
        key: String,
        token: FencingToken,
    },
    Release {
        key: String,
        token: FencingToken,
        /// Sets the record's status in the same entry.
        final_status: Option<String>,
    },
    /// Proposed by the leader when the TTL counted from its own apply of `basis` has run
    /// out. Takes effect only if the lease still has this token and basis: an `Expire` that
    /// raced a renewal names an old basis and is ignored.
    Expire {
        key: String,
        token: FencingToken,
        basis: u64,
    },
    /// Operator force-release.
    Revoke {
        key: String,
        reason: String,
    },
    /// Fenced write to the record.
    Update {
        key: String,
        token: FencingToken,
        patch: RecordPatch,
    },
    /// Routing metadata: who a dispatcher wanted. Reserves nothing.
    Assign {
        key: String,
        to: String,
        by: String,
        reason: String,
    },
    Offer {
        key: String,
        token: FencingToken,
        to: String,
        note: HandoffNote,
        offer_ttl_ms: u64,
    },
    Accept {
        key: String,
        holder: Holder,
        ttl_ms: u64,
    },
    Decline {
        key: String,
        holder: Holder,
    },
    Cancel {
        key: String,
        token: FencingToken,
    },
    /// Operator setting: keys under `prefix` stay unclaimable for `delay_ms` after an
    /// involuntary expiry (not a release). `delay_ms` 0 removes the rule.
    SetQuarantine {
        prefix: String,
        delay_ms: u64,
    },
    /// Proposed by the leader when a quarantine, counted from its own apply of the expiry,
    /// has run out. Takes effect only if that quarantine (by revision) is still on.
    EndQuarantine {
        key: String,
        revision: u64,
    },
    /// Proposed by the leader when an offer's TTL, counted from its own apply of the offer,
    /// has run out. Takes effect only if that offer (by revision) is still pending.
    Lapse {
        key: String,
        offer_revision: u64,
    },
    /// Admin setting: the permissions policy every node enforces (`None` clears it), and
    /// who set it, for the audit trail (`core::access`).
    SetAccess {
        policy: Option<super::access::Policy>,
        by: String,
    },
    /// Clears the key's assignment (data format 5: proposed only once every member reads
    /// it, see `server::baton::Ctx::format_gate`). A key with none is left as it is.
    /// Appended last, so that every earlier variant keeps its encoding.
    Unassign {
        key: String,
        by: String,
        reason: String,
    },
    /// Ends the key's lease like `Revoke`, and keeps the key unclaimable (a quarantine of the
    /// lease's TTL, each node counting from its own apply) until the revoked holder's safe
    /// window has passed, so that no one is granted the key while a holder cut off from the
    /// cluster may still believe it holds it (data format 8: proposed only once every member
    /// reads it). A free key is left as it is. Appended last, so that every earlier variant
    /// keeps its encoding.
    RevokeHeld {
        key: String,
        reason: String,
    },
    /// A dispatcher puts a task on the board: the key gets a case file with this record
    /// (status `open` unless the patch names one) and, with `to`, an assignment, without a
    /// claim. A key that has a case file is refused unless `update`, which patches its
    /// record (and assignment) instead. `by` is the dispatcher's name; the sender is
    /// recorded as the actor. Data format 9, appended last.
    Post {
        key: String,
        patch: RecordPatch,
        to: Option<String>,
        by: String,
        update: bool,
    },
    /// Grants `holder` the first claimable key under `prefix` that has a case file, in one
    /// entry: not held, not quarantined, not finished (`FINISHED_STATUSES`), matching every
    /// `wheres` field, and not assigned to someone else unless `any`; keys assigned to the
    /// holder's name first, then in key order, among the first `CLAIM_NEXT_SCAN_MAX` keys.
    /// Data format 9, appended last.
    ClaimNext {
        prefix: String,
        holder: Holder,
        ttl_ms: u64,
        any: bool,
        wheres: Vec<(String, String)>,
    },
    /// Grants `holder` every key in `keys`, or none, in one entry: each key it grants gets
    /// this entry's revision as its token (a key the holder's session already holds keeps
    /// its token and is renewed, as a claim of it would). Refused, changing nothing, if any
    /// key is held by someone else or quarantined: the answer names every such key. At most
    /// `CLAIM_SET_KEYS_MAX` distinct keys. Data format 10, appended last.
    ClaimSet {
        keys: Vec<String>,
        holder: Holder,
        ttl_ms: u64,
    },
    /// Claims `key` for `holder` if it can be granted now (as `Claim`); otherwise puts the
    /// holder's session in the key's line, or, if it is in line already, renews its place
    /// (its countdown restarts from this entry). When the key is freed the oldest waiter is
    /// granted it in the freeing entry, with `ttl_ms`. Data format 11, appended last.
    Wait {
        key: String,
        holder: Holder,
        ttl_ms: u64,
    },
    /// Takes `holder`'s session out of the key's line. Data format 11, appended last.
    LeaveLine {
        key: String,
        holder: Holder,
    },
    /// Proposed by the leader when a waiter's place, counted from its own apply of `basis`,
    /// has run out. Takes effect only if that session still waits with that basis. Data
    /// format 11, appended last.
    DropWaiter {
        key: String,
        client_id: String,
        basis: u64,
    },
    /// Grants `holder` one of the key's permits (`core::permits`): its own lease, with this
    /// entry's revision as its token, if fewer than N hold and nothing else blocks it (a
    /// session that holds one already keeps its token and is renewed). N is `sharing`'s, and
    /// must be the key's current N while any holds (else `PermitsMismatch`); an exclusive
    /// lease blocks it as it blocks a claim. Data format 12, appended last.
    ClaimPermit {
        key: String,
        holder: Holder,
        ttl_ms: u64,
        sharing: super::permits::Sharing,
    },
    /// `Wait` for one of a key's permits, or to share it (`sharing`): granted as
    /// `ClaimPermit` would be if nothing blocks it and no one waits ahead; else joins the
    /// key's line or renews the session's place in it. A write that frees a permit grants it
    /// to the head of the line if it waits for that sharing. Data format 13, appended last.
    WaitPermit {
        key: String,
        holder: Holder,
        ttl_ms: u64,
        sharing: super::permits::Sharing,
    },
    /// The leader's nudge to hand a key on again: one write grants one waiter at most (its
    /// token is the write's revision), so a write that freed room for more asks, through a
    /// countdown of no time (`Line::hand_on_id`), for this to grant the next. Data format 13,
    /// appended last.
    HandOn {
        key: String,
        basis: u64,
    },
    /// `ClaimNext` walking only the unfinished keys, from the table's index of them and of
    /// their assignees (`table::Walk::Unfinished`): finished ones are passed by unseen. The
    /// leader proposes it once every member reads data format 14; a `ClaimNext` in the log
    /// keeps format 9's walk, on every node. Data format 14, appended last.
    ClaimNextUnfinished {
        prefix: String,
        holder: Holder,
        ttl_ms: u64,
        any: bool,
        wheres: Vec<(String, String)>,
    },
    /// A client's write whose earlier attempt may have reached the cluster: applied as `op`
    /// if the cluster can match it to its first attempt (its answer is remembered, or the
    /// client's memory shows it was never applied), else refused as too old to tell, never
    /// applied afresh (`LeaseTable::unmatched_retry`). Data format 15, appended last.
    Retry {
        op: Box<Op>,
    },
}

impl Op {
    /// The operation itself: a retry's own operation, else this one.
    pub fn plain(&self) -> &Op {
        match self {
            Op::Retry { op } => op.plain(),
            op => op,
        }
    }

    /// The key the operation is about.
    pub fn key(&self) -> &str {
        match self {
            Op::Retry { op } => op.key(),
            Op::Claim { key, .. }
            | Op::Renew { key, .. }
            | Op::Release { key, .. }
            | Op::Expire { key, .. }
            | Op::Revoke { key, .. }
            | Op::RevokeHeld { key, .. }
            | Op::Update { key, .. }
            | Op::Assign { key, .. }
            | Op::Unassign { key, .. }
            | Op::Offer { key, .. }
            | Op::Accept { key, .. }
            | Op::Decline { key, .. }
            | Op::Cancel { key, .. }
            | Op::Lapse { key, .. }
            | Op::EndQuarantine { key, .. }
            | Op::Post { key, .. }
            | Op::Wait { key, .. }
            | Op::LeaveLine { key, .. }
            | Op::DropWaiter { key, .. }
            | Op::ClaimPermit { key, .. }
            | Op::WaitPermit { key, .. }
            | Op::HandOn { key, .. } => key,
            // The keys under the prefix: permissions are by prefix, so a right over this
            // prefix as a key is a right over every key under it.
            Op::SetQuarantine { prefix, .. }
            | Op::ClaimNext { prefix, .. }
            | Op::ClaimNextUnfinished { prefix, .. } => prefix,
            // The first of the set (each is checked and claimed; see `keys`).
            Op::ClaimSet { keys, .. } => keys.first().map_or("", String::as_str),
            // About the whole cluster, no one key.
            Op::SetAccess { .. } => "",
        }
    }
}

impl Op {
    /// The claimant the operation names, if any: a claim's, a wait's, an accept's or a
    /// decline's holder, whose session must be the command's sender's (a process claims,
    /// waits, accepts and declines as its own session).
    pub fn claimant(&self) -> Option<&Holder> {
        match self {
            Op::Retry { op } => op.claimant(),
            Op::Claim { holder, .. }
            | Op::ClaimNext { holder, .. }
            | Op::ClaimNextUnfinished { holder, .. }
            | Op::ClaimSet { holder, .. }
            | Op::Accept { holder, .. }
            | Op::Decline { holder, .. }
            | Op::Wait { holder, .. }
            | Op::ClaimPermit { holder, .. }
            | Op::WaitPermit { holder, .. }
            | Op::LeaveLine { holder, .. } => Some(holder),
            _ => None,
        }
    }

    /// Every key the operation is about: the set of a `ClaimSet`, else `key()` alone.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Op::Retry { op } => op.keys(),
            Op::ClaimSet { keys, .. } => keys.iter().map(String::as_str).collect(),
            op => vec![op.key()],
        }
    }

    /// Validates the operation against the core's absolute limits (the edge checks its
    /// node's own, inside them, first).
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let op = match self {
            Op::Retry { op } if matches!(**op, Op::Retry { .. }) => {
                return validate::invalid("a retry of a retry".to_owned())
            }
            Op::Retry { op } => op,
            op => op,
        };
        if let Op::SetAccess { policy, by } = op {
            validate::check_text("who set the policy", by, HOLDER_NAME_BYTES_MAX)?;
            return match policy {
                Some(p) => p.check().map_err(|e| InvalidInput(e.to_string())),
                None => Ok(()),
            };
        }
        if let Op::ClaimSet {
            keys,
            holder: h,
            ttl_ms: t,
        } = op
        {
            validate::key_set(keys)?;
            validate::holder(h)?;
            return validate::ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX);
        }
        validate::key(op.key())?;
        match op {
            Op::Retry { .. } => validate::invalid("a retry of a retry".to_owned()),
            Op::Claim {
                holder: h,
                ttl_ms: t,
                ..
            } => {
                validate::holder(h)?;
                validate::ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX)
            }
            Op::Renew { token: t, .. } => validate::token(*t),
            Op::Expire {
                token: t, basis, ..
            } => {
                validate::token(*t)?;
                if basis < t {
                    return validate::invalid(format!("expire basis {basis} is before token {t}"));
                }
                Ok(())
            }
            Op::Revoke { reason: r, .. } | Op::RevokeHeld { reason: r, .. } => validate::reason(r),
            Op::Release {
                token: t,
                final_status,
                ..
            } => {
                validate::token(*t)?;
                match final_status {
                    Some(s) => validate::status(s),
                    None => Ok(()),
                }
            }
            Op::Update {
                token: t, patch: p, ..
            } => {
                validate::token(*t)?;
                validate::patch(p)
            }
            Op::Assign {
                to, by, reason: r, ..
            } => {
                validate::holder_name("assignee", to)?;
                validate::holder_name("assigned by", by)?;
                if r.len() > REASON_BYTES_MAX {
                    return validate::invalid(format!(
                        "reason is {} bytes: the limit is {REASON_BYTES_MAX} bytes",
                        r.len()
                    ));
                }
                Ok(())
            }
            // New in format 5, so it takes the revoke's rules for a reason (the assignment's
            // own stay as format 4 applied them).
            Op::Unassign { by, reason: r, .. } => {
                validate::holder_name("cleared by", by)?;
                validate::reason(r)
            }
            Op::Offer {
                token: t,
                to,
                note: n,
                offer_ttl_ms: ttl,
                ..
            } => {
                validate::token(*t)?;
                validate::holder_name("offer addressee", to)?;
                validate::note(n)?;
                validate::offer_ttl_ms(*ttl)
            }
            Op::Accept {
                holder: h,
                ttl_ms: t,
                ..
            } => {
                validate::holder(h)?;
                validate::ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX)
            }
            Op::Decline { holder: h, .. } | Op::LeaveLine { holder: h, .. } => validate::holder(h),
            Op::Wait {
                holder: h,
                ttl_ms: t,
                ..
            } => {
                validate::holder(h)?;
                validate::ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX)
            }
            Op::DropWaiter {
                client_id, basis, ..
            } => {
                validate::client_id(client_id)?;
                validate::token(*basis)
            }
            Op::Cancel { token: t, .. } => validate::token(*t),
            Op::ClaimPermit {
                holder: h,
                ttl_ms: t,
                sharing,
                ..
            }
            | Op::WaitPermit {
                holder: h,
                ttl_ms: t,
                sharing,
                ..
            } => {
                validate::holder(h)?;
                validate::ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX)?;
                validate::sharing(*sharing)
            }
            Op::Lapse { offer_revision, .. } => validate::token(*offer_revision),
            Op::HandOn { basis, .. } => validate::token(*basis),
            Op::SetQuarantine { delay_ms, .. } => {
                if *delay_ms > QUARANTINE_MS_MAX {
                    return validate::invalid(format!(
                    "quarantine delay {delay_ms} ms is above the maximum {QUARANTINE_MS_MAX} ms"
                ));
                }
                Ok(())
            }
            Op::EndQuarantine { revision, .. } => validate::token(*revision),
            Op::Post {
                patch: p, to, by, ..
            } => {
                if !p.is_empty() {
                    validate::patch(p)?;
                }
                if let Some(to) = to {
                    validate::holder_name("assignee", to)?;
                }
                validate::holder_name("posted by", by)
            }
            Op::ClaimNext {
                holder: h,
                ttl_ms: t,
                wheres,
                ..
            }
            | Op::ClaimNextUnfinished {
                holder: h,
                ttl_ms: t,
                wheres,
                ..
            } => {
                validate::holder(h)?;
                validate::ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX)?;
                validate::wheres(wheres)
            }
            Op::SetAccess { .. } | Op::ClaimSet { .. } => Ok(()),
        }
    }
}

/// What applying one entry answered. Refusals are outcomes, not errors: they are part of
/// normal operation and must be de-duplicated like grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The claimant holds the key. `already_held`: it held it before (same client id), so the
    /// token is unchanged and the lease was renewed. `assignment`: who a dispatcher wanted.
    Granted {
        lease: Lease,
        already_held: bool,
        assignment: Option<Assignment>,
    },
    /// Someone else holds the key.
    Held {
        lease: Lease,
        same_name_other_process: bool,
        assignment: Option<Assignment>,
    },
    Renewed {
        lease: Lease,
    },
    Released {
        lease: Lease,
    },
    /// The presented token is not current; `current` is who holds the key now, if anyone.
    Lost {
        current: Option<Lease>,
    },
    Expired {
        lease: Lease,
    },
    /// An `Expire` that lost a race with a renewal, release or new grant: nothing changed.
    ExpireIgnored,
    Revoked {
        previous: Option<Lease>,
    },
    /// Bad input: nothing changed. The message says what to fix.
    Invalid {
        message: String,
    },
    /// A retry whose first answer is no longer remembered: it may or may not have been
    /// applied, so it is not applied again. Nothing changed; the caller should probe.
    RetryTooOld {
        message: String,
    },
    Updated {
        record: Record,
    },
    Assigned {
        record: Record,
    },
    Offered {
        offer: Offer,
    },
    /// The taker holds the key with a new token; the giver's token is dead.
    Accepted {
        lease: Lease,
        note: HandoffNote,
        from: Holder,
    },
    Declined,
    Cancelled,
    Lapsed,
    /// A `Lapse` for an offer that already ended: nothing changed.
    LapseIgnored,
    /// The quarantine rules after a `SetQuarantine`.
    QuarantineRules {
        rules: std::collections::BTreeMap<String, u64>,
    },
    QuarantineEnded,
    /// An `EndQuarantine` for a quarantine that already ended: nothing changed.
    QuarantineEndIgnored,
    /// A refusal remembered from before data format 4, as text: only ever the replayed
    /// answer to a retry of a request first answered by an older node. New refusals are
    /// `Refused`. gRPC `FAILED_PRECONDITION`.
    RefusedText {
        message: String,
    },
    /// Entries that carry no operation (blank, membership).
    None,
    /// The permissions policy was replaced (or cleared); the new version.
    AccessSet {
        version: u64,
    },
    /// A request that is well-formed but not allowed now, with its facts (who holds the key,
    /// with which token, which offer is pending, ...). Nothing changed. gRPC
    /// `FAILED_PRECONDITION` with the facts in the status details. Last among the variants,
    /// so that answers remembered by data format 3 still decode.
    Refused {
        refusal: super::refusal::Refusal,
    },
    /// A task posted (`created`: the key had no case file) or its record patched
    /// (`post --update`). Data format 9.
    Posted {
        record: Record,
        created: bool,
    },
    /// `claim-next` found no claimable key: a normal answer, with why each key it looked at
    /// was passed by. Nothing changed. Data format 9.
    NothingClaimable {
        prefix: String,
        counts: Unclaimable,
    },
    /// Every key of a `ClaimSet` is the claimant's, in the order asked. Data format 10.
    GrantedSet {
        grants: Vec<Grant>,
    },
    /// A `ClaimSet` that granted nothing: every key that blocked it, in the order asked.
    /// Nothing changed. Data format 10.
    BlockedSet {
        blocked: Vec<Blocked>,
    },
    /// A `Wait` that did not grant: where the claimant stands in the key's line (it joined,
    /// or renewed its place). Data format 11.
    InLine {
        place: super::line::InLine,
    },
    /// A `LeaveLine`: whether the session was in line, and the lease it holds on the key if
    /// it was granted the key from the line before it left (release it if unwanted). Data
    /// format 11.
    LeftLine {
        was_waiting: bool,
        holds: Option<Lease>,
    },
    /// A waiter's place ended by the leader: it was not renewed in time. Data format 11.
    WaiterDropped,
    /// A `DropWaiter` for a place that was renewed or already ended: nothing changed.
    DropWaiterIgnored,
    /// A `ClaimPermit` granted (or renewed, `already_held`) the claimant's own permit:
    /// `lease` is its own, `holders` every holder of the key now (this one included), in
    /// order of token. Data format 12.
    GrantedPermit {
        lease: Lease,
        already_held: bool,
        assignment: Option<Assignment>,
        sharing: super::permits::Sharing,
        holders: Vec<Lease>,
    },
    /// Every permit of the key is held (or its holders' N is not the claimant's, or the
    /// claimant asked for it exclusively): who holds it, each with its own lease. Nothing
    /// changed. Data format 12.
    HeldByHolders {
        key: String,
        sharing: super::permits::Sharing,
        holders: Vec<Lease>,
        assignment: Option<Assignment>,
    },
    /// A `HandOn` applied: the head of the key's line was granted what is free, if it could
    /// be. Data format 13.
    HandOnDone,
}

/// One key of a granted set: its lease (the entry's revision as its token, unless
/// `already_held`: the claimant's session held it, and keeps its token) and who a dispatcher
/// wanted on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub lease: Lease,
    pub already_held: bool,
    pub assignment: Option<Assignment>,
}

/// Why one key of a set could not be granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Blocked {
    /// Someone else holds it (as a claim's `Outcome::Held` says).
    Held {
        lease: Lease,
        same_name_other_process: bool,
        assignment: Option<Assignment>,
    },
    /// It is quarantined (as a claim's `Refusal::Quarantined` says).
    Quarantined {
        key: String,
        revision: u64,
        delay_ms: u64,
    },
    /// Holders of permits hold it (as a claim's `Outcome::HeldByHolders` says). Data format
    /// 12, appended last.
    Holders {
        key: String,
        sharing: super::permits::Sharing,
        holders: Vec<Lease>,
        assignment: Option<Assignment>,
    },
}

impl Blocked {
    /// The answer a claim of this one key gets.
    pub fn into_outcome(self) -> Outcome {
        match self {
            Blocked::Held {
                lease,
                same_name_other_process,
                assignment,
            } => Outcome::Held {
                lease,
                same_name_other_process,
                assignment,
            },
            Blocked::Quarantined {
                key,
                revision,
                delay_ms,
            } => Outcome::Refused {
                refusal: Refusal::Quarantined {
                    key,
                    revision,
                    delay_ms,
                },
            },
            Blocked::Holders {
                key,
                sharing,
                holders,
                assignment,
            } => Outcome::HeldByHolders {
                key,
                sharing,
                holders,
                assignment,
            },
        }
    }

    pub fn key(&self) -> &str {
        match self {
            Blocked::Held { lease, .. } => &lease.key,
            Blocked::Quarantined { key, .. } | Blocked::Holders { key, .. } => key,
        }
    }
}

/// Why `claim-next` passed the keys it looked at by, one count per reason (a key counts
/// once, under the first reason that applies, in this order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unclaimable {
    /// Case files looked at (at most `CLAIM_NEXT_SCAN_MAX`): unfinished ones only, for an
    /// `Op::ClaimNextUnfinished`.
    pub scanned: u64,
    pub held: u64,
    pub quarantined: u64,
    /// Status in `FINISHED_STATUSES`: 0 for an `Op::ClaimNextUnfinished`, which does not
    /// look at them.
    pub finished: u64,
    /// A `where` field missing or different.
    pub unmatched: u64,
    /// Assigned to someone other than the claimant (without `any`).
    pub assigned_elsewhere: u64,
    /// The scan stopped at `CLAIM_NEXT_SCAN_MAX` with keys left under the prefix.
    pub truncated: bool,
}
