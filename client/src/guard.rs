//! [`LeaseGuard`]: a granted lease kept alive in the background, with a safe deadline that
//! never claims more than the client can know, and a [`LeaseGuard::lost`] signal; plus
//! [`Client::claim_wait`], which waits for a held key without a thundering herd.
//!
//! # How the guard decides it holds the key
//! The guard holds the lease until its *safe deadline*: the first-attempt send time of the
//! latest successful grant or renewal + TTL × (1 − drift margin), on this process's
//! monotonic clock (see [`crate::safe_deadline`]). Only a successful renewal moves it. The
//! guard reports the lease lost when
//! - the cluster pushes that the lease ended (revoked, handed off, expired): at once, as the
//!   ending entry applies on the leader, through the session's one endings stream
//!   ([`crate::endings`]): [`LossReason::Ended`], or
//! - a renewal is refused (the token is no longer current): [`LossReason::Taken`], or
//! - the safe deadline passes with no successful renewal: [`LossReason::DeadlinePassed`],
//!   whatever the cluster answers later. Each renewal is retried only until the safe
//!   deadline (and for at most TTL / 4, so that one silent node cannot use up the window),
//!   so no answer arrives after it that the guard would act on.
//!
//! Once lost, a guard stays lost and stops renewing. [`LeaseGuard::is_held`] compares the
//! deadline with the clock on every call, so it turns false at the deadline even if the
//! background task has not run yet (a busy or paused runtime).
//!
//! Unlike etcd's `concurrency.Session`, the guard counts from the send time rather than
//! the reply (a slow reply cannot stretch the window), gives away the drift margin, and
//! reports the end of its window itself instead of waiting for the server to say so.

use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::error::Error;
use crate::handoff::Accepted;
use crate::retry::WaitPacer;
use crate::tasks::{NextFilter, NextOutcome, Unclaimable};
use crate::types::{
    AssignmentInfo, ClaimOutcome, Grant, LeaseInfo, ReleaseOutcome, RenewOutcome, Sharing,
};

/// Renewals per TTL when all goes well: the guard renews every TTL / 3, so two renewals in
/// a row may fail (or be slow) before the safe deadline is in danger.
pub const RENEWALS_PER_TTL: u32 = 3;

/// Fraction of the renew interval drawn at random either way (±10 %), so that many guards
/// started together do not renew together.
pub const RENEW_JITTER_FRACTION: f64 = 0.1;

/// After a failed renewal the guard tries again every TTL / 10 ...
pub const RENEW_RETRIES_PER_TTL: u32 = 10;

/// ... but no more often than this.
pub const RENEW_RETRY_INTERVAL_MIN: Duration = Duration::from_millis(50);

const _: () = assert!(RENEW_RETRIES_PER_TTL > RENEWALS_PER_TTL);

/// One renewal call (all its attempts) gets at most TTL / 4. A node that stopped answering
/// without closing its connections (SIGSTOP, a partition that drops packets) then costs one
/// call, not the whole safe window: the call marks that node unreachable, and the next call,
/// TTL / 10 later, goes to another node.
pub const RENEW_CALL_TTL_DIVISOR: u32 = 4;

const _: () = assert!(RENEW_CALL_TTL_DIVISOR > RENEWALS_PER_TTL);

