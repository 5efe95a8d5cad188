//! The bench loop against a fake node (what it counts, how it ends, what it leaves held) and
//! the histogram's buckets, bounds and merges.

use std::sync::Arc;

use tonic::Code;

use super::*;
use crate::histogram::{bucket_index, bucket_upper};
use baton_client::fake_node::{FakeNode, RenewAnswer};

fn histogram(values: impl IntoIterator<Item = u64>) -> LatencyHistogram {
    let mut histogram = LatencyHistogram::default();
    for value in values {
        histogram.record_us(value);
    }
    histogram
}

#[test]
fn small_latencies_have_exact_nearest_rank_percentiles() {
    let h = histogram(1..=100);
    assert_eq!(h.count(), 100);
    assert_eq!(h.percentile(50), 50);
    assert_eq!(h.percentile(99), 99);
    assert_eq!(h.percentile(100), 100);
    assert_eq!(
        h.percentile(0),
        1,
        "the 0th percentile is the smallest value"
    );
    assert_eq!(h.max(), 100);

    // Nearest rank rounds the rank up: of 3 values, p50 is the 2nd and p99 the 3rd.
    let h = histogram([10, 20, 30]);
    assert_eq!((h.percentile(50), h.percentile(99)), (20, 30));
    let h = histogram([7]);
    assert_eq!(
        h.summary(),
        LatencySummary {
            count: 1,
            p50: 7,
            p99: 7,
            max: 7
        }
    );
}

#[test]
fn an_empty_histogram_summarises_as_zeros() {
    let h = LatencyHistogram::default();
    assert_eq!(h.summary(), LatencySummary::default());
    assert_eq!(h.percentile(99), 0);
}

#[test]
fn buckets_are_contiguous_and_within_one_sixty_fourth() {
    let mut last_index = 0;
    let mut value: u64 = 0;
    while value < 1 << 40 {
        let index = bucket_index(value);
        assert!(
            index == last_index || index == last_index + 1,
            "a gap before {value}: bucket {last_index} then {index}"
        );
        let upper = bucket_upper(index);
        assert!(
            upper >= value,
            "{value} is above its bucket's upper bound {upper}"
        );
        assert!(
            (upper - value) * HISTOGRAM_SUB_BUCKETS <= value.max(1),
            "bucket of {value} too wide: upper {upper}"
        );
        assert_eq!(
            bucket_index(upper),
            index,
            "{upper} must stay in bucket {index}"
        );
        last_index = index;
        value = if value < 10_000 {
            value + 1
        } else {
            value + value / 997
        };
    }
    assert!(bucket_index(u64::MAX) < HISTOGRAM_BUCKETS_MAX);
    assert_eq!(bucket_upper(bucket_index(u64::MAX)), u64::MAX);
    assert_eq!(bucket_index(1_000_000), 954, "1 s needs 955 buckets");
}

#[test]
fn large_latencies_are_never_reported_below_the_true_value_nor_above_the_max() {
    // 1000 latencies from 1 ms to 1 s, one of them an outlier of 3.7 s.
    let mut values: Vec<u64> = (1..=999).map(|i| i * 1000).collect();
    values.push(3_700_123);
    let h = histogram(values.iter().copied());
    let (p50, p99, max) = (h.percentile(50), h.percentile(99), h.max());
    // The true nearest-rank values: the 500th and the 990th.
    assert!(
        (500_000..=500_000 + 500_000 / 64).contains(&p50),
        "p50 {p50}"
    );
    assert!(
        (990_000..=990_000 + 990_000 / 64).contains(&p99),
        "p99 {p99}"
    );
    assert_eq!(max, 3_700_123);
    assert_eq!(h.percentile(100), 3_700_123, "capped at the exact maximum");
    assert!(p50 <= p99 && p99 <= max);
}

