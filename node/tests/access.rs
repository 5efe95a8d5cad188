//! Permissions, on a real 3-node cluster with bearer tokens: a policy set through
//! `baton access set` (one Raft entry) is enforced by every node, per principal, group and
//! key prefix; admin-only calls are refused to agents; every change is in the audit trail and
//! the nodes' logs; the policy survives a snapshot and a restart.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Error, ReadMode, RecordPatch};
use common::{new_token, node_bin, serial, text, token_client, Cluster};
use futures::StreamExt;

const TTL: Duration = Duration::from_secs(60);

const POLICY: &str = r#"
[groups]
agents = ["agent-a", "agent-b"]

[[rule]]
who = ["group:agents"]
prefixes = ["tasks/"]
can = ["read", "claim"]

[[rule]]
who = ["agent-a"]
prefixes = ["billing/"]
can = ["read"]

[[rule]]
who = ["dispatcher"]
prefixes = ["tasks/"]
can = ["assign", "read"]

[[rule]]
who = ["ops"]
prefixes = [""]
can = ["admin"]

[names]
agent-b = ["agent-b/worker-1"]
"#;

fn baton(endpoints: &[String], token: &str, args: &[&str]) -> Output {
    Command::new(node_bin().with_file_name("baton"))
        .arg("--endpoints")
        .arg(endpoints.join(","))
        .args(args)
        .env_remove("BATON_ENDPOINTS")
        .env_remove("BATON_AUTH_TOKEN_FILE")
        .env("BATON_AUTH_TOKEN", token)
        .output()
        .unwrap()
}

