//! Storage tests: openraft's conformance suite on the store, identity checks, upgrades.

use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};

use super::*;
use crate::clock::MonotonicClock;
use crate::core::Proposal;
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
fn the_store_passes_openraft_storage_suite() -> Result<(), StorageError> {
    Suite::test_all(SledBuilder)
}

fn countdowns() -> Arc<Countdowns> {
    Arc::new(Countdowns::new(Arc::new(MonotonicClock)))
}

#[test]
fn a_data_dir_in_use_is_refused_saying_so_once_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let open_one = open(dir.path(), 1, "prod", countdowns()).unwrap();
    let err = open(dir.path(), 1, "prod", countdowns())
        .err()
        .expect("refused while the first is open");
    assert!(matches!(err, OpenError::InUse { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("is in use: another process holds its lock")
            && msg.contains("another --data-dir"),
        "{msg}"
    );
    // Said once: no nested source repeats it (the old message printed sled's text twice).
    assert!(std::error::Error::source(&err).is_none(), "{err:?}");
    drop(open_one);
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

/// One damaged node (FAST '17: redundancy is not fault tolerance): a snapshot file with a
/// flipped bit is refused with a clear error, never served or sent to a peer; one written
/// before snapshots were sealed is still read.
#[test]
fn a_damaged_snapshot_file_is_refused_and_an_unsealed_old_one_is_read() {
    use openraft::testing::log_id;
    let meta = crate::raft_types::SnapshotMeta {
        last_log_id: Some(log_id(1, 1, 41)),
        last_membership: Default::default(),
        snapshot_id: "t".into(),
    };
    let state = SmState {
        revision: 0x0102_0304,
        ..SmState::default()
    };
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), 1, "t", &meta, &state).unwrap();
    let file = state_machine::snapshot_path(&dir.path().join("snapshots"));
    let sealed = std::fs::read(&file).unwrap();
    {
        let (_log, sm) = reopen(dir.path());
        assert_eq!(sm.read(|s| s.revision), 0x0102_0304);
    }
    // One bit of the revision flipped: it would still decode, to another revision.
    let at = sealed
        .windows(4)
        .position(|w| w == 0x0102_0304u32.to_le_bytes())
        .expect("the revision is in the file");
    let mut damaged = sealed.clone();
    damaged[at] ^= 0x01;
    std::fs::write(&file, &damaged).unwrap();
    let err = loop {
        match open(dir.path(), 1, "t", countdowns()) {
            Err(OpenError::InUse { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => break other.err().expect("a damaged snapshot is refused"),
        }
    };
    assert!(
        matches!(&err, OpenError::CorruptState { detail, .. } if detail.contains("checksum")),
        "{err}"
    );
    assert!(
        err.to_string().contains("baton cluster remove 1") && err.to_string().contains("--join"),
        "{err}"
    );
    // A file from before the seal (no trailer) is read as it is.
    let unsealed = &sealed[..sealed.len() - state_machine::SNAPSHOT_SEAL.len() - 4];
    std::fs::write(&file, unsealed).unwrap();
    let (_log, sm) = reopen(dir.path());
    assert_eq!(sm.read(|s| s.revision), 0x0102_0304);
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
        sender: Some(crate::core::Sender {
            client_id: who.into(),
            principal: None,
        }),
    };
    let revoke = LogCommand {
        request_id: None,
        leader_unix_ms: 0,
        sender: None,
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
            payload: EntryPayload::Normal(Proposal::one(cmd)),
        });
    let outcomes = sm.apply(entries).await.unwrap();
    // a's retry got a's first answer (token 1) ...
    assert_eq!(outcomes[3][0].outcome, outcomes[0][0].outcome);
    // ... but the countdown still belongs to b's lease (token 3, basis 3).
    assert!(cd.remaining("k", 3).is_some(), "b's countdown is running");
    assert!(
        cd.remaining("k", 1).is_none(),
        "a's old grant did not restart a countdown"
    );
    assert_eq!(cd.len(), 1);
}

/// Builds a snapshot of `sm`'s current state.
async fn snapshot_of(sm: &mut StateMachine) -> crate::raft_types::Snapshot {
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

/// Reopens the store in `dir`, waiting for the previous flusher thread to let go of sled.
fn reopen(dir: &std::path::Path) -> (LogStore, StateMachine) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match open(dir, 1, "t", countdowns()) {
            Ok(opened) => return opened,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("reopen: {e}"),
        }
    }
}

