//! Data dirs of formats 2 to 6 kept the log's meta (vote, committed id, purge point: tree
//! `raft_meta`) in sled, and those of formats 2 to 5 the log too (tree `raft_log`, big-endian
//! index -> bincode entry; formats 2 and 3 wrote entries in format 3, `format3`). Opening such
//! a dir reads them here, once: the meta into `meta`'s file, the log into segments, both
//! durably, before the identity says format 7; then the sled dir is removed. Nothing writes
//! to sled any more.

use std::path::Path;

use super::format3::EntryV3;
use super::meta::Meta;
use super::{decode, decode_whole, OpenError};
use crate::raft_types::{Entry, LogId, Vote};

/// The sled dir of a data dir.
pub const SLED_DIR: &str = "sled";

const KEY_VOTE: &[u8] = b"vote";
const KEY_COMMITTED: &[u8] = b"committed";
const KEY_LAST_PURGED: &[u8] = b"last_purged";

/// How long [`Legacy::open`] tries again a sled lock found taken.
pub const LEGACY_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// An older data dir's sled database, read to upgrade it.
pub struct Legacy {
    db: sled::Db,
}

impl Legacy {
    /// Opens the sled database of `dir`, if it has one. sled lets go of its file lock a
    /// moment after its last handle drops (its threads hold the db a little longer), so a
    /// lock found taken is tried again for up to [`LEGACY_LOCK_WAIT`] before it is reported
    /// as another process's (`OpenError::InUse`).
    pub fn open(dir: &Path) -> Result<Option<Legacy>, OpenError> {
        let since = std::time::Instant::now();
        loop {
            match Self::open_once(dir) {
                Err(OpenError::InUse { .. }) if since.elapsed() < LEGACY_LOCK_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                opened => return opened,
            }
        }
    }

    fn open_once(dir: &Path) -> Result<Option<Legacy>, OpenError> {
        let path = dir.join(SLED_DIR);
        if !path.join("db").exists() {
            return Ok(None);
        }
        let db = sled::Config::new()
            .path(&path)
            .cache_capacity(crate::limits::SLED_CACHE_BYTES)
            .open()
            .map_err(|source| match &source {
                // sled takes an exclusive lock on its db file; another process (a node of an
                // older version) has it. sled 0.34.7 (pinned) reports that as an `Other`
                // error with this text around the `WouldBlock` from flock.
                sled::Error::Io(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.to_string().starts_with("could not acquire lock on") =>
                {
                    OpenError::InUse {
                        dir: dir.to_path_buf(),
                    }
                }
                _ => OpenError::Sled {
                    dir: dir.to_path_buf(),
                    source,
                },
            })?;
        Ok(Some(Legacy { db }))
    }

    fn get<T: serde::de::DeserializeOwned>(
        tree: &sled::Tree,
        key: &[u8],
    ) -> Result<Option<T>, String> {
        match tree.get(key).map_err(|e| e.to_string())? {
            None => Ok(None),
            Some(bytes) => decode(&bytes).map(Some).map_err(|e| e.to_string()),
        }
    }

    /// The vote, committed id and purge point sled kept.
    pub fn meta(&self) -> Result<Meta, String> {
        let tree = self.db.open_tree("raft_meta").map_err(|e| e.to_string())?;
        Ok(Meta {
            vote: Legacy::get::<Vote>(&tree, KEY_VOTE)?,
            committed: Legacy::get::<Option<LogId>>(&tree, KEY_COMMITTED)?.flatten(),
            purged: Legacy::get::<LogId>(&tree, KEY_LAST_PURGED)?,
        })
    }

    /// The log sled kept (formats 2 to 5), in index order, each entry in today's format: an
    /// entry that reads as today's is taken as it is (blank and membership entries are the
    /// same in both formats), a format-3 one is upgraded.
    pub fn log(&self) -> Result<Vec<Entry>, String> {
        let tree = self.db.open_tree("raft_log").map_err(|e| e.to_string())?;
        let mut entries = Vec::new();
        for item in tree.iter() {
            let (key, bytes) = item.map_err(|e| e.to_string())?;
            let entry = match decode_whole::<Entry>(&bytes) {
                Ok(entry) => entry,
                Err(_) => decode_whole::<EntryV3>(&bytes)
                    .map_err(|e| format!("log entry {key:?} is neither format 3 nor 4: {e}"))?
                    .upgrade(),
            };
            entries.push(entry);
        }
        Ok(entries)
    }
}

/// Writes a format-2-to-6 sled database into `dir` (tests of the upgrade): `meta` and
/// `log`, the entries as given (`bytes` per index).
#[cfg(test)]
pub fn write_for_tests(dir: &Path, meta: &Meta, log: &[(u64, Vec<u8>)]) {
    use super::encode;
    let db = sled::Config::new().path(dir.join(SLED_DIR)).open().unwrap();
    let tree = db.open_tree("raft_meta").unwrap();
    if let Some(vote) = &meta.vote {
        tree.insert(KEY_VOTE, encode(vote)).unwrap();
    }
    tree.insert(KEY_COMMITTED, encode(&meta.committed)).unwrap();
    if let Some(purged) = &meta.purged {
        tree.insert(KEY_LAST_PURGED, encode(purged)).unwrap();
    }
    let raft_log = db.open_tree("raft_log").unwrap();
    for (index, bytes) in log {
        raft_log.insert(index.to_be_bytes(), bytes.clone()).unwrap();
    }
    db.flush().unwrap();
}
