//! [`Client::post`] and [`Client::claim_next`]: the task board's writes.

use super::*;
use crate::tasks::{NextFilter, NextOutcome, Posted};

impl Client {
    /// Puts a task on the board: `key` gets a case file with `patch` applied to an empty
    /// record (status `open` unless the patch names one) and, with `to`, an assignment,
    /// without a claim; recorded as `posted` by `by` from this client's session. A key that
    /// already has a case file is refused ([`crate::RefusalReason::Exists`], naming its
    /// status and holder) unless `update`, which patches its record instead.
    pub async fn post(
        &self,
        key: &str,
        patch: RecordPatch,
        to: Option<&str>,
        by: &str,
        update: bool,
    ) -> Result<Posted, Error> {
        let request = pb::PostRequest {
            key: key.to_owned(),
            patch: Some(convert::patch_to_pb(patch)),
            to: to.unwrap_or_default().to_owned(),
            by: by.to_owned(),
            update,
            request_id: Some(self.next_request_id()),
        };
        let answer = self
            .call("post", request, |channel, request| async move {
                BatonClient::new(channel).post(request).await
            })
            .await?;
        convert::posted(key, answer.body)
    }

    /// Claims the first claimable key under `prefix` for `holder_name`, in one log entry:
    /// a key with a case file that is not held, not quarantined, not finished (status done,
    /// cancelled or closed), has every field of `filter.wheres`, and is assigned to no one
    /// or to `holder_name` (to anyone with `filter.any`); keys assigned to `holder_name`
    /// first, then in key order. Racing claimants each get a different key or
    /// [`NextOutcome::Nothing`], which says why every key was passed by.
    pub async fn claim_next(
        &self,
        prefix: &str,
        holder_name: &str,
        ttl: Duration,
        filter: &NextFilter,
    ) -> Result<NextOutcome, Error> {
        let request = pb::ClaimNextRequest {
            prefix: prefix.to_owned(),
            holder: Some(self.holder(holder_name)),
            ttl_ms: duration_ms(ttl),
            any: filter.any,
            r#where: filter
                .wheres
                .iter()
                .map(|(field, value)| pb::FieldIs {
                    field: field.clone(),
                    value: value.clone(),
                })
                .collect(),
            request_id: Some(self.next_request_id()),
        };
        let clock = self.grant_clock();
        let answer = self
            .call("claim_next", request, |channel, request| async move {
                BatonClient::new(channel).claim_next(request).await
            })
            .await?;
        convert::next_outcome(answer.body, clock)
    }
}
