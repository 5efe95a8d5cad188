//! The data-format gate, where a command enters the log: the proposer asks it of every entry
//! it makes (`super::proposer`), so a command newer than some member reads is never appended,
//! whichever node received the request and however leadership moved meanwhile. (A node that
//! became leader between an edge's check and its append once appended a newer command
//! unchecked; older members cannot decode it, and if they are a majority writes stop.)
//!
//! What each command needs is `Op::newer_format` (`core::formats`); what each member reads is
//! what it said to this leader (`crate::peers::PeerBook`).

use std::collections::BTreeSet;
use std::sync::Arc;

use baton_proto::v1 as pb;
use tonic::Status;

use crate::core::LogCommand;
use crate::peers::PeerBook;
use crate::raft_types::{NodeId, Raft};

const _: () = assert!(crate::core::formats::UNFINISHED_WALK_FORMAT <= crate::store::DATA_FORMAT);

/// A command refused because some members were not heard to read its data format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatPending {
    /// The data format the command needs.
    pub format: u32,
    /// What the command does, in words.
    pub what: &'static str,
    /// The members short of it, each with the format it said (0: none yet).
    pub short: Vec<(NodeId, u32)>,
}

/// What the leader knows of its members' data formats.
#[derive(Clone)]
pub struct FormatGate {
    raft: Raft,
    peers: Arc<PeerBook>,
}

impl FormatGate {
    pub fn new(raft: Raft, peers: Arc<PeerBook>) -> FormatGate {
        FormatGate { raft, peers }
    }

    /// The members this leader has not heard say they read data format `format`, with the
    /// format each said (0: none yet). `Err` with the leader's address, if known, on a node
    /// that does not lead: only the leader knows what its peers said.
    pub fn short_of(&self, format: u32) -> Result<Vec<(NodeId, u32)>, Option<String>> {
        let (me, members) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            let membership = m.membership_config.membership();
            if m.current_leader != Some(m.id) {
                let leader = m.current_leader.and_then(|id| membership.get_node(&id));
                return Err(leader.map(|n| n.addr.clone()));
            }
            let members: BTreeSet<_> = membership.nodes().map(|(id, _)| *id).collect();
            (m.id, members)
        };
        Ok(self.peers.short_of_format(me, &members, format))
    }

    /// For each of `commands`, `Some` if it needs a data format a member was not heard to
    /// read (it must not be appended). Commands of data format 4 need no check; a batch with
    /// a newer one is checked only by a leader (`Err` with the leader's address, if known,
    /// elsewhere: no entry is made).
    pub fn check(
        &self,
        commands: &[LogCommand],
    ) -> Result<Vec<Option<FormatPending>>, Option<String>> {
        // What the members lack, asked once per format the batch needs (a batch of up to
        // `PROPOSAL_COMMANDS_MAX` commands needs a few formats at most): each ask reads the
        // metrics and collects the membership.
        let mut asked: Vec<(u32, Vec<(NodeId, u32)>)> = Vec::new();
        let mut answers = Vec::with_capacity(commands.len());
        for cmd in commands {
            let Some((format, what)) = cmd.op.newer_format() else {
                answers.push(None);
                continue;
            };
            let short = match asked.iter().find(|(f, _)| *f == format) {
                Some((_, short)) => short.clone(),
                None => {
                    let short = self.short_of(format)?;
                    asked.push((format, short.clone()));
                    short
                }
            };
            answers.push((!short.is_empty()).then_some(FormatPending {
                format,
                what,
                short,
            }));
        }
        Ok(answers)
    }
}

/// The refusal of a command whose data format some members were not heard to read:
/// FAILED_PRECONDITION with the facts (reason `format_pending`, the format, the nodes).
pub fn pending_status(p: &FormatPending) -> Status {
    let nodes: Vec<String> = p
        .short
        .iter()
        .map(|(id, said)| match said {
            0 => format!("node {id} (format 4 or older, or not heard from yet)"),
            f => format!("node {id} (format {f})"),
        })
        .collect();
    let message = format!(
        "{} needs data format {} on every member, and this leader has not heard it from {}: \
         finish upgrading every node to this version (RUNBOOK, \"Upgrading\"), and retry once \
         each answers; nothing was changed",
        p.what,
        p.format,
        nodes.join(", ")
    );
    let details = pb::Refusal {
        reason: "format_pending".into(),
        data_format: p.format,
        nodes: p.short.iter().map(|(id, _)| *id).collect(),
        message: message.clone(),
        ..pb::Refusal::default()
    };
    Status::with_details(
        tonic::Code::FailedPrecondition,
        message,
        prost::Message::encode_to_vec(&details).into(),
    )
}
