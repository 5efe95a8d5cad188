use tonic::Code;

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
            permits: None,
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
            permits: None,
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
        ..
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
        permits: None,
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
        quarantine: None,
        line: None,
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
    assert_eq!(free.quarantine, None);

    let quarantined = record_view(
        "tasks/c",
        pb::GetRecordResponse {
            quarantine: Some(pb::KeyQuarantine {
                revision: 9,
                delay_ms: 30_000,
                remaining_ms: 12_000,
                revoked: false,
            }),
            ..Default::default()
        },
    )
    .unwrap();
    let q = quarantined.quarantine.unwrap();
    assert_eq!(
        (q.revision, q.delay, q.remaining),
        (9, Duration::from_secs(30), Duration::from_secs(12))
    );
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

// Status codes to errors.

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
