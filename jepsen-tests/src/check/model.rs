//! baton's per-key lease model for the WGL search ([`super::wgl`]).
//!
//! One key: who holds it (a client id; the holder's token is always the last token granted on
//! the key, because every grant replaces the holder), the last token, the lease's TTL and
//! earliest possible expiry, a pending offer and the record's list.
//!
//! Nondeterminism, kept as sets of states by the search:
//! - **Tokens** are revisions (one per write, cluster-wide): a grant's token is any value above the last one. An
//!   `info` grant's token is unknown, kept as a lower bound (`AtLeast`) and pinned down
//!   (`Exact`) when a later read, refusal or operation shows it. Token values are never
//!   enumerated.
//! - **Expiry** is a hidden step (holder and offer gone) allowed before an operation X only if
//!   `horizon(X) >= earliest_expiry`, where `earliest_expiry = inv(grant or latest renewal) +
//!   ttl / (1 + rho)`: the server counts from when it applied the request, which is after the
//!   client sent it, on a clock at most `rho` fast. `horizon(X)` is the search's bound on X's
//!   linearization point ([`Model::step`]): the earliest return among X and every operation
//!   linearized after it (each of them takes effect after X and before it returns). It is at
//!   most `X.ret`, so a long X (a claim retried for seconds) cannot hide an early expiry when a
//!   short operation that must follow it returned before the earliest expiry. Still lenient
//!   (X may have taken effect earlier still): it can miss a violation but never raise a false
//!   alarm. When X and everything after it are info operations (return +infinity), an expiry
//!   may always come first.
//! - **Offer lapse** likewise, after `inv(offer) + offer_ttl / (1 + rho)`.
//! - **A revoke's hold** ends likewise: a revoke without `now` frees the key but leaves it
//!   unclaimable for the revoked lease's TTL, counted by each node from its apply of the
//!   revoke, so no claim may be granted before `inv(revoke) + ttl / (1 + rho)`; the hidden
//!   step that ends the hold is allowed from then on. A revoke with `now` frees it at once.
//!
//! Semantics follow the state machine (`node/src/core/table.rs`): a claim by the holding
//! client keeps its token and renews with `ttl = max(old, new)`; an offer to the holder's own
//! name is refused; a pending offer freezes the record; releasing or expiring ends the offer;
//! a renew or release of a token that is not current is refused (`Lost`) with the lease as the
//! server sees it (`current`), which must be the model's holder, or none when the key is free.
//!
//! A read that came back `ok` with a record list that cannot be decoded (`Reply::Corrupt`)
//! shows a record nobody wrote: [`prepare`] reports it ([`Prepared::corrupt`]) instead of
//! handing it to the search, and the linearizability checker fails on it.

use std::collections::HashMap;

use super::wgl::{Model, Operation};
use crate::history::{Call, Elem, Kind, Op, Reply};

/// A token as far as the history shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tok {
    /// Known.
    Exact(u64),
    /// Granted by an operation whose reply was lost: some value `>=` this.
    AtLeast(u64),
}

impl Tok {
    /// The smallest value the token can have.
    fn lower(self) -> u64 {
        match self {
            Tok::Exact(t) | Tok::AtLeast(t) => t,
        }
    }

    /// The token pinned to `t`, if it can be `t`.
    fn pin(self, t: u64) -> Option<Tok> {
        match self {
            Tok::Exact(x) if x == t => Some(self),
            Tok::AtLeast(l) if t >= l => Some(Tok::Exact(t)),
            _ => None,
        }
    }

    /// A token known to be `t` (refusals are legal unless the token surely matches).
    fn is(self, t: u64) -> bool {
        self == Tok::Exact(t)
    }

    /// Whether a new grant may carry `t` (some value of this token is below `t`).
    fn below(self, t: u64) -> bool {
        self.lower() < t
    }

    /// The token of a grant whose reply was lost: anything above this one.
    fn successor(self) -> Tok {
        Tok::AtLeast(self.lower().saturating_add(1))
    }
}

