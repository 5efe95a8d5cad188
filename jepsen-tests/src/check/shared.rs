//! Shared and exclusive holders: a key claimed shared (`Client::claim_shared`) may have many
//! holders at once, each with a lease and a token of its own; a key claimed exclusively (a
//! plain `Client::claim`) has that one holder alone. Over the `shared-holders` workload's
//! steps and the run's leak check after it (`shared` lines), judged by the mode each claim
//! asked, never by the mode an answer told:
//!
//! - **an exclusive holder holds alone**: no grant of a key is decided wholly inside the
//!   certain hold of another, and no two certain holds of a key overlap, whenever one of
//!   the two asked exclusively (`holds::not_alone`; a certain hold as the `permits`
//!   checker's: from the grant's return until the first of its release's invocation and
//!   `inv + ttl / (1 + rho)` of the grant or of its latest renewal answered renewed);
//! - **one token, one holder; tokens in time order**, across both modes: no two sessions
//!   were granted one token of a key, and of two grants of a key the one that returned
//!   before the other was invoked has the smaller token;
//! - **granted as asked**: a claim that asked exclusively is never answered with a shared
//!   grant (the key's holders told as shared), nor a shared one with an exclusive grant;
//! - **the holders an answer names are real, and an exclusive one alone**: every (session,
//!   token) an answer names was granted that token, or that session has a claim of the key
//!   with no answer invoked before the answer returned; and no answer names a holder whose
//!   claim asked exclusively together with another holder;
//! - **no lease ends early**: a renewal answered lost returned no sooner than the lease's
//!   expiry could come;
//! - **no lease leaks**: the leak check after the workload stopped had a fresh exclusive
//!   claimant granted each key within [`SHARED_LEAK_LIMIT`] of its first claim.
//!
//! Fewer than [`MIN_GRANTS`] grants by the workload, or none in one of the modes →
//! Unknown: such a run proves nothing.

use std::collections::{BTreeMap, BTreeSet};

use super::holds::{most_at_once, not_alone, out_of_order, told_twice, Hold};
use super::permits::{grants_of, lost_early, Grant, Grants};
use super::{secs, Found};
use crate::history::{CheckResult, History, Nanos, PermitEvent, Verdict};
use crate::workload::SHARED_LEAK_LIMIT;

/// A run's workload must be granted at least this many leases to prove anything.
pub const MIN_GRANTS: usize = 5;

/// Checks the `shared-holders` steps and the leak check of `history`, with the clock-rate
/// bound `rho`.
pub fn check(history: &History, rho: f64) -> CheckResult {
    let steps = history.shared();
    let (granted, grants) = grants_of(&steps);
    let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for ((key, _, _), grant) in &grants {
        by_key.entry(key).or_default().push(grant);
    }
    let mut found = Found::default();
    let mut most = Vec::new();
    for (key, key_grants) in &by_key {
        let holds: Vec<Hold> = key_grants.iter().map(|g| g.hold()).collect();
        let shared: Vec<bool> = key_grants.iter().map(|g| g.first.shared).collect();
        let at = |j: usize| Some(key_grants[j].first.ret_ns);
        for (j, why) in not_alone(key, &holds, rho, |a, b| !shared[a] || !shared[b]) {
            found.add("exclusive not alone", key, at(j), why);
        }
        for (j, why) in told_twice(key, &holds) {
            found.add("one token, two holders", key, at(j), why);
        }
        for (j, why) in out_of_order(key, &holds) {
            found.add("tokens out of order", key, at(j), why);
        }
        most.push(format!("{key} {}", most_at_once(&holds, rho)));
    }
    as_asked(&granted, &mut found);
    named_holders(&steps, &grants, &mut found);
    lost_early(&steps, &grants, rho, &mut found);
    let leak = leaks(&steps, &mut found);
    let workload = |shared: bool| {
        granted
            .iter()
            .filter(|g| !g.after && g.shared == shared)
            .count()
    };
    let (shared_grants, exclusive_grants) = (workload(true), workload(false));
    let verdict = if !found.is_empty() {
        Verdict::Fail
    } else if shared_grants + exclusive_grants < MIN_GRANTS
        || shared_grants == 0
        || exclusive_grants == 0
    {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    let count = |step: &str, what: &str| {
        steps
            .iter()
            .filter(|s| !s.after && s.step == step && s.what == what)
            .count()
    };
    let summary = format!(
        "{} grants over {} keys ({} shared, {} exclusive; most certainly held at once: {}), \
         {} claims held, {} refused, {} unknown, {} renewals, {} released, {} renewals lost; \
         {}{}",
        shared_grants + exclusive_grants,
        by_key.len(),
        shared_grants,
        exclusive_grants,
        if most.is_empty() {
            "-".to_string()
        } else {
            most.join(", ")
        },
        count("claim", "held"),
        count("claim", "refused"),
        count("claim", "unknown"),
        count("renew", "renewed"),
        count("release", "released"),
        count("renew", "lost"),
        leak,
        found.suffix()
    );
    found.result("shared", verdict, summary)
}

fn mode(shared: bool) -> &'static str {
    if shared {
        "shared"
    } else {
        "exclusively"
    }
}

