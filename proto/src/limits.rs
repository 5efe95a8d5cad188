//! The wire limits: what a node accepts in a request, which clients check too (to refuse
//! early, or cut a default to fit). One home for both sides; the node's own limits live in
//! `baton_node::core::limits`, which re-exports these.

/// A key is 1..=512 bytes of UTF-8 without control characters.
pub const KEY_BYTES_MAX: usize = 512;
/// A holder name is 1..=128 bytes without control characters.
pub const HOLDER_NAME_BYTES_MAX: usize = 128;
/// A client id (a session, or a retry slot) is 1..=64 bytes of printable ASCII.
pub const CLIENT_ID_BYTES_MAX: usize = 64;
/// A record's status word: 1..=32 bytes of `a-z`, `0-9`, `_`, `-`.
pub const STATUS_BYTES_MAX: usize = 32;
/// A task whose record has one of these statuses is finished: `claim-next` passes it by, and
/// boards do not list it as open.
pub const FINISHED_STATUSES: [&str; 3] = ["done", "cancelled", "closed"];
/// Keys one all-or-none claim (a claim of a set) may name. A larger set is refused as bad
/// input: split the work, or take a prefix's tasks one by one with `claim-next`.
pub const CLAIM_SET_KEYS_MAX: usize = 64;
/// Claimants that may wait in one key's line (`claim --wait`); one more is refused
/// (`line_full`) and may wait by polling instead.
pub const WAITERS_PER_KEY_MAX: usize = 1_024;
/// Claimants that may wait in all lines together: each costs every node a place in memory
/// and a countdown (about 200 B).
pub const WAITERS_MAX: usize = 100_000;
/// Waiters a probe or a board row lists by name, oldest first (the rest are counted).
pub const LINE_LISTED_MAX: usize = 16;
/// The most permits one key may have (`claim --permits N`, data format 12): N is 2 to this.
pub const PERMITS_MAX: u32 = 1_024;
/// The most holders that may share one key at once (`claim --shared`, data format 13): a
/// shared claim past it is told the key is held, as a permit claim past N is.
pub const SHARED_HOLDERS_MAX: u32 = 1_024;
/// Permit holders in the whole cluster at once (every key's together): a permit claim past
/// it is refused (`holder_limit`). Exclusive leases are bounded by the keys' own limit.
pub const PERMIT_HOLDERS_MAX: usize = 1_000_000;
/// Longest `authorization` value (a bearer token) a node hashes; longer ones are refused
/// unread, and a client does not send one.
pub const TOKEN_BYTES_MAX: usize = 512;

/// The first line of every backup file (`baton cluster backup` writes what a node streams;
/// `baton-node restore` reads it).
pub const BACKUP_MAGIC: &[u8] = b"BATON-BACKUP 1\n";
