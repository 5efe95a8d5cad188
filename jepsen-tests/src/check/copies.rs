//! One request, one answer: every answer the cluster gave to any copy of a claim (a late first
//! attempt, a retry, a copy the proxy made: [`crate::copies`]) must be the answer its client
//! heard. A copy granted after the client was told "held" is a lease its client never heard
//! of (the bug of seed 426017); a copy told "held" after the client was granted, or granted
//! another token, contradicts what the client acts on.
//!
//! Each request id's answers (from [`WireEvent`]s) are matched to the claim whose client sent
//! it while that claim was open; claims that ended in `info` heard nothing, so nothing is
//! compared for them. The leader's memory of the claims it refused from a read is its own
//! (`node/src/server/read_answers.rs`): a contradiction between answers decided by two
//! different nodes is the documented limit across a leader change, counted and listed, and
//! fails the check only if `strict`.

use std::collections::{BTreeMap, HashMap};

use super::{describe, secs, Found};
use crate::history::{Call, CheckResult, Kind, Op, Reply, Verdict, WireAnswer, WireEvent};

/// Fewer late copies than this with an answer to compare (a delayed first attempt, or a copy
/// the proxy made) and the check cannot have caught anything: in a scenario with the
/// `client-delay` and `client-copies` faults its verdict is Unknown, which fails the run.
pub const MIN_LATE_COMPARED: usize = 10;

fn heard(o: &Op) -> Option<WireAnswer> {
    match (o.kind, &o.reply) {
        (Kind::Ok, Some(Reply::Granted { token, .. })) => {
            Some(WireAnswer::Granted { token: *token })
        }
        (Kind::Fail, Some(Reply::Held { holder })) => Some(WireAnswer::Held {
            token: holder.token,
        }),
        _ => None,
    }
}

fn says(a: &WireAnswer) -> String {
    match a {
        WireAnswer::Granted { token } => format!("granted token {token}"),
        WireAnswer::Held { token } => format!("refused, held with token {token}"),
        WireAnswer::Status { code } => format!("gRPC status {code}"),
    }
}

