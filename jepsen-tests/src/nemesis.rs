//! Faults, and the schedule that injects them: each fault starts, holds for a few seconds,
//! and is healed before the next one, so that the cluster is sometimes whole and the
//! workload makes progress between faults. Every start and stop goes into the history.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use baton_client::{Client, ClientConfig};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::cluster::Cluster;
use crate::copies::Mode;
use crate::net::Net;
use crate::powerfs::{Loss, Lost};
use crate::sickdisk::{self, Damage, DamageKind, EioRecord, RefillWait, EIO_EXIT_LIMIT};
use crate::workload::Recorder;

mod schedule;

pub use schedule::{run_schedule, Pace, BRISK_CALM_MS, BRISK_HOLD_MS, WHOLE_CLUSTER_CALM_MS};

/// The documented drift bound the scenarios stay within when skew is "within bound": node
/// clock rates vary by at most this much from 1.0, less than the clients' drift margin (5%).
pub const SKEW_WITHIN: f64 = 0.04;
/// Clock rate of the leader in the over-bound scenario.
pub const SKEW_OVER_RATE: f64 = 2.0;
/// Share of power cuts that land while a write waits for its fsync (the rest land at any
/// moment, mostly between writes).
pub const FROZEN_CUT_SHARE: f64 = 0.75;
/// How long a power cut waits for a victim's next fsync of unsynced writes to freeze.
pub const FREEZE_WAIT: Duration = Duration::from_secs(2);
/// How long the laggards of a `corrupt` fault are down while writes go on, in ms.
pub const CORRUPT_LAG_MS: std::ops::Range<u64> = 2000..3000;
/// How long a `corrupt` fault holds, whatever the pace: the victim and the laggards are up
/// without the up-to-date nodes long enough to elect a leader (election timeout at most
/// 1 s, and a start) if the victim votes on its cut log, in ms.
pub const CORRUPT_HOLD_MS: std::ops::Range<u64> = 3000..4000;
/// How long a `corrupt` fault waits, after the calm, for every earlier damage to be refilled
/// before it damages another log ([`sickdisk::RefillWait`]).
pub const CORRUPT_REFILL_LIMIT: Duration = Duration::from_secs(20);
/// How long an `eio` fault waits for its victim's first failed sync before it gives up
/// waiting for the node to stop (the judge says whether it did, in time).
pub const EIO_FIRST_SYNC_WAIT: Duration = Duration::from_secs(5);
/// How long a membership change (a removal; a join until the node is a voter) may take
/// before it counts as failed.
pub const MEMBERSHIP_LIMIT: Duration = Duration::from_secs(30);

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A random minority cut off from the majority, both ways.
    PartitionHalves,
    /// The leader cut off from every other node.
    IsolateLeader,
    /// The leader hears nobody, but everyone hears the leader.
    OneWayLeader,
    /// The harness's clients cannot reach one node (it still talks to its peers).
    ClientCut,
    /// Each node talks to its two ring neighbours only (5 nodes: every node in a majority,
    /// no two majorities the same).
    MajoritiesRing,
    /// Two halves joined by one bridge node.
    Bridge,
    /// 20% of incoming packets dropped on every node.
    Loss,
    /// Raft messages delayed 50 ms + up to 80 ms of jitter on every node.
    Delay,
    KillOne,
    KillLeader,
    KillAll,
    /// SIGSTOP of one node for 1–3 × TTL.
    PauseOne,
    PauseLeader,
    /// Every node's lease clock at a random rate within [`SKEW_WITHIN`].
    SkewWithin,
    /// Power cuts (data dirs on power-cut filesystems): the node is killed and loses what it
    /// had not synced (all of it, a random prefix per file, or that with a torn write, at
    /// random), and is started again on what is left when the fault heals.
    PowerOne,
    PowerLeader,
    /// A random minority of the nodes at once.
    PowerMinority,
    /// Every node at once: a rack losing power.
    PowerAll,
    /// Membership: a voter (not the leader) is removed through the cluster API, its disk
    /// wiped, and it comes back with `--join` (added as a learner, made a voter once caught
    /// up) when the fault heals.
    ReplaceVoter,
    /// The same with the leader.
    ReplaceLeader,
    /// A node's disk is wiped under it (SIGKILL, data dir gone), then the documented
    /// recovery: remove it, and it joins again on the empty dir when the fault heals.
    WipeDisk,
    /// A damaged log where its vote decides: a minority lags (down while writes go on), the
    /// victim is killed and one bit flipped or one sector zeroed in its log (see
    /// [`crate::sickdisk`]), the up-to-date rest killed, then the victim and the laggards
    /// started (the victim's vote decides whether a leader without the latest writes is
    /// elected), and the rest started again when the fault heals.
    Corrupt,
    /// One node's disk fails every sync with EIO (data dirs on power-cut filesystems): the
    /// node must stop; when the fault heals its disk loses what it never synced (a power
    /// cut) and it is started again on a sound disk.
    EioOne,
    /// The same with the leader.
    EioLeader,
    /// Every first attempt of a claim held back by the harness's proxy past the client's
    /// request timeout, so that it reaches the cluster after its retry ([`crate::copies`]).
    ClientDelay,
    /// Every first attempt of a claim sent twice by the harness's proxy, the copy up to
    /// 1.5 s later, headers and all ([`crate::copies`]).
    ClientCopies,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::PartitionHalves => "partition-halves",
            Fault::IsolateLeader => "partition-leader",
            Fault::OneWayLeader => "partition-one-way",
            Fault::ClientCut => "partition-client",
            Fault::MajoritiesRing => "partition-ring",
            Fault::Bridge => "partition-bridge",
            Fault::Loss => "loss",
            Fault::Delay => "delay",
            Fault::KillOne => "kill-one",
            Fault::KillLeader => "kill-leader",
            Fault::KillAll => "kill-all",
            Fault::PauseOne => "pause-one",
            Fault::PauseLeader => "pause-leader",
            Fault::SkewWithin => "skew",
            Fault::PowerOne => "power-one",
            Fault::PowerLeader => "power-leader",
            Fault::PowerMinority => "power-minority",
            Fault::PowerAll => "power-all",
            Fault::ReplaceVoter => "replace-voter",
            Fault::ReplaceLeader => "replace-leader",
            Fault::WipeDisk => "wipe-disk",
            Fault::Corrupt => "corrupt",
            Fault::EioOne => "eio-one",
            Fault::EioLeader => "eio-leader",
            Fault::ClientDelay => "client-delay",
            Fault::ClientCopies => "client-copies",
        }
    }
}

