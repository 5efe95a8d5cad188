//! One parsed command run: call the library, render ([`crate::output`]), say how it went
//! ([`crate::exit`]). No protocol knowledge lives here; everything goes through
//! [`baton_client`].

use std::time::Instant;

use baton_client::{Client, ClientConfig, ReadMode, RecordPatch};

use crate::args::{Cli, ClusterCommand, Command};
use crate::output::Rendered;
use crate::{
    access, args, bench, cluster, commit_hook, exit, handoff, leader, mcp, output, records, run,
    sets, tasks, watch, web,
};

/// Runs one parsed command and renders its result.
pub async fn run(cli: Cli) -> anyhow::Result<Rendered> {
    let format = cli.global.output;
    if let Command::Completions { shell } = cli.command {
        let mut script = Vec::new();
        clap_complete::generate(
            shell,
            &mut <Cli as clap::CommandFactory>::command(),
            "baton",
            &mut script,
        );
        return Ok(Rendered {
            stdout: String::from_utf8_lossy(&script).into_owned(),
            verdict: exit::Verdict::Ok,
            error_line: None,
        });
    }
    if let Command::Bench(bench_args) = cli.command {
        // Each claimant builds its own client: no shared one, no --client-id.
        let (tls, token) = (cli.global.tls()?, cli.global.token()?);
        let connect = bench::Connect {
            endpoints: cli.global.endpoints,
            tls,
            token,
        };
        return bench::run(bench_args, connect, cli.global.timeout, format).await;
    }
    let wait_timeout = cli.global.wait_timeout();
    let long_running = matches!(
        &cli.command,
        Command::Cluster {
            command: ClusterCommand::Add { .. }
                | ClusterCommand::Remove { .. }
                | ClusterCommand::Snapshot
                | ClusterCommand::Backup { .. }
        }
    );
    // A commit waits on the git hook: it gives up on an unavailable cluster sooner.
    let hook = matches!(&cli.command, Command::Hook { .. });
    let retry_deadline = match (cli.global.timeout, long_running) {
        (None, true) => cluster::CLUSTER_CHANGE_TIMEOUT_DEFAULT,
        (None, false) if hook => commit_hook::HOOK_RETRY_DEADLINE,
        _ => cli.global.retry_timeout(),
    };
    let tls = cli.global.tls()?;
    let token = cli.global.token()?;
    let client_id_given = cli.global.client_id.is_some();
    let config = ClientConfig {
        tls,
        token,
        // One attempt may take as long as the whole call for the slow cluster commands.
        request_timeout: if long_running {
            retry_deadline
        } else {
            ClientConfig::default().request_timeout
        },
        retry_deadline,
        endpoints: cli.global.endpoints,
        client_id: cli.global.client_id,
        ..ClientConfig::default()
    };
    let client = Client::connect(config).await?;
    // Long-lived commands say where they stand themselves, as the git hook does on giving up
    // (its deadline is short); the rest say so when no node listens at all, instead of a
    // silent wait for the retry deadline.
    let quiet = hook
        || matches!(
            &cli.command,
            Command::Mcp(_)
                | Command::Watch { .. }
                | Command::Leader { .. }
                | Command::Run(_)
                | Command::Web(_)
        );
    let hint = (format == args::OutputFormat::Table && !quiet)
        .then(|| tokio::spawn(hint_if_no_node_listens(client.endpoints().to_vec())));
    let read_mode = |stale: bool| {
        if stale {
            ReadMode::Stale
        } else {
            ReadMode::Linearizable
        }
    };

    let rendered = match cli.command {
        Command::Claim {
            keys,
            permits,
            shared,
            ..
        } if keys.len() > 1 && (permits.is_some_and(|n| n > 1) || shared) => {
            let option = if shared { "--shared" } else { "--permits" };
            return Err(anyhow::anyhow!(
                "{option} claims one key: a set of {} keys is claimed exclusively, all or none",
                keys.len()
            ));
        }
        Command::Claim {
            keys,
            holder,
            ttl,
            wait,
            poll: _,
            permits: _,
            shared: _,
        } if keys.len() > 1 => {
            let holder = holder.unwrap_or_else(args::default_holder);
            let wait = wait.then_some(wait_timeout);
            sets::claim(&client, &keys, &holder, ttl, wait, format).await?
        }
        Command::Claim {
            keys,
            holder,
            ttl,
            wait,
            poll,
            permits,
            shared,
        } => {
            let key = keys.into_iter().next().unwrap_or_default();
            let holder = holder.unwrap_or_else(args::default_holder);
            let tell = format == args::OutputFormat::Table;
            let permits = match shared {
                true => baton_client::Sharing::Shared,
                false => baton_client::Sharing::Permits(permits.unwrap_or(1)),
            };
            // A refusal (quarantined, the cluster's key limit) is an answer with its facts.
            let in_line = wait && !poll;
            let wait = wait.then_some(Wait {
                timeout: wait_timeout,
                in_line,
            });
            let claimed = claim(&client, &key, &holder, ttl, wait, tell, permits);
            let claimed = if in_line {
                match stop_on_signal(claimed).await {
                    Ok(claimed) => claimed,
                    Err(signal) => return Ok(left_on_signal(&client, &key, &holder, signal).await),
                }
            } else {
                claimed.await
            };
            match claimed {
                Ok(outcome) => output::claim(&outcome, format, Instant::now()),
                Err(error) => handoff::refusal(&key, error, format)?,
            }
        }
        // A renew or release from another session than the holder's is refused (exit 3)
        // with the holder named, like any refusal.
        Command::Renew { keys, token } if keys.len() > 1 => {
            sets::renew(&client, &keys, token, format).await?
        }
        Command::Renew { keys, token } => {
            let key = keys.into_iter().next().unwrap_or_default();
            match client.renew(&key, token).await {
                Ok(outcome) => output::renew(&key, token, &outcome, format, Instant::now()),
                Err(error) => handoff::refusal(&key, error, format)?,
            }
        }
        Command::Release {
            keys,
            token,
            status,
        } if keys.len() > 1 => {
            let status = status.unwrap_or_default();
            sets::release(&client, &keys, token, &status, format).await?
        }
        Command::Release {
            keys,
            token,
            status,
        } => {
            let key = keys.into_iter().next().unwrap_or_default();
            let status = status.unwrap_or_default();
            match client.release_with_status(&key, token, &status).await {
                Ok(outcome) => output::release(&key, token, &outcome, format),
                Err(error) => handoff::refusal(&key, error, format)?,
            }
        }
        Command::Probe { key, stale } => {
            // The record read returns the lease too, and the assignment to show beside it.
            let view = client.record(&key, read_mode(stale)).await?;
            output::probe(&view, format)
        }
        Command::Update {
            key,
            token,
            status,
            summary,
            set,
            unset,
        } => {
            let patch = RecordPatch {
                status,
                summary,
                set_fields: set.into_iter().collect(),
                remove_fields: unset,
            };
            match client.update(&key, token, patch).await {
                Ok(record) => records::updated(&key, &record, format),
                Err(error) => handoff::refusal(&key, error, format)?,
            }
        }
        Command::Assign {
            key,
            to,
            clear,
            by,
            reason,
        } => {
            let by = by.unwrap_or_else(args::default_holder);
            let done = match to {
                Some(to) if !clear => client
                    .assign(&key, &to, &by, &reason)
                    .await
                    .map(|r| records::assigned(&key, &r, format)),
                _ => client
                    .unassign(&key, &by, &reason)
                    .await
                    .map(|r| records::unassigned(&key, &r, format)),
            };
            match done {
                Ok(rendered) => rendered,
                Err(error) => handoff::refusal(&key, error, format)?,
            }
        }
        Command::Post(args) => tasks::post(&client, args, format).await?,
        Command::ClaimNext(args) => tasks::claim_next(&client, args, format).await?,
        Command::Record { key, stale } => {
            let view = client.record(&key, read_mode(stale)).await?;
            records::record(&view, format)
        }
        Command::History { key, events, stale } => {
            let history = client.history(&key, read_mode(stale)).await?;
            records::history(&history, events, format)
        }
        Command::Watch { prefix, from } => watch::run(&client, &prefix, from, format).await?,
        Command::Leader { key } => leader::run(&client, &key, format).await?,
        Command::Handoff { command } => handoff::run(&client, command, format).await?,
        Command::Board {
            prefix,
            limit,
            start_after,
            stale,
            unclaimed,
        } => {
            let board = client
                .board(&prefix, limit, &start_after, read_mode(stale))
                .await?;
            output::board(&prefix, &board, unclaimed, format)
        }
        Command::Check { key, token } => {
            let check = client.check_token(&key, token).await?;
            output::check(&key, token, &check, format)
        }
        Command::Quarantine { prefix, delay } => {
            let rules = match (prefix, delay) {
                (Some(prefix), Some(delay)) => client.set_quarantine(&prefix, delay).await?,
                _ => client.quarantine_rules(ReadMode::Linearizable).await?,
            };
            output::quarantine_rules(&rules, format)
        }
        Command::Revoke { key, reason, now } => {
            let revoked = client.revoke_with(&key, &reason, now).await?;
            output::revoke(&key, &revoked, format)
        }
        Command::Run(run_args) => run::run(&client, run_args, wait_timeout, format).await?,
        Command::Mcp(mcp_args) => {
            let settings = mcp::Settings {
                holder: mcp_args.holder.unwrap_or_else(args::default_holder),
                idle: in_range(
                    "--idle",
                    mcp_args.idle.unwrap_or(mcp::IDLE_DEFAULT),
                    mcp::IDLE_MIN,
                    mcp::IDLE_MAX,
                )?,
                ttl: in_range(
                    "--ttl",
                    mcp_args.ttl.unwrap_or(mcp::TTL_DEFAULT),
                    std::time::Duration::from_secs(mcp::TTL_S_MIN),
                    std::time::Duration::from_secs(mcp::TTL_S_MAX),
                )?,
                operator: mcp_args.operator,
                workdir: std::env::current_dir()?,
                run_checks: mcp_args.run_checks,
            };
            mcp::serve(client, settings).await?;
            Rendered {
                stdout: String::new(),
                verdict: exit::Verdict::Ok,
                error_line: None,
            }
        }
        Command::Web(web_args) => {
            if !web_args.listen.ip().is_loopback() && !web_args.allow_remote {
                anyhow::bail!(
                    "--listen {} is reachable from other machines, and the page reads (and \
                     with --operator revokes) with your credentials: add --allow-remote if \
                     that is meant",
                    web_args.listen
                );
            }
            let settings = web::Settings {
                listen: web_args.listen,
                prefix: web_args.prefix,
                operator: web_args.operator,
            };
            web::serve(client, settings).await?;
            Rendered {
                stdout: String::new(),
                verdict: exit::Verdict::Ok,
                error_line: None,
            }
        }
        Command::Hook { command } => {
            commit_hook::run(command, &client, client_id_given, format).await?
        }
        Command::Cluster {
            command: ClusterCommand::Status,
        } => output::cluster_status(&cluster::cluster_status_command(&client).await?, format),
        Command::Cluster { command } => cluster::run(&client, command, format).await?,
        Command::Access { command } => access::run(&client, command, format).await?,
        Command::Bench(_) => unreachable!("bench ran above, without the shared client"),
        Command::Completions { .. } => unreachable!("completions were printed above"),
    };
    if let Some(hint) = hint {
        hint.abort();
    }
    Ok(rendered)
}

