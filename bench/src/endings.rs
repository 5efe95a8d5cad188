//! The endings bench: a fresh 3-node baton cluster where S client sessions hold L leases
//! in all (each under a `LeaseGuard`), and an operator revokes R of them one at a time.
//!
//! Measured, with those S sessions and L leases in place:
//! - revoke: from the revoke's send to the holder's `lost()` firing (an upper bound on "from
//!   the commit of the ending entry": the revoke's own commit is inside it), p50 / p99 / max
//!   over the R revokes;
//! - handoff: R times, a giver session claims a fresh key under a guard and offers it, and a
//!   taker accepts: from the accept's send to the giver's `lost()` (handed off);
//! - expiry: one session claims R fresh keys with the cluster's shortest TTL and never renews
//!   them, its endings stream open (the raw `Endings` call: a guard renews, so its lease never
//!   expires while it listens): from the expiry entry's proposal (the leader's wall clock in
//!   the ending) to its arrival, on the same machine's clock (ms resolution);
//! - the leader's resident memory per session (`VmRSS` with every guard started and its
//!   session's endings stream open, minus before; the leases' own memory is in it); the
//!   endings streams the leader counted; and the leader's CPU while the sessions only
//!   listen ([`IDLE_WINDOW`] with nothing happening: the progress markers, every
//!   `ENDINGS_PROGRESS_INTERVAL_MS` per stream, and the Raft heartbeats).
//!
//! The sessions run in this process, on the same cores as the nodes.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use baton_client::{
    ClaimOutcome, Client, ClientConfig, EndedHow, GuardedClaim, HandoffNote, LeaseGuard, LossReason,
};
use baton_proto::v1 as pb;
use serde::Serialize;

use crate::cluster::{cpu_seconds, BatonCluster};
use crate::metrics::{get_metrics, sample};
use crate::scale::memory_kib;

/// Most sessions one run starts.
pub const ENDINGS_SESSIONS_MAX: usize = 20_000;
/// Most leases one run holds.
pub const ENDINGS_LEASES_MAX: usize = 100_000;
/// Most revokes one run measures.
pub const ENDINGS_REVOKES_MAX: usize = 10_000;
/// How long the guards' streams may take to open, and one revoke to be heard.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// Every lease's TTL: renewals (a third of it) never come during the run, so every loss
/// measured was pushed.
const TTL: Duration = Duration::from_secs(3600);
const PREFIX: &str = "ended/";
/// How long the leader's CPU is sampled while every session only listens.
pub const IDLE_WINDOW: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct EndingsConfig {
    pub sessions: usize,
    pub leases: usize,
    pub revokes: usize,
    /// Handoffs measured, and expiries.
    pub handoffs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndingsReport {
    pub sessions: usize,
    pub leases: usize,
    pub revokes: usize,
    /// Handoffs measured, and expiries.
    pub handoffs: usize,
    /// Endings streams the leader counted with every guard started.
    pub streams: usize,
    /// (leader RSS with the guards and streams - before) / sessions.
    pub leader_bytes_per_session: f64,
    /// The leader's CPU (one core = 100 %) over [`IDLE_WINDOW`] while the sessions listen.
    pub leader_idle_cpu_pct: f64,
    /// From the revoke's send to `lost()`, over the revokes.
    pub lost_p50_ms: f64,
    pub lost_p99_ms: f64,
    pub lost_max_ms: f64,
    /// From the accept's send to the giver's `lost()`, over as many handoffs.
    pub handoff: Spread,
    /// From the expiry's proposal to its arrival on the holder's stream, over as many
    /// expiries.
    pub expiry: Spread,
}

/// p50 / p99 / max of some delays, in ms.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Spread {
    fn of(mut delays: Vec<f64>) -> Spread {
        delays.sort_by(f64::total_cmp);
        let pct = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
        Spread {
            p50_ms: pct(0.5),
            p99_ms: pct(0.99),
            max_ms: delays.last().copied().unwrap_or(f64::NAN),
        }
    }

    fn text(&self) -> String {
        format!(
            "{:.1} / {:.1} / {:.1} ms",
            self.p50_ms, self.p99_ms, self.max_ms
        )
    }
}

/// The cluster's shortest TTL (`BatonCluster`'s nodes run with the default `ttl_ms_min`).
const EXPIRY_TTL: Duration = Duration::from_secs(2);

