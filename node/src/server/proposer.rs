//! Batches concurrent commands into one Raft log entry.
//!
//! openraft 0.9 appends each `client_write` as its own entry; unpatched, it also waited for
//! that append's fsync before taking the next, so one entry per request capped a leader at one
//! request per fsync (baton's patch, `vendor/README.md`, lets the leader go on meanwhile, but
//! every entry still costs a flush round and a replication message). The proposer keeps at
//! most `PROPOSALS_IN_FLIGHT_MAX` entries in flight; commands
//! that arrive meanwhile wait and go together in the next entry (up to
//! `PROPOSAL_COMMANDS_MAX` commands or `PROPOSAL_BYTES_MAX` bytes). An idle leader proposes a
//! lone command at once, so batching adds no wait when there is nothing to batch.
//!
//! Semantics are unchanged: the commands of an entry are applied in order, each at its own
//! revision, exactly as if they had been proposed one after another.
//!
//! The queue of waiting commands is bounded (`PROPOSALS_QUEUED_MAX`): past it a write is
//! refused at once (`ProposeError::Busy`, RESOURCE_EXHAUSTED) instead of waiting in memory
//! without bound behind a slow disk or quorum.
//!
//! Linearizable reads queue here too (`Proposer::read_barrier`) and ride the next entry: a
//! read is answered once an entry proposed after it arrived has committed and applied on
//! this node. That commit is the read-index round, for free: a quorum accepted an append of
//! this leader's term after the read arrived, so no other leader had committed anything by
//! then, and everything committed before the read arrived is at or below that entry, now
//! applied. A batch of reads alone (no write waiting) runs one `ensure_linearizable` round
//! (heartbeats to a quorum) for all of them. Without this, every refusal answered from a read
//! paid a heartbeat round of its own beside the writes, and 64 clients claiming 4
//! held keys spent the CPU the holders' writes needed.

use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::format_gate::{FormatGate, FormatPending};
use crate::core::limits::{
    PROPOSALS_IN_FLIGHT_MAX, PROPOSALS_QUEUED_MAX, PROPOSAL_BYTES_MAX, PROPOSAL_COMMANDS_MAX,
};
use crate::metrics::Metrics;

use crate::core::{Applied, LogCommand, Proposal};
use crate::limits::UNANSWERED_WRITE_GRACE;
use crate::raft_types::{Node, NodeId, Raft, TypeConfig};

type WriteResult = Result<
    openraft::raft::ClientWriteResponse<TypeConfig>,
    RaftError<NodeId, ClientWriteError<NodeId, Node>>,
>;

/// Why a proposal was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposeError {
    /// This node is not the leader; the leader's address if known.
    NotLeader(Option<String>),
    /// Raft could not commit it (shutting down, storage error, ...).
    Failed(String),
    /// `PROPOSALS_QUEUED_MAX` commands are already waiting: refused, nothing proposed.
    Busy,
    /// A read's round did not hear from a quorum (a blip, openraft #1852): retry.
    QuorumShort(String),
    /// The command needs a data format some members were not heard to read: refused,
    /// nothing proposed (`super::format_gate`).
    FormatPending(FormatPending),
}

enum Pending {
    Write {
        cmd: Box<LogCommand>,
        bytes: usize,
        reply: oneshot::Sender<Result<Applied, ProposeError>>,
    },
    /// A linearizable read waiting for the next entry's commit (or round).
    Read(oneshot::Sender<Result<(), ProposeError>>),
}

/// Handle to the batching task. Cheap to clone; the task ends when every handle is dropped.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Pending>,
}

impl Proposer {
    /// Starts the batching task on the current tokio runtime; every entry it makes passes
    /// `gate` first.
    pub fn start(raft: Raft, metrics: Arc<Metrics>, gate: FormatGate) -> Proposer {
        let (tx, rx) = mpsc::channel(PROPOSALS_QUEUED_MAX);
        tokio::spawn(run(raft, rx, metrics, gate));
        Proposer { tx }
    }

