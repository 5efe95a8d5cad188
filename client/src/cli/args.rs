//! Command-line syntax of `baton` (clap derive), and the parsers for its values.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Longest holder name the cluster accepts; a default built from the environment is cut to
/// fit rather than refused, since the user did not type it.
pub const HOLDER_NAME_BYTES_MAX: usize = 128;

/// baton: claim, renew and release ownership tokens on a baton cluster.
///
/// Exit codes: 0 ok, 1 error, 2 usage, 3 held / lost / stale token (stand down),
/// 4 cluster unavailable; `baton run` exits with its child's code.
#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    max_term_width = 100,
    after_help = "Examples:
  baton claim tasks/evidence-42 --ttl 5m          # prints the fencing token
  baton run tasks/nightly-build -- make release   # claim, keep alive, run, release
  baton board tasks/                              # who holds what under tasks/
  BATON_ENDPOINTS=10.0.0.1:7001,10.0.0.2:7001 baton probe tasks/evidence-42 --output json"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// How long requests keep retrying while the cluster is unavailable, when `--timeout` is
/// not given.
pub const RETRY_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// How long `--wait` waits for a held key, when `--timeout` is not given.
pub const WAIT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

/// Flags every command takes.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Nodes to talk to, comma-separated, as host:port or http://host:port.
    #[arg(
        long,
        env = "BATON_ENDPOINTS",
        value_delimiter = ',',
        default_value = baton_client::DEFAULT_ENDPOINT,
        global = true
    )]
    pub endpoints: Vec<String>,

    /// Client id of this process (the holder's process identity); random if not given.
    /// Give the same id to act again as the same claimant, e.g. to renew from a new shell.
    #[arg(long, env = "BATON_CLIENT_ID", global = true)]
    pub client_id: Option<String>,

    /// Output format: human tables or one JSON object per command.
    #[arg(long, value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub output: OutputFormat,

    /// How long to keep trying before giving up, e.g. 500ms, 10s, 2m: retrying while the
    /// cluster is unavailable (default 10s) and, with --wait, waiting for a held key
    /// (default 30s).
    #[arg(long, value_parser = parse_duration, global = true)]
    pub timeout: Option<Duration>,
}

impl GlobalArgs {
    /// How long one request keeps retrying while the cluster is unavailable.
    pub fn retry_timeout(&self) -> Duration {
        self.timeout.unwrap_or(RETRY_TIMEOUT_DEFAULT)
    }

