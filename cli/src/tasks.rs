//! `baton post` and `baton claim-next`: the task board. A dispatcher posts tasks; agents take
//! the next claimable one under a prefix, one winner per task, in one log entry each.

use std::time::Instant;

use baton_client::{ClaimOutcome, Client, NextOutcome, Posted, RecordPatch, Unclaimable};
use serde::Serialize;

use crate::args::{default_holder, ClaimNextArgs, OutputFormat, PostArgs};
use crate::exit::Verdict;
use crate::output::{self, Rendered};
use crate::records::record_text;

pub async fn post(
    client: &Client,
    args: PostArgs,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let patch = RecordPatch {
        status: args.status,
        summary: args.summary,
        set_fields: args.set.into_iter().collect(),
        remove_fields: Vec::new(),
    };
    let by = args.by.unwrap_or_else(default_holder);
    match client
        .post(&args.key, patch, args.to.as_deref(), &by, args.update)
        .await
    {
        Ok(posted) => Ok(posted_rendered(&posted, format)),
        Err(error) => crate::handoff::refusal(&args.key, error, format),
    }
}

pub fn posted_rendered(posted: &Posted, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        #[serde(flatten)]
        posted: &'a Posted,
    }
    let outcome = if posted.created { "posted" } else { "updated" };
    let text = format!(
        "{outcome} {} (revision {})\n{}",
        posted.key,
        posted.revision,
        record_text(&posted.record, None)
    );
    Rendered::new(format, Json { outcome, posted }, text, Verdict::Ok)
}

pub async fn claim_next(
    client: &Client,
    args: ClaimNextArgs,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let holder = args.holder.clone().unwrap_or_else(default_holder);
    let outcome = client
        .claim_next(&args.prefix, &holder, args.ttl, &args.filter())
        .await;
    match outcome {
        Ok(outcome) => Ok(next_rendered(
            &args.prefix,
            &outcome,
            format,
            Instant::now(),
        )),
        Err(error) => crate::handoff::refusal(&args.prefix, error, format),
    }
}

/// A grant reads as `baton claim`'s; nothing claimable is a stand-down (exit 3) with why
/// each task was passed by.
pub fn next_rendered(
    prefix: &str,
    outcome: &NextOutcome,
    format: OutputFormat,
    now: Instant,
) -> Rendered {
    match outcome {
        NextOutcome::Granted(grant) => {
            output::claim(&ClaimOutcome::Granted((**grant).clone()), format, now)
        }
        NextOutcome::Nothing(counts) => {
            #[derive(Serialize)]
            struct Json<'a> {
                outcome: &'static str,
                prefix: &'a str,
                counts: &'a Unclaimable,
            }
            let json = Json {
                outcome: "nothing_claimable",
                prefix,
                counts,
            };
            Rendered::new(
                format,
                json,
                nothing_text(prefix, counts),
                Verdict::StandDown,
            )
        }
    }
}

fn nothing_text(prefix: &str, c: &Unclaimable) -> String {
    let reasons: Vec<String> = [
        (c.held, "held"),
        (c.quarantined, "quarantined"),
        (c.finished, "finished"),
        (c.unmatched, "not matching --where"),
        (c.assigned_elsewhere, "assigned to others"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, why)| format!("{n} {why}"))
    .collect();
    let mut text = match c.scanned {
        0 => format!("nothing claimable under {prefix}: no unfinished task there\n"),
        n => format!(
            "nothing claimable under {prefix}: {} of {n} tasks\n",
            reasons.join(", ")
        ),
    };
    if c.truncated {
        text.push_str(&format!(
            "(looked at the first {} tasks only: narrow the prefix)\n",
            c.scanned
        ));
    }
    text
}