/// Runs `wait` unless SIGINT or SIGTERM comes first (then `Err` with the signal's number).
/// The handlers are installed for the wait only: before and after, the signals end the
/// process as usual.
async fn stop_on_signal<T>(wait: impl std::future::Future<Output = T>) -> Result<T, i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return Ok(wait.await);
    };
    tokio::select! {
        done = wait => Ok(done),
        _ = interrupt.recv() => Err(nix::sys::signal::Signal::SIGINT as i32),
        _ = terminate.recv() => Err(nix::sys::signal::Signal::SIGTERM as i32),
    }
}

/// A wait in line stopped by `signal`: leaves the line at once (so those behind do not
/// wait for a place no one renews to lapse) and releases a grant the line made meanwhile,
/// which nobody was told of; exits 128 + the signal, as a process the signal ended does.
async fn left_on_signal(client: &Client, key: &str, holder: &str, signal: i32) -> Rendered {
    const CLEANUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
    let cleanup = async {
        let (_, holds) = client.leave_line(key, holder).await.ok()?;
        let lease = holds?;
        client.release(key, lease.token).await.ok()
    };
    let released = tokio::time::timeout(CLEANUP_TIMEOUT, cleanup)
        .await
        .ok()
        .flatten();
    let then = if released.is_some() {
        "; the key the line granted meanwhile is released"
    } else {
        ""
    };
    Rendered {
        stdout: String::new(),
        verdict: crate::exit::Verdict::Exit(128u8.saturating_add(signal as u8)),
        error_line: Some(format!("stopped waiting for {key}: left its line{then}")),
    }
}

