//! Backup files, and seeding a new cluster's data dirs from one (disaster recovery).
//!
//! A backup is a consistent copy of the whole state machine (every lease, record, history and
//! countdown basis) as of one linearizable point, taken by the leader:
//!
//! ```text
//! BATON-BACKUP 1\n
//! {"data_format":8,"cluster_name":"baton",...,"state_bytes":N,"state_crc32":C}\n
//! <N bytes: the encoded state>
//! ```
//!
//! `baton-node restore FILE --data-dir D --node-id N --initial-cluster ...` turns it into the
//! data dir of one node of a new cluster: the state becomes that node's snapshot, with the
//! new cluster's membership, at a log position of term 0 so that every term the new cluster
//! elects is above it. Run it for every node of the new cluster with the same file and the
//! same `--initial-cluster`, then start the nodes as usual.
//!
//! The revision (and so the next fencing token) starts `--revision-gap` above the backup's
//! (default [`RESTORE_REVISION_GAP_DEFAULT`]): the lost cluster may have granted tokens after
//! the backup was taken, and none of them may be granted again to someone else.
//!
//! Lease countdowns restart at the restored nodes' start, as after any restart: a lease is
//! never shorter for having been restored, only possibly longer by the downtime.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::raft_types::{LogId, NodeId, SnapshotMeta, StoredMembership};
use crate::store::{encode, SmState, DATA_FORMAT, DATA_FORMAT_OLDEST};

use crate::limits::BACKUP_HEADER_BYTES_MAX;
/// The first line of every backup file (shared with the client, in `baton_proto`).
pub use baton_proto::limits::BACKUP_MAGIC;
/// How far a restore raises the revision by default. The lost cluster may have issued
/// revisions (fencing tokens) after the backup; the restored one must never issue one of
/// them again to another holder, so it starts this far above the backup's: more writes than
/// a cluster makes in days.
pub const RESTORE_REVISION_GAP_DEFAULT: u64 = 1 << 32;

/// What a backup says about itself (its second line, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    pub data_format: u32,
    pub cluster_name: String,
    pub taken_at_unix_ms: u64,
    /// The last log index the state includes, in the cluster it was taken from.
    pub last_log_index: u64,
    pub revision: u64,
    pub leases: u64,
    pub keys: u64,
    pub state_bytes: u64,
    pub state_crc32: u32,
}

/// Why a backup file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("not a baton backup (it does not start with {:?})", String::from_utf8_lossy(BACKUP_MAGIC).trim_end())]
    NotABackup,
    #[error("the backup's header is unreadable: {0}")]
    Header(String),
    #[error("the backup is of data format {found}; this baton reads formats {DATA_FORMAT_OLDEST} to {DATA_FORMAT}")]
    Format { found: u32 },
    #[error("the backup is truncated or has trailing bytes: its header says {want} bytes of state, the file has {got}")]
    Length { want: u64, got: u64 },
    #[error("the backup is corrupt: checksum {got:08x}, its header says {want:08x}")]
    Checksum { want: u32, got: u32 },
    #[error("the backup's state does not decode: {0}")]
    State(String),
}

/// The bytes of a backup of `state`, taken now from cluster `cluster_name`.
pub fn encode_backup(cluster_name: &str, state: &SmState) -> Vec<u8> {
    let state_bytes = encode(state);
    let header = BackupHeader {
        data_format: DATA_FORMAT,
        cluster_name: cluster_name.to_owned(),
        taken_at_unix_ms: crate::expiry::wall_clock_unix_ms(),
        last_log_index: state.last_applied.map_or(0, |l| l.index),
        revision: state.revision,
        leases: state.table.lease_count() as u64,
        keys: state.table.case_count() as u64,
        state_bytes: state_bytes.len() as u64,
        state_crc32: crc32fast::hash(&state_bytes),
    };
    let mut out = BACKUP_MAGIC.to_vec();
    out.extend(serde_json::to_vec(&header).expect("the header serializes"));
    out.push(b'\n');
    out.extend(state_bytes);
    out
}

/// Reads the header of a backup's bytes and checks the state it describes (length and
/// checksum) without decoding it.
pub fn check_backup(bytes: &[u8]) -> Result<(BackupHeader, &[u8]), BackupError> {
    let rest = bytes
        .strip_prefix(BACKUP_MAGIC)
        .ok_or(BackupError::NotABackup)?;
    let end = rest
        .iter()
        .take(BACKUP_HEADER_BYTES_MAX)
        .position(|b| *b == b'\n')
        .ok_or_else(|| BackupError::Header("no header line".into()))?;
    let header: BackupHeader =
        serde_json::from_slice(&rest[..end]).map_err(|e| BackupError::Header(e.to_string()))?;
    if !(DATA_FORMAT_OLDEST..=DATA_FORMAT).contains(&header.data_format) {
        return Err(BackupError::Format {
            found: header.data_format,
        });
    }
    let state = &rest[end + 1..];
    if state.len() as u64 != header.state_bytes {
        return Err(BackupError::Length {
            want: header.state_bytes,
            got: state.len() as u64,
        });
    }
    let got = crc32fast::hash(state);
    if got != header.state_crc32 {
        return Err(BackupError::Checksum {
            want: header.state_crc32,
            got,
        });
    }
    Ok((header, state))
}

