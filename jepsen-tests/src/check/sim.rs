//! A small discrete-event simulation of baton and the harness's workers, to test the checkers
//! on CI-sized histories: a correct store must pass every checker (no false alarms, within the
//! time budget), and a store without fencing must be caught.
//!
//! The store applies each operation at an effect instant inside its interval, with baton's
//! semantics (tokens grow by random gaps; expiry at `effect + ttl`, which is never before
//! `inv + ttl / (1 + rho)`; offers lapse). Workers follow a simplified `lease-register` loop,
//! including deliberately late writes and lost replies (info; the process is retired and a
//! new client id takes over; the operation took effect or not, possibly much later). The
//! client library's safe deadline (`send + ttl × (1 − margin)`, sent within half a millisecond
//! of the invocation) is recorded in grants and renewals, and the workers act on it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{Call, Elem, Holding, Kind, Op, Reply};

const MS: u64 = 1_000_000;
const TTL_MS: u64 = 2_000;
const OFFER_TTL_MS: u64 = 1_000;

/// What the simulated store gets wrong, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    None,
    /// Writes are accepted from any client that ever held the key: no fencing.
    NoFencing,
    /// Leases expire after half their TTL (a clock running twice as fast).
    FastClock,
    /// The client library counts its safe deadline from the reply's arrival, not from when it
    /// sent the request.
    ArrivalClock,
}

#[derive(Debug, Clone)]
struct Lease {
    client: String,
    name: String,
    token: u64,
    ttl_ms: u64,
    expires: u64,
}

#[derive(Debug, Default)]
struct Store {
    lease: Option<Lease>,
    last: u64,
    offer: Option<(String, u64)>,
    list: Vec<Elem>,
    ever_held: Vec<String>,
    /// A revoke's hold: no claim is granted before this instant.
    held_until: u64,
}

impl Store {
    fn tick(&mut self, now: u64, bug: Bug) {
        let early = |l: &Lease| match bug {
            Bug::FastClock => l.ttl_ms * MS / 2,
            _ => 0,
        };
        if self
            .lease
            .as_ref()
            .is_some_and(|l| now + early(l) >= l.expires)
        {
            self.lease = None;
            self.offer = None;
        }
        if self.offer.as_ref().is_some_and(|o| now >= o.1) {
            self.offer = None;
        }
    }

    fn holding(&self) -> Option<Holding> {
        self.lease.as_ref().map(|l| Holding {
            client: l.client.clone(),
            token: l.token,
        })
    }

    fn grant(&mut self, rng: &mut StdRng, client: &str, name: &str, ttl_ms: u64, now: u64) -> u64 {
        self.last += rng.gen_range(1..5);
        self.lease = Some(Lease {
            client: client.into(),
            name: name.into(),
            token: self.last,
            ttl_ms,
            expires: now + ttl_ms * MS,
        });
        self.offer = None;
        self.ever_held.push(client.into());
        self.last
    }

