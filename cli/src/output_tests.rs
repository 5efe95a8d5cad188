use super::*;
use crate::records::tests::assignment;
use crate::{bench, handoff, records, sets, watch};
use baton_client::{BlockedKey, Board, SetOutcome};
use serde_json::json;

fn lease() -> LeaseInfo {
    LeaseInfo {
        key: "tasks/evidence-42".into(),
        holder_name: "claude@host-a".into(),
        holder_client_id: "c0ffee".into(),
        token: 1234,
        ttl: Duration::from_secs(30),
        held_since_unix_ms: 1_700_000_000_000,
        renewed_at_unix_ms: 1_700_000_010_000,
        remaining: Duration::from_millis(12_345),
        basis: 1240,
    }
}

fn lease_json() -> serde_json::Value {
    json!({
        "key": "tasks/evidence-42",
        "holder_name": "claude@host-a",
        "holder_client_id": "c0ffee",
        "token": 1234,
        "ttl_ms": 30000,
        "held_since_unix_ms": 1_700_000_000_000u64,
        "renewed_at_unix_ms": 1_700_000_010_000u64,
        "remaining_ms": 12345,
        "basis": 1240
    })
}

fn grant(now: Instant) -> Grant {
    Grant {
        permits: None,
        lease: lease(),
        already_held: false,
        revision: 1234,
        safe_deadline: now + Duration::from_millis(28_500),
        assignment: None,
    }
}

fn json_of(rendered: &Rendered) -> serde_json::Value {
    assert!(rendered.stdout.ends_with('\n'));
    assert_eq!(
        rendered.stdout.lines().count(),
        1,
        "one JSON object per line"
    );
    serde_json::from_str(&rendered.stdout).unwrap()
}

#[test]
fn claim_granted_json_shape() {
    let now = Instant::now();
    let out = claim(&ClaimOutcome::Granted(grant(now)), OutputFormat::Json, now);
    assert_eq!(out.verdict, Verdict::Ok);
    assert_eq!(
        json_of(&out),
        json!({
            "outcome": "granted",
            "lease": lease_json(),
            "already_held": false,
            "revision": 1234,
            "safe_deadline_in_ms": 28500,
            "assignment": null
        })
    );
}

#[test]
fn claim_held_json_shape_and_stand_down() {
    let held = ClaimOutcome::Held {
        permits: None,
        lease: lease(),
        same_name_other_process: true,
        assignment: Some(assignment()),
    };
    let out = claim(&held, OutputFormat::Json, Instant::now());
    assert_eq!(out.verdict, Verdict::StandDown);
    assert_eq!(
        json_of(&out),
        json!({
            "outcome": "held",
            "lease": lease_json(),
            "same_name_other_process": true,
            "assignment": {
                "to": "alice",
                "by": "dispatcher",
                "reason": "verify four evidence domains",
                "assigned_at_unix_ms": 1_700_000_000_000u64,
                "revision": 3
            }
        })
    );
}

#[test]
fn claim_texts_show_the_assignment_and_that_it_reserves_nothing() {
    let now = Instant::now();
    let mut granted = grant(now);
    granted.assignment = Some(assignment());
    let text = claim(&ClaimOutcome::Granted(granted), OutputFormat::Table, now).stdout;
    assert!(
        text.ends_with(
            "assigned to alice by dispatcher: verify four evidence domains (an assignment \
             reserves nothing: the key is yours; tell the dispatcher)\n"
        ),
        "{text}"
    );
    let held = ClaimOutcome::Held {
        permits: None,
        lease: lease(),
        same_name_other_process: false,
        assignment: Some(assignment()),
    };
    let text = claim(&held, OutputFormat::Table, now).stdout;
    assert!(
        text.contains(
            "assigned to alice by dispatcher: verify four evidence domains (an assignment \
             reserves nothing: claude@host-a holds the key)\n"
        ),
        "{text}"
    );
    // The assignee holding the key needs no aside.
    let mine = AssignmentInfo {
        to: "claude@host-a".into(),
        ..assignment()
    };
    assert_eq!(
        assignment_line(&mine, Some("claude@host-a"), true),
        "assigned to claude@host-a by dispatcher: verify four evidence domains\n"
    );
}

