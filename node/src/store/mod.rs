//! Durable storage: the openraft log store and state machine, in plain files.
//!
//! Layout of a data dir:
//! - `baton.id`       which node of which cluster this dir belongs to (checked at start);
//! - `LOCK`           locked while a node has the dir open (`meta`);
//! - `raft.meta`      the vote, the purge point and the last committed id (`meta`);
//! - `log/`           the Raft log in segment files (`segments`), its damaged files kept in
//!   `log/damaged/` and a pending repair in `log/repair.json`;
//! - `snapshots/`     the current snapshot file, written, fsync'd and renamed into place;
//! - `peers.json`     the incarnation first seen of each peer (`crate::peers`, not this module);
//! - `peer-formats.json` the data format each peer is known to read (`crate::peers`), a help
//!   a node starts without if it cannot read it;
//! - before format 7, `sled/`: a sled database with the meta (tree `raft_meta`) and, before
//!   format 6, the log (tree `raft_log`), read once to upgrade the dir (`legacy`).
//!
//! The state machine's durable form is the snapshot plus the log after it (see
//! `state_machine`).

// openraft's traits dictate `StorageError` (224 bytes) as the error type of every storage
// call; boxing it in our helpers would only add conversions at each trait boundary.
#![allow(clippy::result_large_err)]

pub use crate::durable::write_durably;
use crate::limits::WATCH_WINDOW_EVENTS_DEFAULT;

mod flush;
pub mod format3;
mod legacy;
mod log_store;
mod meta;
mod segments;
mod sm_state;
mod state_machine;

pub use log_store::StorageWatch;
pub use segments::{Repair, DAMAGED_DIR, REPAIR_FILE};

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use log_store::LogStore;
pub use state_machine::{SmState, StateMachine};

use crate::expiry::Countdowns;
use crate::metrics::Metrics;
use crate::raft_types::NodeId;
use std::sync::Arc;

/// Version of the data dir layout; a dir of another version is refused. Format 2: log entries
/// carry batches of commands, the state machine lives in the snapshot plus the log. Format 3:
/// the state also holds the permissions policy. Format 4: every client command carries its
/// sender (session and principal) and every event its real actor (`format3`). Format 5: one
/// more command, `Op::Unassign`, and its event; a format-4 dir is format 5 as it is, and the
/// leader proposes the new command only once every member said it reads format 5
/// (`server::format_gate`). An older dir (and backup) is read and upgraded in
/// place: a format 2 or 3 log is rewritten before the identity says the new format, its
/// snapshot is read as it is and replaced by the next one. Older binaries then refuse the
/// dir rather than misread it. Format 6: the log is in plain segment files (`log/`), not in
/// sled (one device wait per flush instead of two); what the log holds, and everything sent
/// between nodes, is as in format 5. A format 2 to 5 dir's log is moved at open. Format 7:
/// the segments also hold marks (how far the log was durable, `segments`), by which opening
/// tells damage from a crash's torn tail; a format-6 log is read as it is (it has no marks:
/// its first open takes any bad record for a torn tail, as format 6 did) and gets marks from
/// then on. A format-6 binary would take a mark for a torn record and cut the log there, so
/// the identity says 7 from the first open on, and older binaries refuse the dir. Format 7
/// also keeps the vote, purge point and committed id in a checksummed file of its own
/// (`meta`) instead of sled: sled's are read once at the upgrade, and its dir removed.
/// Format 8: one more command, `Op::RevokeHeld` (a revoke that keeps the key unclaimable
/// for the revoked holder's window); a format-7 dir is format 8 as it is, and the leader
/// proposes the new command only once every member said it reads format 8, as for format 5.
/// Format 9: two more commands, `Op::Post` (a task put on the board) and `Op::ClaimNext`
/// (the next claimable task under a prefix, in one entry), one more event (`posted`), a
/// refusal (`exists`) and two outcomes; a format-8 dir is format 9 as it is, and the leader
/// proposes the new commands only once every member said it reads format 9.
/// Format 10: one more command, `Op::ClaimSet` (a set of keys to one holder, all or none, in
/// one entry) and its two outcomes; a format-9 dir is format 10 as it is, and the leader
/// proposes the new command only once every member said it reads format 10.
/// Format 11: waiting in line: three more commands (`Op::Wait`, `Op::LeaveLine` and the
/// leader's `Op::DropWaiter`), two events (`waited`, `left-line`), a refusal (`line_full`),
/// four outcomes, and the keys' lines in the state, encoded after everything else and only
/// when someone waits (`sm_state`), so a format-10 dir is format 11 as it is and a state
/// without waiters encodes as format 10's; the leader proposes the new commands only once
/// every member said it reads format 11.
/// Format 12: permits: one more command (`Op::ClaimPermit`), three refusals
/// (`permits_mismatch`, `not_exclusive`, `holder_limit`), two outcomes and a blocked kind,
/// and the keys held by permits in the state, encoded after the lines and only when a
/// permit is held (`sm_state`), so a format-11 dir is format 12 as it is and a state without
/// permits encodes as format 11's; the leader proposes the new command only once every
/// member said it reads format 12.
/// Format 13: shared holders and lines for permits: one more way to share a key
/// (`Sharing::Shared`, in `Op::ClaimPermit` and in the permits of the state), two more
/// commands (`Op::WaitPermit`, the leader's `Op::HandOn`) and an outcome, and what each
/// waiter for a permit waits for in the state, encoded after the holders and only when
/// someone waits for a permit (`sm_state`), so a format-12 dir is format 13 as it is and a
/// state without such waiters encodes as format 12's; the leader proposes a shared claim or
/// a wait for a permit only once every member said it reads format 13.
/// Format 14: one more command, `Op::ClaimNextUnfinished` (`claim-next` walking only the
/// keys whose status is not finished, from an index the state machine derives from the case
/// files, so that finished work under a prefix neither slows it nor uses up its scan limit);
/// nothing in the state changes, so a format-13 dir is format 14 as it is, and the leader
/// proposes the new walk only once every member said it reads format 14 (format 9's
/// `Op::ClaimNext` until then, which every node keeps applying by format 9's walk).
/// Format 15: one more command, `Op::Retry` (a client's retry after an attempt that may have
/// reached the cluster, applied only if the cluster can match it to its first attempt, else
/// refused as too old: a retry no longer applies twice once its client has left the retry
/// memory); nothing in the state changes, so a format-14 dir is format 15 as it is, and the
/// leader proposes retries as `Op::Retry` only once every member said it reads format 15 (as
/// plain commands until then, applied as before).
pub const DATA_FORMAT: u32 = 15;
/// The oldest format this baton reads (and upgrades).
pub const DATA_FORMAT_OLDEST: u32 = 2;
const IDENTITY_FILE: &str = "baton.id";
/// The Raft log's segment files (`segments`), from data format 6.
const LOG_DIR: &str = "log";

