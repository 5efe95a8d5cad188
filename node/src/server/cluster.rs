//! The `Cluster` gRPC service: status and membership as this node sees them, and the
//! operator's actions: adding and removing members, snapshots and backups.
//!
//! There is no leader transfer: openraft 0.9 has none, and an election forced on a follower
//! loses to the followers' leader lease. To move the leadership off a node, stop it cleanly
//! (SIGTERM); the others elect a leader within an election timeout (deploy/RUNBOOK.md).

use std::collections::BTreeSet;
use std::pin::Pin;
use std::time::Duration;

use baton_proto::v1 as pb;
use openraft::error::{ChangeMembershipError, CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, ServerState};
use tonic::{Request, Response, Status};

use crate::backup::encode_backup;
use crate::limits::BACKUP_CHUNK_BYTES;
use crate::limits::{
    BACKUP_LINEARIZE_TRIES, MEMBERSHIP_CHANGE_TIMEOUT, MEMBER_ADDR_BYTES_MAX,
    MEMBER_CATCH_UP_LAG_MAX, MEMBER_CATCH_UP_TIMEOUT, SNAPSHOT_WAIT,
};
use crate::raft_types::{NodeId, Raft};
use crate::server::baton::unavailable;
use crate::store::StateMachine;

pub struct ClusterServer {
    pub raft: Raft,
    pub sm: StateMachine,
    pub cluster_name: String,
    /// The data dirs peers were seen on: tells a joiner asking again from a wiped node.
    pub peers: std::sync::Arc<crate::peers::PeerBook>,
    /// Who is asking (`super::auth`).
    pub auth: super::auth::Auth,
}

type Metrics = openraft::RaftMetrics<NodeId, BasicNode>;

impl ClusterServer {
    /// Refuses a caller without `admin` on every key (`""`): cluster calls change or copy
    /// the whole cluster.
    fn admin<T>(&self, req: &Request<T>) -> Result<(), Status> {
        let principal = self.auth.principal(req)?;
        super::auth::authorize_call(
            &self.auth,
            principal.as_deref(),
            crate::core::access::Permission::Admin,
            "",
            &self.sm,
        )
    }

    fn metrics(&self) -> Metrics {
        self.raft.metrics().borrow().clone()
    }

    fn members_of(metrics: &Metrics) -> Vec<pb::Member> {
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        membership
            .nodes()
            .map(|(id, node)| pb::Member {
                id: *id,
                addr: node.addr.clone(),
                voter: voters.contains(id),
            })
            .collect()
    }

    fn members_response(&self) -> Response<pb::MembersResponse> {
        let metrics = self.metrics();
        Response::new(pb::MembersResponse {
            members: Self::members_of(&metrics),
            leader_id: metrics.current_leader.unwrap_or(0),
        })
    }

    /// The current metrics if this node leads; UNAVAILABLE naming the leader otherwise.
    fn leading(&self, what: &str) -> Result<Metrics, Status> {
        let metrics = self.metrics();
        if metrics.state == ServerState::Leader && metrics.current_leader == Some(metrics.id) {
            return Ok(metrics);
        }
        let leader = metrics.current_leader.and_then(|l| {
            metrics
                .membership_config
                .membership()
                .get_node(&l)
                .map(|n| n.addr.clone())
        });
        Err(unavailable(
            leader.as_deref(),
            &format!("{what} is done by the leader"),
        ))
    }

