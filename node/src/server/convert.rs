//! Conversions between the wire types (`baton_proto::v1`) and the core's, in one place.
//! Request conversions validate: a bad field becomes `INVALID_ARGUMENT` before anything is
//! proposed, so nothing changes.

use baton_proto::v1 as pb;
use tonic::Status;

use crate::core::table::Walk;
use crate::core::validate::{self, InvalidInput};
use crate::core::{
    Assignment, Attribution, CaseFile, Event, HandoffNote, Holder, Lease, Offer, Op, Record,
    RecordPatch, RequestId, VolatileFact,
};
use crate::expiry::Countdowns;

/// Turns a validation failure into the gRPC error clients see.
pub fn invalid(e: InvalidInput) -> Status {
    Status::invalid_argument(e.0)
}

/// A write's request id and the session it acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Names the slot retries are remembered in.
    pub id: RequestId,
    /// The client id the request acts as (`RequestId.session`): what a lease is bound to and
    /// what the history records.
    pub session: String,
}

/// How the refusal of a write without a session begins (`origin`).
pub const SESSION_MISSING: &str = "request_id.session is missing";

/// Every mutating request must carry a request id: without one a retry could apply twice
/// (a repeated revoke would free whoever claimed in between). And the session it acts as:
/// a claim, accept or decline may leave it empty, its holder's client id is its session.
pub fn origin(id: Option<pb::RequestId>, op: &Op) -> Result<Option<Origin>, Status> {
    let Some(id) = id else {
        return Err(Status::invalid_argument(
            "request_id is missing: every write needs a (client_id, seq) so retries apply once",
        ));
    };
    let holder = match op {
        Op::Claim { holder, .. }
        | Op::ClaimPermit { holder, .. }
        | Op::ClaimNext { holder, .. }
        | Op::ClaimNextUnfinished { holder, .. }
        | Op::ClaimSet { holder, .. }
        | Op::Accept { holder, .. }
        | Op::Decline { holder, .. } => Some(holder),
        _ => None,
    };
    let session = match (id.session.as_str(), holder) {
        ("", Some(holder)) => holder.client_id.to_string(),
        (session, Some(holder)) if session != holder.client_id => {
            return Err(Status::invalid_argument(format!(
                "the holder's client id {:?} is not the session {session:?} the request comes \
                 from: a process claims, accepts and declines as its own session",
                holder.client_id
            )))
        }
        ("", None) => {
            return Err(Status::invalid_argument(format!(
                "{SESSION_MISSING}: a write names the client id it acts as (this client \
                 predates baton data format 4; upgrade it)"
            )))
        }
        (session, _) => session.to_owned(),
    };
    validate::client_id(&session)
        .map_err(|e| Status::invalid_argument(format!("request_id.session: {}", e.0)))?;
    let id = RequestId {
        client_id: id.client_id,
        seq: id.seq,
    };
    validate::request_id(&id).map_err(invalid)?;
    Ok(Some(Origin { id, session }))
}

/// The TTL bounds this node's configuration allows (inside the core's absolute ones).
#[derive(Debug, Clone, Copy)]
pub struct TtlBounds {
    pub min_ms: u64,
    pub max_ms: u64,
}

pub fn claim(req: pb::ClaimRequest, ttl: TtlBounds) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    let holder = req
        .holder
        .ok_or_else(|| Status::invalid_argument("holder is missing: give a name and client id"))?;
    let holder = Holder {
        name: holder.name.into(),
        client_id: holder.client_id.into(),
    };
    validate::holder(&holder).map_err(invalid)?;
    validate::ttl_ms(req.ttl_ms, ttl.min_ms, ttl.max_ms).map_err(invalid)?;
    let op = match (req.permits, req.shared) {
        (0 | 1, false) if !crate::chaos::exclusive_as_shared() => Op::Claim {
            key: req.key,
            holder,
            ttl_ms: req.ttl_ms,
        },
        // A shared claim; or (the chaos suite's shared canary, test builds only) an exclusive
        // claim proposed as a shared one.
        (0 | 1, _) => Op::ClaimPermit {
            key: req.key,
            holder,
            ttl_ms: req.ttl_ms,
            sharing: crate::core::Sharing::Shared,
        },
        (n, true) => {
            return Err(Status::invalid_argument(format!(
                "permits {n} and shared: a claim asks for one of a key's permits or to share \
                 it, not both"
            )))
        }
        (n, false) => {
            validate::sharing(crate::core::Sharing::Permits(n)).map_err(invalid)?;
            // The chaos suite's permit canary (test builds only): one permit too many.
            let n = match crate::chaos::admit_extra_permit() {
                true => (n + 1).min(crate::core::limits::PERMITS_MAX),
                false => n,
            };
            let sharing = crate::core::Sharing::Permits(n);
            Op::ClaimPermit {
                key: req.key,
                holder,
                ttl_ms: req.ttl_ms,
                sharing,
            }
        }
    };
    Ok((origin(req.request_id, &op)?, op))
}

