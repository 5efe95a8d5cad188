//! The tools `baton mcp` offers, with descriptions written for a model to read. Each
//! description says the rule it serves. Read-only tools are annotated so; operator tools
//! are in their own router, offered only with `--operator`.
//!
//! Every result is `{"result": ..., "notices": [...]}`: `notices` lists the leases this
//! session lost since the previous call (revoked by whom and why, expired, handed off, let
//! lapse when idle), so the agent hears of it on its very next call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_client::{
    Client, Error, GuardedClaim, HandoffNote, LeaseInfo, ReadMode, RecordPatch, RefusalReason,
};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, Json, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::book::{Book, HeldRow, Notice, LEASES_MAX};
use super::{Settings, TTL_S_MAX, TTL_S_MIN, WAIT_S_MAX};
use crate::verify::{self, CHECK_TIMEOUT};

mod args;
mod claimed;
mod observe;
mod offer;
mod operator;
mod replies;
mod sets;
mod tasks;

use args::*;
use replies::{held_facts, millis_until};
pub use replies::{Claims, Outcome, Reply};

/// Board rows a call returns when it does not say.
pub const BOARD_LIMIT_DEFAULT: u32 = 100;

/// Most board rows one call may ask for.
pub const BOARD_LIMIT_MAX: u32 = 1000;

/// History events a call returns (the newest), when it does not say.
pub const HISTORY_EVENTS_DEFAULT: usize = 50;

/// How long an offer waits for its taker, when the call does not say.
pub const OFFER_TTL_S_DEFAULT: u64 = 600;

/// What the model is told when it connects: the protocol of working with baton.
pub const INSTRUCTIONS: &str = "baton says who owns a task right now. Keys name tasks \
(e.g. tasks/evidence-42); a claim has exactly one winner, and ownership moves only by an \
explicit handoff. The protocol: (1) probe a key before you start work on it; (2) claim it \
before you write anything that belongs to it, and work only while you hold it; (3) if the \
claim answers `held`, stand down: do not do the work, and tell the dispatcher or user who \
holds it (the holder, token and since are in the answer); (4) keep the case file current \
with update_record (status, summary, fields) as you go; (5) when you stop before the work is \
done, commit, then handoff_offer with what is done, what remains and the first step, and \
volatile facts with a command that re-checks each; (6) release with a final status when \
done. This server holds your leases and renews them while you keep calling tools; after \
the idle limit without a call they lapse. Every result carries `notices`: a lease you lost \
(revoked, expired, handed off) is named there once. Read them, and stop writing a lost \
key's files at once. Call my_claims after a context reset to see what you hold.";

/// The tool server of one agent session.
#[derive(Clone)]
pub struct Baton {
    client: Client,
    settings: Arc<Settings>,
    book: Arc<Book>,
    tool_router: ToolRouter<Baton>,
}

type ToolResult<T> = Result<Json<Reply<T>>, String>;

impl Baton {
    /// A server for one session; operator tools only with `settings.operator`.
    pub fn new(client: Client, settings: Settings) -> Baton {
        let mut tool_router =
            Self::agent_tools() + Self::task_tools() + Self::set_tools() + Self::observe_tools();
        if settings.operator {
            tool_router += Self::operator_tools();
        }
        let book = Arc::new(Book::new(settings.idle));
        Baton {
            client,
            settings: Arc::new(settings),
            book,
            tool_router,
        }
    }

    /// The lease length a call asks for (`ttl_s`, else the server's `--ttl`), or why it is
    /// out of range.
    fn ttl_of(&self, ttl_s: Option<u64>) -> Result<Duration, String> {
        let ttl_s = ttl_s.unwrap_or(self.settings.ttl.as_secs());
        if !(TTL_S_MIN..=TTL_S_MAX).contains(&ttl_s) {
            return Err(format!(
                "ttl_s {ttl_s} is out of range: give {TTL_S_MIN} to {TTL_S_MAX} seconds"
            ));
        }
        Ok(Duration::from_secs(ttl_s))
    }

