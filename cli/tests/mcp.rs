//! `baton mcp` spoken to as an agent's client speaks to it: a real 3-node cluster, each
//! agent session a real `baton mcp` child process over stdio, driven by rmcp's own client.
//! Every assertion is on what a model would read: the structured results and their notices.

mod common;
mod mcp_common;

use std::path::Path;
use std::time::Duration;

use common::{parse_json, Cluster};
use mcp_common::{agent, agent_transport, call, call_refused};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

/// The `notifications/message` a session's client received, their data in order.
#[derive(Clone, Default)]
struct Heard(std::sync::Arc<std::sync::Mutex<Vec<Value>>>);

impl Heard {
    /// The first message, waiting at most `within` for it.
    async fn first_within(&self, within: Duration) -> Value {
        let until = std::time::Instant::now() + within;
        loop {
            if let Some(first) = self.0.lock().unwrap().first() {
                return first.clone();
            }
            assert!(
                std::time::Instant::now() < until,
                "no notifications/message within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[allow(deprecated)]
impl rmcp::ClientHandler for Heard {
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.data);
    }
}

/// [`agent`], with a client that keeps the server's `notifications/message`.
async fn agent_listening(
    cluster: &Cluster,
    session: &str,
    holder: &str,
    extra: &[&str],
    dir: &Path,
) -> (RunningService<RoleClient, Heard>, Heard) {
    let heard = Heard::default();
    let transport = agent_transport(cluster, session, holder, extra, dir);
    (heard.clone().serve(transport).await.unwrap(), heard)
}

/// The notices of a result, as (what, key) pairs.
fn notices(reply: &Value) -> Vec<(String, String)> {
    reply["notices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["what"].as_str().unwrap().to_owned(),
                n["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `baton --output json ARGS` against the cluster, as session `session`.
fn cli(cluster: &Cluster, session: &str, args: &[&str]) -> Value {
    let out = cluster
        .command(&[&["--output", "json"], args].concat())
        .env("BATON_CLIENT_ID", session)
        .output()
        .unwrap();
    parse_json(&out)
}

#[tokio::test]
async fn tools_have_schemas_and_operator_tools_come_only_with_operator() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let plain = agent(&cluster, "s-plain", "claude@a", &[], dir.path()).await;
    let tools = plain.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "board",
            "check",
            "claim",
            "claim_next",
            "claim_set",
            "handoff_accept",
            "handoff_cancel",
            "handoff_decline",
            "handoff_offer",
            "history",
            "my_claims",
            "observe",
            "post_task",
            "probe",
            "record",
            "release",
            "update_record",
        ]
    );
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let claim = tool("claim");
    let input = serde_json::to_value(&*claim.input_schema).unwrap();
    assert_eq!(input["required"], json!(["key"]), "{input}");
    for field in ["key", "ttl_s", "wait_s"] {
        assert!(input["properties"][field].is_object(), "{field}: {input}");
    }
    let output = serde_json::to_value(claim.output_schema.as_deref().unwrap()).unwrap();
    assert!(output.to_string().contains("notices"), "{output}");
    assert!(output.to_string().contains("holder_token"), "{output}");
    assert!(claim.description.as_deref().unwrap().contains("stand down"));
    for read_only in [
        "probe",
        "board",
        "record",
        "history",
        "check",
        "my_claims",
        "observe",
    ] {
        let annotations = tool(read_only).annotations.unwrap();
        assert_eq!(annotations.read_only_hint, Some(true), "{read_only}");
    }
    assert_ne!(
        tool("claim").annotations.and_then(|a| a.read_only_hint),
        Some(true)
    );
    plain.cancel().await.unwrap();

    let operator = agent(&cluster, "s-op", "ops@a", &["--operator"], dir.path()).await;
    let names: Vec<String> = operator
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect();
    for name in ["revoke", "quarantine", "cluster_status", "access", "claim"] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    operator.cancel().await.unwrap();
}

/// A dispatching agent posts two tasks; two agents take one each with `claim_next`, the
/// reviewer by its `where`, and a third is told there is nothing for it, with why.
#[tokio::test]
async fn agents_take_posted_tasks_with_claim_next_one_each() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let lead = agent(&cluster, "s-lead", "lead@h", &[], dir.path()).await;
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let c = agent(&cluster, "s-c", "cy@c", &[], dir.path()).await;
    for (key, role) in [("tasks/fix-1", "coder"), ("tasks/review-1", "reviewer")] {
        let posted = call(
            &lead,
            "post_task",
            json!({"key": key, "summary": "do it", "fields": {"role": role}}),
        )
        .await;
        assert_eq!(posted["result"]["outcome"], "posted", "{posted}");
    }
    let again = call(&lead, "post_task", json!({"key": "tasks/fix-1"})).await;
    assert_eq!(again["result"]["outcome"], "refused", "{again}");
    let reviewer = json!({"prefix": "tasks/", "where": {"role": "reviewer"}});
    let (ra, rb) = tokio::join!(
        call(&a, "claim_next", reviewer),
        call(&b, "claim_next", json!({"prefix": "tasks/"}))
    );
    assert_eq!(ra["result"]["outcome"], "granted", "{ra}");
    assert_eq!(ra["result"]["key"], "tasks/review-1", "{ra}");
    assert_eq!(rb["result"]["outcome"], "granted", "{rb}");
    assert_eq!(rb["result"]["key"], "tasks/fix-1", "{rb}");
    let mine = call(&b, "my_claims", json!({})).await;
    assert_eq!(mine["result"]["held"][0]["key"], "tasks/fix-1", "{mine}");
    let none = call(&c, "claim_next", json!({"prefix": "tasks/"})).await;
    assert_eq!(none["result"]["outcome"], "nothing_claimable", "{none}");
    assert_eq!(none["result"]["details"]["held"], 2, "{none}");
    // The cluster agrees: each task is held by the session that was told it won.
    let probe = cli(&cluster, "s-x", &["probe", "tasks/fix-1"]);
    assert_eq!(probe["lease"]["holder_client_id"], "s-b", "{probe}");
}

/// An agent claims a set over a key another holds: nothing is granted, and the answer names
/// that key and its holder; once it is free the set is granted whole, one token for all.
#[tokio::test]
async fn claim_set_grants_every_key_or_none_and_names_what_blocked() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let held = call(&b, "claim", json!({"key": "src/lru.rs"})).await;
    assert_eq!(held["result"]["outcome"], "granted", "{held}");
    let keys = json!({"keys": ["src/cache.rs", "src/lru.rs", "src/main.rs"]});
    let blocked = call(&a, "claim_set", keys.clone()).await;
    assert_eq!(blocked["result"]["outcome"], "held", "{blocked}");
    let named = &blocked["result"]["details"];
    assert_eq!(named.as_array().map(Vec::len), Some(1), "{blocked}");
    assert_eq!(
        (&named[0]["key"], &named[0]["holder"]),
        (&json!("src/lru.rs"), &json!("codex@b")),
        "{blocked}"
    );
    let probe = cli(&cluster, "s-x", &["probe", "src/cache.rs"]);
    assert_eq!(
        probe["lease"],
        Value::Null,
        "a blocked set granted src/cache.rs: {probe}"
    );
    let released = call(&b, "release", json!({"key": "src/lru.rs"})).await;
    assert_eq!(released["result"]["outcome"], "released", "{released}");
    let granted = call(&a, "claim_set", keys).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let token = granted["result"]["token"].as_u64().unwrap();
    for (i, key) in ["src/cache.rs", "src/lru.rs", "src/main.rs"]
        .iter()
        .enumerate()
    {
        assert_eq!(granted["result"]["details"][i]["key"], *key, "{granted}");
        assert_eq!(granted["result"]["details"][i]["token"], token, "{granted}");
        let probe = cli(&cluster, "s-x", &["probe", key]);
        assert_eq!(probe["lease"]["holder_client_id"], "s-a", "{probe}");
    }
    let mine = call(&a, "my_claims", json!({})).await;
    assert_eq!(
        mine["result"]["held"].as_array().map(Vec::len),
        Some(3),
        "{mine}"
    );
}

