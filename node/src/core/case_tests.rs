//! Unit tests of the case file: fenced records, assignments, history and handoffs.

use super::limits::*;
use super::*;

fn holder(name: &str) -> Holder {
    Holder {
        name: name.into(),
        client_id: format!("cid-{name}").into(),
    }
}

/// A command from the session of holder `name` (`holder(name)`'s client id).
fn cmd_by(name: &str, op: Op) -> LogCommand {
    LogCommand {
        request_id: None,
        leader_unix_ms: 1_000,
        sender: Some(Sender {
            client_id: holder(name).client_id,
            principal: None,
        }),
        op,
    }
}

/// A command from the session of whoever holds the command's key (or of `nobody` when it
/// is free): the normal path, where a write comes from the lease holder. The tests of
/// session binding send from other sessions explicitly (`cmd_by`).
fn cmd_in(t: &LeaseTable, op: Op) -> LogCommand {
    let holder = match &op {
        Op::Claim { holder, .. } | Op::Accept { holder, .. } | Op::Decline { holder, .. } => {
            holder.name.to_string()
        }
        op => t
            .lease(op.key())
            .map_or("nobody".to_owned(), |l| l.holder.name.to_string()),
    };
    cmd_by(&holder, op)
}

fn claim(t: &mut LeaseTable, index: u64, key: &str, who: &str) -> Outcome {
    t.apply(
        index,
        &cmd_in(
            t,
            Op::Claim {
                key: key.into(),
                holder: holder(who),
                ttl_ms: 10_000,
            },
        ),
    )
}

fn token_of(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Granted { lease, .. } | Outcome::Accepted { lease, .. } => lease.token,
        other => panic!("no grant: {other:?}"),
    }
}

fn update(t: &mut LeaseTable, index: u64, key: &str, token: u64, status: &str) -> Outcome {
    t.apply(
        index,
        &cmd_in(
            t,
            Op::Update {
                key: key.into(),
                token,
                patch: RecordPatch {
                    status: Some(status.into()),
                    ..Default::default()
                },
            },
        ),
    )
}

