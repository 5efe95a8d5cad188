//! `baton hook`: the token as the authority over a case's files. A repository's
//! `.baton/hook.toml` maps path globs to key templates; the pre-commit hook refuses a
//! commit that touches a guarded file unless this session holds the file's key with a
//! current token, and the commit-msg hook names the stint in trailers.
//!
//! The check is a write, not a read: a linearizable probe finds the lease, and a renewal
//! with its token from this session proves both that the token is current and that this
//! session (client id, and principal when the cluster authenticates) may act as its holder.
//! A client id alone is public; the renewal is what a stranger using it cannot pass.
//!
//! It fails closed: no cluster reachable, no commit (exit 4), unless the user says
//! otherwise (`BATON_HOOK_ALLOW_OFFLINE=1`, or git's own `--no-verify`). A commit waits on
//! it, so it gives up on an unavailable cluster after [`HOOK_RETRY_DEADLINE`], not the
//! client's usual deadline; and when the pre-commit hook let a commit through offline, the
//! commit-msg hook does not wait for the cluster again ([`OFFLINE_MARK`]).
//!
//! The hooks run the `baton` on PATH, else the binary that wrote them ([`install`]).
//!
//! The command was `baton guard` before (a name it shared with the library's `LeaseGuard`);
//! this release still takes `baton guard`, `.baton/guard.toml` (when there is no
//! `.baton/hook.toml`), `BATON_GUARD_ALLOW_OFFLINE` and hooks written by it; the next does
//! not.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use baton_client::{Client, Error, LeaseInfo, ReadMode, RenewOutcome};
use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::Serialize;

use super::args::{HookCommand, OutputFormat};
use super::exit::Verdict;
use super::git::{git, git_bytes, index_tree};
use super::output::Rendered;

mod install;

/// Where the rules live, relative to the repository's top.
pub const HOOK_FILE: &str = ".baton/hook.toml";
/// Where they lived before (`baton guard`), read when there is no [`HOOK_FILE`]: for this
/// release only.
pub const HOOK_FILE_BEFORE: &str = ".baton/guard.toml";

/// Largest rules file read.
pub const HOOK_FILE_BYTES_MAX: u64 = 64 * 1024;

/// Most rules in a rules file.
pub const HOOK_RULES_MAX: usize = 256;

/// Lets a commit through unchecked when no node can be reached.
pub const ALLOW_OFFLINE_ENV: &str = "BATON_HOOK_ALLOW_OFFLINE";
/// Its name before (`baton guard`): honoured for this release only.
pub const ALLOW_OFFLINE_ENV_BEFORE: &str = "BATON_GUARD_ALLOW_OFFLINE";

/// How long each hook's requests keep trying an unavailable cluster (when `--timeout` is
/// not given) before the hook fails closed, or passes offline when allowed: a commit waits
/// on it, so it is far below the client's usual deadline, yet above one election at the
/// nodes' default timeouts (500-1000 ms, node/src/config.rs).
pub const HOOK_RETRY_DEADLINE: Duration = Duration::from_secs(2);
// Far below: even both hooks waiting it out in full stay under half the usual deadline.
const _: () =
    assert!(HOOK_RETRY_DEADLINE.as_millis() * 4 <= super::args::RETRY_TIMEOUT_DEFAULT.as_millis());

/// The file (in the git directory) by which the pre-commit hook, having let a commit through
/// offline, tells the commit-msg hook of the same commit not to wait for the cluster again.
/// It holds the tree of the index the check saw, so it speaks only for that commit; the
/// pre-commit hook removes it each time it runs, and the commit-msg hook when it reads it.
pub const OFFLINE_MARK: &str = "baton-hook-offline";

/// Most distinct keys one commit may touch; a larger commit is refused (split it).
pub const KEYS_CHECKED_MAX: usize = 256;

/// The first line of every hook baton writes; a hook without it is not baton's.
pub const HOOK_MARKER: &str = "# baton hook";
/// The marker of hooks `baton guard` wrote (this release still replaces them).
pub const HOOK_MARKER_BEFORE: &str = "# baton guard hook";

/// One rule: files matching `glob` belong to the key `template` names.
#[derive(Debug, Clone)]
pub struct Rule {
    pub template: String,
    matcher: GlobMatcher,
}

