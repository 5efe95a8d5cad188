//! The scale bench: a fresh 3-node baton cluster holds N leases at once.
//!
//! Phases, each measured:
//! 1. **fill**: `claimants` clients (each its own client id, like separate agents) claim
//!    `scale/0000000` .. `scale/N-1` between them, with a TTL long enough to outlive the
//!    run;
//! 2. **hold**: every node's resident memory (`VmRSS`, and the peak `VmHWM`) against its
//!    own memory before the fill, as bytes per held lease;
//! 3. **renew**: every claimant renews its leases round-robin as fast as the cluster
//!    answers for `renew_for`; the rate is set beside the rate the N leases need to renew on
//!    their schedule (each every TTL/3) and every lease a renewal finds lost is counted;
//! 4. **catch-up**: one follower is killed (SIGKILL); one client writes enough single-command
//!    entries ([`SCALE_CATCH_UP_WRITES`]) that the leader snapshots and purges its log past
//!    the follower; the follower is
//!    restarted and timed until it has applied what the leader had; the leader's snapshot
//!    (file size, build time from its log) is reported.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_client::{ClaimOutcome, Client, ClientConfig, RenewOutcome};
use serde::Serialize;

use crate::cluster::BatonCluster;

/// Most leases one run holds (the cluster's own key limit).
pub const SCALE_LEASES_MAX: usize = 1_000_000;
/// Most claimant clients.
pub const SCALE_CLAIMANTS_MAX: usize = 1024;
/// Single-command log entries the catch-up phase writes while a follower is down: past the
/// node's default snapshot interval (5,000 entries) plus the 1,000 it keeps after a
/// snapshot, so the leader has purged what the follower misses and must send a snapshot.
pub const SCALE_CATCH_UP_WRITES: usize = 7_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    pub leases: usize,
    pub claimants: usize,
    pub ttl: Duration,
    pub renew_for: Duration,
    /// 1: every lease on a key of its own. N > 1: the leases are permits, N to a key
    /// (`claim --permits N`), each of a key's N held by another claimant (N is at most the
    /// claimants).
    pub permits: u32,
}

