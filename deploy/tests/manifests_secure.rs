//! The secured Kubernetes variant (`deploy/k8s/secure/`: a kustomization over `deploy/k8s/`,
//! a strategic merge patch of the StatefulSet, and the template of the two Secrets it
//! mounts), checked statically, as no Kubernetes runs in the tests: the patch applied as
//! kustomize applies it, every file the patched env names is a key of a mounted Secret for
//! every pod, the runbook's `kubectl create secret` commands make exactly the template's keys,
//! and the real `baton-node` starts with the patched env and the files those commands name.
//!
//! `baton-node` is taken from the same target directory as this test (`cargo test
//! --workspace` builds it; `cargo build -p baton-node` otherwise).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use common::k8s::*;
use common::node::{documented_env_vars, run_node, with_hostname, Place};
use common::{commands, deploy_dir, read, runbook_block, runbook_policy};

/// The runbook's block that makes the files and the Secrets.
const MARKER: &str = "<!-- k8s-secure-secrets -->";
/// The env vars the patch must set, each naming a file.
const FILE_VARS: [&str; 8] = [
    "BATON_TLS_CERT",
    "BATON_TLS_KEY",
    "BATON_TLS_CA",
    "BATON_PEER_TLS_CERT",
    "BATON_PEER_TLS_KEY",
    "BATON_PEER_TLS_CA",
    "BATON_AUTH_TOKENS",
    "BATON_ACCESS_POLICY",
];
/// 0440: root owns a Secret's files, the pod's fsGroup reads them.
const SECRET_MODE: u64 = 0o440;

fn secure_dir() -> PathBuf {
    deploy_dir().join("k8s/secure")
}

/// The base StatefulSet with the patch applied.
fn patched_statefulset() -> Value {
    let base = k8s_documents();
    let secure = documents_in(&secure_dir());
    strategic_merge(statefulset(&base), the(&secure, "StatefulSet"))
}

/// The template's Secrets: name → key → what the template says goes there.
fn template_secrets() -> BTreeMap<String, BTreeMap<String, String>> {
    of_kind(&documents_in(&secure_dir()), "Secret")
        .into_iter()
        .map(|secret| {
            let keys = at(secret, "stringData")
                .as_mapping()
                .expect("stringData is a mapping")
                .iter()
                .map(|(k, v)| {
                    let what = v.as_str().expect("a placeholder string");
                    let file = what
                        .strip_prefix("the contents of ")
                        .unwrap_or_else(|| panic!("placeholder {what:?}: say which file"));
                    (k.as_str().unwrap().to_owned(), file.to_owned())
                })
                .collect();
            (str_at(secret, "metadata.name").to_owned(), keys)
        })
        .collect()
}

/// The runbook's `kubectl create secret generic NAME --from-file=KEY=PATH ...` commands:
/// name → key → path.
fn runbook_secrets() -> BTreeMap<String, BTreeMap<String, String>> {
    commands(&runbook_block(MARKER))
        .iter()
        .filter_map(|line| line.strip_prefix("kubectl create secret generic "))
        .map(|rest| {
            let mut words = rest.split_whitespace();
            let name = words.next().expect("a Secret's name").to_owned();
            let keys = words
                .map(|w| {
                    let (key, path) = w
                        .strip_prefix("--from-file=")
                        .and_then(|kv| kv.split_once('='))
                        .unwrap_or_else(|| panic!("{w:?} is not --from-file=KEY=PATH"));
                    (key.to_owned(), path.to_owned())
                })
                .collect();
            (name, keys)
        })
        .collect()
}

/// The Secret and key a path in the container comes from: the mount it is directly below,
/// that mount's volume's Secret; `None` for a path on no Secret's volume.
fn secret_file(sts: &Value, path: &str) -> Option<(String, String)> {
    let c = container(sts);
    let mount = seq_at(c, "volumeMounts")
        .iter()
        .find(|m| Path::new(path).parent() == Some(Path::new(str_at(m, "mountPath"))))?;
    let volume = seq_at(sts, "spec.template.spec.volumes")
        .iter()
        .find(|v| str_at(v, "name") == str_at(mount, "name"))?;
    let secret = opt_at(volume, "secret.secretName")?.as_str()?.to_owned();
    let key = Path::new(path).file_name()?.to_string_lossy().into_owned();
    Some((secret, key))
}

