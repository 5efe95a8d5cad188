//! Unit tests of waiting in line (`Op::Wait`, `Op::LeaveLine`, `Op::DropWaiter`, and the
//! hand-on of a freed key to the oldest waiter in the freeing entry).

use super::access::AccessState;
use super::limits::*;
use super::*;

fn holder(name: &str) -> Holder {
    Holder {
        name: name.into(),
        client_id: format!("cid-{name}").into(),
    }
}

fn from(who: &str, seq: u64, op: Op) -> LogCommand {
    let session = format!("cid-{who}");
    LogCommand {
        request_id: Some(RequestId {
            client_id: session.clone(),
            seq,
        }),
        leader_unix_ms: 1_000 * seq,
        sender: Some(Sender {
            client_id: session.into(),
            principal: Some(format!("p-{who}").into()),
        }),
        op,
    }
}

fn leader(op: Op) -> LogCommand {
    LogCommand {
        request_id: None,
        leader_unix_ms: 0,
        op,
        sender: None,
    }
}

fn wait_op(who: &str, key: &str) -> Op {
    Op::Wait {
        key: key.into(),
        holder: holder(who),
        ttl_ms: 5_000,
    }
}

fn wait(t: &mut LeaseTable, index: u64, who: &str, key: &str) -> Outcome {
    t.apply(index, &from(who, index, wait_op(who, key)))
}

/// `who` waits on `key` at `index`: its place in line.
fn in_line(t: &mut LeaseTable, index: u64, who: &str, key: &str) -> InLine {
    match wait(t, index, who, key) {
        Outcome::InLine { place } => place,
        other => panic!("{who} not in line: {other:?}"),
    }
}

fn claim(t: &mut LeaseTable, index: u64, who: &str, key: &str) -> Lease {
    let op = Op::Claim {
        key: key.into(),
        holder: holder(who),
        ttl_ms: 10_000,
    };
    match t.apply(index, &from(who, index, op)) {
        Outcome::Granted { lease, .. } => lease,
        other => panic!("not granted: {other:?}"),
    }
}

fn release(t: &mut LeaseTable, index: u64, who: &str, key: &str, token: u64) -> Changes {
    let op = Op::Release {
        key: key.into(),
        token,
        final_status: None,
    };
    let mut changes = Changes::default();
    let out = t.apply_tracked(
        index,
        &from(who, index, op),
        &mut changes,
        &mut AccessState::default(),
    );
    assert!(matches!(out, Outcome::Released { .. }), "{out:?}");
    changes
}

fn waiting(t: &LeaseTable, key: &str) -> Vec<String> {
    t.line(key)
        .iter()
        .map(|w| w.holder.name.to_string())
        .collect()
}

#[test]
fn a_wait_for_a_free_key_is_a_claim() {
    let mut t = LeaseTable::default();
    match wait(&mut t, 3, "ann", "k") {
        Outcome::Granted {
            lease,
            already_held,
            ..
        } => {
            assert_eq!(lease.token, 3);
            assert!(!already_held);
        }
        other => panic!("{other:?}"),
    }
    assert!(t.line("k").is_empty());
    // Its holder waiting again renews it, as a claim again would.
    assert!(matches!(
        wait(&mut t, 4, "ann", "k"),
        Outcome::Granted {
            already_held: true,
            ..
        }
    ));
}

