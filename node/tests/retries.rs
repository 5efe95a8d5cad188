//! Retries on a real 3-node cluster (data format 15): a retry acts once however many other
//! clients wrote between it and its first attempt. Requests go through the repo's own proto
//! (raw gRPC), as a client with lost answers sends them; a retry says so with
//! `x-baton-retry` (`baton_proto::RETRY_METADATA_KEY`), as the Rust and Python clients do.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_proto::v1 as pb;
use baton_proto::v1::baton_client::BatonClient;
use common::{serial, Cluster};
use futures::StreamExt;
use tonic::transport::Channel;

/// More distinct clients than the cluster remembers (`DEDUP_CLIENTS_MAX`, 10,000).
const CHURN_CLIENTS: usize = 10_100;

fn id(client: &str, seq: u64) -> Option<pb::RequestId> {
    Some(pb::RequestId {
        client_id: client.into(),
        seq,
        session: client.into(),
    })
}

fn claim(key: &str, client: &str, seq: u64) -> pb::ClaimRequest {
    pb::ClaimRequest {
        key: key.into(),
        holder: Some(pb::Holder {
            name: client.into(),
            client_id: client.into(),
        }),
        ttl_ms: 60_000,
        request_id: id(client, seq),
        ..Default::default()
    }
}

/// `msg` as an attempt after one that may have reached the cluster.
fn retry<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        baton_proto::RETRY_METADATA_KEY,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    req
}

async fn raw(cluster: &Cluster) -> BatonClient<Channel> {
    let leader = cluster.leader(Duration::from_secs(10)).await;
    BatonClient::connect(format!("http://{}", cluster.nodes[&leader].addr))
        .await
        .unwrap()
}

fn granted_token(answer: pb::ClaimResponse) -> u64 {
    match answer.outcome {
        Some(pb::claim_response::Outcome::Granted(g)) => g.lease.unwrap().token,
        other => panic!("expected a grant: {other:?}"),
    }
}

/// The run: an operator's `Revoke(K, now)` with request id (op, 1) revokes h1's
/// lease; 10,100 claims come from 10,100 other client ids; h2 claims K; the operator's client
/// resends (op, 1) as a retry whose first answer was lost. It revoked h2's lease ("revoked
/// token 10103"); now it is refused as too old to tell (UNKNOWN), and h2 keeps K.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_more_clients_than_the_cluster_remembers_is_refused_not_applied_again() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    let mut c = raw(&cluster).await;
    granted_token(c.claim(claim("k", "h1", 1)).await.unwrap().into_inner());
    let revoke = pb::RevokeRequest {
        key: "k".into(),
        reason: "h1 is stuck".into(),
        request_id: id("op", 1),
        now: true,
    };
    let first = c.revoke(revoke.clone()).await.unwrap().into_inner();
    assert!(first.revoked.is_some(), "{first:?}");
    let churn = futures::stream::iter(0..CHURN_CLIENTS)
        .map(|i| {
            let mut c = c.clone();
            async move {
                let client = format!("churn-{i}");
                c.claim(claim(&format!("churn/{i}"), &client, 1)).await
            }
        })
        .buffer_unordered(64);
    let answers: Vec<_> = churn.collect().await;
    assert!(
        answers.iter().all(Result::is_ok),
        "every churn claim answered"
    );
    let h2 = granted_token(c.claim(claim("k", "h2", 1)).await.unwrap().into_inner());
    let again = c.revoke(retry(revoke)).await.unwrap_err();
    assert_eq!(again.code(), tonic::Code::Unknown, "{again:?}");
    assert!(again.message().contains("retry too old"), "{again:?}");
    let probe = c
        .probe(pb::ProbeRequest {
            key: "k".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(probe.lease.map(|l| l.token), Some(h2), "h2 keeps the key");
}

/// The upgrade to data format 15: while the leader knows a member that reads format 14
/// only, a retry goes into the log as the plain command it was before (applied afresh unless
/// remembered), since that member could not decode `Op::Retry`; once that member answers as
/// format 15, as a retry. Seen from outside: a retry of a client the cluster never heard of
/// is applied before, refused as too old after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_go_into_the_log_as_retries_only_once_every_member_reads_format_15() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    // Nodes 1 and 2 come back knowing node 3 (down) as a format-14 node, as in a rolling
    // upgrade to format 15 whose last node is not upgraded yet and down.
    tokio::task::block_in_place(|| {
        for node in [1, 2, 3] {
            cluster.stop(node);
        }
    });
    for node in [1, 2] {
        let path = cluster.nodes[&node].data_dir.join("peer-formats.json");
        let mut formats: BTreeMap<String, u32> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(formats.get("3"), Some(&15), "{formats:?}");
        formats.insert("3".into(), 14);
        std::fs::write(&path, serde_json::to_vec(&formats).unwrap()).unwrap();
        cluster.start_node(node);
    }
    let mut c = raw(&cluster).await;
    granted_token(
        c.claim(retry(claim("up/a", "new-a", 1)))
            .await
            .unwrap()
            .into_inner(),
    );
    // Node 3 comes back as format 15 and answers the leader: retries from then on.
    cluster.start_node(3);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for n in 0.. {
        let client = format!("new-b{n}");
        match c.claim(retry(claim(&format!("up/b{n}"), &client, 1))).await {
            Err(e) if e.code() == tonic::Code::Unknown => {
                assert!(e.message().contains("retry too old"), "{e:?}");
                break;
            }
            Ok(answer) => drop(granted_token(answer.into_inner())),
            Err(e) => panic!("{e:?}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 3 answered as format 15 but the leader kept proposing plain commands"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
