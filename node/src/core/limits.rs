//! Every limit of baton, named in one place (SPEC "Bad input and limits").
//!
//! Units come last in each name. The gRPC edge and the pure core both check them; the core's
//! checks are what make a bad command deterministic to refuse on every node.

/// The wire limits clients check too (key, holder name, client id, status word): one home,
/// in `baton_proto::limits`.
pub use baton_proto::limits::{
    CLAIM_SET_KEYS_MAX, CLIENT_ID_BYTES_MAX, FINISHED_STATUSES, HOLDER_NAME_BYTES_MAX,
    KEY_BYTES_MAX, LINE_LISTED_MAX, PERMITS_MAX, PERMIT_HOLDERS_MAX, SHARED_HOLDERS_MAX,
    STATUS_BYTES_MAX, WAITERS_MAX, WAITERS_PER_KEY_MAX,
};
/// The reason given with an operator's revoke: 1..=1024 bytes.
pub const REASON_BYTES_MAX: usize = 1024;
/// A board prefix is at most a key long.
pub const PREFIX_BYTES_MAX: usize = KEY_BYTES_MAX;

/// A record's summary.
pub const SUMMARY_BYTES_MAX: usize = 4 * 1024;
/// Fields per record.
pub const FIELDS_MAX: usize = 64;
/// A field name: 1..=64 printable bytes.
pub const FIELD_NAME_BYTES_MAX: usize = 64;
/// A whole record: status + summary + field names and values.
pub const RECORD_BYTES_MAX: usize = 64 * 1024;
/// A whole handoff note, all of its text together.
pub const NOTE_BYTES_MAX: usize = 64 * 1024;
/// Volatile facts per note.
pub const VOLATILE_FACTS_MAX: usize = 32;
/// File names listed per note (changed and dirty files together).
pub const NOTE_FILES_MAX: usize = 1_000;
/// Events kept per key; older ones are compacted away (and counted).
pub const HISTORY_EVENTS_MAX: usize = 1_000;
/// Shortest and longest time an offer may wait for its addressee.
pub const OFFER_TTL_MS_MIN: u64 = 1_000;
pub const OFFER_TTL_MS_MAX: u64 = 3_600_000;

/// Keys with a case file (anything ever claimed, assigned or revoked) a cluster keeps. A
/// claim, assignment or revoke that would add one more is refused. Case files are not
/// garbage-collected yet, so this is the cluster's capacity.
pub const KEYS_MAX: usize = 1_000_000;

/// The longest quarantine (lock-delay) after an involuntary expiry.
pub const QUARANTINE_MS_MAX: u64 = 3_600_000;
/// Quarantine rules (key prefixes) a cluster may have.
pub const QUARANTINE_RULES_MAX: usize = 1_000;

/// The longest lease: one hour (SPEC "Lease").
pub const TTL_MS_MAX: u64 = 3_600_000;
/// The shortest lease the core accepts from any configuration. A node's configured minimum
/// (`ttl_ms_min`, at least twice the election timeout) is checked at the edge and is never
/// below this floor.
pub const TTL_MS_FLOOR: u64 = 100;

/// Leases one `Board` answer lists at most; more are paged with `start_after`.
pub const BOARD_LEASES_MAX: usize = 1_000;

/// Case files one `claim-next` looks at, in key order from its prefix, within its one log
/// entry: unfinished ones only from data format 14 on (`Walk::Unfinished`, which first looks
/// at up to this many of the claimant's own assignments, wherever they are under the
/// prefix, from its index of assignees), every one before. Past them it stops looking: a
/// claimable key further on is not seen (but for the claimant's own, from format 14), and
/// the answer says nothing is claimable with `truncated` set (narrow the prefix).
pub const CLAIM_NEXT_SCAN_MAX: usize = 10_000;
/// `--where FIELD=VALUE` conditions one `claim-next` may carry.
pub const CLAIM_NEXT_WHERE_MAX: usize = 8;

/// Clients whose latest answers the state machine remembers for de-duplication. When more
/// clients appear, the one idle for the longest (by revision) is forgotten.
pub const DEDUP_CLIENTS_MAX: usize = 10_000;
/// Answers remembered per client: a client may have this many requests in flight and still
/// get every retry de-duplicated.
pub const DEDUP_ANSWERS_PER_CLIENT_MAX: usize = 16;

