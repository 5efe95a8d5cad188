//! Unit tests of permits (`Op::ClaimPermit`, and each permit's renewal, release, expiry and
//! revoke on its own).

use super::access::AccessState;
use super::permits::countdown_id;
use super::*;

const KEY: &str = "gpu/runner";

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
            principal: None,
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

fn claim_op(who: &str, permits: u32) -> Op {
    Op::ClaimPermit {
        key: KEY.into(),
        holder: holder(who),
        ttl_ms: 5_000,
        sharing: Sharing::Permits(permits),
    }
}

fn apply(t: &mut LeaseTable, index: u64, cmd: LogCommand) -> (Outcome, Changes) {
    let mut changes = Changes::default();
    let out = t.apply_tracked(index, &cmd, &mut changes, &mut AccessState::default());
    (out, changes)
}

/// `who` is granted a permit of `permits` at `index`: its own lease.
fn granted(t: &mut LeaseTable, index: u64, who: &str, permits: u32) -> Lease {
    match t.apply(index, &from(who, index, claim_op(who, permits))) {
        Outcome::GrantedPermit {
            lease,
            already_held: false,
            sharing,
            holders,
            ..
        } => {
            assert_eq!(sharing, Sharing::Permits(permits));
            assert_eq!(holders.last(), Some(&lease), "the newest holder is last");
            lease
        }
        other => panic!("{who} not granted a permit: {other:?}"),
    }
}

fn tokens(t: &LeaseTable) -> Vec<u64> {
    t.holders(KEY)
        .map(|h| h.leases.iter().map(|l| l.token).collect())
        .unwrap_or_default()
}

#[test]
fn n_permits_go_to_the_first_n_claimants_each_with_its_own_token_and_the_next_is_told_who_holds() {
    let mut t = LeaseTable::default();
    let a = granted(&mut t, 1, "a", 3);
    let b = granted(&mut t, 2, "b", 3);
    let c = granted(&mut t, 3, "c", 3);
    assert_eq!(
        (a.token, b.token, c.token),
        (1, 2, 3),
        "each its grant's revision"
    );
    assert_eq!(t.lease(KEY), None, "no exclusive lease");
    assert!(t.is_held(KEY));
    assert_eq!(t.permit_holder_count(), 3);
    match t.apply(4, &from("d", 4, claim_op("d", 3))) {
        Outcome::HeldByHolders {
            key,
            sharing,
            holders,
            ..
        } => {
            assert_eq!((key.as_str(), sharing), (KEY, Sharing::Permits(3)));
            assert_eq!(holders, vec![a.clone(), b.clone(), c.clone()]);
        }
        other => panic!("a fourth was granted: {other:?}"),
    }
    assert_eq!(tokens(&t), [1, 2, 3], "the refusal changed nothing");
    // The same session claiming again keeps its token and is renewed.
    match t.apply(5, &from("b", 5, claim_op("b", 3))) {
        Outcome::GrantedPermit {
            lease,
            already_held: true,
            ..
        } => assert_eq!((lease.token, lease.basis, lease.renewals), (2, 5, 1)),
        other => panic!("b's second claim: {other:?}"),
    }
}

