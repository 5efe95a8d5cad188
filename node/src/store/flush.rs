//! Group commit: one thread makes the log's and sled's writes durable for everyone waiting.
//!
//! Each round answers every request that arrived before it started; requests that arrive
//! meanwhile share the next round. A round syncs the log segments written since the last one
//! (one `fdatasync` each, usually one file): that is all an append waits for. Only when a
//! round has a waiter for sled (a vote, a purge point) does it also flush sled: sled 0.34.7's
//! concurrent `flush_async` can deadlock (sled #1308), and on Linux its `flush` is a
//! `sync_file_range`, not an fsync, so the thread calls `Db::flush` and then `sync_data` on
//! the db file.
//!
//! sled writes a page larger than ~128 KiB to a file of its own under `blobs/` and never
//! fsyncs it; a sled round fsyncs every blob file it has not synced yet (and the directory),
//! so a large page is as durable as the rest once the round completes.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use std::sync::Arc;

use openraft::storage::LogFlushed;

use crate::metrics::Metrics;

use crate::raft_types::TypeConfig;

use super::segments::Segments;

enum Waiter {
    /// openraft's append callback: fired once the appended entries are on disk.
    Append(LogFlushed<TypeConfig>),
    /// Anyone waiting for sled's writes (vote, purge point) to be durable, with the log's.
    Notify(tokio::sync::oneshot::Sender<Result<(), String>>),
    /// The same, for a thread outside the runtime (the data dir upgrade at open).
    Blocking(mpsc::Sender<Result<(), String>>),
}

/// Handle to the flusher thread. Cheap to clone.
#[derive(Clone)]
pub struct Flusher {
    tx: mpsc::Sender<Waiter>,
}

impl Flusher {
    /// Starts the flusher thread for the log `segments` and for `db`, whose main file lives
    /// in `dir/db`.
    pub fn start(
        segments: Arc<Segments>,
        db: sled::Db,
        dir: &Path,
        metrics: Arc<Metrics>,
    ) -> io::Result<Flusher> {
        let file = File::open(dir.join("db"))?;
        let blobs = dir.join("blobs");
        let mut synced_blobs: HashSet<PathBuf> = HashSet::new();
        let (tx, rx) = mpsc::channel::<Waiter>();
        std::thread::Builder::new()
            .name("baton-flush".into())
            .spawn(move || {
                // Ends when every Flusher handle is dropped.
                while let Ok(first) = rx.recv() {
                    // A stalled disk (test builds only): the round waits until it answers.
                    while crate::chaos::stall_fsync() {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    let started = std::time::Instant::now();
                    let needs_sled = batch.iter().any(|w| !matches!(w, Waiter::Append(_)));
                    // Taken after the batch arrived: every write its waiters made is in it,
                    // or in an earlier round's, which has completed.
                    let written = segments.take_dirty();
                    // The power-cut canary (test builds only) acknowledges without fsyncs.
                    let skip = crate::chaos::skip_fsync();
                    let sled_done = if needs_sled {
                        db.flush()
                            .map(|_| ())
                            .map_err(io::Error::other)
                            .and_then(|()| sync_new_blobs(&blobs, &mut synced_blobs))
                            .and_then(|()| if skip { Ok(()) } else { file.sync_data() })
                    } else {
                        Ok(())
                    };
                    let result = sled_done.and_then(|()| {
                        let synced = std::time::Instant::now();
                        let done = if skip {
                            Ok(())
                        } else {
                            written.iter().try_for_each(|f| f.sync_data())
                        };
                        metrics
                            .fsync_seconds
                            .observe(synced.elapsed().as_secs_f64());
                        done
                    });
                    metrics
                        .flush_seconds
                        .observe(started.elapsed().as_secs_f64());
                    for waiter in batch {
                        match (waiter, &result) {
                            (Waiter::Append(cb), Ok(())) => cb.log_io_completed(Ok(())),
                            (Waiter::Append(cb), Err(e)) => {
                                cb.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())))
                            }
                            (Waiter::Notify(tx), r) => {
                                let _ = tx.send(r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                            }
                            (Waiter::Blocking(tx), r) => {
                                let _ = tx.send(r.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                            }
                        }
                    }
                }
            })?;
        Ok(Flusher { tx })
    }

    /// Fires `callback` once everything written so far is on disk.
    pub fn after_sync(&self, callback: LogFlushed<TypeConfig>) -> io::Result<()> {
        self.tx
            .send(Waiter::Append(callback))
            .map_err(|_| io::Error::other("flusher thread stopped"))
    }

    /// Waits until everything written so far, sled's writes too, is on disk.
    pub async fn sync_sled(&self) -> io::Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Waiter::Notify(tx))
            .map_err(|_| io::Error::other("flusher thread stopped"))?;
        rx.await
            .map_err(|_| io::Error::other("flusher thread stopped"))?
            .map_err(io::Error::other)
    }
}

impl Flusher {
    /// `sync`, blocking this thread: for callers outside the runtime (open).
    pub fn sync_blocking(&self) -> io::Result<()> {
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Waiter::Blocking(tx))
            .map_err(|_| io::Error::other("flusher thread stopped"))?;
        rx.recv()
            .map_err(|_| io::Error::other("flusher thread stopped"))?
            .map_err(io::Error::other)
    }
}

/// Fsyncs the blob files sled wrote since the last call, then their directory. Forgets the
/// files sled has since deleted.
fn sync_new_blobs(blobs: &Path, synced: &mut HashSet<PathBuf>) -> io::Result<()> {
    let entries = match std::fs::read_dir(blobs) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut present = HashSet::new();
    let mut any_new = false;
    for entry in entries {
        let path = entry?.path();
        if !synced.contains(&path) {
            match File::open(&path) {
                Ok(f) => f.sync_all()?,
                // sled removed it meanwhile: nothing to make durable.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            any_new = true;
        }
        present.insert(path);
    }
    if any_new {
        File::open(blobs)?.sync_all()?;
    }
    *synced = present;
    Ok(())
}
