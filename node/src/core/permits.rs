//! Permits (data format 12): a key that up to N holders hold at once, each with its own
//! lease, session binding and fencing token (the revision of its own grant), each renewed,
//! released and expired on its own. N is fixed by the first holder and kept while any holds;
//! a key with no holder left is free again, for any N or for a plain (exclusive) claim.
//!
//! A permit's countdown is kept, beside the exclusive leases', under its key and token
//! (`countdown_id`), and its end is an `Op::Expire` naming that token and its basis, as a
//! lease's is.

use serde::{Deserialize, Serialize};

use super::lease::Lease;

/// How a key is shared by more than one holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sharing {
    /// At most this many holders at once (`2..=PERMITS_MAX`).
    Permits(u32),
}

impl Sharing {
    /// How many may hold at once.
    pub fn permits(self) -> u32 {
        match self {
            Sharing::Permits(n) => n,
        }
    }
}

/// The holders of a key held by permits: each one's own lease, in order of token (of
/// grant).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holders {
    pub sharing: Sharing,
    /// Never empty (a key whose last holder left is removed), at most `sharing.permits()`.
    pub leases: Vec<Lease>,
}

impl Holders {
    /// How many more may be granted now.
    pub fn free(&self) -> usize {
        (self.sharing.permits() as usize).saturating_sub(self.leases.len())
    }

    /// Where the lease of token `token` is.
    pub fn position_of_token(&self, token: u64) -> Option<usize> {
        self.leases.iter().position(|l| l.token == token)
    }

    /// Where the lease held by session `client_id` is.
    pub fn position_of_session(&self, client_id: &str) -> Option<usize> {
        self.leases
            .iter()
            .position(|l| *l.holder.client_id == *client_id)
    }
}

/// The id of a permit's countdown: its key and token, apart by a newline (which a key may
/// not contain).
pub fn countdown_id(key: &str, token: u64) -> String {
    format!("{key}\n{token}")
}

/// The key of a countdown id: a permit's (made by `countdown_id`) or an exclusive lease's
/// (the key itself).
pub fn countdown_key(id: &str) -> &str {
    id.split_once('\n').map_or(id, |(key, _)| key)
}
