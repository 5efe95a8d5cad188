//! `baton run KEY -- CMD ARGS...`: claim KEY (or wait for it), run the command while a
//! [`baton_client::LeaseGuard`] keeps the lease alive, stop the command if the lease is
//! lost, release the key when the command exits. With several keys it claims them all or
//! none in one write, keeps a guard per key, and stops the command if any of them is lost. With `--next PREFIX` it takes the next
//! claimable task under the prefix instead (`baton claim-next`), and releases it as `done`
//! when the command exits 0, else as it was (back on the board for the next taker).
//!
//! # The child and its signals
//! The child runs in a process group of its own, so that everything it starts can be
//! stopped together when the lease is lost: work that outlives the lease is what fencing
//! exists to prevent, and a shell's grandchildren are work too. Signals sent to `baton run`
//! (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are passed on to that group, once.
//! When `baton run` is the foreground job of a terminal, the terminal is handed to the
//! child's group while it runs, so that the child can read from it and Ctrl-C reaches it
//! directly (and only once); `baton run` takes the terminal back when the child exits.
//!
//! # Exit codes
//! The child's code (128 + the signal's number if a signal killed it); 3 when the key is
//! held (nothing runs) or the lease was lost; 4 when the cluster is unavailable at the
//! claim; 126 or 127 when the command cannot be started; 128 + the signal's number when a
//! signal arrives before the child starts.

use std::fs::File;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context;
use baton_client::{
    Client, GuardedClaim, GuardedNext, GuardedSet, LeaseGuard, LossReason, NextFilter, NextOutcome,
    ReadMode, ReleaseOutcome, Unclaimable,
};
use futures::future::select_all;
use nix::errno::Errno;
use nix::sys::signal::{killpg, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};
use tokio::process::Child;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use super::args::{default_holder, OutputFormat, RunArgs};
use super::exit::{Verdict, EXIT_STAND_DOWN};
use super::loss;
use super::output::{self, Rendered};
use super::tasks::next_rendered;

