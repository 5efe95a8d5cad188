//! Retry policy: which failures are worth another attempt, and how long to wait before it.
//! Pure functions, so the policy is tested without a cluster; the loop that applies it lives
//! in [`crate::client`].

use std::time::Duration;

use tonic::{Code, Status};

/// Wait before the second attempt of a request.
pub(crate) const BACKOFF_INITIAL: Duration = Duration::from_millis(50);
/// Longest wait between two attempts: an election takes a few hundred milliseconds, so
/// waiting longer only adds latency after the cluster has recovered.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(1);
const _: () = assert!(BACKOFF_INITIAL.as_nanos() < BACKOFF_MAX.as_nanos());

/// How long a node that failed at the transport level (refused, reset, silent) is kept from
/// being adopted as the leader on someone else's word, so a leader address this client cannot
/// reach does not cost every request a failed first attempt.
pub(crate) const SUSPECT_FOR: Duration = Duration::from_secs(3);

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// Try again, elsewhere if possible, after a backoff. `transport` is true when the node
    /// was not reached or the connection broke, as opposed to a node answering UNAVAILABLE.
    Retry { transport: bool },
    /// Hand the error to the caller.
    Fail,
}

/// Sorts a failed attempt's status into retry or fail.
///
/// Every request the client retries is safe to repeat: reads have no effect, and mutating
/// requests carry the same `RequestId` on every attempt, so the node returns the first
/// answer instead of applying twice.
pub(crate) fn classify(status: &Status) -> Disposition {
    // Statuses the transport made up locally carry their cause as `source`; decoded ones
    // from a node never do. Those are connection failures: refused, reset, timed out.
    if std::error::Error::source(status).is_some() {
        return Disposition::Retry { transport: true };
    }
    match status.code() {
        // No leader, no quorum, leader unreachable, or (from the transport) no connection.
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted => {
            Disposition::Retry { transport: false }
        }
        // A broken connection surfaces from the channel as UNKNOWN without a source.
        Code::Unknown if status.message().starts_with("Service was not ready") => {
            Disposition::Retry { transport: true }
        }
        _ => Disposition::Fail,
    }
}

/// Exponential backoff with jitter: 50 ms doubling to 1 s, each wait drawn from the upper
/// half of the current step so that clients that failed together do not retry together.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    step: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            step: BACKOFF_INITIAL,
        }
    }

    /// The next wait; `unit` is a uniform random number in `[0, 1)`.
    pub(crate) fn next_delay(&mut self, unit: f64) -> Duration {
        let unit = unit.clamp(0.0, 1.0);
        let half = self.step / 2;
        let delay = half + half.mul_f64(unit);
        self.step = (self.step * 2).min(BACKOFF_MAX);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unavailable_and_timeouts_are_retried() {
        for status in [
            Status::unavailable("no leader"),
            Status::deadline_exceeded("slow"),
            Status::aborted("leader changed"),
        ] {
            assert_eq!(
                classify(&status),
                Disposition::Retry { transport: false },
                "{status:?}"
            );
        }
    }

    #[test]
    fn transport_failures_are_retried_as_transport() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let status = Status::from_error(Box::new(tonic::ConnectError(Box::new(refused))));
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(classify(&status), Disposition::Retry { transport: true });

        let not_ready = Status::unknown("Service was not ready: transport error");
        assert_eq!(classify(&not_ready), Disposition::Retry { transport: true });
    }

    #[test]
    fn invalid_argument_and_other_answers_are_never_retried() {
        for status in [
            Status::invalid_argument("key too long"),
            Status::failed_precondition("stale token"),
            Status::internal("bug"),
            Status::unknown("panic in handler"),
            Status::resource_exhausted("request too large"),
        ] {
            assert_eq!(classify(&status), Disposition::Fail, "{status:?}");
        }
    }

    #[test]
    fn backoff_doubles_from_50ms_to_1s_with_jitter_in_the_upper_half() {
        let mut backoff = Backoff::new();
        let mut step = BACKOFF_INITIAL;
        for _ in 0..10 {
            let low = backoff.clone().next_delay(0.0);
            let high = backoff.clone().next_delay(0.999_999);
            let mid = backoff.next_delay(0.5);
            assert_eq!(low, step / 2);
            assert!(high < step && high >= low, "{high:?} for step {step:?}");
            assert!(low <= mid && mid <= high);
            step = (step * 2).min(BACKOFF_MAX);
        }
        assert_eq!(step, BACKOFF_MAX);
        assert!(backoff.next_delay(0.999_999) < BACKOFF_MAX);
    }
}
