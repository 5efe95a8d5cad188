//! Clients: workers that drive baton (or, for the canary, a list in harness memory) and
//! record every operation in the history.
//!
//! - `lease-register`: claim, renew, release, handoff offer/accept, read, and fenced writes
//!   of the record's list (read after the grant, then write list + element with the token),
//!   over keys that rotate after [`KEY_OPS_MAX`] operations so each key's history stays small
//!   enough for the linearizability search.
//! - `fenced-append`: claim, read the list, pause up to 1.5 × TTL (past the lease on purpose
//!   now and then), write list + element with the token: stale writes must be refused and
//!   acknowledged elements must survive.
//! - `guard-holders`: claim through the client library's guard (`LeaseGuard`, renewed in the
//!   background, told of its loss by the cluster's push), hold it a while, release; each
//!   believed window is written as a `belief` line, how it ended, and whether the loss was
//!   pushed; after a loss the slot moves on to a fresh key (a revoked one stays unclaimable
//!   for the TTL). With [`run_revoker`] revoking the keys in use, the `notice` checker holds
//!   the holders to the bound on hearing of a loss.
//! - `unfenced-canary`: the same loop against a list in harness memory, guarded only by the
//!   lease the worker believes it holds, with one pause past the TTL. Its lost update must be
//!   caught by the list checker: proof that the checkers can find a bug.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_client::{
    ClaimOutcome, Client, ClientConfig, HandoffNote, ReadMode, RecordPatch, ReleaseOutcome,
    RenewOutcome,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{decode_list, encode_list, Call, Elem, Holding, Kind, Nanos, Reply};

mod churn;
mod guarded;
mod lines;
mod outcome;
mod permits;
mod recorder;
mod sets;
mod shared;
mod tasks;

use outcome::{failed, release_said};

pub use churn::CHURN_CLIENTS;
pub use guarded::{run_revoker, GUARD_HOLD_MS, GUARD_TTL, REVOKE_GAP_MS};
pub use lines::{
    line_keys, line_leak_check, LINE_LEAK_LIMIT, PERMIT_WAIT_KEYS, PERMIT_WAIT_N, WAIT_KEYS,
    WAIT_TTL,
};
pub use permits::{
    leak_check, permit_keys, PERMIT_HOLD_MS, PERMIT_KEYS, PERMIT_LEAK_LIMIT, PERMIT_TTL,
};
pub use recorder::Recorder;
pub use sets::{SET_HOLD_MS, SET_KEYS, SET_TTL};
pub use shared::{shared_keys, shared_leak_check, SHARED_KEYS, SHARED_LEAK_LIMIT, SHARED_PHASE};
pub use tasks::{TASK_HOLD_MS, TASK_TTL};

/// Operations on one key before its workers move on to a fresh key.
pub const KEY_OPS_MAX: u64 = 120;
/// A client operation with no answer after this long is recorded as `info`.
pub const OP_TIMEOUT: Duration = Duration::from_secs(6);
/// A pinned reader's patience per read: longer than a pause fault (3 × TTL), so it is still
/// waiting on a paused leader when it wakes up.
pub const PINNED_READ_TIMEOUT: Duration = Duration::from_secs(8);
/// Pinned readers per node: more than one, so that a read is invoked while another waits on
/// a paused node.
pub const PINNED_READERS_PER_NODE: usize = 2;
/// Pinned readers read among this many of the newest keys.
pub const ACTIVE_KEYS: usize = 8;
/// A pinned reader waits up to this long between reads.
pub const PINNED_READ_GAP_MS: u64 = 40;
/// How long a worker keeps a lease in reserve: it stops acting this long before its
/// believed deadline.
pub const BELIEF_MARGIN: Duration = Duration::from_millis(150);

/// A process: one client id, one operation at a time; replaced after an `info`.
pub struct Proc {
    pub process: u64,
    pub client: Client,
    pub client_id: String,
    pub name: String,
}

