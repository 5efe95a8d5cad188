//! List-append integrity, one key at a time (a mini-Elle for single-key appends).
//!
//! Workers read a key's list, then write it back with one element appended (the last element
//! of the written list is the appended one). For baton the list is the record field written
//! with a fenced `Write`; for the canary it lives in harness memory (`MemRead`/`MemWrite`),
//! guarded only by the lease, and this checker is expected to find lost updates there.
//!
//! Per key, over `ok` reads:
//! - **divergent**: every read is a prefix of the longest one (one total order of appends);
//! - **backwards**: a read is no shorter than a read that returned before it was invoked;
//! - **lost**: the element of every `ok` write appears in every read invoked after the write
//!   returned;
//! - **duplicate**: no element appears twice in a read (an info write takes effect once);
//! - **phantom**: every element read was appended by some write (`ok` or `info`);
//! - **failed write visible**: elements only `fail` writes carried never appear;
//! - **from the future**: no element is read before any write of it was invoked;
//! - **token order** (baton only): tokens along a list never decrease;
//! - **final read**: the last read of each key holds every element acknowledged before it;
//! - **corrupt read** (baton only): no read comes back with a record list that cannot be
//!   decoded (`Reply::Corrupt`): the record would hold something no worker wrote.
//!
//! Each problem is reported once per element (the first read showing it), not once per read.

use std::collections::{HashMap, HashSet};

use super::{by_key, describe, secs, Found};
use crate::history::{Call, CheckResult, Elem, Kind, Op, Reply, Verdict};

/// Which list: baton's record (`Read`/`Write`) or the canary's memory (`MemRead`/`MemWrite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Baton,
    Canary,
}

struct ReadOp<'a> {
    op: &'a Op,
    list: &'a [Elem],
    ret: u64,
    set: HashSet<Elem>,
}

struct WriteOp<'a> {
    op: &'a Op,
    elem: Elem,
}

fn read_of(o: &Op, source: Source) -> Option<ReadOp<'_>> {
    let right_call = match source {
        Source::Baton => matches!(o.call, Call::Read),
        Source::Canary => matches!(o.call, Call::MemRead),
    };
    match (&o.reply, o.kind, o.ret_ns) {
        (Some(Reply::Read { list, .. }), Kind::Ok, Some(ret)) if right_call => Some(ReadOp {
            op: o,
            list,
            ret,
            set: list.iter().copied().collect(),
        }),
        _ => None,
    }
}

fn write_of(o: &Op, source: Source) -> Option<WriteOp<'_>> {
    let list = match (&o.call, source) {
        (Call::Write { list, .. }, Source::Baton) | (Call::MemWrite { list }, Source::Canary) => {
            list
        }
        _ => return None,
    };
    list.last().map(|&elem| WriteOp { op: o, elem })
}

