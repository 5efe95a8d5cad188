//! `baton-compare`: the `baton bench` workload against a fresh 3-node baton cluster and a
//! fresh 3-node etcd 3.4 cluster on loopback, interleaved run by run, as one table of
//! medians with the ratio baton/etcd per cell, each system's CPU seconds, and the floor
//! (serial fsync + two loopback round trips) under baton's single-client claim latency.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use baton_bench::cli::{node_bin, node_threads, run_main};
use baton_bench::cluster::{cpu_seconds, find_etcd, BatonCluster, EtcdCluster};
use baton_bench::floor;
use baton_bench::metrics::{FlushBreakdown, FlushCounters, WriteBreakdown};
use baton_bench::table::{median, render, Cell};
use baton_workload::{BenchConfig, BenchReport};
use clap::Parser;
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    name = "baton-compare",
    about = "Run the bench workload against fresh local 3-node baton and etcd clusters and compare",
    after_help = "Example:
  cargo build --release -p baton-node -p baton-bench
  target/release/baton-compare --clients 1,16 --keys 1000,4 --runs 3 --duration 3s"
)]
struct Args {
    /// The baton-node binary [default: baton-node next to this program].
    #[arg(long)]
    node_bin: Option<PathBuf>,
    /// The etcd binary [default: etcd on PATH, or BATON_BENCH_ETCD].
    #[arg(long)]
    etcd_bin: Option<PathBuf>,
    /// Runs per system per cell (interleaved: baton, etcd, baton, etcd, ...).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Measured duration of each run.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Warm-up before each run's measured part.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Claimant counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
    clients: Vec<usize>,
    /// Key counts, comma-separated (1000: low contention, 4: high).
    #[arg(long, value_delimiter = ',', default_value = "1000,4")]
    keys: Vec<usize>,
    /// TTL of every claim.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Directory under which both clusters' data (and the fsync probe) go; a new temporary
    /// directory is made in it [default: the system temp dir].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How long to measure serial fsyncs.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    fsync_probe: Duration,
    /// Keep the data directory and logs (printed at the end).
    #[arg(long)]
    keep: bool,
    /// Runtime threads of each baton node (`baton-node --worker-threads`); 0 leaves the
    /// node's default of one per core [default: this machine's cores / 3, at least 1: the
    /// three nodes share the cores, each gets its share]. etcd runs with its own defaults
    /// (GOMAXPROCS = cores), with which it did better here than with GOMAXPROCS=1. A
    /// --node-bin older than the flag needs 0.
    #[arg(long)]
    node_threads: Option<usize>,
}

#[derive(Debug, Serialize)]
struct Run {
    system: &'static str,
    cpu_s: f64,
    report: BenchReport,
}

#[derive(Debug, Serialize)]
struct Summary {
    runs_per_cell: usize,
    /// Each baton node's `--worker-threads` (0: the node's default, one per core).
    node_threads: usize,
    duration_s: f64,
    warmup_s: f64,
    ttl_ms: u128,
    fsync: floor::Fsync,
    loopback_rtt: floor::RoundTrip,
    baton_single_client_claim_p50_us: Option<f64>,
    floor_us: u64,
    baton_claim_over_floor: Option<f64>,
    /// Where that claim's time goes; `None` without a 1-client run or if the nodes' metrics
    /// could not be read.
    baton_single_client_breakdown: Option<WriteBreakdown>,
    baton_cpu_s: f64,
    etcd_cpu_s: f64,
    baton_cycles: u64,
    etcd_cycles: u64,
    cells: Vec<Cell>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let etcd_bin = match args.etcd_bin.clone().or_else(find_etcd) {
        Some(bin) => bin,
        None => match install_etcd() {
            Some(bin) => bin,
            None => {
                eprintln!(
                    "baton-compare: etcd is not on PATH. Install etcd 3.4 (Debian/Ubuntu: \
                     `sudo apt-get install -y etcd-server`) or pass --etcd-bin."
                );
                return ExitCode::from(2);
            }
        },
    };
    run_main("baton-compare", || compare(args, etcd_bin))
}

/// As root, installs Debian's etcd-server; otherwise nothing.
fn install_etcd() -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    eprintln!("baton-compare: etcd not found; running `apt-get install -y etcd-server`");
    let status = std::process::Command::new("apt-get")
        .args(["install", "-y", "etcd-server"])
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    find_etcd()
}

