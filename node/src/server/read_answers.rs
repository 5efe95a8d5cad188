//! The leader's memory of the claims it refused from a read, with no log entry
//! (`baton::Ctx::decide`). Such a refusal is not in the state machine's memory of answers, so
//! a copy of the same request arriving later (a proxy or a gRPC retry policy replaying it
//! with its headers, TCP segments retransmitted after the client gave up) would be decided
//! afresh, and granted once the key is free: a lease its client was told it did not get. A
//! copy gets the remembered answer instead, for [`READ_ANSWERS_TTL`] and up to
//! [`READ_ANSWERS_MAX`] requests (the oldest are forgotten first).
//!
//! On the leader that answered only: a copy that reaches a new leader after an election is
//! decided afresh (docs/guarantees.md).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use crate::core::{Outcome, RequestId};
use crate::limits::{READ_ANSWERS_MAX, READ_ANSWERS_TTL};

type Id = (String, u64);

#[derive(Default)]
pub struct ReadAnswers {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<Id, (Outcome, u64)>,
    /// Oldest first: when each was answered.
    order: VecDeque<(Instant, Id)>,
}

impl Inner {
    fn forget_old(&mut self, now: Instant) {
        while let Some((at, id)) = self.order.front() {
            if now.duration_since(*at) < READ_ANSWERS_TTL && self.order.len() <= READ_ANSWERS_MAX {
                break;
            }
            self.by_id.remove(id);
            self.order.pop_front();
        }
    }
}

impl ReadAnswers {
    /// The answer (outcome, revision) given to `id` from a read, if it is remembered.
    pub fn get(&self, id: &RequestId) -> Option<(Outcome, u64)> {
        let mut inner = self.inner.lock().expect("read answers lock");
        inner.forget_old(Instant::now());
        inner.by_id.get(&(id.client_id.clone(), id.seq)).cloned()
    }

    /// Remembers the answer given to `id` from a read.
    pub fn remember(&self, id: &RequestId, outcome: &Outcome, revision: u64) {
        let mut inner = self.inner.lock().expect("read answers lock");
        let key = (id.client_id.clone(), id.seq);
        let now = Instant::now();
        if inner
            .by_id
            .insert(key.clone(), (outcome.clone(), revision))
            .is_none()
        {
            inner.order.push_back((now, key));
        }
        inner.forget_old(now);
    }

    /// How many answers are remembered (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().expect("read answers lock").by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64) -> RequestId {
        RequestId {
            client_id: "c".into(),
            seq,
        }
    }

    #[test]
    fn an_answer_is_remembered_and_the_oldest_go_past_the_limit() {
        let answers = ReadAnswers::default();
        let outcome = Outcome::RefusedText {
            message: "held".into(),
        };
        answers.remember(&id(1), &outcome, 7);
        assert_eq!(answers.get(&id(1)), Some((outcome.clone(), 7)));
        assert_eq!(answers.get(&id(2)), None);
        for seq in 2..=(READ_ANSWERS_MAX as u64 + 1) {
            answers.remember(&id(seq), &outcome, seq);
        }
        assert_eq!(answers.len(), READ_ANSWERS_MAX);
        assert_eq!(answers.get(&id(1)), None, "the oldest is forgotten first");
        assert!(answers.get(&id(2)).is_some());
    }
}
