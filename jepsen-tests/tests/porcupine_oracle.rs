//! Differential tests of the in-house WGL search (`jepsen_tests::check::wgl`).
//!
//! 1. Against `porcupine-rs` (an independent port of Porcupine) on 500 random small histories
//!    of a read/write/compare-and-set register, a deterministic model both can express. Half
//!    are linearizable by construction, half mutated; both engines must agree on every one.
//!    Info (unknown-outcome) operations are only writes: a write is always legal, so "may never
//!    happen" (ours) and "happens at the very end" (Porcupine, return at +infinity) agree.
//! 2. Against a brute-force search over every real-time-respecting order, for what Porcupine
//!    cannot express: set-valued states, time-dependent hidden steps and info operations that
//!    never happen (a nondeterministic decaying register, and baton's lease model itself).
//!    Hidden steps may use instants up to the operation's horizon: in an order, an operation
//!    takes effect no later than the return of itself and of every operation after it, so the
//!    brute force passes the earliest return among the operations not yet placed (open ones
//!    return at +infinity), which is what the search must pass too.

use std::time::Duration;

use jepsen_tests::check::model::{AcceptRes, ClaimRes, LeaseModel, LeaseOp, LostRes, Res};
use jepsen_tests::check::wgl::{self, Model, Operation, Outcome};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BUDGET: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The register, in both engines.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RegOp {
    Write(u32),
    Read(u32),
    Cas { from: u32, to: u32, ok: bool },
}

/// Shared sequential specification.
fn reg_step(s: u32, op: RegOp) -> Option<u32> {
    match op {
        RegOp::Write(v) => Some(v),
        RegOp::Read(v) => (v == s).then_some(s),
        RegOp::Cas { from, to, ok } => match (ok, s == from) {
            (true, true) => Some(to),
            (false, false) => Some(s),
            _ => None,
        },
    }
}

struct OurRegister;

impl Model for OurRegister {
    type State = u32;
    type Op = RegOp;
    fn init(&self) -> Vec<u32> {
        vec![0]
    }
    fn step(&self, s: &u32, op: &Operation<RegOp>, _horizon_ns: u64, out: &mut Vec<u32>) {
        out.extend(reg_step(*s, op.op));
    }
}

#[derive(Debug, Clone)]
struct TheirRegister;

impl porcupine_rs::Model for TheirRegister {
    type State = u32;
    type Op = RegOp;
    type Metadata = ();
    fn init() -> u32 {
        0
    }
    fn step(s: &u32, op: &RegOp) -> (bool, u32) {
        match reg_step(*s, *op) {
            Some(n) => (true, n),
            None => (false, *s),
        }
    }
}

/// One register operation before its result is known.
struct Planned {
    process: u32,
    inv: u64,
    ret: Option<u64>,
    /// When it takes effect (none: an info write that never did).
    at: Option<u64>,
    /// 0 write, 1 read, 2 compare-and-set.
    kind: u8,
    a: u32,
    b: u32,
}

