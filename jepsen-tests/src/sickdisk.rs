//! A sick disk on one node: damage to a stopped node's Raft log (the `corrupt` fault), and
//! the checks of what the node must do about its disk: a node whose log was damaged neither
//! leads nor says it is ready until it is refilled, and notices the damage at all; a node
//! whose fsync failed (the `eio` fault) stops, non-zero and soon, and answers nothing after.
//!
//! The damage is done on the files from outside, while the node is down, as a disk that
//! returns other bytes than it was given would leave them: one flipped bit or one zeroed
//! 512-byte sector inside the used part of the last segment that holds records, in its first
//! two thirds, so that a later mark vouches for the damaged record. Files are never cut (a
//! segment cut short makes the node refuse to start, by design: that is another fault).
//! The judging functions are pure, so that a test can show each fails on what it checks.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::history::{CheckResult, Kind, Nanos, Op, Verdict, Violation};

/// Where a node's Raft log lives in its data dir.
pub const LOG_DIR: &str = "log";
/// The repair obligation a node writes when it finds damage (baton's `REPAIR_FILE`).
pub const REPAIR_FILE: &str = "repair.json";
/// Where a node keeps copies of the damaged files, one folder per damage found (baton's
/// `DAMAGED_DIR`, inside the log dir).
pub const DAMAGED_DIR: &str = "damaged";
/// A sector: what a zeroed-sector damage wipes.
pub const SECTOR_BYTES: u64 = 512;
/// The damage lands within this share of the used bytes (numerator, denominator): well
/// before the log's last mark, so that it is damage and not a torn tail.
pub const DAMAGE_SPAN: (u64, u64) = (2, 3);
/// A segment with fewer used bytes than this is passed over for an earlier one: its first
/// two thirds could hold no record that a later mark vouches for.
pub const DAMAGE_USED_BYTES_MIN: u64 = 4 * SECTOR_BYTES;
/// How long a node whose fsync failed may take to stop, counted from the first failed sync.
pub const EIO_EXIT_LIMIT: Duration = Duration::from_secs(5);
/// What a node says when it stops on a failed sync (`node/src/node.rs`).
pub const STORAGE_FAILED: &str = "storage failed, this node stops";

/// How a segment is damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// One bit of one byte flipped.
    FlippedBit,
    /// One 512-byte sector (aligned) zeroed.
    ZeroedSector,
}

/// One damage done to a node's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    pub node: u64,
    pub file: PathBuf,
    /// Bytes of records in the file (before its trailing zeros).
    pub used: u64,
    /// Where the damage starts.
    pub offset: u64,
    pub kind: DamageKind,
}

/// Damages node `node`'s log in `log_dir` as `kind` says, at a spot chosen by `pick` (any
/// number; the same number gives the same spot): in the last segment file that holds at
/// least [`DAMAGE_USED_BYTES_MIN`] bytes of records, within the first [`DAMAGE_SPAN`] of
/// them. The file is synced; its length never changes.
pub fn damage_log(
    node: u64,
    log_dir: &Path,
    kind: DamageKind,
    pick: u64,
) -> std::io::Result<Damage> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(log_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    for file in segments.iter().rev() {
        let bytes = std::fs::read(file)?;
        let Some(last) = bytes.iter().rposition(|b| *b != 0) else {
            continue;
        };
        let used = last as u64 + 1;
        if used < DAMAGE_USED_BYTES_MIN {
            continue;
        }
        let span = used * DAMAGE_SPAN.0 / DAMAGE_SPAN.1;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(file)?;
        let offset = match kind {
            DamageKind::FlippedBit => {
                let at = pick % span;
                let bit = (pick / span) % 8;
                f.write_all_at(&[bytes[at as usize] ^ (1 << bit)], at)?;
                at
            }
            DamageKind::ZeroedSector => {
                // An aligned sector that ends within the span and is not all zeros already.
                let sectors = span / SECTOR_BYTES;
                let first = pick % sectors;
                let at = (0..sectors)
                    .map(|i| (first + i) % sectors * SECTOR_BYTES)
                    .find(|at| {
                        bytes[*at as usize..(*at + SECTOR_BYTES) as usize]
                            .iter()
                            .any(|b| *b != 0)
                    })
                    .unwrap_or(first * SECTOR_BYTES);
                f.write_all_at(&[0; SECTOR_BYTES as usize], at)?;
                at
            }
        };
        f.sync_all()?;
        return Ok(Damage {
            node,
            file: file.clone(),
            used,
            offset,
            kind,
        });
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "no segment in {} holds {DAMAGE_USED_BYTES_MIN} bytes of records",
            log_dir.display()
        ),
    ))
}

