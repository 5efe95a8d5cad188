//! Test-only fault hooks for `jepsen-tests`, compiled in only with the `chaos` cargo feature.
//!
//! A node started with `BATON_CHAOS_FILE=PATH` polls that file (every
//! [`CHAOS_POLL_INTERVAL`]) for lines `key=value`:
//! - `clock_rate=1.04`: the clock lease, offer and quarantine countdowns read runs at this
//!   rate (1.04 = 4% fast: leases expire early in real time, the hazard the drift margin
//!   covers). Changes keep the clock continuous and monotonic.
//! - `raft_delay_ms=40` and `raft_jitter_ms=30`: every outgoing Raft RPC of this node waits
//!   `delay + uniform(0, jitter)` before it is sent (tc netem is not available on the test
//!   machines, so delay is injected at the transport instead).
//! - `skip_fsync=1`: the log flusher acknowledges appends after sled's flush without the
//!   `fdatasync` that makes them durable: the bug the power-cut test must catch (its canary).
//! - `stall_fsync=1`: the log flusher holds its next round (its `fdatasync`s) until the line
//!   is gone: a disk that stops answering, on this node only. Writes still reach the page
//!   cache; they are durable on this node only once the stall ends.
//! - `fail_fsync=1`: the log flusher's `fdatasync`s fail with EIO, as a failing disk's do:
//!   the node must stop with the cause, not serve on (`store::flush`).
//! - `trust_damaged_log=1`: opening the log takes damage before its durable end for a
//!   crash's torn tail and cuts it silently, as baton did before data format 7: the bug the
//!   chaos suite's `corrupt` fault must catch (its canary). Read at the node's start.
//! - `decide_copies_afresh=1`: the leader decides every copy of a claim afresh, as baton did
//!   before the chaos suite's seed 426017: any attempt, a retry too, may be refused from a
//!   read, and no refusal from a read is remembered (`server::read_answers`), so a late or
//!   duplicated copy of a refused claim may be granted. The bug the chaos suite's `copies`
//!   faults must catch (its canary).
//! - `mute_endings=1`: the leader's endings streams (`server::endings_stream`) send their
//!   progress markers but no ending, so a holder hears of its loss only at its next renewal,
//!   as before the push channel: the bug the chaos suite's `notice` checker must catch (the
//!   `notice-canary`).
//! - `lapse_places_early=1`: a place in a key's line lapses after a twentieth of its TTL
//!   (this node's countdown of it; on the leader, its `DropWaiter`): waiters that renew on
//!   time lose their places to later ones, the bug the chaos suite's `lines` checker must
//!   catch (the `line-canary`).
//! - `admit_extra_permit=1`: a claim of one of a key's N permits (N >= 2) is proposed, at
//!   the node that decides it (`server::convert::claim`), as a claim of one of N + 1 (at
//!   most `PERMITS_MAX`), so the cluster admits N + 1 holders at once: the bug the chaos
//!   suite's `permits` checker, which judges by the N the workload asked, must catch (the
//!   `permit-canary`).
//! - `exclusive_as_shared=1`: an exclusive claim of one key is proposed, at the node that
//!   decides it (`server::convert::claim`), as a shared claim, so exclusive claimants share
//!   the key with each other and with shared holders: the bug the chaos suite's `shared`
//!   checker, which judges by the mode the workload asked, must catch (the `shared-canary`).
//! - `apply_retries_afresh=1`: the leader proposes a client's marked retry as the plain
//!   command it was before data format 15 (`server::baton::decide`, `Ctx::as_sent`), so a
//!   retry of a client the table forgot is applied again: the bug the chaos suite's
//!   `retries` checker must catch (the `retry-canary`).
//! - `skip_read_index=1`: a node that believes it leads answers linearizable reads from its
//!   local state, without the read-index round that confirms it still leads: the stale-read
//!   bug the chaos suite's `read-canary` must catch.
//!
//! Without the feature, or without the variable, [`lease_clock`] is the plain monotonic
//! clock and [`raft_delay`] does nothing. Rate skew reaches the countdowns only: openraft's
//! own election and heartbeat timers keep the real rate (they decide liveness, not safety).

use std::sync::Arc;

use crate::clock::{Clock, MonotonicClock};

/// How often the control file is read.
pub const CHAOS_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);

/// The clock lease countdowns use on this node.
pub fn lease_clock() -> Arc<dyn Clock> {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return Arc::new(imp::SkewedClock::new(knobs));
    }
    Arc::new(MonotonicClock)
}

