//! The rules the `tasks`, `sets`, `lines`, `permits` and `shared` checkers share: the grants of one key
//! come in turn. No grant is decided wholly inside another's certain hold (from that grant's
//! return until the first of its release's invocation and `inv + ttl / (1 + rho)` of the grant
//! or of its latest ok renewal: expiry is never early), no two certain holds overlap (two
//! takers at once, however close their grants came: the race a hand-made board loses), and of
//! two grants the one that returned before the other was invoked has the smaller token. A key
//! of N permits has the same rules with N in place of one ([`over_n`]); a key held shared,
//! for the pairs with an exclusive holder in them ([`not_alone`]).

use std::collections::BTreeMap;

use crate::history::Nanos;

/// One grant of a key, as the checkers saw it.
#[derive(Clone, Copy)]
pub struct Hold<'a> {
    pub client: &'a str,
    pub token: u64,
    pub inv_ns: Nanos,
    pub ret_ns: Nanos,
    pub ttl_ms: u64,
    /// When a release of this grant was invoked, if one was, whatever its answer: after it
    /// the lease may be gone.
    pub released_inv_ns: Option<Nanos>,
    /// The invocation of the grant's latest renewal that answered renewed, if any: the lease
    /// was held throughout until it was applied, and lives on from it for its TTL.
    pub renewed_inv_ns: Option<Nanos>,
}

impl Hold<'_> {
    /// The end of the certain hold that begins at the grant's return: the first of the
    /// release's invocation and the earliest the lease can expire, `inv + ttl / (1 + rho)`
    /// of the grant or of its latest ok renewal.
    pub fn certain_end(&self, rho: f64) -> Nanos {
        let from = self.inv_ns.max(self.renewed_inv_ns.unwrap_or(0));
        let expiry = from + (self.ttl_ms as f64 * 1e6 / (1.0 + rho.max(0.0))) as Nanos;
        self.released_inv_ns.map_or(expiry, |r| r.min(expiry))
    }
}

/// Every grant of `key` in `grants` that breaks the rule, as (its index, why). Grants with
/// equal tokens are not compared (one grant told twice is each checker's own rule).
pub fn out_of_turn(key: &str, grants: &[Hold], rho: f64) -> Vec<(usize, String)> {
    let mut found = not_alone(key, grants, rho, |_, _| true);
    found.extend(out_of_order(key, grants));
    found
}

/// Every grant of `key` in `grants` decided wholly inside another's certain hold, or whose
/// certain hold overlaps another's, among the pairs (by index) `judged` says may not hold
/// the key together, as (its index, why): the rule of [`out_of_turn`] without the order of
/// tokens (the `shared` checker judges the pairs with an exclusive holder in them).
pub fn not_alone(
    key: &str,
    grants: &[Hold],
    rho: f64,
    judged: impl Fn(usize, usize) -> bool,
) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let certain_end = |a: &Hold| a.certain_end(rho);
    let inside = |a: &Hold, b: &Hold| b.inv_ns >= a.ret_ns && b.ret_ns <= certain_end(a);
    for (i, a) in grants.iter().enumerate() {
        let end = certain_end(a);
        for (j, b) in grants
            .iter()
            .enumerate()
            .filter(|&(j, b)| b.token != a.token && judged(i, j))
        {
            // Both certainly held at once (reported once a pair, unless the rule below says it).
            let overlap = a.ret_ns.max(b.ret_ns) < end.min(certain_end(b));
            if i < j && overlap && !inside(a, b) && !inside(b, a) {
                found.push((
                    j,
                    format!(
                        "{key} was held by {} (token {}) and by {} (token {}) at once: both \
                         certainly held it from {:.3}s",
                        a.client,
                        a.token,
                        b.client,
                        b.token,
                        a.ret_ns.max(b.ret_ns) as f64 / 1e9
                    ),
                ));
            }
            if inside(a, b) {
                found.push((
                    j,
                    format!(
                        "{key} was granted to {} (token {}) while {} certainly held it \
                         (token {})",
                        b.client, b.token, a.client, a.token
                    ),
                ));
            }
        }
    }
    found
}

/// Every grant of `key` in `grants` whose token is smaller than that of a grant that
/// returned before it was invoked, as (its index, why): tokens in time order.
pub fn out_of_order(key: &str, grants: &[Hold]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for a in grants {
        for (j, b) in grants.iter().enumerate() {
            if a.ret_ns < b.inv_ns && a.token > b.token {
                found.push((
                    j,
                    format!(
                        "{key}: token {} was granted after token {} returned",
                        b.token, a.token
                    ),
                ));
            }
        }
    }
    found
}

/// The others (by index) of other tokens than `grants[j]`'s whose certain holds go on at
/// instant `at`, given each grant's certain end.
fn holding_at(grants: &[Hold], ends: &[Nanos], j: usize, at: Nanos) -> Vec<usize> {
    (0..grants.len())
        .filter(|&i| i != j && grants[i].token != grants[j].token)
        .filter(|&i| grants[i].ret_ns <= at && at < ends[i])
        .collect()
}

/// The most grants of `grants` (one key's) certainly held at one instant.
pub fn most_at_once(grants: &[Hold], rho: f64) -> usize {
    let ends: Vec<Nanos> = grants.iter().map(|g| g.certain_end(rho)).collect();
    (0..grants.len())
        .filter(|&j| grants[j].ret_ns < ends[j])
        .map(|j| 1 + holding_at(grants, &ends, j, grants[j].ret_ns).len())
        .max()
        .unwrap_or(0)
}

