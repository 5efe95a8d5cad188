//! What a power cut would take back: the undo journal of the "lose unsynced writes"
//! filesystem, kept apart from FUSE so that it can be tested on a plain directory.
//!
//! Every change goes to the backing directory at once (reads see it, as they would the page
//! cache), and the journal records how to take it back:
//!
//! - a **write** or **truncate** of a file records the bytes and length it replaced; an
//!   `fsync`/`fdatasync` of the file forgets them (its data is durable); a *failed* one
//!   ([`Journal::sync_failed`]) leaves them to be taken back for good, as Linux does after a
//!   failed fsync ("fsyncgate": the pages are marked clean, and a later fsync that succeeds
//!   does not write them);
//! - a **create**, **mkdir**, **unlink**, **rmdir** or **rename** records how to take the name
//!   change back (an unlinked file or directory is kept in a hidden graveyard until then);
//!   it is durable once every directory it changed was `fsync`ed after it (POSIX: a new,
//!   renamed or removed name is durable only after an fsync of its directory).
//!
//! A cut ([`Journal::cut`]) undoes what is not durable, newest first: file data, then names.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of unsynced writes one filesystem remembers at most (their old contents); past it,
/// writes fail with ENOSPC until something is synced. Far above what a node writes between
/// two fsyncs.
pub const UNSYNCED_BYTES_MAX: usize = 512 * 1024 * 1024;

/// The torn-write granularity: a sector.
pub const SECTOR_BYTES: u64 = 512;

/// The hidden directory (at the backing root) where unlinked names wait until their
/// directory is synced.
pub const GRAVEYARD: &str = ".powerfs-graveyard";

/// How much of what was not synced a cut takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Everything not synced is gone.
    All,
    /// Per file, a prefix of its unsynced writes survives (chosen by `seed`); per
    /// directory, a prefix of its unsynced name changes.
    Prefix { seed: u64 },
    /// As `Prefix`, and the first write lost is torn: its bytes up to a sector boundary
    /// inside it survive.
    Torn { seed: u64 },
}

/// How a file's content changed, to take it back.
#[derive(Debug)]
struct DataUndo {
    offset: u64,
    /// The bytes the change replaced (within the old length).
    old: Vec<u8>,
    /// The file's length before the change.
    old_len: u64,
    /// The change's own length (for tearing).
    len: u64,
    /// A write may be torn; a truncate is taken back whole or not at all.
    tearable: bool,
    /// An fsync of the file failed after this change: no later fsync makes it durable.
    sync_failed: bool,
}

/// A name change, to take it back.
#[derive(Debug)]
enum NameUndo {
    /// `path` was created (a file or a directory): remove it.
    Created { path: PathBuf },
    /// `path` was removed: it waits at `grave`.
    Removed { path: PathBuf, grave: PathBuf },
    /// `from` was renamed to `to`, which replaced what now waits at `replaced`.
    Renamed {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
}

#[derive(Debug)]
struct NameChange {
    undo: NameUndo,
    /// The directories (relative paths) that must still be synced for it to be durable.
    pending: BTreeSet<PathBuf>,
}

impl NameChange {
    /// The directory `from` is now `to`: its paths under `from` move with it.
    fn rebase(&mut self, from: &Path, to: &Path) {
        let moved = |p: &Path| match p.strip_prefix(from) {
            Ok(rest) if rest.as_os_str().is_empty() => to.to_path_buf(),
            Ok(rest) => to.join(rest),
            Err(_) => p.to_path_buf(),
        };
        self.pending = self.pending.iter().map(|p| moved(p)).collect();
        match &mut self.undo {
            NameUndo::Created { path } | NameUndo::Removed { path, .. } => *path = moved(path),
            NameUndo::Renamed { from: f, to: t, .. } => {
                *f = moved(f);
                *t = moved(t);
            }
        }
    }
}

/// What a cut took back, for the run's record.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Lost {
    pub writes: usize,
    pub bytes: u64,
    pub names: usize,
    /// Undo steps that could not be done (e.g. a later durable change took the name away);
    /// each is logged.
    pub failed: usize,
}

