//! The gRPC edge: services `Baton` (lease operations), `Cluster` (status) and `Raft`
//! (internal), served on one listener that the caller binds, until the caller's shutdown
//! signal resolves.

pub mod auth;
pub mod baton;
mod claims_in_flight;
pub mod cluster;
pub mod convert;
mod endings_stream;
mod format_gate;
mod forward;
mod precheck;
pub mod proposer;
pub mod raft;
mod read_answers;
mod service;
pub mod transport;
mod watch_stream;

#[cfg(test)]
mod fuzz_tests;
