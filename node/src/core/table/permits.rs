//! Permits (data format 12, `core::permits`): claiming one of a key's N permits, and the
//! ends of one permit (renewal, release, expiry, revoke), each holder on its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::step::Step;
use super::{Effect, LeaseTable, Timer};
use crate::core::case::{EventKind, Quarantine};
use crate::core::limits::PERMIT_HOLDERS_MAX;
use crate::core::permits::{countdown_id, Holders, Sharing};
use crate::core::refusal::Refusal;
use crate::core::types::{Actor, Blocked, Holder, Lease, Outcome};

impl LeaseTable {
    /// The permit holders of `key`, if permits hold it.
    pub fn holders(&self, key: &str) -> Option<&Holders> {
        self.holders.get(key).map(|h| &**h)
    }

    /// Every key held by permits, with its holders, in key order.
    pub fn all_holders(&self) -> &BTreeMap<Arc<str>, Box<Holders>> {
        &self.holders
    }

    /// Keys held by permits that start with `prefix`, after `start_after`, at most `limit`,
    /// in key order (a board page's range, as `board` walks the leases).
    pub fn holders_under<'a>(
        &'a self,
        prefix: &'a str,
        start_after: &'a str,
        limit: usize,
    ) -> impl Iterator<Item = (&'a str, &'a Holders)> {
        self.holders
            .range::<str, _>(super::page_range(prefix, start_after))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, h)| (&**k, &**h))
    }

    /// How many permits are held across the cluster.
    pub fn permit_holder_count(&self) -> usize {
        self.permit_holders
    }

    /// Puts back permit holders learned from disk or a snapshot (`store::SmState`).
    pub fn set_holders(&mut self, holders: BTreeMap<Arc<str>, Holders>) {
        self.holders = holders
            .into_iter()
            .filter(|(_, h)| !h.leases.is_empty())
            .map(|(key, mut h)| {
                let key = self.shared_key(&key);
                for lease in &mut h.leases {
                    lease.key = key.clone();
                }
                (key, Box::new(h))
            })
            .collect();
        self.permit_holders = self.holders.values().map(|h| h.leases.len()).sum();
    }

    /// Whether anyone holds `key`: its exclusive holder or a permit's.
    pub fn is_held(&self, key: &str) -> bool {
        self.leases.contains_key(key) || self.holders.contains_key(key)
    }

    /// Why `holder` cannot be granted one of `sharing`'s permits of `key` now (`Ok(None)`:
    /// it can, or it holds one already); a mismatch of N is a refusal.
    pub(crate) fn permit_blocked(
        &self,
        key: &str,
        holder: &Holder,
        sharing: Sharing,
    ) -> Result<Option<Blocked>, Refusal> {
        let case = self.cases.get(key);
        let assignment = || case.and_then(|c| c.record.assigned_to.as_deref().cloned());
        if let Some(q) = case.and_then(|c| c.quarantine.as_ref()) {
            return Ok(Some(Blocked::Quarantined {
                key: key.to_owned(),
                revision: q.revision,
                delay_ms: q.delay_ms,
            }));
        }
        if let Some(lease) = self.lease(key) {
            return Ok(Some(Blocked::Held {
                same_name_other_process: lease.holder.name == holder.name,
                lease: lease.clone(),
                assignment: assignment(),
            }));
        }
        let Some(held) = self.holders(key) else {
            return Ok(None);
        };
        if held.sharing != sharing {
            return Err(Refusal::PermitsMismatch {
                key: key.to_owned(),
                held: held.sharing,
                asked: sharing,
                holders: held.leases.clone(),
            });
        }
        // A session that holds a permit is renewed; else a free permit, with no one in line
        // ahead (an exclusive claimant would wait forever behind a stream of permits, and
        // waiters for permits are served in the order they came).
        let mine = held.position_of_session(&holder.client_id).is_some();
        let ahead = match self.place_of(key, &holder.client_id) {
            Some(at) => at > 0,
            None => !self.line(key).is_empty(),
        };
        let free = held.free() > 0 && !ahead;
        Ok((!mine && !free).then(|| Blocked::Holders {
            key: key.to_owned(),
            sharing: held.sharing,
            holders: held.leases.clone(),
            assignment: assignment(),
        }))
    }

    /// The lease of `key` whose token is `token`, if `session` holds it: the exclusive
    /// lease's or a permit's; otherwise the refusal, with the facts. A format-3 command is
    /// bound by its token alone, as that format was.
    pub(crate) fn held_by(
        &self,
        key: &str,
        token: u64,
        session: &str,
        format_3: bool,
    ) -> Result<Lease, Refusal> {
        let held = self.holders(key);
        let found = match (self.lease(key), held) {
            (Some(l), _) if l.token == token => Some(l),
            (_, Some(h)) => h.position_of_token(token).map(|at| &h.leases[at]),
            _ => None,
        };
        match found {
            Some(l) if format_3 || l.holder.client_id == session => Ok(l.clone()),
            Some(l) => Err(Refusal::WrongSession {
                lease: Box::new(l.clone()),
                client_id: session.to_owned(),
            }),
            None => Err(Refusal::StaleToken {
                key: key.to_owned(),
                token,
                current: self
                    .lease(key)
                    .or_else(|| held.and_then(|h| h.leases.first()))
                    .cloned()
                    .map(Box::new),
            }),
        }
    }
}

