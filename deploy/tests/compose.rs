//! The container image and `deploy/compose.yaml`, for real: builds the image from this
//! target directory's `baton-node` and `baton` (`deploy/image/build.sh --no-cargo`), brings
//! the 3-node cluster up under a project of its own with free host ports, and checks the
//! outcomes an operator relies on:
//!
//! - all three nodes become healthy (`baton-node health --ready`);
//! - a claim goes through from the host (published ports) and from the `cli` service inside
//!   the cluster's network;
//! - with the leader's container stopped, a claim still goes through; the stopped node comes
//!   back with its volume and rejoins;
//! - with the (new) leader's container disconnected from the network, a claim still goes
//!   through; after the network heals, every node, read with `--stale` through its own
//!   published port, shows the same holders and tokens within [`AGREE_WITHIN`].
//!
//! It needs Docker Engine and `docker-compose` (v1; `BATON_COMPOSE="docker compose"` runs it
//! with v2), and fails, rather than skips, when either is missing or the daemon is not
//! reachable. Everything it creates (containers, volumes, network, image) is removed when it
//! ends, also on a panic. The binaries come from the same target directory as this test
//! (`cargo test --workspace` builds them; `cargo build -p baton-node -p baton-cli`
//! otherwise).

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// The compose services of the nodes, node `i + 1` at index `i`.
const NODES: [&str; 3] = ["node1", "node2", "node3"];
/// How long the nodes may take to become healthy after `up` or `start`.
const HEALTHY_WITHIN: Duration = Duration::from_secs(45);
/// How long after the heal every node may take to show the same leases.
const AGREE_WITHIN: Duration = Duration::from_secs(20);
/// How long a cluster with a leader may take to name it.
const LEADER_WITHIN: Duration = Duration::from_secs(20);
/// The CLI's retry deadline for claims: covers an election after a fault.
const CLAIM_TIMEOUT: &str = "30s";
/// Longer than the test: no lease expires while it runs.
const LEASE_TTL: &str = "10m";
/// The keys this test claims, all under one prefix.
const PREFIX: &str = "compose/";
const HOST_HOLDER: &str = "host@compose-test";
const NETWORK_HOLDER: &str = "cli@compose-network";

// ---------------------------------------------------------------- commands

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn describe(cmd: &Command) -> String {
    let args: Vec<_> = cmd.get_args().map(OsStr::to_string_lossy).collect();
    format!("{} {}", cmd.get_program().to_string_lossy(), args.join(" "))
}

/// Runs `cmd` to the end; panics only when it cannot be started.
fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", describe(cmd)))
}

