//! The `baton bench` workload against etcd 3.4, written the way an etcd user would:
//!
//! - **claim** = `LeaseGrant(ttl)` + `Txn(if create_revision(key) == 0 then Put(key, id,
//!   lease) else Get(key))`, where `id` is the lease id in decimal (unique per claim);
//!   granted when the Txn succeeded, held otherwise. A held claim's unused lease is revoked
//!   (not timed: it is not part of the claim, but it does take the claimant's time).
//! - **renew** = one `LeaseKeepAlive` request and its answer on the claimant's own
//!   keep-alive stream (opened once per claimant); an answer with TTL 0 means the lease is
//!   gone (`lost`).
//! - **release** = `Txn(if value(key) == id then Delete(key))` + `LeaseRevoke(lease)`; a
//!   Txn that did not succeed counts as `lost`.
//!
//! Counting, windows, keys (`BenchConfig::key`) and latency histograms are those of
//! [`baton_workload`], and the result is the same [`BenchReport`]. Each claimant has
//! its own gRPC channel to one member: claimant `i` talks to `endpoints[i % n]` (followers
//! forward to the leader, as with an etcd client spread over the members). There are no
//! retries: every request has [`BenchConfig::retry_deadline`] as its timeout; a failure is
//! counted (`unavailable` for UNAVAILABLE / DEADLINE_EXCEEDED / a broken stream, else
//! `other`) and the claimant goes on. Like the baton loop, a claim granted after the
//! window is released (uncounted), and every granted lease is revoked, so a run leaves no
//! keys behind unless a revoke failed (the lease then expires after the TTL).

use std::time::{Duration, Instant};

use baton_workload::{report, Tally, Window};
use baton_workload::{BenchConfig, BenchReport};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};

use crate::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::pb::etcdserverpb::kv_client::KvClient;
use crate::pb::etcdserverpb::lease_client::LeaseClient;
use crate::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::pb::etcdserverpb::request_op::Request;
use crate::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp, StatusRequest, TxnRequest,
};

/// `http://host:port` for a `host:port` (or an address that already has a scheme).
pub fn url(endpoint: &str) -> String {
    if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    }
}

/// A channel to one etcd member. No per-request timeout on the channel: it would also cut
/// the long-lived keep-alive stream; the claimant times each exchange itself.
pub async fn connect(endpoint: &str, timeout: Duration) -> anyhow::Result<Channel> {
    let channel = Endpoint::from_shared(url(endpoint))?
        .connect_timeout(timeout)
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(channel)
}

/// The end of the range of every key starting with `prefix` (etcd's `GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte is 0xff (or the prefix is empty): the whole key space.
    vec![0]
}

/// How many keys start with `prefix` (a linearizable count-only Range).
pub async fn count_prefix(endpoint: &str, prefix: &str) -> anyhow::Result<i64> {
    let channel = connect(endpoint, Duration::from_secs(5)).await?;
    let answer = KvClient::new(channel)
        .range(RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            count_only: true,
            ..RangeRequest::default()
        })
        .await?
        .into_inner();
    Ok(answer.count)
}

/// The member id of the leader as `endpoint` knows it, and `endpoint`'s own member id.
pub async fn status(endpoint: &str) -> anyhow::Result<(u64, u64)> {
    let channel = connect(endpoint, Duration::from_secs(2)).await?;
    let answer = MaintenanceClient::new(channel)
        .status(StatusRequest {})
        .await?
        .into_inner();
    let own = answer.header.map(|h| h.member_id).unwrap_or_default();
    Ok((answer.leader, own))
}

/// A claimant's connections: KV, Lease and its keep-alive stream.
struct Conn {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    keepalive: KeepAlive,
    timeout: Duration,
}

/// A claimant's keep-alive stream. It is opened by the first exchange, after that
/// exchange's request is queued: etcd (grpc-go) sends the stream's response headers only
/// with its first answer, so waiting for them before sending anything would never end.
struct KeepAlive {
    tx: mpsc::Sender<LeaseKeepAliveRequest>,
    /// The requests' receiving end, until the stream is opened.
    pending: Option<mpsc::Receiver<LeaseKeepAliveRequest>>,
    rx: Option<Streaming<LeaseKeepAliveResponse>>,
}

impl KeepAlive {
    fn new() -> KeepAlive {
        let (tx, rx) = mpsc::channel(4);
        KeepAlive {
            tx,
            pending: Some(rx),
            rx: None,
        }
    }

