//! One entry's application to one key: a [`Step`] per operation, where the rules live (who
//! may act, what is refused with which facts, which events are appended and which timers
//! start or stop). The table in [`super`] picks the step, remembers the answer and checks
//! the invariants.

use super::{Changes, Effect, LeaseTable, Timer};
use crate::core::case::{
    Assignment, Attribution, CaseFile, Event, EventKind, HandoffNote, Offer, Quarantine,
    RecordPatch,
};
use crate::core::limits::{FIELDS_MAX, QUARANTINE_RULES_MAX, RECORD_BYTES_MAX};
use crate::core::refusal::Refusal;
use crate::core::types::{Actor, Holder, Lease, LogCommand, Name, Outcome};

/// One entry's application to one key: the table, the key, the entry's index and leader
/// time, and where to note what changed.
pub(super) struct Step<'a> {
    pub(super) table: &'a mut LeaseTable,
    pub(super) key: &'a str,
    pub(super) index: u64,
    pub(super) now_unix_ms: u64,
    /// The command: who sent it (its session and principal) decides who may act and is
    /// recorded as the actor.
    pub(super) cmd: &'a LogCommand,
    pub(super) changes: &'a mut Changes,
    /// Whether this step reached for the key's case file to change it: when it ends, the
    /// table's index of unfinished keys is brought up to date for the key.
    touched_case: bool,
}

impl Drop for Step<'_> {
    fn drop(&mut self) {
        if self.touched_case {
            self.table.sync_unfinished(self.key);
        }
    }
}

