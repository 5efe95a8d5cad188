//! The watchers bench: a fresh 3-node baton cluster with W watch streams open at once on one
//! prefix, spread evenly over the nodes (each watcher's client pinned to its node), while
//! one writer claims new keys under that prefix at a steady rate.
//!
//! Measured: every node's resident memory per open stream (`VmRSS` after the streams are
//! open minus before), the events delivered against those due (every watcher must see every
//! write), how long after the write's acknowledgement each event arrives (p50, p99 over all
//! deliveries), and the nodes' CPU seconds per 1,000 deliveries. The watchers run in this
//! process, on the same cores as the nodes: on this machine the ceiling is the machine's.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_client::{ClaimOutcome, Client, ClientConfig, ReadMode};
use futures::StreamExt;
use serde::Serialize;

use crate::cluster::{cpu_seconds, BatonCluster};
use crate::metrics::{get_metrics, sample};
use crate::scale::memory_kib;

/// Most watch streams one run opens.
pub const WATCHERS_MAX: usize = 100_000;
/// Watch streams per client connection: below the node's HTTP/2 streams per connection
/// (1,024 by default), so none waits for a free stream.
pub const WATCHERS_PER_CONNECTION: usize = 500;
/// Most writes per second the writer is asked for.
pub const WATCH_WRITES_PER_S_MAX: u32 = 1_000;
/// How long the streams may take to open, and the events to arrive after the last write.
pub const WATCH_SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// How often a watcher with no event looks whether the writer has stopped.
const WATCH_POLL: Duration = Duration::from_millis(200);
/// The prefix every watcher watches and the writer writes under.
const PREFIX: &str = "watched/";

