//! Waiting in line on a real 3-node cluster: waiters are granted a key in the order they
//! joined its line, each in the entry that frees it (the token is that entry's revision), and
//! a waiter whose session stopped renewing its place is skipped. Every waiter is its own
//! client (its own session), spread over the nodes.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_client::{BlockedKey, ClaimOutcome, LineOutcome, ReadMode, ReleaseOutcome};
use common::{serial, Cluster};

const KEY: &str = "gpu/runner-1";
/// The waiters' TTL: short, so that a stopped waiter's place lapses quickly.
const PLACE_TTL: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_arrival_order_and_a_stopped_one_is_skipped() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let holder = cluster.client_of(1).await;
    let held = match holder
        .claim(KEY, "holder", Duration::from_secs(60))
        .await
        .unwrap()
    {
        ClaimOutcome::Granted(g) => g,
        other => panic!("{other:?}"),
    };
    // Five join the line one after another; w3 never renews its place (its process died).
    let names = ["w1", "w2", "w3", "w4", "w5"];
    let mut clients = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let client = cluster.client_of(1 + i as u64 % 3).await;
        match client.wait_once(KEY, name, PLACE_TTL).await.unwrap() {
            LineOutcome::InLine(place) => {
                assert_eq!(place.position, i as u64 + 1, "{name}: {place:?}");
                assert_eq!(place.waiters, i as u64 + 1);
                let BlockedKey::Held { lease, .. } = &place.blocked else {
                    panic!("{place:?}");
                };
                assert_eq!(lease.token, held.lease.token, "it waits behind the holder");
            }
            other => panic!("{name} granted a held key: {other:?}"),
        }
        clients.push(client);
    }
    let probe = holder.probe(KEY, ReadMode::Linearizable).await.unwrap();
    let line = probe.line.expect("a line");
    assert_eq!(line.waiters, 5);
    let listed: Vec<&str> = line.first.iter().map(|w| w.holder_name.as_str()).collect();
    assert_eq!(listed, names);

    // The live ones wait (renewing their places); each releases soon after it is granted.
    let granted = Arc::new(Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for (name, client) in names.iter().zip(clients) {
        if *name == "w3" {
            continue;
        }
        let granted = granted.clone();
        let name = name.to_string();
        waiting.push(tokio::spawn(async move {
            let outcome = client
                .wait_in_line(KEY, &name, PLACE_TTL, Duration::from_secs(60))
                .await
                .unwrap();
            let LineOutcome::Granted(grant) = outcome else {
                panic!("{name} not granted: {outcome:?}");
            };
            granted
                .lock()
                .unwrap()
                .push((name.clone(), grant.lease.token));
            tokio::time::sleep(Duration::from_millis(200)).await;
            let released = client.release(KEY, grant.lease.token).await.unwrap();
            assert!(
                matches!(released, ReleaseOutcome::Released(_)),
                "{name}: {released:?}"
            );
        }));
    }
    // w3's place lapses (the leader drops it after its TTL); the others keep theirs.
    let lapsed = async {
        loop {
            let probe = holder.probe(KEY, ReadMode::Linearizable).await.unwrap();
            let line = probe.line.expect("a line");
            if line.waiters == 4 {
                return line;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let line = tokio::time::timeout(Duration::from_secs(10), lapsed)
        .await
        .expect("w3's place lapsed");
    let listed: Vec<&str> = line.first.iter().map(|w| w.holder_name.as_str()).collect();
    assert_eq!(listed, ["w1", "w2", "w4", "w5"]);

    let released = holder.release(KEY, held.lease.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
    for task in waiting {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every live waiter granted in time")
            .unwrap();
    }
    let granted = granted.lock().unwrap().clone();
    let order: Vec<&str> = granted.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["w1", "w2", "w4", "w5"], "{granted:?}");
    let tokens: Vec<u64> = granted.iter().map(|(_, t)| *t).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]) && tokens[0] > held.lease.token,
        "tokens increase along the line: {tokens:?}"
    );
    // Each hand-on was one entry: the release and the grant share a revision.
    let history = holder.history(KEY, ReadMode::Linearizable).await.unwrap();
    for token in &tokens {
        let at: Vec<&str> = history
            .events
            .iter()
            .filter(|e| e.revision == *token)
            .map(|e| e.kind.as_str())
            .collect();
        assert_eq!(at, ["released", "claimed"], "revision {token}: {at:?}");
    }
    assert!(
        !history
            .events
            .iter()
            .any(|e| e.kind == "claimed" && e.actor.as_ref().is_some_and(|a| a.name == "w3")),
        "w3 stopped waiting and was never granted the key"
    );
    assert!(
        history.events.iter().any(|e| e.kind == "left-line"),
        "w3's lapse is in the history"
    );
    let probe = holder.probe(KEY, ReadMode::Linearizable).await.unwrap();
    assert_eq!(probe.lease, None, "the last waiter released it");
    assert_eq!(probe.line, None, "no one waits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_times_out_leaves_the_line() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let holder = cluster.client_of(1).await;
    let waiter = cluster.client_of(2).await;
    assert!(matches!(
        holder
            .claim(KEY, "holder", Duration::from_secs(60))
            .await
            .unwrap(),
        ClaimOutcome::Granted(_)
    ));
    let outcome = waiter
        .wait_in_line(KEY, "impatient", PLACE_TTL, Duration::from_millis(1_500))
        .await
        .unwrap();
    match outcome {
        LineOutcome::InLine(place) => assert_eq!(place.position, 1),
        other => panic!("{other:?}"),
    }
    let probe = holder.probe(KEY, ReadMode::Linearizable).await.unwrap();
    assert_eq!(probe.line, None, "it left the line");
    let (was_waiting, holds) = waiter.leave_line(KEY, "impatient").await.unwrap();
    assert!(!was_waiting && holds.is_none());
}

/// A hand-on is two events in one revision (the release, the grant): a watch delivers both,
/// as it delivers every key of a set granted in one entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_delivers_every_event_of_one_revision() {
    use futures::StreamExt;
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let ann = cluster.client_of(1).await;
    let bob = cluster.client_of(2).await;
    let held = match ann
        .claim(KEY, "ann", Duration::from_secs(60))
        .await
        .unwrap()
    {
        ClaimOutcome::Granted(g) => g,
        other => panic!("{other:?}"),
    };
    let LineOutcome::InLine(place) = bob.wait_once(KEY, "bob", PLACE_TTL).await.unwrap() else {
        panic!("bob granted a held key");
    };
    let mut events = ann.watch("gpu/", place.revision + 1);
    let released = ann.release(KEY, held.lease.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the hand-on's events in time")
            .expect("the watch goes on")
            .unwrap();
        seen.push((event.revision, event.kind, event.actor.map(|a| a.name)));
    }
    let revision = seen[0].0;
    assert_eq!(
        seen,
        [
            (revision, "released".to_owned(), Some("ann".to_owned())),
            (revision, "claimed".to_owned(), Some("bob".to_owned())),
        ]
    );
    // A watch dropped between the two resumes from its resume point with the second.
    let mut first_only = ann.watch("gpu/", place.revision + 1);
    let event = tokio::time::timeout(Duration::from_secs(10), first_only.next())
        .await
        .expect("the release in time")
        .expect("the watch goes on")
        .unwrap();
    assert_eq!(
        (event.revision, event.kind.as_str()),
        (revision, "released")
    );
    let resume = first_only.resume_point();
    assert_eq!(
        (resume.next_revision, resume.delivered_of_last),
        (revision + 1, 1)
    );
    drop(first_only);
    let mut rest = ann.watch_from("gpu/", resume);
    let event = tokio::time::timeout(Duration::from_secs(10), rest.next())
        .await
        .expect("the grant in time")
        .expect("the watch goes on")
        .unwrap();
    assert_eq!((event.revision, event.kind.as_str()), (revision, "claimed"));
    assert_eq!(rest.resume_point().delivered_of_last, 2);
    // A set granted in one entry: one event per key, all delivered.
    let keys = ["gpu/a", "gpu/b", "gpu/c"];
    let mut events = ann.watch("gpu/", events.next_revision());
    assert!(matches!(
        ann.claim_set(&keys, "ann", Duration::from_secs(60))
            .await
            .unwrap(),
        baton_client::SetOutcome::Granted(_)
    ));
    let mut claimed = Vec::new();
    while claimed.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the set's events in time")
            .expect("the watch goes on")
            .unwrap();
        claimed.push(event.key);
    }
    assert_eq!(claimed, keys);
}