/// What every worker shares.
pub struct Ctx {
    pub rec: Arc<Recorder>,
    pub endpoints: Vec<String>,
    pub ttl: Duration,
    pub drift_margin: f64,
    pub stop: AtomicBool,
    /// Canary lists, by key.
    pub memory: Mutex<HashMap<String, Vec<Elem>>>,
    /// Every key a workload used: (workload, key).
    pub keys: Mutex<Vec<(String, String)>>,
    /// The set canary: `set-takers` claim their sets key by key with single claims and keep
    /// what they got when a key is held (the sequential recipe users build by hand), so the
    /// `sets` checker must see grants that are not whole and blockers nobody was granted.
    pub sets_key_by_key: bool,
    /// The task canary: `task-takers` take the first open task of a board read, with no
    /// claim (a board read is not a claim: the duplicate takers of hand-made boards), so the
    /// `tasks` checker must see two takers holding one task at once.
    pub tasks_from_board_read: bool,
}

impl Ctx {
    pub fn new_proc(&self, name: &str) -> Proc {
        self.proc_with(
            name,
            ClientConfig {
                request_timeout: Duration::from_millis(1000),
                retry_deadline: Duration::from_millis(4000),
                drift_margin: self.drift_margin,
                ..ClientConfig::with_endpoints(self.endpoints.clone())
            },
        )
    }

    /// A process with a fresh client of `config`.
    fn proc_with(&self, name: &str, config: ClientConfig) -> Proc {
        let valid = config.validate().expect("harness client config");
        let client_id = valid.client_id().to_string();
        Proc {
            process: self.rec.next_process.fetch_add(1, Ordering::Relaxed),
            client: Client::from_valid(valid),
            client_id,
            name: name.to_string(),
        }
    }

    /// A process whose client talks to `endpoint` only: no leader following (a follower
    /// forwards to the leader it knows), and patient, so that it is still attached to a node
    /// that is isolated or paused.
    pub fn new_pinned_proc(&self, name: &str, endpoint: &str) -> Proc {
        self.proc_with(
            name,
            ClientConfig {
                request_timeout: PINNED_READ_TIMEOUT,
                retry_deadline: PINNED_READ_TIMEOUT,
                drift_margin: self.drift_margin,
                follow_leader_hints: false,
                ..ClientConfig::with_endpoints([endpoint.to_string()])
            },
        )
    }

    /// One of the keys in use now (the newest ones noted), with its workload.
    fn active_key(&self, rng: &mut StdRng) -> Option<(String, String)> {
        let keys = self.keys.lock().expect("keys lock");
        let baton: Vec<&(String, String)> = keys
            .iter()
            .rev()
            .filter(|(w, _)| w == "lease-register" || w == "fenced-append" || w == "guard-holders")
            .take(ACTIVE_KEYS)
            .collect();
        (!baton.is_empty()).then(|| baton[rng.gen_range(0..baton.len())].clone())
    }

    /// One of the newest [`ACTIVE_KEYS`] / 2 keys of a workload: `guard-holders` half the time
    /// when it runs (its leases are the ones the `notice` checker follows), else one chosen
    /// evenly among the others in use (so that a workload whose keys rotate slowly is not
    /// crowded out by one whose keys rotate fast).
    fn revoker_key(&self, rng: &mut StdRng) -> Option<(String, String)> {
        let keys = self.keys.lock().expect("keys lock");
        let mut workloads: Vec<&str> = keys
            .iter()
            .map(|(w, _)| w.as_str())
            .filter(|w| *w != "unfenced-canary")
            .collect();
        workloads.sort_unstable();
        workloads.dedup();
        if workloads.is_empty() {
            return None;
        }
        let guarded = workloads.contains(&"guard-holders");
        let workload = if guarded && (workloads.len() == 1 || rng.gen_bool(0.5)) {
            "guard-holders"
        } else {
            workloads.retain(|w| *w != "guard-holders");
            workloads[rng.gen_range(0..workloads.len())]
        };
        let newest: Vec<&(String, String)> = keys
            .iter()
            .rev()
            .filter(|(w, _)| w == workload)
            .take(ACTIVE_KEYS / 2)
            .collect();
        Some(newest[rng.gen_range(0..newest.len())].clone())
    }