#[test]
fn waiters_line_up_in_arrival_order_and_renewing_keeps_a_place() {
    let mut t = LeaseTable::default();
    let held = claim(&mut t, 1, "ann", "k");
    let bob = in_line(&mut t, 2, "bob", "k");
    assert_eq!((bob.position, bob.waiters, bob.joined), (1, 1, 2));
    match &bob.blocked {
        Blocked::Held { lease, .. } => assert_eq!(lease.token, held.token),
        other => panic!("{other:?}"),
    }
    assert_eq!(in_line(&mut t, 3, "cat", "k").position, 2);
    assert_eq!(in_line(&mut t, 4, "dan", "k").position, 3);
    // Bob renews his place: he keeps it, its countdown restarts from this entry.
    let mut changes = Changes::default();
    let again = t.apply_tracked(
        5,
        &from("bob", 5, wait_op("bob", "k")),
        &mut changes,
        &mut AccessState::default(),
    );
    match again {
        Outcome::InLine { place } => assert_eq!((place.position, place.joined), (1, 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.line("k")[0].basis, 5);
    assert_eq!(
        changes.effects,
        vec![Effect::Start {
            timer: Timer::Waiter,
            key: "k\ncid-bob".into(),
            token: 0,
            basis: 5,
            ms: 5_000,
        }]
    );
    assert_eq!(waiting(&t, "k"), ["bob", "cat", "dan"]);
    assert_eq!(t.waiter_count(), 3);
    // Joining is recorded, renewing is not.
    let events = &t.case("k").unwrap().history.events;
    let joined: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventKind::Waited)
        .map(|e| (e.revision, e.actor.as_ref().unwrap().name.to_string()))
        .collect();
    assert_eq!(
        joined,
        [(2, "bob".into()), (3, "cat".into()), (4, "dan".into())]
    );
}

#[test]
fn a_release_hands_the_key_to_the_oldest_waiter_in_the_same_entry() {
    let mut t = LeaseTable::default();
    let held = claim(&mut t, 1, "ann", "k");
    in_line(&mut t, 2, "bob", "k");
    in_line(&mut t, 3, "cat", "k");
    let assign = Op::Assign {
        key: "k".into(),
        to: "bob".into(),
        by: "dispatch".into(),
        reason: "next".into(),
    };
    let assigned = t.apply(4, &from("dispatch", 1, assign));
    assert!(matches!(assigned, Outcome::Assigned { .. }), "{assigned:?}");
    let changes = release(&mut t, 7, "ann", "k", held.token);
    let lease = t.lease("k").unwrap();
    assert_eq!(lease.holder, holder("bob"));
    assert_eq!(
        lease.token, 7,
        "the releasing entry's revision is the token"
    );
    assert_eq!(lease.ttl_ms, 5_000, "the TTL the waiter asked for");
    assert_eq!(waiting(&t, "k"), ["cat"]);
    // The release and the grant, both in revision 7; the grant credited to bob as he asked.
    let events = &t.case("k").unwrap().history.events;
    let last: Vec<_> = events.iter().rev().take(2).collect();
    assert_eq!(last[1].kind, EventKind::Released);
    assert_eq!(last[0].kind, EventKind::Claimed);
    assert_eq!(last[0].revision, 7);
    assert_eq!(last[0].token, 7);
    let actor = last[0].actor.as_ref().unwrap();
    assert_eq!(&*actor.client_id, "cid-bob");
    assert_eq!(actor.principal.as_deref(), Some("p-bob"));
    assert!(
        last[0].detail.contains("from the line"),
        "{}",
        last[0].detail
    );
    // Bob's session is told of his grant (pushed on his endings stream if it asks).
    let told: Vec<_> = changes
        .endings
        .iter()
        .map(|e| {
            let by = e.by.as_ref().map(|a| a.client_id.to_string());
            (e.kind, &*e.key, e.holder.clone(), e.token, e.revision, by)
        })
        .collect();
    assert_eq!(
        told,
        [(
            EventKind::Claimed,
            "k",
            holder("bob"),
            7,
            7,
            Some("cid-bob".to_owned())
        )]
    );
    // With the key's assignment, as a claim's answer gives it.
    let assignment = changes.endings[0].assignment.as_ref().expect("assigned");
    assert_eq!((&*assignment.to, &*assignment.by), ("bob", "dispatch"));
    // Bob's place's countdown stops, his lease's starts.
    assert!(changes.effects.contains(&Effect::Stop {
        timer: Timer::Waiter,
        key: "k\ncid-bob".into(),
    }));
    assert!(changes.effects.contains(&Effect::Start {
        timer: Timer::Lease,
        key: "k".into(),
        token: 7,
        basis: 7,
        ms: 5_000,
    }));
    // Bob's next wait says he holds it.
    assert!(matches!(
        wait(&mut t, 8, "bob", "k"),
        Outcome::Granted {
            already_held: true,
            ..
        }
    ));
    // And the last waiter gets it from bob's release; then the line is gone.
    release(&mut t, 9, "bob", "k", 7);
    assert_eq!(t.lease("k").unwrap().holder, holder("cat"));
    assert!(t.line("k").is_empty());
    assert!(t.lines().is_empty());
    assert_eq!(t.waiter_count(), 0);
}

#[test]
fn an_expiry_hands_on_unless_it_starts_a_quarantine_whose_end_hands_on() {
    let mut t = LeaseTable::default();
    let held = claim(&mut t, 1, "ann", "k");
    in_line(&mut t, 2, "bob", "k");
    let expire = |token, basis| {
        leader(Op::Expire {
            key: "k".into(),
            token,
            basis,
        })
    };
    t.apply(3, &expire(held.token, held.basis));
    assert_eq!(t.lease("k").unwrap().holder, holder("bob"));
    assert_eq!(t.lease("k").unwrap().token, 3);
    // Under a quarantine rule the key stays unclaimable: the waiter keeps waiting, and the
    // end of the quarantine hands it on.
    in_line(&mut t, 4, "cat", "k");
    t.apply(
        5,
        &leader(Op::SetQuarantine {
            prefix: "k".into(),
            delay_ms: 2_000,
        }),
    );
    t.apply(6, &expire(3, 3));
    assert!(t.lease("k").is_none());
    assert_eq!(waiting(&t, "k"), ["cat"]);
    match &in_line(&mut t, 7, "cat", "k").blocked {
        Blocked::Quarantined { revision, .. } => assert_eq!(*revision, 6),
        other => panic!("{other:?}"),
    }
    t.apply(
        8,
        &leader(Op::EndQuarantine {
            key: "k".into(),
            revision: 6,
        }),
    );
    assert_eq!(t.lease("k").unwrap().holder, holder("cat"));
    assert_eq!(t.lease("k").unwrap().token, 8);
}

#[test]
fn a_revoke_hands_on_at_once_and_a_held_revoke_at_the_end_of_its_hold() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "ann", "k");
    in_line(&mut t, 2, "bob", "k");
    in_line(&mut t, 3, "cat", "k");
    let revoke = |hold| {
        let op = match hold {
            false => Op::Revoke {
                key: "k".into(),
                reason: "r".into(),
            },
            true => Op::RevokeHeld {
                key: "k".into(),
                reason: "r".into(),
            },
        };
        from("ops", 4, op)
    };
    t.apply(4, &revoke(false));
    assert_eq!(t.lease("k").unwrap().holder, holder("bob"));
    let mut held = revoke(true);
    held.request_id.as_mut().unwrap().seq = 5;
    t.apply(5, &held);
    assert!(t.lease("k").is_none(), "held back for bob's window");
    assert_eq!(waiting(&t, "k"), ["cat"]);
    t.apply(
        6,
        &leader(Op::EndQuarantine {
            key: "k".into(),
            revision: 5,
        }),
    );
    assert_eq!(t.lease("k").unwrap().holder, holder("cat"));
}

