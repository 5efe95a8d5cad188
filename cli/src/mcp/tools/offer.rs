//! The handoff_offer tool's note: built from the call's arguments and, by default, from the
//! checkout this server runs in (commit, branch, uncommitted files). Its words name the
//! tool's arguments, never the CLI's flags: a model can only act on what the tool takes.

use std::path::Path;
use std::time::Duration;

use baton_client::VolatileFact;

use super::args::OfferToolArgs;
use crate::args::OfferArgs;
use crate::git;
use crate::note::{self, BuiltNote};

/// How to name a commit, in the tool's terms: the warning of a note that names none says it.
const NAME_A_COMMIT: &str = "give the tool's `commit` argument, the commit the taker starts from";

/// The note `args` offers, held with `token`, for `ttl`. It records the checkout in `dir`
/// unless the call says `git: false` or names its own `commit`; an error, and nothing to
/// offer, when it should and cannot: a note that silently names no commit leaves the taker
/// no fixed point to start from.
pub(super) fn build(
    args: &OfferToolArgs,
    token: u64,
    ttl: Duration,
    dir: &Path,
) -> Result<BuiltNote, String> {
    let commit = args.commit.clone().filter(|c| !c.trim().is_empty());
    let git_state = match args.git.unwrap_or(commit.is_none()) {
        true => Some(git::snapshot(dir).map_err(|error| no_checkout(dir, &error))?),
        false => None,
    };
    let offer_args = OfferArgs {
        key: args.key.clone(),
        token,
        to: args.to.clone(),
        ttl,
        note_file: None,
        git: false,
        commit,
        branch: None,
        done: Some(args.done.clone()),
        remaining: Some(args.remaining.clone()),
        blocked: args.blocked.clone(),
        rebuild: args.rebuild.clone(),
        first_step: Some(args.first_step.clone()),
        changed_files: Vec::new(),
        facts: args
            .facts
            .iter()
            .flatten()
            .map(|f| VolatileFact {
                name: f.name.clone(),
                claimed_value: f.value.clone(),
                check_command: f.check_command.clone(),
            })
            .collect(),
    };
    Ok(note::build(&offer_args, None, git_state, NAME_A_COMMIT))
}

/// Why the checkout in `dir` cannot be read (`error`, from reading it), and what to call
/// instead, in the tool's arguments.
fn no_checkout(dir: &Path, error: &anyhow::Error) -> String {
    let repository = git::git(dir, &["rev-parse", "--git-dir"]);
    let dir = dir.display();
    let why = match repository {
        // git itself could not be run (not installed, no such directory).
        Err(e) if e.chain().any(|c| c.is::<std::io::Error>()) => {
            format!("git cannot run in this MCP server's directory {dir}: {e:#}")
        }
        Err(_) => format!("this MCP server's directory {dir} is not a git repository"),
        // A repository, but no commit to read (none made yet), or another failure.
        Ok(_) => {
            format!("git cannot read the checkout in this MCP server's directory {dir}: {error:#}")
        }
    };
    format!(
        "{why}, so the note cannot record the commit the taker starts from. Nothing was \
         offered: call handoff_offer again with `commit` (the commit the taker starts from, \
         e.g. the one you pushed), or with `git: false` to offer with no commit"
    )
}
