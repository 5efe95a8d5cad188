//! The `Baton` gRPC service: the lease operations.
//!
//! Any node accepts any request. Writes must be proposed by the leader, and linearizable
//! reads must be confirmed by it (openraft's read-index: the leader checks with a quorum that
//! it still leads, then waits until it has applied up to that point), so a follower forwards
//! both to the leader, once, and passes the answer back with the leader's address in the
//! `x-baton-leader` metadata so the client can go there directly next time. A forwarded
//! request that reaches a node which is not the leader (leadership moved) is answered
//! UNAVAILABLE rather than forwarded again: no loops, and the client's retry finds the new
//! leader. `stale` reads are served from the local state machine by any node.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::{FORWARDED_METADATA_KEY, LEADER_METADATA_KEY};
use openraft::error::{CheckIsLeaderError, RaftError};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::convert::{self, TtlBounds};
use super::proposer::{ProposeError, Proposer};
use crate::core::access::Policy;
use crate::core::limits::{BOARD_LEASES_MAX, PROPOSALS_QUEUED_MAX, REQUEST_BYTES_MAX};
use crate::core::validate;
use crate::core::{LogCommand, Op, Outcome, Sender};
use crate::expiry::wall_clock_unix_ms;
use crate::limits::{WatchCounts, WriteRate};
use crate::raft_types::Raft;
use crate::store::{SmState, StateMachine};
use crate::watch::WATCH_BATCH_EVENTS_MAX;

/// How long a forwarded request may take at the leader.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause between attempts to confirm leadership when a quorum round fell short.
pub const READ_RETRY_BACKOFF: Duration = Duration::from_millis(20);

/// Why this node did not answer a request itself.
enum Refusal {
    /// Only the leader can do this; `leader` is its address if known.
    NotLeader {
        leader: Option<String>,
    },
    Status(Status),
}

impl From<Status> for Refusal {
    fn from(s: Status) -> Self {
        Refusal::Status(s)
    }
}

/// An outcome that answers the request, or the status that says it does not: bad input
/// (`INVALID_ARGUMENT`, nothing changed), a refusal (`FAILED_PRECONDITION`, nothing changed),
/// or a retry too old to tell whether the first attempt was applied (`UNKNOWN`: no answer, the
/// outcome is unknown; a refusal code would tell the caller "nothing changed", which may be
/// false).
fn answer_or_status(outcome: Outcome, sm: &StateMachine) -> Result<Outcome, Status> {
    match outcome {
        Outcome::Invalid { message } => Err(Status::invalid_argument(message)),
        Outcome::Refused { refusal } => Err(convert::refusal_status(&refusal, sm)),
        Outcome::RefusedText { message } => Err(Status::failed_precondition(message)),
        Outcome::RetryTooOld { message } => Err(Status::unknown(message)),
        outcome => Ok(outcome),
    }
}

/// What the handlers share.
pub struct Ctx {
    pub raft: Raft,
    pub sm: StateMachine,
    pub ttl: TtlBounds,
    pub write_timeout: Duration,
    /// Batches writes into log entries.
    proposer: Proposer,
    metrics: Arc<crate::admin::Metrics>,
    /// One lazily connected client per leader address, for forwarding, with the TLS
    /// generation it was made with.
    leaders: Mutex<HashMap<String, (u64, BatonClient<Channel>)>>,
    /// TLS toward the leader when forwarding, if on.
    tls: Arc<crate::tls::Outbound>,
    /// Who is asking, and whether they must say (`super::auth`).
    pub auth: super::auth::Auth,
    /// Open watch streams by client address, and their limit per address.
    watches: Arc<WatchCounts>,
    watches_per_address_max: usize,
    /// Writes per second per client id.
    write_rate: WriteRate,
    /// Writes per second per principal (auth on).
    principal_rate: WriteRate,
}

/// What a node asks of clients: who they are (`super::auth`) and the limits it enforces
/// per client (`crate::limits`).
#[derive(Debug, Clone)]
pub struct ClientRules {
    pub auth: super::auth::Auth,
    pub watches_per_address_max: usize,
    pub writes_per_second: u32,
    pub principal_writes_per_second: u32,
}

impl Ctx {
    pub fn new(
        raft: Raft,
        sm: StateMachine,
        ttl: TtlBounds,
        write_timeout: Duration,
        metrics: Arc<crate::admin::Metrics>,
        tls: Arc<crate::tls::Outbound>,
        rules: ClientRules,
    ) -> Ctx {
        Ctx {
            tls,
            auth: rules.auth,
            watches: Arc::default(),
            watches_per_address_max: rules.watches_per_address_max,
            write_rate: WriteRate::new(rules.writes_per_second),
            principal_rate: WriteRate::new(rules.principal_writes_per_second),
            proposer: Proposer::start(raft.clone(), metrics.clone()),
            metrics,
            raft,
            sm,
            ttl,
            write_timeout,
            leaders: Mutex::default(),
        }
    }

    /// The refusal of a write by a principal past its `principal_writes_per_second`.
    fn principal_limited(&self, principal: Option<&str>, writes: bool) -> Option<Status> {
        let p = principal.filter(|_| writes)?;
        if self.principal_rate.allow(p, Instant::now()) {
            return None;
        }
        self.metrics.requests_limited.inc();
        Some(Status::resource_exhausted(format!(
            "{p:?} is writing faster than this cluster allows (principal_writes_per_second); \
             slow down"
        )))
    }

