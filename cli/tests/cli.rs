//! The `baton` CLI against a real single-node `baton-node` process: outputs, JSON shapes and
//! the exit codes of the SPEC (0 ok, 1 error, 2 usage, 3 held/lost/stale, 4 unavailable).

mod common;

use std::process::Command;

use common::{cli_bin, free_port, Node, Setup};
use serde_json::Value;

/// A node whose `baton` runs do not inherit the caller's client id.
fn start_node() -> Node {
    Node::start(Setup {
        unset_env: &["BATON_CLIENT_ID"],
        ..Setup::default()
    })
}

#[test]
fn claim_probe_check_renew_release_round_trip_with_exit_codes() {
    let node = start_node();
    // Alice's session: her later commands on the lease run with the same client id.
    let alice = |args: &[&str]| node.json(&[&["--client-id", "alice-session"], args].concat());
    let (code, v) = alice(&["claim", "tasks/cli", "--holder", "alice", "--ttl", "30s"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["outcome"], "granted");
    let token = v["lease"]["token"].as_u64().unwrap();
    assert_eq!(v["lease"]["holder_name"], "alice");

    // Someone else: held, naming alice and her token; exit 3 = stand down.
    let (code, v) = node.json(&["claim", "tasks/cli", "--holder", "bob", "--ttl", "30s"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["outcome"], "held");
    assert_eq!(v["lease"]["holder_name"], "alice");
    assert_eq!(v["lease"]["token"].as_u64(), Some(token));

    let (code, v) = node.json(&["probe", "tasks/cli"]);
    assert_eq!((code, v["lease"]["token"].as_u64()), (0, Some(token)));

    let t = token.to_string();
    let stale = (token + 1000).to_string();
    let (code, v) = node.json(&["check", "tasks/cli", "--token", &t]);
    assert_eq!((code, &v["current"]), (0, &Value::Bool(true)));
    let (code, v) = node.json(&["check", "tasks/cli", "--token", &stale]);
    assert_eq!((code, &v["current"]), (3, &Value::Bool(false)));

    let (code, v) = alice(&["renew", "tasks/cli", "--token", &t]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("renewed")), "{v}");
    // From another session, the right token is refused, naming both sessions.
    let (code, v) = node.json(&["renew", "tasks/cli", "--token", &t]);
    assert_eq!(
        (code, &v["reason"]),
        (3, &Value::from("wrong_session")),
        "{v}"
    );
    assert_eq!(v["refusal"]["lease"]["holder_client_id"], "alice-session");
    let (code, v) = alice(&["release", "tasks/cli", "--token", &stale]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("lost")), "{v}");
    let (code, v) = alice(&["release", "tasks/cli", "--token", &t]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("released")), "{v}");

    let (code, v) = node.json(&["probe", "tasks/cli"]);
    assert_eq!((code, &v["lease"]), (0, &Value::Null));
}

#[test]
fn the_same_client_id_in_two_cli_runs_is_the_same_holder() {
    let node = start_node();
    let args = [
        "--client-id",
        "agent-7",
        "claim",
        "tasks/same",
        "--holder",
        "agent",
        "--ttl",
        "30s",
    ];
    let (code, first) = node.json(&args);
    assert_eq!(code, 0, "{first}");
    assert_eq!(first["already_held"], false);
    let (code, second) = node.json(&args);
    assert_eq!(code, 0, "{second}");
    assert_eq!(second["already_held"], true, "{second}");
    assert_eq!(second["lease"]["token"], first["lease"]["token"]);
    // The same name from another process is refused, and told so.
    let (code, other) = node.json(&["claim", "tasks/same", "--holder", "agent", "--ttl", "30s"]);
    assert_eq!(code, 3);
    assert_eq!(other["same_name_other_process"], true, "{other}");
}