    /// Sends `lease`'s keep-alive and waits for its answer: true when the lease is alive.
    async fn exchange(
        &mut self,
        client: &mut LeaseClient<Channel>,
        lease: i64,
    ) -> Result<bool, Status> {
        self.tx
            .send(LeaseKeepAliveRequest { id: lease })
            .await
            .map_err(|_| Status::unavailable("keep-alive stream closed"))?;
        if let Some(pending) = self.pending.take() {
            let stream = client
                .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(pending))
                .await?;
            self.rx = Some(stream.into_inner());
        }
        let Some(rx) = self.rx.as_mut() else {
            return Err(Status::unavailable("keep-alive stream not open"));
        };
        loop {
            match rx.message().await? {
                // Answers come in order; skip any for another lease (none expected).
                Some(answer) if answer.id != lease => continue,
                Some(answer) => return Ok(answer.ttl > 0),
                None => return Err(Status::unavailable("keep-alive stream ended")),
            }
        }
    }
}

impl Conn {
    async fn open(endpoint: &str, timeout: Duration) -> anyhow::Result<Conn> {
        let channel = connect(endpoint, timeout).await?;
        Ok(Conn {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
            keepalive: KeepAlive::new(),
            timeout,
        })
    }

    async fn within<T>(
        timeout: Duration,
        call: impl std::future::Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no answer within {} ms",
                timeout.as_millis()
            ))),
        }
    }

    async fn grant(&mut self, ttl: Duration) -> Result<i64, Status> {
        let request = LeaseGrantRequest {
            ttl: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1),
            id: 0,
        };
        let answer = Self::within(self.timeout, self.lease.lease_grant(request)).await?;
        let answer = answer.into_inner();
        if !answer.error.is_empty() {
            return Err(Status::unknown(answer.error));
        }
        Ok(answer.id)
    }

    async fn revoke(&mut self, lease: i64) -> Result<(), Status> {
        let request = LeaseRevokeRequest { id: lease };
        match Self::within(self.timeout, self.lease.lease_revoke(request)).await {
            Ok(_) => Ok(()),
            // Already expired: nothing left to revoke.
            Err(status) if status.code() == Code::NotFound => Ok(()),
            Err(status) => Err(status),
        }
    }

    /// Txn(if create_revision(key) == 0 then Put(key, id, lease) else Get(key)): true when
    /// the key was free and is now ours.
    async fn put_if_absent(&mut self, key: &str, lease: i64) -> Result<bool, Status> {
        let request = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Create as i32,
                key: key.as_bytes().to_vec(),
                target_union: Some(TargetUnion::CreateRevision(0)),
                range_end: Vec::new(),
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: key.as_bytes().to_vec(),
                    value: lease.to_string().into_bytes(),
                    lease,
                    prev_kv: false,
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(RangeRequest {
                    key: key.as_bytes().to_vec(),
                    ..RangeRequest::default()
                })),
            }],
        };
        let answer = Self::within(self.timeout, self.kv.txn(request)).await?;
        Ok(answer.into_inner().succeeded)
    }

    /// One keep-alive exchange: true when the lease is still alive. After a failure the
    /// stream is dropped and the next exchange opens a new one.
    async fn keep_alive(&mut self, lease: i64) -> Result<bool, Status> {
        let timeout = self.timeout;
        let result = Self::within(timeout, self.keepalive.exchange(&mut self.lease, lease)).await;
        if result.is_err() {
            self.keepalive = KeepAlive::new();
        }
        result
    }

    /// Txn(if value(key) == id then Delete(key)): true when the key was ours and is gone.
    async fn delete_if_ours(&mut self, key: &str, lease: i64) -> Result<bool, Status> {
        let request = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Value as i32,
                key: key.as_bytes().to_vec(),
                target_union: Some(TargetUnion::Value(lease.to_string().into_bytes())),
                range_end: Vec::new(),
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                    key: key.as_bytes().to_vec(),
                    ..DeleteRangeRequest::default()
                })),
            }],
            failure: Vec::new(),
        };
        let answer = Self::within(self.timeout, self.kv.txn(request)).await?;
        Ok(answer.into_inner().succeeded)
    }
}

/// Runs the workload against the etcd members in `config.endpoints` (`host:port`). Fails
/// on a bad configuration or when a claimant cannot open its connection; errors during the
/// run are counted in the report.
pub async fn run(config: BenchConfig) -> anyhow::Result<BenchReport> {
    config.validate()?;
    let mut conns = Vec::with_capacity(config.clients);
    for number in 0..config.clients {
        let endpoint = &config.endpoints[number % config.endpoints.len()];
        conns.push(Conn::open(endpoint, config.retry_deadline).await?);
    }
    let window_start = Instant::now() + config.warmup;
    let window = Window {
        start: window_start,
        end: window_start + config.duration,
    };
    let run_seed: u64 = rand::random();
    let mut tasks = tokio::task::JoinSet::new();
    for (number, conn) in conns.into_iter().enumerate() {
        let rng = StdRng::seed_from_u64(run_seed.wrapping_add(number as u64));
        tasks.spawn(claimant(conn, rng, config.clone(), window));
    }
    let mut total = Tally::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(tally) => total.merge(tally),
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => anyhow::bail!("an etcd bench claimant stopped: {error}"),
        }
    }
    Ok(report(&config, total))
}

