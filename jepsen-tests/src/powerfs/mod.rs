//! A filesystem that forgets unsynced writes: the power-cut fault of the chaos suite.
//!
//! A FUSE pass-through mount (on the `fuser` crate) over a backing directory. Every change
//! reaches the backing directory at once, so a running node sees its own writes as it would
//! through the page cache; the [`journal`] remembers how to take back each change that is not
//! yet durable. [`PowerFs::cut`] is a power cut: the caller has killed the node (SIGKILL), the
//! mount is taken away, and everything not durable is rolled back ([`Loss`]: all of it, a
//! random prefix per file, or with the first lost write torn at a 512-byte boundary).
//! What is left in the backing directory is what the node finds when it is started again,
//! on a new mount.
//!
//! ## What it models
//!
//! - File data is durable after `fsync` or `fdatasync` of that file (any handle), and not
//!   before. `sync_file_range` reaches no FUSE filesystem, so it makes nothing durable: it
//!   promises no durability (no metadata, no device cache flush), and this models exactly
//!   that. A write through `O_SYNC`/`O_DSYNC` counts as unsynced too (a model stricter than
//!   the kernel; baton does not use them).
//! - A created, renamed or removed name is durable only after an `fsync` of its directory
//!   (of both directories, for a rename across two), as POSIX says; ext4's habit of
//!   committing a new file's name along with its data on `fsync` is not relied on.
//! - Reads see every change (synced or not), as the page cache would.
//! - A failing disk ([`PowerFs::fail_syncs`]): every `fsync`, `fdatasync` and directory
//!   fsync answers EIO, and what the failed file sync should have made durable never becomes
//!   so, even after a later sync succeeds (Linux after a failed fsync: "fsyncgate"); a cut
//!   takes it back.
//! - Where the cut lands: at any moment, or, after [`PowerFs::freeze_at_next_fsync`], while
//!   a write waits for its fsync (the disk stops answering at that fsync; the process is
//!   killed and never hears back). Power is lost per disk: a rack cut freezes each node's
//!   disk at its own next fsync, which a simultaneous cut with slow disks can also produce.
//!
//! ## What it does not model
//!
//! - Reordering inside the device: a cut loses a suffix of each file's unsynced writes,
//!   never an earlier write while keeping a later one.
//! - Metadata other than names and lengths (permissions, times) is not rolled back.
//! - Hard links, symlinks, extended attributes and `mmap` writes are not supported (baton's
//!   data dir uses none; `mmap` is refused at open by `direct_io`).
//! - Corruption of synced data: that is the `corrupt` fault ([`crate::sickdisk`]), done on a
//!   stopped node's files.
//!
//! The mount is single-threaded and sends every write through (no writeback cache), so it is
//! slower than a disk; it is for the chaos suite, not for benchmarks.

pub mod journal;
mod mount;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request, WriteFlags,
};

pub use journal::{Journal, JournalError, Loss, Lost, UNSYNCED_BYTES_MAX};
pub use mount::{MountError, PowerFs};

/// Attributes are not cached by the kernel: a cut changes them behind its back.
const TTL: Duration = Duration::ZERO;

/// Open files per mount at most (a node keeps a handful).
pub const OPEN_FILES_MAX: usize = 4_096;

/// The state the FUSE callbacks share with the test that cuts the power.
struct State {
    journal: Journal,
    /// Inode number -> path relative to the backing root ("" is the root, inode 1).
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_inode: u64,
    /// Open handles: handle -> (inode, file).
    open: HashMap<u64, (u64, Arc<File>)>,
    next_handle: u64,
    /// Set by a cut: every later call fails (the power is off).
    off: bool,
    /// The next `fsync` of a file with unsynced writes freezes the disk.
    armed: bool,
    /// The disk is frozen: an `fsync` is held unanswered, and with it every later call
    /// (the mount answers one call at a time), until the cut.
    frozen: bool,
    /// The disk is failing: every sync answers EIO.
    fail_syncs: bool,
    /// Syncs answered EIO so far, and when the first was.
    failed_syncs: u64,
    first_failed: Option<Instant>,
}

