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
//! kept in sled (`log_store`), written and synced before any segment goes.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::limits::SEGMENT_BYTES;
use crate::raft_types::{Entry, LogId};

use super::{decode, encode};

/// Bytes before each record's entry: length, CRC32, index.
const HEADER_BYTES: usize = 16;
/// Zeros are written in chunks of this size.
const ZERO_CHUNK_BYTES: usize = 1 << 20;
const SPARE: &str = "spare.tmp";

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
}

/// The log's segment files. Shared by the log store's clones and the flusher.
pub struct Segments {
    inner: Mutex<Inner>,
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
}

fn seg_name(seq: u64) -> String {
    format!("{seq:020}.seg")
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes zeros over `[from, to)` of `file`.
fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK_BYTES.min((to.saturating_sub(from)) as usize)];
    let mut at = from;
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// A new file of `size` zero bytes, written (not a hole: writing into a hole allocates, and
/// the flush would then wait for that too) and synced.
fn prepare(path: &Path, size: u64) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    write_zeros(&file, 0, size)?;
    file.sync_all()?;
    Ok(file)
}

fn record(index: u64, entry: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(HEADER_BYTES + entry.len());
    rec.extend_from_slice(&(entry.len() as u32).to_le_bytes());
    rec.extend_from_slice(&checksum(index, entry).to_le_bytes());
    rec.extend_from_slice(&index.to_le_bytes());
    rec.extend_from_slice(entry);
    rec
}

fn checksum(index: u64, entry: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&index.to_le_bytes());
    h.update(entry);
    h.finalize()
}

/// The record at `at` of `bytes`, if a whole, intact one starts there: (index, entry bytes).
fn parse(bytes: &[u8], at: usize) -> Option<(u64, &[u8])> {
    let header = bytes.get(at..at + HEADER_BYTES)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    if len == 0 {
        return None;
    }
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let index = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let entry = bytes.get(at + HEADER_BYTES..at + HEADER_BYTES + len)?;
    (checksum(index, entry) == crc).then_some((index, entry))
}

fn term(log_id: &LogId) -> u64 {
    log_id.leader_id.term
}

impl Segments {
    /// Opens the log in `dir` (made if absent), ending it where a crash cut it (see the
    /// module doc). `purged`: the purge point kept in sled.
    pub fn open(dir: &Path, purged: Option<u64>) -> io::Result<(Segments, Recovered)> {
        Segments::open_sized(dir, purged, SEGMENT_BYTES)
    }

