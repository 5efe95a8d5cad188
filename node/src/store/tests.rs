//! Storage tests: openraft's conformance suite on the sled store, and identity checks.

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};

use super::*;
use crate::clock::MonotonicClock;
use crate::raft_types::{StorageError, TypeConfig};

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for SledBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let countdowns = Arc::new(Countdowns::new(Arc::new(MonotonicClock)));
        let (log, sm) = open(dir.path(), 1, "test", countdowns).expect("open store");
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_store_passes_openraft_storage_suite() -> Result<(), StorageError> {
    Suite::test_all(SledBuilder)
}

fn countdowns() -> Arc<Countdowns> {
    Arc::new(Countdowns::new(Arc::new(MonotonicClock)))
}

#[test]
fn data_dir_of_another_node_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), 1, "prod", countdowns()).unwrap());
    let err = open(dir.path(), 2, "prod", countdowns())
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("belongs to node 1") && msg.contains("node 2"),
        "{msg}"
    );
}

#[test]
fn data_dir_of_another_cluster_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), 1, "prod", countdowns()).unwrap());
    let err = open(dir.path(), 1, "staging", countdowns())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("\"prod\""), "{err}");
}

#[test]
fn foreign_and_corrupt_data_dirs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("something.txt"), b"not baton").unwrap();
    let err = open(dir.path(), 1, "prod", countdowns())
        .err()
        .expect("refused");
    assert!(matches!(err, OpenError::Foreign { .. }), "{err}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(IDENTITY_FILE), b"{garbage").unwrap();
    let err = open(dir.path(), 1, "prod", countdowns())
        .err()
        .expect("refused");
    assert!(matches!(err, OpenError::CorruptIdentity { .. }), "{err}");
}
