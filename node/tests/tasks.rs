//! The task board on a real 3-node cluster: a dispatcher posts tasks, agents race on
//! `claim-next`, each task goes to exactly one of them in one log entry, and the losers are
//! told, with counts, that nothing is left. Every racer is its own client (its own session),
//! half of them talking to followers, which forward.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use baton_client::{Error, NextFilter, NextOutcome, ReadMode, RecordPatch, RefusalReason};
use common::{serial, Cluster};

const TASKS: usize = 16;
const RACERS: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_racers_on_claim_next_over_sixteen_tasks_make_sixteen_distinct_winners() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let dispatcher = cluster.client().await;
    for i in 0..TASKS {
        let patch = RecordPatch {
            summary: Some(format!("task {i}")),
            set_fields: [("role".to_owned(), "coder".to_owned())].into(),
            ..RecordPatch::default()
        };
        let posted = dispatcher
            .post(&format!("tasks/{i:02}"), patch, None, "dispatch@ci", false)
            .await
            .unwrap();
        assert!(posted.created);
        assert_eq!(posted.record.status, "open");
    }
    // A key outside the prefix and a finished task under it are never handed out.
    dispatcher
        .post(
            "other/1",
            RecordPatch::default(),
            None,
            "dispatch@ci",
            false,
        )
        .await
        .unwrap();
    let done = RecordPatch {
        status: Some("done".into()),
        ..RecordPatch::default()
    };
    dispatcher
        .post("tasks/zz-done", done, None, "dispatch@ci", false)
        .await
        .unwrap();

    let mut racers = Vec::new();
    for i in 0..RACERS {
        racers.push(cluster.client_of(1 + (i as u64 % 3)).await);
    }
    let filter = NextFilter {
        any: false,
        wheres: vec![("role".into(), "coder".into())],
    };
    let answers = futures::future::join_all(racers.iter().enumerate().map(|(i, c)| {
        let filter = filter.clone();
        async move {
            c.claim_next(
                "tasks/",
                &format!("agent-{i}"),
                Duration::from_secs(60),
                &filter,
            )
            .await
            .unwrap()
        }
    }))
    .await;
    let mut winners: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    let mut nothing = 0;
    for answer in &answers {
        match answer {
            NextOutcome::Granted(grant) => winners
                .entry(grant.lease.key.clone())
                .or_default()
                .push((grant.lease.holder_name.clone(), grant.lease.token)),
            NextOutcome::Nothing(counts) => {
                nothing += 1;
                // Every member reads data format 14: the leader proposes the walk of the
                // unfinished keys, which passes the finished task by unseen.
                assert_eq!(
                    (counts.scanned, counts.finished, counts.truncated),
                    (TASKS as u64, 0, false),
                    "{counts:?}"
                );
                assert!(counts.held > 0, "{counts:?}");
            }
        }
    }
    assert_eq!(winners.len(), TASKS, "{winners:?}");
    assert!(winners.values().all(|w| w.len() == 1), "{winners:?}");
    assert_eq!(nothing, RACERS - TASKS);
    // What each winner was told is what the cluster holds: its name, its token.
    for (key, won) in &winners {
        let probe = dispatcher.probe(key, ReadMode::Linearizable).await.unwrap();
        let lease = probe.lease.expect("held");
        assert_eq!((lease.holder_name.clone(), lease.token), won[0]);
        let history = dispatcher
            .history(key, ReadMode::Linearizable)
            .await
            .unwrap();
        let kinds: Vec<&str> = history.events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["posted", "claimed"], "{key}");
        // The post set the status, and says so typed; the claim set none.
        let set: Vec<Option<&str>> = history
            .events
            .iter()
            .map(|e| e.status_set.as_deref())
            .collect();
        assert_eq!(set, [Some("open"), None], "{key}");
    }
    // Posting a task that is on the board is refused, naming its holder.
    let again = dispatcher
        .post(
            "tasks/00",
            RecordPatch::default(),
            None,
            "dispatch@ci",
            false,
        )
        .await
        .unwrap_err();
    match again {
        Error::Refused(r) => {
            assert_eq!(r.reason, RefusalReason::Exists);
            assert_eq!(r.status, "open");
            assert_eq!(
                r.lease.map(|l| l.holder_name),
                Some(winners["tasks/00"][0].0.clone())
            );
        }
        other => panic!("expected an exists refusal: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_next_gives_an_agent_its_own_assignment_first_and_leaves_others_assignments() {
    let _serial = serial().await;
    let cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let dispatcher = cluster.client().await;
    for (key, to) in [("q/a", Some("bob")), ("q/b", None), ("q/c", Some("ann"))] {
        dispatcher
            .post(key, RecordPatch::default(), to, "dispatch@ci", false)
            .await
            .unwrap();
    }
    let ann = cluster.client().await;
    let cy = cluster.client().await;
    let ttl = Duration::from_secs(60);
    let plain = NextFilter::default();
    let key_of = |outcome: NextOutcome| match outcome {
        NextOutcome::Granted(g) => g.lease.key,
        NextOutcome::Nothing(n) => panic!("nothing: {n:?}"),
    };
    assert_eq!(
        key_of(ann.claim_next("q/", "ann", ttl, &plain).await.unwrap()),
        "q/c"
    );
    assert_eq!(
        key_of(cy.claim_next("q/", "cy", ttl, &plain).await.unwrap()),
        "q/b"
    );
    match cy.claim_next("q/", "cy", ttl, &plain).await.unwrap() {
        NextOutcome::Nothing(n) => assert_eq!((n.held, n.assigned_elsewhere), (2, 1), "{n:?}"),
        other => panic!("{other:?}"),
    }
    let any = NextFilter {
        any: true,
        ..NextFilter::default()
    };
    assert_eq!(
        key_of(cy.claim_next("q/", "cy", ttl, &any).await.unwrap()),
        "q/a"
    );
}

/// The upgrade to data format 14 on real processes: while the leader knows a member that
/// reads only format 13, `claim-next` is proposed with format 9's walk (a format-13 node
/// could not decode format 14's command), which looks at finished tasks too; once that
/// member answers as format 14, the walk of the unfinished keys, which passes them by unseen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_next_walks_every_case_file_until_every_member_reads_format_14() {
    let _serial = serial().await;
    let mut cluster = Cluster::start(3).await;
    cluster.leader(Duration::from_secs(10)).await;
    let dispatcher = cluster.client().await;
    let done = RecordPatch {
        status: Some("done".into()),
        ..RecordPatch::default()
    };
    for (key, patch) in [("up/a", RecordPatch::default()), ("up/b", done)] {
        dispatcher
            .post(key, patch, None, "dispatch@ci", false)
            .await
            .unwrap();
    }
    let ttl = Duration::from_secs(60);
    let plain = NextFilter::default();
    let ann = cluster.client().await;
    match ann.claim_next("up/", "ann", ttl, &plain).await.unwrap() {
        NextOutcome::Granted(g) => assert_eq!(g.lease.key, "up/a"),
        other => panic!("{other:?}"),
    }
    let counts = |outcome: NextOutcome| match outcome {
        NextOutcome::Nothing(n) => (n.scanned, n.held, n.finished),
        other => panic!("expected nothing claimable: {other:?}"),
    };
    let bob = cluster.client().await;
    assert_eq!(
        counts(bob.claim_next("up/", "bob", ttl, &plain).await.unwrap()),
        (1, 1, 0),
        "every member reads format 14: the finished task is not looked at"
    );
    drop((dispatcher, ann, bob));
    // Nodes 1 and 2 come back knowing node 3 (down) as a format-13 node, as in a rolling
    // upgrade to format 14 whose last node is not upgraded yet and down.
    tokio::task::block_in_place(|| {
        for id in [1, 2, 3] {
            cluster.stop(id);
        }
    });
    for id in [1, 2] {
        let path = cluster.nodes[&id].data_dir.join("peer-formats.json");
        let mut formats: BTreeMap<String, u32> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(formats.get("3"), Some(&15), "{formats:?}");
        formats.insert("3".into(), 13);
        std::fs::write(&path, serde_json::to_vec(&formats).unwrap()).unwrap();
        cluster.start_node(id);
    }
    cluster.leader(Duration::from_secs(20)).await;
    let bob = cluster.client().await;
    assert_eq!(
        counts(bob.claim_next("up/", "bob", ttl, &plain).await.unwrap()),
        (2, 1, 1),
        "with a format-13 member, format 9's walk: the finished task is looked at"
    );
    // Node 3 comes back as format 14 and answers the leader: the new walk from then on.
    cluster.start_node(3);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = counts(bob.claim_next("up/", "bob", ttl, &plain).await.unwrap());
        if seen == (1, 1, 0) {
            break;
        }
        assert_eq!(seen, (2, 1, 1), "only format 9's walk or format 14's");
        assert!(
            std::time::Instant::now() < deadline,
            "node 3 answered as format 14 but the leader kept format 9's walk"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
