//! What `--git` records of a checkout and `--verify` compares: HEAD, the branch and the
//! uncommitted files, read by running the real `git` in a directory.
//!
//! Uncommitted changes are an incident scene, not rubbish: the giver records them so the
//! taker can ask, file by file, whose they are before tidying anything.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};

/// Most uncommitted files a note lists; the rest are counted in a warning. Keeps a note of
/// a very dirty tree within the cluster's note limits (64 KiB, 1,000 files).
pub const DIRTY_FILES_MAX: usize = 200;

/// What `--git` records of a checkout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    /// `git rev-parse HEAD`.
    pub commit: String,
    /// `git rev-parse --abbrev-ref HEAD`; empty for a detached HEAD.
    pub branch: String,
    /// Paths with uncommitted changes, tracked or not, as `git status` lists them
    /// (an untracked directory as `dir/`; a renamed file under its new name).
    pub dirty_files: Vec<String>,
}

/// Reads HEAD, the branch and the uncommitted files of the checkout containing `dir`.
pub fn snapshot(dir: &Path) -> anyhow::Result<GitState> {
    let commit = head(dir)?;
    let branch = git(dir, &["rev-parse", "--abbrev-ref", "HEAD"])?;
    let branch = if branch == "HEAD" {
        String::new()
    } else {
        branch
    };
    let status = git_bytes(dir, &["status", "--porcelain=v1", "-z"])?;
    Ok(GitState {
        commit,
        branch,
        dirty_files: parse_porcelain_z(&status),
    })
}

/// `git rev-parse HEAD` of the checkout containing `dir`.
pub fn head(dir: &Path) -> anyhow::Result<String> {
    git(dir, &["rev-parse", "--verify", "HEAD"]).context("cannot read the checkout's HEAD")
}

/// The paths in `git status --porcelain=v1 -z` output. Each entry is `XY PATH`, NUL-ended;
/// a rename or copy (`R` or `C` in either column) is followed by its original path, which
/// is skipped. Paths come unquoted with `-z`.
pub fn parse_porcelain_z(output: &[u8]) -> Vec<String> {
    let mut paths = Vec::new();
    let mut entries = output.split(|&b| b == 0).filter(|entry| !entry.is_empty());
    while let Some(entry) = entries.next() {
        if entry.len() < 4 {
            continue;
        }
        let (code, path) = (&entry[..2], &entry[3..]);
        paths.push(String::from_utf8_lossy(path).into_owned());
        if code.contains(&b'R') || code.contains(&b'C') {
            entries.next();
        }
    }
    paths
}

/// The warning for a dirty tree: `the working tree has 3 uncommitted files: a, b, c`, with
/// at most `shown` names.
pub fn dirty_warning(dirty_files: &[String], shown: usize) -> Option<String> {
    if dirty_files.is_empty() {
        return None;
    }
    let mut names = dirty_files
        .iter()
        .take(shown)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if dirty_files.len() > shown {
        names.push_str(&format!(", and {} more", dirty_files.len() - shown));
    }
    let files = if dirty_files.len() == 1 {
        "file"
    } else {
        "files"
    };
    Some(format!(
        "the working tree has {} uncommitted {files}: {names}",
        dirty_files.len()
    ))
}

/// The id of the tree the index holds (`git write-tree`, which stores it): what a commit
/// made now would hold. It follows GIT_INDEX_FILE, which git sets for the hooks of a
/// `git commit -a` or `git commit PATH`.
pub(crate) fn index_tree(dir: &Path) -> anyhow::Result<String> {
    git(dir, &["write-tree"])
}

/// `git ARGS` in `dir`: its stdout, trimmed, or an error with its stderr.
pub(crate) fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = git_bytes(dir, args)?;
    Ok(String::from_utf8_lossy(&out).trim().to_owned())
}

