//! `baton-compare` end to end, as a user runs it, on a tiny matrix: real etcd and baton-node
//! processes, one run each, and the report's figures read back from its JSON line.
//!
//! Needs `etcd` on PATH (see `etcd_loop.rs`; BATON_BENCH_SKIP_ETCD=1 skips on purpose) and
//! `baton-node` next to `baton-compare` (`cargo test --workspace` builds it; `cargo build -p
//! baton-node` otherwise).

use std::process::Command;

use baton_bench::cluster::etcd_for_test;
use baton_bench::metrics::FLUSHES_ON_A_WRITES_PATH;

#[test]
fn a_tiny_comparison_reports_both_systems_and_where_the_single_client_claim_goes() {
    if etcd_for_test().is_none() {
        return;
    }
    let compare = env!("CARGO_BIN_EXE_baton-compare");
    let out = Command::new(compare)
        .args(["--clients", "1", "--keys", "20", "--runs", "1"])
        .args(["--duration", "1500ms", "--warmup", "300ms"])
        .args(["--fsync-probe", "300ms"])
        .output()
        .expect("run baton-compare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "baton-compare failed:\n{stdout}\n{stderr}"
    );

    let line = stdout
        .lines()
        .find(|l| l.contains("1-client claim p50") && l.starts_with("where"))
        .unwrap_or_else(|| panic!("no breakdown line in:\n{stdout}"));
    assert!(line.contains("fdatasync"), "{line}");

    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap())
        .unwrap_or_else(|e| panic!("last line is not JSON ({e}):\n{stdout}"));
    let cells = json["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 1, "{json}");
    for system in ["baton", "etcd"] {
        let cell = &cells[0][system];
        assert!(
            cell["cycles_per_s"].as_f64().unwrap() > 0.0,
            "{system}: {cell}"
        );
        assert_eq!(cell["errors"], 0, "{system}: {cell}");
    }

    // The breakdown comes from the nodes' own flush counters over the run: every node flushes
    // once per write it makes durable, so with ~3 writes per cycle there are at least as many
    // flushes as writes, and a flush includes its fsync.
    let b = &json["baton_single_client_breakdown"];
    let flushes = b["flush"]["flushes"].as_u64().expect("flushes");
    let writes = 3.0 * cells[0]["baton"]["cycles_per_s"].as_f64().unwrap() * 1.5;
    assert!(
        flushes as f64 >= writes,
        "{flushes} flushes for ~{writes} writes: {b}"
    );
    let flush_us = b["flush"]["flush_mean_us"].as_f64().unwrap();
    let fsync_us = b["flush"]["fsync_mean_us"].as_f64().unwrap();
    assert!(fsync_us > 0.0 && flush_us > fsync_us, "{b}");
    // (JSON floats parse back to within an ulp, not always exactly.)
    let flushes_us = b["flushes_us"].as_f64().unwrap();
    assert!(
        (flushes_us - FLUSHES_ON_A_WRITES_PATH * flush_us).abs() < 1e-6 * flushes_us,
        "{b}"
    );
    assert!(b["cpu_per_op_us"].as_f64().unwrap() > 0.0, "{b}");
    assert_eq!(
        b["claim_p50_us"], json["baton_single_client_claim_p50_us"],
        "{json}"
    );
}