#[tokio::test]
async fn after_a_reopen_the_snapshot_plus_the_log_replayed_is_the_state_that_was_applied() {
    use crate::core::{Holder, LogCommand, Op, RequestId};
    use openraft::storage::RaftLogReader;
    use openraft::storage::RaftStateMachine;
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};

    let dir = tempfile::tempdir().unwrap();
    let (log, mut sm) = open(dir.path(), 1, "t", countdowns()).unwrap();
    // Two clients, more requests than the dedup window, some out of seq order; some entries
    // carry one command, some a batch.
    let mut index = 0;
    let mut rounds: Vec<Vec<Entry<TypeConfig>>> = Vec::new();
    for round in 0..3u64 {
        let commands: Vec<LogCommand> = (0..20u64)
            .map(|i| {
                let client = if i % 2 == 0 { "c/one" } else { "c_two" };
                let seq = round * 20 + (19 - i);
                LogCommand {
                    request_id: Some(RequestId {
                        client_id: client.into(),
                        seq: seq + 1,
                    }),
                    leader_unix_ms: 0,
                    op: Op::Claim {
                        key: format!("k{}", i % 7),
                        holder: Holder {
                            name: "h".into(),
                            client_id: client.into(),
                        },
                        ttl_ms: 60_000,
                    },
                    sender: Some(crate::core::Sender {
                        client_id: client.into(),
                        principal: None,
                    }),
                }
            })
            .collect();
        let entries: Vec<Entry<TypeConfig>> = commands
            .chunks(1 + round as usize * 3)
            .map(|chunk| {
                index += 1;
                Entry {
                    log_id: log_id(1, 1, index),
                    payload: EntryPayload::Normal(Proposal {
                        commands: chunk.to_vec(),
                    }),
                }
            })
            .collect();
        rounds.push(entries);
    }
    // Rounds 0 and 1 go into a snapshot; round 2 is only in the log.
    for entries in &rounds {
        log.write_entries(entries.clone()).unwrap();
    }
    log.sync().await.unwrap();
    sm.apply(rounds[0].clone()).await.unwrap();
    sm.apply(rounds[1].clone()).await.unwrap();
    let snapshot = snapshot_of(&mut sm).await;
    sm.apply(rounds[2].clone()).await.unwrap();
    let before = sm.read(|s| s.clone());
    assert_eq!(before.table.sessions().count(), 2);
    assert_eq!(
        before.revision, 60,
        "one revision per command, batched or not"
    );
    drop((log, sm));

    let (mut log, mut sm) = reopen(dir.path());
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(
        applied, snapshot.meta.last_log_id,
        "the state machine starts at the snapshot"
    );
    // What openraft does at start: re-apply the log after the snapshot.
    let after_snapshot = applied.unwrap().index + 1;
    let replay = log.try_get_log_entries(after_snapshot..).await.unwrap();
    assert_eq!(
        replay, rounds[2],
        "the log kept every entry the snapshot does not cover"
    );
    sm.apply(replay).await.unwrap();
    assert_eq!(
        sm.read(|s| s.clone()),
        before,
        "snapshot + replayed log is the state that was applied"
    );
}

/// `ops` as log entries 1, 2, ... of term 1, each one command from the session `session`
/// names for it.
fn entries_of(
    ops: Vec<crate::core::Op>,
    session: impl Fn(&crate::core::Op) -> crate::core::Name,
) -> Vec<openraft::Entry<TypeConfig>> {
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| openraft::Entry {
            log_id: openraft::testing::log_id(1, 1, i as u64 + 1),
            payload: openraft::EntryPayload::Normal(Proposal::one(crate::core::LogCommand {
                request_id: None,
                leader_unix_ms: 7,
                sender: Some(crate::core::Sender {
                    client_id: session(&op),
                    principal: None,
                }),
                op,
            })),
        })
        .collect()
}

