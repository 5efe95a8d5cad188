//! Permits: a key claimed as one of N permits (`Client::claim_permit`) has at most N holders
//! at once, each with a token of its own. Over the `permit-holders` workload's steps and the
//! run's leak check after it (`permit` lines), judged by the N the claims asked for, never by
//! the N an answer told:
//!
//! - **at most N at once**: no grant of a key is decided wholly inside N other grants'
//!   certain holds of it, and no grant's certain hold begins while N others' go on
//!   (`holds::over_n`). A certain hold runs from the grant's return until the first of its
//!   release's invocation (whatever the release answered) and `inv + ttl / (1 + rho)` of the
//!   grant or of its latest renewal answered renewed (expiry is never early);
//! - **one token, one holder; tokens in time order**: no two sessions were granted one token
//!   of a key (`holds::told_twice`), and of two grants of a key the one that returned before
//!   the other was invoked has the smaller token (`holds::out_of_order`);
//! - **the holders an answer names are real, and at most N**: every (session, token) a grant,
//!   a held answer or a refusal names was granted that token, or that session has a claim of
//!   the key with no answer invoked before the answer returned;
//! - **no permit ends early**: a renewal answered lost returned no sooner than the permit's
//!   expiry could come (`inv + ttl / (1 + rho)` of its grant or latest renewal before it);
//! - **no permit leaks**: the leak check after the workload stopped was granted all N permits
//!   of each key, by N fresh sessions, within [`PERMIT_LEAK_LIMIT`] of its first claim.
//!
//! Fewer than [`MIN_GRANTS`] grants by the workload → Unknown: such a run proves nothing.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::holds::{most_at_once, out_of_order, over_n, told_twice, Hold};
use super::{secs, Found};
use crate::history::{CheckResult, History, Nanos, PermitEvent, Verdict};
use crate::workload::PERMIT_LEAK_LIMIT;

/// A run's workload must be granted at least this many permits to prove anything.
pub const MIN_GRANTS: usize = 5;

/// One session's grant of one token of a key: its first grant, and what kept it alive.
pub(super) struct Grant<'a> {
    pub(super) first: &'a PermitEvent,
    /// The first grant's invocation; 0 when the first one seen found the permit held by the
    /// session already (its grant got no answer: decided at some time before).
    inv_ns: Nanos,
    /// Invocations of its renewals answered renewed, and of later claims that found it held
    /// by the session already (each renews it).
    renewals: Vec<Nanos>,
    released_inv_ns: Option<Nanos>,
}

impl Grant<'_> {
    pub(super) fn hold(&self) -> Hold<'_> {
        Hold {
            client: &self.first.client,
            token: self.first.token,
            inv_ns: self.inv_ns,
            ret_ns: self.first.ret_ns,
            ttl_ms: self.first.ttl_ms,
            released_inv_ns: self.released_inv_ns,
            renewed_inv_ns: self.renewals.iter().copied().max(),
        }
    }
}

/// Every grant, by (key, session, token).
pub(super) type Grants<'a> = BTreeMap<(&'a str, &'a str, u64), Grant<'a>>;

/// The claims answered granted among `steps`, in the order they returned, and every grant
/// (one per key, session and token) with the renewals and the release of it.
pub(super) fn grants_of<'a>(steps: &[&'a PermitEvent]) -> (Vec<&'a PermitEvent>, Grants<'a>) {
    let mut grants: Grants = BTreeMap::new();
    let mut granted: Vec<&PermitEvent> = steps
        .iter()
        .copied()
        .filter(|c| c.step == "claim" && c.what == "granted")
        .collect();
    granted.sort_by_key(|c| c.ret_ns);
    for g in &granted {
        match grants.get_mut(&(g.key.as_str(), g.client.as_str(), g.token)) {
            Some(grant) => grant.renewals.push(g.inv_ns),
            None => {
                let grant = Grant {
                    first: g,
                    inv_ns: if g.already_held { 0 } else { g.inv_ns },
                    renewals: if g.already_held {
                        vec![g.inv_ns]
                    } else {
                        Vec::new()
                    },
                    released_inv_ns: None,
                };
                grants.insert((&g.key, &g.client, g.token), grant);
            }
        }
    }
    for s in steps.iter().filter(|s| s.step != "claim") {
        let Some(grant) = grants.get_mut(&(s.key.as_str(), s.client.as_str(), s.token)) else {
            continue;
        };
        match (s.step.as_str(), s.what.as_str()) {
            ("renew", "renewed") => grant.renewals.push(s.inv_ns),
            ("release", _) => {
                let first = grant.released_inv_ns.map_or(s.inv_ns, |r| r.min(s.inv_ns));
                grant.released_inv_ns = Some(first);
            }
            _ => {}
        }
    }
    (granted, grants)
}

