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
use crate::history::{Call, CheckParams, CheckResult, Kind, Reply, RunMeta, Verdict, Violation};
use crate::nemesis::{self, Bed, Fault, Pace, SKEW_OVER_RATE, SKEW_WITHIN};
use crate::net::{self, Net};
use crate::sickdisk::{self, RepairSample};
use crate::workload::{self, Ctx, Recorder, Slot};

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

/// Clock-rate skew a scenario holds for its whole fault phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BaseSkew {
    None,
    /// Every node at a random rate within ±[`SKEW_WITHIN`].
    Within,
    /// The first leader at [`SKEW_OVER_RATE`]: beyond the bound, leases may overlap
    /// (reported); fencing must still hold.
    Over,
}

/// A scenario: which faults, which workloads.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub faults: Vec<Fault>,
    /// (workload, slots, workers per slot)
    pub workloads: Vec<(&'static str, usize, usize)>,
    pub skew: BaseSkew,
    /// Nodes' wall clocks offset by minutes with libfaketime (monotonic clock untouched).
    pub wall_offsets: bool,
    /// Data dirs on power-cut filesystems ([`crate::powerfs`]).
    pub power: bool,
    /// The power canary: nodes acknowledge before their fsync (`skip_fsync`) and every cut
    /// takes back all that was not synced. The run passes only if the checks catch it.
    pub power_canary: bool,
    /// Read-only workers pinned to each node ([`workload::PINNED_READERS_PER_NODE`] of
    /// [`workload::run_pinned_reader`]).
    pub pinned_readers: bool,
    /// The stale-read canary: nodes that believe they lead skip the read-index round
    /// (`skip_read_index`). The run passes only if the checks catch it.
    pub read_canary: bool,
    /// How fast faults follow each other.
    pub pace: Pace,
    /// The damaged-log canary: nodes take damage before their log's durable end for a
    /// crash's torn tail, cut it silently and vote on it (`trust_damaged_log`), as baton did
    /// before data format 7. The run passes only if the checks catch it.
    pub corrupt_canary: bool,
    /// The copies canary: leaders decide every copy of a claim afresh
    /// (`decide_copies_afresh`), as baton did before the chaos suite's seed 426017. The run
    /// passes only if the checks catch it.
    pub copies_canary: bool,
    /// A revoker ([`workload::run_revoker`]) revokes keys in use: `Some(false)` with the
    /// default hold, `Some(true)` with `--now`.
    pub revoker: Option<bool>,
    /// The revoke canary: the revoker frees keys at once (`--now`) while the holders it cut
    /// off (the plain workers, who do not hear the push) still believe. The believed windows
    /// then overlap; the run passes only if the checks catch it.
    pub revoke_canary: bool,
    /// The notice canary: endings streams send no ending (`mute_endings`), so holders hear of
    /// a revoke only at their next renewal. The run passes only if the checks catch it.
    pub notice_canary: bool,
}

impl Scenario {
    /// The scenario has the faults of the claim proxies (late and copied first attempts).
    fn copies(&self) -> bool {
        self.faults
            .iter()
            .any(|f| matches!(f, Fault::ClientDelay | Fault::ClientCopies))
    }

    /// A canary scenario: its run passes only if a check fails.
    fn canary(&self) -> Option<&'static str> {
        if self.power_canary {
            Some("nodes that acknowledge before their fsync lost power")
        } else if self.read_canary {
            Some("nodes that skip the read-index round answered linearizable reads")
        } else if self.corrupt_canary {
            Some("nodes that take a damaged log for a torn tail and vote on it had logs damaged")
        } else if self.copies_canary {
            Some("leaders that decide every copy of a claim afresh got late and copied claims")
        } else if self.revoke_canary {
            Some("keys were revoked with --now while their cut-off holders still believed")
        } else if self.notice_canary {
            Some("holders were told of no revoke (endings muted) and learnt at their renewals")
        } else {
            None
        }
    }
}

/// Names of the scenarios [`scenario`] knows.
pub const SCENARIOS: &[&str] = &[
    "partition-kill",
    "pause",
    "skew",
    "skew-over",
    "canary",
    "matrix",
    "power",
    "power-canary",
    "power-all",
    "membership",
    "read-canary",
    "corrupt",
    "corrupt-canary",
    "eio",
    "copies",
    "copies-canary",
    "revoke",
    "revoke-canary",
    "notice-canary",
];

/// Checkers whose failure in a canary scenario counts as catching it (not the minimum counts:
/// too little work catches nothing).
const CANARY_CATCHERS: &[&str] = &[
    "linearizability",
    "tokens",
    "fencing",
    "lists",
    "intervals",
    "recovery",
    "nodes-start",
    "no-panic",
    "copies",
    "notice",
];

