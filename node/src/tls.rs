//! TLS on the gRPC port (rustls, ring): the server side this node terminates itself, the
//! client side it uses to reach peers, and `baton-node certs`, which makes a CA and
//! certificates for a test or dev cluster.
//!
//! One port serves clients and peers. With TLS on, every connection is TLS: plaintext gets no
//! answer (the handshake fails, and the node logs why). Client certificates are verified
//! against the CA when presented, and required when `tls_client_auth` is set (mTLS). Raft
//! messages always need one: a node dials its peers with its own certificate, and the Raft
//! service refuses a sender without a verified certificate.
//!
//! The handshake runs in a task per connection with a deadline, so a client that stalls in
//! it holds only its own connection.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long a client may take over the TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections whose handshake is still under way, waiting for the server to take them.
pub const TLS_PENDING_CONNECTIONS_MAX: usize = 1_024;

/// The files a node's TLS is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate chain and key (PEM): its server identity, and its client
    /// identity toward peers.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA that signs nodes' and clients' certificates (PEM).
    pub ca: PathBuf,
    /// Every client must present a certificate the CA signed.
    pub require_client_cert: bool,
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: not a PEM certificate file: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsFiles {
    /// The rustls server configuration: this node's identity, client certificates verified
    /// against the CA (required or optional), HTTP/2.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in certs(&self.ca)? {
            roots
                .add(ca)
                .map_err(|e| format!("{}: unusable CA certificate: {e}", self.ca.display()))?;
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        );
        let verifier = if self.require_client_cert {
            verifier
        } else {
            verifier.allow_unauthenticated()
        }
        .build()
        .map_err(|e| format!("client certificate verifier: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(&read(&self.key)?)
            .map_err(|e| format!("{}: not a PEM private key: {e}", self.key.display()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs(&self.cert)?, key)
            .map_err(|e| {
                format!(
                    "{}: certificate and key do not go together: {e}",
                    self.cert.display()
                )
            })?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    /// How this node reaches a peer (or the leader, to forward): the CA to trust and its own
    /// certificate to show.
    pub fn client_config(&self) -> Result<tonic::transport::ClientTlsConfig, String> {
        let ca = tonic::transport::Certificate::from_pem(read(&self.ca)?);
        let identity = tonic::transport::Identity::from_pem(read(&self.cert)?, read(&self.key)?);
        Ok(tonic::transport::ClientTlsConfig::new()
            .ca_certificate(ca)
            .identity(identity))
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed): the name a peer's
/// certificate must carry.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// This node's TLS toward other nodes (Raft, forwarding), which SIGHUP replaces: each
/// replacement is a new generation, and a channel made with an older one is made again, so
/// new connections present the new certificate and trust the new CA.
#[derive(Debug)]
pub struct Outbound {
    current: std::sync::RwLock<(u64, Option<tonic::transport::ClientTlsConfig>)>,
}

impl Outbound {
    pub fn new(config: Option<tonic::transport::ClientTlsConfig>) -> Arc<Outbound> {
        Arc::new(Outbound {
            current: std::sync::RwLock::new((0, config)),
        })
    }

    /// The generation and the settings of now (`None`: plaintext).
    pub fn current(&self) -> (u64, Option<tonic::transport::ClientTlsConfig>) {
        self.current.read().expect("outbound TLS lock").clone()
    }

    pub fn generation(&self) -> u64 {
        self.current.read().expect("outbound TLS lock").0
    }

    fn replace(&self, config: tonic::transport::ClientTlsConfig) {
        let mut current = self.current.write().expect("outbound TLS lock");
        *current = (current.0 + 1, Some(config));
    }
}

/// A channel endpoint for `addr` (`host:port`), over TLS when `tls` is given.
pub fn endpoint(
    addr: &str,
    tls: Option<&tonic::transport::ClientTlsConfig>,
) -> Result<tonic::transport::Endpoint, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| format!("bad node address {addr:?}: {e}"))?;
    match tls {
        None => Ok(endpoint),
        Some(tls) => endpoint
            .tls_config(tls.clone().domain_name(host_of(addr)))
            .map_err(|e| format!("TLS settings for {addr}: {e}")),
    }
}

/// Accepted connections, after the TLS handshake (each in its own task, with a deadline).
pub fn accept<S, IO>(
    incoming: S,
    config: tokio::sync::watch::Receiver<Arc<rustls::ServerConfig>>,
) -> impl futures::Stream<Item = Result<tokio_rustls::server::TlsStream<IO>, std::io::Error>>
where
    S: futures::Stream<Item = Result<IO, std::io::Error>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use futures::StreamExt;
    let (tx, rx) = tokio::sync::mpsc::channel(TLS_PENDING_CONNECTIONS_MAX);
    tokio::spawn(async move {
        let mut incoming = std::pin::pin!(incoming);
        loop {
            // Ends with the server: it drops the receiving side, and the listener with this.
            let conn = tokio::select! {
                conn = incoming.next() => conn,
                _ = tx.closed() => return,
            };
            let Some(conn) = conn else { return };
            let Ok(io) = conn else { continue };
            // The configuration as of now: a reload (SIGHUP) reaches new connections.
            let acceptor = tokio_rustls::TlsAcceptor::from(config.borrow().clone());
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    // Not a TLS record at all: a client speaking plaintext to this port.
                    Ok(Err(e)) if e.to_string().contains("InvalidContentType") => tracing::warn!(
                        error = %e,
                        "a client spoke plaintext to this TLS port: give it the CA (--tls-ca)"
                    ),
                    Ok(Err(e)) => tracing::warn!(
                        error = %e,
                        "TLS handshake failed (a certificate the CA did not sign, or not a \
                         node's where one is needed?)"
                    ),
                    Err(_) => tracing::warn!("TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Reads the TLS files again on every SIGHUP and hands new connections the new
/// configuration; a file that does not load is logged and the old configuration stays.
/// Connections already open keep theirs. The same goes for this node's side of connections
/// to other nodes (`Outbound`): new ones show the new certificate and trust the new CA.
pub fn reload_on_sighup(
    files: TlsFiles,
    config: tokio::sync::watch::Sender<Arc<rustls::ServerConfig>>,
    outbound: Arc<Outbound>,
) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match files
                .server_config()
                .and_then(|s| Ok((s, files.client_config()?)))
            {
                Ok((new, client)) => {
                    let _ = config.send(new);
                    outbound.replace(client);
                    tracing::info!(cert = %files.cert.display(), "reloaded the TLS certificates");
                }
                Err(e) => tracing::error!(
                    error = %e,
                    "could not reload the TLS certificates; keeping the ones in use"
                ),
            }
        }
    });
    Ok(())
}

/// Makes, in `dir` (for a test or dev cluster; the certificates do not expire, so rotate
/// real ones from your own CA): `ca.pem` + `ca-key.pem`; per node `node-ID.pem` + `node-ID-key.pem`
/// valid for its host names (and `localhost`, `127.0.0.1`); per client
/// `client-NAME.pem` + `client-NAME-key.pem`. Returns the files written.
pub fn generate(
    dir: &Path,
    nodes: &[(u64, Vec<String>)],
    clients: &[String],
) -> Result<Vec<PathBuf>, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let err = |e: rcgen::Error| e.to_string();
    // A client certificate named like a node's would be a node's: never bound by permissions.
    let node_prefix = crate::server::auth::NODE_CN_PREFIX.trim_end();
    if let Some(c) = clients.iter().find(|c| c.starts_with(node_prefix)) {
        return Err(format!(
            "client name {c:?}: names starting {node_prefix:?} are for node certificates"
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "baton CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
    let mut written = Vec::new();
    let mut write = |name: String, text: String| -> Result<(), String> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
        Ok(())
    };
    write("ca.pem".into(), ca_cert.pem())?;
    write("ca-key.pem".into(), ca_key.serialize_pem())?;
    let mut issue = |file: String, cn: String, names: Vec<String>, usages| -> Result<(), String> {
        let key = KeyPair::generate().map_err(err)?;
        let mut p = CertificateParams::new(names).map_err(err)?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = usages;
        let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(err)?;
        write(format!("{file}.pem"), cert.pem())?;
        write(format!("{file}-key.pem"), key.serialize_pem())
    };
    for (id, hosts) in nodes {
        let mut names = hosts.clone();
        for local in ["localhost", "127.0.0.1"] {
            if !names.iter().any(|n| n == local) {
                names.push(local.into());
            }
        }
        issue(
            format!("node-{id}"),
            format!("baton node {id}"),
            names,
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )?;
    }
    for name in clients {
        issue(
            format!("client-{name}"),
            name.clone(),
            Vec::new(),
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_strips_the_port_and_ipv6_brackets() {
        assert_eq!(host_of("node1:7001"), "node1");
        assert_eq!(host_of("10.0.0.1:7001"), "10.0.0.1");
        assert_eq!(host_of("[::1]:7001"), "::1");
    }

    #[test]
    fn generated_files_make_a_server_config_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let written = generate(
            dir.path(),
            &[(1, vec!["node1".into()]), (2, vec!["node2".into()])],
            &["agent".into()],
        )
        .unwrap();
        assert_eq!(written.len(), 2 + 2 * 2 + 2);
        let files = TlsFiles {
            cert: dir.path().join("node-1.pem"),
            key: dir.path().join("node-1-key.pem"),
            ca: dir.path().join("ca.pem"),
            require_client_cert: true,
        };
        assert!(files.server_config().is_ok());
        assert!(files.client_config().is_ok());
        let mismatched = TlsFiles {
            key: dir.path().join("node-2-key.pem"),
            ..files.clone()
        };
        let e = mismatched.server_config().unwrap_err();
        assert!(e.contains("do not go together"), "{e}");
        let missing = TlsFiles {
            ca: dir.path().join("nope.pem"),
            ..files
        };
        assert!(missing.server_config().unwrap_err().contains("nope.pem"));
    }
}
