//! What each command prints, and what it means for the exit code.
//!
//! Every renderer takes the outcome and the output format and returns a [`Rendered`]: the
//! text for stdout and the [`Verdict`]. JSON output is one object per command with stable
//! snake_case fields; durations are integers in milliseconds with a `_ms` suffix.

use std::time::{Duration, Instant, UNIX_EPOCH};

use baton_client::{
    AssignmentInfo, Board, ClaimOutcome, ClusterStatus, Grant, LeaseInfo, RecordView,
    ReleaseOutcome, RenewOutcome, TokenCheck,
};
use serde::Serialize;

use super::args::OutputFormat;
use super::exit::Verdict;
use super::table;

/// A command's result, ready to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// Text for stdout, ending with a newline.
    pub stdout: String,
    /// How the command ended, for the exit code.
    pub verdict: Verdict,
    /// One line for stderr when the result is a failure that still has output to show.
    pub error_line: Option<String>,
}

impl Rendered {
    pub(crate) fn new(
        format: OutputFormat,
        json: impl Serialize,
        text: String,
        verdict: Verdict,
    ) -> Self {
        let stdout = match format {
            OutputFormat::Table => text,
            OutputFormat::Json => {
                let mut line = serde_json::to_string(&json)
                    .expect("output types serialize to JSON: no maps with non-string keys");
                line.push('\n');
                line
            }
        };
        Rendered {
            stdout,
            verdict,
            error_line: None,
        }
    }
}

/// `baton claim`.
pub fn claim(outcome: &ClaimOutcome, format: OutputFormat, now: Instant) -> Rendered {
    #[derive(Serialize)]
    #[serde(tag = "outcome", rename_all = "snake_case")]
    enum Json<'a> {
        Granted {
            lease: &'a LeaseInfo,
            already_held: bool,
            revision: u64,
            safe_deadline_in_ms: u64,
            assignment: Option<&'a AssignmentInfo>,
        },
        Held {
            lease: &'a LeaseInfo,
            same_name_other_process: bool,
            assignment: Option<&'a AssignmentInfo>,
        },
    }
    match outcome {
        ClaimOutcome::Granted(grant) => {
            let json = Json::Granted {
                lease: &grant.lease,
                already_held: grant.already_held,
                revision: grant.revision,
                safe_deadline_in_ms: safe_deadline_in_ms(grant, now),
                assignment: grant.assignment.as_ref(),
            };
            let mut headline =
                format!("granted {} to {}", grant.lease.key, grant.lease.holder_name);
            if grant.already_held {
                headline.push_str(" (already held by this client: same token, lease renewed)");
            }
            let mut text = format!("{headline}\n{}", grant_pairs(grant, now));
            if let Some(assignment) = &grant.assignment {
                text.push_str(&assignment_line(
                    assignment,
                    Some(&grant.lease.holder_name),
                    true,
                ));
            }
            Rendered::new(format, json, text, Verdict::Ok)
        }
        ClaimOutcome::Held {
            lease,
            same_name_other_process,
            assignment,
        } => {
            let json = Json::Held {
                lease,
                same_name_other_process: *same_name_other_process,
                assignment: assignment.as_ref(),
            };
            let mut text = format!(
                "held: {} is held by {}; stand down\n{}",
                lease.key,
                lease.holder_name,
                holder_pairs(lease)
            );
            if let Some(assignment) = assignment {
                text.push_str(&assignment_line(
                    assignment,
                    Some(&lease.holder_name),
                    false,
                ));
            }
            if *same_name_other_process {
                text.push_str(&format!(
                    "note: the holder has your name but is another process (client id {})\n",
                    lease.holder_client_id
                ));
            }
            Rendered::new(format, json, text, Verdict::StandDown)
        }
    }
}

/// `baton renew`; `token` is the one the caller presented.
pub fn renew(
    key: &str,
    token: u64,
    outcome: &RenewOutcome,
    format: OutputFormat,
    now: Instant,
) -> Rendered {
    #[derive(Serialize)]
    #[serde(tag = "outcome", rename_all = "snake_case")]
    enum Json<'a> {
        Renewed {
            lease: &'a LeaseInfo,
            revision: u64,
            safe_deadline_in_ms: u64,
        },
        Lost {
            current: Option<&'a LeaseInfo>,
        },
    }
    match outcome {
        RenewOutcome::Renewed(grant) => {
            let json = Json::Renewed {
                lease: &grant.lease,
                revision: grant.revision,
                safe_deadline_in_ms: safe_deadline_in_ms(grant, now),
            };
            let text = format!("renewed {}\n{}", grant.lease.key, grant_pairs(grant, now));
            Rendered::new(format, json, text, Verdict::Ok)
        }
        RenewOutcome::Lost { current } => {
            let json = Json::Lost {
                current: current.as_ref(),
            };
            let text = lost_text(key, token, current.as_ref());
            Rendered::new(format, json, text, Verdict::StandDown)
        }
    }
}

