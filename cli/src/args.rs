//! Command-line syntax of `baton` (clap derive), and the parsers for its values.

use std::path::PathBuf;
use std::time::Duration;

use baton_client::VolatileFact;
use clap::{Args, Parser, Subcommand, ValueEnum};

mod commands;
mod parse;

pub use commands::{
    AccessCommand, BenchArgs, ClaimNextArgs, ClusterCommand, HandoffCommand, HookCommand, McpArgs,
    OfferArgs, PostArgs, RunArgs, WebArgs,
};
pub use parse::parse;

/// Longest holder name the cluster accepts; a default built from the environment is cut to
/// fit rather than refused, since the user did not type it.
pub use baton_proto::limits::HOLDER_NAME_BYTES_MAX;

/// baton: claim, renew and release ownership tokens on a baton cluster.
///
/// Exit codes: 0 ok, 1 error, 2 usage, 3 held / lost / stale token (stand down),
/// 4 cluster unavailable, 5 facts changed (`handoff accept --verify`: trust what was found,
/// not the note); `baton run` exits with its child's code.
#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    max_term_width = 100,
    after_help = "Examples:
  baton claim tasks/evidence-42 --ttl 5m          # prints the fencing token
  baton run tasks/nightly-build -- make release   # claim, keep alive, run, release
  baton board tasks/                              # who holds what under tasks/
  baton update tasks/evidence-42 --token 11 --status done
  baton handoff offer tasks/evidence-42 --token 11 --to codex@host-b --git --done \"...\"
  baton history tasks/evidence-42                 # who held it when, and what each wrote
  baton watch tasks/ --output json                # every event under tasks/, as it happens
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

    /// The session this command acts as: a lease is bound to the client id it was claimed
    /// with, and only that session may renew, release, update, offer or cancel it. Random
    /// if not given; an agent sets BATON_CLIENT_ID once per session so every command acts
    /// as the same holder (`baton run` passes it to its child).
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

    /// Speak TLS to the nodes, trusting this CA (PEM).
    #[arg(long, env = "BATON_TLS_CA", global = true)]
    pub tls_ca: Option<std::path::PathBuf>,

    /// With --tls-ca: this client's certificate (PEM), for nodes that require one (mTLS).
    #[arg(
        long,
        env = "BATON_TLS_CLIENT_CERT",
        global = true,
        requires = "tls_key"
    )]
    pub tls_cert: Option<std::path::PathBuf>,

    /// With --tls-cert: its private key (PEM).
    #[arg(
        long,
        env = "BATON_TLS_CLIENT_KEY",
        global = true,
        requires = "tls_cert"
    )]
    pub tls_key: Option<std::path::PathBuf>,

    /// A file holding this client's bearer token (`baton-node token` makes one), for nodes
    /// started with --auth-tokens. The BATON_AUTH_TOKEN variable may hold the token itself
    /// instead; a token is never taken as a flag, where `ps` would show it.
    #[arg(long, env = "BATON_AUTH_TOKEN_FILE", global = true)]
    pub auth_token_file: Option<std::path::PathBuf>,
}

/// The variable that may hold the bearer token itself.
pub const TOKEN_ENV: &str = "BATON_AUTH_TOKEN";

impl GlobalArgs {
    /// The bearer token: from --auth-token-file, else from BATON_AUTH_TOKEN; none if neither.
    pub fn token(&self) -> anyhow::Result<Option<baton_client::BearerToken>> {
        use anyhow::Context;
        let token = match &self.auth_token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading the token file {}", path.display()))?,
            ),
            None => std::env::var(TOKEN_ENV)
                .ok()
                .filter(|t| !t.trim().is_empty()),
        };
        Ok(token.map(|t| baton_client::BearerToken(t.trim().to_owned())))
    }
}