#[test]
fn bad_input_exits_1_with_the_servers_message_and_changes_nothing() {
    let node = start_node();
    let long_key = "k".repeat(513);
    for args in [
        vec!["claim", "", "--ttl", "30s"],
        vec!["claim", long_key.as_str(), "--ttl", "30s"],
        vec!["claim", "tasks/bad", "--ttl", "10ms"],
        vec!["claim", "tasks/bad", "--ttl", "2h"],
    ] {
        let out = node.baton(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
    let (code, v) = node.json(&["board"]);
    assert_eq!(code, 0);
    assert_eq!(v["leases"], Value::Array(vec![]), "nothing was claimed");
}

#[test]
fn usage_errors_exit_2_and_an_unreachable_cluster_exits_4() {
    let out = Command::new(cli_bin()).args(["claim"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let dead = format!("127.0.0.1:{}", free_port());
    let out = Command::new(cli_bin())
        .args(["--endpoints", &dead, "--timeout", "1s", "probe", "tasks/x"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unavailable"));
}

#[test]
fn an_empty_environment_variable_is_unset_and_the_help_lists_every_exit_code() {
    let dead = format!("127.0.0.1:{}", free_port());
    // `BATON_TLS_CA=` (as a script that clears it writes) is no CA, not a usage error: the
    // command runs, in plaintext, and finds no node (exit 4, not 2).
    let out = Command::new(cli_bin())
        .args(["--endpoints", &dead, "--timeout", "1s", "probe", "tasks/x"])
        .env("BATON_TLS_CA", "")
        .env("BATON_CLIENT_ID", "")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(cli_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let codes = help
        .lines()
        .find(|line| line.starts_with("Exit codes:"))
        .unwrap_or_else(|| panic!("{help}"));
    for code in [
        "0 ok",
        "1 error",
        "2 usage",
        "3 held",
        "4 cluster unavailable",
        "5 facts changed",
    ] {
        assert!(codes.contains(code), "{code}: {codes}");
    }
}

#[test]
fn with_no_node_listening_the_cli_says_so_within_a_second_naming_the_endpoints() {
    let dead = format!("127.0.0.1:{}", free_port());
    let started = std::time::Instant::now();
    let mut child = Command::new(cli_bin())
        .args(["--endpoints", &dead, "--timeout", "4s", "probe", "tasks/x"])
        .env_remove("BATON_ENDPOINTS")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The hint comes long before the 4 s retry deadline: read stderr's first line.
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stderr.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    let said_after = started.elapsed();
    assert!(
        first.contains(&format!("no node accepts connections at {dead}"))
            && first.contains("baton-node dev"),
        "{first}"
    );
    assert!(
        said_after < std::time::Duration::from_secs(3),
        "{said_after:?}"
    );
    assert_eq!(child.wait().unwrap().code(), Some(4));
}

#[test]
fn claim_wait_says_what_it_waits_for_and_an_out_of_range_ttl_is_said_in_seconds() {
    let node = start_node();
    let (code, v) = node.json(&["claim", "tasks/w", "--holder", "alice", "--ttl", "30s"]);
    assert_eq!(code, 0, "{v}");
    let token = v["lease"]["token"].as_u64().unwrap();
    let out = node.baton(&[
        "claim",
        "tasks/w",
        "--holder",
        "bob",
        "--wait",
        "--timeout",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "waiting in line for tasks/w: position 1 of 1; held by alice (token {token}) since "
        )) && err.contains("waiting up to 1s"),
        "{err}"
    );
    // Out of time, it left the line; `--poll` waits the old way, by claiming again.
    let (_, v) = node.json(&["probe", "tasks/w"]);
    assert_eq!(v.get("line"), None, "{v}");
    let out = node.baton(&[
        "claim",
        "tasks/w",
        "--holder",
        "bob",
        "--wait",
        "--poll",
        "--timeout",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "waiting for tasks/w: held by alice (token {token}) since "
        )),
        "{err}"
    );
    let out = node.baton(&["claim", "tasks/w2", "--ttl", "1s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("ttl 1s is out of range: give ") && err.contains(" to 1h"),
        "{err}"
    );
}

/// Ctrl-C on a wait in line leaves the line at once: those behind it do not wait for a place
/// no one renews to lapse (its TTL here is a minute).
#[test]
fn an_interrupted_wait_in_line_leaves_the_line_at_once() {
    let node = start_node();
    let (code, v) = node.json(&["claim", "tasks/i", "--holder", "alice", "--ttl", "60s"]);
    assert_eq!(code, 0, "{v}");
    let mut waiting = node.spawn(&[
        "claim",
        "tasks/i",
        "--holder",
        "bob",
        "--ttl",
        "60s",
        "--wait",
        "--timeout",
        "60s",
    ]);
    let in_line = || node.json(&["probe", "tasks/i"]).1["line"]["waiters"].as_u64();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while in_line() != Some(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "bob never joined the line"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = nix::unistd::Pid::from_raw(waiting.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = waiting.wait().unwrap();
    assert_eq!(status.code(), Some(130), "128 + SIGINT");
    let (_, v) = node.json(&["probe", "tasks/i"]);
    assert_eq!(v.get("line"), None, "bob left the line at once: {v}");
    assert_eq!(v["lease"]["holder_name"], "alice", "{v}");
}

#[test]
fn shell_completions_are_printed_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "_baton()"),
        ("zsh", "#compdef baton"),
        ("fish", "complete -c baton"),
    ] {
        let out = Command::new(cli_bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("claim") && script.contains("handoff"),
            "{shell}"
        );
    }
}

#[test]
fn a_quarantined_key_shows_as_such_in_probe_and_record_and_the_rules_list() {
    let node = start_node();
    let (code, v) = node.json(&["quarantine", "q/", "--delay", "30s"]);
    assert_eq!(
        (code, &v["rules_ms"]["q/"]),
        (0, &Value::from(30_000)),
        "{v}"
    );
    let (code, v) = node.json(&["quarantine"]);
    assert_eq!(
        (code, &v["rules_ms"]["q/"]),
        (0, &Value::from(30_000)),
        "{v}"
    );
    let (code, v) = node.json(&["claim", "q/a", "--holder", "alice", "--ttl", "2s"]);
    assert_eq!(code, 0, "{v}");
    // The lease runs out with no renewal: an involuntary expiry under the rule.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let probe = loop {
        let (code, v) = node.json(&["probe", "q/a"]);
        assert_eq!(code, 0, "{v}");
        if v["lease"].is_null() {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "never expired: {v}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(probe["quarantine"]["delay_ms"], 30_000, "{probe}");
    let left = probe["quarantine"]["remaining_ms"].as_u64().unwrap();
    assert!(left > 20_000 && left <= 30_000, "{probe}");
    // Free, yet a claim is refused: probe says so instead of "free".
    let out = node.baton(&["probe", "q/a"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("q/a is quarantined: no one holds it, but claims are refused for another "),
        "{text}"
    );
    let (code, v) = node.json(&["claim", "q/a", "--holder", "bob"]);
    assert_eq!(
        (code, &v["reason"]),
        (3, &Value::from("quarantined")),
        "{v}"
    );
    let (code, v) = node.json(&["record", "q/a"]);
    assert_eq!(
        (code, &v["quarantine"]["delay_ms"]),
        (0, &Value::from(30_000)),
        "{v}"
    );
    let (code, v) = node.json(&["board", "q/"]);
    assert_eq!((code, &v["leases"]), (0, &serde_json::json!([])), "{v}");
    assert_eq!(v["quarantines"]["q/a"]["delay_ms"], 30_000, "{v}");
    let out = node.baton(&["board", "q/"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "quarantined or revoked (no holder; claims are refused until each ends):\n  q/a  free in "
        ),
        "{text}"
    );
    // A default revoke holds the key back for the lease's TTL, and every view says so.
    let (code, v) = node.json(&["claim", "r/a", "--holder", "alice", "--ttl", "30s"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = node.json(&["revoke", "r/a", "--reason", "stuck"]);
    assert_eq!(
        (code, &v["claimable_in_ms"]),
        (0, &Value::from(30_000)),
        "{v}"
    );
    let (code, v) = node.json(&["claim", "r/a", "--holder", "bob"]);
    assert_eq!(
        (code, &v["reason"], &v["refusal"]["quarantine_revoked"]),
        (3, &Value::from("quarantined"), &Value::Bool(true)),
        "{v}"
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("r/a was revoked (revision "),
        "{v}"
    );
    let out = node.baton(&["board", "r/"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("  r/a  revoked, claimable in "), "{text}");
    let out = node.baton(&["probe", "r/a"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("r/a was revoked: no one holds it"), "{text}");
    // `--now` frees a key at once.
    let (code, v) = node.json(&["claim", "r/b", "--holder", "alice", "--ttl", "30s"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = node.json(&["revoke", "r/b", "--reason", "fenced", "--now"]);
    assert_eq!((code, &v["claimable_in_ms"]), (0, &Value::from(0)), "{v}");
    let (code, v) = node.json(&["claim", "r/b", "--holder", "bob"]);
    assert_eq!(code, 0, "{v}");
    let (_, v) = node.json(&["board", "other/"]);
    assert_eq!(v["quarantines"], serde_json::json!({}), "{v}");
    // 0s removes the rule; the list is empty again.
    let (code, v) = node.json(&["quarantine", "q/", "--delay", "0s"]);
    assert_eq!((code, &v["rules_ms"]), (0, &serde_json::json!({})), "{v}");
    let out = node.baton(&["quarantine"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "no quarantine rules\n"
    );
}

#[test]
fn tables_are_coloured_at_a_terminal_only_and_never_with_no_color() {
    let node = start_node();
    // `script` gives the command a terminal (util-linux, on every Debian).
    let at_terminal = |extra_env: &str, key: &str| {
        let command = format!(
            "{extra_env} {} --endpoints {} claim {key} --holder alice --ttl 30s",
            cli_bin().display(),
            node.addr
        );
        let out = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env("TERM", "xterm")
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let coloured = at_terminal("", "tasks/colour-a");
    assert!(
        coloured.contains("\x1b[32mgranted\x1b[0m tasks/colour-a"),
        "{coloured:?}"
    );
    let plain = at_terminal("NO_COLOR=1", "tasks/colour-b");
    assert!(
        plain.contains("granted tasks/colour-b") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    // Piped: plain.
    let out = node.baton(&[
        "claim",
        "tasks/colour-c",
        "--holder",
        "alice",
        "--ttl",
        "30s",
    ]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));
}

#[test]
fn board_table_and_revoke() {
    let node = start_node();
    for key in ["team/a", "team/b", "other/c"] {
        let out = node.baton(&["claim", key, "--holder", "carol", "--ttl", "30s"]);
        assert!(out.status.success());
    }
    let out = node.baton(&["board", "team/"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().next().unwrap().starts_with("KEY"), "{table}");
    assert!(
        table.contains("team/a") && table.contains("team/b") && !table.contains("other/c"),
        "{table}"
    );

    let (code, v) = node.json(&["revoke", "team/a", "--reason", "agent crashed"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["revoked"]["holder_name"], "carol");
    let (_, v) = node.json(&["probe", "team/a"]);
    assert_eq!(v["lease"], Value::Null);
}

#[test]
fn the_board_shows_assigned_keys_nobody_holds_until_they_are_claimed() {
    let node = start_node();
    for key in ["work/1", "work/2"] {
        let out = node.baton(&[
            "assign",
            key,
            "--to",
            "claude@a",
            "--by",
            "dispatcher",
            "--reason",
            "triage",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    let out = node.baton(&["claim", "work/3", "--holder", "carol", "--ttl", "30s"]);
    assert!(out.status.success());
    let out = node.baton(&["board", "work/"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("assigned, unclaimed"), "{table}");
    assert!(
        table.contains("  work/1  to claude@a by dispatcher since ") && table.contains("work/2"),
        "{table}"
    );
    let (code, v) = node.json(&["board", "work/", "--unclaimed"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["leases"], serde_json::json!([]), "{v}");
    assert_eq!(v["unclaimed"]["work/1"]["to"], "claude@a", "{v}");
    assert_eq!(v["unclaimed"]["work/1"]["by"], "dispatcher", "{v}");
    assert!(
        v["unclaimed"]["work/1"]["assigned_at_unix_ms"]
            .as_u64()
            .unwrap()
            > 0
    );
    // Claimed by its assignee (or anyone), it is no longer waiting.
    let out = node.baton(&["claim", "work/1", "--holder", "claude@a", "--ttl", "30s"]);
    assert!(out.status.success());
    let (_, v) = node.json(&["board", "work/", "--unclaimed", "--limit", "1"]);
    let waiting: Vec<&String> = v["unclaimed"].as_object().unwrap().keys().collect();
    assert_eq!(waiting, ["work/2"], "{v}");
    assert_eq!(v["unclaimed_truncated"], false, "{v}");
    // Assigning a key someone else holds says who holds it (and records it all the same).
    let out = node.baton(&["assign", "work/1", "--to", "bob", "--by", "dispatcher"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("held by claude@a (token ") && text.contains("reserves nothing"),
        "{text}"
    );
    let (code, v) = node.json(&["assign", "work/2", "--to", "bob", "--by", "dispatcher"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["lease"], Value::Null, "{v}");
    assert_eq!(v["record"]["assigned_to"]["to"], "bob", "{v}");
}
