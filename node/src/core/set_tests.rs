//! Unit tests of the all-or-none claim of a set of keys (`Op::ClaimSet`).

use super::limits::*;
use super::*;
use crate::core::types::{Blocked, Grant};

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
        leader_unix_ms: 1_000,
        sender: Some(Sender {
            client_id: session.into(),
            principal: None,
        }),
        op,
    }
}

fn set_op(who: &str, keys: &[&str]) -> Op {
    Op::ClaimSet {
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        holder: holder(who),
        ttl_ms: 10_000,
    }
}

fn claim_set(t: &mut LeaseTable, index: u64, who: &str, keys: &[&str]) -> Outcome {
    t.apply(index, &from(who, index, set_op(who, keys)))
}

fn claim(t: &mut LeaseTable, index: u64, who: &str, key: &str) {
    let op = Op::Claim {
        key: key.into(),
        holder: holder(who),
        ttl_ms: 10_000,
    };
    assert!(matches!(
        t.apply(index, &from(who, index, op)),
        Outcome::Granted { .. }
    ));
}

fn grants(outcome: Outcome) -> Vec<Grant> {
    match outcome {
        Outcome::GrantedSet { grants } => grants,
        other => panic!("not granted: {other:?}"),
    }
}

fn blocked(outcome: Outcome) -> Vec<Blocked> {
    match outcome {
        Outcome::BlockedSet { blocked } => blocked,
        other => panic!("not blocked: {other:?}"),
    }
}

#[test]
fn a_set_of_free_keys_is_granted_whole_with_the_entrys_revision_as_every_token() {
    let mut t = LeaseTable::default();
    let got = grants(claim_set(&mut t, 7, "ann@h1", &["b", "a", "c"]));
    let keys: Vec<&str> = got.iter().map(|g| &*g.lease.key).collect();
    assert_eq!(keys, ["b", "a", "c"], "in the order asked");
    for g in &got {
        assert_eq!(g.lease.token, 7);
        assert!(!g.already_held);
        assert_eq!(t.lease(&g.lease.key).unwrap().holder, holder("ann@h1"));
        let event = t.case(&g.lease.key).unwrap().history.events.back().unwrap();
        assert_eq!(event.kind, EventKind::Claimed);
        assert_eq!(event.token, 7);
        assert!(event.detail.contains("one of 3 keys"), "{}", event.detail);
    }
}

#[test]
fn a_set_with_one_key_held_by_another_grants_nothing_and_names_the_holder() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "bob@h2", "b");
    let before = t.clone();
    let refused = blocked(claim_set(&mut t, 2, "ann@h1", &["a", "b", "c"]));
    assert_eq!(refused.len(), 1);
    let Blocked::Held { lease, .. } = &refused[0] else {
        panic!("not held: {refused:?}");
    };
    assert_eq!(
        (&*lease.key, &*lease.holder.name, lease.token),
        ("b", "bob@h2", 1)
    );
    assert!(
        t.same_but_sessions(&before),
        "nothing granted, nothing created"
    );
    assert!(t.lease("a").is_none() && t.case("a").is_none());
}

#[test]
fn every_key_that_blocks_is_named_in_the_order_asked_quarantined_ones_too() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "bob@h2", "d");
    claim(&mut t, 2, "cat@h3", "b");
    let rule = Op::SetQuarantine {
        prefix: "q".into(),
        delay_ms: 5_000,
    };
    t.apply(3, &from("ops", 3, rule));
    claim(&mut t, 4, "bob@h2", "q1");
    let expire = LogCommand {
        request_id: None,
        leader_unix_ms: 1_000,
        sender: None,
        op: Op::Expire {
            key: "q1".into(),
            token: 4,
            basis: 4,
        },
    };
    assert!(matches!(t.apply(5, &expire), Outcome::Expired { .. }));
    let refused = blocked(claim_set(&mut t, 6, "ann@h1", &["a", "b", "q1", "d"]));
    let named: Vec<&str> = refused.iter().map(Blocked::key).collect();
    assert_eq!(named, ["b", "q1", "d"]);
    assert!(matches!(
        &refused[1],
        Blocked::Quarantined {
            revision: 5,
            delay_ms: 5_000,
            ..
        }
    ));
}

