//! The segment log's crash rules, each on real files: a torn write, a stale record behind
//! it, a truncate, purges, a segment that does not follow.

use std::path::{Path, PathBuf};

use openraft::testing::log_id;
use openraft::EntryPayload;

use super::*;

/// Small segments, so that a few dozen entries span several.
const SMALL: u64 = 512;

fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Blank,
    }
}

fn blanks(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    indexes.map(|i| blank(term, i)).collect()
}

fn open(dir: &Path, purged: Option<u64>) -> Segments {
    Segments::open_sized(dir, purged, SMALL).unwrap().0
}

/// A log whose first segment holds every record of a test.
fn open_big(dir: &Path) -> Segments {
    Segments::open_sized(dir, None, 1 << 20).unwrap().0
}

/// Records 1 to 10 written and synced in one big segment: its file and where record 6 is.
fn ten_records(dir: &Path) -> (PathBuf, u64) {
    let log = open_big(dir);
    log.append(blanks(1, 1..=10)).unwrap();
    log.sync().unwrap();
    place(&log, dir, 6)
}

/// (term, index) of every kept entry.
fn kept(log: &Segments) -> Vec<(u64, u64)> {
    log.read(0, u64::MAX)
        .unwrap()
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

fn expect(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Vec<(u64, u64)> {
    indexes.map(|i| (term, i)).collect()
}

fn seg_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    files
}

/// Where the record of `index` is: its file and the offset of its header.
fn place(log: &Segments, dir: &Path, index: u64) -> (PathBuf, u64) {
    let inner = log.lock();
    let loc = inner.locs[(index - inner.first) as usize];
    (dir.join(seg_name(loc.seq)), loc.offset)
}

fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn entries_survive_a_reopen_across_segments_and_reads_give_any_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=40)).unwrap();
    log.sync().unwrap();
    let segments = log.segment_count();
    assert!(
        segments > 3,
        "40 records span several {SMALL}-byte segments"
    );
    drop(log);
    let log = open(dir.path(), None);
    assert_eq!(kept(&log), expect(1, 1..=40));
    assert_eq!(log.segment_count(), segments);
    assert_eq!(log.last_log_id(), Some(log_id(1, 1, 40)));
    let some: Vec<u64> = log
        .read(17, 23)
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(some, (17..23).collect::<Vec<_>>());
    // Appends go on after the reopen, in order only.
    log.append(blanks(2, 41..=42)).unwrap();
    let err = log.append([blank(2, 44)]).unwrap_err();
    assert!(err.to_string().contains("next index is 43"), "{err}");
}

#[test]
fn a_torn_record_ends_the_log_and_the_rest_of_its_segment_is_zeroed() {
    let dir = tempfile::tempdir().unwrap();
    let (file, at) = ten_records(dir.path());
    // One byte of record 6's entry changed: its CRC no longer matches.
    let mut byte = [0u8; 1];
    std::fs::File::open(&file)
        .unwrap()
        .read_exact_at(&mut byte, at + HEADER_BYTES as u64 + 3)
        .unwrap();
    overwrite(&file, at + HEADER_BYTES as u64 + 3, &[byte[0] ^ 0xff]);
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    assert_eq!(kept(&log), expect(1, 1..=5));
    assert_eq!(found.cut_at.map(|(_, o)| o), Some(at));
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        bytes[at as usize..].iter().all(|b| *b == 0),
        "records 6 to 10 are zeroed on disk"
    );
    // The log goes on from 6.
    log.append(blanks(2, 6..=7)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open_big(dir.path());
    let mut want = expect(1, 1..=5);
    want.extend(expect(2, 6..=7));
    assert_eq!(kept(&log), want);
}

#[test]
fn a_stale_record_behind_a_torn_one_never_rejoins_the_log() {
    // A crash wrote records 7 to 10 but not 6 (pages reach the disk in any order). Without
    // zeroing what follows the log's end, a new record 6 of the same length would end
    // exactly where the stale 7 begins, and the next open would read 7 to 10 back: entries
    // never acknowledged, behind an entry they never followed.
    let dir = tempfile::tempdir().unwrap();
    let (file, at) = ten_records(dir.path());
    overwrite(&file, at, &[0u8; HEADER_BYTES]);
    let log = open_big(dir.path());
    assert_eq!(kept(&log), expect(1, 1..=5));
    log.append([blank(1, 6)]).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open_big(dir.path());
    assert_eq!(kept(&log), expect(1, 1..=6), "7 to 10 stay gone");
}

