//! The monotonic clock lease countdowns read. Injected so that tests (and the chaos harness's
//! rate skew) can replace it; nothing in the lease core reads a clock at all.

use std::time::Instant;

/// A monotonic clock.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Instant;
}

/// The process's monotonic clock (CLOCK_MONOTONIC on Linux): unaffected by wall-clock steps.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}
