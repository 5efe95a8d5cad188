//! Wiring of one node: open the data dir, start Raft, bootstrap the cluster if new, run the
//! expiry loop and the gRPC server until the caller's shutdown signal, then stop cleanly.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use baton_proto::v1::baton_server::BatonServer as BatonService;
use baton_proto::v1::cluster_server::ClusterServer as ClusterService;
use baton_proto::v1::raft_server::RaftServer as RaftService;
use openraft::error::InitializeError;
use openraft::BasicNode;
use tokio::net::TcpListener;

use crate::config::ValidConfig;
use crate::core::limits::{RAFT_MESSAGE_BYTES_MAX, REQUEST_BYTES_MAX};
use crate::expiry::{self, Countdowns};
use crate::limits::JOIN_TIMEOUT;
use crate::metrics::Metrics;
use crate::network::Network;
use crate::peers::PeerBook;
use crate::raft_types::{NodeId, Raft};
use crate::server::{baton, cluster, convert::TtlBounds, raft};
use crate::store::{self, OpenError};

/// Why a node stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("raft failed to start or stopped: {0}")]
    Raft(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("cannot listen on admin address {addr}: {source}")]
    Admin {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Join(#[from] JoinError),
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("auth: {0}")]
    Auth(#[from] crate::tokens::TokensError),
    #[error("cannot install the SIGHUP handler (reloads of TLS and tokens): {0}")]
    Sighup(#[source] std::io::Error),
    #[error(
        "the log of node {node_id} was damaged before its durable end (index {index} in {}), \
         and this node is the cluster's only voter: no leader can refill it. The damaged files \
         are kept in {}. Restore the node from a backup (baton-node restore), or accept the loss \
         of what followed the damage by removing {} and starting it again",
        file.display(), kept.display(), repair_file.display()
    )]
    Unrepairable {
        node_id: crate::raft_types::NodeId,
        index: u64,
        file: std::path::PathBuf,
        kept: std::path::PathBuf,
        repair_file: std::path::PathBuf,
    },
    #[error("storage failed, this node stops (restart it once the disk is sound: it reads back what is truly on disk): {0}")]
    Storage(String),
}

/// Why a node started with `--join` was not added.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("join address {target:?}: {source}")]
    Address {
        target: String,
        #[source]
        source: crate::tls::TlsError,
    },
    #[error("the cluster refused to add node {node_id} at {addr}: {message}")]
    Refused {
        node_id: crate::raft_types::NodeId,
        addr: String,
        message: String,
    },
    #[error("no leader added node {node_id} within {JOIN_TIMEOUT:?}; last answer: {last}")]
    TimedOut {
        node_id: crate::raft_types::NodeId,
        last: String,
    },
}

/// Runs a node on `listener` until `shutdown` resolves.
pub async fn run(
    cfg: ValidConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    run_announcing(cfg, listener, shutdown, |_| {}).await
}