/// Signals passed on to the child. SIGTSTP, SIGTTIN, SIGTTOU and SIGWINCH are left to the
/// terminal, which sends them to the foreground group itself.
const FORWARDED_SIGNALS: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Signals that ask the child to stop: after passing one on, `baton run` waits `--grace`
/// for the child to exit, then kills its process group.
const STOPPING_SIGNALS: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// How often, after the child exited within its grace period, `baton run` looks whether
/// the rest of its process group has exited too.
const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Longest wait for the release after a lease was lost to an unreachable cluster: the
/// release is a courtesy (it frees the key before the cluster expires it), not worth
/// keeping the caller waiting for.
const RELEASE_AFTER_LOSS_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest wait for cleaning up a claim cut short by a signal.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The status `baton run --next` releases a task with when its command exits 0 (one of
/// the statuses `claim-next` passes by).
const TASK_DONE_STATUS: &str = "done";

/// Exit code when the command is not found, as shells use it.
const EXIT_NOT_FOUND: u8 = 127;
/// Exit code when the command is found but cannot be run.
const EXIT_CANNOT_RUN: u8 = 126;
/// Exit codes for "killed by signal N" are this plus N, as shells report them.
const EXIT_SIGNAL_BASE: u8 = 128;

/// What `baton run`'s claim came to.
enum Claimed {
    /// A claim of KEY: granted, or held by someone else.
    Key(GuardedClaim),
    /// `--next`: the task it got.
    Guard(LeaseGuard),
    /// `--next`: nothing claimable under the prefix.
    Nothing(String, Unclaimable),
    /// Several keys: all granted, or what blocked them.
    Set(GuardedSet),
}

/// Runs `baton run`. `wait_timeout` applies with `--wait`.
pub async fn run(
    client: &Client,
    args: RunArgs,
    wait_timeout: Duration,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let holder = args.holder.clone().unwrap_or_else(default_holder);
    // Handlers first: from here on a SIGTERM cannot kill `baton run` between the grant and
    // the child's start and leave the key held until its TTL runs out.
    let mut signals = Signals::install().context("cannot install signal handlers")?;

    if args.next.is_none() && (args.any || !args.wheres.is_empty()) {
        return Err(baton_client::Error::Config(
            "--where and --any choose among tasks: they go with --next PREFIX".into(),
        )
        .into());
    }
    if (args.permits.is_some_and(|n| n > 1) || args.shared) && args.keys.len() > 1 {
        let option = if args.shared { "--shared" } else { "--permits" };
        return Err(baton_client::Error::Config(format!(
            "{option} holds one key: a set of {} keys is claimed exclusively, all or none",
            args.keys.len()
        ))
        .into());
    }
    let keys: Vec<&str> = args.keys.iter().map(String::as_str).collect();
    let key = keys.first().copied().unwrap_or_default();
    let claim = async {
        Ok::<_, baton_client::Error>(match &args.next {
            Some(prefix) => {
                let filter = NextFilter {
                    any: args.any,
                    wheres: args.wheres.clone(),
                };
                match client
                    .claim_next_guarded(prefix, &holder, args.ttl, &filter)
                    .await?
                {
                    GuardedNext::Granted(guard) => Claimed::Guard(guard),
                    GuardedNext::Nothing(counts) => Claimed::Nothing(prefix.clone(), counts),
                }
            }
            None if keys.len() > 1 => Claimed::Set(if args.wait {
                client
                    .claim_set_wait_guarded(&keys, &holder, args.ttl, wait_timeout)
                    .await?
            } else {
                client.claim_set_guarded(&keys, &holder, args.ttl).await?
            }),
            None if args.permits.is_some_and(|n| n > 1) || args.shared => {
                // One of N permits, or shared: in the key's line (polling with --poll).
                let n = match args.shared {
                    true => baton_client::Sharing::Shared,
                    false => baton_client::Sharing::Permits(args.permits.unwrap_or(1)),
                };
                Claimed::Key(if args.wait && !args.poll {
                    client
                        .claim_permit_in_line_guarded(key, &holder, args.ttl, n, wait_timeout)
                        .await?
                } else if args.wait {
                    client
                        .claim_permit_wait_guarded(key, &holder, args.ttl, n, wait_timeout)
                        .await?
                } else {
                    client
                        .claim_permit_guarded(key, &holder, args.ttl, n)
                        .await?
                })
            }
            None => {
                // One key: wait in its line in the cluster (polling with --poll).
                let claimed = if args.wait && !args.poll {
                    client
                        .claim_in_line_guarded(key, &holder, args.ttl, wait_timeout)
                        .await?
                } else if args.wait {
                    client
                        .claim_wait_guarded(key, &holder, args.ttl, wait_timeout)
                        .await?
                } else {
                    client.claim_guarded(key, &holder, args.ttl).await?
                };
                Claimed::Key(claimed)
            }
        })
    };
    let guards = tokio::select! {
        claimed = claim => match claimed? {
            Claimed::Key(GuardedClaim::Granted(guard)) | Claimed::Guard(guard) => vec![guard],
            Claimed::Set(GuardedSet::Granted(guards)) => guards,
            Claimed::Set(GuardedSet::Blocked(blocked)) => {
                let blocked = baton_client::SetOutcome::Blocked(blocked);
                return Ok(crate::sets::rendered(&blocked, format, std::time::Instant::now()));
            }
            Claimed::Key(GuardedClaim::Held { lease, same_name_other_process, assignment, .. }) => {
                return Ok(output::run_held(
                    &lease,
                    same_name_other_process,
                    assignment.as_ref(),
                    format,
                ));
            }
            // Nothing claimable under the prefix: a stand-down, and nothing runs.
            Claimed::Nothing(prefix, counts) => {
                let nothing = NextOutcome::Nothing(counts);
                return Ok(next_rendered(&prefix, &nothing, format, std::time::Instant::now()));
            }
        },
        signal = signals.recv() => {
            // A claim in flight may have been granted all the same: free it. (A `--next`
            // claim in flight names no key yet: a grant it got runs out with its TTL.)
            for key in &keys {
                if args.wait {
                    // Out of the key's line; a grant that came meanwhile is released below.
                    let _ = tokio::time::timeout(CLEANUP_TIMEOUT, client.leave_line(key, &holder)).await;
                }
                release_if_ours(client, key).await;
            }
            return Ok(exit_with(signal_exit_code(signal)));
        }
    };

    let guard = &guards[0];
    let lines =
        |of: &dyn Fn(&LeaseGuard) -> String| guards.iter().map(of).collect::<Vec<_>>().join("\n");
    let program = &args.command[0];
    let mut command = tokio::process::Command::new(program);
    command
        .args(&args.command[1..])
        .env("BATON_KEY", guard.key())
        .env("BATON_TOKEN", guard.token().to_string())
        .env("BATON_KEYS", lines(&|g| g.key().to_owned()))
        .env("BATON_TOKENS", lines(&|g| g.token().to_string()))
        // The session the lease is bound to: the child's own `baton update --token
        // $BATON_TOKEN` acts as the holder only from the holder's client id.
        .env("BATON_CLIENT_ID", guard.session())
        .env("BATON_HOLDER", &holder)
        .env("BATON_ENDPOINTS", client.endpoints().join(","))
        .process_group(0);
    let terminal = Terminal::if_foreground();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            let code = if error.kind() == io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_RUN
            };
            for guard in guards {
                let _ = guard.release().await;
            }
            return Ok(Rendered {
                error_line: Some(format!("cannot run {program:?}: {error}")),
                ..exit_with(code)
            });
        }
    };
    let group = child_group(&child)?;
    if let Some(terminal) = &terminal {
        terminal.hand_to(group);
    }
    tracing::debug!(key = %guard.key(), token = guard.token(), pid = group.as_raw(), "child started");

    // A stopping signal passed on to the child starts its grace period; a child still
    // running at its end is killed, so that one ignoring SIGTERM is not renewed forever.
    let mut kill_at: Option<Instant> = None;
    let end = loop {
        tokio::select! {
            biased;
            status = child.wait() => break End::Exited(status.context("cannot wait for the child")?),
            (lost, reason) = first_loss(&guards) => break End::Lost(lost, reason),
            signal = signals.recv() => {
                forward(group, signal);
                if kill_at.is_none() && STOPPING_SIGNALS.contains(&signal) {
                    kill_at = Some(Instant::now() + args.grace);
                    eprintln!(
                        "baton run: passed {signal} on to the child; it is killed if it has not \
                         exited in {}",
                        humantime::format_duration(args.grace)
                    );
                }
            }
            () = sleep_until_or_never(kill_at) => {
                eprintln!(
                    "baton run: the child did not exit within {} of the signal; killing it",
                    humantime::format_duration(args.grace)
                );
                let _ = killpg(group, Signal::SIGKILL);
                kill_at = None;
            }
        }
    };

    match end {
        End::Exited(status) => {
            if let Some(terminal) = &terminal {
                terminal.take_back();
            }
            // A task taken with `--next` is done when its command succeeds: it leaves the
            // board; otherwise it goes back on it for the next taker.
            let final_status = match args.next.is_some() && status.success() {
                true => TASK_DONE_STATUS,
                false => "",
            };
            for guard in guards {
                let key = guard.key().to_owned();
                match guard.release_with_status(final_status).await {
                    Ok(ReleaseOutcome::Released(_)) => {}
                    Ok(ReleaseOutcome::Lost { current }) => eprintln!(
                        "baton run: warning: {key} was no longer held by this run when the \
                         child exited ({}); passing on the child's exit code",
                        LossReason::Taken { current }
                    ),
                    Err(error) => eprintln!(
                        "baton run: warning: cannot release {key}: {error}; it frees itself \
                         when its lease runs out"
                    ),
                }
            }
            Ok(exit_with(exit_code_of(status)))
        }
        End::Lost(lost, reason) => {
            let (key, token) = (guards[lost].key().to_owned(), guards[lost].token());
            // Stop first, explain after: past the safe deadline the cluster may already have
            // granted the key to another, so the child is signalled before anything is
            // asked of a cluster that may be out of reach; the explanation has its own short
            // deadline (`loss::ACCOUNT_TIMEOUT`) while the child winds down.
            forward(group, Signal::SIGTERM);
            eprintln!("baton run: lost {key} (token {token}); stopping the child");
            let (loss, killed) = tokio::join!(
                loss::account(client, &key, token, Some(reason.clone())),
                stop_group(&mut child, group, args.grace, &mut signals),
            );
            eprintln!("baton run: lost {key} (token {token}): {loss}");
            if killed {
                eprintln!(
                    "baton run: the child did not stop within {} of SIGTERM; killed it",
                    humantime::format_duration(args.grace)
                );
            }
            if let Some(terminal) = &terminal {
                terminal.take_back();
            }
            // The rest of a set is freed; the lost key too if the cluster may still count it
            // as ours (free it if the cluster answers soon).
            let deadline_passed = matches!(reason, LossReason::DeadlinePassed { .. });
            for (i, guard) in guards.into_iter().enumerate() {
                if i != lost || deadline_passed {
                    let _ = tokio::time::timeout(RELEASE_AFTER_LOSS_TIMEOUT, guard.release()).await;
                }
            }
            Ok(output::run_lost(&key, token, &loss, killed, format))
        }
    }
}