impl GlobalArgs {
    /// The TLS settings the flags give, files read.
    pub fn tls(&self) -> anyhow::Result<Option<baton_client::ClientTls>> {
        use anyhow::Context;
        let read = |p: &std::path::Path| {
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))
        };
        let Some(ca) = &self.tls_ca else {
            anyhow::ensure!(
                self.tls_cert.is_none(),
                "--tls-cert needs --tls-ca (the CA of the nodes)"
            );
            return Ok(None);
        };
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            _ => None,
        };
        Ok(Some(baton_client::ClientTls {
            ca_pem: read(ca)?,
            identity,
        }))
    }
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
    /// Claim KEY, or every KEY of several or none: prints the fencing token and the safe
    /// deadline, or who holds it.
    #[command(after_help = "Examples:
  baton claim tasks/evidence-42
  baton claim tasks/evidence-42 --ttl 5m --holder claude@host-a
  baton claim tasks/evidence-42 --wait --timeout 2m   # wait in line up to 2m
  token=$(baton claim tasks/evidence-42 --output json | jq .lease.token)
  baton claim src/a.rs src/b.rs src/c.rs              # all three in one write, or none
  baton claim gpu/runner --permits 2                  # one of 2 holders at once
  baton claim docs/spec --shared                      # a reader, beside other readers

Several keys are claimed all or none, in one log entry: each gets that entry's revision as its
token (a key you already hold keeps its own), or nothing is granted and every key that blocked
is named with its holder. At most 64 keys. Renew and release them with the one token:
  baton release src/a.rs src/b.rs src/c.rs --token 1234

With --wait, one key's claimants wait in its line in the cluster, granted in the order they
came, each in the write that frees the key; a waiter renews its place every third of --ttl and
leaves it at --timeout (a waiter that dies loses its place after --ttl). probe shows the line.
Exits 3 when a key is held (after the timeout, with --wait).")]
    Claim {
        /// The key to claim, e.g. tasks/evidence-42; several: all or none.
        #[arg(required = true, value_name = "KEY", num_args = 1..=baton_client::sets::CLAIM_SET_KEYS_MAX)]
        keys: Vec<String>,
        /// Your name as the holder, e.g. claude@host-a (default: $USER@hostname).
        #[arg(long, env = "BATON_HOLDER")]
        holder: Option<String>,
        /// Lease length, e.g. 30s or 5m.
        #[arg(long, value_parser = parse_duration, default_value = "30s")]
        ttl: Duration,
        /// While the key is held, wait in its line in the cluster until it is granted or
        /// --timeout (default 30s) passes: waiters are granted the key in the order they
        /// joined, each in the write that frees it. Several keys: claim again with backoff.
        #[arg(long)]
        wait: bool,
        /// With --wait, poll instead of waiting in line: claim again with jittered backoff
        /// (no priority: the first claim after the key frees wins).
        #[arg(long, requires = "wait")]
        poll: bool,
        /// One of N permits (2 to 1024): up to N holders at once, each with its own lease
        /// and token. N is fixed by the first holder while any holds. With --wait, waits in
        /// the key's line: a freed permit goes to the oldest waiter, in the write that frees
        /// it.
        #[arg(long, value_name = "N", value_parser = parse_permits)]
        permits: Option<u32>,
        /// Share the key with other shared holders (many readers or one writer): granted
        /// while no exclusive holder holds it and no exclusive claimant waits in its line;
        /// each shared holder has its own lease and token. Only an exclusive holder (a claim
        /// without --shared) may write the record. With --wait, waits in the key's line.
        #[arg(long, conflicts_with = "permits")]
        shared: bool,
    },
    /// Renew the lease on KEY held with TOKEN.
    #[command(after_help = "Examples:
  baton --client-id agent-7 renew tasks/evidence-42 --token 1234

The renewal must come from the claimant's client id (--client-id or $BATON_CLIENT_ID): from
another, the right token is refused naming both, exit 3. Exits 3 when the token is no longer
current.")]
    Renew {
        /// The key you hold; several keys held with one token (a set) are renewed each.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        /// The fencing token the claim returned.
        #[arg(long)]
        token: u64,
    },
    /// Release KEY held with TOKEN.
    #[command(after_help = "Examples:
  baton release tasks/evidence-42 --token 1234
  baton release tasks/evidence-42 --token 1234 --status done   # last word, same entry

