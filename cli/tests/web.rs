//! `baton web` in a real browser: headless Chromium driven through WebDriver (Debian's
//! `chromium` and `chromium-driver`, which `.ci/run` installs), against a real 3-node
//! cluster and a real `baton web` process, each started here and stopped by PID.
//!
//! Set `BATON_WEB_SCREENSHOTS=DIR` to keep the board and a key's page as PNGs (the ones docs/agents.md
//! shows come from here: `BATON_WEB_SCREENSHOTS=$PWD/docs cargo test -p baton-cli --test web`).

mod common;
mod web_support;

use std::process::Command;
use std::time::Duration;

use baton_client::{HandoffNote, VolatileFact};
use common::{cli_bin, AuthNode, Cluster};
use fantoccini::Locator;
use web_support::{
    agent, granted, http_get, row_text, screenshot, start_browser, start_web, start_web_as,
    text_of, until,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_follows_claims_releases_assignments_and_handoffs_live_and_survives_a_node_kill()
{
    let mut cluster = Cluster::start(3).await;
    let codex = agent(&cluster, "codex-1").await;
    let claude = agent(&cluster, "claude-1").await;
    let (_web, url) = start_web(&cluster.endpoints, &["--prefix", "tasks/"]).await;
    let (_driver, browser) = start_browser().await;
    browser.goto(&format!("{url}/")).await.unwrap();
    until(&browser, "that it is live", async |b| {
        text_of(b, "live").await == "live"
    })
    .await;

    // A claim appears without a reload, naming its holder and token.
    let token = granted(
        codex
            .claim(
                "tasks/evidence-42",
                "codex@host-b",
                Duration::from_secs(600),
            )
            .await
            .unwrap(),
    );
    until(&browser, "the claim of tasks/evidence-42", async |b| {
        row_text(b, "tasks/evidence-42")
            .await
            .is_some_and(|(text, _)| {
                text.contains("codex@host-b") && text.contains(&format!(" {token} "))
            })
    })
    .await;

    // A claimant waiting in the key's line shows beside its holder, then leaves it.
    let waited = claude
        .wait_once(
            "tasks/evidence-42",
            "claude@host-a",
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    assert!(
        matches!(waited, baton_client::LineOutcome::InLine(_)),
        "{waited:?}"
    );
    until(&browser, "the line of tasks/evidence-42", async |b| {
        row_text(b, "tasks/evidence-42")
            .await
            .is_some_and(|(text, _)| text.contains("1 (next claude@host-a)"))
    })
    .await;
    claude
        .leave_line("tasks/evidence-42", "claude@host-a")
        .await
        .unwrap();

    // An assignment of a key no one holds shows as a task waiting for its assignee; once
    // someone else claims it, the assignment to someone else than the holder is marked.
    codex
        .assign("tasks/report", "claude@host-a", "dispatcher", "write it up")
        .await
        .unwrap();
    until(
        &browser,
        "the unclaimed assignment of tasks/report",
        async |b| {
            row_text(b, "tasks/report").await.is_some_and(|(text, _)| {
                text.contains("unclaimed") && text.contains("claude@host-a")
            })
        },
    )
    .await;
    granted(
        codex
            .claim("tasks/report", "codex@host-b", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    until(
        &browser,
        "the assignment mismatch on tasks/report",
        async |b| {
            row_text(b, "tasks/report")
                .await
                .is_some_and(|(text, class)| {
                    text.contains("claude@host-a") && class.contains("mismatch")
                })
        },
    )
    .await;

    // The giver's status before it offers: the taker's page says whose it is.
    codex
        .update(
            "tasks/evidence-42",
            token,
            baton_client::RecordPatch::status("in_progress").with_summary("2 of 4 domains"),
        )
        .await
        .unwrap();
    // A handoff offer shows on the board, and the key's page shows the note, its files and
    // its volatile fact marked as needing verification with its check command.
    let note = HandoffNote {
        done: "domains 1-2".into(),
        remaining: "domains 3-4".into(),
        first_step: "rerun the verifier".into(),
        changed_files: vec!["verify/domains.rs".into()],
        dirty_files: vec!["todo.txt".into()],
        volatile_facts: vec![VolatileFact {
            name: "rows left".into(),
            claimed_value: "4".into(),
            check_command: "wc -l < todo.txt".into(),
        }],
        ..HandoffNote::default()
    };
    codex
        .offer(
            "tasks/evidence-42",
            token,
            "claude@host-a",
            note,
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    until(&browser, "the pending offer", async |b| {
        row_text(b, "tasks/evidence-42")
            .await
            .is_some_and(|(text, _)| text.contains("to claude@host-a, lapses in 9m"))
    })
    .await;
    screenshot(&browser, "web-board.png").await;
    claude
        .accept(
            "tasks/evidence-42",
            "claude@host-a",
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    until(&browser, "the taker holding tasks/evidence-42", async |b| {
        row_text(b, "tasks/evidence-42")
            .await
            .is_some_and(|(text, _)| text.starts_with("tasks/evidence-42 claude@host-a "))
    })
    .await;
    browser
        .goto(&format!("{url}/key?key=tasks%2Fevidence-42"))
        .await
        .unwrap();
    until(&browser, "the key's note and timeline", async |b| {
        let text = text_of(b, "key-view").await;
        text.contains("needs verification")
            && text.contains("wc -l < todo.txt")
            && text.contains("rerun the verifier")
            && text.contains("codex@host-b (token")
            && text.contains("handed off")
            && text.contains(&format!(
                "in_progress — set by codex@host-b in a previous stint (token {token})"
            ))
    })
    .await;
    screenshot(&browser, "web-key.png").await;

    // A release ends the lease; the key stays on the board as its assignee's, unclaimed.
    browser.goto(&format!("{url}/")).await.unwrap();
    until(&browser, "tasks/report", async |b| {
        row_text(b, "tasks/report").await.is_some()
    })
    .await;
    let report = codex
        .probe("tasks/report", baton_client::ReadMode::Linearizable)
        .await
        .unwrap();
    codex
        .release("tasks/report", report.lease.unwrap().token)
        .await
        .unwrap();
    until(&browser, "tasks/report released and unclaimed", async |b| {
        row_text(b, "tasks/report").await.is_some_and(|(text, _)| {
            text.contains("unclaimed")
                && text.contains("claude@host-a")
                && !text.contains("codex@host-b")
        })
    })
    .await;

    // A posted task no one holds or is assigned shows as open, with its status and summary.
    codex
        .post(
            "tasks/posted",
            baton_client::RecordPatch {
                summary: Some("triage the flaky test".into()),
                ..Default::default()
            },
            None,
            "dispatch@ci",
            false,
        )
        .await
        .unwrap();
    until(&browser, "the posted task, open", async |b| {
        row_text(b, "tasks/posted")
            .await
            .is_some_and(|(text, _)| text.contains("open") && text.contains("triage the flaky"))
    })
    .await;

    // A key held by permits shows every holder, the count of N, and each token.
    let mut tokens = Vec::new();
    for (client, name) in [(&claude, "claude@host-a"), (&codex, "codex@host-b")] {
        let outcome = client
            .claim_permit("tasks/gpu-runner", name, Duration::from_secs(600), 3)
            .await
            .unwrap();
        tokens.push(granted(outcome));
    }
    until(
        &browser,
        "both permit holders of tasks/gpu-runner",
        async |b| {
            row_text(b, "tasks/gpu-runner")
                .await
                .is_some_and(|(text, _)| {
                    text.contains("claude@host-a, codex@host-b (2/3 permits)")
                        && text.contains(&format!("{}, {}", tokens[0], tokens[1]))
                })
        },
    )
    .await;

    // A key held shared shows every holder and how many share it; its page lists each
    // shared holder with its token.
    let mut shared = Vec::new();
    for (client, name) in [(&claude, "claude@host-a"), (&codex, "codex@host-b")] {
        let outcome = client
            .claim_shared("tasks/manual", name, Duration::from_secs(600))
            .await
            .unwrap();
        shared.push(granted(outcome));
    }
    until(&browser, "both shared holders of tasks/manual", async |b| {
        row_text(b, "tasks/manual").await.is_some_and(|(text, _)| {
            text.contains("claude@host-a, codex@host-b (2 shared)")
                && text.contains(&format!("{}, {}", shared[0], shared[1]))
        })
    })
    .await;
    browser
        .goto(&format!("{url}/key?key=tasks%2Fmanual"))
        .await
        .unwrap();
    until(
        &browser,
        "the shared holders on the key's page",
        async |b| {
            let text = text_of(b, "key-view").await;
            text.contains("held shared by 2:")
                && text.contains(&format!(
                    "claude@host-a (client claude-1) with token {}",
                    shared[0]
                ))
                && text.contains(&format!(
                    "codex@host-b (client codex-1) with token {}",
                    shared[1]
                ))
        },
    )
    .await;
    browser.goto(&format!("{url}/")).await.unwrap();

    // The node `baton web` talks to first dies: the page stays live through another one.
    cluster.kill(1);
    granted(
        codex
            .claim("tasks/after-kill", "codex@host-b", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    until(&browser, "a claim made after node 1 died", async |b| {
        row_text(b, "tasks/after-kill").await.is_some()
    })
    .await;
    browser.close().await.unwrap();
}

/// With auth on, the page reads with the credentials `baton web` was given: a principal
/// without `read` on a prefix sees none of its keys, only the refusal, while the keys it may
/// read show as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_a_principal_without_read_on_a_prefix_does_not_see_its_keys() {
    let node = AuthNode::start(&["ops", "viewer"]);
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        "[[rule]]\nwho = [\"ops\"]\nprefixes = [\"\"]\ncan = [\"admin\"]\n\n\
         [[rule]]\nwho = [\"viewer\"]\nprefixes = [\"public/\"]\ncan = [\"read\"]\n",
    )
    .unwrap();
    let set = node.baton(
        "ops",
        "s-ops",
        &["access", "set", &policy.path().display().to_string()],
    );
    assert!(set.status.success(), "{set:?}");
    for key in ["secret/launch-codes", "public/lunch-menu"] {
        let out = node.baton(
            "ops",
            "s-ops",
            &["claim", key, "--holder", "ops", "--ttl", "10m"],
        );
        assert!(out.status.success(), "{out:?}");
    }
    let endpoints = [node.addr.clone()];
    let (_web, url) = start_web_as(&endpoints, &[], Some(&node.tokens["viewer"])).await;
    let (_driver, browser) = start_browser().await;
    browser
        .goto(&format!("{url}/?prefix=public/"))
        .await
        .unwrap();
    until(&browser, "the public key", async |b| {
        row_text(b, "public/lunch-menu").await.is_some()
    })
    .await;
    browser
        .goto(&format!("{url}/?prefix=secret/"))
        .await
        .unwrap();
    until(&browser, "the refusal", async |b| {
        text_of(b, "board-error").await.contains("permission")
    })
    .await;
    assert!(row_text(&browser, "secret/launch-codes").await.is_none());
    // Every key: the same refusal, and not a secret key on the page.
    browser.goto(&format!("{url}/?prefix=")).await.unwrap();
    until(&browser, "the refusal for every key", async |b| {
        !text_of(b, "board-error").await.is_empty()
    })
    .await;
    let body = browser
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!body.contains("launch-codes"), "{body}");
    // The key's own page is refused too.
    let key_api = format!("{url}/api/key?key=secret%2Flaunch-codes");
    browser.goto(&key_api).await.unwrap();
    let answer = browser
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        answer.contains("error") && !answer.contains("\"holder_name\""),
        "{answer}"
    );
    browser.close().await.unwrap();
}

/// Bad input gets a clear answer and changes nothing; the page is read-only unless
/// --operator; it refuses to listen beyond loopback unless told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_refusals_of_the_page_server() {
    let cluster = Cluster::start(1).await;
    let (_web, url) = start_web(&cluster.endpoints, &[]).await;
    let (code, body) = http_get(&url, "/api/board?limit=0");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("PAGE_KEYS_MAX"), "{body}");
    let (code, body) = http_get(&url, "/api/board?limit=201");
    assert_eq!(code, 400, "{body}");
    let (code, body) = http_get(&url, "/api/board?limit=200");
    assert_eq!(code, 200, "{body}");
    let (code, body) = http_get(&url, "/");
    assert_eq!(code, 200);
    assert!(
        body.contains("/static/app.js") && !body.contains("https://"),
        "no CDN: {body}"
    );
    // A revoke on a read-only page: refused, and the lease stays.
    let client = cluster.client().await;
    granted(
        client
            .claim("tasks/kept", "codex", Duration::from_secs(600))
            .await
            .unwrap(),
    );
    let revoke = |base: &str, header: bool| {
        use std::io::{Read, Write};
        let addr = base.trim_start_matches("http://").to_owned();
        let body = r#"{"key":"tasks/kept","reason":"test"}"#;
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        let extra = if header { "X-Baton-Web: 1\r\n" } else { "" };
        write!(
            stream,
            "POST /api/revoke HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer[9..12].parse::<u16>().unwrap()
    };
    assert_eq!(revoke(&url, true), 403, "read-only page");
    let (_operator, op_url) = start_web(&cluster.endpoints, &["--operator"]).await;
    assert_eq!(
        revoke(&op_url, false),
        403,
        "no X-Baton-Web header: not from the page"
    );
    let held = client
        .probe("tasks/kept", baton_client::ReadMode::Linearizable)
        .await
        .unwrap();
    assert!(held.lease.is_some(), "refused revokes changed nothing");
    assert_eq!(revoke(&op_url, true), 200);
    let freed = client
        .probe("tasks/kept", baton_client::ReadMode::Linearizable)
        .await
        .unwrap();
    assert!(freed.lease.is_none(), "the operator's revoke went through");
    // Beyond loopback only when told.
    let out = Command::new(cli_bin())
        .args([
            "--endpoints",
            &cluster.endpoints[0],
            "web",
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allow-remote"),
        "{out:?}"
    );
}

/// With --operator the page revokes with the reason the operator gives (recorded in the
/// history), pages through a board larger than a page, and shows a node that does not
/// answer as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_revokes_from_the_page_it_pages_and_a_dead_node_shows() {
    let mut cluster = Cluster::start(3).await;
    let codex = agent(&cluster, "codex-1").await;
    for key in ["jobs/a", "jobs/b", "jobs/c"] {
        granted(
            codex
                .claim(key, "codex@host-b", Duration::from_secs(600))
                .await
                .unwrap(),
        );
    }
    let (_web, url) = start_web(&cluster.endpoints, &["--operator"]).await;
    let (_driver, browser) = start_browser().await;
    // Two keys a page: the third is on the next one.
    browser
        .goto(&format!("{url}/?prefix=jobs/&limit=2"))
        .await
        .unwrap();
    until(&browser, "the first page", async |b| {
        row_text(b, "jobs/b").await.is_some() && row_text(b, "jobs/c").await.is_none()
    })
    .await;
    browser
        .find(Locator::Id("next"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until(&browser, "the second page", async |b| {
        row_text(b, "jobs/c").await.is_some() && row_text(b, "jobs/a").await.is_none()
    })
    .await;
    // Revoke jobs/c from its row: the page asks for the reason.
    browser
        .find(Locator::Css("#board tbody tr[data-key=\"jobs/c\"] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser.send_alert_text("stuck on step 4").await.unwrap();
    browser.accept_alert().await.unwrap();
    // The lease is gone, and the key is held back for the revoked holder's window.
    until(&browser, "jobs/c revoked and held back", async |b| {
        row_text(b, "jobs/c").await.is_some_and(|(text, _)| {
            text.contains("revoked, claimable") && !text.contains("codex@host-b")
        })
    })
    .await;
    let history = codex
        .history("jobs/c", baton_client::ReadMode::Linearizable)
        .await
        .unwrap();
    let last = history.events.last().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.detail.as_str()),
        ("revoked", "stuck on step 4")
    );
    // A node that dies is shown as not answering.
    cluster.kill(2);
    until(&browser, "node 2 not answering", async |b| {
        text_of(b, "cluster").await.contains("does not answer")
    })
    .await;
    browser.close().await.unwrap();
}