#[test]
fn claim_held_text_names_holder_since_and_says_stand_down() {
    let held = ClaimOutcome::Held {
        permits: None,
        lease: lease(),
        same_name_other_process: true,
        assignment: None,
    };
    let text = claim(&held, OutputFormat::Table, Instant::now()).stdout;
    assert!(text.contains("claude@host-a"), "{text}");
    assert!(text.contains("1234"), "{text}");
    assert!(text.contains("2023-11-14T22:13:20Z"), "{text}");
    assert!(text.contains("free    in 12s\n"), "{text}");
    assert!(text.contains("stand down"), "{text}");
    assert!(text.contains("another process"), "{text}");
}

#[test]
fn claim_granted_text_shows_token_ttl_and_safe_deadline() {
    let now = Instant::now();
    let text = claim(&ClaimOutcome::Granted(grant(now)), OutputFormat::Table, now).stdout;
    assert!(text.starts_with("granted tasks/evidence-42 to claude@host-a\n"));
    assert!(text.contains("token          1234\n"), "{text}");
    assert!(text.contains("ttl            30s\n"), "{text}");
    assert!(text.contains("safe deadline  in 28s\n"), "{text}");
}

#[test]
fn renew_json_shapes() {
    let now = Instant::now();
    let out = renew(
        "tasks/evidence-42",
        1234,
        &RenewOutcome::Renewed(grant(now)),
        OutputFormat::Json,
        now,
    );
    assert_eq!(out.verdict, Verdict::Ok);
    assert_eq!(
        json_of(&out),
        json!({
            "outcome": "renewed",
            "lease": lease_json(),
            "revision": 1234,
            "safe_deadline_in_ms": 28500
        })
    );
    let out = renew(
        "tasks/evidence-42",
        1000,
        &RenewOutcome::Lost { current: None },
        OutputFormat::Json,
        now,
    );
    assert_eq!(out.verdict, Verdict::StandDown);
    assert_eq!(json_of(&out), json!({"outcome": "lost", "current": null}));
}

#[test]
fn release_json_shapes() {
    let out = release(
        "tasks/evidence-42",
        1234,
        &ReleaseOutcome::Released(lease()),
        OutputFormat::Json,
    );
    assert_eq!(out.verdict, Verdict::Ok);
    assert_eq!(
        json_of(&out),
        json!({"outcome": "released", "lease": lease_json()})
    );
    let out = release(
        "tasks/evidence-42",
        1000,
        &ReleaseOutcome::Lost {
            current: Some(lease()),
        },
        OutputFormat::Json,
    );
    assert_eq!(out.verdict, Verdict::StandDown);
    assert_eq!(
        json_of(&out),
        json!({"outcome": "lost", "current": lease_json()})
    );
}

fn view(lease: Option<LeaseInfo>, assigned_to: Option<AssignmentInfo>) -> RecordView {
    RecordView {
        permits: None,
        key: "tasks/free".into(),
        record: baton_client::Record {
            assigned_to,
            ..baton_client::Record::default()
        },
        lease,
        revision: 9,
        quarantine: None,
        line: None,
    }
}

/// A held key with two waiting in its line.
fn waited_on() -> RecordView {
    let waiter = |name: &str, joined: u64| baton_client::WaiterInfo {
        holder_name: name.into(),
        holder_client_id: format!("agent-{name}"),
        joined_revision: joined,
        joined_unix_ms: 1_795_950_006_001,
        ttl: std::time::Duration::from_secs(30),
        waited: std::time::Duration::from_millis(1_830),
    };
    RecordView {
        line: Some(baton_client::KeyLine {
            waiters: 2,
            first: vec![waiter("cy@c", 2), waiter("bob@b", 3)],
        }),
        ..view(Some(lease()), None)
    }
}

#[test]
fn probe_shows_the_line_its_length_head_and_who_is_next() {
    let text = probe(&waited_on(), OutputFormat::Table).stdout;
    assert!(
        text.contains(
            "2 waiting in line; next: cy@c (client agent-cy@c), waiting 1s\n  then: bob@b\n"
        ),
        "{text}"
    );
}

