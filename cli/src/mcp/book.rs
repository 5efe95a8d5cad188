//! The leases one `baton mcp` session holds for its agent, and what happened to them.
//!
//! The server, not the model, holds the leases: one [`LeaseGuard`] per claimed key, renewed
//! in the background, so the model never handles a raw token and cannot write with a stale
//! one. Renewal is idle-aware: every tool call marks the agent alive ([`Book::touch`]); once
//! no call has come for the idle limit, the watch ([`Book::lapse_if_idle`]) stops renewing
//! every lease without releasing it, so the cluster expires them at their TTL and records
//! them as expired (a dead agent does not hold work forever, nor is it credited with a
//! release it never asked for). A lease lost any way is reported once, in the next tool
//! result, as a [`Notice`] that says who ended it and why.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton_client::{Client, LeaseGuard, LossReason};

use crate::loss;
use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::Mutex;

/// Most keys one session may hold at once; a claim beyond it is refused before it reaches
/// the cluster. An agent holding more is almost certainly looping.
pub const LEASES_MAX: usize = 64;

/// Most notices kept for the next tool result; older ones are dropped and counted.
pub const NOTICES_MAX: usize = 256;

/// What the agent is told about a lease it no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Notice {
    /// The key.
    pub key: String,
    /// The token the session held it with; dead now.
    pub token: u64,
    /// How it ended: `revoked`, `expired`, `handed_off`, `taken`, `idle_lapsed`,
    /// `unconfirmed` (the cluster did not confirm a renewal in time) or `refused`.
    pub what: String,
    /// Who ended it, when the cluster says: the operator who revoked it, the taker of a
    /// handoff, the next holder.
    pub by: Option<String>,
    /// The facts in a line: the operator's reason, the cluster's words.
    pub detail: String,
    /// What to do now.
    pub instruction: String,
}

#[derive(Debug)]
struct Inner {
    /// The guard of each key this session holds.
    held: BTreeMap<String, LeaseGuard>,
    last_call: Instant,
    notices: Vec<Notice>,
    notices_dropped: u64,
}

/// Most leases whose loss waits to be announced at once (`serve`'s notifier); past it the
/// loss is told only in the next tool result.
pub const LOSS_TAPS_QUEUED_MAX: usize = 256;

/// A lease to announce the moment it is lost: its key, token and loss signal.
pub type LossTap = (
    String,
    u64,
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<LossReason>> + Send>>,
);

/// The session's leases and pending notices.
#[derive(Debug)]
pub struct Book {
    inner: Mutex<Inner>,
    idle: Duration,
    /// Where each kept guard's loss signal goes, when the server announces losses at once.
    taps: std::sync::OnceLock<tokio::sync::mpsc::Sender<LossTap>>,
}

/// One row of `my_claims`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HeldRow {
    /// The key.
    pub key: String,
    /// Its fencing token (pass it to systems that check tokens; the server uses it for you).
    pub token: u64,
    /// The lease's TTL; renewed every third of it while you keep calling tools.
    pub ttl_ms: u64,
    /// How long this session may still act as the holder without a further renewal.
    pub safe_for_ms: u64,
}

impl Book {
    /// An empty book whose leases lapse after `idle` without a tool call.
    pub fn new(idle: Duration) -> Book {
        Book {
            inner: Mutex::new(Inner {
                held: BTreeMap::new(),
                last_call: Instant::now(),
                notices: Vec::new(),
                notices_dropped: 0,
            }),
            idle,
            taps: std::sync::OnceLock::new(),
        }
    }

    /// Sends every guard kept from now on to `taps`, to announce its loss at once.
    pub fn tap_losses(&self, taps: tokio::sync::mpsc::Sender<LossTap>) {
        let _ = self.taps.set(taps);
    }

    /// The idle limit.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// A tool call arrived: the agent is alive. Moves every lease found lost since the
    /// last call into the notices (asking the cluster's history who ended it), and returns
    /// and clears the notices.
    pub async fn touch(&self, client: &Client) -> Vec<Notice> {
        let lost: BTreeMap<String, LeaseGuard> = {
            let mut inner = self.inner.lock().await;
            inner.last_call = Instant::now();
            let (lost, kept) = std::mem::take(&mut inner.held)
                .into_iter()
                .partition(|(_, guard)| !guard.is_held());
            inner.held = kept;
            lost
        };
        for (key, guard) in lost {
            let token = guard.token();
            let reason = guard.loss();
            // Stop it for good; never release a key we may no longer hold.
            let _ = guard.abandon().await;
            let notice = explain(client, &key, token, reason).await;
            self.push(notice).await;
        }
        let mut inner = self.inner.lock().await;
        let mut notices = std::mem::take(&mut inner.notices);
        if inner.notices_dropped > 0 {
            notices.push(Notice {
                key: String::new(),
                token: 0,
                what: "dropped".into(),
                by: None,
                detail: format!("{} older notices were dropped", inner.notices_dropped),
                instruction: "call my_claims to see what you hold".into(),
            });
            inner.notices_dropped = 0;
        }
        notices
    }

    async fn push(&self, notice: Notice) {
        let mut inner = self.inner.lock().await;
        if inner.notices.len() >= NOTICES_MAX {
            inner.notices.remove(0);
            inner.notices_dropped += 1;
        }
        inner.notices.push(notice);
    }

    /// The guard's token for `key`, if this session holds it (and has not found it lost).
    pub async fn token(&self, key: &str) -> Option<u64> {
        let inner = self.inner.lock().await;
        inner
            .held
            .get(key)
            .filter(|guard| guard.is_held())
            .map(|guard| guard.token())
    }

    /// How many keys the session holds.
    pub async fn len(&self) -> usize {
        self.inner.lock().await.held.len()
    }