/// Folders of damaged files a node kept (one per damage it found), in its data dir.
pub fn damage_found(data_dir: &Path) -> usize {
    std::fs::read_dir(data_dir.join(LOG_DIR).join(DAMAGED_DIR))
        .map(|d| d.filter_map(Result::ok).count())
        .unwrap_or(0)
}

/// Whether the node's repair obligation is on disk now.
pub fn under_repair(data_dir: &Path) -> bool {
    data_dir.join(LOG_DIR).join(REPAIR_FILE).exists()
}

/// Before a `corrupt` fault damages another log, the schedule waits for the earlier damages
/// to be refilled (a second damaged log at once would leave no majority of voters, which is
/// beyond the fault's model: one node's damaged disk): how long it waited, and the nodes
/// still waiting when it gave up (then no more damage is done).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillWait {
    pub t_ns: Nanos,
    pub waited: Duration,
    pub still: Vec<u64>,
}

/// One look at a node whose `log/repair.json` existed before it was asked and still existed
/// after it answered: what it said meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairSample {
    pub node: u64,
    pub t_ns: Nanos,
    /// Its status said it is the leader.
    pub leader: bool,
    /// Its `/readyz` answered 200.
    pub ready: bool,
}

/// The `damaged-node` check: a node never leads nor says it is ready while its repair
/// obligation is on disk (`samples`, only those taken while it was), and every damage done
/// was found (`found[node]` folders of damaged files against the damages done to it), and
/// every damage was refilled before the next (`waits`, within the schedule's limit).
pub fn judge_damaged_nodes(
    damages: &[Damage],
    samples: &[RepairSample],
    found: &[(u64, usize)],
    waits: &[RefillWait],
) -> CheckResult {
    let mut violations = Vec::new();
    for w in waits.iter().filter(|w| !w.still.is_empty()) {
        violations.push(Violation {
            key: None,
            t_ns: Some(w.t_ns),
            message: format!(
                "nodes {:?} still waited for their damaged logs to be refilled after {} ms \
                 more (and the calm after the fault): no further damage was done",
                w.still,
                w.waited.as_millis()
            ),
        });
    }
    for s in samples.iter().filter(|s| s.leader || s.ready) {
        violations.push(Violation {
            key: None,
            t_ns: Some(s.t_ns),
            message: format!(
                "node {} {} while its log/{REPAIR_FILE} said its damaged log was not yet \
                 refilled",
                s.node,
                match (s.leader, s.ready) {
                    (true, true) => "led and said it was ready",
                    (true, false) => "led",
                    _ => "said it was ready (/readyz 200)",
                }
            ),
        });
    }
    for (node, kept) in found {
        let done = damages.iter().filter(|d| d.node == *node).count();
        if *kept < done {
            violations.push(Violation::general(format!(
                "node {node}'s log was damaged {done} times but it kept the damaged files of \
                 only {kept} (log/{DAMAGED_DIR}/): it took damage for a torn tail"
            )));
        }
    }
    let leading = samples.iter().filter(|s| s.leader).count();
    let ready = samples.iter().filter(|s| s.ready).count();
    CheckResult {
        checker: "damaged-node".into(),
        verdict: if violations.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        summary: format!(
            "{} damages done, {} found; {} looks at a node under repair: {leading} leading, \
             {ready} ready; the next damage waited at most {} ms for a refill",
            damages.len(),
            found.iter().map(|(_, k)| k).sum::<usize>(),
            samples.len(),
            waits
                .iter()
                .map(|w| w.waited.as_millis())
                .max()
                .unwrap_or(0)
        ),
        violations,
    }
}

/// What one `eio` fault saw: the node's disk failed its syncs from `start_ns` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EioRecord {
    pub node: u64,
    /// It led when its disk began to fail. A follower passes what it cannot answer on to the
    /// leader and relays the answer (it keeps doing so while it stops): only a leader's
    /// answers are its own.
    pub led: bool,
    pub start_ns: Nanos,
    /// Syncs the disk failed, and when the first one did.
    pub failed_syncs: u64,
    pub first_failed_ns: Option<Nanos>,
    /// When the node itself learned of it (its log's line [`FLUSH_FAILED`], written just
    /// after it stopped answering reads), on the history's clock: between the failed sync
    /// and this moment no process can know.
    pub noticed_ns: Option<Nanos>,
    /// When the harness saw the process gone, its exit code (None: killed by a signal) and
    /// how it ended (the end of its log).
    pub exit: Option<(Nanos, Option<i32>, String)>,
    /// When it was started again on a sound disk.
    pub restarted_ns: Option<Nanos>,
}

