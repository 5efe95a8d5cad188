//! Running a real `baton-node` for a test: a place (data dir, free ports), the process, its
//! health, a clean stop on SIGTERM, and what its log says it serves as.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::read;

/// How long a node may take from start to answering `/healthz`.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a node may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Every env var `baton-node --help` documents (`[env: NAME=]`).
pub fn documented_env_vars() -> BTreeSet<String> {
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

// ---------------------------------------------------------------- running a node

/// Where a test node lives: a fresh data dir and two free loopback ports.
pub struct Place {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub data_dir: PathBuf,
    pub listen: String,
    pub admin: String,
}

impl Place {
    pub fn new() -> Place {
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
    pub fn localize_env(&self, env: &mut [(String, String)]) {
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
    pub fn localize_toml(&self, text: &str) -> PathBuf {
        let text = set_toml_field(text, "data_dir", &self.data_dir.display().to_string());
        let text = set_toml_field(&text, "listen", &self.listen);
        let text = set_toml_field(&text, "admin_listen", &self.admin);
        let path = self.dir.join("baton-node.toml");
        std::fs::write(&path, text).expect("writing the config");
        path
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Replaces the one `key = ...` line of a TOML text with `key = "value"`.
pub fn set_toml_field(text: &str, key: &str, value: &str) -> String {
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
pub struct Node {
    child: Child,
    log: PathBuf,
    pub admin: String,
}

impl Node {
    /// Starts `cmd` (a baton-node, perhaps behind a wrapper that execs it) with its output in
    /// `place`'s node.log.
    pub fn start(mut cmd: Command, place: &Place) -> Node {
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

    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// `baton-node health [--ready] --admin ADDR` succeeds.
    pub fn health(&self, ready: bool) -> bool {
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
    pub fn wait_healthy(&mut self) {
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
    pub fn stop(mut self) -> String {
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
pub fn run_node(cmd: Command, place: &Place, want_id: u64, want_advertise: &str) -> String {
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
pub fn serving_as(log: &str) -> (u64, String) {
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
pub fn with_hostname(hostname: &str) -> Option<Command> {
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
