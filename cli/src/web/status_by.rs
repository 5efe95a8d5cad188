//! Who set a key's status, and in which stint.
//!
//! The record keeps the status word alone, so that a new holder's row would show the
//! previous holder's `done` as if it were its own. The key's history says who changed it:
//! every status change is an `updated`, `released` (a final status) or `posted` event, with
//! its sender, the token of the stint it was made in, and the status it set, typed
//! (`Event::status_set`, filled by the node that answers: `node/src/core/case.rs`,
//! `Event::status_set`). The latest such event at or before the record's read is the one
//! that set the status shown. A node older than that field sets none, and the page then
//! says nothing of who set the status.

use baton_client::{History, RecordView};
use serde::Serialize;

/// Which stint a status was set in, seen from the key's holders now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StintOf {
    /// The stint of the key's current holder (of one of them, for permits).
    This,
    /// A stint that has ended: a previous holder's, or the current holder's earlier one.
    Previous,
    /// No stint: posted by a dispatcher while no one held the key.
    NoHolder,
}

/// The change that set the status shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusBy {
    /// The sender's holder name (empty when the event names no one).
    pub by: String,
    /// `updated`, `released` (a final status) or `posted`.
    pub kind: String,
    /// The token of the stint it was set in; 0 when posted with no one holding.
    pub token: u64,
    /// Revision of the change.
    pub revision: u64,
    /// The stint it was set in, seen from now.
    pub stint: StintOf,
}

/// What the history says of the status shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusSetting {
    /// The change that set it.
    Known(StatusBy),
    /// The change is older than the kept history (the oldest events were compacted away).
    BeforeHistory,
    /// No status, or the history does not say (it disagrees with the record read).
    Unknown,
}

/// Who set `view`'s status and in which stint, from `history` read after `view`.
pub fn status_setting(view: &RecordView, history: &History) -> StatusSetting {
    let status = view.record.status.as_str();
    if status.is_empty() {
        return StatusSetting::Unknown;
    }
    let latest = history
        .events
        .iter()
        .rev()
        .filter(|e| e.revision <= view.revision)
        .find_map(|e| e.status_set.as_deref().map(|new| (e, new)));
    let Some((event, new)) = latest else {
        return if history.dropped > 0 {
            StatusSetting::BeforeHistory
        } else {
            StatusSetting::Unknown
        };
    };
    if new != status {
        return StatusSetting::Unknown;
    }
    let current = view
        .permits
        .as_ref()
        .map(|p| p.holders.iter().map(|l| l.token).collect::<Vec<_>>())
        .or_else(|| view.lease.as_ref().map(|l| vec![l.token]))
        .unwrap_or_default();
    let stint = if event.token == 0 {
        StintOf::NoHolder
    } else if current.contains(&event.token) {
        StintOf::This
    } else {
        StintOf::Previous
    };
    StatusSetting::Known(StatusBy {
        by: event
            .actor
            .as_ref()
            .map(|a| a.name.clone())
            .unwrap_or_default(),
        kind: event.kind.clone(),
        token: event.token,
        revision: event.revision,
        stint,
    })
}

/// The attribution in words, as the page shows it under the status: "set by alice in a
/// previous stint (token 5)". `app.js` (`statusByText`) says the same.
pub fn status_by_text(by: &StatusBy) -> String {
    let verb = if by.kind == "posted" {
        "posted by"
    } else {
        "set by"
    };
    let who = if by.by.is_empty() {
        "someone"
    } else {
        by.by.as_str()
    };
    match by.stint {
        StintOf::This => format!("{verb} {who} in this stint (token {})", by.token),
        StintOf::Previous => format!("{verb} {who} in a previous stint (token {})", by.token),
        StintOf::NoHolder => format!("{verb} {who} with no one holding"),
    }
}

