//! Refusals: a well-formed request that is not allowed now, as a typed value with its facts.
//!
//! "When you lose, say so": a refusal names who holds the key, with which token, since when,
//! which offer is pending, or which session the lease belongs to, as fields, so that every
//! edge (gRPC details, the CLI's tables and JSON, an MCP server, a Python client) shows the
//! same facts and nobody parses text. `Display` is the line for people, built from the
//! fields. The gRPC edge maps each to `FAILED_PRECONDITION` in one place
//! (`server::convert::refusal_status`).

use serde::{Deserialize, Serialize};

use super::ids::FencingToken;
use super::lease::Lease;
use super::permits::Sharing;

/// Why a request was refused, with the facts a caller needs to act on it. Nothing changed.
/// Leases are boxed: a refusal travels in every `Outcome`, which stays small.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The presented token is not the key's current one: it was never granted, or its stint
    /// ended. `current` is the lease now on the key, if any.
    StaleToken {
        key: String,
        token: FencingToken,
        current: Option<Box<Lease>>,
    },
    /// The token is current, but the request comes from another session than the lease
    /// holder's: a token is a fencing token, public, not a password.
    WrongSession {
        lease: Box<Lease>,
        client_id: String,
    },
    /// A write to the record while an offer of the key is pending: the record is frozen so
    /// that the note describes what the taker gets.
    Frozen {
        key: String,
        offer_to: String,
        offer_revision: u64,
    },
    /// An offer while another is pending.
    OfferPending {
        key: String,
        offer_to: String,
        offer_revision: u64,
    },
    /// Accept, decline or cancel with no offer pending.
    NoOffer { key: String },
    /// Accept or decline by someone the offer is not addressed to.
    NotAddressee {
        key: String,
        offer_to: String,
        name: String,
    },
    /// An offer to the holder itself.
    OfferToHolder { key: String, name: String },
    /// A claim of a key in quarantine after its holder's lease expired. The edge adds when
    /// the quarantine ends, by its own countdown.
    Quarantined {
        key: String,
        revision: u64,
        delay_ms: u64,
    },
    /// A new key while the cluster holds `keys_max` keys.
    KeyLimit {
        key: String,
        keys: u64,
        keys_max: u64,
    },
    /// A post of a key that already has a case file, without `update`: its status, and its
    /// lease if it is held (data format 9).
    Exists {
        key: String,
        status: String,
        lease: Option<Box<Lease>>,
    },
    /// A claimant asked to wait in a key's line that is full: `waiters` already wait on it,
    /// its limit `waiters_max` (`WAITERS_PER_KEY_MAX`), or, with `whole_cluster`, that many
    /// wait on all keys together (`WAITERS_MAX`). Data format 11.
    LineFull {
        key: String,
        waiters: u64,
        waiters_max: u64,
        whole_cluster: bool,
    },
    /// A claim of a permit while the key's holders hold it with another number of permits,
    /// or shared (or a shared claim while permits hold it): how a key is shared is fixed by
    /// its first holder while any holds. `held` is the key's, `asked` the claim's;
    /// `holders` hold it now. Data format 12 (shared: 13).
    PermitsMismatch {
        key: String,
        held: Sharing,
        asked: Sharing,
        holders: Vec<Lease>,
    },
    /// A write only an exclusive holder may make (the record, an offer, a final status) by
    /// the holder of one of a key's permits, or a shared holder (`token`, holding it as
    /// `sharing` says). Data format 12.
    NotExclusive {
        key: String,
        token: FencingToken,
        sharing: Sharing,
    },
    /// A permit claim while `holders` permits are held across the cluster, its limit
    /// `holders_max` (`PERMIT_HOLDERS_MAX`). Data format 12.
    HolderLimit {
        key: String,
        holders: u64,
        holders_max: u64,
    },
}