/// One possible state of a key. Small and `Copy`: the list is an interned id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseState {
    /// The holding client (interned id); its token is `last`.
    pub holder: Option<u32>,
    /// The last token granted on the key (`Exact(0)` before any grant).
    pub last: Tok,
    /// The lease's TTL (0 when free, so free states compare equal).
    pub ttl_ms: u64,
    /// Earliest instant the lease may expire (0 when free).
    pub expiry_ns: u64,
    /// Pending offer: addressee's name (interned) and earliest lapse instant.
    pub offer: Option<(u32, u64)>,
    /// The record's list (interned id; 0 is the empty list).
    pub list: u32,
    /// A revoke holds the free key back: earliest instant a claim may be granted again (0:
    /// no hold).
    pub hold_ns: u64,
}

impl LeaseState {
    /// A fresh key: free, no token yet, empty list.
    pub fn initial() -> LeaseState {
        LeaseState {
            holder: None,
            last: Tok::Exact(0),
            ttl_ms: 0,
            expiry_ns: 0,
            offer: None,
            list: 0,
            hold_ns: 0,
        }
    }

    fn freed(self) -> LeaseState {
        LeaseState {
            holder: None,
            ttl_ms: 0,
            expiry_ns: 0,
            offer: None,
            ..self
        }
    }

    /// `(client, token)` can act: the client holds the key and the token can be the last.
    fn held_by(self, client: u32, token: u64) -> Option<LeaseState> {
        if self.holder != Some(client) {
            return None;
        }
        self.last.pin(token).map(|last| LeaseState { last, ..self })
    }

    /// `(client, token)` surely holds the key (so a refusal of it is illegal).
    fn surely_held_by(self, client: u32, token: u64) -> bool {
        self.holder == Some(client) && self.last.is(token)
    }
}

/// How a claim came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimRes {
    Granted {
        token: u64,
        already_held: bool,
    },
    /// Refused: held by this client (interned) with this token.
    Held {
        client: u32,
        token: u64,
    },
    /// No answer.
    Unknown,
}

/// How an accept came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptRes {
    Granted { token: u64 },
    Refused,
    Unknown,
}

/// How a revoke came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeRes {
    /// The lease with this token ended.
    Revoked {
        token: u64,
    },
    /// The key was free: nothing ended.
    Free,
    Unknown,
}

/// How an offer or write came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Res {
    Ok,
    /// `Refused`.
    Refused,
    Unknown,
}

/// How a renew or release came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostRes {
    Ok,
    /// `Lost`: the token is not current; the server's lease is `current` (holder client id
    /// interned, token), or the key is free.
    Lost {
        current: Option<(u32, u64)>,
    },
    Unknown,
}

/// An operation as the model sees it: ids interned, refusals that tell nothing dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    Claim {
        client: u32,
        ttl_ms: u64,
        res: ClaimRes,
    },
    Renew {
        client: u32,
        token: u64,
        res: LostRes,
    },
    Release {
        client: u32,
        token: u64,
        res: LostRes,
    },
    Offer {
        client: u32,
        token: u64,
        to: u32,
        /// Addressed to the offering worker's own name: always refused.
        to_self: bool,
        offer_ttl_ms: u64,
        res: Res,
    },
    Accept {
        client: u32,
        name: u32,
        ttl_ms: u64,
        res: AcceptRes,
    },
    /// An ok read: the holder `(client, token)` and the list, both exactly.
    Read {
        holder: Option<(u32, u64)>,
        list: u32,
    },
    Write {
        client: u32,
        token: u64,
        list: u32,
        res: Res,
    },
    /// A revoke of whatever lease the key has; `now` frees it without a hold.
    Revoke { now: bool, res: RevokeRes },
}

/// The model: the clock-rate bound `rho` turns TTLs into earliest expiries.
#[derive(Debug, Clone, Copy)]
pub struct LeaseModel {
    pub rho: f64,
}

