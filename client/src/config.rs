//! Client configuration: what the caller sets ([`ClientConfig`]) and what the client runs on
//! after checking it ([`ValidConfig`]), plus endpoint normalisation.

use std::time::Duration;

use rand::Rng;

use crate::error::Error;

/// Node address used when the caller names none: the embedded single-node default.
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:7001";

/// Longest client id the server accepts (`RequestId.client_id` is 1..=64 bytes).
pub use baton_proto::limits::CLIENT_ID_BYTES_MAX;

/// Random bytes in a generated client id; printed as twice as many hex characters.
const CLIENT_ID_RANDOM_BYTES: usize = 16;
const _: () = assert!(CLIENT_ID_RANDOM_BYTES * 2 <= CLIENT_ID_BYTES_MAX);

/// Most endpoints one client is configured with; a cluster has 3 or 5 nodes, so a longer
/// list is a mistake (for example a wrong delimiter), not a deployment.
pub const ENDPOINTS_MAX: usize = 64;

/// What a [`crate::Client`] needs to know; checked by [`ClientConfig::validate`].
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Nodes to talk to, as `host:port` or `http://host:port`. Any node serves any request;
    /// the client tries them in order, sticks with one that answers, and goes to the leader
    /// directly once a node names it.
    pub endpoints: Vec<String>,
    /// The session this client acts as: the `Holder.client_id` of its claims and the
    /// `RequestId.session` of every write, which a lease is bound to (only its holder's
    /// session may renew, release, update, offer or cancel it). `None` picks a random one, so
    /// two processes never share an id by accident; give one explicitly to act as the same
    /// holder from several processes or after a restart. (Request ids use a separate random
    /// retry id per `Client`, so reusing a client id never confuses de-duplication.)
    pub client_id: Option<String>,
    /// How long one attempt against one node may take before the client gives up on it and
    /// tries again (possibly elsewhere).
    pub request_timeout: Duration,
    /// How long one logical request may take across all of its retries before the client
    /// reports [`Error::Unavailable`].
    pub retry_deadline: Duration,
    /// Fraction of a lease's TTL the client gives away to clock-rate drift between itself and
    /// the cluster: a grant is considered safe until `send_time + ttl × (1 − drift_margin)`.
    pub drift_margin: f64,
    /// Go straight to the leader a node names (`x-baton-leader`). Turn it off when the
    /// addresses the nodes advertise are not reachable from this client (a proxy, a load
    /// balancer, NAT): the client then sticks to `endpoints` and followers forward.
    pub follow_leader_hints: bool,
    /// TLS toward the nodes (their CA, and this client's certificate for mTLS). `None`:
    /// plaintext.
    pub tls: Option<ClientTls>,
    /// A bearer token for nodes started with `--auth-tokens` (`baton-node token` makes one),
    /// sent as `authorization: Bearer TOKEN` with every request. Send it over TLS: in
    /// plaintext anyone on the path can read and replay it.
    pub token: Option<BearerToken>,
}

/// Longest bearer token a client sends (the nodes' limit too).
pub use baton_proto::limits::TOKEN_BYTES_MAX;

/// A bearer token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(pub String);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// What a client needs to speak TLS to the nodes (PEM bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA that signed the nodes' certificates.
    pub ca_pem: Vec<u8>,
    /// This client's certificate and key, for nodes that require one (mTLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            endpoints: vec![DEFAULT_ENDPOINT.to_owned()],
            client_id: None,
            request_timeout: Duration::from_secs(5),
            retry_deadline: Duration::from_secs(10),
            drift_margin: 0.05,
            follow_leader_hints: true,
            tls: None,
            token: None,
        }
    }
}