fn refused(outcome: Outcome) -> String {
    match outcome {
        Outcome::Refused { refusal } => refusal.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn note() -> HandoffNote {
    HandoffNote {
        commit: "abc123".into(),
        done: "parser".into(),
        remaining: "tests".into(),
        volatile_facts: vec![VolatileFact {
            name: "rows left".into(),
            claimed_value: "4".into(),
            check_command: "wc -l todo.txt".into(),
        }],
        ..Default::default()
    }
}

fn offer(t: &mut LeaseTable, index: u64, key: &str, token: u64, to: &str) -> Outcome {
    t.apply(
        index,
        &cmd_in(
            t,
            Op::Offer {
                key: key.into(),
                token,
                to: to.into(),
                note: note(),
                offer_ttl_ms: 60_000,
            },
        ),
    )
}

fn kinds(t: &LeaseTable, key: &str) -> Vec<&'static str> {
    t.case(key)
        .map(|c| c.history.events.iter().map(|e| e.kind.as_str()).collect())
        .unwrap_or_default()
}

#[test]
fn the_board_lists_assigned_keys_nobody_holds_until_one_is_claimed() {
    let mut t = LeaseTable::default();
    for (i, key) in ["tasks/1", "tasks/2", "tasks/3", "other/1"]
        .iter()
        .enumerate()
    {
        let op = Op::Assign {
            key: (*key).into(),
            to: "claude".into(),
            by: "dispatcher".into(),
            reason: "triage".into(),
        };
        let assigned = t.apply(i as u64 + 1, &cmd_in(&t, op));
        assert!(matches!(assigned, Outcome::Assigned { .. }), "{assigned:?}");
    }
    assert!(matches!(
        claim(&mut t, 5, "tasks/2", "codex"),
        Outcome::Granted { .. }
    ));
    let keys = |page: Vec<(&str, &Assignment)>| -> Vec<String> {
        page.into_iter().map(|(k, _)| k.to_string()).collect()
    };
    let (page, more) = t.unclaimed("tasks/", "", 10);
    assert_eq!(page[0].1.to, "claude");
    assert_eq!(page[0].1.by, "dispatcher");
    assert_eq!(keys(page), ["tasks/1", "tasks/3"]);
    assert!(!more);
    let (page, more) = t.unclaimed("tasks/", "", 1);
    assert_eq!((keys(page), more), (vec!["tasks/1".to_string()], true));
    let (page, more) = t.unclaimed("tasks/", "tasks/1", 1);
    assert_eq!((keys(page), more), (vec!["tasks/3".to_string()], false));
    assert_eq!(t.unclaimed("", "", 10).0.len(), 3);
    // A finished task waits for no one: tasks/2, released as done, stays assigned but is
    // not listed.
    let release = Op::Release {
        key: "tasks/2".into(),
        token: 5,
        final_status: Some("done".into()),
    };
    let released = t.apply(6, &cmd_in(&t, release));
    assert!(matches!(released, Outcome::Released { .. }), "{released:?}");
    assert_eq!(
        t.case("tasks/2")
            .unwrap()
            .record
            .assigned_to
            .as_ref()
            .unwrap()
            .to,
        "claude"
    );
    assert_eq!(
        keys(t.unclaimed("tasks/", "", 10).0),
        ["tasks/1", "tasks/3"]
    );
}

#[test]
fn an_assignment_reserves_nothing_and_the_winner_is_told_of_it() {
    let mut t = LeaseTable::default();
    let assigned = t.apply(
        1,
        &cmd_in(
            &t,
            Op::Assign {
                key: "tasks/42".into(),
                to: "claude".into(),
                by: "dispatcher".into(),
                reason: "verify evidence".into(),
            },
        ),
    );
    assert!(matches!(assigned, Outcome::Assigned { .. }));
    // Another agent claims the assigned key and wins; the grant mentions the assignment.
    match claim(&mut t, 2, "tasks/42", "codex") {
        Outcome::Granted { assignment, .. } => assert_eq!(assignment.unwrap().to, "claude"),
        other => panic!("{other:?}"),
    }
    // The addressee's claim is refused naming the holder, and mentions the assignment too.
    match claim(&mut t, 3, "tasks/42", "claude") {
        Outcome::Held {
            lease, assignment, ..
        } => {
            assert_eq!(lease.holder.name, "codex");
            assert_eq!(assignment.unwrap().to, "claude");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(kinds(&t, "tasks/42"), ["assigned", "claimed"]);
}

#[test]
fn an_assignment_is_cleared_by_its_sender_recorded_and_clearing_nothing_records_nothing() {
    let mut t = LeaseTable::default();
    let unassign = |by: &str| Op::Unassign {
        key: "tasks/42".into(),
        by: by.into(),
        reason: "picked up elsewhere".into(),
    };
    // Nothing to clear: no key is made, no event recorded.
    match t.apply(1, &cmd_by("dispatcher", unassign("dispatcher"))) {
        Outcome::Assigned { record } => assert!(record.assigned_to.is_none()),
        other => panic!("{other:?}"),
    }
    assert!(t.case("tasks/42").is_none(), "clearing nothing made a key");
    t.apply(
        2,
        &cmd_by(
            "dispatcher",
            Op::Assign {
                key: "tasks/42".into(),
                to: "claude".into(),
                by: "dispatcher".into(),
                reason: String::new(),
            },
        ),
    );
    let token = token_of(&claim(&mut t, 3, "tasks/42", "codex"));
    match t.apply(4, &cmd_by("lead", unassign("lead"))) {
        Outcome::Assigned { record } => assert!(record.assigned_to.is_none()),
        other => panic!("{other:?}"),
    }
    let case = t.case("tasks/42").unwrap();
    assert!(case.record.assigned_to.is_none());
    let cleared = case.history.events.back().unwrap();
    assert_eq!(cleared.kind, EventKind::Unassigned);
    let actor = cleared.actor.as_ref().unwrap();
    assert_eq!(
        (actor.name.as_str(), actor.client_id.as_str()),
        ("lead", "cid-lead")
    );
    assert_eq!(cleared.token, token, "the holder's token at the time");
    assert_eq!(cleared.revision, 4);
    assert_eq!(
        cleared.detail,
        "was to claude by dispatcher; picked up elsewhere"
    );
    // A second clear changes nothing and records nothing.
    t.apply(5, &cmd_by("lead", unassign("lead")));
    assert_eq!(kinds(&t, "tasks/42"), ["assigned", "claimed", "unassigned"]);
}

#[test]
fn only_the_current_token_may_write_the_record() {
    let mut t = LeaseTable::default();
    let a = token_of(&claim(&mut t, 1, "k", "claude"));
    assert!(matches!(
        update(&mut t, 2, "k", a, "in_progress"),
        Outcome::Updated { .. }
    ));
    t.apply(
        3,
        &cmd_in(
            &t,
            Op::Release {
                key: "k".into(),
                token: a,
                final_status: None,
            },
        ),
    );
    let b = token_of(&claim(&mut t, 4, "k", "codex"));
    // The stale writer is refused and told who holds the key, with which token.
    let msg = refused(update(&mut t, 5, "k", a, "done"));
    assert!(
        msg.contains("held by codex") && msg.contains(&format!("token {b}")),
        "{msg}"
    );
    assert_eq!(t.case("k").unwrap().record.status, "in_progress");
    assert!(matches!(
        update(&mut t, 6, "k", b, "verified"),
        Outcome::Updated { .. }
    ));
    assert_eq!(t.case("k").unwrap().record.status, "verified");
    // Every update is attributed to its stint's holder and token.
    let updates: Vec<(String, u64)> = t
        .case("k")
        .unwrap()
        .history
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Updated)
        .map(|e| (e.actor.as_ref().unwrap().name.to_string(), e.token))
        .collect();
    assert_eq!(
        updates,
        [("claude".to_string(), a), ("codex".to_string(), b)]
    );
}

#[test]
fn record_limits_are_enforced_after_the_patch() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "a"));
    let big = |i: u64| RecordPatch {
        set_fields: [(format!("f{i}"), "x".repeat(40 * 1024))].into(),
        ..Default::default()
    };
    let first = t.apply(
        2,
        &cmd_in(
            &t,
            Op::Update {
                key: "k".into(),
                token: tok,
                patch: big(1),
            },
        ),
    );
    assert!(matches!(first, Outcome::Updated { .. }));
    let second = t.apply(
        3,
        &cmd_in(
            &t,
            Op::Update {
                key: "k".into(),
                token: tok,
                patch: big(2),
            },
        ),
    );
    match second {
        Outcome::Invalid { message } => assert!(message.contains("65536"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        t.case("k").unwrap().record.fields.len(),
        1,
        "nothing partially applied"
    );
    let bad_status = t.apply(
        4,
        &cmd_in(
            &t,
            Op::Update {
                key: "k".into(),
                token: tok,
                patch: RecordPatch {
                    status: Some("Done!".into()),
                    ..Default::default()
                },
            },
        ),
    );
    assert!(matches!(bad_status, Outcome::Invalid { .. }));
}

#[test]
fn a_handoff_moves_the_token_in_one_entry() {
    let mut t = LeaseTable::default();
    let old = token_of(&claim(&mut t, 1, "k", "claude"));
    assert!(matches!(
        offer(&mut t, 2, "k", old, "codex"),
        Outcome::Offered { .. }
    ));
    // While the offer is pending: the holder keeps the key, the record is frozen.
    assert_eq!(t.lease("k").unwrap().token, old);
    assert!(refused(update(&mut t, 3, "k", old, "done")).contains("frozen"));
    assert!(matches!(
        t.apply(
            4,
            &cmd_in(
                &t,
                Op::Renew {
                    key: "k".into(),
                    token: old
                }
            )
        ),
        Outcome::Renewed { .. }
    ));
    let accepted = t.apply(
        5,
        &cmd_in(
            &t,
            Op::Accept {
                key: "k".into(),
                holder: holder("codex"),
                ttl_ms: 10_000,
            },
        ),
    );
    let new = token_of(&accepted);
    match &accepted {
        Outcome::Accepted { note: n, from, .. } => {
            assert_eq!(n, &note());
            assert_eq!(from.name, "claude");
        }
        other => panic!("{other:?}"),
    }
    assert!(new > old);
    // After: only the new token works.
    assert!(matches!(
        t.apply(
            6,
            &cmd_in(
                &t,
                Op::Renew {
                    key: "k".into(),
                    token: old
                }
            )
        ),
        Outcome::Lost { .. }
    ));
    refused(update(&mut t, 7, "k", old, "done"));
    assert!(matches!(
        update(&mut t, 8, "k", new, "in_progress"),
        Outcome::Updated { .. }
    ));
    assert_eq!(
        t.case("k").unwrap().last_note.as_deref(),
        Some(&note()),
        "the note is kept"
    );
    assert_eq!(
        kinds(&t, "k"),
        ["claimed", "offered", "accepted", "updated"]
    );
}

#[test]
fn handoff_refusals_change_nothing() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "claude"));
    assert!(refused(t.apply(
        2,
        &cmd_in(
            &t,
            Op::Accept {
                key: "k".into(),
                holder: holder("codex"),
                ttl_ms: 10_000
            }
        )
    ))
    .contains("no pending offer"));
    assert!(refused(offer(&mut t, 3, "k", tok + 100, "codex")).contains("not current"));
    assert!(refused(offer(&mut t, 4, "k", tok, "claude")).contains("already held by claude"));
    offer(&mut t, 5, "k", tok, "codex");
    assert!(refused(offer(&mut t, 6, "k", tok, "gemini")).contains("already pending"));
    let msg = refused(t.apply(
        7,
        &cmd_in(
            &t,
            Op::Accept {
                key: "k".into(),
                holder: holder("gemini"),
                ttl_ms: 10_000,
            },
        ),
    ));
    assert!(msg.contains("addressed to codex, not gemini"), "{msg}");
    refused(t.apply(
        8,
        &cmd_in(
            &t,
            Op::Decline {
                key: "k".into(),
                holder: holder("gemini"),
            },
        ),
    ));
    refused(t.apply(
        9,
        &cmd_in(
            &t,
            Op::Cancel {
                key: "k".into(),
                token: tok + 100,
            },
        ),
    ));
    assert_eq!(t.lease("k").unwrap().token, tok);
    assert_eq!(t.case("k").unwrap().offer.as_ref().unwrap().to, "codex");
}

