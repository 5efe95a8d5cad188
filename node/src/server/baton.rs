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
use crate::core::validate;
use crate::core::{LogCommand, Name, Op, Outcome, Sender};
use crate::expiry::wall_clock_unix_ms;
use crate::limits::READ_RETRY_BACKOFF;
use crate::raft_types::Raft;
use crate::store::{SmState, StateMachine};

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
}

/// What the handlers share.
pub struct Ctx {
    pub raft: Raft,
    pub sm: StateMachine,
    pub ttl: TtlBounds,
    pub write_timeout: Duration,
    /// What each peer said of the data format it reads (`format_gate`).
    peers: Arc<crate::peers::PeerBook>,
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
        Ctx {
            storage,
            tls,
            auth: rules.auth,
            watches: Arc::default(),
            watches_per_address_max: rules.watches_per_address_max,
            write_rate: WriteRate::new(rules.writes_per_second),
            principal_rate: WriteRate::new(rules.principal_writes_per_second),
            proposer: Proposer::start(raft.clone(), metrics.clone()),
            claims_in_flight: ClaimsInFlight::default(),
            read_answers: Default::default(),
            metrics,
            raft,
            sm,
            peers,
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

    /// Proposes an operation sent by `origin` (its request id and session) as `principal`,
    /// and waits for the outcome of its apply.
    async fn propose(
        &self,
        origin: Option<convert::Origin>,
        op: Op,
        principal: Option<String>,
    ) -> Result<(Outcome, u64), NotAnswered> {
        self.propose_command(command(origin, op, principal)).await
    }

    /// Counts `cmd` against its client's writes per second, then appends it.
    async fn propose_command(&self, cmd: LogCommand) -> Result<(Outcome, u64), NotAnswered> {
        if let Some(limited) = cmd
            .request_id
            .as_ref()
            .and_then(|id| self.rate_limited(&id.client_id))
        {
            return Err(limited.into());
        }
        self.append(cmd).await
    }

    /// Appends `cmd` to the log (its writes-per-second already counted) and waits for the
    /// outcome of its apply.
    async fn append(&self, cmd: LogCommand) -> Result<(Outcome, u64), NotAnswered> {
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
            Ok(Err(ProposeError::NotLeader(leader))) => Err(NotAnswered::NotLeader { leader }),
            Ok(Err(ProposeError::Busy)) => {
                self.metrics.requests_limited.inc();
                Err(Status::resource_exhausted(format!(
                    "the leader has {PROPOSALS_QUEUED_MAX} writes waiting for the log \
                     (PROPOSALS_QUEUED_MAX); nothing was applied: retry with backoff"
                ))
                .into())
            }
            Ok(Err(ProposeError::Failed(e) | ProposeError::QuorumShort(e))) => {
                Err(Status::unavailable(format!("write failed: {e}")).into())
            }
        }
    }

