//! This node's metrics: the Prometheus registry and what records into it. Counters and
//! histograms are recorded where the work happens (proposer, state machine apply, log flush,
//! gRPC handlers); gauges of Raft state and of the table are set at scrape time by
//! [`Metrics::render`], which the admin port (`crate::admin`) serves. A leaf: it depends on
//! no part of the node, so everything may record into it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Raft's own metrics, as openraft publishes them.
pub type RaftMetrics = openraft::RaftMetrics<crate::raft_types::NodeId, crate::raft_types::Node>;

/// The table's sizes, read at scrape time.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableCounts {
    pub leases: u64,
    pub keys: u64,
    pub revision: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FollowerLabels {
    follower: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GrpcLabels {
    method: &'static str,
    code: &'static str,
}

/// The canonical name of a gRPC code, without allocating on every request.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "Ok",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClaimLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    kind: &'static str,
}

/// This node's metrics.
pub struct Metrics {
    registry: Registry,
    term: Gauge,
    leader_id: Gauge,
    is_leader: Gauge,
    last_log_index: Gauge,
    applied_index: Gauge,
    snapshot_index: Gauge,
    replication_lag: Family<FollowerLabels, Gauge>,
    leases_held: Gauge,
    keys: Gauge,
    revision: Gauge,
    /// Log entries the proposer wrote.
    pub proposals: Counter,
    /// Entries this node proposed as leader and lost the leadership before learning their
    /// outcome (their callers were told "unknown, retry").
    pub proposals_unanswered: Counter,
    /// Commands per proposed entry.
    pub proposal_commands: Histogram,
    /// From proposing an entry to its commands' answers.
    pub proposal_seconds: Histogram,
    /// One state machine apply call (a run of committed entries).
    pub apply_seconds: Histogram,
    /// One group-commit round: the segments' fdatasync and its bookkeeping.
    pub flush_seconds: Histogram,
    /// The fdatasync of the log segments alone, within a round.
    pub fsync_seconds: Histogram,
    /// Watch streams open on this node.
    pub watch_streams: Gauge,
    /// Endings streams (one per client session) open on this node.
    pub endings_streams: Gauge,
    /// Connections closed at once because the node had `connections_max` open.
    pub connections_refused: Counter,
    /// Requests refused by a per-client limit (watches per address, writes per second).
    pub requests_limited: Counter,
    /// Writes refused from a linearizable read on the leader, with no log entry (a claim of
    /// a held key, a renew, release or update with a dead token).
    pub refused_without_log: Counter,
    /// Linearizable reads this node confirmed as leader (each rode a log entry proposed after
    /// it arrived, or shared a read-index round).
    pub linearizable_reads: Counter,
    /// Read-index rounds this node ran: concurrent reads share one.
    pub read_rounds: Counter,
    /// Raft exchanges with a peer that failed on TLS: a certificate or CA mismatch.
    pub peer_tls_failures: Counter,
    /// Which peers, lately, and why: for `/readyz` and the logs.
    pub peer_trouble: PeerTrouble,
    events: Family<EventLabels, Counter>,
    grpc_requests: Family<GrpcLabels, Counter>,
    claims: Family<ClaimLabels, Counter>,
}

/// How long a peer's TLS failure stays in `/readyz` without a new one.
pub const PEER_TROUBLE_RECENT: std::time::Duration = std::time::Duration::from_secs(30);

/// Peers this node failed to reach over TLS lately (a CA or certificate mismatch), for
/// `/readyz`. A peer leaves the list at its next successful exchange.
#[derive(Debug, Default)]
pub struct PeerTrouble {
    failures: std::sync::Mutex<
        std::collections::BTreeMap<crate::raft_types::NodeId, (std::time::Instant, String)>,
    >,
    /// Whether `failures` may hold anything: every successful Raft exchange reports in, so
    /// the usual case (no trouble) must not take the lock.
    any: std::sync::atomic::AtomicBool,
}

impl PeerTrouble {
    /// Records a failed exchange with `peer`; true when it is news (a first failure, or
    /// another error than the last), to be logged.
    pub fn failed(&self, peer: crate::raft_types::NodeId, error: String) -> bool {
        let mut failures = self.failures.lock().expect("peer trouble lock");
        let news = failures.get(&peer).is_none_or(|(_, last)| *last != error);
        failures.insert(peer, (std::time::Instant::now(), error));
        self.any.store(true, std::sync::atomic::Ordering::Release);
        news
    }