/// `baton release`; `token` is the one the caller presented.
pub fn release(key: &str, token: u64, outcome: &ReleaseOutcome, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    #[serde(tag = "outcome", rename_all = "snake_case")]
    enum Json<'a> {
        Released { lease: &'a LeaseInfo },
        Lost { current: Option<&'a LeaseInfo> },
    }
    match outcome {
        ReleaseOutcome::Released(lease) => {
            let text = format!("released {} (token {})\n", lease.key, lease.token);
            Rendered::new(format, Json::Released { lease }, text, Verdict::Ok)
        }
        ReleaseOutcome::Lost { current } => {
            let json = Json::Lost {
                current: current.as_ref(),
            };
            let text = lost_text(key, token, current.as_ref());
            Rendered::new(format, json, text, Verdict::StandDown)
        }
    }
}

/// `baton probe`: who holds the key and, side by side, who a dispatcher assigned it to. A
/// free key is an answer like any other, so it exits 0.
pub fn probe(view: &RecordView, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        lease: Option<&'a LeaseInfo>,
        revision: u64,
        assignment: Option<&'a AssignmentInfo>,
    }
    let assignment = view.record.assigned_to.as_ref();
    let mut text = match &view.lease {
        Some(lease) => lease_table(std::slice::from_ref(lease)),
        None => format!("{} is free\n", view.key),
    };
    if let Some(assignment) = assignment {
        let holder = view.lease.as_ref().map(|l| l.holder_name.as_str());
        text.push_str(&assignment_line(assignment, holder, false));
    }
    if let Some(offer) = &view.record.pending_offer {
        text.push_str(&format!(
            "pending handoff to {} (offered by {}, lapses {})\n",
            offer.to,
            offer.from.name,
            in_human(offer.remaining)
        ));
    }
    let json = Json {
        lease: view.lease.as_ref(),
        revision: view.revision,
        assignment,
    };
    Rendered::new(format, json, text, Verdict::Ok)
}

/// The line that shows an assignment next to the holder, and says what it is not:
/// `assigned to alice by dispatcher: verify (reserves nothing: bob holds the key)`.
/// `holder` is who holds the key (`None` when it is free); `yours` says the reader holds it.
pub fn assignment_line(assignment: &AssignmentInfo, holder: Option<&str>, yours: bool) -> String {
    let aside = match holder {
        Some(holder) if holder == assignment.to => String::new(),
        Some(_) if yours => {
            " (an assignment reserves nothing: the key is yours; tell the dispatcher)".to_owned()
        }
        Some(holder) => format!(" (an assignment reserves nothing: {holder} holds the key)"),
        None => format!(
            " (an assignment reserves nothing: {} must still claim it)",
            assignment.to
        ),
    };
    format!("assigned to {assignment}{aside}\n")
}

/// `baton board`.
pub fn board(prefix: &str, board: &Board, format: OutputFormat) -> Rendered {
    let mut text = if board.leases.is_empty() {
        if prefix.is_empty() {
            "no leases held\n".to_owned()
        } else {
            format!("no leases held under {prefix:?}\n")
        }
    } else {
        board_table(board)
    };
    if let (true, Some(last)) = (board.truncated, board.leases.last()) {
        let prefix_arg = if prefix.is_empty() {
            String::new()
        } else {
            format!("{} ", shell_word(prefix))
        };
        text.push_str(&format!(
            "more leases match: baton board {prefix_arg}--start-after {}\n",
            shell_word(&last.key)
        ));
    }
    Rendered::new(format, board, text, Verdict::Ok)
}

/// `baton check`: a token that is not current exits 3.
pub fn check(key: &str, token: u64, check: &TokenCheck, format: OutputFormat) -> Rendered {
    let holder = match &check.lease {
        Some(lease) => format!("held by {} with token {}", lease.holder_name, lease.token),
        None => "the key is free".to_owned(),
    };
    let (text, verdict) = if check.current {
        (
            format!("token {token} is current for {key} ({holder})\n"),
            Verdict::Ok,
        )
    } else {
        (
            format!("token {token} is not current for {key}: {holder}; stand down\n"),
            Verdict::StandDown,
        )
    };
    Rendered::new(format, check, text, verdict)
}

