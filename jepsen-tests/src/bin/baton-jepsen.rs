//! `baton-jepsen`: runs baton's chaos scenarios (as root: it makes network namespaces).
//!
//! A failing run prints its seed and the exact command that reruns it; every run leaves a
//! folder with the history, node logs, a summary and an HTML report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use jepsen_tests::run::{self, Options, SCENARIOS};
use jepsen_tests::suite;

#[derive(Debug, Parser)]
#[command(
    name = "baton-jepsen",
    about = "Chaos tests for baton: real nodes in network namespaces, faults, checkers",
    after_help = "Examples (as root):
  baton-jepsen run --scenario partition-kill --seed 7
  baton-jepsen suite ci
  baton-jepsen suite long --minutes 30 --nodes 5"
)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
    /// Where run folders go.
    #[arg(long, global = true, default_value = "target/jepsen")]
    out: PathBuf,
    /// The chaos-enabled node binary [default: baton-node-chaos next to this program].
    #[arg(long, global = true)]
    node_bin: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One scenario with one seed.
    Run {
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS))]
        scenario: String,
        /// Seed [default: from the clock; printed].
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// Length of the fault phase, seconds.
        #[arg(long, default_value_t = 40)]
        duration_s: u64,
        /// Lease TTL the workers ask for, ms.
        #[arg(long, default_value_t = 2000)]
        ttl_ms: u64,
    },
    /// A named suite: `ci` (a few minutes) or `long` (many seeds, 5 nodes, the fault matrix).
    Suite {
        #[arg(value_parser = ["ci", "long"])]
        name: String,
        /// First seed; later runs add 1 [default: from the clock].
        #[arg(long)]
        seed: Option<u64>,
        /// Long suite: keep starting runs for this long.
        #[arg(long, default_value_t = 30)]
        minutes: u64,
        /// Long suite: nodes per cluster.
        #[arg(long, default_value_t = 5)]
        nodes: usize,
    },
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000)
        .unwrap_or(1)
}

fn default_node_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("baton-node-chaos")))
        .unwrap_or_else(|| PathBuf::from("baton-node-chaos"))
}

#[tokio::main]
async fn main() {
    tracing_subscriber_init();
    let args = Args::parse();
    let node_bin = args.node_bin.unwrap_or_else(default_node_bin);
    let work = async {
        match args.command {
            Cmd::Run {
                scenario,
                seed,
                nodes,
                duration_s,
                ttl_ms,
            } => {
                let opts = Options {
                    scenario,
                    seed: seed.unwrap_or_else(clock_seed),
                    nodes,
                    duration: Duration::from_secs(duration_s),
                    ttl: Duration::from_millis(ttl_ms),
                    out: args.out.clone(),
                    node_bin: node_bin.clone(),
                    wgl_budget: Duration::from_secs(20),
                };
                let outcome = run::run(&opts).await?;
                println!("{}", outcome.text());
                Ok::<bool, anyhow::Error>(outcome.ok())
            }
            Cmd::Suite {
                name,
                seed,
                minutes,
                nodes,
            } => {
                let seed = seed.unwrap_or_else(clock_seed);
                let start = Instant::now();
                let outcomes = if name == "ci" {
                    suite::run_all(suite::ci(seed), &args.out, &node_bin).await?
                } else {
                    suite::long(
                        seed,
                        nodes,
                        Duration::from_secs(minutes * 60),
                        &args.out,
                        &node_bin,
                    )
                    .await?
                };
                println!("{}", suite::summarize(&outcomes, start.elapsed()));
                Ok(outcomes.iter().all(|o| o.ok()))
            }
        }
    };
    // Ctrl-C or SIGTERM drops the run: namespaces, links and nodes are removed by their Drop.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    let code = tokio::select! {
        r = work => match r {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("baton-jepsen: error: {e:#}");
                2
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("baton-jepsen: interrupted; cleaned up");
            130
        }
        _ = terminate.recv() => {
            eprintln!("baton-jepsen: terminated; cleaned up");
            143
        }
    };
    std::process::exit(code);
}

fn tracing_subscriber_init() {
    // Progress to stderr; quiet unless RUST_LOG says otherwise.
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "jepsen_tests=info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}