#[test]
fn a_truncate_is_on_disk_when_it_returns_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=40)).unwrap();
    log.sync().unwrap();
    let before = seg_files(dir.path()).len();
    log.truncate(12).unwrap();
    assert_eq!(kept(&log), expect(1, 1..=11));
    assert_eq!(log.last_log_id(), Some(log_id(1, 1, 11)));
    assert!(
        seg_files(dir.path()).len() < before,
        "later segments deleted"
    );
    // No sync after it: the truncate itself was durable.
    drop(log);
    let log = open(dir.path(), None);
    assert_eq!(kept(&log), expect(1, 1..=11));
    log.append(blanks(3, 12..=15)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open(dir.path(), None);
    let mut want = expect(1, 1..=11);
    want.extend(expect(3, 12..=15));
    assert_eq!(kept(&log), want);
    // A truncate of everything leaves an empty log that takes any next index... from the cut.
    log.truncate(1).unwrap();
    assert_eq!(kept(&log), vec![]);
    assert_eq!(log.last_log_id(), None);
    drop(log);
    let log = open(dir.path(), None);
    assert_eq!(kept(&log), vec![]);
}

#[test]
fn a_purge_deletes_whole_segments_and_one_beyond_the_end_starts_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=40)).unwrap();
    log.sync().unwrap();
    let before = seg_files(dir.path()).len();
    let first_segment = std::fs::read(&seg_files(dir.path())[0]).unwrap();
    log.purge(25).unwrap();
    assert_eq!(kept(&log), expect(1, 26..=40));
    let after = seg_files(dir.path()).len();
    assert!(
        after < before,
        "segments of purged entries deleted: {before} -> {after}"
    );
    drop(log);
    let log = open(dir.path(), Some(25));
    assert_eq!(kept(&log), expect(1, 26..=40));
    // A crash took back the deletion of the first segment (deletions are not synced): its
    // entries are purged, and the log after them is kept whole, although the next segment
    // does not start right after it.
    drop(log);
    std::fs::write(dir.path().join(seg_name(1)), &first_segment).unwrap();
    let log = open(dir.path(), Some(25));
    assert_eq!(kept(&log), expect(1, 26..=40));
    assert!(!dir.path().join(seg_name(1)).exists(), "removed again");
    // A snapshot installed from the leader: everything purged, the log goes on after it.
    log.purge(100).unwrap();
    assert_eq!(kept(&log), vec![]);
    assert_eq!(log.last_log_id(), None);
    let err = log.append([blank(2, 102)]).unwrap_err();
    assert!(err.to_string().contains("next index is 101"), "{err}");
    // An entry at or below the purge point is in the snapshot already: not kept again.
    log.append([blank(1, 50)]).unwrap();
    assert_eq!(kept(&log), vec![]);
    log.append(blanks(2, 101..=105)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open(dir.path(), Some(100));
    assert_eq!(kept(&log), expect(2, 101..=105));
    // A gap the purge point does not cover ends the log: with the purge point at 25 (as if
    // the purge to 100 had not reached the disk), 101 does not follow 40.
    drop(log);
    let log = open(dir.path(), Some(25));
    assert!(
        kept(&log).iter().all(|(_, i)| *i <= 40),
        "nothing after the gap: {:?}",
        kept(&log)
    );
}

#[test]
fn a_segment_that_does_not_follow_the_log_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=40)).unwrap();
    log.sync().unwrap();
    // Tear the first record of the second segment: the segments after it are writes that a
    // crash left without what precedes them.
    let second = {
        let inner = log.lock();
        let seq = *inner.segments.keys().nth(1).unwrap();
        inner.locs.iter().position(|l| l.seq == seq).unwrap() as u64 + 1
    };
    let (file, at) = place(&log, dir.path(), second);
    let files = seg_files(dir.path()).len();
    drop(log);
    overwrite(&file, at, &[0u8; HEADER_BYTES]);
    let (log, found) = Segments::open_sized(dir.path(), None, SMALL).unwrap();
    assert_eq!(kept(&log), expect(1, 1..=second - 1));
    assert_eq!(
        found.segments_removed,
        files - 1,
        "every segment after the first"
    );
    assert_eq!(seg_files(dir.path()).len(), 1);
    // The log goes on in the first segment and beyond, and reads back whole.
    log.append(blanks(2, second..=40)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open(dir.path(), None);
    let mut want = expect(1, 1..=second - 1);
    want.extend(expect(2, second..=40));
    assert_eq!(kept(&log), want);
}

#[test]
fn a_record_larger_than_a_segment_gets_one_of_its_own() {
    use crate::raft_types::Node;
    use openraft::Membership;
    use std::collections::{BTreeMap, BTreeSet};
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=3)).unwrap();
    // A membership of many nodes, with long addresses: larger than 512 bytes.
    let nodes: BTreeMap<u64, Node> = (1..=20)
        .map(|id| (id, Node::new(format!("{id}.{}", "a".repeat(40)))))
        .collect();
    let voters: BTreeSet<u64> = nodes.keys().copied().collect();
    let membership: Membership<u64, Node> = Membership::new(vec![voters], nodes);
    let big = Entry {
        log_id: log_id(1, 1, 4),
        payload: EntryPayload::Membership(membership),
    };
    assert!(encode(&big).len() as u64 > SMALL);
    log.append([big.clone(), blank(1, 5)]).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open(dir.path(), None);
    assert_eq!(kept(&log), expect(1, 1..=5));
    assert_eq!(log.read(4, 5).unwrap(), vec![big]);
}

