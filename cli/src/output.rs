//! What each command prints, and what it means for the exit code.
//!
//! Every renderer takes the outcome and the output format and returns a [`Rendered`]: the
//! text for stdout and the [`Verdict`]. JSON output is one object per command with stable
//! snake_case fields; durations are integers in milliseconds with a `_ms` suffix.

use std::time::{Duration, Instant, UNIX_EPOCH};

use baton_client::{
    AssignmentInfo, ClaimOutcome, ClusterStatus, Grant, KeyHolders, LeaseInfo, RecordView,
    ReleaseOutcome, RenewOutcome, TokenCheck,
};
use serde::Serialize;

use super::args::OutputFormat;
use super::exit::Verdict;
use super::table;

pub use crate::board::board;

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
            #[serde(skip_serializing_if = "Option::is_none")]
            permits: Option<&'a KeyHolders>,
        },
        Held {
            lease: &'a LeaseInfo,
            same_name_other_process: bool,
            assignment: Option<&'a AssignmentInfo>,
            #[serde(skip_serializing_if = "Option::is_none")]
            permits: Option<&'a KeyHolders>,
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
                permits: grant.permits.as_deref(),
            };
            let mut headline =
                format!("granted {} to {}", grant.lease.key, grant.lease.holder_name);
            match &grant.permits {
                Some(p) if p.shared => headline.push_str(&format!(
                    ": shared ({} holding; only an exclusive holder may write its record)",
                    p.holders.len()
                )),
                Some(p) => headline.push_str(&format!(
                    ": one of {} permits ({} held, {} free)",
                    p.permits,
                    p.holders.len(),
                    p.free()
                )),
                None => {}
            }
            if grant.already_held {
                headline.push_str(" (already held by this client: same token, lease renewed)");
            }
            let mut text = format!("{headline}\n{}", grant_pairs(grant, now));
            if let Some(p) = &grant.permits {
                text.push_str(&holders_lines(p, Some(grant.lease.token)));
            }
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
            permits,
        } => {
            let json = Json::Held {
                lease,
                same_name_other_process: *same_name_other_process,
                assignment: assignment.as_ref(),
                permits: permits.as_ref(),
            };
            let mut text = match permits {
                Some(p) if p.shared => format!(
                    "held: {} is held shared ({} holding it); stand down (an exclusive claim \
                     needs it free; a shared one waits while a writer is in line or {} share it)\n{}",
                    lease.key,
                    p.holders.len(),
                    p.permits,
                    holders_lines(p, None)
                ),
                Some(p) if p.free() == 0 => format!(
                    "held: all {} permits of {} are held; stand down\nthe first frees in {} \
                     at the latest\n{}",
                    p.permits,
                    lease.key,
                    human_duration(lease.remaining),
                    holders_lines(p, None)
                ),
                // A free permit, but a plain claim needs them all free, or a claimant waits
                // in the key's line ahead of a permit claim.
                Some(p) => format!(
                    "held: {} of {} permits of {} are held, {} free, but a plain claim needs \
                     them all free and a permit claim waits behind the key's line; stand \
                     down\n{}",
                    p.holders.len(),
                    p.permits,
                    lease.key,
                    p.free(),
                    holders_lines(p, None)
                ),
                None => format!(
                    "held: {} is held by {}; stand down\n{}",
                    lease.key,
                    lease.holder_name,
                    holder_pairs(lease)
                ),
            };
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
        quarantine: Option<&'a baton_client::QuarantineView>,
        #[serde(skip_serializing_if = "Option::is_none")]
        line: Option<&'a baton_client::KeyLine>,
        #[serde(skip_serializing_if = "Option::is_none")]
        permits: Option<&'a KeyHolders>,
    }
    let assignment = view.record.assigned_to.as_ref();
    let mut text = match (&view.lease, &view.quarantine) {
        (Some(_), _) if view.permits.as_ref().is_some_and(|p| p.shared) => {
            let p = view.permits.as_ref().expect("checked");
            format!(
                "{} is held shared ({} holding it)\n{}",
                view.key,
                p.holders.len(),
                lease_table(&p.holders)
            )
        }
        (Some(_), _) if view.permits.is_some() => {
            let p = view.permits.as_ref().expect("checked");
            format!(
                "{} is held by {} of {} permits ({} free)\n{}",
                view.key,
                p.holders.len(),
                p.permits,
                p.free(),
                lease_table(&p.holders)
            )
        }
        (Some(lease), _) => lease_table(std::slice::from_ref(lease)),
        (None, Some(q)) => quarantine_line(&view.key, q),
        (None, None) => format!("{} is free\n", view.key),
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
    if let Some(line) = &view.line {
        text.push_str(&line_text(line));
    }
    let json = Json {
        lease: view.lease.as_ref(),
        revision: view.revision,
        assignment,
        quarantine: view.quarantine.as_ref(),
        line: view.line.as_ref(),
        permits: view.permits.as_ref(),
    };
    Rendered::new(format, json, text, Verdict::Ok)
}

