//! The `guard-holders` workload (leases held through the client library's `LeaseGuard`,
//! each believed window written as a `belief` line) and the revoker that ends them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::{GuardedClaim, LeaseGuard, LossReason, ReleaseOutcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{failed, holding, perform, Ctx, Worker, OP_TIMEOUT};
use crate::history::{BeliefEvent, Call, Kind, Nanos, Reply};

/// The TTL of `guard-holders` leases: long enough that their renewals (every third of it)
/// rarely find a loss before the push does, so the `notice` checker sees the push; short
/// enough that a revoke's hold (this long) ends well within the run.
pub const GUARD_TTL: Duration = Duration::from_millis(9000);
/// A `guard-holders` worker holds its lease this long at least and at most before
/// releasing it: mostly long past a revoke, so that a holder that is not told keeps
/// believing (the `notice-canary`).
pub const GUARD_HOLD_MS: (u64, u64) = (1000, 8000);
/// The revoker waits this long at most between revokes (half of it at least).
pub const REVOKE_GAP_MS: u64 = 900;
impl Worker {
    /// One round of `guard-holders`: claim through the guard; hold until a random release
    /// time, the guard's loss or its safe deadline, whichever comes first; write the believed
    /// window. A lease that ended other than by its release is abandoned (nothing more is
    /// sent for it) and the worker goes on as a new process, so that no later claim of this
    /// client finds it still held.
    pub(super) async fn guard_round(&mut self) {
        let ctx = self.ctx.clone();
        let ttl_ms = GUARD_TTL.as_millis() as u64;
        let call = Call::Claim { ttl_ms };
        let key = self.key.clone();
        ctx.note_key(self.slot.workload, &key);
        let p = &self.proc_;
        ctx.rec
            .op(p, self.slot.workload, &key, &call, Kind::Invoke, None);
        let claimed =
            tokio::time::timeout(OP_TIMEOUT, p.client.claim_guarded(&key, &p.name, GUARD_TTL))
                .await;
        let (kind, reply, guard) = match claimed {
            Ok(Ok(GuardedClaim::Granted(guard))) => (
                Kind::Ok,
                Reply::Granted {
                    token: guard.token(),
                    already_held: false,
                    safe_deadline_ns: Some(ctx.rec.ns_of(guard.safe_until())),
                },
                Some(guard),
            ),
            Ok(Ok(GuardedClaim::Held { lease, .. })) => (
                Kind::Fail,
                Reply::Held {
                    holder: holding(&lease),
                },
                None,
            ),
            Ok(Err(e)) => {
                let (kind, reply) = failed(e);
                (kind, reply, None)
            }
            Err(_) => (
                Kind::Info,
                Reply::Unknown {
                    message: format!("no answer within {} ms", OP_TIMEOUT.as_millis()),
                },
                None,
            ),
        };
        let from_ns = ctx
            .rec
            .op(p, self.slot.workload, &key, &call, kind, Some(reply));
        self.slot.count(&key);
        let Some(guard) = guard else {
            if kind == Kind::Info {
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
            }
            self.nap(300).await;
            return;
        };
        let (shortest, longest) = GUARD_HOLD_MS;
        let release_at =
            Instant::now() + Duration::from_millis(self.rng.gen_range(shortest..=longest));
        let (to_ns, how, pushed) = self.hold(&guard, release_at).await;
        let token = guard.token();
        ctx.rec.belief(BeliefEvent {
            idx: 0,
            key: key.clone(),
            client: self.proc_.client_id.clone(),
            token,
            from_ns,
            to_ns,
            how: how.clone(),
            pushed,
            t_ns: 0,
        });
        if how == "released" {
            let call = Call::Release { token };
            let p = &self.proc_;
            ctx.rec
                .op(p, self.slot.workload, &key, &call, Kind::Invoke, None);
            let (kind, reply) = match tokio::time::timeout(OP_TIMEOUT, guard.release()).await {
                Ok(Ok(ReleaseOutcome::Released(_))) => (Kind::Ok, Reply::Released),
                Ok(Ok(ReleaseOutcome::Lost { current })) => (
                    Kind::Fail,
                    Reply::Lost {
                        current: current.as_ref().map(holding),
                    },
                ),
                Ok(Err(e)) => failed(e),
                Err(_) => (
                    Kind::Info,
                    Reply::Unknown {
                        message: format!("no answer within {} ms", OP_TIMEOUT.as_millis()),
                    },
                ),
            };
            ctx.rec
                .op(p, self.slot.workload, &key, &call, kind, Some(reply));
            self.slot.count(&key);
            if kind == Kind::Info {
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
            }
        } else {
            guard.abandon().await;
            self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
            // A revoked key stays unclaimable for the TTL: the slot moves on to a fresh one.
            self.slot.rotate(&key);
        }
        self.nap(300).await;
    }

    /// Holds `guard` until `release_at` (or the run's end), its loss, or its safe deadline:
    /// the belief's end on the history's clock, how it ended, and whether the loss was pushed.
    async fn hold(&self, guard: &LeaseGuard, release_at: Instant) -> (Nanos, String, bool) {
        let rec = &self.ctx.rec;
        loop {
            let safe = guard.safe_until();
            let now = Instant::now();
            if now >= safe {
                return (rec.ns_of(safe), "deadline".into(), false);
            }
            if now >= release_at || self.ctx.stopped() {
                return (rec.now_ns(), "released".into(), false);
            }
            // Wake at the first of the release time, the safe deadline and a short check of
            // the run's end; a renewal moves the deadline, so look again then.
            let wake = release_at.min(safe).min(now + Duration::from_millis(100));
            tokio::select! {
                reason = guard.lost() => {
                    let at = Instant::now().min(guard.safe_until());
                    let pushed = matches!(reason, LossReason::Ended(_));
                    return (rec.ns_of(at), format!("lost: {reason}"), pushed);
                }
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }
}

/// Revokes one of the keys in use every [`REVOKE_GAP_MS`] / 2 to [`REVOKE_GAP_MS`] until
/// `ctx.stop`: with `now`, freeing the key at once (`revoke --now`); without, holding it back
/// for the revoked lease's TTL (the default).
pub async fn run_revoker(ctx: Arc<Ctx>, now: bool, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut p = ctx.new_proc("revoker");
    tokio::time::sleep(Duration::from_millis(500)).await;
    while !ctx.stopped() {
        let gap = rng.gen_range(REVOKE_GAP_MS / 2..=REVOKE_GAP_MS);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let Some((workload, key)) = ctx.revoker_key(&mut rng) else {
            continue;
        };
        let (kind, _) = perform(&ctx, &p, &workload, &key, Call::Revoke { now }).await;
        if kind == Kind::Info {
            p = ctx.new_proc("revoker");
        }
    }
}
