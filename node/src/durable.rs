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
