//! Watches across a real 3-node cluster: a watcher resumes after the node it was streaming
//! from is killed, and sees every event exactly once, in revision order.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Client, ClientConfig, ReadMode, RecordPatch, ReleaseOutcome};
use common::{serial, Cluster};
use futures::StreamExt;

const TTL: Duration = Duration::from_secs(30);

async fn cycle(client: &Client, key: &str, holder: &str) {
    let ClaimOutcome::Granted(g) = client.claim(key, holder, TTL).await.unwrap() else {
        panic!("{key} is held");
    };
    let patch = RecordPatch {
        status: Some("in_progress".into()),
        ..RecordPatch::default()
    };
    client.update(key, g.lease.token, patch).await.unwrap();
    let released = client.release(key, g.lease.token).await.unwrap();
    assert!(matches!(released, ReleaseOutcome::Released(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_across_a_leader_kill_without_gaps_or_repeats() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let writer = cluster.client().await;
    // The watcher streams from the leader first, so killing it breaks the stream.
    let first = cluster.nodes[&leader].addr.clone();
    let mut endpoints = vec![first.clone()];
    endpoints.extend(cluster.endpoints().into_iter().filter(|e| *e != first));
    let watcher = Client::connect(ClientConfig {
        endpoints,
        retry_deadline: Duration::from_secs(20),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let start = writer
        .board("", 0, "", ReadMode::Linearizable)
        .await
        .unwrap()
        .revision
        + 1;
    let mut stream = watcher.watch("tasks/w/", start);
    let collector = tokio::spawn(async move {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(30), stream.next()).await {
                Ok(Some(Ok(event))) => {
                    let done = event.key == "tasks/w/zz-end";
                    seen.push((event.key.clone(), event.revision));
                    if done {
                        break;
                    }
                }
                other => panic!("watch ended early: {other:?}; seen {seen:?}"),
            }
        }
        seen
    });

    for i in 0..5 {
        cycle(&writer, &format!("tasks/w/{i}"), "before").await;
    }
    cycle(&writer, "other/not-watched", "noise").await;
    cluster.kill(leader);
    for i in 5..10 {
        cycle(&writer, &format!("tasks/w/{i}"), "after").await;
    }
    let ClaimOutcome::Granted(_) = writer.claim("tasks/w/zz-end", "end", TTL).await.unwrap() else {
        panic!("end marker held");
    };

    let seen = collector.await.unwrap();
    let revisions: Vec<u64> = seen.iter().map(|(_, r)| *r).collect();
    assert!(
        revisions.windows(2).all(|w| w[0] < w[1]),
        "revision order, no repeats: {revisions:?}"
    );
    // Every event of every watched key is there: compare with the keys' histories.
    let mut expected = BTreeSet::new();
    for i in (0..10)
        .map(|i| format!("tasks/w/{i}"))
        .chain(["tasks/w/zz-end".to_string()])
    {
        for e in writer
            .history(&i, ReadMode::Linearizable)
            .await
            .unwrap()
            .events
        {
            expected.insert((i.clone(), e.revision));
        }
    }
    assert_eq!(
        expected.len(),
        10 * 3 + 1,
        "claimed, updated, released per key + the end marker"
    );
    let got: BTreeSet<(String, u64)> = seen.into_iter().collect();
    assert_eq!(got, expected, "no gaps across the leader kill");
    assert!(got.iter().all(|(k, _)| k.starts_with("tasks/w/")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_is_kept_inside_the_window_by_progress_markers() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(1, &["--watch-window-events", "10"]).await;
    let client = cluster.client().await;
    let start = client
        .board("", 0, "", ReadMode::Linearizable)
        .await
        .unwrap()
        .revision
        + 1;
    let mut quiet = client.watch("quiet/", start);
    // Open the stream (it connects on first poll) before the cluster gets busy.
    let opened = tokio::time::timeout(Duration::from_millis(500), quiet.next()).await;
    assert!(opened.is_err(), "nothing to see yet: {opened:?}");
    // Far more events elsewhere than the window holds.
    for i in 0..10 {
        cycle(&client, &format!("busy/{i}"), "busy").await;
    }
    // No event of its own arrives, but the stream learns how far it is.
    let waited = tokio::time::timeout(Duration::from_millis(2_500), quiet.next()).await;
    assert!(waited.is_err(), "no quiet/ event exists: {waited:?}");
    let resume = quiet.next_revision();
    assert!(
        resume > start + 20,
        "progress moved the resume point: {start} -> {resume}"
    );
    drop(quiet);
    // Resuming from there is inside the window; from the start it would be compacted.
    let mut resumed = client.watch("quiet/", resume);
    let ClaimOutcome::Granted(g) = client.claim("quiet/1", "q", TTL).await.unwrap() else {
        panic!("held");
    };
    let event = tokio::time::timeout(Duration::from_secs(10), resumed.next())
        .await
        .expect("the quiet event arrives")
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.key.as_str(), event.revision),
        ("quiet/1", g.lease.token)
    );
    let mut stale = client.watch("quiet/", start);
    let compacted = tokio::time::timeout(Duration::from_secs(10), stale.next())
        .await
        .unwrap();
    assert!(
        matches!(compacted, Some(Err(baton_client::Error::Compacted { .. }))),
        "{compacted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_revision_the_cluster_never_reached_is_refused_not_held_open() {
    use baton_proto::v1::{baton_client::BatonClient, WatchRequest};
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    cycle(&client, "future/a", "h").await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let watch_from = |id: u64, from_revision: u64| {
        let addr = cluster.nodes[&id].addr.clone();
        async move {
            let mut raw = BatonClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            raw.watch(WatchRequest {
                prefix: String::new(),
                from_revision,
            })
            .await
            .map(|_| ())
        }
    };
    // The leader knows the revision 1,000,000 was never produced: bad input, at once.
    let status = watch_from(leader, 1_000_000).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("beyond the cluster's revision"),
        "{}",
        status.message()
    );
    // A follower may only be behind: it waits a moment, then says so; it never holds the
    // watch open for a revision that may never come.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), watch_from(follower, 1_000_000))
        .await
        .expect("the follower answered")
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    // The next revision is fine, on either.
    let next = client
        .probe("future/a", ReadMode::Linearizable)
        .await
        .unwrap()
        .revision
        + 1;
    assert!(watch_from(leader, next).await.is_ok());
}
