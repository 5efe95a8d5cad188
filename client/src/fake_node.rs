//! A scripted stand-in for a baton node, for testing the client's retry loop over real
//! sockets without Raft: each node records the calls it gets and answers from a script.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_server::{Baton, BatonServer};
use baton_proto::LEADER_METADATA_KEY;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

/// One call a fake node received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    pub method: &'static str,
    /// `(client_id, seq)` of a mutating request.
    pub request_id: Option<(String, u64)>,
}

#[derive(Default)]
pub(crate) struct FakeNode {
    calls: Mutex<Vec<Call>>,
    /// Failures to answer with, one per call, before answering normally.
    script: Mutex<VecDeque<(Code, &'static str)>>,
    /// Fail every call with this, after the script runs out.
    always: Mutex<Option<(Code, &'static str)>>,
    /// Named in `x-baton-leader` on every failure.
    leader_hint: Mutex<Option<String>>,
}

impl FakeNode {
    pub(crate) fn fail_next(&self, code: Code, message: &'static str) {
        self.script.lock().unwrap().push_back((code, message));
    }

    pub(crate) fn fail_always(&self, code: Code, message: &'static str) {
        *self.always.lock().unwrap() = Some((code, message));
    }

    pub(crate) fn name_leader(&self, leader: SocketAddr) {
        *self.leader_hint.lock().unwrap() = Some(leader.to_string());
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Serves this node on a fresh localhost port until the returned task is aborted.
    pub(crate) async fn serve(self: &Arc<Self>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let service = BatonServer::from_arc(Arc::clone(self));
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await
                .unwrap();
        });
        (addr, task)
    }

    fn enter(
        &self,
        method: &'static str,
        request_id: Option<&pb::RequestId>,
    ) -> Result<(), Status> {
        self.calls.lock().unwrap().push(Call {
            method,
            request_id: request_id.map(|id| (id.client_id.clone(), id.seq)),
        });
        let failure = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .or(*self.always.lock().unwrap());
        match failure {
            None => Ok(()),
            Some((code, message)) => {
                let mut metadata = MetadataMap::new();
                if let Some(leader) = self.leader_hint.lock().unwrap().as_deref() {
                    metadata.insert(LEADER_METADATA_KEY, leader.parse().unwrap());
                }
                Err(Status::with_metadata(code, message, metadata))
            }
        }
    }
}

#[tonic::async_trait]
impl Baton for FakeNode {
    async fn claim(
        &self,
        request: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        let request = request.into_inner();
        self.enter("claim", request.request_id.as_ref())?;
        Ok(Response::new(pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Granted(pb::Granted {
                lease: Some(pb::Lease {
                    key: request.key,
                    holder: request.holder,
                    token: 42,
                    ttl_ms: request.ttl_ms,
                    held_since_unix_ms: 1,
                    renewed_at_unix_ms: 1,
                    remaining_ms: request.ttl_ms,
                    basis: 42,
                }),
                already_held: false,
            })),
            revision: 42,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.enter("renew", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.enter("release", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn probe(
        &self,
        _request: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeResponse>, Status> {
        self.enter("probe", None)?;
        Ok(Response::new(pb::ProbeResponse {
            lease: None,
            revision: 42,
        }))
    }

    async fn board(
        &self,
        _request: Request<pb::BoardRequest>,
    ) -> Result<Response<pb::BoardResponse>, Status> {
        self.enter("board", None)?;
        Err(Status::unimplemented("fake"))
    }

    async fn check_token(
        &self,
        _request: Request<pb::CheckTokenRequest>,
    ) -> Result<Response<pb::CheckTokenResponse>, Status> {
        self.enter("check_token", None)?;
        Err(Status::unimplemented("fake"))
    }

    async fn revoke(
        &self,
        request: Request<pb::RevokeRequest>,
    ) -> Result<Response<pb::RevokeResponse>, Status> {
        self.enter("revoke", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }
}
