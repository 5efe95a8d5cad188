//! What the web board's browser tests share: `baton web` and a headless Chromium through
//! chromedriver, each a process of its own killed by PID when dropped, and ways to wait for
//! what the page shows.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Client};
use fantoccini::{Client as Browser, ClientBuilder, Locator};

use crate::common::{cli_bin, free_port, Cluster};

/// How long the page may take to show a change: it comes from the watch stream, not a
/// reload, so this is generous only for a loaded machine.
pub const SHOWN_WITHIN: Duration = Duration::from_secs(15);

/// A child process killed by PID when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the browser driver is: `BATON_CHROMEDRIVER`, else Debian's.
pub fn chromedriver() -> String {
    std::env::var("BATON_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into())
}

/// Waits until something listens on `port` of loopback.
pub async fn listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "{what} never listened on {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `baton web` against `endpoints` on a free port, with extra flags.
pub async fn start_web(endpoints: &[String], flags: &[&str]) -> (Proc, String) {
    start_web_as(endpoints, flags, None).await
}

/// `baton web` showing bearer token `token`, if any.
pub async fn start_web_as(
    endpoints: &[String],
    flags: &[&str],
    token: Option<&str>,
) -> (Proc, String) {
    let port = free_port();
    let mut command = Command::new(cli_bin());
    command.env_remove("BATON_AUTH_TOKEN_FILE");
    match token {
        Some(t) => command.env("BATON_AUTH_TOKEN", t),
        None => command.env_remove("BATON_AUTH_TOKEN"),
    };
    let child = command
        .args(["--endpoints", &endpoints.join(",")])
        .args(["web", "--listen", &format!("127.0.0.1:{port}")])
        .args(flags)
        .env_remove("BATON_ENDPOINTS")
        .env_remove("BATON_CLIENT_ID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let web = Proc(child);
    listening(port, "baton web").await;
    (web, format!("http://127.0.0.1:{port}"))
}

/// A headless Chromium through a chromedriver of its own.
pub async fn start_browser() -> (Proc, Browser) {
    let port = free_port();
    let driver = Proc(
        Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver())),
    );
    listening(port, "chromedriver").await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,800"]
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let browser = ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("a WebDriver session");
    (driver, browser)
}

/// The board row of `key`, if the page shows one.
pub async fn row_text(browser: &Browser, key: &str) -> Option<(String, String)> {
    let css = format!("#board tbody tr[data-key=\"{key}\"]");
    let row = browser.find(Locator::Css(&css)).await.ok()?;
    let text = row.text().await.ok()?;
    let class = row.attr("class").await.ok()?.unwrap_or_default();
    Some((text, class))
}

/// Waits until `check` holds of the page, or fails with what the page showed.
pub async fn until<F>(browser: &Browser, what: &str, mut check: F)
where
    F: AsyncFnMut(&Browser) -> bool,
{
    let deadline = Instant::now() + SHOWN_WITHIN;
    loop {
        if check(browser).await {
            return;
        }
        if Instant::now() > deadline {
            let body = match browser.find(Locator::Css("body")).await {
                Ok(b) => b.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            panic!("the page never showed {what}; it shows:\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of the element with id `id`, or "" when the page has none.
pub async fn text_of(browser: &Browser, id: &str) -> String {
    match browser.find(Locator::Id(id)).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

pub fn granted(outcome: ClaimOutcome) -> u64 {
    match outcome {
        ClaimOutcome::Granted(g) => g.lease.token,
        other => panic!("expected a grant: {other:?}"),
    }
}

pub async fn agent(cluster: &Cluster, id: &str) -> Client {
    Client::connect(baton_client::ClientConfig {
        client_id: Some(id.into()),
        retry_deadline: Duration::from_secs(20),
        ..baton_client::ClientConfig::with_endpoints(cluster.endpoints.iter().cloned())
    })
    .await
    .unwrap()
}

pub async fn screenshot(browser: &Browser, name: &str) {
    if let Some(dir) = std::env::var_os("BATON_WEB_SCREENSHOTS") {
        let png = browser.screenshot().await.unwrap();
        std::fs::write(std::path::Path::new(&dir).join(name), png).unwrap();
    }
}

/// `GET path` of `base` (`http://host:port`): the status code and the body.
pub fn http_get(base: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let code = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (code, body)
}