/// A quarantine learned from a snapshot (or from disk at start) is counted down like the
/// leases and offers: without its countdown a node never ends it as leader, and the key stays
/// unclaimable (found by the chaos suite's `revoke` scenario, seed 199298).
#[tokio::test]
async fn a_quarantine_learned_from_a_snapshot_or_a_reopen_is_counted_down() {
    use crate::core::{Holder, Op};
    use openraft::storage::RaftStateMachine;

    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open(dir.path(), 1, "t", countdowns()).unwrap();
    let holder = Holder {
        name: "codex".into(),
        client_id: "c-codex".into(),
    };
    let ops = [
        Op::Claim {
            key: "q".into(),
            holder: holder.clone(),
            ttl_ms: 9_000,
        },
        Op::RevokeHeld {
            key: "q".into(),
            reason: "stuck".into(),
        },
    ];
    sm.apply(entries_of(ops.into(), |_| holder.client_id.clone()))
        .await
        .unwrap();
    let revision = sm.read(|s| {
        s.table
            .case("q")
            .unwrap()
            .quarantine
            .as_ref()
            .unwrap()
            .revision
    });
    assert!(sm
        .quarantine_countdowns()
        .remaining("q", revision)
        .is_some());

    let snapshot = snapshot_of(&mut sm).await;
    let other = tempfile::tempdir().unwrap();
    let (_l2, mut sm2) = open(other.path(), 2, "t", countdowns()).unwrap();
    sm2.install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert!(
        sm2.quarantine_countdowns()
            .remaining("q", revision)
            .is_some(),
        "a snapshot's quarantine is counted down"
    );
    drop((_log, sm));
    let (_log, sm) = reopen(dir.path());
    assert!(
        sm.quarantine_countdowns()
            .remaining("q", revision)
            .is_some(),
        "a reopened node's quarantine is counted down"
    );
}

#[tokio::test]
async fn case_files_offers_notes_and_history_survive_a_reopen_and_a_snapshot_install() {
    use crate::core::{HandoffNote, Holder, Op, RecordPatch};
    use openraft::storage::RaftStateMachine;

    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open(dir.path(), 1, "t", countdowns()).unwrap();
    let who = |n: &str| Holder {
        name: n.into(),
        client_id: format!("c-{n}").into(),
    };
    let ops = vec![
        Op::Assign {
            key: "k".into(),
            to: "claude".into(),
            by: "dispatch".into(),
            reason: "r".into(),
        },
        Op::Claim {
            key: "k".into(),
            holder: who("codex"),
            ttl_ms: 60_000,
        },
        Op::Update {
            key: "k".into(),
            token: 2,
            patch: RecordPatch {
                status: Some("in_progress".into()),
                summary: Some("s".into()),
                ..Default::default()
            },
        },
        Op::Offer {
            key: "k".into(),
            token: 2,
            to: "claude".into(),
            note: HandoffNote {
                commit: "abc".into(),
                done: "half".into(),
                ..Default::default()
            },
            offer_ttl_ms: 60_000,
        },
        Op::Claim {
            key: "other".into(),
            holder: who("gemini"),
            ttl_ms: 60_000,
        },
    ];
    // A claim from its holder's session; the rest from codex's, whose lease the update and
    // offer act on.
    let session = |op: &Op| match op {
        Op::Claim { holder, .. } => holder.client_id.clone(),
        _ => who("codex").client_id,
    };
    sm.apply(entries_of(ops, session)).await.unwrap();
    let before = sm.read(|s| s.clone());
    let case = before.table.case("k").unwrap();
    assert!(case.offer.is_some() && case.record.assigned_to.is_some());
    assert_eq!(case.history.events.len(), 4);
    assert!(
        sm.offer_countdowns().remaining("k", 4).is_some(),
        "the offer's lapse countdown runs"
    );

    // A snapshot of this state, installed into a fresh store, is the same state.
    let snapshot = snapshot_of(&mut sm).await;
    let other = tempfile::tempdir().unwrap();
    let (_l2, mut sm2) = open(other.path(), 2, "t", countdowns()).unwrap();
    sm2.install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert_eq!(sm2.read(|s| s.clone()), before);
    assert!(sm2.offer_countdowns().remaining("k", 4).is_some());

    drop((_log, sm));
    let (_log, sm) = reopen(dir.path());
    assert_eq!(
        sm.read(|s| s.clone()),
        before,
        "reopened from the snapshot file it built"
    );
}

/// Encodings written by the code of data format 3 (`fixtures/`, made by that code: see
/// `fixtures/README.md`): the state after bob's claim of `tasks/k`, alice's update with bob's
/// token from her own process (which format 3 applied and credited to bob), alice's stale
/// update (a text refusal, remembered for retries), an assignment and an anonymous revoke;
/// the same state as format 2 encoded it; and a log entry of the first two commands.
const STATE_FORMAT_3: &[u8] = include_bytes!("fixtures/state-format3.bin");
const STATE_FORMAT_2: &[u8] = include_bytes!("fixtures/state-format2.bin");
const ENTRY_FORMAT_3: &[u8] = include_bytes!("fixtures/entry-format3.bin");