impl LeaseModel {
    /// The shortest a TTL of `ms` can last on a server clock at most `rho` fast (rounded
    /// down: lenient).
    fn life_ns(&self, ms: u64) -> u64 {
        (ms as f64 * 1e6 / (1.0 + self.rho.max(0.0))).floor() as u64
    }

    /// A new lease for `client` granted by an operation invoked at `inv`.
    fn grant(&self, s: LeaseState, client: u32, last: Tok, ttl_ms: u64, inv: u64) -> LeaseState {
        LeaseState {
            holder: Some(client),
            last,
            ttl_ms,
            expiry_ns: inv.saturating_add(self.life_ns(ttl_ms)),
            offer: None,
            list: s.list,
            hold_ns: 0,
        }
    }

    /// The lease revoked by an operation invoked at `inv`: free, with the hold unless `now`.
    fn revoke(&self, s: LeaseState, now: bool, inv: u64) -> LeaseState {
        let hold_ns = if now {
            0
        } else {
            inv.saturating_add(self.life_ns(s.ttl_ms)).max(1)
        };
        LeaseState {
            hold_ns,
            ..s.freed()
        }
    }

    /// The lease renewed from `inv` with `ttl_ms`.
    fn renew(&self, s: LeaseState, ttl_ms: u64, inv: u64) -> LeaseState {
        LeaseState {
            ttl_ms,
            expiry_ns: inv.saturating_add(self.life_ns(ttl_ms)),
            ..s
        }
    }

    /// The operation itself, on one state (hidden steps already taken).
    fn apply(&self, s: LeaseState, o: &Operation<LeaseOp>, out: &mut Vec<LeaseState>) {
        let inv = o.inv_ns;
        match o.op {
            LeaseOp::Claim {
                client,
                ttl_ms,
                res,
            } => match res {
                ClaimRes::Granted {
                    token,
                    already_held: false,
                } => {
                    if s.holder.is_none() && s.hold_ns == 0 && s.last.below(token) {
                        out.push(self.grant(s, client, Tok::Exact(token), ttl_ms, inv));
                    }
                }
                ClaimRes::Granted {
                    token,
                    already_held: true,
                } => {
                    if let Some(s) = s.held_by(client, token) {
                        out.push(self.renew(s, s.ttl_ms.max(ttl_ms), inv));
                    }
                }
                ClaimRes::Held {
                    client: h,
                    token: ht,
                } => {
                    if h != client {
                        out.extend(s.held_by(h, ht));
                    }
                }
                ClaimRes::Unknown => match s.holder {
                    None if s.hold_ns != 0 => {}
                    None => out.push(self.grant(s, client, s.last.successor(), ttl_ms, inv)),
                    Some(h) if h == client => out.push(self.renew(s, s.ttl_ms.max(ttl_ms), inv)),
                    Some(_) => {}
                },
            },
            LeaseOp::Renew { client, token, res } => match res {
                LostRes::Ok | LostRes::Unknown => {
                    if let Some(s) = s.held_by(client, token) {
                        out.push(self.renew(s, s.ttl_ms, inv));
                    }
                }
                LostRes::Lost { current } => lost(s, client, token, current, out),
            },
            LeaseOp::Release { client, token, res } => match res {
                LostRes::Ok | LostRes::Unknown => {
                    if let Some(s) = s.held_by(client, token) {
                        out.push(s.freed());
                    }
                }
                LostRes::Lost { current } => lost(s, client, token, current, out),
            },
            LeaseOp::Offer {
                client,
                token,
                to,
                to_self,
                offer_ttl_ms,
                res,
            } => match res {
                Res::Ok | Res::Unknown => {
                    if let (Some(s), None, false) = (s.held_by(client, token), s.offer, to_self) {
                        let lapse = inv.saturating_add(self.life_ns(offer_ttl_ms));
                        out.push(LeaseState {
                            offer: Some((to, lapse)),
                            ..s
                        });
                    }
                }
                Res::Refused => {
                    if to_self || s.offer.is_some() || !s.surely_held_by(client, token) {
                        out.push(s);
                    }
                }
            },
            LeaseOp::Accept {
                client,
                name,
                ttl_ms,
                res,
            } => {
                let addressed =
                    s.holder.is_some() && matches!(s.offer, Some((to, _)) if to == name);
                match res {
                    AcceptRes::Granted { token } => {
                        if addressed && s.last.below(token) {
                            out.push(self.grant(s, client, Tok::Exact(token), ttl_ms, inv));
                        }
                    }
                    AcceptRes::Unknown => {
                        if addressed {
                            out.push(self.grant(s, client, s.last.successor(), ttl_ms, inv));
                        }
                    }
                    AcceptRes::Refused => {
                        if !addressed {
                            out.push(s);
                        }
                    }
                }
            }
            LeaseOp::Revoke { now, res } => match res {
                RevokeRes::Revoked { token } => {
                    if s.holder.is_some() {
                        if let Some(last) = s.last.pin(token) {
                            out.push(self.revoke(LeaseState { last, ..s }, now, inv));
                        }
                    }
                }
                RevokeRes::Free => {
                    if s.holder.is_none() {
                        out.push(s);
                    }
                }
                RevokeRes::Unknown => {
                    if s.holder.is_none() {
                        out.push(s);
                    } else {
                        out.push(self.revoke(s, now, inv));
                    }
                }
            },
            LeaseOp::Read { holder, list } => {
                if list != s.list {
                    return;
                }
                match holder {
                    None => {
                        if s.holder.is_none() {
                            out.push(s);
                        }
                    }
                    Some((h, t)) => out.extend(s.held_by(h, t)),
                }
            }
            LeaseOp::Write {
                client,
                token,
                list,
                res,
            } => match res {
                Res::Ok | Res::Unknown => {
                    if let (Some(s), None) = (s.held_by(client, token), s.offer) {
                        out.push(LeaseState { list, ..s });
                    }
                }
                Res::Refused => {
                    if s.offer.is_some() || !s.surely_held_by(client, token) {
                        out.push(s);
                    }
                }
            },
        }
    }
}

