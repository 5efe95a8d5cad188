//! The Kubernetes manifests (`deploy/k8s/*.yaml`) and the systemd examples
//! (`deploy/systemd/baton-node.toml`, `baton-node.env`), checked for the structure that makes
//! a cluster form, and run through the real `baton-node`: each configuration makes a node
//! start, answer `baton-node health`, and stop on SIGTERM with exit 0.
//!
//! `baton-node` is taken from the same target directory as this test (`cargo test
//! --workspace` builds it; `cargo build -p baton-node` otherwise).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_yaml_ng::Value;

/// How long a node may take from start to answering `/healthz`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a node may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// The namespace the StatefulSet's pods are imagined in.
const NAMESPACE: &str = "default";

// ---------------------------------------------------------------- files and the binary

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every env var `baton-node --help` documents (`[env: NAME=]`).
fn documented_env_vars() -> BTreeSet<String> {
    let out = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"))
        .arg("--help")
        .output()
        .expect("running baton-node --help");
    assert!(out.status.success(), "baton-node --help: {out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let names: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split_once('=').map(|(name, _)| name.to_string()))
        .collect();
    assert!(
        names.contains("BATON_NODE_ID_FROM_HOSTNAME"),
        "baton-node --help does not document BATON_NODE_ID_FROM_HOSTNAME (--node-id-from-hostname): \
         is target/debug/baton-node stale? Rebuild it. Documented: {names:?}"
    );
    names
}

// ---------------------------------------------------------------- YAML

/// One YAML document of `deploy/k8s/`.
struct Doc {
    file: String,
    value: Value,
}

/// Every document of every `deploy/k8s/*.yaml`, in file-name order.
fn k8s_documents() -> Vec<Doc> {
    let dir = deploy_dir().join("k8s");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("yaml")))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML files in {}", dir.display());
    let mut docs = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        // serde_yaml_ng parses one document per call: split at the `---` separator lines (a
        // column-0 `---` is always a document marker in YAML).
        let text = read(&path);
        let mut chunk = String::new();
        for line in text.lines().chain(std::iter::once("---")) {
            if line.trim_end() == "---" {
                let value: Value = serde_yaml_ng::from_str(&chunk)
                    .unwrap_or_else(|e| panic!("{file}: not YAML: {e}"));
                if !value.is_null() {
                    docs.push(Doc {
                        file: file.clone(),
                        value,
                    });
                }
                chunk.clear();
            } else {
                chunk.push_str(line);
                chunk.push('\n');
            }
        }
    }
    docs
}

fn of_kind<'a>(docs: &'a [Doc], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d.value.get("kind").and_then(Value::as_str) == Some(kind))
        .map(|d| &d.value)
        .collect()
}

/// The one document of `kind`.
fn the<'a>(docs: &'a [Doc], kind: &str) -> &'a Value {
    match of_kind(docs, kind).as_slice() {
        [one] => one,
        all => panic!("want exactly one {kind}, found {}", all.len()),
    }
}

/// The value at a dotted path (`spec.template.spec.containers.0`): mapping keys, and indexes
/// into sequences.
fn opt_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, step| match v {
        Value::Sequence(items) => items.get(step.parse::<usize>().ok()?),
        _ => v.get(step),
    })
}

fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    opt_at(v, path).unwrap_or_else(|| panic!("{} has no {path}", name_of(v)))
}

fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{}: {path} is not a string", name_of(v)))
}

fn u64_at(v: &Value, path: &str) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{}: {path} is not a number", name_of(v)))
}

fn bool_at(v: &Value, path: &str) -> bool {
    at(v, path)
        .as_bool()
        .unwrap_or_else(|| panic!("{}: {path} is not true/false", name_of(v)))
}

fn seq_at<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    at(v, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("{}: {path} is not a list", name_of(v)))
}

/// `Kind/name`, for messages.
fn name_of(v: &Value) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = opt_at(v, "metadata.name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    format!("{kind}/{name}")
}

/// Whether every label of `selector` (a non-empty mapping) is in `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_mapping().expect("a selector is a mapping");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn statefulset(docs: &[Doc]) -> &Value {
    the(docs, "StatefulSet")
}

fn pod_labels(sts: &Value) -> &Value {
    at(sts, "spec.template.metadata.labels")
}

/// The StatefulSet's only container.
fn container(sts: &Value) -> &Value {
    let containers = seq_at(sts, "spec.template.spec.containers");
    assert_eq!(containers.len(), 1, "one container: baton-node");
    &containers[0]
}