/// How `baton claim --wait` waits.
struct Wait {
    timeout: std::time::Duration,
    /// In the key's line in the cluster (the default), or by claiming again (`--poll`).
    in_line: bool,
}

/// `baton claim`: one claim, or with `wait` a wait in the key's line (or, with `--poll` or
/// on a cluster not yet on data format 11, one claim and then claims again while it is
/// held), saying whom it waits for on stderr when `tell`.
async fn claim(
    client: &Client,
    key: &str,
    holder: &str,
    ttl: std::time::Duration,
    wait: Option<Wait>,
    tell: bool,
    permits: baton_client::Sharing,
) -> Result<baton_client::ClaimOutcome, baton_client::Error> {
    use baton_client::{ClaimOutcome, Error, LineOutcome, RefusalReason};
    let Some(wait) = wait else {
        return client.claim_permit(key, holder, ttl, permits).await;
    };
    if wait.in_line {
        match client.wait_permit_once(key, holder, ttl, permits).await {
            Ok(LineOutcome::Granted(grant)) => return Ok(ClaimOutcome::Granted(grant)),
            Ok(LineOutcome::InLine(place)) => {
                if tell {
                    eprintln!("{}", in_line_line(&place, wait.timeout));
                }
                return client
                    .claim_permit_in_line(key, holder, ttl, permits, wait.timeout)
                    .await;
            }
            Err(Error::Refused(r)) if r.reason == RefusalReason::FormatPending => {
                if tell {
                    eprintln!(
                        "the cluster cannot keep a line yet (a rolling upgrade is not \
                         finished): waiting by claiming again instead"
                    );
                }
            }
            Err(error) => return Err(error),
        }
    }
    let outcome = client.claim_permit(key, holder, ttl, permits).await?;
    match &outcome {
        ClaimOutcome::Held { lease, .. } => {
            if tell {
                eprintln!("{}", waiting_line(lease, wait.timeout));
            }
            client
                .claim_permit_wait(key, holder, ttl, permits, wait.timeout)
                .await
        }
        _ => Ok(outcome),
    }
}

