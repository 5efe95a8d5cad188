//! `baton handoff accept --verify`: measure the note's volatile facts again and compare the
//! note's commit with this checkout, because "any metadata that can change must be checked
//! against the actual state; the snapshot in the handoff notes should not be taken as fact".

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use baton_client::{HandoffNote, VolatileFact};
use serde::Serialize;

use super::git;

/// Longest a check command may run before it is killed and reported as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// Most bytes of a check's output kept as its actual value; a value is a number or a word,
/// so more is a command that prints something else.
pub const ACTUAL_VALUE_BYTES_MAX: usize = 4 * 1024;

/// How a volatile fact compares with its value now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FactVerdict {
    /// The check printed the claimed value.
    Match,
    /// The check printed another value: the note's value is stale.
    Changed,
    /// The check did not run to success (non-zero exit, timeout, cannot start).
    Failed,
}

/// One volatile fact, measured again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FactCheck {
    pub name: String,
    pub check_command: String,
    /// The value the note claimed.
    pub claimed_value: String,
    /// The check's trimmed standard output; `None` when it could not run.
    pub actual_value: Option<String>,
    pub verdict: FactVerdict,
    /// Why the check failed, when it did.
    pub error: Option<String>,
}

/// How the note's commit compares with this checkout's HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitVerdict {
    /// The checkout is at the note's commit.
    Match,
    /// The checkout is at another commit.
    Differs,
    /// The note names no commit.
    NoCommitInNote,
    /// This checkout's HEAD cannot be read (not a git checkout, no commit yet).
    Unknown,
}

/// The note's commit against this checkout's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitCheck {
    pub note_commit: String,
    /// `git rev-parse HEAD` here; `None` when it cannot be read.
    pub local_commit: Option<String>,
    pub verdict: CommitVerdict,
    pub error: Option<String>,
}

/// What `--verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verification {
    pub commit: CommitCheck,
    pub facts: Vec<FactCheck>,
    /// Uncommitted files in this checkout; `None` when it cannot be read.
    pub local_dirty_files: Option<Vec<String>>,
    /// Those of them the note lists neither as changed nor as dirty: whose are they?
    pub dirty_files_not_in_note: Vec<String>,
}

impl Verification {
    /// Something in the note does not hold here: a fact changed or could not be checked,
    /// or this checkout is not (provably) at the note's commit.
    pub fn found_differences(&self) -> bool {
        matches!(
            self.commit.verdict,
            CommitVerdict::Differs | CommitVerdict::Unknown
        ) || self.facts.iter().any(|f| f.verdict != FactVerdict::Match)
    }
}

/// Checks `note` against the checkout in `dir`: each volatile fact's command runs there
/// with `sh -c`, one after another; `announce` is called with each fact before its command
/// runs, so that a person sees what runs (and what hangs).
///
/// The commands are the giver's: whoever offered the handoff wrote them, and they run with
/// the taker's rights. Each runs within `timeout`, in its own process group, with no
/// standard input and its output captured, so it cannot read the terminal or outlive the
/// check; callers run them only when the taker asked (`--verify`, MCP `run_checks` on a
/// server started with `--run-checks`).
pub async fn verify(
    note: &HandoffNote,
    dir: &Path,
    timeout: Duration,
    mut announce: impl FnMut(&VolatileFact),
) -> Verification {
    let mut facts = Vec::with_capacity(note.volatile_facts.len());
    for fact in &note.volatile_facts {
        announce(fact);
        facts.push(check_fact(fact, dir, timeout).await);
    }
    Verification {
        facts,
        ..compare_checkout(note, dir)
    }
}

/// Compares the note's commit and dirty files with the checkout in `dir`, running none of
/// the note's check commands (they are the giver's: see [`verify`]); `facts` is empty.
pub fn compare_checkout(note: &HandoffNote, dir: &Path) -> Verification {
    let commit = check_commit(&note.commit, dir);
    let (local_dirty_files, dirty_files_not_in_note) = match git::snapshot(dir) {
        Ok(state) => {
            let foreign = state
                .dirty_files
                .iter()
                .filter(|f| !note.dirty_files.contains(f) && !note.changed_files.contains(f))
                .cloned()
                .collect();
            (Some(state.dirty_files), foreign)
        }
        Err(_) => (None, Vec::new()),
    };
    Verification {
        commit,
        facts: Vec::new(),
        local_dirty_files,
        dirty_files_not_in_note,
    }
}

