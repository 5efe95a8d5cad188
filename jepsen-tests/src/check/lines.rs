//! Lines: a key's line hands the key to one waiter at a time (or each of its N permits to one
//! waiter at a time), in the order they joined. Over the `waiters` and `permit-waiters`
//! workloads' steps (`wait` lines), judged by the N the waits asked, never by what an answer
//! told:
//!
//! - **one holder at a time per key** and **tokens in time order per key** (the rule the
//!   `tasks` and `sets` checkers share, [`out_of_turn`](super::holds::out_of_turn)): a
//!   grant's window runs from its first wait's invocation (the grant may come any time after
//!   the join) to the answer that told of it; no two grants of a key carry one token;
//! - of a key of N permits, **at most N holders at once** instead (the `permits` checker's
//!   rule, [`over_n`]), its tokens unique and in time order likewise;
//! - **first in line, first granted, among live waiters for the same N**: if waiter A's join
//!   returned before waiter B's first wait was invoked, and A was certainly still in line
//!   over all of B's wait (from B's first invocation to the answer that told B of its grant),
//!   then A was granted before B (a smaller token). A is certainly in line from a wait of
//!   its that answered "in line" (its return) until that wait's invocation + `ttl / (1 +
//!   rho)` (a place lapses no sooner), and never after it asked to leave. Of a key of N
//!   permits, a permit granted to A unseen does not hold B back (B may be granted the next
//!   one beside it), so A is certainly in line, granted nothing unseen, only along chains
//!   of its answers each less than `ttl / (1 + rho)` after the previous one's invocation
//!   (a permit granted in between would have been told by the next answer): from the
//!   chain's first return to its last invocation ([`ungranted_spans`]); never past a wait
//!   that got no answer.
//!
//! - **no place or grant leaks**: the leak check after the workload stopped
//!   ([`crate::workload::line_leak_check`], lines marked `after`) was granted each key's N,
//!   to N fresh sessions, within [`LINE_LEAK_LIMIT`] of its first wait of the key: no
//!   place of a waiter that walked away or was cut off, and no grant to one, stayed; and
//!   the one more waiter it sent while they held was not granted before one of them
//!   released (one holder too many).
//!
//! Fewer than [`MIN_LINE_GRANTS`] grants from a line, of the key alone or (if any waited for
//! one) of permits → Unknown: such a run proves nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::holds::{judge_in_turn, most_at_once, out_of_order, over_n, told_twice, Hold};
use crate::history::{CheckResult, History, Nanos, Verdict, Violation, WaitEvent};
use crate::workload::LINE_LEAK_LIMIT;

/// A run must grant the key from the line at least this many times to prove anything.
pub const MIN_LINE_GRANTS: usize = 5;

