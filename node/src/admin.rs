//! The HTTP admin port (axum): `/healthz` (the process serves), `/readyz` (a member of a
//! cluster with a known leader, its apply close behind its log) and `/metrics` (Prometheus,
//! OpenMetrics text).
//!
//! The metrics themselves live in `crate::metrics`; the gauges of Raft state and of the table
//! are read here at scrape time.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::limits::{ADMIN_ANSWER_BYTES_MAX, READY_APPLY_LAG_MAX};
use crate::metrics::{Metrics, TableCounts};
use crate::peers::PeerBook;
use crate::raft_types::{NodeId, Raft};
use crate::store::{StateMachine, StorageWatch};

/// Why `http_get` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{doing}: {source}")]
    Io {
        doing: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{from} answered no HTTP status line: {head:?}")]
    NoStatus { from: String, head: String },
}

/// One answer of the admin port.
#[derive(Debug)]
pub struct AdminAnswer {
    pub status: u16,
    pub body: String,
}

/// GETs `path` from a node's admin port at `addr` (host:port; an unspecified IP such as
/// 0.0.0.0, as a node is told to listen on, means this host). HTTP/1.0 with
/// `Connection: close`: one request, read to the end. For `baton-node health`.
pub async fn http_get(addr: &str, path: &str) -> Result<AdminAnswer, AdminError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let target = match addr.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => {
            std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, a.port())).to_string()
        }
        _ => addr.to_owned(),
    };
    let io = |doing: &str| {
        let doing = format!("{doing} {target}{path}");
        move |source| AdminError::Io { doing, source }
    };
    let mut stream = tokio::net::TcpStream::connect(&target)
        .await
        .map_err(io("connecting to the admin port for"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(io("sending the request"))?;
    let mut raw = Vec::new();
    stream
        .take(ADMIN_ANSWER_BYTES_MAX)
        .read_to_end(&mut raw)
        .await
        .map_err(io("reading the answer of"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| AdminError::NoStatus {
            from: format!("{target}{path}"),
            head: head.to_string(),
        })?;
    Ok(AdminAnswer {
        status,
        body: body.to_owned(),
    })
}

/// Why a node should not receive traffic (`/readyz` answers 503 with this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("no membership yet: a joining node waits for the leader to add it")]
    NoMembership,
    #[error(
        "node {node_id} is not in the cluster's membership (removed?): it serves no one; stop \
         it, or add it again (baton cluster add {node_id} ADDR)"
    )]
    NotAMember { node_id: NodeId },
    #[error(
        "the cluster knows node {node_id} by another data dir (incarnation {known:016x}; this \
         one is {mine:016x}): this node lost its data, and its peers refuse it; remove it \
         (baton cluster remove {node_id}) and let it join again (baton-node --join)"
    )]
    Replaced {
        node_id: NodeId,
        known: u64,
        mine: u64,
    },
    #[error("no known leader")]
    NoLeader,
    #[error("applied index {applied} is more than {READY_APPLY_LAG_MAX} behind the log ({last})")]
    ApplyLag { applied: u64, last: u64 },
    #[error("this node reaches no majority of the voters over TLS")]
    CutOff,
    #[error(
        "this node has not heard from a majority of the voters for {silent_ms} ms (more \
         than an election timeout): it is cut off from the cluster"
    )]
    Unreached { silent_ms: u64 },
    #[error("this node's storage failed ({why}): it stops")]
    StorageFailed { why: String },
    #[error(
        "this node's log was damaged (index {index}); the leader is refilling it: on disk \
         through {durable:?} of {through}"
    )]
    Repairing {
        index: u64,
        through: u64,
        durable: Option<u64>,
    },
}

