//! baton-node: a Raft-replicated store of ownership tokens.
//!
//! Layout:
//! - `core`    the pure lease state machine (no I/O, no clock);
//! - `store`   openraft log store (segment files) and state machine (snapshots), fsync'd;
//! - `expiry`  per-node lease countdowns and the leader's `Expire` proposals;
//! - `network` the Raft transport over tonic;
//! - `server`  the gRPC services (Baton, Cluster, Raft) and request forwarding;
//! - `config`  node configuration, validated as one;
//! - `node`    wiring: open storage, start Raft, serve, shut down;
//! - `backup`  backup files and seeding a new cluster from one;
//! - `peers`   the guard against a wiped node rejoining under its old id;
//! - `limits`  the node's own limits (queues, timeouts, sizes), named in one place (a leaf);
//! - `admission` connection, watch and write-rate limits per client;
//! - `tls`     TLS on the gRPC port, and `baton-node certs`;
//! - `tokens`  bearer tokens (a file of hashes, reloaded on SIGHUP), and `baton-node token`;
//! - `admin`   the HTTP admin port (health, readiness, Prometheus metrics);
//! - `metrics` the Prometheus registry everything records into (a leaf);
//! - `durable` files written whole or not at all (a leaf).
//!
//! Data path of a claim: `server::baton` takes the request (`server::auth` checks who asks),
//! `server::convert` validates it into a `core::Op` from its `Origin` (request id and
//! session), and a follower forwards it to the leader; `server::proposer` batches
//! concurrent commands into one `core::Proposal` per `Raft::client_write`; openraft appends
//! it to its log (fsync'd) and replicates it; once committed,
//! `store::StateMachine::apply` runs `core::LeaseTable::apply` for each command with the
//! next revision (the fencing token of a grant), carries out the `core::Effect`s it reports
//! (the lease's countdown in `expiry::Countdowns`) and publishes its events to `watch`; the
//! handler turns the `core::Outcome` (a `core::Refusal` through
//! `server::convert::refusal_status`) into the gRPC answer.
//!
//! Imports run one way (core <- store <- server <- node): `tests/layout.rs` checks that no
//! source file is in an import cycle.

pub mod admin;
pub mod admission;
pub mod backup;
pub mod chaos;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
pub mod dev;
pub mod durable;
pub mod endings;
pub mod expiry;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod limits;
pub mod metrics;
pub mod network;
pub mod node;
pub mod peers;
pub mod raft_types;
pub mod server;
pub mod store;
pub mod tls;
pub mod tokens;
pub mod watch;
