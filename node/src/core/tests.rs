//! Unit tests of the pure lease core: every operation, every refusal, the limits at and past
//! their boundaries, de-duplication, and `Expire` racing `Renew`.

use super::limits::*;
use super::*;

fn holder(name: &str, client: &str) -> Holder {
    Holder {
        name: name.into(),
        client_id: client.into(),
    }
}

/// The session a test command comes from: a claim's, accept's or decline's holder's own, and
/// otherwise `default` (holder `a`'s, "ca", for the plain helpers). The tests of session
/// binding name their sessions explicitly (`cmd_as`).
fn session_of(op: &Op, default: &str) -> String {
    match op {
        Op::Claim { holder, .. } | Op::Accept { holder, .. } | Op::Decline { holder, .. } => {
            holder.client_id.to_string()
        }
        _ => default.to_owned(),
    }
}

fn cmd(op: Op) -> LogCommand {
    cmd_as("ca", op)
}

/// A command from session `session`, without a request id.
fn cmd_as(session: &str, op: Op) -> LogCommand {
    LogCommand {
        request_id: None,
        leader_unix_ms: 1_000,
        sender: Some(Sender {
            client_id: session_of(&op, session).into(),
            principal: None,
        }),
        op,
    }
}

fn cmd_from(client: &str, seq: u64, op: Op) -> LogCommand {
    LogCommand {
        request_id: Some(RequestId {
            client_id: client.into(),
            seq,
        }),
        leader_unix_ms: 1_000,
        sender: Some(Sender {
            client_id: session_of(&op, client).into(),
            principal: None,
        }),
        op,
    }
}

fn claim(key: &str, h: &Holder, ttl_ms: u64) -> LogCommand {
    cmd(Op::Claim {
        key: key.into(),
        holder: h.clone(),
        ttl_ms,
    })
}

fn renew(key: &str, token: u64) -> LogCommand {
    cmd(Op::Renew {
        key: key.into(),
        token,
    })
}

fn release(key: &str, token: u64) -> LogCommand {
    cmd(Op::Release {
        key: key.into(),
        token,
        final_status: None,
    })
}

fn expire(key: &str, token: u64, basis: u64) -> LogCommand {
    cmd(Op::Expire {
        key: key.into(),
        token,
        basis,
    })
}

