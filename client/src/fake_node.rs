//! A scripted stand-in for a baton node, for testing the client's retry loop over real
//! sockets without Raft: each node records the calls it gets and answers from a script.
//! Built for this crate's tests, and for other crates' tests with the `fake-node` feature.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_proto::v1 as pb;
use baton_proto::v1::baton_server::{Baton, BatonServer};
use baton_proto::LEADER_METADATA_KEY;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

/// One call a fake node received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    /// `(client_id, seq)` of a mutating request.
    pub request_id: Option<(String, u64)>,
    /// The request carried `x-baton-first-attempt` (recorded for claims).
    pub first_attempt: bool,
    /// The request carried `x-baton-retry` (recorded for claims).
    pub retry: bool,
}

#[derive(Default)]
pub struct FakeNode {
    calls: Mutex<Vec<Call>>,
    /// Failures to answer with, one per call, before answering normally.
    script: Mutex<VecDeque<(Code, &'static str)>>,
    /// Fail every call with this, after the script runs out.
    always: Mutex<Option<(Code, &'static str)>>,
    /// Named in `x-baton-leader` on every failure.
    leader_hint: Mutex<Option<String>>,
    /// Claims answered `Held` by another holder before claims are granted again, with the
    /// remaining TTL the refusal reports.
    held_claims: Mutex<Option<(usize, Duration)>>,
    /// How renewals are answered (after the failure script).
    renew_answer: Mutex<RenewAnswer>,
    /// How long every renewal takes to answer.
    renew_delay: Mutex<Duration>,
    /// The TTL of the latest claim, echoed by renewals.
    ttl_ms: Mutex<u64>,
    /// The key's assignment, named in claim answers and set by `assign`.
    assignment: Mutex<Option<pb::Assignment>>,
    /// The latest record patch received, for tests to inspect.
    last_patch: Mutex<Option<pb::RecordPatch>>,
    /// The `final_status` of the latest release.
    last_final_status: Mutex<Option<String>>,
    /// Answers to watch calls, one per call in order (after the failure script); when they
    /// run out, a watch is accepted and sends nothing.
    watches: Mutex<VecDeque<WatchAnswer>>,
    /// `(prefix, from_revision)` of every watch call.
    watch_calls: Mutex<Vec<(String, u64)>>,
}

/// How a fake node answers one watch call.
#[derive(Debug, Clone)]
pub enum WatchAnswer {
    /// Refuse the call with this status.
    Refuse(Code, String),
    /// Accept it, send these events, then end as `then` says.
    Send(Vec<pb::Event>, WatchEnd),
}

/// How an accepted fake watch ends after its events.
#[derive(Debug, Clone)]
pub enum WatchEnd {
    /// Stays open, sending nothing more.
    Open,
    /// Ends the stream cleanly.
    Close,
    /// Sends this error item.
    Fail(Code, String),
}

/// The revision every fake board answer reflects.
pub const FAKE_BOARD_REVISION: u64 = 90;

/// A watch event of `key` at `revision`.
pub fn watch_event(revision: u64, key: &str, kind: &str) -> pb::Event {
    pb::Event {
        revision,
        key: key.to_owned(),
        kind: kind.to_owned(),
        actor: Some(pb::Actor {
            name: "codex@b".into(),
            client_id: "codex-client".into(),
            ..pb::Actor::default()
        }),
        token: revision,
        at_unix_ms: 1_700_000_000_000 + revision,
        detail: format!("event {revision}"),
        recorded_before_format_4: false,
        status_set: String::new(),
    }
}

type EventStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::Event, Status>> + Send + 'static>>;

/// How a fake node answers renewals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RenewAnswer {
    /// Renewed, same token.
    #[default]
    Renewed,
    /// Lost: the key is held by `other` now.
    LostToOther,
}

/// The token every grant of a fake node carries.
pub const FAKE_TOKEN: u64 = 42;

/// The lease of a holder other than the test's, on `key`.
pub fn other_lease(key: &str, remaining: Duration) -> pb::Lease {
    pb::Lease {
        key: key.to_owned(),
        holder: Some(pb::Holder {
            name: "other@host-b".into(),
            client_id: "other-client".into(),
        }),
        token: 77,
        ttl_ms: 30_000,
        held_since_unix_ms: 1,
        renewed_at_unix_ms: 1,
        remaining_ms: u64::try_from(remaining.as_millis()).unwrap(),
        basis: 77,
    }
}

impl FakeNode {
    pub fn fail_next(&self, code: Code, message: &'static str) {
        self.script.lock().unwrap().push_back((code, message));
    }

