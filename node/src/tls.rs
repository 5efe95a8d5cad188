//! TLS on the gRPC port (rustls, ring): the server side this node terminates itself, the
//! client side it uses to reach other nodes, and `baton-node certs`, which makes CAs and
//! certificates for a test or dev cluster.
//!
//! One port serves clients and peers, each with its own settings. A node dialing another
//! offers the ALPN protocol [`PEER_ALPN`] besides `h2`; the port reads the ClientHello first
//! and answers such a connection with the peer settings (`--peer-tls-cert/-key/-ca`: the
//! node's peer certificate, and a client certificate required from the peer CA), any other
//! with the client settings (`--tls-cert/-key/-ca`: client certificates verified against the
//! client CA when presented, required with `tls_client_auth`). Without peer files the peer
//! settings are the client ones.
//!
//! A connection's certificate names a node (its common name starts with "baton node ") only
//! when the peer CA verified it: on a peer connection, or on a client connection when both
//! CAs are one. Raft messages, forwarded principals and a node's own calls need that.
//!
//! With TLS on, every connection is TLS: plaintext gets no answer (the handshake fails, and
//! the node logs why). The handshake runs in a task per connection with a deadline, so a
//! client that stalls in it holds only its own connection.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::limits::{TLS_HANDSHAKE_TIMEOUT, TLS_PENDING_CONNECTIONS_MAX};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Why TLS settings cannot be used: which file, and what is wrong with it (rustls' words).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {}: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `what` is "certificate file" or "private key".
    #[error("{}: not a PEM {what}: {source}", file.display())]
    Pem {
        file: PathBuf,
        what: &'static str,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{}: no certificate in it", file.display())]
    NoCertificate { file: PathBuf },
    #[error("{}: unusable CA certificate: {source}", file.display())]
    Ca {
        file: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// The crypto provider offers none of the protocol versions asked for.
    #[error("{0}")]
    Versions(#[source] rustls::Error),
    #[error("{}: certificate and key do not go together: {source}", cert.display())]
    Pair {
        cert: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("bad node address {addr:?}: {detail}")]
    Address { addr: String, detail: String },
    #[error("client name {name:?}: names starting {:?} are for node certificates", NODE_CN_PREFIX.trim_end())]
    NodeName { name: String },
    #[error("{}: {source}", file.display())]
    Write {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The common-name prefix of node certificates (`baton-node certs` names node N's
/// `baton node N`): who is a node is a certificate's identity, so it is told here.
pub const NODE_CN_PREFIX: &str = "baton node ";

/// The common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The ALPN protocol a node offers (before `h2`) when it dials another node: the port then
/// answers with the peer settings.
pub const PEER_ALPN: &[u8] = b"baton-peer";

/// The files a node's TLS is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate chain and key (PEM) toward clients.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA that signs clients' certificates (PEM); without `peer` files, nodes' too.
    pub ca: PathBuf,
    /// Every client must present a certificate the CA signed.
    pub require_client_cert: bool,
    /// The peer settings, when not the client ones.
    pub peer: Option<PeerFiles>,
}

/// The peer settings: this node's certificate and key toward other nodes (shown when it
/// serves them and when it dials them), and the CA that signs every node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        file: path.to_path_buf(),
        source,
    })
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&read(path)?)
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::Pem {
            file: path.to_path_buf(),
            what: "certificate file",
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            file: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(&read(path)?).map_err(|source| TlsError::Pem {
        file: path.to_path_buf(),
        what: "private key",
        source,
    })
}

/// A CA file's certificates, read once, as a root store.
fn roots(
    ca: &Path,
    certs: &[CertificateDer<'static>],
) -> Result<Arc<rustls::RootCertStore>, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert.clone()).map_err(|source| TlsError::Ca {
            file: ca.to_path_buf(),
            source,
        })?;
    }
    Ok(Arc::new(roots))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration: `cert` + `key` shown, client certificates verified against the
