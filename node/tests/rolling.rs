//! Rolling restart under load: every node of a 3-node cluster is restarted
//! in turn, gracefully, while claimants keep claiming, renewing and releasing. Afterwards:
//! no acknowledged claim is lost, no key ever had two holders, claims paused only for a short
//! window per restart (the longest is reported), and every node has the same applied state.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use baton_client::history::kind;
use baton_client::{
    ClaimOutcome, Client, ClientConfig, ClusterStatus, Error, History, ReadMode, ReleaseOutcome,
    RenewOutcome,
};
use common::{serial, Cluster};

/// Concurrent claimants, each its own client (own connections and client id), like separate
/// agent processes.
const CLAIMANTS: usize = 8;
/// Keys the claimants pick from at random: twice as many as claimants, so claims contend
/// (about a quarter of the answers are "held") without all queueing on one key.
const KEYS: usize = 16;
/// Long enough that no lease of the run can expire while its holder still works on it: any
/// `Lost` answer to a renewal or release is then a lost claim, not an expiry.
const TTL: Duration = Duration::from_secs(30);
/// How long one logical request of a claimant may retry. Longer than any pause a restart may
/// cause (see `WINDOW_MAX`), so a pause shows up as slow answers, not as errors.
const RETRY_DEADLINE: Duration = Duration::from_secs(20);
/// Load before the first restart, and after the last restart's settle time.
const WARMUP: Duration = Duration::from_secs(2);
const TAIL: Duration = Duration::from_secs(1);
/// After a node caught up, the next restart waits this long (an operator's health check),
/// and the restart's phase includes it: its window, and the claims it must have answered,
/// cover the whole of "from SIGTERM until the cluster is settled again".
const SETTLE: Duration = Duration::from_secs(1);
/// The longest acceptable time without any successful claim answer, per restart and over
/// the whole run. A follower restart should cost nothing (the leader and a quorum of two stay
/// up), and so should a quick restart of the leader (it comes back as the leader, see
/// `Round::Quick`). A slow leader restart costs one election: followers notice the silent leader within the
/// election timeout (500-1000 ms), an election takes one or two randomized rounds (up to
/// ~2 s), and a claimant whose node went away waits out the client's retry backoff (50 ms
/// doubling to 1 s) before it reaches the new leader: about 4 s in the worst case. 10 s
/// leaves room for a loaded 2-core machine and still fails a window that never ends.
const WINDOW_MAX: Duration = Duration::from_secs(10);
/// Successful claim answers (granted or held) required within each restart's phase (and in
/// the tail), so a run in which the load stalled or never started cannot pass. The phase
/// lasts at least `SETTLE`; 8 claimants answer about 100 claims a second on a 2-core machine.
const MIN_CLAIMS_PER_RESTART: usize = 20;
/// Bound of `Cluster::stop` (SIGTERM, then SIGKILL): a stop that took this long was not clean.
const STOP_BOUND: Duration = Duration::from_secs(10);
/// How long a restarted node may take to rejoin and catch up, and the cluster to converge.
const CATCH_UP_MAX: Duration = Duration::from_secs(20);
const CONVERGE_MAX: Duration = Duration::from_secs(10);

fn key_name(i: usize) -> String {
    format!("rolling/k{i:02}")
}

/// A small deterministic generator for the claimants' key choices (xorshift64*).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Claim,
    Renew,
    Release,
}

#[derive(Debug, Clone)]
enum Outcome {
    /// The claimant holds the key with `token` (a new grant, or its own lease again).
    Granted {
        token: u64,
        already_held: bool,
        safe_deadline: Instant,
    },
    /// Someone else holds the key with `token`.
    Held {
        token: u64,
        holder_client_id: String,
    },
    Renewed {
        safe_deadline: Instant,
    },
    Released,
    /// The token was not current (renew or release).
    Lost {
        current: Option<u64>,
    },
    /// No answer: the outcome of a write is unknown.
    Error(String),
}

