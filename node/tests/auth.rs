//! Bearer tokens (identity), on a real 3-node cluster: a request without a listed
//! token is refused; a token binds its requests to its principal, through followers too;
//! deleting a token's line and sending SIGHUP revokes it without a restart; anonymous access
//! is off unless `--allow-anonymous`.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Error, ReadMode, RecordPatch};
use common::{new_token, node_bin, serial, text, token_client, token_client_as, Cluster};
use futures::StreamExt;

const TTL: Duration = Duration::from_secs(60);

/// The `baton` CLI (built beside `baton-node` by `cargo test --workspace`) with `env`.
fn baton(endpoints: &[String], args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(node_bin().with_file_name("baton"))
        .arg("--endpoints")
        .arg(endpoints.join(","))
        .args(args)
        .env_remove("BATON_ENDPOINTS")
        .env_remove("BATON_AUTH_TOKEN")
        .env_remove("BATON_AUTH_TOKEN_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_bind_requests_to_their_principal_and_a_revoked_token_stops_working() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let ops = new_token(&file, "ops");
    let a = new_token(&file, "agent-a");
    let b = new_token(&file, "agent-b");
    let j = new_token(&file, "jürgen");
    let tokens_file = std::fs::read_to_string(&file).unwrap();
    assert!(!tokens_file.contains(&a) && tokens_file.contains("agent-a sha256:"));

    let flag = file.to_str().unwrap();
    let cluster = Cluster::start_with_token(3, &["--auth-tokens", flag], &ops).await;
    let all = cluster.endpoints();

    // No token, or one that is not listed: refused, and nothing changed.
    let anonymous = token_client(all.clone(), None, true).await;
    let e = anonymous.claim("auth/x", "agent-a", TTL).await.unwrap_err();
    assert!(
        matches!(e, Error::Unauthenticated(ref m) if m.contains("bearer token")),
        "{e}"
    );
    let forged = token_client(all.clone(), Some("baton_0123"), true).await;
    let e = forged.claim("auth/x", "agent-a", TTL).await.unwrap_err();
    assert!(
        matches!(e, Error::Unauthenticated(ref m) if m.contains("unknown or revoked")),
        "{e}"
    );
    let mut watch = anonymous.watch("auth/", 0);
    let e = watch.next().await.expect("an item").unwrap_err();
    assert!(matches!(e, Error::Unauthenticated(_)), "{e}");

    // A token's holder acts as itself only.
    let ca = token_client(all.clone(), Some(&a), true).await;
    let cb = token_client(all.clone(), Some(&b), true).await;
    let ClaimOutcome::Granted(g) = ca.claim("auth/x", "agent-a", TTL).await.unwrap() else {
        panic!("auth/x is free");
    };
    let e = ca.claim("auth/y", "agent-b", TTL).await.unwrap_err();
    assert!(
        matches!(e, Error::PermissionDenied(ref m) if m.contains("cannot act as holder \"agent-b\"")),
        "{e}"
    );
    // agent-b cannot release, renew, update or hand off agent-a's key, even with its token.
    let token = g.lease.token;
    for e in [
        cb.release("auth/x", token).await.unwrap_err(),
        cb.renew("auth/x", token).await.unwrap_err(),
        // A patch that changes something: bad input is refused before who may act is
        // asked, at every node alike.
        cb.update(
            "auth/x",
            token,
            RecordPatch {
                status: Some("review".into()),
                ..RecordPatch::default()
            },
        )
        .await
        .unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::PermissionDenied(ref m) if m.contains("is \"agent-a\"'s")),
            "{e}"
        );
    }
    let offer = cb
        .offer("auth/x", token, "agent-b", Default::default(), TTL)
        .await
        .unwrap_err();
    assert!(matches!(offer, Error::PermissionDenied(_)), "{offer}");
    let lease = ca
        .probe("auth/x", ReadMode::Linearizable)
        .await
        .unwrap()
        .lease;
    assert_eq!(
        lease.map(|l| (l.token, l.holder_name)),
        Some((token, "agent-a".into()))
    );

    // Through a follower, which forwards the client's token to the leader, the same holds.
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let at_follower = vec![cluster.nodes[&follower].addr.clone()];
    // agent-a's second connection acts as its session, as one agent's processes do.
    let a_via = token_client_as(at_follower.clone(), Some(&a), false, Some(ca.client_id())).await;
    let b_via = token_client(at_follower.clone(), Some(&b), false).await;
    assert!(a_via.renew("auth/x", token).await.is_ok());
    let e = b_via.release("auth/x", token).await.unwrap_err();
    assert!(matches!(e, Error::PermissionDenied(_)), "{e}");
    // A name that is not ASCII is forwarded as it is: bound, not lost (and never taken for
    // the forwarding node, which no permission binds).
    let j_via = token_client(at_follower.clone(), Some(&j), false).await;
    assert!(matches!(
        j_via.claim("auth/j", "jürgen", TTL).await.unwrap(),
        ClaimOutcome::Granted(_)
    ));
    let e = j_via.claim("auth/j2", "agent-a", TTL).await.unwrap_err();
    assert!(
        matches!(e, Error::PermissionDenied(ref m) if m.contains("jürgen")),
        "{e}"
    );
    let e = token_client(at_follower.clone(), None, false)
        .await
        .probe("auth/x", ReadMode::Linearizable)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Unauthenticated(_)), "{e}");

    // The CLI takes the token from BATON_AUTH_TOKEN or --auth-token-file, never from a flag.
    let out = baton(&all, &["claim", "auth/cli", "--holder", "agent-b"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not authenticated"),
        "{}",
        text(&out.stderr)
    );
    let out = baton(
        &all,
        &["claim", "auth/cli", "--holder", "agent-b"],
        &[("BATON_AUTH_TOKEN", &b)],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let b_file = dir.path().join("b.token");
    std::fs::write(&b_file, format!("{b}\n")).unwrap();
    let out = baton(
        &all,
        &["claim", "auth/cli2", "--holder", "agent-a"],
        &[("BATON_AUTH_TOKEN_FILE", b_file.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("permission denied"),
        "{}",
        text(&out.stderr)
    );

    // `baton bench` shows the token too; its claimants act under the principal's name.
    let out = baton(
        &all,
        &[
            "bench",
            "--clients",
            "2",
            "--keys",
            "4",
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--holder",
            "agent-b",
            "--prefix",
            "auth-bench/",
            "--output",
            "json",
        ],
        &[("BATON_AUTH_TOKEN", &b)],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["cycles"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["errors"]["other"], 0, "{report}");
    assert_eq!(report["errors"]["refused"], 0, "{report}");

    // A token from the future (the revision another's claim is about to get) is refused;
    // a stale one is not an error, it just releases nothing.
    let e = cb.release("auth/next", 1 << 40).await.unwrap_err();
    assert!(
        matches!(e, Error::PermissionDenied(ref m) if m.contains("was never granted")),
        "{e}"
    );
    assert!(matches!(
        cb.release("auth/next", 1).await.unwrap(),
        baton_client::ReleaseOutcome::Lost { .. }
    ));

    // A watch of agent-a's, open across the revocation below.
    let ClaimOutcome::Granted(w1) = ca.claim("auth/w1", "agent-a", TTL).await.unwrap() else {
        panic!("auth/w1 held");
    };
    let mut a_watch = ca.watch("auth/w", w1.lease.token);
    let first = tokio::time::timeout(Duration::from_secs(10), a_watch.next())
        .await
        .expect("the watch delivers");
    assert!(matches!(first, Some(Ok(_))), "{first:?}");

    // Revoke agent-a: its line goes, every node gets SIGHUP; same processes throughout.
    let pids: Vec<u32> = (1..=3)
        .map(|id| cluster.nodes[&id].child.as_ref().unwrap().id())
        .collect();
    let kept: String = tokens_file
        .lines()
        .filter(|l| !l.starts_with("agent-a "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, kept).unwrap();
    for id in 1..=3 {
        cluster.signal(id, "HUP");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for endpoint in &all {
        let a_here = token_client(vec![endpoint.clone()], Some(&a), false).await;
        loop {
            match a_here.probe("auth/x", ReadMode::Stale).await {
                Err(Error::Unauthenticated(m)) => {
                    assert!(m.contains("unknown or revoked"), "{m}");
                    break;
                }
                other => assert!(
                    Instant::now() < deadline,
                    "{endpoint} still takes the revoked token: {other:?}\n{}",
                    cluster.logs()
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(cb.probe("auth/x", ReadMode::Linearizable).await.is_ok());
    // The open watch ends at its next event: its token is gone.
    let ClaimOutcome::Granted(_) = cb.claim("auth/w2", "agent-b", TTL).await.unwrap() else {
        panic!("auth/w2 held");
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout(Duration::from_secs(10), a_watch.next()).await {
            Ok(Some(Err(Error::Unauthenticated(m)))) => {
                assert!(m.contains("revoked"), "{m}");
                break;
            }
            Ok(Some(Ok(_))) if Instant::now() < deadline => continue,
            other => panic!("the revoked watch went on: {other:?}"),
        }
    }
    let now: Vec<u32> = (1..=3)
        .map(|id| cluster.nodes[&id].child.as_ref().unwrap().id())
        .collect();
    assert_eq!(pids, now, "no node restarted");
    assert_eq!(cluster.logged("reloaded the tokens file"), 3);

    // A tokens file that does not load keeps the tokens in use.
    std::fs::write(&file, "not a tokens file\n").unwrap();
    cluster.signal(1, "HUP");
    cluster
        .wait_logged(
            "could not reload the tokens file",
            1,
            Duration::from_secs(10),
        )
        .await;
    let b_at_1 = token_client(vec![cluster.nodes[&1].addr.clone()], Some(&b), false).await;
    assert!(b_at_1.probe("auth/x", ReadMode::Stale).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_access_is_off_unless_the_node_allows_it() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let a = new_token(&file, "agent-a");
    let flag = file.to_str().unwrap();
    let cluster = Cluster::start_with(1, &["--auth-tokens", flag, "--allow-anonymous"]).await;
    let all = cluster.endpoints();

    // Anonymous requests are served, and bound to no one.
    let anonymous = token_client(all.clone(), None, true).await;
    let claimed = anonymous.claim("anon/x", "whoever", TTL).await.unwrap();
    assert!(matches!(claimed, ClaimOutcome::Granted(_)), "{claimed:?}");
    // A token still binds; one that is not listed is refused, not taken as anonymous.
    let ca = token_client(all.clone(), Some(&a), true).await;
    let e = ca.claim("anon/y", "whoever", TTL).await.unwrap_err();
    assert!(matches!(e, Error::PermissionDenied(_)), "{e}");
    let forged = token_client(all.clone(), Some("baton_forged"), true).await;
    let e = forged.claim("anon/y", "whoever", TTL).await.unwrap_err();
    assert!(matches!(e, Error::Unauthenticated(_)), "{e}");

    // --allow-anonymous without auth is a mistake the node names at start.
    let out = Command::new(node_bin())
        .args(["--allow-anonymous", "--data-dir"])
        .arg(dir.path().join("unused"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("allow_anonymous only means something"),
        "{}",
        text(&out.stderr)
    );
    // So is a tokens file that does not load.
    std::fs::write(dir.path().join("bad"), "agent-a sha256:xyz\n").unwrap();
    let out = Command::new(node_bin())
        .args(["--auth-tokens"])
        .arg(dir.path().join("bad"))
        .arg("--data-dir")
        .arg(dir.path().join("unused2"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("line 1"),
        "{}",
        text(&out.stderr)
    );
}
