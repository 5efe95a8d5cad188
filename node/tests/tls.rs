//! TLS on real nodes: certificates from `baton-node certs`, a 3-node
//! cluster whose clients and Raft traffic go over TLS, and what it refuses: plaintext, a
//! certificate another CA signed, Raft messages without a node certificate, and, with
//! `--tls-client-auth`, a client without a certificate.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use baton_client::{ClaimOutcome, Client, ClientConfig, ClientTls};
use common::{node_bin, serial, Cluster};

const TTL: Duration = Duration::from_secs(30);

/// `baton-node certs` into `dir`: a certificate for each of nodes 1 to 3 (valid for
/// 127.0.0.1) and clients `agent` and `other`.
fn certs(dir: &Path) {
    let out = Command::new(node_bin())
        .args(["certs", "--dir"])
        .arg(dir)
        .args([
            "--node",
            "1=127.0.0.1",
            "--node",
            "2=127.0.0.1",
            "--node",
            "3=127.0.0.1",
            "--client",
            "agent",
            "--client",
            "other",
        ])
        .output()
        .unwrap();
    assert_ran(&out);
}

/// Fails the test with the command's stderr unless it exited 0.
fn assert_ran(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each node's own certificate (`{id}` is the harness's placeholder for the node's id).
fn node_flags(dir: &Path) -> Vec<String> {
    let f = |name: &str| dir.join(name).display().to_string();
    vec![
        "--tls-cert".into(),
        f("node-{id}.pem"),
        "--tls-key".into(),
        f("node-{id}-key.pem"),
        "--tls-ca".into(),
        f("ca.pem"),
    ]
}

/// Two sets of certificates from two CAs under `dir` (`old`, `new`), and `live`, the files
/// the nodes read, holding the old set.
fn two_pkis(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (old, new, live) = (dir.join("old"), dir.join("new"), dir.join("live"));
    certs(&old);
    certs(&new);
    install_pki(&old, &live);
    (old, new, live)
}

/// Copies a node's certificate, key and CA from `from` into `live`.
fn install_pki(from: &Path, live: &Path) {
    std::fs::create_dir_all(live).unwrap();
    for id in 1..=3 {
        for name in [format!("node-{id}.pem"), format!("node-{id}-key.pem")] {
            std::fs::copy(from.join(&name), live.join(&name)).unwrap();
        }
    }
    std::fs::copy(from.join("ca.pem"), live.join("ca.pem")).unwrap();
}

fn client_tls(dir: &Path, with_cert: bool) -> ClientTls {
    client_tls_as(dir, with_cert.then_some("agent"))
}

/// TLS settings of a client with the certificate of `who` (or none).
fn client_tls_as(dir: &Path, who: Option<&str>) -> ClientTls {
    client_tls_showing(dir, who.map(|w| format!("client-{w}")).as_deref())
}

/// TLS settings of a client trusting `dir/ca.pem` and showing the certificate `STEM.pem`
/// with its key `STEM-key.pem` (or none).
fn client_tls_showing(dir: &Path, stem: Option<&str>) -> ClientTls {
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    ClientTls {
        ca_pem: read("ca.pem"),
        identity: stem.map(|s| (read(&format!("{s}.pem")), read(&format!("{s}-key.pem")))),
    }
}

async fn client(cluster: &Cluster, tls: Option<ClientTls>) -> Client {
    Client::connect(ClientConfig {
        endpoints: cluster.endpoints(),
        retry_deadline: Duration::from_secs(3),
        request_timeout: Duration::from_secs(1),
        tls,
        ..ClientConfig::default()
    })
    .await
    .unwrap()
}

/// A Raft vote sent to node 1 over TLS, with the client certificate of `who` (or none):
/// the refusal it gets.
async fn raft_vote_over_tls(cluster: &Cluster, pki: &Path, who: Option<&str>) -> tonic::Status {
    let read = |name: &str| std::fs::read(pki.join(name)).unwrap();
    let mut tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.pem")))
        .domain_name("127.0.0.1");
    if let Some(w) = who {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            read(&format!("client-{w}.pem")),
            read(&format!("client-{w}-key.pem")),
        ));
    }
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("https://{}", cluster.nodes[&1].addr))
            .unwrap()
            .tls_config(tls)
            .unwrap();
    let mut raft = baton_proto::v1::raft_client::RaftClient::connect(endpoint)
        .await
        .unwrap();
    raft.vote(baton_proto::v1::RaftRequest {
        target_node_id: 1,
        cluster_name: "baton".into(),
        ..Default::default()
    })
    .await
    .unwrap_err()
}