/// What the page says when the change is older than the kept history.
pub const BEFORE_HISTORY_TEXT: &str = "set before the kept history";

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::{ActorInfo, Event, LeaseInfo, Record};
    use std::time::Duration;

    /// An event of `kind` by `by` in the stint of `token`, that set the status `set` ("":
    /// none).
    fn event(revision: u64, kind: &str, by: &str, token: u64, set: &str) -> Event {
        Event {
            revision,
            key: "k".into(),
            kind: kind.into(),
            actor: Some(ActorInfo {
                name: by.into(),
                client_id: format!("cid-{by}"),
                principal: None,
            }),
            recorded_before_format_4: false,
            token,
            at_unix_ms: 1,
            detail: String::new(),
            status_set: Some(set.to_owned()).filter(|s| !s.is_empty()),
        }
    }

    fn lease(token: u64) -> LeaseInfo {
        LeaseInfo {
            key: "k".into(),
            holder_name: "bob".into(),
            holder_client_id: "cid-bob".into(),
            token,
            ttl: Duration::from_secs(60),
            held_since_unix_ms: 1,
            renewed_at_unix_ms: 1,
            remaining: Duration::from_secs(60),
            basis: token,
        }
    }

    fn view(status: &str, revision: u64, lease: Option<LeaseInfo>) -> RecordView {
        RecordView {
            key: "k".into(),
            record: Record {
                status: status.into(),
                ..Record::default()
            },
            lease,
            revision,
            quarantine: None,
            line: None,
            permits: None,
        }
    }

    fn history(events: Vec<Event>, dropped: u64) -> History {
        History {
            key: "k".into(),
            revision: events.last().map(|e| e.revision).unwrap_or(0),
            events,
            dropped,
        }
    }

    #[test]
    fn a_status_a_previous_holder_set_is_attributed_to_it_and_its_stint() {
        let h = history(
            vec![
                event(5, "claimed", "alice", 5, ""),
                event(6, "updated", "alice", 5, "done"),
                event(7, "released", "alice", 5, ""),
                event(9, "claimed", "bob", 9, ""),
                event(10, "updated", "bob", 9, ""),
            ],
            0,
        );
        let got = status_setting(&view("done", 10, Some(lease(9))), &h);
        let StatusSetting::Known(by) = got else {
            panic!("{got:?}")
        };
        assert_eq!(
            (by.by.as_str(), by.token, by.stint),
            ("alice", 5, StintOf::Previous)
        );
        assert_eq!(
            status_by_text(&by),
            "set by alice in a previous stint (token 5)"
        );
    }

    #[test]
    fn the_holders_own_status_is_of_this_stint_and_a_final_status_of_its_release() {
        let h = history(
            vec![
                event(5, "claimed", "alice", 5, ""),
                event(8, "released", "alice", 5, "done"),
                event(9, "claimed", "bob", 9, ""),
                event(11, "updated", "bob", 9, "in_progress"),
            ],
            0,
        );
        let StatusSetting::Known(by) = status_setting(&view("in_progress", 11, Some(lease(9))), &h)
        else {
            panic!()
        };
        assert_eq!((by.by.as_str(), by.stint), ("bob", StintOf::This));
        assert_eq!(status_by_text(&by), "set by bob in this stint (token 9)");
        // Read before bob's update: the record says done, set by alice's release.
        let StatusSetting::Known(by) = status_setting(&view("done", 9, Some(lease(9))), &h) else {
            panic!()
        };
        assert_eq!((by.by.as_str(), by.kind.as_str()), ("alice", "released"));
    }

    #[test]
    fn a_post_with_no_one_holding_says_so() {
        let h = history(vec![event(3, "posted", "dispatch", 0, "open")], 0);
        let StatusSetting::Known(by) = status_setting(&view("open", 3, None), &h) else {
            panic!()
        };
        assert_eq!(
            status_by_text(&by),
            "posted by dispatch with no one holding"
        );
    }

    #[test]
    fn a_node_that_says_no_status_set_gets_no_attribution() {
        // From a node older than `status_set`: no event says it set the status.
        let h = history(
            vec![
                event(2, "claimed", "alice", 2, ""),
                event(3, "updated", "alice", 2, ""),
            ],
            0,
        );
        assert_eq!(
            status_setting(&view("blocked", 3, Some(lease(2))), &h),
            StatusSetting::Unknown
        );
    }

    #[test]
    fn a_change_gone_from_the_kept_history_or_disagreeing_with_the_record_is_not_guessed() {
        let h = history(vec![event(900, "claimed", "bob", 900, "")], 4);
        assert_eq!(
            status_setting(&view("done", 900, Some(lease(900))), &h),
            StatusSetting::BeforeHistory
        );
        let h = history(vec![event(2, "updated", "alice", 1, "b")], 0);
        assert_eq!(
            status_setting(&view("c", 2, None), &h),
            StatusSetting::Unknown
        );
        assert_eq!(
            status_setting(&view("", 2, None), &h),
            StatusSetting::Unknown
        );
    }
}