/// Two sessions take both permits of a shared runner, each with its own token; a third is
/// told every holder and stands down, and gets a permit once one is released.
#[tokio::test]
async fn permits_admit_n_sessions_each_with_its_own_token_and_the_next_is_told_every_holder() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let c = agent(&cluster, "s-c", "gemini@c", &[], dir.path()).await;
    let args = json!({"key": "gpu/runner", "permits": 2});
    let first = call(&a, "claim", args.clone()).await;
    let second = call(&b, "claim", args.clone()).await;
    for granted in [&first, &second] {
        assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
        let said = granted["result"]["instruction"].as_str().unwrap();
        assert!(said.contains("one of 2 permits"), "{said}");
    }
    let tokens = [&first, &second].map(|g| g["result"]["token"].as_u64().unwrap());
    assert_ne!(tokens[0], tokens[1], "each its own token");
    let held = call(&c, "claim", args.clone()).await;
    assert_eq!(held["result"]["outcome"], "held", "{held}");
    let said = held["result"]["instruction"].as_str().unwrap();
    assert!(
        said.contains("2 of 2 permits") && said.contains("claude@a") && said.contains("codex@b"),
        "{said}"
    );
    let released = call(&a, "release", json!({"key": "gpu/runner"})).await;
    assert_eq!(released["result"]["outcome"], "released", "{released}");
    let third = call(&c, "claim", args).await;
    assert_eq!(third["result"]["outcome"], "granted", "{third}");
    let probe = cli(&cluster, "s-x", &["probe", "gpu/runner"]);
    let holders: Vec<&str> = probe["permits"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["holder_name"].as_str().unwrap())
        .collect();
    assert_eq!(holders, ["codex@b", "gemini@c"], "{probe}");
}

