//! The Raft log in plain files: one device wait per flush.
//!
//! sled made each log flush two device waits (its buffer write with `sync_file_range`, then
//! our `fdatasync`); here a flush is one `fdatasync` of the files written since the last one.
//! It is one wait only because nothing but data changes: the records are written in place
//! into segment files that were filled with zeros and synced before use, so the file size
//! and extents never change under a flush (an appending file's `fdatasync` also commits its
//! new size, and measured slower than sled).
//!
//! Layout, in `log/` of the data dir:
//! - `NNNNNNNNNNNNNNNNNNNN.seg` (a sequence number): segments, each [`SEGMENT_BYTES`] of
//!   records followed by zeros;
//! - `spare.tmp`: the next segment, being zeroed by a background thread; renamed to its
//!   sequence number (and the directory synced) when the current one is full.
//!
//! A record is `len: u32 | crc32: u32 | index: u64 | entry` (little-endian; the CRC covers
//! the index and the entry; the entry is the bincode of the openraft `Entry`). A zero length
//! ends a segment's records.
//!
//! What a crash can leave, and how opening reads it back: the records written since the last
//! completed flush may be partly on disk, in any order of pages. So the log ends at the first
//! record that is torn, zero, of the wrong index or of a lower term than the one before it;
//! everything after that point is unacknowledged and is removed (the rest of that segment is
//! zeroed, later segments are deleted, and both are on disk before the log is used), so that
//! a later, shorter record can never line up with a stale one behind it. `truncate` zeroes
//! what it cuts, on disk, before it returns, for the same reason. Segments are always
//! consecutive runs of indexes; the only gap allowed is after a purge beyond the last entry
//! (a snapshot installed from the leader), where the next entry starts a new segment.
//!
//! Purging deletes whole segments whose entries are all purged; the purge point itself is
//! kept in the meta file (`meta`), written durably before any segment goes.
//!
//! ## Damage is not a crash (data format 7)
//!
//! A crash can only leave the records written since the last completed flush torn; a record
//! that fails its checksum *before* that point is damage (a flipped bit, a lost sector), and
//! cutting the log there would silently drop entries this node acknowledged: with one more
//! node down, a majority without them could then elect a leader and lose them for good. So
//! the log records how far it was durable: after each flush, the next write puts a **mark**
//! first (a record whose index is [`MARK_INDEX`] and whose entry is the index through which
//! the log was on disk), and an idle log gets one from the flusher
//! ([`Segments::write_mark_if_due`]), as a clean stop does. Opening reads on past the first
//! bad record (every later record that is whole, in this segment and the later ones): if a mark
//! there says the log was durable at or beyond the bad record, it is damage. Then the files
//! from the damaged segment on are copied to `damaged/` (kept, never deleted), a repair
//! obligation ([`REPAIR_FILE`]: hold entries through index N before voting again) is written
//! durably, and only then is the log cut as after a crash; the node does not vote, campaign
//! or report ready until the leader has refilled its log through N ([`Segments::repair`]).
//! A bad record beyond the last mark is taken for a crash's torn tail, as before: the window
//! this leaves is the last flush round of a node that stopped without a clean stop.
//! A segment file shorter than it was made cannot say what it held: opening refuses it.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::limits::{MARK_SCAN_SPAN, SEGMENT_BYTES};
use crate::raft_types::{Entry, LogId};

use super::{decode, encode};

mod files;
mod inner;

use files::*;

/// Bytes before each record's entry: length, CRC32, index.
const HEADER_BYTES: usize = 16;
/// Zeros are written in chunks of this size.
const ZERO_CHUNK_BYTES: usize = 1 << 20;
const SPARE: &str = "spare.tmp";
/// A new segment larger than [`SEGMENT_BYTES`] is made under this name, then renamed.
const BIG: &str = "big.tmp";
/// The index of a mark record: no entry has it. Its entry is the index (u64, little-endian)
/// through which the log was durable when the mark was written.
pub const MARK_INDEX: u64 = u64::MAX;
/// A pending repair of damage found at an open (JSON, written durably): see [`Repair`].
pub const REPAIR_FILE: &str = "repair.json";
/// Where the files of a damaged log are copied before it is cut, one folder per open.
pub const DAMAGED_DIR: &str = "damaged";

