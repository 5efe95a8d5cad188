//! The openraft state machine: a thin adapter that runs `core::LeaseTable::apply` and
//! persists what it changed.
//!
//! The table lives in memory (reads are served from it) and is written through to sled:
//! each `apply` batch writes the changed leases and client sessions, `last_applied` and the
//! membership in one multi-tree transaction, so they recover as one unit. Countdowns for
//! lease expiry are started here, at this node's apply instant (see `expiry`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};

use super::flush::Flusher;
use super::{decode, encode, write_durably};
use crate::core::table::Answer;
use crate::core::{
    CaseFile, Changes, ClientSession, Event, HandoffNote, Lease, LeaseTable, Offer, Outcome,
    Quarantine, Record,
};
use crate::expiry::Countdowns;
use crate::raft_types::{
    Entry, LogId, Snapshot, SnapshotData, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use crate::watch::WatchHub;

const LEASE_PREFIX: &[u8] = b"l/";
/// `s/<client id>` -> `SessionHeader`.
const SESSION_PREFIX: &[u8] = b"s/";
/// `a/<client id>/<seq, 8 bytes big-endian>` -> one remembered `Answer`. One record per
/// answer keeps every stored value small: sled writes values over ~128 KiB to blob files it
/// never fsyncs.
const ANSWER_PREFIX: &[u8] = b"a/";
/// `c/<key>` -> `CaseHead` (record and compacted-history count).
const CASE_PREFIX: &[u8] = b"c/";
/// `o/<key>` -> the pending `Offer`.
const OFFER_PREFIX: &[u8] = b"o/";
/// `n/<key>` -> the last handoff note.
const NOTE_PREFIX: &[u8] = b"n/";
/// `h/<key>/<revision, 8 bytes big-endian>` -> one history `Event`.
const EVENT_PREFIX: &[u8] = b"h/";
/// `q/<prefix>` -> quarantine delay in ms.
const QUARANTINE_PREFIX: &[u8] = b"q/";
const KEY_APPLIED: &[u8] = b"last_applied";
const KEY_MEMBERSHIP: &[u8] = b"membership";
/// Set while a received snapshot is being copied into `sm_data`; if a crash leaves it set,
/// the copy is redone from the snapshot file at the next start.
const KEY_INSTALLING: &[u8] = b"installing";
const SNAPSHOT_FILE: &str = "current.snapshot";

/// The state machine's state: the lease table plus what openraft needs to know about it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmState {
    pub table: LeaseTable,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
}

/// What a snapshot file holds.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    state: SmState,
}

struct Shared {
    state: RwLock<SmState>,
    /// Leases and client sessions.
    data: sled::Tree,
    /// `last_applied`, membership, the install marker.
    meta: sled::Tree,
    flusher: Flusher,
    snapshot_dir: PathBuf,
    /// Serializes snapshot file writes, so an older snapshot never replaces a newer one.
    snapshot_lock: tokio::sync::Mutex<()>,
    /// Lease countdowns (expiry).
    countdowns: Arc<Countdowns>,
    /// Offer countdowns (lapse).
    offer_countdowns: Arc<Countdowns>,
    /// Quarantine countdowns (end of a lock-delay).
    quarantine_countdowns: Arc<Countdowns>,
    /// The window of recent events that watches read.
    watch: Arc<WatchHub>,
}

/// The state machine. Clones share state: the gRPC server keeps one to serve reads.
#[derive(Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
}

fn lease_key(key: &str) -> Vec<u8> {
    [LEASE_PREFIX, key.as_bytes()].concat()
}

fn session_key(client_id: &str) -> Vec<u8> {
    [SESSION_PREFIX, client_id.as_bytes()].concat()
}

fn prefixed(prefix: &[u8], key: &str) -> Vec<u8> {
    [prefix, key.as_bytes()].concat()
}

fn event_key(key: &str, revision: u64) -> Vec<u8> {
    [EVENT_PREFIX, key.as_bytes(), b"/", &revision.to_be_bytes()].concat()
}

/// The name part of `<prefix><name>/<8 bytes>` keys.
fn name_before_suffix(prefix: &[u8], stored: &[u8]) -> Result<String, String> {
    let name = stored
        .get(prefix.len()..stored.len().saturating_sub(9))
        .ok_or("short key")?;
    String::from_utf8(name.to_vec()).map_err(sled_err)
}

/// A case file as stored, without its offer, last note and events (each stored apart, so
/// no value grows past sled's unsynced-blob size).
#[derive(Serialize, Deserialize)]
struct CaseHead {
    record: Record,
    history_dropped: u64,
    quarantine: Option<Quarantine>,
}