impl<'a> Step<'a> {
    /// The step of `cmd`, the command of entry `index`, on `key`.
    pub(super) fn new(
        table: &'a mut LeaseTable,
        key: &'a str,
        index: u64,
        cmd: &'a LogCommand,
        changes: &'a mut Changes,
    ) -> Step<'a> {
        Step {
            table,
            key,
            index,
            now_unix_ms: cmd.leader_unix_ms,
            cmd,
            changes,
            touched_case: false,
        }
    }

    pub(super) fn lease(&self) -> Option<&Lease> {
        self.table.leases.get(self.key).map(|l| &**l)
    }

    pub(super) fn assignment(&self) -> Option<Assignment> {
        self.table
            .cases
            .get(self.key)
            .and_then(|c| c.record.assigned_to.as_deref().cloned())
    }

    fn pending_offer(&self) -> Option<&Offer> {
        self.table
            .cases
            .get(self.key)
            .and_then(|c| c.offer.as_deref())
    }

    /// Stores a lease granted or renewed by this entry: its countdown starts now.
    fn set_lease(&mut self, lease: Lease) {
        debug_assert_eq!(
            lease.basis, self.index,
            "a lease set by this entry counts from it"
        );
        self.start(Timer::Lease, lease.token, lease.basis, lease.ttl_ms);
        self.table.leases.insert(lease.key.clone(), Box::new(lease));
    }

    pub(super) fn start(&mut self, timer: Timer, token: u64, basis: u64, ms: u64) {
        let key = self.table.shared_key(self.key);
        self.changes.effects.push(Effect::Start {
            timer,
            key,
            token,
            basis,
            ms,
        });
    }

    pub(super) fn stop(&mut self, timer: Timer) {
        let key = self.table.shared_key(self.key);
        self.changes.effects.push(Effect::Stop { timer, key });
    }

    /// A new lease for `holder` whose token is this entry's index: a claim of a free key or
    /// an accepted handoff.
    pub(super) fn grant(&mut self, holder: &Holder, ttl_ms: u64) -> Lease {
        let lease = self.new_lease(holder, ttl_ms);
        self.set_lease(lease.clone());
        lease
    }

    /// A lease for `holder` born in this entry: its index is the token and the basis.
    pub(super) fn new_lease(&self, holder: &Holder, ttl_ms: u64) -> Lease {
        Lease {
            key: self.table.shared_key(self.key),
            holder: holder.clone(),
            token: self.index,
            basis: self.index,
            renewals: 0,
            ttl_ms,
            since_unix_ms: self.now_unix_ms,
            renewed_unix_ms: self.now_unix_ms,
        }
    }

    fn take_lease(&mut self) -> Option<Lease> {
        let lease = self.table.leases.remove(self.key).map(|l| *l);
        if lease.is_some() {
            self.stop(Timer::Lease);
        }
        lease
    }

    pub(super) fn case_mut(&mut self) -> &mut CaseFile {
        self.touched_case = true;
        if !self.table.cases.contains_key(self.key) {
            let key = self.table.shared_key(self.key);
            self.table.cases.insert(key, Box::default());
        }
        self.table.cases.get_mut(self.key).expect("inserted above")
    }

    /// Who sent this entry's command, acting as holder name `name`. A format-3 command
    /// knows no sender: it is credited as that format did, to `lease_holder` (the holder of
    /// the lease it was made under), and marked so.
    pub(super) fn actor(
        &self,
        name: &Name,
        lease_holder: Option<&Holder>,
    ) -> (Option<Actor>, Attribution) {
        if self.cmd.is_format_3() {
            let actor = lease_holder.map(|h| Actor {
                name: h.name.clone(),
                client_id: h.client_id.clone(),
                principal: None,
            });
            return (actor, Attribution::RecordedBeforeFormat4);
        }
        let mut actor = self.cmd.actor(name);
        // Acting from the holder's own session (nearly always): share the holder's string.
        if let (Some(a), Some(h)) = (actor.as_mut(), lease_holder) {
            if a.client_id == h.client_id {
                a.client_id = h.client_id.clone();
            }
        }
        (actor, Attribution::Requester)
    }

    /// The session this request acts as ("" for the leader's own entries).
    fn session(&self) -> &str {
        self.cmd
            .sender
            .as_ref()
            .map_or("", |s| s.client_id.as_str())
    }

    /// The current lease, if `token` is its token and the request comes from its holder's
    /// session; otherwise the refusal, with the facts. A format-3 command is bound by its
    /// token alone, as that format was.
    fn held_by_sender(&self, token: u64) -> Result<Lease, Refusal> {
        self.table
            .held_by(self.key, token, self.session(), self.cmd.is_format_3())
    }

    /// Appends this entry's event to the key's history, credited to `actor`.
    pub(super) fn event(
        &mut self,
        kind: EventKind,
        (actor, attribution): (Option<Actor>, Attribution),
        token: u64,
        detail: String,
    ) {
        let event = Event {
            revision: self.index,
            kind,
            actor,
            attribution,
            token,
            unix_ms: self.now_unix_ms,
            detail,
        };
        let key = self.table.shared_key(self.key);
        self.changes.events.push((key, event.clone()));
        self.case_mut().history.push(event);
    }

    /// Notes that `lease` ended by this entry, for its holder's session.
    pub(super) fn tell_holder(
        &mut self,
        lease: &Lease,
        kind: EventKind,
        by: Option<Actor>,
        reason: String,
        successor: Option<(String, u64)>,
    ) {
        self.changes.endings.push(super::Ending {
            key: lease.key.clone(),
            holder: lease.holder.clone(),
            token: lease.token,
            kind,
            by,
            reason,
            successor,
            assignment: None,
            revision: self.index,
            unix_ms: self.now_unix_ms,
        });
    }

    /// Ends a pending offer, keeping its note on the record; says how it ended for people.
    fn end_offer(&mut self) -> Option<Offer> {
        let case = self.case_mut();
        let offer = *case.offer.take()?;
        case.last_note = Some(Box::new(offer.note.clone()));
        self.stop(Timer::Offer);
        Some(offer)
    }

    pub(super) fn refused(refusal: Refusal) -> Outcome {
        Outcome::Refused { refusal }
    }

    /// A claim; `how` is said in the event (`claim-next`'s prefix).
    pub(super) fn claim(&mut self, holder: &Holder, ttl_ms: u64, how: &str) -> Outcome {
        let format_3 = self.cmd.is_format_3();
        if let Some(refused) = self.table.claim_refused(self.key, holder, format_3) {
            return refused;
        }
        let assignment = self.assignment();
        match self.lease().cloned() {
            None => {
                let lease = self.grant(holder, ttl_ms);
                let detail = match &assignment {
                    Some(a) if a.to != holder.name => {
                        format!("assigned to {}, claimed by {}", a.to, holder.name)
                    }
                    _ => String::new(),
                };
                let actor = self.actor(&holder.name, Some(holder));
                self.event(EventKind::Claimed, actor, self.index, join(how, &detail));
                Outcome::Granted {
                    lease,
                    already_held: false,
                    assignment,
                }
            }
            // The same session under the same name claims again (it lost our answer, or it
            // restarted with its client id): it keeps its token and the lease is renewed.
            // Anything else was refused above, naming the holder (`claim_refused`).
            Some(mut lease) => {
                // The TTL never shrinks: another task of that process may be counting on
                // the longer one it was granted, and restarting the countdown later with a
                // TTL at least as long never ends it earlier.
                lease.basis = self.index;
                lease.renewals += 1;
                lease.ttl_ms = lease.ttl_ms.max(ttl_ms);
                lease.renewed_unix_ms = self.now_unix_ms;
                lease.holder.name = holder.name.clone();
                self.set_lease(lease.clone());
                Outcome::Granted {
                    lease,
                    already_held: true,
                    assignment,
                }
            }
        }
    }

    pub(super) fn renew(&mut self, token: u64) -> Outcome {
        match self.held_by_sender(token) {
            Ok(mut lease) => {
                lease.basis = self.index;
                lease.renewals += 1;
                lease.renewed_unix_ms = self.now_unix_ms;
                match self.by_permits() {
                    Some(sharing) => self.set_permit(sharing, lease.clone()),
                    None => self.set_lease(lease.clone()),
                }
                Outcome::Renewed { lease }
            }
            Err(Refusal::StaleToken { current, .. }) => Outcome::Lost {
                current: current.map(|l| *l),
            },
            Err(refusal) => Self::refused(refusal),
        }
    }

    /// Ends the current stint (release, expiry, revoke): frees the key, ends a pending offer
    /// (its note stays on the record) and records the event.
    fn end_stint(
        &mut self,
        kind: EventKind,
        actor: (Option<Actor>, Attribution),
        mut detail: String,
    ) -> Lease {
        let lease = self.take_lease().expect("the caller checked the lease");
        // The holder's own release is no news to it; every other end is told to its session.
        if kind != EventKind::Released {
            self.tell_holder(&lease, kind, actor.0.clone(), detail.clone(), None);
        }
        if lease.renewals > 0 {
            detail = join(&format!("renewed {} times", lease.renewals), &detail);
        }
        if let Some(offer) = self.end_offer() {
            detail = join(
                &detail,
                &format!(
                    "the offer to {} ended; its note stays on the record",
                    offer.to
                ),
            );
        }
        self.event(kind, actor, lease.token, detail);
        lease
    }

    pub(super) fn release(&mut self, token: u64, final_status: Option<&str>) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(Refusal::StaleToken { current, .. }) => {
                return Outcome::Lost {
                    current: current.map(|l| *l),
                }
            }
            Err(refusal) => return Self::refused(refusal),
        };
        if self.by_permits().is_some() {
            if final_status.is_some() {
                return Self::refused(self.not_exclusive(token).expect("held by permits"));
            }
            let actor = self.actor(&lease.holder.name, Some(&lease.holder));
            let lease = self.end_permit(token, EventKind::Released, actor, String::new());
            let lease = lease.expect("held_by_sender found it");
            return Outcome::Released { lease };
        }
        let mut detail = String::new();
        if let Some(status) = final_status {
            let patch = RecordPatch {
                status: Some(status.to_string()),
                ..RecordPatch::default()
            };
            let index = self.index;
            let record = &mut self.case_mut().record;
            detail = patch.apply_to(record);
            if !detail.is_empty() {
                record.updated_revision = index;
            }
        }
        let actor = self.actor(&lease.holder.name, Some(&lease.holder));
        let lease = self.end_stint(EventKind::Released, actor, detail);
        Outcome::Released { lease }
    }

    pub(super) fn expire(&mut self, token: u64, basis: u64) -> Outcome {
        let permit = self.table.holders(self.key).and_then(|h| {
            let at = h.position_of_token(token)?;
            Some(h.leases[at].basis)
        });
        let current = match permit {
            Some(permit_basis) => permit_basis == basis,
            None => self
                .lease()
                .is_some_and(|l| l.token == token && l.basis == basis),
        };
        match current {
            true => {
                // An involuntary end: a matching quarantine rule (the longest prefix) keeps
                // the key unclaimable for a while.
                let delay_ms = self
                    .table
                    .quarantine_rules
                    .iter()
                    .filter(|(prefix, _)| self.key.starts_with(prefix.as_str()))
                    .max_by_key(|(prefix, _)| prefix.len())
                    .map(|(_, delay)| *delay)
                    .unwrap_or(0);
                let detail = if delay_ms > 0 {
                    let index = self.index;
                    self.case_mut().quarantine = Some(Box::new(Quarantine {
                        revision: index,
                        delay_ms,
                    }));
                    self.start(Timer::Quarantine, index, index, delay_ms);
                    format!("quarantined for {} s", delay_ms / 1000)
                } else {
                    String::new()
                };
                let lease = match permit {
                    Some(_) => self
                        .end_permit(token, EventKind::Expired, LEADER, detail)
                        .expect("the permit is current"),
                    None => self.end_stint(EventKind::Expired, LEADER, detail),
                };
                Outcome::Expired { lease }
            }
            false => Outcome::ExpireIgnored,
        }
    }

    /// Ends the lease; with `hold`, keeps the key unclaimable for the lease's TTL from this
    /// apply, so that its revoked holder's safe window (which ends before its lease's own
    /// expiry would have) is over before anyone else is granted the key.
    pub(super) fn revoke(&mut self, reason: &str, hold: bool) -> Outcome {
        // An operator acts as no holder: the actor is its session and principal.
        let actor = self.actor(&Name::default(), None);
        if self.by_permits().is_some() {
            return self.revoke_permits(actor, reason, hold);
        }
        if self.lease().is_none() {
            self.event(
                EventKind::Revoked,
                actor,
                0,
                format!("(key was free) {reason}"),
            );
            return Outcome::Revoked { previous: None };
        }
        let lease = self.end_stint(EventKind::Revoked, actor, reason.to_string());
        if hold {
            let index = self.index;
            self.case_mut().quarantine = Some(Box::new(Quarantine {
                revision: index,
                delay_ms: lease.ttl_ms,
            }));
            self.start(Timer::Quarantine, index, index, lease.ttl_ms);
        }
        Outcome::Revoked {
            previous: Some(lease),
        }
    }

    /// The pending offer, if any, as the refusal of a write it freezes.
    fn frozen(&self) -> Option<Refusal> {
        self.pending_offer().map(|offer| Refusal::Frozen {
            key: self.key.to_owned(),
            offer_to: offer.to.clone(),
            offer_revision: offer.revision,
        })
    }

    pub(super) fn update(&mut self, token: u64, patch: &RecordPatch) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(refusal) => return Self::refused(refusal),
        };
        if let Some(refusal) = self.not_exclusive(token).or_else(|| self.frozen()) {
            return Self::refused(refusal);
        }
        let mut record = self
            .table
            .cases
            .get(self.key)
            .map(|c| c.record.clone())
            .unwrap_or_default();
        let detail = patch.apply_to(&mut record);
        if let Some(too_big) = over_limits(&record) {
            return too_big;
        }
        if !detail.is_empty() {
            record.updated_revision = self.index;
            self.case_mut().record = record.clone();
            let actor = self.actor(&lease.holder.name, Some(&lease.holder));
            self.event(EventKind::Updated, actor, lease.token, detail);
        }
        Outcome::Updated { record }
    }

    /// Puts a task on the board: a new case file with its record (status `open` unless the
    /// patch names one) and assignment; with `update`, patches an existing one instead
    /// (refused while an offer freezes it). A key that has a case file is refused without
    /// `update`. Credited to the sender, acting as `by`.
    pub(super) fn post(
        &mut self,
        patch: &RecordPatch,
        to: Option<&str>,
        by: &str,
        update: bool,
    ) -> Outcome {
        let existing = self.table.cases.get(self.key).map(|c| c.record.clone());
        let created = existing.is_none();
        if let (Some(record), false) = (&existing, update) {
            return Self::refused(Refusal::Exists {
                key: self.key.to_owned(),
                status: record.status.clone(),
                lease: self.lease().cloned().map(Box::new),
            });
        }
        if let Some(refusal) = self.frozen() {
            return Self::refused(refusal);
        }
        let mut record = existing.unwrap_or_default();
        let mut detail = patch.apply_to(&mut record);
        if created && record.status.is_empty() {
            record.status = "open".into();
            detail = join("status open", &detail);
        }
        if let Some(too_big) = over_limits(&record) {
            return too_big;
        }
        if !detail.is_empty() {
            record.updated_revision = self.index;
        }
        let reassigned = to.filter(|to| record.assigned_to.as_ref().is_none_or(|a| a.to != *to));
        if let Some(to) = reassigned {
            record.assigned_to = Some(Box::new(Assignment {
                to: to.to_string(),
                by: by.to_string(),
                reason: String::new(),
                unix_ms: self.now_unix_ms,
                revision: self.index,
            }));
            detail = join(&detail, &format!("assigned to {to}"));
        }
        if created || !detail.is_empty() {
            self.case_mut().record = record.clone();
            let token = self.lease().map(|l| l.token).unwrap_or(0);
            let actor = self.actor(&Name::from(by), None);
            self.event(EventKind::Posted, actor, token, detail);
        }
        Outcome::Posted { record, created }
    }

    pub(super) fn assign(&mut self, to: &str, by: &str, reason: &str) -> Outcome {
        let assignment = Assignment {
            to: to.to_string(),
            by: by.to_string(),
            reason: reason.to_string(),
            unix_ms: self.now_unix_ms,
            revision: self.index,
        };
        self.case_mut().record.assigned_to = Some(Box::new(assignment));
        let detail = join(&format!("to {to} by {by}"), reason);
        let token = self.lease().map(|l| l.token).unwrap_or(0);
        // Format 3 credited an assignment to no one.
        let actor = match self.cmd.is_format_3() {
            true => (None, Attribution::RecordedBeforeFormat4),
            false => self.actor(&Name::from(by), None),
        };
        self.event(EventKind::Assigned, actor, token, detail);
        let record = self.table.cases[self.key].record.clone();
        Outcome::Assigned { record }
    }

    /// Clears the assignment, recording who did and which it was. A key with none (or no
    /// key at all) is left as it is, with no event: clearing is idempotent.
    pub(super) fn unassign(&mut self, by: &str, reason: &str) -> Outcome {
        let Some(was) = self.assignment() else {
            let record = self
                .table
                .cases
                .get(self.key)
                .map(|c| c.record.clone())
                .unwrap_or_default();
            return Outcome::Assigned { record };
        };
        self.case_mut().record.assigned_to = None;
        let detail = join(&format!("was to {} by {}", was.to, was.by), reason);
        let token = self.lease().map(|l| l.token).unwrap_or(0);
        let actor = self.actor(&Name::from(by), None);
        self.event(EventKind::Unassigned, actor, token, detail);
        let record = self.table.cases[self.key].record.clone();
        Outcome::Assigned { record }
    }

    pub(super) fn offer_handoff(
        &mut self,
        token: u64,
        to: &str,
        note: &HandoffNote,
        offer_ttl_ms: u64,
    ) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(refusal) => return Self::refused(refusal),
        };
        if let Some(refusal) = self.not_exclusive(token) {
            return Self::refused(refusal);
        }
        if let Some(pending) = self.pending_offer() {
            return Self::refused(Refusal::OfferPending {
                key: self.key.to_owned(),
                offer_to: pending.to.clone(),
                offer_revision: pending.revision,
            });
        }
        if lease.holder.name == to {
            return Self::refused(Refusal::OfferToHolder {
                key: self.key.to_owned(),
                name: to.to_owned(),
            });
        }
        let offer = Offer {
            from: lease.holder.clone(),
            from_token: lease.token,
            to: to.to_string(),
            note: note.clone(),
            offer_ttl_ms,
            offered_unix_ms: self.now_unix_ms,
            revision: self.index,
        };
        self.case_mut().offer = Some(Box::new(offer.clone()));
        self.start(Timer::Offer, offer.from_token, offer.revision, offer_ttl_ms);
        let detail = format!("to {to}, lapses after {} s", offer_ttl_ms / 1000);
        let actor = self.actor(&lease.holder.name, Some(&lease.holder));
        self.event(EventKind::Offered, actor, lease.token, detail);
        Outcome::Offered { offer }
    }

    /// The pending offer, if `holder` is its addressee; otherwise the refusal.
    fn addressed_to(&self, holder: &Holder) -> Result<Offer, Refusal> {
        match self.pending_offer() {
            None => Err(Refusal::NoOffer {
                key: self.key.to_owned(),
            }),
            Some(o) if o.to != holder.name => Err(Refusal::NotAddressee {
                key: self.key.to_owned(),
                offer_to: o.to.clone(),
                name: holder.name.to_string(),
            }),
            Some(o) => Ok(o.clone()),
        }
    }

    pub(super) fn accept(&mut self, holder: &Holder, ttl_ms: u64) -> Outcome {
        let offer = match self.addressed_to(holder) {
            Ok(o) => o,
            Err(refusal) => return Self::refused(refusal),
        };
        // In one entry: the giver's token dies and the taker's is born. No gap, no overlap.
        let given = self.lease().cloned();
        let lease = self.grant(holder, ttl_ms);
        self.out_of_line(&holder.client_id);
        self.end_offer();
        let detail = format!("from {} (token {})", offer.from.name, offer.from_token);
        let actor = self.actor(&holder.name, Some(holder));
        if let Some(given) = given.filter(|g| g.token == offer.from_token) {
            let reason = format!("handed off to {} (token {})", holder.name, self.index);
            let successor = Some((holder.name.to_string(), self.index));
            self.tell_holder(
                &given,
                EventKind::Accepted,
                actor.0.clone(),
                reason,
                successor,
            );
        }
        self.event(EventKind::Accepted, actor, self.index, detail);
        Outcome::Accepted {
            lease,
            note: offer.note,
            from: offer.from,
        }
    }

    pub(super) fn decline(&mut self, holder: &Holder) -> Outcome {
        let offer = match self.addressed_to(holder) {
            Ok(o) => o,
            Err(refusal) => return Self::refused(refusal),
        };
        self.end_offer();
        let detail = format!("offer from {}", offer.from.name);
        let actor = self.actor(&holder.name, Some(holder));
        self.event(EventKind::Declined, actor, offer.from_token, detail);
        Outcome::Declined
    }

    pub(super) fn cancel(&mut self, token: u64) -> Outcome {
        let lease = match self.held_by_sender(token) {
            Ok(lease) => lease,
            Err(refusal) => return Self::refused(refusal),
        };
        let Some(offer) = self.end_offer() else {
            return Self::refused(Refusal::NoOffer {
                key: self.key.to_owned(),
            });
        };
        let detail = format!("offer to {}", offer.to);
        let actor = self.actor(&lease.holder.name, Some(&lease.holder));
        self.event(EventKind::Cancelled, actor, token, detail);
        Outcome::Cancelled
    }

    pub(super) fn set_quarantine(&mut self, prefix: &str, delay_ms: u64) -> Outcome {
        let rules = &mut self.table.quarantine_rules;
        if delay_ms == 0 {
            rules.remove(prefix);
        } else {
            if !rules.contains_key(prefix) && rules.len() >= QUARANTINE_RULES_MAX {
                return Outcome::Invalid {
                    message: format!(
                        "there are {QUARANTINE_RULES_MAX} quarantine rules already: remove one first"
                    ),
                };
            }
            rules.insert(prefix.to_string(), delay_ms);
        }
        Outcome::QuarantineRules {
            rules: self.table.quarantine_rules.clone(),
        }
    }

    pub(super) fn end_quarantine(&mut self, revision: u64) -> Outcome {
        let on = self
            .table
            .cases
            .get(self.key)
            .and_then(|c| c.quarantine.as_ref())
            .is_some_and(|q| q.revision == revision);
        if !on {
            return Outcome::QuarantineEndIgnored;
        }
        self.case_mut().quarantine = None;
        self.stop(Timer::Quarantine);
        Outcome::QuarantineEnded
    }

    pub(super) fn lapse(&mut self, offer_revision: u64) -> Outcome {
        match self.pending_offer() {
            Some(o) if o.revision == offer_revision => {
                let offer = self.end_offer().expect("checked above");
                let detail = format!(
                    "offer to {} lapsed; {} keeps the key",
                    offer.to, offer.from.name
                );
                self.event(EventKind::Lapsed, LEADER, offer.from_token, detail);
                Outcome::Lapsed
            }
            _ => Outcome::LapseIgnored,
        }
    }
}

/// The actor of the leader's own entries (expired, lapsed): no one sent them.
const LEADER: (Option<Actor>, Attribution) = (None, Attribution::Requester);

/// The refusal of a record a patch would take past its limits (`FIELDS_MAX`,
/// `RECORD_BYTES_MAX`), if it would.
fn over_limits(record: &crate::core::case::Record) -> Option<Outcome> {
    (record.fields.len() > FIELDS_MAX || record.size_bytes() > RECORD_BYTES_MAX).then(|| {
        Outcome::Invalid {
            message: format!(
                "the record would hold {} fields and {} bytes: the limits are {FIELDS_MAX} \
                 fields and {RECORD_BYTES_MAX} bytes",
                record.fields.len(),
                record.size_bytes()
            ),
        }
    })
}

/// Joins two detail phrases with "; ", skipping empty ones.
pub(super) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}; {b}"),
    }
}
