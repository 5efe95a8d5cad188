//! The `set-takers` workload: workers claim sets of 2 or 3 keys out of their slot's pool of
//! [`SET_KEYS`] with `claim-set` (all or none), hold a granted set a while and release its
//! keys one by one. Every claim and every release is a `set` line, written when it returned,
//! for the `sets` checker.

use std::time::Duration;

use baton_client::{BlockedKey, ClaimOutcome, ReleaseOutcome, SetOutcome};
use rand::seq::SliceRandom;
use rand::Rng;

use super::{failed, release_said, Worker, OP_TIMEOUT};
use crate::history::{Kind, Nanos, SetEvent};

/// The TTL of each key's lease: a worker holds a set at most a third of it, so its leases end
/// by their releases, not their expiry, unless a fault cuts a release off.
pub const SET_TTL: Duration = Duration::from_millis(3000);
/// A worker holds a granted set this long at least and at most, in ms.
pub const SET_HOLD_MS: (u64, u64) = (50, 900);
/// Keys in a slot's pool; each claim asks for 2 or 3 of them.
pub const SET_KEYS: usize = 6;

impl Worker {
    /// One round of `set-takers`: claim a random set of 2 or 3 of the pool's keys, in random
    /// order; if granted, hold it and release each key. A step with no answer retires the
    /// process (what it holds is unknown from then on), and so does a release refused
    /// outright (its key may still be held by this client, whose next claim of it would be a
    /// renewal: the workload never asks for a key it already holds).
    pub(super) async fn set_round(&mut self) {
        let ctx = self.ctx.clone();
        let mut pool: Vec<String> = (0..SET_KEYS)
            .map(|i| format!("ts/{}/{i}", self.slot.index))
            .collect();
        pool.shuffle(&mut self.rng);
        pool.truncate(self.rng.gen_range(2..=3));
        let keys = pool;
        let ttl_ms = SET_TTL.as_millis() as u64;
        let (process, client) = (self.proc_.process, self.proc_.client_id.clone());
        let line = |step: &str, what: &str, keys: Vec<String>, tokens, inv_ns, ret_ns| SetEvent {
            idx: 0,
            process,
            client: client.clone(),
            step: step.into(),
            what: what.into(),
            keys,
            tokens,
            blocked: Vec::new(),
            ttl_ms,
            inv_ns,
            ret_ns,
            t_ns: 0,
        };
        let asked: Vec<&str> = keys.iter().map(String::as_str).collect();
        let inv = ctx.rec.now_ns();
        let claimed = tokio::time::timeout(
            OP_TIMEOUT,
            self.proc_
                .client
                .claim_set(&asked, &self.proc_.name, SET_TTL),
        )
        .await;
        let ret = ctx.rec.now_ns();
        let grants = match claimed {
            Ok(Ok(SetOutcome::Granted(grants))) => grants,
            Ok(Ok(SetOutcome::Blocked(blocked))) => {
                let held = blocked
                    .iter()
                    .filter_map(|b| match b {
                        BlockedKey::Held { lease, .. } => Some((
                            lease.key.clone(),
                            lease.holder_client_id.clone(),
                            lease.token,
                        )),
                        BlockedKey::Quarantined { .. } => None,
                    })
                    .collect();
                ctx.rec.set(SetEvent {
                    blocked: held,
                    ..line("claim-set", "blocked", keys, Vec::new(), inv, ret)
                });
                self.nap(100).await;
                return;
            }
            Ok(Err(e)) if failed(e.clone()).0 == Kind::Fail => {
                self.nap(200).await;
                return;
            }
            Ok(Err(_)) | Err(_) => {
                ctx.rec
                    .set(line("claim-set", "unknown", keys, Vec::new(), inv, ret));
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
                return;
            }
        };
        let tokens: Vec<u64> = grants.iter().map(|g| g.lease.token).collect();
        ctx.rec
            .set(line("claim-set", "granted", keys, tokens, inv, ret));
        let hold = self.rng.gen_range(SET_HOLD_MS.0..=SET_HOLD_MS.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        for g in &grants {
            let (key, token) = (g.lease.key.clone(), g.lease.token);
            let inv: Nanos = ctx.rec.now_ns();
            let released =
                tokio::time::timeout(OP_TIMEOUT, self.proc_.client.release(&key, token)).await;
            let ret = ctx.rec.now_ns();
            let (what, retire) = release_said(released);
            ctx.rec
                .set(line("release", what, vec![key], vec![token], inv, ret));
            if retire {
                // The rest of the set is left to expire.
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
                return;
            }
        }
    }

    /// One round of the set canary: the same sets, claimed key by key with single claims,
    /// as a hand-made recipe does. A held key ends the round `blocked`, naming its holder;
    /// the keys taken before it stay taken until their TTL (nothing undoes them). A set
    /// taken whole is `granted` with each key's own token, then held and released.
    pub(super) async fn set_round_key_by_key(&mut self) {
        let ctx = self.ctx.clone();
        let mut keys: Vec<String> = (0..SET_KEYS)
            .map(|i| format!("ts/{}/{i}", self.slot.index))
            .collect();
        keys.shuffle(&mut self.rng);
        keys.truncate(self.rng.gen_range(2..=3));
        let ttl_ms = SET_TTL.as_millis() as u64;
        let (process, client) = (self.proc_.process, self.proc_.client_id.clone());
        let line = |what: &str, keys: Vec<String>, tokens, blocked, inv_ns, ret_ns| SetEvent {
            idx: 0,
            process,
            client: client.clone(),
            step: "claim-set".into(),
            what: what.into(),
            keys,
            tokens,
            blocked,
            ttl_ms,
            inv_ns,
            ret_ns,
            t_ns: 0,
        };
        let inv = ctx.rec.now_ns();
        let mut tokens = Vec::new();
        for key in &keys {
            let claimed = tokio::time::timeout(
                OP_TIMEOUT,
                self.proc_.client.claim(key, &self.proc_.name, SET_TTL),
            )
            .await;
            match claimed {
                Ok(Ok(ClaimOutcome::Granted(g))) => tokens.push(g.lease.token),
                Ok(Ok(ClaimOutcome::Held { lease, .. })) => {
                    let blocked = vec![(key.clone(), lease.holder_client_id, lease.token)];
                    let ret = ctx.rec.now_ns();
                    ctx.rec
                        .set(line("blocked", keys, Vec::new(), blocked, inv, ret));
                    self.nap(100).await;
                    return;
                }
                _ => {
                    let ret = ctx.rec.now_ns();
                    ctx.rec
                        .set(line("unknown", keys, Vec::new(), Vec::new(), inv, ret));
                    self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
                    return;
                }
            }
        }
        let ret = ctx.rec.now_ns();
        ctx.rec.set(line(
            "granted",
            keys.clone(),
            tokens.clone(),
            Vec::new(),
            inv,
            ret,
        ));
        let hold = self.rng.gen_range(SET_HOLD_MS.0..=SET_HOLD_MS.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        for (key, token) in keys.into_iter().zip(tokens) {
            let inv = ctx.rec.now_ns();
            let released =
                tokio::time::timeout(OP_TIMEOUT, self.proc_.client.release(&key, token)).await;
            let ret = ctx.rec.now_ns();
            let released = matches!(released, Ok(Ok(ReleaseOutcome::Released(_))));
            let what = if released { "released" } else { "unknown" };
            ctx.rec.set(SetEvent {
                step: "release".into(),
                ..line(what, vec![key], vec![token], Vec::new(), inv, ret)
            });
            if !released {
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
                return;
            }
        }
    }
}