/// [`run`], calling `serving` once the data dir is open and the node is about to serve
/// (`baton-node` prints its banner there, so that a node that cannot open its data says
/// only why).
pub async fn run_announcing(
    cfg: ValidConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    serving: impl FnOnce(&ValidConfig),
) -> Result<(), NodeError> {
    let countdowns = Arc::new(Countdowns::new(crate::chaos::lease_clock()));
    let metrics = Arc::new(Metrics::new());
    let (log, sm) = store::open_with(
        &cfg.data_dir,
        cfg.node_id,
        &cfg.cluster_name,
        countdowns.clone(),
        cfg.watch_window_events,
        metrics.clone(),
    )?;
    let incarnation = store::incarnation(&cfg.data_dir)?;
    let repair = log.storage_watch();
    let mut raft_config = cfg.raft.clone();
    if repair.pending().is_some() {
        // No campaign until the leader refilled the damaged log (`watch_repair`).
        raft_config.enable_elect = false;
    }
    let peers = Arc::new(
        PeerBook::open(&cfg.data_dir).map_err(|source| OpenError::Io {
            dir: cfg.data_dir.clone(),
            source,
        })?,
    );
    // TLS: the server side checked now, so a bad file stops the node at start.
    let (server_tls, outbound_tls) = match &cfg.tls {
        None => (None, None),
        Some(files) => (
            Some(files.server_configs().map_err(NodeError::Tls)?),
            Some(files.outbound_config().map_err(NodeError::Tls)?),
        ),
    };
    let outbound = crate::tls::Outbound::new(outbound_tls);
    let network = Network::new(
        cfg.cluster_name.clone(),
        cfg.node_id,
        incarnation,
        peers.clone(),
        outbound.clone(),
        metrics.clone(),
    );
    let raft = Raft::new(cfg.node_id, Arc::new(raft_config), network, log, sm.clone())
        .await
        .map_err(|e| NodeError::Raft(e.into()))?;
    if let Some(pending) = repair.pending() {
        let voters: Vec<_> = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect();
        if voters == [cfg.node_id] {
            let _ = raft.shutdown().await;
            return Err(NodeError::Unrepairable {
                node_id: cfg.node_id,
                index: pending.index,
                file: pending.file,
                kept: pending.kept,
                repair_file: cfg.data_dir.join("log").join(store::REPAIR_FILE),
            });
        }
        tokio::spawn(watch_repair(raft.clone(), repair.clone()));
    }

    let must_join = bootstrap(&raft, &cfg).await?;
    tokio::spawn(forget_removed_peers(raft.clone(), peers.clone()));

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let expiry_task = tokio::spawn(expiry::run(
        raft.clone(),
        countdowns,
        sm.offer_countdowns().clone(),
        sm.quarantine_countdowns().clone(),
        sm.waiter_countdowns().clone(),
        cfg.expiry_tick,
        stop_rx.clone(),
    ));

    let admin_task = match cfg.admin_listen {
        None => None,
        Some(addr) => {
            let listen = |source| NodeError::Admin { addr, source };
            let listener = TcpListener::bind(addr).await.map_err(listen)?;
            let bound = listener.local_addr().map_err(listen)?;
            tracing::info!(node_id = cfg.node_id, admin = %bound, "admin listening on {bound}");
            Some(tokio::spawn(crate::admin::serve(
                listener,
                crate::admin::AdminState {
                    raft: raft.clone(),
                    sm: sm.clone(),
                    metrics: metrics.clone(),
                    peers: peers.clone(),
                    incarnation,
                    repair: repair.clone(),
                },
                stop_rx.clone(),
            )))
        }
    };

    let tokens = match &cfg.auth_tokens {
        None => None,
        Some(file) => {
            let tokens = crate::tokens::Tokens::load(file.clone()).map_err(NodeError::Auth)?;
            tokens.reload_on_sighup().map_err(NodeError::Sighup)?;
            Some(tokens)
        }
    };
    let auth = crate::server::auth::Auth {
        certs: cfg.client_certs,
        tokens,
        anonymous: cfg.allow_anonymous,
        bootstrap: cfg.access_policy.clone().map(Arc::new),
    };
    if !auth.on() && cfg.tls.is_none() {
        tracing::warn!(
            listen = %cfg.listen,
            "security is OFF: plaintext, no authentication; fine on loopback for development, \
             see docs/security.md before anything else"
        );
    }
    if auth.tokens.is_some() && cfg.tls.is_none() {
        tracing::warn!(
            "bearer tokens without TLS: anyone on the path can read them, and Raft traffic \
             carries no identity; use TLS beyond loopback"
        );
    }
    if auth.on() && auth.anonymous {
        tracing::warn!("auth is on, but requests without credentials are served as anonymous");
    }
    if auth.on() && auth.bootstrap.is_none() {
        tracing::warn!(
            "auth is on without --access-policy: until `baton access set`, every \
             authenticated principal may do everything"
        );
    }
    let storage_for_stop = repair.clone();
    let ctx = Arc::new(baton::Ctx::new(
        raft.clone(),
        sm.clone(),
        repair.clone(),
        peers.clone(),
        metrics.clone(),
        outbound.clone(),
        baton::ClientRules {
            auth: auth.clone(),
            watches_per_address_max: cfg.watches_per_address_max,
            writes_per_second: cfg.client_writes_per_second,
            principal_writes_per_second: cfg.principal_writes_per_second,
            ttl: TtlBounds {
                min_ms: cfg.ttl_ms_min,
                max_ms: cfg.ttl_ms_max,
            },
            write_timeout: cfg.write_timeout,
            refusals_in_log: cfg.refusals_in_log,
        },
    ));
    let baton_svc =
        BatonService::new(baton::BatonServer { ctx }).max_decoding_message_size(REQUEST_BYTES_MAX);
    let cluster_svc = ClusterService::new(cluster::ClusterServer {
        raft: raft.clone(),
        sm,
        cluster_name: cfg.cluster_name.clone(),
        peers: peers.clone(),
        auth,
    });
    let raft_svc = RaftService::new(raft::RaftServer {
        raft: raft.clone(),
        node_id: cfg.node_id,
        cluster_name: cfg.cluster_name.clone(),
        incarnation,
        peers,
        tls: cfg.tls.is_some(),
        repair,
    })
    .max_decoding_message_size(RAFT_MESSAGE_BYTES_MAX)
    .max_encoding_message_size(RAFT_MESSAGE_BYTES_MAX);

    tracing::info!(
        node_id = cfg.node_id, listen = %cfg.listen, advertise = %cfg.advertise,
        data_dir = %cfg.data_dir.display(), cluster = %cfg.cluster_name,
        worker_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "baton node serving"
    );
    serving(&cfg);
    // Nagle off on every accepted connection. `Server::tcp_nodelay` only reaches sockets that
    // tonic accepts itself, not an incoming stream handed to it; with Nagle on, a reply sent
    // as two writes waited for the peer's delayed ACK (~40 ms) before its second half left.
    let incoming = crate::admission::limit_connections(
        tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        cfg.connections_max,
        metrics,
    );
    let join_tls = outbound.clone();
    // A refused join stops the node, as a shutdown signal does.
    let (join_failed_tx, join_failed_rx) = tokio::sync::oneshot::channel::<NodeError>();
    if must_join {
        let (endpoints, node_id, advertise) =
            (cfg.join.clone(), cfg.node_id, cfg.advertise.clone());
        tokio::spawn(async move {
            if let Err(e) = join(endpoints, node_id, advertise, incarnation, join_tls).await {
                tracing::error!(error = %e, "could not join the cluster");
                let _ = join_failed_tx.send(e);
            }
        });
    }
    let mut join_failed_rx = join_failed_rx;
    let mut join_error = None;
    let fatal = std::sync::OnceLock::<String>::new();
    let fatal_now = tokio::sync::Notify::new();
    let raft_for_stop = raft.clone();
    let stop = async {
        tokio::pin!(shutdown);
        tokio::select! {
            _ = &mut shutdown => {}
            // A join task that ends without failing drops its sender: that branch is then
            // disabled (the pattern does not match) and the shutdown signal still counts.
            Ok(e) = &mut join_failed_rx => join_error = Some(e),
            // Storage failed (a failed fsync, a full disk), or Raft stopped on its own: the
            // node stops with the cause instead of serving a frozen state.
            e = raft_stopped(&raft_for_stop, &storage_for_stop) => {
                let _ = fatal.set(e);
                fatal_now.notify_one();
            }
        }
    };
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(cfg.streams_per_connection_max))
        .layer(crate::server::transport::layer())
        .add_service(baton_svc)
        .add_service(cluster_svc)
        .add_service(raft_svc);
    let tls_config = match server_tls {
        None => None,
        Some(config) => {
            let (reload, config) = tokio::sync::watch::channel(config);
            if let Some(files) = cfg.tls.clone() {
                crate::tls::reload_on_sighup(files, reload, outbound).map_err(NodeError::Sighup)?;
            }
            Some(config)
        }
    };
    let serve = async {
        match tls_config {
            None => router.serve_with_incoming_shutdown(incoming, stop).await,
            Some(config) => {
                let incoming = crate::tls::accept(incoming, config);
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
        }
    };
    let served = tokio::select! {
        served = serve => served,
        // After a storage failure the server drains its connections for at most
        // FATAL_EXIT_GRACE: writes waiting on a log that no longer flushes would hold the
        // node up until their timeouts.
        () = async {
            fatal_now.notified().await;
            tokio::time::sleep(crate::limits::FATAL_EXIT_GRACE).await;
        } => Ok(()),
    };

    tracing::info!(node_id = cfg.node_id, "shutting down");
    let _ = stop_tx.send(true);
    let _ = expiry_task.await;
    if let Some(task) = admin_task {
        let _ = task.await;
    }
    let stopped = raft.shutdown().await;
    served?;
    if let Some(e) = join_error {
        return Err(e);
    }
    if let Some(e) = fatal.into_inner() {
        return Err(NodeError::Storage(e));
    }
    stopped.map_err(|e| NodeError::Raft(e.into()))
}