#[test]
fn probe_of_a_free_key_exits_ok_with_null_lease() {
    let out = probe(&view(None, None), OutputFormat::Json);
    assert_eq!(out.verdict, Verdict::Ok);
    assert_eq!(
        json_of(&out),
        json!({"lease": null, "revision": 9, "assignment": null, "quarantine": null})
    );
    let text = probe(&view(None, None), OutputFormat::Table);
    assert_eq!(text.stdout, "tasks/free is free\n");
}

#[test]
fn probe_shows_the_holder_and_the_assignment_side_by_side() {
    let text = probe(
        &view(Some(lease()), Some(assignment())),
        OutputFormat::Table,
    )
    .stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{text}");
    assert!(lines[1].contains("claude@host-a"), "{text}");
    assert_eq!(
        lines[2],
        "assigned to alice by dispatcher: verify four evidence domains (an assignment \
         reserves nothing: claude@host-a holds the key)"
    );
    let text = probe(&view(None, Some(assignment())), OutputFormat::Table).stdout;
    assert_eq!(
        text,
        "tasks/free is free\nassigned to alice by dispatcher: verify four evidence domains \
         (an assignment reserves nothing: alice must still claim it)\n"
    );
}

/// A truncated page: one held key with an assignment, and one assigned key no one holds.
fn waiting_board() -> Board {
    Board {
        permits: Default::default(),
        answered_by: String::new(),
        leases: vec![lease()],
        truncated: true,
        revision: 50,
        assignments: [(
            "tasks/evidence-42".to_string(),
            crate::records::tests::assignment(),
        )]
        .into(),
        quarantines: Default::default(),
        unclaimed: [(
            "tasks/waiting".to_string(),
            crate::records::tests::assignment(),
        )]
        .into(),
        unclaimed_truncated: false,
        open: Vec::new(),
        open_truncated: false,
    }
}

#[test]
fn board_table_has_the_documented_columns() {
    let out = board(
        "tasks/",
        &Board {
            quarantines: [(
                "tasks/printer".to_string(),
                baton_client::QuarantineView {
                    revision: 40,
                    delay: Duration::from_secs(30),
                    remaining: Duration::from_millis(27_500),
                    revoked: false,
                },
            )]
            .into(),
            ..waiting_board()
        },
        false,
        OutputFormat::Table,
    );
    let mut lines = out.stdout.lines();
    assert_eq!(
        lines.next().unwrap(),
        "KEY                HELD BY        ASSIGNED TO  TOKEN  EXPIRES  SINCE"
    );
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("tasks/evidence-42  claude@host-a  ") && row.contains("1234"),
        "{row}"
    );
    assert_eq!(
        lines.next().unwrap(),
        "quarantined or revoked (no holder; claims are refused until each ends):"
    );
    assert_eq!(
        lines.next().unwrap(),
        "  tasks/printer  free in 27s (its holder's lease expired at revision 40)"
    );
    assert_eq!(
        lines.next().unwrap(),
        "assigned, unclaimed (no one holds them yet):"
    );
    let waiting = lines.next().unwrap();
    assert!(
        waiting.starts_with("  tasks/waiting  to alice by dispatcher since ")
            && waiting.ends_with(": verify four evidence domains"),
        "{waiting}"
    );
    assert_eq!(
        lines.next().unwrap(),
        "more leases match: baton board tasks/ --start-after tasks/evidence-42"
    );
}

#[test]
fn board_unclaimed_shows_only_the_waiting_keys_and_pages_them() {
    let full = Board {
        unclaimed_truncated: true,
        open: Vec::new(),
        open_truncated: false,
        ..waiting_board()
    };
    let out = board("tasks/", &full, true, OutputFormat::Table);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "assigned, unclaimed (no one holds them yet):");
    assert!(
        lines[1].starts_with("  tasks/waiting  to alice"),
        "{lines:?}"
    );
    assert_eq!(
        lines[2],
        "more unclaimed keys match: baton board tasks/ --unclaimed --start-after tasks/waiting"
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    let json = json_of(&board("tasks/", &full, true, OutputFormat::Json));
    assert_eq!(json["leases"], json!([]));
    assert_eq!(json["unclaimed"]["tasks/waiting"]["to"], "alice");
    let none = Board {
        unclaimed: Default::default(),
        unclaimed_truncated: false,
        open: Vec::new(),
        open_truncated: false,
        ..full
    };
    let out = board("tasks/", &none, true, OutputFormat::Table);
    assert_eq!(
        out.stdout,
        "no key under \"tasks/\" is waiting to be claimed\n"
    );
}