Like every write with a token, it must come from the claimant's client id (--client-id or
$BATON_CLIENT_ID). Exits 3 when the token is no longer current or the client id is another's
(nothing is released).")]
    Release {
        /// The key you hold; several keys held with one token (a set) are released each.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        /// The fencing token the claim returned.
        #[arg(long)]
        token: u64,
        /// Set the record's status in the same log entry as the release (open, in_progress,
        /// blocked, verified, done, or a word of your own).
        #[arg(long)]
        status: Option<String>,
    },
    /// Show who holds KEY, if anyone, and who a dispatcher assigned it to.
    #[command(after_help = "Examples:
  baton probe tasks/evidence-42
  baton probe tasks/evidence-42 --stale           # from the nearest node, may be behind
  baton probe tasks/evidence-42 --output json | jq -r '.lease.holder_name // \"free\"'

A free key is an answer, not an error: exits 0. The holder decides who works on the key;
the assignment only says who a dispatcher wanted.")]
    Probe {
        /// The key to look at, e.g. tasks/evidence-42.
        key: String,
        /// Answer from the contacted node's local state (faster, may be behind).
        #[arg(long)]
        stale: bool,
    },
    /// List held keys under PREFIX (all keys if omitted).
    #[command(after_help = "Examples:
  baton board
  baton board tasks/ --limit 50
  baton board tasks/ --start-after tasks/evidence-42   # the next page
  baton board tasks/ --unclaimed                       # assigned, waiting for their assignee")]
    Board {
        /// Show keys starting with this prefix ("" or omitted: all keys).
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
        /// Show only the keys a dispatcher assigned that no one holds yet.
        #[arg(long)]
        unclaimed: bool,
    },
    /// Check whether TOKEN is the current fencing token of KEY (exit 3 if not).
    #[command(after_help = "Examples:
  baton check tasks/evidence-42 --token 1234 && deploy.sh   # act only with a current token")]
    Check {
        /// The key the token should be current for.
        key: String,
        #[arg(long)]
        token: u64,
    },
    /// Operator force-release of KEY, recorded with a reason.
    #[command(after_help = "Examples:
  baton revoke tasks/evidence-42 --reason \"agent crashed, host-a is gone\"")]
    Revoke {
        /// The key to take from its holder.
        key: String,
        /// Why the key is revoked; kept in the key's history.
        #[arg(long)]
        reason: String,
        /// Free the key at once. By default the key stays unclaimable for the lease's TTL,
        /// until the revoked holder's safe window has passed (a holder cut off from the
        /// cluster may still believe it holds the key until then); use --now only for
        /// resources that check fencing tokens.
        #[arg(long)]
        now: bool,
    },
    /// Change the record of KEY, with the key's current TOKEN (a fenced write).
    #[command(after_help = "Examples:
  baton update tasks/evidence-42 --token 11 --status in_progress --summary \"root cause found\"
  baton update tasks/evidence-42 --token 11 --set pr=482 --set rows_left=4 --unset tmp

Only the current token, from the holder's client id (--client-id or $BATON_CLIENT_ID), may
write: a stale token, another client id, or a record frozen by a pending handoff is refused
with the holder's name, client id and token, exit 3 (stand down). The history records who
wrote: client id, holder name, and the principal when auth is on.")]
    Update {
        /// The key whose record to change (you must hold it).
        key: String,
        /// The fencing token you hold the key with.
        #[arg(long)]
        token: u64,
        /// The new status: open, in_progress, blocked, verified, done, or a word of your
        /// own (a-z, 0-9, '_', '-').
        #[arg(long)]
        status: Option<String>,
        /// The new summary ("" clears it).
        #[arg(long)]
        summary: Option<String>,
        /// Set a field, as NAME=VALUE; repeatable.
        #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_field)]
        set: Vec<(String, String)>,
        /// Remove a field; repeatable.
        #[arg(long = "unset", value_name = "NAME")]
        unset: Vec<String>,
    },
    /// Operator: keep keys under PREFIX unclaimable for DELAY after an involuntary expiry
    /// (Chubby's lock-delay), for resources that cannot check fencing tokens. Without
    /// arguments, list the rules.
    #[command(after_help = "Examples:
  baton quarantine printers/ --delay 30s   # keys under printers/ wait 30s after a holder's lease expires
  baton quarantine printers/ --delay 0s    # remove the rule
  baton quarantine                         # list the rules

