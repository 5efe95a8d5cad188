//! Believed-held intervals: the windows in which a worker, by its own clock, believed it held
//! a key. baton documents that while clock rates differ by less than the drift margin, no two
//! clients' windows for one key overlap; this checks it on the harness clock.
//!
//! A lease `(client, token)` starts with an `ok` grant (claim or accept). Each `ok` grant,
//! re-claim (`already_held`) or renewal X of it contributes the window `[X.ret, deadline(X)]`,
//! where `deadline(X)` is the client library's safe deadline as the worker recorded it
//! (`safe_deadline_ns`: the workers act on it), or, in histories without it,
//! `X.inv + ttl × (1 − margin)` (the safe deadline counts from when the client sent the
//! request). The lease's belief is the union of those windows, each cut at the first of these
//! that the client invoked after X (the holder lets go or learns it lost the key):
//!
//! - a release of the token (whatever its outcome);
//! - an offer of the token that came back `ok` or `info` (the offered key may move at any
//!   moment; a refused offer changes nothing);
//! - a renewal or release of the token that came back `Lost`;
//! - a grant of another token to the same client.
//!
//! A cut ends only the windows before it: a later re-claim or renewal of the same token
//! (after an offer lapsed or was refused, say) opens a new window, which is checked like any
//! other. One more cut is by design of the handoff: when another client's accept of an offer
//! is granted, the giver's windows opened between its latest `ok`/`info` offer of the token and
//! the accept's return end at that offer's invocation (the taker may hold the key from the
//! accept on, while the giver, who renewed or re-claimed during the pending offer, still
//! believes; the offer told it the key may go).
//!
//! A lease held through the client library's guard (`guard-holders`) renews in the background,
//! unrecorded; its worker writes the window it believed in as a `belief` line (from the grant's
//! return to the first of its release, the guard's loss and its safe deadline), and that
//! window replaces the one computed from its operations.
//!
//! A revoke does not cut a window: a plain worker hears of it only when a renewal or release
//! comes back `Lost`. With the default hold, no one may be granted the key while the revoked
//! holder still believes; `revoke --now` gives no such promise (the `revoke-canary`).
//!
//! Windows of different tokens on one key must not overlap. Overlaps fail the run when the
//! applied skew was within the bound ([`CheckParams::skew_within_bound`]); beyond it they are
//! expected and only reported (leases unsafe, fencing still safe).
//!
//! **Late safe deadlines** fail the run whatever the skew: a safe deadline recorded for an `ok`
//! grant, re-claim or renewal X must not be later than `X.inv + ttl × (1 − margin)`, give or
//! take [`DEADLINE_SLACK_NS`] (the library promises `send_time + ttl × (1 − margin)` and takes
//! its send time right after X is invoked, before its first attempt; `ttl` is the longest TTL
//! the lease was granted or re-claimed with so far). A library that counted from the reply's
//! arrival or from a retry's send, or forgot the margin, is caught here.

use std::collections::HashMap;

use super::{by_key, describe, secs, Found};
use crate::history::{
    BeliefEvent, Call, CheckParams, CheckResult, Kind, Nanos, Op, Reply, Verdict,
};

/// Slack for the safe-deadline bound. The harness records the invocation, then the library
/// takes its send time in the same poll of the same task, a few microseconds later; this
/// covers the thread being preempted between the two on a loaded machine (and rounding): a
/// 5-node membership run on 2 cores once showed 39 ms there (seed 4007; BUGS.md), so 50. A
/// library counting from the reply's arrival is still caught on every operation slower than
/// this: any retried one, any under a network delay or partition.
pub const DEADLINE_SLACK_NS: Nanos = 50_000_000;

/// One lease's believed window(s).
struct Belief<'a> {
    grant: &'a Op,
    token: u64,
    /// Disjoint, sorted `[start, end)` windows.
    windows: Vec<(u64, u64)>,
}

/// The safe deadline of a request invoked at `inv` for `ttl_ms`.
fn deadline(inv: u64, ttl_ms: u64, margin: f64) -> u64 {
    let life = ttl_ms as f64 * 1e6 * (1.0 - margin).max(0.0);
    inv.saturating_add(life as u64)
}