/// CA certificates `ca_certs` (of file `ca`; required or optional), HTTP/2.
fn server_config(
    cert: &Path,
    key_file: &Path,
    (ca, ca_certs): (&Path, &[CertificateDer<'static>]),
    require_client_cert: bool,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        roots(ca, ca_certs)?,
        provider(),
    );
    let verifier = if require_client_cert {
        verifier
    } else {
        verifier.allow_unauthenticated()
    }
    .build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(cert)?, key(key_file)?)
        .map_err(|source| TlsError::Pair {
            cert: cert.to_path_buf(),
            source,
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// What the port answers with: the client and the peer settings.
#[derive(Clone)]
pub struct ServerConfigs {
    client: Arc<rustls::ServerConfig>,
    peer: Arc<rustls::ServerConfig>,
    /// The client CA is the peer CA: a client connection's certificate may name a node.
    one_ca: bool,
}

impl TlsFiles {
    /// The peer settings' files: their own, or the client ones.
    pub fn peer_files(&self) -> PeerFiles {
        self.peer.clone().unwrap_or_else(|| PeerFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.ca.clone(),
        })
    }

    /// The server configurations, client and peer. Each CA file is read once, so whether
    /// the two are one is decided on the certificates the verifiers were built from (the
    /// same set, in any order or PEM layout).
    pub fn server_configs(&self) -> Result<ServerConfigs, TlsError> {
        let peer = self.peer_files();
        let client_ca = certs(&self.ca)?;
        let peer_ca = if peer.ca == self.ca {
            client_ca.clone()
        } else {
            certs(&peer.ca)?
        };
        let set = |c: &[CertificateDer<'static>]| {
            c.iter()
                .map(|c| c.as_ref().to_vec())
                .collect::<std::collections::BTreeSet<_>>()
        };
        Ok(ServerConfigs {
            client: server_config(
                &self.cert,
                &self.key,
                (&self.ca, &client_ca),
                self.require_client_cert,
            )?,
            peer: server_config(&peer.cert, &peer.key, (&peer.ca, &peer_ca), true)?,
            one_ca: set(&client_ca) == set(&peer_ca),
        })
    }

    /// How this node reaches another (Raft, forwarding, joining): it trusts the peer CA,
    /// shows its peer certificate, and offers [`PEER_ALPN`].
    pub fn outbound_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let peer = self.peer_files();
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Versions)?
            .with_root_certificates(roots(&peer.ca, &certs(&peer.ca)?)?)
            .with_client_auth_cert(certs(&peer.cert)?, key(&peer.key)?)
            .map_err(|source| TlsError::Pair {
                cert: peer.cert.clone(),
                source,
            })?;
        config.alpn_protocols = vec![PEER_ALPN.to_vec(), b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed): the name a peer's
/// certificate must carry.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// This node's TLS toward other nodes (Raft, forwarding, joining), which SIGHUP replaces:
/// each replacement is a new generation, and a channel made with an older one is made again,
/// so new connections present the new certificate and trust the new CA.
#[derive(Debug)]
pub struct Outbound {
    current: std::sync::RwLock<(u64, Option<Arc<rustls::ClientConfig>>)>,
}

impl Outbound {
    pub fn new(config: Option<Arc<rustls::ClientConfig>>) -> Arc<Outbound> {
        Arc::new(Outbound {
            current: std::sync::RwLock::new((0, config)),
        })
    }

    /// The generation and the settings of now (`None`: plaintext).
    pub fn current(&self) -> (u64, Option<Arc<rustls::ClientConfig>>) {
        self.current.read().expect("outbound TLS lock").clone()
    }

    pub fn generation(&self) -> u64 {
        self.current.read().expect("outbound TLS lock").0
    }

    fn replace(&self, config: Arc<rustls::ClientConfig>) {
        let mut current = self.current.write().expect("outbound TLS lock");
        *current = (current.0 + 1, Some(config));
    }
}

/// Dials another node over TLS with the peer settings: tonic's own TLS cannot offer
/// [`PEER_ALPN`], so the channel is plain HTTP/2 over the stream this makes.
#[derive(Clone)]
struct PeerConnector {
    config: Arc<rustls::ClientConfig>,
    addr: String,
    /// The name the peer's certificate must carry (`host_of(addr)`).
    name: ServerName<'static>,
}

type PeerStream = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tower_service::Service<tonic::codegen::http::Uri> for PeerConnector {
    type Response = PeerStream;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<PeerStream, std::io::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), std::io::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: tonic::codegen::http::Uri) -> Self::Future {
        let (config, addr, name) = (self.config.clone(), self.addr.clone(), self.name.clone());
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(&addr).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}

/// A lazily connected channel to the node at `addr` (`host:port`), over TLS with the peer
/// settings when `tls` is given, Nagle off.
pub fn channel(
    addr: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    connect_timeout: Duration,
) -> Result<tonic::transport::Channel, TlsError> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| TlsError::Address {
            addr: addr.to_owned(),
            detail: e.to_string(),
        })?
        .tcp_nodelay(true)
        .connect_timeout(connect_timeout);
    Ok(match tls {
        None => endpoint.connect_lazy(),
        Some(config) => {
            // The name the peer's certificate must carry: a bad one is a bad address now,
            // not an unreachable peer at every connect.
            let name =
                ServerName::try_from(host_of(addr).to_string()).map_err(|e| TlsError::Address {
                    addr: addr.to_owned(),
                    detail: e.to_string(),
                })?;
            endpoint.connect_with_connector_lazy(PeerConnector {
                config: config.clone(),
                addr: addr.to_string(),
                name,
            })
        }
    })
}

