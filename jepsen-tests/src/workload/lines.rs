//! The `waiters` workload: workers wait in the lines of their slot's [`WAIT_KEYS`] keys,
//! hold a granted key a while and release it. Even workers wait step by step (`Wait`,
//! renewing the place every [`RENEW_EVERY`] until granted or [`WAIT_GIVE_UP`]: each answer
//! is recorded, for the checker's first-in-line rule); odd ones wait as an application
//! does, with `Client::wait_in_line`, which hears of its grant pushed on the session's
//! endings stream. Every wait and every release is a `wait` line, written when it returned,
//! for the `lines` checker.
//!
//! `permit-waiters` is the same workload on keys of [`PERMIT_WAIT_N`] permits: each slot's
//! one key ([`PERMIT_WAIT_KEYS`]) is waited for as one of its permits
//! (`Client::wait_permit_once`, `Client::wait_permit_in_line`), by more workers than
//! permits, so that a line forms; each wait line carries the N it asked.
//!
//! [`line_leak_check`] is the run's check after the workload stopped: N fresh waiters of each
//! key must all be granted from its line within [`LINE_LEAK_LIMIT`] (no place or grant of a
//! waiter that walked away or was cut off stays), then one more must be put in line.

use std::time::{Duration, Instant};

use baton_client::{Error, LineOutcome, RefusalReason};
use rand::Rng;

use super::{failed, release_said, Ctx, Proc, Worker, OP_TIMEOUT};
use crate::history::{Kind, WaitEvent};

/// The TTL of a place in line and of the lease it is granted.
pub const WAIT_TTL: Duration = Duration::from_millis(3000);
/// Keys in a slot's pool: three workers on two keys keep a line.
pub const WAIT_KEYS: usize = 2;
/// The N of a `permit-waiters` key.
pub const PERMIT_WAIT_N: u32 = 2;
/// Keys in a `permit-waiters` slot: one, so that its workers (more than N) keep a line.
pub const PERMIT_WAIT_KEYS: usize = 1;
/// How long after its first wait the leak check may take to be granted all N of a key from
/// its line: a place or a lease of a waiter that walked away or was cut off lapses within
/// [`WAIT_TTL`] of its last renewal, and the rest is room for the leader to commit it.
pub const LINE_LEAK_LIMIT: Duration = Duration::from_millis(3000 + 5000);
/// How often a waiter renews its place (it learns of a grant then too).
const RENEW_EVERY: Duration = Duration::from_millis(300);
/// How long a worker waits in line before it leaves.
const WAIT_GIVE_UP: Duration = Duration::from_secs(6);
/// A worker holds a granted key this long at least and at most, in ms.
const WAIT_HOLD_MS: (u64, u64) = (50, 400);

impl Worker {
    /// One round of `waiters` (or `permit-waiters`): wait in a pool key's line until
    /// granted the key (or a permit of it), or give up and leave; hold it, release it. A step with no answer retires the process (its place or
    /// lease is left to lapse).
    pub(super) async fn wait_round(&mut self) {
        let ctx = self.ctx.clone();
        // The key alone (`waiters`), or one of N permits (`permit-waiters`).
        let (prefix, keys, permits) = match self.slot.workload {
            "permit-waiters" => ("wp", PERMIT_WAIT_KEYS, PERMIT_WAIT_N),
            _ => ("wl", WAIT_KEYS, 1),
        };
        let key = line_key(prefix, self.slot.index, self.rng.gen_range(0..keys));
        let mut event = wait_event(&self.proc_, &key, permits, false);
        let started = std::time::Instant::now();
        event.inv_ns = ctx.rec.now_ns();
        event.join_inv_ns = event.inv_ns;
        if self.w % 2 == 1 {
            return self.wait_in_line(event).await;
        }
        let mut first = true;
        let granted = loop {
            let inv = ctx.rec.now_ns();
            let answer = tokio::time::timeout(
                OP_TIMEOUT,
                self.proc_
                    .client
                    .wait_permit_once(&key, &self.proc_.name, WAIT_TTL, permits),
            )
            .await;
            let ret = ctx.rec.now_ns();
            if first {
                event.join_ret_ns = ret;
            }
            match answer {
                Ok(Ok(LineOutcome::Granted(grant))) => break Some(grant.lease.token),
                Ok(Ok(LineOutcome::InLine(place))) => {
                    if first {
                        event.joined_revision = place.joined_revision;
                    } else {
                        event.renewals.push((inv, ret));
                    }
                }
                Ok(Err(Error::Refused(r))) if r.reason == RefusalReason::LineFull => {
                    event.what = "full".into();
                    break None;
                }
                Ok(Err(e)) if first && failed(e.clone()).0 == Kind::Fail => {
                    // Refused outright before joining (no leader, say): nothing to record.
                    self.nap(200).await;
                    return;
                }
                Ok(Err(_)) | Err(_) => break None,
            }
            first = false;
            if started.elapsed() >= WAIT_GIVE_UP {
                event.left_ns = Some(ctx.rec.now_ns());
                let left = tokio::time::timeout(
                    OP_TIMEOUT,
                    self.proc_.client.leave_line(&key, &self.proc_.name),
                )
                .await;
                match left {
                    Ok(Ok((_, Some(lease)))) => break Some(lease.token),
                    Ok(Ok((_, None))) => {
                        event.what = "timeout".into();
                        break None;
                    }
                    Ok(Err(_)) | Err(_) => break None,
                }
            }
            tokio::time::sleep(RENEW_EVERY).await;
        };
        event.ret_ns = ctx.rec.now_ns();
        let Some(token) = granted else {
            let retire = event.what == "unknown";
            ctx.rec.wait(event);
            if retire {
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
            }
            // (A cluster that refuses at once, `format_pending` say, is not hammered.)
            self.nap(100).await;
            return;
        };
        self.hold_and_release(event, token).await;
    }

