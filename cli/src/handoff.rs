//! `baton handoff offer|accept|decline|cancel`: moving a key from one agent to another with
//! a commit, a status note and the token itself, "with no gap in responsibility and no
//! moment when both believe they hold it".

use std::time::{Duration, Instant};

use anyhow::Context;
use baton_client::{Accepted, Client, Error, HandoffNote, HolderInfo, LeaseInfo, OfferView};
use serde::Serialize;

use super::args::{default_holder, HandoffCommand, OfferArgs, OutputFormat};
use super::exit::Verdict;
use super::note::note_text;
use super::output::{grant_pairs, in_human, safe_deadline_in_ms, shell_word, Rendered};
use super::records::refused;
use super::table;
use super::verify::{self, CommitVerdict, FactVerdict, Verification, CHECK_TIMEOUT};
use super::{git, note};

/// Runs one `baton handoff` command.
pub async fn run(
    client: &Client,
    command: HandoffCommand,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    match command {
        HandoffCommand::Offer(args) => offer(client, *args, format).await,
        HandoffCommand::Accept {
            key,
            holder,
            ttl,
            verify,
        } => {
            let holder = holder.unwrap_or_else(default_holder);
            accept(client, &key, &holder, ttl, verify, format).await
        }
        HandoffCommand::Show { key, verify } => show(client, &key, verify, format).await,
        HandoffCommand::Decline { key, holder } => {
            let holder = holder.unwrap_or_else(default_holder);
            match client.decline(&key, &holder).await {
                Ok(revision) => Ok(declined(&key, revision, format)),
                Err(error) => refusal(&key, error, format),
            }
        }
        HandoffCommand::Cancel { key, token } => match client.cancel(&key, token).await {
            Ok(revision) => Ok(cancelled(&key, token, revision, format)),
            Err(error) => refusal(&key, error, format),
        },
    }
}

/// How to name a commit, in the CLI's flags: the warning of a note that names none says it.
pub const NAME_A_COMMIT: &str = "give --git or --commit";

/// A refusal is an answer (exit 3, stand down); any other error stays an error.
pub fn refusal(key: &str, error: Error, format: OutputFormat) -> anyhow::Result<Rendered> {
    match error {
        Error::Refused(refusal) => Ok(refused(key, &refusal, format)),
        other => Err(other.into()),
    }
}

async fn offer(client: &Client, args: OfferArgs, format: OutputFormat) -> anyhow::Result<Rendered> {
    let file_note = args
        .note_file
        .as_deref()
        .map(note::read_note_file)
        .transpose()?;
    let git_state = if args.git {
        let dir = std::env::current_dir().context("cannot read the current directory")?;
        Some(git::snapshot(&dir).context("--git needs a git checkout with a commit")?)
    } else {
        None
    };
    let built = note::build(&args, file_note, git_state, NAME_A_COMMIT);
    for warning in &built.warnings {
        eprintln!("warning: {warning}");
    }
    match client
        .offer(&args.key, args.token, &args.to, built.note, args.ttl)
        .await
    {
        Ok(offer) => {
            // The taker's hint gives it the giver's lease length, not the 30 s default.
            let giver_ttl = client
                .probe(&args.key, baton_client::ReadMode::Stale)
                .await
                .ok()
                .and_then(|p| p.lease)
                .map(|lease| lease.ttl);
            Ok(offered(&offer, giver_ttl, format))
        }
        Err(error) => refusal(&args.key, error, format),
    }
}

