//! baton-workload: the `baton bench` workload, a crate of its own so that the CLI and the
//! comparison with etcd (`baton-compare`) run the same loop, and the client library carries
//! none of it.
//!
//! [`run`] starts [`BenchConfig::clients`] claimants at once. Each is its own [`Client`]
//! (its own connections, client id and request session: they share nothing, like separate
//! agent processes) and loops until the run ends:
//!
//! 1. claim a key picked uniformly at random among [`BenchConfig::keys`] keys named
//!    `PREFIX000000`, `PREFIX000001`, ... (each claimant has its own random generator);
//! 2. if it is granted, renew it once, then release it (a **full cycle**); if it is held,
//!    go on with the next key.
//!
//! The run lasts [`BenchConfig::warmup`] + [`BenchConfig::duration`]. Only operations that
//! start after the warm-up and finish before the end are counted, errors included; a cycle
//! counts when its claim started after the warm-up and its release finished before the end.
//! A claimant whose claim is granted after the end releases the key (uncounted) before it
//! stops, so a run leaves no keys held behind it unless a release failed.
//!
//! Errors never stop a claimant: they are counted by kind ([`BenchErrors`]) and it goes on
//! with the next key. Each operation retries an unavailable cluster for at most
//! [`BenchConfig::retry_deadline`], so a run ends at most about two retry deadlines after
//! its end.
//!
//! Latencies (microseconds, of every operation that got an answer, refusals included) are
//! kept in [`LatencyHistogram`]s: log-linear buckets, exact below 128 µs and within 1/64
//! (1.6 %) above, like an HDR histogram with two significant digits. Memory is bounded (at
//! most [`HISTOGRAM_BUCKETS_MAX`] counters per histogram, four histograms per claimant)
//! whatever the duration, and histograms merge exactly. The maximum is exact; a percentile
//! is the upper bound of the bucket it falls in, capped at the maximum, so it is never
//! below the true value and `p50 <= p99 <= max` always holds (`histogram.rs`).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use baton_client::{
    ClaimOutcome, Client, ClientConfig, Error, ReleaseOutcome, RenewOutcome, DEFAULT_ENDPOINT,
};

mod histogram;
#[cfg(test)]
mod tests;

pub use histogram::{
    LatencyHistogram, LatencySummary, HISTOGRAM_BUCKETS_MAX, HISTOGRAM_EXACT_BELOW,
    HISTOGRAM_SUB_BUCKETS,
};

/// Most concurrent claimants: each is a client with its own connections.
pub const BENCH_CLIENTS_MAX: usize = 4096;
/// Most keys the claimants pick from. Every key the bench claims keeps a case file in the
/// cluster (which counts towards the cluster's 1,000,000 keys), so use a scratch cluster.
pub const BENCH_KEYS_MAX: usize = 1_000_000;
/// Longest measured duration.
pub const BENCH_DURATION_MAX: Duration = Duration::from_secs(3600);
/// Longest warm-up.
pub const BENCH_WARMUP_MAX: Duration = Duration::from_secs(600);
/// Shortest lease the claims ask for (the node's own minimum, 2 s by default, may be higher:
/// claims below it are refused and counted as `other` errors).
pub const BENCH_TTL_MIN: Duration = Duration::from_secs(1);
/// Longest lease the claims ask for (the node's maximum).
pub const BENCH_TTL_MAX: Duration = Duration::from_secs(3600);
/// Longest time one operation may retry an unavailable cluster.
pub const BENCH_RETRY_DEADLINE_MAX: Duration = Duration::from_secs(60);
/// How long one operation retries an unavailable cluster unless told otherwise; after that
/// it counts as an `unavailable` error and the claimant goes on.
pub const BENCH_RETRY_DEADLINE_DEFAULT: Duration = Duration::from_secs(5);
/// The key prefix unless told otherwise.
pub const BENCH_KEY_PREFIX_DEFAULT: &str = "bench/";
/// Digits of the key number after the prefix (`bench/000123`): enough for
/// [`BENCH_KEYS_MAX`] keys.
pub const BENCH_KEY_DIGITS: usize = 6;
const _: () = assert!(BENCH_KEYS_MAX <= 10usize.pow(BENCH_KEY_DIGITS as u32));
/// Longest key the cluster accepts.
pub use baton_proto::limits::KEY_BYTES_MAX;
/// Longest key prefix: the prefix and the key number must fit in a key.
pub const BENCH_KEY_PREFIX_BYTES_MAX: usize = KEY_BYTES_MAX - BENCH_KEY_DIGITS;