impl State {
    fn inode(&mut self, rel: &Path) -> u64 {
        if let Some(ino) = self.inodes.get(rel) {
            return *ino;
        }
        self.next_inode += 1;
        let ino = self.next_inode;
        self.paths.insert(ino, rel.to_path_buf());
        self.inodes.insert(rel.to_path_buf(), ino);
        ino
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        if self.off {
            return Err(Errno::EIO);
        }
        self.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    /// Moves the inode numbers of `from` (and everything under it) to `to`.
    fn renamed(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        // Whatever `to` was is gone from the namespace.
        self.forget_under(to);
        for (old, ino) in moved {
            self.inodes.remove(&old);
            // Not `to.join("")`: that is `to/`, which names no file.
            let rest = old.strip_prefix(from).expect("under from");
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.paths.insert(ino, new.clone());
            self.inodes.insert(new, ino);
        }
    }

    fn forget_under(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .inodes
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            if let Some(ino) = self.inodes.remove(&p) {
                // An open file keeps its inode: its writes are still undone by a cut, at the
                // grave it now sits in.
                self.paths.remove(&ino);
            }
        }
    }

    fn attr(&mut self, rel: &Path) -> Result<FileAttr, Errno> {
        let meta = self
            .journal
            .backing(rel)
            .symlink_metadata()
            .map_err(io_errno)?;
        let ino = self.inode(rel);
        Ok(attr_of(ino, &meta))
    }
}