/// The container port called `name`.
fn container_port(c: &Value, name: &str) -> u64 {
    seq_at(c, "ports")
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .map(|p| u64_at(p, "containerPort"))
        .unwrap_or_else(|| panic!("the container has no port named {name}"))
}

/// A probe's or Service's port: a number, or the name of a container port.
fn resolve_port(c: &Value, port: &Value) -> u64 {
    match port {
        Value::String(name) => container_port(c, name),
        other => other.as_u64().expect("a port is a number or a name"),
    }
}

/// The port of `host:port`.
fn port_of(addr: &str) -> u64 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr:?} is not host:port"))
}

// ---------------------------------------------------------------- the container's env

/// Where an env var of the container gets its value.
enum EnvSource {
    Value(String),
    /// Downward API: `valueFrom.fieldRef.fieldPath`.
    Field(String),
}

fn container_env(c: &Value) -> Vec<(String, EnvSource)> {
    seq_at(c, "env")
        .iter()
        .map(|e| {
            let name = str_at(e, "name").to_string();
            let source = match (e.get("value"), opt_at(e, "valueFrom.fieldRef.fieldPath")) {
                (Some(v), None) => EnvSource::Value(
                    v.as_str()
                        .unwrap_or_else(|| panic!("env {name}: quote the value, a string"))
                        .to_string(),
                ),
                (None, Some(f)) => EnvSource::Field(f.as_str().unwrap().to_string()),
                _ => panic!("env {name}: want value or valueFrom.fieldRef"),
            };
            (name, source)
        })
        .collect()
}

/// Kubernetes' `$(NAME)` expansion: a variable defined earlier in the list is substituted,
/// `$$` is a literal `$`, anything else is left as written.
fn expand(value: &str, defined: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
            continue;
        }
        let reference = rest
            .strip_prefix("$(")
            .and_then(|r| r.split_once(')'))
            .and_then(|(name, after)| Some((defined.get(name)?, after)));
        match reference {
            Some((v, after)) => {
                out.push_str(v);
                rest = after;
            }
            None => {
                out.push('$');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment in pod `pod` of namespace `NAMESPACE`, as the kubelet
/// builds it.
fn pod_env(c: &Value, pod: &str) -> Vec<(String, String)> {
    let mut defined = BTreeMap::new();
    let mut env = Vec::new();
    for (name, source) in container_env(c) {
        let value = match source {
            EnvSource::Value(v) => expand(&v, &defined),
            EnvSource::Field(f) => match f.as_str() {
                "metadata.name" => pod.to_string(),
                "metadata.namespace" => NAMESPACE.to_string(),
                other => panic!("env {name}: fieldRef {other} is not simulated here"),
            },
        };
        assert!(
            !value.contains("$("),
            "env {name} = {value:?}: a $(VAR) that is not defined before it"
        );
        defined.insert(name.clone(), value.clone());
        env.push((name, value));
    }
    env
}

fn env_value<'a>(env: &'a [(String, String)], name: &str) -> &'a str {
    env.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no env var {name}"))
}

/// `1=host:port,2=host:port` as id → address.
fn parse_initial_cluster(text: &str) -> BTreeMap<u64, String> {
    text.split(',')
        .map(|part| {
            let (id, addr) = part
                .split_once('=')
                .unwrap_or_else(|| panic!("initial cluster entry {part:?} is not id=host:port"));
            (id.parse().expect("a numeric id"), addr.to_string())
        })
        .collect()
}

/// The stable DNS name:port of each pod of the StatefulSet, by node id (ordinal + 1).
fn stable_addresses(sts: &Value) -> BTreeMap<u64, String> {
    let name = str_at(sts, "metadata.name");
    let service = str_at(sts, "spec.serviceName");
    let grpc = container_port(container(sts), "grpc");
    (0..u64_at(sts, "spec.replicas"))
        .map(|ordinal| {
            (
                ordinal + 1,
                format!("{name}-{ordinal}.{service}.{NAMESPACE}.svc.cluster.local:{grpc}"),
            )
        })
        .collect()
}

// ---------------------------------------------------------------- running a node

/// Where a test node lives: a fresh data dir and two free loopback ports.
struct Place {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    data_dir: PathBuf,
    listen: String,
    admin: String,
}

impl Place {
    fn new() -> Place {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let dir = tmp.path().to_path_buf();
        Place {
            data_dir: dir.join("data"),
            listen: format!("127.0.0.1:{}", free_port()),
            admin: format!("127.0.0.1:{}", free_port()),
            dir,
            _tmp: tmp,
        }
    }

