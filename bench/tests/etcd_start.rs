//! `EtcdCluster::start_healthy` starts afresh when a cluster does not come up, and gives up
//! after `ETCD_START_ATTEMPTS`. The fault is real: the etcd binary it is given is a script
//! that exits at start (as a member whose port was taken meanwhile does), then, in the first
//! test, runs the real etcd.
//!
//! The first test needs `etcd` on PATH (or BATON_BENCH_ETCD), like `etcd_loop.rs`; without it
//! it fails unless BATON_BENCH_SKIP_ETCD=1 is set. The second needs no etcd.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_bench::cluster::{etcd_for_test, EtcdCluster, ETCD_START_ATTEMPTS};

/// The two tests one at a time: a script written while the other test forks can be inherited,
/// open for writing, by the fork, and its exec then fails ("Text file busy", os error 26): a
/// failed start the tests did not plan, which a clean-clone run met once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes an executable script `etcd-wrapper` into `dir`: its first `failures` runs exit with
/// status 3 at once, later runs exec `etcd` (when given) with the same arguments.
fn wrapper(dir: &Path, failures: usize, etcd: Option<&Path>) -> PathBuf {
    let count = dir.join("runs");
    let then = match etcd {
        Some(etcd) => format!("exec '{}' \"$@\"", etcd.display()),
        None => "exit 3".to_owned(),
    };
    let script = format!(
        "#!/bin/sh\necho run >> '{count}'\nif [ \"$(wc -l < '{count}')\" -le {failures} ]; then exit 3; fi\n{then}\n",
        count = count.display(),
    );
    let path = dir.join("etcd-wrapper");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_that_exits_at_its_first_start_is_started_afresh_and_serves() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let Some(etcd_bin) = etcd_for_test() else {
        return;
    };
    let bin_dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let bin = wrapper(bin_dir.path(), 1, Some(&etcd_bin));

    let etcd = tokio::time::timeout(
        Duration::from_secs(40),
        EtcdCluster::start_healthy(&bin, 1, data.path(), Duration::from_secs(15)),
    )
    .await
    .expect("start_healthy did not return within 40 s")
    .expect("the second attempt should come up");

    assert_eq!(runs(bin_dir.path()), 2, "one failed start, one that serves");
    assert!(data.path().join("try-1").is_dir());
    assert!(data.path().join("try-2").is_dir());
    assert!(!data.path().join("try-3").exists());
    // It serves: a linearizable read through the member answers.
    baton_bench::etcd::count_prefix(&etcd.endpoints[0], "health/")
        .await
        .expect("the restarted etcd answers a read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_that_never_comes_up_is_tried_etcd_start_attempts_times_then_reported() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let bin_dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let bin = wrapper(bin_dir.path(), 0, None);

    let result = tokio::time::timeout(
        Duration::from_secs(40),
        EtcdCluster::start_healthy(&bin, 1, data.path(), Duration::from_secs(15)),
    )
    .await
    .expect("start_healthy did not return within 40 s");

    let error = format!(
        "{:#}",
        result.expect_err("an etcd that always exits cannot come up")
    );
    assert!(error.contains("exited"), "{error}");
    assert_eq!(runs(bin_dir.path()), ETCD_START_ATTEMPTS);
    for attempt in 1..=ETCD_START_ATTEMPTS {
        assert!(data.path().join(format!("try-{attempt}")).is_dir());
    }
    assert!(!data
        .path()
        .join(format!("try-{}", ETCD_START_ATTEMPTS + 1))
        .exists());
}