/// Memory of one node.
#[derive(Debug, Clone, Serialize)]
pub struct NodeMemory {
    pub node: usize,
    pub rss_before_kib: u64,
    pub rss_held_kib: u64,
    pub rss_peak_kib: u64,
    /// (held - before) / leases.
    pub bytes_per_lease: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RenewPhase {
    pub renewals: u64,
    pub per_s: f64,
    /// The rate N leases need to renew each every TTL/3.
    pub needed_per_s: f64,
    pub lost: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatchUp {
    pub node: usize,
    /// Entries the cluster committed while the node was down.
    pub entries_missed: u64,
    pub catch_up_ms: u64,
    /// The restarted node installed a snapshot (its snapshot file changed).
    pub from_snapshot: bool,
    pub snapshot_bytes: u64,
    /// Build time of the leader's latest snapshot, from its log.
    pub snapshot_build_ms: Option<u64>,
    /// Install time on the restarted node, from its log.
    pub snapshot_install_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    pub leases: usize,
    pub claimants: usize,
    pub ttl_s: u64,
    pub fill_s: f64,
    pub fill_claims_per_s: f64,
    pub fill_errors: u64,
    pub memory: Vec<NodeMemory>,
    pub renew: RenewPhase,
    pub catch_up: CatchUp,
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB.
pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The last `name=<number>` on a line of `log` that contains `marker`.
pub fn last_logged_number(log: &Path, marker: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(log).ok()?;
    let key = format!("{name}=");
    text.lines()
        .rev()
        .filter(|l| l.contains(marker))
        .find_map(|line| {
            let at = line.find(&key)? + key.len();
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
}

fn key(i: usize) -> String {
    format!("scale/{i:07}")
}

/// The key of lease `i` with `permits` to a key: N consecutive leases share one.
fn key_of(i: usize, permits: u32) -> String {
    key(i / permits.max(1) as usize)
}

async fn client_of(endpoints: &[String]) -> anyhow::Result<Client> {
    Ok(Client::connect(ClientConfig {
        retry_deadline: Duration::from_secs(30),
        ..ClientConfig::with_endpoints(endpoints.iter().cloned())
    })
    .await?)
}

/// Runs the scale bench on a fresh cluster of `node_bin` under `dir`.
pub async fn run(node_bin: &Path, dir: &Path, cfg: &ScaleConfig) -> anyhow::Result<ScaleReport> {
    if cfg.leases == 0 || cfg.leases > SCALE_LEASES_MAX {
        bail!("leases must be 1 to {SCALE_LEASES_MAX}");
    }
    if cfg.claimants == 0 || cfg.claimants > SCALE_CLAIMANTS_MAX {
        bail!("claimants must be 1 to {SCALE_CLAIMANTS_MAX}");
    }
    if cfg.permits == 0 || cfg.permits as usize > cfg.claimants {
        bail!(
            "permits must be 1 to the claimants ({}): a key's permits go to distinct claimants",
            cfg.claimants
        );
    }
    let mut cluster =
        BatonCluster::start_with(node_bin, 3, dir, &[], "warn,baton_node::store=info")?;
    // The health check uses the first lease key, so the run uses exactly `leases` keys (the
    // cluster holds at most 1,000,000).
    cluster
        .wait_healthy_on(&key(0), Duration::from_secs(30))
        .await?;
    let before: Vec<u64> = cluster
        .procs
        .pids()
        .iter()
        .map(|p| memory_kib(*p).map(|m| m.0).unwrap_or(0))
        .collect();

    // 1. Fill.
    let mut clients = Vec::new();
    for _ in 0..cfg.claimants {
        clients.push(client_of(&cluster.endpoints).await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (j, client) in clients.into_iter().enumerate() {
        let (leases, claimants, ttl, permits) = (cfg.leases, cfg.claimants, cfg.ttl, cfg.permits);
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            let mut errors = 0u64;
            for i in (j..leases).step_by(claimants) {
                match client
                    .claim_permit(&key_of(i, permits), "scale", ttl, permits)
                    .await
                {
                    Ok(ClaimOutcome::Granted(g)) => held.push((i, g.lease.token)),
                    Ok(ClaimOutcome::Held { .. }) | Err(_) => errors += 1,
                }
            }
            (client, held, errors)
        }));
    }
    let mut holders = Vec::new();
    let mut fill_errors = 0;
    let mut granted = 0usize;
    for t in tasks {
        let (client, held, errors) = t.await?;
        fill_errors += errors;
        granted += held.len();
        holders.push((client, held));
    }
    let fill_s = started.elapsed().as_secs_f64();
    cluster.procs.check_running("baton-node", &cluster.logs)?;

    // 2. Hold: let the followers apply, then read memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let read_memory = |cluster: &BatonCluster| -> Vec<(u64, u64)> {
        cluster
            .procs
            .pids()
            .iter()
            .map(|p| memory_kib(*p).unwrap_or((0, 0)))
            .collect()
    };
    let held_memory = read_memory(&cluster);

    // 3. Renew.
    let renew_started = Instant::now();
    let renew_until = renew_started + cfg.renew_for;
    let permits = cfg.permits;
    let mut tasks = Vec::new();
    for (client, held) in holders {
        tasks.push(tokio::spawn(async move {
            let (mut renewals, mut lost, mut errors) = (0u64, 0u64, 0u64);
            'outer: loop {
                for (i, token) in &held {
                    if Instant::now() >= renew_until {
                        break 'outer;
                    }
                    match client.renew(&key_of(*i, permits), *token).await {
                        Ok(RenewOutcome::Renewed(_)) => renewals += 1,
                        Ok(_) => lost += 1,
                        Err(_) => errors += 1,
                    }
                }
                if held.is_empty() {
                    break;
                }
            }
            (client, held, renewals, lost, errors)
        }));
    }
    let (mut renewals, mut lost, mut renew_errors) = (0, 0, 0);
    let mut writer = None;
    for t in tasks {
        let (client, held, r, l, e) = t.await?;
        renewals += r;
        lost += l;
        renew_errors += e;
        if writer.is_none() {
            if let Some(&(i, token)) = held.first() {
                writer = Some((client, key_of(i, cfg.permits), token));
            }
        }
    }
    let renew_s = renew_started.elapsed().as_secs_f64();
    let after_renew = read_memory(&cluster);
    let memory = (0..3)
        .map(|n| NodeMemory {
            node: n + 1,
            rss_before_kib: before[n],
            rss_held_kib: held_memory[n].0,
            rss_peak_kib: after_renew[n].1.max(held_memory[n].1),
            bytes_per_lease: (held_memory[n].0.saturating_sub(before[n]) * 1024) as f64
                / granted.max(1) as f64,
        })
        .collect();

    // 4. Catch-up.
    let (writer, writer_key, writer_token) = writer.context("no lease was granted")?;
    let catch_up = catch_up(&mut cluster, &writer, &writer_key, writer_token).await?;
    Ok(ScaleReport {
        leases: cfg.leases,
        claimants: cfg.claimants,
        ttl_s: cfg.ttl.as_secs(),
        fill_s,
        fill_claims_per_s: granted as f64 / fill_s,
        fill_errors,
        memory,
        renew: RenewPhase {
            renewals,
            per_s: renewals as f64 / renew_s,
            needed_per_s: cfg.leases as f64 / (cfg.ttl.as_secs_f64() / 3.0),
            lost,
            errors: renew_errors,
        },
        catch_up,
    })
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

async fn catch_up(
    cluster: &mut BatonCluster,
    writer: &Client,
    key: &str,
    token: u64,
) -> anyhow::Result<CatchUp> {
    let status = writer.cluster_status().await?;
    let leader = status
        .leader_id
        .context("no leader to measure catch-up against")? as usize;
    let node = if leader == 3 { 2 } else { 3 };
    let snapshot_files: Vec<PathBuf> = (1..=3)
        .map(|n| {
            cluster
                .data_dir(n)
                .join("snapshots")
                .join("current.snapshot")
        })
        .collect();
    let snapshot_of = |n: usize| -> PathBuf { snapshot_files[n - 1].clone() };
    let applied_before = writer
        .status_of(&cluster.endpoints[node - 1])
        .await?
        .applied_index;
    cluster.kill(node)?;
    let snapshot_mtime = modified(&snapshot_of(node));
    // One client renewing one of its leases, one renewal at a time: one log entry each, so the
    // leader's log passes a snapshot interval and is purged past the stopped node.
    for _ in 0..SCALE_CATCH_UP_WRITES {
        match writer.renew(key, token).await? {
            RenewOutcome::Renewed(_) => {}
            other => bail!("the catch-up writer lost its lease {key}: {other:?}"),
        }
    }
    let target = writer
        .status_of(&cluster.endpoints[leader - 1])
        .await?
        .applied_index;
    let started = Instant::now();
    cluster.restart(node)?;
    let probe = client_of(&cluster.endpoints[node - 1..node]).await?;
    loop {
        if let Ok(s) = probe.status_of(&cluster.endpoints[node - 1]).await {
            if s.applied_index >= target {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("node {node} did not catch up within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let catch_up_ms = started.elapsed().as_millis() as u64;
    let from_snapshot = modified(&snapshot_of(node)) != snapshot_mtime;
    Ok(CatchUp {
        node,
        entries_missed: target.saturating_sub(applied_before),
        catch_up_ms,
        from_snapshot,
        snapshot_bytes: std::fs::metadata(snapshot_of(leader))
            .map(|m| m.len())
            .unwrap_or(0),
        snapshot_build_ms: last_logged_number(&cluster.logs[leader - 1], "built snapshot", "ms"),
        snapshot_install_ms: last_logged_number(
            &cluster.logs[node - 1],
            "installed snapshot",
            "ms",
        ),
    })
}

/// One table row per report.
pub fn render(reports: &[ScaleReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} | {:>9} | {:>22} | {:>9} | {:>9} {:>9} {:>5} | {:>9} {:>8} | {:>9} {:>8} {:>6}",
        "leases",
        "fill c/s",
        "RSS B/lease n1 n2 n3",
        "peak MiB",
        "renew/s",
        "needed/s",
        "lost",
        "snap MiB",
        "build ms",
        "catchup",
        "ms",
        "snap?"
    );
    for r in reports {
        let per: Vec<String> = r
            .memory
            .iter()
            .map(|m| format!("{:.0}", m.bytes_per_lease))
            .collect();
        let peak = r.memory.iter().map(|m| m.rss_peak_kib).max().unwrap_or(0) as f64 / 1024.0;
        let c = &r.catch_up;
        let _ = writeln!(
            out,
            "{:>8} | {:>9.0} | {:>22} | {:>9.0} | {:>9.0} {:>9.0} {:>5} | {:>9.1} {:>8} | {:>9} {:>8} {:>6}",
            r.leases,
            r.fill_claims_per_s,
            per.join(" "),
            peak,
            r.renew.per_s,
            r.renew.needed_per_s,
            r.renew.lost,
            c.snapshot_bytes as f64 / (1024.0 * 1024.0),
            c.snapshot_build_ms.map_or("?".into(), |m| m.to_string()),
            format!("node {}", c.node),
            c.catch_up_ms,
            if c.from_snapshot { "yes" } else { "no" },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_logged_number_after_a_marker_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("n.log");
        std::fs::write(
            &log,
            "x built snapshot index=5 bytes=10 ms=7\nother ms=99\nx built snapshot index=9 bytes=20 ms=12\n",
        )
        .unwrap();
        assert_eq!(last_logged_number(&log, "built snapshot", "ms"), Some(12));
        assert_eq!(
            last_logged_number(&log, "built snapshot", "bytes"),
            Some(20)
        );
        assert_eq!(last_logged_number(&log, "installed snapshot", "ms"), None);
    }

    #[test]
    fn this_process_has_a_resident_size_and_a_missing_one_none() {
        let (rss, peak) = memory_kib(std::process::id()).unwrap();
        assert!(rss > 0 && peak >= rss);
        assert_eq!(memory_kib(u32::MAX), None);
    }
}
