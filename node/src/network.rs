//! The Raft transport: openraft messages over the internal gRPC service `Raft`.
//!
//! Messages are bincode-encoded openraft types in a `bytes` field, addressed to a node id
//! and a cluster name that the receiver checks, so a wrong address in a membership config
//! cannot make a node act on traffic meant for another (split-brain guard).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use baton_proto::v1::raft_client::RaftClient;
use baton_proto::v1::{RaftReply, RaftRequest};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::Channel;

use crate::core::limits::RAFT_MESSAGE_BYTES_MAX;
use crate::peers::PeerBook;
use crate::raft_types::{Node, NodeId, TypeConfig};
use crate::store::{decode, encode};

/// Makes one `Peer` per target, sharing one lazily connected channel per address.
#[derive(Clone)]
pub struct Network {
    cluster_name: String,
    /// This node, and the incarnation of its data dir, sent with every message.
    node_id: NodeId,
    incarnation: u64,
    /// The incarnations peers answered with (`crate::peers`).
    peers: Arc<PeerBook>,
    /// Channels to peers, over TLS when on (made again after a SIGHUP reload).
    channels: Channels,
    /// Where TLS failures toward peers are counted and reported (`/readyz`).
    metrics: Arc<crate::metrics::Metrics>,
}

impl Network {
    pub fn new(
        cluster_name: String,
        node_id: NodeId,
        incarnation: u64,
        peers: Arc<PeerBook>,
        tls: Arc<crate::tls::Outbound>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Network {
        Network {
            cluster_name,
            node_id,
            incarnation,
            peers,
            channels: Channels {
                tls,
                cache: Arc::default(),
            },
            metrics,
        }
    }
}

/// One channel per peer address, shared by every client openraft asks for (it asks for one
/// per voter on every linearizable read), made again when the TLS settings were reloaded.
#[derive(Clone)]
struct Channels {
    tls: Arc<crate::tls::Outbound>,
    cache: Arc<Mutex<HashMap<String, (u64, Channel)>>>,
}

impl Channels {
    fn get(&self, addr: &str) -> Result<Channel, crate::tls::TlsError> {
        let generation = self.tls.generation();
        let mut cache = self.cache.lock().expect("channel cache lock");
        if let Some((made, ch)) = cache.get(addr) {
            if *made == generation {
                return Ok(ch.clone());
            }
        }
        let (generation, tls) = self.tls.current();
        let ch = crate::tls::channel(addr, tls.as_ref(), std::time::Duration::from_secs(1))?;
        cache.insert(addr.to_string(), (generation, ch.clone()));
        Ok(ch)
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Peer {
        Peer {
            target,
            cluster_name: self.cluster_name.clone(),
            node_id: self.node_id,
            incarnation: self.incarnation,
            peers: self.peers.clone(),
            addr: node.addr.clone(),
            metrics: self.metrics.clone(),
            channels: self.channels.clone(),
        }
    }
}

/// A connection to one peer.
pub struct Peer {
    target: NodeId,
    cluster_name: String,
    node_id: NodeId,
    incarnation: u64,
    peers: Arc<PeerBook>,
    channels: Channels,
    addr: String,
    metrics: Arc<crate::metrics::Metrics>,
}

/// A failed status with its causes, outermost first: a TLS failure's reason (an unknown
/// issuer, a bad certificate) is only in the causes.
fn error_chain(status: &tonic::Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut cause = std::error::Error::source(status);
    while let Some(e) = cause {
        let e_text = e.to_string();
        if !text.contains(&e_text) {
            text.push_str(": ");
            text.push_str(&e_text);
        }
        cause = e.source();
    }
    text
}

/// Whether a failed exchange failed on TLS: the handshake or a certificate, or the peer's
/// refusal of this node's certificate as not a node's.
fn tls_failure(status: &tonic::Status, chain: &str) -> bool {
    let chain = chain.to_ascii_lowercase();
    status.code() == tonic::Code::PermissionDenied
        || [
            "certificate",
            "handshake",
            "unknownissuer",
            "unknown ca",
            "unknownca",
            "received fatal alert",
            "rustls",
        ]
        .iter()
        .any(|word| chain.contains(word))
}

/// Why a peer could not be reached: openraft is told the peer is unreachable and backs off.
#[derive(Debug, thiserror::Error)]
enum TransportError {
    /// No channel could be made to its address (a bad address, or the TLS settings).
    #[error("no channel to the peer: {0}")]
    Channel(#[from] crate::tls::TlsError),
    /// The RPC failed: the status and its causes, as one line.
    #[error("{chain}")]
    Rpc { chain: String },
    /// It answered, from a data dir that was replaced since.
    #[error(transparent)]
    Replaced(#[from] crate::peers::Replaced),
}

/// Which RPC of the `Raft` service to call.
enum Method {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl Peer {
    async fn call<Req, Resp, E>(
        &mut self,
        method: Method,
        rpc: &Req,
        option: RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        // An unusable address makes every RPC report the peer unreachable.
        let mut client = match self.channels.get(&self.addr) {
            Ok(ch) => RaftClient::new(ch)
                .max_decoding_message_size(RAFT_MESSAGE_BYTES_MAX)
                .max_encoding_message_size(RAFT_MESSAGE_BYTES_MAX),
            Err(e) => {
                let e = TransportError::from(e);
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
        };
        let mut request = tonic::Request::new(RaftRequest {
            target_node_id: self.target,
            cluster_name: self.cluster_name.clone(),
            payload: match method {
                Method::Vote => encode(rpc),
                // Entries and snapshots hold format-4 data: guarded, so that a format-3
                // node refuses them rather than misreads them.
                Method::AppendEntries | Method::InstallSnapshot => {
                    crate::store::format3::guard(encode(rpc))
                }
            },
            sender_node_id: self.node_id,
            sender_incarnation: self.incarnation,
            peer_incarnations: self.peers.known(),
            data_format: crate::store::DATA_FORMAT,
            peer_formats: self.peers.formats_known(),
        });
        request.set_timeout(option.hard_ttl());
        crate::chaos::raft_delay().await;
        let reply = match method {
            Method::AppendEntries => client.append_entries(request).await,
            Method::Vote => client.vote(request).await,
            Method::InstallSnapshot => client.install_snapshot(request).await,
        };
        let reply: RaftReply = match reply {
            Ok(r) => r.into_inner(),
            Err(status) => {
                let chain = error_chain(&status);
                if tls_failure(&status, &chain) {
                    self.metrics.peer_tls_failures.inc();
                    if self.metrics.peer_trouble.failed(self.target, chain.clone()) {
                        tracing::error!(
                            peer = self.target, addr = %self.addr, error = %chain,
                            "cannot talk to a peer over TLS: do both nodes trust the same CA, \
                             and hold node certificates it signed?"
                        );
                    }
                }
                let e = TransportError::Rpc { chain };
                // Down, slow, or not the node we meant (a wrong address in the membership):
                // back off before retrying rather than hammer it.
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
        };
        self.metrics.peer_trouble.succeeded(self.target);
        // An answer from a replaced data dir must not count: as if the node were down.
        if let Err(replaced) = self.peers.check(self.target, reply.responder_incarnation) {
            tracing::warn!(error = %replaced, "ignoring a peer's answer");
            let e = TransportError::from(replaced);
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        self.peers.said_format(self.target, reply.data_format);
        self.peers
            .learn_formats(self.node_id, self.target, &reply.peer_formats);
        let result: Result<Resp, RaftError<NodeId, E>> =
            decode(&reply.payload).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(Method::AppendEntries, &rpc, option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Method::InstallSnapshot, &rpc, option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(Method::Vote, &rpc, option).await
    }
}
