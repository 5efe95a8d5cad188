//! The container image, `deploy/compose.yaml` and its secured override
//! `deploy/compose.secure.yaml`, for real: builds the image from this target directory's
//! `baton-node` and `baton` (`deploy/image/build.sh --no-cargo`, once for both tests when
//! they run at the same time), brings each 3-node cluster up under a project of its own with
//! free host ports, one cluster at a time, and checks the outcomes an operator relies on.
//!
//! The plain cluster:
//!
//! - all three nodes become healthy (`baton-node health --ready`);
//! - a claim goes through from the host (published ports) and from the `cli` service inside
//!   the cluster's network;
//! - with the leader's container stopped, a claim still goes through; the stopped node comes
//!   back with its volume and rejoins;
//! - with the (new) leader's container disconnected from the network, a claim still goes
//!   through; after the network heals, every node, read with `--stale` through its own
//!   published port, shows the same holders and tokens within [`AGREE_WITHIN`].
//!
//! The secured cluster, from the files the runbook's block (after
//! `<!-- compose-secure-files -->` in `deploy/RUNBOOK.md`) makes, run as written:
//!
//! - the tokens it writes are mode 0600; all three nodes become healthy (the nodes' TLS with
//!   their own CA works);
//! - the `cli` service sets the policy as `ops`; from the host, a claim over TLS with a token
//!   and a probe with a client certificate go through;
//! - a plaintext client, a client without credentials and the agent outside its prefix are
//!   refused.
//!
//! It needs Docker Engine and `docker-compose` (v1; `BATON_COMPOSE="docker compose"` runs it
//! with v2), and fails, rather than skips, when either is missing or the daemon is not
//! reachable; the secured test needs root too (the runbook's `chown` gives the files to the
//! image's user), as the whole test command does. Everything it creates (containers,
//! volumes, network, image, files) is removed when it ends, also on a panic. The binaries
//! come from the same target directory as this test (`cargo test --workspace` builds them;
//! `cargo build -p baton-node -p baton-cli` otherwise).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use common::compose::*;

