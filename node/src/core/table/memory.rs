//! The retry memory: what the table remembers of each client's requests, so that a retry is
//! answered as its first attempt was, or refused as too old, never applied twice.

use super::*;

impl LeaseTable {
    pub(super) fn remembered(&self, id: &RequestId, op: &Op) -> Option<(Outcome, u64)> {
        let session = self.sessions.get(&id.client_id)?;
        if let Some(answer) = session.answers.iter().find(|a| a.seq == id.seq) {
            if answer.op_fingerprint != op.fingerprint() {
                let refusal = Outcome::Invalid {
                    message: format!(
                        "request id ({}, {}) was already used for a different request: \
                         give each request its own seq",
                        id.client_id, id.seq
                    ),
                };
                return Some((refusal, 0));
            }
            return Some((answer.outcome.clone(), answer.revision));
        }
        if id.seq <= session.forgotten_seq_max {
            let too_old = Outcome::RetryTooOld {
                message: format!(
                    "request seq {} of client {} is too old to tell whether it was applied \
                     (only the latest {} answers are kept): probe the key to see its state",
                    id.seq, id.client_id, DEDUP_ANSWERS_PER_CLIENT_MAX
                ),
            };
            return Some((too_old, 0));
        }
        None
    }

    /// A retry (`Op::Retry`) whose answer is not remembered, if the cluster cannot tell that
    /// its first attempt was never applied: its client is not remembered (forgotten with
    /// every answer, once `DEDUP_CLIENTS_MAX` others were more recent), or its seq is below
    /// every answer kept for the client (it was forgotten, and remembered again from a later
    /// request). Refused as too old (an unknown outcome), never applied afresh. A retry of a
    /// client that is remembered, at or above its answers, was never applied: every applied
    /// request of a remembered client is in its answers or at or below `forgotten_seq_max`.
    pub(super) fn unmatched_retry(&self, id: &RequestId) -> Option<Outcome> {
        let lowest_kept = self
            .sessions
            .get(&id.client_id)
            .and_then(|s| s.answers.front())
            .map(|a| a.seq);
        match lowest_kept {
            Some(lowest) if id.seq >= lowest => None,
            _ => Some(Outcome::RetryTooOld {
                message: format!(
                    "retry too old: the first attempt's answer is no longer known (request \
                     seq {} of client {}; {} clients and {} answers each are kept): probe the \
                     key to see its state",
                    id.seq, id.client_id, DEDUP_CLIENTS_MAX, DEDUP_ANSWERS_PER_CLIENT_MAX
                ),
            }),
        }
    }

    pub(super) fn remember(
        &mut self,
        index: u64,
        id: &RequestId,
        op_fingerprint: u64,
        outcome: &Outcome,
        decided: u64,
    ) {
        if !self.sessions.contains_key(&id.client_id) && self.sessions.len() >= DEDUP_CLIENTS_MAX {
            // Forget the client idle for the longest. Deterministic: ordered by revision.
            if let Some((_, idle)) = self.by_activity.pop_first() {
                self.sessions.remove(&idle);
            }
        }
        let session = self.sessions.entry(id.client_id.clone()).or_default();
        if session.last_index != 0 {
            self.by_activity.remove(&session.last_index);
        }
        session.last_index = index;
        self.by_activity.insert(index, id.client_id.clone());
        let at = session.answers.partition_point(|a| a.seq < id.seq);
        session.answers.insert(
            at,
            Answer {
                seq: id.seq,
                op_fingerprint,
                outcome: outcome.clone(),
                revision: decided,
            },
        );
        if session.answers.len() > DEDUP_ANSWERS_PER_CLIENT_MAX {
            // Forget the lowest seq, not the first applied: requests in flight together can
            // commit out of order, and forgetting a high seq would refuse the first attempts
            // of the lower ones still on their way. With at most this many requests in flight
            // per client, no first attempt is ever refused.
            if let Some(dropped) = session.answers.pop_front() {
                session.forgotten_seq_max = session.forgotten_seq_max.max(dropped.seq);
            }
        }
    }
}
