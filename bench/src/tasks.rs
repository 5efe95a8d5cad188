//! The task-board bench: a fresh 3-node baton cluster, `tasks` tasks posted, then `takers`
//! agents (each its own client) take them with `claim-next` and release each as done at
//! once, until nothing is left; tasks/s over the taking, `claim-next` latency, and
//! duplicates: a task granted twice (each is finished at its first release, so a second
//! grant would be a second winner). Must be 0.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use baton_client::{Client, NextFilter, NextOutcome, RecordPatch};
use serde::Serialize;

use crate::cluster::BatonCluster;

/// Most tasks one run posts.
pub const TASKS_MAX: usize = 100_000;
/// Most taker clients.
pub const TAKERS_MAX: usize = 1024;
/// Clients that post the tasks.
const POSTERS: usize = 16;
/// A taker's lease on its task (released at once).
const TASK_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct TasksConfig {
    pub tasks: usize,
    pub takers: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TasksReport {
    pub tasks: usize,
    pub takers: usize,
    /// From the first `claim-next` to the last taker's "nothing claimable".
    pub take_s: f64,
    pub tasks_per_s: f64,
    pub grants: u64,
    /// Tasks granted more than once: must be 0.
    pub duplicates: u64,
    /// `claim-next` answers of nothing claimable (each taker ends on one).
    pub nothing: u64,
    pub claim_next_p50_ms: f64,
    pub claim_next_p99_ms: f64,
}

fn key(i: usize) -> String {
    format!("board/{i:06}")
}

/// Runs the task-board bench on a fresh cluster of `node_bin` under `dir`.
pub async fn run(node_bin: &Path, dir: &Path, cfg: &TasksConfig) -> anyhow::Result<TasksReport> {
    if cfg.tasks == 0 || cfg.tasks > TASKS_MAX {
        bail!("tasks must be 1 to {TASKS_MAX}");
    }
    if cfg.takers == 0 || cfg.takers > TAKERS_MAX {
        bail!("takers must be 1 to {TAKERS_MAX}");
    }
    let mut cluster = BatonCluster::start_with(node_bin, 3, dir, &[], "warn")?;
    cluster
        .wait_healthy_on("health/tasks", Duration::from_secs(30))
        .await?;
    let config = || cluster.client_config();
    let mut posters = Vec::new();
    for j in 0..POSTERS {
        let client = Client::connect(config()).await?;
        let tasks = cfg.tasks;
        posters.push(tokio::spawn(async move {
            for i in (j..tasks).step_by(POSTERS) {
                client
                    .post(&key(i), RecordPatch::default(), None, "bench", false)
                    .await?;
            }
            Ok::<_, baton_client::Error>(())
        }));
    }
    for p in posters {
        p.await??;
    }
    let mut takers = Vec::new();
    for t in 0..cfg.takers {
        let client = Client::connect(config()).await?;
        takers.push(tokio::spawn(async move {
            let name = format!("taker-{t}");
            let mut took = Vec::new();
            let mut latencies = Vec::new();
            loop {
                let started = Instant::now();
                let answer = client
                    .claim_next("board/", &name, TASK_TTL, &NextFilter::default())
                    .await?;
                latencies.push(started.elapsed());
                match answer {
                    NextOutcome::Granted(grant) => {
                        let (key, token) = (grant.lease.key, grant.lease.token);
                        client.release_with_status(&key, token, "done").await?;
                        took.push(key);
                    }
                    NextOutcome::Nothing(counts) if counts.held == 0 => {
                        return Ok::<_, baton_client::Error>((took, latencies, Instant::now()))
                    }
                    // Tasks still held by others: one may come back (a failed release);
                    // look again shortly.
                    NextOutcome::Nothing(_) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    let mut granted: BTreeMap<String, u64> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut last = started;
    for t in takers {
        let (took, lat, at) = t.await??;
        for key in took {
            *granted.entry(key).or_default() += 1;
        }
        latencies.extend(lat);
        last = last.max(at);
    }
    cluster.procs.stop();
    let take_s = last.duration_since(started).as_secs_f64();
    let grants: u64 = granted.values().sum();
    if granted.len() != cfg.tasks {
        bail!("{} of {} tasks were taken", granted.len(), cfg.tasks);
    }
    latencies.sort_unstable();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1e3
    };
    Ok(TasksReport {
        tasks: cfg.tasks,
        takers: cfg.takers,
        take_s,
        tasks_per_s: cfg.tasks as f64 / take_s,
        grants,
        duplicates: granted.values().filter(|n| **n > 1).count() as u64,
        nothing: cfg.takers as u64,
        claim_next_p50_ms: pct(0.50),
        claim_next_p99_ms: pct(0.99),
    })
}

/// The report as one line for people.
pub fn render(r: &TasksReport) -> String {
    format!(
        "claim-next: {} tasks, {} takers: {:.1} s, {:.0} tasks/s, {} grants, {} duplicates, \
         claim-next p50 {:.2} ms p99 {:.2} ms",
        r.tasks,
        r.takers,
        r.take_s,
        r.tasks_per_s,
        r.grants,
        r.duplicates,
        r.claim_next_p50_ms,
        r.claim_next_p99_ms
    )
}