    /// The session's leases.
    pub fn book(&self) -> Arc<Book> {
        self.book.clone()
    }

    /// Marks the agent alive and wraps `result` with the notices.
    async fn reply<T>(&self, result: T) -> ToolResult<T> {
        let notices = self.book.touch(&self.client).await;
        Ok(Json(Reply { result, notices }))
    }

    /// A failed call: marks the agent alive too, and says the notices in the text.
    async fn failed<T>(&self, error: impl std::fmt::Display) -> ToolResult<T> {
        let notices = self.book.touch(&self.client).await;
        let mut text = format!("{error}");
        for notice in notices {
            text.push_str(&format!(
                "\nnotice: {} {} (token {}): {}; {}",
                notice.key, notice.what, notice.token, notice.detail, notice.instruction
            ));
        }
        Err(text)
    }

    async fn read<T: Serialize>(&self, answer: Result<T, Error>) -> ToolResult<Value> {
        match answer {
            Ok(view) => match serde_json::to_value(&view) {
                Ok(value) => self.reply(value).await,
                Err(error) => self.failed(error).await,
            },
            Err(error) => self.failed(error).await,
        }
    }

    /// A cluster refusal as an answer (the facts typed), any other error as a failure.
    async fn refused_or_failed(&self, key: &str, error: Error) -> ToolResult<Outcome> {
        match error {
            Error::Refused(refusal) => {
                // A dead token: say how the lease was lost in this very answer rather than
                // after the guard's next renewal.
                if matches!(
                    refusal.reason,
                    RefusalReason::StaleToken | RefusalReason::WrongSession
                ) {
                    self.book
                        .refused_as_dead(&self.client, key, refusal.token)
                        .await;
                }
                let lease = refusal.lease.clone();
                let instruction = format!(
                    "the cluster refused: {}. Do not retry the same call; probe {key} to see \
                     who holds it now",
                    refusal.message
                );
                let mut outcome = held_facts(lease.as_ref());
                outcome.outcome = "refused".into();
                outcome.key = key.to_owned();
                outcome.refusal = serde_json::to_value(&*refusal).ok();
                outcome.instruction = instruction;
                self.reply(outcome).await
            }
            other => self.failed(other).await,
        }
    }

    async fn not_held(&self, key: &str) -> ToolResult<Outcome> {
        self.reply(Outcome {
            outcome: "not_held".into(),
            key: key.to_owned(),
            instruction: format!(
                "this session holds no lease on {key} (never claimed here, released, or \
                 lost: see notices). Claim it first; if the claim says held, stand down"
            ),
            ..Outcome::default()
        })
        .await
    }
}

