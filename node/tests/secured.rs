//! The runbook's secured bring-up, run as written ("a secured 3-node cluster comes up
//! from the runbook's commands"): the `sh` block after `<!-- secured-bring-up -->` in
//! `deploy/RUNBOOK.md`, with `hostN:7001` replaced by a loopback port per node, the data dir
//! by a temporary one and the admin port by one per node. The node line runs once per node,
//! in the background; `baton-node health --ready` is retried per node until the cluster has a
//! leader. Then what a secured cluster must refuse, it refuses.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, node_bin, serial, text};

const NODES: u64 = 3;

fn runbook() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/RUNBOOK.md");
    std::fs::read_to_string(path).unwrap()
}

/// The runbook's `policy.toml`: the last `toml` block before the marker.
fn runbook_policy() -> String {
    let text = runbook();
    let before = text
        .split_once("<!-- secured-bring-up -->")
        .expect("the runbook lost its secured-bring-up marker")
        .0;
    let at = before.rfind("```toml\n").expect("no policy.toml block") + "```toml\n".len();
    before[at..].split_once("```").unwrap().0.to_owned()
}

/// The block's lines, comments dropped and `\` continuations joined.
fn runbook_block() -> Vec<String> {
    let text = runbook();
    let after = text
        .split_once("<!-- secured-bring-up -->")
        .expect("the runbook lost its secured-bring-up marker")
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("no sh block after the marker")
        .0;
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    lines
}

/// Node processes, killed (by PID, through `Child`) when the test ends.
struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

struct Site {
    dir: PathBuf,
    ports: BTreeMap<u64, u16>,
    admin: BTreeMap<u64, u16>,
    env: Vec<(String, String)>,
}

impl Site {
    /// `line` with the hosts of the runbook made local; for node `n`, its own too.
    fn localize(&self, line: &str, n: Option<u64>) -> String {
        let mut line = line.to_owned();
        if let Some(n) = n {
            let data = self.dir.join(format!("data-{n}"));
            line = line
                .replace("--node-id N", &format!("--node-id {n}"))
                .replace("node-N", &format!("node-{n}"))
                .replace("peer-N", &format!("peer-{n}"))
                .replace("hostN:7001", &format!("127.0.0.1:{}", self.ports[&n]))
                .replace("0.0.0.0:7001", &format!("127.0.0.1:{}", self.ports[&n]))
                .replace("/var/lib/baton", &data.display().to_string())
                .replace("127.0.0.1:9000", &format!("127.0.0.1:{}", self.admin[&n]));
        }
        for (k, port) in &self.ports {
            line = line.replace(&format!("host{k}:7001"), &format!("127.0.0.1:{port}"));
            line = line.replace(&format!("host{k}"), "127.0.0.1");
        }
        line
    }

