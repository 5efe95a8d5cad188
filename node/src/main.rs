//! `baton-node`: runs one baton node.
//!
//! With no flags: a single-node cluster on 127.0.0.1:7001 with `./baton-data`.
//! Settings come from an optional TOML file (`--config`), then `BATON_*` env vars, then
//! flags, each overriding the one before; the result is validated as one.

use std::path::PathBuf;

use anyhow::Context;
use baton_node::config::NodeConfig;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-node",
    version,
    about = "A node of baton, the replicated store of ownership tokens"
)]
struct Args {
    /// TOML config file (fields as in NodeConfig: node_id, listen, data_dir, ...).
    #[arg(long, env = "BATON_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id (>= 1).
    #[arg(long, env = "BATON_NODE_ID")]
    node_id: Option<u64>,
    /// gRPC listen address, ip:port [default: 127.0.0.1:7001].
    #[arg(long, env = "BATON_LISTEN")]
    listen: Option<String>,
    /// Address peers and clients use for this node [default: from --initial-cluster or --listen].
    #[arg(long, env = "BATON_ADVERTISE")]
    advertise: Option<String>,
    /// Data directory [default: ./baton-data].
    #[arg(long, env = "BATON_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Cluster name; data dirs and Raft traffic of another cluster are refused [default: baton].
    #[arg(long, env = "BATON_CLUSTER_NAME")]
    cluster_name: Option<String>,
    /// Initial voters of a new cluster: 1=host:port,2=host:port,3=host:port.
    #[arg(long, env = "BATON_INITIAL_CLUSTER")]
    initial_cluster: Option<String>,
    #[arg(long, env = "BATON_HEARTBEAT_MS")]
    heartbeat_ms: Option<u64>,
    #[arg(long, env = "BATON_ELECTION_TIMEOUT_MIN_MS")]
    election_timeout_min_ms: Option<u64>,
    #[arg(long, env = "BATON_ELECTION_TIMEOUT_MAX_MS")]
    election_timeout_max_ms: Option<u64>,
    /// Shortest lease clients may ask for (>= 2 x election timeout max).
    #[arg(long, env = "BATON_TTL_MS_MIN")]
    ttl_ms_min: Option<u64>,
    /// Longest lease clients may ask for (<= 1 hour).
    #[arg(long, env = "BATON_TTL_MS_MAX")]
    ttl_ms_max: Option<u64>,
    #[arg(long, env = "BATON_EXPIRY_TICK_MS")]
    expiry_tick_ms: Option<u64>,
    #[arg(long, env = "BATON_SNAPSHOT_LOGS")]
    snapshot_logs: Option<u64>,
    #[arg(long, env = "BATON_WRITE_TIMEOUT_MS")]
    write_timeout_ms: Option<u64>,
    /// text or json.
    #[arg(long, env = "BATON_LOG_FORMAT")]
    log_format: Option<String>,
}

impl Args {
    fn into_config(self) -> anyhow::Result<NodeConfig> {
        let mut c = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                NodeConfig::from_toml(&text)?
            }
            None => NodeConfig::default(),
        };
        macro_rules! overlay {
            ($($field:ident),*) => { $( if let Some(v) = self.$field { c.$field = v; } )* };
        }
        overlay!(
            node_id,
            listen,
            data_dir,
            cluster_name,
            initial_cluster,
            heartbeat_ms,
            election_timeout_min_ms,
            election_timeout_max_ms,
            ttl_ms_min,
            ttl_ms_max,
            expiry_tick_ms,
            snapshot_logs,
            write_timeout_ms,
            log_format
        );
        if self.advertise.is_some() {
            c.advertise = self.advertise;
        }
        Ok(c)
    }
}

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,openraft=warn,sled=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("baton-node: error: {e:#}");
        std::process::exit(1);
    }
}

async fn run() -> anyhow::Result<()> {
    let cfg = Args::parse().into_config()?.validate()?;
    init_tracing(cfg.json_logs);
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    baton_node::node::run(cfg, listener, shutdown_signal()).await?;
    Ok(())
}
