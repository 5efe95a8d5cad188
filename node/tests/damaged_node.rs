//! One damaged node (the FAST '17 lesson: redundancy is not fault tolerance when one copy's
//! damage can spread). A node of a real 3-node cluster has its snapshot file damaged while it
//! is down: a block flipped, or the file cut short. It must refuse to start from it, saying
//! what is wrong and what to do; the other nodes must go on serving every key as it was; and
//! the documented recovery (deploy/RUNBOOK.md: remove it, wipe its data dir, start it with
//! `--join`) must bring it back as a voter with all the data.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use baton_client::{ClaimOutcome, ReadMode};
use common::{serial, Cluster};

const TTL: Duration = Duration::from_secs(600);
/// Keys claimed before the damage.
const KEYS: usize = 60;
/// How a block is damaged: its size (a disk sector's worth of a page).
const BLOCK: u64 = 512;

/// A way the snapshot file is damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// One block in the middle, every bit flipped.
    FlippedBlock,
    /// The file cut to half its length.
    Truncated,
}

fn damage(file: &Path, how: Damage) {
    let len = std::fs::metadata(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .len();
    damage_within(file, len, how);
}

/// Damages `file` within its first `len` bytes (what it holds): the block in their middle
/// flipped, or the file cut to half of them.
fn damage_within(file: &Path, len: u64, how: Damage) {
    use std::os::unix::fs::FileExt;
    assert!(
        len > 4 * BLOCK,
        "{} is too small to damage: {len} bytes",
        file.display()
    );
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    match how {
        Damage::FlippedBlock => {
            let at = len / 2 / BLOCK * BLOCK;
            let mut block = vec![0; BLOCK as usize];
            f.read_exact_at(&mut block, at).unwrap();
            block.iter_mut().for_each(|b| *b = !*b);
            f.write_all_at(&block, at).unwrap();
        }
        Damage::Truncated => f.set_len(len / 2).unwrap(),
    }
    f.sync_all().unwrap();
}

/// Damages the last segment file in `log_dir` that holds records, within what it holds
/// (segments are zeros after their records).
fn damage_log(log_dir: &Path, how: Damage) {
    let mut segments: Vec<_> = std::fs::read_dir(log_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    let (file, used) = segments
        .iter()
        .rev()
        .find_map(|p| {
            let bytes = std::fs::read(p).unwrap();
            let used = bytes.iter().rposition(|b| *b != 0)? as u64 + 1;
            Some((p.clone(), used))
        })
        .expect("a segment with records");
    damage_within(&file, used, how);
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every key of `keys` is held by "before" as `client` reads it (`mode`).
async fn all_there(client: &baton_client::Client, mode: ReadMode) -> Result<(), String> {
    for i in 0..KEYS {
        let key = format!("d/{i}");
        let probe = client.probe(&key, mode).await.map_err(|e| e.to_string())?;
        let holder = probe.lease.map(|l| l.holder_name);
        if holder.as_deref() != Some("before") {
            return Err(format!("{key} is held by {holder:?}"));
        }
    }
    Ok(())
}

/// A fresh 3-node cluster where "before" holds the keys `d/0` .. `d/{KEYS - 1}`.
async fn claimed_cluster() -> (Cluster, baton_client::Client) {
    let cluster = Cluster::start(3).await;
    let client = cluster.client().await;
    for i in 0..KEYS {
        let g = client
            .claim(&format!("d/{i}"), "before", TTL)
            .await
            .unwrap();
        assert!(matches!(g, ClaimOutcome::Granted(_)), "{g:?}");
    }
    (cluster, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_is_refused_not_spread_and_remove_and_join_recovers() {
    let _serial = serial().await;
    let (mut cluster, client) = claimed_cluster().await;
    let victim = 3;
    let others: Vec<String> = [1, 2]
        .iter()
        .map(|id| cluster.nodes[id].addr.clone())
        .collect();
    for how in [Damage::FlippedBlock, Damage::Truncated] {
        // The victim writes its snapshot, and goes down; its file is damaged meanwhile.
        let taken = client
            .snapshot_at(&cluster.nodes[&victim].addr)
            .await
            .unwrap();
        assert!(taken.snapshot_index > 0, "{taken:?}");
        cluster.kill(victim);
        let file = cluster.nodes[&victim]
            .data_dir
            .join("snapshots")
            .join("current.snapshot");
        damage(&file, how);

        // It refuses to start from it, and says why and what to do.
        cluster.start_node(victim);
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            let child = cluster
                .nodes
                .get_mut(&victim)
                .unwrap()
                .child
                .as_mut()
                .unwrap();
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{how:?}: the node runs on a damaged snapshot\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        cluster.nodes.get_mut(&victim).unwrap().child = None;
        assert!(!status.success(), "{how:?}: {status}");
        let log = std::fs::read_to_string(&cluster.nodes[&victim].log).unwrap();
        let last_words = log.lines().rev().take(5).collect::<Vec<_>>().join("\n");
        eprintln!("{how:?}: the node said:\n{last_words}");
        assert!(
            last_words.contains("current.snapshot"),
            "{how:?}: the refusal does not name the file:\n{last_words}"
        );
        assert!(
            last_words.contains("baton cluster remove") && last_words.contains("--join"),
            "{how:?}: the refusal does not say how to recover:\n{last_words}"
        );

        // Nothing spread: the others serve every key as it was, and take new claims.
        all_there(&client, ReadMode::Linearizable).await.unwrap();
        let g = client
            .claim(&format!("d/while-{how:?}"), "during", TTL)
            .await
            .unwrap();
        assert!(matches!(g, ClaimOutcome::Granted(_)), "{g:?}");

        // The documented recovery: remove it, wipe its data dir, start it with --join.
        let m = client.remove_member(victim).await.unwrap();
        assert!(!m.members.iter().any(|m| m.id == victim), "{m:?}");
        std::fs::remove_dir_all(&cluster.nodes[&victim].data_dir).unwrap();
        cluster.start_node_joining(victim, &others);
        wait_for(
            "the victim to be a voter again",
            Duration::from_secs(30),
            async || {
                client
                    .members()
                    .await
                    .is_ok_and(|m| m.members.iter().any(|m| m.id == victim && m.voter))
            },
        )
        .await;
        let own = cluster.client_of(victim).await;
        wait_for(
            "the victim to have every key",
            Duration::from_secs(20),
            async || all_there(&own, ReadMode::Stale).await.is_ok(),
        )
        .await;
    }
}

/// The leader's Raft log damaged while it is down: a block flipped in the middle of what its
/// last segment holds, then (on the next leader) that segment cut to half of it. The node
/// ends its log at the first damaged record (as sled 0.34 did, without a word, when the log
/// lived there), so it comes back with fewer entries than it acknowledged. It must not lead
/// on that log: restarted within the election timeout it used to resume leading in the same
/// term, on its persisted vote, and served reads without the lost entries
/// (jepsen-tests/BUGS.md, P5). Now it must win an election first, which the others refuse
/// it, and the new leader repairs its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_log_lost_its_tail_does_not_lead_on_it() {
    let _serial = serial().await;
    let (mut cluster, client) = claimed_cluster().await;
    for how in [Damage::FlippedBlock, Damage::Truncated] {
        let victim = cluster.leader(Duration::from_secs(10)).await;
        let before = client
            .status_of(&cluster.nodes[&victim].addr)
            .await
            .unwrap();
        cluster.kill(victim);
        damage_log(&cluster.nodes[&victim].data_dir.join("log"), how);
        cluster.start_node(victim);
        // Every acknowledged claim is served, linearizably, and stays so.
        wait_for("every key served", Duration::from_secs(20), async || {
            all_there(&client, ReadMode::Linearizable).await.is_ok()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        all_there(&client, ReadMode::Linearizable)
            .await
            .unwrap_or_else(|e| panic!("{how:?}: {e}"));
        let leader = cluster.leader(Duration::from_secs(10)).await;
        let after = client
            .status_of(&cluster.nodes[&leader].addr)
            .await
            .unwrap();
        assert!(
            after.term > before.term,
            "{how:?}: no election: {before:?} -> {after:?}"
        );
        // The damaged node runs, repaired from the leader.
        let own = cluster.client_of(victim).await;
        wait_for(
            "the damaged node repaired",
            Duration::from_secs(20),
            async || all_there(&own, ReadMode::Stale).await.is_ok(),
        )
        .await;
    }
}
