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
//! When no request came for [`MARK_IDLE`], the thread writes the log's mark (how far it is
//! durable, `segments`) and syncs it, off every write's path; it does so once more when the
//! node stops cleanly. Opening tells damage from a crash's torn tail by these marks.
//!
//! A failed sync is never retried (after an `fsync` error Linux may have dropped the dirty
//! pages and a second `fsync` succeeds without them): the thread answers that error to every
//! request from then on, so openraft stops and the node exits with the cause
//! (`crate::node`).
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

use crate::limits::MARK_IDLE;
use crate::metrics::Metrics;

use crate::raft_types::TypeConfig;

use super::segments::{Dirty, Segments};

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
                // The first failed sync, answered to every request after it.
                let mut failed: Option<io::Error> = None;
                loop {
                    let first = match rx.recv_timeout(MARK_IDLE) {
                        Ok(first) => first,
                        Err(timeout) => {
                            // Idle (or stopping: every Flusher handle dropped): the mark.
                            if failed.is_none() {
                                if let Err(e) = mark_idle(&segments) {
                                    tracing::error!(error = %e, "the log's mark could not be made durable");
                                    failed = Some(e);
                                }
                            }
                            if timeout == mpsc::RecvTimeoutError::Disconnected {
                                break;
                            }
                            continue;
                        }
                    };
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
                    let sled_done = if let Some(e) = &failed {
                        Err(io::Error::new(e.kind(), format!("an earlier sync failed: {e}")))
                    } else if needs_sled {
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
                            sync_written(&written)
                        };
                        metrics
                            .fsync_seconds
                            .observe(synced.elapsed().as_secs_f64());
                        done.and_then(|()| segments.flushed(&written))
                    });
                    if let (Err(e), None) = (&result, &failed) {
                        tracing::error!(error = %e, "a log flush failed: this node stops (it never retries a failed fsync)");
                        failed = Some(io::Error::new(e.kind(), e.to_string()));
                    }
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

/// Syncs the files of a flush (a test build's `fail_fsync` knob fails them, as a failing
/// disk would).
fn sync_written(written: &Dirty) -> io::Result<()> {
    if crate::chaos::fail_fsync() {
        return Err(io::Error::from_raw_os_error(5)); // EIO
    }
    written.files.iter().try_for_each(|f| f.sync_data())
}

/// Writes and syncs the log's mark if it is due.
fn mark_idle(segments: &Segments) -> io::Result<()> {
    if let Some(dirty) = segments.write_mark_if_due()? {
        if !crate::chaos::skip_fsync() {
            sync_written(&dirty)?;
        }
        segments.flushed(&dirty)?;
    }
    Ok(())
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