/// Why a data dir cannot be used. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("data dir {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "data dir {dir} is not empty and has no {IDENTITY_FILE}: it is not a baton data dir; \
         give --data-dir an empty or baton directory"
    )]
    Foreign { dir: PathBuf },
    #[error("data dir {dir} has a corrupt {IDENTITY_FILE} ({detail}); restore it from a backup or wipe the dir and rejoin")]
    CorruptIdentity { dir: PathBuf, detail: String },
    #[error(
        "data dir {dir} belongs to node {found_node} of cluster {found_cluster:?}, but this is \
         node {node} of cluster {cluster:?}; give each node its own data dir"
    )]
    WrongIdentity {
        dir: PathBuf,
        found_node: NodeId,
        found_cluster: String,
        node: NodeId,
        cluster: String,
    },
    #[error(
        "data dir {dir} is not empty: a restore seeds a new node, give it an empty or new dir"
    )]
    NotEmpty { dir: PathBuf },
    #[error("data dir {dir} has format {found}, this baton reads formats {DATA_FORMAT_OLDEST} to {DATA_FORMAT}")]
    WrongFormat { dir: PathBuf, found: u32 },
    #[error(
        "data dir {dir} is in use: another process holds its lock ({}); stop the node \
         that runs on it, or give this one another --data-dir",
        dir.join(meta::LOCK_FILE).display()
    )]
    InUse { dir: PathBuf },
    #[error("data dir {dir}: cannot open the sled store (corrupt or unreadable): {source}")]
    Sled {
        dir: PathBuf,
        #[source]
        source: sled::Error,
    },
    #[error(
        "data dir {dir}: stored state is unreadable ({detail}); this node must not serve from \
         it. Recover it from the other nodes: baton cluster remove {node}, wipe the data dir, \
         start this node with --join (deploy/RUNBOOK.md, \"Replacing a node whose disk was \
         lost\"); a cluster of one restores from a backup"
    )]
    CorruptState {
        dir: PathBuf,
        node: NodeId,
        detail: String,
    },
}

/// Who a data dir belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    format: u32,
    node_id: NodeId,
    cluster_name: String,
    /// Random, made with the dir: tells this dir from a later one of the same node id
    /// (`crate::peers`). 0 in dirs made before it existed; given one at the next start.
    #[serde(default)]
    incarnation: u64,
}

