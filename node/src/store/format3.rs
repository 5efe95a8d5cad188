//! Data format 3, as far as format 4 changed it: enough to read a format-3 data dir (its
//! snapshot and log), backup, or a format-3 peer's Raft messages, and upgrade them.
//!
//! Format 4 records who really acted: every client command carries its sender (session and
//! principal), and every history event its actor with the principal and how it was
//! recorded. bincode is not self-describing, so the types whose layout changed are mirrored
//! here as format 3 wrote them, with conversions to today's. A format-3 command becomes a
//! command without a sender, which the core applies by format 3's rules (so every node
//! reaches the same state from the same log); a format-3 event keeps its actor, marked
//! `RecordedBeforeFormat4`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde::Deserialize;

use crate::core::access::AccessState;
use crate::core::table::Answer;
use crate::core::{
    Actor, Attribution, CaseFile, ClientSession, Event, EventKind, HandoffNote, History, Holder,
    Lease, LeaseTable, LogCommand, Offer, Op, Proposal, Quarantine, Record, RequestId,
};
use crate::raft_types::{Entry, LogId, Node, NodeId, StoredMembership, Vote};

use super::SmState;

#[derive(Deserialize)]
struct EventV3 {
    revision: u64,
    kind: EventKind,
    actor: Option<Holder>,
    token: u64,
    unix_ms: u64,
    detail: String,
}

#[derive(Deserialize)]
struct HistoryV3 {
    events: VecDeque<EventV3>,
    dropped: u64,
}

#[derive(Deserialize)]
struct CaseFileV3 {
    record: Record,
    offer: Option<Box<Offer>>,
    last_note: Option<Box<HandoffNote>>,
    history: HistoryV3,
    quarantine: Option<Box<Quarantine>>,
}

#[derive(Deserialize)]
struct LeaseTableV3 {
    leases: BTreeMap<Arc<str>, Box<Lease>>,
    cases: BTreeMap<Arc<str>, Box<CaseFileV3>>,
    quarantine_rules: BTreeMap<String, u64>,
    sessions: BTreeMap<String, ClientSessionV3>,
}

#[derive(Deserialize)]
struct ClientSessionV3 {
    last_index: u64,
    answers: VecDeque<AnswerV3>,
    forgotten_seq_max: u64,
}

/// Outcomes kept their layout: format 3's text refusal is `Outcome::RefusedText`, at the same
/// place, and the typed one was added last. What format 4 added is the revision an answer
/// was decided at, which format 3 did not keep (0: a retry's answer carries its own).
#[derive(Deserialize)]
struct AnswerV3 {
    seq: u64,
    op_fingerprint: u64,
    outcome: crate::core::Outcome,
}

impl ClientSessionV3 {
    fn upgrade(self) -> ClientSession {
        ClientSession {
            last_index: self.last_index,
            answers: self
                .answers
                .into_iter()
                .map(|a| Answer {
                    seq: a.seq,
                    op_fingerprint: a.op_fingerprint,
                    outcome: a.outcome,
                    revision: 0,
                })
                .collect(),
            forgotten_seq_max: self.forgotten_seq_max,
        }
    }
}

/// `SmState` as format 3 encoded it.
#[derive(Deserialize)]
pub(super) struct SmStateV3 {
    table: LeaseTableV3,
    revision: u64,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    access: AccessState,
}