    /// Changes the membership. The change runs in a task of its own: openraft makes it in
    /// two steps (joint, then uniform), and a caller that gives up between them must not
    /// leave the cluster joint.
    async fn change(&self, change: ChangeMembers<NodeId, BasicNode>) -> Result<(), Status> {
        let raft = self.raft.clone();
        let task = tokio::spawn(async move { raft.change_membership(change, false).await });
        let changed = tokio::time::timeout(MEMBERSHIP_CHANGE_TIMEOUT, task)
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "the membership change did not commit within {MEMBERSHIP_CHANGE_TIMEOUT:?}: a \
                     quorum of the old and of the new voters must be up; it goes on in the \
                     background, check `baton cluster members`"
                ))
            })?
            .map_err(|e| Status::internal(format!("the membership change task failed: {e}")))?;
        changed.map(|_| ()).map_err(change_error)
    }

    /// Waits until the leader has replicated to `node_id` up to within
    /// [`MEMBER_CATCH_UP_LAG_MAX`] entries of its log.
    async fn wait_caught_up(&self, node_id: NodeId, addr: &str) -> Result<(), Status> {
        let mut watch = self.raft.metrics();
        let caught_up = async {
            watch
                .wait_for(|m| {
                    let leading = m.state == ServerState::Leader && m.current_leader == Some(m.id);
                    let matched = m
                        .replication
                        .as_ref()
                        .and_then(|r| r.get(&node_id).copied().flatten())
                        .map(|l| l.index);
                    !leading
                        || matched.is_some_and(|i| {
                            m.last_log_index.unwrap_or(0).saturating_sub(i)
                                <= MEMBER_CATCH_UP_LAG_MAX
                        })
                })
                .await
                .map(|m| m.state)
        };
        match tokio::time::timeout(MEMBER_CATCH_UP_TIMEOUT, caught_up).await {
            Err(_) => Err(Status::deadline_exceeded(format!(
                "node {node_id} is a learner at {addr} but did not catch up within \
                 {MEMBER_CATCH_UP_TIMEOUT:?}; is it running (with --join)? It is not a voter: \
                 run the same command again once it runs, or remove it"
            ))),
            Ok(Err(_)) => Err(Status::unavailable("the node is shutting down")),
            Ok(Ok(state)) if state != ServerState::Leader => Err(unavailable(
                None,
                "this node lost the leadership while the learner caught up; retry",
            )),
            Ok(Ok(_)) => Ok(()),
        }
    }
}

fn change_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => unavailable(
            f.leader_node.as_ref().map(|n| n.addr.as_str()),
            "this node lost the leadership during the change; check `baton cluster members`",
        ),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(p),
        )) => Status::failed_precondition(format!(
            "another membership change is in progress ({p}); retry when it is done"
        )),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            Status::failed_precondition(c.to_string())
        }
        e => Status::unavailable(format!("membership change failed: {e}")),
    }
}

/// Checks an address the way peers will dial it: host:port.
fn check_addr(addr: &str) -> Result<(), Status> {
    let ok = addr.len() <= MEMBER_ADDR_BYTES_MAX
        && addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        && !addr.contains("://")
        && !addr.chars().any(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "address {addr:?} is not host:port (at most {MEMBER_ADDR_BYTES_MAX} bytes, no scheme)"
        )))
    }
}