#[test]
fn percentiles_are_capped_at_the_maximum() {
    // 200 µs falls in a bucket reaching 201 µs: the report must not exceed the max.
    let h = histogram([200; 10]);
    assert_eq!(bucket_upper(bucket_index(200)), 201);
    assert_eq!(
        h.summary(),
        LatencySummary {
            count: 10,
            p50: 200,
            p99: 200,
            max: 200
        }
    );
}

#[test]
fn merged_histograms_equal_one_histogram_of_all_values() {
    let a: Vec<u64> = (0..500).map(|i| i * 37 % 10_007).collect();
    let b: Vec<u64> = (0..700).map(|i| 5_000_000 + i * 1_013).collect();
    let mut merged = histogram(a.iter().copied());
    merged.merge(&histogram(b.iter().copied()));
    let whole = histogram(a.iter().chain(&b).copied());
    assert_eq!(merged, whole);
    // Merging into a shorter histogram grows it; merging an empty one changes nothing.
    let mut short = histogram([1]);
    short.merge(&whole);
    assert_eq!(short.count(), whole.count() + 1);
    let before = whole.clone();
    let mut whole = whole;
    whole.merge(&LatencyHistogram::default());
    assert_eq!(whole, before);
}

fn valid() -> BenchConfig {
    BenchConfig {
        endpoints: vec!["127.0.0.1:7001".into()],
        ..BenchConfig::default()
    }
}

/// The configuration error of `config`, which must be refused.
fn refusal(config: BenchConfig) -> String {
    match config.validate() {
        Err(Error::Config(message)) => message,
        other => panic!("{config:?} was not refused as a configuration error: {other:?}"),
    }
}

#[test]
fn the_defaults_and_every_limit_itself_are_accepted() {
    valid().validate().unwrap();
    let at_limits = [
        BenchConfig {
            clients: 1,
            keys: 1,
            ..valid()
        },
        BenchConfig {
            clients: BENCH_CLIENTS_MAX,
            keys: BENCH_KEYS_MAX,
            ..valid()
        },
        BenchConfig {
            duration: BENCH_DURATION_MAX,
            warmup: BENCH_WARMUP_MAX,
            ..valid()
        },
        BenchConfig {
            duration: Duration::from_millis(1),
            warmup: Duration::ZERO,
            ..valid()
        },
        BenchConfig {
            ttl: BENCH_TTL_MIN,
            ..valid()
        },
        BenchConfig {
            ttl: BENCH_TTL_MAX,
            ..valid()
        },
        BenchConfig {
            retry_deadline: BENCH_RETRY_DEADLINE_MAX,
            ..valid()
        },
        BenchConfig {
            key_prefix: String::new(),
            ..valid()
        },
        BenchConfig {
            key_prefix: "p".repeat(BENCH_KEY_PREFIX_BYTES_MAX),
            ..valid()
        },
    ];
    for config in at_limits {
        assert_eq!(config.validate(), Ok(()), "{config:?}");
    }
}

