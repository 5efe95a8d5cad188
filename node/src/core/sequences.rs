//! Random command sequences against the pure core (hostile input), drawn from any
//! source of randomness: seeded in the CI test below (`prop_tests`), fuzz input bytes in the
//! libFuzzer target `sequences` (`crate::fuzzing`). Whatever the sequence, `apply` never
//! panics (debug builds also run `check_invariants` after each command), two replicas that apply the same sequence end equal, a replica restored from an
//! encoded copy half-way goes on identically, and per key: at most one holder, tokens never
//! go backwards, a grant's token is its own revision, history revisions strictly increase;
//! and who acted: every event credits the command's real sender (session and principal), a
//! lease is renewed or released only from its holder's session, a claim never adopts one.
//!
//! The generator favours the interesting cases: few keys and holders (so commands collide),
//! tokens that are current, stale or made up, retried request ids, expiries and lapses racing
//! renewals, and now and then input the validator refuses (empty, overlong, control chars).
//! `BATON_PROP_SEEDS=N` runs more seeds (CI runs `SEEDS_DEFAULT`, in about a second).

use rand::{Rng, RngCore};

use super::table::Walk;
use super::*;

/// Commands per sequence, at most.
pub const STEPS_MAX: u64 = 600;

const KEYS: [&str; 4] = ["tasks/a", "tasks/b", "jobs/c", "tasks/a/sub"];
const NAMES: [&str; 3] = ["ann@h1", "bob@h2", "cy@h3"];

/// Strings that validation refuses, or that sit at its edges.
fn odd_string(rng: &mut dyn RngCore) -> String {
    match rng.gen_range(0..6) {
        0 => String::new(),
        1 => "x".repeat(rng.gen_range(200..5_000)),
        2 => "bad\u{0}key".into(),
        3 => "tasks/\n".into(),
        4 => "é".repeat(rng.gen_range(1..300)),
        _ => "  ".into(),
    }
}

fn pick<'a>(rng: &mut dyn RngCore, from: &[&'a str]) -> &'a str {
    from[rng.gen_range(0..from.len())]
}

fn key(rng: &mut dyn RngCore) -> String {
    if rng.gen_ratio(1, 40) {
        odd_string(rng)
    } else {
        pick(rng, &KEYS).to_owned()
    }
}

fn holder(rng: &mut dyn RngCore) -> Holder {
    let i = rng.gen_range(0..NAMES.len());
    Holder {
        name: if rng.gen_ratio(1, 50) {
            odd_string(rng).into()
        } else {
            NAMES[i].into()
        },
        // Two processes may share a name: same name, other client id.
        client_id: format!("{:032x}", i as u64 * 7 + rng.gen_range(0..2u64)).into(),
    }
}

/// A token: mostly one some lease really had, else a made-up one.
fn token(rng: &mut dyn RngCore, table: &LeaseTable, key: &str, seen: &[u64]) -> u64 {
    match rng.gen_range(0..4) {
        0 | 1 => table
            .lease(key)
            .or_else(|| table.holders(key).and_then(|h| h.leases.last()))
            .map_or(1, |l| l.token),
        2 if !seen.is_empty() => seen[rng.gen_range(0..seen.len())],
        _ => rng.gen_range(0..1_000),
    }
}

fn ttl(rng: &mut dyn RngCore) -> u64 {
    match rng.gen_range(0..10) {
        0 => 0,
        1 => u64::MAX,
        _ => rng.gen_range(1_000..60_000),
    }
}

