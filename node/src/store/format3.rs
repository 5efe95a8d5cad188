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
        let attribution = match self.actor {
            Some(_) => Attribution::RecordedBeforeFormat4,
            // The leader's own events credit no one, in every format.
            None => Attribution::Requester,
        };
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
    pub(super) fn upgrade(self) -> SmState {
        SmState {
            table: self.table.upgrade(),
            revision: self.revision,
            last_applied: self.last_applied,
            membership: self.membership,
            access: AccessState::default(),
        }
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
