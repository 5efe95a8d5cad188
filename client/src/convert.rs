//! Conversions between the generated `baton.v1` types and the client's own types: the only
//! place that looks inside a protobuf reply. A reply missing a field the protocol promises
//! becomes [`Error::Protocol`], never a panic or a silent default.

use std::time::{Duration, Instant};

use baton_proto::v1 as pb;

use crate::error::{Error, Refusal, RefusalReason};
use crate::handoff::{Accepted, HandoffNote, OfferView, VolatileFact};
use crate::history::{Event, History};
use crate::record::{Record, RecordPatch, RecordView};
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
    fn grant(
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

fn optional_lease(lease_opt: Option<pb::Lease>) -> Result<Option<LeaseInfo>, Error> {
    lease_opt.map(lease).transpose()
}

pub(crate) fn claim_outcome(
    response: pb::ClaimResponse,
    clock: GrantClock,
) -> Result<ClaimOutcome, Error> {
    use pb::claim_response::Outcome;
    match response.outcome {
        Some(Outcome::Granted(granted)) => Ok(ClaimOutcome::Granted(clock.grant(
            required_lease(granted.lease, "claim granted")?,
            granted.already_held,
            response.revision,
            granted.assignment.map(assignment),
        ))),
        Some(Outcome::Held(held)) => Ok(ClaimOutcome::Held {
            lease: required_lease(held.lease, "claim held")?,
            same_name_other_process: held.same_name_other_process,
            assignment: held.assignment.map(assignment),
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
    })
}

pub(crate) fn board(response: pb::BoardResponse) -> Result<Board, Error> {
    Ok(Board {
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
    })
}

pub(crate) fn token_check(response: pb::CheckTokenResponse) -> Result<TokenCheck, Error> {
    Ok(TokenCheck {
        current: response.current,
        lease: optional_lease(response.lease)?,
        revision: response.revision,
    })
}

pub(crate) fn revoked(response: pb::RevokeResponse) -> Result<Option<LeaseInfo>, Error> {
    optional_lease(response.revoked)
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

pub(crate) fn assigned(key: &str, response: pb::AssignResponse) -> Result<Record, Error> {
    required_record(key, response.record, "assign reply")
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

/// One event, of a history or a watch.
pub(crate) fn event(event: pb::Event) -> Event {
    Event {
        revision: event.revision,
        key: event.key,
        kind: event.kind,
        actor: event.actor.map(|a| ActorInfo {
            name: a.name,
            client_id: a.client_id,
            principal: Some(a.principal).filter(|p| !p.is_empty()),
        }),
        token: event.token,
        at_unix_ms: event.at_unix_ms,
        detail: event.detail,
        recorded_before_format_4: event.recorded_before_format_4,
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
        keys: d.keys,
        keys_max: d.keys_max,
        message: if d.message.is_empty() {
            status.message().to_owned()
        } else {
            d.message
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pb_lease() -> pb::Lease {
        pb::Lease {
            key: "tasks/a".into(),
            holder: Some(pb::Holder {
                name: "claude@host-a".into(),
                client_id: "c1".into(),
            }),
            token: 17,
            ttl_ms: 20_000,
            held_since_unix_ms: 1,
            renewed_at_unix_ms: 2,
            remaining_ms: 15_000,
            basis: 19,
        }
    }

    fn clock() -> GrantClock {
        GrantClock {
            send_time: Instant::now(),
            drift_margin: 0.05,
        }
    }

    #[test]
    fn granted_claim_carries_safe_deadline_from_send_time_and_reply_ttl() {
        let clock = clock();
        let response = pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Granted(pb::Granted {
                lease: Some(pb_lease()),
                already_held: false,
                assignment: None,
            })),
            revision: 17,
        };
        let ClaimOutcome::Granted(grant) = claim_outcome(response, clock).unwrap() else {
            panic!("expected a grant");
        };
        assert_eq!(grant.lease.token, 17);
        assert_eq!(grant.lease.holder_name, "claude@host-a");
        assert_eq!(grant.lease.holder_client_id, "c1");
        assert_eq!(grant.revision, 17);
        assert_eq!(
            grant.safe_deadline - clock.send_time,
            Duration::from_millis(19_000)
        );
        assert_eq!(grant.assignment, None);
    }

    #[test]
    fn held_claim_names_the_holder() {
        let response = pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Held(pb::Held {
                lease: Some(pb_lease()),
                same_name_other_process: true,
                assignment: Some(pb_assignment()),
            })),
            revision: 30,
        };
        let outcome = claim_outcome(response, clock()).unwrap();
        let ClaimOutcome::Held {
            lease,
            same_name_other_process: true,
            assignment: Some(assignment),
        } = outcome
        else {
            panic!("expected held with an assignment, got {outcome:?}");
        };
        assert_eq!(lease.token, 17);
        assert_eq!(
            assignment,
            AssignmentInfo {
                to: "alice".into(),
                by: "dispatcher".into(),
                reason: "verify".into(),
                assigned_at_unix_ms: 5,
                revision: 6,
            }
        );
        assert_eq!(assignment.to_string(), "alice by dispatcher: verify");
    }

    fn pb_assignment() -> pb::Assignment {
        pb::Assignment {
            to: "alice".into(),
            by: "dispatcher".into(),
            reason: "verify".into(),
            assigned_at_unix_ms: 5,
            revision: 6,
        }
    }

    fn pb_note() -> pb::HandoffNote {
        pb::HandoffNote {
            commit: "4f2a".into(),
            branch: "main".into(),
            done: "d".into(),
            remaining: "r".into(),
            blocked: "b".into(),
            rebuild: "rb".into(),
            first_step: "f".into(),
            changed_files: vec!["a.rs".into()],
            dirty_files: vec!["x.txt".into()],
            volatile_facts: vec![pb::VolatileFact {
                name: "count".into(),
                claimed_value: "4".into(),
                check_command: "echo 5".into(),
            }],
        }
    }

    #[test]
    fn note_round_trips_through_the_wire_type() {
        let wire = pb_note();
        let ours = note(wire.clone());
        assert_eq!(ours.volatile_facts[0].check_command, "echo 5");
        assert_eq!(ours.dirty_files, ["x.txt"]);
        assert_eq!(note_to_pb(ours), wire);
    }

    #[test]
    fn patch_keeps_absent_fields_absent() {
        let wire = patch_to_pb(RecordPatch::default().with_field("pr", "42"));
        assert_eq!(wire.status, None);
        assert_eq!(wire.summary, None);
        assert_eq!(wire.set_fields.get("pr").map(String::as_str), Some("42"));
        let wire = patch_to_pb(RecordPatch::status("done").with_summary(""));
        assert_eq!(wire.status.as_deref(), Some("done"));
        assert_eq!(
            wire.summary.as_deref(),
            Some(""),
            "an empty summary clears it"
        );
    }

    #[test]
    fn record_with_offer_and_empty_last_note() {
        let response = pb::GetRecordResponse {
            record: Some(pb::Record {
                status: "blocked".into(),
                fields: [("pr".to_owned(), "42".to_owned())].into(),
                pending_offer: Some(pb::Offer {
                    from: Some(pb::Holder {
                        name: "claude@host-a".into(),
                        client_id: "c1".into(),
                    }),
                    from_token: 17,
                    to: "bob".into(),
                    note: Some(pb_note()),
                    offer_ttl_ms: 600_000,
                    offered_at_unix_ms: 1,
                    revision: 20,
                    remaining_ms: 599_000,
                }),
                last_note: Some(pb::HandoffNote::default()),
                updated_revision: 19,
                ..Default::default()
            }),
            lease: Some(pb_lease()),
            revision: 21,
        };
        let view = record_view("tasks/a", response).unwrap();
        assert_eq!(view.key, "tasks/a");
        assert_eq!(view.record.status, "blocked");
        assert_eq!(view.record.fields["pr"], "42");
        let offer = view.record.pending_offer.unwrap();
        assert_eq!((offer.key.as_str(), offer.from_token), ("tasks/a", 17));
        assert_eq!(offer.offer_ttl, Duration::from_secs(600));
        assert_eq!(offer.note.commit, "4f2a");
        assert_eq!(view.record.last_note, None, "an empty note is no note");
        assert_eq!(view.lease.unwrap().token, 17);

        let free = record_view("tasks/b", pb::GetRecordResponse::default()).unwrap();
        assert_eq!(free.record, Record::default());
        assert_eq!(free.lease, None);
    }

    #[test]
    fn offer_without_giver_and_accept_without_lease_are_protocol_errors() {
        let response = pb::OfferResponse {
            offer: Some(pb::Offer::default()),
            revision: 1,
        };
        assert!(matches!(offered("k", response), Err(Error::Protocol(_))));
        let response = pb::AcceptResponse {
            lease: None,
            note: None,
            from: None,
            revision: 1,
        };
        assert!(matches!(
            accepted(response, clock()),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn accepted_carries_the_new_lease_with_a_safe_deadline_like_a_claim() {
        let clock = clock();
        let response = pb::AcceptResponse {
            lease: Some(pb_lease()),
            note: Some(pb_note()),
            from: Some(pb::Holder {
                name: "giver".into(),
                client_id: "g".into(),
            }),
            revision: 17,
        };
        let accepted = accepted(response, clock).unwrap();
        assert_eq!(accepted.lease.token, 17);
        assert_eq!(accepted.from.name, "giver");
        assert_eq!(accepted.note.first_step, "f");
        assert_eq!(
            accepted.safe_deadline - clock.send_time,
            Duration::from_millis(19_000)
        );
        let grant = accepted.grant();
        assert_eq!(grant.safe_deadline, accepted.safe_deadline);
        assert!(!grant.already_held);
    }

    #[test]
    fn history_keeps_event_order_and_dropped_count() {
        let response = pb::HistoryResponse {
            events: vec![
                pb::Event {
                    revision: 3,
                    kind: "claimed".into(),
                    actor: Some(pb::Actor {
                        name: "a".into(),
                        client_id: "c".into(),
                        ..pb::Actor::default()
                    }),
                    token: 3,
                    ..Default::default()
                },
                pb::Event {
                    revision: 4,
                    kind: "expired".into(),
                    actor: None,
                    token: 3,
                    ..Default::default()
                },
            ],
            dropped: 9,
            revision: 4,
        };
        let history = history("tasks/a", response);
        assert_eq!(history.key, "tasks/a");
        assert_eq!(history.dropped, 9);
        assert_eq!(history.events[0].actor.as_ref().unwrap().name, "a");
        assert_eq!(history.events[1].actor, None);
        assert_eq!(history.stints()[0].ended_by.as_deref(), Some("expired"));
    }

    #[test]
    fn reply_without_outcome_is_a_protocol_error() {
        let response = pb::ClaimResponse {
            outcome: None,
            revision: 3,
        };
        assert!(matches!(
            claim_outcome(response, clock()),
            Err(Error::Protocol(_))
        ));
        let response = pb::ReleaseResponse {
            outcome: None,
            revision: 3,
        };
        assert!(matches!(release_outcome(response), Err(Error::Protocol(_))));
    }

    #[test]
    fn lease_without_holder_is_a_protocol_error() {
        let mut bad = pb_lease();
        bad.holder = None;
        assert!(matches!(lease(bad), Err(Error::Protocol(_))));
    }

    #[test]
    fn renew_lost_to_a_free_key_has_no_current_lease() {
        let response = pb::RenewResponse {
            outcome: Some(pb::renew_response::Outcome::Lost(pb::Lost {
                current: None,
            })),
            revision: 40,
        };
        assert_eq!(
            renew_outcome(response, clock()).unwrap(),
            RenewOutcome::Lost { current: None }
        );
    }

    #[test]
    fn status_maps_zero_leader_to_none() {
        let status = cluster_status(
            "a:1".into(),
            pb::StatusResponse {
                node_id: 1,
                state: "candidate".into(),
                ..Default::default()
            },
        );
        assert_eq!(status.leader_id, None);
        assert_eq!(status.leader_addr, None);
        assert_eq!(status.endpoint, "a:1");
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn invalid_argument_keeps_the_servers_message_verbatim() {
        let err = error(&tonic::Status::invalid_argument(
            "key must be 1 to 512 bytes, got 0",
        ));
        assert_eq!(
            err,
            Error::InvalidArgument("key must be 1 to 512 bytes, got 0".into())
        );
        assert_eq!(err.to_string(), "key must be 1 to 512 bytes, got 0");
    }

    #[test]
    fn failed_precondition_is_a_refusal_naming_the_holder() {
        let err = error(&tonic::Status::failed_precondition(
            "stale token 5 for tasks/x: held by codex@b with token 9",
        ));
        assert_eq!(
            err,
            Error::Refused(Box::new(Refusal::other(
                "stale token 5 for tasks/x: held by codex@b with token 9"
            )))
        );
        assert_eq!(
            err.to_string(),
            "refused: stale token 5 for tasks/x: held by codex@b with token 9"
        );
    }

    #[test]
    fn other_codes_keep_code_and_message() {
        let err = error(&tonic::Status::internal("bug"));
        assert_eq!(
            err,
            Error::Other {
                code: Code::Internal,
                message: "bug".into()
            }
        );
    }

    #[test]
    fn out_of_range_is_compacted_with_the_numbers_of_its_details() {
        let details = pb::Compacted {
            requested: 4,
            first_available: 90,
        };
        let status = tonic::Status::with_details(
            Code::OutOfRange,
            "compacted: anything",
            prost::Message::encode_to_vec(&details).into(),
        );
        assert_eq!(
            error(&status),
            Error::Compacted {
                requested: 4,
                first_available: 90
            }
        );
    }

    #[test]
    fn out_of_range_is_compacted_with_the_numbers_of_the_message() {
        let err = error(&tonic::Status::out_of_range(
            "compacted: revision 3 is older than this node's watch window, which starts at \
             1207; re-read the board and watch from its revision",
        ));
        assert_eq!(
            err,
            Error::Compacted {
                requested: 3,
                first_available: 1207
            }
        );
        assert!(
            err.to_string().starts_with("compacted: revision 3 "),
            "{err}"
        );
        // A message this client cannot read is still a compaction.
        assert_eq!(
            error(&tonic::Status::out_of_range("compacted")),
            Error::Compacted {
                requested: 0,
                first_available: 0
            }
        );
        assert_eq!(
            Error::compacted("compacted: revision x; starts at 9"),
            Error::Compacted {
                requested: 0,
                first_available: 9
            }
        );
    }
}
