//! One run of one scenario: test hosts, a fresh cluster, workers, the nemesis, healing,
//! recovery, final reads, the checkers, and the run folder (history, node logs, summary,
//! HTML report).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::check;
use crate::cluster::{libfaketime, Cluster, NodeSettings};
use crate::copies::Proxies;
use crate::history::{CheckParams, CheckResult, RunMeta, Verdict, Violation};
use crate::nemesis::{self, Bed, Fault, SKEW_OVER_RATE, SKEW_WITHIN};
use crate::net::{self, Net};
use crate::sickdisk;
use crate::workload::{self, Ctx, Recorder, Slot};

mod after;
mod scenarios;

use after::{
    canary_result, final_checks, leak_checks, membership_result, power_result, readiness,
    watch_repairs, StopOnDrop, WatchedNode,
};
pub use after::{REPAIR_ASK_LIMIT, REPAIR_WATCH_EVERY};
pub use scenarios::{scenario, BaseSkew, Scenario, SCENARIOS};

/// The clients' drift margin (baton's default): workers believe in a lease until
/// `inv + ttl × (1 − DRIFT_MARGIN)`.
pub const DRIFT_MARGIN: f64 = 0.05;
/// Election timeout the nodes run with (max); recovery limits are counted from it.
pub const ELECTION_MS_MAX: u64 = 1000;
/// How long the cluster may take to agree on a leader after healing.
pub const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// How long each node may take, once the cluster agrees on a leader, to say it is ready
/// (`/readyz` 200).
pub const READY_LIMIT: Duration = Duration::from_secs(15);

/// Wall-clock offsets of nodes 1..5 in scenarios with `wall_offsets`.
pub const WALL_OFFSETS_S: [i64; 5] = [300, -300, 120, -45, 600];

/// A run with fewer of these than the minimum proves nothing: it fails.
pub const MIN_OK_CLAIMS: u64 = 10;
pub const MIN_OK_WRITES: u64 = 5;
pub const MIN_REFUSED_STALE_WRITES: u64 = 1;

/// How to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub scenario: String,
    pub seed: u64,
    pub nodes: usize,
    /// Length of the fault phase.
    pub duration: Duration,
    pub ttl: Duration,
    /// Runs go to `<out>/<scenario>-<seed>/`.
    pub out: PathBuf,
    /// The `baton-node-chaos` binary.
    pub node_bin: PathBuf,
    /// Linearizability search budget per key.
    pub wgl_budget: Duration,
}

impl Options {
    /// The command that reruns this run (builds the harness and the chaos node first, so
    /// neither is stale).
    pub fn rerun(&self) -> String {
        format!(
            "cargo build -p jepsen-tests --bins && sudo -E {} --out {} --node-bin {} run \
             --scenario {} --seed {} --nodes {} --duration-s {} --ttl-ms {}",
            self.node_bin
                .parent()
                .map(|d| d.join("baton-jepsen").display().to_string())
                .unwrap_or_else(|| "baton-jepsen".into()),
            self.out.display(),
            self.node_bin.display(),
            self.scenario,
            self.seed,
            self.nodes,
            self.duration.as_secs(),
            self.ttl.as_millis()
        )
    }
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub meta: RunMeta,
    pub dir: PathBuf,
    pub results: Vec<CheckResult>,
    pub ops: usize,
    pub faults: usize,
    pub recovery_ms: Option<u64>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.meta.verdict == "ok"
    }

    /// The summary for people, as also written to `summary.txt`.
    pub fn text(&self) -> String {
        let mut out = format!(
            "scenario {} seed {} nodes {}: {}\n  ops {} faults {} recovery {}\n",
            self.meta.scenario,
            self.meta.seed,
            self.meta.nodes,
            self.meta.verdict.to_uppercase(),
            self.ops,
            self.faults,
            self.recovery_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_else(|| "NONE".into()),
        );
        for r in &self.results {
            out.push_str(&format!(
                "  {:<18} {:<9} {}\n",
                r.checker,
                format!("{:?}", r.verdict).to_lowercase(),
                r.summary
            ));
            for v in r.violations.iter().take(5) {
                out.push_str(&format!(
                    "      ! {} @{} {}\n",
                    v.key.as_deref().unwrap_or("-"),
                    v.t_ns
                        .map(|t| format!("{:.3}s", t as f64 / 1e9))
                        .unwrap_or_else(|| "-".into()),
                    v.message
                ));
            }
        }
        out.push_str(&format!(
            "  report {}\n  rerun: {}\n",
            self.dir.join("report.html").display(),
            self.meta.rerun
        ));
        out
    }
}

