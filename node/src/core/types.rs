//! The lease core's domain types: what a log entry asks for and what applying it answered.
//!
//! These are baton's own types; protobuf never reaches the core (conversions live in
//! `server::convert`). They are serde-encoded into the Raft log and snapshots, so changing
//! them changes the on-disk format.

use serde::{Deserialize, Serialize};

use super::case::{Assignment, HandoffNote, Offer, Record, RecordPatch};

/// A fencing token: the revision of the write that granted a lease.
pub type FencingToken = u64;

/// Who holds, or wants, a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Human-readable claimant name, e.g. `claude@host-a`.
    pub name: String,
    /// Random per-process id: two processes with the same name are different holders.
    pub client_id: String,
}

/// Who really sent a command, as its history event records it: the holder name it acted as,
/// its client id (the session), and, with auth on, the authenticated principal. Client ids
/// are public, so with auth off the client id identifies an honest client and binds nothing
/// more; with auth on, the principal is what the node verified.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The holder name the request acted as: the claimant's, the lease holder's for a write
    /// with its token, the dispatcher's (`by`) for an assignment; empty for operator calls
    /// (revoke), which act as no holder.
    pub name: String,
    /// The requester's client id: its request id's, the session it acted from.
    pub client_id: String,
    /// The principal the node authenticated (certificate common name or bearer token's
    /// name); `None` with auth off or for an anonymous request.
    pub principal: Option<String>,
}

/// A live lease on one key. A key without a `Lease` is free.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Shared with the table's maps: one allocation per key.
    pub key: std::sync::Arc<str>,
    pub holder: Holder,
    /// Revision of the granting entry; stays the same across renewals.
    pub token: FencingToken,
    /// Revision of the grant or of the latest renewal: the instant each node counts the TTL
    /// from is its own apply of this entry, and an `Expire` must name it to take effect.
    pub basis: u64,
    /// Renewals since the grant (the history records them as a count, not one by one).
    pub renewals: u64,
    pub ttl_ms: u64,
    /// Leader's wall clock at the grant; for people only, decides nothing.
    pub since_unix_ms: u64,
    /// Leader's wall clock at the latest renewal; for people only.
    pub renewed_unix_ms: u64,
}

/// Makes a mutating request exactly-once across retries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestId {
    pub client_id: String,
    pub seq: u64,
}

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

/// Who sent a client command, as the node that took the request established it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The session the request acts as: the client id leases are bound to (a claim's holder
    /// client id). Not the request id's client id, which only names a retry slot (a process
    /// gets a fresh one, while its session may span processes: `BATON_CLIENT_ID`).
    pub client_id: String,
    /// The principal the node authenticated; `None` with auth off or for an anonymous
    /// request. What it may do was checked at the edge; the core records it.
    pub principal: Option<String>,
}

impl LogCommand {
    /// Who sent this command, acting as `name`; `None` for the leader's own entries and
    /// format-3 commands.
    pub fn actor(&self, name: &str) -> Option<Actor> {
        self.sender.as_ref().map(|s| Actor {
            name: name.to_owned(),
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
}

impl Op {
    /// A stable 64-bit fingerprint of the operation (FNV-1a over a fixed encoding), kept with
    /// each remembered answer so that a request id reused for a *different* operation is
    /// refused instead of answered with another request's outcome. Hand-rolled, not
    /// `std::hash`, because every node must compute the same value whatever it was built with.
    pub fn fingerprint(&self) -> u64 {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut hash = OFFSET;
        let mut feed = |bytes: &[u8]| {
            for b in bytes.iter().chain(&[0xff]) {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(PRIME);
            }
        };
        match self {
            Op::Claim {
                key,
                holder,
                ttl_ms,
            } => {
                feed(b"claim");
                feed(key.as_bytes());
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
                feed(&ttl_ms.to_le_bytes());
            }
            Op::Renew { key, token } => {
                feed(b"renew");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
            }
            Op::Release {
                key,
                token,
                final_status,
            } => {
                feed(b"release");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
                feed(final_status.as_deref().unwrap_or("").as_bytes());
            }
            Op::Expire { key, token, basis } => {
                feed(b"expire");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
                feed(&basis.to_le_bytes());
            }
            Op::Revoke { key, reason } => {
                feed(b"revoke");
                feed(key.as_bytes());
                feed(reason.as_bytes());
            }
            // The remaining operations are told apart by kind, key and their identifying
            // fields; a request id reused for another operation of the same kind on the same
            // key with the same identity is not worth a full encoding.
            Op::Update { key, token, .. } => {
                feed(b"update");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
            }
            Op::Assign { key, to, by, .. } => {
                feed(b"assign");
                feed(key.as_bytes());
                feed(to.as_bytes());
                feed(by.as_bytes());
            }
            Op::Offer { key, token, to, .. } => {
                feed(b"offer");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
                feed(to.as_bytes());
            }
            Op::Accept { key, holder, .. } => {
                feed(b"accept");
                feed(key.as_bytes());
                feed(holder.client_id.as_bytes());
            }
            Op::Decline { key, holder } => {
                feed(b"decline");
                feed(key.as_bytes());
                feed(holder.client_id.as_bytes());
            }
            Op::Cancel { key, token } => {
                feed(b"cancel");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
            }
            Op::SetQuarantine { prefix, delay_ms } => {
                feed(b"set-quarantine");
                feed(prefix.as_bytes());
                feed(&delay_ms.to_le_bytes());
            }
            Op::EndQuarantine { key, revision } => {
                feed(b"end-quarantine");
                feed(key.as_bytes());
                feed(&revision.to_le_bytes());
            }
            Op::Lapse {
                key,
                offer_revision,
            } => {
                feed(b"lapse");
                feed(key.as_bytes());
                feed(&offer_revision.to_le_bytes());
            }
            Op::SetAccess { policy, by } => {
                feed(b"set-access");
                feed(by.as_bytes());
                // bincode's encoding of the policy: fixed by its fields, whatever the build.
                feed(&bincode::serialize(policy).expect("a policy serializes"));
            }
        }
        hash
    }

    /// The key the operation is about.
    pub fn key(&self) -> &str {
        match self {
            Op::Claim { key, .. }
            | Op::Renew { key, .. }
            | Op::Release { key, .. }
            | Op::Expire { key, .. }
            | Op::Revoke { key, .. }
            | Op::Update { key, .. }
            | Op::Assign { key, .. }
            | Op::Offer { key, .. }
            | Op::Accept { key, .. }
            | Op::Decline { key, .. }
            | Op::Cancel { key, .. }
            | Op::Lapse { key, .. }
            | Op::EndQuarantine { key, .. } => key,
            Op::SetQuarantine { prefix, .. } => prefix,
            // About the whole cluster, no one key.
            Op::SetAccess { .. } => "",
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
}
