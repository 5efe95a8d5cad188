//! [`Client::claim_set`]: every key of a set, or none, in one log entry.

use super::*;
use crate::guard::LeaseGuard;
use crate::retry::WaitPacer;
use crate::sets::{BlockedKey, SetOutcome};

/// The answer to [`Client::claim_set_guarded`].
#[derive(Debug)]
pub enum GuardedSet {
    /// The caller holds every key, one guard per key in the order asked; each renews its
    /// key and tells of its loss on its own.
    Granted(Vec<LeaseGuard>),
    /// Nothing was granted: every key that blocked.
    Blocked(Vec<BlockedKey>),
}

impl Client {
    /// Claims every key in `keys` for `holder_name`, or none, in one log entry (1 to
    /// [`crate::sets::CLAIM_SET_KEYS_MAX`] distinct keys). Each key granted gets the entry's
    /// revision as its token; a key this session already holds keeps its token and is
    /// renewed. If any key is held by someone else or quarantined, nothing is granted and
    /// [`SetOutcome::Blocked`] names every such key with its holder. Renew and release the
    /// keys one by one, each with its own token (a set has no lease of its own).
    pub async fn claim_set(
        &self,
        keys: &[&str],
        holder_name: &str,
        ttl: Duration,
    ) -> Result<SetOutcome, Error> {
        let request = pb::ClaimSetRequest {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            holder: Some(self.holder(holder_name)),
            ttl_ms: duration_ms(ttl),
            request_id: Some(self.next_request_id()),
        };
        let clock = self.grant_clock();
        let answer = self
            .call("claim_set", request, |channel, request| async move {
                BatonClient::new(channel).claim_set(request).await
            })
            .await?;
        convert::set_outcome(answer.body, clock)
    }

    /// [`Client::claim_set`], with a [`LeaseGuard`] per key granted, renewing it in the
    /// background until it is released, dropped or lost.
    pub async fn claim_set_guarded(
        &self,
        keys: &[&str],
        holder_name: &str,
        ttl: Duration,
    ) -> Result<GuardedSet, Error> {
        self.guard_room()?;
        let outcome = self.claim_set(keys, holder_name, ttl).await?;
        Ok(self.guarded_set(outcome))
    }

    /// [`Client::claim_set`]; while the set is blocked, claims it again after a jittered
    /// backoff (from about 100 ms up to 2 s, shortened to just after the first blocking
    /// key's reported end), until it is granted or `timeout` has passed. Returns the last
    /// [`SetOutcome::Blocked`] on timeout: an answer, not an error. Waiting for a set is
    /// polling: it grants no priority, and a set is never granted in parts.
    pub async fn claim_set_wait(
        &self,
        keys: &[&str],
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<SetOutcome, Error> {
        let mut pacer = WaitPacer::until(Instant::now() + timeout);
        loop {
            let outcome = self.claim_set(keys, holder_name, ttl).await?;
            let SetOutcome::Blocked(blocked) = &outcome else {
                return Ok(outcome);
            };
            let first_free = blocked
                .iter()
                .map(|b| match b {
                    BlockedKey::Held { lease, .. } => lease.remaining,
                    BlockedKey::Quarantined { remaining, .. } => *remaining,
                })
                .min()
                .unwrap_or_default();
            let Some(delay) = pacer.next(first_free) else {
                return Ok(outcome);
            };
            tokio::time::sleep(delay).await;
        }
    }

    /// [`Client::claim_set_wait`], with a [`LeaseGuard`] per key once the set is granted.
    pub async fn claim_set_wait_guarded(
        &self,
        keys: &[&str],
        holder_name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<GuardedSet, Error> {
        self.guard_room()?;
        let outcome = self.claim_set_wait(keys, holder_name, ttl, timeout).await?;
        Ok(self.guarded_set(outcome))
    }

    fn guarded_set(&self, outcome: SetOutcome) -> GuardedSet {
        match outcome {
            SetOutcome::Granted(grants) => GuardedSet::Granted(
                grants
                    .into_iter()
                    .map(|grant| LeaseGuard::start(self.clone(), grant))
                    .collect(),
            ),
            SetOutcome::Blocked(blocked) => GuardedSet::Blocked(blocked),
        }
    }
}
