//! The client's error type, typed again from the node's gRPC statuses.
//!
//! Refusals of the lease operations (the key is held, the token is stale) are not errors:
//! they are outcomes ([`crate::ClaimOutcome::Held`], [`crate::RenewOutcome::Lost`], ...).
//! The record and handoff operations (update, offer, accept, decline, cancel), and any
//! write from another session than the lease holder's, are refused with [`Error::Refused`]
//! instead, carrying a [`Refusal`] with its facts (who holds the key, with which token, the
//! pending offer, ...) read from the status details, never parsed from text. Any other
//! [`Error`] means the request did not get an answer.

use serde::Serialize;
use tonic::Code;

use crate::types::{AssignmentInfo, LeaseInfo};

/// Why the cluster refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// The token is not the key's current one; [`Refusal::lease`] is the current lease.
    StaleToken,
    /// The token is current but the request came from another session than the holder's
    /// ([`Refusal::client_id`]; the holder's is in [`Refusal::lease`]).
    WrongSession,
    /// The record is frozen by a pending offer ([`Refusal::offer_to`]).
    Frozen,
    /// An offer is already pending ([`Refusal::offer_to`]).
    OfferPending,
    /// No offer is pending.
    NoOffer,
    /// The offer is addressed to [`Refusal::offer_to`], not [`Refusal::name`].
    NotAddressee,
    /// An offer to the holder itself.
    OfferToHolder,
    /// The key is quarantined after an expiry ([`Refusal::quarantine_remaining`]).
    Quarantined,
    /// The cluster holds its limit of keys ([`Refusal::keys_max`]).
    KeyLimit,
    /// A command of a newer data format ([`Refusal::data_format`]) while some members
    /// ([`Refusal::nodes`]) have not told the leader they read it: a rolling upgrade is not
    /// finished.
    FormatPending,
    /// A post of a key that already has a case file, without `update` ([`Refusal::status`];
    /// its holder, if held, in [`Refusal::lease`]).
    Exists,
    /// A wait in a key's line that is full ([`Refusal::waiters`], [`Refusal::waiters_max`];
    /// [`Refusal::whole_cluster`]: all lines together are). Wait by polling instead.
    LineFull,
    /// A permit claim of another number of permits than the key's holders hold it with, or
    /// a shared claim of a key held by permits, or a permit claim of a key held shared
    /// ([`Refusal::permits`]: the key's N, holders and whether they share it;
    /// [`Refusal::asked_permits`] / [`Refusal::asked_shared`]: the claim's).
    PermitsMismatch,
    /// A write only an exclusive holder may make (the record, an offer, a final status) by
    /// the holder of a permit ([`Refusal::token`], [`Refusal::permits`]).
    NotExclusive,
    /// A permit claim while the cluster holds its limit of permits
    /// ([`Refusal::permit_holders`], [`Refusal::permit_holders_max`]).
    HolderLimit,
    /// A reason this client does not know (a newer cluster), or none given (a refusal of
    /// the cluster's own, e.g. a setting). Still a refusal: nothing changed.
    Other(String),
}

impl RefusalReason {
    pub(crate) fn from_wire(reason: &str) -> RefusalReason {
        match reason {
            "stale_token" => RefusalReason::StaleToken,
            "wrong_session" => RefusalReason::WrongSession,
            "frozen" => RefusalReason::Frozen,
            "offer_pending" => RefusalReason::OfferPending,
            "no_offer" => RefusalReason::NoOffer,
            "not_addressee" => RefusalReason::NotAddressee,
            "offer_to_holder" => RefusalReason::OfferToHolder,
            "quarantined" => RefusalReason::Quarantined,
            "key_limit" => RefusalReason::KeyLimit,
            "format_pending" => RefusalReason::FormatPending,
            "exists" => RefusalReason::Exists,
            "line_full" => RefusalReason::LineFull,
            "permits_mismatch" => RefusalReason::PermitsMismatch,
            "not_exclusive" => RefusalReason::NotExclusive,
            "holder_limit" => RefusalReason::HolderLimit,
            other => RefusalReason::Other(other.to_owned()),
        }
    }

