//! Command-line syntax of `baton` (clap derive), and the parsers for its values.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Longest holder name the cluster accepts; a default built from the environment is cut to
/// fit rather than refused, since the user did not type it.
pub const HOLDER_NAME_BYTES_MAX: usize = 128;

/// baton: claim, renew and release ownership tokens on a baton cluster.
///
/// Exit codes: 0 ok, 1 error, 2 usage, 3 held / lost / stale token (stand down),
/// 4 cluster unavailable.
#[derive(Debug, Parser)]
#[command(name = "baton", version, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

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

    /// How long to keep retrying while the cluster is unavailable, e.g. 500ms, 10s, 2m.
    #[arg(long, value_parser = parse_duration, default_value = "10s", global = true)]
    pub timeout: Duration,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text and tables.
    Table,
    /// One JSON object on stdout, with stable snake_case field names.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Claim KEY: prints the fencing token and the safe deadline, or the holder if it is held.
    Claim {
        /// The key to claim, e.g. tasks/evidence-42.
        key: String,
        /// Your name as the holder, e.g. claude@host-a (default: $USER@hostname).
        #[arg(long, env = "BATON_HOLDER")]
        holder: Option<String>,
        /// Lease length, e.g. 30s or 5m.
        #[arg(long, value_parser = parse_duration, default_value = "30s")]
        ttl: Duration,
    },
    /// Renew the lease on KEY held with TOKEN.
    Renew {
        key: String,
        /// The fencing token the claim returned.
        #[arg(long)]
        token: u64,
    },
    /// Release KEY held with TOKEN.
    Release {
        key: String,
        /// The fencing token the claim returned.
        #[arg(long)]
        token: u64,
    },
    /// Show who holds KEY, if anyone.
    Probe {
        key: String,
        /// Answer from the contacted node's local state (faster, may be behind).
        #[arg(long)]
        stale: bool,
    },
    /// List held keys under PREFIX (all keys if omitted).
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
    Check {
        key: String,
        #[arg(long)]
        token: u64,
    },
    /// Operator force-release of KEY, recorded with a reason.
    Revoke {
        key: String,
        /// Why the key is revoked; kept in the key's history.
        #[arg(long)]
        reason: String,
    },
    /// Cluster administration.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// One row per node: every endpoint given and every member they list.
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
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
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
        assert_eq!(cli.global.timeout, Duration::from_secs(2));
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
