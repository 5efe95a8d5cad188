//! The Raft log (plain segment files, `segments`) and the vote (sled).
//!
//! Durability: `append` writes the entries into the current segment (readable at once) and
//! hands openraft's callback to the group-commit flusher, which fires it only after the
//! segments written meanwhile are synced: one `fdatasync`. `save_vote`, `truncate` and
//! `purge` wait for their own writes to be on disk before returning. Each flush covers every
//! earlier write, so what is durable is always a prefix of what was issued, and a crash
//! between flushes leaves a log that `Segments::open` ends at its first damaged record.
//!
//! sled keeps the small things that change rarely: the vote, the purge point, the last
//! committed id. Before data format 6 it held the log too (tree `raft_log`, big-endian index
//! -> entry); opening such a dir moves the log into segments (`move_log_from_sled`).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};

use super::flush::Flusher;
use super::segments::{LogOpenError, Recovered, Repair, Segments};
use super::{decode, encode};
use crate::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The log store; clones share the same files and trees (openraft's log readers are clones).
#[derive(Clone)]
pub struct LogStore {
    segments: Arc<Segments>,
    /// The log of data formats 2 to 5 (big-endian index -> bincode entry), read once to move
    /// it into segments and then emptied.
    sled_log: sled::Tree,
    /// Vote, committed log id, last purged log id.
    meta: sled::Tree,
    flusher: Flusher,
}

#[cfg(test)]
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The purge point stored in `meta`, read before the store (and its segments) exist.
pub(super) fn stored_purge_point(db: &sled::Db) -> Result<Option<LogId>, String> {
    let meta = db.open_tree("raft_meta").map_err(|e| e.to_string())?;
    match meta.get(KEY_LAST_PURGED).map_err(|e| e.to_string())? {
        None => Ok(None),
        Some(bytes) => decode(&bytes).map(Some).map_err(|e| e.to_string()),
    }
}

/// Opens the segment files in `dir` (the data dir's `log/`), given sled's purge point.
pub(super) fn open_segments(
    dir: &Path,
    purged: Option<LogId>,
) -> Result<(Arc<Segments>, Recovered), LogOpenError> {
    let (segments, found) = Segments::open(dir, purged.map(|p| p.index))?;
    Ok((Arc::new(segments), found))
}

/// Whether this node's log waits for a repair from the leader (damage found at its open): the
/// node neither votes nor campaigns nor reports ready meanwhile. Cheap to clone.
#[derive(Clone)]
pub struct RepairWatch(Arc<Segments>);

impl RepairWatch {
    /// The pending repair, if any.
    pub fn pending(&self) -> Option<Repair> {
        self.0.repair()
    }

    /// The highest index on disk and still in the log.
    pub fn durable(&self) -> Option<u64> {
        self.0.durable()
    }
}

impl LogStore {
    /// The handle that tells whether the log waits for a repair.
    pub fn repair_watch(&self) -> RepairWatch {
        RepairWatch(self.segments.clone())
    }

    pub(super) fn open(
        db: &sled::Db,
        segments: Arc<Segments>,
        flusher: Flusher,
    ) -> Result<LogStore, sled::Error> {
        Ok(LogStore {
            segments,
            sled_log: db.open_tree("raft_log")?,
            meta: db.open_tree("raft_meta")?,
            flusher,
        })
    }

    /// Rewrites a format-3 log (still in sled) in today's entry format (the data dir
    /// upgrade, `super::format3`), in one batch, and waits until it is on disk. An entry that
    /// reads as today's already is kept: blank and membership entries are the same in both
    /// formats, and a rewrite that completed before a crash is not redone.
    pub(super) fn upgrade_from_format_3(&self) -> Result<(), String> {
        use super::decode_whole;
        let mut batch = sled::Batch::default();
        let mut rewritten = 0u64;
        for item in self.sled_log.iter() {
            let (key, bytes) = item.map_err(|e| e.to_string())?;
            if decode_whole::<Entry>(&bytes).is_ok() {
                continue;
            }
            let old: super::format3::EntryV3 = decode_whole(&bytes)
                .map_err(|e| format!("log entry {key:?} is neither format 3 nor 4: {e}"))?;
            batch.insert(key, encode(&old.upgrade()));
            rewritten += 1;
        }
        self.sled_log
            .apply_batch(batch)
            .map_err(|e| e.to_string())?;
        self.flusher.sync_blocking().map_err(|e| e.to_string())?;
        tracing::info!(
            entries = rewritten,
            "log entries rewritten in data format 4"
        );
        Ok(())
    }

    /// Moves a log of formats 2 to 5 from sled into segments (a dir's upgrade to format 6),
    /// and waits until it is on disk. The sled copy stays until the identity says format 6
    /// (`forget_sled_log`), so a crash in between redoes the move from the start.
    pub(super) fn move_log_from_sled(&self) -> Result<u64, String> {
        self.segments.reset().map_err(|e| e.to_string())?;
        let mut moved = 0u64;
        let mut chunk = Vec::new();
        for item in self.sled_log.iter() {
            let (_, bytes) = item.map_err(|e| e.to_string())?;
            chunk.push(decode::<Entry>(&bytes).map_err(|e| e.to_string())?);
            if chunk.len() == 1_000 {
                moved += chunk.len() as u64;
                self.segments
                    .append(std::mem::take(&mut chunk))
                    .map_err(|e| e.to_string())?;
            }
        }
        moved += chunk.len() as u64;
        self.segments.append(chunk).map_err(|e| e.to_string())?;
        self.segments.sync().map_err(|e| e.to_string())?;
        Ok(moved)
    }

    /// Empties sled's old log tree once the identity says format 6 (at every open: a crash
    /// after the identity and before this is finished next time).
    pub(super) fn forget_sled_log(&self) -> Result<(), String> {
        if self.sled_log.is_empty() {
            return Ok(());
        }
        self.sled_log.clear().map_err(|e| e.to_string())?;
        self.flusher.sync_blocking().map_err(|e| e.to_string())
    }

    /// Writes `bytes` as the entry at `index` of sled's old log tree (tests of the upgrade).
    #[cfg(test)]
    pub(super) fn write_raw_for_tests(&self, index: u64, bytes: &[u8]) {
        self.sled_log.insert(index_key(index), bytes).unwrap();
    }

    /// The bytes of the entry at `index` of sled's old log tree (tests of the upgrade).
    #[cfg(test)]
    pub(super) fn read_raw_for_tests(&self, index: u64) -> Vec<u8> {
        self.sled_log
            .get(index_key(index))
            .unwrap()
            .unwrap()
            .to_vec()
    }

    /// Whether sled's old log tree is empty (tests of the upgrade).
    #[cfg(test)]
    pub(super) fn sled_log_is_empty_for_tests(&self) -> bool {
        self.sled_log.is_empty()
    }

    /// Waits until everything written so far is on disk (tests).
    #[cfg(test)]
    pub(super) async fn sync(&self) -> std::io::Result<()> {
        self.flusher.sync_sled().await
    }

    /// The number of segment files (tests).
    #[cfg(test)]
    pub(super) fn segment_count(&self) -> usize {
        self.segments.segment_count()
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, StorageError> {
        let Some(bytes) = self.meta.get(key).map_err(|e| StorageIOError::read(&e))? else {
            return Ok(None);
        };
        decode(&bytes)
            .map(Some)
            .map_err(|e| StorageIOError::read(&e).into())
    }

    /// Writes `entries` (readable at once, durable after the next flush).
    pub(super) fn write_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError> {
        self.segments
            .append(entries)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        self.segments
            .read(start, end)
            .map_err(|e| StorageIOError::read_logs(&e).into())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId> = self.read_meta(KEY_LAST_PURGED)?;
        let last = self.segments.last_log_id().or(last_purged);
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.meta
            .insert(KEY_VOTE, encode(vote))
            .map_err(|e| StorageIOError::write_vote(&e))?;
        // A vote must be on disk before it is sent, or a restarted node could vote twice in
        // one term.
        self.flusher
            .sync_sled()
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        // Read back as not committed: its term and candidate still bind this node (it never
        // votes twice in a term), but a leader that restarts does not resume leading on its
        // own word. It must win an election first, which it cannot with a log that lost
        // entries: sled drops a damaged log's tail without a word, and a leader restarted
        // on that resumed at once in the same term and served reads and new entries without
        // what it had lost (jepsen-tests/BUGS.md, P5).
        Ok(self.read_meta::<Vote>(KEY_VOTE)?.map(|mut vote| {
            vote.committed = false;
            vote
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not synced on its own: it only lets a restart re-apply further before hearing from
        // the leader, and it rides along with sled's next flush (its own, every 500 ms, or
        // a vote's or purge's). Read back no higher than the last entry (`read_committed`).
        self.meta
            .insert(KEY_COMMITTED, encode(&committed))
            .map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let committed = self.read_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten();
        // sled may have flushed it after entries that the log lost in a crash (their flush
        // had not completed): every entry up to it was committed, so the last one kept is.
        let last_purged: Option<LogId> = self.read_meta(KEY_LAST_PURGED)?;
        let last = self.segments.last_log_id().or(last_purged);
        Ok(match (committed, last) {
            (Some(c), Some(l)) if c.index > l.index => Some(l),
            (Some(_), None) => None,
            (c, _) => c,
        })
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.write_entries(entries)?;
        // Readable now; durable when the flusher fires the callback.
        self.flusher
            .after_sync(callback)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // On disk when it returns (the cut bytes zeroed and synced).
        self.segments
            .truncate(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash between the two steps leaves entries that are
        // merely unused, never a log that claims entries it lost.
        self.meta
            .insert(KEY_LAST_PURGED, encode(&log_id))
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.flusher
            .sync_sled()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.segments
            .purge(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
