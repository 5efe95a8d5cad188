//! The `baton-node` command line (the binary's `main` calls [`main`]; the chaos harness's
//! `baton-node-chaos` binary calls it too).
//!
//! `baton-node` runs one baton node.
//!
//! With no flags: a single-node cluster on 127.0.0.1:7001 with `./baton-data`.
//! `baton-node dev --nodes 3`: a local 3-node cluster in one process, for trying baton.
//! Settings come from an optional TOML file (`--config`), then `BATON_*` env vars, then
//! flags, each overriding the one before; the result is validated as one.

use std::path::PathBuf;

use crate::config::NodeConfig;
use crate::limits::HEALTH_CHECK_TIMEOUT;
use anyhow::Context;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "baton-node",
    version,
    about = "A node of baton, the replicated store of ownership tokens",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:
  baton-node                            single-node cluster on 127.0.0.1:7001, data in ./baton-data
  baton-node dev --nodes 3              local 3-node cluster on 127.0.0.1:7001-7003, temporary data
  baton-node --node-id 2 --listen 0.0.0.0:7001 --advertise host2:7001 \\
      --data-dir /var/lib/baton --initial-cluster 1=host1:7001,2=host2:7001,3=host3:7001"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML config file (fields as in NodeConfig: node_id, listen, data_dir, ...).
    #[arg(long, env = "BATON_CONFIG")]
    config: Option<PathBuf>,
    /// This node's id (>= 1).
    #[arg(long, env = "BATON_NODE_ID")]
    node_id: Option<u64>,
    /// Take the node id from the host name's ordinal suffix plus one (`baton-0` is node 1,
    /// `baton-2` node 3), as a Kubernetes StatefulSet names its pods.
    #[arg(long, env = "BATON_NODE_ID_FROM_HOSTNAME", conflicts_with = "node_id")]
    node_id_from_hostname: bool,
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
    /// Recent events each node keeps for watches [default: 100000].
    #[arg(long, env = "BATON_WATCH_WINDOW_EVENTS")]
    watch_window_events: Option<usize>,
    /// HTTP admin port: /healthz, /readyz, /metrics (Prometheus); host:port, port 0 picks a
    /// free one (logged) [default: none].
    #[arg(long, env = "BATON_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Join a running cluster through these members (host:port,...) instead of starting a
    /// new one: the leader adds this node as a learner and, once caught up, as a voter.
    /// Needs --advertise. Only acts on a new data dir.
    #[arg(long, env = "BATON_JOIN", conflicts_with = "initial_cluster")]
    join: Option<String>,
    /// Connections accepted at once, clients and peers [default: 4096].
    #[arg(long, env = "BATON_CONNECTIONS_MAX")]
    connections_max: Option<usize>,
    /// Watch streams open at once from one client address [default: 256].
    #[arg(long, env = "BATON_WATCHES_PER_ADDRESS_MAX")]
    watches_per_address_max: Option<usize>,
    /// HTTP/2 streams (requests, watches) one connection may have open at once; a client's
    /// further requests wait [default: 1024].
    #[arg(long, env = "BATON_STREAMS_PER_CONNECTION_MAX")]
    streams_per_connection_max: Option<u32>,
    /// Writes per second one client id may make, in bursts of as many; 0: no limit
    /// [default: 10000].
    #[arg(long, env = "BATON_CLIENT_WRITES_PER_SECOND")]
    client_writes_per_second: Option<u32>,
    /// With auth on, writes per second one principal may make over all its client ids, in
    /// bursts of as many; 0: no limit [default: 50000].
    #[arg(long, env = "BATON_PRINCIPAL_WRITES_PER_SECOND")]
    principal_writes_per_second: Option<u32>,
    /// TLS: this node's certificate (PEM); with --tls-key and --tls-ca.
    #[arg(long, env = "BATON_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// TLS: this node's private key (PEM).
    #[arg(long, env = "BATON_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// TLS: the CA that signs nodes' and clients' certificates (PEM).
    #[arg(long, env = "BATON_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// TLS: clients are named by a certificate the CA signed (mTLS), its common name being
    /// the principal; required of every client, unless --auth-tokens lets a token stand in.
    #[arg(long, env = "BATON_TLS_CLIENT_AUTH")]
    tls_client_auth: bool,
    /// Peer TLS, when nodes have their own CA: this node's certificate toward other nodes
    /// (PEM), shown when it serves them and when it dials them; with --peer-tls-key and
    /// --peer-tls-ca. Without them nodes use the --tls-* files with each other.
    #[arg(long, env = "BATON_PEER_TLS_CERT")]
    peer_tls_cert: Option<PathBuf>,
    /// Peer TLS: this node's private key toward other nodes (PEM).
    #[arg(long, env = "BATON_PEER_TLS_KEY")]
    peer_tls_key: Option<PathBuf>,
    /// Peer TLS: the CA that signs every node's peer certificate (PEM). Only what it signed
    /// carries Raft traffic or acts as a node.
    #[arg(long, env = "BATON_PEER_TLS_CA")]
    peer_tls_ca: Option<PathBuf>,
    /// Bearer tokens: a file of `PRINCIPAL sha256:HEX` lines (`baton-node token` adds one),
    /// reloaded on SIGHUP (delete a line, send SIGHUP: that token stops working). Turns
    /// auth on: a request must show a listed token (or, with --tls-client-auth, a client
    /// certificate).
    #[arg(long, env = "BATON_AUTH_TOKENS")]
    auth_tokens: Option<PathBuf>,
    /// With auth on, serve requests that show neither a certificate nor a token as anonymous
    /// (not bound to a principal) instead of refusing them.
    #[arg(long, env = "BATON_ALLOW_ANONYMOUS")]
    allow_anonymous: bool,
    /// Write a refusal that changes nothing (a claim of a key another session holds, a
    /// renew, release or update with a dead token) to the log like any write, instead of
    /// answering it as leader from a linearizable read. Costs a quorum fsync per refusal;
    /// for comparison.
    #[arg(long, env = "BATON_REFUSALS_IN_LOG")]
    refusals_in_log: bool,
    /// A permissions policy (TOML, see `baton access --help`) this node enforces until the
    /// cluster has one: give every node the same file, then make it the cluster's with
    /// `baton access set FILE` (changes after that go through `baton access set` only).
    #[arg(long, env = "BATON_ACCESS_POLICY")]
    access_policy: Option<PathBuf>,
    /// Serve plaintext on a non-loopback address (refused otherwise).
    #[arg(long, env = "BATON_INSECURE")]
    insecure: bool,
    /// Threads of the node's async runtime, 1 to 64 [default: one per core]. Where several
    /// nodes share a host's cores (a test cluster on one machine), give each its share: fewer
    /// threads waking each other answered sooner with less CPU (docs/performance.md).
    #[arg(long, env = "BATON_WORKER_THREADS")]
    worker_threads: Option<usize>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Run a local cluster of several nodes in this process (loopback only); Ctrl-C stops it.
    Dev {
        /// How many nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        /// Directory for the nodes' data; a temporary one (removed on exit) if not given.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Node N listens on 127.0.0.1:(base-port + N - 1); 0 picks free ports.
        #[arg(long, default_value_t = 7001)]
        base_port: u16,
    },
    /// Seed a new node's data dir from a backup (`baton cluster backup FILE`): disaster
    /// recovery when a cluster's quorum is lost for good. Run it for every node of the new
    /// cluster with the same FILE and --initial-cluster, then start each node as usual.
    #[command(after_help = "Examples:
  baton-node restore baton.backup --data-dir /var/lib/baton --node-id 1 \\
      --initial-cluster 1=host1:7001,2=host2:7001,3=host3:7001
  baton-node --node-id 1 --data-dir /var/lib/baton --initial-cluster 1=host1:7001,...")]
    Restore {
        /// The backup file.
        file: PathBuf,
        /// The new node's data dir (must be empty or absent).
        #[arg(long)]
        data_dir: PathBuf,
        /// The new node's id.
        #[arg(long)]
        node_id: u64,
        /// The new cluster's voters: 1=host:port,2=host:port,3=host:port (a single-node
        /// cluster of this node at 127.0.0.1:7001 if not given).
        #[arg(long)]
        initial_cluster: Option<String>,
        /// The new cluster's name [default: the backup's].
        #[arg(long)]
        cluster_name: Option<String>,
        /// Start the revision (fencing tokens) this far above the backup's, above any the lost
        /// cluster may have granted after the backup. Give every node the same value.
        #[arg(long, default_value_t = crate::backup::RESTORE_REVISION_GAP_DEFAULT)]
        revision_gap: u64,
    },
    /// Make a CA and certificates for a test or dev cluster (they do not expire: use your
    /// own CA in production). Writes ca.pem, node-ID.pem, client-NAME.pem and their keys;
    /// with --peer-ca also peer-ca.pem and peer-ID.pem for TLS between nodes.
    #[command(after_help = "Examples:
  baton-node certs --dir certs --node 1=host1 --node 2=host2 --node 3=host3 --client agent-a
  baton-node --node-id 1 --listen 0.0.0.0:7001 --advertise host1:7001 --data-dir d1 \\
      --initial-cluster 1=host1:7001,2=host2:7001,3=host3:7001 \\
      --tls-cert certs/node-1.pem --tls-key certs/node-1-key.pem --tls-ca certs/ca.pem
  baton-node certs --dir certs --peer-ca --node 1=host1 ...   (then also, per node:
      --peer-tls-cert certs/peer-1.pem --peer-tls-key certs/peer-1-key.pem \\
      --peer-tls-ca certs/peer-ca.pem)")]
    Certs {
        /// Where to write the files.
        #[arg(long)]
        dir: PathBuf,
        /// A node and its host names, ID=HOST[,HOST...] (localhost and 127.0.0.1 are added).
        #[arg(long = "node", value_name = "ID=HOSTS")]
        nodes: Vec<String>,
        /// A client certificate's name (its principal).
        #[arg(long = "client", value_name = "NAME")]
        clients: Vec<String>,
        /// Give nodes a CA of their own for the TLS between them (peer-ca.pem, and
        /// peer-ID.pem per node), apart from the CA of clients.
        #[arg(long)]
        peer_ca: bool,
    },
    /// Make a bearer token for a principal: appends `PRINCIPAL sha256:HASH` to the tokens
    /// file (created readable by its owner only) and writes the token, once, to a new file
    /// readable by its owner only (--out) or to stdout. Give the tokens file to every node
    /// (--auth-tokens) and send them SIGHUP; give the token to the client (--auth-token-file
    /// or BATON_AUTH_TOKEN). To revoke it, delete its line and send SIGHUP again.
    #[command(after_help = "Examples:
  baton-node token --principal agent-a --file tokens --out agent-a.token
  pkill -HUP baton-node                        # nodes started with --auth-tokens tokens
  baton --auth-token-file agent-a.token claim tasks/x --holder agent-a")]
    Token {
        /// The principal the token stands for: holder name it may act as.
        #[arg(long)]
        principal: String,
        /// The tokens file to append to.
        #[arg(long)]
        file: PathBuf,
        /// Write the token to this file instead of stdout: created new (an existing file is
        /// refused, and nothing is added) with mode 0600 whatever the umask. A shell's
        /// `> FILE` makes a file everyone can read under the usual umask 022.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Ask a node's admin port whether it is up (`/healthz`) or ready (`/readyz`); exits 0
    /// when it answers 200, 1 otherwise. For container health checks: the image has no
    /// shell and no curl.
    #[command(after_help = "Examples:
  baton-node health                          # /healthz on BATON_ADMIN_LISTEN or 127.0.0.1:9000
  baton-node health --ready --admin 10.0.0.1:9000")]
    Health {
        /// The admin address, host:port (an unspecified IP such as 0.0.0.0 means this host).
        #[arg(long, env = "BATON_ADMIN_LISTEN", default_value = "127.0.0.1:9000")]
        admin: String,
        /// Ask `/readyz` (a member with a known leader, applied close behind) instead of
        /// `/healthz`.
        #[arg(long)]
        ready: bool,
    },
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
            log_format,
            watch_window_events,
            connections_max,
            watches_per_address_max,
            streams_per_connection_max,
            client_writes_per_second,
            principal_writes_per_second
        );
        if self.node_id_from_hostname {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .context("reading this host's name for --node-id-from-hostname")?;
            c.node_id = crate::config::node_id_from_hostname(host.trim())?;
        }
        if self.advertise.is_some() {
            c.advertise = self.advertise;
        }
        if self.admin_listen.is_some() {
            c.admin_listen = self.admin_listen;
        }
        if self.join.is_some() {
            c.join = self.join;
        }
        for (flag, field) in [
            (self.tls_cert, &mut c.tls_cert),
            (self.tls_key, &mut c.tls_key),
            (self.tls_ca, &mut c.tls_ca),
            (self.peer_tls_cert, &mut c.peer_tls_cert),
            (self.peer_tls_key, &mut c.peer_tls_key),
            (self.peer_tls_ca, &mut c.peer_tls_ca),
        ] {
            if flag.is_some() {
                *field = flag;
            }
        }
        c.tls_client_auth |= self.tls_client_auth;
        c.insecure |= self.insecure;
        if self.auth_tokens.is_some() {
            c.auth_tokens = self.auth_tokens;
        }
        c.allow_anonymous |= self.allow_anonymous;
        c.refusals_in_log |= self.refusals_in_log;
        if self.access_policy.is_some() {
            c.access_policy = self.access_policy;
        }
        Ok(c)
    }
}