fn case_writes(key: &str, case: Option<&CaseFile>) -> [(Vec<u8>, Option<Vec<u8>>); 3] {
    let head = case.map(|c| {
        encode(&CaseHead {
            record: c.record.clone(),
            history_dropped: c.history.dropped,
            quarantine: c.quarantine.clone(),
        })
    });
    [
        (prefixed(CASE_PREFIX, key), head),
        (
            prefixed(OFFER_PREFIX, key),
            case.and_then(|c| c.offer.as_ref()).map(encode),
        ),
        (
            prefixed(NOTE_PREFIX, key),
            case.and_then(|c| c.last_note.as_ref()).map(encode),
        ),
    ]
}

fn answer_key(client_id: &str, seq: u64) -> Vec<u8> {
    [
        ANSWER_PREFIX,
        client_id.as_bytes(),
        b"/",
        &seq.to_be_bytes(),
    ]
    .concat()
}

/// A client session as stored, without its answers.
#[derive(Serialize, Deserialize)]
struct SessionHeader {
    last_index: u64,
    forgotten_seq_max: u64,
}

fn session_header(session: &ClientSession) -> Vec<u8> {
    encode(&SessionHeader {
        last_index: session.last_index,
        forgotten_seq_max: session.forgotten_seq_max,
    })
}

