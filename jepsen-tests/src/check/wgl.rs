//! A generic Wing–Gong–Lowe linearizability search over models with set-valued states.
//!
//! Why in-house: baton's model is nondeterministic (a grant's token is "any value above the
//! last one", expiry and offer lapse are hidden steps whose legality depends on timestamps),
//! which deterministic checkers cannot express. Like Porcupine's `NondeterministicModel`, a
//! state of the search is a *set* of model states; a step maps the set to the set of all
//! successors, and the empty set means "illegal here".
//!
//! The search (Lowe's variant of WGL): call and return entries sorted by time (calls first on
//! equal timestamps, so intervals are closed), kept in a doubly linked list. Walking from the
//! head, a call whose step is legal and whose `(linearized set, state set)` pair was not seen
//! before is linearized: pushed on a stack and lifted out of the list, and the walk restarts.
//! Reaching the return of an operation that is still in the list means it cannot be placed
//! before its deadline: pop the last choice and try the next call after it. An empty stack
//! there means the history is not linearizable.
//!
//! Operations with no return (`info`: the outcome is unknown) return at +infinity and need not
//! be linearized at all: they may never have happened. Their returns sort last, so reaching
//! one means every operation that had to be placed has been.
//!
//! The step of a call gets a bound on its linearization point (see [`Model::step`]): the time
//! of the first return entry still in the list. The walk reaches a call only across calls, so
//! that return belongs to this operation or to a later one; every operation still in the list
//! is linearized after this one. A second linked list holding only the return entries, lifted
//! and restored with the first, gives that time in constant time. It depends only on the set of
//! linearized operations, so the memo cache stays valid.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// A sequential specification with set-valued (nondeterministic) transitions.
pub trait Model {
    /// One model state. `Ord` gives state sets a canonical (sorted) form for the memo cache.
    type State: Clone + Eq + Hash + Ord + Debug;
    /// The operation as observed: what was asked and what came back.
    type Op;

    /// The possible initial states (usually one).
    fn init(&self) -> Vec<Self::State>;

    /// Pushes onto `out` every state `op` can lead to from `state` (none: illegal there). The
    /// operation's timestamps are passed so that hidden, time-dependent steps (expiry) can be
    /// folded into the step, and so is `horizon_ns`, a bound on the operation's linearization
    /// point: the earliest return (`u64::MAX` for open operations) among this operation and
    /// every operation not linearized before it. Each of those takes effect at or after this
    /// one and no later than it returns, so this one takes effect no later than `horizon_ns`
    /// (which is at most its own return). A hidden step "before this operation" may only use
    /// instants up to `horizon_ns`.
    fn step(
        &self,
        state: &Self::State,
        op: &Operation<Self::Op>,
        horizon_ns: u64,
        out: &mut Vec<Self::State>,
    );
}

/// One operation of the history: its invocation and return times on the harness clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation<O> {
    pub inv_ns: u64,
    /// `None`: unknown outcome (`info`), open to the end of time, may never take effect.
    pub ret_ns: Option<u64>,
    pub op: O,
}

/// What the search concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Some order of the operations respects real time and the model.
    Linearizable,
    /// No such order exists.
    NotLinearizable {
        /// The longest sequence of operations (indexes into the input, in linearization
        /// order) the search managed to place.
        longest: Vec<usize>,
        /// The operation whose return was reached, after that longest prefix, while it could
        /// not be placed (the first operation that could not be linearized).
        stuck: Option<usize>,
    },
    /// The time budget ran out before an answer.
    Unknown,
}

/// A fixed-size bit set over operation indexes (the set of linearized operations).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct BitSet(Vec<u64>);

