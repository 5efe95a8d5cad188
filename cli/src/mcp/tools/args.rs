//! The agent tools' arguments, as the model sees them (their doc comments are the schema's
//! descriptions).

use super::*;

/// A key.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct KeyArgs {
    /// The key, e.g. `tasks/evidence-42`.
    pub key: String,
}

/// A board query.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BoardArgs {
    /// Only keys starting with this, e.g. `tasks/` (empty: every key).
    #[serde(default)]
    pub prefix: String,
    /// Most rows (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// A history query.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HistoryArgs {
    /// The key.
    pub key: String,
    /// How many of the newest events (default 50).
    pub limit: Option<usize>,
}

/// A token to check.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CheckArgs {
    /// The key.
    pub key: String,
    /// The fencing token someone presents.
    pub token: u64,
}

/// A claim.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaimArgs {
    /// The key to own, e.g. `tasks/evidence-42`.
    pub key: String,
    /// Lease length in seconds (2 to 3600, default the server's --ttl). The server renews
    /// it while you keep calling tools; a shorter lease frees the key sooner if this
    /// session dies.
    pub ttl_s: Option<u64>,
    /// Wait up to this many seconds (at most 300) in a held key's line; default 0: answer
    /// at once. Waiters are granted the key in the order they came, as soon as it frees.
    /// With permits or shared, a freed permit (a share) goes to the oldest waiter for it.
    pub wait_s: Option<u64>,
    /// Take one of this many permits of the key (2 to 1024) instead of the whole key: up to
    /// that many holders at once (e.g. 2 agents on one GPU runner), each with its own token.
    /// Every claimant of the key must ask the same number while anyone holds it.
    pub permits: Option<u32>,
    /// Share the key instead of owning it alone: many readers or one writer. Granted
    /// beside other shared holders (each with its own token) while no exclusive holder
    /// holds it and none waits in its line; only an exclusive holder (a claim without
    /// shared) may write the record. Not with permits.
    pub shared: Option<bool>,
}

/// A release.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReleaseArgs {
    /// The key.
    pub key: String,
    /// The record's final status, set in the same step (e.g. `done`, `blocked`).
    pub status: Option<String>,
}

/// A change to the case file.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct UpdateArgs {
    /// The key (you must hold it).
    pub key: String,
    /// New status word: `open`, `in_progress`, `blocked`, `verified`, `done`, or your own.
    pub status: Option<String>,
    /// New summary: where the work stands, for the next reader.
    pub summary: Option<String>,
    /// Fields to set, e.g. {"pr": "42"}.
    pub set: Option<BTreeMap<String, String>>,
    /// Fields to remove.
    pub unset: Option<Vec<String>>,
}

/// A volatile fact: a value that may change, with the command that re-checks it.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FactArgs {
    /// What it is, e.g. `failing_tests`.
    pub name: String,
    /// Its value as you saw it.
    pub value: String,
    /// A shell command whose output is the value now (run by the taker to re-check it).
    pub check_command: String,
}

/// A handoff offer.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct OfferToolArgs {
    /// The key you hold.
    pub key: String,
    /// The taker's holder name, e.g. `codex@host-b`.
    pub to: String,
    /// What is done.
    pub done: String,
    /// What remains.
    pub remaining: String,
    /// What blocks progress, if anything.
    pub blocked: Option<String>,
    /// How to rebuild the working state (build, fixtures).
    pub rebuild: Option<String>,
    /// The taker's first step.
    pub first_step: String,
    /// Facts that may change before the taker reads them, each with a check command.
    pub facts: Option<Vec<FactArgs>>,
    /// Record the commit, branch and uncommitted files of the checkout this server runs in
    /// (default true, unless `commit` is given; commit first). Refused, offering nothing,
    /// when the server's directory is not a git checkout with a commit: then give `commit`,
    /// or `git: false` to offer with no commit.
    pub git: Option<bool>,
    /// The commit the taker starts from (e.g. the one you pushed), when this server's
    /// directory is not the checkout; with `git: true` too, the checkout's HEAD wins.
    pub commit: Option<String>,
    /// How long the offer waits for the taker, in seconds (default 600).
    pub offer_ttl_s: Option<u64>,
}

/// Accepting an offer.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AcceptArgs {
    /// The key offered to you.
    pub key: String,
    /// Run the giver's check commands here and compare (default false: each fact comes back
    /// with its command, for you to read and run). Refused unless this server was started
    /// with --run-checks: the commands are written by whoever offered the handoff.
    pub run_checks: Option<bool>,
}
