//! Every console block in the README and `docs/` is checked (the one exception, the
//! README's `baton-node dev` banner, is compared with the real one by `node/tests/dev.rs`).
//!
//! Every checked console block in the README and `docs/` is a test: its commands run
//! against a fresh 3-node cluster, in order, and what they print must be what the block
//! shows. A block is checked when the line before its ```` ```console ```` fence is
//! `<!-- transcript -->`.
//!
//! How a block is read:
//! - `$ CMD` runs `CMD` with `sh -c` (stdout and stderr together, as a terminal shows them);
//!   a line ending in `\` continues on the next. `# exit N` at the end of the command line
//!   is the exit code it must give (0 when absent).
//! - The lines up to the next `$ ` line are its output (blank lines at the end of a step
//!   do not count).
//! - `$ export NAME=VALUE` sets NAME for the block's later commands (each command runs in
//!   a shell of its own).
//! - `# ... meanwhile CMD` (a line right after a command) runs CMD while the command is
//!   still running, once it has printed its first line or run for two seconds without one
//!   (a release during a `--wait`, a revoke during a `baton run`).
//!
//! Placeholders: before comparing, both sides have these replaced, so that what differs
//! from run to run does not fail the test and everything else must match:
//! - `2026-11-29T11:10:20Z` (any UTC time) → `<TIME>`;
//! - `in 56s`, `in 9m59s` (time left) → `in <LEFT>`;
//! - 13-digit Unix milliseconds and the values of `remaining_ms`, `safe_deadline_in_ms` →
//!   `<MS>`;
//! - 32-hex-digit client ids → `<ID>`; 40-hex-digit commits → `<COMMIT>`;
//! - runs of spaces → one space (table columns widen with the values).
//!
//! And where a block shows `…`, any word stands there: for the few values no placeholder
//! fixes, like a token granted after a `--wait` (every grant and renewal is a Raft entry,
//! and tokens are entry indexes, so how many came before depends on timing).
//!
//! To write or refresh a block, `BATON_TRANSCRIPT_SHOW=1 cargo test -p baton-cli --test
//! transcripts -- --nocapture` prints what each command printed instead of comparing.
//!
//! The cluster's endpoints are shown as `127.0.0.1:7001`, `:7002`, `:7003` (the dev
//! cluster's), whatever ports the test's nodes got. Commands run in a scratch directory
//! with `baton` first on the `PATH`, `BATON_ENDPOINTS` set to the cluster, and no
//! `BATON_CLIENT_ID` or `BATON_HOLDER` of the caller's (and a git author, for a block that
//! makes a scratch checkout).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{cli_bin, Cluster};

/// Checked blocks there must be at least (the README's walkthrough; in docs/ cluster status,
/// Sessions, handoff, board, watch and guard).
const CHECKED_BLOCKS_MIN: usize = 7;

/// How long a command that prints nothing runs before its `meanwhile` command.
const MEANWHILE_AFTER: Duration = Duration::from_secs(2);

/// One command of a transcript and what it must print.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    command: String,
    exit: i32,
    meanwhile: Option<String>,
    output: Vec<String>,
}

/// The checked blocks of one Markdown file: (first line number, steps).
fn checked_blocks(text: &str) -> Vec<(usize, Vec<Step>)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "<!-- transcript -->" && lines.get(i + 1) == Some(&"```console") {
            let start = i + 2;
            let end = (start..lines.len())
                .find(|&j| lines[j] == "```")
                .expect("an unclosed console block");
            blocks.push((start + 1, steps(&lines[start..end])));
            i = end;
        }
        i += 1;
    }
    blocks
}