/// A renew or release of `(client, token)` refused as `Lost` with the server's lease
/// `current`: legal when the token may not be current and `current` is the holder (its token
/// pinned), or `None` with the key free. A lease the server reports after it may have expired
/// is fine (the model never forces an expiry); a free key while the lease surely lives is not.
fn lost(
    s: LeaseState,
    client: u32,
    token: u64,
    current: Option<(u32, u64)>,
    out: &mut Vec<LeaseState>,
) {
    match current {
        None => {
            if s.holder.is_none() {
                out.push(s);
            }
        }
        Some((h, t)) => {
            if let Some(p) = s.held_by(h, t) {
                if !p.surely_held_by(client, token) {
                    out.push(p);
                }
            }
        }
    }
}

impl Model for LeaseModel {
    type State = LeaseState;
    type Op = LeaseOp;

    fn init(&self) -> Vec<LeaseState> {
        vec![LeaseState::initial()]
    }

    fn step(
        &self,
        s: &LeaseState,
        o: &Operation<LeaseOp>,
        horizon_ns: u64,
        out: &mut Vec<LeaseState>,
    ) {
        // Hidden steps that may have happened before this operation took effect, which was
        // no later than `horizon_ns` (at most its return).
        let by = horizon_ns.min(o.ret_ns.unwrap_or(u64::MAX));
        self.apply(*s, o, out);
        if let Some((_, lapse)) = s.offer {
            if by >= lapse {
                self.apply(LeaseState { offer: None, ..*s }, o, out);
            }
        }
        if s.holder.is_some() && by >= s.expiry_ns {
            self.apply(s.freed(), o, out);
        }
        if s.hold_ns != 0 && by >= s.hold_ns {
            self.apply(LeaseState { hold_ns: 0, ..*s }, o, out);
        }
    }
}