#[test]
fn format_2_and_3_states_decode_with_their_events_kept_and_marked() {
    let state = SmState::decode(STATE_FORMAT_3).unwrap();
    assert_eq!(state.revision, 7);
    let events = |key: &str| -> Vec<_> {
        state
            .table
            .case(key)
            .unwrap()
            .history
            .events
            .iter()
            .map(|e| {
                (
                    e.kind.as_str(),
                    e.actor
                        .as_ref()
                        .map(|a| (a.name.clone(), a.client_id.clone(), a.principal.clone())),
                    e.attribution,
                )
            })
            .collect()
    };
    let old = crate::core::Attribution::RecordedBeforeFormat4;
    let bob = || Some(("bob".into(), "bob-proc".into(), None));
    assert_eq!(
        events("tasks/k"),
        vec![
            ("claimed", bob(), old),
            // Alice's write, credited to bob as format 3 did: kept, and marked so.
            ("updated", bob(), old),
            ("assigned", None, old),
            ("revoked", None, old),
        ]
    );
    // The leader's own events credit no one, in any format.
    assert_eq!(
        events("tasks/j"),
        vec![
            ("claimed", bob(), old),
            ("expired", None, crate::core::Attribution::Requester),
        ]
    );
    // The remembered text refusal still answers a retry.
    let alice = state.table.session("proc-alice").unwrap();
    assert!(alice
        .answers
        .iter()
        .any(|a| matches!(&a.outcome, crate::core::Outcome::RefusedText { message } if message.contains("token 99"))));
    let format_2 = SmState::decode(STATE_FORMAT_2).unwrap();
    assert_eq!(format_2.table, state.table);
    assert_eq!(format_2.access.version, 0);

    // Today's encoding reads back as itself; damage is an error, not an older format.
    let new = encode(&state);
    let mut again = SmState::decode(&new).unwrap();
    again.table.rebuild_index();
    assert_eq!(again, state);
    assert!(SmState::decode(&new[..new.len() - 1]).is_err());
    assert!(SmState::decode(&STATE_FORMAT_3[..STATE_FORMAT_3.len() / 2]).is_err());
    assert!(SmState::decode(&STATE_FORMAT_2[..STATE_FORMAT_2.len() - 1]).is_err());
}

#[test]
fn format_3_commands_replayed_by_this_version_give_the_state_format_3_nodes_had() {
    // The commands the format-3 fixture state was made from (see fixtures/README.md), as
    // they stand in a format-3 log: no sender. A node of this version that replays them must
    // reach the state a format-3 node reached and a format-4 node decodes from its snapshot:
    // every node agrees, whichever version applied an entry.
    use crate::core::{Holder, LogCommand, Op, RecordPatch, RequestId};
    let cmd = |client: &str, seq: u64, op: Op| LogCommand {
        request_id: Some(RequestId {
            client_id: client.into(),
            seq,
        }),
        leader_unix_ms: 1_700_000_000_000 + seq,
        op,
        sender: None,
    };
    let bob = Holder {
        name: "bob".into(),
        client_id: "bob-proc".into(),
    };
    let update = |token: u64, status: &str| Op::Update {
        key: "tasks/k".into(),
        token,
        patch: RecordPatch {
            status: Some(status.into()),
            ..Default::default()
        },
    };
    let commands = [
        cmd(
            "proc-bob",
            1,
            Op::Claim {
                key: "tasks/k".into(),
                holder: bob.clone(),
                ttl_ms: 60_000,
            },
        ),
        cmd("proc-alice", 1, update(1, "done")),
        cmd("proc-alice", 2, update(99, "x")),
        cmd(
            "proc-disp",
            1,
            Op::Assign {
                key: "tasks/k".into(),
                to: "carol".into(),
                by: "disp".into(),
                reason: "r".into(),
            },
        ),
        cmd(
            "proc-ops",
            1,
            Op::Revoke {
                key: "tasks/k".into(),
                reason: "ops".into(),
            },
        ),
        cmd(
            "proc-bob",
            2,
            Op::Claim {
                key: "tasks/j".into(),
                holder: bob,
                ttl_ms: 60_000,
            },
        ),
        LogCommand {
            request_id: None,
            leader_unix_ms: 1_700_000_000_010,
            op: Op::Expire {
                key: "tasks/j".into(),
                token: 6,
                basis: 6,
            },
            sender: None,
        },
    ];
    let mut replayed = crate::core::LeaseTable::default();
    for (i, c) in commands.iter().enumerate() {
        replayed.apply(i as u64 + 1, c);
    }
    let decoded = SmState::decode(STATE_FORMAT_3).unwrap().table;
    assert_eq!(replayed, decoded);
}

