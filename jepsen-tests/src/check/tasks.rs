//! Tasks: `claim-next` hands each task to one taker at a time, and a finished task to no one.
//! Over the `task-takers` workload's steps (`task` lines):
//!
//! - **one winner per grant**: no two `granted` answers carry the same key and token (one
//!   log entry granted the task to two takers);
//! - **tokens in time order**: of two grants of a task, the one that returned before the
//!   other was invoked has the smaller token;
//! - **no overlap**: a grant of a task is never decided wholly inside another taker's
//!   certain hold of it: from its grant's return until the first of its release's
//!   invocation (whatever the release answered: it may have applied) and `inv + ttl / (1 +
//!   rho)` (its lease can end no sooner: expiry is never early), and no two takers' certain
//!   holds of a task overlap (`holds::out_of_turn`);
//! - **finished stays finished**: once a release as `done` returned, no grant of that task
//!   invoked afterwards (`claim-next` passes finished tasks by; nothing re-posts them);
//! - **assigned to one**: a task posted assigned to a worker (its key names it after
//!   `ASSIGNED_MARK`) is granted to that worker's holder name only (the workload's takers
//!   never pass `--any`).
//!
//! Fewer than [`MIN_GRANTS`] grants → Unknown: such a run proves nothing.

use std::collections::{BTreeMap, HashMap};

use super::holds::{judge_in_turn, Hold};
use crate::history::{CheckResult, History, TaskEvent, Verdict, Violation, ASSIGNED_MARK};

/// A run must grant at least this many tasks to prove anything.
pub const MIN_GRANTS: usize = 5;