#[test]
fn every_limit_is_refused_with_a_message_naming_it() {
    let cases: Vec<(BenchConfig, &str)> = vec![
        (
            BenchConfig {
                clients: 0,
                ..valid()
            },
            "clients must be 1 to 4096, got 0",
        ),
        (
            BenchConfig {
                clients: BENCH_CLIENTS_MAX + 1,
                ..valid()
            },
            "clients must be 1 to 4096, got 4097",
        ),
        (
            BenchConfig { keys: 0, ..valid() },
            "keys must be 1 to 1000000, got 0",
        ),
        (
            BenchConfig {
                keys: BENCH_KEYS_MAX + 1,
                ..valid()
            },
            "keys must be 1 to 1000000, got 1000001",
        ),
        (
            BenchConfig {
                duration: Duration::ZERO,
                ..valid()
            },
            "duration must be above zero and at most 3600s, got 0s",
        ),
        (
            BenchConfig {
                duration: BENCH_DURATION_MAX + Duration::from_millis(1),
                ..valid()
            },
            "duration must be above zero and at most 3600s, got 3600.001s",
        ),
        (
            BenchConfig {
                warmup: BENCH_WARMUP_MAX + Duration::from_secs(1),
                ..valid()
            },
            "warm-up must be at most 600s, got 601s",
        ),
        (
            BenchConfig {
                ttl: Duration::from_millis(999),
                ..valid()
            },
            "ttl must be 1s to 3600s, got 0.999s",
        ),
        (
            BenchConfig {
                ttl: BENCH_TTL_MAX + Duration::from_secs(1),
                ..valid()
            },
            "ttl must be 1s to 3600s, got 3601s",
        ),
        (
            BenchConfig {
                retry_deadline: Duration::ZERO,
                ..valid()
            },
            "retry deadline must be above zero and at most 60s, got 0s",
        ),
        (
            BenchConfig {
                retry_deadline: Duration::from_secs(61),
                ..valid()
            },
            "retry deadline must be above zero and at most 60s, got 61s",
        ),
        (
            BenchConfig {
                key_prefix: "p".repeat(BENCH_KEY_PREFIX_BYTES_MAX + 1),
                ..valid()
            },
            "key prefix must be at most 506 bytes",
        ),
        (
            BenchConfig {
                key_prefix: "bench\n".into(),
                ..valid()
            },
            "key prefix must not contain control characters",
        ),
        (
            BenchConfig {
                endpoints: vec![],
                ..valid()
            },
            "no endpoints given",
        ),
        (
            BenchConfig {
                endpoints: vec!["http://".into()],
                ..valid()
            },
            "invalid",
        ),
    ];
    for (config, expected) in cases {
        let message = refusal(config);
        assert!(
            message.contains(expected),
            "{message:?} does not say {expected:?}"
        );
    }
}

#[test]
fn keys_are_the_prefix_and_six_digits() {
    let config = BenchConfig {
        keys: BENCH_KEYS_MAX,
        ..valid()
    };
    assert_eq!(config.key(123), "bench/000123");
    assert_eq!(config.key(BENCH_KEYS_MAX - 1), "bench/999999");
    let config = BenchConfig {
        key_prefix: String::new(),
        ..valid()
    };
    assert_eq!(config.key(0), "000000");
    assert!(config.key(BENCH_KEYS_MAX - 1).len() + BENCH_KEY_PREFIX_BYTES_MAX <= KEY_BYTES_MAX);
}

/// Serves `node`; a configuration of 3 clients over 5 keys against it, measuring for
/// 500 ms after 100 ms, with 3 s of retries per operation (so that a busy test machine
/// does not turn a slow answer into an error).
async fn fake(node: &Arc<FakeNode>) -> (BenchConfig, tokio::task::JoinHandle<()>) {
    let (addr, task) = node.serve().await;
    let config = BenchConfig {
        endpoints: vec![addr.to_string()],
        clients: 3,
        keys: 5,
        duration: Duration::from_millis(500),
        warmup: Duration::from_millis(100),
        retry_deadline: Duration::from_secs(3),
        ..BenchConfig::default()
    };
    (config, task)
}

#[tokio::test]
async fn each_granted_claim_is_renewed_once_then_released() {
    let node = Arc::new(FakeNode::default());
    let (config, task) = fake(&node).await;
    let report = run(config).await.unwrap();
    task.abort();

    assert!(report.attempts > 0, "{report:?}");
    // The fake node grants every claim: every counted claim is a win.
    assert_eq!(report.granted, report.attempts);
    assert_eq!(report.held, 0);
    assert_eq!(report.win_rate, 1.0);
    assert!(
        report.cycles > 0 && report.cycles <= report.attempts,
        "{report:?}"
    );
    assert_eq!(report.errors, BenchErrors::default());
    assert_eq!(report.last_error, None);
    assert!(!report.no_answer());
    let latency = report.latency_us;
    assert_eq!(latency.claim.count, report.attempts);
    assert_eq!(latency.cycle.count, report.cycles);
    for step in [latency.claim, latency.renew, latency.release, latency.cycle] {
        assert!(step.p50 <= step.p99 && step.p99 <= step.max, "{step:?}");
    }
    // Every granted claim is released, also one granted after the end (which is not
    // renewed); every renewal follows a claim.
    assert_eq!(node.count("claim"), node.count("release"));
    assert!(node.count("renew") <= node.count("claim"));
    assert!(node.count("renew") >= node.count("claim") - 3);
    // Each claimant is its own client: three client ids, three request sessions.
    let sessions: std::collections::HashSet<String> = node
        .calls()
        .iter()
        .filter_map(|c| c.request_id.as_ref().map(|(session, _)| session.clone()))
        .collect();
    assert_eq!(sessions.len(), 3);
}