/// The leader pushes a grant from the line on the waiter's endings stream as the granting
/// entry applies, only to a stream that asked for grants (an older client would take it for
/// an ending); the Rust client's waiter hears of its grant there, long before its next
/// renewal of its place would have told it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_pushes_a_grant_from_the_line_to_a_stream_that_asked() {
    use baton_proto::v1 as pb;
    use baton_proto::v1::baton_client::BatonClient;
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = 1 + leader % 3;
    let ann = cluster.client_of(leader).await;
    let bob = cluster.client_of(follower).await;
    let carl = cluster.client_of(follower).await;
    // Long TTLs: a waiter renews its place every 20 s, so a grant heard sooner was pushed.
    let ttl = Duration::from_secs(60);
    let held = match ann.claim(KEY, "ann", ttl).await.unwrap() {
        ClaimOutcome::Granted(g) => g,
        other => panic!("{other:?}"),
    };
    let LineOutcome::InLine(place) = bob.wait_once(KEY, "bob", ttl).await.unwrap() else {
        panic!("bob granted a held key");
    };
    let mut raw = BatonClient::connect(format!("http://{}", cluster.nodes[&leader].addr))
        .await
        .unwrap();
    let open = |grants: bool| pb::EndingsRequest {
        client_id: bob.client_id().to_owned(),
        from_revision: place.revision + 1,
        grants,
    };
    let mut asked = raw.endings(open(true)).await.unwrap().into_inner();
    let mut not_asked = raw.endings(open(false)).await.unwrap().into_inner();
    let released = ann.release(KEY, held.lease.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
    let granted = loop {
        let message = next_message(&mut asked).await;
        if message.what != baton_proto::ENDINGS_PROGRESS {
            break message;
        }
    };
    assert_eq!(granted.what, baton_proto::GRANTED_FROM_LINE, "{granted:?}");
    assert_eq!(granted.key, KEY);
    assert_eq!(granted.holder_name, "bob");
    assert_eq!(
        granted.token, granted.revision,
        "the token is the granting entry's revision"
    );
    assert!(granted.token > held.lease.token);
    assert_eq!(granted.assignment, None, "the key has no assignment yet");
    let probe = ann.probe(KEY, ReadMode::Linearizable).await.unwrap();
    let lease = probe.lease.expect("bob holds it");
    assert_eq!(
        (lease.holder_name.as_str(), lease.token),
        ("bob", granted.token)
    );
    // The stream that did not ask is told only progress, past the grant's revision.
    loop {
        let message = next_message(&mut not_asked).await;
        assert_eq!(message.what, baton_proto::ENDINGS_PROGRESS, "{message:?}");
        if message.revision >= granted.revision {
            break;
        }
    }

    // The client's own wait: carl waits behind bob and hears of his grant at once, with
    // the key's assignment, as a claim's answer would give it.
    ann.assign(KEY, "carl", "dispatch", "next in line")
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        let outcome = carl
            .wait_in_line(KEY, "carl", ttl, Duration::from_secs(60))
            .await
            .unwrap();
        outcome
    });
    one_in_line(&ann, KEY).await;
    let released = bob.release(KEY, granted.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
    let outcome = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("carl granted before his first renewal (20 s after his wait)")
        .unwrap();
    let LineOutcome::Granted(grant) = outcome else {
        panic!("carl not granted: {outcome:?}");
    };
    assert!(!grant.already_held, "a new grant, from the line");
    assert!(grant.lease.token > granted.token);
    let assignment = grant
        .assignment
        .expect("the pushed grant carries the assignment");
    assert_eq!(
        (assignment.to.as_str(), assignment.by.as_str()),
        ("carl", "dispatch")
    );
    let probe = ann.probe(KEY, ReadMode::Linearizable).await.unwrap();
    let lease = probe.lease.expect("carl holds it");
    assert_eq!(
        (lease.holder_name.as_str(), lease.token),
        ("carl", grant.lease.token)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_from_the_line_is_pushed_with_every_holder_and_costs_no_second_round() {
    const POOL: &str = "gpu/pool";
    const PERMITS: u32 = 2;
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = 1 + leader % 3;
    let ann = cluster.client_of(leader).await;
    let bea = cluster.client_of(leader).await;
    let carl = cluster.client_of(follower).await;
    // Long TTLs: a waiter renews its place every 20 s, so a grant heard sooner was pushed.
    let ttl = Duration::from_secs(60);
    let granted = |outcome: ClaimOutcome| match outcome {
        ClaimOutcome::Granted(grant) => grant,
        other => panic!("{other:?}"),
    };
    let a = granted(ann.claim_permit(POOL, "ann", ttl, PERMITS).await.unwrap());
    let b = granted(bea.claim_permit(POOL, "bea", ttl, PERMITS).await.unwrap());
    let waiting = tokio::spawn(async move {
        let outcome = carl
            .wait_permit_in_line(POOL, "carl", ttl, PERMITS, Duration::from_secs(60))
            .await
            .unwrap();
        (carl, outcome)
    });
    one_in_line(&ann, POOL).await;
    let released = ann.release(POOL, a.lease.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
    let (carl, outcome) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("carl granted before his first renewal (20 s after his wait)")
        .unwrap();
    let LineOutcome::Granted(grant) = outcome else {
        panic!("carl not granted: {outcome:?}");
    };
    // The push named every holder of the pool, carl's new permit among them.
    let permits = grant.permits.expect("the grant names the pool's holders");
    let mut tokens: Vec<u64> = permits.holders.iter().map(|l| l.token).collect();
    tokens.sort_unstable();
    assert_eq!(tokens, [b.lease.token, grant.lease.token], "{permits:?}");
    assert_eq!(permits.permits, PERMITS);
    // No second round: the wait that used to confirm a pushed permit renewed it, and its
    // release would then say so ("renewed 1 time").
    let released = carl.release(POOL, grant.lease.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
    let history = ann.history(POOL, ReadMode::Linearizable).await.unwrap();
    let ended = history
        .events
        .iter()
        .rev()
        .find(|e| e.token == grant.lease.token && e.kind == baton_client::history::kind::RELEASED)
        .expect("carl's release is in the history");
    assert!(!ended.detail.contains("renewed"), "{ended:?}");
}

/// Waits (10 s at most) until `key`'s line holds one waiter, as `reader` reads it.
async fn one_in_line(reader: &baton_client::Client, key: &str) {
    let in_line = async {
        loop {
            let probe = reader.probe(key, ReadMode::Linearizable).await.unwrap();
            if probe.line.is_some_and(|l| l.waiters == 1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), in_line)
        .await
        .expect("one waiter in line");
}

/// The next message of an endings stream, within 10 s.
async fn next_message(
    stream: &mut tonic::Streaming<baton_proto::v1::LeaseEnding>,
) -> baton_proto::v1::LeaseEnding {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a message in time")
        .expect("the stream goes on")
        .expect("not ended")
}