    pub fn fail_always(&self, code: Code, message: &'static str) {
        *self.always.lock().unwrap() = Some((code, message));
    }

    /// Ends `fail_always`: calls are answered again (after any scripted failures).
    pub fn stop_failing(&self) {
        *self.always.lock().unwrap() = None;
    }

    pub fn name_leader(&self, leader: SocketAddr) {
        *self.leader_hint.lock().unwrap() = Some(leader.to_string());
    }

    /// The next `claims` claims are refused: the key is held by someone else for another
    /// `remaining`.
    pub fn hold_claims(&self, claims: usize, remaining: Duration) {
        *self.held_claims.lock().unwrap() = Some((claims, remaining));
    }

    pub fn answer_renewals(&self, answer: RenewAnswer) {
        *self.renew_answer.lock().unwrap() = answer;
    }

    /// Renewals answer with this TTL, as if this node had seen the claim.
    pub fn assume_ttl(&self, ttl: Duration) {
        *self.ttl_ms.lock().unwrap() = u64::try_from(ttl.as_millis()).unwrap();
    }

    pub fn delay_renewals(&self, delay: Duration) {
        *self.renew_delay.lock().unwrap() = delay;
    }

    /// Claim answers name this assignment.
    pub fn assign_to(&self, assignment: pb::Assignment) {
        *self.assignment.lock().unwrap() = Some(assignment);
    }

    pub fn last_patch(&self) -> Option<pb::RecordPatch> {
        self.last_patch.lock().unwrap().clone()
    }

    pub fn last_final_status(&self) -> Option<String> {
        self.last_final_status.lock().unwrap().clone()
    }

    /// Answers the next watch call with `answer`.
    pub fn answer_watch(&self, answer: WatchAnswer) {
        self.watches.lock().unwrap().push_back(answer);
    }

    /// `(prefix, from_revision)` of every watch call so far.
    pub fn watch_calls(&self) -> Vec<(String, u64)> {
        self.watch_calls.lock().unwrap().clone()
    }

    /// How many calls of `method` the node received.
    pub fn count(&self, method: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.method == method)
            .count()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Serves this node on a fresh localhost port until the returned task is aborted.
    pub async fn serve(self: &Arc<Self>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
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
        self.enter_attempt(method, request_id, false, false)
    }

