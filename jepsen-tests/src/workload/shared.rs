//! The `shared-holders` workload: workers claim their slot's keys ([`SHARED_KEYS`] of them;
//! worker `w` on key `w % 2`, so that with eight workers each key has four claimants), each
//! round either shared (`Client::claim_shared`) or exclusive (a plain `Client::claim`), by
//! the key's phase: the keys take turns, [`SHARED_PHASE`] each, between a shared phase (three
//! rounds in four shared, so the exclusive claims meet shared holders) and an exclusive one
//! (every round exclusive: the shared holders drain, then exclusive holders take the key in
//! turn, and the next shared phase's claims meet them); key 0 starts shared, key 1
//! exclusive. (Mixed at random all along, shared holders would never drain: claims that do
//! not wait in line grant shared holders beside shared holders for as long as one is left.)
//! A granted lease is held as `permit-holders` holds a permit (50 ms to 1.5 s, renewed every
//! 700 ms, released with its own token, or one round in ten walked away from). Every claim,
//! renewal and release is a `shared` line with the mode it asked, written when it returned,
//! for the `shared` checker.
//!
//! [`shared_leak_check`] is the run's check after the workload stopped: a fresh exclusive
//! claimant claims each key until granted (within [`SHARED_LEAK_LIMIT`]); while it holds,
//! one fresh shared claimant and one more fresh exclusive one claim (both must be held);
//! then it releases. Every step a `shared` line marked `after`.

use std::time::{Duration, Instant};

use baton_client::Sharing;
use rand::Rng;

use super::permits::{claim, end_or_renew, Book, Ended};
use super::{Ctx, Worker};

/// Keys per slot: key `sh/<slot>/<i>`.
pub const SHARED_KEYS: usize = 2;
/// How long each phase of a key lasts (shared, then exclusive, and so on).
pub const SHARED_PHASE: Duration = Duration::from_millis(3000);
/// In a shared phase, this many rounds in [`SHARED_ROUNDS_OF`] are shared.
const SHARED_ROUNDS: u32 = 3;
const SHARED_ROUNDS_OF: u32 = 4;
/// How long after its first claim the leak check's exclusive claimant may take to be granted
/// a key: a lease whose holder walked away or was cut off ends within its TTL
/// ([`super::PERMIT_TTL`], as the permits') of its last renewal, and the rest is room for the
/// leader to commit the expiries.
pub const SHARED_LEAK_LIMIT: Duration = Duration::from_millis(3000 + 5000);

/// Key `i` of slot `slot`.
pub fn shared_key(slot: usize, i: usize) -> String {
    format!("sh/{slot}/{i}")
}

/// Every key of `slots` slots of `shared-holders`.
pub fn shared_keys(slots: usize) -> Vec<String> {
    (0..slots)
        .flat_map(|slot| (0..SHARED_KEYS).map(move |i| shared_key(slot, i)))
        .collect()
}

impl Worker {
    /// One round of `shared-holders`: claim the worker's key shared or exclusively (as its
    /// key's phase says); if granted, hold it a while, renewing it, and release it (or walk
    /// away). A step with no answer retires the process.
    pub(super) async fn shared_round(&mut self) {
        let i = self.w % SHARED_KEYS;
        let key = shared_key(self.slot.index, i);
        let phase = self.ctx.rec.now_ns() / SHARED_PHASE.as_nanos() as u64 + i as u64;
        let shared = phase.is_multiple_of(2) && self.rng.gen_ratio(SHARED_ROUNDS, SHARED_ROUNDS_OF);
        let sharing = if shared {
            Sharing::Shared
        } else {
            Sharing::Permits(1)
        };
        self.hold_round((&key, sharing), Book::Shared).await;
    }
}

/// The leak check of one key, after the workload stopped: a fresh exclusive claimant
/// claims (retried every 200 ms) until granted or [`SHARED_LEAK_LIMIT`] has passed; if
/// granted, one fresh shared claimant and one more fresh exclusive claimant claim while it
/// holds (both must be held), then every one granted releases. Every step is recorded
/// (`after`): the `shared` checker judges them.
pub async fn shared_leak_check(ctx: &Ctx, key: &str) {
    let start = Instant::now();
    let exclusive = (key, Sharing::Permits(1));
    let mut p = ctx.new_proc("final-exclusive");
    let first = loop {
        match claim(ctx, &p, exclusive, Book::Shared, true).await {
            Ended::Done(token) => break Some(token),
            Ended::Retire => p = ctx.new_proc("final-exclusive"),
            Ended::No => {}
        }
        if start.elapsed() >= SHARED_LEAK_LIMIT {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let Some(token) = first else {
        return;
    };
    let mut held = vec![(p, exclusive.1, token)];
    for (name, sharing) in [
        ("final-shared-extra", Sharing::Shared),
        ("final-exclusive-extra", Sharing::Permits(1)),
    ] {
        let extra = ctx.new_proc(name);
        if let Ended::Done(token) = claim(ctx, &extra, (key, sharing), Book::Shared, true).await {
            held.push((extra, sharing, token));
        }
    }
    for (p, sharing, token) in &held {
        let lease = (key, *sharing, *token);
        end_or_renew(ctx, p, lease, (Book::Shared, true), true).await;
    }
}