/// `git ARGS` in `dir`: its stdout as it came.
pub(crate) fn git_bytes(dir: &Path, args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| format!("cannot run git {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "git {} failed in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// Test helpers: a real repository in a temporary directory.
#[cfg(test)]
pub mod testing {
    use std::path::Path;
    use std::process::Command;

    /// Runs git in `dir` with a fixed identity, panicking on failure.
    pub fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
            .args([
                "-c",
                "commit.gpgsign=false",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A repository with one commit (`a.txt`, `b.txt`) on branch `main`.
    pub fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q"]);
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        std::fs::write(dir.path().join("b.txt"), "b\n").unwrap();
        git(dir.path(), &["add", "."]);
        git(dir.path(), &["commit", "-q", "-m", "first"]);
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{git as run_git, repo};
    use super::*;

    #[test]
    fn a_clean_checkout_records_head_and_branch_and_no_dirty_files() {
        let dir = repo();
        let state = snapshot(dir.path()).unwrap();
        assert_eq!(state.commit, run_git(dir.path(), &["rev-parse", "HEAD"]));
        assert_eq!(state.commit.len(), 40);
        assert_eq!(state.branch, "main");
        assert!(state.dirty_files.is_empty());
        assert_eq!(dirty_warning(&state.dirty_files, 10), None);
    }

    #[test]
    fn a_dirty_checkout_lists_modified_renamed_and_untracked_files() {
        let dir = repo();
        let path = dir.path();
        std::fs::write(path.join("b.txt"), "b changed\n").unwrap();
        run_git(path, &["mv", "a.txt", "c.txt"]);
        std::fs::write(path.join("new file.txt"), "n\n").unwrap();
        std::fs::create_dir(path.join("d")).unwrap();
        std::fs::write(path.join("d/e.txt"), "e\n").unwrap();
        let state = snapshot(path).unwrap();
        let mut dirty = state.dirty_files.clone();
        dirty.sort();
        assert_eq!(dirty, ["b.txt", "c.txt", "d/", "new file.txt"]);
        assert_eq!(
            dirty_warning(&dirty, 2).unwrap(),
            "the working tree has 4 uncommitted files: b.txt, c.txt, and 2 more"
        );
    }

    #[test]
    fn a_detached_head_has_no_branch() {
        let dir = repo();
        let head = run_git(dir.path(), &["rev-parse", "HEAD"]);
        run_git(dir.path(), &["checkout", "-q", "--detach", &head]);
        let state = snapshot(dir.path()).unwrap();
        assert_eq!(state.commit, head);
        assert_eq!(state.branch, "");
    }

    #[test]
    fn outside_a_repository_or_before_the_first_commit_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = format!("{:#}", snapshot(dir.path()).unwrap_err());
        assert!(error.contains("HEAD"), "{error}");
        run_git(dir.path(), &["init", "-q"]);
        let error = format!("{:#}", head(dir.path()).unwrap_err());
        assert!(error.contains("cannot read the checkout's HEAD"), "{error}");
    }

    #[test]
    fn the_index_tree_changes_with_what_is_staged_only() {
        let dir = repo();
        let committed = index_tree(dir.path()).unwrap();
        assert_eq!(
            committed,
            run_git(dir.path(), &["rev-parse", "HEAD^{tree}"])
        );
        std::fs::write(dir.path().join("a.txt"), "a changed\n").unwrap();
        assert_eq!(index_tree(dir.path()).unwrap(), committed, "not staged yet");
        run_git(dir.path(), &["add", "a.txt"]);
        assert_ne!(index_tree(dir.path()).unwrap(), committed);
    }

    #[test]
    fn porcelain_parsing_skips_the_original_path_of_renames_and_copies() {
        let out = b" M b.txt\0R  c.txt\0a.txt\0C  x.txt\0w.txt\0?? d/\0";
        assert_eq!(parse_porcelain_z(out), ["b.txt", "c.txt", "x.txt", "d/"]);
        assert!(parse_porcelain_z(b"").is_empty());
    }
}
