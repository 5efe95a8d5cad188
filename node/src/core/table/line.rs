//! Waiting in line (data format 11): joining a key's line or renewing one's place, leaving
//! it, the leader dropping a place that lapsed, and handing a freed key on to the oldest
//! waiter in the entry that freed it. See `core::line`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::step::Step;
use super::{Effect, LeaseTable, Timer};
use crate::core::case::{Attribution, EventKind};
use crate::core::limits::{WAITERS_MAX, WAITERS_PER_KEY_MAX};
use crate::core::line::{InLine, Line, Waiter};
use crate::core::refusal::Refusal;
use crate::core::types::{Holder, Outcome};

impl LeaseTable {
    /// The line of `key`, oldest first (empty if no one waits).
    pub fn line(&self, key: &str) -> &Line {
        static NO_ONE: Line = Line::new();
        self.lines.get(key).unwrap_or(&NO_ONE)
    }

    /// Every key's line, in key order.
    pub fn lines(&self) -> &BTreeMap<Arc<str>, Line> {
        &self.lines
    }

    /// The lines of keys that start with `prefix`, after `start_after`, at most `limit`, in
    /// key order (a board page's range, as `board` walks the leases).
    pub fn lines_under<'a>(
        &'a self,
        prefix: &'a str,
        start_after: &'a str,
        limit: usize,
    ) -> impl Iterator<Item = (&'a str, &'a Line)> {
        self.lines
            .range::<str, _>(super::page_range(prefix, start_after))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, line)| (&**k, line))
    }

    /// How many wait in all lines.
    pub fn waiter_count(&self) -> usize {
        self.waiters
    }

    /// Puts back lines learned from disk or a snapshot (`store::SmState`).
    pub fn set_lines(&mut self, lines: BTreeMap<Arc<str>, Line>) {
        self.waiters = lines.values().map(Line::len).sum();
        self.lines = lines
            .into_iter()
            .filter(|(_, line)| !line.is_empty())
            .map(|(key, line)| (self.shared_key(&key), line))
            .collect();
    }

    /// Whether `client_id` waits in `key`'s line, and where (0: the head).
    fn place_of(&self, key: &str, client_id: &str) -> Option<usize> {
        self.lines
            .get(key)?
            .iter()
            .position(|w| *w.holder.client_id == *client_id)
    }
}