impl Refusal {
    /// The reason as a stable word, for JSON and the gRPC details.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::StaleToken { .. } => "stale_token",
            Refusal::WrongSession { .. } => "wrong_session",
            Refusal::Frozen { .. } => "frozen",
            Refusal::OfferPending { .. } => "offer_pending",
            Refusal::NoOffer { .. } => "no_offer",
            Refusal::NotAddressee { .. } => "not_addressee",
            Refusal::OfferToHolder { .. } => "offer_to_holder",
            Refusal::Quarantined { .. } => "quarantined",
            Refusal::KeyLimit { .. } => "key_limit",
            Refusal::Exists { .. } => "exists",
            Refusal::LineFull { .. } => "line_full",
            Refusal::PermitsMismatch { .. } => "permits_mismatch",
            Refusal::NotExclusive { .. } => "not_exclusive",
            Refusal::HolderLimit { .. } => "holder_limit",
        }
    }

    /// The key the refusal is about.
    pub fn key(&self) -> &str {
        match self {
            Refusal::WrongSession { lease, .. } => &lease.key,
            Refusal::StaleToken { key, .. }
            | Refusal::Frozen { key, .. }
            | Refusal::OfferPending { key, .. }
            | Refusal::NoOffer { key }
            | Refusal::NotAddressee { key, .. }
            | Refusal::OfferToHolder { key, .. }
            | Refusal::Quarantined { key, .. }
            | Refusal::KeyLimit { key, .. }
            | Refusal::Exists { key, .. }
            | Refusal::LineFull { key, .. }
            | Refusal::PermitsMismatch { key, .. }
            | Refusal::NotExclusive { key, .. }
            | Refusal::HolderLimit { key, .. } => key,
        }
    }

    /// The lease on the key, where the refusal knows it.
    pub fn lease(&self) -> Option<&Lease> {
        match self {
            Refusal::StaleToken { current, .. } => current.as_deref(),
            Refusal::WrongSession { lease, .. } => Some(lease),
            Refusal::Exists { lease, .. } => lease.as_deref(),
            Refusal::PermitsMismatch { holders, .. } => holders.first(),
            _ => None,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::StaleToken {
                key,
                token,
                current: Some(l),
            } => write!(
                f,
                "token {token} is not current for {key}: held by {} (client {}) with token {}",
                l.holder.name, l.holder.client_id, l.token
            ),
            Refusal::StaleToken {
                key,
                token,
                current: None,
            } => write!(f, "token {token} is not current for {key}: the key is free"),
            Refusal::WrongSession { lease, client_id } => write!(
                f,
                "{} is held by {} (client {}); this request comes from client {client_id}: \
                 only the holder's session may act with its token (set BATON_CLIENT_ID to \
                 the holder's client id in the holder's own processes)",
                lease.key, lease.holder.name, lease.holder.client_id
            ),
            Refusal::Frozen { key, offer_to, .. } => write!(
                f,
                "{key} is frozen by a pending offer to {offer_to}: cancel the offer or wait \
                 for it to end"
            ),
            Refusal::OfferPending { key, offer_to, .. } => write!(
                f,
                "an offer of {key} to {offer_to} is already pending: cancel it first"
            ),
            Refusal::NoOffer { key } => write!(f, "{key} has no pending offer"),
            Refusal::NotAddressee {
                key,
                offer_to,
                name,
            } => write!(
                f,
                "the offer of {key} is addressed to {offer_to}, not {name}"
            ),
            Refusal::OfferToHolder { key, name } => write!(f, "{key} is already held by {name}"),
            Refusal::Quarantined {
                key,
                revision,
                delay_ms,
            } => write!(
                f,
                "{key} is quarantined for {} s after its holder's lease expired (revision \
                 {revision}): it cannot be claimed until then",
                delay_ms / 1000
            ),
            Refusal::KeyLimit {
                key,
                keys,
                keys_max,
            } => write!(
                f,
                "the cluster holds {keys} keys, its limit ({keys_max}): {key} cannot be added \
                 (reuse or revoke keys you no longer need)"
            ),
            Refusal::Exists { key, status, lease } => {
                write!(f, "{key} is already on the board")?;
                if !status.is_empty() {
                    write!(f, " (status {status})")?;
                }
                if let Some(l) = lease {
                    write!(f, ", held by {} with token {}", l.holder.name, l.token)?;
                }
                write!(f, ": post --update changes its record")
            }
            Refusal::LineFull {
                key,
                waiters,
                waiters_max,
                whole_cluster: false,
            } => write!(
                f,
                "{waiters} claimants wait in the line of {key}, its limit ({waiters_max}): \
                 wait by polling (claim --wait --poll) or try later"
            ),
            Refusal::LineFull {
                key,
                waiters,
                waiters_max,
                whole_cluster: true,
            } => write!(
                f,
                "{waiters} claimants wait in lines across the cluster, its limit \
                 ({waiters_max}): {key} cannot take another; wait by polling (claim --wait \
                 --poll) or try later"
            ),
            Refusal::PermitsMismatch {
                key,
                held,
                asked,
                holders,
            } => {
                let held_as = match held {
                    Sharing::Permits(n) => format!("has {n} permits"),
                    Sharing::Shared => "is shared".to_owned(),
                };
                let asked_as = match asked {
                    Sharing::Permits(n) => format!("not {n} permits"),
                    Sharing::Shared => "it cannot be shared".to_owned(),
                };
                write!(
                    f,
                    "{key} {held_as} while its {} holders hold it, {asked_as}: claim it \
                     with {}",
                    holders.len(),
                    held.option()
                )
            }
            Refusal::NotExclusive {
                key,
                token,
                sharing,
            } => {
                let holds = match sharing {
                    Sharing::Permits(n) => format!("holds one of {n} permits of {key}"),
                    Sharing::Shared => format!("holds {key} shared"),
                };
                write!(
                    f,
                    "token {token} {holds}: only an exclusive holder (a claim without \
                     --permits or --shared) may write its record or hand it off"
                )
            }
            Refusal::HolderLimit {
                key,
                holders,
                holders_max,
            } => write!(
                f,
                "{holders} permits are held across the cluster, its limit ({holders_max}): \
                 {key} cannot take another holder; release permits no longer needed"
            ),
        }
    }
}
