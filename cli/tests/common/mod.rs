//! The harness the client's integration tests share: one real single-node `baton-node`
//! process in a scratch directory on a free port, killed by PID when dropped, and the `baton`
//! CLI run against it. Each test file says how it differs in a [`Setup`]. [`Cluster`] starts
//! several nodes, one process each, as one Raft cluster.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use baton_client::{Client, ClientConfig};
use serde_json::Value;

pub fn cli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_baton"))
}

/// `baton-node` is built by the same `cargo test --workspace` into the same directory.
pub fn node_bin() -> PathBuf {
    let bin = cli_bin().with_file_name("baton-node");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace`",
        bin.display()
    );
    bin
}

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

/// How a test file's node is started and its `baton` runs are made.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// Extra `baton-node` flags, after `--listen` and `--data-dir`.
    pub flags: &'static [&'static str],
    /// Variables removed from each `baton` run's environment, so the caller's own settings
    /// do not leak into the test.
    pub unset_env: &'static [&'static str],
    /// The working directory of each `baton` run unless a test names one; `None` inherits
    /// the test's.
    pub cli_dir: Option<PathBuf>,
    /// The client id every `baton` run acts as (`BATON_CLIENT_ID`), as an agent keeps one
    /// session for all its commands: a lease answers only to the session that claimed it.
    /// `None`: each run has a random one, as a process without `BATON_CLIENT_ID` does. A
    /// `--client-id` in a run's arguments wins.
    pub session: Option<&'static str>,
}

/// One real node, killed by PID when dropped, with a scratch directory (its data is under
/// `data/`; tests may put their own files beside it).
pub struct Node {
    pub addr: String,
    child: Child,
    dir: tempfile::TempDir,
    setup: Setup,
}

impl Node {
    /// Starts a node and waits until `baton cluster status` says it leads.
    pub fn start(setup: Setup) -> Node {
        let node = Node::spawn_node(setup);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = node.baton(&["cluster", "status", "--output", "json"]);
            if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("\"leader\"") {
                return node;
            }
            assert!(Instant::now() < deadline, "node never became leader");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts a node and waits until the library's client says it leads.
    pub async fn start_async(setup: Setup) -> Node {
        let node = Node::spawn_node(setup);
        let client = node.client().await;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(status) = client.status_of(&node.addr).await {
                if status.state == "leader" {
                    return node;
                }
            }
            assert!(Instant::now() < deadline, "node never became leader");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn_node(setup: Setup) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(node_bin())
            .args(["--listen", &addr, "--data-dir"])
            .arg(dir.path().join("data"))
            .args(setup.flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Node {
            addr,
            child,
            dir,
            setup,
        }
    }

    /// A library client of this node.
    pub async fn client(&self) -> Client {
        Client::connect(ClientConfig {
            retry_deadline: Duration::from_secs(5),
            ..ClientConfig::with_endpoints([self.addr.as_str()])
        })
        .await
        .unwrap()
    }

    /// A file path in the test's scratch directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `baton --endpoints ADDR ARGS`, in the setup's directory and environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(cli_bin());
        command.arg("--endpoints").arg(&self.addr).args(args);
        if let Some(dir) = &self.setup.cli_dir {
            command.current_dir(dir);
        }
        for name in self.setup.unset_env {
            command.env_remove(name);
        }
        if let Some(session) = self.setup.session {
            command.env("BATON_CLIENT_ID", session);
        }
        command
    }

    pub fn baton(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `baton` with `dir` as its current directory (for `--git` and `--verify`).
    pub fn baton_in(&self, dir: &Path, args: &[&str]) -> Output {
        self.command(args).current_dir(dir).output().unwrap()
    }

    /// Starts `baton ARGS` in the background with its output captured.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `baton --output json ARGS`: its exit code and the JSON it printed.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        json_result(args, &self.baton(&json_args(args)))
    }

    /// [`Node::json`] with `dir` as the current directory.
    pub fn json_in(&self, dir: &Path, args: &[&str]) -> (i32, Value) {
        json_result(args, &self.baton_in(dir, &json_args(args)))
    }

    /// Claims `key` for `holder`; returns the token.
    pub fn claim(&self, key: &str, holder: &str) -> u64 {
        let (code, v) = self.json(&["claim", key, "--holder", holder, "--ttl", "30s"]);
        assert_eq!((code, &v["outcome"]), (0, &Value::from("granted")), "{v}");
        v["lease"]["token"].as_u64().unwrap()
    }

    /// The key's lease as a linearizable probe sees it (`null` when free).
    pub fn lease(&self, key: &str) -> Value {
        let (code, v) = self.json(&["probe", key]);
        assert_eq!(code, 0, "{v}");
        v["lease"].clone()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn json_args<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    all
}

/// The exit code of `baton --output json ARGS` and the JSON it printed.
fn json_result(args: &[&str], out: &Output) -> (i32, Value) {
    (
        out.status.code().unwrap(),
        stdout_json(out, &format!("{args:?} ")),
    )
}

/// The JSON `out` printed, or a panic showing both its streams.
pub fn parse_json(out: &Output) -> Value {
    stdout_json(out, "")
}

/// A command's exit code and its JSON output.
pub fn json_of(out: &Output) -> (i32, Value) {
    (out.status.code().unwrap_or(-1), parse_json(out))
}

/// Waits (up to 20 s) until `key`'s line holds `n` waiters, by probing it.
pub fn line_of(cluster: &Cluster, key: &str, n: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, probe) = json_of(&cluster.baton(&["probe", key, "--output", "json"]));
        if probe["line"]["waiters"] == n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {n} in line: {probe}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The tokens of the holders a JSON answer lists (`permits.holders`: permits or shared
/// holders), in order.
pub fn holder_tokens(answer: &Value) -> Vec<u64> {
    answer["permits"]["holders"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|l| l["token"].as_u64().unwrap())
        .collect()
}

/// `what` prefixes the panic message, naming what printed no JSON.
fn stdout_json(out: &Output, what: &str) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}printed no JSON ({e}): stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A real cluster of `nodes` `baton-node` processes (one per node, all named in
/// `--initial-cluster`) on free ports, each killed by PID when dropped. Node logs are in the
/// scratch directory.
pub struct Cluster {
    /// `host:port` of each node, by node id (node 1 first).
    pub endpoints: Vec<String>,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts the nodes and waits until every one of them names the same leader.
    pub async fn start(nodes: u64) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let endpoints: Vec<String> = (1..=nodes)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let initial_cluster = endpoints
            .iter()
            .enumerate()
            .map(|(i, addr)| format!("{}={addr}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let children = endpoints
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let id = i + 1;
                let log = std::fs::File::create(dir.path().join(format!("node{id}.log"))).unwrap();
                Command::new(node_bin())
                    .args(["--node-id", &id.to_string(), "--listen", addr, "--data-dir"])
                    .arg(dir.path().join(format!("node{id}")))
                    .args(["--initial-cluster", &initial_cluster])
                    .env("RUST_LOG", "info,openraft=warn")
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().unwrap())
                    .stderr(log)
                    .spawn()
                    .unwrap()
            })
            .collect();
        let cluster = Cluster {
            endpoints,
            children,
            dir,
        };
        cluster.wait_for_leader().await;
        cluster
    }

    async fn wait_for_leader(&self) {
        let client = Client::connect(ClientConfig {
            retry_deadline: Duration::from_millis(500),
            request_timeout: Duration::from_millis(500),
            ..ClientConfig::with_endpoints(self.endpoints.iter().cloned())
        })
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut leaders = Vec::new();
            for endpoint in &self.endpoints {
                leaders.push(
                    client
                        .status_of(endpoint)
                        .await
                        .ok()
                        .and_then(|s| s.leader_id),
                );
            }
            if leaders[0].is_some() && leaders.iter().all(|l| *l == leaders[0]) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster never agreed on a leader: {leaders:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `baton --endpoints EVERY,NODE ARGS`, without the caller's client id, holder or
    /// endpoints.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(cli_bin());
        command
            .arg("--endpoints")
            .arg(self.endpoints.join(","))
            .args(args);
        for name in ["BATON_CLIENT_ID", "BATON_HOLDER", "BATON_ENDPOINTS"] {
            command.env_remove(name);
        }
        command
    }

    pub fn baton(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// A library client that knows every node.
    pub async fn client(&self) -> Client {
        Client::connect(ClientConfig {
            retry_deadline: Duration::from_secs(10),
            ..ClientConfig::with_endpoints(self.endpoints.iter().cloned())
        })
        .await
        .unwrap()
    }

    /// Kills node `id` (1-based) by PID, as a crash would.
    pub fn kill(&mut self, id: usize) {
        let child = &mut self.children[id - 1];
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The node logs, for a failure message.
    pub fn logs(&self) -> String {
        (1..=self.endpoints.len())
            .map(|id| {
                let log = std::fs::read_to_string(self.dir.path().join(format!("node{id}.log")))
                    .unwrap_or_default();
                format!("--- node {id}\n{log}")
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A single node with bearer tokens on, killed by PID when dropped.
pub struct AuthNode {
    pub addr: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
    pub tokens: std::collections::BTreeMap<&'static str, String>,
}

impl Drop for AuthNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AuthNode {
    pub fn start(principals: &[&'static str]) -> AuthNode {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        let mut tokens = std::collections::BTreeMap::new();
        for who in principals {
            let out = Command::new(node_bin())
                .args(["token", "--principal", who, "--file"])
                .arg(&file)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            tokens.insert(*who, String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(node_bin())
            .args(["--listen", &addr, "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--auth-tokens")
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let node = AuthNode {
            addr,
            child,
            _dir: dir,
            tokens,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !node
            .baton(principals[0], "s-probe", &["probe", "ready"])
            .status
            .success()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the node never answered"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        node
    }

    /// `baton ARGS` as principal `who` acting as session `session`.
    pub fn command(&self, who: &str, session: &str, args: &[&str]) -> Command {
        let mut command = Command::new(cli_bin());
        command
            .args(["--endpoints", &self.addr])
            .args(args)
            .env("BATON_AUTH_TOKEN", &self.tokens[who])
            .env("BATON_CLIENT_ID", session)
            .env_remove("BATON_AUTH_TOKEN_FILE")
            .env_remove("BATON_HOOK_ALLOW_OFFLINE")
            .env_remove("BATON_GUARD_ALLOW_OFFLINE");
        command
    }

    pub fn baton(&self, who: &str, session: &str, args: &[&str]) -> Output {
        self.command(who, session, args).output().unwrap()
    }
}
