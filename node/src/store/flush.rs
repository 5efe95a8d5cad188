//! Group commit: one thread makes the log's writes durable for everyone waiting.
//!
//! Each round answers every append that arrived before it started; appends that arrive
//! meanwhile share the next round. A round syncs the log segments written since the last one
//! (one `fdatasync` each, usually one file): that is all an append waits for. (The vote and
//! the purge point are written durably by their callers, `meta`.)
//!
//! When no append came for [`MARK_IDLE`], the thread writes the log's mark (how far it is
//! durable, `segments`) and syncs it, off every write's path; it does so once more when the
//! node stops cleanly. Opening tells damage from a crash's torn tail by these marks.
//!
//! A failed sync is never retried (after an `fsync` error Linux may have dropped the dirty
//! pages and a second `fsync` succeeds without them): the thread answers that error to every
//! append from then on, so openraft stops and the node exits with the cause (`crate::node`).

use std::io;
use std::sync::mpsc;
use std::sync::Arc;

use openraft::storage::LogFlushed;

use crate::limits::MARK_IDLE;
use crate::metrics::Metrics;
use crate::raft_types::TypeConfig;

use super::segments::{Dirty, Segments};

/// Handle to the flusher thread. Cheap to clone.
#[derive(Clone)]
pub struct Flusher {
    /// openraft's append callbacks: each fired once the appended entries are on disk.
    tx: mpsc::Sender<LogFlushed<TypeConfig>>,
}

impl Flusher {
    /// Starts the flusher thread for the log `segments`.
    pub fn start(segments: Arc<Segments>, metrics: Arc<Metrics>) -> io::Result<Flusher> {
        let (tx, rx) = mpsc::channel::<LogFlushed<TypeConfig>>();
        std::thread::Builder::new()
            .name("baton-flush".into())
            .spawn(move || {
                // The first failed sync, answered to every append after it.
                let mut failed: Option<io::Error> = None;
                loop {
                    let first = match rx.recv_timeout(MARK_IDLE) {
                        Ok(first) => first,
                        Err(timeout) => {
                            // Idle (or stopping: every Flusher handle dropped): the mark.
                            if failed.is_none() {
                                if let Err(e) = mark_idle(&segments) {
                                    tracing::error!(error = %e, "the log's mark could not be made durable: this node stops");
                                    segments.set_failure(format!("the log's mark could not be made durable: {e}"));
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
                    // Taken after the batch arrived: every write its waiters made is in it,
                    // or in an earlier round's, which has completed.
                    let written = segments.take_dirty();
                    let result = match &failed {
                        Some(e) => Err(io::Error::new(
                            e.kind(),
                            format!("an earlier sync failed: {e}"),
                        )),
                        None => {
                            let done = sync_written(&written);
                            metrics
                                .fsync_seconds
                                .observe(started.elapsed().as_secs_f64());
                            done.and_then(|()| segments.flushed(&written))
                        }
                    };
                    if let (Err(e), None) = (&result, &failed) {
                        // Reads are refused from here on; the log line comes after.
                        segments.set_failure(format!("a log flush failed: {e}"));
                        tracing::error!(error = %e, "a log flush failed: this node stops (it never retries a failed fsync)");
                        failed = Some(io::Error::new(e.kind(), e.to_string()));
                    }
                    metrics
                        .flush_seconds
                        .observe(started.elapsed().as_secs_f64());
                    for callback in batch {
                        callback.log_io_completed(match &result {
                            Ok(()) => Ok(()),
                            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                        });
                    }
                }
            })?;
        Ok(Flusher { tx })
    }

    /// Fires `callback` once everything written so far is on disk.
    pub fn after_sync(&self, callback: LogFlushed<TypeConfig>) -> io::Result<()> {
        self.tx
            .send(callback)
            .map_err(|_| io::Error::other("flusher thread stopped"))
    }
}

/// Syncs the files of a flush. Test builds: the power-cut canary (`skip_fsync`) acknowledges
/// without syncing, and `fail_fsync` fails as a failing disk would.
fn sync_written(written: &Dirty) -> io::Result<()> {
    if crate::chaos::fail_fsync() {
        return Err(io::Error::from_raw_os_error(5)); // EIO
    }
    if crate::chaos::skip_fsync() {
        return Ok(());
    }
    written.files.iter().try_for_each(|f| f.sync_data())
}

/// Writes and syncs the log's mark if it is due.
fn mark_idle(segments: &Segments) -> io::Result<()> {
    if let Some(dirty) = segments.write_mark_if_due()? {
        sync_written(&dirty)?;
        segments.flushed(&dirty)?;
    }
    Ok(())
}
