//! Shared and exclusive claims (`claim --shared`) against a real 3-node cluster, every
//! claimant its own `baton` process and session: racing readers all share the key, each with
//! its own token; an exclusive claim is held, told every reader; a shared holder may not
//! write the record; a writer waiting in line is granted before readers that came after it,
//! only once the last reader has left, and never while a reader holds.

mod common;

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{holder_tokens, json_of, line_of, Cluster};
use serde_json::Value;

const KEY: &str = "docs/spec";
const READERS: usize = 8;

fn spawn(cluster: &Cluster, args: &[&str]) -> Child {
    cluster
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_key_and_a_writer_in_line_goes_before_later_readers_never_beside_one() {
    let cluster = Cluster::start(3).await;
    // Eight racing readers, each its own process and session: all share the key.
    let sessions: Vec<String> = (0..READERS).map(|i| format!("reader-{i}")).collect();
    let racers: Vec<Child> = sessions
        .iter()
        .map(|s| {
            let args = [
                "--client-id",
                s,
                "claim",
                KEY,
                "--shared",
                "--holder",
                s,
                "--ttl",
                "60s",
                "--output",
                "json",
            ];
            spawn(&cluster, &args)
        })
        .collect();
    let answers: Vec<(i32, Value)> = racers
        .into_iter()
        .map(|c| json_of(&c.wait_with_output().unwrap()))
        .collect();
    let mut readers = Vec::new();
    for ((code, answer), session) in answers.iter().zip(&sessions) {
        assert_eq!(*code, 0, "every reader shares the key: {answer}");
        assert_eq!(answer["permits"]["shared"], true, "{answer}");
        readers.push((session.clone(), answer["lease"]["token"].as_u64().unwrap()));
    }
    let tokens: BTreeSet<u64> = readers.iter().map(|(_, t)| *t).collect();
    assert_eq!(
        tokens.len(),
        READERS,
        "each reader its own token: {answers:?}"
    );
    // An exclusive claim stands down, told every reader.
    let (code, held) =
        json_of(&cluster.baton(&["claim", KEY, "--holder", "early", "--output", "json"]));
    assert_eq!(
        (code, &held["outcome"]),
        (3, &Value::from("held")),
        "{held}"
    );
    assert_eq!(held["permits"]["shared"], true, "{held}");
    assert_eq!(
        holder_tokens(&held).into_iter().collect::<BTreeSet<_>>(),
        tokens,
        "{held}"
    );
    // check --token says the mode; a shared holder may not write the record.
    let (reader, token) = readers[0].clone();
    let t = token.to_string();
    let (code, check) = json_of(&cluster.baton(&["check", KEY, "--token", &t, "--output", "json"]));
    assert_eq!((code, &check["shared"]), (0, &Value::Bool(true)), "{check}");
    let (code, refused) = json_of(&cluster.baton(&[
        "--client-id",
        &reader,
        "update",
        KEY,
        "--token",
        &t,
        "--status",
        "revising",
        "--output",
        "json",
    ]));
    assert_eq!(
        (code, &refused["reason"]),
        (3, &Value::from("not_exclusive")),
        "{refused}"
    );
    // A permit claim is refused naming how the key is held.
    let (code, refused) = json_of(&cluster.baton(&[
        "claim",
        KEY,
        "--permits",
        "2",
        "--holder",
        "p",
        "--output",
        "json",
    ]));
    assert_eq!(
        (code, &refused["reason"]),
        (3, &Value::from("permits_mismatch")),
        "{refused}"
    );
    assert_eq!(refused["refusal"]["permits"]["shared"], true, "{refused}");
    // A writer waits in the key's line.
    let writer = spawn(
        &cluster,
        &[
            "--client-id",
            "writer",
            "claim",
            KEY,
            "--holder",
            "writer",
            "--ttl",
            "60s",
            "--wait",
            "--timeout",
            "60s",
            "--output",
            "json",
        ],
    );
    line_of(&cluster, KEY, 1);
    // A reader that came after the writer does not share the key ahead of it.
    let late_reader = || {
        json_of(&cluster.baton(&[
            "--client-id",
            "late",
            "claim",
            KEY,
            "--shared",
            "--holder",
            "late",
            "--output",
            "json",
        ]))
    };
    let (code, late) = late_reader();
    assert_eq!(
        (code, &late["outcome"]),
        (3, &Value::from("held")),
        "{late}"
    );
    // The readers leave one by one; the writer is granted only after the last.
    let mut released_at = 0;
    for (session, token) in &readers {
        let t = token.to_string();
        let out = cluster.baton(&["--client-id", session, "release", KEY, "--token", &t]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (_, probe) = json_of(&cluster.baton(&["probe", KEY, "--output", "json"]));
        released_at = probe["revision"].as_u64().unwrap();
        if session != &readers.last().unwrap().0 {
            assert_ne!(
                probe["permits"],
                Value::Null,
                "the writer beside a reader: {probe}"
            );
        }
    }
    let (code, granted) = json_of(&writer.wait_with_output().unwrap());
    assert_eq!(code, 0, "{granted}");
    let writer_token = granted["lease"]["token"].as_u64().unwrap();
    assert!(
        writer_token > *tokens.last().unwrap() && writer_token <= released_at,
        "the writer's token {writer_token} comes from the last reader's release (by revision \
         {released_at})"
    );
    assert_eq!(
        granted["permits"],
        Value::Null,
        "the writer holds alone: {granted}"
    );
    // Now the late reader is told the writer holds it.
    let (code, late) = late_reader();
    assert_eq!(
        (code, &late["lease"]["holder_name"]),
        (3, &Value::from("writer")),
        "{late}"
    );
    assert_eq!(late["permits"], Value::Null, "{late}");
    // Readers waiting in line behind the writer: its release grants the first in its own
    // write, and the leader's next entries the others (one grant per entry), each its own
    // token, none beside the writer.
    let waiting: Vec<Child> = (0..3)
        .map(|i| {
            let who = format!("queued-{i}");
            let child = spawn(
                &cluster,
                &[
                    "--client-id",
                    &who,
                    "claim",
                    KEY,
                    "--shared",
                    "--holder",
                    &who,
                    "--ttl",
                    "60s",
                    "--wait",
                    "--timeout",
                    "60s",
                    "--output",
                    "json",
                ],
            );
            line_of(&cluster, KEY, i + 1);
            child
        })
        .collect();
    let t = writer_token.to_string();
    let released = Instant::now();
    let out = cluster.baton(&["--client-id", "writer", "release", KEY, "--token", &t]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut queued = BTreeSet::new();
    for child in waiting {
        let (code, granted) = json_of(&child.wait_with_output().unwrap());
        assert_eq!(code, 0, "{granted}");
        assert_eq!(granted["permits"]["shared"], true, "{granted}");
        queued.insert(granted["lease"]["token"].as_u64().unwrap());
    }
    assert_eq!(queued.len(), 3, "each its own token: {queued:?}");
    assert!(queued.iter().all(|t| *t > writer_token));
    // A generous bound: a place is renewed every 20 s here, so only the leader's nudges
    // can have granted the second and third this soon.
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "the readers in line took {:?}",
        released.elapsed()
    );
}
