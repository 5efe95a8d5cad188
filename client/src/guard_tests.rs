use super::*;
use crate::config::ClientConfig;
use crate::fake_node::{FakeNode, RenewAnswer, FAKE_TOKEN};
use std::sync::Arc;
use tonic::Code;

/// Generous slack for a timer on a loaded test machine.
const TIMER_SLACK: Duration = Duration::from_millis(400);

async fn node_and_client() -> (Arc<FakeNode>, Client, JoinHandle<()>) {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = Client::connect(ClientConfig::with_endpoints([addr.to_string()]))
        .await
        .unwrap();
    (node, client, task)
}

async fn guard(client: &Client, ttl: Duration) -> LeaseGuard {
    match client.claim_guarded("tasks/a", "claude@host-a", ttl).await {
        Ok(GuardedClaim::Granted(guard)) => guard,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn renew_interval_is_a_third_of_the_ttl_within_ten_percent() {
    let ttl = Duration::from_secs(30);
    assert_eq!(renew_interval(ttl, 0.5), Duration::from_secs(10));
    assert_eq!(renew_interval(ttl, 0.0), Duration::from_secs(9));
    let high = renew_interval(ttl, 0.999_999);
    assert!(high > Duration::from_millis(10_999) && high <= Duration::from_secs(11));
}

#[test]
fn failed_renewals_are_retried_every_tenth_of_the_ttl_but_not_faster_than_50ms() {
    assert_eq!(
        renew_retry_interval(Duration::from_secs(30)),
        Duration::from_secs(3)
    );
    assert_eq!(
        renew_retry_interval(Duration::from_millis(200)),
        RENEW_RETRY_INTERVAL_MIN
    );
}

#[test]
fn guard_futures_are_send_and_the_guard_is_send_and_sync() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LeaseGuard>();
    assert_send_sync::<GuardedClaim>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = Client::connect(ClientConfig::with_endpoints(["a:1"]))
            .await
            .unwrap();
        let ttl = Duration::from_secs(1);
        assert_send(&client.claim_guarded("k", "h", ttl));
        assert_send(&client.claim_wait("k", "h", ttl, ttl));
        assert_send(&client.claim_wait_guarded("k", "h", ttl, ttl));
    });
}

#[tokio::test]
async fn guard_renews_in_the_background_and_moves_the_safe_deadline_forward() {
    let (node, client, task) = node_and_client().await;
    let ttl = Duration::from_millis(600);
    let guard = guard(&client, ttl).await;
    assert_eq!((guard.key(), guard.token()), ("tasks/a", FAKE_TOKEN));
    let first_deadline = guard.safe_until();
    assert!(first_deadline <= Instant::now() + ttl.mul_f64(0.95));

    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(guard.is_held());
    assert!(node.count("renew") >= 2, "{:?}", node.calls());
    assert!(guard.safe_until() > first_deadline + Duration::from_millis(300));
    assert_eq!(guard.lease().renewed_at_unix_ms, 2, "the renewed view");

    let released = guard.release().await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(lease) if lease.token == FAKE_TOKEN));
    let renewals = node.count("renew");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.count("renew"), renewals, "no renewal after release");
    assert_eq!(node.count("release"), 1);
    task.abort();
}

#[tokio::test]
async fn refused_renewal_reports_taken_with_the_new_holder_and_drop_does_not_release() {
    let (node, client, task) = node_and_client().await;
    node.answer_renewals(RenewAnswer::LostToOther);
    let guard = guard(&client, Duration::from_millis(300)).await;
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("a refused renewal is reported at once");
    match &reason {
        LossReason::Taken {
            current: Some(lease),
        } => assert_eq!(lease.holder_name, "other@host-b"),
        other => panic!("expected Taken by the other holder, got {other:?}"),
    }
    assert!(!guard.is_held());
    assert!(reason.to_string().contains("other@host-b"), "{reason}");
    let renewals = node.count("renew");
    drop(guard);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(node.count("renew"), renewals, "a lost guard stops renewing");
    assert_eq!(
        node.count("release"),
        0,
        "a taken key is not ours to release"
    );
    task.abort();
}

#[tokio::test]
async fn unreachable_cluster_reports_deadline_passed_at_the_safe_deadline() {
    let (node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(600)).await;
    node.fail_always(Code::Unavailable, "no leader");
    let deadline = guard.safe_until();
    let reason = guard.lost().await;
    let noticed = Instant::now();
    assert!(noticed >= deadline, "lost before the safe deadline");
    assert!(
        noticed < deadline + TIMER_SLACK,
        "lost late: {:?}",
        noticed - deadline
    );
    assert!(
        matches!(reason, LossReason::DeadlinePassed { .. }),
        "{reason:?}"
    );
    assert!(!guard.is_held());
    assert_eq!(
        guard.safe_until(),
        deadline,
        "no renewal moved the deadline"
    );

    // The cluster comes back: the guard stays lost and renews no more.
    node.stop_failing();
    let renewals = node.count("renew");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!guard.is_held());
    assert_eq!(node.count("renew"), renewals);
    task.abort();
}

#[tokio::test]
async fn a_slow_renewal_does_not_stretch_the_window() {
    let (node, client, task) = node_and_client().await;
    node.delay_renewals(Duration::from_secs(5));
    let guard = guard(&client, Duration::from_millis(600)).await;
    let deadline = guard.safe_until();
    let reason = guard.lost().await;
    assert!(Instant::now() < deadline + TIMER_SLACK);
    assert!(
        matches!(reason, LossReason::DeadlinePassed { .. }),
        "{reason:?}"
    );
    assert!(!guard.is_held());
    task.abort();
}