/// A rules file, parsed and checked.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub rules: Vec<Rule>,
}

/// The placeholders a key template may use.
pub const PLACEHOLDERS: &[&str] = &["path", "dir", "name", "stem", "ext"];

impl Rules {
    /// Parses a rules file's text: a `[paths]` table of glob = key template.
    pub fn parse(text: &str) -> anyhow::Result<Rules> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(default)]
            paths: BTreeMap<String, String>,
        }
        let file: File = toml::from_str(text).context("not a rules file of baton hook")?;
        if file.paths.len() > HOOK_RULES_MAX {
            bail!(
                "{} rules, more than the {HOOK_RULES_MAX} allowed",
                file.paths.len()
            );
        }
        let mut rules = Vec::new();
        for (glob, template) in file.paths {
            let matcher = GlobBuilder::new(&glob)
                .literal_separator(true)
                .build()
                .map(|g: Glob| g.compile_matcher())
                .with_context(|| format!("the glob {glob:?}"))?;
            check_template(&template).with_context(|| format!("the key of {glob:?}"))?;
            rules.push(Rule { template, matcher });
        }
        Ok(Rules { rules })
    }

    /// The keys `path` (relative to the repository's top, `/`-separated) belongs to: one
    /// per matching rule, in the file's order of globs, without repeats.
    pub fn keys_of(&self, path: &str) -> Vec<String> {
        let mut keys = Vec::new();
        for rule in &self.rules {
            if rule.matcher.is_match(path) {
                let key = expand(&rule.template, path);
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }
}

/// A template names only known placeholders, closes every brace, and is not empty.
fn check_template(template: &str) -> anyhow::Result<()> {
    if template.trim().is_empty() {
        bail!("is empty");
    }
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            bail!("{template:?} has a `{{` without its `}}`");
        };
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            bail!(
                "{template:?} names {{{name}}}; the placeholders are {}",
                PLACEHOLDERS
                    .iter()
                    .map(|p| format!("{{{p}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

/// Fills a template's placeholders from `path`.
pub fn expand(template: &str, path: &str) -> String {
    let (dir, name) = match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    };
    let (stem, ext) = match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], &name[i + 1..]),
        _ => (name, ""),
    };
    template
        .replace("{path}", path)
        .replace("{dir}", dir)
        .replace("{name}", name)
        .replace("{stem}", stem)
        .replace("{ext}", ext)
}

/// How one key stands for this session.
#[derive(Debug, Clone, Serialize)]
pub struct KeyCheck {
    pub key: String,
    /// The guarded files of the commit that belong to it.
    pub paths: Vec<String>,
    /// `held` (this session holds it, token current), `free` (nobody holds it), `other`
    /// (another session holds it), `refused` (the cluster refused this session's renewal:
    /// the token or the principal is not the holder's).
    pub verdict: String,
    /// The lease on the key, when someone holds it.
    pub lease: Option<LeaseInfo>,
    /// The cluster's words, for `refused`.
    pub detail: String,
}

impl KeyCheck {
    fn passed(&self) -> bool {
        self.verdict == "held"
    }

    /// The line for people: which file, which key, who holds it, what to do.
    fn line(&self) -> String {
        let files = self.paths.join(", ");
        match (self.verdict.as_str(), &self.lease) {
            ("held", Some(lease)) => {
                format!("{files}: {} is yours (token {})", self.key, lease.token)
            }
            ("other", Some(lease)) => format!(
                "{files} belongs to {}, held by {} (client {}) with token {} since {}; stand \
                 down or ask for a handoff",
                self.key,
                lease.holder_name,
                lease.holder_client_id,
                lease.token,
                super::output::utc(lease.held_since_unix_ms)
            ),
            ("refused", _) => format!(
                "{files} belongs to {}: this session may not act as its holder: {}",
                self.key, self.detail
            ),
            _ => format!(
                "{files} belongs to {}, which nobody holds: claim it first (baton claim {})",
                self.key, self.key
            ),
        }
    }
}

