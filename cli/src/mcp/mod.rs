//! `baton mcp`: a Model Context Protocol tool server over stdio, one process per agent
//! session (`claude mcp add baton -- baton mcp`). stdout carries the protocol only; logs go
//! to stderr.
//!
//! - [`tools`]: the tools, their arguments and results (structured JSON with schemas).
//! - [`book`]: the leases the server holds for the agent, idle-aware renewal, and the
//!   notices of lost leases.
//!
//! The data path of a call: the agent's client sends `tools/call` on stdin → rmcp routes it
//! to a [`tools::Baton`] method → the [`baton_client::Client`] (same endpoints, TLS, token
//! and client id as every other `baton` command) → the cluster; the answer, with the
//! session's notices, goes back as one JSON-RPC line on stdout.

pub mod book;
pub mod tools;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton_client::Client;
use rmcp::ServiceExt;

/// Leases lapse after this long without a tool call, unless `--idle` says otherwise.
pub const IDLE_DEFAULT: Duration = Duration::from_secs(15 * 60);

/// Shortest `--idle` accepted.
pub const IDLE_MIN: Duration = Duration::from_secs(1);

/// Longest `--idle` accepted: a day. An agent that needs longer without a call should
/// hand off.
pub const IDLE_MAX: Duration = Duration::from_secs(24 * 3600);

/// Lease length of a claim that does not give one, unless `--ttl` says otherwise.
pub const TTL_DEFAULT: Duration = Duration::from_secs(60);

/// Shortest lease a claim may ask for, in seconds (the cluster's limit).
pub const TTL_S_MIN: u64 = 2;

/// Longest lease a claim may ask for, in seconds (the cluster's limit).
pub const TTL_S_MAX: u64 = 3600;

/// Longest a claim may wait for a held key, in seconds: a tool call should not hang for
/// longer than an agent's client waits.
pub const WAIT_S_MAX: u64 = 300;

/// How often the idle watch looks, at most; shorter for a short idle limit.
pub const IDLE_CHECK_INTERVAL_MAX: Duration = Duration::from_secs(1);

/// What one session's server is started with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The holder name this session claims and accepts as.
    pub holder: String,
    /// Leases lapse after this long without a tool call.
    pub idle: Duration,
    /// Lease length of a claim that does not say.
    pub ttl: Duration,
    /// Offer the operator tools (revoke, quarantine, cluster status, access).
    pub operator: bool,
    /// Where git state is read for a handoff and facts are checked on accept.
    pub workdir: PathBuf,
    /// `handoff_accept` may run the giver's check commands when the agent asks
    /// (`run_checks`); without it the commands are only returned.
    pub run_checks: bool,
}

/// Announces each kept lease's loss the moment its guard hears of it, as an MCP
/// `notifications/message` (level warning, logger `baton`, data: the notice), for clients
/// that show them; the next tool result names it too (`Book::touch`). The MCP specification
/// marks logging deprecated (SEP-2577) but clients still show it, and it is the one
/// server-initiated message an agent's client surfaces unasked.
async fn announce_losses(
    client: Client,
    peer: rmcp::Peer<rmcp::RoleServer>,
    mut losses: tokio::sync::mpsc::Receiver<book::LossTap>,
) {
    let mut waiting = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            tap = losses.recv() => {
                let Some((key, token, signal)) = tap else { return };
                let client = client.clone();
                let peer = peer.clone();
                waiting.spawn(async move {
                    let Some(reason) = signal.await else { return };
                    // Told first, from what the guard knows; then, if the cluster's history
                    // says more (who revoked it, and why), told again (`loss::ACCOUNT_TIMEOUT`).
                    let first = book::notice(&key, token, crate::loss::told(Some(reason.clone())));
                    announce(&peer, &key, &first).await;
                    let explained = book::explain(&client, &key, token, Some(reason)).await;
                    if explained != first {
                        announce(&peer, &key, &explained).await;
                    }
                });
            }
            Some(_) = waiting.join_next(), if !waiting.is_empty() => {}
        }
    }
}

/// Sends one loss notice as a logging message (level warning, logger `baton`).
#[allow(deprecated)]
async fn announce(peer: &rmcp::Peer<rmcp::RoleServer>, key: &str, notice: &book::Notice) {
    let data = serde_json::to_value(notice).unwrap_or_default();
    let message =
        rmcp::model::LoggingMessageNotificationParam::new(rmcp::model::LoggingLevel::Warning, data)
            .with_logger("baton");
    if let Err(error) = peer.notify_logging_message(message).await {
        tracing::debug!(%error, key, "a loss notification was not sent");
    }
}

/// Serves MCP on stdin/stdout until the client goes away, then leaves every lease to lapse
/// at its TTL. Returns how many leases were left to lapse.
pub async fn serve(client: Client, settings: Settings) -> anyhow::Result<usize> {
    let idle = settings.idle;
    let client_for_notices = client.clone();
    let server = tools::Baton::new(client, settings);
    let book = server.book();
    let watch_book = book.clone();
    let check_every = (idle / 10).min(IDLE_CHECK_INTERVAL_MAX);
    let idle_watch = tokio::spawn(async move {
        loop {
            tokio::time::sleep(check_every).await;
            watch_book.lapse_if_idle(Instant::now()).await;
        }
    });
    let (taps, losses) = tokio::sync::mpsc::channel(book::LOSS_TAPS_QUEUED_MAX);
    book.tap_losses(taps);
    let running = server.serve(rmcp::transport::stdio()).await?;
    let announcer = tokio::spawn(announce_losses(
        client_for_notices,
        running.peer().clone(),
        losses,
    ));
    let ended = running.waiting().await;
    idle_watch.abort();
    announcer.abort();
    let left = book.abandon_all().await;
    tracing::info!(
        leases = left,
        "session over: leases left to lapse at their TTL"
    );
    ended?;
    Ok(left)
}
