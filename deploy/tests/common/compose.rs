//! A docker compose deployment of `deploy/compose.yaml` (and override files) for a test:
//! the image built once per run of the tests (`deploy/image/build.sh --no-cargo`), a project
//! of its own with free host ports, and the commands an operator would run against it.
//! Everything it creates is removed when it drops, also on a panic.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::deploy_dir;

/// The compose services of the nodes, node `i + 1` at index `i`.
pub const NODES: [&str; 3] = ["node1", "node2", "node3"];
/// How long the nodes may take to become healthy after `up` or `start`.
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(45);
/// How long after the heal every node may take to show the same leases.
pub const AGREE_WITHIN: Duration = Duration::from_secs(20);
/// How long a cluster with a leader may take to name it.
pub const LEADER_WITHIN: Duration = Duration::from_secs(20);
/// The CLI's retry deadline for claims: covers an election after a fault.
pub const CLAIM_TIMEOUT: &str = "30s";
/// Longer than the test: no lease expires while it runs.
pub const LEASE_TTL: &str = "10m";
/// The keys this test claims, all under one prefix.
pub const PREFIX: &str = "compose/";
pub const HOST_HOLDER: &str = "host@compose-test";
pub const NETWORK_HOLDER: &str = "cli@compose-network";

// ---------------------------------------------------------------- commands

pub fn describe(cmd: &Command) -> String {
    let args: Vec<_> = cmd.get_args().map(OsStr::to_string_lossy).collect();
    format!("{} {}", cmd.get_program().to_string_lossy(), args.join(" "))
}

/// Runs `cmd` to the end; panics only when it cannot be started.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}", describe(cmd)))
}