    /// Whether this node is the leader (as its Raft metrics say).
    fn leads(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.current_leader == Some(m.id)
    }

    /// The leader's address, if another node leads.
    fn leader_elsewhere(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader.filter(|l| *l != m.id)?;
        let node = m.membership_config.membership().get_node(&leader)?;
        Some(node.addr.clone())
    }

    fn leader_client(&self, addr: &str) -> Result<BatonClient<Channel>, Status> {
        let mut leaders = self.leaders.lock().expect("leader cache lock");
        if let Some((made, c)) = leaders.get(addr) {
            if *made == self.tls.generation() {
                return Ok(c.clone());
            }
        }
        let (generation, tls) = self.tls.current();
        let channel = crate::tls::channel(addr, tls.as_ref(), Duration::from_secs(1))
            .map_err(|e| Status::internal(format!("leader address {addr:?} is unusable: {e}")))?;
        let client = BatonClient::new(channel)
            .max_decoding_message_size(REQUEST_BYTES_MAX * 64)
            .max_encoding_message_size(REQUEST_BYTES_MAX);
        leaders.insert(addr.to_string(), (generation, client.clone()));
        Ok(client)
    }

    /// Proposes an operation sent by `origin` (its request id and session) as `principal`,
    /// and waits for the outcome of its apply.
    async fn propose(
        &self,
        origin: Option<convert::Origin>,
        op: Op,
        principal: Option<String>,
    ) -> Result<(Outcome, u64), Refusal> {
        if let Some(o) = &origin {
            if !self.write_rate.allow(&o.id.client_id, Instant::now()) {
                self.metrics.requests_limited.inc();
                return Err(Status::resource_exhausted(format!(
                    "client {} is writing faster than this cluster allows \
                     (client_writes_per_second); slow down",
                    o.id.client_id
                ))
                .into());
            }
        }
        let (request_id, sender) = match origin {
            Some(o) => (
                Some(o.id),
                Some(Sender {
                    client_id: o.session,
                    principal,
                }),
            ),
            None => (None, None),
        };
        let cmd = LogCommand {
            request_id,
            leader_unix_ms: wall_clock_unix_ms(),
            op,
            sender,
        };
        let written = tokio::time::timeout(self.write_timeout, self.proposer.propose(cmd)).await;
        match written {
            Err(_) => Err(Status::unavailable(format!(
                "the write did not commit within {} ms (no quorum?); retry with the same request id",
                self.write_timeout.as_millis()
            ))
            .into()),
            Ok(Ok(applied)) => match answer_or_status(applied.outcome, &self.sm) {
                Ok(outcome) => Ok((outcome, applied.revision)),
                Err(status) => Err(status.into()),
            },
            Ok(Err(ProposeError::NotLeader(leader))) => Err(Refusal::NotLeader { leader }),
            Ok(Err(ProposeError::Busy)) => {
                self.metrics.requests_limited.inc();
                Err(Status::resource_exhausted(format!(
                    "the leader has {PROPOSALS_QUEUED_MAX} writes waiting for the log \
                     (PROPOSALS_QUEUED_MAX); nothing was applied: retry with backoff"
                ))
                .into())
            }
            Ok(Err(ProposeError::Failed(e))) => {
                Err(Status::unavailable(format!("write failed: {e}")).into())
            }
        }
    }

    /// A watch from a revision this node has not reached: a revision still to come would
    /// hold a watch slot until the cluster gets there, so it is refused unless the cluster is
    /// there already. The leader knows (after a linearizable read, every revision it has not
    /// applied is in the future); a follower may only be behind, so it waits a moment for its
    /// copy, then says so (UNAVAILABLE: retry, here or elsewhere).
    async fn future_watch(&self, from: u64) -> Result<(), Status> {
        let hub = self.sm.watch_hub();
        let latest = || hub.latest();
        if self.linearize().await.is_ok() {
            if from > latest() + 1 {
                return Err(Status::invalid_argument(format!(
                    "from_revision {from} is beyond the cluster's revision {}: resume from the \
                     last revision you received + 1 (or 0 for what comes next)",
                    latest()
                )));
            }
            return Ok(());
        }
        let mut grew = hub.subscribe();
        let _ = tokio::time::timeout(self.write_timeout, async {
            while from > latest() + 1 {
                if grew.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if from <= latest() + 1 {
            return Ok(());
        }
        Err(unavailable(
            self.leader_elsewhere().as_deref(),
            &format!(
                "this node is at revision {}, behind from_revision {from}; retry (the leader \
                 refuses a from_revision beyond the cluster's revision + 1)",
                latest()
            ),
        ))
    }

    /// A renew or release whose token is above this node's revision: a grant this node has
    /// not seen. After a linearizable read on the leader, a token still above the revision
    /// was never granted (tokens are revisions), so it is answered as lost from that read,
    /// with no log entry. `None`: the token is not from the future; go on and propose.
    async fn never_granted(
        &self,
        key: &str,
        token: u64,
    ) -> Result<Option<(Option<crate::core::Lease>, u64)>, Refusal> {
        if token <= self.sm.read(revision) {
            return Ok(None);
        }
        self.linearize().await?;
        let (lease, now) = self.sm.read(|s| (s.table.lease(key).cloned(), revision(s)));
        Ok((token > now).then_some((lease, now)))
    }

    /// Confirms this node is the leader and has applied everything committed before now.
    async fn linearize(&self) -> Result<(), Refusal> {
        let deadline = Instant::now() + self.write_timeout;
        loop {
            match self.raft.ensure_linearizable().await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    return Err(Refusal::NotLeader {
                        leader: f.leader_node.map(|n| n.addr),
                    })
                }
                // One quorum round falls short on a blip (openraft #1852): try again.
                Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(READ_RETRY_BACKOFF).await
                }
                Err(e) => {
                    return Err(Status::unavailable(format!(
                    "cannot confirm leadership for a linearizable read ({e}); retry, or read stale"
                ))
                    .into())
                }
            }
        }
    }

