//! Permits (data format 12): a key that up to N holders hold at once, each with its own
//! lease, session binding and fencing token (the revision of its own grant), each renewed,
//! released and expired on its own. N is fixed by the first holder and kept while any holds;
//! a key with no holder left is free again, for any N or for a plain (exclusive) claim.
//!
//! Shared holders (data format 13) are the same with no N of their own: any number share
//! the key (up to `SHARED_HOLDERS_MAX`) while no exclusive holder holds it; an exclusive
//! claimant waiting in the key's line stops new shared grants behind it, so a writer is not
//! starved by a stream of readers.
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
    /// Shared holders, as many as `SHARED_HOLDERS_MAX` (`claim --shared`). Data format 13,
    /// appended last.
    Shared,
}

impl Sharing {
    /// How many may hold at once.
    pub fn permits(self) -> u32 {
        match self {
            Sharing::Permits(n) => n,
            Sharing::Shared => super::limits::SHARED_HOLDERS_MAX,
        }
    }

    /// Whether the holders share the key rather than hold N permits of it.
    pub fn is_shared(self) -> bool {
        self == Sharing::Shared
    }

    /// The claim option that asks for this sharing, for people.
    pub fn option(self) -> String {
        match self {
            Sharing::Permits(n) => format!("--permits {n}"),
            Sharing::Shared => "--shared".to_owned(),
        }
    }
}

impl std::fmt::Display for Sharing {
    /// "3 permits" or "shared", as a refusal or an event says how a key is held.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sharing::Permits(n) => write!(f, "{n} permits"),
            Sharing::Shared => f.write_str("shared"),
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
