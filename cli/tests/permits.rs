//! Permits (`claim --permits N`, `run --permits N`) against a real 3-node cluster, every
//! claimant its own `baton` process and session: racers get exactly N permits, each its own
//! token; another N is refused naming the key's; a killed holder's permit returns after its
//! TTL (never before its last renewal plus the TTL) while the other holder keeps its own.

mod common;

use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{holder_tokens, json_of, line_of, Cluster};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const RACERS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_racing_processes_on_three_permits_get_three_each_with_its_own_token() {
    let cluster = Cluster::start(3).await;
    let racers: Vec<Child> = (0..RACERS)
        .map(|i| {
            let holder = format!("racer-{i}");
            cluster
                .command(&[
                    "claim",
                    "gpu/runner",
                    "--permits",
                    "3",
                    "--holder",
                    &holder,
                    "--ttl",
                    "60s",
                    "--output",
                    "json",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let answers: Vec<(i32, Value)> = racers
        .into_iter()
        .map(|c| json_of(&c.wait_with_output().unwrap()))
        .collect();
    let granted: Vec<&Value> = answers
        .iter()
        .filter(|(code, _)| *code == 0)
        .map(|(_, v)| v)
        .collect();
    assert_eq!(granted.len(), 3, "exactly three permits: {answers:?}");
    let tokens: BTreeSet<u64> = granted
        .iter()
        .map(|g| g["lease"]["token"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens.len(), 3, "each holder its own token: {granted:?}");
    for (code, answer) in &answers {
        if *code == 0 {
            assert_eq!(answer["permits"]["permits"], 3, "{answer}");
            continue;
        }
        // Every other racer stood down, told every holder.
        assert_eq!(*code, 3, "{answer}");
        assert_eq!(answer["outcome"], "held", "{answer}");
        let named: BTreeSet<u64> = holder_tokens(answer).into_iter().collect();
        assert_eq!(named, tokens, "a refusal names every holder: {answer}");
    }
    let (code, probe) = json_of(&cluster.baton(&["probe", "gpu/runner", "--output", "json"]));
    assert_eq!(code, 0, "{probe}");
    assert_eq!(
        holder_tokens(&probe).into_iter().collect::<BTreeSet<_>>(),
        tokens,
        "{probe}"
    );
    // Another N is refused, naming the key's N and its holders; nothing changes.
    let (code, refused) = json_of(&cluster.baton(&[
        "claim",
        "gpu/runner",
        "--permits",
        "4",
        "--holder",
        "late",
        "--output",
        "json",
    ]));
    assert_eq!(code, 3, "{refused}");
    assert_eq!(refused["reason"], "permits_mismatch", "{refused}");
    assert_eq!(refused["refusal"]["permits"]["permits"], 3, "{refused}");
    assert_eq!(refused["refusal"]["asked_permits"], 4, "{refused}");
    // And a plain (exclusive) claim is held, told every holder.
    let (code, held) = json_of(&cluster.baton(&[
        "claim",
        "gpu/runner",
        "--holder",
        "late",
        "--output",
        "json",
    ]));
    assert_eq!(
        (code, &held["outcome"]),
        (3, &Value::from("held")),
        "{held}"
    );
    assert_eq!(holder_tokens(&held).len(), 3, "{held}");
    // check --token judges each holder's own token.
    for token in &tokens {
        let t = token.to_string();
        let (code, check) =
            json_of(&cluster.baton(&["check", "gpu/runner", "--token", &t, "--output", "json"]));
        assert_eq!(
            (code, &check["current"]),
            (0, &Value::Bool(true)),
            "{check}"
        );
        assert_eq!(check["permits"], 3, "{check}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_returns_after_its_ttl_and_the_other_holder_keeps_its_own() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    // Two holders of two permits, each `baton run` renewing its own every third of 3 s.
    let mut runs = Vec::new();
    for holder in ["h1", "h2"] {
        let file = dir.path().join(holder);
        let script = format!("echo $BATON_TOKEN > '{}'; sleep 30", file.display());
        let run = cluster
            .command(&[
                "run",
                "gpu/b",
                "--permits",
                "2",
                "--ttl",
                "3s",
                "--holder",
                holder,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !file.exists() || std::fs::read_to_string(&file).unwrap().trim().is_empty() {
            assert!(
                Instant::now() < deadline,
                "{holder} never ran: {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        runs.push(run);
    }
    let token_of = |holder: &str| -> u64 {
        let text = std::fs::read_to_string(dir.path().join(holder)).unwrap();
        text.trim().parse().unwrap()
    };
    let (t1, t2) = (token_of("h1"), token_of("h2"));
    assert_ne!(t1, t2);
    // Both permits are held: a third claimant stands down.
    let (code, held) = json_of(&cluster.baton(&[
        "claim",
        "gpu/b",
        "--permits",
        "2",
        "--holder",
        "w",
        "--ttl",
        "3s",
        "--output",
        "json",
    ]));
    assert_eq!(code, 3, "{held}");
    // h1's process dies without a word (its child keeps running, unrenewed).
    kill(Pid::from_raw(runs[0].id() as i32), Signal::SIGKILL).unwrap();
    let _ = runs[0].wait();
    std::thread::sleep(Duration::from_millis(300));
    let (_, probe) = json_of(&cluster.baton(&["probe", "gpu/b", "--output", "json"]));
    let last_renewal = probe["permits"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["token"] == t1)
        .map(|l| l["renewed_at_unix_ms"].as_u64().unwrap())
        .expect("h1 still listed until its TTL runs out");
    // A waiter claims again as permits free: it gets h1's, never before h1's last renewal
    // plus its TTL (h1's safe deadline is earlier still), and not much later.
    let (code, granted) = json_of(&cluster.baton(&[
        "claim",
        "gpu/b",
        "--permits",
        "2",
        "--holder",
        "w",
        "--ttl",
        "3s",
        "--wait",
        "--timeout",
        "30s",
        "--output",
        "json",
    ]));
    assert_eq!(code, 0, "{granted}");
    let since = granted["lease"]["held_since_unix_ms"].as_u64().unwrap();
    assert!(
        since >= last_renewal + 3_000,
        "granted {} ms after h1's last renewal, before its TTL",
        since - last_renewal
    );
    assert!(
        since < last_renewal + 3_000 + 5_000,
        "the permit came back {} ms after h1's last renewal",
        since - last_renewal
    );
    let holders: BTreeSet<u64> = holder_tokens(&granted).into_iter().collect();
    let w = granted["lease"]["token"].as_u64().unwrap();
    assert_eq!(
        holders,
        BTreeSet::from([t2, w]),
        "h2 kept its own: {granted}"
    );
    // The history says h1's permit expired.
    let (_, history) = json_of(&cluster.baton(&["history", "gpu/b", "--output", "json"]));
    let expired = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "expired" && e["token"] == t1);
    assert!(expired, "{history}");
    for mut run in runs {
        let _ = run.kill();
        let _ = run.wait();
    }
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_for_permits_get_each_freed_permit_in_the_order_they_came_in_the_freeing_write() {
    let cluster = Cluster::start(3).await;
    let claim = |who: &str, wait: bool| {
        let mut args = vec![
            "--client-id",
            who,
            "claim",
            "gpu/q",
            "--permits",
            "2",
            "--holder",
            who,
            "--ttl",
            "60s",
            "--output",
            "json",
        ];
        if wait {
            args.extend(["--wait", "--timeout", "60s"]);
        }
        cluster
            .command(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut tokens = Vec::new();
    for who in ["h1", "h2"] {
        let (code, granted) = json_of(&claim(who, false).wait_with_output().unwrap());
        assert_eq!(code, 0, "{granted}");
        tokens.push(granted["lease"]["token"].as_u64().unwrap());
    }
    let mut waiters = Vec::new();
    for (i, who) in ["w1", "w2", "w3"].into_iter().enumerate() {
        waiters.push((who, claim(who, true)));
        line_of(&cluster, "gpu/q", i as u64 + 1);
    }
    // Each release hands its permit to the oldest waiter, in the release's own write.
    let mut granted_tokens = Vec::new();
    for (i, (who, waiter)) in waiters.into_iter().enumerate() {
        let (holder, released) = match i {
            0 => ("h1", tokens[0]),
            1 => ("h2", tokens[1]),
            _ => ("w1", granted_tokens[0]),
        };
        let t = released.to_string();
        let out = cluster.baton(&[
            "--client-id",
            holder,
            "release",
            "gpu/q",
            "--token",
            &t,
            "--output",
            "json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (code, granted) = json_of(&waiter.wait_with_output().unwrap());
        assert_eq!(code, 0, "{who}: {granted}");
        assert_eq!(granted["lease"]["holder_name"], who, "{granted}");
        assert_eq!(granted["permits"]["permits"], 2, "{granted}");
        let token = granted["lease"]["token"].as_u64().unwrap();
        // Granted in the release's own write: its token is the release's revision.
        let (_, history) = json_of(&cluster.baton(&["history", "gpu/q", "--output", "json"]));
        let released_at = history["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "released" && e["token"] == released)
            .map(|e| e["revision"].clone());
        assert_eq!(
            released_at,
            Some(Value::from(token)),
            "{who} granted in {holder}'s release: {history}"
        );
        granted_tokens.push(token);
    }
    assert!(granted_tokens.windows(2).all(|w| w[0] < w[1]));
    let (_, probe) = json_of(&cluster.baton(&["probe", "gpu/q", "--output", "json"]));
    assert_eq!(probe["line"], Value::Null, "no one waits: {probe}");
}