/// What [`run`] does; checked by [`BenchConfig::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchConfig {
    /// Nodes to talk to, as for [`ClientConfig::endpoints`].
    pub endpoints: Vec<String>,
    /// Concurrent claimants, 1 to [`BENCH_CLIENTS_MAX`], each its own [`Client`].
    pub clients: usize,
    /// Keys to pick from, 1 to [`BENCH_KEYS_MAX`]: fewer keys, more contention.
    pub keys: usize,
    /// How long the measured part lasts, above zero and at most [`BENCH_DURATION_MAX`].
    pub duration: Duration,
    /// How long the claimants run before measuring starts (connections, leader discovery),
    /// at most [`BENCH_WARMUP_MAX`]; may be zero.
    pub warmup: Duration,
    /// The TTL of every claim, [`BENCH_TTL_MIN`] to [`BENCH_TTL_MAX`].
    pub ttl: Duration,
    /// Keys are this prefix and a 6-digit number, e.g. `bench/000123`; at most
    /// [`BENCH_KEY_PREFIX_BYTES_MAX`] bytes, no control characters; may be empty.
    pub key_prefix: String,
    /// How long one operation retries an unavailable cluster before it counts as an
    /// `unavailable` error ([`ClientConfig::retry_deadline`]), above zero and at most
    /// [`BENCH_RETRY_DEADLINE_MAX`].
    pub retry_deadline: Duration,
    /// TLS toward the nodes, as for [`ClientConfig::tls`].
    pub tls: Option<baton_client::ClientTls>,
    /// A bearer token every claimant shows, as for [`ClientConfig::token`].
    pub token: Option<baton_client::BearerToken>,
    /// The holder name of every claimant (each still its own client id, so its own
    /// holder); `None`: `bench-0`, `bench-1`, .... With auth on, the token's principal (or a
    /// name the permissions let it use).
    pub holder: Option<String>,
}

impl Default for BenchConfig {
    /// 16 clients over 1,000 keys for 10 s after a 2 s warm-up, TTL 10 s, keys `bench/...`,
    /// against the default endpoint.
    fn default() -> Self {
        BenchConfig {
            endpoints: vec![DEFAULT_ENDPOINT.to_owned()],
            clients: 16,
            keys: 1000,
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            ttl: Duration::from_secs(10),
            key_prefix: BENCH_KEY_PREFIX_DEFAULT.to_owned(),
            retry_deadline: BENCH_RETRY_DEADLINE_DEFAULT,
            tls: None,
            token: None,
            holder: None,
        }
    }
}

impl BenchConfig {
    /// Checks every field; the error ([`Error::Config`]) names the field, the limit and the
    /// value given.
    pub fn validate(&self) -> Result<(), Error> {
        let refuse = |message: String| Err(Error::Config(format!("bench: {message}")));
        if !(1..=BENCH_CLIENTS_MAX).contains(&self.clients) {
            return refuse(format!(
                "clients must be 1 to {BENCH_CLIENTS_MAX}, got {}",
                self.clients
            ));
        }
        if !(1..=BENCH_KEYS_MAX).contains(&self.keys) {
            return refuse(format!(
                "keys must be 1 to {BENCH_KEYS_MAX}, got {}",
                self.keys
            ));
        }
        if self.duration.is_zero() || self.duration > BENCH_DURATION_MAX {
            return refuse(format!(
                "duration must be above zero and at most {}, got {}",
                secs(BENCH_DURATION_MAX),
                secs(self.duration)
            ));
        }
        if self.warmup > BENCH_WARMUP_MAX {
            return refuse(format!(
                "warm-up must be at most {}, got {}",
                secs(BENCH_WARMUP_MAX),
                secs(self.warmup)
            ));
        }
        if !(BENCH_TTL_MIN..=BENCH_TTL_MAX).contains(&self.ttl) {
            return refuse(format!(
                "ttl must be {} to {}, got {}",
                secs(BENCH_TTL_MIN),
                secs(BENCH_TTL_MAX),
                secs(self.ttl)
            ));
        }
        if self.retry_deadline.is_zero() || self.retry_deadline > BENCH_RETRY_DEADLINE_MAX {
            return refuse(format!(
                "retry deadline must be above zero and at most {}, got {}",
                secs(BENCH_RETRY_DEADLINE_MAX),
                secs(self.retry_deadline)
            ));
        }
        if self.key_prefix.len() > BENCH_KEY_PREFIX_BYTES_MAX {
            return refuse(format!(
                "key prefix must be at most {BENCH_KEY_PREFIX_BYTES_MAX} bytes (keys are at \
                 most {KEY_BYTES_MAX} bytes with the {BENCH_KEY_DIGITS}-digit number), got {}",
                self.key_prefix.len()
            ));
        }
        if self.key_prefix.chars().any(char::is_control) {
            return refuse(format!(
                "key prefix must not contain control characters, got {:?}",
                self.key_prefix
            ));
        }
        self.client_config().validate()?;
        Ok(())
    }

