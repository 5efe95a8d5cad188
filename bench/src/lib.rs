//! baton-bench: the `baton bench` workload against etcd 3.4, and `baton-compare`, which
//! runs it against a fresh 3-node baton cluster and a fresh 3-node etcd cluster side by side.
//!
//! - [`etcd`]: the etcd claimant loop (LeaseGrant + Txn / KeepAlive / Txn + LeaseRevoke),
//!   reporting a [`baton_workload::BenchReport`] measured exactly like `baton bench`.
//! - [`cli`]: finding `baton-node`, running a program's work until it ends or Ctrl-C.
//! - [`cluster`]: starting and stopping local etcd and baton-node processes, their CPU time.
//! - [`table`]: medians over runs and the baton/etcd ratio table (pure).
//! - [`floor`]: the disk's serial fsync latency and a loopback TCP round trip.
//! - [`metrics`]: the nodes' flush counters from their admin ports, for where a write's time
//!   goes.
//! - [`scale`]: a fresh baton cluster holding N leases at once: memory per lease, renew
//!   throughput, snapshot size and time, a restarted follower's catch-up (`baton-scale`).
//! - [`endings`]: S sessions holding L leases under guards; from a revoke to the holder's
//!   `lost()`, and the leader's memory per session (`baton-scale --endings`).
//! - [`expiry`]: N leases never renewed: how long after the last came due all were freed,
//!   and the log entries their expiries took (`baton-scale --expiry-leases`).
//! - [`tasks`]: T tasks posted, C agents take them with `claim-next` until none is left:
//!   tasks/s and duplicates (`baton-scale --tasks`).
//! - [`lines`]: C clients take turns on K keys waiting in line: baton's own line against
//!   etcd's `concurrency.Mutex` recipe; cycles/s, hand-on latency (`baton-line`).
//! - [`pb`]: the hand-written subset of etcd's v3 gRPC API (`proto/`).

pub mod cli;
pub mod cluster;
pub mod endings;
pub mod etcd;
pub mod expiry;
pub mod floor;
pub mod lines;
pub mod metrics;
pub mod scale;
pub mod table;
pub mod tasks;
pub mod watchers;

/// Code generated from `proto/etcd.proto` and `proto/kv.proto`.
pub mod pb {
    #![allow(clippy::all, clippy::pedantic)]
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}
