//! Conversions between the generated `baton.v1` types and the client's own types: the only
//! place that looks inside a protobuf reply. A reply missing a field the protocol promises
//! becomes [`Error::Protocol`], never a panic or a silent default.

use std::time::{Duration, Instant};

use baton_proto::v1 as pb;

use crate::error::{Error, Refusal, RefusalReason};
use crate::handoff::{Accepted, HandoffNote, OfferView, VolatileFact};
use crate::history::{Event, History};
use crate::record::{Assigned, Record, RecordPatch, RecordView};
use crate::sets::{BlockedKey, SetOutcome};
use crate::tasks::{NextOutcome, Posted, Unclaimable};
use crate::types::{
    safe_deadline, AccessChange, AccessView, ActorInfo, AssignmentInfo, Board, ClaimOutcome,
    ClusterStatus, Grant, HolderInfo, LeaseInfo, Member, Membership, Probe, ReleaseOutcome,
    RenewOutcome, TokenCheck,
};

/// How to turn a granted or renewed lease into a [`Grant`]: the caller's first send time
/// and drift margin fix its safe deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GrantClock {
    /// When the client sent the first attempt of the request.
    pub send_time: Instant,
    /// The client's configured drift margin.
    pub drift_margin: f64,
}

impl GrantClock {
    pub(crate) fn grant(
        self,
        lease: LeaseInfo,
        already_held: bool,
        revision: u64,
        assignment: Option<AssignmentInfo>,
    ) -> Grant {
        Grant {
            safe_deadline: self.deadline(&lease),
            lease,
            already_held,
            revision,
            assignment,
            permits: None,
        }
    }

    fn deadline(self, lease: &LeaseInfo) -> Instant {
        safe_deadline(self.send_time, lease.ttl, self.drift_margin)
    }
}

pub(crate) fn lease(lease: pb::Lease) -> Result<LeaseInfo, Error> {
    let holder = lease
        .holder
        .ok_or_else(|| Error::Protocol(format!("lease on {:?} names no holder", lease.key)))?;
    Ok(LeaseInfo {
        key: lease.key,
        holder_name: holder.name,
        holder_client_id: holder.client_id,
        token: lease.token,
        ttl: Duration::from_millis(lease.ttl_ms),
        held_since_unix_ms: lease.held_since_unix_ms,
        renewed_at_unix_ms: lease.renewed_at_unix_ms,
        remaining: Duration::from_millis(lease.remaining_ms),
        basis: lease.basis,
    })
}

fn required_lease(lease_opt: Option<pb::Lease>, what: &str) -> Result<LeaseInfo, Error> {
    lease(lease_opt.ok_or_else(|| Error::Protocol(format!("{what} without a lease")))?)
}

pub(crate) fn optional_lease(lease_opt: Option<pb::Lease>) -> Result<Option<LeaseInfo>, Error> {
    lease_opt.map(lease).transpose()
}

/// A `Granted` answer (of a claim or a claim-next) at `revision`, as a [`Grant`].
pub(crate) fn grant_of(
    granted: pb::Granted,
    revision: u64,
    clock: GrantClock,
    what: &str,
) -> Result<Grant, Error> {
    let mut grant = clock.grant(
        required_lease(granted.lease, what)?,
        granted.already_held,
        revision,
        granted.assignment.map(assignment),
    );
    grant.permits = granted
        .permits
        .map(|p| key_holders(p).map(Box::new))
        .transpose()?;
    Ok(grant)
}

pub(crate) fn claim_outcome(
    response: pb::ClaimResponse,
    clock: GrantClock,
) -> Result<ClaimOutcome, Error> {
    use pb::claim_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(granted)) => Ok(ClaimOutcome::Granted(grant_of(
            granted,
            response.revision,
            clock,
            "claim granted",
        )?)),
        Some(Outcome::Held(held)) => Ok(ClaimOutcome::Held {
            lease: required_lease(held.lease, "claim held")?,
            same_name_other_process: held.same_name_other_process,
            assignment: held.assignment.map(assignment),
            permits: held.permits.map(key_holders).transpose()?,
        }),
        None => Err(Error::Protocol("claim reply without an outcome".into())),
    }
}