/// `baton handoff show`: the pending offer and its note, read-only, optionally verified.
async fn show(
    client: &Client,
    key: &str,
    verify: bool,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        key: &'a str,
        offer: Option<&'a OfferView>,
        last_note: Option<&'a HandoffNote>,
        verification: Option<&'a Verification>,
    }
    let view = client
        .record(key, baton_client::ReadMode::Linearizable)
        .await?;
    let Some(offer) = view.record.pending_offer.as_ref() else {
        let mut text = format!("no handoff offer is pending on {key}\n");
        if let Some(note) = &view.record.last_note {
            text.push_str("the last handoff note:\n");
            text.push_str(&note_text(note, "  "));
        }
        let json = Json {
            outcome: "no_offer",
            key,
            offer: None,
            last_note: view.record.last_note.as_ref(),
            verification: None,
        };
        return Ok(Rendered::new(format, json, text, Verdict::StandDown));
    };
    let verification = if verify {
        let dir = std::env::current_dir().context("cannot read the current directory")?;
        Some(verify::verify(&offer.note, &dir, CHECK_TIMEOUT, announce_check).await)
    } else {
        None
    };
    let mut text = format!(
        "{} offers {key} (token {}) to {}; it lapses {}\nhandoff note:\n",
        offer.from.name,
        offer.from_token,
        offer.to,
        in_human(offer.remaining)
    );
    text.push_str(&note_text(&offer.note, "  "));
    match &verification {
        Some(verification) => text.push_str(&verification_text(verification)),
        None if !offer.note.volatile_facts.is_empty() => text
            .push_str("the volatile facts may be stale: --verify runs their check commands here\n"),
        None => {}
    }
    // The taker gets the giver's lease length, as the offer's own hint says.
    let ttl = view
        .lease
        .as_ref()
        .map(|l| format!(" --ttl {}", humantime::format_duration(l.ttl)))
        .unwrap_or_default();
    text.push_str(&format!(
        "take it with: baton handoff accept {} --holder {}{ttl}\n",
        shell_word(key),
        shell_word(&offer.to)
    ));
    let verdict = verdict_of(verification.as_ref());
    let json = Json {
        outcome: "pending",
        key,
        offer: Some(offer),
        last_note: None,
        verification: verification.as_ref(),
    };
    Ok(Rendered::new(format, json, text, verdict))
}

/// Exit 5 when a verification found a difference, else 0.
fn verdict_of(verification: Option<&Verification>) -> Verdict {
    match verification {
        Some(v) if v.found_differences() => Verdict::Exit(super::exit::EXIT_FACTS_CHANGED),
        _ => Verdict::Ok,
    }
}

/// Shows each check command on stderr before it runs, and whose it is.
fn announce_check(fact: &baton_client::VolatileFact) {
    eprintln!(
        "checking {} with the giver's command: sh -c {}",
        fact.name,
        shell_word(&fact.check_command)
    );
}

async fn accept(
    client: &Client,
    key: &str,
    holder: &str,
    ttl: Duration,
    verify: bool,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let accepted = match client.accept(key, holder, ttl).await {
        Ok(accepted) => accepted,
        Err(error) => return refusal(key, error, format),
    };
    let verification = if verify {
        let dir = std::env::current_dir().context("cannot read the current directory")?;
        Some(verify::verify(&accepted.note, &dir, CHECK_TIMEOUT, announce_check).await)
    } else {
        None
    };
    Ok(accepted_output(
        &accepted,
        verification.as_ref(),
        format,
        Instant::now(),
    ))
}

/// `baton handoff offer`.
pub fn offered(offer: &OfferView, giver_ttl: Option<Duration>, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        offer: &'a OfferView,
    }
    let key = shell_word(&offer.key);
    let text = format!(
        "offered {} to {} (token {}); it lapses {} unless {} accepts\n\
         you keep the key until then: keep renewing it; the record is frozen\n\
         {} reads it with: baton handoff show {key} --verify\n\
         {} takes it with: baton handoff accept {key} --holder {}{ttl}\n\
         withdraw it with: baton handoff cancel {key} --token {}\n",
        offer.key,
        offer.to,
        offer.from_token,
        in_human(offer.remaining),
        offer.to,
        offer.to,
        offer.to,
        shell_word(&offer.to),
        offer.from_token,
        ttl = giver_ttl
            .map(|ttl| format!(" --ttl {}", humantime::format_duration(ttl)))
            .unwrap_or_default(),
    );
    Rendered::new(
        format,
        Json {
            outcome: "offered",
            offer,
        },
        text,
        Verdict::Ok,
    )
}

