//! The index `claim-next` walks from data format 14 on: the keys whose case file's status is
//! not finished, and, of those, the ones assigned to each name. Derived from the case files:
//! never serialized, rebuilt on load, brought up to date for a key by every step that touched
//! its case file.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use crate::core::case::CaseFile;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Unfinished {
    /// Each unfinished key (a set of its own: most keys are assigned to no one, and a set
    /// entry is half a map entry's size, measured per held lease with `baton-scale`).
    keys: BTreeSet<Arc<str>>,
    /// The name each assigned unfinished key is assigned to.
    assignee_of: BTreeMap<Arc<str>, Arc<str>>,
    /// Each assignee's unfinished keys; a name with none has no entry.
    by_assignee: BTreeMap<Arc<str>, BTreeSet<Arc<str>>>,
}

impl Unfinished {
    /// The index of `cases`.
    pub(super) fn build<'a>(cases: impl Iterator<Item = (&'a Arc<str>, &'a CaseFile)>) -> Self {
        let mut index = Unfinished::default();
        for (key, case) in cases {
            index.sync(key, case);
        }
        index
    }

    /// Brings the index up to date for `key`, whose case file is now `case` (case files are
    /// never removed).
    pub(super) fn sync(&mut self, key: &Arc<str>, case: &CaseFile) {
        let now = (!case.is_finished())
            .then(|| case.record.assigned_to.as_deref().map(|a| a.to.as_str()));
        let before = self
            .keys
            .contains(key)
            .then(|| self.assignee_of.get(key).map(|a| &**a));
        if before == now {
            return;
        }
        self.keys.remove(key);
        if let Some(name) = self.assignee_of.remove(key) {
            if let Some(keys) = self.by_assignee.get_mut(&name) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_assignee.remove(&name);
                }
            }
        }
        let Some(assignee) = now else {
            return;
        };
        self.keys.insert(key.clone());
        if let Some(name) = assignee {
            let name: Arc<str> = match self.by_assignee.get_key_value(name) {
                Some((shared, _)) => shared.clone(),
                None => Arc::from(name),
            };
            self.by_assignee
                .entry(name.clone())
                .or_default()
                .insert(key.clone());
            self.assignee_of.insert(key.clone(), name);
        }
    }

    /// Whether `key` is indexed as unfinished: for the invariants, which debug builds check.
    #[cfg(debug_assertions)]
    pub(super) fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }

    /// The unfinished keys in `range`, in key order.
    pub(super) fn range<'a>(
        &'a self,
        range: (Bound<&str>, Bound<&str>),
    ) -> impl Iterator<Item = &'a Arc<str>> + use<'a> {
        self.keys.range::<str, _>(range)
    }

    /// The unfinished keys assigned to someone in `range`, in key order.
    pub(super) fn assigned_range<'a>(
        &'a self,
        range: (Bound<&str>, Bound<&str>),
    ) -> impl Iterator<Item = &'a Arc<str>> + use<'a> {
        self.assignee_of.range::<str, _>(range).map(|(k, _)| k)
    }

    /// The unfinished keys assigned to `name` from `prefix` on, in key order.
    pub(super) fn assigned_to<'a>(
        &'a self,
        name: &str,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<str>> + 'a {
        self.by_assignee
            .get(name)
            .into_iter()
            .flat_map(move |keys| keys.range::<str, _>((Bound::Included(prefix), Bound::Unbounded)))
    }
}