/// What a node logs the moment its log flush fails (`node/src/store/flush.rs`).
pub const FLUSH_FAILED: &str = "a log flush failed: this node stops";

/// The time of the last [`FLUSH_FAILED`] line in a node's log (RFC 3339 at the line's start).
pub fn failure_noticed_at(log: &Path) -> Option<std::time::SystemTime> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().rev().find(|l| l.contains(FLUSH_FAILED))?;
    humantime::parse_rfc3339_weak(line.split_whitespace().next()?.trim_end_matches('Z')).ok()
}

/// The `eio` check: every node whose disk failed a sync stopped by itself, with a non-zero
/// exit code and the cause, within [`EIO_EXIT_LIMIT`] of the first failed sync; and, if it
/// led, no read pinned to it (`reader-n<id>`) sent after it learned of the failure (its
/// `noticed_ns`; the failed sync's time when its log does not say) was answered before its
/// restart. A read sent earlier may have been answered in the moments before the node's sync
/// returned the error: nothing can refuse it then.
pub fn judge_eio(records: &[EioRecord], ops: &[Op]) -> CheckResult {
    let mut violations = Vec::new();
    let mut relayed = 0;
    let limit_ns = EIO_EXIT_LIMIT.as_nanos() as Nanos;
    for r in records {
        let at = |message: String| Violation {
            key: None,
            t_ns: Some(r.start_ns),
            message,
        };
        let Some(first) = r.first_failed_ns else {
            violations.push(at(format!(
                "node {}'s disk was set to fail its syncs, and it made none before the fault \
                 ended: the fault did not bite",
                r.node
            )));
            continue;
        };
        match &r.exit {
            None => violations.push(at(format!(
                "node {} ran on after its fsync failed (the first at {:.3} s)",
                r.node,
                first as f64 / 1e9
            ))),
            Some((t, code, how)) => {
                if *t > first + limit_ns {
                    violations.push(at(format!(
                        "node {} stopped {} ms after its first failed fsync (limit {} ms)",
                        r.node,
                        (t - first) / 1_000_000,
                        EIO_EXIT_LIMIT.as_millis()
                    )));
                }
                if !matches!(code, Some(c) if *c != 0) {
                    violations.push(at(format!(
                        "node {} ended with exit code {code:?} after its fsync failed, not a \
                         non-zero code: {how}",
                        r.node
                    )));
                }
                if !how.contains(STORAGE_FAILED) {
                    violations.push(at(format!(
                        "node {} did not say why it stopped (\"{STORAGE_FAILED}\"): {how}",
                        r.node
                    )));
                }
            }
        }
        // A pinned client retries until the node answers: an answer after the restart is
        // the sound node's, whenever the request was first sent.
        let reader = format!("reader-n{}", r.node);
        let until = r.restarted_ns.unwrap_or(Nanos::MAX);
        let knew = r.noticed_ns.unwrap_or(first);
        let answered = ops.iter().filter(|o| {
            o.name == reader
                && o.kind == Kind::Ok
                && o.inv_ns >= knew
                && o.ret_ns.is_some_and(|t| t < until)
        });
        if !r.led {
            relayed += answered.count();
            continue;
        }
        for o in answered {
            violations.push(Violation {
                key: Some(o.key.clone()),
                t_ns: o.ret_ns,
                message: format!(
                    "node {}, the leader, answered a {} sent after it learned its fsync failed \
                     and before it was restarted",
                    r.node,
                    o.call.name()
                ),
            });
        }
    }
    let stopped = records.iter().filter(|r| r.exit.is_some()).count();
    CheckResult {
        checker: "eio".into(),
        verdict: if violations.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        summary: format!(
            "{} disks failed {} syncs; {stopped} nodes stopped (the slowest {} ms after its \
             first failed sync); {relayed} pinned reads relayed to the leader by a failing \
             follower",
            records.len(),
            records.iter().map(|r| r.failed_syncs).sum::<u64>(),
            records
                .iter()
                .filter_map(|r| Some(r.exit.as_ref()?.0.saturating_sub(r.first_failed_ns?)))
                .max()
                .unwrap_or(0)
                / 1_000_000
        ),
        violations,
    }
}

#[cfg(test)]
mod tests;