    /// How long `--wait` waits for a held key.
    pub fn wait_timeout(&self) -> Duration {
        self.timeout.unwrap_or(WAIT_TIMEOUT_DEFAULT)
    }
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text and tables.
    Table,
    /// One JSON object on stdout, with stable snake_case field names (docs/cli-json.md).
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Claim KEY: prints the fencing token and the safe deadline, or the holder if it is held.
    #[command(after_help = "Examples:
  baton claim tasks/evidence-42
  baton claim tasks/evidence-42 --ttl 5m --holder claude@host-a
  baton claim tasks/evidence-42 --wait --timeout 2m   # wait up to 2m for the holder
  token=$(baton claim tasks/evidence-42 --output json | jq .lease.token)

Exits 3 when the key is held (after the timeout, with --wait).")]
    Claim {
        /// The key to claim, e.g. tasks/evidence-42.
        key: String,
        /// Your name as the holder, e.g. claude@host-a (default: $USER@hostname).
        #[arg(long, env = "BATON_HOLDER")]
        holder: Option<String>,
        /// Lease length, e.g. 30s or 5m.
        #[arg(long, value_parser = parse_duration, default_value = "30s")]
        ttl: Duration,
        /// While the key is held, keep claiming (with jittered backoff) until it is granted
        /// or --timeout (default 30s) passes. Waiting grants no priority: the first claim
        /// after the key frees wins.
        #[arg(long)]
        wait: bool,
    },
    /// Renew the lease on KEY held with TOKEN.
    #[command(after_help = "Examples:
  baton --client-id agent-7 renew tasks/evidence-42 --token 1234

The renewal must come from the claimant's client id (--client-id or $BATON_CLIENT_ID).
Exits 3 when the token is no longer current.")]
    Renew {
        key: String,
        /// The fencing token the claim returned.
        #[arg(long)]
        token: u64,
    },
    /// Release KEY held with TOKEN.
    #[command(after_help = "Examples:
  baton release tasks/evidence-42 --token 1234

Exits 3 when the token is no longer current (nothing is released).")]
    Release {
        key: String,
        /// The fencing token the claim returned.
        #[arg(long)]
        token: u64,
    },
    /// Show who holds KEY, if anyone.
    #[command(after_help = "Examples:
  baton probe tasks/evidence-42
  baton probe tasks/evidence-42 --stale           # from the nearest node, may be behind
  baton probe tasks/evidence-42 --output json | jq -r '.lease.holder_name // \"free\"'

A free key is an answer, not an error: exits 0.")]
    Probe {
        key: String,
        /// Answer from the contacted node's local state (faster, may be behind).
        #[arg(long)]
        stale: bool,
    },
    /// List held keys under PREFIX (all keys if omitted).
    #[command(after_help = "Examples:
  baton board
  baton board tasks/ --limit 50
  baton board tasks/ --start-after tasks/evidence-42   # the next page")]
    Board {
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many leases (0 = the server's maximum).
        #[arg(long, default_value_t = 0)]
        limit: u32,
        /// Start after this key (to page on from a truncated board).
        #[arg(long, default_value = "")]
        start_after: String,
        /// Answer from the contacted node's local state (faster, may be behind).
        #[arg(long)]
        stale: bool,
    },
    /// Check whether TOKEN is the current fencing token of KEY (exit 3 if not).
    #[command(after_help = "Examples:
  baton check tasks/evidence-42 --token 1234 && deploy.sh   # act only with a current token")]
    Check {
        key: String,
        #[arg(long)]
        token: u64,
    },
    /// Operator force-release of KEY, recorded with a reason.
    #[command(after_help = "Examples:
  baton revoke tasks/evidence-42 --reason \"agent crashed, host-a is gone\"")]
    Revoke {
        key: String,
        /// Why the key is revoked; kept in the key's history.
        #[arg(long)]
        reason: String,
    },
    /// Claim KEY and run a command while holding it; stand down if it is held.
    ///
    /// The child gets BATON_KEY, BATON_TOKEN, BATON_HOLDER and BATON_ENDPOINTS in its
    /// environment and runs in its own process group. The lease is renewed in the
    /// background; if it is lost (taken, revoked, or the cluster unreachable until the safe
    /// deadline), the child's process group gets SIGTERM, then SIGKILL after --grace, and
    /// baton exits 3. When the child exits, baton releases the key and exits with the
    /// child's code (128 + signal if a signal killed it). SIGTERM, SIGINT, SIGHUP, SIGQUIT,
    /// SIGUSR1 and SIGUSR2 sent to baton are passed on to the child.
    #[command(after_help = "Examples:
  baton run tasks/nightly-build -- make release
  baton run tasks/migrate-db --ttl 1m --grace 30s -- ./migrate.sh --apply
  baton run tasks/evidence-42 --wait --timeout 10m -- sh -c './work.sh --token \"$BATON_TOKEN\"'

Exit codes: the child's; 3 when the key is held (nothing runs) or the lease was lost;
4 when the cluster is unavailable at the claim; 127 when the command is not found.")]
    Run(RunArgs),
    /// Cluster administration.
    #[command(after_help = "Examples:
  baton cluster status
  baton --endpoints 10.0.0.1:7001,10.0.0.2:7001,10.0.0.3:7001 cluster status --output json")]
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
}

/// `baton run KEY [--ttl D] [--holder NAME] [--wait] [--grace D] -- CMD ARGS...`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The key to hold while the command runs.
    pub key: String,
    /// Your name as the holder (default: $BATON_HOLDER, else $USER@hostname).
    #[arg(long, env = "BATON_HOLDER")]
    pub holder: Option<String>,
    /// Lease length; the lease is renewed every third of it, e.g. 30s or 5m.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,
    /// While the key is held, wait for it (until --timeout, default 30s) instead of
    /// standing down at once.
    #[arg(long)]
    pub wait: bool,
    /// How long the child has between SIGTERM and SIGKILL once the lease is lost.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// One row per node: every endpoint given and every member they list.
    #[command(after_help = "Examples:
  baton cluster status
  baton cluster status --output json | jq '.nodes[] | {id, reachable}'

Exits 4 when no node answers.")]
    Status,
}

/// Parses durations written like `500ms`, `10s`, `2m` or `1h 30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim()).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(duration)
}

