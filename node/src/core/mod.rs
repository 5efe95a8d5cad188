//! The lease core: pure, deterministic, no I/O, no clock, no tokio.
//!
//! Layout:
//! - `ids`      who and what commands name: holders, sessions, request ids, tokens (a leaf);
//! - `lease`    a live lease;
//! - `case`     a key's case file: record, offer, note, history;
//! - `access`   permissions: the policy, its checks, its replicated state and audit trail;
//! - `limits`   every named limit;
//! - `line`     waiting in a key's line: waiters and where one stands;
//! - `permits`  keys up to N hold at once, each holder with its own lease and token;
//! - `refusal`  why a request was refused, with its facts;
//! - `types`    log commands (`LogCommand`, `Op`) and their `Outcome`s;
//! - `validate` input rules shared with the gRPC edge;
//! - `table`    `LeaseTable::apply(index, command) -> Outcome`: de-duplication, invariants;
//!   `table/step.rs` holds one `Step` per operation, where the rules live.
//!
//! Data path: a gRPC handler validates a request and hands a `LogCommand` (with its
//! `Sender`: session and principal) to the proposer, which batches concurrent commands into
//! one `Proposal` per Raft log entry; once the entry commits, every node's state machine
//! calls `LeaseTable::apply` for each command with the next revision (which becomes the
//! fencing token of a grant). Each `Step` changes the table and reports, in `Changes`, the
//! events it appended and the countdowns it starts or stops (`Effect`); the adapter carries
//! those out, and the leader returns the `Outcome` (or `Refusal`) to the client.

pub mod access;
pub mod case;
mod fingerprint;
mod format_3;
pub mod formats;
pub mod ids;
pub mod lease;
pub mod limits;
pub mod line;
pub mod permits;
pub mod refusal;
pub mod table;
pub mod types;
pub mod validate;

#[cfg(test)]
mod case_tests;
#[cfg(test)]
mod line_tests;
#[cfg(test)]
mod permit_tests;
#[cfg(test)]
mod queue_tests;
#[cfg(test)]
mod retry_tests;
#[cfg(any(test, feature = "fuzzing"))]
pub mod sequences;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod set_tests;
#[cfg(test)]
mod tests;

pub use case::{
    Assignment, Attribution, CaseFile, Event, EventKind, HandoffNote, History, Offer, Quarantine,
    Record, RecordPatch, VolatileFact,
};
pub use line::{InLine, Waiter};
pub use permits::{Holders, Sharing};
pub use refusal::Refusal;
pub use table::{Changes, ClientSession, Effect, Ending, LeaseTable, Timer};
pub use types::{
    Actor, Applied, Blocked, FencingToken, Grant, Holder, Lease, LogCommand, Name, Op, Outcome,
    Proposal, RequestId, Sender, Unclaimable,
};
