//! Fencing tokens, checked in linear-ish time on the harness clock: per key, the token of an
//! `ok` grant (claim or accept) belongs to one client only, a fresh grant never repeats a
//! token, and tokens increase in real-time order: if grant A returned before grant B was
//! invoked then `tA < tB`, except when B is the holder's own re-claim of A's token
//! (`already_held`). Tokens are revisions (one per write, cluster-wide), so gaps are expected and not checked.
//!
//! Why besides the WGL search: it is cheap, runs even when the search runs out of budget, and
//! names the offending grants directly.

use std::collections::HashMap;

use super::{by_key, describe, secs, Found};
use crate::history::{Call, CheckResult, Kind, Op, Reply, Verdict};

/// One `ok` grant.
struct Grant<'a> {
    op: &'a Op,
    token: u64,
    already_held: bool,
    ret: u64,
}

/// The `ok` grants among a key's operations.
fn grants<'a>(ops: &[&'a Op]) -> Vec<Grant<'a>> {
    ops.iter()
        .filter(|o| {
            o.kind == Kind::Ok && matches!(o.call, Call::Claim { .. } | Call::Accept { .. })
        })
        .filter_map(|o| match (&o.reply, o.ret_ns) {
            (
                Some(Reply::Granted {
                    token,
                    already_held,
                    ..
                }),
                Some(ret),
            ) => Some(Grant {
                op: o,
                token: *token,
                already_held: *already_held,
                ret,
            }),
            _ => None,
        })
        .collect()
}

/// Checks the tokens of every key's `ok` grants (pass baton operations only).
pub fn check(ops: &[Op]) -> CheckResult {
    let keys = by_key(ops);
    let mut found = Found::default();
    let (mut total, mut fresh) = (0, 0);
    for (key, kops) in &keys {
        let gs = grants(kops);
        total += gs.len();
        fresh += gs.iter().filter(|g| !g.already_held).count();
        // token -> the first grant that carried it, and the first fresh grant of it.
        let mut owner: HashMap<u64, &Grant> = HashMap::new();
        let mut fresh_of: HashMap<u64, &Grant> = HashMap::new();
        for b in &gs {
            let first = *owner.entry(b.token).or_insert(b);
            if first.op.client != b.op.client {
                found.add(
                    "shared token",
                    key,
                    Some(b.op.inv_ns),
                    format!(
                        "token {} granted to {} ({}) and to {} ({})",
                        b.token,
                        first.op.client,
                        describe(first.op),
                        b.op.client,
                        describe(b.op)
                    ),
                );
                continue;
            }
            if !b.already_held {
                if let Some(earlier) = fresh_of.get(&b.token) {
                    found.add(
                        "repeated token",
                        key,
                        Some(b.op.inv_ns),
                        format!(
                            "token {} granted afresh twice: {} and {}",
                            b.token,
                            describe(earlier.op),
                            describe(b.op)
                        ),
                    );
                    continue;
                }
                fresh_of.insert(b.token, b);
            }
            // The largest-token grant that returned before b was invoked, unless it is b's own
            // earlier grant of the same token being renewed by a re-claim.
            let worst = gs
                .iter()
                .filter(|a| a.ret < b.op.inv_ns && a.token >= b.token)
                .filter(|a| !(b.already_held && a.token == b.token && a.op.client == b.op.client))
                .max_by_key(|a| a.token);
            if let Some(a) = worst {
                found.add(
                    "token order",
                    key,
                    Some(b.op.inv_ns),
                    format!(
                        "token {} granted at {} after token {} had been granted (returned {}): {} \
                         then {}",
                        b.token,
                        secs(b.ret),
                        a.token,
                        secs(a.ret),
                        describe(a.op),
                        describe(b.op)
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
        "{} keys, {total} ok grants ({fresh} new tokens, {} re-claims): {}{}",
        keys.len(),
        total - fresh,
        if found.is_empty() {
            "tokens unique and increasing in real-time order"
        } else {
            "token violations"
        },
        found.suffix()
    );
    found.result("tokens", verdict, summary)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    #[test]
    fn increasing_tokens_with_gaps_pass() {
        let r = check(&[
            claim_ok("c1", 5, 0, 10),
            reclaim_ok("c1", 5, 20, 30),
            claim_ok("c2", 12, 3000, 3010),
            accept_ok("c3", 40, 3100, 3110),
            claim_ok("c4", 60, 5000, 5100),
            on(claim_ok("c5", 3, 0, 10), "fenced-append", "other-key"),
        ]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(
            r.summary
                .starts_with("2 keys, 6 ok grants (5 new tokens, 1 re-claims)"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn a_smaller_token_after_a_larger_one_fails() {
        let r = check(&[claim_ok("c1", 9, 0, 10), claim_ok("c2", 7, 3000, 3010)]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.violations.len(), 1);
        assert!(
            r.violations[0].message.starts_with("token order: token 7"),
            "{r:#?}"
        );
        assert_eq!(r.violations[0].t_ns, Some(3000 * MS));
    }

    #[test]
    fn overlapping_grants_may_come_back_out_of_order() {
        let r = check(&[claim_ok("c1", 9, 0, 100), claim_ok("c2", 7, 50, 60)]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
    }

    #[test]
    fn one_token_for_two_clients_fails() {
        let r = check(&[claim_ok("c1", 9, 0, 10), claim_ok("c2", 9, 3000, 3010)]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.violations.len(), 1, "{r:#?}");
        assert!(r.violations[0]
            .message
            .starts_with("shared token: token 9 granted to c1"));
    }

    #[test]
    fn a_token_granted_afresh_twice_fails() {
        let r = check(&[claim_ok("c1", 9, 0, 10), claim_ok("c1", 9, 3000, 3010)]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(
            r.violations[0].message.starts_with("repeated token"),
            "{r:#?}"
        );
    }

    #[test]
    fn a_reclaim_after_someone_elses_grant_fails() {
        let r = check(&[
            claim_ok("c1", 5, 0, 10),
            claim_ok("c2", 8, 3000, 3010),
            reclaim_ok("c1", 5, 3100, 3110),
        ]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.violations.len(), 1, "{r:#?}");
        assert!(r.violations[0].message.contains("after token 8"));
    }
}
