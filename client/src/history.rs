//! A key's history, and the ownership *stints* read out of it.
//!
//! The cluster keeps, per key, an append-only list of events (bounded: the oldest are
//! compacted away and counted). A stint is one holder's unbroken ownership under one token,
//! from the claim or accepted handoff that started it to the release, expiry, revocation or
//! accepted handoff that ended it, with the record updates it made: it answers "who wrote
//! this, and did they hold the key when they did?" ("three authors, zero owners" is what a
//! record without stints looks like).

use serde::Serialize;

use crate::types::ActorInfo;

/// The event kinds the cluster records, as they appear in [`Event::kind`].
pub mod kind {
    /// A claim granted the key: starts a stint.
    pub const CLAIMED: &str = "claimed";
    /// The holder released the key: ends its stint.
    pub const RELEASED: &str = "released";
    /// The leader expired the lease: ends its stint.
    pub const EXPIRED: &str = "expired";
    /// An operator revoked the lease: ends its stint.
    pub const REVOKED: &str = "revoked";
    /// The holder offered the key to someone.
    pub const OFFERED: &str = "offered";
    /// The addressee took the key: ends the giver's stint and starts the taker's.
    pub const ACCEPTED: &str = "accepted";
    /// The addressee declined the offer.
    pub const DECLINED: &str = "declined";
    /// The holder withdrew its offer.
    pub const CANCELLED: &str = "cancelled";
    /// The offer ran out unanswered.
    pub const LAPSED: &str = "lapsed";
    /// A dispatcher assigned the key (routing metadata: belongs to no stint).
    pub const ASSIGNED: &str = "assigned";
    /// A dispatcher cleared the assignment (data format 5).
    pub const UNASSIGNED: &str = "unassigned";
    /// The holder changed the record.
    pub const UPDATED: &str = "updated";
}

/// One event in a key's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Revision of the entry that produced the event.
    pub revision: u64,
    /// The key.
    pub key: String,
    /// One of [`kind`]; a newer cluster may add kinds, which [`History::stints`] skips.
    pub kind: String,
    /// Who really did it: the session, holder name and principal of the request; `None`
    /// for the leader's own entries (expired, lapsed).
    pub actor: Option<ActorInfo>,
    /// Recorded before data format 4 and kept as it was: for a write made with a token, the
    /// actor is the lease holder, not necessarily who sent it, and has no principal.
    pub recorded_before_format_4: bool,
    /// The token of the stint the event belongs to; for `accepted`, the taker's new token.
    pub token: u64,
    /// The proposing leader's wall-clock time; for people only.
    pub at_unix_ms: u64,
    /// A line for people, e.g. `status in_progress -> done; fields set: pr`.
    pub detail: String,
    /// The status the event set on the key's record (`updated`, `released` with a final
    /// status, `posted`), typed: read it here, never out of [`Event::detail`]. `None` when
    /// it set none, or when the node that answered is older than this field.
    pub status_set: Option<String>,
}

/// A key's history as one read saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct History {
    /// The key.
    pub key: String,
    /// Events, oldest first.
    pub events: Vec<Event>,
    /// Older events compacted away before the first one here.
    pub dropped: u64,
    /// Revision the answer reflects (of the last applied write).
    pub revision: u64,
}

/// One holder's unbroken ownership of a key under one token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stint {
    /// The holder's name; empty when the history does not say (a stint whose start was
    /// compacted away and whose kept events name no holder).
    pub holder_name: String,
    /// The holder process's client id; empty when unknown.
    pub holder_client_id: String,
    /// The stint's fencing token.
    pub token: u64,
    /// Revision of the claim or acceptance that started the stint; `0` when it was
    /// compacted away (then [`Stint::start_compacted`] is set).
    pub from_revision: u64,
    /// Leader's wall-clock time of the start; `0` when unknown.
    pub from_unix_ms: u64,
    /// The stint started before the oldest event kept: its start is unknown.
    pub start_compacted: bool,
    /// Revision of the event that ended the stint; `None` while it lasts.
    pub until_revision: Option<u64>,
    /// Leader's wall-clock time of the end; `None` while it lasts.
    pub until_unix_ms: Option<u64>,
    /// `released`, `expired`, `revoked` or `accepted` (handed off). `None` while the stint
    /// lasts, or (with `until_revision` set) when the history does not say how it ended.
    pub ended_by: Option<String>,
    /// The detail of the ending event, e.g. `renewed 12 times`; empty if none.
    pub end_detail: String,
    /// The record updates made with the stint's token, oldest first.
    pub updates: Vec<Event>,
    /// Offers made during the stint and how each ended short of acceptance (offered,
    /// declined, cancelled, lapsed), oldest first.
    pub handoff_events: Vec<Event>,
}