/// Where a record is: its segment, the offset of its header, the length of its entry.
#[derive(Clone, Copy, Debug)]
struct Loc {
    seq: u64,
    offset: u64,
    len: u32,
}

struct Segment {
    file: Arc<File>,
    size: u64,
    /// The index of its last record, if it has any.
    last: Option<u64>,
}

struct Inner {
    dir: PathBuf,
    segments: BTreeMap<u64, Segment>,
    /// The segment written to: the last one.
    current: u64,
    /// Where the next record goes in `current`; zeros from here to its end.
    write_at: u64,
    /// `locs[i]` is the record of index `first + i`.
    locs: VecDeque<Loc>,
    first: u64,
    last_log_id: Option<LogId>,
    /// Everything at or below this index is purged: the only gap an append may open.
    purged: Option<u64>,
    /// Files written since the last `take_dirty`.
    dirty: Vec<Arc<File>>,
    spare: Option<JoinHandle<io::Result<File>>>,
    /// Size of a new segment: [`SEGMENT_BYTES`], smaller in tests.
    segment_bytes: u64,
    /// The highest index on disk (flushed) and still in the log.
    durable: Option<u64>,
    /// Bumped by every truncate and reset: a flush that began before one may not raise
    /// `durable` to entries the cut removed.
    generation: u64,
    /// The highest `durable` written in a mark so far (0: none).
    mark_written: u64,
    /// Damage found at an open and not yet refilled from the leader.
    repair: Option<Repair>,
}

/// What a flush covers: the files written since the last one, and the log's last index
/// (in `generation`) when they were taken.
pub struct Dirty {
    pub files: Vec<Arc<File>>,
    generation: u64,
    last: Option<u64>,
}

/// Damage found before the log's durable end: the log was cut at it, and the node must hold
/// entries through `through` again (from the leader) before it votes, campaigns or reports
/// ready. Kept in [`REPAIR_FILE`] until then, so that a restart meanwhile still knows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repair {
    /// The highest index this node's files show it had on disk: the marks and the whole
    /// records found after the damage.
    pub through: u64,
    /// The segment file of the first damaged record, and the offset of that record.
    pub file: PathBuf,
    pub offset: u64,
    /// The index that record should have had.
    pub index: u64,
    /// Where the damaged files were copied.
    pub kept: PathBuf,
}

/// Why the log cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum LogOpenError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(
        "log segment {} is {len} bytes, shorter than the {expected} it was made with: its end \
         was lost, and with it what this node had acknowledged",
        file.display()
    )]
    Shortened {
        file: PathBuf,
        len: u64,
        expected: u64,
    },
    #[error("{}: unreadable ({detail})", file.display())]
    RepairFile { file: PathBuf, detail: String },
}

/// The log's segment files. Shared by the log store's clones and the flusher.
pub struct Segments {
    inner: Mutex<Inner>,
    /// The first failed write or sync of the log or its meta (`set_failure`).
    failure: Mutex<Option<String>>,
}

/// What `open` found: how much of the files was the log, for the log line.
#[derive(Debug, Default)]
pub struct Recovered {
    pub entries: u64,
    /// The segment and offset where the log ended before bytes that were not zero (writes
    /// a crash cut short, or damage): they were zeroed.
    pub cut_at: Option<(u64, u64)>,
    /// Segments after the log's end, removed (not counting segments wholly purged).
    pub segments_removed: usize,
    /// Damage found at this open (see [`Repair`]); None if the log ended as a crash leaves it.
    pub damage: Option<Repair>,
    /// The highest index a mark in the files vouched for.
    pub vouched: u64,
}

