//! Which key `claim-next` grants: the first claimable key under its prefix that has a case
//! file, keys assigned to the claimant's name first. Pure: the table's state decides.

use std::sync::Arc;

use super::LeaseTable;
use crate::core::limits::{CLAIM_NEXT_SCAN_MAX, FINISHED_STATUSES};
use crate::core::types::Unclaimable;

impl LeaseTable {
    /// Keys that start with `prefix`, after `start_after`, that `claim-next` could grant to
    /// anyone: not held, not quarantined, not finished, and assigned to no one (the assigned
    /// ones are `unclaimed`); at most `limit` of them; the flag says whether more match.
    pub fn open_tasks(&self, prefix: &str, start_after: &str, limit: usize) -> (Vec<&str>, bool) {
        let mut matching = self
            .cases
            .range::<str, _>(super::page_range(prefix, start_after))
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter(|(k, c)| {
                !self.is_held(k)
                    && c.quarantine.is_none()
                    && c.record.assigned_to.is_none()
                    && !FINISHED_STATUSES.contains(&c.record.status.as_str())
            })
            .map(|(k, _)| &**k);
        let page: Vec<&str> = matching.by_ref().take(limit).collect();
        let truncated = matching.next().is_some();
        (page, truncated)
    }

    /// The key `claim-next` grants `holder_name`, or why none can be: looks at the case files
    /// under `prefix` in key order, at most `CLAIM_NEXT_SCAN_MAX` of them. A key is claimable
    /// when it is not held, not quarantined, not finished, its record has every `wheres`
    /// field with that value, and it is assigned to no one, to `holder_name`, or `any` is set.
    /// The first key assigned to `holder_name` wins; else the first claimable one.
    pub(super) fn next_claimable(
        &self,
        prefix: &str,
        holder_name: &str,
        any: bool,
        wheres: &[(String, String)],
    ) -> Result<Arc<str>, Unclaimable> {
        let mut counts = Unclaimable::default();
        let mut first = None;
        let under = self
            .cases
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(key, _)| key.starts_with(prefix));
        for (key, case) in under {
            if counts.scanned == CLAIM_NEXT_SCAN_MAX as u64 {
                counts.truncated = true;
                break;
            }
            counts.scanned += 1;
            let record = &case.record;
            if self.is_held(key) {
                counts.held += 1;
            } else if case.quarantine.is_some() {
                counts.quarantined += 1;
            } else if FINISHED_STATUSES.contains(&record.status.as_str()) {
                counts.finished += 1;
            } else if !wheres
                .iter()
                .all(|(field, value)| record.fields.get(field) == Some(value))
            {
                counts.unmatched += 1;
            } else {
                match record.assigned_to.as_deref() {
                    Some(a) if a.to == holder_name => return Ok(key.clone()),
                    Some(_) if !any => counts.assigned_elsewhere += 1,
                    _ => {
                        first.get_or_insert_with(|| key.clone());
                    }
                }
            }
        }
        first.ok_or(counts)
    }
}