    fn note_key(&self, workload: &str, key: &str) {
        let mut keys = self.keys.lock().expect("keys lock");
        if !keys.iter().any(|(w, k)| w == workload && k == key) {
            keys.push((workload.to_string(), key.to_string()));
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Performs `call` as process `p` and records it. An `info` result retires the process:
/// the caller must replace it ([`Ctx::new_proc`]).
pub async fn perform(ctx: &Ctx, p: &Proc, workload: &str, key: &str, call: Call) -> (Kind, Reply) {
    ctx.note_key(workload, key);
    ctx.rec.op(p, workload, key, &call, Kind::Invoke, None);
    let (kind, reply) = match tokio::time::timeout(OP_TIMEOUT, execute(ctx, p, key, &call)).await {
        Ok(r) => r,
        Err(_) => (
            Kind::Info,
            Reply::Unknown {
                message: format!("no answer within {} ms", OP_TIMEOUT.as_millis()),
            },
        ),
    };
    ctx.rec
        .op(p, workload, key, &call, kind, Some(reply.clone()));
    (kind, reply)
}

fn holding(lease: &baton_client::LeaseInfo) -> Holding {
    Holding {
        client: lease.holder_client_id.clone(),
        token: lease.token,
    }
}

async fn execute(ctx: &Ctx, p: &Proc, key: &str, call: &Call) -> (Kind, Reply) {
    let c = &p.client;
    match call {
        Call::Claim { ttl_ms } => match c.claim(key, &p.name, Duration::from_millis(*ttl_ms)).await
        {
            Ok(ClaimOutcome::Granted(g)) => (
                Kind::Ok,
                Reply::Granted {
                    token: g.lease.token,
                    already_held: g.already_held,
                    safe_deadline_ns: Some(ctx.rec.ns_of(g.safe_deadline)),
                },
            ),
            Ok(ClaimOutcome::Held { lease, .. }) => (
                Kind::Fail,
                Reply::Held {
                    holder: holding(&lease),
                },
            ),
            Err(e) => failed(e),
        },
        Call::Renew { token } => match c.renew(key, *token).await {
            Ok(RenewOutcome::Renewed(g)) => (
                Kind::Ok,
                Reply::Renewed {
                    safe_deadline_ns: Some(ctx.rec.ns_of(g.safe_deadline)),
                },
            ),
            Ok(RenewOutcome::Lost { current }) => (
                Kind::Fail,
                Reply::Lost {
                    current: current.as_ref().map(holding),
                },
            ),
            Err(e) => failed(e),
        },
        Call::Release { token } => match c.release(key, *token).await {
            Ok(ReleaseOutcome::Released(_)) => (Kind::Ok, Reply::Released),
            Ok(ReleaseOutcome::Lost { current }) => (
                Kind::Fail,
                Reply::Lost {
                    current: current.as_ref().map(holding),
                },
            ),
            Err(e) => failed(e),
        },
        Call::Offer {
            token,
            to,
            offer_ttl_ms,
        } => {
            let note = HandoffNote {
                done: format!("offered by {}", p.name),
                ..HandoffNote::default()
            };
            match c
                .offer(key, *token, to, note, Duration::from_millis(*offer_ttl_ms))
                .await
            {
                Ok(_) => (Kind::Ok, Reply::Offered),
                Err(e) => failed(e),
            }
        }
        Call::Accept { ttl_ms } => {
            match c.accept(key, &p.name, Duration::from_millis(*ttl_ms)).await {
                Ok(a) => (
                    Kind::Ok,
                    Reply::Granted {
                        token: a.lease.token,
                        already_held: false,
                        safe_deadline_ns: Some(ctx.rec.ns_of(a.safe_deadline)),
                    },
                ),
                Err(e) => failed(e),
            }
        }
        Call::Read => match c.record(key, ReadMode::Linearizable).await {
            Ok(view) => {
                let text = view
                    .record
                    .fields
                    .get("list")
                    .map(String::as_str)
                    .unwrap_or("");
                match decode_list(text) {
                    Some(list) => (
                        Kind::Ok,
                        Reply::Read {
                            holder: view.lease.as_ref().map(holding),
                            list,
                        },
                    ),
                    // A definite answer showing a list nobody wrote: the checkers fail on it.
                    None => (
                        Kind::Ok,
                        Reply::Corrupt {
                            text: text.to_string(),
                        },
                    ),
                }
            }
            Err(e) => (
                Kind::Info,
                Reply::Unknown {
                    message: e.to_string(),
                },
            ),
        },
        Call::Write { token, list, .. } => {
            let mut patch = RecordPatch::default();
            patch.set_fields.insert("list".into(), encode_list(list));
            match c.update(key, *token, patch).await {
                Ok(_) => (Kind::Ok, Reply::Written),
                Err(e) => failed(e),
            }
        }
        Call::Revoke { now } => match c
            .revoke_with(key, "chaos: revoked by the harness", *now)
            .await
        {
            Ok(r) => (
                Kind::Ok,
                Reply::Revoked {
                    token: r.revoked.map(|l| l.token),
                },
            ),
            Err(e) => failed(e),
        },
        Call::MemRead => {
            let list = ctx
                .memory
                .lock()
                .expect("memory lock")
                .get(key)
                .cloned()
                .unwrap_or_default();
            (Kind::Ok, Reply::Read { holder: None, list })
        }
        Call::MemWrite { list } => {
            ctx.memory
                .lock()
                .expect("memory lock")
                .insert(key.to_string(), list.clone());
            (Kind::Ok, Reply::Written)
        }
    }
}

/// A lease a worker believes it holds.
#[derive(Debug, Clone, Copy)]
struct Belief {
    token: u64,
    /// `inv + ttl × (1 − drift_margin)` of the latest ok grant or renewal.
    until: Instant,
}

impl Belief {
    fn live(&self) -> bool {
        Instant::now() + BELIEF_MARGIN < self.until
    }
}

/// A group of workers sharing a sequence of keys.
pub struct Slot {
    pub workload: &'static str,
    pub index: usize,
    pub names: Vec<String>,
    generation: AtomicU64,
    ops: AtomicU64,
}

impl Slot {
    pub fn new(workload: &'static str, index: usize, workers: usize, run_tag: &str) -> Slot {
        // Two letters of the workload (`permit-waiters` apart from `permit-holders`).
        let short = match workload {
            "permit-waiters" => "pw",
            w => &w[..2],
        };
        Slot {
            workload,
            index,
            names: (0..workers)
                .map(|w| format!("{run_tag}-{short}{index}w{w}"))
                .collect(),
            generation: AtomicU64::new(0),
            ops: AtomicU64::new(0),
        }
    }

    fn key(&self) -> String {
        let short = match self.workload {
            "lease-register" => "lr",
            "fenced-append" => "fa",
            "guard-holders" => "gh",
            "task-takers" => "tt",
            "set-takers" => "ts",
            "waiters" => "wl",
            _ => "canary",
        };
        format!(
            "{short}/{}-{}",
            self.index,
            self.generation.load(Ordering::Relaxed)
        )
    }

    /// Moves the slot on to a fresh key, if it is still on `key`.
    fn rotate(&self, key: &str) {
        if key == self.key() {
            self.ops.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts an operation; rotates to a fresh key when this one has had enough.
    fn count(&self, key: &str) {
        // An operation that ran on a key the slot has already left counts for nothing.
        if key != self.key() {
            return;
        }
        if self.ops.fetch_add(1, Ordering::Relaxed) + 1 >= KEY_OPS_MAX {
            self.ops.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Worker {
    ctx: Arc<Ctx>,
    slot: Arc<Slot>,
    w: usize,
    proc_: Proc,
    rng: StdRng,
    belief: Option<Belief>,
    /// The list as this worker last read it since its latest grant (None: read first).
    list: Option<Vec<Elem>>,
    key: String,
}

impl Worker {
    fn new(ctx: Arc<Ctx>, slot: Arc<Slot>, w: usize, seed: u64) -> Worker {
        let proc_ = ctx.new_proc(&slot.names[w]);
        let key = slot.key();
        Worker {
            ctx,
            slot,
            w,
            proc_,
            rng: StdRng::seed_from_u64(seed),
            belief: None,
            list: None,
            key,
        }
    }

    fn ttl_ms(&self) -> u64 {
        self.ctx.ttl.as_millis() as u64
    }

    async fn op(&mut self, call: Call) -> (Kind, Reply, Nanos) {
        let inv = self.ctx.rec.now_ns();
        let (kind, reply) =
            perform(&self.ctx, &self.proc_, self.slot.workload, &self.key, call).await;
        self.slot.count(&self.key);
        if kind == Kind::Info {
            // Retired: whatever it held or wrote is now unknown.
            self.proc_ = self.ctx.new_proc(&self.slot.names[self.w]);
            self.belief = None;
            self.list = None;
        }
        (kind, reply, inv)
    }

    /// The worker acts on `token` until the client library's safe deadline from `reply`
    /// (`send_time + ttl × (1 − drift_margin)`), or the same counted from `inv_ns` if the
    /// reply has none.
    fn believe(&mut self, token: u64, reply: &Reply, inv_ns: Nanos) {
        let deadline = match reply {
            Reply::Granted {
                safe_deadline_ns, ..
            }
            | Reply::Renewed { safe_deadline_ns } => *safe_deadline_ns,
            _ => None,
        };
        let ttl = self.ctx.ttl.mul_f64(1.0 - self.ctx.drift_margin);
        let until = deadline
            .map(|ns| self.ctx.rec.instant_at(ns))
            .unwrap_or_else(|| self.ctx.rec.instant_at(inv_ns) + ttl);
        self.belief = Some(Belief { token, until });
    }

    fn follow_key(&mut self) {
        let key = self.slot.key();
        if key != self.key {
            self.key = key;
            self.belief = None;
            self.list = None;
        }
    }

    async fn nap(&mut self, max_ms: u64) {
        let ms = self.rng.gen_range(10..=max_ms.max(10));
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn claim(&mut self) {
        let ttl_ms = self.ttl_ms();
        let (kind, reply, inv) = self.op(Call::Claim { ttl_ms }).await;
        if let (
            Kind::Ok,
            Reply::Granted {
                token,
                already_held,
                ..
            },
        ) = (kind, &reply)
        {
            if !already_held {
                self.list = None;
            }
            self.believe(*token, &reply, inv);
        }
    }

    async fn read(&mut self) -> Option<Vec<Elem>> {
        let (kind, reply, _) = self.op(Call::Read).await;
        match (kind, reply) {
            (Kind::Ok, Reply::Read { list, .. }) => Some(list),
            _ => None,
        }
    }

    async fn write(&mut self, token: u64, base: Vec<Elem>, late: bool) -> Kind {
        let mut list = base;
        list.push(Elem {
            token,
            uid: self.ctx.rec.uid(),
        });
        let (kind, _, _) = self
            .op(Call::Write {
                token,
                list: list.clone(),
                late,
            })
            .await;
        if kind == Kind::Ok {
            self.list = Some(list);
        } else {
            self.list = None;
        }
        kind
    }

    /// One step of `lease-register`.
    async fn lease_register_step(&mut self) {
        let ttl_ms = self.ttl_ms();
        match self.belief.filter(Belief::live) {
            Some(b) => {
                let r = self.rng.gen_range(0..100);
                if r < 25 {
                    let (kind, reply, inv) = self.op(Call::Renew { token: b.token }).await;
                    match kind {
                        Kind::Ok => self.believe(b.token, &reply, inv),
                        Kind::Fail => self.belief = None,
                        _ => {}
                    }
                } else if r < 60 {
                    match self.list.clone() {
                        // Read after the grant, so the list is the one the token guards.
                        None => self.list = self.read().await,
                        Some(list) => {
                            if self.write(b.token, list, false).await == Kind::Fail {
                                self.belief = None;
                            }
                        }
                    }
                } else if r < 70 {
                    self.read().await;
                } else if r < 82 {
                    let (kind, _, _) = self.op(Call::Release { token: b.token }).await;
                    if kind != Kind::Info {
                        self.belief = None;
                    }
                } else if r < 92 {
                    let others: Vec<&String> = self
                        .slot
                        .names
                        .iter()
                        .filter(|n| **n != self.slot.names[self.w])
                        .collect();
                    let to = others[self.rng.gen_range(0..others.len())].clone();
                    let (kind, _, _) = self
                        .op(Call::Offer {
                            token: b.token,
                            to,
                            offer_ttl_ms: 1000,
                        })
                        .await;
                    // Offered: the key may move at any moment; act as if it is gone.
                    if kind == Kind::Ok {
                        self.belief = None;
                    }
                } else {
                    self.claim().await;
                }
            }
            None => {
                if let (Some(b), Some(list)) = (self.belief.take(), self.list.take()) {
                    if self.rng.gen_bool(0.3) {
                        // Deliberately late: the lease may be gone; fencing must judge.
                        self.write(b.token, list, true).await;
                        return;
                    }
                }
                let r = self.rng.gen_range(0..100);
                if r < 65 {
                    self.claim().await;
                } else if r < 85 {
                    let (kind, reply, inv) = self.op(Call::Accept { ttl_ms }).await;
                    if let (Kind::Ok, Reply::Granted { token, .. }) = (kind, &reply) {
                        self.list = None;
                        self.believe(*token, &reply, inv);
                    }
                } else {
                    self.read().await;
                }
            }
        }
    }

    /// One round of `fenced-append`: claim, read, pause, write, release.
    async fn fenced_append_round(&mut self) {
        if self.belief.filter(Belief::live).is_none() {
            self.claim().await;
        }
        let Some(b) = self.belief.filter(Belief::live) else {
            self.nap(250).await;
            return;
        };
        let Some(list) = self.read().await else {
            return;
        };
        let ttl = self.ctx.ttl;
        let pause = if self.rng.gen_bool(0.3) {
            ttl.mul_f64(self.rng.gen_range(0.5..1.5))
        } else {
            Duration::from_millis(self.rng.gen_range(0..200))
        };
        tokio::time::sleep(pause).await;
        let late = Instant::now() >= b.until;
        let kind = self.write(b.token, list, late).await;
        if kind == Kind::Ok && !late && self.rng.gen_bool(0.6) {
            self.op(Call::Release { token: b.token }).await;
        }
        // Each round starts from a fresh claim and a fresh read.
        self.belief = None;
        self.list = None;
        self.nap(100).await;
    }

    /// One round of the unfenced canary: claim through baton, then read-pause-write a list in
    /// harness memory with nothing but the belief in the lease to guard it. Worker 0's first
    /// granted round pauses past the TTL: the classic lock-without-fencing lost update.
    async fn canary_round(&mut self, paused_once: &mut bool) {
        self.claim().await;
        let Some(b) = self.belief.filter(Belief::live) else {
            self.nap(200).await;
            return;
        };
        let (_, reply, _) = self.op(Call::MemRead).await;
        let Reply::Read { list, .. } = reply else {
            return;
        };
        let pause = if self.w == 0 && !*paused_once {
            *paused_once = true;
            self.ctx.ttl.mul_f64(1.6)
        } else {
            Duration::from_millis(self.rng.gen_range(0..100))
        };
        tokio::time::sleep(pause).await;
        let mut list = list;
        list.push(Elem {
            token: b.token,
            uid: self.ctx.rec.uid(),
        });
        self.op(Call::MemWrite { list }).await;
        self.op(Call::Release { token: b.token }).await;
        self.belief = None;
        self.nap(150).await;
    }
}

/// A read-only worker pinned to `endpoint` (node `node`): linearizable reads of the active
/// keys every few tens of ms until `ctx.stop`, each checked like any other read. A node that
/// answers from its own state while it only believes it leads (isolated, or just resumed
/// from a pause) is caught here: a read that misses a write that returned before it.
pub async fn run_pinned_reader(ctx: Arc<Ctx>, node: u64, endpoint: String, seed: u64) {
    let name = format!("reader-n{node}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut p = ctx.new_pinned_proc(&name, &endpoint);
    while !ctx.stopped() {
        if let Some((workload, key)) = ctx.active_key(&mut rng) {
            let (kind, _) = perform(&ctx, &p, &workload, &key, Call::Read).await;
            if kind == Kind::Info {
                p = ctx.new_pinned_proc(&name, &endpoint);
            }
        }
        let gap = rng.gen_range(PINNED_READ_GAP_MS / 2..=PINNED_READ_GAP_MS);
        tokio::time::sleep(Duration::from_millis(gap)).await;
    }
}

/// Runs one worker until `ctx.stop`.
pub async fn run_worker(ctx: Arc<Ctx>, slot: Arc<Slot>, w: usize, seed: u64) {
    if slot.workload == "churner" {
        return churn::run(ctx, slot.names[w].clone()).await;
    }
    let mut worker = Worker::new(ctx.clone(), slot.clone(), w, seed);
    let mut paused_once = false;
    // Stagger the start so the workers do not move in lockstep.
    worker.nap(300).await;
    while !ctx.stopped() {
        worker.follow_key();
        match slot.workload {
            "lease-register" => {
                worker.lease_register_step().await;
                worker.nap(120).await;
            }
            "fenced-append" => worker.fenced_append_round().await,
            "guard-holders" => worker.guard_round().await,
            "task-takers" if ctx.tasks_from_board_read => worker.task_round_from_board().await,
            "task-takers" => worker.task_round().await,
            "set-takers" if ctx.sets_key_by_key => worker.set_round_key_by_key().await,
            "set-takers" => worker.set_round().await,
            "waiters" | "permit-waiters" => worker.wait_round().await,
            "permit-holders" => worker.permit_round().await,
            "shared-holders" => worker.shared_round().await,
            _ => worker.canary_round(&mut paused_once).await,
        }
    }
}