#[test]
fn decline_cancel_and_lapse_end_the_offer_and_the_holder_keeps_the_key() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "claude"));
    offer(&mut t, 2, "k", tok, "codex");
    assert_eq!(
        t.apply(
            3,
            &cmd_in(
                &t,
                Op::Decline {
                    key: "k".into(),
                    holder: holder("codex")
                }
            )
        ),
        Outcome::Declined
    );
    offer(&mut t, 4, "k", tok, "codex");
    assert_eq!(
        t.apply(
            5,
            &cmd_in(
                &t,
                Op::Cancel {
                    key: "k".into(),
                    token: tok
                }
            )
        ),
        Outcome::Cancelled
    );
    offer(&mut t, 6, "k", tok, "codex");
    // A lapse for an older offer is ignored; the current one lapses.
    assert_eq!(
        t.apply(
            7,
            &cmd_in(
                &t,
                Op::Lapse {
                    key: "k".into(),
                    offer_revision: 4
                }
            )
        ),
        Outcome::LapseIgnored
    );
    assert_eq!(
        t.apply(
            8,
            &cmd_in(
                &t,
                Op::Lapse {
                    key: "k".into(),
                    offer_revision: 6
                }
            )
        ),
        Outcome::Lapsed
    );
    assert_eq!(t.lease("k").unwrap().token, tok, "the holder keeps the key");
    assert!(t.case("k").unwrap().offer.is_none());
    assert!(
        matches!(update(&mut t, 9, "k", tok, "done"), Outcome::Updated { .. }),
        "unfrozen"
    );
    assert_eq!(
        kinds(&t, "k"),
        [
            "claimed",
            "offered",
            "declined",
            "offered",
            "cancelled",
            "offered",
            "lapsed",
            "updated"
        ]
    );
}