    fn enter_attempt(
        &self,
        method: &'static str,
        request_id: Option<&pb::RequestId>,
        first_attempt: bool,
        retry: bool,
    ) -> Result<(), Status> {
        self.calls.lock().unwrap().push(Call {
            method,
            request_id: request_id.map(|id| (id.client_id.clone(), id.seq)),
            first_attempt,
            retry,
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
    type WatchStream = EventStream;
    type EndingsStream = futures::stream::BoxStream<'static, Result<pb::LeaseEnding, Status>>;

    /// As a node older than the endings stream answers: the guards renew only.
    async fn endings(
        &self,
        _request: Request<pb::EndingsRequest>,
    ) -> Result<Response<Self::EndingsStream>, Status> {
        Err(Status::unimplemented("this fake node pushes no endings"))
    }

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let request = request.into_inner();
        self.enter("watch", None)?;
        self.watch_calls
            .lock()
            .unwrap()
            .push((request.prefix, request.from_revision));
        let answer = self.watches.lock().unwrap().pop_front();
        let (events, then) = match answer {
            Some(WatchAnswer::Refuse(code, message)) => return Err(Status::new(code, message)),
            Some(WatchAnswer::Send(events, then)) => (events, then),
            None => (Vec::new(), WatchEnd::Open),
        };
        use futures::StreamExt;
        let events = futures::stream::iter(events.into_iter().map(Ok));
        let stream: EventStream = match then {
            WatchEnd::Open => Box::pin(events.chain(futures::stream::pending())),
            WatchEnd::Close => Box::pin(events),
            WatchEnd::Fail(code, message) => {
                Box::pin(events.chain(futures::stream::once(async move {
                    Err(Status::new(code, message))
                })))
            }
        };
        Ok(Response::new(stream))
    }

    async fn claim(
        &self,
        request: Request<pb::ClaimRequest>,
    ) -> Result<Response<pb::ClaimResponse>, Status> {
        let first_attempt = request
            .metadata()
            .contains_key(baton_proto::FIRST_ATTEMPT_METADATA_KEY);
        let retry = request
            .metadata()
            .contains_key(baton_proto::RETRY_METADATA_KEY);
        let request = request.into_inner();
        self.enter_attempt("claim", request.request_id.as_ref(), first_attempt, retry)?;
        *self.ttl_ms.lock().unwrap() = request.ttl_ms;
        {
            let mut held = self.held_claims.lock().unwrap();
            if let Some((left, remaining)) = held.as_mut() {
                if *left > 0 {
                    *left -= 1;
                    return Ok(Response::new(pb::ClaimResponse {
                        outcome: Some(pb::claim_response::Outcome::Held(pb::Held {
                            lease: Some(other_lease(&request.key, *remaining)),
                            same_name_other_process: false,
                            assignment: self.assignment.lock().unwrap().clone(),
                            permits: None,
                        })),
                        revision: 77,
                    }));
                }
            }
        }
        Ok(Response::new(pb::ClaimResponse {
            outcome: Some(pb::claim_response::Outcome::Granted(pb::Granted {
                lease: Some(pb::Lease {
                    key: request.key,
                    holder: request.holder,
                    token: FAKE_TOKEN,
                    ttl_ms: request.ttl_ms,
                    held_since_unix_ms: 1,
                    renewed_at_unix_ms: 1,
                    remaining_ms: request.ttl_ms,
                    basis: FAKE_TOKEN,
                }),
                already_held: false,
                assignment: self.assignment.lock().unwrap().clone(),
                permits: None,
            })),
            revision: 42,
        }))
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        let request = request.into_inner();
        self.enter("renew", request.request_id.as_ref())?;
        let delay = *self.renew_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let answer = *self.renew_answer.lock().unwrap();
        let outcome = match answer {
            RenewAnswer::Renewed => {
                let ttl_ms = *self.ttl_ms.lock().unwrap();
                pb::renew_response::Outcome::Renewed(pb::Lease {
                    key: request.key,
                    holder: Some(pb::Holder {
                        name: "claude@host-a".into(),
                        client_id: "test".into(),
                    }),
                    token: request.token,
                    ttl_ms,
                    held_since_unix_ms: 1,
                    renewed_at_unix_ms: 2,
                    remaining_ms: ttl_ms,
                    basis: request.token + 1,
                })
            }
            RenewAnswer::LostToOther => pb::renew_response::Outcome::Lost(pb::Lost {
                current: Some(other_lease(&request.key, Duration::from_secs(30))),
            }),
        };
        Ok(Response::new(pb::RenewResponse {
            outcome: Some(outcome),
            revision: 50,
        }))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let request = request.into_inner();
        self.enter("release", request.request_id.as_ref())?;
        *self.last_final_status.lock().unwrap() = Some(request.final_status.clone());
        let ttl_ms = *self.ttl_ms.lock().unwrap();
        Ok(Response::new(pb::ReleaseResponse {
            outcome: Some(pb::release_response::Outcome::Released(pb::Lease {
                key: request.key,
                holder: Some(pb::Holder {
                    name: "claude@host-a".into(),
                    client_id: "test".into(),
                }),
                token: request.token,
                ttl_ms,
                held_since_unix_ms: 1,
                renewed_at_unix_ms: 2,
                remaining_ms: 0,
                basis: request.token,
            })),
            revision: 60,
        }))
    }

    async fn probe(
        &self,
        _request: Request<pb::ProbeRequest>,
    ) -> Result<Response<pb::ProbeResponse>, Status> {
        self.enter("probe", None)?;
        Ok(Response::new(pb::ProbeResponse {
            lease: None,
            revision: 42,
            line: None,
            permits: None,
        }))
    }

    async fn board(
        &self,
        _request: Request<pb::BoardRequest>,
    ) -> Result<Response<pb::BoardResponse>, Status> {
        self.enter("board", None)?;
        Ok(Response::new(pb::BoardResponse {
            leases: Vec::new(),
            truncated: false,
            revision: FAKE_BOARD_REVISION,
            assignments: Default::default(),
            quarantines: Default::default(),
            unclaimed: Default::default(),
            unclaimed_truncated: false,
            open: Vec::new(),
            open_truncated: false,
            lines: Default::default(),
            permits: Default::default(),
        }))
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

    async fn set_quarantine(
        &self,
        request: Request<pb::SetQuarantineRequest>,
    ) -> Result<Response<pb::SetQuarantineResponse>, Status> {
        self.enter("set_quarantine", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn post(
        &self,
        request: Request<pb::PostRequest>,
    ) -> Result<Response<pb::PostResponse>, Status> {
        self.enter("post", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn claim_next(
        &self,
        request: Request<pb::ClaimNextRequest>,
    ) -> Result<Response<pb::ClaimNextResponse>, Status> {
        self.enter("claim_next", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn claim_set(
        &self,
        request: Request<pb::ClaimSetRequest>,
    ) -> Result<Response<pb::ClaimSetResponse>, Status> {
        self.enter("claim_set", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn wait(
        &self,
        request: Request<pb::WaitRequest>,
    ) -> Result<Response<pb::WaitResponse>, Status> {
        self.enter("wait", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn leave_line(
        &self,
        request: Request<pb::LeaveLineRequest>,
    ) -> Result<Response<pb::LeaveLineResponse>, Status> {
        self.enter("leave_line", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn set_access(
        &self,
        request: Request<pb::SetAccessRequest>,
    ) -> Result<Response<pb::AccessResponse>, Status> {
        self.enter("set_access", request.get_ref().request_id.as_ref())?;
        Err(Status::unimplemented("fake"))
    }

    async fn get_quarantine(
        &self,
        _request: Request<pb::GetQuarantineRequest>,
    ) -> Result<Response<pb::GetQuarantineResponse>, Status> {
        self.enter("get_quarantine", None)?;
        Err(Status::unimplemented("fake"))
    }

    async fn get_access(
        &self,
        _request: Request<pb::GetAccessRequest>,
    ) -> Result<Response<pb::AccessResponse>, Status> {
        self.enter("get_access", None)?;
        Err(Status::unimplemented("fake"))
    }

    async fn update(
        &self,
        request: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        let request = request.into_inner();
        self.enter("update", request.request_id.as_ref())?;
        let patch = request.patch.unwrap_or_default();
        *self.last_patch.lock().unwrap() = Some(patch.clone());
        Ok(Response::new(pb::UpdateResponse {
            record: Some(pb::Record {
                status: patch.status.unwrap_or_default(),
                summary: patch.summary.unwrap_or_default(),
                fields: patch.set_fields,
                assigned_to: self.assignment.lock().unwrap().clone(),
                updated_revision: 70,
                ..Default::default()
            }),
            revision: 70,
        }))
    }

    async fn assign(
        &self,
        request: Request<pb::AssignRequest>,
    ) -> Result<Response<pb::AssignResponse>, Status> {
        let request = request.into_inner();
        self.enter("assign", request.request_id.as_ref())?;
        let assignment = pb::Assignment {
            to: request.to,
            by: request.by,
            reason: request.reason,
            assigned_at_unix_ms: 1,
            revision: 71,
        };
        *self.assignment.lock().unwrap() = Some(assignment.clone());
        Ok(Response::new(pb::AssignResponse {
            record: Some(pb::Record {
                assigned_to: Some(assignment),
                ..Default::default()
            }),
            revision: 71,
            lease: None,
        }))
    }

    async fn get_record(
        &self,
        request: Request<pb::GetRecordRequest>,
    ) -> Result<Response<pb::GetRecordResponse>, Status> {
        let request = request.into_inner();
        self.enter("get_record", None)?;
        Ok(Response::new(pb::GetRecordResponse {
            record: Some(pb::Record {
                status: "in_progress".into(),
                assigned_to: self.assignment.lock().unwrap().clone(),
                // Nodes may send an empty last note: it means none.
                last_note: Some(pb::HandoffNote::default()),
                ..Default::default()
            }),
            lease: Some(other_lease(&request.key, Duration::from_secs(30))),
            revision: 72,
            permits: None,
            quarantine: None,
            line: None,
        }))
    }

    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let request = request.into_inner();
        self.enter("history", None)?;
        let event = |revision, kind: &str, token| pb::Event {
            revision,
            key: request.key.clone(),
            kind: kind.into(),
            actor: Some(pb::Actor {
                name: "other@host-b".into(),
                client_id: "other-client".into(),
                ..pb::Actor::default()
            }),
            token,
            at_unix_ms: revision,
            detail: String::new(),
            recorded_before_format_4: false,
            status_set: String::new(),
        };
        Ok(Response::new(pb::HistoryResponse {
            events: vec![
                event(77, "claimed", 77),
                event(78, "updated", 77),
                event(79, "released", 77),
            ],
            dropped: 5,
            revision: 79,
        }))
    }

    async fn offer(
        &self,
        request: Request<pb::OfferRequest>,
    ) -> Result<Response<pb::OfferResponse>, Status> {
        let request = request.into_inner();
        self.enter("offer", request.request_id.as_ref())?;
        Ok(Response::new(pb::OfferResponse {
            offer: Some(pb::Offer {
                from: Some(pb::Holder {
                    name: "claude@host-a".into(),
                    client_id: "test".into(),
                }),
                from_token: request.token,
                to: request.to,
                note: request.note,
                offer_ttl_ms: request.offer_ttl_ms,
                offered_at_unix_ms: 1,
                revision: 80,
                remaining_ms: request.offer_ttl_ms,
            }),
            revision: 80,
        }))
    }

    async fn accept(
        &self,
        request: Request<pb::AcceptRequest>,
    ) -> Result<Response<pb::AcceptResponse>, Status> {
        let request = request.into_inner();
        self.enter("accept", request.request_id.as_ref())?;
        Ok(Response::new(pb::AcceptResponse {
            lease: Some(pb::Lease {
                key: request.key,
                holder: request.holder,
                token: 81,
                ttl_ms: request.ttl_ms,
                held_since_unix_ms: 1,
                renewed_at_unix_ms: 1,
                remaining_ms: request.ttl_ms,
                basis: 81,
            }),
            note: Some(pb::HandoffNote {
                commit: "4f2a9c0".into(),
                volatile_facts: vec![pb::VolatileFact {
                    name: "count".into(),
                    claimed_value: "4".into(),
                    check_command: "echo 5".into(),
                }],
                ..Default::default()
            }),
            from: Some(pb::Holder {
                name: "other@host-b".into(),
                client_id: "other-client".into(),
            }),
            revision: 81,
        }))
    }

    async fn decline(
        &self,
        request: Request<pb::DeclineRequest>,
    ) -> Result<Response<pb::DeclineResponse>, Status> {
        self.enter("decline", request.get_ref().request_id.as_ref())?;
        Ok(Response::new(pb::DeclineResponse { revision: 82 }))
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelResponse>, Status> {
        self.enter("cancel", request.get_ref().request_id.as_ref())?;
        Ok(Response::new(pb::CancelResponse { revision: 83 }))
    }
}
