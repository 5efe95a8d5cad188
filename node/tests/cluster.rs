//! Multi-process tests: three real `baton-node` processes on loopback.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use baton_client::{
    ClaimOutcome, Client, ClientConfig, Error, LineOutcome, ReadMode, ReleaseOutcome, RenewOutcome,
};
use common::{admin_addr, http_get, serial, Cluster};

const TTL: Duration = Duration::from_secs(30);

fn granted(outcome: ClaimOutcome) -> baton_client::Grant {
    match outcome {
        ClaimOutcome::Granted(g) => g,
        ClaimOutcome::Held { lease, .. } => panic!("expected a grant, key held by {lease:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claimants_on_one_key_have_exactly_one_winner() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let mut tasks = Vec::new();
    for i in 0..32 {
        // Each claimant is its own client process identity, spread over all nodes.
        let endpoints = cluster.endpoints();
        tasks.push(tokio::spawn(async move {
            let client = Client::connect(ClientConfig {
                endpoints: vec![endpoints[i % endpoints.len()].clone()],
                retry_deadline: Duration::from_secs(20),
                ..ClientConfig::default()
            })
            .await
            .unwrap();
            let outcome = client
                .claim("tasks/contended", &format!("agent-{i}"), TTL)
                .await
                .unwrap();
            (format!("agent-{i}"), outcome)
        }));
    }
    let mut winners = Vec::new();
    let mut refusals = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            (name, ClaimOutcome::Granted(g)) => winners.push((name, g)),
            (_, ClaimOutcome::Held { lease, .. }) => refusals.push(lease),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claimant wins: {winners:?}");
    assert_eq!(refusals.len(), 31);
    let (winner, grant) = &winners[0];
    for lease in &refusals {
        assert_eq!(&lease.holder_name, winner, "every refusal names the winner");
        assert_eq!(lease.token, grant.lease.token, "and the winner's token");
    }
    let probe = cluster
        .client()
        .await
        .probe("tasks/contended", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(probe.lease.unwrap().holder_name, *winner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_strictly_increase_across_cycles_and_a_leader_change() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let mut tokens = Vec::new();
    let cycle = |client: Client| async move {
        let g = granted(client.claim("tasks/cycle", "cycler", TTL).await.unwrap());
        match client.release("tasks/cycle", g.lease.token).await.unwrap() {
            ReleaseOutcome::Released(l) => assert_eq!(l.token, g.lease.token),
            other => panic!("{other:?}"),
        }
        g.lease.token
    };
    for _ in 0..5 {
        tokens.push(cycle(client.clone()).await);
    }
    let leader = cluster.leader(Duration::from_secs(10)).await;
    cluster.kill(leader);
    cluster.leader(Duration::from_secs(20)).await;
    for _ in 0..5 {
        tokens.push(cycle(client.clone()).await);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens strictly increase: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_keeps_every_holder_and_the_restarted_node_catches_up() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let mut held = Vec::new();
    for i in 0..10 {
        let key = format!("tasks/held-{i}");
        let g = granted(
            client
                .claim(&key, &format!("holder-{i}"), TTL)
                .await
                .unwrap(),
        );
        held.push((key, g.lease.holder_name, g.lease.token));
    }
    let leader = cluster.leader(Duration::from_secs(10)).await;
    cluster.kill(leader);
    let killed_at = Instant::now();

    // A new leader serves claims again.
    let g = granted(
        client
            .claim("tasks/after-failover", "late", TTL)
            .await
            .unwrap(),
    );
    let failover = killed_at.elapsed();
    eprintln!("first claim granted {failover:?} after kill -9 of the leader");
    assert!(g.lease.token > held.last().unwrap().2);
    let new_leader = cluster.leader(Duration::from_secs(10)).await;
    assert_ne!(new_leader, leader);

    // No held key changed holder.
    for (key, holder, token) in &held {
        let lease = client
            .probe(key, ReadMode::Linearizable)
            .await
            .unwrap()
            .lease
            .unwrap();
        assert_eq!((&lease.holder_name, lease.token), (holder, *token), "{key}");
    }

    // The killed node, restarted on its data dir, catches up: its own (stale) view shows the
    // same holders, including the grant made while it was down.
    cluster.start_node(leader);
    let restarted = cluster.client_of(leader).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let probe = restarted
            .probe("tasks/after-failover", ReadMode::Stale)
            .await;
        if matches!(probe, Ok(ref p) if p.lease.as_ref().map(|l| l.token) == Some(g.lease.token)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "restarted node did not catch up: {probe:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (key, holder, token) in &held {
        let lease = restarted
            .probe(key, ReadMode::Stale)
            .await
            .unwrap()
            .lease
            .unwrap();
        assert_eq!((&lease.holder_name, lease.token), (holder, *token), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_that_stops_renewing_loses_the_key_after_its_ttl_never_before_the_safe_deadline() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let ttl = Duration::from_millis(2_500);
    let g = granted(
        client
            .claim("tasks/abandoned", "quitter", ttl)
            .await
            .unwrap(),
    );
    let observer = cluster.client().await;
    let deadline = Instant::now() + ttl + Duration::from_secs(10);
    loop {
        let probe = observer
            .probe("tasks/abandoned", ReadMode::Linearizable)
            .await
            .unwrap();
        if probe.lease.is_none() {
            let now = Instant::now();
            assert!(
                now >= g.safe_deadline,
                "the key was free {:?} before the holder's safe deadline",
                g.safe_deadline - now
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lease never expired\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The old holder's token is dead: renewing it reports the loss.
    match client
        .renew("tasks/abandoned", g.lease.token)
        .await
        .unwrap()
    {
        baton_client::RenewOutcome::Lost { current } => assert!(current.is_none()),
        other => panic!("{other:?}"),
    }
    let next = granted(
        observer
            .claim("tasks/abandoned", "successor", ttl)
            .await
            .unwrap(),
    );
    assert!(next.lease.token > g.lease.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_keeps_a_lease_past_its_ttl() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let ttl = Duration::from_millis(2_000);
    let g = granted(client.claim("tasks/kept", "keeper", ttl).await.unwrap());
    let start = Instant::now();
    while start.elapsed() < ttl * 3 {
        tokio::time::sleep(ttl / 4).await;
        match client.renew("tasks/kept", g.lease.token).await.unwrap() {
            baton_client::RenewOutcome::Renewed(r) => assert_eq!(r.lease.token, g.lease.token),
            other => panic!("lost a lease that was renewed in time: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_invalid_argument_and_changes_nothing() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let before = client
        .board("", 0, "", ReadMode::Linearizable)
        .await
        .unwrap();
    let cases: Vec<(&str, Result<ClaimOutcome, Error>)> = vec![
        ("empty key", client.claim("", "h", TTL).await),
        (
            "oversize key",
            client.claim(&"k".repeat(513), "h", TTL).await,
        ),
        (
            "ttl below minimum",
            client
                .claim("tasks/x", "h", Duration::from_millis(100))
                .await,
        ),
        (
            "ttl above maximum",
            client
                .claim("tasks/x", "h", Duration::from_secs(3_601))
                .await,
        ),
        (
            "oversize holder",
            client.claim("tasks/x", &"h".repeat(129), TTL).await,
        ),
    ];
    for (what, result) in cases {
        match result {
            Err(Error::InvalidArgument(msg)) => assert!(!msg.is_empty(), "{what}"),
            other => panic!("{what}: expected INVALID_ARGUMENT, got {other:?}"),
        }
    }
    let after = client
        .board("", 0, "", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        before.leases, after.leases,
        "refused requests change nothing"
    );
    assert!(client
        .probe("tasks/x", ReadMode::Linearizable)
        .await
        .unwrap()
        .lease
        .is_none());
}

/// The leader, a follower, and a client that talks to that follower alone (it follows no
/// leader hint), so that its writes are forwarded.
async fn pinned_to_a_follower(cluster: &Cluster) -> (u64, u64, Client) {
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .unwrap();
    let pinned = Client::connect(ClientConfig {
        endpoints: vec![cluster.nodes[&follower].addr.clone()],
        follow_leader_hints: false,
        retry_deadline: Duration::from_secs(10),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    (leader, follower, pinned)
}

/// Bad input is refused alike by the leader and by a follower that knows it: the same
/// INVALID_ARGUMENT, never an outage the client would retry until its deadline (a write
/// without its session was answered UNAVAILABLE through a follower), and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_same_refusal_from_a_follower_as_from_the_leader() {
    use baton_proto::v1 as pb;
    use baton_proto::v1::baton_client::BatonClient;
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    // The follower knows the leader once a write went through it.
    let (leader, follower, pinned) = pinned_to_a_follower(&cluster).await;
    let held = granted(pinned.claim("input/held", "agent", TTL).await.unwrap());
    let token = held.lease.token;
    let no_session = |seq: u64| {
        Some(pb::RequestId {
            client_id: "raw-client".into(),
            seq,
            session: String::new(),
        })
    };
    let holder = Some(pb::Holder {
        name: "raw".into(),
        client_id: "raw-client".into(),
    });
    let before = pinned
        .board("", 0, "", ReadMode::Linearizable)
        .await
        .unwrap();
    let mut leaders_words = std::collections::BTreeMap::new();
    for (id, seq_base) in [(leader, 100), (follower, 200)] {
        let mut raw = BatonClient::connect(format!("http://{}", cluster.nodes[&id].addr))
            .await
            .unwrap();
        let key = || "input/held".to_string();
        let answers = vec![
            (
                "renew without a session",
                raw.renew(pb::RenewRequest {
                    key: key(),
                    token,
                    request_id: no_session(seq_base + 1),
                })
                .await
                .map(drop),
            ),
            (
                "release without a session",
                raw.release(pb::ReleaseRequest {
                    key: key(),
                    token,
                    request_id: no_session(seq_base + 2),
                    final_status: String::new(),
                })
                .await
                .map(drop),
            ),
            (
                "update without a session",
                raw.update(pb::UpdateRequest {
                    key: key(),
                    token,
                    patch: None,
                    request_id: no_session(seq_base + 3),
                })
                .await
                .map(drop),
            ),
            (
                "revoke without a session",
                raw.revoke(pb::RevokeRequest {
                    key: key(),
                    reason: "raw".into(),
                    request_id: no_session(seq_base + 4),
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
            (
                "claim of an empty key",
                raw.claim(pb::ClaimRequest {
                    key: String::new(),
                    holder: holder.clone(),
                    ttl_ms: 30_000,
                    request_id: no_session(seq_base + 5),
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
            (
                "claim without a request id",
                raw.claim(pb::ClaimRequest {
                    key: "input/free".into(),
                    holder: holder.clone(),
                    ttl_ms: 30_000,
                    request_id: None,
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
        ];
        for (what, answer) in answers {
            let status = answer.expect_err(what);
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{what} at node {id} ({}): {}",
                if id == leader { "leader" } else { "follower" },
                status.message()
            );
            match id == leader {
                true => drop(leaders_words.insert(what, status.message().to_owned())),
                false => assert_eq!(
                    Some(status.message()),
                    leaders_words.get(what).map(String::as_str),
                    "{what}: the follower's words differ from the leader's"
                ),
            }
        }
    }
    let after = pinned
        .board("", 0, "", ReadMode::Linearizable)
        .await
        .unwrap();
    let facts = |b: &baton_client::Board| {
        b.leases
            .iter()
            .map(|l| (l.key.clone(), l.token, l.basis))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        facts(&before),
        facts(&after),
        "refused requests change nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_traffic_for_an_unknown_node_id_is_refused() {
    use baton_proto::v1::raft_client::RaftClient;
    use baton_proto::v1::RaftRequest;
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let mut raft = RaftClient::connect(format!("http://{}", cluster.nodes[&1].addr))
        .await
        .unwrap();
    let status = raft
        .vote(RaftRequest {
            target_node_id: 9,
            cluster_name: "baton".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("not node 9"),
        "{}",
        status.message()
    );
    let status = raft
        .vote(RaftRequest {
            target_node_id: 1,
            cluster_name: "other".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // A message from a follower on a data dir other than the one the leader knows it by (a
    // wiped node back under its old id) is refused. The leader has heard every follower's
    // incarnation in their replication answers.
    let leader = cluster.leader(Duration::from_secs(5)).await;
    let follower = if leader == 1 { 2 } else { 1 };
    let mut to_leader = RaftClient::connect(format!("http://{}", cluster.nodes[&leader].addr))
        .await
        .unwrap();
    let status = to_leader
        .vote(RaftRequest {
            target_node_id: leader,
            cluster_name: "baton".into(),
            sender_node_id: follower,
            sender_incarnation: 12345,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    let want = format!("node {follower} now runs on another data dir");
    assert!(status.message().contains(&want), "{}", status.message());
    // The cluster is unaffected.
    cluster.leader(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_grants_survive_kill_9_of_every_node() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let mut acked = Vec::new();
    for i in 0..30 {
        let key = format!("tasks/durable-{i}");
        let g = granted(client.claim(&key, "durable", TTL).await.unwrap());
        acked.push((key, g.lease.token));
    }
    for id in [1, 2, 3] {
        cluster.kill(id);
    }
    for id in [1, 2, 3] {
        cluster.start_node(id);
    }
    cluster.leader(Duration::from_secs(20)).await;
    let board = client
        .board("tasks/durable-", 0, "", ReadMode::Linearizable)
        .await
        .unwrap();
    let found: BTreeSet<(String, u64)> = board
        .leases
        .iter()
        .map(|l| (l.key.clone(), l.token))
        .collect();
    let want: BTreeSet<(String, u64)> = acked.into_iter().collect();
    assert_eq!(
        found, want,
        "every acknowledged grant is there after a full restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_counting_instead_of_granting_a_fresh_ttl() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let ttl = Duration::from_millis(4_000);
    let claimed_at = Instant::now();
    let g = granted(
        client
            .claim("tasks/orphan", "crashed-agent", ttl)
            .await
            .unwrap(),
    );
    // The holder goes silent; partway through its TTL the leader dies.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let leader = cluster.leader(Duration::from_secs(5)).await;
    cluster.kill(leader);
    let observer = cluster.client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let freed_after = loop {
        if let Ok(p) = observer.probe("tasks/orphan", ReadMode::Linearizable).await {
            if p.lease.is_none() {
                break claimed_at.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "never expired\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert!(
        Instant::now() >= g.safe_deadline,
        "expired before the safe deadline"
    );
    // A fresh full TTL from the new leader's election would free it no earlier than
    // 2.5 s + election + 4 s ≈ 7 s after the claim; counting on from the followers' own
    // apply instants frees it at about 4 s (plus the election if that takes longer).
    assert!(
        freed_after < Duration::from_millis(6_500),
        "the new leader restarted the TTL: freed {freed_after:?} after the claim"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_missed_purged_entries_catches_up_from_a_snapshot() {
    let _serial = serial().await;
    let mut cluster = Cluster::start_with(3, &["--snapshot-logs", "20"]).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = *cluster.running().iter().find(|id| **id != leader).unwrap();
    cluster.kill(follower);
    let client = cluster.client().await;
    let mut last = 0;
    for i in 0..120 {
        let g = granted(
            client
                .claim(&format!("tasks/snap-{i}"), "snapper", TTL)
                .await
                .unwrap(),
        );
        last = g.lease.token;
    }
    // The missed entries include a case file: an assignment, a fenced update, a pending offer.
    let first = client
        .probe("tasks/snap-0", ReadMode::Linearizable)
        .await
        .unwrap();
    let token0 = first.lease.unwrap().token;
    client
        .assign("tasks/snap-0", "someone", "dispatcher", "snapshot test")
        .await
        .unwrap();
    let patch = baton_client::RecordPatch {
        status: Some("in_progress".into()),
        ..Default::default()
    };
    client.update("tasks/snap-0", token0, patch).await.unwrap();
    let note = baton_client::HandoffNote {
        done: "half".into(),
        ..Default::default()
    };
    client
        .offer(
            "tasks/snap-0",
            token0,
            "taker",
            note,
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    // The leader has purged the entries the follower missed, so only a snapshot helps.
    cluster.start_node(follower);
    let lagging = cluster.client_of(follower).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let board = lagging.board("tasks/snap-", 0, "", ReadMode::Stale).await;
        let offered = matches!(
            lagging.record("tasks/snap-0", ReadMode::Stale).await,
            Ok(r) if r.record.pending_offer.is_some()
        );
        if let Ok(b) = &board {
            if offered && b.leases.len() == 120 && b.leases.iter().any(|l| l.token == last) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "follower did not catch up: {:?}\n{}",
            board.map(|b| b.leases.len()),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The case file came with the snapshot: record, assignment, pending offer, history.
    let want = client
        .record("tasks/snap-0", ReadMode::Linearizable)
        .await
        .unwrap();
    let got = lagging
        .record("tasks/snap-0", ReadMode::Stale)
        .await
        .unwrap();
    assert_eq!(got.record.status, "in_progress");
    assert_eq!(got.record.assigned_to, want.record.assigned_to);
    let offer = got
        .record
        .pending_offer
        .expect("the pending offer survived");
    assert_eq!(
        (offer.to.as_str(), offer.note.done.as_str()),
        ("taker", "half")
    );
    let history = |h: baton_client::History| {
        h.events
            .into_iter()
            .map(|e| (e.revision, e.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        history(
            lagging
                .history("tasks/snap-0", ReadMode::Stale)
                .await
                .unwrap()
        ),
        history(
            client
                .history("tasks/snap-0", ReadMode::Linearizable)
                .await
                .unwrap()
        ),
    );
    let log = std::fs::read_to_string(&cluster.nodes[&follower].log).unwrap();
    assert!(
        cluster.nodes[&follower]
            .data_dir
            .join("snapshots/current.snapshot")
            .exists(),
        "the follower installed a snapshot\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_node_cleanly_and_it_rejoins_on_restart() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let g = granted(client.claim("tasks/term", "t", TTL).await.unwrap());
    let node = cluster.nodes.get_mut(&2).unwrap();
    let mut child = node.child.take().unwrap();
    let pid = child.id().to_string();
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "node did not stop on SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
    cluster.start_node(2);
    let restarted = cluster.client_of(2).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let p = restarted.probe("tasks/term", ReadMode::Stale).await;
        if matches!(&p, Ok(p) if p.lease.as_ref().map(|l| l.token) == Some(g.lease.token)) {
            break;
        }
        assert!(Instant::now() < deadline, "no rejoin: {p:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_a_data_dir_of_another_node_and_bad_config() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let port = common::free_port();
    let run = |args: &[&str]| {
        std::process::Command::new(common::node_bin())
            .args(args)
            .output()
            .unwrap()
    };
    let listen = format!("127.0.0.1:{port}");
    let data_s = data.to_str().unwrap();
    // Make node 1's data dir by running node 1 briefly.
    let mut child = std::process::Command::new(common::node_bin())
        .args(["--node-id", "1", "--listen", &listen, "--data-dir", data_s])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !data.join("baton.id").exists() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().unwrap();
    child.wait().unwrap();

    let out = run(&[
        "--node-id",
        "2",
        "--listen",
        &listen,
        "--data-dir",
        data_s,
        "--initial-cluster",
        &format!("2={listen}"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("belongs to node 1"), "{err}");

    let out = run(&["--node-id", "1", "--ttl-ms-min", "10", "--data-dir", data_s]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("ttl_ms_min"), "{err}");

    let out = run(&[
        "--node-id",
        "4",
        "--initial-cluster",
        "1=127.0.0.1:1",
        "--data-dir",
        data_s,
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not in initial_cluster"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_or_release_with_a_token_never_granted_is_lost_without_a_log_entry() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    granted(client.claim("tasks/never", "h", TTL).await.unwrap());
    let before = client
        .probe("tasks/never", ReadMode::Linearizable)
        .await
        .unwrap();
    let made_up = before.revision + 1_000_000;
    // Through any node (followers forward): lost, naming the holder, and no revision spent.
    for id in 1..=3 {
        let via = cluster.client_of(id).await;
        match via.renew("tasks/never", made_up).await.unwrap() {
            RenewOutcome::Lost { current } => {
                assert_eq!(current.unwrap().holder_name, "h");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            via.release("tasks/never", made_up).await.unwrap(),
            ReleaseOutcome::Lost { .. }
        ));
    }
    let after = client
        .probe("tasks/never", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(after.revision, before.revision, "no log entry was spent");
    let basis = |p: &baton_client::Probe| p.lease.as_ref().map(|l| (l.token, l.basis));
    assert_eq!(basis(&after), basis(&before), "nothing renewed or released");
}

/// A `Claim` call whose `key` (field 1) carries `key` as raw bytes, whatever they are: the
/// status the node answers.
async fn raw_claim_with_key_bytes(addr: &str, key: &[u8]) -> tonic::Status {
    /// `ClaimRequest` with its key as bytes, so that it may be invalid UTF-8.
    #[derive(Clone, PartialEq, prost::Message)]
    struct RawClaim {
        #[prost(bytes = "vec", tag = "1")]
        key: Vec<u8>,
    }
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<RawClaim, baton_proto::v1::ClaimResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/baton.v1.Baton/Claim");
    grpc.unary(
        tonic::Request::new(RawClaim { key: key.to_vec() }),
        path,
        codec,
    )
    .await
    .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_size_and_board_page_limits_are_enforced() {
    use baton_proto::v1::baton_client::BatonClient;
    use baton_proto::v1::{BoardRequest, RevokeRequest};
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    granted(client.claim("tasks/limit", "h", TTL).await.unwrap());
    let mut raw = BatonClient::connect(format!("http://{}", cluster.nodes[&1].addr))
        .await
        .unwrap();
    // Past REQUEST_BYTES_MAX (256 KiB): refused before it is even decoded, as bad input
    // naming the limit (the transport says OUT_OF_RANGE, which a client would read as a
    // compacted watch).
    let status = raw
        .revoke(RevokeRequest {
            key: "tasks/limit".into(),
            reason: "r".repeat(300 * 1024),
            request_id: None,
            now: false,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("REQUEST_BYTES_MAX") && status.message().contains("262144"),
        "{}",
        status.message()
    );
    // A message that does not decode (a key that is not UTF-8): bad input, not INTERNAL.
    let status = raw_claim_with_key_bytes(&cluster.nodes[&1].addr, b"tasks/\xff\xfe").await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("UTF-8"), "{}", status.message());
    // A board's start_after past its limit is named as such.
    let status = raw
        .board(BoardRequest {
            prefix: String::new(),
            limit: 10,
            start_after: "k".repeat(600),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("start_after"),
        "{}",
        status.message()
    );
    // Past BOARD_LEASES_MAX (1,000): INVALID_ARGUMENT naming the way out.
    let status = raw
        .board(BoardRequest {
            prefix: String::new(),
            limit: 1_001,
            start_after: String::new(),
            stale: false,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().contains("start_after"),
        "{}",
        status.message()
    );
    // Neither changed anything.
    let probe = client
        .probe("tasks/limit", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(probe.lease.unwrap().holder_name, "h");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_under_a_quarantine_rule_is_refused_until_the_leader_ends_the_quarantine() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let rules = client
        .set_quarantine("printers/", Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(rules.get("printers/"), Some(&Duration::from_secs(3)));
    let ttl = Duration::from_secs(2);
    let g = granted(
        client
            .claim("printers/lab-1", "crashed", ttl)
            .await
            .unwrap(),
    );
    // Wait for the expiry (the holder never renews).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let p = client
            .probe("printers/lab-1", ReadMode::Linearizable)
            .await
            .unwrap();
        if p.lease.is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let freed = Instant::now();
    let other = cluster.client().await;
    match other.claim("printers/lab-1", "next", ttl).await {
        // The refusal carries its facts as fields: the reason, and the time left.
        Err(Error::Refused(r)) => {
            assert_eq!(r.reason, baton_client::RefusalReason::Quarantined, "{r}");
            assert_eq!(r.key, "printers/lab-1");
            assert!(r.quarantine_revision > 0, "{r:?}");
            assert!((1..=3_000).contains(&r.quarantine_remaining_ms), "{r:?}");
        }
        other => panic!("expected a quarantine refusal, got {other:?}"),
    }
    // The leader ends it about 3 s after the expiry; then anyone may claim.
    let next = loop {
        match other.claim("printers/lab-1", "next", ttl).await {
            Ok(ClaimOutcome::Granted(n)) => break n,
            Err(Error::Refused(_)) => {}
            unexpected => panic!("{unexpected:?}"),
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(10),
            "quarantine never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let waited = freed.elapsed();
    assert!(
        waited >= Duration::from_millis(2_500),
        "quarantine ended early: {waited:?}"
    );
    assert!(next.lease.token > g.lease.token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unaccepted_offer_lapses_by_the_leader_and_the_giver_keeps_the_key() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    let g = granted(client.claim("tasks/lapse", "giver", TTL).await.unwrap());
    let note = baton_client::HandoffNote {
        remaining: "everything".into(),
        ..Default::default()
    };
    client
        .offer(
            "tasks/lapse",
            g.lease.token,
            "taker",
            note,
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let view = client
            .record("tasks/lapse", ReadMode::Linearizable)
            .await
            .unwrap();
        if view.record.pending_offer.is_none() {
            assert_eq!(
                view.lease.unwrap().token,
                g.lease.token,
                "the giver keeps the key"
            );
            assert_eq!(view.record.last_note.unwrap().remaining, "everything");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the offer never lapsed\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kinds: Vec<String> = client
        .history("tasks/lapse", ReadMode::Linearizable)
        .await
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["claimed", "offered", "lapsed"]);
    // The record is writable again.
    let patch = baton_client::RecordPatch {
        status: Some("in_progress".into()),
        ..Default::default()
    };
    client
        .update("tasks/lapse", g.lease.token, patch)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_shows_the_assignment_beside_the_holder() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    client
        .assign("tasks/b1", "claude@a", "dispatcher", "")
        .await
        .unwrap();
    granted(client.claim("tasks/b1", "codex@b", TTL).await.unwrap());
    granted(client.claim("tasks/b2", "codex@b", TTL).await.unwrap());
    let board = client
        .board("tasks/", 0, "", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(board.leases.len(), 2);
    assert_eq!(board.leases[0].holder_name, "codex@b");
    assert_eq!(board.assignments["tasks/b1"].to, "claude@a");
    assert!(!board.assignments.contains_key("tasks/b2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_log_entries_and_each_still_gets_its_own_token() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let admin = cluster.client_of(leader).await;
    let entries_before = admin.cluster_status().await.unwrap().applied_index;
    const CLAIMS: usize = 96;
    let mut clients = Vec::new();
    for _ in 0..CLAIMS {
        clients.push(cluster.client_of(leader).await);
    }
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            tokio::spawn(async move {
                client
                    .claim(&format!("batch/{i}"), &format!("agent-{i}"), TTL)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut tokens = BTreeSet::new();
    for t in tasks {
        tokens.insert(granted(t.await.unwrap()).lease.token);
    }
    assert_eq!(tokens.len(), CLAIMS, "every grant has a token of its own");
    let entries_used = admin.cluster_status().await.unwrap().applied_index - entries_before;
    assert!(
        (entries_used as usize) < CLAIMS,
        "{CLAIMS} concurrent claims were batched into fewer log entries, used {entries_used}"
    );
    // Each command still counts one revision: a later claim's token is above every one of
    // these, by exactly one.
    let next = granted(admin.claim("batch/after", "agent-x", TTL).await.unwrap());
    assert_eq!(next.lease.token, tokens.last().unwrap() + 1);
}

/// The nodes `others` (a majority) elect one of them and write 120 claims through it, far
/// past their snapshot threshold (`--snapshot-logs 20`), until each one's snapshot covers
/// `covered` or more (they purge all but the last 20 entries behind each): a node cut off
/// before can then only catch up from a snapshot. Building one is asynchronous, so on a
/// loaded machine this takes a moment. Returns their client.
async fn move_on_past_snapshots(cluster: &Cluster, others: &[u64], covered: u64) -> Client {
    let rest = Client::connect(ClientConfig {
        endpoints: others
            .iter()
            .map(|id| cluster.nodes[id].addr.clone())
            .collect(),
        retry_deadline: Duration::from_secs(30),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    for i in 0..120 {
        granted(
            rest.claim(&format!("moved-on/{i}"), "new", TTL)
                .await
                .unwrap(),
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in others {
        let admin = admin_addr(cluster, *id).await;
        loop {
            let (_, metrics) = http_get(&admin, "/metrics").await;
            let now = metrics
                .lines()
                .find_map(|l| l.strip_prefix("baton_raft_snapshot_index "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            if now >= covered {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id}'s snapshot covers only {now}\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    rest
}

/// A leader cut off with writes in flight, whose log the new leader has purged past by the
/// time it returns, catches up from a snapshot. openraft 0.9 never answers the writes it had
/// appended (installing a snapshot does not truncate them), so the node must stop waiting for
/// them itself: they get an answer, and its later writes go through. (Found by the chaos
/// suite's pause scenario: a node whose proposer waited on such writes took no write again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_whose_pending_writes_a_snapshot_covered_keeps_taking_writes() {
    let _serial = serial().await;
    let (cluster, proxies) = Cluster::start_behind_proxies(
        3,
        &["--snapshot-logs", "20", "--admin-listen", "127.0.0.1:0"],
    )
    .await;
    let old = cluster.leader(Duration::from_secs(10)).await;
    let others: Vec<u64> = cluster
        .running()
        .into_iter()
        .filter(|id| *id != old)
        .collect();
    // Nothing reaches the followers: the leader appends but cannot commit.
    for id in &others {
        proxies[id].set_cut(true);
    }
    let direct_to = |id: u64| ClientConfig {
        endpoints: vec![cluster.nodes[&id].addr.clone()],
        follow_leader_hints: false,
        request_timeout: Duration::from_secs(60),
        retry_deadline: Duration::from_secs(60),
        ..ClientConfig::default()
    };
    let mut cut_off = Vec::new();
    for i in 0..4 {
        let client = Client::connect(direct_to(old)).await.unwrap();
        cut_off.push(tokio::spawn(async move {
            let key = format!("cutoff/{i}");
            (key.clone(), client.claim(&key, "cut-off", TTL).await)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The leader goes quiet and unreachable; the followers elect one of them and write far
    // past the snapshot threshold, purging their logs behind them.
    proxies[&old].set_cut(true);
    cluster.signal(old, "STOP");
    for id in &others {
        proxies[id].set_cut(false);
    }
    let rest = move_on_past_snapshots(&cluster, &others, 60).await;
    proxies[&old].set_cut(false);
    cluster.signal(old, "CONT");
    let resumed = Instant::now();
    // Its cut-off claims get answers (an unknown outcome, told to retry, counts), and those
    // that say granted really hold their key.
    for task in cut_off {
        let (key, answer) = tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .unwrap_or_else(|_| panic!("a cut-off claim was never answered\n{}", cluster.logs()))
            .unwrap();
        if let Ok(ClaimOutcome::Granted(g)) = answer {
            let probe = rest.probe(&key, ReadMode::Linearizable).await.unwrap();
            assert_eq!(probe.lease.map(|l| l.token), Some(g.lease.token), "{key}");
        }
    }
    // And a new write through it goes through.
    let via_old = Client::connect(direct_to(old)).await.unwrap();
    granted(via_old.claim("after/0", "later", TTL).await.unwrap());
    let took = resumed.elapsed();
    // The answers and the new write need not wait for the old leader to catch up (it can
    // forward to the new leader before the snapshot reaches it), so its install is awaited
    // apart: the new leader sends it after a replication backoff.
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = loop {
        let log = std::fs::read_to_string(&cluster.nodes[&old].log).unwrap();
        if log.contains("installed snapshot") || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        log.contains("installed snapshot"),
        "the old leader caught up from a snapshot within 30 s\n{log}"
    );
    assert!(
        took < Duration::from_secs(10),
        "answers and a new write through the resumed node took {took:?}\n{log}"
    );
}

/// A leader cut off past its leases' TTL proposes their expiries (as many as
/// `EXPIRE_IN_FLIGHT_MAX`, 1,024) into a log that cannot commit; the majority moves on and
/// compacts past them, and the old leader catches up from a snapshot. A write openraft 0.9
/// never answers (its entry covered by the snapshot install, never truncated) kept its
/// countdowns "in flight" for good, and with `EXPIRE_IN_FLIGHT_MAX` of them stuck the node
/// ended no lease when it led again. Now a countdown leaves flight when its node stops
/// leading the term it proposed in (or at `EXPIRE_PROPOSAL_TIMEOUT`). The outcome checked:
/// the node, leading again, frees a dead holder's key within its TTL and that bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_and_compacted_past_ends_leases_again_when_it_leads() {
    const SHORT: Duration = Duration::from_secs(2);
    const MASS: Duration = Duration::from_secs(8);
    const LEASES: usize = 1_100;
    let _serial = serial().await;
    let (cluster, proxies) = Cluster::start_behind_proxies(
        3,
        &["--snapshot-logs", "20", "--admin-listen", "127.0.0.1:0"],
    )
    .await;
    let old = cluster.leader(Duration::from_secs(10)).await;
    let others: Vec<u64> = cluster
        .running()
        .into_iter()
        .filter(|id| *id != old)
        .collect();
    // More leases than the expiry loop keeps in flight, none of them ever renewed: 16
    // clients (a client keeps at most 16 requests in flight), each claiming in turn.
    let mut claimers = Vec::new();
    for c in 0..16 {
        let client = cluster.client().await;
        claimers.push(tokio::spawn(async move {
            for i in (c..LEASES).step_by(16) {
                granted(
                    client
                        .claim(&format!("dead/{i}"), "dead", MASS)
                        .await
                        .unwrap(),
                );
            }
        }));
    }
    for claimer in claimers {
        claimer.await.unwrap();
    }
    // The leader is cut off both ways and keeps believing it leads: its countdowns run out
    // and it proposes every expiry it may have in flight, none of which can commit.
    for id in cluster.running() {
        proxies[&id].set_cut(true);
    }
    tokio::time::sleep(MASS + SHORT * 2).await;
    // Paused while the others move on (its elections would only disturb theirs).
    cluster.signal(old, "STOP");
    for id in &others {
        proxies[id].set_cut(false);
    }
    // The majority elects one of them, expires the leases itself, and writes on far past
    // its snapshot threshold, purging its logs behind it.
    move_on_past_snapshots(&cluster, &others, 100).await;
    proxies[&old].set_cut(false);
    cluster.signal(old, "CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&cluster.nodes[&old].log).unwrap();
        if log.contains("installed snapshot") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old leader installed no snapshot\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The old leader leads again: whoever else leads is paused until an election is won by it.
    let leader_of = |id: u64| {
        let addr = cluster.nodes[&id].addr.clone();
        async move {
            let c = Client::connect(ClientConfig {
                endpoints: vec![addr.clone()],
                retry_deadline: Duration::from_millis(500),
                request_timeout: Duration::from_millis(500),
                ..ClientConfig::default()
            })
            .await
            .unwrap();
            c.status_of(&addr).await.ok().and_then(|s| s.leader_id)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leader = leader_of(old).await;
        if leader == Some(old) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {old} never led again\n{}",
            cluster.logs()
        );
        if let Some(other) = leader.filter(|l| others.contains(l)) {
            cluster.signal(other, "STOP");
            let third = others.iter().copied().find(|id| *id != other).unwrap();
            let elected = Instant::now() + Duration::from_secs(10);
            while leader_of(third).await.is_none_or(|l| l == other) && Instant::now() < elected {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            cluster.signal(other, "CONT");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A dead holder's lease, claimed through the node that leads again, is freed in time:
    // its TTL plus `EXPIRE_PROPOSAL_TIMEOUT` (5 s) and room for a loaded machine.
    let via_old = Client::connect(ClientConfig {
        endpoints: vec![cluster.nodes[&old].addr.clone()],
        follow_leader_hints: false,
        retry_deadline: Duration::from_secs(10),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let dead = granted(via_old.claim("dead/after", "dead", SHORT).await.unwrap());
    let freed_by = Instant::now() + SHORT + Duration::from_secs(5 + 5);
    loop {
        let probe = via_old
            .probe("dead/after", ReadMode::Linearizable)
            .await
            .unwrap();
        if probe.lease.is_none() {
            break;
        }
        assert!(
            Instant::now() < freed_by,
            "a dead holder's lease (token {}) is still held; node {old} leads and ends nothing\n{}",
            dead.lease.token,
            std::fs::read_to_string(&cluster.nodes[&old].log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Clearing an assignment is a command of data format 5, and a revoke that holds the key
/// back one of format 8, which an older node cannot decode: the leader proposes each only
/// once every member told it that it reads that format. Here one member has never been
/// heard from (never started): refused, typed, naming it, and nothing changed (`revoke
/// --now`, of every format, still works); once it answers, the clear goes through and every
/// node has it. What a member said stays known when it goes down and the leader changes
/// (`a_member_down_through_a_failover_keeps_the_format_it_said`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_commands_wait_until_every_member_said_it_reads_their_format() {
    // `answer` is a refusal: the command is of data format `format`, which `silent` has not
    // said it reads.
    fn format_pending<T: std::fmt::Debug>(answer: Result<T, Error>, format: u32, silent: u64) {
        match answer {
            Err(Error::Refused(r)) => {
                assert_eq!(r.reason, baton_client::RefusalReason::FormatPending);
                assert_eq!((r.data_format, r.nodes.as_slice()), (format, &[silent][..]));
            }
            other => panic!("expected a format_pending refusal: {other:?}"),
        }
    }
    let _serial = serial().await;
    // Node 3 is a member no one has heard from: a node of any version may start as it.
    let mut cluster = Cluster::start_some(3, 2).await;
    let silent = 3;
    let client = cluster.client().await;
    client
        .assign("tasks/u1", "claude@a", "dispatcher", "")
        .await
        .unwrap();
    let refused = client
        .unassign("tasks/u1", "lead", "done elsewhere")
        .await
        .unwrap_err();
    match &refused {
        Error::Refused(r) => {
            assert_eq!(
                r.reason,
                baton_client::RefusalReason::FormatPending,
                "{r:?}"
            );
            assert_eq!(
                (r.data_format, r.nodes.as_slice()),
                (5, &[silent][..]),
                "{r:?}"
            );
            assert!(
                r.message.contains(&format!("node {silent}")),
                "{}",
                r.message
            );
        }
        other => panic!("expected a format_pending refusal: {other:?}"),
    }
    // So is a revoke that holds the key back (format 8), while `--now` (any format) works.
    client
        .claim("tasks/u2", "worker", Duration::from_secs(30))
        .await
        .unwrap();
    match client.revoke_with("tasks/u2", "stuck", false).await {
        Err(Error::Refused(r)) => {
            assert_eq!(r.reason, baton_client::RefusalReason::FormatPending);
            assert_eq!((r.data_format, r.nodes.as_slice()), (8, &[silent][..]));
            assert!(r.message.contains("revoke --now"), "{}", r.message);
        }
        other => panic!("expected a format_pending refusal: {other:?}"),
    }
    // So are posting a task and claiming the next one (format 9): the post is not made.
    let posted = client
        .post(
            "tasks/u3",
            baton_client::RecordPatch::default(),
            None,
            "lead",
            false,
        )
        .await;
    let next = client
        .claim_next(
            "tasks/",
            "worker",
            Duration::from_secs(30),
            &baton_client::NextFilter::default(),
        )
        .await;
    for answer in [posted.map(|_| ()), next.map(|_| ())] {
        match answer {
            Err(Error::Refused(r)) => {
                assert_eq!(r.reason, baton_client::RefusalReason::FormatPending);
                assert_eq!((r.data_format, r.nodes.as_slice()), (9, &[silent][..]));
            }
            other => panic!("expected a format_pending refusal: {other:?}"),
        }
    }
    let view = client
        .record("tasks/u3", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        view.record,
        baton_client::Record::default(),
        "a refused post made nothing"
    );
    // So is a claim of a set (format 10): none of its keys is granted.
    format_pending(
        client
            .claim_set(&["sets/u4", "sets/u5"], "worker", Duration::from_secs(30))
            .await,
        10,
        silent,
    );
    for key in ["sets/u4", "sets/u5"] {
        let probe = client.probe(key, ReadMode::Linearizable).await.unwrap();
        assert_eq!(probe.lease, None, "a refused set granted {key}");
    }
    // So is waiting in line (format 11): the key is not granted, no one is put in line.
    format_pending(
        client
            .wait_once("sets/u4", "worker", Duration::from_secs(30))
            .await,
        11,
        silent,
    );
    let probe = client
        .probe("sets/u4", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        (probe.lease, probe.line),
        (None, None),
        "a refused wait did something"
    );
    // So is a claim of one of a key's permits (format 12): no permit is granted.
    format_pending(
        client
            .claim_permit("sets/u6", "worker", Duration::from_secs(30), 3)
            .await,
        12,
        silent,
    );
    let probe = client
        .probe("sets/u6", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        (probe.lease, probe.permits),
        (None, None),
        "a refused permit claim granted one"
    );
    // So is a shared claim (format 13): the key is not shared.
    format_pending(
        client
            .claim_shared("sets/u7", "reader", Duration::from_secs(30))
            .await,
        13,
        silent,
    );
    let probe = client
        .probe("sets/u7", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        (probe.lease, probe.permits),
        (None, None),
        "a refused shared claim shared the key"
    );
    // So is waiting in line for a permit (format 13): no one is put in line.
    let waited = client.wait_permit_once("sets/u7", "reader", Duration::from_secs(30), 2);
    format_pending(waited.await, 13, silent);
    let probe = client
        .probe("sets/u7", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        (probe.lease, probe.line),
        (None, None),
        "a refused wait for a permit did something"
    );
    let now = client.revoke_with("tasks/u2", "stuck", true).await.unwrap();
    assert!(now.revoked.is_some() && now.claimable_in.is_zero());
    let view = client
        .record("tasks/u1", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        view.record.assigned_to.as_ref().map(|a| a.to.as_str()),
        Some("claude@a"),
        "a refused clear changed nothing"
    );
    // The silent node comes back and answers the leader: the clear goes through.
    cluster.start_node(silent);
    let deadline = Instant::now() + Duration::from_secs(20);
    let record = loop {
        match client.unassign("tasks/u1", "lead", "done elsewhere").await {
            Ok(answer) => break answer.record,
            Err(Error::Refused(r)) if Instant::now() < deadline => {
                assert_eq!(r.reason, baton_client::RefusalReason::FormatPending);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the clear did not go through: {e}"),
        }
    };
    assert!(record.assigned_to.is_none());
    // Every node applies it, the silent one included.
    for id in [1, 2, 3] {
        let node = cluster.client_of(id).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let view = node.record("tasks/u1", ReadMode::Stale).await.unwrap();
            if view.record.assigned_to.is_none() {
                break;
            }
            assert!(Instant::now() < deadline, "node {id} never cleared it");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let history = node.history("tasks/u1", ReadMode::Stale).await.unwrap();
        let kinds: Vec<&str> = history.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["assigned", "unassigned"], "node {id}");
    }
}

/// A member that said its data format and then went down stays known to read it when the
/// leader changes: a follower never talks to the other followers, but a leader passes on
/// what each said (`peer_formats` in Raft messages). Here a follower goes down, then the
/// leader restarts; whichever of the two running nodes leads next, a command of the newest
/// formats goes through with the member still down (before, it was refused `format_pending`
/// until the member came back: a one-node outage and a failover took every newer command
/// away); and still after both running nodes restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_down_through_a_failover_keeps_the_format_it_said() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let first = cluster.leader(Duration::from_secs(10)).await;
    let client = cluster.client().await;
    granted(
        client
            .claim("formats/a", "worker", Duration::from_secs(30))
            .await
            .unwrap(),
    );
    let down = *cluster.running().iter().find(|id| **id != first).unwrap();
    cluster.kill(down);
    cluster.kill(first);
    cluster.start_node(first);
    let leader = cluster.leader(Duration::from_secs(20)).await;
    assert_ne!(leader, down);
    // A wait in line (format 11) behind the holder, and a shared claim (format 13).
    match client
        .wait_once("formats/a", "next", Duration::from_secs(30))
        .await
    {
        Ok(LineOutcome::InLine(place)) => assert_eq!(place.position, 1, "{place:?}"),
        other => panic!("expected a place in line with node {down} down: {other:?}"),
    }
    match client
        .claim_shared("formats/b", "reader", Duration::from_secs(30))
        .await
    {
        Ok(ClaimOutcome::Granted(_)) => {}
        other => panic!("expected a shared grant with node {down} down: {other:?}"),
    }
    let probe = client
        .probe("formats/a", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(probe.line.map(|l| l.waiters), Some(1), "one in line");
    // Both running nodes restart, the member still down: each kept what it knew
    // (`peer-formats.json`), so a newer command still goes through.
    for id in cluster.running() {
        cluster.kill(id);
    }
    for id in [1, 2, 3].into_iter().filter(|id| *id != down) {
        cluster.start_node(id);
    }
    cluster.leader(Duration::from_secs(20)).await;
    match client
        .claim_shared("formats/c", "reader", Duration::from_secs(30))
        .await
    {
        Ok(ClaimOutcome::Granted(_)) => {}
        other => panic!("expected a shared grant after the restarts: {other:?}"),
    }
}

/// A write that would change nothing (a claim of a key another session holds; a renew,
/// release or update with a dead token or from another session) is answered by the leader
/// from a linearizable read: no log entry, no fsync. The answers still name the
/// real holder, and a write that changes something still goes through the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_answered_without_a_log_entry_and_name_the_holder() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let (entries, counted, alice, bob, grant) = refuse_33_writes(&cluster).await;
    assert_eq!(entries, 0, "33 refusals wrote {entries} log entries");
    assert!(counted >= 33, "{counted}");
    let admin = cluster
        .client_of(cluster.leader(Duration::from_secs(10)).await)
        .await;
    let after = admin.cluster_status().await.unwrap().applied_index;
    // A real change still goes through the log: the release, then Bob's grant.
    match alice.release("tasks/hot", grant.lease.token).await.unwrap() {
        ReleaseOutcome::Released(_) => {}
        other => panic!("{other:?}"),
    }
    let bobs = granted(bob.claim("tasks/hot", "bob", TTL).await.unwrap());
    assert!(bobs.lease.token > grant.lease.token);
    let later = admin.cluster_status().await.unwrap().applied_index;
    assert!(later > after, "the release and the grant were log entries");
}

/// Claims of a free key arriving at once: exactly one goes into the log and wins; the
/// others wait for it (a read) and are refused naming the winner, spending no revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_a_free_key_arriving_at_once_spend_one_revision() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(cluster.client_of(leader).await);
    }
    let before = clients[0]
        .probe("tasks/free", ReadMode::Linearizable)
        .await
        .unwrap()
        .revision;
    let claims = clients
        .iter()
        .enumerate()
        .map(|(i, c)| async move { c.claim("tasks/free", &format!("w{i}"), TTL).await });
    let outcomes = futures::future::join_all(claims).await;
    let mut winners = Vec::new();
    let mut named = BTreeSet::new();
    for outcome in outcomes {
        match outcome.unwrap() {
            ClaimOutcome::Granted(g) => winners.push(g.lease),
            ClaimOutcome::Held { lease, .. } => {
                named.insert((lease.holder_name, lease.token));
            }
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let winner = (winners[0].holder_name.clone(), winners[0].token);
    assert_eq!(
        named,
        BTreeSet::from([winner]),
        "every loser names the winner"
    );
    let after = clients[0]
        .probe("tasks/free", ReadMode::Linearizable)
        .await
        .unwrap()
        .revision;
    assert_eq!(after, before + 1, "only the grant spent a revision");
}

/// `--refusals-in-log` restores the old way: every refusal is a log entry, with the same
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_refusals_in_log_every_refusal_is_a_log_entry() {
    let _serial = serial().await;
    let cluster =
        Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0", "--refusals-in-log"]).await;
    let (entries, counted, ..) = refuse_33_writes(&cluster).await;
    assert!(
        entries >= 33,
        "33 refusals wrote only {entries} log entries"
    );
    assert_eq!(counted, 0);
}

/// Alice claims `tasks/hot`; Bob's 30 claims of it, his renew and update with her token and
/// her release with a dead token are refused, each answer naming Alice. The log entries
/// those 33 refusals wrote, the leader's `baton_refused_without_log_total`, both clients
/// and Alice's grant.
async fn refuse_33_writes(
    cluster: &Cluster,
) -> (
    u64,
    u64,
    baton_client::Client,
    baton_client::Client,
    baton_client::Grant,
) {
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let alice = cluster.client().await;
    let bob = cluster.client().await;
    let grant = granted(alice.claim("tasks/hot", "alice", TTL).await.unwrap());
    let admin = cluster.client_of(leader).await;
    let before = admin.cluster_status().await.unwrap().applied_index;
    for _ in 0..30 {
        match bob.claim("tasks/hot", "bob", TTL).await.unwrap() {
            ClaimOutcome::Held { lease, .. } => {
                assert_eq!(
                    (lease.holder_name.as_str(), lease.token),
                    ("alice", grant.lease.token)
                );
            }
            other => panic!("bob won a held key: {other:?}"),
        }
    }
    // Alice's token from Bob's session, and a dead token: refused.
    assert!(matches!(
        bob.renew("tasks/hot", grant.lease.token).await,
        Err(Error::Refused(_))
    ));
    match alice
        .release("tasks/hot", grant.lease.token + 1)
        .await
        .unwrap()
    {
        ReleaseOutcome::Lost { current } => {
            assert_eq!(current.unwrap().token, grant.lease.token)
        }
        other => panic!("{other:?}"),
    }
    let patch = baton_client::RecordPatch {
        status: Some("stolen".into()),
        ..Default::default()
    };
    assert!(matches!(
        bob.update("tasks/hot", grant.lease.token, patch).await,
        Err(Error::Refused(_))
    ));
    let after = admin.cluster_status().await.unwrap().applied_index;
    let (code, metrics) = http_get(&admin_addr(cluster, leader).await, "/metrics").await;
    assert_eq!(code, 200);
    let counted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("baton_refused_without_log_total "))
        .expect("the metric")
        .trim()
        .parse()
        .unwrap();
    (after - before, counted, alice, bob, grant)
}

/// A claim refused from a read is not remembered, so it may be answered that way only when
/// no other copy of its request id can arrive later: on the client's first attempt (the
/// `x-baton-first-attempt` header). A retry goes through the log and its refusal is
/// remembered, so a late copy of the first attempt, reaching the leader once the key is
/// free, gets that answer instead of a grant its client never hears of. (The chaos suite's
/// `skew` scenario, seed 426017, found such a grant: a first attempt delayed about 3 s
/// behind a client partition was granted after its retry had been answered "held".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_refused_claim_gets_the_refusal_not_a_grant() {
    use baton_proto::v1 as pb;
    use baton_proto::v1::baton_client::BatonClient;
    let _serial = serial().await;
    let cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let alice = cluster.client().await;
    let admin = cluster.client_of(leader).await;
    let mut raw = BatonClient::connect(format!("http://{}", cluster.nodes[&leader].addr))
        .await
        .unwrap();
    let bobs_claim = |key: &str, seq: u64, first_attempt: bool| {
        let mut req = tonic::Request::new(pb::ClaimRequest {
            permits: 0,
            shared: false,
            key: key.into(),
            holder: Some(pb::Holder {
                name: "bob".into(),
                client_id: "bob-session".into(),
            }),
            ttl_ms: TTL.as_millis() as u64,
            request_id: Some(pb::RequestId {
                client_id: "bob-slots".into(),
                seq,
                session: "bob-session".into(),
            }),
        });
        if first_attempt {
            req.metadata_mut().insert(
                baton_proto::FIRST_ATTEMPT_METADATA_KEY,
                tonic::metadata::MetadataValue::from_static("1"),
            );
        }
        req
    };
    let held_by = |answer: pb::ClaimResponse| match answer.outcome {
        Some(pb::claim_response::Outcome::Held(h)) => h.lease.unwrap().token,
        other => panic!("expected held, got {other:?}"),
    };

    // A first attempt is answered from a read: no log entry.
    let first = granted(alice.claim("tasks/a", "alice", TTL).await.unwrap());
    let before = admin.cluster_status().await.unwrap().applied_index;
    let answer = raw.claim(bobs_claim("tasks/a", 1, true)).await.unwrap();
    assert_eq!(held_by(answer.into_inner()), first.lease.token);
    let after = admin.cluster_status().await.unwrap().applied_index;
    assert_eq!(after, before, "a first attempt's refusal wrote a log entry");

    // A retry (no header) of another request goes through the log...
    let second = granted(alice.claim("tasks/b", "alice", TTL).await.unwrap());
    let before = admin.cluster_status().await.unwrap().applied_index;
    let answer = raw.claim(bobs_claim("tasks/b", 2, false)).await.unwrap();
    assert_eq!(held_by(answer.into_inner()), second.lease.token);
    let after = admin.cluster_status().await.unwrap().applied_index;
    assert!(after > before, "a retry's refusal must be a log entry");
    // ...so once the key is free, a late copy of its first attempt gets the same refusal.
    let late = bobs_claim("tasks/b", 2, true);
    freed_then_copy_refused(&alice, &mut raw, "tasks/b", second.lease.token, late).await;

    // Two copies of one first attempt, headers and all (a proxy's or a gRPC retry policy's
    // replay; found by the chaos suite, BUGS.md): the first is refused from a read, the key is freed, and
    // the second gets the same refusal, not a grant its client never hears of.
    let third = granted(alice.claim("tasks/c", "alice", TTL).await.unwrap());
    let answer = raw.claim(bobs_claim("tasks/c", 3, true)).await.unwrap();
    assert_eq!(held_by(answer.into_inner()), third.lease.token);
    let copy = bobs_claim("tasks/c", 3, true);
    freed_then_copy_refused(&alice, &mut raw, "tasks/c", third.lease.token, copy).await;

    // A claim of a permit is a claim too (the chaos suite's `permits` checker, `skew` seed
    // 456088, found a permit granted to a client told "held"): its retry goes through the
    // log, and a late copy of its first attempt gets the retry's refusal, not a permit.
    let fourth = granted(alice.claim("tasks/d", "alice", TTL).await.unwrap());
    let permit_claim = |first_attempt: bool| {
        let mut req = bobs_claim("tasks/d", 4, first_attempt);
        req.get_mut().permits = 2;
        req
    };
    let before = admin.cluster_status().await.unwrap().applied_index;
    let answer = raw.claim(permit_claim(false)).await.unwrap();
    assert_eq!(held_by(answer.into_inner()), fourth.lease.token);
    let after = admin.cluster_status().await.unwrap().applied_index;
    assert!(
        after > before,
        "a permit claim's retried refusal must be a log entry"
    );
    freed_then_copy_refused(
        &alice,
        &mut raw,
        "tasks/d",
        fourth.lease.token,
        permit_claim(true),
    )
    .await;
}

/// Alice releases `key` (her grant `token`), then `copy` (a copy of a claim refused while she
/// held it) is sent: it must get that refusal again, naming `token`, and grant nothing.
async fn freed_then_copy_refused(
    alice: &baton_client::Client,
    raw: &mut baton_proto::v1::baton_client::BatonClient<tonic::transport::Channel>,
    key: &str,
    token: u64,
    copy: tonic::Request<baton_proto::v1::ClaimRequest>,
) {
    use baton_proto::v1::claim_response::Outcome;
    match alice.release(key, token).await.unwrap() {
        ReleaseOutcome::Released(_) => {}
        other => panic!("{other:?}"),
    }
    match raw.claim(copy).await.unwrap().into_inner().outcome {
        Some(Outcome::Held(h)) => assert_eq!(h.lease.unwrap().token, token),
        other => panic!("the copy got {other:?}, not the refusal"),
    }
    let probe = alice.probe(key, ReadMode::Linearizable).await.unwrap();
    assert!(probe.lease.is_none(), "the copy was granted: {probe:?}");
}

/// A write sent to a follower that knows the leader is forwarded before it is decided: the
/// follower proposes nothing (deciding it there took a proposer round only to be told
/// NotLeader by Raft), and the client's answers are the leader's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_forwards_writes_at_once_and_proposes_nothing() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    // The follower knows the leader once it has heard from it.
    let (leader, follower, pinned) = pinned_to_a_follower(&cluster).await;
    let proposed = |id: u64| {
        let cluster = &cluster;
        async move {
            let (_, metrics) = http_get(&admin_addr(cluster, id).await, "/metrics").await;
            metrics
                .lines()
                .find_map(|l| l.strip_prefix("baton_proposals_total "))
                .expect("the proposals metric")
                .trim()
                .parse::<u64>()
                .unwrap()
        }
    };
    let leader_before = proposed(leader).await;
    for i in 0..20 {
        let g = granted(
            pinned
                .claim(&format!("fwd/{i}"), "agent", TTL)
                .await
                .unwrap(),
        );
        pinned
            .release(&format!("fwd/{i}"), g.lease.token)
            .await
            .unwrap();
    }
    assert_eq!(proposed(follower).await, 0, "the follower proposed entries");
    assert!(
        proposed(leader).await > leader_before,
        "the leader wrote the 40 writes"
    );
}

/// Leases that come due together are expired in shared log entries (up to
/// `PROPOSAL_COMMANDS_MAX` commands each), as the proposer batches clients' writes: 300
/// leases claimed at once and never renewed take far fewer than 300 entries to free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_that_come_due_together_expire_in_shared_entries() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let admin = cluster.client_of(leader).await;
    let mut claimants = Vec::new();
    for c in 0..10 {
        let client = cluster.client().await;
        claimants.push(tokio::spawn(async move {
            for i in 0..30 {
                let key = format!("due/{c}-{i}");
                granted(
                    client
                        .claim(&key, "short", Duration::from_secs(2))
                        .await
                        .unwrap(),
                );
            }
        }));
    }
    for c in claimants {
        c.await.unwrap();
    }
    let before = admin.cluster_status().await.unwrap().applied_index;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let board = admin
            .board("due/", 1000, "", ReadMode::Linearizable)
            .await
            .unwrap();
        if board.leases.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} leases still held 30 s on",
            board.leases.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let entries = admin.cluster_status().await.unwrap().applied_index - before;
    assert!(
        entries <= 60,
        "300 expiries took {entries} log entries (one each before they were batched)"
    );
}

/// A default revoke of a key held by permits holds it back for the longest of the revoked
/// holders' TTLs, and says so: `claimable_in` once named the first holder's TTL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_of_permits_says_the_longest_hold_it_set() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let (short, long) = (cluster.client().await, cluster.client().await);
    let first = short
        .claim_permit("permits/r", "short", Duration::from_secs(5), 3u32)
        .await
        .unwrap();
    let second = long
        .claim_permit("permits/r", "long", Duration::from_secs(40), 3u32)
        .await
        .unwrap();
    assert!(granted(first).lease.token < granted(second).lease.token);
    let operator = cluster.client().await;
    let revoked = operator
        .revoke_with("permits/r", "maintenance", false)
        .await
        .unwrap();
    assert_eq!(revoked.claimable_in, Duration::from_secs(40), "{revoked:?}");
}