/// An `ok` grant (claim or accept): its token, whether already held, and its recorded safe
/// deadline.
fn granted(o: &Op) -> Option<(u64, bool, Option<Nanos>)> {
    match (&o.call, o.kind, &o.reply) {
        (
            Call::Claim { .. } | Call::Accept { .. },
            Kind::Ok,
            Some(Reply::Granted {
                token,
                already_held,
                safe_deadline_ns,
            }),
        ) if o.ret_ns.is_some() => Some((*token, *already_held, *safe_deadline_ns)),
        _ => None,
    }
}

/// An `ok` renewal: its token and recorded safe deadline.
fn renewed(o: &Op) -> Option<(u64, Option<Nanos>)> {
    match (&o.call, o.kind, &o.reply, o.ret_ns) {
        (Call::Renew { token }, Kind::Ok, Some(Reply::Renewed { safe_deadline_ns }), Some(_)) => {
            Some((*token, *safe_deadline_ns))
        }
        _ => None,
    }
}

fn ttl_of(o: &Op) -> u64 {
    match o.call {
        Call::Claim { ttl_ms } | Call::Accept { ttl_ms } => ttl_ms,
        _ => 0,
    }
}

/// A renewal or release of `token` refused as `Lost`.
fn lost(o: &Op, token: u64) -> bool {
    matches!(o.call, Call::Renew { token: t } | Call::Release { token: t } if t == token)
        && o.kind == Kind::Fail
        && matches!(o.reply, Some(Reply::Lost { .. }))
}

/// One window of a lease, before the cuts: `[start, end)`, opened by an operation invoked at
/// `inv`.
#[derive(Clone, Copy)]
struct Window {
    inv: u64,
    start: u64,
    end: u64,
}

/// Guard-held leases' windows, by (key, client, token).
type Held<'a> = HashMap<(&'a str, &'a str, u64), (Nanos, Nanos)>;

/// The beliefs of one key's leases, from its operations in invocation order (and, for
/// guard-held leases, from their belief lines).
fn beliefs<'a>(ops: &[&'a Op], margin: f64, held: &Held) -> Vec<Belief<'a>> {
    let mut out = Vec::new();
    for (i, g) in ops.iter().enumerate() {
        let Some((token, false, safe)) = granted(g) else {
            continue;
        };
        let Some(g_ret) = g.ret_ns else { continue };
        if let Some(&(from, to)) = held.get(&(g.key.as_str(), g.client.as_str(), token)) {
            out.push(Belief {
                grant: g,
                token,
                windows: if from < to {
                    vec![(from, to)]
                } else {
                    Vec::new()
                },
            });
            continue;
        }
        let mut ttl = ttl_of(g);
        let end =
            |inv: u64, ttl: u64, safe: Option<Nanos>| safe.unwrap_or(deadline(inv, ttl, margin));
        // Windows not cut yet, and windows already cut.
        let mut open = vec![Window {
            inv: g.inv_ns,
            start: g_ret,
            end: end(g.inv_ns, ttl, safe),
        }];
        let mut done: Vec<Window> = Vec::new();
        // Invocations of the client's ok/info offers of the token.
        let mut offers: Vec<u64> = Vec::new();
        let cut = |open: &mut Vec<Window>, done: &mut Vec<Window>, at: u64| {
            done.extend(open.drain(..).map(|w| Window {
                end: w.end.min(at),
                ..w
            }));
        };
        for x in ops[i + 1..].iter().filter(|x| x.client == g.client) {
            // Only ok grants and renewals use it, and they have returned.
            let x_ret = x.ret_ns.unwrap_or(u64::MAX);
            if let Some((t, already_held, safe)) = granted(x) {
                if t != token {
                    cut(&mut open, &mut done, x.inv_ns);
                } else if already_held {
                    ttl = ttl.max(ttl_of(x));
                    open.push(Window {
                        inv: x.inv_ns,
                        start: x_ret,
                        end: end(x.inv_ns, ttl_of(x), safe),
                    });
                }
                continue;
            }
            if let Some((t, safe)) = renewed(x) {
                if t == token {
                    open.push(Window {
                        inv: x.inv_ns,
                        start: x_ret,
                        end: end(x.inv_ns, ttl, safe),
                    });
                }
                continue;
            }
            match &x.call {
                Call::Release { token: t } if *t == token => cut(&mut open, &mut done, x.inv_ns),
                Call::Renew { .. } if lost(x, token) => cut(&mut open, &mut done, x.inv_ns),
                Call::Offer { token: t, .. }
                    if *t == token && matches!(x.kind, Kind::Ok | Kind::Info | Kind::Invoke) =>
                {
                    offers.push(x.inv_ns);
                    cut(&mut open, &mut done, x.inv_ns);
                }
                _ => {}
            }
        }
        done.append(&mut open);
        // Accepts by others of another token: the handoff (see the module docs).
        if !offers.is_empty() {
            for a in ops.iter().filter(|a| a.client != g.client) {
                let (Some((t, _, _)), Call::Accept { .. }) = (granted(a), &a.call) else {
                    continue;
                };
                let Some(a_ret) = a.ret_ns else { continue };
                if t == token {
                    continue;
                }
                let Some(&offer) = offers.iter().rev().find(|&&o| o < a_ret) else {
                    continue;
                };
                for w in done.iter_mut() {
                    if w.inv > offer && w.inv < a_ret {
                        w.end = w.end.min(offer);
                    }
                }
            }
        }
        let mut clipped: Vec<(u64, u64)> = done
            .into_iter()
            .map(|w| (w.start, w.end))
            .filter(|(s, e)| s < e)
            .collect();
        clipped.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in clipped {
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        out.push(Belief {
            grant: g,
            token,
            windows: merged,
        });
    }
    out
}