impl Step<'_> {
    /// Whether permits hold this key (then `token`'s lease is one of them, not exclusive).
    pub(super) fn by_permits(&self) -> Option<Sharing> {
        self.table.holders(self.key).map(|h| h.sharing)
    }

    /// The refusal of a write only an exclusive holder may make, if permits hold the key.
    pub(super) fn not_exclusive(&self, token: u64) -> Option<Refusal> {
        self.by_permits().map(|sharing| Refusal::NotExclusive {
            key: self.key.to_owned(),
            token,
            sharing,
        })
    }

    /// `Op::ClaimPermit`.
    pub(super) fn claim_permit(
        &mut self,
        holder: &Holder,
        ttl_ms: u64,
        sharing: Sharing,
    ) -> Outcome {
        match self.table.permit_blocked(self.key, holder, sharing) {
            Err(refusal) => return Self::refused(refusal),
            Ok(Some(blocked)) => return blocked.into_outcome(),
            Ok(None) => {}
        }
        let assignment = self.assignment();
        let mine = self.table.holders(self.key).and_then(|h| {
            let at = h.position_of_session(&holder.client_id)?;
            Some(h.leases[at].clone())
        });
        let (lease, already_held) = match mine {
            // As a claim of its own lease: the same token, renewed, the TTL never shrinks.
            Some(mut lease) => {
                lease.basis = self.index;
                lease.renewals += 1;
                lease.ttl_ms = lease.ttl_ms.max(ttl_ms);
                lease.renewed_unix_ms = self.now_unix_ms;
                lease.holder.name = holder.name.clone();
                self.set_permit(sharing, lease.clone());
                (lease, true)
            }
            None => {
                if self.table.permit_holders >= PERMIT_HOLDERS_MAX {
                    return Self::refused(Refusal::HolderLimit {
                        key: self.key.to_owned(),
                        holders: self.table.permit_holders as u64,
                        holders_max: PERMIT_HOLDERS_MAX as u64,
                    });
                }
                let lease = self.new_lease(holder, ttl_ms);
                self.set_permit(sharing, lease.clone());
                // A waiter at the head of the line claims the permit it waited for.
                self.out_of_line(&holder.client_id);
                let held = self.table.holders(self.key).expect("just set").leases.len();
                let detail = match sharing {
                    Sharing::Permits(n) => format!("permit {held} of {n}"),
                    Sharing::Shared => format!("shared, holder {held}"),
                };
                let actor = self.actor(&holder.name, Some(holder));
                self.event(EventKind::Claimed, actor, self.index, detail);
                (lease, false)
            }
        };
        Outcome::GrantedPermit {
            lease,
            already_held,
            assignment,
            sharing,
            holders: self.table.holders(self.key).expect("held").leases.clone(),
        }
    }

    /// Stores a permit granted or renewed by this entry (a new one after the others, in
    /// order of token): its countdown starts now.
    pub(super) fn set_permit(&mut self, sharing: Sharing, lease: Lease) {
        debug_assert_eq!(
            lease.basis, self.index,
            "a permit set by this entry counts from it"
        );
        self.changes.effects.push(Effect::Start {
            timer: Timer::Lease,
            key: Arc::from(countdown_id(self.key, lease.token)),
            token: lease.token,
            basis: lease.basis,
            ms: lease.ttl_ms,
        });
        let key = self.table.shared_key(self.key);
        let held = self.table.holders.entry(key).or_insert_with(|| {
            Box::new(Holders {
                sharing,
                leases: Vec::new(),
            })
        });
        match held.position_of_token(lease.token) {
            Some(at) => held.leases[at] = lease,
            None => {
                held.leases.push(lease);
                self.table.permit_holders += 1;
            }
        }
    }

    /// Takes the permit of `token` off the key (the key is free once its last one is) and
    /// stops its countdown.
    fn take_permit(&mut self, token: u64) -> Option<Lease> {
        let held = self.table.holders.get_mut(self.key)?;
        let lease = held.leases.remove(held.position_of_token(token)?);
        if held.leases.is_empty() {
            self.table.holders.remove(self.key);
        }
        self.table.permit_holders -= 1;
        self.changes.effects.push(Effect::Stop {
            timer: Timer::Lease,
            key: Arc::from(countdown_id(self.key, token)),
        });
        Some(lease)
    }

    /// Ends the permit of `token` (release, expiry, revoke), tells its holder unless it
    /// released it, and records the event.
    pub(super) fn end_permit(
        &mut self,
        token: u64,
        kind: EventKind,
        actor: (Option<Actor>, crate::core::case::Attribution),
        detail: String,
    ) -> Option<Lease> {
        let lease = self.take_permit(token)?;
        if kind != EventKind::Released {
            self.tell_holder(&lease, kind, actor.0.clone(), detail.clone(), None);
        }
        let detail = match lease.renewals {
            0 => detail,
            n => super::step::join(&format!("renewed {n} times"), &detail),
        };
        self.event(kind, actor, lease.token, detail);
        Some(lease)
    }

    /// A revoke of a key held by permits: ends every permit; with `hold`, keeps the key
    /// unclaimable for the longest of their TTLs (each revoked holder's safe window).
    pub(super) fn revoke_permits(
        &mut self,
        actor: (Option<Actor>, crate::core::case::Attribution),
        reason: &str,
        hold: bool,
    ) -> Outcome {
        let tokens: Vec<u64> = self
            .table
            .holders(self.key)
            .map(|h| h.leases.iter().map(|l| l.token).collect())
            .unwrap_or_default();
        let mut ended = Vec::with_capacity(tokens.len());
        for token in tokens {
            let lease =
                self.end_permit(token, EventKind::Revoked, actor.clone(), reason.to_owned());
            ended.extend(lease);
        }
        if hold {
            let index = self.index;
            let delay_ms = ended.iter().map(|l| l.ttl_ms).max().unwrap_or(0);
            self.case_mut().quarantine = Some(Box::new(Quarantine {
                revision: index,
                delay_ms,
            }));
            self.start(Timer::Quarantine, index, index, delay_ms);
        }
        Outcome::Revoked {
            previous: ended.into_iter().next(),
        }
    }
}
