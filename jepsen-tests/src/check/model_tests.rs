use super::super::testkit::*;
use super::super::wgl::{check, Outcome};
use super::*;
use crate::history::Op;
use std::time::Duration;

/// Runs the model on these operations (all on one key) with rho = 10 %.
fn lin(ops: &[Op]) -> Outcome {
    let refs: Vec<&Op> = ops.iter().collect();
    let p = prepare(&refs);
    assert!(p.malformed.is_empty(), "{:?}", p.malformed);
    check(&LeaseModel { rho: 0.1 }, &p.ops, Duration::from_secs(5))
}

fn ok(ops: &[Op]) {
    assert_eq!(lin(ops), Outcome::Linearizable, "{ops:#?}");
}

/// Not linearizable, and the search got stuck on operation `stuck` (input index).
fn bad(ops: &[Op], stuck: usize) {
    match lin(ops) {
        Outcome::NotLinearizable { stuck: s, .. } => assert_eq!(s, Some(stuck), "{ops:#?}"),
        other => panic!("expected not linearizable, got {other:?}"),
    }
}

// TTL 2000 ms, rho 0.1: a lease lasts at least 1818.18 ms from the grant's invocation.

#[test]
fn sequential_lease_life_is_linearizable() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        renew_ok("c1", 5, 100, 110),
        write_ok("c1", 5, &[e(5, 1)], 200, 210),
        read_ok("c2", Some(("c1", 5)), &[e(5, 1)], 300, 310),
        release_ok("c1", 5, 400, 410),
        read_ok("c2", None, &[e(5, 1)], 500, 510),
        claim_ok("c2", 9, 600, 610),
        reclaim_ok("c2", 9, 700, 710),
    ]);
}

#[test]
fn overlapping_grants_without_possible_expiry_are_illegal() {
    bad(
        &[claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1000, 1010)],
        1,
    );
}

#[test]
fn a_grant_after_the_earliest_expiry_is_legal() {
    // 1819 ms after the first grant's invocation: its lease may have expired.
    ok(&[claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1819, 1830)]);
    // The return counts (lenient): invoked before, returned after the earliest expiry.
    ok(&[claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1000, 1819)]);
    // One millisecond short is still illegal.
    bad(
        &[claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1000, 1817)],
        1,
    );
}

#[test]
fn an_expiry_must_precede_every_return_after_the_operation_not_just_its_own() {
    // c2's claim is long (retried until 5000), so by its own return c1's lease may have
    // expired (earliest 1818). But a read returning at 1200 already shows c2 holding: the
    // claim took effect by 1200, when c1's lease surely lived.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            claim_ok("c2", 7, 1000, 5000),
            read_ok("c3", Some(("c2", 7)), &[], 1100, 1200),
        ],
        2,
    );
    // Without the read, or with one returning after the earliest expiry, it is legal.
    ok(&[claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1000, 5000)]);
    ok(&[
        claim_ok("c1", 5, 0, 10),
        claim_ok("c2", 7, 1000, 5000),
        read_ok("c3", Some(("c2", 7)), &[], 1100, 1900),
    ]);
    // A read that may come before the claim (it shows c1) does not bound it.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        claim_ok("c2", 7, 1000, 5000),
        read_ok("c3", Some(("c1", 5)), &[], 1100, 1200),
    ]);
    // Likewise an offer's lapse (earliest 929): a long write during the offer is legal
    // only after the lapse, but a read returning at 900 already shows it.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 20, 30),
            write_ok("c1", 5, &[e(5, 1)], 100, 3000),
            read_ok("c3", Some(("c1", 5)), &[e(5, 1)], 850, 900),
        ],
        3,
    );
    ok(&[
        claim_ok("c1", 5, 0, 10),
        offer_ok("c1", 5, "w-c2", 1000, 20, 30),
        write_ok("c1", 5, &[e(5, 1)], 100, 3000),
        read_ok("c3", Some(("c1", 5)), &[e(5, 1)], 850, 950),
    ]);
}

#[test]
fn a_renewal_pushes_the_earliest_expiry() {
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            renew_ok("c1", 5, 1000, 1010),
            claim_ok("c2", 7, 2000, 2010),
        ],
        2,
    );
    ok(&[
        claim_ok("c1", 5, 0, 10),
        renew_ok("c1", 5, 1000, 1010),
        claim_ok("c2", 7, 2819, 2830),
    ]);
}