/// What to run.
#[derive(Debug, Clone)]
pub struct WatchersConfig {
    pub watchers: usize,
    pub writes_per_s: u32,
    pub write_for: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct WatchersReport {
    pub watchers: usize,
    /// Seconds until every node counted its share of open streams.
    pub open_s: f64,
    /// Per node: (RSS after opening - before) / streams on that node.
    pub bytes_per_watcher: Vec<f64>,
    pub writes: u64,
    pub writes_per_s: f64,
    /// writes × watchers.
    pub deliveries_due: u64,
    pub deliveries: u64,
    /// Events a watcher got again, or after a later one (the watch promises neither).
    pub disordered: u64,
    /// From the write's acknowledgement to the event's arrival at a watcher, over every
    /// delivery (an event can arrive before the writer hears its acknowledgement: 0).
    pub delay_p50_ms: f64,
    pub delay_p99_ms: f64,
    pub delay_max_ms: f64,
    /// CPU of the 3 node processes while writing, per 1,000 deliveries.
    pub node_cpu_s_per_1000: f64,
}

/// Runs the watchers bench on a fresh cluster of `node_bin` under `dir`.
pub async fn run(
    node_bin: &Path,
    dir: &Path,
    cfg: &WatchersConfig,
) -> anyhow::Result<WatchersReport> {
    if cfg.watchers == 0 || cfg.watchers > WATCHERS_MAX {
        bail!("watchers must be 1 to {WATCHERS_MAX}");
    }
    if cfg.writes_per_s == 0 || cfg.writes_per_s > WATCH_WRITES_PER_S_MAX {
        bail!("writes per second must be 1 to {WATCH_WRITES_PER_S_MAX}");
    }
    // Every stream comes from 127.0.0.1: the per-address limit must let them all in.
    let limit = [
        "--watches-per-address-max".to_string(),
        cfg.watchers.to_string(),
    ];
    let mut cluster = BatonCluster::start_with(
        node_bin,
        3,
        dir,
        &limit,
        "warn,baton_node::node=info,baton_node::store=info",
    )?;
    cluster
        .wait_healthy_on(&format!("{PREFIX}health"), Duration::from_secs(30))
        .await?;
    let admin = cluster.admin()?;
    let pids = cluster.procs.pids();
    let before: Vec<u64> = pids
        .iter()
        .map(|p| memory_kib(*p).map(|m| m.0).unwrap_or(0))
        .collect();
    let writer = Client::connect(ClientConfig {
        retry_deadline: Duration::from_secs(30),
        ..ClientConfig::with_endpoints(cluster.endpoints.iter().cloned())
    })
    .await?;
    // Revisions count commands, not log entries: the next one comes from a probe.
    let from = writer
        .probe(&format!("{PREFIX}health"), ReadMode::Linearizable)
        .await?
        .revision
        + 1;

    // Open the streams: watcher i on node i % 3, WATCHERS_PER_CONNECTION per client.
    let started = Instant::now();
    // The writer's last revision once it has stopped; 0 while it writes.
    let last = Arc::new(AtomicU64::new(0));
    let mut per_node = [0usize; 3];
    let mut clients: Vec<Vec<Client>> = vec![Vec::new(); 3];
    let mut tasks = Vec::new();
    for i in 0..cfg.watchers {
        let node = i % 3;
        if per_node[node] % WATCHERS_PER_CONNECTION == 0 {
            clients[node].push(
                Client::connect(ClientConfig {
                    follow_leader_hints: false,
                    retry_deadline: Duration::from_secs(30),
                    ..ClientConfig::with_endpoints([cluster.endpoints[node].clone()])
                })
                .await?,
            );
        }
        per_node[node] += 1;
        let client = clients[node].last().expect("a client").clone();
        let last = Arc::clone(&last);
        tasks.push(tokio::spawn(async move {
            let mut stream = client.watch(PREFIX, from);
            let mut seen: Vec<(u64, Instant)> = Vec::new();
            let mut give_up: Option<Instant> = None;
            let mut disordered = 0u64;
            loop {
                match tokio::time::timeout(WATCH_POLL, stream.next()).await {
                    Ok(Some(Ok(e))) => {
                        // A repeat or a step back is counted, not delivered again.
                        if seen.last().is_some_and(|s| e.revision <= s.0) {
                            disordered += 1;
                        } else {
                            seen.push((e.revision, Instant::now()));
                        }
                    }
                    Ok(Some(Err(e))) => return Err(e.to_string()),
                    Ok(None) => return Err("the watch stream ended".to_string()),
                    Err(_) => {}
                }
                // Done once the writer has stopped and its last write is here (or given up).
                let last = last.load(Ordering::Acquire);
                if last != 0 {
                    let until = *give_up.get_or_insert_with(|| Instant::now() + WATCH_SETTLE_LIMIT);
                    if seen.last().is_some_and(|s| s.0 >= last) || Instant::now() > until {
                        break;
                    }
                }
            }
            Ok((seen, disordered))
        }));
    }
    let open_until = Instant::now() + WATCH_SETTLE_LIMIT;
    loop {
        let open: usize = admin
            .iter()
            .filter_map(|a| get_metrics(a).ok())
            .filter_map(|m| sample(&m, "baton_watch_streams"))
            .map(|v| v as usize)
            .sum();
        if open >= cfg.watchers {
            break;
        }
        if let Some(ended) = tasks.iter().position(|t| t.is_finished()) {
            let why = tasks.swap_remove(ended).await?.err().unwrap_or_default();
            bail!("a watcher ended before every stream was open: {why}");
        }
        if Instant::now() > open_until {
            bail!("only {open} of {} watch streams opened", cfg.watchers);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let open_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let bytes_per_watcher: Vec<f64> = pids
        .iter()
        .enumerate()
        .map(|(n, p)| {
            let now = memory_kib(*p).map(|m| m.0).unwrap_or(0);
            (now.saturating_sub(before[n]) * 1024) as f64 / per_node[n].max(1) as f64
        })
        .collect();

    // Write at a steady rate: a claim of a new key each time, its revision the token.
    let cpu_before = cpu_seconds(&pids);
    let mut acked: HashMap<u64, Instant> = HashMap::new();
    let period = Duration::from_secs_f64(1.0 / f64::from(cfg.writes_per_s));
    let write_started = Instant::now();
    let mut next = write_started;
    let mut n = 0u64;
    while write_started.elapsed() < cfg.write_for {
        tokio::time::sleep_until(next.into()).await;
        next += period;
        let key = format!("{PREFIX}{n:08}");
        n += 1;
        match writer
            .claim(&key, "writer", Duration::from_secs(3600))
            .await?
        {
            ClaimOutcome::Granted(g) => {
                acked.insert(g.lease.token, Instant::now());
            }
            other => bail!("the writer's claim of a new key {key} was refused: {other:?}"),
        }
    }
    let write_s = write_started.elapsed().as_secs_f64();
    let cpu = cpu_seconds(&pids) - cpu_before;
    last.store(
        acked.keys().copied().max().context("no write")?,
        Ordering::Release,
    );
    let mut delays: Vec<f64> = Vec::new();
    let mut disordered = 0;
    for t in tasks {
        let (seen, out_of_order) = t
            .await?
            .map_err(|e| anyhow::anyhow!("a watcher failed: {e}"))?;
        disordered += out_of_order;
        for (revision, at) in seen {
            if let Some(ack) = acked.get(&revision) {
                delays.push(at.saturating_duration_since(*ack).as_secs_f64() * 1e3);
            }
        }
    }
    drop(clients);
    delays.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if delays.is_empty() {
            return f64::NAN;
        }
        delays[((delays.len() - 1) as f64 * p).round() as usize]
    };
    let deliveries = delays.len() as u64;
    Ok(WatchersReport {
        watchers: cfg.watchers,
        open_s,
        bytes_per_watcher,
        writes: acked.len() as u64,
        writes_per_s: acked.len() as f64 / write_s,
        deliveries_due: acked.len() as u64 * cfg.watchers as u64,
        deliveries,
        disordered,
        delay_p50_ms: pct(0.5),
        delay_p99_ms: pct(0.99),
        delay_max_ms: delays.last().copied().unwrap_or(f64::NAN),
        node_cpu_s_per_1000: cpu / (deliveries.max(1) as f64 / 1000.0),
    })
}

/// One table row per report.
pub fn render(reports: &[WatchersReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} | {:>6} | {:>24} | {:>8} | {:>21} | {:>23} | {:>10}",
        "watchers",
        "open s",
        "RSS B/watcher n1 n2 n3",
        "writes/s",
        "delivered / due",
        "delay p50 / p99 / max",
        "CPU s/1000"
    );
    for r in reports {
        let per: Vec<String> = r
            .bytes_per_watcher
            .iter()
            .map(|b| format!("{b:.0}"))
            .collect();
        let _ = writeln!(
            out,
            "{:>8} | {:>6.1} | {:>24} | {:>8.0} | {:>21} | {:>23} | {:>10.3}",
            r.watchers,
            r.open_s,
            per.join(" "),
            r.writes_per_s,
            format!("{} / {}", r.deliveries, r.deliveries_due),
            format!(
                "{:.1} / {:.1} / {:.0} ms",
                r.delay_p50_ms, r.delay_p99_ms, r.delay_max_ms
            ),
            r.node_cpu_s_per_1000,
        );
    }
    out
}