/// Every grant of `key`, a key of `n` permits, that made more than `n` holders at once, as
/// (its index, why): decided wholly inside `n` others' certain holds (from its invocation to
/// its return each of them certainly held the key), or its certain hold began while `n`
/// others' went on. Grants with equal tokens are not compared, as in [`out_of_turn`].
pub fn over_n(key: &str, grants: &[Hold], n: usize, rho: f64) -> Vec<(usize, String)> {
    let ends: Vec<Nanos> = grants.iter().map(|g| g.certain_end(rho)).collect();
    let named = |others: &[usize]| {
        let mut names: Vec<String> = others
            .iter()
            .take(n + 1)
            .map(|&i| format!("{} (token {})", grants[i].client, grants[i].token))
            .collect();
        if others.len() > n + 1 {
            names.push("…".into());
        }
        names.join(", ")
    };
    let mut found = Vec::new();
    for (j, b) in grants.iter().enumerate() {
        let around: Vec<usize> = holding_at(grants, &ends, j, b.inv_ns)
            .into_iter()
            .filter(|&i| grants[i].ret_ns <= b.inv_ns && b.ret_ns <= ends[i])
            .collect();
        if around.len() >= n {
            found.push((
                j,
                format!(
                    "{key} ({n} permits) was granted to {} (token {}) while {} others certainly \
                     held it: {}",
                    b.client,
                    b.token,
                    around.len(),
                    named(&around)
                ),
            ));
            continue;
        }
        if b.ret_ns >= ends[j] {
            continue;
        }
        let at_once = holding_at(grants, &ends, j, b.ret_ns);
        if at_once.len() >= n {
            found.push((
                j,
                format!(
                    "{key} ({n} permits) had {} holders at once from {:.3}s: {} (token {}) and \
                     {}",
                    at_once.len() + 1,
                    b.ret_ns as f64 / 1e9,
                    b.client,
                    b.token,
                    named(&at_once)
                ),
            ));
        }
    }
    found
}

/// Every grant of `key` in `grants` that carries a token an earlier one carries, as (its
/// index, why): one log entry granting a key twice.
pub fn told_twice(key: &str, grants: &[Hold]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, a) in grants.iter().enumerate() {
        for (j, b) in grants.iter().enumerate().skip(i + 1) {
            if b.token == a.token {
                found.push((
                    j,
                    format!(
                        "{key} (token {}) was granted to {} and to {}: one grant, two holders",
                        a.token, a.client, b.client
                    ),
                ));
            }
        }
    }
    found
}

/// Groups `grants` (each: its key, the grant to blame, its hold) by key and judges each key's
/// grants in turn: [`out_of_turn`], and [`told_twice`] too when `once` (one grant told once).
/// Returns each breach as (key, grant, why).
pub fn judge_in_turn<'a, G: Copy>(
    grants: impl IntoIterator<Item = (&'a str, G, Hold<'a>)>,
    rho: f64,
    once: bool,
) -> Vec<(&'a str, G, String)> {
    let mut by_key: BTreeMap<&str, Vec<(G, Hold)>> = BTreeMap::new();
    for (key, grant, hold) in grants {
        by_key.entry(key).or_default().push((grant, hold));
    }
    let mut breaches = Vec::new();
    for (key, grants) in by_key {
        let holds: Vec<Hold> = grants.iter().map(|(_, hold)| *hold).collect();
        let mut found = out_of_turn(key, &holds, rho);
        if once {
            found.extend(told_twice(key, &holds));
        }
        breaches.extend(found.into_iter().map(|(j, why)| (key, grants[j].0, why)));
    }
    breaches
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    fn hold(client: &str, token: u64, inv: u64, ret: u64, released: Option<u64>) -> Hold<'_> {
        Hold {
            client,
            token,
            inv_ns: inv * MS,
            ret_ns: ret * MS,
            ttl_ms: 3000,
            released_inv_ns: released.map(|r| r * MS),
            renewed_inv_ns: None,
        }
    }

    #[test]
    fn two_takers_whose_grants_raced_but_whose_holds_overlap_are_out_of_turn() {
        // Both invoked before either returned: neither grant lies inside the other's hold,
        // but from 12 ms on both certainly held the key.
        let raced = [
            hold("a", 5, 0, 10, Some(500)),
            hold("b", 6, 2, 12, Some(400)),
        ];
        let found = out_of_turn("k", &raced, 0.05);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].1.contains("at once"), "{found:?}");
        // In turn: b's grant returned after a's release was invoked.
        let in_turn = [
            hold("a", 5, 0, 10, Some(100)),
            hold("b", 6, 90, 120, Some(400)),
        ];
        assert!(out_of_turn("k", &in_turn, 0.05).is_empty());
        // A's lease may have expired (no release; invoked at 0, TTL 3 s): b at 3.2 s is fine.
        let expired = [hold("a", 5, 0, 10, None), hold("b", 6, 3100, 3200, None)];
        assert!(out_of_turn("k", &expired, 0.05).is_empty());
        // Within the TTL, it is not.
        let early = [hold("a", 5, 0, 10, None), hold("b", 6, 2000, 2010, None)];
        assert_eq!(out_of_turn("k", &early, 0.05).len(), 1);
    }
}