#[test]
fn the_kustomizations_hold_the_base_and_the_patch_and_leave_the_secrets_out() {
    let k8s = deploy_dir().join("k8s");
    let base = documents_in(&k8s);
    let listed: BTreeSet<&str> = seq_at(the(&base, "Kustomization"), "resources")
        .iter()
        .map(|r| r.as_str().expect("a resource path"))
        .collect();
    let manifests: BTreeSet<&str> = base
        .iter()
        .map(|d| d.file.as_str())
        .filter(|f| *f != "kustomization.yaml")
        .collect();
    assert_eq!(
        listed, manifests,
        "deploy/k8s/kustomization.yaml's resources"
    );

    let secure = documents_in(&secure_dir());
    let kustomization = the(&secure, "Kustomization");
    assert_eq!(seq_at(kustomization, "resources"), [Value::from("../")]);
    let patches = seq_at(kustomization, "patches");
    assert_eq!(patches.len(), 1);
    let patch_file = str_at(&patches[0], "path");
    assert!(secure_dir().join(patch_file).is_file(), "{patch_file}");
    let patch = the(&secure, "StatefulSet");
    let sts = statefulset(&base);
    for path in ["apiVersion", "metadata.name"] {
        assert_eq!(at(patch, path), at(sts, path), "the patch's {path}");
    }
    assert_eq!(
        str_at(patch, "spec.template.spec.containers.0.name"),
        str_at(container(sts), "name"),
        "the patch's container"
    );
    // The template's placeholders are never applied.
    let text = read(&secure_dir().join("kustomization.yaml"));
    assert!(!text.contains("\n  - secrets.yaml"), "{text}");
}

#[test]
fn every_pod_reads_its_own_files_from_the_mounted_secrets() {
    let sts = patched_statefulset();
    let c = container(&sts);
    let secrets = template_secrets();
    let documented = documented_env_vars();
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    for (&id, address) in &stable_addresses(&sts) {
        let pod = format!("{}-{}", str_at(&sts, "metadata.name"), id - 1);
        let env = pod_env(c, &pod);
        for (name, _) in &env {
            assert!(
                documented.contains(name) || name.starts_with("POD_"),
                "{name} is not documented by baton-node --help"
            );
        }
        assert_eq!(env_value(&env, "BATON_ADVERTISE"), address, "pod {pod}");
        assert_eq!(env_value(&env, "BATON_INSECURE"), "false", "pod {pod}");
        assert_eq!(
            env_value(&env, "BATON_TLS_CLIENT_AUTH"),
            "true",
            "pod {pod}"
        );
        // A later entry of the same name would win: each is set once.
        let names: BTreeSet<&String> = env.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), env.len(), "pod {pod}: a variable set twice");
        for var in FILE_VARS {
            let path = env_value(&env, var);
            let (secret, key) = secret_file(&sts, path)
                .unwrap_or_else(|| panic!("pod {pod}: {var}={path} is on no mounted volume"));
            let keys = secrets
                .get(&secret)
                .unwrap_or_else(|| panic!("{var}: no Secret {secret} in secrets.yaml"));
            assert!(
                keys.contains_key(&key),
                "pod {pod}: {var}={path}: Secret {secret} has no key {key}"
            );
            used.insert((secret, key));
        }
        // The pod's own certificate, not another node's.
        assert!(env_value(&env, "BATON_TLS_CERT").ends_with(&format!("/{pod}.pem")));
        assert!(env_value(&env, "BATON_PEER_TLS_KEY").ends_with(&format!("/peer-{pod}-key.pem")));
    }
    let all: BTreeSet<(String, String)> = secrets
        .iter()
        .flat_map(|(s, keys)| keys.keys().map(|k| (s.clone(), k.clone())))
        .collect();
    assert_eq!(used, all, "Secret keys no pod reads");

    // Mounted read-only, readable by the node's group only; the pod's fsGroup is that group.
    for mount in seq_at(c, "volumeMounts") {
        if str_at(mount, "mountPath").starts_with("/etc/baton/") {
            assert!(bool_at(mount, "readOnly"), "{mount:?}");
        }
    }
    for volume in seq_at(&sts, "spec.template.spec.volumes") {
        assert_eq!(
            u64_at(volume, "secret.defaultMode"),
            SECRET_MODE,
            "{volume:?}"
        );
    }
    let pod = at(&sts, "spec.template.spec");
    assert_eq!(
        u64_at(pod, "securityContext.fsGroup"),
        u64_at(pod, "securityContext.runAsGroup")
    );
    // Still the base's data volume, probes and ports.
    assert!(seq_at(c, "volumeMounts")
        .iter()
        .any(|m| str_at(m, "mountPath") == "/var/lib/baton"));
    assert_eq!(str_at(c, "readinessProbe.httpGet.path"), "/readyz");
}

