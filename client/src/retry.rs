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

/// First wait between two claims of a held key by [`crate::Client::claim_wait`].
pub(crate) const WAIT_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest wait between two claims of a held key: bounds how late a waiter notices a free
/// key, while keeping a crowd of waiters to about one claim per waiter every second or two.
pub(crate) const WAIT_BACKOFF_MAX: Duration = Duration::from_secs(2);
const _: () = assert!(WAIT_BACKOFF_INITIAL.as_nanos() < WAIT_BACKOFF_MAX.as_nanos());

/// Most a waiter sleeps past the holder's reported end of lease, drawn at random so that
/// waiters on one key do not all claim at the same instant when it frees.
pub(crate) const WAIT_AFTER_EXPIRY_JITTER_MAX: Duration = WAIT_BACKOFF_INITIAL;
const _: () = assert!(WAIT_AFTER_EXPIRY_JITTER_MAX.as_nanos() <= WAIT_BACKOFF_MAX.as_nanos());

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

/// Whether a failed attempt certainly proposed nothing: the connection to the node was
/// refused (the request was never sent), or the node said so
/// (`baton_proto::UNPROPOSED_METADATA_KEY`). Any other failure (a timeout, a reset, an
/// outage answered after the leader may have proposed it) may have reached the log.
pub(crate) fn never_proposed(status: &Status) -> bool {
    status
        .metadata()
        .contains_key(baton_proto::UNPROPOSED_METADATA_KEY)
        || baton_proto::never_sent(status)
}

/// Exponential backoff with jitter: 50 ms doubling to 1 s (for requests; other bounds for
/// other loops), each wait drawn from the upper half of the current step so that clients
/// that failed together do not retry together.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    /// The backoff between attempts of one request.
    pub(crate) fn new() -> Self {
        Backoff::between(BACKOFF_INITIAL, BACKOFF_MAX)
    }

    /// A backoff whose step starts at `initial` and doubles up to `max`.
    pub(crate) fn between(initial: Duration, max: Duration) -> Self {
        debug_assert!(initial <= max);
        Backoff { step: initial, max }
    }

    /// The next wait; `unit` is a uniform random number in `[0, 1)`.
    pub(crate) fn next_delay(&mut self, unit: f64) -> Duration {
        let unit = unit.clamp(0.0, 1.0);
        let half = self.step / 2;
        let delay = half + half.mul_f64(unit);
        self.step = (self.step * 2).min(self.max);
        delay
    }
}

/// How long [`crate::Client::claim_wait`] sleeps before claiming a held key again.
///
/// `backoff` is the next jittered backoff step. A holder whose lease ends sooner than that
/// (`holder_remaining`, the serving node's estimate) shortens the wait to just after the
/// end, plus up to [`WAIT_AFTER_EXPIRY_JITTER_MAX`] drawn from `unit` so that waiters spread
/// out. The wait never runs past the caller's own timeout (`time_left`).
/// The pauses of one claimant waiting for a key (or a set) until a deadline: a jittered
/// backoff, shortened by the holder's reported end of lease ([`claim_wait_delay`]).
pub(crate) struct WaitPacer {
    give_up_at: std::time::Instant,
    backoff: Backoff,
}

impl WaitPacer {
    pub(crate) fn until(give_up_at: std::time::Instant) -> WaitPacer {
        WaitPacer {
            give_up_at,
            backoff: Backoff::between(WAIT_BACKOFF_INITIAL, WAIT_BACKOFF_MAX),
        }
    }

    /// How long to wait before the next claim, given when the holder's lease ends by the
    /// serving node's estimate; `None` once the deadline has passed.
    pub(crate) fn next(&mut self, holder_remaining: Duration) -> Option<Duration> {
        use rand::Rng;
        let time_left = self
            .give_up_at
            .saturating_duration_since(std::time::Instant::now());
        if time_left.is_zero() {
            return None;
        }
        let mut rng = rand::thread_rng();
        let step = self.backoff.next_delay(rng.gen());
        Some(claim_wait_delay(
            step,
            holder_remaining,
            time_left,
            rng.gen(),
        ))
    }
}

pub(crate) fn claim_wait_delay(
    backoff: Duration,
    holder_remaining: Duration,
    time_left: Duration,
    unit: f64,
) -> Duration {
    let after_expiry =
        holder_remaining + WAIT_AFTER_EXPIRY_JITTER_MAX.mul_f64(unit.clamp(0.0, 1.0));
    backoff.min(after_expiry).min(time_left)
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

    /// A refused connection sent nothing, and a node that says it proposed nothing is
    /// believed: the next attempt is still a first one. Anything else may have been
    /// delivered, so the next attempt is a retry.
    #[tokio::test]
    async fn only_a_refused_connection_or_a_node_that_says_so_proposed_nothing() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
            .unwrap()
            .connect_lazy();
        let refused = baton_proto::v1::baton_client::BatonClient::new(channel)
            .probe(baton_proto::v1::ProbeRequest::default())
            .await
            .unwrap_err();
        assert!(never_proposed(&refused), "{refused:?}");
        let mut said = Status::unavailable("this node is not the leader");
        assert!(!never_proposed(&said));
        said.metadata_mut().insert(
            baton_proto::UNPROPOSED_METADATA_KEY,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        assert!(never_proposed(&said));
        for maybe in [
            Status::unavailable("the write did not commit"),
            Status::deadline_exceeded("slow"),
        ] {
            assert!(!never_proposed(&maybe), "{maybe:?}");
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

    #[test]
    fn claim_wait_backoff_grows_from_about_100ms_to_at_most_2s() {
        let mut backoff = Backoff::between(WAIT_BACKOFF_INITIAL, WAIT_BACKOFF_MAX);
        let first = backoff.next_delay(0.0);
        assert_eq!(first, Duration::from_millis(50));
        let delays: Vec<Duration> = (0..20).map(|_| backoff.next_delay(0.999_999)).collect();
        assert!(delays.iter().all(|d| *d < WAIT_BACKOFF_MAX));
        assert!(*delays.last().unwrap() > WAIT_BACKOFF_MAX / 2);
    }

    #[test]
    fn claim_wait_wakes_just_after_the_holders_lease_ends_and_never_past_the_timeout() {
        let second = Duration::from_secs(1);
        // A long lease: the backoff decides.
        assert_eq!(
            claim_wait_delay(
                second,
                Duration::from_secs(60),
                Duration::from_secs(30),
                0.5
            ),
            second
        );
        // A lease ending in 200 ms: wake between 200 ms and 200 ms + the jitter.
        let short = Duration::from_millis(200);
        let low = claim_wait_delay(second, short, Duration::from_secs(30), 0.0);
        let high = claim_wait_delay(second, short, Duration::from_secs(30), 0.999_999);
        assert_eq!(low, short);
        assert!(high > low && high <= short + WAIT_AFTER_EXPIRY_JITTER_MAX);
        // The caller's timeout comes first.
        let left = Duration::from_millis(30);
        assert_eq!(claim_wait_delay(second, short, left, 0.5), left);
    }
}
