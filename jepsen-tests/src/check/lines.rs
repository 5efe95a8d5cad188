//! Lines: a key's line hands the key to one waiter at a time, in the order they joined. Over
//! the `waiters` workload's steps (`wait` lines):
//!
//! - **one holder at a time per key** and **tokens in time order per key** (the rule the
//!   `tasks` and `sets` checkers share, [`out_of_turn`]): a grant's window runs from its
//!   first wait's invocation (the grant may come any time after the join) to the answer that
//!   told of it; no two grants of a key carry one token;
//! - **first in line, first granted, among live waiters**: if waiter A's join returned
//!   before waiter B's first wait was invoked, and A was certainly still in line over all of
//!   B's wait (from B's first invocation to the answer that told B of its grant), then A was
//!   granted the key before B (a smaller token). A is certainly in line from a wait of its
//!   that answered "in line" (its return) until that wait's invocation + `ttl / (1 + rho)`
//!   (a place lapses no sooner), and never after it asked to leave.
//!
//! Fewer than [`MIN_LINE_GRANTS`] grants from a line → Unknown: such a run proves nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::holds::{judge_in_turn, Hold};
use crate::history::{CheckResult, History, Nanos, Verdict, Violation, WaitEvent};

/// A run must grant the key from the line at least this many times to prove anything.
pub const MIN_LINE_GRANTS: usize = 5;