    /// Points the location settings of an env (data dir, listen, admin) here.
    fn localize_env(&self, env: &mut [(String, String)]) {
        for (name, value) in env.iter_mut() {
            match name.as_str() {
                "BATON_DATA_DIR" => *value = self.data_dir.display().to_string(),
                "BATON_LISTEN" => value.clone_from(&self.listen),
                "BATON_ADMIN_LISTEN" => value.clone_from(&self.admin),
                _ => {}
            }
        }
    }

    /// The TOML config with its location fields pointed here, written beside the data dir.
    fn localize_toml(&self, text: &str) -> PathBuf {
        let text = set_toml_field(text, "data_dir", &self.data_dir.display().to_string());
        let text = set_toml_field(&text, "listen", &self.listen);
        let text = set_toml_field(&text, "admin_listen", &self.admin);
        let path = self.dir.join("baton-node.toml");
        std::fs::write(&path, text).expect("writing the config");
        path
    }
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Replaces the one `key = ...` line of a TOML text with `key = "value"`.
fn set_toml_field(text: &str, key: &str, value: &str) -> String {
    let mut found = 0;
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.split_once('=') {
            Some((k, _)) if k.trim() == key && !line.starts_with('#') => {
                found += 1;
                format!("{key} = {value:?}")
            }
            _ => line.to_string(),
        })
        .collect();
    assert_eq!(found, 1, "the config has {found} lines setting {key}");
    lines.join("\n") + "\n"
}

/// A `baton-node` started by a test; killed (SIGKILL) if the test ends before stopping it.
struct Node {
    child: Child,
    log: PathBuf,
    admin: String,
}