/// Resolves, with the cause, when a write to the disk failed or Raft stopped by itself
/// (openraft stops its core on a storage error); never while both are well. Polled: a watch
/// of the metrics would wake at every entry. (Reads are refused from the failure on, at once:
/// `server::baton`.)
async fn raft_stopped(raft: &Raft, storage: &store::StorageWatch) -> String {
    loop {
        if let Some(why) = storage.failure() {
            return why;
        }
        if let Err(fatal) = &raft.metrics().borrow().running_state {
            return fatal.to_string();
        }
        tokio::time::sleep(crate::limits::FATAL_POLL_INTERVAL).await;
    }
}

/// While the damaged log waits for its repair: says so now and then; once the leader has
/// refilled it, lets this node campaign again (votes and readiness follow the same watch).
async fn watch_repair(raft: Raft, repair: store::StorageWatch) {
    let mut said = std::time::Instant::now();
    while let Some(pending) = repair.pending() {
        if said.elapsed() >= crate::limits::REPAIR_NAG_INTERVAL {
            tracing::error!(
                through = pending.through, durable = ?repair.durable(),
                kept = %pending.kept.display(),
                "this node's log is still damaged: it waits for a leader to refill it (it \
                 neither votes nor reports ready meanwhile); if no leader comes, the other \
                 nodes are down too: start them (deploy/RUNBOOK.md, \"A damaged log or snapshot\")"
            );
            said = std::time::Instant::now();
        }
        tokio::time::sleep(crate::limits::REPAIR_POLL_INTERVAL).await;
    }
    raft.runtime_config().elect(true);
}

