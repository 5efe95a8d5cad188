//! The gRPC edge: services `Baton` (lease operations), `Cluster` (status) and `Raft`
//! (internal), served on one listener that the caller binds, until the caller's shutdown
//! signal resolves.

pub mod auth;
pub mod baton;
pub mod cluster;
pub mod convert;
pub mod proposer;
pub mod raft;
pub mod transport;

#[cfg(test)]
mod fuzz_tests;
