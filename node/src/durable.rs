//! Files written so that a crash leaves either the old file or the whole new one. A leaf:
//! the store (identity, snapshots) and the peer book use it.

use std::path::Path;

/// Writes `bytes` to `path` so that after a crash the file is either absent/old or complete:
/// write a temp file, fsync it, rename it into place, fsync the directory.
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Makes the names in each of `dirs` durable: a new, renamed or removed name is durable only
/// after an fsync of its directory (POSIX; ext4 and XFS happen to commit them with the next
/// fsync of anything, other filesystems need not). A directory that does not exist is
/// skipped.
pub fn sync_dirs(dirs: &[&Path]) -> std::io::Result<()> {
    for dir in dirs {
        match std::fs::File::open(dir) {
            Ok(d) => d.sync_all()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Makes the data of the file at `path` durable (`fsync`); a file that does not exist is
/// skipped.
pub fn sync_file(path: &Path) -> std::io::Result<()> {
    match std::fs::File::open(path) {
        Ok(f) => f.sync_all(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