impl Segments {
    /// Opens the log in `dir` (made if absent), ending it where a crash cut it and keeping
    /// damage aside for repair (see the module doc). `purged`: the purge point kept in the meta file.
    pub fn open(dir: &Path, purged: Option<u64>) -> Result<(Segments, Recovered), LogOpenError> {
        Segments::open_sized(dir, purged, SEGMENT_BYTES)
    }

    /// `open`, making new segments of `segment_bytes` (tests use small ones).
    pub fn open_sized(
        dir: &Path,
        purged: Option<u64>,
        segment_bytes: u64,
    ) -> Result<(Segments, Recovered), LogOpenError> {
        std::fs::create_dir_all(dir)?;
        let mut seqs = Vec::new();
        for item in std::fs::read_dir(dir)? {
            let path = item?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if let Some(seq) = name
                .strip_suffix(".seg")
                .and_then(|s| s.parse::<u64>().ok())
            {
                seqs.push(seq);
            } else if name.ends_with(".tmp") {
                std::fs::remove_file(&path)?;
            }
        }
        seqs.sort_unstable();
        let repair_path = dir.join(REPAIR_FILE);
        let mut repair = read_repair(&repair_path)?;
        let mut found = Recovered::default();
        let mut segments = BTreeMap::new();
        let mut locs = VecDeque::new();
        let mut first = purged.map_or(0, |p| p + 1);
        let mut last_log_id: Option<LogId> = None;
        // The segment and offset where the log ends.
        let mut end: Option<(u64, u64)> = None;
        // Bytes that are not zero follow the log's end.
        let mut end_leftovers = false;
        // Where the log stopped before something that is not zero (a crash's torn tail, or
        // damage): its segment, offset and the index that should have been there.
        let mut broke_at: Option<(u64, u64, u64)> = None;
        let mut marks_kept = 0u64; // the highest mark in what is kept
        let mut after = Evidence::default();
        let mut to_remove = Vec::new();
        for &seq in &seqs {
            let path = dir.join(seg_name(seq));
            let bytes = std::fs::read(&path)?;
            let size = bytes.len() as u64;
            let next = last_log_id.map_or(first, |l| l.index + 1);
            if let Some((_, _, index)) = broke_at {
                // After the log's end: read only for what it shows.
                after.read(&bytes, 0, index);
                to_remove.push(seq);
                continue;
            }
            let mut at = 0usize;
            let mut seg_last = None;
            while let Some((index, entry_bytes)) = parse(&bytes, at) {
                if index == MARK_INDEX {
                    let Some(value) = mark_value(entry_bytes) else {
                        break;
                    };
                    marks_kept = marks_kept.max(value);
                    at += HEADER_BYTES + entry_bytes.len();
                    continue;
                }
                let Ok(entry) = decode::<Entry>(entry_bytes) else {
                    break;
                };
                if entry.log_id.index != index {
                    break;
                }
                let in_sequence = match last_log_id {
                    None => purged.is_none_or(|p| index <= p + 1),
                    // A new segment may jump ahead over purged entries only: after a purge
                    // beyond the last entry, or past a purged segment whose deletion a crash
                    // took back (deletions are not synced).
                    Some(prev) => {
                        (index == prev.index + 1
                            || (seg_last.is_none()
                                && index > prev.index
                                && purged.is_some_and(|p| index <= p + 1)))
                            && term(&entry.log_id) >= term(&prev)
                    }
                };
                if !in_sequence {
                    break;
                }
                if purged.is_none_or(|p| index > p) {
                    if locs.is_empty() {
                        first = index;
                    }
                    locs.push_back(Loc {
                        seq,
                        offset: at as u64,
                        len: entry_bytes.len() as u32,
                    });
                    found.entries += 1;
                }
                last_log_id = Some(entry.log_id);
                seg_last = Some(index);
                at += HEADER_BYTES + entry_bytes.len();
            }
            if !made_size(size, segment_bytes) {
                return Err(LogOpenError::Shortened {
                    file: path,
                    len: size,
                    expected: segment_bytes,
                });
            }
            let leftovers = bytes[at..].iter().any(|b| *b != 0);
            if seg_last.is_none() && end.is_some() {
                // An empty segment is only ever the last; whatever follows is not the log.
                if leftovers || seqs.last() != Some(&seq) {
                    broke_at = Some((seq, 0, next));
                    after.read(&bytes, 0, next);
                }
                to_remove.push(seq);
                continue;
            }
            if leftovers {
                found.cut_at = Some((seq, at as u64));
                let next = last_log_id.map_or(first, |l| l.index + 1);
                broke_at = Some((seq, at as u64, next));
                after.read(&bytes, at, next);
            }
            end = Some((seq, at as u64));
            end_leftovers = leftovers;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)?;
            segments.insert(
                seq,
                Segment {
                    file: Arc::new(file),
                    size,
                    last: seg_last,
                },
            );
            if seg_last.is_none() && !leftovers {
                // An empty segment, all zeros: the log ends here (anything after is removed,
                // and read for what it shows).
                broke_at = Some((seq, at as u64, next));
            }
        }
        if to_remove.is_empty() && !end_leftovers {
            // Nothing followed the log's end but zeros: it ended cleanly.
            broke_at = None;
        }
        found.vouched = marks_kept.max(after.marks);
        // Damage: a mark after the log's end vouches for the entry that should have been
        // there. Its files are kept, and the obligation to refill it written, before the cut.
        if let Some((seq, offset, index)) = broke_at {
            if after.marks >= index && !crate::chaos::trust_damaged_log() {
                let kept: Vec<u64> = seqs.iter().copied().filter(|s| *s >= seq).collect();
                let damage = Repair {
                    through: after.marks.max(after.seen),
                    file: dir.join(seg_name(seq)),
                    offset,
                    index,
                    kept: keep_aside(dir, &kept)?,
                };
                let merged = match repair.take() {
                    Some(r) if r.through > damage.through => Repair {
                        through: r.through,
                        ..damage.clone()
                    },
                    _ => damage.clone(),
                };
                super::write_durably(
                    &repair_path,
                    &serde_json::to_vec_pretty(&merged).expect("a repair serializes"),
                )?;
                repair = Some(merged);
                found.damage = Some(damage);
            }
        }
        // A last entry at or below the purge point is not kept: the purge point says it.
        if last_log_id.is_some_and(|l| purged.is_some_and(|p| l.index <= p)) {
            last_log_id = None;
        }
        if locs.is_empty() {
            first = match (last_log_id, purged) {
                (Some(l), Some(p)) => l.index.max(p) + 1,
                (Some(l), None) => l.index + 1,
                (None, Some(p)) => p + 1,
                (None, None) => 0,
            };
        }
        let (current, write_at) = match end {
            Some(end) => end,
            None => {
                let seq = seqs.last().map_or(1, |s| s + 1);
                let file = prepare_as(dir, SPARE, seq, segment_bytes)?;
                segments.insert(
                    seq,
                    Segment {
                        file: Arc::new(file),
                        size: segment_bytes,
                        last: None,
                    },
                );
                (seq, 0)
            }
        };
        // Whatever follows the log's end in its last segment goes, on disk, before use (after
        // a clean stop there is nothing: zeros only).
        if end_leftovers {
            let seg = &segments[&current];
            write_zeros(&seg.file, write_at, seg.size)?;
        }
        // Segments wholly purged are not needed.
        let purged_segments: Vec<u64> = segments
            .iter()
            .filter(|(seq, s)| {
                **seq != current && s.last.is_some_and(|l| purged.is_some_and(|p| l <= p))
            })
            .map(|(seq, _)| *seq)
            .collect();
        found.segments_removed = to_remove.len();
        for seq in purged_segments {
            segments.remove(&seq);
            to_remove.push(seq);
        }
        for seq in &to_remove {
            std::fs::remove_file(dir.join(seg_name(*seq)))?;
        }
        // What is kept is on disk before it counts as durable: a process killed before its
        // flush left writes that a restart reads back from the page cache.
        for seg in segments.values() {
            seg.file.sync_data()?;
        }
        sync_dir(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        let durable = last_log_id.map(|l| l.index);
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            segments,
            current,
            write_at,
            locs,
            first,
            last_log_id,
            purged,
            dirty: Vec::new(),
            spare: None,
            segment_bytes,
            durable,
            generation: 0,
            mark_written: marks_kept,
            repair,
        };
        inner.check_repaired()?;
        inner.start_spare();
        Ok((
            Segments {
                inner: Mutex::new(inner),
                failure: Mutex::new(None),
            },
            found,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("log segments lock")
    }

    /// The id of the last entry, if any is kept.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.lock().last_log_id
    }