type BackupStream =
    Pin<Box<dyn futures::Stream<Item = Result<pb::BackupChunk, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterServer {
    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        self.auth.principal(&req)?;
        let metrics = self.metrics();
        let members = Self::members_of(&metrics);
        let leader = metrics.current_leader;
        let leader_addr = leader
            .and_then(|id| members.iter().find(|m| m.id == id))
            .map(|m| m.addr.clone())
            .unwrap_or_default();
        let state = match metrics.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        Ok(Response::new(pb::StatusResponse {
            node_id: metrics.id,
            cluster_name: self.cluster_name.clone(),
            state: state.into(),
            leader_id: leader.unwrap_or(0),
            leader_addr,
            term: metrics.current_term,
            last_log_index: metrics.last_log_index.unwrap_or(0),
            applied_index: metrics.last_applied.map(|l| l.index).unwrap_or(0),
            members,
            leases: self.sm.read(|s| s.table.lease_count()) as u64,
        }))
    }

    async fn members(
        &self,
        req: Request<pb::MembersRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        self.auth.principal(&req)?;
        Ok(self.members_response())
    }

    async fn add_member(
        &self,
        req: Request<pb::AddMemberRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        self.admin(&req)?;
        let pb::AddMemberRequest {
            node_id,
            addr,
            incarnation,
        } = req.into_inner();
        if node_id == 0 {
            return Err(Status::invalid_argument("node ids start at 1"));
        }
        check_addr(&addr)?;
        let metrics = self.leading("adding a member")?;
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let joint = membership.get_joint_config().len() > 1;
        if let Some(node) = membership.get_node(&node_id) {
            // The same node asking again (its first answer was lost) is answered as done; so
            // is a change left half-way in a joint configuration, which this finishes.
            let same_node = node.addr == addr
                && incarnation != 0
                && self.peers.check(node_id, incarnation).is_ok();
            if voters.contains(&node_id) && !joint && same_node {
                return Ok(self.members_response());
            }
            if voters.contains(&node_id) && !joint {
                return Err(Status::already_exists(format!(
                    "node {node_id} is already a voter (at {}); if you just added it, it is \
                     done. A node whose data dir was lost must not come back under its old id: \
                     remove it (baton cluster remove {node_id}) and let it join again",
                    node.addr
                )));
            }
            if node.addr != addr {
                return Err(Status::already_exists(format!(
                    "node {node_id} is already a member at {}; remove it first to add it at {addr}",
                    node.addr
                )));
            }
        }
        if let Some((other, _)) = membership
            .nodes()
            .find(|(id, n)| **id != node_id && n.addr == addr)
        {
            return Err(Status::already_exists(format!(
                "address {addr} is node {other}'s; give each node its own address"
            )));
        }
        if membership.get_node(&node_id).is_none() {
            let node = BasicNode { addr: addr.clone() };
            // Not blocking: openraft's own wait counts a fresh learner as caught up whenever
            // the log is shorter than its replication lag threshold.
            self.raft
                .add_learner(node_id, node, false)
                .await
                .map_err(change_error)?;
        }
        self.wait_caught_up(node_id, &addr).await?;
        tracing::info!(node_id, %addr, "learner caught up; making it a voter");
        self.change(ChangeMembers::AddVoterIds(BTreeSet::from([node_id])))
            .await?;
        tracing::info!(node_id, %addr, "added a voter");
        Ok(self.members_response())
    }

    async fn remove_member(
        &self,
        req: Request<pb::RemoveMemberRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        self.admin(&req)?;
        let node_id = req.into_inner().node_id;
        let metrics = self.leading("removing a member")?;
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        if membership.get_node(&node_id).is_none() {
            let ids: Vec<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
            return Err(Status::not_found(format!(
                "node {node_id} is not a member (members: {ids:?})"
            )));
        }
        let change = if voters.contains(&node_id) {
            if voters.len() == 1 {
                return Err(Status::failed_precondition(format!(
                    "node {node_id} is the last voter: removing it would leave no cluster"
                )));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([node_id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([node_id]))
        };
        self.change(change).await?;
        tracing::info!(node_id, "removed a member");
        Ok(self.members_response())
    }

    async fn snapshot(
        &self,
        req: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        self.admin(&req)?;
        let applied = self.metrics().last_applied.map_or(0, |l| l.index);
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut watch = self.raft.metrics();
        let done = tokio::time::timeout(
            SNAPSHOT_WAIT,
            watch.wait_for(|m| m.snapshot.map_or(0, |s| s.index) >= applied),
        )
        .await;
        let m = match done {
            Ok(Ok(m)) => m.clone(),
            _ => {
                return Err(Status::deadline_exceeded(format!(
                    "the snapshot did not reach the disk within {SNAPSHOT_WAIT:?}"
                )))
            }
        };
        Ok(Response::new(pb::SnapshotResponse {
            node_id: m.id,
            snapshot_index: m.snapshot.map_or(0, |s| s.index),
            snapshot_bytes: self.sm.snapshot_file_bytes(),
        }))
    }

    type BackupStream = BackupStream;

    async fn backup(
        &self,
        req: Request<pb::BackupRequest>,
    ) -> Result<Response<Self::BackupStream>, Status> {
        self.admin(&req)?;
        self.leading("a backup")?;
        // Everything committed before now is applied here once this returns. One quorum
        // round may fall short on a blip (openraft #1852): a few more.
        let mut tries = 0;
        loop {
            match self.raft.ensure_linearizable().await {
                Ok(_) => break,
                Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))
                    if tries < BACKUP_LINEARIZE_TRIES =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                    return Err(unavailable(
                        f.leader_node.as_ref().map(|n| n.addr.as_str()),
                        "this node lost the leadership",
                    ))
                }
                Err(e) => {
                    return Err(Status::unavailable(format!(
                        "cannot confirm the leadership for a backup: {e}"
                    )))
                }
            }
        }
        let bytes = std::sync::Arc::new(self.sm.read(|s| encode_backup(&self.cluster_name, s)));
        tracing::info!(bytes = bytes.len(), "streaming a backup");
        // One chunk copied at a time, as the client reads.
        let chunks = (0..bytes.len().div_ceil(BACKUP_CHUNK_BYTES)).map(move |i| {
            let end = ((i + 1) * BACKUP_CHUNK_BYTES).min(bytes.len());
            Ok(pb::BackupChunk {
                data: bytes[i * BACKUP_CHUNK_BYTES..end].to_vec(),
            })
        });
        Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_addresses_must_be_host_and_port() {
        for good in ["node4:7001", "10.0.0.4:7001", "[::1]:7001"] {
            assert!(check_addr(good).is_ok(), "{good}");
        }
        let long = format!("{}:7001", "h".repeat(MEMBER_ADDR_BYTES_MAX));
        for bad in [
            "node4",
            ":7001",
            "node4:x",
            "http://node4:7001",
            "a b:1",
            long.as_str(),
        ] {
            assert_eq!(
                check_addr(bad).unwrap_err().code(),
                tonic::Code::InvalidArgument,
                "{bad}"
            );
        }
    }
}
