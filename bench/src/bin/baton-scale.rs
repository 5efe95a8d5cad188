//! `baton-scale`: a fresh 3-node baton cluster on loopback holds N leases at once; reports
//! per-node memory per held lease, renew throughput against the rate the leases need, the
//! leader's snapshot size and build time, and a restarted follower's catch-up time; with
//! `--watchers`, W watch streams open at once: memory per stream, deliveries and their delay.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use baton_bench::cli::{node_bin, run_main};
use baton_bench::endings::{self, EndingsConfig};
use baton_bench::expiry::{self, ExpiryConfig};
use baton_bench::scale::{self, ScaleConfig, ScaleReport};
use baton_bench::tasks::{self, TasksConfig};
use baton_bench::watchers::{self, WatchersConfig};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-scale",
    about = "Hold N leases at once on a fresh local 3-node baton cluster: memory, renewals, snapshots, catch-up",
    after_help = "Example:
  cargo build --release -p baton-node -p baton-bench
  target/release/baton-scale --leases 10000,100000,1000000
  target/release/baton-scale --watchers 1000,10000
  target/release/baton-scale --tasks 1000 --task-takers 64
  target/release/baton-scale --endings 1:1,1:100,1:10000,1000:1000,1000:10000 --run-revokes 50"
)]
struct Args {
    /// The baton-node binary [default: baton-node next to this program].
    #[arg(long)]
    node_bin: Option<PathBuf>,
    /// Lease counts, comma-separated; each gets a fresh cluster [default: 10000,100000,
    /// none when --watchers is given].
    #[arg(long, value_delimiter = ',')]
    leases: Option<Vec<usize>>,
    /// Watch stream counts, comma-separated; each gets a fresh cluster.
    #[arg(long, value_delimiter = ',')]
    watchers: Vec<usize>,
    /// SESSIONS:LEASES pairs, comma-separated: guards held, then revoked one at a time,
    /// from the revoke to the holder's `lost()`; with them in place, as many handoffs (from
    /// the accept to the giver's `lost()`) and expiries (from the expiry's proposal to its
    /// arrival on the holder's stream); each pair gets a fresh cluster.
    #[arg(long, value_delimiter = ',')]
    endings: Vec<String>,
    /// Revokes (and handoffs, and expiries) measured per --endings pair (revokes at most the
    /// leases).
    #[arg(long, default_value_t = 200)]
    endings_revokes: usize,
    /// Revokes of `baton run` holders: from the revoke to the child's SIGTERM.
    #[arg(long, default_value_t = 0)]
    run_revokes: usize,
    /// Leases to let expire, never renewed (with --expiry-ttl): how long after the last came
    /// due all were freed, and the log entries their expiries took. Each --expiry-node-bin
    /// gets a fresh cluster per round, interleaved.
    #[arg(long, default_value_t = 0)]
    expiry_leases: usize,
    /// The TTL of --expiry-leases (longer than their claims take).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    expiry_ttl: std::time::Duration,
    /// baton-node builds to compare with --expiry-leases [default: --node-bin].
    #[arg(long, value_delimiter = ',')]
    expiry_node_bin: Vec<PathBuf>,
    /// Rounds of --expiry-leases (each build once per round).
    #[arg(long, default_value_t = 1)]
    expiry_rounds: usize,
    /// Tasks to post, then take with `claim-next` by --task-takers agents until none is left
    /// (tasks/s, duplicates).
    #[arg(long, default_value_t = 0)]
    tasks: usize,
    /// Agents taking --tasks, each its own client.
    #[arg(long, default_value_t = 64)]
    task_takers: usize,
    /// The baton CLI for --run-revokes [default: baton next to this program].
    #[arg(long)]
    cli_bin: Option<PathBuf>,
    /// (internal) Be the child of --run-revokes: wait for SIGTERM, write its instant here.
    #[arg(long, hide = true)]
    await_sigterm: Option<PathBuf>,
    /// The writer's rate while the watchers watch.
    #[arg(long, default_value_t = 50)]
    watch_writes_per_s: u32,
    /// How long the writer writes while the watchers watch.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    watch_for: Duration,
    /// Claimant clients (each its own client id) that fill and renew.
    #[arg(long, default_value_t = 64)]
    claimants: usize,
    /// TTL of every lease: long enough to outlive the run.
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// How long the renew phase lasts.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    renew_for: Duration,
    /// With N > 1, --leases are permits, N to a key (`claim --permits N`), each of a key's
    /// held by another claimant: memory per permit holder (N at most --claimants).
    #[arg(long, default_value_t = 1)]
    permits: u32,
    /// Directory under which the clusters' data goes; a new temporary directory is made in it
    /// [default: the system temp dir].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the data directory and logs (printed at the end).
    #[arg(long)]
    keep: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(stamp) = args.await_sigterm.clone() {
        return run_main("baton-scale", || async move {
            endings::await_sigterm(&stamp).await
        });
    }
    run_main("baton-scale", || run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let node_bin = node_bin(args.node_bin.as_deref())?;
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let made = tempfile::Builder::new()
        .prefix("baton-scale-")
        .tempdir_in(&parent)
        .with_context(|| format!("making a directory under {}", parent.display()))?;
    // Kept from the start with --keep, so that a run that fails leaves its logs too.
    let (dir, _removed_at_exit) = if args.keep {
        (made.keep(), None)
    } else {
        (made.path().to_path_buf(), Some(made))
    };
    println!("data and logs under {}", dir.display());
    let mut reports: Vec<ScaleReport> = Vec::new();
    let leases = args.leases.clone().unwrap_or_else(|| {
        if args.watchers.is_empty()
            && args.endings.is_empty()
            && args.run_revokes == 0
            && args.expiry_leases == 0
            && args.tasks == 0
        {
            vec![10_000, 100_000]
        } else {
            Vec::new()
        }
    });
    for &leases in &leases {
        let cfg = ScaleConfig {
            leases,
            claimants: args.claimants,
            ttl: args.ttl,
            renew_for: args.renew_for,
            permits: args.permits,
        };
        let run_dir = dir.join(format!("leases-{leases}"));
        std::fs::create_dir_all(&run_dir)?;
        let report = scale::run(&node_bin, &run_dir, &cfg).await?;
        println!("{}", serde_json::to_string(&report)?);
        reports.push(report);
    }
    let mut watched = Vec::new();
    for &count in &args.watchers {
        let cfg = WatchersConfig {
            watchers: count,
            writes_per_s: args.watch_writes_per_s,
            write_for: args.watch_for,
        };
        let run_dir = dir.join(format!("watchers-{count}"));
        std::fs::create_dir_all(&run_dir)?;
        let report = watchers::run(&node_bin, &run_dir, &cfg).await?;
        println!("{}", serde_json::to_string(&report)?);
        watched.push(report);
    }
    let mut ended = Vec::new();
    for pair in &args.endings {
        let (sessions, leases) = pair
            .split_once(':')
            .and_then(|(s, l)| Some((s.parse().ok()?, l.parse().ok()?)))
            .with_context(|| {
                format!("--endings {pair:?}: want SESSIONS:LEASES, e.g. 1000:10000")
            })?;
        let cfg = EndingsConfig {
            sessions,
            leases,
            revokes: args.endings_revokes.min(leases),
            handoffs: args.endings_revokes,
        };
        let run_dir = dir.join(format!("endings-{sessions}-{leases}"));
        std::fs::create_dir_all(&run_dir)?;
        let report = endings::run(&node_bin, &run_dir, &cfg).await?;
        println!("{}", serde_json::to_string(&report)?);
        ended.push(report);
    }
    let mut expired = Vec::new();
    if args.expiry_leases > 0 {
        let bins = if args.expiry_node_bin.is_empty() {
            vec![node_bin.clone()]
        } else {
            args.expiry_node_bin.clone()
        };
        let cfg = ExpiryConfig {
            leases: args.expiry_leases,
            claimants: args.claimants,
            ttl: args.expiry_ttl,
        };
        for round in 0..args.expiry_rounds {
            for (b, bin) in bins.iter().enumerate() {
                let run_dir = dir.join(format!("expiry-{round}-{b}"));
                std::fs::create_dir_all(&run_dir)?;
                let report = expiry::run(bin, &run_dir, &cfg).await?;
                println!("{}", serde_json::to_string(&report)?);
                expired.push(report);
            }
        }
    }
    let mut taken = None;
    if args.tasks > 0 {
        let cfg = TasksConfig {
            tasks: args.tasks,
            takers: args.task_takers,
        };
        let run_dir = dir.join(format!("tasks-{}", args.tasks));
        std::fs::create_dir_all(&run_dir)?;
        let report = tasks::run(&node_bin, &run_dir, &cfg).await?;
        println!("{}", serde_json::to_string(&report)?);
        taken = Some(report);
    }
    let mut sigterm = None;
    if args.run_revokes > 0 {
        let me = std::env::current_exe()?;
        let cli = args
            .cli_bin
            .clone()
            .unwrap_or_else(|| me.with_file_name("baton"));
        let run_dir = dir.join("run-sigterm");
        std::fs::create_dir_all(&run_dir)?;
        let report = endings::run_sigterm(&node_bin, &cli, &me, &run_dir, args.run_revokes).await?;
        println!("{}", serde_json::to_string(&report)?);
        sigterm = Some(report);
    }
    println!();
    if let Some(r) = &taken {
        println!("{}", tasks::render(r));
    }
    if !expired.is_empty() {
        println!("{}", expiry::render(&expired));
    }
    if !ended.is_empty() {
        println!("{}", endings::render(&ended));
    }
    if let Some(r) = sigterm {
        println!(
            "baton run: revoke -> child SIGTERM over {} revokes: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            r.samples, r.p50_ms, r.p99_ms, r.max_ms
        );
    }
    if !reports.is_empty() {
        println!("{}", scale::render(&reports));
    }
    if !watched.is_empty() {
        println!("{}", watchers::render(&watched));
    }
    if args.keep {
        println!("kept {}", dir.display());
    }
    Ok(())
}
