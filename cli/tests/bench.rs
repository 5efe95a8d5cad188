//! `baton bench` against a real 3-node cluster of `baton-node` processes: the library's
//! workload ([`baton_workload::run`]) and the CLI's JSON line and exit codes.

mod common;

use std::time::Duration;

use baton_client::ReadMode;
use baton_workload::{self as bench, BenchConfig, LatencySummary};
use common::{cli_bin, free_port, Cluster};
use serde_json::Value;

fn ordered(summary: &LatencySummary) -> bool {
    summary.p50 <= summary.p99 && summary.p99 <= summary.max
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_claimants_over_four_keys_complete_cycles_without_errors_and_free_every_key() {
    let cluster = Cluster::start(3).await;
    let config = BenchConfig {
        endpoints: cluster.endpoints.clone(),
        clients: 4,
        keys: 4,
        duration: Duration::from_secs(2),
        warmup: Duration::from_millis(500),
        key_prefix: "bench-test/".into(),
        ..BenchConfig::default()
    };
    let report = bench::run(config.clone()).await.unwrap();
    let context = format!("{report:#?}\n{}", cluster.logs());

    assert!(report.attempts > 0, "{context}");
    assert!(report.cycles > 0, "{context}");
    assert!(report.cycles <= report.granted, "{context}");
    assert!(report.granted <= report.attempts, "{context}");
    assert_eq!(report.granted + report.held, report.attempts, "{context}");
    assert!(report.win_rate > 0.0 && report.win_rate <= 1.0, "{context}");
    assert_eq!(report.errors.total(), 0, "{context}");
    // Not even outside the window: every granted claim was released.
    assert_eq!(report.last_error, None, "{context}");
    assert!(!report.no_answer());
    assert_eq!((report.clients, report.keys), (4, 4));

    let latency = report.latency_us;
    assert_eq!(latency.claim.count, report.attempts, "{context}");
    assert_eq!(latency.cycle.count, report.cycles, "{context}");
    for step in [latency.claim, latency.renew, latency.release, latency.cycle] {
        assert!(step.count > 0 && step.max > 0, "{step:?}: {context}");
        assert!(ordered(&step), "{step:?}: {context}");
    }

    // The run left every key free.
    let client = cluster.client().await;
    for index in 0..config.keys {
        let key = config.key(index);
        let probe = client.probe(&key, ReadMode::Linearizable).await.unwrap();
        assert_eq!(probe.lease, None, "{key} is still held after the run");
    }
}

/// The JSON object `baton bench` printed as its last stdout line, and every stdout line.
fn last_json_line(out: &std::process::Output) -> (Value, Vec<String>) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<String> = stdout.lines().map(str::to_owned).collect();
    let json = lines
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| {
            panic!(
                "no JSON line last: stdout {stdout:?} stderr {:?}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (json, lines)
}

fn assert_ordered(summary: &Value) {
    let field = |name: &str| {
        summary[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{summary}"))
    };
    assert!(
        field("p50") <= field("p99") && field("p99") <= field("max"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_one_json_line_with_output_json_and_a_table_before_it_otherwise() {
    let cluster = Cluster::start(3).await;
    let args = [
        "bench",
        "--clients",
        "2",
        "--keys",
        "4",
        "--duration",
        "1s",
        "--warmup",
        "200ms",
        "--prefix",
        "cli-bench/",
    ];
    let mut json_args = args.to_vec();
    json_args.extend(["--output", "json"]);
    let out = cluster.baton(&json_args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let (report, lines) = last_json_line(&out);
    assert_eq!(lines.len(), 1, "only the JSON line: {lines:?}");
    assert_eq!(
        (report["clients"].as_u64(), report["keys"].as_u64()),
        (Some(2), Some(4))
    );
    assert_eq!(report["key_prefix"], "cli-bench/");
    assert_eq!(report["duration_s"].as_f64(), Some(1.0));
    assert_eq!(report["ttl_ms"].as_u64(), Some(10_000));
    let attempts = report["attempts"].as_u64().unwrap();
    let cycles = report["cycles"].as_u64().unwrap();
    assert!(attempts > 0 && cycles > 0 && cycles <= attempts, "{report}");
    let win_rate = report["win_rate"].as_f64().unwrap();
    assert!(win_rate > 0.0 && win_rate <= 1.0, "{report}");
    assert_eq!(
        report["errors"],
        serde_json::json!({"unavailable": 0, "refused": 0, "lost": 0, "other": 0}),
        "{report}"
    );
    for step in ["claim", "renew", "release", "cycle"] {
        assert_ordered(&report["latency_us"][step]);
    }

    // Without --output json: the table, then the same kind of JSON line.
    let out = cluster.baton(&args);
    assert_eq!(out.status.code(), Some(0));
    let (report, lines) = last_json_line(&out);
    assert!(
        lines[0].starts_with(
            "baton bench: 2 clients over 4 keys (cli-bench/000000 to cli-bench/000003)"
        ),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("STEP")), "{lines:?}");
    assert!(report["attempts"].as_u64().unwrap() > 0, "{report}");
}

#[test]
fn an_unreachable_cluster_exits_4_with_the_report_and_bad_flags_exit_2() {
    let dead = format!("127.0.0.1:{}", free_port());
    let out = std::process::Command::new(cli_bin())
        .args([
            "--endpoints",
            &dead,
            "--timeout",
            "200ms",
            "--output",
            "json",
        ])
        .args([
            "bench",
            "--clients",
            "2",
            "--duration",
            "1s",
            "--warmup",
            "0s",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.starts_with("error: every claim failed"), "{stderr}");
    let (report, _) = last_json_line(&out);
    let attempts = report["attempts"].as_u64().unwrap();
    assert!(attempts > 0, "{report}");
    assert_eq!(report["errors"]["unavailable"].as_u64(), Some(attempts));
    assert_eq!(report["granted"].as_u64(), Some(0));

    for (flag, value, message) in [
        ("--clients", "0", "clients must be 1 to 4096, got 0"),
        (
            "--keys",
            "1000001",
            "keys must be 1 to 1000000, got 1000001",
        ),
        ("--ttl", "2h", "ttl must be 1s to 3600s, got 7200s"),
    ] {
        let out = std::process::Command::new(cli_bin())
            .args(["--endpoints", &dead, "bench", flag, value])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(message), "{flag} {value}: {stderr}");
    }
}