/// A random register history: processes run one operation at a time; each operation takes
/// effect at a random point of its interval (an info write: at any later point, or never), so
/// the results are linearizable by construction; then, with probability 1/2, one result is
/// changed.
fn register_history(rng: &mut StdRng) -> (Vec<(u32, Operation<RegOp>)>, bool) {
    let procs = rng.gen_range(2..=5u32);
    let n = rng.gen_range(3..=16);
    let mut free_at = vec![0u64; procs as usize];
    let mut retired = vec![false; procs as usize];
    let mut plan: Vec<Planned> = Vec::new();
    for _ in 0..n {
        let live: Vec<u32> = (0..procs).filter(|p| !retired[*p as usize]).collect();
        if live.is_empty() {
            break;
        }
        let process = live[rng.gen_range(0..live.len())];
        let inv = free_at[process as usize] + rng.gen_range(0..4);
        let ret = inv + rng.gen_range(0..12);
        let kind = rng.gen_range(0..3u8);
        let (a, b) = (rng.gen_range(0..3u32), rng.gen_range(0..3u32));
        let (ret, at) = if kind == 0 && rng.gen_bool(0.15) {
            // Info write: takes effect later or never; the process is retired.
            retired[process as usize] = true;
            (None, rng.gen_bool(0.6).then(|| inv + rng.gen_range(0..30)))
        } else {
            free_at[process as usize] = ret + 1;
            (Some(ret), Some(rng.gen_range(inv..=ret)))
        };
        plan.push(Planned {
            process,
            inv,
            ret,
            at,
            kind,
            a,
            b,
        });
    }
    // Apply in effect order to find every result.
    let mut order: Vec<usize> = (0..plan.len()).filter(|&i| plan[i].at.is_some()).collect();
    order.sort_by_key(|&i| (plan[i].at, i));
    let mut ops: Vec<Option<RegOp>> = vec![None; plan.len()];
    let mut reg = 0u32;
    for i in order {
        let Planned { kind, a, b, .. } = plan[i];
        let op = match kind {
            0 => RegOp::Write(a),
            1 => RegOp::Read(reg),
            _ => RegOp::Cas {
                from: a,
                to: b,
                ok: reg == a,
            },
        };
        reg = reg_step(reg, op).expect("constructed legal");
        ops[i] = Some(op);
    }
    let mut out: Vec<(u32, Operation<RegOp>)> = plan
        .iter()
        .zip(ops)
        .map(|(p, op)| {
            // None: an info write that never happened.
            let op = op.unwrap_or(RegOp::Write(p.a));
            let ret_ns = p.ret;
            (
                p.process,
                Operation {
                    inv_ns: p.inv,
                    ret_ns,
                    op,
                },
            )
        })
        .collect();
    let mutated = rng.gen_bool(0.5);
    if mutated {
        let done: Vec<usize> = (0..out.len())
            .filter(|&i| out[i].1.ret_ns.is_some())
            .collect();
        if let Some(&i) = done.get(rng.gen_range(0..done.len().max(1))) {
            out[i].1.op = match out[i].1.op {
                RegOp::Write(v) => RegOp::Write((v + 1) % 3),
                RegOp::Read(v) => RegOp::Read((v + rng.gen_range(1..3)) % 3),
                RegOp::Cas { from, to, ok } => RegOp::Cas { from, to, ok: !ok },
            };
        }
    }
    (out, mutated)
}

#[test]
fn wgl_agrees_with_porcupine_on_random_register_histories() {
    let mut rng = StdRng::seed_from_u64(0xba70_0001);
    let (mut yes, mut no) = (0, 0);
    for case in 0..500 {
        let (h, mutated) = register_history(&mut rng);
        let ours: Vec<Operation<RegOp>> = h.iter().map(|(_, o)| o.clone()).collect();
        let end = h
            .iter()
            .map(|(_, o)| o.ret_ns.unwrap_or(o.inv_ns))
            .max()
            .unwrap_or(0);
        let theirs: Vec<porcupine_rs::Operation<TheirRegister>> = h
            .iter()
            .map(|(p, o)| porcupine_rs::Operation {
                client_id: Some(*p),
                call_time: o.inv_ns as i64,
                // Info: open until after everything else.
                return_time: o.ret_ns.unwrap_or(end + 1_000) as i64,
                op: o.op,
                metadata: None,
            })
            .collect();
        let a = wgl::check(&OurRegister, &ours, BUDGET);
        let b = porcupine_rs::check_operations_timeout(&theirs, BUDGET);
        let a_lin = match a {
            Outcome::Linearizable => true,
            Outcome::NotLinearizable { .. } => false,
            Outcome::Unknown => panic!("case {case}: our search ran out of budget"),
        };
        let b_lin = match b {
            porcupine_rs::CheckResult::Ok => true,
            porcupine_rs::CheckResult::Illegal => false,
            porcupine_rs::CheckResult::Unknown => panic!("case {case}: porcupine ran out"),
        };
        assert_eq!(a_lin, b_lin, "case {case} disagrees: {h:#?}");
        if !mutated {
            assert!(
                a_lin,
                "case {case} was linearizable by construction: {h:#?}"
            );
        }
        if a_lin {
            yes += 1;
        } else {
            no += 1;
        }
    }
    // Both answers were exercised.
    eprintln!("register histories: {yes} linearizable, {no} not");
    assert!(yes > 150 && no > 50, "{yes} linearizable, {no} not");
}