/// Checks the `waiters` and `permit-waiters` steps of `history`, with the clock-rate bound
/// `rho`.
pub fn check(history: &History, rho: f64) -> CheckResult {
    let steps = history.waits();
    let waits: Vec<&WaitEvent> = steps.iter().copied().filter(|s| s.step == "wait").collect();
    let grants: Vec<&WaitEvent> = waits
        .iter()
        .copied()
        .filter(|w| w.what == "granted")
        .collect();
    // Each key's N: what its waits asked (the smallest, should they differ).
    let mut permits: BTreeMap<&str, u32> = BTreeMap::new();
    for w in &waits {
        let n = permits.entry(&w.key).or_insert(w.permits.max(1));
        *n = (*n).min(w.permits.max(1));
    }
    let mut violations = Vec::new();
    let releases: HashMap<(&str, u64), Nanos> = steps
        .iter()
        .filter(|s| s.step == "release")
        .map(|s| ((s.key.as_str(), s.token), s.inv_ns))
        .collect();
    // Keys of the key alone: one holder at a time, in turn.
    let alone = grants
        .iter()
        .filter(|g| permits[g.key.as_str()] == 1)
        .map(|g| (g.key.as_str(), *g, hold_of(g, &releases)));
    for (_, grant, why) in judge_in_turn(alone, rho, true) {
        violations.push(violation(grant, why));
    }
    // Keys of N permits: at most N at once, each token once, tokens in time order.
    let mut by_key_permits: BTreeMap<&str, Vec<&WaitEvent>> = BTreeMap::new();
    for g in grants.iter().filter(|g| permits[g.key.as_str()] > 1) {
        by_key_permits.entry(&g.key).or_default().push(g);
    }
    let mut most = Vec::new();
    for (key, key_grants) in &by_key_permits {
        let n = permits[key];
        let holds: Vec<Hold> = key_grants.iter().map(|g| hold_of(g, &releases)).collect();
        let mut found = over_n(key, &holds, n as usize, rho);
        found.extend(told_twice(key, &holds));
        found.extend(out_of_order(key, &holds));
        violations.extend(
            found
                .into_iter()
                .map(|(j, why)| violation(key_grants[j], why)),
        );
        most.push(format!("{key} {} of {n}", most_at_once(&holds, rho)));
    }
    // First in line, first granted, among live waiters for the same N.
    let mut by_key_waits: BTreeMap<&str, Vec<&WaitEvent>> = BTreeMap::new();
    for w in &waits {
        by_key_waits.entry(&w.key).or_default().push(w);
    }
    // Pairs (A, B) the rule judged, of the key alone and of permits: A certainly in line
    // ahead of B from B's first wait until the first of them was granted.
    let mut ahead = [0usize; 2];
    for (key, ws) in &by_key_waits {
        let n = permits[key];
        for b in ws.iter().filter(|b| b.what == "granted") {
            for a in ws
                .iter()
                .filter(|a| a.joined_revision > 0 && a.client != b.client && a.permits == b.permits)
            {
                let a_first = a.what == "granted" && a.token < b.token;
                let until = if a_first {
                    a.ret_ns.min(b.ret_ns)
                } else {
                    b.ret_ns
                };
                // (A told of its grant before B began to wait: not in line at once.)
                if a.join_ret_ns >= b.inv_ns
                    || until <= b.inv_ns
                    || !in_line_throughout(a, (b.inv_ns, until), n, rho)
                {
                    continue;
                }
                ahead[usize::from(n > 1)] += 1;
                if !a_first {
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
    let leak = leaks(&waits, &permits, &releases, &mut violations);
    // Grants, grants from the line and keys, of the key alone (false) and of permits (true),
    // by the workload (not its leak check).
    let tally = |of_permits: bool| {
        let kind: Vec<&&WaitEvent> = grants
            .iter()
            .filter(|g| !g.after && (permits[g.key.as_str()] > 1) == of_permits)
            .collect();
        let from_line = kind.iter().filter(|g| g.joined_revision > 0).count();
        let keys = kind.iter().map(|g| &g.key).collect::<BTreeSet<_>>().len();
        let waited = permits.values().any(|n| (*n > 1) == of_permits);
        (
            waited,
            kind.len(),
            from_line,
            keys,
            ahead[usize::from(of_permits)],
        )
    };
    let (alone, of_permits) = (tally(false), tally(true));
    let too_few = [alone, of_permits]
        .iter()
        .any(|(waited, _, from_line, _, _)| *waited && *from_line < MIN_LINE_GRANTS);
    let verdict = if !violations.is_empty() {
        Verdict::Fail
    } else if too_few || permits.is_empty() {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    let mut parts = Vec::new();
    if alone.0 || !of_permits.0 {
        parts.push(format!(
            "{} grants ({} from the line; {} pairs judged first in line) over {} keys",
            alone.1, alone.2, alone.4, alone.3
        ));
    }
    if of_permits.0 {
        parts.push(format!(
            "{} grants of permits ({} from the line; {} pairs judged first in line) over {} \
             keys (most certainly held at once: {})",
            of_permits.1,
            of_permits.2,
            of_permits.4,
            of_permits.3,
            if most.is_empty() {
                "-".to_string()
            } else {
                most.join(", ")
            }
        ));
    }
    let count = |what: &str| waits.iter().filter(|w| !w.after && w.what == what).count();
    CheckResult {
        checker: "lines".into(),
        verdict,
        summary: format!(
            "{}; {} timed out, {} refused as full, {} unknown; {}; {} violations",
            parts.join("; "),
            count("timeout"),
            count("full"),
            count("unknown"),
            leak,
            violations.len()
        ),
        violations,
    }
}

/// The leak rule: every key the leak check waited for was granted its N, to N sessions,
/// within [`LINE_LEAK_LIMIT`] of the check's first wait of it; and no wait of the check
/// invoked after N of its grants had returned was granted before one of them was released
/// (the one more waiter: its grant would make N + 1 holders; the holds rule cannot always
/// tell, a grant from a long wait being certain only from the wait's start). Says what it
/// saw.
fn leaks(
    waits: &[&WaitEvent],
    permits: &BTreeMap<&str, u32>,
    releases: &HashMap<(&str, u64), Nanos>,
    found: &mut Vec<Violation>,
) -> String {
    let mut by_key: BTreeMap<&str, Vec<&WaitEvent>> = BTreeMap::new();
    for w in waits.iter().filter(|w| w.after) {
        by_key.entry(&w.key).or_default().push(w);
    }
    if by_key.is_empty() {
        return "no leak check".into();
    }
    let limit = LINE_LEAK_LIMIT.as_nanos() as Nanos;
    let mut seen = Vec::new();
    for (key, ws) in &by_key {
        let n = permits[key];
        let start = ws.iter().map(|w| w.inv_ns).min().unwrap_or(0);
        let mut granted: Vec<&WaitEvent> = ws
            .iter()
            .copied()
            .filter(|w| w.what == "granted" && w.ret_ns <= start + limit)
            .collect();
        granted.sort_by_key(|w| w.ret_ns);
        let sessions: BTreeSet<&str> = granted.iter().map(|w| w.client.as_str()).collect();
        let released = |g: &WaitEvent| {
            releases
                .get(&(*key, g.token))
                .copied()
                .unwrap_or(Nanos::MAX)
        };
        for extra in ws.iter().filter(|w| w.what == "granted") {
            let held_before = ws
                .iter()
                .filter(|g| g.what == "granted" && g.client != extra.client)
                .filter(|g| g.ret_ns < extra.inv_ns && extra.ret_ns < released(g))
                .count();
            if held_before >= n as usize {
                found.push(violation(
                    extra,
                    format!(
                        "{key} ({n} of it) was granted to {} (token {}), who began to wait \
                         after the leak check's {} waiters were granted it and before any \
                         released: one holder too many",
                        extra.client, extra.token, held_before
                    ),
                ));
            }
        }
        if sessions.len() < n as usize {
            found.push(Violation {
                key: Some(key.to_string()),
                t_ns: Some(start + limit),
                message: format!(
                    "{key} ({n} of it): only {} fresh sessions were granted it from its line \
                     within {} s of the leak check's first wait ({} waits): a place or a \
                     grant leaked",
                    sessions.len(),
                    LINE_LEAK_LIMIT.as_secs(),
                    ws.len()
                ),
            });
            seen.push(format!("{key} {} of {n}", sessions.len()));
        } else {
            let nth = granted[n as usize - 1].ret_ns.saturating_sub(start);
            seen.push(format!("{key} {n} of {n} in {} ms", nth / 1_000_000));
        }
    }
    format!("leak check of {} keys: {}", by_key.len(), seen.join(", "))
}

/// The hold a grant `g` began: from its first wait's invocation to the answer that told of
/// it, until its release (in `releases`, by key and token) was invoked.
fn hold_of<'a>(g: &'a WaitEvent, releases: &HashMap<(&str, u64), Nanos>) -> Hold<'a> {
    Hold {
        client: &g.client,
        token: g.token,
        inv_ns: g.inv_ns,
        ret_ns: g.ret_ns,
        ttl_ms: g.ttl_ms,
        released_inv_ns: releases.get(&(g.key.as_str(), g.token)).copied(),
        renewed_inv_ns: None,
    }
}

/// Whether waiter `a` was certainly in its key's line (of `n` permits) over all of `[from,
/// to]`, and had not asked to leave by `to`. Of the key alone: the windows its "in line"
/// answers guarantee (return to invocation + `ttl / (1 + rho)`) cover it. Of a key of
/// permits: one of [`ungranted_spans`] covers it.
fn in_line_throughout(a: &WaitEvent, (from, to): (Nanos, Nanos), n: u32, rho: f64) -> bool {
    if a.left_ns.is_some_and(|left| left <= to) {
        return false;
    }
    let last = (a.ttl_ms as f64 * 1e6 / (1.0 + rho.max(0.0))) as Nanos;
    if n > 1 {
        return ungranted_spans(a, last)
            .into_iter()
            .any(|(start, end)| start <= from && to <= end);
    }
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

/// The spans over which waiter `a`, waiting for a permit, was certainly in line and granted
/// nothing but the grant it was told of, its place and any grant lasting `last` at least.
///
/// Unlike the key alone, a permit granted to `a` unseen does not hold the others back: the
/// next one may be granted beside it. So each span runs along a chain of its answered steps
/// (the join, each renewal answered "in line", then the step that ended the wait, if it
/// answered: the grant, or the leave), each answered less than `last` after the previous
/// one's invocation: a permit granted in between would still be held, so that answer would
/// have told of it (or the leave returned it) and its token judges it. A span begins at its
/// first step's return and ends at its last step's invocation (a grant's return, its
/// invocation not kept). A step answered `last` or more after the previous one's invocation
/// breaks the chain: a permit may have been granted and have expired in between, and a
/// renewal then joins the line again, at its end (a leader killed while a renewal was on its
/// way did this, `partition-kill` seed 1). A wait that ended with no answer has no span past
/// its last answer.
fn ungranted_spans(a: &WaitEvent, last: Nanos) -> Vec<(Nanos, Nanos)> {
    let mut steps: Vec<(Nanos, Nanos)> = std::iter::once((a.join_inv_ns, a.join_ret_ns))
        .chain(a.renewals.iter().copied())
        .collect();
    match (a.what.as_str(), a.left_ns) {
        ("granted", _) => steps.push((a.ret_ns, a.ret_ns)),
        ("timeout", Some(left)) => steps.push((left, a.ret_ns)),
        _ => {}
    }
    let mut spans = Vec::new();
    let mut first = 0;
    for j in 1..=steps.len() {
        let linked = j < steps.len() && steps[j].1 < steps[j - 1].0 + last;
        if !linked {
            if j - 1 > first {
                spans.push((steps[first].1, steps[j - 1].0));
            }
            first = j;
        }
    }
    spans
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
            permits: 1,
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
            after: false,
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

    /// Judges `events`: a failure, with a violation that says `says`.
    fn fails_saying(events: Vec<WaitEvent>, says: &str) {
        let result = run(events);
        assert_eq!(result.verdict, Verdict::Fail, "{result:?}");
        assert!(
            result.violations.iter().any(|v| v.message.contains(says)),
            "{result:?}"
        );
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
        fails_saying(events, "past b");
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
        fails_saying(events, "two holders");
    }

    #[test]
    fn a_run_with_few_grants_from_a_line_proves_nothing() {
        let events = in_order().into_iter().take(6).collect();
        assert_eq!(run(events).verdict, Verdict::Unknown);
    }

    /// The leak check of key p (2 permits) after [`permits_in_order`]: fresh waiters f0 and
    /// f1 wait from 10 s and are granted from the line `at` ms later (or, with `at` 0, f0 at
    /// once and f1 never: timed out at the limit), then the extra waiter x, put in line,
    /// leaves.
    fn leak_check(at: u64) -> Vec<WaitEvent> {
        let after = |e: WaitEvent| WaitEvent {
            after: true,
            ..of_permits(e)
        };
        let start = 10_000;
        let mut events = permits_in_order();
        if at == 0 {
            events.push(after(wait("f0", 0, start, start + 5, "granted", 200)));
            events.push(after(wait("f1", 50, start, start + 8_000, "timeout", 0)));
            events.push(after(release("f0", 200, start + 8_100)));
            return events;
        }
        events.push(after(wait("f0", 49, start, start + at - 5, "granted", 200)));
        events.push(after(wait("f1", 50, start, start + at, "granted", 201)));
        events.push(after(wait(
            "x",
            60,
            start + at + 10,
            start + at + 20,
            "timeout",
            0,
        )));
        events.push(after(release("f0", 200, start + at + 30)));
        events.push(after(release("f1", 201, start + at + 30)));
        events
    }

    #[test]
    fn a_place_or_a_grant_that_outlives_the_workload_is_a_leak() {
        // Both granted, the second 3 s in (a dead waiter's place lapsed first): no leak.
        let result = run(leak_check(3_000));
        assert_eq!(result.verdict, Verdict::Pass, "{result:?}");
        assert!(result.summary.contains("p 2 of 2 in 3000 ms"), "{result:?}");
        // The second never granted within the limit, or granted past it: leaked.
        fails_saying(leak_check(0), "a place or a grant leaked");
        fails_saying(leak_check(9_000), "a place or a grant leaked");
        // The extra waiter granted beside the two: one holder too many.
        let mut events = leak_check(100);
        let x = events.iter().position(|e| e.client == "x").expect("x");
        events[x].what = "granted".into();
        events[x].token = 202;
        events.push(WaitEvent {
            after: true,
            ..of_permits(release("x", 202, 10_200))
        });
        fails_saying(events, "one holder too many");
    }

    /// `event` on key p, of 2 permits.
    fn of_permits(event: WaitEvent) -> WaitEvent {
        WaitEvent {
            key: "p".into(),
            permits: 2,
            ..event
        }
    }

    /// Holders h1 and h2 of p's two permits; a..f join in that order and are granted in that
    /// order, each at a release, two holding at once.
    fn permits_in_order() -> Vec<WaitEvent> {
        let mut events = vec![
            wait("h1", 0, 0, 5, "granted", 1),
            wait("h2", 0, 0, 5, "granted", 2),
            release("h1", 1, 1_000),
            release("h2", 2, 1_100),
        ];
        let mut lanes = [1_000, 1_100];
        for (i, c) in ["a", "b", "c", "d", "e", "f"].iter().enumerate() {
            let granted = lanes[i % 2] + 10;
            let token = 100 + i as u64;
            let join = 100 + 20 * i as u64;
            events.push(wait(c, 10 + i as u64, join, granted, "granted", token));
            lanes[i % 2] = granted + 200;
            events.push(release(c, token, lanes[i % 2]));
        }
        events.into_iter().map(of_permits).collect()
    }

    #[test]
    fn permit_waiters_granted_in_order_n_at_a_time_pass() {
        let result = run(permits_in_order());
        assert_eq!(result.verdict, Verdict::Pass, "{result:?}");
        assert!(result.summary.contains("p 2 of 2"), "{}", result.summary);
        // c and d were in line at once, c ahead: a pair the rule judged.
        assert!(
            !result.summary.contains("line; 0 pairs"),
            "{}",
            result.summary
        );
        // Waiters of the key alone too: each kind has its own grants from the line.
        let mut events = in_order();
        events.extend(permits_in_order());
        assert_eq!(run(events).verdict, Verdict::Pass);
        // Too few grants of permits from the line: proves nothing of them.
        let mut events = in_order();
        events.extend(permits_in_order().into_iter().take(8));
        assert_eq!(run(events).verdict, Verdict::Unknown);
    }

    #[test]
    fn more_than_n_permit_holders_or_a_permit_waiter_passed_over_fail() {
        // z is told of a grant while b and c certainly hold the key's two permits.
        let mut events = permits_in_order();
        events.push(of_permits(wait("z", 0, 1_250, 1_260, "granted", 150)));
        fails_saying(events, "2 others certainly held it");
        // d is granted at c's turn while c, which joined first, keeps renewing its place.
        let mut events = permits_in_order();
        let (c, d) = (8, 10);
        let (c_end, d_end) = (events[c].ret_ns / MS, events[d].ret_ns / MS);
        let (c_token, d_token) = (events[c].token, events[d].token);
        events[c] = of_permits(wait("c", 12, 140, d_end, "granted", d_token));
        events[d] = of_permits(wait("d", 13, 160, c_end, "granted", c_token));
        fails_saying(events, "past c");
    }

    #[test]
    fn a_permit_waiter_with_no_answer_may_hold_a_permit_unseen() {
        // a's wait got no answer at 1 s (its places answered at 0.1, 0.4 and 0.7 s): it may
        // hold h1's permit since, and b the next one, h2's.
        let events = |b_end: u64, h1_release: u64| {
            vec![
                wait("h1", 0, 0, 5, "granted", 1),
                wait("h2", 0, 0, 5, "granted", 2),
                release("h1", 1, h1_release),
                release("h2", 2, 1_100),
                wait("a", 10, 100, 1_000, "unknown", 0),
                wait("b", 11, 120, b_end, "granted", 101),
                release("b", 101, b_end + 200),
            ]
        };
        let permits =
            |e: Vec<WaitEvent>| -> Vec<WaitEvent> { e.into_iter().map(of_permits).collect() };
        let result = run(permits(events(1_110, 1_000)));
        assert!(result.violations.is_empty(), "{result:?}");
        // Granted before a's last place was asked for: a was certainly in line, ungranted.
        let result = run(permits(events(650, 600)));
        assert!(
            result
                .violations
                .iter()
                .any(|v| v.message.contains("past a")),
            "{result:?}"
        );
        // Of the key alone, a's unseen grant would hold the key past its windows: b's grant
        // at 1.11 s passed it over.
        let mut alone = events(1_110, 1_000);
        alone.remove(3);
        alone.remove(1);
        let result = run(alone);
        assert!(
            result
                .violations
                .iter()
                .any(|v| v.message.contains("past a")),
            "{result:?}"
        );
    }

    #[test]
    fn a_permit_waiter_whose_renewal_came_late_may_have_had_a_permit_unseen() {
        // a's renewal of 0.7 s was answered 3 s later (a leader killed on its way): a permit
        // granted to a at 0.75 s may have expired before it was applied, a's place taken
        // again at the line's end. b, granted at 0.9 s, may have had the next permit.
        let mut a = wait("a", 10, 100, 4_100, "granted", 300);
        a.renewals = vec![
            (400 * MS, 405 * MS),
            (700 * MS, 3_700 * MS),
            (4_000 * MS, 4_005 * MS),
        ];
        let b = wait("b", 11, 120, 900, "granted", 200);
        let result = run(vec![of_permits(a.clone()), of_permits(b.clone())]);
        assert!(result.violations.is_empty(), "{result:?}");
        // Had a's renewals come back at once, it was certainly in line, and passed over.
        let quick = wait("a", 10, 100, 4_100, "granted", 300);
        let result = run(vec![of_permits(quick), of_permits(b.clone())]);
        assert!(
            result
                .violations
                .iter()
                .any(|v| v.message.contains("past a")),
            "{result:?}"
        );
        // Of the key alone, a's grant would hold the key until 3.65 s at least: b passed a.
        let result = run(vec![a, b]);
        assert!(
            result
                .violations
                .iter()
                .any(|v| v.message.contains("past a")),
            "{result:?}"
        );
    }
}