/// The holder name used when none is given: `$USER@hostname`.
pub fn default_holder() -> String {
    let user = ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "agent".to_owned());
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    truncate_to_bytes(format!("{user}@{host}"), HOLDER_NAME_BYTES_MAX)
}

fn truncate_to_bytes(mut text: String, bytes_max: usize) -> String {
    if text.len() > bytes_max {
        let mut end = bytes_max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration(" 1s "), Ok(Duration::from_secs(1)));
    }

    #[test]
    fn durations_without_unit_or_zero_are_refused() {
        for bad in ["10", "", "ten seconds", "0s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn endpoints_split_on_commas_and_flags_go_anywhere() {
        let cli = Cli::try_parse_from([
            "baton",
            "probe",
            "tasks/a",
            "--endpoints",
            "a:1,http://b:2",
            "--output",
            "json",
            "--timeout",
            "2s",
        ])
        .unwrap();
        assert_eq!(cli.global.endpoints, ["a:1", "http://b:2"]);
        assert_eq!(cli.global.output, OutputFormat::Json);
        assert_eq!(cli.global.retry_timeout(), Duration::from_secs(2));
        assert!(matches!(cli.command, Command::Probe { stale: false, .. }));
    }

    #[test]
    fn claim_defaults_to_a_30s_ttl() {
        let cli = Cli::try_parse_from(["baton", "claim", "k", "--holder", "me"]).unwrap();
        match cli.command {
            Command::Claim { ttl, holder, .. } => {
                assert_eq!(ttl, Duration::from_secs(30));
                assert_eq!(holder.as_deref(), Some("me"));
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn timeout_defaults_to_10s_of_retries_and_30s_of_waiting() {
        let cli = Cli::try_parse_from(["baton", "claim", "k", "--wait"]).unwrap();
        assert_eq!(cli.global.retry_timeout(), Duration::from_secs(10));
        assert_eq!(cli.global.wait_timeout(), Duration::from_secs(30));
        assert!(matches!(cli.command, Command::Claim { wait: true, .. }));
        let cli =
            Cli::try_parse_from(["baton", "claim", "k", "--wait", "--timeout", "1s"]).unwrap();
        assert_eq!(cli.global.wait_timeout(), Duration::from_secs(1));
        assert_eq!(cli.global.retry_timeout(), Duration::from_secs(1));
    }

    #[test]
    fn run_takes_the_command_after_a_double_dash() {
        let cli = Cli::try_parse_from([
            "baton", "run", "tasks/x", "--ttl", "2s", "--grace", "1s", "--", "sh", "-c", "exit 7",
            "--ttl",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(run.key, "tasks/x");
        assert_eq!(run.ttl, Duration::from_secs(2));
        assert_eq!(run.grace, Duration::from_secs(1));
        assert!(!run.wait);
        assert_eq!(run.command, ["sh", "-c", "exit 7", "--ttl"]);
        // The command is required.
        let error = Cli::try_parse_from(["baton", "run", "tasks/x"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn every_subcommand_has_examples_in_its_help() {
        let mut cli = Cli::command();
        cli.build();
        let mut missing = Vec::new();
        let mut check = |name: String, help: Option<String>| {
            if !help.is_some_and(|h| h.starts_with("Examples:")) {
                missing.push(name);
            }
        };
        check("baton".into(), cli.get_after_help().map(|h| h.to_string()));
        for sub in cli.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            if sub.has_subcommands() {
                for nested in sub.get_subcommands().filter(|c| c.get_name() != "help") {
                    check(
                        format!("{} {}", sub.get_name(), nested.get_name()),
                        nested.get_after_help().map(|h| h.to_string()),
                    );
                }
            }
            check(
                sub.get_name().to_owned(),
                sub.get_after_help().map(|h| h.to_string()),
            );
        }
        assert!(missing.is_empty(), "no Examples: block in {missing:?}");
    }

    #[test]
    fn renew_without_token_is_a_usage_error() {
        let error = Cli::try_parse_from(["baton", "renew", "k"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }

    #[test]
    fn default_holder_fits_the_holder_limit() {
        let holder = default_holder();
        assert!(holder.contains('@'));
        assert!(!holder.is_empty() && holder.len() <= HOLDER_NAME_BYTES_MAX);
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_to_bytes("ééé".into(), 3), "é");
        assert_eq!(truncate_to_bytes("abc".into(), 5), "abc");
    }
}
