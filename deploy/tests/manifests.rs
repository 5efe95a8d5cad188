//! The Kubernetes manifests (`deploy/k8s/*.yaml`), checked for the structure that makes a
//! cluster form, and run through the real `baton-node`: the StatefulSet's env makes a node
//! start, answer `baton-node health`, and stop on SIGTERM with exit 0. The secured variant
//! (`deploy/k8s/secure/`) is checked in `manifests_secure.rs`, the systemd examples in
//! `examples.rs`.
//!
//! `baton-node` is taken from the same target directory as this test (`cargo test
//! --workspace` builds it; `cargo build -p baton-node` otherwise).

mod common;

use std::collections::BTreeMap;

use serde_yaml_ng::Value;

use common::k8s::*;
use common::node::{documented_env_vars, serving_as, with_hostname, Node, Place};

#[test]
fn the_manifests_hold_a_statefulset_its_two_services_and_a_budget() {
    let docs = k8s_documents();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| (d.file.as_str(), d.value["kind"].as_str().unwrap_or("?")))
        .collect();
    println!("documents: {kinds:?}");
    let sts = statefulset(&docs);
    assert_eq!(of_kind(&docs, "Service").len(), 2, "{kinds:?}");
    the(&docs, "PodDisruptionBudget");
    for doc in &docs {
        assert!(
            opt_at(&doc.value, "apiVersion").is_some(),
            "{}: no apiVersion",
            doc.file
        );
    }

    // The headless Service that names the pods, resolvable before they are ready.
    let peer_name = str_at(sts, "spec.serviceName");
    let peer = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| str_at(s, "metadata.name") == peer_name)
        .unwrap_or_else(|| panic!("no Service {peer_name}, the StatefulSet's serviceName"));
    assert_eq!(str_at(peer, "spec.clusterIP"), "None", "headless");
    assert!(bool_at(peer, "spec.publishNotReadyAddresses"));

    // Both Services, the StatefulSet's selector and the budget select the pods, and the
    // Services' ports reach the gRPC port.
    let labels = pod_labels(sts);
    let c = container(sts);
    assert!(selects(at(sts, "spec.selector.matchLabels"), labels));
    for svc in of_kind(&docs, "Service") {
        assert!(
            selects(at(svc, "spec.selector"), labels),
            "{}",
            name_of(svc)
        );
        let ports = seq_at(svc, "spec.ports");
        assert!(
            ports
                .iter()
                .any(|p| resolve_port(c, at(p, "targetPort")) == container_port(c, "grpc")),
            "{} does not reach the gRPC port",
            name_of(svc)
        );
    }
    let client = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| str_at(s, "metadata.name") != peer_name)
        .unwrap();
    assert_ne!(
        opt_at(client, "spec.clusterIP").and_then(Value::as_str),
        Some("None"),
        "the client Service balances over ready pods"
    );
    let pdb = the(&docs, "PodDisruptionBudget");
    assert!(selects(at(pdb, "spec.selector.matchLabels"), labels));
    assert_eq!(u64_at(pdb, "spec.maxUnavailable"), 1);
}

