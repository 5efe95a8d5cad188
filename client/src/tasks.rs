//! The task board: a dispatcher posts tasks ([`crate::Client::post`]), agents take the next
//! claimable one under a prefix ([`crate::Client::claim_next`]), each grant single-winner in
//! one log entry. Needs every member on data format 9.

use serde::Serialize;

use crate::record::Record;
use crate::types::Grant;

/// The answer to [`crate::Client::post`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Posted {
    pub key: String,
    /// The record after the post.
    pub record: Record,
    /// The key had no case file before: a new task. `false`: an existing task's record was
    /// patched (`update`).
    pub created: bool,
    pub revision: u64,
}

/// What [`crate::Client::claim_next`] looks for besides a free key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NextFilter {
    /// Also take keys assigned to someone else (by default those are passed by).
    pub any: bool,
    /// Record fields the key must have, with these values (`role=reviewer`).
    pub wheres: Vec<(String, String)>,
}

/// The answer to [`crate::Client::claim_next`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextOutcome {
    /// The caller holds `grant.lease.key`.
    Granted(Box<Grant>),
    /// No key under the prefix was claimable: nothing changed. Why each was passed by.
    Nothing(Unclaimable),
}

/// Why `claim-next` passed each key it looked at by: each key counted once, under the first
/// reason that applies, in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Unclaimable {
    /// Keys with a case file looked at, at most 10,000 per request: unfinished ones only on
    /// a cluster all on data format 14, which passes finished ones by unseen.
    pub scanned: u64,
    pub held: u64,
    pub quarantined: u64,
    /// Status done, cancelled or closed: 0 on a cluster all on data format 14.
    pub finished: u64,
    /// A `where` field missing or different.
    pub unmatched: u64,
    /// Assigned to someone other than the caller's holder name.
    pub assigned_elsewhere: u64,
    /// The scan stopped at its limit with keys left under the prefix: narrow the prefix.
    pub truncated: bool,
}
