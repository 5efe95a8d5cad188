//! The segment files on disk: names, preparing a zero-filled file, the record and mark
//! encodings and their checksums, reading a record back, the evidence of how far a file was
//! durable, the repair file and keeping damaged files aside.

use super::*;

pub(super) fn seg_name(seq: u64) -> String {
    format!("{seq:020}.seg")
}

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes zeros over `[from, to)` of `file`.
pub(super) fn write_zeros(file: &File, from: u64, to: u64) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK_BYTES.min((to.saturating_sub(from)) as usize)];
    let mut at = from;
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// A new file of `size` zero bytes, written (not a hole: writing into a hole allocates, and
/// the flush would then wait for that too) and synced.
pub(super) fn prepare(path: &Path, size: u64) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    write_zeros(&file, 0, size)?;
    file.sync_all()?;
    Ok(file)
}

/// A new segment `seq` of `size` zero bytes, made as `tmp` and renamed, so that a crash never
/// leaves a segment shorter than it was made (which opening takes for damage).
pub(super) fn prepare_as(dir: &Path, tmp: &str, seq: u64, size: u64) -> io::Result<File> {
    let file = prepare(&dir.join(tmp), size)?;
    std::fs::rename(dir.join(tmp), dir.join(seg_name(seq)))?;
    Ok(file)
}

/// Whether a segment of `len` bytes has a size this log makes: [`SEGMENT_BYTES`] (as given),
/// or whole 4 KiB pages beyond it for a record larger than a segment.
pub(super) fn made_size(len: u64, segment_bytes: u64) -> bool {
    len == segment_bytes || (len > segment_bytes && len.is_multiple_of(4096))
}

pub(super) fn mark(durable: u64) -> Vec<u8> {
    record(MARK_INDEX, &durable.to_le_bytes())
}

/// The value of a mark record's entry.
pub(super) fn mark_value(entry: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(entry.try_into().ok()?))
}

/// What the files after the log's end show: the highest mark, and the highest entry index.
#[derive(Default)]
pub(super) struct Evidence {
    pub(super) marks: u64,
    pub(super) seen: u64,
}

impl Evidence {
    /// Adds what the whole records of `bytes` from `from` on show (`evidence`).
    pub(super) fn read(&mut self, bytes: &[u8], from: usize, floor: u64) {
        let (marks, seen) = evidence(bytes, from, floor);
        self.marks = self.marks.max(marks);
        self.seen = self.seen.max(seen);
    }
}

/// What the whole records of `bytes` from `from` on show, skipping over bytes that are not
/// one: the highest mark, and the highest entry index at least `floor` (within
/// [`MARK_SCAN_SPAN`] of it, so that random bytes are seldom checksummed).
pub(super) fn evidence(bytes: &[u8], from: usize, floor: u64) -> (u64, u64) {
    let (mut marks, mut seen) = (0u64, 0u64);
    let mut at = from;
    while at + HEADER_BYTES <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let index = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
        let plausible = len > 0
            && at + HEADER_BYTES + len <= bytes.len()
            && (index == MARK_INDEX && len == 8
                || (floor..floor.saturating_add(MARK_SCAN_SPAN)).contains(&index));
        match plausible.then(|| parse(bytes, at)).flatten() {
            Some((MARK_INDEX, entry)) => {
                marks = marks.max(mark_value(entry).unwrap_or(0));
                at += HEADER_BYTES + entry.len();
            }
            Some((index, entry)) => {
                seen = seen.max(index);
                at += HEADER_BYTES + entry.len();
            }
            None => at += 1,
        }
    }
    (marks, seen)
}

/// Reads the repair obligation in `path`, if there is one.
pub(super) fn read_repair(path: &Path) -> Result<Option<Repair>, LogOpenError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| LogOpenError::RepairFile {
                    file: path.to_path_buf(),
                    detail: e.to_string(),
                })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Copies the segments `seqs` of `dir` into a new folder of `damaged/`, durably; returns it.
pub(super) fn keep_aside(dir: &Path, seqs: &[u64]) -> io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let parent = dir.join(DAMAGED_DIR);
    let to = parent.join(format!("{stamp}"));
    std::fs::create_dir_all(&to)?;
    for seq in seqs {
        let copy = to.join(seg_name(*seq));
        std::fs::copy(dir.join(seg_name(*seq)), &copy)?;
        File::open(&copy)?.sync_all()?;
    }
    sync_dir(&to)?;
    sync_dir(&parent)?;
    sync_dir(dir)?;
    Ok(to)
}

pub(super) fn record(index: u64, entry: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(HEADER_BYTES + entry.len());
    rec.extend_from_slice(&(entry.len() as u32).to_le_bytes());
    rec.extend_from_slice(&checksum(index, entry).to_le_bytes());
    rec.extend_from_slice(&index.to_le_bytes());
    rec.extend_from_slice(entry);
    rec
}

pub(super) fn checksum(index: u64, entry: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&index.to_le_bytes());
    h.update(entry);
    h.finalize()
}

/// The record at `at` of `bytes`, if a whole, intact one starts there: (index, entry bytes).
pub(super) fn parse(bytes: &[u8], at: usize) -> Option<(u64, &[u8])> {
    let header = bytes.get(at..at + HEADER_BYTES)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    if len == 0 {
        return None;
    }
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let index = u64::from_le_bytes(header[8..16].try_into().ok()?);
    let entry = bytes.get(at + HEADER_BYTES..at + HEADER_BYTES + len)?;
    (checksum(index, entry) == crc).then_some((index, entry))
}

pub(super) fn term(log_id: &LogId) -> u64 {
    log_id.leader_id.term
}