    /// Writes `entries` after the last one: readable at once, durable after the next sync
    /// of the files `take_dirty` returns.
    pub fn append(&self, entries: impl IntoIterator<Item = Entry>) -> io::Result<()> {
        let mut inner = self.lock();
        let mut batch: Vec<u8> = Vec::new();
        let mut batch_at = inner.write_at;
        inner.mark_into(&mut batch);
        for entry in entries {
            let index = entry.log_id.index;
            if inner.purged.is_some_and(|p| index <= p) {
                // Already in the snapshot the purge point stands for: nothing to keep.
                // (openraft does not send such; its storage suite does.)
                continue;
            }
            if let Some(next) = inner.next_index() {
                if index != next {
                    // What was accepted before it is written, so the files match `locs`.
                    inner.write(batch_at, &batch)?;
                    return Err(io::Error::other(format!(
                        "log append of index {index}, but the next index is {next}"
                    )));
                }
            }
            let bytes = encode(&entry);
            let rec = record(index, &bytes);
            let seg = &inner.segments[&inner.current];
            // A segment holds a run of consecutive indexes: after a purge beyond the last
            // entry, the next starts a new one.
            let gap = seg.last.is_some_and(|l| index != l + 1);
            if gap || inner.write_at + rec.len() as u64 > seg.size {
                inner.write(batch_at, &batch)?;
                batch.clear();
                inner.roll(rec.len() as u64)?;
                batch_at = inner.write_at;
            }
            let loc = Loc {
                seq: inner.current,
                offset: inner.write_at,
                len: bytes.len() as u32,
            };
            if inner.locs.is_empty() {
                inner.first = index;
            }
            inner.locs.push_back(loc);
            inner.write_at += rec.len() as u64;
            let current = inner.current;
            inner
                .segments
                .get_mut(&current)
                .expect("current segment")
                .last = Some(index);
            inner.last_log_id = Some(entry.log_id);
            batch.extend_from_slice(&rec);
        }
        inner.write(batch_at, &batch)
    }

