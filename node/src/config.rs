//! Node configuration: one type, read from a TOML file, env vars and flags (in that order of
//! precedence, lowest first), then validated as one by consuming it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::core::limits::{TTL_MS_FLOOR, TTL_MS_MAX};
use crate::raft_types::NodeId;

/// Everything a node can be told. Every field has a default, so an empty config runs a
/// single-node cluster on 127.0.0.1 with `./baton-data`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// This node's id in the cluster (>= 1).
    pub node_id: NodeId,
    /// Where the gRPC server (Baton, Cluster and Raft services) listens.
    pub listen: String,
    /// The address other nodes and clients use to reach this node; defaults to `listen`.
    pub advertise: Option<String>,
    pub data_dir: PathBuf,
    /// A cluster's name: data dirs and Raft messages of another cluster are refused.
    pub cluster_name: String,
    /// `1=host:port,2=host:port,...`: the voters a new cluster starts with. Empty: a
    /// single-node cluster of this node.
    pub initial_cluster: String,
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Shortest lease a client may ask for; at least twice the election timeout, so that a
    /// lease outlives a leader change.
    pub ttl_ms_min: u64,
    /// Longest lease a client may ask for; at most one hour.
    pub ttl_ms_max: u64,
    /// How often the leader looks for leases whose TTL ran out.
    pub expiry_tick_ms: u64,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_logs: u64,
    /// How long a write may wait to commit before the client is told UNAVAILABLE.
    pub write_timeout_ms: u64,
    /// `text` or `json` log lines.
    pub log_format: String,
    /// Recent events each node keeps for watches; older revisions are `compacted`.
    pub watch_window_events: usize,
    /// Where the HTTP admin server (`/healthz`, `/readyz`, `/metrics`) listens; none: off.
    pub admin_listen: Option<String>,
    /// `host:port,...` of members of a running cluster: instead of starting a new cluster,
    /// ask its leader to add this node (as `baton cluster add` does). Only on a new data dir;
    /// a node that is already a member just rejoins.
    pub join: Option<String>,
    /// Connections accepted at once (clients and peers); more are closed as they come.
    pub connections_max: usize,
    /// Watch streams open at once from one client address.
    pub watches_per_address_max: usize,
    /// HTTP/2 streams one connection may have open at once; more wait.
    pub streams_per_connection_max: u32,
    /// Writes per second one client id may make, in bursts of as many; 0: no limit.
    pub client_writes_per_second: u32,
    /// Writes per second one principal may make over all its client ids (auth on); 0: no
    /// limit.
    pub principal_writes_per_second: u32,
    /// TLS on the gRPC port: this node's certificate and key, and the CA of nodes and
    /// clients (PEM files; all three or none).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    /// With TLS: every client must present a certificate the CA signed (mTLS).
    pub tls_client_auth: bool,
    /// TLS between nodes, when not the client settings: this node's peer certificate and
    /// key, and the CA that signs every node's (PEM files; all three or none; needs TLS).
    pub peer_tls_cert: Option<PathBuf>,
    pub peer_tls_key: Option<PathBuf>,
    pub peer_tls_ca: Option<PathBuf>,
    /// Allow plaintext on a non-loopback address (refused otherwise).
    pub insecure: bool,
    /// Bearer tokens: a file of `PRINCIPAL sha256:HEX` lines (`baton-node token`), reloaded
    /// on SIGHUP. Turns auth on.
    pub auth_tokens: Option<PathBuf>,
    /// With auth on, serve requests that show no certificate or token as anonymous instead
    /// of refusing them.
    pub allow_anonymous: bool,
    /// A permissions policy (TOML) this node enforces until the cluster has one set with
    /// `baton access set`.
    pub access_policy: Option<PathBuf>,
    /// Write a refusal that changes nothing (a claim of a held key, a renew, release or
    /// update with a dead token) to the log like any write, instead of answering it as
    /// leader from a linearizable read. For comparison only.
    pub refusals_in_log: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            node_id: 1,
            listen: "127.0.0.1:7001".into(),
            advertise: None,
            data_dir: PathBuf::from("baton-data"),
            cluster_name: "baton".into(),
            initial_cluster: String::new(),
            heartbeat_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1_000,
            ttl_ms_min: 2_000,
            ttl_ms_max: TTL_MS_MAX,
            expiry_tick_ms: 50,
            snapshot_logs: 5_000,
            write_timeout_ms: 10_000,
            log_format: "text".into(),
            watch_window_events: crate::limits::WATCH_WINDOW_EVENTS_DEFAULT,
            admin_listen: None,
            join: None,
            connections_max: crate::limits::CONNECTIONS_MAX_DEFAULT,
            watches_per_address_max: crate::limits::WATCHES_PER_ADDRESS_MAX_DEFAULT,
            streams_per_connection_max: crate::limits::STREAMS_PER_CONNECTION_MAX_DEFAULT,
            client_writes_per_second: crate::limits::CLIENT_WRITES_PER_SECOND_DEFAULT,
            principal_writes_per_second: crate::limits::PRINCIPAL_WRITES_PER_SECOND_DEFAULT,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            tls_client_auth: false,
            peer_tls_cert: None,
            peer_tls_key: None,
            peer_tls_ca: None,
            insecure: false,
            auth_tokens: None,
            allow_anonymous: false,
            access_policy: None,
            refusals_in_log: false,
        }
    }
}