/// Checks the `permit-holders` steps and the leak check of `history`, with the clock-rate
/// bound `rho`.
pub fn check(history: &History, rho: f64) -> CheckResult {
    let steps = history.permits();
    // Each key's N: what its claims asked (the smallest, should they differ).
    let mut permits: BTreeMap<&str, u32> = BTreeMap::new();
    for c in steps.iter().filter(|s| s.step == "claim") {
        let n = permits.entry(&c.key).or_insert(c.permits);
        *n = (*n).min(c.permits);
    }
    let (granted, grants) = grants_of(&steps);
    let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for ((key, _, _), grant) in &grants {
        by_key.entry(key).or_default().push(grant);
    }
    let mut found = Found::default();
    let mut most = Vec::new();
    for (key, key_grants) in &by_key {
        let n = permits[key];
        let holds: Vec<Hold> = key_grants.iter().map(|g| g.hold()).collect();
        let at = |j: usize| Some(key_grants[j].first.ret_ns);
        for (j, why) in over_n(key, &holds, n as usize, rho) {
            found.add("more than N at once", key, at(j), why);
        }
        for (j, why) in told_twice(key, &holds) {
            found.add("one token, two holders", key, at(j), why);
        }
        for (j, why) in out_of_order(key, &holds) {
            found.add("tokens out of order", key, at(j), why);
        }
        most.push(format!("{key} {} of {n}", most_at_once(&holds, rho)));
    }
    named_holders(&steps, &permits, &mut found);
    lost_early(&steps, &grants, rho, &mut found);
    let leak = leaks(&steps, &permits, &mut found);
    let workload_grants = granted.iter().filter(|g| !g.after).count();
    let verdict = if !found.is_empty() {
        Verdict::Fail
    } else if workload_grants < MIN_GRANTS {
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
        "{} grants over {} keys (most certainly held at once: {}), {} claims held, {} \
         refused, {} unknown, {} renewals, {} released, {} renewals lost; {}{}",
        workload_grants,
        by_key.len(),
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
    found.result("permits", verdict, summary)
}

/// No answer names more than the key's N holders, and each (session, token) it names was
/// granted, or has a claim of the key with no answer invoked before the answer returned.
fn named_holders(steps: &[&PermitEvent], permits: &BTreeMap<&str, u32>, found: &mut Found) {
    let granted: HashSet<(&str, &str, u64)> = steps
        .iter()
        .filter(|s| s.step == "claim" && s.what == "granted")
        .map(|s| (s.key.as_str(), s.client.as_str(), s.token))
        .collect();
    let unknown: Vec<&PermitEvent> = steps
        .iter()
        .copied()
        .filter(|s| s.step == "claim" && s.what == "unknown")
        .collect();
    for s in steps.iter().filter(|s| !s.holders.is_empty()) {
        let n = permits.get(s.key.as_str()).copied().unwrap_or(s.permits);
        if s.holders.len() > n as usize {
            found.add(
                "more than N named",
                &s.key,
                Some(s.ret_ns),
                format!(
                    "{} ({n} permits) was told {} holders by a claim {} at {} (by {}): {}",
                    s.key,
                    s.holders.len(),
                    s.what,
                    secs(s.ret_ns),
                    s.client,
                    holder_list(&s.holders)
                ),
            );
        }
        for (client, token) in &s.holders {
            let real = granted.contains(&(s.key.as_str(), client.as_str(), *token))
                || unknown
                    .iter()
                    .any(|u| u.key == s.key && u.client == *client && u.inv_ns < s.ret_ns);
            if !real {
                found.add(
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
                );
            }
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

/// A renewal answered lost that returned before its lease could expire: the lease ended
/// early (nothing revokes these keys).
pub(super) fn lost_early(steps: &[&PermitEvent], grants: &Grants, rho: f64, found: &mut Found) {
    for s in steps
        .iter()
        .filter(|s| s.step == "renew" && s.what == "lost")
    {
        let Some(grant) = grants.get(&(s.key.as_str(), s.client.as_str(), s.token)) else {
            continue;
        };
        let hold = Hold {
            released_inv_ns: None,
            renewed_inv_ns: grant
                .renewals
                .iter()
                .copied()
                .filter(|r| *r < s.inv_ns)
                .max(),
            ..grant.hold()
        };
        let expiry = hold.certain_end(rho);
        if s.ret_ns < expiry {
            found.add(
                "ended early",
                &s.key,
                Some(s.ret_ns),
                format!(
                    "{}'s lease of {} (token {}) was lost at {}, before it could expire \
                     ({})",
                    s.client,
                    s.key,
                    s.token,
                    secs(s.ret_ns),
                    secs(expiry)
                ),
            );
        }
    }
}

/// The leak check: every key with claims was granted its N permits, by N sessions, within
/// [`PERMIT_LEAK_LIMIT`] of the check's first claim of it. Says what it saw.
fn leaks(steps: &[&PermitEvent], permits: &BTreeMap<&str, u32>, found: &mut Found) -> String {
    let after: Vec<&PermitEvent> = steps
        .iter()
        .copied()
        .filter(|s| s.after && s.step == "claim")
        .collect();
    if after.is_empty() {
        return "no leak check".into();
    }
    let limit = PERMIT_LEAK_LIMIT.as_nanos() as Nanos;
    let mut seen = Vec::new();
    for (key, n) in permits {
        let claims: Vec<&PermitEvent> = after.iter().copied().filter(|s| s.key == *key).collect();
        let start = claims.iter().map(|c| c.inv_ns).min().unwrap_or(0);
        let sessions: HashSet<&str> = claims
            .iter()
            .filter(|c| c.what == "granted" && c.ret_ns <= start + limit)
            .map(|c| c.client.as_str())
            .collect();
        // When the N-th was granted.
        let mut rets: Vec<Nanos> = claims
            .iter()
            .filter(|c| c.what == "granted")
            .map(|c| c.ret_ns)
            .collect();
        rets.sort_unstable();
        let nth = rets
            .get((*n as usize).saturating_sub(1))
            .map(|t| t.saturating_sub(start));
        if sessions.len() < *n as usize {
            found.add(
                "leak",
                key,
                Some(start + limit),
                format!(
                    "{key} ({n} permits): only {} fresh sessions were granted one within {} s \
                     of the leak check's first claim ({} claims): a permit leaked",
                    sessions.len(),
                    PERMIT_LEAK_LIMIT.as_secs(),
                    claims.len()
                ),
            );
        }
        seen.push(match nth {
            Some(t) => format!("{key} {n} of {n} in {} ms", t / 1_000_000),
            None => format!("{key} {} of {n}", sessions.len()),
        });
    }
    let keys: BTreeSet<&str> = after.iter().map(|s| s.key.as_str()).collect();
    format!("leak check of {} keys: {}", keys.len(), seen.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Line;

    const MS: Nanos = 1_000_000;

    /// A step of `client` on key `k` (N = 2 asked), invoked at `inv` ms, returned 5 ms later.
    fn step(client: &str, step: &str, what: &str, token: u64, inv: u64) -> PermitEvent {
        PermitEvent {
            idx: 0,
            process: 0,
            client: client.into(),
            step: step.into(),
            what: what.into(),
            key: "k".into(),
            permits: 2,
            token,
            already_held: false,
            safe_deadline_ns: None,
            told_permits: 0,
            holders: Vec::new(),
            shared: false,
            told_shared: false,
            reason: String::new(),
            after: false,
            ttl_ms: 3000,
            inv_ns: inv * MS,
            ret_ns: (inv + 5) * MS,
            t_ns: (inv + 5) * MS,
        }
    }

    fn grant(client: &str, token: u64, inv: u64) -> PermitEvent {
        step(client, "claim", "granted", token, inv)
    }

    fn release(client: &str, token: u64, inv: u64) -> PermitEvent {
        step(client, "release", "released", token, inv)
    }

    fn run(events: Vec<PermitEvent>) -> CheckResult {
        let history = History {
            lines: events.into_iter().map(Line::Permit).collect(),
        };
        check(&history, 0.05)
    }

    fn has(r: &CheckResult, text: &str) -> bool {
        r.violations.iter().any(|v| v.message.contains(text))
    }

    /// Two permits held at once all along: a and b hold, c takes a's when a releases, d
    /// takes b's, e takes c's; a held claim in between names the two holders.
    fn two_at_once() -> Vec<PermitEvent> {
        let mut held = step("x", "claim", "held", 0, 150);
        held.told_permits = 2;
        held.holders = vec![("a".into(), 10), ("b".into(), 11)];
        vec![
            grant("a", 10, 0),
            grant("b", 11, 20),
            held,
            release("a", 10, 300),
            grant("c", 12, 310),
            release("b", 11, 400),
            grant("d", 13, 410),
            release("c", 12, 600),
            grant("e", 14, 610),
            release("d", 13, 800),
            release("e", 14, 900),
        ]
    }

    #[test]
    fn n_holders_at_once_pass_and_too_few_grants_prove_nothing() {
        let r = run(two_at_once());
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(r.summary.contains("k 2 of 2"), "{}", r.summary);
        let r = run(two_at_once().into_iter().take(6).collect());
        assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
    }

    #[test]
    fn n_plus_one_overlapping_certain_holds_fail() {
        // f is granted while a and b hold (both release later): three holders of two.
        let mut events = two_at_once();
        events.push(grant("f", 15, 100));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "while 2 others certainly held it"), "{r:#?}");
        // Granted in a race with b (invoked before b's grant returned), so not wholly inside
        // two holds, but from its return three certainly held the key.
        let mut events = two_at_once();
        events.push(grant("f", 15, 18));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "had 3 holders at once"), "{r:#?}");
        // After a's release was invoked, f may take a's permit, but then c's grant (while b
        // and f hold) makes three; without c's, it passes.
        let mut events = two_at_once();
        events.push(grant("f", 15, 305));
        events.push(release("f", 15, 308));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        let mut events = two_at_once();
        events.retain(|e| e.client != "c");
        events.push(grant("f", 12, 305));
        events.push(release("f", 12, 600));
        assert_eq!(run(events).verdict, Verdict::Pass);
    }

    #[test]
    fn the_answers_n_never_excuses_more_holders() {
        // Every answer tells of three permits (a cluster that admitted one too many): the
        // checker still judges by the two asked for.
        let mut events = two_at_once();
        events.push(grant("f", 15, 100));
        for e in &mut events {
            e.told_permits = 3;
        }
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "more than N at once"), "{r:#?}");
    }

    #[test]
    fn a_token_granted_to_two_sessions_or_out_of_order_fails() {
        let mut events = two_at_once();
        events.push(grant("f", 12, 2000));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "one grant, two holders"), "{r:#?}");
        let mut events = two_at_once();
        events.push(grant("f", 9, 2000));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(
            has(&r, "token 9 was granted after token 14 returned"),
            "{r:#?}"
        );
    }

    #[test]
    fn a_renewal_extends_the_certain_hold() {
        // a and b never release: their permits may expire from 3 s / 1.05 after their
        // grants, so f and g at 3.1 s are fine...
        let base = || {
            let mut events = two_at_once();
            events.retain(|e| !(e.step == "release" && (e.client == "d" || e.client == "e")));
            events
        };
        let mut events = base();
        events.push(grant("f", 20, 3600));
        events.push(grant("g", 21, 3700));
        assert_eq!(run(events).verdict, Verdict::Pass);
        // ...unless d renewed at 1 s: its permit lives on to 3.86 s at least.
        let mut events = base();
        events.push(step("d", "renew", "renewed", 13, 1000));
        events.push(grant("f", 20, 3600));
        events.push(grant("g", 21, 3700));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        // A renewal answered lost extends nothing; one answered before the permit could
        // expire is a permit ended early.
        let mut events = base();
        events.push(step("d", "renew", "lost", 13, 1000));
        events.push(grant("f", 20, 3600));
        events.push(grant("g", 21, 3700));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "before it could expire"), "{r:#?}");
        assert!(!has(&r, "more than N at once"), "{r:#?}");
    }

    #[test]
    fn answers_naming_too_many_or_unknown_holders_fail() {
        let mut events = two_at_once();
        events[2].holders.push(("c".into(), 12));
        let r = run(events);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "was told 3 holders"), "{r:#?}");
        let mut events = two_at_once();
        events[2].holders[1] = ("z".into(), 11);
        let r = run(events.clone());
        assert!(has(&r, "which no claim was granted"), "{r:#?}");
        // z's claim got no answer before the held one returned: z may hold it.
        events.insert(0, step("z", "claim", "unknown", 0, 100));
        assert_eq!(run(events).verdict, Verdict::Pass);
    }

    /// The leak check of key k (2 permits): `granted` of its two fresh claimants granted at
    /// `at` ms, then the extra claim `extra` (held or granted), then the releases.
    fn leak_check(granted: usize, at: u64, extra: &str) -> Vec<PermitEvent> {
        let after = |mut e: PermitEvent| {
            e.after = true;
            e
        };
        let mut events = two_at_once();
        events.push(after(step("f0", "claim", "held", 0, 1000)));
        for (i, token) in [(0, 20), (1, 21)].into_iter().take(granted) {
            events.push(after(grant(&format!("f{i}"), token, at)));
        }
        if granted == 2 {
            events.push(after(step("f2", "claim", extra, 22, at + 10)));
        }
        events.push(after(release("f0", 20, at + 20)));
        events.push(after(release("f1", 21, at + 20)));
        events.push(after(release("f2", 22, at + 20)));
        events
    }

    #[test]
    fn a_permit_not_granted_again_after_the_workload_leaked() {
        let r = run(leak_check(2, 3000, "held"));
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(r.summary.contains("k 2 of 2 in 2005 ms"), "{}", r.summary);
        let r = run(leak_check(1, 3000, "held"));
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert!(has(&r, "a permit leaked"), "{r:#?}");
        // Granted only past the limit (8 s after the check's first claim): leaked too.
        let r = run(leak_check(2, 9500, "held"));
        assert!(has(&r, "a permit leaked"), "{r:#?}");
        // A third granted while the two fresh sessions hold: more than N at once.
        let r = run(leak_check(2, 3000, "granted"));
        assert!(has(&r, "while 2 others certainly held it"), "{r:#?}");
    }
}