fn flags_ref(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_tls_clients_and_refuses_plaintext_and_strangers() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let pki: PathBuf = dir.path().join("pki");
    certs(&pki);
    let flags = node_flags(&pki);
    // The cluster forms over TLS (Raft between nodes included).
    let cluster = Cluster::start_tls(3, &flags_ref(&flags), client_tls(&pki, true)).await;

    let agent = client(&cluster, Some(client_tls(&pki, true))).await;
    let granted = agent.claim("tls/a", "agent", TTL).await.unwrap();
    assert!(matches!(granted, ClaimOutcome::Granted(_)), "{granted:?}");
    // Without a client certificate (not required here) a client is served too.
    let anonymous = client(&cluster, Some(client_tls(&pki, false))).await;
    assert!(anonymous
        .probe("tls/a", baton_client::ReadMode::Linearizable)
        .await
        .is_ok());

    // Plaintext gets no answer.
    let plain = client(&cluster, None).await;
    let refused = plain.claim("tls/b", "plain", TTL).await;
    assert!(
        matches!(refused, Err(baton_client::Error::Unavailable { .. })),
        "{refused:?}"
    );

    // A certificate of another CA is refused in the handshake.
    let other = dir.path().join("other");
    certs(&other);
    let mut stranger_tls = client_tls(&pki, false);
    let read = |name: &str| std::fs::read(other.join(name)).unwrap();
    stranger_tls.identity = Some((read("client-agent.pem"), read("client-agent-key.pem")));
    let stranger = client(&cluster, Some(stranger_tls)).await;
    assert!(stranger.claim("tls/c", "stranger", TTL).await.is_err());

    // Raft traffic needs a node certificate: a TLS client without one is refused.
    let status = raft_vote_over_tls(&cluster, &pki, None).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");

    // The CLI speaks TLS with --tls-ca (and a client certificate), to host:port endpoints
    // and to https:// ones (those used to be refused as "not supported yet").
    let cli = |endpoints: String, args: &[&str]| {
        Command::new(node_bin().with_file_name("baton"))
            .arg("--endpoints")
            .arg(endpoints)
            .arg("--tls-ca")
            .arg(pki.join("ca.pem"))
            .arg("--tls-cert")
            .arg(pki.join("client-agent.pem"))
            .arg("--tls-key")
            .arg(pki.join("client-agent-key.pem"))
            .args(args)
            .args(["--output", "json"])
            .env_remove("BATON_ENDPOINTS")
            .output()
            .unwrap()
    };
    assert_ran(&cli(
        cluster.endpoints().join(","),
        &["claim", "tls/cli", "--ttl", "30s"],
    ));
    let https: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| format!("https://{e}"))
        .collect();
    assert_ran(&cli(https.join(","), &["probe", "tls/cli"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_client_auth_a_client_needs_a_certificate_and_acts_only_as_itself() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let mut flags = node_flags(dir.path());
    flags.push("--tls-client-auth".into());
    let cluster = Cluster::start_tls(3, &flags_ref(&flags), client_tls(dir.path(), true)).await;
    // A client without a certificate is told so at once (not retried until its deadline as
    // if the cluster were down), naming what to give.
    let without = client(&cluster, Some(client_tls(dir.path(), false))).await;
    let refused = without.claim("mtls/b", "nobody", TTL).await;
    assert!(
        matches!(&refused, Err(baton_client::Error::Unauthenticated(m))
            if m.contains("requires a client certificate") && m.contains("--tls-cert")),
        "{refused:?}"
    );

    // The holder is the certificate's principal: no one claims as another.
    let agent = client(&cluster, Some(client_tls_as(dir.path(), Some("agent")))).await;
    let other = client(&cluster, Some(client_tls_as(dir.path(), Some("other")))).await;
    let ClaimOutcome::Granted(g) = agent.claim("mtls/a", "agent", TTL).await.unwrap() else {
        panic!("mtls/a held");
    };
    let as_other = agent.claim("mtls/c", "other", TTL).await.unwrap_err();
    assert!(
        as_other.to_string().contains("cannot act as holder"),
        "{as_other}"
    );
    // Nor releases, renews or updates another's key, even with its token.
    let token = g.lease.token;
    let e = other.release("mtls/a", token).await.unwrap_err();
    assert!(e.to_string().contains("is \"agent\"'s"), "{e}");
    assert!(other.renew("mtls/a", token).await.is_err());
    let patch = baton_client::RecordPatch {
        status: Some("hijacked".into()),
        ..Default::default()
    };
    assert!(other.update("mtls/a", token, patch).await.is_err());
    let probe = agent
        .probe("mtls/a", baton_client::ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(
        probe.lease.map(|l| l.token),
        Some(token),
        "the lease is untouched"
    );
    // Through a follower, which forwards the principal to the leader, the same holds.
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    // Each principal's second connection acts as its first one's session, as one agent's
    // processes do.
    let via_follower = |who: &'static str, session: String| {
        let (addr, dir) = (cluster.nodes[&follower].addr.clone(), dir.path().to_owned());
        async move {
            Client::connect(ClientConfig {
                endpoints: vec![addr],
                follow_leader_hints: false,
                retry_deadline: Duration::from_secs(5),
                tls: Some(client_tls_as(&dir, Some(who))),
                client_id: Some(session),
                ..ClientConfig::default()
            })
            .await
            .unwrap()
        }
    };
    let agent_via = via_follower("agent", agent.client_id().to_owned()).await;
    assert!(agent_via.renew("mtls/a", token).await.is_ok());
    let other_via = via_follower("other", other.client_id().to_owned()).await;
    assert!(other_via.release("mtls/a", token).await.is_err());

    // A client certificate, though the CA signed it, carries no Raft traffic.
    let status = raft_vote_over_tls(&cluster, dir.path(), Some("agent")).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");

    // A policy that leaves no one admin is refused: no one could change it again.
    let no_admin = "[[rule]]\nwho = [\"agent\"]\nprefixes = [\"mtls/\"]\ncan = [\"read\"]\n";
    let e = agent.set_access(no_admin).await.unwrap_err();
    assert!(e.to_string().contains("leaves no one admin"), "{e}");
    // One whose only admin has no certificate locks every client out of the administration,
    // but not a node certificate, which the policy never binds: the runbook's way back in.
    let locked =
        format!("{no_admin}\n[[rule]]\nwho = [\"root\"]\nprefixes = [\"\"]\ncan = [\"admin\"]\n");
    let locked = locked.as_str();
    assert!(agent.set_access(locked).await.is_ok());
    let e = agent.set_access(locked).await.unwrap_err();
    assert!(matches!(e, baton_client::Error::PermissionDenied(_)), "{e}");
    assert!(other.claim("mtls/d", "other", TTL).await.is_err());
    let as_node = client(
        &cluster,
        Some(client_tls_showing(dir.path(), Some("node-1"))),
    )
    .await;
    let cleared = as_node.clear_access().await.unwrap();
    assert_eq!(cleared.audit.last().unwrap().by, "baton node 1");
    assert!(other.claim("mtls/d", "other", TTL).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificates_without_a_restart() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let (old, new, live) = two_pkis(dir.path());
    let install = |from: &Path| install_pki(from, &live);
    let mut cluster =
        Cluster::start_tls(1, &flags_ref(&node_flags(&live)), client_tls(&old, true)).await;
    let pid = cluster.nodes[&1].child.as_ref().unwrap().id();
    assert!(client(&cluster, Some(client_tls(&old, true)))
        .await
        .claim("hup/a", "agent", TTL)
        .await
        .is_ok());

    // New files, then SIGHUP: new connections get the new certificate.
    install(&new);
    cluster.signal(1, "HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = client(&cluster, Some(client_tls(&new, true))).await;
        if fresh.claim("hup/b", "agent", TTL).await.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate was not served\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let stale = client(&cluster, Some(client_tls(&old, true))).await;
    assert!(
        stale.claim("hup/c", "agent", TTL).await.is_err(),
        "a client trusting only the old CA still got through"
    );
    // The same process all along; a bad file on the next SIGHUP keeps the certificate in use.
    assert_eq!(cluster.nodes[&1].child.as_ref().unwrap().id(), pid);
    std::fs::write(live.join("node-1.pem"), "not a certificate").unwrap();
    cluster.signal(1, "HUP");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fresh = client(&cluster, Some(client_tls(&new, true))).await;
    assert!(fresh.claim("hup/d", "agent", TTL).await.is_ok());
    let log = std::fs::read_to_string(&cluster.nodes[&1].log).unwrap();
    assert!(
        log.contains("could not reload the TLS certificates"),
        "{log}"
    );
    cluster.kill(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_ca_is_refused_and_readyz_and_the_logs_say_why() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let (good, other) = (dir.path().join("good"), dir.path().join("other"));
    certs(&good);
    certs(&other);
    let with_admin = |pki: &Path| {
        let mut flags = node_flags(pki);
        flags.extend(["--admin-listen".into(), "127.0.0.1:0".into()]);
        flags
    };
    let mut cluster =
        Cluster::start_tls(3, &flags_ref(&with_admin(&good)), client_tls(&good, false)).await;
    // Node 3 comes back with certificates of another CA: nobody trusts it, it trusts nobody.
    cluster.stop(3);
    cluster.extra_args = with_admin(&other);
    cluster.start_node(3);
    // Nodes 1 and 2 once, node 3 twice: it has restarted.
    cluster
        .wait_logged("admin listening on ", 4, Duration::from_secs(10))
        .await;
    let admin3 = common::admin_addr(&cluster, 3).await;
    let (admin1, admin2) = (
        common::admin_addr(&cluster, 1).await,
        common::admin_addr(&cluster, 2).await,
    );

    // The odd node out is not ready, and says it is TLS; the others are ready, the leader
    // (which sends to node 3) with a warning.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code3, body3) = common::http_get(&admin3, "/readyz").await;
        let (code1, body1) = common::http_get(&admin1, "/readyz").await;
        let (code2, body2) = common::http_get(&admin2, "/readyz").await;
        let warned = |body: &str| body.contains("warning: peer 3: TLS");
        if code3 == 503
            && body3.contains("TLS")
            && (code1, code2) == (200, 200)
            && (warned(&body1) || warned(&body2))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 3: {code3} {body3:?}; node 1: {code1} {body1:?}; node 2: {code2} {body2:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(cluster.logged("cannot talk to a peer over TLS: do both nodes trust the same CA") > 0);
    let (_, metrics) = common::http_get(&admin3, "/metrics").await;
    let failures = metrics
        .lines()
        .find(|l| l.starts_with("baton_peer_tls_failures_total "))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok());
    assert!(failures.is_some_and(|n| n > 0.0), "{metrics}");
    // Nodes 1 and 2 still make a quorum.
    let c = client(&cluster, Some(client_tls(&good, false))).await;
    assert!(matches!(
        c.claim("ca/a", "agent", TTL).await.unwrap(),
        ClaimOutcome::Granted(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificate_and_ca_a_node_uses_toward_its_peers() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let (old, new, live) = two_pkis(dir.path());
    let install = |from: &Path| install_pki(from, &live);
    let mut cluster =
        Cluster::start_tls(3, &flags_ref(&node_flags(&live)), client_tls(&old, false)).await;

    // A new CA for every node: new files, then SIGHUP, no restart.
    install(&new);
    for id in 1..=3 {
        cluster.signal(id, "HUP");
    }
    cluster
        .wait_logged("reloaded the TLS certificates", 3, Duration::from_secs(10))
        .await;
    // Node 3 misses a write and comes back: the leader's new connection to it must show the
    // new certificate and trust the new CA, or node 3 never catches up.
    cluster.stop(3);
    cluster.tls = Some(client_tls(&new, false));
    let ClaimOutcome::Granted(g) = cluster
        .client()
        .await
        .claim("rotate/a", "agent", TTL)
        .await
        .unwrap()
    else {
        panic!("rotate/a held");
    };
    cluster.start_node(3);
    let at_3 = cluster.client_of(3).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let probe = at_3.probe("rotate/a", baton_client::ReadMode::Stale).await;
        if probe
            .as_ref()
            .is_ok_and(|p| p.lease.as_ref().is_some_and(|l| l.token == g.lease.token))
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node 3 did not catch up: {probe:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes `client-FILE.pem` and its key into `pki`: a client certificate named `cn`, signed
/// by the CA of `pki/ca-key.pem` (the CA certificate is made again from its key and name, so
/// what it signs chains to `ca.pem`).
fn mint_client_cert(pki: &Path, file: &str, cn: &str) {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let ca_key =
        KeyPair::from_pem(&std::fs::read_to_string(pki.join("ca-key.pem")).unwrap()).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "baton CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, cn);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    std::fs::write(pki.join(format!("client-{file}.pem")), cert.pem()).unwrap();
    std::fs::write(
        pki.join(format!("client-{file}-key.pem")),
        key.serialize_pem(),
    )
    .unwrap();
}

/// A Raft vote sent to node 1 as node `sender` over the peer settings (ALPN `baton-peer`),
/// showing `cert` + `key` and trusting the peer CA (files in `pki`): the node's answer, or
/// the transport's error.
async fn raft_vote_as_peer(
    cluster: &Cluster,
    pki: &Path,
    (cert, key): (&str, &str),
    sender: u64,
) -> tonic::Status {
    let files = baton_node::tls::TlsFiles {
        cert: pki.join(cert),
        key: pki.join(key),
        ca: pki.join("peer-ca.pem"),
        require_client_cert: true,
        peer: None,
    };
    let channel = baton_node::tls::channel(
        &cluster.nodes[&1].addr,
        Some(&files.outbound_config().unwrap()),
        Duration::from_secs(2),
    )
    .unwrap();
    baton_proto::v1::raft_client::RaftClient::new(channel)
        .vote(baton_proto::v1::RaftRequest {
            target_node_id: 1,
            cluster_name: "baton".into(),
            sender_node_id: sender,
            ..Default::default()
        })
        .await
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_peer_ca_client_and_node_certificates_do_not_stand_in_for_each_other() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path();
    let out = Command::new(node_bin())
        .args(["certs", "--peer-ca", "--dir"])
        .arg(pki)
        .args([
            "--node",
            "1=127.0.0.1",
            "--node",
            "2=127.0.0.1",
            "--node",
            "3=127.0.0.1",
        ])
        .args(["--client", "agent", "--client", "agënt"])
        .output()
        .unwrap();
    assert_ran(&out);
    let f = |name: &str| pki.join(name).display().to_string();
    let mut flags = node_flags(pki);
    flags.extend([
        "--tls-client-auth".into(),
        "--peer-tls-cert".into(),
        f("peer-{id}.pem"),
        "--peer-tls-key".into(),
        f("peer-{id}-key.pem"),
        "--peer-tls-ca".into(),
        f("peer-ca.pem"),
    ]);
    // The cluster forms over the peer settings, and serves clients over theirs.
    let cluster = Cluster::start_tls(3, &flags_ref(&flags), client_tls(pki, true)).await;
    cluster.leader(Duration::from_secs(10)).await;
    // Through every node, followers forwarding to the leader over the peer settings with
    // the client's principal; "agënt", a principal that is not ASCII (a certificate's UTF-8
    // common name), is forwarded whole and binds as any other.
    for id in 1..=3u64 {
        for (who, other) in [("agent", "other"), ("agënt", "agent")] {
            let client = Client::connect(ClientConfig {
                endpoints: vec![cluster.nodes[&id].addr.clone()],
                follow_leader_hints: false,
                retry_deadline: Duration::from_secs(5),
                tls: Some(client_tls_as(pki, Some(who))),
                ..ClientConfig::default()
            })
            .await
            .unwrap();
            let key = format!("peer/{who}/{id}");
            let granted = client.claim(&key, who, TTL).await.unwrap();
            assert!(matches!(granted, ClaimOutcome::Granted(_)), "{granted:?}");
            // The principal reached the leader: the client may not claim as another there.
            let e = client.claim(&key, other, TTL).await.unwrap_err();
            assert!(e.to_string().contains("cannot act as holder"), "{id}: {e}");
        }
    }

    // A node's peer certificate over the peer settings is a node's: the vote gets past the
    // certificate check (and fails on its empty payload)...
    let peer_2 = ("peer-2.pem", "peer-2-key.pem");
    let status = raft_vote_as_peer(&cluster, pki, peer_2, 2).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    // ... but only as its own node: node 2's certificate cannot vote as node 3.
    let status = raft_vote_as_peer(&cluster, pki, peer_2, 3).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
    assert!(
        status.message().contains("cannot send as node 3"),
        "{status}"
    );
    // A client certificate offered to the peer settings fails the handshake: the peer CA
    // did not sign it. With TLS 1.3 the client learns so as a broken connection: the call
    // fails in the transport (unavailable, cancelled or unknown, by timing), never in the
    // service; the node's log says it refused the handshake (checked below).
    let status = raft_vote_as_peer(
        &cluster,
        pki,
        ("client-agent.pem", "client-agent-key.pem"),
        1,
    )
    .await;
    assert!(
        matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
        ),
        "{status}"
    );
    // Over the client settings, a client certificate is no node's.
    let status = raft_vote_over_tls(&cluster, pki, Some("agent")).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
    // And a node's peer certificate is no client's: the client CA did not sign it, so it
    // is no way around the permissions from the client port.
    let as_node = client(&cluster, Some(client_tls_showing(pki, Some("peer-1")))).await;
    let e = as_node.clear_access().await.unwrap_err();
    assert!(
        matches!(e, baton_client::Error::Unavailable { .. }),
        "refused in the handshake: {e}"
    );
    // A client-CA certificate named like a node's (made here: `baton-node certs` refuses
    // such a client name) is no node's: its Raft vote is refused, and so is a call that only
    // a node could make past the policy.
    mint_client_cert(pki, "fake", "baton node 9");
    let status = raft_vote_over_tls(&cluster, pki, Some("fake")).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
    let fake = client(&cluster, Some(client_tls_as(pki, Some("fake")))).await;
    let e = fake.clear_access().await.unwrap_err();
    assert!(
        matches!(e, baton_client::Error::PermissionDenied(_))
            && e.to_string().contains("node's name"),
        "{e}"
    );
    // The nodes say why they refused.
    cluster
        .wait_logged("TLS handshake failed", 2, Duration::from_secs(5))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_without_auth_forwards_its_clients_as_anonymous_not_as_itself() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    certs(dir.path());
    let mut flags = node_flags(dir.path());
    flags.push("--tls-client-auth".into());
    let mut cluster = Cluster::start_tls(3, &flags_ref(&flags), client_tls(dir.path(), true)).await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    // A misconfigured follower: auth off. It forwards writes with its node certificate,
    // which the leader trusts to name the client's principal, and it names none.
    cluster.stop(follower);
    cluster.extra_args.retain(|a| a != "--tls-client-auth");
    cluster.start_node(follower);
    let via_follower = Client::connect(ClientConfig {
        endpoints: vec![cluster.nodes[&follower].addr.clone()],
        follow_leader_hints: false,
        retry_deadline: Duration::from_secs(10),
        tls: Some(client_tls(dir.path(), false)),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let e = via_follower
        .claim("open/x", "mallory", TTL)
        .await
        .unwrap_err();
    assert!(
        matches!(e, baton_client::Error::Unauthenticated(_)),
        "the leader serves it as anonymous, which it refuses, not as the node: {e}"
    );
    assert_ne!(
        cluster.leader(Duration::from_secs(10)).await,
        follower,
        "the test needs the misconfigured node to stay a follower"
    );
    // Nothing was granted (asked of the leader: the follower forwards reads too).
    let agent = Client::connect(ClientConfig {
        endpoints: vec![cluster.nodes[&leader].addr.clone()],
        tls: Some(client_tls(dir.path(), true)),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let probe = agent
        .probe("open/x", baton_client::ReadMode::Linearizable)
        .await
        .unwrap();
    assert!(probe.lease.is_none(), "{probe:?}");
}
