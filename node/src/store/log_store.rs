//! The Raft log and vote on sled.
//!
//! Durability: `append` writes the entries to sled (readable at once) and hands openraft's
//! callback to the group-commit flusher, which fires it only after `flush` + fsync.
//! `save_vote`, `truncate` and `purge` wait for the same flusher before returning. sled
//! applies writes in the order they were made, and every flush covers all earlier writes,
//! so durable state is always a prefix of what was issued.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};

use super::flush::Flusher;
use super::{decode, encode};
use crate::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// The log store; clones share the same trees (openraft's log readers are clones).
#[derive(Clone)]
pub struct LogStore {
    /// Big-endian log index -> bincode entry, so sled's order is log order.
    log: sled::Tree,
    /// Vote, committed log id, last purged log id.
    meta: sled::Tree,
    flusher: Flusher,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl LogStore {
    pub(super) fn open(db: &sled::Db, flusher: Flusher) -> Result<LogStore, sled::Error> {
        Ok(LogStore {
            log: db.open_tree("raft_log")?,
            meta: db.open_tree("raft_meta")?,
            flusher,
        })
    }

    /// Rewrites a format-3 log in today's format (the data dir upgrade, `super::format3`),
    /// in one batch, and waits until it is on disk. An entry that reads as today's already
    /// is kept: blank and membership entries are the same in both formats, and a rewrite
    /// that completed before a crash is not redone.
    pub(super) fn upgrade_from_format_3(&self) -> Result<(), String> {
        use super::decode_whole;
        let mut batch = sled::Batch::default();
        let mut rewritten = 0u64;
        for item in self.log.iter() {
            let (key, bytes) = item.map_err(|e| e.to_string())?;
            if decode_whole::<Entry>(&bytes).is_ok() {
                continue;
            }
            let old: super::format3::EntryV3 = decode_whole(&bytes)
                .map_err(|e| format!("log entry {key:?} is neither format 3 nor 4: {e}"))?;
            batch.insert(key, encode(&old.upgrade()));
            rewritten += 1;
        }
        self.log.apply_batch(batch).map_err(|e| e.to_string())?;
        self.flusher.sync_blocking().map_err(|e| e.to_string())?;
        tracing::info!(
            entries = rewritten,
            "log entries rewritten in data format 4"
        );
        Ok(())
    }

    /// Writes `bytes` as the entry at `index`, as they are (tests of the upgrade).
    #[cfg(test)]
    pub(super) fn write_raw_for_tests(&self, index: u64, bytes: &[u8]) {
        self.log.insert(index_key(index), bytes).unwrap();
    }

    /// The bytes of the entry at `index` (tests of the upgrade).
    #[cfg(test)]
    pub(super) fn read_raw_for_tests(&self, index: u64) -> Vec<u8> {
        self.log.get(index_key(index)).unwrap().unwrap().to_vec()
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
    ///
    /// Plain inserts in log order, not a `sled::Batch`: each batch rolls sled's write buffer
    /// twice, a blocking device write each time. Without one, a crash keeps a prefix of these
    /// inserts (sled recovers its log up to the first missing write), which is a shorter log,
    /// never one with a hole; and nothing here is acknowledged before the flusher's fsync.
    pub(super) fn write_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError> {
        for entry in entries {
            self.log
                .insert(index_key(entry.log_id.index), encode(&entry))
                .map_err(|e| StorageIOError::write_logs(&e))?;
        }
        Ok(())
    }

    pub(super) async fn sync(&self) -> Result<(), StorageError> {
        self.flusher
            .sync()
            .await
            .map_err(|e| StorageIOError::write(&e).into())
    }

    /// Removes the entries in `range` (of index keys) in one batch: no hole is ever visible.
    fn remove_entries(&self, range: impl RangeBounds<[u8; 8]>) -> Result<(), StorageError> {
        let mut batch = sled::Batch::default();
        for item in self.log.range(range) {
            let (key, _) = item.map_err(|e| StorageIOError::write_logs(&e))?;
            batch.remove(key);
        }
        self.log
            .apply_batch(batch)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId>, StorageError> {
        match self.log.last().map_err(|e| StorageIOError::read_logs(&e))? {
            None => Ok(None),
            Some((_, bytes)) => {
                let entry: Entry = decode(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
                Ok(Some(entry.log_id))
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => Bound::Included(index_key(*i)),
            Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Bound::Included(index_key(*i)),
            Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.log
            .range::<[u8; 8], _>((start, end))
            .map(|item| {
                let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                decode::<Entry>(&bytes).map_err(|e| StorageIOError::read_logs(&e).into())
            })
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged: Option<LogId> = self.read_meta(KEY_LAST_PURGED)?;
        let last = self.last_entry_log_id()?.or(last_purged);
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
            .sync()
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
        // the leader, and it rides along with the next append's fsync.
        self.meta
            .insert(KEY_COMMITTED, encode(&committed))
            .map_err(|e| StorageIOError::write(&e))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.read_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten())
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
        self.remove_entries(index_key(log_id.index)..)?;
        self.sync().await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash between the two steps leaves entries that are
        // merely unused, never a log that claims entries it lost.
        self.meta
            .insert(KEY_LAST_PURGED, encode(&log_id))
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.sync().await?;
        self.remove_entries(..=index_key(log_id.index))?;
        self.sync().await
    }
}