/// Why a guard no longer holds its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LossReason {
    /// A renewal was refused: the token is no longer current. `current` = who holds the key
    /// now (`None` when it is free: revoked, or expired before the renewal arrived).
    Taken {
        /// The key's lease at the time of the refusal.
        current: Option<LeaseInfo>,
    },
    /// The safe deadline passed with no successful renewal (cluster unreachable or slow).
    /// The lease may still exist on the cluster, but the guard can no longer prove it.
    DeadlinePassed {
        /// The last renewal error, if a renewal failed (rather than still being in flight).
        last_error: Option<String>,
    },
    /// A renewal was refused for another reason than the token (e.g. the guard's client
    /// acts as another session than the lease's): it can never succeed, so the guard stops.
    Refused(Box<crate::error::Refusal>),
    /// The cluster pushed that the lease ended, with the facts: how, by whom, why, and who
    /// holds the key now.
    Ended(Box<crate::endings::Ending>),
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LossReason::Taken {
                current: Some(lease),
            } => write!(f, "taken by {} (token {})", lease.holder_name, lease.token),
            LossReason::Taken { current: None } => write!(
                f,
                "the token is no longer current (revoked or expired); the key is free"
            ),
            LossReason::DeadlinePassed {
                last_error: Some(error),
            } => write!(f, "safe deadline passed: {error}"),
            LossReason::DeadlinePassed { last_error: None } => {
                write!(f, "safe deadline passed before a renewal was answered")
            }
            LossReason::Refused(refusal) => write!(f, "a renewal was refused: {refusal}"),
            LossReason::Ended(ending) => write!(f, "{ending}"),
        }
    }
}

/// The answer to [`Client::claim_guarded`]: a guard on the lease, or the holder to stand
/// down for.
#[derive(Debug)]
pub enum GuardedClaim {
    /// The caller holds the key; the guard keeps the lease alive until released or lost.
    Granted(LeaseGuard),
    /// Someone else holds the key: stand down.
    Held {
        /// The current holder's lease.
        lease: LeaseInfo,
        /// The holder has the caller's name but is another process (another client id).
        same_name_other_process: bool,
        /// Who a dispatcher assigned the key to, if anyone; it reserved nothing.
        assignment: Option<AssignmentInfo>,
        /// Set when permits hold the key: every holder (see [`ClaimOutcome::Held`]).
        permits: Option<crate::types::KeyHolders>,
    },
}

/// The answer to [`Client::claim_next_guarded`].
#[derive(Debug)]
pub enum GuardedNext {
    /// The caller holds the task [`LeaseGuard::key`]; the guard keeps it alive.
    Granted(LeaseGuard),
    /// Nothing under the prefix was claimable: why each task was passed by.
    Nothing(Unclaimable),
}

/// What the renewal task publishes and every reader of the guard sees.
#[derive(Debug, Clone)]
struct GuardState {
    /// The latest granted or renewed view of the lease.
    lease: LeaseInfo,
    /// The current safe deadline; moves only on a successful renewal.
    safe_until: Instant,
    /// Set once, when the lease is lost; never cleared.
    lost: Option<LossReason>,
}

