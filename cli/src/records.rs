//! What the record commands print: `update`, `assign`, `record`, `history`, and the
//! refusal of any fenced write.

use baton_client::{Assigned, Event, History, Record, RecordView, Refusal, Stint};
use serde::Serialize;

use super::args::OutputFormat;
use super::exit::Verdict;
use super::note::note_text;
use super::output::{assignment_line, in_human, utc, Rendered};
use super::table;

/// A refused write (stale token, frozen record, no offer, not the addressee): the cluster's
/// message, which names who holds what, and exit 3: stand down.
pub fn refused(key: &str, refusal: &Refusal, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        key: &'a str,
        reason: &'a str,
        message: &'a str,
        /// Every fact the cluster sent, as fields.
        refusal: &'a Refusal,
    }
    let json = Json {
        outcome: "refused",
        key,
        reason: refusal.reason.as_str(),
        message: &refusal.message,
        refusal,
    };
    let text = format!("refused: {refusal}; stand down\n{}", refusal_pairs(refusal));
    Rendered::new(format, json, text, Verdict::StandDown)
}

/// The table under a refusal's line: its facts, from the fields (those that apply).
fn refusal_pairs(refusal: &Refusal) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if let Some(lease) = &refusal.lease {
        pairs.push(("holder", lease.holder_name.clone()));
        pairs.push(("client", lease.holder_client_id.clone()));
        pairs.push(("token", lease.token.to_string()));
        pairs.push(("since", utc(lease.held_since_unix_ms)));
        pairs.push(("free", in_human(lease.remaining)));
    }
    if let Some(p) = &refusal.permits {
        let holders: Vec<String> = p
            .holders
            .iter()
            .map(|l| format!("{} (token {})", l.holder_name, l.token))
            .collect();
        let held = match holders.is_empty() {
            true => String::new(),
            false => format!(", held by {}", holders.join(", ")),
        };
        match p.shared {
            true => pairs.push(("held", format!("shared{held}"))),
            false => pairs.push(("permits", format!("{}{held}", p.permits))),
        }
    }
    if refusal.asked_shared {
        pairs.push(("asked", "to share it (--shared)".to_owned()));
    }
    if !refusal.client_id.is_empty() {
        pairs.push(("you are", format!("client {}", refusal.client_id)));
    }
    if !refusal.offer_to.is_empty() {
        pairs.push(("offer to", refusal.offer_to.clone()));
    }
    if !refusal.nodes.is_empty() {
        let nodes: Vec<String> = refusal.nodes.iter().map(u64::to_string).collect();
        pairs.push(("not yet upgraded", format!("nodes {}", nodes.join(", "))));
        pairs.push(("needs", format!("data format {}", refusal.data_format)));
    }
    if refusal.quarantine_revision > 0 {
        pairs.push((
            "claimable",
            in_human(std::time::Duration::from_millis(
                refusal.quarantine_remaining_ms,
            )),
        ));
    }
    if pairs.is_empty() {
        return String::new();
    }
    table::render_pairs(&pairs)
}

#[derive(Serialize)]
struct RecordJson<'a> {
    outcome: &'static str,
    key: &'a str,
    record: &'a Record,
}

/// `baton assign` as JSON: the record, and the key's lease (`null` when free).
#[derive(Serialize)]
struct AssignJson<'a> {
    outcome: &'static str,
    key: &'a str,
    record: &'a Record,
    lease: Option<&'a baton_client::LeaseInfo>,
}

/// `baton update`: the record as changed.
pub fn updated(key: &str, record: &Record, format: OutputFormat) -> Rendered {
    let json = RecordJson {
        outcome: "updated",
        key,
        record,
    };
    let text = format!(
        "updated {key} (revision {})\n{}",
        record.updated_revision,
        record_text(record, None)
    );
    Rendered::new(format, json, text, Verdict::Ok)
}