    fn current(&self, client: &str, token: u64) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|l| l.client == client && l.token == token)
    }

    fn apply(&mut self, rng: &mut StdRng, bug: Bug, op: &Op, now: u64) -> (Kind, Reply) {
        self.tick(now, bug);
        let refused = |m: &str| {
            (
                Kind::Fail,
                Reply::Refused {
                    message: m.to_string(),
                },
            )
        };
        let (c, name) = (op.client.as_str(), op.name.as_str());
        match &op.call {
            Call::Claim { .. } if self.lease.is_none() && now < self.held_until => {
                refused("held back by a revoke")
            }
            Call::Claim { ttl_ms } => match &mut self.lease {
                None => {
                    let token = self.grant(rng, c, name, *ttl_ms, now);
                    let reply = Reply::Granted {
                        token,
                        already_held: false,
                        safe_deadline_ns: None,
                    };
                    (Kind::Ok, reply)
                }
                Some(l) if l.client == c => {
                    l.ttl_ms = l.ttl_ms.max(*ttl_ms);
                    l.expires = now + l.ttl_ms * MS;
                    let reply = Reply::Granted {
                        token: l.token,
                        already_held: true,
                        safe_deadline_ns: None,
                    };
                    (Kind::Ok, reply)
                }
                Some(_) => (
                    Kind::Fail,
                    Reply::Held {
                        holder: self.holding().unwrap(),
                    },
                ),
            },
            Call::Renew { token } | Call::Release { token } => {
                if !self.current(c, *token) {
                    let current = self.holding();
                    return (Kind::Fail, Reply::Lost { current });
                }
                if matches!(op.call, Call::Renew { .. }) {
                    let l = self.lease.as_mut().unwrap();
                    l.expires = now + l.ttl_ms * MS;
                    (
                        Kind::Ok,
                        Reply::Renewed {
                            safe_deadline_ns: None,
                        },
                    )
                } else {
                    self.lease = None;
                    self.offer = None;
                    (Kind::Ok, Reply::Released)
                }
            }
            Call::Offer {
                token,
                to,
                offer_ttl_ms,
            } => {
                if !self.current(c, *token) {
                    return refused("stale");
                }
                if self.offer.is_some() {
                    return refused("pending");
                }
                if self.lease.as_ref().unwrap().name == *to {
                    return refused("self");
                }
                self.offer = Some((to.clone(), now + offer_ttl_ms * MS));
                (Kind::Ok, Reply::Offered)
            }
            Call::Accept { ttl_ms } => {
                if self.offer.as_ref().is_none_or(|o| o.0 != name) {
                    return refused("no offer");
                }
                let token = self.grant(rng, c, name, *ttl_ms, now);
                let reply = Reply::Granted {
                    token,
                    already_held: false,
                    safe_deadline_ns: None,
                };
                (Kind::Ok, reply)
            }
            Call::Read => (
                Kind::Ok,
                Reply::Read {
                    holder: self.holding(),
                    list: self.list.clone(),
                },
            ),
            Call::Write { token, list, .. } => {
                let allowed = match bug {
                    Bug::None | Bug::FastClock | Bug::ArrivalClock => {
                        self.current(c, *token) && self.offer.is_none()
                    }
                    Bug::NoFencing => self.ever_held.iter().any(|h| h == c),
                };
                if !allowed {
                    return refused("stale or frozen");
                }
                self.list = list.clone();
                (Kind::Ok, Reply::Written)
            }
            Call::Revoke { now: at_once } => {
                let ended = self.lease.take();
                self.offer = None;
                if let (Some(l), false) = (&ended, *at_once) {
                    self.held_until = now + l.ttl_ms * MS;
                }
                (
                    Kind::Ok,
                    Reply::Revoked {
                        token: ended.map(|l| l.token),
                    },
                )
            }
            Call::MemRead | Call::MemWrite { .. } => unreachable!("not simulated"),
        }
    }
}

#[derive(Debug, Clone)]
struct Worker {
    name: String,
    client: String,
    generation: u32,
    /// (token, believed until)
    belief: Option<(u64, u64)>,
    list: Option<Vec<Elem>>,
}

#[derive(Debug, Clone, Copy)]
enum Event {
    /// Worker `w` invokes its next operation.
    Invoke(usize),
    /// Operation `i` takes effect.
    Effect(usize),
    /// Operation `i` returns to worker `w`.
    Return(usize, usize),
}

/// Schedules `e` at `t`.
fn push(heap: &mut BinaryHeap<Reverse<(u64, usize)>>, events: &mut Vec<Event>, t: u64, e: Event) {
    heap.push(Reverse((t, events.len())));
    events.push(e);
}

/// Revokes among the calls of workers that hold nothing, in percent.
const REVOKE_PCT: u32 = 2;