/// `baton revoke`.
pub fn revoke(key: &str, revoked: Option<&LeaseInfo>, format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        revoked: Option<&'a LeaseInfo>,
    }
    let text = match revoked {
        Some(lease) => format!(
            "revoked {} from {} (token {})\n",
            lease.key, lease.holder_name, lease.token
        ),
        None => format!("{key} was already free\n"),
    };
    Rendered::new(format, Json { revoked }, text, Verdict::Ok)
}

/// The quarantine rules after `baton quarantine`.
pub fn quarantine_rules(
    rules: &std::collections::BTreeMap<String, std::time::Duration>,
    format: OutputFormat,
) -> Rendered {
    #[derive(Serialize)]
    struct Json {
        rules_ms: std::collections::BTreeMap<String, u64>,
    }
    let rules_ms = rules
        .iter()
        .map(|(p, d)| (p.clone(), u64::try_from(d.as_millis()).unwrap_or(u64::MAX)))
        .collect();
    let text = if rules.is_empty() {
        "no quarantine rules\n".to_string()
    } else {
        let mut text = String::from("quarantine after an involuntary expiry:\n");
        for (prefix, delay) in rules {
            text.push_str(&format!("  {prefix}*  {} s\n", delay.as_secs()));
        }
        text
    };
    Rendered::new(format, Json { rules_ms }, text, Verdict::Ok)
}

/// One row of `baton cluster status`: a node that answered, or one that did not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeRow {
    /// The address the node was asked at.
    pub addr: String,
    /// The node's id: its own answer, else the member list's, else unknown.
    pub id: Option<u64>,
    /// The node answered.
    pub reachable: bool,
    /// The node's status, when it answered.
    pub status: Option<ClusterStatus>,
    /// Why it did not answer.
    pub error: Option<String>,
}

/// `baton cluster status`: exits 4 when no node answered.
pub fn cluster_status(nodes: &[NodeRow], format: OutputFormat) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        nodes: &'a [NodeRow],
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|node| {
            let id = node.id.map_or("-".to_owned(), |id| id.to_string());
            match &node.status {
                Some(status) => vec![
                    id,
                    node.addr.clone(),
                    status.state.clone(),
                    status.leader_id.map_or("-".to_owned(), |id| id.to_string()),
                    status.term.to_string(),
                    status.applied_index.to_string(),
                    status.leases.to_string(),
                ],
                None => vec![
                    id,
                    node.addr.clone(),
                    "unreachable".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                ],
            }
        })
        .collect();
    let text = table::render(
        &["ID", "ADDR", "STATE", "LEADER", "TERM", "APPLIED", "LEASES"],
        &rows,
    );
    if nodes.iter().any(|n| n.reachable) {
        Rendered::new(format, Json { nodes }, text, Verdict::Ok)
    } else {
        Rendered {
            error_line: Some("no node answered; is the cluster running at --endpoints?".into()),
            ..Rendered::new(format, Json { nodes }, text, Verdict::Unavailable)
        }
    }
}

/// `baton run` when the key is held: one line naming the holder, nothing runs.
pub fn run_held(
    lease: &LeaseInfo,
    same_name_other_process: bool,
    assignment: Option<&AssignmentInfo>,
    format: OutputFormat,
) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        lease: &'a LeaseInfo,
        same_name_other_process: bool,
        assignment: Option<&'a AssignmentInfo>,
    }
    let json = Json {
        outcome: "held",
        lease,
        same_name_other_process,
        assignment,
    };
    let mut text = format!(
        "{} is held by {} (token {}) since {}, free {}; standing down\n",
        lease.key,
        lease.holder_name,
        lease.token,
        utc(lease.held_since_unix_ms),
        in_human(lease.remaining),
    );
    if let Some(assignment) = assignment {
        text.push_str(&assignment_line(
            assignment,
            Some(&lease.holder_name),
            false,
        ));
    }
    if same_name_other_process {
        text.push_str(&format!(
            "note: the holder has your name but is another process (client id {})\n",
            lease.holder_client_id
        ));
    }
    Rendered::new(format, json, text, Verdict::StandDown)
}

pub(crate) fn lease_table(leases: &[LeaseInfo]) -> String {
    let rows: Vec<Vec<String>> = leases
        .iter()
        .map(|lease| {
            vec![
                lease.key.clone(),
                lease.holder_name.clone(),
                lease.token.to_string(),
                in_human(lease.remaining),
                utc(lease.held_since_unix_ms),
            ]
        })
        .collect();
    table::render(&["KEY", "HOLDER", "TOKEN", "EXPIRES", "SINCE"], &rows)
}