/// Two sessions share a key, each with its own token, and cannot write its record; an
/// exclusive claim from a third stands down naming both; a shared claim with `wait_s` is
/// granted once the exclusive holder is done.
#[tokio::test]
async fn shared_claims_admit_readers_and_an_exclusive_claim_is_told_every_shared_holder() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let c = agent(&cluster, "s-c", "gemini@c", &[], dir.path()).await;
    let shared = json!({"key": "docs/spec", "shared": true});
    let first = call(&a, "claim", shared.clone()).await;
    let second = call(&b, "claim", shared.clone()).await;
    for granted in [&first, &second] {
        assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
        let said = granted["result"]["instruction"].as_str().unwrap();
        assert!(said.contains("docs/spec shared"), "{said}");
    }
    let tokens = [&first, &second].map(|g| g["result"]["token"].as_u64().unwrap());
    assert_ne!(tokens[0], tokens[1], "each its own token");
    let write = json!({"key": "docs/spec", "summary": "a reader's note"});
    let refused = call(&a, "update_record", write).await;
    assert_eq!(refused["result"]["outcome"], "refused", "{refused}");
    assert_eq!(refused["result"]["refusal"]["reason"], "not_exclusive");
    let held = call(&c, "claim", json!({"key": "docs/spec"})).await;
    assert_eq!(held["result"]["outcome"], "held", "{held}");
    let said = held["result"]["instruction"].as_str().unwrap();
    assert!(
        said.contains("held shared by 2") && said.contains("claude@a") && said.contains("codex@b"),
        "{said}"
    );
    let both = json!({"key": "docs/spec", "shared": true, "permits": 2});
    let error = call_refused(&c, "claim", both).await;
    assert!(error.contains("not both"), "{error}");
    for (session, name) in [(&a, "a"), (&b, "b")] {
        let released = call(session, "release", json!({"key": "docs/spec"})).await;
        assert_eq!(
            released["result"]["outcome"], "released",
            "{name}: {released}"
        );
    }
    let alone = call(&c, "claim", json!({"key": "docs/spec"})).await;
    assert_eq!(alone["result"]["outcome"], "granted", "{alone}");
    let waiting = tokio::spawn(async move {
        let wait = json!({"key": "docs/spec", "shared": true, "wait_s": 60});
        (call(&a, "claim", wait).await, a)
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let released = call(&c, "release", json!({"key": "docs/spec"})).await;
    assert_eq!(released["result"]["outcome"], "released", "{released}");
    let (got, _a) = tokio::time::timeout(std::time::Duration::from_secs(30), waiting)
        .await
        .expect("the shared claim granted in time")
        .unwrap();
    assert_eq!(got["result"]["outcome"], "granted", "{got}");
    let probe = cli(&cluster, "s-x", &["probe", "docs/spec"]);
    assert_eq!(probe["permits"]["shared"], true, "{probe}");
}

/// A claim with `wait_s` waits in the key's line: the probe shows it, and the holder's
/// release grants it the key in the release's own entry.
#[tokio::test]
async fn a_claim_with_wait_s_waits_in_the_keys_line_and_gets_it_on_release() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let held = call(&a, "claim", json!({"key": "gpu/1"})).await;
    assert_eq!(held["result"]["outcome"], "granted", "{held}");
    let waiting = tokio::spawn(async move {
        let got = call(&b, "claim", json!({"key": "gpu/1", "wait_s": 60})).await;
        (b, got)
    });
    let in_line = async {
        loop {
            let probe = cli(&cluster, "s-x", &["probe", "gpu/1"]);
            if probe["line"]["waiters"] == 1 {
                return probe;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    let probe = tokio::time::timeout(std::time::Duration::from_secs(20), in_line)
        .await
        .expect("codex@b in the line");
    assert_eq!(
        probe["line"]["first"][0]["holder_name"], "codex@b",
        "{probe}"
    );
    let released = call(&a, "release", json!({"key": "gpu/1"})).await;
    assert_eq!(released["result"]["outcome"], "released", "{released}");
    let (_b, got) = tokio::time::timeout(std::time::Duration::from_secs(20), waiting)
        .await
        .expect("granted from the line in time")
        .unwrap();
    assert_eq!(got["result"]["outcome"], "granted", "{got}");
    let token = got["result"]["token"].as_u64().unwrap();
    let history = cli(&cluster, "s-x", &["history", "gpu/1"]);
    let at: Vec<&Value> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["revision"] == token)
        .map(|e| &e["kind"])
        .collect();
    assert_eq!(at, [&json!("released"), &json!("claimed")], "{history}");
}

#[tokio::test]
async fn two_sessions_race_for_one_key_and_exactly_one_wins() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let a = agent(&cluster, "s-a", "claude@a", &[], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &[], dir.path()).await;
    let key = json!({"key": "tasks/race"});
    let (ra, rb) = tokio::join!(
        call(&a, "claim", key.clone()),
        call(&b, "claim", key.clone())
    );
    let (winner, loser, won, lost, winner_name) = match ra["result"]["outcome"].as_str() {
        Some("granted") => (&a, &b, &ra, &rb, "claude@a"),
        _ => (&b, &a, &rb, &ra, "codex@b"),
    };
    assert_eq!(won["result"]["outcome"], "granted", "{won}");
    // Held is an answer, not an error, and names the holder, its token and since.
    assert_eq!(lost["result"]["outcome"], "held", "{lost}");
    assert_eq!(lost["result"]["holder"], winner_name, "{lost}");
    assert_eq!(
        lost["result"]["holder_token"], won["result"]["token"],
        "{lost}"
    );
    assert!(
        lost["result"]["since_unix_ms"].as_u64().unwrap() > 0,
        "{lost}"
    );
    assert!(lost["result"]["instruction"]
        .as_str()
        .unwrap()
        .starts_with("stand down"));

    // The cluster agrees, and binds the lease to the winner's session.
    let probe = cli(&cluster, "s-x", &["probe", "tasks/race"]);
    assert_eq!(probe["lease"]["holder_name"], winner_name, "{probe}");
    let winner_session = if winner_name == "claude@a" {
        "s-a"
    } else {
        "s-b"
    };
    assert_eq!(
        probe["lease"]["holder_client_id"], winner_session,
        "{probe}"
    );

    // The loser holds nothing: it cannot write the record.
    let update = call(
        loser,
        "update_record",
        json!({"key": "tasks/race", "status": "done"}),
    )
    .await;
    assert_eq!(update["result"]["outcome"], "not_held", "{update}");
    let mine = call(winner, "my_claims", json!({})).await;
    assert_eq!(mine["result"]["held"][0]["key"], "tasks/race", "{mine}");
    assert_eq!(mine["result"]["session"], winner_session, "{mine}");

    // The winner writes and releases with a final status; the key is free afterwards.
    let update = call(
        winner,
        "update_record",
        json!({"key": "tasks/race", "summary": "raced and won", "set": {"pr": "7"}}),
    )
    .await;
    assert_eq!(update["result"]["outcome"], "updated", "{update}");
    let release = call(
        winner,
        "release",
        json!({"key": "tasks/race", "status": "done"}),
    )
    .await;
    assert_eq!(release["result"]["outcome"], "released", "{release}");
    let record = cli(&cluster, "s-x", &["record", "tasks/race"]);
    assert_eq!(record["lease"], Value::Null, "{record}");
    assert_eq!(record["record"]["status"], "done", "{record}");
    assert_eq!(record["record"]["fields"]["pr"], "7", "{record}");
    let mine = call(winner, "my_claims", json!({})).await;
    assert_eq!(mine["result"]["held"], json!([]), "{mine}");
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

#[tokio::test]
async fn a_handoff_shows_a_changed_fact_and_the_giver_hears_who_took_it() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    // Short leases, so the giver's guard learns of the handoff within a second.
    let a = agent(&cluster, "s-a", "claude@a", &["--ttl", "3s"], dir.path()).await;
    let b = agent(&cluster, "s-b", "codex@b", &["--run-checks"], dir.path()).await;
    let b_plain = agent(&cluster, "s-b2", "codex@b", &[], dir.path()).await;
    let granted = call(&a, "claim", json!({"key": "tasks/h"})).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let offer = call(
        &a,
        "handoff_offer",
        json!({
            "key": "tasks/h", "to": "codex@b", "git": false,
            "done": "parsed the logs", "remaining": "write the report",
            "first_step": "open report.md",
            "facts": [
                {"name": "answer", "value": "41", "check_command": "echo 42"},
                {"name": "greeting", "value": "hello", "check_command": "echo hello"}
            ]
        }),
    )
    .await;
    assert_eq!(offer["result"]["outcome"], "offered", "{offer}");

    // The giver's commands run only on a server started with --run-checks; asked elsewhere,
    // the accept is refused and changes nothing (the offer still stands).
    let refused = call_refused(
        &b_plain,
        "handoff_accept",
        json!({"key": "tasks/h", "run_checks": true}),
    )
    .await;
    assert!(refused.contains("--run-checks"), "{refused}");
    let still = call(&b_plain, "probe", json!({"key": "tasks/h"})).await;
    assert!(still.to_string().contains("claude@a"), "{still}");

    let accepted = call(
        &b,
        "handoff_accept",
        json!({"key": "tasks/h", "run_checks": true}),
    )
    .await;
    let result = &accepted["result"];
    assert_eq!(result["outcome"], "accepted", "{accepted}");
    assert!(result["token"].as_u64().unwrap() > granted["result"]["token"].as_u64().unwrap());
    assert_eq!(
        result["details"]["note"]["first_step"], "open report.md",
        "{accepted}"
    );
    assert_eq!(
        result["details"]["facts"],
        json!(["answer: CHANGED (note: 41, now: 42)", "greeting: MATCH"]),
        "{accepted}"
    );
    assert!(result["instruction"].as_str().unwrap().contains("CHANGED"));

    // The giver's next call says the key was handed off, and to whom.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let next = call(&a, "my_claims", json!({})).await;
    assert_eq!(
        notices(&next),
        [("handed_off".to_owned(), "tasks/h".to_owned())],
        "{next}"
    );
    assert!(
        next["notices"][0]["by"]
            .as_str()
            .unwrap()
            .contains("codex@b"),
        "{next}"
    );
    assert_eq!(next["result"]["held"], json!([]), "{next}");

    // By default nothing the giver wrote runs: each fact comes back with its command.
    let marker = dir.path().join("ran");
    let back = call(
        &b,
        "handoff_offer",
        json!({
            "key": "tasks/h", "to": "claude@a", "git": false,
            "done": "wrote the report", "remaining": "send it", "first_step": "send it",
            "facts": [{"name": "pages", "value": "3",
                       "check_command": format!("touch {}; echo 3", marker.display())}]
        }),
    )
    .await;
    assert_eq!(back["result"]["outcome"], "offered", "{back}");
    let taken = call(&a, "handoff_accept", json!({"key": "tasks/h"})).await;
    let result = &taken["result"];
    assert_eq!(result["outcome"], "accepted", "{taken}");
    assert!(!marker.exists(), "the giver's check command ran: {taken}");
    let unchecked = &result["details"]["unchecked_facts"];
    assert_eq!(unchecked[0]["name"], "pages", "{taken}");
    assert!(
        unchecked[0]["check_command"]
            .as_str()
            .unwrap()
            .starts_with("touch "),
        "{taken}"
    );
    assert!(
        result["details"]["facts"][0]
            .as_str()
            .unwrap()
            .starts_with("pages: UNCHECKED"),
        "{taken}"
    );
    let instruction = result["instruction"].as_str().unwrap();
    assert!(
        instruction.contains("UNCHECKED") && instruction.contains("codex@b"),
        "{instruction}"
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
    b_plain.cancel().await.unwrap();
}

#[tokio::test]
async fn an_idle_session_lets_its_lease_lapse_and_hears_of_it() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let idle = agent(
        &cluster,
        "s-idle",
        "claude@a",
        &["--idle", "3s", "--ttl", "3s"],
        dir.path(),
    )
    .await;
    let granted = call(&idle, "claim", json!({"key": "tasks/idle"})).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let token = granted["result"]["token"].as_u64().unwrap();
    // Calls keep it alive past its TTL.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        let mine = call(&idle, "my_claims", json!({})).await;
        assert_eq!(mine["result"]["held"][0]["token"], token, "{mine}");
    }
    // Then silence: past the idle limit and the TTL, the key is free, and expired (not
    // released on the agent's behalf).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let probe = cli(&cluster, "s-x", &["probe", "tasks/idle"]);
    assert_eq!(probe["lease"], Value::Null, "{probe}");
    let history = cli(&cluster, "s-x", &["history", "tasks/idle"]);
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["claimed", "expired"], "{history}");
    let next = call(&idle, "my_claims", json!({})).await;
    assert_eq!(
        notices(&next),
        [("idle_lapsed".to_owned(), "tasks/idle".to_owned())],
        "{next}"
    );
    assert_eq!(next["notices"][0]["token"], token, "{next}");
    assert_eq!(next["result"]["held"], json!([]), "{next}");
    idle.cancel().await.unwrap();
}

