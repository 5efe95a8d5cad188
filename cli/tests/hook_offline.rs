//! The git hook as `git commit` runs it, with no cluster to ask: the hooks `baton hook
//! install` writes, pointed at an endpoint where nothing listens, must answer fast (refuse,
//! saying why, or pass when told to), find a `baton` when the one that installed them is
//! gone, and say nothing about a commit that touches no guarded file.

mod common;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{cli_bin, free_port};

/// Well under the 10 s the client retries an unavailable cluster by default
/// (`RETRY_TIMEOUT_DEFAULT`), which each hook waited out before, yet roomy enough for two
/// processes' start on a loaded machine: a bound on behaviour, not a benchmark.
const FAST: Duration = Duration::from_secs(5);

/// A repository whose incidents are guarded, with baton's hooks installed by `installer`,
/// and the commits of which go to `endpoint`.
struct Repo {
    dir: tempfile::TempDir,
    /// An address where nothing listens: the cluster is down.
    endpoint: String,
}

impl Repo {
    fn new(installer: &Path) -> Repo {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
            endpoint: format!("127.0.0.1:{}", free_port()),
        };
        ok(repo.git(&path_with_baton(), &[], &["init", "-q", "-b", "main"]));
        std::fs::create_dir_all(repo.dir().join(".baton")).unwrap();
        std::fs::write(
            repo.dir().join(".baton/hook.toml"),
            "[paths]\n\"docs/incidents/*.md\" = \"incidents/{stem}\"\n",
        )
        .unwrap();
        repo.install(installer);
        repo
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn install(&self, installer: &Path) {
        let out = Command::new(installer)
            .args(["hook", "install"])
            .current_dir(self.dir())
            .output()
            .unwrap();
        let text = ok(out);
        assert!(text.contains("pre-commit"), "{text}");
    }

    /// `git ARGS` with `path` as PATH, `env` set, as session s-a of the dead cluster.
    fn git(&self, path: &OsString, env: &[(&str, &str)], args: &[&str]) -> Output {
        let mut command = Command::new("git");
        command
            .args(args)
            .current_dir(self.dir())
            .env("PATH", path)
            .env("BATON_ENDPOINTS", &self.endpoint)
            .env("BATON_CLIENT_ID", "s-a")
            .env_remove("BATON_HOOK_ALLOW_OFFLINE")
            .env_remove("BATON_GUARD_ALLOW_OFFLINE")
            .env("GIT_AUTHOR_NAME", "agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.com")
            .env("GIT_COMMITTER_NAME", "agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.com");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    }

    /// Writes `text` to `file`, stages it and commits it (`git commit -q`), with the time
    /// the commit took.
    fn commit(
        &self,
        path: &OsString,
        env: &[(&str, &str)],
        file: &str,
        text: &str,
    ) -> (Output, Duration) {
        let at = self.dir().join(file);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, text).unwrap();
        ok(self.git(path, &[], &["add", file]));
        let start = Instant::now();
        let out = self.git(path, env, &["commit", "-q", "-m", &format!("edit {file}")]);
        (out, start.elapsed())
    }

    fn commits(&self) -> usize {
        ok(self.git(&path_with_baton(), &[], &["rev-list", "--count", "--all"]))
            .trim()
            .parse()
            .unwrap()
    }
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{}", both(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn both(out: &Output) -> String {
    format!(
        "{:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// PATH with the directory of the `baton` under test first.
fn path_with_baton() -> OsString {
    let mut dirs = vec![cli_bin().parent().unwrap().to_owned()];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap()));
    std::env::join_paths(dirs).unwrap()
}

/// PATH without any directory that holds a `baton` (git and sh stay reachable).
fn path_without_baton() -> OsString {
    let dirs: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .filter(|dir| !dir.join("baton").exists())
        .collect();
    std::env::join_paths(dirs).unwrap()
}

/// A copy of the `baton` under test at a path of its own, which a test may delete.
fn baton_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("baton");
    std::fs::copy(cli_bin(), &bin).unwrap();
    (dir, bin)
}