/// `baton assign --clear`.
pub fn unassigned(key: &str, answer: &Assigned, format: OutputFormat) -> Rendered {
    let json = AssignJson {
        outcome: "unassigned",
        key,
        record: &answer.record,
        lease: answer.lease.as_ref(),
    };
    let text = format!("{key} has no assignment now\n");
    Rendered::new(format, json, text, Verdict::Ok)
}

/// `baton assign`: the assignment, and who holds the key now, so that an assigner learns at
/// once when someone else does (the assignment is recorded all the same, as routing).
pub fn assigned(key: &str, answer: &Assigned, format: OutputFormat) -> Rendered {
    let record = &answer.record;
    let json = AssignJson {
        outcome: "assigned",
        key,
        record,
        lease: answer.lease.as_ref(),
    };
    let text = match (&record.assigned_to, &answer.lease) {
        (Some(assignment), Some(lease)) if lease.holder_name != assignment.to => format!(
            "assigned {key} to {assignment}\nheld by {} (token {}, since {}): an assignment \
             reserves nothing; {} keeps {key} until its lease ends, then {} may claim it\n",
            lease.holder_name,
            lease.token,
            utc(lease.held_since_unix_ms),
            lease.holder_name,
            assignment.to
        ),
        (Some(assignment), Some(_)) => format!(
            "assigned {key} to {assignment}\n{} holds it already\n",
            assignment.to
        ),
        (Some(assignment), None) => format!(
            "assigned {key} to {assignment}\nan assignment reserves nothing: {} must still \
             probe and claim {key}, and anyone's claim wins it\n",
            assignment.to
        ),
        (None, _) => format!("assigned {key}\n"),
    };
    Rendered::new(format, json, text, Verdict::Ok)
}

/// `baton record`: the record with its lease, as one read saw them.
pub fn record(view: &RecordView, format: OutputFormat) -> Rendered {
    let mut text = format!("{}\n{}", view.key, record_text(&view.record, Some(view)));
    if let Some(q) = &view.quarantine {
        text.push_str(&super::output::quarantine_line(&view.key, q));
    }
    Rendered::new(format, view, text, Verdict::Ok)
}

/// A record for people. With `view`, also who holds the key (the lease is not part of the
/// record, but a reader wants the two side by side).
pub(crate) fn record_text(record: &Record, view: Option<&RecordView>) -> String {
    let or_dash = |text: &str| {
        if text.is_empty() {
            "-".to_owned()
        } else {
            text.to_owned()
        }
    };
    let mut pairs = vec![
        ("status", or_dash(&record.status)),
        ("summary", or_dash(&record.summary)),
    ];
    if let Some(view) = view {
        let held_by = match &view.lease {
            Some(lease) => format!(
                "{} (token {}, since {}, free {})",
                lease.holder_name,
                lease.token,
                utc(lease.held_since_unix_ms),
                in_human(lease.remaining)
            ),
            None => match &view.quarantine {
                // Free of holders, yet not claimable: say which, never "free".
                Some(q) if q.revoked => "nobody, since a revoke (not claimable yet)".to_owned(),
                Some(_) => "nobody, quarantined (not claimable yet)".to_owned(),
                None => "nobody: the key is free".to_owned(),
            },
        };
        pairs.push(("held by", held_by));
    }
    let updated = if record.updated_revision == 0 {
        "never".to_owned()
    } else {
        format!("revision {}", record.updated_revision)
    };
    pairs.push(("updated", updated));
    let mut text = table::render_pairs_multiline(&pairs, "");
    if let Some(assignment) = &record.assigned_to {
        let holder = view.and_then(|v| v.lease.as_ref().map(|l| l.holder_name.as_str()));
        if view.is_some() {
            text.push_str(&assignment_line(assignment, holder, false));
        } else {
            text.push_str(&format!("assigned to {assignment}\n"));
        }
    }
    if !record.fields.is_empty() {
        text.push_str("fields:\n");
        let fields: Vec<(&str, String)> = record
            .fields
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone()))
            .collect();
        text.push_str(&table::render_pairs_multiline(&fields, "  "));
    }
    if let Some(offer) = &record.pending_offer {
        text.push_str(&format!(
            "pending handoff to {} (offered by {} with token {}, lapses {}); the record is \
             frozen until it is answered\n",
            offer.to,
            offer.from.name,
            offer.from_token,
            in_human(offer.remaining)
        ));
        text.push_str(&note_text(&offer.note, "  "));
    }
    if let Some(note) = &record.last_note {
        text.push_str("last handoff note:\n");
        text.push_str(&note_text(note, "  "));
    }
    text
}