/// The incarnation of the data dir `dir` (opened before, so it has one).
pub fn incarnation(dir: &Path) -> Result<u64, OpenError> {
    let bytes = std::fs::read(dir.join(IDENTITY_FILE)).map_err(|source| OpenError::Io {
        dir: dir.to_path_buf(),
        source,
    })?;
    let found: Identity =
        serde_json::from_slice(&bytes).map_err(|e| OpenError::CorruptIdentity {
            dir: dir.to_path_buf(),
            detail: e.to_string(),
        })?;
    Ok(found.incarnation)
}

/// Opens (or creates) the data dir of `node_id` in `cluster_name` and returns its log store
/// and state machine, with the default watch window.
pub fn open(
    dir: &Path,
    node_id: NodeId,
    cluster_name: &str,
    countdowns: Arc<Countdowns>,
) -> Result<(LogStore, StateMachine), OpenError> {
    open_with(
        dir,
        node_id,
        cluster_name,
        countdowns,
        WATCH_WINDOW_EVENTS_DEFAULT,
        Arc::default(),
    )
}

/// `open`, keeping `watch_window` recent events for watches and recording flush and apply
/// times in `metrics`.
pub fn open_with(
    dir: &Path,
    node_id: NodeId,
    cluster_name: &str,
    countdowns: Arc<Countdowns>,
    watch_window: usize,
    metrics: Arc<Metrics>,
) -> Result<(LogStore, StateMachine), OpenError> {
    let io = |source| OpenError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let corrupt = |detail: String| OpenError::CorruptState {
        dir: dir.to_path_buf(),
        node: node_id,
        detail,
    };
    let found_format = check_identity(dir, node_id, cluster_name)?;
    let meta = Arc::new(meta::MetaFile::open(dir).map_err(|e| match e {
        meta::MetaError::InUse { .. } => OpenError::InUse {
            dir: dir.to_path_buf(),
        },
        meta::MetaError::Io { source, .. } => io(source),
        damaged @ meta::MetaError::Damaged { .. } => corrupt(damaged.to_string()),
    })?);
    // An older dir: sled's meta (formats 2 to 6) and log (2 to 5) are read once and written
    // over durably; only then does the identity say the new format (a crash in between
    // redoes it from sled, which nothing writes to any more).
    let legacy = match found_format < DATA_FORMAT {
        true => legacy::Legacy::open(dir)?,
        false => None,
    };
    if let Some(old) = &legacy {
        tracing::info!(
            dir = %dir.display(), from = found_format, to = DATA_FORMAT,
            "upgrading the data dir format"
        );
        let was = old.meta().map_err(corrupt)?;
        meta.save(|m| *m = was).map_err(io)?;
    }
    let purged = meta.get().purged;
    let (segments, found) =
        log_store::open_segments(&dir.join(LOG_DIR), purged).map_err(|e| match e {
            segments::LogOpenError::Io(source) => io(source),
            other => corrupt(other.to_string()),
        })?;
    if let Some(d) = &found.damage {
        tracing::error!(
            file = %d.file.display(), offset = d.offset, index = d.index, through = d.through,
            kept = %d.kept.display(),
            "log damaged before its durable end (not a crash's torn tail): the damaged files \
             are kept, the log is cut there, and this node neither votes nor reports ready \
             until the leader has refilled it through index {}", d.through
        );
    } else if found.cut_at.is_some() || found.segments_removed > 0 {
        tracing::warn!(
            entries = found.entries, cut_at = ?found.cut_at, segments_removed = found.segments_removed,
            "log opened: what followed its last intact record was removed (writes a crash \
             cut short: no mark vouched for them)"
        );
    }
    let flusher = flush::Flusher::start(segments.clone(), metrics.clone()).map_err(io)?;
    let log = LogStore::open(segments, meta, flusher);
    if found_format < DATA_FORMAT {
        if let (Some(old), true) = (&legacy, found_format < 6) {
            let moved = log.replace_log(old.log().map_err(corrupt)?).map_err(io)?;
            tracing::info!(entries = moved, "log moved from sled into segment files");
        }
        set_identity_format(dir).map_err(io)?;
    }
    // sled is not used from format 7 on: its dir goes once the identity says so (also when
    // a crash came between the two).
    drop(legacy);
    let sled_dir = dir.join(legacy::SLED_DIR);
    if sled_dir.exists() {
        std::fs::remove_dir_all(&sled_dir).map_err(io)?;
        tracing::info!(dir = %sled_dir.display(), "sled's files removed: format 7 keeps none");
    }
    let sm = StateMachine::open(&dir.join("snapshots"), countdowns, watch_window, metrics)
        .map_err(|detail| OpenError::CorruptState {
            dir: dir.to_path_buf(),
            node: node_id,
            detail,
        })?;
    // The names of a new data dir (the dir itself, its log, lock and snapshots directories),
    // durable only once their directories are synced: a power cut before anything else
    // synced them lost the whole data dir, every acknowledged write with it (found by the
    // power-cut test; jepsen-tests/BUGS.md, P1). Done at every open (a few fsyncs), so a dir
    // made by an earlier version is covered too.
    crate::durable::sync_file(&dir.join(meta::LOCK_FILE)).map_err(io)?;
    crate::durable::sync_dirs(&[
        &dir.join(LOG_DIR),
        &dir.join("snapshots"),
        dir,
        // A relative data dir's parent is "" (the working directory).
        dir.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    ])
    .map_err(io)?;
    Ok((log, sm))
}

