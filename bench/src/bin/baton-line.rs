//! `baton-line`: C clients take turns on K keys, waiting in line, against a fresh 3-node
//! baton cluster (its own line) and a fresh 3-node etcd 3.4 cluster (`concurrency.Mutex`'s
//! recipe) on loopback, interleaved run by run: cycles/s, hand-on latency (a release to the
//! next holder knowing it holds the key), time to acquire, and win rates, as medians over
//! the runs with the ratio baton/etcd.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use baton_bench::cli::{node_bin, node_threads, run_main};
use baton_bench::cluster::{cpu_seconds, find_etcd, BatonCluster, EtcdCluster};
use baton_bench::lines::{self, LineConfig, LineReport};
use baton_bench::table::median;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-line",
    about = "Clients take turns on a few keys waiting in line: baton's line vs etcd's concurrency.Mutex",
    after_help = "Example:
  cargo build --release -p baton-node -p baton-bench
  target/release/baton-line --clients 64 --keys 4 --runs 3 --duration 10s
  target/release/baton-line --clients 64 --keys 1 --permits 8 --runs 3 --duration 10s"
)]
struct Args {
    /// The baton-node binary [default: baton-node next to this program].
    #[arg(long)]
    node_bin: Option<PathBuf>,
    /// The etcd binary [default: etcd on PATH, or BATON_BENCH_ETCD].
    #[arg(long)]
    etcd_bin: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    clients: usize,
    #[arg(long, default_value_t = 4)]
    keys: usize,
    /// Runs per system (interleaved: baton, etcd, baton, ...).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// How long each holder keeps its key.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    hold: Duration,
    /// Holders of a key at once: 1, a lock; N > 1, one of N permits (baton: `claim
    /// --permits N` in the key's line; etcd: the Mutex recipe holding once fewer than N keys
    /// were created before one's own, re-counted at every delete under the prefix).
    #[arg(long, default_value_t = 1)]
    permits: u32,
    /// Where both clusters' data go [default: the system temp dir].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Runtime threads of each baton node (`baton-node --worker-threads`); 0 leaves the
    /// node's default of one per core [default: this machine's cores / 3, at least 1: the
    /// three nodes share the cores, each gets its share, as in `baton-compare`]. etcd runs
    /// with its own defaults (GOMAXPROCS = cores).
    #[arg(long)]
    node_threads: Option<usize>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some(etcd_bin) = args.etcd_bin.clone().or_else(find_etcd) else {
        eprintln!(
            "baton-line: etcd is not on PATH: install etcd 3.4 (etcd-server) or pass --etcd-bin"
        );
        return ExitCode::from(2);
    };
    run_main("baton-line", || line(args, etcd_bin))
}

async fn line(args: Args, etcd_bin: PathBuf) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs > 0, "--runs must be 1 or more");
    let node_bin = node_bin(args.node_bin.as_deref())?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("baton-line-")
        .tempdir_in(&base)
        .with_context(|| format!("making a directory in {}", base.display()))?;
    let etcd =
        EtcdCluster::start_healthy(&etcd_bin, 3, dir.path(), Duration::from_secs(30)).await?;
    let (node_threads, threads) = node_threads(args.node_threads);
    let mut baton = BatonCluster::start_with(&node_bin, 3, dir.path(), &threads, "warn")?;
    baton.wait_healthy(Duration::from_secs(30)).await?;
    let mut reports: Vec<LineReport> = Vec::new();
    for run in 0..args.runs {
        for system in ["baton", "etcd"] {
            let cfg = LineConfig {
                clients: args.clients,
                keys: args.keys,
                warmup: args.warmup,
                duration: args.duration,
                hold: args.hold,
                prefix: format!("line/r{run}/"),
                permits: args.permits,
            };
            let pids = match system {
                "baton" => baton.procs.pids(),
                _ => etcd.procs.pids(),
            };
            let cpu_before = cpu_seconds(&pids);
            let mut report = match system {
                "baton" => lines::run_baton(&baton.endpoints, &cfg).await?,
                _ => lines::run_etcd(&etcd.endpoints, &cfg).await?,
            };
            report.server_cpu_s = cpu_seconds(&pids) - cpu_before;
            eprintln!(
                "{system:>5} run {}: {:>8.1} cycles/s, hand-on p50 {:.2} ms p99 {:.2} ms ({} \
                 measured), release p50 {:.2} ms p99 {:.2} ms, acquire p50 {:.1} ms p99 {:.1} \
                 ms, won {}/{}, servers' CPU {:.1} s, errors {}{}",
                run + 1,
                report.cycles_per_s,
                report.hand_on_p50_ms,
                report.hand_on_p99_ms,
                report.hand_ons,
                report.release_p50_ms,
                report.release_p99_ms,
                report.acquire_p50_ms,
                report.acquire_p99_ms,
                report.granted,
                report.attempts,
                report.server_cpu_s,
                report.errors,
                report
                    .last_error
                    .as_deref()
                    .map(|e| format!(" (last: {e})"))
                    .unwrap_or_default()
            );
            reports.push(report);
        }
    }
    let of = |system: &str, f: &dyn Fn(&LineReport) -> f64| -> f64 {
        median(
            &reports
                .iter()
                .filter(|r| r.system == system)
                .map(f)
                .collect::<Vec<_>>(),
        )
        .unwrap_or(0.0)
    };
    println!(
        "{} clients x {} keys of {} permits, hold {:?}, {} runs of {:?}, baton nodes' worker \
         threads {}: medians",
        args.clients, args.keys, args.permits, args.hold, args.runs, args.duration, node_threads
    );
    println!("{:<18} {:>10} {:>10} {:>8}", "", "baton", "etcd", "ratio");
    type Measure<'a> = (&'a str, &'a dyn Fn(&LineReport) -> f64);
    let rows: [Measure; 10] = [
        ("cycles/s", &|r| r.cycles_per_s),
        ("hand-on p50 ms", &|r| r.hand_on_p50_ms),
        ("hand-on p99 ms", &|r| r.hand_on_p99_ms),
        ("release p50 ms", &|r| r.release_p50_ms),
        ("release p99 ms", &|r| r.release_p99_ms),
        ("hand-on/release", &|r| {
            r.hand_on_p50_ms / r.release_p50_ms.max(1e-9)
        }),
        ("acquire p50 ms", &|r| r.acquire_p50_ms),
        ("acquire p99 ms", &|r| r.acquire_p99_ms),
        ("win rate", &|r| r.win_rate),
        ("servers' CPU s", &|r| r.server_cpu_s),
    ];
    for (name, f) in rows {
        let (b, e) = (of("baton", f), of("etcd", f));
        let ratio = if e > 0.0 { b / e } else { 0.0 };
        println!("{name:<18} {b:>10.2} {e:>10.2} {ratio:>8.2}");
    }
    println!("{}", serde_json::to_string(&reports)?);
    Ok(())
}