/// Whether the log flusher skips its `fdatasync` (the power-cut canary); never without the
/// feature and the control file.
pub fn skip_fsync() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.skip_fsync();
    }
    false
}

/// Whether the log flusher holds its round (a stalled disk on this node); never without the
/// feature and the control file.
pub fn stall_fsync() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.stall_fsync();
    }
    false
}

/// Whether the log flusher's syncs fail with EIO (a failing disk); never without the feature
/// and the control file.
pub fn fail_fsync() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::FailFsync);
    }
    false
}

/// Whether opening the log cuts damage silently, as before data format 7 (the `corrupt`
/// canary); never without the feature and the control file.
pub fn trust_damaged_log() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::TrustDamagedLog);
    }
    false
}

/// Whether the leader proposes marked retries as plain commands (the `retry` canary); never
/// without the feature and the control file.
pub fn apply_retries_afresh() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::ApplyRetriesAfresh);
    }
    false
}

/// Whether the leader decides every copy of a claim afresh (the `copies` canary); never
/// without the feature and the control file.
pub fn decide_copies_afresh() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::DecideCopiesAfresh);
    }
    false
}

/// Whether the endings streams leave out every ending (the `notice` canary); never without
/// the feature and the control file.
pub fn mute_endings() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::MuteEndings);
    }
    false
}

/// Whether a place in a key's line lapses after a twentieth of its TTL (the `line` canary);
/// never without the feature and the control file.
pub fn lapse_places_early() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::LapsePlacesEarly);
    }
    false
}

/// Whether a claim of one of N permits is proposed as one of N + 1 (the `permit` canary);
/// never without the feature and the control file.
pub fn admit_extra_permit() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::AdmitExtraPermit);
    }
    false
}

/// Whether an exclusive claim is proposed as a shared one (the `shared` canary); never
/// without the feature and the control file.
pub fn exclusive_as_shared() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.flag(imp::Flag::ExclusiveAsShared);
    }
    false
}

/// Whether a node that believes it leads skips the read-index round of linearizable reads
/// (the stale-read canary); never without the feature and the control file.
pub fn skip_read_index() -> bool {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        return knobs.skip_read_index();
    }
    false
}