/// The test bed the nemesis acts on. Field order matters: the cluster's processes are
/// killed (dropped) before their namespaces are deleted.
pub struct Bed {
    pub cluster: Mutex<Cluster>,
    pub net: Net,
    pub rec: Arc<Recorder>,
    pub ttl: Duration,
    /// What every power cut took back, for the run's record.
    pub cuts: Mutex<Vec<Cut>>,
    /// Every power cut takes back all that was not synced (the power canary: no chance that
    /// what it must lose survives as a kept prefix).
    pub lose_all: bool,
    /// Membership changes, and those that failed.
    pub membership: Mutex<MembershipLog>,
    /// Every damage the `corrupt` fault did.
    pub damages: Mutex<Vec<Damage>>,
    /// What each `corrupt` fault waited for before it did its damage.
    pub refill_waits: Mutex<Vec<sickdisk::RefillWait>>,
    /// What every `eio` fault saw.
    pub eio: Mutex<Vec<EioRecord>>,
    /// The claim proxies between the workers and the nodes, in scenarios with the
    /// `client-delay` and `client-copies` faults.
    pub proxies: Option<crate::copies::Proxies>,
}

/// What the membership nemeses did.
#[derive(Debug, Clone, Default)]
pub struct MembershipLog {
    pub removed: usize,
    /// Joins that ended with the node a voter, and the longest took.
    pub joined: usize,
    pub longest_join: Duration,
    /// What did not happen within [`MEMBERSHIP_LIMIT`], and why.
    pub failures: Vec<String>,
}

