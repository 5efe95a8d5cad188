//! [`Client`]: the lease operations over gRPC, with leader caching, endpoint rotation and
//! retries that reuse one request id per logical request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::v1::cluster_client::ClusterClient;
use tonic::transport::Channel;

use crate::config::{ClientConfig, ValidConfig};
use crate::convert;
use crate::error::Error;
use crate::handoff::{Accepted, HandoffNote, OfferView};
use crate::history::History;
use crate::record::{Assigned, Record, RecordPatch, RecordView};
mod lines;
mod sets;
pub use sets::GuardedSet;
mod tasks;
mod transport;

use crate::types::{
    AccessView, Board, ClaimOutcome, ClusterStatus, LeaseInfo, Membership, Probe, ReadMode,
    ReleaseOutcome, RenewOutcome, Sharing, SnapshotTaken, TokenCheck,
};
pub(crate) use transport::describe_failure;

/// A handle on a baton cluster. Cheap to clone: clones share connections, the leader cache,
/// the client id and the request session.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    config: ValidConfig,
    /// Random id of this `Client` instance's retry slots (`RequestId.client_id`). Not the
    /// client id, which is the session every request acts as (`RequestId.session`) and may
    /// be given by the user and shared by several processes one after another (the CLI's
    /// `--client-id`), whose sequence numbers would then collide in the cluster's
    /// de-duplication table. A fresh id per instance keeps every (id, seq) unique.
    retry_id: String,
    /// Sequence number of the next mutating request; with the retry id it makes the
    /// request id that lets the cluster de-duplicate retries.
    next_seq: AtomicU64,
    /// Whether a write of this instance was answered: the cluster then remembers its retry
    /// id, and a retry it cannot match is refused as too old rather than mistaken for a
    /// new client's (`transport::call_until` marks retries only from then on).
    answered_write: std::sync::atomic::AtomicBool,
    /// Index into `config.endpoints` of the endpoint to use when no leader is known. It
    /// moves on only when that endpoint fails, so a client sticks with a node that works.
    cursor: AtomicUsize,
    routing: Mutex<Routing>,
    /// The session's endings stream and the guards that follow it (`crate::endings`).
    feed: Arc<crate::endings::Feed>,
}

/// Where to send requests; guarded by one mutex, held only for map lookups.
#[derive(Default)]
struct Routing {
    /// The leader's `host:port`, as the last node that named it said.
    leader: Option<String>,
    /// One lazily connecting channel per `host:port`.
    channels: HashMap<String, Channel>,
    /// Nodes that failed at the transport level, with the instant of the failure.
    suspects: HashMap<String, Instant>,
}

/// A successful reply and the endpoint that gave it.
struct Answer<T> {
    body: T,
    endpoint: String,
}

impl Client {
    /// Builds a client from `config`. Connections are made lazily by the first request, so
    /// this fails only on an unusable configuration ([`Error::Config`]): no endpoints, a
    /// malformed endpoint, a bad client id or timeout.
    pub async fn connect(config: ClientConfig) -> Result<Client, Error> {
        Ok(Client::from_valid(config.validate()?))
    }

    /// Builds a client from an already validated configuration.
    pub fn from_valid(config: ValidConfig) -> Client {
        Client {
            inner: Arc::new(Inner {
                config,
                retry_id: crate::config::random_client_id(),
                next_seq: AtomicU64::new(1),
                answered_write: std::sync::atomic::AtomicBool::new(false),
                cursor: AtomicUsize::new(0),
                routing: Mutex::new(Routing::default()),
                feed: Arc::default(),
            }),
        }
    }

    /// The session's endings feed, shared by clones.
    pub(crate) fn feed(&self) -> Arc<crate::endings::Feed> {
        Arc::clone(&self.inner.feed)
    }

    /// This client's id: the `Holder.client_id` of its claims.
    pub fn client_id(&self) -> &str {
        &self.inner.config.client_id
    }

