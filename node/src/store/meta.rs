//! The log's small durable state: the vote, the purge point and the last committed id, in one
//! checksummed file, `raft.meta` (data format 7; before, sled kept them).
//!
//! The file is `bincode(Meta) | crc32` (little-endian; the CRC covers the bincode), replaced
//! durably at each change that must be on disk before it counts: a vote (before it is sent)
//! and a purge point (before any segment it allows goes). Each write is a temp file, fsync,
//! rename, fsync of the directory (`write_durably`): a crash leaves the old file or the new
//! one, whole. The committed id only rides along: it lets a restart apply further before
//! hearing from the leader, and is read back no higher than the log's last entry.
//!
//! The data dir is locked while a store has it open (`LOCK_FILE`, an exclusive `flock`),
//! as sled's lock did: two nodes on one dir would each believe they own the log.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{decode_whole, encode, write_durably};
use crate::raft_types::{LogId, Vote};

/// The meta file, in the data dir.
pub const META_FILE: &str = "raft.meta";
/// The lock file, in the data dir.
pub const LOCK_FILE: &str = "LOCK";

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub purged: Option<LogId>,
}

/// Why the meta file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is damaged ({detail})", path.display())]
    Damaged { path: PathBuf, detail: String },
    #[error("the data dir is in use: another process holds {}", path.display())]
    InUse { path: PathBuf },
}

/// The meta file of one data dir, with what it holds now, and the dir's lock.
pub struct MetaFile {
    path: PathBuf,
    meta: Mutex<Meta>,
    /// Held while this store is open; the lock goes with it.
    _lock: File,
}

fn seal(meta: &Meta) -> Vec<u8> {
    let mut bytes = encode(meta);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

fn unseal(path: &Path, bytes: &[u8]) -> Result<Meta, MetaError> {
    let damaged = |detail: String| MetaError::Damaged {
        path: path.to_path_buf(),
        detail,
    };
    let Some(split) = bytes.len().checked_sub(4) else {
        return Err(damaged(format!("{} bytes, too short", bytes.len())));
    };
    let (body, crc) = bytes.split_at(split);
    let crc = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    if crc32fast::hash(body) != crc {
        return Err(damaged("checksum mismatch".into()));
    }
    decode_whole(body).map_err(|e| damaged(e.to_string()))
}

impl MetaFile {
    /// Locks the data dir `dir` and reads its meta file (none yet: all empty).
    pub fn open(dir: &Path) -> Result<MetaFile, MetaError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| MetaError::Io { path, source }
        };
        let lock_path = dir.join(LOCK_FILE);
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(MetaError::InUse { path: lock_path })
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&lock_path)(e)),
        }
        let path = dir.join(META_FILE);
        let meta = match std::fs::read(&path) {
            Ok(bytes) => unseal(&path, &bytes)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Meta::default(),
            Err(e) => return Err(io(&path)(e)),
        };
        Ok(MetaFile {
            path,
            meta: Mutex::new(meta),
            _lock: lock,
        })
    }

    /// What the file holds (with a committed id not yet written, if one was set since).
    pub fn get(&self) -> Meta {
        self.meta.lock().expect("meta lock").clone()
    }

    /// Changes what the file holds and writes it durably before returning (blocking: call
    /// it off the runtime's threads). On an error the file may hold the old or the new.
    pub fn save(&self, change: impl FnOnce(&mut Meta)) -> io::Result<()> {
        let mut meta = self.meta.lock().expect("meta lock");
        change(&mut meta);
        if crate::chaos::fail_fsync() {
            return Err(io::Error::from_raw_os_error(5)); // EIO, as the flusher's
        }
        write_durably(&self.path, &seal(&meta))
    }

    /// Sets the committed id in memory: written with the next `save`.
    pub fn set_committed(&self, committed: Option<LogId>) {
        self.meta.lock().expect("meta lock").committed = committed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::log_id;

    #[test]
    fn what_is_saved_is_read_back_a_damaged_file_is_refused_and_the_dir_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let file = MetaFile::open(dir.path()).unwrap();
        assert_eq!(file.get(), Meta::default());
        let err = MetaFile::open(dir.path()).err().expect("locked");
        assert!(matches!(err, MetaError::InUse { .. }), "{err}");
        file.set_committed(Some(log_id(1, 1, 5)));
        file.save(|m| m.purged = Some(log_id(1, 1, 3))).unwrap();
        let want = Meta {
            vote: None,
            committed: Some(log_id(1, 1, 5)),
            purged: Some(log_id(1, 1, 3)),
        };
        assert_eq!(file.get(), want);
        drop(file);
        let file = MetaFile::open(dir.path()).unwrap();
        assert_eq!(file.get(), want, "read back after a reopen");
        drop(file);
        let path = dir.path().join(META_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = MetaFile::open(dir.path()).err().expect("damaged");
        assert!(err.to_string().contains("checksum mismatch"), "{err}");
    }
}