/// One key's history: `workers` workers for `ops` operations on `key`, a fraction `lost` of
/// whose replies are lost. With `revokes`, the workers that hold nothing now and then revoke
/// whoever holds the key (`Some(true)`: `--now`, freeing it at once; `Some(false)`: holding it
/// back for the lease's TTL).
pub fn key_history(
    seed: u64,
    key: &str,
    workers: usize,
    ops: usize,
    lost_rate: f64,
    bug: Bug,
    revokes: Option<bool>,
) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut store = Store::default();
    let mut ws: Vec<Worker> = (0..workers)
        .map(|i| Worker {
            name: format!("{key}-w{i}"),
            client: format!("{key}-w{i}-g0"),
            generation: 0,
            belief: None,
            list: None,
        })
        .collect();
    let mut out: Vec<Op> = Vec::new();
    // Events by (time, sequence number); the sequence number indexes `events`.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut events: Vec<Event> = Vec::new();
    for w in 0..workers {
        push(
            &mut heap,
            &mut events,
            rng.gen_range(0..300) * MS,
            Event::Invoke(w),
        );
    }
    let mut uid = 0u64;
    let mut results: Vec<Option<(Kind, Reply)>> = Vec::new();
    let mut lost: Vec<bool> = Vec::new();
    let mut invoked = 0;
    while let Some(Reverse((now, n))) = heap.pop() {
        match events[n] {
            Event::Invoke(w) => {
                if invoked >= ops {
                    continue;
                }
                invoked += 1;
                let call = next_call(&mut rng, &mut ws, w, now, &mut uid, revokes);
                let worker = &ws[w];
                let i = out.len();
                out.push(Op {
                    process: seed * 100_000 + (w as u64) * 1000 + u64::from(worker.generation),
                    workload: "lease-register".into(),
                    key: key.into(),
                    client: worker.client.clone(),
                    name: worker.name.clone(),
                    call,
                    kind: Kind::Info,
                    reply: None,
                    inv_ns: now,
                    ret_ns: None,
                });
                results.push(None);
                let reply_lost = rng.gen_bool(lost_rate);
                lost.push(reply_lost);
                if reply_lost {
                    // Took effect (perhaps much later) or never; the worker moves on as a new
                    // process right away (after its timeout).
                    if rng.gen_bool(0.6) {
                        push(
                            &mut heap,
                            &mut events,
                            now + rng.gen_range(1..3_000) * MS,
                            Event::Effect(i),
                        );
                    }
                    let w_ = &mut ws[w];
                    w_.generation += 1;
                    w_.client = format!("{}-g{}", w_.name, w_.generation);
                    w_.belief = None;
                    w_.list = None;
                    push(&mut heap, &mut events, now + 1_000 * MS, Event::Invoke(w));
                } else {
                    push(
                        &mut heap,
                        &mut events,
                        now + rng.gen_range(1..40) * MS,
                        Event::Effect(i),
                    );
                }
            }
            Event::Effect(i) => {
                let r = store.apply(&mut rng, bug, &out[i], now);
                results[i] = Some(r);
                if !lost[i] {
                    let w = ws.iter().position(|w| w.client == out[i].client).unwrap();
                    push(
                        &mut heap,
                        &mut events,
                        now + rng.gen_range(1..40) * MS,
                        Event::Return(i, w),
                    );
                }
            }
            Event::Return(i, w) => {
                let (k, mut reply) = results[i].clone().unwrap();
                // The client library's safe deadline, counted from its send (just after the
                // invocation, before any effect) or, with the bug, from the reply's arrival.
                let counted_from = match bug {
                    Bug::ArrivalClock => now,
                    // (A jitter that leaves the random sequence alone.)
                    _ => out[i].inv_ns + (i as u64 * 7_919) % 500_000,
                };
                match &mut reply {
                    Reply::Granted {
                        safe_deadline_ns, ..
                    }
                    | Reply::Renewed { safe_deadline_ns } => {
                        *safe_deadline_ns = Some(counted_from + TTL_MS * MS * 95 / 100);
                    }
                    _ => {}
                }
                out[i].kind = k;
                out[i].reply = Some(reply.clone());
                out[i].ret_ns = Some(now);
                learn(&mut ws[w], &out[i], k, &reply);
                // Now and then a client pause of about a TTL: beliefs run out, writes go late.
                let holding = ws[w].belief.is_some() && ws[w].list.is_some();
                let think = if rng.gen_bool(if holding { 0.3 } else { 0.05 }) {
                    rng.gen_range(1_000..3_000)
                } else if ws[w].belief.is_some() {
                    rng.gen_range(10..150)
                } else {
                    rng.gen_range(100..500)
                };
                push(&mut heap, &mut events, now + think * MS, Event::Invoke(w));
            }
        }
    }
    out
}

