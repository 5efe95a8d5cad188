//! The checkers: they read a run's history and say whether baton kept its promises.
//!
//! - [`wgl`] + [`model`]: per-key linearizability of every baton operation against the lease
//!   model (the authority: it sees info operations, hidden expiry and offers); a read whose
//!   record list cannot be decoded fails it outright;
//! - [`tokens`]: fencing tokens unique per key and increasing in real-time order;
//! - [`intervals`]: the windows in which workers believed they held a key never overlap, and
//!   the client library's safe deadlines are never later than it promises;
//! - [`fencing`]: no write with a stale token was accepted;
//! - [`copies`]: every answer to any copy of a claim (late first attempts, retries, copies a
//!   proxy made) is the one its client heard;
//! - [`notice`] (runs with a revoker): every guard holder hears of its lease's revoke within
//!   the bound, or the failover time after a fault;
//! - [`tasks`] (runs with the `task-takers` workload): `claim-next` hands a task to one taker
//!   at a time, tokens in time order, and a finished task to no one;
//! - [`sets`] (runs with the `set-takers` workload): `claim-set` grants a set whole or not at
//!   all, each key to one holder at a time, tokens in time order, and every blocker it names
//!   is a real holder;
//! - [`lines`] (runs with the `waiters` and `permit-waiters` workloads): a key's line grants
//!   it to one holder at a time (a key of N permits, to at most N at once, by the N the
//!   waits asked), tokens in time order, and never past a waiter for the same N that was
//!   certainly in line ahead;
//! - [`permits`] (runs with the `permit-holders` workload): a key of N permits has at most N
//!   holders at once (by the N the claims asked), each token granted to one session, tokens
//!   in time order, no permit ending early, and none leaked after the workload stopped;
//! - [`shared`] (runs with the `shared-holders` workload): a key held exclusively has that
//!   holder alone, shared holders only beside each other (by the mode the claims asked), each
//!   claim granted in the mode it asked, each token granted to one session, tokens in time
//!   order, no lease ending early, and none leaked after the workload stopped;
//! - [`lists`]: the record lists workers append to lose, duplicate, corrupt or invent nothing
//!   (also run on the unfenced canary's memory lists, where it must find lost updates).
//!
//! "Baton operations" are all operations but the canary's `MemRead`/`MemWrite`: the canary
//! workload's claims and releases are checked like everyone else's.
//!
//! All checkers are linear or near-linear except the WGL search, which has a per-key time
//! budget ([`CheckParams::wgl_budget_ms`]) and answers Unknown when it runs out.

pub mod copies;
pub mod fencing;
pub mod holds;
pub mod intervals;
pub mod lines;
pub mod lists;
pub mod model;
pub mod notice;
pub mod permits;
pub mod retries;
pub mod sets;
pub mod shared;
pub mod tasks;
pub mod tokens;
pub mod wgl;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod testkit;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::history::{
    Call, CheckParams, CheckResult, History, Kind, Nanos, Op, Reply, Verdict, Violation,
};

/// The ok grants (claims and accepts) among `ops`: (return time, token, the op).
pub(crate) fn ok_grants<'a>(ops: impl Iterator<Item = &'a Op>) -> Vec<(Nanos, u64, &'a Op)> {
    ops.filter_map(|o| match (&o.call, o.kind, &o.reply, o.ret_ns) {
        (
            Call::Claim { .. } | Call::Accept { .. },
            Kind::Ok,
            Some(Reply::Granted { token, .. }),
            Some(ret),
        ) => Some((ret, *token, o)),
        _ => None,
    })
    .collect()
}

/// The workload whose list lives in harness memory, guarded only by the lease.
pub const CANARY_WORKLOAD: &str = "unfenced-canary";

/// Violations kept per checker (the rest are counted in the summary only).
const VIOLATIONS_MAX: usize = 200;