#[test]
fn a_format_3_log_entry_is_rewritten_as_commands_without_a_sender() {
    use crate::core::LogCommand;
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload};
    // Not readable as today's format (so the upgrade cannot mistake it) ...
    assert!(decode_whole::<Entry<TypeConfig>>(ENTRY_FORMAT_3).is_err());
    // ... and read whole, upgraded, from an older dir's sled log at open.
    let dir = tempfile::tempdir().unwrap();
    legacy::write_for_tests(
        dir.path(),
        &meta::Meta::default(),
        &[(7, ENTRY_FORMAT_3.to_vec())],
    );
    let old = legacy::Legacy::open(dir.path()).unwrap().unwrap();
    let entry = old.log().unwrap().remove(0);
    let EntryPayload::Normal(proposal) = entry.payload else {
        panic!("a normal entry");
    };
    assert_eq!(proposal.commands.len(), 2);
    assert!(proposal.commands.iter().all(LogCommand::is_format_3));
    // Applied by format 3's rules: alice's write with bob's token goes through, credited to
    // bob, as the format-3 nodes applied it.
    let mut table = crate::core::LeaseTable::default();
    for (i, cmd) in proposal.commands.iter().enumerate() {
        table.apply(i as u64 + 1, cmd);
    }
    assert_eq!(table.case("tasks/k").unwrap().record.status, "done");
    // Reading it again gives the same (an upgrade a crash cut short is redone from sled).
    assert_eq!(
        old.log().unwrap(),
        vec![Entry {
            log_id: log_id(1, 1, 7),
            payload: EntryPayload::Normal(proposal),
        }]
    );
}

#[test]
fn a_format_2_data_dir_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), 1, "t", countdowns()).unwrap());
    let id_path = dir.path().join(IDENTITY_FILE);
    let mut id: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&id_path).unwrap()).unwrap();
    let incarnation = id["incarnation"].clone();
    id["format"] = 2.into();
    std::fs::write(&id_path, serde_json::to_vec(&id).unwrap()).unwrap();
    drop(reopen(dir.path()));
    let id: serde_json::Value = serde_json::from_slice(&std::fs::read(&id_path).unwrap()).unwrap();
    assert_eq!(id["format"], DATA_FORMAT);
    assert_eq!(id["incarnation"], incarnation, "the incarnation is kept");
    // A format this baton does not know is refused.
    let mut id = id;
    id["format"] = 1.into();
    std::fs::write(&id_path, serde_json::to_vec(&id).unwrap()).unwrap();
    let err = open(dir.path(), 1, "t", countdowns())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("has format 1"), "{err}");
}

#[tokio::test]
async fn a_format_4_or_5_data_dir_has_its_log_and_meta_moved_from_sled() {
    use openraft::storage::RaftLogStorage;
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload, RaftLogReader};
    for old_format in [4, 5] {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path(), 1, "t", countdowns()).unwrap());
        let entries: Vec<Entry<TypeConfig>> = (3..=5)
            .map(|i| Entry {
                log_id: log_id(1, 1, i),
                payload: EntryPayload::Blank,
            })
            .collect();
        let vote = openraft::Vote::new(1, 2);
        legacy::write_for_tests(
            dir.path(),
            &meta::Meta {
                vote: Some(vote),
                committed: Some(log_id(1, 1, 4)),
                purged: Some(log_id(1, 1, 2)),
            },
            &entries
                .iter()
                .map(|e| (e.log_id.index, encode(e)))
                .collect::<Vec<_>>(),
        );
        let id_path = dir.path().join(IDENTITY_FILE);
        let mut id: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&id_path).unwrap()).unwrap();
        id["format"] = old_format.into();
        std::fs::write(&id_path, serde_json::to_vec(&id).unwrap()).unwrap();
        // A move cut short by a crash left part of the log in segments: it starts over.
        {
            let (partial, _) = log_store::open_segments(&dir.path().join(LOG_DIR), None).unwrap();
            partial.append(entries[..2].to_vec()).unwrap();
            partial.sync().unwrap();
        }
        let (mut log, _sm) = reopen(dir.path());
        let id: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&id_path).unwrap()).unwrap();
        assert_eq!(id["format"], DATA_FORMAT);
        assert_eq!(
            log.try_get_log_entries(0..).await.unwrap(),
            entries,
            "the log is kept, from format {old_format}"
        );
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(vote),
            "the vote is kept"
        );
        assert_eq!(
            log.get_log_state().await.unwrap().last_purged_log_id,
            Some(log_id(1, 1, 2)),
            "the purge point is kept"
        );
        assert!(
            !dir.path().join("sled").exists(),
            "sled's files are gone once the identity says format 7"
        );
        assert_eq!(log.segment_count(), 1);
        drop((log, _sm));
        let (mut log, _sm) = reopen(dir.path());
        assert_eq!(log.try_get_log_entries(0..).await.unwrap(), entries);
        assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    }
}