/// A granted lease, renewed in the background until it is released, dropped or lost.
///
/// Not `Clone`: one guard owns one background task. Share it by reference (for example
/// `Arc<LeaseGuard>`) to await [`LeaseGuard::lost`] from several places.
///
/// Dropping a guard that was neither released nor taken stops the renewals and, when a
/// tokio runtime is running, releases the key in a spawned task (best effort: if the
/// runtime shuts down first, the lease runs out after its TTL instead).
pub struct LeaseGuard {
    /// A clone of the caller's client, for the release; the renewal task has another.
    client: Client,
    key: String,
    token: u64,
    /// The renewal task's published state.
    state: watch::Receiver<GuardState>,
    /// Sending (or dropping) stops the renewal task. `None` once release has begun, which
    /// tells `Drop` not to release again.
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl LeaseGuard {
    /// Starts renewing `grant` in a task on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub(crate) fn start(client: Client, grant: Grant) -> LeaseGuard {
        let key = grant.lease.key.clone();
        let token = grant.lease.token;
        let (state_tx, state_rx) = watch::channel(GuardState {
            safe_until: grant.safe_deadline,
            lease: grant.lease,
            lost: None,
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        let followed = client.follow_lease(&key, token);
        let task = tokio::spawn(keep_alive(
            client.clone(),
            key.clone(),
            token,
            state_tx,
            stop_rx,
            followed,
        ));
        LeaseGuard {
            client,
            key,
            token,
            state: state_rx,
            stop: Some(stop_tx),
            task: Some(task),
        }
    }

    /// The key this guard holds.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token of the lease; a renewal keeps it.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The session the lease is bound to: the client id every renew, release, update,
    /// offer and cancel of it must come from. A child process that writes with
    /// [`LeaseGuard::token`] must act as this client id too (`baton run` passes it as
    /// `BATON_CLIENT_ID`).
    pub fn session(&self) -> &str {
        self.client.client_id()
    }

    /// The latest granted or renewed view of the lease.
    pub fn lease(&self) -> LeaseInfo {
        self.state.borrow().lease.clone()
    }

    /// The current safe deadline: the caller may act as the holder until this instant of
    /// its monotonic clock, unless the guard reports the lease lost earlier.
    pub fn safe_until(&self) -> Instant {
        self.state.borrow().safe_until
    }

    /// True while the lease is neither lost nor past its safe deadline (checked against the
    /// clock on every call).
    pub fn is_held(&self) -> bool {
        let state = self.state.borrow();
        state.lost.is_none() && Instant::now() < state.safe_until
    }

    /// Why the lease was lost, if the renewal task has said so; `None` while it is held,
    /// and also when only the safe deadline has passed and the task has not run since
    /// ([`LeaseGuard::is_held`] is false then).
    pub fn loss(&self) -> Option<LossReason> {
        self.state.borrow().lost.clone()
    }

    /// Completes when the lease is lost, with the reason. May be awaited any number of times
    /// and from several places; dropping the future is harmless.
    pub async fn lost(&self) -> LossReason {
        let mut state = self.state.clone();
        let lost = state
            .wait_for(|state| state.lost.is_some())
            .await
            .map(|state| state.lost.clone());
        match lost {
            Ok(Some(reason)) => reason,
            // The renewal task ended without a verdict: its runtime is shutting down (or it
            // panicked). Nothing renews any more, so the lease is lost at the safe deadline.
            Ok(None) | Err(_) => {
                let safe_until = state.borrow().safe_until;
                tokio::time::sleep_until(safe_until.into()).await;
                LossReason::DeadlinePassed {
                    last_error: Some("the renewal task stopped".into()),
                }
            }
        }
    }

    /// A future, independent of the guard's lifetime, that completes with the reason when
    /// the lease is lost, or with `None` when the guard stops without a loss (released,
    /// abandoned, dropped). For a task that must say so the moment it happens (an MCP
    /// server's notification) while the guard itself stays where it is kept.
    pub fn loss_signal(&self) -> impl std::future::Future<Output = Option<LossReason>> + Send {
        let mut state = self.state.clone();
        async move {
            let lost = state.wait_for(|state| state.lost.is_some()).await;
            lost.ok().and_then(|state| state.lost.clone())
        }
    }

    /// Stops renewing, then releases the key with the guard's token. A guard that was
    /// already lost gets [`ReleaseOutcome::Lost`] (or an error if the cluster is still
    /// unreachable); that is harmless.
    pub async fn release(self) -> Result<ReleaseOutcome, Error> {
        self.release_with_status("").await
    }

    /// [`LeaseGuard::release`], setting the record's status in the same entry (empty: the
    /// status is left as it is), like [`Client::release_with_status`].
    pub async fn release_with_status(mut self, status: &str) -> Result<ReleaseOutcome, Error> {
        self.stop_renewing().await;
        self.client
            .release_with_status(&self.key, self.token, status)
            .await
    }

    /// Stops renewing and does not release: the lease runs out at its TTL on the cluster,
    /// and the history records it as expired. For a holder that went quiet (an agent's
    /// tool server past its idle limit) and must not keep the key, yet did not say it is
    /// done with it. Returns the lease as last seen.
    pub async fn abandon(mut self) -> LeaseInfo {
        self.stop_renewing().await;
        self.lease()
    }

    /// Stops the renewal task and marks the guard as finished, so that `Drop` does not
    /// release.
    async fn stop_renewing(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            // The task stops at its next await point; a renewal in flight is abandoned.
            let _ = task.await;
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(stop) = self.stop.take() else {
            return; // Released (or being released) already.
        };
        drop(stop);
        if let Some(task) = self.task.take() {
            task.abort();
        }
        // A taken lease is someone else's now; anything else (held, or past its deadline
        // with the cluster unreachable) may still be ours on the cluster, and a release with
        // our token frees it sooner than the TTL would.
        let taken = matches!(
            self.state.borrow().lost,
            Some(LossReason::Taken { .. } | LossReason::Ended(_))
        );
        if taken {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let key = std::mem::take(&mut self.key);
            let token = self.token;
            runtime.spawn(async move {
                if let Err(error) = client.release(&key, token).await {
                    tracing::debug!(key = %key, token, %error, "release on drop failed");
                }
            });
        }
    }
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("LeaseGuard")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("safe_until", &state.safe_until)
            .field("lost", &state.lost)
            .finish_non_exhaustive()
    }
}

/// The wait between two successful renewals: TTL / 3, ±10 % drawn from `unit` in `[0, 1)`.
pub(crate) fn renew_interval(ttl: Duration, unit: f64) -> Duration {
    let base = ttl / RENEWALS_PER_TTL;
    let factor = 1.0 - RENEW_JITTER_FRACTION + 2.0 * RENEW_JITTER_FRACTION * unit.clamp(0.0, 1.0);
    base.mul_f64(factor)
}

/// The wait before retrying a failed renewal.
pub(crate) fn renew_retry_interval(ttl: Duration) -> Duration {
    (ttl / RENEW_RETRIES_PER_TTL).max(RENEW_RETRY_INTERVAL_MIN)
}

/// The renewal task: renews on schedule, publishes each new safe deadline, and publishes
/// the loss when a renewal is refused or the safe deadline passes. Ends when lost or told
/// to stop (the guard sent on or dropped `stop`).
async fn keep_alive(
    client: Client,
    key: String,
    token: u64,
    state: watch::Sender<GuardState>,
    mut stop: oneshot::Receiver<()>,
    followed: Option<crate::following::Registration>,
) {
    // The pushed ending, if the session's stream follows this lease; a feed that went
    // away tells nothing, and the renewals still decide.
    let mut followed = followed;
    let mut ended = std::pin::pin!(async move {
        match followed.as_mut() {
            Some(registration) => match (&mut registration.ended).await {
                Ok(ending) => ending,
                Err(_) => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    });
    let (mut safe_until, mut ttl) = {
        let state = state.borrow();
        (state.safe_until, state.lease.ttl)
    };
    let mut next_renew = Instant::now() + renew_interval(ttl, rand::thread_rng().gen());
    let mut last_error: Option<String> = None;
    let lose = |reason: LossReason| {
        tracing::debug!(key = %key, token, reason = %reason, "lease lost");
        state.send_modify(|state| {
            if state.lost.is_none() {
                state.lost = Some(reason);
            }
        });
    };

    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            ending = &mut ended => {
                lose(LossReason::Ended(Box::new(ending)));
                return;
            }
            () = tokio::time::sleep_until(safe_until.into()) => {
                lose(LossReason::DeadlinePassed { last_error });
                return;
            }
            () = tokio::time::sleep_until(next_renew.into()) => {}
        }

        let send_time = Instant::now();
        // No answer after the safe deadline is of any use, so no attempt runs past it.
        let deadline = safe_until
            .min(client.retry_deadline_from_now())
            .min(send_time + ttl / RENEW_CALL_TTL_DIVISOR);
        let outcome = tokio::select! {
            biased;
            _ = &mut stop => return,
            ending = &mut ended => {
                lose(LossReason::Ended(Box::new(ending)));
                return;
            }
            () = tokio::time::sleep_until(safe_until.into()) => {
                lose(LossReason::DeadlinePassed { last_error });
                return;
            }
            outcome = client.renew_until(&key, token, deadline) => outcome,
        };

        match outcome {
            Ok(RenewOutcome::Renewed(grant)) => {
                // The reply may come a moment after the deadline fired (both were ready at
                // once); a lease once reported lost stays lost.
                if Instant::now() >= safe_until {
                    lose(LossReason::DeadlinePassed { last_error });
                    return;
                }
                debug_assert_eq!(grant.lease.token, token, "a renewal keeps the token");
                safe_until = grant.safe_deadline;
                ttl = grant.lease.ttl;
                last_error = None;
                state.send_modify(|state| {
                    state.lease = grant.lease;
                    state.safe_until = safe_until;
                });
                next_renew = send_time + renew_interval(ttl, rand::thread_rng().gen());
                tracing::trace!(key = %key, token, "lease renewed");
            }
            Ok(RenewOutcome::Lost { current }) => {
                lose(LossReason::Taken { current });
                return;
            }
            // A refusal is final (another session's token cannot become ours): the lease is
            // not this guard's to keep.
            Err(Error::Refused(refusal)) => {
                lose(LossReason::Refused(refusal));
                return;
            }
            Err(error) => {
                tracing::debug!(key = %key, token, %error, "renewal failed; retrying");
                last_error = Some(error.to_string());
                next_renew = Instant::now() + renew_retry_interval(ttl);
            }
        }
    }
}

impl Client {
    /// Claims `key` and, if granted, returns a guard that keeps the lease alive.
    ///
    /// A key held by anyone else (including another process with the same name) gives
    /// [`GuardedClaim::Held`] at once; see [`Client::claim_wait_guarded`] to wait for it.
    pub async fn claim_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
    ) -> Result<GuardedClaim, Error> {
        self.claim_permit_guarded(key, holder_name, ttl, 1).await
    }