#[test]
fn the_statefulset_pods_are_the_initial_cluster() {
    let docs = k8s_documents();
    let sts = statefulset(&docs);
    assert_eq!(u64_at(sts, "spec.replicas"), 3);
    assert_eq!(str_at(sts, "spec.podManagementPolicy"), "Parallel");
    let c = container(sts);
    let want = stable_addresses(sts);
    assert_eq!(want.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
    for (&id, address) in &want {
        let pod = format!("{}-{}", str_at(sts, "metadata.name"), id - 1);
        let env = pod_env(c, &pod);
        assert_eq!(env_value(&env, "BATON_NODE_ID_FROM_HOSTNAME"), "true");
        let members = parse_initial_cluster(env_value(&env, "BATON_INITIAL_CLUSTER"));
        assert_eq!(members, want, "pod {pod}: the initial cluster");
        assert_eq!(env_value(&env, "BATON_ADVERTISE"), address, "pod {pod}");
        // The node listens on an IP (a host name is refused), every interface.
        let listen = env_value(&env, "BATON_LISTEN");
        assert_eq!(listen, format!("0.0.0.0:{}", container_port(c, "grpc")));
        assert_eq!(port_of(address), port_of(listen));
    }
}

#[test]
fn the_container_has_probes_resources_a_volume_and_no_privileges() {
    let docs = k8s_documents();
    let sts = statefulset(&docs);
    let c = container(sts);
    let pod = at(sts, "spec.template.spec");
    assert_eq!(str_at(c, "imagePullPolicy"), "IfNotPresent");
    assert!(!str_at(c, "image").is_empty());

    // The image is FROM scratch: no shell, so no commands at all; settings are env vars.
    for key in ["command", "args"] {
        assert!(c.get(key).is_none(), "the container sets {key}");
    }
    let env = pod_env(c, "baton-0");

    // Probes: httpGet on the admin port, which is where the node serves its admin API.
    let admin_port = container_port(c, "admin");
    assert_eq!(admin_port, 9000);
    assert_eq!(port_of(env_value(&env, "BATON_ADMIN_LISTEN")), admin_port);
    for (probe, path) in [
        ("readinessProbe", "/readyz"),
        ("livenessProbe", "/healthz"),
        ("startupProbe", "/healthz"),
    ] {
        let p = at(c, probe);
        assert!(
            p.get("exec").is_none(),
            "{probe}: no exec, there is no shell"
        );
        assert_eq!(str_at(p, "httpGet.path"), path, "{probe}");
        assert_eq!(
            resolve_port(c, at(p, "httpGet.port")),
            admin_port,
            "{probe}"
        );
    }
    // A busy node is not killed quickly: at least a minute of failed liveness checks.
    let liveness = at(c, "livenessProbe");
    assert!(u64_at(liveness, "periodSeconds") * u64_at(liveness, "failureThreshold") >= 60);

    for path in [
        "resources.requests.cpu",
        "resources.requests.memory",
        "resources.limits.memory",
    ] {
        assert!(opt_at(c, path).is_some(), "container: no {path}");
    }

    // Security: non-root 65532, read-only root, no capabilities.
    assert!(bool_at(pod, "securityContext.runAsNonRoot"));
    assert_eq!(u64_at(pod, "securityContext.runAsUser"), 65532);
    assert!(opt_at(pod, "securityContext.fsGroup").is_some());
    assert!(bool_at(c, "securityContext.readOnlyRootFilesystem"));
    assert!(!bool_at(c, "securityContext.allowPrivilegeEscalation"));
    assert_eq!(
        seq_at(c, "securityContext.capabilities.drop"),
        [Value::from("ALL")]
    );
    // The Service named `baton` must not put BATON_* service-link variables in the
    // container's environment.
    assert!(!bool_at(pod, "enableServiceLinks"));
    assert!(u64_at(pod, "terminationGracePeriodSeconds") >= 30);

    // The data dir is on the claim template's volume, below its root (a new volume's root
    // may hold lost+found, and a new node needs an empty data dir).
    let claim = str_at(sts, "spec.volumeClaimTemplates.0.metadata.name");
    let mount = seq_at(c, "volumeMounts")
        .iter()
        .find(|m| str_at(m, "name") == claim)
        .unwrap_or_else(|| panic!("the volume {claim} is not mounted"));
    let mount_path = str_at(mount, "mountPath");
    assert_eq!(mount_path, "/var/lib/baton");
    let data_dir = env_value(&env, "BATON_DATA_DIR");
    assert!(
        data_dir.starts_with(&format!("{mount_path}/")),
        "BATON_DATA_DIR {data_dir} is not below {mount_path}"
    );
    assert!(opt_at(
        sts,
        "spec.volumeClaimTemplates.0.spec.resources.requests.storage"
    )
    .is_some());
}

#[test]
fn every_env_var_of_the_container_is_one_baton_node_documents() {
    let docs = k8s_documents();
    let c = container(statefulset(&docs));
    let documented = documented_env_vars();
    let env = container_env(c);
    // A downward-API variable may exist only to be substituted into another one.
    let referenced = |name: &str| {
        env.iter().any(|(_, s)| match s {
            EnvSource::Value(v) => v.contains(&format!("$({name})")),
            EnvSource::Field(_) => false,
        })
    };
    for (name, source) in &env {
        match source {
            EnvSource::Field(_) => assert!(
                documented.contains(name) || referenced(name),
                "{name} (downward API) is neither a baton-node variable nor used by one"
            ),
            EnvSource::Value(_) => assert!(
                documented.contains(name),
                "{name} is not documented by baton-node --help (documented: {documented:?})"
            ),
        }
    }
}

#[test]
fn baton_node_runs_with_the_statefulset_env() {
    let docs = k8s_documents();
    let sts = statefulset(&docs);
    let pod = format!("{}-0", str_at(sts, "metadata.name"));
    let place = Place::new();
    let mut env = pod_env(container(sts), &pod);
    place.localize_env(&mut env);
    // The node id comes from the host name: give the node the pod's host name where a UTS
    // namespace can be had, else the id it would compute.
    let mut cmd = with_hostname(&pod).unwrap_or_else(|| {
        println!("no UTS namespace (unshare): running with BATON_NODE_ID=1 instead of the host name {pod}");
        env.retain(|(name, _)| name != "BATON_NODE_ID_FROM_HOSTNAME");
        env.push(("BATON_NODE_ID".into(), "1".into()));
        baton_deploy::clean_command(baton_deploy::built_bin("baton-node"))
    });
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let advertise = stable_addresses(sts)[&1].clone();
    let mut node = Node::start(cmd, &place);
    node.wait_healthy();
    assert_eq!(serving_as(&node.log()), (1, advertise));
    // Alone (its peers' names do not resolve here) it has no leader, so it is not ready:
    // why the headless Service publishes not-ready addresses.
    assert!(!node.health(true), "/readyz answered 200 with no leader");
    let log = node.stop();
    println!(
        "statefulset env, pod {pod}: started, served, stopped; {} log lines",
        log.lines().count()
    );
}

#[test]
fn kubernetes_env_expansion_follows_the_kubelet() {
    let defined = BTreeMap::from([("A".to_string(), "x".to_string())]);
    assert_eq!(expand("$(A).$(B)", &defined), "x.$(B)");
    assert_eq!(expand("$$(A)-$", &defined), "$(A)-$");
    assert_eq!(expand("$(A", &defined), "$(A");
}
