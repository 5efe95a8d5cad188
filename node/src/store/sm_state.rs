//! The state machine's state and its encoding, which is the durable format of snapshots,
//! backups and snapshots sent to peers.
//!
//! Data format 11 added the keys' lines of waiters. They are encoded after everything else,
//! and only when someone waits: a state without waiters encodes exactly as format 10 did, so
//! a format-10 node can still read it (the leader puts no one in line until every member
//! reads format 11). Decoding tries each layout whole (see `decode`).
//!
//! Data format 12 added the keys held by permits, after the lines (empty if no one waits),
//! and only when a permit is held: a state without permits encodes as format 11 did.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use super::decode_whole;
use crate::core::access::AccessState;
use crate::core::line::Line;
use crate::core::permits::{Holders, Sharing};
use crate::core::LeaseTable;
use crate::raft_types::{LogId, StoredMembership};

/// The state machine's state: the lease table plus what openraft needs to know about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmState {
    pub table: LeaseTable,
    /// The revision of the last applied command. Every command gets the next one, so a log
    /// entry that carries a batch of commands gives each its own revision; grants take it as
    /// their fencing token, events as their position in the history.
    pub revision: u64,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    /// The permissions policy and its audit trail (data format 3; last, so a format-2
    /// encoding is this one cut short).
    pub access: AccessState,
}

impl Serialize for SmState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let lines = self.table.lines();
        let holders = self.table.all_holders();
        let waiting_for = self.table.waiting_for();
        let fields = match (lines.is_empty(), holders.is_empty(), waiting_for.is_empty()) {
            (_, _, false) => 8,
            (true, true, _) => 5,
            (false, true, _) => 6,
            (_, false, _) => 7,
        };
        let mut state = s.serialize_struct("SmState", fields)?;
        state.serialize_field("table", &self.table)?;
        state.serialize_field("revision", &self.revision)?;
        state.serialize_field("last_applied", &self.last_applied)?;
        state.serialize_field("membership", &self.membership)?;
        state.serialize_field("access", &self.access)?;
        if fields >= 6 {
            state.serialize_field("lines", lines)?;
        }
        if fields >= 7 {
            state.serialize_field("holders", holders)?;
        }
        if fields == 8 {
            state.serialize_field("waiting_for", &waiting_for)?;
        }
        state.end()
    }
}

/// A state as formats 3 to 10 encoded it, and format 11 without waiters.
#[derive(Deserialize)]
struct Stored {
    table: LeaseTable,
    revision: u64,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    access: AccessState,
}

/// A state of format 11 with waiters: `Stored`, then the lines. (bincode writes a struct's
/// fields in order and nothing else, so a nested `Stored` encodes as its fields would.)
#[derive(Deserialize)]
struct StoredWithLines {
    stored: Stored,
    lines: BTreeMap<Arc<str>, Line>,
}

/// A state of format 12 with permits held: `StoredWithLines`, then the holders.
#[derive(Deserialize)]
struct StoredWithHolders {
    stored: Stored,
    lines: BTreeMap<Arc<str>, Line>,
    holders: BTreeMap<Arc<str>, Holders>,
}

/// A state of format 13 with a waiter for a permit or a share: `StoredWithHolders`, then
/// what each such waiter waits for, by its place's countdown id (`Waiter::countdown_id`).
#[derive(Deserialize)]
struct StoredWithWaitingFor {
    stored: Stored,
    lines: BTreeMap<Arc<str>, Line>,
    holders: BTreeMap<Arc<str>, Holders>,
    waiting_for: BTreeMap<String, Sharing>,
}

impl From<Stored> for SmState {
    fn from(s: Stored) -> SmState {
        SmState {
            table: s.table,
            revision: s.revision,
            last_applied: s.last_applied,
            membership: s.membership,
            access: s.access,
        }
    }
}

impl SmState {
    /// Decodes a state encoded by this format or by an older one (`format3`: format 3, and
    /// format 2 without a policy), upgrading it. Every encoding of a state ends the bytes it
    /// is in (a snapshot file, a backup's state section, a snapshot sent by a peer), so each
    /// format is tried whole, trailing bytes refused: an older state fails to decode as a
    /// newer format, and a damaged state is an error, not an older format's misreading.
    pub fn decode(bytes: &[u8]) -> Result<SmState, bincode::Error> {
        if let Ok(s) = decode_whole::<StoredWithWaitingFor>(bytes) {
            let mut state = SmState::from(s.stored);
            state.table.set_lines(s.lines);
            state.table.set_holders(s.holders);
            state.table.set_waiting_for(&s.waiting_for);
            return Ok(state);
        }
        if let Ok(s) = decode_whole::<StoredWithHolders>(bytes) {
            let mut state = SmState::from(s.stored);
            state.table.set_lines(s.lines);
            state.table.set_holders(s.holders);
            return Ok(state);
        }
        if let Ok(s) = decode_whole::<StoredWithLines>(bytes) {
            let mut state = SmState::from(s.stored);
            state.table.set_lines(s.lines);
            return Ok(state);
        }
        decode_whole::<Stored>(bytes)
            .map(SmState::from)
            .or_else(|current| {
                if let Ok(v3) = decode_whole::<super::format3::SmStateV3>(bytes) {
                    return Ok(v3.upgrade());
                }
                match decode_whole::<super::format3::SmStateV2>(bytes) {
                    Ok(v2) => Ok(v2.upgrade()),
                    Err(_) => Err(current),
                }
            })
    }
}