#[tool_router(router = agent_tools)]
impl Baton {
    #[tool(
        description = "Who holds a key right now (linearizable), its case file's status and \
        summary, and who it is assigned to. Probe before you start work on a key.",
        annotations(read_only_hint = true)
    )]
    async fn probe(
        &self,
        Parameters(args): Parameters<KeyArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let answer = self.client.record(&args.key, ReadMode::Linearizable).await;
        self.read(answer.map(|view| {
            serde_json::json!({
                "key": view.key,
                "lease": view.lease,
                "status": view.record.status,
                "summary": view.record.summary,
                "assigned_to": view.record.assigned_to,
                "pending_offer": view.record.pending_offer.as_ref().map(|o| serde_json::json!({
                    "from": o.from, "to": o.to, "remaining_ms": o.remaining.as_millis() as u64,
                })),
                "quarantine": view.quarantine,
                "revision": view.revision,
            })
        }))
        .await
    }

    #[tool(
        description = "Every held key under a prefix: holder, token, time left, and the \
        assignment beside it; and in `unclaimed`, the keys assigned that no one holds yet \
        (to whom, by whom, since when). Look here to see who works on what before you pick \
        a task.",
        annotations(read_only_hint = true)
    )]
    async fn board(
        &self,
        Parameters(args): Parameters<BoardArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let limit = args.limit.unwrap_or(BOARD_LIMIT_DEFAULT);
        if limit == 0 || limit > BOARD_LIMIT_MAX {
            return self
                .failed(format!(
                    "limit {limit} is out of range: give 1 to {BOARD_LIMIT_MAX}"
                ))
                .await;
        }
        let answer = self
            .client
            .board(&args.prefix, limit, "", ReadMode::Linearizable)
            .await;
        self.read(answer).await
    }

    #[tool(
        description = "A key's whole case file: status, summary, fields, assignment, the \
        pending handoff offer and the last handoff note. Read it before you continue someone \
        else's work.",
        annotations(read_only_hint = true)
    )]
    async fn record(
        &self,
        Parameters(args): Parameters<KeyArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let answer = self.client.record(&args.key, ReadMode::Linearizable).await;
        self.read(answer).await
    }

    #[tool(
        description = "A key's history: who held it when (stints), how each stint ended, \
        and who wrote what under which token. Use it to find out who really did something.",
        annotations(read_only_hint = true)
    )]
    async fn history(
        &self,
        Parameters(args): Parameters<HistoryArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let limit = args.limit.unwrap_or(HISTORY_EVENTS_DEFAULT);
        let answer = self
            .client
            .history(&args.key, ReadMode::Linearizable)
            .await
            .map(|history| {
                let stints = history.stints();
                let skip = history.events.len().saturating_sub(limit);
                serde_json::json!({
                    "key": history.key,
                    "stints": stints,
                    "events": history.events[skip..],
                    "events_left_out": skip as u64 + history.dropped,
                    "revision": history.revision,
                })
            });
        self.read(answer).await
    }

    #[tool(
        description = "Whether a fencing token is the key's current one (linearizable). \
        Ask before acting on a token someone else presents: a stale owner's token is refused.",
        annotations(read_only_hint = true)
    )]
    async fn check(
        &self,
        Parameters(args): Parameters<CheckArgs>,
    ) -> Result<Json<Reply<Value>>, String> {
        let answer = self.client.check_token(&args.key, args.token).await;
        self.read(answer).await
    }

    #[tool(
        description = "Claim a key before you write anything that belongs to it. \
        Exactly one claimant wins. Granted: you own it, the server keeps the lease alive \
        while you keep calling tools, and the answer has your fencing token. Held: someone \
        else owns it; this is a normal answer, not an error: stand down, do not do the work, \
        and tell the dispatcher or user who holds it (holder, token, since and free-in are \
        in the answer). With wait_s, wait in the key's line instead: claimants are granted the \
        key in the order they asked, the moment its holder is done. With permits N, take one \
        of N places on a shared resource (at most N holders at once, each its own token). \
        With shared, share the key with other readers: many readers or one writer, each \
        shared holder its own token; only an exclusive holder may write the record."
    )]
    async fn claim(
        &self,
        Parameters(args): Parameters<ClaimArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        let ttl = match self.ttl_of(args.ttl_s) {
            Ok(ttl) => ttl,
            Err(why) => return self.failed(why).await,
        };
        let wait_s = args.wait_s.unwrap_or(0);
        if wait_s > WAIT_S_MAX {
            return self
                .failed(format!(
                    "wait_s {wait_s} is out of range: give 0 to {WAIT_S_MAX} seconds"
                ))
                .await;
        }
        if let Some(token) = self.book.token(&args.key).await {
            return self
                .reply(Outcome {
                    outcome: "already_yours".into(),
                    key: args.key.clone(),
                    token: Some(token),
                    instruction: format!(
                        "you already hold {} (token {token}); go on with the work",
                        args.key
                    ),
                    ..Outcome::default()
                })
                .await;
        }
        if self.book.len().await >= LEASES_MAX {
            return self
                .failed(format!(
                    "this session holds {LEASES_MAX} keys, the most it may: release one first"
                ))
                .await;
        }
        let holder = &self.settings.holder;
        let sharing = match claimed::sharing(args.permits, args.shared.unwrap_or(false)) {
            Ok(sharing) => sharing,
            Err(why) => return self.failed(why).await,
        };
        let wait = Duration::from_secs(wait_s);
        let claimed = claimed::guarded(&self.client, &args.key, holder, ttl, sharing, wait).await;
        let outcome = match claimed {
            Ok(GuardedClaim::Granted(guard)) => {
                let lease = guard.lease();
                let mut outcome = Outcome {
                    outcome: "granted".into(),
                    key: args.key.clone(),
                    token: Some(guard.token()),
                    safe_for_ms: Some(millis_until(guard.safe_until())),
                    instruction: format!(
                        "you own {} (token {}). Work on it now; keep its case file current \
                         with update_record; release it with a final status when done, or \
                         handoff_offer if you stop before. If the repository uses baton \
                         hook, commit its files with BATON_CLIENT_ID={}",
                        args.key,
                        lease.token,
                        self.client.client_id()
                    ),
                    ..Outcome::default()
                };
                if let Some(said) = claimed::permit_instruction(&args.key, sharing, lease.token) {
                    outcome.instruction = said;
                }
                if let Ok(view) = self.client.record(&args.key, ReadMode::Stale).await {
                    if let Some(assignment) = view.record.assigned_to {
                        if assignment.to != *holder {
                            outcome.instruction.push_str(&format!(
                                ". Note: a dispatcher assigned {} to {}, not to you: say so",
                                args.key, assignment.to
                            ));
                        }
                        outcome.assigned_to = Some(assignment.to);
                    }
                }
                self.book.insert(guard).await;
                outcome
            }
            Ok(GuardedClaim::Held {
                lease,
                same_name_other_process,
                assignment,
                permits,
            }) => claimed::held(
                &args.key,
                &lease,
                same_name_other_process,
                assignment,
                permits,
            ),
            Err(error) => return self.refused_or_failed(&args.key, error).await,
        };
        self.reply(outcome).await
    }

    #[tool(
        description = "Release a key you hold, with the record's final status \
        (e.g. done). Release as soon as you finish, so the next claimant need not wait."
    )]
    async fn release(
        &self,
        Parameters(args): Parameters<ReleaseArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        let Some(guard) = self.book.take(&args.key).await else {
            return self.not_held(&args.key).await;
        };
        let token = guard.token();
        let status = args.status.unwrap_or_default();
        match guard.release_with_status(&status).await {
            Ok(baton_client::ReleaseOutcome::Released(_)) => {
                self.reply(Outcome {
                    outcome: "released".into(),
                    key: args.key.clone(),
                    instruction: format!(
                        "{} is free; token {token} is dead: do not write with it",
                        args.key
                    ),
                    ..Outcome::default()
                })
                .await
            }
            Ok(baton_client::ReleaseOutcome::Lost { current }) => {
                let mut outcome = held_facts(current.as_ref());
                outcome.outcome = "lost".into();
                outcome.key = args.key.clone();
                outcome.instruction = format!(
                    "you no longer held {} when you released it: whatever you wrote after \
                     the loss may be overwritten; tell the dispatcher",
                    args.key
                );
                self.reply(outcome).await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }

    #[tool(
        description = "Update the case file of a key you hold: status, summary, \
        fields. Only the holder's current token may write, so keep it current as you work: \
        the next owner starts from it."
    )]
    async fn update_record(
        &self,
        Parameters(args): Parameters<UpdateArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        let Some(token) = self.book.token(&args.key).await else {
            return self.not_held(&args.key).await;
        };
        let patch = RecordPatch {
            status: args.status,
            summary: args.summary,
            set_fields: args.set.unwrap_or_default(),
            remove_fields: args.unset.unwrap_or_default(),
        };
        match self.client.update(&args.key, token, patch).await {
            Ok(record) => {
                self.reply(Outcome {
                    outcome: "updated".into(),
                    key: args.key.clone(),
                    token: Some(token),
                    details: serde_json::to_value(&record).ok(),
                    instruction: "the case file is updated".into(),
                    ..Outcome::default()
                })
                .await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }

    #[tool(
        description = "Offer a key you hold to another agent, with a note: what is \
        done, what remains, the first step, and volatile facts each with a command that \
        re-checks it. Commit first: the note records the commit of the checkout this server \
        runs in (outside one, give `commit`). You keep the key until the taker accepts; keep calling tools so it stays renewed. Hand off instead of just \
        stopping: no gap in responsibility."
    )]
    async fn handoff_offer(
        &self,
        Parameters(args): Parameters<OfferToolArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        let Some(token) = self.book.token(&args.key).await else {
            return self.not_held(&args.key).await;
        };
        let offer_ttl = Duration::from_secs(args.offer_ttl_s.unwrap_or(OFFER_TTL_S_DEFAULT));
        let built = match offer::build(&args, token, offer_ttl, &self.settings.workdir) {
            Ok(built) => built,
            Err(why) => return self.failed(why).await,
        };
        match self
            .client
            .offer(&args.key, token, &args.to, built.note, offer_ttl)
            .await
        {
            Ok(offer) => {
                let mut instruction = format!(
                    "offered {} to {}; it lapses in {} s unless accepted. You keep the key \
                     until then (the record is frozen); tell {} to accept it",
                    args.key,
                    args.to,
                    offer.remaining.as_secs(),
                    args.to
                );
                for warning in &built.warnings {
                    instruction.push_str(&format!(". Warning: {warning}"));
                }
                self.reply(Outcome {
                    outcome: "offered".into(),
                    key: args.key.clone(),
                    token: Some(token),
                    details: serde_json::to_value(&offer).ok(),
                    instruction,
                    ..Outcome::default()
                })
                .await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }

    #[tool(
        description = "Accept a handoff offered to you: you get the key with a new \
        token and the giver's note, its commit compared with your checkout. Each volatile \
        fact comes back UNCHECKED with the giver's check command: read it, run it if you \
        trust it, and trust what you find over the note's value. With run_checks (only on a \
        server started with --run-checks) the commands are run here: MATCH or CHANGED."
    )]
    async fn handoff_accept(
        &self,
        Parameters(args): Parameters<AcceptArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        let run_checks = args.run_checks.unwrap_or(false);
        if run_checks && !self.settings.run_checks {
            return self
                .failed(
                    "run_checks is refused: this server was not started with --run-checks, \
                     and the check commands are the giver's; accept without it, and run the \
                     commands you trust yourself"
                        .to_owned(),
                )
                .await;
        }
        let ttl = self.settings.ttl;
        let (accepted, guard) = match self
            .client
            .accept_guarded(&args.key, &self.settings.holder, ttl)
            .await
        {
            Ok(pair) => pair,
            Err(error) => return self.refused_or_failed(&args.key, error).await,
        };
        let token = guard.token();
        let safe_for_ms = millis_until(guard.safe_until());
        self.book.insert(guard).await;
        let dir = &self.settings.workdir;
        let verification = if run_checks {
            verify::verify(&accepted.note, dir, CHECK_TIMEOUT, |_| {}).await
        } else {
            verify::compare_checkout(&accepted.note, dir)
        };
        let changed = verification.found_differences();
        let mut table = fact_table(&verification);
        // Not run here: each fact goes back with the giver's command.
        let unchecked = if run_checks {
            &[][..]
        } else {
            &accepted.note.volatile_facts[..]
        };
        table.extend(unchecked.iter().map(|f| {
            format!(
                "{}: UNCHECKED (note: {}; the giver's check: {})",
                f.name,
                f.claimed_value.trim(),
                f.check_command
            )
        }));
        let mut instruction = format!("you own {} (token {token})", args.key);
        if changed {
            instruction.push_str(
                ". Some facts CHANGED since the note was written, or the commit differs: \
                 trust what you find now, not the note",
            );
        }
        if !unchecked.is_empty() {
            instruction.push_str(&format!(
                ". {} facts are UNCHECKED: their check commands were written by {}; read \
                 each, run those you trust, and trust what they print over the note's values",
                unchecked.len(),
                accepted.from.name
            ));
        }
        instruction.push_str("; start from the note's first step");
        self.reply(Outcome {
            outcome: "accepted".into(),
            key: args.key.clone(),
            token: Some(token),
            safe_for_ms: Some(safe_for_ms),
            details: Some(serde_json::json!({
                "from": accepted.from,
                "note": note_json(&accepted.note),
                "verification": verification,
                "facts": table,
                "unchecked_facts": unchecked,
            })),
            instruction,
            ..Outcome::default()
        })
        .await
    }

    #[tool(
        description = "Decline a handoff offered to you, so the giver knows at once \
        and can offer it elsewhere."
    )]
    async fn handoff_decline(
        &self,
        Parameters(args): Parameters<KeyArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        match self.client.decline(&args.key, &self.settings.holder).await {
            Ok(_) => {
                self.reply(Outcome {
                    outcome: "declined".into(),
                    key: args.key.clone(),
                    instruction: "declined; the giver still holds the key".into(),
                    ..Outcome::default()
                })
                .await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }

    #[tool(
        description = "Withdraw your pending handoff offer of a key you hold; you keep \
        the key and the record takes writes again."
    )]
    async fn handoff_cancel(
        &self,
        Parameters(args): Parameters<KeyArgs>,
    ) -> Result<Json<Reply<Outcome>>, String> {
        let Some(token) = self.book.token(&args.key).await else {
            return self.not_held(&args.key).await;
        };
        match self.client.cancel(&args.key, token).await {
            Ok(_) => {
                self.reply(Outcome {
                    outcome: "cancelled".into(),
                    key: args.key.clone(),
                    token: Some(token),
                    instruction: "the offer is withdrawn; you still hold the key".into(),
                    ..Outcome::default()
                })
                .await
            }
            Err(error) => self.refused_or_failed(&args.key, error).await,
        }
    }

    #[tool(
        description = "What this session holds now, with tokens and how long each is safe; \
        and this session's id. Call it after a context reset before you go on writing.",
        annotations(read_only_hint = true)
    )]
    async fn my_claims(&self) -> Result<Json<Reply<Claims>>, String> {
        // Notices first: a lost lease leaves the book before the rows are read.
        let notices = self.book.touch(&self.client).await;
        Ok(Json(Reply {
            result: Claims {
                held: self.book.rows().await,
                session: self.client.client_id().to_owned(),
                holder: self.settings.holder.clone(),
                idle_limit_s: self.book.idle().as_secs(),
            },
            notices,
        }))
    }
}

impl Baton {
    /// Tools, and logging: a lost lease is announced as a `notifications/message`.
    #[allow(deprecated)]
    fn capabilities() -> ServerCapabilities {
        ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Baton {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(Self::capabilities())
            .with_server_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

/// The note as JSON, for the model.
fn note_json(note: &HandoffNote) -> Value {
    serde_json::to_value(note).unwrap_or(Value::Null)
}

/// One line per fact: `NAME: MATCH` or `NAME: CHANGED (note: X, now: Y)`.
fn fact_table(verification: &verify::Verification) -> Vec<String> {
    verification
        .facts
        .iter()
        .map(|fact| {
            let verdict = match fact.verdict {
                verify::FactVerdict::Match => "MATCH",
                verify::FactVerdict::Changed => "CHANGED",
                verify::FactVerdict::Failed => "FAILED",
            };
            match (&fact.actual_value, &fact.error) {
                (_, Some(error)) => format!("{}: {verdict} ({error})", fact.name),
                (Some(now), None) if verdict != "MATCH" => format!(
                    "{}: {verdict} (note: {}, now: {})",
                    fact.name,
                    fact.claimed_value.trim(),
                    now.trim()
                ),
                _ => format!("{}: {verdict}", fact.name),
            }
        })
        .collect()
}