// ---------------------------------------------------------------------------------------------
// Brute force, for set-valued models.

/// Whether some order respecting real time (an operation that returned before another was
/// invoked comes first) makes every completed operation legal, open (info) operations being
/// placed anywhere after their invocation or left out. Tries every such order. Each step gets
/// as its horizon the earliest return among the operations not placed yet, itself included
/// (every one of them comes after it in this order; open ones and those left out return at
/// +infinity): an operation takes effect no later than any operation after it returns.
fn brute_force<M: Model>(model: &M, ops: &[Operation<M::Op>]) -> bool {
    fn go<M: Model>(
        model: &M,
        ops: &[Operation<M::Op>],
        placed: &mut Vec<bool>,
        states: Vec<M::State>,
    ) -> bool {
        let all_done = ops
            .iter()
            .zip(placed.iter())
            .all(|(o, &p)| p || o.ret_ns.is_none());
        if all_done {
            return true;
        }
        for j in 0..ops.len() {
            if placed[j] {
                continue;
            }
            // Some unplaced operation returned before j was invoked: it must come first.
            let blocked = (0..ops.len())
                .any(|i| !placed[i] && i != j && ops[i].ret_ns.is_some_and(|r| r < ops[j].inv_ns));
            if blocked {
                continue;
            }
            let horizon = (0..ops.len())
                .filter(|&i| !placed[i])
                .map(|i| ops[i].ret_ns.unwrap_or(u64::MAX))
                .min()
                .unwrap_or(u64::MAX);
            let mut next = Vec::new();
            for s in &states {
                model.step(s, &ops[j], horizon, &mut next);
            }
            next.sort();
            next.dedup();
            if next.is_empty() {
                continue;
            }
            placed[j] = true;
            let found = go(model, ops, placed, next);
            placed[j] = false;
            if found {
                return true;
            }
        }
        false
    }
    let mut init = model.init();
    init.sort();
    init.dedup();
    go(model, ops, &mut vec![false; ops.len()], init)
}

/// A register whose writes may store any of a few values, and whose value may decay to 0
/// (a hidden step) before an operation whose horizon is at least `DECAY` after the last write
/// was invoked: the shape of baton's tokens and expiry in miniature.
struct DecayRegister;

const DECAY: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecayOp {
    /// Stores one of `a`, `b`.
    WriteEither(u32, u32),
    Read(u32),
}

impl Model for DecayRegister {
    /// (value, earliest decay instant)
    type State = (u32, u64);
    type Op = DecayOp;
    fn init(&self) -> Vec<(u32, u64)> {
        vec![(0, 0)]
    }
    fn step(
        &self,
        s: &(u32, u64),
        op: &Operation<DecayOp>,
        horizon_ns: u64,
        out: &mut Vec<(u32, u64)>,
    ) {
        let mut before = vec![*s];
        if horizon_ns.min(op.ret_ns.unwrap_or(u64::MAX)) >= s.1 && s.0 != 0 {
            before.push((0, 0));
        }
        for s in before {
            match op.op {
                DecayOp::WriteEither(a, b) => {
                    out.push((a, op.inv_ns + DECAY));
                    out.push((b, op.inv_ns + DECAY));
                }
                DecayOp::Read(v) => {
                    if v == s.0 {
                        out.push(s);
                    }
                }
            }
        }
    }
}