/// One key's operations ready for the search.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The operations the search places.
    pub ops: Vec<Operation<LeaseOp>>,
    /// For each of `ops`, its index in the input.
    pub origin: Vec<usize>,
    /// Operations left out because they tell nothing (fail or info reads, refusals for
    /// other reasons, canary operations).
    pub dropped: usize,
    /// `ok` operations whose reply does not fit the call: `(input index, why)`.
    pub malformed: Vec<(usize, String)>,
    /// Reads whose record list could not be decoded (`Reply::Corrupt`): input indexes. Each
    /// is a definite answer showing a record nobody wrote, so a violation; left out of the
    /// search (which could only fail on them, slowly) so the rest of the key is still judged.
    pub corrupt: Vec<usize>,
}

/// Strings to small ids.
#[derive(Default)]
struct Interner {
    clients: HashMap<String, u32>,
    names: HashMap<String, u32>,
    lists: HashMap<Vec<Elem>, u32>,
}

impl Interner {
    fn id(map: &mut HashMap<String, u32>, s: &str) -> u32 {
        if let Some(&id) = map.get(s) {
            return id;
        }
        let id = map.len() as u32;
        map.insert(s.to_string(), id);
        id
    }
    fn client(&mut self, s: &str) -> u32 {
        Self::id(&mut self.clients, s)
    }
    fn name(&mut self, s: &str) -> u32 {
        Self::id(&mut self.names, s)
    }
    fn list(&mut self, l: &[Elem]) -> u32 {
        if self.lists.is_empty() {
            self.lists.insert(Vec::new(), 0);
        }
        if let Some(&id) = self.lists.get(l) {
            return id;
        }
        let id = self.lists.len() as u32;
        self.lists.insert(l.to_vec(), id);
        id
    }
}

/// Turns one key's operations (all baton operations of that key) into model operations.
pub fn prepare(ops: &[&Op]) -> Prepared {
    let mut ids = Interner::default();
    ids.list(&[]);
    let mut p = Prepared::default();
    for (i, op) in ops.iter().enumerate() {
        if matches!(op.call, Call::Read) && matches!(op.reply, Some(Reply::Corrupt { .. })) {
            p.corrupt.push(i);
            continue;
        }
        match convert(op, &mut ids) {
            Ok(Some(m)) => {
                let open = op.kind == Kind::Info || op.kind == Kind::Invoke;
                p.ops.push(Operation {
                    inv_ns: op.inv_ns,
                    ret_ns: if open { None } else { op.ret_ns },
                    op: m,
                });
                p.origin.push(i);
            }
            Ok(None) => p.dropped += 1,
            Err(why) => {
                p.dropped += 1;
                p.malformed.push((i, why));
            }
        }
    }
    p
}