/// Keeps the peer book to the members: a node removed from the cluster is forgotten, so it
/// may join again on a new data dir. Ends with Raft.
async fn forget_removed_peers(raft: Raft, peers: Arc<PeerBook>) {
    let mut metrics = raft.metrics();
    let mut last = std::collections::BTreeSet::new();
    loop {
        let members: std::collections::BTreeSet<u64> = metrics
            .borrow_and_update()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        if members != last && !members.is_empty() {
            peers.retain(&members);
            last = members;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Asks the cluster at `endpoints` to add this node (`Cluster.AddMember`), going to the leader
/// a member names, retrying while no leader answers, until [`JOIN_TIMEOUT`]. A refusal (the id
/// or address is a voter already, ...) is an error: the node stops rather than linger outside.
async fn join(
    endpoints: Vec<String>,
    node_id: u64,
    advertise: String,
    incarnation: u64,
    tls: Arc<crate::tls::Outbound>,
) -> Result<(), NodeError> {
    use baton_proto::v1::cluster_client::ClusterClient;
    use baton_proto::v1::AddMemberRequest;
    use tonic::Code;
    let deadline = std::time::Instant::now() + JOIN_TIMEOUT;
    let mut targets: std::collections::VecDeque<String> = endpoints.into();
    let mut last = String::from("no attempt yet");
    tracing::info!(node_id, %advertise, through = ?targets, "asking the cluster to add this node");
    while std::time::Instant::now() < deadline {
        let target = targets.pop_front().expect("join has endpoints");
        targets.push_back(target.clone());
        let channel = crate::tls::channel(
            &target,
            tls.current().1.as_ref(),
            std::time::Duration::from_secs(1),
        )
        .map_err(|source| JoinError::Address {
            target: target.clone(),
            source,
        })?;
        let mut request = tonic::Request::new(AddMemberRequest {
            node_id,
            addr: advertise.clone(),
            incarnation,
        });
        request.set_timeout(crate::limits::MEMBER_CATCH_UP_TIMEOUT * 2);
        match ClusterClient::new(channel).add_member(request).await {
            Ok(_) => {
                tracing::info!(node_id, "joined the cluster as a voter");
                return Ok(());
            }
            // No leader yet, a change in progress (other nodes joining), a lost answer: again.
            Err(s)
                if matches!(
                    s.code(),
                    Code::Unavailable
                        | Code::DeadlineExceeded
                        | Code::Cancelled
                        | Code::Unknown
                        | Code::FailedPrecondition
                ) =>
            {
                if let Some(leader) = s
                    .metadata()
                    .get(baton_proto::LEADER_METADATA_KEY)
                    .and_then(|v| v.to_str().ok())
                {
                    targets.retain(|t| t != leader);
                    targets.push_front(leader.to_owned());
                }
                last = format!("{target}: {}", s.message());
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(s) => {
                return Err(JoinError::Refused {
                    node_id,
                    addr: advertise,
                    message: s.message().to_owned(),
                }
                .into())
            }
        }
    }
    Err(JoinError::TimedOut { node_id, last }.into())
}

/// How many of its longest election timeouts an initial member other than the lowest-id one
/// waits, per member below it, before it initializes the cluster itself.
pub const INITIALIZE_STAGGER_ELECTION_TIMEOUTS: u32 = 2;

/// Initializes a new cluster with the configured initial members; a node that is already
/// part of a cluster (a restart on an existing data dir) skips it and rejoins.
///
/// Every initial member initializes with the same membership (which openraft documents as
/// safe), but not at once: a member that initializes campaigns at once, and members started
/// together would split their first vote (one leader's first replication then meets a
/// higher vote, and openraft warns). The lowest-id member initializes now; the k-th above
/// it waits k × [`INITIALIZE_STAGGER_ELECTION_TIMEOUTS`] election timeouts, in the
/// background while it serves, and initializes only if no leader reached it meanwhile
/// (the first leader's membership entry initializes it), so a cluster whose lowest member
/// is down still forms. A member that granted a vote cannot initialize any more (openraft
/// refuses once a vote is kept): had the lowest member failed between winning its first
/// vote and replicating the membership (a window of one round trip), the others wait for
/// it to come back.
///
/// Returns whether the node must still ask a running cluster to add it (`--join` on a new
/// data dir): such a node starts no cluster of its own.
async fn bootstrap(raft: &Raft, cfg: &ValidConfig) -> Result<bool, NodeError> {
    if raft
        .is_initialized()
        .await
        .map_err(|e| NodeError::Raft(e.into()))?
    {
        tracing::info!(
            node_id = cfg.node_id,
            "rejoining the cluster from the data dir"
        );
        // A joiner stopped while still a learner asks again to be made a voter.
        let voter = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == cfg.node_id);
        return Ok(!cfg.join.is_empty() && !voter);
    }
    if !cfg.join.is_empty() {
        return Ok(true);
    }
    let members = cfg
        .initial_members
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect::<std::collections::BTreeMap<_, _>>();
    let rank = cfg
        .initial_members
        .keys()
        .position(|id| *id == cfg.node_id)
        .unwrap_or(0) as u32;
    if rank == 0 {
        initialize(raft, cfg.node_id, members).await?;
        return Ok(false);
    }
    let wait = Duration::from_millis(cfg.raft.election_timeout_max)
        * (rank * INITIALIZE_STAGGER_ELECTION_TIMEOUTS);
    let (raft, node_id) = (raft.clone(), cfg.node_id);
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        if !raft.is_initialized().await.unwrap_or(true) {
            if let Err(error) = initialize(&raft, node_id, members).await {
                tracing::error!(node_id, %error, "cannot initialize the cluster");
            }
        }
    });
    Ok(false)
}

async fn initialize(
    raft: &Raft,
    node_id: NodeId,
    members: std::collections::BTreeMap<NodeId, BasicNode>,
) -> Result<(), NodeError> {
    let addrs: std::collections::BTreeMap<NodeId, String> = members
        .iter()
        .map(|(id, node)| (*id, node.addr.clone()))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => {
            tracing::info!(node_id, members = ?addrs, "initialized a new cluster");
            Ok(())
        }
        Err(openraft::error::RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(NodeError::Raft(e.into())),
    }
}
