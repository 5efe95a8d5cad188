//! The client library's lease guard against real 3-node clusters: it keeps its lease across
//! a leader crash, and when the cluster is unreachable it reports the loss no later than its
//! safe deadline, before anyone else can be granted the key.

mod common;

use std::time::{Duration, Instant};

use baton_client::{
    ClaimOutcome, Client, ClientConfig, GuardedClaim, LeaseGuard, LossReason, ReadMode,
};
use common::{serial, Cluster, Proxy};

fn guard(claim: GuardedClaim) -> LeaseGuard {
    match claim {
        GuardedClaim::Granted(g) => g,
        GuardedClaim::Held { lease, .. } => panic!("expected a grant, held by {lease:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_keeps_its_lease_across_a_kill_9_of_the_leader() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    // A lease must outlive a failover: detection (up to the 1 s election timeout), the
    // election and the first renewal through the new leader. Six times the election timeout
    // leaves room for a slow, contended machine.
    let ttl = Duration::from_secs(6);
    let g = guard(
        client
            .claim_guarded("tasks/guarded", "worker", ttl)
            .await
            .unwrap(),
    );
    let token = g.token();
    // Let it renew a few times, then crash the leader.
    tokio::time::sleep(ttl / 2).await;
    let leader = cluster.leader(Duration::from_secs(5)).await;
    cluster.kill(leader);
    // Hold on through the election and two more full TTLs.
    let until = Instant::now() + ttl * 2;
    while Instant::now() < until {
        if !g.is_held() {
            let why = tokio::time::timeout(Duration::from_millis(100), g.lost()).await;
            panic!(
                "the guard lost its lease across a leader change: {why:?}\n{}",
                cluster.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(g.token(), token, "renewals keep the token");
    let probe = client
        .probe("tasks/guarded", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(probe.lease.unwrap().token, token);
    let lost_or_not = tokio::time::timeout(Duration::from_millis(10), g.lost()).await;
    assert!(
        lost_or_not.is_err(),
        "lost() has not completed: {lost_or_not:?}"
    );
    // And it releases cleanly.
    g.release().await.unwrap();
    let probe = client
        .probe("tasks/guarded", ReadMode::Linearizable)
        .await
        .unwrap();
    assert!(probe.lease.is_none());
}

/// Cuts (or restores) every proxy's traffic.
fn cut(proxies: &[Proxy], on: bool) {
    for p in proxies {
        p.set_cut(on);
    }
}

/// A proxy in front of each node, and a client that reaches the cluster only through them
/// (it stays behind them rather than dialling the leader's advertised address), so that a
/// test can cut it off.
async fn behind_proxies(cluster: &Cluster) -> (Vec<Proxy>, Client) {
    let mut proxies = Vec::new();
    for addr in cluster.endpoints() {
        proxies.push(Proxy::start(addr).await);
    }
    let client = Client::connect(ClientConfig {
        endpoints: proxies.iter().map(|p| p.addr.clone()).collect(),
        retry_deadline: Duration::from_secs(2),
        request_timeout: Duration::from_millis(500),
        follow_leader_hints: false,
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    (proxies, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_cut_off_from_its_cluster_reports_loss_by_its_safe_deadline_and_nobody_else_is_granted_before_it(
) {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    // The guard reaches the cluster only through proxies the test can cut.
    let (proxies, client) = behind_proxies(&cluster).await;
    let ttl = Duration::from_millis(2_500);
    let g = guard(
        client
            .claim_guarded("tasks/stranded", "stranded", ttl)
            .await
            .unwrap(),
    );

    // The whole cluster freezes (SIGSTOP) and, while frozen, the guard's network is cut.
    for id in cluster.running() {
        cluster.signal(id, "STOP");
    }
    cut(&proxies, true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The cluster comes back, but not for the guard. Another client claims as fast as it
    // can; every instant below is read from this process's one monotonic clock.
    for id in cluster.running() {
        cluster.signal(id, "CONT");
    }
    let other = Client::connect(ClientConfig {
        endpoints: cluster.endpoints(),
        retry_deadline: Duration::from_secs(2),
        request_timeout: Duration::from_millis(500),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let contender = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(ClaimOutcome::Granted(_)) = other
                .claim("tasks/stranded", "successor", Duration::from_millis(2_500))
                .await
            {
                // The grant was applied no later than the moment its answer arrived.
                return Some(Instant::now());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });

    let reason = tokio::time::timeout(ttl * 2, g.lost())
        .await
        .expect("lost() completes while the guard is cut off");
    let lost_at = Instant::now();
    let safe_until = g.safe_until();
    assert!(
        matches!(reason, LossReason::DeadlinePassed { .. }),
        "{reason:?}"
    );
    assert!(
        lost_at <= safe_until + Duration::from_millis(100),
        "lost() fired {:?} after the safe deadline",
        lost_at - safe_until
    );
    assert!(!g.is_held(), "never held after the safe deadline");

    let granted_at = contender.await.unwrap().unwrap_or_else(|| {
        panic!(
            "the key was never granted to anyone else\n{}",
            cluster.logs()
        )
    });
    assert!(
        granted_at >= safe_until,
        "another client held the key {:?} before the guard's safe deadline",
        safe_until - granted_at
    );
    eprintln!(
        "guard lost at its safe deadline; the successor was granted {:?} later",
        granted_at - safe_until
    );
}

/// The loss a guard reports within `within`, which must be the cluster's pushed ending.
async fn pushed_loss(g: &LeaseGuard, within: Duration) -> baton_client::Ending {
    let reason = tokio::time::timeout(within, g.lost())
        .await
        .unwrap_or_else(|_| panic!("the guard heard nothing within {within:?}"));
    match reason {
        LossReason::Ended(ending) => *ending,
        other => panic!("the loss came from the renewals, not the push: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_hears_at_once_that_it_was_revoked_or_handed_off_with_the_facts_and_after_a_leader_kill(
) {
    use baton_client::EndedHow;
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let holder = cluster.client().await;
    let operator = cluster.client().await;
    // A 60 s lease renews every 18-22 s: a loss heard within 5 s was pushed, and the test
    // checks that it says so (LossReason::Ended), not only how fast it came.
    let ttl = Duration::from_secs(60);
    let within = Duration::from_secs(5);

    // Revoked: the operator's session and reason reach the holder.
    let g = guard(holder.claim_guarded("push/a", "worker", ttl).await.unwrap());
    let other = guard(holder.claim_guarded("push/b", "worker", ttl).await.unwrap());
    operator.revoke("push/a", "reassigning").await.unwrap();
    let ending = pushed_loss(&g, within).await;
    assert_eq!(ending.what, EndedHow::Revoked);
    assert_eq!((ending.key.as_str(), ending.token), ("push/a", g.token()));
    assert_eq!(ending.reason, "reassigning");
    assert_eq!(
        ending.by.as_ref().map(|a| a.client_id.as_str()),
        Some(operator.client_id()),
        "who revoked is the operator's session"
    );
    assert!(!g.is_held());
    assert!(
        other.is_held() && other.loss().is_none(),
        "the session's other lease is untouched"
    );

    // Handed off: the giver hears who took it.
    let taker = cluster.client().await;
    holder
        .offer(
            "push/b",
            other.token(),
            "taker",
            baton_client::HandoffNote::default(),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let (accepted, taken) = taker.accept_guarded("push/b", "taker", ttl).await.unwrap();
    let ending = pushed_loss(&other, within).await;
    assert_eq!(ending.what, EndedHow::HandedOff);
    assert_eq!(ending.new_holder.as_deref(), Some("taker"));
    assert_eq!(ending.new_token, Some(accepted.lease.token));
    assert_eq!(
        ending.by.as_ref().map(|a| a.client_id.as_str()),
        Some(taker.client_id())
    );
    drop(taken);

    // Through a leader kill: the stream finds the new leader and the revoke still arrives.
    let g = guard(holder.claim_guarded("push/c", "worker", ttl).await.unwrap());
    let leader = cluster.leader(Duration::from_secs(5)).await;
    cluster.kill(leader);
    cluster.leader(Duration::from_secs(20)).await;
    operator
        .revoke("push/c", "after the election")
        .await
        .unwrap();
    let ending = pushed_loss(&g, Duration::from_secs(10)).await;
    assert_eq!(ending.what, EndedHow::Revoked);
    assert_eq!(ending.reason, "after the election");
}

/// Claims `key` as `other` until granted (within 30 s); the instant of the grant's answer
/// and whether any refusal on the way said the key was held back by a revoke.
async fn claim_until_granted(other: &Client, key: &str) -> (Instant, bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut held_back = false;
    loop {
        match other.claim(key, "successor", Duration::from_secs(3)).await {
            Ok(ClaimOutcome::Granted(_)) => return (Instant::now(), held_back),
            Err(baton_client::Error::Refused(r)) => {
                held_back |= r.reason == baton_client::RefusalReason::Quarantined
                    && r.quarantine_revoked
                    && r.message.contains("was revoked");
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "{key} was never granted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_holder_cut_off_from_the_cluster_keeps_the_key_from_others_until_its_safe_deadline_unless_now(
) {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let (proxies, holder) = behind_proxies(&cluster).await;
    let operator = cluster.client().await;
    let other = cluster.client().await;
    let ttl = Duration::from_secs(3);

    // A default revoke: the holder, cut off, cannot hear it; no one else gets the key
    // before the holder's safe deadline has passed.
    let g = guard(holder.claim_guarded("tasks/cut", "h", ttl).await.unwrap());
    cut(&proxies, true);
    let revoked = operator
        .revoke_with("tasks/cut", "host-a is unreachable", false)
        .await
        .unwrap();
    assert_eq!(revoked.revoked.map(|l| l.token), Some(g.token()));
    assert_eq!(revoked.claimable_in, ttl, "held back for the lease's TTL");
    let (granted_at, held_back) = claim_until_granted(&other, "tasks/cut").await;
    let reason = tokio::time::timeout(ttl * 2, g.lost()).await.unwrap();
    assert!(
        matches!(reason, LossReason::DeadlinePassed { .. }),
        "a cut-off holder hears nothing: {reason:?}"
    );
    assert!(
        held_back,
        "a claim during the hold was refused as held back by the revoke"
    );
    assert!(
        granted_at >= g.safe_until(),
        "another client was granted the key {:?} before the revoked holder's safe deadline",
        g.safe_until() - granted_at
    );

    // `--now`: the key is free at once, while the cut-off holder still believes.
    cut(&proxies, false);
    let g = guard(
        holder
            .claim_guarded("tasks/cut-now", "h", ttl)
            .await
            .unwrap(),
    );
    cut(&proxies, true);
    let revoked = operator
        .revoke_with("tasks/cut-now", "fenced resource", true)
        .await
        .unwrap();
    assert_eq!(revoked.claimable_in, Duration::ZERO);
    let (granted_at, held_back) = claim_until_granted(&other, "tasks/cut-now").await;
    assert!(!held_back);
    assert!(
        granted_at < g.safe_until(),
        "revoke --now frees the key at once, inside the holder's window: the promise that \
         remains is the fencing token"
    );
}