/// A format-6 dir (no marks yet), a format-7 dir (format 8 adds only a log command), a
/// format-8 dir (format 9 adds only log commands, an event kind, a refusal and outcomes) and
/// a format-9 dir (format 10 adds a log command and its outcomes), a format-10 dir (format
/// 11 adds log commands and the lines, encoded only when someone waits) and a format-11 dir
/// (format 12 adds a log command and the permits, encoded only when one is held) and a
/// format-12 dir (format 13 adds a way to share a key, in that command and those permits)
/// and a format-13 dir (format 14 adds a log command, nothing in the state) are read as
/// they are and say the current format from their first open.
#[tokio::test]
async fn a_format_6_to_13_data_dir_keeps_its_segment_log_and_says_the_current_format() {
    use openraft::testing::log_id;
    use openraft::{Entry, EntryPayload, RaftLogReader};
    for format in [6, 7, 8, 9, 10, 11, 12, 13] {
        let dir = tempfile::tempdir().unwrap();
        let (log, sm) = open(dir.path(), 1, "t", countdowns()).unwrap();
        drop(sm);
        let entries: Vec<Entry<TypeConfig>> = (1..=5)
            .map(|i| Entry {
                log_id: log_id(1, 1, i),
                payload: EntryPayload::Blank,
            })
            .collect();
        log.write_entries(entries.clone()).unwrap();
        log.sync().await.unwrap();
        drop(log);
        let id_path = dir.path().join(IDENTITY_FILE);
        let mut id: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&id_path).unwrap()).unwrap();
        id["format"] = format.into();
        std::fs::write(&id_path, serde_json::to_vec(&id).unwrap()).unwrap();
        let (mut log, _sm) = reopen(dir.path());
        let id: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&id_path).unwrap()).unwrap();
        assert_eq!(id["format"], DATA_FORMAT, "from format {format}");
        assert_eq!(
            log.try_get_log_entries(0..).await.unwrap(),
            entries,
            "a format-{format} log is read as it is, not moved from sled (which holds none)"
        );
    }
}

/// The command `op(holder)` sent by `who` (holder and session `cid-WHO`) as its request `seq`.
fn sent_by(
    who: &str,
    seq: u64,
    op: impl FnOnce(crate::core::Holder) -> crate::core::Op,
) -> crate::core::LogCommand {
    use crate::core::{Holder, LogCommand, RequestId, Sender};
    let holder = Holder {
        name: who.into(),
        client_id: format!("cid-{who}").into(),
    };
    LogCommand {
        request_id: Some(RequestId {
            client_id: holder.client_id.to_string(),
            seq,
        }),
        leader_unix_ms: 1,
        sender: Some(Sender {
            client_id: holder.client_id.clone(),
            principal: None,
        }),
        op: op(holder),
    }
}

/// A table where ann holds `k` and bob and cat wait in its line.
fn table_with_a_line() -> crate::core::LeaseTable {
    use crate::core::Op;
    let mut table = crate::core::LeaseTable::default();
    for (index, who) in [(1, "ann"), (2, "bob"), (3, "cat")] {
        let cmd = sent_by(who, index, |holder| Op::Wait {
            key: "k".into(),
            holder,
            ttl_ms: 5_000,
        });
        table.apply(index, &cmd);
    }
    assert_eq!(table.line("k").len(), 2);
    table
}