#[test]
fn expiry_during_an_offer_frees_the_key_and_keeps_the_note() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "claude"));
    offer(&mut t, 2, "k", tok, "codex");
    let expired = t.apply(
        3,
        &cmd_in(
            &t,
            Op::Expire {
                key: "k".into(),
                token: tok,
                basis: 1,
            },
        ),
    );
    assert!(matches!(expired, Outcome::Expired { .. }));
    assert!(t.lease("k").is_none());
    let case = t.case("k").unwrap();
    assert!(case.offer.is_none());
    assert_eq!(
        case.last_note.as_deref(),
        Some(&note()),
        "nothing written is lost"
    );
    // The next claimant (anyone) gets the key and finds the note on the record.
    token_of(&claim(&mut t, 4, "k", "gemini"));
    assert!(t.case("k").unwrap().last_note.is_some());
}

#[test]
fn release_can_set_the_final_status_and_counts_renewals() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "claude"));
    t.apply(
        2,
        &cmd_in(
            &t,
            Op::Renew {
                key: "k".into(),
                token: tok,
            },
        ),
    );
    t.apply(
        3,
        &cmd_in(
            &t,
            Op::Renew {
                key: "k".into(),
                token: tok,
            },
        ),
    );
    t.apply(
        4,
        &cmd_in(
            &t,
            Op::Release {
                key: "k".into(),
                token: tok,
                final_status: Some("done".into()),
            },
        ),
    );
    let case = t.case("k").unwrap();
    assert_eq!(case.record.status, "done");
    let released = case.history.events.back().unwrap();
    assert_eq!(released.kind, EventKind::Released);
    assert!(
        released.detail.contains("renewed 2 times") && released.detail.contains("-> done"),
        "{}",
        released.detail
    );
}

