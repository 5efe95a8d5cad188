//! `baton run` and `baton claim --wait` against a real single-node `baton-node` process:
//! one child per key, a lost lease stops the child's whole process group, exit codes and
//! signals pass through, the key is released afterwards, and waiting claimants get the key
//! once it frees.

mod common;

use std::path::Path;
use std::process::{Child, ExitStatus, Output};
use std::time::{Duration, Instant};

use common::{parse_json, Node, Setup};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

/// A node whose `baton` runs act as one agent session (not the caller's client id, holder
/// name or endpoints); the children's marker files go in its scratch directory
/// ([`Node::file`]).
fn start_node() -> Node {
    Node::start(Setup {
        unset_env: &["BATON_CLIENT_ID", "BATON_HOLDER", "BATON_ENDPOINTS"],
        // One agent session drives every holder name here (the session binding itself is
        // tested in node/tests/who_acted.rs).
        session: Some("test-agent-session"),
        ..Setup::default()
    })
}

/// Waits for `child` to exit, at most `limit`; its output, or a panic that kills it.
fn finish_within(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}: stdout {:?} stderr {:?}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `path` exists, at most `limit`.
fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(status: ExitStatus) -> i32 {
    status.code().expect("baton exits, it is not killed")
}

/// The process is gone, or a zombie nobody reaped yet (it no longer runs).
fn process_is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesised command name: `pid (comm) S ...`.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[test]
fn two_concurrent_runs_on_one_key_run_exactly_one_child() {
    let node = start_node();
    let tokens = node.file("tokens");
    let script = format!("echo $BATON_TOKEN >> '{}'; sleep 3", tokens.display());
    let runs: Vec<Child> = ["runner-a", "runner-b"]
        .iter()
        .map(|holder| {
            node.spawn(&[
                "run",
                "tasks/one",
                "--holder",
                holder,
                "--ttl",
                "10s",
                "--",
                "sh",
                "-c",
                &script,
            ])
        })
        .collect();
    let outs: Vec<Output> = runs
        .into_iter()
        .map(|run| finish_within(run, Duration::from_secs(30)))
        .collect();

    let mut codes: Vec<i32> = outs.iter().map(|o| code(o.status)).collect();
    codes.sort_unstable();
    assert_eq!(codes, [0, 3], "{outs:?}");
    let ran = std::fs::read_to_string(&tokens).unwrap();
    assert_eq!(ran.lines().count(), 1, "exactly one child ran: {ran:?}");
    let token: u64 = ran.trim().parse().unwrap();
    assert!(token > 0);

    let loser = outs.iter().find(|o| code(o.status) == 3).unwrap();
    let winner_holder = if text(&loser.stdout).contains("runner-a") {
        "runner-a"
    } else {
        "runner-b"
    };
    let stood_down = text(&loser.stdout);
    assert!(
        stood_down.starts_with(&format!(
            "tasks/one is held by {winner_holder} (token {token}) since "
        )),
        "{stood_down}"
    );
    assert!(
        stood_down.contains(", free in ") && stood_down.contains("; standing down"),
        "{stood_down}"
    );
    assert_eq!(
        node.lease("tasks/one"),
        Value::Null,
        "released after the child"
    );
}

