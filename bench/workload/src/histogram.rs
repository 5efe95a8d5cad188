//! Latencies in bounded memory: a log-linear histogram (exact below 128 µs, within 1/64
//! above) that merges exactly, and the summary (count, p50, p99, max) a report prints.

use std::time::Duration;

use serde::Serialize;

/// How many latencies were recorded and their percentiles, in microseconds (all `0` when
/// none were).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// Sub-buckets per power of two above [`HISTOGRAM_EXACT_BELOW`]: the relative precision is
/// `1 / HISTOGRAM_SUB_BUCKETS`.
pub const HISTOGRAM_SUB_BUCKETS: u64 = 64;
const SUB_BUCKET_BITS: u32 = HISTOGRAM_SUB_BUCKETS.trailing_zeros();
const _: () = assert!(HISTOGRAM_SUB_BUCKETS.is_power_of_two());
/// Values below this are counted exactly (one bucket per microsecond).
pub const HISTOGRAM_EXACT_BELOW: u64 = 2 * HISTOGRAM_SUB_BUCKETS;
/// Most buckets one histogram can have (for `u64::MAX` microseconds; a histogram grows only
/// as far as its largest value needs: 1 s needs 955).
pub const HISTOGRAM_BUCKETS_MAX: usize =
    ((65 - SUB_BUCKET_BITS) as usize) * HISTOGRAM_SUB_BUCKETS as usize;

/// Latencies in microseconds, in log-linear buckets: exact below [`HISTOGRAM_EXACT_BELOW`],
/// then [`HISTOGRAM_SUB_BUCKETS`] buckets per power of two. The maximum is exact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl LatencyHistogram {
    /// Counts one latency, to the microsecond (rounded down).
    pub fn record(&mut self, latency: Duration) {
        self.record_us(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
    }

    /// Counts one latency of `us` microseconds.
    pub fn record_us(&mut self, us: u64) {
        let index = bucket_index(us);
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += 1;
        self.total += 1;
        self.max = self.max.max(us);
    }

    /// Adds every latency of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest latency recorded, exactly; 0 when none was.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The `percent`th percentile (nearest rank: the smallest value at least `percent` % of
    /// the latencies are at or below), as the upper bound of its bucket capped at the
    /// maximum: exact below [`HISTOGRAM_EXACT_BELOW`] µs, at most 1/64 above the true value
    /// beyond. 0 when nothing was recorded. `percent` is clamped to 0..=100.
    pub fn percentile(&self, percent: u32) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let percent = u64::from(percent.min(100));
        // Nearest rank, 1-based: ceil(total × percent / 100), at least the first value.
        let rank = (u128::from(self.total) * u128::from(percent))
            .div_ceil(100)
            .max(1);
        let mut seen: u128 = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += u128::from(*count);
            if seen >= rank {
                return bucket_upper(index).min(self.max);
            }
        }
        self.max
    }

    /// Count, p50, p99 and max.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.total,
            p50: self.percentile(50),
            p99: self.percentile(99),
            max: self.max,
        }
    }
}

/// The bucket of `us`: itself below [`HISTOGRAM_EXACT_BELOW`]; above, [`SUB_BUCKET_BITS`]
/// bits of precision below its highest set bit.
pub(super) fn bucket_index(us: u64) -> usize {
    if us < HISTOGRAM_EXACT_BELOW {
        return us as usize;
    }
    let highest_bit = 63 - us.leading_zeros();
    let shift = highest_bit - SUB_BUCKET_BITS;
    // (us >> shift) is in [SUB_BUCKETS, 2 × SUB_BUCKETS): the buckets of this power of two
    // follow those of the one below without a gap.
    (shift as usize) * HISTOGRAM_SUB_BUCKETS as usize + (us >> shift) as usize
}

/// The largest value that falls in bucket `index`.
pub(super) fn bucket_upper(index: usize) -> u64 {
    let index = index as u64;
    if index < HISTOGRAM_EXACT_BELOW {
        return index;
    }
    let shift = index / HISTOGRAM_SUB_BUCKETS - 1;
    let sub = index - shift * HISTOGRAM_SUB_BUCKETS;
    let lower = sub << shift;
    lower.saturating_add((1u64 << shift) - 1)
}