/// `SmState` as format 2 encoded it: format 3's without the permissions policy.
#[derive(Deserialize)]
pub(super) struct SmStateV2 {
    table: LeaseTableV3,
    revision: u64,
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

impl EventV3 {
    fn upgrade(self) -> Event {
        let attribution = Attribution::of_format_3(self.kind);
        Event {
            revision: self.revision,
            kind: self.kind,
            actor: self.actor.map(|h| Actor {
                name: h.name,
                client_id: h.client_id,
                principal: None,
            }),
            attribution,
            token: self.token,
            unix_ms: self.unix_ms,
            detail: self.detail,
        }
    }
}

impl LeaseTableV3 {
    fn upgrade(self) -> LeaseTable {
        let cases = self.cases.into_iter().map(|(key, case)| {
            let case = *case;
            let history = History {
                events: case
                    .history
                    .events
                    .into_iter()
                    .map(EventV3::upgrade)
                    .collect(),
                dropped: case.history.dropped,
            };
            let upgraded = CaseFile {
                record: case.record,
                offer: case.offer,
                last_note: case.last_note,
                history,
                quarantine: case.quarantine,
            };
            (key.to_string(), upgraded)
        });
        LeaseTable::from_parts(
            self.leases.into_values().map(|l| *l),
            cases,
            self.quarantine_rules,
            self.sessions.into_iter().map(|(id, s)| (id, s.upgrade())),
        )
    }
}

impl SmStateV3 {
    pub(super) fn upgrade(self) -> SmState {
        SmState {
            table: self.table.upgrade(),
            revision: self.revision,
            last_applied: self.last_applied,
            membership: self.membership,
            access: self.access,
        }
    }
}

impl SmStateV2 {
    /// Format 2 is format 3 without a policy.
    pub(super) fn upgrade(self) -> SmState {
        SmStateV3 {
            table: self.table,
            revision: self.revision,
            last_applied: self.last_applied,
            membership: self.membership,
            access: AccessState::default(),
        }
        .upgrade()
    }
}

#[derive(Deserialize)]
struct LogCommandV3 {
    request_id: Option<RequestId>,
    leader_unix_ms: u64,
    op: Op,
}

#[derive(Deserialize)]
struct ProposalV3 {
    commands: Vec<LogCommandV3>,
}

/// openraft's `EntryPayload` with format 3's proposal.
#[derive(Deserialize)]
enum PayloadV3 {
    Blank,
    Normal(ProposalV3),
    Membership(openraft::Membership<NodeId, Node>),
}

/// openraft's `Entry` with format 3's proposal.
#[derive(Deserialize)]
pub(super) struct EntryV3 {
    log_id: LogId,
    payload: PayloadV3,
}

impl EntryV3 {
    pub(super) fn upgrade(self) -> Entry {
        let payload = match self.payload {
            PayloadV3::Blank => openraft::EntryPayload::Blank,
            PayloadV3::Membership(m) => openraft::EntryPayload::Membership(m),
            PayloadV3::Normal(p) => openraft::EntryPayload::Normal(Proposal {
                commands: p
                    .commands
                    .into_iter()
                    .map(|c| LogCommand {
                        request_id: c.request_id,
                        leader_unix_ms: c.leader_unix_ms,
                        op: c.op,
                        sender: None,
                    })
                    .collect(),
            }),
        };
        Entry {
            log_id: self.log_id,
            payload,
        }
    }
}

/// openraft's `AppendEntriesRequest` as a format-3 peer sends it.
#[derive(Deserialize)]
struct AppendEntriesV3 {
    vote: Vote,
    prev_log_id: Option<LogId>,
    entries: Vec<EntryV3>,
    leader_commit: Option<LogId>,
}

/// What a format-4 node puts before an append-entries or install-snapshot message (the
/// `RaftRequest` then says `data_format` 4). A format-3 node ignores that field and reads the
/// message as it always did, beginning with a vote: these bytes are a vote whose `committed`
/// flag is 0xFF, which bincode refuses. So a format-3 node refuses format-4 entries and
/// snapshots (and falls behind until it is upgraded) instead of misreading them: it would
/// read a format-4 command without its sender, and the sender's bytes as the leader's commit
/// index.
pub const FORMAT_4_GUARD: [u8; 17] = [0xFF; 17];

/// `payload` behind [`FORMAT_4_GUARD`].
pub fn guard(payload: Vec<u8>) -> Vec<u8> {
    let mut guarded = Vec::with_capacity(FORMAT_4_GUARD.len() + payload.len());
    guarded.extend_from_slice(&FORMAT_4_GUARD);
    guarded.extend(payload);
    guarded
}

/// The message behind [`FORMAT_4_GUARD`]; `None` if it is not there.
pub fn unguard(bytes: &[u8]) -> Option<&[u8]> {
    bytes.strip_prefix(&FORMAT_4_GUARD[..])
}

/// Decodes a format-3 peer's append-entries message as today's.
pub fn append_entries(
    bytes: &[u8],
) -> Result<openraft::raft::AppendEntriesRequest<crate::raft_types::TypeConfig>, bincode::Error> {
    let old: AppendEntriesV3 = super::decode(bytes)?;
    Ok(openraft::raft::AppendEntriesRequest {
        vote: old.vote,
        prev_log_id: old.prev_log_id,
        entries: old.entries.into_iter().map(EntryV3::upgrade).collect(),
        leader_commit: old.leader_commit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Sender;

    /// A format-4 append-entries message: one entry of one command with a sender.
    fn format_4_append() -> openraft::raft::AppendEntriesRequest<crate::raft_types::TypeConfig> {
        use openraft::testing::log_id;
        let cmd = LogCommand {
            request_id: Some(RequestId {
                client_id: "retries".into(),
                seq: 1,
            }),
            leader_unix_ms: 1,
            op: Op::Renew {
                key: "tasks/k".into(),
                token: 1,
            },
            sender: Some(Sender {
                client_id: "bob-proc".into(),
                principal: None,
            }),
        };
        openraft::raft::AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(3, 1, 8)),
            entries: vec![Entry {
                log_id: log_id(3, 1, 9),
                payload: openraft::EntryPayload::Normal(Proposal::one(cmd)),
            }],
            leader_commit: Some(log_id(3, 1, 8)),
        }
    }

    #[test]
    fn a_format_3_node_refuses_guarded_format_4_messages_instead_of_misreading_them() {
        let req = format_4_append();
        let bytes = super::super::encode(&req);
        // The danger: format 3's decoder (bincode's default, trailing bytes allowed) reads the
        // format-4 message without complaint, the command without its sender, and the
        // sender's bytes as the leader's commit index.
        let misread: AppendEntriesV3 = bincode::deserialize(&bytes).unwrap();
        assert_ne!(misread.leader_commit, req.leader_commit);
        // Guarded, it refuses it (the guard is a vote whose flag is no bool) ...
        let guarded = guard(bytes.clone());
        assert!(bincode::deserialize::<AppendEntriesV3>(&guarded).is_err());
        let snapshot = openraft::raft::InstallSnapshotRequest::<crate::raft_types::TypeConfig> {
            vote: Vote::new_committed(3, 1),
            meta: Default::default(),
            offset: 0,
            data: vec![1, 2, 3],
            done: true,
        };
        let guarded_snapshot = guard(super::super::encode(&snapshot));
        assert!(bincode::deserialize::<
            openraft::raft::InstallSnapshotRequest<crate::raft_types::TypeConfig>,
        >(&guarded_snapshot)
        .is_err());
        // ... and a format-4 node reads it whole.
        let read: openraft::raft::AppendEntriesRequest<crate::raft_types::TypeConfig> =
            super::super::decode(unguard(&guarded).unwrap()).unwrap();
        assert_eq!(super::super::encode(&read), bytes);
        assert!(
            unguard(&bytes).is_none(),
            "an unguarded message is told apart"
        );
    }
}
