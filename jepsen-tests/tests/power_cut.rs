//! A power cut under a real node: a `baton-node` process runs on the power-cut filesystem
//! (`jepsen_tests::powerfs`), acknowledges claims and record writes, is killed with SIGKILL,
//! loses everything it had not synced (all of it; a random prefix per file; a torn write),
//! and is started again on what is left. Every acknowledged grant must be there with its
//! token and holder, every acknowledged record write with its status, and the node must start.
//!
//! One node, so that nothing is repaired from a peer: what it finds is what its own fsyncs
//! kept. Needs root and FUSE (`/dev/fuse`, fuse3's `fusermount3`), as CI runs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, Client, ClientConfig, ReadMode, RecordPatch};
use jepsen_tests::powerfs::{Loss, PowerFs};

/// Claims (each with a record write) acknowledged before each cut, at least.
const CLAIMS_PER_CUT: usize = 40;
/// Writers at once, so that writes are in flight when the power goes.
const WRITERS: usize = 4;
/// How long a restarted node may take to serve again before the test calls it a failure.
const RECOVERY_MAX: Duration = Duration::from_secs(30);

struct Node {
    child: Child,
}

impl Node {
    fn start(data_dir: &Path, addr: &str, log: &Path) -> Node {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_baton-node-chaos"))
            .args(["--node-id", "1", "--listen", addr])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--initial-cluster", &format!("1={addr}")])
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Node { child }
    }

    /// SIGKILL, by PID, and reaped.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn port() -> u16 {
    // Below the ephemeral range, as the other harnesses pick (see node/tests/common).
    loop {
        let port = rand::Rng::gen_range(&mut rand::thread_rng(), 20_000..32_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

async fn client(addr: &str) -> Client {
    Client::connect(ClientConfig {
        retry_deadline: Duration::from_secs(5),
        ..ClientConfig::with_endpoints([addr.to_owned()])
    })
    .await
    .unwrap()
}

/// Waits until the node answers a linearizable read; how long it took.
async fn serving(client: &Client, log: &Path) -> Duration {
    let start = Instant::now();
    loop {
        if client
            .probe("power/ready", ReadMode::Linearizable)
            .await
            .is_ok()
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < RECOVERY_MAX,
            "the node did not serve within {RECOVERY_MAX:?} after the cut:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_survives_power_cuts_of_each_kind() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: this test needs FUSE (run as root; apt-get install -y fuse3)"
    );
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("disk");
    let mnt = dir.path().join("mnt");
    let log: PathBuf = dir.path().join("node.log");
    let data_dir = mnt.join("node1");
    let addr = format!("127.0.0.1:{}", port());
    let mut acknowledged: Vec<(String, u64, String)> = Vec::new();
    let mut unsynced_seen = false;
    let mut fs = PowerFs::mount(&backing, &mnt).unwrap();
    let losses = [
        Loss::All,
        Loss::Prefix { seed: 7 },
        Loss::Torn { seed: 11 },
        Loss::Torn { seed: 12 },
    ];
    for (cut, loss) in losses.into_iter().enumerate() {
        let node = Node::start(&data_dir, &addr, &log);
        let c = client(&addr).await;
        let took = serving(&c, &log).await;
        eprintln!("cut {cut}: serving {took:?} after start");
        // Everything acknowledged before every earlier cut is still there.
        for (key, token, status) in &acknowledged {
            let probe = c.probe(key, ReadMode::Linearizable).await.unwrap();
            let lease = probe.lease.unwrap_or_else(|| {
                panic!(
                    "{key}: acknowledged grant (token {token}) lost after a power cut\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
            assert_eq!(lease.token, *token, "{key}: another token after the cut");
            assert_eq!(lease.holder_name, "power-agent", "{key}");
            let record = c.record(key, ReadMode::Linearizable).await.unwrap();
            assert_eq!(
                record.record.status, *status,
                "{key}: acknowledged record write lost"
            );
        }
        // Writers claim and write records as fast as the node acknowledges; the power goes
        // while they are at it, so writes are in flight (unsynced) at the cut.
        let done = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let c = client(&addr).await;
            let done = done.clone();
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let key = format!("power/{cut}/{w}/{i}");
                    let Ok(ClaimOutcome::Granted(g)) = c
                        .claim(&key, "power-agent", Duration::from_secs(3600))
                        .await
                    else {
                        return;
                    };
                    let status = format!("step-{i}");
                    let patch = RecordPatch {
                        status: Some(status.clone()),
                        ..RecordPatch::default()
                    };
                    if c.update(&key, g.lease.token, patch).await.is_err() {
                        return;
                    }
                    done.lock().unwrap().push((key, g.lease.token, status));
                }
            }));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while done.lock().unwrap().len() < CLAIMS_PER_CUT {
            assert!(Instant::now() < deadline, "the writers stalled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The power goes: the process first, then what the disk had not been told to keep.
        node.kill();
        let lost = fs.cut(loss);
        for w in writers {
            let _ = w.await;
        }
        // Only what a writer was told before the kill counts as acknowledged.
        let this_cut = std::mem::take(&mut *done.lock().unwrap());
        eprintln!(
            "cut {cut} ({loss:?}): {} writes acknowledged; the cut took back {lost:?}",
            this_cut.len()
        );
        assert_eq!(
            lost.failed, 0,
            "cut {cut}: an undo failed, so the model kept unsynced state"
        );
        unsynced_seen |= lost.bytes > 0;
        acknowledged.extend(this_cut);
        fs = PowerFs::mount(&backing, &mnt).unwrap();
    }
    // After the last cut: started once more, everything is there.
    let _node = Node::start(&data_dir, &addr, &log);
    let c = client(&addr).await;
    serving(&c, &log).await;
    for (key, token, _) in &acknowledged {
        let probe = c.probe(key, ReadMode::Linearizable).await.unwrap();
        assert_eq!(
            probe.lease.map(|l| l.token),
            Some(*token),
            "{key}: acknowledged grant lost after the last cut"
        );
    }
    assert!(acknowledged.len() >= losses.len() * CLAIMS_PER_CUT);
    // The cuts did take something back: writes were in flight, so the test saw a real loss
    // of unsynced data and the node's recovery from it.
    assert!(unsynced_seen, "no cut found an unsynced write to take back");
    drop(fs);
}
