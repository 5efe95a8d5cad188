//! Operations on a real cluster through the `baton` CLI, exactly as deploy/RUNBOOK.md gives
//! them: membership changes (`cluster add/remove/members`, `--join`) and their
//! refusals, snapshots, and disaster recovery (`cluster backup` → destroy → `baton-node
//! restore` → every lease, record and history is back).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, EndedHow, GuardedClaim, LossReason, ReadMode};
use common::{admin_addr, free_port, http_get, node_bin, serial, text, Cluster, NodeProc};

const TTL: Duration = Duration::from_secs(60);

/// The `baton` CLI, built beside `baton-node` by `cargo test --workspace`.
fn cli_bin() -> PathBuf {
    let bin = node_bin().with_file_name("baton");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace`",
        bin.display()
    );
    bin
}

/// Runs `baton --endpoints ENDPOINTS ARGS...`.
fn baton(endpoints: &[String], args: &[&str]) -> Output {
    Command::new(cli_bin())
        .arg("--endpoints")
        .arg(endpoints.join(","))
        .args(args)
        .env_remove("BATON_ENDPOINTS")
        .output()
        .unwrap()
}

/// `baton ... --output json` that must succeed: its JSON.
fn baton_json(endpoints: &[String], args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["--output", "json"]);
    let out = baton(endpoints, &all);
    assert!(
        out.status.success(),
        "baton {args:?} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `baton ARGS...` that must be refused with exit code `code` and a message containing `why`.
fn refused(endpoints: &[String], args: &[&str], code: i32, why: &str) {
    let out = baton(endpoints, args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "baton {args:?}: {err}");
    assert!(err.contains(why), "baton {args:?}: {err:?} lacks {why:?}");
}

/// (id, voter) of every member, as `baton cluster members` lists them.
fn members(endpoints: &[String]) -> Vec<(u64, bool)> {
    let json = baton_json(endpoints, &["cluster", "members"]);
    json["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_u64().unwrap(), m["voter"].as_bool().unwrap()))
        .collect()
}

/// Adds node `id` to `cluster` (stopped with it) and starts it with `--join` through `through`.
fn start_joining(cluster: &mut Cluster, id: u64, through: &[String]) {
    let addr = format!("127.0.0.1:{}", free_port());
    let node = NodeProc {
        id,
        data_dir: cluster.dir.path().join(format!("node{id}")),
        log: cluster.dir.path().join(format!("node{id}.log")),
        addr,
        child: None,
    };
    cluster.nodes.insert(id, node);
    cluster.start_node_joining(id, through);
}

/// Waits until node `id`'s `/readyz` answers `code` with a body containing `says`.
async fn wait_for_readyz(cluster: &Cluster, id: u64, code: u16, says: &str) {
    let admin = admin_addr(cluster, id).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (got, body) = http_get(&admin, "/readyz").await;
        if got == code && body.contains(says) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {id}'s /readyz answers {got} {body:?}, not {code} with {says:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The value of the unlabelled metric `name` on node `id`.
async fn metric(cluster: &Cluster, id: u64, name: &str) -> Option<f64> {
    let (_, text) = http_get(&admin_addr(cluster, id).await, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_leave_and_the_cluster_refuses_what_would_harm_it() {
    let _serial = serial().await;
    let mut cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let endpoints = cluster.endpoints();
    let client = cluster.client().await;
    for i in 0..20 {
        client
            .claim(&format!("m/{i}"), "before", TTL)
            .await
            .unwrap();
    }
    assert_eq!(members(&endpoints), vec![(1, true), (2, true), (3, true)]);

    // A fourth node joins by itself (--join): learner, caught up, voter; it has the data.
    start_joining(&mut cluster, 4, &endpoints);
    wait_for("node 4 to become a voter", Duration::from_secs(30), || {
        members(&endpoints).contains(&(4, true))
    })
    .await;
    let fourth = cluster.client_of(4).await;
    let probe = fourth.probe("m/19", ReadMode::Stale).await.unwrap();
    assert_eq!(probe.lease.unwrap().holder_name, "before");
    // A node that joined still stops cleanly on SIGTERM.
    cluster.signal(4, "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let child = cluster.nodes.get_mut(&4).unwrap().child.as_mut().unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "node 4 ignored SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
    cluster.nodes.get_mut(&4).unwrap().child = None;

    // Refusals, each naming the reason, each changing nothing.
    let addr2 = cluster.nodes[&2].addr.clone();
    let addr1 = cluster.nodes[&1].addr.clone();
    refused(
        &endpoints,
        &["cluster", "add", "2", &addr2],
        1,
        "already a voter",
    );
    refused(
        &endpoints,
        &["cluster", "add", "9", &addr1],
        1,
        "is node 1's",
    );
    refused(
        &endpoints,
        &["cluster", "add", "9", "no-port"],
        1,
        "not host:port",
    );
    refused(&endpoints, &["cluster", "remove", "42"], 1, "not a member");
    assert_eq!(members(&endpoints).len(), 4);

    // A node nobody runs is added as a learner at most, never as a voter: a voter that
    // cannot answer would cost the cluster its fault tolerance.
    let nobody = format!("127.0.0.1:{}", free_port());
    let out = baton(
        &endpoints,
        &["--timeout", "3s", "cluster", "add", "9", &nobody],
    );
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        members(&endpoints).contains(&(9, false)),
        "{:?}",
        members(&endpoints)
    );
    baton_json(&endpoints, &["cluster", "remove", "9"]);
    assert_eq!(members(&endpoints).len(), 4);

    // Removing a member: it is gone from the list, and the cluster still writes.
    baton_json(&endpoints, &["cluster", "remove", "4"]);
    assert!(!members(&endpoints).iter().any(|(id, _)| *id == 4));
    cluster.kill(4);
    let g = client.claim("m/after-remove", "after", TTL).await.unwrap();
    assert!(matches!(g, ClaimOutcome::Granted(_)));

    // A wiped node may not come back under its old id: it would have forgotten its votes
    // and its log. Restarted as a plain restart would (with --initial-cluster), it founds
    // nothing: its peers refuse its Raft messages and ignore its answers (a new data dir has
    // a new incarnation), and the cluster carries on without it.
    cluster.kill(3);
    std::fs::remove_dir_all(&cluster.nodes[&3].data_dir).unwrap();
    cluster.start_node(3);
    let others_log = |cluster: &Cluster| {
        [1, 2]
            .iter()
            .map(|id| std::fs::read_to_string(&cluster.nodes[id].log).unwrap())
            .collect::<String>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !others_log(&cluster).contains("node 3 now runs on another data dir") {
        assert!(
            Instant::now() < deadline,
            "the wiped node was not refused\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let g = client.claim("m/while-wiped", "during", TTL).await.unwrap();
    assert!(matches!(g, ClaimOutcome::Granted(_)), "{g:?}");
    // Its readiness tells the truth: not ready, and why and what to do (a load balancer or
    // a PodDisruptionBudget must not count it).
    wait_for_readyz(
        &cluster,
        3,
        503,
        "the cluster knows node 3 by another data dir",
    )
    .await;
    let leader = cluster.client_of(1).await.cluster_status().await.unwrap();
    assert!(matches!(leader.leader_id, Some(1) | Some(2)), "{leader:?}");
    cluster.kill(3);
    std::fs::remove_dir_all(&cluster.nodes[&3].data_dir).unwrap();
    // With --join, the cluster refuses to add it, and the node stops saying so.
    let through: Vec<String> = endpoints
        .iter()
        .filter(|e| **e != cluster.nodes[&3].addr)
        .cloned()
        .collect();
    cluster.start_node_joining(3, &through);
    let exited = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let child = cluster.nodes.get_mut(&3).unwrap().child.as_mut().unwrap();
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the wiped node kept running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(!exited.success());
    let log = std::fs::read_to_string(&cluster.nodes[&3].log).unwrap();
    assert!(log.contains("already a voter"), "{log}");
    cluster.nodes.get_mut(&3).unwrap().child = None;
    // The operator's way: remove it, then it joins again (the same id is safe once removed).
    let out = baton(&through, &["cluster", "remove", "3"]);
    assert!(
        out.status.success(),
        "remove 3: {}\n{}",
        text(&out.stderr),
        cluster.logs()
    );
    std::fs::remove_dir_all(&cluster.nodes[&3].data_dir).unwrap();
    cluster.start_node_joining(3, &through);
    wait_for(
        "the replaced node 3 to be a voter",
        Duration::from_secs(30),
        || members(&through).contains(&(3, true)),
    )
    .await;
    let third = cluster.client_of(3).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let probe = third.probe("m/after-remove", ReadMode::Stale).await;
        if probe.is_ok_and(|p| p.lease.is_some()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replaced node 3 has not caught up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for_readyz(&cluster, 3, 200, "ready").await;

    // The leader removed: it stops being ready and stops counting as leader at once, though
    // it still runs and still names itself the leader it was; one other node leads.
    let old = cluster.leader(Duration::from_secs(10)).await;
    let rest: Vec<String> = [1, 2, 3]
        .iter()
        .filter(|id| **id != old)
        .map(|id| cluster.nodes[id].addr.clone())
        .collect();
    baton_json(&rest, &["cluster", "remove", &old.to_string()]);
    wait_for_readyz(
        &cluster,
        old,
        503,
        &format!("node {old} is not in the cluster's membership"),
    )
    .await;
    assert_eq!(
        metric(&cluster, old, "baton_raft_is_leader").await,
        Some(0.0)
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut leading = Vec::new();
        for id in [1, 2, 3].into_iter().filter(|id| *id != old) {
            if metric(&cluster, id, "baton_raft_is_leader").await == Some(1.0) {
                leading.push(id);
            }
        }
        if leading.len() == 1 {
            wait_for_readyz(&cluster, leading[0], 200, "ready").await;
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the remaining nodes report leaders {leading:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The removed leader's disk is replaced and it joins again under its id. Its last
    // messages as leader (the commit of its own removal) reached nodes that had already
    // dropped it from the membership: they must not have taken its old data dir as current,
    // or they refuse the new one forever (found by the chaos suite's replace-leader).
    cluster.kill(old);
    std::fs::remove_dir_all(&cluster.nodes[&old].data_dir).unwrap();
    cluster.start_node_joining(old, &rest);
    wait_for(
        "the replaced leader to be a voter again",
        Duration::from_secs(30),
        || members(&rest).contains(&(old, true)),
    )
    .await;
    wait_for_readyz(&cluster, old, 200, "ready").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_voter_cannot_be_removed() {
    let _serial = serial().await;
    let cluster = Cluster::start(1).await;
    refused(
        &cluster.endpoints(),
        &["cluster", "remove", "1"],
        3,
        "last voter",
    );
    assert_eq!(members(&cluster.endpoints()), vec![(1, true)]);
}

/// Everything a key can carry, for comparing a cluster before and after a restore; the
/// time left on countdowns (`remaining: ...`) is left out, it runs on.
async fn everything(client: &baton_client::Client, keys: &[String]) -> Vec<String> {
    let mut all = Vec::new();
    for key in keys {
        let record = client.record(key, ReadMode::Linearizable).await.unwrap();
        let history = client.history(key, ReadMode::Linearizable).await.unwrap();
        // Not the answer's own revision: the restore raised it.
        let text = format!(
            "{key}: {:?} {:?} | {:?}",
            record.record, record.lease, history.events
        );
        all.push(
            text.split("remaining: ")
                .enumerate()
                .map(|(i, part)| match (i, part.split_once(',')) {
                    (0, _) | (_, None) => part.to_owned(),
                    (_, Some((_, rest))) => format!("remaining: _,{rest}"),
                })
                .collect(),
        );
    }
    all
}

/// `baton-node restore BACKUP` into `node`'s data dir, as the runbook gives it.
fn run_restore(backup: &Path, node: &NodeProc, initial_cluster: &str) -> Output {
    Command::new(node_bin())
        .arg("restore")
        .arg(backup)
        .arg("--data-dir")
        .arg(&node.data_dir)
        .args(["--node-id", &node.id.to_string()])
        .args(["--initial-cluster", initial_cluster])
        .output()
        .unwrap()
}

fn restore(backup: &Path, node: &NodeProc, initial_cluster: &str) {
    let out = run_restore(backup, node, initial_cluster);
    assert!(
        out.status.success(),
        "restore of node {}: {}",
        node.id,
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_every_lease_record_and_history_into_a_new_cluster() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    let endpoints = cluster.endpoints();
    let client = cluster.client().await;
    let mut keys = Vec::new();
    let mut last_token = 0;
    for i in 0..30 {
        let key = format!("dr/{i}");
        let ClaimOutcome::Granted(g) = client.claim(&key, "agent", TTL).await.unwrap() else {
            panic!("{key} held");
        };
        last_token = g.lease.token;
        if i % 3 == 0 {
            client.release(&key, g.lease.token).await.unwrap();
        }
        keys.push(key);
    }
    let token0 = client
        .probe("dr/1", ReadMode::Linearizable)
        .await
        .unwrap()
        .lease
        .unwrap()
        .token;
    let patch = baton_client::RecordPatch {
        status: Some("in_progress".into()),
        ..Default::default()
    };
    client.update("dr/1", token0, patch).await.unwrap();
    client
        .assign("dr/2", "someone", "dispatcher", "dr test")
        .await
        .unwrap();
    let note = baton_client::HandoffNote {
        done: "half".into(),
        ..Default::default()
    };
    client
        .offer("dr/1", token0, "taker", note, Duration::from_secs(600))
        .await
        .unwrap();

    // A snapshot on demand, on every node.
    let snaps = baton_json(&endpoints, &["cluster", "snapshot"]);
    let snaps = snaps["snapshots"].as_array().unwrap();
    assert_eq!(snaps.len(), 3, "{snaps:?}");
    for s in snaps {
        assert!(s["snapshot_index"].as_u64().unwrap() > 30, "{s}");
        assert!(s["snapshot_bytes"].as_u64().unwrap() > 0, "{s}");
    }

    let before = everything(&client, &keys).await;
    let backup = cluster.dir.path().join("baton.backup");
    let wrote = baton_json(&endpoints, &["cluster", "backup", backup.to_str().unwrap()]);
    assert_eq!(wrote["header"]["leases"].as_u64(), Some(20), "{wrote}");
    // A lease granted after the backup, held under a guard: the restore predates it.
    let GuardedClaim::Granted(after) = client
        .claim_guarded("dr/after-backup", "agent", TTL)
        .await
        .unwrap()
    else {
        panic!("dr/after-backup held");
    };
    // Its session's endings stream is open (a progress marker every 500 ms moves the
    // revision it resumes from).
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The cluster is lost for good: every node and every data dir.
    for id in 1..=3 {
        cluster.kill(id);
        std::fs::remove_dir_all(&cluster.nodes[&id].data_dir).unwrap();
    }
    // A damaged backup is refused and seeds nothing.
    let damaged = cluster.dir.path().join("damaged.backup");
    let mut bytes = std::fs::read(&backup).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&damaged, bytes).unwrap();
    let out = run_restore(&damaged, &cluster.nodes[&1], &cluster.initial_cluster);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("corrupt"),
        "{}",
        text(&out.stderr)
    );
    assert!(!cluster.nodes[&1].data_dir.exists());

    // The runbook: restore every node from the backup, then start them as usual.
    for id in 1..=3 {
        restore(&backup, &cluster.nodes[&id], &cluster.initial_cluster);
    }
    for id in 1..=3 {
        cluster.start_node(id);
    }
    cluster.leader(Duration::from_secs(20)).await;
    // The guard's stream resumes on the restored cluster, whose window starts past the
    // revision it asks for: the library re-reads the lease, finds it gone, and says so
    // before any renewal (every 20 s) could have.
    let restarted = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(15), after.lost())
        .await
        .expect("the guard of a lease the restore predates was told");
    match lost {
        LossReason::Ended(e) => {
            assert_eq!(e.what, EndedHow::Gone, "{e:?}");
            assert_eq!(e.key, "dr/after-backup");
            assert_eq!(e.new_holder, None, "{e:?}");
        }
        other => panic!(
            "lost otherwise than by the push: {other} after {:?}",
            restarted.elapsed()
        ),
    }
    let client = cluster.client().await;
    assert_eq!(everything(&client, &keys).await, before);
    // Fencing continues: a new grant's token is above every token given before the loss.
    let ClaimOutcome::Granted(g) = client.claim("dr/new", "agent", TTL).await.unwrap() else {
        panic!("dr/new held");
    };
    // The gap covers tokens the lost cluster may have granted after the backup.
    let floor = last_token + baton_node::backup::RESTORE_REVISION_GAP_DEFAULT;
    assert!(g.lease.token > floor, "{} <= {floor}", g.lease.token);
    // Restoring over a node's existing data is refused.
    let out = run_restore(&backup, &cluster.nodes[&1], &cluster.initial_cluster);
    assert!(
        text(&out.stderr).contains("not empty"),
        "{}",
        text(&out.stderr)
    );
}
