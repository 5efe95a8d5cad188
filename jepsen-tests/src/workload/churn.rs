//! The `churner`: retries resent after more clients wrote than the cluster remembers.
//!
//! Each round, through the repo's own proto (raw gRPC: the churner picks its request ids):
//! - holder A claims the round's key; an operator revokes it (`--now`) as request (op, 1);
//! - a client claims a second key as request (cl, 1) and releases it as (cl, 2);
//! - [`CHURN_CLIENTS`] other clients, each with a client id of its own, claim a key each
//!   (what as many CLI calls, git hooks or agent processes send), more than the cluster's
//!   retry memory holds (`DEDUP_CLIENTS_MAX`, 10,000);
//! - holder B claims the round's key;
//! - (op, 1) and (cl, 1) are resent as retries (`x-baton-retry`), as a client whose first
//!   answer was lost resends them.
//!
//! Both answers go into the history as a `retry` line; the `retries` checker
//! (`check::retries`) holds each retry to its first answer or a refusal as too old. Before
//! data format 15 the revoke's retry revoked B's lease, and the claim's retry granted the
//! released key again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use futures::StreamExt;
use tonic::transport::{Channel, Endpoint};

use baton_node::core::limits::DEDUP_CLIENTS_MAX;

use super::Ctx;
use crate::history::RetryEvent;

/// Distinct clients that write between a request and its retry: more than the cluster
/// remembers (`DEDUP_CLIENTS_MAX`).
pub const CHURN_CLIENTS: usize = DEDUP_CLIENTS_MAX + 100;
/// Churn claims in flight at once.
const CHURN_IN_FLIGHT: usize = 64;
/// One attempt's timeout, and how long a call keeps trying the nodes in turn.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
const CALL_DEADLINE: Duration = Duration::from_secs(10);
/// The churn claims' TTL: they lapse soon after the round.
const CHURN_TTL_MS: u64 = 2_000;
/// The round's holders' TTL: longer than a round.
const HOLD_TTL_MS: u64 = 60_000;

/// One lazily connected client per node.
struct Nodes(Vec<BatonClient<Channel>>);

impl Nodes {
    fn new(endpoints: &[String]) -> Nodes {
        Nodes(
            endpoints
                .iter()
                .filter_map(|e| Endpoint::from_shared(format!("http://{e}")).ok())
                .map(|e| BatonClient::new(e.timeout(ATTEMPT_TIMEOUT).connect_lazy()))
                .collect(),
        )
    }

