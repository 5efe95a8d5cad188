//! `baton`: the command line over [`baton_client`]. See `baton --help`.
//!
//! Results go to stdout (text, or one JSON object with `--output json`); errors go to stderr
//! as one `error: ...` line. The exit code says how it went: 0 ok, 1 error, 2 usage, 3 held /
//! lost / stale token (stand down), 4 cluster unavailable.
//!
//! Parse ([`args`]), run ([`dispatch`], which calls the library), render ([`output`]), exit
//! ([`exit`]). A command with more to it than one call has its own module, its arguments,
//! run and rendering together: [`records`] (the case file), [`handoff`], [`watch`],
//! [`tasks`] (`post`, `claim-next`), [`access`], [`cluster`], [`bench`], [`run`] (`baton run`), [`verify`], [`commit_hook`]
//! (`baton hook`), [`mcp`] (`baton mcp`, the agents' tools apart from the operators'),
//! [`web`] (`baton web`, the board).

mod access;
mod args;
mod bench;
mod board;
mod cluster;
mod colour;
mod commit_hook;
mod dispatch;
mod exit;
mod git;
mod handoff;
mod leader;
mod loss;
mod mcp;
mod note;
mod output;
mod records;
mod run;
mod sets;
mod table;
mod tasks;
mod verify;
mod watch;
mod web;

use std::io::Write;
use std::process::ExitCode;

use exit::{error_exit_code, EXIT_ERROR};

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with 2, as the SPEC asks.
    let cli = args::parse();
    init_tracing();
    // Colour only table output, for a person at a terminal; never a completion script.
    let colour = cli.global.output == args::OutputFormat::Table
        && !matches!(cli.command, args::Command::Completions { .. })
        && colour::wanted(
            std::env::var_os("NO_COLOR").is_some(),
            std::io::IsTerminal::is_terminal(&std::io::stdout()),
            std::env::var("TERM").ok().as_deref(),
        );

    // One thread is plenty for one request at a time; `bench` drives many concurrent
    // clients, and on one thread it would measure this process rather than the cluster.
    let mut builder = if matches!(cli.command, args::Command::Bench(_)) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(dispatch::run(cli)) {
        Ok(rendered) => {
            let stdout = if colour {
                colour::paint(&rendered.stdout)
            } else {
                rendered.stdout
            };
            if let Err(error) = print_stdout(&stdout) {
                eprintln!("error: cannot write the result: {error}");
                return ExitCode::from(EXIT_ERROR);
            }
            if let Some(line) = &rendered.error_line {
                eprintln!("error: {line}");
            }
            ExitCode::from(rendered.verdict.exit_code())
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error_exit_code(&error))
        }
    }
}

/// Writes the result; a reader that went away (`baton board | head -1`) is not an error.
fn print_stdout(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Logs go to stderr, off unless `BATON_LOG` asks (e.g. `BATON_LOG=debug` shows retries).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BATON_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
