//! The baton nodes under test: one `baton-node-chaos` process per test host, each in its own
//! network namespace with its own data dir, log file and chaos control file. Processes are
//! stopped by PID; `Drop` kills whatever is still running (and resumes paused ones first).
//!
//! With [`NodeSettings::power`], each node's data dir sits on its own power-cut filesystem
//! ([`crate::powerfs`]), mounted by this process: [`Cluster::power_cut`] kills the node and
//! takes back what it had not synced; the next [`Cluster::launch`] mounts it again on what is
//! left. Nodes enter their network namespace with `nsenter --net` only (not `ip netns exec`,
//! which also makes a mount namespace holding a copy of every mount, the other nodes'
//! power-cut filesystems included, that would outlive their cuts).

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::net::Net;
use crate::powerfs::{Loss, Lost, PowerFs};
use crate::sickdisk::{self, Damage, DamageKind};

/// The port every node listens on (each has its own address).
pub const NODE_PORT: u16 = 7001;
/// The port of every node's admin HTTP (`/readyz`, `/metrics`).
pub const ADMIN_PORT: u16 = 7002;

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
    /// Data dirs on power-cut filesystems (needs `/dev/fuse`).
    pub power: bool,
    /// The `skip_fsync` chaos knob on every node: acknowledges before its fsync (a canary
    /// that the power-cut checks must catch).
    pub skip_fsync: bool,
    /// The `skip_read_index` chaos knob on every node: a node that believes it leads answers
    /// linearizable reads from its own state (a canary the read checks must catch).
    pub skip_read_index: bool,
    /// The `trust_damaged_log` chaos knob on every node: opening a damaged log cuts it
    /// silently and the node votes on it (a canary the `corrupt` fault must catch).
    pub trust_damaged_log: bool,
    /// The `decide_copies_afresh` chaos knob on every node: the leader decides every copy of
    /// a claim afresh (a canary the `copies` faults must catch).
    pub decide_copies_afresh: bool,
    /// The `mute_endings` chaos knob on every node: endings streams send no ending (a canary
    /// the `notice` checker must catch).
    pub mute_endings: bool,
    /// The `lapse_places_early` chaos knob on every node: a place in line lapses after a
    /// twentieth of its TTL (a canary the `lines` checker must catch).
    pub lapse_places_early: bool,
    /// The `admit_extra_permit` chaos knob on every node: a claim of one of N permits is
    /// proposed as one of N + 1 (a canary the `permits` checker must catch).
    pub admit_extra_permit: bool,
    /// The `exclusive_as_shared` chaos knob on every node: an exclusive claim is proposed as
    /// a shared one (a canary the `shared` checker must catch).
    pub exclusive_as_shared: bool,
    /// The `apply_retries_afresh` chaos knob on every node: marked retries are proposed as
    /// plain commands (a canary the `retries` checker must catch).
    pub apply_retries_afresh: bool,
}