/// A config that passed `validate`.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    pub node_id: NodeId,
    pub listen: SocketAddr,
    pub advertise: String,
    pub data_dir: PathBuf,
    pub cluster_name: String,
    /// The initial voters and their addresses (just this node for a single-node cluster).
    pub initial_members: BTreeMap<NodeId, String>,
    pub raft: openraft::Config,
    pub ttl_ms_min: u64,
    pub ttl_ms_max: u64,
    pub expiry_tick: Duration,
    pub write_timeout: Duration,
    pub json_logs: bool,
    pub watch_window_events: usize,
    pub admin_listen: Option<SocketAddr>,
    /// Members of a running cluster to join through (empty: bootstrap `initial_members`).
    pub join: Vec<String>,
    pub connections_max: usize,
    pub streams_per_connection_max: u32,
    pub watches_per_address_max: usize,
    pub principal_writes_per_second: u32,
    pub client_writes_per_second: u32,
    /// TLS on the gRPC port, if on.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Client certificates name principals (`tls_client_auth`).
    pub client_certs: bool,
    /// The tokens file, if tokens are on.
    pub auth_tokens: Option<PathBuf>,
    pub allow_anonymous: bool,
    /// Refusals that change nothing are written to the log too (`NodeConfig`).
    pub refusals_in_log: bool,
    /// The policy enforced until the cluster has one, read and checked.
    pub access_policy: Option<crate::core::access::Policy>,
}

/// A config that cannot run, with what to change.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid config: {0}")]
pub struct ConfigError(pub String);

fn bad<T>(msg: String) -> Result<T, ConfigError> {
    Err(ConfigError(msg))
}

/// The node id a StatefulSet pod's host name implies: its ordinal suffix plus one
/// (`baton-0` → 1), since ids start at 1 and ordinals at 0.
pub fn node_id_from_hostname(host: &str) -> Result<u64, ConfigError> {
    let ordinal = host
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse::<u64>().ok())
        .ok_or_else(|| {
            ConfigError(format!(
                "host name {host:?} does not end in -N (a StatefulSet ordinal), so it gives no node id"
            ))
        })?;
    ordinal
        .checked_add(1)
        .ok_or_else(|| ConfigError(format!("host name {host:?}: ordinal too large")))
}

