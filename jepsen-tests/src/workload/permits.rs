//! The `permit-holders` workload: workers claim one of the N permits of their slot's keys
//! ([`PERMIT_KEYS`]: two keys, N = 2 and 3; worker `w` on key `w % 2`, so that with eight
//! workers each key has four claimants, more than its N) with `Client::claim_permit`, hold a
//! granted permit 50 ms to 1.5 s, renewing it every [`RENEW_EVERY`], and release it with its
//! own token; one round in [`ABANDON_ONE_IN`] walks away instead (the process is retired and
//! its permit left to expire). Every claim, renewal and release is a `permit` line, written
//! when it returned, for the `permits` checker.
//!
//! [`leak_check`] is the run's check after the workload stopped: N fresh claimants of a key
//! claim until granted (within [`PERMIT_LEAK_LIMIT`]), then, while they hold, one more
//! claims (it must be held), then all release; every step a `permit` line marked `after`.

use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Error, KeyHolders, ReleaseOutcome, RenewOutcome, Sharing};
use rand::Rng;

use super::{failed, Ctx, Proc, Worker, OP_TIMEOUT};
use crate::history::{Kind, PermitEvent};

/// The TTL of a permit: a worker renews it every [`RENEW_EVERY`], so it ends by its release
/// (or the worker walking away), not its expiry, unless a fault cuts the worker off.
pub const PERMIT_TTL: Duration = Duration::from_millis(3000);
/// The N of each key of a slot, in order: key `pe/<slot>/<i>` has `PERMIT_KEYS[i]` permits.
pub const PERMIT_KEYS: [u32; 2] = [2, 3];
/// A worker holds a granted permit this long at least and at most, in ms.
pub const PERMIT_HOLD_MS: (u64, u64) = (50, 1500);
/// How long after its first claim the leak check may take to be granted N permits of a key:
/// a permit whose holder walked away or was cut off ends within its TTL of its last renewal,
/// and the rest is room for the leader to commit the expiries.
pub const PERMIT_LEAK_LIMIT: Duration = Duration::from_millis(3000 + 5000);
/// A holder renews its permit this often while it holds it.
const RENEW_EVERY: Duration = Duration::from_millis(700);
/// One round in this many, the holder walks away from its permit (no release).
const ABANDON_ONE_IN: u32 = 10;

/// Where a step's line goes: a `permit` line (`permit-holders`) or a `shared` line
/// (`shared-holders`, whose claims ask to share a key or to hold it alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Book {
    Permit,
    Shared,
}

impl Book {
    fn record(self, ctx: &Ctx, event: PermitEvent) {
        match self {
            Book::Permit => ctx.rec.permit(event),
            Book::Shared => ctx.rec.shared(event),
        }
    }
}

/// Key `i` of slot `slot`.
pub fn permit_key(slot: usize, i: usize) -> String {
    format!("pe/{slot}/{i}")
}

/// Every key of `slots` slots of `permit-holders`, with its N.
pub fn permit_keys(slots: usize) -> Vec<(String, u32)> {
    (0..slots)
        .flat_map(|slot| (0..PERMIT_KEYS.len()).map(move |i| (permit_key(slot, i), PERMIT_KEYS[i])))
        .collect()
}

/// A step's line (of a lease asked for as `sharing`), its answer to be filled in.
fn line(p: &Proc, step: &str, key: &str, sharing: Sharing, token: u64, after: bool) -> PermitEvent {
    PermitEvent {
        idx: 0,
        process: p.process,
        client: p.client_id.clone(),
        step: step.into(),
        what: "unknown".into(),
        key: key.into(),
        permits: match sharing {
            Sharing::Permits(n) => n,
            Sharing::Shared => 0,
        },
        token,
        already_held: false,
        safe_deadline_ns: None,
        told_permits: 0,
        holders: Vec::new(),
        shared: sharing == Sharing::Shared,
        told_shared: false,
        reason: String::new(),
        after,
        ttl_ms: PERMIT_TTL.as_millis() as u64,
        inv_ns: 0,
        ret_ns: 0,
        t_ns: 0,
    }
}