#[test]
fn a_cut_below_the_first_kept_entry_cuts_every_kept_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=40)).unwrap();
    log.purge(25).unwrap();
    // Entries 10 to 25 are purged already: the cut takes 26 to 40.
    log.truncate(10).unwrap();
    assert_eq!(kept(&log), vec![]);
    log.append(blanks(2, 26..=30)).unwrap();
    log.sync().unwrap();
    drop(log);
    let log = open(dir.path(), Some(25));
    assert_eq!(kept(&log), expect(2, 26..=30));
}

/// Flips one byte of the entry of the record at `at` in `file`.
fn flip_entry_byte(file: &Path, at: u64) {
    let mut byte = [0u8; 1];
    let spot = at + HEADER_BYTES as u64 + 3;
    std::fs::File::open(file)
        .unwrap()
        .read_exact_at(&mut byte, spot)
        .unwrap();
    overwrite(file, spot, &[byte[0] ^ 0xff]);
}

/// Records 1 to 10 synced, then 11 and 12 (behind the mark that says 10 is durable) synced:
/// the file and where record 6 is.
fn twelve_records_vouched_through_ten(dir: &Path) -> (PathBuf, u64) {
    let log = open_big(dir);
    log.append(blanks(1, 1..=10)).unwrap();
    log.sync().unwrap();
    log.append(blanks(1, 11..=12)).unwrap();
    log.sync().unwrap();
    assert_eq!(log.durable(), Some(12));
    place(&log, dir, 6)
}

#[test]
fn a_flipped_byte_before_the_durable_end_is_damage_kept_and_repaired_not_cut_silently() {
    let dir = tempfile::tempdir().unwrap();
    let (file, at) = twelve_records_vouched_through_ten(dir.path());
    let before = std::fs::read(&file).unwrap();
    flip_entry_byte(&file, at);
    let damaged = std::fs::read(&file).unwrap();
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    let damage = found.damage.expect("damage, not a torn tail");
    assert_eq!((damage.index, damage.offset), (6, at));
    assert_eq!(
        damage.through, 12,
        "the mark (10) and the whole records after the damage (to 12)"
    );
    // The log is cut as after a crash, but the node knows what it lacks...
    assert_eq!(kept(&log), expect(1, 1..=5));
    assert_eq!(log.repair(), Some(damage.clone()));
    // ... and the damaged file is kept, as it was.
    let copy = damage.kept.join(file.file_name().unwrap());
    assert_eq!(std::fs::read(&copy).unwrap(), damaged);
    assert_ne!(damaged, before);
    // A restart before the repair still knows it (the cut files no longer show it).
    drop(log);
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    assert!(found.damage.is_none());
    assert_eq!(log.repair().map(|r| r.through), Some(12));
    // The leader refills it: not repaired until entries through 12 are on disk.
    log.append(blanks(2, 6..=11)).unwrap();
    log.sync().unwrap();
    assert!(log.repair().is_some(), "11 of 12 is not enough");
    log.append([blank(2, 12)]).unwrap();
    assert!(log.repair().is_some(), "written is not on disk");
    log.sync().unwrap();
    assert_eq!(log.repair(), None);
    assert!(!dir.path().join(REPAIR_FILE).exists());
    drop(log);
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    assert!(found.damage.is_none() && log.repair().is_none());
    let mut want = expect(1, 1..=5);
    want.extend(expect(2, 6..=12));
    assert_eq!(kept(&log), want);
}

#[test]
fn a_bad_record_beyond_the_last_mark_is_a_torn_tail_and_a_canary_knob_is_not_set() {
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = twelve_records_vouched_through_ten(dir.path());
    let at = {
        let log = open_big(dir.path());
        place(&log, dir.path(), 11).1
    };
    // 11 was written after the last mark (10): a crash could have torn it.
    flip_entry_byte(&file, at);
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    assert!(found.damage.is_none(), "{:?}", found.damage);
    assert_eq!(kept(&log), expect(1, 1..=10));
    assert!(log.repair().is_none());
    assert!(!crate::chaos::trust_damaged_log());
}

#[test]
fn a_zeroed_header_before_the_durable_end_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (file, at) = twelve_records_vouched_through_ten(dir.path());
    // A lost sector reads as zeros: record 6's header looks like the log's clean end.
    overwrite(&file, at, &[0u8; HEADER_BYTES]);
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    assert_eq!(found.damage.map(|d| (d.index, d.through)), Some((6, 12)));
    assert_eq!(kept(&log), expect(1, 1..=5));
}

