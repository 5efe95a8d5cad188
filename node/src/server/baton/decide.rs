//! How a request is decided: a write proposed through the log (batched by the proposer), a
//! claim of a held key answered from a linearizable read when it is its first attempt,
//! and the read gates (a sound disk, a confirmed leader) every linearizable answer passes.

use std::time::Instant;

use tonic::Status;

use super::*;

impl Ctx {
    /// Proposes an operation sent by `origin` (its request id and session) as `principal`,
    /// and waits for the outcome of its apply.
    pub(in crate::server) async fn propose(
        &self,
        origin: Option<convert::Origin>,
        op: Op,
        who: Caller,
    ) -> Result<(Outcome, u64), NotAnswered> {
        let cmd = self.as_sent(command(origin, op, who.principal), who.retry);
        self.propose_command(cmd).await
    }

    /// `cmd` as the log takes it: a retry after an attempt that may have reached the cluster
    /// (`Caller::retry`) as `Op::Retry`, which is applied only if the cluster can match it
    /// to its first attempt, once every member reads data format 15 (until then, as a first
    /// attempt, as before). Checked again where the entry is made (`super::super::
    /// format_gate`).
    fn as_sent(&self, cmd: LogCommand, retry: bool) -> LogCommand {
        let reads_retries = || {
            self.short_of_format(crate::core::formats::RETRY_FORMAT)
                .is_some_and(|short| short.is_empty())
        };
        // The chaos suite's `retry-canary` proposes them plain, as before format 15.
        let afresh = crate::chaos::apply_retries_afresh();
        if !retry || cmd.request_id.is_none() || afresh || !reads_retries() {
            return cmd;
        }
        LogCommand {
            op: Op::Retry {
                op: Box::new(cmd.op),
            },
            ..cmd
        }
    }

    /// Counts `cmd` against its client's writes per second, then appends it.
    pub(in crate::server) async fn propose_command(
        &self,
        cmd: LogCommand,
    ) -> Result<(Outcome, u64), NotAnswered> {
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
    pub(in crate::server) async fn append(
        &self,
        cmd: LogCommand,
    ) -> Result<(Outcome, u64), NotAnswered> {
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
            Ok(Err(ProposeError::FormatPending(p))) => {
                Err(super::super::format_gate::pending_status(&p).into())
            }
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
    pub(in crate::server) async fn future_watch(&self, from: u64) -> Result<(), Status> {
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
    pub(in crate::server) fn rate_limited(&self, client_id: &str) -> Option<Status> {
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
    pub(in crate::server) async fn decide(
        &self,
        origin: Option<convert::Origin>,
        op: Op,
        who: Caller,
    ) -> Result<(Outcome, u64), NotAnswered> {
        // The chaos suite's `copies` canary decides every copy afresh, as before seed 426017.
        let afresh = crate::chaos::decide_copies_afresh();
        // A claim of a set, and of a permit, is a claim too: refused from a read only on its
        // first attempt, and a copy of that attempt gets the same refusal. (A permit claim
        // answered "held" from a read on a retry, while an earlier attempt's copy was still
        // on its way and then granted, gave a permit its client never heard of: the chaos
        // suite's `permits` checker, `skew` seed 456088.)
        let claim = matches!(
            op,
            Op::Claim { .. } | Op::ClaimSet { .. } | Op::ClaimPermit { .. }
        );
        let may_read = afresh || who.first_attempt || !claim;
        let cmd = command(origin, op, who.principal);
        let remembered = cmd
            .request_id
            .as_ref()
            .filter(|_| !afresh && claim)
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
            return self.propose_command(self.as_sent(cmd, who.retry)).await;
        };
        let contended = || claimed.is_some_and(|key| self.claims_in_flight.has(key));
        if self.sm.read(|s| s.table.unchanged_answer(&cmd)).is_none() {
            // A write that changes something goes into the log, unless it is a claim and
            // another claim of the key is on its way (checked and entered in one step, so
            // that of claims arriving at once exactly one goes first).
            let first = claimed.map(|key| self.claims_in_flight.try_enter(key));
            // Entered only because the claim ahead of it applied and left between the read
            // above and the entering: the state now answers it, from a read like the others
            // (else it went into the log as a refusal and spent a revision; seen once in
            // `claims_of_a_free_key_arriving_at_once_spend_one_revision` on a loaded machine).
            let overtaken = matches!(first, Some(Some(_)))
                && self.sm.read(|s| s.table.unchanged_answer(&cmd)).is_some();
            if !matches!(first, Some(None)) && !overtaken {
                return self.propose_command(self.as_sent(cmd, who.retry)).await;
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
                if let (Some(id), true) = (&cmd.request_id, claim && !afresh) {
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
        self.append(self.as_sent(cmd, who.retry)).await
    }

    /// Lets a read through: refused once this node's disk failed (its state may be about to
    /// go, and the node stops), linearized unless `stale`.
    pub(in crate::server) async fn read_gate(&self, stale: bool) -> Result<(), NotAnswered> {
        self.storage_sound()?;
        if !stale {
            self.linearize().await?;
        }
        Ok(())
    }

    /// UNAVAILABLE once a write or sync of this node's storage failed.
    pub(in crate::server) fn storage_sound(&self) -> Result<(), NotAnswered> {
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
    pub(in crate::server) async fn linearize(&self) -> Result<(), NotAnswered> {
        self.storage_sound()?;
        let confirmed = self.linearize_unchecked().await;
        self.storage_sound()?;
        confirmed
    }

    pub(in crate::server) async fn linearize_unchecked(&self) -> Result<(), NotAnswered> {
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
                Ok(Err(ProposeError::FormatPending(p))) => {
                    return Err(super::super::format_gate::pending_status(&p).into())
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
}

/// Read barriers a write waits through, as long as another claim of its key is on its way
/// into the log, before it goes into the log itself (so a key claimed without end cannot
/// keep a claim waiting).
const READ_BARRIERS_PER_WRITE_MAX: usize = 4;

pub(super) fn command(
    origin: Option<convert::Origin>,
    op: Op,
    principal: Option<String>,
) -> LogCommand {
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