/// The worker's next call, as the harness's `lease-register` loop would choose it.
fn next_call(
    rng: &mut StdRng,
    ws: &mut [Worker],
    w: usize,
    now: u64,
    uid: &mut u64,
    revokes: Option<bool>,
) -> Call {
    let names: Vec<String> = ws.iter().map(|w| w.name.clone()).collect();
    let me = &mut ws[w];
    let mut append = |token: u64, list: &[Elem]| {
        *uid += 1;
        let mut l = list.to_vec();
        l.push(Elem { token, uid: *uid });
        l
    };
    match me.belief {
        Some((token, until)) if now < until => {
            let r = rng.gen_range(0..100);
            if r < 20 {
                Call::Renew { token }
            } else if r < 55 {
                match &me.list {
                    None => Call::Read,
                    Some(list) => Call::Write {
                        token,
                        list: append(token, list),
                        late: false,
                    },
                }
            } else if r < 65 {
                Call::Read
            } else if r < 78 {
                Call::Release { token }
            } else if r < 88 {
                let others: Vec<&String> = names.iter().filter(|n| **n != me.name).collect();
                Call::Offer {
                    token,
                    to: others[rng.gen_range(0..others.len())].clone(),
                    offer_ttl_ms: OFFER_TTL_MS,
                }
            } else {
                Call::Claim { ttl_ms: TTL_MS }
            }
        }
        belief => {
            if let (Some((token, _)), Some(list)) = (belief, me.list.take()) {
                me.belief = None;
                if rng.gen_bool(0.3) {
                    return Call::Write {
                        token,
                        list: append(token, &list),
                        late: true,
                    };
                }
            }
            me.belief = None;
            let r = rng.gen_range(0..100);
            if let Some(now) = revokes.filter(|_| r < REVOKE_PCT) {
                // An operator's revoke, of whoever holds the key.
                return Call::Revoke { now };
            }
            if r < 65 {
                Call::Claim { ttl_ms: TTL_MS }
            } else if r < 85 {
                Call::Accept { ttl_ms: TTL_MS }
            } else {
                Call::Read
            }
        }
    }
}