    /// Keeps `guard`; a guard already kept for its key is replaced (and stopped without a
    /// release: the new grant is the same lease or a newer one).
    pub async fn insert(&self, guard: LeaseGuard) {
        if let Some(taps) = self.taps.get() {
            let tap = (
                guard.key().to_owned(),
                guard.token(),
                Box::pin(guard.loss_signal()) as std::pin::Pin<Box<_>>,
            );
            // A full queue only delays the news to the next tool result.
            let _ = taps.try_send(tap);
        }
        let old = {
            let mut inner = self.inner.lock().await;
            inner.held.insert(guard.key().to_owned(), guard)
        };
        if let Some(old) = old {
            let _ = old.abandon().await;
        }
    }

    /// Gives up the guard of `key` (to release it, or cancel an offer with its token).
    pub async fn take(&self, key: &str) -> Option<LeaseGuard> {
        self.inner.lock().await.held.remove(key)
    }

    /// The cluster refused a write made with this session's `token` for `key` because the
    /// token is dead (stale, or not this session's): the lease is lost now, whatever the
    /// guard has yet to notice. Stops the guard and leaves the notice for this very result.
    pub async fn refused_as_dead(&self, client: &Client, key: &str, token: u64) {
        let guard = {
            let mut inner = self.inner.lock().await;
            match inner.held.get(key) {
                Some(guard) if guard.token() == token => inner.held.remove(key),
                _ => None,
            }
        };
        if let Some(guard) = guard {
            let reason = guard.loss();
            let _ = guard.abandon().await;
            let notice = explain(client, key, token, reason).await;
            self.push(notice).await;
        }
    }

    /// The leases held, in key order.
    pub async fn rows(&self) -> Vec<HeldRow> {
        let inner = self.inner.lock().await;
        let now = Instant::now();
        inner
            .held
            .iter()
            .filter(|(_, guard)| guard.is_held())
            .map(|(key, guard)| {
                let lease = guard.lease();
                HeldRow {
                    key: key.clone(),
                    token: guard.token(),
                    ttl_ms: lease.ttl.as_millis() as u64,
                    safe_for_ms: guard
                        .safe_until()
                        .saturating_duration_since(now)
                        .as_millis() as u64,
                }
            })
            .collect()
    }

    /// If no tool call came for the idle limit, stops renewing every lease (they lapse at
    /// their TTL) and leaves a notice for each. Returns the keys let lapse.
    pub async fn lapse_if_idle(&self, now: Instant) -> Vec<String> {
        let lapsed: Vec<(String, LeaseGuard)> = {
            let mut inner = self.inner.lock().await;
            if !is_idle(inner.last_call, now, self.idle) {
                return Vec::new();
            }
            std::mem::take(&mut inner.held).into_iter().collect()
        };
        let mut keys = Vec::new();
        for (key, guard) in lapsed {
            let token = guard.token();
            let lease = guard.abandon().await;
            tracing::info!(key = %key, token, "idle limit passed: lease left to lapse");
            self.push(Notice {
                key: key.clone(),
                token,
                what: "idle_lapsed".into(),
                by: None,
                detail: format!(
                    "no tool call for {} (the idle limit): the server stopped renewing, and \
                     the lease ran out at its TTL ({} s)",
                    humantime::format_duration(self.idle),
                    lease.ttl.as_secs()
                ),
                instruction: format!(
                    "you no longer hold {key}: do not write its files; claim it again (and \
                     read its record) before you go on"
                ),
            })
            .await;
            keys.push(key);
        }
        keys
    }

    /// The session is over (its client went away): every lease is left to lapse at its
    /// TTL, none is released on the agent's behalf.
    pub async fn abandon_all(&self) -> usize {
        let held = std::mem::take(&mut self.inner.lock().await.held);
        let count = held.len();
        for (_, guard) in held {
            let _ = guard.abandon().await;
        }
        count
    }
}

/// No tool call for `idle` or longer.
pub fn is_idle(last_call: Instant, now: Instant, idle: Duration) -> bool {
    now.saturating_duration_since(last_call) >= idle
}

/// The notice for a lost lease: how it was lost (from the cluster's history), and what to do.
pub async fn explain(client: &Client, key: &str, token: u64, reason: Option<LossReason>) -> Notice {
    notice(key, token, loss::account(client, key, token, reason).await)
}

/// The notice for a lost lease as `loss` tells it, and what to do.
pub fn notice(key: &str, token: u64, loss: loss::Loss) -> Notice {
    let stop = format!("stop writing {key}'s files and tell whoever dispatched the work");
    let instruction = match loss.what.as_str() {
        loss::REVOKED => {
            format!("an operator took {key} from you: {stop}; do not claim it again unless told to")
        }
        loss::HANDED_OFF => format!(
            "your handoff of {key} was accepted: the taker owns it now; stop writing its files"
        ),
        loss::EXPIRED => {
            format!("{key} expired before a renewal reached the cluster: {stop}, or claim it again")
        }
        loss::RELEASED => format!("{key} was released: claim it again before you write"),
        _ => format!("you may no longer hold {key}: {stop}; probe it before you claim it again"),
    };
    Notice {
        key: key.to_owned(),
        token,
        what: loss.what,
        by: loss.by,
        detail: loss.detail,
        instruction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_from_the_limit_on_not_before() {
        let t0 = Instant::now();
        let idle = Duration::from_secs(900);
        assert!(!is_idle(t0, t0, idle));
        assert!(!is_idle(t0, t0 + idle - Duration::from_millis(1), idle));
        assert!(is_idle(t0, t0 + idle, idle));
        // A call stamped after `now` (the watch read the clock first) is not idle.
        assert!(!is_idle(t0 + Duration::from_secs(1), t0, idle));
    }
}
