//! `baton-scale --watchers` and `--endings` end to end, as a user runs them, on tiny sizes:
//! real 3-node clusters, and the report read back from its JSON line.

use std::process::Command;

/// Runs `baton-scale` with `args`: what it printed, and its first JSON report.
fn run_scale(args: &[&str]) -> (String, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton-scale"))
        .args(args)
        .output()
        .expect("run baton-scale");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "baton-scale failed:\n{stdout}\n{stderr}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in:\n{stdout}"));
    let report = serde_json::from_str(line).unwrap();
    (stdout, report)
}

#[test]
fn every_watcher_sees_every_write_and_the_report_says_so() {
    let (stdout, report) = run_scale(&[
        "--watchers",
        "30",
        "--watch-writes-per-s",
        "20",
        "--watch-for",
        "2s",
    ]);
    assert_eq!(report["watchers"], 30, "{report}");
    let writes = report["writes"].as_u64().unwrap();
    assert!(writes >= 20, "{report}");
    assert_eq!(report["deliveries_due"].as_u64().unwrap(), writes * 30);
    assert_eq!(report["deliveries"], report["deliveries_due"], "{report}");
    assert_eq!(report["disordered"], 0, "{report}");
    let (p50, p99) = (
        report["delay_p50_ms"].as_f64().unwrap(),
        report["delay_p99_ms"].as_f64().unwrap(),
    );
    assert!(p50 >= 0.0 && p99 >= p50, "{report}");
    assert_eq!(report["bytes_per_watcher"].as_array().unwrap().len(), 3);
    assert!(stdout.contains("delivered / due"), "{stdout}");
}

#[test]
fn sizes_beyond_the_limits_are_refused_before_any_node_starts() {
    for args in [
        ["--watchers", "0"],
        ["--watchers", "100001"],
        ["--leases", "0"],
        ["--leases", "1000001"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_baton-scale"))
            .args(args)
            .output()
            .expect("run baton-scale");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains("must be 1 to"), "{args:?}: {stderr}");
    }
}

#[test]
fn the_endings_bench_measures_revokes_handoffs_and_expiries_by_the_push() {
    // 2 sessions holding 4 leases; 3 revokes, 3 handoffs, 3 expiries. The bench itself fails
    // if any loss came otherwise than by the push.
    let (stdout, report) = run_scale(&["--endings", "2:4", "--endings-revokes", "3"]);
    assert_eq!(report["sessions"], 2, "{report}");
    assert_eq!(report["revokes"], 3, "{report}");
    assert_eq!(report["handoffs"], 3, "{report}");
    assert_eq!(report["streams"], 2, "{report}");
    assert!(
        report["leader_idle_cpu_pct"].as_f64().unwrap() >= 0.0,
        "{report}"
    );
    for spread in [&report["handoff"], &report["expiry"]] {
        let (p50, max) = (
            spread["p50_ms"].as_f64().unwrap(),
            spread["max_ms"].as_f64().unwrap(),
        );
        assert!(p50 >= 0.0 && max >= p50, "{report}");
    }
    assert!(stdout.contains("handoff->lost"), "{stdout}");
}

#[test]
fn the_expiry_bench_frees_every_lease_and_counts_the_entries() {
    let (stdout, report) = run_scale(&["--expiry-leases", "300", "--expiry-ttl", "5s"]);
    assert_eq!(report["leases"], 300, "{report}");
    // Every lease was freed (the run fails otherwise), in shared entries.
    let entries = report["entries"].as_u64().unwrap();
    assert!((1..300).contains(&entries), "{report}");
    assert!(stdout.contains("freed after last due"), "{stdout}");
}

#[test]
fn the_task_bench_takes_every_task_once() {
    let (stdout, report) = run_scale(&["--tasks", "120", "--task-takers", "16"]);
    assert_eq!(
        (report["tasks"].as_u64(), report["takers"].as_u64()),
        (Some(120), Some(16)),
        "{report}"
    );
    // Every task was taken (the run fails otherwise), each by one taker.
    assert_eq!(report["grants"], 120, "{report}");
    assert_eq!(report["duplicates"], 0, "{report}");
    assert!(report["tasks_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        stdout.contains("claim-next: 120 tasks, 16 takers"),
        "{stdout}"
    );
}