/// `baton history`: the ownership stints, each with the updates and offers made under its
/// token (or, with `events`, every event one a line). JSON always carries both.
pub fn history(history: &History, events: bool, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        key: &'a str,
        stints: &'a [Stint],
        events: &'a [Event],
        dropped: u64,
        revision: u64,
    }
    let stints = history.stints();
    let json = Json {
        key: &history.key,
        stints: &stints,
        events: &history.events,
        dropped: history.dropped,
        revision: history.revision,
    };
    let mut text = if history.events.is_empty() {
        format!("no history for {}\n", history.key)
    } else if events {
        events_table(&history.events)
    } else {
        stints_text(history, &stints)
    };
    if history.dropped > 0 {
        text.push_str(&format!(
            "dropped {} older events (compacted); the first stint may have begun earlier\n",
            history.dropped
        ));
    }
    Rendered::new(format, json, text, Verdict::Ok)
}

/// Every event one a row; who acted by name, session (client id) and principal (`-` when
/// auth is off or the event predates data format 4, which kept none).
fn events_table(events: &[Event]) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let (actor, client, principal) = match &e.actor {
                Some(a) => (
                    a.name_or_operator().to_owned(),
                    a.client_id.clone(),
                    a.principal.clone().unwrap_or_else(|| "-".to_owned()),
                ),
                None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
            };
            vec![
                e.revision.to_string(),
                utc(e.at_unix_ms),
                e.kind.clone(),
                actor,
                client,
                principal,
                token_cell(e.token),
                e.detail.clone(),
            ]
        })
        .collect();
    table::render(
        &[
            "REV",
            "TIME",
            "KIND",
            "ACTOR",
            "CLIENT",
            "PRINCIPAL",
            "TOKEN",
            "DETAIL",
        ],
        &rows,
    )
}

/// The stints as a table, each row followed by its events, indented, oldest first; then
/// the assignments, which belong to no stint.
fn stints_text(history: &History, stints: &[Stint]) -> String {
    let rows: Vec<Vec<String>> = stints
        .iter()
        .enumerate()
        .map(|(i, stint)| {
            let from = if stint.start_compacted {
                "(compacted)".to_owned()
            } else {
                format!("r{} {}", stint.from_revision, utc(stint.from_unix_ms))
            };
            let until = match (stint.until_revision, stint.until_unix_ms) {
                (Some(revision), at) => format!("r{revision} {}", utc(at.unwrap_or(0))),
                (None, _) => "-".to_owned(),
            };
            vec![
                or_unknown(&stint.holder_name),
                stint.token.to_string(),
                from,
                until,
                ended(stint, stints.get(i + 1)),
            ]
        })
        .collect();
    let table = table::render(&["HOLDER", "TOKEN", "FROM", "UNTIL", "ENDED"], &rows);
    let mut lines = table.lines();
    let mut text = String::new();
    if let Some(header) = lines.next() {
        text.push_str(header);
        text.push('\n');
    }
    for (stint, line) in stints.iter().zip(lines) {
        text.push_str(line);
        text.push('\n');
        let mut events: Vec<&Event> = stint.updates.iter().chain(&stint.handoff_events).collect();
        events.sort_by_key(|e| e.revision);
        for event in events {
            text.push_str(&format!("  {}\n", event_line(event)));
        }
    }
    let assignments: Vec<&Event> = history.assignments().collect();
    if !assignments.is_empty() {
        text.push_str("assignments (routing only, they reserve nothing):\n");
        for event in assignments {
            text.push_str(&format!("  {}\n", event_line(event)));
        }
    }
    text
}