    /// Proposes `cmd` and waits until it is applied (or failed).
    pub async fn propose(&self, cmd: LogCommand) -> Result<Applied, ProposeError> {
        let answer = self.enqueue(cmd)?;
        answer.await.map_err(|_| stopped())?
    }

    /// Waits until this node, as leader, has applied everything committed before the call:
    /// the next entry proposed after it commits (or, with no write waiting, one read-index
    /// round). Then a read of the local state is linearizable.
    pub async fn read_barrier(&self) -> Result<(), ProposeError> {
        let (reply, answer) = oneshot::channel();
        self.send(Pending::Read(reply))?;
        answer.await.map_err(|_| stopped())?
    }

    /// Queues `cmd` for the next entry, or refuses it when the queue is full.
    fn enqueue(
        &self,
        cmd: LogCommand,
    ) -> Result<oneshot::Receiver<Result<Applied, ProposeError>>, ProposeError> {
        let bytes = bincode::serialized_size(&cmd).unwrap_or(u64::MAX) as usize;
        let (reply, answer) = oneshot::channel();
        self.send(Pending::Write {
            cmd: Box::new(cmd),
            bytes,
            reply,
        })?;
        Ok(answer)
    }

    fn send(&self, pending: Pending) -> Result<(), ProposeError> {
        match self.tx.try_send(pending) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => Err(ProposeError::Busy),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(stopped()),
        }
    }
}

fn stopped() -> ProposeError {
    ProposeError::Failed("the node is shutting down".into())
}

/// Items with a size in bytes.
trait HasBytes {
    fn bytes(&self) -> usize;
}

impl HasBytes for Pending {
    fn bytes(&self) -> usize {
        match self {
            Pending::Write { bytes, .. } => *bytes,
            Pending::Read(_) => 0,
        }
    }
}

/// Takes `first` and then, while `next` has more, up to `PROPOSAL_COMMANDS_MAX` items and
/// `PROPOSAL_BYTES_MAX` bytes (`first` alone may be larger). Returns the batch and the item
/// that did not fit, if one was taken.
fn fill_batch<T: HasBytes>(first: T, mut next: impl FnMut() -> Option<T>) -> (Vec<T>, Option<T>) {
    let mut bytes = first.bytes();
    let mut batch = vec![first];
    while batch.len() < PROPOSAL_COMMANDS_MAX {
        match next() {
            Some(p) if bytes.saturating_add(p.bytes()) <= PROPOSAL_BYTES_MAX => {
                bytes += p.bytes();
                batch.push(p);
            }
            Some(p) => return (batch, Some(p)),
            None => break,
        }
    }
    (batch, None)
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<Pending>, metrics: Arc<Metrics>, gate: FormatGate) {
    let slots = Arc::new(Semaphore::new(PROPOSALS_IN_FLIGHT_MAX));
    let mut carried: Option<Pending> = None;
    loop {
        // Wait for a free slot first: while all are taken, commands pile up in the channel
        // and the next entry takes them together.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let (batch, rest) = fill_batch(first, || rx.try_recv().ok());
        carried = rest;
        let raft = raft.clone();
        let metrics = metrics.clone();
        let gate = gate.clone();
        tokio::spawn(async move {
            let (mut commands, mut replies, mut readers) = (Vec::new(), Vec::new(), Vec::new());
            for p in batch {
                match p {
                    Pending::Write { cmd, reply, .. } => {
                        commands.push(*cmd);
                        replies.push(reply);
                    }
                    Pending::Read(reply) => readers.push(reply),
                }
            }
            let readers = Readers(readers, metrics.clone());
            // The data-format gate, as the entry is made: a command some member cannot
            // decode is refused here, by the node that would append it.
            match gate.check(&commands) {
                Ok(pending) => {
                    let mut kept = (Vec::new(), Vec::new());
                    for ((cmd, reply), refused) in commands.into_iter().zip(replies).zip(pending) {
                        match refused {
                            Some(p) => drop(reply.send(Err(ProposeError::FormatPending(p)))),
                            None => {
                                kept.0.push(cmd);
                                kept.1.push(reply);
                            }
                        }
                    }
                    (commands, replies) = kept;
                }
                Err(leader) => {
                    let e = ProposeError::NotLeader(leader);
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                    readers.answer(Err(e));
                    drop(slot);
                    return;
                }
            }
            if commands.is_empty() {
                readers.answer(read_round(&raft, &metrics).await);
                drop(slot);
                return;
            }
            // The readers learn what the entry's write learns: applied, or why not.
            let n = commands.len();
            let started = std::time::Instant::now();
            let result = write_and_watch(&raft, Proposal { commands }, slot).await;
            metrics.proposals.inc();
            metrics.proposal_commands.observe(n as f64);
            metrics
                .proposal_seconds
                .observe(started.elapsed().as_secs_f64());
            let result = match result {
                Some(r) => r,
                None => {
                    metrics.proposals_unanswered.inc();
                    let e = ProposeError::Failed(
                        "this node lost the leadership before the write was answered; \
                         its outcome is unknown, retry with the same request id"
                            .into(),
                    );
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                    readers.answer(Err(e));
                    return;
                }
            };
            match result {
                Ok(resp) if resp.data.len() == n => {
                    for (reply, applied) in replies.into_iter().zip(resp.data) {
                        let _ = reply.send(Ok(applied));
                    }
                    readers.answer(Ok(()));
                }
                Ok(resp) => {
                    let e = ProposeError::Failed(format!(
                        "applied {} answers for {n} commands",
                        resp.data.len()
                    ));
                    tracing::error!(error = ?e, "proposal answer mismatch");
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                    readers.answer(Err(e));
                }
                Err(e) => {
                    let e = match e {
                        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                            ProposeError::NotLeader(f.leader_node.map(|n| n.addr))
                        }
                        e => ProposeError::Failed(e.to_string()),
                    };
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                    readers.answer(Err(e));
                }
            }
        });
    }
}

