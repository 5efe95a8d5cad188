//! Tests of `crate::watch` against fake nodes.

use super::*;
use crate::config::ClientConfig;
use crate::fake_node::{watch_event, FakeNode, WatchAnswer, WatchEnd, FAKE_BOARD_REVISION};

async fn client(endpoints: &[String], retry_deadline: Duration) -> Client {
    Client::connect(ClientConfig {
        endpoints: endpoints.to_vec(),
        retry_deadline,
        request_timeout: Duration::from_millis(500),
        ..ClientConfig::default()
    })
    .await
    .unwrap()
}

fn revisions(events: &[Result<Event, Error>]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e.as_ref().unwrap().revision)
        .collect()
}

/// The next item, failing the test if it takes more than 5 s.
async fn next(stream: &mut WatchStream) -> Option<Result<Event, Error>> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the watch stream stalled")
}

async fn take(stream: &mut WatchStream, n: usize) -> Vec<Result<Event, Error>> {
    let mut items = Vec::new();
    for _ in 0..n {
        items.push(next(stream).await.expect("the stream ended early"));
    }
    items
}

#[test]
fn watch_streams_are_send_and_unpin() {
    fn assert_send_unpin<T: Send + Unpin + Stream<Item = Result<Event, Error>>>() {}
    assert_send_unpin::<WatchStream>();
}

#[tokio::test]
async fn a_broken_stream_resumes_after_the_last_event_without_gap_or_repeat() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let ev = |r| watch_event(r, &format!("tasks/{r}"), "claimed");
    node.answer_watch(WatchAnswer::Send(
        vec![ev(5), ev(6), ev(7)],
        WatchEnd::Fail(Code::Unavailable, "node shutting down".into()),
    ));
    // The next node sends some of the same events again: they are dropped.
    node.answer_watch(WatchAnswer::Send(
        vec![ev(6), ev(7), ev(8)],
        WatchEnd::Close,
    ));
    node.answer_watch(WatchAnswer::Send(vec![ev(9)], WatchEnd::Open));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;

    let mut stream = client.watch("tasks/", 5);
    assert_eq!(stream.next_revision(), 5);
    let items = take(&mut stream, 5).await;
    assert_eq!(revisions(&items), [5, 6, 7, 8, 9]);
    let first = items[0].as_ref().unwrap();
    assert_eq!(
        (first.key.as_str(), first.kind.as_str(), first.token),
        ("tasks/5", "claimed", 5)
    );
    assert_eq!(first.actor.as_ref().unwrap().name, "codex@b");
    assert_eq!(first.detail, "event 5");
    assert_eq!(stream.next_revision(), 10);
    // Each resume asks from the last revision delivered (more of its events may follow),
    // and skips the ones of it already delivered.
    let froms: Vec<u64> = node.watch_calls().iter().map(|(_, from)| *from).collect();
    assert_eq!(froms, [5, 7, 8]);
    assert!(node
        .watch_calls()
        .iter()
        .all(|(prefix, _)| prefix == "tasks/"));
    // The stream stays open: nothing more, and no end.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stream.next())
            .await
            .is_err()
    );
    task.abort();
}

#[tokio::test]
async fn a_resume_inside_a_revision_delivers_the_rest_of_its_events_once() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    // Revision 6 carries three events (a set's keys): the stream breaks after two.
    let ev = |r, key: &str| watch_event(r, key, "claimed");
    node.answer_watch(WatchAnswer::Send(
        vec![ev(5, "a"), ev(6, "b"), ev(6, "c")],
        WatchEnd::Fail(Code::Unavailable, "node shutting down".into()),
    ));
    node.answer_watch(WatchAnswer::Send(
        vec![ev(6, "b"), ev(6, "c"), ev(6, "d"), ev(7, "e")],
        WatchEnd::Open,
    ));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("", 5);
    let keys: Vec<String> = take(&mut stream, 5)
        .await
        .into_iter()
        .map(|e| e.unwrap().key)
        .collect();
    assert_eq!(keys, ["a", "b", "c", "d", "e"]);
    let froms: Vec<u64> = node.watch_calls().iter().map(|(_, from)| *from).collect();
    assert_eq!(froms, [5, 6]);
    task.abort();
}

#[tokio::test]
async fn events_before_the_requested_revision_are_dropped() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let ev = |r| watch_event(r, "tasks/x", "updated");
    node.answer_watch(WatchAnswer::Send(vec![ev(3), ev(4), ev(7)], WatchEnd::Open));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("tasks/", 5);
    assert_eq!(revisions(&take(&mut stream, 1).await), [7]);
    task.abort();
}

#[tokio::test]
async fn a_watch_from_now_is_placed_after_the_nodes_revision_before_it_starts() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    let after = FAKE_BOARD_REVISION + 1;
    node.answer_watch(WatchAnswer::Send(
        vec![watch_event(after, "tasks/x", "claimed")],
        WatchEnd::Fail(Code::Unknown, "connection reset".into()),
    ));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("tasks/", 0);
    assert_eq!(stream.next_revision(), 0);
    assert_eq!(revisions(&take(&mut stream, 1).await), [after]);
    assert_eq!(stream.next_revision(), after + 1);
    // Let it reconnect after the break: it asks from the event's revision (another event
    // of it may follow), skipping the one delivered.
    tokio::time::timeout(Duration::from_millis(300), stream.next())
        .await
        .unwrap_err();
    let froms: Vec<u64> = node.watch_calls().iter().map(|(_, from)| *from).collect();
    assert_eq!(froms, [after, after]);
    assert_eq!(node.count("board"), 1);
    task.abort();
}