/// What a node logs unless `RUST_LOG` says otherwise. openraft's `core::raft_core` warns
/// only of stale messages it drops ("A message will be ignored because vote changed", a
/// changed membership log id): routine traffic of every election, a dozen lines on a fresh
/// dev cluster, so it is held to errors; openraft's other warnings stay.
pub const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::core::raft_core=error,sled=warn";

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_LOG_FILTER.into());
    // Colours only for a person at a terminal, not in log files.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is called,
/// not when the future is first polled, so a signal that arrives while the node is still
/// starting is not lost (nor does it kill the process uncleanly).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).expect("installing the SIGINT handler");
    let mut terminate = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    }
}

/// Tells the person at the terminal how to reach the dev cluster (stdout; logs go to stderr).
fn announce_dev(cluster: &crate::dev::DevCluster) {
    use std::io::Write;
    let endpoints = cluster.endpoints.join(",");
    let text = format!(
        "baton dev cluster: {} nodes, data in {}\n\
         security:  OFF: plaintext, no authentication, loopback only (docs/security.md)\n\
         endpoints: {endpoints}\n\
         try:       baton --endpoints {endpoints} claim tasks/demo --ttl 30s\n\
         stop:      Ctrl-C\n",
        cluster.endpoints.len(),
        cluster.dir.display()
    );
    // A closed stdout (the reader went away) must not take the cluster down with it.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Runs `baton-node` with the process's arguments; exits 1 with a message on error.
pub fn main() {
    let args = Args::parse();
    let result = runtime(args.worker_threads).and_then(|runtime| runtime.block_on(run(args)));
    if let Err(e) = result {
        eprintln!("baton-node: error: {}", chain(&e));
        std::process::exit(1);
    }
}

/// The node's multi-threaded runtime: `worker_threads` threads (1 to `WORKER_THREADS_MAX`),
/// or tokio's default of one per core.
fn runtime(worker_threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = worker_threads {
        let max = crate::limits::WORKER_THREADS_MAX;
        if !(1..=max).contains(&threads) {
            anyhow::bail!("--worker-threads {threads}: must be 1 to {max}");
        }
        builder.worker_threads(threads);
    }
    Ok(builder.enable_all().build()?)
}

/// An error and its causes, joined by ": ", each said once: baton's error types name their
/// source in their own message as well as through `source()`, so a cause already said is
/// not repeated.
fn chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let said = cause.to_string();
        if text.is_empty() {
            text = said;
        } else if !text.contains(&said) {
            text = format!("{text}: {said}");
        }
    }
    text
}