/// Seeds a new node's data dir (absent or empty) with a snapshot: for `baton-node restore`.
/// The node starts from it as from any snapshot; openraft finds no log after it.
pub fn seed(
    dir: &Path,
    node_id: NodeId,
    cluster_name: &str,
    meta: &crate::raft_types::SnapshotMeta,
    state: &SmState,
) -> Result<(), OpenError> {
    let io = |source| OpenError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(io(e)),
    };
    if !empty {
        return Err(OpenError::NotEmpty {
            dir: dir.to_path_buf(),
        });
    }
    check_identity(dir, node_id, cluster_name)?;
    let snapshots = dir.join("snapshots");
    let mut bytes = encode(meta);
    bytes.extend(encode(state));
    state_machine::seal(&mut bytes);
    let written = std::fs::create_dir_all(&snapshots)
        .and_then(|()| write_durably(&state_machine::snapshot_path(&snapshots), &bytes));
    if let Err(e) = written {
        // Leave the dir as empty as it was, so that the restore can simply be run again.
        let _ = std::fs::remove_dir_all(&snapshots);
        let _ = std::fs::remove_file(dir.join(IDENTITY_FILE));
        return Err(io(e));
    }
    Ok(())
}

/// Writes the current format into the identity of `dir`, once its contents are upgraded.
fn set_identity_format(dir: &Path) -> std::io::Result<()> {
    let id_path = dir.join(IDENTITY_FILE);
    let mut found: Identity = serde_json::from_slice(&std::fs::read(&id_path)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    found.format = DATA_FORMAT;
    let bytes = serde_json::to_vec_pretty(&found).expect("identity serializes");
    write_durably(&id_path, &bytes)
}

/// Checks (or makes) the identity of `dir`; returns the format its contents are in (an
/// older one is upgraded by the caller, which then sets the identity's format).
fn check_identity(dir: &Path, node_id: NodeId, cluster_name: &str) -> Result<u32, OpenError> {
    let io = |source| OpenError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let want = Identity {
        format: DATA_FORMAT,
        node_id,
        cluster_name: cluster_name.to_string(),
        incarnation: crate::peers::new_incarnation(),
    };
    let id_path = dir.join(IDENTITY_FILE);
    match std::fs::read(&id_path) {
        Ok(bytes) => {
            let found: Identity =
                serde_json::from_slice(&bytes).map_err(|e| OpenError::CorruptIdentity {
                    dir: dir.to_path_buf(),
                    detail: e.to_string(),
                })?;
            if !(DATA_FORMAT_OLDEST..=DATA_FORMAT).contains(&found.format) {
                return Err(OpenError::WrongFormat {
                    dir: dir.to_path_buf(),
                    found: found.format,
                });
            }
            if (found.node_id, &found.cluster_name) != (want.node_id, &want.cluster_name) {
                return Err(OpenError::WrongIdentity {
                    dir: dir.to_path_buf(),
                    found_node: found.node_id,
                    found_cluster: found.cluster_name,
                    node: node_id,
                    cluster: cluster_name.to_string(),
                });
            }
            if found.incarnation == 0 {
                // A dir from before incarnations gets one now.
                let bytes = serde_json::to_vec_pretty(&Identity {
                    incarnation: want.incarnation,
                    ..found.clone()
                })
                .expect("identity serializes");
                write_durably(&id_path, &bytes).map_err(io)?;
            }
            Ok(found.format)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io)?;
            if std::fs::read_dir(dir).map_err(io)?.next().is_some() {
                return Err(OpenError::Foreign {
                    dir: dir.to_path_buf(),
                });
            }
            let bytes = serde_json::to_vec_pretty(&want).expect("identity serializes");
            write_durably(&id_path, &bytes).map_err(io)?;
            Ok(DATA_FORMAT)
        }
        Err(e) => Err(io(e)),
    }
}

/// Encoding of everything baton stores or sends between nodes.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serialize(value).expect("baton types always serialize")
}

pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    bincode::deserialize(bytes)
}

/// `decode`, refusing trailing bytes: for telling data formats apart, where a value of one
/// format must not pass for a prefix of another's.
pub fn decode_whole<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .reject_trailing_bytes()
        .deserialize(bytes)
}

#[cfg(test)]
mod tests;