/// Where a `--wait` stands in the key's line, said on stderr as the wait starts (table
/// mode).
fn in_line_line(place: &baton_client::InLine, timeout: std::time::Duration) -> String {
    let behind = match &place.blocked {
        baton_client::BlockedKey::Held { lease, .. } => format!(
            "held by {} (token {}) since {}, free {} unless renewed",
            lease.holder_name,
            lease.token,
            output::utc(lease.held_since_unix_ms),
            output::in_human(lease.remaining)
        ),
        baton_client::BlockedKey::Quarantined { remaining, .. } => {
            format!("quarantined, {}", output::in_human(*remaining))
        }
    };
    format!(
        "waiting in line for {}: position {} of {}; {behind}; waiting up to {}",
        place.key,
        place.position,
        place.waiters,
        humantime::format_duration(timeout)
    )
}

/// What a `--wait` is waiting for, said on stderr before the wait starts (table mode).
pub fn waiting_line(lease: &baton_client::LeaseInfo, timeout: std::time::Duration) -> String {
    format!(
        "waiting for {}: held by {} (token {}) since {}, free {} unless renewed; waiting up \
         to {}",
        lease.key,
        lease.holder_name,
        lease.token,
        output::utc(lease.held_since_unix_ms),
        output::in_human(lease.remaining),
        humantime::format_duration(timeout)
    )
}

/// How long a command runs before `baton` checks whether any node accepts connections.
pub const NO_NODE_HINT_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Longest wait for one endpoint's TCP connect in that check.
pub const NO_NODE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);

/// After [`NO_NODE_HINT_AFTER`], if no endpoint accepts a TCP connection, says so on stderr
/// with the endpoints tried and how to start a node, rather than staying silent until the
/// retry deadline. Says nothing when any endpoint accepts one.
async fn hint_if_no_node_listens(endpoints: Vec<String>) {
    tokio::time::sleep(NO_NODE_HINT_AFTER).await;
    let mut failures = Vec::new();
    // The client's endpoints are normalised already: plain host:port.
    for addr in &endpoints {
        match tokio::time::timeout(
            NO_NODE_CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(_)) => return,
            Ok(Err(error)) => failures.push(format!("{addr} ({error})")),
            Err(_) => failures.push(format!("{addr} (no answer in {NO_NODE_CONNECT_TIMEOUT:?})")),
        }
    }
    eprintln!(
        "baton: no node accepts connections at {}; still trying until the timeout. Start one \
         with `baton-node dev --nodes 3` (or `baton-node`), or set BATON_ENDPOINTS (or \
         --endpoints) to a running cluster",
        failures.join(", ")
    );
}

/// `value` if it lies within `min..=max`, else a usage error naming the flag and the range.
fn in_range(
    flag: &str,
    value: std::time::Duration,
    min: std::time::Duration,
    max: std::time::Duration,
) -> anyhow::Result<std::time::Duration> {
    if value < min || value > max {
        return Err(baton_client::Error::Config(format!(
            "{flag} {} is out of range: give {} to {}",
            humantime::format_duration(value),
            humantime::format_duration(min),
            humantime::format_duration(max)
        ))
        .into());
    }
    Ok(value)
}
