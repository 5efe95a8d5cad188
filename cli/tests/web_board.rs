//! `baton web`'s served page and what its board and key pages say, against a real cluster
//! and a real `baton web` process: the first board in the served HTML (read without a
//! script, by a plain `chromium --headless`, and cell for cell the same as the script's),
//! escaped; who set a status and in which stint; a handoff note's files; the events
//! placeholder; the since column on one line; the listen error. Browser tests drive
//! Debian's headless Chromium through chromedriver, as `web.rs` does.

mod common;
mod web_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_client::{HandoffNote, RecordPatch};
use common::{cli_bin, free_port, Cluster};
use fantoccini::{Client as Browser, Locator};
use web_support::{
    agent, granted, http_get, row_text, start_browser, start_web, text_of, until, Proc,
};

/// A key, a holder and a summary that are markup if the page does not escape them.
const HOSTILE_KEY: &str = r#"tasks/<img src=x onerror="alert(1)">'&"#;
const HOSTILE_HOLDER: &str = "<script>alert(2)</script>";
const HOSTILE_SUMMARY: &str = "</td><b>bold</b><td>";

/// `FIRST_BOARD_WAIT` of cli/src/web/mod.rs: how long the served page waits for its board.
const FIRST_BOARD_WAIT: Duration = Duration::from_secs(3);

/// Each board row of the served page (parsed as HTML, no script run) and of the page as the
/// script keeps it: the key, then each cell's class and text, countdowns made alike (the two
/// were read a moment apart), and how many elements the cluster's text could have made.
const SERVED_AND_LIVE_ROWS: &str = r##"
return fetch(location.pathname + location.search).then((r) => r.text()).then((html) => {
  const served = new DOMParser().parseFromString(html, "text/html");
  const rows = (doc) => [...doc.querySelectorAll("#board tbody tr")].map((tr) => [
    tr.dataset.key,
    tr.className,
    ...[...tr.children].map((td) => {
      let text = td.textContent;
      if (/expires|offer|quarantine/.test(td.className)) text = text.replace(/in \d[\dhdms]*|due/g, "in …");
      return td.className.replace(" expiring", "") + ": " + text;
    }),
  ]);
  const injected = (doc) => doc.querySelectorAll("#board img, #board script, #board b").length;
  return { served: rows(served), live: rows(document), injected: injected(served) + injected(document) };
});
"##;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_page_has_the_first_board_in_it_escaped_and_as_the_script_renders_it() {
    let cluster = Cluster::start(1).await;
    let alice = agent(&cluster, "alice-1").await;
    let bob = agent(&cluster, "bob-1").await;
    let token = granted(
        alice
            .claim("tasks/alpha", "alice@a", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    alice
        .update(
            "tasks/alpha",
            token,
            RecordPatch::status("in_progress").with_summary("step 2 of 3"),
        )
        .await
        .unwrap();
    let hostile = granted(
        bob.claim(HOSTILE_KEY, HOSTILE_HOLDER, Duration::from_secs(600))
            .await
            .unwrap(),
    );
    bob.update(
        HOSTILE_KEY,
        hostile,
        RecordPatch::status("blocked").with_summary(HOSTILE_SUMMARY),
    )
    .await
    .unwrap();
    alice
        .assign("tasks/report", "bob@b", "dispatcher", "write it up")
        .await
        .unwrap();
    let offered = granted(
        alice
            .claim("tasks/offered", "alice@a", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    alice
        .offer(
            "tasks/offered",
            offered,
            "bob@b",
            HandoffNote::default(),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let (_web, url) = start_web(&cluster.endpoints, &["--prefix", "tasks/", "--operator"]).await;

    // Without any script: the rows are in the page as served, every text escaped.
    let (code, body) = http_get(&url, "/");
    assert_eq!(code, 200, "{body}");
    for shown in [
        "<tr data-key=\"tasks/alpha\">",
        "alice@a",
        "in_progress",
        "step 2 of 3",
        "<tr data-key=\"tasks/report\">",
        "unclaimed",
        "to bob@b, lapses <span class=\"countdown\" data-remaining=",
        "tasks/&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&#39;&amp;",
        "&lt;script&gt;alert(2)&lt;/script&gt;",
        "&lt;/td&gt;&lt;b&gt;bold&lt;/b&gt;&lt;td&gt;",
        "revision ",
    ] {
        assert!(
            body.contains(shown),
            "the served page lacks {shown:?}:\n{body}"
        );
    }
    for raw in ["<img src=x", "<script>alert(2)", "<b>bold"] {
        assert!(!body.contains(raw), "{raw:?} went in unescaped:\n{body}");
    }
    // A key's page as served names its key, escaped, in its title and heading.
    let encoded: String = HOSTILE_KEY.bytes().map(|b| format!("%{b:02X}")).collect();
    let (code, body) = http_get(&url, &format!("/key?key={encoded}"));
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("<h2 id=\"key-title\">tasks/&lt;img src=x onerror=&quot;alert(1)&quot;&gt;")
            && !body.contains("<img src=x"),
        "{body}"
    );
    // A prefix with nothing under it says so as served.
    let (_, body) = http_get(&url, "/?prefix=nothing/");
    assert!(
        body.contains("<p id=\"empty\" class=\"quiet\">No key"),
        "{body}"
    );

    // What a plain `chromium --headless` takes a screenshot of, taken at its load event with
    // no waiting: the rows, not an empty board.
    let dom = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--dump-dom",
            &format!("{url}/"),
        ])
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.contains("data-key=\"tasks/alpha\"") && dom.contains("alice@a"),
        "{dom}"
    );

    // In the browser: the script's rows are the served rows, cell for cell, and neither
    // made an element of the cluster's text.
    let (_driver, browser) = start_browser().await;
    browser.goto(&format!("{url}/")).await.unwrap();
    until(&browser, "that it is live", async |b| {
        text_of(b, "live").await == "live"
    })
    .await;
    let rows = browser.execute(SERVED_AND_LIVE_ROWS, vec![]).await.unwrap();
    assert_eq!(rows["injected"], 0, "{rows}");
    assert_eq!(rows["served"], rows["live"], "served and live rows differ");
    let keys: Vec<&str> = rows["served"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [HOSTILE_KEY, "tasks/alpha", "tasks/offered", "tasks/report"],
        "{rows}"
    );
    browser.close().await.unwrap();
}