#[test]
fn tokens_must_increase_but_need_not_be_consecutive() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        release_ok("c1", 5, 20, 30),
        claim_ok("c2", 93, 40, 50),
    ]);
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            release_ok("c1", 5, 20, 30),
            claim_ok("c2", 5, 40, 50),
        ],
        2,
    );
}

#[test]
fn a_renew_ok_after_another_clients_grant_is_illegal() {
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            claim_ok("c2", 7, 2000, 2010),
            renew_ok("c1", 5, 2100, 2110),
        ],
        2,
    );
}

#[test]
fn refusals_are_legal_only_when_the_token_may_be_stale() {
    // Renew lost while surely holding (no expiry possible yet): illegal.
    bad(
        &[claim_ok("c1", 5, 0, 10), renew_lost("c1", 5, 100, 110)],
        1,
    );
    // Renew lost once the lease may have expired: legal.
    ok(&[claim_ok("c1", 5, 0, 10), renew_lost("c1", 5, 1900, 1910)]);
    // A refused write by the holder with no offer pending and no possible expiry: illegal.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            write_refused("c1", 5, &[e(5, 1)], false, 100, 110),
        ],
        1,
    );
    // A refused write with an older token: legal.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        write_refused("c2", 3, &[e(3, 1)], true, 100, 110),
    ]);
}

#[test]
fn held_refusals_show_the_holder() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        claim_held("c2", "c1", 5, 100, 110),
    ]);
    // Wrong token reported.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            claim_held("c2", "c1", 6, 100, 110),
        ],
        1,
    );
    // The server may report an expired holder late.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        claim_held("c2", "c1", 5, 5000, 5010),
    ]);
}

#[test]
fn lost_refusals_show_the_current_holder() {
    // c2 holds after c1's lease may have expired: c1's renewal is lost to c2.
    let before = [claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 2000, 2010)];
    let with = |o: Op| {
        let mut v = before.to_vec();
        v.push(o);
        v
    };
    ok(&with(renew_lost_to("c1", 5, Some(("c2", 7)), 2100, 2110)));
    ok(&with(release_lost_to("c1", 5, Some(("c2", 7)), 2100, 2110)));
    // A free key while c2's lease surely lives.
    bad(&with(renew_lost_to("c1", 5, None, 2100, 2110)), 2);
    bad(&with(release_lost_to("c1", 5, None, 2100, 2110)), 2);
    // A holder nobody was granted, or the wrong token.
    bad(
        &with(renew_lost_to("c1", 5, Some(("c9", 7)), 2100, 2110)),
        2,
    );
    bad(
        &with(renew_lost_to("c1", 5, Some(("c2", 8)), 2100, 2110)),
        2,
    );
    // Free once c2's lease may have expired (2000 + 1818).
    ok(&with(renew_lost_to("c1", 5, None, 3900, 3910)));
    // The server may report an expired holder late.
    ok(&with(renew_lost_to("c1", 5, Some(("c2", 7)), 9000, 9010)));
    // But not one that released.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            release_ok("c1", 5, 20, 30),
            claim_ok("c2", 7, 40, 50),
            release_ok("c2", 7, 60, 70),
            release_lost_to("c1", 5, Some(("c2", 7)), 80, 90),
        ],
        4,
    );
    // Nor the refused token itself as the current one.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            renew_lost_to("c1", 5, Some(("c1", 5)), 3000, 3010),
        ],
        1,
    );
    // A lost reply reveals an info claim's token, which then stays pinned.
    let revealed = [
        claim_ok("c1", 5, 0, 10),
        release_ok("c1", 5, 20, 30),
        claim_info("c2", 40),
        renew_lost_to("c1", 5, Some(("c2", 17)), 100, 110),
    ];
    ok(&revealed);
    let mut pinned = revealed.to_vec();
    pinned.push(read_ok("c3", Some(("c2", 18)), &[], 200, 210));
    bad(&pinned, 4);
}