/// Random timed operations by a few sequential processes; `make` draws each operation.
fn random_timed<O>(
    rng: &mut StdRng,
    procs: usize,
    n: usize,
    info_rate: f64,
    mut make: impl FnMut(&mut StdRng, usize) -> O,
) -> Vec<Operation<O>> {
    let mut free_at = vec![0u64; procs];
    let mut retired = vec![false; procs];
    let mut ops = Vec::new();
    for _ in 0..n {
        let live: Vec<usize> = (0..procs).filter(|p| !retired[*p]).collect();
        if live.is_empty() {
            break;
        }
        let p = live[rng.gen_range(0..live.len())];
        let inv = free_at[p] + rng.gen_range(0..6);
        let ret = inv + rng.gen_range(0..10);
        let op = make(rng, p);
        let info = rng.gen_bool(info_rate);
        if info {
            retired[p] = true;
        } else {
            free_at[p] = ret + 1;
        }
        ops.push(Operation {
            inv_ns: inv,
            ret_ns: (!info).then_some(ret),
            op,
        });
    }
    ops
}

/// Runs both engines on `ops`; returns whether linearizable.
fn agree<M: Model>(model: &M, ops: &[Operation<M::Op>], what: &str) -> bool
where
    M::Op: std::fmt::Debug,
{
    let fast = match wgl::check(model, ops, BUDGET) {
        Outcome::Linearizable => true,
        Outcome::NotLinearizable { .. } => false,
        Outcome::Unknown => panic!("{what}: our search ran out of budget"),
    };
    let slow = brute_force(model, ops);
    assert_eq!(fast, slow, "{what} disagrees with brute force: {ops:#?}");
    fast
}

#[test]
fn wgl_agrees_with_brute_force_on_a_nondeterministic_decaying_register() {
    let mut rng = StdRng::seed_from_u64(0xba70_0002);
    let (mut yes, mut no) = (0, 0);
    for case in 0..400 {
        let n = rng.gen_range(2..=7);
        let ops = random_timed(&mut rng, 3, n, 0.15, |rng, _| {
            if rng.gen_bool(0.5) {
                DecayOp::WriteEither(rng.gen_range(1..4), rng.gen_range(1..4))
            } else {
                DecayOp::Read(rng.gen_range(0..4))
            }
        });
        if agree(&DecayRegister, &ops, &format!("decay case {case}")) {
            yes += 1;
        } else {
            no += 1;
        }
    }
    eprintln!("decaying register histories: {yes} linearizable, {no} not");
    assert!(yes > 40 && no > 40, "{yes} linearizable, {no} not");
}

/// A random lease operation by process `p` (its client id and worker name are `p`).
fn random_lease_op(rng: &mut StdRng, p: usize) -> LeaseOp {
    let client = p as u32;
    let token = rng.gen_range(1..6u64);
    match rng.gen_range(0..8) {
        0 => LeaseOp::Claim {
            client,
            ttl_ms: 20,
            res: match rng.gen_range(0..4) {
                0 => ClaimRes::Unknown,
                1 => ClaimRes::Held {
                    client: rng.gen_range(0..3),
                    token,
                },
                _ => ClaimRes::Granted {
                    token,
                    already_held: rng.gen_bool(0.2),
                },
            },
        },
        1 => LeaseOp::Renew {
            client,
            token,
            res: if rng.gen_bool(0.6) {
                LostRes::Ok
            } else {
                random_lost(rng)
            },
        },
        2 => LeaseOp::Release {
            client,
            token,
            res: if rng.gen_bool(0.7) {
                LostRes::Ok
            } else {
                random_lost(rng)
            },
        },
        3 => LeaseOp::Offer {
            client,
            token,
            to: rng.gen_range(0..3),
            to_self: false,
            offer_ttl_ms: 10,
            res: if rng.gen_bool(0.7) {
                Res::Ok
            } else {
                Res::Refused
            },
        },
        4 => LeaseOp::Accept {
            client,
            name: client,
            ttl_ms: 20,
            res: if rng.gen_bool(0.7) {
                AcceptRes::Granted { token }
            } else {
                AcceptRes::Refused
            },
        },
        5 | 6 => LeaseOp::Read {
            holder: rng.gen_bool(0.6).then(|| (rng.gen_range(0..3), token)),
            list: rng.gen_range(0..3),
        },
        _ => LeaseOp::Write {
            client,
            token,
            list: rng.gen_range(1..3),
            res: if rng.gen_bool(0.7) {
                Res::Ok
            } else {
                Res::Refused
            },
        },
    }
}