#[test]
fn a_state_with_waiters_keeps_its_lines_and_one_without_encodes_as_format_10_did() {
    let state = SmState {
        table: table_with_a_line(),
        revision: 3,
        ..SmState::default()
    };
    let bytes = encode(&state);
    let mut back = SmState::decode(&bytes).unwrap();
    back.table.rebuild_index();
    assert_eq!(back, state);
    assert!(SmState::decode(&bytes[..bytes.len() - 1]).is_err());
    // No one waiting: the bytes are format 10's (the same fields, nothing after them), which a
    // format-10 node reads.
    let mut quiet = state.clone();
    quiet.table = crate::core::LeaseTable::default();
    let format_10 = encode(&(
        &quiet.table,
        quiet.revision,
        &quiet.last_applied,
        &quiet.membership,
        &quiet.access,
    ));
    assert_eq!(encode(&quiet), format_10);
    let mut back = SmState::decode(&format_10).unwrap();
    back.table.rebuild_index();
    assert_eq!(back, quiet);
}

#[test]
fn waiters_learned_from_disk_are_counted_down_again() {
    use openraft::testing::log_id;
    let meta = crate::raft_types::SnapshotMeta {
        last_log_id: Some(log_id(1, 1, 3)),
        last_membership: Default::default(),
        snapshot_id: "t".into(),
    };
    let state = SmState {
        table: table_with_a_line(),
        revision: 3,
        ..SmState::default()
    };
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), 1, "t", &meta, &state).unwrap();
    let (_log, sm) = reopen(dir.path());
    assert_eq!(sm.read(|s| s.table.line("k").len()), 2);
    assert_eq!(sm.read(|s| s.table.waiter_count()), 2);
    // Without this, a node that learned a line from disk or a snapshot would never drop a
    // lapsed place as leader: a dead waiter would be granted the key.
    assert_eq!(sm.waiter_countdowns().len(), 2);
}

/// `table` with ann and bob holding permits of `p` (2 of 3), ann's TTL 5 s, bob's 7 s.
fn with_permits(mut table: crate::core::LeaseTable, first: u64) -> crate::core::LeaseTable {
    use crate::core::{Op, Sharing};
    for (index, who, ttl_ms) in [(first, "ann", 5_000), (first + 1, "bob", 7_000)] {
        let cmd = sent_by(who, index, |holder| Op::ClaimPermit {
            key: "p".into(),
            holder,
            ttl_ms,
            sharing: Sharing::Permits(3),
        });
        table.apply(index, &cmd);
    }
    assert_eq!(table.holders("p").map(|h| h.leases.len()), Some(2));
    table
}

#[test]
fn a_state_with_permits_keeps_them_with_or_without_waiters_and_one_without_encodes_as_format_11_did(
) {
    for (table, revision) in [
        (with_permits(crate::core::LeaseTable::default(), 1), 2),
        (with_permits(table_with_a_line(), 4), 5),
    ] {
        let state = SmState {
            table,
            revision,
            ..SmState::default()
        };
        let bytes = encode(&state);
        let mut back = SmState::decode(&bytes).unwrap();
        back.table.rebuild_index();
        assert_eq!(back, state);
        assert_eq!(back.table.permit_holder_count(), 2);
        assert!(SmState::decode(&bytes[..bytes.len() - 1]).is_err());
    }
    // Shared holders (format 13) are kept as permits are, with their sharing.
    let mut table = with_permits(crate::core::LeaseTable::default(), 1);
    for (index, who) in [(3, "cat"), (4, "dan")] {
        table.apply(
            index,
            &sent_by(who, index, |holder| crate::core::Op::ClaimPermit {
                key: "s".into(),
                holder,
                ttl_ms: 5_000,
                sharing: crate::core::Sharing::Shared,
            }),
        );
    }
    let state = SmState {
        table,
        revision: 4,
        ..SmState::default()
    };
    let mut back = SmState::decode(&encode(&state)).unwrap();
    back.table.rebuild_index();
    assert_eq!(back, state);
    let shared = back.table.holders("s").expect("shared holders kept");
    assert_eq!(
        (shared.sharing, shared.leases.len()),
        (crate::core::Sharing::Shared, 2)
    );
    // A waiter for a permit (format 13): what it waits for is kept beside the lines.
    let mut table = state.table;
    for (index, who) in [(5, "fay"), (6, "eve")] {
        table.apply(
            index,
            &sent_by(who, index, |holder| crate::core::Op::WaitPermit {
                key: "p".into(),
                holder,
                ttl_ms: 5_000,
                sharing: crate::core::Sharing::Permits(3),
            }),
        );
    }
    let state = SmState {
        table,
        revision: 6,
        ..SmState::default()
    };
    assert_eq!(
        state.table.line("p").len(),
        1,
        "fay took the third permit, eve waits"
    );
    let bytes = encode(&state);
    let mut back = SmState::decode(&bytes).unwrap();
    back.table.rebuild_index();
    assert_eq!(back, state);
    assert_eq!(
        back.table.line("p")[0].sharing,
        Some(crate::core::Sharing::Permits(3))
    );
    assert!(SmState::decode(&bytes[..bytes.len() - 1]).is_err());
    // Waiters and no permits: the bytes are format 11's (the same fields, the lines last).
    let lines_only = SmState {
        table: table_with_a_line(),
        revision: 3,
        ..SmState::default()
    };
    let format_11 = encode(&(
        &lines_only.table,
        lines_only.revision,
        &lines_only.last_applied,
        &lines_only.membership,
        &lines_only.access,
        lines_only.table.lines(),
    ));
    assert_eq!(encode(&lines_only), format_11);
}

