//! Unit tests of the task board: posting tasks and `claim-next`.

use super::limits::*;
use super::table::Walk;
use super::*;

fn holder(name: &str) -> Holder {
    Holder {
        name: name.into(),
        client_id: format!("cid-{name}").into(),
    }
}

fn from(session: &str, op: Op) -> LogCommand {
    LogCommand {
        request_id: None,
        leader_unix_ms: 1_000,
        sender: Some(Sender {
            client_id: session.into(),
            principal: Some("ops".into()),
        }),
        op,
    }
}

fn post_op(key: &str, summary: &str, fields: &[(&str, &str)], to: Option<&str>) -> Op {
    Op::Post {
        key: key.into(),
        patch: RecordPatch {
            summary: (!summary.is_empty()).then(|| summary.into()),
            set_fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..RecordPatch::default()
        },
        to: to.map(Into::into),
        by: "dispatch@ci".into(),
        update: false,
    }
}

fn post(t: &mut LeaseTable, index: u64, key: &str, to: Option<&str>) -> Outcome {
    t.apply(index, &from("cid-dispatch", post_op(key, "", &[], to)))
}

fn next_op(prefix: &str, who: &str, any: bool, wheres: &[(&str, &str)]) -> Op {
    Op::ClaimNext {
        prefix: prefix.into(),
        holder: holder(who),
        ttl_ms: 10_000,
        any,
        wheres: wheres
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn next(t: &mut LeaseTable, index: u64, prefix: &str, who: &str) -> Outcome {
    let op = next_op(prefix, who, false, &[]);
    t.apply(index, &from(&format!("cid-{who}"), op))
}

fn granted_key(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Granted {
            lease,
            already_held: false,
            ..
        } => lease.key.to_string(),
        other => panic!("no grant: {other:?}"),
    }
}

fn nothing(outcome: Outcome) -> Unclaimable {
    match outcome {
        Outcome::NothingClaimable { counts, .. } => counts,
        other => panic!("expected nothing claimable: {other:?}"),
    }
}

#[test]
fn a_post_creates_an_open_task_with_its_record_and_assignment_and_credits_its_sender() {
    let mut t = LeaseTable::default();
    let op = post_op(
        "tasks/1",
        "fix the cache",
        &[("role", "coder")],
        Some("ann@h1"),
    );
    let Outcome::Posted { record, created } = t.apply(1, &from("cid-dispatch", op)) else {
        panic!("not posted");
    };
    assert!(created);
    assert_eq!(record.status, "open");
    assert_eq!(record.summary, "fix the cache");
    assert_eq!(record.fields["role"], "coder");
    assert_eq!(record.assigned_to.as_ref().unwrap().to, "ann@h1");
    assert!(t.lease("tasks/1").is_none(), "a post claims nothing");
    let event = &t.case("tasks/1").unwrap().history.events[0];
    assert_eq!(event.kind, EventKind::Posted);
    let actor = event.actor.as_ref().unwrap();
    assert_eq!(
        (&*actor.name, &*actor.client_id, actor.principal.as_deref()),
        ("dispatch@ci", "cid-dispatch", Some("ops"))
    );
}

#[test]
fn posting_a_key_that_has_a_case_file_is_refused_unless_update_and_names_its_holder() {
    let mut t = LeaseTable::default();
    post(&mut t, 1, "tasks/1", None);
    let granted = next(&mut t, 2, "tasks/", "ann@h1");
    assert_eq!(granted_key(&granted), "tasks/1");
    let again = post(&mut t, 3, "tasks/1", None);
    let Outcome::Refused {
        refusal: Refusal::Exists { key, status, lease },
    } = again
    else {
        panic!("not refused: {again:?}");
    };
    assert_eq!((key.as_str(), status.as_str()), ("tasks/1", "open"));
    assert_eq!(&*lease.unwrap().holder.name, "ann@h1");
    let mut op = post_op("tasks/1", "narrowed", &[], None);
    if let Op::Post { update, .. } = &mut op {
        *update = true;
    }
    let Outcome::Posted { record, created } = t.apply(4, &from("cid-dispatch", op)) else {
        panic!("not updated");
    };
    assert!(!created);
    assert_eq!(record.summary, "narrowed");
    assert_eq!(
        t.lease("tasks/1").unwrap().token,
        2,
        "the holder keeps its lease"
    );
}

#[test]
fn claim_next_grants_keys_in_order_then_says_why_nothing_is_left() {
    let mut t = LeaseTable::default();
    for (i, key) in ["tasks/c", "tasks/a", "tasks/b", "other/z"]
        .iter()
        .enumerate()
    {
        post(&mut t, i as u64 + 1, key, None);
    }
    assert_eq!(
        granted_key(&next(&mut t, 10, "tasks/", "ann@h1")),
        "tasks/a"
    );
    assert_eq!(
        granted_key(&next(&mut t, 11, "tasks/", "bob@h2")),
        "tasks/b"
    );
    assert_eq!(
        granted_key(&next(&mut t, 12, "tasks/", "ann@h1")),
        "tasks/c"
    );
    let counts = nothing(next(&mut t, 13, "tasks/", "cy@h3"));
    assert_eq!(
        (counts.scanned, counts.held, counts.truncated),
        (3, 3, false)
    );
    // A key claimed by plain `claim` without a post has a case file too: it is a task.
    assert_eq!(
        t.lease("tasks/a").unwrap().token,
        10,
        "token is the entry's revision"
    );
}

#[test]
fn claim_next_prefers_the_claimants_own_assignments_and_passes_others_by() {
    let mut t = LeaseTable::default();
    post(&mut t, 1, "tasks/a", Some("bob@h2"));
    post(&mut t, 2, "tasks/b", None);
    post(&mut t, 3, "tasks/c", Some("ann@h1"));
    assert_eq!(granted_key(&next(&mut t, 4, "tasks/", "ann@h1")), "tasks/c");
    assert_eq!(granted_key(&next(&mut t, 5, "tasks/", "cy@h3")), "tasks/b");
    let counts = nothing(next(&mut t, 6, "tasks/", "cy@h3"));
    assert_eq!((counts.held, counts.assigned_elsewhere), (2, 1));
    // `any` takes another's assignment.
    let any = next_op("tasks/", "cy@h3", true, &[]);
    assert_eq!(granted_key(&t.apply(7, &from("cid-cy@h3", any))), "tasks/a");
}

#[test]
fn claim_next_matches_where_fields_and_skips_finished_and_quarantined_tasks() {
    let mut t = LeaseTable::default();
    let reviewer = post_op("tasks/a", "", &[("role", "reviewer")], None);
    t.apply(1, &from("cid-dispatch", reviewer));
    let coder = post_op("tasks/b", "", &[("role", "coder")], None);
    t.apply(2, &from("cid-dispatch", coder));
    post(&mut t, 3, "tasks/c", None);
    // tasks/c: claimed, released as done.
    let lease = granted_key(&next(&mut t, 4, "tasks/c", "ann@h1"));
    assert_eq!(lease, "tasks/c");
    let release = Op::Release {
        key: "tasks/c".into(),
        token: 4,
        final_status: Some("done".into()),
    };
    t.apply(5, &from("cid-ann@h1", release));
    let wants_coder = next_op("tasks/", "bob@h2", false, &[("role", "coder")]);
    assert_eq!(
        granted_key(&t.apply(6, &from("cid-bob@h2", wants_coder.clone()))),
        "tasks/b"
    );
    let counts = nothing(t.apply(
        7,
        &from("cid-cy@h3", {
            let mut op = wants_coder;
            if let Op::ClaimNext { holder: h, .. } = &mut op {
                *h = holder("cy@h3");
            }
            op
        }),
    ));
    assert_eq!(
        (counts.held, counts.finished, counts.unmatched),
        (1, 1, 1),
        "{counts:?}"
    );
    // A quarantined key is passed by.
    t.apply(
        8,
        &from(
            "cid-ops",
            Op::SetQuarantine {
                prefix: "tasks/".into(),
                delay_ms: 5_000,
            },
        ),
    );
    let expire = Op::Expire {
        key: "tasks/b".into(),
        token: 6,
        basis: 6,
    };
    t.apply(
        9,
        &LogCommand {
            request_id: None,
            leader_unix_ms: 2_000,
            sender: None,
            op: expire,
        },
    );
    let counts = nothing(next(&mut t, 10, "tasks/b", "cy@h3"));
    assert_eq!(counts.quarantined, 1, "{counts:?}");
}

#[test]
fn claim_next_looks_at_most_at_its_scan_limit_and_says_so() {
    let mut t = LeaseTable::default();
    let mut index = 0;
    for i in 0..=CLAIM_NEXT_SCAN_MAX {
        index += 1;
        post(&mut t, index, &format!("tasks/{i:06}"), Some("bob@h2"));
    }
    index += 1;
    let counts = nothing(next(&mut t, index, "tasks/", "ann@h1"));
    assert_eq!(counts.scanned, CLAIM_NEXT_SCAN_MAX as u64);
    assert_eq!(counts.assigned_elsewhere, CLAIM_NEXT_SCAN_MAX as u64);
    assert!(counts.truncated);
    index += 1;
    let counts = nothing(next_unfinished(&mut t, index, "tasks/", "ann@h1"));
    assert_eq!(
        (counts.scanned, counts.assigned_elsewhere, counts.truncated),
        (CLAIM_NEXT_SCAN_MAX as u64, CLAIM_NEXT_SCAN_MAX as u64, true),
        "format 14's walk has the same limit"
    );
    // The one key past the limit assigned to ann is not seen; below it, it would be.
    index += 1;
    let last = format!("tasks/{CLAIM_NEXT_SCAN_MAX:06}");
    let mut op = post_op(&last, "", &[], Some("ann@h1"));
    if let Op::Post { update, .. } = &mut op {
        *update = true;
    }
    t.apply(index, &from("cid-dispatch", op));
    index += 1;
    assert!(matches!(
        next(&mut t, index, "tasks/", "ann@h1"),
        Outcome::NothingClaimable { .. }
    ));
    // Format 14's walk finds ann's own assignments from the index of assignees, wherever
    // they are under the prefix.
    index += 1;
    assert_eq!(
        granted_key(&next_unfinished(&mut t, index, "tasks/", "ann@h1")),
        last
    );
}

/// Data format 14's `claim-next`, `Op::ClaimNextUnfinished`, of `prefix` by `who`.
fn next_unfinished(t: &mut LeaseTable, index: u64, prefix: &str, who: &str) -> Outcome {
    let op = next_op(prefix, who, false, &[]).with_walk(Walk::Unfinished);
    t.apply(index, &from(&format!("cid-{who}"), op))
}

/// A post of `key` with status `status`, or an update of its record to it.
fn post_status(t: &mut LeaseTable, index: u64, key: &str, status: &str, update: bool) {
    let mut op = post_op(key, "", &[], None);
    if let Op::Post {
        patch, update: u, ..
    } = &mut op
    {
        patch.status = Some(status.into());
        *u = update;
    }
    let outcome = t.apply(index, &from("cid-dispatch", op));
    assert!(matches!(outcome, Outcome::Posted { .. }), "{outcome:?}");
}

#[test]
fn from_format_14_claim_next_passes_finished_tasks_by_unseen_however_many_there_are() {
    let mut t = LeaseTable::default();
    let mut index = 0;
    for i in 0..CLAIM_NEXT_SCAN_MAX {
        index += 1;
        post_status(&mut t, index, &format!("tasks/{i:06}"), "done", false);
    }
    index += 1;
    let open = format!("tasks/{CLAIM_NEXT_SCAN_MAX:06}");
    post(&mut t, index, &open, None);
    // Format 9's walk spends its whole scan on the finished tasks and never sees the open one.
    index += 1;
    let counts = nothing(next(&mut t, index, "tasks/", "ann@h1"));
    assert_eq!(
        (counts.scanned, counts.finished, counts.truncated),
        (CLAIM_NEXT_SCAN_MAX as u64, CLAIM_NEXT_SCAN_MAX as u64, true)
    );
    // Format 14's walks past them unseen.
    index += 1;
    assert_eq!(
        granted_key(&next_unfinished(&mut t, index, "tasks/", "ann@h1")),
        open
    );
    index += 1;
    let counts = nothing(next_unfinished(&mut t, index, "tasks/", "bob@h2"));
    assert_eq!(
        counts,
        Unclaimable {
            scanned: 1,
            held: 1,
            ..Unclaimable::default()
        },
        "the finished ones are neither looked at nor counted"
    );
    assert_eq!(t.open_tasks("tasks/", "", 10), (vec![], false));
}

#[test]
fn a_task_leaves_format_14s_walk_when_it_is_finished_and_comes_back_when_reopened() {
    let mut t = LeaseTable::default();
    post(&mut t, 1, "tasks/a", None);
    post(&mut t, 2, "tasks/b", None);
    let token = match next_unfinished(&mut t, 3, "tasks/", "ann@h1") {
        Outcome::Granted { lease, .. } => lease.token,
        other => panic!("no grant: {other:?}"),
    };
    let release = Op::Release {
        key: "tasks/a".into(),
        token,
        final_status: Some("done".into()),
    };
    assert!(matches!(
        t.apply(4, &from("cid-ann@h1", release)),
        Outcome::Released { .. }
    ));
    assert_eq!(
        t.open_tasks("tasks/", "", 10),
        (vec!["tasks/b"], false),
        "a finished task is not open"
    );
    assert_eq!(
        granted_key(&next_unfinished(&mut t, 5, "tasks/", "bob@h2")),
        "tasks/b"
    );
    let counts = nothing(next_unfinished(&mut t, 6, "tasks/", "cy@h3"));
    assert_eq!((counts.scanned, counts.held, counts.finished), (1, 1, 0));
    // The dispatcher reopens tasks/a: it is claimable again.
    post_status(&mut t, 7, "tasks/a", "open", true);
    assert_eq!(t.open_tasks("tasks/", "", 10), (vec!["tasks/a"], false));
    assert_eq!(
        granted_key(&next_unfinished(&mut t, 8, "tasks/", "cy@h3")),
        "tasks/a"
    );
    // A key claimed with no post has a case file with no status yet: unfinished, a task.
    let claim = Op::Claim {
        key: "tasks/c".into(),
        holder: holder("dee@h4"),
        ttl_ms: 10_000,
    };
    t.apply(9, &from("cid-dee@h4", claim));
    let counts = nothing(next_unfinished(&mut t, 10, "tasks/", "eve@h5"));
    assert_eq!((counts.scanned, counts.held), (3, 3), "{counts:?}");
}

#[test]
fn a_claim_next_retried_after_the_upgrade_to_format_14_gets_its_first_answer() {
    let mut t = LeaseTable::default();
    post(&mut t, 1, "tasks/a", None);
    let first = LogCommand {
        request_id: Some(RequestId {
            client_id: "cid-ann@h1".into(),
            seq: 7,
        }),
        ..from("cid-ann@h1", next_op("tasks/", "ann@h1", false, &[]))
    };
    let granted = t.apply(2, &first);
    assert_eq!(granted_key(&granted), "tasks/a");
    // The same request, proposed again by a leader that now uses format 14's walk.
    let retry = LogCommand {
        op: first.op.clone().with_walk(Walk::Unfinished),
        ..first
    };
    assert_eq!(
        t.apply(3, &retry),
        granted,
        "the first answer, not a refusal"
    );
    assert_eq!(t.lease("tasks/a").unwrap().token, 2, "granted once");
}

#[test]
fn bad_posts_and_claim_nexts_are_refused_as_invalid_and_change_nothing() {
    let mut t = LeaseTable::default();
    let too_many: Vec<(String, String)> = (0..=CLAIM_NEXT_WHERE_MAX)
        .map(|i| (format!("f{i}"), "v".to_owned()))
        .collect();
    let op = Op::ClaimNext {
        prefix: "tasks/".into(),
        holder: holder("ann@h1"),
        ttl_ms: 10_000,
        any: false,
        wheres: too_many,
    };
    let outcome = t.apply(1, &from("cid-ann@h1", op));
    assert!(
        matches!(&outcome, Outcome::Invalid { message } if message.contains("where-conditions")),
        "{outcome:?}"
    );
    // Another session's claim-next for ann is refused: a process claims for itself.
    let outcome = t.apply(
        2,
        &from("cid-bob@h2", next_op("tasks/", "ann@h1", false, &[])),
    );
    assert!(matches!(outcome, Outcome::Invalid { .. }), "{outcome:?}");
    let mut op = post_op("tasks/1", "", &[], None);
    if let Op::Post { by, .. } = &mut op {
        *by = String::new();
    }
    assert!(matches!(
        t.apply(3, &from("cid-dispatch", op)),
        Outcome::Invalid { .. }
    ));
    assert!(t.case("tasks/1").is_none());
}

#[test]
fn the_board_lists_as_open_what_claim_next_could_grant_to_anyone() {
    let mut t = LeaseTable::default();
    post(&mut t, 1, "tasks/a", None);
    post(&mut t, 2, "tasks/b", Some("bob@h2"));
    post(&mut t, 3, "tasks/c", None);
    post(&mut t, 4, "tasks/d", None);
    post(&mut t, 5, "other/e", None);
    assert_eq!(
        granted_key(&next(&mut t, 6, "tasks/c", "ann@h1")),
        "tasks/c"
    );
    let done = Op::Post {
        key: "tasks/d".into(),
        patch: RecordPatch {
            status: Some("done".into()),
            ..RecordPatch::default()
        },
        to: None,
        by: "dispatch@ci".into(),
        update: true,
    };
    t.apply(7, &from("cid-dispatch", done));
    // a: open; b: assigned (unclaimed); c: held; d: finished; e: another prefix.
    assert_eq!(t.open_tasks("tasks/", "", 10), (vec!["tasks/a"], false));
    assert_eq!(t.open_tasks("", "", 1), (vec!["other/e"], true));
    assert_eq!(t.open_tasks("", "other/e", 10), (vec!["tasks/a"], false));
}