/// Checks the `task-takers` steps of `history`, with the clock-rate bound `rho`.
pub fn check(history: &History, rho: f64) -> CheckResult {
    let steps = history.tasks();
    let grants: Vec<&TaskEvent> = steps
        .iter()
        .copied()
        .filter(|t| t.step == "claim-next" && t.what == "granted")
        .collect();
    let nothing = steps.iter().filter(|t| t.what == "nothing").count();
    let mut violations = Vec::new();
    let mut seen: HashMap<(&str, u64), &TaskEvent> = HashMap::new();
    for g in &grants {
        if let Some(first) = seen.insert((&g.key, g.token), g) {
            violations.push(violation(
                g,
                format!(
                    "{} (token {}) was granted to {} and to {}: two takers of one grant",
                    g.key, g.token, first.client, g.client
                ),
            ));
        }
    }
    // A grant's end of certain hold: its release's invocation (whatever it answered), else
    // the earliest its lease can expire.
    let releases: HashMap<(&str, u64), &TaskEvent> = steps
        .iter()
        .copied()
        .filter(|t| t.step == "release")
        .map(|t| ((t.key.as_str(), t.token), t))
        .collect();
    let holds = grants.iter().map(|g| {
        let hold = Hold {
            client: &g.client,
            token: g.token,
            inv_ns: g.inv_ns,
            ret_ns: g.ret_ns,
            ttl_ms: g.ttl_ms,
            released_inv_ns: releases.get(&(g.key.as_str(), g.token)).map(|r| r.inv_ns),
            renewed_inv_ns: None,
        };
        (g.key.as_str(), *g, hold)
    });
    for (_, grant, why) in judge_in_turn(holds, rho, false) {
        violations.push(violation(grant, why));
    }
    let done: Vec<&TaskEvent> = steps
        .iter()
        .copied()
        .filter(|t| t.step == "release" && t.what == "done")
        .collect();
    let mut by_key: BTreeMap<&str, Vec<&TaskEvent>> = BTreeMap::new();
    for g in &grants {
        by_key.entry(&g.key).or_default().push(g);
    }
    for d in &done {
        for g in by_key.get(d.key.as_str()).into_iter().flatten() {
            if g.inv_ns > d.ret_ns {
                violations.push(violation(
                    g,
                    format!(
                        "{} was finished (released done at token {}) and granted again to {} \
                         (token {})",
                        d.key, d.token, g.client, g.token
                    ),
                ));
            }
        }
    }
    let mut assigned = 0;
    for g in &grants {
        let Some((_, to)) = g.key.split_once(ASSIGNED_MARK) else {
            continue;
        };
        assigned += 1;
        // A history from before the holder was recorded cannot tell.
        if !g.holder.is_empty() && g.holder != to {
            violations.push(violation(
                g,
                format!(
                    "{} was posted assigned to {to} and granted to {} (token {}) by a \
                     claim-next without --any",
                    g.key, g.holder, g.token
                ),
            ));
        }
    }
    let verdict = if !violations.is_empty() {
        Verdict::Fail
    } else if grants.len() < MIN_GRANTS {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    CheckResult {
        checker: "tasks".into(),
        verdict,
        summary: format!(
            "{} claim-next grants over {} tasks ({} of assigned tasks, each to its assignee), \
             {} answered nothing claimable, {} finished; {} violations",
            grants.len(),
            by_key.len(),
            assigned,
            nothing,
            done.len(),
            violations.len()
        ),
        violations,
    }
}

fn violation(t: &TaskEvent, message: String) -> Violation {
    Violation {
        key: Some(t.key.clone()),
        t_ns: Some(t.ret_ns),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Line, Nanos};

    const MS: Nanos = 1_000_000;

    fn step(
        client: &str,
        step: &str,
        what: &str,
        key: &str,
        token: u64,
        inv: u64,
        ret: u64,
    ) -> Line {
        Line::Task(TaskEvent {
            idx: 0,
            process: 0,
            client: client.into(),
            step: step.into(),
            what: what.into(),
            prefix: "tt/0/".into(),
            key: key.into(),
            token,
            ttl_ms: 3000,
            inv_ns: inv * MS,
            ret_ns: ret * MS,
            t_ns: ret * MS,
            holder: client.into(),
        })
    }

    fn history(lines: Vec<Line>) -> History {
        History { lines }
    }

    /// Five tasks, each granted, then released done, in turn: a pass.
    fn clean() -> Vec<Line> {
        let mut lines = Vec::new();
        for i in 0..5u64 {
            let key = format!("tt/0/{i}");
            lines.push(step(
                "a",
                "claim-next",
                "granted",
                &key,
                10 + i,
                i * 100,
                i * 100 + 5,
            ));
            lines.push(step(
                "a",
                "release",
                "done",
                &key,
                10 + i,
                i * 100 + 50,
                i * 100 + 55,
            ));
        }
        lines.push(step("b", "claim-next", "nothing", "", 0, 600, 605));
        lines
    }

    #[test]
    fn grants_in_turn_pass_and_too_few_are_unknown() {
        let r = check(&history(clean()), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        let r = check(&history(clean().into_iter().take(4).collect()), 0.1);
        assert_eq!(r.verdict, Verdict::Unknown, "{r:?}");
    }

    #[test]
    fn one_grant_told_to_two_takers_fails() {
        let mut lines = clean();
        lines.push(step("b", "claim-next", "granted", "tt/0/0", 10, 1, 6));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(
            r.violations
                .iter()
                .any(|v| v.message.contains("two takers")),
            "{r:?}"
        );
    }

    #[test]
    fn a_grant_inside_anothers_hold_fails_and_one_after_its_release_passes() {
        let mut lines = clean();
        // b is granted tt/9 while a holds it (a's release comes later).
        lines.push(step(
            "a",
            "claim-next",
            "granted",
            "tt/0/9",
            100,
            1000,
            1005,
        ));
        lines.push(step(
            "b",
            "claim-next",
            "granted",
            "tt/0/9",
            101,
            1100,
            1105,
        ));
        lines.push(step("a", "release", "released", "tt/0/9", 100, 1200, 1205));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(r
            .violations
            .iter()
            .any(|v| v.message.contains("certainly held")));
        // After a's release was invoked, b's grant is fine.
        let mut lines = clean();
        lines.push(step(
            "a",
            "claim-next",
            "granted",
            "tt/0/9",
            100,
            1000,
            1005,
        ));
        lines.push(step("a", "release", "released", "tt/0/9", 100, 1050, 1055));
        lines.push(step(
            "b",
            "claim-next",
            "granted",
            "tt/0/9",
            101,
            1100,
            1105,
        ));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        // So is one after a's lease could have expired (3 s / 1.1 after its invocation).
        let mut lines = clean();
        lines.push(step(
            "a",
            "claim-next",
            "granted",
            "tt/0/9",
            100,
            1000,
            1005,
        ));
        lines.push(step(
            "b",
            "claim-next",
            "granted",
            "tt/0/9",
            101,
            3800,
            3805,
        ));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    }

    #[test]
    fn an_assigned_task_granted_to_another_than_its_assignee_fails() {
        let mut lines = clean();
        lines.push(step("a", "claim-next", "granted", "tt/0/7@a", 60, 900, 905));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
        let mut lines = clean();
        lines.push(step("b", "claim-next", "granted", "tt/0/7@a", 60, 900, 905));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
        assert!(
            r.violations
                .iter()
                .any(|v| v.message.contains("posted assigned to a and granted to b")),
            "{r:?}"
        );
    }

    #[test]
    fn a_finished_task_granted_again_fails() {
        let mut lines = clean();
        lines.push(step("b", "claim-next", "granted", "tt/0/0", 50, 900, 905));
        let r = check(&history(lines), 0.1);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(
            r.violations.iter().any(|v| v.message.contains("finished")),
            "{r:?}"
        );
    }
}