impl Stint {
    /// The stint is still going on: its holder holds the key (as of the history's read).
    pub fn is_open(&self) -> bool {
        self.until_revision.is_none()
    }

    fn starting_at(event: &Event) -> Stint {
        let (holder_name, holder_client_id) = match &event.actor {
            Some(actor) => (actor.name.clone(), actor.client_id.clone()),
            None => (String::new(), String::new()),
        };
        Stint {
            holder_name,
            holder_client_id,
            token: event.token,
            from_revision: event.revision,
            from_unix_ms: event.at_unix_ms,
            start_compacted: false,
            until_revision: None,
            until_unix_ms: None,
            ended_by: None,
            end_detail: String::new(),
            updates: Vec::new(),
            handoff_events: Vec::new(),
        }
    }

    /// A stint known only from an event in its middle or at its end.
    fn compacted_start(token: u64) -> Stint {
        Stint {
            holder_name: String::new(),
            holder_client_id: String::new(),
            token,
            from_revision: 0,
            from_unix_ms: 0,
            start_compacted: true,
            until_revision: None,
            until_unix_ms: None,
            ended_by: None,
            end_detail: String::new(),
            updates: Vec::new(),
            handoff_events: Vec::new(),
        }
    }

    fn end(&mut self, event: &Event, ended_by: Option<&str>) {
        self.until_revision = Some(event.revision);
        self.until_unix_ms = Some(event.at_unix_ms);
        self.ended_by = ended_by.map(str::to_owned);
        if ended_by.is_some() {
            self.end_detail = event.detail.clone();
        }
    }
}

impl History {
    /// The ownership stints, oldest first, each with the updates and offers made under its
    /// token. Pure: reads only [`History::events`].
    ///
    /// A `claimed` or `accepted` event starts a stint; `released`, `expired`, `revoked` and
    /// `accepted` end one. A claim with the open stint's token (the holder claiming again)
    /// changes nothing. An event whose token is not the open stint's belongs to a stint whose
    /// start was compacted away: that stint is opened with [`Stint::start_compacted`] set
    /// and its holder taken from the first of its events the holder made. `assigned` events
    /// belong to no stint, and unknown kinds are skipped.
    pub fn stints(&self) -> Vec<Stint> {
        let mut stints: Vec<Stint> = Vec::new();
        for event in &self.events {
            match event.kind.as_str() {
                kind::CLAIMED => {
                    if let Some(open) = open_stint(&mut stints) {
                        if open.token == event.token {
                            continue;
                        }
                        // A new grant while a stint looked open: its end is not recorded.
                        open.end(event, None);
                    }
                    stints.push(Stint::starting_at(event));
                }
                kind::ACCEPTED => {
                    if let Some(open) = open_stint(&mut stints) {
                        open.end(event, Some(kind::ACCEPTED));
                    }
                    stints.push(Stint::starting_at(event));
                }
                kind::RELEASED | kind::EXPIRED | kind::REVOKED => {
                    let stint = stint_of(&mut stints, event);
                    stint.end(event, Some(event.kind.as_str()));
                }
                kind::UPDATED => stint_of(&mut stints, event).updates.push(event.clone()),
                kind::OFFERED | kind::DECLINED | kind::CANCELLED | kind::LAPSED => {
                    stint_of(&mut stints, event)
                        .handoff_events
                        .push(event.clone());
                }
                _ => {}
            }
        }
        stints
    }

    /// The assignments and their clearings, oldest first: who dispatchers wanted, next to
    /// who held the key.
    pub fn assignments(&self) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(|e| e.kind == kind::ASSIGNED || e.kind == kind::UNASSIGNED)
    }
}

