//! Notice: a holder hears of its loss at once. After an operator's revoke ends a lease held
//! through the client library's guard (`guard-holders`), the guard must stop believing (its
//! `lost` fires, pushed by the cluster) within [`NOTICE_BOUND_MS`] of the revoke's return;
//! when a fault touched that time, or ended so shortly before the revoke that the holder's
//! stream may still be finding its way back (a leader killed, a partition, the holder's node
//! cut from its clients: the client retries with backoff), the bound is extended to
//! [`FAILOVER_MS`] after the fault ended (a new leader elected, the stream's silence noticed,
//! the stream resumed from its last revision), and again while further faults follow.
//!
//! The guard's own renewals run every third of [`crate::workload::GUARD_TTL`], so most
//! revokes land where only the push can end the belief within the bound: a holder told of
//! nothing (the `notice-canary`: endings muted) learns at its next renewal and is caught.
//!
//! Revokes of leases that were not guard-held (plain workers, who do not follow the push)
//! are counted and left to the intervals checker. Fewer than [`MIN_NOTICES`] revokes of
//! guard-held leases → Unknown: such a run proves nothing (it fails, and no canary counts it
//! as caught).

use std::collections::HashMap;

use super::{secs, Found};
use crate::history::{BeliefEvent, Call, CheckResult, History, Kind, Nanos, Reply, Verdict};

/// A guard-held lease's belief must end this soon after the revoke returned, when no fault
/// touched that time.
pub const NOTICE_BOUND_MS: u64 = 1000;
/// After a fault that touched the time of a revoke, the belief must end this soon after the
/// fault ended: the stream's silence (`ENDINGS_SILENCE_MS`, 2 s) plus two elections plus a
/// second of slack. The run passes the election timeout's maximum to [`check`].
pub const FAILOVER_SLACK_MS: u64 = 1000;
/// A run must revoke at least this many guard-held leases to prove anything.
pub const MIN_NOTICES: usize = 3;

const MS: Nanos = 1_000_000;

/// How long after a fault's end a belief may last: silence + two elections + slack.
pub fn failover_ms(election_ms_max: u64) -> u64 {
    baton_proto::ENDINGS_SILENCE_MS + 2 * election_ms_max + FAILOVER_SLACK_MS
}

/// The latest a belief may end, for a revoke invoked at `inv` that returned at `ret`, given
/// the faults `(start, end)`: the bound after `ret`, pushed out to `failover` after the end
/// of every fault whose recovery (from its start to `failover` after its end) overlaps the
/// time allowed so far. (A stream cut by a fault that ended just before the revoke comes back
/// only after the client's next retry: `revoke` seed 851794 met one 0.24 s after a client
/// partition healed, its belief ending 2.3 s after the heal.)
fn allowed_until(inv: Nanos, ret: Nanos, faults: &[(Nanos, Nanos)], failover: Nanos) -> Nanos {
    let mut until = ret + NOTICE_BOUND_MS * MS;
    loop {
        let extended = faults
            .iter()
            .filter(|(start, end)| *start < until && *end + failover > inv)
            .map(|(_, end)| end + failover)
            .fold(until, Nanos::max);
        if extended == until {
            return until;
        }
        until = extended;
    }
}

/// The `p`-th percentile of sorted `values` (nearest rank), in ms.
fn percentile(sorted: &[Nanos], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / MS as f64
}