/// How a stint ended, for people: `released (renewed 3 times)`, `handed off to bob`,
/// `holding` while it lasts.
fn ended(stint: &Stint, next: Option<&Stint>) -> String {
    let with_detail = |word: &str| {
        if stint.end_detail.is_empty() {
            word.to_owned()
        } else {
            format!("{word} ({})", stint.end_detail)
        }
    };
    match stint.ended_by.as_deref() {
        None if stint.is_open() => "holding".to_owned(),
        None => "? (not recorded)".to_owned(),
        Some("accepted") => match next {
            Some(next) => format!("handed off to {}", or_unknown(&next.holder_name)),
            None => "handed off".to_owned(),
        },
        Some(word) => with_detail(word),
    }
}

/// `r7 2023-11-14T22:13:27Z updated by bob: status open -> done`.
fn event_line(event: &Event) -> String {
    let mut line = format!(
        "r{} {} {}",
        event.revision,
        utc(event.at_unix_ms),
        event.kind
    );
    if let Some(actor) = &event.actor {
        line.push_str(&format!(" by {actor}"));
    }
    if !event.detail.is_empty() {
        line.push_str(&format!(": {}", event.detail));
    }
    line
}

fn token_cell(token: u64) -> String {
    if token == 0 {
        "-".to_owned()
    } else {
        token.to_string()
    }
}