/// Runs every baton checker on the history: linearizability, tokens, intervals, fencing and
/// lists, in that order, on every baton operation, the canary workload's claims and releases
/// included. Only the canary's `MemRead`/`MemWrite` are left out (see [`check_canary`]).
pub fn check_all(history: &History, params: &CheckParams) -> Vec<CheckResult> {
    let ops = history.ops();
    let baton: Vec<Op> = ops.into_iter().filter(is_baton).collect();
    vec![
        linearizability(&baton, params),
        tokens::check(&baton),
        intervals::check_with(&baton, &history.beliefs(), params),
        fencing::check(&baton),
        lists::check(&baton, lists::Source::Baton),
    ]
}

/// The list checker on the canary's in-memory list (`MemRead`/`MemWrite`). The harness expects
/// [`Verdict::Fail`]: a lease without fencing loses updates, and a checker that cannot see
/// that cannot be trusted to pass baton.
pub fn check_canary(history: &History) -> CheckResult {
    let ops = history.ops();
    let canary: Vec<Op> = ops
        .into_iter()
        .filter(|o| matches!(o.call, Call::MemRead | Call::MemWrite { .. }))
        .collect();
    lists::check(&canary, lists::Source::Canary)
}

/// Operation counts, for the "a pass is never empty" minimums and the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Keys with baton operations (canary keys excluded).
    pub keys: u64,
    /// Baton operations (canary workload excluded).
    pub ops: u64,
    /// Claims granted a new token (`ok`, not already held).
    pub ok_claims: u64,
    /// Claims by the holder that renewed its lease (`ok`, already held).
    pub ok_reclaims: u64,
    /// Renewals that extended a lease.
    pub ok_renews: u64,
    /// Leases given back.
    pub ok_releases: u64,
    /// Handoffs offered (each freezes the record until accepted or ended).
    pub ok_offers: u64,
    /// Accepted offers (a grant of a new token).
    pub ok_accepts: u64,
    /// Linearizable reads of lease and record.
    pub ok_reads: u64,
    /// Fenced writes baton accepted.
    pub ok_writes: u64,
    /// Writes a worker issued after its belief in the lease had ended.
    pub late_writes: u64,
    /// Late writes that baton nevertheless accepted (legal while the lease lived on).
    pub ok_late_writes: u64,
    /// Writes refused by the state machine (stale token or frozen record).
    pub refused_writes: u64,
    /// Late writes that were refused.
    pub refused_late_writes: u64,
    /// Refused writes that were certainly stale: late, or carrying a token below one whose
    /// grant had returned before the write was invoked. The fencing at work.
    pub refused_stale_writes: u64,
    /// Operations that definitely did not happen.
    pub fail_ops: u64,
    /// Operations with unknown outcome.
    pub info_ops: u64,
    /// Canary operations (`MemRead`/`MemWrite`).
    pub canary_ops: u64,
    /// Canary writes to the in-memory list (each should survive; some will not).
    pub canary_ok_writes: u64,
}