/// `baton handoff accept`: the new lease, the giver's note, and what `--verify` found.
pub fn accepted_output(
    accepted: &Accepted,
    verification: Option<&Verification>,
    format: OutputFormat,
    now: Instant,
) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        lease: &'a LeaseInfo,
        from: &'a HolderInfo,
        note: &'a HandoffNote,
        revision: u64,
        safe_deadline_in_ms: u64,
        verification: Option<&'a Verification>,
    }
    let grant = accepted.grant();
    let json = Json {
        outcome: "accepted",
        lease: &accepted.lease,
        from: &accepted.from,
        note: &accepted.note,
        revision: accepted.revision,
        safe_deadline_in_ms: safe_deadline_in_ms(&grant, now),
        verification,
    };
    let mut text = format!(
        "accepted {} from {}: you hold it now with a new token; the giver's token is dead\n{}",
        accepted.lease.key,
        accepted.from.name,
        grant_pairs(&grant, now)
    );
    text.push_str("handoff note:\n");
    text.push_str(&note_text(&accepted.note, "  "));
    match verification {
        Some(verification) => text.push_str(&verification_text(verification)),
        None if !accepted.note.volatile_facts.is_empty() => text.push_str(
            "the volatile facts may be stale: run each check command before trusting them \
             (--verify runs them)\n",
        ),
        None => {}
    }
    Rendered::new(format, json, text, verdict_of(verification))
}

/// `baton handoff decline`.
pub fn declined(key: &str, revision: u64, format: OutputFormat) -> Rendered {
    let text = format!("declined the offer of {key}; the giver keeps the key\n");
    Rendered::new(
        format,
        answer_json("declined", key, revision),
        text,
        Verdict::Ok,
    )
}

/// `baton handoff cancel`.
pub fn cancelled(key: &str, token: u64, revision: u64, format: OutputFormat) -> Rendered {
    let text = format!(
        "cancelled the offer of {key}; you keep the key (token {token}) and the record takes \
         writes again\n"
    );
    Rendered::new(
        format,
        answer_json("cancelled", key, revision),
        text,
        Verdict::Ok,
    )
}

#[derive(Serialize)]
struct AnswerJson<'a> {
    outcome: &'static str,
    key: &'a str,
    revision: u64,
}

fn answer_json<'a>(outcome: &'static str, key: &'a str, revision: u64) -> AnswerJson<'a> {
    AnswerJson {
        outcome,
        key,
        revision,
    }
}