/// Runs one fact's check command and compares its trimmed output with the claimed value.
pub async fn check_fact(fact: &VolatileFact, dir: &Path, timeout: Duration) -> FactCheck {
    let failed = |error: String| FactCheck {
        name: fact.name.clone(),
        check_command: fact.check_command.clone(),
        claimed_value: fact.claimed_value.clone(),
        actual_value: None,
        verdict: FactVerdict::Failed,
        error: Some(error),
    };
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&fact.check_command)
        .current_dir(dir)
        // Its own process group: not the terminal's foreground group, so it cannot read
        // the terminal (SIGTTIN) nor take its signals.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(error) => return failed(format!("cannot run sh: {error}")),
    };
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(error)) => return failed(format!("cannot wait for the check: {error}")),
        Err(_) => {
            return failed(format!(
                "no answer within {}; killed",
                humantime::format_duration(timeout)
            ))
        }
    };
    let actual = truncate(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = match out.status.code() {
            Some(code) => format!("exited {code}"),
            None => "killed by a signal".to_owned(),
        };
        let mut check = failed(match stderr.trim().lines().next() {
            Some(line) => format!("{why}: {line}"),
            None => why,
        });
        check.actual_value = Some(actual);
        return check;
    }
    let verdict = if actual == fact.claimed_value.trim() {
        FactVerdict::Match
    } else {
        FactVerdict::Changed
    };
    FactCheck {
        name: fact.name.clone(),
        check_command: fact.check_command.clone(),
        claimed_value: fact.claimed_value.clone(),
        actual_value: Some(actual),
        verdict,
        error: None,
    }
}

/// Compares the note's commit with the HEAD of the checkout in `dir`.
pub fn check_commit(note_commit: &str, dir: &Path) -> CommitCheck {
    let (local_commit, error) = match git::head(dir) {
        Ok(head) => (Some(head), None),
        Err(error) => (None, Some(format!("{error:#}"))),
    };
    let verdict = match &local_commit {
        _ if note_commit.is_empty() => CommitVerdict::NoCommitInNote,
        None => CommitVerdict::Unknown,
        Some(head) if same_commit(head, note_commit) => CommitVerdict::Match,
        Some(_) => CommitVerdict::Differs,
    };
    CommitCheck {
        note_commit: note_commit.to_owned(),
        local_commit,
        verdict,
        error,
    }
}

/// A full hash matches itself or an abbreviation of it (at least 7 hex digits), as people
/// write commits in notes.
fn same_commit(full: &str, written: &str) -> bool {
    let written = written.trim();
    written.len() >= 7 && full.starts_with(&written.to_ascii_lowercase())
}

