//! Handoffs: a holder offers its key to one named agent with a status note; the addressee
//! accepts (and gets a new token, the old one dies in the same log entry), declines, or
//! lets the offer lapse; the giver may cancel. While an offer waits, the giver keeps the key
//! and the record is frozen, so the note describes the record the taker will get.
//!
//! The note carries what the essay "holder is not a lock" asks of a handoff: a commit (a
//! fixed point to pull), what is done, what remains, where it is blocked, how to rebuild the
//! working state, the first step, the files touched, and the *volatile facts*: values that
//! may have changed since the note was written, each with a command that measures it again.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::types::{as_millis, Grant, HolderInfo, LeaseInfo};

/// A value the giver measured but the taker must measure again ("needs verification").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolatileFact {
    /// What the value is, e.g. `rows_left`.
    pub name: String,
    /// The value when the note was written; a claim, not a fact.
    #[serde(default)]
    pub claimed_value: String,
    /// A shell command whose (trimmed) standard output is the value now.
    pub check_command: String,
}

/// The status note of a handoff. Every field may be empty; [`HandoffNote::is_empty`] says
/// whether anything was written at all.
///
/// Deserializes from a note file (TOML or JSON with these field names; unknown fields are
/// refused so that a misspelt field is not silently dropped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandoffNote {
    /// The commit the work stands at: a fixed point the taker can pull.
    pub commit: String,
    /// The branch of that commit.
    pub branch: String,
    /// What is done.
    pub done: String,
    /// What remains.
    pub remaining: String,
    /// Where the work is blocked, and on what.
    pub blocked: String,
    /// How to rebuild the working state (commands, services, data).
    pub rebuild: String,
    /// What the taker should do first.
    pub first_step: String,
    /// Files the work changed.
    pub changed_files: Vec<String>,
    /// Uncommitted files in the giver's checkout when it offered: an incident scene the
    /// taker must sort out before tidying anything.
    pub dirty_files: Vec<String>,
    /// Values the taker must measure again before trusting them.
    pub volatile_facts: Vec<VolatileFact>,
}

impl HandoffNote {
    /// Nothing was written in the note.
    pub fn is_empty(&self) -> bool {
        *self == HandoffNote::default()
    }
}

/// A pending handoff offer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OfferView {
    /// The key offered.
    pub key: String,
    /// The holder who offered it.
    pub from: HolderInfo,
    /// The giver's token: it stays current until the offer is accepted.
    pub from_token: u64,
    /// The addressee's holder name: only it may accept or decline.
    pub to: String,
    /// The status note.
    pub note: HandoffNote,
    /// How long the offer waits for its addressee before it lapses.
    #[serde(rename = "offer_ttl_ms", serialize_with = "as_millis")]
    pub offer_ttl: Duration,
    /// Leader's wall-clock time of the offer; for people only.
    pub offered_at_unix_ms: u64,
    /// Revision of the offer.
    pub revision: u64,
    /// The serving node's estimate of the time before the offer lapses.
    #[serde(rename = "remaining_ms", serialize_with = "as_millis")]
    pub remaining: Duration,
}

/// An accepted handoff: the taker holds the key with a new token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The taker's new lease. Its token is new; the giver's token is dead.
    pub lease: LeaseInfo,
    /// The giver's status note.
    pub note: HandoffNote,
    /// The giver.
    pub from: HolderInfo,
    /// Revision of the acceptance (which is also the new token).
    pub revision: u64,
    /// The taker may act as the holder until this instant of its own monotonic clock,
    /// counted like a claim's (see [`crate::safe_deadline`]).
    pub safe_deadline: Instant,
}

impl Accepted {
    /// The new lease as a [`Grant`], e.g. to keep it alive with a
    /// [`crate::LeaseGuard`] (see [`crate::Client::accept_guarded`]).
    pub fn grant(&self) -> Grant {
        Grant {
            lease: self.lease.clone(),
            already_held: false,
            revision: self.revision,
            safe_deadline: self.safe_deadline,
            assignment: None,
            permits: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_deserializes_from_json_with_defaults_and_refuses_unknown_fields() {
        let note: HandoffNote = serde_json::from_str(
            r#"{"commit":"4f2a","volatile_facts":[{"name":"rows","check_command":"wc -l x"}]}"#,
        )
        .unwrap();
        assert_eq!(note.commit, "4f2a");
        assert_eq!(note.volatile_facts[0].claimed_value, "");
        assert!(note.done.is_empty() && note.changed_files.is_empty());
        assert!(serde_json::from_str::<HandoffNote>(r#"{"comit":"4f2a"}"#).is_err());
        // A fact without a check command is not a volatile fact.
        assert!(
            serde_json::from_str::<HandoffNote>(r#"{"volatile_facts":[{"name":"x"}]}"#).is_err()
        );
    }

    #[test]
    fn empty_note_is_empty() {
        assert!(HandoffNote::default().is_empty());
        let note = HandoffNote {
            first_step: "run the tests".into(),
            ..HandoffNote::default()
        };
        assert!(!note.is_empty());
    }
}