#[test]
fn the_runbooks_commands_make_the_templates_secrets() {
    assert_eq!(runbook_secrets(), template_secrets());
}

#[test]
fn baton_node_runs_with_the_secured_statefulset_env_and_the_runbooks_files() {
    let sts = patched_statefulset();
    let pod = format!("{}-0", str_at(&sts, "metadata.name"));
    let place = Place::new();
    let dir = place.dir.clone();
    std::fs::write(dir.join("policy.toml"), runbook_policy()).expect("writing policy.toml");
    // The block's baton-node commands, as written, in the place's directory.
    let made: Vec<String> = commands(&runbook_block(MARKER))
        .into_iter()
        .filter(|line| line.starts_with("baton-node "))
        .collect();
    assert!(made.len() >= 2, "{made:?}");
    for line in &made {
        let words: Vec<&str> = line.split_whitespace().collect();
        let out = baton_deploy::clean_command(baton_deploy::built_bin("baton-node"))
            .args(&words[1..])
            .current_dir(&dir)
            .output()
            .expect("running baton-node");
        assert!(out.status.success(), "{line}: {out:?}");
    }
    // Each Secret's files where its volume is mounted, below the place.
    let mut env = pod_env(container(&sts), &pod);
    let mut mounts: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (secret, keys) in runbook_secrets() {
        let local = dir.join("mounts").join(&secret);
        std::fs::create_dir_all(&local).unwrap();
        for (key, path) in keys {
            std::fs::copy(dir.join(&path), local.join(&key))
                .unwrap_or_else(|e| panic!("{secret}/{key} from {path}: {e}"));
        }
        mounts.insert(secret, local);
    }
    for (name, value) in env.iter_mut() {
        if let Some((secret, key)) = secret_file(&sts, value) {
            *value = mounts[&secret].join(key).display().to_string();
            println!("{name} = {value}");
        }
    }
    place.localize_env(&mut env);
    let mut cmd = with_hostname(&pod).unwrap_or_else(|| {
        println!("no UTS namespace (unshare): BATON_NODE_ID=1 instead of the host name {pod}");
        env.retain(|(name, _)| name != "BATON_NODE_ID_FROM_HOSTNAME");
        env.push(("BATON_NODE_ID".into(), "1".into()));
        baton_deploy::clean_command(baton_deploy::built_bin("baton-node"))
    });
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let log = run_node(cmd, &place, 1, &stable_addresses(&sts)[&1]);
    assert!(
        log.contains("security:  TLS, clients authenticated"),
        "the node does not say it is secured:\n{log}"
    );
    assert!(
        !log.contains("auth is on without --access-policy"),
        "the node did not take the policy:\n{log}"
    );
}