    pub fn succeeded(&self, peer: crate::raft_types::NodeId) {
        if !self.any.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let mut failures = self.failures.lock().expect("peer trouble lock");
        failures.remove(&peer);
        self.any
            .store(!failures.is_empty(), std::sync::atomic::Ordering::Release);
    }

    /// The failures of the last `PEER_TROUBLE_RECENT`, by peer.
    pub fn recent(&self) -> Vec<(crate::raft_types::NodeId, String)> {
        self.failures
            .lock()
            .expect("peer trouble lock")
            .iter()
            .filter(|(_, (at, _))| at.elapsed() < PEER_TROUBLE_RECENT)
            .map(|(peer, (_, error))| (*peer, error.clone()))
            .collect()
    }
}

fn seconds_buckets() -> impl Iterator<Item = f64> {
    // 50 µs .. ~6.5 s.
    exponential_buckets(0.000_05, 2.0, 18)
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("baton");
        let m = Metrics {
            term: Gauge::default(),
            leader_id: Gauge::default(),
            is_leader: Gauge::default(),
            last_log_index: Gauge::default(),
            applied_index: Gauge::default(),
            snapshot_index: Gauge::default(),
            replication_lag: Family::default(),
            leases_held: Gauge::default(),
            keys: Gauge::default(),
            revision: Gauge::default(),
            proposals: Counter::default(),
            proposals_unanswered: Counter::default(),
            proposal_commands: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            proposal_seconds: Histogram::new(seconds_buckets()),
            apply_seconds: Histogram::new(seconds_buckets()),
            flush_seconds: Histogram::new(seconds_buckets()),
            fsync_seconds: Histogram::new(seconds_buckets()),
            watch_streams: Gauge::default(),
            endings_streams: Gauge::default(),
            connections_refused: Counter::default(),
            requests_limited: Counter::default(),
            refused_without_log: Counter::default(),
            linearizable_reads: Counter::default(),
            read_rounds: Counter::default(),
            peer_tls_failures: Counter::default(),
            peer_trouble: PeerTrouble::default(),
            events: Family::default(),
            grpc_requests: Family::default(),
            claims: Family::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        for (name, help, gauge) in [
            ("raft_term", "Current Raft term", &m.term),
            (
                "raft_leader_id",
                "The leader this node knows (0: none)",
                &m.leader_id,
            ),
            ("raft_is_leader", "1 on the leader", &m.is_leader),
            (
                "raft_last_log_index",
                "Index of the last entry in this node's log",
                &m.last_log_index,
            ),
            (
                "raft_applied_index",
                "Index of the last entry this node applied",
                &m.applied_index,
            ),
            (
                "raft_snapshot_index",
                "Last index covered by this node's snapshot",
                &m.snapshot_index,
            ),
            ("leases_held", "Leases held", &m.leases_held),
            ("keys", "Keys with a case file", &m.keys),
            (
                "revision",
                "Revision of the last applied write",
                &m.revision,
            ),
        ] {
            r.register(name, help, gauge.clone());
        }
        r.register(
            "raft_replication_lag_entries",
            "On the leader: entries each follower is behind its log",
            m.replication_lag.clone(),
        );
        r.register(
            "events",
            "Events this node applied, by kind: claimed, released, expired, revoked, offered, \
             accepted (handoffs), declined, cancelled, lapsed, assigned, updated",
            m.events.clone(),
        );
        r.register(
            "watch_streams",
            "Watch streams open on this node",
            m.watch_streams.clone(),
        );
        r.register(
            "endings_streams",
            "Endings streams (one per client session) open on this node",
            m.endings_streams.clone(),
        );
        for (name, help, counter) in [
            (
                "connections_refused",
                "Connections closed at once: the node had connections_max open",
                &m.connections_refused,
            ),
            (
                "requests_limited",
                "Requests refused by a per-client limit (watches per address, writes per second)",
                &m.requests_limited,
            ),
            (
                "refused_without_log",
                "Writes refused from a linearizable read on the leader, with no log entry",
                &m.refused_without_log,
            ),
            (
                "linearizable_reads",
                "Linearizable reads confirmed as leader (by a later entry's commit or a read-index round)",
                &m.linearizable_reads,
            ),
            (
                "read_rounds",
                "Read-index rounds run on this node (concurrent reads share one)",
                &m.read_rounds,
            ),
            (
                "peer_tls_failures",
                "Raft exchanges with a peer that failed on TLS (a certificate or CA mismatch)",
                &m.peer_tls_failures,
            ),
            (
                "proposals",
                "Log entries proposed by this node as leader",
                &m.proposals,
            ),
            (
                "proposals_unanswered",
                "Entries this node proposed as leader whose outcome it never learned (deposed)",
                &m.proposals_unanswered,
            ),
        ] {
            r.register(name, help, counter.clone());
        }
        for (name, help, histogram) in [
            (
                "proposal_commands",
                "Commands per proposed log entry",
                &m.proposal_commands,
            ),
            (
                "proposal_seconds",
                "From proposing an entry to its answers",
                &m.proposal_seconds,
            ),
            (
                "apply_seconds",
                "One state machine apply of committed entries",
                &m.apply_seconds,
            ),
            (
                "flush_seconds",
                "One log group-commit round (the segments' fdatasync and its bookkeeping)",
                &m.flush_seconds,
            ),
            (
                "fsync_seconds",
                "The fdatasync of the log segments within a group-commit round",
                &m.fsync_seconds,
            ),
        ] {
            r.register(name, help, histogram.clone());
        }
        r.register(
            "grpc_requests",
            "Baton API requests answered by this node, by method and gRPC code",
            m.grpc_requests.clone(),
        );
        r.register(
            "claims",
            "Claims this node decided as leader, by outcome (granted, held)",
            m.claims.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Counts one answered request of the Baton API.
    pub fn grpc_request(&self, method: &'static str, code: tonic::Code) {
        self.grpc_requests
            .get_or_create(&GrpcLabels {
                method,
                code: code_name(code),
            })
            .inc();
    }

    /// Counts one claim decided here: `granted` or `held`.
    pub fn claim(&self, outcome: &'static str) {
        self.claims.get_or_create(&ClaimLabels { outcome }).inc();
    }

    /// Counts an applied event (claimed, expired, offered, accepted, ...).
    pub fn event(&self, kind: &'static str) {
        self.events.get_or_create(&EventLabels { kind }).inc();
    }

    /// Sets the gauges read at scrape time (Raft's state, and the table's `counts`), then
    /// encodes everything.
    pub fn render(&self, rm: &RaftMetrics, counts: TableCounts) -> String {
        let gauge = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        gauge(&self.term, rm.current_term);
        gauge(&self.leader_id, rm.current_leader.unwrap_or(0));
        // Not `current_leader == self`: a leader that removed itself from the membership
        // still names itself (and openraft 0.9 may keep its state a while), but it leads no
        // one. A leader is a voter of the membership it knows.
        let voter = rm
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == rm.id);
        gauge(
            &self.is_leader,
            u64::from(rm.state == openraft::ServerState::Leader && voter),
        );
        let last = rm.last_log_index.unwrap_or(0);
        gauge(&self.last_log_index, last);
        gauge(
            &self.applied_index,
            rm.last_applied.map(|l| l.index).unwrap_or(0),
        );
        gauge(
            &self.snapshot_index,
            rm.snapshot.map(|l| l.index).unwrap_or(0),
        );
        self.replication_lag.clear();
        if let Some(replication) = &rm.replication {
            for (follower, matched) in replication {
                if *follower == rm.id {
                    continue;
                }
                let matched = matched.map(|l| l.index).unwrap_or(0);
                gauge(
                    &self.replication_lag.get_or_create(&FollowerLabels {
                        follower: *follower,
                    }),
                    last.saturating_sub(matched),
                );
            }
        }
        gauge(&self.leases_held, counts.leases);
        gauge(&self.keys, counts.keys);
        gauge(&self.revision, counts.revision);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names_are_the_codes_debug_names() {
        for n in 0..=16 {
            let code = tonic::Code::from_i32(n);
            assert_eq!(code_name(code), format!("{code:?}"), "code {n}");
        }
    }
}
