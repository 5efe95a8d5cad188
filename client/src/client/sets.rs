//! [`Client::claim_set`]: every key of a set, or none, in one log entry.

use super::*;
use crate::guard::LeaseGuard;
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
        Ok(match self.claim_set(keys, holder_name, ttl).await? {
            SetOutcome::Granted(grants) => GuardedSet::Granted(
                grants
                    .into_iter()
                    .map(|grant| LeaseGuard::start(self.clone(), grant))
                    .collect(),
            ),
            SetOutcome::Blocked(blocked) => GuardedSet::Blocked(blocked),
        })
    }
}