/// Checks list integrity on every key (baton record lists or canary memory lists).
pub fn check(ops: &[Op], source: Source) -> CheckResult {
    let keys = by_key(ops);
    let mut found = Found::default();
    let (mut n_reads, mut n_ok, mut n_info, mut n_fail) = (0, 0, 0, 0);
    let (mut acked_final, mut held_final) = (0, 0);
    for (key, kops) in &keys {
        let reads: Vec<ReadOp> = kops.iter().filter_map(|o| read_of(o, source)).collect();
        let right_read = |o: &Op| match source {
            Source::Baton => matches!(o.call, Call::Read),
            Source::Canary => matches!(o.call, Call::MemRead),
        };
        for o in kops.iter().filter(|o| right_read(o)) {
            if let Some(Reply::Corrupt { text }) = &o.reply {
                found.add(
                    "corrupt read",
                    key,
                    Some(o.inv_ns),
                    format!(
                        "the list {:?} cannot be decoded, so the record holds something no worker \
                         wrote: {}",
                        super::clip(text, 80),
                        describe(o)
                    ),
                );
            }
        }
        let writes: Vec<WriteOp> = kops.iter().filter_map(|o| write_of(o, source)).collect();
        n_reads += reads.len();
        for w in &writes {
            match w.op.kind {
                Kind::Ok => n_ok += 1,
                Kind::Fail => n_fail += 1,
                _ => n_info += 1,
            }
        }
        let mut writers: HashMap<Elem, Vec<&WriteOp>> = HashMap::new();
        for w in &writes {
            writers.entry(w.elem).or_default().push(w);
        }
        let mut reported: HashSet<(&'static str, Elem)> = HashSet::new();
        let mut once = |kind: &'static str, e: Elem| reported.insert((kind, e));

        // Element by element.
        for r in &reads {
            let mut seen = HashSet::new();
            for (i, &x) in r.list.iter().enumerate() {
                if !seen.insert(x) && once("duplicate", x) {
                    found.add(
                        "duplicate",
                        key,
                        Some(r.op.inv_ns),
                        format!("{} appears twice in {}", x.encode(), describe(r.op)),
                    );
                }
                let ws = writers.get(&x).map(Vec::as_slice).unwrap_or(&[]);
                let done: Vec<&&WriteOp> = ws.iter().filter(|w| w.op.kind != Kind::Fail).collect();
                if ws.is_empty() {
                    if once("phantom", x) {
                        found.add(
                            "phantom",
                            key,
                            Some(r.op.inv_ns),
                            format!("{} was never written, yet {}", x.encode(), describe(r.op)),
                        );
                    }
                } else if done.is_empty() {
                    if once("failed write visible", x) {
                        found.add(
                            "failed write visible",
                            key,
                            Some(r.op.inv_ns),
                            format!(
                                "{} was only written by {}, yet {}",
                                x.encode(),
                                describe(ws[0].op),
                                describe(r.op)
                            ),
                        );
                    }
                } else if done.iter().all(|w| w.op.inv_ns > r.ret) && once("from the future", x) {
                    found.add(
                        "from the future",
                        key,
                        Some(r.op.inv_ns),
                        format!(
                            "{} read before it was written: {} then {}",
                            x.encode(),
                            describe(r.op),
                            describe(done[0].op)
                        ),
                    );
                }
                if source == Source::Baton && i > 0 {
                    let p = r.list[i - 1];
                    if x.token < p.token && once("token order", x) {
                        found.add(
                            "token order",
                            key,
                            Some(r.op.inv_ns),
                            format!(
                                "{} follows {} (token decreased) in {}",
                                x.encode(),
                                p.encode(),
                                describe(r.op)
                            ),
                        );
                    }
                }
            }
        }

        // One order: every read a prefix of the longest.
        if let Some(longest) = reads.iter().max_by_key(|r| r.list.len()) {
            for r in &reads {
                let i = r.list.iter().zip(longest.list).position(|(a, b)| a != b);
                if let Some(i) = i {
                    if once("divergent", r.list[i]) {
                        found.add(
                            "divergent",
                            key,
                            Some(r.op.inv_ns),
                            format!(
                                "at position {i}, {} has {} where {} has {}",
                                describe(r.op),
                                r.list[i].encode(),
                                describe(longest.op),
                                longest.list[i].encode()
                            ),
                        );
                    }
                }
            }
        }

        // No going back: reads by return time against each read's invocation.
        let mut by_ret: Vec<&ReadOp> = reads.iter().collect();
        by_ret.sort_by_key(|r| r.ret);
        let mut j = 0;
        let mut longest_before: Option<&ReadOp> = None;
        for r in &reads {
            while j < by_ret.len() && by_ret[j].ret < r.op.inv_ns {
                if longest_before.is_none_or(|l| by_ret[j].list.len() > l.list.len()) {
                    longest_before = Some(by_ret[j]);
                }
                j += 1;
            }
            if let Some(l) = longest_before {
                if r.list.len() < l.list.len() {
                    found.add(
                        "backwards",
                        key,
                        Some(r.op.inv_ns),
                        format!(
                            "{} holds {} elements, but {} (returned {}) held {}",
                            describe(r.op),
                            r.list.len(),
                            describe(l.op),
                            secs(l.ret),
                            l.list.len()
                        ),
                    );
                }
            }
        }

        // Acknowledged elements stay.
        for w in writes.iter().filter(|w| w.op.kind == Kind::Ok) {
            let Some(w_ret) = w.op.ret_ns else { continue };
            let missing: Vec<&ReadOp> = reads
                .iter()
                .filter(|r| r.op.inv_ns > w_ret && !r.set.contains(&w.elem))
                .collect();
            if let Some(first) = missing.first() {
                if once("lost", w.elem) {
                    found.add(
                        "lost",
                        key,
                        Some(first.op.inv_ns),
                        format!(
                            "{} acknowledged by {} is missing from {} (and {} later reads)",
                            w.elem.encode(),
                            describe(w.op),
                            describe(first.op),
                            missing.len() - 1
                        ),
                    );
                }
            }
        }

        // The final read holds everything acknowledged before it.
        if let Some(last) = reads.iter().max_by_key(|r| (r.op.inv_ns, r.ret)) {
            let acked: Vec<&WriteOp> = writes
                .iter()
                .filter(|w| {
                    w.op.kind == Kind::Ok && w.op.ret_ns.is_some_and(|t| t < last.op.inv_ns)
                })
                .collect();
            let missing: Vec<String> = acked
                .iter()
                .filter(|w| !last.set.contains(&w.elem))
                .map(|w| w.elem.encode())
                .collect();
            acked_final += acked.len();
            held_final += acked.len() - missing.len();
            if !missing.is_empty() {
                found.add(
                    "final read incomplete",
                    key,
                    Some(last.op.inv_ns),
                    format!(
                        "{} lacks {} of {} acknowledged elements: {}{}",
                        describe(last.op),
                        missing.len(),
                        acked.len(),
                        missing[..missing.len().min(10)].join(" "),
                        if missing.len() > 10 { " ..." } else { "" }
                    ),
                );
            }
        }
    }
    let verdict = if found.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let (name, what) = match source {
        Source::Baton => ("lists", "record lists"),
        Source::Canary => ("canary-lists", "canary memory lists"),
    };
    let summary = format!(
        "{what}: {} keys, {n_reads} ok reads, {n_ok} ok appends ({n_info} info, {n_fail} failed); \
         final reads hold {held_final} of {acked_final} acknowledged elements{}",
        keys.len(),
        found.suffix()
    );
    found.result(name, verdict, summary)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    fn baton(ops: &[Op]) -> CheckResult {
        check(ops, Source::Baton)
    }

    /// The violation kinds found, in order.
    fn kinds(r: &CheckResult) -> Vec<&str> {
        r.violations
            .iter()
            .map(|v| v.message.split(':').next().unwrap())
            .collect()
    }

    #[test]
    fn a_growing_list_passes() {
        let r = baton(&[
            read_ok("c1", None, &[], 0, 10),
            write_ok("c1", 5, &[e(5, 1)], 20, 30),
            // Concurrent with the write: may or may not see it.
            read_ok("c2", None, &[], 25, 35),
            read_ok("c2", None, &[e(5, 1)], 40, 50),
            write_info("c1", 5, &[e(5, 1), e(5, 2)], 60),
            write_refused("c3", 3, &[e(5, 1), e(3, 9)], true, 60, 70),
            write_ok("c4", 8, &[e(5, 1), e(5, 2), e(8, 3)], 100, 110),
            read_ok("c2", None, &[e(5, 1), e(5, 2), e(8, 3)], 200, 210),
        ]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert_eq!(
            r.summary,
            "record lists: 1 keys, 4 ok reads, 2 ok appends (1 info, 1 failed); final reads hold \
             2 of 2 acknowledged elements"
        );
    }

    #[test]
    fn a_lost_element_fails() {
        let r = baton(&[
            write_ok("c1", 5, &[e(5, 1)], 0, 10),
            write_ok("c1", 5, &[e(5, 1), e(5, 2)], 20, 30),
            read_ok("c2", None, &[e(5, 1)], 40, 50),
        ]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(kinds(&r), ["lost", "final read incomplete"], "{r:#?}");
        assert!(
            r.violations[0].message.contains("5:2 acknowledged"),
            "{r:#?}"
        );
        assert!(r.violations[1]
            .message
            .contains("lacks 1 of 2 acknowledged elements: 5:2"));
        assert!(
            r.summary.contains("final reads hold 1 of 2"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn duplicates_fail() {
        let r = baton(&[
            write_info("c1", 5, &[e(5, 1)], 0),
            read_ok("c2", None, &[e(5, 1), e(5, 1)], 40, 50),
        ]);
        assert_eq!(kinds(&r), ["duplicate"]);
        assert!(r.violations[0].message.contains("5:1 appears twice"));
    }

    #[test]
    fn phantoms_and_failed_writes_fail() {
        let r = baton(&[
            write_refused("c1", 3, &[e(3, 1)], true, 0, 10),
            read_ok("c2", None, &[e(3, 1), e(7, 7)], 40, 50),
        ]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(kinds(&r), ["failed write visible", "phantom"]);
    }

    #[test]
    fn reading_an_element_before_its_write_fails() {
        let r = baton(&[
            read_ok("c2", None, &[e(5, 1)], 0, 10),
            write_ok("c1", 5, &[e(5, 1)], 20, 30),
        ]);
        assert_eq!(kinds(&r), ["from the future"]);
    }

    #[test]
    fn divergent_reads_fail() {
        let r = baton(&[
            write_ok("c1", 5, &[e(5, 1)], 0, 10),
            write_info("c2", 6, &[e(6, 2)], 20),
            write_ok("c1", 5, &[e(5, 1), e(5, 3)], 30, 40),
            read_ok("c3", None, &[e(6, 2)], 15, 45),
            read_ok("c3", None, &[e(5, 1), e(5, 3)], 50, 60),
        ]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(kinds(&r), ["divergent", "lost"], "{r:#?}");
        assert!(r.violations[0].message.contains("at position 0"));
    }

    #[test]
    fn decreasing_tokens_fail_for_baton_only() {
        let ops = [
            write_ok("c1", 8, &[e(8, 1)], 0, 10),
            write_ok("c2", 5, &[e(8, 1), e(5, 2)], 20, 30),
            read_ok("c3", None, &[e(8, 1), e(5, 2)], 40, 50),
        ];
        let r = baton(&ops);
        assert_eq!(kinds(&r), ["token order"]);
        assert!(r.violations[0]
            .message
            .starts_with("token order: 5:2 follows 8:1"));
        let canary: Vec<Op> = ops
            .iter()
            .map(|o| {
                let mut c = o.clone();
                c.call = match &o.call {
                    Call::Write { list, .. } => Call::MemWrite { list: list.clone() },
                    _ => Call::MemRead,
                };
                c
            })
            .collect();
        assert_eq!(check(&canary, Source::Canary).verdict, Verdict::Pass);
    }

    #[test]
    fn a_corrupt_read_fails() {
        let r = baton(&[
            write_ok("c1", 5, &[e(5, 1)], 0, 10),
            read_corrupt("c2", "5:1 5:", 20, 30),
            read_ok("c2", None, &[e(5, 1)], 40, 50),
        ]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(kinds(&r), ["corrupt read"], "{r:#?}");
        assert!(
            r.violations[0]
                .message
                .contains("the list \"5:1 5:\" cannot be decoded"),
            "{r:#?}"
        );
        assert_eq!(r.violations[0].t_ns, Some(20 * MS));
    }

    #[test]
    fn a_read_going_backwards_fails() {
        let r = baton(&[
            write_info("c1", 5, &[e(5, 1)], 0),
            read_ok("c2", None, &[e(5, 1)], 10, 20),
            read_ok("c3", None, &[], 30, 40),
        ]);
        assert_eq!(kinds(&r), ["backwards"]);
    }

    #[test]
    fn the_final_read_need_not_hold_a_concurrent_write() {
        let r = baton(&[
            write_ok("c1", 5, &[e(5, 1)], 0, 10),
            write_ok("c1", 5, &[e(5, 1), e(5, 2)], 20, 30),
            write_ok("c1", 5, &[e(5, 1), e(5, 2), e(5, 3)], 55, 75),
            read_ok("c2", None, &[e(5, 1), e(5, 2)], 60, 70),
        ]);
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert!(
            r.summary.contains("final reads hold 2 of 2"),
            "{}",
            r.summary
        );
    }
}
