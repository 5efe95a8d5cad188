//! The internal `Raft` gRPC service: hands peers' messages to openraft after checking they
//! are meant for this node of this cluster.

use baton_proto::v1::raft_server::Raft as RaftService;
use baton_proto::v1::{RaftReply, RaftRequest};
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

use std::sync::Arc;

use crate::peers::PeerBook;
use crate::raft_types::{NodeId, Raft};
use crate::store::{decode, encode, StorageWatch};
use openraft::raft::AppendEntriesResponse;

pub struct RaftServer {
    pub raft: Raft,
    pub node_id: NodeId,
    pub cluster_name: String,
    /// This node's data dir incarnation, sent with every answer (`crate::peers`).
    pub incarnation: u64,
    pub peers: Arc<PeerBook>,
    /// TLS is on: a sender must show a node certificate the peer CA signed.
    pub tls: bool,
    /// While this node's damaged log waits for its repair, it grants no vote.
    pub repair: StorageWatch,
}

impl RaftServer {
    /// Decodes a peer's message after checking its address and that the sender still runs
    /// on the data dir it was first seen with.
    fn open<T: DeserializeOwned>(&self, req: Request<RaftRequest>) -> Result<T, Status> {
        let req = self.checked(req)?;
        decode(&req.payload).map_err(bad_message)
    }

    /// Checks a peer's message (see `open`) and gives it back undecoded.
    fn checked(&self, req: Request<RaftRequest>) -> Result<RaftRequest, Status> {
        if self.tls {
            let conn = req.extensions().get::<crate::tls::ConnInfo>();
            if !conn.is_some_and(|c| c.node) {
                tracing::warn!(
                    remote = ?conn.and_then(|c| c.remote),
                    peer_settings = ?conn.map(|c| c.peer_link),
                    common_name = ?conn.and_then(|c| c.common_name.as_deref()),
                    "refusing Raft traffic without a node certificate"
                );
                return Err(Status::permission_denied(format!(
                    "Raft traffic needs a node certificate signed by the peer CA (common name \
                     \"{}ID\"), shown to the peer settings (--peer-tls-*)",
                    super::auth::NODE_CN_PREFIX
                )));
            }
            // A certificate that names its node by id speaks only as that node: a node's
            // certificate cannot vote or replicate as another.
            let sender = req.get_ref().sender_node_id;
            let named = conn
                .and_then(|c| c.common_name.as_deref())
                .and_then(|cn| cn.strip_prefix(super::auth::NODE_CN_PREFIX))
                .and_then(|id| id.parse::<u64>().ok());
            if let Some(named) = named.filter(|id| *id != sender) {
                tracing::warn!(
                    certificate_of = named,
                    sender,
                    "refusing Raft traffic sent as another node"
                );
                return Err(Status::permission_denied(format!(
                    "the certificate of node {named} cannot send as node {sender}"
                )));
            }
        }
        let req = req.into_inner();
        if req.target_node_id != self.node_id || req.cluster_name != self.cluster_name {
            // A peer with a wrong address for us: refuse rather than act as another node.
            return Err(Status::invalid_argument(format!(
                "this is node {} of cluster {:?}, not node {} of cluster {:?}",
                self.node_id, self.cluster_name, req.target_node_id, req.cluster_name
            )));
        }
        if let Err(replaced) = self.peers.check(req.sender_node_id, req.sender_incarnation) {
            tracing::warn!(error = %replaced, "refusing a peer's Raft message");
            return Err(Status::failed_precondition(replaced.to_string()));
        }
        if req.sender_incarnation != 0 {
            self.peers
                .learn(self.node_id, req.sender_node_id, &req.peer_incarnations);
        }
        // A request says its sender's data format as an answer does: a follower learns the
        // leader's from its replication, so that, leader in turn after the leader failed, it
        // knows which format the failed member reads (a format gate would refuse otherwise).
        self.peers.said_format(req.sender_node_id, req.data_format);
        // And what it knows the others read: a member down since before this node last
        // heard from it may be known to the sender (a leader hears every follower).
        self.peers
            .learn_formats(self.node_id, req.sender_node_id, &req.peer_formats);
        Ok(req)
    }

    fn reply<T: serde::Serialize>(&self, result: T) -> Result<Response<RaftReply>, Status> {
        Ok(Response::new(RaftReply {
            payload: encode(&result),
            responder_incarnation: self.incarnation,
            data_format: crate::store::DATA_FORMAT,
            peer_formats: self.peers.formats_known(),
        }))
    }
}

/// The message behind a format-4 payload's guard.
fn guarded(payload: &[u8]) -> Result<&[u8], Status> {
    crate::store::format3::unguard(payload).ok_or_else(|| {
        Status::invalid_argument("bad raft message: a format-4 payload without its guard")
    })
}

fn bad_message(e: bincode::Error) -> Status {
    Status::invalid_argument(format!("bad raft message: {e}"))
}

#[tonic::async_trait]
impl RaftService for RaftServer {
    async fn append_entries(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        // A peer still on data format 3 (a rolling upgrade, followers first) sends its
        // entries in that format; they are read and upgraded here. (A format-3 node refuses
        // format-4 entries, see `format3::FORMAT_4_GUARD`: it catches up once it runs this
        // version.)
        let req = self.checked(req)?;
        let rpc = match req.data_format {
            f if f >= 4 => decode(guarded(&req.payload)?),
            _ => crate::store::format3::append_entries(&req.payload),
        }
        .map_err(bad_message)?;
        let answer = self.raft.append_entries(rpc).await;
        if matches!(&answer, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
            // A leader of this node's term reaches it (readiness of a learner: `admin`).
            self.peers.leader_spoke();
        }
        self.reply(answer)
    }

    async fn vote(&self, req: Request<RaftRequest>) -> Result<Response<RaftReply>, Status> {
        let rpc = self.open(req)?;
        // Its log lacks entries it acknowledged: a vote now could elect a leader without
        // them (storage faults, docs/guarantees.md). No vote until the leader refilled it.
        if let Some(repair) = self.repair.pending() {
            return Err(Status::unavailable(format!(
                "node {} votes in no election: its log was damaged and is being refilled \
                 from the leader (through index {}, on disk through {:?})",
                self.node_id,
                repair.through,
                self.repair.durable()
            )));
        }
        self.reply(self.raft.vote(rpc).await)
    }

    async fn install_snapshot(
        &self,
        req: Request<RaftRequest>,
    ) -> Result<Response<RaftReply>, Status> {
        // A format-3 peer's snapshot is read as it is (`SmState::decode` reads format 3); a
        // format-4 one comes guarded.
        let req = self.checked(req)?;
        let payload = match req.data_format {
            f if f >= 4 => guarded(&req.payload)?,
            _ => &req.payload[..],
        };
        let rpc = decode(payload).map_err(bad_message)?;
        self.reply(self.raft.install_snapshot(rpc).await)
    }
}