impl Step<'_> {
    /// `Op::Wait`: grants the key as a claim would if nothing blocks it; else joins the line
    /// or renews the session's place in it.
    pub(super) fn wait(&mut self, holder: &Holder, ttl_ms: u64) -> Outcome {
        let Some(blocked) = self.table.claim_blocked(self.key, holder, false) else {
            return self.claim(holder, ttl_ms, "");
        };
        let index = self.index;
        let line_len = self.table.line(self.key).len();
        let position = match self.table.place_of(self.key, &holder.client_id) {
            Some(at) => {
                let line = self.table.lines.get_mut(self.key).expect("in line");
                let waiter = &mut line[at];
                waiter.basis = index;
                waiter.ttl_ms = ttl_ms;
                waiter.holder.name = holder.name.clone();
                self.start_place(&holder.client_id, ttl_ms);
                at + 1
            }
            None => {
                if line_len >= WAITERS_PER_KEY_MAX || self.table.waiters >= WAITERS_MAX {
                    let whole_cluster = line_len < WAITERS_PER_KEY_MAX;
                    let (waiters, waiters_max) = match whole_cluster {
                        true => (self.table.waiters, WAITERS_MAX),
                        false => (line_len, WAITERS_PER_KEY_MAX),
                    };
                    return Self::refused(Refusal::LineFull {
                        key: self.key.to_owned(),
                        waiters: waiters as u64,
                        waiters_max: waiters_max as u64,
                        whole_cluster,
                    });
                }
                let waiter = Waiter {
                    holder: holder.clone(),
                    principal: self.cmd.sender.as_ref().and_then(|s| s.principal.clone()),
                    ttl_ms,
                    joined: index,
                    joined_unix_ms: self.now_unix_ms,
                    basis: index,
                };
                let key = self.table.shared_key(self.key);
                self.table.lines.entry(key).or_default().push_back(waiter);
                self.table.waiters += 1;
                self.start_place(&holder.client_id, ttl_ms);
                let actor = self.actor(&holder.name, None);
                let detail = format!("position {} behind {}", line_len + 1, blocker(&blocked));
                self.event(EventKind::Waited, actor, 0, detail);
                line_len + 1
            }
        };
        Outcome::InLine {
            place: InLine {
                key: self.key.to_owned(),
                position: position as u64,
                waiters: self.table.line(self.key).len() as u64,
                joined: self.table.line(self.key)[position - 1].joined,
                blocked,
            },
        }
    }

    /// `Op::LeaveLine`: the session leaves the line; says whether it was in it, and the
    /// lease it holds if the line granted it the key first.
    pub(super) fn leave_line(&mut self, holder: &Holder) -> Outcome {
        let was_waiting = match self.table.place_of(self.key, &holder.client_id) {
            Some(at) => {
                self.take_waiter(at);
                let actor = self.actor(&holder.name, None);
                self.event(EventKind::LeftLine, actor, 0, "left".to_owned());
                true
            }
            None => false,
        };
        let holds = self
            .lease()
            .filter(|l| l.holder.client_id == holder.client_id)
            .cloned();
        Outcome::LeftLine { was_waiting, holds }
    }

    /// `Op::DropWaiter`: ends a place whose countdown ran out on the leader, if that session
    /// still waits with that basis (else it renewed, left, or was granted the key).
    pub(super) fn drop_waiter(&mut self, client_id: &str, basis: u64) -> Outcome {
        let at = self
            .table
            .place_of(self.key, client_id)
            .filter(|at| self.table.line(self.key)[*at].basis == basis);
        let Some(at) = at else {
            return Outcome::DropWaiterIgnored;
        };
        let waiter = self.take_waiter(at);
        let detail = format!(
            "the place of {} (client {}) lapsed: not renewed within {} ms",
            waiter.holder.name, waiter.holder.client_id, waiter.ttl_ms
        );
        self.event(
            EventKind::LeftLine,
            (None, Attribution::Requester),
            0,
            detail,
        );
        Outcome::WaiterDropped
    }

    /// After an entry that may have freed the key (release, expiry, revoke, end of a
    /// quarantine): if the key is free and unquarantined, grants it to the oldest waiter,
    /// with this entry's revision as its token. Credited to the waiter, as it asked.
    pub(super) fn hand_on(&mut self) {
        let quarantined = self
            .table
            .case(self.key)
            .is_some_and(|c| c.quarantine.is_some());
        if self.table.is_held(self.key) || quarantined || self.table.line(self.key).is_empty() {
            return;
        }
        let waiter = self.take_waiter(0);
        let lease = self.grant(&waiter.holder, waiter.ttl_ms);
        let detail = format!(
            "from the line, waiting since revision {} ({} s)",
            waiter.joined,
            self.now_unix_ms.saturating_sub(waiter.joined_unix_ms) / 1000
        );
        self.event(
            EventKind::Claimed,
            (Some(waiter.actor()), Attribution::Requester),
            lease.token,
            detail,
        );
        // The waiter's session is told at once, on its endings stream if it asked for
        // grants: a hand-on costs it no watch and no further round trip.
        self.changes.endings.push(super::Ending {
            key: lease.key.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            kind: EventKind::Claimed,
            by: Some(waiter.actor()),
            reason: "granted from the line".to_owned(),
            successor: None,
            assignment: self.assignment(),
            revision: self.index,
            unix_ms: self.now_unix_ms,
        });
    }

    /// Takes `client_id` out of this key's line if it waits there: it was granted the key
    /// another way (a handoff it accepted), so the line must not hand it on to it again.
    pub(super) fn out_of_line(&mut self, client_id: &str) {
        if let Some(at) = self.table.place_of(self.key, client_id) {
            self.take_waiter(at);
        }
    }

    /// Removes the waiter at `at` of this key's line and stops its countdown.
    fn take_waiter(&mut self, at: usize) -> Waiter {
        let line = self.table.lines.get_mut(self.key).expect("in line");
        let waiter = line.remove(at).expect("a place in the line");
        if line.is_empty() {
            self.table.lines.remove(self.key);
        }
        self.table.waiters -= 1;
        let id = Waiter::countdown_id(self.key, &waiter.holder.client_id);
        self.changes.effects.push(Effect::Stop {
            timer: Timer::Waiter,
            key: Arc::from(id),
        });
        waiter
    }

    /// (Re)starts the countdown of `client_id`'s place in this key's line, from this entry.
    fn start_place(&mut self, client_id: &str, ttl_ms: u64) {
        self.changes.effects.push(Effect::Start {
            timer: Timer::Waiter,
            key: Arc::from(Waiter::countdown_id(self.key, client_id)),
            token: 0,
            basis: self.index,
            ms: ttl_ms,
        });
    }
}

/// What a waiter waits behind, for its event.
fn blocker(blocked: &crate::core::types::Blocked) -> String {
    match blocked {
        crate::core::types::Blocked::Held { lease, .. } => {
            format!("{} (token {})", lease.holder.name, lease.token)
        }
        crate::core::types::Blocked::Quarantined { revision, .. } => {
            format!("a quarantine (revision {revision})")
        }
        crate::core::types::Blocked::Holders {
            sharing, holders, ..
        } => match sharing {
            crate::core::Sharing::Permits(n) => format!("{} holders of {n} permits", holders.len()),
            crate::core::Sharing::Shared => format!("{} shared holders", holders.len()),
        },
    }
}
