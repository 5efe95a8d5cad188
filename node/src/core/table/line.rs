//! Waiting in line (data format 11): joining a key's line or renewing one's place, leaving
//! it, the leader dropping a place that lapsed, and handing a freed key on to the oldest
//! waiter in the entry that freed it. See `core::line`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::step::Step;
use super::{Effect, LeaseTable, Timer};
use crate::core::case::{Attribution, EventKind};
use crate::core::limits::{PERMIT_HOLDERS_MAX, WAITERS_MAX, WAITERS_PER_KEY_MAX};
use crate::core::line::{InLine, Line, Waiter};
use crate::core::permits::Sharing;
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

    /// What each waiter for a permit or a share waits for, by its place's countdown id
    /// (`Waiter::countdown_id`): how the state keeps it (`store::sm_state`).
    pub fn waiting_for(&self) -> BTreeMap<String, Sharing> {
        let mut found = BTreeMap::new();
        for (key, line) in &self.lines {
            for w in line {
                if let Some(sharing) = w.sharing {
                    found.insert(Waiter::countdown_id(key, &w.holder.client_id), sharing);
                }
            }
        }
        found
    }

    /// Puts back what waiters for permits or shares wait for (`waiting_for`), after their
    /// lines (`set_lines`).
    pub fn set_waiting_for(&mut self, waiting_for: &BTreeMap<String, Sharing>) {
        for (key, line) in self.lines.iter_mut() {
            for w in line.iter_mut() {
                let id = Waiter::countdown_id(key, &w.holder.client_id);
                w.sharing = waiting_for.get(&id).copied();
            }
        }
    }

    /// Whether `client_id` waits in `key`'s line, and where (0: the head).
    pub(super) fn place_of(&self, key: &str, client_id: &str) -> Option<usize> {
        self.lines
            .get(key)?
            .iter()
            .position(|w| *w.holder.client_id == *client_id)
    }
}

impl Step<'_> {
    /// `Op::Wait` (`sharing` `None`) and `Op::WaitPermit`: grants the key (or a permit of
    /// it, a share) as a claim would if nothing blocks it; else joins the line or renews the
    /// session's place in it.
    pub(super) fn wait(
        &mut self,
        holder: &Holder,
        ttl_ms: u64,
        sharing: Option<Sharing>,
    ) -> Outcome {
        let blocked = match sharing {
            None => self.table.claim_blocked(self.key, holder, false),
            Some(sharing) => match self.table.permit_blocked(self.key, holder, sharing) {
                Ok(blocked) => blocked,
                Err(refusal) => return Self::refused(refusal),
            },
        };
        let Some(blocked) = blocked else {
            return match sharing {
                None => self.claim(holder, ttl_ms, ""),
                Some(sharing) => self.claim_permit(holder, ttl_ms, sharing),
            };
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
                    sharing,
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
        let permit = self.table.holders(self.key).and_then(|h| {
            let at = h.position_of_session(&holder.client_id)?;
            Some(&h.leases[at])
        });
        let holds = self
            .lease()
            .or(permit)
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

    /// After an entry that may have freed the key or a permit of it (release, expiry,
    /// revoke, end of a quarantine, a waiter ahead leaving): if the head of the line can be
    /// granted what it waits for (the key, free and unquarantined; or a permit, free, of the
    /// sharing it waits for), grants it, with this entry's revision as its token. Credited
    /// to the waiter, as it asked. One grant per entry (tokens are revisions): if the next
    /// waiter could be granted too, a countdown of no time asks the leader for an
    /// `Op::HandOn`, which grants it in an entry of its own.
    pub(super) fn hand_on(&mut self) {
        let Some(sharing) = self.grantable_head() else {
            return;
        };
        let waiter = self.take_waiter(0);
        let lease = match sharing {
            None => self.grant(&waiter.holder, waiter.ttl_ms),
            Some(sharing) => {
                let lease = self.new_lease(&waiter.holder, waiter.ttl_ms);
                self.set_permit(sharing, lease.clone());
                lease
            }
        };
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
        if self.grantable_head().is_some() {
            self.changes.effects.push(Effect::Start {
                timer: Timer::Waiter,
                key: Arc::from(Waiter::hand_on_id(self.key)),
                token: 0,
                basis: self.index,
                ms: 0,
            });
        }
    }

    /// `Op::HandOn`: the nudge's countdown is done with, on every node; then the head is
    /// handed on to as after any write that frees room.
    pub(super) fn hand_on_nudged(&mut self) -> Outcome {
        self.changes.effects.push(Effect::Stop {
            timer: Timer::Waiter,
            key: Arc::from(Waiter::hand_on_id(self.key)),
        });
        self.hand_on();
        Outcome::HandOnDone
    }

    /// What the head of this key's line waits for, if it can be granted it now: `Some(None)`
    /// the key alone, `Some(Some(sharing))` a permit or a share. A head whose session holds
    /// a permit of the key already (granted another way) leaves the line here.
    fn grantable_head(&mut self) -> Option<Option<Sharing>> {
        let quarantined = self
            .table
            .case(self.key)
            .is_some_and(|c| c.quarantine.is_some());
        if quarantined {
            return None;
        }
        loop {
            let head = self.table.line(self.key).front()?;
            let Some(sharing) = head.sharing else {
                return (!self.table.is_held(self.key)).then_some(None);
            };
            if self.table.lease(self.key).is_some() {
                return None;
            }
            let Some(held) = self.table.holders(self.key) else {
                return Some(Some(sharing));
            };
            if held.position_of_session(&head.holder.client_id).is_some() {
                self.take_waiter(0);
                continue;
            }
            let room = held.sharing == sharing
                && held.free() > 0
                && self.table.permit_holders < PERMIT_HOLDERS_MAX;
            return room.then_some(Some(sharing));
        }
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