/// `Ok(None)`: drop; `Err`: an ok reply that does not fit the call.
fn convert(op: &Op, ids: &mut Interner) -> Result<Option<LeaseOp>, String> {
    let open = matches!(op.kind, Kind::Info | Kind::Invoke) || op.ret_ns.is_none();
    let ok = op.kind == Kind::Ok && !open;
    let reply = if open { None } else { op.reply.as_ref() };
    let client = ids.client(&op.client);
    let bad = || -> Result<Option<LeaseOp>, String> {
        Err(format!(
            "ok {} with reply {:?}",
            op.call.name(),
            op.reply.as_ref()
        ))
    };
    // Offer and write share the shape "ok / refused with this reply / open".
    let res = |refusal: fn(&Reply) -> bool, okay: fn(&Reply) -> bool| -> Result<Option<Res>, ()> {
        match (open, ok, reply) {
            (true, _, _) => Ok(Some(Res::Unknown)),
            (false, true, Some(r)) if okay(r) => Ok(Some(Res::Ok)),
            (false, true, _) => Err(()),
            (false, false, Some(r)) if refusal(r) => Ok(Some(Res::Refused)),
            _ => Ok(None),
        }
    };
    // Renew and release: "ok / lost with the current lease / open".
    let mut lost_res = |okay: fn(&Reply) -> bool| -> Result<Option<LostRes>, ()> {
        match (open, ok, reply) {
            (true, _, _) => Ok(Some(LostRes::Unknown)),
            (false, true, Some(r)) if okay(r) => Ok(Some(LostRes::Ok)),
            (false, true, _) => Err(()),
            (false, false, Some(Reply::Lost { current })) => Ok(Some(LostRes::Lost {
                current: current.as_ref().map(|h| (ids.client(&h.client), h.token)),
            })),
            _ => Ok(None),
        }
    };
    let refused = |r: &Reply| matches!(r, Reply::Refused { .. });
    let m = match &op.call {
        Call::Claim { ttl_ms } => {
            let res = match (open, ok, reply) {
                (true, _, _) => ClaimRes::Unknown,
                (
                    false,
                    true,
                    Some(Reply::Granted {
                        token,
                        already_held,
                        ..
                    }),
                ) => ClaimRes::Granted {
                    token: *token,
                    already_held: *already_held,
                },
                (false, true, _) => return bad(),
                (false, false, Some(Reply::Held { holder })) => ClaimRes::Held {
                    client: ids.client(&holder.client),
                    token: holder.token,
                },
                _ => return Ok(None),
            };
            LeaseOp::Claim {
                client,
                ttl_ms: *ttl_ms,
                res,
            }
        }
        Call::Renew { token } => match lost_res(|r| matches!(r, Reply::Renewed { .. })) {
            Ok(Some(res)) => LeaseOp::Renew {
                client,
                token: *token,
                res,
            },
            Ok(None) => return Ok(None),
            Err(()) => return bad(),
        },
        Call::Release { token } => match lost_res(|r| matches!(r, Reply::Released)) {
            Ok(Some(res)) => LeaseOp::Release {
                client,
                token: *token,
                res,
            },
            Ok(None) => return Ok(None),
            Err(()) => return bad(),
        },
        Call::Offer {
            token,
            to,
            offer_ttl_ms,
        } => match res(refused, |r| matches!(r, Reply::Offered)) {
            Ok(Some(res)) => LeaseOp::Offer {
                client,
                token: *token,
                to: ids.name(to),
                to_self: *to == op.name,
                offer_ttl_ms: *offer_ttl_ms,
                res,
            },
            Ok(None) => return Ok(None),
            Err(()) => return bad(),
        },
        Call::Accept { ttl_ms } => {
            let res = match (open, ok, reply) {
                (true, _, _) => AcceptRes::Unknown,
                (false, true, Some(Reply::Granted { token, .. })) => {
                    AcceptRes::Granted { token: *token }
                }
                (false, true, _) => return bad(),
                (false, false, Some(Reply::Refused { .. })) => AcceptRes::Refused,
                _ => return Ok(None),
            };
            LeaseOp::Accept {
                client,
                name: ids.name(&op.name),
                ttl_ms: *ttl_ms,
                res,
            }
        }
        Call::Read => match (ok, reply) {
            (true, Some(Reply::Read { holder, list })) => LeaseOp::Read {
                holder: holder.as_ref().map(|h| (ids.client(&h.client), h.token)),
                list: ids.list(list),
            },
            (true, _) => return bad(),
            _ => return Ok(None),
        },
        Call::Write { token, list, .. } => match res(refused, |r| matches!(r, Reply::Written)) {
            Ok(Some(res)) => LeaseOp::Write {
                client,
                token: *token,
                list: ids.list(list),
                res,
            },
            Ok(None) => return Ok(None),
            Err(()) => return bad(),
        },
        Call::Revoke { now } => {
            let res = match (open, ok, reply) {
                (true, _, _) => RevokeRes::Unknown,
                (false, true, Some(Reply::Revoked { token: Some(t) })) => {
                    RevokeRes::Revoked { token: *t }
                }
                (false, true, Some(Reply::Revoked { token: None })) => RevokeRes::Free,
                (false, true, _) => return bad(),
                _ => return Ok(None),
            };
            LeaseOp::Revoke { now: *now, res }
        }
        Call::MemRead | Call::MemWrite { .. } => return Ok(None),
    };
    Ok(Some(m))
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
