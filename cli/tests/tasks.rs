//! `baton post`, `baton claim-next` and `baton run --next` against a real single-node
//! `baton-node` process: a task is posted once, taken once, the losers are told why with exit
//! 3, and `baton run --next` runs its command on the task it got (and nothing when there is
//! none).

mod common;

use common::{Node, Setup};
use serde_json::Value;

fn start_node() -> Node {
    Node::start(Setup {
        unset_env: &["BATON_CLIENT_ID", "BATON_HOLDER", "BATON_ENDPOINTS"],
        ..Setup::default()
    })
}

#[test]
fn a_task_is_posted_once_taken_once_and_the_next_taker_is_told_why_not() {
    let node = start_node();
    let post = [
        "post",
        "tasks/review-17",
        "--summary",
        "review the cache fix",
        "--set",
        "role=reviewer",
        "--by",
        "dispatch@ci",
    ];
    let (code, v) = node.json(&post);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (&v["outcome"], &v["created"], &v["record"]["status"]),
        (
            &Value::from("posted"),
            &Value::from(true),
            &Value::from("open")
        )
    );
    assert_eq!(v["record"]["fields"]["role"], "reviewer");
    // The board lists it as open.
    let (code, v) = node.json(&["board", "tasks/", "--unclaimed"]);
    assert_eq!(
        (code, &v["open"]),
        (0, &serde_json::json!(["tasks/review-17"])),
        "{v}"
    );
    // Posting it again is refused, naming its status: exit 3, nothing changed.
    let (code, v) = node.json(&post);
    assert_eq!(code, 3, "{v}");
    assert_eq!(
        (&v["refusal"]["reason"], &v["refusal"]["status"]),
        (&Value::from("exists"), &Value::from("open")),
        "{v}"
    );

    // A coder finds nothing for coders; a reviewer gets the task.
    let coder = [
        "claim-next",
        "tasks/",
        "--holder",
        "codex@b",
        "--where",
        "role=coder",
    ];
    let (code, v) = node.json(&coder);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["outcome"], "nothing_claimable");
    assert_eq!(v["counts"]["unmatched"], 1, "{v}");
    let (code, v) = node.json(&[
        "--client-id",
        "claude-session",
        "claim-next",
        "tasks/",
        "--holder",
        "claude@a",
        "--where",
        "role=reviewer",
        "--ttl",
        "1m",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (&v["outcome"], &v["lease"]["key"]),
        (&Value::from("granted"), &Value::from("tasks/review-17"))
    );
    let token = v["lease"]["token"].as_u64().unwrap();
    assert_eq!(node.lease("tasks/review-17")["token"], token);
    // The next taker is told it is held, in words too.
    let out = node.baton(&["claim-next", "tasks/", "--holder", "codex@b"]);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("nothing claimable under tasks/: 1 held of 1 tasks"),
        "{text}"
    );
    // Released as done, the task is finished: passed by unseen (data format 14), so the
    // board has no unfinished task left.
    let (code, v) = node.json(&[
        "--client-id",
        "claude-session",
        "release",
        "tasks/review-17",
        "--token",
        &token.to_string(),
        "--status",
        "done",
    ]);
    assert_eq!(code, 0, "{v}");
    let (code, v) = node.json(&["claim-next", "tasks/", "--holder", "codex@b"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(
        (&v["counts"]["scanned"], &v["counts"]["finished"]),
        (&Value::from(0), &Value::from(0)),
        "{v}"
    );
    let out = node.baton(&["claim-next", "tasks/", "--holder", "codex@b"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("nothing claimable under tasks/: no unfinished task there"),
        "{text}"
    );
    // Bad input: a clear error, exit 2 for usage, nothing changed.
    let out = node.baton(&["claim-next", "tasks/", "--where", "role"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn run_next_runs_the_command_on_the_task_it_got_and_nothing_when_there_is_none() {
    let node = start_node();
    for key in ["jobs/1", "jobs/2"] {
        let (code, v) = node.json(&["post", key, "--by", "dispatch@ci"]);
        assert_eq!(code, 0, "{v}");
    }
    let marker = node.file("ran");
    let script = format!("echo \"$BATON_KEY $BATON_TOKEN\" >> {}", marker.display());
    for _ in 0..2 {
        let out = node.baton(&[
            "run", "--next", "jobs/", "--holder", "worker@h", "--", "sh", "-c", &script,
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ran = std::fs::read_to_string(&marker).unwrap();
    let keys: Vec<&str> = ran.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(keys, ["jobs/1", "jobs/2"], "{ran}");
    // `baton run` released each task as done when its command succeeded: none is left.
    for key in ["jobs/1", "jobs/2"] {
        assert_eq!(node.lease(key), Value::Null);
        let (code, v) = node.json(&["record", key]);
        assert_eq!(
            (code, &v["record"]["status"]),
            (0, &Value::from("done")),
            "{v}"
        );
    }
    let out = node.baton(&[
        "run", "--next", "jobs/", "--holder", "worker@h", "--", "sh", "-c", &script,
    ]);
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    // Both are done: finished tasks are passed by unseen (data format 14).
    assert!(
        text.contains("nothing claimable under jobs/: no unfinished task there"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        ran,
        "nothing ran"
    );
    // --where without --next is a usage error: nothing runs.
    let out = node.baton(&["run", "jobs/1", "--where", "a=b", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("go with --next"));
    // A command that fails leaves its task on the board for the next taker.
    node.json(&["post", "jobs/3", "--by", "dispatch@ci"]);
    let out = node.baton(&[
        "run", "--next", "jobs/", "--holder", "worker@h", "--", "false",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let (code, v) = node.json(&["record", "jobs/3"]);
    assert_eq!(
        (code, &v["record"]["status"]),
        (0, &Value::from("open")),
        "{v}"
    );
}
