//! `baton mcp`'s `handoff_offer` when the server does not run in a git checkout, and the
//! refusal object an agent (or a script of the CLI) reads: a real cluster, each agent
//! session a real `baton mcp` child process over stdio.

mod common;
mod mcp_common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{parse_json, Cluster};
use mcp_common::{agent, call, call_refused};
use serde_json::{json, Value};

/// Whether `dir` is inside a git repository, as git itself says.
fn in_git_repository(dir: &Path) -> bool {
    std::process::Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(dir)
        .output()
        .unwrap()
        .status
        .success()
}

/// The field names of a JSON object.
fn fields(object: &Value) -> BTreeSet<&str> {
    object
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {object}"))
        .keys()
        .map(String::as_str)
        .collect()
}

#[tokio::test]
async fn an_offer_outside_a_git_repository_changes_nothing_and_names_the_directory_and_the_commit_argument(
) {
    let cluster = Cluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    assert!(
        !in_git_repository(dir.path()),
        "{} is inside a git repository: this test needs a directory outside one",
        dir.path().display()
    );
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let granted = call(&a, "claim", json!({"key": "tasks/h"})).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let note = json!({
        "key": "tasks/h", "to": "codex@b",
        "done": "parsed the logs", "remaining": "write the report", "first_step": "open report.md"
    });
    let with = |extra: Value| {
        let mut args = note.clone();
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };

    // By default the note records the checkout's commit; there is none here, so the call
    // is a tool error that names the server's directory and the tool's own arguments.
    let error = call_refused(&a, "handoff_offer", note.clone()).await;
    let dir_name = dir.path().display().to_string();
    for words in [
        dir_name.as_str(),
        "is not a git repository",
        "`commit`",
        "`git: false`",
    ] {
        assert!(error.contains(words), "no {words:?} in: {error}");
    }
    assert!(
        !error.contains("--git") && !error.contains("--commit"),
        "an MCP answer names the CLI's flags: {error}"
    );
    let probe = call(&a, "probe", json!({"key": "tasks/h"})).await;
    assert_eq!(
        probe["result"]["pending_offer"],
        Value::Null,
        "the refused call offered: {probe}"
    );

    // The commit given as the tool's argument is the note's: the taker reads it.
    let offered = call(&a, "handoff_offer", with(json!({"commit": "4f2a9c1"}))).await;
    assert_eq!(offered["result"]["outcome"], "offered", "{offered}");
    assert!(
        !offered["result"]["instruction"]
            .as_str()
            .unwrap()
            .contains("names no commit"),
        "{offered}"
    );
    let accepted = call(&b, "handoff_accept", json!({"key": "tasks/h"})).await;
    assert_eq!(accepted["result"]["outcome"], "accepted", "{accepted}");
    assert_eq!(
        accepted["result"]["details"]["note"]["commit"], "4f2a9c1",
        "{accepted}"
    );

    // `git: false` and no commit: offered, with a warning in the tool's own terms.
    let back = call(
        &b,
        "handoff_offer",
        with(json!({"to": "claude@a", "git": false})),
    )
    .await;
    assert_eq!(back["result"]["outcome"], "offered", "{back}");
    let instruction = back["result"]["instruction"].as_str().unwrap();
    assert!(
        instruction.contains("names no commit") && instruction.contains("`commit`"),
        "{instruction}"
    );
    assert!(
        !instruction.contains("--git") && !instruction.contains("--commit"),
        "an MCP answer names the CLI's flags: {instruction}"
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

#[tokio::test]
async fn a_refusal_carries_only_its_reasons_fields_over_mcp_and_in_the_clis_json() {
    let cluster = Cluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let granted = call(&a, "claim", json!({"key": "tasks/r"})).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let offer = json!({
        "key": "tasks/r", "to": "codex@b", "commit": "4f2a9c1",
        "done": "d", "remaining": "r", "first_step": "f"
    });
    let offered = call(&a, "handoff_offer", offer.clone()).await;
    assert_eq!(offered["result"]["outcome"], "offered", "{offered}");

    // A second offer while the first is pending: offer_pending, with the offer's facts
    // alone (docs/cli-json.md, "Fields by reason").
    let refused = call(&a, "handoff_offer", offer).await;
    let refusal = &refused["result"]["refusal"];
    assert_eq!(refusal["reason"], "offer_pending", "{refused}");
    assert_eq!(refusal["offer_to"], "codex@b", "{refused}");
    assert_eq!(
        fields(refusal),
        BTreeSet::from([
            "reason",
            "key",
            "assignment",
            "offer_to",
            "offer_revision",
            "message"
        ]),
        "{refused}"
    );

    // The CLI's JSON: a decline with no offer addressed to anyone is no_offer, with no fact
    // of another reason beside it.
    let out = cluster.baton(&[
        "--output",
        "json",
        "handoff",
        "decline",
        "tasks/none",
        "--holder",
        "codex@b",
    ]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let json = parse_json(&out);
    assert_eq!(json["reason"], "no_offer", "{json}");
    assert_eq!(
        fields(&json["refusal"]),
        BTreeSet::from(["reason", "key", "assignment", "message"]),
        "{json}"
    );
    a.cancel().await.unwrap();
}

#[tokio::test]
async fn an_offer_from_a_server_in_a_checkout_records_its_head_by_default() {
    let cluster = Cluster::start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    git(&["init", "-q"]);
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "a"]);
    let head = git(&["rev-parse", "HEAD"]);
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let granted = call(&a, "claim", json!({"key": "tasks/g"})).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let offered = call(
        &a,
        "handoff_offer",
        json!({"key": "tasks/g", "to": "codex@b", "done": "d", "remaining": "r",
               "first_step": "f"}),
    )
    .await;
    assert_eq!(offered["result"]["outcome"], "offered", "{offered}");
    let accepted = call(&b, "handoff_accept", json!({"key": "tasks/g"})).await;
    assert_eq!(
        accepted["result"]["details"]["note"]["commit"], head,
        "{accepted}"
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}