/// Safe deadlines later than the library promises: `(operation, recorded deadline, bound)`.
/// The bound uses the longest TTL the `(client, token)` lease was granted or re-claimed with so
/// far (for a renewal with no grant in sight, the longest TTL any grant on the key asked for).
fn late_deadlines<'a>(ops: &[&'a Op], margin: f64) -> Vec<(&'a Op, Nanos, Nanos)> {
    let key_ttl = ops
        .iter()
        .filter(|o| granted(o).is_some())
        .map(|o| ttl_of(o))
        .max();
    let mut lease_ttl: HashMap<(&str, u64), u64> = HashMap::new();
    let mut out = Vec::new();
    for &o in ops {
        let (ttl, safe) = if let Some((token, _, safe)) = granted(o) {
            let t = lease_ttl.entry((o.client.as_str(), token)).or_insert(0);
            *t = (*t).max(ttl_of(o));
            (Some(*t), safe)
        } else if let Some((token, safe)) = renewed(o) {
            let t = lease_ttl
                .get(&(o.client.as_str(), token))
                .copied()
                .or(key_ttl);
            (t, safe)
        } else {
            continue;
        };
        let (Some(ttl), Some(safe)) = (ttl, safe) else {
            continue;
        };
        let bound = deadline(o.inv_ns, ttl, margin);
        if safe > bound.saturating_add(DEADLINE_SLACK_NS) {
            out.push((o, safe, bound));
        }
    }
    out
}

/// The first overlap of two sets of disjoint windows.
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    for &(s1, e1) in a {
        for &(s2, e2) in b {
            let (s, e) = (s1.max(s2), e1.min(e2));
            if s < e && best.is_none_or(|(bs, _)| s < bs) {
                best = Some((s, e));
            }
        }
    }
    best
}

/// Checks that believed-held windows of different tokens on a key never overlap.
pub fn check(ops: &[Op], params: &CheckParams) -> CheckResult {
    check_with(ops, &[], params)
}

