//! The CI-sized chaos suite (README's test command runs it): the canary, the power canary,
//! the stale-read canary, partitions + kills, pauses, skew within the bound with wall-clock offsets, and power cuts
//! (one node, the leader, a minority, all at once; data dirs on power-cut filesystems), and
//! membership changes (a voter, the leader, a wiped disk: removed, joined again), a damaged log
//! where its node's vote decides (`corrupt`, and its canary: nodes that vote on a damaged
//! log), a disk whose syncs fail (`eio`), and late and copied claims (`copies`, and its
//! canary: leaders that decide every copy afresh), revokes among plain and guard-held leases
//! under kills and partitions (`revoke`: no two believed windows overlap, every guard holder
//! hears within the notice bound; its canaries: `--now` revokes, muted endings), the line, set,
//! task, permit and shared canaries (places lapsing early; sets claimed key by key; tasks taken
//! from a board read; N + 1 holders of N permits; exclusive claims granted shared), each on a
//! fresh 3-node cluster of real processes
//! in network namespaces. Fails on any violation,
//! on an empty pass, on an undecided checker, on a node that does not start again, and on a
//! canary the checkers did not catch.
//!
//! Needs root (network namespaces, iptables, FUSE). `BATON_JEPSEN_SKIP=1` skips it explicitly, for
//! machines where that is impossible; nothing skips it silently.

use std::path::PathBuf;
use std::time::Instant;

use jepsen_tests::suite;

#[test]
fn jepsen_ci_suite() {
    if std::env::var_os("BATON_JEPSEN_SKIP").is_some() {
        eprintln!("jepsen_ci_suite SKIPPED because BATON_JEPSEN_SKIP is set");
        return;
    }
    if let Err(why) = jepsen_tests::net::available() {
        panic!(
            "the chaos suite cannot run here: {why}. Run the tests as root, or set \
             BATON_JEPSEN_SKIP=1 to skip it knowingly."
        );
    }
    let seed: u64 = std::env::var("BATON_JEPSEN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 % 1_000_000)
                .unwrap_or(1)
        });
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jepsen-ci");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_baton-node-chaos"));
    let start = Instant::now();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let outcomes = runtime
        .block_on(suite::run_all(suite::ci(seed), &out, &bin))
        .unwrap_or_else(|e| panic!("seed {seed}: the suite could not run: {e:#}"));
    let table = suite::summarize(&outcomes, start.elapsed());
    eprintln!("{table}");
    assert_eq!(outcomes.len(), suite::ci(seed).len());
    for o in &outcomes {
        assert!(
            o.ok(),
            "seed {seed}: scenario {} is {}:\n{}\nrerun the whole suite with \
             BATON_JEPSEN_SEED={seed} cargo test -p jepsen-tests --test ci",
            o.meta.scenario,
            o.meta.verdict,
            o.text()
        );
    }
}