/// Completes at `at`, or never when there is none.
async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How the supervised child ended.
enum End {
    Exited(ExitStatus),
    /// The lease of `guards[i]` was lost.
    Lost(usize, LossReason),
}

/// The first of `guards` to be lost, and how.
async fn first_loss(guards: &[LeaseGuard]) -> (usize, LossReason) {
    let (reason, i, _) = select_all(guards.iter().map(|g| Box::pin(g.lost()))).await;
    (i, reason)
}

fn exit_with(code: u8) -> Rendered {
    Rendered {
        stdout: String::new(),
        verdict: Verdict::Exit(code),
        error_line: None,
    }
}

/// The child's exit code, or 128 + the signal that killed it.
fn exit_code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => EXIT_SIGNAL_BASE.saturating_add(u8::try_from(signal).unwrap_or(0)),
        (None, None) => EXIT_STAND_DOWN,
    }
}

fn signal_exit_code(signal: Signal) -> u8 {
    EXIT_SIGNAL_BASE.saturating_add(u8::try_from(signal as i32).unwrap_or(0))
}

/// The process group the child leads (it was spawned with `process_group(0)`).
fn child_group(child: &Child) -> anyhow::Result<Pid> {
    let pid = child
        .id()
        .context("the child exited before its process id was read")?;
    Ok(Pid::from_raw(
        i32::try_from(pid).context("process id out of range")?,
    ))
}