#[tokio::test]
async fn a_revoke_is_announced_at_once_and_named_in_the_very_next_result() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    // 60 s leases renew every 18-22 s: what arrives within the 5 s below was pushed.
    let (a, heard) =
        agent_listening(&cluster, "s-a", "claude@a", &["--ttl", "60s"], dir.path()).await;
    let granted = call(&a, "claim", json!({"key": "tasks/r"})).await;
    assert_eq!(granted["result"]["outcome"], "granted", "{granted}");
    let token = granted["result"]["token"].clone();
    let out = cluster
        .command(&["revoke", "tasks/r", "--reason", "agent stuck"])
        .env("BATON_CLIENT_ID", "s-ops")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The MCP notification comes unasked, with the facts.
    let message = heard.first_within(Duration::from_secs(5)).await;
    assert_eq!(message["what"], "revoked", "{message}");
    assert_eq!(message["key"], "tasks/r", "{message}");
    assert!(
        message["detail"].as_str().unwrap().contains("agent stuck"),
        "{message}"
    );
    assert!(
        message["by"].as_str().unwrap().contains("s-ops"),
        "the operator's session is named: {message}"
    );
    // The very next tool result says it too, once, and the key is no longer listed.
    let next = call(&a, "my_claims", json!({})).await;
    assert_eq!(
        notices(&next),
        [("revoked".to_owned(), "tasks/r".to_owned())],
        "{next}"
    );
    assert_eq!(next["notices"][0]["token"], token, "{next}");
    assert_eq!(next["result"]["held"], json!([]), "{next}");
    let again = call(&a, "my_claims", json!({})).await;
    assert_eq!(notices(&again), [], "{again}");
    // A session that lost the key no longer writes with the dead token.
    let update = call(
        &a,
        "update_record",
        json!({"key": "tasks/r", "status": "done"}),
    )
    .await;
    assert_eq!(update["result"]["outcome"], "not_held", "{update}");
    a.cancel().await.unwrap();
}

