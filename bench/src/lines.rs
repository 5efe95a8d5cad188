//! The waiting-in-line bench: C clients take turns on K keys, each waiting for its key in
//! line, holding it for `hold` and releasing it, on baton and on etcd side by side.
//!
//! - **baton**: `Client::wait_in_line` (the cluster's own line: the release that frees a key
//!   grants it to the oldest waiter in the same entry; the waiter hears of it on its watch
//!   and confirms with one more `Wait`), then `release`.
//! - **etcd**: its `concurrency.Mutex` recipe, as clientv3 does it (etcd 3.4): each client
//!   has a session lease (granted once, longer than the run, so no keep-alives); a lock puts
//!   `PREFIX/LEASE` with the lease if absent (its create revision is its place), then, until
//!   no key under the prefix was created before its own, watches the last one created before
//!   it for its delete (FIFO by create revision); unlock deletes its key. Each wait opens a
//!   watch stream of its own (clientv3 shares one per client: a little more work for etcd
//!   here).
//!
//! Measured over the window: cycles (lock, hold, unlock) per second; the hand-on, from the
//! moment a holder sends its release to the moment the next holder knows it holds the key
//! (when that next one was already waiting); the time from asking to holding; and, of the
//! attempts, how many were granted before [`LOCK_TIMEOUT`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use baton_client::{Client, LineOutcome, ReleaseOutcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tonic::transport::Channel;
use tonic::Status;

use crate::etcd::{connect, prefix_end};
use crate::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::pb::etcdserverpb::kv_client::KvClient;
use crate::pb::etcdserverpb::lease_client::LeaseClient;
use crate::pb::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::pb::etcdserverpb::request_op::Request;
use crate::pb::etcdserverpb::watch_client::WatchClient;
use crate::pb::etcdserverpb::watch_request::RequestUnion;
use crate::pb::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest, WatchCreateRequest, WatchRequest,
};

/// Most clients one run starts.
pub const LINE_CLIENTS_MAX: usize = 1024;
/// A lock not granted within this long counts as not won (and is given up).
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// The TTL of a baton waiter's place and lease.
const BATON_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct LineConfig {
    pub clients: usize,
    pub keys: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// How long a holder keeps the key.
    pub hold: Duration,
    /// Every key of the run is under it (runs on one cluster do not meet).
    pub prefix: String,
    /// How many hold a key at once: 1, a lock; N > 1, one of N permits (baton's `claim
    /// --permits N` in its line; on etcd, the Mutex recipe counting N ahead, see
    /// `EtcdLocker::lock`).
    pub permits: u32,
}