/// What a request knows of its TLS connection (a request extension).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    /// The connection offered [`PEER_ALPN`] and was served with the peer settings.
    pub peer_link: bool,
    /// The common name of the verified client certificate, read once per connection.
    pub common_name: Option<Arc<str>>,
    /// That certificate is a node's: its common name starts with "baton node ", and the peer
    /// CA verified it.
    pub node: bool,
}

/// The remote address of a request, TLS or not.
pub fn remote_addr<T>(req: &tonic::Request<T>) -> Option<SocketAddr> {
    req.extensions()
        .get::<ConnInfo>()
        .and_then(|c| c.remote)
        .or_else(|| req.remote_addr())
}

/// An accepted TLS connection, with what its requests know of it.
pub struct Conn<IO> {
    tls: tokio_rustls::server::TlsStream<IO>,
    info: ConnInfo,
}

impl<IO> tonic::transport::server::Connected for Conn<IO>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl<IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncRead for Conn<IO> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().tls).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Conn<IO> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().tls).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().tls).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().tls).poll_shutdown(cx)
    }
}

/// The handshake of one connection: the ClientHello picks the settings.
async fn handshake<IO>(
    io: IO,
    remote: Option<SocketAddr>,
    configs: ServerConfigs,
) -> std::io::Result<Conn<IO>>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let start =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await?;
    let peer_link = start
        .client_hello()
        .alpn()
        .is_some_and(|mut offered| offered.any(|p| p == PEER_ALPN));
    let config = if peer_link {
        configs.peer
    } else {
        configs.client
    };
    let tls = start.into_stream(config).await?;
    let common_name: Option<Arc<str>> = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| common_name(c))
        .map(Arc::from);
    let node = (peer_link || configs.one_ca)
        && common_name
            .as_deref()
            .is_some_and(|cn| cn.starts_with(NODE_CN_PREFIX));
    Ok(Conn {
        tls,
        info: ConnInfo {
            remote,
            peer_link,
            common_name,
            node,
        },
    })
}

