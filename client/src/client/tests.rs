#[test]
fn a_tls_mismatch_is_named() {
    let plain_to_tls = "a:1: Internal: h2 protocol error: http2 error: transport error: \
                        connection error detected: frame with invalid size";
    assert!(super::transport::tls_hint(plain_to_tls).contains("give the client the nodes' CA"));
    let tls_to_plain = "a:1: Unavailable: received corrupt message of type InvalidContentType";
    assert!(super::transport::tls_hint(tls_to_plain).contains("speaks plaintext"));
    assert_eq!(
        super::transport::tls_hint("a:1: Unavailable: tcp connect error"),
        ""
    );
}

use super::*;
use crate::fake_node::FakeNode;
use crate::handoff::HandoffNote;
use crate::record::RecordPatch;
use baton_proto::LEADER_METADATA_KEY;
use tonic::metadata::MetadataMap;
use tonic::Code;

async fn client(endpoints: &[&str]) -> Client {
    Client::connect(ClientConfig::with_endpoints(endpoints.iter().copied()))
        .await
        .unwrap()
}

fn metadata_naming(leader: &str) -> MetadataMap {
    let mut metadata = MetadataMap::new();
    metadata.insert(LEADER_METADATA_KEY, leader.parse().unwrap());
    metadata
}

#[test]
fn request_futures_are_send_so_callers_can_spawn_them() {
    fn assert_send<T: Send>(_: &T) {}
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = runtime.block_on(client(&["a:1"]));
    assert_send(&client.claim("k", "h", Duration::from_secs(1)));
    assert_send(&client.renew("k", 1));
    assert_send(&client.release("k", 1));
    assert_send(&client.probe("k", ReadMode::Stale));
    assert_send(&client.board("", 0, "", ReadMode::Stale));
    assert_send(&client.check_token("k", 1));
    assert_send(&client.revoke("k", "r"));
    assert_send(&client.cluster_status());
    assert_send(&client.status_of("a:1"));
    assert_send(&client.update("k", 1, RecordPatch::status("done")));
    assert_send(&client.assign("k", "a", "b", ""));
    assert_send(&client.record("k", ReadMode::Stale));
    assert_send(&client.history("k", ReadMode::Stale));
    assert_send(&client.offer("k", 1, "b", HandoffNote::default(), Duration::from_secs(1)));
    assert_send(&client.accept("k", "b", Duration::from_secs(1)));
    assert_send(&client.decline("k", "b"));
    assert_send(&client.cancel("k", 1));
    assert_send(&client.release_with_status("k", 1, "done"));
}

#[tokio::test]
async fn connect_fails_only_on_bad_configuration() {
    assert!(matches!(
        Client::connect(ClientConfig::with_endpoints(["nonsense"])).await,
        Err(Error::Config(_))
    ));
    // Nothing listens here; connecting is lazy, so this still succeeds.
    let client = client(&["127.0.0.1:1"]).await;
    assert_eq!(client.endpoints(), ["127.0.0.1:1"]);
}

#[tokio::test]
async fn request_ids_share_a_per_instance_session_and_count_up_from_one() {
    let c = client(&["a:1"]).await;
    let clone = c.clone();
    let first = c.next_request_id();
    let second = clone.next_request_id();
    assert_eq!(first.client_id, second.client_id);
    assert_eq!((first.seq, second.seq), (1, 2));
    // Two instances with the same client id (two CLI runs with --client-id) have their
    // own sessions, so one's seq 1 is not mistaken for a retry of the other's seq 1.
    let shared = |_| async {
        Client::connect(ClientConfig {
            client_id: Some("shared-id".into()),
            ..ClientConfig::with_endpoints(["a:1"])
        })
        .await
        .unwrap()
    };
    let (one, two) = (shared(1).await, shared(2).await);
    assert_eq!(one.client_id(), two.client_id());
    assert_ne!(one.next_request_id(), two.next_request_id());
}

#[tokio::test]
async fn leader_hint_is_preferred_and_dropped_after_it_fails() {
    let client = client(&["a:1", "b:2", "c:3"]).await;
    assert_eq!(client.pick_endpoint(), "a:1");
    assert_eq!(
        client.learn_leader(&metadata_naming("http://c:3")),
        Some("c:3".into())
    );
    assert_eq!(client.leader_hint().as_deref(), Some("c:3"));
    assert_eq!(client.pick_endpoint(), "c:3");
    client.note_failure("c:3");
    assert_eq!(client.leader_hint(), None);
    // The rotation did not move: c:3 was not its current endpoint.
    assert_eq!(client.pick_endpoint(), "a:1");
}

