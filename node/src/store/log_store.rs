//! The Raft log (plain segment files, `segments`) and its meta (vote, purge point, committed
//! id: `meta`).
//!
//! Durability: `append` writes the entries into the current segment (readable at once) and
//! hands openraft's callback to the group-commit flusher, which fires it only after the
//! segments written meanwhile are synced: one `fdatasync`. `save_vote` and `purge` write the
//! meta file durably before returning, `truncate` its zeros. Each flush covers every earlier
//! write, so what is durable is always a prefix of what was issued, and a crash between
//! flushes leaves a log that `Segments::open` ends at its first torn record.
//!
//! Before data format 7 sled kept the meta, and before format 6 the log too; opening such a
//! dir moves them over (`legacy`).

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};

use super::flush::Flusher;
use super::meta::MetaFile;
use super::segments::{LogOpenError, Recovered, Repair, Segments};
use crate::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// The log store; clones share the same files (openraft's log readers are clones).
#[derive(Clone)]
pub struct LogStore {
    segments: Arc<Segments>,
    /// Vote, committed log id, last purged log id.
    meta: Arc<MetaFile>,
    flusher: Flusher,
}

/// Opens the segment files in `dir` (the data dir's `log/`), given the purge point.
pub(super) fn open_segments(
    dir: &Path,
    purged: Option<LogId>,
) -> Result<(Arc<Segments>, Recovered), LogOpenError> {
    let (segments, found) = Segments::open(dir, purged.map(|p| p.index))?;
    Ok((Arc::new(segments), found))
}

/// What the rest of the node must know of its storage: whether its log waits for a repair
/// from the leader (damage found at its open: the node neither votes nor campaigns nor reports
/// ready meanwhile), and whether a write to the disk failed (the node answers no read and
/// stops). Cheap to clone.
#[derive(Clone)]
pub struct StorageWatch(Arc<Segments>);

impl StorageWatch {
    /// Why the storage failed, if it did: a failed sync or write of the log or its meta.
    pub fn failure(&self) -> Option<String> {
        self.0.failure()
    }

    /// The pending repair, if any.
    pub fn pending(&self) -> Option<Repair> {
        self.0.repair()
    }

    /// The highest index on disk and still in the log.
    pub fn durable(&self) -> Option<u64> {
        self.0.durable()
    }
}

/// Runs a blocking write of the meta file off the runtime's threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(std::io::Error::other)?
}

impl LogStore {
    /// The handle that tells whether the log waits for a repair.
    pub fn storage_watch(&self) -> StorageWatch {
        StorageWatch(self.segments.clone())
    }

    pub(super) fn open(segments: Arc<Segments>, meta: Arc<MetaFile>, flusher: Flusher) -> LogStore {
        LogStore {
            segments,
            meta,
            flusher,
        }
    }

    /// Replaces the log with `entries` (a dir's upgrade from a sled log, formats 2 to 5), and
    /// waits until it is on disk. A crash before the identity says the new format redoes it.
    pub(super) fn replace_log(&self, entries: Vec<Entry>) -> std::io::Result<u64> {
        self.segments.reset()?;
        let moved = entries.len() as u64;
        for chunk in entries.chunks(1_000) {
            self.segments.append(chunk.to_vec())?;
        }
        self.segments.sync()?;
        Ok(moved)
    }

    /// Waits until everything written so far is on disk (tests).
    #[cfg(test)]
    pub(super) async fn sync(&self) -> std::io::Result<()> {
        self.segments.sync()
    }

    /// The number of segment files (tests).
    #[cfg(test)]
    pub(super) fn segment_count(&self) -> usize {
        self.segments.segment_count()
    }

    /// Writes `entries` (readable at once, durable after the next flush).
    pub(super) fn write_entries(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError> {
        self.segments.append(entries).map_err(|e| {
            self.segments
                .set_failure(format!("a log write failed: {e}"));
            StorageIOError::write_logs(&e).into()
        })
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
        let last_purged = self.meta.get().purged;
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
        // A vote must be on disk before it is sent, or a restarted node could vote twice in
        // one term.
        let (meta, vote) = (self.meta.clone(), *vote);
        blocking(move || meta.save(|m| m.vote = Some(vote)))
            .await
            .map_err(|e| {
                self.segments
                    .set_failure(format!("the vote's write failed: {e}"));
                StorageIOError::write_vote(&e).into()
            })
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        // Read back as not committed: its term and candidate still bind this node (it never
        // votes twice in a term), but a leader that restarts does not resume leading on its
        // own word. It must win an election first, which it cannot with a log that lost
        // entries: sled drops a damaged log's tail without a word, and a leader restarted
        // on that resumed at once in the same term and served reads and new entries without
        // what it had lost (jepsen-tests/BUGS.md, P5).
        Ok(self.meta.get().vote.map(|mut vote| {
            vote.committed = false;
            vote
        }))
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not written on its own: it only lets a restart re-apply further before hearing from
        // the leader, and it rides along with the meta file's next write (a vote's or a
        // purge's). Read back no higher than the last entry (`read_committed`).
        self.meta.set_committed(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let meta = self.meta.get();
        let committed = meta.committed;
        // It may have been written after entries that the log lost in a crash (their flush
        // had not completed): every entry up to it was committed, so the last one kept is.
        let last_purged = meta.purged;
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
        self.segments.truncate(log_id.index).map_err(|e| {
            self.segments
                .set_failure(format!("a log truncate failed: {e}"));
            StorageIOError::write_logs(&e).into()
        })
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash between the two steps leaves entries that are
        // merely unused, never a log that claims entries it lost.
        let meta = self.meta.clone();
        blocking(move || meta.save(|m| m.purged = Some(log_id)))
            .await
            .map_err(|e| {
                self.segments
                    .set_failure(format!("the purge point's write failed: {e}"));
                StorageIOError::write_logs(&e)
            })?;
        self.segments
            .purge(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}