    /// The files written since the last call: what a flush must sync. Once they are synced,
    /// [`Segments::flushed`] with what this returned.
    pub fn take_dirty(&self) -> Dirty {
        let mut inner = self.lock();
        Dirty {
            files: std::mem::take(&mut inner.dirty),
            generation: inner.generation,
            last: inner.last_log_id.map(|l| l.index),
        }
    }

    /// The files `dirty` named are synced: the log is durable through its last index then
    /// (unless a truncate came in between). A repair that this completes is ended.
    pub fn flushed(&self, dirty: &Dirty) -> io::Result<()> {
        let mut inner = self.lock();
        if dirty.generation == inner.generation {
            if let Some(last) = dirty.last {
                inner.durable = Some(inner.durable.map_or(last, |d| d.max(last)));
            }
        }
        inner.check_repaired()
    }

    /// Writes a mark if the log became durable beyond the last one (an idle log, or a clean
    /// stop: the flusher calls this when no write came for a while): the files to sync, if
    /// one was written.
    pub fn write_mark_if_due(&self) -> io::Result<Option<Dirty>> {
        let mut inner = self.lock();
        let mut batch = Vec::new();
        let at = inner.write_at;
        inner.mark_into(&mut batch);
        if batch.is_empty() {
            return Ok(None);
        }
        inner.write(at, &batch)?;
        drop(inner);
        Ok(Some(self.take_dirty()))
    }

