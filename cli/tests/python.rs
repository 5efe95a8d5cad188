//! The Python client (`python/`): its wheel built from the repository's proto by
//! `grpcio-tools`, installed in a fresh virtual environment, and its pytest suite run there
//! against real clusters of this build's `baton-node` (the suite starts and stops them).
//! Needs `python3` with `venv` and PyPI (grpcio, protobuf, grpcio-tools, pytest).

mod common;

use std::path::Path;
use std::process::Command;

fn run(what: &str, command: &mut Command) {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_python_client_passes_its_suite_from_a_fresh_wheel() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let venv = scratch.path().join("venv");
    let wheels = scratch.path().join("wheels");
    run(
        "python3 -m venv",
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
    );
    let python = venv.join("bin/python");
    let pip = |args: &[&str]| {
        let mut c = Command::new(&python);
        c.args(["-m", "pip", "--disable-pip-version-check", "-q"])
            .args(args);
        c
    };
    run(
        "pip wheel python/",
        pip(&["wheel", "--no-deps", "-w"])
            .arg(&wheels)
            .arg(repo.join("python")),
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("-py3-none-any.whl"))
        .expect("a py3-none-any wheel");
    run(
        "pip install the wheel and pytest",
        pip(&["install"]).arg(&wheel).arg("pytest"),
    );
    let bins = common::cli_bin().parent().unwrap().to_owned();
    run(
        "pytest python/tests",
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(repo.join("python/tests"))
            .current_dir(scratch.path())
            .env("BATON_BIN_DIR", &bins)
            .env_remove("BATON_CLIENT_ID")
            .env_remove("BATON_HOLDER")
            .env_remove("BATON_ENDPOINTS"),
    );
}
