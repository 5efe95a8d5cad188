//! This crate holds the tests of the files beside it in `deploy/` (the container image and
//! its build script, `compose.yaml`, the systemd unit, the Kubernetes manifests); they run
//! with the rest under `cargo test --workspace`. Here are the helpers they share.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>/NAME` (`baton-node`, `baton`), beside the running test's `deps/`
/// directory; `cargo test --workspace` builds it. Fails the test if it is missing.
pub fn built_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps")
        .join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build -p baton-node -p baton-cli`; \
         `cargo test --workspace` builds it)",
        bin.display()
    );
    bin
}

/// A command with none of this process's `BATON_*` variables, so that only what a test sets
/// reaches what it runs.
pub fn clean_command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("BATON_") {
            cmd.env_remove(name);
        }
    }
    cmd
}
