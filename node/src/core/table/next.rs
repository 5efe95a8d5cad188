//! Which key `claim-next` grants: the first claimable key under its prefix that has a case
//! file, keys assigned to the claimant's name first. Pure: the table's state decides.

use std::ops::Bound;
use std::sync::Arc;

use super::LeaseTable;
use crate::core::case::CaseFile;
use crate::core::limits::CLAIM_NEXT_SCAN_MAX;
use crate::core::types::{Op, Outcome, Unclaimable};

/// Which keys a `claim-next` walks, by the command's data format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// Every key with a case file, finished ones included, each counted against
    /// `CLAIM_NEXT_SCAN_MAX` (`Op::ClaimNext`, data format 9).
    EveryCaseFile,
    /// Only the keys whose status is not finished (`Op::ClaimNextUnfinished`, data format
    /// 14): finished work piling up under a prefix neither slows the walk nor uses it up.
    Unfinished,
}

impl LeaseTable {
    /// Keys that start with `prefix`, after `start_after`, that `claim-next` could grant to
    /// anyone: not held, not quarantined, not finished, and assigned to no one (the assigned
    /// ones are `unclaimed`); at most `limit` of them; the flag says whether more match.
    pub fn open_tasks(&self, prefix: &str, start_after: &str, limit: usize) -> (Vec<&str>, bool) {
        let mut matching = self
            .unfinished
            .range::<str, _>(super::page_range(prefix, start_after))
            .take_while(|k| k.starts_with(prefix))
            .map(|k| (&**k, &*self.cases[&**k]))
            .filter(|(k, c)| {
                !self.is_held(k) && c.quarantine.is_none() && c.record.assigned_to.is_none()
            })
            .map(|(k, _)| k);
        let page: Vec<&str> = matching.by_ref().take(limit).collect();
        let truncated = matching.next().is_some();
        (page, truncated)
    }

    /// For a `claim-next` of either walk, the key it grants, or its answer when there is
    /// none; `None` for any other operation.
    pub(super) fn claim_next_pick(&self, op: &Op) -> Option<Result<Arc<str>, Outcome>> {
        let (walk, prefix, holder, any, wheres) = match op {
            Op::ClaimNext {
                prefix,
                holder,
                any,
                wheres,
                ..
            } => (Walk::EveryCaseFile, prefix, holder, any, wheres),
            Op::ClaimNextUnfinished {
                prefix,
                holder,
                any,
                wheres,
                ..
            } => (Walk::Unfinished, prefix, holder, any, wheres),
            _ => return None,
        };
        let picked = self.next_claimable(prefix, &holder.name, *any, wheres, walk);
        Some(picked.map_err(|counts| Outcome::NothingClaimable {
            prefix: prefix.clone(),
            counts,
        }))
    }

    /// The key `claim-next` grants `holder_name`, or why none can be: looks at the keys under
    /// `prefix` that `walk` names, in key order, at most `CLAIM_NEXT_SCAN_MAX` of them. A key
    /// is claimable when it is not held, not quarantined, not finished, its record has every
    /// `wheres` field with that value, and it is assigned to no one, to `holder_name`, or
    /// `any` is set. The first key assigned to `holder_name` wins; else the first claimable
    /// one.
    fn next_claimable(
        &self,
        prefix: &str,
        holder_name: &str,
        any: bool,
        wheres: &[(String, String)],
        walk: Walk,
    ) -> Result<Arc<str>, Unclaimable> {
        let from = (Bound::Included(prefix), Bound::Unbounded);
        let under: Box<dyn Iterator<Item = (&Arc<str>, &CaseFile)>> = match walk {
            Walk::EveryCaseFile => {
                Box::new(self.cases.range::<str, _>(from).map(|(k, c)| (k, &**c)))
            }
            Walk::Unfinished => Box::new(
                self.unfinished
                    .range::<str, _>(from)
                    .map(|k| (k, &*self.cases[&**k])),
            ),
        };
        let mut counts = Unclaimable::default();
        let mut first = None;
        for (key, case) in under.take_while(|(key, _)| key.starts_with(prefix)) {
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
            } else if case.is_finished() {
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