    /// `VAR=value ... program args... [> file]` as a command in the site's directory.
    fn command(&self, line: &str) -> (Command, Option<PathBuf>) {
        let mut words: Vec<&str> = line.split_whitespace().collect();
        let mut stdout_to = None;
        if let Some(at) = words.iter().position(|w| *w == ">") {
            stdout_to = Some(self.dir.join(words[at + 1]));
            words.truncate(at);
        }
        let mut env = Vec::new();
        while let Some((k, v)) = words.first().and_then(|w| w.split_once('=')) {
            env.push((k.to_owned(), v.to_owned()));
            words.remove(0);
        }
        let program = match words[0] {
            "baton-node" => node_bin(),
            "baton" => node_bin().with_file_name("baton"),
            other => panic!("the block runs {other:?}, which this test does not know"),
        };
        let mut command = Command::new(program);
        command
            .args(&words[1..])
            .current_dir(&self.dir)
            .env_remove("BATON_ENDPOINTS")
            .env_remove("BATON_AUTH_TOKEN")
            .env_remove("BATON_AUTH_TOKEN_FILE")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env);
        (command, stdout_to)
    }

    fn run(&self, line: &str) -> Output {
        let (mut command, stdout_to) = self.command(line);
        let out = command.output().unwrap();
        if let Some(file) = stdout_to {
            std::fs::write(file, &out.stdout).unwrap();
        }
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runbooks_secured_bring_up_comes_up_and_refuses_what_it_must() {
    let _serial = serial().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.toml"), runbook_policy()).unwrap();
    let mut site = Site {
        dir: dir.path().to_owned(),
        ports: (1..=NODES).map(|n| (n, free_port())).collect(),
        admin: (1..=NODES).map(|n| (n, free_port())).collect(),
        env: Vec::new(),
    };
    let mut nodes = Nodes(Vec::new());
    let lines = runbook_block();
    assert!(lines.len() >= 8, "{lines:#?}");
    for line in &lines {
        if let Some(vars) = line.strip_prefix("export ") {
            for pair in site.localize(vars, None).split_whitespace() {
                let (k, v) = pair.split_once('=').unwrap();
                site.env.push((k.to_owned(), v.to_owned()));
            }
        } else if line.contains("--node-id N") {
            for n in 1..=NODES {
                let (mut command, _) = site.command(&site.localize(line, Some(n)));
                let log = std::fs::File::create(dir.path().join(format!("node-{n}.log"))).unwrap();
                command.stdout(Stdio::null()).stderr(log);
                nodes.0.push(command.spawn().unwrap());
            }
        } else if line.contains("health --ready") {
            for n in 1..=NODES {
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let out = site.run(&site.localize(line, Some(n)));
                    if out.status.success() {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "node {n} never got ready: {}\n{}",
                        text(&out.stderr),
                        std::fs::read_to_string(dir.path().join(format!("node-{n}.log")))
                            .unwrap_or_default()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        } else {
            let out = site.run(&site.localize(line, None));
            assert!(
                out.status.success(),
                "{line}\nexit {:?}\n{}{}",
                out.status.code(),
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    }
    assert_eq!(nodes.0.len() as u64, NODES, "the block starts no nodes");

    // Without a certificate or a token: refused, and every command says so (exit 1, "not
    // authenticated"), `cluster status` too (the command the node's banner suggests): not
    // "no node answered" (exit 4), which would send the user looking for an outage.
    for line in [
        "baton probe tasks/1",
        "baton cluster status",
        "baton --output json cluster status",
        "baton board",
        "baton claim tasks/1 --ttl 5s",
        "baton history tasks/1",
        "baton cluster members",
    ] {
        let out = site.run(line);
        assert_eq!(out.status.code(), Some(1), "{line}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("not authenticated"),
            "{line}: {}",
            text(&out.stderr)
        );
    }
    let (mut plain, _) = site.command("baton probe tasks/1 --timeout 2s");
    let out = plain
        .env_remove("BATON_TLS_CA")
        .env("BATON_AUTH_TOKEN_FILE", "ops.token")
        .output()
        .unwrap();
    assert!(!out.status.success(), "a plaintext client got through");
    // Both sides say what is wrong.
    assert!(
        text(&out.stderr).contains("this looks like a node that speaks TLS")
            || text(&out.stderr).contains("if the nodes speak TLS, give the client their CA"),
        "{}",
        text(&out.stderr)
    );
    let logs: String = (1..=NODES)
        .map(|n| std::fs::read_to_string(dir.path().join(format!("node-{n}.log"))).unwrap())
        .collect();
    assert!(logs.contains("a client spoke plaintext to this TLS port"));
    // The agent, outside what the policy gives it: refused.
    let out =
        site.run("BATON_AUTH_TOKEN_FILE=agent-a.token baton claim billing/1 --holder agent-a");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("permission denied"),
        "{}",
        text(&out.stderr)
    );
    // The policy is the cluster's, set by ops.
    let out = site.run("BATON_AUTH_TOKEN_FILE=ops.token baton access show --output json");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["version"], 1, "{shown}");
    assert_eq!(shown["audit"][0]["by"], "ops", "{shown}");
}