/// The board: who holds each key and, beside it, who a dispatcher assigned it to.
fn board_table(board: &Board) -> String {
    let rows: Vec<Vec<String>> = board
        .leases
        .iter()
        .map(|lease| {
            let assigned = board
                .assignments
                .get(&lease.key)
                .map(|a| a.to.clone())
                .unwrap_or_else(|| "-".to_owned());
            vec![
                lease.key.clone(),
                lease.holder_name.clone(),
                assigned,
                lease.token.to_string(),
                in_human(lease.remaining),
                utc(lease.held_since_unix_ms),
            ]
        })
        .collect();
    table::render(
        &["KEY", "HELD BY", "ASSIGNED TO", "TOKEN", "EXPIRES", "SINCE"],
        &rows,
    )
}

pub(crate) fn grant_pairs(grant: &Grant, now: Instant) -> String {
    table::render_pairs(&[
        ("token", grant.lease.token.to_string()),
        ("ttl", human_duration(grant.lease.ttl)),
        (
            "safe deadline",
            in_human(grant.safe_deadline.saturating_duration_since(now)),
        ),
    ])
}

pub(crate) fn holder_pairs(lease: &LeaseInfo) -> String {
    table::render_pairs(&[
        ("holder", lease.holder_name.clone()),
        ("token", lease.token.to_string()),
        ("since", utc(lease.held_since_unix_ms)),
        ("free", in_human(lease.remaining)),
    ])
}

fn lost_text(key: &str, token: u64, current: Option<&LeaseInfo>) -> String {
    match current {
        Some(lease) => format!(
            "lost: token {token} is not current for {key}; it is held by {}; stand down\n{}",
            lease.holder_name,
            holder_pairs(lease)
        ),
        None => {
            format!("lost: token {token} is not current for {key}; the key is free; stand down\n")
        }
    }
}

/// Milliseconds from `now` until the grant's safe deadline; 0 once it has passed.
pub fn safe_deadline_in_ms(grant: &Grant, now: Instant) -> u64 {
    let left = grant.safe_deadline.saturating_duration_since(now);
    u64::try_from(left.as_millis()).unwrap_or(u64::MAX)
}

/// A duration for people: `850ms`, `12s`, `4m05s`, `2h03m`, `3d04h`; cut down (not rounded)
/// to the unit shown, so a deadline never reads later than it is.
pub fn human_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let s = ms / 1_000;
    if ms < 1_000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{s}s")
    } else if s < 3_600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600)
    }
}

/// A time to come for people: `in 12s`, or `now` when it has come.
pub fn in_human(duration: Duration) -> String {
    if duration.is_zero() {
        "now".to_owned()
    } else {
        format!("in {}", human_duration(duration))
    }
}

/// A leader wall-clock time as UTC, to the second; `-` when the node sent none.
pub fn utc(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "-".to_owned();
    }
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(unix_ms)).to_string()
}

