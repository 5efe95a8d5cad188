//! The open log's state behind its lock: appending records, rolling segments, and the
//! flush bookkeeping.

use super::*;

impl Inner {
    /// Puts a mark at the start of `batch` (to be written at `write_at`) if the log became
    /// durable beyond the last mark, and it fits in the current segment after an entry (a
    /// segment never starts with a mark: its first record says where its run of indexes
    /// begins).
    pub(super) fn mark_into(&mut self, batch: &mut Vec<u8>) {
        let Some(durable) = self.durable else {
            return;
        };
        let seg = &self.segments[&self.current];
        let rec = mark(durable);
        if durable <= self.mark_written
            || seg.last.is_none()
            || self.write_at + rec.len() as u64 > seg.size
        {
            return;
        }
        batch.extend_from_slice(&rec);
        self.write_at += rec.len() as u64;
        self.mark_written = durable;
    }

    /// Ends the pending repair if the log now holds, on disk, every entry through its index
    /// (in the log, or purged into a snapshot): its file is removed, durably.
    pub(super) fn check_repaired(&mut self) -> io::Result<()> {
        let Some(repair) = &self.repair else {
            return Ok(());
        };
        let have = self.durable.unwrap_or(0).max(self.purged.unwrap_or(0));
        if have < repair.through {
            return Ok(());
        }
        tracing::info!(
            through = repair.through, have, kept = %repair.kept.display(),
            "the damaged log is refilled from the leader: this node votes again"
        );
        match std::fs::remove_file(self.dir.join(REPAIR_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        sync_dir(&self.dir)?;
        self.repair = None;
        Ok(())
    }

    /// The index the next append must have; any, for a log that never had an entry.
    pub(super) fn next_index(&self) -> Option<u64> {
        match (self.last_log_id, self.purged) {
            (Some(l), Some(p)) => Some(l.index.max(p) + 1),
            (Some(l), None) => Some(l.index + 1),
            (None, Some(p)) => Some(p + 1),
            (None, None) => None,
        }
    }

    pub(super) fn write(&mut self, at: u64, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let file = self.segments[&self.current].file.clone();
        file.write_all_at(bytes, at)?;
        if !self.dirty.iter().any(|f| Arc::ptr_eq(f, &file)) {
            self.dirty.push(file);
        }
        Ok(())
    }

    /// The log id of the record at `loc`, read whole and checked (a damaged record is an
    /// error, never a log id).
    pub(super) fn read_log_id(&self, loc: Loc) -> io::Result<LogId> {
        let mut bytes = vec![0u8; HEADER_BYTES + loc.len as usize];
        self.segments[&loc.seq]
            .file
            .read_exact_at(&mut bytes, loc.offset)?;
        let Some((_, entry)) = parse(&bytes, 0).filter(|(_, e)| e.len() == loc.len as usize) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the log record at segment {}, offset {} fails its checksum",
                    loc.seq, loc.offset
                ),
            ));
        };
        let entry: Entry = decode(entry).map_err(io::Error::other)?;
        Ok(entry.log_id)
    }

    /// Starts zeroing the next segment in the background.
    pub(super) fn start_spare(&mut self) {
        let path = self.dir.join(SPARE);
        let size = self.segment_bytes;
        self.spare = Some(
            std::thread::Builder::new()
                .name("baton-log-spare".into())
                .spawn(move || prepare(&path, size))
                .expect("spawn the log's spare-segment thread"),
        );
    }

    /// Moves on to a new segment with room for `need` bytes: the spare (waiting for it if it
    /// is not ready yet), or one made now for a record larger than a segment.
    pub(super) fn roll(&mut self, need: u64) -> io::Result<()> {
        let seq = self.current + 1;
        let path = self.dir.join(seg_name(seq));
        let (file, size) = if need <= self.segment_bytes {
            let file = match self.spare.take().map(|h| h.join()) {
                Some(Ok(Ok(file))) => file,
                Some(Ok(Err(e))) => return Err(e),
                Some(Err(_)) | None => prepare(&self.dir.join(SPARE), self.segment_bytes)?,
            };
            std::fs::rename(self.dir.join(SPARE), &path)?;
            self.start_spare();
            (file, self.segment_bytes)
        } else {
            let size = need.div_ceil(4096) * 4096;
            (prepare_as(&self.dir, BIG, seq, size)?, size)
        };
        self.begin(seq, file, size)
    }

    /// Makes the zero-filled `file` (named for `seq`) the segment written to.
    pub(super) fn begin(&mut self, seq: u64, file: File, size: u64) -> io::Result<()> {
        // The new name is on disk before any record in it is acknowledged.
        sync_dir(&self.dir)?;
        self.segments.insert(
            seq,
            Segment {
                file: Arc::new(file),
                size,
                last: None,
            },
        );
        self.current = seq;
        self.write_at = 0;
        Ok(())
    }
}