/// One node's power cut.
#[derive(Debug, Clone)]
pub struct Cut {
    pub node: u64,
    pub loss: Loss,
    pub lost: Lost,
}

impl Bed {
    fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.cluster.lock().expect("cluster lock")
    }

    pub fn ids(&self) -> Vec<u64> {
        self.cluster().ids()
    }

    /// A client that asks each node about itself, quickly, and the nodes' endpoints.
    async fn status_client(&self) -> Option<(Client, Vec<String>)> {
        let endpoints = self.cluster().endpoints();
        let config = ClientConfig {
            request_timeout: Duration::from_millis(500),
            retry_deadline: Duration::from_millis(500),
            ..ClientConfig::with_endpoints(endpoints.clone())
        };
        Some((Client::connect(config).await.ok()?, endpoints))
    }

    /// The leader as the nodes report it (the one that says it leads, in the highest term).
    pub async fn leader(&self) -> Option<u64> {
        let (client, endpoints) = self.status_client().await?;
        let asks = endpoints.iter().map(|e| client.status_of(e));
        let answers = futures::future::join_all(asks).await;
        answers
            .into_iter()
            .flatten()
            .filter(|s| s.state == "leader")
            .max_by_key(|s| s.term)
            .map(|s| s.node_id)
    }

    /// A client for membership changes: patient, as a change waits for a leader.
    async fn admin_client(&self) -> Option<Client> {
        let config = ClientConfig {
            request_timeout: Duration::from_secs(5),
            retry_deadline: MEMBERSHIP_LIMIT,
            ..ClientConfig::with_endpoints(self.cluster().endpoints())
        };
        Client::connect(config).await.ok()
    }

    /// Removes node `id` from the membership (through the cluster API, as `baton cluster
    /// remove` does); a failure goes into the membership log.
    async fn remove_member(&self, id: u64) {
        let outcome = match self.admin_client().await {
            Some(client) => client.remove_member(id).await.map_err(|e| e.to_string()),
            None => Err("no client".into()),
        };
        let mut log = self.membership.lock().expect("membership lock");
        match outcome {
            Ok(m) if !m.members.iter().any(|m| m.id == id) => log.removed += 1,
            Ok(m) => log
                .failures
                .push(format!("removing node {id}: still a member: {m:?}")),
            Err(e) => log.failures.push(format!("removing node {id}: {e}")),
        }
    }

    /// Starts node `id` (it joins with `--join`) and waits until the members list it as a
    /// voter; a failure goes into the membership log.
    async fn join(&self, id: u64) -> anyhow::Result<()> {
        let start = std::time::Instant::now();
        self.cluster().launch(id)?;
        let client = self.admin_client().await;
        let mut last = String::from("no client");
        while start.elapsed() < MEMBERSHIP_LIMIT {
            if let Some(client) = &client {
                match client.members().await {
                    Ok(m) if m.members.iter().any(|m| m.id == id && m.voter) => {
                        let mut log = self.membership.lock().expect("membership lock");
                        log.joined += 1;
                        log.longest_join = log.longest_join.max(start.elapsed());
                        return Ok(());
                    }
                    Ok(m) => last = format!("members {:?}", m.members),
                    Err(e) => last = e.to_string(),
                }
            }
            if !self.cluster().is_up(id) {
                last = "the node exited".into();
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.membership
            .lock()
            .expect("membership lock")
            .failures
            .push(format!(
                "node {id} was not a voter {} s after it was started with --join: {last}",
                MEMBERSHIP_LIMIT.as_secs()
            ));
        Ok(())
    }

    /// Waits until every node is up and agrees on one leader; returns how long it took.
    /// Waits until no node's log waits for its refill (`log/repair.json`), up to `limit`, and
    /// records how long that took and who still waits.
    pub async fn await_refills(&self, limit: Duration) -> RefillWait {
        let t_ns = self.rec.now_ns();
        let start = std::time::Instant::now();
        loop {
            let still: Vec<u64> = {
                let cluster = self.cluster();
                cluster
                    .nodes
                    .iter()
                    .filter(|n| sickdisk::under_repair(&n.data_dir))
                    .map(|n| n.id)
                    .collect()
            };
            if still.is_empty() || start.elapsed() >= limit {
                let wait = RefillWait {
                    t_ns,
                    waited: start.elapsed(),
                    still,
                };
                self.refill_waits
                    .lock()
                    .expect("refill waits lock")
                    .push(wait.clone());
                return wait;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn await_recovery(&self, limit: Duration) -> Option<Duration> {
        let start = std::time::Instant::now();
        let (client, endpoints) = self.status_client().await?;
        while start.elapsed() < limit {
            let answers =
                futures::future::join_all(endpoints.iter().map(|e| client.status_of(e))).await;
            let leaders: Vec<Option<u64>> = answers
                .iter()
                .map(|a| a.as_ref().ok().and_then(|s| s.leader_id))
                .collect();
            if leaders.iter().all(|l| l.is_some() && *l == leaders[0]) {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    /// Heals everything: network whole, nodes resumed and running, clocks and links normal.
    pub fn heal_all(&self) -> anyhow::Result<()> {
        if let Some(p) = &self.proxies {
            p.set(Mode::Pass);
        }
        self.net.heal()?;
        self.cluster().heal()
    }
}

/// What a running fault needs undone.
enum Undo {
    Network,
    Restart(Vec<u64>),
    Resume(Vec<u64>),
    /// Back to each node's base clock rate.
    Rate(Vec<u64>),
    /// The node joins again (`--join`) and becomes a voter.
    Join(u64),
    Delay(Vec<u64>),
    /// A power cut of the node's failing disk (what it never synced is gone), then a start
    /// on a sound one.
    SoundDisk(u64),
    /// The proxies pass claims on as they come.
    Proxies,
}

/// Starts `fault`; returns how to heal it and a description.
async fn start(bed: &Bed, fault: Fault, rng: &mut StdRng) -> anyhow::Result<(Undo, String, f64)> {
    let ids = bed.ids();
    let n = ids.len();
    let leader = match fault {
        Fault::IsolateLeader
        | Fault::OneWayLeader
        | Fault::KillLeader
        | Fault::PauseLeader
        | Fault::PowerLeader
        | Fault::ReplaceVoter
        | Fault::ReplaceLeader
        | Fault::EioOne
        | Fault::EioLeader => bed.leader().await,
        _ => None,
    };
    let random = |rng: &mut StdRng| ids[rng.gen_range(0..n)];
    Ok(match fault {
        Fault::PartitionHalves => {
            let mut shuffled = ids.clone();
            shuffled.shuffle(rng);
            let (minority, majority) = shuffled.split_at(n / 2);
            for a in minority {
                for b in majority {
                    bed.net.cut(*a, *b)?;
                }
            }
            (Undo::Network, format!("{minority:?} | {majority:?}"), 0.0)
        }
        Fault::IsolateLeader | Fault::OneWayLeader => {
            let l = leader.unwrap_or_else(|| random(rng));
            for other in ids.iter().filter(|i| **i != l) {
                if fault == Fault::IsolateLeader {
                    bed.net.cut(l, *other)?;
                } else {
                    bed.net.drop_from(l, *other)?;
                }
            }
            (Undo::Network, format!("node {l}"), 0.0)
        }
        Fault::ClientCut => {
            let id = random(rng);
            bed.net.cut_clients(id)?;
            (Undo::Network, format!("clients x node {id}"), 0.0)
        }
        Fault::MajoritiesRing => {
            let mut ring = ids.clone();
            ring.shuffle(rng);
            for i in 0..n {
                for j in 0..n {
                    let d = (i + n - j) % n;
                    if i != j && d != 1 && d != n - 1 {
                        bed.net.drop_from(ring[i], ring[j])?;
                    }
                }
            }
            (Undo::Network, format!("ring {ring:?}"), 0.0)
        }
        Fault::Bridge => {
            let mut order = ids.clone();
            order.shuffle(rng);
            let mid = n / 2;
            for a in &order[..mid] {
                for b in &order[mid + 1..] {
                    bed.net.cut(*a, *b)?;
                }
            }
            (
                Undo::Network,
                format!(
                    "{:?} <{}> {:?}",
                    &order[..mid],
                    order[mid],
                    &order[mid + 1..]
                ),
                0.0,
            )
        }
        Fault::Loss => {
            for h in &bed.net.hosts {
                crate::net::in_ns(
                    &h.ns,
                    "iptables",
                    &[
                        "-A",
                        "INPUT",
                        "-m",
                        "statistic",
                        "--mode",
                        "random",
                        "--probability",
                        "0.2",
                        "-j",
                        "DROP",
                    ],
                )?;
            }
            (Undo::Network, "20% on every node".into(), 0.0)
        }
        Fault::Delay => {
            for id in &ids {
                bed.cluster().set_delay(*id, 50, 80);
            }
            (
                Undo::Delay(ids.clone()),
                "50ms + 0-80ms on every node".into(),
                0.0,
            )
        }
        Fault::ClientDelay | Fault::ClientCopies => {
            let proxies = bed
                .proxies
                .as_ref()
                .context("the client-delay and client-copies faults need the claim proxies")?;
            let (mode, detail) = if fault == Fault::ClientDelay {
                let r = crate::copies::DELAY_MS;
                let detail = format!("first attempts of claims held {}-{} ms", r.start, r.end);
                (Mode::DelayFirst, detail)
            } else {
                let r = crate::copies::COPY_AFTER_MS;
                let detail = format!(
                    "first attempts of claims sent again {}-{} ms later",
                    r.start, r.end
                );
                (Mode::Duplicate, detail)
            };
            proxies.set(mode);
            (Undo::Proxies, detail, 0.0)
        }
        Fault::KillOne | Fault::KillLeader | Fault::KillAll => {
            let victims = match fault {
                Fault::KillAll => ids.clone(),
                Fault::KillLeader => vec![leader.unwrap_or_else(|| random(rng))],
                _ => vec![random(rng)],
            };
            for v in &victims {
                bed.cluster().kill9(*v);
            }
            let d = format!("nodes {victims:?}");
            (Undo::Restart(victims), d, 0.0)
        }
        Fault::PauseOne | Fault::PauseLeader => {
            let v = if fault == Fault::PauseLeader {
                leader.unwrap_or_else(|| random(rng))
            } else {
                random(rng)
            };
            bed.cluster().pause(v);
            (Undo::Resume(vec![v]), format!("node {v}"), 0.0)
        }
        Fault::SkewWithin => {
            let mut rates = Vec::new();
            for id in &ids {
                let rate = 1.0 + rng.gen_range(-SKEW_WITHIN..=SKEW_WITHIN);
                bed.cluster().set_rate(*id, rate);
                rates.push(format!("n{id}={rate:.3}"));
            }
            (Undo::Rate(ids.clone()), rates.join(" "), SKEW_WITHIN)
        }
        Fault::PowerOne | Fault::PowerLeader | Fault::PowerMinority | Fault::PowerAll => {
            let mut victims = match fault {
                Fault::PowerAll => ids.clone(),
                Fault::PowerLeader => vec![leader.unwrap_or_else(|| random(rng))],
                Fault::PowerMinority => {
                    let mut shuffled = ids.clone();
                    shuffled.shuffle(rng);
                    shuffled.truncate((n - 1) / 2);
                    shuffled
                }
                _ => vec![random(rng)],
            };
            victims.sort_unstable();
            // Mostly, the cut lands while a write waits for its fsync (each victim's disk
            // freezes at its next fsync of unsynced writes; an idle one is cut when the wait
            // ends); otherwise at whatever moment it comes.
            let mut frozen = Vec::new();
            if rng.gen_bool(FROZEN_CUT_SHARE) {
                for v in &victims {
                    bed.cluster().freeze_at_next_fsync(*v);
                }
                let deadline = std::time::Instant::now() + FREEZE_WAIT;
                while std::time::Instant::now() < deadline
                    && !victims.iter().all(|v| bed.cluster().is_frozen(*v))
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                frozen = victims
                    .iter()
                    .copied()
                    .filter(|v| bed.cluster().is_frozen(*v))
                    .collect();
            }
            let seed = rng.gen();
            let loss = match rng.gen_range(0..3) {
                _ if bed.lose_all => Loss::All,
                0 => Loss::All,
                1 => Loss::Prefix { seed },
                _ => Loss::Torn { seed },
            };
            let mut parts = Vec::new();
            for v in &victims {
                let lost = bed.cluster().power_cut(*v, loss);
                parts.push(format!(
                    "n{v}: {} writes ({} B), {} names{}",
                    lost.writes,
                    lost.bytes,
                    lost.names,
                    if lost.failed > 0 {
                        format!(", {} undos failed", lost.failed)
                    } else {
                        String::new()
                    }
                ));
                bed.cuts.lock().expect("cuts lock").push(Cut {
                    node: *v,
                    loss,
                    lost,
                });
            }
            let d = format!(
                "nodes {victims:?} (frozen mid-fsync: {frozen:?}), {loss:?}, lost {}",
                parts.join("; ")
            );
            (Undo::Restart(victims), d, 0.0)
        }
        Fault::ReplaceVoter | Fault::ReplaceLeader => {
            let v = match (fault, leader) {
                (Fault::ReplaceLeader, Some(l)) => l,
                (_, Some(l)) => {
                    let others: Vec<u64> = ids.iter().copied().filter(|i| *i != l).collect();
                    others[rng.gen_range(0..others.len())]
                }
                (_, None) => random(rng),
            };
            bed.remove_member(v).await;
            bed.cluster().wipe(v)?;
            (
                Undo::Join(v),
                format!("node {v} removed, its disk wiped"),
                0.0,
            )
        }
        Fault::WipeDisk => {
            let v = random(rng);
            bed.cluster().wipe(v)?;
            bed.remove_member(v).await;
            (
                Undo::Join(v),
                format!("node {v}'s disk wiped, then it was removed"),
                0.0,
            )
        }
        Fault::Corrupt => {
            let mut order = ids.clone();
            order.shuffle(rng);
            let (lagging, rest) = order.split_at((n - 1) / 2);
            let (victim, current) = (rest[0], rest[1..].to_vec());
            let lag = format!("nodes {lagging:?} down while writes go on");
            for b in lagging {
                bed.cluster().kill9(*b);
            }
            bed.rec.nemesis("corrupt-lag", "start", &lag, 0.0);
            tokio::time::sleep(Duration::from_millis(rng.gen_range(CORRUPT_LAG_MS))).await;
            // The victim first: from then on nothing more is acknowledged, so every write
            // the up-to-date nodes hold, the victim holds too.
            bed.cluster().kill9(victim);
            for c in &current {
                bed.cluster().kill9(*c);
            }
            bed.rec.nemesis("corrupt-lag", "stop", &lag, 0.0);
            let kind = if rng.gen_bool(0.5) {
                DamageKind::FlippedBit
            } else {
                DamageKind::ZeroedSector
            };
            let damage = bed.cluster().damage_log(victim, kind, rng.gen())?;
            bed.cluster().launch(victim)?;
            for b in lagging {
                bed.cluster().launch(*b)?;
            }
            let d = format!(
                "node {victim}'s log damaged ({kind:?} at byte {} of the {} used in {}), \
                 started with the laggards {lagging:?}; {current:?} down until the fault ends",
                damage.offset,
                damage.used,
                damage
                    .file
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default()
            );
            bed.damages.lock().expect("damages lock").push(damage);
            (Undo::Restart(current), d, 0.0)
        }
        Fault::EioOne | Fault::EioLeader => {
            let v = match (fault, leader) {
                (Fault::EioLeader, Some(l)) => l,
                _ => random(rng),
            };
            let start_ns = bed.rec.now_ns();
            let start = std::time::Instant::now();
            bed.cluster().fail_syncs(v, true);
            // Until the node stops, or has had its first failed sync and the time to stop
            // after it (the judge decides whether that was in time).
            let exit = loop {
                if !bed.cluster().is_up(v) {
                    let how = bed.cluster().take_exit(v);
                    let (code, text) = how.unwrap_or((None, "gone".into()));
                    break Some((bed.rec.now_ns(), code, text));
                }
                let first = bed.cluster().failed_syncs(v).1;
                let waited = match first {
                    Some(at) => at.elapsed() > EIO_EXIT_LIMIT * 2,
                    None => start.elapsed() > EIO_FIRST_SYNC_WAIT,
                };
                if waited {
                    break None;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            let (failed_syncs, first) = bed.cluster().failed_syncs(v);
            let first_failed_ns = first.map(|at| bed.rec.ns_of(at));
            let noticed_ns = exit.as_ref().and_then(|_| {
                let log = bed.cluster().node(v).log.clone();
                sickdisk::failure_noticed_at(&log).map(|at| bed.rec.ns_of_wall(at))
            });
            let d = format!(
                "node {v}'s disk fails every sync: {failed_syncs} failed, {}",
                match (&exit, first_failed_ns) {
                    (Some((t, code, _)), Some(f)) => format!(
                        "the node stopped {} ms after the first (exit code {code:?})",
                        t.saturating_sub(f) / 1_000_000
                    ),
                    (Some((_, code, _)), None) => {
                        format!("the node stopped before any (exit code {code:?})")
                    }
                    (None, _) => "the node runs on".into(),
                }
            );
            bed.eio.lock().expect("eio lock").push(EioRecord {
                node: v,
                led: leader == Some(v),
                start_ns,
                failed_syncs,
                first_failed_ns,
                noticed_ns,
                exit,
                restarted_ns: None,
            });
            (Undo::SoundDisk(v), d, 0.0)
        }
    })
}

async fn undo(bed: &Bed, undo: Undo) -> anyhow::Result<()> {
    match undo {
        Undo::Join(id) => bed.join(id).await,
        Undo::Network => bed.net.heal(),
        Undo::Restart(ids) => {
            for id in ids {
                bed.cluster().launch(id)?;
            }
            Ok(())
        }
        Undo::Resume(ids) => {
            for id in ids {
                bed.cluster().resume(id);
            }
            Ok(())
        }
        Undo::Rate(ids) => {
            for id in ids {
                bed.cluster().reset_rate(id);
            }
            Ok(())
        }
        Undo::Delay(ids) => {
            for id in ids {
                bed.cluster().set_delay(id, 0, 0);
            }
            Ok(())
        }
        Undo::Proxies => {
            if let Some(p) = &bed.proxies {
                p.set(Mode::Pass);
            }
            Ok(())
        }
        Undo::SoundDisk(id) => {
            let loss = Loss::All;
            let lost = bed.cluster().power_cut(id, loss);
            bed.cuts.lock().expect("cuts lock").push(Cut {
                node: id,
                loss,
                lost,
            });
            bed.cluster().launch(id)?;
            let now = bed.rec.now_ns();
            if let Some(r) = bed
                .eio
                .lock()
                .expect("eio lock")
                .iter_mut()
                .rev()
                .find(|r| r.node == id)
            {
                r.restarted_ns = Some(now);
            }
            Ok(())
        }
    }
}