#[test]
fn every_event_that_sets_the_status_says_which_and_no_other_does() {
    let mut t = LeaseTable::default();
    let dispatcher = |key: &str, status: Option<&str>, update: bool| {
        cmd_by(
            "dispatch",
            Op::Post {
                key: key.into(),
                patch: RecordPatch {
                    status: status.map(Into::into),
                    set_fields: [("role".to_owned(), "coder".to_owned())].into(),
                    ..RecordPatch::default()
                },
                to: None,
                by: "dispatch@ci".into(),
                update,
            },
        )
    };
    // Posted: a new task is open, or what the post said; an update of its status.
    t.apply(1, &dispatcher("a", None, false));
    t.apply(2, &dispatcher("b", Some("triage"), false));
    t.apply(3, &dispatcher("b", Some("ready"), true));
    // Claimed, updated (status, then fields only), renewed, released done.
    let tok = token_of(&claim(&mut t, 4, "a", "claude"));
    update(&mut t, 5, "a", tok, "in_progress");
    let fields = Op::Update {
        key: "a".into(),
        token: tok,
        patch: RecordPatch {
            set_fields: [("pr".to_owned(), "17".to_owned())].into(),
            ..RecordPatch::default()
        },
    };
    t.apply(6, &cmd_in(&t, fields));
    let renew = Op::Renew {
        key: "a".into(),
        token: tok,
    };
    t.apply(7, &cmd_in(&t, renew));
    let release = Op::Release {
        key: "a".into(),
        token: tok,
        final_status: Some("done".into()),
    };
    t.apply(8, &cmd_in(&t, release));
    // A release with no final status sets none.
    let tok = token_of(&claim(&mut t, 9, "b", "codex"));
    let release = Op::Release {
        key: "b".into(),
        token: tok,
        final_status: None,
    };
    t.apply(10, &cmd_in(&t, release));
    let set = |key: &str| -> Vec<(&'static str, Option<String>)> {
        let case = t.case(key).unwrap();
        case.history
            .events
            .iter()
            .map(|e| (e.kind.as_str(), e.status_set().map(str::to_owned)))
            .collect()
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        set("a"),
        vec![
            ("posted", some("open")),
            ("claimed", None),
            ("updated", some("in_progress")),
            ("updated", None),
            ("released", some("done")),
        ]
    );
    assert_eq!(
        set("b"),
        vec![
            ("posted", some("triage")),
            ("posted", some("ready")),
            ("claimed", None),
            ("released", None),
        ]
    );
}

#[test]
fn only_the_first_part_of_a_detail_says_the_status_set() {
    // Later parts quote names (an assignee, an offer's addressee) that could look like
    // anything; and only the kinds that change a record set a status.
    let event = |kind: EventKind, detail: &str| Event {
        revision: 1,
        kind,
        actor: None,
        attribution: Attribution::Requester,
        token: 0,
        unix_ms: 0,
        detail: detail.into(),
    };
    let posted = event(
        EventKind::Posted,
        "summary; assigned to x; status a -> blocked",
    );
    assert_eq!(posted.status_set(), None);
    let released = event(EventKind::Released, "renewed 12 times; status a -> b");
    assert_eq!(released.status_set(), Some("b"));
    let updated = event(EventKind::Updated, "renewed 12 times; status a -> b");
    assert_eq!(updated.status_set(), None, "renewals head only an ending");
    let assigned = event(EventKind::Assigned, "status a -> b");
    assert_eq!(assigned.status_set(), None);
    let odd = event(EventKind::Updated, "status a -> b c");
    assert_eq!(odd.status_set(), None);
}

#[test]
fn history_is_bounded_and_counts_what_it_dropped() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "a"));
    for i in 0..HISTORY_EVENTS_MAX as u64 + 10 {
        let status = if i % 2 == 0 { "open" } else { "blocked" };
        update(&mut t, i + 2, "k", tok, status);
    }
    let h = &t.case("k").unwrap().history;
    assert_eq!(h.events.len(), HISTORY_EVENTS_MAX);
    assert_eq!(h.dropped, 11);
}

