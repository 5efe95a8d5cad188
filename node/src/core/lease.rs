//! A live lease: who holds a key, with which fencing token, counted from which entry.

use serde::{Deserialize, Serialize};

use super::ids::{FencingToken, Holder};

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