pub fn renew(req: pb::RenewRequest) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::token(req.token).map_err(invalid)?;
    let op = Op::Renew {
        key: req.key,
        token: req.token,
    };
    Ok((origin(req.request_id, &op)?, op))
}

pub fn release(req: pb::ReleaseRequest) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::token(req.token).map_err(invalid)?;
    let final_status = match req.final_status.as_str() {
        "" => None,
        s => {
            validate::status(s).map_err(invalid)?;
            Some(req.final_status.clone())
        }
    };
    let op = Op::Release {
        key: req.key,
        token: req.token,
        final_status,
    };
    Ok((origin(req.request_id, &op)?, op))
}

pub fn revoke(req: pb::RevokeRequest) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::reason(&req.reason).map_err(invalid)?;
    let op = match req.now {
        true => Op::Revoke {
            key: req.key,
            reason: req.reason,
        },
        false => Op::RevokeHeld {
            key: req.key,
            reason: req.reason,
        },
    };
    Ok((origin(req.request_id, &op)?, op))
}

/// A lease as clients see it, with this node's estimate of its remaining time.
pub fn lease(lease: &Lease, countdowns: &Countdowns) -> pb::Lease {
    // A permit's countdown is kept under its key and token (`core::permits`).
    let remaining = countdowns
        .remaining(&lease.key, lease.basis)
        .or_else(|| {
            let id = crate::core::permits::countdown_id(&lease.key, lease.token);
            countdowns.remaining(&id, lease.basis)
        })
        .map(|d| d.as_millis() as u64)
        .unwrap_or(lease.ttl_ms);
    pb::Lease {
        key: lease.key.to_string(),
        holder: Some(pb::Holder {
            name: lease.holder.name.to_string(),
            client_id: lease.holder.client_id.to_string(),
        }),
        token: lease.token,
        ttl_ms: lease.ttl_ms,
        held_since_unix_ms: lease.since_unix_ms,
        renewed_at_unix_ms: lease.renewed_unix_ms,
        remaining_ms: remaining,
        basis: lease.basis,
    }
}

fn holder_of(holder: Option<pb::Holder>) -> Result<Holder, Status> {
    let holder = holder
        .ok_or_else(|| Status::invalid_argument("holder is missing: give a name and client id"))?;
    let holder = Holder {
        name: holder.name.into(),
        client_id: holder.client_id.into(),
    };
    validate::holder(&holder).map_err(invalid)?;
    Ok(holder)
}

fn pb_holder(h: &Holder) -> pb::Holder {
    pb::Holder {
        name: h.name.to_string(),
        client_id: h.client_id.to_string(),
    }
}

pub fn update(req: pb::UpdateRequest) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::token(req.token).map_err(invalid)?;
    let p = req.patch.unwrap_or_default();
    let patch = RecordPatch {
        status: p.status,
        summary: p.summary,
        set_fields: p.set_fields.into_iter().collect(),
        remove_fields: p.remove_fields,
    };
    validate::patch(&patch).map_err(invalid)?;
    let op = Op::Update {
        key: req.key,
        token: req.token,
        patch,
    };
    Ok((origin(req.request_id, &op)?, op))
}

