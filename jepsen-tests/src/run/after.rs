//! What is judged apart from the history: the repair watch, readiness after healing,
//! membership changes, power cuts, a canary's verdict, and each key's final read and claim.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::scenarios::{Scenario, CANARY_CATCHERS};
use super::{result, READY_LIMIT};
use crate::history::{Call, CheckResult, Kind, Reply, Verdict, Violation};
use crate::nemesis::{self, Bed};
use crate::sickdisk::{self, RepairSample};
use crate::workload::{self, Ctx, Recorder};

/// How often the repair watch looks for each node's repair obligation.
pub const REPAIR_WATCH_EVERY: Duration = Duration::from_millis(100);
/// How long the repair watch waits for a node's status or `/readyz`.
pub const REPAIR_ASK_LIMIT: Duration = Duration::from_millis(500);

/// Raises its flag when dropped.
pub(super) struct StopOnDrop(pub(super) Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A node as the repair watch sees it (fixed for the run).
pub(super) struct WatchedNode {
    pub(super) id: u64,
    pub(super) addr: String,
    pub(super) admin: String,
    pub(super) data_dir: PathBuf,
}

/// Until `stop`: whenever a node's `log/repair.json` exists, asks the node whether it leads
/// and whether it is ready, and keeps the answer if the file still exists after it (the
/// node removes it only once refilled, so the answer was given under repair).
pub(super) async fn watch_repairs(
    nodes: Vec<WatchedNode>,
    rec: Arc<Recorder>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<RepairSample> {
    let endpoints: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
    let config = baton_client::ClientConfig {
        request_timeout: REPAIR_ASK_LIMIT,
        retry_deadline: REPAIR_ASK_LIMIT,
        ..baton_client::ClientConfig::with_endpoints(endpoints)
    };
    let mut samples = Vec::new();
    let Ok(client) = baton_client::Client::connect(config).await else {
        return samples;
    };
    while !stop.load(Ordering::Relaxed) {
        for node in &nodes {
            if !sickdisk::under_repair(&node.data_dir) {
                continue;
            }
            let t_ns = rec.now_ns();
            let (status, ready) = tokio::join!(
                client.status_of(&node.addr),
                tokio::time::timeout(
                    REPAIR_ASK_LIMIT,
                    baton_node::admin::http_get(&node.admin, "/readyz")
                )
            );
            let leader = status.is_ok_and(|s| s.state == "leader");
            let ready = matches!(ready, Ok(Ok(a)) if a.status == 200);
            if sickdisk::under_repair(&node.data_dir) {
                samples.push(RepairSample {
                    node: node.id,
                    t_ns,
                    leader,
                    ready,
                });
            }
        }
        tokio::time::sleep(REPAIR_WATCH_EVERY).await;
    }
    samples
}

/// After healing, every node says it is ready (`/readyz` answers 200) within
/// [`READY_LIMIT`]: a member, with a leader, applied close to the commit.
pub(super) async fn readiness(bed: &Bed) -> CheckResult {
    let nodes: Vec<(u64, String)> = {
        let cluster = bed.cluster.lock().expect("cluster lock");
        cluster
            .nodes
            .iter()
            .map(|n| (n.id, n.admin.clone()))
            .collect()
    };
    let start = Instant::now();
    let mut not_ready = Vec::new();
    for (id, admin) in nodes {
        let mut last;
        loop {
            last = match baton_node::admin::http_get(&admin, "/readyz").await {
                Ok(a) if a.status == 200 => break,
                Ok(a) => format!("{} {}", a.status, a.body.trim()),
                Err(e) => e.to_string(),
            };
            if start.elapsed() > READY_LIMIT {
                not_ready.push(Violation::general(format!("node {id} /readyz: {last}")));
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    result(
        "readyz",
        if not_ready.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        if not_ready.is_empty() {
            format!(
                "every node ready {} ms after the leader was agreed",
                start.elapsed().as_millis()
            )
        } else {
            format!(
                "{} nodes not ready within {} s",
                not_ready.len(),
                READY_LIMIT.as_secs()
            )
        },
        not_ready,
    )
}

/// Membership changes: every removal took effect and every replaced node joined again as a
/// voter within [`nemesis::MEMBERSHIP_LIMIT`].
pub(super) fn membership_result(log: &nemesis::MembershipLog) -> CheckResult {
    result(
        "membership",
        if log.failures.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        format!(
            "{} nodes removed, {} joined again as voters (the longest join took {} ms){}",
            log.removed,
            log.joined,
            log.longest_join.as_millis(),
            if log.failures.is_empty() {
                String::new()
            } else {
                format!("; {} changes failed", log.failures.len())
            }
        ),
        log.failures
            .iter()
            .map(|message| Violation::general(message.clone()))
            .collect(),
    )
}

/// What the power cuts took back (informative: whether a cut lands between a write and its
/// fsync is chance).
pub(super) fn power_result(cuts: &[nemesis::Cut]) -> CheckResult {
    let sum = |f: fn(&nemesis::Cut) -> u64| cuts.iter().map(f).sum::<u64>();
    let failed = sum(|c| c.lost.failed as u64);
    result(
        "power-cuts",
        Verdict::Pass,
        format!(
            "{} node power cuts took back {} unsynced writes ({} B) and {} name changes{}",
            cuts.len(),
            sum(|c| c.lost.writes as u64),
            sum(|c| c.lost.bytes),
            sum(|c| c.lost.names as u64),
            if failed > 0 {
                format!("; {failed} undo steps could not be done (see the harness log)")
            } else {
                String::new()
            }
        ),
        Vec::new(),
    )
}

/// A canary scenario's one result: it passes when a check failed, that is, when the checks
/// caught the bug the canary's nodes have (`what` they did).
pub(super) fn canary_result(what: &str, results: Vec<CheckResult>) -> CheckResult {
    let caught: Vec<&CheckResult> = results
        .iter()
        .filter(|r| r.verdict == Verdict::Fail && CANARY_CATCHERS.contains(&r.checker.as_str()))
        .collect();
    let violations = caught
        .iter()
        .flat_map(|r| {
            r.violations.iter().take(5).map(|v| Violation {
                message: format!("{}: {}", r.checker, v.message),
                ..v.clone()
            })
        })
        .collect();
    // Checks that failed but do not count as catching it (what else the bug broke).
    let also: Vec<&str> = results
        .iter()
        .filter(|r| r.verdict == Verdict::Fail && !CANARY_CATCHERS.contains(&r.checker.as_str()))
        .map(|r| r.checker.as_str())
        .collect();
    let also = if also.is_empty() {
        String::new()
    } else {
        format!(" (also failed: {})", also.join(", "))
    };
    if caught.is_empty() {
        result(
            "canary-caught",
            Verdict::Fail,
            format!("{what} and no check noticed: the checks are blind to this bug{also}"),
            Vec::new(),
        )
    } else {
        let names: Vec<&str> = caught.iter().map(|r| r.checker.as_str()).collect();
        result(
            "canary-caught",
            Verdict::Pass,
            format!(
                "{what} and {} caught it: the checks can see this bug{also}",
                names.join(", ")
            ),
            violations,
        )
    }
}

/// After healing: the key reads, and can be claimed again (then is released). Canary keys
/// get a final read of the harness-memory list. Returns what failed.
pub(super) async fn final_checks(
    ctx: &Ctx,
    workload: &str,
    key: &str,
    limit: Duration,
) -> Option<Violation> {
    let start = Instant::now();
    let mut p = ctx.new_proc("final");
    let fail = |message: String| {
        Some(Violation {
            key: Some(key.to_string()),
            t_ns: Some(ctx.rec.now_ns()),
            message,
        })
    };
    if workload == "unfenced-canary" {
        workload::perform(ctx, &p, workload, key, Call::MemRead).await;
        return None;
    }
    loop {
        let (kind, _) = workload::perform(ctx, &p, workload, key, Call::Read).await;
        if kind == Kind::Ok {
            break;
        }
        if kind == Kind::Info {
            p = ctx.new_proc("final");
        }
        if start.elapsed() > limit {
            return fail(format!("no final read within {} s", limit.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ttl_ms = ctx.ttl.as_millis() as u64;
    loop {
        let (kind, reply) = workload::perform(ctx, &p, workload, key, Call::Claim { ttl_ms }).await;
        if let (Kind::Ok, Reply::Granted { token, .. }) = (kind, &reply) {
            let token = *token;
            workload::perform(ctx, &p, workload, key, Call::Release { token }).await;
            return None;
        }
        if kind == Kind::Info {
            p = ctx.new_proc("final");
        }
        if start.elapsed() > limit {
            return fail(format!(
                "not claimable within {} s after healing",
                limit.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// After healing, once the workers stopped: the leak check of every key of the scenario's
/// `permit-holders` ([`workload::leak_check`]), `shared-holders`
/// ([`workload::shared_leak_check`]), `waiters` and `permit-waiters`
/// ([`workload::line_leak_check`]), all keys at once. It only records; the `permits`,
/// `shared` and `lines` checkers judge.
pub(super) async fn leak_checks(ctx: &Ctx, scenario: &Scenario) {
    let slots = |workload: &str| {
        scenario
            .workloads
            .iter()
            .filter(|(w, _, _)| *w == workload)
            .map(|(_, slots, _)| *slots)
            .sum()
    };
    let permit_keys = workload::permit_keys(slots("permit-holders"));
    let shared_keys = workload::shared_keys(slots("shared-holders"));
    let line_keys = workload::line_keys(slots("waiters"), slots("permit-waiters"));
    let permits = futures::future::join_all(
        permit_keys
            .iter()
            .map(|(key, permits)| workload::leak_check(ctx, key, *permits)),
    );
    let shared = futures::future::join_all(
        shared_keys
            .iter()
            .map(|key| workload::shared_leak_check(ctx, key)),
    );
    let lines = futures::future::join_all(
        line_keys
            .iter()
            .map(|(key, permits)| workload::line_leak_check(ctx, key, *permits)),
    );
    futures::future::join3(permits, shared, lines).await;
}
