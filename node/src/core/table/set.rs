//! An all-or-none claim of a set of keys in one entry: every key is checked before any is
//! granted, so a set is never half held, and each granted key's token is the entry's
//! revision.

use super::step::Step;
use super::{Changes, LeaseTable};
use crate::core::types::{Blocked, Grant, Holder, LogCommand, Outcome};

impl LeaseTable {
    /// Every key of `keys` that a claim by `holder` cannot have now (held by someone else,
    /// or quarantined), in the order asked. Empty: the whole set can be granted.
    pub(crate) fn set_blocked(&self, keys: &[String], holder: &Holder) -> Vec<Blocked> {
        keys.iter()
            .filter_map(|key| self.claim_blocked(key, holder, false))
            .collect()
    }

    /// Applies `Op::ClaimSet` at revision `index`: all of `keys` to `holder`, or none.
    pub(super) fn claim_set(
        &mut self,
        index: u64,
        cmd: &LogCommand,
        keys: &[String],
        holder: &Holder,
        ttl_ms: u64,
        changes: &mut Changes,
    ) -> Outcome {
        let blocked = self.set_blocked(keys, holder);
        if !blocked.is_empty() {
            return Outcome::BlockedSet { blocked };
        }
        let mut new_keys = keys.iter().filter(|k| !self.cases.contains_key(k.as_str()));
        if let Some(first_new) = new_keys.next() {
            if self.cases.len() + 1 + new_keys.count() > self.keys_max() {
                return self.key_limit(first_new);
            }
        }
        let how = format!("one of {} keys claimed together", keys.len());
        let mut grants = Vec::with_capacity(keys.len());
        for key in keys {
            let mut step = Step::new(self, key, index, cmd, changes);
            // Nothing blocks any key (checked above), so each claim grants or renews.
            if let Outcome::Granted {
                lease,
                already_held,
                assignment,
            } = step.claim(holder, ttl_ms, &how)
            {
                grants.push(Grant {
                    lease,
                    already_held,
                    assignment,
                });
            }
        }
        debug_assert_eq!(grants.len(), keys.len(), "every key of the set granted");
        Outcome::GrantedSet { grants }
    }
}