pub fn assign(req: pb::AssignRequest) -> Result<(Option<Origin>, Op), Status> {
    let op = match req.clear {
        true if !req.to.is_empty() => {
            return Err(Status::invalid_argument(format!(
                "assign {:?}: give an addressee (to) or clear, not both",
                req.key
            )))
        }
        true => Op::Unassign {
            key: req.key,
            by: req.by,
            reason: req.reason,
        },
        false => Op::Assign {
            key: req.key,
            to: req.to,
            by: req.by,
            reason: req.reason,
        },
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn post(req: pb::PostRequest) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    let p = req.patch.unwrap_or_default();
    let op = Op::Post {
        key: req.key,
        patch: RecordPatch {
            status: p.status,
            summary: p.summary,
            set_fields: p.set_fields.into_iter().collect(),
            remove_fields: p.remove_fields,
        },
        to: (!req.to.is_empty()).then_some(req.to),
        by: req.by,
        update: req.update,
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

/// A `claim-next` request as the command of `walk`: `Op::ClaimNextUnfinished` once every
/// member reads data format 14, else format 9's `Op::ClaimNext`.
pub fn claim_next(
    req: pb::ClaimNextRequest,
    ttl: TtlBounds,
    walk: Walk,
) -> Result<(Option<Origin>, Op), Status> {
    validate::ttl_ms(req.ttl_ms, ttl.min_ms, ttl.max_ms).map_err(invalid)?;
    let op = Op::ClaimNext {
        prefix: req.prefix,
        holder: holder_of(req.holder)?,
        ttl_ms: req.ttl_ms,
        any: req.any,
        wheres: req
            .r#where
            .into_iter()
            .map(|w| (w.field, w.value))
            .collect(),
    }
    .with_walk(walk);
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn claim_set(req: pb::ClaimSetRequest, ttl: TtlBounds) -> Result<(Option<Origin>, Op), Status> {
    validate::ttl_ms(req.ttl_ms, ttl.min_ms, ttl.max_ms).map_err(invalid)?;
    let op = Op::ClaimSet {
        keys: req.keys,
        holder: holder_of(req.holder)?,
        ttl_ms: req.ttl_ms,
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn wait(req: pb::WaitRequest, ttl: TtlBounds) -> Result<(Option<Origin>, Op), Status> {
    validate::ttl_ms(req.ttl_ms, ttl.min_ms, ttl.max_ms).map_err(invalid)?;
    let (key, holder, ttl_ms) = (req.key, holder_of(req.holder)?, req.ttl_ms);
    let op = match (req.permits, req.shared) {
        (0 | 1, false) => Op::Wait {
            key,
            holder,
            ttl_ms,
        },
        (0 | 1, true) => Op::WaitPermit {
            key,
            holder,
            ttl_ms,
            sharing: crate::core::Sharing::Shared,
        },
        (n, false) => Op::WaitPermit {
            key,
            holder,
            ttl_ms,
            sharing: crate::core::Sharing::Permits(n),
        },
        (n, true) => {
            return Err(Status::invalid_argument(format!(
                "permits {n} and shared: a wait asks for one of a key's permits or to share \
                 it, not both"
            )))
        }
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn leave_line(req: pb::LeaveLineRequest) -> Result<(Option<Origin>, Op), Status> {
    let op = Op::LeaveLine {
        key: req.key,
        holder: holder_of(req.holder)?,
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn unclaimable(c: &crate::core::Unclaimable) -> pb::Unclaimable {
    pb::Unclaimable {
        scanned: c.scanned,
        held: c.held,
        quarantined: c.quarantined,
        finished: c.finished,
        unmatched: c.unmatched,
        assigned_elsewhere: c.assigned_elsewhere,
        truncated: c.truncated,
    }
}

pub fn note(n: pb::HandoffNote) -> HandoffNote {
    HandoffNote {
        commit: n.commit,
        branch: n.branch,
        done: n.done,
        remaining: n.remaining,
        blocked: n.blocked,
        rebuild: n.rebuild,
        first_step: n.first_step,
        changed_files: n.changed_files,
        dirty_files: n.dirty_files,
        volatile_facts: n
            .volatile_facts
            .into_iter()
            .map(|f| VolatileFact {
                name: f.name,
                claimed_value: f.claimed_value,
                check_command: f.check_command,
            })
            .collect(),
    }
}

pub fn offer(req: pb::OfferRequest) -> Result<(Option<Origin>, Op), Status> {
    let op = Op::Offer {
        key: req.key,
        token: req.token,
        to: req.to,
        note: note(req.note.unwrap_or_default()),
        offer_ttl_ms: req.offer_ttl_ms,
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn accept(req: pb::AcceptRequest, ttl: TtlBounds) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    let holder = holder_of(req.holder)?;
    validate::ttl_ms(req.ttl_ms, ttl.min_ms, ttl.max_ms).map_err(invalid)?;
    let op = Op::Accept {
        key: req.key,
        holder,
        ttl_ms: req.ttl_ms,
    };
    Ok((origin(req.request_id, &op)?, op))
}

pub fn decline(req: pb::DeclineRequest) -> Result<(Option<Origin>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    let op = Op::Decline {
        key: req.key,
        holder: holder_of(req.holder)?,
    };
    Ok((origin(req.request_id, &op)?, op))
}

pub fn cancel(req: pb::CancelRequest) -> Result<(Option<Origin>, Op), Status> {
    let op = Op::Cancel {
        key: req.key,
        token: req.token,
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

pub fn assignment(a: &Assignment) -> pb::Assignment {
    pb::Assignment {
        to: a.to.clone(),
        by: a.by.clone(),
        reason: a.reason.clone(),
        assigned_at_unix_ms: a.unix_ms,
        revision: a.revision,
    }
}

pub fn pb_note(n: &HandoffNote) -> pb::HandoffNote {
    pb::HandoffNote {
        commit: n.commit.clone(),
        branch: n.branch.clone(),
        done: n.done.clone(),
        remaining: n.remaining.clone(),
        blocked: n.blocked.clone(),
        rebuild: n.rebuild.clone(),
        first_step: n.first_step.clone(),
        changed_files: n.changed_files.clone(),
        dirty_files: n.dirty_files.clone(),
        volatile_facts: n
            .volatile_facts
            .iter()
            .map(|f| pb::VolatileFact {
                name: f.name.clone(),
                claimed_value: f.claimed_value.clone(),
                check_command: f.check_command.clone(),
            })
            .collect(),
    }
}

/// An offer as clients see it, with this node's estimate of the time before it lapses.
pub fn pb_offer(key: &str, o: &Offer, offer_countdowns: &Countdowns) -> pb::Offer {
    let remaining = offer_countdowns
        .remaining(key, o.revision)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(o.offer_ttl_ms);
    pb::Offer {
        from: Some(pb_holder(&o.from)),
        from_token: o.from_token,
        to: o.to.clone(),
        note: Some(pb_note(&o.note)),
        offer_ttl_ms: o.offer_ttl_ms,
        offered_at_unix_ms: o.offered_unix_ms,
        revision: o.revision,
        remaining_ms: remaining,
    }
}

pub fn pb_record(record: &Record) -> pb::Record {
    pb::Record {
        status: record.status.clone(),
        summary: record.summary.clone(),
        fields: record.fields.clone().into_iter().collect(),
        assigned_to: record.assigned_to.as_deref().map(assignment),
        pending_offer: None,
        last_note: None,
        updated_revision: record.updated_revision,
    }
}

/// A whole case file's record view: the record plus its pending offer and last note.
pub fn pb_case_record(key: &str, case: &CaseFile, offer_countdowns: &Countdowns) -> pb::Record {
    pb::Record {
        pending_offer: case
            .offer
            .as_ref()
            .map(|o| pb_offer(key, o, offer_countdowns)),
        last_note: case.last_note.as_deref().map(pb_note),
        ..pb_record(&case.record)
    }
}

pub fn pb_actor(a: &crate::core::Actor) -> pb::Actor {
    pb::Actor {
        name: a.name.to_string(),
        client_id: a.client_id.to_string(),
        principal: a.principal.as_deref().unwrap_or_default().to_owned(),
    }
}

pub fn pb_event(key: &str, e: &Event) -> pb::Event {
    pb::Event {
        revision: e.revision,
        key: key.to_string(),
        kind: e.kind.as_str().to_string(),
        actor: e.actor.as_ref().map(pb_actor),
        token: e.token,
        at_unix_ms: e.unix_ms,
        detail: detail_in_words(&e.detail),
        recorded_before_format_4: e.attribution == Attribution::RecordedBeforeFormat4,
        status_set: e.status_set().unwrap_or_default().to_owned(),
    }
}

/// An event's detail as people read it. The state machine writes a lease's renewals as
/// `renewed {n} times` at the head of an ending's detail, in the history it keeps (changing
/// that text would need a data-format gate, and events already kept would still read so):
/// one renewal is said `renewed 1 time` here, on the way out, for every reader alike.
fn detail_in_words(detail: &str) -> String {
    const ONE_RENEWAL: &str = "renewed 1 times";
    match detail.strip_prefix(ONE_RENEWAL) {
        Some(rest) if rest.is_empty() || rest.starts_with(';') => format!("renewed 1 time{rest}"),
        _ => detail.to_owned(),
    }
}

pub fn set_quarantine(req: pb::SetQuarantineRequest) -> Result<(Option<Origin>, Op), Status> {
    let op = Op::SetQuarantine {
        prefix: req.prefix,
        delay_ms: req.delay_ms,
    };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

/// A new access policy (or none: `clear`), set by the principal `by`.
pub fn set_access(req: pb::SetAccessRequest, by: String) -> Result<(Option<Origin>, Op), Status> {
    let policy = match (req.clear, req.policy.trim().is_empty()) {
        (true, true) => None,
        (true, false) => return Err(Status::invalid_argument("clear takes no policy text")),
        (false, true) => {
            return Err(Status::invalid_argument(
                "the policy is empty: give one, or clear the policy",
            ))
        }
        (false, false) => Some(
            crate::core::access::Policy::parse_to_set(&req.policy)
                .map_err(|e| Status::invalid_argument(format!("the policy: {e}")))?,
        ),
    };
    let op = Op::SetAccess { policy, by };
    op.validate().map_err(invalid)?;
    Ok((origin(req.request_id, &op)?, op))
}

/// This node's estimate of the time left on the quarantine of `key` that `revision`
/// started; its whole `delay_ms` when this node has no countdown for it (yet).
pub fn quarantine_left_ms(
    sm: &crate::store::StateMachine,
    key: &str,
    revision: u64,
    delay_ms: u64,
) -> u64 {
    sm.quarantine_countdowns()
        .remaining(key, revision)
        .map_or(delay_ms, |d| d.as_millis() as u64)
}

/// A key's permit holders as the wire says them.
pub fn key_holders(
    sharing: crate::core::Sharing,
    holders: &[Lease],
    countdowns: &Countdowns,
) -> pb::KeyHolders {
    pb::KeyHolders {
        permits: sharing.permits(),
        holders: holders.iter().map(|l| lease(l, countdowns)).collect(),
        shared: sharing.is_shared(),
    }
}

/// The one mapping of a refusal to the gRPC status clients see: `FAILED_PRECONDITION`, the
/// line for people as the message, and the facts as a `pb::Refusal` in the details. Times
/// left (the lease's, a quarantine's) are this node's estimates, from its countdowns; the
/// assignment is read from `sm`.
pub fn refusal_status(refusal: &crate::core::Refusal, sm: &crate::store::StateMachine) -> Status {
    let details = refusal_details(refusal, sm);
    let bytes = prost::Message::encode_to_vec(&details);
    Status::with_details(
        tonic::Code::FailedPrecondition,
        details.message,
        tonic::codegen::Bytes::from(bytes),
    )
}

/// The facts of a refusal, as `refusal_status` sends them in its details.
pub fn refusal_details(
    refusal: &crate::core::Refusal,
    sm: &crate::store::StateMachine,
) -> pb::Refusal {
    use crate::core::Refusal as R;
    let key = refusal.key();
    // A quarantine a revoke started is told as what it is: the revoked holder's window.
    let held_back = match refusal {
        R::Quarantined {
            revision, delay_ms, ..
        } if sm.read(|s| s.table.held_back_by_revoke(key, *revision)) => {
            Some((*revision, quarantine_left_ms(sm, key, *revision, *delay_ms)))
        }
        _ => None,
    };
    let message = match held_back {
        Some((revision, left_ms)) => format!(
            "{key} was revoked (revision {revision}): claimable in {} s, once the revoked \
             holder's lease would have expired (a holder cut off from the cluster may still \
             believe it holds it until then; `revoke --now` frees a key at once)",
            left_ms.div_ceil(1000)
        ),
        None => refusal.to_string(),
    };
    let assignment = sm.read(|s| {
        s.table
            .case(key)
            .and_then(|c| c.record.assigned_to.as_deref().map(assignment))
    });
    let mut details = pb::Refusal {
        reason: refusal.reason().to_owned(),
        key: key.to_owned(),
        lease: refusal.lease().map(|l| lease(l, sm.countdowns())),
        assignment,
        message,
        ..pb::Refusal::default()
    };
    match refusal {
        R::StaleToken { token, .. } => details.token = *token,
        R::WrongSession { lease, client_id } => {
            details.token = lease.token;
            details.client_id = client_id.clone();
        }
        R::Frozen {
            offer_to,
            offer_revision,
            ..
        }
        | R::OfferPending {
            offer_to,
            offer_revision,
            ..
        } => {
            details.offer_to = offer_to.clone();
            details.offer_revision = *offer_revision;
        }
        R::NoOffer { .. } => {}
        R::NotAddressee { offer_to, name, .. } => {
            details.offer_to = offer_to.clone();
            details.name = name.clone();
        }
        R::OfferToHolder { name, .. } => details.name = name.clone(),
        R::Quarantined {
            revision, delay_ms, ..
        } => {
            details.quarantine_revision = *revision;
            details.quarantine_delay_ms = *delay_ms;
            details.quarantine_remaining_ms = match held_back {
                Some((_, left_ms)) => left_ms,
                None => quarantine_left_ms(sm, key, *revision, *delay_ms),
            };
            details.quarantine_revoked = held_back.is_some();
        }
        R::KeyLimit { keys, keys_max, .. } => {
            details.keys = *keys;
            details.keys_max = *keys_max;
        }
        R::Exists { status, .. } => details.status = status.clone(),
        R::LineFull {
            waiters,
            waiters_max,
            whole_cluster,
            ..
        } => {
            details.waiters = *waiters;
            details.waiters_max = *waiters_max;
            details.whole_cluster = *whole_cluster;
        }
        R::PermitsMismatch {
            held,
            asked,
            holders,
            ..
        } => {
            details.permits = Some(key_holders(*held, holders, sm.countdowns()));
            details.asked_shared = asked.is_shared();
            details.asked_permits = match asked {
                crate::core::Sharing::Permits(n) => *n,
                crate::core::Sharing::Shared => 0,
            };
        }
        R::NotExclusive { token, sharing, .. } => {
            details.token = *token;
            details.permits = Some(key_holders(*sharing, &[], sm.countdowns()));
        }
        R::HolderLimit {
            holders,
            holders_max,
            ..
        } => {
            details.permit_holders = *holders;
            details.permit_holders_max = *holders_max;
        }
    }
    details
}

/// An outcome that cannot answer this operation: a bug, reported as INTERNAL.
pub(super) fn unexpected(outcome: crate::core::Outcome) -> Status {
    tracing::error!(
        ?outcome,
        "state machine answered an operation with the wrong outcome"
    );
    Status::internal(format!("unexpected outcome {outcome:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_renewal_reads_as_one_time_and_other_details_pass_unchanged() {
        let said = |detail: &str| {
            let event = Event {
                revision: 7,
                kind: crate::core::case::EventKind::Released,
                actor: None,
                attribution: Attribution::Requester,
                token: 3,
                unix_ms: 0,
                detail: detail.into(),
            };
            pb_event("k", &event).detail
        };
        assert_eq!(said("renewed 1 times"), "renewed 1 time");
        assert_eq!(
            said("renewed 1 times; status done"),
            "renewed 1 time; status done"
        );
        assert_eq!(said("renewed 2 times"), "renewed 2 times");
        assert_eq!(said("renewed 12 times; x"), "renewed 12 times; x");
        assert_eq!(said("renewed 1 timesheet"), "renewed 1 timesheet");
        assert_eq!(said(""), "");
    }
}
