//! The baton nodes under test: one `baton-node-chaos` process per test host, each in its own
//! network namespace with its own data dir, log file and chaos control file. Processes are
//! stopped by PID; `Drop` kills whatever is still running (and resumes paused ones first).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::net::Net;

/// The port every node listens on (each has its own address).
pub const NODE_PORT: u16 = 7001;

/// Where libfaketime lives on Debian (package `faketime`), per architecture.
pub const LIBFAKETIME_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// libfaketime, if installed.
pub fn libfaketime() -> Option<PathBuf> {
    LIBFAKETIME_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Settings of the nodes.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub binary: PathBuf,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    pub ttl_ms_min: u64,
    /// Snapshot every this many log entries (small, so that snapshots happen in a run).
    pub snapshot_logs: u64,
}

/// One node.
pub struct NodeProc {
    pub id: u64,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub chaos_file: PathBuf,
    child: Option<Child>,
    pub paused: bool,
    /// Wall-clock offset (seconds) applied with libfaketime at the next start; 0 = none.
    pub wall_offset_s: i64,
    /// The lease clock's rate the scenario holds for the whole run (1.0: none).
    pub base_rate: f64,
    /// The rate now (a transient skew fault may differ from `base_rate`).
    pub rate: f64,
    /// Raft delay and jitter now, ms.
    pub delay_ms: (u64, u64),
}

/// The cluster.
pub struct Cluster {
    pub nodes: Vec<NodeProc>,
    settings: NodeSettings,
    initial: String,
    ns: Vec<String>,
}

impl Cluster {
    /// Starts nodes 1..=n on the hosts of `net`, data and logs under `dir`; node `i` with its
    /// wall clock `wall_offsets_s[i - 1]` seconds off (libfaketime), when given and not 0.
    pub fn start(
        net: &Net,
        dir: &Path,
        settings: NodeSettings,
        wall_offsets_s: &[i64],
    ) -> anyhow::Result<Cluster> {
        let n = net.hosts.len();
        let addrs: Vec<String> = net
            .hosts
            .iter()
            .map(|h| format!("{}:{NODE_PORT}", h.ip))
            .collect();
        let initial = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for (i, addr) in addrs.iter().enumerate() {
            let id = i as u64 + 1;
            let node_dir = dir.join(format!("n{id}"));
            std::fs::create_dir_all(&node_dir)?;
            let chaos_file = node_dir.join("chaos");
            std::fs::write(&chaos_file, "")?;
            nodes.push(NodeProc {
                id,
                addr: addr.clone(),
                data_dir: node_dir.join("data"),
                log: dir.join(format!("n{id}.log")),
                chaos_file,
                child: None,
                paused: false,
                wall_offset_s: wall_offsets_s.get(i).copied().unwrap_or(0),
                base_rate: 1.0,
                rate: 1.0,
                delay_ms: (0, 0),
            });
        }
        let mut cluster = Cluster {
            nodes,
            settings,
            initial,
            ns: net.hosts.iter().map(|h| h.ns.clone()).collect(),
        };
        for id in 1..=n as u64 {
            cluster.launch(id)?;
        }
        Ok(cluster)
    }

    pub fn node(&self, id: u64) -> &NodeProc {
        &self.nodes[(id - 1) as usize]
    }

