//! Records, assignments, history and handoffs through the `baton` CLI against a real
//! single-node `baton-node` process: the two essays' scenarios end to end ("assignment is
//! not ownership", "holder is not a lock"), the token moving in a handoff, and `--git` /
//! `--verify` against a real git checkout.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Node, Setup};
use serde_json::Value;

/// A node whose `baton` runs act as one agent session (not the caller's client id or holder
/// name), outside any git checkout unless a test names one.
fn start_node() -> Node {
    Node::start(Setup {
        unset_env: &["BATON_CLIENT_ID", "BATON_HOLDER"],
        cli_dir: Some(std::env::temp_dir()),
        // One agent session drives every holder name here (the session binding itself is
        // tested in node/tests/who_acted.rs).
        session: Some("test-agent-session"),
        ..Setup::default()
    })
}

fn text(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_assignment_reserves_nothing_and_the_addressee_stands_down_naming_the_holder() {
    let node = start_node();
    let key = "tasks/evidence-42";
    let (code, v) = node.json(&[
        "assign",
        key,
        "--to",
        "alice",
        "--by",
        "dispatcher",
        "--reason",
        "verify four evidence domains",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["record"]["assigned_to"]["to"], "alice");

    // A sibling claims the task off the board: granted, and told who the dispatcher wanted.
    let (code, v) = node.json(&["claim", key, "--holder", "bob", "--ttl", "30s"]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("granted")), "{v}");
    assert_eq!(v["assignment"]["to"], "alice", "{v}");
    assert_eq!(v["assignment"]["by"], "dispatcher", "{v}");
    let bob_token = v["lease"]["token"].as_u64().unwrap();

    // The addressee probes before work: the board names bob; the assignment is beside it.
    let (code, v) = node.json(&["probe", key]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["lease"]["holder_name"], "bob");
    assert_eq!(v["assignment"]["to"], "alice");
    let (code, table, _) = text(&node.baton(&["probe", key]));
    assert_eq!(code, 0);
    assert!(table.contains("bob"), "{table}");
    assert!(table.contains("assigned to alice by dispatcher"), "{table}");
    assert!(
        table.contains("reserves nothing: bob holds the key"),
        "{table}"
    );

    // Claiming anyway loses, and says so, naming the holder: exit 3.
    let (code, v) = node.json(&["claim", key, "--holder", "alice", "--ttl", "30s"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("held")), "{v}");
    assert_eq!(v["lease"]["holder_name"], "bob");
    assert_eq!(v["lease"]["token"].as_u64(), Some(bob_token));
    assert_eq!(v["assignment"]["to"], "alice");
    let (code, table, _) = text(&node.baton(&["claim", key, "--holder", "alice"]));
    assert_eq!(code, 3);
    assert!(table.contains("is held by bob; stand down"), "{table}");

    // The dispatcher clears the assignment: recorded in the history with who did it and
    // what it was; probe shows none; clearing again changes nothing and records nothing.
    let clear = [
        "assign",
        key,
        "--clear",
        "--by",
        "lead",
        "--reason",
        "bob has it",
    ];
    let (code, v) = node.json(&clear);
    assert_eq!(
        (code, &v["outcome"]),
        (0, &Value::from("unassigned")),
        "{v}"
    );
    assert!(v["record"]["assigned_to"].is_null(), "{v}");
    let (code, v) = node.json(&["probe", key]);
    assert_eq!(code, 0, "{v}");
    assert!(v["assignment"].is_null(), "{v}");
    assert_eq!(
        v["lease"]["holder_name"], "bob",
        "the lease is untouched: {v}"
    );
    assert_eq!(node.json(&clear).0, 0);
    let (code, v) = node.json(&["history", key]);
    assert_eq!(code, 0, "{v}");
    let events = v["events"].as_array().unwrap();
    let cleared: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "unassigned")
        .collect();
    assert_eq!(cleared.len(), 1, "{v}");
    assert_eq!(cleared[0]["actor"]["name"], "lead", "{v}");
    assert_eq!(
        cleared[0]["actor"]["client_id"], "test-agent-session",
        "{v}"
    );
    assert_eq!(cleared[0]["token"].as_u64(), Some(bob_token), "{v}");
    assert_eq!(
        cleared[0]["detail"],
        "was to alice by dispatcher; bob has it"
    );
    let (code, table, _) = text(&node.baton(&["history", key]));
    assert_eq!(code, 0);
    assert!(table.contains("unassigned by lead"), "{table}");
    // An addressee and --clear together, or neither, is a usage error (exit 2).
    let (code, _, err) = text(&node.baton(&["assign", key, "--clear", "--to", "x"]));
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = text(&node.baton(&["assign", key]));
    assert_eq!(code, 2, "{err}");
}