/// Counts the history's operations. The canary workload's claims and releases are checked
/// ([`check_all`]) but not counted here: the minimums are about the baton workloads.
pub fn counts(history: &History) -> Counts {
    let ops = history.ops();
    let mut c = Counts::default();
    let canary = |o: &Op| matches!(o.call, Call::MemRead | Call::MemWrite { .. });
    for o in ops.iter().filter(|o| canary(o)) {
        c.canary_ops += 1;
        c.canary_ok_writes +=
            u64::from(matches!(o.call, Call::MemWrite { .. }) && o.kind == Kind::Ok);
    }
    let baton: Vec<Op> = ops.into_iter().filter(is_baton_workload).collect();
    let keys = by_key(&baton);
    c.keys = keys.len() as u64;
    for kops in keys.values() {
        // Return times and tokens of the key's ok grants, to tell certainly stale writes.
        let grants: Vec<(u64, u64)> = ok_grants(kops.iter().copied())
            .into_iter()
            .map(|(ret, token, _)| (ret, token))
            .collect();
        for o in kops {
            c.ops += 1;
            match o.kind {
                Kind::Fail => c.fail_ops += 1,
                Kind::Info | Kind::Invoke => c.info_ops += 1,
                Kind::Ok => {}
            }
            let ok = o.kind == Kind::Ok;
            match (&o.call, &o.reply) {
                (Call::Claim { .. }, Some(Reply::Granted { already_held, .. })) if ok => {
                    if *already_held {
                        c.ok_reclaims += 1;
                    } else {
                        c.ok_claims += 1;
                    }
                }
                (Call::Accept { .. }, Some(Reply::Granted { .. })) if ok => c.ok_accepts += 1,
                (Call::Renew { .. }, _) if ok => c.ok_renews += 1,
                (Call::Release { .. }, _) if ok => c.ok_releases += 1,
                (Call::Offer { .. }, _) if ok => c.ok_offers += 1,
                (Call::Read, _) if ok => c.ok_reads += 1,
                (Call::Write { late, token, .. }, reply) => {
                    let refused =
                        o.kind == Kind::Fail && matches!(reply, Some(Reply::Refused { .. }));
                    let superseded = grants.iter().any(|&(r, t)| r < o.inv_ns && t > *token);
                    c.late_writes += u64::from(*late);
                    c.ok_writes += u64::from(ok);
                    c.ok_late_writes += u64::from(ok && *late);
                    c.refused_writes += u64::from(refused);
                    c.refused_late_writes += u64::from(refused && *late);
                    c.refused_stale_writes += u64::from(refused && (*late || superseded));
                }
                _ => {}
            }
        }
    }
    c
}

/// A baton operation: anything but the canary's reads and writes of harness memory. The
/// canary's own claims and releases are baton operations and are checked like any other (its
/// late behaviour is all in memory: it claims, reads and writes memory, then releases, so a
/// release that comes back `Lost` after a pause past the TTL is legal and its belief, which
/// the intervals checker takes from grant timing alone, ends at the safe deadline anyway).
fn is_baton(o: &Op) -> bool {
    !matches!(o.call, Call::MemRead | Call::MemWrite { .. })
}

/// A baton operation of a key not in the canary workload (what [`counts`] counts).
fn is_baton_workload(o: &Op) -> bool {
    o.workload != CANARY_WORKLOAD && is_baton(o)
}