/// Passes `signal` on to the child's process group; a group that is gone is no error.
fn forward(group: Pid, signal: Signal) {
    tracing::debug!(signal = %signal, group = group.as_raw(), "forwarding signal");
    if let Err(error) = killpg(group, signal) {
        if error != Errno::ESRCH {
            eprintln!("baton run: warning: cannot pass {signal} on to the child: {error}");
        }
    }
}

/// No process is left in `group`.
fn group_is_gone(group: Pid) -> bool {
    killpg(group, None) == Err(Errno::ESRCH)
}

/// Stops the child's process group after the lease was lost, once it was sent SIGTERM: up
/// to `grace` for the child and the rest of its group to exit (passing on further signals),
/// then SIGKILL to whatever is left. Returns whether SIGKILL was needed.
async fn stop_group(child: &mut Child, group: Pid, grace: Duration, signals: &mut Signals) -> bool {
    let give_up_at = Instant::now() + grace;
    let mut child_exited = false;
    let mut killed = false;
    loop {
        if child_exited && group_is_gone(group) {
            break;
        }
        tokio::select! {
            biased;
            _ = child.wait(), if !child_exited => child_exited = true,
            signal = signals.recv() => forward(group, signal),
            () = tokio::time::sleep_until(give_up_at) => {
                let _ = killpg(group, Signal::SIGKILL);
                killed = true;
                break;
            }
            () = tokio::time::sleep(GROUP_POLL_INTERVAL), if child_exited => {}
        }
    }
    if !child_exited {
        let _ = child.wait().await;
    }
    killed
}

