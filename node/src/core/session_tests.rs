//! Unit tests of who may act and who is recorded: a lease is bound to its holder's
//! session, a claim never renames or adopts one, and every event names its real sender.

use super::*;

const BOB: &str = "bob-proc";
const ALICE: &str = "alice-proc";

fn holder(name: &str, client: &str) -> Holder {
    Holder {
        name: name.into(),
        client_id: client.into(),
    }
}

/// A command from session `session`, authenticated as `principal`, with its own request id.
fn from(session: &str, principal: Option<&str>, seq: u64, op: Op) -> LogCommand {
    LogCommand {
        request_id: Some(RequestId {
            client_id: format!("{session}-retries"),
            seq,
        }),
        leader_unix_ms: 1_000 + seq,
        op,
        sender: Some(Sender {
            client_id: session.into(),
            principal: principal.map(Name::from),
        }),
    }
}

fn claim(key: &str, h: &Holder) -> Op {
    Op::Claim {
        key: key.into(),
        holder: h.clone(),
        ttl_ms: 10_000,
    }
}

fn refusal(outcome: Outcome) -> Refusal {
    match outcome {
        Outcome::Refused { refusal } => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Bob holds `tasks/k` with token 1.
fn bob_holds() -> (LeaseTable, Lease) {
    let mut t = LeaseTable::default();
    let lease = match t.apply(
        1,
        &from(BOB, Some("bob"), 1, claim("tasks/k", &holder("bob", BOB))),
    ) {
        Outcome::Granted {
            lease,
            already_held: false,
            ..
        } => lease,
        other => panic!("{other:?}"),
    };
    (t, lease)
}

#[test]
fn a_claim_with_the_holders_client_id_under_another_name_is_refused_and_renames_nothing() {
    let (mut t, lease) = bob_holds();
    let before = t.clone();
    // The takeover the session binding closes: alice presents bob's public client id under her own name.
    let outcome = t.apply(
        2,
        &from(
            BOB,
            Some("alice"),
            2,
            claim("tasks/k", &holder("alice", BOB)),
        ),
    );
    match outcome {
        Outcome::Held {
            lease: held,
            same_name_other_process: false,
            ..
        } => assert_eq!(held, lease, "the refusal names bob's lease as it is"),
        other => panic!("expected held, got {other:?}"),
    }
    assert_eq!(
        t.lease("tasks/k"),
        before.lease("tasks/k"),
        "nothing changed"
    );
    assert_eq!(t.case("tasks/k"), before.case("tasks/k"), "no event");
}

#[test]
fn the_same_session_under_the_same_name_gets_its_lease_back_renewed() {
    let (mut t, lease) = bob_holds();
    // Bob's process restarted with its client id and lost our answer: it claims again.
    match t.apply(
        2,
        &from(BOB, Some("bob"), 7, claim("tasks/k", &holder("bob", BOB))),
    ) {
        Outcome::Granted {
            lease: again,
            already_held: true,
            ..
        } => {
            assert_eq!((again.token, again.basis), (lease.token, 2));
            assert_eq!(again.holder, lease.holder);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_claim_for_another_session_is_bad_input() {
    let mut t = LeaseTable::default();
    let outcome = t.apply(
        1,
        &from(ALICE, None, 1, claim("tasks/k", &holder("bob", BOB))),
    );
    match outcome {
        Outcome::Invalid { message } => assert!(message.contains("its own session"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(t.lease("tasks/k").is_none());
}

#[test]
fn the_right_token_from_another_session_is_refused_naming_both_and_changes_nothing() {
    let (t0, lease) = bob_holds();
    let token = lease.token;
    let ops = [
        Op::Renew {
            key: "tasks/k".into(),
            token,
        },
        Op::Release {
            key: "tasks/k".into(),
            token,
            final_status: Some("done".into()),
        },
        Op::Update {
            key: "tasks/k".into(),
            token,
            patch: RecordPatch {
                status: Some("verified".into()),
                ..RecordPatch::default()
            },
        },
        Op::Offer {
            key: "tasks/k".into(),
            token,
            to: "carol".into(),
            note: HandoffNote::default(),
            offer_ttl_ms: 10_000,
        },
        Op::Cancel {
            key: "tasks/k".into(),
            token,
        },
    ];
    for op in ops {
        let mut t = t0.clone();
        let r = refusal(t.apply(2, &from(ALICE, Some("alice"), 2, op.clone())));
        assert_eq!(
            r,
            Refusal::WrongSession {
                lease: Box::new(lease.clone()),
                client_id: ALICE.into()
            },
            "{op:?}"
        );
        let line = r.to_string();
        assert!(
            line.contains("held by bob (client bob-proc)") && line.contains("client alice-proc"),
            "{line}"
        );
        assert_eq!(
            t.lease("tasks/k"),
            t0.lease("tasks/k"),
            "{op:?} changed the lease"
        );
        assert_eq!(
            t.case("tasks/k"),
            t0.case("tasks/k"),
            "{op:?} changed the case"
        );
        // The same write from bob's own session is not refused as another session's.
        let mut t = t0.clone();
        let own = t.apply(2, &from(BOB, Some("bob"), 2, op.clone()));
        assert!(
            !matches!(
                own,
                Outcome::Refused {
                    refusal: Refusal::WrongSession { .. }
                }
            ),
            "{op:?}: {own:?}"
        );
    }
}

#[test]
fn a_stale_token_is_refused_with_the_current_lease_as_a_fact() {
    let (mut t, lease) = bob_holds();
    let op = Op::Update {
        key: "tasks/k".into(),
        token: 99,
        patch: RecordPatch {
            summary: Some("s".into()),
            ..RecordPatch::default()
        },
    };
    assert_eq!(
        refusal(t.apply(2, &from(BOB, None, 2, op))),
        Refusal::StaleToken {
            key: "tasks/k".into(),
            token: 99,
            current: Some(Box::new(lease))
        }
    );
}

#[test]
fn every_event_records_its_real_sender_with_session_and_principal() {
    let (mut t, lease) = bob_holds();
    let token = lease.token;
    let update = Op::Update {
        key: "tasks/k".into(),
        token,
        patch: RecordPatch {
            status: Some("in_progress".into()),
            ..RecordPatch::default()
        },
    };
    t.apply(2, &from(BOB, Some("bob"), 2, update));
    let assign = Op::Assign {
        key: "tasks/k".into(),
        to: "carol".into(),
        by: "disp".into(),
        reason: "load".into(),
    };
    t.apply(3, &from("disp-proc", Some("disp"), 1, assign));
    let revoke = Op::Revoke {
        key: "tasks/k".into(),
        reason: "stuck".into(),
    };
    t.apply(4, &from("ops-proc", Some("ops"), 1, revoke));
    let actors: Vec<(EventKind, Option<Actor>, Attribution)> = t
        .case("tasks/k")
        .unwrap()
        .history
        .events
        .iter()
        .map(|e| (e.kind, e.actor.clone(), e.attribution))
        .collect();
    let actor = |name: &str, client: &str, principal: &str| {
        Some(Actor {
            name: name.into(),
            client_id: client.into(),
            principal: Some(principal.into()),
        })
    };
    assert_eq!(
        actors,
        vec![
            (
                EventKind::Claimed,
                actor("bob", BOB, "bob"),
                Attribution::Requester
            ),
            (
                EventKind::Updated,
                actor("bob", BOB, "bob"),
                Attribution::Requester
            ),
            (
                EventKind::Assigned,
                actor("disp", "disp-proc", "disp"),
                Attribution::Requester
            ),
            // An operator acts as no holder: its session and principal say who it was.
            (
                EventKind::Revoked,
                actor("", "ops-proc", "ops"),
                Attribution::Requester
            ),
        ]
    );
}

#[test]
fn format_3_commands_apply_by_format_3_rules_so_replicas_of_any_version_agree() {
    // A format-3 command (no sender) logged before the upgrade must give the state the
    // format-3 nodes computed: the token alone binds, a claim with the client id renames,
    // and events credit the lease holder, marked so.
    let format_3 = |seq: u64, op: Op| LogCommand {
        request_id: Some(RequestId {
            client_id: "old".into(),
            seq,
        }),
        leader_unix_ms: 1_000,
        op,
        sender: None,
    };
    let mut t = LeaseTable::default();
    t.apply(1, &format_3(1, claim("tasks/k", &holder("bob", BOB))));
    let renamed = t.apply(2, &format_3(2, claim("tasks/k", &holder("alice", BOB))));
    assert!(matches!(
        renamed,
        Outcome::Granted {
            already_held: true,
            ..
        }
    ));
    assert_eq!(t.lease("tasks/k").unwrap().holder.name, "alice");
    let update = Op::Update {
        key: "tasks/k".into(),
        token: 1,
        patch: RecordPatch {
            status: Some("done".into()),
            ..RecordPatch::default()
        },
    };
    assert!(matches!(
        t.apply(3, &format_3(3, update)),
        Outcome::Updated { .. }
    ));
    let event = t.case("tasks/k").unwrap().history.events.back().unwrap();
    assert_eq!(event.attribution, Attribution::RecordedBeforeFormat4);
    assert_eq!(event.actor.as_ref().unwrap().client_id, BOB);
    assert_eq!(event.actor.as_ref().unwrap().principal, None);
}

#[test]
fn a_retry_answers_with_the_revision_its_first_attempt_was_decided_at() {
    let mut t = LeaseTable::default();
    let cmd = from(BOB, None, 1, claim("tasks/k", &holder("bob", BOB)));
    let first = t.apply_decided(
        5,
        &cmd,
        &mut Changes::default(),
        &mut access::AccessState::default(),
    );
    assert!(matches!(first.0, Outcome::Granted { .. }));
    assert_eq!(first.1, 5);
    // The same request again, committed later (its first answer was lost on the way).
    let retry = t.apply_decided(
        9,
        &cmd,
        &mut Changes::default(),
        &mut access::AccessState::default(),
    );
    assert_eq!(retry, first, "the first answer, with its revision");
}
