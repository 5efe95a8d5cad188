//! The client's own view of leases and outcomes; generated protobuf types never leave
//! `convert`. Everything a script may print derives `Serialize` with stable
//! snake_case field names and durations in milliseconds (`ttl_ms`, `remaining_ms`).

use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};

/// How a read is served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// The leader confirms with a quorum that it still leads and answers from applied state:
    /// the answer reflects every write acknowledged before the read began.
    #[default]
    Linearizable,
    /// The node that receives the request answers from its own applied state, without
    /// asking anyone: faster and available without a leader, but possibly behind.
    Stale,
}

/// A live lease on one key, as the serving node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseInfo {
    /// The key the lease is on.
    pub key: String,
    /// The holder's human-readable name, e.g. `claude@host-a`.
    pub holder_name: String,
    /// The holder process's random id: tells two processes with one name apart.
    pub holder_client_id: String,
    /// Fencing token: the revision of the grant. Downstream systems reject smaller ones.
    pub token: u64,
    /// Lease length, counted by the cluster from its apply of the grant or latest renewal.
    #[serde(rename = "ttl_ms", serialize_with = "as_millis")]
    pub ttl: Duration,
    /// Leader's wall-clock time of the grant; for people only, it decides nothing.
    pub held_since_unix_ms: u64,
    /// Leader's wall-clock time of the latest renewal; for people only.
    pub renewed_at_unix_ms: u64,
    /// The serving node's estimate of the time left before the leader expires the lease.
    #[serde(rename = "remaining_ms", serialize_with = "as_millis")]
    pub remaining: Duration,
    /// Revision of the grant or renewal the expiry countdown runs from.
    pub basis: u64,
}

/// How a claim asks to hold a key: one of N permits (1 is the key to itself alone), or
/// shared with other shared holders. A number is its permits: `claim_permit(.., 3)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// One of this many permits; 1: exclusive (a plain claim).
    Permits(u32),
    /// Shared with other shared holders, while no exclusive holder holds the key (data
    /// format 13).
    Shared,
}

impl From<u32> for Sharing {
    fn from(permits: u32) -> Sharing {
        Sharing::Permits(permits)
    }
}

/// A key held by permits: up to `permits` holders at once, each with its own lease and
/// fencing token; or shared (`shared`: any number, up to `permits`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyHolders {
    /// How many may hold the key at once (fixed by the first holder while any holds; for
    /// shared holders, [`crate::SHARED_HOLDERS_MAX`]).
    pub permits: u32,
    /// Every holder, in order of token (of grant).
    pub holders: Vec<LeaseInfo>,
    /// The holders share the key (`claim --shared`) rather than hold N permits of it (left
    /// out of JSON when false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

impl KeyHolders {
    /// How many permits are free now.
    pub fn free(&self) -> u32 {
        self.permits.saturating_sub(self.holders.len() as u32)
    }

    /// The holder whose permit ends first, by the answering node's countdowns: when the
    /// next permit frees at the latest (a release may free one sooner).
    pub fn first_to_free(&self) -> Option<&LeaseInfo> {
        self.holders.iter().min_by_key(|l| l.remaining)
    }
}

/// Who holds, wants or acted on a key: a name and the process's client id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HolderInfo {
    /// Human-readable name, e.g. `claude@host-a`.
    pub name: String,
    /// Random id of the process: tells two processes with one name apart.
    pub client_id: String,
}

/// Who really made a change, as the history records it: the holder name it acted as, its
/// session (client id), and the principal the node authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActorInfo {
    /// The holder name it acted as: the claimant's, the lease holder's for a write with its
    /// token, the dispatcher's for an assignment; empty for an operator's revoke.
    pub name: String,
    /// The session (client id) the request came from.
    pub client_id: String,
    /// The principal the node authenticated; `None` with auth off or when anonymous.
    pub principal: Option<String>,
}

impl ActorInfo {
    /// The name it acted as, or `operator` for a call that acts as no holder (a revoke).
    pub fn name_or_operator(&self) -> &str {
        match self.name.as_str() {
            "" => "operator",
            name => name,
        }
    }
}

