//! Sets: `claim-set` grants a set of keys all or none, each key to one holder at a time.
//! Over the `set-takers` workload's steps (`set` lines):
//!
//! - **whole or nothing**: a granted claim-set carries exactly one token per key asked, all
//!   equal (one log entry granted them all);
//! - **one holder at a time per key**: a grant of a key (from any set) is never decided
//!   wholly inside another grant's certain hold of that key: from the other grant's return
//!   until the first of its release of that key's invocation (whatever the release
//!   answered: it may have applied) and `inv + ttl / (1 + rho)` (its lease can end no sooner:
//!   expiry is never early), nor do two grants' certain holds of a key overlap
//!   (`holds::out_of_turn`); nor do two granted claims carry one key with one token (one
//!   entry granting a key twice);
//! - **tokens in time order per key**: of two grants of a key, the one that returned before
//!   the other was invoked has the smaller token;
//! - **a blocker is a real holder**: every (key, holder, token) a `blocked` answer names was
//!   granted to that client with that token by a granted claim-set, or that client has an
//!   `unknown` claim-set of that key invoked before the blocked answer returned. A refused set
//!   that still took a key (a partial grant) shows here: a blocker nobody was granted.
//!
//! Fewer than [`MIN_GRANTS`] granted claims → Unknown: such a run proves nothing.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::holds::{judge_in_turn, Hold};
use crate::history::{CheckResult, History, SetEvent, Verdict, Violation};

/// A run must grant at least this many sets to prove anything.
pub const MIN_GRANTS: usize = 5;

/// One key's grant out of a granted claim-set.
struct KeyGrant<'a> {
    set: &'a SetEvent,
    token: u64,
}