#[test]
fn an_idle_mark_vouches_for_the_last_round() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_big(dir.path());
    log.append(blanks(1, 1..=10)).unwrap();
    log.sync().unwrap();
    let dirty = log.write_mark_if_due().unwrap().expect("a mark is due");
    dirty.files.iter().for_each(|f| f.sync_data().unwrap());
    log.flushed(&dirty).unwrap();
    assert!(
        log.write_mark_if_due().unwrap().is_none(),
        "one mark per durable end"
    );
    let (file, at) = place(&log, dir.path(), 10);
    drop(log);
    flip_entry_byte(&file, at);
    let (log, found) = Segments::open_sized(dir.path(), None, 1 << 20).unwrap();
    assert_eq!(found.damage.map(|d| (d.index, d.through)), Some((10, 10)));
    assert_eq!(kept(&log), expect(1, 1..=9));
}

#[test]
fn a_lost_segment_in_the_middle_is_damage_and_a_segment_cut_short_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    for i in 1..=40 {
        log.append([blank(1, i)]).unwrap();
        log.sync().unwrap();
    }
    let files = seg_files(dir.path());
    assert!(files.len() > 3, "{files:?}");
    drop(log);
    let middle = &files[1];
    std::fs::rename(middle, dir.path().join("lost")).unwrap();
    let (log, found) = Segments::open_sized(dir.path(), None, SMALL).unwrap();
    let damage = found
        .damage
        .expect("a hole before the durable end is damage");
    assert!(damage.through >= 39, "{damage:?}");
    assert!(log.repair().is_some());
    let kept_files: Vec<_> = std::fs::read_dir(&damage.kept).unwrap().collect();
    assert_eq!(
        kept_files.len(),
        files.len() - 2,
        "every segment after the hole"
    );
    drop(log);

    // A segment file shorter than it was made: what it held past the cut is unknown.
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), None);
    log.append(blanks(1, 1..=40)).unwrap();
    log.sync().unwrap();
    let files = seg_files(dir.path());
    drop(log);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&files[1])
        .unwrap();
    f.set_len(SMALL / 2).unwrap();
    let err = Segments::open_sized(dir.path(), None, SMALL)
        .err()
        .expect("refused");
    assert!(
        matches!(&err, LogOpenError::Shortened { file, .. } if *file == files[1]),
        "{err}"
    );
}

#[test]
fn a_truncate_lowers_the_durable_end_and_a_flush_from_before_it_does_not_raise_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_big(dir.path());
    log.append(blanks(1, 1..=10)).unwrap();
    let before_cut = log.take_dirty();
    log.truncate(6).unwrap();
    assert_eq!(log.durable(), None, "nothing was flushed yet");
    before_cut.files.iter().for_each(|f| f.sync_data().unwrap());
    log.flushed(&before_cut).unwrap();
    assert_eq!(
        log.durable(),
        None,
        "10 is cut: the old flush does not count"
    );
    log.sync().unwrap();
    assert_eq!(log.durable(), Some(5));
    log.truncate(3).unwrap();
    assert_eq!(log.durable(), Some(2));
    log.append(blanks(2, 3..=4)).unwrap();
    log.sync().unwrap();
    assert_eq!(log.durable(), Some(4));
}

/// A byte changed on disk under a running log is caught when the record is read back, not
/// applied or shipped as if whole: the read fails, names the entry, and marks the storage
/// failed (the node then stops; its next open finds the damage and has the log refilled).
#[test]
fn a_record_damaged_while_the_log_runs_fails_its_read_and_marks_the_storage_failed() {
    for (what, damage) in [
        ("a byte of the entry", HEADER_BYTES as u64 + 3),
        ("a byte of the index", 8),
        ("a byte of the checksum", 4),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = open_big(dir.path());
        log.append(blanks(1, 1..=10)).unwrap();
        log.sync().unwrap();
        assert_eq!(kept(&log).len(), 10, "{what}");
        let (file, at) = place(&log, dir.path(), 6);
        let mut byte = [0u8; 1];
        std::fs::File::open(&file)
            .unwrap()
            .read_exact_at(&mut byte, at + damage)
            .unwrap();
        overwrite(&file, at + damage, &[byte[0] ^ 0x01]);
        // Entries before it still read; the damaged one is never handed out.
        assert_eq!(log.read(1, 6).unwrap().len(), 5, "{what}");
        assert!(log.failure().is_none(), "{what}");
        let e = log.read(4, 8).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{what}: {e}");
        assert!(e.to_string().contains("log entry 6"), "{what}: {e}");
        let failure = log.failure().expect("the storage is marked failed");
        assert!(failure.contains("log entry 6"), "{what}: {failure}");
    }
}
