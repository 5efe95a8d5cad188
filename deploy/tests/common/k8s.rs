//! The Kubernetes manifests as the tests read them: YAML documents, dotted paths into them,
//! the container's environment as the kubelet builds it, and a strategic merge patch as
//! `kubectl apply -k` (kustomize) or `kubectl patch` applies one to the StatefulSet.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use super::{deploy_dir, read};

/// The namespace the StatefulSet's pods are imagined in.
pub const NAMESPACE: &str = "default";

// ---------------------------------------------------------------- YAML

/// One YAML document of a manifest file.
pub struct Doc {
    pub file: String,
    pub value: Value,
}

/// Every document of every `deploy/k8s/*.yaml`, in file-name order.
pub fn k8s_documents() -> Vec<Doc> {
    documents_in(&deploy_dir().join("k8s"))
}

/// Every document of every `*.yaml` file of `dir` (not below it), in file-name order.
pub fn documents_in(dir: &Path) -> Vec<Doc> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("yaml")))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no YAML files in {}", dir.display());
    let mut docs = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        // serde_yaml_ng parses one document per call: split at the `---` separator lines (a
        // column-0 `---` is always a document marker in YAML).
        let text = read(&path);
        let mut chunk = String::new();
        for line in text.lines().chain(std::iter::once("---")) {
            if line.trim_end() == "---" {
                let value: Value = serde_yaml_ng::from_str(&chunk)
                    .unwrap_or_else(|e| panic!("{file}: not YAML: {e}"));
                if !value.is_null() {
                    docs.push(Doc {
                        file: file.clone(),
                        value,
                    });
                }
                chunk.clear();
            } else {
                chunk.push_str(line);
                chunk.push('\n');
            }
        }
    }
    docs
}

pub fn of_kind<'a>(docs: &'a [Doc], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d.value.get("kind").and_then(Value::as_str) == Some(kind))
        .map(|d| &d.value)
        .collect()
}

/// The one document of `kind`.
pub fn the<'a>(docs: &'a [Doc], kind: &str) -> &'a Value {
    match of_kind(docs, kind).as_slice() {
        [one] => one,
        all => panic!("want exactly one {kind}, found {}", all.len()),
    }
}

/// The value at a dotted path (`spec.template.spec.containers.0`): mapping keys, and indexes
/// into sequences.
pub fn opt_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, step| match v {
        Value::Sequence(items) => items.get(step.parse::<usize>().ok()?),
        _ => v.get(step),
    })
}

pub fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    opt_at(v, path).unwrap_or_else(|| panic!("{} has no {path}", name_of(v)))
}

pub fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path)
        .as_str()
        .unwrap_or_else(|| panic!("{}: {path} is not a string", name_of(v)))
}

pub fn u64_at(v: &Value, path: &str) -> u64 {
    at(v, path)
        .as_u64()
        .unwrap_or_else(|| panic!("{}: {path} is not a number", name_of(v)))
}

pub fn bool_at(v: &Value, path: &str) -> bool {
    at(v, path)
        .as_bool()
        .unwrap_or_else(|| panic!("{}: {path} is not true/false", name_of(v)))
}

pub fn seq_at<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    at(v, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("{}: {path} is not a list", name_of(v)))
}

/// `Kind/name`, for messages.
pub fn name_of(v: &Value) -> String {
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = opt_at(v, "metadata.name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    format!("{kind}/{name}")
}

/// Whether every label of `selector` (a non-empty mapping) is in `labels`.
pub fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_mapping().expect("a selector is a mapping");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

pub fn statefulset(docs: &[Doc]) -> &Value {
    the(docs, "StatefulSet")
}

pub fn pod_labels(sts: &Value) -> &Value {
    at(sts, "spec.template.metadata.labels")
}

/// The StatefulSet's only container.
pub fn container(sts: &Value) -> &Value {
    let containers = seq_at(sts, "spec.template.spec.containers");
    assert_eq!(containers.len(), 1, "one container: baton-node");
    &containers[0]
}

/// The container port called `name`.
pub fn container_port(c: &Value, name: &str) -> u64 {
    seq_at(c, "ports")
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .map(|p| u64_at(p, "containerPort"))
        .unwrap_or_else(|| panic!("the container has no port named {name}"))
}

/// A probe's or Service's port: a number, or the name of a container port.
pub fn resolve_port(c: &Value, port: &Value) -> u64 {
    match port {
        Value::String(name) => container_port(c, name),
        other => other.as_u64().expect("a port is a number or a name"),
    }
}

/// The port of `host:port`.
pub fn port_of(addr: &str) -> u64 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr:?} is not host:port"))
}

// ---------------------------------------------------------------- the container's env

/// Where an env var of the container gets its value.
pub enum EnvSource {
    Value(String),
    /// Downward API: `valueFrom.fieldRef.fieldPath`.
    Field(String),
}