fn result(
    checker: &str,
    verdict: Verdict,
    summary: String,
    violations: Vec<Violation>,
) -> CheckResult {
    CheckResult {
        checker: checker.to_string(),
        verdict,
        summary,
        violations,
    }
}

/// Runs one scenario end to end. Everything it made (namespaces, links, processes) is
/// removed when it returns, and also when its future is dropped (Ctrl-C) or it panics.
pub async fn run(opts: &Options) -> anyhow::Result<Outcome> {
    net::available().map_err(|e| anyhow::anyhow!("cannot make test hosts: {e}"))?;
    let scenario = scenario(&opts.scenario, opts.nodes)
        .with_context(|| format!("unknown scenario {:?}; known: {SCENARIOS:?}", opts.scenario))?;
    // A fresh folder per run: rerunning a seed never overwrites the evidence of the first run.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let dir = opts
        .out
        .join(format!("{}-{}-{stamp}", opts.scenario, opts.seed));
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let node_dir = dir.join("nodes");
    tracing::info!(scenario = %opts.scenario, seed = opts.seed, dir = %dir.display(), "run");

    let net = Net::create(opts.nodes)?;
    let settings = NodeSettings {
        binary: opts.node_bin.clone(),
        heartbeat_ms: 100,
        election_min_ms: 500,
        election_max_ms: ELECTION_MS_MAX,
        ttl_ms_min: 2 * ELECTION_MS_MAX,
        snapshot_logs: 500,
        power: scenario.power,
        skip_fsync: scenario.power_canary,
        skip_read_index: scenario.read_canary,
        trust_damaged_log: scenario.corrupt_canary,
        decide_copies_afresh: scenario.copies_canary,
        mute_endings: scenario.notice_canary,
        lapse_places_early: scenario.line_canary,
        admit_extra_permit: scenario.permit_canary,
        exclusive_as_shared: scenario.shared_canary,
        apply_retries_afresh: scenario.retry_canary,
    };
    // Wall clocks minutes apart (libfaketime; monotonic clocks untouched): offsets between
    // machines must not matter to baton.
    let offsets: Vec<i64> = if scenario.wall_offsets {
        libfaketime().context(
            "this scenario offsets wall clocks with libfaketime, which is not installed \
             (apt-get install -y faketime)",
        )?;
        WALL_OFFSETS_S.to_vec()
    } else {
        Vec::new()
    };
    let cluster = Cluster::start(&net, &node_dir, settings, &offsets)?;
    let rec = Arc::new(Recorder::new());
    let proxies = match scenario.copies() {
        true => Some(Proxies::start(&cluster.endpoints(), rec.clone(), opts.seed).await?),
        false => None,
    };
    let bed = Bed {
        cluster: Mutex::new(cluster),
        net,
        rec: rec.clone(),
        ttl: opts.ttl,
        cuts: Default::default(),
        lose_all: scenario.power_canary,
        membership: Default::default(),
        damages: Default::default(),
        refill_waits: Default::default(),
        eio: Default::default(),
        proxies,
    };
    if bed.await_recovery(RECOVERY_LIMIT).await.is_none() {
        anyhow::bail!(
            "the fresh cluster elected no leader within {} s (node logs in {})",
            RECOVERY_LIMIT.as_secs(),
            node_dir.display()
        );
    }
    if scenario.wall_offsets {
        let detail = format!("wall clocks of nodes 1.. at {WALL_OFFSETS_S:?} s (libfaketime)");
        rec.nemesis("wall-clock", "start", &detail, 0.0);
    }

    // Skew held for the whole fault phase.
    let mut skew_detail = String::new();
    let mut skew_level = 0.0;
    match scenario.skew {
        BaseSkew::None => {}
        BaseSkew::Within => {
            let mut cluster = bed.cluster.lock().expect("cluster lock");
            let rates = [
                1.0 + SKEW_WITHIN,
                1.0 - SKEW_WITHIN,
                1.0 + SKEW_WITHIN / 2.0,
                1.0,
                1.0 - SKEW_WITHIN / 2.0,
            ];
            for id in cluster.ids() {
                let rate = rates[(id as usize - 1) % rates.len()];
                cluster.set_base_rate(id, rate);
                skew_detail.push_str(&format!("n{id}={rate:.3} "));
            }
            skew_level = SKEW_WITHIN;
        }
        BaseSkew::Over => {
            // Every node, so that whichever leads counts leases down twice as fast.
            let mut cluster = bed.cluster.lock().expect("cluster lock");
            for id in cluster.ids() {
                cluster.set_base_rate(id, SKEW_OVER_RATE);
            }
            skew_detail = format!("every node at {SKEW_OVER_RATE:.3}");
            skew_level = SKEW_OVER_RATE - 1.0;
        }
    }
    if !skew_detail.is_empty() {
        rec.nemesis("skew-base", "start", skew_detail.trim(), skew_level);
    }

    // Workers.
    let ctx = Arc::new(Ctx {
        rec: rec.clone(),
        // Through the claim proxies where the scenario has them.
        endpoints: match &bed.proxies {
            Some(p) => p.endpoints.clone(),
            None => bed.cluster.lock().expect("cluster lock").endpoints(),
        },
        ttl: opts.ttl,
        drift_margin: DRIFT_MARGIN,
        stop: Default::default(),
        memory: Default::default(),
        keys: Default::default(),
        sets_key_by_key: scenario.set_canary,
        tasks_from_board_read: scenario.task_canary,
    });
    let run_tag = format!("s{}", opts.seed % 10_000);
    let mut tasks = Vec::new();
    let mut seed = opts.seed;
    for (workload, slots, workers) in &scenario.workloads {
        for index in 0..*slots {
            let slot = Arc::new(Slot::new(workload, index, *workers, &run_tag));
            for w in 0..*workers {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                tasks.push(tokio::spawn(workload::run_worker(
                    ctx.clone(),
                    slot.clone(),
                    w,
                    seed,
                )));
            }
        }
    }

    if let Some(now) = scenario.revoker {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        tasks.push(tokio::spawn(workload::run_revoker(ctx.clone(), now, seed)));
    }

    if scenario.pinned_readers {
        let endpoints = ctx.endpoints.clone();
        for (i, endpoint) in endpoints.into_iter().enumerate() {
            for _ in 0..workload::PINNED_READERS_PER_NODE {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                tasks.push(tokio::spawn(workload::run_pinned_reader(
                    ctx.clone(),
                    i as u64 + 1,
                    endpoint.clone(),
                    seed,
                )));
            }
        }
    }

    // A node under repair is watched from the first fault to the last readiness check.
    let corrupt = scenario.faults.contains(&Fault::Corrupt);
    // Set when the checks need the samples, and when the run ends early (an error, a
    // dropped future): the watch never outlives its run.
    let watch_stop = StopOnDrop(Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let watch = corrupt.then(|| {
        let nodes: Vec<WatchedNode> = {
            let cluster = bed.cluster.lock().expect("cluster lock");
            cluster
                .nodes
                .iter()
                .map(|n| WatchedNode {
                    id: n.id,
                    addr: n.addr.clone(),
                    admin: n.admin.clone(),
                    data_dir: n.data_dir.clone(),
                })
                .collect()
        };
        tokio::spawn(watch_repairs(nodes, rec.clone(), watch_stop.0.clone()))
    });

    // Faults.
    let until = Instant::now() + opts.duration;
    let injected =
        nemesis::run_schedule(&bed, &scenario.faults, scenario.pace, opts.seed, until).await?;

    // Heal, stop the workers, wait for the cluster.
    ctx.stop.store(true, Ordering::Relaxed);
    bed.heal_all()?;
    if !skew_detail.is_empty() {
        rec.nemesis("skew-base", "stop", skew_detail.trim(), skew_level);
    }
    let mut worker_panics = Vec::new();
    for t in tasks {
        if let Err(e) = t.await {
            worker_panics.push(Violation::general(format!("a worker died: {e}")));
        }
    }
    let recovery = bed.await_recovery(RECOVERY_LIMIT).await;
    rec.nemesis("heal", "start", "all faults healed; final reads", 0.0);

    // Final reads and recovery claims.
    let keys = ctx.keys.lock().expect("keys lock").clone();
    let claim_limit = Duration::from_millis(2 * (ELECTION_MS_MAX + opts.ttl.as_millis() as u64))
        + Duration::from_secs(10);
    let finals = keys
        .iter()
        .map(|(workload, key)| final_checks(&ctx, workload, key, claim_limit));
    let unrecovered: Vec<Violation> = futures::future::join_all(finals)
        .await
        .into_iter()
        .flatten()
        .collect();
    leak_checks(&ctx, &scenario).await;
    rec.nemesis("heal", "stop", "all faults healed; final reads", 0.0);

    let ready = readiness(&bed).await;
    drop(watch_stop);
    let repair_samples = match watch {
        Some(task) => task.await.unwrap_or_else(|e| {
            worker_panics.push(Violation::general(format!("the repair watch died: {e}")));
            Vec::new()
        }),
        None => Vec::new(),
    };
    // Every node must be running now, and none may have ended by itself on the way.
    let not_started: Vec<String> = {
        let mut cluster = bed.cluster.lock().expect("cluster lock");
        for id in cluster.ids() {
            cluster.is_up(id);
        }
        cluster
            .nodes
            .iter()
            .filter_map(|n| n.exited.clone())
            .collect()
    };
    bed.cluster
        .lock()
        .expect("cluster lock")
        .stop_all(Duration::from_secs(5));
    let panics = bed.cluster.lock().expect("cluster lock").panics();
    let cuts = bed.cuts.lock().expect("cuts lock").clone();
    let membership = bed.membership.lock().expect("membership lock").clone();
    let damages = bed.damages.lock().expect("damages lock").clone();
    let refill_waits = bed.refill_waits.lock().expect("refill waits lock").clone();
    let eio_records = bed.eio.lock().expect("eio lock").clone();
    let damage_found: Vec<(u64, usize)> = bed
        .cluster
        .lock()
        .expect("cluster lock")
        .nodes
        .iter()
        .map(|n| (n.id, sickdisk::damage_found(&n.data_dir)))
        .collect();
    drop(bed);

    // Check.
    let history = rec.history();
    history.write(&dir.join("history.jsonl"))?;
    let over = scenario.skew == BaseSkew::Over;
    let params = CheckParams {
        rho: if over {
            SKEW_OVER_RATE - 1.0
        } else {
            DRIFT_MARGIN
        },
        drift_margin: DRIFT_MARGIN,
        skew_within_bound: !over,
        wgl_budget_ms: opts.wgl_budget.as_millis() as u64,
    };
    let baton_workloads = scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w != "unfenced-canary");
    let mut results = Vec::new();
    // Every workload's baton operations are checked, the canary's claims and releases too.
    results.extend(check::check_all(&history, &params));
    if baton_workloads {
        let c = check::counts(&history);
        let mut short = Vec::new();
        if c.ok_claims < MIN_OK_CLAIMS {
            short.push(format!("{} ok claims < {MIN_OK_CLAIMS}", c.ok_claims));
        }
        if c.ok_writes < MIN_OK_WRITES {
            short.push(format!("{} ok writes < {MIN_OK_WRITES}", c.ok_writes));
        }
        if c.refused_stale_writes < MIN_REFUSED_STALE_WRITES {
            short.push(format!(
                "{} refused stale writes < {MIN_REFUSED_STALE_WRITES}",
                c.refused_stale_writes
            ));
        }
        results.push(result(
            "minimum-counts",
            if short.is_empty() {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
            format!(
                "{} ok claims, {} ok writes, {} refused stale writes, {} info ops{}",
                c.ok_claims,
                c.ok_writes,
                c.refused_stale_writes,
                c.info_ops,
                if short.is_empty() {
                    String::new()
                } else {
                    format!(": {}", short.join(", "))
                }
            ),
            Vec::new(),
        ));
    }
    if scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w == "unfenced-canary")
    {
        let canary = check::check_canary(&history);
        let caught = canary.verdict == Verdict::Fail;
        results.push(result(
            "canary-caught",
            if caught { Verdict::Pass } else { Verdict::Fail },
            if caught {
                format!(
                    "the unfenced canary lost updates and the list checker caught {} of them: \
                     the checkers can see this bug",
                    canary.violations.len()
                )
            } else {
                "the unfenced canary's lost update went unnoticed: the checkers are blind"
                    .to_string()
            },
            canary.violations,
        ));
    }
    results.push(result(
        "recovery",
        if recovery.is_some() && unrecovered.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        format!(
            "leader agreed {} after healing; {} of {} keys readable and claimable again",
            recovery
                .map(|d| format!("in {} ms", d.as_millis()))
                .unwrap_or_else(|| "NEVER".into()),
            keys.len() - unrecovered.len().min(keys.len()),
            keys.len()
        ),
        unrecovered,
    ));
    results.push(result(
        "nodes-start",
        if not_started.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        if not_started.is_empty() {
            "every node ran to the end and started again after each fault".to_string()
        } else {
            format!("{} nodes ended by themselves", not_started.len())
        },
        not_started.into_iter().map(Violation::general).collect(),
    ));
    results.push(ready);
    if scenario.power {
        results.push(power_result(&cuts));
    }
    if scenario.faults.iter().any(|f| {
        matches!(
            f,
            Fault::ReplaceVoter | Fault::ReplaceLeader | Fault::WipeDisk
        )
    }) {
        results.push(membership_result(&membership));
    }
    if corrupt {
        results.push(sickdisk::judge_damaged_nodes(
            &damages,
            &repair_samples,
            &damage_found,
            &refill_waits,
        ));
    }
    let fails_disks = scenario
        .faults
        .iter()
        .any(|f| matches!(f, Fault::EioOne | Fault::EioLeader));
    if fails_disks {
        results.push(sickdisk::judge_eio(&eio_records, &history.ops()));
    }
    if scenario.copies() {
        results.push(check::copies::check(&history.ops(), &history.wire(), true));
    }
    if scenario.revoker.is_some() {
        results.push(check::notice::check(&history, ELECTION_MS_MAX));
    }
    if scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w == "task-takers")
    {
        results.push(check::tasks::check(&history, params.rho));
    }
    if scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w == "set-takers")
    {
        results.push(check::sets::check(&history, params.rho));
    }
    if scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w == "waiters" || *w == "permit-waiters")
    {
        results.push(check::lines::check(&history, params.rho));
    }
    if scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w == "permit-holders")
    {
        results.push(check::permits::check(&history, params.rho));
    }
    if scenario
        .workloads
        .iter()
        .any(|(w, _, _)| *w == "shared-holders")
    {
        results.push(check::shared::check(&history, params.rho));
    }
    if scenario.workloads.iter().any(|(w, _, _)| *w == "churner") {
        results.push(check::retries::check(&history));
    }
    // Any panic fails (sled's on a failed disk, BUGS.md P7, went with sled at data format 7).
    let died = panics.len() + worker_panics.len();
    results.push(result(
        "no-panic",
        if died > 0 {
            Verdict::Fail
        } else {
            Verdict::Pass
        },
        format!(
            "{} panic lines in node logs, {} workers died",
            panics.len(),
            worker_panics.len(),
        ),
        panics
            .into_iter()
            .map(Violation::general)
            .chain(worker_panics)
            .collect(),
    ));

    if let Some(what) = scenario.canary() {
        results = vec![canary_result(what, results)];
    }
    let verdict = if results.iter().any(|r| r.verdict == Verdict::Fail) {
        "failed"
    } else if results.iter().any(|r| r.verdict == Verdict::Unknown) {
        "indeterminate"
    } else {
        "ok"
    };
    let meta = RunMeta {
        scenario: opts.scenario.clone(),
        seed: opts.seed,
        nodes: opts.nodes,
        ttl_ms: opts.ttl.as_millis() as u64,
        duration_ms: opts.duration.as_millis() as u64,
        rerun: opts.rerun(),
        verdict: verdict.to_string(),
    };
    let outcome = Outcome {
        meta,
        dir: dir.clone(),
        results,
        ops: history.ops().len(),
        faults: injected,
        recovery_ms: recovery.map(|d| d.as_millis() as u64),
    };
    crate::report::write_html(
        &dir.join("report.html"),
        &outcome.meta,
        &history,
        &outcome.results,
    )?;
    std::fs::write(dir.join("summary.txt"), outcome.text())?;
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&outcome)?,
    )?;
    Ok(outcome)
}