impl NodeConfig {
    /// Parses a TOML config file's text.
    pub fn from_toml(text: &str) -> Result<NodeConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(format!("config file: {e}")))
    }

    /// Checks every field and every rule between fields.
    pub fn validate(self) -> Result<ValidConfig, ConfigError> {
        if self.node_id == 0 {
            return bad("node_id must be 1 or more".into());
        }
        let admin_listen = match &self.admin_listen {
            None => None,
            Some(a) => Some(a.parse::<SocketAddr>().map_err(|e| {
                ConfigError(format!(
                    "admin_listen {a:?} is not host:port with an IP host: {e}"
                ))
            })?),
        };
        let listen: SocketAddr = self.listen.parse().map_err(|e| {
            ConfigError(format!(
                "listen {:?} is not host:port with an IP host: {e}",
                self.listen
            ))
        })?;
        let advertise = self
            .advertise
            .clone()
            .unwrap_or_else(|| self.listen.clone());
        if self.cluster_name.is_empty() || self.cluster_name.len() > 64 {
            return bad("cluster_name must be 1 to 64 bytes".into());
        }
        if self.heartbeat_ms == 0 || self.heartbeat_ms >= self.election_timeout_min_ms {
            return bad(format!(
                "heartbeat_ms ({}) must be above 0 and below election_timeout_min_ms ({})",
                self.heartbeat_ms, self.election_timeout_min_ms
            ));
        }
        if self.election_timeout_min_ms >= self.election_timeout_max_ms {
            return bad(format!(
                "election_timeout_min_ms ({}) must be below election_timeout_max_ms ({})",
                self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if self.ttl_ms_min < 2 * self.election_timeout_max_ms || self.ttl_ms_min < TTL_MS_FLOOR {
            return bad(format!(
                "ttl_ms_min ({}) must be at least twice election_timeout_max_ms ({}), so a lease \
                 outlives a leader change",
                self.ttl_ms_min, self.election_timeout_max_ms
            ));
        }
        if self.ttl_ms_max > TTL_MS_MAX || self.ttl_ms_max < self.ttl_ms_min {
            return bad(format!(
                "ttl_ms_max ({}) must be between ttl_ms_min ({}) and {TTL_MS_MAX}",
                self.ttl_ms_max, self.ttl_ms_min
            ));
        }
        if self.expiry_tick_ms == 0 || self.expiry_tick_ms > self.ttl_ms_min {
            return bad(format!(
                "expiry_tick_ms ({}) must be between 1 and ttl_ms_min ({})",
                self.expiry_tick_ms, self.ttl_ms_min
            ));
        }
        if self.write_timeout_ms < self.election_timeout_max_ms {
            return bad(format!(
                "write_timeout_ms ({}) must be at least election_timeout_max_ms ({})",
                self.write_timeout_ms, self.election_timeout_max_ms
            ));
        }
        if self.watch_window_events == 0
            || self.watch_window_events > crate::limits::WATCH_WINDOW_EVENTS_MAX
        {
            return bad(format!(
                "watch_window_events ({}) must be 1 to {}",
                self.watch_window_events,
                crate::limits::WATCH_WINDOW_EVENTS_MAX
            ));
        }
        if self.snapshot_logs == 0 {
            return bad("snapshot_logs must be 1 or more".into());
        }
        let json_logs = match self.log_format.as_str() {
            "text" => false,
            "json" => true,
            other => return bad(format!("log_format {other:?} must be text or json")),
        };
        let peer = match (&self.peer_tls_cert, &self.peer_tls_key, &self.peer_tls_ca) {
            (None, None, None) => None,
            (Some(cert), Some(key), Some(ca)) => Some(crate::tls::PeerFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            }),
            _ => {
                return bad(
                    "peer TLS needs all of peer_tls_cert, peer_tls_key and peer_tls_ca \
                     (baton-node certs --peer-ca makes a set for a test cluster)"
                        .into(),
                )
            }
        };
        let tls = match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (None, None, None) if peer.is_some() => {
                return bad(
                    "peer_tls_* needs TLS toward clients as well (tls_cert, tls_key and \
                     tls_ca): one port serves both"
                        .into(),
                )
            }
            (None, None, None) => None,
            (Some(cert), Some(key), Some(ca)) => Some(crate::tls::TlsFiles {
                peer,
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                // The handshake never requires a client certificate, even with
                // --tls-client-auth: a client without one (or with a token instead) gets the
                // auth layer's refusal, UNAUTHENTICATED naming what to give, at once. A
                // handshake that required one would end in a connection closed after the
                // handshake, which a client cannot tell from a network fault and retries
                // until its deadline. Every request without a certificate or token is
                // refused there unless --allow-anonymous; Raft traffic needs a node's.
                require_client_cert: false,
            }),
            _ => {
                return bad(
                    "TLS needs all of tls_cert, tls_key and tls_ca (baton-node certs makes a \
                     set for a test cluster)"
                        .into(),
                )
            }
        };
        if tls.is_none() && self.tls_client_auth {
            return bad("tls_client_auth needs TLS: give tls_cert, tls_key and tls_ca".into());
        }
        if self.allow_anonymous && !self.tls_client_auth && self.auth_tokens.is_none() {
            return bad(
                "allow_anonymous only means something with auth on (tls_client_auth or \
                 auth_tokens); without either every request is anonymous already"
                    .into(),
            );
        }
        let access_policy = match &self.access_policy {
            None => None,
            Some(_) if !self.tls_client_auth && self.auth_tokens.is_none() => {
                return bad(
                    "access_policy needs auth on (tls_client_auth or auth_tokens): without it \
                     every request is anonymous and a policy protects nothing"
                        .into(),
                )
            }
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| ConfigError(format!("access_policy {}: {e}", path.display())))?;
                Some(
                    crate::core::access::Policy::parse_to_set(&text).map_err(|e| {
                        ConfigError(format!("access_policy {}: {e}", path.display()))
                    })?,
                )
            }
        };
        if tls.is_none() && !self.insecure && !listen.ip().is_loopback() {
            return bad(format!(
                "listen {listen} is not a loopback address and TLS is off: anyone on the \
                 network could act as any client. Give tls_cert, tls_key and tls_ca \
                 (--tls-cert/--tls-key/--tls-ca), or --insecure to serve plaintext anyway"
            ));
        }
        if self.streams_per_connection_max == 0 {
            return bad("streams_per_connection_max must be 1 or more".into());
        }
        if self.connections_max < 2 || self.watches_per_address_max == 0 {
            return bad(format!(
                "connections_max ({}) must be 2 or more and watches_per_address_max ({}) 1 or \
                 more",
                self.connections_max, self.watches_per_address_max
            ));
        }
        let join: Vec<String> = self
            .join
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        if !join.is_empty() {
            if !self.initial_cluster.trim().is_empty() {
                return bad(
                    "give either join (add this node to a running cluster) or initial_cluster \
                     (start a new one), not both"
                        .into(),
                );
            }
            let unspecified = advertise
                .parse::<SocketAddr>()
                .is_ok_and(|a| a.ip().is_unspecified());
            if self.advertise.is_none() || unspecified {
                return bad(format!(
                    "a joining node needs advertise: the address its peers reach it at \
                     (listen is {})",
                    self.listen
                ));
            }
        }
        let initial_members = if self.initial_cluster.trim().is_empty() {
            BTreeMap::from([(self.node_id, advertise.clone())])
        } else {
            parse_initial_cluster(&self.initial_cluster)?
        };
        match initial_members.get(&self.node_id) {
            None => {
                return bad(format!(
                    "node_id {} is not in initial_cluster {:?}",
                    self.node_id, self.initial_cluster
                ))
            }
            Some(addr) if self.advertise.is_some() && *addr != advertise => {
                return bad(format!(
                "initial_cluster gives node {} the address {addr}, but advertise is {advertise}",
                self.node_id
            ))
            }
            Some(_) => {}
        }
        // The advertised address is what peers dial: take it from initial_cluster.
        let advertise = initial_members[&self.node_id].clone();
        let raft = openraft::Config {
            cluster_name: self.cluster_name.clone(),
            heartbeat_interval: self.heartbeat_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            install_snapshot_timeout: 10_000,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs),
            // Keep as many entries as a snapshot interval (at most 1000) after each snapshot,
            // so a briefly lagging follower catches up from the log, a long-gone one from the
            // snapshot.
            max_in_snapshot_log_to_keep: self.snapshot_logs.min(1_000),
            max_payload_entries: crate::core::limits::RAFT_ENTRIES_PER_MESSAGE_MAX,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ConfigError(format!("raft settings: {e}")))?;
        Ok(ValidConfig {
            node_id: self.node_id,
            listen,
            advertise,
            data_dir: self.data_dir,
            cluster_name: self.cluster_name,
            initial_members,
            raft,
            ttl_ms_min: self.ttl_ms_min,
            ttl_ms_max: self.ttl_ms_max,
            expiry_tick: Duration::from_millis(self.expiry_tick_ms),
            write_timeout: Duration::from_millis(self.write_timeout_ms),
            json_logs,
            watch_window_events: self.watch_window_events,
            admin_listen,
            join,
            connections_max: self.connections_max,
            watches_per_address_max: self.watches_per_address_max,
            streams_per_connection_max: self.streams_per_connection_max,
            client_writes_per_second: self.client_writes_per_second,
            principal_writes_per_second: self.principal_writes_per_second,
            tls,
            client_certs: self.tls_client_auth,
            auth_tokens: self.auth_tokens,
            allow_anonymous: self.allow_anonymous,
            refusals_in_log: self.refusals_in_log,
            access_policy,
        })
    }
}