/// The computed `white-space` of the first `selector` on the page.
async fn white_space(browser: &Browser, selector: &str) -> String {
    let script = format!(
        "return getComputedStyle(document.querySelector({})).whiteSpace;",
        serde_json::to_string(selector).unwrap()
    );
    let value = browser.execute(&script, vec![]).await.unwrap();
    value.as_str().unwrap_or_default().to_owned()
}

/// `baton web --prefix tasks/` on a one-node cluster, and a browser on its board, live.
async fn board_page() -> (Cluster, Proc, String, Proc, Browser) {
    let cluster = Cluster::start(1).await;
    let (web, url) = start_web(&cluster.endpoints, &["--prefix", "tasks/"]).await;
    let (driver, browser) = start_browser().await;
    browser.goto(&format!("{url}/")).await.unwrap();
    until(&browser, "that it is live", async |b| {
        text_of(b, "live").await == "live"
    })
    .await;
    (cluster, web, url, driver, browser)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticker_says_when_no_event_came_and_the_since_column_stays_on_one_line() {
    let (cluster, _web, _url, _driver, browser) = board_page().await;
    let placeholder = browser.find(Locator::Id("ticker-empty")).await.unwrap();
    assert!(placeholder.is_displayed().await.unwrap());
    assert!(
        placeholder.text().await.unwrap().contains("No events yet"),
        "{}",
        text_of(&browser, "board-view").await
    );
    let alice = agent(&cluster, "alice-1").await;
    granted(
        alice
            .claim("tasks/s", "alice@a", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    until(&browser, "the claim", async |b| {
        row_text(b, "tasks/s").await.is_some()
    })
    .await;
    assert!(!placeholder.is_displayed().await.unwrap(), "an event came");
    assert_eq!(
        white_space(&browser, "#board tbody td.since").await,
        "nowrap"
    );
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_says_who_set_it_and_in_which_stint() {
    let (cluster, _web, url, _driver, browser) = board_page().await;
    let alice = agent(&cluster, "alice-1").await;
    let bob = agent(&cluster, "bob-1").await;

    // Alice's stint ends with her status `done`; bob claims the key after her.
    let first = granted(
        alice
            .claim("tasks/s", "alice@a", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    alice
        .update("tasks/s", first, RecordPatch::status("done"))
        .await
        .unwrap();
    alice.release("tasks/s", first).await.unwrap();
    let second = granted(
        bob.claim("tasks/s", "bob@b", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    let theirs = format!("set by alice@a in a previous stint (token {first})");
    until(&browser, "alice's status on bob's row", async |b| {
        row_text(b, "tasks/s")
            .await
            .is_some_and(|(text, _)| text.contains("bob@b") && text.contains(&theirs))
    })
    .await;
    let marked = browser
        .find(Locator::Css(
            "#board tbody tr[data-key=\"tasks/s\"] .status-by.previous",
        ))
        .await;
    assert!(marked.is_ok(), "a previous stint's status is marked");
    // The served page says the same before any script runs.
    let (_, body) = http_get(&url, "/");
    assert!(body.contains(&theirs), "{body}");

    // Bob's own status is his, in this stint; the key's page says so beside the status.
    bob.update("tasks/s", second, RecordPatch::status("in_progress"))
        .await
        .unwrap();
    let his = format!("set by bob@b in this stint (token {second})");
    until(&browser, "bob's own status", async |b| {
        row_text(b, "tasks/s")
            .await
            .is_some_and(|(text, _)| text.contains("in_progress") && text.contains(&his))
    })
    .await;
    browser
        .goto(&format!("{url}/key?key=tasks%2Fs"))
        .await
        .unwrap();
    until(&browser, "the attribution on the key's page", async |b| {
        text_of(b, "key-record")
            .await
            .contains(&format!("in_progress — {his}"))
    })
    .await;

    // A final status set by a release after a renewal (the node says `renewed 1 time;
    // status ...`): the open task's row names the released stint.
    bob.renew("tasks/s", second).await.unwrap();
    bob.release_with_status("tasks/s", second, "verified")
        .await
        .unwrap();
    browser.goto(&format!("{url}/")).await.unwrap();
    let released = format!("set by bob@b in a previous stint (token {second})");
    until(&browser, "the final status of the release", async |b| {
        row_text(b, "tasks/s")
            .await
            .is_some_and(|(text, _)| text.contains("verified") && text.contains(&released))
    })
    .await;
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_pages_handoff_note_shows_its_changed_and_dirty_files() {
    let (cluster, _web, url, _driver, browser) = board_page().await;
    let alice = agent(&cluster, "alice-1").await;
    let held = granted(
        alice
            .claim("tasks/h", "alice@a", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    let note = HandoffNote {
        done: "the cache".into(),
        changed_files: vec!["src/cache.rs".into(), "src/lib.rs".into()],
        dirty_files: vec!["scratch.txt".into()],
        ..HandoffNote::default()
    };
    alice
        .offer("tasks/h", held, "bob@b", note, Duration::from_secs(600))
        .await
        .unwrap();
    browser
        .goto(&format!("{url}/key?key=tasks%2Fh"))
        .await
        .unwrap();
    // As `baton handoff accept` shows them: the dirty ones with the CLI's warning.
    until(&browser, "the note's files", async |b| {
        let text = text_of(b, "key-note").await;
        text.contains("changed files")
            && text.contains("src/cache.rs\nsrc/lib.rs")
            && text.contains("dirty files")
            && text.contains("scratch.txt")
            && text.contains("find out whose they are before tidying anything")
    })
    .await;
    browser.close().await.unwrap();
}

/// `baton web` on a port another program listens on: the system's reason and what to do.
#[test]
fn a_busy_port_is_refused_with_the_systems_reason_and_a_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = Command::new(cli_bin())
        .args(["--endpoints", &format!("127.0.0.1:{}", free_port())])
        .args(["web", "--listen", &addr.to_string()])
        .env_remove("BATON_ENDPOINTS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}"))
            && stderr.contains("Address already in use (os error 98)")
            && stderr.contains("--listen 127.0.0.1:0"),
        "{stderr}"
    );
}

/// With no node answering, the page still comes at once (FIRST_BOARD_WAIT) without rows,
/// for the script to read them, rather than after the client's whole retry deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_node_answering_the_page_comes_without_its_first_board_in_time() {
    let nobody = format!("127.0.0.1:{}", free_port());
    let port = free_port();
    let _web = Proc(
        Command::new(cli_bin())
            .args(["--endpoints", &nobody, "--timeout", "60s"])
            .args(["web", "--listen", &format!("127.0.0.1:{port}")])
            .env_remove("BATON_ENDPOINTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    web_support::listening(port, "baton web").await;
    let url = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    let (code, body) = tokio::task::spawn_blocking(move || http_get(&url, "/"))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(code, 200, "{body}");
    assert!(
        took >= FIRST_BOARD_WAIT && took < FIRST_BOARD_WAIT + Duration::from_secs(5),
        "the page took {took:?}"
    );
    assert!(
        body.contains("<tbody></tbody>") && body.contains("connecting…"),
        "{body}"
    );
}
