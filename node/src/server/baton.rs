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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use baton_proto::LEADER_METADATA_KEY;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::Status;

use super::convert::{self, TtlBounds};
use super::proposer::{ProposeError, Proposer};
use crate::admission::{WatchCounts, WriteRate};
use crate::core::access::Policy;
use crate::core::limits::{BOARD_LEASES_MAX, PROPOSALS_QUEUED_MAX, REQUEST_BYTES_MAX};
use crate::core::table::Walk;
use crate::core::validate;
use crate::core::{LogCommand, Name, Op, Outcome, Sender};
use crate::expiry::wall_clock_unix_ms;
use crate::limits::READ_RETRY_BACKOFF;
use crate::raft_types::Raft;
use crate::store::{SmState, StateMachine};

mod board;
mod claims;
mod decide;
mod lines;
mod sets;
mod tasks;

use super::claims_in_flight::ClaimsInFlight;

/// Why this node did not answer a request itself (not a refusal of the request: that is
/// `core::Refusal`, an answer).
pub(super) enum NotAnswered {
    /// Only the leader can do this; `leader` is its address if known.
    NotLeader {
        leader: Option<String>,
    },
    Status(Status),
}

impl From<Status> for NotAnswered {
    fn from(s: Status) -> Self {
        NotAnswered::Status(s)
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

/// Who sent a write, as the node that received it from the client knows.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    /// The authenticated principal (`None`: anonymous, or authentication is off).
    pub(super) principal: Option<String>,
    /// The client marked this as the first attempt of its request id
    /// (`baton_proto::FIRST_ATTEMPT_METADATA_KEY`): no other copy of it is on its way.
    pub(super) first_attempt: bool,
    /// The client marked this as a retry after an attempt that may have reached the cluster
    /// (`baton_proto::RETRY_METADATA_KEY`): it goes into the log as `Op::Retry`.
    pub(super) retry: bool,
}

/// What the handlers share.
pub struct Ctx {
    pub raft: Raft,
    pub sm: StateMachine,
    pub ttl: TtlBounds,
    pub write_timeout: Duration,
    /// What each member reads of the data formats (`super::format_gate`).
    gate: super::format_gate::FormatGate,
    /// Write refusals that change nothing to the log too, instead of answering them from a
    /// read (`decide`).
    refusals_in_log: bool,
    /// Batches writes into log entries.
    proposer: Proposer,
    /// Keys with a claim on its way into the log (`decide`).
    claims_in_flight: ClaimsInFlight,
    /// Claims refused from a read, for copies of them (`decide`).
    read_answers: super::read_answers::ReadAnswers,
    /// Whether this node's disk failed: then it answers no read (`read_gate`).
    storage: crate::store::StorageWatch,
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    /// One lazily connected client per leader address, for forwarding, with the TLS
    /// generation it was made with.
    leaders: Mutex<HashMap<String, (u64, BatonClient<Channel>)>>,
    /// TLS toward the leader when forwarding, if on.
    tls: Arc<crate::tls::Outbound>,
    /// Who is asking, and whether they must say (`super::auth`).
    pub auth: super::auth::Auth,
    /// Open watch streams by client address, and their limit per address.
    pub(super) watches: Arc<WatchCounts>,
    pub(super) watches_per_address_max: usize,
    /// Writes per second per client id.
    write_rate: WriteRate,
    /// Writes per second per principal (auth on).
    principal_rate: WriteRate,
}

/// What a node asks of clients: who they are (`super::auth`), the limits it enforces per
/// client (`crate::limits`), the lease lengths it grants and how long a write may wait.
#[derive(Debug, Clone)]
pub struct ClientRules {
    pub auth: super::auth::Auth,
    pub watches_per_address_max: usize,
    pub writes_per_second: u32,
    pub principal_writes_per_second: u32,
    pub ttl: TtlBounds,
    /// How long a write may wait to commit before the client is told to retry.
    pub write_timeout: Duration,
    /// Write refusals that change nothing to the log too (`Ctx::decide`).
    pub refusals_in_log: bool,
}

impl Ctx {
    pub fn new(
        raft: Raft,
        sm: StateMachine,
        storage: crate::store::StorageWatch,
        peers: Arc<crate::peers::PeerBook>,
        metrics: Arc<crate::metrics::Metrics>,
        tls: Arc<crate::tls::Outbound>,
        rules: ClientRules,
    ) -> Ctx {
        let gate = super::format_gate::FormatGate::new(raft.clone(), peers);
        Ctx {
            storage,
            tls,
            auth: rules.auth,
            watches: Arc::default(),
            watches_per_address_max: rules.watches_per_address_max,
            write_rate: WriteRate::new(rules.writes_per_second),
            principal_rate: WriteRate::new(rules.principal_writes_per_second),
            proposer: Proposer::start(raft.clone(), metrics.clone(), gate.clone()),
            claims_in_flight: ClaimsInFlight::default(),
            read_answers: Default::default(),
            metrics,
            raft,
            sm,
            gate,
            ttl: rules.ttl,
            write_timeout: rules.write_timeout,
            refusals_in_log: rules.refusals_in_log,
            leaders: Mutex::default(),
        }
    }