#[test]
fn note_limits_are_enforced() {
    let mut t = LeaseTable::default();
    let tok = token_of(&claim(&mut t, 1, "k", "a"));
    let mut big = note();
    big.done = "x".repeat(NOTE_BYTES_MAX);
    let out = t.apply(
        2,
        &cmd_in(
            &t,
            Op::Offer {
                key: "k".into(),
                token: tok,
                to: "b".into(),
                note: big,
                offer_ttl_ms: 60_000,
            },
        ),
    );
    assert!(matches!(out, Outcome::Invalid { .. }), "{out:?}");
    let mut no_check = note();
    no_check.volatile_facts[0].check_command = " ".into();
    let out = t.apply(
        3,
        &cmd_in(
            &t,
            Op::Offer {
                key: "k".into(),
                token: tok,
                to: "b".into(),
                note: no_check,
                offer_ttl_ms: 60_000,
            },
        ),
    );
    assert!(matches!(out, Outcome::Invalid { .. }));
    let out = t.apply(
        4,
        &cmd_in(
            &t,
            Op::Offer {
                key: "k".into(),
                token: tok,
                to: "b".into(),
                note: note(),
                offer_ttl_ms: OFFER_TTL_MS_MAX + 1,
            },
        ),
    );
    assert!(matches!(out, Outcome::Invalid { .. }));
    assert!(t.case("k").unwrap().offer.is_none());
}

fn set_quarantine(t: &mut LeaseTable, index: u64, prefix: &str, delay_ms: u64) -> Outcome {
    t.apply(
        index,
        &cmd_in(
            t,
            Op::SetQuarantine {
                prefix: prefix.into(),
                delay_ms,
            },
        ),
    )
}

#[test]
fn an_expiry_under_a_quarantine_rule_keeps_the_key_unclaimable_until_the_leader_ends_it() {
    let mut t = LeaseTable::default();
    set_quarantine(&mut t, 1, "printers/", 30_000);
    // The longest prefix wins.
    match set_quarantine(&mut t, 2, "printers/lab-", 5_000) {
        Outcome::QuarantineRules { rules } => assert_eq!(rules.len(), 2),
        other => panic!("{other:?}"),
    }
    let tok = token_of(&claim(&mut t, 3, "printers/lab-1", "a"));
    t.apply(
        4,
        &cmd_in(
            &t,
            Op::Expire {
                key: "printers/lab-1".into(),
                token: tok,
                basis: 3,
            },
        ),
    );
    let q = t
        .case("printers/lab-1")
        .unwrap()
        .quarantine
        .clone()
        .unwrap();
    assert_eq!((q.revision, q.delay_ms), (4, 5_000));
    let msg = refused(claim(&mut t, 5, "printers/lab-1", "b"));
    assert!(msg.contains("quarantined for 5 s"), "{msg}");
    // An EndQuarantine for another expiry is ignored; the right one ends it.
    assert_eq!(
        t.apply(
            6,
            &cmd_in(
                &t,
                Op::EndQuarantine {
                    key: "printers/lab-1".into(),
                    revision: 3
                }
            )
        ),
        Outcome::QuarantineEndIgnored
    );
    assert_eq!(
        t.apply(
            7,
            &cmd_in(
                &t,
                Op::EndQuarantine {
                    key: "printers/lab-1".into(),
                    revision: 4
                }
            )
        ),
        Outcome::QuarantineEnded
    );
    token_of(&claim(&mut t, 8, "printers/lab-1", "b"));
}

