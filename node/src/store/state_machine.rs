//! The openraft state machine: a thin adapter that runs `core::LeaseTable::apply` in memory.
//!
//! Durability comes from the Raft log, not from writes at apply time: the table lives in
//! memory (reads are served from it) and its durable form is the current snapshot file plus
//! the log entries after it. openraft never purges an entry that no snapshot covers yet, so
//! after a restart the node loads the snapshot and openraft re-applies the log from there
//! (`save_committed` lets it do so before hearing from a leader).
//!
//! Why not write through to sled at apply time: every sled batch or transaction rolls the
//! sled write buffer twice, and each roll is a write plus a blocking `sync_file_range`, so a
//! transactional write-through cost four synchronous device writes per applied batch on top of
//! the log's own (measured with `strace`, see docs/performance.md). Applying in memory keeps
//! the state machine pure and the I/O at the log.
//!
//! The core says what else an apply does (`core::Changes`): the events it appended, which
//! the watch window publishes, and the countdowns (lease expiry, offer lapse, quarantine end)
//! it starts and stops, which run from this node's own apply instant (see `expiry`). This
//! adapter only carries them out.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};

pub use super::sm_state::SmState;
use super::{encode, write_durably};
use crate::core::{Applied, Changes, Effect, LogCommand, Op, Outcome, Timer, Waiter};
use crate::endings::EndingsHub;
use crate::expiry::Countdowns;
use crate::limits::{ENDINGS_STREAMS_MAX, ENDINGS_WINDOW_MAX};
use crate::metrics::Metrics;
use crate::raft_types::{
    Entry, LogId, Snapshot, SnapshotData, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::watch::WatchHub;

const SNAPSHOT_FILE: &str = "current.snapshot";

/// The current snapshot file in `snapshot_dir`.
pub(super) fn snapshot_path(snapshot_dir: &Path) -> PathBuf {
    snapshot_dir.join(SNAPSHOT_FILE)
}

/// What ends a snapshot file written by this version: these bytes, then the CRC-32 (little
/// endian) of everything before them. A file without it was written before checksums (it is
/// read as it is; a damaged one of those fails to decode at best). On the wire a snapshot
/// goes without it, as before, so older peers read it.
pub(super) const SNAPSHOT_SEAL: &[u8; 8] = b"BTNSEAL1";

/// Appends the seal to a snapshot file's bytes.
pub(super) fn seal(bytes: &mut Vec<u8>) {
    let crc = crc32fast::hash(bytes);
    bytes.extend_from_slice(SNAPSHOT_SEAL);
    bytes.extend_from_slice(&crc.to_le_bytes());
}

/// A snapshot file's bytes without its seal, checked: a damaged file (a flipped bit, a torn
/// block) is refused, never served or sent to a peer.
pub(super) fn unseal(bytes: &[u8]) -> Result<&[u8], String> {
    let trailer = SNAPSHOT_SEAL.len() + 4;
    if bytes.len() < trailer || &bytes[bytes.len() - trailer..bytes.len() - 4] != SNAPSHOT_SEAL {
        return Ok(bytes);
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let body = &body[..body.len() - SNAPSHOT_SEAL.len()];
    let want = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    let got = crc32fast::hash(body);
    if want != got {
        return Err(format!(
            "the snapshot file is damaged: checksum {got:08x}, its seal says {want:08x}"
        ));
    }
    Ok(body)
}

/// What a snapshot file holds.
struct SnapshotFile {
    meta: SnapshotMeta,
    state: SmState,
}

struct Shared {
    state: RwLock<SmState>,
    snapshot_dir: PathBuf,
    /// The last log id of the snapshot file on disk. Held while writing one, so an older
    /// snapshot never replaces a newer one.
    snapshot_lock: tokio::sync::Mutex<Option<LogId>>,
    /// Lease countdowns (expiry).
    countdowns: Arc<Countdowns>,
    /// Offer countdowns (lapse).
    offer_countdowns: Arc<Countdowns>,
    /// Quarantine countdowns (end of a lock-delay).
    quarantine_countdowns: Arc<Countdowns>,
    /// Waiters' places in lines, each under `Waiter::countdown_id` (data format 11).
    waiter_countdowns: Arc<Countdowns>,
    /// The window of recent events that watches read.
    watch: Arc<WatchHub>,
    /// The window of recent lease endings that sessions' endings streams read.
    endings: Arc<EndingsHub>,
    metrics: Arc<Metrics>,
}

/// The state machine. Clones share state: the gRPC server keeps one to serve reads.
#[derive(Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
}

fn io_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl StateMachine {
    /// Opens the state machine at the current snapshot (empty if there is none); openraft
    /// re-applies the log entries after it.
    pub(super) fn open(
        snapshot_dir: &Path,
        countdowns: Arc<Countdowns>,
        watch_window: usize,
        metrics: Arc<Metrics>,
    ) -> Result<StateMachine, String> {
        std::fs::create_dir_all(snapshot_dir).map_err(io_err)?;
        let sm = StateMachine {
            shared: Arc::new(Shared {
                state: RwLock::new(SmState::default()),
                snapshot_dir: snapshot_dir.to_path_buf(),
                snapshot_lock: tokio::sync::Mutex::new(None),
                offer_countdowns: Arc::new(countdowns.sibling()),
                quarantine_countdowns: Arc::new(countdowns.sibling()),
                waiter_countdowns: Arc::new(countdowns.sibling()),
                countdowns,
                watch: Arc::new(WatchHub::new(watch_window)),
                endings: Arc::new(EndingsHub::new(ENDINGS_WINDOW_MAX, ENDINGS_STREAMS_MAX)),
                metrics,
            }),
        };
        let state = match sm
            .read_snapshot_file()
            .map_err(|e| format!("{}: {e}", snapshot_path(&sm.shared.snapshot_dir).display()))?
        {
            Some(file) => {
                *sm.shared.snapshot_lock.try_lock().expect("not shared yet") =
                    file.meta.last_log_id;
                file.state
            }
            None => SmState::default(),
        };
        sm.arm_timers_and_watch(&state);
        *sm.shared.state.write().expect("state lock") = state;
        Ok(sm)
    }

    fn read_snapshot_file(&self) -> Result<Option<SnapshotFile>, String> {
        match std::fs::read(self.shared.snapshot_dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => {
                // The meta, then the state, then the seal (see `write_snapshot_file`).
                let bytes = unseal(&bytes)?;
                let mut cursor = std::io::Cursor::new(bytes);
                let meta: SnapshotMeta = bincode::deserialize_from(&mut cursor).map_err(io_err)?;
                let rest = &bytes[cursor.position() as usize..];
                let mut state = SmState::decode(rest).map_err(io_err)?;
                state.table.rebuild_index();
                Ok(Some(SnapshotFile { meta, state }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The size of the current snapshot file (0 if there is none).
    pub fn snapshot_file_bytes(&self) -> u64 {
        std::fs::metadata(snapshot_path(&self.shared.snapshot_dir)).map_or(0, |m| m.len())
    }

    /// Reads the state under the lock: for serving reads.
    pub fn read<T>(&self, f: impl FnOnce(&SmState) -> T) -> T {
        f(&self.shared.state.read().expect("state lock"))
    }

    pub fn countdowns(&self) -> &Arc<Countdowns> {
        &self.shared.countdowns
    }

    pub fn offer_countdowns(&self) -> &Arc<Countdowns> {
        &self.shared.offer_countdowns
    }

    pub fn quarantine_countdowns(&self) -> &Arc<Countdowns> {
        &self.shared.quarantine_countdowns
    }

    pub fn waiter_countdowns(&self) -> &Arc<Countdowns> {
        &self.shared.waiter_countdowns
    }

    pub fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.shared.watch
    }

    pub fn endings_hub(&self) -> &Arc<EndingsHub> {
        &self.shared.endings
    }

    /// For state learned from disk or a snapshot: starts every countdown (lease, offer,
    /// quarantine) now and rebuilds the watch window from the histories.
    fn arm_timers_and_watch(&self, state: &SmState) {
        self.shared.watch.reset(&state.table, state.revision);
        self.shared.endings.reset(state.revision);
        // Exclusive leases under their keys, permits under their keys and tokens.
        let permits = state.table.all_holders().iter().flat_map(|(key, held)| {
            held.leases.iter().map(move |l| {
                let id = crate::core::permits::countdown_id(key, l.token);
                (Arc::from(id), l.token, l.basis, l.ttl_ms)
            })
        });
        self.shared.countdowns.restart_all(
            state
                .table
                .leases()
                .map(|l| (l.key.clone(), l.token, l.basis, l.ttl_ms))
                .chain(permits),
        );
        self.shared
            .offer_countdowns
            .restart_all(state.table.cases().filter_map(|(key, case)| {
                case.offer
                    .as_ref()
                    .map(|o| (Arc::from(key), o.from_token, o.revision, o.offer_ttl_ms))
            }));
        // A quarantine's countdown names its revision twice (`Effect::Start`). Without this,
        // a node that learned a quarantine from disk or a snapshot never counted it down, and
        // as leader never ended it: the key stayed unclaimable (the chaos suite's `revoke`
        // scenario, seed 199298).
        self.shared
            .quarantine_countdowns
            .restart_all(state.table.cases().filter_map(|(key, case)| {
                case.quarantine
                    .as_ref()
                    .map(|q| (Arc::from(key), q.revision, q.revision, q.delay_ms))
            }));
        // A key held by permits or shares, with a permit free and someone in line, may have
        // had a hand-on nudge (a countdown of no time that asks the leader for an
        // `Op::HandOn`, `core::table::line`): countdowns are this node's own, so it is armed
        // again, or the head would wait for its next renewal. A `HandOn` with nothing to
        // grant changes nothing.
        let nudges = state.table.all_holders().iter().filter_map(|(key, held)| {
            let waiting = state.table.lines().get(key).is_some_and(|l| !l.is_empty());
            (waiting && held.free() > 0).then(|| {
                let id = Waiter::hand_on_id(key);
                (Arc::from(id), 0, state.revision.max(1), 0)
            })
        });
        self.shared.waiter_countdowns.restart_all(
            state
                .table
                .lines()
                .iter()
                .flat_map(|(key, line)| {
                    line.iter().map(|w| {
                        let id = Waiter::countdown_id(key, &w.holder.client_id);
                        (Arc::from(id), 0, w.basis, w.ttl_ms)
                    })
                })
                .chain(nudges),
        );
    }

    /// Applies one command at the next revision and keeps this node's countdowns in step.
    fn apply_command(
        &self,
        state: &mut SmState,
        cmd: &LogCommand,
        changes: &mut Changes,
    ) -> Applied {
        state.revision += 1;
        let revision = state.revision;
        let (outcome, decided) =
            state
                .table
                .apply_decided(revision, cmd, changes, &mut state.access);
        if let (Op::SetAccess { by, .. }, Outcome::AccessSet { version }) =
            (cmd.op.plain(), &outcome)
        {
            tracing::info!(
                target: "baton::audit", by = %by, version, revision,
                what = %state.access.audit.back().map_or("", |a| a.what.as_str()),
                "access policy changed"
            );
        }
        // The countdowns the command started or stopped (none for a retry answered from
        // memory: it changed nothing), each starting now, at this node's own apply instant.
        for effect in changes.effects.drain(..) {
            self.carry_out(effect);
        }
        // A retry answered from memory carries the revision its first attempt was decided
        // at, as its first answer did.
        Applied {
            outcome,
            revision: decided,
        }
    }

    /// Starts or stops one countdown, as the core asked.
    fn carry_out(&self, effect: Effect) {
        let countdowns = |timer| match timer {
            Timer::Lease => &self.shared.countdowns,
            Timer::Offer => &self.shared.offer_countdowns,
            Timer::Quarantine => &self.shared.quarantine_countdowns,
            Timer::Waiter => &self.shared.waiter_countdowns,
        };
        match effect {
            Effect::Start {
                timer,
                key,
                token,
                basis,
                ms,
            } => {
                // The chaos suite's line canary (test builds only): places lapse early.
                let ms = if timer == Timer::Waiter && crate::chaos::lapse_places_early() {
                    ms / 20
                } else {
                    ms
                };
                countdowns(timer).start(key, token, basis, ms)
            }
            Effect::Stop { timer, key } => countdowns(timer).stop(&key),
        }
    }

    /// Writes the snapshot of `meta` whose state encodes to `state_bytes` as the current
    /// snapshot file (the encoding of a `SnapshotFile`: meta, then state), unless a newer one
    /// is there already; says whether it wrote.
    async fn write_snapshot_file(
        &self,
        meta: &SnapshotMeta,
        state_bytes: &[u8],
    ) -> Result<bool, StorageError> {
        let mut current = self.shared.snapshot_lock.lock().await;
        if *current > meta.last_log_id {
            return Ok(false);
        }
        let mut bytes = encode(meta);
        bytes.extend_from_slice(state_bytes);
        seal(&mut bytes);
        let path = self.shared.snapshot_dir.join(SNAPSHOT_FILE);
        tokio::task::spawn_blocking(move || write_durably(&path, &bytes))
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))?
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        *current = meta.last_log_id;
        Ok(true)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok(self.read(|s| (s.last_applied, s.membership.clone())))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Applied>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = std::time::Instant::now();
        let mut answers = Vec::new();
        let mut changes = Changes::default();
        let mut state = self.shared.state.write().expect("state lock");
        for entry in entries {
            state.last_applied = Some(entry.log_id);
            let applied = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Membership(m) => {
                    state.membership = StoredMembership::new(Some(entry.log_id), m);
                    Vec::new()
                }
                EntryPayload::Normal(proposal) => proposal
                    .commands
                    .iter()
                    .map(|cmd| self.apply_command(&mut state, cmd, &mut changes))
                    .collect(),
            };
            answers.push(applied);
        }
        // Watchers see an event once it is applied (its entry is committed, so on disk on a
        // quorum). The core listed them in revision order.
        let events: Vec<(String, crate::core::Event)> = changes
            .events
            .into_iter()
            .map(|(key, event)| (key.to_string(), event))
            .collect();
        for (_, event) in &events {
            self.shared.metrics.event(event.kind.as_str());
        }
        self.shared.watch.publish(events, state.revision);
        self.shared.endings.publish(changes.endings, state.revision);
        self.shared
            .metrics
            .apply_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Encode the state now, between applies: the builder runs concurrently with later
        // applies and must not see a half-applied state. Encoding rather than cloning keeps
        // the extra memory to the snapshot's size, a fraction of the state's.
        let started = std::time::Instant::now();
        let (data, last_applied, membership, keys) = self.read(|s| {
            (
                encode(s),
                s.last_applied,
                s.membership.clone(),
                s.table.case_count(),
            )
        });
        SnapshotBuilder {
            sm: self.clone(),
            last_applied,
            membership,
            keys,
            data,
            encode_time: started.elapsed(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotData>, StorageError> {
        Ok(Box::new(std::io::Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotData>,
    ) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        let bytes = snapshot.get_ref().len();
        let mut state = SmState::decode(snapshot.get_ref())
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        state.table.rebuild_index();
        // The file first (fsync'd): it is this node's durable state from now on.
        if !self.write_snapshot_file(meta, snapshot.get_ref()).await? {
            // A newer snapshot is installed already; installing an older state would go
            // backwards.
            return Ok(());
        }
        self.arm_timers_and_watch(&state);
        *self.shared.state.write().expect("state lock") = state;
        tracing::info!(
            index = meta.last_log_id.map(|l| l.index).unwrap_or(0),
            bytes,
            ms = started.elapsed().as_millis() as u64,
            "installed snapshot"
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let read_err = |e: &dyn std::fmt::Display| {
            StorageIOError::read_snapshot(None, &std::io::Error::other(e.to_string()))
        };
        let _current = self.shared.snapshot_lock.lock().await;
        let bytes = match std::fs::read(self.shared.snapshot_dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read_err(&e).into()),
        };
        // The file is the meta, the state and the seal: hand the state's bytes on as they are,
        // once the seal says they are what was written.
        let bytes = unseal(&bytes).map_err(|e| read_err(&e))?;
        let mut reader = std::io::Cursor::new(bytes);
        let meta: SnapshotMeta =
            bincode::deserialize_from(&mut reader).map_err(|e| read_err(&e))?;
        let state_bytes = bytes[reader.position() as usize..].to_vec();
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(std::io::Cursor::new(state_bytes)),
        }))
    }
}

/// Builds a snapshot from the state's encoding, taken between applies.
pub struct SnapshotBuilder {
    sm: StateMachine,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    keys: usize,
    /// `SmState` encoded.
    data: Vec<u8>,
    /// How long encoding took (applies waited for it).
    encode_time: std::time::Duration,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let snapshot_id = match self.last_applied {
            Some(id) => format!(
                "{}-{}-{}",
                id.leader_id,
                id.index,
                crate::expiry::wall_clock_unix_ms()
            ),
            None => format!("empty-{}", crate::expiry::wall_clock_unix_ms()),
        };
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
            snapshot_id,
        };
        let started = std::time::Instant::now();
        let data = std::mem::take(&mut self.data);
        self.sm.write_snapshot_file(&meta, &data).await?;
        tracing::info!(
            index = self.last_applied.map(|l| l.index).unwrap_or(0),
            keys = self.keys,
            bytes = data.len(),
            encode_ms = self.encode_time.as_millis() as u64,
            ms = (self.encode_time + started.elapsed()).as_millis() as u64,
            "built snapshot"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(std::io::Cursor::new(data)),
        })
    }
}
