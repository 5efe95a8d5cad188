//! Serving a request here or forwarding it once to the leader (see `super::baton`'s module
//! doc): who is asking, what they may do, and the forward with its principal.

use std::future::Future;
use std::sync::Arc;

use baton_proto::v1::baton_client::BatonClient;
use baton_proto::{
    FIRST_ATTEMPT_METADATA_KEY, FORWARDED_METADATA_KEY, LEADER_METADATA_KEY, RETRY_METADATA_KEY,
    UNPROPOSED_METADATA_KEY,
};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::baton::{unavailable, BatonServer, Caller, Ctx, NotAnswered};
use super::convert;
use crate::limits::FORWARD_TIMEOUT;

impl BatonServer {
    /// Serves `req` here, or forwards it once to the leader (see the module doc).
    pub(super) async fn serve<Req, Resp, LF, RF>(
        &self,
        method: &'static str,
        req: Request<Req>,
        local: impl FnOnce(Arc<Ctx>, Req, Caller) -> LF,
        remote: impl FnOnce(BatonClient<Channel>, Request<Req>) -> RF,
    ) -> Result<Response<Resp>, Status>
    where
        Req: Clone + super::auth::Acts + super::precheck::Precheck,
        LF: Future<Output = Result<Resp, NotAnswered>>,
        RF: Future<Output = Result<Response<Resp>, Status>>,
    {
        let answer = async {
            let principal = self.ctx.auth.principal(&req)?;
            let forwarded = req.metadata().contains_key(FORWARDED_METADATA_KEY);
            let first_attempt = req.metadata().contains_key(FIRST_ATTEMPT_METADATA_KEY);
            let retry = req.metadata().contains_key(RETRY_METADATA_KEY);
            let bearer = req
                .metadata()
                .get(super::auth::AUTHORIZATION_METADATA_KEY)
                .cloned();
            let msg = req.into_inner();
            // Bad input first, at every node alike, before who may do it and before any
            // forward: a follower refuses it as the leader would, never as an outage. (A
            // forwarded request was checked by the node that received it.)
            if !forwarded {
                msg.precheck()?;
            }
            // A write reaching a follower that knows the leader goes there at once: deciding
            // it here would take a proposer slot only to be told NotLeader by Raft. The
            // leader checks who may do it, and every limit, itself. (NotLeader below is left
            // for the race where leadership moves while a request is being decided.)
            let leader_first = match (msg.writes(), forwarded) {
                (true, false) => self.ctx.leader_elsewhere(),
                _ => None,
            };
            let (acting, needs) = (msg.acting(), msg.needs());
            let served = match leader_first {
                Some(leader) => Err(NotAnswered::NotLeader {
                    leader: Some(leader),
                }),
                None => match super::auth::authorize(
                    &self.ctx.auth,
                    principal.as_deref(),
                    acting,
                    needs,
                    &self.ctx.sm,
                )
                .and_then(|()| {
                    msg.also_needs().iter().try_for_each(|key| {
                        super::auth::authorize(
                            &self.ctx.auth,
                            principal.as_deref(),
                            super::auth::Acting::Other,
                            (needs.0, key),
                            &self.ctx.sm,
                        )
                    })
                }) {
                    Ok(()) => match self
                        .ctx
                        .principal_limited(principal.as_deref(), msg.writes())
                    {
                        Some(limited) => Err(NotAnswered::Status(limited)),
                        None => {
                            let who = Caller {
                                principal: principal.clone(),
                                first_attempt,
                                retry,
                            };
                            local(self.ctx.clone(), msg.clone(), who).await
                        }
                    },
                    // This node's copy of the policy may be behind the leader's (a grant just
                    // made): the leader, whose copy is the latest, decides. (What this node
                    // allows and forwards, the leader checks again with its own copy.)
                    Err(denied) => match self.ctx.leader_elsewhere() {
                        Some(leader) if !forwarded => Err(NotAnswered::NotLeader {
                            leader: Some(leader),
                        }),
                        // No leader to confirm it with (an election): a refusal from a copy
                        // that may be behind is not final; the client retries.
                        None if !forwarded && !self.ctx.leads() => {
                            Err(NotAnswered::Status(unproposed(unavailable(
                                None,
                                &format!(
                                    "cannot confirm a refusal ({}) without a leader",
                                    denied.message()
                                ),
                            ))))
                        }
                        _ => Err(NotAnswered::Status(denied)),
                    },
                },
            };
            match served {
                Ok(resp) => Ok(Response::new(resp)),
                // A node of data format 3 forwards with its own protobuf types, which drop
                // the session a format-4 client sent (a rolling upgrade with a new leader
                // elected early). Not the client's fault: it retries, and may reach the
                // leader directly. A node of this version never forwards a write without its
                // session: it refuses it itself (`precheck`), so this only answers a forward
                // from a node that predates the check.
                Err(NotAnswered::Status(s))
                    if forwarded
                        && s.code() == tonic::Code::InvalidArgument
                        && s.message().starts_with(convert::SESSION_MISSING) =>
                {
                    Err(Status::unavailable(
                        "a node that predates data format 4 forwarded this write without its \
                         session; retry (the forwarding node names this leader)",
                    ))
                }
                Err(NotAnswered::Status(s)) => Err(s),
                Err(NotAnswered::NotLeader { leader: Some(addr) }) if !forwarded => {
                    let client = self.ctx.leader_client(&addr)?;
                    let mut fwd = Request::new(msg);
                    fwd.metadata_mut()
                        .insert(FORWARDED_METADATA_KEY, MetadataValue::from_static("1"));
                    // Forwarded once, never re-sent: still the client's only copy.
                    if first_attempt {
                        fwd.metadata_mut()
                            .insert(FIRST_ATTEMPT_METADATA_KEY, MetadataValue::from_static("1"));
                    }
                    if retry {
                        fwd.metadata_mut()
                            .insert(RETRY_METADATA_KEY, MetadataValue::from_static("1"));
                    }
                    // The leader learns who is asking from this node's certificate and the
                    // principal it names (empty: anonymous), or, without TLS, from the
                    // client's own token again.
                    // Binary, so any name survives; always sent with auth on, since a forwarded
                    // request without it counts as anonymous, never as this node.
                    if self.ctx.auth.on() {
                        let p = principal.as_deref().unwrap_or("").as_bytes();
                        fwd.metadata_mut().insert_bin(
                            super::auth::PRINCIPAL_METADATA_KEY,
                            tonic::metadata::BinaryMetadataValue::from_bytes(p),
                        );
                    }
                    if let Some(bearer) = bearer {
                        fwd.metadata_mut()
                            .insert(super::auth::AUTHORIZATION_METADATA_KEY, bearer);
                    }
                    fwd.set_timeout(FORWARD_TIMEOUT);
                    match remote(client, fwd).await {
                        Ok(resp) => Ok(with_leader(Response::new(resp.into_inner()), &addr)),
                        Err(s) if forward_failed(&s) => Err(unproposed_if(
                            baton_proto::never_sent(&s)
                                || s.metadata().contains_key(UNPROPOSED_METADATA_KEY),
                            unavailable(
                                Some(&addr),
                                &format!(
                                    "forwarding to the leader failed ({:?}: {}); retry with the \
                                 same request id",
                                    s.code(),
                                    s.message()
                                ),
                            ),
                        )),
                        Err(s) => Err(s),
                    }
                }
                // Nothing was proposed: the proposer appends only as the leader.
                Err(NotAnswered::NotLeader { leader }) => Err(unproposed(unavailable(
                    leader.as_deref(),
                    "this node is not the leader",
                ))),
            }
        }
        .await;
        let code = match &answer {
            Ok(_) => tonic::Code::Ok,
            Err(s) => s.code(),
        };
        self.ctx.metrics.grpc_request(method, code);
        answer
    }
}

/// Whether a forwarded request failed on the way rather than being answered by the leader:
/// the leader said UNAVAILABLE, or the transport gave up (refused, reset, timed out,
/// cancelled with the connection). Those become this node's UNAVAILABLE, which the client
/// retries; a leader's real answer (INVALID_ARGUMENT, ...) passes through unchanged.
fn forward_failed(s: &Status) -> bool {
    use tonic::Code;
    std::error::Error::source(s).is_some()
        || matches!(
            s.code(),
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded
        )
}

/// `s`, saying that nothing of the request was proposed: the client's next attempt is still
/// a first one (`baton_proto::UNPROPOSED_METADATA_KEY`).
fn unproposed(mut s: Status) -> Status {
    s.metadata_mut()
        .insert(UNPROPOSED_METADATA_KEY, MetadataValue::from_static("1"));
    s
}

fn unproposed_if(unproposed_for_sure: bool, s: Status) -> Status {
    match unproposed_for_sure {
        true => unproposed(s),
        false => s,
    }
}

fn with_leader<T>(mut r: Response<T>, leader: &str) -> Response<T> {
    if let Ok(v) = MetadataValue::try_from(leader) {
        r.metadata_mut().insert(LEADER_METADATA_KEY, v);
    }
    r
}
