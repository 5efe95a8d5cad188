//! baton's chaos harness (`baton-jepsen`): starts a real baton cluster whose nodes are
//! separate processes in their own network namespaces, drives concurrent clients, injects
//! faults (kill -9, SIGSTOP, partitions, Raft-link delay, clock-rate skew, wall-clock
//! offsets), records every operation on one monotonic clock, and checks the history.
//!
//! - `history`  the history format (JSON lines) and the checkers' result types;
//! - `check`    linearizability (lease-aware WGL), tokens, believed-held intervals, fencing,
//!   list integrity;
//! - `report`   the per-run HTML report;
//! - `net`      test hosts (network namespaces, veth, bridge) and iptables partitions;
//! - `cluster`  the node processes (kill -9, SIGSTOP, restart, chaos control files);
//! - `workload` the workers and the history recorder;
//! - `nemesis`  faults and their schedule;
//! - `powerfs`  a FUSE filesystem that forgets unsynced writes on a power cut, and can fail
//!   every sync with EIO (the `power` and `eio` faults, and `tests/power_cut.rs`);
//! - `sickdisk` a damaged log and a failing disk on one node, and the checks of how the node
//!   copes;
//! - `copies`   a claim proxy that delays first attempts and sends copies of them, and
//!   records every answer on the wire;
//! - `run`      one scenario end to end; `suite` the CI and long suites.

pub mod check;
pub mod cluster;
pub mod copies;
pub mod history;
pub mod nemesis;
pub mod net;
pub mod powerfs;
pub mod report;
pub mod run;
pub mod sickdisk;
pub mod suite;
pub mod workload;