/// A `Lost` refusal naming a random current holder, or none.
fn random_lost(rng: &mut StdRng) -> LostRes {
    LostRes::Lost {
        current: rng
            .gen_bool(0.6)
            .then(|| (rng.gen_range(0..3), rng.gen_range(1..6u64))),
    }
}

/// A random lease history (times in milliseconds, TTLs of 10-20 ms so that expiry and lapse
/// happen within it). Each operation takes effect at a random point of its interval (an info
/// one at any later point, or never); in that order, each gets the first of up to 30 random
/// candidates the model accepts from the state so far, so the history is linearizable by
/// construction. Then, with probability 1/2, one completed operation is replaced by a random
/// one.
fn lease_history(rng: &mut StdRng, model: &LeaseModel) -> Vec<Operation<LeaseOp>> {
    let n = rng.gen_range(2..=7);
    // Timing first (each operation's process as a placeholder), then the operations.
    let timed = random_timed(rng, 3, n, 0.15, |_, p| p);
    let procs: Vec<usize> = timed.iter().map(|o| o.op).collect();
    let mut ops: Vec<Operation<LeaseOp>> = timed
        .into_iter()
        .map(|o| Operation {
            inv_ns: o.inv_ns,
            ret_ns: o.ret_ns,
            op: LeaseOp::Read {
                holder: None,
                list: 0,
            },
        })
        .collect();
    let mut effect: Vec<(u64, usize)> = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        match o.ret_ns {
            Some(r) => effect.push((rng.gen_range(o.inv_ns..=r), i)),
            None if rng.gen_bool(0.6) => effect.push((o.inv_ns + rng.gen_range(0..20), i)),
            None => {}
        }
    }
    effect.sort();
    let mut state = model.init()[0];
    // In effect order, an operation's horizon: the earliest return among it and the operations
    // taking effect after it.
    let mut horizons = vec![u64::MAX; effect.len()];
    let mut earliest = u64::MAX;
    for (k, &(_, i)) in effect.iter().enumerate().rev() {
        earliest = earliest.min(ops[i].ret_ns.unwrap_or(u64::MAX));
        horizons[k] = earliest;
    }
    for (k, (_, i)) in effect.into_iter().enumerate() {
        for _ in 0..30 {
            let cand = Operation {
                op: random_lease_op(rng, procs[i]),
                ..ops[i].clone()
            };
            let mut next = Vec::new();
            model.step(&state, &cand, horizons[k], &mut next);
            if !next.is_empty() {
                state = next[rng.gen_range(0..next.len())];
                ops[i] = cand;
                break;
            }
        }
    }
    if rng.gen_bool(0.5) {
        let i = rng.gen_range(0..ops.len());
        ops[i].op = random_lease_op(rng, procs[i]);
    }
    for o in &mut ops {
        o.inv_ns *= 1_000_000;
        o.ret_ns = o.ret_ns.map(|r| r * 1_000_000);
    }
    ops
}

#[test]
fn wgl_agrees_with_brute_force_on_random_lease_histories() {
    let mut rng = StdRng::seed_from_u64(0xba70_0003);
    let model = LeaseModel { rho: 0.1 };
    let (mut yes, mut no) = (0, 0);
    for case in 0..400 {
        let ops = lease_history(&mut rng, &model);
        if agree(&model, &ops, &format!("lease case {case}")) {
            yes += 1;
        } else {
            no += 1;
        }
    }
    eprintln!("lease histories: {yes} linearizable, {no} not");
    assert!(yes > 100 && no > 40, "{yes} linearizable, {no} not");
}