fn attr_of(ino: u64, meta: &std::fs::Metadata) -> FileAttr {
    let time = |s: i64, ns: i64| UNIX_EPOCH + Duration::new(s.max(0) as u64, ns as u32);
    FileAttr {
        ino: INodeNo(ino),
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: if meta.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: (meta.permissions().mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// What the FUSE side and the test that cuts the power share.
struct Shared {
    state: Mutex<State>,
    /// Signalled when the disk freezes and when the power goes.
    changed: Condvar,
}

/// The FUSE side: a cheap handle on the shared state.
struct Fs(Arc<Shared>);

impl Fs {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.state.lock().expect("powerfs state")
    }
}

fn child(parent: &Path, name: &OsStr) -> PathBuf {
    parent.join(name)
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut s = self.state();
        let answer = s.path(parent).and_then(|p| {
            let rel = child(&p, name);
            if rel == Path::new(journal::GRAVEYARD) {
                return Err(Errno::ENOENT);
            }
            s.attr(&rel)
        });
        match answer {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut s = self.state();
        // An open file that was unlinked still has its attributes, through its handle.
        if let Some(file) = fh.and_then(|fh| s.open.get(&fh.0).map(|(_, f)| f.clone())) {
            match file.metadata() {
                Ok(meta) => return reply.attr(&TTL, &attr_of(ino.0, &meta)),
                Err(e) => return reply.error(io_errno(e)),
            }
        }
        match s.path(ino).and_then(|p| s.attr(&p)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = self.state();
        let answer = (|| {
            let rel = s.path(ino)?;
            let path = s.journal.backing(&rel);
            if let Some(mode) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                    .map_err(io_errno)?;
            }
            if let Some(size) = size {
                let file = match fh.and_then(|fh| s.open.get(&fh.0).map(|(_, f)| f.clone())) {
                    Some(f) => f,
                    // No handle: a truncate by path, or an open's O_TRUNC (the kernel sends
                    // that one without the new handle). Readable too: the journal reads what
                    // a shrink cuts off, to take it back at a cut.
                    None => Arc::new(
                        std::fs::OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(&path)
                            .map_err(io_errno)?,
                    ),
                };
                s.journal
                    .truncate(ino.0, &file, size)
                    .map_err(journal_errno)?;
            }
            s.attr(&rel)
        })();
        match answer {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = self.state();
        let answer = (|| {
            let rel = child(&s.path(parent)?, name);
            std::fs::create_dir(s.journal.backing(&rel)).map_err(io_errno)?;
            let _ = std::fs::set_permissions(
                s.journal.backing(&rel),
                std::fs::Permissions::from_mode(mode),
            );
            s.journal.created(&rel);
            s.attr(&rel)
        })();
        match answer {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.bits() != 0 {
            return reply.error(Errno::EINVAL);
        }
        let mut s = self.state();
        let answer = (|| {
            let from = child(&s.path(parent)?, name);
            let to = child(&s.path(newparent)?, newname);
            let replaced = s.journal.rename(&from, &to).map_err(io_errno)?;
            // What `to` was now waits in its grave, where a cut still undoes its writes.
            if let Some(grave) = replaced {
                s.renamed(&to, &grave);
            }
            s.renamed(&from, &to);
            Ok(())
        })();
        match answer {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut s = self.state();
        let answer = (|| {
            let path = s.journal.backing(&s.path(ino)?);
            let write = (flags.0 & libc::O_ACCMODE) != libc::O_RDONLY;
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .open(path)
                .map_err(io_errno)?;
            s.add_handle(ino.0, file)
        })();
        match answer {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = self.state();
        let answer = (|| {
            let rel = child(&s.path(parent)?, name);
            let path = s.journal.backing(&rel);
            let existed = path.symlink_metadata().is_ok();
            let mut options = std::fs::OpenOptions::new();
            options.read(true).write(true).create(true);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            }
            let file = options.open(&path).map_err(io_errno)?;
            if !existed {
                let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
                s.journal.created(&rel);
            }
            let attr = s.attr(&rel)?;
            let fh = s.add_handle(attr.ino.0, file)?;
            Ok((attr, fh))
        })();
        match answer {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let file = {
            let s = self.state();
            if s.off {
                return reply.error(Errno::EIO);
            }
            s.open.get(&fh.0).map(|(_, f)| f.clone())
        };
        let Some(file) = file else {
            return reply.error(Errno::EBADF);
        };
        let mut buf = vec![0; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => return reply.error(io_errno(e)),
            }
        }
        reply.data(&buf[..got]);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut s = self.state();
        if s.off {
            return reply.error(Errno::EIO);
        }
        let Some(file) = s.open.get(&fh.0).map(|(_, f)| f.clone()) else {
            return reply.error(Errno::EBADF);
        };
        match s.journal.write(ino.0, &file, offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(journal_errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state().open.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        if s.off {
            return reply.error(Errno::EIO);
        }
        if s.fail_syncs {
            s.journal.sync_failed(ino.0);
            s.failed();
            return reply.error(Errno::EIO);
        }
        if s.armed && s.journal.is_unsynced(ino.0) {
            // The power goes while this file's last writes wait for their fsync: the call
            // is never answered (the caller is killed first), so the cut takes them back.
            s.armed = false;
            s.frozen = true;
            self.0.changed.notify_all();
            let _off = self
                .0
                .changed
                .wait_while(s, |s| !s.off)
                .expect("powerfs state");
            return reply.error(Errno::EIO);
        }
        s.journal.synced(ino.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = self.state();
        let answer = (|| {
            let rel = s.path(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            let mut names: Vec<_> = std::fs::read_dir(s.journal.backing(&rel))
                .map_err(io_errno)?
                .filter_map(Result::ok)
                .collect();
            names.sort_by_key(|e| e.file_name());
            for entry in names {
                let name = entry.file_name();
                if rel.as_os_str().is_empty() && name == journal::GRAVEYARD {
                    continue;
                }
                let kind = match entry.file_type() {
                    Ok(t) if t.is_dir() => FileType::Directory,
                    _ => FileType::RegularFile,
                };
                let child_ino = s.inode(&rel.join(&name));
                entries.push((child_ino, kind, name));
            }
            Ok(entries)
        })();
        match answer {
            Ok(entries) => {
                for (i, (child_ino, kind, name)) in
                    entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(child_ino), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        if s.fail_syncs {
            s.failed();
            return reply.error(Errno::EIO);
        }
        match s.path(ino) {
            Ok(rel) => {
                s.journal.dir_synced(&rel);
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }
}

impl Fs {
    fn remove(&self, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = self.state();
        let answer = (|| {
            let rel = child(&s.path(parent)?, name);
            let meta = s
                .journal
                .backing(&rel)
                .symlink_metadata()
                .map_err(io_errno)?;
            if meta.is_dir() {
                let empty = std::fs::read_dir(s.journal.backing(&rel))
                    .map_err(io_errno)?
                    .next()
                    .is_none();
                if !empty {
                    return Err(Errno::ENOTEMPTY);
                }
            }
            let grave = s.journal.remove(&rel).map_err(io_errno)?;
            // Its inodes now live in the grave: a cut still undoes an open file's writes.
            s.renamed(&rel, &grave);
            Ok(())
        })();
        match answer {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

impl State {
    /// A sync was answered EIO.
    fn failed(&mut self) {
        self.failed_syncs += 1;
        self.first_failed.get_or_insert_with(Instant::now);
    }

    fn add_handle(&mut self, ino: u64, file: File) -> Result<u64, Errno> {
        if self.open.len() >= OPEN_FILES_MAX {
            return Err(Errno::EMFILE);
        }
        self.next_handle += 1;
        self.open.insert(self.next_handle, (ino, Arc::new(file)));
        Ok(self.next_handle)
    }
}

fn journal_errno(e: JournalError) -> Errno {
    match e {
        JournalError::Full => Errno::ENOSPC,
        JournalError::Io(e) => io_errno(e),
    }
}

#[cfg(test)]
mod tests;
