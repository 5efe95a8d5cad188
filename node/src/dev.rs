//! `baton-node dev`: a local cluster of several nodes in one process, for trying baton and
//! for agents' local development. Each node is a full node (own listener, own data dir,
//! Raft over real loopback sockets); only the process is shared.

use std::future::Future;
use std::path::PathBuf;

use tokio::net::TcpListener;

use crate::config::NodeConfig;
use crate::limits::DEV_NODES_MAX;
use crate::node::{self, NodeError};

/// What `dev` needs to know.
#[derive(Debug, Clone)]
pub struct DevOptions {
    pub nodes: u64,
    /// Where the nodes' data dirs go (`node1`, `node2`, ...). `None`: a temporary directory
    /// removed on exit.
    pub dir: Option<PathBuf>,
    /// Node N listens on `base_port + N - 1`; 0 lets the OS pick free ports.
    pub base_port: u16,
}

/// Why the dev cluster could not run.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("--nodes must be 1 to {DEV_NODES_MAX}, not {0}")]
    Nodes(u64),
    #[error("cannot listen on {addr}: {source} (is another baton running? try --base-port 0)")]
    Bind {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the data directory: {0}")]
    Dir(#[source] std::io::Error),
    #[error("invalid node config: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("node {id}: {source}")]
    Node {
        id: u64,
        #[source]
        source: NodeError,
    },
}

/// The running cluster's addresses, announced once every node listens.
#[derive(Debug, Clone)]
pub struct DevCluster {
    pub endpoints: Vec<String>,
    pub dir: PathBuf,
}

/// Runs the dev cluster until `shutdown` resolves; `announce` is called once all nodes
/// listen.
pub async fn run(
    opts: DevOptions,
    announce: impl FnOnce(&DevCluster),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DevError> {
    if opts.nodes == 0 || opts.nodes > DEV_NODES_MAX {
        return Err(DevError::Nodes(opts.nodes));
    }
    let (_temp, dir) = match opts.dir {
        Some(d) => {
            std::fs::create_dir_all(&d).map_err(DevError::Dir)?;
            (None, d)
        }
        None => {
            let t = tempfile::Builder::new()
                .prefix("baton-dev-")
                .tempdir()
                .map_err(DevError::Dir)?;
            let d = t.path().to_path_buf();
            (Some(t), d)
        }
    };
    // Bind every listener first, so the initial cluster names the ports really held.
    let mut listeners = Vec::new();
    for id in 1..=opts.nodes {
        let port = match opts.base_port {
            0 => 0,
            base => base + (id - 1) as u16,
        };
        let addr = format!("127.0.0.1:{port}");
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|source| DevError::Bind { addr, source })?;
        listeners.push(listener);
    }
    let endpoints: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<Result<_, _>>()
        .map_err(DevError::Dir)?;
    let initial_cluster = endpoints
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect::<Vec<_>>()
        .join(",");

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut nodes = tokio::task::JoinSet::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let cfg = NodeConfig {
            node_id: id,
            listen: endpoints[i].clone(),
            data_dir: dir.join(format!("node{id}")),
            initial_cluster: initial_cluster.clone(),
            ..NodeConfig::default()
        }
        .validate()?;
        let mut stop = stop_rx.clone();
        nodes.spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            (id, node::run(cfg, listener, shutdown).await)
        });
    }
    announce(&DevCluster {
        endpoints,
        dir: dir.clone(),
    });

    // Stop on the caller's signal, or as soon as any node fails.
    let mut first_error = None;
    tokio::select! {
        _ = shutdown => {}
        Some(joined) = nodes.join_next() => {
            if let Ok((id, Err(source))) = joined {
                first_error = Some(DevError::Node { id, source });
            }
        }
    }
    let _ = stop_tx.send(true);
    while let Some(joined) = nodes.join_next().await {
        if let Ok((id, Err(source))) = joined {
            first_error.get_or_insert(DevError::Node { id, source });
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