#[tokio::test]
async fn a_failing_endpoint_is_left_for_the_next_one() {
    let down = Arc::new(FakeNode::default());
    let up = Arc::new(FakeNode::default());
    let (down_addr, down_task) = down.serve().await;
    let (up_addr, up_task) = up.serve().await;
    down.fail_always(Code::Unavailable, "shutting down");
    up.answer_watch(WatchAnswer::Send(
        vec![watch_event(12, "tasks/x", "released")],
        WatchEnd::Open,
    ));
    let client = client(
        &[down_addr.to_string(), up_addr.to_string()],
        Duration::from_secs(5),
    )
    .await;
    let mut stream = client.watch("tasks/", 10);
    assert_eq!(revisions(&take(&mut stream, 1).await), [12]);
    assert_eq!(down.count("watch"), 1);
    assert_eq!(up.watch_calls(), [("tasks/".to_string(), 10)]);
    down_task.abort();
    up_task.abort();
}

#[tokio::test]
async fn compacted_at_the_call_is_the_last_item() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    node.answer_watch(WatchAnswer::Refuse(
        Code::OutOfRange,
        "compacted: revision 1 is older than this node's watch window, which starts at 40; \
         re-read the board and watch from its revision"
            .into(),
    ));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("tasks/", 1);
    assert_eq!(
        next(&mut stream).await,
        Some(Err(Error::Compacted {
            requested: 1,
            first_available: 40
        }))
    );
    assert_eq!(next(&mut stream).await, None);
    assert_eq!(next(&mut stream).await, None);
    assert_eq!(node.count("watch"), 1);
    task.abort();
}

#[tokio::test]
async fn compacted_mid_stream_ends_after_the_events_before_it() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    node.answer_watch(WatchAnswer::Send(
        vec![watch_event(2, "tasks/x", "claimed")],
        WatchEnd::Fail(Code::OutOfRange, "compacted: no numbers here".into()),
    ));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("tasks/", 1);
    assert_eq!(revisions(&take(&mut stream, 1).await), [2]);
    assert_eq!(
        next(&mut stream).await,
        Some(Err(Error::Compacted {
            requested: 0,
            first_available: 0
        }))
    );
    assert_eq!(next(&mut stream).await, None);
    task.abort();
}

#[tokio::test]
async fn a_node_with_a_longer_window_is_asked_before_giving_up_as_compacted() {
    let short = Arc::new(FakeNode::default());
    let long = Arc::new(FakeNode::default());
    let (short_addr, short_task) = short.serve().await;
    let (long_addr, long_task) = long.serve().await;
    short.answer_watch(WatchAnswer::Refuse(
        Code::OutOfRange,
        "compacted: revision 3 is older than this node's watch window, which starts at 9".into(),
    ));
    long.answer_watch(WatchAnswer::Send(
        vec![watch_event(3, "tasks/x", "claimed")],
        WatchEnd::Open,
    ));
    let client = client(
        &[short_addr.to_string(), long_addr.to_string()],
        Duration::from_secs(5),
    )
    .await;
    let mut stream = client.watch("tasks/", 3);
    assert_eq!(revisions(&take(&mut stream, 1).await), [3]);
    short_task.abort();
    long_task.abort();
}

#[tokio::test]
async fn invalid_argument_is_the_last_item_and_is_not_retried() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    node.fail_always(Code::InvalidArgument, "prefix must be at most 512 bytes");
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("tasks/", 1);
    assert_eq!(
        next(&mut stream).await,
        Some(Err(Error::InvalidArgument(
            "prefix must be at most 512 bytes".into()
        )))
    );
    assert_eq!(next(&mut stream).await, None);
    assert_eq!(node.count("watch"), 1);
    task.abort();
}

#[tokio::test]
async fn no_node_answering_for_the_retry_deadline_is_unavailable_then_the_end() {
    // Port 1 on localhost refuses connections.
    let client = client(&["127.0.0.1:1".to_string()], Duration::from_millis(300)).await;
    let started = Instant::now();
    let mut stream = client.watch("", 1);
    let item = next(&mut stream).await;
    assert!(
        matches!(&item, Some(Err(Error::Unavailable { last })) if last.contains("127.0.0.1:1")),
        "{item:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(next(&mut stream).await, None);
}

#[tokio::test]
async fn a_node_that_comes_back_within_the_deadline_is_watched_again() {
    let node = Arc::new(FakeNode::default());
    let (addr, task) = node.serve().await;
    node.answer_watch(WatchAnswer::Send(
        vec![watch_event(4, "tasks/x", "claimed")],
        WatchEnd::Fail(Code::Unavailable, "restarting".into()),
    ));
    // Two refusals while it restarts, then it accepts again.
    node.answer_watch(WatchAnswer::Refuse(Code::Unavailable, "starting".into()));
    node.answer_watch(WatchAnswer::Refuse(Code::Unavailable, "starting".into()));
    node.answer_watch(WatchAnswer::Send(
        vec![watch_event(5, "tasks/x", "updated")],
        WatchEnd::Open,
    ));
    let client = client(&[addr.to_string()], Duration::from_secs(5)).await;
    let mut stream = client.watch("tasks/", 4);
    assert_eq!(revisions(&take(&mut stream, 2).await), [4, 5]);
    let froms: Vec<u64> = node.watch_calls().iter().map(|(_, from)| *from).collect();
    assert_eq!(froms, [4, 4, 4, 4]);
    task.abort();
}