    /// The refusal of a write by a principal past its `principal_writes_per_second`.
    pub(super) fn principal_limited(
        &self,
        principal: Option<&str>,
        writes: bool,
    ) -> Option<Status> {
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
    pub(super) fn leads(&self) -> bool {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        m.current_leader == Some(m.id)
    }

    /// The leader's address, if another node leads.
    pub(super) fn leader_elsewhere(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        let leader = m.current_leader.filter(|l| *l != m.id)?;
        let node = m.membership_config.membership().get_node(&leader)?;
        Some(node.addr.clone())
    }

    pub(super) fn leader_client(&self, addr: &str) -> Result<BatonClient<Channel>, Status> {
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

    fn lease(&self, lease: &crate::core::Lease) -> pb::Lease {
        convert::lease(lease, self.sm.countdowns())
    }

    fn lost(&self, current: Option<crate::core::Lease>) -> pb::Lost {
        pb::Lost {
            current: current.map(|l| self.lease(&l)),
        }
    }

    pub(super) async fn renew(
        &self,
        req: pb::RenewRequest,
        who: Caller,
    ) -> Result<pb::RenewResponse, NotAnswered> {
        let (id, op) = convert::renew(req)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
        use pb::renew_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Renewed { lease } => O::Renewed(self.lease(&lease)),
            Outcome::Lost { current } => O::Lost(self.lost(current)),
            other => return Err(convert::unexpected(other).into()),
        };
        Ok(pb::RenewResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    pub(super) async fn release(
        &self,
        req: pb::ReleaseRequest,
        who: Caller,
    ) -> Result<pb::ReleaseResponse, NotAnswered> {
        let (id, op) = convert::release(req)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
        use pb::release_response::Outcome as O;
        let outcome = match outcome {
            Outcome::Released { lease } => O::Released(self.lease(&lease)),
            Outcome::Lost { current } => O::Lost(self.lost(current)),
            other => return Err(convert::unexpected(other).into()),
        };
        Ok(pb::ReleaseResponse {
            outcome: Some(outcome),
            revision,
        })
    }

    pub(super) async fn revoke(
        &self,
        req: pb::RevokeRequest,
        who: Caller,
    ) -> Result<pb::RevokeResponse, NotAnswered> {
        let (id, op) = convert::revoke(req)?;
        let held = matches!(op, Op::RevokeHeld { .. });
        let key = op.key().to_string();
        let (outcome, revision) = self.propose(id, op, who).await?;
        match outcome {
            Outcome::Revoked { previous } => {
                tracing::warn!(key = %key, revision, token = previous.as_ref().map(|l| l.token),
                    held, "operator revoked a lease");
                // The hold this revoke set: for permits, the longest of the revoked holders'
                // TTLs (the first holder's alone, answered before, could be shorter).
                let hold = || {
                    self.sm.read(|s| {
                        s.table
                            .case(&key)
                            .and_then(|c| c.quarantine.as_deref())
                            .filter(|q| q.revision == revision)
                            .map(|q| q.delay_ms)
                    })
                };
                let claimable_in_ms = match (&previous, held) {
                    (Some(l), true) => hold().unwrap_or(l.ttl_ms),
                    _ => 0,
                };
                Ok(pb::RevokeResponse {
                    revoked: previous.map(|l| self.lease(&l)),
                    revision,
                    claimable_in_ms,
                })
            }
            other => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn update(
        &self,
        req: pb::UpdateRequest,
        who: Caller,
    ) -> Result<pb::UpdateResponse, NotAnswered> {
        let (id, op) = convert::update(req)?;
        match self.decide(id, op, who).await? {
            (Outcome::Updated { record }, revision) => Ok(pb::UpdateResponse {
                record: Some(convert::pb_record(&record)),
                revision,
            }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn assign(
        &self,
        req: pb::AssignRequest,
        who: Caller,
    ) -> Result<pb::AssignResponse, NotAnswered> {
        let key = req.key.clone();
        let (id, op) = convert::assign(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Assigned { record }, revision) => Ok(pb::AssignResponse {
                record: Some(convert::pb_record(&record)),
                revision,
                // The assigner learns at once whether someone else holds the key.
                lease: self
                    .sm
                    .read(|s| s.table.lease(&key).cloned())
                    .map(|l| self.lease(&l)),
            }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    /// The members this leader has not heard say they read data format `format`, with the
    /// format each said (0: none yet). `None` on a follower: only the leader knows what its
    /// peers said, and a follower's proposal goes to the leader as any write does.
    fn short_of_format(&self, format: u32) -> Option<Vec<(u64, u32)>> {
        self.gate.short_of(format).ok()
    }

    pub(super) async fn offer(
        &self,
        req: pb::OfferRequest,
        who: Caller,
    ) -> Result<pb::OfferResponse, NotAnswered> {
        let (id, op) = convert::offer(req)?;
        let key = op.key().to_string();
        match self.propose(id, op, who).await? {
            (Outcome::Offered { offer }, revision) => Ok(pb::OfferResponse {
                offer: Some(convert::pb_offer(&key, &offer, self.sm.offer_countdowns())),
                revision,
            }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn accept(
        &self,
        req: pb::AcceptRequest,
        who: Caller,
    ) -> Result<pb::AcceptResponse, NotAnswered> {
        let (id, op) = convert::accept(req, self.ttl)?;
        match self.propose(id, op, who).await? {
            (Outcome::Accepted { lease, note, from }, revision) => Ok(pb::AcceptResponse {
                lease: Some(self.lease(&lease)),
                note: Some(convert::pb_note(&note)),
                from: Some(pb::Holder {
                    name: from.name.into(),
                    client_id: from.client_id.into(),
                }),
                revision,
            }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn decline(
        &self,
        req: pb::DeclineRequest,
        who: Caller,
    ) -> Result<pb::DeclineResponse, NotAnswered> {
        let (id, op) = convert::decline(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Declined, revision) => Ok(pb::DeclineResponse { revision }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn cancel(
        &self,
        req: pb::CancelRequest,
        who: Caller,
    ) -> Result<pb::CancelResponse, NotAnswered> {
        let (id, op) = convert::cancel(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::Cancelled, revision) => Ok(pb::CancelResponse { revision }),
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn set_quarantine(
        &self,
        req: pb::SetQuarantineRequest,
        who: Caller,
    ) -> Result<pb::SetQuarantineResponse, NotAnswered> {
        let (id, op) = convert::set_quarantine(req)?;
        match self.propose(id, op, who).await? {
            (Outcome::QuarantineRules { rules }, revision) => {
                tracing::warn!(?rules, revision, "quarantine rules changed");
                Ok(pb::SetQuarantineResponse {
                    rules_ms: rules.into_iter().collect(),
                    revision,
                })
            }
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn set_access(
        &self,
        req: pb::SetAccessRequest,
        who: Caller,
    ) -> Result<pb::AccessResponse, NotAnswered> {
        if !self.auth.on() {
            return Err(Status::failed_precondition(
                "this node has no auth (--auth-tokens or --tls-client-auth): every request is \
                 anonymous, so a policy would protect nothing; turn auth on first",
            )
            .into());
        }
        let by = who
            .principal
            .clone()
            .unwrap_or_else(|| crate::core::access::ANONYMOUS.to_owned());
        let (id, op) = convert::set_access(req, by)?;
        match self.propose(id, op, who).await? {
            (Outcome::AccessSet { version }, revision) => {
                let mut answer = self.access_response(revision);
                answer.version = version;
                Ok(answer)
            }
            (other, _) => Err(convert::unexpected(other).into()),
        }
    }

    pub(super) async fn get_access(
        &self,
        req: pb::GetAccessRequest,
    ) -> Result<pb::AccessResponse, NotAnswered> {
        self.read_gate(req.stale).await?;
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

    pub(super) async fn get_record(
        &self,
        req: pb::GetRecordRequest,
    ) -> Result<pb::GetRecordResponse, NotAnswered> {
        validate::key(&req.key).map_err(convert::invalid)?;
        self.read_gate(req.stale).await?;
        let offers = self.sm.offer_countdowns();
        let (record, lease, quarantine, line, held, revision) = self.sm.read(|s| {
            let case = s.table.case(&req.key);
            let line = s.table.line(&req.key);
            let line = (!line.is_empty()).then(|| lines::key_line(line));
            let record = match case {
                Some(case) => convert::pb_case_record(&req.key, case, offers),
                None => pb::Record::default(),
            };
            let quarantine = case.and_then(|c| c.quarantine.as_deref()).map(|q| {
                let revoked = s.table.held_back_by_revoke(&req.key, q.revision);
                (q.clone(), revoked)
            });
            (
                record,
                s.table.lease(&req.key).cloned(),
                quarantine,
                line,
                s.table.holders(&req.key).cloned(),
                revision(s),
            )
        });
        let (permits, first) = self.holders_view(held);
        let quarantine = quarantine.map(|(q, revoked)| pb::KeyQuarantine {
            revision: q.revision,
            delay_ms: q.delay_ms,
            remaining_ms: convert::quarantine_left_ms(&self.sm, &req.key, q.revision, q.delay_ms),
            revoked,
        });
        Ok(pb::GetRecordResponse {
            record: Some(record),
            lease: lease.map(|l| self.lease(&l)).or(first),
            revision,
            quarantine,
            line,
            permits,
        })
    }

    pub(super) async fn get_quarantine(
        &self,
        req: pb::GetQuarantineRequest,
    ) -> Result<pb::GetQuarantineResponse, NotAnswered> {
        self.read_gate(req.stale).await?;
        Ok(self.sm.read(|s| pb::GetQuarantineResponse {
            rules_ms: s
                .table
                .quarantine_rules()
                .iter()
                .map(|(p, d)| (p.clone(), *d))
                .collect(),
            revision: revision(s),
        }))
    }

    pub(super) async fn history(
        &self,
        req: pb::HistoryRequest,
    ) -> Result<pb::HistoryResponse, NotAnswered> {
        validate::key(&req.key).map_err(convert::invalid)?;
        self.read_gate(req.stale).await?;
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

    pub(super) async fn probe(
        &self,
        req: pb::ProbeRequest,
    ) -> Result<pb::ProbeResponse, NotAnswered> {
        validate::key(&req.key).map_err(convert::invalid)?;
        self.read_gate(req.stale).await?;
        let (lease, line, held, revision) = self.sm.read(|s| {
            let line = s.table.line(&req.key);
            let line = (!line.is_empty()).then(|| lines::key_line(line));
            let held = s.table.holders(&req.key).cloned();
            (s.table.lease(&req.key).cloned(), line, held, revision(s))
        });
        let (permits, first) = self.holders_view(held);
        Ok(pb::ProbeResponse {
            lease: lease.map(|l| self.lease(&l)).or(first),
            revision,
            line,
            permits,
        })
    }

    pub(super) async fn check_token(
        &self,
        req: pb::CheckTokenRequest,
    ) -> Result<pb::CheckTokenResponse, NotAnswered> {
        validate::key(&req.key).map_err(convert::invalid)?;
        validate::token(req.token).map_err(convert::invalid)?;
        // Always linearizable: a stale "yes" would defeat fencing.
        self.linearize().await?;
        let (lease, sharing, revision) = self.sm.read(|s| {
            // Held by permits: the token's own lease if it holds one, else the first's.
            let (lease, sharing) = match s.table.holders(&req.key) {
                Some(h) => {
                    let at = h.position_of_token(req.token).unwrap_or(0);
                    (h.leases.get(at).cloned(), Some(h.sharing))
                }
                None => (s.table.lease(&req.key).cloned(), None),
            };
            (lease, sharing, revision(s))
        });
        Ok(pb::CheckTokenResponse {
            current: lease.as_ref().is_some_and(|l| l.token == req.token),
            lease: lease.map(|l| self.lease(&l)),
            revision,
            permits: sharing.map_or(0, |s| s.permits()),
            shared: sharing.is_some_and(|s| s.is_shared()),
        })
    }
}

/// The revision a read reflects; read under the same lock as the data.
/// The log command for `op` sent by `origin` (its request id and session) as `principal`,
/// stamped with this leader's wall clock.
fn revision(state: &SmState) -> u64 {
    state.revision
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

/// The gRPC service: the trait's methods in `service`, forwarding in `forward`, watch
/// streams in `watch_stream`.
pub struct BatonServer {
    pub ctx: Arc<Ctx>,
}

#[cfg(test)]
#[path = "baton_tests.rs"]
mod answer_tests;