/// Releases `key` if this client holds it: cleans up after a claim that a signal cut
/// short, which the cluster may have granted all the same.
async fn release_if_ours(client: &Client, key: &str) {
    let cleanup = async {
        let probe = client.probe(key, ReadMode::Linearizable).await.ok()?;
        let lease = probe
            .lease
            .filter(|l| l.holder_client_id == client.client_id())?;
        client.release(key, lease.token).await.ok()
    };
    let _ = tokio::time::timeout(CLEANUP_TIMEOUT, cleanup).await;
}

/// The signals `baton run` passes on, each with its tokio stream.
struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    /// Installs handlers for [`FORWARDED_SIGNALS`]. From then on none of them ends
    /// `baton run` by default: each arrives at [`Signals::recv`] instead.
    fn install() -> io::Result<Signals> {
        let streams = FORWARDED_SIGNALS
            .iter()
            .map(|&sig| Ok((sig, signal(SignalKind::from_raw(sig as i32))?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received. Cancellation-safe: a signal is never lost by dropping
    /// this future.
    async fn recv(&mut self) -> Signal {
        let waits = self.streams.iter_mut().map(|(sig, stream)| {
            let sig = *sig;
            Box::pin(async move {
                if stream.recv().await.is_none() {
                    // The signal driver is gone (runtime shutdown): nothing will come.
                    std::future::pending::<()>().await;
                }
                sig
            })
        });
        select_all(waits).await.0
    }
}

/// The controlling terminal, when `baton run` is its foreground job.
struct Terminal {
    tty: File,
    own_group: Pid,
}

impl Terminal {
    /// The terminal, if this process's group is its foreground group; `None` for scripts,
    /// CI and background jobs.
    fn if_foreground() -> Option<Terminal> {
        let tty = File::open("/dev/tty").ok()?;
        let own_group = getpgrp();
        (tcgetpgrp(&tty).ok()? == own_group).then_some(Terminal { tty, own_group })
    }

    /// Makes the child's group the terminal's foreground group, and wakes it in case it
    /// touched the terminal (and was stopped for it) before the hand-over.
    fn hand_to(&self, group: Pid) {
        if tcsetpgrp(&self.tty, group).is_ok() {
            let _ = killpg(group, Signal::SIGCONT);
        }
    }

    /// Makes `baton run`'s own group the foreground group again. From the background that
    /// raises SIGTTOU, which would stop `baton run`, so it is blocked around the call.
    fn take_back(&self) {
        let mut ttou = SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut previous = SigSet::empty();
        if sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut previous)).is_ok() {
            let _ = tcsetpgrp(&self.tty, self.own_group);
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_pass_on_the_childs_code_or_128_plus_the_signal() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code_of(ExitStatus::from_raw(0)), 0);
        // Raw wait status of a process killed by SIGTERM (15).
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), 143);
        assert_eq!(signal_exit_code(Signal::SIGINT), 130);
    }
}
