//! Test harness: real `baton-node` processes on loopback, each with its own free port and
//! temp data dir, started here and stopped by PID (SIGKILL) when the test ends.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, MutexGuard};

use baton_client::{Client, ClientConfig};

/// Cluster tests run one at a time: several 3-node clusters at once on a 2-core machine
/// would turn election timing into noise.
static SERIAL: Mutex<()> = Mutex::const_new(());

pub async fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// The `baton-node` binary the tests start (`baton` beside it): this build's, or the one in
/// `$BATON_TEST_BINS`, to run a test against another build (e.g. an older one, to show that
/// a regression test fails there).
pub fn node_bin() -> PathBuf {
    match std::env::var_os("BATON_TEST_BINS") {
        Some(dir) => PathBuf::from(dir).join("baton-node"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_baton-node")),
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    // Not `bind(0)`: that gives a port of the kernel's ephemeral range (32768-60999 on
    // Linux), which any outgoing connection of a parallel test may take between this check
    // and the node's own bind; a node that cannot bind never joins, and a start flaked on a
    // loaded machine. Ports below that range are only ever taken by a bind, and this process
    // never hands one out twice.
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = rand::Rng::gen_range(&mut rand::thread_rng(), FREE_PORTS);
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
}

/// Where [`free_port`] picks from: below Linux's ephemeral range.
pub const FREE_PORTS: std::ops::Range<u16> = 20_000..32_000;

pub struct NodeProc {
    pub id: u64,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub child: Option<Child>,
}

/// A cluster of real node processes.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub nodes: BTreeMap<u64, NodeProc>,
    pub initial_cluster: String,
    pub extra_args: Vec<String>,
    /// TLS for the harness's own clients, when the nodes run with it.
    pub tls: Option<baton_client::ClientTls>,
    /// The bearer token of the harness's own clients, when the nodes require one.
    pub token: Option<baton_client::BearerToken>,
}

impl Cluster {
    /// Starts `n` nodes forming one cluster and waits for a leader.
    pub async fn start(n: u64) -> Cluster {
        Self::start_with(n, &[]).await
    }

    pub async fn start_with(n: u64, extra_args: &[&str]) -> Cluster {
        Self::start_inner(n, extra_args, false, None, None, n)
            .await
            .0
    }

    /// A cluster of `n` members of which only nodes `1..=running` are started: the others
    /// have never been heard from (start them with `start_node`).
    pub async fn start_some(n: u64, running: u64) -> Cluster {
        Self::start_inner(n, &[], false, None, None, running)
            .await
            .0
    }

    /// Like `start_with`, for nodes that require a bearer token (`extra_args` has
    /// `--auth-tokens`); the harness's clients show `token`.
    pub async fn start_with_token(n: u64, extra_args: &[&str], token: &str) -> Cluster {
        let token = Some(baton_client::BearerToken(token.to_owned()));
        Self::start_inner(n, extra_args, false, None, token, n)
            .await
            .0
    }

    /// Like `start_with`, for nodes that speak TLS (`extra_args` has the node's TLS flags);
    /// the harness's clients use `tls`.
    pub async fn start_tls(n: u64, extra_args: &[&str], tls: baton_client::ClientTls) -> Cluster {
        Self::start_inner(n, extra_args, false, Some(tls), None, n)
            .await
            .0
    }

    /// Like `start_with`, but peers reach each node through a `Proxy` of its own (the
    /// address it advertises), so a test can cut every connection into one node, Raft
    /// traffic included, without pausing it. Clients still reach each node directly at
    /// `addr`.
    pub async fn start_behind_proxies(
        n: u64,
        extra_args: &[&str],
    ) -> (Cluster, BTreeMap<u64, Proxy>) {
        Self::start_inner(n, extra_args, true, None, None, n).await
    }

    async fn start_inner(
        n: u64,
        extra_args: &[&str],
        proxied: bool,
        tls: Option<baton_client::ClientTls>,
        token: Option<baton_client::BearerToken>,
        running: u64,
    ) -> (Cluster, BTreeMap<u64, Proxy>) {
        let dir = tempfile::tempdir().unwrap();
        let addrs: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, format!("127.0.0.1:{}", free_port())))
            .collect();
        let mut proxies = BTreeMap::new();
        if proxied {
            for (id, addr) in &addrs {
                proxies.insert(*id, Proxy::start(addr.clone()).await);
            }
        }
        let initial_cluster = addrs
            .iter()
            .map(|(id, a)| {
                let advertised = proxies.get(id).map_or(a, |p: &Proxy| &p.addr);
                format!("{id}={advertised}")
            })
            .collect::<Vec<_>>()
            .join(",");
        let nodes = addrs
            .into_iter()
            .map(|(id, addr)| {
                let node = NodeProc {
                    id,
                    data_dir: dir.path().join(format!("node{id}")),
                    log: dir.path().join(format!("node{id}.log")),
                    addr,
                    child: None,
                };
                (id, node)
            })
            .collect();
        let mut cluster = Cluster {
            dir,
            nodes,
            initial_cluster,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            tls,
            token,
        };
        for id in 1..=running {
            cluster.start_node(id);
        }
        cluster.leader(Duration::from_secs(20)).await;
        (cluster, proxies)
    }

    /// Starts node `id`; `{id}` in the extra args becomes its id (a certificate per node).
    pub fn start_node(&mut self, id: u64) {
        let mut how = vec!["--initial-cluster".to_owned(), self.initial_cluster.clone()];
        how.extend(
            self.extra_args
                .iter()
                .map(|a| a.replace("{id}", &id.to_string())),
        );
        self.spawn(id, &how);
    }

    /// Starts node `id` with `--join` through `through` instead of `--initial-cluster`.
    pub fn start_node_joining(&mut self, id: u64, through: &[String]) {
        let addr = self.nodes[&id].addr.clone();
        let mut how = ["--advertise", &addr, "--join", &through.join(",")]
            .map(str::to_owned)
            .to_vec();
        how.extend(
            self.extra_args
                .iter()
                .map(|a| a.replace("{id}", &id.to_string())),
        );
        self.spawn(id, &how);
    }

    /// Starts node `id` at its address and data dir, with `how` after those, logging to its
    /// log file.
    fn spawn(&mut self, id: u64, how: &[String]) {
        let node = self.nodes.get_mut(&id).unwrap();
        assert!(node.child.is_none(), "node {id} is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap();
        let child = Command::new(node_bin())
            .arg("--node-id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(&node.addr)
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(how)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start baton-node");
        node.child = Some(child);
    }

    /// kill -9 by PID.
    pub fn kill(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to a running node by PID.
    pub fn signal(&self, id: u64, signal: &str) {
        let pid = self.nodes[&id]
            .child
            .as_ref()
            .expect("node is running")
            .id();
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{signal} {pid}");
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.addr.clone()).collect()
    }

    pub fn running(&self) -> Vec<u64> {
        self.nodes
            .values()
            .filter(|n| n.child.is_some())
            .map(|n| n.id)
            .collect()
    }

    /// A client that knows every node.
    pub async fn client(&self) -> Client {
        Client::connect(ClientConfig {
            endpoints: self.endpoints(),
            retry_deadline: Duration::from_secs(20),
            tls: self.tls.clone(),
            token: self.token.clone(),
            ..ClientConfig::default()
        })
        .await
        .unwrap()
    }

    /// A client that talks to one node only.
    pub async fn client_of(&self, id: u64) -> Client {
        Client::connect(ClientConfig {
            endpoints: vec![self.nodes[&id].addr.clone()],
            retry_deadline: Duration::from_secs(20),
            tls: self.tls.clone(),
            token: self.token.clone(),
            ..ClientConfig::default()
        })
        .await
        .unwrap()
    }

    /// Waits until every running node agrees on one leader that is running; returns its id.
    pub async fn leader(&self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let running = self.running();
        loop {
            let mut leaders = Vec::new();
            for id in &running {
                let c = Client::connect(ClientConfig {
                    endpoints: vec![self.nodes[id].addr.clone()],
                    retry_deadline: Duration::from_millis(500),
                    request_timeout: Duration::from_millis(500),
                    tls: self.tls.clone(),
                    token: self.token.clone(),
                    ..ClientConfig::default()
                })
                .await
                .unwrap();
                match c.status_of(&self.nodes[id].addr).await {
                    Ok(s) => leaders.push(s.leader_id),
                    Err(_) => leaders.push(None),
                }
            }
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) && running.contains(l) {
                    return *l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no agreed leader within {timeout:?}: {leaders:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every node's log, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .values()
            .map(|n| {
                let text = std::fs::read_to_string(&n.log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!(
                    "--- node {} log (last 40 lines) ---\n{}",
                    n.id,
                    tail.join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// How many times `text` occurs in the nodes' whole logs (`logs` shows only the tails,
    /// for failure messages).
    pub fn logged(&self, text: &str) -> usize {
        self.nodes
            .values()
            .map(|n| {
                std::fs::read_to_string(&n.log)
                    .unwrap_or_default()
                    .matches(text)
                    .count()
            })
            .sum()
    }

    /// Waits up to `within` until the nodes' logs hold `text` at least `times` times.
    pub async fn wait_logged(&self, text: &str, times: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.logged(text) < times {
            assert!(
                Instant::now() < deadline,
                "{text:?} logged {} times, not {times}\n{}",
                self.logged(text),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops a node as an operator does: SIGTERM by PID, then waits up to 10 s for it to
    /// exit. One still running then is SIGKILLed, and that is said on stderr (as is an
    /// unclean exit status). Blocks the calling thread: from a tokio test, call it inside
    /// `tokio::task::block_in_place`.
    pub fn stop(&mut self, id: u64) {
        const BOUND: Duration = Duration::from_secs(10);
        let node = self.nodes.get_mut(&id).unwrap();
        let Some(mut child) = node.child.take() else {
            return;
        };
        let pid = child.id();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let deadline = Instant::now() + BOUND;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        eprintln!("node {id} (pid {pid}) exited uncleanly on SIGTERM: {status}");
                    }
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    eprintln!("node {id} (pid {pid}): waiting for it failed: {e}");
                    break;
                }
            }
        }
        eprintln!("node {id} (pid {pid}) still running {BOUND:?} after SIGTERM: SIGKILL");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            // SIGKILL also ends a SIGSTOPped process.
            self.kill(id);
        }
    }
}

/// A TCP proxy in front of one node that the test can cut: while cut, it drops every open
/// connection and refuses new ones. Lets one client lose the cluster while others keep it.
pub struct Proxy {
    pub addr: String,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    pub async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (cut, cut_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if *cut_rx.borrow() {
                    continue; // dropped: connection refused in effect
                }
                let target = target.clone();
                let mut cut_rx = cut_rx.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut_rx.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        Proxy { addr, cut }
    }

    pub fn set_cut(&self, cut: bool) {
        let _ = self.cut.send(cut);
    }
}

/// The admin address node `id` last logged ("admin listening on ADDR"; a restarted node
/// appends to its log), waiting for it.
pub async fn admin_addr(cluster: &Cluster, id: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(&cluster.nodes[&id].log).unwrap_or_default();
        if let Some(at) = log.rfind("admin listening on ") {
            let rest = &log[at + "admin listening on ".len()..];
            return rest.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "node {id} logged no admin address"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` over HTTP/1.1: (status code, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// `baton-node token --principal WHO --file FILE`: the token it prints.
pub fn new_token(file: &std::path::Path, who: &str) -> String {
    let out = Command::new(node_bin())
        .args(["token", "--principal", who, "--file"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let token = text(&out.stdout).trim().to_owned();
    assert!(token.starts_with("baton_"), "{token}");
    token
}

/// A command's output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A client of `endpoints` showing `token` (none: no credentials); `follow`: go to the
/// leader a node names, or stay with `endpoints` (followers forward).
pub async fn token_client(endpoints: Vec<String>, token: Option<&str>, follow: bool) -> Client {
    token_client_as(endpoints, token, follow, None).await
}

/// [`token_client`] acting as session `client_id` (another client's, to write to its leases
/// from a second connection; `None`: a random one).
pub async fn token_client_as(
    endpoints: Vec<String>,
    token: Option<&str>,
    follow: bool,
    client_id: Option<&str>,
) -> Client {
    Client::connect(ClientConfig {
        endpoints,
        retry_deadline: Duration::from_secs(10),
        follow_leader_hints: follow,
        token: token.map(|t| baton_client::BearerToken(t.to_owned())),
        client_id: client_id.map(str::to_owned),
        ..ClientConfig::default()
    })
    .await
    .unwrap()
}