#[test]
fn only_the_token_holder_writes_the_record_and_history_attributes_each_update_to_its_stint() {
    let node = start_node();
    let key = "tasks/incident-7";
    let claude = node.claim(key, "claude@a");
    let c = claude.to_string();
    let (code, v) = node.json(&[
        "update",
        key,
        "--token",
        &c,
        "--status",
        "in_progress",
        "--summary",
        "root cause: stale cache",
    ]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("updated")), "{v}");
    assert_eq!(v["record"]["status"], "in_progress");
    let (code, v) = node.json(&["release", key, "--token", &c]);
    assert_eq!(code, 0, "{v}");

    let codex = node.claim(key, "codex@b");
    assert!(codex > claude);
    let x = codex.to_string();
    let (code, v) = node.json(&[
        "update", key, "--token", &x, "--status", "verified", "--set", "pr=482",
    ]);
    assert_eq!(code, 0, "{v}");

    // The stale writer still believes it owns the account of the work: refused, exit 3,
    // told who holds it and with which token. Nothing changes.
    let (code, v) = node.json(&["update", key, "--token", &c, "--status", "done"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("codex@b") && message.contains(&x),
        "{message}"
    );
    let (code, table, _) = text(&node.baton(&["update", key, "--token", &c, "--summary", "x"]));
    assert_eq!(code, 3);
    assert!(
        table.starts_with("refused: ") && table.contains("codex@b"),
        "{table}"
    );
    let (_, v) = node.json(&["record", key]);
    assert_eq!(v["record"]["status"], "verified", "{v}");
    assert_eq!(v["record"]["fields"]["pr"], "482");
    assert_eq!(v["lease"]["holder_name"], "codex@b");

    // The final word goes in the same entry as the release.
    let (code, v) = node.json(&["release", key, "--token", &x, "--status", "done"]);
    assert_eq!(code, 0, "{v}");
    let (_, v) = node.json(&["record", key]);
    assert_eq!(v["record"]["status"], "done", "{v}");

    // One author per stint: each update is attributed to the holder whose token wrote it.
    let (code, v) = node.json(&["history", key]);
    assert_eq!(code, 0, "{v}");
    let stints = v["stints"].as_array().unwrap();
    assert_eq!(stints.len(), 2, "{v}");
    assert_eq!(stints[0]["holder_name"], "claude@a");
    assert_eq!(stints[0]["token"].as_u64(), Some(claude));
    assert_eq!(stints[0]["ended_by"], "released");
    assert_eq!(stints[0]["updates"].as_array().unwrap().len(), 1);
    assert_eq!(stints[0]["updates"][0]["actor"]["name"], "claude@a");
    assert_eq!(stints[1]["holder_name"], "codex@b");
    assert_eq!(stints[1]["token"].as_u64(), Some(codex));
    assert_eq!(stints[1]["ended_by"], "released");
    assert!(!stints[1]["updates"].as_array().unwrap().is_empty());
    let (code, table, _) = text(&node.baton(&["history", key]));
    assert_eq!(code, 0);
    let claude_row = table.find("claude@a").unwrap();
    let codex_row = table.find("codex@b").unwrap();
    let first_update = table.find("updated by claude@a").unwrap();
    assert!(
        claude_row < first_update && first_update < codex_row,
        "{table}"
    );
    let (code, events, _) = text(&node.baton(&["history", key, "--events"]));
    assert_eq!(code, 0);
    assert!(events.starts_with("REV"), "{events}");
}

