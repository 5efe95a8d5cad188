//! The per-client limits of a real node: connections, watch streams per client
//! address, writes per second per client id. Each refusal leaves others unaffected. And the
//! bound on the node's runtime threads.

mod common;

use std::time::{Duration, Instant};

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use common::{serial, Cluster};
use tokio::io::AsyncReadExt;

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_closes_connections_past_its_limit_and_serves_again_when_one_closes() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(1, &["--connections-max", "3"]).await;
    let addr = cluster.nodes[&1].addr.clone();
    // Let the harness's own connections close.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The fourth is closed at once: its read ends (EOF or reset) instead of waiting.
    let mut fourth = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(3), fourth.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "a connection past the limit stayed open: {read:?}"
    );
    // One held connection closes: a client is served again.
    held.pop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let client = cluster.client_of(1).await;
    let claimed = client.claim("limits/conn", "agent", TTL).await;
    assert!(claimed.is_ok(), "{claimed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_per_address_and_writes_per_client_are_limited() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(
        1,
        &[
            "--watches-per-address-max",
            "2",
            "--client-writes-per-second",
            "5",
        ],
    )
    .await;
    let url = format!("http://{}", cluster.nodes[&1].addr);
    let mut raw = BatonClient::connect(url.clone()).await.unwrap();
    let watch = |prefix: &str| pb::WatchRequest {
        prefix: prefix.into(),
        from_revision: 0,
    };
    let first = raw.watch(watch("a/")).await.unwrap();
    let _second = raw.watch(watch("b/")).await.unwrap();
    let third = raw.watch(watch("c/")).await.unwrap_err();
    assert_eq!(third.code(), tonic::Code::ResourceExhausted);
    assert!(
        third.message().contains("watches_per_address_max"),
        "{}",
        third.message()
    );
    // A closed stream frees its slot.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match raw.watch(watch("d/")).await {
            Ok(_) => break,
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                assert!(Instant::now() < deadline, "a closed watch kept its slot");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("{s}"),
        }
    }

    // One client writing fast gets its burst, then RESOURCE_EXHAUSTED; another is served.
    let fast = cluster.client_of(1).await;
    let (mut ok, mut limited) = (0, 0);
    for i in 0..30 {
        match fast.claim(&format!("limits/w{i}"), "fast", TTL).await {
            Ok(_) => ok += 1,
            Err(e) => {
                let text = e.to_string();
                assert!(text.contains("client_writes_per_second"), "{text}");
                limited += 1;
            }
        }
    }
    assert!(limited > 0, "30 writes at once were all allowed at 5/s");
    assert!(
        (5..=10).contains(&ok),
        "{ok} writes allowed at 5/s with a burst of 5"
    );
    let other = cluster.client_of(1).await;
    let claimed = other.claim("limits/other", "calm", TTL).await;
    assert!(claimed.is_ok(), "{claimed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_its_stream_limit_waits_and_others_are_served() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(1, &["--streams-per-connection-max", "1"]).await;
    let url = format!("http://{}", cluster.nodes[&1].addr);
    // One connection: a watch holds its only stream.
    let channel = tonic::transport::Endpoint::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut node = BatonClient::new(channel);
    let watch = node
        .watch(pb::WatchRequest {
            prefix: "streams/".into(),
            from_revision: 0,
        })
        .await
        .unwrap();
    let probe = || pb::ProbeRequest {
        key: "streams/a".into(),
        stale: true,
    };
    // A second request on that connection waits for the stream to end.
    let waited = tokio::time::timeout(Duration::from_secs(1), node.probe(probe())).await;
    assert!(waited.is_err(), "a second stream was served: {waited:?}");
    // Another connection is served meanwhile.
    let mut other = BatonClient::connect(url).await.unwrap();
    assert!(other.probe(probe()).await.is_ok());
    // The watch ends: the first connection is served again.
    drop(watch);
    let served = tokio::time::timeout(Duration::from_secs(5), node.probe(probe())).await;
    assert!(matches!(served, Ok(Ok(_))), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_is_limited_over_all_its_client_ids_and_others_are_not() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let (a, b) = (
        common::new_token(&file, "agent-a"),
        common::new_token(&file, "agent-b"),
    );
    let args = [
        "--auth-tokens",
        file.to_str().unwrap(),
        "--principal-writes-per-second",
        "2",
    ];
    let cluster = Cluster::start_with_token(1, &args, &b).await;
    let as_principal = |t: &str| {
        let config = baton_client::ClientConfig {
            endpoints: cluster.endpoints(),
            retry_deadline: Duration::from_secs(5),
            token: Some(baton_client::BearerToken(t.to_owned())),
            ..baton_client::ClientConfig::default()
        };
        async move { baton_client::Client::connect(config).await.unwrap() }
    };
    // Two processes (client ids) of agent-a share one bucket of 2 (refilled at 2 a second:
    // 10 writes within 4 s cannot all pass).
    let (a1, a2) = (as_principal(&a).await, as_principal(&a).await);
    let mut refused = 0;
    for i in 0..10 {
        let client = if i % 2 == 0 { &a1 } else { &a2 };
        match client.claim(&format!("pr/{i}"), "agent-a", TTL).await {
            Ok(_) => {}
            Err(baton_client::Error::Other { code, message }) => {
                assert_eq!(code, tonic::Code::ResourceExhausted, "{message}");
                assert!(message.contains("principal_writes_per_second"), "{message}");
                refused += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        refused >= 1,
        "agent-a made 10 writes against a limit of 2 a second"
    );
    // Reads are not counted; another principal is not affected.
    assert!(a1
        .probe("pr/0", baton_client::ReadMode::Linearizable)
        .await
        .is_ok());
    let b1 = as_principal(&b).await;
    assert!(b1.claim("pr/b", "agent-b", TTL).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_threads_are_set_within_their_limit() {
    let _serial = serial().await;
    // Out of 1..=WORKER_THREADS_MAX: refused before the data dir is touched.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let max = baton_node::limits::WORKER_THREADS_MAX;
    for bad in [0, max + 1] {
        let out = std::process::Command::new(common::node_bin())
            .args(["--worker-threads", &bad.to_string(), "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", common::text(&out.stderr));
        assert!(
            common::text(&out.stderr)
                .contains(&format!("--worker-threads {bad}: must be 1 to {max}")),
            "{}",
            common::text(&out.stderr)
        );
        assert!(!data.exists(), "a refused start made {}", data.display());
    }
    // A cluster of one-thread nodes serves, and each node's runtime has that one thread.
    let cluster = Cluster::start_with(3, &["--worker-threads", "1"]).await;
    let client = cluster.client_of(1).await;
    let claimed = client.claim("limits/threads", "agent", TTL).await;
    assert!(claimed.is_ok(), "{claimed:?}");
    for node in cluster.nodes.values() {
        let log = std::fs::read_to_string(&node.log).unwrap();
        let serving = log
            .lines()
            .find(|line| line.contains("baton node serving"))
            .unwrap_or_else(|| panic!("node {} did not log its start: {log}", node.id));
        assert!(serving.contains("worker_threads=1"), "{serving}");
    }
}