fn op(rng: &mut dyn RngCore, table: &LeaseTable, seen: &[u64]) -> Op {
    let key = key(rng);
    let token = token(rng, table, &key, seen);
    // Mostly the N the keys are claimed with; now and then another, or an invalid one.
    let sharing = |rng: &mut dyn RngCore| match rng.gen_range(0..9) {
        0 | 1 => super::permits::Sharing::Shared,
        n => super::permits::Sharing::Permits([2, 3, 3, 3, 0, 1, 5_000][n - 2]),
    };
    let permit = |rng: &mut dyn RngCore, key: String| Op::ClaimPermit {
        key,
        holder: holder(rng),
        ttl_ms: ttl(rng),
        sharing: sharing(rng),
    };
    match rng.gen_range(0..25) {
        21 => permit(rng, key),
        23 => Op::WaitPermit {
            key,
            holder: holder(rng),
            ttl_ms: ttl(rng),
            sharing: sharing(rng),
        },
        24 => Op::HandOn {
            key,
            basis: token.max(1),
        },
        22 => {
            // An end of a permit that is there: its renewal, release or expiry.
            let held = table
                .holders(&key)
                .map(|h| h.leases.clone())
                .unwrap_or_default();
            match held.get(rng.gen_range(0..held.len() + 1)) {
                Some(l) => match rng.gen_range(0..3) {
                    0 => Op::Renew {
                        key,
                        token: l.token,
                    },
                    1 => Op::Release {
                        key,
                        token: l.token,
                        final_status: rng.gen_ratio(1, 5).then(|| "done".into()),
                    },
                    _ => Op::Expire {
                        key,
                        token: l.token,
                        basis: l.basis + u64::from(rng.gen_ratio(1, 4)),
                    },
                },
                None => permit(rng, key),
            }
        }
        18 | 19 => Op::Wait {
            key,
            holder: holder(rng),
            ttl_ms: ttl(rng),
        },
        20 if rng.gen_ratio(1, 2) => Op::LeaveLine {
            key,
            holder: holder(rng),
        },
        20 => {
            // Mostly a place that is there, with its basis; else a stale or made-up one.
            let line = table.line(&key);
            let (client_id, basis) = match line.get(rng.gen_range(0..line.len() + 1)) {
                Some(w) if rng.gen_ratio(3, 4) => (w.holder.client_id.to_string(), w.basis),
                Some(w) => (w.holder.client_id.to_string(), w.basis + 1),
                None => (holder(rng).client_id.to_string(), token.max(1)),
            };
            Op::DropWaiter {
                key,
                client_id,
                basis,
            }
        }
        0..=2 => Op::Claim {
            key,
            holder: holder(rng),
            ttl_ms: ttl(rng),
        },
        3 => Op::Renew { key, token },
        4 => Op::Release {
            key,
            token,
            final_status: rng.gen_ratio(1, 3).then(|| "done".into()),
        },
        5 => {
            let basis = table.lease(&key).map_or(token, |l| l.basis);
            Op::Expire { key, token, basis }
        }
        6 if rng.gen_ratio(1, 2) => Op::RevokeHeld {
            key,
            reason: "operator".into(),
        },
        6 => Op::Revoke {
            key,
            reason: "operator".into(),
        },
        7 => Op::Update {
            key,
            token,
            patch: RecordPatch {
                status: Some(if rng.gen_ratio(1, 10) {
                    odd_string(rng)
                } else {
                    "in_progress".into()
                }),
                ..RecordPatch::default()
            },
        },
        8 if rng.gen_ratio(1, 3) => Op::Unassign {
            key,
            by: "dispatcher".into(),
            reason: "done".into(),
        },
        8 => Op::Assign {
            key,
            to: pick(rng, &NAMES).into(),
            by: "dispatcher".into(),
            reason: "load".into(),
        },
        9 => Op::Offer {
            key,
            token,
            to: pick(rng, &NAMES).into(),
            note: HandoffNote {
                done: "half".into(),
                ..HandoffNote::default()
            },
            offer_ttl_ms: ttl(rng),
        },
        10 => Op::Accept {
            key,
            holder: holder(rng),
            ttl_ms: ttl(rng),
        },
        11 => Op::Decline {
            key,
            holder: holder(rng),
        },
        12 => Op::Cancel { key, token },
        14 => Op::Post {
            key,
            patch: RecordPatch {
                summary: rng.gen_ratio(1, 2).then(|| "a task".into()),
                status: rng
                    .gen_ratio(1, 4)
                    .then(|| pick(rng, &["open", "done"]).into()),
                set_fields: [("role".to_owned(), pick(rng, &["coder", "reviewer"]).into())]
                    .into_iter()
                    .filter(|_| rng.gen_ratio(1, 2))
                    .collect(),
                ..RecordPatch::default()
            },
            to: rng.gen_ratio(1, 3).then(|| pick(rng, &NAMES).into()),
            by: "dispatcher".into(),
            update: rng.gen_ratio(1, 3),
        },
        15 => {
            let op = Op::ClaimNext {
                prefix: pick(rng, &["tasks/", "jobs/", "tasks/a", "nope/"]).into(),
                holder: holder(rng),
                ttl_ms: ttl(rng),
                any: rng.gen_ratio(1, 3),
                wheres: [("role".to_owned(), "coder".to_owned())]
                    .into_iter()
                    .filter(|_| rng.gen_ratio(1, 3))
                    .collect(),
            };
            // Format 9's walk of every case file, or format 14's of the unfinished keys.
            match rng.gen_bool(0.5) {
                true => op,
                false => op.with_walk(Walk::Unfinished),
            }
        }
        16 => {
            let mut keys: Vec<String> = KEYS
                .iter()
                .filter(|_| rng.gen_ratio(1, 2))
                .map(|k| (*k).to_owned())
                .collect();
            if rng.gen_ratio(1, 10) {
                keys.push(self::key(rng));
            }
            Op::ClaimSet {
                keys,
                holder: holder(rng),
                ttl_ms: ttl(rng),
            }
        }
        13 => Op::SetQuarantine {
            prefix: pick(rng, &["tasks/", "jobs/", "", "nope/"]).into(),
            delay_ms: rng.gen_range(0..3) * 1_000,
        },
        _ => {
            let revision = rng.gen_range(0..seen.len() as u64 + 2);
            if rng.gen_bool(0.5) {
                Op::EndQuarantine { key, revision }
            } else {
                Op::Lapse {
                    key,
                    offer_revision: revision,
                }
            }
        }
    }
}