/// Whether this node should receive traffic, and if not, why: it must be a voter or learner
/// of the membership it knows, known by the cluster as the data dir it runs on (`peers`,
/// `incarnation`, believed only from members), have no damaged log waiting for its repair,
/// follow a leader it still hears from (a leader: a majority that still answers it, within
/// an election timeout), and have applied its log to within [`READY_APPLY_LAG_MAX`].
pub fn readiness(
    raft: &Raft,
    peers: &PeerBook,
    incarnation: u64,
    repair: &StorageWatch,
) -> Result<(), NotReady> {
    if let Some(why) = repair.failure() {
        return Err(NotReady::StorageFailed { why });
    }
    let rm = raft.metrics().borrow().clone();
    // Before the membership: a wiped node may have none yet (it waits to initialize, see
    // `node::bootstrap`), and "it lost its data" is what its operator must hear.
    if let Some(known) = peers.known_as(incarnation) {
        return Err(NotReady::Replaced {
            node_id: rm.id,
            known,
            mine: incarnation,
        });
    }
    let membership = rm.membership_config.membership();
    if membership.nodes().next().is_none() {
        return Err(NotReady::NoMembership);
    }
    let member = membership.voter_ids().any(|id| id == rm.id)
        || membership.learner_ids().any(|id| id == rm.id);
    if !member {
        return Err(NotReady::NotAMember { node_id: rm.id });
    }
    if let Some(pending) = repair.pending() {
        return Err(NotReady::Repairing {
            index: pending.index,
            through: pending.through,
            durable: repair.durable(),
        });
    }
    if rm.current_leader.is_none() {
        return Err(NotReady::NoLeader);
    }
    // Reachability, whatever cuts it: a leader whose followers stopped answering still
    // believes it leads (openraft 0.9 does not step down), and a learner never campaigns,
    // so it keeps its leader. Both count as cut off after an election timeout of silence.
    let silence_max = raft.config().election_timeout_max;
    let silent_ms = match rm.state {
        openraft::ServerState::Leader => rm.millis_since_quorum_ack,
        openraft::ServerState::Learner => Some(
            peers
                .since_leader_spoke()
                .map_or(u64::MAX, |d| d.as_millis() as u64),
        ),
        _ => None,
    };
    if let Some(silent_ms) = silent_ms.filter(|ms| *ms > silence_max) {
        return Err(NotReady::Unreached { silent_ms });
    }
    let last = rm.last_log_index.unwrap_or(0);
    let applied = rm.last_applied.map(|l| l.index).unwrap_or(0);
    if last.saturating_sub(applied) > READY_APPLY_LAG_MAX {
        return Err(NotReady::ApplyLag { applied, last });
    }
    Ok(())
}

#[derive(Clone)]
struct Admin {
    raft: Raft,
    sm: StateMachine,
    metrics: Arc<Metrics>,
    peers: Arc<PeerBook>,
    /// This node's data dir incarnation (`crate::peers`).
    incarnation: u64,
    repair: StorageWatch,
}

/// What the admin port serves from: the node's Raft, state, metrics and peer book.
pub struct AdminState {
    pub raft: Raft,
    pub sm: StateMachine,
    pub metrics: Arc<Metrics>,
    pub peers: Arc<PeerBook>,
    pub incarnation: u64,
    pub repair: StorageWatch,
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 when ready, 503 with why when not; either way, the peers this node cannot reach over
/// TLS (a CA mismatch is a configuration error the operator must see: on the odd node out it
/// is why there is no leader, on the others a warning).
async fn readyz(State(a): State<Admin>) -> impl IntoResponse {
    let recent = a.metrics.peer_trouble.recent();
    let trouble: String = recent
        .iter()
        .map(|(peer, error)| format!("warning: peer {peer}: TLS: {error}\n"))
        .collect();
    // A node may still believe in the leader it knew before it restarted, though it reaches
    // no one: count the voters it can talk to.
    let cut_off = {
        let rm = a.raft.metrics().borrow().clone();
        let voters: Vec<_> = rm.membership_config.membership().voter_ids().collect();
        let unreachable = voters
            .iter()
            .filter(|v| recent.iter().any(|(p, _)| p == *v))
            .count();
        voters.len() - unreachable <= voters.len() / 2
    };
    let ready = match readiness(&a.raft, &a.peers, a.incarnation, &a.repair) {
        Ok(()) if cut_off => Err(NotReady::CutOff),
        other => other,
    };
    match ready {
        Ok(()) => (StatusCode::OK, format!("ready\n{trouble}")),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n{trouble}"),
        ),
    }
}

async fn metrics_text(State(a): State<Admin>) -> impl IntoResponse {
    let counts = a.sm.read(|s| TableCounts {
        leases: s.table.lease_count() as u64,
        keys: s.table.case_count() as u64,
        revision: s.revision,
    });
    let body = a.metrics.render(&a.raft.metrics().borrow(), counts);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
}

/// Serves the admin endpoints on `listener` until `stop` changes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let AdminState {
        raft,
        sm,
        metrics,
        peers,
        incarnation,
        repair,
    } = state;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Admin {
            raft,
            sm,
            metrics,
            peers,
            incarnation,
            repair,
        });
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await
}