async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(Command::Restore {
        file,
        data_dir,
        node_id,
        initial_cluster,
        cluster_name,
        revision_gap,
    }) = &args.command
    {
        let members = match initial_cluster {
            Some(text) => crate::config::parse_initial_cluster(text)?,
            None => std::collections::BTreeMap::from([(*node_id, "127.0.0.1:7001".to_owned())]),
        };
        let done = crate::backup::restore(
            file,
            data_dir,
            *node_id,
            cluster_name.as_deref(),
            &members,
            *revision_gap,
        )?;
        println!(
            "restored node {node_id} of cluster {:?} into {}: {} leases, {} keys, revision {} \
             of the backup (taken at unix ms {}), now {}; start it with the same \
             --initial-cluster",
            done.cluster_name,
            data_dir.display(),
            done.header.leases,
            done.header.keys,
            done.header.revision,
            done.header.taken_at_unix_ms,
            done.revision
        );
        return Ok(());
    }
    if let Some(Command::Certs {
        dir,
        nodes,
        clients,
        peer_ca,
    }) = &args.command
    {
        let mut parsed = Vec::new();
        for node in nodes {
            let (id, hosts) = node
                .split_once('=')
                .context(format!("--node {node:?} is not ID=HOST[,HOST...]"))?;
            let id: u64 = id
                .parse()
                .ok()
                .filter(|id| *id > 0)
                .context(format!("--node {node:?}: the id must be a number from 1"))?;
            parsed.push((id, hosts.split(',').map(str::to_owned).collect()));
        }
        let written = crate::tls::generate(dir, &parsed, clients, *peer_ca)?;
        for path in written {
            println!("{}", path.display());
        }
        return Ok(());
    }
    if let Some(Command::Token {
        principal,
        file,
        out,
    }) = &args.command
    {
        match out {
            Some(out) => {
                crate::tokens::add_to(file, principal, out)?;
                eprintln!(
                    "added {principal:?} to {}: send SIGHUP to nodes that read it; the token is \
                     in {} (mode 0600) and stored nowhere else",
                    file.display(),
                    out.display()
                );
            }
            None => {
                let token = crate::tokens::add(file, principal)?;
                println!("{token}");
                eprintln!(
                    "added {principal:?} to {}: send SIGHUP to nodes that read it; the token \
                     above is not stored anywhere",
                    file.display()
                );
            }
        }
        return Ok(());
    }
    if let Some(Command::Health { admin, ready }) = &args.command {
        let path = if *ready { "/readyz" } else { "/healthz" };
        let answer =
            tokio::time::timeout(HEALTH_CHECK_TIMEOUT, crate::admin::http_get(admin, path))
                .await
                .with_context(|| {
                    format!("{admin}{path} did not answer within {HEALTH_CHECK_TIMEOUT:?}")
                })??;
        print!("{}", answer.body);
        if answer.status != 200 {
            anyhow::bail!("{admin}{path} answered {}", answer.status);
        }
        return Ok(());
    }
    if let Some(Command::Dev {
        nodes,
        dir,
        base_port,
    }) = args.command
    {
        init_tracing(false);
        let opts = crate::dev::DevOptions {
            nodes,
            dir,
            base_port,
        };
        crate::dev::run(opts, announce_dev, shutdown_signal()).await?;
        return Ok(());
    }
    let cfg = args.into_config()?.validate()?;
    init_tracing(cfg.json_logs);
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding {}", cfg.listen))?;
    crate::node::run_announcing(cfg, listener, shutdown_signal(), announce_node).await?;
    Ok(())
}