/// A command, and whether it retries an earlier one (same request id, same operation).
fn command(
    rng: &mut dyn RngCore,
    table: &LeaseTable,
    seen: &[u64],
    sent: &mut Vec<LogCommand>,
) -> (LogCommand, bool) {
    if !sent.is_empty() && rng.gen_ratio(1, 12) {
        let mut again = sent[rng.gen_range(0..sent.len())].clone();
        // Half the resends say they are retries (data format 15): matched to their first
        // attempt, or refused as too old, never applied afresh.
        if again.request_id.is_some() && rng.gen_bool(0.5) {
            again.op = Op::Retry {
                op: Box::new(again.op),
            };
        }
        return (again, true);
    }
    let op = op(rng, table, seen);
    let leaders = matches!(
        op,
        Op::Expire { .. }
            | Op::Lapse { .. }
            | Op::EndQuarantine { .. }
            | Op::DropWaiter { .. }
            | Op::HandOn { .. }
    );
    let request_id = (!leaders && rng.gen_ratio(2, 3)).then(|| RequestId {
        client_id: format!("{:032x}", rng.gen_range(0..4u64)),
        seq: sent.len() as u64 + 1,
    });
    // Who sends it: mostly the session the operation needs (a claim's holder, the lease
    // holder for a write with a token), else another one (refused as another session's, or
    // as bad input for a claim); now and then a format-3 command (no sender).
    let format_3 = request_id.is_some() && rng.gen_ratio(1, 20);
    let sender = (!leaders && !format_3).then(|| {
        // A claimant's own session; else, for a write with a token, its lease's holder (a
        // permit's too); else the key's holder.
        let needed = op
            .claimant()
            .map(|h| h.client_id.clone())
            .or_else(|| match &op {
                Op::Renew { key, token }
                | Op::Release { key, token, .. }
                | Op::Update { key, token, .. }
                | Op::Offer { key, token, .. }
                | Op::Cancel { key, token } => table
                    .held_by(key, *token, "", true)
                    .ok()
                    .map(|l| l.holder.client_id),
                op => table.lease(op.key()).map(|l| l.holder.client_id.clone()),
            });
        Sender {
            client_id: match needed {
                Some(id) if rng.gen_ratio(4, 5) => id,
                _ => format!("{:032x}", rng.gen_range(0..(NAMES.len() as u64 * 7))).into(),
            },
            principal: match rng.gen_range(0..3) {
                0 => None,
                _ => Some(pick(rng, &["ann", "ops"]).into()),
            },
        }
    });
    let cmd = LogCommand {
        request_id,
        leader_unix_ms: 1_700_000_000_000 + sent.len() as u64,
        op,
        sender,
    };
    if cmd.request_id.is_some() {
        sent.push(cmd.clone());
    }
    (cmd, false)
}