impl std::fmt::Display for ActorInfo {
    /// `bob (client bob-proc, principal bob)`; the principal only when there is one.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (client {}", self.name_or_operator(), self.client_id)?;
        if let Some(principal) = &self.principal {
            write!(f, ", principal {principal}")?;
        }
        f.write_str(")")
    }
}

/// Who a dispatcher wanted on a key. Routing metadata only: it reserves nothing, and
/// anyone's claim still wins the key (see the essay "assignment is not ownership").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssignmentInfo {
    /// The agent the dispatcher addressed, e.g. `claude@host-a`.
    pub to: String,
    /// Who made the assignment.
    pub by: String,
    /// Why, for people; may be empty.
    pub reason: String,
    /// Leader's wall-clock time of the assignment; for people only.
    pub assigned_at_unix_ms: u64,
    /// Revision of the assignment.
    pub revision: u64,
}

impl std::fmt::Display for AssignmentInfo {
    /// `alice by dispatcher: verify four domains` (the reason only when there is one).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} by {}", self.to, self.by)?;
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        Ok(())
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller holds the key.
    Granted(Grant),
    /// Someone else holds the key: stand down.
    Held {
        /// The current holder's lease.
        lease: LeaseInfo,
        /// The holder has the caller's name but is another process (another client id).
        same_name_other_process: bool,
        /// Who a dispatcher assigned the key to, if anyone. Even when it names the caller,
        /// the holder keeps the key: an assignment reserves nothing.
        assignment: Option<AssignmentInfo>,
        /// Set when permits hold the key (every permit is held, someone waits in line ahead,
        /// or the claim was exclusive): every holder; `lease` is then the one whose permit
        /// ends first.
        permits: Option<KeyHolders>,
    },
}

/// A lease the caller holds, with the instant until which it may act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The lease as granted or renewed.
    pub lease: LeaseInfo,
    /// The caller already held the key (same client id), so the token is unchanged and the
    /// lease was renewed. Always true for a renewal.
    pub already_held: bool,
    /// Revision at which the grant or renewal was decided.
    pub revision: u64,
    /// The caller may act as the holder until this instant of its own monotonic clock:
    /// `send_time + ttl × (1 − drift_margin)`, see [`safe_deadline`].
    pub safe_deadline: Instant,
    /// Who a dispatcher assigned the key to, if anyone (claims only; `None` for renewals).
    /// It may name someone else: the claim won all the same, and the claimant should know
    /// that a dispatcher is waiting on another agent.
    pub assignment: Option<AssignmentInfo>,
    /// A permit claim's grant (`lease` is the caller's own permit): the key's N and every
    /// holder now, the caller included. `None` for an exclusive claim and for renewals.
    pub permits: Option<Box<KeyHolders>>,
}

/// The answer to a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The lease was extended; same token, new basis, new safe deadline.
    Renewed(Grant),
    /// The token is not the key's current one: the caller lost the key and must stop.
    Lost {
        /// Who holds the key now; `None` when it is free.
        current: Option<LeaseInfo>,
    },
}

/// The answer to a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The key is free; this is the lease that was released.
    Released(LeaseInfo),
    /// The token was not the key's current one, so nothing was released.
    Lost {
        /// Who holds the key now; `None` when it is free.
        current: Option<LeaseInfo>,
    },
}

/// The answer to a probe of one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    /// The key's lease; `None` when the key is free.
    pub lease: Option<LeaseInfo>,
    /// Revision the answer reflects (of the last applied write).
    pub revision: u64,
    /// Who waits in the key's line; `None` (left out of JSON) when no one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<KeyLine>,
    /// Set (else left out of JSON) when permits hold the key: every holder; `lease` is then
    /// the first of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<KeyHolders>,
}

