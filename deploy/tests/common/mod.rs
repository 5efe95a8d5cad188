//! What the tests of `deploy/` share: the files, the Kubernetes manifests as YAML
//! (`k8s`), a real `baton-node` run by a test (`node`), and a docker compose deployment
//! (`compose`). Each test file uses some of it, so the rest is dead code there.
#![allow(dead_code)]

pub mod compose;
pub mod k8s;
pub mod node;

use std::path::{Path, PathBuf};

/// `deploy/`, where the files under test are.
pub fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn runbook() -> String {
    read(&deploy_dir().join("RUNBOOK.md"))
}

/// The `sh` block after `marker` in the runbook.
pub fn runbook_block(marker: &str) -> String {
    let text = runbook();
    let after = text
        .split_once(marker)
        .unwrap_or_else(|| panic!("the runbook lost its {marker} marker"))
        .1;
    after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .unwrap_or_else(|| panic!("no sh block after {marker}"))
        .0
        .to_owned()
}

/// A block's commands: comments and blank lines dropped, `\` continuations joined.
pub fn commands(block: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in block.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    lines
}

/// The runbook's `policy.toml`: the last `toml` block before the secured bring-up.
pub fn runbook_policy() -> String {
    let text = runbook();
    let before = text
        .split_once("<!-- secured-bring-up -->")
        .expect("the runbook lost its secured-bring-up marker")
        .0;
    let at = before.rfind("```toml\n").expect("no policy.toml block") + "```toml\n".len();
    before[at..].split_once("```").unwrap().0.to_owned()
}