/// A `claim-next` picks the same key by format 9's walk of every case file as by format 14's
/// of the unfinished keys (these tables stay far below the scan limit), and, when there is
/// none, counts the same, but for the finished keys, which format 14's does not look at.
fn check_walks_agree(table: &LeaseTable, op: &Op, what: &str) {
    if !matches!(op, Op::ClaimNext { .. } | Op::ClaimNextUnfinished { .. }) {
        return;
    }
    let old = op.clone().with_walk(Walk::EveryCaseFile);
    let new = op.clone().with_walk(Walk::Unfinished);
    match (table.claim_next_pick(&old), table.claim_next_pick(&new)) {
        (Some(Ok(a)), Some(Ok(b))) => assert_eq!(a, b, "{what}: the walks grant apart: {op:?}"),
        (
            Some(Err(Outcome::NothingClaimable { counts: a, .. })),
            Some(Err(Outcome::NothingClaimable { counts: b, .. })),
        ) => {
            // A finished key that is held or quarantined counts as such in format 9's walk,
            // and is not looked at by format 14's.
            let apart = format!("{what}: the walks count apart: {op:?}: {a:?}, {b:?}");
            assert_eq!(b.finished, 0, "{apart}");
            assert!(
                b.held <= a.held && b.quarantined <= a.quarantined,
                "{apart}"
            );
            assert_eq!(
                (b.unmatched, b.assigned_elsewhere, b.truncated),
                (a.unmatched, a.assigned_elsewhere, a.truncated),
                "{apart}"
            );
            assert_eq!(
                b.scanned,
                b.held + b.quarantined + b.unmatched + b.assigned_elsewhere,
                "{apart}"
            );
            assert_eq!(
                a.scanned - b.scanned,
                a.finished + (a.held - b.held) + (a.quarantined - b.quarantined),
                "{apart}: what only format 9's walk looks at is finished"
            );
        }
        other => panic!("{what}: the walks answer apart: {op:?}: {other:?}"),
    }
}