impl ClientConfig {
    /// The default configuration with the given endpoints.
    pub fn with_endpoints<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..ClientConfig::default()
        }
    }

    /// Checks every field and the relations between them, normalises the endpoints and
    /// picks a client id if none was given.
    pub fn validate(self) -> Result<ValidConfig, Error> {
        if self.endpoints.is_empty() {
            return Err(Error::Config("no endpoints given".into()));
        }
        if self.endpoints.len() > ENDPOINTS_MAX {
            return Err(Error::Config(format!(
                "{} endpoints given, at most {ENDPOINTS_MAX} are allowed",
                self.endpoints.len()
            )));
        }
        if self.tls.is_none() {
            if let Some(https) = self
                .endpoints
                .iter()
                .find(|e| e.trim().starts_with("https://"))
            {
                return Err(Error::Config(format!(
                    "endpoint {https:?} asks for TLS: give the CA that signed the nodes' \
                     certificates with --tls-ca (or BATON_TLS_CA)"
                )));
            }
        }
        let mut endpoints: Vec<String> = Vec::with_capacity(self.endpoints.len());
        for raw in &self.endpoints {
            let endpoint = normalize_endpoint(raw)?;
            if !endpoints.contains(&endpoint) {
                endpoints.push(endpoint);
            }
        }

        let client_id = match self.client_id {
            Some(id) => {
                check_client_id(&id)?;
                id
            }
            None => random_client_id(),
        };

        if self.request_timeout.is_zero() {
            return Err(Error::Config("request_timeout must be above zero".into()));
        }
        if self.retry_deadline.is_zero() {
            return Err(Error::Config("retry_deadline must be above zero".into()));
        }
        if !(self.drift_margin.is_finite() && (0.0..1.0).contains(&self.drift_margin)) {
            return Err(Error::Config(format!(
                "drift_margin must be at least 0 and below 1, got {}",
                self.drift_margin
            )));
        }

        let bearer = match &self.token {
            None => None,
            Some(BearerToken(token)) => {
                let token = token.trim();
                let bad = |why: &str| Error::Config(format!("the token {why}"));
                if token.is_empty() {
                    return Err(bad("is empty"));
                }
                if token.len() + "Bearer ".len() > TOKEN_BYTES_MAX {
                    return Err(bad(&format!("is longer than {TOKEN_BYTES_MAX} bytes")));
                }
                let mut value = format!("Bearer {token}")
                    .parse::<tonic::metadata::AsciiMetadataValue>()
                    .map_err(|_| bad("must be printable ASCII"))?;
                // Never in `Debug` output, never in HTTP/2's header table.
                value.set_sensitive(true);
                Some(value)
            }
        };

        Ok(ValidConfig {
            endpoints,
            client_id,
            request_timeout: self.request_timeout,
            retry_deadline: self.retry_deadline,
            drift_margin: self.drift_margin,
            follow_leader_hints: self.follow_leader_hints,
            tls: self.tls,
            bearer,
        })
    }
}

/// A [`ClientConfig`] that passed [`ClientConfig::validate`]: endpoints are normalised
/// `host:port` strings without duplicates, and the client id is set.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) client_id: String,
    pub(crate) request_timeout: Duration,
    pub(crate) retry_deadline: Duration,
    pub(crate) drift_margin: f64,
    pub(crate) follow_leader_hints: bool,
    pub(crate) tls: Option<ClientTls>,
    /// `Bearer TOKEN`, sent as `authorization` with every request.
    pub(crate) bearer: Option<tonic::metadata::AsciiMetadataValue>,
}

impl ValidConfig {
    /// A request carrying `message`, with this client's credentials.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(bearer) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", bearer.clone());
        }
        request
    }

    /// The normalised endpoints, in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The client id: the given one, or a random one.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }
}

/// Turns `host:port`, `http://host:port` or `http://host:port/` into `host:port`, the form
/// nodes use in `x-baton-leader` and member lists. IPv6 hosts are written `[::1]:7001`.
pub fn normalize_endpoint(raw: &str) -> Result<String, Error> {
    let bad = |why: &str| Error::Config(format!("invalid endpoint {raw:?}: {why}"));
    let trimmed = raw.trim();
    // https:// says TLS, which the client config turns on with its CA (checked in
    // `validate`); the address dialed is the same host:port either way.
    let authority = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"))
        .unwrap_or(trimmed);
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains("://") {
        return Err(bad("use host:port, http:// or https://"));
    }
    if authority.contains('/') {
        return Err(bad("expected host:port without a path"));
    }
    let Some((host, port)) = authority.rsplit_once(':') else {
        return Err(bad("expected host:port, e.g. 127.0.0.1:7001"));
    };
    if host.is_empty() {
        return Err(bad("the host is empty"));
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("the host contains whitespace"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad("write IPv6 hosts in brackets, e.g. [::1]:7001"));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => return Err(bad("the port must be a number from 1 to 65535")),
        Ok(_) => {}
    }
    let authority = authority.to_owned();
    // Let the transport judge what this parser lets through (odd host characters).
    tonic::transport::Endpoint::from_shared(endpoint_uri(&authority))
        .map_err(|e| bad(&e.to_string()))?;
    Ok(authority)
}

/// The URI the transport dials for a normalised `host:port`.
pub(crate) fn endpoint_uri(authority: &str) -> String {
    format!("http://{authority}")
}