#[test]
fn an_accepted_handoff_moves_the_token_and_kills_the_old_one() {
    let node = start_node();
    let key = "tasks/handoff";
    let old = node.claim(key, "claude@a");
    let t = old.to_string();
    let (code, v) = node.json(&[
        "handoff",
        "offer",
        key,
        "--token",
        &t,
        "--to",
        "bob",
        "--commit",
        "4f2a9c0",
        "--done",
        "root cause found",
        "--remaining",
        "verify on staging",
        "--first-step",
        "make test",
        "--fact",
        "count=4::echo 4",
    ]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("offered")), "{v}");
    assert_eq!(v["offer"]["to"], "bob");
    assert_eq!(v["offer"]["from_token"].as_u64(), Some(old));

    // While the offer waits the giver keeps the key, but the record is frozen.
    let (code, v) = node.json(&["check", key, "--token", &t]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = node.json(&["update", key, "--token", &t, "--status", "done"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");
    let (_, v) = node.json(&["record", key]);
    assert_eq!(v["record"]["pending_offer"]["to"], "bob", "{v}");
    // One offer at a time; only the addressee may accept.
    let (code, v) = node.json(&["handoff", "offer", key, "--token", &t, "--to", "carol"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");
    let (code, v) = node.json(&["handoff", "accept", key, "--holder", "carol"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");

    let (code, v) = node.json(&["handoff", "accept", key, "--holder", "bob", "--ttl", "30s"]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("accepted")), "{v}");
    let new = v["lease"]["token"].as_u64().unwrap();
    assert!(new > old);
    assert_eq!(v["lease"]["holder_name"], "bob");
    assert_eq!(v["from"]["name"], "claude@a");
    assert_eq!(v["note"]["done"], "root cause found");
    assert_eq!(v["note"]["volatile_facts"][0]["claimed_value"], "4");
    assert_eq!(v["verification"], Value::Null);

    // The old token is dead everywhere; the new one works.
    let n = new.to_string();
    let (code, v) = node.json(&["check", key, "--token", &t]);
    assert_eq!((code, &v["current"]), (3, &Value::Bool(false)), "{v}");
    let (code, v) = node.json(&["update", key, "--token", &t, "--status", "done"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");
    let (code, v) = node.json(&["renew", key, "--token", &t]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("lost")), "{v}");
    assert_eq!(v["current"]["holder_name"], "bob");
    let (code, v) = node.json(&["release", key, "--token", &t]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("lost")), "{v}");
    let (code, v) = node.json(&["check", key, "--token", &n]);
    assert_eq!((code, &v["current"]), (0, &Value::Bool(true)), "{v}");
    let (code, v) = node.json(&["update", key, "--token", &n, "--status", "verified"]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = node.json(&["renew", key, "--token", &n]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("renewed")), "{v}");

    let (_, v) = node.json(&["history", key]);
    let stints = v["stints"].as_array().unwrap();
    assert_eq!(stints.len(), 2, "{v}");
    assert_eq!(stints[0]["ended_by"], "accepted");
    assert_eq!(stints[0]["handoff_events"][0]["kind"], "offered");
    assert_eq!(stints[1]["holder_name"], "bob");
    assert_eq!(stints[1]["token"].as_u64(), Some(new));
    assert_eq!(stints[1]["updates"][0]["actor"]["name"], "bob");

    let (code, v) = node.json(&["release", key, "--token", &n]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("released")), "{v}");
}

#[test]
fn decline_and_cancel_leave_the_key_with_the_giver() {
    let node = start_node();
    let key = "tasks/declined";
    let t = node.claim(key, "claude@a").to_string();
    let offer = [
        "handoff", "offer", key, "--token", &t, "--to", "bob", "--ttl", "1m",
    ];

    let (code, v) = node.json(&offer);
    assert_eq!(code, 0, "{v}");
    let (code, v) = node.json(&["handoff", "decline", key, "--holder", "carol"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");
    let (code, v) = node.json(&["handoff", "decline", key, "--holder", "bob"]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("declined")), "{v}");
    let (code, v) = node.json(&["check", key, "--token", &t]);
    assert_eq!(code, 0, "the giver keeps the key: {v}");
    let (code, v) = node.json(&["update", key, "--token", &t, "--status", "blocked"]);
    assert_eq!(code, 0, "the record thawed: {v}");

    let (code, v) = node.json(&offer);
    assert_eq!(code, 0, "a new offer after a decline: {v}");
    let (code, v) = node.json(&["handoff", "cancel", key, "--token", &t]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("cancelled")), "{v}");
    let (code, v) = node.json(&["handoff", "accept", key, "--holder", "bob"]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("refused")), "{v}");
    let (code, v) = node.json(&["handoff", "cancel", key, "--token", &t]);
    assert_eq!(
        (code, &v["outcome"]),
        (3, &Value::from("refused")),
        "nothing to cancel: {v}"
    );
    let (code, v) = node.json(&["update", key, "--token", &t, "--status", "open"]);
    assert_eq!(code, 0, "{v}");
    let (_, v) = node.json(&["probe", key]);
    assert_eq!(v["lease"]["holder_name"], "claude@a");
}

/// Runs git in `dir` with a fixed identity, panicking on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository with one commit and one uncommitted change to a tracked file.
fn dirty_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "-q", "-m", "first"]);
    std::fs::write(dir.path().join("a.txt"), "a, changed\n").unwrap();
    dir
}