#[test]
fn a_lapsed_place_is_dropped_and_skipped_a_renewed_one_is_not() {
    let mut t = LeaseTable::default();
    let held = claim(&mut t, 1, "ann", "k");
    in_line(&mut t, 2, "bob", "k");
    in_line(&mut t, 3, "cat", "k");
    in_line(&mut t, 4, "cat", "k");
    let drop_ = |client: &str, basis| {
        leader(Op::DropWaiter {
            key: "k".into(),
            client_id: client.into(),
            basis,
        })
    };
    // Cat renewed at 4: a drop naming her place's basis 3 came too late.
    assert_eq!(t.apply(5, &drop_("cid-cat", 3)), Outcome::DropWaiterIgnored);
    assert_eq!(t.apply(6, &drop_("cid-bob", 2)), Outcome::WaiterDropped);
    assert_eq!(waiting(&t, "k"), ["cat"]);
    let event = t.case("k").unwrap().history.events.back().unwrap().clone();
    assert_eq!(event.kind, EventKind::LeftLine);
    assert!(event.actor.is_none(), "the leader's own entry");
    assert_eq!(t.apply(7, &drop_("cid-bob", 2)), Outcome::DropWaiterIgnored);
    release(&mut t, 8, "ann", "k", held.token);
    assert_eq!(
        t.lease("k").unwrap().holder,
        holder("cat"),
        "bob's lapsed place is skipped"
    );
}