/// Runs `cmd`, which must succeed; returns its stdout.
pub fn check(cmd: &mut Command) -> String {
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
pub fn compose_program() -> Vec<String> {
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
pub fn require_docker(compose: &[String]) {
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
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("binding a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound port").port())
        .collect()
}

/// Retries `probe` every 250 ms until it gives an answer or `within` passes.
pub fn poll<T>(within: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
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
pub struct Timings {
    start: Instant,
    lap: Instant,
    steps: Vec<(&'static str, Duration)>,
}

impl Timings {
    pub fn new() -> Timings {
        Timings {
            start: Instant::now(),
            lap: Instant::now(),
            steps: Vec::new(),
        }
    }

    pub fn step(&mut self, name: &'static str) {
        let took = self.lap.elapsed();
        self.lap = Instant::now();
        eprintln!("compose test: {name}: {took:.2?}");
        self.steps.push((name, took));
    }

    pub fn report(&self) {
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
pub struct Grant {
    pub key: String,
    pub holder: String,
    pub token: u64,
}

impl Grant {
    pub fn from_lease(lease: &Value) -> Grant {
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

/// A name no other run of these tests has: this process's id and the clock's nanoseconds.
fn unique() -> String {
    format!(
        "{}{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970")
            .subsec_nanos()
    )
}

/// What [`Image::share`] built and how many tests hold it.
struct Shared {
    tag: Option<String>,
    users: usize,
}

static IMAGE: Mutex<Shared> = Mutex::new(Shared {
    tag: None,
    users: 0,
});

/// One cluster at a time: the machine the tests run on may have 2 cores, and a cluster's
/// elections and health checks need them.
static TURN: Mutex<()> = Mutex::new(());

/// The image of this test run, built once (`deploy/image/build.sh --no-cargo`) for the tests
/// that hold it at the same time, and removed when the last of them drops it.
pub struct Image {
    pub tag: String,
}

impl Image {
    /// The image, built from `bin_dir`'s binaries if no test holds one.
    pub fn share(bin_dir: &Path) -> Image {
        let mut shared = IMAGE.lock().unwrap_or_else(PoisonError::into_inner);
        let tag = match &shared.tag {
            Some(tag) => tag.clone(),
            None => {
                let tag = format!("baton-compose-test:{}", unique());
                build_image(&tag, bin_dir);
                shared.tag = Some(tag.clone());
                tag
            }
        };
        shared.users += 1;
        Image { tag }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let mut shared = IMAGE.lock().unwrap_or_else(PoisonError::into_inner);
        shared.users -= 1;
        if shared.users > 0 {
            return;
        }
        shared.tag = None;
        let rmi = run(baton_deploy::clean_command("docker").args(["rmi", "-f", &self.tag]));
        let stderr = String::from_utf8_lossy(&rmi.stderr);
        if !rmi.status.success() && !stderr.contains("No such image") {
            eprintln!("compose test: teardown: removing {}: {stderr}", self.tag);
        }
    }
}

/// `deploy/image/build.sh --no-cargo --tag TAG`, with `BATON_BIN_DIR` set to `bin_dir`.
fn build_image(tag: &str, bin_dir: &Path) {
    let out = check(
        baton_deploy::clean_command(deploy_dir().join("image/build.sh"))
            .args(["--no-cargo", "--tag", tag])
            .env("BATON_BIN_DIR", bin_dir),
    );
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("{tag} sha256:")),
        "build.sh's last line is not \"<tag> <image id>\": {out:?}"
    );
}

/// What every compose test starts with.
pub struct ComposeStart {
    /// The compose program, docker checked.
    pub compose: Vec<String>,
    /// The directory of the built binaries.
    pub bins: PathBuf,
    pub timings: Timings,
    /// The image, built once and shared.
    pub image: Image,
    /// This test's turn to run a cluster.
    pub turn: MutexGuard<'static, ()>,
}

/// How every compose test starts: see [`ComposeStart`].
pub fn start_compose_test() -> ComposeStart {
    let compose = compose_program();
    require_docker(&compose);
    let bins = baton_deploy::built_bin("baton")
        .parent()
        .unwrap()
        .to_path_buf();
    let mut timings = Timings::new();
    let image = Image::share(&bins);
    timings.step("build the image (build.sh --no-cargo) or share it");
    let turn = take_turn();
    timings.step("wait for the other cluster to go");
    ComposeStart {
        compose,
        bins,
        timings,
        image,
        turn,
    }
}

/// Waits for this test's turn to run a cluster; the turn ends when the guard drops.
pub fn take_turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The compose project of one test. Dropping it tears it down: the containers, the volumes
/// and the network.
pub struct Deployment {
    compose: Vec<String>,
    /// `deploy/compose.yaml`, then any override files, in `-f` order.
    compose_files: Vec<PathBuf>,
    /// What the compose files read besides the image and ports (`BATON_SECRETS_DIR`).
    env: Vec<(String, String)>,
    pub bin_dir: PathBuf,
    pub project: String,
    image: String,
    /// Host ports of the nodes' gRPC, node `i + 1` at index `i`.
    pub ports: Vec<u16>,
    /// Host ports of the nodes' admin HTTP.
    pub admin_ports: Vec<u16>,
}

impl Deployment {
    /// A project of `files` (names in `deploy/`) running `image`, with `env` besides the
    /// image and the host ports.
    pub fn new(
        compose: Vec<String>,
        bin_dir: PathBuf,
        image: &Image,
        files: &[&str],
        env: Vec<(String, String)>,
    ) -> Deployment {
        let ports = free_ports(2 * NODES.len());
        Deployment {
            compose,
            compose_files: files.iter().map(|f| deploy_dir().join(f)).collect(),
            env,
            bin_dir,
            project: format!("batontest{}", unique()),
            image: image.tag.clone(),
            ports: ports[..NODES.len()].to_vec(),
            admin_ports: ports[NODES.len()..].to_vec(),
        }
    }

    /// `docker-compose -p PROJECT -f deploy/compose.yaml [-f OVERRIDE...] ARGS...`, with the
    /// image, the host ports and the deployment's env in the environment.
    pub fn compose(&self, args: &[&str]) -> Command {
        let mut cmd = baton_deploy::clean_command(&self.compose[0]);
        cmd.args(&self.compose[1..]).arg("-p").arg(&self.project);
        for file in &self.compose_files {
            cmd.arg("-f").arg(file);
        }
        cmd.args(args)
            .env("BATON_IMAGE", &self.image)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        for (i, (port, admin)) in self.ports.iter().zip(&self.admin_ports).enumerate() {
            cmd.env(format!("BATON_PORT_{}", i + 1), port.to_string())
                .env(format!("BATON_ADMIN_PORT_{}", i + 1), admin.to_string());
        }
        cmd
    }

    /// The container id of a service.
    pub fn container(&self, service: &str) -> String {
        let id = check(&mut self.compose(&["ps", "-q", service]))
            .trim()
            .to_owned();
        assert!(!id.is_empty(), "service {service} has no container");
        id
    }

    /// The health of each node's container (`starting`, `healthy`, `unhealthy`, or the
    /// state of a container that is not running).
    pub fn health(&self) -> Vec<String> {
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
    pub fn wait_all_healthy(&self) {
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
    pub fn admin_ready(&self, node: usize) {
        check(
            baton_deploy::clean_command(self.bin_dir.join("baton-node"))
                .args(["health", "--ready", "--admin"])
                .arg(format!("127.0.0.1:{}", self.admin_ports[node])),
        );
    }

    pub fn endpoint(&self, node: usize) -> String {
        format!("127.0.0.1:{}", self.ports[node])
    }

    pub fn all_endpoints(&self) -> String {
        (0..NODES.len())
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The host's `baton --endpoints ENDPOINTS --output json ARGS...`.
    pub fn baton(&self, endpoints: &str, args: &[&str]) -> Command {
        let mut cmd = baton_deploy::clean_command(self.bin_dir.join("baton"));
        cmd.args(["--endpoints", endpoints, "--output", "json"])
            .args(args);
        cmd
    }

    /// `claim KEY` with a long TTL and a retry deadline that covers an election, through
    /// `cmd` (the host's CLI or the `cli` service); the claim must be granted to `holder`.
    pub fn claim_with(&self, mut cmd: Command, key: &str, holder: &str) -> Grant {
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
    pub fn claim_from_host(&self, key: &str) -> Grant {
        self.claim_with(self.baton(&self.all_endpoints(), &[]), key, HOST_HOLDER)
    }

    /// A claim from the `cli` service, inside the cluster's network.
    pub fn claim_in_network(&self, key: &str) -> Grant {
        self.claim_with(
            self.compose(&["run", "--rm", "-T", "cli"]),
            key,
            NETWORK_HOLDER,
        )
    }

    /// The index of the node that leads (the highest term's self-declared leader among the
    /// nodes the host reaches), waiting up to [`LEADER_WITHIN`] for one.
    pub fn leader(&self) -> usize {
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
    pub fn network(&self, service: &str) -> String {
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
    pub fn network_op(&self, op: &str, network: &str, service: &str) {
        check(baton_deploy::clean_command("docker").args([
            "network",
            op,
            network,
            &self.container(service),
        ]));
    }

    /// Every lease under [`PREFIX`] as node `node` has it, read with `--stale` through its
    /// own published port; `None` when it does not answer.
    pub fn stale_board(&self, node: usize) -> Option<Vec<Grant>> {
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
    pub fn stale_probe(&self, node: usize, key: &str) -> Option<Grant> {
        let out = run(&mut self.baton(
            &self.endpoint(node),
            &["probe", key, "--stale", "--timeout", "2s"],
        ));
        probe_lease(&out)
    }

    /// One key as a node has it, read with `probe --stale` by the image's CLI inside the
    /// node's own container (which works with the container cut off the network).
    pub fn local_stale_probe(&self, service: &str, key: &str) -> Option<Grant> {
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
pub fn probe_lease(out: &Output) -> Option<Grant> {
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
    }
}
