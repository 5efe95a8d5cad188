//! The handoff note of `baton handoff offer`: read from a note file (TOML or JSON), then
//! completed by flags and by `--git`.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use baton_client::HandoffNote;

use super::args::OfferArgs;
use super::git::{self, GitState, DIRTY_FILES_MAX};
use super::table;

/// Longest note file read, in bytes: the cluster refuses notes above 64 KiB anyway, so a
/// larger file is a mistake (a log, a binary) to report rather than to send.
pub const NOTE_FILE_BYTES_MAX: u64 = 256 * 1024;

/// How many uncommitted file names the dirty-tree warning shows.
const DIRTY_NAMES_SHOWN: usize = 10;

pub use baton_client::note::{parse_note, NoteFormat};

/// Reads and parses the note file at `path` (`-` reads stdin).
pub fn read_note_file(path: &Path) -> anyhow::Result<HandoffNote> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin()
            .take(NOTE_FILE_BYTES_MAX + 1)
            .read_to_string(&mut text)
            .context("cannot read the note from stdin")?;
    } else {
        std::fs::File::open(path)
            .and_then(|file| file.take(NOTE_FILE_BYTES_MAX + 1).read_to_string(&mut text))
            .with_context(|| format!("cannot read the note file {}", path.display()))?;
    }
    if text.len() as u64 > NOTE_FILE_BYTES_MAX {
        bail!(
            "the note file {} is over {NOTE_FILE_BYTES_MAX} bytes: a note is at most 64 KiB",
            path.display()
        );
    }
    parse_note(&text, NoteFormat::of(path, &text)).with_context(|| format!("in {}", path.display()))
}

/// The note `baton handoff offer` sends, and the warnings to print about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltNote {
    pub note: HandoffNote,
    /// Lines for stderr, each worth the giver's attention (a dirty tree, no commit).
    pub warnings: Vec<String>,
}

/// Builds the note: the note file (if any), then each flag given overrides its field, and
/// `--changed-file` and `--fact` add to the lists; `git` (from `--git`) sets the commit,
/// the branch and the uncommitted files. `name_a_commit` says how to name a commit in the
/// caller's own terms (the CLI's flags, the MCP tool's arguments), for the warning of a note
/// that names none.
pub fn build(
    args: &OfferArgs,
    file_note: Option<HandoffNote>,
    git: Option<GitState>,
    name_a_commit: &str,
) -> BuiltNote {
    let mut note = file_note.unwrap_or_default();
    let mut warnings = Vec::new();
    let overrides = [
        (&mut note.commit, &args.commit),
        (&mut note.branch, &args.branch),
        (&mut note.done, &args.done),
        (&mut note.remaining, &args.remaining),
        (&mut note.blocked, &args.blocked),
        (&mut note.rebuild, &args.rebuild),
        (&mut note.first_step, &args.first_step),
    ];
    for (field, flag) in overrides {
        if let Some(value) = flag {
            field.clone_from(value);
        }
    }
    for file in &args.changed_files {
        if !note.changed_files.contains(file) {
            note.changed_files.push(file.clone());
        }
    }
    note.volatile_facts.extend(args.facts.iter().cloned());

    if let Some(git) = git {
        if !note.commit.is_empty() && note.commit != git.commit {
            warnings.push(format!(
                "the note file names commit {}, but the checkout is at {}: the note records {}",
                note.commit, git.commit, git.commit
            ));
        }
        note.commit = git.commit;
        note.branch = git.branch;
        if let Some(warning) = git::dirty_warning(&git.dirty_files, DIRTY_NAMES_SHOWN) {
            warnings.push(format!(
                "{warning}; they are listed in the note for the taker (commit what is \
                 yours first?)"
            ));
        }
        let mut dirty = git.dirty_files;
        if dirty.len() > DIRTY_FILES_MAX {
            warnings.push(format!(
                "the note lists only the first {DIRTY_FILES_MAX} of {} uncommitted files",
                dirty.len()
            ));
            dirty.truncate(DIRTY_FILES_MAX);
        }
        note.dirty_files = dirty;
    }

    if note.commit.is_empty() {
        warnings.push(format!(
            "the note names no commit ({name_a_commit}): the taker has no fixed point to \
             start from"
        ));
    }
    BuiltNote { note, warnings }
}