/// Checks a backup's bytes and decodes its state.
pub fn read_backup(bytes: &[u8]) -> Result<(BackupHeader, SmState), BackupError> {
    let (header, state) = check_backup(bytes)?;
    let mut state = SmState::decode(state).map_err(|e| BackupError::State(e.to_string()))?;
    state.table.rebuild_index();
    Ok((header, state))
}

/// What `restore` did.
#[derive(Debug)]
pub struct Restored {
    pub header: BackupHeader,
    pub cluster_name: String,
    pub snapshot_index: u64,
    /// The revision the restored cluster starts above (the backup's plus the gap).
    pub revision: u64,
}

/// Why `restore` seeded nothing: the backup could not be read, the member list does not
/// hold the node, or the data dir could not be seeded.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("reading the backup {file}: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("backup {file}: {source}")]
    Backup {
        file: PathBuf,
        #[source]
        source: BackupError,
    },
    #[error("node ids start at 1")]
    NodeZero,
    #[error("node {node_id} is not in --initial-cluster {members:?}")]
    NotAMember {
        node_id: NodeId,
        members: BTreeMap<NodeId, String>,
    },
    #[error("--revision-gap {revision_gap} takes the revision {revision} past 2^64")]
    RevisionOverflow { revision: u64, revision_gap: u64 },
    #[error(transparent)]
    Seed(#[from] crate::store::OpenError),
}

/// Seeds `data_dir` (empty or absent) as node `node_id` of a new cluster named
/// `cluster_name` (the backup's, if `None`) whose voters are `members`, from the backup at
/// `file`, with the revision raised by `revision_gap` (the same on every node).
pub fn restore(
    file: &Path,
    data_dir: &Path,
    node_id: NodeId,
    cluster_name: Option<&str>,
    members: &BTreeMap<NodeId, String>,
    revision_gap: u64,
) -> Result<Restored, RestoreError> {
    let bytes = std::fs::read(file).map_err(|source| RestoreError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    let (header, mut state) = read_backup(&bytes).map_err(|source| RestoreError::Backup {
        file: file.to_path_buf(),
        source,
    })?;
    if node_id == 0 {
        return Err(RestoreError::NodeZero);
    }
    if !members.contains_key(&node_id) {
        return Err(RestoreError::NotAMember {
            node_id,
            members: members.clone(),
        });
    }
    let cluster_name = cluster_name.unwrap_or(&header.cluster_name).to_owned();
    state.revision =
        state
            .revision
            .checked_add(revision_gap)
            .ok_or(RestoreError::RevisionOverflow {
                revision: state.revision,
                revision_gap,
            })?;
    // Term 0: every term the new cluster elects is above the restored position.
    let index = state.last_applied.map_or(0, |l| l.index).max(1);
    let log_id = LogId::new(openraft::CommittedLeaderId::new(0, 0), index);
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let nodes: BTreeMap<NodeId, openraft::BasicNode> = members
        .iter()
        .map(|(id, addr)| (*id, openraft::BasicNode { addr: addr.clone() }))
        .collect();
    let membership =
        StoredMembership::new(Some(log_id), openraft::Membership::new(vec![voters], nodes));
    state.last_applied = Some(log_id);
    state.membership = membership.clone();
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: membership,
        snapshot_id: format!("restored-{index}-{}", header.taken_at_unix_ms),
    };
    crate::store::seed(data_dir, node_id, &cluster_name, &meta, &state)?;
    Ok(Restored {
        header,
        cluster_name,
        snapshot_index: index,
        revision: state.revision,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SmState {
        SmState {
            revision: 7,
            ..SmState::default()
        }
    }

    #[test]
    fn a_backup_reads_back_and_any_damage_is_named() {
        let bytes = encode_backup("prod", &sample());
        let (header, state) = read_backup(&bytes).unwrap();
        assert_eq!((header.cluster_name.as_str(), header.revision), ("prod", 7));
        assert_eq!(state, sample());

        assert!(matches!(
            read_backup(b"hello"),
            Err(BackupError::NotABackup)
        ));
        let truncated = &bytes[..bytes.len() - 1];
        assert!(matches!(
            read_backup(truncated),
            Err(BackupError::Length { .. })
        ));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            read_backup(&flipped),
            Err(BackupError::Checksum { .. })
        ));
        let other_format = String::from_utf8_lossy(&bytes)
            .replacen(
                &format!("\"data_format\":{DATA_FORMAT}"),
                "\"data_format\":999",
                1,
            )
            .into_bytes();
        assert!(matches!(
            read_backup(&other_format),
            Err(BackupError::Format { found: 999 })
        ));
    }
}