/// One node.
pub struct NodeProc {
    pub id: u64,
    pub addr: String,
    /// Its admin HTTP address (`/readyz`).
    pub admin: String,
    pub data_dir: PathBuf,
    /// Where the power-cut filesystem keeps `data_dir`'s durable state (with `power`).
    pub disk: PathBuf,
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
    /// The mounted power-cut filesystem under `data_dir` (with `power`, while it is up).
    fs: Option<PowerFs>,
    /// Set once its data dir was wiped: it starts with `--join` through these nodes (on an
    /// empty dir it asks to be added; on its own data it just rejoins), never again with
    /// `--initial-cluster`, which would found a cluster of its own.
    pub join: Option<Vec<String>>,
    /// How the last run of the process ended when it ended by itself (not by a signal of
    /// the harness), with the end of its log: a node that refused to start.
    pub exited: Option<String>,
    /// The exit code of that run (None: ended by a signal).
    pub exit_code: Option<i32>,
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
            let ip = &net.hosts[i].ip;
            nodes.push(NodeProc {
                id,
                addr: addr.clone(),
                admin: format!("{ip}:{ADMIN_PORT}"),
                data_dir: if settings.power {
                    node_dir.join("mnt").join("data")
                } else {
                    node_dir.join("data")
                },
                disk: node_dir.join("disk"),
                log: dir.join(format!("n{id}.log")),
                chaos_file,
                child: None,
                paused: false,
                wall_offset_s: wall_offsets_s.get(i).copied().unwrap_or(0),
                base_rate: 1.0,
                rate: 1.0,
                delay_ms: (0, 0),
                fs: None,
                join: None,
                exited: None,
                exit_code: None,
            });
        }
        let mut cluster = Cluster {
            nodes,
            settings,
            initial,
            ns: net.hosts.iter().map(|h| h.ns.clone()).collect(),
        };
        for id in 1..=n as u64 {
            cluster.write_chaos(id);
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

    /// Starts node `id`'s process (again, after a kill or a power cut), on its data dir;
    /// with `power`, mounts its power-cut filesystem first if a cut took it away.
    pub fn launch(&mut self, id: u64) -> anyhow::Result<()> {
        let s = self.settings.clone();
        let initial = self.initial.clone();
        let ns = self.ns[(id - 1) as usize].clone();
        let node = self.node_mut(id);
        if s.power && node.fs.is_none() {
            let mnt = node.data_dir.parent().expect("data dir under the mount");
            node.fs = Some(PowerFs::mount(&node.disk, mnt)?);
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .with_context(|| format!("opening {}", node.log.display()))?;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{ns}"))
            .arg("--")
            .arg(&s.binary)
            .args(["--node-id", &id.to_string()])
            .args(["--listen", &node.addr, "--advertise", &node.addr])
            // Plaintext on the harness's own private test network.
            .arg("--insecure")
            .args(["--admin-listen", &node.admin])
            .arg("--data-dir")
            .arg(&node.data_dir)
            .args(["--cluster-name", "jepsen"]);
        match &node.join {
            Some(through) => cmd.args(["--join", &through.join(",")]),
            None => cmd.args(["--initial-cluster", &initial]),
        };
        cmd.args(["--heartbeat-ms", &s.heartbeat_ms.to_string()])
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
        let (up, status) = match node.child.as_mut() {
            Some(c) => match c.try_wait() {
                Ok(None) => (true, None),
                Ok(Some(status)) => {
                    node.exit_code = status.code();
                    (false, Some(status.to_string()))
                }
                Err(e) => (false, Some(e.to_string())),
            },
            None => (false, None),
        };
        if !up {
            // Reaped: forget the PID, so no signal can reach a process that reused it.
            node.child = None;
        }
        if let Some(status) = status {
            // It ended by itself (the harness's kills reap at once and leave no child).
            let tail = log_tail(&node.log, LOG_TAIL_LINES);
            node.exited = Some(format!(
                "node {id} exited ({status}); its log ends:\n{tail}"
            ));
        }
        up
    }

    /// Cuts node `id`'s power: SIGKILL, then its filesystem takes back what was not
    /// durable as `loss` says. [`Cluster::launch`] starts it again on what is left.
    /// Without `power`, it is a plain kill and nothing is lost.
    pub fn power_cut(&mut self, id: u64, loss: Loss) -> Lost {
        let node = self.node_mut(id);
        let child = node.child.take();
        if let Some(child) = &child {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        }
        node.paused = false;
        let lost = match node.fs.take() {
            Some(fs) => fs.cut(loss),
            None => Lost::default(),
        };
        // Reaped after the cut: a process whose fsync is frozen ends only when the cut
        // answers that call.
        if let Some(mut child) = child {
            let _ = child.wait();
        }
        lost
    }

    /// Kills node `id` (SIGKILL) and wipes its data dir, as a replaced disk would leave it;
    /// from now on it starts with `--join` through the other nodes.
    pub fn wipe(&mut self, id: u64) -> anyhow::Result<()> {
        self.kill9(id);
        let others: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.id != id)
            .map(|n| n.addr.clone())
            .collect();
        let node = self.node_mut(id);
        match std::fs::remove_dir_all(&node.data_dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("wiping {}", node.data_dir.display())),
        }
        node.join = Some(others);
        Ok(())
    }

    /// Takes how node `id` ended by itself (its exit code and the end of its log), so that an
    /// end a fault expected is not counted as a node that refused to start.
    pub fn take_exit(&mut self, id: u64) -> Option<(Option<i32>, String)> {
        let node = self.node_mut(id);
        let how = node.exited.take()?;
        Some((node.exit_code.take(), how))
    }

    /// Node `id`'s disk fails every sync with EIO (`on`), or is sound again (with `power`,
    /// while it is mounted; see [`PowerFs::fail_syncs`]).
    pub fn fail_syncs(&self, id: u64, on: bool) {
        if let Some(fs) = &self.node(id).fs {
            fs.fail_syncs(on);
        }
    }

    /// Syncs node `id`'s disk answered EIO, and when the first was (with `power`).
    pub fn failed_syncs(&self, id: u64) -> (u64, Option<std::time::Instant>) {
        self.node(id)
            .fs
            .as_ref()
            .map_or((0, None), |fs| fs.failed_syncs())
    }

    /// Damages the log of node `id`, which must be down, as `kind` says at a spot chosen by
    /// `pick` (see [`sickdisk::damage_log`]).
    pub fn damage_log(&mut self, id: u64, kind: DamageKind, pick: u64) -> anyhow::Result<Damage> {
        anyhow::ensure!(!self.is_up(id), "node {id} must be down to damage its log");
        let node = self.node(id);
        let log_dir = node.data_dir.join(sickdisk::LOG_DIR);
        sickdisk::damage_log(id, &log_dir, kind, pick)
            .with_context(|| format!("damaging node {id}'s log in {}", log_dir.display()))
    }

    /// Node `id`'s disk freezes at its next fsync of unsynced writes (with `power`), so that
    /// a cut then lands between a write and its fsync.
    pub fn freeze_at_next_fsync(&self, id: u64) {
        if let Some(fs) = &self.node(id).fs {
            fs.freeze_at_next_fsync();
        }
    }

    /// Whether node `id`'s disk is frozen.
    pub fn is_frozen(&self, id: u64) -> bool {
        self.node(id).fs.as_ref().is_some_and(|fs| fs.is_frozen())
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
            "clock_rate={}\nraft_delay_ms={}\nraft_jitter_ms={}\nskip_fsync={}\n\
             skip_read_index={}\ntrust_damaged_log={}\ndecide_copies_afresh={}\n\
             mute_endings={}\nlapse_places_early={}\nadmit_extra_permit={}\n\
             exclusive_as_shared={}\napply_retries_afresh={}\n",
            node.rate,
            node.delay_ms.0,
            node.delay_ms.1,
            u8::from(self.settings.skip_fsync),
            u8::from(self.settings.skip_read_index),
            u8::from(self.settings.trust_damaged_log),
            u8::from(self.settings.decide_copies_afresh),
            u8::from(self.settings.mute_endings),
            u8::from(self.settings.lapse_places_early),
            u8::from(self.settings.admit_extra_permit),
            u8::from(self.settings.exclusive_as_shared),
            u8::from(self.settings.apply_retries_afresh)
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

/// Lines of a node's log shown when it exited by itself.
pub const LOG_TAIL_LINES: usize = 12;

/// The last `lines` lines of the file at `path` (empty if it cannot be read).
fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
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