    fn node_mut(&mut self, id: u64) -> &mut NodeProc {
        &mut self.nodes[(id - 1) as usize]
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.addr.clone()).collect()
    }

    /// Starts node `id`'s process (again, after a kill), on its data dir.
    pub fn launch(&mut self, id: u64) -> anyhow::Result<()> {
        let s = self.settings.clone();
        let initial = self.initial.clone();
        let ns = self.ns[(id - 1) as usize].clone();
        let node = self.node_mut(id);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .with_context(|| format!("opening {}", node.log.display()))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns])
            .arg(&s.binary)
            .args(["--node-id", &id.to_string()])
            .args(["--listen", &node.addr, "--advertise", &node.addr])
            // Plaintext on the harness's own private test network.
            .arg("--insecure")
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(["--cluster-name", "jepsen", "--initial-cluster", &initial])
            .args(["--heartbeat-ms", &s.heartbeat_ms.to_string()])
            .args(["--election-timeout-min-ms", &s.election_min_ms.to_string()])
            .args(["--election-timeout-max-ms", &s.election_max_ms.to_string()])
            .args(["--ttl-ms-min", &s.ttl_ms_min.to_string()])
            .args(["--snapshot-logs", &s.snapshot_logs.to_string()])
            .env("BATON_CHAOS_FILE", &node.chaos_file)
            .env("RUST_LOG", "info,openraft=warn,sled=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if node.wall_offset_s != 0 {
            let lib = libfaketime()
                .context("wall-clock offsets need libfaketime (apt-get install -y faketime)")?;
            // Wall clock only: CLOCK_MONOTONIC untouched (faking it hangs timed waits).
            cmd.env("LD_PRELOAD", lib)
                .env("FAKETIME", format!("{:+}", node.wall_offset_s))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_DONT_RESET", "1");
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting node {id} ({})", s.binary.display()))?;
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// Whether node `id`'s process is running (possibly paused).
    pub fn is_up(&mut self, id: u64) -> bool {
        let node = self.node_mut(id);
        let up = match node.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        };
        if !up {
            // Reaped: forget the PID, so no signal can reach a process that reused it.
            node.child = None;
        }
        up
    }

    /// SIGKILL, and reap.
    pub fn kill9(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(mut child) = node.child.take() {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
            let _ = child.wait();
        }
        node.paused = false;
    }

    /// SIGSTOP.
    pub fn pause(&mut self, id: u64) {
        if !self.is_up(id) {
            return;
        }
        let node = self.node_mut(id);
        if let Some(child) = &node.child {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGSTOP);
            node.paused = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        if !self.is_up(id) {
            self.node_mut(id).paused = false;
            return;
        }
        let node = self.node_mut(id);
        if let Some(child) = &node.child {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        }
        node.paused = false;
    }

    /// Sets node `id`'s lease-clock rate (its chaos control file), keeping its delay.
    pub fn set_rate(&mut self, id: u64, rate: f64) {
        self.node_mut(id).rate = rate;
        self.write_chaos(id);
    }

    /// Sets node `id`'s rate for the whole run: faults that change it return to this.
    pub fn set_base_rate(&mut self, id: u64, rate: f64) {
        self.node_mut(id).base_rate = rate;
        self.set_rate(id, rate);
    }

    /// Back to the base rate.
    pub fn reset_rate(&mut self, id: u64) {
        let base = self.node(id).base_rate;
        self.set_rate(id, base);
    }

    /// Sets node `id`'s Raft delay and jitter, keeping its rate.
    pub fn set_delay(&mut self, id: u64, delay_ms: u64, jitter_ms: u64) {
        self.node_mut(id).delay_ms = (delay_ms, jitter_ms);
        self.write_chaos(id);
    }

    fn write_chaos(&self, id: u64) {
        let node = self.node(id);
        let text = format!(
            "clock_rate={}\nraft_delay_ms={}\nraft_jitter_ms={}\n",
            node.rate, node.delay_ms.0, node.delay_ms.1
        );
        // Write-then-rename so the node never reads half a file.
        let tmp = node.chaos_file.with_extension("tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &node.chaos_file);
        }
    }

    /// Every node resumed, running, with normal clocks and no delay.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        for id in self.ids() {
            let node = self.node_mut(id);
            node.base_rate = 1.0;
            node.rate = 1.0;
            node.delay_ms = (0, 0);
            self.write_chaos(id);
            if self.node(id).paused {
                self.resume(id);
            }
            if !self.is_up(id) {
                self.launch(id)?;
            }
        }
        Ok(())
    }

    /// Stops every node: SIGCONT then SIGTERM, SIGKILL after `grace`.
    pub fn stop_all(&mut self, grace: Duration) {
        for node in &mut self.nodes {
            if let Some(child) = &node.child {
                let pid = Pid::from_raw(child.id() as i32);
                let _ = kill(pid, Signal::SIGCONT);
                let _ = kill(pid, Signal::SIGTERM);
            }
        }
        let deadline = std::time::Instant::now() + grace;
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) | Err(_) => break,
                        Ok(None) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Ok(None) => {
                            let _ = child.kill();
                            let _ = child.wait();
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Lines of the nodes' logs that show a panic.
    pub fn panics(&self) -> Vec<String> {
        let mut out = Vec::new();
        for node in &self.nodes {
            if let Ok(text) = std::fs::read_to_string(&node.log) {
                for line in text.lines().filter(|l| l.contains("panicked at")) {
                    out.push(format!("node {}: {line}", node.id));
                }
            }
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let pid = Pid::from_raw(child.id() as i32);
                let _ = kill(pid, Signal::SIGCONT);
                let _ = kill(pid, Signal::SIGKILL);
                let _ = child.wait();
            }
        }
    }
}
