//! The HTTP admin port of real node processes: `/healthz`, `/readyz`, `/metrics`.

mod common;

use std::time::{Duration, Instant};

use common::{admin_addr, http_get as get, serial, Cluster};

/// The value of the sample line `name` (no labels) in a metrics text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Waits up to 5 s for the metric `name` at `addr` to read `want`.
async fn wait_for_sample(addr: &str, name: &str, want: f64, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while sample(&get(addr, "/metrics").await.1, name) != Some(want) {
        assert!(Instant::now() < deadline, "{why}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics_follow_the_cluster() {
    let _serial = serial().await;
    let mut cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let leader = cluster.leader(Duration::from_secs(20)).await;
    let mut admin = std::collections::BTreeMap::new();
    for id in 1..=3 {
        admin.insert(id, admin_addr(&cluster, id).await);
    }
    let client = cluster.client().await;
    let grant = client
        .claim("admin/k", "agent", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(grant, baton_client::ClaimOutcome::Granted(_)));
    let other = cluster.client().await;
    let refused = other
        .claim("admin/k", "someone-else", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(refused, baton_client::ClaimOutcome::Held { .. }));

    for (id, addr) in &admin {
        assert_eq!(
            get(addr, "/healthz").await,
            (200, "ok\n".into()),
            "node {id}"
        );
        let (code, body) = get(addr, "/readyz").await;
        assert_eq!((code, body.as_str()), (200, "ready\n"), "node {id}");
    }
    // The leader's metrics: Raft state, the held lease, its proposals and flushes.
    let (code, text) = get(&admin[&leader], "/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(sample(&text, "baton_raft_is_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "baton_raft_leader_id"), Some(leader as f64));
    assert!(sample(&text, "baton_raft_term").unwrap() >= 1.0);
    assert_eq!(sample(&text, "baton_leases_held"), Some(1.0), "{text}");
    assert!(
        sample(&text, "baton_proposals_total").unwrap() >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, "baton_flush_seconds_count").unwrap() >= 1.0,
        "{text}"
    );
    assert!(
        text.contains("baton_raft_replication_lag_entries{follower="),
        "the leader reports each follower's lag: {text}"
    );
    assert!(
        text.contains("baton_claims_total{outcome=\"granted\"} 1\n")
            && text.contains("baton_claims_total{outcome=\"held\"} 1\n"),
        "one claim granted, one refused: {text}"
    );
    assert!(
        text.contains("baton_grpc_requests_total{method=\"claim\",code=\"Ok\"}"),
        "requests counted by method and code: {text}"
    );
    assert!(
        text.contains("baton_events_total{kind=\"claimed\"} 1\n"),
        "applied events counted by kind: {text}"
    );
    assert!(
        sample(&text, "baton_fsync_seconds_count").unwrap() >= 1.0,
        "{text}"
    );
    // A watch stream is counted while it is open.
    let watching = cluster.client_of(leader).await;
    let mut stream = watching.watch("admin/", 0);
    let reader = tokio::spawn(async move {
        use futures::StreamExt;
        while stream.next().await.is_some() {}
    });
    wait_for_sample(
        &admin[&leader],
        "baton_watch_streams",
        1.0,
        "the open watch stream was not counted",
    )
    .await;
    reader.abort();
    wait_for_sample(
        &admin[&leader],
        "baton_watch_streams",
        0.0,
        "a closed watch stream stayed counted",
    )
    .await;
    // Every metric the Grafana dashboard queries is one the leader exports.
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/baton.json"),
    )
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("baton_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                queried.insert(name);
            }
        }
    }
    assert!(queried.len() >= 10, "the dashboard queries {queried:?}");
    for name in &queried {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{"))),
            "the dashboard queries {name}, which the node does not export"
        );
    }
    // A follower applied the claim too, and knows who leads.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = get(&admin[&follower], "/metrics").await;
        if sample(&text, "baton_leases_held") == Some(1.0) {
            assert_eq!(sample(&text, "baton_raft_is_leader"), Some(0.0));
            assert_eq!(sample(&text, "baton_raft_leader_id"), Some(leader as f64));
            break;
        }
        assert!(Instant::now() < deadline, "follower never applied: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Alone, a node loses its leader: not ready, still healthy.
    let others: Vec<u64> = (1..=3).filter(|id| *id != follower).collect();
    for id in others {
        cluster.kill(id);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (code, body) = get(&admin[&follower], "/readyz").await;
        if code == 503 {
            assert!(body.contains("no known leader"), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a node without a quorum stayed ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(get(&admin[&follower], "/healthz").await.0, 200);

    // `baton-node health`, the container image's health check, says the same by exit code.
    let health = |extra: &[&str]| {
        let out = std::process::Command::new(common::node_bin())
            .arg("health")
            .args(extra)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, out, err) = health(&["--admin", &admin[&follower]]);
    assert_eq!((code, out.as_str()), (Some(0), "ok\n"), "{err}");
    let (code, out, err) = health(&["--admin", &admin[&follower], "--ready"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("no known leader"), "{out}");
    assert!(err.contains("answered 503"), "{err}");
    let port = admin[&follower].rsplit_once(':').unwrap().1.to_string();
    let (code, _, _) = health(&["--admin", &format!("0.0.0.0:{port}")]);
    assert_eq!(code, Some(0), "0.0.0.0, as a node listens, means this host");
    cluster.kill(follower);
    let (code, _, err) = health(&["--admin", &admin[&follower]]);
    assert_eq!(code, Some(1));
    assert!(err.contains("connecting to the admin port"), "{err}");
}

/// Waits up to `within` for `/readyz` at `addr` to answer `code`; the last body.
async fn wait_ready_code(addr: &str, code: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (got, body) = get(addr, "/readyz").await;
        if got == code {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz still {got} after {within:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A leader whose followers stop answering (here SIGSTOP; a plain partition does the same)
/// still believes it leads: openraft 0.9 does not step down. It must not say it is ready
/// (BUGS.md: readiness counted only TLS failures as unreachable), and says so
/// again once they answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_reaches_no_majority_is_not_ready() {
    let _serial = serial().await;
    let cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let leader = cluster.leader(Duration::from_secs(20)).await;
    let addr = admin_addr(&cluster, leader).await;
    wait_ready_code(&addr, 200, Duration::from_secs(10)).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &followers {
        cluster.signal(*id, "STOP");
    }
    let body = wait_ready_code(&addr, 503, Duration::from_secs(10)).await;
    assert!(body.contains("not heard from a majority"), "{body}");
    for id in &followers {
        cluster.signal(*id, "CONT");
    }
    wait_ready_code(
        &admin_addr(&cluster, leader).await,
        200,
        Duration::from_secs(15),
    )
    .await;
}