/// The reads that ride an entry.
struct Readers(Vec<oneshot::Sender<Result<(), ProposeError>>>, Arc<Metrics>);

impl Readers {
    fn answer(self, result: Result<(), ProposeError>) {
        if result.is_ok() {
            self.1.linearizable_reads.inc_by(self.0.len() as u64);
        }
        for reader in self.0 {
            let _ = reader.send(result.clone());
        }
    }
}

/// One read-index round for a batch of reads with no write to ride.
async fn read_round(raft: &Raft, metrics: &Metrics) -> Result<(), ProposeError> {
    metrics.read_rounds.inc();
    match raft.ensure_linearizable().await {
        Ok(_) => Ok(()),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            Err(ProposeError::NotLeader(f.leader_node.map(|n| n.addr)))
        }
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(e))) => {
            Err(ProposeError::QuorumShort(e.to_string()))
        }
        Err(e) => Err(ProposeError::Failed(e.to_string())),
    }
}

/// `client_write` of one entry, watched for the case openraft 0.9 never answers.
///
/// A leader that is deposed with entries it appended but could not commit normally learns
/// their fate: the new leader's log either keeps them (they apply here and are answered) or
/// conflicts with them (they are truncated and answered "forward to leader"). But when the new
/// leader has purged its log past the point where the two diverge, it sends a snapshot, and
/// installing a snapshot purges the old entries without truncating them: their callers would
/// wait forever, and this entry's proposer slot with them (a node whose slots are all held
/// takes no writes at all, even after it is elected again).
///
/// So the slot is freed as soon as the node stops leading the term the write began in: later
/// entries belong to another term and must not queue behind this one. And once this node has
/// applied everything its log held when it stopped leading, plus a grace for the truncation
/// answers openraft sends from a task of their own, a write still unanswered never will be:
/// `None`, an outcome unknown.
async fn write_and_watch(
    raft: &Raft,
    proposal: Proposal,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Option<WriteResult> {
    let mut watch = raft.metrics();
    let term = watch.borrow().current_term;
    let write = raft.client_write(proposal);
    tokio::pin!(write);
    let mut slot = Some(slot);
    // The last index of this node's log when it was first seen not leading.
    let mut horizon: Option<u64> = None;
    loop {
        tokio::select! {
            biased;
            result = &mut write => return Some(result),
            changed = watch.changed() => {
                if changed.is_err() {
                    // Raft has shut down; the write ends with it.
                    return Some(write.await);
                }
                let m = watch.borrow_and_update();
                // A leader that removed itself keeps its vote (and `current_leader`) but is
                // no longer in the Leader state.
                let leading = m.state == openraft::ServerState::Leader
                    && m.current_leader == Some(m.id)
                    && m.current_term == term;
                if !leading {
                    slot = None;
                    // The lowest end of the log seen since: a truncation lowers it (and
                    // answers the truncated writes), and no write of ours lies above it.
                    let end = m.last_log_index.unwrap_or(0);
                    horizon = Some(horizon.map_or(end, |h| h.min(end)));
                }
                let applied = m.last_applied.map_or(0, |l| l.index);
                if horizon.is_some_and(|h| applied >= h) {
                    break;
                }
            }
        }
    }
    drop(slot);
    tokio::time::timeout(UNANSWERED_WRITE_GRACE, write)
        .await
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    impl HasBytes for usize {
        fn bytes(&self) -> usize {
            *self
        }
    }

    #[test]
    fn past_the_queue_limit_a_write_is_refused_at_once_and_nothing_is_queued() {
        // A proposer whose batching task takes nothing (a leader stuck on its disk).
        let (tx, mut rx) = mpsc::channel(PROPOSALS_QUEUED_MAX);
        let proposer = Proposer { tx };
        let cmd = |seq: u64| LogCommand {
            request_id: Some(crate::core::RequestId {
                client_id: "c".into(),
                seq,
            }),
            leader_unix_ms: 0,
            op: crate::core::Op::Renew {
                key: "k".into(),
                token: 1,
            },
            sender: None,
        };
        let mut answers = Vec::new();
        for seq in 1..=PROPOSALS_QUEUED_MAX as u64 {
            answers.push(proposer.enqueue(cmd(seq)).expect("room in the queue"));
        }
        assert_eq!(
            proposer.enqueue(cmd(0)).err(),
            Some(ProposeError::Busy),
            "the one past PROPOSALS_QUEUED_MAX"
        );
        // Exactly the queued ones wait; once one is taken, there is room again.
        let mut queued = 0;
        while rx.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, PROPOSALS_QUEUED_MAX);
        assert!(proposer.enqueue(cmd(1)).is_ok());
    }

    fn fill(first: usize, rest: &[usize]) -> (Vec<usize>, Option<usize>, usize) {
        let mut queue = rest.iter().copied();
        let (batch, carried) = fill_batch(first, || queue.next());
        (batch, carried, queue.count())
    }

    #[test]
    fn a_batch_takes_what_is_queued_up_to_the_command_limit() {
        let (batch, carried, left) = fill(10, &[10; 3]);
        assert_eq!((batch.len(), carried, left), (4, None, 0));
        let (batch, carried, left) = fill(1, &vec![1; PROPOSAL_COMMANDS_MAX + 5]);
        assert_eq!(batch.len(), PROPOSAL_COMMANDS_MAX);
        assert_eq!((carried, left), (None, 6), "the rest stays queued");
    }

    #[test]
    fn a_batch_stops_before_the_byte_limit_and_carries_the_item_that_did_not_fit() {
        let half = PROPOSAL_BYTES_MAX / 2;
        let (batch, carried, left) = fill(half, &[half, 1, 7]);
        assert_eq!(batch, vec![half, half], "exactly at the limit fits");
        assert_eq!((carried, left), (Some(1), 1));
        // A command larger than the limit on its own still goes, alone.
        let (batch, carried, _) = fill(PROPOSAL_BYTES_MAX * 2, &[1]);
        assert_eq!((batch, carried), (vec![PROPOSAL_BYTES_MAX * 2], Some(1)));
    }
}
