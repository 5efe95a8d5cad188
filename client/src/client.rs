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
use crate::record::{Record, RecordPatch, RecordView};
mod transport;

use crate::types::{
    AccessView, Board, ClaimOutcome, ClusterStatus, LeaseInfo, Membership, Probe, ReadMode,
    ReleaseOutcome, RenewOutcome, SnapshotTaken, TokenCheck,
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
    /// Index into `config.endpoints` of the endpoint to use when no leader is known. It
    /// moves on only when that endpoint fails, so a client sticks with a node that works.
    cursor: AtomicUsize,
    routing: Mutex<Routing>,
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
                cursor: AtomicUsize::new(0),
                routing: Mutex::new(Routing::default()),
            }),
        }
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
        let request = pb::ClaimRequest {
            key: key.to_owned(),
            holder: Some(self.holder(holder_name)),
            ttl_ms: duration_ms(ttl),
            request_id: Some(self.next_request_id()),
        };
        let clock = self.grant_clock();
        let answer = self
            .call("claim", request, |channel, request| async move {
                BatonClient::new(channel).claim(request).await
            })
            .await?;
        convert::claim_outcome(answer.body, clock)
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
        convert::release_outcome(answer.body)
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
        convert::board(answer.body)
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

    /// Operator force-release of `key`, recorded with `reason`. Returns the revoked lease, or
    /// `None` when the key was already free.
    pub async fn revoke(&self, key: &str, reason: &str) -> Result<Option<LeaseInfo>, Error> {
        let request = pb::RevokeRequest {
            key: key.to_owned(),
            reason: reason.to_owned(),
            request_id: Some(self.next_request_id()),
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

    /// Records that dispatcher `by` wants agent `to` on `key`, and why. Returns the record.
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
    ) -> Result<Record, Error> {
        let request = pb::AssignRequest {
            key: key.to_owned(),
            to: to.to_owned(),
            by: by.to_owned(),
            reason: reason.to_owned(),
            request_id: Some(self.next_request_id()),
        };
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
        Ok(answer
            .body
            .rules_ms
            .into_iter()
            .map(|(prefix, ms)| (prefix, Duration::from_millis(ms)))
            .collect())
    }

    /// Replaces the permissions policy every node enforces with `policy` (TOML; README
    /// "Permissions"), as one Raft entry. Needs `admin` on every key. An invalid policy is
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_tls_mismatch_is_named() {
        let plain_to_tls = "a:1: Internal: h2 protocol error: http2 error: transport error: \
                            connection error detected: frame with invalid size";
        assert!(super::transport::tls_hint(plain_to_tls).contains("give the client the nodes' CA"));
        let tls_to_plain = "a:1: Unavailable: received corrupt message of type InvalidContentType";
        assert!(super::transport::tls_hint(tls_to_plain).contains("speaks plaintext"));
        assert_eq!(
            super::transport::tls_hint("a:1: Unavailable: tcp connect error"),
            ""
        );
    }

    use super::*;
    use crate::fake_node::FakeNode;
    use crate::handoff::HandoffNote;
    use crate::record::RecordPatch;
    use baton_proto::LEADER_METADATA_KEY;
    use tonic::metadata::MetadataMap;
    use tonic::Code;

    async fn client(endpoints: &[&str]) -> Client {
        Client::connect(ClientConfig::with_endpoints(endpoints.iter().copied()))
            .await
            .unwrap()
    }

    fn metadata_naming(leader: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert(LEADER_METADATA_KEY, leader.parse().unwrap());
        metadata
    }

    #[test]
    fn request_futures_are_send_so_callers_can_spawn_them() {
        fn assert_send<T: Send>(_: &T) {}
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime.block_on(client(&["a:1"]));
        assert_send(&client.claim("k", "h", Duration::from_secs(1)));
        assert_send(&client.renew("k", 1));
        assert_send(&client.release("k", 1));
        assert_send(&client.probe("k", ReadMode::Stale));
        assert_send(&client.board("", 0, "", ReadMode::Stale));
        assert_send(&client.check_token("k", 1));
        assert_send(&client.revoke("k", "r"));
        assert_send(&client.cluster_status());
        assert_send(&client.status_of("a:1"));
        assert_send(&client.update("k", 1, RecordPatch::status("done")));
        assert_send(&client.assign("k", "a", "b", ""));
        assert_send(&client.record("k", ReadMode::Stale));
        assert_send(&client.history("k", ReadMode::Stale));
        assert_send(&client.offer("k", 1, "b", HandoffNote::default(), Duration::from_secs(1)));
        assert_send(&client.accept("k", "b", Duration::from_secs(1)));
        assert_send(&client.decline("k", "b"));
        assert_send(&client.cancel("k", 1));
        assert_send(&client.release_with_status("k", 1, "done"));
    }

    #[tokio::test]
    async fn connect_fails_only_on_bad_configuration() {
        assert!(matches!(
            Client::connect(ClientConfig::with_endpoints(["nonsense"])).await,
            Err(Error::Config(_))
        ));
        // Nothing listens here; connecting is lazy, so this still succeeds.
        let client = client(&["127.0.0.1:1"]).await;
        assert_eq!(client.endpoints(), ["127.0.0.1:1"]);
    }

    #[tokio::test]
    async fn request_ids_share_a_per_instance_session_and_count_up_from_one() {
        let c = client(&["a:1"]).await;
        let clone = c.clone();
        let first = c.next_request_id();
        let second = clone.next_request_id();
        assert_eq!(first.client_id, second.client_id);
        assert_eq!((first.seq, second.seq), (1, 2));
        // Two instances with the same client id (two CLI runs with --client-id) have their
        // own sessions, so one's seq 1 is not mistaken for a retry of the other's seq 1.
        let shared = |_| async {
            Client::connect(ClientConfig {
                client_id: Some("shared-id".into()),
                ..ClientConfig::with_endpoints(["a:1"])
            })
            .await
            .unwrap()
        };
        let (one, two) = (shared(1).await, shared(2).await);
        assert_eq!(one.client_id(), two.client_id());
        assert_ne!(one.next_request_id(), two.next_request_id());
    }

    #[tokio::test]
    async fn leader_hint_is_preferred_and_dropped_after_it_fails() {
        let client = client(&["a:1", "b:2", "c:3"]).await;
        assert_eq!(client.pick_endpoint(), "a:1");
        assert_eq!(
            client.learn_leader(&metadata_naming("http://c:3")),
            Some("c:3".into())
        );
        assert_eq!(client.leader_hint().as_deref(), Some("c:3"));
        assert_eq!(client.pick_endpoint(), "c:3");
        client.note_failure("c:3");
        assert_eq!(client.leader_hint(), None);
        // The rotation did not move: c:3 was not its current endpoint.
        assert_eq!(client.pick_endpoint(), "a:1");
    }

    #[tokio::test]
    async fn with_leader_hints_off_the_client_stays_on_its_endpoints() {
        let client = Client::connect(ClientConfig {
            follow_leader_hints: false,
            ..ClientConfig::with_endpoints(["proxy-a:1", "proxy-b:2"])
        })
        .await
        .unwrap();
        assert_eq!(client.learn_leader(&metadata_naming("10.0.0.3:7001")), None);
        assert_eq!(client.leader_hint(), None);
        assert_eq!(client.pick_endpoint(), "proxy-a:1");
    }

    #[tokio::test]
    async fn rotation_moves_past_a_failed_endpoint_and_wraps() {
        let client = client(&["a:1", "b:2"]).await;
        client.note_failure("a:1");
        assert_eq!(client.pick_endpoint(), "b:2");
        client.note_failure("b:2");
        assert_eq!(client.pick_endpoint(), "a:1");
    }

    #[tokio::test]
    async fn unreachable_node_is_not_adopted_as_leader_on_hearsay() {
        let client = client(&["a:1", "b:2"]).await;
        client.mark_suspect("b:2");
        assert_eq!(client.learn_leader(&metadata_naming("b:2")), None);
        assert_eq!(client.leader_hint(), None);
    }

    #[tokio::test]
    async fn malformed_leader_hint_is_ignored() {
        let client = client(&["a:1"]).await;
        assert_eq!(
            client.learn_leader(&metadata_naming("not an address")),
            None
        );
        assert_eq!(client.leader_hint(), None);
    }

    #[tokio::test]
    async fn unreachable_cluster_gives_unavailable_after_the_retry_deadline() {
        // Port 1 on localhost refuses connections, so every attempt fails fast.
        let client = Client::connect(ClientConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            retry_deadline: Duration::from_millis(300),
            ..ClientConfig::default()
        })
        .await
        .unwrap();
        let started = Instant::now();
        let error = client.probe("tasks/a", ReadMode::Linearizable).await;
        assert!(
            matches!(&error, Err(Error::Unavailable { last }) if last.contains("127.0.0.1:1")),
            "{error:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(
            client.status_of("127.0.0.1:1").await,
            Err(Error::Unavailable { .. })
        ));
    }

    #[tokio::test]
    async fn retries_reuse_the_request_id_and_follow_the_leader_hint() {
        let follower = Arc::new(FakeNode::default());
        let leader = Arc::new(FakeNode::default());
        let (follower_addr, follower_task) = follower.serve().await;
        let (leader_addr, leader_task) = leader.serve().await;
        // The follower cannot reach a leader but names it; the leader fails once (say, while
        // it confirms its leadership) and then answers.
        follower.fail_always(Code::Unavailable, "leader unreachable");
        follower.name_leader(leader_addr);
        leader.fail_next(Code::Unavailable, "no quorum yet");

        let client = client(&[&follower_addr.to_string(), &leader_addr.to_string()]).await;
        let ttl = Duration::from_secs(20);
        let before = Instant::now();
        let outcome = client.claim("tasks/a", "claude@host-a", ttl).await.unwrap();
        let after = Instant::now();

        let ClaimOutcome::Granted(grant) = outcome else {
            panic!("expected a grant, got {outcome:?}");
        };
        assert_eq!(grant.lease.holder_client_id, client.client_id());
        let margin_ttl = ttl.mul_f64(0.95);
        assert!(before + margin_ttl <= grant.safe_deadline);
        assert!(grant.safe_deadline <= after + margin_ttl);

        let leader_calls = leader.calls();
        assert_eq!(leader_calls.len(), 2, "{leader_calls:?}");
        let expected_id = Some((client.inner.retry_id.clone(), 1));
        assert!(leader_calls.iter().all(|c| c.request_id == expected_id));
        assert!(follower.calls().iter().all(|c| c.request_id == expected_id));
        assert_eq!(client.leader_hint(), Some(leader_addr.to_string()));

        // The next request goes straight to the leader it learned.
        let follower_calls = follower.calls().len();
        client
            .probe("tasks/a", ReadMode::Linearizable)
            .await
            .unwrap();
        assert_eq!(follower.calls().len(), follower_calls);
        assert_eq!(leader.calls().last().unwrap().method, "probe");

        follower_task.abort();
        leader_task.abort();
    }

    #[tokio::test]
    async fn invalid_argument_is_returned_at_once_without_retry() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        node.fail_always(Code::InvalidArgument, "key must be 1 to 512 bytes, got 0");
        let client = client(&[&addr.to_string()]).await;

        let error = client
            .claim("", "claude@host-a", Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            Error::InvalidArgument("key must be 1 to 512 bytes, got 0".into())
        );
        assert_eq!(node.calls().len(), 1);
        task.abort();
    }

    #[tokio::test]
    async fn a_silent_node_costs_one_attempt_timeout_then_the_next_endpoint_answers() {
        // The kernel completes TCP handshakes on this listener, but nothing ever answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let silent_addr = silent.local_addr().unwrap().to_string();
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        let client = Client::connect(ClientConfig {
            endpoints: vec![silent_addr.clone(), addr.to_string()],
            request_timeout: Duration::from_millis(200),
            ..ClientConfig::default()
        })
        .await
        .unwrap();

        let started = Instant::now();
        client.probe("tasks/a", ReadMode::Stale).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(node.calls().len(), 1);
        assert!(client.routing().suspects.contains_key(&silent_addr));
        // The client stays with the endpoint that answered.
        assert_eq!(client.pick_endpoint(), addr.to_string());
        task.abort();
        drop(silent);
    }

    #[tokio::test]
    async fn each_logical_request_gets_a_new_seq() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        let client = client(&[&addr.to_string()]).await;
        for _ in 0..2 {
            client
                .claim("tasks/a", "claude@host-a", Duration::from_secs(20))
                .await
                .unwrap();
        }
        let seqs: Vec<u64> = node
            .calls()
            .iter()
            .filter_map(|c| c.request_id.as_ref().map(|(_, seq)| *seq))
            .collect();
        assert_eq!(seqs, [1, 2]);
        task.abort();
    }

    #[tokio::test]
    async fn a_refused_update_is_a_typed_refusal_and_is_not_retried() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        node.fail_next(
            Code::FailedPrecondition,
            "stale token 5 for tasks/x: held by codex@b with token 9",
        );
        let client = client(&[&addr.to_string()]).await;
        let error = client
            .update("tasks/x", 5, RecordPatch::status("done"))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            Error::Refused(Box::new(crate::error::Refusal::other(
                "stale token 5 for tasks/x: held by codex@b with token 9"
            )))
        );
        assert_eq!(node.count("update"), 1);

        // Accepted: the patch reaches the node as given, and the record comes back.
        let record = client
            .update(
                "tasks/x",
                9,
                RecordPatch::status("done").with_field("pr", "42"),
            )
            .await
            .unwrap();
        assert_eq!(record.status, "done");
        assert_eq!(record.fields["pr"], "42");
        let patch = node.last_patch().unwrap();
        assert_eq!(patch.summary, None);
        assert_eq!(patch.remove_fields, Vec::<String>::new());
        task.abort();
    }

    #[tokio::test]
    async fn claims_name_the_assignment_and_assign_returns_it() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        let client = client(&[&addr.to_string()]).await;
        let record = client
            .assign("tasks/x", "alice", "dispatcher", "verify")
            .await
            .unwrap();
        assert_eq!(record.assigned_to.as_ref().unwrap().to, "alice");

        // Someone else's claim wins all the same, and is told about the assignment.
        let ClaimOutcome::Granted(grant) = client
            .claim("tasks/x", "bob", Duration::from_secs(10))
            .await
            .unwrap()
        else {
            panic!("expected a grant");
        };
        assert_eq!(grant.assignment.unwrap().to, "alice");

        node.assign_to(pb::Assignment {
            to: "carol".into(),
            by: "dispatcher".into(),
            ..Default::default()
        });
        node.hold_claims(1, Duration::from_secs(10));
        let outcome = client
            .claim("tasks/x", "carol", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            matches!(&outcome, ClaimOutcome::Held { assignment: Some(a), .. } if a.to == "carol"),
            "{outcome:?}"
        );
        task.abort();
    }

    #[tokio::test]
    async fn handoff_calls_carry_this_clients_id_and_a_safe_deadline() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        let client = client(&[&addr.to_string()]).await;
        let note = HandoffNote {
            commit: "4f2a9c0".into(),
            ..HandoffNote::default()
        };
        let offer = client
            .offer("tasks/x", 42, "bob", note, Duration::from_secs(600))
            .await
            .unwrap();
        assert_eq!(offer.key, "tasks/x");
        assert_eq!((offer.from_token, offer.to.as_str()), (42, "bob"));
        assert_eq!(offer.note.commit, "4f2a9c0");
        assert_eq!(offer.offer_ttl, Duration::from_secs(600));

        let ttl = Duration::from_secs(20);
        let before = Instant::now();
        let accepted = client.accept("tasks/x", "bob", ttl).await.unwrap();
        let after = Instant::now();
        assert_eq!(accepted.lease.holder_name, "bob");
        assert_eq!(accepted.lease.holder_client_id, client.client_id());
        assert_eq!(accepted.note.volatile_facts[0].check_command, "echo 5");
        let margin_ttl = ttl.mul_f64(0.95);
        assert!(before + margin_ttl <= accepted.safe_deadline);
        assert!(accepted.safe_deadline <= after + margin_ttl);

        assert_eq!(client.decline("tasks/x", "bob").await.unwrap(), 82);
        assert_eq!(client.cancel("tasks/x", 42).await.unwrap(), 83);
        // Every handoff call is a write with its own request id.
        let seqs: Vec<u64> = node
            .calls()
            .iter()
            .filter_map(|c| c.request_id.as_ref().map(|(_, seq)| *seq))
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        task.abort();
    }

    #[tokio::test]
    async fn accept_guarded_keeps_the_new_lease_alive() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        // Renewals answer with the TTL the taker asked for.
        node.assume_ttl(Duration::from_millis(600));
        let client = client(&[&addr.to_string()]).await;
        let (accepted, guard) = client
            .accept_guarded("tasks/x", "bob", Duration::from_millis(600))
            .await
            .unwrap();
        assert_eq!(guard.token(), accepted.lease.token);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(node.count("renew") >= 1, "{:?}", node.calls());
        assert!(guard.is_held());
        guard.release().await.unwrap();
        task.abort();
    }

    #[tokio::test]
    async fn record_history_and_release_with_status_reach_the_node() {
        let node = Arc::new(FakeNode::default());
        let (addr, task) = node.serve().await;
        let client = client(&[&addr.to_string()]).await;
        let view = client.record("tasks/x", ReadMode::Stale).await.unwrap();
        assert_eq!(view.key, "tasks/x");
        assert_eq!(view.record.status, "in_progress");
        assert_eq!(view.record.last_note, None);
        assert_eq!(view.lease.unwrap().holder_name, "other@host-b");

        let history = client.history("tasks/x", ReadMode::Stale).await.unwrap();
        assert_eq!(history.dropped, 5);
        let stints = history.stints();
        assert_eq!(stints.len(), 1);
        assert_eq!(stints[0].updates.len(), 1);

        client
            .release_with_status("tasks/x", 42, "done")
            .await
            .unwrap();
        assert_eq!(node.last_final_status().as_deref(), Some("done"));
        client.release("tasks/x", 42).await.unwrap();
        assert_eq!(node.last_final_status().as_deref(), Some(""));
        task.abort();
    }
}