    /// A watch from a revision this node has not reached: a revision still to come would
    /// hold a watch slot until the cluster gets there, so it is refused unless the cluster is
    /// there already. The leader knows (after a linearizable read, every revision it has not
    /// applied is in the future); a follower may only be behind, so it waits a moment for its
    /// copy, then says so (UNAVAILABLE: retry, here or elsewhere).
    pub(super) async fn future_watch(&self, from: u64) -> Result<(), Status> {
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

    /// The refusal of a write from `client_id` beyond its writes per second, if it is.
    fn rate_limited(&self, client_id: &str) -> Option<Status> {
        if self.write_rate.allow(client_id, Instant::now()) {
            return None;
        }
        self.metrics.requests_limited.inc();
        Some(Status::resource_exhausted(format!(
            "client {client_id} is writing faster than this cluster allows \
             (client_writes_per_second); slow down"
        )))
    }

    /// Decides a write. One that would change nothing but the memory of answers for
    /// retries (a claim of a key another session holds or that is quarantined; a renew,
    /// release or update with a token that is not the key's current one, or from another
    /// session: `LeaseTable::unchanged_answer`) is answered on the leader from a
    /// linearizable read, with no log entry and no fsync. Everything else is proposed. The
    /// local state is asked first, so a write that will change something pays no read round.
    /// A renew or release with a token never granted (above the revision, e.g. from a
    /// grant a lost leader acknowledged) is such a write too. A claim of a free key that
    /// another claim of it is already on its way into the log waits for that one first
    /// (a read), and is refused without an entry if it lost: when a contended key is freed,
    /// its claimants' losing claims cost no log entries. `--refusals-in-log` turns all this
    /// off (every write through the log, as before reads were answered without a log entry).
    ///
    /// Such an answer is not remembered for retries, so it must never be contradicted by a
    /// copy of the same request applied later. A token that is not the key's current one
    /// never becomes current again (tokens only grow, and a grant's holder never changes), so
    /// a renew, release or update refused for its token stays refused whichever copy
    /// arrives. (A token above the revision was never granted and could be later; a late
    /// copy could then act only if that grant went to the same session, by chance of
    /// numbering, and a renew would only extend that session's own lease.) A claim refused
    /// because the key is held is not: a copy delayed in the network (a first attempt the
    /// client gave up on, its TCP segments retransmitted seconds later) would be granted once
    /// the key is free, a grant its client never hears of, after it was told "held" (the
    /// chaos suite's `skew` scenario found exactly that, seed 426017). So a claim is answered
    /// from a read only on its first attempt (`Caller::first_attempt`): then no other copy
    /// exists, and every retry comes through the log, where its answer is remembered and a
    /// late copy of any attempt gets that answer. A proxy or a gRPC retry policy may still
    /// send two copies of a first attempt, headers and all: the leader remembers the claims
    /// it refused from a read (`read_answers`), and a copy gets the same refusal.
    async fn decide(
        &self,
        origin: Option<convert::Origin>,
        op: Op,
        who: Caller,
    ) -> Result<(Outcome, u64), NotAnswered> {
        // The chaos suite's `copies` canary decides every copy afresh, as before seed 426017.
        let afresh = crate::chaos::decide_copies_afresh();
        let may_read = afresh || who.first_attempt || !matches!(op, Op::Claim { .. });
        let cmd = command(origin, op, who.principal);
        let remembered = cmd
            .request_id
            .as_ref()
            .filter(|_| !afresh && matches!(cmd.op, Op::Claim { .. }))
            .and_then(|id| self.read_answers.get(id));
        if let Some((outcome, revision)) = remembered {
            return Ok((answer_or_status(outcome, &self.sm)?, revision));
        }
        let claimed = match &cmd.op {
            Op::Claim { key, .. } => Some(key.as_str()),
            _ => None,
        };
        let Some(client) = cmd
            .request_id
            .as_ref()
            .filter(|_| !self.refusals_in_log && may_read && self.leads())
            .map(|id| id.client_id.clone())
        else {
            // A retried claim is on its way too: first attempts of its key wait for it.
            let _in_flight = claimed
                .filter(|_| !self.refusals_in_log)
                .map(|key| self.claims_in_flight.enter(key));
            return self.propose_command(cmd).await;
        };
        let contended = || claimed.is_some_and(|key| self.claims_in_flight.has(key));
        if self.sm.read(|s| s.table.unchanged_answer(&cmd)).is_none() {
            // A write that changes something goes into the log, unless it is a claim and
            // another claim of the key is on its way (checked and entered in one step, so
            // that of claims arriving at once exactly one goes first).
            let first = claimed.map(|key| self.claims_in_flight.try_enter(key));
            if !matches!(first, Some(None)) {
                return self.propose_command(cmd).await;
            }
        }
        if let Some(limited) = self.rate_limited(&client) {
            return Err(limited.into());
        }
        for _ in 0..READ_BARRIERS_PER_WRITE_MAX {
            self.linearize().await?;
            let answered = self
                .sm
                .read(|s| s.table.unchanged_answer(&cmd).map(|a| (a, revision(s))));
            if let Some((outcome, revision)) = answered {
                self.metrics.refused_without_log.inc();
                if let (Some(id), true) = (&cmd.request_id, claimed.is_some() && !afresh) {
                    self.read_answers.remember(id, &outcome, revision);
                }
                return Ok((answer_or_status(outcome, &self.sm)?, revision));
            }
            // It changed meanwhile: unless another claim of the key is on its way, it goes
            // through the log.
            if !contended() {
                break;
            }
        }
        let _in_flight = claimed.map(|key| self.claims_in_flight.enter(key));
        self.append(cmd).await
    }

    /// Lets a read through: refused once this node's disk failed (its state may be about to
    /// go, and the node stops), linearized unless `stale`.
    async fn read_gate(&self, stale: bool) -> Result<(), NotAnswered> {
        self.storage_sound()?;
        if !stale {
            self.linearize().await?;
        }
        Ok(())
    }

    /// UNAVAILABLE once a write or sync of this node's storage failed.
    fn storage_sound(&self) -> Result<(), NotAnswered> {
        match self.storage.failure() {
            None => Ok(()),
            Some(why) => Err(Status::unavailable(format!(
                "this node's storage failed ({why}): it answers nothing more and stops; ask \
                 another node"
            ))
            .into()),
        }
    }

    /// Confirms this node is the leader and has applied everything committed before now
    /// (and that its storage has not failed meanwhile).
    async fn linearize(&self) -> Result<(), NotAnswered> {
        self.storage_sound()?;
        let confirmed = self.linearize_unchecked().await;
        self.storage_sound()?;
        confirmed
    }

    async fn linearize_unchecked(&self) -> Result<(), NotAnswered> {
        if crate::chaos::skip_read_index()
            && self.raft.metrics().borrow().state == openraft::ServerState::Leader
        {
            // The test-only stale-read bug: believing it leads is taken as leading.
            return Ok(());
        }
        let deadline = Instant::now() + self.write_timeout;
        loop {
            let barrier = tokio::time::timeout_at(deadline.into(), self.proposer.read_barrier());
            match barrier.await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(ProposeError::NotLeader(leader))) => {
                    return Err(NotAnswered::NotLeader { leader })
                }
                // One quorum round falls short on a blip (openraft #1852): try again.
                Ok(Err(ProposeError::QuorumShort(_))) if Instant::now() < deadline => {
                    tokio::time::sleep(READ_RETRY_BACKOFF).await
                }
                Ok(Err(ProposeError::Busy)) => {
                    self.metrics.requests_limited.inc();
                    return Err(Status::resource_exhausted(format!(
                        "the leader has {PROPOSALS_QUEUED_MAX} writes and reads waiting for the \
                         log (PROPOSALS_QUEUED_MAX); retry with backoff"
                    ))
                    .into());
                }
                Ok(Err(ProposeError::Failed(e) | ProposeError::QuorumShort(e))) => {
                    return Err(Status::unavailable(format!(
                        "cannot confirm leadership for a linearizable read ({e}); retry, or \
                         read stale"
                    ))
                    .into())
                }
                Err(_) => {
                    return Err(Status::unavailable(format!(
                        "cannot confirm leadership for a linearizable read within {} ms (no \
                         quorum?); retry, or read stale",
                        self.write_timeout.as_millis()
                    ))
                    .into())
                }
            }
        }
    }

    fn lease(&self, lease: &crate::core::Lease) -> pb::Lease {
        convert::lease(lease, self.sm.countdowns())
    }

    pub(super) async fn claim(
        &self,
        req: pb::ClaimRequest,
        who: Caller,
    ) -> Result<pb::ClaimResponse, NotAnswered> {
        let (id, op) = convert::claim(req, self.ttl)?;
        let (outcome, revision) = self.decide(id, op, who).await?;
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
            other => return Err(unexpected(other)),
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
            other => return Err(unexpected(other)),
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
        if held {
            self.format_gate(
                8,
                "a revoke that holds the key back for the revoked holder's window (use \
                 `revoke --now` to free it at once)",
            )?;
        }
        let key = op.key().to_string();
        let (outcome, revision) = self.propose(id, op, who.principal).await?;
        match outcome {
            Outcome::Revoked { previous } => {
                tracing::warn!(key = %key, revision, token = previous.as_ref().map(|l| l.token),
                    held, "operator revoked a lease");
                let claimable_in_ms = match (&previous, held) {
                    (Some(l), true) => l.ttl_ms,
                    _ => 0,
                };
                Ok(pb::RevokeResponse {
                    revoked: previous.map(|l| self.lease(&l)),
                    revision,
                    claimable_in_ms,
                })
            }
            other => Err(unexpected(other)),
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
            (other, _) => Err(unexpected(other)),
        }
    }

    pub(super) async fn assign(
        &self,
        req: pb::AssignRequest,
        who: Caller,
    ) -> Result<pb::AssignResponse, NotAnswered> {
        let key = req.key.clone();
        let (id, op) = convert::assign(req)?;
        if matches!(op, Op::Unassign { .. }) {
            self.format_gate(5, "clearing an assignment")?;
        }
        match self.propose(id, op, who.principal).await? {
            (Outcome::Assigned { record }, revision) => Ok(pb::AssignResponse {
                record: Some(convert::pb_record(&record)),
                revision,
                // The assigner learns at once whether someone else holds the key.
                lease: self
                    .sm
                    .read(|s| s.table.lease(&key).cloned())
                    .map(|l| self.lease(&l)),
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    /// Refuses a command of data format `format` unless every member is known to read it.
    /// A node of an older version cannot decode a newer command: it would refuse the whole
    /// append (stalling as a follower, and without a quorum of new nodes stalling the
    /// cluster). Only the leader knows what its peers said; elsewhere the proposal is left
    /// to find the leader as any write does.
    fn format_gate(&self, format: u32, what: &str) -> Result<(), Status> {
        let (me, members) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            if m.current_leader != Some(m.id) {
                return Ok(());
            }
            let members: std::collections::BTreeSet<_> = m
                .membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect();
            (m.id, members)
        };
        let short = self.peers.short_of_format(me, &members, format);
        if short.is_empty() {
            return Ok(());
        }
        let nodes: Vec<String> = short
            .iter()
            .map(|(id, said)| match said {
                0 => format!("node {id} (format 4 or older, or not heard from yet)"),
                f => format!("node {id} (format {f})"),
            })
            .collect();
        let message = format!(
            "{what} needs data format {format} on every member, and this leader has not \
             heard it from {}: finish upgrading every node to this version (RUNBOOK, \
             \"Upgrading\"), and retry once each answers; nothing was changed",
            nodes.join(", ")
        );
        let details = pb::Refusal {
            reason: "format_pending".into(),
            data_format: format,
            nodes: short.iter().map(|(id, _)| *id).collect(),
            message: message.clone(),
            ..pb::Refusal::default()
        };
        Err(Status::with_details(
            tonic::Code::FailedPrecondition,
            message,
            prost::Message::encode_to_vec(&details).into(),
        ))
    }

    pub(super) async fn offer(
        &self,
        req: pb::OfferRequest,
        who: Caller,
    ) -> Result<pb::OfferResponse, NotAnswered> {
        let (id, op) = convert::offer(req)?;
        let key = op.key().to_string();
        match self.propose(id, op, who.principal).await? {
            (Outcome::Offered { offer }, revision) => Ok(pb::OfferResponse {
                offer: Some(convert::pb_offer(&key, &offer, self.sm.offer_countdowns())),
                revision,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    pub(super) async fn accept(
        &self,
        req: pb::AcceptRequest,
        who: Caller,
    ) -> Result<pb::AcceptResponse, NotAnswered> {
        let (id, op) = convert::accept(req, self.ttl)?;
        match self.propose(id, op, who.principal).await? {
            (Outcome::Accepted { lease, note, from }, revision) => Ok(pb::AcceptResponse {
                lease: Some(self.lease(&lease)),
                note: Some(convert::pb_note(&note)),
                from: Some(pb::Holder {
                    name: from.name.into(),
                    client_id: from.client_id.into(),
                }),
                revision,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    pub(super) async fn decline(
        &self,
        req: pb::DeclineRequest,
        who: Caller,
    ) -> Result<pb::DeclineResponse, NotAnswered> {
        let (id, op) = convert::decline(req)?;
        match self.propose(id, op, who.principal).await? {
            (Outcome::Declined, revision) => Ok(pb::DeclineResponse { revision }),
            (other, _) => Err(unexpected(other)),
        }
    }

    pub(super) async fn cancel(
        &self,
        req: pb::CancelRequest,
        who: Caller,
    ) -> Result<pb::CancelResponse, NotAnswered> {
        let (id, op) = convert::cancel(req)?;
        match self.propose(id, op, who.principal).await? {
            (Outcome::Cancelled, revision) => Ok(pb::CancelResponse { revision }),
            (other, _) => Err(unexpected(other)),
        }
    }

    pub(super) async fn set_quarantine(
        &self,
        req: pb::SetQuarantineRequest,
        who: Caller,
    ) -> Result<pb::SetQuarantineResponse, NotAnswered> {
        let (id, op) = convert::set_quarantine(req)?;
        match self.propose(id, op, who.principal).await? {
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
            .principal
            .clone()
            .unwrap_or_else(|| crate::core::access::ANONYMOUS.to_owned());
        let op = Op::SetAccess { policy, by };
        op.validate().map_err(convert::invalid)?;
        let id = convert::origin(req.request_id, &op)?;
        match self.propose(id, op, who.principal).await? {
            (Outcome::AccessSet { version }, revision) => {
                let mut answer = self.access_response(revision);
                answer.version = version;
                Ok(answer)
            }
            (other, _) => Err(unexpected(other)),
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
        let (record, lease, quarantine, revision) = self.sm.read(|s| {
            let case = s.table.case(&req.key);
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
                revision(s),
            )
        });
        let quarantine = quarantine.map(|(q, revoked)| pb::KeyQuarantine {
            revision: q.revision,
            delay_ms: q.delay_ms,
            remaining_ms: convert::quarantine_left_ms(&self.sm, &req.key, q.revision, q.delay_ms),
            revoked,
        });
        Ok(pb::GetRecordResponse {
            record: Some(record),
            lease: lease.map(|l| self.lease(&l)),
            revision,
            quarantine,
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
        let (lease, revision) = self
            .sm
            .read(|s| (s.table.lease(&req.key).cloned(), revision(s)));
        Ok(pb::ProbeResponse {
            lease: lease.map(|l| self.lease(&l)),
            revision,
        })
    }

    pub(super) async fn board(
        &self,
        req: pb::BoardRequest,
    ) -> Result<pb::BoardResponse, NotAnswered> {
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
        self.read_gate(req.stale).await?;
        let (leases, truncated, revision, assignments, unclaimed) = self.sm.read(|s| {
            let (page, truncated) = s.table.board(&req.prefix, &req.start_after, limit);
            let (free, more) = s.table.unclaimed(&req.prefix, &req.start_after, limit);
            let unclaimed: std::collections::HashMap<String, pb::Assignment> = free
                .into_iter()
                .map(|(k, a)| (k.to_string(), convert::assignment(a)))
                .collect();
            let assignments: std::collections::HashMap<String, pb::Assignment> = page
                .iter()
                .filter_map(|l| {
                    let a = s.table.case(&l.key)?.record.assigned_to.as_deref()?;
                    Some((l.key.to_string(), convert::assignment(a)))
                })
                .collect();
            let page = page.into_iter().cloned().collect::<Vec<_>>();
            (page, truncated, revision(s), assignments, (unclaimed, more))
        });
        // Quarantined keys: this node's countdowns find them, its state confirms each.
        let candidates =
            self.sm
                .quarantine_countdowns()
                .under_prefix(&req.prefix, &req.start_after, limit);
        let quarantines = self.sm.read(|s| {
            candidates
                .into_iter()
                .filter(|(key, basis, _, _)| {
                    s.table
                        .case(key)
                        .and_then(|c| c.quarantine.as_deref())
                        .is_some_and(|q| q.revision == *basis)
                })
                .map(|(key, basis, delay_ms, left)| {
                    let q = pb::KeyQuarantine {
                        revision: basis,
                        delay_ms,
                        remaining_ms: left.as_millis() as u64,
                        revoked: s.table.held_back_by_revoke(&key, basis),
                    };
                    (key, q)
                })
                .collect()
        });
        Ok(pb::BoardResponse {
            leases: leases.iter().map(|l| self.lease(l)).collect(),
            truncated,
            revision,
            assignments,
            quarantines,
            unclaimed: unclaimed.0,
            unclaimed_truncated: unclaimed.1,
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
/// The log command for `op` sent by `origin` (its request id and session) as `principal`,
/// stamped with this leader's wall clock.
/// Read barriers a write waits through, as long as another claim of its key is on its way
/// into the log, before it goes into the log itself (so a key claimed without end cannot
/// keep a claim waiting).
const READ_BARRIERS_PER_WRITE_MAX: usize = 4;

/// Keys with a claim on its way into the log, and how many. Bounded by the proposer's queue
/// (`PROPOSALS_QUEUED_MAX`): every entry is a claim waiting there or in flight.
#[derive(Default)]
struct ClaimsInFlight(Mutex<HashMap<String, usize>>);

/// One claim in flight; it leaves the set when dropped.
struct InFlight<'a>(&'a ClaimsInFlight, String);

impl ClaimsInFlight {
    fn has(&self, key: &str) -> bool {
        self.0.lock().expect("claims in flight").contains_key(key)
    }

    /// Enters a claim of `key` unless one is in flight already.
    fn try_enter(&self, key: &str) -> Option<InFlight<'_>> {
        let mut keys = self.0.lock().expect("claims in flight");
        if keys.contains_key(key) {
            return None;
        }
        keys.insert(key.to_owned(), 1);
        Some(InFlight(self, key.to_owned()))
    }

    fn enter(&self, key: &str) -> InFlight<'_> {
        *self
            .0
            .lock()
            .expect("claims in flight")
            .entry(key.to_owned())
            .or_default() += 1;
        InFlight(self, key.to_owned())
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut keys = self.0 .0.lock().expect("claims in flight");
        if let Some(n) = keys.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&self.1);
            }
        }
    }
}

fn command(origin: Option<convert::Origin>, op: Op, principal: Option<String>) -> LogCommand {
    let (request_id, sender) = match origin {
        Some(o) => (
            Some(o.id),
            Some(Sender {
                client_id: o.session.into(),
                principal: principal.map(Name::from),
            }),
        ),
        None => (None, None),
    };
    LogCommand {
        request_id,
        leader_unix_ms: wall_clock_unix_ms(),
        op,
        sender,
    }
}

fn revision(state: &SmState) -> u64 {
    state.revision
}

/// An outcome that cannot answer this operation: a bug, reported as INTERNAL.
fn unexpected(outcome: Outcome) -> NotAnswered {
    tracing::error!(
        ?outcome,
        "state machine answered an operation with the wrong outcome"
    );
    Status::internal(format!("unexpected outcome {outcome:?}")).into()
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
