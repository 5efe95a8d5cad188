//! All-or-none claims on a real 3-node cluster: a set is granted whole in one entry (every
//! key the entry's revision as its token) or not at all, naming every key that blocked and
//! its holder; racing overlapping sets never share a key. Every racer is its own client (its
//! own session), a third of them talking to each node.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_client::{BlockedKey, ReadMode, ReleaseOutcome, SetOutcome};
use common::{serial, Cluster};

const TTL: Duration = Duration::from_secs(60);

fn granted(outcome: SetOutcome) -> Vec<baton_client::Grant> {
    match outcome {
        SetOutcome::Granted(grants) => grants,
        other => panic!("not granted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_overlapping_a_held_key_grants_nothing_and_is_granted_whole_once_it_is_free() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let bob = cluster.client_of(2).await;
    let ann = cluster.client_of(3).await;
    let held = match bob.claim("files/b.rs", "bob@h2", TTL).await.unwrap() {
        baton_client::ClaimOutcome::Granted(g) => g,
        other => panic!("{other:?}"),
    };
    let keys = ["files/a.rs", "files/b.rs", "files/c.rs"];
    let blocked = match ann.claim_set(&keys, "ann@h1", TTL).await.unwrap() {
        SetOutcome::Blocked(blocked) => blocked,
        other => panic!("granted over a held key: {other:?}"),
    };
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    let BlockedKey::Held { lease, .. } = &blocked[0] else {
        panic!("{blocked:?}");
    };
    assert_eq!(
        (lease.key.as_str(), lease.holder_name.as_str(), lease.token),
        ("files/b.rs", "bob@h2", held.lease.token)
    );
    for key in ["files/a.rs", "files/c.rs"] {
        let probe = ann.probe(key, ReadMode::Linearizable).await.unwrap();
        assert_eq!(probe.lease, None, "{key} was granted by a refused set");
    }

    assert!(matches!(
        bob.release("files/b.rs", held.lease.token).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let grants = granted(ann.claim_set(&keys, "ann@h1", TTL).await.unwrap());
    let token = grants[0].lease.token;
    assert!(token > held.lease.token);
    for (grant, key) in grants.iter().zip(keys) {
        assert_eq!(grant.lease.key, key, "in the order asked");
        assert_eq!(
            grant.lease.token, token,
            "one entry, one revision, one token"
        );
        assert_eq!(grant.lease.holder_name, "ann@h1");
        let probe = bob.probe(key, ReadMode::Linearizable).await.unwrap();
        assert_eq!(probe.lease.map(|l| l.token), Some(token));
    }
    // Bob's claim of the set names every key Ann holds now; each is released on its own.
    let blocked = match bob.claim_set(&keys, "bob@h2", TTL).await.unwrap() {
        SetOutcome::Blocked(blocked) => blocked,
        other => panic!("{other:?}"),
    };
    let named: Vec<&str> = blocked.iter().map(BlockedKey::key).collect();
    assert_eq!(named, keys);
    for key in keys {
        assert!(matches!(
            ann.release(key, token).await.unwrap(),
            ReleaseOutcome::Released { .. }
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_overlapping_sets_never_share_a_key_and_each_is_granted_whole_or_not_at_all() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    const RACERS: usize = 32;
    const KEYS: usize = 12;
    let mut racers = Vec::new();
    for i in 0..RACERS {
        racers.push(cluster.client_of(1 + (i as u64 % 3)).await);
    }
    // Racer i wants keys i, i+1 and i+5 (mod 12): every set overlaps several others.
    let sets: Vec<Vec<String>> = (0..RACERS)
        .map(|i| {
            [i, i + 1, i + 5]
                .iter()
                .map(|k| format!("res/{:02}", k % KEYS))
                .collect()
        })
        .collect();
    let answers = futures::future::join_all(racers.iter().zip(&sets).enumerate().map(
        |(i, (c, set))| async move {
            let keys: Vec<&str> = set.iter().map(String::as_str).collect();
            c.claim_set(&keys, &format!("agent-{i}"), TTL)
                .await
                .unwrap()
        },
    ))
    .await;
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let mut won = 0;
    for (i, answer) in answers.iter().enumerate() {
        if let SetOutcome::Granted(grants) = answer {
            won += 1;
            assert_eq!(grants.len(), 3, "a partial set: {grants:?}");
            assert!(grants
                .iter()
                .all(|g| g.lease.token == grants[0].lease.token));
            for g in grants {
                let earlier = owner.insert(g.lease.key.clone(), format!("agent-{i}"));
                assert_eq!(earlier, None, "{} granted twice", g.lease.key);
            }
        }
    }
    assert!(won >= 1, "someone wins");
    // Every refusal names keys really held, by the holder the cluster has now (no one
    // releases), and every key held is held by the winner of its set.
    let probe = &racers[0];
    for (i, answer) in answers.iter().enumerate() {
        if let SetOutcome::Blocked(blocked) = answer {
            assert!(!blocked.is_empty());
            for b in blocked {
                let BlockedKey::Held { lease, .. } = b else {
                    panic!("{b:?}");
                };
                assert!(sets[i].contains(&lease.key));
                assert_eq!(owner.get(&lease.key), Some(&lease.holder_name), "{b:?}");
            }
        }
    }
    for k in 0..KEYS {
        let key = format!("res/{k:02}");
        let held = probe.probe(&key, ReadMode::Linearizable).await.unwrap();
        assert_eq!(
            held.lease.map(|l| l.holder_name),
            owner.get(&key).cloned(),
            "{key}"
        );
    }
}