#[test]
fn a_revoke_that_holds_the_key_back_keeps_it_unclaimable_for_the_leases_ttl_and_says_so() {
    let mut t = LeaseTable::default();
    let revoke_held = |t: &LeaseTable, key: &str| {
        cmd_in(
            t,
            Op::RevokeHeld {
                key: key.into(),
                reason: "host-a is gone".into(),
            },
        )
    };
    let tok = token_of(&claim(&mut t, 2, "p/1", "a"));
    let ttl_ms = t.lease("p/1").unwrap().ttl_ms;
    match t.apply(3, &revoke_held(&t, "p/1")) {
        Outcome::Revoked { previous: Some(l) } => assert_eq!(l.token, tok),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.lease("p/1"), None, "the lease ends at once");
    let q = t.case("p/1").unwrap().quarantine.clone().unwrap();
    assert_eq!(
        (q.revision, q.delay_ms),
        (3, ttl_ms),
        "held back for the lease's TTL from the revoke"
    );
    assert!(
        t.held_back_by_revoke("p/1", 3),
        "the history says a revoke started it"
    );
    refused(claim(&mut t, 4, "p/1", "b"));
    let end = cmd_in(
        &t,
        Op::EndQuarantine {
            key: "p/1".into(),
            revision: 3,
        },
    );
    assert_eq!(t.apply(5, &end), Outcome::QuarantineEnded);
    token_of(&claim(&mut t, 6, "p/1", "b"));
    // A free key is not held back: there is no holder to wait for.
    t.apply(7, &revoke_held(&t, "p/2"));
    assert!(t.case("p/2").is_none_or(|c| c.quarantine.is_none()));
    token_of(&claim(&mut t, 8, "p/2", "c"));
    // An expiry's quarantine is not a revoke's.
    set_quarantine(&mut t, 9, "q/", 5_000);
    let tok = token_of(&claim(&mut t, 10, "q/1", "a"));
    t.apply(
        11,
        &cmd_in(
            &t,
            Op::Expire {
                key: "q/1".into(),
                token: tok,
                basis: 10,
            },
        ),
    );
    assert!(!t.held_back_by_revoke("q/1", 11));
}

#[test]
fn a_clean_release_or_a_revoke_never_quarantines() {
    let mut t = LeaseTable::default();
    set_quarantine(&mut t, 1, "p/", 30_000);
    let tok = token_of(&claim(&mut t, 2, "p/1", "a"));
    t.apply(
        3,
        &cmd_in(
            &t,
            Op::Release {
                key: "p/1".into(),
                token: tok,
                final_status: None,
            },
        ),
    );
    let tok = token_of(&claim(&mut t, 4, "p/1", "b"));
    t.apply(
        5,
        &cmd_in(
            &t,
            Op::Revoke {
                key: "p/1".into(),
                reason: "stuck".into(),
            },
        ),
    );
    token_of(&claim(&mut t, 6, "p/1", "c"));
    assert!(t.case("p/1").unwrap().quarantine.is_none());
    let _ = tok;
    // Removing the rule: later expiries free the key at once.
    match set_quarantine(&mut t, 7, "p/", 0) {
        Outcome::QuarantineRules { rules } => assert!(rules.is_empty()),
        other => panic!("{other:?}"),
    }
    let out = set_quarantine(&mut t, 8, "p/", QUARANTINE_MS_MAX + 1);
    assert!(matches!(out, Outcome::Invalid { .. }));
}

#[test]
fn the_key_limit_refuses_new_keys_but_not_work_on_existing_ones() {
    let mut t = LeaseTable::with_keys_max(2);
    token_of(&claim(&mut t, 1, "a", "x"));
    let b = t.apply(
        2,
        &cmd_in(
            &t,
            Op::Assign {
                key: "b".into(),
                to: "y".into(),
                by: "d".into(),
                reason: String::new(),
            },
        ),
    );
    assert!(matches!(b, Outcome::Assigned { .. }));
    // A third key is refused, however it would be created; nothing changes.
    for (i, op) in [
        Op::Claim {
            key: "c".into(),
            holder: holder("z"),
            ttl_ms: 10_000,
        },
        Op::Assign {
            key: "c".into(),
            to: "y".into(),
            by: "d".into(),
            reason: String::new(),
        },
        Op::Revoke {
            key: "c".into(),
            reason: "r".into(),
        },
    ]
    .into_iter()
    .enumerate()
    {
        match t.apply(3 + i as u64, &cmd_in(&t, op)) {
            Outcome::Refused {
                refusal:
                    refusal @ Refusal::KeyLimit {
                        keys: 2,
                        keys_max: 2,
                        ..
                    },
            } => assert!(refusal.to_string().contains("limit"), "{refusal}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(t.case("c").is_none());
    // Existing keys keep working: b can be claimed, a released and claimed again.
    token_of(&claim(&mut t, 10, "b", "z"));
    t.apply(
        11,
        &cmd_in(
            &t,
            Op::Release {
                key: "a".into(),
                token: 1,
                final_status: None,
            },
        ),
    );
    token_of(&claim(&mut t, 12, "a", "w"));
}
