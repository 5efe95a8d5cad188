//! The rules the `tasks`, `sets` and `lines` checkers share: the grants of one key come in turn. No
//! grant is decided wholly inside another's certain hold (from that grant's return until the
//! first of its release's invocation and `inv + ttl / (1 + rho)`: expiry is never early), and
//! of two grants the one that returned before the other was invoked has the smaller token.

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
    /// When the release of this grant that answered ok was invoked, if one did.
    pub released_inv_ns: Option<Nanos>,
}

/// Every grant of `key` in `grants` that breaks the rule, as (its index, why). Grants with
/// equal tokens are not compared (one grant told twice is each checker's own rule).
pub fn out_of_turn(key: &str, grants: &[Hold], rho: f64) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for a in grants {
        let expiry = a.inv_ns + (a.ttl_ms as f64 * 1e6 / (1.0 + rho.max(0.0))) as Nanos;
        let end = a.released_inv_ns.map_or(expiry, |r| r.min(expiry));
        for (j, b) in grants
            .iter()
            .enumerate()
            .filter(|(_, b)| b.token != a.token)
        {
            if b.inv_ns >= a.ret_ns && b.ret_ns <= end {
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