/// [`check`], with the believed windows of guard-held leases.
pub fn check_with(ops: &[Op], held: &[&BeliefEvent], params: &CheckParams) -> CheckResult {
    let held: Held = held
        .iter()
        .map(|b| {
            (
                (b.key.as_str(), b.client.as_str(), b.token),
                (b.from_ns, b.to_ns),
            )
        })
        .collect();
    let keys = by_key(ops);
    let mut found = Found::default();
    let (mut leases, mut windows) = (0, 0);
    for (key, kops) in &keys {
        for (o, safe, bound) in late_deadlines(kops, params.drift_margin) {
            found.add(
                "late safe deadline",
                key,
                Some(o.inv_ns),
                format!(
                    "the client library's safe deadline {} is {:.3} ms past invocation + TTL × \
                     (1 − drift margin) = {}: {}",
                    secs(safe),
                    (safe - bound) as f64 / 1e6,
                    secs(bound),
                    describe(o)
                ),
            );
        }
        let bs = beliefs(kops, params.drift_margin, &held);
        leases += bs.len();
        windows += bs.iter().map(|b| b.windows.len()).sum::<usize>();
        for (i, a) in bs.iter().enumerate() {
            for b in &bs[i + 1..] {
                if a.token == b.token {
                    continue;
                }
                if let Some((s, e)) = overlap(&a.windows, &b.windows) {
                    found.add(
                        "overlap",
                        key,
                        Some(s),
                        format!(
                            "{} believed it held token {} and {} token {} from {} to {} ({:.1} ms); \
                             grants: {} and {}",
                            a.grant.client,
                            a.token,
                            b.grant.client,
                            b.token,
                            secs(s),
                            secs(e),
                            (e - s) as f64 / 1e6,
                            describe(a.grant),
                            describe(b.grant)
                        ),
                    );
                }
            }
        }
    }
    let late = found.count("late safe deadline");
    let overlaps = found.count("overlap");
    let verdict = if late > 0 || (overlaps > 0 && params.skew_within_bound) {
        Verdict::Fail
    } else if overlaps > 0 {
        Verdict::Reported
    } else {
        Verdict::Pass
    };
    let outcome = match (overlaps > 0, params.skew_within_bound) {
        (false, _) => "no overlap",
        (true, false) => "overlaps, expected: the applied skew exceeded the bound",
        (true, true) => "overlaps within the skew bound",
    };
    let summary = format!(
        "{} keys, {leases} leases believed held in {windows} windows (drift margin {}): \
         {outcome}{}{}",
        keys.len(),
        params.drift_margin,
        if late > 0 {
            "; safe deadlines later than the library promises"
        } else {
            ""
        },
        found.suffix()
    );
    found.result("intervals", verdict, summary)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    // TTL 2000 ms, margin 5 %: a grant invoked at t is believed until t + 1900 ms.

    #[test]
    fn back_to_back_leases_pass() {
        let r = check(
            &[
                claim_ok("c1", 5, 0, 10),
                claim_ok("c2", 7, 1900, 1910),
                release_ok("c2", 7, 2000, 2010),
                claim_ok("c3", 9, 2005, 2020),
            ],
            &params(),
        );
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(r.summary.starts_with("1 keys, 3 leases"), "{}", r.summary);
    }

    #[test]
    fn overlapping_beliefs_fail_within_bound_and_are_reported_beyond() {
        let ops = [claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1800, 1850)];
        let r = check(&ops, &params());
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.violations.len(), 1);
        let v = &r.violations[0];
        assert_eq!(v.t_ns, Some(1850 * MS));
        assert!(
            v.message.contains("from 1.850s to 1.900s (50.0 ms)"),
            "{}",
            v.message
        );
        let mut beyond = params();
        beyond.skew_within_bound = false;
        let r = check(&ops, &beyond);
        assert_eq!(r.verdict, Verdict::Reported);
        assert!(r.passed());
        assert_eq!(r.violations.len(), 1);
    }

    #[test]
    fn renewals_extend_and_release_offer_and_lost_cut() {
        // Renewed at 1000: believed until 2900, so a grant returning at 2500 overlaps.
        let renewed = [
            claim_ok("c1", 5, 0, 10),
            renew_ok("c1", 5, 1000, 1010),
            claim_ok("c2", 7, 2400, 2500),
        ];
        assert_eq!(check(&renewed, &params()).verdict, Verdict::Fail);
        // Released at 1500 (invocation): no overlap.
        let released = [
            claim_ok("c1", 5, 0, 10),
            renew_ok("c1", 5, 1000, 1010),
            release_ok("c1", 5, 1500, 2600),
            claim_ok("c2", 7, 2400, 2500),
        ];
        assert_eq!(check(&released, &params()).verdict, Verdict::Pass);
        // Offered at 1500: the giver lets go; the taker's belief starts at its accept.
        let offered = [
            claim_ok("c1", 5, 0, 10),
            renew_ok("c1", 5, 1000, 1010),
            offer_ok("c1", 5, "w-c2", 1000, 1500, 1510),
            accept_ok("c2", 7, 1520, 1530),
        ];
        assert_eq!(check(&offered, &params()).verdict, Verdict::Pass);
        // A renewal that came back lost ends the belief at its invocation.
        let lost = [
            claim_ok("c1", 5, 0, 10),
            renew_lost("c1", 5, 1000, 1010),
            claim_ok("c2", 7, 1200, 1300),
        ];
        assert_eq!(check(&lost, &params()).verdict, Verdict::Pass);
    }

    #[test]
    fn a_refused_offer_does_not_end_the_belief() {
        // The offer was refused at 500, so c1 carried on and renewed at 1000: believed until
        // 2900, and c2's grant returning at 2500 overlaps.
        let r = check(
            &[
                claim_ok("c1", 5, 0, 10),
                offer_refused("c1", 5, "w-c2", 1000, 500, 510),
                renew_ok("c1", 5, 1000, 1010),
                claim_ok("c2", 7, 2400, 2500),
            ],
            &params(),
        );
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(
            r.violations[0].message.contains("from 2.500s to 2.900s"),
            "{r:#?}"
        );
    }

    #[test]
    fn after_an_offer_lapsed_a_reclaim_opens_a_new_window() {
        // The offer at 100 ends the belief there; it lapsed, and c1's re-claim at 1500 makes it
        // believe again until 3400: c2's grant returning at 3010 overlaps.
        let ops = [
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 100, 110),
            reclaim_ok("c1", 5, 1500, 1510),
            claim_ok("c2", 7, 3000, 3010),
        ];
        let r = check(&ops, &params());
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(
            r.violations[0].message.contains("from 3.010s to 3.400s"),
            "{r:#?}"
        );
        assert!(r.summary.contains("3 windows"), "{}", r.summary);
        // A renewal after the offer likewise; before the offer it is cut at the offer.
        let renewed = [
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 100, 110),
            renew_ok("c1", 5, 1500, 1510),
            claim_ok("c2", 7, 3000, 3010),
        ];
        assert_eq!(check(&renewed, &params()).verdict, Verdict::Fail);
        let cut = [
            claim_ok("c1", 5, 0, 10),
            renew_ok("c1", 5, 50, 60),
            offer_ok("c1", 5, "w-c2", 1000, 100, 110),
            claim_ok("c2", 7, 1000, 1010),
        ];
        assert_eq!(check(&cut, &params()).verdict, Verdict::Pass);
    }

    #[test]
    fn the_taker_may_overlap_a_giver_that_renewed_during_its_offer() {
        // c1 offers at 100 and re-claims at 200 (the offer still pending); c2 accepts at 300.
        // The giver's window from the re-claim ends at the offer: by design, no overlap.
        let during = [
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 100, 110),
            reclaim_ok("c1", 5, 200, 210),
            accept_ok("c2", 7, 300, 310),
        ];
        assert_eq!(check(&during, &params()).verdict, Verdict::Pass);
        // A re-claim after the accept returned is no handoff: its window is checked.
        let after = [
            claim_ok("c1", 5, 0, 10),
            offer_ok("c1", 5, "w-c2", 1000, 100, 110),
            accept_ok("c2", 7, 300, 310),
            reclaim_ok("c1", 5, 400, 410),
        ];
        assert_eq!(check(&after, &params()).verdict, Verdict::Fail);
        // Nor is an accept with no offer from the holder.
        let no_offer = [
            claim_ok("c1", 5, 0, 10),
            reclaim_ok("c1", 5, 200, 210),
            accept_ok("c2", 7, 300, 310),
        ];
        assert_eq!(check(&no_offer, &params()).verdict, Verdict::Fail);
    }

    #[test]
    fn lost_releases_and_other_grants_end_the_belief() {
        let lost = [
            claim_ok("c1", 5, 0, 10),
            release_lost_to("c1", 5, None, 1000, 1010),
            claim_ok("c2", 7, 1200, 1300),
        ];
        assert_eq!(check(&lost, &params()).verdict, Verdict::Pass);
        // A grant of another token to the same client (it let the first go).
        let other = [
            claim_ok("c1", 5, 0, 10),
            claim_ok("c1", 9, 1000, 1010),
            claim_ok("c2", 7, 1200, 1300),
        ];
        let r = check(&other, &params());
        // Token 5's belief ends at 1000; token 9's (until 2900) overlaps c2's.
        assert_eq!(r.violations.len(), 1, "{r:#?}");
        assert!(r.violations[0].message.contains("token 9"), "{r:#?}");
    }

    #[test]
    fn the_belief_ends_at_the_recorded_safe_deadline() {
        // The library's deadline is 1500 (earlier than 0 + 1900): c2 from 1700 is fine.
        let ops = [
            safe_until(claim_ok("c1", 5, 0, 10), 1500),
            claim_ok("c2", 7, 1600, 1700),
        ];
        assert_eq!(check(&ops, &params()).verdict, Verdict::Pass);
        // Without it, counted from the invocation: until 1900, an overlap.
        let ops = [claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 1600, 1700)];
        assert_eq!(check(&ops, &params()).verdict, Verdict::Fail);
        // A renewal's deadline likewise.
        let ops = [
            claim_ok("c1", 5, 0, 10),
            safe_until(renew_ok("c1", 5, 1000, 1010), 2800),
            claim_ok("c2", 7, 2790, 2795),
        ];
        let r = check(&ops, &params());
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(
            r.violations[0].message.contains("from 2.795s to 2.800s"),
            "{r:#?}"
        );
    }

    #[test]
    fn a_safe_deadline_later_than_the_library_promises_fails_whatever_the_skew() {
        // Invoked at 1000: at most 1000 + 1900 (+ the slack for the library's send).
        let mut beyond = params();
        beyond.skew_within_bound = false;
        let on_time = [safe_until(claim_ok("c1", 5, 1000, 1300), 2910)];
        assert_eq!(check(&on_time, &beyond).verdict, Verdict::Pass);
        // Counted from the reply (1300): 3200.
        let late = [safe_until(claim_ok("c1", 5, 1000, 1300), 3200)];
        let r = check(&late, &beyond);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert_eq!(r.violations.len(), 1);
        assert!(
            r.violations[0].message.starts_with(
                "late safe deadline: the client library's safe deadline 3.200s is \
                              300.000 ms past invocation + TTL × (1 − drift margin) = 2.900s"
            ),
            "{r:#?}"
        );
        assert_eq!(r.violations[0].t_ns, Some(1000 * MS));
        // Renewals and re-claims too.
        let renew = [
            claim_ok("c1", 5, 0, 10),
            safe_until(renew_ok("c1", 5, 1000, 1300), 3200),
        ];
        assert_eq!(check(&renew, &beyond).verdict, Verdict::Fail);
        let reclaim = [
            claim_ok("c1", 5, 0, 10),
            safe_until(reclaim_ok("c1", 5, 1000, 1300), 3200),
        ];
        assert_eq!(check(&reclaim, &beyond).verdict, Verdict::Fail);
    }

    #[test]
    fn a_late_renewal_leaves_a_gap() {
        // Deadline 1900; the renewal is sent at 1800 but returns at 2000: believed again from
        // 2000 to 3700. Another lease believed in [1950, 1990] falls in the gap.
        let r = check(
            &[
                claim_ok("c1", 5, 0, 10),
                renew_ok("c1", 5, 1800, 2000),
                claim_ok("c2", 7, 1900, 1950),
                release_ok("c2", 7, 1990, 2000),
            ],
            &params(),
        );
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
    }

    #[test]
    fn a_guard_held_lease_is_believed_for_the_window_its_line_gives() {
        // c1's guard renewed in the background (unrecorded) and believed until 5.0 s: c2's
        // grant at 3.0 s overlaps it, though c1's recorded grant alone ends at 1.9 s.
        let ops = [claim_ok("c1", 5, 0, 10), claim_ok("c2", 7, 2990, 3000)];
        assert_eq!(check(&ops, &params()).verdict, Verdict::Pass);
        let line = BeliefEvent {
            idx: 0,
            key: "k".into(),
            client: "c1".into(),
            token: 5,
            from_ns: 10 * MS,
            to_ns: 5000 * MS,
            how: "released".into(),
            pushed: false,
            t_ns: 5000 * MS,
        };
        let r = check_with(&ops, &[&line], &params());
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(
            r.violations[0].message.contains("from 3.000s to 4.890s"),
            "{}",
            r.violations[0].message
        );
        // A guard told of its loss at 2.5 s stopped believing then: no overlap.
        let heard = BeliefEvent {
            to_ns: 2500 * MS,
            how: "lost: revoked".into(),
            pushed: true,
            ..line
        };
        assert_eq!(
            check_with(&ops, &[&heard], &params()).verdict,
            Verdict::Pass
        );
    }
}