    /// A wait with `Client::wait_permit_in_line` (`Client::wait_in_line` for the key alone;
    /// its place and renewals are the library's: the line records it with no place, so it
    /// is checked as a grant, not as one ahead in line).
    async fn wait_in_line(&mut self, mut event: WaitEvent) {
        let ctx = self.ctx.clone();
        let (key, name) = (&event.key, &self.proc_.name);
        let answer = tokio::time::timeout(
            WAIT_GIVE_UP + OP_TIMEOUT,
            self.proc_
                .client
                .wait_permit_in_line(key, name, WAIT_TTL, event.permits, WAIT_GIVE_UP),
        )
        .await;
        event.ret_ns = ctx.rec.now_ns();
        event.join_ret_ns = event.ret_ns;
        let token = match answer {
            Ok(Ok(LineOutcome::Granted(grant))) => grant.lease.token,
            Ok(Ok(LineOutcome::InLine(_))) => {
                event.what = "timeout".into();
                event.left_ns = Some(event.ret_ns);
                ctx.rec.wait(event);
                self.nap(100).await;
                return;
            }
            Ok(Err(Error::Refused(r))) if r.reason == RefusalReason::LineFull => {
                event.what = "full".into();
                ctx.rec.wait(event);
                self.nap(100).await;
                return;
            }
            Ok(Err(_)) | Err(_) => {
                ctx.rec.wait(event);
                self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
                self.nap(100).await;
                return;
            }
        };
        self.hold_and_release(event, token).await;
    }

    /// Records the grant of `token` that ended `event`, holds the key a while and releases
    /// it.
    async fn hold_and_release(&mut self, mut event: WaitEvent, token: u64) {
        let ctx = self.ctx.clone();
        event.what = "granted".into();
        event.token = token;
        ctx.rec.wait(event.clone());
        let hold = self.rng.gen_range(WAIT_HOLD_MS.0..=WAIT_HOLD_MS.1);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let retire = release_recorded(&ctx, &self.proc_, event, token).await;
        if retire {
            self.proc_ = ctx.new_proc(&self.slot.names[self.w]);
        }
    }
}

/// The key `k` of slot `slot` of a lines workload (`wl`: `waiters`, `wp`: `permit-waiters`).
fn line_key(prefix: &str, slot: usize, k: usize) -> String {
    format!("{prefix}/{slot}/{k}")
}

/// Every key of `waiters` slots of `waiters` and `permit_waiters` slots of `permit-waiters`,
/// with its N (1: the key alone).
pub fn line_keys(waiters: usize, permit_waiters: usize) -> Vec<(String, u32)> {
    let alone = (0..waiters).flat_map(|s| (0..WAIT_KEYS).map(move |k| (line_key("wl", s, k), 1)));
    let of_permits = (0..permit_waiters)
        .flat_map(|s| (0..PERMIT_WAIT_KEYS).map(move |k| (line_key("wp", s, k), PERMIT_WAIT_N)));
    alone.chain(of_permits).collect()
}

/// A `wait` line of `p` for `key` (one of `permits`), its answer and times to be filled in.
fn wait_event(p: &Proc, key: &str, permits: u32, after: bool) -> WaitEvent {
    WaitEvent {
        idx: 0,
        process: p.process,
        client: p.client_id.clone(),
        step: "wait".into(),
        what: "unknown".into(),
        key: key.into(),
        permits,
        token: 0,
        joined_revision: 0,
        join_inv_ns: 0,
        join_ret_ns: 0,
        renewals: Vec::new(),
        left_ns: None,
        ttl_ms: WAIT_TTL.as_millis() as u64,
        after,
        inv_ns: 0,
        ret_ns: 0,
        t_ns: 0,
    }
}