/// One page of held keys under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Board {
    /// Leases in key order.
    pub leases: Vec<LeaseInfo>,
    /// More leases match: ask again with `start_after` = the last key of this page.
    pub truncated: bool,
    /// Revision the answer reflects (of the last applied write).
    pub revision: u64,
    /// The assignment of each listed key that has one (key -> assignment): who a dispatcher
    /// wanted, beside who holds it. Routing metadata only.
    pub assignments: std::collections::BTreeMap<String, crate::AssignmentInfo>,
    /// Keys under the prefix that no one holds but are quarantined after an involuntary
    /// expiry (key -> quarantine): claims are refused until each ends.
    pub quarantines: std::collections::BTreeMap<String, crate::QuarantineView>,
    /// Keys under the prefix that no one holds but a dispatcher assigned (key ->
    /// assignment): tasks waiting for their assignee to claim them.
    pub unclaimed: std::collections::BTreeMap<String, crate::AssignmentInfo>,
    /// More unclaimed keys match: ask again with `start_after` = the last of them.
    pub unclaimed_truncated: bool,
    /// Keys under the prefix that `claim-next` could grant to anyone: not held, not
    /// quarantined, not finished, assigned to no one (tasks on the board).
    pub open: Vec<String>,
    /// More open keys match: ask again with `start_after` = the last of them.
    pub open_truncated: bool,
    /// Keys under the prefix held by permits (key -> every holder); `leases` does not list
    /// them. Left out of JSON when there are none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub permits: std::collections::BTreeMap<String, KeyHolders>,
    /// The endpoint (`host:port`) of the node that answered (not in the CLI's JSON).
    #[serde(skip)]
    pub answered_by: String,
}

/// The answer to a token check (Chubby's `CheckSequencer`), always linearizable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenCheck {
    /// The token is the key's current one.
    pub current: bool,
    /// The key's current lease; `None` when the key is free. When permits hold the key:
    /// the token's own lease if it is current, else the first holder's.
    pub lease: Option<LeaseInfo>,
    /// Revision the answer reflects (of the last applied write).
    pub revision: u64,
    /// When permits hold the key, how many (the token, if current, holds one of them); 0
    /// (left out of JSON) when the key is held exclusively or free.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub permits: u32,
    /// The key is held shared (`permits` is then the shared holders' limit); the token, if
    /// current, is one shared holder's (left out of JSON when false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
}

/// One cluster member as a node's configuration lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    /// Raft node id.
    pub id: u64,
    /// The member's gRPC address, `host:port`.
    pub addr: String,
    /// False for a learner.
    pub voter: bool,
}

/// The cluster's members as the answering node lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Membership {
    /// The leader as that node knows it.
    pub leader_id: Option<u64>,
    pub members: Vec<Member>,
}

/// A node's answer to `Client::snapshot_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotTaken {
    pub endpoint: String,
    pub node_id: u64,
    /// The last log index the node's snapshot covers.
    pub snapshot_index: u64,
    pub snapshot_bytes: u64,
}

/// One node's view of itself and of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClusterStatus {
    /// The endpoint (`host:port`) the client asked: says which node this status is about.
    pub endpoint: String,
    /// The answering node's Raft id.
    pub node_id: u64,
    /// The cluster's name.
    pub cluster_name: String,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    /// The leader's id as this node knows it; `None` when it knows no leader.
    pub leader_id: Option<u64>,
    /// The leader's address as this node knows it.
    pub leader_addr: Option<String>,
    /// The node's current Raft term.
    pub term: u64,
    /// Index of the last entry in the node's log.
    pub last_log_index: u64,
    /// Index of the last entry the node applied to its state machine.
    pub applied_index: u64,
    /// Members of the cluster configuration the node has.
    pub members: Vec<Member>,
    /// Leases held, as this node's state machine has them.
    pub leases: u64,
}

