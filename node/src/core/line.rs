//! Waiting in line: claimants queued on a held (or quarantined) key in the replicated state,
//! so that when the key is freed the oldest live one is granted it in the same entry (a
//! hand-on is one write, not a release and a race). Data format 11.
//!
//! A waiter keeps its place like a lease: each node counts its TTL down from its own apply
//! of the entry that put it in line or renewed its place (`basis`); the leader ends a place
//! that ran out with `Op::DropWaiter`, naming that basis. A waiter that leaves, or whose
//! session stops renewing, is out of line; the rest keep their order.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::ids::{Actor, Holder, Name};
use super::types::Blocked;

/// One claimant waiting in a key's line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// Who waits: its name and session (the lease it is granted names the same).
    pub holder: Holder,
    /// The principal that put it in line, recorded as the grant's actor's.
    pub principal: Option<Name>,
    /// The TTL of its place, and of the lease it is granted.
    pub ttl_ms: u64,
    /// The entry that put it in line: the line is in this order.
    pub joined: u64,
    /// The proposing leader's wall clock at `joined`, for people.
    pub joined_unix_ms: u64,
    /// The entry that put it in line or last renewed its place: each node counts the TTL
    /// from its own apply of it, and a `DropWaiter` must name it to take effect.
    pub basis: u64,
    /// What it waits for: the key alone (`None`), or one of its permits or a share of it
    /// (data format 13, `Op::WaitPermit`). Kept apart from the rest in the state
    /// (`store::sm_state`), so a line of plain waiters encodes as format 11's did.
    #[serde(skip)]
    pub sharing: Option<super::permits::Sharing>,
}

impl Waiter {
    /// Who is credited with a grant from the line: the waiter, as it asked.
    pub fn actor(&self) -> Actor {
        Actor {
            name: self.holder.name.clone(),
            client_id: self.holder.client_id.clone(),
            principal: self.principal.clone(),
        }
    }

    /// The id of this waiter's countdown: its key and session, apart by a newline (which
    /// neither may contain).
    pub fn countdown_id(key: &str, client_id: &str) -> String {
        format!("{key}\n{client_id}")
    }

    /// The key and session of a countdown id made by `countdown_id`.
    pub fn parse_countdown_id(id: &str) -> Option<(&str, &str)> {
        id.split_once('\n')
    }

    /// The id of a key's hand-on nudge (`Op::HandOn`), kept among the places' countdowns:
    /// the key and no session.
    pub fn hand_on_id(key: &str) -> String {
        Waiter::countdown_id(key, "")
    }
}

/// A key's waiters, oldest first.
pub type Line = VecDeque<Waiter>;

/// Where a claimant waits: the answer to a `Wait` that did not grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InLine {
    pub key: String,
    /// 1 for the head of the line.
    pub position: u64,
    /// How many wait, this claimant included.
    pub waiters: u64,
    /// The entry that put it in line.
    pub joined: u64,
    /// What it waits for: the key's holder, or its quarantine.
    pub blocked: Blocked,
}
