//! The systemd unit `deploy/systemd/baton-node.service`: its structure (user, hardening,
//! limits, restarts, the paths the examples beside it are installed at), and, where
//! `systemd-analyze` is installed, `systemd-analyze verify` and `security --offline` on it.
//!
//! `verify` needs the ExecStart binary to exist, so it checks a copy of the unit whose
//! ExecStart is the `baton-node` of this test's target directory (`cargo test --workspace`
//! builds it; `cargo build -p baton-node` otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the unit expects the binary, and the files of `deploy/systemd/`.
const INSTALLED_BIN: &str = "/usr/local/bin/baton-node";
const INSTALLED_CONFIG: &str = "/etc/baton/baton-node.toml";
const INSTALLED_ENV: &str = "/etc/baton/baton-node.env";

fn systemd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("systemd")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn unit_text() -> String {
    read(&systemd_dir().join("baton-node.service"))
}

/// A unit file's settings as (section, key, value), in order; comments and blank lines
/// dropped. (No line continuations: the unit uses none.)
fn parse_unit(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut settings = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        assert!(!line.ends_with('\\'), "line continuation in {line:?}");
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line:?}"));
        settings.push((section.clone(), key.trim().into(), value.trim().into()));
    }
    settings
}

/// Every value of `key` in `section`.
fn values<'a>(unit: &'a [(String, String, String)], section: &str, key: &str) -> Vec<&'a str> {
    unit.iter()
        .filter(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v.as_str())
        .collect()
}

/// The one value of `key` in `section`.
fn one<'a>(unit: &'a [(String, String, String)], section: &str, key: &str) -> &'a str {
    match values(unit, section, key).as_slice() {
        [v] => v,
        all => panic!("[{section}] {key}: want one setting, found {all:?}"),
    }
}

/// Seconds of a systemd time span written as `N` or `Ns` / `Nmin`.
fn seconds(span: &str) -> u64 {
    let (number, unit) = span.split_at(
        span.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(span.len()),
    );
    let n: u64 = number
        .parse()
        .unwrap_or_else(|_| panic!("time span {span:?}"));
    match unit {
        "" | "s" => n,
        "min" => n * 60,
        other => panic!("time span {span:?}: unit {other:?} not handled here"),
    }
}

/// The value of a `key = "value"` line of a TOML text.
fn toml_string(text: &str, key: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in the TOML example"))
}

/// Runs `systemd-analyze ARGS...`; None when it is not installed.
fn systemd_analyze(args: &[&str]) -> Option<(bool, String)> {
    let out = Command::new("systemd-analyze").args(args).output().ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success(), text))
}

/// A copy of the unit, in `dir`, whose ExecStart runs the real binary; with `extra` lines
/// appended to [Service].
fn unit_copy(dir: &Path, extra: &str) -> PathBuf {
    let text = unit_text();
    assert!(text.contains(INSTALLED_BIN));
    let text = text.replace(
        INSTALLED_BIN,
        &baton_deploy::built_bin("baton-node").display().to_string(),
    );
    let text = text.replace("[Install]", &format!("{extra}\n[Install]"));
    let path = dir.join("baton-node.service");
    std::fs::write(&path, text).expect("writing the unit copy");
    path
}

#[test]
fn the_unit_runs_a_hardened_node_as_its_own_user() {
    let unit = parse_unit(&unit_text());
    let service = |key| one(&unit, "Service", key);

    // A user of its own: a fixed system user, or a dynamic one with a state directory.
    let fixed = values(&unit, "Service", "User") == ["baton"]
        && values(&unit, "Service", "Group") == ["baton"];
    let dynamic = values(&unit, "Service", "DynamicUser") == ["yes"];
    assert!(
        fixed || dynamic,
        "User=baton/Group=baton or DynamicUser=yes"
    );
    assert_eq!(service("StateDirectory"), "baton");

    assert!(["exec", "simple"].contains(&service("Type")));
    assert_eq!(service("Restart"), "on-failure");
    assert!(seconds(service("RestartSec")) >= 1);
    assert!(
        seconds(service("TimeoutStopSec")) >= 30,
        "time for a clean stop"
    );
    assert_eq!(service("LimitNOFILE"), "65536");
    for section_key in ["After", "Wants"] {
        assert!(
            one(&unit, "Unit", section_key).contains("network-online.target"),
            "[Unit] {section_key}"
        );
    }
    assert_eq!(one(&unit, "Install", "WantedBy"), "multi-user.target");

    for (key, want) in [
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
    ] {
        assert_eq!(service(key), want, "[Service] {key}");
    }
    assert!(values(&unit, "Service", "SystemCallFilter").contains(&"@system-service"));
}

#[test]
fn the_unit_runs_the_examples_beside_it() {
    let unit = parse_unit(&unit_text());
    // ExecStart reads the TOML example, installed; the env file is optional (`-`).
    assert_eq!(
        one(&unit, "Service", "ExecStart"),
        format!("{INSTALLED_BIN} --config {INSTALLED_CONFIG}")
    );
    assert_eq!(
        one(&unit, "Service", "EnvironmentFile"),
        format!("-{INSTALLED_ENV}")
    );
    for installed in [INSTALLED_CONFIG, INSTALLED_ENV] {
        let name = Path::new(installed).file_name().unwrap();
        assert!(
            systemd_dir().join(name).is_file(),
            "no example {name:?} in deploy/systemd/"
        );
    }
    // The TOML example's data dir is the state directory, the one path the service may write.
    let toml = read(&systemd_dir().join("baton-node.toml"));
    let state_dir = format!("/var/lib/{}", one(&unit, "Service", "StateDirectory"));
    assert_eq!(toml_string(&toml, "data_dir"), state_dir);
    assert_eq!(one(&unit, "Service", "WorkingDirectory"), state_dir);
}

#[test]
fn systemd_analyze_verify_finds_nothing_in_the_unit() {
    let Some((_, version)) = systemd_analyze(&["--version"]) else {
        println!("systemd-analyze is not installed: skipped verify (the structural checks ran)");
        return;
    };
    println!("{}", version.lines().next().unwrap_or_default());
    let tmp = tempfile::tempdir().expect("a temp dir");

    // First, that verify reports problems at all here: a copy with an unknown key.
    let broken = unit_copy(tmp.path(), "NoSuchSetting=1");
    let (_, said) = systemd_analyze(&["verify", broken.to_str().unwrap()]).unwrap();
    assert!(
        said.contains("NoSuchSetting"),
        "verify did not report an unknown key, so its silence would prove nothing: {said}"
    );

    let unit = unit_copy(tmp.path(), "");
    let (ok, said) = systemd_analyze(&["verify", unit.to_str().unwrap()]).unwrap();
    println!("systemd-analyze verify printed: {said:?}");
    let about_unit: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("baton-node") || l.contains(&*tmp.path().to_string_lossy()))
        .collect();
    assert!(
        ok && about_unit.is_empty(),
        "systemd-analyze verify (ok: {ok}):\n{said}"
    );

    // The exposure score of the hardening (systemd 250 and newer analyze offline).
    match systemd_analyze(&["security", "--offline=yes", unit.to_str().unwrap()]) {
        Some((true, said)) => {
            let score = said
                .lines()
                .find_map(|l| l.split_once("Overall exposure level for baton-node.service: "))
                .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no exposure level in:\n{said}"));
            println!("systemd-analyze security: exposure {score}");
            assert!(
                score <= 2.0,
                "exposure {score} (10 is no hardening):\n{said}"
            );
        }
        _ => println!("systemd-analyze security --offline is not available: skipped"),
    }
}