/// A handoff note for people, every line starting with `indent`. Empty text fields show as
/// `-` (nothing blocked is worth saying); the volatile facts are marked as claims.
pub fn note_text(note: &HandoffNote, indent: &str) -> String {
    if note.is_empty() {
        return format!("{indent}(the giver left no note)\n");
    }
    let text = |value: &str| {
        if value.trim().is_empty() {
            "-".to_owned()
        } else {
            value.to_owned()
        }
    };
    let files = |files: &[String]| {
        if files.is_empty() {
            "-".to_owned()
        } else {
            files.join("\n")
        }
    };
    let mut pairs = vec![
        ("commit", text(&note.commit)),
        ("branch", text(&note.branch)),
        ("done", text(&note.done)),
        ("remaining", text(&note.remaining)),
        ("blocked", text(&note.blocked)),
        ("rebuild", text(&note.rebuild)),
        ("first step", text(&note.first_step)),
        ("changed files", files(&note.changed_files)),
    ];
    if !note.dirty_files.is_empty() {
        pairs.push(("dirty files", files(&note.dirty_files)));
    }
    let mut out = table::render_pairs_multiline(&pairs, indent);
    if !note.dirty_files.is_empty() {
        out.push_str(&format!(
            "{indent}(the dirty files were uncommitted in the giver's checkout: find out whose \
             they are before tidying anything)\n"
        ));
    }
    if !note.volatile_facts.is_empty() {
        out.push_str(&format!(
            "{indent}volatile facts (needs verification: claimed when the note was written):\n"
        ));
        let rows: Vec<Vec<String>> = note
            .volatile_facts
            .iter()
            .map(|fact| {
                vec![
                    format!("{indent}  {}", fact.name),
                    format!("claimed {}", text(&fact.claimed_value)),
                    format!("check: {}", fact.check_command),
                ]
            })
            .collect();
        let table = table::render(&["", "", ""], &rows);
        // The header row of an unlabeled table is blank: skip it.
        for line in table.lines().skip(1) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command, HandoffCommand};
    use crate::handoff::NAME_A_COMMIT;
    use clap::Parser;

    /// The kept seed of the note parser's corpus (parsed in `baton_client::note`'s tests).
    const TOML_NOTE: &str = include_str!("../../client/fuzz/corpus/notes/seed-note.toml");

    fn offer_args(extra: &[&str]) -> OfferArgs {
        let mut argv = vec![
            "baton", "handoff", "offer", "tasks/x", "--token", "9", "--to", "bob",
        ];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Handoff {
                command: HandoffCommand::Offer(args),
            } => *args,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn note_files_are_read_from_disk_and_oversized_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("note.toml");
        std::fs::write(&path, TOML_NOTE).unwrap();
        assert_eq!(read_note_file(&path).unwrap().commit, "4f2a9c");
        let big = dir.path().join("big.json");
        std::fs::write(&big, "x".repeat(NOTE_FILE_BYTES_MAX as usize + 1)).unwrap();
        let error = format!("{:#}", read_note_file(&big).unwrap_err());
        assert!(error.contains("over"), "{error}");
        let missing = format!(
            "{:#}",
            read_note_file(&dir.path().join("nope")).unwrap_err()
        );
        assert!(missing.contains("cannot read the note file"), "{missing}");
    }

    #[test]
    fn flags_override_the_note_file_and_add_to_its_lists() {
        let file = parse_note(TOML_NOTE, NoteFormat::Toml).unwrap();
        let args = offer_args(&[
            "--done",
            "all of it",
            "--first-step",
            "read the runbook",
            "--changed-file",
            "src/cache.rs",
            "--changed-file",
            "src/new.rs",
            "--fact",
            "deployed=no::./is-deployed.sh",
        ]);
        let built = build(&args, Some(file), None, NAME_A_COMMIT);
        let note = built.note;
        assert_eq!(note.done, "all of it");
        assert_eq!(note.first_step, "read the runbook");
        assert_eq!(note.commit, "4f2a9c", "kept from the file");
        assert_eq!(
            note.changed_files,
            ["src/cache.rs", "docs/runbook.md", "src/new.rs"]
        );
        let names: Vec<&str> = note
            .volatile_facts
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(names, ["rows_left", "deployed"]);
        assert!(built.warnings.is_empty(), "{:?}", built.warnings);
    }

    #[test]
    fn a_note_without_a_commit_is_sent_with_a_warning() {
        let built = build(&offer_args(&["--done", "x"]), None, None, NAME_A_COMMIT);
        assert_eq!(built.note.done, "x");
        assert!(
            built.warnings[0].contains("names no commit (give --git or --commit)"),
            "{:?}",
            built.warnings
        );
    }

    #[test]
    fn git_state_sets_commit_branch_and_dirty_files_and_warns_about_a_dirty_tree() {
        let git = GitState {
            commit: "c0ffee".into(),
            branch: "main".into(),
            dirty_files: vec!["b.txt".into(), "new.txt".into()],
        };
        let file = HandoffNote {
            commit: "0ld".into(),
            ..HandoffNote::default()
        };
        let built = build(
            &offer_args(&["--git"]),
            Some(file),
            Some(git),
            NAME_A_COMMIT,
        );
        assert_eq!(built.note.commit, "c0ffee");
        assert_eq!(built.note.branch, "main");
        assert_eq!(built.note.dirty_files, ["b.txt", "new.txt"]);
        assert_eq!(built.warnings.len(), 2, "{:?}", built.warnings);
        assert!(built.warnings[0].contains("0ld"));
        assert!(built.warnings[1]
            .starts_with("the working tree has 2 uncommitted files: b.txt, new.txt"));
    }

    #[test]
    fn a_very_dirty_tree_is_listed_up_to_the_limit() {
        let git = GitState {
            commit: "c0ffee".into(),
            branch: String::new(),
            dirty_files: (0..DIRTY_FILES_MAX + 5).map(|i| format!("f{i}")).collect(),
        };
        let built = build(&offer_args(&["--git"]), None, Some(git), NAME_A_COMMIT);
        assert_eq!(built.note.dirty_files.len(), DIRTY_FILES_MAX);
        assert!(built.warnings.iter().any(|w| w.contains(&format!(
            "first {DIRTY_FILES_MAX} of {}",
            DIRTY_FILES_MAX + 5
        ))));
    }

    #[test]
    fn commit_and_git_flags_conflict() {
        let argv = [
            "baton", "handoff", "offer", "k", "--token", "1", "--to", "b", "--git", "--commit", "x",
        ];
        assert_eq!(Cli::try_parse_from(argv).unwrap_err().exit_code(), 2);
    }
}