#[test]
fn corrupt_reads_are_reported_not_dropped() {
    let ops = [
        claim_ok("c1", 5, 0, 10),
        read_corrupt("c2", "5:1 garbage", 20, 30),
        write_ok("c1", 5, &[e(5, 1)], 40, 50),
    ];
    let refs: Vec<&Op> = ops.iter().collect();
    let p = prepare(&refs);
    assert_eq!(p.corrupt, vec![1]);
    assert!(p.malformed.is_empty());
    // The rest of the key still goes to the search.
    assert_eq!(p.origin, vec![0, 2]);
    assert_eq!(p.dropped, 0);
}

#[test]
fn an_info_claims_token_is_revealed_by_a_later_read() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        release_ok("c1", 5, 20, 30),
        claim_info("c2", 40),
        read_ok("c3", Some(("c2", 17)), &[], 100, 110),
        read_ok("c3", Some(("c2", 17)), &[], 200, 210),
    ]);
    // Once revealed it is pinned: a later read with another token is illegal.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            release_ok("c1", 5, 20, 30),
            claim_info("c2", 40),
            read_ok("c3", Some(("c2", 17)), &[], 100, 110),
            read_ok("c3", Some(("c2", 18)), &[], 200, 210),
        ],
        4,
    );
    // And it cannot be at or below the last known token.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            release_ok("c1", 5, 20, 30),
            claim_info("c2", 40),
            read_ok("c3", Some(("c2", 5)), &[], 100, 110),
        ],
        3,
    );
}

#[test]
fn an_info_claim_may_never_happen_or_happen_late() {
    ok(&[
        claim_info("c2", 0),
        claim_ok("c1", 5, 10, 20),
        release_ok("c1", 5, 30, 40),
        read_ok("c3", None, &[], 50, 60),
        read_ok("c3", Some(("c2", 8)), &[], 70, 80),
    ]);
    // A grant after an unknown-token grant needs a larger token than the lower bound.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        release_ok("c1", 5, 20, 30),
        claim_info("c2", 40),
        claim_ok("c3", 7, 5000, 5010),
    ]);
}

#[test]
fn a_read_showing_a_holder_nobody_was_granted_is_illegal() {
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            read_ok("c3", Some(("c9", 5)), &[], 100, 110),
        ],
        1,
    );
    // Nor a list nobody wrote.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            read_ok("c3", Some(("c1", 5)), &[e(5, 1)], 100, 110),
        ],
        1,
    );
}

#[test]
fn a_pending_offer_freezes_the_record() {
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 20, 30),
            write_ok("c1", 5, &[e(5, 1)], 40, 50),
        ],
        2,
    );
    // A refused write during the offer is legal (frozen).
    ok(&[
        claim_ok("c1", 5, 0, 10),
        offer_ok("c1", 5, "w-c2", 1000, 20, 30),
        write_refused("c1", 5, &[e(5, 1)], false, 40, 50),
    ]);
}

#[test]
fn an_offer_lapses_after_its_ttl() {
    // Offer TTL 1000 ms: lapses no earlier than 20 + 909 ms. A write at 960 may follow a
    // lapse; one returning at 900 may not.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        offer_ok("c1", 5, "w-c2", 1000, 20, 30),
        write_ok("c1", 5, &[e(5, 1)], 940, 960),
    ]);
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 20, 30),
            write_ok("c1", 5, &[e(5, 1)], 880, 900),
        ],
        2,
    );
    // After a lapse the addressee's accept is refused (legal), and before it accepted.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        offer_ok("c1", 5, "w-c2", 1000, 20, 30),
        accept_refused("c2", 1500, 1510),
    ]);
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 20, 30),
            accept_refused("c2", 100, 110),
        ],
        2,
    );
}

#[test]
fn an_accepted_offer_hands_the_key_over() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        offer_ok("c1", 5, "w-c2", 1000, 20, 30),
        accept_ok("c2", 8, 40, 50),
        write_ok("c2", 8, &[e(8, 1)], 60, 70),
        write_refused("c1", 5, &[e(5, 2)], false, 80, 90),
        read_ok("c3", Some(("c2", 8)), &[e(8, 1)], 100, 110),
    ]);
    // Only the addressee can accept.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 20, 30),
            accept_ok("c3", 8, 40, 50),
        ],
        2,
    );
    // The old token is dead after the handoff.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 20, 30),
            accept_ok("c2", 8, 40, 50),
            write_ok("c1", 5, &[e(5, 1)], 60, 70),
        ],
        3,
    );
}

