//! The damage done on plain files, and each judging function failing on what it checks.

use std::path::Path;

use super::*;
use crate::history::{Call, Reply};

/// A log dir with a full segment (`used` bytes of records, then zeros) and a later one with
/// too few records to damage.
fn log_dir(used: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut full = vec![0u8; 4 * used];
    for (i, b) in full.iter_mut().take(used).enumerate() {
        *b = (i % 251) as u8 | 1;
    }
    std::fs::write(dir.path().join("00000000000000000001.seg"), &full).unwrap();
    let mut tiny = vec![0u8; 4 * used];
    tiny[..16].fill(7);
    std::fs::write(dir.path().join("00000000000000000002.seg"), &tiny).unwrap();
    std::fs::write(dir.path().join("spare.tmp"), vec![9u8; 64]).unwrap();
    dir
}

fn diff(a: &[u8], b: &[u8]) -> Vec<usize> {
    (0..a.len()).filter(|i| a[*i] != b[*i]).collect()
}

#[test]
fn a_flipped_bit_lands_in_the_first_two_thirds_of_the_last_segment_with_records() {
    let used = 8192;
    for pick in [0, 1, 5461, 5462, 123_456_789, u64::MAX] {
        let dir = log_dir(used);
        let path = dir.path().join("00000000000000000001.seg");
        let before = std::fs::read(&path).unwrap();
        let d = damage_log(3, dir.path(), DamageKind::FlippedBit, pick).unwrap();
        let after = std::fs::read(&path).unwrap();
        assert_eq!(d.file, path, "the tiny later segment is passed over");
        assert_eq!((d.node, d.used), (3, used as u64));
        assert_eq!(after.len(), before.len(), "a damage never cuts a file");
        let changed = diff(&before, &after);
        assert_eq!(changed, vec![d.offset as usize]);
        assert_eq!((before[changed[0]] ^ after[changed[0]]).count_ones(), 1);
        assert!(d.offset < used as u64 * 2 / 3, "offset {}", d.offset);
    }
}

#[test]
fn a_zeroed_sector_is_aligned_within_the_span_and_changes_something() {
    let used = 8192;
    for pick in [0, 3, 9, 1 << 40] {
        let dir = log_dir(used);
        let path = dir.path().join("00000000000000000001.seg");
        let before = std::fs::read(&path).unwrap();
        let d = damage_log(1, dir.path(), DamageKind::ZeroedSector, pick).unwrap();
        let after = std::fs::read(&path).unwrap();
        assert_eq!(after.len(), before.len());
        assert_eq!(d.offset % SECTOR_BYTES, 0);
        assert!(d.offset + SECTOR_BYTES <= used as u64 * 2 / 3);
        let changed = diff(&before, &after);
        assert!(!changed.is_empty());
        assert!(changed
            .iter()
            .all(|i| (*i as u64) >= d.offset && (*i as u64) < d.offset + SECTOR_BYTES));
        assert!(after[d.offset as usize..][..SECTOR_BYTES as usize]
            .iter()
            .all(|b| *b == 0));
    }
}

#[test]
fn a_log_without_records_enough_is_not_damaged_but_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("00000000000000000001.seg"), vec![0u8; 4096]).unwrap();
    let e = damage_log(1, dir.path(), DamageKind::FlippedBit, 7).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(
        std::fs::read(dir.path().join("00000000000000000001.seg")).unwrap(),
        vec![0u8; 4096]
    );
}

#[test]
fn repair_and_damage_folders_are_read_from_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    assert!(!under_repair(data));
    assert_eq!(damage_found(data), 0);
    std::fs::create_dir_all(data.join("log/damaged/1700000000000")).unwrap();
    std::fs::create_dir_all(data.join("log/damaged/1700000000500")).unwrap();
    std::fs::write(data.join("log/repair.json"), "{}").unwrap();
    assert!(under_repair(data));
    assert_eq!(damage_found(data), 2);
}

fn damage(node: u64) -> Damage {
    Damage {
        node,
        file: Path::new("log/00000000000000000001.seg").to_path_buf(),
        used: 8192,
        offset: 100,
        kind: DamageKind::FlippedBit,
    }
}

fn sample(node: u64, leader: bool, ready: bool) -> RepairSample {
    RepairSample {
        node,
        t_ns: 5_000_000_000,
        leader,
        ready,
    }
}

#[test]
fn a_node_under_repair_that_leads_or_says_ready_fails_the_damaged_node_check() {
    let damages = [damage(1), damage(2), damage(1)];
    let found = [(1, 2), (2, 1), (3, 0)];
    let quiet = [sample(1, false, false), sample(2, false, false)];
    let ok = judge_damaged_nodes(&damages, &quiet, &found, &[]);
    assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
    for bad in [
        sample(1, true, false),
        sample(2, false, true),
        sample(1, true, true),
    ] {
        let r = judge_damaged_nodes(&damages, &[quiet[0].clone(), bad], &found, &[]);
        assert_eq!(r.verdict, Verdict::Fail);
        assert_eq!(r.violations.len(), 1, "{r:?}");
        assert_eq!(r.violations[0].t_ns, Some(5_000_000_000));
    }
}

#[test]
fn a_damage_taken_for_a_torn_tail_fails_the_damaged_node_check() {
    let damages = [damage(1), damage(1)];
    let r = judge_damaged_nodes(&damages, &[], &[(1, 1), (2, 0)], &[]);
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.violations[0].message.contains("torn tail"), "{r:?}");
    let r = judge_damaged_nodes(&damages, &[], &[(1, 2), (2, 0)], &[]);
    assert_eq!(r.verdict, Verdict::Pass);
}

