//! The data format 7 upgrade (a format-6 dir's segment log is read as it is and gets marks
//! from then on; `fixtures/format6-node`), and the data format 4 upgrade on a real node: a node of this version started on a
//! data dir written by format 3 (`fixtures/format3-node`, see its README) rewrites its log,
//! keeps every event as it was recorded, marked as recorded before format 4, applies the old
//! entries by format 3's rules (alice's write with bob's token stays applied and credited to
//! bob, as the format-3 node had it), and from then on binds leases to their sessions.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{free_port, node_bin, serial, text};
use serde_json::Value;

/// Copies the fixture data dir into `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

struct Node {
    child: Child,
    addr: String,
}

impl Node {
    fn start(data_dir: &Path, log: &Path) -> Node {
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(node_bin())
            .args([
                "--listen",
                &addr,
                "--admin-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data_dir)
            .stdout(std::fs::File::create(log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .unwrap();
        Node { child, addr }
    }

    /// `baton --output json` against this node as session `client_id`.
    fn baton(&self, client_id: &str, args: &[&str]) -> (i32, Value) {
        let out = Command::new(node_bin().with_file_name("baton"))
            .args(["--endpoints", &self.addr, "--client-id", client_id])
            .args(["--output", "json"])
            .env_remove("BATON_ENDPOINTS")
            .env_remove("BATON_CLIENT_ID")
            .args(args)
            .output()
            .unwrap();
        let json = serde_json::from_str(text(&out.stdout).trim()).unwrap_or(Value::Null);
        (out.status.code().unwrap_or(-1), json)
    }

    /// Waits until the node answers a linearizable read.
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.baton("probe", &["probe", "tasks/k"]).0 != 0 {
            assert!(
                Instant::now() < deadline,
                "the upgraded node never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn stop(mut self) {
        // A clean stop, as an operator's restart.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    /// A test that fails half-way still stops its node (by PID); after `stop`, a no-op.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn identity_format(dir: &Path) -> u64 {
    let id: Value = serde_json::from_slice(&std::fs::read(dir.join("baton.id")).unwrap()).unwrap();
    id["format"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_3_data_dir_is_upgraded_in_place_keeping_every_event_as_recorded() {
    let _serial = serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format3-node");
    copy_dir(&fixture, &dir);
    assert_eq!(identity_format(&dir), 3);

    let node = Node::start(&dir, &tmp.path().join("node-1.log"));
    node.wait_ready();
    assert_eq!(
        identity_format(&dir),
        u64::from(baton_node::store::DATA_FORMAT),
        "the identity says the newest format once the log is rewritten and moved"
    );

    // The old events, as format 3 recorded them, marked so.
    let (code, history) = node.baton("alice-proc", &["history", "tasks/k", "--events"]);
    assert_eq!(code, 0);
    let events: Vec<(String, Value, Value)> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["actor"]["client_id"].clone(),
                e["recorded_before_format_4"].clone(),
            )
        })
        .collect();
    let old = Value::from(true);
    assert_eq!(
        events,
        vec![
            ("claimed".into(), Value::from("bob-proc"), old.clone()),
            ("assigned".into(), Value::Null, old.clone()),
            // Alice's write, credited to bob by format 3: kept as it was, marked.
            ("updated".into(), Value::from("bob-proc"), old.clone()),
        ],
        "{history}"
    );
    let (_, record) = node.baton("alice-proc", &["record", "tasks/k"]);
    assert_eq!(record["record"]["status"], "done");

    // From now on the lease is bound to bob's session and events name their sender.
    let (code, refused) = node.baton(
        "alice-proc",
        &["update", "tasks/k", "--token", "1", "--status", "x"],
    );
    assert_eq!(
        (code, &refused["reason"]),
        (3, &Value::from("wrong_session"))
    );
    let (code, _) = node.baton(
        "bob-proc",
        &["update", "tasks/k", "--token", "1", "--status", "verified"],
    );
    assert_eq!(code, 0);
    let (_, history) = node.baton("alice-proc", &["history", "tasks/k", "--events"]);
    let last = history["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["kind"], "updated");
    assert_eq!(last["actor"]["client_id"], "bob-proc");
    assert_eq!(last["recorded_before_format_4"], false, "{last}");

    // A restart reads the upgraded dir as it is: same history, bob still holds both keys.
    node.stop();
    let node = Node::start(&dir, &tmp.path().join("node-1b.log"));
    node.wait_ready();
    let (_, again) = node.baton("alice-proc", &["history", "tasks/k", "--events"]);
    assert_eq!(again["events"], history["events"]);
    for key in ["tasks/k", "tasks/j"] {
        let (_, probe) = node.baton("alice-proc", &["probe", key]);
        assert_eq!(
            probe["lease"]["holder_client_id"], "bob-proc",
            "{key}: {probe}"
        );
    }
    node.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_6_data_dir_keeps_its_log_and_writes_marks_from_then_on() {
    let _serial = serial().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format6-node");
    copy_dir(&fixture, &dir);
    assert_eq!(identity_format(&dir), 6);

    let node = Node::start(&dir, &tmp.path().join("node-1.log"));
    node.wait_ready();
    assert_eq!(
        identity_format(&dir),
        u64::from(baton_node::store::DATA_FORMAT),
        "the identity says the current format"
    );
    assert!(
        dir.join("raft.meta").exists() && !dir.join("sled").exists(),
        "the vote and purge point moved out of sled, and sled's files gone"
    );
    // Every event the format-6 node recorded, as it recorded it.
    let (code, history) = node.baton("alice-proc", &["history", "tasks/k", "--events"]);
    assert_eq!(code, 0);
    let kinds: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["claimed", "assigned", "updated", "updated"],
        "{history}"
    );
    let (_, record) = node.baton("alice-proc", &["record", "tasks/k"]);
    assert_eq!(record["record"]["status"], "done", "{record}");
    assert_eq!(record["record"]["summary"], "half done", "{record}");
    for key in ["tasks/k", "tasks/j"] {
        let (_, probe) = node.baton("alice-proc", &["probe", key]);
        assert_eq!(
            probe["lease"]["holder_client_id"], "bob-proc",
            "{key}: {probe}"
        );
    }
    // New writes go on, the restart reads them back, and the log now has marks.
    let (code, _) = node.baton(
        "bob-proc",
        &["update", "tasks/k", "--token", "1", "--status", "verified"],
    );
    assert_eq!(code, 0);
    node.stop();
    let segment = dir.join("log").join("00000000000000000001.seg");
    let bytes = std::fs::read(&segment).unwrap();
    assert!(
        bytes.windows(8).any(|w| w == u64::MAX.to_le_bytes()),
        "no mark was written"
    );
    let node = Node::start(&dir, &tmp.path().join("node-1b.log"));
    node.wait_ready();
    let (_, record) = node.baton("alice-proc", &["record", "tasks/k"]);
    assert_eq!(record["record"]["status"], "verified", "{record}");
    node.stop();
}
