//! `baton claim K1 K2 …` (all or none, in one log entry), and `baton renew` / `baton release`
//! of several keys with the token the set was granted. One key takes the one-key paths
//! (`output::claim`, `output::renew`, `output::release`), whose output is unchanged.

use std::time::{Duration, Instant};

use baton_client::{
    AssignmentInfo, BlockedKey, Client, Error, LeaseInfo, ReleaseOutcome, RenewOutcome, SetOutcome,
};
use serde::Serialize;

use crate::args::OutputFormat;
use crate::exit::Verdict;
use crate::output::{self, in_human, Rendered};
use crate::table;

/// Claims every key of `keys`, or none; with `wait`, claims again until the whole set is
/// granted or `wait` has passed (`Client::claim_set_wait`: polling, a set is not queued).
pub async fn claim(
    client: &Client,
    keys: &[String],
    holder: &str,
    ttl: Duration,
    wait: Option<Duration>,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let outcome = match wait {
        Some(timeout) => client.claim_set_wait(&keys, holder, ttl, timeout).await,
        None => client.claim_set(&keys, holder, ttl).await,
    };
    match outcome {
        Ok(outcome) => Ok(rendered(&outcome, format, Instant::now())),
        Err(error) => crate::handoff::refusal(keys[0], error, format),
    }
}