async fn compare(args: Args, etcd_bin: PathBuf) -> anyhow::Result<()> {
    if args.runs == 0 || args.clients.is_empty() || args.keys.is_empty() {
        bail!("--runs, --clients and --keys must not be empty or zero");
    }
    let node_bin = node_bin(args.node_bin.as_deref())?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("baton-compare-")
        .tempdir_in(&base)
        .with_context(|| format!("making a directory in {}", base.display()))?;
    eprintln!("data and logs under {}", dir.path().display());

    // The floor first, with nothing else running.
    let fsync = floor::fsync(dir.path(), args.fsync_probe).context("fsync probe")?;
    let rtt = floor::round_trip(5_000).context("loopback round-trip probe")?;
    eprintln!(
        "floor: fsync p50 {} us ({}/s serial), loopback rtt p50 {} us",
        fsync.p50_us, fsync.per_s, rtt.p50_us
    );

    let mut etcd =
        EtcdCluster::start_healthy(&etcd_bin, 3, dir.path(), Duration::from_secs(30)).await?;
    let (node_threads, threads_arg) = node_threads(args.node_threads);
    let mut baton = BatonCluster::start_with(&node_bin, 3, dir.path(), &threads_arg, "warn")?;
    baton.wait_healthy(Duration::from_secs(30)).await?;
    eprintln!(
        "etcd {:?} (leader first) and baton {:?} are up",
        etcd.endpoints, baton.endpoints
    );

    let admin = baton.admin()?;
    let run_id = format!("{:08x}", rand::random::<u32>());
    // The single-client claim is measured in the 1-client, low-contention cell (the most keys
    // given); in its baton runs the nodes' flush counters are read too.
    let most_keys = args.keys.iter().copied().max().unwrap_or(0);
    let mut single_flushes: Vec<FlushBreakdown> = Vec::new();
    let mut single_cpu_per_op_us: Vec<f64> = Vec::new();
    let mut runs: Vec<(usize, usize, Run)> = Vec::new();
    let mut cells = Vec::new();
    for &clients in &args.clients {
        for &keys in &args.keys {
            let (mut baton_reports, mut etcd_reports) = (Vec::new(), Vec::new());
            for n in 0..args.runs {
                for system in ["baton", "etcd"] {
                    let (endpoints, pids) = match system {
                        "baton" => (baton.endpoints.clone(), baton.procs.pids()),
                        _ => (etcd.endpoints.clone(), etcd.procs.pids()),
                    };
                    let config = BenchConfig {
                        endpoints,
                        clients,
                        keys,
                        duration: args.duration,
                        warmup: args.warmup,
                        ttl: args.ttl,
                        key_prefix: format!("cmp/{run_id}/{system}/c{clients}k{keys}r{n}/"),
                        ..BenchConfig::default()
                    };
                    let single = system == "baton" && clients == 1 && keys == most_keys;
                    let flush_before = single.then(|| scrape_all(&admin));
                    let before = cpu_seconds(&pids);
                    let report = match system {
                        "baton" => baton_workload::run(config).await?,
                        _ => baton_bench::etcd::run(config).await?,
                    };
                    let cpu_s = cpu_seconds(&pids) - before;
                    if let Some(Some(flush_before)) = flush_before {
                        let flush = scrape_all(&admin)
                            .and_then(|after| FlushBreakdown::between(&flush_before, &after));
                        let l = &report.latency_us;
                        let ops = l.claim.count + l.renew.count + l.release.count;
                        if let (Some(flush), true) = (flush, ops > 0) {
                            single_flushes.push(flush);
                            // CPU over the whole run (warm-up included) per measured op.
                            let run_s = (args.warmup + args.duration).as_secs_f64();
                            let measured_s = args.duration.as_secs_f64();
                            single_cpu_per_op_us
                                .push(cpu_s * measured_s / run_s / ops as f64 * 1e6);
                        }
                    }
                    eprintln!(
                        "{system:>5} clients {clients:>3} keys {keys:>4} run {}: {:>8.1} cycles/s, \
                         claim p50 {:.2} ms p99 {:.2} ms, win {:.2}, errors {}, cpu {:.2} s{}",
                        n + 1,
                        report.cycles_per_s,
                        report.latency_us.claim.p50 as f64 / 1000.0,
                        report.latency_us.claim.p99 as f64 / 1000.0,
                        report.win_rate,
                        report.errors.total(),
                        cpu_s,
                        report
                            .last_error
                            .as_deref()
                            .map(|e| format!(" (last error: {e})"))
                            .unwrap_or_default()
                    );
                    match system {
                        "baton" => baton_reports.push(report.clone()),
                        _ => etcd_reports.push(report.clone()),
                    }
                    runs.push((
                        clients,
                        keys,
                        Run {
                            system,
                            cpu_s,
                            report,
                        },
                    ));
                }
                baton.procs.check_running("baton-node", &baton.logs)?;
                etcd.procs.check_running("etcd", &etcd.logs)?;
            }
            cells.push(Cell::new(clients, keys, &baton_reports, &etcd_reports));
        }
    }

    let total = |system: &str| -> (f64, u64) {
        runs.iter()
            .filter(|(_, _, run)| run.system == system)
            .fold((0.0, 0), |(cpu, cycles), (_, _, run)| {
                (cpu + run.cpu_s, cycles + run.report.cycles)
            })
    };
    let (baton_cpu_s, baton_cycles) = total("baton");
    let (etcd_cpu_s, etcd_cycles) = total("etcd");
    // The single-client claim p50: the median over the runs of the 1-client, low-contention
    // cell.
    let single: Vec<f64> = runs
        .iter()
        .filter(|(c, k, run)| *c == 1 && *k == most_keys && run.system == "baton")
        .map(|(_, _, run)| run.report.latency_us.claim.p50 as f64)
        .collect();
    let single_p50 = median(&single);
    let floor_us = floor::floor_us(&fsync, &rtt);
    let over_floor = single_p50.and_then(|p50| floor::floor_ratio(p50, &fsync, &rtt));
    let median_of =
        |f: fn(&FlushBreakdown) -> f64| median(&single_flushes.iter().map(f).collect::<Vec<_>>());
    let breakdown = match (
        single_p50,
        median_of(|f| f.flush_mean_us),
        median_of(|f| f.fsync_mean_us),
        median(&single_cpu_per_op_us),
    ) {
        (Some(p50), Some(flush_mean_us), Some(fsync_mean_us), Some(cpu)) => {
            Some(WriteBreakdown::new(
                p50,
                rtt.p50_us as f64,
                FlushBreakdown {
                    flushes: single_flushes.iter().map(|f| f.flushes).sum(),
                    flush_mean_us,
                    fsync_mean_us,
                },
                cpu,
            ))
        }
        _ => None,
    };

    println!(
        "baton vs etcd {}: medians of {} runs each ({} s measured after {} s warm-up, TTL {} s), \
         3 nodes each on loopback, fsync on, data in {}; each baton node runs {}, etcd its \
         defaults",
        etcd_version(&etcd_bin),
        args.runs,
        args.duration.as_secs_f64(),
        args.warmup.as_secs_f64(),
        args.ttl.as_secs_f64(),
        base.display(),
        match node_threads {
            0 => "one runtime thread per core".to_owned(),
            1 => "1 runtime thread".to_owned(),
            n => format!("{n} runtime threads"),
        }
    );
    println!(
        "c/s = full cycles (claim, renew, release) per second; ratio = baton/etcd (c/s: higher \
         is better for baton; latency: lower is better for baton)"
    );
    print!("{}", render(&cells));
    let per_k = |cpu: f64, cycles: u64| {
        if cycles == 0 {
            "-".to_owned()
        } else {
            format!("{:.3}", cpu / cycles as f64 * 1000.0)
        }
    };
    println!(
        "CPU seconds during their runs (3 processes each): baton {:.2} s ({} s per 1000 cycles), \
         etcd {:.2} s ({} s per 1000 cycles)",
        baton_cpu_s,
        per_k(baton_cpu_s, baton_cycles),
        etcd_cpu_s,
        per_k(etcd_cpu_s, etcd_cycles)
    );
    println!(
        "floor: serial fsync (4 KiB + fdatasync) p50 {} us ({:.0}/s), loopback TCP rtt p50 {} us; \
         baton 1-client claim p50 {} us = {} x the floor (fsync + {} round trips = {} us)",
        fsync.p50_us,
        fsync.per_s,
        rtt.p50_us,
        single_p50.map_or("-".to_owned(), |v| format!("{v:.0}")),
        over_floor.map_or("-".to_owned(), |v| format!("{v:.2}")),
        floor::ROUND_TRIPS_PER_WRITE,
        floor_us
    );
    if let Some(breakdown) = &breakdown {
        println!("{}", breakdown.render());
    }
    let summary = Summary {
        runs_per_cell: args.runs,
        node_threads,
        duration_s: args.duration.as_secs_f64(),
        warmup_s: args.warmup.as_secs_f64(),
        ttl_ms: args.ttl.as_millis(),
        fsync,
        loopback_rtt: rtt,
        baton_single_client_claim_p50_us: single_p50,
        floor_us,
        baton_claim_over_floor: over_floor,
        baton_single_client_breakdown: breakdown,
        baton_cpu_s,
        etcd_cpu_s,
        baton_cycles,
        etcd_cycles,
        cells,
    };
    println!("{}", serde_json::to_string(&summary)?);

    etcd.procs.stop();
    baton.procs.stop();
    if args.keep {
        eprintln!("kept {}", dir.keep().display());
    }
    Ok(())
}

/// Every node's flush counters, or `None` (with a note) if one could not be read: the
/// breakdown is then left out, the run's own figures stand.
fn scrape_all(admin: &[String]) -> Option<Vec<FlushCounters>> {
    admin
        .iter()
        .map(|addr| FlushCounters::scrape(addr))
        .collect::<anyhow::Result<Vec<_>>>()
        .map_err(|e| eprintln!("baton-compare: no flush breakdown: {e:#}"))
        .ok()
}

fn etcd_version(bin: &std::path::Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(|line| line.trim_start_matches("etcd Version: ").to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}