fn denied(result: Result<impl std::fmt::Debug, Error>, what: &str) {
    match result {
        Err(Error::PermissionDenied(m)) => assert!(m.contains(what), "{what:?} not in {m}"),
        other => panic!("expected PermissionDenied ({what}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_set_as_one_raft_entry_binds_every_node_per_principal_and_prefix() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let ops = new_token(&file, "ops");
    let a = new_token(&file, "agent-a");
    let b = new_token(&file, "agent-b");
    let dispatcher = new_token(&file, "dispatcher");
    // Until the cluster has a policy, every node enforces the one it was started with.
    let bootstrap = dir.path().join("bootstrap.toml");
    std::fs::write(
        &bootstrap,
        "[[rule]]\nwho = [\"ops\"]\nprefixes = [\"\"]\ncan = [\"admin\"]\n\n\
         [[rule]]\nwho = [\"*\"]\nprefixes = [\"early/\"]\ncan = [\"claim\"]\n",
    )
    .unwrap();
    let (flag, boot) = (file.to_str().unwrap(), bootstrap.to_str().unwrap());
    let args = ["--auth-tokens", flag, "--access-policy", boot];
    let mut cluster = Cluster::start_with_token(3, &args, &ops).await;
    let all = cluster.endpoints();
    let (ca, cb) = (
        token_client(all.clone(), Some(&a), false).await,
        token_client(all.clone(), Some(&b), false).await,
    );
    assert!(matches!(
        ca.claim("early/x", "agent-a", TTL).await.unwrap(),
        ClaimOutcome::Granted(_)
    ));
    denied(ca.claim("tasks/0", "agent-a", TTL).await, "version 0");
    let out = baton(&all, &ops, &["access", "show", "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&shown["version"], &shown["bootstrap"]),
        (&0.into(), &true.into()),
        "{shown}"
    );
    assert!(
        shown["policy"].as_str().unwrap().contains("early/"),
        "{shown}"
    );

    // Only an admin sets the policy; an agent is refused, and nothing changes.
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, POLICY).unwrap();
    let out = baton(&all, &a, &["access", "set", policy_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("permission denied"),
        "{}",
        text(&out.stderr)
    );
    // A broken policy is refused saying where, and nothing changes.
    let broken = dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        "[[rule]]\nwho = [\"group:nobody\"]\nprefixes = [\"\"]\ncan = [\"read\"]\n",
    )
    .unwrap();
    let out = baton(&all, &ops, &["access", "set", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no such group"),
        "{}",
        text(&out.stderr)
    );
    // So is one that would leave no one able to change it.
    std::fs::write(
        &broken,
        "[[rule]]\nwho = [\"ops\"]\nprefixes = [\"\"]\ncan = [\"read\", \"claim\"]\n",
    )
    .unwrap();
    let out = baton(&all, &ops, &["access", "set", broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("leaves no one admin"),
        "{}",
        text(&out.stderr)
    );
    let out = baton(
        &all,
        &ops,
        &[
            "access",
            "set",
            policy_file.to_str().unwrap(),
            "--output",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let set: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(set["version"], 1, "{set}");
    assert_eq!(set["audit"][0]["by"], "ops", "{set}");

    // Claim where the group may; not where agent-a may only read.
    assert!(matches!(
        ca.claim("tasks/1", "agent-a", TTL).await.unwrap(),
        ClaimOutcome::Granted(_)
    ));
    denied(
        ca.claim("billing/1", "agent-a", TTL).await,
        "no `claim` permission on \"billing/1\"",
    );
    // A set needs `claim` on every key of it: one key outside the rules refuses it all.
    denied(
        ca.claim_set(&["tasks/s1", "billing/2"], "agent-a", TTL)
            .await,
        "no `claim` permission on \"billing/2\"",
    );
    let probe = ca.probe("tasks/s1", ReadMode::Linearizable).await.unwrap();
    assert_eq!(probe.lease, None, "a refused set granted nothing");
    assert!(matches!(
        ca.claim_set(&["tasks/s1", "tasks/s2"], "agent-a", TTL)
            .await
            .unwrap(),
        baton_client::SetOutcome::Granted(_)
    ));
    assert!(ca.probe("billing/1", ReadMode::Linearizable).await.is_ok());
    denied(
        cb.probe("billing/1", ReadMode::Linearizable).await,
        "no `read` permission",
    );
    // A prefix read needs the whole prefix.
    assert!(ca
        .board("tasks/", 0, "", ReadMode::Linearizable)
        .await
        .is_ok());
    denied(ca.board("", 0, "", ReadMode::Linearizable).await, "on \"\"");
    let mut watch = cb.watch("billing/", 0);
    match watch.next().await {
        Some(Err(Error::PermissionDenied(_))) => {}
        other => panic!("watch of billing/ by agent-b: {other:?}"),
    }
    // Names: agent-b may use its worker name, not agent-a's.
    assert!(matches!(
        cb.claim("tasks/2", "agent-b/worker-1", TTL).await.unwrap(),
        ClaimOutcome::Granted(_)
    ));
    denied(
        cb.claim("tasks/3", "agent-a", TTL).await,
        "cannot act as holder",
    );
    // Assign is the dispatcher's; revoke, quarantine and the cluster calls the admin's.
    let cd = token_client(all.clone(), Some(&dispatcher), false).await;
    denied(
        ca.assign("tasks/9", "agent-b", "agent-a", "why not").await,
        "no `assign` permission",
    );
    assert!(cd
        .assign("tasks/9", "agent-b", "dispatcher", "next in line")
        .await
        .is_ok());
    // The dispatcher signs its assignments with its own name only.
    denied(
        cd.assign("tasks/9", "agent-b", "ops", "forged").await,
        "cannot act as holder \"ops\"",
    );
    denied(
        cd.claim("tasks/9", "dispatcher", TTL).await,
        "no `claim` permission",
    );
    denied(ca.revoke("tasks/1", "mine").await, "no `admin` permission");
    denied(
        ca.set_quarantine("tasks/", Duration::from_secs(1)).await,
        "no `admin` permission",
    );
    denied(
        ca.access(ReadMode::Linearizable).await,
        "no `admin` permission",
    );
    let out = baton(&all, &a, &["cluster", "snapshot"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("permission denied"),
        "{}",
        text(&out.stderr)
    );
    let cops = cluster.client().await;
    assert!(cops
        .revoke("early/x", "the bootstrap policy is gone")
        .await
        .is_ok());
    // Record writes need claim too: agent-a's old billing lease is gone; its tasks one works.
    let probe = ca.probe("tasks/1", ReadMode::Linearizable).await.unwrap();
    let token = probe.lease.unwrap().token;
    assert!(ca
        .update(
            "tasks/1",
            token,
            RecordPatch {
                status: Some("in_progress".into()),
                ..Default::default()
            }
        )
        .await
        .is_ok());

    // Every node enforces the same policy (asked directly, no forwarding of reads).
    for endpoint in &all {
        let a_here = token_client(vec![endpoint.clone()], Some(&a), false).await;
        denied(
            a_here.board("", 0, "", ReadMode::Stale).await,
            "no `read` permission",
        );
        assert!(a_here.board("tasks/", 0, "", ReadMode::Stale).await.is_ok());
    }

    // The audit trail: in the cluster state and in every node's log.
    let out = baton(&all, &ops, &["access", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("permissions version 1") && shown.contains("group:agents"),
        "{shown}"
    );
    cluster
        .wait_logged("access policy changed", 3, Duration::from_secs(5))
        .await;

    // The policy survives snapshots and restarts: snapshot everywhere, restart node 1.
    let out = baton(&all, &ops, &["cluster", "snapshot"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    cluster.stop(1);
    cluster.start_node(1);
    let at_1 = token_client(vec![cluster.nodes[&1].addr.clone()], Some(&a), false).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match at_1.board("", 0, "", ReadMode::Stale).await {
            Err(Error::PermissionDenied(_)) => break,
            other => assert!(
                Instant::now() < deadline,
                "restarted node 1 does not enforce the policy: {other:?}\n{}",
                cluster.logs()
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Clearing is a change too, audited; then agents may do everything again (the nodes'
    // bootstrap policy is for a cluster that never had one).
    let cleared = cops.clear_access().await.unwrap();
    assert_eq!((cleared.version, cleared.policy.as_deref()), (2, None));
    assert_eq!(cleared.audit.len(), 2);
    assert!(cleared.audit[1].what.contains("cleared"));
    assert!(ca.board("", 0, "", ReadMode::Linearizable).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_is_refused_where_auth_is_off() {
    let _serial = serial().await;
    let cluster = Cluster::start(1).await;
    let client = cluster.client().await;
    let e = client.set_access(POLICY).await.unwrap_err();
    assert!(
        matches!(e, Error::Refused(ref r) if r.message.contains("no auth")),
        "{e}"
    );
    assert_eq!(
        client.access(ReadMode::Linearizable).await.unwrap().version,
        0
    );
}
