//! Invariants that hold after every apply: debug builds check them each time.

use super::LeaseTable;
use crate::core::limits::{DEDUP_ANSWERS_PER_CLIENT_MAX, DEDUP_CLIENTS_MAX};
use crate::core::types::LogCommand;

impl LeaseTable {
    /// Invariants that hold after every apply (debug builds check them each time). Only what
    /// the entry could have touched is checked, so the cost stays O(log n) per apply.
    pub(super) fn check_invariants(&self, index: u64, cmd: &LogCommand) {
        for key in cmd.op.keys() {
            let unfinished = self.cases.get(key).is_some_and(|c| !c.is_finished());
            assert_eq!(
                self.unfinished.contains(key),
                unfinished,
                "the index of unfinished keys is wrong about {key}"
            );
            if let Some(lease) = self.leases.get(key) {
                assert_eq!(key, &*lease.key, "lease stored under another key");
                assert!(lease.token >= 1, "token 0 on {key}");
                assert!(lease.token <= lease.basis, "basis before token on {key}");
                assert!(lease.basis <= index, "basis from the future on {key}");
                assert!(!self.holders.contains_key(key), "{key} held both ways");
            }
            if let Some(held) = self.holders.get(key) {
                assert!(!held.leases.is_empty(), "no holder kept for {key}");
                assert!(
                    held.leases.len() <= held.sharing.permits() as usize,
                    "more holders than permits on {key}"
                );
                assert!(
                    held.leases
                        .iter()
                        .zip(held.leases.iter().skip(1))
                        .all(|(a, b)| a.token < b.token),
                    "the holders of {key} in order of token"
                );
                for lease in &held.leases {
                    assert_eq!(key, &*lease.key, "permit stored under another key");
                    assert!(lease.token >= 1 && lease.token <= lease.basis && lease.basis <= index);
                }
            }
            if let Some(line) = self.lines.get(key) {
                assert!(!line.is_empty(), "an empty line is kept for {key}");
                let quarantined = self.case(key).is_some_and(|c| c.quarantine.is_some());
                assert!(
                    self.is_held(key) || quarantined,
                    "{key} is free with {} waiting",
                    line.len()
                );
                assert!(
                    line.iter()
                        .zip(line.iter().skip(1))
                        .all(|(a, b)| a.joined < b.joined),
                    "the line of {key} is in order of arrival"
                );
            }
        }
        assert!(
            self.sessions.len() <= DEDUP_CLIENTS_MAX,
            "too many sessions"
        );
        assert_eq!(
            self.sessions.len(),
            self.by_activity.len(),
            "activity index"
        );
        if let Some(id) = &cmd.request_id {
            if let Some(session) = self.sessions.get(&id.client_id) {
                assert!(session.answers.len() <= DEDUP_ANSWERS_PER_CLIENT_MAX);
                assert!(
                    session
                        .answers
                        .iter()
                        .zip(session.answers.iter().skip(1))
                        .all(|(a, b)| a.seq < b.seq),
                    "answers ordered by seq"
                );
                assert_eq!(
                    self.by_activity.get(&session.last_index),
                    Some(&id.client_id)
                );
            }
        }
    }
}