async fn claimant(mut conn: Conn, mut rng: StdRng, config: BenchConfig, window: Window) -> Tally {
    let mut tally = Tally::default();
    while Instant::now() < window.end {
        let key = config.key(rng.gen_range(0..config.keys));

        // Claim: LeaseGrant + Txn, timed together.
        let claim_start = Instant::now();
        let claimed = match conn.grant(config.ttl).await {
            Ok(lease) => conn
                .put_if_absent(&key, lease)
                .await
                .map(|won| (lease, won))
                .map_err(|status| (Some(lease), status)),
            Err(status) => Err((None, status)),
        };
        let claim_end = Instant::now();
        let counted = window.counts(claim_start, claim_end);
        tally.attempts += u64::from(counted);
        let lease = match claimed {
            Ok((lease, true)) => {
                if counted {
                    tally.claim.record(claim_end - claim_start);
                    tally.granted += 1;
                }
                lease
            }
            Ok((lease, false)) => {
                if counted {
                    tally.claim.record(claim_end - claim_start);
                    tally.held += 1;
                }
                // The unused lease: revoke it rather than leave it to expire.
                if let Err(status) = conn.revoke(lease).await {
                    tally.last_error = Some(format!("revoke of an unused lease: {status}"));
                }
                continue;
            }
            Err((lease, status)) => {
                status_error(&mut tally, "claim", &status, counted);
                if let Some(lease) = lease {
                    let _ = conn.revoke(lease).await;
                }
                continue;
            }
        };

        // After the end, skip the renewal: only free the key again.
        let mut full_cycle = false;
        let renew_start = Instant::now();
        if renew_start < window.end {
            let renewed = conn.keep_alive(lease).await;
            let renew_end = Instant::now();
            let counted = window.counts(renew_start, renew_end);
            match renewed {
                Ok(alive) => {
                    if counted {
                        tally.renew.record(renew_end - renew_start);
                    }
                    if alive {
                        full_cycle = true;
                    } else {
                        lost(
                            &mut tally,
                            format!("renewal of {key} lost the lease"),
                            counted,
                        );
                        // Nothing to release: the lease and its key are gone.
                        continue;
                    }
                }
                Err(status) => {
                    status_error(&mut tally, "renew", &status, counted);
                }
            }
        }

        // Release: Txn(value == id → Delete) + LeaseRevoke, timed together.
        let release_start = Instant::now();
        let deleted = conn.delete_if_ours(&key, lease).await;
        let revoked = conn.revoke(lease).await;
        let release_end = Instant::now();
        let counted = window.counts(release_start, release_end);
        match (deleted, revoked) {
            (Ok(true), Ok(())) => {
                if counted {
                    tally.release.record(release_end - release_start);
                }
            }
            (Ok(false), Ok(())) => {
                if counted {
                    tally.release.record(release_end - release_start);
                }
                full_cycle = false;
                lost(
                    &mut tally,
                    format!("release of {key} lost the lease"),
                    counted,
                );
            }
            (Err(status), _) | (_, Err(status)) => {
                full_cycle = false;
                status_error(&mut tally, "release", &status, counted);
            }
        }
        if full_cycle && window.counts(claim_start, release_end) {
            tally.cycles += 1;
            tally.cycle.record(release_end - claim_start);
        }
    }
    tally
}

/// Notes an etcd call that got no answer; counts it if it is inside the window.
fn status_error(tally: &mut Tally, what: &str, status: &Status, counted: bool) {
    if counted {
        match status.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => {
                tally.errors.unavailable += 1
            }
            _ => tally.errors.other += 1,
        }
    }
    tally.last_error = Some(format!("{what}: {status}"));
}

/// Notes a renewal or release that found the lease gone.
fn lost(tally: &mut Tally, message: String, counted: bool) {
    tally.errors.lost += u64::from(counted);
    tally.last_error = Some(message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"bench/"), b"bench0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn urls_get_a_scheme_once() {
        assert_eq!(url("127.0.0.1:2379"), "http://127.0.0.1:2379");
        assert_eq!(url("http://h:1"), "http://h:1");
    }
}