    /// Key number `index` (below [`BenchConfig::keys`]): `bench/000123`.
    pub fn key(&self, index: usize) -> String {
        let mut key = String::new();
        write_key(&mut key, &self.key_prefix, index);
        key
    }

    /// The configuration of each claimant's client (each gets its own random client id).
    fn client_config(&self) -> ClientConfig {
        ClientConfig {
            retry_deadline: self.retry_deadline,
            tls: self.tls.clone(),
            token: self.token.clone(),
            ..ClientConfig::with_endpoints(self.endpoints.iter().cloned())
        }
    }
}

/// `1.5s`, for messages.
fn secs(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

fn write_key(key: &mut String, prefix: &str, index: usize) {
    key.clear();
    key.push_str(prefix);
    // Writing to a String cannot fail.
    let _ = write!(key, "{index:0width$}", width = BENCH_KEY_DIGITS);
}

/// What a run measured. Serialises to the JSON line `baton bench` prints
/// (`docs/cli-json.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// Concurrent claimants.
    pub clients: usize,
    /// Keys picked from.
    pub keys: usize,
    /// The key prefix.
    pub key_prefix: String,
    /// The measured duration, in seconds (the rates are per second of it).
    pub duration_s: f64,
    /// The warm-up before it, in seconds.
    pub warmup_s: f64,
    /// The TTL of every claim, in milliseconds.
    pub ttl_ms: u64,
    /// Claims counted, whatever their outcome (granted, held or an error).
    pub attempts: u64,
    /// `attempts` per second, to one decimal.
    pub attempts_per_s: f64,
    /// Counted claims that were granted.
    pub granted: u64,
    /// Counted claims that were refused because another claimant held the key.
    pub held: u64,
    /// Full cycles counted: claim granted, renewed, released, all inside the window.
    pub cycles: u64,
    /// `cycles` per second, to one decimal.
    pub cycles_per_s: f64,
    /// `granted / attempts` (0 when there were no attempts).
    pub win_rate: f64,
    /// Counted operations that failed, by kind.
    pub errors: BenchErrors,
    /// The last error one of the claimants saw (counted or not), for a person to read;
    /// `None` when there was none at all.
    pub last_error: Option<String>,
    /// Latencies of the counted operations that got an answer, and of the full cycles.
    pub latency_us: BenchLatencies,
}

impl BenchReport {
    /// No counted claim got an answer: every attempt failed with `unavailable`, or none
    /// finished inside the measured window. `baton bench` exits 4 then.
    pub fn no_answer(&self) -> bool {
        self.granted == 0
            && self.held == 0
            && self.errors.refused == 0
            && self.errors.lost == 0
            && self.errors.other == 0
    }
}

/// Counted operations that failed, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BenchErrors {
    /// No answer before the retry deadline ([`Error::Unavailable`]).
    pub unavailable: u64,
    /// The cluster refused the request as not allowed now ([`Error::Refused`]), e.g. a
    /// claim of a quarantined key.
    pub refused: u64,
    /// A renewal or release answered that the claimant's token was no longer current.
    pub lost: u64,
    /// Anything else: bad input (a TTL below the node's minimum), a malformed reply.
    pub other: u64,
}