#[test]
fn offer_with_git_records_head_and_the_dirty_files_and_accept_verify_compares_them() {
    let node = start_node();
    let repo = dirty_repo();
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    let key = "tasks/git";
    let t = node.claim(key, "claude@a").to_string();

    let out = node.baton_in(
        repo.path(),
        &[
            "--output", "json", "handoff", "offer", key, "--token", &t, "--to", "bob", "--git",
            "--done", "half",
        ],
    );
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(
        stderr.contains("the working tree has 1 uncommitted file: a.txt"),
        "{stderr}"
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["offer"]["note"]["commit"], head.as_str());
    assert_eq!(v["offer"]["note"]["branch"], "main");
    assert_eq!(
        v["offer"]["note"]["dirty_files"],
        serde_json::json!(["a.txt"])
    );

    // The taker, in the same checkout: the commit matches, the dirty file is in the note.
    let (code, v) = node.json_in(
        repo.path(),
        &["handoff", "accept", key, "--holder", "bob", "--verify"],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["verification"]["commit"]["verdict"], "match", "{v}");
    assert_eq!(v["verification"]["commit"]["local_commit"], head.as_str());
    assert_eq!(
        v["verification"]["dirty_files_not_in_note"],
        serde_json::json!([])
    );
}

#[test]
fn accept_verify_runs_each_check_and_reports_a_changed_value() {
    let node = start_node();
    let repo = dirty_repo();
    let key = "tasks/verify";
    let t = node.claim(key, "claude@a").to_string();
    let (code, v) = node.json(&[
        "handoff",
        "offer",
        key,
        "--token",
        &t,
        "--to",
        "bob",
        "--commit",
        "0123456789abcdef0123456789abcdef01234567",
        "--fact",
        "count=4::echo 5",
        "--fact",
        "same=yes::echo yes",
    ]);
    assert_eq!(code, 0, "{v}");

    // The taker reads the note and checks its facts before taking anything: exit 5.
    let out = node.baton_in(repo.path(), &["handoff", "show", key, "--verify"]);
    let (code, stdout, stderr) = text(&out);
    assert_eq!(code, 5, "{stdout} {stderr}");
    assert!(
        stdout.contains(&format!("claude@a offers {key} (token {t}) to bob")),
        "{stdout}"
    );
    assert!(stdout.contains("claimed 4, actual 5: CHANGED"), "{stdout}");
    let (code, v) = node.json(&["handoff", "show", key]);
    assert_eq!((code, &v["outcome"]), (0, &Value::from("pending")), "{v}");
    assert_eq!(
        v["offer"]["from_token"].as_u64(),
        Some(t.parse().unwrap()),
        "{v}"
    );
    // Reading changed nothing: the giver still holds the key.
    assert_eq!(node.lease(key)["holder_name"], "claude@a");

    let out = node.baton_in(
        repo.path(),
        &["handoff", "accept", key, "--holder", "bob", "--verify"],
    );
    let (code, stdout, stderr) = text(&out);
    // Accepted (bob holds the key), but a fact changed: its own exit code.
    assert_eq!(code, 5, "{stdout} {stderr}");
    assert_eq!(node.lease(key)["holder_name"], "bob");
    let (code, v) = node.json(&["handoff", "show", key]);
    assert_eq!((code, &v["outcome"]), (3, &Value::from("no_offer")), "{v}");
    assert_eq!(v["last_note"]["volatile_facts"][0]["name"], "count", "{v}");
    // Each command is shown before it runs.
    assert!(
        stderr.contains("checking count with the giver's command: sh -c 'echo 5'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("checking same with the giver's command: sh -c 'echo yes'"),
        "{stderr}"
    );
    assert!(stdout.contains("needs verification"), "{stdout}");
    assert!(stdout.contains("claimed 4, actual 5: CHANGED"), "{stdout}");
    assert!(
        stdout.contains("claimed yes, actual yes: MATCH"),
        "{stdout}"
    );
    let head = git(repo.path(), &["rev-parse", "HEAD"]);
    assert!(
        stdout.contains(&format!(
            "your checkout is at {head}, the note says 0123456789abcdef0123456789abcdef01234567"
        )),
        "{stdout}"
    );
}
