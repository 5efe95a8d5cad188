//! The arguments of the commands that have subcommands or many options of their own: access,
//! run, bench, web, mcp, hook, handoff (and its offer), cluster.

use super::*;

#[derive(Debug, Subcommand)]
pub enum AccessCommand {
    /// Replace the policy with the one in FILE (TOML). An invalid policy is refused (exit 1)
    /// saying where, and nothing changes.
    #[command(after_help = "Examples:
  BATON_AUTH_TOKEN_FILE=ops.token baton access set policy.toml
  baton access set policy.toml --output json | jq .version")]
    Set {
        /// The policy file (TOML).
        file: std::path::PathBuf,
    },
    /// Remove the policy: every authenticated principal may then do everything.
    #[command(after_help = "Examples:
  baton access clear")]
    Clear,
    /// The policy in force and its latest changes.
    #[command(after_help = "Examples:
  baton access show
  baton access show --output json | jq '.audit[-1]'")]
    Show {
        /// Answer from the node's own state, without confirming with the leader.
        #[arg(long)]
        stale: bool,
    },
}

/// `baton run KEY... [--ttl D] [--holder NAME] [--wait] [--grace D] -- CMD ARGS...`
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The key to hold while the command runs; several: all of them or none, claimed in one
    /// write (as `baton claim K1 K2`), the command gets them in $BATON_KEYS and their tokens
    /// in $BATON_TOKENS (one per line), the first in $BATON_KEY and $BATON_TOKEN.
    #[arg(
        required_unless_present = "next",
        conflicts_with = "next",
        value_name = "KEY",
        num_args = 1..=baton_client::sets::CLAIM_SET_KEYS_MAX
    )]
    pub keys: Vec<String>,
    /// Instead of KEY, take the next claimable task under this prefix (as `baton
    /// claim-next`); the command gets its key in $BATON_KEY. When the command exits 0 the
    /// task is released with status done (finished: claim-next passes it by), else as it
    /// was (back on the board). Exits 3, running nothing, when none is claimable.
    #[arg(long, value_name = "PREFIX")]
    pub next: Option<String>,
    /// With --next: only tasks whose record has this field with this value; repeatable.
    #[arg(long = "where", value_name = "NAME=VALUE", value_parser = parse_field)]
    pub wheres: Vec<(String, String)>,
    /// With --next: also tasks assigned to someone else.
    #[arg(long)]
    pub any: bool,
    /// Your name as the holder (default: $BATON_HOLDER, else $USER@hostname).
    #[arg(long, env = "BATON_HOLDER")]
    pub holder: Option<String>,
    /// Lease length; the lease is renewed every third of it, e.g. 30s or 5m.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,
    /// While the key is held, wait for it (until --timeout, default 30s) instead of
    /// standing down at once: in the key's line in the cluster, granted in the order the
    /// waiters came (several keys: by claiming again).
    #[arg(long, conflicts_with = "next")]
    pub wait: bool,
    /// With --wait, poll instead of waiting in line: claim again with jittered backoff.
    #[arg(long, requires = "wait")]
    pub poll: bool,
    /// Hold one of N permits of KEY (2 to 1024) while the command runs, as `baton claim
    /// --permits N`. With --wait, waits in the key's line for a permit.
    #[arg(long, value_name = "N", value_parser = super::parse_permits, conflicts_with = "next")]
    pub permits: Option<u32>,
    /// Share KEY with other shared holders while the command runs, as `baton claim
    /// --shared`. With --wait, waits in the key's line.
    #[arg(long, conflicts_with_all = ["next", "permits"])]
    pub shared: bool,
    /// How long the child has between SIGTERM and SIGKILL once the lease is lost.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,
    /// The command to run and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `baton bench [--clients N] [--keys N] [--duration D] [--warmup D] [--ttl D] [--prefix P]`
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Concurrent claimants, 1 to 4096.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Keys to pick from, 1 to 1000000: fewer keys, more contention.
    #[arg(long, default_value_t = 1000)]
    pub keys: usize,
    /// How long to measure, e.g. 10s or 1m (at most 1h).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,
    /// How long to run before measuring (connections, leader discovery); 0s for none.
    #[arg(long, value_parser = parse_duration_or_zero, default_value = "2s")]
    pub warmup: Duration,
    /// The TTL of every claim (1s to 1h; the node refuses less than its minimum, 2s by
    /// default).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub ttl: Duration,
    /// Keys are this prefix and a 6-digit number, e.g. bench/000123.
    #[arg(long, default_value = baton_workload::BENCH_KEY_PREFIX_DEFAULT)]
    pub prefix: String,
    /// The holder name of every claimant (each is still its own holder, by client id); by
    /// default bench-0, bench-1, .... On a cluster with auth, your principal.
    #[arg(long)]
    pub holder: Option<String>,
}