impl BenchErrors {
    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.unavailable + self.refused + self.lost + self.other
    }

    fn add(&mut self, other: &BenchErrors) {
        self.unavailable += other.unavailable;
        self.refused += other.refused;
        self.lost += other.lost;
        self.other += other.other;
    }

    fn count(&mut self, error: &Error) {
        match error {
            Error::Unavailable { .. } => self.unavailable += 1,
            Error::Refused(_) => self.refused += 1,
            _ => self.other += 1,
        }
    }
}

/// Latency summaries per step and per full cycle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BenchLatencies {
    pub claim: LatencySummary,
    pub renew: LatencySummary,
    pub release: LatencySummary,
    /// From the claim's start to the release's end.
    pub cycle: LatencySummary,
}

/// The measured window: operations that start at or after `start` and finish at or before
/// `end` count. Shared with other systems' loops (baton-bench's etcd loop), so that both
/// sides are counted by the same rule.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    /// Whether an operation that began and finished at these instants counts.
    pub fn counts(&self, began: Instant, finished: Instant) -> bool {
        began >= self.start && finished <= self.end
    }
}

/// One claimant's counts; merged into the report at the end ([`report`]). Public so that
/// another system's loop (baton-bench's etcd loop) tallies exactly like baton's.
#[derive(Debug, Default)]
pub struct Tally {
    pub attempts: u64,
    pub granted: u64,
    pub held: u64,
    pub cycles: u64,
    pub errors: BenchErrors,
    pub last_error: Option<String>,
    pub claim: LatencyHistogram,
    pub renew: LatencyHistogram,
    pub release: LatencyHistogram,
    pub cycle: LatencyHistogram,
}

impl Tally {
    /// Notes an operation that got no answer; counts it if it is inside the window.
    fn error(&mut self, error: &Error, counted: bool) {
        if counted {
            self.errors.count(error);
        }
        self.last_error = Some(error.to_string());
    }

    /// Adds another claimant's counts.
    pub fn merge(&mut self, other: Tally) {
        self.attempts += other.attempts;
        self.granted += other.granted;
        self.held += other.held;
        self.cycles += other.cycles;
        self.errors.add(&other.errors);
        if other.last_error.is_some() {
            self.last_error = other.last_error;
        }
        self.claim.merge(&other.claim);
        self.renew.merge(&other.renew);
        self.release.merge(&other.release);
        self.cycle.merge(&other.cycle);
    }
}

/// What every claimant needs, besides its own client and random generator.
#[derive(Debug, Clone)]
struct Plan {
    key_prefix: String,
    keys: usize,
    ttl: Duration,
    window: Window,
}

/// Runs the benchmark: see the module documentation. Fails only on a bad configuration
/// ([`Error::Config`]); errors of the cluster are counted in the report.
pub async fn run(config: BenchConfig) -> Result<BenchReport, Error> {
    config.validate()?;
    let mut clients = Vec::with_capacity(config.clients);
    for _ in 0..config.clients {
        // A random client id each: the claimants are separate holders.
        clients.push(Client::connect(config.client_config()).await?);
    }
    let start = Instant::now();
    let window_start = start + config.warmup;
    let plan = Plan {
        key_prefix: config.key_prefix.clone(),
        keys: config.keys,
        ttl: config.ttl,
        window: Window {
            start: window_start,
            end: window_start + config.duration,
        },
    };
    let run_seed: u64 = rand::random();
    let mut tasks = tokio::task::JoinSet::new();
    for (number, client) in clients.into_iter().enumerate() {
        let plan = plan.clone();
        let holder = config
            .holder
            .clone()
            .unwrap_or_else(|| format!("bench-{number}"));
        let rng = StdRng::seed_from_u64(run_seed.wrapping_add(number as u64));
        tasks.spawn(claimant(client, holder, rng, plan));
    }
    let mut total = Tally::default();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(tally) => total.merge(tally),
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => {
                return Err(Error::Protocol(format!(
                    "a bench claimant stopped: {error}"
                )))
            }
        }
    }
    Ok(report(&config, total))
}

