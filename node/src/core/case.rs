//! The case file of a key: its record, the pending handoff offer, and its history.
//!
//! "The token locks the authority to revise the account of the work": anyone may read a
//! record, only the current token may write it, and every change lands in the history
//! attributed to a holder and token.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::ids::{Actor, FencingToken, Holder};
use super::limits::HISTORY_EVENTS_MAX;

/// Who a dispatcher wanted on a key. Routing metadata: it reserves nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub to: String,
    pub by: String,
    pub reason: String,
    pub unix_ms: u64,
    pub revision: u64,
}

/// A changing value the taker must re-verify.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolatileFact {
    pub name: String,
    pub claimed_value: String,
    pub check_command: String,
}

/// The status note of a handoff: a commit, what is done and what remains, and the facts
/// that need verification.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffNote {
    pub commit: String,
    pub branch: String,
    pub done: String,
    pub remaining: String,
    pub blocked: String,
    pub rebuild: String,
    pub first_step: String,
    pub changed_files: Vec<String>,
    pub dirty_files: Vec<String>,
    pub volatile_facts: Vec<VolatileFact>,
}

impl HandoffNote {
    /// Bytes of text the note carries (what `NOTE_BYTES_MAX` limits).
    pub fn size_bytes(&self) -> usize {
        let facts: usize = self
            .volatile_facts
            .iter()
            .map(|f| f.name.len() + f.claimed_value.len() + f.check_command.len())
            .sum();
        let files: usize = self
            .changed_files
            .iter()
            .chain(&self.dirty_files)
            .map(String::len)
            .sum();
        [
            &self.commit,
            &self.branch,
            &self.done,
            &self.remaining,
            &self.blocked,
            &self.rebuild,
            &self.first_step,
        ]
        .iter()
        .map(|s| s.len())
        .sum::<usize>()
            + facts
            + files
    }
}

/// A pending handoff. While it is pending the record is frozen and the holder keeps the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    pub from: Holder,
    pub from_token: FencingToken,
    /// The addressee's holder name.
    pub to: String,
    pub note: HandoffNote,
    pub offer_ttl_ms: u64,
    pub offered_unix_ms: u64,
    /// Revision of the offer: the lapse countdown runs from each node's apply of it, and a
    /// `Lapse` must name it to take effect.
    pub revision: u64,
}

/// The record: the account of the work.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub status: String,
    pub summary: String,
    pub fields: BTreeMap<String, String>,
    pub assigned_to: Option<Box<Assignment>>,
    /// Revision of the latest change to status, summary or fields.
    pub updated_revision: u64,
}

impl Record {
    /// Bytes of text the record carries (what `RECORD_BYTES_MAX` limits).
    pub fn size_bytes(&self) -> usize {
        self.status.len()
            + self.summary.len()
            + self
                .fields
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// A change to a record. `None` leaves a part as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordPatch {
    pub status: Option<String>,
    pub summary: Option<String>,
    pub set_fields: BTreeMap<String, String>,
    pub remove_fields: Vec<String>,
}

impl RecordPatch {
    pub fn is_empty(&self) -> bool {
        self.status.is_none()
            && self.summary.is_none()
            && self.set_fields.is_empty()
            && self.remove_fields.is_empty()
    }

    /// Applies the patch; returns a line for people saying what changed ("" if nothing).
    pub fn apply_to(&self, record: &mut Record) -> String {
        let mut parts = Vec::new();
        if let Some(status) = &self.status {
            if *status != record.status {
                let old = if record.status.is_empty() {
                    "(none)"
                } else {
                    &record.status
                };
                parts.push(format!("status {old} -> {status}"));
                record.status = status.clone();
            }
        }
        if let Some(summary) = &self.summary {
            if *summary != record.summary {
                parts.push("summary".to_string());
                record.summary = summary.clone();
            }
        }
        let mut set = Vec::new();
        for (k, v) in &self.set_fields {
            if record.fields.get(k) != Some(v) {
                record.fields.insert(k.clone(), v.clone());
                set.push(k.as_str());
            }
        }
        if !set.is_empty() {
            parts.push(format!("fields set: {}", set.join(", ")));
        }
        let removed: Vec<&str> = self
            .remove_fields
            .iter()
            .filter(|k| record.fields.remove(k.as_str()).is_some())
            .map(String::as_str)
            .collect();
        if !removed.is_empty() {
            parts.push(format!("fields removed: {}", removed.join(", ")));
        }
        parts.join("; ")
    }
}

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Claimed,
    Released,
    Expired,
    Revoked,
    Offered,
    Accepted,
    Declined,
    Cancelled,
    Lapsed,
    Assigned,
    Updated,
    /// An assignment cleared (data format 5; appended last to keep the others' encoding).
    Unassigned,
    /// A task put on the board, or its record patched by its dispatcher (data format 9).
    Posted,
    /// A claimant joined the key's line (data format 11).
    Waited,
    /// A claimant left the key's line, or its place lapsed (data format 11).
    LeftLine,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Claimed => "claimed",
            EventKind::Released => "released",
            EventKind::Expired => "expired",
            EventKind::Revoked => "revoked",
            EventKind::Offered => "offered",
            EventKind::Accepted => "accepted",
            EventKind::Declined => "declined",
            EventKind::Cancelled => "cancelled",
            EventKind::Lapsed => "lapsed",
            EventKind::Assigned => "assigned",
            EventKind::Updated => "updated",
            EventKind::Unassigned => "unassigned",
            EventKind::Posted => "posted",
            EventKind::Waited => "waited",
            EventKind::LeftLine => "left-line",
        }
    }
}