/// Quotes a word for a suggested shell command when it needs it.
pub(crate) fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.:@+=,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::records::tests::assignment;
    use crate::cli::{bench, handoff, records, watch};
    use serde_json::json;

    fn lease() -> LeaseInfo {
        LeaseInfo {
            key: "tasks/evidence-42".into(),
            holder_name: "claude@host-a".into(),
            holder_client_id: "c0ffee".into(),
            token: 1234,
            ttl: Duration::from_secs(30),
            held_since_unix_ms: 1_700_000_000_000,
            renewed_at_unix_ms: 1_700_000_010_000,
            remaining: Duration::from_millis(12_345),
            basis: 1240,
        }
    }

    fn lease_json() -> serde_json::Value {
        json!({
            "key": "tasks/evidence-42",
            "holder_name": "claude@host-a",
            "holder_client_id": "c0ffee",
            "token": 1234,
            "ttl_ms": 30000,
            "held_since_unix_ms": 1_700_000_000_000u64,
            "renewed_at_unix_ms": 1_700_000_010_000u64,
            "remaining_ms": 12345,
            "basis": 1240
        })
    }

    fn grant(now: Instant) -> Grant {
        Grant {
            lease: lease(),
            already_held: false,
            revision: 1234,
            safe_deadline: now + Duration::from_millis(28_500),
            assignment: None,
        }
    }

    fn json_of(rendered: &Rendered) -> serde_json::Value {
        assert!(rendered.stdout.ends_with('\n'));
        assert_eq!(
            rendered.stdout.lines().count(),
            1,
            "one JSON object per line"
        );
        serde_json::from_str(&rendered.stdout).unwrap()
    }

    #[test]
    fn claim_granted_json_shape() {
        let now = Instant::now();
        let out = claim(&ClaimOutcome::Granted(grant(now)), OutputFormat::Json, now);
        assert_eq!(out.verdict, Verdict::Ok);
        assert_eq!(
            json_of(&out),
            json!({
                "outcome": "granted",
                "lease": lease_json(),
                "already_held": false,
                "revision": 1234,
                "safe_deadline_in_ms": 28500,
                "assignment": null
            })
        );
    }

    #[test]
    fn claim_held_json_shape_and_stand_down() {
        let held = ClaimOutcome::Held {
            lease: lease(),
            same_name_other_process: true,
            assignment: Some(assignment()),
        };
        let out = claim(&held, OutputFormat::Json, Instant::now());
        assert_eq!(out.verdict, Verdict::StandDown);
        assert_eq!(
            json_of(&out),
            json!({
                "outcome": "held",
                "lease": lease_json(),
                "same_name_other_process": true,
                "assignment": {
                    "to": "alice",
                    "by": "dispatcher",
                    "reason": "verify four evidence domains",
                    "assigned_at_unix_ms": 1_700_000_000_000u64,
                    "revision": 3
                }
            })
        );
    }

    #[test]
    fn claim_texts_show_the_assignment_and_that_it_reserves_nothing() {
        let now = Instant::now();
        let mut granted = grant(now);
        granted.assignment = Some(assignment());
        let text = claim(&ClaimOutcome::Granted(granted), OutputFormat::Table, now).stdout;
        assert!(
            text.ends_with(
                "assigned to alice by dispatcher: verify four evidence domains (an assignment \
                 reserves nothing: the key is yours; tell the dispatcher)\n"
            ),
            "{text}"
        );
        let held = ClaimOutcome::Held {
            lease: lease(),
            same_name_other_process: false,
            assignment: Some(assignment()),
        };
        let text = claim(&held, OutputFormat::Table, now).stdout;
        assert!(
            text.contains(
                "assigned to alice by dispatcher: verify four evidence domains (an assignment \
                 reserves nothing: claude@host-a holds the key)\n"
            ),
            "{text}"
        );
        // The assignee holding the key needs no aside.
        let mine = AssignmentInfo {
            to: "claude@host-a".into(),
            ..assignment()
        };
        assert_eq!(
            assignment_line(&mine, Some("claude@host-a"), true),
            "assigned to claude@host-a by dispatcher: verify four evidence domains\n"
        );
    }

    #[test]
    fn claim_held_text_names_holder_since_and_says_stand_down() {
        let held = ClaimOutcome::Held {
            lease: lease(),
            same_name_other_process: true,
            assignment: None,
        };
        let text = claim(&held, OutputFormat::Table, Instant::now()).stdout;
        assert!(text.contains("claude@host-a"), "{text}");
        assert!(text.contains("1234"), "{text}");
        assert!(text.contains("2023-11-14T22:13:20Z"), "{text}");
        assert!(text.contains("free    in 12s\n"), "{text}");
        assert!(text.contains("stand down"), "{text}");
        assert!(text.contains("another process"), "{text}");
    }

    #[test]
    fn claim_granted_text_shows_token_ttl_and_safe_deadline() {
        let now = Instant::now();
        let text = claim(&ClaimOutcome::Granted(grant(now)), OutputFormat::Table, now).stdout;
        assert!(text.starts_with("granted tasks/evidence-42 to claude@host-a\n"));
        assert!(text.contains("token          1234\n"), "{text}");
        assert!(text.contains("ttl            30s\n"), "{text}");
        assert!(text.contains("safe deadline  in 28s\n"), "{text}");
    }

    #[test]
    fn renew_json_shapes() {
        let now = Instant::now();
        let out = renew(
            "tasks/evidence-42",
            1234,
            &RenewOutcome::Renewed(grant(now)),
            OutputFormat::Json,
            now,
        );
        assert_eq!(out.verdict, Verdict::Ok);
        assert_eq!(
            json_of(&out),
            json!({
                "outcome": "renewed",
                "lease": lease_json(),
                "revision": 1234,
                "safe_deadline_in_ms": 28500
            })
        );
        let out = renew(
            "tasks/evidence-42",
            1000,
            &RenewOutcome::Lost { current: None },
            OutputFormat::Json,
            now,
        );
        assert_eq!(out.verdict, Verdict::StandDown);
        assert_eq!(json_of(&out), json!({"outcome": "lost", "current": null}));
    }

    #[test]
    fn release_json_shapes() {
        let out = release(
            "tasks/evidence-42",
            1234,
            &ReleaseOutcome::Released(lease()),
            OutputFormat::Json,
        );
        assert_eq!(out.verdict, Verdict::Ok);
        assert_eq!(
            json_of(&out),
            json!({"outcome": "released", "lease": lease_json()})
        );
        let out = release(
            "tasks/evidence-42",
            1000,
            &ReleaseOutcome::Lost {
                current: Some(lease()),
            },
            OutputFormat::Json,
        );
        assert_eq!(out.verdict, Verdict::StandDown);
        assert_eq!(
            json_of(&out),
            json!({"outcome": "lost", "current": lease_json()})
        );
    }

    fn view(lease: Option<LeaseInfo>, assigned_to: Option<AssignmentInfo>) -> RecordView {
        RecordView {
            key: "tasks/free".into(),
            record: baton_client::Record {
                assigned_to,
                ..baton_client::Record::default()
            },
            lease,
            revision: 9,
        }
    }

    #[test]
    fn probe_of_a_free_key_exits_ok_with_null_lease() {
        let out = probe(&view(None, None), OutputFormat::Json);
        assert_eq!(out.verdict, Verdict::Ok);
        assert_eq!(
            json_of(&out),
            json!({"lease": null, "revision": 9, "assignment": null})
        );
        let text = probe(&view(None, None), OutputFormat::Table);
        assert_eq!(text.stdout, "tasks/free is free\n");
    }

    #[test]
    fn probe_shows_the_holder_and_the_assignment_side_by_side() {
        let text = probe(
            &view(Some(lease()), Some(assignment())),
            OutputFormat::Table,
        )
        .stdout;
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("KEY"), "{text}");
        assert!(lines[1].contains("claude@host-a"), "{text}");
        assert_eq!(
            lines[2],
            "assigned to alice by dispatcher: verify four evidence domains (an assignment \
             reserves nothing: claude@host-a holds the key)"
        );
        let text = probe(&view(None, Some(assignment())), OutputFormat::Table).stdout;
        assert_eq!(
            text,
            "tasks/free is free\nassigned to alice by dispatcher: verify four evidence domains \
             (an assignment reserves nothing: alice must still claim it)\n"
        );
    }

    #[test]
    fn board_table_has_the_documented_columns() {
        let out = board(
            "tasks/",
            &Board {
                leases: vec![lease()],
                truncated: true,
                revision: 50,
                assignments: [(
                    "tasks/evidence-42".to_string(),
                    crate::cli::records::tests::assignment(),
                )]
                .into(),
            },
            OutputFormat::Table,
        );
        let mut lines = out.stdout.lines();
        assert_eq!(
            lines.next().unwrap(),
            "KEY                HELD BY        ASSIGNED TO  TOKEN  EXPIRES  SINCE"
        );
        let row = lines.next().unwrap();
        assert!(
            row.starts_with("tasks/evidence-42  claude@host-a  ") && row.contains("1234"),
            "{row}"
        );
        assert_eq!(
            lines.next().unwrap(),
            "more leases match: baton board tasks/ --start-after tasks/evidence-42"
        );
    }

    #[test]
    fn board_json_shape() {
        let out = board(
            "",
            &Board {
                leases: vec![lease()],
                truncated: false,
                revision: 50,
                assignments: Default::default(),
            },
            OutputFormat::Json,
        );
        assert_eq!(
            json_of(&out),
            json!({"leases": [lease_json()], "truncated": false, "revision": 50, "assignments": {}})
        );
    }

    #[test]
    fn check_of_a_stale_token_stands_down() {
        let stale = TokenCheck {
            current: false,
            lease: Some(lease()),
            revision: 60,
        };
        let out = check("tasks/evidence-42", 1000, &stale, OutputFormat::Json);
        assert_eq!(out.verdict, Verdict::StandDown);
        assert_eq!(
            json_of(&out),
            json!({"current": false, "lease": lease_json(), "revision": 60})
        );
        let current = TokenCheck {
            current: true,
            ..stale
        };
        let out = check("tasks/evidence-42", 1234, &current, OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::Ok);
        assert!(out.stdout.contains("is current"));
    }

    #[test]
    fn revoke_json_shape() {
        let out = revoke("tasks/evidence-42", None, OutputFormat::Json);
        assert_eq!(json_of(&out), json!({"revoked": null}));
        let lease = lease();
        let out = revoke("tasks/evidence-42", Some(&lease), OutputFormat::Json);
        assert_eq!(json_of(&out), json!({"revoked": lease_json()}));
    }

    fn status(node_id: u64, state: &str) -> ClusterStatus {
        ClusterStatus {
            endpoint: format!("127.0.0.1:700{node_id}"),
            node_id,
            cluster_name: "baton".into(),
            state: state.into(),
            leader_id: Some(1),
            leader_addr: Some("127.0.0.1:7001".into()),
            term: 3,
            last_log_index: 90,
            applied_index: 88,
            members: vec![],
            leases: 5,
        }
    }

    #[test]
    fn cluster_status_shows_unreachable_nodes() {
        let nodes = vec![
            NodeRow {
                addr: "127.0.0.1:7001".into(),
                id: Some(1),
                reachable: true,
                status: Some(status(1, "leader")),
                error: None,
            },
            NodeRow {
                addr: "127.0.0.1:7002".into(),
                id: Some(2),
                reachable: false,
                status: None,
                error: Some("connection refused".into()),
            },
        ];
        let out = cluster_status(&nodes, OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::Ok);
        let lines: Vec<Vec<&str>> = out
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            lines,
            [
                vec!["ID", "ADDR", "STATE", "LEADER", "TERM", "APPLIED", "LEASES"],
                vec!["1", "127.0.0.1:7001", "leader", "1", "3", "88", "5"],
                vec!["2", "127.0.0.1:7002", "unreachable", "-", "-", "-", "-"],
            ]
        );
        let json = json_of(&cluster_status(&nodes, OutputFormat::Json));
        assert_eq!(json["nodes"][0]["status"]["state"], "leader");
        assert_eq!(json["nodes"][1]["reachable"], false);
        assert_eq!(json["nodes"][1]["error"], "connection refused");
    }

    #[test]
    fn cluster_status_with_no_node_reachable_is_unavailable() {
        let nodes = vec![NodeRow {
            addr: "127.0.0.1:7001".into(),
            id: None,
            reachable: false,
            status: None,
            error: Some("refused".into()),
        }];
        assert_eq!(
            cluster_status(&nodes, OutputFormat::Table).verdict,
            Verdict::Unavailable
        );
    }

    #[test]
    fn human_durations_read_at_a_glance_and_never_round_up() {
        assert_eq!(human_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(human_duration(Duration::from_millis(12_345)), "12s");
        assert_eq!(human_duration(Duration::from_millis(59_999)), "59s");
        assert_eq!(human_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(human_duration(Duration::from_secs(7_380)), "2h03m");
        assert_eq!(
            human_duration(Duration::from_secs(2 * 86_400 + 3_600)),
            "2d01h"
        );
        assert_eq!(in_human(Duration::from_secs(12)), "in 12s");
        assert_eq!(in_human(Duration::ZERO), "now");
    }

    #[test]
    fn run_held_names_holder_token_since_and_when_it_frees() {
        let out = run_held(&lease(), false, None, OutputFormat::Table);
        assert_eq!(out.verdict, Verdict::StandDown);
        assert_eq!(
            out.stdout,
            "tasks/evidence-42 is held by claude@host-a (token 1234) since \
             2023-11-14T22:13:20Z, free in 12s; standing down\n"
        );
        let out = run_held(&lease(), true, None, OutputFormat::Json);
        assert_eq!(
            json_of(&out),
            json!({
                "outcome": "held",
                "lease": lease_json(),
                "same_name_other_process": true,
                "assignment": null
            })
        );
        let out = run_held(&lease(), false, Some(&assignment()), OutputFormat::Table);
        assert!(out.stdout.contains("assigned to alice"), "{}", out.stdout);
    }

    #[test]
    fn leader_time_prints_as_utc() {
        assert_eq!(utc(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc(0), "-");
    }

    #[test]
    fn safe_deadline_in_the_past_prints_as_zero() {
        let now = Instant::now();
        let mut grant = grant(now);
        grant.safe_deadline = now;
        assert_eq!(safe_deadline_in_ms(&grant, now + Duration::from_secs(1)), 0);
    }

    /// A JSON value with its leaves replaced by their type: two objects of one schema
    /// have the same shape.
    fn shape(value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match value {
            Value::Null => json!("null"),
            Value::Bool(_) => json!("bool"),
            Value::Number(_) => json!("number"),
            // Outcomes name the variant, so they are kept as they are.
            Value::String(_) => json!("string"),
            Value::Array(items) => Value::Array(items.iter().take(1).map(shape).collect()),
            Value::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(name, field)| {
                        let shaped = if name == "outcome" {
                            field.clone()
                        } else {
                            shape(field)
                        };
                        (name.clone(), shaped)
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn every_json_output_has_an_example_of_its_exact_shape_in_the_schema_doc() {
        let doc = include_str!("../../../docs/cli-json.md");
        let documented: Vec<serde_json::Value> = doc
            .split("```json\n")
            .skip(1)
            .map(|block| {
                let example = block.split("```").next().unwrap();
                shape(&serde_json::from_str(example).unwrap_or_else(|e| {
                    panic!("docs/cli-json.md example is not JSON ({e}): {example}")
                }))
            })
            .collect();
        let now = Instant::now();
        let held = ClaimOutcome::Held {
            lease: lease(),
            same_name_other_process: false,
            assignment: Some(assignment()),
        };
        let mut granted_assigned = grant(now);
        granted_assigned.assignment = Some(assignment());
        let record_view = RecordView {
            key: "tasks/x".into(),
            record: baton_client::Record {
                pending_offer: Some(handoff::tests::sample_offer()),
                ..records::tests::sample_record()
            },
            lease: Some(lease()),
            revision: 20,
        };
        let node = NodeRow {
            addr: "127.0.0.1:7001".into(),
            id: Some(1),
            reachable: true,
            status: Some(ClusterStatus {
                members: vec![baton_client::Member {
                    id: 1,
                    addr: "127.0.0.1:7001".into(),
                    voter: true,
                }],
                ..status(1, "leader")
            }),
            error: None,
        };
        let lost = || RenewOutcome::Lost {
            current: Some(lease()),
        };
        let f = OutputFormat::Json;
        let outputs = [
            claim(&ClaimOutcome::Granted(grant(now)), f, now),
            claim(&held, f, now),
            renew("k", 1, &RenewOutcome::Renewed(grant(now)), f, now),
            renew("k", 1, &lost(), f, now),
            release("k", 1, &ReleaseOutcome::Released(lease()), f),
            release(
                "k",
                1,
                &ReleaseOutcome::Lost {
                    current: Some(lease()),
                },
                f,
            ),
            claim(&ClaimOutcome::Granted(granted_assigned), f, now),
            probe(&view(Some(lease()), Some(assignment())), f),
            probe(&view(None, None), f),
            board(
                "",
                &Board {
                    leases: vec![lease()],
                    truncated: true,
                    revision: 1,
                    assignments: [("tasks/evidence-42".to_string(), assignment())].into(),
                },
                f,
            ),
            check(
                "k",
                1,
                &TokenCheck {
                    current: true,
                    lease: Some(lease()),
                    revision: 1,
                },
                f,
            ),
            revoke("k", Some(&lease()), f),
            run_held(&lease(), false, None, f),
            cluster_status(&[node], f),
            records::updated("tasks/x", &records::tests::sample_record(), f),
            records::refused(
                "tasks/x",
                &baton_client::Refusal {
                    reason: baton_client::RefusalReason::WrongSession,
                    key: "tasks/x".into(),
                    lease: Some(lease()),
                    client_id: "c-77".into(),
                    token: 9,
                    ..baton_client::Refusal::other("tasks/x is held by ...")
                },
                f,
            ),
            records::refused(
                "tasks/x",
                &baton_client::Refusal {
                    reason: baton_client::RefusalReason::NoOffer,
                    key: "tasks/x".into(),
                    ..baton_client::Refusal::other("tasks/x has no pending offer")
                },
                f,
            ),
            records::assigned("tasks/x", &records::tests::sample_record(), f),
            records::record(&record_view, f),
            records::history(&records::tests::sample_history(), false, f),
            handoff::offered(&handoff::tests::sample_offer(), f),
            handoff::accepted_output(&handoff::tests::sample_accepted(now), None, f, now),
            handoff::accepted_output(
                &handoff::tests::sample_accepted(now),
                Some(&handoff::tests::sample_verification()),
                f,
                now,
            ),
            handoff::declined("tasks/x", 13, f),
            handoff::cancelled("tasks/x", 9, 14, f),
            watch::rendered(&watch::tests::sample_event(true), f),
            watch::rendered(&watch::tests::sample_event(false), f),
            bench::rendered(&bench::tests::sample_report(), f),
            bench::rendered(&bench::tests::clean_report(), f),
        ];
        if std::env::var_os("BATON_PRINT_JSON_EXAMPLES").is_some() {
            for out in &outputs {
                print!("{}", out.stdout);
            }
        }
        for out in outputs {
            let shaped = shape(&json_of(&out));
            assert!(
                documented.contains(&shaped),
                "no example of this shape in docs/cli-json.md: {}",
                out.stdout
            );
        }
    }

    #[test]
    fn suggested_commands_quote_odd_words() {
        assert_eq!(shell_word("tasks/a-1"), "tasks/a-1");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