pub(crate) fn renew_outcome(
    response: pb::RenewResponse,
    clock: GrantClock,
) -> Result<RenewOutcome, Error> {
    use pb::renew_response::Outcome;
    match response.outcome {
        // The renewing client held the key by definition, hence `already_held`.
        Some(Outcome::Renewed(renewed)) => Ok(RenewOutcome::Renewed(clock.grant(
            lease(renewed)?,
            true,
            response.revision,
            None,
        ))),
        Some(Outcome::Lost(lost)) => Ok(RenewOutcome::Lost {
            current: optional_lease(lost.current)?,
        }),
        None => Err(Error::Protocol("renew reply without an outcome".into())),
    }
}

pub(crate) fn release_outcome(response: pb::ReleaseResponse) -> Result<ReleaseOutcome, Error> {
    use pb::release_response::Outcome;
    match response.outcome {
        Some(Outcome::Released(released)) => Ok(ReleaseOutcome::Released(lease(released)?)),
        Some(Outcome::Lost(lost)) => Ok(ReleaseOutcome::Lost {
            current: optional_lease(lost.current)?,
        }),
        None => Err(Error::Protocol("release reply without an outcome".into())),
    }
}

pub(crate) fn probe(response: pb::ProbeResponse) -> Result<Probe, Error> {
    Ok(Probe {
        lease: optional_lease(response.lease)?,
        revision: response.revision,
        line: response.line.map(key_line).transpose()?,
        permits: response.permits.map(key_holders).transpose()?,
    })
}

pub(crate) fn board(response: pb::BoardResponse, answered_by: String) -> Result<Board, Error> {
    Ok(Board {
        answered_by,
        leases: response
            .leases
            .into_iter()
            .map(lease)
            .collect::<Result<_, _>>()?,
        truncated: response.truncated,
        revision: response.revision,
        assignments: response
            .assignments
            .into_iter()
            .map(|(key, a)| (key, assignment(a)))
            .collect(),
        quarantines: response
            .quarantines
            .into_iter()
            .map(|(key, q)| (key, quarantine(q)))
            .collect(),
        unclaimed: response
            .unclaimed
            .into_iter()
            .map(|(key, a)| (key, assignment(a)))
            .collect(),
        unclaimed_truncated: response.unclaimed_truncated,
        open: response.open,
        open_truncated: response.open_truncated,
        permits: response
            .permits
            .into_iter()
            .map(|(key, p)| Ok((key, key_holders(p)?)))
            .collect::<Result<_, Error>>()?,
    })
}

fn quarantine(q: pb::KeyQuarantine) -> crate::record::QuarantineView {
    crate::record::QuarantineView {
        revision: q.revision,
        delay: Duration::from_millis(q.delay_ms),
        remaining: Duration::from_millis(q.remaining_ms),
        revoked: q.revoked,
    }
}

pub(crate) fn token_check(response: pb::CheckTokenResponse) -> Result<TokenCheck, Error> {
    Ok(TokenCheck {
        current: response.current,
        lease: optional_lease(response.lease)?,
        revision: response.revision,
        permits: response.permits,
        shared: response.shared,
    })
}

pub(crate) fn revoked(response: pb::RevokeResponse) -> Result<crate::types::Revoked, Error> {
    Ok(crate::types::Revoked {
        revoked: optional_lease(response.revoked)?,
        revision: response.revision,
        claimable_in: std::time::Duration::from_millis(response.claimable_in_ms),
    })
}

fn holder(holder: pb::Holder) -> HolderInfo {
    HolderInfo {
        name: holder.name,
        client_id: holder.client_id,
    }
}

pub(crate) fn assignment(assignment: pb::Assignment) -> AssignmentInfo {
    AssignmentInfo {
        to: assignment.to,
        by: assignment.by,
        reason: assignment.reason,
        assigned_at_unix_ms: assignment.assigned_at_unix_ms,
        revision: assignment.revision,
    }
}

fn note(note: pb::HandoffNote) -> HandoffNote {
    HandoffNote {
        commit: note.commit,
        branch: note.branch,
        done: note.done,
        remaining: note.remaining,
        blocked: note.blocked,
        rebuild: note.rebuild,
        first_step: note.first_step,
        changed_files: note.changed_files,
        dirty_files: note.dirty_files,
        volatile_facts: note
            .volatile_facts
            .into_iter()
            .map(|fact| VolatileFact {
                name: fact.name,
                claimed_value: fact.claimed_value,
                check_command: fact.check_command,
            })
            .collect(),
    }
}

pub(crate) fn note_to_pb(note: HandoffNote) -> pb::HandoffNote {
    pb::HandoffNote {
        commit: note.commit,
        branch: note.branch,
        done: note.done,
        remaining: note.remaining,
        blocked: note.blocked,
        rebuild: note.rebuild,
        first_step: note.first_step,
        changed_files: note.changed_files,
        dirty_files: note.dirty_files,
        volatile_facts: note
            .volatile_facts
            .into_iter()
            .map(|fact| pb::VolatileFact {
                name: fact.name,
                claimed_value: fact.claimed_value,
                check_command: fact.check_command,
            })
            .collect(),
    }
}

