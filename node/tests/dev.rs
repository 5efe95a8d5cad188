//! `baton-node dev`: a local cluster in one command starts, serves claims, and stops cleanly
//! on Ctrl-C (SIGINT).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Client, ClientConfig, ReadMode};

/// Kills the dev process by PID if the test fails before stopping it.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The banner the README shows under its `baton-node dev --nodes 3` command, with its data
/// dir as `DIR`.
fn readme_banner() -> String {
    let readme = include_str!("../../README.md");
    let command = "$ cargo run --release --bin baton-node -- dev --nodes 3\n";
    let at = readme
        .find(command)
        .expect("the README shows the dev command")
        + command.len();
    let mut banner = String::new();
    for line in readme[at..].lines().take_while(|l| *l != "```") {
        let line = match line.split_once("data in ") {
            Some((head, _)) => format!("{head}data in DIR"),
            None => line.to_owned(),
        };
        banner.push_str(&line);
        banner.push('\n');
    }
    banner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_cluster_starts_serves_claims_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("dev.log");
    let mut guard = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_baton-node"))
            .args(["dev", "--nodes", "3", "--base-port", "0", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let child = &mut guard.0;
    let stdout = child.stdout.take().unwrap();
    // Read stdout to its end on a thread (never closing it early), and hand over the
    // endpoints line as soon as it appears.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut banner = String::new();
        let mut endpoints_line = String::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            banner.push_str(&line);
            banner.push('\n');
            if line.starts_with("endpoints:") {
                endpoints_line = line.clone();
            }
            // The banner's last line.
            if line.starts_with("stop:") {
                let _ = tx.send((endpoints_line.clone(), banner.clone()));
            }
        }
    });
    let (endpoints_line, banner) =
        tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30)))
            .await
            .unwrap()
            .expect("dev prints its endpoints");
    // It says, loudly, that nothing is secured.
    assert!(
        banner.contains("security:  OFF: plaintext, no authentication"),
        "{banner}"
    );
    let endpoints: Vec<String> = endpoints_line["endpoints:".len()..]
        .trim()
        .split(',')
        .map(String::from)
        .collect();
    assert_eq!(endpoints.len(), 3);
    // The banner is the one the README shows, but for the data dir and the ports.
    let mut shown = banner.replace(&dir.path().display().to_string(), "DIR");
    for (i, endpoint) in endpoints.iter().enumerate() {
        shown = shown.replace(endpoint, &format!("127.0.0.1:{}", 7001 + i));
    }
    assert_eq!(shown, readme_banner(), "README.md's dev banner drifted");

    let client = Client::connect(ClientConfig {
        endpoints: endpoints.clone(),
        retry_deadline: Duration::from_secs(20),
        ..ClientConfig::default()
    })
    .await
    .unwrap();
    let outcome = client
        .claim("tasks/dev", "dev-user", Duration::from_secs(30))
        .await
        .unwrap();
    let ClaimOutcome::Granted(grant) = outcome else {
        panic!("{outcome:?}")
    };
    let status = client.cluster_status().await.unwrap();
    assert_eq!(status.members.len(), 3);
    assert!(status.members.iter().all(|m| m.voter));
    let probe = client
        .probe("tasks/dev", ReadMode::Linearizable)
        .await
        .unwrap();
    assert_eq!(probe.lease.unwrap().token, grant.lease.token);
    for n in 1..=3 {
        assert!(dir.path().join(format!("node{n}/baton.id")).exists());
    }

    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("dev cluster did not stop on SIGINT");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "clean exit: {status:?}");
    // A fresh cluster's start warns of nothing but the lack of security: the members do not
    // all campaign at once, so no first vote splits ("seen a higher vote").
    let logged = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .filter(|line| !line.contains("security is OFF"))
        .collect();
    assert!(warnings.is_empty(), "{warnings:#?}");
}