/// Every grant as its claim asked: an exclusive claim is not told the key is held shared,
/// a shared one is.
fn as_asked(granted: &[&PermitEvent], found: &mut Found) {
    for g in granted.iter().filter(|g| g.shared != g.told_shared) {
        found.add(
            if g.shared {
                "shared granted exclusively"
            } else {
                "exclusive granted shared"
            },
            &g.key,
            Some(g.ret_ns),
            format!(
                "{} asked for {} {} and was granted it {} (token {}) at {}, holders: {}",
                g.client,
                g.key,
                mode(g.shared),
                mode(g.told_shared),
                g.token,
                secs(g.ret_ns),
                holder_list(&g.holders)
            ),
        );
    }
}

/// Each (session, token) an answer names was granted, or has a claim of the key with no
/// answer invoked before the answer returned; and no answer names a holder whose claim
/// asked exclusively beside another holder.
fn named_holders(steps: &[&PermitEvent], grants: &Grants, found: &mut Found) {
    let unknown: Vec<&PermitEvent> = steps
        .iter()
        .copied()
        .filter(|s| s.step == "claim" && s.what == "unknown")
        .collect();
    for s in steps.iter().filter(|s| !s.holders.is_empty()) {
        let mut alone = Vec::new();
        for (client, token) in &s.holders {
            let asked = match grants.get(&(s.key.as_str(), client.as_str(), *token)) {
                Some(grant) => Some(grant.first.shared),
                None => unknown
                    .iter()
                    .find(|u| u.key == s.key && u.client == *client && u.inv_ns < s.ret_ns)
                    .map(|u| u.shared),
            };
            match asked {
                Some(false) => alone.push(format!("{client} (token {token})")),
                Some(true) => {}
                None => found.add(
                    "holder nobody granted",
                    &s.key,
                    Some(s.ret_ns),
                    format!(
                        "{}'s claim {} at {} named {client} holding {} with token {token}, \
                         which no claim was granted",
                        s.client,
                        s.what,
                        secs(s.ret_ns),
                        s.key
                    ),
                ),
            }
        }
        if s.holders.len() > 1 && !alone.is_empty() {
            found.add(
                "exclusive named with others",
                &s.key,
                Some(s.ret_ns),
                format!(
                    "{}'s claim {} at {} named {} holders of {}: {}, of which {} asked for it \
                     exclusively",
                    s.client,
                    s.what,
                    secs(s.ret_ns),
                    s.holders.len(),
                    s.key,
                    holder_list(&s.holders),
                    alone.join(", ")
                ),
            );
        }
    }
}

fn holder_list(holders: &[(String, u64)]) -> String {
    let list: Vec<String> = holders
        .iter()
        .map(|(client, token)| format!("{client} (token {token})"))
        .collect();
    list.join(", ")
}

