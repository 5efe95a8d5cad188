//! Mounting the filesystem (a thread of its own, on `/dev/fuse`), cutting its power, and
//! unmounting it.

use super::*;

/// A mounted "lose unsynced writes" filesystem: `mountpoint` shows `backing`.
pub struct PowerFs {
    shared: Arc<Shared>,
    session: Option<fuser::BackgroundSession>,
    pub mountpoint: PathBuf,
    pub backing: PathBuf,
}

/// Why a mount failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("preparing {}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot mount FUSE at {}: {source} (needs /dev/fuse and fusermount3: apt-get install -y fuse3)",
        mountpoint.display()
    )]
    Mount {
        mountpoint: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl PowerFs {
    /// Mounts `backing` (created if absent) at `mountpoint` (created if absent).
    pub fn mount(backing: &Path, mountpoint: &Path) -> Result<PowerFs, MountError> {
        for dir in [backing, mountpoint] {
            std::fs::create_dir_all(dir).map_err(|source| MountError::Dir {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let journal = Journal::new(backing).map_err(|source| MountError::Dir {
            dir: backing.to_path_buf(),
            source,
        })?;
        let mut paths = HashMap::new();
        let mut inodes = HashMap::new();
        paths.insert(1, PathBuf::new());
        inodes.insert(PathBuf::new(), 1);
        let shared = Arc::new(Shared {
            changed: Condvar::new(),
            state: Mutex::new(State {
                journal,
                paths,
                inodes,
                next_inode: 1,
                open: HashMap::new(),
                next_handle: 0,
                off: false,
                armed: false,
                frozen: false,
                fail_syncs: false,
                failed_syncs: 0,
                first_failed: None,
            }),
        });
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName("baton-powerfs".into()),
            fuser::MountOption::DefaultPermissions,
        ];
        let session =
            fuser::spawn_mount(Fs(shared.clone()), mountpoint, &config).map_err(|source| {
                MountError::Mount {
                    mountpoint: mountpoint.to_path_buf(),
                    source,
                }
            })?;
        Ok(PowerFs {
            shared,
            session: Some(session),
            mountpoint: mountpoint.to_path_buf(),
            backing: backing.to_path_buf(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().expect("powerfs state")
    }

    /// Unsynced bytes the mount remembers now.
    pub fn unsynced_bytes(&self) -> usize {
        self.state().journal.unsynced_bytes()
    }

    /// Arms a freeze: the next `fsync` of a file with unsynced writes is not answered, nor
    /// is any call after it, until [`PowerFs::cut`]. A cut then lands exactly between a
    /// write and its fsync, where a chance cut rarely does (the mount syncs in microseconds).
    pub fn freeze_at_next_fsync(&self) {
        self.state().armed = true;
    }

    /// A failing disk (`on`) or a sound one again: while failing, every file and directory
    /// sync answers EIO, and the file's changes so far stay unsynced for good (a cut takes
    /// them back even after a later sync succeeds), as on Linux after a failed fsync.
    pub fn fail_syncs(&self, on: bool) {
        self.state().fail_syncs = on;
    }

    /// Syncs answered EIO so far, and when the first one was.
    pub fn failed_syncs(&self) -> (u64, Option<Instant>) {
        let s = self.state();
        (s.failed_syncs, s.first_failed)
    }

    /// Whether an armed freeze has happened.
    pub fn is_frozen(&self) -> bool {
        self.state().frozen
    }

    /// Cuts the power: every later call fails, the mount goes away, and everything not
    /// durable is rolled back as `loss` says. Send the process using it SIGKILL first: it
    /// must not see the rollback. (Reap it after the cut: a process whose fsync is frozen
    /// cannot end before the frozen call is answered, which the cut does, with an error it
    /// never sees.) Mount again to start it on what is left.
    pub fn cut(mut self, loss: Loss) -> Lost {
        let lost = {
            let mut s = self.state();
            s.off = true;
            self.shared.changed.notify_all();
            s.open.clear();
            let paths = s.paths.clone();
            s.journal.cut(loss, |ino| paths.get(&ino).cloned())
        };
        // Detached lazily: the killed process may still hold files open on it while it
        // ends (a plain unmount would be refused as busy), and the next mount goes at once
        // in its place. The old connection serves errors until the last file closes.
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        self.session.take();
        lost
    }
}

impl Drop for PowerFs {
    fn drop(&mut self) {
        // Unmounts (the background session's drop), losing nothing: a clean shutdown.
        self.session.take();
    }
}
