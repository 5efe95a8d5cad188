//! The `retries` checker: a write resent as a retry after more clients wrote than the
//! cluster remembers (the churner's `retry` lines, `workload::churn`) acts once. Its answer
//! is its first attempt's, or a refusal as too old to tell; any other answer means it was
//! applied again. For a revoke, the lease a later claim got must still hold the key after
//! the retry (a revoke applied again freed it).

use crate::history::{CheckResult, History, RetryEvent, Verdict, Violation};

/// What one retry says about the cluster.
fn judge(r: &RetryEvent) -> Vec<Violation> {
    let mut found = Vec::new();
    let answered = !r.again.starts_with("status ");
    if answered && r.again != r.first && r.again != "too-old" {
        found.push(Violation {
            key: Some(r.key.clone()),
            t_ns: Some(r.t_ns),
            message: format!(
                "the retry of {} ({}, {}) acted again: its first attempt answered {:?}, the \
                 retry {:?}",
                r.step, r.client, r.seq, r.first, r.again
            ),
        });
    }
    if r.step == "revoke" && r.later_token != 0 && r.held_after != r.later_token {
        found.push(Violation {
            key: Some(r.key.clone()),
            t_ns: Some(r.t_ns),
            message: format!(
                "after the revoke's retry ({}, {}) the key is held by token {} (0: free), not \
                 by token {} that a later claim was granted before it",
                r.client, r.seq, r.held_after, r.later_token
            ),
        });
    }
    found
}

pub fn check(history: &History) -> CheckResult {
    let retries = history.retries();
    let violations: Vec<Violation> = retries.iter().flat_map(|r| judge(r)).collect();
    let count = |what: &dyn Fn(&RetryEvent) -> bool| retries.iter().filter(|r| what(r)).count();
    let too_old = count(&|r| r.again == "too-old");
    let same = count(&|r| r.again == r.first);
    let unanswered = count(&|r| r.again.starts_with("status "));
    CheckResult {
        checker: "retries".into(),
        verdict: match (violations.is_empty(), retries.is_empty()) {
            (false, _) => Verdict::Fail,
            (true, true) => Verdict::Unknown,
            (true, false) => Verdict::Pass,
        },
        summary: format!(
            "{} retries resent after more clients wrote than the cluster remembers: {too_old} \
             refused as too old, {same} answered as their first attempt, {unanswered} not \
             answered; {} violations",
            retries.len(),
            violations.len()
        ),
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Line;

    fn retry(step: &str, first: &str, again: &str, held_after: u64, later: u64) -> Line {
        Line::Retry(RetryEvent {
            idx: 0,
            step: step.into(),
            key: "churn/k".into(),
            client: "op".into(),
            seq: 1,
            first: first.into(),
            again: again.into(),
            held_after,
            later_token: later,
            t_ns: 0,
        })
    }

    fn verdict(lines: Vec<Line>) -> Verdict {
        check(&History { lines }).verdict
    }

    #[test]
    fn a_retry_answered_as_first_or_refused_as_too_old_passes() {
        assert_eq!(
            verdict(vec![
                retry("revoke", "revoked 3", "too-old", 10_500, 10_500),
                retry("claim", "granted 4", "granted 4", 0, 0),
                retry("claim", "granted 5", "status 14", 0, 0),
            ]),
            Verdict::Pass
        );
        assert_eq!(
            verdict(vec![]),
            Verdict::Unknown,
            "nothing resent proves nothing"
        );
    }

    #[test]
    fn a_retry_applied_again_fails() {
        // The run: the revoke's retry revoked the later holder.
        assert_eq!(
            verdict(vec![retry(
                "revoke",
                "revoked 3",
                "revoked 10103",
                0,
                10_103
            )]),
            Verdict::Fail
        );
        // A released key claimed again by a forgotten client's retry.
        assert_eq!(
            verdict(vec![retry("claim", "granted 4", "granted 10110", 0, 0)]),
            Verdict::Fail
        );
        // No answer, but the later holder lost the key.
        assert_eq!(
            verdict(vec![retry("revoke", "revoked 3", "status 14", 0, 10_103)]),
            Verdict::Fail
        );
    }
}