#[test]
fn board_json_shape() {
    let out = board(
        "",
        &Board {
            permits: Default::default(),
            answered_by: String::new(),
            leases: vec![lease()],
            truncated: false,
            revision: 50,
            assignments: Default::default(),
            quarantines: Default::default(),
            unclaimed: Default::default(),
            unclaimed_truncated: false,
            open: Vec::new(),
            open_truncated: false,
        },
        false,
        OutputFormat::Json,
    );
    assert_eq!(
        json_of(&out),
        json!({"leases": [lease_json()], "truncated": false, "revision": 50, "assignments": {},
               "quarantines": {}, "unclaimed": {}, "unclaimed_truncated": false, "open": [],
               "open_truncated": false})
    );
}

#[test]
fn check_of_a_stale_token_stands_down() {
    let stale = TokenCheck {
        permits: 0,
        shared: false,
        current: false,
        lease: Some(lease()),
        revision: 60,
    };
    let out = check("tasks/evidence-42", 1000, &stale, OutputFormat::Json);
    assert_eq!(out.verdict, Verdict::StandDown);
    assert_eq!(
        json_of(&out),
        json!({"current": false, "lease": lease_json(), "revision": 60})
    );
    let current = TokenCheck {
        current: true,
        ..stale
    };
    let out = check("tasks/evidence-42", 1234, &current, OutputFormat::Table);
    assert_eq!(out.verdict, Verdict::Ok);
    assert!(out.stdout.contains("is current"));
}

fn revoked(lease: Option<LeaseInfo>, claimable_in_s: u64) -> baton_client::Revoked {
    baton_client::Revoked {
        revoked: lease,
        revision: 9,
        claimable_in: Duration::from_secs(claimable_in_s),
    }
}

#[test]
fn revoke_json_shape_and_text_say_when_the_key_is_claimable() {
    let out = revoke("tasks/evidence-42", &revoked(None, 0), OutputFormat::Json);
    assert_eq!(
        json_of(&out),
        json!({"revoked": null, "revision": 9, "claimable_in_ms": 0})
    );
    let out = revoke(
        "tasks/evidence-42",
        &revoked(Some(lease()), 30),
        OutputFormat::Json,
    );
    assert_eq!(
        json_of(&out),
        json!({"revoked": lease_json(), "revision": 9, "claimable_in_ms": 30_000})
    );
    let out = revoke(
        "tasks/evidence-42",
        &revoked(Some(lease()), 30),
        OutputFormat::Table,
    );
    assert!(
        out.stdout
            .contains("; claimable in 30s, once the revoked lease"),
        "{}",
        out.stdout
    );
    let out = revoke(
        "tasks/evidence-42",
        &revoked(Some(lease()), 0),
        OutputFormat::Table,
    );
    assert!(out.stdout.contains("; claimable now"), "{}", out.stdout);
}

fn status(node_id: u64, state: &str) -> ClusterStatus {
    ClusterStatus {
        endpoint: format!("127.0.0.1:700{node_id}"),
        node_id,
        cluster_name: "baton".into(),
        state: state.into(),
        leader_id: Some(1),
        leader_addr: Some("127.0.0.1:7001".into()),
        term: 3,
        last_log_index: 90,
        applied_index: 88,
        members: vec![],
        leases: 5,
    }
}

