//! Unit tests of retries (`Op::Retry`, data format 15): a retry acts once, however many
//! other clients wrote in between; one the table cannot match to its first attempt is
//! refused as too old, never applied afresh.

use super::limits::{DEDUP_ANSWERS_PER_CLIENT_MAX, DEDUP_CLIENTS_MAX};
use super::*;

fn holder(name: &str) -> Holder {
    Holder {
        name: name.into(),
        client_id: format!("{name}-proc").into(),
    }
}

/// `op` sent by `client` as its request `seq`, on behalf of `session`.
fn sent(client: &str, session: &str, seq: u64, op: Op) -> LogCommand {
    LogCommand {
        request_id: Some(RequestId {
            client_id: client.into(),
            seq,
        }),
        leader_unix_ms: 1_000 + seq,
        op,
        sender: Some(Sender {
            client_id: session.into(),
            principal: None,
        }),
    }
}

/// `cmd` as a retry.
fn retried(cmd: &LogCommand) -> LogCommand {
    LogCommand {
        op: Op::Retry {
            op: Box::new(cmd.op.clone()),
        },
        ..cmd.clone()
    }
}

fn claim(key: &str, who: &Holder) -> Op {
    Op::Claim {
        key: key.into(),
        holder: who.clone(),
        ttl_ms: 10_000,
    }
}

fn claimed_by(t: &mut LeaseTable, index: u64, key: &str, who: &Holder) -> u64 {
    let id = who.client_id.to_string();
    match t.apply(index, &sent(&id, &id, index, claim(key, who))) {
        Outcome::Granted { lease, .. } => lease.token,
        other => panic!("{other:?}"),
    }
}

fn too_old(outcome: Outcome) -> String {
    match outcome {
        Outcome::RetryTooOld { message } => message,
        other => panic!("expected a retry too old to tell, got {other:?}"),
    }
}

/// `DEDUP_CLIENTS_MAX` other clients write, from `index` on: every earlier client is
/// forgotten. Returns the next index.
fn churn(t: &mut LeaseTable, mut index: u64) -> u64 {
    for i in 0..DEDUP_CLIENTS_MAX {
        index += 1;
        let other = format!("churn-{i}");
        let op = Op::Renew {
            key: "churn/none".into(),
            token: 1,
        };
        t.apply(index, &sent(&other, &other, 1, op));
    }
    index + 1
}

/// The run, in the table: an operator's revoke (op, 1) of h1's lease; 10,000 other
/// clients write; h2 claims the key; the operator's client resends (op, 1) as a retry whose
/// first answer was lost. As a plain command (before format 15) it revoked h2's lease; as a
/// retry it is refused as too old, and h2 keeps the key.
#[test]
fn a_retry_of_a_forgotten_client_is_refused_as_too_old_and_changes_nothing() {
    let mut t = LeaseTable::default();
    claimed_by(&mut t, 1, "k", &holder("h1"));
    let revoke = sent(
        "op",
        "op",
        1,
        Op::Revoke {
            key: "k".into(),
            reason: "h1 is stuck".into(),
        },
    );
    assert!(matches!(t.apply(2, &revoke), Outcome::Revoked { .. }));
    let index = churn(&mut t, 2);
    assert!(
        t.session("op").is_none(),
        "the operator's client is forgotten"
    );
    let h2 = claimed_by(&mut t, index, "k", &holder("h2"));
    let message = too_old(t.apply(index + 1, &retried(&revoke)));
    assert!(message.contains("retry too old"), "{message}");
    assert_eq!(t.lease("k").map(|l| l.token), Some(h2), "h2 keeps the key");
    // The plain command, as an older client sends it, is applied afresh: the hole format
    // 15 closes for clients that mark their retries.
    assert!(matches!(
        t.apply(index + 2, &revoke),
        Outcome::Revoked { previous: Some(_) }
    ));
}

/// A forgotten client remembered again from a later request: a retry of an earlier one is
/// below every answer kept for it, so its first attempt may have been applied before.
#[test]
fn a_retry_below_every_answer_kept_is_refused_as_too_old() {
    let mut t = LeaseTable::default();
    let a = holder("a");
    let first = sent("ca", "a-proc", 1, claim("k1", &a));
    assert!(matches!(t.apply(1, &first), Outcome::Granted { .. }));
    let index = churn(&mut t, 1);
    assert!(t.session("ca").is_none());
    let later = sent("ca", "a-proc", 2, claim("k2", &a));
    assert!(matches!(t.apply(index, &later), Outcome::Granted { .. }));
    too_old(t.apply(index + 1, &retried(&first)));
}

/// A retry whose answer is remembered gets it; one of a remembered client that was never
/// applied (at or above its answers) is applied, once.
#[test]
fn a_retry_the_table_can_match_is_answered_or_applied_once() {
    let mut t = LeaseTable::default();
    let a = holder("a");
    let first = sent("ca", "a-proc", 1, claim("k1", &a));
    let granted = t.apply(1, &first);
    assert_eq!(
        t.apply(2, &retried(&first)),
        granted,
        "the first answer again"
    );
    let never_applied = sent("ca", "a-proc", 2, claim("k2", &a));
    let once = t.apply(3, &retried(&never_applied));
    assert!(matches!(once, Outcome::Granted { .. }), "{once:?}");
    assert_eq!(t.apply(4, &retried(&never_applied)), once);
    assert_eq!(t.apply(5, &never_applied), once, "a plain copy gets it too");
}

/// Past the answers kept per client, a retry at or below the forgotten seq is too old, as
/// a plain command is.
#[test]
fn a_retry_whose_answer_was_dropped_is_refused_as_too_old() {
    let mut t = LeaseTable::default();
    let a = holder("a");
    let n = DEDUP_ANSWERS_PER_CLIENT_MAX as u64 + 2;
    let cmds: Vec<LogCommand> = (1..=n)
        .map(|seq| sent("ca", "a-proc", seq, claim(&format!("k{seq}"), &a)))
        .collect();
    for (i, cmd) in cmds.iter().enumerate() {
        t.apply(i as u64 + 1, cmd);
    }
    too_old(t.apply(n + 1, &retried(&cmds[0])));
    assert_eq!(t.apply(n + 2, &retried(&cmds[n as usize - 1])), {
        let mut again = t.clone();
        again.apply(n + 3, &cmds[n as usize - 1])
    });
}

#[test]
fn a_retry_is_the_same_request_as_its_first_attempt_and_a_retry_of_one_is_bad_input() {
    let op = claim("k", &holder("a"));
    let retry = Op::Retry {
        op: Box::new(op.clone()),
    };
    assert_eq!(retry.fingerprint(), op.fingerprint());
    assert_eq!(retry.key(), "k");
    assert!(retry.validate().is_ok());
    let twice = Op::Retry {
        op: Box::new(retry),
    };
    assert!(twice.validate().is_err());
}