fn sled_err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl StateMachine {
    pub(super) fn open(
        db: &sled::Db,
        flusher: Flusher,
        snapshot_dir: &Path,
        countdowns: Arc<Countdowns>,
        watch_window: usize,
    ) -> Result<StateMachine, String> {
        std::fs::create_dir_all(snapshot_dir).map_err(sled_err)?;
        let data = db.open_tree("sm_data").map_err(sled_err)?;
        let meta = db.open_tree("sm_meta").map_err(sled_err)?;
        let sm = StateMachine {
            shared: Arc::new(Shared {
                state: RwLock::new(SmState::default()),
                data,
                meta,
                flusher,
                snapshot_dir: snapshot_dir.to_path_buf(),
                snapshot_lock: tokio::sync::Mutex::new(()),
                offer_countdowns: Arc::new(countdowns.sibling()),
                quarantine_countdowns: Arc::new(countdowns.sibling()),
                countdowns,
                watch: Arc::new(WatchHub::new(watch_window)),
            }),
        };
        let mut state = sm.load_from_sled()?;
        let snapshot = sm.read_snapshot_file()?;
        let interrupted_install = sm
            .shared
            .meta
            .get(KEY_INSTALLING)
            .map_err(sled_err)?
            .is_some();
        if let Some(file) = snapshot {
            // The snapshot is newer than the stored state if an install was interrupted, or
            // if a power loss dropped state-machine writes that were never fsync'd (the log
            // holds them, but may already be purged up to the snapshot).
            if interrupted_install || file.state.last_applied > state.last_applied {
                sm.write_all_to_sled(&file.state).map_err(sled_err)?;
                state = file.state;
            }
        }
        sm.arm_timers_and_watch(&state);
        *sm.shared.state.write().expect("state lock") = state;
        Ok(sm)
    }

    fn load_from_sled(&self) -> Result<SmState, String> {
        let mut leases = Vec::new();
        for item in self.shared.data.scan_prefix(LEASE_PREFIX) {
            let (_, bytes) = item.map_err(sled_err)?;
            leases.push(decode::<Lease>(&bytes).map_err(sled_err)?);
        }
        let mut sessions = std::collections::BTreeMap::new();
        for item in self.shared.data.scan_prefix(SESSION_PREFIX) {
            let (key, bytes) = item.map_err(sled_err)?;
            let id = String::from_utf8(key[SESSION_PREFIX.len()..].to_vec()).map_err(sled_err)?;
            let header: SessionHeader = decode(&bytes).map_err(sled_err)?;
            let session = ClientSession {
                last_index: header.last_index,
                forgotten_seq_max: header.forgotten_seq_max,
                answers: Default::default(),
            };
            sessions.insert(id, session);
        }
        let mut cases: std::collections::BTreeMap<String, CaseFile> = Default::default();
        for item in self.shared.data.scan_prefix(CASE_PREFIX) {
            let (k, bytes) = item.map_err(sled_err)?;
            let key = String::from_utf8(k[CASE_PREFIX.len()..].to_vec()).map_err(sled_err)?;
            let head: CaseHead = decode(&bytes).map_err(sled_err)?;
            let case = cases.entry(key).or_default();
            case.record = head.record;
            case.history.dropped = head.history_dropped;
            case.quarantine = head.quarantine;
        }
        for item in self.shared.data.scan_prefix(OFFER_PREFIX) {
            let (k, bytes) = item.map_err(sled_err)?;
            let key = String::from_utf8(k[OFFER_PREFIX.len()..].to_vec()).map_err(sled_err)?;
            let offer: Offer = decode(&bytes).map_err(sled_err)?;
            cases.entry(key).or_default().offer = Some(offer);
        }
        for item in self.shared.data.scan_prefix(NOTE_PREFIX) {
            let (k, bytes) = item.map_err(sled_err)?;
            let key = String::from_utf8(k[NOTE_PREFIX.len()..].to_vec()).map_err(sled_err)?;
            let note: HandoffNote = decode(&bytes).map_err(sled_err)?;
            cases.entry(key).or_default().last_note = Some(note);
        }
        // Events come in key order: by key, then by revision (big-endian).
        for item in self.shared.data.scan_prefix(EVENT_PREFIX) {
            let (k, bytes) = item.map_err(sled_err)?;
            let key = name_before_suffix(EVENT_PREFIX, &k)?;
            let event: Event = decode(&bytes).map_err(sled_err)?;
            cases
                .entry(key)
                .or_default()
                .history
                .events
                .push_back(event);
        }
        let mut rules = Vec::new();
        for item in self.shared.data.scan_prefix(QUARANTINE_PREFIX) {
            let (k, bytes) = item.map_err(sled_err)?;
            let prefix =
                String::from_utf8(k[QUARANTINE_PREFIX.len()..].to_vec()).map_err(sled_err)?;
            rules.push((prefix, decode::<u64>(&bytes).map_err(sled_err)?));
        }
        // Answers come in key order: by client id, then by seq (big-endian).
        for item in self.shared.data.scan_prefix(ANSWER_PREFIX) {
            let (key, bytes) = item.map_err(sled_err)?;
            let id = name_before_suffix(ANSWER_PREFIX, &key)?;
            let answer: Answer = decode(&bytes).map_err(sled_err)?;
            sessions
                .get_mut(&id)
                .ok_or_else(|| format!("answer of unknown client {id:?}"))?
                .answers
                .push_back(answer);
        }
        let last_applied = match self.shared.meta.get(KEY_APPLIED).map_err(sled_err)? {
            Some(b) => decode(&b).map_err(sled_err)?,
            None => None,
        };
        let membership = match self.shared.meta.get(KEY_MEMBERSHIP).map_err(sled_err)? {
            Some(b) => decode(&b).map_err(sled_err)?,
            None => StoredMembership::default(),
        };
        Ok(SmState {
            table: LeaseTable::from_parts(leases, cases, rules, sessions),
            last_applied,
            membership,
        })
    }

    fn read_snapshot_file(&self) -> Result<Option<SnapshotFile>, String> {
        match std::fs::read(self.shared.snapshot_dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => {
                let mut file: SnapshotFile = decode(&bytes).map_err(sled_err)?;
                file.state.table.rebuild_index();
                Ok(Some(file))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Replaces everything in `sm_data`/`sm_meta` with `state`, under the install marker.
    fn write_all_to_sled(&self, state: &SmState) -> Result<(), sled::Error> {
        let s = &self.shared;
        s.meta.insert(KEY_INSTALLING, &[1u8])?;
        s.data.clear()?;
        let mut batch = sled::Batch::default();
        for lease in state.table.leases() {
            batch.insert(lease_key(&lease.key), encode(lease));
        }
        for (key, case) in state.table.cases() {
            for (k, v) in case_writes(key, Some(case)) {
                if let Some(v) = v {
                    batch.insert(k, v);
                }
            }
            for event in &case.history.events {
                batch.insert(event_key(key, event.revision), encode(event));
            }
        }
        for (prefix, delay) in state.table.quarantine_rules() {
            batch.insert(prefixed(QUARANTINE_PREFIX, prefix), encode(delay));
        }
        for (id, session) in state.table.sessions() {
            batch.insert(session_key(id), session_header(session));
            for answer in &session.answers {
                batch.insert(answer_key(id, answer.seq), encode(answer));
            }
        }
        s.data.apply_batch(batch)?;
        s.meta.insert(KEY_APPLIED, encode(&state.last_applied))?;
        s.meta.insert(KEY_MEMBERSHIP, encode(&state.membership))?;
        s.meta.remove(KEY_INSTALLING)?;
        Ok(())
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

    pub fn watch_hub(&self) -> &Arc<WatchHub> {
        &self.shared.watch
    }

    /// For state learned from disk or a snapshot: starts every countdown (lease, offer,
    /// quarantine) now and rebuilds the watch window from the histories.
    fn arm_timers_and_watch(&self, state: &SmState) {
        let applied = state.last_applied.map(|l| l.index).unwrap_or(0);
        self.shared.watch.reset(&state.table, applied);
        self.shared.countdowns.restart_leases(state.table.leases());
        self.shared
            .offer_countdowns
            .restart_all(state.table.cases().filter_map(|(key, case)| {
                case.offer
                    .as_ref()
                    .map(|o| (key.as_str(), o.from_token, o.revision, o.offer_ttl_ms))
            }));
    }

    /// Writes the keys and sessions in `changes`, plus `last_applied` and membership, in one
    /// transaction.
    fn persist(&self, state: &SmState, changes: &Changes) -> Result<(), StorageError> {
        let mut writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for key in &changes.keys {
            writes.push((lease_key(key), state.table.lease(key).map(encode)));
        }
        for key in &changes.cases {
            writes.extend(case_writes(key, state.table.case(key)));
        }
        for (key, revision) in &changes.events_added {
            let event = state
                .table
                .case(key)
                .and_then(|c| c.history.events.iter().find(|e| e.revision == *revision));
            if let Some(event) = event {
                writes.push((event_key(key, *revision), Some(encode(event))));
            }
        }
        for (key, revision) in &changes.events_dropped {
            writes.push((event_key(key, *revision), None));
        }
        for prefix in &changes.quarantine_rules {
            let delay = state.table.quarantine_rules().get(prefix).map(encode);
            writes.push((prefixed(QUARANTINE_PREFIX, prefix), delay));
        }
        for id in &changes.clients {
            writes.push((session_key(id), state.table.session(id).map(session_header)));
        }
        for (id, seq) in &changes.answers_added {
            let answer = state
                .table
                .session(id)
                .and_then(|s| s.answers.iter().find(|a| a.seq == *seq));
            if let Some(answer) = answer {
                writes.push((answer_key(id, *seq), Some(encode(answer))));
            }
        }
        for (id, seq) in &changes.answers_dropped {
            // Gone now (not re-remembered later in this batch by a returning client).
            let present = state
                .table
                .session(id)
                .is_some_and(|s| s.answers.iter().any(|a| a.seq == *seq));
            if !present {
                writes.push((answer_key(id, *seq), None));
            }
        }
        let applied = encode(&state.last_applied);
        let membership = encode(&state.membership);
        let s = &self.shared;
        (&s.data, &s.meta)
            .transaction(|(data, meta)| {
                // Re-run on conflict, so no side effects beyond the transaction.
                for (key, value) in &writes {
                    match value {
                        Some(v) => data.insert(key.as_slice(), v.as_slice())?,
                        None => data.remove(key.as_slice())?,
                    };
                }
                meta.insert(KEY_APPLIED, applied.as_slice())?;
                meta.insert(KEY_MEMBERSHIP, membership.as_slice())?;
                Ok::<(), ConflictableTransactionError<()>>(())
            })
            .map_err(|e: TransactionError<()>| {
                StorageIOError::write_state_machine(&std::io::Error::other(format!("{e:?}"))).into()
            })
    }

    /// Writes `file` as the current snapshot unless a newer one is there already; says
    /// whether it wrote.
    async fn write_snapshot_file(&self, file: &SnapshotFile) -> Result<bool, StorageError> {
        let _guard = self.shared.snapshot_lock.lock().await;
        if let Some(current) = self
            .read_snapshot_file()
            .map_err(|e| StorageIOError::read_snapshot(None, &std::io::Error::other(e)))?
        {
            if current.meta.last_log_id > file.meta.last_log_id {
                return Ok(false);
            }
        }
        let bytes = encode(file);
        let path = self.shared.snapshot_dir.join(SNAPSHOT_FILE);
        tokio::task::spawn_blocking(move || write_durably(&path, &bytes))
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &std::io::Error::other(e)))?
            .map_err(|e| StorageIOError::write_snapshot(Some(file.meta.signature()), &e))?;
        Ok(true)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok(self.read(|s| (s.last_applied, s.membership.clone())))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut outcomes = Vec::new();
        let mut changes = Changes::default();
        let mut state = self.shared.state.write().expect("state lock");
        for entry in entries {
            state.last_applied = Some(entry.log_id);
            let outcome = match entry.payload {
                EntryPayload::Blank => Outcome::None,
                EntryPayload::Membership(m) => {
                    state.membership = StoredMembership::new(Some(entry.log_id), m);
                    Outcome::None
                }
                EntryPayload::Normal(cmd) => {
                    let outcome = state
                        .table
                        .apply_tracked(entry.log_id.index, &cmd, &mut changes);
                    // Countdowns follow the table, not the outcome: a de-duplicated retry
                    // answers an old grant but must not restart the current lease's
                    // countdown. A lease whose basis is this entry was granted or renewed by
                    // it, so its countdown starts now, at this node's own apply instant.
                    let key = cmd.op.key();
                    let index = entry.log_id.index;
                    match state.table.lease(key) {
                        Some(l) if l.basis == index => self
                            .shared
                            .countdowns
                            .start(key, l.token, l.basis, l.ttl_ms),
                        Some(_) => {}
                        None => self.shared.countdowns.stop(key),
                    }
                    // Offers likewise: their lapse counts from this node's apply of the offer.
                    match state.table.case(key).and_then(|c| c.offer.as_ref()) {
                        Some(o) if o.revision == index => {
                            let offers = &self.shared.offer_countdowns;
                            offers.start(key, o.from_token, o.revision, o.offer_ttl_ms)
                        }
                        Some(_) => {}
                        None => self.shared.offer_countdowns.stop(key),
                    }
                    // And quarantines: their end counts from this node's apply of the expiry.
                    match state.table.case(key).and_then(|c| c.quarantine.as_ref()) {
                        Some(q) if q.revision == index => self
                            .shared
                            .quarantine_countdowns
                            .start(key, q.revision, q.revision, q.delay_ms),
                        Some(_) => {}
                        None => self.shared.quarantine_countdowns.stop(key),
                    }
                    outcome
                }
            };
            outcomes.push(outcome);
        }
        self.persist(&state, &changes)?;
        // Watchers see an event only once it is applied and stored.
        let mut events: Vec<(String, crate::core::Event)> = changes
            .events_added
            .iter()
            .filter_map(|(key, revision)| {
                let case = state.table.case(key)?;
                let event = case
                    .history
                    .events
                    .iter()
                    .rev()
                    .find(|e| e.revision == *revision)?;
                Some((key.clone(), event.clone()))
            })
            .collect();
        events.sort_by_key(|(_, e)| e.revision);
        let applied = state.last_applied.map(|l| l.index).unwrap_or(0);
        self.shared.watch.publish(events, applied);
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Copy the state now, between applies: the builder runs concurrently with later
        // applies and must not see a half-applied state.
        SnapshotBuilder {
            sm: self.clone(),
            state: Some(self.read(|s| s.clone())),
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
        let mut state: SmState = decode(snapshot.get_ref())
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        state.table.rebuild_index();
        // The file first: if a crash interrupts the copy into sled, the next start redoes it.
        let file = SnapshotFile {
            meta: meta.clone(),
            state,
        };
        if !self.write_snapshot_file(&file).await? {
            // A newer snapshot is installed already; installing an older state would go
            // backwards.
            return Ok(());
        }
        self.write_all_to_sled(&file.state)
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        self.shared
            .flusher
            .sync()
            .await
            .map_err(|e| StorageIOError::write_state_machine(&e))?;
        self.arm_timers_and_watch(&file.state);
        *self.shared.state.write().expect("state lock") = file.state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let file = self
            .read_snapshot_file()
            .map_err(|e| StorageIOError::read_snapshot(None, &std::io::Error::other(e)))?;
        Ok(file.map(|f| Snapshot {
            snapshot: Box::new(std::io::Cursor::new(encode(&f.state))),
            meta: f.meta,
        }))
    }
}

/// Builds a snapshot from a copy of the state taken between applies.
pub struct SnapshotBuilder {
    sm: StateMachine,
    state: Option<SmState>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let state = self.state.take().unwrap_or_default();
        let snapshot_id = match state.last_applied {
            Some(id) => format!(
                "{}-{}-{}",
                id.leader_id,
                id.index,
                crate::expiry::wall_clock_unix_ms()
            ),
            None => format!("empty-{}", crate::expiry::wall_clock_unix_ms()),
        };
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
            snapshot_id,
        };
        let data = encode(&state);
        self.sm
            .write_snapshot_file(&SnapshotFile {
                meta: meta.clone(),
                state,
            })
            .await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(std::io::Cursor::new(data)),
        })
    }
}