/// A granted set is a table of its keys and tokens; a blocked one (exit 3) names every key
/// that blocked and why.
pub fn rendered(outcome: &SetOutcome, format: OutputFormat, now: Instant) -> Rendered {
    #[derive(Serialize)]
    struct GrantJson<'a> {
        lease: &'a LeaseInfo,
        already_held: bool,
        safe_deadline_in_ms: u64,
        assignment: Option<&'a AssignmentInfo>,
    }
    #[derive(Serialize)]
    #[serde(tag = "reason", rename_all = "snake_case")]
    enum BlockedJson<'a> {
        Held {
            key: &'a str,
            lease: &'a LeaseInfo,
            same_name_other_process: bool,
            assignment: Option<&'a AssignmentInfo>,
        },
        Quarantined {
            key: &'a str,
            quarantine_revision: u64,
            quarantine_delay_ms: u64,
            quarantine_remaining_ms: u64,
            quarantine_revoked: bool,
        },
    }
    #[derive(Serialize)]
    #[serde(tag = "outcome", rename_all = "snake_case")]
    enum Json<'a> {
        Granted {
            revision: u64,
            keys: Vec<GrantJson<'a>>,
        },
        Blocked {
            blocked: Vec<BlockedJson<'a>>,
        },
    }
    match outcome {
        SetOutcome::Granted(grants) => {
            let json = Json::Granted {
                revision: grants.first().map_or(0, |g| g.revision),
                keys: grants
                    .iter()
                    .map(|g| GrantJson {
                        lease: &g.lease,
                        already_held: g.already_held,
                        safe_deadline_in_ms: output::safe_deadline_in_ms(g, now),
                        assignment: g.assignment.as_ref(),
                    })
                    .collect(),
            };
            let holder = grants.first().map_or("", |g| g.lease.holder_name.as_str());
            // A note column only when a key was already held (it kept its own token).
            let renewed = grants.iter().any(|g| g.already_held);
            let rows: Vec<Vec<String>> = grants
                .iter()
                .map(|g| {
                    let mut row = vec![
                        g.lease.key.clone(),
                        g.lease.token.to_string(),
                        in_human(g.safe_deadline.saturating_duration_since(now)),
                    ];
                    if renewed {
                        row.push(match g.already_held {
                            true => "already held: its own token, renewed".into(),
                            false => String::new(),
                        });
                    }
                    row
                })
                .collect();
            let headers: &[&str] = match renewed {
                true => &["KEY", "TOKEN", "SAFE DEADLINE", "NOTE"],
                false => &["KEY", "TOKEN", "SAFE DEADLINE"],
            };
            let text = format!(
                "granted {} keys to {holder} in one entry\n{}",
                grants.len(),
                table::render(headers, &rows)
            );
            Rendered::new(format, json, text, Verdict::Ok)
        }
        SetOutcome::Blocked(blocked) => {
            let json = Json::Blocked {
                blocked: blocked
                    .iter()
                    .map(|b| match b {
                        BlockedKey::Held {
                            lease,
                            same_name_other_process,
                            assignment,
                        } => BlockedJson::Held {
                            key: &lease.key,
                            lease,
                            same_name_other_process: *same_name_other_process,
                            assignment: assignment.as_ref(),
                        },
                        BlockedKey::Quarantined {
                            key,
                            revision,
                            delay,
                            remaining,
                            revoked,
                        } => BlockedJson::Quarantined {
                            key,
                            quarantine_revision: *revision,
                            quarantine_delay_ms: ms(*delay),
                            quarantine_remaining_ms: ms(*remaining),
                            quarantine_revoked: *revoked,
                        },
                    })
                    .collect(),
            };
            let rows: Vec<Vec<String>> = blocked
                .iter()
                .map(|b| match b {
                    BlockedKey::Held { lease, .. } => vec![
                        lease.key.clone(),
                        format!("held by {}", lease.holder_name),
                        lease.token.to_string(),
                        in_human(lease.remaining),
                    ],
                    BlockedKey::Quarantined { key, remaining, .. } => vec![
                        key.clone(),
                        "quarantined".into(),
                        String::new(),
                        in_human(*remaining),
                    ],
                })
                .collect();
            let text = format!(
                "blocked by {} {}: nothing was granted; stand down\n{}",
                blocked.len(),
                if blocked.len() == 1 { "key" } else { "keys" },
                table::render(&["KEY", "WHY", "TOKEN", "FREE"], &rows)
            );
            Rendered::new(format, json, text, Verdict::StandDown)
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What one key of a renewal or release of several came to.
pub(crate) enum Each<T> {
    Done(T),
    Failed(Error),
}

/// Renews every key with `token` (a set's keys share the token it was granted), each in its
/// own write; exit 3 if any is lost.
pub async fn renew(
    client: &Client,
    keys: &[String],
    token: u64,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let answers = each(keys, |key| client.renew(key, token)).await;
    let now = std::time::Instant::now();
    several(keys, answers, format, |key, outcome: &RenewOutcome| {
        output::renew(key, token, outcome, format, now)
    })
}

/// Releases every key held with `token` (with `status`, each in the same write as its
/// release); exit 3 if any was no longer held.
pub async fn release(
    client: &Client,
    keys: &[String],
    token: u64,
    status: &str,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let answers = each(keys, |key| client.release_with_status(key, token, status)).await;
    several(keys, answers, format, |key, outcome: &ReleaseOutcome| {
        output::release(key, token, outcome, format)
    })
}

async fn each<'a, T, F, Fut>(keys: &'a [String], call: F) -> Vec<Each<T>>
where
    F: Fn(&'a str) -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    futures::future::join_all(keys.iter().map(|k| call(k)))
        .await
        .into_iter()
        .map(|answer| match answer {
            Ok(outcome) => Each::Done(outcome),
            Err(error) => Each::Failed(error),
        })
        .collect()
}

/// One key's output after another (JSON: `{"keys": [...]}` of the one-key objects, each with
/// its key); the worst verdict wins. A refusal is shown as `baton` shows refusals.
pub(crate) fn several<T>(
    keys: &[String],
    answers: Vec<Each<T>>,
    format: OutputFormat,
    one: impl Fn(&str, &T) -> Rendered,
) -> anyhow::Result<Rendered> {
    let mut parts = Vec::with_capacity(keys.len());
    for (key, answer) in keys.iter().zip(answers) {
        parts.push(match answer {
            Each::Done(outcome) => one(key, &outcome),
            Each::Failed(error) => crate::handoff::refusal(key, error, format)?,
        });
    }
    let verdict = parts
        .iter()
        .map(|p| p.verdict)
        .find(|v| *v != Verdict::Ok)
        .unwrap_or(Verdict::Ok);
    let stdout = match format {
        OutputFormat::Table => parts.iter().map(|p| p.stdout.as_str()).collect(),
        OutputFormat::Json => {
            let each: Vec<serde_json::Value> = keys
                .iter()
                .zip(&parts)
                .map(|(key, p)| {
                    let mut value: serde_json::Value =
                        serde_json::from_str(&p.stdout).unwrap_or_default();
                    if let Some(object) = value.as_object_mut() {
                        object.insert("key".into(), key.as_str().into());
                    }
                    value
                })
                .collect();
            format!("{}\n", serde_json::json!({ "keys": each }))
        }
    };
    Ok(Rendered {
        stdout,
        verdict,
        error_line: parts.into_iter().find_map(|p| p.error_line),
    })
}