#[test]
fn another_n_is_refused_naming_the_keys_n_and_exclusive_and_permit_claims_block_each_other() {
    let mut t = LeaseTable::default();
    let a = granted(&mut t, 1, "a", 2);
    match t.apply(2, &from("b", 2, claim_op("b", 3))) {
        Outcome::Refused {
            refusal:
                Refusal::PermitsMismatch {
                    held,
                    asked,
                    holders,
                    ..
                },
        } => assert_eq!(
            (held, asked, holders),
            (Sharing::Permits(2), Sharing::Permits(3), vec![a.clone()])
        ),
        other => panic!("another N: {other:?}"),
    }
    let plain = Op::Claim {
        key: KEY.into(),
        holder: holder("b"),
        ttl_ms: 5_000,
    };
    match t.apply(3, &from("b", 3, plain)) {
        Outcome::HeldByHolders { holders, .. } => assert_eq!(holders, vec![a.clone()]),
        other => panic!("an exclusive claim of a key held by permits: {other:?}"),
    }
    // Once the last permit is released the key is free, for any N.
    let release = Op::Release {
        key: KEY.into(),
        token: a.token,
        final_status: None,
    };
    assert!(matches!(
        t.apply(4, &from("a", 4, release)),
        Outcome::Released { .. }
    ));
    assert!(!t.is_held(KEY) && t.holders(KEY).is_none());
    let plain = Op::Claim {
        key: KEY.into(),
        holder: holder("c"),
        ttl_ms: 5_000,
    };
    let c = match t.apply(5, &from("c", 5, plain)) {
        Outcome::Granted { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    match t.apply(6, &from("d", 6, claim_op("d", 2))) {
        Outcome::Held { lease, .. } => assert_eq!(lease, c),
        other => panic!("a permit claim of a key held exclusively: {other:?}"),
    }
}

#[test]
fn each_permit_renews_releases_and_expires_on_its_own_from_its_own_session() {
    let mut t = LeaseTable::default();
    let a = granted(&mut t, 1, "a", 2);
    let b = granted(&mut t, 2, "b", 2);
    // b's token from a's session is refused; a stale token is lost.
    let renew_b = Op::Renew {
        key: KEY.into(),
        token: b.token,
    };
    match t.apply(3, &from("a", 3, renew_b.clone())) {
        Outcome::Refused {
            refusal: Refusal::WrongSession { lease, .. },
        } => assert_eq!(*lease, b),
        other => panic!("{other:?}"),
    }
    let (out, changes) = apply(&mut t, 4, from("b", 4, renew_b));
    match out {
        Outcome::Renewed { lease } => assert_eq!((lease.token, lease.basis), (2, 4)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        changes.effects,
        [Effect::Start {
            timer: Timer::Lease,
            key: countdown_id(KEY, 2).into(),
            token: 2,
            basis: 4,
            ms: 5_000
        }],
        "the permit's own countdown restarts"
    );
    // An expiry naming b's old basis is ignored; a's current one ends a's permit alone.
    let expire = |token, basis| {
        leader(Op::Expire {
            key: KEY.into(),
            token,
            basis,
        })
    };
    assert_eq!(t.apply(5, &expire(2, 2)), Outcome::ExpireIgnored);
    let (out, changes) = apply(&mut t, 6, expire(a.token, a.basis));
    assert_eq!(out, Outcome::Expired { lease: a.clone() });
    assert_eq!(tokens(&t), [2]);
    assert_eq!(changes.endings.len(), 1, "a's session is told");
    assert_eq!(changes.endings[0].token, 1);
    assert!(changes.effects.contains(&Effect::Stop {
        timer: Timer::Lease,
        key: countdown_id(KEY, 1).into()
    }));
    // The freed permit goes to the next claimant, with a new token.
    let c = granted(&mut t, 7, "c", 2);
    assert_eq!(tokens(&t), [2, 7]);
    let stale = Op::Renew {
        key: KEY.into(),
        token: a.token,
    };
    assert!(matches!(
        t.apply(8, &from("a", 8, stale)),
        Outcome::Lost { .. }
    ));
    assert_eq!(c.token, 7);
}

#[test]
fn a_permit_holder_may_not_write_the_record_offer_the_key_or_set_a_final_status() {
    let mut t = LeaseTable::default();
    let a = granted(&mut t, 1, "a", 2);
    let update = Op::Update {
        key: KEY.into(),
        token: a.token,
        patch: RecordPatch {
            status: Some("busy".into()),
            ..RecordPatch::default()
        },
    };
    let release = Op::Release {
        key: KEY.into(),
        token: a.token,
        final_status: Some("done".into()),
    };
    let offer = Op::Offer {
        key: KEY.into(),
        token: a.token,
        to: "b".into(),
        note: HandoffNote::default(),
        offer_ttl_ms: 60_000,
    };
    for (at, op) in [(2, update), (3, release), (4, offer)] {
        match t.apply(at, &from("a", at, op)) {
            Outcome::Refused {
                refusal:
                    Refusal::NotExclusive {
                        token: 1,
                        sharing: Sharing::Permits(2),
                        ..
                    },
            } => {}
            other => panic!("a permit holder's write: {other:?}"),
        }
    }
    assert_eq!(tokens(&t), [1], "nothing changed");
    assert_eq!(
        t.case(KEY).map(|c| c.record.status.clone()),
        Some(String::new())
    );
}

#[test]
fn a_revoke_ends_every_permit_telling_each_holder_and_a_held_revoke_waits_out_the_longest() {
    let mut t = LeaseTable::default();
    granted(&mut t, 1, "a", 3);
    let long = Op::ClaimPermit {
        key: KEY.into(),
        holder: holder("b"),
        ttl_ms: 9_000,
        sharing: Sharing::Permits(3),
    };
    assert!(matches!(
        t.apply(2, &from("b", 2, long)),
        Outcome::GrantedPermit { .. }
    ));
    let revoke = Op::RevokeHeld {
        key: KEY.into(),
        reason: "runner drained".into(),
    };
    let (out, changes) = apply(&mut t, 3, from("ops", 3, revoke));
    assert!(
        matches!(out, Outcome::Revoked { previous: Some(_) }),
        "{out:?}"
    );
    assert!(!t.is_held(KEY));
    assert_eq!(t.permit_holder_count(), 0);
    let told: Vec<u64> = changes.endings.iter().map(|e| e.token).collect();
    assert_eq!(told, [1, 2], "each holder is told");
    let revoked = t.case(KEY).unwrap().history.events.iter();
    assert_eq!(
        revoked.filter(|e| e.kind == EventKind::Revoked).count(),
        2,
        "one event per permit"
    );
    let q = t.case(KEY).unwrap().quarantine.as_deref().cloned().unwrap();
    assert_eq!(q.delay_ms, 9_000, "the longest TTL of the revoked permits");
}

#[test]
fn an_exclusive_claimant_in_line_stops_new_permits_and_gets_the_key_when_the_last_is_freed() {
    let mut t = LeaseTable::default();
    let a = granted(&mut t, 1, "a", 3);
    let wait = Op::Wait {
        key: KEY.into(),
        holder: holder("w"),
        ttl_ms: 5_000,
    };
    assert!(matches!(
        t.apply(2, &from("w", 2, wait)),
        Outcome::InLine { .. }
    ));
    match t.apply(3, &from("b", 3, claim_op("b", 3))) {
        Outcome::HeldByHolders { holders, .. } => assert_eq!(holders, vec![a.clone()]),
        other => panic!("a permit granted past a waiter: {other:?}"),
    }
    let release = Op::Release {
        key: KEY.into(),
        token: a.token,
        final_status: None,
    };
    assert!(matches!(
        t.apply(4, &from("a", 4, release)),
        Outcome::Released { .. }
    ));
    let lease = t.lease(KEY).expect("the waiter holds the key");
    assert_eq!((lease.holder.name.as_str(), lease.token), ("w", 4));
}

#[test]
fn permits_are_validated_and_the_holder_limit_is_named() {
    let mut t = LeaseTable::default();
    for n in [0, 1, limits::PERMITS_MAX + 1] {
        assert!(
            matches!(
                t.apply(1, &from("a", 1, claim_op("a", n))),
                Outcome::Invalid { .. }
            ),
            "permits {n}"
        );
    }
    assert!(!t.is_held(KEY));
}

fn shared_op(who: &str) -> Op {
    Op::ClaimPermit {
        key: KEY.into(),
        holder: holder(who),
        ttl_ms: 5_000,
        sharing: Sharing::Shared,
    }
}

fn exclusive_op(who: &str) -> Op {
    Op::Claim {
        key: KEY.into(),
        holder: holder(who),
        ttl_ms: 5_000,
    }
}

/// `who` shares the key from `index`: its own lease.
fn shares(t: &mut LeaseTable, index: u64, who: &str) -> Lease {
    match t.apply(index, &from(who, index, shared_op(who))) {
        Outcome::GrantedPermit {
            lease,
            already_held: false,
            sharing: Sharing::Shared,
            ..
        } => lease,
        other => panic!("{who} not granted a share: {other:?}"),
    }
}

#[test]
fn shared_holders_share_a_key_each_with_its_own_token_and_exclude_an_exclusive_holder() {
    let mut t = LeaseTable::default();
    let tokens_of: Vec<u64> = (1..=5)
        .map(|i| shares(&mut t, i, &format!("r{i}")).token)
        .collect();
    assert_eq!(tokens_of, [1, 2, 3, 4, 5], "each its grant's revision");
    assert_eq!(t.lease(KEY), None, "no exclusive lease");
    // An exclusive claim is told every shared holder; nothing changes.
    match t.apply(6, &from("w", 6, exclusive_op("w"))) {
        Outcome::HeldByHolders {
            sharing, holders, ..
        } => assert_eq!((sharing, holders.len()), (Sharing::Shared, 5)),
        other => panic!("an exclusive claim of a shared key: {other:?}"),
    }
    // A permit claim is refused naming how the key is held; a shared claim of a key held by
    // permits likewise.
    match t.apply(7, &from("p", 7, claim_op("p", 3))) {
        Outcome::Refused {
            refusal: Refusal::PermitsMismatch { held, asked, .. },
        } => assert_eq!((held, asked), (Sharing::Shared, Sharing::Permits(3))),
        other => panic!("a permit claim of a shared key: {other:?}"),
    }
    assert_eq!(tokens(&t), [1, 2, 3, 4, 5]);
    // A shared holder may not write the record: only an exclusive holder may.
    let update = Op::Update {
        key: KEY.into(),
        token: 1,
        patch: RecordPatch {
            status: Some("revising".into()),
            ..RecordPatch::default()
        },
    };
    match t.apply(8, &from("r1", 8, update)) {
        Outcome::Refused {
            refusal:
                Refusal::NotExclusive {
                    token: 1,
                    sharing: Sharing::Shared,
                    ..
                },
        } => {}
        other => panic!("a shared holder wrote the record: {other:?}"),
    }
    // Held exclusively, the key refuses shared claims (told the holder).
    let mut t = LeaseTable::default();
    let w = match t.apply(1, &from("w", 1, exclusive_op("w"))) {
        Outcome::Granted { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    match t.apply(2, &from("r", 2, shared_op("r"))) {
        Outcome::Held { lease, .. } => assert_eq!(lease, w),
        other => panic!("a shared claim of a key held exclusively: {other:?}"),
    }
    let mut t = LeaseTable::default();
    granted(&mut t, 1, "a", 2);
    match t.apply(2, &from("r", 2, shared_op("r"))) {
        Outcome::Refused {
            refusal: Refusal::PermitsMismatch { held, asked, .. },
        } => assert_eq!((held, asked), (Sharing::Permits(2), Sharing::Shared)),
        other => panic!("a shared claim of a key held by permits: {other:?}"),
    }
}

#[test]
fn a_writer_in_line_stops_new_shared_holders_and_is_granted_when_the_last_reader_leaves() {
    let mut t = LeaseTable::default();
    let r1 = shares(&mut t, 1, "r1");
    let r2 = shares(&mut t, 2, "r2");
    let wait = Op::Wait {
        key: KEY.into(),
        holder: holder("w"),
        ttl_ms: 5_000,
    };
    assert!(matches!(
        t.apply(3, &from("w", 3, wait)),
        Outcome::InLine { .. }
    ));
    // A reader that came after the writer waits behind it.
    match t.apply(4, &from("r3", 4, shared_op("r3"))) {
        Outcome::HeldByHolders { holders, .. } => assert_eq!(holders, vec![r1.clone(), r2.clone()]),
        other => panic!("a reader granted past a writer in line: {other:?}"),
    }
    // A reader already holding renews its share (it is not a new grant).
    assert!(matches!(
        t.apply(5, &from("r1", 5, shared_op("r1"))),
        Outcome::GrantedPermit {
            already_held: true,
            ..
        }
    ));
    for (at, lease) in [(6, &r1), (7, &r2)] {
        let release = Op::Release {
            key: KEY.into(),
            token: lease.token,
            final_status: None,
        };
        let who = lease.holder.name.to_string();
        assert!(matches!(
            t.apply(at, &from(&who, at, release)),
            Outcome::Released { .. }
        ));
    }
    let lease = t.lease(KEY).expect("the writer holds the key");
    assert_eq!((lease.holder.name.as_str(), lease.token), ("w", 7));
    match t.apply(8, &from("r3", 8, shared_op("r3"))) {
        Outcome::Held { lease, .. } => assert_eq!(lease.holder.name.as_str(), "w"),
        other => panic!("a reader shared a key held by a writer: {other:?}"),
    }
}

#[test]
fn shared_holders_are_at_most_their_named_limit() {
    let mut t = LeaseTable::default();
    let max = limits::SHARED_HOLDERS_MAX as u64;
    for i in 1..=max {
        shares(&mut t, i, &format!("r{i}"));
    }
    match t.apply(max + 1, &from("late", max + 1, shared_op("late"))) {
        Outcome::HeldByHolders { holders, .. } => assert_eq!(holders.len() as u64, max),
        other => panic!("a share past the limit: {other:?}"),
    }
}

fn wait_permit(who: &str, sharing: Sharing) -> Op {
    Op::WaitPermit {
        key: KEY.into(),
        holder: holder(who),
        ttl_ms: 5_000,
        sharing,
    }
}

fn release(token: u64) -> Op {
    Op::Release {
        key: KEY.into(),
        token,
        final_status: None,
    }
}

fn in_line(t: &mut LeaseTable, index: u64, who: &str, sharing: Sharing) {
    match t.apply(index, &from(who, index, wait_permit(who, sharing))) {
        Outcome::InLine { place } => assert_eq!(place.key, KEY),
        other => panic!("{who} not put in line: {other:?}"),
    }
}

/// The holders' names, in order of token.
fn holder_names(t: &LeaseTable) -> Vec<String> {
    t.holders(KEY)
        .map(|h| h.leases.iter().map(|l| l.holder.name.to_string()).collect())
        .unwrap_or_default()
}

/// Whether the changes ask the leader for a hand-on of the key.
fn nudged(changes: &Changes) -> bool {
    changes.effects.iter().any(|e| {
        matches!(e, Effect::Start { timer: Timer::Waiter, key, ms: 0, .. }
            if **key == crate::core::line::Waiter::hand_on_id(KEY))
    })
}

#[test]
fn a_freed_permit_goes_to_the_oldest_waiter_for_one_in_the_write_that_frees_it() {
    let mut t = LeaseTable::default();
    let a = granted(&mut t, 1, "a", 2);
    let b = granted(&mut t, 2, "b", 2);
    for (at, who) in [(3, "p1"), (4, "p2"), (5, "p3")] {
        in_line(&mut t, at, who, Sharing::Permits(2));
    }
    // A direct claim does not pass the line, even when a permit frees.
    let (out, changes) = apply(&mut t, 6, from("a", 6, release(a.token)));
    assert!(matches!(out, Outcome::Released { .. }), "{out:?}");
    assert_eq!(holder_names(&t), ["b", "p1"], "p1 granted in the release");
    assert_eq!(tokens(&t), [2, 6], "its token is the release's revision");
    assert!(!nudged(&changes), "one permit freed, one granted");
    assert!(changes
        .endings
        .iter()
        .any(|e| e.token == 6 && &*e.holder.name == "p1"));
    match t.apply(7, &from("late", 7, claim_op("late", 2))) {
        Outcome::HeldByHolders { .. } => {}
        other => panic!("a claim passed the line: {other:?}"),
    }
    apply(&mut t, 8, from("b", 8, release(b.token)));
    assert_eq!(holder_names(&t), ["p1", "p2"]);
    assert_eq!(t.line(KEY).len(), 1, "p3 waits on");
    // p1's release hands its permit on to p3, the last in line.
    apply(&mut t, 9, from("p1", 9, release(6)));
    assert_eq!(holder_names(&t), ["p2", "p3"]);
    assert!(t.line(KEY).is_empty());
}

#[test]
fn readers_waiting_behind_a_writer_are_granted_one_entry_each_the_leader_nudged_for_the_next() {
    let mut t = LeaseTable::default();
    let w = match t.apply(1, &from("w", 1, exclusive_op("w"))) {
        Outcome::Granted { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    for (at, who) in [(2, "r1"), (3, "r2"), (4, "r3")] {
        in_line(&mut t, at, who, Sharing::Shared);
    }
    let wait_w2 = Op::Wait {
        key: KEY.into(),
        holder: holder("w2"),
        ttl_ms: 5_000,
    };
    assert!(matches!(
        t.apply(5, &from("w2", 5, wait_w2)),
        Outcome::InLine { .. }
    ));
    in_line(&mut t, 6, "r4", Sharing::Shared);
    let (_, changes) = apply(&mut t, 7, from("w", 7, release(w.token)));
    assert_eq!(holder_names(&t), ["r1"]);
    assert!(
        nudged(&changes),
        "r2 could be granted too: the leader is asked"
    );
    let hand_on = |basis| {
        leader(Op::HandOn {
            key: KEY.into(),
            basis,
        })
    };
    let (out, changes) = apply(&mut t, 8, hand_on(7));
    assert_eq!(out, Outcome::HandOnDone);
    assert_eq!(holder_names(&t), ["r1", "r2"]);
    assert!(nudged(&changes));
    let (_, changes) = apply(&mut t, 9, hand_on(8));
    assert_eq!(holder_names(&t), ["r1", "r2", "r3"]);
    assert_eq!(tokens(&t), [7, 8, 9], "each its own entry's revision");
    assert!(
        !nudged(&changes),
        "the writer w2 is next: it waits for the readers"
    );
    assert!(changes.effects.contains(&Effect::Stop {
        timer: Timer::Waiter,
        key: crate::core::line::Waiter::hand_on_id(KEY).into()
    }));
    // A stray nudge changes nothing.
    assert_eq!(t.apply(10, &hand_on(9)), Outcome::HandOnDone);
    assert_eq!(holder_names(&t), ["r1", "r2", "r3"]);
    // r4 came after the writer w2: it waits for w2, which waits for the readers.
    for (at, token) in [(11, 7), (12, 8), (13, 9)] {
        let who = format!("r{}", token - 6);
        apply(&mut t, at, from(&who, at, release(token)));
    }
    let lease = t.lease(KEY).expect("the writer holds the key");
    assert_eq!((lease.holder.name.as_str(), lease.token), ("w2", 13));
    assert_eq!(holder_names(&t), Vec::<String>::new());
    let (_, changes) = apply(&mut t, 14, from("w2", 14, release(13)));
    assert_eq!(holder_names(&t), ["r4"]);
    assert!(!nudged(&changes));
}

#[test]
fn a_waiter_for_another_n_is_refused_and_the_state_keeps_what_each_waiter_waits_for() {
    let mut t = LeaseTable::default();
    granted(&mut t, 1, "a", 2);
    granted(&mut t, 2, "b", 2);
    match t.apply(3, &from("x", 3, wait_permit("x", Sharing::Permits(3)))) {
        Outcome::Refused {
            refusal: Refusal::PermitsMismatch { .. },
        } => {}
        other => panic!("a wait for another N: {other:?}"),
    }
    in_line(&mut t, 4, "p", Sharing::Permits(2));
    let waiting = t.waiting_for();
    assert_eq!(
        waiting.values().copied().collect::<Vec<_>>(),
        [Sharing::Permits(2)]
    );
    let mut plain = t.clone();
    plain.set_waiting_for(&Default::default());
    assert_ne!(plain, t, "what a waiter waits for is part of the state");
    plain.set_waiting_for(&waiting);
    assert_eq!(plain, t);
}