/// The last stint, if it is still open.
fn open_stint(stints: &mut [Stint]) -> Option<&mut Stint> {
    stints.last_mut().filter(|s| s.is_open())
}

/// The open stint `event` belongs to (same token); otherwise ends the open stint, if any,
/// and opens one whose start was compacted away.
fn stint_of<'a>(stints: &'a mut Vec<Stint>, event: &Event) -> &'a mut Stint {
    let belongs = open_stint(stints).is_some_and(|open| open.token == event.token);
    if !belongs {
        if let Some(open) = open_stint(stints) {
            open.end(event, None);
        }
        stints.push(Stint::compacted_start(event.token));
    }
    let stint = stints.last_mut().expect("a stint was just found or pushed");
    // Events the holder itself made name it; `declined` names the addressee, and the
    // leader's and operators' events name no holder.
    let by_holder = matches!(
        event.kind.as_str(),
        kind::UPDATED | kind::OFFERED | kind::CANCELLED | kind::RELEASED
    );
    if stint.holder_name.is_empty() && by_holder {
        if let Some(actor) = &event.actor {
            stint.holder_name = actor.name.clone();
            stint.holder_client_id = actor.client_id.clone();
        }
    }
    stint
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(revision: u64, kind: &str, actor: Option<&str>, token: u64, detail: &str) -> Event {
        Event {
            revision,
            key: "tasks/x".into(),
            kind: kind.into(),
            actor: actor.map(|name| crate::ActorInfo {
                name: name.into(),
                client_id: format!("{name}-id"),
                principal: None,
            }),
            token,
            at_unix_ms: 1_700_000_000_000 + revision * 1_000,
            detail: detail.into(),
            recorded_before_format_4: false,
            status_set: None,
        }
    }

    fn history(events: Vec<Event>) -> History {
        History {
            key: "tasks/x".into(),
            events,
            dropped: 0,
            revision: 100,
        }
    }

    /// `(holder, token, from, until, ended_by, update revisions)` of each stint.
    type Summary = (String, u64, u64, Option<u64>, Option<String>, Vec<u64>);

    fn summary(stints: &[Stint]) -> Vec<Summary> {
        stints
            .iter()
            .map(|s| {
                (
                    s.holder_name.clone(),
                    s.token,
                    s.from_revision,
                    s.until_revision,
                    s.ended_by.clone(),
                    s.updates.iter().map(|u| u.revision).collect(),
                )
            })
            .collect()
    }

    fn row(
        holder: &str,
        token: u64,
        from: u64,
        until: Option<u64>,
        ended_by: Option<&str>,
        updates: &[u64],
    ) -> Summary {
        (
            holder.into(),
            token,
            from,
            until,
            ended_by.map(str::to_owned),
            updates.to_vec(),
        )
    }

    #[test]
    fn each_update_is_attributed_to_the_stint_of_its_token() {
        let h = history(vec![
            event(3, kind::CLAIMED, Some("claude@a"), 3, ""),
            event(
                4,
                kind::UPDATED,
                Some("claude@a"),
                3,
                "status -> in_progress",
            ),
            event(6, kind::RELEASED, Some("claude@a"), 3, "renewed 2 times"),
            event(7, kind::CLAIMED, Some("codex@b"), 7, ""),
            event(8, kind::UPDATED, Some("codex@b"), 7, "summary"),
            event(
                9,
                kind::UPDATED,
                Some("codex@b"),
                7,
                "status in_progress -> done",
            ),
            event(12, kind::EXPIRED, None, 7, ""),
        ]);
        let stints = h.stints();
        assert_eq!(
            summary(&stints),
            [
                row("claude@a", 3, 3, Some(6), Some("released"), &[4]),
                row("codex@b", 7, 7, Some(12), Some("expired"), &[8, 9]),
            ]
        );
        assert_eq!(stints[0].end_detail, "renewed 2 times");
        assert_eq!(stints[0].holder_client_id, "claude@a-id");
        assert_eq!(stints[0].from_unix_ms, 1_700_000_003_000);
        assert_eq!(stints[0].until_unix_ms, Some(1_700_000_006_000));
        assert!(!stints[1].is_open());
    }

    #[test]
    fn accepted_handoff_ends_the_givers_stint_and_starts_the_takers() {
        let h = history(vec![
            event(3, kind::CLAIMED, Some("claude@a"), 3, ""),
            event(4, kind::OFFERED, Some("claude@a"), 3, "to bob"),
            event(5, kind::DECLINED, Some("bob"), 3, ""),
            event(6, kind::OFFERED, Some("claude@a"), 3, "to bob"),
            event(8, kind::ACCEPTED, Some("bob"), 8, "from claude@a (token 3)"),
            event(9, kind::UPDATED, Some("bob"), 8, "status -> verified"),
        ]);
        let stints = h.stints();
        assert_eq!(
            summary(&stints),
            [
                row("claude@a", 3, 3, Some(8), Some("accepted"), &[]),
                row("bob", 8, 8, None, None, &[9]),
            ]
        );
        let handoffs: Vec<&str> = stints[0]
            .handoff_events
            .iter()
            .map(|e| e.kind.as_str())
            .collect();
        assert_eq!(handoffs, ["offered", "declined", "offered"]);
        assert!(stints[1].is_open());
        assert_eq!(stints[0].end_detail, "from claude@a (token 3)");
    }

    #[test]
    fn a_stint_whose_start_was_compacted_takes_its_holder_from_its_own_events() {
        let mut h = history(vec![
            event(40, kind::LAPSED, None, 31, ""),
            event(41, kind::UPDATED, Some("claude@a"), 31, "fields set: pr"),
            event(44, kind::REVOKED, Some("ops"), 31, "agent crashed"),
            event(45, kind::CLAIMED, Some("codex@b"), 45, ""),
        ]);
        h.dropped = 17;
        let stints = h.stints();
        assert_eq!(
            summary(&stints),
            [
                row("claude@a", 31, 0, Some(44), Some("revoked"), &[41]),
                row("codex@b", 45, 45, None, None, &[]),
            ]
        );
        assert!(stints[0].start_compacted && !stints[1].start_compacted);
        assert_eq!(stints[0].from_unix_ms, 0);
        assert_eq!(stints[0].end_detail, "agent crashed");
    }

    #[test]
    fn reclaim_by_the_holder_keeps_the_stint_and_assignments_belong_to_none() {
        let h = history(vec![
            event(2, kind::ASSIGNED, Some("dispatcher"), 0, "to alice: go"),
            event(3, kind::CLAIMED, Some("bob"), 3, ""),
            event(4, kind::CLAIMED, Some("bob"), 3, "already held"),
            event(5, kind::UPDATED, Some("bob"), 3, ""),
            event(6, kind::ASSIGNED, Some("dispatcher"), 0, "to carol"),
            event(7, kind::UPDATED, Some("bob"), 3, ""),
            event(8, "a-kind-from-a-newer-cluster", None, 3, ""),
            event(
                9,
                kind::UNASSIGNED,
                Some("lead"),
                3,
                "was to carol by dispatcher",
            ),
        ]);
        assert_eq!(
            summary(&h.stints()),
            [row("bob", 3, 3, None, None, &[5, 7])]
        );
        let assigned: Vec<u64> = h.assignments().map(|e| e.revision).collect();
        assert_eq!(assigned, [2, 6, 9]);
    }

    #[test]
    fn an_unrecorded_end_closes_the_stint_where_the_next_one_begins() {
        let h = history(vec![
            event(3, kind::CLAIMED, Some("a"), 3, ""),
            event(9, kind::CLAIMED, Some("b"), 9, ""),
            event(10, kind::UPDATED, Some("c"), 10, ""),
        ]);
        assert_eq!(
            summary(&h.stints()),
            [
                row("a", 3, 3, Some(9), None, &[]),
                row("b", 9, 9, Some(10), None, &[]),
                row("c", 10, 0, None, None, &[10]),
            ]
        );
    }

    #[test]
    fn empty_history_has_no_stints() {
        assert!(history(vec![]).stints().is_empty());
    }
}