/// Who waits in a key's line: how many, the head and how long it has waited, then the
/// next ones listed.
pub fn line_text(line: &baton_client::KeyLine) -> String {
    let Some(head) = line.first.first() else {
        return format!("{} waiting in line\n", line.waiters);
    };
    let mut text = format!(
        "{} waiting in line; next: {} (client {}), waiting {}\n",
        line.waiters,
        head.holder_name,
        head.holder_client_id,
        humantime::format_duration(std::time::Duration::from_secs(head.waited.as_secs()))
    );
    let rest: Vec<&str> = line.first[1..]
        .iter()
        .map(|w| w.holder_name.as_str())
        .collect();
    if !rest.is_empty() {
        let more = line.waiters.saturating_sub(line.first.len() as u64);
        let tail = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        text.push_str(&format!("  then: {}{tail}\n", rest.join(", ")));
    }
    text
}

/// A key no one holds that claims are refused for: when that ends.
pub fn quarantine_line(key: &str, q: &baton_client::QuarantineView) -> String {
    if q.revoked {
        return format!(
            "{key} was revoked: no one holds it, and claims are refused {} (revision {}: until \
             the revoked holder's lease would have expired)\n",
            for_another(q.remaining),
            q.revision
        );
    }
    format!(
        "{key} is quarantined: no one holds it, but claims are refused {} (its holder's \
         lease expired at revision {}; the rule's delay is {})\n",
        for_another(q.remaining),
        q.revision,
        humantime::format_duration(q.delay)
    )
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

/// `baton check`: a token that is not current exits 3.
pub fn check(key: &str, token: u64, check: &TokenCheck, format: OutputFormat) -> Rendered {
    let holder = match &check.lease {
        Some(lease) if check.shared && check.current => {
            format!("held shared, by {}", lease.holder_name)
        }
        Some(lease) if check.shared => format!(
            "held shared, the first by {} with token {}",
            lease.holder_name, lease.token
        ),
        Some(lease) if check.permits > 0 && check.current => format!(
            "one of {} permits, held by {}",
            check.permits, lease.holder_name
        ),
        Some(lease) if check.permits > 0 => format!(
            "held by permits (of {}), the first by {} with token {}",
            check.permits, lease.holder_name, lease.token
        ),
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
pub fn revoke(key: &str, answer: &baton_client::types::Revoked, format: OutputFormat) -> Rendered {
    let text = match &answer.revoked {
        Some(lease) if !answer.claimable_in.is_zero() => format!(
            "revoked {} from {} (token {}); claimable in {}s, once the revoked lease would \
             have expired (--now frees it at once)\n",
            lease.key,
            lease.holder_name,
            lease.token,
            answer.claimable_in.as_secs()
        ),
        Some(lease) => format!(
            "revoked {} from {} (token {}); claimable now\n",
            lease.key, lease.holder_name, lease.token
        ),
        None => format!("{key} was already free\n"),
    };
    Rendered::new(format, answer, text, Verdict::Ok)
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
    /// What kind of "did not answer", when it did not: unreachable, or it refused this
    /// client's credentials (a secured node that is up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub down: Option<NodeDown>,
}

/// Why a node of `baton cluster status` gave no status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeDown {
    /// No answer before the deadline (refused, timed out, no route).
    Unreachable,
    /// It is up, but refused this client's credentials (none given, or not ones it trusts).
    Unauthenticated,
    /// It is up and knew the client, but the client may not ask this.
    PermissionDenied,
}

impl NodeDown {
    /// The STATE column's word.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeDown::Unreachable => "unreachable",
            NodeDown::Unauthenticated => "unauthenticated",
            NodeDown::PermissionDenied => "denied",
        }
    }
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
                    node.down
                        .unwrap_or(NodeDown::Unreachable)
                        .as_str()
                        .to_owned(),
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

/// `baton run` when the lease was lost while the child ran (stderr already said so):
/// how it was lost, told apart in JSON (`loss.what`: revoked, handed_off, expired, ...).
pub fn run_lost(
    key: &str,
    token: u64,
    loss: &super::loss::Loss,
    killed: bool,
    format: OutputFormat,
) -> Rendered {
    #[derive(Serialize)]
    struct Json<'a> {
        outcome: &'static str,
        key: &'a str,
        token: u64,
        loss: &'a super::loss::Loss,
        /// The child outlived its grace period and was killed.
        killed: bool,
    }
    let json = Json {
        outcome: "lost",
        key,
        token,
        loss,
        killed,
    };
    Rendered::new(format, json, String::new(), Verdict::StandDown)
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

/// Every permit holder of a key, one line each (`mine`: the caller's own token, marked).
fn holders_lines(p: &KeyHolders, mine: Option<u64>) -> String {
    let mut text = String::new();
    let what = if p.shared { "shared" } else { "permit" };
    for l in &p.holders {
        let marker = if Some(l.token) == mine { " (you)" } else { "" };
        text.push_str(&format!(
            "  {what}: {} token {} since {} free {}{marker}\n",
            l.holder_name,
            l.token,
            utc(l.held_since_unix_ms),
            in_human(l.remaining)
        ));
    }
    text
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
/// How much longer something goes on: `for another 12s`, or `for a moment more` when the
/// reader's estimate has run out but the cluster has not said it ended.
pub fn for_another(duration: Duration) -> String {
    if duration.is_zero() {
        "for a moment more".to_owned()
    } else {
        format!("for another {}", human_duration(duration))
    }
}

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
#[path = "output_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "refusal_json_tests.rs"]
mod refusal_json_tests;
