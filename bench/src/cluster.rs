//! Local clusters for the comparison: 3 etcd members or 3 baton-node processes on
//! loopback, each with its own data directory, stopped by PID when dropped (also on a
//! panic), and the CPU time their processes used.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The log target of the node's "admin listening on" line.
const ADMIN_LOG_TARGET: &str = "baton_node::node";

/// A free TCP port on 127.0.0.1 (bound, then released: another process could take it in
/// between, which would make a member fail to start and the health wait fail loudly).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Processes started by this harness; each is killed (SIGKILL, by its PID through
/// [`Child::kill`]) and reaped when this is dropped.
#[derive(Debug, Default)]
pub struct Procs {
    children: Vec<Child>,
    /// How each was started, to start it again.
    commands: Vec<Started>,
}

/// Program, arguments and environment a process was started with.
type Started = (PathBuf, Vec<std::ffi::OsString>, Vec<(String, String)>);

impl Procs {
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Fails if one of them has exited (with the log to look at).
    pub fn check_running(&mut self, what: &str, logs: &[PathBuf]) -> anyhow::Result<()> {
        for (child, log) in self.children.iter_mut().zip(logs) {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "{what} process {} exited ({status}); see {}",
                    child.id(),
                    log.display()
                );
            }
        }
        Ok(())
    }

    pub fn stop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        self.children.clear();
    }

    fn spawn(&mut self, command: Command, log: &Path) -> anyhow::Result<()> {
        let program = PathBuf::from(command.get_program());
        let args = command.get_args().map(|a| a.to_os_string()).collect();
        let envs = command
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
            .collect();
        let child = start(command, log, false)?;
        self.children.push(child);
        self.commands.push((program, args, envs));
        Ok(())
    }

    /// Kills process `i` (SIGKILL, by PID) and reaps it.
    pub fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let child = self.children.get_mut(i).context("no such process")?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Starts process `i` again as it was first started, appending to `log`.
    pub fn restart(&mut self, i: usize, log: &Path) -> anyhow::Result<()> {
        let (program, args, envs) = self.commands.get(i).context("no such process")?.clone();
        let mut command = Command::new(program);
        command.args(args).envs(envs);
        self.children[i] = start(command, log, true)?;
        Ok(())
    }
}

fn start(mut command: Command, log: &Path, append: bool) -> anyhow::Result<Child> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log)
        .with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    command
        .spawn()
        .with_context(|| format!("starting {command:?}"))
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU seconds (user + system) the processes `pids` have used so far, from
/// `/proc/PID/stat`; a process that is gone counts 0.
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as f64;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| stat_ticks(&stat))
        .map(|t| t as f64 / ticks)
        .sum()
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may contain spaces, so count from the last `)`.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Times [`EtcdCluster::start_healthy`] starts a cluster afresh when one does not come up:
/// its ports come from [`free_port`], released before etcd binds them, so another process
/// can take one in between and a member exits at start.
pub const ETCD_START_ATTEMPTS: usize = 3;

/// A local etcd cluster.
#[derive(Debug)]
pub struct EtcdCluster {
    pub procs: Procs,
    /// Client endpoints, `127.0.0.1:port`, member 1 first.
    pub endpoints: Vec<String>,
    pub logs: Vec<PathBuf>,
}