/// What `--verify` found, for people.
fn verification_text(verification: &Verification) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    let commit = &verification.commit;
    let local = commit.local_commit.as_deref().unwrap_or("?");
    let commit_line = match commit.verdict {
        CommitVerdict::Match => format!("your checkout is at {local}, as the note says: MATCH"),
        CommitVerdict::Differs => format!(
            "your checkout is at {local}, the note says {}: DIFFERENT (check out the note's \
             commit, or find out why)",
            commit.note_commit
        ),
        CommitVerdict::NoCommitInNote => {
            format!("the note names no commit; your checkout is at {local}")
        }
        CommitVerdict::Unknown => format!(
            "cannot read your checkout's HEAD ({}); the note says {}",
            commit.error.as_deref().unwrap_or("unknown error"),
            commit.note_commit
        ),
    };
    pairs.push(("commit", commit_line));
    for fact in &verification.facts {
        let actual = fact.actual_value.as_deref().unwrap_or("");
        let line = match fact.verdict {
            FactVerdict::Match => format!("claimed {}, actual {actual}: MATCH", fact.claimed_value),
            FactVerdict::Changed => {
                format!("claimed {}, actual {actual}: CHANGED", fact.claimed_value)
            }
            FactVerdict::Failed => format!(
                "claimed {}, check failed ({}): UNVERIFIED",
                fact.claimed_value,
                fact.error.as_deref().unwrap_or("unknown error")
            ),
        };
        pairs.push((&fact.name, line));
    }
    match &verification.local_dirty_files {
        Some(local) if local.is_empty() => {
            pairs.push(("your tree", "clean".to_owned()));
        }
        Some(local) => {
            let files = if local.len() == 1 { "file" } else { "files" };
            let mut line = format!("{} uncommitted {files}", local.len());
            if verification.dirty_files_not_in_note.is_empty() {
                line.push_str(", all listed in the note");
            } else {
                line.push_str(&format!(
                    "; not in the note (whose are they?): {}",
                    verification.dirty_files_not_in_note.join(", ")
                ));
            }
            pairs.push(("your tree", line));
        }
        None => {}
    }
    let mut out = String::from("verification:\n");
    out.push_str(&table::render_pairs_multiline(&pairs, "  "));
    if verification.found_differences() {
        out.push_str(
            "the note does not hold where marked: work from the actual state, not the note\n",
        );
    } else {
        out.push_str("everything the note claims still holds\n");
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::verify::{CommitCheck, FactCheck};
    use baton_client::VolatileFact;

    pub(crate) fn sample_note() -> HandoffNote {
        HandoffNote {
            commit: "4f2a9c0".into(),
            branch: "fix/cache".into(),
            done: "root cause: the cache kept stale rows".into(),
            remaining: "verify on staging\nupdate the runbook".into(),
            blocked: String::new(),
            rebuild: "make dev".into(),
            first_step: "make test".into(),
            changed_files: vec!["src/cache.rs".into()],
            dirty_files: vec!["scratch.txt".into()],
            volatile_facts: vec![VolatileFact {
                name: "count".into(),
                claimed_value: "4".into(),
                check_command: "echo 5".into(),
            }],
        }
    }

    pub(crate) fn sample_offer() -> OfferView {
        OfferView {
            key: "tasks/x".into(),
            from: HolderInfo {
                name: "claude@a".into(),
                client_id: "claude-id".into(),
            },
            from_token: 9,
            to: "bob".into(),
            note: sample_note(),
            offer_ttl: Duration::from_secs(600),
            offered_at_unix_ms: 1_700_000_000_000,
            revision: 11,
            remaining: Duration::from_secs(599),
        }
    }

    pub(crate) fn sample_accepted(now: Instant) -> Accepted {
        Accepted {
            lease: LeaseInfo {
                key: "tasks/x".into(),
                holder_name: "bob".into(),
                holder_client_id: "bob-id".into(),
                token: 12,
                ttl: Duration::from_secs(30),
                held_since_unix_ms: 1_700_000_000_000,
                renewed_at_unix_ms: 1_700_000_000_000,
                remaining: Duration::from_secs(30),
                basis: 12,
            },
            note: sample_note(),
            from: HolderInfo {
                name: "claude@a".into(),
                client_id: "claude-id".into(),
            },
            revision: 12,
            safe_deadline: now + Duration::from_millis(28_500),
        }
    }

    pub(crate) fn sample_verification() -> Verification {
        Verification {
            commit: CommitCheck {
                note_commit: "4f2a9c0".into(),
                local_commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                verdict: CommitVerdict::Differs,
                error: None,
            },
            facts: vec![FactCheck {
                name: "count".into(),
                check_command: "echo 5".into(),
                claimed_value: "4".into(),
                actual_value: Some("5".into()),
                verdict: FactVerdict::Changed,
                error: None,
            }],
            local_dirty_files: Some(vec!["stray.txt".into()]),
            dirty_files_not_in_note: vec!["stray.txt".into()],
        }
    }

    #[test]
    fn offer_text_says_who_keeps_the_key_and_how_to_take_or_withdraw_it() {
        let text = offered(
            &sample_offer(),
            Some(Duration::from_secs(300)),
            OutputFormat::Table,
        )
        .stdout;
        // The taker's hint carries the giver's lease length: without it the taker got 30 s.
        assert_eq!(
            text,
            "offered tasks/x to bob (token 9); it lapses in 9m59s unless bob accepts\n\
             you keep the key until then: keep renewing it; the record is frozen\n\
             bob reads it with: baton handoff show tasks/x --verify\n\
             bob takes it with: baton handoff accept tasks/x --holder bob --ttl 5m\n\
             withdraw it with: baton handoff cancel tasks/x --token 9\n"
        );
    }

    #[test]
    fn a_verification_that_found_a_difference_exits_5() {
        let now = Instant::now();
        let changed = sample_verification();
        assert!(changed.found_differences());
        let out = accepted_output(
            &sample_accepted(now),
            Some(&changed),
            OutputFormat::Json,
            now,
        );
        assert_eq!(
            out.verdict.exit_code(),
            super::super::exit::EXIT_FACTS_CHANGED
        );
        let plain = accepted_output(&sample_accepted(now), None, OutputFormat::Json, now);
        assert_eq!(plain.verdict.exit_code(), 0);
    }

    #[test]
    fn accepted_text_prints_every_note_field_and_marks_facts_as_claims() {
        let now = Instant::now();
        let text = accepted_output(&sample_accepted(now), None, OutputFormat::Table, now).stdout;
        let expected = "\
accepted tasks/x from claude@a: you hold it now with a new token; the giver's token is dead
token          12
ttl            30s
safe deadline  in 28s
handoff note:
  commit         4f2a9c0
  branch         fix/cache
  done           root cause: the cache kept stale rows
  remaining      verify on staging
                 update the runbook
  blocked        -
  rebuild        make dev
  first step     make test
  changed files  src/cache.rs
  dirty files    scratch.txt
  (the dirty files were uncommitted in the giver's checkout: find out whose they are before tidying anything)
  volatile facts (needs verification: claimed when the note was written):
    count  claimed 4  check: echo 5
the volatile facts may be stale: run each check command before trusting them (--verify runs them)
";
        assert_eq!(text, expected);
    }

    #[test]
    fn verification_text_shows_claimed_against_actual_and_the_commits() {
        let now = Instant::now();
        let text = accepted_output(
            &sample_accepted(now),
            Some(&sample_verification()),
            OutputFormat::Table,
            now,
        )
        .stdout;
        let tail = text.split("verification:\n").nth(1).unwrap();
        assert_eq!(
            tail,
            "  commit     your checkout is at 0123456789abcdef0123456789abcdef01234567, the \
             note says 4f2a9c0: DIFFERENT (check out the note's commit, or find out why)\n\
             \x20 count      claimed 4, actual 5: CHANGED\n\
             \x20 your tree  1 uncommitted file; not in the note (whose are they?): stray.txt\n\
             the note does not hold where marked: work from the actual state, not the note\n"
        );
    }

    #[test]
    fn accepted_json_carries_lease_note_and_verification() {
        let now = Instant::now();
        let out = accepted_output(
            &sample_accepted(now),
            Some(&sample_verification()),
            OutputFormat::Json,
            now,
        );
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(json["outcome"], "accepted");
        assert_eq!(json["lease"]["token"], 12);
        assert_eq!(json["from"]["name"], "claude@a");
        assert_eq!(json["note"]["volatile_facts"][0]["check_command"], "echo 5");
        assert_eq!(json["safe_deadline_in_ms"], 28_500);
        assert_eq!(json["verification"]["facts"][0]["verdict"], "changed");
        assert_eq!(json["verification"]["commit"]["verdict"], "differs");
    }

    #[test]
    fn an_empty_note_says_the_giver_left_none() {
        assert_eq!(
            note_text(&HandoffNote::default(), "  "),
            "  (the giver left no note)\n"
        );
    }

    #[test]
    fn decline_and_cancel_say_who_keeps_the_key() {
        let out = declined("tasks/x", 13, OutputFormat::Table);
        assert_eq!(
            out.stdout,
            "declined the offer of tasks/x; the giver keeps the key\n"
        );
        let out = cancelled("tasks/x", 9, 14, OutputFormat::Json);
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"outcome": "cancelled", "key": "tasks/x", "revision": 14})
        );
    }

    #[test]
    fn only_refusals_become_answers() {
        let out = refusal(
            "tasks/x",
            Error::Refused(Box::new(baton_client::Refusal::other(
                "tasks/x has no pending offer",
            ))),
            OutputFormat::Table,
        )
        .unwrap();
        assert_eq!(out.verdict, Verdict::StandDown);
        assert!(refusal(
            "tasks/x",
            Error::Unavailable {
                last: "refused".into()
            },
            OutputFormat::Table
        )
        .is_err());
    }
}