/// The lines a person starting a node needs (stdout; logs go to stderr): where it listens,
/// where its data is, which cluster, how secured, how to reach it.
fn node_banner(cfg: &crate::config::ValidConfig) -> String {
    let security = match (&cfg.tls, cfg.auth_tokens.is_some() || cfg.client_certs) {
        (Some(_), true) => "TLS, clients authenticated",
        (Some(_), false) => "TLS, no client authentication",
        (None, true) => "plaintext with bearer tokens (docs/security.md)",
        (None, false) => "OFF: plaintext, no authentication (docs/security.md)",
    };
    let members = cfg
        .initial_members
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect::<Vec<_>>()
        .join(",");
    let admin = cfg
        .admin_listen
        .map(|a| format!("http://{a} (/healthz, /readyz, /metrics)"))
        .unwrap_or_else(|| "off".to_owned());
    let tls_hint = if cfg.tls.is_some() {
        " --tls-ca CA.pem"
    } else {
        ""
    };
    format!(
        "baton node {}: listening on {}, data in {}\n\
         cluster:   {:?}, members {members}\n\
         security:  {security}\n\
         admin:     {admin}\n\
         try:       baton --endpoints {}{tls_hint} cluster status\n\
         stop:      Ctrl-C or SIGTERM\n",
        cfg.node_id,
        cfg.listen,
        cfg.data_dir.display(),
        cfg.cluster_name,
        cfg.advertise,
    )
}