    /// The reason as the cluster names it (`stale_token`, `wrong_session`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            RefusalReason::StaleToken => "stale_token",
            RefusalReason::WrongSession => "wrong_session",
            RefusalReason::Frozen => "frozen",
            RefusalReason::OfferPending => "offer_pending",
            RefusalReason::NoOffer => "no_offer",
            RefusalReason::NotAddressee => "not_addressee",
            RefusalReason::OfferToHolder => "offer_to_holder",
            RefusalReason::Quarantined => "quarantined",
            RefusalReason::KeyLimit => "key_limit",
            RefusalReason::FormatPending => "format_pending",
            RefusalReason::Exists => "exists",
            RefusalReason::LineFull => "line_full",
            RefusalReason::PermitsMismatch => "permits_mismatch",
            RefusalReason::NotExclusive => "not_exclusive",
            RefusalReason::HolderLimit => "holder_limit",
            RefusalReason::Other(other) => other,
        }
    }

    /// The fields a refusal of this reason carries in JSON besides `reason` and `message`,
    /// by their JSON names (the table "Fields by reason" in docs/cli-json.md). Each is there
    /// even when it is zero, for it is still a fact of the reason (`lease` null: the key is
    /// free; `quarantine_remaining_ms` 0: no time left; `whole_cluster` false: the key's own
    /// line). `None` for a reason this client does not know: it cannot tell which apply, so
    /// the JSON carries every fact that is not empty.
    pub fn fields(&self) -> Option<&'static [&'static str]> {
        use RefusalReason as R;
        Some(match self {
            R::StaleToken => &["key", "lease", "assignment", "token"],
            R::WrongSession => &["key", "lease", "assignment", "token", "client_id"],
            R::Frozen | R::OfferPending => &["key", "assignment", "offer_to", "offer_revision"],
            R::NoOffer => &["key", "assignment"],
            R::NotAddressee => &["key", "assignment", "offer_to", "name"],
            R::OfferToHolder => &["key", "assignment", "name"],
            R::Quarantined => &[
                "key",
                "assignment",
                "quarantine_revision",
                "quarantine_delay_ms",
                "quarantine_remaining_ms",
                "quarantine_revoked",
            ],
            R::KeyLimit => &["key", "assignment", "keys", "keys_max"],
            // About a command, not a key: the node names no key (nor its assignment).
            R::FormatPending => &["data_format", "nodes"],
            R::Exists => &["key", "lease", "assignment", "status"],
            R::LineFull => &[
                "key",
                "assignment",
                "waiters",
                "waiters_max",
                "whole_cluster",
            ],
            R::PermitsMismatch => &[
                "key",
                "lease",
                "assignment",
                "permits",
                "asked_permits",
                "asked_shared",
            ],
            R::NotExclusive => &["key", "assignment", "token", "permits"],
            R::HolderLimit => &["key", "assignment", "permit_holders", "permit_holders_max"],
            R::Other(_) => return None,
        })
    }
}

impl Serialize for RefusalReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A refusal's facts, as the cluster sent them in the status details (`baton.v1.Refusal`).
/// Fields that do not apply to the reason are empty (`""`, `0`, `None`). As JSON (its
/// `Serialize`) it carries `reason`, `message` and only the fields of its reason
/// ([`RefusalReason::fields`]), so that no empty field reads as a fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    /// The key the request was about.
    pub key: String,
    /// The lease on the key now, when it is held: holder, client id, token, since, and the
    /// answering node's estimate of the time left.
    pub lease: Option<LeaseInfo>,
    /// Who a dispatcher wanted on the key.
    pub assignment: Option<AssignmentInfo>,
    /// The token the request presented.
    pub token: u64,
    /// The session the request came from.
    pub client_id: String,
    /// The addressee of the pending offer.
    pub offer_to: String,
    pub offer_revision: u64,
    /// The holder name the request acted as.
    pub name: String,
    pub quarantine_revision: u64,
    /// The quarantine's length, in ms.
    pub quarantine_delay_ms: u64,
    /// The answering node's estimate of the quarantine's time left, in ms.
    pub quarantine_remaining_ms: u64,
    /// The quarantine was started by a revoke holding the key back for the revoked
    /// holder's window, not by an expiry.
    pub quarantine_revoked: bool,
    /// The keys the cluster holds, and its limit (`key_limit`).
    pub keys: u64,
    pub keys_max: u64,
    /// The data format the refused command needs (`format_pending`).
    pub data_format: u32,
    /// The members not yet known to read it (`format_pending`).
    pub nodes: Vec<u64>,
    /// The record's status (`exists`).
    pub status: String,
    /// How many wait in the key's line (or, with `whole_cluster`, in all lines), and its
    /// limit (`line_full`).
    pub waiters: u64,
    pub waiters_max: u64,
    pub whole_cluster: bool,
    /// The key's permits and holders (`permits_mismatch`; `not_exclusive` gives N alone).
    pub permits: Option<crate::types::KeyHolders>,
    /// The number of permits the refused claim asked for (`permits_mismatch`).
    pub asked_permits: u32,
    /// The refused claim asked to share the key (`permits_mismatch`: the key is held by
    /// permits).
    pub asked_shared: bool,
    /// Permits held across the cluster, and its limit (`holder_limit`).
    pub permit_holders: u64,
    pub permit_holders_max: u64,
    /// The line for people, built by the cluster from the fields.
    pub message: String,
}

