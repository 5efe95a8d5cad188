//! All-or-none claims: [`crate::Client::claim_set`] grants every key of a set to one holder
//! in one log entry, or none of them, naming every key that blocked. Each key granted gets
//! the entry's revision as its token. Needs every member on data format 10.

use std::time::Duration;

use crate::types::{AssignmentInfo, Grant, LeaseInfo};

/// Keys one claim of a set may name (the cluster refuses more as bad input).
pub use baton_proto::limits::CLAIM_SET_KEYS_MAX;

/// The answer to [`crate::Client::claim_set`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// The caller holds every key, one grant per key in the order asked.
    Granted(Vec<Grant>),
    /// Nothing was granted: every key that blocked, in the order asked.
    Blocked(Vec<BlockedKey>),
}

/// One key that kept a set from being granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockedKey {
    /// Someone else holds it.
    Held {
        lease: LeaseInfo,
        /// The holder has the caller's name but is another process (another client id).
        same_name_other_process: bool,
        assignment: Option<AssignmentInfo>,
    },
    /// It is quarantined (the facts a claim of it alone is refused with).
    Quarantined {
        key: String,
        /// The revision of the expiry (or revoke) that started it.
        revision: u64,
        delay: Duration,
        /// The answering node's estimate of the time left.
        remaining: Duration,
        /// Started by a revoke holding the key back for the revoked holder's window.
        revoked: bool,
    },
}

impl BlockedKey {
    pub fn key(&self) -> &str {
        match self {
            BlockedKey::Held { lease, .. } => &lease.key,
            BlockedKey::Quarantined { key, .. } => key,
        }
    }
}