/// Runs the endings bench on a fresh cluster of `node_bin` under `dir`.
pub async fn run(
    node_bin: &Path,
    dir: &Path,
    cfg: &EndingsConfig,
) -> anyhow::Result<EndingsReport> {
    if cfg.sessions == 0 || cfg.sessions > ENDINGS_SESSIONS_MAX {
        bail!("sessions must be 1 to {ENDINGS_SESSIONS_MAX}");
    }
    if cfg.leases < cfg.sessions || cfg.leases > ENDINGS_LEASES_MAX {
        bail!("leases must be at least the sessions and at most {ENDINGS_LEASES_MAX}");
    }
    if cfg.revokes == 0 || cfg.revokes > cfg.leases.min(ENDINGS_REVOKES_MAX) {
        bail!("revokes must be 1 to the leases (at most {ENDINGS_REVOKES_MAX})");
    }
    if cfg.handoffs == 0 || cfg.handoffs > ENDINGS_REVOKES_MAX {
        bail!("handoffs must be 1 to {ENDINGS_REVOKES_MAX}");
    }
    // Every session is its own client: one connection to the leader, for its calls and
    // its endings stream.
    let limit = [
        "--connections-max".to_string(),
        (cfg.sessions + 1_000).to_string(),
    ];
    let mut cluster = BatonCluster::start_with(node_bin, 3, dir, &limit, "warn")?;
    cluster
        .wait_healthy_on(&format!("{PREFIX}health"), Duration::from_secs(30))
        .await?;
    let admin = cluster.admin()?;
    let config = || cluster.client_config();
    let operator = Client::connect(config()).await?;
    let (leader, leader_pid) = cluster.leader(&operator).await?;
    let before = memory_kib(leader_pid).map(|m| m.0).unwrap_or(0);

    // Each session asks the leader first, so that it holds one connection (10,000 sessions
    // with a connection to a follower too would pass this process's open-files limit).
    let mut leader_first = cluster.endpoints.clone();
    leader_first.rotate_left(leader - 1);
    // Session s holds leases s, s + S, s + 2S, ...; each session claims its own in order.
    let mut claiming = tokio::task::JoinSet::new();
    for s in 0..cfg.sessions {
        let client = Client::connect(ClientConfig {
            endpoints: leader_first.clone(),
            ..config()
        })
        .await?;
        let (sessions, leases) = (cfg.sessions, cfg.leases);
        claiming.spawn(async move {
            let mut guards = Vec::new();
            for i in (s..leases).step_by(sessions) {
                let key = format!("{PREFIX}{i:06}");
                match client.claim_guarded(&key, "holder", TTL).await {
                    Ok(GuardedClaim::Granted(g)) => guards.push((i, g)),
                    Ok(GuardedClaim::Held { lease, .. }) => {
                        return Err(format!("{key} is held by {}", lease.holder_name))
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok(guards)
        });
    }
    let mut guards: Vec<Option<LeaseGuard>> = (0..cfg.leases).map(|_| None).collect();
    while let Some(joined) = claiming.join_next().await {
        for (i, g) in joined?.map_err(|e| anyhow::anyhow!("a claim failed: {e}"))? {
            guards[i] = Some(g);
        }
    }
    let open_until = Instant::now() + SETTLE_LIMIT;
    let mut last_error = String::new();
    let streams = loop {
        let open = match get_metrics(&admin[leader - 1]) {
            Ok(m) => sample(&m, "baton_endings_streams").unwrap_or(0.0) as usize,
            Err(e) => {
                last_error = format!("; the leader's metrics: {e:#}");
                0
            }
        };
        if open >= cfg.sessions {
            break open;
        }
        if Instant::now() > open_until {
            bail!(
                "only {open} of {} endings streams opened{last_error}",
                cfg.sessions
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = memory_kib(leader_pid).map(|m| m.0).unwrap_or(0);
    let cpu_before = cpu_seconds(&[leader_pid]);
    tokio::time::sleep(IDLE_WINDOW).await;
    let leader_idle_cpu_pct =
        (cpu_seconds(&[leader_pid]) - cpu_before) / IDLE_WINDOW.as_secs_f64() * 100.0;

    // Revoke R leases spread over the sessions, one at a time.
    let step = (cfg.leases / cfg.revokes).max(1);
    let mut delays = Vec::new();
    for r in 0..cfg.revokes {
        let i = (r * step) % cfg.leases;
        let guard = guards[i].take().context("each lease is revoked once")?;
        let key = guard.key().to_owned();
        let sent = Instant::now();
        let heard = async {
            let lost = tokio::time::timeout(SETTLE_LIMIT, guard.lost()).await;
            (lost, Instant::now())
        };
        let (revoked, (lost, heard_at)) = tokio::join!(operator.revoke(&key, "bench"), heard);
        revoked?;
        match lost {
            Ok(LossReason::Ended(_)) => {
                delays.push(heard_at.duration_since(sent).as_secs_f64() * 1e3)
            }
            Ok(other) => bail!("{key} was lost otherwise than by the push: {other}"),
            Err(_) => bail!("{key}'s holder heard nothing within {SETTLE_LIMIT:?}"),
        }
        drop(guard);
    }
    let handoff = handoffs(&config, &leader_first, cfg.handoffs).await?;
    let expiry = expiries(&cluster.endpoints[leader - 1], &config, cfg.handoffs).await?;
    // Stop the rest without releasing: a dropped guard would release in a task of its own,
    // which, once the cluster is stopped, retries into the next measurement.
    for guard in guards.into_iter().flatten() {
        guard.abandon().await;
    }
    delays.sort_by(f64::total_cmp);
    let pct = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
    cluster.procs.stop();
    Ok(EndingsReport {
        sessions: cfg.sessions,
        leases: cfg.leases,
        revokes: cfg.revokes,
        handoffs: cfg.handoffs,
        streams,
        leader_bytes_per_session: (after.saturating_sub(before) * 1024) as f64
            / cfg.sessions as f64,
        leader_idle_cpu_pct,
        lost_p50_ms: pct(0.5),
        lost_p99_ms: pct(0.99),
        lost_max_ms: delays.last().copied().unwrap_or(f64::NAN),
        handoff,
        expiry,
    })
}

/// `n` handoffs, one at a time: a giver claims a fresh key under a guard and offers it to
/// the taker; from the taker's accept's send to the giver's `lost()`.
async fn handoffs(
    config: &impl Fn() -> ClientConfig,
    leader_first: &[String],
    n: usize,
) -> anyhow::Result<Spread> {
    let session = || {
        Client::connect(ClientConfig {
            endpoints: leader_first.to_vec(),
            ..config()
        })
    };
    let (giver, taker) = (session().await?, session().await?);
    let mut delays = Vec::new();
    for h in 0..n {
        let key = format!("{PREFIX}handoff-{h:05}");
        let guard = match giver.claim_guarded(&key, "giver", TTL).await? {
            GuardedClaim::Granted(g) => g,
            GuardedClaim::Held { lease, .. } => bail!("{key} is held by {}", lease.holder_name),
        };
        let note = HandoffNote {
            done: "bench".into(),
            ..HandoffNote::default()
        };
        giver
            .offer(&key, guard.token(), "taker", note, Duration::from_secs(60))
            .await?;
        let sent = Instant::now();
        let heard = async {
            let lost = tokio::time::timeout(SETTLE_LIMIT, guard.lost()).await;
            (lost, Instant::now())
        };
        let (accepted, (lost, heard_at)) = tokio::join!(taker.accept(&key, "taker", TTL), heard);
        accepted?;
        match lost {
            Ok(LossReason::Ended(e)) if e.what == EndedHow::HandedOff => {
                delays.push(heard_at.duration_since(sent).as_secs_f64() * 1e3)
            }
            Ok(other) => bail!("the giver of {key} lost it otherwise than by the handoff: {other}"),
            Err(_) => bail!("the giver of {key} heard nothing within {SETTLE_LIMIT:?}"),
        }
        guard.abandon().await;
    }
    Ok(Spread::of(delays))
}

/// `n` leases claimed at once by one session with [`EXPIRY_TTL`], never renewed, its endings
/// stream open on the leader at `endpoint`: from each expiry's proposal to its arrival.
async fn expiries(
    endpoint: &str,
    config: &impl Fn() -> ClientConfig,
    n: usize,
) -> anyhow::Result<Spread> {
    let holder = Client::connect(config()).await?;
    let mut raw = pb::baton_client::BatonClient::connect(format!("http://{endpoint}")).await?;
    let mut stream = raw
        .endings(pb::EndingsRequest {
            client_id: holder.client_id().to_owned(),
            from_revision: 0,
            grants: false,
        })
        .await?
        .into_inner();
    for e in 0..n {
        let key = format!("{PREFIX}expire-{e:05}");
        match holder.claim(&key, "expiring", EXPIRY_TTL).await? {
            ClaimOutcome::Granted(_) => {}
            ClaimOutcome::Held { lease, .. } => bail!("{key} is held by {}", lease.holder_name),
        }
    }
    let mut delays = Vec::new();
    let until = Instant::now() + SETTLE_LIMIT;
    while delays.len() < n {
        let next = tokio::time::timeout_at(until.into(), stream.message())
            .await
            .with_context(|| format!("only {} of {n} expiries heard", delays.len()))??
            .context("the endings stream ended")?;
        if next.what != baton_proto::ENDED_EXPIRED {
            continue;
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as u64;
        delays.push(now_ms.saturating_sub(next.at_unix_ms) as f64);
    }
    Ok(Spread::of(delays))
}

/// One table row per report.
pub fn render(reports: &[EndingsReport]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>8} | {:>7} | {:>7} | {:>8} | {:>7} | {:>14} | {:>13} | {:>26} | {:>26} | {:>26}",
        "sessions",
        "leases",
        "revokes",
        "handoffs",
        "streams",
        "leader B/sess",
        "leader idle %",
        "revoke->lost p50/p99/max",
        "handoff->lost p50/p99/max",
        "expiry->heard p50/p99/max"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:>8} | {:>7} | {:>7} | {:>8} | {:>7} | {:>14.0} | {:>13.1} | {:>26} | {:>26} | {:>26}",
            r.sessions,
            r.leases,
            r.revokes,
            r.handoffs,
            r.streams,
            r.leader_bytes_per_session,
            r.leader_idle_cpu_pct,
            format!(
                "{:.1} / {:.1} / {:.1} ms",
                r.lost_p50_ms, r.lost_p99_ms, r.lost_max_ms
            ),
            r.handoff.text(),
            r.expiry.text(),
        );
    }
    out
}

/// Most `baton run` revokes one run measures.
pub const SIGTERM_SAMPLES_MAX: usize = 200;

/// From a revoke to `baton run`'s child receiving SIGTERM: the child is `baton-scale
/// --await-sigterm FILE` (this program), which writes the wall-clock instant of its SIGTERM
/// to FILE; `baton run` holds the key with a 60 s TTL, so no renewal (every 20 s) can be
/// what told it.
#[derive(Debug, Clone, Serialize)]
pub struct SigtermReport {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Runs `samples` revokes of `baton run` holders (the `baton` CLI at `cli_bin`, this program
/// at `me` as the child) on a fresh cluster under `dir`.
pub async fn run_sigterm(
    node_bin: &Path,
    cli_bin: &Path,
    me: &Path,
    dir: &Path,
    samples: usize,
) -> anyhow::Result<SigtermReport> {
    if samples == 0 || samples > SIGTERM_SAMPLES_MAX {
        bail!("samples must be 1 to {SIGTERM_SAMPLES_MAX}");
    }
    let mut cluster = BatonCluster::start_with(node_bin, 3, dir, &[], "warn")?;
    cluster
        .wait_healthy_on(&format!("{PREFIX}health"), Duration::from_secs(30))
        .await?;
    let operator = Client::connect(ClientConfig {
        retry_deadline: Duration::from_secs(30),
        ..ClientConfig::with_endpoints(cluster.endpoints.iter().cloned())
    })
    .await?;
    let mut delays = Vec::new();
    for i in 0..samples {
        let key = format!("{PREFIX}run-{i}");
        let stamp = dir.join(format!("sigterm-{i}"));
        let mut run = tokio::process::Command::new(cli_bin)
            .arg("--endpoints")
            .arg(cluster.endpoints.join(","))
            .args(["run", &key, "--ttl", "60s", "--grace", "10s", "--"])
            .arg(me)
            .arg("--await-sigterm")
            .arg(&stamp)
            .env_remove("BATON_CLIENT_ID")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting baton run")?;
        // Wait until the child runs (its ready file), so the lease is held.
        let ready = stamp.with_extension("ready");
        let until = Instant::now() + SETTLE_LIMIT;
        while !ready.exists() {
            if Instant::now() > until {
                bail!("baton run's child never started for {key}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let sent = std::time::SystemTime::now();
        operator.revoke_with(&key, "bench", false).await?;
        tokio::time::timeout(SETTLE_LIMIT, run.wait())
            .await
            .context("baton run did not stop")??;
        let at_ns: u128 = std::fs::read_to_string(&stamp)
            .with_context(|| format!("the child of {key} got no SIGTERM"))?
            .trim()
            .parse()?;
        let sent_ns = sent.duration_since(std::time::UNIX_EPOCH)?.as_nanos();
        delays.push(at_ns.saturating_sub(sent_ns) as f64 / 1e6);
    }
    cluster.procs.stop();
    delays.sort_by(f64::total_cmp);
    let pct = |p: f64| delays[((delays.len() - 1) as f64 * p).round() as usize];
    Ok(SigtermReport {
        samples,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        max_ms: delays.last().copied().unwrap_or(f64::NAN),
    })
}

/// The child of `run_sigterm`: says it is ready (FILE.ready), waits for SIGTERM, writes its
/// wall-clock instant in ns to FILE.
pub async fn await_sigterm(stamp: &Path) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    std::fs::write(stamp.with_extension("ready"), b"")?;
    term.recv().await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    std::fs::write(stamp, now.as_nanos().to_string())?;
    Ok(())
}