#[tokio::test]
async fn with_leader_hints_off_the_client_stays_on_its_endpoints() {
    let client = Client::connect(ClientConfig {
        follow_leader_hints: false,
        ..ClientConfig::with_endpoints(["proxy-a:1", "proxy-b:2"])
    })
    .await
    .unwrap();
    assert_eq!(client.learn_leader(&metadata_naming("10.0.0.3:7001")), None);
    assert_eq!(client.leader_hint(), None);
    assert_eq!(client.pick_endpoint(), "proxy-a:1");
}

#[tokio::test]
async fn rotation_moves_past_a_failed_endpoint_and_wraps() {
    let client = client(&["a:1", "b:2"]).await;
    client.note_failure("a:1");
    assert_eq!(client.pick_endpoint(), "b:2");
    client.note_failure("b:2");
    assert_eq!(client.pick_endpoint(), "a:1");
}

#[tokio::test]
async fn unreachable_node_is_not_adopted_as_leader_on_hearsay() {
    let client = client(&["a:1", "b:2"]).await;
    client.mark_suspect("b:2");
    assert_eq!(client.learn_leader(&metadata_naming("b:2")), None);
    assert_eq!(client.leader_hint(), None);
}

#[tokio::test]
async fn malformed_leader_hint_is_ignored() {
    let client = client(&["a:1"]).await;
    assert_eq!(
        client.learn_leader(&metadata_naming("not an address")),
        None
    );
    assert_eq!(client.leader_hint(), None);
}

#[tokio::test]
async fn unreachable_cluster_gives_unavailable_after_the_retry_deadline() {
    // Port 1 on localhost refuses connections, so every attempt fails fast.
    let client = Client::connect(ClientConfig {
        endpoints: vec!["127.0.0.1:1".into()],
        retry_deadline: Duration::from_millis(300),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let started = Instant::now();
    let error = client.probe("tasks/a", ReadMode::Linearizable).await;
    assert!(
        matches!(&error, Err(Error::Unavailable { last }) if last.contains("127.0.0.1:1")),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(
        client.status_of("127.0.0.1:1").await,
        Err(Error::Unavailable { .. })
    ));
}

#[tokio::test]
async fn retries_reuse_the_request_id_and_follow_the_leader_hint() {
    let follower = Arc::new(FakeNode::default());
    let leader = Arc::new(FakeNode::default());
    let (follower_addr, follower_task) = follower.serve().await;
    let (leader_addr, leader_task) = leader.serve().await;
    // The follower cannot reach a leader but names it; the leader fails once (say, while
    // it confirms its leadership) and then answers.
    follower.fail_always(Code::Unavailable, "leader unreachable");
    follower.name_leader(leader_addr);
    leader.fail_next(Code::Unavailable, "no quorum yet");

    let client = client(&[&follower_addr.to_string(), &leader_addr.to_string()]).await;
    let ttl = Duration::from_secs(20);
    let before = Instant::now();
    let outcome = client.claim("tasks/a", "claude@host-a", ttl).await.unwrap();
    let after = Instant::now();

    let ClaimOutcome::Granted(grant) = outcome else {
        panic!("expected a grant, got {outcome:?}");
    };
    assert_eq!(grant.lease.holder_client_id, client.client_id());
    let margin_ttl = ttl.mul_f64(0.95);
    assert!(before + margin_ttl <= grant.safe_deadline);
    assert!(grant.safe_deadline <= after + margin_ttl);

    let leader_calls = leader.calls();
    assert_eq!(leader_calls.len(), 2, "{leader_calls:?}");
    let expected_id = Some((client.inner.retry_id.clone(), 1));
    assert!(leader_calls.iter().all(|c| c.request_id == expected_id));
    assert!(follower.calls().iter().all(|c| c.request_id == expected_id));
    // Only the first attempt says it is one: the node may answer it from a read.
    let firsts: Vec<bool> = follower
        .calls()
        .iter()
        .chain(leader_calls.iter())
        .map(|c| c.first_attempt)
        .collect();
    assert_eq!(firsts.iter().filter(|f| **f).count(), 1, "{firsts:?}");
    assert!(follower.calls()[0].first_attempt);
    assert_eq!(client.leader_hint(), Some(leader_addr.to_string()));

    // The next request goes straight to the leader it learned.
    let follower_calls = follower.calls().len();
    client
        .probe("tasks/a", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(follower.calls().len(), follower_calls);
    assert_eq!(leader.calls().last().unwrap().method, "probe");

    follower_task.abort();
    leader_task.abort();
}

#[tokio::test]
async fn invalid_argument_is_returned_at_once_without_retry() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    node.fail_always(Code::InvalidArgument, "key must be 1 to 512 bytes, got 0");
    let client = client(&[&addr.to_string()]).await;

    let error = client
        .claim("", "claude@host-a", Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        Error::InvalidArgument("key must be 1 to 512 bytes, got 0".into())
    );
    assert_eq!(node.calls().len(), 1);
    task.abort();
}

#[tokio::test]
async fn a_silent_node_costs_one_attempt_timeout_then_the_next_endpoint_answers() {
    // The kernel completes TCP handshakes on this listener, but nothing ever answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = Client::connect(ClientConfig {
        endpoints: vec![silent_addr.clone(), addr.to_string()],
        request_timeout: Duration::from_millis(200),
        ..ClientConfig::default()
    })
    .await
    .unwrap();

    let started = Instant::now();
    client.probe("tasks/a", ReadMode::Stale).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(node.calls().len(), 1);
    assert!(client.routing().suspects.contains_key(&silent_addr));
    // The client stays with the endpoint that answered.
    assert_eq!(client.pick_endpoint(), addr.to_string());
    task.abort();
    drop(silent);
}