pub(crate) fn patch_to_pb(patch: RecordPatch) -> pb::RecordPatch {
    pb::RecordPatch {
        status: patch.status,
        summary: patch.summary,
        set_fields: patch.set_fields.into_iter().collect(),
        remove_fields: patch.remove_fields,
    }
}

fn offer(key: &str, offer: pb::Offer) -> Result<OfferView, Error> {
    let from = offer
        .from
        .ok_or_else(|| Error::Protocol(format!("offer of {key:?} names no giver")))?;
    Ok(OfferView {
        key: key.to_owned(),
        from: holder(from),
        from_token: offer.from_token,
        to: offer.to,
        note: offer.note.map(note).unwrap_or_default(),
        offer_ttl: Duration::from_millis(offer.offer_ttl_ms),
        offered_at_unix_ms: offer.offered_at_unix_ms,
        revision: offer.revision,
        remaining: Duration::from_millis(offer.remaining_ms),
    })
}

fn record(key: &str, record: pb::Record) -> Result<Record, Error> {
    Ok(Record {
        status: record.status,
        summary: record.summary,
        fields: record.fields.into_iter().collect(),
        assigned_to: record.assigned_to.map(assignment),
        pending_offer: record.pending_offer.map(|o| offer(key, o)).transpose()?,
        // An all-empty note is no note: nothing was handed over.
        last_note: record.last_note.map(note).filter(|n| !n.is_empty()),
        updated_revision: record.updated_revision,
    })
}

fn required_record(key: &str, record_opt: Option<pb::Record>, what: &str) -> Result<Record, Error> {
    record(
        key,
        record_opt.ok_or_else(|| Error::Protocol(format!("{what} without a record")))?,
    )
}

pub(crate) fn updated(key: &str, response: pb::UpdateResponse) -> Result<Record, Error> {
    required_record(key, response.record, "update reply")
}

pub(crate) fn assigned(key: &str, response: pb::AssignResponse) -> Result<Assigned, Error> {
    Ok(Assigned {
        record: required_record(key, response.record, "assign reply")?,
        lease: optional_lease(response.lease)?,
        revision: response.revision,
    })
}

pub(crate) fn posted(key: &str, response: pb::PostResponse) -> Result<Posted, Error> {
    Ok(Posted {
        key: key.to_owned(),
        record: required_record(key, response.record, "post reply")?,
        created: response.created,
        revision: response.revision,
    })
}

pub(crate) fn next_outcome(
    response: pb::ClaimNextResponse,
    clock: GrantClock,
) -> Result<NextOutcome, Error> {
    use pb::claim_next_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(granted)) => Ok(NextOutcome::Granted(Box::new(grant_of(
            granted,
            response.revision,
            clock,
            "claim-next granted",
        )?))),
        Some(Outcome::Nothing(n)) => Ok(NextOutcome::Nothing(Unclaimable {
            scanned: n.scanned,
            held: n.held,
            quarantined: n.quarantined,
            finished: n.finished,
            unmatched: n.unmatched,
            assigned_elsewhere: n.assigned_elsewhere,
            truncated: n.truncated,
        })),
        None => Err(Error::Protocol(
            "claim-next reply without an outcome".into(),
        )),
    }
}

pub(crate) fn set_outcome(
    response: pb::ClaimSetResponse,
    clock: GrantClock,
) -> Result<SetOutcome, Error> {
    use pb::claim_set_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(set)) => Ok(SetOutcome::Granted(
            set.granted
                .into_iter()
                .map(|g| grant_of(g, response.revision, clock, "claim-set granted"))
                .collect::<Result<_, _>>()?,
        )),
        Some(Outcome::Blocked(set)) => Ok(SetOutcome::Blocked(
            set.blocked
                .into_iter()
                .map(blocked_key)
                .collect::<Result<_, _>>()?,
        )),
        None => Err(Error::Protocol("claim-set reply without an outcome".into())),
    }
}

