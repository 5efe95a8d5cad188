//! Waiting in line, in the cluster: [`crate::Client::wait_in_line`] puts the caller's
//! session in a key's line; when the key is freed (released, expired, or the end of a
//! revoke's hold or a quarantine) the oldest waiter is granted it in the entry that freed
//! it, so a hand-on is one write, not a release and a race. Needs every member on data
//! format 11.

use std::time::Duration;

use baton_proto::v1 as pb;

use crate::error::Error;
use crate::sets::BlockedKey;
use crate::types::Grant;

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

/// A key's line, as a probe or a board shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyLine {
    /// How many wait.
    pub waiters: u64,
    /// The first of them (at most 16), oldest first: the head is granted the key next.
    pub first: Vec<WaiterInfo>,
}

/// One claimant waiting in a key's line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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

pub(crate) fn key_line(line: pb::KeyLine) -> Result<KeyLine, Error> {
    let first = line
        .first
        .into_iter()
        .map(|w| {
            let holder = w
                .holder
                .ok_or_else(|| Error::Protocol("a waiter without a holder".into()))?;
            Ok(WaiterInfo {
                holder_name: holder.name,
                holder_client_id: holder.client_id,
                joined_revision: w.joined_revision,
                joined_unix_ms: w.joined_unix_ms,
                ttl: Duration::from_millis(w.ttl_ms),
                waited: Duration::from_millis(w.waited_ms),
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(KeyLine {
        waiters: line.waiters,
        first,
    })
}

pub(crate) fn line_outcome(
    key: &str,
    response: pb::WaitResponse,
    clock: crate::convert::GrantClock,
) -> Result<LineOutcome, Error> {
    use pb::wait_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(granted)) => Ok(LineOutcome::Granted(crate::convert::grant_of(
            granted,
            response.revision,
            clock,
            "wait granted",
        )?)),
        Some(Outcome::InLine(place)) => {
            let blocked = place
                .blocked
                .ok_or_else(|| Error::Protocol("in line, waiting for nothing".into()))?;
            Ok(LineOutcome::InLine(InLine {
                key: key.to_owned(),
                position: place.position,
                waiters: place.waiters,
                joined_revision: place.joined_revision,
                blocked: crate::convert::blocked_key(blocked)?,
                revision: response.revision,
            }))
        }
        None => Err(Error::Protocol("wait reply without an outcome".into())),
    }
}