#[test]
fn offers_are_addressed_to_worker_names_not_processes() {
    // The addressee's worker lost a reply and continues as a new process (client c5)
    // under the same name: it can accept.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        offer_ok("c1", 5, "w2", 1000, 20, 30),
        named(accept_ok("c5", 8, 40, 50), "w2"),
        read_ok("c3", Some(("c5", 8)), &[], 60, 70),
    ]);
}

#[test]
fn an_offer_to_oneself_is_refused() {
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c1", 1000, 20, 30),
        ],
        1,
    );
}

#[test]
fn a_reclaim_keeps_the_token_and_the_longer_ttl() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        reclaim_ok("c1", 5, 1000, 1010),
        read_ok("c2", Some(("c1", 5)), &[], 2500, 2510),
    ]);
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            reclaim_ok("c1", 5, 1000, 1010),
            claim_ok("c2", 9, 2500, 2510),
        ],
        2,
    );
    // A reclaim by a client that does not hold the key.
    bad(&[claim_ok("c1", 5, 0, 10), reclaim_ok("c2", 5, 20, 30)], 1);
}

#[test]
fn concurrent_claims_are_ordered_by_the_search() {
    // Two overlapping claims: c2 refused seeing c1, c1 granted: legal in that order.
    ok(&[claim_ok("c1", 5, 0, 100), claim_held("c2", "c1", 5, 10, 90)]);
}

#[test]
fn malformed_ok_replies_are_reported() {
    let ops = [op(
        "c1",
        Call::Renew { token: 1 },
        Kind::Ok,
        Some(Reply::Offered),
        0,
        10,
    )];
    let refs: Vec<&Op> = ops.iter().collect();
    let p = prepare(&refs);
    assert_eq!(p.malformed.len(), 1);
    assert!(p.ops.is_empty());
}

#[test]
fn a_revoke_holds_the_key_back_for_the_leases_ttl() {
    // Revoked at 500: free at once, but no claim may be granted before 500 + 1818.
    let revoked = [
        claim_ok("c1", 5, 0, 10),
        revoke_ok("op", false, Some(5), 500, 510),
        read_ok("c2", None, &[], 600, 610),
        renew_lost_to("c1", 5, None, 700, 710),
    ];
    ok(&revoked);
    let mut early = revoked.to_vec();
    early.push(claim_ok("c2", 9, 1000, 1010));
    bad(&early, 4);
    // The same claim after the hold may have ended is legal.
    let mut late = revoked.to_vec();
    late.push(claim_ok("c2", 9, 2319, 2330));
    ok(&late);
    // The revoked holder itself is held back too.
    let mut own = revoked.to_vec();
    own.push(claim_ok("c1", 9, 1000, 1010));
    bad(&own, 4);
}

#[test]
fn a_revoke_now_frees_the_key_at_once() {
    ok(&[
        claim_ok("c1", 5, 0, 10),
        revoke_ok("op", true, Some(5), 500, 510),
        claim_ok("c2", 9, 600, 610),
    ]);
}

#[test]
fn a_revoke_must_name_the_lease_the_key_has() {
    // The token revoked must be the holder's; a free key revokes nothing.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            revoke_ok("op", true, Some(4), 500, 510),
        ],
        1,
    );
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            revoke_ok("op", true, None, 500, 510),
        ],
        1,
    );
    ok(&[
        claim_ok("c1", 5, 0, 10),
        release_ok("c1", 5, 100, 110),
        revoke_ok("op", false, None, 500, 510),
        claim_ok("c2", 9, 600, 610),
    ]);
}

#[test]
fn an_unanswered_revoke_may_hold_the_key_or_never_happen() {
    // Either it took effect (the key read free) or not (still held): both are legal.
    ok(&[
        claim_ok("c1", 5, 0, 10),
        revoke_info("op", false, 500),
        read_ok("c2", None, &[], 600, 610),
    ]);
    ok(&[
        claim_ok("c1", 5, 0, 10),
        revoke_info("op", false, 500),
        read_ok("c2", Some(("c1", 5)), &[], 600, 610),
    ]);
    // Took effect, and then a claim within its hold: illegal.
    bad(
        &[
            claim_ok("c1", 5, 0, 10),
            revoke_info("op", false, 500),
            read_ok("c2", None, &[], 600, 610),
            claim_ok("c2", 9, 1000, 1010),
        ],
        3,
    );
}