pub(crate) fn blocked_key(b: pb::BlockedKey) -> Result<BlockedKey, Error> {
    match (b.held, b.quarantined) {
        (Some(held), _) => Ok(BlockedKey::Held {
            lease: required_lease(held.lease, "claim-set blocked")?,
            same_name_other_process: held.same_name_other_process,
            assignment: held.assignment.map(assignment),
        }),
        (None, Some(q)) => Ok(BlockedKey::Quarantined {
            key: b.key,
            revision: q.quarantine_revision,
            delay: Duration::from_millis(q.quarantine_delay_ms),
            remaining: Duration::from_millis(q.quarantine_remaining_ms),
            revoked: q.quarantine_revoked,
        }),
        (None, None) => Err(Error::Protocol(format!(
            "claim-set blocked by {} without saying why",
            b.key
        ))),
    }
}

pub(crate) fn record_view(key: &str, response: pb::GetRecordResponse) -> Result<RecordView, Error> {
    Ok(RecordView {
        key: key.to_owned(),
        // A key nobody wrote has an empty record; a node may leave it out.
        record: response
            .record
            .map(|r| record(key, r))
            .transpose()?
            .unwrap_or_default(),
        lease: optional_lease(response.lease)?,
        revision: response.revision,
        quarantine: response.quarantine.map(quarantine),
        line: response.line.map(key_line).transpose()?,
        permits: response.permits.map(key_holders).transpose()?,
    })
}

pub(crate) fn history(key: &str, response: pb::HistoryResponse) -> History {
    History {
        key: key.to_owned(),
        events: response.events.into_iter().map(event).collect(),
        dropped: response.dropped,
        revision: response.revision,
    }
}

/// Who acted, as an event or a pushed ending names it.
pub(crate) fn actor(a: pb::Actor) -> ActorInfo {
    ActorInfo {
        name: a.name,
        client_id: a.client_id,
        principal: Some(a.principal).filter(|p| !p.is_empty()),
    }
}

/// One event, of a history or a watch.
pub(crate) fn event(event: pb::Event) -> Event {
    Event {
        revision: event.revision,
        key: event.key,
        kind: event.kind,
        actor: event.actor.map(actor),
        token: event.token,
        at_unix_ms: event.at_unix_ms,
        detail: event.detail,
        recorded_before_format_4: event.recorded_before_format_4,
        status_set: Some(event.status_set).filter(|s| !s.is_empty()),
    }
}

pub(crate) fn offered(key: &str, response: pb::OfferResponse) -> Result<OfferView, Error> {
    let reply = response
        .offer
        .ok_or_else(|| Error::Protocol("offer reply without the offer".into()))?;
    offer(key, reply)
}

pub(crate) fn accepted(response: pb::AcceptResponse, clock: GrantClock) -> Result<Accepted, Error> {
    let lease = required_lease(response.lease, "accept reply")?;
    let from = response
        .from
        .ok_or_else(|| Error::Protocol("accept reply names no giver".into()))?;
    Ok(Accepted {
        safe_deadline: clock.deadline(&lease),
        lease,
        note: response.note.map(note).unwrap_or_default(),
        from: holder(from),
        revision: response.revision,
    })
}

pub(crate) fn cluster_status(endpoint: String, response: pb::StatusResponse) -> ClusterStatus {
    ClusterStatus {
        endpoint,
        node_id: response.node_id,
        cluster_name: response.cluster_name,
        state: response.state,
        leader_id: (response.leader_id != 0).then_some(response.leader_id),
        leader_addr: (!response.leader_addr.is_empty()).then_some(response.leader_addr),
        term: response.term,
        last_log_index: response.last_log_index,
        applied_index: response.applied_index,
        members: members(response.members),
        leases: response.leases,
    }
}

pub(crate) fn members(members: Vec<pb::Member>) -> Vec<Member> {
    members
        .into_iter()
        .map(|m| Member {
            id: m.id,
            addr: m.addr,
            voter: m.voter,
        })
        .collect()
}

pub(crate) fn membership(response: pb::MembersResponse) -> Membership {
    Membership {
        leader_id: (response.leader_id != 0).then_some(response.leader_id),
        members: members(response.members),
    }
}

/// The permissions policy as a node reported it.
pub(crate) fn access_view(answer: pb::AccessResponse) -> AccessView {
    AccessView {
        version: answer.version,
        policy: answer.has_policy.then_some(answer.policy),
        audit: answer
            .audit
            .into_iter()
            .map(|a| AccessChange {
                version: a.version,
                revision: a.revision,
                at_unix_ms: a.at_unix_ms,
                by: a.by,
                what: a.what,
            })
            .collect(),
        revision: answer.revision,
        bootstrap: answer.bootstrap,
    }
}