/// Checks who acted: every event the command at `revision` recorded names its real sender
/// (session and principal), or, for a format-3 command, is marked as recorded by that
/// format's rules; the leader's own entries credit no one. A lease is renewed or released
/// only by its holder's session, and a repeated claim never renames or adopts a lease.
fn check_actors(table: &LeaseTable, revision: u64, cmd: &LogCommand, outcome: &Outcome) {
    // `claim-next` acts on the key it picked, under its prefix.
    let key = match (&cmd.op, outcome) {
        (
            Op::ClaimNext { prefix, holder, .. } | Op::ClaimNextUnfinished { prefix, holder, .. },
            Outcome::Granted { lease, .. },
        ) => {
            assert!(
                lease.key.starts_with(prefix.as_str()),
                "{lease:?} of {cmd:?}"
            );
            assert_eq!(&lease.holder, holder, "{cmd:?}");
            &*lease.key
        }
        (op, _) => op.key(),
    };
    let events = table
        .case(key)
        .map(|c| c.history.events.iter().filter(|e| e.revision == revision));
    let claims = matches!(
        cmd.op,
        Op::Claim { .. }
            | Op::ClaimNext { .. }
            | Op::ClaimNextUnfinished { .. }
            | Op::ClaimSet { .. }
            | Op::Wait { .. }
            | Op::ClaimPermit { .. }
            | Op::WaitPermit { .. }
    );
    for event in events.into_iter().flatten() {
        // A freed key handed on to its oldest waiter: credited to the waiter, who holds it.
        if event.kind == EventKind::Claimed && !claims {
            let permit = table
                .holders(key)
                .and_then(|h| h.leases.iter().find(|l| l.token == event.token));
            let holder = table.lease(key).or(permit).map(|l| &l.holder.client_id);
            let actor = event.actor.as_ref().map(|a| &a.client_id);
            assert!(
                holder.is_some() && actor == holder,
                "a hand-on of {key} credited to {actor:?}, held by {holder:?}: {cmd:?}"
            );
            continue;
        }
        match (&cmd.sender, &event.actor) {
            (Some(sender), Some(actor)) => {
                assert_eq!(actor.client_id, sender.client_id, "{event:?} of {cmd:?}");
                assert_eq!(actor.principal, sender.principal, "{event:?} of {cmd:?}");
                assert_eq!(event.attribution, Attribution::Requester, "{event:?}");
            }
            (Some(_), None) => panic!("an event of {cmd:?} credits no one: {event:?}"),
            (None, _) if cmd.is_format_3() => assert!(
                event.actor.is_none() || event.attribution == Attribution::RecordedBeforeFormat4,
                "{event:?} of format-3 {cmd:?}"
            ),
            (None, actor) => assert!(actor.is_none(), "{event:?} of the leader's {cmd:?}"),
        }
    }
    let Some(sender) = cmd.sender.as_ref() else {
        return;
    };
    match outcome {
        Outcome::Renewed { lease } | Outcome::Released { lease } => assert_eq!(
            lease.holder.client_id, sender.client_id,
            "another session's write to a lease: {cmd:?}"
        ),
        Outcome::Granted {
            lease,
            already_held: true,
            ..
        } => match &cmd.op {
            Op::Claim { holder, .. } | Op::Wait { holder, .. } => {
                assert_eq!(&lease.holder, holder, "adopted: {cmd:?}")
            }
            op => panic!("a grant answered {op:?}"),
        },
        Outcome::GrantedPermit { lease, .. } => match &cmd.op {
            Op::ClaimPermit { holder, .. } | Op::WaitPermit { holder, .. } => {
                assert_eq!(&lease.holder, holder, "another's permit: {cmd:?}")
            }
            op => panic!("a permit answered {op:?}"),
        },
        _ => {}
    }
}

/// Checks what must hold of `table` after the command at `revision` produced `outcome`.
fn check(table: &LeaseTable, revision: u64, outcome: &Outcome, last_token: &mut [u64; 4]) {
    if let Outcome::Granted {
        lease,
        already_held: false,
        ..
    } = outcome
    {
        assert_eq!(lease.token, revision, "a new grant's token is its revision");
    }
    // A set is held whole by its claimant, every new grant at the entry's revision.
    if let Outcome::GrantedSet { grants } = outcome {
        for g in grants {
            assert!(g.already_held || g.lease.token == revision, "{g:?}");
            assert_eq!(table.lease(&g.lease.key), Some(&g.lease), "{g:?}");
        }
    }
    // A new permit's token is its revision; the permits of a key are never more than N,
    // each its own token.
    if let Outcome::GrantedPermit {
        lease,
        already_held,
        sharing,
        holders,
        ..
    } = outcome
    {
        assert!(*already_held || lease.token == revision, "{lease:?}");
        assert!(holders.len() <= sharing.permits() as usize && holders.contains(lease));
        assert_eq!(table.holders(&lease.key).map(|h| &h.leases), Some(holders));
    }
    for key in KEYS {
        if let Some(held) = table.holders(key) {
            let tokens: std::collections::BTreeSet<u64> =
                held.leases.iter().map(|l| l.token).collect();
            assert_eq!(tokens.len(), held.leases.len(), "{key}: a token twice");
            assert!(held.leases.len() <= held.sharing.permits() as usize);
            assert!(table.lease(key).is_none(), "{key}: held both ways");
        }
    }
    for (i, key) in KEYS.iter().enumerate() {
        if let Some(lease) = table.lease(key) {
            assert!(
                lease.token >= last_token[i],
                "{key}: token went back from {} to {}",
                last_token[i],
                lease.token
            );
            assert!(
                lease.token <= revision && lease.basis <= revision,
                "{key}: from the future"
            );
            last_token[i] = lease.token;
        }
        if let Some(case) = table.case(key) {
            let revisions: Vec<u64> = case.history.events.iter().map(|e| e.revision).collect();
            assert!(
                // A freed key handed on records its end and the new grant at one revision.
                revisions.windows(2).all(|w| w[0] <= w[1]),
                "{key}: history out of order: {revisions:?}"
            );
            assert!(revisions.last().is_none_or(|r| *r <= revision));
        }
    }
}