impl Refusal {
    /// A refusal known only by its message (reason `Other("")`): what a node that sends no
    /// details answers.
    pub fn other(message: &str) -> Refusal {
        Refusal {
            reason: RefusalReason::Other(String::new()),
            key: String::new(),
            lease: None,
            assignment: None,
            token: 0,
            client_id: String::new(),
            offer_to: String::new(),
            offer_revision: 0,
            name: String::new(),
            quarantine_revision: 0,
            quarantine_delay_ms: 0,
            quarantine_remaining_ms: 0,
            quarantine_revoked: false,
            keys: 0,
            keys_max: 0,
            data_format: 0,
            nodes: Vec::new(),
            status: String::new(),
            waiters: 0,
            waiters_max: 0,
            whole_cluster: false,
            permits: None,
            asked_permits: 0,
            asked_shared: false,
            permit_holders: 0,
            permit_holders_max: 0,
            message: message.to_owned(),
        }
    }
}

/// `reason`, the fields of the reason ([`RefusalReason::fields`]), then `message`; for a
/// reason this client does not know, every fact that is not empty.
impl Serialize for Refusal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = self.reason.fields();
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("reason", &self.reason)?;
        // Each fact: its JSON name, its value, and whether it is empty (which decides only
        // for a reason of no known fields).
        macro_rules! fact {
            ($name:literal, $value:expr, $empty:expr) => {
                let carried = match fields {
                    Some(fields) => fields.contains(&$name),
                    None => !$empty,
                };
                if carried {
                    map.serialize_entry($name, $value)?;
                }
            };
        }
        fact!("key", &self.key, self.key.is_empty());
        fact!("lease", &self.lease, self.lease.is_none());
        fact!("assignment", &self.assignment, self.assignment.is_none());
        fact!("token", &self.token, self.token == 0);
        fact!("client_id", &self.client_id, self.client_id.is_empty());
        fact!("offer_to", &self.offer_to, self.offer_to.is_empty());
        fact!(
            "offer_revision",
            &self.offer_revision,
            self.offer_revision == 0
        );
        fact!("name", &self.name, self.name.is_empty());
        fact!(
            "quarantine_revision",
            &self.quarantine_revision,
            self.quarantine_revision == 0
        );
        fact!(
            "quarantine_delay_ms",
            &self.quarantine_delay_ms,
            self.quarantine_delay_ms == 0
        );
        fact!(
            "quarantine_remaining_ms",
            &self.quarantine_remaining_ms,
            self.quarantine_remaining_ms == 0
        );
        fact!(
            "quarantine_revoked",
            &self.quarantine_revoked,
            !self.quarantine_revoked
        );
        fact!("keys", &self.keys, self.keys == 0);
        fact!("keys_max", &self.keys_max, self.keys_max == 0);
        fact!("data_format", &self.data_format, self.data_format == 0);
        fact!("nodes", &self.nodes, self.nodes.is_empty());
        fact!("status", &self.status, self.status.is_empty());
        fact!("waiters", &self.waiters, self.waiters == 0);
        fact!("waiters_max", &self.waiters_max, self.waiters_max == 0);
        fact!("whole_cluster", &self.whole_cluster, !self.whole_cluster);
        fact!("permits", &self.permits, self.permits.is_none());
        fact!(
            "asked_permits",
            &self.asked_permits,
            self.asked_permits == 0
        );
        fact!("asked_shared", &self.asked_shared, !self.asked_shared);
        fact!(
            "permit_holders",
            &self.permit_holders,
            self.permit_holders == 0
        );
        fact!(
            "permit_holders_max",
            &self.permit_holders_max,
            self.permit_holders_max == 0
        );
        map.serialize_entry("message", &self.message)?;
        map.end()
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Why a request got no answer about the lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The node refused the input (`INVALID_ARGUMENT`); nothing changed. The message says
    /// what to fix. Retrying the same request cannot help, so the client never does.
    #[error("{0}")]
    InvalidArgument(String),

    /// The cluster refused the request as not allowed now (`FAILED_PRECONDITION`): a stale
    /// token, a write from another session than the holder's, a record frozen by a pending
    /// offer, an offer already pending, no offer, or an offer addressed to someone else.
    /// Nothing changed. The [`Refusal`] names the current holder and token, or the
    /// addressee, as fields: stand down, or act on what it says.
    #[error("refused: {0}")]
    Refused(Box<Refusal>),

    /// No node gave an answer before the retry deadline: no leader, no quorum, or no node
    /// reachable. For a mutating request the outcome is unknown; retrying later with a new
    /// request is safe for reads, and for writes the caller should probe first.
    #[error("cluster unavailable: no answer before the retry deadline (last error: {last})")]
    Unavailable {
        /// The last failure seen, naming the node it came from.
        last: String,
    },

    /// The client configuration is unusable (no endpoints, a malformed endpoint, a bad
    /// client id); nothing was sent.
    #[error("invalid client configuration: {0}")]
    Config(String),

    /// A node answered with a reply this client cannot make sense of (a missing required
    /// field): a version mismatch or a node bug, never the caller's fault.
    #[error("malformed reply from the cluster: {0}")]
    Protocol(String),

    /// A watch asked for a revision older than the node's watch window (`OUT_OF_RANGE`,
    /// "compacted"): events between `requested` and `first_available` are gone from it, so
    /// the watch cannot go on without a gap. Re-read the state (the board, or a key's
    /// history) and watch again from the revision that read answered with, plus one.
    /// `0`s when the node's message could not be read.
    #[error(
        "compacted: revision {requested} is older than the node's watch window, which starts \
         at {first_available}; events in between are gone"
    )]
    Compacted {
        /// The revision the watch asked for (the one after the last event it received).
        requested: u64,
        /// The oldest revision the node still has.
        first_available: u64,
    },

    /// The cluster does not know who is asking (`UNAUTHENTICATED`): no client certificate or
    /// token where one is required, or a token that is not (or no longer) listed. Nothing
    /// changed.
    #[error("not authenticated: {0}")]
    Unauthenticated(String),

    /// The cluster knows who is asking and does not allow it (`PERMISSION_DENIED`): acting
    /// as another holder or with another's token. Nothing changed. The message says who you
    /// are and what was refused.
    #[error("permission denied: {0}")]
    PermissionDenied(String),

    /// Any other gRPC status the node answered with.
    #[error("the cluster answered {code:?}: {message}")]
    Other {
        /// The gRPC status code.
        code: Code,
        /// The node's message.
        message: String,
    },
}

impl Error {
    /// [`Error::Compacted`] with the numbers read from the node's message, "compacted:
    /// revision R is older than this node's watch window, which starts at F; ..."; `0`s for
    /// a number it does not find.
    pub(crate) fn compacted(message: &str) -> Error {
        let number_after = |marker: &str| -> u64 {
            message
                .find(marker)
                .map(|at| &message[at + marker.len()..])
                .and_then(|rest| {
                    let digits: &str = rest
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .unwrap_or_default();
                    digits.parse().ok()
                })
                .unwrap_or(0)
        };
        Error::Compacted {
            requested: number_after("revision "),
            first_available: number_after("starts at "),
        }
    }
}