/// How an event's actor was recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Attribution {
    /// The actor is the request's real sender: its client id, the holder name it acted as,
    /// and its principal (data format 4 on).
    #[default]
    Requester,
    /// Recorded before data format 4 and kept as it was: for a write made with a token, the
    /// actor is the holder of the lease it was made under, who may not be who sent it; no
    /// principal was kept.
    RecordedBeforeFormat4,
}

impl Attribution {
    /// How an event data format 3 recorded is marked, by its kind: the leader's own events
    /// (expired, lapsed) credit no one in any format; every other one is marked as recorded
    /// before format 4. The same whether a format-3 node applied the command and the event
    /// is read from its state, or a format-4 node applies the format-3 command from the log.
    pub fn of_format_3(kind: EventKind) -> Attribution {
        match kind {
            EventKind::Expired | EventKind::Lapsed => Attribution::Requester,
            _ => Attribution::RecordedBeforeFormat4,
        }
    }
}

/// One history event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Revision of the entry that produced it.
    pub revision: u64,
    pub kind: EventKind,
    /// Who did it; `None` for the leader's own entries (expired, lapsed).
    pub actor: Option<Actor>,
    /// Whether `actor` is the real sender (always, since data format 4).
    pub attribution: Attribution,
    /// The stint's token (for `Accepted`, the new one); 0 when no lease is involved.
    pub token: FencingToken,
    /// The proposing leader's wall clock, for people.
    pub unix_ms: u64,
    pub detail: String,
}

impl Event {
    /// The status this event set on its key's record, if it set one: an `updated`, a
    /// `released` with a final status, or a `posted`. Read off the detail that this crate
    /// writes, here and nowhere else: `RecordPatch::apply_to` puts `status OLD -> NEW` first
    /// (`OLD` is `(none)` for a record without one), `post` puts `status open` first on a new
    /// task, and `end_stint` puts `renewed N times` before either. Histories keep the
    /// detail, in every data format, so the answers carry this typed (`Event.status_set`)
    /// and no client reads the detail.
    pub fn status_set(&self) -> Option<&str> {
        if !matches!(
            self.kind,
            EventKind::Updated | EventKind::Released | EventKind::Posted
        ) {
            return None;
        }
        let mut parts = self.detail.split("; ");
        let mut part = parts.next()?;
        if self.kind == EventKind::Released && is_renewals(part) {
            part = parts.next()?;
        }
        let words: Vec<&str> = part.split(' ').collect();
        match words.as_slice() {
            ["status", new] | ["status", _, "->", new] if !new.is_empty() => Some(*new),
            _ => None,
        }
    }
}

/// `renewed N times`, which `end_stint` puts first in an ending's detail.
fn is_renewals(part: &str) -> bool {
    part.strip_prefix("renewed ")
        .and_then(|rest| rest.strip_suffix(" times"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A key's append-only history, keeping the latest `HISTORY_EVENTS_MAX` events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub events: VecDeque<Event>,
    /// How many older events were compacted away.
    pub dropped: u64,
}

/// Histories up to this many events grow by exactly one slot per event.
const HISTORY_EXACT_GROWTH_MAX: usize = 8;

impl History {
    /// Appends an event; returns the revision of the event compacted away, if any.
    pub fn push(&mut self, event: Event) -> Option<u64> {
        // Short histories grow one slot at a time (a new key's first event would otherwise
        // reserve room for four): most of a million keys have only a few events.
        if self.events.len() == self.events.capacity()
            && self.events.len() < HISTORY_EXACT_GROWTH_MAX
        {
            self.events.reserve_exact(1);
        }
        self.events.push_back(event);
        if self.events.len() > HISTORY_EVENTS_MAX {
            self.dropped += 1;
            return self.events.pop_front().map(|e| e.revision);
        }
        None
    }
}

/// A key that stays unclaimable for a while after its holder's lease expired (Chubby's
/// lock-delay), for resources that cannot check fencing tokens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    /// The `Expire` entry that started it: each node counts `delay_ms` from its own apply of
    /// it, and the leader ends it with an `EndQuarantine` naming it.
    pub revision: u64,
    pub delay_ms: u64,
}

/// Everything about a key besides its lease.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseFile {
    pub record: Record,
    /// Boxed, like the note and the quarantine: most keys have none, and a million case
    /// files should not each carry the room for one inline.
    pub offer: Option<Box<Offer>>,
    /// The note of the latest offer, kept after the offer ends (accepted, declined, lapsed,
    /// cancelled, or its giver's lease ended): nothing written is lost.
    pub last_note: Option<Box<HandoffNote>>,
    pub history: History,
    /// Set after an involuntary expiry under a quarantine rule; claims are refused until it
    /// ends.
    pub quarantine: Option<Box<Quarantine>>,
}

impl CaseFile {
    pub fn is_empty(&self) -> bool {
        *self == CaseFile::default()
    }

    /// Whether the record's status is a finished one (`FINISHED_STATUSES`): `claim-next`
    /// passes the key by.
    pub fn is_finished(&self) -> bool {
        crate::core::limits::FINISHED_STATUSES.contains(&self.record.status.as_str())
    }
}