impl Node {
    /// Starts `cmd` (a baton-node, perhaps behind a wrapper that execs it) with its output in
    /// `place`'s node.log.
    fn start(mut cmd: Command, place: &Place) -> Node {
        let log = place.dir.join("node.log");
        let out = std::fs::File::create(&log).expect("creating the node log");
        // The examples' peer names do not resolve here; where no DNS server answers at all,
        // bound each lookup (glibc) so a stop does not wait out the default retries.
        let child = cmd
            .env("RES_OPTIONS", "timeout:1 attempts:1")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("the log file"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        Node {
            child,
            log,
            admin: place.admin.clone(),
        }
    }

    fn log(&self) -> String {
        read(&self.log)
    }

    /// `baton-node health [--ready] --admin ADDR` succeeds.
    fn health(&self, ready: bool) -> bool {
        let mut cmd = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"));
        cmd.args(["health", "--admin", &self.admin]);
        if ready {
            cmd.arg("--ready");
        }
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("running baton-node health")
            .success()
    }

    /// Waits until `baton-node health` says the node serves.
    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("polling the node") {
                panic!(
                    "baton-node exited ({status}) before serving; its log:\n{}",
                    self.log()
                );
            }
            if self.health(false) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "baton-node did not answer /healthz on {} within {START_TIMEOUT:?}; its log:\n{}",
                self.admin,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Sends SIGTERM, asserts a clean exit 0 within `STOP_TIMEOUT`, and returns the log.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("running kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("polling the node") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "baton-node did not exit within {STOP_TIMEOUT:?} of SIGTERM; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = self.log();
        assert_eq!(
            status.code(),
            Some(0),
            "baton-node stopped with {status} after SIGTERM; its log:\n{log}"
        );
        assert!(
            log.contains("shutting down"),
            "no clean shutdown in:\n{log}"
        );
        log
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts the node, waits for `/healthz`, checks what it said it serves as, stops it with
/// SIGTERM; returns the log.
fn run_node(cmd: Command, place: &Place, want_id: u64, want_advertise: &str) -> String {
    let mut node = Node::start(cmd, place);
    node.wait_healthy();
    let (id, advertise) = serving_as(&node.log());
    assert_eq!(
        (id, advertise.as_str()),
        (want_id, want_advertise),
        "{}",
        node.log()
    );
    node.stop()
}

/// The node id and advertised address of the node's "baton node serving" log line (text or
/// JSON log format).
fn serving_as(log: &str) -> (u64, String) {
    let line = log
        .lines()
        .find(|l| l.contains("baton node serving"))
        .unwrap_or_else(|| panic!("no \"baton node serving\" line in:\n{log}"));
    if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON log line");
        let fields = &v["fields"];
        let id = fields["node_id"].as_u64().expect("node_id in the log line");
        let advertise = fields["advertise"]
            .as_str()
            .expect("advertise in the log line");
        return (id, advertise.to_string());
    }
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
            .to_string()
    };
    (
        field("node_id").parse().expect("a numeric node_id"),
        field("advertise"),
    )
}

/// A command that runs `baton-node` with the host name `hostname` (what a StatefulSet pod
/// sees), in a UTS namespace of its own; None where `unshare` cannot make one.
fn with_hostname(hostname: &str) -> Option<Command> {
    let wrap = |program: &OsStr| {
        let mut cmd = baton_deploy::clean_command("unshare");
        cmd.args(["--uts", "--map-root-user", "--", "sh", "-c"])
            .arg(r#"hostname "$1" && shift && exec "$@""#)
            .args([OsStr::new("sh"), OsStr::new(hostname), program]);
        cmd
    };
    let probe = wrap(OsStr::new("cat"))
        .arg("/proc/sys/kernel/hostname")
        .output()
        .ok()?;
    (probe.status.success() && String::from_utf8_lossy(&probe.stdout).trim() == hostname)
        .then(|| wrap(baton_deploy::built_bin("baton-node").as_os_str()))
}

// ---------------------------------------------------------------- the systemd examples

fn systemd_example(name: &str) -> String {
    read(&deploy_dir().join("systemd").join(name))
}

/// The `NAME=value` lines of an env file, active or commented out (`#NAME=value`), with
/// whether each is commented out.
fn env_file_assignments(text: &str) -> Vec<(String, String, bool)> {
    text.lines()
        .filter_map(|line| {
            let (body, commented) = match line.strip_prefix('#') {
                Some(rest) => (rest, true),
                None => (line, false),
            };
            let (name, value) = body.split_once('=')?;
            let is_name = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            is_name.then(|| (name.to_string(), value.to_string(), commented))
        })
        .collect()
}

// ---------------------------------------------------------------- the tests

#[test]
fn the_manifests_hold_a_statefulset_its_two_services_and_a_budget() {
    let docs = k8s_documents();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| (d.file.as_str(), d.value["kind"].as_str().unwrap_or("?")))
        .collect();
    println!("documents: {kinds:?}");
    let sts = statefulset(&docs);
    assert_eq!(of_kind(&docs, "Service").len(), 2, "{kinds:?}");
    the(&docs, "PodDisruptionBudget");
    for doc in &docs {
        assert!(
            opt_at(&doc.value, "apiVersion").is_some(),
            "{}: no apiVersion",
            doc.file
        );
    }

    // The headless Service that names the pods, resolvable before they are ready.
    let peer_name = str_at(sts, "spec.serviceName");
    let peer = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| str_at(s, "metadata.name") == peer_name)
        .unwrap_or_else(|| panic!("no Service {peer_name}, the StatefulSet's serviceName"));
    assert_eq!(str_at(peer, "spec.clusterIP"), "None", "headless");
    assert!(bool_at(peer, "spec.publishNotReadyAddresses"));

    // Both Services, the StatefulSet's selector and the budget select the pods, and the
    // Services' ports reach the gRPC port.
    let labels = pod_labels(sts);
    let c = container(sts);
    assert!(selects(at(sts, "spec.selector.matchLabels"), labels));
    for svc in of_kind(&docs, "Service") {
        assert!(
            selects(at(svc, "spec.selector"), labels),
            "{}",
            name_of(svc)
        );
        let ports = seq_at(svc, "spec.ports");
        assert!(
            ports
                .iter()
                .any(|p| resolve_port(c, at(p, "targetPort")) == container_port(c, "grpc")),
            "{} does not reach the gRPC port",
            name_of(svc)
        );
    }
    let client = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| str_at(s, "metadata.name") != peer_name)
        .unwrap();
    assert_ne!(
        opt_at(client, "spec.clusterIP").and_then(Value::as_str),
        Some("None"),
        "the client Service balances over ready pods"
    );
    let pdb = the(&docs, "PodDisruptionBudget");
    assert!(selects(at(pdb, "spec.selector.matchLabels"), labels));
    assert_eq!(u64_at(pdb, "spec.maxUnavailable"), 1);
}