/// Checks the `set-takers` steps of `history`, with the clock-rate bound `rho`.
pub fn check(history: &History, rho: f64) -> CheckResult {
    let steps = history.sets();
    let claims = |what: &str| -> Vec<&SetEvent> {
        steps
            .iter()
            .copied()
            .filter(|s| s.step == "claim-set" && s.what == what)
            .collect()
    };
    let (grants, blocked, unknown) = (claims("granted"), claims("blocked"), claims("unknown"));
    let mut violations = Vec::new();

    // Whole or nothing.
    for g in &grants {
        let whole = g.tokens.len() == g.keys.len() && g.tokens.windows(2).all(|w| w[0] == w[1]);
        if !whole {
            violations.push(violation(
                g,
                g.keys.first().cloned(),
                format!(
                    "{} was granted {:?} with tokens {:?}: not one token per key, all equal",
                    g.client, g.keys, g.tokens
                ),
            ));
        }
    }

    // One holder at a time, and tokens in time order, per key.
    let mut by_key: BTreeMap<&str, Vec<KeyGrant>> = BTreeMap::new();
    for g in &grants {
        for (key, token) in g.keys.iter().zip(&g.tokens) {
            by_key.entry(key).or_default().push(KeyGrant {
                set: g,
                token: *token,
            });
        }
    }
    let releases: HashMap<(&str, u64), &SetEvent> = steps
        .iter()
        .copied()
        .filter(|s| s.step == "release")
        .filter_map(|s| Some(((s.keys.first()?.as_str(), *s.tokens.first()?), s)))
        .collect();
    let holds = by_key.iter().flat_map(|(key, grants)| {
        grants.iter().map(|g| {
            let hold = Hold {
                client: &g.set.client,
                token: g.token,
                inv_ns: g.set.inv_ns,
                ret_ns: g.set.ret_ns,
                ttl_ms: g.set.ttl_ms,
                released_inv_ns: releases.get(&(*key, g.token)).map(|r| r.inv_ns),
                renewed_inv_ns: None,
            };
            (*key, g.set, hold)
        })
    });
    for (key, set, why) in judge_in_turn(holds, rho, true) {
        violations.push(violation(set, Some(key.to_string()), why));
    }

    // Every blocker named is a real holder.
    let granted: HashSet<(&str, &str, u64)> = by_key
        .iter()
        .flat_map(|(key, gs)| gs.iter().map(|g| (*key, g.set.client.as_str(), g.token)))
        .collect();
    let mut named = 0;
    for b in &blocked {
        for (key, holder, token) in &b.blocked {
            named += 1;
            if granted.contains(&(key.as_str(), holder.as_str(), *token)) {
                continue;
            }
            let maybe = unknown
                .iter()
                .any(|u| u.client == *holder && u.keys.contains(key) && u.inv_ns < b.ret_ns);
            if !maybe {
                violations.push(violation(
                    b,
                    Some(key.clone()),
                    format!(
                        "{}'s claim of {:?} was blocked by {holder} holding {key} (token \
                         {token}), which no claim-set was granted: a partial grant?",
                        b.client, b.keys
                    ),
                ));
            }
        }
    }

    let released = steps
        .iter()
        .filter(|s| s.step == "release" && s.what == "released")
        .count();
    let verdict = if !violations.is_empty() {
        Verdict::Fail
    } else if grants.len() < MIN_GRANTS {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    CheckResult {
        checker: "sets".into(),
        verdict,
        summary: format!(
            "{} claim-set grants ({} key grants over {} keys), {} blocked naming {} holders, \
             {} unknown, {} keys released; {} violations",
            grants.len(),
            by_key.values().map(Vec::len).sum::<usize>(),
            by_key.len(),
            blocked.len(),
            named,
            unknown.len(),
            released,
            violations.len()
        ),
        violations,
    }
}

fn violation(s: &SetEvent, key: Option<String>, message: String) -> Violation {
    Violation {
        key,
        t_ns: Some(s.ret_ns),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Line, Nanos};

    const MS: Nanos = 1_000_000;

    fn step(
        client: &str,
        step: &str,
        what: &str,
        keys: &[&str],
        tokens: &[u64],
        inv: u64,
        ret: u64,
    ) -> SetEvent {
        SetEvent {
            idx: 0,
            process: 0,
            client: client.into(),
            step: step.into(),
            what: what.into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            tokens: tokens.to_vec(),
            blocked: Vec::new(),
            ttl_ms: 3000,
            inv_ns: inv * MS,
            ret_ns: ret * MS,
            t_ns: ret * MS,
        }
    }

    fn grant(client: &str, keys: &[&str], token: u64, inv: u64, ret: u64) -> Line {
        let tokens = vec![token; keys.len()];
        Line::Set(step(
            client,
            "claim-set",
            "granted",
            keys,
            &tokens,
            inv,
            ret,
        ))
    }

    fn release(client: &str, key: &str, token: u64, inv: u64, ret: u64) -> Line {
        Line::Set(step(
            client,
            "release",
            "released",
            &[key],
            &[token],
            inv,
            ret,
        ))
    }

    fn blocked(client: &str, keys: &[&str], by: &[(&str, &str, u64)], inv: u64, ret: u64) -> Line {
        Line::Set(SetEvent {
            blocked: by
                .iter()
                .map(|(k, h, t)| (k.to_string(), h.to_string(), *t))
                .collect(),
            ..step(client, "claim-set", "blocked", keys, &[], inv, ret)
        })
    }

    fn history(lines: Vec<Line>) -> History {
        History { lines }
    }

    /// Five sets over overlapping keys, each granted then released key by key in turn, and
    /// one claim blocked by a holder in the middle of it: a pass.
    fn clean() -> Vec<Line> {
        let mut lines = Vec::new();
        for i in 0..5u64 {
            let (k1, k2) = (format!("ts/0/{i}"), format!("ts/0/{}", i + 1));
            let (t, at) = (10 + i, i * 100);
            lines.push(grant("a", &[&k1, &k2], t, at, at + 5));
            lines.push(release("a", &k1, t, at + 50, at + 55));
            lines.push(release("a", &k2, t, at + 56, at + 60));
        }
        lines.push(blocked(
            "b",
            &["ts/0/2", "ts/0/9"],
            &[("ts/0/2", "a", 12)],
            210,
            215,
        ));
        lines
    }

    fn has(r: &CheckResult, text: &str) -> bool {
        r.violations.iter().any(|v| v.message.contains(text))
    }

    #[test]
    fn sets_in_turn_pass_and_too_few_are_unknown() {
        let r = check(&history(clean()), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        let r = check(&history(clean().into_iter().take(12).collect()), 0.1);
        assert_eq!(r.verdict, Verdict::Unknown, "{r:?}");
    }

    #[test]
    fn a_set_granted_in_parts_fails() {
        // Two tokens for one set: two entries, not one.
        let mut lines = clean();
        lines.push(Line::Set(step(
            "b",
            "claim-set",
            "granted",
            &["ts/0/7", "ts/0/8"],
            &[100, 101],
            1000,
            1005,
        )));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(has(&r, "all equal"), "{r:?}");
        // One token for a set of three keys.
        let mut lines = clean();
        lines.push(Line::Set(step(
            "b",
            "claim-set",
            "granted",
            &["ts/0/7", "ts/0/8", "ts/0/9"],
            &[100],
            1000,
            1005,
        )));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(has(&r, "all equal"), "{r:?}");
    }

    #[test]
    fn a_key_granted_inside_anothers_hold_fails_and_after_its_release_passes() {
        // b is granted ts/0/9 (in another set) while a holds it; a's release comes later.
        let mut lines = clean();
        lines.push(grant("a", &["ts/0/8", "ts/0/9"], 100, 1000, 1005));
        lines.push(grant("b", &["ts/0/9", "ts/0/7"], 101, 1100, 1105));
        lines.push(release("a", "ts/0/9", 100, 1200, 1205));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(has(&r, "certainly held"), "{r:?}");
        // After a's release of that key was invoked, b's grant is fine, though a still holds
        // the other key of its set.
        let mut lines = clean();
        lines.push(grant("a", &["ts/0/8", "ts/0/9"], 100, 1000, 1005));
        lines.push(release("a", "ts/0/9", 100, 1050, 1055));
        lines.push(grant("b", &["ts/0/9", "ts/0/7"], 101, 1100, 1105));
        lines.push(release("a", "ts/0/8", 100, 1200, 1205));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        // So is one after a's lease could have expired (3 s / 1.1 after its invocation).
        let mut lines = clean();
        lines.push(grant("a", &["ts/0/8", "ts/0/9"], 100, 1000, 1005));
        lines.push(grant("b", &["ts/0/9", "ts/0/7"], 101, 3800, 3805));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        // One key with one token granted in two claims: one grant, two holders.
        let mut lines = clean();
        lines.push(grant("a", &["ts/0/8", "ts/0/9"], 100, 1000, 1005));
        lines.push(grant("b", &["ts/0/9", "ts/0/7"], 100, 1001, 1006));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(has(&r, "two holders"), "{r:?}");
    }

    #[test]
    fn tokens_out_of_time_order_fail() {
        let mut lines = clean();
        lines.push(grant("a", &["ts/0/8", "ts/0/9"], 200, 1000, 1005));
        lines.push(release("a", "ts/0/9", 200, 1050, 1055));
        lines.push(grant("b", &["ts/0/9", "ts/0/7"], 150, 1100, 1105));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(has(&r, "granted after token 200"), "{r:?}");
    }

    #[test]
    fn a_blocker_nobody_was_granted_fails_unless_its_claim_is_unknown() {
        // c holds ts/0/9 at token 300, which no claim-set was granted: a partial grant.
        let mut lines = clean();
        lines.push(blocked(
            "b",
            &["ts/0/9", "ts/0/8"],
            &[("ts/0/9", "c", 300)],
            1000,
            1005,
        ));
        let r = check(&history(lines.clone()), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(has(&r, "partial grant"), "{r:?}");
        // A blocker naming a granted key with another token, or another holder, fails too.
        let mut other = clean();
        other.push(blocked("b", &["ts/0/2"], &[("ts/0/2", "a", 13)], 210, 215));
        other.push(blocked("b", &["ts/0/2"], &[("ts/0/2", "c", 12)], 210, 215));
        let r = check(&history(other), 0.1);
        assert_eq!(r.violations.len(), 2, "{r:?}");
        // c's claim of a set with ts/0/9 got no answer before the blocked one returned: its
        // grant may have been decided, so c may hold the key.
        let mut unknown = clean();
        unknown.push(Line::Set(step(
            "c",
            "claim-set",
            "unknown",
            &["ts/0/7", "ts/0/9"],
            &[],
            900,
            990,
        )));
        unknown.extend(lines.iter().skip(clean().len()).cloned());
        let r = check(&history(unknown), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        // But not one invoked after the blocked answer returned.
        let mut late = lines;
        late.push(Line::Set(step(
            "c",
            "claim-set",
            "unknown",
            &["ts/0/7", "ts/0/9"],
            &[],
            1010,
            1100,
        )));
        let r = check(&history(late), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
    }
}