fn check_client_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > CLIENT_ID_BYTES_MAX {
        return Err(Error::Config(format!(
            "client id must be 1 to {CLIENT_ID_BYTES_MAX} bytes, got {}",
            id.len()
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(Error::Config(
            "client id must not contain control characters".into(),
        ));
    }
    Ok(())
}

/// A fresh random client id: 32 lowercase hex characters.
pub fn random_client_id() -> String {
    let bytes: [u8; CLIENT_ID_RANDOM_BYTES] = rand::thread_rng().gen();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_accepts_host_port_and_http_uri() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:7001").unwrap(),
            "127.0.0.1:7001"
        );
        assert_eq!(
            normalize_endpoint("http://127.0.0.1:7001").unwrap(),
            "127.0.0.1:7001"
        );
        assert_eq!(
            normalize_endpoint(" http://node-a.example:7002/ ").unwrap(),
            "node-a.example:7002"
        );
        assert_eq!(normalize_endpoint("[::1]:7001").unwrap(), "[::1]:7001");
        assert_eq!(
            normalize_endpoint("http://[::1]:7001").unwrap(),
            "[::1]:7001"
        );
    }

    #[test]
    fn https_endpoints_are_tls_and_need_the_ca() {
        assert_eq!(
            normalize_endpoint("https://node-a.example:7001/").unwrap(),
            "node-a.example:7001"
        );
        let error = ClientConfig::with_endpoints(["https://127.0.0.1:7001"])
            .validate()
            .unwrap_err();
        assert!(
            matches!(&error, Error::Config(m) if m.contains("--tls-ca")),
            "{error}"
        );
    }

    #[test]
    fn endpoint_rejects_what_cannot_be_dialed() {
        for bad in [
            "",
            "127.0.0.1",
            "127.0.0.1:",
            ":7001",
            "127.0.0.1:0",
            "127.0.0.1:70000",
            "127.0.0.1:port",
            "grpc://127.0.0.1:7001",
            "http://127.0.0.1:7001/baton",
            "::1:7001",
            "my host:7001",
        ] {
            assert!(
                matches!(normalize_endpoint(bad), Err(Error::Config(_))),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn validate_dedupes_endpoints_keeping_order() {
        let valid = ClientConfig::with_endpoints(["http://b:2", "a:1", "b:2", "http://a:1/"])
            .validate()
            .unwrap();
        assert_eq!(valid.endpoints(), ["b:2", "a:1"]);
    }

    #[test]
    fn validate_rejects_empty_endpoint_list() {
        let cfg = ClientConfig::with_endpoints(Vec::<String>::new());
        assert!(matches!(cfg.validate(), Err(Error::Config(_))));
    }

    #[test]
    fn validate_generates_a_32_hex_client_id_when_none_is_given() {
        let a = ClientConfig::default().validate().unwrap();
        let b = ClientConfig::default().validate().unwrap();
        assert_eq!(a.client_id().len(), 32);
        assert!(a.client_id().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.client_id(), b.client_id());
    }

    #[test]
    fn validate_keeps_a_given_client_id_and_checks_its_length() {
        let cfg = ClientConfig {
            client_id: Some("agent-7".into()),
            ..ClientConfig::default()
        };
        assert_eq!(cfg.validate().unwrap().client_id(), "agent-7");
        for bad in [String::new(), "x".repeat(CLIENT_ID_BYTES_MAX + 1)] {
            let cfg = ClientConfig {
                client_id: Some(bad),
                ..ClientConfig::default()
            };
            assert!(matches!(cfg.validate(), Err(Error::Config(_))));
        }
    }

    #[test]
    fn validate_rejects_drift_margin_outside_zero_to_one() {
        for margin in [-0.1, 1.0, 1.5, f64::NAN, f64::INFINITY] {
            let cfg = ClientConfig {
                drift_margin: margin,
                ..ClientConfig::default()
            };
            assert!(matches!(cfg.validate(), Err(Error::Config(_))), "{margin}");
        }
        let cfg = ClientConfig {
            drift_margin: 0.0,
            ..ClientConfig::default()
        };
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn validate_rejects_zero_timeouts() {
        let cfg = ClientConfig {
            request_timeout: Duration::ZERO,
            ..ClientConfig::default()
        };
        assert!(matches!(cfg.validate(), Err(Error::Config(_))));
        let cfg = ClientConfig {
            retry_deadline: Duration::ZERO,
            ..ClientConfig::default()
        };
        assert!(matches!(cfg.validate(), Err(Error::Config(_))));
    }
}