    fn lease(&self, lease: &crate::core::Lease) -> pb::Lease {
        convert::lease(lease, self.sm.countdowns())
    }

    async fn claim(
        &self,
        req: pb::ClaimRequest,
        who: Option<String>,
    ) -> Result<pb::ClaimResponse, Refusal> {
        let (id, op) = convert::claim(req, self.ttl)?;
        let (outcome, revision) = self.propose(id, op, who).await?;
        self.metrics.claim(match outcome {
            Outcome::Granted { .. } => "granted",
            _ => "held",
        });
        use pb::claim_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Granted {
                lease,
                already_held,
                assignment,
            } => O::Granted(pb::Granted {
                lease: Some(self.lease(&lease)),
                already_held,
                assignment: assignment.as_ref().map(convert::assignment),
            }),
            Outcome::Held {
                lease,
                same_name_other_process,
                assignment,
            } => O::Held(pb::Held {
                lease: Some(self.lease(&lease)),
                same_name_other_process,
                assignment: assignment.as_ref().map(convert::assignment),
            }),
            other => return Err(unexpected(other)),
        };
        Ok(pb::ClaimResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    fn lost(&self, current: Option<crate::core::Lease>) -> pb::Lost {
        pb::Lost {
            current: current.map(|l| self.lease(&l)),
        }
    }

    async fn renew(
        &self,
        req: pb::RenewRequest,
        who: Option<String>,
    ) -> Result<pb::RenewResponse, Refusal> {
        let (id, op) = convert::renew(req)?;
        if let Op::Renew { key, token } = &op {
            if let Some((current, revision)) = self.never_granted(key, *token).await? {
                return Ok(pb::RenewResponse {
                    outcome: Some(pb::renew_response::Outcome::Lost(self.lost(current))),
                    revision,
                });
            }
        }
        let (outcome, revision) = self.propose(id, op, who).await?;
        use pb::renew_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Renewed { lease } => O::Renewed(self.lease(&lease)),
            Outcome::Lost { current } => O::Lost(self.lost(current)),
            other => return Err(unexpected(other)),
        };
        Ok(pb::RenewResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    async fn release(
        &self,
        req: pb::ReleaseRequest,
        who: Option<String>,
    ) -> Result<pb::ReleaseResponse, Refusal> {
        let (id, op) = convert::release(req)?;
        if let Op::Release { key, token, .. } = &op {
            if let Some((current, revision)) = self.never_granted(key, *token).await? {
                return Ok(pb::ReleaseResponse {
                    outcome: Some(pb::release_response::Outcome::Lost(self.lost(current))),
                    revision,
                });
            }
        }
        let (outcome, revision) = self.propose(id, op, who).await?;
        use pb::release_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Released { lease } => O::Released(self.lease(&lease)),
            Outcome::Lost { current } => O::Lost(self.lost(current)),
            other => return Err(unexpected(other)),
        };
        Ok(pb::ReleaseResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    async fn revoke(
        &self,
        req: pb::RevokeRequest,
        who: Option<String>,
    ) -> Result<pb::RevokeResponse, Refusal> {
        let (id, op) = convert::revoke(req)?;
        let key = op.key().to_string();
        let (outcome, revision) = self.propose(id, op, who).await?;
        match outcome {
            Outcome::Revoked { previous } => {
                tracing::warn!(key = %key, revision, token = previous.as_ref().map(|l| l.token),
                    "operator revoked a lease");
                Ok(pb::RevokeResponse {
                    revoked: previous.map(|l| self.lease(&l)),
                    revision,
                })
            }
            other => Err(unexpected(other)),
        }
    }

    async fn update(
        &self,
        req: pb::UpdateRequest,
        who: Option<String>,
    ) -> Result<pb::UpdateResponse, Refusal> {
        let (id, op) = convert::update(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Updated { record }, revision) => Ok(pb::UpdateResponse {
                record: Some(convert::pb_record(&record)),
                revision,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn assign(
        &self,
        req: pb::AssignRequest,
        who: Option<String>,
    ) -> Result<pb::AssignResponse, Refusal> {
        let (id, op) = convert::assign(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Assigned { record }, revision) => Ok(pb::AssignResponse {
                record: Some(convert::pb_record(&record)),
                revision,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn offer(
        &self,
        req: pb::OfferRequest,
        who: Option<String>,
    ) -> Result<pb::OfferResponse, Refusal> {
        let (id, op) = convert::offer(req)?;
        let key = op.key().to_string();
        match self.propose(id, op, who).await? {
            (Outcome::Offered { offer }, revision) => Ok(pb::OfferResponse {
                offer: Some(convert::pb_offer(&key, &offer, self.sm.offer_countdowns())),
                revision,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn accept(
        &self,
        req: pb::AcceptRequest,
        who: Option<String>,
    ) -> Result<pb::AcceptResponse, Refusal> {
        let (id, op) = convert::accept(req, self.ttl)?;
        match self.propose(id, op, who).await? {
            (Outcome::Accepted { lease, note, from }, revision) => Ok(pb::AcceptResponse {
                lease: Some(self.lease(&lease)),
                note: Some(convert::pb_note(&note)),
                from: Some(pb::Holder {
                    name: from.name,
                    client_id: from.client_id,
                }),
                revision,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn decline(
        &self,
        req: pb::DeclineRequest,
        who: Option<String>,
    ) -> Result<pb::DeclineResponse, Refusal> {
        let (id, op) = convert::decline(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Declined, revision) => Ok(pb::DeclineResponse { revision }),
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn cancel(
        &self,
        req: pb::CancelRequest,
        who: Option<String>,
    ) -> Result<pb::CancelResponse, Refusal> {
        let (id, op) = convert::cancel(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Cancelled, revision) => Ok(pb::CancelResponse { revision }),
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn set_quarantine(
        &self,
        req: pb::SetQuarantineRequest,
        who: Option<String>,
    ) -> Result<pb::SetQuarantineResponse, Refusal> {
        let (id, op) = convert::set_quarantine(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::QuarantineRules { rules }, revision) => {
                tracing::warn!(?rules, revision, "quarantine rules changed");
                Ok(pb::SetQuarantineResponse {
                    rules_ms: rules.into_iter().collect(),
                    revision,
                })
            }
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn set_access(
        &self,
        req: pb::SetAccessRequest,
        who: Option<String>,
    ) -> Result<pb::AccessResponse, Refusal> {
        if !self.auth.on() {
            return Err(Status::failed_precondition(
                "this node has no auth (--auth-tokens or --tls-client-auth): every request is \
                 anonymous, so a policy would protect nothing; turn auth on first",
            )
            .into());
        }
        let policy = match (req.clear, req.policy.trim().is_empty()) {
            (true, true) => None,
            (true, false) => {
                return Err(Status::invalid_argument("clear takes no policy text").into())
            }
            (false, true) => {
                return Err(Status::invalid_argument(
                    "the policy is empty: give one, or clear the policy",
                )
                .into())
            }
            (false, false) => Some(
                Policy::parse_to_set(&req.policy)
                    .map_err(|e| Status::invalid_argument(format!("the policy: {e}")))?,
            ),
        };
        let by = who
            .clone()
            .unwrap_or_else(|| crate::core::access::ANONYMOUS.to_owned());
        let op = Op::SetAccess { policy, by };
        validate::op(&op).map_err(convert::invalid)?;
        let id = convert::origin(req.request_id, &op)?;
        match self.propose(id, op, who).await? {
            (Outcome::AccessSet { version }, revision) => {
                let mut answer = self.access_response(revision);
                answer.version = version;
                Ok(answer)
            }
            (other, _) => Err(unexpected(other)),
        }
    }

    async fn get_access(&self, req: pb::GetAccessRequest) -> Result<pb::AccessResponse, Refusal> {
        if !req.stale {
            self.linearize().await?;
        }
        Ok(self.access_response(self.sm.read(revision)))
    }

    fn access_response(&self, revision: u64) -> pb::AccessResponse {
        let bootstrap = self.auth.bootstrap.as_deref();
        self.sm.read(|s| {
            let access = &s.access;
            let in_force = access.in_force(bootstrap);
            pb::AccessResponse {
                version: access.version,
                has_policy: in_force.is_some(),
                policy: in_force.map(Policy::to_text).unwrap_or_default(),
                bootstrap: access.version == 0 && in_force.is_some(),
                audit: access
                    .audit
                    .iter()
                    .map(|a| pb::AccessChange {
                        version: a.version,
                        revision: a.revision,
                        at_unix_ms: a.at_unix_ms,
                        by: a.by.clone(),
                        what: a.what.clone(),
                    })
                    .collect(),
                revision,
            }
        })
    }

    async fn get_record(
        &self,
        req: pb::GetRecordRequest,
    ) -> Result<pb::GetRecordResponse, Refusal> {
        validate::key(&req.key).map_err(convert::invalid)?;
        if !req.stale {
            self.linearize().await?;
        }
        let offers = self.sm.offer_countdowns();
        let (record, lease, revision) = self.sm.read(|s| {
            let record = match s.table.case(&req.key) {
                Some(case) => convert::pb_case_record(&req.key, case, offers),
                None => pb::Record::default(),
            };
            (record, s.table.lease(&req.key).cloned(), revision(s))
        });
        Ok(pb::GetRecordResponse {
            record: Some(record),
            lease: lease.map(|l| self.lease(&l)),
            revision,
        })
    }

    async fn history(&self, req: pb::HistoryRequest) -> Result<pb::HistoryResponse, Refusal> {
        validate::key(&req.key).map_err(convert::invalid)?;
        if !req.stale {
            self.linearize().await?;
        }
        Ok(self.sm.read(|s| {
            let (events, dropped) = match s.table.case(&req.key) {
                Some(case) => (
                    case.history
                        .events
                        .iter()
                        .map(|e| convert::pb_event(&req.key, e))
                        .collect(),
                    case.history.dropped,
                ),
                None => (Vec::new(), 0),
            };
            pb::HistoryResponse {
                events,
                dropped,
                revision: revision(s),
            }
        }))
    }

    async fn probe(&self, req: pb::ProbeRequest) -> Result<pb::ProbeResponse, Refusal> {
        validate::key(&req.key).map_err(convert::invalid)?;
        if !req.stale {
            self.linearize().await?;
        }
        let (lease, revision) = self
            .sm
            .read(|s| (s.table.lease(&req.key).cloned(), revision(s)));
        Ok(pb::ProbeResponse {
            lease: lease.map(|l| self.lease(&l)),
            revision,
        })
    }

    async fn board(&self, req: pb::BoardRequest) -> Result<pb::BoardResponse, Refusal> {
        validate::prefix(&req.prefix).map_err(convert::invalid)?;
        validate::prefix_named("start_after", &req.start_after).map_err(convert::invalid)?;
        let limit = match req.limit as usize {
            0 => BOARD_LEASES_MAX,
            n if n > BOARD_LEASES_MAX => {
                return Err(Status::invalid_argument(format!(
                    "limit {n} is above the maximum {BOARD_LEASES_MAX}: page with start_after"
                ))
                .into())
            }
            n => n,
        };
        if !req.stale {
            self.linearize().await?;
        }
        let (leases, truncated, revision, assignments) = self.sm.read(|s| {
            let (page, truncated) = s.table.board(&req.prefix, &req.start_after, limit);
            let assignments: std::collections::HashMap<String, pb::Assignment> = page
                .iter()
                .filter_map(|l| {
                    let a = s.table.case(&l.key)?.record.assigned_to.as_deref()?;
                    Some((l.key.to_string(), convert::assignment(a)))
                })
                .collect();
            let page = page.into_iter().cloned().collect::<Vec<_>>();
            (page, truncated, revision(s), assignments)
        });
        Ok(pb::BoardResponse {
            leases: leases.iter().map(|l| self.lease(l)).collect(),
            truncated,
            revision,
            assignments,
        })
    }

    async fn check_token(
        &self,
        req: pb::CheckTokenRequest,
    ) -> Result<pb::CheckTokenResponse, Refusal> {
        validate::key(&req.key).map_err(convert::invalid)?;
        validate::token(req.token).map_err(convert::invalid)?;
        // Always linearizable: a stale "yes" would defeat fencing.
        self.linearize().await?;
        let (lease, revision) = self
            .sm
            .read(|s| (s.table.lease(&req.key).cloned(), revision(s)));
        Ok(pb::CheckTokenResponse {
            current: lease.as_ref().is_some_and(|l| l.token == req.token),
            lease: lease.map(|l| self.lease(&l)),
            revision,
        })
    }
}

/// The revision a read reflects; read under the same lock as the data.
fn revision(state: &SmState) -> u64 {
    state.revision
}

/// An outcome that cannot answer this operation: a bug, reported as INTERNAL.
fn unexpected(outcome: Outcome) -> Refusal {
    tracing::error!(
        ?outcome,
        "state machine answered an operation with the wrong outcome"
    );
    Status::internal(format!("unexpected outcome {outcome:?}")).into()
}

fn with_leader<T>(mut r: Response<T>, leader: &str) -> Response<T> {
    if let Ok(v) = MetadataValue::try_from(leader) {
        r.metadata_mut().insert(LEADER_METADATA_KEY, v);
    }
    r
}

pub(crate) fn unavailable(leader: Option<&str>, why: &str) -> Status {
    let mut status = Status::unavailable(match leader {
        Some(l) => format!("{why}; the leader is {l}"),
        None => format!("{why}; no leader is known (election in progress or no quorum)"),
    });
    if let Some(v) = leader.and_then(|l| MetadataValue::try_from(l).ok()) {
        status.metadata_mut().insert(LEADER_METADATA_KEY, v);
    }
    status
}

/// The gRPC service.
pub struct BatonServer {
    pub ctx: Arc<Ctx>,
}

impl BatonServer {
    /// Serves `req` here, or forwards it once to the leader (see the module doc).
    async fn serve<Req, Resp, LF, RF>(
        &self,
        method: &'static str,
        req: Request<Req>,
        local: impl FnOnce(Arc<Ctx>, Req, Option<String>) -> LF,
        remote: impl FnOnce(BatonClient<Channel>, Request<Req>) -> RF,
    ) -> Result<Response<Resp>, Status>
    where
        Req: Clone + super::auth::Acts,
        LF: Future<Output = Result<Resp, Refusal>>,
        RF: Future<Output = Result<Response<Resp>, Status>>,
    {
        let answer = async {
            let principal = self.ctx.auth.principal(&req)?;
            let forwarded = req.metadata().contains_key(FORWARDED_METADATA_KEY);
            let bearer = req
                .metadata()
                .get(super::auth::AUTHORIZATION_METADATA_KEY)
                .cloned();
            let msg = req.into_inner();
            let (acting, needs) = (msg.acting(), msg.needs());
            let allowed = super::auth::authorize(
                &self.ctx.auth,
                principal.as_deref(),
                acting,
                needs,
                &self.ctx.sm,
            );
            let served = match allowed {
                Ok(()) => match self
                    .ctx
                    .principal_limited(principal.as_deref(), msg.writes())
                {
                    Some(limited) => Err(Refusal::Status(limited)),
                    None => local(self.ctx.clone(), msg.clone(), principal.clone()).await,
                },
                // This node's copy of the policy may be behind the leader's (a grant just
                // made): the leader, whose copy is the latest, decides. (What this node
                // allows and forwards, the leader checks again with its own copy.)
                Err(denied) => match self.ctx.leader_elsewhere() {
                    Some(leader) if !forwarded => Err(Refusal::NotLeader {
                        leader: Some(leader),
                    }),
                    // No leader to confirm it with (an election): a refusal from a copy
                    // that may be behind is not final; the client retries.
                    None if !forwarded && !self.ctx.leads() => Err(Refusal::Status(unavailable(
                        None,
                        &format!(
                            "cannot confirm a refusal ({}) without a leader",
                            denied.message()
                        ),
                    ))),
                    _ => Err(Refusal::Status(denied)),
                },
            };
            match served {
                Ok(resp) => Ok(Response::new(resp)),
                // A node of data format 3 forwards with its own protobuf types, which drop
                // the session a format-4 client sent (a rolling upgrade with a new leader
                // elected early). Not the client's fault: it retries, and may reach the
                // leader directly.
                Err(Refusal::Status(s))
                    if forwarded
                        && s.code() == tonic::Code::InvalidArgument
                        && s.message().starts_with(convert::SESSION_MISSING) =>
                {
                    Err(Status::unavailable(
                        "a node that predates data format 4 forwarded this write without its \
                         session; retry (the forwarding node names this leader)",
                    ))
                }
                Err(Refusal::Status(s)) => Err(s),
                Err(Refusal::NotLeader { leader: Some(addr) }) if !forwarded => {
                    let client = self.ctx.leader_client(&addr)?;
                    let mut fwd = Request::new(msg);
                    fwd.metadata_mut()
                        .insert(FORWARDED_METADATA_KEY, MetadataValue::from_static("1"));
                    // The leader learns who is asking from this node's certificate and the
                    // principal it names (empty: anonymous), or, without TLS, from the
                    // client's own token again.
                    // Binary, so any name survives; always sent with auth on, since a forwarded
                    // request without it counts as anonymous, never as this node.
                    if self.ctx.auth.on() {
                        let p = principal.as_deref().unwrap_or("").as_bytes();
                        fwd.metadata_mut().insert_bin(
                            super::auth::PRINCIPAL_METADATA_KEY,
                            tonic::metadata::BinaryMetadataValue::from_bytes(p),
                        );
                    }
                    if let Some(bearer) = bearer {
                        fwd.metadata_mut()
                            .insert(super::auth::AUTHORIZATION_METADATA_KEY, bearer);
                    }
                    fwd.set_timeout(FORWARD_TIMEOUT);
                    match remote(client, fwd).await {
                        Ok(resp) => Ok(with_leader(Response::new(resp.into_inner()), &addr)),
                        Err(s) if forward_failed(&s) => Err(unavailable(
                            Some(&addr),
                            &format!(
                                "forwarding to the leader failed ({:?}: {}); retry with the \
                                 same request id",
                                s.code(),
                                s.message()
                            ),
                        )),
                        Err(s) => Err(s),
                    }
                }
                Err(Refusal::NotLeader { leader }) => Err(unavailable(
                    leader.as_deref(),
                    "this node is not the leader",
                )),
            }
        }
        .await;
        let code = match &answer {
            Ok(_) => tonic::Code::Ok,
            Err(s) => s.code(),
        };
        self.ctx.metrics.grpc_request(method, code);
        answer
    }
}

/// Whether a forwarded request failed on the way rather than being answered by the leader:
/// the leader said UNAVAILABLE, or the transport gave up (refused, reset, timed out,
/// cancelled with the connection). Those become this node's UNAVAILABLE, which the client
/// retries; a leader's real answer (INVALID_ARGUMENT, ...) passes through unchanged.
fn forward_failed(s: &Status) -> bool {
    use tonic::Code;
    std::error::Error::source(s).is_some()
        || matches!(
            s.code(),
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded
        )
}

/// Counts one open watch stream in the metrics while it lives.
struct WatchOpen(Arc<crate::admin::Metrics>);

impl WatchOpen {
    fn new(metrics: Arc<crate::admin::Metrics>) -> WatchOpen {
        metrics.watch_streams.inc();
        WatchOpen(metrics)
    }
}

impl Drop for WatchOpen {
    fn drop(&mut self) {
        self.0.watch_streams.dec();
    }
}

/// Events a watch stream buffers toward a slow client before it waits.
pub const WATCH_STREAM_BUFFER: usize = 1_024;

type EventStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::Event, Status>> + Send + 'static>>;

impl BatonServer {
    /// Serves a watch from this node's own window (see `crate::watch`).
    async fn watch_stream(
        &self,
        req: pb::WatchRequest,
        from_addr: Option<std::net::IpAddr>,
        still_allowed: super::auth::WatchGrant,
    ) -> Result<EventStream, Status> {
        validate::prefix(&req.prefix).map_err(convert::invalid)?;
        let slot = match from_addr {
            None => None,
            Some(addr) => {
                let max = self.ctx.watches_per_address_max;
                match self.ctx.watches.open(addr, max) {
                    Some(slot) => Some(slot),
                    None => {
                        self.ctx.metrics.requests_limited.inc();
                        return Err(Status::resource_exhausted(format!(
                            "{addr} has {max} watch streams open already \
                             (watches_per_address_max); close one, or watch a wider prefix"
                        )));
                    }
                }
            }
        };
        let hub = self.ctx.sm.watch_hub().clone();
        let mut from = match req.from_revision {
            0 => hub.latest() + 1,
            r => r,
        };
        if from > hub.latest() + 1 {
            self.ctx.future_watch(from).await?;
        }
        // Refuse a compacted start at once, as an error rather than mid-stream.
        hub.read_from(&req.prefix, from, 0)
            .map_err(|c| c.status())?;
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_STREAM_BUFFER);
        let prefix = req.prefix;
        let open = WatchOpen::new(self.ctx.metrics.clone());
        let sm = self.ctx.sm.clone();
        tokio::spawn(async move {
            let _open = (open, slot);
            let mut grew = hub.subscribe();
            let progress_every =
                std::time::Duration::from_millis(baton_proto::WATCH_PROGRESS_INTERVAL_MS);
            // The revision the watcher knows it is up to date with, and when it learned so.
            let mut told = from.saturating_sub(1);
            let mut told_at = Instant::now();
            loop {
                grew.borrow_and_update();
                // A revoked token or a policy that took the grant away ends the stream.
                if let Err(ended) = still_allowed.check(&prefix, &sm) {
                    let _ = tx.send(Err(ended)).await;
                    return;
                }
                let (events, next) = match hub.read_from(&prefix, from, WATCH_BATCH_EVENTS_MAX) {
                    Ok(read) => read,
                    Err(c) => {
                        // The window moved past this watcher (a slow reader, or a snapshot
                        // install): tell it, rather than skip events.
                        let _ = tx.send(Err(c.status())).await;
                        return;
                    }
                };
                let more = next > from;
                from = next;
                for (key, event) in &events {
                    if tx.send(Ok(convert::pb_event(key, event))).await.is_err() {
                        return;
                    }
                    told = event.revision;
                    told_at = Instant::now();
                }
                if more {
                    continue;
                }
                // Caught up. If only other prefixes' events went by, say how far we are, now
                // and then, so a quiet watcher's resume point does not fall out of the window.
                if from - 1 > told && told_at.elapsed() >= progress_every {
                    let marker = pb::Event {
                        revision: from - 1,
                        kind: baton_proto::WATCH_PROGRESS_KIND.into(),
                        ..pb::Event::default()
                    };
                    if tx.send(Ok(marker)).await.is_err() {
                        return;
                    }
                    told = from - 1;
                    told_at = Instant::now();
                }
                tokio::select! {
                    changed = grew.changed() => if changed.is_err() { return },
                    _ = tx.closed() => return,
                    // Wake up to send a pending progress marker.
                    _ = tokio::time::sleep(progress_every), if from - 1 > told => {}
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl pb::baton_server::Baton for BatonServer {
    type WatchStream = EventStream;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let grant = super::auth::WatchGrant::of(&self.ctx.auth, &req)?;
        grant.check(&req.get_ref().prefix, &self.ctx.sm)?;
        let from_addr = crate::tls::remote_addr(&req).map(|a| a.ip());
        self.watch_stream(req.into_inner(), from_addr, grant)
            .await
            .map(Response::new)
    }

    async fn claim(
        &self,
        req: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        self.serve(
            "claim",
            req,
            |ctx, m, who| async move { ctx.claim(m, who).await },
            |mut c, r| async move { c.claim(r).await },
        )
        .await
    }

    async fn renew(
        &self,
        req: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.serve(
            "renew",
            req,
            |ctx, m, who| async move { ctx.renew(m, who).await },
            |mut c, r| async move { c.renew(r).await },
        )
        .await
    }

    async fn release(
        &self,
        req: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.serve(
            "release",
            req,
            |ctx, m, who| async move { ctx.release(m, who).await },
            |mut c, r| async move { c.release(r).await },
        )
        .await
    }

    async fn probe(
        &self,
        req: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeResponse>, Status> {
        self.serve(
            "probe",
            req,
            |ctx, m, _who| async move { ctx.probe(m).await },
            |mut c, r| async move { c.probe(r).await },
        )
        .await
    }

    async fn board(
        &self,
        req: Request<pb::BoardRequest>,
    ) -> Result<Response<pb::BoardResponse>, Status> {
        self.serve(
            "board",
            req,
            |ctx, m, _who| async move { ctx.board(m).await },
            |mut c, r| async move { c.board(r).await },
        )
        .await
    }

    async fn check_token(
        &self,
        req: Request<pb::CheckTokenRequest>,
    ) -> Result<Response<pb::CheckTokenResponse>, Status> {
        self.serve(
            "check_token",
            req,
            |ctx, m, _who| async move { ctx.check_token(m).await },
            |mut c, r| async move { c.check_token(r).await },
        )
        .await
    }

    async fn revoke(
        &self,
        req: Request<pb::RevokeRequest>,
    ) -> Result<Response<pb::RevokeResponse>, Status> {
        self.serve(
            "revoke",
            req,
            |ctx, m, who| async move { ctx.revoke(m, who).await },
            |mut c, r| async move { c.revoke(r).await },
        )
        .await
    }

    async fn update(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        self.serve(
            "update",
            req,
            |ctx, m, who| async move { ctx.update(m, who).await },
            |mut c, r| async move { c.update(r).await },
        )
        .await
    }

    async fn assign(
        &self,
        req: Request<pb::AssignRequest>,
    ) -> Result<Response<pb::AssignResponse>, Status> {
        self.serve(
            "assign",
            req,
            |ctx, m, who| async move { ctx.assign(m, who).await },
            |mut c, r| async move { c.assign(r).await },
        )
        .await
    }

    async fn get_record(
        &self,
        req: Request<pb::GetRecordRequest>,
    ) -> Result<Response<pb::GetRecordResponse>, Status> {
        self.serve(
            "get_record",
            req,
            |ctx, m, _who| async move { ctx.get_record(m).await },
            |mut c, r| async move { c.get_record(r).await },
        )
        .await
    }

    async fn history(
        &self,
        req: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        self.serve(
            "history",
            req,
            |ctx, m, _who| async move { ctx.history(m).await },
            |mut c, r| async move { c.history(r).await },
        )
        .await
    }

    async fn offer(
        &self,
        req: Request<pb::OfferRequest>,
    ) -> Result<Response<pb::OfferResponse>, Status> {
        self.serve(
            "offer",
            req,
            |ctx, m, who| async move { ctx.offer(m, who).await },
            |mut c, r| async move { c.offer(r).await },
        )
        .await
    }

    async fn accept(
        &self,
        req: Request<pb::AcceptRequest>,
    ) -> Result<Response<pb::AcceptResponse>, Status> {
        self.serve(
            "accept",
            req,
            |ctx, m, who| async move { ctx.accept(m, who).await },
            |mut c, r| async move { c.accept(r).await },
        )
        .await
    }

    async fn decline(
        &self,
        req: Request<pb::DeclineRequest>,
    ) -> Result<Response<pb::DeclineResponse>, Status> {
        self.serve(
            "decline",
            req,
            |ctx, m, who| async move { ctx.decline(m, who).await },
            |mut c, r| async move { c.decline(r).await },
        )
        .await
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        self.serve(
            "cancel",
            req,
            |ctx, m, who| async move { ctx.cancel(m, who).await },
            |mut c, r| async move { c.cancel(r).await },
        )
        .await
    }

    async fn set_access(
        &self,
        req: Request<pb::SetAccessRequest>,
    ) -> Result<Response<pb::AccessResponse>, Status> {
        self.serve(
            "set_access",
            req,
            |ctx, m, who| async move { ctx.set_access(m, who).await },
            |mut c, r| async move { c.set_access(r).await },
        )
        .await
    }

    async fn get_access(
        &self,
        req: Request<pb::GetAccessRequest>,
    ) -> Result<Response<pb::AccessResponse>, Status> {
        self.serve(
            "get_access",
            req,
            |ctx, m, _who| async move { ctx.get_access(m).await },
            |mut c, r| async move { c.get_access(r).await },
        )
        .await
    }

    async fn set_quarantine(
        &self,
        req: Request<pb::SetQuarantineRequest>,
    ) -> Result<Response<pb::SetQuarantineResponse>, Status> {
        self.serve(
            "set_quarantine",
            req,
            |ctx, m, who| async move { ctx.set_quarantine(m, who).await },
            |mut c, r| async move { c.set_quarantine(r).await },
        )
        .await
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    #[test]
    fn a_retry_too_old_to_tell_is_no_answer_and_a_refusal_carries_its_facts() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(crate::clock::MonotonicClock);
        let countdowns = Arc::new(crate::expiry::Countdowns::new(clock));
        let (_log, sm) = crate::store::open(dir.path(), 1, "t", countdowns).unwrap();
        let status = answer_or_status(
            Outcome::RetryTooOld {
                message: "request seq 3 of client c is too old to tell whether it was applied"
                    .into(),
            },
            &sm,
        )
        .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unknown);
        let lease = crate::core::Lease {
            key: "tasks/x".into(),
            holder: crate::core::Holder {
                name: "codex@b".into(),
                client_id: "codex-1".into(),
            },
            token: 9,
            basis: 9,
            renewals: 0,
            ttl_ms: 10_000,
            since_unix_ms: 5,
            renewed_unix_ms: 5,
        };
        let refusal = crate::core::Refusal::WrongSession {
            lease: Box::new(lease),
            client_id: "c-77".into(),
        };
        let refused = answer_or_status(Outcome::Refused { refusal }, &sm).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused.message().contains("client codex-1")
                && refused.message().contains("client c-77"),
            "{}",
            refused.message()
        );
        let details: pb::Refusal = prost::Message::decode(refused.details()).unwrap();
        assert_eq!(details.reason, "wrong_session");
        assert_eq!(details.key, "tasks/x");
        assert_eq!(details.client_id, "c-77");
        assert_eq!(details.token, 9);
        let holder = details.lease.unwrap().holder.unwrap();
        assert_eq!(
            (holder.name.as_str(), holder.client_id.as_str()),
            ("codex@b", "codex-1")
        );
        assert_eq!(details.message, refused.message());
        let invalid = answer_or_status(
            Outcome::Invalid {
                message: "key must be 1 to 512 bytes".into(),
            },
            &sm,
        )
        .unwrap_err();
        assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
    }
}
