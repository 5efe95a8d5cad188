//! Ownership bars: each granted token's tenure on a key, by the rule in the module docs of
//! [`super`], and which keys the timeline draws.

use std::collections::{BTreeMap, BTreeSet};

use super::svg::natural_key;
use crate::history::{Call, Kind, Nanos, Op, Reply};

/// Why an ownership bar ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EndReason {
    Released,
    Superseded,
    Expired,
    HistoryEnd,
}

impl EndReason {
    pub(super) fn text(self) -> &'static str {
        match self {
            EndReason::Released => "released",
            EndReason::Superseded => "superseded by a higher token",
            EndReason::Expired => {
                "expired (the safe deadline of the latest grant or renewal, else its invocation + TTL)"
            }
            EndReason::HistoryEnd => "still held at the end of the history",
        }
    }
}

/// One token's tenure on one key, by the rule in the module docs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Bar {
    pub(super) key: String,
    pub(super) token: u64,
    pub(super) client: String,
    pub(super) name: String,
    pub(super) start: Nanos,
    pub(super) end: Nanos,
    pub(super) reason: EndReason,
    /// `ok` renewals (and `already_held` re-grants) that extended it.
    pub(super) renewals: usize,
}

/// Per-token facts gathered from one key's operations.
pub(super) struct Tenure {
    /// Completion and invocation of the first (earliest-completing) `ok` grant.
    start: Nanos,
    first_inv: Nanos,
    client: String,
    name: String,
    ttl_ns: Nanos,
    /// Invocation and recorded safe deadline of every `ok` grant and renew of the token.
    alive: Vec<(Nanos, Option<Nanos>)>,
    release_inv: Option<Nanos>,
}

/// The ownership bars of every key, by the rule in the module docs.
pub(super) fn ownership_bars(
    ops: &[Op],
    end_ns: Nanos,
    default_ttl_ms: u64,
) -> BTreeMap<String, Vec<Bar>> {
    let mut by_key: BTreeMap<&str, BTreeMap<u64, Tenure>> = BTreeMap::new();
    // Grants first (so renewals and releases find their token whatever the order)...
    for op in ops.iter().filter(|o| o.kind == Kind::Ok) {
        let ttl_ms = match op.call {
            Call::Claim { ttl_ms } | Call::Accept { ttl_ms } => ttl_ms,
            _ => continue,
        };
        let Some(Reply::Granted {
            token,
            safe_deadline_ns,
            ..
        }) = op.reply
        else {
            continue;
        };
        let Some(ret) = op.ret_ns else { continue };
        let ttl_ms = if ttl_ms == 0 { default_ttl_ms } else { ttl_ms };
        let tenures = by_key.entry(op.key.as_str()).or_default();
        let t = tenures.entry(token).or_insert_with(|| Tenure {
            start: ret,
            first_inv: op.inv_ns,
            client: op.client.clone(),
            name: op.name.clone(),
            ttl_ns: ttl_ms.saturating_mul(1_000_000),
            alive: Vec::new(),
            release_inv: None,
        });
        if ret < t.start {
            t.start = ret;
            t.first_inv = op.inv_ns;
            t.client.clone_from(&op.client);
            t.name.clone_from(&op.name);
            t.ttl_ns = ttl_ms.saturating_mul(1_000_000);
        }
        t.alive.push((op.inv_ns, safe_deadline_ns));
    }
    // ...then renewals and releases.
    for op in ops.iter().filter(|o| o.kind == Kind::Ok) {
        let Some(tenures) = by_key.get_mut(op.key.as_str()) else {
            continue;
        };
        match (&op.call, &op.reply) {
            (Call::Renew { token }, Some(Reply::Renewed { safe_deadline_ns })) => {
                if let Some(t) = tenures.get_mut(token) {
                    t.alive.push((op.inv_ns, *safe_deadline_ns));
                }
            }
            (Call::Release { token }, Some(Reply::Released)) => {
                if let Some(t) = tenures.get_mut(token) {
                    t.release_inv = Some(t.release_inv.map_or(op.inv_ns, |r| r.min(op.inv_ns)));
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeMap::new();
    for (key, tenures) in by_key {
        let tokens: Vec<u64> = tenures.keys().copied().collect();
        let mut bars = Vec::with_capacity(tokens.len());
        for (i, token) in tokens.iter().enumerate() {
            let t = &tenures[token];
            let next_inv = tokens.get(i + 1).map(|n| tenures[n].first_inv);
            let hard_end = [t.release_inv, next_inv, Some(end_ns)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end_ns);
            let expiry = t
                .alive
                .iter()
                .filter(|&&(inv, _)| inv < hard_end)
                .map(|&(inv, safe)| safe.unwrap_or(inv.saturating_add(t.ttl_ns)))
                .max();
            // The first candidate wins ties.
            let (end, reason) = [
                (t.release_inv, EndReason::Released),
                (next_inv, EndReason::Superseded),
                (expiry, EndReason::Expired),
                (Some(end_ns), EndReason::HistoryEnd),
            ]
            .into_iter()
            .filter_map(|(e, r)| e.map(|e| (e, r)))
            .min_by_key(|&(e, _)| e)
            .unwrap_or((end_ns, EndReason::HistoryEnd));
            bars.push(Bar {
                key: key.to_string(),
                token: *token,
                client: t.client.clone(),
                name: t.name.clone(),
                start: t.start,
                end: end.max(t.start),
                reason,
                renewals: t.alive.len().saturating_sub(1),
            });
        }
        out.insert(key.to_string(), bars);
    }
    out
}

/// The keys drawn: keys with violations first, then the rest in order, up to `cap`;
/// returned in natural order, with how many were left out.
pub(super) fn select_keys(
    all: &BTreeSet<String>,
    with_violations: &BTreeSet<String>,
    cap: usize,
) -> (Vec<String>, usize) {
    let mut sorted: Vec<&String> = all.iter().collect();
    sorted.sort_by_cached_key(|k| natural_key(k));
    let mut chosen: Vec<String> = sorted
        .iter()
        .filter(|k| with_violations.contains(k.as_str()))
        .take(cap)
        .map(|k| k.to_string())
        .collect();
    for k in &sorted {
        if chosen.len() >= cap {
            break;
        }
        if !with_violations.contains(k.as_str()) {
            chosen.push(k.to_string());
        }
    }
    chosen.sort_by_cached_key(|k| natural_key(k));
    let omitted = all.len() - chosen.len();
    (chosen, omitted)
}