fn truncate(text: &str) -> String {
    if text.len() <= ACTUAL_VALUE_BYTES_MAX {
        return text.to_owned();
    }
    let mut end = ACTUAL_VALUE_BYTES_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::testing::{git as run_git, repo};

    fn fact(name: &str, claimed: &str, command: &str) -> VolatileFact {
        VolatileFact {
            name: name.into(),
            claimed_value: claimed.into(),
            check_command: command.into(),
        }
    }

    #[tokio::test]
    async fn a_fact_whose_check_prints_the_claimed_value_matches() {
        let dir = tempfile::tempdir().unwrap();
        let check = check_fact(
            &fact("count", "4", "echo '  4 '"),
            dir.path(),
            CHECK_TIMEOUT,
        )
        .await;
        assert_eq!(check.verdict, FactVerdict::Match);
        assert_eq!(check.actual_value.as_deref(), Some("4"));
        assert_eq!(check.error, None);
    }

    #[tokio::test]
    async fn a_fact_whose_value_moved_on_is_changed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("todo.txt"), "a\nb\nc\nd\ne\n").unwrap();
        // Runs in the given directory, through a real shell (redirection works).
        let check = check_fact(
            &fact("rows_left", "4", "wc -l < todo.txt"),
            dir.path(),
            CHECK_TIMEOUT,
        )
        .await;
        assert_eq!(check.verdict, FactVerdict::Changed);
        assert_eq!(check.actual_value.as_deref(), Some("5"));
        assert_eq!(check.claimed_value, "4");
    }

    #[tokio::test]
    async fn a_failing_check_is_failed_with_its_exit_code_and_first_stderr_line() {
        let dir = tempfile::tempdir().unwrap();
        let check = check_fact(
            &fact(
                "deployed",
                "yes",
                "echo partial; echo 'no such env' >&2; exit 3",
            ),
            dir.path(),
            CHECK_TIMEOUT,
        )
        .await;
        assert_eq!(check.verdict, FactVerdict::Failed);
        assert_eq!(check.error.as_deref(), Some("exited 3: no such env"));
        assert_eq!(check.actual_value.as_deref(), Some("partial"));
    }

    #[tokio::test]
    async fn a_check_that_hangs_is_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let check = check_fact(
            &fact("slow", "1", "sleep 30"),
            dir.path(),
            Duration::from_millis(200),
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(check.verdict, FactVerdict::Failed);
        assert!(check.error.unwrap().contains("no answer within"));
    }

    #[test]
    fn commit_comparison_against_a_real_checkout() {
        let dir = repo();
        let head = run_git(dir.path(), &["rev-parse", "HEAD"]);
        let check = check_commit(&head, dir.path());
        assert_eq!(check.verdict, CommitVerdict::Match);
        assert_eq!(check.local_commit.as_deref(), Some(head.as_str()));
        assert_eq!(
            check_commit(&head[..8], dir.path()).verdict,
            CommitVerdict::Match
        );
        let other = check_commit("0123456789abcdef0123456789abcdef01234567", dir.path());
        assert_eq!(other.verdict, CommitVerdict::Differs);
        assert_eq!(
            check_commit("", dir.path()).verdict,
            CommitVerdict::NoCommitInNote
        );
        // Too short to be an abbreviation people would trust.
        assert_eq!(
            check_commit(&head[..3], dir.path()).verdict,
            CommitVerdict::Differs
        );
        let not_git = tempfile::tempdir().unwrap();
        let unknown = check_commit(&head, not_git.path());
        assert_eq!(unknown.verdict, CommitVerdict::Unknown);
        assert!(unknown.error.is_some());
    }

    #[tokio::test]
    async fn verify_announces_each_check_before_it_runs_and_finds_foreign_dirty_files() {
        let dir = repo();
        let head = run_git(dir.path(), &["rev-parse", "HEAD"]);
        std::fs::write(dir.path().join("a.txt"), "changed\n").unwrap();
        std::fs::write(dir.path().join("stray.txt"), "?\n").unwrap();
        let marker = dir.path().join("ran");
        let note = HandoffNote {
            commit: head,
            dirty_files: vec!["a.txt".into()],
            volatile_facts: vec![
                fact("count", "4", "echo 5"),
                fact("marker", "", &format!("touch {}", marker.display())),
            ],
            ..HandoffNote::default()
        };
        let mut announced = Vec::new();
        let verification = verify(&note, dir.path(), CHECK_TIMEOUT, |f| {
            // Announced before its command runs: the marker does not exist yet.
            announced.push((f.name.clone(), marker.exists()));
        })
        .await;
        assert_eq!(
            announced,
            [("count".to_owned(), false), ("marker".to_owned(), false)]
        );
        assert!(marker.exists());
        assert_eq!(verification.facts[0].verdict, FactVerdict::Changed);
        assert_eq!(verification.facts[1].verdict, FactVerdict::Match);
        assert_eq!(verification.commit.verdict, CommitVerdict::Match);
        // The marker was created by the check itself, so it is dirty too.
        let mut local = verification.local_dirty_files.clone().unwrap();
        local.sort();
        assert_eq!(local, ["a.txt", "ran", "stray.txt"]);
        let mut foreign = verification.dirty_files_not_in_note.clone();
        foreign.sort();
        assert_eq!(foreign, ["ran", "stray.txt"]);
        assert!(verification.found_differences());
        let matching = HandoffNote {
            volatile_facts: vec![fact("count", "5", "echo 5")],
            ..note
        };
        let verification = verify(&matching, dir.path(), CHECK_TIMEOUT, |_| {}).await;
        assert!(!verification.found_differences(), "{verification:?}");
    }

    #[test]
    fn long_output_is_cut_at_a_char_boundary() {
        let long = "é".repeat(ACTUAL_VALUE_BYTES_MAX);
        let cut = truncate(&long);
        assert!(cut.len() <= ACTUAL_VALUE_BYTES_MAX + "…".len());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("5"), "5");
    }
}