impl LineConfig {
    fn validate(&self) -> anyhow::Result<()> {
        if self.clients == 0 || self.clients > LINE_CLIENTS_MAX {
            bail!("clients must be 1 to {LINE_CLIENTS_MAX}");
        }
        if self.keys == 0 || self.keys > self.clients {
            bail!("keys must be 1 to the number of clients");
        }
        if self.permits == 0 || self.permits > baton_client::PERMITS_MAX {
            bail!("permits must be 1 to {}", baton_client::PERMITS_MAX);
        }
        if self.warmup + self.duration > Duration::from_secs(50) {
            bail!("warm-up and duration must add up to at most 50 s (etcd's session lease)");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LineReport {
    pub system: &'static str,
    pub clients: usize,
    pub keys: usize,
    pub cycles: u64,
    pub cycles_per_s: f64,
    /// Hand-ons measured (a release while the next holder was waiting).
    pub hand_ons: usize,
    pub hand_on_p50_ms: f64,
    pub hand_on_p99_ms: f64,
    /// From asking for the key to holding it.
    pub acquire_p50_ms: f64,
    pub acquire_p99_ms: f64,
    /// A release, sent to answered: one entry round under the same load, the yardstick of
    /// the hand-on.
    pub release_p50_ms: f64,
    pub release_p99_ms: f64,
    /// CPU seconds the system's server processes used over the run (set by the caller).
    pub server_cpu_s: f64,
    /// Lock attempts in the window, and those granted before the timeout.
    pub attempts: u64,
    pub granted: u64,
    pub win_rate: f64,
    pub errors: u64,
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Tally {
    cycles: u64,
    attempts: u64,
    granted: u64,
    errors: u64,
    last_error: Option<String>,
    acquires: Vec<Duration>,
    releases: Vec<Duration>,
    /// Grants in the window: the key, the revision of the write that handed it on (baton: the
    /// grant's token; etcd: the delete that let the waiter in; 0 for neither), when it was
    /// asked and when it was held.
    grants: Vec<(String, u64, Instant, Instant)>,
    /// Releases: the key, the revision of the write, and when it was sent.
    freed: Vec<(String, u64, Instant)>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.cycles += other.cycles;
        self.attempts += other.attempts;
        self.granted += other.granted;
        self.errors += other.errors;
        self.last_error = other.last_error.or(self.last_error.take());
        self.acquires.extend(other.acquires);
        self.releases.extend(other.releases);
        self.grants.extend(other.grants);
        self.freed.extend(other.freed);
    }

    /// Notes a lock asked at `asked` and held at `held` (both in the window), handed on by
    /// the write of revision `by` (0: by none, e.g. granted at once).
    fn held(&mut self, key: &str, by: u64, asked: Instant, held: Instant) {
        self.granted += 1;
        self.acquires.push(held - asked);
        self.grants.push((key.to_owned(), by, asked, held));
    }

    /// The hand-ons: for each grant that the release of the same key at revision `by` handed
    /// on while the grantee waited, from that release's send to the grantee holding it.
    fn hand_ons(&self) -> Vec<Duration> {
        let sent: HashMap<(&str, u64), Instant> = self
            .freed
            .iter()
            .map(|(key, revision, sent)| ((key.as_str(), *revision), *sent))
            .collect();
        self.grants
            .iter()
            .filter_map(|(key, by, asked, held)| {
                let released = *sent.get(&(key.as_str(), *by))?;
                (released > *asked).then(|| held.saturating_duration_since(released))
            })
            .collect()
    }

    /// Notes a release sent at `sent` and answered now, if in the window.
    fn released(&mut self, window: &Window, sent: Instant) {
        let now = Instant::now();
        if window.counts(sent, now) {
            self.releases.push(now - sent);
        }
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        self.last_error = Some(what);
    }

    fn report(mut self, system: &'static str, cfg: &LineConfig) -> LineReport {
        let mut hand_ons = self.hand_ons();
        let pct = |v: &mut Vec<Duration>, p: f64| -> f64 {
            if v.is_empty() {
                return 0.0;
            }
            v.sort();
            let at = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
            v[at].as_secs_f64() * 1e3
        };
        LineReport {
            system,
            clients: cfg.clients,
            keys: cfg.keys,
            cycles: self.cycles,
            cycles_per_s: self.cycles as f64 / cfg.duration.as_secs_f64(),
            hand_ons: hand_ons.len(),
            hand_on_p50_ms: pct(&mut hand_ons, 0.50),
            hand_on_p99_ms: pct(&mut hand_ons, 0.99),
            acquire_p50_ms: pct(&mut self.acquires, 0.50),
            acquire_p99_ms: pct(&mut self.acquires, 0.99),
            release_p50_ms: pct(&mut self.releases, 0.50),
            release_p99_ms: pct(&mut self.releases, 0.99),
            server_cpu_s: 0.0,
            attempts: self.attempts,
            granted: self.granted,
            win_rate: if self.attempts == 0 {
                0.0
            } else {
                self.granted as f64 / self.attempts as f64
            },
            errors: self.errors,
            last_error: self.last_error,
        }
    }
}

/// The measured window: [start, end).
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn after(cfg: &LineConfig) -> Window {
        let start = Instant::now() + cfg.warmup;
        Window {
            start,
            end: start + cfg.duration,
        }
    }

    fn counts(&self, from: Instant, to: Instant) -> bool {
        from >= self.start && to <= self.end
    }
}

impl LineConfig {
    fn key(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }
}

/// Runs the baton side: `clients` clients of `endpoints` (client `i` on endpoint `i % n`).
pub async fn run_baton(endpoints: &[String], cfg: &LineConfig) -> anyhow::Result<LineReport> {
    cfg.validate()?;
    let mut clients = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        let config = baton_client::ClientConfig {
            endpoints: vec![endpoints[i % endpoints.len()].clone()],
            ..baton_client::ClientConfig::default()
        };
        clients.push(Client::connect(config).await?);
    }
    let window = Window::after(cfg);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, client) in clients.into_iter().enumerate() {
        let cfg = cfg.clone();
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(i as u64);
            let mut tally = Tally::default();
            let name = format!("waiter-{i}");
            while Instant::now() < window.end {
                let key = cfg.key(rng.gen_range(0..cfg.keys));
                let asked = Instant::now();
                let outcome = client
                    .wait_permit_in_line(&key, &name, BATON_TTL, cfg.permits, LOCK_TIMEOUT)
                    .await;
                let held = Instant::now();
                let counted = window.counts(asked, held);
                tally.attempts += u64::from(counted);
                let token = match outcome {
                    Ok(LineOutcome::Granted(grant)) => grant.lease.token,
                    Ok(LineOutcome::InLine(_)) => continue,
                    Err(e) => {
                        tally.error(format!("wait: {e}"));
                        continue;
                    }
                };
                if counted {
                    tally.held(&key, token, asked, held);
                }
                if !cfg.hold.is_zero() {
                    tokio::time::sleep(cfg.hold).await;
                }
                let sent = Instant::now();
                let released = client.release_at(&key, token, "").await;
                tally.released(&window, sent);
                match released {
                    Ok((ReleaseOutcome::Released(_), revision)) => {
                        tally.freed.push((key.clone(), revision, sent));
                        if window.counts(asked, Instant::now()) {
                            tally.cycles += 1;
                        }
                    }
                    Ok((ReleaseOutcome::Lost { .. }, _)) => tally.error(format!("{key} lost")),
                    Err(e) => tally.error(format!("release: {e}")),
                }
            }
            tally
        });
    }
    let mut total = Tally::default();
    while let Some(done) = tasks.join_next().await {
        total.merge(done?);
    }
    Ok(total.report("baton", cfg))
}