#[tokio::test]
async fn observe_answers_the_view_now_then_the_view_after_the_keys_next_change() {
    let cluster = Cluster::start(3).await;
    let dir = tempfile::tempdir().unwrap();
    let lead = agent(&cluster, "s-sched", "sched@a", &[], dir.path()).await;
    let watcher = agent(&cluster, "s-obs", "obs@b", &[], dir.path()).await;
    call(&lead, "claim", json!({"key": "leader/sched"})).await;
    let now = call(&watcher, "observe", json!({"key": "leader/sched"})).await;
    let (changed, view) = (&now["result"]["changed"], &now["result"]["view"]);
    assert!(
        *changed == false && view["lease"]["holder_name"] == "sched@a",
        "{now}"
    );
    let seen = view["revision"].as_u64().unwrap();
    let after = json!({"key": "leader/sched", "after_revision": seen, "wait_s": 1});
    let quiet = call(&watcher, "observe", after).await;
    assert!(
        quiet["result"]["changed"] == false,
        "nothing changed: {quiet}"
    );
    let after = json!({"key": "leader/sched", "after_revision": seen, "wait_s": 30});
    // The change may come before the call or during it: either way it is after `seen`.
    let waiting = tokio::spawn(async move { call(&watcher, "observe", after).await });
    let proclaim = json!({"key": "leader/sched", "set": {"endpoint": "10.0.0.5:8080"}});
    call(&lead, "update_record", proclaim).await;
    let next = waiting.await.unwrap();
    let (changed, view) = (&next["result"]["changed"], &next["result"]["view"]);
    assert!(*changed == true && view["record"]["fields"]["endpoint"] == "10.0.0.5:8080");
}