/// Runs one `baton hook` command. `client_id_given`: the user named the session
/// (--client-id / BATON_CLIENT_ID); a random id holds nothing, so without one every guarded
/// key is refused.
pub async fn run(
    command: HookCommand,
    client: &Client,
    client_id_given: bool,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    let top = repo_top(Path::new("."))?;
    match command {
        HookCommand::Install { force } => install::install(&top, force, format),
        HookCommand::Check {
            staged,
            paths,
            allow_offline,
        } => {
            if staged {
                forget_offline(&top);
            }
            let paths = if staged { staged_paths(&top)? } else { paths };
            let rules = load_rules(&top)?;
            let wanted = keys_for(&rules, &paths)?;
            if wanted.is_empty() {
                // A commit of no guarded file is none of the hook's business: it says nothing.
                // Asked about given files, it answers.
                let text = if staged { "" } else { "no guarded files\n" };
                return Ok(rendered(format, text, Vec::new(), Verdict::Ok));
            }
            let checks = match check_keys(client, &wanted, client_id_given).await {
                Ok(checks) => checks,
                Err(error) => {
                    let allowed = allowed_by(allow_offline);
                    if allowed.is_some() && staged && matches!(error, Error::Unavailable { .. }) {
                        mark_offline(&top);
                    }
                    return offline(error, allowed, Hook::PreCommit, client, format);
                }
            };
            Ok(report(checks, client_id_given, format))
        }
        HookCommand::Trailers {
            msg_file,
            allow_offline,
        } => {
            let allowed = allowed_by(allow_offline);
            let marked = take_offline_mark(&top);
            let rules = load_rules(&top)?;
            let wanted = keys_for(&rules, &staged_paths(&top)?)?;
            if wanted.is_empty() {
                return Ok(rendered(format, "", Vec::new(), Verdict::Ok));
            }
            if let (Some(name), true) = (allowed, marked) {
                eprintln!(
                    "warning: baton hook adds no Baton trailers: the pre-commit hook found the \
                     cluster unreachable and {name} is set"
                );
                return Ok(rendered(format, "", Vec::new(), Verdict::Ok));
            }
            let checks = match check_keys(client, &wanted, client_id_given).await {
                Ok(checks) => checks,
                Err(error) => return offline(error, allowed, Hook::CommitMsg, client, format),
            };
            if checks.iter().any(|c| !c.passed()) {
                return Ok(report(checks, client_id_given, format));
            }
            add_trailers(&top, &msg_file, &checks)?;
            Ok(rendered(format, "", checks, Verdict::Ok))
        }
    }
}

/// The keys the given files belong to, each with its files, in first-seen order.
fn keys_for(rules: &Rules, paths: &[String]) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let mut wanted: Vec<(String, Vec<String>)> = Vec::new();
    for path in paths {
        let path = path.trim_start_matches("./");
        for key in rules.keys_of(path) {
            match wanted.iter_mut().find(|(k, _)| *k == key) {
                Some((_, files)) => files.push(path.to_owned()),
                None => wanted.push((key, vec![path.to_owned()])),
            }
        }
    }
    if wanted.len() > KEYS_CHECKED_MAX {
        bail!(
            "the commit touches files of {} keys, more than the {KEYS_CHECKED_MAX} one check \
             takes: split it",
            wanted.len()
        );
    }
    Ok(wanted)
}

/// Checks each key: probe, then (when this session's client id holds it) a renewal that
/// proves the session and the token. An error means the cluster could not be asked.
async fn check_keys(
    client: &Client,
    wanted: &[(String, Vec<String>)],
    client_id_given: bool,
) -> Result<Vec<KeyCheck>, Error> {
    let mut checks = Vec::new();
    for (key, paths) in wanted {
        let probe = client.probe(key, ReadMode::Linearizable).await?;
        let mut check = KeyCheck {
            key: key.clone(),
            paths: paths.clone(),
            verdict: "free".into(),
            lease: probe.lease.clone(),
            detail: String::new(),
        };
        if let Some(lease) = &probe.lease {
            check.verdict = "other".into();
            if client_id_given && lease.holder_client_id == client.client_id() {
                match client.renew(key, lease.token).await {
                    Ok(RenewOutcome::Renewed(grant)) => {
                        check.verdict = "held".into();
                        check.lease = Some(grant.lease);
                    }
                    Ok(RenewOutcome::Lost { current }) => check.lease = current,
                    Err(Error::Refused(refusal)) => {
                        check.verdict = "refused".into();
                        check.detail = refusal.message.clone();
                    }
                    // Another principal presenting the holder's (public) client id.
                    Err(Error::PermissionDenied(why) | Error::Unauthenticated(why)) => {
                        check.verdict = "refused".into();
                        check.detail = why;
                    }
                    Err(other) => return Err(other),
                }
            }
        }
        checks.push(check);
    }
    Ok(checks)
}