#[test]
fn cluster_status_shows_unreachable_nodes() {
    let nodes = vec![
        NodeRow {
            addr: "127.0.0.1:7001".into(),
            id: Some(1),
            reachable: true,
            status: Some(status(1, "leader")),
            error: None,
            down: None,
        },
        NodeRow {
            addr: "127.0.0.1:7002".into(),
            id: Some(2),
            reachable: false,
            status: None,
            error: Some("connection refused".into()),
            down: Some(NodeDown::Unreachable),
        },
    ];
    let out = cluster_status(&nodes, OutputFormat::Table);
    assert_eq!(out.verdict, Verdict::Ok);
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["ID", "ADDR", "STATE", "LEADER", "TERM", "APPLIED", "LEASES"],
            vec!["1", "127.0.0.1:7001", "leader", "1", "3", "88", "5"],
            vec!["2", "127.0.0.1:7002", "unreachable", "-", "-", "-", "-"],
        ]
    );
    let json = json_of(&cluster_status(&nodes, OutputFormat::Json));
    assert_eq!(json["nodes"][0]["status"]["state"], "leader");
    assert_eq!(json["nodes"][1]["reachable"], false);
    assert_eq!(json["nodes"][1]["error"], "connection refused");
}

#[test]
fn cluster_status_tells_a_node_that_refused_credentials_from_an_unreachable_one() {
    let row = |port: u16, down: NodeDown| NodeRow {
        addr: format!("127.0.0.1:{port}"),
        id: None,
        reachable: false,
        status: None,
        error: Some("no".into()),
        down: Some(down),
    };
    let nodes = vec![
        row(7001, NodeDown::Unauthenticated),
        row(7002, NodeDown::PermissionDenied),
        row(7003, NodeDown::Unreachable),
    ];
    let out = cluster_status(&nodes, OutputFormat::Table);
    let states: Vec<&str> = out
        .stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(states, ["unauthenticated", "denied", "unreachable"]);
    let json = json_of(&cluster_status(&nodes, OutputFormat::Json));
    assert_eq!(json["nodes"][0]["down"], "unauthenticated");
    assert_eq!(json["nodes"][1]["down"], "permission_denied");
}

#[test]
fn cluster_status_with_no_node_reachable_is_unavailable() {
    let nodes = vec![NodeRow {
        addr: "127.0.0.1:7001".into(),
        id: None,
        reachable: false,
        status: None,
        error: Some("refused".into()),
        down: Some(NodeDown::Unreachable),
    }];
    assert_eq!(
        cluster_status(&nodes, OutputFormat::Table).verdict,
        Verdict::Unavailable
    );
}

#[test]
fn human_durations_read_at_a_glance_and_never_round_up() {
    assert_eq!(human_duration(Duration::from_millis(850)), "850ms");
    assert_eq!(human_duration(Duration::from_millis(12_345)), "12s");
    assert_eq!(human_duration(Duration::from_millis(59_999)), "59s");
    assert_eq!(human_duration(Duration::from_secs(245)), "4m05s");
    assert_eq!(human_duration(Duration::from_secs(7_380)), "2h03m");
    assert_eq!(
        human_duration(Duration::from_secs(2 * 86_400 + 3_600)),
        "2d01h"
    );
    assert_eq!(in_human(Duration::from_secs(12)), "in 12s");
    assert_eq!(in_human(Duration::ZERO), "now");
}

#[test]
fn run_held_names_holder_token_since_and_when_it_frees() {
    let out = run_held(&lease(), false, None, OutputFormat::Table);
    assert_eq!(out.verdict, Verdict::StandDown);
    assert_eq!(
        out.stdout,
        "tasks/evidence-42 is held by claude@host-a (token 1234) since \
         2023-11-14T22:13:20Z, free in 12s; standing down\n"
    );
    let out = run_held(&lease(), true, None, OutputFormat::Json);
    assert_eq!(
        json_of(&out),
        json!({
            "outcome": "held",
            "lease": lease_json(),
            "same_name_other_process": true,
            "assignment": null
        })
    );
    let out = run_held(&lease(), false, Some(&assignment()), OutputFormat::Table);
    assert!(out.stdout.contains("assigned to alice"), "{}", out.stdout);
}

#[test]
fn leader_time_prints_as_utc() {
    assert_eq!(utc(1_700_000_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(utc(0), "-");
}

#[test]
fn safe_deadline_in_the_past_prints_as_zero() {
    let now = Instant::now();
    let mut grant = grant(now);
    grant.safe_deadline = now;
    assert_eq!(safe_deadline_in_ms(&grant, now + Duration::from_secs(1)), 0);
}

/// A JSON value with its leaves replaced by their type: two objects of one schema
/// have the same shape.
fn shape(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Null => json!("null"),
        Value::Bool(_) => json!("bool"),
        Value::Number(_) => json!("number"),
        // Outcomes name the variant, so they are kept as they are.
        Value::String(_) => json!("string"),
        Value::Array(items) => Value::Array(items.iter().take(1).map(shape).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, field)| {
                    let shaped = if name == "outcome" {
                        field.clone()
                    } else {
                        shape(field)
                    };
                    (name.clone(), shaped)
                })
                .collect(),
        ),
    }
}