/// The scenario called `name`, for a cluster of `nodes`.
pub fn scenario(name: &str, nodes: usize) -> Option<Scenario> {
    use Fault::*;
    let baton = vec![("lease-register", 4, 3), ("fenced-append", 2, 3)];
    let mut partitions = vec![PartitionHalves, IsolateLeader, OneWayLeader, ClientCut];
    if nodes >= 5 {
        partitions.extend([MajoritiesRing, Bridge]);
    }
    let s = |faults: Vec<Fault>, workloads, skew, wall_offsets| Scenario {
        name: name.to_string(),
        faults,
        workloads,
        skew,
        wall_offsets,
        power: false,
        power_canary: false,
        pinned_readers: true,
        read_canary: false,
        pace: Pace::Steady,
        corrupt_canary: false,
        copies_canary: false,
        revoker: None,
        revoke_canary: false,
        notice_canary: false,
    };
    let mut revoked = baton.clone();
    revoked.push(("guard-holders", 4, 2));
    Some(match name {
        "partition-kill" => {
            let mut f = partitions.clone();
            // The leader isolated or paused with clients still attached, twice as often:
            // where a stale read would show.
            f.extend([KillOne, KillLeader, KillAll, IsolateLeader, PauseLeader]);
            s(f, baton, BaseSkew::None, false)
        }
        "pause" => s(
            vec![PauseLeader, PauseOne, PauseLeader],
            baton,
            BaseSkew::None,
            false,
        ),
        "skew" => {
            let mut f = partitions.clone();
            f.extend([Delay, PauseLeader]);
            s(f, baton, BaseSkew::Within, true)
        }
        "skew-over" => s(vec![PartitionHalves, Delay], baton, BaseSkew::Over, false),
        "canary" => Scenario {
            pinned_readers: false,
            ..s(
                vec![],
                vec![("unfenced-canary", 1, 2)],
                BaseSkew::None,
                false,
            )
        },
        "matrix" => {
            let mut f = partitions.clone();
            f.extend([
                Loss,
                Delay,
                KillOne,
                KillLeader,
                KillAll,
                PauseOne,
                PauseLeader,
                SkewWithin,
            ]);
            s(f, baton, BaseSkew::None, true)
        }
        "power" => Scenario {
            power: true,
            ..s(
                vec![PowerOne, PowerLeader, PowerMinority, PowerAll],
                baton,
                BaseSkew::None,
                false,
            )
        },
        "membership" => s(
            vec![ReplaceVoter, ReplaceLeader, WipeDisk, KillOne],
            baton,
            BaseSkew::None,
            false,
        ),
        "power-all" => Scenario {
            power: true,
            ..s(vec![PowerAll], baton, BaseSkew::None, false)
        },
        // Isolation only: an isolated leader believes it leads for the whole fault while a
        // new one takes writes, so a reader pinned to it meets the bug in every run. (After a
        // pause the old leader mostly hears the new one before it answers the reads that
        // waited: whether it does is chance.)
        "read-canary" => Scenario {
            read_canary: true,
            ..s(vec![IsolateLeader], baton, BaseSkew::None, false)
        },
        // Brisk: one cut finds few acknowledged writes unsynced on a majority often enough
        // (2 seeds in 13 saw none) that one cut per run would make the canary chance.
        "power-canary" => Scenario {
            power: true,
            power_canary: true,
            pace: Pace::Brisk,
            ..s(vec![PowerAll], baton, BaseSkew::None, false)
        },
        // One node's log damaged where its vote decides (see `Fault::Corrupt`).
        "corrupt" => s(vec![Corrupt], baton, BaseSkew::None, false),
        "corrupt-canary" => Scenario {
            corrupt_canary: true,
            ..s(vec![Corrupt], baton, BaseSkew::None, false)
        },
        // One node's disk fails its syncs (the power-cut filesystem answers EIO).
        "eio" => Scenario {
            power: true,
            ..s(vec![EioOne, EioLeader], baton, BaseSkew::None, false)
        },
        // Late and copied first attempts of claims (the harness's proxy, `crate::copies`).
        "copies" => s(
            vec![ClientDelay, ClientCopies],
            baton,
            BaseSkew::None,
            false,
        ),
        "copies-canary" => Scenario {
            copies_canary: true,
            ..s(
                vec![ClientDelay, ClientCopies],
                baton,
                BaseSkew::None,
                false,
            )
        },
        // Revokes (holding the key back) among plain and guard-held leases, with leader
        // kills and partitions: no two believed windows may overlap, and each guard holder
        // that can reach a quorum must hear of its revoke within the notice bound.
        "revoke" => Scenario {
            revoker: Some(false),
            ..s(
                vec![
                    KillLeader,
                    KillOne,
                    PartitionHalves,
                    IsolateLeader,
                    ClientCut,
                ],
                revoked,
                BaseSkew::None,
                false,
            )
        },
        "revoke-canary" => Scenario {
            revoker: Some(true),
            revoke_canary: true,
            ..s(vec![], revoked, BaseSkew::None, false)
        },
        "notice-canary" => Scenario {
            revoker: Some(false),
            notice_canary: true,
            ..s(vec![], revoked, BaseSkew::None, false)
        },
        _ => return None,
    })
}

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

/// How often the repair watch looks for each node's repair obligation.
pub const REPAIR_WATCH_EVERY: Duration = Duration::from_millis(100);
/// How long the repair watch waits for a node's status or `/readyz`.
pub const REPAIR_ASK_LIMIT: Duration = Duration::from_millis(500);

/// Raises its flag when dropped.
struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A node as the repair watch sees it (fixed for the run).
struct WatchedNode {
    id: u64,
    addr: String,
    admin: String,
    data_dir: PathBuf,
}

/// Until `stop`: whenever a node's `log/repair.json` exists, asks the node whether it leads
/// and whether it is ready, and keeps the answer if the file still exists after it (the
/// node removes it only once refilled, so the answer was given under repair).
async fn watch_repairs(
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
async fn readiness(bed: &Bed) -> CheckResult {
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
fn membership_result(log: &nemesis::MembershipLog) -> CheckResult {
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
fn power_result(cuts: &[nemesis::Cut]) -> CheckResult {
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
fn canary_result(what: &str, results: Vec<CheckResult>) -> CheckResult {
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
async fn final_checks(ctx: &Ctx, workload: &str, key: &str, limit: Duration) -> Option<Violation> {
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