fn steps(lines: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(first) = line.strip_prefix("$ ") {
            let mut command = first.to_owned();
            while command.ends_with('\\') && i + 1 < lines.len() {
                command.pop();
                command = format!("{} ", command.trim_end());
                i += 1;
                command.push_str(lines[i].trim_start());
            }
            let (command, exit) = split_exit(&command);
            steps.push(Step {
                command,
                exit,
                meanwhile: None,
                output: Vec::new(),
            });
        } else if let Some(cmd) = line.strip_prefix("# ... meanwhile ") {
            let step = steps.last_mut().expect("meanwhile before any command");
            step.meanwhile = Some(cmd.to_owned());
        } else if let Some(step) = steps.last_mut() {
            step.output.push(line.to_owned());
        }
        i += 1;
    }
    for step in &mut steps {
        while step.output.last().is_some_and(|l| l.trim().is_empty()) {
            step.output.pop();
        }
    }
    steps
}

/// `CMD   # exit 3, runs nothing` → (`CMD`, 3); a comment without `exit N` is dropped.
fn split_exit(command: &str) -> (String, i32) {
    match command.rfind("  # ") {
        Some(at) => {
            let comment = command[at + 4..].trim();
            let exit = comment
                .strip_prefix("exit ")
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            (command[..at].trim_end().to_owned(), exit)
        }
        None => (command.trim_end().to_owned(), 0),
    }
}

/// Replaces what differs from run to run with the placeholders, and runs of spaces with
/// one.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut line = line.to_owned();
        line = replace_re(&line, iso_time, "<TIME>");
        line = replace_re(&line, time_left, "in <LEFT>");
        line = replace_re(&line, json_ms, "");
        line = replace_re(&line, |s| hex_run(s, 40), "<COMMIT>");
        line = replace_re(&line, |s| hex_run(s, 32), "<ID>");
        line = replace_re(&line, |s| digit_run(s, 13), "<MS>");
        let collapsed = line
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>();
        out.push_str(&collapsed.join(" "));
        out.push('\n');
    }
    out.trim_end().to_owned()
}