/// What a worker learns from a reply.
fn learn(me: &mut Worker, op: &Op, kind: Kind, reply: &Reply) {
    // Until the library's safe deadline.
    let believe = |safe: &Option<u64>, token: u64| {
        Some((token, safe.unwrap_or(op.inv_ns + TTL_MS * MS * 95 / 100)))
    };
    match (&op.call, kind, reply) {
        (
            Call::Claim { .. } | Call::Accept { .. },
            Kind::Ok,
            Reply::Granted {
                token,
                already_held,
                safe_deadline_ns,
            },
        ) => {
            if !already_held {
                me.list = None;
            }
            me.belief = believe(safe_deadline_ns, *token);
        }
        (Call::Renew { token }, Kind::Ok, Reply::Renewed { safe_deadline_ns }) => {
            me.belief = believe(safe_deadline_ns, *token)
        }
        (Call::Renew { .. } | Call::Release { .. }, _, _) => me.belief = None,
        (Call::Offer { .. }, Kind::Ok, _) => me.belief = None,
        (Call::Read, Kind::Ok, Reply::Read { list, .. })
            if me.belief.is_some() && me.list.is_none() =>
        {
            me.list = Some(list.clone());
        }
        (Call::Write { list, .. }, k, _) => {
            if k == Kind::Ok {
                me.list = Some(list.clone());
            } else {
                me.list = None;
                me.belief = None;
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{history, params};
    use super::super::{check_all, counts};
    use super::*;
    use crate::history::Verdict;
    use std::time::Instant;

    fn run(bug: Bug, keys: usize) -> (Vec<crate::history::CheckResult>, Vec<Op>) {
        let mut ops = Vec::new();
        for k in 0..keys {
            ops.extend(key_history(
                1000 + k as u64,
                &format!("lr/{k}"),
                4,
                150,
                0.03,
                bug,
                None,
            ));
        }
        let results = check_all(&history(&ops), &params());
        (results, ops)
    }

    #[test]
    fn a_correct_store_passes_every_checker_in_time() {
        let start = Instant::now();
        let (results, ops) = run(Bug::None, 12);
        let took = start.elapsed();
        for r in &results {
            assert_eq!(
                r.verdict,
                Verdict::Pass,
                "{}: {} {:#?}",
                r.checker,
                r.summary,
                r.violations
            );
        }
        let c = counts(&history(&ops));
        assert_eq!(c.keys, 12);
        assert!(c.ok_claims > 100, "{c:?}");
        assert!(c.ok_writes > 50, "{c:?}");
        assert!(c.refused_stale_writes > 5, "{c:?}");
        assert!(c.info_ops > 12, "{c:?}");
        assert!(c.ok_accepts > 5, "{c:?}");
        // Debug build, 12 keys x 150 operations: well inside the 20 s CI budget.
        assert!(took.as_secs() < 10, "checking took {took:?}");
    }

    #[test]
    fn no_false_alarms_across_seeds_workers_and_lost_replies() {
        let mut ops = Vec::new();
        for k in 0..60u64 {
            let workers = 3 + (k % 3) as usize;
            let lost = [0.0, 0.03, 0.08][(k / 3 % 3) as usize];
            ops.extend(key_history(
                5000 + k,
                &format!("s/{k}"),
                workers,
                150,
                lost,
                Bug::None,
                (k % 2 == 1).then_some(false),
            ));
        }
        let revoked = ops
            .iter()
            .filter(|o| matches!(o.reply, Some(Reply::Revoked { token: Some(_) })))
            .count();
        assert!(revoked > 20, "{revoked} leases revoked");
        let h = history(&ops);
        for r in check_all(&h, &params()) {
            assert_eq!(
                r.verdict,
                Verdict::Pass,
                "{}: {} {:#?}",
                r.checker,
                r.summary,
                r.violations
            );
        }
    }

    #[test]
    fn revokes_that_free_the_key_at_once_are_caught_by_the_intervals() {
        // `--now` keeps its promise to the store (linearizable) but not to the holder, who
        // still believes until its safe deadline: the next holder's window overlaps.
        let mut ops = Vec::new();
        for k in 0..12u64 {
            ops.extend(key_history(
                7000 + k,
                &format!("rv/{k}"),
                4,
                150,
                0.0,
                Bug::None,
                Some(true),
            ));
        }
        let results = check_all(&history(&ops), &params());
        let verdict = |name: &str| results.iter().find(|r| r.checker == name).unwrap().verdict;
        assert_eq!(verdict("intervals"), Verdict::Fail);
        assert_eq!(verdict("linearizability"), Verdict::Pass);
        assert_eq!(verdict("fencing"), Verdict::Pass);
    }

    #[test]
    fn a_store_whose_leases_expire_early_is_caught() {
        let (results, _) = run(Bug::FastClock, 8);
        let verdict = |name: &str| results.iter().find(|r| r.checker == name).unwrap().verdict;
        assert_eq!(verdict("linearizability"), Verdict::Fail);
        assert_eq!(verdict("intervals"), Verdict::Fail);
        // Fencing still holds: tokens moved on, stale writes were refused.
        assert_eq!(verdict("fencing"), Verdict::Pass);
        assert_eq!(verdict("tokens"), Verdict::Pass);
    }

    #[test]
    fn a_client_library_counting_from_the_reply_is_caught() {
        let (results, _) = run(Bug::ArrivalClock, 8);
        let r = results.iter().find(|r| r.checker == "intervals").unwrap();
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(
            r.violations
                .iter()
                .any(|v| v.message.starts_with("late safe deadline")),
            "{r:#?}"
        );
        // Even with over-bound skew (overlaps only reported), a late deadline fails.
        let mut p = params();
        p.skew_within_bound = false;
        let mut ops = Vec::new();
        for k in 0..8 {
            ops.extend(key_history(
                1000 + k as u64,
                &format!("lr/{k}"),
                4,
                150,
                0.03,
                Bug::ArrivalClock,
                None,
            ));
        }
        let r = super::super::intervals::check(&ops, &p);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        // The store itself is correct.
        let verdict = |name: &str| results.iter().find(|r| r.checker == name).unwrap().verdict;
        assert_eq!(verdict("linearizability"), Verdict::Pass);
        assert_eq!(verdict("fencing"), Verdict::Pass);
        assert_eq!(verdict("tokens"), Verdict::Pass);
    }

    #[test]
    fn a_store_without_fencing_is_caught() {
        let (results, _) = run(Bug::NoFencing, 8);
        let verdict = |name: &str| {
            let r = results.iter().find(|r| r.checker == name).unwrap();
            eprintln!("{}: {:?} {}", r.checker, r.verdict, r.summary);
            r.verdict
        };
        assert_eq!(verdict("linearizability"), Verdict::Fail);
        assert_eq!(verdict("fencing"), Verdict::Fail);
        assert_eq!(verdict("lists"), Verdict::Fail);
    }
}