/// `baton web`.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Where to serve the page (host:port; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// The prefix the board opens on ("" for every key).
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Offer a revoke button on every held key (it asks for a reason).
    #[arg(long)]
    pub operator: bool,
    /// Allow --listen on an address other machines can reach: anyone who reaches it sees
    /// (and with --operator, revokes) with your credentials.
    #[arg(long)]
    pub allow_remote: bool,
}

/// `baton mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The holder name this session claims and accepts handoffs as (default:
    /// $BATON_HOLDER, else $USER@hostname).
    #[arg(long, env = "BATON_HOLDER")]
    pub holder: Option<String>,
    /// Leases lapse after this long without a tool call (1s to 24h; default 15m).
    #[arg(long, value_parser = parse_duration)]
    pub idle: Option<Duration>,
    /// Lease length of a claim that gives none (2s to 1h; default 60s); renewed every
    /// third of it.
    #[arg(long, value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// Also offer the operator tools: revoke, quarantine, cluster_status, access.
    #[arg(long)]
    pub operator: bool,
    /// Let handoff_accept run the giver's check commands here when the agent asks
    /// (run_checks: true). Without it they are returned for the agent to run: they are
    /// written by whoever offered the handoff and would run with this server's rights.
    #[arg(long)]
    pub run_checks: bool,
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// Write the pre-commit and commit-msg hooks into this repository (where git keeps its
    /// hooks: core.hooksPath or .git/hooks). A hook that is not baton's is kept unless
    /// --force. The hooks run the `baton` on PATH, else this binary by the full path they
    /// record (and say so).
    #[command(after_help = "Examples:
  baton hook install
  baton hook install --force   # replace a pre-commit hook that is not baton's")]
    Install {
        /// Replace hooks that are not baton's.
        #[arg(long)]
        force: bool,
    },
    /// Check that this session holds the key of every guarded file given (or staged).
    ///
    /// For each key: a linearizable probe, then a renewal with its token from this session,
    /// which proves the token current and the session (and principal) the holder's.
    #[command(after_help = "Examples:
  BATON_CLIENT_ID=9f1c... baton hook check --staged
  baton hook check docs/incidents/42.md STATUS.md --output json

Exit codes: 0 pass, 3 a key is free or another session's (each named with holder, token and
since), 4 cluster unavailable (unless --allow-offline).")]
    Check {
        /// Check the files staged for commit (what the pre-commit hook runs).
        #[arg(long, conflicts_with = "paths")]
        staged: bool,
        /// Files to check, relative to the repository's top.
        #[arg(required_unless_present = "staged")]
        paths: Vec<String>,
        /// With no cluster reachable, pass (and say so) instead of refusing.
        #[arg(long, env = "BATON_HOOK_ALLOW_OFFLINE", value_parser = clap::builder::FalseyValueParser::new())]
        allow_offline: bool,
    },
    /// Add Baton-Key, Baton-Token and Baton-Holder trailers for the staged guarded files to
    /// a commit message file (what the commit-msg hook runs).
    #[command(after_help = "Examples:
  baton hook trailers .git/COMMIT_EDITMSG