pub fn container_env(c: &Value) -> Vec<(String, EnvSource)> {
    seq_at(c, "env")
        .iter()
        .map(|e| {
            let name = str_at(e, "name").to_string();
            let source = match (e.get("value"), opt_at(e, "valueFrom.fieldRef.fieldPath")) {
                (Some(v), None) => EnvSource::Value(
                    v.as_str()
                        .unwrap_or_else(|| panic!("env {name}: quote the value, a string"))
                        .to_string(),
                ),
                (None, Some(f)) => EnvSource::Field(f.as_str().unwrap().to_string()),
                _ => panic!("env {name}: want value or valueFrom.fieldRef"),
            };
            (name, source)
        })
        .collect()
}

/// Kubernetes' `$(NAME)` expansion: a variable defined earlier in the list is substituted,
/// `$$` is a literal `$`, anything else is left as written.
pub fn expand(value: &str, defined: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(after) = rest.strip_prefix("$$") {
            out.push('$');
            rest = after;
            continue;
        }
        let reference = rest
            .strip_prefix("$(")
            .and_then(|r| r.split_once(')'))
            .and_then(|(name, after)| Some((defined.get(name)?, after)));
        match reference {
            Some((v, after)) => {
                out.push_str(v);
                rest = after;
            }
            None => {
                out.push('$');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The container's environment in pod `pod` of namespace `NAMESPACE`, as the kubelet
/// builds it.
pub fn pod_env(c: &Value, pod: &str) -> Vec<(String, String)> {
    let mut defined = BTreeMap::new();
    let mut env = Vec::new();
    for (name, source) in container_env(c) {
        let value = match source {
            EnvSource::Value(v) => expand(&v, &defined),
            EnvSource::Field(f) => match f.as_str() {
                "metadata.name" => pod.to_string(),
                "metadata.namespace" => NAMESPACE.to_string(),
                other => panic!("env {name}: fieldRef {other} is not simulated here"),
            },
        };
        assert!(
            !value.contains("$("),
            "env {name} = {value:?}: a $(VAR) that is not defined before it"
        );
        defined.insert(name.clone(), value.clone());
        env.push((name, value));
    }
    env
}

pub fn env_value<'a>(env: &'a [(String, String)], name: &str) -> &'a str {
    env.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no env var {name}"))
}

/// `1=host:port,2=host:port` as id → address.
pub fn parse_initial_cluster(text: &str) -> BTreeMap<u64, String> {
    text.split(',')
        .map(|part| {
            let (id, addr) = part
                .split_once('=')
                .unwrap_or_else(|| panic!("initial cluster entry {part:?} is not id=host:port"));
            (id.parse().expect("a numeric id"), addr.to_string())
        })
        .collect()
}

/// The stable DNS name:port of each pod of the StatefulSet, by node id (ordinal + 1).
pub fn stable_addresses(sts: &Value) -> BTreeMap<u64, String> {
    let name = str_at(sts, "metadata.name");
    let service = str_at(sts, "spec.serviceName");
    let grpc = container_port(container(sts), "grpc");
    (0..u64_at(sts, "spec.replicas"))
        .map(|ordinal| {
            (
                ordinal + 1,
                format!("{name}-{ordinal}.{service}.{NAMESPACE}.svc.cluster.local:{grpc}"),
            )
        })
        .collect()
}

// ---------------------------------------------------------------- strategic merge patches

/// The merge key of the lists a strategic merge patch of a pod template merges item by item
/// (Kubernetes' `patchMergeKey`); every other list is replaced whole.
fn merge_key(list: &str) -> Option<&'static str> {
    match list {
        "containers" | "initContainers" | "env" | "volumes" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// `patch` applied to `base` as a strategic merge patch (`kubectl patch`, kustomize's
/// `patches`): mappings merge key by key; a list with a merge key merges the item of the same
/// key and appends new items after the base's (so a `$(VAR)` of the base's env stays defined
/// before the patch's uses of it); other values are replaced. No `$patch` directives.
pub fn strategic_merge(base: &Value, patch: &Value) -> Value {
    merge_at(base, patch, "")
}

fn merge_at(base: &Value, patch: &Value, field: &str) -> Value {
    match (base, patch) {
        (Value::Mapping(b), Value::Mapping(p)) => {
            let mut out = b.clone();
            for (k, pv) in p {
                let name = k.as_str().unwrap_or_default();
                assert!(
                    !name.starts_with('$'),
                    "patch directive {name} not simulated"
                );
                let merged = match b.get(k) {
                    Some(bv) => merge_at(bv, pv, name),
                    None => pv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Mapping(out)
        }
        (Value::Sequence(b), Value::Sequence(p)) => match merge_key(field) {
            Some(key) => {
                let mut out = b.clone();
                for item in p {
                    let id = item
                        .get(key)
                        .unwrap_or_else(|| panic!("a {field} item without its {key}"));
                    match out.iter_mut().find(|o| o.get(key) == Some(id)) {
                        Some(existing) => *existing = merge_at(existing, item, ""),
                        None => out.push(item.clone()),
                    }
                }
                Value::Sequence(out)
            }
            None => patch.clone(),
        },
        _ => patch.clone(),
    }
}