#[test]
fn a_key_the_claimant_already_holds_keeps_its_token_and_the_rest_get_the_new_one() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "ann@h1", "a");
    let got = grants(claim_set(&mut t, 2, "ann@h1", &["a", "b"]));
    assert_eq!((got[0].lease.token, got[0].already_held), (1, true));
    assert_eq!(got[0].lease.basis, 2, "renewed by the set's entry");
    assert_eq!((got[1].lease.token, got[1].already_held), (2, false));
}

#[test]
fn a_retried_set_gets_its_first_answer_and_is_not_applied_twice() {
    let mut t = LeaseTable::default();
    let first = claim_set(&mut t, 1, "ann@h1", &["a", "b"]);
    let cmd = from("ann@h1", 1, set_op("ann@h1", &["a", "b"]));
    let again = t.apply(2, &cmd);
    assert_eq!(first, again);
    assert_eq!(t.lease("a").unwrap().basis, 1, "the retry renewed nothing");
}

#[test]
fn bad_sets_are_refused_as_bad_input_and_change_nothing() {
    let mut t = LeaseTable::default();
    let too_many: Vec<String> = (0..=CLAIM_SET_KEYS_MAX).map(|i| format!("k{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    for ((keys, says), seq) in [
        (&[][..], "names no key"),
        (&["a", "b", "a"][..], "named twice"),
        (&["a", ""][..], "key is empty"),
        (&too_many[..], "the limit is 64 keys"),
    ]
    .into_iter()
    .zip(1..)
    {
        match claim_set(&mut t, seq, "ann@h1", keys) {
            Outcome::Invalid { message } => assert!(message.contains(says), "{message}"),
            other => panic!("{keys:?}: {other:?}"),
        }
    }
    assert_eq!(t.lease_count(), 0);
    assert_eq!(t.case_count(), 0);
}

#[test]
fn a_set_that_would_pass_the_key_limit_grants_nothing() {
    let mut t = LeaseTable::with_keys_max(3);
    claim(&mut t, 1, "bob@h2", "a");
    let refused = claim_set(&mut t, 2, "ann@h1", &["b", "c", "d"]);
    assert!(
        matches!(
            &refused,
            Outcome::Refused {
                refusal: Refusal::KeyLimit { key, keys: 1, keys_max: 3 },
            } if key == "b"
        ),
        "{refused:?}"
    );
    assert_eq!(t.case_count(), 1);
    assert_eq!(grants(claim_set(&mut t, 3, "ann@h1", &["b", "c"])).len(), 2);
}

#[test]
fn a_blocked_set_is_answered_from_a_read_as_its_apply_would() {
    let mut t = LeaseTable::default();
    claim(&mut t, 1, "bob@h2", "b");
    let cmd = from("ann@h1", 2, set_op("ann@h1", &["a", "b"]));
    let read = t
        .unchanged_answer(&cmd)
        .expect("a blocked set changes nothing");
    assert_eq!(read, t.clone().apply(2, &cmd));
    let free = from("ann@h1", 3, set_op("ann@h1", &["a", "c"]));
    assert_eq!(
        t.unchanged_answer(&free),
        None,
        "a grant goes through the log"
    );
}

#[test]
fn a_set_is_claimed_only_for_the_senders_own_session() {
    let mut t = LeaseTable::default();
    let mut cmd = from("ann@h1", 1, set_op("ann@h1", &["a"]));
    cmd.sender.as_mut().unwrap().client_id = "cid-mallory".into();
    assert!(matches!(t.apply(1, &cmd), Outcome::Invalid { .. }));
    assert_eq!(t.lease_count(), 0);
}

#[test]
fn granted_set_keys_expire_and_release_one_by_one() {
    let mut t = LeaseTable::default();
    grants(claim_set(&mut t, 1, "ann@h1", &["a", "b"]));
    let release = Op::Release {
        key: "a".into(),
        token: 1,
        final_status: None,
    };
    assert!(matches!(
        t.apply(2, &from("ann@h1", 2, release)),
        Outcome::Released { .. }
    ));
    assert!(t.lease("a").is_none());
    assert_eq!(
        t.lease("b").unwrap().token,
        1,
        "the rest of the set stays held"
    );
}
