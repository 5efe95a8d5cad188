//! What the bench programs share around their work: finding `baton-node`, and running the
//! work on a tokio runtime until it ends or Ctrl-C, as an exit code.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `explicit`, or `baton-node` next to this program.
pub fn node_bin(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(bin) = explicit {
        return Ok(bin.to_path_buf());
    }
    let me = std::env::current_exe()?;
    let bin = me.with_file_name("baton-node");
    anyhow::ensure!(
        bin.is_file(),
        "no baton-node next to {} (build it: cargo build --release -p baton-node) — or pass --node-bin",
        me.display()
    );
    Ok(bin)
}

/// Runs `work` on a new multi-threaded runtime; Ctrl-C cancels it (dropping it, and with it
/// every cluster it started, whose processes are killed). Errors are printed after `name:`.
pub fn run_main<F>(name: &str, work: impl FnOnce() -> F) -> ExitCode
where
    F: Future<Output = anyhow::Result<()>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{name}: {error}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            result = work() => result,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name}: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// Each baton node's `--worker-threads` for a benchmark: `explicit` if given (0: the node's
/// default, one per core), else this machine's cores / 3, at least 1 (the three nodes share
/// the cores, each gets its share); with the arguments that say it.
pub fn node_threads(explicit: Option<usize>) -> (usize, Vec<String>) {
    let threads = explicit.unwrap_or_else(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (cores / 3).max(1)
    });
    let args = match threads {
        0 => vec![],
        n => vec!["--worker-threads".to_owned(), n.to_string()],
    };
    (threads, args)
}
