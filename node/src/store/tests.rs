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

#[tokio::test]
async fn a_deduplicated_retry_does_not_restart_the_current_leases_countdown() {
    use crate::core::{Holder, LogCommand, Op, RequestId};
    use openraft::storage::RaftStateMachine;
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};

    let dir = tempfile::tempdir().unwrap();
    let cd = countdowns();
    let (_log, mut sm) = open(dir.path(), 1, "t", cd.clone()).unwrap();
    let claim = |who: &str, seq: u64| LogCommand {
        request_id: Some(RequestId {
            client_id: who.into(),
            seq,
        }),
        leader_unix_ms: 0,
        op: Op::Claim {
            key: "k".into(),
            holder: Holder {
                name: who.into(),
                client_id: who.into(),
            },
            ttl_ms: 60_000,
        },
    };
    let revoke = LogCommand {
        request_id: None,
        leader_unix_ms: 0,
        op: Op::Revoke {
            key: "k".into(),
            reason: "test".into(),
        },
    };
    let entries = [claim("a", 1), revoke, claim("b", 1), claim("a", 1)]
        .into_iter()
        .enumerate()
        .map(|(i, cmd)| Entry::<TypeConfig> {
            log_id: log_id(1, 1, i as u64 + 1),
            payload: EntryPayload::Normal(cmd),
        });
    let outcomes = sm.apply(entries).await.unwrap();
    // a's retry got a's first answer (token 1) ...
    assert_eq!(outcomes[3], outcomes[0]);
    // ... but the countdown still belongs to b's lease (token 3, basis 3).
    assert!(cd.remaining("k", 3).is_some(), "b's countdown is running");
    assert!(
        cd.remaining("k", 1).is_none(),
        "a's old grant did not restart a countdown"
    );
    assert_eq!(cd.len(), 1);
}

#[tokio::test]
async fn leases_and_dedup_sessions_survive_a_reopen_exactly() {
    use crate::core::{Holder, LogCommand, Op, RequestId};
    use openraft::storage::RaftStateMachine;
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};

    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open(dir.path(), 1, "t", countdowns()).unwrap();
    // Two clients, more requests than the dedup window, some out of seq order.
    let mut index = 0;
    for round in 0..3u64 {
        let entries: Vec<Entry<TypeConfig>> = (0..20u64)
            .map(|i| {
                index += 1;
                let client = if i % 2 == 0 { "c/one" } else { "c two" };
                let seq = round * 20 + (19 - i);
                Entry {
                    log_id: log_id(1, 1, index),
                    payload: EntryPayload::Normal(LogCommand {
                        request_id: Some(RequestId {
                            client_id: client.replace(' ', "_"),
                            seq: seq + 1,
                        }),
                        leader_unix_ms: 0,
                        op: Op::Claim {
                            key: format!("k{}", i % 7),
                            holder: Holder {
                                name: "h".into(),
                                client_id: client.replace(' ', "_"),
                            },
                            ttl_ms: 60_000,
                        },
                    }),
                }
            })
            .collect();
        sm.apply(entries).await.unwrap();
    }
    let before = sm.read(|s| s.clone());
    assert_eq!(before.table.sessions().count(), 2);
    drop((_log, sm));
    // The flusher thread lets go of the database (and its file lock) just after the drop.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (_log, sm) = loop {
        match open(dir.path(), 1, "t", countdowns()) {
            Ok(opened) => break opened,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("reopen: {e}"),
        }
    };
    let after = sm.read(|s| s.clone());
    assert_eq!(
        after, before,
        "the reopened state machine is the one that was written"
    );
}