/// What an answer told of the key's holders, into `event`.
fn tell(event: &mut PermitEvent, holders: &KeyHolders) {
    event.told_permits = holders.permits;
    event.told_shared = holders.shared;
    event.holders = holders
        .holders
        .iter()
        .map(|l| (l.holder_client_id.clone(), l.token))
        .collect();
}

/// How a step ended, for the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// As hoped: granted (with its token), renewed, released.
    Done(u64),
    /// A definite no: held, refused, lost.
    No,
    /// No answer, or a refusal of what this process holds: the process is retired (what it
    /// holds is unknown from then on).
    Retire,
}

/// Claims `key` as `p`, as `sharing` asks (one of N permits, or shared), and records it
/// in `book`.
pub(super) async fn claim(
    ctx: &Ctx,
    p: &Proc,
    (key, sharing): (&str, Sharing),
    book: Book,
    after: bool,
) -> Ended {
    let mut event = line(p, "claim", key, sharing, 0, after);
    event.inv_ns = ctx.rec.now_ns();
    let answer = tokio::time::timeout(
        OP_TIMEOUT,
        p.client.claim_permit(key, &p.name, PERMIT_TTL, sharing),
    )
    .await;
    event.ret_ns = ctx.rec.now_ns();
    let ended = match answer {
        Ok(Ok(ClaimOutcome::Granted(grant))) => {
            event.what = "granted".into();
            event.token = grant.lease.token;
            event.already_held = grant.already_held;
            event.safe_deadline_ns = Some(ctx.rec.ns_of(grant.safe_deadline));
            if let Some(holders) = &grant.permits {
                tell(&mut event, holders);
            }
            Ended::Done(grant.lease.token)
        }
        Ok(Ok(ClaimOutcome::Held { lease, permits, .. })) => {
            event.what = "held".into();
            match &permits {
                Some(holders) => tell(&mut event, holders),
                None => event.holders = vec![(lease.holder_client_id.clone(), lease.token)],
            }
            Ended::No
        }
        Ok(Err(Error::Refused(refusal))) => {
            event.what = "refused".into();
            event.reason = refusal.reason.as_str().to_string();
            if let Some(holders) = &refusal.permits {
                tell(&mut event, holders);
            }
            Ended::No
        }
        Ok(Err(e)) if failed(e.clone()).0 == Kind::Fail => {
            event.what = "refused".into();
            event.reason = e.to_string();
            Ended::No
        }
        Ok(Err(_)) | Err(_) => Ended::Retire,
    };
    book.record(ctx, event);
    ended
}

/// Renews (or, `release`, releases) the lease of `token` of `key` (asked for as `sharing`)
/// as `p`, and records it in `book`.
pub(super) async fn end_or_renew(
    ctx: &Ctx,
    p: &Proc,
    (key, sharing, token): (&str, Sharing, u64),
    (book, release): (Book, bool),
    after: bool,
) -> Ended {
    let step = if release { "release" } else { "renew" };
    let mut event = line(p, step, key, sharing, token, after);
    event.inv_ns = ctx.rec.now_ns();
    let answer = if release {
        match tokio::time::timeout(OP_TIMEOUT, p.client.release(key, token)).await {
            Ok(Ok(ReleaseOutcome::Released(_))) => Ok(Ok(None)),
            Ok(Ok(ReleaseOutcome::Lost { .. })) => Ok(Err(())),
            Ok(Err(e)) => Err(Some(e)),
            Err(_) => Err(None),
        }
    } else {
        match tokio::time::timeout(OP_TIMEOUT, p.client.renew(key, token)).await {
            Ok(Ok(RenewOutcome::Renewed(grant))) => Ok(Ok(Some(grant.safe_deadline))),
            Ok(Ok(RenewOutcome::Lost { .. })) => Ok(Err(())),
            Ok(Err(e)) => Err(Some(e)),
            Err(_) => Err(None),
        }
    };
    event.ret_ns = ctx.rec.now_ns();
    let ended = match answer {
        Ok(Ok(deadline)) => {
            event.what = step_done(release).into();
            event.safe_deadline_ns = deadline.map(|d| ctx.rec.ns_of(d));
            Ended::Done(token)
        }
        Ok(Err(())) => {
            event.what = "lost".into();
            Ended::No
        }
        Err(Some(e)) if failed(e.clone()).0 == Kind::Fail => {
            event.what = "refused".into();
            event.reason = e.to_string();
            Ended::Retire
        }
        Err(_) => Ended::Retire,
    };
    book.record(ctx, event);
    ended
}