/// Replaces every match of `find` (which returns the length of a match at the start of its
/// input, if any) with `with`; a JSON milliseconds value keeps its key.
fn replace_re(line: &str, find: impl Fn(&str) -> Option<(usize, String)>, with: &str) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < line.len() {
        if !line.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let at_word_start = i == 0 || !line.as_bytes()[i - 1].is_ascii_alphanumeric();
        match find(&line[i..]).filter(|_| at_word_start) {
            Some((len, keep)) => {
                out.push_str(&keep);
                out.push_str(with);
                i += len;
            }
            None => {
                let c = line[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// `2026-11-29T11:10:20Z` (optionally with fractional seconds).
fn iso_time(s: &str) -> Option<(usize, String)> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    if b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
    {
        let mut end = 19;
        if b.get(end) == Some(&b'.') {
            end += 1;
            while b.get(end).is_some_and(u8::is_ascii_digit) {
                end += 1;
            }
        }
        if b.get(end) == Some(&b'Z') {
            return Some((end + 1, String::new()));
        }
    }
    None
}

/// `in 56s`, `in 9m59s`, `in 1h0m`, `in 850ms`.
fn time_left(s: &str) -> Option<(usize, String)> {
    let rest = s.strip_prefix("in ")?;
    let mut end = 0;
    let b = rest.as_bytes();
    let mut any = false;
    loop {
        let start = end;
        while b.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        if end == start {
            break;
        }
        let unit = if rest[end..].starts_with("ms") {
            2
        } else if matches!(b.get(end), Some(b'h' | b'm' | b's')) {
            1
        } else {
            return None;
        };
        end += unit;
        any = true;
    }
    any.then(|| (3 + end, String::new()))
}

/// `"remaining_ms":59905` and the like: the key kept, the value → `<MS>`.
fn json_ms(s: &str) -> Option<(usize, String)> {
    for key in ["\"remaining_ms\":", "\"safe_deadline_in_ms\":"] {
        if let Some(rest) = s.strip_prefix(key) {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                return Some((key.len() + digits, format!("{key}<MS>")));
            }
        }
    }
    None
}

fn hex_run(s: &str, len: usize) -> Option<(usize, String)> {
    let b = s.as_bytes();
    let run = b.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    let has_letter = b[..run.min(b.len())]
        .iter()
        .any(|c| c.is_ascii_alphabetic());
    (run == len && has_letter).then(|| (len, String::new()))
}

fn digit_run(s: &str, len: usize) -> Option<(usize, String)> {
    let run = s.bytes().take_while(u8::is_ascii_digit).count();
    (run == len).then(|| (len, String::new()))
}

/// `got` is `want`, line for line, where each `…` in `want` stands for one or more
/// characters other than a space.
fn matches(want: &str, got: &str) -> bool {
    let (want, got): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| line_matches(w, g))
}

fn line_matches(want: &str, got: &str) -> bool {
    let mut parts = want.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    for part in parts {
        // The wildcard takes at least one non-space character, then `part` must follow.
        let word = rest.find(' ').unwrap_or(rest.len());
        let found = (1..=word)
            .rev()
            .find(|&n| rest.is_char_boundary(n) && rest[n..].starts_with(part));
        match found {
            Some(n) => rest = &rest[n + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Runs one step in `dir`; returns (exit code, output as shown, endpoints mapped).
fn run_step(
    step: &Step,
    cluster: &Cluster,
    dir: &Path,
    bin_dir: &Path,
    exported: &[(String, String)],
) -> (i32, String) {
    let shell = |command: &str| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("exec 2>&1; {command}"))
            .current_dir(dir)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin_dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("BATON_ENDPOINTS", cluster.endpoints.join(","))
            .env_remove("BATON_CLIENT_ID")
            .env_remove("BATON_HOLDER")
            .env_remove("BATON_LOG")
            // A block may make a scratch checkout (`handoff offer --git`).
            .env("GIT_AUTHOR_NAME", "agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.com")
            .env("GIT_COMMITTER_NAME", "agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.com")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // After the removals: the block's own exports win.
            .envs(exported.iter().map(|(k, v)| (k, v)));
        c
    };
    let mut child = shell(&step.command).spawn().unwrap();
    // Read the output as it comes, saying when the first line is there.
    let mut stdout = child.stdout.take().unwrap();
    let (first_line, said) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut stdout, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    all.extend_from_slice(&buf[..n]);
                    if all.contains(&b'\n') {
                        let _ = first_line.send(());
                    }
                }
            }
        }
        all
    });
    if let Some(meanwhile) = &step.meanwhile {
        // Once the command is under way: it printed its first line (a `--wait` says whom it
        // waits for), or it has run for MEANWHILE_AFTER without printing (`baton run`).
        let _ = said.recv_timeout(MEANWHILE_AFTER);
        let out = shell(meanwhile).output().unwrap();
        assert!(out.status.success(), "meanwhile {meanwhile:?}: {out:?}");
    }
    let status = child.wait().unwrap();
    let output = reader.join().unwrap();
    let mut text = String::from_utf8_lossy(&output).into_owned();
    for (i, endpoint) in cluster.endpoints.iter().enumerate() {
        text = text.replace(endpoint, &format!("127.0.0.1:{}", 7001 + i));
    }
    (status.code().unwrap_or(-1), text)
}