/// Parses `1=host:port,2=host:port`.
pub fn parse_initial_cluster(text: &str) -> Result<BTreeMap<NodeId, String>, ConfigError> {
    let mut members = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((id, addr)) = part.split_once('=') else {
            return bad(format!(
                "initial_cluster entry {part:?} is not id=host:port"
            ));
        };
        let id: NodeId = id.trim().parse().ok().filter(|id| *id > 0).ok_or_else(|| {
            ConfigError(format!(
                "initial_cluster entry {part:?}: id must be a number >= 1"
            ))
        })?;
        let addr = addr.trim();
        if addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .is_none()
        {
            return bad(format!(
                "initial_cluster entry {part:?}: address must be host:port"
            ));
        }
        if members.insert(id, addr.to_string()).is_some() {
            return bad(format!("initial_cluster names node {id} twice"));
        }
    }
    if members.is_empty() {
        return bad("initial_cluster is empty".into());
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statefulset_host_name_gives_its_ordinal_plus_one() {
        assert_eq!(node_id_from_hostname("baton-0").unwrap(), 1);
        assert_eq!(node_id_from_hostname("my-baton-12").unwrap(), 13);
        for bad in [
            "baton",
            "baton-",
            "baton-x",
            "",
            "baton-18446744073709551615",
        ] {
            assert!(node_id_from_hostname(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_are_a_valid_single_node_cluster() {
        let v = NodeConfig::default().validate().unwrap();
        assert_eq!(
            v.initial_members,
            BTreeMap::from([(1, "127.0.0.1:7001".to_string())])
        );
        assert_eq!(v.data_dir, PathBuf::from("baton-data"));
        // A replication message of the largest entries stays under the Raft message limit.
        use crate::core::limits::*;
        assert_eq!(v.raft.max_payload_entries, RAFT_ENTRIES_PER_MESSAGE_MAX);
        assert!(
            v.raft.max_payload_entries as usize * (PROPOSAL_BYTES_MAX + REQUEST_BYTES_MAX)
                <= RAFT_MESSAGE_BYTES_MAX
        );
    }

    #[test]
    fn ttl_min_must_be_twice_the_election_timeout() {
        let c = NodeConfig {
            ttl_ms_min: 1_999,
            ..Default::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.0.contains("twice"), "{e}");
        let c = NodeConfig {
            ttl_ms_min: 2_000,
            ..Default::default()
        };
        c.validate().unwrap();
    }

    #[test]
    fn plaintext_on_a_network_address_needs_insecure_and_tls_needs_all_three_files() {
        let open = NodeConfig {
            listen: "0.0.0.0:7001".into(),
            ..NodeConfig::default()
        };
        let e = open.clone().validate().unwrap_err().0;
        assert!(e.contains("TLS is off") && e.contains("--insecure"), "{e}");
        assert!(NodeConfig {
            insecure: true,
            ..open.clone()
        }
        .validate()
        .is_ok());
        let half = NodeConfig {
            tls_cert: Some("node.pem".into()),
            ..open.clone()
        };
        assert!(half.validate().unwrap_err().0.contains("all of tls_cert"));
        let tls = NodeConfig {
            tls_cert: Some("node.pem".into()),
            tls_key: Some("node-key.pem".into()),
            tls_ca: Some("ca.pem".into()),
            ..open
        };
        assert!(
            tls.validate().unwrap().tls.is_some(),
            "TLS needs no --insecure"
        );
        let mtls_without_tls = NodeConfig {
            tls_client_auth: true,
            ..NodeConfig::default()
        };
        assert!(mtls_without_tls.validate().is_err());
    }

    #[test]
    fn admin_listen_must_be_an_ip_host_and_port() {
        let c = NodeConfig {
            admin_listen: Some("localhost".into()),
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().0.contains("admin_listen"));
        let c = NodeConfig {
            admin_listen: Some("127.0.0.1:0".into()),
            ..Default::default()
        };
        assert_eq!(
            c.validate().unwrap().admin_listen,
            Some("127.0.0.1:0".parse().unwrap())
        );
    }

    #[test]
    fn heartbeat_must_be_below_election_timeout() {
        let c = NodeConfig {
            heartbeat_ms: 500,
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().0.contains("heartbeat_ms"));
    }

    #[test]
    fn node_must_be_in_initial_cluster() {
        let c = NodeConfig {
            node_id: 4,
            initial_cluster: "1=127.0.0.1:1,2=127.0.0.1:2".into(),
            ..Default::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .0
            .contains("not in initial_cluster"));
    }

    #[test]
    fn initial_cluster_errors_name_the_entry() {
        for (text, want) in [
            ("1=a:1,1=b:2", "twice"),
            ("x=a:1", "id must be"),
            ("1=nohost", "host:port"),
            ("1:a:1", "id=host:port"),
        ] {
            let e = parse_initial_cluster(text).unwrap_err();
            assert!(e.0.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn toml_file_with_unknown_field_is_refused() {
        assert!(NodeConfig::from_toml("node_id = 2\nlisten = \"127.0.0.1:9\"").is_ok());
        let e = NodeConfig::from_toml("nodeid = 2").unwrap_err();
        assert!(e.0.contains("unknown field"), "{e}");
    }
}