impl EtcdCluster {
    /// Starts `members` etcd members with data under `dir/etcd-N` (fsync on: etcd's
    /// default; `--unsafe-no-fsync` is never passed).
    pub fn start(etcd_bin: &Path, members: usize, dir: &Path) -> anyhow::Result<EtcdCluster> {
        let mut client_ports = Vec::new();
        let mut peer_ports = Vec::new();
        for _ in 0..members {
            client_ports.push(free_port()?);
            peer_ports.push(free_port()?);
        }
        let initial: Vec<String> = (0..members)
            .map(|i| format!("e{}=http://127.0.0.1:{}", i + 1, peer_ports[i]))
            .collect();
        let initial = initial.join(",");
        let token = format!("baton-bench-{}", std::process::id());
        let mut procs = Procs::default();
        let mut logs = Vec::new();
        let mut endpoints = Vec::new();
        for i in 0..members {
            let data = dir.join(format!("etcd-{}", i + 1));
            let client = format!("http://127.0.0.1:{}", client_ports[i]);
            let peer = format!("http://127.0.0.1:{}", peer_ports[i]);
            let mut command = Command::new(etcd_bin);
            command
                .arg("--name")
                .arg(format!("e{}", i + 1))
                .arg("--data-dir")
                .arg(&data)
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer])
                .args(["--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", &token])
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .args(["--log-level", "warn"]);
            let log = dir.join(format!("etcd-{}.log", i + 1));
            procs.spawn(command, &log)?;
            logs.push(log);
            endpoints.push(format!("127.0.0.1:{}", client_ports[i]));
        }
        Ok(EtcdCluster {
            procs,
            endpoints,
            logs,
        })
    }

    /// [`EtcdCluster::start`] then [`EtcdCluster::wait_healthy`], up to
    /// [`ETCD_START_ATTEMPTS`] times, each with fresh ports and data under `dir/try-N`; the
    /// last attempt's error if none came up.
    pub async fn start_healthy(
        etcd_bin: &Path,
        members: usize,
        dir: &Path,
        timeout: Duration,
    ) -> anyhow::Result<EtcdCluster> {
        let mut attempt = 1;
        loop {
            let try_dir = dir.join(format!("try-{attempt}"));
            std::fs::create_dir_all(&try_dir)?;
            let started = EtcdCluster::start(etcd_bin, members, &try_dir);
            let result = match started {
                Ok(mut etcd) => etcd.wait_healthy(timeout).await.map(|()| etcd),
                Err(e) => Err(e),
            };
            match result {
                Ok(etcd) => return Ok(etcd),
                Err(e) if attempt >= ETCD_START_ATTEMPTS => return Err(e),
                Err(e) => {
                    eprintln!("etcd attempt {attempt} did not come up, starting afresh: {e:#}")
                }
            }
            attempt += 1;
        }
    }

    /// Waits until every member answers Status and they agree on a leader, then puts the
    /// leader's endpoint first in [`EtcdCluster::endpoints`].
    pub async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.procs.check_running("etcd", &self.logs)?;
            let mut leaders = Vec::new();
            let mut leader_endpoint = None;
            for endpoint in &self.endpoints {
                if let Ok((leader, own)) = crate::etcd::status(endpoint).await {
                    if leader != 0 {
                        leaders.push(leader);
                    }
                    if leader != 0 && leader == own {
                        leader_endpoint = Some(endpoint.clone());
                    }
                }
            }
            let agreed =
                leaders.len() == self.endpoints.len() && leaders.iter().all(|l| *l == leaders[0]);
            if let (true, Some(leader)) = (agreed, leader_endpoint) {
                // A linearizable read goes through the leader: the cluster serves.
                if crate::etcd::count_prefix(&leader, "health/").await.is_ok() {
                    self.endpoints.retain(|e| *e != leader);
                    self.endpoints.insert(0, leader);
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd did not become healthy within {:?}; see {:?}",
                    timeout,
                    self.logs
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A local baton cluster of `baton-node` processes.
#[derive(Debug)]
pub struct BatonCluster {
    pub procs: Procs,
    /// Endpoints, `127.0.0.1:port`, node 1 first.
    pub endpoints: Vec<String>,
    pub logs: Vec<PathBuf>,
    dir: PathBuf,
}

impl BatonCluster {
    /// Starts `nodes` baton-node processes with data under `dir/baton-N`.
    pub fn start(node_bin: &Path, nodes: usize, dir: &Path) -> anyhow::Result<BatonCluster> {
        BatonCluster::start_with(node_bin, nodes, dir, &[], "warn")
    }

    /// `start`, with `extra_args` for every node and `rust_log` as its `RUST_LOG`.
    pub fn start_with(
        node_bin: &Path,
        nodes: usize,
        dir: &Path,
        extra_args: &[String],
        rust_log: &str,
    ) -> anyhow::Result<BatonCluster> {
        let mut ports = Vec::new();
        for _ in 0..nodes {
            ports.push(free_port()?);
        }
        let initial: Vec<String> = (0..nodes)
            .map(|i| format!("{}=127.0.0.1:{}", i + 1, ports[i]))
            .collect();
        let initial = initial.join(",");
        let mut procs = Procs::default();
        let mut logs = Vec::new();
        let mut endpoints = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let listen = format!("127.0.0.1:{port}");
            let mut command = Command::new(node_bin);
            command
                .arg("--node-id")
                .arg((i + 1).to_string())
                .args(["--listen", &listen])
                .arg("--data-dir")
                .arg(dir.join(format!("baton-{}", i + 1)))
                .args(["--initial-cluster", &initial])
                // Port 0: the node picks a free one and logs it (see `admin`), so no port
                // picked here can be taken meanwhile.
                .args(["--admin-listen", "127.0.0.1:0"])
                .args(extra_args)
                .env("RUST_LOG", format!("{rust_log},{ADMIN_LOG_TARGET}=info"));
            let log = dir.join(format!("baton-{}.log", i + 1));
            procs.spawn(command, &log)?;
            logs.push(log);
            endpoints.push(listen);
        }
        Ok(BatonCluster {
            procs,
            endpoints,
            logs,
            dir: dir.to_path_buf(),
        })
    }

    /// A client configuration for every node, patient (30 s) through an election.
    pub fn client_config(&self) -> baton_client::ClientConfig {
        baton_client::ClientConfig {
            retry_deadline: Duration::from_secs(30),
            ..baton_client::ClientConfig::with_endpoints(self.endpoints.iter().cloned())
        }
    }

    /// The leader as `client` learns it: its node number (1 first) and its process id.
    pub async fn leader(&self, client: &baton_client::Client) -> anyhow::Result<(usize, u32)> {
        let leader = client
            .cluster_status()
            .await?
            .leader_id
            .context("no leader")? as usize;
        Ok((leader, self.procs.pids()[leader - 1]))
    }

    /// The admin addresses (`/metrics`), node 1 first, as the nodes logged them ("admin
    /// listening on ADDR"; the last one, a restarted node appends to its log).
    pub fn admin(&self) -> anyhow::Result<Vec<String>> {
        const LINE: &str = "admin listening on ";
        self.logs
            .iter()
            .map(|log| {
                let text = std::fs::read_to_string(log)?;
                let at = text
                    .rfind(LINE)
                    .ok_or_else(|| anyhow::anyhow!("{} has no admin address", log.display()))?;
                let addr = text[at + LINE.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("");
                Ok(addr.to_owned())
            })
            .collect()
    }

    /// The data dir of node `n` (1-based).
    pub fn data_dir(&self, n: usize) -> PathBuf {
        self.dir.join(format!("baton-{n}"))
    }

    /// Kills node `n` (1-based) with SIGKILL.
    pub fn kill(&mut self, n: usize) -> anyhow::Result<()> {
        self.procs.kill(n - 1)
    }

    /// Starts node `n` (1-based) again on its data dir; its log is appended to.
    pub fn restart(&mut self, n: usize) -> anyhow::Result<()> {
        let log = self.logs[n - 1].clone();
        self.procs.restart(n - 1, &log)
    }

    /// Waits until a claim and its release succeed (a leader commits writes).
    pub async fn wait_healthy(&mut self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_healthy_on("health/compare", timeout).await
    }

    /// `wait_healthy`, claiming and releasing `key`.
    pub async fn wait_healthy_on(&mut self, key: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let config = baton_client::ClientConfig {
            retry_deadline: Duration::from_secs(2),
            ..baton_client::ClientConfig::with_endpoints(self.endpoints.iter().cloned())
        };
        let client = baton_client::Client::connect(config).await?;
        loop {
            self.procs.check_running("baton-node", &self.logs)?;
            let claimed = client
                .claim(key, "baton-compare", Duration::from_secs(10))
                .await;
            if let Ok(baton_client::ClaimOutcome::Granted(grant)) = claimed {
                client.release(key, grant.lease.token).await?;
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "baton did not become healthy within {:?} (last: {:?}); see {:?}",
                    timeout,
                    claimed.err(),
                    self.logs
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `etcd` on PATH (or `BATON_BENCH_ETCD`), if any.
pub fn find_etcd() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BATON_BENCH_ETCD") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// For tests that need etcd: [`find_etcd`]'s path; `None` (after saying SKIPPING on stderr)
/// only when `BATON_BENCH_SKIP_ETCD=1` asks to skip on purpose. Panics when etcd is missing
/// otherwise, so that a machine without it fails the test instead of passing it unseen.
pub fn etcd_for_test() -> Option<PathBuf> {
    if let Some(etcd) = find_etcd() {
        return Some(etcd);
    }
    eprintln!("SKIPPING: etcd is not on PATH (apt-get install -y etcd-server)");
    assert!(
        std::env::var("BATON_BENCH_SKIP_ETCD").is_ok_and(|v| v == "1"),
        "etcd is not on PATH (or BATON_BENCH_ETCD); set BATON_BENCH_SKIP_ETCD=1 to skip on purpose"
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_reads_utime_and_stime_after_the_command_name() {
        let stat = "1234 (etcd (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0";
        assert_eq!(stat_ticks(stat), Some(325));
        assert_eq!(stat_ticks("garbage"), None);
        assert_eq!(stat_ticks("1 (a) S 1 2"), None);
    }

    #[test]
    fn this_process_has_used_some_cpu_and_a_missing_one_none() {
        let own = cpu_seconds(&[std::process::id()]);
        assert!(own >= 0.0);
        assert_eq!(cpu_seconds(&[u32::MAX]), 0.0);
    }
}