/// Largest gRPC message a node accepts or sends on the client API.
pub const REQUEST_BYTES_MAX: usize = 256 * 1024;
/// Largest Raft message between nodes (a snapshot chunk is smaller, see node config).
pub const RAFT_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Commands one Raft log entry carries at most (the proposer batches concurrent requests).
pub const PROPOSAL_COMMANDS_MAX: usize = 256;
/// Encoded bytes of the commands one log entry carries at most; a single larger command (up
/// to `REQUEST_BYTES_MAX`) goes alone.
pub const PROPOSAL_BYTES_MAX: usize = 256 * 1024;
/// Log entries the proposer keeps in flight at once; more requests wait and share an entry.
/// Fewer in flight means bigger entries: on 2 cores, 64 claimants did 2,680 cycles/s with 4,
/// 3,400 with 2 and 3,470 with 1 (baton-compare, one run each); 2 keeps one entry replicating
/// while the next is appended.
pub const PROPOSALS_IN_FLIGHT_MAX: usize = 2;
/// Commands waiting for the leader's next entry, at most; past it a write is refused with
/// RESOURCE_EXHAUSTED (retry with backoff) rather than queued without bound. Room for many
/// full entries, so batching never starves.
pub const PROPOSALS_QUEUED_MAX: usize = 4_096;
const _: () = assert!(PROPOSALS_QUEUED_MAX >= PROPOSAL_COMMANDS_MAX * PROPOSALS_IN_FLIGHT_MAX);
/// Log entries per replication message: at the largest entry size, one message stays under
/// `RAFT_MESSAGE_BYTES_MAX`.
pub const RAFT_ENTRIES_PER_MESSAGE_MAX: u64 =
    (RAFT_MESSAGE_BYTES_MAX / (2 * (PROPOSAL_BYTES_MAX + REQUEST_BYTES_MAX))) as u64;

// Relations between limits, checked at compile time.
const _: () = assert!(RAFT_ENTRIES_PER_MESSAGE_MAX >= 16);
const _: () = assert!(PROPOSAL_COMMANDS_MAX >= 1 && PROPOSALS_IN_FLIGHT_MAX >= 1);
const _: () = assert!(TTL_MS_FLOOR < TTL_MS_MAX);
const _: () = assert!(KEY_BYTES_MAX + HOLDER_NAME_BYTES_MAX + REASON_BYTES_MAX < REQUEST_BYTES_MAX);
const _: () = assert!(DEDUP_ANSWERS_PER_CLIENT_MAX >= 1);
// A whole set's keys, holder and answer fit in one request and one proposal.
const _: () =
    assert!(CLAIM_SET_KEYS_MAX * KEY_BYTES_MAX + HOLDER_NAME_BYTES_MAX < PROPOSAL_BYTES_MAX);
const _: () = assert!(SUMMARY_BYTES_MAX < RECORD_BYTES_MAX);
const _: () = assert!(RECORD_BYTES_MAX + NOTE_BYTES_MAX < REQUEST_BYTES_MAX);
const _: () = assert!(OFFER_TTL_MS_MIN < OFFER_TTL_MS_MAX && OFFER_TTL_MS_MAX <= TTL_MS_MAX);
const _: () =
    assert!(BOARD_LEASES_MAX * (KEY_BYTES_MAX + HOLDER_NAME_BYTES_MAX + 256) < 4 * 1024 * 1024);

// Access policies (`core::access`).

/// Longest policy text a node takes (under a request's size limit, so that a larger one gets
/// this limit's message rather than the transport's).
pub const POLICY_BYTES_MAX: usize = 128 * 1024;
/// Most rules in an access policy.
pub const POLICY_RULES_MAX: usize = 1_000;
/// Most entries over all `who`, `prefixes`, group member and name lists together.
pub const POLICY_ENTRIES_MAX: usize = 20_000;
/// Policy changes the cluster remembers (the audit trail); older ones are dropped.
pub const AUDIT_ENTRIES_MAX: usize = 1_000;
