//! Believed-held intervals: the windows in which a worker, by its own clock, believed it held
//! a key. baton documents that while clock rates differ by less than the drift margin, no two
//! clients' windows for one key overlap; this checks it on the harness clock.
//!
//! A lease `(client, token)` starts with an `ok` grant (claim or accept). Each `ok` grant,
//! re-claim or renewal X of it contributes the window `[X.ret, X.inv + ttl × (1 − margin)]`
//! (the client's safe deadline counts from when it sent the request); the lease's belief is
//! the union of those windows, cut at the invocation of a release or offer of the token (the
//! holder lets go), of a renewal that came back `Lost`, or of a fresh grant of another token
//! to the same client. Windows of different tokens on one key must not overlap.
//!
//! Overlaps fail the run when the applied skew was within the bound
//! ([`CheckParams::skew_within_bound`]); beyond it they are expected and only reported
//! (leases unsafe, fencing still safe).

use super::{by_key, describe, secs, Found};
use crate::history::{Call, CheckParams, CheckResult, Kind, Op, Reply, Verdict};

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

/// The token an `ok` reply grants, if it is a grant.
fn granted(o: &Op) -> Option<(u64, bool)> {
    match (&o.call, o.kind, &o.reply) {
        (
            Call::Claim { .. } | Call::Accept { .. },
            Kind::Ok,
            Some(Reply::Granted {
                token,
                already_held,
            }),
        ) if o.ret_ns.is_some() => Some((*token, *already_held)),
        _ => None,
    }
}

fn ttl_of(o: &Op) -> u64 {
    match o.call {
        Call::Claim { ttl_ms } | Call::Accept { ttl_ms } => ttl_ms,
        _ => 0,
    }
}

/// The beliefs of one key's leases, from its operations in invocation order.
fn beliefs<'a>(ops: &[&'a Op], margin: f64) -> Vec<Belief<'a>> {
    let mut out = Vec::new();
    for (i, g) in ops.iter().enumerate() {
        let Some((token, false)) = granted(g) else {
            continue;
        };
        let Some(g_ret) = g.ret_ns else { continue };
        let mut ttl = ttl_of(g);
        let mut windows = vec![(g_ret, deadline(g.inv_ns, ttl, margin))];
        let mut cut = u64::MAX;
        for x in ops[i + 1..].iter().filter(|x| x.client == g.client) {
            let ok = x.kind == Kind::Ok && x.ret_ns.is_some();
            match (&x.call, granted(x)) {
                (Call::Claim { ttl_ms }, Some((t, true))) if t == token => {
                    ttl = ttl.max(*ttl_ms);
                    windows.push((
                        x.ret_ns.unwrap_or(u64::MAX),
                        deadline(x.inv_ns, *ttl_ms, margin),
                    ));
                }
                (_, Some((t, _))) if t != token => cut = x.inv_ns,
                (Call::Renew { token: t }, _) if *t == token => {
                    if ok {
                        windows.push((
                            x.ret_ns.unwrap_or(u64::MAX),
                            deadline(x.inv_ns, ttl, margin),
                        ));
                    } else if x.kind == Kind::Fail && matches!(x.reply, Some(Reply::Lost { .. })) {
                        cut = x.inv_ns;
                    }
                }
                (Call::Release { token: t } | Call::Offer { token: t, .. }, _) if *t == token => {
                    cut = x.inv_ns
                }
                _ => {}
            }
            if cut != u64::MAX {
                break;
            }
        }
        let mut clipped: Vec<(u64, u64)> = windows
            .into_iter()
            .map(|(s, e)| (s, e.min(cut)))
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
    let keys = by_key(ops);
    let mut found = Found::default();
    let (mut leases, mut windows) = (0, 0);
    for (key, kops) in &keys {
        let bs = beliefs(kops, params.drift_margin);
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
    let verdict = match (found.is_empty(), params.skew_within_bound) {
        (true, _) => Verdict::Pass,
        (false, true) => Verdict::Fail,
        (false, false) => Verdict::Reported,
    };
    let summary = format!(
        "{} keys, {leases} leases believed held in {windows} windows (drift margin {}): {}{}",
        keys.len(),
        params.drift_margin,
        match verdict {
            Verdict::Pass => "no overlap",
            Verdict::Reported => "overlaps, expected: the applied skew exceeded the bound",
            _ => "overlaps within the skew bound",
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
}