/// One etcd client of the mutex recipe: its connections and its session lease.
struct EtcdLocker {
    kv: KvClient<Channel>,
    watch: WatchClient<Channel>,
    lease: i64,
}

impl EtcdLocker {
    async fn open(endpoint: &str) -> anyhow::Result<EtcdLocker> {
        let channel = connect(endpoint, LOCK_TIMEOUT).await?;
        let mut leases = LeaseClient::new(channel.clone());
        let granted = leases
            .lease_grant(LeaseGrantRequest { ttl: 60, id: 0 })
            .await?
            .into_inner();
        if !granted.error.is_empty() {
            bail!("etcd lease grant: {}", granted.error);
        }
        Ok(EtcdLocker {
            kv: KvClient::new(channel.clone()),
            watch: WatchClient::new(channel),
            lease: granted.id,
        })
    }

    fn my_key(&self, prefix: &str) -> String {
        format!("{prefix}/{:x}", self.lease)
    }

    /// `concurrency.Mutex.Lock`: puts its key if absent, then waits for every key created
    /// before it under the prefix to be deleted. With `permits` N > 1, a semaphore on the
    /// same recipe: it holds once fewer than N keys were created before its own, and until
    /// then re-counts them at every delete under the prefix (etcd has no semaphore of its
    /// own; any of the N ahead may leave first, so one key's delete is not enough to watch).
    /// Returns the revision of the delete that let it in (0: none, it held at once).
    async fn lock(&mut self, prefix: &str, permits: u32) -> Result<u64, Status> {
        let me = self.my_key(prefix);
        let put = TxnRequest {
            compare: vec![Compare {
                result: CompareResult::Equal as i32,
                target: CompareTarget::Create as i32,
                key: me.as_bytes().to_vec(),
                target_union: Some(TargetUnion::CreateRevision(0)),
                range_end: Vec::new(),
            }],
            success: vec![RequestOp {
                request: Some(Request::RequestPut(PutRequest {
                    key: me.as_bytes().to_vec(),
                    value: Vec::new(),
                    lease: self.lease,
                    prev_kv: false,
                })),
            }],
            failure: vec![RequestOp {
                request: Some(Request::RequestRange(RangeRequest {
                    key: me.as_bytes().to_vec(),
                    ..RangeRequest::default()
                })),
            }],
        };
        let answer = self.kv.txn(put).await?.into_inner();
        let my_rev = match answer.header {
            Some(h) if answer.succeeded => h.revision,
            _ => answer
                .responses
                .first()
                .and_then(|r| match &r.response {
                    Some(crate::pb::etcdserverpb::response_op::Response::ResponseRange(range)) => {
                        range.kvs.first().map(|kv| kv.create_revision)
                    }
                    _ => None,
                })
                .ok_or_else(|| Status::internal("no create revision for my key"))?,
        };
        let dir = format!("{prefix}/");
        if permits > 1 {
            return self.wait_for_a_permit(&dir, my_rev, permits).await;
        }
        let mut by = 0;
        loop {
            // The last key created before mine, if any: wait for its delete.
            let before = RangeRequest {
                key: dir.as_bytes().to_vec(),
                range_end: prefix_end(dir.as_bytes()),
                limit: 1,
                sort_order: SortOrder::Descend as i32,
                sort_target: SortTarget::Create as i32,
                max_create_revision: my_rev - 1,
                ..RangeRequest::default()
            };
            let range = self.kv.range(before).await?.into_inner();
            let Some(ahead) = range.kvs.first() else {
                return Ok(by);
            };
            let from = range.header.map_or(0, |h| h.revision) + 1;
            by = self.wait_delete(&ahead.key, Vec::new(), from).await?;
        }
    }

