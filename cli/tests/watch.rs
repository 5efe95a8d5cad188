//! Watches against a real single-node `baton-node` process: the library's [`WatchStream`]
//! (order, prefix, resume without gap or repeat, compaction) and `baton watch` as a child
//! process printing JSON lines.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Client, Error, Event, ReadMode, RecordPatch, WatchStream};
use common::{cli_bin, free_port, Node, Setup};
use futures::StreamExt;
use serde_json::Value;

/// Starts a node with `flags` and waits until it leads.
async fn start_node(flags: &'static [&'static str]) -> Node {
    Node::start_async(Setup {
        flags,
        ..Setup::default()
    })
    .await
}

/// The cluster's revision now: a watch from it + 1 misses nothing that happens next.
async fn revision_now(client: &Client) -> u64 {
    client
        .board("", 1, "", ReadMode::Linearizable)
        .await
        .unwrap()
        .revision
}

/// Claims `key` as `holder`, returning the token.
async fn claim(client: &Client, key: &str, holder: &str) -> u64 {
    match client
        .claim(key, holder, Duration::from_secs(30))
        .await
        .unwrap()
    {
        ClaimOutcome::Granted(grant) => grant.lease.token,
        held => panic!("{key} is held: {held:?}"),
    }
}

/// The next `n` events, failing the test if one takes more than 10 s or the stream fails.
async fn take(stream: &mut WatchStream, n: usize) -> Vec<Event> {
    let mut events = Vec::new();
    for _ in 0..n {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap_or_else(|_| panic!("no event after {events:?}"));
        events.push(item.expect("the watch ended").expect("the watch failed"));
    }
    events
}