#[tokio::test]
async fn held_claims_move_on_to_the_next_key() {
    let node = Arc::new(FakeNode::default());
    node.hold_claims(usize::MAX, Duration::from_secs(30));
    let (config, task) = fake(&node).await;
    let report = run(config).await.unwrap();
    task.abort();
    assert!(report.attempts > 0);
    assert_eq!(
        (report.granted, report.held),
        (0, report.attempts),
        "{report:?}"
    );
    assert_eq!((report.cycles, report.win_rate), (0, 0.0));
    assert_eq!(report.errors.total(), 0);
    assert_eq!(node.count("renew") + node.count("release"), 0);
    assert!(!report.no_answer(), "a held claim is an answer");
}

#[tokio::test]
async fn lost_renewals_are_counted_and_nothing_is_released() {
    let node = Arc::new(FakeNode::default());
    node.answer_renewals(RenewAnswer::LostToOther);
    let (config, task) = fake(&node).await;
    let report = run(config).await.unwrap();
    task.abort();
    assert!(report.errors.lost > 0, "{report:?}");
    assert_eq!(report.cycles, 0);
    // Only a claim granted after the end (one per claimant at most) is released without
    // a renewal; a lost renewal leaves nothing to release.
    assert!(node.count("release") <= 3);
    assert!(node.count("renew") >= node.count("claim") - 3);
    assert!(report.last_error.unwrap().contains("lost the lease"));
}

#[tokio::test]
async fn an_unavailable_cluster_is_counted_and_does_not_stop_the_run() {
    let node = Arc::new(FakeNode::default());
    node.fail_always(Code::Unavailable, "no leader");
    let (config, task) = fake(&node).await;
    let config = BenchConfig {
        retry_deadline: Duration::from_millis(200),
        ..config
    };
    let started = Instant::now();
    let report = run(config).await.unwrap();
    task.abort();
    // Each claim retries for the 200 ms retry deadline, so some finish in the 500 ms
    // window.
    assert!(report.errors.unavailable > 0, "{report:?}");
    assert_eq!(report.errors.unavailable, report.attempts);
    assert_eq!(report.granted + report.held + report.cycles, 0);
    assert_eq!(report.latency_us.claim.count, 0, "errors have no latency");
    assert!(report.no_answer());
    assert!(report.last_error.unwrap().contains("unavailable"));
    // The run ends within about a retry deadline of its end.
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn operations_that_end_after_the_window_are_not_counted() {
    let node = Arc::new(FakeNode::default());
    // Renewals take longer than the whole run: no cycle finishes inside the window.
    node.delay_renewals(Duration::from_millis(1500));
    let (config, task) = fake(&node).await;
    let config = BenchConfig {
        warmup: Duration::ZERO,
        ..config
    };
    let report = run(config).await.unwrap();
    task.abort();
    // Each claimant's first claim counts; its renewal and release end after the window.
    assert_eq!(report.attempts, 3, "{report:?}");
    assert_eq!(report.granted, 3);
    assert_eq!(report.cycles, 0);
    assert_eq!(report.latency_us.renew.count, 0);
    assert_eq!(report.latency_us.release.count, 0);
    assert_eq!(report.errors.total(), 0);
    // The keys were released all the same.
    assert_eq!(node.count("release"), 3);
}