#[test]
fn with_the_cluster_down_a_guarded_commit_is_refused_fast_saying_why_or_passes_fast_when_allowed() {
    let repo = Repo::new(&cli_bin());
    let path = path_with_baton();
    let before = repo.commits();

    let (refused, took) = repo.commit(&path, &[], "docs/incidents/1.md", "a\n");
    assert!(!refused.status.success(), "{}", both(&refused));
    assert!(took < FAST, "refused after {took:?}: {}", both(&refused));
    let why = stderr(&refused);
    for fact in [
        "cannot reach the cluster",
        repo.endpoint.as_str(),
        "fails closed",
        "BATON_HOOK_ALLOW_OFFLINE=1",
        "--no-verify",
    ] {
        assert!(why.contains(fact), "{fact:?} missing: {why}");
    }
    assert_eq!(repo.commits(), before, "nothing committed");

    // The commit-msg hook keeps the same short deadline when run on its own.
    let message = repo.dir().join("message.txt");
    std::fs::write(&message, "edit\n").unwrap();
    let start = Instant::now();
    let trailers = Command::new(cli_bin())
        .args(["hook", "trailers"])
        .arg(&message)
        .current_dir(repo.dir())
        .env("BATON_ENDPOINTS", &repo.endpoint)
        .env("BATON_CLIENT_ID", "s-a")
        .env_remove("BATON_HOOK_ALLOW_OFFLINE")
        .env_remove("BATON_GUARD_ALLOW_OFFLINE")
        .output()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(trailers.status.code(), Some(4), "{}", both(&trailers));
    assert!(took < FAST, "trailers refused after {took:?}");
    assert!(
        stderr(&trailers).contains("cannot reach the cluster"),
        "{}",
        both(&trailers)
    );

    // Allowed offline (under either name), both hooks let the commit through fast and say
    // so, naming the variable; the message gets no trailers, as no token was checked, and
    // the commit-msg hook takes the pre-commit hook's word for the cluster being down
    // rather than waiting for it again.
    for (n, name) in ["BATON_HOOK_ALLOW_OFFLINE", "BATON_GUARD_ALLOW_OFFLINE"]
        .into_iter()
        .enumerate()
    {
        let (passed, took) = repo.commit(&path, &[(name, "1")], "docs/incidents/1.md", name);
        assert!(passed.status.success(), "{name}: {}", both(&passed));
        assert!(
            took < FAST,
            "{name}: passed after {took:?}: {}",
            both(&passed)
        );
        let said = stderr(&passed);
        for fact in [
            "the commit goes through unchecked because",
            "adds no Baton trailers: the pre-commit hook found the cluster unreachable",
            &format!("{name} is set"),
        ] {
            assert!(said.contains(fact), "{fact:?} missing: {said}");
        }
        assert_eq!(repo.commits(), before + n + 1);
        let message = ok(repo.git(&path, &[], &["log", "-1", "--format=%B"]));
        assert!(!message.contains("Baton-"), "{message}");
    }
}

#[test]
fn an_ordinary_commit_of_unguarded_files_prints_nothing_from_baton() {
    let repo = Repo::new(&cli_bin());
    let before = repo.commits();
    let (out, _) = repo.commit(&path_with_baton(), &[], "README.md", "hello\n");
    assert!(out.status.success(), "{}", both(&out));
    assert_eq!(repo.commits(), before + 1);
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice()),
        (&b""[..], &b""[..]),
        "{}",
        both(&out)
    );
}

#[test]
fn a_hook_whose_installing_binary_is_gone_runs_the_baton_on_path_and_says_when_there_is_none() {
    let (copy_dir, copy) = baton_copy();
    let repo = Repo::new(&copy);
    std::fs::remove_file(&copy).unwrap();
    let before = repo.commits();

    // The recorded binary is gone: the one on PATH runs (its refusal is baton's own).
    let (refused, _) = repo.commit(&path_with_baton(), &[], "docs/incidents/2.md", "a\n");
    assert!(!refused.status.success(), "{}", both(&refused));
    assert!(
        stderr(&refused).contains("cannot reach the cluster"),
        "{}",
        both(&refused)
    );
    ok(repo.git(&path_with_baton(), &[], &["reset", "-q", "--hard"]));
    let (passed, _) = repo.commit(&path_with_baton(), &[], "README.md", "on PATH\n");
    assert!(passed.status.success(), "{}", both(&passed));
    assert_eq!(repo.commits(), before + 1);

    // No baton on PATH: the recorded one runs, and one of the hooks says so.
    std::fs::copy(cli_bin(), &copy).unwrap();
    let (passed, _) = repo.commit(&path_without_baton(), &[], "README.md", "recorded\n");
    assert!(passed.status.success(), "{}", both(&passed));
    assert_eq!(repo.commits(), before + 2);
    let said = stderr(&passed);
    assert_eq!(
        said,
        format!(
            "baton hook: no baton on PATH; running {}, which installed this hook\n",
            copy.display()
        )
    );

    // Neither: the commit is refused, naming what was tried and what to do.
    drop(copy_dir);
    let (refused, _) = repo.commit(&path_without_baton(), &[], "README.md", "neither\n");
    assert!(!refused.status.success(), "{}", both(&refused));
    assert_eq!(repo.commits(), before + 2);
    let why = stderr(&refused);
    for fact in [
        "no baton on PATH",
        &copy.display().to_string(),
        "baton hook install",
        "--no-verify",
    ] {
        assert!(why.contains(fact), "{fact:?} missing: {why}");
    }
}