    /// `call` at each node in turn until one answers other than UNAVAILABLE (or a timeout),
    /// or [`CALL_DEADLINE`] passes; `retry` marks every attempt as a retry.
    async fn call<T, R, F, Fut>(&self, msg: T, retry: bool, call: F) -> Result<R, tonic::Status>
    where
        T: Clone,
        F: Fn(BatonClient<Channel>, tonic::Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let deadline = Instant::now() + CALL_DEADLINE;
        let mut last = tonic::Status::unavailable("no attempt");
        for n in 0.. {
            let mut req = tonic::Request::new(msg.clone());
            if retry || n > 0 {
                req.metadata_mut().insert(
                    baton_proto::RETRY_METADATA_KEY,
                    tonic::metadata::MetadataValue::from_static("1"),
                );
            }
            match call(self.0[n % self.0.len()].clone(), req).await {
                Ok(answer) => return Ok(answer.into_inner()),
                Err(s)
                    if matches!(
                        s.code(),
                        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                    ) =>
                {
                    last = s
                }
                Err(s) => return Err(s),
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last)
    }
}

fn id(client: &str, seq: u64) -> Option<pb::RequestId> {
    Some(pb::RequestId {
        client_id: client.into(),
        seq,
        session: client.into(),
    })
}

fn claim(key: &str, client: &str, seq: u64, ttl_ms: u64) -> pb::ClaimRequest {
    pb::ClaimRequest {
        key: key.into(),
        holder: Some(pb::Holder {
            name: client.into(),
            client_id: client.into(),
        }),
        ttl_ms,
        request_id: id(client, seq),
        ..Default::default()
    }
}

/// An answer as a `retry` line says it.
fn said<R>(answer: &Result<R, tonic::Status>, ok: impl Fn(&R) -> String) -> String {
    match answer {
        Ok(r) => ok(r),
        Err(s) if s.code() == tonic::Code::Unknown && s.message().contains("retry too old") => {
            "too-old".to_owned()
        }
        Err(s) => format!("status {}", s.code() as i32),
    }
}

fn claimed(r: &pb::ClaimResponse) -> String {
    use pb::claim_response::Outcome;
    match &r.outcome {
        Some(Outcome::Granted(g)) => format!("granted {}", g.lease.as_ref().map_or(0, |l| l.token)),
        Some(Outcome::Held(h)) => format!("held {}", h.lease.as_ref().map_or(0, |l| l.token)),
        other => format!("{other:?}"),
    }
}

fn revoked(r: &pb::RevokeResponse) -> String {
    match &r.revoked {
        Some(l) => format!("revoked {}", l.token),
        None => "revoked none".to_owned(),
    }
}

fn token_of(answer: &str) -> Option<u64> {
    answer.strip_prefix("granted ")?.parse().ok()
}

/// Runs rounds until `ctx.stop`; `tag` names this churner's keys and clients.
pub async fn run(ctx: Arc<Ctx>, tag: String) {
    let nodes = Nodes::new(&ctx.endpoints);
    for round in 0.. {
        if ctx.stopped() {
            return;
        }
        one_round(&ctx, &nodes, &format!("{tag}r{round}")).await;
    }
}

async fn one_round(ctx: &Ctx, nodes: &Nodes, tag: &str) {
    let (key, ckey) = (format!("churn/{tag}/k"), format!("churn/{tag}/c"));
    let (a, b, op, cl) = (
        format!("{tag}-a"),
        format!("{tag}-b"),
        format!("{tag}-op"),
        format!("{tag}-cl"),
    );
    let claim_of = |req: pb::ClaimRequest, retry: bool| {
        nodes.call(req, retry, |mut c, r| async move { c.claim(r).await })
    };
    // Each step's first attempt must be answered, or the round proves nothing.
    let Ok(held) = claim_of(claim(&key, &a, 1, HOLD_TTL_MS), false).await else {
        return;
    };
    if token_of(&claimed(&held)).is_none() {
        return;
    }
    let revoke = pb::RevokeRequest {
        key: key.clone(),
        reason: "churn".into(),
        request_id: id(&op, 1),
        now: true,
    };
    let revoke_of = |req: pb::RevokeRequest, retry: bool| {
        nodes.call(req, retry, |mut c, r| async move { c.revoke(r).await })
    };
    let first_revoke = revoke_of(revoke.clone(), false).await;
    let first_claim_req = claim(&ckey, &cl, 1, HOLD_TTL_MS);
    let first_claim = claim_of(first_claim_req.clone(), false).await;
    let (Ok(_), Some(c_token)) = (
        &first_revoke,
        first_claim
            .as_ref()
            .ok()
            .and_then(|r| token_of(&claimed(r))),
    ) else {
        return;
    };
    let release = pb::ReleaseRequest {
        key: ckey.clone(),
        token: c_token,
        request_id: id(&cl, 2),
        final_status: String::new(),
    };
    if nodes
        .call(release, false, |mut c, r| async move { c.release(r).await })
        .await
        .is_err()
    {
        return;
    }
    let churn = futures::stream::iter(0..CHURN_CLIENTS)
        .map(|i| {
            let client = format!("{tag}-x{i}");
            let req = claim(&format!("churn/{tag}/x{i}"), &client, 1, CHURN_TTL_MS);
            claim_of(req, false)
        })
        .buffer_unordered(CHURN_IN_FLIGHT)
        .take_while(|_| futures::future::ready(!ctx.stopped()));
    let churned = churn
        .filter(|r| futures::future::ready(r.is_ok()))
        .count()
        .await;
    if ctx.stopped() || churned <= DEDUP_CLIENTS_MAX {
        // Too few other clients wrote to prove anything.
        return;
    }
    let later = claim_of(claim(&key, &b, 1, HOLD_TTL_MS), false).await;
    let later_token = later
        .as_ref()
        .ok()
        .and_then(|r| token_of(&claimed(r)))
        .unwrap_or(0);
    let again_revoke = revoke_of(revoke, true).await;
    let again_claim = claim_of(first_claim_req, true).await;
    let held_after = nodes
        .call(
            pb::ProbeRequest {
                key: key.clone(),
                ..Default::default()
            },
            false,
            |mut c, r| async move { c.probe(r).await },
        )
        .await
        .ok()
        .and_then(|p| p.lease.map(|l| l.token))
        .unwrap_or(0);
    ctx.rec.retry(RetryEvent {
        idx: 0,
        step: "revoke".into(),
        key,
        client: op,
        seq: 1,
        first: said(&first_revoke, revoked),
        again: said(&again_revoke, revoked),
        held_after,
        later_token,
        t_ns: 0,
    });
    ctx.rec.retry(RetryEvent {
        idx: 0,
        step: "claim".into(),
        key: ckey,
        client: cl,
        seq: 1,
        first: said(&first_claim, claimed),
        again: said(&again_claim, claimed),
        held_after: 0,
        later_token: 0,
        t_ns: 0,
    });
}