    /// The semaphore's wait: holds once fewer than `permits` keys under `dir` were created
    /// before `my_rev`, re-counting them at every delete under `dir`.
    async fn wait_for_a_permit(
        &mut self,
        dir: &str,
        my_rev: i64,
        permits: u32,
    ) -> Result<u64, Status> {
        let mut by = 0;
        loop {
            // etcd's `count` ignores the revision filters (it counts the whole range), so
            // the keys themselves are fetched: at most N of those created before mine.
            let ahead = RangeRequest {
                key: dir.as_bytes().to_vec(),
                range_end: prefix_end(dir.as_bytes()),
                keys_only: true,
                limit: i64::from(permits),
                sort_order: SortOrder::Ascend as i32,
                sort_target: SortTarget::Create as i32,
                max_create_revision: my_rev - 1,
                ..RangeRequest::default()
            };
            let range = self.kv.range(ahead).await?.into_inner();
            if range.kvs.len() < permits as usize {
                return Ok(by);
            }
            let from = range.header.map_or(0, |h| h.revision) + 1;
            by = self
                .wait_delete(dir.as_bytes(), prefix_end(dir.as_bytes()), from)
                .await?;
        }
    }

    /// Watches `key` (to `range_end`, if not empty) from revision `from` until a delete;
    /// returns the delete's revision.
    async fn wait_delete(
        &mut self,
        key: &[u8],
        range_end: Vec<u8>,
        from: i64,
    ) -> Result<u64, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                key: key.to_vec(),
                range_end,
                start_revision: from,
            })),
        })
        .await
        .map_err(|_| Status::internal("watch request not sent"))?;
        let mut stream = self
            .watch
            .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        while let Some(answer) = stream.message().await? {
            if answer.canceled {
                return Err(Status::aborted(answer.cancel_reason));
            }
            let deleted = answer
                .events
                .iter()
                .find(|e| e.r#type == crate::pb::mvccpb::event::EventType::Delete as i32);
            if let Some(event) = deleted {
                return Ok(event.kv.as_ref().map_or(0, |kv| kv.mod_revision as u64));
            }
        }
        Err(Status::unavailable("watch stream ended"))
    }

    /// `concurrency.Mutex.Unlock`: deletes its key; returns the delete's revision.
    async fn unlock(&mut self, prefix: &str) -> Result<u64, Status> {
        let me = self.my_key(prefix);
        let deleted = self
            .kv
            .delete_range(DeleteRangeRequest {
                key: me.into_bytes(),
                ..DeleteRangeRequest::default()
            })
            .await?
            .into_inner();
        Ok(deleted.header.map_or(0, |h| h.revision as u64))
    }
}

/// Runs the etcd side against the members in `endpoints` (client `i` on `i % n`).
pub async fn run_etcd(endpoints: &[String], cfg: &LineConfig) -> anyhow::Result<LineReport> {
    cfg.validate()?;
    let mut lockers = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        lockers.push(EtcdLocker::open(&endpoints[i % endpoints.len()]).await?);
    }
    let window = Window::after(cfg);
    let mut tasks = tokio::task::JoinSet::new();
    for (i, mut locker) in lockers.into_iter().enumerate() {
        let cfg = cfg.clone();
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(i as u64);
            let mut tally = Tally::default();
            while Instant::now() < window.end {
                let key = cfg.key(rng.gen_range(0..cfg.keys));
                let asked = Instant::now();
                let locked =
                    tokio::time::timeout(LOCK_TIMEOUT, locker.lock(&key, cfg.permits)).await;
                let held = Instant::now();
                let counted = window.counts(asked, held);
                tally.attempts += u64::from(counted);
                match locked {
                    Ok(Ok(by)) => {
                        if counted {
                            tally.held(&key, by, asked, held);
                        }
                    }
                    Ok(Err(e)) => {
                        tally.error(format!("lock: {e}"));
                        let _ = locker.unlock(&key).await;
                        continue;
                    }
                    Err(_) => {
                        // Given up: out of the line, as clientv3's Lock does on its context.
                        let _ = locker.unlock(&key).await;
                        continue;
                    }
                }
                if !cfg.hold.is_zero() {
                    tokio::time::sleep(cfg.hold).await;
                }
                let sent = Instant::now();
                let unlocked = locker.unlock(&key).await;
                tally.released(&window, sent);
                match unlocked {
                    Ok(revision) => {
                        tally.freed.push((key.clone(), revision, sent));
                        if window.counts(asked, Instant::now()) {
                            tally.cycles += 1;
                        }
                    }
                    Err(e) => tally.error(format!("unlock: {e}")),
                }
            }
            tally
        });
    }
    let mut total = Tally::default();
    while let Some(done) = tasks.join_next().await {
        total.merge(done?);
    }
    Ok(total.report("etcd", cfg))
}