Adds, for each guarded key of the staged files:
  Baton-Key: incidents/42
  Baton-Token: 17
  Baton-Holder: claude@host-a")]
    Trailers {
        /// The commit message file git passes to the hook.
        msg_file: PathBuf,
        /// With no cluster reachable, leave the message as it is instead of refusing.
        #[arg(long, env = "BATON_HOOK_ALLOW_OFFLINE", value_parser = clap::builder::FalseyValueParser::new())]
        allow_offline: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum HandoffCommand {
    /// Offer KEY, held with TOKEN, to agent TO, with a status note. You keep the key (keep
    /// renewing it) until TO accepts; meanwhile the record is frozen.
    #[command(after_help = "Examples:
  baton handoff offer tasks/x --token 11 --to codex@host-b --git \\
      --done \"root cause: stale cache\" --remaining \"verify on staging\" \\
      --first-step \"make test\" --fact 'rows_left=4::wc -l < todo.txt'
  baton handoff offer tasks/x --token 11 --to codex@host-b --note-file note.toml --ttl 30m

The note file is TOML or JSON (by extension; - reads stdin) with the fields commit, branch,
done, remaining, blocked, rebuild, first_step, changed_files, dirty_files and
volatile_facts = [{name, claimed_value, check_command}]. Flags override its fields; --fact
and --changed-file add to its lists. --git records HEAD, the branch and the uncommitted
files of the current checkout, and warns when the tree is dirty.
Exits 3 when refused (stale token, an offer already pending).")]
    Offer(Box<OfferArgs>),
    /// Accept the offer of KEY addressed to you: you hold the key with a new token, and the
    /// giver's token is dead. Prints the giver's note.
    #[command(after_help = "Examples:
  baton handoff accept tasks/x --holder codex@host-b
  baton handoff accept tasks/x --holder codex@host-b --ttl 5m --verify

--verify runs each volatile fact's check command (sh -c, in the current directory; each
command is shown on stderr before it runs) and prints claimed vs. actual values, then
compares the note's commit with this checkout's HEAD. The commands are the giver's (whoever
offered the handoff wrote them) and run with your rights: read them first (handoff show
without --verify). Each runs without a terminal (no stdin, its own process group, output
captured) and is killed after 60s.
Exits 3 when refused (no offer, or addressed to another name); 5 when accepted but --verify
found a CHANGED fact or another commit (you hold the key; trust what was found, not the note).")]
    Accept {
        /// The key offered to you.
        key: String,
        /// Your name as the addressee (default: $BATON_HOLDER, else $USER@hostname).
        #[arg(long, env = "BATON_HOLDER")]
        holder: Option<String>,
        /// Your lease length, e.g. 30s or 5m.
        #[arg(long, value_parser = parse_duration, default_value = "30s")]
        ttl: Duration,
        /// Run the note's check commands and compare its commit with this checkout.
        #[arg(long)]
        verify: bool,
    },
    /// Read the pending offer of KEY and its note without accepting it (read-only); with
    /// --verify, check the note's facts and commit here first.
    #[command(after_help = "Examples:
  baton handoff show tasks/x
  baton handoff show tasks/x --verify     # run the facts' check commands before accepting

Exits 0 with the offer; 3 when no offer is pending (the last handoff note, if any, is shown);
5 when --verify found a CHANGED fact or another commit.")]
    Show {
        /// The key whose offer to read.
        key: String,
        /// Run the note's check commands and compare its commit with this checkout.
        #[arg(long)]
        verify: bool,
    },
    /// Decline the offer of KEY addressed to you: the giver keeps the key.
    #[command(after_help = "Examples:
  baton handoff decline tasks/x --holder codex@host-b")]
    Decline {
        /// The key offered to you.
        key: String,
        /// Your name as the addressee (default: $BATON_HOLDER, else $USER@hostname).
        #[arg(long, env = "BATON_HOLDER")]
        holder: Option<String>,
    },
    /// Withdraw your pending offer of KEY: you keep the key and the record thaws.
    #[command(after_help = "Examples:
  baton handoff cancel tasks/x --token 11")]
    Cancel {
        /// The key you offered.
        key: String,
        /// The fencing token you hold the key (and made the offer) with.
        #[arg(long)]
        token: u64,
    },
}