fn step_done(release: bool) -> &'static str {
    if release {
        "released"
    } else {
        "renewed"
    }
}

impl Worker {
    /// One round of `permit-holders`: claim one of the key's N permits; if granted, hold it
    /// a while, renewing it, and release it (or walk away). A step with no answer retires
    /// the process.
    pub(super) async fn permit_round(&mut self) {
        let i = self.w % PERMIT_KEYS.len();
        let key = permit_key(self.slot.index, i);
        self.hold_round((&key, PERMIT_KEYS[i].into()), Book::Permit)
            .await;
    }

    /// One round of a key asked for as `sharing`, every step recorded in `book`: claim it;
    /// if granted, hold it [`PERMIT_HOLD_MS`], renewing it every [`RENEW_EVERY`], and
    /// release it with its own token (or, one round in [`ABANDON_ONE_IN`], walk away). A
    /// step with no answer retires the process.
    pub(super) async fn hold_round(&mut self, (key, sharing): (&str, Sharing), book: Book) {
        let ctx = self.ctx.clone();
        let token = match claim(&ctx, &self.proc_, (key, sharing), book, false).await {
            Ended::Done(token) => token,
            Ended::No => return self.nap(200).await,
            Ended::Retire => return self.retire(),
        };
        let hold = self.rng.gen_range(PERMIT_HOLD_MS.0..=PERMIT_HOLD_MS.1);
        let until = Instant::now() + Duration::from_millis(hold);
        let lease = (key, sharing, token);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(RENEW_EVERY)).await;
            if Instant::now() >= until {
                break;
            }
            match end_or_renew(&ctx, &self.proc_, lease, (book, false), false).await {
                Ended::Done(_) => {}
                Ended::No => return self.nap(150).await,
                Ended::Retire => return self.retire(),
            }
        }
        if self.rng.gen_ratio(1, ABANDON_ONE_IN) {
            // Walks away: the lease is left to expire (this session may not claim the key
            // again while it holds it: a claim of its own lease would only renew it).
            return self.retire();
        }
        if end_or_renew(&ctx, &self.proc_, lease, (book, true), false).await == Ended::Retire {
            return self.retire();
        }
        self.nap(100).await;
    }

    /// Goes on as a new process (a fresh client id, so a fresh session).
    fn retire(&mut self) {
        self.proc_ = self.ctx.new_proc(&self.slot.names[self.w]);
    }
}

/// The leak check of one key of `permits` permits, after the workload stopped: `permits`
/// fresh claimants claim (each retried every 200 ms) until granted or [`PERMIT_LEAK_LIMIT`]
/// has passed; if all were granted, one more fresh claimant claims while they hold (it must
/// be held); then every one granted releases. Every step is recorded (`after`): the
/// `permits` checker judges them.
pub async fn leak_check(ctx: &Ctx, key: &str, permits: u32) {
    let start = Instant::now();
    let claimants = (0..permits).map(|i| async move {
        let name = format!("final-permit-{i}");
        let mut p = ctx.new_proc(&name);
        loop {
            match claim(ctx, &p, (key, permits.into()), Book::Permit, true).await {
                Ended::Done(token) => return Some((p, token)),
                Ended::Retire => p = ctx.new_proc(&name),
                Ended::No => {}
            }
            if start.elapsed() >= PERMIT_LEAK_LIMIT {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut held: Vec<(Proc, u64)> = futures::future::join_all(claimants)
        .await
        .into_iter()
        .flatten()
        .collect();
    if held.len() == permits as usize {
        let extra = ctx.new_proc("final-permit-extra");
        let asked = (key, permits.into());
        if let Ended::Done(token) = claim(ctx, &extra, asked, Book::Permit, true).await {
            held.push((extra, token));
        }
    }
    for (p, token) in &held {
        let lease = (key, permits.into(), *token);
        end_or_renew(ctx, p, lease, (Book::Permit, true), true).await;
    }
}
