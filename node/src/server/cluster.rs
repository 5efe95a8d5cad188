//! The `Cluster` gRPC service: status and membership, answered from this node's own view.

use baton_proto::v1 as pb;
use openraft::ServerState;
use tonic::{Request, Response, Status};

use crate::raft_types::Raft;
use crate::store::StateMachine;

pub struct ClusterServer {
    pub raft: Raft,
    pub sm: StateMachine,
    pub cluster_name: String,
}

impl ClusterServer {
    fn members(&self) -> (Vec<pb::Member>, Option<u64>) {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, node)| pb::Member {
                id: *id,
                addr: node.addr.clone(),
                voter: voters.contains(id),
            })
            .collect();
        (members, metrics.current_leader)
    }
}

#[tonic::async_trait]
impl pb::cluster_server::Cluster for ClusterServer {
    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let metrics = self.raft.metrics().borrow().clone();
        let (members, leader) = self.members();
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
        _req: Request<pb::MembersRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        let (members, leader) = self.members();
        Ok(Response::new(pb::MembersResponse {
            members,
            leader_id: leader.unwrap_or(0),
        }))
    }
}