#[test]
fn every_json_output_has_an_example_of_its_exact_shape_in_the_schema_doc() {
    let doc = include_str!("../../docs/cli-json.md");
    let documented: Vec<serde_json::Value> = doc
        .split("```json\n")
        .skip(1)
        .map(|block| {
            let example = block.split("```").next().unwrap();
            shape(&serde_json::from_str(example).unwrap_or_else(|e| {
                panic!("docs/cli-json.md example is not JSON ({e}): {example}")
            }))
        })
        .collect();
    let now = Instant::now();
    let held = ClaimOutcome::Held {
        permits: None,
        lease: lease(),
        same_name_other_process: false,
        assignment: Some(assignment()),
    };
    let mut granted_assigned = grant(now);
    granted_assigned.assignment = Some(assignment());
    let record_view = RecordView {
        permits: None,
        key: "tasks/x".into(),
        record: baton_client::Record {
            pending_offer: Some(handoff::tests::sample_offer()),
            ..records::tests::sample_record()
        },
        lease: Some(lease()),
        revision: 20,
        quarantine: None,
        line: None,
    };
    let node = NodeRow {
        addr: "127.0.0.1:7001".into(),
        id: Some(1),
        reachable: true,
        status: Some(ClusterStatus {
            members: vec![baton_client::Member {
                id: 1,
                addr: "127.0.0.1:7001".into(),
                voter: true,
            }],
            ..status(1, "leader")
        }),
        error: None,
        down: None,
    };
    let lost = || RenewOutcome::Lost {
        current: Some(lease()),
    };
    let f = OutputFormat::Json;
    let outputs = [
        claim(&ClaimOutcome::Granted(grant(now)), f, now),
        claim(&held, f, now),
        renew("k", 1, &RenewOutcome::Renewed(grant(now)), f, now),
        renew("k", 1, &lost(), f, now),
        release("k", 1, &ReleaseOutcome::Released(lease()), f),
        release(
            "k",
            1,
            &ReleaseOutcome::Lost {
                current: Some(lease()),
            },
            f,
        ),
        claim(&ClaimOutcome::Granted(granted_assigned), f, now),
        probe(&view(Some(lease()), Some(assignment())), f),
        probe(&view(None, None), f),
        probe(&waited_on(), f),
        board(
            "",
            &Board {
                permits: Default::default(),
                answered_by: String::new(),
                leases: vec![lease()],
                truncated: true,
                revision: 1,
                assignments: [("tasks/evidence-42".to_string(), assignment())].into(),
                quarantines: Default::default(),
                unclaimed: Default::default(),
                unclaimed_truncated: false,
                open: Vec::new(),
                open_truncated: false,
            },
            false,
            f,
        ),
        check(
            "k",
            1,
            &TokenCheck {
                permits: 0,
                shared: false,
                current: true,
                lease: Some(lease()),
                revision: 1,
            },
            f,
        ),
        revoke("k", &revoked(Some(lease()), 30), f),
        run_held(&lease(), false, None, f),
        cluster_status(&[node], f),
        records::updated("tasks/x", &records::tests::sample_record(), f),
        records::refused(
            "tasks/x",
            &baton_client::Refusal {
                reason: baton_client::RefusalReason::WrongSession,
                key: "tasks/x".into(),
                lease: Some(lease()),
                client_id: "c-77".into(),
                token: 9,
                ..baton_client::Refusal::other("tasks/x is held by ...")
            },
            f,
        ),
        records::refused(
            "tasks/x",
            &baton_client::Refusal {
                reason: baton_client::RefusalReason::NoOffer,
                key: "tasks/x".into(),
                ..baton_client::Refusal::other("tasks/x has no pending offer")
            },
            f,
        ),
        records::assigned(
            "tasks/x",
            &baton_client::Assigned {
                record: records::tests::sample_record(),
                lease: None,
                revision: 12,
            },
            f,
        ),
        records::unassigned(
            "tasks/x",
            &baton_client::Assigned {
                record: baton_client::Record {
                    assigned_to: None,
                    ..records::tests::sample_record()
                },
                lease: None,
                revision: 12,
            },
            f,
        ),
        records::refused(
            "tasks/x",
            &baton_client::Refusal {
                reason: baton_client::RefusalReason::FormatPending,
                data_format: 5,
                nodes: vec![3],
                ..baton_client::Refusal::other("clearing an assignment needs data format 5")
            },
            f,
        ),
        crate::tasks::posted_rendered(
            &baton_client::Posted {
                key: "tasks/review-17".into(),
                record: baton_client::Record {
                    fields: [("role".to_owned(), "reviewer".to_owned())].into(),
                    ..records::tests::sample_record()
                },
                created: true,
                revision: 31,
            },
            f,
        ),
        crate::tasks::next_rendered(
            "tasks/",
            &baton_client::NextOutcome::Nothing(baton_client::Unclaimable {
                scanned: 17,
                held: 16,
                finished: 1,
                ..Default::default()
            }),
            f,
            now,
        ),
        records::refused(
            "tasks/review-17",
            &baton_client::Refusal {
                reason: baton_client::RefusalReason::Exists,
                key: "tasks/review-17".into(),
                lease: Some(lease()),
                status: "open".into(),
                ..baton_client::Refusal::other("tasks/review-17 is already on the board")
            },
            f,
        ),
        records::record(&record_view, f),
        records::history(&records::tests::sample_history(), false, f),
        handoff::offered(&handoff::tests::sample_offer(), None, f),
        handoff::accepted_output(&handoff::tests::sample_accepted(now), None, f, now),
        handoff::accepted_output(
            &handoff::tests::sample_accepted(now),
            Some(&handoff::tests::sample_verification()),
            f,
            now,
        ),
        handoff::declined("tasks/x", 13, f),
        handoff::cancelled("tasks/x", 9, 14, f),
        watch::rendered(&watch::tests::sample_event(true), f),
        watch::rendered(&watch::tests::sample_event(false), f),
        bench::rendered(&bench::tests::sample_report(), f),
        bench::rendered(&bench::tests::clean_report(), f),
        sets::rendered(&SetOutcome::Granted(vec![grant(now), grant(now)]), f, now),
        sets::rendered(
            &SetOutcome::Blocked(vec![
                BlockedKey::Held {
                    lease: lease(),
                    same_name_other_process: false,
                    assignment: None,
                },
                BlockedKey::Quarantined {
                    key: "src/b.rs".into(),
                    revision: 7,
                    delay: Duration::from_secs(30),
                    remaining: Duration::from_secs(12),
                    revoked: false,
                },
            ]),
            f,
            now,
        ),
        sets::several(
            &["src/a.rs".to_owned(), "src/b.rs".to_owned()],
            vec![
                sets::Each::Done(RenewOutcome::Renewed(grant(now))),
                sets::Each::Done(lost()),
            ],
            f,
            |key, outcome| renew(key, 1, outcome, f, now),
        )
        .unwrap(),
        sets::several(
            &["src/a.rs".to_owned()],
            vec![sets::Each::Done(ReleaseOutcome::Released(lease()))],
            f,
            |key, outcome| release(key, 1, outcome, f),
        )
        .unwrap(),
    ];
    if std::env::var_os("BATON_PRINT_JSON_EXAMPLES").is_some() {
        for out in &outputs {
            print!("{}", out.stdout);
        }
    }
    for out in outputs {
        let shaped = shape(&json_of(&out));
        assert!(
            documented.contains(&shaped),
            "no example of this shape in docs/cli-json.md: {}",
            out.stdout
        );
    }
}

#[test]
fn suggested_commands_quote_odd_words() {
    assert_eq!(shell_word("tasks/a-1"), "tasks/a-1");
    assert_eq!(shell_word(""), "''");
    assert_eq!(shell_word("it's"), r"'it'\''s'");
}
