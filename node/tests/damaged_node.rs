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

/// A way a file is damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// One block in the middle, every bit flipped.
    FlippedBlock,
    /// The file cut to half its length.
    Truncated,
    /// One bit flipped, two thirds into it.
    FlippedBit,
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
        Damage::FlippedBit => {
            let at = len * 2 / 3;
            let mut byte = [0u8];
            f.read_exact_at(&mut byte, at).unwrap();
            f.write_all_at(&[byte[0] ^ 1], at).unwrap();
        }
    }
    f.sync_all().unwrap();
}

/// Damages the last segment file in `log_dir` that holds records, within what it holds
/// (segments are zeros after their records); returns that file.
fn damage_log(log_dir: &Path, how: Damage) -> std::path::PathBuf {
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
    file
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

/// A snapshot damaged in any way, or a log segment cut short (what it held past the cut, and
/// so what the node acknowledged, is unknown): the node refuses to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_or_a_cut_log_is_refused_not_spread_and_remove_and_join_recovers() {
    let _serial = serial().await;
    let (mut cluster, client) = claimed_cluster().await;
    let victim = 3;
    let others: Vec<String> = [1, 2]
        .iter()
        .map(|id| cluster.nodes[id].addr.clone())
        .collect();
    for (in_log, how) in [
        (false, Damage::FlippedBlock),
        (false, Damage::Truncated),
        (true, Damage::Truncated),
    ] {
        // The victim writes its snapshot, and goes down; a file is damaged meanwhile.
        let taken = client
            .snapshot_at(&cluster.nodes[&victim].addr)
            .await
            .unwrap();
        assert!(taken.snapshot_index > 0, "{taken:?}");
        if in_log {
            // Entries after the snapshot, so that the cut takes some the node acknowledged.
            for i in 0..5 {
                let key = format!("d/after-snapshot-{i}");
                let g = client.claim(&key, "during", TTL).await.unwrap();
                assert!(matches!(g, ClaimOutcome::Granted(_)), "{g:?}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        cluster.kill(victim);
        let file = if in_log {
            damage_log(&cluster.nodes[&victim].data_dir.join("log"), how)
        } else {
            let file = cluster.nodes[&victim]
                .data_dir
                .join("snapshots")
                .join("current.snapshot");
            damage(&file, how);
            file
        };
        let name = file.file_name().unwrap().to_str().unwrap().to_owned();
        let how = format!("{how:?} {name}");

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
            last_words.contains(&name),
            "{how:?}: the refusal does not name the file:\n{last_words}"
        );
        assert!(
            last_words.contains("baton cluster remove") && last_words.contains("--join"),
            "{how:?}: the refusal does not say how to recover:\n{last_words}"
        );

        // Nothing spread: the others serve every key as it was, and take new claims.
        all_there(&client, ReadMode::Linearizable).await.unwrap();
        let g = client
            .claim(&format!("d/while-{how}"), "during", TTL)
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
/// last segment holds, then (on the next leader) one bit. The node keeps the damaged files,
/// cuts its log there and waits for a repair (it does not lead, vote or campaign on the
/// shorter log: restarted within the election timeout it once resumed leading in the same
/// term, on its persisted vote, and served reads without the lost entries; jepsen-tests/
/// BUGS.md, P5). The others elect a leader, which refills its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_log_lost_its_tail_does_not_lead_on_it() {
    let _serial = serial().await;
    let (mut cluster, client) = claimed_cluster().await;
    for how in [Damage::FlippedBlock, Damage::FlippedBit] {
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

/// Claims acknowledged while one node of three is down.
const LATE_KEYS: usize = 120;

/// Whether every key of `late/0 ..` is held by "late" as `client` reads it linearizably:
/// Ok(true), a key free or held by another (an acknowledged grant lost), or Ok(false) when
/// the cluster does not answer.
async fn late_keys_there(client: &baton_client::Client) -> Result<bool, String> {
    for i in 0..LATE_KEYS {
        let key = format!("late/{i}");
        match client.probe(&key, ReadMode::Linearizable).await {
            Ok(probe) => {
                let holder = probe.lease.map(|l| l.holder_name);
                if holder.as_deref() != Some("late") {
                    return Err(format!(
                        "{key} is held by {holder:?}: an acknowledged grant lost"
                    ));
                }
            }
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}

/// Issue 35, finding 1, as it was found from the outside: node 3 down; 120 claims acknowledged
/// by nodes 1 and 2; one bit flipped two thirds into node 2's log while it is down; node 1
/// down; nodes 2 and 3 up. Before data format 7, node 2 took the bad record for a torn tail,
/// cut its log there, and with node 3 elected a leader that lacked a third of the grants (41
/// of 120 in the run); they stayed lost when node 1 came back. Now node 2 keeps the
/// damage aside and votes for no one until it is refilled: nodes 2 and 3 answer no one (no
/// grant is ever read as lost), node 2 says it is not ready and why, and once node 1 is back
/// every grant is there and node 2 is refilled, ready, and votes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flipped_bit_in_one_nodes_log_loses_no_acknowledged_grant() {
    let _serial = serial().await;
    let mut cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let client = cluster.client().await;
    cluster.leader(Duration::from_secs(10)).await;
    cluster.kill(3);
    for i in 0..LATE_KEYS {
        let g = client
            .claim(&format!("late/{i}"), "late", TTL)
            .await
            .unwrap();
        assert!(matches!(g, ClaimOutcome::Granted(_)), "{g:?}");
    }
    // Node 2 goes down (kill -9: no clean stop; its idle mark is all it wrote after the
    // claims), and a bit of its log flips meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(2);
    let damaged = damage_log(&cluster.nodes[&2].data_dir.join("log"), Damage::FlippedBit);
    cluster.kill(1);
    cluster.start_node(2);
    cluster.start_node(3);

    // Nodes 2 and 3 alone: no answer, and never a lost grant.
    let of_2_and_3 = baton_client::Client::connect(baton_client::ClientConfig {
        retry_deadline: Duration::from_secs(1),
        ..baton_client::ClientConfig::with_endpoints([
            cluster.nodes[&2].addr.clone(),
            cluster.nodes[&3].addr.clone(),
        ])
    })
    .await
    .unwrap();
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        late_keys_there(&of_2_and_3)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let admin_2 = common::admin_addr(&cluster, 2).await;
    let (code, body) = common::http_get(&admin_2, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("damaged"), "{body}");
    let log_dir = cluster.nodes[&2].data_dir.join("log");
    let kept: Vec<_> = std::fs::read_dir(log_dir.join("damaged"))
        .expect("the damaged files are kept")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let copy = kept[0].join(damaged.file_name().unwrap());
    assert!(copy.exists(), "{} is not kept", copy.display());
    assert!(log_dir.join("repair.json").exists());

    // Node 1 back: every grant is there, and node 2 is refilled and ready.
    cluster.start_node(1);
    wait_for("every grant served", Duration::from_secs(30), async || {
        late_keys_there(&client).await == Ok(true)
    })
    .await;
    late_keys_there(&client)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(
        "node 2 refilled and ready",
        Duration::from_secs(30),
        async || common::http_get(&admin_2, "/readyz").await.0 == 200,
    )
    .await;
    assert!(!log_dir.join("repair.json").exists());
    // It votes again: with node 1 down, nodes 2 and 3 elect a leader and serve every grant.
    cluster.kill(1);
    wait_for(
        "nodes 2 and 3 serving",
        Duration::from_secs(30),
        async || late_keys_there(&of_2_and_3).await == Ok(true),
    )
    .await;
}

/// Issue 54, finding 2: a log read back while the node runs was decoded from whatever the
/// disk returned (checksums were checked only at open), so a changed byte that still decoded
/// was applied, or shipped to a follower under a fresh checksum, and the replicas diverged.
/// Node `follower` is down while the leader writes 120 claims; then one bit flips two thirds
/// into the leader's log, under the running node. When the follower comes back, the leader
/// reads those entries to send them: the read fails its checksum, the leader marks its
/// storage failed and stops, naming the entry, and never ships it. The other two elect a
/// leader and serve every grant; the damaged node, started again, keeps the damage aside and
/// is refilled from the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_entry_damaged_under_a_running_leader_is_never_shipped_and_the_node_is_refilled() {
    let _serial = serial().await;
    let mut cluster = Cluster::start_with(3, &["--admin-listen", "127.0.0.1:0"]).await;
    let client = cluster.client().await;
    let leader = cluster.leader(Duration::from_secs(10)).await;
    let follower = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .unwrap();
    cluster.kill(follower);
    for i in 0..LATE_KEYS {
        let g = client
            .claim(&format!("late/{i}"), "late", TTL)
            .await
            .unwrap();
        assert!(matches!(g, ClaimOutcome::Granted(_)), "{g:?}");
    }
    // The write goes through the page cache the running node reads from.
    damage_log(
        &cluster.nodes[&leader].data_dir.join("log"),
        Damage::FlippedBit,
    );
    cluster.start_node(follower);
    cluster
        .wait_logged("read back damaged", 1, Duration::from_secs(30))
        .await;
    let log = std::fs::read_to_string(&cluster.nodes[&leader].log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("read back damaged") && l.contains("log entry")),
        "the leader names the damaged entry\n{log}"
    );
    // The other two serve every grant: nothing damaged reached them.
    wait_for("every grant served", Duration::from_secs(30), async || {
        late_keys_there(&client).await == Ok(true)
    })
    .await;
    // Started again, the damaged node keeps the damage aside and is refilled.
    cluster.kill(leader);
    cluster.start_node(leader);
    let node_log = cluster.nodes[&leader].log.clone();
    wait_for(
        "the restarted node's admin port",
        Duration::from_secs(10),
        async || {
            let log = std::fs::read_to_string(&node_log).unwrap_or_default();
            log.matches("admin listening on ").count() >= 2
        },
    )
    .await;
    let admin = common::admin_addr(&cluster, leader).await;
    wait_for(
        "the damaged node refilled and ready",
        Duration::from_secs(30),
        async || common::http_get(&admin, "/readyz").await.0 == 200,
    )
    .await;
    let log_dir = cluster.nodes[&leader].data_dir.join("log");
    assert!(
        log_dir.join("damaged").exists(),
        "the damaged files are kept at the restart\n{}",
        cluster.logs()
    );
    late_keys_there(&client)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
