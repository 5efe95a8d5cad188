//! The expiry bench: a fresh 3-node baton cluster where `claimants` clients claim `leases`
//! keys with one TTL and never renew them, so they come due at the rate they were granted;
//! measured from the leader: how long after the last lease came due every lease was freed
//! (`baton_leases_held` at 0), how many log entries the expiries took (the leader's applied
//! index from the end of the fill to the end), and the leader's CPU meanwhile. Run it against
//! two builds of `baton-node` (`--node-bin`), interleaved, to compare how expiries are
//! proposed.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use baton_client::{ClaimOutcome, Client};
use serde::Serialize;

use crate::cluster::{cpu_seconds, BatonCluster};
use crate::metrics::{get_metrics, sample};

/// Most leases one run expires.
pub const EXPIRY_LEASES_MAX: usize = 1_000_000;
/// Most claimant clients.
pub const EXPIRY_CLAIMANTS_MAX: usize = 1024;
/// How long the leases may take to be freed after the last came due.
const DRAIN_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
pub struct ExpiryConfig {
    pub leases: usize,
    pub claimants: usize,
    pub ttl: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExpiryReport {
    pub node_bin: String,
    pub leases: usize,
    pub ttl_ms: u64,
    /// How long the claims took.
    pub fill_s: f64,
    /// From the last lease's due time (its grant's return + TTL) to none held, on the
    /// leader.
    pub freed_after_last_due_ms: f64,
    /// Log entries written from the end of the fill until every lease was freed.
    pub entries: u64,
    /// The leader's CPU seconds over the same time.
    pub leader_cpu_s: f64,
}

fn key(i: usize) -> String {
    format!("storm/{i:07}")
}

/// Runs the expiry bench on a fresh cluster of `node_bin` under `dir`.
pub async fn run(node_bin: &Path, dir: &Path, cfg: &ExpiryConfig) -> anyhow::Result<ExpiryReport> {
    if cfg.leases == 0 || cfg.leases > EXPIRY_LEASES_MAX {
        bail!("leases must be 1 to {EXPIRY_LEASES_MAX}");
    }
    if cfg.claimants == 0 || cfg.claimants > EXPIRY_CLAIMANTS_MAX {
        bail!("claimants must be 1 to {EXPIRY_CLAIMANTS_MAX}");
    }
    let mut cluster = BatonCluster::start_with(node_bin, 3, dir, &[], "warn")?;
    cluster
        .wait_healthy_on("storm/health", Duration::from_secs(30))
        .await?;
    let admin = cluster.admin()?;
    let config = || cluster.client_config();
    let operator = Client::connect(config()).await?;
    let (leader, leader_pid) = cluster.leader(&operator).await?;

    let started = Instant::now();
    let mut tasks = Vec::new();
    for j in 0..cfg.claimants {
        let client = Client::connect(config()).await?;
        let (leases, claimants, ttl) = (cfg.leases, cfg.claimants, cfg.ttl);
        tasks.push(tokio::spawn(async move {
            let mut last = None;
            for i in (j..leases).step_by(claimants) {
                match client.claim(&key(i), "storm", ttl).await {
                    Ok(ClaimOutcome::Granted(_)) => last = Some(Instant::now()),
                    Ok(ClaimOutcome::Held { lease, .. }) => {
                        return Err(format!("{} is held by {}", key(i), lease.holder_name))
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(last)
        }));
    }
    let mut last_grant = started;
    for t in tasks {
        if let Some(at) = t
            .await?
            .map_err(|e| anyhow::anyhow!("a claim failed: {e}"))?
        {
            last_grant = last_grant.max(at);
        }
    }
    let fill_s = started.elapsed().as_secs_f64();
    let last_due = last_grant + cfg.ttl;
    if Instant::now() >= last_due {
        bail!(
            "the fill took {fill_s:.1} s, past the TTL: leases expired while others were \
             claimed; give a longer TTL"
        );
    }
    let applied_before = operator.cluster_status().await?.applied_index;
    let cpu_before = cpu_seconds(&[leader_pid]);
    let until = last_due + DRAIN_LIMIT;
    let freed_at = loop {
        let held = get_metrics(&admin[leader - 1])
            .ok()
            .and_then(|m| sample(&m, "baton_leases_held"))
            .unwrap_or(f64::NAN);
        if held == 0.0 {
            break Instant::now();
        }
        if Instant::now() > until {
            bail!("{held} leases still held {DRAIN_LIMIT:?} after the last came due");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let leader_cpu_s = cpu_seconds(&[leader_pid]) - cpu_before;
    let applied_after = operator.cluster_status().await?.applied_index;
    cluster.procs.stop();
    let freed_after_last_due_ms = if freed_at >= last_due {
        freed_at.duration_since(last_due).as_secs_f64() * 1e3
    } else {
        -(last_due.duration_since(freed_at).as_secs_f64() * 1e3)
    };
    Ok(ExpiryReport {
        node_bin: node_bin.display().to_string(),
        leases: cfg.leases,
        ttl_ms: cfg.ttl.as_millis() as u64,
        fill_s,
        freed_after_last_due_ms,
        entries: applied_after.saturating_sub(applied_before),
        leader_cpu_s,
    })
}

/// One table row per report.
pub fn render(reports: &[ExpiryReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} | {:>7} | {:>7} | {:>24} | {:>8} | {:>14} | node",
        "leases", "ttl", "fill", "freed after last due", "entries", "leader CPU"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:>8} | {:>6}s | {:>6.1}s | {:>21.0} ms | {:>8} | {:>12.2} s | {}",
            r.leases,
            r.ttl_ms / 1000,
            r.fill_s,
            r.freed_after_last_due_ms,
            r.entries,
            r.leader_cpu_s,
            r.node_bin
        );
    }
    out
}