/// Checks the `waiters` steps of `history`, with the clock-rate bound `rho`.
pub fn check(history: &History, rho: f64) -> CheckResult {
    let steps = history.waits();
    let waits: Vec<&WaitEvent> = steps.iter().copied().filter(|s| s.step == "wait").collect();
    let grants: Vec<&WaitEvent> = waits
        .iter()
        .copied()
        .filter(|w| w.what == "granted")
        .collect();
    let mut violations = Vec::new();
    let releases: HashMap<(&str, u64), Nanos> = steps
        .iter()
        .filter(|s| s.step == "release")
        .map(|s| ((s.key.as_str(), s.token), s.inv_ns))
        .collect();
    let holds = grants.iter().map(|g| {
        let hold = Hold {
            client: &g.client,
            token: g.token,
            inv_ns: g.inv_ns,
            ret_ns: g.ret_ns,
            ttl_ms: g.ttl_ms,
            released_inv_ns: releases.get(&(g.key.as_str(), g.token)).copied(),
            renewed_inv_ns: None,
        };
        (g.key.as_str(), *g, hold)
    });
    for (_, grant, why) in judge_in_turn(holds, rho, true) {
        violations.push(violation(grant, why));
    }
    // First in line, first granted, among live waiters.
    let mut by_key_waits: BTreeMap<&str, Vec<&WaitEvent>> = BTreeMap::new();
    for w in &waits {
        by_key_waits.entry(&w.key).or_default().push(w);
    }
    for (key, ws) in &by_key_waits {
        for b in ws.iter().filter(|b| b.what == "granted") {
            for a in ws
                .iter()
                .filter(|a| a.joined_revision > 0 && a.client != b.client)
            {
                if a.join_ret_ns >= b.inv_ns || (a.what == "granted" && a.token < b.token) {
                    continue;
                }
                if in_line_throughout(a, b.inv_ns, b.ret_ns, rho) {
                    violations.push(violation(
                        b,
                        format!(
                            "{key} was granted to {} (token {}) past {}, in line ahead of it \
                             since revision {} and live throughout ({})",
                            b.client,
                            b.token,
                            a.client,
                            a.joined_revision,
                            match a.what.as_str() {
                                "granted" => format!("granted later, token {}", a.token),
                                other => format!("its wait ended {other}"),
                            }
                        ),
                    ));
                }
            }
        }
    }
    let from_line = grants.iter().filter(|g| g.joined_revision > 0).count();
    let verdict = if !violations.is_empty() {
        Verdict::Fail
    } else if from_line < MIN_LINE_GRANTS {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    let count = |what: &str| waits.iter().filter(|w| w.what == what).count();
    CheckResult {
        checker: "lines".into(),
        verdict,
        summary: format!(
            "{} grants ({} from the line) over {} keys, {} timed out, {} refused as full, {} \
             unknown; {} violations",
            grants.len(),
            from_line,
            grants.iter().map(|g| &g.key).collect::<BTreeSet<_>>().len(),
            count("timeout"),
            count("full"),
            count("unknown"),
            violations.len()
        ),
        violations,
    }
}

/// Whether waiter `a` was certainly in its key's line over all of `[from, to]`: the windows
/// its "in line" answers guarantee (return to invocation + `ttl / (1 + rho)`) cover it, and
/// it had not asked to leave by `to`.
fn in_line_throughout(a: &WaitEvent, from: Nanos, to: Nanos, rho: f64) -> bool {
    if a.left_ns.is_some_and(|left| left <= to) {
        return false;
    }
    let last = (a.ttl_ms as f64 * 1e6 / (1.0 + rho.max(0.0))) as Nanos;
    let mut windows: Vec<(Nanos, Nanos)> = std::iter::once((a.join_inv_ns, a.join_ret_ns))
        .chain(a.renewals.iter().copied())
        .map(|(inv, ret)| (ret, inv + last))
        .filter(|(start, end)| start < end)
        .collect();
    windows.sort();
    let mut covered_to = from;
    for (start, end) in windows {
        if start > covered_to {
            break;
        }
        covered_to = covered_to.max(end);
    }
    covered_to >= to
}

fn violation(w: &WaitEvent, message: String) -> Violation {
    Violation {
        key: Some(w.key.clone()),
        t_ns: Some(w.ret_ns),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Line;

    const MS: Nanos = 1_000_000;

    /// A wait by `client` on key `k` joined at `join` ms (answered 5 ms later), renewed
    /// every 300 ms, ending at `end` ms as `what` (with `token` if granted).
    fn wait(client: &str, joined: u64, join: u64, end: u64, what: &str, token: u64) -> WaitEvent {
        WaitEvent {
            idx: 0,
            process: 0,
            client: client.into(),
            step: "wait".into(),
            what: what.into(),
            key: "k".into(),
            token,
            joined_revision: joined,
            join_inv_ns: join * MS,
            join_ret_ns: (join + 5) * MS,
            renewals: (1..)
                .map(|i| join + 300 * i)
                .take_while(|t| *t + 5 < end)
                .map(|t| (t * MS, (t + 5) * MS))
                .collect(),
            left_ns: (what == "timeout").then_some((end - 5) * MS),
            ttl_ms: 3000,
            inv_ns: join * MS,
            ret_ns: end * MS,
            t_ns: end * MS,
        }
    }

    fn release(client: &str, token: u64, at: u64) -> WaitEvent {
        WaitEvent {
            step: "release".into(),
            what: "released".into(),
            renewals: Vec::new(),
            inv_ns: at * MS,
            ret_ns: (at + 5) * MS,
            ..wait(client, 0, at, at + 5, "released", token)
        }
    }

    fn run(events: Vec<WaitEvent>) -> CheckResult {
        let history = History {
            lines: events.into_iter().map(Line::Wait).collect(),
        };
        check(&history, 0.05)
    }

    /// Holder h; a, b, c, d, e join in that order and are granted in that order, each at
    /// the previous one's release.
    fn in_order() -> Vec<WaitEvent> {
        let mut events = vec![wait("h", 0, 0, 5, "granted", 1)];
        let mut release_at = 1_000;
        let mut token = 1;
        events.push(release("h", token, release_at));
        for (i, c) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            let joined = 10 + i as u64;
            let granted = release_at + 10;
            token = 100 + i as u64;
            events.push(wait(
                c,
                joined,
                100 + 20 * i as u64,
                granted,
                "granted",
                token,
            ));
            release_at = granted + 200;
            events.push(release(c, token, release_at));
        }
        events
    }

    #[test]
    fn waiters_granted_in_the_order_they_joined_pass() {
        let result = run(in_order());
        assert_eq!(result.verdict, Verdict::Pass, "{result:?}");
    }

    #[test]
    fn a_waiter_passed_over_while_it_was_certainly_in_line_fails() {
        let mut events = in_order();
        // c is granted at b's turn while b, which joined first, keeps renewing its place,
        // and b only at c's.
        let (b, c) = (4, 6);
        let (b_end, c_end) = (events[b].ret_ns / MS, events[c].ret_ns / MS);
        let (b_token, c_token) = (events[b].token, events[c].token);
        events[b] = wait("b", 11, 120, c_end, "granted", c_token);
        events[c] = wait("c", 12, 140, b_end, "granted", b_token);
        let result = run(events);
        assert_eq!(result.verdict, Verdict::Fail, "{result:?}");
        assert!(
            result
                .violations
                .iter()
                .any(|v| v.message.contains("past b")),
            "{result:?}"
        );
    }

    #[test]
    fn a_waiter_that_left_or_lapsed_may_be_passed_over() {
        // b gave up (left the line at 1.395 s) before c was granted (1.43 s): not passed over.
        let mut events = in_order();
        events[4] = wait("b", 11, 120, 1_400, "timeout", 0);
        events.remove(5);
        let result = run(events);
        // (4 grants from the line: too few to prove anything, and nothing wrong.)
        assert_eq!(result.verdict, Verdict::Unknown, "{result:?}");
        assert!(result.violations.is_empty(), "{result:?}");
        // a's first wait got no answer (its process died): never known in line, passed over.
        let mut events = in_order();
        events[2].what = "unknown".into();
        events[2].token = 0;
        events[2].joined_revision = 0;
        events[2].renewals.clear();
        events.remove(3);
        let result = run(events);
        assert_eq!(result.verdict, Verdict::Unknown, "{result:?}");
        assert!(result.violations.is_empty(), "{result:?}");
    }

    #[test]
    fn two_holders_at_once_or_one_token_twice_fail() {
        let mut events = in_order();
        // d is told of its grant while c certainly holds the key (c's release comes later).
        events.push(wait("z", 0, 1_250, 1_260, "granted", 150));
        let result = run(events);
        assert_eq!(result.verdict, Verdict::Fail, "{result:?}");
        let mut events = in_order();
        events.push(wait("y", 0, 5_000, 5_010, "granted", 104));
        let result = run(events);
        assert!(
            result
                .violations
                .iter()
                .any(|v| v.message.contains("two holders")),
            "{result:?}"
        );
    }

    #[test]
    fn a_run_with_few_grants_from_a_line_proves_nothing() {
        let events = in_order().into_iter().take(6).collect();
        assert_eq!(run(events).verdict, Verdict::Unknown);
    }
}