#[test]
fn the_statefulset_pods_are_the_initial_cluster() {
    let docs = k8s_documents();
    let sts = statefulset(&docs);
    assert_eq!(u64_at(sts, "spec.replicas"), 3);
    assert_eq!(str_at(sts, "spec.podManagementPolicy"), "Parallel");
    let c = container(sts);
    let want = stable_addresses(sts);
    assert_eq!(want.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    for (&id, address) in &want {
        let pod = format!("{}-{}", str_at(sts, "metadata.name"), id - 1);
        let env = pod_env(c, &pod);
        assert_eq!(env_value(&env, "BATON_NODE_ID_FROM_HOSTNAME"), "true");
        let members = parse_initial_cluster(env_value(&env, "BATON_INITIAL_CLUSTER"));
        assert_eq!(members, want, "pod {pod}: the initial cluster");
        assert_eq!(env_value(&env, "BATON_ADVERTISE"), address, "pod {pod}");
        // The node listens on an IP (a host name is refused), every interface.
        let listen = env_value(&env, "BATON_LISTEN");
        assert_eq!(listen, format!("0.0.0.0:{}", container_port(c, "grpc")));
        assert_eq!(port_of(address), port_of(listen));
    }
}

#[test]
fn the_container_has_probes_resources_a_volume_and_no_privileges() {
    let docs = k8s_documents();
    let sts = statefulset(&docs);
    let c = container(sts);
    let pod = at(sts, "spec.template.spec");
    assert_eq!(str_at(c, "imagePullPolicy"), "IfNotPresent");
    assert!(!str_at(c, "image").is_empty());

    // The image is FROM scratch: no shell, so no commands at all; settings are env vars.
    for key in ["command", "args"] {
        assert!(c.get(key).is_none(), "the container sets {key}");
    }
    let env = pod_env(c, "baton-0");

    // Probes: httpGet on the admin port, which is where the node serves its admin API.
    let admin_port = container_port(c, "admin");
    assert_eq!(admin_port, 9000);
    assert_eq!(port_of(env_value(&env, "BATON_ADMIN_LISTEN")), admin_port);
    for (probe, path) in [
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
    ] {
        let p = at(c, probe);
        assert!(
            p.get("exec").is_none(),
            "{probe}: no exec, there is no shell"
        );
        assert_eq!(str_at(p, "httpGet.path"), path, "{probe}");
        assert_eq!(
            resolve_port(c, at(p, "httpGet.port")),
            admin_port,
            "{probe}"
        );
    }
    // A busy node is not killed quickly: at least a minute of failed liveness checks.
    let liveness = at(c, "livenessProbe");
    assert!(u64_at(liveness, "periodSeconds") * u64_at(liveness, "failureThreshold") >= 60);

    for path in [
        "resources.requests.cpu",
        "resources.requests.memory",
        "resources.limits.memory",
    ] {
        assert!(opt_at(c, path).is_some(), "container: no {path}");
    }

    // Security: non-root 65532, read-only root, no capabilities.
    assert!(bool_at(pod, "securityContext.runAsNonRoot"));
    assert_eq!(u64_at(pod, "securityContext.runAsUser"), 65532);
    assert!(opt_at(pod, "securityContext.fsGroup").is_some());
    assert!(bool_at(c, "securityContext.readOnlyRootFilesystem"));
    assert!(!bool_at(c, "securityContext.allowPrivilegeEscalation"));
    assert_eq!(
        seq_at(c, "securityContext.capabilities.drop"),
        [Value::from("ALL")]
    );
    // The Service named `baton` must not put BATON_* service-link variables in the
    // container's environment.
    assert!(!bool_at(pod, "enableServiceLinks"));
    assert!(u64_at(pod, "terminationGracePeriodSeconds") >= 30);

    // The data dir is on the claim template's volume, below its root (a new volume's root
    // may hold lost+found, and a new node needs an empty data dir).
    let claim = str_at(sts, "spec.volumeClaimTemplates.0.metadata.name");
    let mount = seq_at(c, "volumeMounts")
        .iter()
        .find(|m| str_at(m, "name") == claim)
        .unwrap_or_else(|| panic!("the volume {claim} is not mounted"));
    let mount_path = str_at(mount, "mountPath");
    assert_eq!(mount_path, "/var/lib/baton");
    let data_dir = env_value(&env, "BATON_DATA_DIR");
    assert!(
        data_dir.starts_with(&format!("{mount_path}/")),
        "BATON_DATA_DIR {data_dir} is not below {mount_path}"
    );
    assert!(opt_at(
        sts,
        "spec.volumeClaimTemplates.0.spec.resources.requests.storage"
    )
    .is_some());
}

#[test]
fn every_env_var_of_the_container_is_one_baton_node_documents() {
    let docs = k8s_documents();
    let c = container(statefulset(&docs));
    let documented = documented_env_vars();
    let env = container_env(c);
    // A downward-API variable may exist only to be substituted into another one.
    let referenced = |name: &str| {
        env.iter().any(|(_, s)| match s {
            EnvSource::Value(v) => v.contains(&format!("$({name})")),
            EnvSource::Field(_) => false,
        })
    };
    for (name, source) in &env {
        match source {
            EnvSource::Field(_) => assert!(
                documented.contains(name) || referenced(name),
                "{name} (downward API) is neither a baton-node variable nor used by one"
            ),
            EnvSource::Value(_) => assert!(
                documented.contains(name),
                "{name} is not documented by baton-node --help (documented: {documented:?})"
            ),
        }
    }
}

#[test]
fn baton_node_runs_with_the_statefulset_env() {
    let docs = k8s_documents();
    let sts = statefulset(&docs);
    let pod = format!("{}-0", str_at(sts, "metadata.name"));
    let place = Place::new();
    let mut env = pod_env(container(sts), &pod);
    place.localize_env(&mut env);
    // The node id comes from the host name: give the node the pod's host name where a UTS
    // namespace can be had, else the id it would compute.
    let mut cmd = with_hostname(&pod).unwrap_or_else(|| {
        println!("no UTS namespace (unshare): running with BATON_NODE_ID=1 instead of the host name {pod}");
        env.retain(|(name, _)| name != "BATON_NODE_ID_FROM_HOSTNAME");
        env.push(("BATON_NODE_ID".into(), "1".into()));
        baton_deploy::clean_command(baton_deploy::built_bin("baton-node"))
    });
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let advertise = stable_addresses(sts)[&1].clone();
    let mut node = Node::start(cmd, &place);
    node.wait_healthy();
    assert_eq!(serving_as(&node.log()), (1, advertise));
    // Alone (its peers' names do not resolve here) it has no leader, so it is not ready:
    // why the headless Service publishes not-ready addresses.
    assert!(!node.health(true), "/readyz answered 200 with no leader");
    let log = node.stop();
    println!(
        "statefulset env, pod {pod}: started, served, stopped; {} log lines",
        log.lines().count()
    );
}

#[test]
fn baton_node_runs_with_the_example_toml() {
    let place = Place::new();
    let config = place.localize_toml(&systemd_example("baton-node.toml"));
    let mut cmd = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"));
    cmd.arg("--config").arg(&config);
    let log = run_node(cmd, &place, 1, "baton-1.example.internal:7001");
    println!(
        "example TOML: started, served, stopped; {} log lines",
        log.lines().count()
    );
}

#[test]
fn baton_node_runs_with_the_example_toml_and_env_file() {
    let documented = documented_env_vars();
    let assignments = env_file_assignments(&systemd_example("baton-node.env"));
    let names: BTreeSet<&str> = assignments.iter().map(|(n, _, _)| n.as_str()).collect();
    for want in [
        "BATON_NODE_ID",
        "BATON_LISTEN",
        "BATON_ADVERTISE",
        "BATON_INITIAL_CLUSTER",
        "BATON_DATA_DIR",
        "BATON_ADMIN_LISTEN",
    ] {
        assert!(names.contains(want), "the env example does not show {want}");
    }
    for (name, _, commented) in &assignments {
        // RUST_LOG is read by the node's log filter (docs/operating.md: --log-format).
        assert!(
            documented.contains(name) || name == "RUST_LOG",
            "{name} in baton-node.env is not documented by baton-node --help"
        );
        assert!(
            commented,
            "{name}: the example says every line is commented out"
        );
    }

    // As the unit runs it: the TOML config, overridden by the env file (uncommented).
    let place = Place::new();
    let config = place.localize_toml(&systemd_example("baton-node.toml"));
    let mut env: Vec<(String, String)> = assignments
        .into_iter()
        .map(|(name, value, _)| (name, value))
        .collect();
    place.localize_env(&mut env);
    let mut cmd = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"));
    cmd.arg("--config").arg(&config);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let log = run_node(cmd, &place, 2, "baton-2.example.internal:7001");
    println!(
        "example TOML + env file: started as node 2, served, stopped; {} log lines",
        log.lines().count()
    );
}

#[test]
fn kubernetes_env_expansion_follows_the_kubelet() {
    let defined = BTreeMap::from([("A".to_string(), "x".to_string())]);
    assert_eq!(expand("$(A).$(B)", &defined), "x.$(B)");
    assert_eq!(expand("$$(A)-$", &defined), "$(A)-$");
    assert_eq!(expand("$(A", &defined), "$(A");
}