/// The report of a run from the merged tally of its claimants.
pub fn report(config: &BenchConfig, total: Tally) -> BenchReport {
    let duration_s = config.duration.as_secs_f64();
    let per_s = |count: u64| (count as f64 / duration_s * 10.0).round() / 10.0;
    BenchReport {
        clients: config.clients,
        keys: config.keys,
        key_prefix: config.key_prefix.clone(),
        duration_s,
        warmup_s: config.warmup.as_secs_f64(),
        ttl_ms: u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX),
        attempts: total.attempts,
        attempts_per_s: per_s(total.attempts),
        granted: total.granted,
        held: total.held,
        cycles: total.cycles,
        cycles_per_s: per_s(total.cycles),
        win_rate: if total.attempts == 0 {
            0.0
        } else {
            total.granted as f64 / total.attempts as f64
        },
        errors: total.errors,
        last_error: total.last_error,
        latency_us: BenchLatencies {
            claim: total.claim.summary(),
            renew: total.renew.summary(),
            release: total.release.summary(),
            cycle: total.cycle.summary(),
        },
    }
}

/// One claimant's loop, until the window ends. Nothing here allocates per operation but the
/// requests the client builds; errors are only counted.
async fn claimant(client: Client, holder: String, mut rng: StdRng, plan: Plan) -> Tally {
    let window = plan.window;
    let mut tally = Tally::default();
    let mut key = String::with_capacity(plan.key_prefix.len() + BENCH_KEY_DIGITS);
    while Instant::now() < window.end {
        write_key(&mut key, &plan.key_prefix, rng.gen_range(0..plan.keys));

        let claim_start = Instant::now();
        let claimed = client.claim(&key, &holder, plan.ttl).await;
        let claim_end = Instant::now();
        let counted = window.counts(claim_start, claim_end);
        if counted {
            tally.attempts += 1;
        }
        let token = match claimed {
            Ok(outcome) => {
                if counted {
                    tally.claim.record(claim_end - claim_start);
                }
                match outcome {
                    ClaimOutcome::Granted(grant) => {
                        tally.granted += u64::from(counted);
                        grant.lease.token
                    }
                    ClaimOutcome::Held { .. } => {
                        tally.held += u64::from(counted);
                        continue;
                    }
                }
            }
            Err(error) => {
                tally.error(&error, counted);
                continue;
            }
        };

        // After the end, skip the renewal: only free the key again.
        let mut full_cycle = false;
        let renew_start = Instant::now();
        if renew_start < window.end {
            let renewed = client.renew(&key, token).await;
            let renew_end = Instant::now();
            let counted = window.counts(renew_start, renew_end);
            match renewed {
                Ok(outcome) => {
                    if counted {
                        tally.renew.record(renew_end - renew_start);
                    }
                    match outcome {
                        RenewOutcome::Renewed(_) => full_cycle = true,
                        RenewOutcome::Lost { .. } => {
                            // Someone else has the key, or nobody: nothing to release.
                            tally.errors.lost += u64::from(counted);
                            tally.last_error = Some(format!("renewal of {key} lost the lease"));
                            continue;
                        }
                    }
                }
                // Release all the same: the claim may still hold the key.
                Err(error) => tally.error(&error, counted),
            }
        }

        let release_start = Instant::now();
        let released = client.release(&key, token).await;
        let release_end = Instant::now();
        let counted = window.counts(release_start, release_end);
        match released {
            Ok(outcome) => {
                if counted {
                    tally.release.record(release_end - release_start);
                }
                match outcome {
                    ReleaseOutcome::Released(_) => {}
                    ReleaseOutcome::Lost { .. } => {
                        full_cycle = false;
                        tally.errors.lost += u64::from(counted);
                        tally.last_error = Some(format!("release of {key} lost the lease"));
                    }
                }
            }
            Err(error) => {
                full_cycle = false;
                tally.error(&error, counted);
            }
        }
        if full_cycle && window.counts(claim_start, release_end) {
            tally.cycles += 1;
            tally.cycle.record(release_end - claim_start);
        }
    }
    tally
}