/// The journal of one backing directory. Files are keyed by a stable id (the FUSE inode
/// number), whose current path the caller gives when it undoes.
#[derive(Debug)]
pub struct Journal {
    root: PathBuf,
    data: HashMap<u64, Vec<DataUndo>>,
    names: Vec<NameChange>,
    unsynced_bytes: usize,
    graves: u64,
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{UNSYNCED_BYTES_MAX} bytes of unsynced writes are remembered already (UNSYNCED_BYTES_MAX): sync first")]
    Full,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Journal {
    /// A journal over `root`, which it prepares (the graveyard).
    pub fn new(root: &Path) -> std::io::Result<Journal> {
        // Graves left by a clean unmount (changes never cut back) are gone for good.
        remove_any(&root.join(GRAVEYARD))?;
        std::fs::create_dir_all(root.join(GRAVEYARD))?;
        Ok(Journal {
            root: root.to_path_buf(),
            data: HashMap::new(),
            names: Vec::new(),
            unsynced_bytes: 0,
            graves: 0,
        })
    }

    /// The backing path of `rel`.
    pub fn backing(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes `bytes` at `offset` of `file` (id `id`), remembering what it replaces.
    pub fn write(
        &mut self,
        id: u64,
        file: &File,
        offset: u64,
        bytes: &[u8],
    ) -> Result<(), JournalError> {
        self.remember(id, file, offset, bytes.len() as u64, true)?;
        file.write_all_at(bytes, offset)?;
        Ok(())
    }

    /// Sets the length of `file` (id `id`), remembering what a shrink cuts off.
    pub fn truncate(&mut self, id: u64, file: &File, len: u64) -> Result<(), JournalError> {
        let old_len = file.metadata()?.len();
        if len < old_len {
            self.remember(id, file, len, old_len - len, false)?;
        } else {
            self.data.entry(id).or_default().push(DataUndo {
                offset: old_len,
                old: Vec::new(),
                old_len,
                len: 0,
                tearable: false,
                sync_failed: false,
            });
        }
        file.set_len(len)?;
        Ok(())
    }

    fn remember(
        &mut self,
        id: u64,
        file: &File,
        offset: u64,
        len: u64,
        tearable: bool,
    ) -> Result<(), JournalError> {
        let old_len = file.metadata()?.len();
        let end = (offset + len).min(old_len);
        let mut old = vec![0; end.saturating_sub(offset) as usize];
        if !old.is_empty() {
            file.read_exact_at(&mut old, offset)?;
        }
        if self.unsynced_bytes + old.len() > UNSYNCED_BYTES_MAX {
            return Err(JournalError::Full);
        }
        self.unsynced_bytes += old.len();
        self.data.entry(id).or_default().push(DataUndo {
            offset,
            old,
            old_len,
            len,
            tearable,
            sync_failed: false,
        });
        Ok(())
    }

    /// Whether file `id` has changes that a cut would take back.
    pub fn is_unsynced(&self, id: u64) -> bool {
        self.data.get(&id).is_some_and(|undo| !undo.is_empty())
    }

    /// `fsync`/`fdatasync` of file `id`: its data is durable, except the changes an
    /// earlier failed sync left behind ([`Journal::sync_failed`]).
    pub fn synced(&mut self, id: u64) {
        if let Some(undo) = self.data.get_mut(&id) {
            let before: usize = undo.iter().map(|u| u.old.len()).sum();
            undo.retain(|u| u.sync_failed);
            let after: usize = undo.iter().map(|u| u.old.len()).sum();
            self.unsynced_bytes -= before - after;
            if undo.is_empty() {
                self.data.remove(&id);
            }
        }
    }

    /// An `fsync`/`fdatasync` of file `id` failed: its changes so far never become durable,
    /// whatever a later sync answers (Linux marks the failed pages clean and forgets the
    /// error once reported), so a cut takes them back. A later write over the same bytes is
    /// taken back with them: stricter than the page cache, which would write that page again.
    pub fn sync_failed(&mut self, id: u64) {
        if let Some(undo) = self.data.get_mut(&id) {
            for u in undo {
                u.sync_failed = true;
            }
        }
    }

    /// `fsync` of directory `dir` (relative): name changes in it are durable once every
    /// directory they touched is synced; a removed name's grave is emptied then.
    pub fn dir_synced(&mut self, dir: &Path) {
        let mut kept = Vec::with_capacity(self.names.len());
        for mut change in std::mem::take(&mut self.names) {
            change.pending.remove(dir);
            if change.pending.is_empty() {
                self.bury(&change);
            } else {
                kept.push(change);
            }
        }
        self.names = kept;
    }

    /// Records that `rel` (a file or directory) was just created.
    pub fn created(&mut self, rel: &Path) {
        self.names.push(NameChange {
            pending: parents([rel]),
            undo: NameUndo::Created {
                path: rel.to_path_buf(),
            },
        });
    }

    /// Removes `rel` (unlink or rmdir), keeping it in the graveyard until its directory is
    /// synced; returns where it waits (relative), where an open file's writes still go.
    pub fn remove(&mut self, rel: &Path) -> std::io::Result<PathBuf> {
        let grave = self.new_grave();
        std::fs::rename(self.root.join(rel), self.root.join(&grave))?;
        self.names.push(NameChange {
            pending: parents([rel]),
            undo: NameUndo::Removed {
                path: rel.to_path_buf(),
                grave: grave.clone(),
            },
        });
        Ok(grave)
    }

    /// Renames `from` to `to` (replacing what `to` was, kept in the graveyard, whose place it
    /// returns: an open file's writes still go there). As rename(2): a directory replaces
    /// only an empty directory, a file only a file.
    pub fn rename(&mut self, from: &Path, to: &Path) -> std::io::Result<Option<PathBuf>> {
        let errno = std::io::Error::from_raw_os_error;
        let source = self.root.join(from).symlink_metadata()?;
        let target = self.root.join(to);
        if let Ok(existing) = target.symlink_metadata() {
            match (source.is_dir(), existing.is_dir()) {
                (true, true) if std::fs::read_dir(&target)?.next().is_some() => {
                    return Err(errno(libc::ENOTEMPTY));
                }
                (true, false) => return Err(errno(libc::ENOTDIR)),
                (false, true) => return Err(errno(libc::EISDIR)),
                _ => {}
            }
        }
        let replaced = if target.symlink_metadata().is_ok() {
            let grave = self.new_grave();
            std::fs::rename(&target, self.root.join(&grave))?;
            Some(grave)
        } else {
            None
        };
        if let Err(e) = std::fs::rename(self.root.join(from), &target) {
            if let Some(grave) = &replaced {
                let _ = std::fs::rename(self.root.join(grave), &target);
            }
            return Err(e);
        }
        // Changes still pending under a renamed directory now live under its new name.
        if source.is_dir() {
            for change in &mut self.names {
                change.rebase(from, to);
            }
        }
        self.names.push(NameChange {
            pending: parents([from, to]),
            undo: NameUndo::Renamed {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
                replaced: replaced.clone(),
            },
        });
        Ok(replaced)
    }

    fn new_grave(&mut self) -> PathBuf {
        self.graves += 1;
        Path::new(GRAVEYARD).join(self.graves.to_string())
    }

    /// Unsynced bytes remembered now.
    pub fn unsynced_bytes(&self) -> usize {
        self.unsynced_bytes
    }

    /// Cuts the power: takes back what is not durable, as `loss` says, newest first. `path_of`
    /// gives a file id's current relative path (before any name is taken back). Afterwards the
    /// journal is empty: what is left is what a restart finds.
    pub fn cut(&mut self, loss: Loss, path_of: impl Fn(u64) -> Option<PathBuf>) -> Lost {
        let mut lost = Lost::default();
        let mut rng = match loss {
            Loss::All => None,
            Loss::Prefix { seed } | Loss::Torn { seed } => Some(Rng::new(seed)),
        };
        let torn = matches!(loss, Loss::Torn { .. });
        let mut ids: Vec<u64> = self.data.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let undo = self.data.remove(&id).unwrap_or_default();
            let keep = rng
                .as_mut()
                .map_or(0, |r| r.below(undo.len() as u64 + 1) as usize);
            let Some(rel) = path_of(id) else {
                continue;
            };
            let path = self.root.join(rel);
            let file = match std::fs::OpenOptions::new().write(true).open(&path) {
                Ok(f) => f,
                // Removed for good (its directory was synced): nothing to take back.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "power cut: cannot undo writes");
                    lost.failed += 1;
                    continue;
                }
            };
            for (i, u) in undo.iter().enumerate().skip(keep).rev() {
                // The first write lost may be torn: it survives up to a sector boundary strictly
                // inside it (a write within one sector is atomic: lost whole).
                let survives = match (torn && i == keep && u.tearable, rng.as_mut()) {
                    (true, Some(r)) => {
                        let first = (u.offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
                        let end = u.offset + u.len;
                        if first < end {
                            let inside = (end - 1 - first) / SECTOR_BYTES + 1;
                            first + r.below(inside) * SECTOR_BYTES - u.offset
                        } else {
                            0
                        }
                    }
                    _ => 0,
                };
                if let Err(e) = undo_data(&file, u, survives) {
                    tracing::warn!(path = %path.display(), error = %e, "power cut: cannot undo a write");
                    lost.failed += 1;
                }
                lost.writes += 1;
                lost.bytes += u.len - survives;
            }
        }
        self.unsynced_bytes = 0;
        let changes = std::mem::take(&mut self.names);
        let keep = rng
            .as_mut()
            .map_or(0, |r| r.below(changes.len() as u64 + 1) as usize);
        for change in changes.iter().skip(keep).rev() {
            let undone = match &change.undo {
                NameUndo::Created { path } => remove_any(&self.root.join(path)),
                NameUndo::Removed { path, grave } => {
                    std::fs::rename(self.root.join(grave), self.root.join(path))
                }
                NameUndo::Renamed { from, to, replaced } => {
                    std::fs::rename(self.root.join(to), self.root.join(from)).and_then(|()| {
                        match replaced {
                            Some(grave) => {
                                std::fs::rename(self.root.join(grave), self.root.join(to))
                            }
                            None => Ok(()),
                        }
                    })
                }
            };
            lost.names += 1;
            if let Err(e) = undone {
                tracing::warn!(change = ?change.undo, error = %e, "power cut: cannot undo a name change");
                lost.failed += 1;
            }
        }
        // What survived of the kept changes is durable now: empty their graves.
        for change in changes.iter().take(keep) {
            self.bury(change);
        }
        lost
    }

    /// A name change is durable: what it removed or replaced is gone for good.
    fn bury(&self, change: &NameChange) {
        let grave = match &change.undo {
            NameUndo::Removed { grave, .. } => Some(grave),
            NameUndo::Renamed { replaced, .. } => replaced.as_ref(),
            NameUndo::Created { .. } => None,
        };
        if let Some(grave) = grave {
            let _ = remove_any(&self.root.join(grave));
        }
    }
}

/// Takes one data change back, except its first `survives` bytes.
fn undo_data(file: &File, u: &DataUndo, survives: u64) -> std::io::Result<()> {
    let from = survives.min(u.old.len() as u64);
    file.write_all_at(&u.old[from as usize..], u.offset + from)?;
    let len = file.metadata()?.len();
    // The change's own end, what survives of it, and the old length decide the new one.
    let surviving_end = u.offset + survives;
    let new_len = if survives > 0 {
        u.old_len.max(surviving_end.min(len))
    } else {
        u.old_len
    };
    file.set_len(new_len)
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match path.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The directories whose fsync makes a change of these names durable.
fn parents<'a>(paths: impl IntoIterator<Item = &'a Path>) -> BTreeSet<PathBuf> {
    paths
        .into_iter()
        .map(|p| p.parent().unwrap_or(Path::new("")).to_path_buf())
        .collect()
}

/// A small deterministic generator (xorshift), so a seed reproduces a cut.
struct Rng(u64);

impl Rng {
    /// Seeds through splitmix64, so that small neighbouring seeds give unrelated sequences
    /// (xorshift's first outputs from a small seed are nearly alike).
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if n == 0 {
            0
        } else {
            self.0 % n
        }
    }
}
