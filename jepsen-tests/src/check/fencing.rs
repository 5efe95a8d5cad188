//! Fencing: baton must never accept a write carrying a stale token. An `ok` write with token
//! `t`, invoked after an `ok` grant of a larger token `t' > t` on the same key had returned,
//! is a violation: by then the state machine had already moved on to `t'`.
//!
//! This is the property that must hold even when leases are unsafe (pauses, over-bound skew),
//! so the checker also counts the evidence that it was exercised: late writes (issued after the
//! worker's own belief ended) and refused writes. Whether each refusal was justified is the
//! WGL search's job (a refused write is legal only if the token may have been stale or an
//! offer pending).

use super::{by_key, describe, secs, Found};
use crate::history::{Call, CheckResult, Kind, Op, Reply, Verdict};

/// Checks that no stale write was accepted on any key (pass baton operations only).
pub fn check(ops: &[Op]) -> CheckResult {
    let keys = by_key(ops);
    let mut found = Found::default();
    let (mut ok_writes, mut late_ok, mut refused, mut late_refused) = (0, 0, 0, 0);
    for (key, kops) in &keys {
        // `ok` grants by return time, with the largest token granted so far.
        let mut grants = super::ok_grants(kops.iter().copied());
        grants.sort_by_key(|g| g.0);
        // (return time, largest token granted by then, that grant's return, that grant).
        let mut best: Vec<(u64, u64, u64, &Op)> = Vec::with_capacity(grants.len());
        for (ret, token, op) in grants {
            match best.last() {
                Some(&(_, t, r, o)) if t >= token => best.push((ret, t, r, o)),
                _ => best.push((ret, token, ret, op)),
            }
        }
        for w in kops.iter().copied() {
            let Call::Write { token, late, .. } = &w.call else {
                continue;
            };
            match w.kind {
                Kind::Ok => {
                    ok_writes += 1;
                    late_ok += usize::from(*late);
                }
                Kind::Fail if matches!(w.reply, Some(Reply::Refused { .. })) => {
                    refused += 1;
                    late_refused += usize::from(*late);
                    continue;
                }
                _ => continue,
            }
            // The largest token whose grant returned strictly before this write was invoked.
            let n = best.partition_point(|g| g.0 < w.inv_ns);
            if n == 0 {
                continue;
            }
            let (_, newer, ret, grant) = best[n - 1];
            if newer > *token {
                found.add(
                    "stale write accepted",
                    key,
                    Some(w.inv_ns),
                    format!(
                        "{} accepted with token {token} although token {newer} had been granted at \
                         {}: {}",
                        describe(w),
                        secs(ret),
                        describe(grant)
                    ),
                );
            }
        }
    }
    let verdict = if found.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let summary = format!(
        "{} keys, {ok_writes} ok writes ({late_ok} late but still current), {refused} refused \
         writes ({late_refused} late): {}{}",
        keys.len(),
        if found.is_empty() {
            "no stale write accepted"
        } else {
            "stale writes accepted"
        },
        found.suffix()
    );
    found.result("fencing", verdict, summary)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    #[test]
    fn current_and_refused_stale_writes_pass_and_are_counted() {
        let r = check(&[
            claim_ok("c1", 5, 0, 10),
            write_ok("c1", 5, &[e(5, 1)], 20, 30),
            claim_ok("c2", 8, 3000, 3010),
            write_refused("c1", 5, &[e(5, 1), e(5, 2)], true, 3100, 3110),
            late_write_ok("c2", 8, &[e(5, 1), e(8, 3)], 3200, 3210),
        ]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert_eq!(
            r.summary,
            "1 keys, 2 ok writes (1 late but still current), 1 refused writes (1 late): no stale \
             write accepted"
        );
    }

    #[test]
    fn an_accepted_stale_write_fails() {
        let r = check(&[
            claim_ok("c1", 5, 0, 10),
            claim_ok("c2", 8, 3000, 3010),
            late_write_ok("c1", 5, &[e(5, 1)], 3100, 3110),
        ]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.violations.len(), 1);
        let v = &r.violations[0];
        assert_eq!(v.t_ns, Some(3100 * MS));
        assert!(
            v.message.contains("token 8 had been granted at 3.010s"),
            "{}",
            v.message
        );
    }

    #[test]
    fn a_write_concurrent_with_the_newer_grant_is_not_judged_here() {
        // The grant returned at the instant the write was invoked: they overlap.
        let r = check(&[
            claim_ok("c1", 5, 0, 10),
            claim_ok("c2", 8, 3000, 3100),
            write_ok("c1", 5, &[e(5, 1)], 3100, 3110),
        ]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
    }
}