    /// [`Client::claim_permit`], the permit it grants kept alive by a [`LeaseGuard`] (`baton
    /// run --permits N`).
    pub async fn claim_permit_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
    ) -> Result<GuardedClaim, Error> {
        self.guard_room()?;
        let outcome = self.claim_permit(key, holder_name, ttl, permits).await?;
        Ok(self.guard(outcome))
    }

    /// [`Client::claim_next`], the task it grants kept alive by a [`LeaseGuard`] (`baton run
    /// --next`).
    pub async fn claim_next_guarded(
        &self,
        prefix: &str,
        holder_name: &str,
        ttl: Duration,
        filter: &NextFilter,
    ) -> Result<GuardedNext, Error> {
        self.guard_room()?;
        Ok(
            match self.claim_next(prefix, holder_name, ttl, filter).await? {
                NextOutcome::Granted(grant) => {
                    GuardedNext::Granted(LeaseGuard::start(self.clone(), *grant))
                }
                NextOutcome::Nothing(counts) => GuardedNext::Nothing(counts),
            },
        )
    }

    /// Refuses another guard past [`crate::endings::LEASES_PER_SESSION_MAX`], before
    /// anything is claimed.
    pub(crate) fn guard_room(&self) -> Result<(), Error> {
        if self.feed_full() {
            return Err(Error::InvalidArgument(format!(
                "this session follows {} leases already (LEASES_PER_SESSION_MAX); release \
                 some, or use another client (another session)",
                crate::endings::LEASES_PER_SESSION_MAX
            )));
        }
        Ok(())
    }

    /// Claims `key`; while it is held, claims again as soon as a watch on the key reports
    /// any event after the holder's latest renewal (a release, an expiry, a handoff), or
    /// else after a jittered backoff (from about 100 ms up to 2 s, shortened to just after
    /// the holder's reported end of lease), until it is granted or `timeout` has passed.
    /// Returns the last [`ClaimOutcome::Held`] on timeout: that is an answer, not an error.
    ///
    /// Waiting grants no priority: whichever claimant's claim reaches the cluster first
    /// after the key frees wins it. Waiters claim once per event on the key and otherwise
    /// about once per second or two.
    ///
    /// Each claim is retried as usual while the cluster is unavailable (until the retry
    /// deadline); an error ends the wait.
    pub async fn claim_wait(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<ClaimOutcome, Error> {
        self.claim_permit_wait(key, holder_name, ttl, 1, timeout)
            .await
    }

    /// [`Client::claim_wait`] for one of `permits` permits ([`Client::claim_permit`]):
    /// claims again at each event on the key (a permit released, expired) or after the
    /// backoff, shortened to just after the first holder's reported end of lease.
    pub async fn claim_permit_wait(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
        timeout: Duration,
    ) -> Result<ClaimOutcome, Error> {
        let permits = permits.into();
        let mut pacer = WaitPacer::until(Instant::now() + timeout);
        loop {
            let outcome = self.claim_permit(key, holder_name, ttl, permits).await?;
            let ClaimOutcome::Held { lease, .. } = &outcome else {
                return Ok(outcome);
            };
            let Some(delay) = pacer.next(lease.remaining) else {
                return Ok(outcome);
            };
            tracing::debug!(
                key = %key,
                holder = %lease.holder_name,
                delay_ms = delay.as_millis() as u64,
                "key held; waiting"
            );
            // Wake as soon as anything happens to the key (its holder releases it, it
            // expires, it is handed off), watching from just after the holder's latest
            // renewal so that nothing in between is missed; the timer stays as a fallback
            // (a compacted or unreachable watch). Waiting grants no priority: every waiter
            // wakes and claims, the first claim to commit wins.
            let basis = lease.basis;
            let wake = async {
                use futures::StreamExt;
                let mut events = self.watch(key, basis + 1);
                while let Some(item) = events.next().await {
                    match item {
                        Ok(event) if event.key == key => return,
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
                std::future::pending::<()>().await
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = wake => {}
            }
        }
    }

    /// [`Client::accept`], then a guard that keeps the new lease alive. The giver's guard,
    /// if it had one, hears at once that its lease was handed off.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn accept_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
    ) -> Result<(Accepted, LeaseGuard), Error> {
        self.guard_room()?;
        let accepted = self.accept(key, holder_name, ttl).await?;
        let guard = LeaseGuard::start(self.clone(), accepted.grant());
        Ok((accepted, guard))
    }

    /// [`Client::claim_wait`], then a guard on the lease if it was granted.
    pub async fn claim_wait_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<GuardedClaim, Error> {
        self.claim_permit_wait_guarded(key, holder_name, ttl, 1, timeout)
            .await
    }

    /// [`Client::claim_permit_wait`], then a guard on the permit if it was granted.
    pub async fn claim_permit_wait_guarded(
        &self,
        key: &str,
        holder_name: &str,
        ttl: Duration,
        permits: impl Into<Sharing>,
        timeout: Duration,
    ) -> Result<GuardedClaim, Error> {
        self.guard_room()?;
        let outcome = self
            .claim_permit_wait(key, holder_name, ttl, permits, timeout)
            .await?;
        Ok(self.guard(outcome))
    }

    pub(crate) fn guard(&self, outcome: ClaimOutcome) -> GuardedClaim {
        match outcome {
            ClaimOutcome::Granted(grant) => {
                GuardedClaim::Granted(LeaseGuard::start(self.clone(), grant))
            }
            ClaimOutcome::Held {
                lease,
                same_name_other_process,
                assignment,
                permits,
            } => GuardedClaim::Held {
                lease,
                same_name_other_process,
                assignment,
                permits,
            },
        }
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
