//! The rules the `tasks`, `sets` and `lines` checkers share: the grants of one key come in turn. No
//! grant is decided wholly inside another's certain hold (from that grant's return until the
//! first of its release's invocation and `inv + ttl / (1 + rho)`: expiry is never early), no
//! two certain holds overlap (two takers at once, however close their grants came: the race
//! a hand-made board loses), and of two grants the one that returned before the other was
//! invoked has the smaller token.

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
}

/// Every grant of `key` in `grants` that breaks the rule, as (its index, why). Grants with
/// equal tokens are not compared (one grant told twice is each checker's own rule).
pub fn out_of_turn(key: &str, grants: &[Hold], rho: f64) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let certain_end = |a: &Hold| {
        let expiry = a.inv_ns + (a.ttl_ms as f64 * 1e6 / (1.0 + rho.max(0.0))) as Nanos;
        a.released_inv_ns.map_or(expiry, |r| r.min(expiry))
    };
    let inside = |a: &Hold, b: &Hold| b.inv_ns >= a.ret_ns && b.ret_ns <= certain_end(a);
    for (i, a) in grants.iter().enumerate() {
        let end = certain_end(a);
        for (j, b) in grants
            .iter()
            .enumerate()
            .filter(|(_, b)| b.token != a.token)
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
