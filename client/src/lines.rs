//! Waiting in line, in the cluster: [`crate::Client::wait_in_line`] puts the caller's
//! session in a key's line; when the key is freed (released, expired, or the end of a
//! revoke's hold or a quarantine) the oldest waiter is granted it in the entry that freed
//! it, so a hand-on is one write, not a release and a race. Needs every member on data
//! format 11.

use crate::sets::BlockedKey;
use crate::types::Grant;
pub use crate::types::{KeyLine, WaiterInfo};

/// Claimants that may wait in one key's line (the cluster refuses one more, `line_full`).
pub use baton_proto::limits::WAITERS_PER_KEY_MAX;

/// The answer to [`crate::Client::wait_once`] and [`crate::Client::wait_in_line`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineOutcome {
    /// The caller holds the key: granted at once, or from the line.
    Granted(Grant),
    /// The caller waits in the key's line (after `wait_in_line`'s timeout: it waited, and
    /// left the line).
    InLine(InLine),
}

/// Where the caller stands in a key's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InLine {
    pub key: String,
    /// 1 for the head of the line (granted the key next).
    pub position: u64,
    /// How many wait, the caller included.
    pub waiters: u64,
    /// The revision that put the caller in line.
    pub joined_revision: u64,
    /// What the line waits for: the key's holder, or its quarantine.
    pub blocked: BlockedKey,
    /// Revision at which the answer was decided.
    pub revision: u64,
}