/// Waits before an outgoing Raft RPC, as the control file says (no wait without it).
pub async fn raft_delay() {
    #[cfg(feature = "chaos")]
    if let Some(knobs) = imp::knobs() {
        let wait = knobs.raft_delay();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(feature = "chaos")]
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Mutex, OnceLock};
    use std::time::{Duration, Instant};

    use super::CHAOS_POLL_INTERVAL;
    use crate::clock::Clock;

    /// The current settings, updated by the polling thread.
    pub struct Knobs {
        rate_bits: AtomicU64,
        delay_ms: AtomicU64,
        jitter_ms: AtomicU64,
        seed: AtomicU64,
        skip_fsync: AtomicU64,
        skip_read_index: AtomicU64,
        stall_fsync: AtomicU64,
        /// The on/off knobs added since, by [`Flag`] bit.
        flags: AtomicU64,
    }

    /// On/off knobs, each a bit of `Knobs::flags`.
    #[derive(Clone, Copy)]
    pub enum Flag {
        FailFsync = 1,
        TrustDamagedLog = 2,
        DecideCopiesAfresh = 4,
        MuteEndings = 8,
        LapsePlacesEarly = 16,
        AdmitExtraPermit = 32,
        ExclusiveAsShared = 64,
        ApplyRetriesAfresh = 128,
    }

    impl Knobs {
        fn new(seed: u64) -> Knobs {
            Knobs {
                rate_bits: AtomicU64::new(f64::to_bits(1.0)),
                delay_ms: AtomicU64::new(0),
                jitter_ms: AtomicU64::new(0),
                seed: AtomicU64::new(seed),
                skip_fsync: AtomicU64::new(0),
                skip_read_index: AtomicU64::new(0),
                stall_fsync: AtomicU64::new(0),
                flags: AtomicU64::new(0),
            }
        }

        pub fn flag(&self, flag: Flag) -> bool {
            self.flags.load(Ordering::Relaxed) & flag as u64 != 0
        }

        pub fn skip_fsync(&self) -> bool {
            self.skip_fsync.load(Ordering::Relaxed) != 0
        }

        pub fn stall_fsync(&self) -> bool {
            self.stall_fsync.load(Ordering::Relaxed) != 0
        }

        pub fn skip_read_index(&self) -> bool {
            self.skip_read_index.load(Ordering::Relaxed) != 0
        }

        pub fn rate(&self) -> f64 {
            f64::from_bits(self.rate_bits.load(Ordering::Relaxed))
        }

        pub fn raft_delay(&self) -> Duration {
            let delay = self.delay_ms.load(Ordering::Relaxed);
            let jitter = self.jitter_ms.load(Ordering::Relaxed);
            let extra = if jitter == 0 {
                0
            } else {
                // xorshift: good enough to spread delays, no dependency needed.
                let mut x = self.seed.load(Ordering::Relaxed) | 1;
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                self.seed.store(x, Ordering::Relaxed);
                x % (jitter + 1)
            };
            Duration::from_millis(delay + extra)
        }

        fn load(&self, text: &str) {
            let mut rate: f64 = 1.0;
            let (mut delay, mut jitter, mut skip_fsync, mut skip_read_index, mut stall_fsync) =
                (0, 0, 0, 0, 0);
            let mut flags = 0u64;
            for line in text.lines() {
                let Some((k, v)) = line.split_once('=') else {
                    continue;
                };
                match k.trim() {
                    "clock_rate" => rate = v.trim().parse().unwrap_or(1.0),
                    "raft_delay_ms" => delay = v.trim().parse().unwrap_or(0),
                    "raft_jitter_ms" => jitter = v.trim().parse().unwrap_or(0),
                    "skip_fsync" => skip_fsync = v.trim().parse().unwrap_or(0),
                    "skip_read_index" => skip_read_index = v.trim().parse().unwrap_or(0),
                    "stall_fsync" => stall_fsync = v.trim().parse().unwrap_or(0),
                    "fail_fsync" if v.trim() == "1" => flags |= Flag::FailFsync as u64,
                    "trust_damaged_log" if v.trim() == "1" => flags |= Flag::TrustDamagedLog as u64,
                    "decide_copies_afresh" if v.trim() == "1" => {
                        flags |= Flag::DecideCopiesAfresh as u64
                    }
                    "mute_endings" if v.trim() == "1" => flags |= Flag::MuteEndings as u64,
                    "lapse_places_early" if v.trim() == "1" => {
                        flags |= Flag::LapsePlacesEarly as u64
                    }
                    "admit_extra_permit" if v.trim() == "1" => {
                        flags |= Flag::AdmitExtraPermit as u64
                    }
                    "exclusive_as_shared" if v.trim() == "1" => {
                        flags |= Flag::ExclusiveAsShared as u64
                    }
                    "apply_retries_afresh" if v.trim() == "1" => {
                        flags |= Flag::ApplyRetriesAfresh as u64
                    }
                    _ => {}
                }
            }
            if !(rate.is_finite() && rate > 0.0) {
                rate = 1.0;
            }
            self.rate_bits.store(f64::to_bits(rate), Ordering::Relaxed);
            self.delay_ms.store(delay, Ordering::Relaxed);
            self.jitter_ms.store(jitter, Ordering::Relaxed);
            self.skip_fsync.store(skip_fsync, Ordering::Relaxed);
            self.skip_read_index
                .store(skip_read_index, Ordering::Relaxed);
            self.stall_fsync.store(stall_fsync, Ordering::Relaxed);
            self.flags.store(flags, Ordering::Relaxed);
        }
    }

    static KNOBS: OnceLock<Option<&'static Knobs>> = OnceLock::new();

    /// The knobs, with the polling thread started on first use; `None` without
    /// `BATON_CHAOS_FILE`.
    pub fn knobs() -> Option<&'static Knobs> {
        *KNOBS.get_or_init(|| {
            let path = std::env::var_os("BATON_CHAOS_FILE")?;
            let knobs: &'static Knobs = Box::leak(Box::new(Knobs::new(
                u64::from(std::process::id()) * 0x9E37_79B9,
            )));
            if let Ok(text) = std::fs::read_to_string(&path) {
                knobs.load(&text);
            }
            tracing::warn!(
                file = %std::path::Path::new(&path).display(),
                "chaos hooks active (test builds only): clock rate and Raft delay follow this file"
            );
            std::thread::Builder::new()
                .name("chaos-poll".into())
                .spawn(move || loop {
                    std::thread::sleep(CHAOS_POLL_INTERVAL);
                    if let Ok(text) = std::fs::read_to_string(&path) {
                        knobs.load(&text);
                    }
                })
                .expect("starting the chaos poll thread");
            Some(knobs)
        })
    }

    /// A monotonic clock running at the knobs' rate, continuous across rate changes.
    pub struct SkewedClock {
        knobs: &'static Knobs,
        /// (real instant, virtual instant, rate) at the last rate change.
        anchor: Mutex<(Instant, Instant, f64)>,
    }

    impl SkewedClock {
        pub fn new(knobs: &'static Knobs) -> SkewedClock {
            let now = Instant::now();
            SkewedClock {
                knobs,
                anchor: Mutex::new((now, now, knobs.rate())),
            }
        }
    }

    impl Clock for SkewedClock {
        fn now(&self) -> Instant {
            let real = Instant::now();
            let rate = self.knobs.rate();
            let mut anchor = self.anchor.lock().expect("skewed clock lock");
            let (real0, virt0, rate0) = *anchor;
            if rate != rate0 {
                let virt = virt0 + real.saturating_duration_since(real0).mul_f64(rate0);
                *anchor = (real, virt, rate);
                return virt;
            }
            virt0 + real.saturating_duration_since(real0).mul_f64(rate)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn knobs_parse_the_control_file_and_ignore_nonsense() {
            let k = Knobs::new(7);
            k.load("clock_rate=1.5\nraft_delay_ms=40\nraft_jitter_ms=0\n");
            assert_eq!(k.rate(), 1.5);
            assert_eq!(k.raft_delay(), Duration::from_millis(40));
            assert!(!k.skip_fsync());
            k.load("skip_fsync=1");
            assert!(k.skip_fsync());
            assert!(!k.skip_read_index());
            k.load("skip_read_index=1");
            assert!(k.skip_read_index() && !k.skip_fsync());
            assert!(!k.flag(Flag::FailFsync));
            k.load("fail_fsync=1\ntrust_damaged_log=1");
            assert!(k.flag(Flag::FailFsync) && k.flag(Flag::TrustDamagedLog));
            assert!(!k.flag(Flag::DecideCopiesAfresh));
            k.load("decide_copies_afresh=1");
            assert!(k.flag(Flag::DecideCopiesAfresh) && !k.flag(Flag::FailFsync));
            assert!(!k.flag(Flag::MuteEndings));
            k.load("mute_endings=1");
            assert!(k.flag(Flag::MuteEndings) && !k.flag(Flag::DecideCopiesAfresh));
            k.load("lapse_places_early=1");
            assert!(k.flag(Flag::LapsePlacesEarly) && !k.flag(Flag::MuteEndings));
            assert!(!k.flag(Flag::AdmitExtraPermit));
            k.load("admit_extra_permit=1");
            assert!(k.flag(Flag::AdmitExtraPermit) && !k.flag(Flag::LapsePlacesEarly));
            k.load("trust_damaged_log=1");
            assert!(!k.flag(Flag::FailFsync) && k.flag(Flag::TrustDamagedLog));
            assert_eq!(k.rate(), 1.0, "a knob not given is back to its default");
            k.load("clock_rate=-3\nnoise\n");
            assert_eq!(k.rate(), 1.0);
            assert_eq!(k.raft_delay(), Duration::ZERO);
            k.load("raft_delay_ms=10\nraft_jitter_ms=5");
            for _ in 0..100 {
                let d = k.raft_delay();
                assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(15));
            }
        }

        #[test]
        fn a_fast_clock_runs_ahead_and_stays_monotonic_across_rate_changes() {
            let k: &'static Knobs = Box::leak(Box::new(Knobs::new(7)));
            k.rate_bits.store(f64::to_bits(2.0), Ordering::Relaxed);
            let clock = SkewedClock::new(k);
            let (r0, v0) = (Instant::now(), clock.now());
            std::thread::sleep(Duration::from_millis(50));
            let (r1, v1) = (Instant::now(), clock.now());
            let real = r1 - r0;
            let virt = v1 - v0;
            assert!(virt >= real.mul_f64(1.8), "virtual {virt:?} real {real:?}");
            k.rate_bits.store(f64::to_bits(0.5), Ordering::Relaxed);
            let v2 = clock.now();
            assert!(v2 >= v1);
            std::thread::sleep(Duration::from_millis(50));
            let v3 = clock.now();
            assert!(
                v3 - v2 < Duration::from_millis(45),
                "slow clock ran {:?}",
                v3 - v2
            );
        }
    }
}