/// The error for a status the retry loop does not retry, typed from its code and details.
pub(crate) fn error(status: &tonic::Status) -> Error {
    match status.code() {
        tonic::Code::InvalidArgument => Error::InvalidArgument(status.message().to_owned()),
        tonic::Code::FailedPrecondition => Error::Refused(Box::new(refusal(status))),
        tonic::Code::OutOfRange => {
            match <pb::Compacted as prost::Message>::decode(status.details()) {
                Ok(c) if c.requested > 0 => Error::Compacted {
                    requested: c.requested,
                    first_available: c.first_available,
                },
                // A node that sends no details: read its message.
                _ => Error::compacted(status.message()),
            }
        }
        tonic::Code::Unauthenticated => Error::Unauthenticated(status.message().to_owned()),
        tonic::Code::PermissionDenied => Error::PermissionDenied(status.message().to_owned()),
        code => Error::Other {
            code,
            message: status.message().to_owned(),
        },
    }
}

/// Reads a refusal's facts from a `FAILED_PRECONDITION` status: its details, or, from a node
/// that sent none, only its message (reason `Other("")`).
pub(crate) fn refusal(status: &tonic::Status) -> Refusal {
    let details = <pb::Refusal as prost::Message>::decode(status.details()).ok();
    let Some(d) = details.filter(|d| !d.reason.is_empty()) else {
        return Refusal::other(status.message());
    };
    Refusal {
        reason: RefusalReason::from_wire(&d.reason),
        key: d.key,
        lease: d.lease.and_then(|l| lease(l).ok()),
        assignment: d.assignment.map(assignment),
        token: d.token,
        client_id: d.client_id,
        offer_to: d.offer_to,
        offer_revision: d.offer_revision,
        name: d.name,
        quarantine_revision: d.quarantine_revision,
        quarantine_delay_ms: d.quarantine_delay_ms,
        quarantine_remaining_ms: d.quarantine_remaining_ms,
        quarantine_revoked: d.quarantine_revoked,
        keys: d.keys,
        keys_max: d.keys_max,
        data_format: d.data_format,
        nodes: d.nodes,
        status: d.status,
        waiters: d.waiters,
        waiters_max: d.waiters_max,
        whole_cluster: d.whole_cluster,
        permits: d.permits.and_then(|p| key_holders(p).ok()),
        asked_permits: d.asked_permits,
        asked_shared: d.asked_shared,
        permit_holders: d.permit_holders,
        permit_holders_max: d.permit_holders_max,
        message: if d.message.is_empty() {
            status.message().to_owned()
        } else {
            d.message
        },
    }
}

/// A key's permit holders, from the wire.
pub(crate) fn key_holders(p: pb::KeyHolders) -> Result<crate::types::KeyHolders, Error> {
    Ok(crate::types::KeyHolders {
        permits: p.permits,
        holders: p.holders.into_iter().map(lease).collect::<Result<_, _>>()?,
        shared: p.shared,
    })
}

pub(crate) fn key_line(line: pb::KeyLine) -> Result<crate::types::KeyLine, Error> {
    let first = line
        .first
        .into_iter()
        .map(|w| {
            let holder = w
                .holder
                .ok_or_else(|| Error::Protocol("a waiter without a holder".into()))?;
            Ok(crate::types::WaiterInfo {
                holder_name: holder.name,
                holder_client_id: holder.client_id,
                joined_revision: w.joined_revision,
                joined_unix_ms: w.joined_unix_ms,
                ttl: Duration::from_millis(w.ttl_ms),
                waited: Duration::from_millis(w.waited_ms),
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(crate::types::KeyLine {
        waiters: line.waiters,
        first,
    })
}

pub(crate) fn line_outcome(
    key: &str,
    response: pb::WaitResponse,
    clock: GrantClock,
) -> Result<crate::lines::LineOutcome, Error> {
    use pb::wait_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(granted)) => Ok(crate::lines::LineOutcome::Granted(grant_of(
            granted,
            response.revision,
            clock,
            "wait granted",
        )?)),
        Some(Outcome::InLine(place)) => {
            let blocked = place
                .blocked
                .ok_or_else(|| Error::Protocol("in line, waiting for nothing".into()))?;
            Ok(crate::lines::LineOutcome::InLine(crate::lines::InLine {
                key: key.to_owned(),
                position: place.position,
                waiters: place.waiters,
                joined_revision: place.joined_revision,
                blocked: blocked_key(blocked)?,
                revision: response.revision,
            }))
        }
        None => Err(Error::Protocol("wait reply without an outcome".into())),
    }
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