#[test]
fn permits_learned_from_disk_are_counted_down_again_each_under_its_token() {
    use openraft::testing::log_id;
    let meta = crate::raft_types::SnapshotMeta {
        last_log_id: Some(log_id(1, 1, 2)),
        last_membership: Default::default(),
        snapshot_id: "t".into(),
    };
    let state = SmState {
        table: with_permits(crate::core::LeaseTable::default(), 1),
        revision: 2,
        ..SmState::default()
    };
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), 1, "t", &meta, &state).unwrap();
    let (_log, sm) = reopen(dir.path());
    assert_eq!(sm.read(|s| s.table.permit_holder_count()), 2);
    // Without this, a node that learned permits from disk or a snapshot would never expire
    // them as leader: a dead holder's permit would never return.
    let countdowns = sm.countdowns();
    assert_eq!(countdowns.len(), 2);
    for (token, ttl) in [(1, 5), (2, 7)] {
        let id = crate::core::permits::countdown_id("p", token);
        let left = countdowns
            .remaining(&id, token)
            .expect("a countdown per permit");
        assert!(left <= std::time::Duration::from_secs(ttl), "{left:?}");
        assert!(left > std::time::Duration::from_secs(ttl - 2), "{left:?}");
    }
}

/// A key held by permits with one free and a waiter in line had a hand-on nudge, a
/// countdown of no time that asks the leader for `Op::HandOn`: countdowns are a node's own,
/// so one that learned the state from disk or a snapshot arms it again (else the head waited
/// for its next renewal).
#[test]
fn a_hand_on_nudge_is_armed_again_for_a_state_learned_from_disk() {
    use crate::core::{Op, Sharing};
    use openraft::testing::log_id;
    let mut table = crate::core::LeaseTable::default();
    let mut index = 0;
    let mut apply = |table: &mut crate::core::LeaseTable, who: &str, op: fn(_) -> Op| {
        index += 1;
        table.apply(index, &sent_by(who, index, op));
    };
    let claim = |holder| Op::ClaimPermit {
        key: "p".into(),
        holder,
        ttl_ms: 5_000,
        sharing: Sharing::Permits(3),
    };
    let wait = |holder| Op::WaitPermit {
        key: "p".into(),
        holder,
        ttl_ms: 5_000,
        sharing: Sharing::Permits(3),
    };
    for who in ["ann", "bob", "cat"] {
        apply(&mut table, who, claim);
    }
    for who in ["dan", "eve"] {
        apply(&mut table, who, wait);
    }
    // Every permit freed in one entry: dan is granted in it, eve waits for the nudge.
    apply(&mut table, "ops", |_| Op::Revoke {
        key: "p".into(),
        reason: "r".into(),
    });
    assert_eq!(table.holders("p").map(|h| h.free()), Some(2));
    assert_eq!(table.line("p").len(), 1);
    let meta = crate::raft_types::SnapshotMeta {
        last_log_id: Some(log_id(1, 1, index)),
        last_membership: Default::default(),
        snapshot_id: "t".into(),
    };
    let state = SmState {
        table,
        revision: index,
        ..SmState::default()
    };
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path(), 1, "t", &meta, &state).unwrap();
    let (_log, sm) = reopen(dir.path());
    // Eve's place, and the nudge.
    assert_eq!(sm.waiter_countdowns().len(), 2);
}
