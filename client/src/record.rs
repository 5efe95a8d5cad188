//! A key's record (its case file) and the changes to it.
//!
//! Anyone may read a record; only the key's current fencing token may write it (a *fenced
//! write*), so at any moment exactly one agent is entitled to revise the account of the
//! work. A write with a stale token, or while a handoff offer freezes the record, is refused
//! with [`crate::Error::Refused`], naming who holds the key.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::handoff::{HandoffNote, OfferView};
use crate::types::{AssignmentInfo, LeaseInfo};

/// Status words every agent understands; any other word of `a-z`, `0-9`, `_` and `-` (at
/// most [`STATUS_BYTES_MAX`] bytes) is accepted too.
pub const WELL_KNOWN_STATUSES: [&str; 5] = ["open", "in_progress", "blocked", "verified", "done"];

/// Longest status word the cluster accepts.
pub use baton_proto::limits::STATUS_BYTES_MAX;

/// A key's case file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Record {
    /// `open`, `in_progress`, `blocked`, `verified`, `done` or a word of the holder's own;
    /// empty until first set.
    pub status: String,
    /// A paragraph for people: where the work stands.
    pub summary: String,
    /// Named strings the holder keeps on the record (a PR number, a ticket, a count).
    pub fields: BTreeMap<String, String>,
    /// Who a dispatcher wanted on the key, if anyone. Routing metadata, not ownership.
    pub assigned_to: Option<AssignmentInfo>,
    /// A handoff waiting for its addressee; while it waits the record takes no writes.
    pub pending_offer: Option<OfferView>,
    /// The note of the latest handoff: accepted, or left by an offer whose giver's lease
    /// ended, so that nothing written is lost.
    pub last_note: Option<HandoffNote>,
    /// Revision of the latest change to status, summary or fields (`0`: never changed).
    pub updated_revision: u64,
}

/// A change to a record: what is `None` or empty is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecordPatch {
    /// The new status word.
    pub status: Option<String>,
    /// The new summary (`Some("")` clears it).
    pub summary: Option<String>,
    /// Fields to set, replacing values already there.
    pub set_fields: BTreeMap<String, String>,
    /// Fields to remove; removing a field that is not there is no error.
    pub remove_fields: Vec<String>,
}

impl RecordPatch {
    /// A patch that sets the status.
    pub fn status(status: impl Into<String>) -> RecordPatch {
        RecordPatch {
            status: Some(status.into()),
            ..RecordPatch::default()
        }
    }

    /// Also sets the summary.
    pub fn with_summary(mut self, summary: impl Into<String>) -> RecordPatch {
        self.summary = Some(summary.into());
        self
    }

    /// Also sets the field `name` to `value`.
    pub fn with_field(mut self, name: impl Into<String>, value: impl Into<String>) -> RecordPatch {
        self.set_fields.insert(name.into(), value.into());
        self
    }

    /// Also removes the field `name`.
    pub fn without_field(mut self, name: impl Into<String>) -> RecordPatch {
        self.remove_fields.push(name.into());
        self
    }

    /// The patch changes nothing (the cluster refuses such an update as bad input).
    pub fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.summary.is_none()
            && self.set_fields.is_empty()
            && self.remove_fields.is_empty()
    }
}

/// The answer to an assignment or its clearing: the record after it, and who holds the key
/// (read right after it applied). An assignment reserves nothing: a holder keeps the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assigned {
    pub record: Record,
    /// The key's lease; `None` when no one holds it.
    pub lease: Option<LeaseInfo>,
    /// Revision of the assignment.
    pub revision: u64,
}

/// A key's record together with its lease, as one read saw them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordView {
    /// The key read.
    pub key: String,
    /// The record (all empty for a key nobody ever wrote or assigned).
    pub record: Record,
    /// The key's lease; `None` when the key is free.
    pub lease: Option<LeaseInfo>,
    /// Revision the answer reflects (of the last applied write).
    pub revision: u64,
    /// Set while the key is quarantined after its holder's lease expired: claims are refused
    /// until it ends, although no one holds the key.
    pub quarantine: Option<QuarantineView>,
    /// Who waits in the key's line; `None` (left out of JSON) when no one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<crate::types::KeyLine>,
    /// Set (else left out of JSON) when permits hold the key: every holder; `lease` is then
    /// the first of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<crate::types::KeyHolders>,
}

/// A key's quarantine (Chubby's lock-delay) after an involuntary expiry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuarantineView {
    /// The expiry that started it.
    pub revision: u64,
    /// How long it lasts in all.
    #[serde(rename = "delay_ms", serialize_with = "crate::types::as_millis")]
    pub delay: std::time::Duration,
    /// The answering node's estimate of the time left.
    #[serde(rename = "remaining_ms", serialize_with = "crate::types::as_millis")]
    pub remaining: std::time::Duration,
    /// Started by a revoke that holds the key back for the revoked holder's window ("revoked,
    /// claimable in ..."), not by an expiry under a quarantine rule.
    pub revoked: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_builders_fill_only_what_they_name() {
        let patch = RecordPatch::status("done")
            .with_summary("fixed in 4f2a")
            .with_field("pr", "42")
            .without_field("tmp");
        assert_eq!(patch.status.as_deref(), Some("done"));
        assert_eq!(patch.summary.as_deref(), Some("fixed in 4f2a"));
        assert_eq!(patch.set_fields.get("pr").map(String::as_str), Some("42"));
        assert_eq!(patch.remove_fields, ["tmp"]);
        assert!(!patch.is_empty());
        assert!(RecordPatch::default().is_empty());
    }

    #[test]
    fn well_known_statuses_fit_the_status_limit() {
        for status in WELL_KNOWN_STATUSES {
            assert!(status.len() <= STATUS_BYTES_MAX);
        }
    }
}