/// Reads `stdout` line by line on a thread: the lines as they come, and the thread.
fn read_lines(
    stdout: std::process::ChildStdout,
) -> (
    std::sync::mpsc::Receiver<String>,
    std::thread::JoinHandle<()>,
) {
    let (tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (lines, reader)
}

/// Sends `child` SIGTERM and waits (up to 10 s) for it to stop: its exit status.
fn stop(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Nothing more arrives for a while (the stream neither yields nor ends).
async fn assert_quiet(stream: &mut WatchStream) {
    if let Ok(item) = tokio::time::timeout(Duration::from_millis(500), stream.next()).await {
        panic!("unexpected item: {item:?}");
    }
}

fn summary(events: &[Event]) -> Vec<(&str, &str)> {
    events
        .iter()
        .map(|e| (e.key.as_str(), e.kind.as_str()))
        .collect()
}

fn assert_strictly_increasing(events: &[Event]) {
    assert!(
        events.windows(2).all(|w| w[0].revision < w[1].revision),
        "revisions not strictly increasing: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_sees_the_events_of_its_prefix_in_order_and_no_others() {
    let node = start_node(&[]).await;
    let client = node.client().await;
    let start = revision_now(&client).await;
    let mut watch = client.watch("tasks/", start + 1);
    // A watch from now, already reading when the changes are made.
    let mut from_now = client.watch("tasks/", 0);
    let (tx, mut from_now_events) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(item) = from_now.next().await {
            if tx.send(item).is_err() {
                break;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let token = claim(&client, "tasks/a", "alice").await;
    claim(&client, "other/b", "bob").await;
    client
        .update("tasks/a", token, RecordPatch::status("in_progress"))
        .await
        .unwrap();
    client.release("tasks/a", token).await.unwrap();

    let events = take(&mut watch, 3).await;
    assert_eq!(
        summary(&events),
        [
            ("tasks/a", "claimed"),
            ("tasks/a", "updated"),
            ("tasks/a", "released")
        ]
    );
    assert_strictly_increasing(&events);
    assert!(events[0].revision > start);
    assert_eq!(events[0].revision, token);
    assert!(events.iter().all(|e| e.token == token));
    let actor = events[0].actor.as_ref().unwrap();
    assert_eq!(
        (actor.name.as_str(), actor.client_id.as_str()),
        ("alice", client.client_id())
    );
    assert!(events[0].at_unix_ms > 0);
    assert!(
        events[1].detail.contains("in_progress"),
        "{:?}",
        events[1].detail
    );
    assert_eq!(watch.next_revision(), events[2].revision + 1);
    assert_quiet(&mut watch).await;

    let mut seen = Vec::new();
    for _ in 0..3 {
        let item = tokio::time::timeout(Duration::from_secs(10), from_now_events.recv())
            .await
            .expect("the watch from now saw too little")
            .unwrap();
        seen.push(item.unwrap());
    }
    assert_eq!(seen, events, "the watch from now saw the same events");
    reader.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_watch_resumes_with_exactly_the_missing_events() {
    let node = start_node(&[]).await;
    let client = node.client().await;
    let start = revision_now(&client).await;

    let mut watch = client.watch("jobs/", start + 1);
    let one = claim(&client, "jobs/1", "alice").await;
    client
        .update("jobs/1", one, RecordPatch::status("in_progress"))
        .await
        .unwrap();
    let first = take(&mut watch, 2).await;
    assert_eq!(
        summary(&first),
        [("jobs/1", "claimed"), ("jobs/1", "updated")]
    );
    let last = first[1].revision;
    assert_eq!(watch.next_revision(), last + 1);
    drop(watch);

    // Changes while nobody watches, under the prefix and outside it.
    client.release("jobs/1", one).await.unwrap();
    claim(&client, "elsewhere/x", "carol").await;
    let two = claim(&client, "jobs/2", "bob").await;
    client
        .assign("jobs/3", "dave", "dispatcher", "")
        .await
        .unwrap();

    let mut resumed = client.watch("jobs/", last + 1);
    let missed = take(&mut resumed, 3).await;
    assert_eq!(
        summary(&missed),
        [
            ("jobs/1", "released"),
            ("jobs/2", "claimed"),
            ("jobs/3", "assigned")
        ]
    );
    assert!(missed[0].revision > last);
    assert_strictly_increasing(&missed);
    assert_eq!(missed[1].token, two);
    assert_quiet(&mut resumed).await;

    // And it goes on live.
    client.release("jobs/2", two).await.unwrap();
    assert_eq!(
        summary(&take(&mut resumed, 1).await),
        [("jobs/2", "released")]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_older_than_the_window_is_compacted_and_ends_the_watch() {
    let node = start_node(&["--watch-window-events", "5"]).await;
    let client = node.client().await;
    for i in 0..4 {
        let key = format!("tasks/{i}");
        let token = claim(&client, &key, "alice").await;
        client
            .update(&key, token, RecordPatch::status("done"))
            .await
            .unwrap();
        client.release(&key, token).await.unwrap();
    }

    let mut watch = client.watch("tasks/", 1);
    let item = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap();
    let Some(Err(Error::Compacted {
        requested,
        first_available,
    })) = item
    else {
        panic!(
            "expected compacted, got {item:?}: does the node apply --watch-window-events to \
             its store (store::open_with in node/src/node.rs)?"
        );
    };
    assert_eq!(requested, 1);
    assert!(first_available > 1, "first available {first_available}");
    assert!(
        watch.next().await.is_none(),
        "the watch ends after compacted"
    );

    // From the first revision still kept, the watch works.
    let mut kept = client.watch("tasks/", first_available);
    let events = take(&mut kept, 1).await;
    assert!(events[0].revision >= first_available);

    // The CLI says so on stderr and exits 1.
    let out = node.baton(&["watch", "tasks/", "--from", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.starts_with("error: compacted: revision 1 "),
        "{stderr}"
    );
    assert!(
        stderr.contains("re-read the board (baton board tasks/) and watch from its revision"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_prints_a_json_line_per_event_until_stopped() {
    let node = start_node(&[]).await;
    let client = node.client().await;
    let start = revision_now(&client).await;
    let from = (start + 1).to_string();
    let mut child = node.spawn(&["--output", "json", "watch", "tasks/", "--from", &from]);
    let (lines, reader) = read_lines(child.stdout.take().unwrap());

    let token = claim(&client, "tasks/cli", "alice").await;
    claim(&client, "other/cli", "alice").await;
    client.release("tasks/cli", token).await.unwrap();

    let mut events: Vec<Value> = Vec::new();
    while events.len() < 2 {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no JSON line after {events:?}"));
        events
            .push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")));
    }
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e["key"].as_str().unwrap(), e["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("tasks/cli", "claimed"), ("tasks/cli", "released")]);
    assert_eq!(events[0]["revision"].as_u64(), Some(token));
    assert_eq!(events[0]["token"].as_u64(), Some(token));
    assert_eq!(events[0]["actor"]["name"], "alice");
    assert!(events[1]["revision"].as_u64() > events[0]["revision"].as_u64());
    for field in ["at_unix_ms", "detail"] {
        assert!(events[0].get(field).is_some(), "{field} missing");
    }

    // SIGTERM (like Ctrl-C) stops it cleanly: exit 0.
    assert_eq!(stop(&mut child, "baton watch").code(), Some(0));
    reader.join().unwrap();
    assert!(lines.try_recv().is_err(), "no line after the two events");
}

#[test]
fn the_cli_exits_4_when_no_node_answers() {
    let dead = format!("127.0.0.1:{}", free_port());
    let started = Instant::now();
    let out = Command::new(cli_bin())
        .args(["--endpoints", &dead, "--timeout", "1s", "watch", "tasks/"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("unavailable"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// `baton leader KEY` (leader election's observe): the holder and its record now, then a
/// line at every change of holder or record, none for a renewal or for another key under
/// the same prefix; SIGTERM stops it with exit 0.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_leader_prints_the_holder_now_and_at_every_change() {
    let node = start_node(&[]).await;
    let client = node.client().await;
    let key = "svc/leader";
    let proclaim = |endpoint: &str| RecordPatch {
        set_fields: [("endpoint".to_owned(), endpoint.to_owned())].into(),
        ..RecordPatch::default()
    };
    let alice = claim(&client, key, "alice").await;
    client
        .update(key, alice, proclaim("10.0.0.1"))
        .await
        .unwrap();
    let mut child = node.spawn(&["--output", "json", "leader", key]);
    let (lines, reader) = read_lines(child.stdout.take().unwrap());
    let next = |what: &str| -> Value {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no line for {what}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };
    let quiet = |what: &str| {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(700)) {
            panic!("a line for {what}: {line}");
        }
    };
    let now = next("the holder now");
    assert_eq!(now["lease"]["holder_name"], "alice");
    assert_eq!(now["lease"]["token"].as_u64(), Some(alice));
    assert_eq!(now["record"]["fields"]["endpoint"], "10.0.0.1");

    // A renewal, and a claim of another key under the same prefix, are not changes.
    client.renew(key, alice).await.unwrap();
    claim(&client, "svc/leader2", "carol").await;
    quiet("a renewal or another key");

    // The leader proclaims a new endpoint.
    client
        .update(key, alice, proclaim("10.0.0.2"))
        .await
        .unwrap();
    let proclaimed = next("the proclaimed endpoint");
    assert_eq!(proclaimed["lease"]["holder_name"], "alice");
    assert_eq!(proclaimed["record"]["fields"]["endpoint"], "10.0.0.2");
    assert!(proclaimed["revision"].as_u64() > now["revision"].as_u64());

    // It resigns: no leader; then bob wins the campaign.
    client.release(key, alice).await.unwrap();
    let resigned = next("the resignation");
    assert!(resigned["lease"].is_null(), "{resigned}");
    let bob = claim(&client, key, "bob").await;
    let elected = next("the new leader");
    assert_eq!(elected["lease"]["holder_name"], "bob");
    assert_eq!(elected["lease"]["token"].as_u64(), Some(bob));
    assert!(bob > alice);

    // A graceful transfer: bob offers the key to carol (the record shows the offer), and
    // carol's accept makes her the leader with no gap between the two.
    let carol = node.client().await;
    client
        .offer(
            key,
            bob,
            "carol",
            baton_client::HandoffNote::default(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let offered = next("the offer");
    assert_eq!(offered["lease"]["holder_name"], "bob");
    assert_eq!(offered["record"]["pending_offer"]["to"], "carol");
    carol
        .accept(key, "carol", Duration::from_secs(30))
        .await
        .unwrap();
    let handed = next("the new leader by handoff");
    assert_eq!(handed["lease"]["holder_name"], "carol");
    assert!(handed["lease"]["token"].as_u64() > Some(bob));

    assert_eq!(stop(&mut child, "baton leader").code(), Some(0));
    reader.join().unwrap();
}