/// Accepted connections, after the TLS handshake (each in its own task, with a deadline).
pub fn accept<S, IO>(
    incoming: S,
    configs: tokio::sync::watch::Receiver<ServerConfigs>,
) -> impl futures::Stream<Item = Result<Conn<IO>, std::io::Error>>
where
    S: futures::Stream<Item = Result<IO, std::io::Error>> + Send + 'static,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected<ConnectInfo = tonic::transport::server::TcpConnectInfo>
        + Unpin
        + Send
        + 'static,
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
            let remote = io.connect_info().remote_addr();
            // The configuration as of now: a reload (SIGHUP) reaches new connections.
            let configs = configs.borrow().clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, handshake(io, remote, configs))
                    .await
                {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(tls)).await;
                    }
                    // Not a TLS record at all: a client speaking plaintext to this port.
                    Ok(Err(e)) if e.to_string().contains("InvalidContentType") => tracing::warn!(
                        error = %e, remote = ?remote,
                        "a client spoke plaintext to this TLS port: give it the CA (--tls-ca)"
                    ),
                    Ok(Err(e)) => tracing::warn!(
                        error = %e, remote = ?remote,
                        "TLS handshake failed (a certificate the CA did not sign, or not a \
                         node's where one is needed?)"
                    ),
                    Err(_) => tracing::warn!(remote = ?remote, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// Reads the TLS files again on every SIGHUP and hands new connections the new
/// configurations; a file that does not load is logged and the old configurations stay.
/// Connections already open keep theirs. The same goes for this node's side of connections
/// to other nodes (`Outbound`): new ones show the new certificate and trust the new CA.
pub fn reload_on_sighup(
    files: TlsFiles,
    configs: tokio::sync::watch::Sender<ServerConfigs>,
    outbound: Arc<Outbound>,
) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match files
                .server_configs()
                .and_then(|s| Ok((s, files.outbound_config()?)))
            {
                Ok((new, client)) => {
                    let _ = configs.send(new);
                    outbound.replace(client);
                    tracing::info!(
                        cert = %files.cert.display(), peer_cert = %files.peer_files().cert.display(),
                        "reloaded the TLS certificates"
                    );
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
/// real ones from your own CA): `ca.pem` + `ca-key.pem`; per node `node-ID.pem` +
/// `node-ID-key.pem` valid for its host names (and `localhost`, `127.0.0.1`); per client
/// `client-NAME.pem` + `client-NAME-key.pem`. With `peer_ca`, the peer settings get their
/// own CA: `peer-ca.pem` + `peer-ca-key.pem`, and per node `peer-ID.pem` + `peer-ID-key.pem`
/// (then `node-ID.pem` is only a server certificate toward clients). Returns the files
/// written.
pub fn generate(
    dir: &Path,
    nodes: &[(u64, Vec<String>)],
    clients: &[String],
    peer_ca: bool,
) -> Result<Vec<PathBuf>, TlsError> {
    use rcgen::{
        BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
        KeyPair, KeyUsagePurpose,
    };
    // A client certificate named like a node's would be a node's: never bound by permissions.
    let node_prefix = NODE_CN_PREFIX.trim_end();
    if let Some(c) = clients.iter().find(|c| c.starts_with(node_prefix)) {
        return Err(TlsError::NodeName { name: c.clone() });
    }
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        file: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    // A private key (`*-key.pem`, the CAs' too) is readable by its owner only, from the
    // moment it exists; a certificate is public.
    let mut write = |name: String, text: String| -> Result<(), TlsError> {
        let path = dir.join(&name);
        let private = name.ends_with("-key.pem");
        write_file(&path, &text, private).map_err(|source| TlsError::Write {
            file: path.clone(),
            source,
        })?;
        written.push(path);
        Ok(())
    };
    let mut new_ca = |file: &str, cn: &str| -> Result<(Certificate, KeyPair), TlsError> {
        let key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, cn);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = ca.self_signed(&key)?;
        write(format!("{file}.pem"), cert.pem())?;
        write(format!("{file}-key.pem"), key.serialize_pem())?;
        Ok((cert, key))
    };
    let client_ca = new_ca("ca", "baton CA")?;
    let peer = if peer_ca {
        Some(new_ca("peer-ca", "baton peer CA")?)
    } else {
        None
    };
    let issue = |(ca_cert, ca_key): &(Certificate, KeyPair),
                 cn: String,
                 names: Vec<String>,
                 usages|
     -> Result<(String, String), TlsError> {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(names)?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = usages;
        let cert = p.signed_by(&key, ca_cert, ca_key)?;
        Ok((cert.pem(), key.serialize_pem()))
    };
    let mut files = Vec::new();
    for (id, hosts) in nodes {
        let mut names = hosts.clone();
        for local in ["localhost", "127.0.0.1"] {
            if !names.iter().any(|n| n == local) {
                names.push(local.into());
            }
        }
        let both = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cn = format!("baton node {id}");
        match &peer {
            None => files.push((format!("node-{id}"), issue(&client_ca, cn, names, both)?)),
            Some(peer) => {
                let server_only = vec![ExtendedKeyUsagePurpose::ServerAuth];
                files.push((
                    format!("node-{id}"),
                    issue(&client_ca, cn.clone(), names.clone(), server_only)?,
                ));
                files.push((format!("peer-{id}"), issue(peer, cn, names, both)?));
            }
        }
    }
    for name in clients {
        let usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        files.push((
            format!("client-{name}"),
            issue(&client_ca, name.clone(), Vec::new(), usages)?,
        ));
    }
    for (file, (cert, key)) in files {
        write(format!("{file}.pem"), cert)?;
        write(format!("{file}-key.pem"), key)?;
    }
    Ok(written)
}

/// Writes `text` to `path`; a `private` file is created mode 0600, and one that was there is
/// set to 0600 before it is written.
fn write_file(path: &Path, text: &str, private: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.create(true).write(true).truncate(true);
    if private {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    let mut f = options.open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
#[path = "tls_tests.rs"]
mod tests;