#[test]
fn compose_cluster_survives_a_stopped_and_a_partitioned_leader() {
    let ComposeStart {
        compose,
        bins,
        mut timings,
        image,
        turn: _turn,
    } = start_compose_test();

    // Created before anything exists, so that whatever follows is torn down.
    let cluster = Deployment::new(compose, bins, &image, &["compose.yaml"], Vec::new());
    eprintln!(
        "compose test: project {}, image {}, grpc ports {:?}, admin ports {:?}",
        cluster.project, image.tag, cluster.ports, cluster.admin_ports
    );

    check(&mut cluster.compose(&["up", "-d"]));
    timings.step("compose up -d");
    cluster.wait_all_healthy();
    timings.step("all 3 nodes healthy");
    for node in 0..NODES.len() {
        cluster.admin_ready(node);
    }
    let volumes = check(baton_deploy::clean_command("docker").args([
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=com.docker.compose.project={}", cluster.project),
    ]));
    assert_eq!(
        volumes.lines().count(),
        NODES.len(),
        "one named volume per node: {volumes:?}"
    );

    let mut grants = vec![cluster.claim_from_host("compose/from-host")];
    timings.step("claim from the host");
    grants.push(cluster.claim_in_network("compose/from-network"));
    timings.step("claim from the cli service");

    // The leader's container stops: the other two elect a leader and take the claim.
    let stopped = NODES[cluster.leader()];
    check(&mut cluster.compose(&["stop", "-t", "5", stopped]));
    timings.step("stop the leader's container");
    grants.push(cluster.claim_from_host("compose/leader-stopped"));
    timings.step("claim with the leader stopped");
    check(&mut cluster.compose(&["start", stopped]));
    cluster.wait_all_healthy();
    timings.step("start it again, all 3 healthy");
    // Its volume kept its log, and the leader sends what it missed.
    let caught_up = poll(AGREE_WITHIN, || {
        (cluster
            .local_stale_probe(stopped, "compose/leader-stopped")
            .as_ref()
            == Some(&grants[2]))
        .then_some(())
    });
    assert!(
        caught_up.is_some(),
        "{stopped} did not catch up within {AGREE_WITHIN:?} with the grant made while it was \
         stopped"
    );

    // The (new) leader is cut off the network: the other two elect a leader again.
    let cut = NODES[cluster.leader()];
    let network = cluster.network(cut);
    timings.step("find the leader");
    cluster.network_op("disconnect", &network, cut);
    timings.step("disconnect it from the network");
    grants.push(cluster.claim_from_host("compose/leader-partitioned"));
    timings.step("claim with the leader partitioned");
    // The cut-off node, asked inside its own container, has not seen that grant.
    assert_eq!(
        cluster.local_stale_probe(cut, "compose/leader-partitioned"),
        None,
        "{cut} saw a grant made while it was cut off"
    );
    cluster.network_op("connect", &network, cut);
    timings.step("reconnect it");
    eprintln!("compose test: stopped {stopped}, partitioned {cut}, grants {grants:?}");

    // Fencing tokens are revisions of the grants: each later claim has a higher one.
    assert!(
        grants.windows(2).all(|w| w[0].token < w[1].token),
        "tokens do not increase: {grants:?}"
    );

    // Every node, read locally, shows the same holders and tokens.
    let mut expected = grants.clone();
    expected.sort();
    let mut seen = Vec::new();
    let agreed = poll(AGREE_WITHIN, || {
        seen = (0..NODES.len()).map(|i| cluster.stale_board(i)).collect();
        seen.iter()
            .all(|board| board.as_ref() == Some(&expected))
            .then_some(())
    });
    assert!(
        agreed.is_some(),
        "the nodes do not agree within {AGREE_WITHIN:?} of the heal:\nexpected {expected:?}\n\
         boards {seen:?}"
    );
    timings.step("every node's stale board agrees");
    let partitioned_key = &grants[3];
    for (node, service) in NODES.iter().enumerate() {
        assert_eq!(
            cluster.stale_probe(node, &partitioned_key.key).as_ref(),
            Some(partitioned_key),
            "{service}'s stale probe of {}",
            partitioned_key.key
        );
    }
    cluster.wait_all_healthy();
    timings.step("stale probes agree, all 3 healthy");

    // The first grant still stands: another holder's claim is refused with it.
    let first = &grants[0];
    let out = run(&mut cluster.baton(
        &cluster.all_endpoints(),
        &[
            "claim",
            &first.key,
            "--holder",
            "someone-else",
            "--ttl",
            "30s",
        ],
    ));
    assert_eq!(out.status.code(), Some(3), "a held key's claim: {out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("claim's JSON");
    assert_eq!(answer["outcome"], "held", "{answer}");
    assert_eq!(&Grant::from_lease(&answer["lease"]), first);
    timings.step("a held key is refused to another holder");

    drop(cluster);
    timings.step("tear down");
    timings.report();
}

// ---------------------------------------------------------------- the secured cluster

/// The key the agent claims in the secured cluster, under the prefix the policy gives it.
const AGENT_KEY: &str = "tasks/compose-secure";

/// Fails the test unless it runs as root: the runbook's block gives the files to the image's
/// user with `chown`.
fn require_root() {
    let id = check(Command::new("id").arg("-u"));
    assert_eq!(
        id.trim(),
        "0",
        "the secured compose test runs the runbook's `chown -R 65532:65532 secrets`, which \
         needs root (as the whole test command does: README.md)"
    );
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// `baton` from the host with the given credentials (global flags) and `args`; its output.
fn host_baton(cluster: &Deployment, credentials: &[&str], args: &[&str]) -> std::process::Output {
    let mut all = credentials.to_vec();
    all.extend_from_slice(args);
    run(&mut cluster.baton(&cluster.all_endpoints(), &all))
}

#[test]
fn secured_compose_cluster_serves_tls_and_token_clients_and_refuses_the_rest() {
    require_root();
    let ComposeStart {
        compose,
        bins,
        mut timings,
        image,
        turn: _turn,
    } = start_compose_test();

    // The runbook's block, as written, in a directory of its own with the runbook's policy.
    let files = tempfile::tempdir().expect("a temp dir");
    let dir = files.path();
    std::fs::write(dir.join("policy.toml"), common::runbook_policy()).expect("writing policy.toml");
    let path = format!(
        "{}:{}",
        bins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    check(
        baton_deploy::clean_command("bash")
            .args(["-euo", "pipefail", "-c"])
            .arg(common::runbook_block("<!-- compose-secure-files -->"))
            .current_dir(dir)
            .env("PATH", path),
    );
    for token in ["ops.token", "agent-a.token"] {
        assert_eq!(mode(&dir.join(token)), 0o600, "{token}");
    }
    timings.step("the runbook's block: certificates, tokens, chown");

    let secrets: PathBuf = dir.join("secrets");
    let cluster = Deployment::new(
        compose,
        bins,
        &image,
        &["compose.yaml", "compose.secure.yaml"],
        vec![(
            "BATON_SECRETS_DIR".to_owned(),
            secrets.display().to_string(),
        )],
    );
    eprintln!(
        "compose test: secured project {}, files in {}, grpc ports {:?}",
        cluster.project,
        dir.display(),
        cluster.ports
    );
    check(&mut cluster.compose(&["up", "-d"]));
    cluster.wait_all_healthy();
    timings.step("compose up -d, all 3 nodes healthy");

    // Inside the network, the cli service makes the policy the cluster's, as ops.
    check(&mut cluster.compose(&[
        "run",
        "--rm",
        "-T",
        "cli",
        "access",
        "set",
        "/etc/baton/common/policy.toml",
    ]));
    timings.step("cli service: access set as ops");

    // From the host: a claim over TLS with the agent's token, a probe with its certificate.
    let ca = dir.join("pki/ca.pem").display().to_string();
    let token = dir.join("agent-a.token").display().to_string();
    let with_token = ["--tls-ca", &ca, "--auth-token-file", &token];
    let grant = cluster.claim_with(
        cluster.baton(&cluster.all_endpoints(), &with_token),
        AGENT_KEY,
        "agent-a",
    );
    let cert = dir.join("pki/client-agent-a.pem").display().to_string();
    let key = dir.join("pki/client-agent-a-key.pem").display().to_string();
    let with_cert = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let out = host_baton(&cluster, &with_cert, &["probe", AGENT_KEY]);
    assert!(out.status.success(), "probe with a certificate: {out:?}");
    assert_eq!(probe_lease(&out), Some(grant));
    timings.step("claim with a token, probe with a certificate, over TLS");

    // Plaintext: no answer, and the nodes say why.
    let plain = host_baton(
        &cluster,
        &["--auth-token-file", &token],
        &["probe", AGENT_KEY, "--timeout", "2s"],
    );
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(!plain.status.success(), "a plaintext client got through");
    assert!(
        stderr.contains("this looks like a node that speaks TLS")
            || stderr.contains("if the nodes speak TLS, give the client their CA"),
        "{stderr}"
    );
    let logs = check(&mut cluster.compose(&["logs", "--no-color", "node1", "node2", "node3"]));
    assert!(
        logs.contains("a client spoke plaintext to this TLS port"),
        "no node logged the plaintext client"
    );
    // TLS without a token or a certificate: refused.
    let anonymous = host_baton(&cluster, &["--tls-ca", &ca], &["probe", AGENT_KEY]);
    assert_eq!(anonymous.status.code(), Some(1), "{anonymous:?}");
    assert!(
        String::from_utf8_lossy(&anonymous.stderr).contains("not authenticated"),
        "{anonymous:?}"
    );
    // The agent outside what the policy gives it: refused.
    let outside = host_baton(
        &cluster,
        &with_token,
        &["claim", "billing/1", "--holder", "agent-a", "--ttl", "30s"],
    );
    assert_eq!(outside.status.code(), Some(1), "{outside:?}");
    assert!(
        String::from_utf8_lossy(&outside.stderr).contains("permission denied"),
        "{outside:?}"
    );
    timings.step("plaintext, no credentials, outside the policy: refused");

    drop(cluster);
    timings.step("tear down");
    timings.report();
}