/// The verdict of a check: pass when every key is held; else exit 3 with a line per key.
fn report(checks: Vec<KeyCheck>, client_id_given: bool, format: OutputFormat) -> Rendered {
    let refused = checks.iter().any(|c| !c.passed());
    let mut text: String = checks.iter().map(|c| format!("{}\n", c.line())).collect();
    if refused && !client_id_given {
        text.push_str(
            "BATON_CLIENT_ID is not set: this commit acts as no session. Set it to the id you \
             claimed with (an MCP session's id is in its claim answers and my_claims)\n",
        );
    }
    if refused {
        let mut out = rendered(format, "", checks, Verdict::StandDown);
        if format == OutputFormat::Table {
            out.error_line = Some(format!(
                "commit refused by baton hook:\n{}",
                text.trim_end()
            ));
        }
        out
    } else {
        rendered(format, &text, checks, Verdict::Ok)
    }
}

fn rendered(format: OutputFormat, text: &str, checks: Vec<KeyCheck>, verdict: Verdict) -> Rendered {
    #[derive(Serialize)]
    struct Json {
        outcome: &'static str,
        keys: Vec<KeyCheck>,
    }
    let outcome = if verdict == Verdict::Ok {
        "pass"
    } else {
        "refused"
    };
    let json = Json {
        outcome,
        keys: checks,
    };
    Rendered::new(format, json, text.to_owned(), verdict)
}

/// Which hook asks: what passing offline means differs.
#[derive(Debug, Clone, Copy)]
enum Hook {
    /// `hook check`: the commit goes through unchecked.
    PreCommit,
    /// `hook trailers`: the message gets no trailers.
    CommitMsg,
}

/// The check could not be made. No cluster: refuse (exit 4), or when `allowed` (by the
/// variable it names) pass and say so; either way naming the endpoints tried. Any other
/// error (a bad key, a denied read) refuses with its reason.
fn offline(
    error: Error,
    allowed: Option<&str>,
    hook: Hook,
    client: &Client,
    format: OutputFormat,
) -> anyhow::Result<Rendered> {
    if !matches!(error, Error::Unavailable { .. }) {
        let text = format!("commit refused: baton hook could not check the keys: {error}");
        return Err(anyhow::Error::new(error).context(text));
    }
    let at = client.endpoints().join(", ");
    if let Some(name) = allowed {
        let then = match hook {
            Hook::PreCommit => "the commit goes through unchecked",
            Hook::CommitMsg => "the message gets no Baton trailers",
        };
        eprintln!(
            "warning: baton hook could not reach the cluster at {at} ({error}); {then} \
             because {name} is set"
        );
        return Ok(rendered(format, "", Vec::new(), Verdict::Ok));
    }
    let text = format!(
        "commit refused: baton hook cannot reach the cluster at {at} to check the guarded \
         files' keys, and it fails closed ({error}). Start a node or set BATON_ENDPOINTS to \
         a running cluster; to commit without the check, set {ALLOW_OFFLINE_ENV}=1 or commit \
         with git commit --no-verify"
    );
    Err(anyhow::Error::new(error).context(text))
}

/// Where [`OFFLINE_MARK`] lives: in the git directory (a worktree's own).
fn offline_mark_path(top: &Path) -> Option<PathBuf> {
    let path = git(top, &["rev-parse", "--git-path", OFFLINE_MARK]).ok()?;
    Some(top.join(path))
}

/// Leaves [`OFFLINE_MARK`] for this commit's commit-msg hook. Best effort: without it, that
/// hook only waits for the cluster again.
fn mark_offline(top: &Path) {
    if let (Some(path), Ok(tree)) = (offline_mark_path(top), index_tree(top)) {
        let _ = std::fs::write(path, tree);
    }
}

/// Removes a [`OFFLINE_MARK`] left by an earlier commit.
fn forget_offline(top: &Path) {
    if let Some(path) = offline_mark_path(top) {
        let _ = std::fs::remove_file(path);
    }
}