#[tokio::test]
async fn each_logical_request_gets_a_new_seq() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = client(&[&addr.to_string()]).await;
    for _ in 0..2 {
        client
            .claim("tasks/a", "claude@host-a", Duration::from_secs(20))
            .await
            .unwrap();
    }
    let seqs: Vec<u64> = node
        .calls()
        .iter()
        .filter_map(|c| c.request_id.as_ref().map(|(_, seq)| *seq))
        .collect();
    assert_eq!(seqs, [1, 2]);
    task.abort();
}

#[tokio::test]
async fn a_refused_update_is_a_typed_refusal_and_is_not_retried() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    node.fail_next(
        Code::FailedPrecondition,
        "stale token 5 for tasks/x: held by codex@b with token 9",
    );
    let client = client(&[&addr.to_string()]).await;
    let error = client
        .update("tasks/x", 5, RecordPatch::status("done"))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        Error::Refused(Box::new(crate::error::Refusal::other(
            "stale token 5 for tasks/x: held by codex@b with token 9"
        )))
    );
    assert_eq!(node.count("update"), 1);

    // Accepted: the patch reaches the node as given, and the record comes back.
    let record = client
        .update(
            "tasks/x",
            9,
            RecordPatch::status("done").with_field("pr", "42"),
        )
        .await
        .unwrap();
    assert_eq!(record.status, "done");
    assert_eq!(record.fields["pr"], "42");
    let patch = node.last_patch().unwrap();
    assert_eq!(patch.summary, None);
    assert_eq!(patch.remove_fields, Vec::<String>::new());
    task.abort();
}

#[tokio::test]
async fn claims_name_the_assignment_and_assign_returns_it() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = client(&[&addr.to_string()]).await;
    let record = client
        .assign("tasks/x", "alice", "dispatcher", "verify")
        .await
        .unwrap()
        .record;
    assert_eq!(record.assigned_to.as_ref().unwrap().to, "alice");

    // Someone else's claim wins all the same, and is told about the assignment.
    let ClaimOutcome::Granted(grant) = client
        .claim("tasks/x", "bob", Duration::from_secs(10))
        .await
        .unwrap()
    else {
        panic!("expected a grant");
    };
    assert_eq!(grant.assignment.unwrap().to, "alice");

    node.assign_to(pb::Assignment {
        to: "carol".into(),
        by: "dispatcher".into(),
        ..Default::default()
    });
    node.hold_claims(1, Duration::from_secs(10));
    let outcome = client
        .claim("tasks/x", "carol", Duration::from_secs(10))
        .await
        .unwrap();
    assert!(
        matches!(&outcome, ClaimOutcome::Held { assignment: Some(a), .. } if a.to == "carol"),
        "{outcome:?}"
    );
    task.abort();
}

