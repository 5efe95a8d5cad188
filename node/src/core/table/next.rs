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
            .range(super::page_range(prefix, start_after))
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
    pub(crate) fn claim_next_pick(&self, op: &Op) -> Option<Result<Arc<str>, Outcome>> {
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

    /// The key `claim-next` grants `holder_name`, or why none can be. A key is claimable
    /// when it is not held, not quarantined, not finished, its record has every `wheres`
    /// field with that value, and it is assigned to no one, to `holder_name`, or `any` is
    /// set; a key assigned to `holder_name` wins over the others.
    ///
    /// Format 9's walk (`Walk::EveryCaseFile`) looks at the case files under `prefix` in key
    /// order, at most `CLAIM_NEXT_SCAN_MAX` of them, finished ones included, and grants the
    /// first key assigned to `holder_name` among them, else the first claimable one.
    ///
    /// Format 14's (`Walk::Unfinished`) looks at unfinished keys only: first those assigned
    /// to `holder_name` under `prefix` (from the index of assignees, at most
    /// `CLAIM_NEXT_SCAN_MAX`), the first claimable one winning; then the unfinished keys
    /// under `prefix` in key order, at most `CLAIM_NEXT_SCAN_MAX`, the first claimable one
    /// winning. Finished keys cost it nothing, and a grant stops the walk: a take is about
    /// as cheap behind 10,000 finished tasks, or before 10,000 claimable ones, as with 10
    /// (open tasks it cannot take, held ones say, are still walked past and counted).
    fn next_claimable(
        &self,
        prefix: &str,
        holder_name: &str,
        any: bool,
        wheres: &[(String, String)],
        walk: Walk,
    ) -> Result<Arc<str>, Unclaimable> {
        let under = |key: &&Arc<str>| key.starts_with(prefix);
        let mut counts = Unclaimable::default();
        match walk {
            Walk::EveryCaseFile => {
                let mut first = None;
                let cases = self.cases.range::<str, _>(from(prefix));
                for (key, case) in cases.take_while(|(key, _)| under(key)) {
                    if counts.scanned == CLAIM_NEXT_SCAN_MAX as u64 {
                        counts.truncated = true;
                        break;
                    }
                    match self.pass(key, case, holder_name, any, wheres, &mut counts) {
                        Some(Claimable::Assigned) => return Ok(key.clone()),
                        Some(Claimable::Free) => {
                            first.get_or_insert_with(|| key.clone());
                        }
                        None => {}
                    }
                }
                first.ok_or(counts)
            }
            Walk::Unfinished => {
                // The claimant's own first; one passed by here is counted only if the walk
                // below reaches it.
                let mine = self.unfinished.assigned_to(holder_name, prefix);
                for key in mine.take_while(under).take(CLAIM_NEXT_SCAN_MAX) {
                    let mut ignored = Unclaimable::default();
                    if self
                        .pass(
                            key,
                            &self.cases[key],
                            holder_name,
                            any,
                            wheres,
                            &mut ignored,
                        )
                        .is_some()
                    {
                        return Ok(key.clone());
                    }
                }
                for key in self.unfinished.range(from(prefix)).take_while(under) {
                    if counts.scanned == CLAIM_NEXT_SCAN_MAX as u64 {
                        counts.truncated = true;
                        break;
                    }
                    let case = &self.cases[key];
                    if self
                        .pass(key, case, holder_name, any, wheres, &mut counts)
                        .is_some()
                    {
                        return Ok(key.clone());
                    }
                }
                Err(counts)
            }
        }
    }

    /// Whether `holder_name` may be granted `key` by `claim-next`, and how; if not, the key
    /// is counted in `counts` under the first reason that applies. Either way it counts as
    /// scanned.
    fn pass(
        &self,
        key: &str,
        case: &CaseFile,
        holder_name: &str,
        any: bool,
        wheres: &[(String, String)],
        counts: &mut Unclaimable,
    ) -> Option<Claimable> {
        counts.scanned += 1;
        let record = &case.record;
        let reason = if self.is_held(key) {
            &mut counts.held
        } else if case.quarantine.is_some() {
            &mut counts.quarantined
        } else if case.is_finished() {
            &mut counts.finished
        } else if !wheres
            .iter()
            .all(|(field, value)| record.fields.get(field) == Some(value))
        {
            &mut counts.unmatched
        } else {
            match record.assigned_to.as_deref() {
                Some(a) if a.to == holder_name => return Some(Claimable::Assigned),
                Some(_) if !any => &mut counts.assigned_elsewhere,
                _ => return Some(Claimable::Free),
            }
        };
        *reason += 1;
        None
    }
}

/// How a key may be granted to a `claim-next`'s claimant.
enum Claimable {
    /// Assigned to the claimant: it wins over the others.
    Assigned,
    /// Assigned to no one, or to someone else with `any`.
    Free,
}

impl Op {
    /// A `claim-next` as the command of `walk`: the same request in either data format. Any
    /// other operation as it is.
    pub fn with_walk(self, walk: Walk) -> Op {
        let (Op::ClaimNext {
            prefix,
            holder,
            ttl_ms,
            any,
            wheres,
        }
        | Op::ClaimNextUnfinished {
            prefix,
            holder,
            ttl_ms,
            any,
            wheres,
        }) = self
        else {
            return self;
        };
        match walk {
            Walk::EveryCaseFile => Op::ClaimNext {
                prefix,
                holder,
                ttl_ms,
                any,
                wheres,
            },
            Walk::Unfinished => Op::ClaimNextUnfinished {
                prefix,
                holder,
                ttl_ms,
                any,
                wheres,
            },
        }
    }
}

/// The keys from `prefix` on.
fn from(prefix: &str) -> (Bound<&str>, Bound<&str>) {
    (Bound::Included(prefix), Bound::Unbounded)
}
