//! The task board's tools: take the next claimable task under a prefix (`claim_next`), and
//! put a task up (`post_task`, for an agent that dispatches work to others).

use super::*;
use baton_client::{GuardedNext, NextFilter};

/// A `claim_next`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ClaimNextArgs {
    /// Take a task whose key starts with this, e.g. `tasks/`.
    pub prefix: String,
    /// Only tasks whose record has every one of these fields with these values, e.g.
    /// `{"role": "reviewer"}`.
    #[serde(default)]
    pub r#where: BTreeMap<String, String>,
    /// Also take tasks a dispatcher assigned to someone else (default: leave them).
    #[serde(default)]
    pub any: bool,
    /// Lease length in seconds (2 to 3600, default the server's --ttl).
    pub ttl_s: Option<u64>,
}

/// A `post_task`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct PostTaskArgs {
    /// The task's key, e.g. `tasks/review-17`.
    pub key: String,
    /// What the task is.
    #[serde(default)]
    pub summary: Option<String>,
    /// Record fields, e.g. `{"role": "reviewer"}` (what `claim_next`'s `where` matches).
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// The agent wanted on it, if anyone (routing only: it reserves nothing).
    #[serde(default)]
    pub to: Option<String>,
}

#[tool_router(router = task_tools, vis = "pub(super)")]
impl Baton {
    #[tool(
        description = "Take the next task from the board: the cluster grants you the first \
        claimable task under the prefix (not held, not finished, matching `where`, not \
        assigned to someone else unless `any`; yours first), in one step, so no other agent \
        gets the same task. Granted: you own it, as with claim. Nothing claimable is a \
        normal answer with why each task was passed by: there is no work for you now."
    )]
    async fn claim_next(&self, Parameters(args): Parameters<ClaimNextArgs>) -> ToolResult<Outcome> {
        let ttl = match self.ttl_of(args.ttl_s) {
            Ok(ttl) => ttl,
            Err(why) => return self.failed(why).await,
        };
        if self.book.len().await >= LEASES_MAX {
            return self
                .failed(format!(
                    "this session holds {LEASES_MAX} keys, the most it may: release one first"
                ))
                .await;
        }
        let filter = NextFilter {
            any: args.any,
            wheres: args.r#where.into_iter().collect(),
        };
        let claimed = self
            .client
            .claim_next_guarded(&args.prefix, &self.settings.holder, ttl, &filter)
            .await;
        let outcome = match claimed {
            Ok(GuardedNext::Granted(guard)) => {
                let key = guard.key().to_owned();
                let outcome = Outcome {
                    outcome: "granted".into(),
                    key: key.clone(),
                    token: Some(guard.token()),
                    safe_for_ms: Some(millis_until(guard.safe_until())),
                    instruction: format!(
                        "you own {key} (token {}): read its record (get_record) for what to \
                         do, work on it now, and release it with status done when finished \
                         (or handoff_offer if you stop before)",
                        guard.token()
                    ),
                    ..Outcome::default()
                };
                self.book.insert(guard).await;
                outcome
            }
            Ok(GuardedNext::Nothing(counts)) => Outcome {
                outcome: "nothing_claimable".into(),
                key: args.prefix.clone(),
                details: serde_json::to_value(&counts).ok(),
                instruction: format!(
                    "no task under {} is claimable now ({} looked at: {} held, {} quarantined, \
                     {} finished, {} assigned to others, {} not matching): there is no work \
                     here for you; do not take a task some other way",
                    args.prefix,
                    counts.scanned,
                    counts.held,
                    counts.quarantined,
                    counts.finished,
                    counts.assigned_elsewhere,
                    counts.unmatched
                ),
                ..Outcome::default()
            },
            Err(error) => return self.refused_or_failed(&args.prefix, error).await,
        };
        self.reply(outcome).await
    }

    #[tool(
        description = "Put a task on the board for other agents to take with claim_next: \
        the key gets a record (status open, your summary and fields) and, with `to`, an \
        assignment, without a claim. A key already on the board is refused, naming its \
        status and holder."
    )]
    async fn post_task(&self, Parameters(args): Parameters<PostTaskArgs>) -> ToolResult<Outcome> {
        let patch = RecordPatch {
            summary: args.summary,
            set_fields: args.fields,
            ..RecordPatch::default()
        };
        let posted = self
            .client
            .post(
                &args.key,
                patch,
                args.to.as_deref(),
                &self.settings.holder,
                false,
            )
            .await;
        match posted {
            Ok(posted) => {
                let outcome = Outcome {
                    outcome: "posted".into(),
                    key: args.key.clone(),
                    assigned_to: posted.record.assigned_to.as_ref().map(|a| a.to.clone()),
                    details: serde_json::to_value(&posted.record).ok(),
                    instruction: format!(
                        "{} is on the board (revision {}): an agent takes it with claim_next",
                        args.key, posted.revision
                    ),
                    ..Outcome::default()
                };
                self.reply(outcome).await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }
}