fn or_unknown(name: &str) -> String {
    if name.is_empty() {
        "?".to_owned()
    } else {
        name.to_owned()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use baton_client::{AssignmentInfo, LeaseInfo};
    use std::time::Duration;

    pub(crate) fn assignment() -> AssignmentInfo {
        AssignmentInfo {
            to: "alice".into(),
            by: "dispatcher".into(),
            reason: "verify four evidence domains".into(),
            assigned_at_unix_ms: 1_700_000_000_000,
            revision: 3,
        }
    }

    pub(crate) fn sample_record() -> Record {
        Record {
            status: "in_progress".into(),
            summary: "root cause found\nfix pending".into(),
            fields: [("pr".to_owned(), "482".to_owned())].into(),
            assigned_to: Some(assignment()),
            pending_offer: None,
            last_note: None,
            updated_revision: 12,
        }
    }

    pub(crate) fn event(revision: u64, kind: &str, actor: Option<&str>, token: u64) -> Event {
        Event {
            revision,
            key: "tasks/x".into(),
            kind: kind.into(),
            actor: actor.map(|name| baton_client::ActorInfo {
                name: name.into(),
                client_id: format!("{name}-id"),
                principal: None,
            }),
            token,
            at_unix_ms: 1_700_000_000_000 + revision * 1_000,
            detail: String::new(),
            recorded_before_format_4: false,
            status_set: None,
        }
    }

    pub(crate) fn sample_history() -> History {
        let mut update = event(5, "updated", Some("claude@a"), 4);
        update.detail = "status open -> in_progress".into();
        update.status_set = Some("in_progress".into());
        let mut released = event(7, "released", Some("claude@a"), 4);
        released.detail = "renewed 2 times".into();
        let mut assigned = event(3, "assigned", Some("dispatcher"), 0);
        assigned.detail = "to alice".into();
        History {
            key: "tasks/x".into(),
            events: vec![
                assigned,
                event(4, "claimed", Some("claude@a"), 4),
                update,
                released,
                event(8, "claimed", Some("codex@b"), 8),
                event(9, "offered", Some("codex@b"), 8),
                event(10, "accepted", Some("bob"), 10),
            ],
            dropped: 2,
            revision: 10,
        }
    }

    fn lease() -> LeaseInfo {
        LeaseInfo {
            key: "tasks/x".into(),
            holder_name: "bob".into(),
            holder_client_id: "bob-id".into(),
            token: 10,
            ttl: Duration::from_secs(30),
            held_since_unix_ms: 1_700_000_010_000,
            renewed_at_unix_ms: 1_700_000_010_000,
            remaining: Duration::from_secs(20),
            basis: 10,
        }
    }

    #[test]
    fn refusal_names_the_holder_and_stands_down_with_its_facts_as_fields() {
        let message = "tasks/x is held by codex@b (client codex-1); this request comes from \
                       client c-77";
        let refusal = Refusal {
            reason: baton_client::RefusalReason::WrongSession,
            key: "tasks/x".into(),
            lease: Some(lease()),
            client_id: "c-77".into(),
            token: lease().token,
            ..Refusal::other(message)
        };
        let out = refused("tasks/x", &refusal, OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::StandDown);
        assert!(
            out.stdout
                .starts_with(&format!("refused: {message}; stand down\n")),
            "{}",
            out.stdout
        );
        // The table under it comes from the fields.
        assert!(
            out.stdout
                .contains(&format!("client   {}\n", lease().holder_client_id)),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("you are  client c-77\n"),
            "{}",
            out.stdout
        );
        let out = refused("tasks/x", &refusal, OutputFormat::Json);
        assert_eq!(out.verdict, Verdict::StandDown);
        let value: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(value["outcome"], "refused");
        assert_eq!(value["reason"], "wrong_session");
        assert_eq!(value["message"], message);
        assert_eq!(value["refusal"]["client_id"], "c-77");
        assert_eq!(
            value["refusal"]["lease"]["holder_name"],
            lease().holder_name.as_str()
        );
        assert_eq!(value["refusal"]["token"], lease().token);
    }

    #[test]
    fn updated_record_prints_status_summary_fields_and_assignment() {
        let out = updated("tasks/x", &sample_record(), OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::Ok);
        assert_eq!(
            out.stdout,
            "updated tasks/x (revision 12)\n\
             status   in_progress\n\
             summary  root cause found\n\
             \x20        fix pending\n\
             updated  revision 12\n\
             assigned to alice by dispatcher: verify four evidence domains\n\
             fields:\n\
             \x20 pr  482\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&updated("tasks/x", &sample_record(), OutputFormat::Json).stdout)
                .unwrap();
        assert_eq!(json["outcome"], "updated");
        assert_eq!(json["record"]["fields"]["pr"], "482");
        assert_eq!(json["record"]["assigned_to"]["to"], "alice");
        assert_eq!(json["record"]["pending_offer"], serde_json::Value::Null);
    }

    fn answer(lease: Option<LeaseInfo>) -> Assigned {
        Assigned {
            record: sample_record(),
            lease,
            revision: 12,
        }
    }

    #[test]
    fn assign_says_it_reserves_nothing() {
        let out = assigned("tasks/x", &answer(None), OutputFormat::Table);
        assert!(out.stdout.starts_with(
            "assigned tasks/x to alice by dispatcher: verify four evidence domains\n"
        ));
        assert!(out.stdout.contains("alice must still probe and claim"));
        let json: serde_json::Value =
            serde_json::from_str(&assigned("tasks/x", &answer(None), OutputFormat::Json).stdout)
                .unwrap();
        assert_eq!(json["lease"], serde_json::Value::Null);
    }

    #[test]
    fn assign_of_a_key_someone_else_holds_says_who() {
        let out = assigned("tasks/x", &answer(Some(lease())), OutputFormat::Table);
        let holder = &lease().holder_name;
        assert!(
            out.stdout.contains(&format!(
                "held by {holder} (token {}, since ",
                lease().token
            )) && out.stdout.contains("an assignment reserves nothing"),
            "{}",
            out.stdout
        );
        let json: serde_json::Value = serde_json::from_str(
            &assigned("tasks/x", &answer(Some(lease())), OutputFormat::Json).stdout,
        )
        .unwrap();
        assert_eq!(json["lease"]["holder_name"], holder.as_str());
        assert_eq!(json["outcome"], "assigned");
    }

    #[test]
    fn record_shows_holder_and_assignment_side_by_side() {
        let view = RecordView {
            permits: None,
            key: "tasks/x".into(),
            record: sample_record(),
            lease: Some(lease()),
            revision: 20,
            quarantine: None,
            line: None,
        };
        let text = record(&view, OutputFormat::Table).stdout;
        assert!(text.starts_with("tasks/x\n"), "{text}");
        assert!(
            text.contains("held by  bob (token 10, since 2023-11-14T22:13:30Z, free in 20s)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "assigned to alice by dispatcher: verify four evidence domains \
                 (an assignment reserves nothing: bob holds the key)\n"
            ),
            "{text}"
        );
        let free = RecordView {
            lease: None,
            record: Record::default(),
            ..view
        };
        let text = record(&free, OutputFormat::Table).stdout;
        assert!(text.contains("status   -\n"), "{text}");
        assert!(
            text.contains("held by  nobody: the key is free\n"),
            "{text}"
        );
        assert!(text.contains("updated  never\n"), "{text}");
        // Free of holders but quarantined: never "free", and the line after says for how long.
        let quarantined = RecordView {
            quarantine: Some(baton_client::QuarantineView {
                revision: 19,
                delay: std::time::Duration::from_secs(30),
                remaining: std::time::Duration::from_secs(28),
                revoked: false,
            }),
            ..free
        };
        let text = record(&quarantined, OutputFormat::Table).stdout;
        assert!(!text.contains("free"), "{text}");
        assert!(
            text.contains("held by  nobody, quarantined (not claimable yet)\n"),
            "{text}"
        );
        assert!(
            text.contains("claims are refused for another 28s (its holder's lease expired"),
            "{text}"
        );
        assert!(!text.contains("until in"), "{text}");
    }

    #[test]
    fn history_shows_stints_with_their_updates_indented_and_the_dropped_count() {
        let out = history(&sample_history(), false, OutputFormat::Table);
        let expected = "\
HOLDER    TOKEN  FROM                      UNTIL                     ENDED
claude@a  4      r4 2023-11-14T22:13:24Z   r7 2023-11-14T22:13:27Z   released (renewed 2 times)
  r5 2023-11-14T22:13:25Z updated by claude@a (client claude@a-id): status open -> in_progress
codex@b   8      r8 2023-11-14T22:13:28Z   r10 2023-11-14T22:13:30Z  handed off to bob
  r9 2023-11-14T22:13:29Z offered by codex@b (client codex@b-id)
bob       10     r10 2023-11-14T22:13:30Z  -                         holding
assignments (routing only, they reserve nothing):
  r3 2023-11-14T22:13:23Z assigned by dispatcher (client dispatcher-id): to alice
dropped 2 older events (compacted); the first stint may have begun earlier
";
        assert_eq!(out.stdout, expected);
    }

    #[test]
    fn history_events_view_lists_every_event() {
        let out = history(&sample_history(), true, OutputFormat::Table);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            [
                "REV",
                "TIME",
                "KIND",
                "ACTOR",
                "CLIENT",
                "PRINCIPAL",
                "TOKEN",
                "DETAIL"
            ]
        );
        assert_eq!(lines.len(), 1 + 7 + 1);
        assert!(
            lines[1].contains("assigned") && lines[1].contains(" - "),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn history_json_carries_stints_and_events() {
        let out = history(&sample_history(), false, OutputFormat::Json);
        let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(json["key"], "tasks/x");
        assert_eq!(json["dropped"], 2);
        assert_eq!(json["events"].as_array().unwrap().len(), 7);
        let stints = json["stints"].as_array().unwrap();
        assert_eq!(stints.len(), 3);
        assert_eq!(stints[0]["holder_name"], "claude@a");
        assert_eq!(stints[0]["ended_by"], "released");
        assert_eq!(stints[0]["updates"][0]["revision"], 5);
        assert_eq!(stints[2]["until_revision"], serde_json::Value::Null);
    }

    #[test]
    fn empty_history_says_so() {
        let empty = History {
            key: "tasks/new".into(),
            events: vec![],
            dropped: 0,
            revision: 1,
        };
        assert_eq!(
            history(&empty, false, OutputFormat::Table).stdout,
            "no history for tasks/new\n"
        );
    }
}
