//! The node's own limits, named in one place: sizes, counts, queue bounds and timeouts of
//! the edges around the core. The core's limits (what a command may hold) are in
//! `core::limits`; the wire limits clients check too are in `baton_proto::limits`.
//!
//! Units come last in each name: `_MAX` bounds a count or size, `_BYTES` a size, `_DEFAULT`
//! a setting's default (its flag may change it), and a `Duration` names what it times.

use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Connections and write rates (settings; `admission` enforces them).

/// Connections a node accepts at once (clients and peers); more are closed as they come.
pub const CONNECTIONS_MAX_DEFAULT: usize = 4_096;

/// Watch streams open at once from one client address.
pub const WATCHES_PER_ADDRESS_MAX_DEFAULT: usize = 256;

/// HTTP/2 streams (requests and watches) one connection may have open at once; a client's
/// further requests wait for one to end (the peer is told in the HTTP/2 settings).
pub const STREAMS_PER_CONNECTION_MAX_DEFAULT: u32 = 1_024;

/// Writes per second one client id may make (a burst of as many); 0: no limit.
pub const CLIENT_WRITES_PER_SECOND_DEFAULT: u32 = 10_000;

/// Writes per second one principal (with auth on) may make over all its client ids, in
/// bursts of as many; 0: no limit. Above what a cluster of two-core nodes writes at all, so
/// it only stops a runaway principal on bigger machines unless set lower.
pub const PRINCIPAL_WRITES_PER_SECOND_DEFAULT: u32 = 50_000;

/// Client ids whose write rate a node tracks; beyond, idle ones are forgotten first.
pub const RATE_LIMITED_CLIENTS_MAX: usize = 100_000;

/// Most threads `--worker-threads` may give a node's async runtime (the default is one per
/// core, tokio's).
pub const WORKER_THREADS_MAX: usize = 64;

// ---------------------------------------------------------------------------------------
// Requests and forwarding.

/// How long a forwarded request may take at the leader.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);

/// Pause between attempts to confirm leadership when a quorum round fell short.
pub const READ_RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// How long a deposed node waits, after applying past a write's possible index, for openraft's
/// own answer to it before calling the outcome unknown.
pub const UNANSWERED_WRITE_GRACE: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------------------------------
// Watches.

/// Events a watch stream buffers toward a slow client before it waits.
pub const WATCH_STREAM_BUFFER: usize = 1_024;

/// Events a watch answer sends per round before looking again.
pub const WATCH_BATCH_EVENTS_MAX: usize = 256;

/// The largest window a node may be configured to keep.
pub const WATCH_WINDOW_EVENTS_MAX: usize = 1_000_000;

/// The watch window of a node that is not told otherwise.
pub const WATCH_WINDOW_EVENTS_DEFAULT: usize = 100_000;

// ---------------------------------------------------------------------------------------
// Expiry.

/// Countdown commands (`Expire`, `Lapse`, `EndQuarantine`) the leader has in flight at most;
/// the rest wait for the next tick. They go into the log in entries of up to
/// `PROPOSAL_COMMANDS_MAX` commands, as the proposer batches clients' writes: 1,024 is four
/// such entries.
pub const EXPIRE_IN_FLIGHT_MAX: usize = 4 * crate::core::limits::PROPOSAL_COMMANDS_MAX;

/// Longest wait for a countdown command's entry to be answered, after which its countdowns
/// are due again (proposed anew if still due: a second `Expire` of one basis changes
/// nothing). openraft 0.9 never answers a write whose entry a snapshot install covered, so
/// without it those countdowns would stay in flight for good and, once `EXPIRE_IN_FLIGHT_MAX`
/// of them were stuck, the node would end nothing when it led again. A change of term frees
/// them at once; this bounds the rest. Far above an entry's commit time (milliseconds, a few
/// seconds under load), so a slow write is rarely proposed twice.
pub const EXPIRE_PROPOSAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

// ---------------------------------------------------------------------------------------
// Storage.