/// `baton handoff offer KEY --token N --to AGENT [note flags] [--git] [--ttl D]`
#[derive(Debug, Args)]
pub struct OfferArgs {
    /// The key to offer (you must hold it).
    pub key: String,
    /// The fencing token you hold the key with.
    #[arg(long)]
    pub token: u64,
    /// The addressee's holder name, e.g. codex@host-b: only it may accept.
    #[arg(long)]
    pub to: String,
    /// How long the offer waits for an answer before it lapses (1s to 1h).
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub ttl: Duration,
    /// Read the note from this TOML or JSON file (- for stdin).
    #[arg(long, value_name = "FILE")]
    pub note_file: Option<PathBuf>,
    /// Record HEAD, the branch and the uncommitted files of the checkout in the current
    /// directory (warns when the tree is dirty).
    #[arg(long)]
    pub git: bool,
    /// The commit the work stands at.
    #[arg(long, conflicts_with = "git")]
    pub commit: Option<String>,
    /// The branch of that commit.
    #[arg(long, conflicts_with = "git")]
    pub branch: Option<String>,
    /// What is done.
    #[arg(long)]
    pub done: Option<String>,
    /// What remains.
    #[arg(long)]
    pub remaining: Option<String>,
    /// Where the work is blocked, and on what.
    #[arg(long)]
    pub blocked: Option<String>,
    /// How to rebuild the working state.
    #[arg(long)]
    pub rebuild: Option<String>,
    /// What the taker should do first.
    #[arg(long)]
    pub first_step: Option<String>,
    /// A file the work changed; repeatable.
    #[arg(long = "changed-file", value_name = "PATH")]
    pub changed_files: Vec<String>,
    /// A value the taker must verify, as NAME=CLAIMED_VALUE::CHECK_COMMAND; repeatable.
    /// E.g. 'rows_left=4::wc -l < todo.txt'.
    #[arg(long = "fact", value_name = "NAME=VALUE::COMMAND", value_parser = parse_fact)]
    pub facts: Vec<VolatileFact>,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// One row per node: every endpoint given and every member they list.
    #[command(after_help = "Examples:
  baton cluster status
  baton cluster status --output json | jq '.nodes[] | {id, reachable}'

Exits 4 when no node answers.")]
    Status,
    /// The members (voters and learners) and the leader.
    #[command(after_help = "Examples:
  baton cluster members
  baton cluster members --output json | jq '.members[] | select(.voter | not)'")]
    Members,
    /// Add a node: it joins as a learner, catches up, then becomes a voter. Start the new
    /// node first (`baton-node --join ...` does this call itself). Waits up to --timeout
    /// (default 2m); running it again after a timeout resumes.
    #[command(after_help = "Examples:
  baton cluster add 4 10.0.0.4:7001

Refused (exit 1) for an id or address that is already a voter: a node whose data dir was
lost must be removed and added back under a new id.")]
    Add {
        /// The new node's id (>= 1, unused).
        node_id: u64,
        /// Its address, host:port, as its peers reach it (its --advertise).
        addr: String,
    },
    /// Remove a node (voter or learner). Refused for the last voter.
    #[command(after_help = "Examples:
  baton cluster remove 3")]
    Remove {
        /// The id of the node to remove.
        node_id: u64,
    },
    /// Every node given in --endpoints builds a snapshot of its state now.
    #[command(after_help = "Examples:
  baton --endpoints 10.0.0.1:7001,10.0.0.2:7001,10.0.0.3:7001 cluster snapshot")]
    Snapshot,
    /// Write a consistent backup of the whole cluster state to FILE (from the leader, as of a
    /// linearizable read). Restore with `baton-node restore FILE ...`.
    #[command(after_help = "Examples:
  baton cluster backup /var/backups/baton-$(date +%F).backup

The file is written to FILE.tmp, fsync'd and renamed, so FILE is either complete or absent.")]
    Backup {
        /// Where to write the backup.
        file: std::path::PathBuf,
    },
}

/// `baton post KEY`: put a task on the board.
#[derive(Debug, Args)]
pub struct PostArgs {
    /// The task's key, e.g. tasks/review-17.
    pub key: String,
    /// What the task is, for people.
    #[arg(long)]
    pub summary: Option<String>,
    /// Its status (default: open for a new task).
    #[arg(long)]
    pub status: Option<String>,
    /// Set a record field, as NAME=VALUE (e.g. role=reviewer); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_field)]
    pub set: Vec<(String, String)>,
    /// Assign the task to this agent (routing: it reserves nothing).
    #[arg(long)]
    pub to: Option<String>,
    /// Who posts (default: $BATON_HOLDER, else $USER@hostname).
    #[arg(long, env = "BATON_HOLDER")]
    pub by: Option<String>,
    /// Patch the record of a task already on the board (without it, refused, exit 3).
    #[arg(long)]
    pub update: bool,
}

/// `baton claim-next PREFIX`: take the next claimable task.
#[derive(Debug, Args)]
pub struct ClaimNextArgs {
    /// Take a task whose key starts with this, e.g. tasks/.
    pub prefix: String,
    /// Your name as the holder (default: $BATON_HOLDER, else $USER@hostname).
    #[arg(long, env = "BATON_HOLDER")]
    pub holder: Option<String>,
    /// Lease length, e.g. 30s or 5m.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub ttl: Duration,
    /// Only tasks whose record has this field with this value, as NAME=VALUE; repeatable.
    #[arg(long = "where", value_name = "NAME=VALUE", value_parser = parse_field)]
    pub wheres: Vec<(String, String)>,
    /// Also take tasks assigned to someone else.
    #[arg(long)]
    pub any: bool,
}

impl ClaimNextArgs {
    pub fn filter(&self) -> baton_client::NextFilter {
        baton_client::NextFilter {
            any: self.any,
            wheres: self.wheres.clone(),
        }
    }
}
