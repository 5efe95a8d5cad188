//! baton-client: the Rust library agents use to claim, renew and release ownership tokens
//! on a baton cluster. The `baton` CLI built on it is the `baton-cli` crate (`cli/`); the
//! `baton bench` workload is `baton-workload` (`bench/workload/`).
//!
//! ```no_run
//! # async fn example() -> Result<(), baton_client::Error> {
//! use std::time::Duration;
//! use baton_client::{ClaimOutcome, Client, ClientConfig};
//!
//! let client = Client::connect(ClientConfig::with_endpoints(["127.0.0.1:7001"])).await?;
//! match client.claim("tasks/evidence-42", "claude@host-a", Duration::from_secs(30)).await? {
//!     ClaimOutcome::Granted(grant) => {
//!         // Work until grant.safe_deadline, renewing before it; pass grant.lease.token to
//!         // every resource that checks fencing tokens.
//!     }
//!     ClaimOutcome::Held { lease, .. } => {
//!         // Someone else owns the task: stand down.
//!         println!("held by {} (token {})", lease.holder_name, lease.token);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! A [`LeaseGuard`] renews in the background and says when the lease is lost:
//!
//! ```no_run
//! # async fn example(client: baton_client::Client) -> Result<(), baton_client::Error> {
//! use std::time::Duration;
//! use baton_client::GuardedClaim;
//!
//! let ttl = Duration::from_secs(30);
//! let timeout = Duration::from_secs(60);
//! match client.claim_wait_guarded("tasks/evidence-42", "claude@host-a", ttl, timeout).await? {
//!     GuardedClaim::Granted(guard) => {
//!         tokio::select! {
//!             reason = guard.lost() => eprintln!("lost {}: {reason}; stopping", guard.key()),
//!             () = async { /* the work, passing guard.token() to every write */ } => {
//!                 guard.release().await?;
//!             }
//!         }
//!     }
//!     GuardedClaim::Held { lease, .. } => println!("held by {}", lease.holder_name),
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`config`]: [`ClientConfig`], validated into [`config::ValidConfig`]; endpoint syntax.
//! - [`client`]: [`Client`], the operations, leader cache, endpoint rotation and retries.
//! - [`guard`]: [`LeaseGuard`], a lease renewed in the background with its safe deadline
//!   and a `lost()` signal ([`Client::claim_guarded`]); [`Client::claim_wait`], which waits
//!   for a held key with jittered backoff.
//! - `retry`: which failures are retried and the backoff between attempts (pure).
//! - [`types`]: the client's own lease and outcome types, serialisable for scripts.
//! - [`record`]: a key's record (its case file), written only with the current token
//!   ([`Client::update`]); assignments ([`Client::assign`]) that reserve nothing.
//! - [`tasks`]: the task board: [`Client::post`] puts a task up, [`Client::claim_next`]
//!   takes the next claimable one under a prefix in one log entry ([`NextOutcome`]).
//! - [`history`]: a key's events ([`Client::history`]) and the ownership stints read out
//!   of them ([`History::stints`], pure).
//! - [`handoff`]: offer, accept, decline, cancel; the status note with its volatile facts.
//! - [`watch`]: [`Client::watch`], every event of a key prefix as a [`WatchStream`] that
//!   reconnects by itself and resumes without gap or repeat; [`Error::Compacted`] when the
//!   revision to resume from has left every node's window.
//! - `convert`: the one place that reads generated protobuf types.
//! - [`error`]: [`Error`], typed from gRPC statuses; [`Error::Refused`] with a [`Refusal`]
//!   (its reason and facts, read from the status details) for refusals that are not an
//!   operation's own outcome (stale token, another session's write, frozen record, not the
//!   addressee).
//!
//! # Data path
//! A call builds the protobuf request once (with a fresh `RequestId` if it mutates, naming
//! this client's id as the session it acts as), then
//! [`Client`] sends clones of it: to the leader if a node named one in `x-baton-leader`,
//! else to the current endpoint of the rotation. `UNAVAILABLE`, connection failures and
//! timeouts are retried with jittered exponential backoff (50 ms to 1 s) until the retry
//! deadline; the cluster de-duplicates repeated request ids, so a retried write is applied
//! once. The reply is converted into [`types`] and, for a grant, stamped with its safe
//! deadline counted from the first attempt's send time.
//!
//! The `baton` binary (`cli/`) is a thin edge over this library.

pub mod client;
pub mod config;
mod convert;
pub mod endings;
pub mod error;
#[cfg(any(test, feature = "fake-node"))]
pub mod fake_node;
mod following;
pub mod guard;
pub mod handoff;
pub mod history;
pub mod lines;
pub mod note;
pub mod observe;
pub mod record;
mod retry;
pub mod sets;
pub mod tasks;
pub mod types;
pub mod watch;

/// The most permits one key may have ([`Client::claim_permit`]), and the permits the
/// cluster holds at most in all.
pub use baton_proto::limits::{PERMITS_MAX, PERMIT_HOLDERS_MAX, SHARED_HOLDERS_MAX};
pub use client::Client;
pub use client::GuardedSet;
pub use config::{
    normalize_endpoint, BearerToken, ClientConfig, ClientTls, ValidConfig, DEFAULT_ENDPOINT,
};
pub use endings::{EndedHow, Ending};
pub use error::{Error, Refusal, RefusalReason};
pub use guard::{GuardedClaim, GuardedNext, LeaseGuard, LossReason};
pub use handoff::{Accepted, HandoffNote, OfferView, VolatileFact};
pub use history::{Event, History, Stint};
pub use lines::{InLine, KeyLine, LineOutcome, WaiterInfo, WAITERS_PER_KEY_MAX};
pub use record::{Assigned, QuarantineView, Record, RecordPatch, RecordView};
pub use sets::{BlockedKey, SetOutcome, CLAIM_SET_KEYS_MAX};
pub use tasks::{NextFilter, NextOutcome, Posted, Unclaimable};
pub use types::{
    safe_deadline, AccessChange, AccessView, ActorInfo, AssignmentInfo, Board, ClaimOutcome,
    ClusterStatus, Grant, HolderInfo, KeyHolders, LeaseInfo, Member, Membership, Probe, ReadMode,
    ReleaseOutcome, RenewOutcome, Revoked, Sharing, SnapshotTaken, TokenCheck,
};
pub use watch::{ResumePoint, WatchStream};