    /// `open`, making new segments of `segment_bytes` (tests use small ones).
    pub fn open_sized(
        dir: &Path,
        purged: Option<u64>,
        segment_bytes: u64,
    ) -> io::Result<(Segments, Recovered)> {
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
        let mut found = Recovered::default();
        let mut segments = BTreeMap::new();
        let mut locs = VecDeque::new();
        let mut first = purged.map_or(0, |p| p + 1);
        let mut last_log_id: Option<LogId> = None;
        let mut end: Option<(u64, u64)> = None; // (seq, offset) where the log ends
        let mut end_leftovers = false; // bytes that are not zero follow it
        let mut broken = false;
        let mut to_remove = Vec::new();
        for &seq in &seqs {
            let path = dir.join(seg_name(seq));
            if broken {
                to_remove.push(path);
                continue;
            }
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)?;
            let bytes = std::fs::read(&path)?;
            let mut at = 0usize;
            let mut seg_last = None;
            while let Some((index, entry_bytes)) = parse(&bytes, at) {
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
                            || (at == 0
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
            let size = bytes.len() as u64;
            let leftovers = bytes[at..].iter().any(|b| *b != 0);
            if leftovers && found.cut_at.is_none() {
                found.cut_at = Some((seq, at as u64));
            }
            if seg_last.is_none() && end.is_some() {
                // An empty segment is only ever the last; whatever follows is not the log.
                broken = true;
                to_remove.push(path);
                continue;
            }
            end = Some((seq, at as u64));
            end_leftovers = leftovers;
            segments.insert(
                seq,
                Segment {
                    file: Arc::new(file),
                    size,
                    last: seg_last,
                },
            );
            // An empty segment, or records that stop before bytes that are not zero: the log
            // stops here.
            broken = leftovers || seg_last.is_none();
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
                let seq = 1;
                let file = prepare(&dir.join(seg_name(seq)), segment_bytes)?;
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
            seg.file.sync_data()?;
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
            to_remove.push(dir.join(seg_name(seq)));
        }
        for path in &to_remove {
            std::fs::remove_file(path)?;
        }
        sync_dir(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
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
        };
        inner.start_spare();
        Ok((
            Segments {
                inner: Mutex::new(inner),
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

    /// The files written since the last call: what a flush must sync.
    pub fn take_dirty(&self) -> Vec<Arc<File>> {
        std::mem::take(&mut self.lock().dirty)
    }

    /// The entries of indexes `start..end` that are kept.
    pub fn read(&self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let inner = self.lock();
        let start = start.max(inner.first);
        let end = end.min(inner.first + inner.locs.len() as u64);
        let mut out = Vec::with_capacity(end.saturating_sub(start) as usize);
        for index in start..end {
            let loc = inner.locs[(index - inner.first) as usize];
            let file = &inner.segments[&loc.seq].file;
            let mut bytes = vec![0u8; loc.len as usize];
            file.read_exact_at(&mut bytes, loc.offset + HEADER_BYTES as u64)?;
            out.push(decode(&bytes).map_err(io::Error::other)?);
        }
        Ok(out)
    }

    /// Removes the entries from `index` on, on disk, before it returns.
    pub fn truncate(&self, index: u64) -> io::Result<()> {
        let mut inner = self.lock();
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
        Ok(())
    }

    /// Deletes every segment and starts an empty log (before moving a sled log in).
    pub fn reset(&self) -> io::Result<()> {
        let mut inner = self.lock();
        let seqs: Vec<u64> = inner.segments.keys().copied().collect();
        for seq in seqs {
            inner.segments.remove(&seq);
            std::fs::remove_file(inner.dir.join(seg_name(seq)))?;
        }
        let seq = 1;
        let size = inner.segment_bytes;
        let file = prepare(&inner.dir.join(seg_name(seq)), size)?;
        inner.begin(seq, file, size)?;
        inner.locs.clear();
        inner.first = inner.purged.map_or(0, |p| p + 1);
        inner.last_log_id = None;
        Ok(())
    }

    /// Syncs the files written since the last flush (for callers outside the flusher).
    pub fn sync(&self) -> io::Result<()> {
        for file in self.take_dirty() {
            file.sync_data()?;
        }
        Ok(())
    }

    /// The number of segment files (tests).
    #[cfg(test)]
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }
}

impl Inner {
    /// The index the next append must have; any, for a log that never had an entry.
    fn next_index(&self) -> Option<u64> {
        match (self.last_log_id, self.purged) {
            (Some(l), Some(p)) => Some(l.index.max(p) + 1),
            (Some(l), None) => Some(l.index + 1),
            (None, Some(p)) => Some(p + 1),
            (None, None) => None,
        }
    }

    fn write(&mut self, at: u64, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let file = self.segments[&self.current].file.clone();
        file.write_all_at(bytes, at)?;
        if !self.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
            self.dirty.push(file);
        }
        Ok(())
    }

    fn read_log_id(&self, loc: Loc) -> io::Result<LogId> {
        let mut bytes = vec![0u8; loc.len as usize];
        self.segments[&loc.seq]
            .file
            .read_exact_at(&mut bytes, loc.offset + HEADER_BYTES as u64)?;
        let entry: Entry = decode(&bytes).map_err(io::Error::other)?;
        Ok(entry.log_id)
    }

    /// Starts zeroing the next segment in the background.
    fn start_spare(&mut self) {
        let path = self.dir.join(SPARE);
        let size = self.segment_bytes;
        self.spare = Some(
            std::thread::Builder::new()
                .name("baton-log-spare".into())
                .spawn(move || prepare(&path, size))
                .expect("spawn the log's spare-segment thread"),
        );
    }

    /// Moves on to a new segment with room for `need` bytes: the spare (waiting for it if it
    /// is not ready yet), or one made now for a record larger than a segment.
    fn roll(&mut self, need: u64) -> io::Result<()> {
        let seq = self.current + 1;
        let path = self.dir.join(seg_name(seq));
        let (file, size) = if need <= self.segment_bytes {
            let file = match self.spare.take().map(|h| h.join()) {
                Some(Ok(Ok(file))) => file,
                Some(Ok(Err(e))) => return Err(e),
                Some(Err(_)) | None => prepare(&self.dir.join(SPARE), self.segment_bytes)?,
            };
            std::fs::rename(self.dir.join(SPARE), &path)?;
            self.start_spare();
            (file, self.segment_bytes)
        } else {
            let size = need.div_ceil(4096) * 4096;
            (prepare(&path, size)?, size)
        };
        self.begin(seq, file, size)
    }

    /// Makes the zero-filled `file` (named for `seq`) the segment written to.
    fn begin(&mut self, seq: u64, file: File, size: u64) -> io::Result<()> {
        // The new name is on disk before any record in it is acknowledged.
        sync_dir(&self.dir)?;
        self.segments.insert(
            seq,
            Segment {
                file: Arc::new(file),
                size,
                last: None,
            },
        );
        self.current = seq;
        self.write_at = 0;
        Ok(())
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