/// The leak check: every key the check claimed was granted to a fresh exclusive claimant
/// within [`SHARED_LEAK_LIMIT`] of the check's first claim of it. Says what it saw.
fn leaks(steps: &[&PermitEvent], found: &mut Found) -> String {
    let after: Vec<&PermitEvent> = steps
        .iter()
        .copied()
        .filter(|s| s.after && s.step == "claim")
        .collect();
    if after.is_empty() {
        return "no leak check".into();
    }
    let limit = SHARED_LEAK_LIMIT.as_nanos() as Nanos;
    let keys: BTreeSet<&str> = after.iter().map(|s| s.key.as_str()).collect();
    let mut seen = Vec::new();
    for key in &keys {
        let claims: Vec<&PermitEvent> = after.iter().copied().filter(|s| s.key == *key).collect();
        let start = claims.iter().map(|c| c.inv_ns).min().unwrap_or(0);
        let first = claims
            .iter()
            .filter(|c| c.what == "granted" && !c.shared)
            .map(|c| c.ret_ns)
            .min();
        match first {
            Some(t) if t <= start + limit => {
                seen.push(format!("{key} in {} ms", (t - start) / 1_000_000));
            }
            _ => {
                found.add(
                    "leak",
                    key,
                    Some(start + limit),
                    format!(
                        "{key}: no fresh exclusive claimant was granted it within {} s of the \
                         leak check's first claim ({} claims): a lease leaked",
                        SHARED_LEAK_LIMIT.as_secs(),
                        claims.len()
                    ),
                );
                seen.push(format!("{key} not granted"));
            }
        }
    }
    format!("leak check of {} keys: {}", keys.len(), seen.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Line;

    const MS: Nanos = 1_000_000;

    /// A step of `client` on key `k`, `shared` or exclusive as asked, invoked at `inv` ms,
    /// returned 5 ms later.
    fn step(
        client: &str,
        shared: bool,
        (step, what): (&str, &str),
        token: u64,
        inv: u64,
    ) -> PermitEvent {
        PermitEvent {
            idx: 0,
            process: 0,
            client: client.into(),
            step: step.into(),
            what: what.into(),
            key: "k".into(),
            permits: u32::from(!shared),
            token,
            already_held: false,
            safe_deadline_ns: None,
            told_permits: 0,
            holders: Vec::new(),
            shared,
            told_shared: false,
            reason: String::new(),
            after: false,
            ttl_ms: 3000,
            inv_ns: inv * MS,
            ret_ns: (inv + 5) * MS,
            t_ns: (inv + 5) * MS,
        }
    }

    /// A grant as asked (a shared one told shared, with its holders so far).
    fn grant(client: &str, shared: bool, token: u64, inv: u64) -> PermitEvent {
        let mut e = step(client, shared, ("claim", "granted"), token, inv);
        e.told_shared = shared;
        e
    }

    fn release(client: &str, shared: bool, token: u64, inv: u64) -> PermitEvent {
        step(client, shared, ("release", "released"), token, inv)
    }

    fn run(events: Vec<PermitEvent>) -> CheckResult {
        let history = History {
            lines: events.into_iter().map(Line::Shared).collect(),
        };
        check(&history, 0.05)
    }

    fn has(r: &CheckResult, text: &str) -> bool {
        r.violations.iter().any(|v| v.message.contains(text))
    }

    /// In turn: a and b share the key, x's exclusive claim is held (naming them), c takes
    /// it exclusively once both released, d and e share it after c released.
    fn in_turn() -> Vec<PermitEvent> {
        let mut held = step("x", false, ("claim", "held"), 0, 150);
        held.told_shared = true;
        held.holders = vec![("a".into(), 10), ("b".into(), 11)];
        let mut b = grant("b", true, 11, 20);
        b.holders = vec![("a".into(), 10), ("b".into(), 11)];
        let mut blocked = step("y", true, ("claim", "held"), 0, 450);
        blocked.holders = vec![("c".into(), 12)];
        vec![
            grant("a", true, 10, 0),
            b,
            held,
            release("a", true, 10, 300),
            release("b", true, 11, 400),
            grant("c", false, 12, 410),
            blocked,
            release("c", false, 12, 600),
            grant("d", true, 13, 610),
            grant("e", true, 14, 620),
            release("d", true, 13, 800),
            release("e", true, 14, 900),
        ]
    }

    #[test]
    fn shared_holders_together_and_an_exclusive_alone_pass() {
        let r = run(in_turn());
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(r.summary.contains("4 shared, 1 exclusive"), "{}", r.summary);
        assert!(r.summary.contains("k 2"), "{}", r.summary);
        // Too few grants, or none exclusive: proves nothing.
        let r = run(in_turn().into_iter().take(5).collect());
        assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
        let mut events = in_turn();
        events.retain(|e| e.client != "c" && e.client != "y");
        events.push(grant("f", true, 15, 1000));
        assert_eq!(run(events).verdict, Verdict::Unknown);
    }

    #[test]
    fn an_exclusive_holder_beside_another_fails() {
        // f granted exclusively while a and b share the key.
        let mut events = in_turn();
        events.push(grant("f", false, 15, 100));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "exclusive not alone"), "{r:#?}");
        assert!(has(&r, "while a certainly held it"), "{r:#?}");
        // A shared grant while c holds alone.
        let mut events = in_turn();
        events.push(grant("f", true, 15, 500));
        let r = run(events);
        assert!(has(&r, "while c certainly held it"), "{r:#?}");
        // Raced with c's grant (invoked before it returned), both certainly held at once.
        let mut events = in_turn();
        events.push(grant("f", true, 15, 408));
        let r = run(events);
        assert!(has(&r, "at once"), "{r:#?}");
        // Once c's release was invoked, shared holders may come: d's and e's grants are
        // fine, and so is a third beside them.
        let mut events = in_turn();
        events.push(grant("f", true, 15, 621));
        assert_eq!(run(events).verdict, Verdict::Pass);
    }

    #[test]
    fn an_exclusive_claim_granted_shared_or_named_with_others_fails() {
        // The canary: c's exclusive claim is granted as a shared one, beside a shared holder.
        let mut events = in_turn();
        let c = events.iter_mut().find(|e| e.client == "c").unwrap();
        c.told_shared = true;
        c.holders = vec![("c".into(), 12)];
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "exclusive granted shared"), "{r:#?}");
        assert!(!has(&r, "exclusive named with others"), "{r:#?}");
        // An answer names c (asked exclusively) with d.
        let mut events = in_turn();
        let mut held = step("z", false, ("claim", "held"), 0, 615);
        held.holders = vec![("c".into(), 12), ("d".into(), 13)];
        events.push(held);
        let r = run(events);
        assert!(
            has(&r, "of which c (token 12) asked for it exclusively"),
            "{r:#?}"
        );
        // And one names a holder no claim was granted.
        let mut events = in_turn();
        events[2].holders[1] = ("q".into(), 11);
        let r = run(events);
        assert!(has(&r, "which no claim was granted"), "{r:#?}");
    }

    #[test]
    fn a_token_granted_twice_or_out_of_order_fails() {
        let mut events = in_turn();
        events.push(grant("f", true, 13, 2000));
        let r = run(events);
        assert!(has(&r, "one grant, two holders"), "{r:#?}");
        let mut events = in_turn();
        events.push(grant("f", false, 9, 2000));
        let r = run(events);
        assert!(
            has(&r, "token 9 was granted after token 14 returned"),
            "{r:#?}"
        );
    }

    /// The leak check of key k: its fresh exclusive claimant held once, granted at `at` ms,
    /// then the extra shared and exclusive claims answered `extra`, then the releases.
    fn leak_check(at: Option<u64>, extra: &str) -> Vec<PermitEvent> {
        let after = |mut e: PermitEvent| {
            e.after = true;
            e
        };
        let mut events = in_turn();
        events.push(after(step("f0", false, ("claim", "held"), 0, 1000)));
        if let Some(at) = at {
            events.push(after(grant("f0", false, 20, at)));
            let mut shared = step("f1", true, ("claim", extra), 21, at + 10);
            shared.told_shared = extra == "granted";
            events.push(after(shared));
            events.push(after(step("f2", false, ("claim", extra), 22, at + 10)));
            events.push(after(release("f0", false, 20, at + 20)));
        }
        events
    }

    #[test]
    fn a_key_not_granted_alone_again_after_the_workload_leaked() {
        let r = run(leak_check(Some(3000), "held"));
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(r.summary.contains("k in 2005 ms"), "{}", r.summary);
        let r = run(leak_check(None, "held"));
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "a lease leaked"), "{r:#?}");
        // Granted only past the limit (8 s after the check's first claim): leaked too.
        let r = run(leak_check(Some(9500), "held"));
        assert!(has(&r, "a lease leaked"), "{r:#?}");
        // The extra claimants granted while the fresh exclusive one holds.
        let r = run(leak_check(Some(3000), "granted"));
        assert!(has(&r, "was granted to f1 (token 21) while f0"), "{r:#?}");
        assert!(has(&r, "was granted to f2 (token 22) while f0"), "{r:#?}");
    }

    #[test]
    fn a_renewal_extends_the_hold_and_a_lease_lost_early_fails() {
        // d and e never release: an exclusive grant at 3.7 s is after their leases may have
        // expired, unless e renewed at 1 s; a renewal answered lost at 1 s is one ended early.
        let base = || {
            let mut events = in_turn();
            events.retain(|e| !(e.step == "release" && (e.client == "d" || e.client == "e")));
            events.push(grant("f", false, 20, 3700));
            events
        };
        assert_eq!(run(base()).verdict, Verdict::Pass);
        let mut events = base();
        events.push(step("e", true, ("renew", "renewed"), 14, 1000));
        assert!(has(&run(events), "exclusive not alone"));
        let mut events = base();
        events.push(step("e", true, ("renew", "lost"), 14, 1000));
        let r = run(events);
        assert!(has(&r, "before it could expire"), "{r:#?}");
        assert!(!has(&r, "exclusive not alone"), "{r:#?}");
    }
}
