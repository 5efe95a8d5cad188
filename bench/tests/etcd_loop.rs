//! The etcd claimant loop against a real 3-member etcd on loopback.
//!
//! Needs `etcd` on PATH (or BATON_BENCH_ETCD). Without it the test fails, unless
//! BATON_BENCH_SKIP_ETCD=1 is set, in which case it says so and passes.

use std::time::{Duration, Instant};

use baton_bench::cluster::{etcd_for_test, EtcdCluster};
use baton_workload::BenchConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_etcd_loop_completes_cycles_without_errors_and_leaves_no_keys() {
    within_limit(etcd_loop()).await;
}

/// Fails a test that hangs instead of hanging the test run (dropping the future stops
/// its etcd processes).
async fn within_limit(test: impl std::future::Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(40), test)
        .await
        .expect("the test did not finish within 40 s");
}

async fn etcd_loop() {
    let started = Instant::now();
    let Some(etcd_bin) = etcd_for_test() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = EtcdCluster::start_healthy(&etcd_bin, 3, dir.path(), Duration::from_secs(15))
        .await
        .unwrap();

    let prefix = "test/etcd-loop/";
    let config = BenchConfig {
        endpoints: etcd.endpoints.clone(),
        clients: 2,
        keys: 2,
        duration: Duration::from_secs(1),
        warmup: Duration::from_millis(100),
        ttl: Duration::from_secs(10),
        key_prefix: prefix.to_owned(),
        retry_deadline: Duration::from_secs(3),
        ..BenchConfig::default()
    };
    let report = baton_bench::etcd::run(config).await.unwrap();
    eprintln!("{}", serde_json::to_string(&report).unwrap());

    assert!(report.cycles > 0, "{report:?}");
    assert_eq!(report.errors.total(), 0, "{report:?}");
    assert_eq!(report.last_error, None, "{report:?}");
    assert!(
        report.win_rate > 0.0 && report.win_rate <= 1.0,
        "{report:?}"
    );
    assert_eq!(report.granted + report.held, report.attempts);
    assert!(report.cycles <= report.granted);
    let latency = report.latency_us;
    assert_eq!(latency.claim.count, report.attempts);
    assert_eq!(latency.cycle.count, report.cycles);
    assert!(latency.renew.count > 0 && latency.release.count > 0);

    // Every key was released (and every lease revoked): nothing is left under the prefix.
    let left = baton_bench::etcd::count_prefix(&etcd.endpoints[0], prefix)
        .await
        .unwrap();
    assert_eq!(left, 0, "keys left under {prefix}");
    // Nor any other bench key, on another member (a linearizable read).
    let left = baton_bench::etcd::count_prefix(&etcd.endpoints[2], "test/")
        .await
        .unwrap();
    assert_eq!(left, 0);

    etcd.procs.stop();
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// A key put by the Txn carries the lease and the lease id as its value; the same Txn on
/// a taken key answers the holder through the Get branch: checks the hand-written field
/// numbers against the real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hand_written_protos_match_etcds_wire_format() {
    within_limit(wire_format()).await;
}

async fn wire_format() {
    use baton_bench::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
    use baton_bench::pb::etcdserverpb::kv_client::KvClient;
    use baton_bench::pb::etcdserverpb::lease_client::LeaseClient;
    use baton_bench::pb::etcdserverpb::request_op::Request;
    use baton_bench::pb::etcdserverpb::response_op::Response;
    use baton_bench::pb::etcdserverpb::*;

    let Some(etcd_bin) = etcd_for_test() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut etcd = EtcdCluster::start_healthy(&etcd_bin, 1, dir.path(), Duration::from_secs(15))
        .await
        .unwrap();
    let channel = baton_bench::etcd::connect(&etcd.endpoints[0], Duration::from_secs(5))
        .await
        .unwrap();
    let mut kv = KvClient::new(channel.clone());
    let mut lease = LeaseClient::new(channel);

    let granted = lease
        .lease_grant(LeaseGrantRequest { ttl: 30, id: 0 })
        .await
        .unwrap()
        .into_inner();
    assert!(granted.id != 0 && granted.ttl == 30, "{granted:?}");
    assert!(granted.header.as_ref().unwrap().revision > 0);
    assert!(granted.header.as_ref().unwrap().member_id != 0);

    let key = b"wire/k".to_vec();
    let txn = |lease_id: i64| TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Create as i32,
            key: key.clone(),
            target_union: Some(TargetUnion::CreateRevision(0)),
            range_end: vec![],
        }],
        success: vec![RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.clone(),
                value: lease_id.to_string().into_bytes(),
                lease: lease_id,
                prev_kv: false,
            })),
        }],
        failure: vec![RequestOp {
            request: Some(Request::RequestRange(RangeRequest {
                key: key.clone(),
                ..RangeRequest::default()
            })),
        }],
    };
    let first = kv.txn(txn(granted.id)).await.unwrap().into_inner();
    assert!(first.succeeded, "{first:?}");
    assert!(matches!(
        first.responses[0].response,
        Some(Response::ResponsePut(_))
    ));
    let second = kv.txn(txn(granted.id)).await.unwrap().into_inner();
    assert!(!second.succeeded);
    let Some(Response::ResponseRange(range)) = &second.responses[0].response else {
        panic!("{second:?}");
    };
    let held = &range.kvs[0];
    assert_eq!(held.key, key);
    assert_eq!(held.value, granted.id.to_string().into_bytes());
    assert_eq!(held.lease, granted.id);
    assert!(held.create_revision > 0 && held.mod_revision == held.create_revision);
    assert_eq!(held.version, 1);
    assert_eq!(range.count, 1);

    // Delete only if the value is ours: a wrong value fails, the right one deletes.
    let delete = |value: &str| TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Value as i32,
            key: key.clone(),
            target_union: Some(TargetUnion::Value(value.as_bytes().to_vec())),
            range_end: vec![],
        }],
        success: vec![RequestOp {
            request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
                key: key.clone(),
                ..DeleteRangeRequest::default()
            })),
        }],
        failure: vec![],
    };
    assert!(
        !kv.txn(delete("not-ours"))
            .await
            .unwrap()
            .into_inner()
            .succeeded
    );
    let deleted = kv
        .txn(delete(&granted.id.to_string()))
        .await
        .unwrap()
        .into_inner();
    assert!(deleted.succeeded);
    let Some(Response::ResponseDeleteRange(d)) = &deleted.responses[0].response else {
        panic!("{deleted:?}");
    };
    assert_eq!(d.deleted, 1);

    // Keep-alive answers with the lease's id and TTL; after a revoke, TTL 0.
    // The request goes first: etcd answers the stream's headers with its first message.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(LeaseKeepAliveRequest { id: granted.id })
        .await
        .unwrap();
    let mut stream = lease
        .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let alive = stream.message().await.unwrap().unwrap();
    assert_eq!((alive.id, alive.ttl), (granted.id, 30));
    lease
        .lease_revoke(LeaseRevokeRequest { id: granted.id })
        .await
        .unwrap();
    tx.send(LeaseKeepAliveRequest { id: granted.id })
        .await
        .unwrap();
    let gone = stream.message().await.unwrap().unwrap();
    assert_eq!((gone.id, gone.ttl), (granted.id, 0));
    etcd.procs.stop();
}