/// The instant until which a client may act on a lease it was granted: `send_time + ttl ×
/// (1 − drift_margin)` on the client's own monotonic clock.
///
/// The cluster counts the lease down from the instant a node applied the grant, which comes
/// after the client sent the request. So a countdown that starts at `send_time` ends no later
/// than any node's, as long as the clocks tick at the same rate; `drift_margin` absorbs rates
/// that differ by less than that fraction.
pub fn safe_deadline(send_time: Instant, ttl: Duration, drift_margin: f64) -> Instant {
    debug_assert!((0.0..1.0).contains(&drift_margin));
    send_time + ttl.mul_f64(1.0 - drift_margin)
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

pub(crate) fn as_millis<S: Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> LeaseInfo {
        LeaseInfo {
            key: "tasks/evidence-42".into(),
            holder_name: "claude@host-a".into(),
            holder_client_id: "0123456789abcdef0123456789abcdef".into(),
            token: 1234,
            ttl: Duration::from_secs(30),
            held_since_unix_ms: 1_700_000_000_000,
            renewed_at_unix_ms: 1_700_000_010_000,
            remaining: Duration::from_millis(19_500),
            basis: 1240,
        }
    }

    #[test]
    fn safe_deadline_gives_away_the_drift_margin_of_the_ttl() {
        let send = Instant::now();
        let deadline = safe_deadline(send, Duration::from_secs(30), 0.05);
        assert_eq!(deadline - send, Duration::from_millis(28_500));
        let deadline = safe_deadline(send, Duration::from_secs(10), 0.0);
        assert_eq!(deadline - send, Duration::from_secs(10));
    }

    #[test]
    fn safe_deadline_never_exceeds_send_time_plus_ttl() {
        let send = Instant::now();
        for ttl_ms in [1, 999, 1_000, 30_000, 3_600_000] {
            for margin in [0.0, 0.01, 0.05, 0.5, 0.99] {
                let ttl = Duration::from_millis(ttl_ms);
                assert!(safe_deadline(send, ttl, margin) <= send + ttl);
            }
        }
    }

    #[test]
    fn lease_serializes_with_stable_snake_case_fields_and_millis() {
        let json = serde_json::to_value(lease()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "key": "tasks/evidence-42",
                "holder_name": "claude@host-a",
                "holder_client_id": "0123456789abcdef0123456789abcdef",
                "token": 1234,
                "ttl_ms": 30000,
                "held_since_unix_ms": 1_700_000_000_000u64,
                "renewed_at_unix_ms": 1_700_000_010_000u64,
                "remaining_ms": 19500,
                "basis": 1240
            })
        );
    }

    #[test]
    fn probe_of_a_free_key_serializes_lease_as_null() {
        let json = serde_json::to_value(Probe {
            permits: None,
            lease: None,
            revision: 7,
            line: None,
        })
        .unwrap();
        assert_eq!(json, serde_json::json!({"lease": null, "revision": 7}));
    }
}

/// The permissions policy the cluster enforces, with its audit trail (`baton access show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessView {
    /// Bumped by every change; 0: never set.
    pub version: u64,
    /// The policy in force, as TOML; `None`: no policy, every authenticated principal may do
    /// everything.
    pub policy: Option<String>,
    /// The latest changes, oldest first.
    pub audit: Vec<AccessChange>,
    /// The revision of the change just made, or the answering node's applied revision.
    pub revision: u64,
    /// The cluster has no policy yet and `policy` is the answering node's own
    /// `--access-policy`, which it enforces until one is set.
    pub bootstrap: bool,
}

/// One change of the permissions policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessChange {
    pub version: u64,
    pub revision: u64,
    /// The proposing leader's wall clock, ms since the Unix epoch (informational).
    pub at_unix_ms: u64,
    /// Who made it: a principal, a node, or `anonymous`.
    pub by: String,
    /// What it set: a summary, or that it cleared the policy.
    pub what: String,
}

/// The answer to [`crate::Client::revoke_with`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Revoked {
    /// The lease that was revoked; `None` when the key was already free.
    pub revoked: Option<LeaseInfo>,
    /// The revision of the revoke.
    pub revision: u64,
    /// How long the key stays unclaimable: the revoked lease's TTL for a revoke that holds
    /// the key back (the default), zero with `now` or for a free key.
    #[serde(rename = "claimable_in_ms", serialize_with = "crate::types::as_millis")]
    pub claimable_in: std::time::Duration,
}

/// A key's line, as a probe or a board shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyLine {
    /// How many wait.
    pub waiters: u64,
    /// The first of them (at most 16), oldest first: the head is granted the key next.
    pub first: Vec<WaiterInfo>,
}

/// One claimant waiting in a key's line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaiterInfo {
    pub holder_name: String,
    pub holder_client_id: String,
    /// The revision that put it in line.
    pub joined_revision: u64,
    /// The leader's wall clock then (informational).
    pub joined_unix_ms: u64,
    /// The TTL of its place, and of the lease it will be granted.
    #[serde(rename = "ttl_ms", serialize_with = "crate::types::as_millis")]
    pub ttl: Duration,
    /// How long it has waited, by the answering node's wall clock (informational).
    #[serde(rename = "waited_ms", serialize_with = "crate::types::as_millis")]
    pub waited: Duration,
}