impl BitSet {
    fn new(n: usize) -> BitSet {
        BitSet(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// The successors of a whole state set, in canonical form (sorted, no duplicates).
fn step_set<M: Model>(
    model: &M,
    states: &[M::State],
    op: &Operation<M::Op>,
    horizon_ns: u64,
) -> Vec<M::State> {
    let mut out = Vec::new();
    for s in states {
        model.step(s, op, horizon_ns, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// Most configurations the memo cache keeps (about 100 bytes each). Past it the search goes
/// on without remembering new ones: still sound, only slower, and memory stays bounded even
/// with a long budget.
const CACHE_ENTRIES_MAX: usize = 4_000_000;

/// No entry (end of the linked list).
const NIL: usize = usize::MAX;

/// Decides whether `ops` is linearizable with respect to `model`, giving up with
/// [`Outcome::Unknown`] once `budget` has elapsed (the problem is NP-complete; a run must not
/// hang on a pathological history).
pub fn check<M: Model>(model: &M, ops: &[Operation<M::Op>], budget: Duration) -> Outcome {
    let start = Instant::now();
    let n = ops.len();

    // Entries 0..n are calls, n..2n returns; entry 2n is the list head.
    let call = |op: usize| op;
    let ret = |op: usize| n + op;
    let mut order: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        order.push((o.inv_ns, 0, call(i)));
        let r = match o.ret_ns {
            Some(r) => r.max(o.inv_ns),
            None => u64::MAX,
        };
        order.push((r, 1, ret(i)));
    }
    order.sort_unstable();
    let head = 2 * n;
    let mut next = vec![NIL; 2 * n + 1];
    let mut prev = vec![NIL; 2 * n + 1];
    let mut last = head;
    for &(_, _, e) in &order {
        next[last] = e;
        prev[e] = last;
        last = e;
    }
    // The return entries alone, in the same order (indexed like `next`; calls unused).
    let mut rnext = vec![NIL; 2 * n + 1];
    let mut rprev = vec![NIL; 2 * n + 1];
    let mut last = head;
    for &(_, _, e) in order.iter().filter(|o| o.1 == 1) {
        rnext[last] = e;
        rprev[e] = last;
        last = e;
    }
    // When each return entry happens (`u64::MAX` for open operations).
    let ret_time = |e: usize| -> u64 {
        ops[e - n]
            .ret_ns
            .map_or(u64::MAX, |r| r.max(ops[e - n].inv_ns))
    };

    // Lifting removes an operation's call then its return; unlifting restores them in the
    // reverse order, so the saved neighbour pointers are still right.
    let unlink = |next: &mut [usize], prev: &mut [usize], e: usize| {
        let (p, q) = (prev[e], next[e]);
        next[p] = q;
        if q != NIL {
            prev[q] = p;
        }
    };
    let relink = |next: &mut [usize], prev: &mut [usize], e: usize| {
        let (p, q) = (prev[e], next[e]);
        next[p] = e;
        if q != NIL {
            prev[q] = e;
        }
    };

    let mut state: Vec<M::State> = model.init();
    state.sort();
    state.dedup();
    let mut linearized = BitSet::new(n);
    let mut cache: HashSet<(BitSet, Vec<M::State>)> = HashSet::new();
    let mut stack: Vec<(usize, Vec<M::State>)> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut stuck: Option<usize> = None;
    let mut steps: u64 = 0;

    let mut e = next[head];
    loop {
        steps += 1;
        if steps.is_multiple_of(256) && start.elapsed() >= budget {
            return Outcome::Unknown;
        }
        if e == NIL {
            return Outcome::Linearizable;
        }
        if e < n {
            let op = e;
            let first_ret = rnext[head];
            let horizon = if first_ret == NIL {
                u64::MAX
            } else {
                ret_time(first_ret)
            };
            let new = step_set(model, &state, &ops[op], horizon);
            if !new.is_empty() {
                linearized.set(op);
                let seen = (linearized.clone(), new.clone());
                let fresh = if cache.len() < CACHE_ENTRIES_MAX {
                    cache.insert(seen)
                } else {
                    !cache.contains(&seen)
                };
                if fresh {
                    stack.push((e, std::mem::replace(&mut state, new)));
                    unlink(&mut next, &mut prev, call(op));
                    unlink(&mut next, &mut prev, ret(op));
                    unlink(&mut rnext, &mut rprev, ret(op));
                    e = next[head];
                    continue;
                }
                linearized.clear(op);
            }
            e = next[e];
        } else {
            let op = e - n;
            if ops[op].ret_ns.is_none() {
                // Only open (info) operations are left: they need not take effect.
                return Outcome::Linearizable;
            }
            if stuck.is_none() || stack.len() > longest.len() {
                longest = stack.iter().map(|&(c, _)| c).collect();
                stuck = Some(op);
            }
            let Some((c, saved)) = stack.pop() else {
                return Outcome::NotLinearizable { longest, stuck };
            };
            state = saved;
            linearized.clear(c);
            relink(&mut rnext, &mut rprev, ret(c));
            relink(&mut next, &mut prev, ret(c));
            relink(&mut next, &mut prev, call(c));
            e = next[c];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register holding one value; `Write(v)`, `Read(v)`, and `WriteSome(vs)`, which sets
    /// any one of `vs` (a nondeterministic step).
    struct Register;

    #[derive(Debug, Clone)]
    enum RegOp {
        Write(u32),
        Read(u32),
        WriteSome(Vec<u32>),
    }

    impl Model for Register {
        type State = u32;
        type Op = RegOp;
        fn init(&self) -> Vec<u32> {
            vec![0]
        }
        fn step(&self, s: &u32, op: &Operation<RegOp>, _horizon: u64, out: &mut Vec<u32>) {
            match &op.op {
                RegOp::Write(v) => out.push(*v),
                RegOp::Read(v) => {
                    if v == s {
                        out.push(*s)
                    }
                }
                RegOp::WriteSome(vs) => out.extend(vs.iter().copied()),
            }
        }
    }

    fn op<O>(inv: u64, ret: Option<u64>, op: O) -> Operation<O> {
        Operation {
            inv_ns: inv,
            ret_ns: ret,
            op,
        }
    }

    fn run(ops: &[Operation<RegOp>]) -> Outcome {
        check(&Register, ops, Duration::from_secs(5))
    }

    #[test]
    fn empty_history_is_linearizable() {
        assert_eq!(run(&[]), Outcome::Linearizable);
    }

    #[test]
    fn concurrent_write_may_be_seen_or_not() {
        let h = [
            op(0, Some(100), RegOp::Write(1)),
            op(10, Some(20), RegOp::Read(0)),
            op(30, Some(40), RegOp::Read(1)),
        ];
        assert_eq!(run(&h), Outcome::Linearizable);
    }

    #[test]
    fn stale_read_after_a_completed_write_is_not_linearizable() {
        let h = [
            op(0, Some(10), RegOp::Write(1)),
            op(20, Some(30), RegOp::Read(0)),
        ];
        match run(&h) {
            Outcome::NotLinearizable { longest, stuck } => {
                assert_eq!(longest, vec![0]);
                assert_eq!(stuck, Some(1));
            }
            other => panic!("expected not linearizable, got {other:?}"),
        }
    }

    #[test]
    fn reads_cannot_flip_back() {
        // Write 1 concurrent with two sequential reads 1 then 0: the second read is stale.
        let h = [
            op(0, Some(100), RegOp::Write(1)),
            op(10, Some(20), RegOp::Read(1)),
            op(30, Some(40), RegOp::Read(0)),
        ];
        assert!(matches!(run(&h), Outcome::NotLinearizable { .. }));
    }

    #[test]
    fn equal_timestamps_overlap() {
        // The read is invoked at the instant the write returns: calls sort first, so they
        // overlap and the read may precede the write.
        let h = [
            op(0, Some(10), RegOp::Write(1)),
            op(10, Some(20), RegOp::Read(0)),
        ];
        assert_eq!(run(&h), Outcome::Linearizable);
    }

    #[test]
    fn info_ops_may_happen_late_or_never() {
        // An info write may take effect after a later read...
        let late = [
            op(0, None, RegOp::Write(5)),
            op(10, Some(20), RegOp::Read(0)),
            op(30, Some(40), RegOp::Read(5)),
        ];
        assert_eq!(run(&late), Outcome::Linearizable);
        // ...or never, even when taking effect would be illegal.
        let never = [
            op(0, None, RegOp::Read(7)),
            op(10, Some(20), RegOp::Read(0)),
        ];
        assert_eq!(run(&never), Outcome::Linearizable);
        // But it happens at most once: 5, then 0, then 5 again is impossible.
        let twice = [
            op(0, None, RegOp::Write(5)),
            op(10, Some(20), RegOp::Read(5)),
            op(30, Some(40), RegOp::Write(0)),
            op(50, Some(60), RegOp::Read(5)),
        ];
        assert!(matches!(run(&twice), Outcome::NotLinearizable { .. }));
    }

    #[test]
    fn set_valued_states_keep_every_possibility() {
        let h = [
            op(0, Some(10), RegOp::WriteSome(vec![3, 4])),
            op(20, Some(30), RegOp::Read(4)),
            op(40, Some(50), RegOp::Read(4)),
        ];
        assert_eq!(run(&h), Outcome::Linearizable);
        let bad = [
            op(0, Some(10), RegOp::WriteSome(vec![3, 4])),
            op(20, Some(30), RegOp::Read(4)),
            op(40, Some(50), RegOp::Read(3)),
        ];
        assert!(matches!(run(&bad), Outcome::NotLinearizable { .. }));
    }

    /// Operations that must be placed in index order (`Nth(k)` is legal only as the k-th),
    /// recording the horizon each placement was given.
    struct Ordered(std::cell::RefCell<Vec<(usize, u64)>>);

    impl Model for Ordered {
        type State = usize;
        type Op = usize;
        fn init(&self) -> Vec<usize> {
            vec![0]
        }
        fn step(&self, s: &usize, op: &Operation<usize>, horizon: u64, out: &mut Vec<usize>) {
            if op.op == *s {
                self.0.borrow_mut().push((op.op, horizon));
                out.push(s + 1);
            }
        }
    }

    #[test]
    fn the_horizon_is_the_earliest_return_among_the_ops_not_yet_placed() {
        // 0 is long, 1 must follow it and returns at 20: 0 takes effect by 20, not by 100.
        // 2 is open and placed last: nothing bounds it.
        let h = [
            op(0, Some(100), 0),
            op(10, Some(20), 1),
            op(5, None, 2),
            op(30, Some(40), 3),
        ];
        let m = Ordered(Default::default());
        assert_eq!(check(&m, &h, Duration::from_secs(5)), Outcome::Linearizable);
        let placed = m.0.borrow().clone();
        assert_eq!(placed, vec![(0, 20), (1, 20), (2, 40), (3, 40)]);
    }

    #[test]
    fn pathological_history_runs_out_of_budget() {
        // 24 concurrent writes of distinct values and a read of a value nobody wrote: the
        // search must try every subset before giving up.
        let mut h: Vec<_> = (1..=24)
            .map(|v| op(0, Some(1_000), RegOp::Write(v)))
            .collect();
        h.push(op(0, Some(1_000), RegOp::Read(99)));
        assert_eq!(
            check(&Register, &h, Duration::from_millis(1)),
            Outcome::Unknown
        );
    }
}
