//! The systemd examples (`deploy/systemd/baton-node.toml`, `baton-node.env`) run through the
//! real `baton-node`: each configuration makes a node start, answer `baton-node health`, and
//! stop on SIGTERM with exit 0; the TOML's commented-out TLS and auth lines, uncommented and
//! pointed at real files, are ones the node reads.
//!
//! `baton-node` is taken from the same target directory as this test (`cargo test
//! --workspace` builds it; `cargo build -p baton-node` otherwise).

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::node::{documented_env_vars, run_node, Place};
use common::{deploy_dir, read};

fn systemd_example(name: &str) -> String {
    read(&deploy_dir().join("systemd").join(name))
}

/// The `NAME=value` lines of an env file, active or commented out (`#NAME=value`), with
/// whether each is commented out.
fn env_file_assignments(text: &str) -> Vec<(String, String, bool)> {
    text.lines()
        .filter_map(|line| {
            let (body, commented) = match line.strip_prefix('#') {
                Some(rest) => (rest, true),
                None => (line, false),
            };
            let (name, value) = body.split_once('=')?;
            let is_name = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            is_name.then(|| (name.to_string(), value.to_string(), commented))
        })
        .collect()
}

#[test]
fn baton_node_runs_with_the_example_toml() {
    let place = Place::new();
    let config = place.localize_toml(&systemd_example("baton-node.toml"));
    let mut cmd = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"));
    cmd.arg("--config").arg(&config);
    let log = run_node(cmd, &place, 1, "baton-1.example.internal:7001");
    println!(
        "example TOML: started, served, stopped; {} log lines",
        log.lines().count()
    );
}

#[test]
fn baton_node_runs_with_the_example_toml_and_env_file() {
    let documented = documented_env_vars();
    let assignments = env_file_assignments(&systemd_example("baton-node.env"));
    let names: BTreeSet<&str> = assignments.iter().map(|(n, _, _)| n.as_str()).collect();
    for want in [
        "BATON_NODE_ID",
        "BATON_LISTEN",
        "BATON_ADVERTISE",
        "BATON_INITIAL_CLUSTER",
        "BATON_DATA_DIR",
        "BATON_ADMIN_LISTEN",
    ] {
        assert!(names.contains(want), "the env example does not show {want}");
    }
    for (name, _, commented) in &assignments {
        // RUST_LOG is read by the node's log filter (docs/operating.md: --log-format).
        assert!(
            documented.contains(name) || name == "RUST_LOG",
            "{name} in baton-node.env is not documented by baton-node --help"
        );
        assert!(
            commented,
            "{name}: the example says every line is commented out"
        );
    }

    // As the unit runs it: the TOML config, overridden by the env file (uncommented).
    let place = Place::new();
    let config = place.localize_toml(&systemd_example("baton-node.toml"));
    let mut env: Vec<(String, String)> = assignments
        .into_iter()
        .map(|(name, value, _)| (name, value))
        .collect();
    place.localize_env(&mut env);
    let mut cmd = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"));
    cmd.arg("--config").arg(&config);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let log = run_node(cmd, &place, 2, "baton-2.example.internal:7001");
    println!(
        "example TOML + env file: started as node 2, served, stopped; {} log lines",
        log.lines().count()
    );
}

/// The fields the TOML example shows commented out for TLS and auth, with the file that goes
/// at the path each names: what `baton-node certs --peer-ca --node 1=...` and `baton-node
/// token` make, and a policy.
const SECURED_FIELDS: [(&str, &str); 8] = [
    ("tls_cert", "pki/node-1.pem"),
    ("tls_key", "pki/node-1-key.pem"),
    ("tls_ca", "pki/ca.pem"),
    ("peer_tls_cert", "pki/peer-1.pem"),
    ("peer_tls_key", "pki/peer-1-key.pem"),
    ("peer_tls_ca", "pki/peer-ca.pem"),
    ("auth_tokens", "tokens"),
    ("access_policy", "policy.toml"),
];

/// A policy with an admin on every key, as a node requires of one.
const POLICY: &str = "[[rule]]\nwho = [\"ops\"]\nprefixes = [\"\"]\ncan = [\"admin\"]\n";

/// `#key = value` lines made `key = value`, for the keys that are TOML fields (lower case);
/// the keys uncommented, in order.
fn uncomment_fields(text: &str) -> (String, Vec<String>) {
    let mut keys = Vec::new();
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let field = line.strip_prefix('#').and_then(|rest| {
                let (key, _) = rest.split_once(" = ")?;
                key.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_')
                    .then_some((key, rest))
            });
            match field {
                Some((key, rest)) => {
                    keys.push(key.to_owned());
                    rest.to_owned()
                }
                None => line.to_owned(),
            }
        })
        .collect();
    (lines.join("\n") + "\n", keys)
}

/// `baton-node ARGS` in `dir`, which must succeed.
fn baton_node_in(dir: &Path, args: &[&str]) {
    let out = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running baton-node");
    assert!(
        out.status.success(),
        "baton-node {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_example_tomls_tls_and_auth_lines_uncommented_run_a_secured_node() {
    let (text, keys) = uncomment_fields(&systemd_example("baton-node.toml"));
    let want: Vec<&str> = SECURED_FIELDS.iter().map(|(k, _)| *k).collect();
    for key in &want {
        assert!(
            keys.iter().any(|k| k == key),
            "the example shows no commented-out `{key} = ...` line (it shows {keys:?})"
        );
    }
    // With TLS on, plaintext is no longer allowed.
    assert_eq!(text.matches("\ninsecure = true\n").count(), 1, "{text}");
    let text = text.replace("\ninsecure = true\n", "\ninsecure = false\n");

    let place = Place::new();
    let dir = &place.dir;
    baton_node_in(
        dir,
        &[
            "certs",
            "--dir",
            "pki",
            "--peer-ca",
            "--node",
            "1=baton-1.example.internal",
        ],
    );
    baton_node_in(
        dir,
        &[
            "token",
            "--principal",
            "ops",
            "--file",
            "tokens",
            "--out",
            "ops.token",
        ],
    );
    std::fs::write(dir.join("policy.toml"), POLICY).expect("writing the policy");
    // Each line as the example writes it, its absolute path moved below the place, and the
    // file made there.
    let mut text = text;
    for (key, file) in SECURED_FIELDS {
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} line"))
            .to_owned();
        let path = value
            .strip_prefix("\"/")
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{key} = {value}: not an absolute path in quotes"));
        let local = dir.join(path);
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::copy(dir.join(file), &local).unwrap_or_else(|e| panic!("{file}: {e}"));
        text = text.replace(&value, &format!("{:?}", local.display().to_string()));
    }
    let config = place.localize_toml(&text);
    let mut cmd = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"));
    cmd.arg("--config").arg(&config);
    let log = run_node(cmd, &place, 1, "baton-1.example.internal:7001");
    assert!(
        log.contains("security:  TLS, clients authenticated"),
        "the node does not say it is secured:\n{log}"
    );
    // The policy file was read: no warning that everyone may do everything.
    assert!(
        !log.contains("auth is on without --access-policy"),
        "the node did not take the policy:\n{log}"
    );
    println!(
        "example TOML with {keys:?} uncommented: a secured node started, served, stopped; {} \
         log lines",
        log.lines().count()
    );
}