/// Runs every checked block of `file`, each on a fresh cluster.
async fn check_file(file: &Path) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    let bin_dir: PathBuf = cli_bin().parent().unwrap().to_owned();
    let blocks = checked_blocks(&text);
    for (line, steps) in &blocks {
        let cluster = Cluster::start(3).await;
        let dir = tempfile::tempdir().unwrap();
        let mut exported: Vec<(String, String)> = Vec::new();
        for step in steps {
            if let Some(assignment) = step.command.strip_prefix("export ") {
                let (name, value) = assignment
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{}:{line}: export without =", file.display()));
                exported.push((name.to_owned(), value.to_owned()));
                continue;
            }
            let (exit, actual) = run_step(step, &cluster, dir.path(), &bin_dir, &exported);
            let (want, got) = (normalize(&step.output.join("\n")), normalize(&actual));
            if std::env::var_os("BATON_TRANSCRIPT_SHOW").is_some() {
                // For writing a block: what each command printed, to paste (then re-run).
                eprintln!("$ {}   # exit {exit}\n{actual}", step.command);
                continue;
            }
            assert!(
                matches(&want, &got) && exit == step.exit,
                "{}:{line}: `{}`\nexit {exit} (the block says {})\n--- the block shows (normalized)\n{want}\n--- it printed (normalized)\n{got}\n--- it printed\n{actual}",
                file.display(),
                step.command,
                step.exit,
            );
        }
    }
    blocks.len()
}

#[tokio::test]
async fn every_checked_transcript_in_the_readme_and_docs_reproduces() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut checked = 0;
    for file in &files {
        checked += check_file(file).await;
    }
    // The README's and the docs' blocks at least (CHECKED_BLOCKS_MIN): a marker lost in an edit must not
    // pass silently.
    assert!(
        checked >= CHECKED_BLOCKS_MIN,
        "{checked} checked transcripts in {files:?}, fewer than {CHECKED_BLOCKS_MIN}"
    );
}

#[test]
fn blocks_parse_into_commands_exit_codes_meanwhiles_and_outputs() {
    let text = "intro\n<!-- transcript -->\n```console\n$ baton claim k --ttl 60s\ngranted k\n\n$ baton claim k  # exit 3, held\nheld\n$ baton run k -- \\\n    sleep 9   # exit 3\n# ... meanwhile baton revoke k --reason r\nlost\n```\n```console\n$ not checked\n```\n";
    let blocks = checked_blocks(text);
    assert_eq!(blocks.len(), 1);
    let steps = &blocks[0].1;
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(
        (steps[0].command.as_str(), steps[0].exit),
        ("baton claim k --ttl 60s", 0)
    );
    assert_eq!(steps[0].output, ["granted k"]);
    assert_eq!(
        (steps[1].command.as_str(), steps[1].exit),
        ("baton claim k", 3)
    );
    assert_eq!(steps[2].command, "baton run k -- sleep 9");
    assert_eq!(steps[2].exit, 3);
    assert_eq!(
        steps[2].meanwhile.as_deref(),
        Some("baton revoke k --reason r")
    );
    assert_eq!(steps[2].output, ["lost"]);
}

#[test]
fn placeholders_hide_what_varies_and_nothing_else() {
    assert_eq!(
        normalize("since   2026-11-29T11:10:20Z  free    in 9m59s"),
        "since <TIME> free in <LEFT>"
    );
    assert_eq!(
        normalize(r#"{"remaining_ms":59905,"ttl_ms":60000,"held_since_unix_ms":1795948738137}"#),
        r#"{"remaining_ms":<MS>,"ttl_ms":60000,"held_since_unix_ms":<MS>}"#
    );
    assert_eq!(
        normalize("client 5276a9222c3e58624b0f8aa56cd178fe commit ae2df9b0adacb0cdf10140c89bd456e67651d39e"),
        "client <ID> commit <COMMIT>"
    );
    assert!(matches("granted k\ntoken …", "granted k\ntoken 19"));
    assert!(matches(
        "lost k (token …): revoked",
        "lost k (token 7): revoked"
    ));
    assert!(!matches("token …", "token "));
    assert!(!matches("token … x", "token 1 2 x"));
    assert!(!matches("a\nb", "a"));
    // Tokens, counts and words stay as they are.
    assert_eq!(normalize("token          2"), "token 2");
    assert_ne!(normalize("token 2"), normalize("token 3"));
    assert_eq!(
        normalize("safe deadline  in 56s"),
        "safe deadline in <LEFT>"
    );
}