fn granted(outcome: Outcome) -> Lease {
    match outcome {
        Outcome::Granted { lease, .. } => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn invalid(outcome: Outcome) -> String {
    match outcome {
        Outcome::Invalid { message } => message,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn claim_of_free_key_grants_token_equal_to_log_index() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    let lease = granted(t.apply(7, &claim("tasks/1", &a, 5_000)));
    assert_eq!(lease.token, 7);
    assert_eq!(lease.basis, 7);
    assert_eq!(lease.holder, a);
    assert_eq!(lease.ttl_ms, 5_000);
    assert_eq!(lease.since_unix_ms, 1_000);
    assert_eq!(t.lease("tasks/1"), Some(&lease));
}

/// A held lease and its claim event keep one string of the holder's name and one of its
/// session, also after the table went through a snapshot (what `baton-scale` measures per
/// held lease); and a holder serializes exactly as two strings did, so the log and snapshots
/// are unchanged.
#[test]
fn a_lease_and_its_claim_event_share_the_holders_strings_across_a_snapshot() {
    let mut t = LeaseTable::default();
    granted(t.apply(7, &claim("tasks/1", &holder("a", "ca"), 5_000)));
    let shared = |t: &LeaseTable| {
        let lease = t.lease("tasks/1").unwrap();
        let event = t.case("tasks/1").unwrap().history.events.back().unwrap();
        let actor = event.actor.as_ref().unwrap();
        assert_eq!(event.kind, EventKind::Claimed);
        assert_eq!((&*actor.name, &*actor.client_id), ("a", "ca"));
        (
            actor.name.is_shared_with(&lease.holder.name),
            actor.client_id.is_shared_with(&lease.holder.client_id),
        )
    };
    assert_eq!(shared(&t), (true, true), "as applied");
    // bincode, as the store encodes (kept out of the core's imports).
    let bytes = bincode::serialize(&t).unwrap();
    let mut back: LeaseTable = bincode::deserialize(&bytes).unwrap();
    assert_eq!(
        shared(&back),
        (false, false),
        "decoding makes a string per copy"
    );
    back.rebuild_index();
    assert_eq!(shared(&back), (true, true), "as loaded");
    assert_eq!(back, t);
    assert_eq!(
        bincode::serialize(&holder("a", "ca")).unwrap(),
        bincode::serialize(&("a".to_owned(), "ca".to_owned())).unwrap()
    );
}

#[test]
fn claim_of_held_key_is_refused_naming_holder_and_token() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    granted(t.apply(3, &claim("k", &a, 5_000)));
    match t.apply(4, &claim("k", &holder("b", "cb"), 5_000)) {
        Outcome::Held {
            lease,
            same_name_other_process,
            ..
        } => {
            assert_eq!(lease.holder, a);
            assert_eq!(lease.token, 3);
            assert!(!same_name_other_process);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.lease("k").unwrap().holder, a);
}

#[test]
fn same_name_other_process_is_refused_and_told_so() {
    let mut t = LeaseTable::default();
    granted(t.apply(3, &claim("k", &holder("claude@a", "p1"), 5_000)));
    match t.apply(4, &claim("k", &holder("claude@a", "p2"), 5_000)) {
        Outcome::Held {
            same_name_other_process,
            lease,
            ..
        } => {
            assert!(same_name_other_process);
            assert_eq!(lease.holder.client_id, "p1");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn reclaim_by_same_process_keeps_token_and_renews() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    granted(t.apply(3, &claim("k", &a, 5_000)));
    match t.apply(9, &claim("k", &a, 8_000)) {
        Outcome::Granted {
            lease,
            already_held,
            ..
        } => {
            assert!(already_held);
            assert_eq!(lease.token, 3);
            assert_eq!(lease.basis, 9);
            assert_eq!(lease.ttl_ms, 8_000);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn renew_with_current_token_moves_basis_and_keeps_token() {
    let mut t = LeaseTable::default();
    granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    match t.apply(5, &renew("k", 3)) {
        Outcome::Renewed { lease } => {
            assert_eq!(lease.token, 3);
            assert_eq!(lease.basis, 5);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn renew_and_release_with_stale_token_are_lost_and_change_nothing() {
    let mut t = LeaseTable::default();
    granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    assert!(matches!(
        t.apply(4, &release("k", 3)),
        Outcome::Released { .. }
    ));
    let b = granted(t.apply(5, &claim("k", &holder("b", "cb"), 5_000)));
    let before = t.clone();
    for outcome in [t.apply(6, &renew("k", 3)), t.apply(7, &release("k", 3))] {
        match outcome {
            Outcome::Lost { current } => assert_eq!(current.as_ref(), Some(&b)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(t, before);
}

#[test]
fn renew_of_free_key_is_lost_with_no_holder() {
    let mut t = LeaseTable::default();
    assert_eq!(t.apply(2, &renew("k", 1)), Outcome::Lost { current: None });
}

#[test]
fn release_frees_the_key_and_next_claim_gets_a_larger_token() {
    let mut t = LeaseTable::default();
    let first = granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    assert!(matches!(
        t.apply(4, &release("k", first.token)),
        Outcome::Released { .. }
    ));
    assert_eq!(t.lease("k"), None);
    let second = granted(t.apply(5, &claim("k", &holder("b", "cb"), 5_000)));
    assert!(second.token > first.token);
}

#[test]
fn expire_with_current_basis_frees_the_key() {
    let mut t = LeaseTable::default();
    let l = granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    match t.apply(4, &expire("k", l.token, l.basis)) {
        Outcome::Expired { lease } => assert_eq!(lease, l),
        other => panic!("{other:?}"),
    }
    assert_eq!(t.lease("k"), None);
}

#[test]
fn expire_that_raced_a_renewal_is_ignored() {
    let mut t = LeaseTable::default();
    let l = granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    // The leader counted from the grant (basis 3) and proposed Expire; the renewal at index
    // 4 was committed before it.
    assert!(matches!(
        t.apply(4, &renew("k", 3)),
        Outcome::Renewed { .. }
    ));
    assert_eq!(t.apply(5, &expire("k", l.token, 3)), Outcome::ExpireIgnored);
    assert_eq!(t.lease("k").unwrap().basis, 4);
}

#[test]
fn expire_of_an_older_grant_does_not_free_a_newer_holder() {
    let mut t = LeaseTable::default();
    granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    t.apply(4, &release("k", 3));
    let b = granted(t.apply(5, &claim("k", &holder("b", "cb"), 5_000)));
    assert_eq!(t.apply(6, &expire("k", 3, 3)), Outcome::ExpireIgnored);
    assert_eq!(t.lease("k"), Some(&b));
}

#[test]
fn revoke_frees_a_held_key_and_reports_it() {
    let mut t = LeaseTable::default();
    let l = granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    let revoke = |key: &str| {
        cmd(Op::Revoke {
            key: key.into(),
            reason: "stuck agent".into(),
        })
    };
    assert_eq!(
        t.apply(4, &revoke("k")),
        Outcome::Revoked { previous: Some(l) }
    );
    assert_eq!(
        t.apply(5, &revoke("k")),
        Outcome::Revoked { previous: None }
    );
}

#[test]
fn retried_request_returns_its_first_answer_and_applies_once() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    let op = Op::Claim {
        key: "k".into(),
        holder: a.clone(),
        ttl_ms: 5_000,
    };
    let first = t.apply(3, &cmd_from("ca", 1, op.clone()));
    // Meanwhile the lease is released and someone else claims it.
    t.apply(4, &release("k", 3));
    granted(t.apply(5, &claim("k", &holder("b", "cb"), 5_000)));
    // The retry of seq 1 (e.g. after a leader change) gets the first answer, not a new one.
    let retry = t.apply(6, &cmd_from("ca", 1, op));
    assert_eq!(retry, first);
    assert_eq!(t.lease("k").unwrap().holder.name, "b");
}

#[test]
fn retried_refusal_is_also_remembered() {
    let mut t = LeaseTable::default();
    granted(t.apply(3, &claim("k", &holder("a", "ca"), 5_000)));
    let op = Op::Claim {
        key: "k".into(),
        holder: holder("b", "cb"),
        ttl_ms: 5_000,
    };
    let first = t.apply(4, &cmd_from("cb", 1, op.clone()));
    assert!(matches!(first, Outcome::Held { .. }));
    t.apply(5, &release("k", 3));
    // Even though the key is free now, the retry answers what the request got the first time.
    assert_eq!(t.apply(6, &cmd_from("cb", 1, op)), first);
    assert_eq!(t.lease("k"), None);
}

#[test]
fn dedup_keeps_a_bounded_window_per_client_and_refuses_older_seqs() {
    let mut t = LeaseTable::default();
    let n = DEDUP_ANSWERS_PER_CLIENT_MAX as u64 + 5;
    for seq in 1..=n {
        let op = Op::Claim {
            key: format!("k{seq}"),
            holder: holder("a", "ca"),
            ttl_ms: 5_000,
        };
        granted(t.apply(seq, &cmd_from("ca", seq, op)));
    }
    let s = t.session("ca").unwrap();
    assert_eq!(s.answers.len(), DEDUP_ANSWERS_PER_CLIENT_MAX);
    assert_eq!(s.forgotten_seq_max, 5);
    let old = Op::Claim {
        key: "new".into(),
        holder: holder("a", "ca"),
        ttl_ms: 5_000,
    };
    match t.apply(100, &cmd_from("ca", 2, old)) {
        Outcome::RetryTooOld { message } => assert!(message.contains("too old"), "{message}"),
        other => panic!("expected RetryTooOld, got {other:?}"),
    }
    assert_eq!(t.lease("new"), None, "a refused request changes nothing");
}

#[test]
fn dedup_sessions_are_bounded_evicting_the_longest_idle_client() {
    let mut t = LeaseTable::default();
    for i in 0..=DEDUP_CLIENTS_MAX as u64 {
        let op = Op::Renew {
            key: "k".into(),
            token: 1,
        };
        t.apply(i + 1, &cmd_from(&format!("c{i}"), 1, op));
    }
    assert!(
        t.session("c0").is_none(),
        "the longest idle client is forgotten"
    );
    assert!(t.session("c1").is_some());
    assert!(t.session(&format!("c{DEDUP_CLIENTS_MAX}")).is_some());
}

#[test]
fn key_limits_hold_at_and_past_the_boundary() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    let at_limit = "k".repeat(KEY_BYTES_MAX);
    granted(t.apply(1, &claim(&at_limit, &a, 5_000)));
    let past = "k".repeat(KEY_BYTES_MAX + 1);
    let msg = invalid(t.apply(2, &claim(&past, &a, 5_000)));
    assert!(msg.contains("513 bytes") && msg.contains("512"), "{msg}");
    assert!(invalid(t.apply(3, &claim("", &a, 5_000))).contains("empty"));
    assert!(invalid(t.apply(4, &claim("a\nb", &a, 5_000))).contains("control"));
    assert_eq!(t.lease_count(), 1, "refused claims change nothing");
}

#[test]
fn holder_limits_hold_at_and_past_the_boundary() {
    let mut t = LeaseTable::default();
    granted(t.apply(
        1,
        &claim(
            "k1",
            &holder(&"h".repeat(HOLDER_NAME_BYTES_MAX), "c"),
            5_000,
        ),
    ));
    let msg = invalid(t.apply(
        2,
        &claim(
            "k2",
            &holder(&"h".repeat(HOLDER_NAME_BYTES_MAX + 1), "c"),
            5_000,
        ),
    ));
    assert!(msg.contains("holder name"), "{msg}");
    invalid(t.apply(3, &claim("k3", &holder("", "c"), 5_000)));
    invalid(t.apply(4, &claim("k4", &holder("h", ""), 5_000)));
    invalid(t.apply(
        5,
        &claim(
            "k5",
            &holder("h", &"c".repeat(CLIENT_ID_BYTES_MAX + 1)),
            5_000,
        ),
    ));
    assert_eq!(t.lease_count(), 1);
}

#[test]
fn ttl_limits_hold_at_and_past_the_boundary() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    granted(t.apply(1, &claim("max", &a, TTL_MS_MAX)));
    granted(t.apply(2, &claim("min", &a, TTL_MS_FLOOR)));
    let msg = invalid(t.apply(3, &claim("over", &a, TTL_MS_MAX + 1)));
    assert!(msg.contains("out of range"), "{msg}");
    invalid(t.apply(4, &claim("under", &a, TTL_MS_FLOOR - 1)));
    invalid(t.apply(5, &claim("zero", &a, 0)));
    assert_eq!(t.lease_count(), 2);
}

#[test]
fn token_zero_and_bad_request_ids_are_refused() {
    let mut t = LeaseTable::default();
    assert!(invalid(t.apply(1, &renew("k", 0))).contains("token 0"));
    let op = Op::Renew {
        key: "k".into(),
        token: 1,
    };
    assert!(invalid(t.apply(2, &cmd_from("c", 0, op.clone()))).contains("seq"));
    invalid(t.apply(3, &cmd_from("has space", 1, op)));
    assert!(t.session("c").is_none());
}

#[test]
fn revoke_reason_limits_hold() {
    let mut t = LeaseTable::default();
    let ok = cmd(Op::Revoke {
        key: "k".into(),
        reason: "r".repeat(REASON_BYTES_MAX),
    });
    assert!(matches!(t.apply(1, &ok), Outcome::Revoked { .. }));
    let past = cmd(Op::Revoke {
        key: "k".into(),
        reason: "r".repeat(REASON_BYTES_MAX + 1),
    });
    invalid(t.apply(2, &past));
    invalid(t.apply(
        3,
        &cmd(Op::Revoke {
            key: "k".into(),
            reason: String::new(),
        }),
    ));
}

#[test]
fn board_lists_a_prefix_in_pages() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    for (i, key) in ["a/1", "a/2", "a/3", "b/1"].iter().enumerate() {
        granted(t.apply(i as u64 + 1, &claim(key, &a, 5_000)));
    }
    let (page, more) = t.board("a/", "", 2);
    assert_eq!(
        page.iter().map(|l| &*l.key).collect::<Vec<_>>(),
        ["a/1", "a/2"]
    );
    assert!(more);
    let (page, more) = t.board("a/", "a/2", 2);
    assert_eq!(page.iter().map(|l| &*l.key).collect::<Vec<_>>(), ["a/3"]);
    assert!(!more);
    assert_eq!(t.board("", "", 10).0.len(), 4);
}

/// The events and effects of applying `cmd` at `index`.
fn changes_of(t: &mut LeaseTable, index: u64, cmd: &LogCommand) -> Changes {
    let mut changes = Changes::default();
    t.apply_tracked(index, cmd, &mut changes, &mut Default::default());
    changes
}

fn start(timer: Timer, key: &str, token: u64, basis: u64, ms: u64) -> Effect {
    Effect::Start {
        timer,
        key: key.into(),
        token,
        basis,
        ms,
    }
}

fn stop(timer: Timer, key: &str) -> Effect {
    Effect::Stop {
        timer,
        key: key.into(),
    }
}

#[test]
fn changes_name_exactly_the_events_added() {
    let mut t = LeaseTable::default();
    let op = Op::Claim {
        key: "k".into(),
        holder: holder("a", "ca"),
        ttl_ms: 5_000,
    };
    let changes = changes_of(&mut t, 1, &cmd_from("ca", 1, op));
    let events: Vec<(&str, u64, EventKind)> = changes
        .events
        .iter()
        .map(|(k, e)| (&**k, e.revision, e.kind))
        .collect();
    assert_eq!(events, [("k", 1, EventKind::Claimed)]);
    let changes = changes_of(&mut t, 2, &claim("k", &holder("b", "cb"), 5_000));
    assert_eq!(
        changes,
        Changes::default(),
        "a refusal records no event, starts nothing"
    );
}

#[test]
fn each_step_asks_for_exactly_the_countdowns_it_starts_and_stops() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    // A grant starts the lease's countdown from this entry; a renewal restarts it.
    let c = changes_of(&mut t, 1, &claim("k", &a, 5_000));
    assert_eq!(c.effects, [start(Timer::Lease, "k", 1, 1, 5_000)]);
    let c = changes_of(&mut t, 2, &renew("k", 1));
    assert_eq!(c.effects, [start(Timer::Lease, "k", 1, 2, 5_000)]);
    // An offer starts its lapse; accepting it stops that and starts the taker's lease.
    let offer = Op::Offer {
        key: "k".into(),
        token: 1,
        to: "b".into(),
        note: HandoffNote::default(),
        offer_ttl_ms: 9_000,
    };
    let c = changes_of(&mut t, 3, &cmd(offer));
    assert_eq!(c.effects, [start(Timer::Offer, "k", 1, 3, 9_000)]);
    let accept = Op::Accept {
        key: "k".into(),
        holder: holder("b", "cb"),
        ttl_ms: 6_000,
    };
    let c = changes_of(&mut t, 4, &cmd(accept));
    assert_eq!(
        c.effects,
        [
            start(Timer::Lease, "k", 4, 4, 6_000),
            stop(Timer::Offer, "k")
        ]
    );
    // An expiry under a quarantine rule stops the lease and starts the quarantine; its end
    // stops that.
    let rule = Op::SetQuarantine {
        prefix: "k".into(),
        delay_ms: 3_000,
    };
    assert_eq!(changes_of(&mut t, 5, &cmd(rule)).effects, []);
    let c = changes_of(&mut t, 6, &expire("k", 4, 4));
    assert_eq!(
        c.effects,
        [
            start(Timer::Quarantine, "k", 6, 6, 3_000),
            stop(Timer::Lease, "k")
        ]
    );
    let end = Op::EndQuarantine {
        key: "k".into(),
        revision: 6,
    };
    assert_eq!(
        changes_of(&mut t, 7, &cmd(end)).effects,
        [stop(Timer::Quarantine, "k")]
    );
    // A release stops the lease; an expiry that lost its race changes nothing.
    let g = granted(t.apply(8, &claim("j", &a, 5_000)));
    let c = changes_of(&mut t, 9, &release("j", g.token));
    assert_eq!(c.effects, [stop(Timer::Lease, "j")]);
    assert_eq!(
        changes_of(&mut t, 10, &expire("j", g.token, 8)),
        Changes::default()
    );
}

#[test]
fn a_retry_answered_from_memory_changes_nothing_and_starts_no_countdown() {
    let mut t = LeaseTable::default();
    let op = Op::Claim {
        key: "k".into(),
        holder: holder("a", "ca"),
        ttl_ms: 5_000,
    };
    let first = changes_of(&mut t, 1, &cmd_from("ca", 1, op.clone()));
    assert_eq!(first.effects.len(), 1);
    let retry = changes_of(&mut t, 2, &cmd_from("ca", 1, op));
    assert_eq!(retry, Changes::default());
}

#[test]
fn table_survives_a_serde_round_trip_with_its_index() {
    let mut t = LeaseTable::default();
    let op = Op::Claim {
        key: "k".into(),
        holder: holder("a", "ca"),
        ttl_ms: 5_000,
    };
    t.apply(1, &cmd_from("ca", 1, op.clone()));
    let bytes = serde_json::to_vec(&t).unwrap();
    let mut back: LeaseTable = serde_json::from_slice(&bytes).unwrap();
    back.rebuild_index();
    assert_eq!(back, t);
    // One string per key, shared by the lease and the case file, before and after.
    let shared = |t: &LeaseTable| {
        let (case_key, _) = t.cases().next().unwrap();
        std::ptr::eq(case_key.as_ptr(), t.lease("k").unwrap().key.as_ptr())
    };
    assert!(shared(&t), "a granted lease shares its case file's key");
    assert!(shared(&back), "and so does a restored one");
    // The restored table still de-duplicates.
    assert_eq!(
        back.apply(2, &cmd_from("ca", 1, op.clone())),
        t.apply(2, &cmd_from("ca", 1, op))
    );
}

#[test]
fn a_request_id_reused_for_another_operation_is_refused() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    let claim_op = Op::Claim {
        key: "k".into(),
        holder: a,
        ttl_ms: 5_000,
    };
    granted(t.apply(3, &cmd_from("ca", 1, claim_op)));
    let release_op = Op::Release {
        key: "k".into(),
        token: 3,
        final_status: None,
    };
    let msg = invalid(t.apply(4, &cmd_from("ca", 1, release_op)));
    assert!(
        msg.contains("already used for a different request"),
        "{msg}"
    );
    assert!(t.lease("k").is_some(), "the reused id changed nothing");
}

#[test]
fn fingerprints_differ_by_kind_and_field() {
    let ops = [
        Op::Renew {
            key: "k".into(),
            token: 1,
        },
        Op::Release {
            key: "k".into(),
            token: 1,
            final_status: None,
        },
        Op::Renew {
            key: "k".into(),
            token: 2,
        },
        Op::Renew {
            key: "k2".into(),
            token: 1,
        },
    ];
    let prints: std::collections::BTreeSet<u64> = ops.iter().map(Op::fingerprint).collect();
    assert_eq!(prints.len(), ops.len());
    // Stable across builds and nodes: pinned to FNV-1a of the documented encoding
    // ("renew", 0xff, "k", 0xff, 1u64 little-endian, 0xff), computed independently.
    assert_eq!(ops[0].fingerprint(), 0xa17d_b8a0_0303_bda1);
}

#[test]
fn requests_in_flight_together_are_not_refused_when_they_commit_out_of_order() {
    let mut t = LeaseTable::default();
    let renew_op = |seq: u64| Op::Renew {
        key: format!("k{seq}"),
        token: 1,
    };
    // 19 requests in flight at once; seq 19 commits first, then 1..=16, then 17 and 18.
    let order: Vec<u64> = std::iter::once(19).chain(1..=16).chain([17, 18]).collect();
    for (i, seq) in order.into_iter().enumerate() {
        let outcome = t.apply(i as u64 + 1, &cmd_from("c", seq, renew_op(seq)));
        assert_eq!(
            outcome,
            Outcome::Lost { current: None },
            "seq {seq} was applied, not refused"
        );
    }
}

#[test]
fn a_reclaim_with_a_shorter_ttl_keeps_the_longer_lease() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    granted(t.apply(3, &claim("k", &a, 3_600_000)));
    let lease = granted(t.apply(4, &claim("k", &a, 10_000)));
    assert_eq!(
        lease.ttl_ms, 3_600_000,
        "another task of the process may rely on the hour"
    );
    assert_eq!(lease.basis, 4);
}

#[test]
fn every_end_but_the_holders_own_release_is_told_to_the_holders_session_with_the_facts() {
    let mut t = LeaseTable::default();
    let a = holder("a", "ca");
    let told = |t: &mut LeaseTable, index: u64, cmd: &LogCommand| {
        changes_of(t, index, cmd)
            .endings
            .into_iter()
            .map(|e| {
                let by = e.by.map(|b| b.client_id.to_string());
                (
                    e.kind,
                    e.token,
                    e.holder.client_id.to_string(),
                    by,
                    e.reason,
                    e.successor,
                    e.revision,
                )
            })
            .collect::<Vec<_>>()
    };
    changes_of(&mut t, 3, &claim("k", &a, 5_000));
    let revoke = cmd_as(
        "ops",
        Op::Revoke {
            key: "k".into(),
            reason: "stuck agent".into(),
        },
    );
    assert_eq!(
        told(&mut t, 4, &revoke),
        [(
            EventKind::Revoked,
            3,
            "ca".into(),
            Some("ops".into()),
            "stuck agent".into(),
            None,
            4
        )]
    );
    assert!(
        told(&mut t, 5, &revoke).is_empty(),
        "a revoke of a free key ends nothing"
    );
    changes_of(&mut t, 6, &claim("k", &a, 5_000));
    assert_eq!(
        told(&mut t, 7, &expire("k", 6, 6)),
        [(
            EventKind::Expired,
            6,
            "ca".into(),
            None,
            String::new(),
            None,
            7
        )]
    );
    changes_of(&mut t, 8, &claim("k", &a, 5_000));
    assert!(
        told(&mut t, 9, &release("k", 8)).is_empty(),
        "the holder knows its own release"
    );
    changes_of(&mut t, 10, &claim("k", &a, 5_000));
    let offer = cmd(Op::Offer {
        key: "k".into(),
        token: 10,
        to: "b".into(),
        note: Default::default(),
        offer_ttl_ms: 60_000,
    });
    assert!(told(&mut t, 11, &offer).is_empty());
    let accept = cmd(Op::Accept {
        key: "k".into(),
        holder: holder("b", "cb"),
        ttl_ms: 5_000,
    });
    assert_eq!(
        told(&mut t, 12, &accept),
        [(
            EventKind::Accepted,
            10,
            "ca".into(),
            Some("cb".into()),
            "handed off to b (token 12)".into(),
            Some(("b".into(), 12)),
            12
        )]
    );
}