/// Runs one sequence of `steps` commands (2 to [`STEPS_MAX`]) drawn from `rng`, checking
/// every property above (panics, naming `what`, if one fails); returns how often each kind of
/// outcome came up.
pub fn run(
    rng: &mut dyn RngCore,
    steps: u64,
    what: &str,
) -> std::collections::BTreeMap<String, u64> {
    let steps = steps.clamp(2, STEPS_MAX);
    let mut kinds = std::collections::BTreeMap::new();
    let (mut a, mut b) = (LeaseTable::default(), LeaseTable::default());
    let mut restored: Option<LeaseTable> = None;
    let restore_at = rng.gen_range(1..steps);
    let mut seen = Vec::new();
    let mut sent = Vec::new();
    let mut last_token = [0u64; 4];
    let mut first_answers = std::collections::HashMap::new();
    for revision in 1..=steps {
        let (cmd, retry) = command(rng, &a, &seen, &mut sent);
        // What the leader would answer from a read, with no log entry: exactly what the log
        // answers, and the log changes nothing but its memory of answers.
        let unchanged = a.unchanged_answer(&cmd).map(|answer| (answer, a.clone()));
        let head = a.line(cmd.op.key()).front().map(|w| w.holder.clone());
        let line_before: Vec<Holder> = a
            .line(cmd.op.key())
            .iter()
            .map(|w| w.holder.clone())
            .collect();
        check_walks_agree(&a, &cmd.op, what);
        let outcome = a.apply(revision, &cmd);
        // A key freed with someone in line goes to the oldest waiter, in this entry.
        let handed_on = matches!(
            outcome,
            Outcome::Released { .. }
                | Outcome::Expired { .. }
                | Outcome::Revoked { .. }
                | Outcome::QuarantineEnded
        ) && a.lease(cmd.op.key()).is_some_and(|l| l.token == revision);
        if handed_on {
            let lease = a.lease(cmd.op.key()).expect("checked");
            assert_eq!(Some(&lease.holder), head.as_ref(), "{what}: not the head");
            assert_eq!(lease.token, revision, "{what}: a hand-on's token");
            *kinds.entry("HandedOn".into()).or_insert(0u64) += 1;
        }
        // A permit or a share granted by a write that is not its claim goes to the head of
        // the line, with this entry's revision as its token.
        let granted_permit = a
            .holders(cmd.op.key())
            .and_then(|h| h.leases.iter().find(|l| l.token == revision));
        let permit_claims = matches!(cmd.op, Op::ClaimPermit { .. } | Op::WaitPermit { .. });
        if let Some(lease) = granted_permit.filter(|_| !permit_claims) {
            // The head, or the first after those ahead of it that left the line in this
            // entry (the entry's own waiter leaving, or one granted another way before).
            let at = line_before.iter().position(|h| *h == lease.holder);
            assert!(at.is_some(), "{what}: {:?} was not in line", lease.holder);
            let left_ahead = line_before[..at.unwrap_or(0)]
                .iter()
                .all(|h| !a.line(cmd.op.key()).iter().any(|w| w.holder == *h));
            assert!(left_ahead, "{what}: granted past a waiter ahead");
            *kinds.entry("PermitHandedOn".into()).or_insert(0u64) += 1;
        }
        if let Some((answer, before)) = unchanged {
            assert_eq!(answer, outcome, "{what}: the read's answer to {cmd:?}");
            assert!(
                a.same_but_sessions(&before),
                "{what}: {cmd:?} changed the table although answered without the log"
            );
            *kinds.entry("WithoutLog".into()).or_insert(0u64) += 1;
        }
        let kind: String = format!("{outcome:?}")
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect();
        *kinds.entry(kind).or_insert(0u64) += 1;
        if let Some(id) = &cmd.request_id {
            let id = (id.client_id.clone(), id.seq);
            if retry {
                // A retry gets the first answer again, and changes nothing.
                let first = &first_answers[&id];
                assert!(
                    outcome == *first || matches!(outcome, Outcome::RetryTooOld { .. }),
                    "{what}: a retry answered {outcome:?}, first {first:?}"
                );
            } else {
                first_answers.insert(id, outcome.clone());
            }
        }
        assert_eq!(
            b.apply(revision, &cmd),
            outcome,
            "{what}: replicas disagree"
        );
        if let Some(c) = restored.as_mut() {
            assert_eq!(
                c.apply(revision, &cmd),
                outcome,
                "{what}: restored copy disagrees"
            );
        }
        if let Some(l) = a.lease(cmd.op.key()) {
            seen.push(l.token);
        }
        if !retry {
            check(&a, revision, &outcome, &mut last_token);
            check_actors(&a, revision, &cmd, &outcome);
        }
        if revision == restore_at {
            // The encoding the store keeps the table in (bincode's default), without the core
            // reaching up into the store for it.
            // The lines go beside the table, as `store::SmState` encodes them.
            // So do the permit holders, and what waiters for permits wait for.
            let bytes = bincode::serialize(&(&a, a.lines(), a.all_holders(), a.waiting_for()))
                .expect("the table encodes");
            let (mut copy, lines, holders, waiting_for): (LeaseTable, _, _, _) =
                bincode::deserialize(&bytes).expect("the table decodes");
            copy.set_lines(lines);
            copy.set_holders(holders);
            copy.set_waiting_for(&waiting_for);
            copy.rebuild_index();
            restored = Some(copy);
        }
    }
    assert!(a == b, "{what}: replicas ended apart");
    // The derived indexes (the unfinished keys among them), kept entry by entry, are what
    // rebuilding them from the state gives.
    let mut rebuilt = a.clone();
    rebuilt.rebuild_index();
    assert!(
        rebuilt == a,
        "{what}: an index kept by apply is not the rebuilt one"
    );
    assert!(
        restored.is_some_and(|c| c == a),
        "{what}: the restored copy ended apart"
    );
    kinds
}