/// sled's page cache, when an older data dir's sled database is read once at its upgrade
/// (`store::legacy`); sled's default of 1 GiB is an upper bound it never needs here.
pub const SLED_CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// Size of one Raft log segment file (`store::segments`), zeroed before use. A purge frees
/// whole segments, and each node keeps one spare: about two of these on disk beyond the log
/// itself. 8 MiB holds ~25,000 entries of one claim; zeroing one takes tens of milliseconds,
/// done in the background (and once at a new node's start).
pub const SEGMENT_BYTES: u64 = 8 * 1024 * 1024;
/// How long the log flusher waits without a request before it writes the log's mark (how far
/// the log is durable: `store::segments`) and syncs it. Bounds how much of a busy log's tail
/// a crash leaves unvouched (a damaged record there is taken for a torn tail); off every
/// write's path, one `fdatasync` per idle spell.
pub const MARK_IDLE: std::time::Duration = std::time::Duration::from_millis(200);
/// Opening a damaged log reads on past the damage for whole records of an index at most this
/// far beyond it (and marks): a bound that keeps random bytes from being checksummed.
pub const MARK_SCAN_SPAN: u64 = 1 << 32;
/// How often a node whose damaged log waits for its repair checks whether the leader has
/// refilled it (then it campaigns again), and how often it says that it still waits.
pub const REPAIR_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
pub const REPAIR_NAG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
/// How often a node checks whether its Raft core stopped on a storage error (then it exits
/// with the cause, `node::raft_stopped`).
pub const FATAL_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
/// How long a node whose storage failed lets its gRPC server drain before it stops anyway.
pub const FATAL_EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// How long, and for how many requests at most, the leader remembers a claim it refused from
/// a read (no log entry), so that a copy of the same request (a proxy's or a retry policy's
/// replay) gets the same refusal instead of a grant (`server::read_answers`). About 300 bytes
/// each: 15 MB at most.
pub const READ_ANSWERS_TTL: std::time::Duration = std::time::Duration::from_secs(300);
pub const READ_ANSWERS_MAX: usize = 50_000;

// ---------------------------------------------------------------------------------------
// Membership, joining, backups.

/// How long `AddMember` waits for a new learner to catch up before answering
/// DEADLINE_EXCEEDED (it stays a learner; the same call again resumes).
pub const MEMBER_CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);

/// How far behind the leader's log a learner may be when it is made a voter.
pub const MEMBER_CATCH_UP_LAG_MAX: u64 = 100;

/// How long a membership change may take to commit.
pub const MEMBERSHIP_CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `Snapshot` waits for the snapshot to reach the disk.
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(120);

/// How many times `Backup` retries a leadership check that fell short of a quorum.
pub const BACKUP_LINEARIZE_TRIES: u32 = 20;

/// The longest node address `AddMember` takes.
pub const MEMBER_ADDR_BYTES_MAX: usize = 255;

/// How long a node started with `--join` keeps asking to be added before it gives up.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(300);

/// Bytes per streamed chunk of a backup.
pub const BACKUP_CHUNK_BYTES: usize = 1024 * 1024;

/// The longest header line a backup may have.
pub const BACKUP_HEADER_BYTES_MAX: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------
// Auth and TLS.

/// Most lines a tokens file may hold.
pub const TOKENS_MAX: usize = 100_000;

/// Longest principal name (as a holder name may be).
pub const PRINCIPAL_BYTES_MAX: usize = crate::core::limits::HOLDER_NAME_BYTES_MAX;

/// How long a client may take over the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections whose handshake is still under way, waiting for the server to take them.
pub const TLS_PENDING_CONNECTIONS_MAX: usize = 1_024;

// ---------------------------------------------------------------------------------------
// The admin port.

/// The most of an admin answer `get` reads.
pub const ADMIN_ANSWER_BYTES_MAX: u64 = 1 << 20;

/// Entries a node's apply may trail its own log and still answer `/readyz` with 200.
pub const READY_APPLY_LAG_MAX: u64 = 1_000;

/// How long `baton-node health` waits for the admin port's answer.
pub const HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------
// Dev clusters.

/// Largest dev cluster: more voters only slow a laptop down.
pub const DEV_NODES_MAX: u64 = 7;

/// Lease endings a node keeps for its endings streams (`crate::endings`): a session that
/// resumes from an older revision is told `compacted` and re-reads its leases.
pub const ENDINGS_WINDOW_MAX: usize = 100_000;

/// Endings streams a node serves at once (one per client session); one more is refused
/// RESOURCE_EXHAUSTED. Measured at 10,000 sessions by `baton bench endings`.
pub const ENDINGS_STREAMS_MAX: usize = 20_000;

/// Endings one stream sends before it looks at the window again.
pub const ENDINGS_BATCH_MAX: usize = 256;

/// Endings (and progress markers) queued for one stream's client; a client that reads
/// slower than its leases end waits the stream, never the node.
pub const ENDINGS_STREAM_BUFFER: usize = 64;