    /// The configured endpoints, normalised to `host:port`.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.config.endpoints
    }

    /// The leader's `host:port` as last learned from a node, if any.
    pub fn leader_hint(&self) -> Option<String> {
        self.routing().leader.clone()
    }

    /// Claims `key` for `holder_name` (with this client's id) for `ttl`.
    ///
    /// A claim of a key this client already holds returns the same token with the lease
    /// renewed (`already_held`). A key held by anyone else, including another process with the
    /// same name, is refused with the holder's lease: stand down.
    pub async fn claim(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome, Error> {
        self.claim_permit(key, holder_name, ttl, 1).await
    }

    /// Claims one of `permits` permits of `key` (a counting semaphore: up to `permits`
    /// holders at once): granted, the caller's own lease with its own fencing token, renewed
    /// and released with it as any lease is ([`Grant::permits`] lists every holder). Held,
    /// every holder and the one whose permit ends first. `permits` is fixed by the first
    /// holder while any holds: another number is refused (`RefusalReason::PermitsMismatch`,
    /// naming the key's). 1 is a plain claim; 2 to [`PERMITS_MAX`] needs data format 12 on
    /// every member. [`Sharing::Shared`] shares the key ([`Client::claim_shared`]).
    ///
    /// [`PERMITS_MAX`]: crate::PERMITS_MAX
    pub async fn claim_permit(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
    ) -> Result<ClaimOutcome, Error> {
        let (permits, shared) = wire_sharing(permits.into())?;
        let request = pb::ClaimRequest {
            key: key.to_owned(),
            holder: Some(self.holder(holder_name)),
            ttl_ms: duration_ms(ttl),
            request_id: Some(self.next_request_id()),
            permits,
            shared,
        };
        let clock = self.grant_clock();
        let answer = self
            .call("claim", request, |channel, request| async move {
                BatonClient::new(channel).claim(request).await
            })
            .await?;
        convert::claim_outcome(answer.body, clock)
    }

    /// Shares `key` with its other shared holders (many readers or one writer): granted
    /// while no exclusive holder holds it and no exclusive claimant waits in its line (a
    /// writer in line stops new shared grants behind it), as many as
    /// [`SHARED_HOLDERS_MAX`] at once, each with its own lease and fencing token. Only an
    /// exclusive holder may write the key's record. Needs data format 13 on every member.
    ///
    /// [`SHARED_HOLDERS_MAX`]: crate::SHARED_HOLDERS_MAX
    pub async fn claim_shared(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome, Error> {
        self.claim_permit(key, holder_name, ttl, Sharing::Shared)
            .await
    }

    /// Extends the lease on `key` held with `token`; the token stays the same.
    pub async fn renew(&self, key: &str, token: u64) -> Result<RenewOutcome, Error> {
        self.renew_until(key, token, self.retry_deadline_from_now())
            .await
    }

    /// [`Client::renew`], retried until `deadline` instead of the configured retry deadline.
    ///
    /// A lease guard renews with its safe deadline as the retry deadline: an answer that
    /// comes after it is of no use, since the guard has already reported the lease lost.
    pub(crate) async fn renew_until(
        &self,
        key: &str,
        token: u64,
        deadline: Instant,
    ) -> Result<RenewOutcome, Error> {
        let request = pb::RenewRequest {
            key: key.to_owned(),
            token,
            request_id: Some(self.next_request_id()),
        };
        let clock = self.grant_clock();
        let answer = self
            .call_until("renew", request, deadline, |channel, request| async move {
                BatonClient::new(channel).renew(request).await
            })
            .await?;
        convert::renew_outcome(answer.body, clock)
    }

    /// Frees `key` if `token` is its current one.
    pub async fn release(&self, key: &str, token: u64) -> Result<ReleaseOutcome, Error> {
        self.release_with_status(key, token, "").await
    }

    /// [`Client::release`], setting the record's status to `final_status` in the same log
    /// entry (`""` leaves it), so that the last word on the record and the end of the stint
    /// cannot be separated: a record never says `in_progress` for a key nobody holds
    /// because the holder died between the two writes.
    pub async fn release_with_status(
        &self,
        key: &str,
        token: u64,
        final_status: &str,
    ) -> Result<ReleaseOutcome, Error> {
        Ok(self.release_at(key, token, final_status).await?.0)
    }

    /// [`Client::release_with_status`], and the revision the release was decided at: a
    /// waiter the line handed the key (or the permit) on to in the same write holds it with
    /// this revision as its token.
    pub async fn release_at(
        &self,
        key: &str,
        token: u64,
        final_status: &str,
    ) -> Result<(ReleaseOutcome, u64), Error> {
        let request = pb::ReleaseRequest {
            key: key.to_owned(),
            token,
            request_id: Some(self.next_request_id()),
            final_status: final_status.to_owned(),
        };
        let answer = self
            .call("release", request, |channel, request| async move {
                BatonClient::new(channel).release(request).await
            })
            .await?;
        let revision = answer.body.revision;
        Ok((convert::release_outcome(answer.body)?, revision))
    }

    /// Reads the lease on `key`, if any.
    pub async fn probe(&self, key: &str, mode: ReadMode) -> Result<Probe, Error> {
        let request = pb::ProbeRequest {
            key: key.to_owned(),
            stale: mode == ReadMode::Stale,
        };
        let answer = self
            .call("probe", request, |channel, request| async move {
                BatonClient::new(channel).probe(request).await
            })
            .await?;
        convert::probe(answer.body)
    }

    /// Lists held keys starting with `prefix` (`""` for all), in key order, at most `limit`
    /// of them (`0` for the server's maximum), after the key `start_after` (`""` to start
    /// at the beginning). Page on with the last key while [`Board::truncated`] is set.
    pub async fn board(
        &self,
        prefix: &str,
        limit: u32,
        start_after: &str,
        mode: ReadMode,
    ) -> Result<Board, Error> {
        let request = pb::BoardRequest {
            prefix: prefix.to_owned(),
            limit,
            start_after: start_after.to_owned(),
            stale: mode == ReadMode::Stale,
        };
        let answer = self
            .call("board", request, |channel, request| async move {
                BatonClient::new(channel).board(request).await
            })
            .await?;
        convert::board(answer.body, answer.endpoint)
    }

    /// Asks whether `token` is the current one of `key`: what a resource guarded by fencing
    /// tokens asks before it acts for a caller. Always linearizable.
    pub async fn check_token(&self, key: &str, token: u64) -> Result<TokenCheck, Error> {
        let request = pb::CheckTokenRequest {
            key: key.to_owned(),
            token,
        };
        let answer = self
            .call("check_token", request, |channel, request| async move {
                BatonClient::new(channel).check_token(request).await
            })
            .await?;
        convert::token_check(answer.body)
    }

    /// Operator force-release of `key`, recorded with `reason`: [`Client::revoke_with`]
    /// holding the key back (the default). Returns the revoked lease, or `None` when the key
    /// was already free.
    pub async fn revoke(&self, key: &str, reason: &str) -> Result<Option<LeaseInfo>, Error> {
        Ok(self.revoke_with(key, reason, false).await?.revoked)
    }

    /// Operator force-release of `key`, recorded with `reason`. The lease ends at once (its
    /// holder is told, its token refused). Unless `now`, the key then stays unclaimable for
    /// the lease's TTL, counted by each node from its apply of the revoke, so that no one is
    /// granted it while the revoked holder may still believe it holds it (a holder cut off
    /// from the cluster learns only at its safe deadline). `now` frees the key at once: for
    /// resources that check fencing tokens. Without `now`, every member must read data
    /// format 8, else [`Error::Refused`] (`format_pending`).
    pub async fn revoke_with(
        &self,
        key: &str,
        reason: &str,
        now: bool,
    ) -> Result<crate::types::Revoked, Error> {
        let request = pb::RevokeRequest {
            key: key.to_owned(),
            reason: reason.to_owned(),
            request_id: Some(self.next_request_id()),
            now,
        };
        let answer = self
            .call("revoke", request, |channel, request| async move {
                BatonClient::new(channel).revoke(request).await
            })
            .await?;
        convert::revoked(answer.body)
    }

    /// Changes the record of `key`, if `token` is the key's current one (a fenced write).
    /// Returns the record as changed.
    ///
    /// A stale token, or a record frozen by a pending handoff offer, is refused with
    /// [`Error::Refused`] naming the current holder and token: the caller does not own the
    /// account of the work and must not revise it.
    pub async fn update(&self, key: &str, token: u64, patch: RecordPatch) -> Result<Record, Error> {
        let request = pb::UpdateRequest {
            key: key.to_owned(),
            token,
            patch: Some(convert::patch_to_pb(patch)),
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("update", request, |channel, request| async move {
                BatonClient::new(channel).update(request).await
            })
            .await?;
        convert::updated(key, answer.body)
    }

    /// Records that dispatcher `by` wants agent `to` on `key`, and why. Returns the record
    /// and who holds the key now.
    ///
    /// An assignment is routing metadata: it reserves nothing, needs no token, and anyone's
    /// claim still wins the key. Claims answer with it, so a claimant learns that a
    /// dispatcher is waiting on someone else.
    pub async fn assign(
        &self,
        key: &str,
        to: &str,
        by: &str,
        reason: &str,
    ) -> Result<Assigned, Error> {
        let request = pb::AssignRequest {
            key: key.to_owned(),
            to: to.to_owned(),
            by: by.to_owned(),
            reason: reason.to_owned(),
            request_id: Some(self.next_request_id()),
            clear: false,
        };
        self.send_assign(key, request).await
    }

    /// Clears `key`'s assignment, recorded in its history as `unassigned` by `by`, with the
    /// reason. A key with no assignment is left as it is (no event). Returns the record.
    ///
    /// Needs every member on data format 5: during a rolling upgrade the leader refuses it
    /// (`FailedPrecondition`, naming the nodes not yet upgraded) and nothing changes.
    pub async fn unassign(&self, key: &str, by: &str, reason: &str) -> Result<Assigned, Error> {
        let request = pb::AssignRequest {
            key: key.to_owned(),
            to: String::new(),
            by: by.to_owned(),
            reason: reason.to_owned(),
            request_id: Some(self.next_request_id()),
            clear: true,
        };
        self.send_assign(key, request).await
    }

    async fn send_assign(&self, key: &str, request: pb::AssignRequest) -> Result<Assigned, Error> {
        let answer = self
            .call("assign", request, |channel, request| async move {
                BatonClient::new(channel).assign(request).await
            })
            .await?;
        convert::assigned(key, answer.body)
    }

    /// Operator setting: keys under `prefix` stay unclaimable for `delay` after an involuntary
    /// expiry (a zero `delay` removes the rule). Returns every rule after the change.
    pub async fn set_quarantine(
        &self,
        prefix: &str,
        delay: Duration,
    ) -> Result<std::collections::BTreeMap<String, Duration>, Error> {
        let request = pb::SetQuarantineRequest {
            prefix: prefix.to_owned(),
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("set_quarantine", request, |channel, request| async move {
                BatonClient::new(channel).set_quarantine(request).await
            })
            .await?;
        Ok(rules_from_ms(answer.body.rules_ms))
    }

    /// The quarantine rules in force: prefix → delay after an involuntary expiry.
    pub async fn quarantine_rules(
        &self,
        mode: ReadMode,
    ) -> Result<std::collections::BTreeMap<String, Duration>, Error> {
        let request = pb::GetQuarantineRequest {
            stale: mode == ReadMode::Stale,
        };
        let answer = self
            .call("get_quarantine", request, |channel, request| async move {
                BatonClient::new(channel).get_quarantine(request).await
            })
            .await?;
        Ok(rules_from_ms(answer.body.rules_ms))
    }

    /// Replaces the permissions policy every node enforces with `policy` (TOML;
    /// docs/security.md, "Permissions"), as one Raft entry. Needs `admin` on every key. An invalid policy is
    /// refused ([`Error::InvalidArgument`], saying where) and nothing changes.
    pub async fn set_access(&self, policy: &str) -> Result<AccessView, Error> {
        self.change_access(policy.to_owned(), false).await
    }

    /// Removes the permissions policy: every authenticated principal may then do
    /// everything. Needs `admin` on every key.
    pub async fn clear_access(&self) -> Result<AccessView, Error> {
        self.change_access(String::new(), true).await
    }

    async fn change_access(&self, policy: String, clear: bool) -> Result<AccessView, Error> {
        let request = pb::SetAccessRequest {
            policy,
            clear,
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("set_access", request, |channel, request| async move {
                BatonClient::new(channel).set_access(request).await
            })
            .await?;
        Ok(convert::access_view(answer.body))
    }

    /// The permissions policy in force and its latest changes. Needs `admin` on every key.
    pub async fn access(&self, mode: ReadMode) -> Result<AccessView, Error> {
        let request = pb::GetAccessRequest {
            stale: mode == ReadMode::Stale,
        };
        let answer = self
            .call("get_access", request, |channel, request| async move {
                BatonClient::new(channel).get_access(request).await
            })
            .await?;
        Ok(convert::access_view(answer.body))
    }

    /// Reads the record of `key` and its lease in one read.
    pub async fn record(&self, key: &str, mode: ReadMode) -> Result<RecordView, Error> {
        let request = pb::GetRecordRequest {
            key: key.to_owned(),
            stale: mode == ReadMode::Stale,
        };
        let answer = self
            .call("get_record", request, |channel, request| async move {
                BatonClient::new(channel).get_record(request).await
            })
            .await?;
        convert::record_view(key, answer.body)
    }

    /// Reads the history of `key`, oldest event first; see [`History::stints`] for who held
    /// it when, and what each holder wrote.
    pub async fn history(&self, key: &str, mode: ReadMode) -> Result<History, Error> {
        let request = pb::HistoryRequest {
            key: key.to_owned(),
            stale: mode == ReadMode::Stale,
        };
        let answer = self
            .call("history", request, |channel, request| async move {
                BatonClient::new(channel).history(request).await
            })
            .await?;
        Ok(convert::history(key, answer.body))
    }

    /// Offers `key`, held with `token`, to the agent named `to`, with a status note. The
    /// caller keeps the key (and must keep renewing it) until `to` accepts; meanwhile the
    /// record is frozen. The offer lapses after `offer_ttl` (1 s to 1 h) if nobody answers.
    ///
    /// Refused ([`Error::Refused`]) for a stale token or when an offer is already pending.
    pub async fn offer(
        &self,
        key: &str,
        token: u64,
        to: &str,
        note: HandoffNote,
        offer_ttl: Duration,
    ) -> Result<OfferView, Error> {
        let request = pb::OfferRequest {
            key: key.to_owned(),
            token,
            to: to.to_owned(),
            note: Some(convert::note_to_pb(note)),
            offer_ttl_ms: duration_ms(offer_ttl),
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("offer", request, |channel, request| async move {
                BatonClient::new(channel).offer(request).await
            })
            .await?;
        convert::offered(key, answer.body)
    }

    /// Accepts the offer of `key` addressed to `holder_name`, as this client (its client id):
    /// the caller holds the key with a new token for `ttl`, and the giver's token is dead
    /// from the same log entry on. Returns the new lease, its safe deadline (counted like a
    /// claim's) and the giver's note.
    ///
    /// Refused ([`Error::Refused`]) when there is no offer or it is addressed to another name.
    pub async fn accept(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
    ) -> Result<Accepted, Error> {
        let request = pb::AcceptRequest {
            key: key.to_owned(),
            holder: Some(self.holder(holder_name)),
            ttl_ms: duration_ms(ttl),
            request_id: Some(self.next_request_id()),
        };
        let clock = self.grant_clock();
        let answer = self
            .call("accept", request, |channel, request| async move {
                BatonClient::new(channel).accept(request).await
            })
            .await?;
        convert::accepted(answer.body, clock)
    }

    /// Declines the offer of `key` addressed to `holder_name`: the giver keeps the key.
    /// Returns the revision of the decline.
    pub async fn decline(&self, key: &str, holder_name: &str) -> Result<u64, Error> {
        let request = pb::DeclineRequest {
            key: key.to_owned(),
            holder: Some(self.holder(holder_name)),
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("decline", request, |channel, request| async move {
                BatonClient::new(channel).decline(request).await
            })
            .await?;
        Ok(answer.body.revision)
    }

    /// Withdraws the pending offer of `key`, made with `token`: the caller keeps the key and
    /// the record thaws. Returns the revision of the cancellation.
    pub async fn cancel(&self, key: &str, token: u64) -> Result<u64, Error> {
        let request = pb::CancelRequest {
            key: key.to_owned(),
            token,
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("cancel", request, |channel, request| async move {
                BatonClient::new(channel).cancel(request).await
            })
            .await?;
        Ok(answer.body.revision)
    }

    /// The status of whichever node answers first (the leader if known), retried like any
    /// read. [`ClusterStatus::endpoint`] says which node it is.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, Error> {
        let answer = self
            .call(
                "status",
                pb::StatusRequest {},
                |channel, request| async move { ClusterClient::new(channel).status(request).await },
            )
            .await?;
        let status = convert::cluster_status(answer.endpoint, answer.body);
        self.learn_leader_from_status(&status);
        Ok(status)
    }

    /// The members and the leader, as the first node to answer lists them.
    pub async fn members(&self) -> Result<Membership, Error> {
        let answer = self
            .call("members", pb::MembersRequest {}, |channel, request| async move {
                ClusterClient::new(channel).members(request).await
            })
            .await?;
        Ok(convert::membership(answer.body))
    }

    /// Adds node `node_id` at `addr` (host:port): the leader adds it as a learner, waits for
    /// it to catch up, then makes it a voter. Waits as long as the retry deadline allows;
    /// repeating the call after a timeout resumes.
    pub async fn add_member(&self, node_id: u64, addr: &str) -> Result<Membership, Error> {
        let request = pb::AddMemberRequest {
            node_id,
            addr: addr.to_owned(),
            incarnation: 0,
        };
        let answer = self
            .call("add_member", request, |channel, request| async move {
                ClusterClient::new(channel).add_member(request).await
            })
            .await?;
        Ok(convert::membership(answer.body))
    }

    /// Removes node `node_id` from the cluster (voter or learner).
    pub async fn remove_member(&self, node_id: u64) -> Result<Membership, Error> {
        let request = pb::RemoveMemberRequest { node_id };
        let answer = self
            .call("remove_member", request, |channel, request| async move {
                ClusterClient::new(channel).remove_member(request).await
            })
            .await?;
        Ok(convert::membership(answer.body))
    }

    /// Has the node at `endpoint` build a snapshot now; answers once it is on disk.
    pub async fn snapshot_at(&self, endpoint: &str) -> Result<SnapshotTaken, Error> {
        let (endpoint, answer) = self
            .once_at(endpoint, pb::SnapshotRequest {}, |channel, request| async move {
                ClusterClient::new(channel).snapshot(request).await
            })
            .await?;
        Ok(SnapshotTaken {
            endpoint,
            node_id: answer.node_id,
            snapshot_index: answer.snapshot_index,
            snapshot_bytes: answer.snapshot_bytes,
        })
    }

    /// A backup of the whole cluster state from the leader, as of a linearizable read: the
    /// bytes of a backup file for `baton-node restore`.
    pub async fn backup(&self) -> Result<Vec<u8>, Error> {
        let answer = self
            .call(
                "backup",
                pb::BackupRequest {},
                |channel, request| async move {
                    let mut chunks = ClusterClient::new(channel)
                        .backup(request)
                        .await?
                        .into_inner();
                    let mut bytes = Vec::new();
                    while let Some(chunk) = chunks.message().await? {
                        bytes.extend_from_slice(&chunk.data);
                    }
                    Ok(tonic::Response::new(bytes))
                },
            )
            .await?;
        Ok(answer.body)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.client_id())
            .field("endpoints", &self.endpoints())
            .field("leader_hint", &self.leader_hint())
            .finish_non_exhaustive()
    }
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Quarantine rules as the wire carries them (prefix -> ms) to durations.
fn rules_from_ms(
    rules_ms: std::collections::HashMap<String, u64>,
) -> std::collections::BTreeMap<String, Duration> {
    rules_ms
        .into_iter()
        .map(|(prefix, ms)| (prefix, Duration::from_millis(ms)))
        .collect()
}

#[cfg(test)]
mod tests;

/// How a claim or a wait asks for `sharing` on the wire: `(permits, shared)`.
pub(crate) fn wire_sharing(sharing: Sharing) -> Result<(u32, bool), Error> {
    match sharing {
        Sharing::Shared => Ok((0, true)),
        Sharing::Permits(n) if (1..=crate::PERMITS_MAX).contains(&n) => Ok((n, false)),
        Sharing::Permits(n) => Err(Error::InvalidArgument(format!(
            "permits {n}: give 1 (a plain claim) to {}",
            crate::PERMITS_MAX
        ))),
    }
}