/// Checks every claim's answers on the wire against what its client heard. `expect_late`:
/// the run had the copy faults, so too few late copies compared is a failure.
pub fn check(ops: &[Op], wire: &[&WireEvent], expect_late: bool) -> CheckResult {
    let mut claims: HashMap<&str, Vec<&Op>> = HashMap::new();
    for o in ops.iter().filter(|o| matches!(o.call, Call::Claim { .. })) {
        claims.entry(o.client.as_str()).or_default().push(o);
    }
    let mut requests: BTreeMap<(&str, u64), Vec<&WireEvent>> = BTreeMap::new();
    for w in wire.iter().filter(|w| !w.retry_id.is_empty()) {
        requests
            .entry((w.retry_id.as_str(), w.seq))
            .or_default()
            .push(w);
    }
    let mut found = Found::default();
    let (mut matched, mut unheard, mut compared, mut late_compared) = (0, 0, 0, 0);
    let mut across = Vec::new();
    for ((retry_id, seq), answers) in &requests {
        let sent = answers.iter().map(|w| w.sent_ns).min().unwrap_or(0);
        let (client, key) = (answers[0].client.as_str(), answers[0].key.as_str());
        let Some(op) = claims.get(client).and_then(|os| {
            os.iter()
                .find(|o| o.key == key && o.inv_ns <= sent && o.ret_ns.is_none_or(|r| sent <= r))
        }) else {
            continue;
        };
        matched += 1;
        let Some(told) = heard(op) else {
            unheard += 1;
            continue;
        };
        let definite: Vec<&&WireEvent> = answers
            .iter()
            .filter(|w| !matches!(w.answer, WireAnswer::Status { .. }))
            .collect();
        compared += definite.len().saturating_sub(1);
        late_compared += definite.iter().filter(|w| w.copy != "original").count();
        let deciders: Vec<&str> = definite
            .iter()
            .filter(|w| w.answer == told)
            .map(|w| w.decided_by.as_str())
            .collect();
        for w in definite.iter().filter(|w| w.answer != told) {
            let what = if matches!(w.answer, WireAnswer::Granted { .. }) {
                "a lease its client never heard of"
            } else {
                "an answer that contradicts the one its client heard"
            };
            let message = format!(
                "{}; request {retry_id}/{seq}: its {} attempt{} sent to {} was {} by {} at {}: {what}",
                describe(op),
                w.copy,
                if w.first_attempt { " (first)" } else { "" },
                w.node,
                says(&w.answer),
                w.decided_by,
                secs(w.t_ns),
            );
            if deciders.is_empty() || deciders.contains(&w.decided_by.as_str()) {
                found.add("contradicted", key, Some(w.t_ns), message);
            } else {
                across.push(message);
            }
        }
    }
    let too_few = expect_late && late_compared < MIN_LATE_COMPARED;
    let summary = format!(
        "{} claim requests on the wire, {matched} matched to their claims ({unheard} heard no \
         answer); {compared} further answers compared with what the client heard, \
         {late_compared} of them to late or copied attempts{}{}{}",
        requests.len(),
        if across.is_empty() {
            String::new()
        } else {
            format!(
                "; {} contradictions between answers decided by different leaders (the leader's \
                 memory of refusals is its own; docs/guarantees.md): {}",
                across.len(),
                across.first().cloned().unwrap_or_default()
            )
        },
        if too_few {
            format!("; fewer than {MIN_LATE_COMPARED} late copies compared: nothing was tested")
        } else {
            String::new()
        },
        found.suffix(),
    );
    // Too little to compare is not a finding: Unknown fails a run, and no canary counts it
    // as caught.
    let verdict = if !found.is_empty() {
        Verdict::Fail
    } else if too_few {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    found.result("copies", verdict, summary)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    fn wire(
        client: &str,
        seq: u64,
        sent: u64,
        copy: &str,
        by: &str,
        answer: WireAnswer,
    ) -> WireEvent {
        WireEvent {
            idx: 0,
            client: client.into(),
            retry_id: format!("r-{client}"),
            seq,
            key: "k".into(),
            sent_ns: sent * 1_000_000,
            node: "n1".into(),
            decided_by: by.into(),
            first_attempt: true,
            copy: copy.into(),
            answer,
            t_ns: (sent + 5) * 1_000_000,
        }
    }

    fn late(n: usize, by: &str) -> Vec<(Op, Vec<WireEvent>)> {
        (0..n as u64)
            .map(|i| {
                let c = format!("x{i}");
                let held = WireAnswer::Held { token: 1 };
                (
                    claim_held(&c, "other", 1, 1000 + i * 10, 1005 + i * 10),
                    vec![
                        wire(&c, 1, 1000 + i * 10, "original", by, held),
                        wire(&c, 1, 1000 + i * 10, "copy", by, held),
                    ],
                )
            })
            .collect()
    }

    /// Client "c"'s claim `op` (request 3), its original answered `told` by n1 and a copy of
    /// it `answer` by `by`.
    fn copied(op: Op, told: WireAnswer, by: &str, answer: WireAnswer) -> (Op, Vec<WireEvent>) {
        (
            op,
            vec![
                wire("c", 3, 100, "original", "n1", told),
                wire("c", 3, 100, "copy", by, answer),
            ],
        )
    }

    fn run(cases: Vec<(Op, Vec<WireEvent>)>, expect_late: bool) -> CheckResult {
        let ops: Vec<Op> = cases.iter().map(|(o, _)| o.clone()).collect();
        let events: Vec<WireEvent> = cases.into_iter().flat_map(|(_, w)| w).collect();
        let refs: Vec<&WireEvent> = events.iter().collect();
        check(&ops, &refs, expect_late)
    }

    #[test]
    fn copies_that_agree_pass() {
        let r = run(late(MIN_LATE_COMPARED, "n1"), true);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn a_copy_granted_after_its_client_was_told_held_fails() {
        let mut cases = late(MIN_LATE_COMPARED, "n1");
        cases.push(copied(
            claim_held("c", "other", 7, 100, 110),
            WireAnswer::Held { token: 7 },
            "n1",
            WireAnswer::Granted { token: 9 },
        ));
        let r = run(cases, true);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(
            r.violations[0].message.contains("never heard of"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_late_first_attempt_told_held_after_its_retry_was_granted_fails() {
        let mut cases = late(MIN_LATE_COMPARED, "n1");
        cases.push((
            claim_ok("c", 9, 100, 3000),
            vec![
                wire(
                    "c",
                    3,
                    2000,
                    "original",
                    "n1",
                    WireAnswer::Granted { token: 9 },
                ),
                wire("c", 3, 100, "delayed", "n1", WireAnswer::Held { token: 12 }),
            ],
        ));
        let r = run(cases, true);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.violations[0].message.contains("contradicts"));
    }

    #[test]
    fn a_claim_that_heard_nothing_compares_nothing() {
        let mut cases = late(MIN_LATE_COMPARED, "n1");
        cases.push(copied(
            claim_info("c", 100),
            WireAnswer::Held { token: 7 },
            "n1",
            WireAnswer::Granted { token: 9 },
        ));
        let r = run(cases, true);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn a_contradiction_across_leaders_is_listed_not_failed() {
        let mut cases = late(MIN_LATE_COMPARED, "n1");
        cases.push(copied(
            claim_held("c", "other", 7, 100, 110),
            WireAnswer::Held { token: 7 },
            "n2",
            WireAnswer::Granted { token: 9 },
        ));
        let r = run(cases, true);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(r
            .summary
            .contains("1 contradictions between answers decided by different leaders"));
    }

    #[test]
    fn too_few_late_copies_are_unknown_where_faults_made_them() {
        let r = run(late(MIN_LATE_COMPARED - 1, "n1"), true);
        assert_eq!(r.verdict, Verdict::Unknown, "{}", r.summary);
        let r = run(late(MIN_LATE_COMPARED - 1, "n1"), false);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }
}