/// Whether the pre-commit hook of this commit (the same index) let it through offline;
/// removes the mark either way.
fn take_offline_mark(top: &Path) -> bool {
    let Some(path) = offline_mark_path(top) else {
        return false;
    };
    let Ok(marked) = std::fs::read_to_string(&path) else {
        return false;
    };
    let _ = std::fs::remove_file(&path);
    index_tree(top).is_ok_and(|tree| tree == marked.trim())
}

/// The repository's top directory.
fn repo_top(dir: &Path) -> anyhow::Result<PathBuf> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])
        .context("baton hook works inside a git repository")?;
    Ok(PathBuf::from(top.trim()))
}

/// The rules file's rules ([`HOOK_FILE`], else [`HOOK_FILE_BEFORE`]); none when there is
/// neither.
fn load_rules(top: &Path) -> anyhow::Result<Rules> {
    let path = rules_path(top);
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Rules::default()),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    if meta.len() > HOOK_FILE_BYTES_MAX {
        bail!(
            "{} is {} bytes, more than the {HOOK_FILE_BYTES_MAX} allowed",
            path.display(),
            meta.len()
        );
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Rules::parse(&text).with_context(|| format!("in {}", path.display()))
}

/// The paths the commit would change: added, modified, deleted, both sides of a rename.
fn staged_paths(top: &Path) -> anyhow::Result<Vec<String>> {
    let out = git_bytes(
        top,
        &["diff", "--cached", "--name-only", "--no-renames", "-z"],
    )?;
    Ok(String::from_utf8_lossy(&out)
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Appends the trailers naming each key's stint to the message file.
fn add_trailers(top: &Path, msg_file: &Path, checks: &[KeyCheck]) -> anyhow::Result<()> {
    let msg_file = if msg_file.is_absolute() {
        msg_file.to_owned()
    } else {
        std::env::current_dir()?.join(msg_file)
    };
    let mut args: Vec<String> = vec![
        "interpret-trailers".into(),
        "--in-place".into(),
        "--if-exists".into(),
        "addIfDifferent".into(),
    ];
    for check in checks {
        let Some(lease) = &check.lease else { continue };
        for trailer in [
            format!("Baton-Key: {}", check.key),
            format!("Baton-Token: {}", lease.token),
            format!("Baton-Holder: {}", lease.holder_name),
        ] {
            args.push("--trailer".into());
            args.push(trailer);
        }
    }
    args.push(msg_file.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    git(top, &args)?;
    Ok(())
}

/// [`HOOK_FILE`], or [`HOOK_FILE_BEFORE`] when only that one exists (this release only).
fn rules_path(top: &Path) -> PathBuf {
    let path = top.join(HOOK_FILE);
    let before = top.join(HOOK_FILE_BEFORE);
    if !path.exists() && before.exists() {
        return before;
    }
    path
}

/// What lets a commit through offline, if anything: the command's `--allow-offline` (which
/// [`ALLOW_OFFLINE_ENV`] sets), else [`ALLOW_OFFLINE_ENV_BEFORE`] (this release only).
fn allowed_by(allow_offline: bool) -> Option<&'static str> {
    if allow_offline {
        Some(ALLOW_OFFLINE_ENV)
    } else if std::env::var(ALLOW_OFFLINE_ENV_BEFORE).is_ok_and(|v| v == "1") {
        Some(ALLOW_OFFLINE_ENV_BEFORE)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[paths]
"docs/incidents/*.md" = "incidents/{stem}"
"STATUS.md" = "status"
"src/**/*.rs" = "code/{dir}/{name}"
"#;

    #[test]
    fn globs_map_files_to_keys_with_placeholders() {
        let rules = Rules::parse(FILE).unwrap();
        assert_eq!(rules.keys_of("docs/incidents/42.md"), ["incidents/42"]);
        assert_eq!(rules.keys_of("STATUS.md"), ["status"]);
        assert_eq!(rules.keys_of("src/a/b.rs"), ["code/src/a/b.rs"]);
        // `*` stays within its directory; other files are not guarded.
        assert!(rules.keys_of("docs/incidents/old/1.md").is_empty());
        assert!(rules.keys_of("README.md").is_empty());
        assert!(rules.keys_of("docs/STATUS.md").is_empty());
    }

    #[test]
    fn expand_fills_every_placeholder() {
        assert_eq!(
            expand("{path}|{dir}|{name}|{stem}|{ext}", "a/b/c.tar.gz"),
            "a/b/c.tar.gz|a/b|c.tar.gz|c.tar|gz"
        );
        assert_eq!(expand("{dir}|{stem}|{ext}", "README"), "|README|");
        assert_eq!(expand("{stem}", "a/.env"), ".env");
    }

    #[test]
    fn a_file_matching_two_rules_needs_both_keys() {
        let rules =
            Rules::parse("[paths]\n\"docs/*.md\" = \"docs\"\n\"docs/a.md\" = \"a\"\n").unwrap();
        let mut keys = rules.keys_of("docs/a.md");
        keys.sort();
        assert_eq!(keys, ["a", "docs"]);
        let wanted = keys_for(&rules, &["docs/a.md".into(), "./docs/b.md".into()]).unwrap();
        assert_eq!(
            wanted,
            [
                (
                    "docs".to_owned(),
                    vec!["docs/a.md".to_owned(), "docs/b.md".to_owned()]
                ),
                ("a".to_owned(), vec!["docs/a.md".to_owned()]),
            ]
        );
    }

    #[test]
    fn bad_guard_files_are_refused_with_the_reason() {
        let unknown = Rules::parse("[paths]\n\"*.md\" = \"k/{base}\"\n").unwrap_err();
        assert!(format!("{unknown:#}").contains("{base}"), "{unknown:#}");
        let unclosed = Rules::parse("[paths]\n\"*.md\" = \"k/{stem\"\n").unwrap_err();
        assert!(
            format!("{unclosed:#}").contains("without its"),
            "{unclosed:#}"
        );
        let glob = Rules::parse("[paths]\n\"a[\" = \"k\"\n").unwrap_err();
        assert!(format!("{glob:#}").contains("the glob"), "{glob:#}");
        let empty = Rules::parse("[paths]\n\"*.md\" = \" \"\n").unwrap_err();
        assert!(format!("{empty:#}").contains("is empty"), "{empty:#}");
        let other = Rules::parse("[path]\n\"*.md\" = \"k\"\n").unwrap_err();
        assert!(
            format!("{other:#}").contains("not a rules file of baton hook"),
            "{other:#}"
        );
        let many: String = (0..=HOOK_RULES_MAX)
            .map(|i| format!("\"f{i}\" = \"k\"\n"))
            .collect();
        let too_many = Rules::parse(&format!("[paths]\n{many}")).unwrap_err();
        assert!(
            format!("{too_many:#}").contains("rules, more than"),
            "{too_many:#}"
        );
    }

    #[test]
    fn the_offline_mark_speaks_for_the_index_it_was_left_for_and_once() {
        let repo = crate::git::testing::repo();
        let top = repo.path();
        assert!(!take_offline_mark(top), "no mark yet");
        mark_offline(top);
        assert!(take_offline_mark(top));
        assert!(!take_offline_mark(top), "taken once");
        // Left for another index (a later commit): not this one's, and removed.
        mark_offline(top);
        std::fs::write(top.join("a.txt"), "a changed\n").unwrap();
        crate::git::testing::git(top, &["add", "a.txt"]);
        assert!(!take_offline_mark(top));
        assert!(!top.join(".git").join(OFFLINE_MARK).exists());
        // The pre-commit hook forgets an old mark before it checks.
        mark_offline(top);
        forget_offline(top);
        assert!(!take_offline_mark(top));
    }

    #[test]
    fn the_help_states_the_hooks_deadline() {
        use clap::CommandFactory;
        let command = crate::args::Cli::command();
        let help = command
            .find_subcommand("hook")
            .and_then(|hook| hook.get_after_help())
            .unwrap()
            .to_string();
        let deadline = humantime::format_duration(HOOK_RETRY_DEADLINE).to_string();
        assert!(help.contains(&format!("after {deadline} rather")), "{help}");
    }

    #[test]
    fn a_commit_of_too_many_keys_is_refused() {
        let rules = Rules::parse("[paths]\n\"*.md\" = \"k/{stem}\"\n").unwrap();
        let paths: Vec<String> = (0..=KEYS_CHECKED_MAX).map(|i| format!("{i}.md")).collect();
        let error = keys_for(&rules, &paths).unwrap_err();
        assert!(format!("{error}").contains("split it"), "{error}");
    }
}