#[test]
fn a_refill_that_did_not_come_before_the_next_damage_fails_the_damaged_node_check() {
    let damages = [damage(1)];
    let wait = |still: Vec<u64>| RefillWait {
        t_ns: 9_000_000_000,
        waited: Duration::from_millis(if still.is_empty() { 700 } else { 20_000 }),
        still,
    };
    let r = judge_damaged_nodes(&damages, &[], &[(1, 1)], &[wait(vec![])]);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert!(r.summary.contains("at most 700 ms"), "{}", r.summary);
    let r = judge_damaged_nodes(&damages, &[], &[(1, 1)], &[wait(vec![]), wait(vec![1])]);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_eq!(r.violations.len(), 1, "{r:?}");
    assert_eq!(r.violations[0].t_ns, Some(9_000_000_000));
    assert!(r.violations[0].message.contains("nodes [1]"), "{r:?}");
}

const S: Nanos = 1_000_000_000;

fn stopped(node: u64, after_ms: u64, code: Option<i32>, how: &str) -> EioRecord {
    EioRecord {
        node,
        led: true,
        start_ns: 10 * S,
        failed_syncs: 3,
        first_failed_ns: Some(10 * S + 1_000_000),
        noticed_ns: Some(10 * S + 1_500_000),
        exit: Some((10 * S + 1_000_000 + after_ms * 1_000_000, code, how.into())),
        restarted_ns: Some(20 * S),
    }
}

fn read_by(name: &str, inv: Nanos, kind: Kind) -> Op {
    Op {
        process: 1,
        workload: "lease-register".into(),
        key: "lr/0".into(),
        client: "c1".into(),
        name: name.into(),
        call: Call::Read,
        kind,
        reply: (kind == Kind::Ok).then_some(Reply::Read {
            holder: None,
            list: Vec::new(),
        }),
        inv_ns: inv,
        ret_ns: (kind != Kind::Info).then_some(inv + 1_000_000),
    }
}

#[test]
fn the_moment_a_node_learned_its_flush_failed_is_read_from_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("n1.log");
    std::fs::write(
        &log,
        format!(
            "2026-12-04T11:30:00.000001Z ERROR baton_node::store::flush: {FLUSH_FAILED} (old)\n\
             2026-12-04T11:34:21.643842Z ERROR baton_node::store::flush: {FLUSH_FAILED} (it \
             never retries a failed fsync) error=Input/output error (os error 5)\n\
             baton-node: error: storage failed, this node stops\n"
        ),
    )
    .unwrap();
    let at = failure_noticed_at(&log).unwrap();
    let want = humantime::parse_rfc3339("2026-12-04T11:34:21.643842Z").unwrap();
    assert_eq!(at, want);
    assert_eq!(failure_noticed_at(&dir.path().join("none.log")), None);
}

#[test]
fn a_node_that_stops_at_once_with_its_cause_passes_the_eio_check() {
    let how = format!("node 2 exited (exit status: 1); its log ends:\n... {STORAGE_FAILED} ...");
    let ops = [
        read_by("reader-n2", 9 * S, Kind::Ok),
        // Sent while the disk failed, answered by the restarted node.
        Op {
            ret_ns: Some(21 * S),
            ..read_by("reader-n2", 10 * S + 2_000_000, Kind::Ok)
        },
        read_by("reader-n2", 12 * S, Kind::Info),
        read_by("reader-n1", 12 * S, Kind::Ok),
        read_by("reader-n2", 21 * S, Kind::Ok),
    ];
    let r = judge_eio(&[stopped(2, 40, Some(1), &how)], &ops);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
}

#[test]
fn a_node_that_runs_on_stops_late_or_quietly_or_answers_fails_the_eio_check() {
    let how = format!("exit status: 1; {STORAGE_FAILED}");
    let cases = [
        EioRecord {
            exit: None,
            ..stopped(2, 0, Some(1), &how)
        },
        EioRecord {
            first_failed_ns: None,
            failed_syncs: 0,
            exit: None,
            ..stopped(2, 0, Some(1), &how)
        },
        stopped(2, EIO_EXIT_LIMIT.as_millis() as u64 + 1, Some(1), &how),
        stopped(2, 10, Some(0), &how),
        stopped(2, 10, None, &how),
        stopped(2, 10, Some(1), "exit status: 1; something else"),
    ];
    for case in cases {
        let r = judge_eio(std::slice::from_ref(&case), &[]);
        assert_eq!(r.verdict, Verdict::Fail, "{case:?}");
    }
    let answered = [read_by("reader-n2", 10 * S + 2_000_000, Kind::Ok)];
    let r = judge_eio(&[stopped(2, 40, Some(1), &how)], &answered);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_eq!(r.violations[0].key.as_deref(), Some("lr/0"));
    // Sent after the failed sync but before the node could know (its sync had not returned):
    // nothing could refuse it. Without the node's word, the failed sync's time counts.
    let early = [read_by("reader-n2", 10 * S + 1_200_000, Kind::Ok)];
    let r = judge_eio(&[stopped(2, 40, Some(1), &how)], &early);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    let unknown = EioRecord {
        noticed_ns: None,
        ..stopped(2, 40, Some(1), &how)
    };
    let r = judge_eio(&[unknown], &early);
    assert_eq!(r.verdict, Verdict::Fail, "{r:?}");
    // A follower relays what the leader answers: counted, not failed.
    let follower = EioRecord {
        led: false,
        ..stopped(2, 40, Some(1), &how)
    };
    let r = judge_eio(&[follower], &answered);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert!(
        r.summary.contains("1 pinned reads relayed"),
        "{}",
        r.summary
    );
}
