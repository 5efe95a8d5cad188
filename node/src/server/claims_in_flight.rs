//! Keys with a claim on its way into the log: a claim of a key while another is in flight
//! waits for it instead of being answered from a read that cannot see it yet.

use std::collections::HashMap;
use std::sync::Mutex;

/// Keys with a claim on its way into the log, and how many. Bounded by the proposer's queue
/// (`PROPOSALS_QUEUED_MAX`): every entry is a claim waiting there or in flight.
#[derive(Default)]
pub(super) struct ClaimsInFlight(Mutex<HashMap<String, usize>>);

/// One claim in flight; it leaves the set when dropped.
pub(super) struct InFlight<'a>(&'a ClaimsInFlight, String);

impl ClaimsInFlight {
    pub(super) fn has(&self, key: &str) -> bool {
        self.0.lock().expect("claims in flight").contains_key(key)
    }

    /// Enters a claim of `key` unless one is in flight already.
    pub(super) fn try_enter(&self, key: &str) -> Option<InFlight<'_>> {
        let mut keys = self.0.lock().expect("claims in flight");
        if keys.contains_key(key) {
            return None;
        }
        keys.insert(key.to_owned(), 1);
        Some(InFlight(self, key.to_owned()))
    }

    pub(super) fn enter(&self, key: &str) -> InFlight<'_> {
        *self
            .0
            .lock()
            .expect("claims in flight")
            .entry(key.to_owned())
            .or_default() += 1;
        InFlight(self, key.to_owned())
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut keys = self.0 .0.lock().expect("claims in flight");
        if let Some(n) = keys.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&self.1);
            }
        }
    }
}