fn announce_node(cfg: &crate::config::ValidConfig) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(node_banner(cfg).as_bytes())
        .and_then(|()| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_says_each_cause_once() {
        let missing = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        // A typed error that names its source in its message: the source is not repeated.
        let typed = crate::backup::RestoreError::Read {
            file: "/b".into(),
            source: missing(),
        };
        let error = anyhow::Error::new(typed).context("restoring node 1");
        assert_eq!(
            chain(&error),
            "restoring node 1: reading the backup /b: no such file"
        );
        // A context over a plain cause: both are said.
        let error = anyhow::Error::new(missing()).context("binding 127.0.0.1:1");
        assert_eq!(chain(&error), "binding 127.0.0.1:1: no such file");
    }

    #[test]
    fn a_plain_node_says_where_it_listens_where_its_data_is_and_how_it_is_secured() {
        let cfg = crate::config::NodeConfig::default().validate().unwrap();
        let banner = node_banner(&cfg);
        let first = banner.lines().next().unwrap();
        assert!(
            first.starts_with(&format!(
                "baton node {}: listening on {}, data in ",
                cfg.node_id, cfg.listen
            )),
            "{banner}"
        );
        assert!(
            first.ends_with(&cfg.data_dir.display().to_string()),
            "{banner}"
        );
        assert!(
            banner.contains("security:  OFF: plaintext, no authentication"),
            "{banner}"
        );
        assert!(
            banner.contains(&format!(
                "try:       baton --endpoints {} cluster status",
                cfg.advertise
            )),
            "{banner}"
        );
    }

    #[test]
    fn routine_election_traffic_is_not_logged_as_a_warning_but_real_warnings_are() {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER))
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            use tracing::Level;
            assert!(!tracing::enabled!(target: "openraft::core::raft_core", Level::WARN));
            assert!(tracing::enabled!(target: "openraft::core::raft_core", Level::ERROR));
            assert!(tracing::enabled!(target: "openraft::replication", Level::WARN));
            assert!(!tracing::enabled!(target: "openraft::replication", Level::INFO));
            assert!(tracing::enabled!(target: "baton_node::node", Level::INFO));
        });
    }
}
