//! openraft type configuration: log entries carry a `core::Proposal` (a batch of commands),
//! applying one answers a `core::Applied` per command. Everything else is openraft's default (u64 node ids, `BasicNode{addr}`,
//! in-memory snapshot buffers, tokio).

use std::io::Cursor;

use crate::core::{Applied, Proposal};

openraft::declare_raft_types!(
    /// baton's Raft types.
    pub TypeConfig:
        D = Proposal,
        R = Vec<Applied>,
);

pub type NodeId = u64;
pub type Node = openraft::BasicNode;
pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type Vote = openraft::Vote<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
pub type Snapshot = openraft::Snapshot<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;

/// Keeps `Cursor` used: the macro names it without a path.
pub type SnapshotData = Cursor<Vec<u8>>;