#[tokio::test]
async fn transient_renewal_failures_do_not_lose_the_lease() {
    let (node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(900)).await;
    for _ in 0..3 {
        node.fail_next(Code::Unavailable, "leader changed");
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(guard.is_held(), "{guard:?}");
    assert!(node.count("renew") >= 4, "{:?}", node.calls());
    drop(guard);
    task.abort();
}

#[tokio::test]
async fn a_node_that_stops_answering_costs_one_renewal_not_the_lease() {
    let first = Arc::new(FakeNode::default());
    let second = Arc::new(FakeNode::default());
    let (first_addr, first_task) = first.serve().await;
    let (second_addr, second_task) = second.serve().await;
    let ttl = Duration::from_secs(2);
    second.assume_ttl(ttl);
    let client = Client::connect(ClientConfig::with_endpoints([
        first_addr.to_string(),
        second_addr.to_string(),
    ]))
    .await
    .unwrap();
    let guard = guard(&client, ttl).await;
    // The node that granted the lease hangs on every renewal from now on.
    first.delay_renewals(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(guard.is_held(), "{guard:?}");
    assert!(second.count("renew") >= 1, "{:?}", second.calls());
    drop(guard);
    first_task.abort();
    second_task.abort();
}

#[tokio::test]
async fn lost_can_be_awaited_many_times_from_several_places_and_cancelled() {
    let (node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(300)).await;
    // A cancelled wait leaves nothing behind.
    assert!(
        tokio::time::timeout(Duration::from_millis(10), guard.lost())
            .await
            .is_err()
    );
    node.answer_renewals(RenewAnswer::LostToOther);
    let (a, b) = tokio::join!(guard.lost(), guard.lost());
    assert_eq!(a, b);
    assert_eq!(guard.lost().await, a);
    task.abort();
}

#[tokio::test]
async fn is_held_turns_false_at_the_safe_deadline_even_if_the_task_never_ran() {
    let (_node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(300)).await;
    // Block this (single) runtime thread past the deadline: the renewal task cannot
    // run, so only the clock check can tell.
    let deadline = guard.safe_until();
    std::thread::sleep(
        deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(5),
    );
    assert!(!guard.is_held());
    task.abort();
}

#[tokio::test]
async fn dropping_a_held_guard_releases_the_key_and_stops_renewing() {
    let (node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(600)).await;
    drop(guard);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.count("release"), 1, "{:?}", node.calls());
    assert_eq!(node.count("renew"), 0, "{:?}", node.calls());
    task.abort();
}

#[tokio::test]
async fn an_abandoned_guard_neither_renews_nor_releases() {
    let (node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(600)).await;
    let lease = guard.abandon().await;
    assert_eq!(lease.token, FAKE_TOKEN);
    // Past several renew intervals (200 ms each) and the TTL.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(node.count("renew"), 0, "{:?}", node.calls());
    assert_eq!(node.count("release"), 0, "{:?}", node.calls());
    task.abort();
}

#[tokio::test]
async fn release_with_status_stops_renewing_and_releases_once() {
    let (node, client, task) = node_and_client().await;
    let guard = guard(&client, Duration::from_millis(600)).await;
    let released = guard.release_with_status("done").await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(lease) if lease.token == FAKE_TOKEN));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.count("release"), 1, "{:?}", node.calls());
    assert_eq!(node.count("renew"), 0, "{:?}", node.calls());
    task.abort();
}

#[tokio::test]
async fn claim_guarded_of_a_held_key_names_the_holder() {
    let (node, client, task) = node_and_client().await;
    node.hold_claims(1, Duration::from_secs(10));
    let claim = client
        .claim_guarded("tasks/a", "claude@host-a", Duration::from_secs(10))
        .await
        .unwrap();
    match claim {
        GuardedClaim::Held {
            lease,
            same_name_other_process,
            ..
        } => {
            assert_eq!(lease.holder_name, "other@host-b");
            assert!(!same_name_other_process);
        }
        other => panic!("expected Held, got {other:?}"),
    }
    task.abort();
}

#[tokio::test]
async fn claim_wait_claims_again_until_the_key_is_granted() {
    let (node, client, task) = node_and_client().await;
    // The holder's lease ends in 50 ms each time: the waiter wakes just after it
    // rather than backing off further.
    node.hold_claims(3, Duration::from_millis(50));
    let started = Instant::now();
    let outcome = client
        .claim_wait_guarded(
            "tasks/a",
            "claude@host-a",
            Duration::from_secs(10),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(matches!(outcome, GuardedClaim::Granted(_)), "{outcome:?}");
    assert_eq!(node.count("claim"), 4);
    assert!(started.elapsed() < Duration::from_secs(2));
    task.abort();
}

#[tokio::test]
async fn claim_wait_returns_the_holder_after_the_timeout_without_hammering() {
    let (node, client, task) = node_and_client().await;
    node.hold_claims(usize::MAX, Duration::from_secs(30));
    let started = Instant::now();
    let timeout = Duration::from_millis(800);
    let outcome = client
        .claim_wait("tasks/a", "claude@host-a", Duration::from_secs(10), timeout)
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        matches!(&outcome, ClaimOutcome::Held { lease, .. } if lease.holder_name == "other@host-b"),
        "{outcome:?}"
    );
    assert!(
        waited >= timeout && waited < timeout + TIMER_SLACK * 2,
        "{waited:?}"
    );
    // Backoff from 100 ms doubling: a handful of claims in 800 ms, not hundreds.
    let claims = node.count("claim");
    assert!((2..=8).contains(&claims), "{claims} claims");
    task.abort();
}