/// The per-key WGL search on every baton key, each within `params.wgl_budget_ms`.
pub fn linearizability(ops: &[Op], params: &CheckParams) -> CheckResult {
    let keys = by_key(ops);
    let model = model::LeaseModel { rho: params.rho };
    let budget = Duration::from_millis(params.wgl_budget_ms);
    let mut found = Found::default();
    let (mut placed, mut dropped, mut unknown, mut bad) = (0, 0, Vec::new(), 0);
    for (key, kops) in &keys {
        let p = model::prepare(kops);
        placed += p.ops.len();
        dropped += p.dropped;
        for (i, why) in &p.malformed {
            found.add(
                "malformed",
                key,
                Some(kops[*i].inv_ns),
                format!("{why}: {}", describe(kops[*i])),
            );
        }
        for &i in &p.corrupt {
            found.add(
                "corrupt read",
                key,
                Some(kops[i].inv_ns),
                format!(
                    "the record's list could not be decoded, so it holds something no worker \
                     wrote: {}",
                    describe(kops[i])
                ),
            );
        }
        match wgl::check(&model, &p.ops, budget) {
            wgl::Outcome::Linearizable => {}
            wgl::Outcome::Unknown => {
                unknown.push(key.to_string());
                found.add(
                    "unknown",
                    key,
                    None,
                    format!(
                        "linearizability undecided: the search budget of {} ms ran out on {} operations",
                        params.wgl_budget_ms,
                        p.ops.len()
                    ),
                );
            }
            wgl::Outcome::NotLinearizable { longest, stuck } => {
                bad += 1;
                let origin = |i: usize| kops[p.origin[i]];
                let last = longest
                    .last()
                    .map(|&i| format!("; the last placed was {}", describe(origin(i))))
                    .unwrap_or_default();
                let (t, what) = match stuck {
                    Some(s) => (Some(origin(s).inv_ns), describe(origin(s))),
                    None => (None, "?".to_string()),
                };
                found.add(
                    "not linearizable",
                    key,
                    t,
                    format!(
                        "not linearizable: at most {} of {} operations could be placed in an order \
                         the lease model allows; {what} could not be placed{last}",
                        longest.len(),
                        p.ops.len()
                    ),
                );
            }
        }
    }
    let corrupt = found.count("corrupt read");
    let verdict = if bad > 0 || found.count("malformed") > 0 || corrupt > 0 {
        Verdict::Fail
    } else if !unknown.is_empty() {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    let outcome = match verdict {
        Verdict::Pass => "all linearizable".to_string(),
        Verdict::Unknown => format!("undecided on {} (budget ran out)", unknown.join(", ")),
        _ if bad > 0 => format!("{bad} not linearizable"),
        _ if corrupt > 0 => format!("{corrupt} corrupt reads"),
        _ => "malformed replies".to_string(),
    };
    let summary = format!(
        "{} keys, {placed} operations placed ({dropped} dropped: fail/info reads, uninformative \
         refusals), budget {} ms per key: {outcome}{}",
        keys.len(),
        params.wgl_budget_ms,
        found.suffix()
    );
    found.result("linearizability", verdict, summary)
}

/// Operations grouped by key, each group in invocation order.
pub(crate) fn by_key(ops: &[Op]) -> BTreeMap<&str, Vec<&Op>> {
    let mut keys: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for o in ops {
        keys.entry(o.key.as_str()).or_default().push(o);
    }
    for v in keys.values_mut() {
        v.sort_by_key(|o| o.inv_ns);
    }
    keys
}

/// At most `max` characters of `text` (an ellipsis marks a cut).
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

/// Seconds since the run started, for messages.
pub(crate) fn secs(t: Nanos) -> String {
    format!("{:.3}s", t as f64 / 1e9)
}

/// One operation in a line: who, what, when, and how it ended.
pub(crate) fn describe(o: &Op) -> String {
    let call = match &o.call {
        Call::Claim { ttl_ms } => format!("claim(ttl {ttl_ms} ms)"),
        Call::Renew { token } => format!("renew({token})"),
        Call::Release { token } => format!("release({token})"),
        Call::Offer {
            token,
            to,
            offer_ttl_ms,
        } => format!("offer({token} to {to}, ttl {offer_ttl_ms} ms)"),
        Call::Accept { ttl_ms } => format!("accept(ttl {ttl_ms} ms)"),
        Call::Read => "read".to_string(),
        Call::Revoke { now } => format!("revoke({})", if *now { "now" } else { "hold" }),
        Call::Write { token, list, late } => format!(
            "write({token}, {} elements, last {}{})",
            list.len(),
            list.last()
                .map(|e| e.encode())
                .unwrap_or_else(|| "-".into()),
            if *late { ", late" } else { "" }
        ),
        Call::MemRead => "mem-read".to_string(),
        Call::MemWrite { list } => format!(
            "mem-write({} elements, last {})",
            list.len(),
            list.last()
                .map(|e| e.encode())
                .unwrap_or_else(|| "-".into())
        ),
    };
    let holding = |h: &Option<crate::history::Holding>| match h {
        Some(h) => format!("{} with {}", h.client, h.token),
        None => "free".to_string(),
    };
    let reply = match &o.reply {
        _ if o.ret_ns.is_none() => "info (no answer)".to_string(),
        None => format!("{:?}", o.kind).to_lowercase(),
        Some(r) => match r {
            Reply::Granted {
                token,
                already_held,
                safe_deadline_ns,
            } => format!(
                "granted {token}{}{}",
                if *already_held { " (already held)" } else { "" },
                safe_deadline_ns
                    .map(|d| format!(", safe until {}", secs(d)))
                    .unwrap_or_default()
            ),
            Reply::Held { holder } => format!("held by {} with {}", holder.client, holder.token),
            Reply::Renewed { safe_deadline_ns } => format!(
                "renewed{}",
                safe_deadline_ns
                    .map(|d| format!(", safe until {}", secs(d)))
                    .unwrap_or_default()
            ),
            Reply::Released => "released".into(),
            Reply::Lost { current } => format!("lost ({})", holding(current)),
            Reply::Offered => "offered".into(),
            Reply::Read { holder, list } => format!(
                "{}, {} elements, last {}",
                holding(holder),
                list.len(),
                list.last()
                    .map(|e| e.encode())
                    .unwrap_or_else(|| "-".into())
            ),
            Reply::Corrupt { text } => format!("corrupt list {:?}", clip(text, 80)),
            Reply::Written => "written".into(),
            Reply::Revoked { token } => match token {
                Some(t) => format!("revoked {t}"),
                None => "revoked nothing (free)".into(),
            },
            Reply::Refused { message } => format!("refused ({message})"),
            Reply::Unknown { message } => format!("unknown ({message})"),
        },
    };
    let ret = o.ret_ns.map(secs).unwrap_or_else(|| "∞".into());
    format!(
        "{} by {} (process {}) [{} .. {}] → {reply}",
        call,
        o.client,
        o.process,
        secs(o.inv_ns),
        ret
    )
}

/// Violations found by one checker: the first [`VIOLATIONS_MAX`] kept, all counted by kind.
#[derive(Debug, Default)]
pub(crate) struct Found {
    list: Vec<Violation>,
    kinds: BTreeMap<&'static str, usize>,
}

impl Found {
    pub(crate) fn add(&mut self, kind: &'static str, key: &str, t: Option<Nanos>, message: String) {
        *self.kinds.entry(kind).or_default() += 1;
        if self.list.len() < VIOLATIONS_MAX {
            self.list.push(Violation {
                key: Some(key.to_string()),
                t_ns: t,
                message: format!("{kind}: {message}"),
            });
        }
    }

    pub(crate) fn count(&self, kind: &str) -> usize {
        self.kinds.get(kind).copied().unwrap_or(0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// `; 3 violations (lost 2, duplicate 1)` or nothing.
    pub(crate) fn suffix(&self) -> String {
        if self.kinds.is_empty() {
            return String::new();
        }
        let total: usize = self.kinds.values().sum();
        let parts: Vec<String> = self.kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let kept = if total > self.list.len() {
            format!(", first {} listed", self.list.len())
        } else {
            String::new()
        };
        format!("; {total} violations ({}{kept})", parts.join(", "))
    }

    pub(crate) fn result(self, checker: &str, verdict: Verdict, summary: String) -> CheckResult {
        CheckResult {
            checker: checker.to_string(),
            verdict,
            summary,
            violations: self.list,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;

    #[test]
    fn check_all_passes_a_clean_history_and_counts_it() {
        let ops = vec![
            claim_ok("c1", 5, 0, 10),
            read_ok("c1", Some(("c1", 5)), &[], 20, 30),
            write_ok("c1", 5, &[e(5, 1)], 40, 50),
            release_ok("c1", 5, 60, 70),
            claim_ok("c2", 9, 80, 90),
            read_ok("c2", Some(("c2", 9)), &[e(5, 1)], 100, 110),
            write_ok("c2", 9, &[e(5, 1), e(9, 2)], 120, 130),
            write_refused("c1", 5, &[e(5, 1), e(5, 3)], true, 140, 150),
            read_ok("c3", Some(("c2", 9)), &[e(5, 1), e(9, 2)], 160, 170),
            mem_write("c4", &[e(1, 7)], 0, 10),
            mem_read("c4", &[e(1, 7)], 20, 30),
        ];
        let h = history(&ops);
        let results = check_all(&h, &params());
        let names: Vec<&str> = results.iter().map(|r| r.checker.as_str()).collect();
        assert_eq!(
            names,
            ["linearizability", "tokens", "intervals", "fencing", "lists"]
        );
        for r in &results {
            assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
            assert!(r.violations.is_empty());
        }
        assert!(
            results[0].summary.contains("1 keys, 9 operations"),
            "{}",
            results[0].summary
        );
        let c = counts(&h);
        assert_eq!(c.keys, 1);
        assert_eq!(c.ops, 9);
        assert_eq!(c.ok_claims, 2);
        assert_eq!(c.ok_writes, 2);
        assert_eq!(c.refused_writes, 1);
        assert_eq!(c.refused_late_writes, 1);
        assert_eq!(c.refused_stale_writes, 1);
        assert_eq!(c.late_writes, 1);
        assert_eq!(c.ok_reads, 3);
        assert_eq!(c.fail_ops, 1);
        assert_eq!(c.canary_ops, 2);
        assert_eq!(c.canary_ok_writes, 1);
        // The canary's list is intact here, so its checker passes.
        assert_eq!(check_canary(&h).verdict, Verdict::Pass);
    }

    #[test]
    fn check_all_fails_a_double_grant_in_several_checkers() {
        let ops = vec![
            claim_ok("c1", 5, 0, 10),
            claim_ok("c2", 7, 100, 110),
            write_ok("c1", 5, &[e(5, 1)], 200, 210),
        ];
        let results = check_all(&history(&ops), &params());
        let verdict = |name: &str| {
            results
                .iter()
                .find(|r| r.checker == name)
                .map(|r| r.verdict)
                .unwrap()
        };
        assert_eq!(verdict("linearizability"), Verdict::Fail);
        assert_eq!(verdict("intervals"), Verdict::Fail);
        assert_eq!(verdict("fencing"), Verdict::Fail);
        assert_eq!(verdict("tokens"), Verdict::Pass);
        let lin = &results[0];
        assert_eq!(lin.violations.len(), 1);
        assert_eq!(lin.violations[0].key.as_deref(), Some("k"));
        assert!(
            lin.violations[0]
                .message
                .contains("claim(ttl 2000 ms) by c2"),
            "{:?}",
            lin.violations
        );
    }

    /// A canary op on the canary key.
    fn canary(o: Op) -> Op {
        on(o, CANARY_WORKLOAD, "canary")
    }

    #[test]
    fn the_canarys_claims_and_releases_are_checked_without_false_alarms() {
        // The canary's round: worker c1 claims, reads memory, pauses past the TTL, writes
        // memory (a lost update waiting to happen) and releases, lost to c2 who claimed after
        // c1's lease may have expired.
        let ops = vec![
            canary(claim_ok("c1", 5, 0, 10)),
            mem_read("c1", &[], 20, 30),
            canary(claim_held("c2", "c1", 5, 100, 110)),
            canary(claim_ok("c2", 7, 2000, 2010)),
            mem_read("c2", &[], 2020, 2030),
            mem_write("c2", &[e(7, 2)], 2040, 2050),
            canary(release_ok("c2", 7, 2060, 2070)),
            mem_write("c1", &[e(5, 1)], 3300, 3310),
            canary(release_lost_to("c1", 5, None, 3320, 3330)),
            mem_read("c3", &[e(5, 1)], 3400, 3410),
        ];
        let h = history(&ops);
        for r in check_all(&h, &params()) {
            assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        }
        let lin = &check_all(&h, &params())[0];
        // The five claims and releases were placed; the memory operations never reach the model.
        assert!(
            lin.summary.starts_with("1 keys, 5 operations placed"),
            "{}",
            lin.summary
        );
        // The canary's own checker sees the lost update.
        assert_eq!(check_canary(&h).verdict, Verdict::Fail);
        // Not counted towards the baton workloads' minimums.
        let c = counts(&h);
        assert_eq!((c.keys, c.ops, c.ok_claims, c.canary_ops), (0, 0, 0, 5));
    }

    #[test]
    fn a_double_grant_on_the_canary_key_fails() {
        let ops = vec![
            canary(claim_ok("c1", 5, 0, 10)),
            canary(claim_ok("c2", 7, 100, 110)),
            mem_read("c1", &[], 20, 30),
        ];
        let results = check_all(&history(&ops), &params());
        let verdict = |name: &str| results.iter().find(|r| r.checker == name).unwrap().verdict;
        assert_eq!(verdict("linearizability"), Verdict::Fail);
        assert_eq!(verdict("intervals"), Verdict::Fail);
    }

    #[test]
    fn a_corrupt_read_fails_linearizability_and_lists() {
        let ops = vec![
            claim_ok("c1", 5, 0, 10),
            write_ok("c1", 5, &[e(5, 1)], 20, 30),
            read_corrupt("c2", "5:1 \u{1}", 40, 50),
        ];
        let results = check_all(&history(&ops), &params());
        let lin = &results[0];
        assert_eq!(lin.verdict, Verdict::Fail, "{lin:#?}");
        assert_eq!(lin.violations.len(), 1);
        assert!(
            lin.violations[0].message.starts_with("corrupt read: "),
            "{lin:#?}"
        );
        assert!(
            lin.violations[0]
                .message
                .ends_with("→ corrupt list \"5:1 \\u{1}\""),
            "{lin:#?}"
        );
        assert_eq!(lin.violations[0].t_ns, Some(40 * MS));
        assert!(lin.summary.contains("1 corrupt reads"), "{}", lin.summary);
        let lists = results.iter().find(|r| r.checker == "lists").unwrap();
        assert_eq!(lists.verdict, Verdict::Fail, "{lists:#?}");
        assert!(lists.violations[0].message.starts_with("corrupt read: "));
    }

    #[test]
    fn canary_lost_updates_fail() {
        // Two workers both believe they hold the lease: each reads [] and appends; the
        // second overwrite loses the first element.
        let ops = vec![
            mem_read("c1", &[], 0, 10),
            mem_read("c2", &[], 5, 15),
            mem_write("c1", &[e(1, 1)], 20, 30),
            mem_write("c2", &[e(2, 2)], 40, 50),
            mem_read("c3", &[e(2, 2)], 60, 70),
        ];
        let r = check_canary(&history(&ops));
        assert_eq!(r.checker, "canary-lists");
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(
            r.violations.iter().any(|v| v.message.starts_with("lost")),
            "{r:#?}"
        );
    }

    #[test]
    fn unknown_budget_makes_linearizability_unknown() {
        // Many overlapping writes by the holder and a read of a list nobody wrote: the search
        // has to try every subset of the writes before it can give up.
        let mut ops = vec![claim_ok("c0", 5, 0, 10)];
        for i in 1..=22u64 {
            ops.push(write_ok("c0", 5, &[e(5, i)], 20, 1000));
        }
        ops.push(read_ok("c99", Some(("c0", 5)), &[e(5, 99)], 20, 1000));
        let mut p = params();
        p.wgl_budget_ms = 1;
        let r = linearizability(&ops, &p);
        assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
        assert!(r.summary.contains("undecided on k"), "{}", r.summary);
        assert!(!r.passed());
    }

    #[test]
    fn describe_is_readable() {
        let d = describe(&claim_ok("c1", 5, 1000, 1010));
        assert_eq!(
            d,
            "claim(ttl 2000 ms) by c1 (process 1) [1.000s .. 1.010s] → granted 5"
        );
        let d = describe(&claim_info("c2", 20));
        assert!(d.ends_with("[0.020s .. ∞] → info (no answer)"), "{d}");
    }
}
