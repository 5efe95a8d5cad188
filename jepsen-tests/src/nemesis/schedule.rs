//! The fault schedule: which fault when, for how long, and the calm between them.

use super::*;

/// Calm after a fault that took every node down (power-all, kill-all), in ms.
pub const WHOLE_CLUSTER_CALM_MS: std::ops::Range<u64> = 5000..8000;
/// How long a fault holds at the [`Pace::Brisk`] pace, in ms.
pub const BRISK_HOLD_MS: std::ops::Range<u64> = 1000..2000;
/// Calm after a fault at the [`Pace::Brisk`] pace (enough for a restarted cluster to elect
/// and take writes again), in ms.
pub const BRISK_CALM_MS: std::ops::Range<u64> = 2500..3500;

/// How fast faults follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Faults held 3–6 s with calm in between long enough for leases to expire and be
    /// claimed again between faults: where fencing is judged.
    Steady,
    /// Short faults, short calm: many faults per run. For a canary that must be seen, where
    /// each fault is one more chance for the checks to see the bug (a power cut can land
    /// where few acknowledged writes are unsynced on a majority).
    Brisk,
}

/// Runs faults drawn from `faults` until `until` (seeded). At the steady pace each is held
/// 3–6 s (pauses: 1–3 × TTL; the leader isolated: 5–8 s), with 2–4 s of calm in between
/// (5–8 s after a fault that took every node down); at the brisk pace, [`BRISK_HOLD_MS`] and
/// [`BRISK_CALM_MS`]. Returns how many faults it injected.
pub async fn run_schedule(
    bed: &Bed,
    faults: &[Fault],
    pace: Pace,
    seed: u64,
    until: std::time::Instant,
) -> anyhow::Result<usize> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x006e_656d_6573_6973);
    let mut injected = 0;
    if faults.is_empty() {
        tokio::time::sleep_until(until.into()).await;
        return Ok(0);
    }
    tokio::time::sleep(Duration::from_millis(rng.gen_range(1500..3000))).await;
    while std::time::Instant::now() < until {
        let fault = faults[rng.gen_range(0..faults.len())];
        let hold = match fault {
            Fault::Corrupt => Duration::from_millis(rng.gen_range(CORRUPT_HOLD_MS)),
            _ if pace == Pace::Brisk => Duration::from_millis(rng.gen_range(BRISK_HOLD_MS)),
            Fault::PauseOne | Fault::PauseLeader => bed.ttl.mul_f64(rng.gen_range(1.0..3.0)),
            // Long enough for the majority to elect a new leader (after the old one's lease
            // and an election) and take writes while the old one still believes it leads.
            Fault::IsolateLeader | Fault::OneWayLeader => {
                Duration::from_millis(rng.gen_range(5000..8000))
            }
            _ => Duration::from_millis(rng.gen_range(3000..6000)),
        };
        // One damaged log at a time: a second one while the first waits for its refill
        // would leave no majority of voters (beyond the fault's model). The judge fails a
        // refill that did not come in time; no more damage is done then.
        if fault == Fault::Corrupt
            && !bed
                .await_refills(CORRUPT_REFILL_LIMIT)
                .await
                .still
                .is_empty()
        {
            tokio::time::sleep_until(until.into()).await;
            break;
        }
        let (how, detail, skew) = start(bed, fault, &mut rng).await?;
        bed.rec.nemesis(fault.name(), "start", &detail, skew);
        injected += 1;
        let end = (std::time::Instant::now() + hold).min(until);
        tokio::time::sleep_until(end.into()).await;
        undo(bed, how).await?;
        bed.rec.nemesis(fault.name(), "stop", &detail, skew);
        // A whole cluster restarted spends the first seconds of its calm starting and
        // electing: it gets longer calm, so that work whose fencing must be judged (a write
        // paused past its lease while another worker claims) happens between such faults too.
        let calm = match fault {
            _ if pace == Pace::Brisk => Duration::from_millis(rng.gen_range(BRISK_CALM_MS)),
            Fault::PowerAll | Fault::KillAll => {
                Duration::from_millis(rng.gen_range(WHOLE_CLUSTER_CALM_MS))
            }
            _ => Duration::from_millis(rng.gen_range(2000..4000)),
        };
        let end = (std::time::Instant::now() + calm).min(until);
        tokio::time::sleep_until(end.into()).await;
    }
    Ok(injected)
}