/// One operation of one claimant, with when it was sent and when its answer came.
#[derive(Debug, Clone)]
struct Op {
    claimant: usize,
    client_id: String,
    step: Step,
    key: String,
    /// The token renewed or released (claims: `None`).
    token: Option<u64>,
    start: Instant,
    end: Instant,
    outcome: Outcome,
}

impl Op {
    fn claim_answered(&self) -> bool {
        self.step == Step::Claim
            && matches!(self.outcome, Outcome::Granted { .. } | Outcome::Held { .. })
    }

    /// The token of the key's holder the answer reported (claims only).
    fn claim_token(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Granted { token, .. } | Outcome::Held { token, .. } => Some(token),
            _ => None,
        }
    }

    /// The client id of the key's holder the answer reported (claims only).
    fn claim_holder(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Granted { .. } => Some(&self.client_id),
            Outcome::Held {
                holder_client_id, ..
            } => Some(holder_client_id),
            _ => None,
        }
    }
}

/// One claimant: claim a random key; if granted, renew it once and release it; if held, go
/// on. A claim without an answer is retried on the same key (a claim that did commit then
/// answers `already_held` with the token: it is not left behind), and a release without an
/// answer is retried until it gets one, so no lease is abandoned to its TTL.
async fn claimant(i: usize, endpoints: Vec<String>, seed: u64, stop: Arc<AtomicBool>) -> Vec<Op> {
    let client = Client::connect(ClientConfig {
        endpoints,
        retry_deadline: RETRY_DEADLINE,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let name = format!("claimant-{i}");
    let client_id = client.client_id().to_owned();
    let mut rng = Rng::new(seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut ops = Vec::new();
    let mut reclaim: Option<String> = None;
    let mut unreleased: Option<(String, u64)> = None;
    let record = |step: Step, key: &str, token: Option<u64>, start: Instant, outcome: Outcome| Op {
        claimant: i,
        client_id: client_id.clone(),
        step,
        key: key.to_owned(),
        token,
        start,
        end: Instant::now(),
        outcome,
    };
    while !stop.load(Ordering::Relaxed) {
        if let Some((key, token)) = unreleased.take() {
            let op = release(&client, &key, token, &record).await;
            if matches!(op.outcome, Outcome::Error(_)) {
                unreleased = Some((key, token));
            }
            ops.push(op);
            continue;
        }
        let key = reclaim.take().unwrap_or_else(|| key_name(rng.below(KEYS)));
        let start = Instant::now();
        let outcome = match client.claim(&key, &name, TTL).await {
            Ok(ClaimOutcome::Granted(g)) => Outcome::Granted {
                token: g.lease.token,
                already_held: g.already_held,
                safe_deadline: g.safe_deadline,
            },
            Ok(ClaimOutcome::Held { lease, .. }) => Outcome::Held {
                token: lease.token,
                holder_client_id: lease.holder_client_id,
            },
            Err(e) => Outcome::Error(e.to_string()),
        };
        let granted = match outcome {
            Outcome::Granted { token, .. } => Some(token),
            Outcome::Error(_) => {
                reclaim = Some(key.clone());
                None
            }
            _ => None,
        };
        ops.push(record(Step::Claim, &key, None, start, outcome));
        let Some(token) = granted else {
            continue;
        };

        let start = Instant::now();
        let outcome = match client.renew(&key, token).await {
            Ok(RenewOutcome::Renewed(g)) => Outcome::Renewed {
                safe_deadline: g.safe_deadline,
            },
            Ok(RenewOutcome::Lost { current }) => Outcome::Lost {
                current: current.map(|l| l.token),
            },
            Err(e) => Outcome::Error(e.to_string()),
        };
        let lost = matches!(outcome, Outcome::Lost { .. });
        ops.push(record(Step::Renew, &key, Some(token), start, outcome));
        if lost {
            continue; // nothing to release (the checks report it)
        }

        let op = release(&client, &key, token, &record).await;
        if matches!(op.outcome, Outcome::Error(_)) {
            unreleased = Some((key, token));
        }
        ops.push(op);
    }
    ops
}

async fn release(
    client: &Client,
    key: &str,
    token: u64,
    record: &impl Fn(Step, &str, Option<u64>, Instant, Outcome) -> Op,
) -> Op {
    let start = Instant::now();
    let outcome = match client.release(key, token).await {
        Ok(ReleaseOutcome::Released(_)) => Outcome::Released,
        Ok(ReleaseOutcome::Lost { current }) => Outcome::Lost {
            current: current.map(|l| l.token),
        },
        Err(e) => Outcome::Error(e.to_string()),
    };
    record(Step::Release, key, Some(token), start, outcome)
}

/// How long a restarted node stays down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Started again as soon as it exited: a quick restart, done within the election
    /// timeout, so a restarted leader comes back as the leader of the same term (openraft 0.9
    /// restores a node whose persisted vote is its own committed one) and nobody notices.
    Quick,
    /// Kept down for `DOWN` (longer than the election timeout), and a stopped leader until
    /// the other two agree on a new one: a slow restart (an upgrade, a reboot). The leader's
    /// restart costs an election, and the old leader comes back deposed.
    Slow,
}

/// How long a node stays down in the slow round: past the election timeout (1 s at most).
const DOWN: Duration = Duration::from_millis(1_500);

/// One node's restart, as the test drove it.
#[derive(Debug)]
struct Restart {
    round: Round,
    node: u64,
    was_leader: bool,
    /// The leader and its term before the stop and once the node caught up.
    leader_term_before: (u64, u64),
    leader_term_after: (u64, u64),
    /// SIGTERM sent.
    began: Instant,
    /// Every node agrees on a leader and the restarted node applied what the others had
    /// applied when it rejoined.
    caught_up: Instant,
    /// `caught_up + SETTLE`: the end of this restart's phase.
    settled: Instant,
    /// Filled in by the analysis: the longest time without a successful claim answer
    /// that overlaps `began..settled`, and the claims answered within it.
    window: Duration,
    claims: usize,
}

/// A client for one node's status, quick to give up: used while that node may be down.
async fn status(cluster: &Cluster, id: u64) -> Result<ClusterStatus, Error> {
    let addr = &cluster.nodes[&id].addr;
    let client = Client::connect(ClientConfig {
        endpoints: vec![addr.clone()],
        retry_deadline: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    client.status_of(addr).await
}

/// The agreed leader and its term.
async fn leader_and_term(cluster: &Cluster) -> (u64, u64) {
    let deadline = Instant::now() + CATCH_UP_MAX;
    loop {
        let leader = cluster.leader(CATCH_UP_MAX).await;
        match status(cluster, leader).await {
            Ok(s) if s.leader_id == Some(leader) => return (leader, s.term),
            s => assert!(
                Instant::now() < deadline,
                "leader {leader} gives no status naming itself: {s:?}\n{}",
                cluster.logs()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until all running nodes agree on a leader and node `id` has applied everything the
/// other nodes had applied at that moment (the leader's applied index among them, unless
/// `id` is the leader: a leader restarted within the election timeout comes back as the
/// leader, since openraft 0.9 restores a node whose persisted vote is its own committed one).
async fn wait_caught_up(cluster: &Cluster, id: u64) {
    let deadline = Instant::now() + CATCH_UP_MAX;
    cluster.leader(CATCH_UP_MAX).await;
    let mut target = 0;
    for other in cluster.running().into_iter().filter(|o| *o != id) {
        let applied = loop {
            match status(cluster, other).await {
                Ok(s) => break s.applied_index,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "node {other} gives no status: {e}\n{}",
                    cluster.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        target = target.max(applied);
    }
    loop {
        let s = status(cluster, id).await;
        if matches!(&s, Ok(s) if s.applied_index >= target) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id} did not catch up to the others' applied index {target} within \
             {CATCH_UP_MAX:?}: {s:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The longest interval between consecutive successful claim answers (`points`, sorted, with
/// `load_end` after the last) that overlaps `from..to`.
fn longest_gap(points: &[Instant], from: Instant, to: Instant, load_end: Instant) -> Duration {
    let mut longest = Duration::ZERO;
    let mut prev: Option<Instant> = None;
    for &p in points.iter().chain(std::iter::once(&load_end)) {
        if let Some(q) = prev {
            if p > from && q < to {
                longest = longest.max(p - q);
            }
        }
        prev = Some(p);
    }
    longest
}

/// Check 1 and the per-claimant half of check 2, from the operations alone.
///
/// - A renewal or release that answers `Lost` for a token its claimant was granted, never
///   tried to release, and was still inside the grant's safe deadline, is a lost claim: the
///   TTL cannot have ended it, and nobody else may.
/// - Per key, every claim answer (granted or held) names the holder's token at the point the
///   claim took effect. An answer that came before another claim was sent must name a token
///   no larger (tokens never go back in real time), and equal tokens are one stint: a grant
///   that names an earlier answer's token is the same claimant's own lease again.
fn check_ops(ops: &[Op]) -> Vec<String> {
    let mut violations = Vec::new();

    // Per claimant, in its own order.
    let mut by_claimant: BTreeMap<usize, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_claimant.entry(op.claimant).or_default().push(op);
    }
    for (claimant, ops) in &by_claimant {
        // token -> (latest safe deadline, a release of it was sent)
        let mut held: BTreeMap<u64, (Instant, bool)> = BTreeMap::new();
        for op in ops {
            match (&op.step, &op.outcome, op.token) {
                (
                    Step::Claim,
                    Outcome::Granted {
                        token,
                        safe_deadline,
                        ..
                    },
                    _,
                ) => {
                    held.insert(*token, (*safe_deadline, false));
                }
                (Step::Renew, Outcome::Renewed { safe_deadline }, Some(t)) => {
                    if let Some(h) = held.get_mut(&t) {
                        h.0 = *safe_deadline;
                    }
                }
                (Step::Release, outcome, Some(t)) => {
                    let Some((deadline, release_sent)) = held.get(&t).copied() else {
                        violations.push(format!("claimant {claimant} released unknown token {t}"));
                        continue;
                    };
                    if let Outcome::Lost { current } = outcome {
                        if !release_sent && op.end < deadline {
                            violations.push(format!(
                                "acknowledged claim lost: claimant {claimant} was granted {} with \
                                 token {t}, never released it, and its release (inside the safe \
                                 deadline) answered Lost (current token {current:?})",
                                op.key
                            ));
                        }
                    }
                    held.insert(t, (deadline, true));
                }
                (Step::Renew, Outcome::Lost { current }, Some(t)) => {
                    let Some((deadline, release_sent)) = held.get(&t).copied() else {
                        violations.push(format!("claimant {claimant} renewed unknown token {t}"));
                        continue;
                    };
                    if !release_sent && op.end < deadline {
                        violations.push(format!(
                            "acknowledged claim lost: claimant {claimant} was granted {} with \
                             token {t}, never released it, and its renewal (inside the safe \
                             deadline) answered Lost (current token {current:?})",
                            op.key
                        ));
                    }
                }
                _ => {}
            }
        }
    }

    // Per key, in real time: answers sorted by end; a running maximum of the tokens of the
    // answers that ended before each claim was sent.
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|o| o.claim_answered()) {
        by_key.entry(&op.key).or_default().push(op);
    }
    for (key, mut answers) in by_key {
        answers.sort_by_key(|o| o.end);
        // prefix[k] = the answer with the largest token among answers[..=k]
        let mut prefix: Vec<&Op> = Vec::with_capacity(answers.len());
        for op in &answers {
            let best = match prefix.last() {
                Some(b) if b.claim_token() >= op.claim_token() => *b,
                _ => *op,
            };
            prefix.push(best);
        }
        for op in &answers {
            let before = answers.partition_point(|o| o.end < op.start);
            if before == 0 {
                continue;
            }
            let earlier = prefix[before - 1];
            let (t_earlier, t) = (earlier.claim_token(), op.claim_token());
            if t_earlier > t {
                violations.push(format!(
                    "{key}: a claim answered token {t:?} (claimant {}, {:?}) after an answer with \
                     token {t_earlier:?} (claimant {}, {:?}) had already come back: tokens went back",
                    op.claimant, op.outcome, earlier.claimant, earlier.outcome
                ));
            }
            if let Outcome::Granted { already_held, .. } = op.outcome {
                if t_earlier == t && !(already_held && earlier.claim_holder() == op.claim_holder())
                {
                    violations.push(format!(
                        "{key}: token {t:?} granted to claimant {} ({:?}) although an earlier \
                         answer (claimant {}, {:?}) already named it: a second holder of one stint",
                        op.claimant, op.outcome, earlier.claimant, earlier.outcome
                    ));
                }
            }
        }
    }
    violations
}

/// Check 1 and the history half of check 2, against each key's history after the run.
///
/// The history must be complete (nothing compacted), in revision order, and well nested: a
/// `claimed` event only while no stint is open, carrying its own revision as the token; every
/// `released`, `expired` or `revoked` event ends exactly the open stint. Every acknowledged
/// grant must appear as the `claimed` event of its token, by its claimant; every
/// acknowledged release as the `released` event of its token; every `held` answer must name a
/// token the history granted, to the client the answer named.
fn check_histories(ops: &[Op], histories: &BTreeMap<String, History>) -> Vec<String> {
    let mut violations = Vec::new();
    // key -> token -> claimant client id, from the histories
    let mut granted: BTreeMap<&str, BTreeMap<u64, String>> = BTreeMap::new();
    let mut released: BTreeSet<(&str, u64)> = BTreeSet::new();
    for (key, h) in histories {
        if h.dropped > 0 {
            violations.push(format!(
                "{key}: {} history events were compacted away; the check would be incomplete \
                 (use more keys or a shorter run)",
                h.dropped
            ));
        }
        let grants = granted.entry(key).or_default();
        let mut open: Option<u64> = None;
        let mut last_revision = 0;
        for e in &h.events {
            if e.revision <= last_revision {
                violations.push(format!(
                    "{key}: event at r{} after r{last_revision}: not in revision order",
                    e.revision
                ));
            }
            last_revision = e.revision;
            match e.kind.as_str() {
                kind::CLAIMED => {
                    if let Some(t) = open {
                        violations.push(format!(
                            "{key}: two holders: token {} granted at r{} while token {t} was still \
                             held (no release, expiry or revoke of it in between)",
                            e.token, e.revision
                        ));
                    }
                    if e.token != e.revision {
                        violations.push(format!(
                            "{key}: grant at r{} carries token {}",
                            e.revision, e.token
                        ));
                    }
                    let client = e.actor.as_ref().map(|a| a.client_id.clone());
                    grants.insert(e.token, client.unwrap_or_default());
                    open = Some(e.token);
                }
                kind::RELEASED | kind::EXPIRED | kind::REVOKED => {
                    if open != Some(e.token) {
                        violations.push(format!(
                            "{key}: {} of token {} at r{} while the open stint is {open:?}",
                            e.kind, e.token, e.revision
                        ));
                    }
                    if e.kind == kind::RELEASED {
                        released.insert((key, e.token));
                    }
                    open = None;
                }
                other => violations.push(format!(
                    "{key}: unexpected {other} event at r{} (this test makes none)",
                    e.revision
                )),
            }
        }
    }
    for op in ops {
        let grants = granted.get(op.key.as_str());
        match (&op.step, &op.outcome) {
            (Step::Claim, Outcome::Granted { token, .. }) => {
                match grants.and_then(|g| g.get(token)) {
                    Some(client) if *client == op.client_id => {}
                    Some(client) => violations.push(format!(
                        "{}: claimant {} was granted token {token}, but the history grants it to \
                         client {client}",
                        op.key, op.claimant
                    )),
                    None => violations.push(format!(
                        "acknowledged claim lost: claimant {} was granted {} with token {token} \
                         ({:?} after the claim was sent), but the key's history has no such grant",
                        op.claimant,
                        op.key,
                        op.end - op.start
                    )),
                }
            }
            (
                Step::Claim,
                Outcome::Held {
                    token,
                    holder_client_id,
                },
            ) => match grants.and_then(|g| g.get(token)) {
                Some(client) if client == holder_client_id => {}
                other => violations.push(format!(
                    "{}: claimant {} was told the key is held with token {token} by client \
                         {holder_client_id}; the history grants that token to {other:?}",
                    op.key, op.claimant
                )),
            },
            (Step::Release, Outcome::Released) => {
                let token = op.token.expect("a release has a token");
                if !released.contains(&(op.key.as_str(), token)) {
                    violations.push(format!(
                        "{}: claimant {}'s release of token {token} was acknowledged, but the \
                         history has no such release",
                        op.key, op.claimant
                    ));
                }
            }
            _ => {}
        }
    }
    violations
}

/// The held leases as node `id` itself sees them (a stale read, answered by that node from
/// its own applied state): `(key, holder client id, token, basis)`.
async fn board_of(cluster: &Cluster, id: u64) -> Result<Vec<(String, String, u64, u64)>, Error> {
    full_board(&cluster.client_of(id).await, ReadMode::Stale).await
}

/// Every lease on the board, page by page: (key, holder client id, token, basis).
async fn full_board(
    client: &Client,
    mode: ReadMode,
) -> Result<Vec<(String, String, u64, u64)>, Error> {
    let mut leases = Vec::new();
    let mut after = String::new();
    loop {
        let page = client.board("", 0, &after, mode).await?;
        leases.extend(
            page.leases
                .iter()
                .map(|l| (l.key.clone(), l.holder_client_id.clone(), l.token, l.basis)),
        );
        match page.leases.last() {
            Some(last) if page.truncated => after = last.key.clone(),
            _ => return Ok(leases),
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Restarts each node of a 3-node cluster in turn (SIGTERM, wait for the exit, start it on
/// the same data dir, wait until it caught up, let it settle for `SETTLE`) while 8 claimants
/// keep claiming, renewing and releasing 16 keys. Two rounds: a quick one (each node started
/// again at once) and a slow one (each node down for `DOWN`, longer than the election
/// timeout, so the leader's restart goes through an election and the old leader comes back
/// deposed). The quick round alone would never exercise a failover: openraft brings a leader
/// restarted within the election timeout back as the leader of the same term.
///
/// Order, in each round: the followers first (in id order), the leader last, as operators do
/// it. A follower's restart leaves the leader and a quorum of two untouched, so claims should
/// not pause at all; the leader goes once, at the end, so a round costs at most one election.
/// (Restarting the leader first could hand leadership to a node that is restarted next,
/// costing a second election.) The order is recomputed before each step, so if the leadership
/// moves anyway, the remaining followers still go before the current leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_no_claim_and_pauses_claims_only_briefly() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let seed = std::env::var("BATON_ROLLING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("rolling restart: seed {seed} (BATON_ROLLING_SEED={seed} repeats the key choices)");

    let stop = Arc::new(AtomicBool::new(false));
    let load_start = Instant::now();
    let tasks: Vec<_> = (0..CLAIMANTS)
        .map(|i| tokio::spawn(claimant(i, cluster.endpoints(), seed, stop.clone())))
        .collect();
    tokio::time::sleep(WARMUP).await;

    let mut restarts: Vec<Restart> = Vec::new();
    for round in [Round::Quick, Round::Slow] {
        let mut remaining: BTreeSet<u64> = cluster.nodes.keys().copied().collect();
        while !remaining.is_empty() {
            let leader_term_before = leader_and_term(&cluster).await;
            let leader = leader_term_before.0;
            let node = remaining
                .iter()
                .copied()
                .find(|id| *id != leader)
                .unwrap_or(leader);
            remaining.remove(&node);
            let began = Instant::now();
            tokio::task::block_in_place(|| cluster.stop(node));
            let stopped = Instant::now();
            assert!(
                stopped - began < STOP_BOUND,
                "node {node} did not exit within {STOP_BOUND:?} of SIGTERM (it was SIGKILLed)\n{}",
                cluster.logs()
            );
            if round == Round::Slow {
                // The others notice: a stopped leader is replaced before it comes back.
                tokio::time::sleep(DOWN).await;
                if node == leader {
                    cluster.leader(CATCH_UP_MAX).await;
                }
            }
            cluster.start_node(node);
            wait_caught_up(&cluster, node).await;
            let caught_up = Instant::now();
            let leader_term_after = leader_and_term(&cluster).await;
            eprintln!(
                "{round:?} restart of node {node} ({}): stopped in {}, back and caught up {} \
                 later; leader {} in term {} before, {} in term {} after",
                if node == leader { "leader" } else { "follower" },
                ms(stopped - began),
                ms(caught_up - stopped),
                leader_term_before.0,
                leader_term_before.1,
                leader_term_after.0,
                leader_term_after.1,
            );
            tokio::time::sleep(SETTLE).await;
            restarts.push(Restart {
                round,
                node,
                was_leader: node == leader,
                leader_term_before,
                leader_term_after,
                began,
                caught_up,
                settled: caught_up + SETTLE,
                window: Duration::ZERO,
                claims: 0,
            });
        }
    }

    tokio::time::sleep(TAIL).await;
    let stop_at = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let mut ops: Vec<Op> = Vec::new();
    for task in tasks {
        ops.extend(task.await.expect("a claimant panicked"));
    }
    let load_end = Instant::now();

    // Availability (check 3).
    let mut points: Vec<Instant> = ops
        .iter()
        .filter(|o| o.claim_answered())
        .map(|o| o.end)
        .collect();
    points.sort();
    for r in &mut restarts {
        r.window = longest_gap(&points, r.began, r.settled, load_end);
        r.claims = points
            .iter()
            .filter(|p| (r.began..=r.settled).contains(p))
            .count();
    }
    let overall = longest_gap(&points, load_start, stop_at, load_end);
    let tail_claims = points
        .iter()
        .filter(|p| **p > restarts.last().unwrap().settled)
        .count();

    let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    let claims = count(&|o| o.step == Step::Claim);
    let grants = count(&|o| matches!(o.outcome, Outcome::Granted { .. }));
    let held = count(&|o| matches!(o.outcome, Outcome::Held { .. }));
    let errors: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Error(_)))
        .collect();
    for e in &errors {
        if let Outcome::Error(message) = &e.outcome {
            eprintln!(
                "no answer: claimant {} {:?} {} after {}: {message}",
                e.claimant,
                e.step,
                e.key,
                ms(e.end - e.start)
            );
        }
    }
    let slowest = ops
        .iter()
        .max_by_key(|o| o.end - o.start)
        .expect("the claimants did something");
    let per_restart = restarts
        .iter()
        .map(|r| {
            format!(
                "{:?} node {} ({}{}) {} [{} claims; stopped, back and caught up in {}]",
                r.round,
                r.node,
                if r.was_leader { "leader" } else { "follower" },
                if r.leader_term_after == r.leader_term_before {
                    String::new()
                } else {
                    format!(
                        "; leader {}->{}, term {}->{}",
                        r.leader_term_before.0,
                        r.leader_term_after.0,
                        r.leader_term_before.1,
                        r.leader_term_after.1
                    )
                },
                ms(r.window),
                r.claims,
                ms(r.caught_up - r.began)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    eprintln!(
        "rolling restart summary: {} ops ({claims} claims: {grants} granted, {held} held; {} \
         errors) in {:.1} s; longest window without a claim answer per restart: {per_restart}; \
         whole run {}; slowest single operation {}",
        ops.len(),
        errors.len(),
        (load_end - load_start).as_secs_f64(),
        ms(overall),
        ms(slowest.end - slowest.start)
    );

    // Every operation got an answer: a retryable failure is retried for `RETRY_DEADLINE`,
    // longer than any acceptable window, and a restart must not surface anything else (such
    // as CANCELLED from a connection the stopping node dropped) to a claimant.
    assert!(
        errors.is_empty(),
        "{} operations got no answer (listed above)\n{}",
        errors.len(),
        cluster.logs()
    );
    // No claimant waited longer than the whole cluster may pause: one stuck on a node that
    // went away (or on a deposed leader) is unavailable to it even while others get answers.
    assert!(
        slowest.end - slowest.start < WINDOW_MAX,
        "claimant {}'s {:?} of {} took {} (bound {WINDOW_MAX:?}): {:?}\n{}",
        slowest.claimant,
        slowest.step,
        slowest.key,
        ms(slowest.end - slowest.start),
        slowest.outcome,
        cluster.logs()
    );
    for r in &restarts {
        assert!(
            r.window < WINDOW_MAX,
            "claims paused for {} around the restart of node {} (bound {WINDOW_MAX:?}); \
             windows: {per_restart}\n{}",
            ms(r.window),
            r.node,
            cluster.logs()
        );
        assert!(
            r.claims >= MIN_CLAIMS_PER_RESTART,
            "only {} claims answered during the restart of node {} (at least \
             {MIN_CLAIMS_PER_RESTART} expected): the load stalled\n{}",
            r.claims,
            r.node,
            cluster.logs()
        );
    }
    assert!(
        overall < WINDOW_MAX,
        "claims paused for {} during the run (bound {WINDOW_MAX:?})\n{}",
        ms(overall),
        cluster.logs()
    );
    assert!(
        tail_claims >= MIN_CLAIMS_PER_RESTART,
        "only {tail_claims} claims answered after the last restart\n{}",
        cluster.logs()
    );

    // No acknowledged claim lost, no two holders (checks 1 and 2).
    let violations = check_ops(&ops);
    assert!(
        violations.is_empty(),
        "{} violations in the claimants' answers:\n{}\n{}",
        violations.len(),
        violations.join("\n"),
        cluster.logs()
    );
    let client = cluster.client().await;
    let mut histories = BTreeMap::new();
    for i in 0..KEYS {
        let key = key_name(i);
        let h = client
            .history(&key, ReadMode::Linearizable)
            .await
            .unwrap_or_else(|e| panic!("history of {key}: {e}\n{}", cluster.logs()));
        histories.insert(key, h);
    }
    let events: usize = histories.values().map(|h| h.events.len()).sum();
    let violations = check_histories(&ops, &histories);
    assert!(
        violations.is_empty(),
        "{} violations against the keys' histories ({events} events):\n{}\n{}",
        violations.len(),
        violations.join("\n"),
        cluster.logs()
    );

    // Every node converges to the same held leases (check 4), the linearizable board's.
    let expected = full_board(&client, ReadMode::Linearizable).await.unwrap();
    let deadline = Instant::now() + CONVERGE_MAX;
    loop {
        let mut boards = BTreeMap::new();
        for id in cluster.nodes.keys().copied() {
            boards.insert(id, board_of(&cluster, id).await);
        }
        if boards
            .values()
            .all(|b| matches!(b, Ok(b) if *b == expected))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the nodes' boards did not converge within {CONVERGE_MAX:?} to the linearizable \
             one {expected:?}: {boards:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "rolling restart: {events} history events checked; {} leases held at the end, the same \
         on every node",
        expected.len()
    );
}
