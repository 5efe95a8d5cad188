//! Test hosts: one network namespace per node, joined by veth pairs to a bridge in the root
//! namespace, where the harness (clients and nemesis) runs. Partitions are iptables rules
//! inside a node's namespace that silently drop packets from chosen sources (`INPUT -s ip
//! -j DROP`), so a cut-off peer sees timeouts, not resets, as on a real network.
//!
//! Everything is named after the harness's PID (`bj<pid>…`), so a later run can sweep what
//! a killed run left behind ([`sweep_stale`]), and [`Net`]'s `Drop` removes it all.

use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{bail, Context};

/// Where the namespaces' names start; the rest is the owner's PID.
pub const NAME_PREFIX: &str = "bj";

/// Runs a command, failing with its stderr.
pub fn sh(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The test network of one run.
pub struct Net {
    pid: u32,
    bridge: String,
    /// The harness's address on the bridge (clients connect from it).
    pub harness_ip: Ipv4Addr,
    /// Node `i` (1-based) is `hosts[i - 1]`.
    pub hosts: Vec<Host>,
    forward_rule: Vec<String>,
}

/// One node's host.
#[derive(Debug, Clone)]
pub struct Host {
    pub ns: String,
    pub ip: Ipv4Addr,
    veth: String,
}

impl Net {
    /// Creates `n` hosts. Needs root (CAP_NET_ADMIN), `ip` and `iptables`.
    pub fn create(n: usize) -> anyhow::Result<Net> {
        sweep_stale();
        let pid = std::process::id();
        let subnet = free_subnet(pid)?;
        let mut net = Net {
            pid,
            bridge: format!("{NAME_PREFIX}{pid}b"),
            harness_ip: Ipv4Addr::new(10, 77, subnet, 1),
            hosts: Vec::new(),
            forward_rule: Vec::new(),
        };
        // On a failure half-way, Drop removes what was made.
        net.build(n, subnet)?;
        Ok(net)
    }

    fn build(&mut self, n: usize, subnet: u8) -> anyhow::Result<()> {
        let br = self.bridge.clone();
        sh("ip", &["link", "add", &br, "type", "bridge"])?;
        sh(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", self.harness_ip),
                "dev",
                &br,
            ],
        )?;
        sh("ip", &["link", "set", &br, "up"])?;
        // With br_netfilter loaded (Docker loads it, with a FORWARD policy of DROP), bridged
        // traffic between the hosts goes through the root namespace's FORWARD chain.
        let rule: Vec<String> = ["FORWARD", "-i", &br, "-o", &br, "-j", "ACCEPT"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut insert = vec!["-I".to_string()];
        insert.extend(rule.iter().cloned());
        let insert: Vec<&str> = insert.iter().map(String::as_str).collect();
        sh("iptables", &insert)?;
        self.forward_rule = rule;
        for i in 1..=n {
            let ns = format!("{NAME_PREFIX}{}n{i}", self.pid);
            let veth = format!("{NAME_PREFIX}{}v{i}", self.pid);
            let peer = format!("{NAME_PREFIX}{}p{i}", self.pid);
            let ip = Ipv4Addr::new(10, 77, subnet, 10 + i as u8);
            sh("ip", &["netns", "add", &ns])?;
            self.hosts.push(Host {
                ns: ns.clone(),
                ip,
                veth: veth.clone(),
            });
            sh(
                "ip",
                &["link", "add", &veth, "type", "veth", "peer", "name", &peer],
            )?;
            sh("ip", &["link", "set", &veth, "master", &br])?;
            sh("ip", &["link", "set", &veth, "up"])?;
            sh("ip", &["link", "set", &peer, "netns", &ns])?;
            in_ns(&ns, "ip", &["link", "set", "lo", "up"])?;
            in_ns(&ns, "ip", &["link", "set", &peer, "name", "eth0"])?;
            in_ns(
                &ns,
                "ip",
                &["addr", "add", &format!("{ip}/24"), "dev", "eth0"],
            )?;
            in_ns(&ns, "ip", &["link", "set", "eth0", "up"])?;
        }
        Ok(())
    }

    /// The namespace of node `id` (1-based).
    pub fn host(&self, id: u64) -> &Host {
        &self.hosts[(id - 1) as usize]
    }

    /// Packets from node `from` to node `to` are dropped (one direction).
    pub fn drop_from(&self, to: u64, from: u64) -> anyhow::Result<()> {
        let src = self.host(from).ip.to_string();
        in_ns(
            &self.host(to).ns,
            "iptables",
            &["-A", "INPUT", "-s", &src, "-j", "DROP"],
        )?;
        Ok(())
    }

    /// Node `a` and node `b` cannot talk at all.
    pub fn cut(&self, a: u64, b: u64) -> anyhow::Result<()> {
        self.drop_from(a, b)?;
        self.drop_from(b, a)
    }

    /// The harness's clients cannot reach node `id` (and it cannot answer them).
    pub fn cut_clients(&self, id: u64) -> anyhow::Result<()> {
        let src = self.harness_ip.to_string();
        in_ns(
            &self.host(id).ns,
            "iptables",
            &["-A", "INPUT", "-s", &src, "-j", "DROP"],
        )?;
        Ok(())
    }

    /// Removes every drop rule: the network is whole again.
    pub fn heal(&self) -> anyhow::Result<()> {
        for h in &self.hosts {
            in_ns(&h.ns, "iptables", &["-F", "INPUT"])?;
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = sh("ip", &["netns", "delete", &h.ns]);
            let _ = sh("ip", &["link", "delete", &h.veth]);
        }
        if !self.forward_rule.is_empty() {
            let mut del = vec!["-D".to_string()];
            del.extend(self.forward_rule.iter().cloned());
            let del: Vec<&str> = del.iter().map(String::as_str).collect();
            let _ = sh("iptables", &del);
        }
        let _ = sh("ip", &["link", "delete", &self.bridge]);
    }
}

/// Runs a command inside namespace `ns`.
pub fn in_ns(ns: &str, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    sh("ip", &full)
}

/// Removes namespaces, links and the FORWARD rule left by runs whose process is gone (a
/// SIGKILLed harness cannot clean up after itself).
pub fn sweep_stale() {
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let owner = |name: &str, sep: char| -> Option<u32> {
        let rest = name.strip_prefix(NAME_PREFIX)?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let tail = &rest[digits.len()..];
        if !tail.starts_with(sep) {
            return None;
        }
        digits.parse().ok()
    };
    if let Ok(list) = sh("ip", &["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if owner(name, 'n').is_some_and(|pid| !alive(pid)) {
                // Its nodes outlived the harness (they have no parent-death signal): kill them
                // first, or they would heartbeat forever and slow every later run.
                if let Ok(pids) = sh("ip", &["netns", "pids", name]) {
                    for pid in pids
                        .split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok())
                    {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                let _ = sh("ip", &["netns", "delete", name]);
            }
        }
    }
    if let Ok(list) = sh("ip", &["-o", "link", "show"]) {
        for line in list.lines() {
            // "12: bj123v1@if11: <...>" or "9: bj123b: <...>"
            let Some(name) = line.split(": ").nth(1) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            let pid = owner(name, 'b').or_else(|| owner(name, 'v'));
            if let Some(pid) = pid.filter(|p| !alive(*p)) {
                if name.ends_with('b') {
                    let _ = sh(
                        "iptables",
                        &["-D", "FORWARD", "-i", name, "-o", name, "-j", "ACCEPT"],
                    );
                }
                let _ = sh("ip", &["link", "delete", name]);
                let _ = pid;
            }
        }
    }
}

/// A /24 under 10.77.0.0/16 that no interface on this machine uses, starting from one
/// derived from `pid` (so concurrent harnesses start apart).
fn free_subnet(pid: u32) -> anyhow::Result<u8> {
    let used = sh("ip", &["-o", "-4", "addr", "show"])?;
    let start = pid % 200 + 20;
    for i in 0..200 {
        let candidate = ((start + i - 20) % 200 + 20) as u8;
        if !used.contains(&format!("10.77.{candidate}.")) {
            return Ok(candidate);
        }
    }
    bail!("no free /24 under 10.77.0.0/16 for the test hosts")
}

/// Whether this process can make test hosts (root with `ip` and `iptables`).
pub fn available() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("not root: network namespaces and iptables need root".into());
    }
    for tool in ["ip", "iptables"] {
        if sh("sh", &["-c", &format!("command -v {tool}")]).is_err() {
            return Err(format!(
                "`{tool}` not found (apt-get install -y iproute2 iptables)"
            ));
        }
    }
    Ok(())
}