/// Checks that every guard holder heard of its lease's revoke within the bound.
pub fn check(history: &History, election_ms_max: u64) -> CheckResult {
    let end = history.end_ns();
    let faults: Vec<(Nanos, Nanos)> = history
        .faults(end)
        .into_iter()
        // Whole-run settings (wall clocks, base skew) and the final reads are not faults a
        // holder recovers from.
        .filter(|(fault, _, _, _)| !matches!(fault.as_str(), "wall-clock" | "skew-base" | "heal"))
        .map(|(_, _, start, end)| (start, end))
        .collect();
    let failover = failover_ms(election_ms_max) * MS;
    let beliefs: HashMap<(&str, u64), &BeliefEvent> = history
        .beliefs()
        .into_iter()
        .map(|b| ((b.key.as_str(), b.token), b))
        .collect();
    let mut found = Found::default();
    let (mut plain, mut extended, mut pushed) = (0usize, 0usize, 0usize);
    let mut latencies: Vec<Nanos> = Vec::new();
    for o in history.ops() {
        let (Call::Revoke { .. }, Kind::Ok, Some(Reply::Revoked { token: Some(token) }), Some(ret)) =
            (&o.call, o.kind, &o.reply, o.ret_ns)
        else {
            continue;
        };
        let Some(b) = beliefs.get(&(o.key.as_str(), *token)) else {
            plain += 1;
            continue;
        };
        let until = allowed_until(o.inv_ns, ret, &faults, failover);
        if until > ret + NOTICE_BOUND_MS * MS {
            extended += 1;
        }
        // A belief that ended before the revoke was sent is not this revoke's to tell.
        if b.to_ns < o.inv_ns {
            continue;
        }
        latencies.push(b.to_ns.saturating_sub(ret));
        if b.pushed {
            pushed += 1;
        }
        if b.to_ns > until {
            found.add(
                "late",
                &o.key,
                Some(ret),
                format!(
                    "{} held token {token} and believed it until {} ({}), {:.0} ms after the \
                     revoke returned at {}; allowed until {}",
                    b.client,
                    secs(b.to_ns),
                    b.how,
                    (b.to_ns - ret) as f64 / MS as f64,
                    secs(ret),
                    secs(until),
                ),
            );
        }
    }
    latencies.sort_unstable();
    let heard = latencies.len();
    let late = found.count("late");
    let verdict = if late > 0 {
        Verdict::Fail
    } else if heard < MIN_NOTICES {
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    let summary = format!(
        "{heard} revokes of guard-held leases ({pushed} heard by the push, {extended} with a \
         fault allowed {} ms after it): belief ended p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
         after the revoke returned (bound {NOTICE_BOUND_MS} ms); {plain} revokes of leases \
         not guard-held{}{}",
        failover / MS,
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies
            .last()
            .map(|&l| l as f64 / MS as f64)
            .unwrap_or(0.0),
        if heard < MIN_NOTICES {
            format!("; fewer than {MIN_NOTICES}: proves nothing")
        } else {
            String::new()
        },
        found.suffix()
    );
    found.result("notice", verdict, summary)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{claim_ok, history, revoke_ok};
    use super::*;
    use crate::history::{Line, NemesisEvent};

    fn belief(key: &str, client: &str, token: u64, from: u64, to: u64, pushed: bool) -> Line {
        Line::Belief(BeliefEvent {
            idx: 0,
            key: key.into(),
            client: client.into(),
            token,
            from_ns: from * MS,
            to_ns: to * MS,
            how: if pushed {
                "lost: revoked"
            } else {
                "lost: taken"
            }
            .into(),
            pushed,
            t_ns: to * MS,
        })
    }

    fn fault(phase: &str, t: u64) -> Line {
        Line::Nemesis(NemesisEvent {
            idx: 0,
            fault: "kill-leader".into(),
            phase: phase.into(),
            detail: "node 1".into(),
            skew: 0.0,
            t_ns: t * MS,
        })
    }

    /// Three guard leases of key k (tokens 5, 7, 9), each revoked 1 s after its grant and
    /// believed until `ends[i]` ms after its revoke returned.
    fn three(ends: [u64; 3]) -> History {
        let mut ops = Vec::new();
        let mut lines = Vec::new();
        for (i, token) in [5u64, 7, 9].into_iter().enumerate() {
            let t0 = i as u64 * 20_000;
            ops.push(claim_ok("c1", token, t0, t0 + 10));
            ops.push(revoke_ok("op9", false, Some(token), t0 + 1000, t0 + 1010));
            lines.push(belief(
                "k",
                "c1",
                token,
                t0 + 10,
                t0 + 1010 + ends[i],
                ends[i] < 100,
            ));
        }
        let mut h = history(&ops);
        h.lines.extend(lines);
        h
    }

    #[test]
    fn beliefs_that_end_soon_after_their_revoke_pass() {
        let r = check(&three([3, 40, 900]), 1000);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(
            r.summary
                .starts_with("3 revokes of guard-held leases (2 heard by the push"),
            "{}",
            r.summary
        );
        assert!(r.summary.contains("max 900.0 ms"), "{}", r.summary);
    }

    #[test]
    fn a_belief_that_outlives_the_bound_fails() {
        // The second holder learnt 2.5 s later: at its renewal, not from the push.
        let r = check(&three([3, 2500, 5]), 1000);
        assert_eq!(r.verdict, Verdict::Fail, "{r:#?}");
        assert_eq!(r.violations.len(), 1);
        let v = &r.violations[0];
        assert_eq!(v.t_ns, Some(21_010 * MS));
        assert!(
            v.message
                .contains("2500 ms after the revoke returned at 21.010s"),
            "{}",
            v.message
        );
    }

    #[test]
    fn a_fault_extends_the_bound_to_failover_after_its_end() {
        // Failover with a 1 s election maximum: 2 s silence + 2 s + 1 s = 5 s.
        assert_eq!(failover_ms(1000), 5000);
        let mut h = three([3, 5900, 5]);
        // A leader kill from 21.5 s to 22.0 s: the second holder may believe until 27.0 s.
        h.lines.push(fault("start", 21_500));
        h.lines.push(fault("stop", 22_000));
        let r = check(&h, 1000);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(r.summary.contains("1 with a fault"), "{}", r.summary);
        // 27.11 s is too late even so.
        let mut h = three([3, 6100, 5]);
        h.lines.push(fault("start", 21_500));
        h.lines.push(fault("stop", 22_000));
        assert_eq!(check(&h, 1000).verdict, Verdict::Fail);
    }

    #[test]
    fn plain_leases_and_too_few_revokes_prove_nothing() {
        // Revokes of leases with no belief line (plain workers) are only counted.
        let ops = [
            claim_ok("c1", 5, 0, 10),
            revoke_ok("op9", false, Some(5), 1000, 1010),
            revoke_ok("op9", false, None, 2000, 2010),
        ];
        let r = check(&history(&ops), 1000);
        assert_eq!(r.verdict, Verdict::Unknown, "{r:#?}");
        assert!(r.summary.contains("1 revokes of leases not guard-held"));
        assert!(r.summary.contains("proves nothing"), "{}", r.summary);
    }

    #[test]
    fn fault_windows_chain() {
        // Two faults back to back: the first's failover reaches into the second.
        let faults = [(1_500 * MS, 2_000 * MS), (6_000 * MS, 8_000 * MS)];
        let until = allowed_until(1_000 * MS, 1_010 * MS, &faults, 5_000 * MS);
        assert_eq!(until, 13_000 * MS);
        assert_eq!(
            allowed_until(1_000 * MS, 1_010 * MS, &[], 5_000 * MS),
            2_010 * MS
        );
        // A fault that ended shortly before the revoke: its recovery still counts.
        let healed_before = [(2_500 * MS, 7_000 * MS)];
        assert_eq!(
            allowed_until(7_200 * MS, 7_280 * MS, &healed_before, 5_000 * MS),
            12_000 * MS
        );
        // One that ended longer ago than a failover does not.
        assert_eq!(
            allowed_until(13_000 * MS, 13_010 * MS, &healed_before, 5_000 * MS),
            14_010 * MS
        );
    }
}