#[test]
fn leaving_the_line_says_whether_one_waited_and_what_one_holds() {
    let mut t = LeaseTable::default();
    let held = claim(&mut t, 1, "ann", "k");
    in_line(&mut t, 2, "bob", "k");
    in_line(&mut t, 3, "cat", "k");
    let leave = |who: &str, seq| {
        from(
            who,
            seq,
            Op::LeaveLine {
                key: "k".into(),
                holder: holder(who),
            },
        )
    };
    assert_eq!(
        t.apply(4, &leave("cat", 4)),
        Outcome::LeftLine {
            was_waiting: true,
            holds: None
        }
    );
    assert_eq!(waiting(&t, "k"), ["bob"]);
    // Bob is granted the key before his leave arrives: the answer says he holds it.
    release(&mut t, 5, "ann", "k", held.token);
    match t.apply(6, &leave("bob", 6)) {
        Outcome::LeftLine {
            was_waiting: false,
            holds: Some(lease),
        } => assert_eq!(lease.token, 5),
        other => panic!("{other:?}"),
    }
    // Leaving a line one is not in changes nothing.
    let before = t.clone();
    assert_eq!(
        t.apply(7, &leave("dan", 7)),
        Outcome::LeftLine {
            was_waiting: false,
            holds: None
        }
    );
    assert!(t.same_but_sessions(&before));
}

#[test]
fn a_full_line_refuses_the_next_waiter_with_its_facts_and_changes_nothing() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "ann", "k");
    for i in 0..WAITERS_PER_KEY_MAX as u64 {
        in_line(&mut t, 2 + i, &format!("w{i}"), "k");
    }
    let before = t.clone();
    let next = 2 + WAITERS_PER_KEY_MAX as u64;
    match wait(&mut t, next, "late", "k") {
        Outcome::Refused {
            refusal:
                Refusal::LineFull {
                    key,
                    waiters,
                    waiters_max,
                    whole_cluster,
                },
        } => {
            assert_eq!(key, "k");
            assert_eq!(waiters, WAITERS_PER_KEY_MAX as u64);
            assert_eq!(waiters_max, WAITERS_PER_KEY_MAX as u64);
            assert!(!whole_cluster);
        }
        other => panic!("{other:?}"),
    }
    assert!(t.same_but_sessions(&before));
    // A waiter already in line still renews its place.
    assert!(matches!(
        wait(&mut t, next + 1, "w0", "k"),
        Outcome::InLine { .. }
    ));
}

#[test]
fn a_retried_wait_gets_its_first_answer_and_joins_once() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "ann", "k");
    let cmd = from("bob", 2, wait_op("bob", "k"));
    let first = t.apply(2, &cmd);
    let again = t.apply(3, &cmd);
    assert_eq!(first, again);
    assert_eq!(waiting(&t, "k"), ["bob"]);
    assert_eq!(t.line("k")[0].basis, 2, "a retry is no renewal");
}

#[test]
fn a_wait_from_another_session_than_its_holder_is_refused() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "ann", "k");
    let mut cmd = from("bob", 2, wait_op("bob", "k"));
    cmd.sender.as_mut().unwrap().client_id = "cid-eve".into();
    assert!(matches!(t.apply(2, &cmd), Outcome::Invalid { .. }));
    assert!(t.line("k").is_empty());
}

#[test]
fn a_waiter_handed_the_key_by_its_holder_leaves_the_line() {
    let mut t = LeaseTable::default();
    let held = claim(&mut t, 1, "ann", "k");
    in_line(&mut t, 2, "bob", "k");
    in_line(&mut t, 3, "cat", "k");
    let offer = Op::Offer {
        key: "k".into(),
        token: held.token,
        to: "cat".into(),
        note: HandoffNote::default(),
        offer_ttl_ms: 60_000,
    };
    assert!(matches!(
        t.apply(4, &from("ann", 4, offer)),
        Outcome::Offered { .. }
    ));
    let accept = Op::Accept {
        key: "k".into(),
        holder: holder("cat"),
        ttl_ms: 5_000,
    };
    assert!(matches!(
        t.apply(5, &from("cat", 5, accept)),
        Outcome::Accepted { .. }
    ));
    assert_eq!(waiting(&t, "k"), ["bob"], "cat holds it: out of line");
    release(&mut t, 6, "cat", "k", 5);
    assert_eq!(t.lease("k").unwrap().holder, holder("bob"));
}