/// Runs `cmd`, which must succeed; returns its stdout.
fn check(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "`{}` failed ({}):\nstdout: {}\nstderr: {}",
        describe(cmd),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The compose command: what `BATON_COMPOSE` says, else `docker-compose` (v1) if it is
/// installed, else `docker compose` (v2).
fn compose_program() -> Vec<String> {
    let chosen = std::env::var("BATON_COMPOSE").unwrap_or_else(|_| {
        let v1 = baton_deploy::clean_command("docker-compose")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if v1 {
            "docker-compose"
        } else {
            "docker compose"
        }
        .to_owned()
    });
    let words: Vec<String> = chosen.split_whitespace().map(str::to_owned).collect();
    assert!(!words.is_empty(), "BATON_COMPOSE is empty");
    words
}

/// Fails the test, with what to install or start, unless docker, compose and the daemon
/// are all there.
fn require_docker(compose: &[String]) {
    let present = |program: &str, args: &[&str]| {
        baton_deploy::clean_command(program)
            .args(args)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    assert!(
        present("docker", &["--version"]),
        "docker is not installed: this test needs Docker Engine and docker-compose \
         (Debian: apt-get install docker.io docker-compose)"
    );
    let compose_args: Vec<&str> = compose[1..]
        .iter()
        .map(String::as_str)
        .chain(["version"])
        .collect();
    assert!(
        present(&compose[0], &compose_args),
        "`{}` is not installed: this test needs it (Debian: apt-get install docker-compose; \
         BATON_COMPOSE=\"docker compose\" picks Compose v2)",
        compose.join(" ")
    );
    let info =
        run(baton_deploy::clean_command("docker").args(["info", "--format", "{{.ServerVersion}}"]));
    assert!(
        info.status.success(),
        "the Docker daemon is not reachable (`docker info`: {}): start it (dockerd) or set \
         DOCKER_HOST",
        String::from_utf8_lossy(&info.stderr).trim()
    );
}

/// `n` distinct free ports on 127.0.0.1 (held together while they are picked).
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("binding a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect()
}

/// Retries `probe` every 250 ms until it gives an answer or `within` passes.
fn poll<T>(within: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(answer) = probe() {
            return Some(answer);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

// ---------------------------------------------------------------- timings

/// Steps and how long each took, printed as they end and once more at the end.
struct Timings {
    start: Instant,
    lap: Instant,
    steps: Vec<(&'static str, Duration)>,
}

impl Timings {
    fn new() -> Timings {
        Timings {
            start: Instant::now(),
            lap: Instant::now(),
            steps: Vec::new(),
        }
    }

    fn step(&mut self, name: &'static str) {
        let took = self.lap.elapsed();
        self.lap = Instant::now();
        eprintln!("compose test: {name}: {took:.2?}");
        self.steps.push((name, took));
    }

    fn report(&self) {
        eprintln!("compose test timings:");
        for (name, took) in &self.steps {
            eprintln!("  {name:<44} {:>7.2}s", took.as_secs_f64());
        }
        eprintln!(
            "  {:<44} {:>7.2}s",
            "total",
            self.start.elapsed().as_secs_f64()
        );
    }
}

// ---------------------------------------------------------------- the deployment

/// A lease as the tests compare it: key, holder, token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    key: String,
    holder: String,
    token: u64,
}

impl Grant {
    fn from_lease(lease: &Value) -> Grant {
        Grant {
            key: lease["key"].as_str().expect("lease.key").to_owned(),
            holder: lease["holder_name"]
                .as_str()
                .expect("lease.holder_name")
                .to_owned(),
            token: lease["token"].as_u64().expect("lease.token"),
        }
    }
}

/// The image and the compose project of one test run. Dropping it tears both down: the
/// containers, the volumes, the network and the image tag.
struct Deployment {
    compose: Vec<String>,
    compose_file: PathBuf,
    bin_dir: PathBuf,
    project: String,
    image: String,
    /// Host ports of the nodes' gRPC, node `i + 1` at index `i`.
    ports: Vec<u16>,
    /// Host ports of the nodes' admin HTTP.
    admin_ports: Vec<u16>,
}

impl Deployment {
    fn new(compose: Vec<String>, bin_dir: PathBuf) -> Deployment {
        let unique = format!(
            "{}{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("a clock after 1970")
                .subsec_nanos()
        );
        let ports = free_ports(2 * NODES.len());
        Deployment {
            compose,
            compose_file: deploy_dir().join("compose.yaml"),
            bin_dir,
            project: format!("batontest{unique}"),
            image: format!("baton-compose-test:{unique}"),
            ports: ports[..NODES.len()].to_vec(),
            admin_ports: ports[NODES.len()..].to_vec(),
        }
    }

    /// `deploy/image/build.sh --no-cargo --tag IMAGE`, with `BATON_BIN_DIR` set to this
    /// target directory.
    fn build_image(&self) {
        let out = check(
            baton_deploy::clean_command(deploy_dir().join("image/build.sh"))
                .args(["--no-cargo", "--tag", &self.image])
                .env("BATON_BIN_DIR", &self.bin_dir),
        );
        let last = out.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(&format!("{} sha256:", self.image)),
            "build.sh's last line is not \"<tag> <image id>\": {out:?}"
        );
    }

    /// `docker-compose -p PROJECT -f deploy/compose.yaml ARGS...`, with the image and the
    /// host ports in the environment.
    fn compose(&self, args: &[&str]) -> Command {
        let mut cmd = baton_deploy::clean_command(&self.compose[0]);
        cmd.args(&self.compose[1..])
            .arg("-p")
            .arg(&self.project)
            .arg("-f")
            .arg(&self.compose_file)
            .args(args)
            .env("BATON_IMAGE", &self.image);
        for (i, (port, admin)) in self.ports.iter().zip(&self.admin_ports).enumerate() {
            cmd.env(format!("BATON_PORT_{}", i + 1), port.to_string())
                .env(format!("BATON_ADMIN_PORT_{}", i + 1), admin.to_string());
        }
        cmd
    }

    /// The container id of a service.
    fn container(&self, service: &str) -> String {
        let id = check(&mut self.compose(&["ps", "-q", service]))
            .trim()
            .to_owned();
        assert!(!id.is_empty(), "service {service} has no container");
        id
    }

    /// The health of each node's container (`starting`, `healthy`, `unhealthy`, or the
    /// state of a container that is not running).
    fn health(&self) -> Vec<String> {
        NODES
            .iter()
            .map(|service| {
                let out = run(baton_deploy::clean_command("docker").args([
                    "inspect",
                    "-f",
                    "{{if .State.Running}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
                    &self.container(service),
                ]));
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            })
            .collect()
    }

    /// Waits until every node's container is healthy; on time-out, fails with the health
    /// states and the nodes' last log lines.
    fn wait_all_healthy(&self) {
        let mut last = Vec::new();
        let healthy = poll(HEALTHY_WITHIN, || {
            last = self.health();
            last.iter().all(|h| h == "healthy").then_some(())
        });
        if healthy.is_none() {
            let logs = run(&mut self.compose(&["logs", "--no-color", "--tail", "30"]));
            panic!(
                "the nodes are not all healthy after {HEALTHY_WITHIN:?}: {last:?}\n{}",
                String::from_utf8_lossy(&logs.stdout)
            );
        }
    }

    /// `baton-node health --ready` from the host against node `node`'s published admin port.
    fn admin_ready(&self, node: usize) {
        check(
            baton_deploy::clean_command(self.bin_dir.join("baton-node"))
                .args(["health", "--ready", "--admin"])
                .arg(format!("127.0.0.1:{}", self.admin_ports[node])),
        );
    }

    fn endpoint(&self, node: usize) -> String {
        format!("127.0.0.1:{}", self.ports[node])
    }

    fn all_endpoints(&self) -> String {
        (0..NODES.len())
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The host's `baton --endpoints ENDPOINTS --output json ARGS...`.
    fn baton(&self, endpoints: &str, args: &[&str]) -> Command {
        let mut cmd = baton_deploy::clean_command(self.bin_dir.join("baton"));
        cmd.args(["--endpoints", endpoints, "--output", "json"])
            .args(args);
        cmd
    }

    /// `claim KEY` with a long TTL and a retry deadline that covers an election, through
    /// `cmd` (the host's CLI or the `cli` service); the claim must be granted to `holder`.
    fn claim_with(&self, mut cmd: Command, key: &str, holder: &str) -> Grant {
        cmd.args(["claim", key, "--ttl", LEASE_TTL, "--holder", holder])
            .args(["--timeout", CLAIM_TIMEOUT, "--output", "json"]);
        let answer: Value = serde_json::from_str(&check(&mut cmd))
            .unwrap_or_else(|e| panic!("claim {key}: the answer is not JSON: {e}"));
        assert_eq!(answer["outcome"], "granted", "claim {key}: {answer}");
        let grant = Grant::from_lease(&answer["lease"]);
        assert_eq!((grant.key.as_str(), grant.holder.as_str()), (key, holder));
        grant
    }

    /// A claim from the host, through every node's published port.
    fn claim_from_host(&self, key: &str) -> Grant {
        self.claim_with(self.baton(&self.all_endpoints(), &[]), key, HOST_HOLDER)
    }

    /// A claim from the `cli` service, inside the cluster's network.
    fn claim_in_network(&self, key: &str) -> Grant {
        self.claim_with(
            self.compose(&["run", "--rm", "-T", "cli"]),
            key,
            NETWORK_HOLDER,
        )
    }

    /// The index of the node that leads (the highest term's self-declared leader among the
    /// nodes the host reaches), waiting up to [`LEADER_WITHIN`] for one.
    fn leader(&self) -> usize {
        let leader = poll(LEADER_WITHIN, || {
            let out = run(&mut self.baton(
                &self.all_endpoints(),
                &["cluster", "status", "--timeout", "2s"],
            ));
            let status: Value = serde_json::from_slice(&out.stdout).ok()?;
            status["nodes"]
                .as_array()?
                .iter()
                .filter_map(|n| n["status"].as_object())
                .filter(|s| s["state"] == "leader")
                .max_by_key(|s| s["term"].as_u64())
                .and_then(|s| s["node_id"].as_u64())
        })
        .unwrap_or_else(|| panic!("no leader within {LEADER_WITHIN:?}"));
        let index = usize::try_from(leader - 1).expect("a node id");
        assert!(index < NODES.len(), "leader {leader} is not a compose node");
        index
    }

    /// The compose network the nodes share (`PROJECT_baton`), as a node's container names it.
    fn network(&self, service: &str) -> String {
        let names = check(baton_deploy::clean_command("docker").args([
            "inspect",
            "-f",
            "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}",
            &self.container(service),
        ]));
        names
            .split_whitespace()
            .find(|n| n.ends_with("_baton"))
            .unwrap_or_else(|| panic!("{service} is on no *_baton network: {names:?}"))
            .to_owned()
    }

    /// `docker network connect|disconnect NETWORK CONTAINER`.
    fn network_op(&self, op: &str, network: &str, service: &str) {
        check(baton_deploy::clean_command("docker").args([
            "network",
            op,
            network,
            &self.container(service),
        ]));
    }

    /// Every lease under [`PREFIX`] as node `node` has it, read with `--stale` through its
    /// own published port; `None` when it does not answer.
    fn stale_board(&self, node: usize) -> Option<Vec<Grant>> {
        let out = run(&mut self.baton(
            &self.endpoint(node),
            &["board", PREFIX, "--stale", "--timeout", "2s"],
        ));
        let board: Value = serde_json::from_slice(&out.stdout).ok()?;
        let mut grants: Vec<Grant> = board["leases"]
            .as_array()?
            .iter()
            .map(Grant::from_lease)
            .collect();
        grants.sort();
        Some(grants)
    }

    /// One key as node `node` has it, read with `probe --stale` through its own port.
    fn stale_probe(&self, node: usize, key: &str) -> Option<Grant> {
        let out = run(&mut self.baton(
            &self.endpoint(node),
            &["probe", key, "--stale", "--timeout", "2s"],
        ));
        probe_lease(&out)
    }

    /// One key as a node has it, read with `probe --stale` by the image's CLI inside the
    /// node's own container (which works with the container cut off the network).
    fn local_stale_probe(&self, service: &str, key: &str) -> Option<Grant> {
        let container = self.container(service);
        let mut cmd = baton_deploy::clean_command("docker");
        cmd.args(["exec", &container, "/usr/local/bin/baton"])
            .args(["--endpoints", "127.0.0.1:7001", "--output", "json"])
            .args(["probe", key, "--stale", "--timeout", "5s"]);
        let out = run(&mut cmd);
        assert!(out.status.success(), "`{}`: {out:?}", describe(&cmd));
        probe_lease(&out)
    }
}

/// The lease in `baton probe --output json`'s answer; `None` for a free key. Panics unless
/// the probe answered.
fn probe_lease(out: &Output) -> Option<Grant> {
    let probe: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe's answer is not JSON ({e}): {out:?}"));
    probe["lease"]
        .is_object()
        .then(|| Grant::from_lease(&probe["lease"]))
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let down = run(&mut self.compose(&["down", "-v", "--remove-orphans", "-t", "2"]));
        if !down.status.success() {
            eprintln!(
                "compose test: teardown: `down` failed: {}",
                String::from_utf8_lossy(&down.stderr)
            );
        }
        let rmi = run(baton_deploy::clean_command("docker").args(["rmi", "-f", &self.image]));
        let stderr = String::from_utf8_lossy(&rmi.stderr);
        if !rmi.status.success() && !stderr.contains("No such image") {
            eprintln!("compose test: teardown: removing {}: {stderr}", self.image);
        }
    }
}

// ---------------------------------------------------------------- the test

#[test]
fn compose_cluster_survives_a_stopped_and_a_partitioned_leader() {
    let compose = compose_program();
    require_docker(&compose);
    let bins = baton_deploy::built_bin("baton")
        .parent()
        .unwrap()
        .to_path_buf();
    let mut timings = Timings::new();

    // Created before anything exists, so that whatever follows is torn down.
    let cluster = Deployment::new(compose, bins);
    eprintln!(
        "compose test: project {}, image {}, grpc ports {:?}, admin ports {:?}",
        cluster.project, cluster.image, cluster.ports, cluster.admin_ports
    );
    cluster.build_image();
    timings.step("build the image (build.sh --no-cargo)");

    check(&mut cluster.compose(&["up", "-d"]));
    timings.step("compose up -d");
    cluster.wait_all_healthy();
    timings.step("all 3 nodes healthy");
    for node in 0..NODES.len() {
        cluster.admin_ready(node);
    }
    let volumes = check(baton_deploy::clean_command("docker").args([
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=com.docker.compose.project={}", cluster.project),
    ]));
    assert_eq!(
        volumes.lines().count(),
        NODES.len(),
        "one named volume per node: {volumes:?}"
    );

    let mut grants = vec![cluster.claim_from_host("compose/from-host")];
    timings.step("claim from the host");
    grants.push(cluster.claim_in_network("compose/from-network"));
    timings.step("claim from the cli service");

    // The leader's container stops: the other two elect a leader and take the claim.
    let stopped = NODES[cluster.leader()];
    check(&mut cluster.compose(&["stop", "-t", "5", stopped]));
    timings.step("stop the leader's container");
    grants.push(cluster.claim_from_host("compose/leader-stopped"));
    timings.step("claim with the leader stopped");
    check(&mut cluster.compose(&["start", stopped]));
    cluster.wait_all_healthy();
    timings.step("start it again, all 3 healthy");
    // Its volume kept its log, and the leader sends what it missed.
    let caught_up = poll(AGREE_WITHIN, || {
        (cluster
            .local_stale_probe(stopped, "compose/leader-stopped")
            .as_ref()
            == Some(&grants[2]))
        .then_some(())
    });
    assert!(
        caught_up.is_some(),
        "{stopped} did not catch up within {AGREE_WITHIN:?} with the grant made while it was \
         stopped"
    );

    // The (new) leader is cut off the network: the other two elect a leader again.
    let cut = NODES[cluster.leader()];
    let network = cluster.network(cut);
    timings.step("find the leader");
    cluster.network_op("disconnect", &network, cut);
    timings.step("disconnect it from the network");
    grants.push(cluster.claim_from_host("compose/leader-partitioned"));
    timings.step("claim with the leader partitioned");
    // The cut-off node, asked inside its own container, has not seen that grant.
    assert_eq!(
        cluster.local_stale_probe(cut, "compose/leader-partitioned"),
        None,
        "{cut} saw a grant made while it was cut off"
    );
    cluster.network_op("connect", &network, cut);
    timings.step("reconnect it");
    eprintln!("compose test: stopped {stopped}, partitioned {cut}, grants {grants:?}");

    // Fencing tokens are revisions of the grants: each later claim has a higher one.
    assert!(
        grants.windows(2).all(|w| w[0].token < w[1].token),
        "tokens do not increase: {grants:?}"
    );

    // Every node, read locally, shows the same holders and tokens.
    let mut expected = grants.clone();
    expected.sort();
    let mut seen = Vec::new();
    let agreed = poll(AGREE_WITHIN, || {
        seen = (0..NODES.len()).map(|i| cluster.stale_board(i)).collect();
        seen.iter()
            .all(|board| board.as_ref() == Some(&expected))
            .then_some(())
    });
    assert!(
        agreed.is_some(),
        "the nodes do not agree within {AGREE_WITHIN:?} of the heal:\nexpected {expected:?}\n\
         boards {seen:?}"
    );
    timings.step("every node's stale board agrees");
    let partitioned_key = &grants[3];
    for (node, service) in NODES.iter().enumerate() {
        assert_eq!(
            cluster.stale_probe(node, &partitioned_key.key).as_ref(),
            Some(partitioned_key),
            "{service}'s stale probe of {}",
            partitioned_key.key
        );
    }
    cluster.wait_all_healthy();
    timings.step("stale probes agree, all 3 healthy");

    // The first grant still stands: another holder's claim is refused with it.
    let first = &grants[0];
    let out = run(&mut cluster.baton(
        &cluster.all_endpoints(),
        &[
            "claim",
            &first.key,
            "--holder",
            "someone-else",
            "--ttl",
            "30s",
        ],
    ));
    assert_eq!(out.status.code(), Some(3), "a held key's claim: {out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("claim's JSON");
    assert_eq!(answer["outcome"], "held", "{answer}");
    assert_eq!(&Grant::from_lease(&answer["lease"]), first);
    timings.step("a held key is refused to another holder");

    drop(cluster);
    timings.step("tear down");
    timings.report();
}