#[cfg(test)]
mod prop_tests {
    use rand::SeedableRng;

    /// Seeds per run.
    const SEEDS_DEFAULT: u64 = 64;

    #[test]
    fn random_command_sequences_never_panic_and_keep_every_invariant() {
        let seeds = std::env::var("BATON_PROP_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(SEEDS_DEFAULT);
        let mut kinds = std::collections::BTreeMap::new();
        for seed in 0..seeds {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            for (kind, n) in super::run(&mut rng, super::STEPS_MAX, &format!("seed {seed}")) {
                *kinds.entry(kind).or_insert(0) += n;
            }
        }
        // The kept corpus of the libFuzzer target `sequences`, as its bytes drive it.
        for (name, bytes) in crate::fuzzing::kept_corpus("sequences") {
            crate::fuzzing::sequence(&bytes, &name);
        }
        // The sequences reach every path that matters, not just refusals.
        for kind in [
            "Granted",
            "Held",
            "Renewed",
            "Released",
            "Lost",
            "Expired",
            "Revoked",
            "Invalid",
            "Updated",
            "Offered",
            "Accepted",
            "Declined",
            "Cancelled",
            "Posted",
            "NothingClaimable",
            "GrantedSet",
            "BlockedSet",
            "InLine",
            "LeftLine",
            "WaiterDropped",
            "HandedOn",
            "PermitHandedOn",
            "HandOnDone",
            "GrantedPermit",
            "HeldByHolders",
            // Answered as the leader would from a read, with no log entry.
            "WithoutLog",
        ] {
            assert!(
                kinds.get(kind).is_some_and(|n| *n > 0),
                "no {kind} in {kinds:?}"
            );
        }
    }
}