#[tokio::test]
async fn handoff_calls_carry_this_clients_id_and_a_safe_deadline() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = client(&[&addr.to_string()]).await;
    let note = HandoffNote {
        commit: "4f2a9c0".into(),
        ..HandoffNote::default()
    };
    let offer = client
        .offer("tasks/x", 42, "bob", note, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(offer.key, "tasks/x");
    assert_eq!((offer.from_token, offer.to.as_str()), (42, "bob"));
    assert_eq!(offer.note.commit, "4f2a9c0");
    assert_eq!(offer.offer_ttl, Duration::from_secs(600));

    let ttl = Duration::from_secs(20);
    let before = Instant::now();
    let accepted = client.accept("tasks/x", "bob", ttl).await.unwrap();
    let after = Instant::now();
    assert_eq!(accepted.lease.holder_name, "bob");
    assert_eq!(accepted.lease.holder_client_id, client.client_id());
    assert_eq!(accepted.note.volatile_facts[0].check_command, "echo 5");
    let margin_ttl = ttl.mul_f64(0.95);
    assert!(before + margin_ttl <= accepted.safe_deadline);
    assert!(accepted.safe_deadline <= after + margin_ttl);

    assert_eq!(client.decline("tasks/x", "bob").await.unwrap(), 82);
    assert_eq!(client.cancel("tasks/x", 42).await.unwrap(), 83);
    // Every handoff call is a write with its own request id.
    let seqs: Vec<u64> = node
        .calls()
        .iter()
        .filter_map(|c| c.request_id.as_ref().map(|(_, seq)| *seq))
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    task.abort();
}

#[tokio::test]
async fn accept_guarded_keeps_the_new_lease_alive() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    // Renewals answer with the TTL the taker asked for.
    node.assume_ttl(Duration::from_millis(600));
    let client = client(&[&addr.to_string()]).await;
    let (accepted, guard) = client
        .accept_guarded("tasks/x", "bob", Duration::from_millis(600))
        .await
        .unwrap();
    assert_eq!(guard.token(), accepted.lease.token);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(node.count("renew") >= 1, "{:?}", node.calls());
    assert!(guard.is_held());
    guard.release().await.unwrap();
    task.abort();
}

#[tokio::test]
async fn record_history_and_release_with_status_reach_the_node() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = client(&[&addr.to_string()]).await;
    let view = client.record("tasks/x", ReadMode::Stale).await.unwrap();
    assert_eq!(view.key, "tasks/x");
    assert_eq!(view.record.status, "in_progress");
    assert_eq!(view.record.last_note, None);
    assert_eq!(view.lease.unwrap().holder_name, "other@host-b");

    let history = client.history("tasks/x", ReadMode::Stale).await.unwrap();
    assert_eq!(history.dropped, 5);
    let stints = history.stints();
    assert_eq!(stints.len(), 1);
    assert_eq!(stints[0].updates.len(), 1);

    client
        .release_with_status("tasks/x", 42, "done")
        .await
        .unwrap();
    assert_eq!(node.last_final_status().as_deref(), Some("done"));
    client.release("tasks/x", 42).await.unwrap();
    assert_eq!(node.last_final_status().as_deref(), Some(""));
    task.abort();
}

/// An attempt after one that may have reached the cluster says it is a retry, but only once a
/// write of the client was answered (before that the cluster knows nothing of it, and would
/// refuse a lost first attempt's retry as too old); a node that says it proposed nothing
/// leaves the next attempt a first one.
#[tokio::test]
async fn retries_are_marked_after_a_maybe_delivered_attempt_once_a_write_was_answered() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let client = client(&[&addr.to_string()]).await;
    let ttl = Duration::from_secs(20);
    // A fresh client: an outage answered by the node may have been proposed, but nothing
    // is marked yet.
    node.fail_next(Code::Unavailable, "the write did not commit");
    client.claim("tasks/a", "h", ttl).await.unwrap();
    let retries =
        |from: usize| -> Vec<bool> { node.calls()[from..].iter().map(|c| c.retry).collect() };
    assert_eq!(retries(0), [false, false]);
    // Known now: the same failure makes the next attempt a retry.
    node.fail_next(Code::Unavailable, "the write did not commit");
    client.claim("tasks/b", "h", ttl).await.unwrap();
    assert_eq!(retries(2), [false, true]);
    task.abort();
}