#[test]
fn held_key_in_json_prints_the_holder_and_runs_nothing() {
    let node = start_node();
    let (code_claim, _) = node.json(&["claim", "tasks/busy", "--holder", "owner", "--ttl", "30s"]);
    assert_eq!(code_claim, 0);
    let marker = node.file("ran");
    let touch = format!("touch '{}'", marker.display());
    let out = node.baton(&[
        "--output",
        "json",
        "run",
        "tasks/busy",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v = parse_json(&out);
    assert_eq!(v["outcome"], "held");
    assert_eq!(v["lease"]["holder_name"], "owner");
    assert_eq!(v["same_name_other_process"], false);
    assert!(!marker.exists(), "nothing runs when the key is held");

    // The holder's name from another process (another session): refused too, and told so.
    let out = node.baton(&[
        "--client-id",
        "another-process",
        "run",
        "tasks/busy",
        "--holder",
        "owner",
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stood_down = text(&out.stdout);
    assert!(stood_down.contains("is held by owner"), "{stood_down}");
    assert!(stood_down.contains("another process"), "{stood_down}");
    assert!(!marker.exists());
}

#[test]
fn run_with_wait_starts_the_child_once_the_holder_releases() {
    let node = start_node();
    let (code_first, first) =
        node.json(&["claim", "tasks/queue", "--holder", "first", "--ttl", "30s"]);
    assert_eq!(code_first, 0, "{first}");
    let token = first["lease"]["token"].as_u64().unwrap();
    let ran = node.file("ran");
    let script = format!("echo $BATON_TOKEN > '{}'", ran.display());
    let run = node.spawn(&[
        "run",
        "tasks/queue",
        "--holder",
        "second",
        "--wait",
        "--timeout",
        "30s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    std::thread::sleep(Duration::from_secs(1));
    assert!(!ran.exists(), "the child waits for the key");
    let (code_release, _) = node.json(&["release", "tasks/queue", "--token", &token.to_string()]);
    assert_eq!(code_release, 0);
    let out = finish_within(run, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let second_token: u64 = std::fs::read_to_string(&ran)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(second_token > token, "a new grant has a larger token");
    assert_eq!(node.lease("tasks/queue"), Value::Null);
}

#[test]
fn child_exit_code_is_passed_through_and_the_key_released() {
    let node = start_node();
    let env_file = node.file("env");
    let script = format!(
        "echo \"$BATON_KEY|$BATON_TOKEN|$BATON_HOLDER|$BATON_ENDPOINTS\" > '{}'; exit 7",
        env_file.display()
    );
    let out = node.baton(&[
        "run",
        "tasks/code",
        "--holder",
        "coder",
        "--ttl",
        "5s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let env = std::fs::read_to_string(&env_file).unwrap();
    let fields: Vec<&str> = env.trim().split('|').collect();
    assert_eq!(fields[0], "tasks/code");
    assert!(fields[1].parse::<u64>().unwrap() > 0, "{env}");
    assert_eq!(fields[2], "coder");
    assert_eq!(fields[3], node.addr);
    assert_eq!(node.lease("tasks/code"), Value::Null);

    // A command that does not exist: 127, and the key is released too.
    let out = node.baton(&["run", "tasks/code", "--", "/nonexistent/command"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(text(&out.stderr).contains("cannot run"), "{out:?}");
    assert_eq!(node.lease("tasks/code"), Value::Null);
}

#[test]
fn revoked_lease_stops_the_childs_whole_process_group_and_exits_3() {
    let node = start_node();
    let pid_file = node.file("grandchild.pid");
    // The shell starts a grandchild and waits; both must stop when the lease is lost.
    let script = format!(
        "sleep 120 & echo $! > '{}.tmp'; mv '{0}.tmp' '{0}'; wait",
        pid_file.display()
    );
    let run = node.spawn(&[
        "--output",
        "json",
        "run",
        "tasks/revoke",
        // Renewals every 18-22 s: a stop before them was pushed by the cluster.
        "--ttl",
        "60s",
        // The group stops on SIGTERM at once; the grace only has to outlast a loaded
        // machine's scheduling (2 s once did not, and the child was SIGKILLed).
        "--grace",
        "5s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_file(&pid_file, Duration::from_secs(10));
    let grandchild: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!process_is_dead(grandchild));

    let revoked = node.baton(&["revoke", "tasks/revoke", "--reason", "host-a is gone"]);
    assert!(revoked.status.success(), "{revoked:?}");
    let out = finish_within(run, Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let stderr = text(&out.stderr);
    // Told at once, explained after.
    let stopping = stderr.find("; stopping the child");
    let explained = stderr.find("): revoked by an operator (client ");
    assert!(
        stderr.contains("baton run: lost tasks/revoke (token ")
            && stopping.is_some()
            && explained > stopping
            && stderr.contains("host-a is gone"),
        "{stderr}"
    );
    // Told apart from an expiry or a handoff in JSON.
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "lost", "{json}");
    assert_eq!(json["loss"]["what"], "revoked", "{json}");
    assert_eq!(json["loss"]["detail"], "host-a is gone", "{json}");
    assert_eq!(json["killed"], false, "{json}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !process_is_dead(grandchild) {
        assert!(
            Instant::now() < deadline,
            "grandchild {grandchild} outlived the lease"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_to_baton_run_reaches_the_child_and_the_key_is_released() {
    let node = start_node();
    let ready = node.file("ready");
    let marker = node.file("got-term");
    let script = format!(
        "trap 'echo term > \"{}\"; exit 5' TERM; touch '{}'; while :; do sleep 0.1; done",
        marker.display(),
        ready.display()
    );
    let run = node.spawn(&[
        "run",
        "tasks/signal",
        "--ttl",
        "10s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_file(&ready, Duration::from_secs(10));
    let pid = Pid::from_raw(i32::try_from(run.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let out = finish_within(run, Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(5), "the child's own code: {out:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "term");
    assert_eq!(node.lease("tasks/signal"), Value::Null);
}

#[test]
fn a_child_that_ignores_sigterm_is_killed_after_the_grace_and_the_key_released() {
    let node = start_node();
    let ready = node.file("ready");
    // Ignored signals stay ignored across exec: the whole group ignores SIGTERM.
    let script = format!(
        "trap '' TERM; touch '{}'; while :; do sleep 0.1; done",
        ready.display()
    );
    let run = node.spawn(&[
        "run",
        "tasks/stubborn",
        "--ttl",
        "10s",
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    wait_for_file(&ready, Duration::from_secs(10));
    let pid = Pid::from_raw(i32::try_from(run.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let out = finish_within(run, Duration::from_secs(15));
    assert_eq!(
        out.status.code(),
        Some(128 + 9),
        "killed by SIGKILL: {out:?}"
    );
    let stderr = text(&out.stderr);
    assert!(stderr.contains("killing it"), "{stderr}");
    assert_eq!(node.lease("tasks/stubborn"), Value::Null, "released");
}

#[test]
fn claim_wait_gets_the_key_soon_after_the_holder_releases_it() {
    let node = start_node();
    let (code_first, first) =
        node.json(&["claim", "tasks/wait", "--holder", "first", "--ttl", "30s"]);
    assert_eq!(code_first, 0, "{first}");
    let token = first["lease"]["token"].as_u64().unwrap().to_string();

    let waiter = node.spawn(&[
        "--output",
        "json",
        "claim",
        "tasks/wait",
        "--holder",
        "second",
        "--ttl",
        "30s",
        "--wait",
        "--timeout",
        "30s",
    ]);
    std::thread::sleep(Duration::from_secs(1));
    let (code_release, released) = node.json(&["release", "tasks/wait", "--token", &token]);
    assert_eq!(code_release, 0, "{released}");
    let released_at = Instant::now();

    let out = finish_within(waiter, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The backoff is capped at 2 s, so the waiter claims again within about that.
    assert!(released_at.elapsed() < Duration::from_secs(6));
    let v = parse_json(&out);
    assert_eq!(v["outcome"], "granted");
    assert_eq!(v["lease"]["holder_name"], "second");
}

#[test]
fn claim_wait_with_a_timeout_on_a_held_key_exits_3_naming_the_holder() {
    let node = start_node();
    let (code_first, _) =
        node.json(&["claim", "tasks/never", "--holder", "keeper", "--ttl", "30s"]);
    assert_eq!(code_first, 0);
    let started = Instant::now();
    let out = node.baton(&[
        "claim",
        "tasks/never",
        "--holder",
        "hopeful",
        "--wait",
        "--timeout",
        "1s",
    ]);
    let waited = started.elapsed();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stdout).contains("is held by keeper"), "{out:?}");
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
}

#[test]
fn a_run_over_a_set_holds_every_key_and_losing_one_stops_the_child_and_frees_the_rest() {
    let node = start_node();
    // Blocked: nothing runs, and the refusal names the holder of the one key that blocked.
    let (code, held) = node.json(&["claim", "sets/b", "--holder", "other"]);
    assert_eq!(code, 0, "{held}");
    let other_token = held["lease"]["token"].as_u64().unwrap();
    let marker = node.file("ran");
    let touch = format!("touch '{}'", marker.display());
    let out = node.baton(&[
        "--output", "json", "run", "sets/a", "sets/b", "--", "sh", "-c", &touch,
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["outcome"], "blocked", "{json}");
    assert_eq!(json["blocked"][0]["key"], "sets/b", "{json}");
    assert_eq!(
        json["blocked"][0]["lease"]["holder_name"], "other",
        "{json}"
    );
    assert!(!marker.exists(), "a blocked set ran the command");
    assert_eq!(
        node.lease("sets/a"),
        Value::Null,
        "a blocked set held sets/a"
    );
    let released = node.baton(&["release", "sets/b", "--token", &other_token.to_string()]);
    assert!(released.status.success(), "{released:?}");

    // Granted: the child sees every key and token; revoking one key stops it and the run
    // frees the other.
    let env_file = node.file("env");
    let script = format!(
        "printf '%s|%s' \"$BATON_KEYS\" \"$BATON_TOKENS\" > '{0}.tmp'; mv '{0}.tmp' '{0}'; \
         sleep 120",
        env_file.display()
    );
    let run = node.spawn(&[
        "--output", "json", "run", "sets/a", "sets/b", "sets/c", "--ttl", "60s", "--grace", "5s",
        "--", "sh", "-c", &script,
    ]);
    wait_for_file(&env_file, Duration::from_secs(10));
    let env = std::fs::read_to_string(&env_file).unwrap();
    let (keys, tokens) = env.split_once('|').unwrap();
    assert_eq!(keys, "sets/a\nsets/b\nsets/c");
    let tokens: Vec<&str> = tokens.lines().collect();
    assert_eq!(tokens.len(), 3, "{env}");
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "one entry, one token: {env}"
    );
    for key in ["sets/a", "sets/b", "sets/c"] {
        assert_eq!(node.lease(key)["token"].to_string(), tokens[0], "{key}");
    }
    let revoked = node.baton(&["revoke", "sets/b", "--now", "--reason", "needed elsewhere"]);
    assert!(revoked.status.success(), "{revoked:?}");
    let out = finish_within(run, Duration::from_secs(15));
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&json["outcome"], &json["key"]),
        (&"lost".into(), &"sets/b".into()),
        "{json}"
    );
    for key in ["sets/a", "sets/c"] {
        assert_eq!(
            node.lease(key),
            Value::Null,
            "{key} stayed held after the run"
        );
    }
}

/// A `baton run` cut off from the quorum stops its child by its safe deadline, and explains
/// the loss only after: the child got SIGTERM 13 s after the claim (TTL 4 s) while the run
/// first asked a cluster out of reach how the lease was lost. Two of three nodes are killed
/// with SIGKILL once the child runs; the majority could grant the key to another at its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_from_the_quorum_stops_its_child_by_the_safe_deadline() {
    const TTL: Duration = Duration::from_secs(4);
    let mut cluster = common::Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let (started, termed) = (dir.path().join("started"), dir.path().join("termed"));
    // Nanoseconds on the wall clock: when the child starts (after the grant, so after the
    // claim was sent) and when it is told to stop.
    let script = format!(
        "trap 'date +%s%N > \"{t}.tmp\"; mv \"{t}.tmp\" \"{t}\"; exit 0' TERM; \
         date +%s%N > \"{s}.tmp\"; mv \"{s}.tmp\" \"{s}\"; \
         while :; do sleep 0.05; done",
        t = termed.display(),
        s = started.display()
    );
    let run = cluster
        .command(&[
            "run", "cut/job", "--ttl", "4s", "--grace", "5s", "--", "sh", "-c", &script,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started, Duration::from_secs(15));
    cluster.kill(2);
    cluster.kill(3);
    let out = finish_within(run, Duration::from_secs(30));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let nanos = |path: &Path| -> u128 {
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{}: {e}; stderr {stderr}", path.display()))
            .trim()
            .parse()
            .unwrap()
    };
    let after = Duration::from_nanos((nanos(&termed) - nanos(&started)) as u64);
    assert!(
        after < TTL,
        "the child got SIGTERM {after:?} after it started, past the lease's TTL of {TTL:?} \
         (so past its safe deadline): {stderr}"
    );
    // Told first, explained after.
    let stopping = stderr.find("baton run: lost cut/job (token ").map(|at| {
        stderr[at..]
            .lines()
            .next()
            .unwrap()
            .ends_with("; stopping the child")
    });
    assert_eq!(stopping, Some(true), "{stderr}");
    assert!(
        stderr.contains("): unconfirmed"),
        "the explanation follows: {stderr}"
    );
}