A clean release or an operator's revoke frees a key at once; only an expiry quarantines it.
The longest matching prefix wins. Prints every rule after the change.")]
    Quarantine {
        /// Keys starting with this prefix, e.g. printers/ (omitted: list the rules).
        #[arg(requires = "delay")]
        prefix: Option<String>,
        /// How long, e.g. 30s; 0s removes the rule.
        #[arg(long, value_parser = parse_duration_or_zero, requires = "prefix")]
        delay: Option<Duration>,
    },
    /// Put a task on the board: KEY gets a record (status open) and, with --to, an
    /// assignment, without a claim. Agents take it with `baton claim-next`.
    #[command(after_help = "Examples:
  baton post tasks/review-17 --summary \"review the cache fix\" --set role=reviewer
  baton post tasks/review-17 --to claude@host-a --update    # assign it afterwards

A key already on the board (it has a record: posted, claimed, assigned) is refused, exit 3,
naming its status and holder, unless --update, which patches its record. Recorded in the
history as 'posted', by --by from this client id.")]
    Post(PostArgs),
    /// Claim the next claimable task under PREFIX, in one write: one winner per task,
    /// whatever the race.
    #[command(after_help = "Examples:
  baton claim-next tasks/ --holder claude@host-a --ttl 5m
  baton claim-next tasks/ --where role=reviewer --output json | jq -r .lease.key

Claimable: a key under PREFIX with a record (posted, or claimed once) that is not held, not
quarantined, not finished (status done, cancelled or closed), has every --where field, and
is assigned to no one or to you (anyone with --any). Yours first, then in key order, among
the first 10,000 keys under PREFIX. Prints the grant as `baton claim` does; with nothing
claimable exits 3 and says why each task was passed by.")]
    ClaimNext(ClaimNextArgs),
    /// Record who a dispatcher wants on KEY, or clear that. Reserves nothing: anyone's claim
    /// still wins.
    #[command(after_help = "Examples:
  baton assign tasks/evidence-42 --to claude@host-a --reason \"verify four evidence domains\"
  baton assign tasks/evidence-42 --to codex@host-b --by dispatcher
  baton assign tasks/evidence-42 --clear --reason \"picked up by the night shift\"