    /// Records that a write or sync of the storage failed (the first cause is kept): from
    /// now on the node answers no read, and stops (`crate::node`).
    pub fn set_failure(&self, why: String) {
        self.failure
            .lock()
            .expect("failure lock")
            .get_or_insert(why);
    }

    /// Why the storage failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().expect("failure lock").clone()
    }

    /// The damage this log still waits to have refilled from the leader, if any.
    pub fn repair(&self) -> Option<Repair> {
        self.lock().repair.clone()
    }

    /// The highest index on disk and still in the log.
    pub fn durable(&self) -> Option<u64> {
        self.lock().durable
    }

    /// The entries of indexes `start..end` that are kept, each checked as it is read back
    /// (its record's checksum, length and index): a changed byte that still decodes would
    /// otherwise be applied here, or shipped to a follower under a fresh checksum, and the
    /// replicas would diverge. A damaged record or a failed read marks the storage failed
    /// (`set_failure`): the node stops, and its next open finds the damage and has the
    /// leader refill the log, as after damage found at open.
    pub fn read(&self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let inner = self.lock();
        let start = start.max(inner.first);
        let end = end.min(inner.first + inner.locs.len() as u64);
        let mut out = Vec::with_capacity(end.saturating_sub(start) as usize);
        for index in start..end {
            let loc = inner.locs[(index - inner.first) as usize];
            let record = self.read_checked(&inner, index, loc)?;
            let entry = &record[HEADER_BYTES..];
            out.push(decode(entry).map_err(|e| self.damaged(index, loc, &e.to_string()))?);
        }
        Ok(out)
    }

    /// The record of `index` at `loc` (header and entry), read whole and checked.
    fn read_checked(&self, inner: &Inner, index: u64, loc: Loc) -> io::Result<Vec<u8>> {
        let file = &inner.segments[&loc.seq].file;
        let mut bytes = vec![0u8; HEADER_BYTES + loc.len as usize];
        if let Err(e) = file.read_exact_at(&mut bytes, loc.offset) {
            self.set_failure(format!(
                "reading log entry {index} back failed (segment {}, offset {}): {e}",
                loc.seq, loc.offset
            ));
            return Err(e);
        }
        match parse(&bytes, 0) {
            Some((at, entry)) if at == index && entry.len() == loc.len as usize => Ok(bytes),
            Some((at, _)) if at != index => {
                Err(self.damaged(index, loc, &format!("its record says index {at}")))
            }
            _ => Err(self.damaged(index, loc, "its record fails its checksum")),
        }
    }

    /// Marks the storage failed for a damaged record of `index`, and the error that says so.
    fn damaged(&self, index: u64, loc: Loc, why: &str) -> io::Error {
        let what = format!(
            "log entry {index} read back damaged (segment {}, offset {}): {why}; the node \
             stops, and its next start has the leader refill the log",
            loc.seq, loc.offset
        );
        self.set_failure(what.clone());
        io::Error::new(io::ErrorKind::InvalidData, what)
    }

    /// Removes the entries from `index` on, on disk, before it returns.
    pub fn truncate(&self, index: u64) -> io::Result<()> {
        let mut inner = self.lock();
        inner.generation += 1;
        inner.durable = match (inner.durable, index.checked_sub(1)) {
            (Some(d), Some(below)) => Some(d.min(below)),
            _ => None,
        };
        // Entries below the first kept one are purged already: a cut there cuts every one.
        let keep = index.saturating_sub(inner.first) as usize;
        let cut_index = inner.first + keep as u64;
        let Some(cut) = inner.locs.get(keep).copied() else {
            return Ok(());
        };
        inner.locs.truncate(keep);
        // Later segments go whole; the cut one is zeroed from the cut on.
        let later: Vec<u64> = inner
            .segments
            .range(cut.seq + 1..)
            .map(|(s, _)| *s)
            .collect();
        for seq in &later {
            inner.segments.remove(seq);
            std::fs::remove_file(inner.dir.join(seg_name(*seq)))?;
        }
        let seg = &inner.segments[&cut.seq];
        let end = if cut.seq == inner.current {
            inner.write_at
        } else {
            seg.size
        };
        write_zeros(&seg.file, cut.offset, end)?;
        seg.file.sync_data()?;
        if !later.is_empty() {
            sync_dir(&inner.dir)?;
        }
        inner.current = cut.seq;
        inner.write_at = cut.offset;
        inner.segments.get_mut(&cut.seq).expect("cut segment").last =
            cut_index.checked_sub(1).filter(|_| cut.offset > 0);
        inner.last_log_id = match inner.locs.back().copied() {
            Some(loc) => Some(inner.read_log_id(loc)?),
            None => None,
        };
        Ok(())
    }

    /// Forgets the entries up to `index` and deletes the segments that hold only those. The
    /// caller has made the purge point durable first.
    pub fn purge(&self, index: u64) -> io::Result<()> {
        let mut inner = self.lock();
        inner.purged = Some(inner.purged.map_or(index, |p| p.max(index)));
        while inner.first <= index && !inner.locs.is_empty() {
            inner.locs.pop_front();
            inner.first += 1;
        }
        if inner.locs.is_empty() {
            inner.first = inner.first.max(index + 1);
            if inner.last_log_id.is_some_and(|l| l.index <= index) {
                // Nothing kept: the last entry is what the purge point says.
                inner.last_log_id = None;
            }
        }
        let current = inner.current;
        let gone: Vec<u64> = inner
            .segments
            .iter()
            .filter(|(seq, s)| **seq != current && s.last.is_some_and(|l| l <= index))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in gone {
            inner.segments.remove(&seq);
            std::fs::remove_file(inner.dir.join(seg_name(seq)))?;
        }
        // A snapshot installed from the leader may be what completes a repair.
        inner.check_repaired()
    }

    /// Deletes every segment and starts an empty log (before moving an older dir's sled log in).
    pub fn reset(&self) -> io::Result<()> {
        let mut inner = self.lock();
        let seqs: Vec<u64> = inner.segments.keys().copied().collect();
        for seq in seqs {
            inner.segments.remove(&seq);
            std::fs::remove_file(inner.dir.join(seg_name(seq)))?;
        }
        let seq = 1;
        let size = inner.segment_bytes;
        let file = prepare_as(&inner.dir, BIG, seq, size)?;
        inner.begin(seq, file, size)?;
        inner.locs.clear();
        inner.first = inner.purged.map_or(0, |p| p + 1);
        inner.last_log_id = None;
        inner.generation += 1;
        inner.durable = None;
        inner.mark_written = 0;
        Ok(())
    }

    /// Syncs the files written since the last flush (for callers outside the flusher).
    pub fn sync(&self) -> io::Result<()> {
        let dirty = self.take_dirty();
        for file in &dirty.files {
            file.sync_data()?;
        }
        self.flushed(&dirty)
    }

    /// The number of segment files (tests).
    #[cfg(test)]
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The spare's thread finishes on its own; its file is removed at the next open.
        if let Some(handle) = self.spare.take() {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
#[path = "segments_tests.rs"]
mod tests;
