//! `baton.v1` protobuf types and tonic services, generated at build time from
//! `proto/baton/v1/baton.proto` without a system `protoc`.
//!
//! Generated types stay at the edges of baton: the node converts them to its own domain
//! types in one place (`baton_node::server::convert`), the client in `baton_client`.

#![allow(clippy::all, missing_docs)]

pub mod limits;

/// Version 1 of the wire API.
pub mod v1 {
    tonic::include_proto!("baton.v1");
}

/// Response metadata key naming the leader's address, sent with UNAVAILABLE when a node
/// knows the leader, and with every answer a follower forwarded.
pub const LEADER_METADATA_KEY: &str = "x-baton-leader";

/// Request metadata key a follower sets when it forwards a request to the leader; a node
/// that receives a forwarded request it cannot serve answers UNAVAILABLE instead of
/// forwarding again (no forwarding loops).
pub const FORWARDED_METADATA_KEY: &str = "x-baton-forwarded";

/// Request metadata key a client sets (value `1`) on the first attempt of a write, and
/// only on it; a follower that forwards the request passes it on. It promises that no other
/// copy of this request id is on its way: a later attempt, or a copy delayed in the network,
/// comes without it. The leader may then answer a claim of a held key from a read, with no
/// log entry, since no copy that could later be granted remains. Without it (a retry, an
/// older client), every claim goes through the log, where its answer is remembered for
/// retries. See `node/src/server/baton.rs`, `Ctx::decide`.
pub const FIRST_ATTEMPT_METADATA_KEY: &str = "x-baton-first-attempt";

/// Request metadata key a client sets (value `1`) on an attempt of a write after one that
/// may have reached the cluster (it was sent and not refused by a node that says it proposed
/// nothing: a timeout, a reset, an outage answered by a node); a follower that forwards the
/// request passes it on. Such a retry is applied only if the cluster can match it to its
/// first attempt (its answer remembered, or the client's memory showing it never applied),
/// else refused as too old (UNKNOWN), never applied afresh (data format 15, `Op::Retry`).
/// Without it (an older client), a write unknown to the cluster is applied as a first
/// attempt. See `node/src/core/table.rs`, `LeaseTable::unmatched_retry`.
pub const RETRY_METADATA_KEY: &str = "x-baton-retry";

/// Response metadata key (value `1`) of a failure a node answers knowing that nothing of
/// the request was proposed (it is not the leader and knows none, it could not reach the
/// leader to forward it): the client's next attempt is still a first one, not a retry
/// (`RETRY_METADATA_KEY`).
pub const UNPROPOSED_METADATA_KEY: &str = "x-baton-unproposed";

/// Whether a call failed before its request was sent: the connection was refused. (Any
/// other failure, a timeout or a reset, may have delivered it.)
pub fn never_sent(status: &tonic::Status) -> bool {
    let mut cause = std::error::Error::source(status);
    while let Some(e) = cause {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// `Event.kind` of a watch's progress marker: sent by a node, at most once per
/// `WATCH_PROGRESS_INTERVAL_MS`, when it has moved past events of other prefixes since the
/// last thing it sent. Its revision is the last one the watcher has been brought up to date
/// with; clients resume from it + 1 and do not show it as an event.
pub const WATCH_PROGRESS_KIND: &str = "progress";

/// How often at most a node sends a watch progress marker.
pub const WATCH_PROGRESS_INTERVAL_MS: u64 = 1_000;

/// `LeaseEnding.what` of an endings stream's progress marker: no ending, only the revision
/// the stream is up to date with. The leader sends one every `ENDINGS_PROGRESS_INTERVAL_MS`
/// while it still hears from a quorum, so that a client can tell a live stream from one
/// that went quiet (a node cut off, a deposed leader) and reconnect.
pub const ENDINGS_PROGRESS: &str = "progress";

/// How often the leader sends an endings progress marker.
pub const ENDINGS_PROGRESS_INTERVAL_MS: u64 = 500;

/// A client that hears nothing (no ending, no progress) on an endings stream for this long
/// takes it as dead and connects again, to the leader it can find.
pub const ENDINGS_SILENCE_MS: u64 = 4 * ENDINGS_PROGRESS_INTERVAL_MS;

/// `LeaseEnding.what`: an operator revoked the lease.
pub const ENDED_REVOKED: &str = "revoked";
/// `LeaseEnding.what`: the taker of a handoff accepted it; the lease is the taker's.
pub const ENDED_HANDED_OFF: &str = "handed_off";
/// `LeaseEnding.what`: the leader expired the lease (no renewal reached it in time).
pub const ENDED_EXPIRED: &str = "expired";
/// `LeaseEnding.what` (only on a stream that asked for `grants`): not an ending but a
/// grant: the entry that freed the key granted it to this session from the key's line.
pub const GRANTED_FROM_LINE: &str = "granted";