The addressee must still claim the key, and probe first: a sibling's claim wins.
A cleared assignment is recorded in the history as 'unassigned'.")]
    Assign {
        /// The key to assign.
        key: String,
        /// The agent wanted on the key, e.g. claude@host-a.
        #[arg(long, required_unless_present = "clear", conflicts_with = "clear")]
        to: Option<String>,
        /// Clear the key's assignment instead (a key with none is left as it is).
        #[arg(long)]
        clear: bool,
        /// Who assigns (default: $BATON_HOLDER, else $USER@hostname).
        #[arg(long, env = "BATON_HOLDER")]
        by: Option<String>,
        /// Why, for people.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Show the record of KEY: status, summary, fields, holder, assignment, pending offer.
    #[command(after_help = "Examples:
  baton record tasks/evidence-42
  baton record tasks/evidence-42 --output json | jq -r .record.status")]
    Record {
        /// The key whose case file to show.
        key: String,
        /// Answer from the contacted node's local state (faster, may be behind).
        #[arg(long)]
        stale: bool,
    },
    /// Show who held KEY when (ownership stints), with the updates each holder made.
    #[command(after_help = "Examples:
  baton history tasks/evidence-42
  baton history tasks/evidence-42 --events        # every event, one a line
  baton history tasks/evidence-42 --output json | jq '.stints[] | {holder_name, token}'")]
    History {
        /// The key whose history to show.
        key: String,
        /// List the raw events instead of the stints.
        #[arg(long)]
        events: bool,
        /// Answer from the contacted node's local state (faster, may be behind).
        #[arg(long)]
        stale: bool,
    },
    /// Print every event of keys under PREFIX (all keys if omitted) as it happens, one a
    /// line, until Ctrl-C.
    ///
    /// Any node serves the watch; when it fails, baton connects to the next endpoint and
    /// goes on from the event after the last one printed: no gap, no repeat. It gives up
    /// when no node answers for --timeout (default 10s; exit 4), or when the events to go
    /// on from are older than every node's window of recent events (exit 1, "compacted":
    /// re-read the board and watch from its revision + 1). Ctrl-C or SIGTERM stops it with
    /// exit 0.
    #[command(after_help = "Examples:
  baton watch tasks/
  baton watch tasks/ --output json | jq -r 'select(.kind == \"released\") | .key'
  baton watch --from 1207                          # every key, from revision 1207 on
  baton watch tasks/ --timeout 5m                  # ride out a 5-minute outage

Table lines read: rev 1207  tasks/42  claimed    by codex@b  token 1207  <detail>
With --output json, one event object per line (docs/cli-json.md).
To miss nothing between a read and the watch:
  rev=$(baton board tasks/ --output json | jq .revision)
  baton watch tasks/ --from $((rev + 1))")]
    Watch {
        /// Watch keys starting with this prefix ("" or omitted: all keys).
        #[arg(default_value = "")]
        prefix: String,
        /// The first revision to print (0: only events from now on).
        #[arg(long, value_name = "REV", default_value_t = 0)]
        from: u64,
    },
    /// Observe KEY as leader election's observers do: who holds it and what its record says
    /// now, then a line at every change (a new holder, none, a proclaimed field), until
    /// Ctrl-C.
    ///
    /// Campaign with `baton run KEY -- cmd` (or `claim`), proclaim with `baton update KEY
    /// --token T --set NAME=VALUE` while holding it, resign with `release`, hand over with
    /// `handoff` (docs/election.md). A record written before the leader's grant is marked
    /// "(written before this leader)".
    /// Each line is read after the change it follows, so lines never go back; changes close
    /// together may show as one line. Renewals are not changes. Ctrl-C or SIGTERM stops it
    /// (exit 0); a watch that fell out of the cluster's window ends it (exit 1, "compacted":
    /// observe again).
    #[command(after_help = "Examples:
  baton leader services/scheduler
  baton leader services/scheduler --output json | jq -r '.lease.holder_name // \"none\"'

Table lines read: rev 1210  leader sched@a (client a41c0c2e)  token 1207  status serving  endpoint=10.0.0.5:8080
            or: rev 1300  no leader
With --output json, one record view per line (the object `baton record --output json` prints).")]
    Leader {
        /// The key whose holder to follow.
        key: String,
    },
    /// Hand KEY over to another agent: offer, accept, decline, cancel.
    #[command(after_help = "Examples:
  baton handoff offer tasks/evidence-42 --token 11 --to codex@host-b --git --note-file note.toml
  baton handoff accept tasks/evidence-42 --holder codex@host-b --verify
  baton handoff decline tasks/evidence-42 --holder codex@host-b
  baton handoff cancel tasks/evidence-42 --token 11")]
    Handoff {
        #[command(subcommand)]
        command: HandoffCommand,
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
    /// Serve baton's tools to an AI agent over MCP (Model Context Protocol) on stdio.
    ///
    /// One process per agent session, started by the agent's client. It acts as this
    /// session's client id (--client-id / BATON_CLIENT_ID, random if unset) and claims as
    /// --holder. It holds the leases itself and renews them while the agent keeps calling
    /// tools; after --idle without a call it stops renewing and they lapse at their TTL.
    /// When the client goes away, leases lapse the same way (nothing is released on the
    /// agent's behalf). stdout carries the protocol; logs go to stderr (BATON_LOG).
    #[command(after_help = "Examples:
  claude mcp add baton -- baton mcp --holder claude@host-a
  BATON_ENDPOINTS=10.0.0.1:7001,10.0.0.2:7001 baton mcp --idle 30m
  baton mcp --operator        # also offers revoke, quarantine, cluster_status, access

Codex (~/.codex/config.toml):
  [mcp_servers.baton]
  command = \"baton\"
  args = [\"mcp\", \"--holder\", \"codex@host-b\"]
  env = { BATON_ENDPOINTS = \"10.0.0.1:7001,10.0.0.2:7001\" }

Tools: probe, board, record, history, check (read-only); claim, release, update_record,
handoff_offer, handoff_accept, handoff_decline, handoff_cancel, my_claims.")]
    Mcp(McpArgs),
    /// Serve a live page of who holds what: the board (held by beside assigned to, live
    /// countdowns, offers, quarantines), each key's case file and ownership timeline, and
    /// the cluster. It reads with your endpoints, TLS, token and client id, so a secured
    /// cluster's permissions apply to what it shows. Read-only unless --operator.
    #[command(after_help = "Examples:
  baton web                                  # http://127.0.0.1:8080/
  baton web --prefix tasks/ --listen 127.0.0.1:9000
  baton web --operator                       # a revoke button, asking for a reason

The page updates from the watch stream without reloads. Anyone who reaches its port sees
what your credentials see: it listens on loopback unless --listen names another address
and --allow-remote is given.")]
    Web(WebArgs),
    /// Fence a repository's files with keys: a git hook that refuses a commit touching a
    /// guarded file unless this session holds its key.
    ///
    /// `.baton/hook.toml` maps path globs to key templates:
    ///   [paths]
    ///   "docs/incidents/*.md" = "incidents/{stem}"
    ///   "STATUS.md" = "status"
    /// Placeholders: {path}, {dir}, {name}, {stem}, {ext}. `*` stays within a directory,
    /// `**` crosses them. A file matching several globs needs every key.
    #[command(after_help = "Examples:
  baton hook install                     # writes .git/hooks/pre-commit and commit-msg
  baton hook check --staged              # what the pre-commit hook runs
  baton hook check docs/incidents/42.md  # would a commit of this file pass?

The session is BATON_CLIENT_ID: set it to the id you claimed with (an MCP session's id is
in its claim answers and my_claims). With no cluster reachable the check refuses (exit 4),
after 2s rather than --timeout's 10s default, as a commit waits on it;
BATON_HOOK_ALLOW_OFFLINE=1 lets that commit through, and says so.

Called `baton guard` before: this release still takes that name (and .baton/guard.toml,
BATON_GUARD_ALLOW_OFFLINE, and the hooks it wrote); the next does not.

Exit codes: 0 pass, 3 a guarded file's key is not held by this session, 4 cluster unavailable.")]
    #[command(alias = "guard")]
    Hook {
        #[command(subcommand)]
        command: HookCommand,
    },
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    #[command(after_help = "Examples:
  baton completions bash > ~/.local/share/bash-completion/completions/baton
  baton completions zsh > \"${fpath[1]}/_baton\"
  baton completions fish > ~/.config/fish/completions/baton.fish")]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Measure claim/renew/release throughput and latency with concurrent claimants.
    ///
    /// Starts --clients claimants at once, each its own client (own connections and client
    /// id, like separate agent processes). Each loops: claim a random key of --keys keys
    /// (PREFIX000000, PREFIX000001, ...) with --ttl; if granted, renew it once and release
    /// it; if held, go on with the next key. Only operations that start after --warmup and
    /// finish before the end of --duration count. Errors are counted by kind and never stop
    /// the run; each operation retries an unavailable cluster for --timeout (default 5s).
    /// --client-id is not used: every claimant has its own random id.
    ///
    /// Prints a table, then the same report as one JSON line (only the JSON line with
    /// --output json; docs/cli-json.md). The claims are real: run it against a scratch
    /// cluster, since every key it claims keeps a case file there.
    #[command(after_help = "Examples:
  baton bench                                             # 16 clients, 1000 keys, 10s after 2s
  baton bench --clients 64 --keys 100 --duration 30s      # more claimants per key: more held
  baton bench --clients 4 --keys 4 --duration 2s --warmup 0s
  baton --endpoints 10.0.0.1:7001,10.0.0.2:7001,10.0.0.3:7001 bench --output json | jq .cycles_per_s

Exits 0 when the run finished, even with some errors (see the errors line); 4 when no
claim got an answer (the cluster is unavailable); 2 when a flag is out of range.")]
    Bench(BenchArgs),
    /// Cluster administration.
    #[command(after_help = "Examples:
  baton cluster status
  baton --endpoints 10.0.0.1:7001,10.0.0.2:7001,10.0.0.3:7001 cluster status --output json")]
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Permissions: who may read, claim, assign or administer which key prefixes. One
    /// policy for the whole cluster, changed as one Raft entry; every change is kept in an
    /// audit trail. Needs `admin` on every key (or a node certificate).
    #[command(after_help = "Examples:
  baton access show
  baton access set policy.toml
  baton access clear

A policy (docs/security.md, \"Permissions\"):
  [groups]
  agents = [\"agent-a\", \"agent-b\"]

  [[rule]]
  who = [\"group:agents\"]      # principals, group:NAME, \"*\" (anyone authenticated), \"anonymous\"
  prefixes = [\"tasks/\"]       # \"\" is every key
  can = [\"read\", \"claim\"]     # read, claim, assign, admin

  [[rule]]
  who = [\"ops\"]
  prefixes = [\"\"]
  can = [\"admin\"]

  [names]
  agent-b = [\"agent-b/worker-1\"]   # holder names a principal may use besides its own")]
    Access {
        #[command(subcommand)]
        command: AccessCommand,
    },
}

/// Parses durations written like `500ms`, `10s`, `2m` or `1h 30m`.
/// `--permits N`: 1 (a plain claim) to `PERMITS_MAX`.
pub fn parse_permits(text: &str) -> Result<u32, String> {
    let max = baton_client::PERMITS_MAX;
    match text.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number of permits: give 1 (a plain claim) to {max}"
        )),
    }
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text.trim()).map_err(|e| e.to_string())?;
    if duration.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(duration)
}

/// Parses a duration like [`parse_duration`], allowing zero (`0s`).
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| e.to_string())
}

/// Parses `NAME=VALUE` (for `--set`): the name is everything before the first `=`, and
/// must not be empty; the value may be.
pub fn parse_field(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("expected NAME=VALUE, got {text:?}")),
    }
}

/// Parses `NAME=CLAIMED_VALUE::CHECK_COMMAND` (for `--fact`): the name ends at the first
/// `=`, the claimed value at the first `::` after it, and the rest is the command (which may
/// contain `=` and `::` itself). The name and the command must not be empty.
pub fn parse_fact(text: &str) -> Result<VolatileFact, String> {
    let usage = || {
        format!(
            "expected NAME=CLAIMED_VALUE::CHECK_COMMAND (e.g. 'rows_left=4::wc -l < todo.txt'), \
             got {text:?}"
        )
    };
    let (name, rest) = text.split_once('=').ok_or_else(usage)?;
    let (claimed_value, check_command) = rest.split_once("::").ok_or_else(usage)?;
    let (name, check_command) = (name.trim(), check_command.trim());
    if name.is_empty() {
        return Err(format!("{}: the name is empty", usage()));
    }
    if check_command.is_empty() {
        return Err(format!(
            "{}: the check command is empty (a volatile fact needs a way to measure it again)",
            usage()
        ));
    }
    Ok(VolatileFact {
        name: name.to_owned(),
        claimed_value: claimed_value.trim().to_owned(),
        check_command: check_command.to_owned(),
    })
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
#[path = "args_tests.rs"]
mod tests;