/// Releases `token`, the grant `wait` told of, and records the release as a `release` line.
/// Returns whether the process must retire (the release got no answer, or a failure).
async fn release_recorded(ctx: &Ctx, p: &Proc, wait: WaitEvent, token: u64) -> bool {
    let inv = ctx.rec.now_ns();
    let released = tokio::time::timeout(OP_TIMEOUT, p.client.release(&wait.key, token)).await;
    let ret = ctx.rec.now_ns();
    let (what, retire) = release_said(released);
    ctx.rec.wait(WaitEvent {
        step: "release".into(),
        what: what.into(),
        token,
        renewals: Vec::new(),
        left_ns: None,
        inv_ns: inv,
        ret_ns: ret,
        ..wait
    });
    retire
}

/// The leak check of one line's key of `permits` (1: the key alone), after the workload
/// stopped: `permits` fresh waiters wait in its line (`Client::wait_permit_in_line`) until
/// granted or [`LINE_LEAK_LIMIT`] has passed (a wait with no answer is tried again by a fresh
/// session); if all were granted, one more fresh waiter waits once while they hold (it must
/// be put in line, not granted) and leaves the line; then every one granted releases. Every
/// step is a line marked `after`: the `lines` checker judges them, by the same rules as the
/// workload's and by its leak rule.
pub async fn line_leak_check(ctx: &Ctx, key: &str, permits: u32) {
    let start = Instant::now();
    let waiters = (0..permits).map(|i| async move {
        let name = format!("final-waiter-{i}");
        loop {
            let left = LINE_LEAK_LIMIT.saturating_sub(start.elapsed());
            if left.is_zero() {
                return None;
            }
            let p = ctx.new_proc(&name);
            let mut event = wait_event(&p, key, permits, true);
            event.inv_ns = ctx.rec.now_ns();
            event.join_inv_ns = event.inv_ns;
            let waited = p
                .client
                .wait_permit_in_line(key, &p.name, WAIT_TTL, permits, left);
            let answer = tokio::time::timeout(left + OP_TIMEOUT, waited).await;
            event.ret_ns = ctx.rec.now_ns();
            event.join_ret_ns = event.ret_ns;
            match answer {
                Ok(Ok(LineOutcome::Granted(grant))) => {
                    event.what = "granted".into();
                    event.token = grant.lease.token;
                    ctx.rec.wait(event.clone());
                    return Some((p, event));
                }
                Ok(Ok(LineOutcome::InLine(_))) => {
                    event.what = "timeout".into();
                    event.left_ns = Some(event.ret_ns);
                    ctx.rec.wait(event);
                    return None;
                }
                Ok(Err(Error::Refused(r))) if r.reason == RefusalReason::LineFull => {
                    event.what = "full".into();
                    ctx.rec.wait(event);
                }
                Ok(Err(_)) | Err(_) => ctx.rec.wait(event),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut held: Vec<(Proc, WaitEvent)> = futures::future::join_all(waiters)
        .await
        .into_iter()
        .flatten()
        .collect();
    if held.len() == permits as usize {
        if let Some(extra) = one_more_waits(ctx, key, permits).await {
            held.push(extra);
        }
    }
    for (p, wait) in held {
        let token = wait.token;
        release_recorded(ctx, &p, wait, token).await;
    }
}

/// The leak check's one more waiter, while the key's N are held by the check's waiters:
/// one wait (it must answer "in line"), then it leaves the line. Returns it with its grant
/// if it was granted (the checker's leak rule fails it), to be released.
async fn one_more_waits(ctx: &Ctx, key: &str, permits: u32) -> Option<(Proc, WaitEvent)> {
    let p = ctx.new_proc("final-waiter-extra");
    let mut event = wait_event(&p, key, permits, true);
    event.inv_ns = ctx.rec.now_ns();
    event.join_inv_ns = event.inv_ns;
    let once = p.client.wait_permit_once(key, &p.name, WAIT_TTL, permits);
    let answer = tokio::time::timeout(OP_TIMEOUT, once).await;
    event.join_ret_ns = ctx.rec.now_ns();
    event.ret_ns = event.join_ret_ns;
    let token = match answer {
        Ok(Ok(LineOutcome::Granted(grant))) => Some(grant.lease.token),
        Ok(Ok(LineOutcome::InLine(place))) => {
            event.joined_revision = place.joined_revision;
            event.left_ns = Some(ctx.rec.now_ns());
            let left = tokio::time::timeout(OP_TIMEOUT, p.client.leave_line(key, &p.name)).await;
            event.ret_ns = ctx.rec.now_ns();
            match left {
                Ok(Ok((_, Some(lease)))) => Some(lease.token),
                Ok(Ok((_, None))) => {
                    event.what = "timeout".into();
                    None
                }
                Ok(Err(_)) | Err(_) => None,
            }
        }
        Ok(Err(_)) | Err(_) => None,
    };
    match token {
        Some(token) => {
            event.what = "granted".into();
            event.token = token;
            ctx.rec.wait(event.clone());
            Some((p, event))
        }
        None => {
            ctx.rec.wait(event);
            None
        }
    }
}
