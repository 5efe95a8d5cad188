//! `baton hook install`: the two hook scripts, written where git keeps its hooks.

use std::path::Path;

use anyhow::{bail, Context};

use super::{rendered, rules_path, HOOK_FILE, HOOK_MARKER, HOOK_MARKER_BEFORE};
use crate::args::OutputFormat;
use crate::exit::Verdict;
use crate::git::git;
use crate::output::Rendered;

/// Writes the two hooks.
pub(super) fn install(top: &Path, force: bool, format: OutputFormat) -> anyhow::Result<Rendered> {
    let hooks = git(top, &["rev-parse", "--git-path", "hooks"])?;
    let hooks = top.join(hooks.trim());
    std::fs::create_dir_all(&hooks).with_context(|| format!("creating {}", hooks.display()))?;
    let exe = std::env::current_exe().context("cannot find this baton binary")?;
    let scripts = [
        (
            "pre-commit",
            hook_script(
                "refuses a commit of a guarded file whose key this session does not hold",
                "hook check --staged",
                &exe,
                true,
            ),
        ),
        (
            "commit-msg",
            hook_script(
                "names the stint (key, token, holder) in trailers",
                "hook trailers \"$1\"",
                &exe,
                false,
            ),
        ),
    ];
    for (name, _) in &scripts {
        let path = hooks.join(name);
        if let Ok(existing) = std::fs::read_to_string(&path) {
            let ours = existing.contains(HOOK_MARKER) || existing.contains(HOOK_MARKER_BEFORE);
            if !ours && !force {
                bail!(
                    "{} exists and is not baton's: merge it by hand, or give --force to \
                     replace it",
                    path.display()
                );
            }
        }
    }
    let mut text = String::new();
    for (name, script) in scripts {
        let path = hooks.join(name);
        std::fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        text.push_str(&format!("wrote {}\n", path.display()));
    }
    if !rules_path(top).exists() {
        text.push_str(&format!(
            "no {HOOK_FILE} yet: nothing is guarded until it maps paths to keys\n"
        ));
    }
    Ok(rendered(format, &text, Vec::new(), Verdict::Ok))
}

/// A hook script that runs `baton ARGS`: the `baton` on PATH, so a hook outlives the
/// binary that wrote it (moved, rebuilt elsewhere, upgraded); else `recorded`, the binary
/// that wrote it, saying so on stderr when `tell` (one hook per commit says it); else it
/// refuses the commit, naming both places it looked and what to do.
fn hook_script(purpose: &str, args: &str, recorded: &Path, tell: bool) -> String {
    let quoted = shell_quote(&recorded.display().to_string());
    let told = if tell {
        "    echo \"baton hook: no baton on PATH; running $recorded, which installed this \
         hook\" >&2\n"
    } else {
        ""
    };
    format!(
        "#!/bin/sh\n\
         {HOOK_MARKER}: {purpose}\n\
         # Runs the baton on PATH, else the one that installed this hook.\n\
         recorded={quoted}\n\
         if command -v baton >/dev/null 2>&1; then\n    exec baton {args}\nfi\n\
         if [ -x \"$recorded\" ]; then\n{told}    exec \"$recorded\" {args}\nfi\n\
         echo \"baton hook: cannot run baton: no baton on PATH, and $recorded, which \
         installed this hook, is gone. Put baton on PATH or run baton hook install again; \
         git commit --no-verify skips the hook\" >&2\n\
         exit 1\n"
    )
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// A stand-in `baton` at `path` that prints who it is and its arguments.
    fn stub(path: &Path, who: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("#!/bin/sh\necho \"{who}: $*\"\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Runs `script` with sh, `path` alone as PATH (the script needs only sh's builtins),
    /// and one argument.
    fn run(script: &str, path: &Path) -> std::process::Output {
        Command::new("/bin/sh")
            .args(["-c", script, "hook", "MSG FILE"])
            .env("PATH", path)
            .output()
            .unwrap()
    }

    #[test]
    fn the_script_prefers_path_then_the_recorded_binary_quoted_then_says_it_has_none() {
        let dir = tempfile::tempdir().unwrap();
        // A recorded path that needs quoting: a space and a single quote.
        let recorded = dir.path().join("it's here/baton");
        stub(&recorded, "recorded");
        let on_path = dir.path().join("bin");
        stub(&on_path.join("baton"), "on path");
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let script = hook_script("test", "hook trailers \"$1\"", &recorded, true);
        assert!(
            script.starts_with("#!/bin/sh\n# baton hook: test\n"),
            "{script}"
        );

        let out = run(&script, &on_path);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "on path: hook trailers MSG FILE\n"
        );
        assert!(out.stderr.is_empty(), "{out:?}");

        let out = run(&script, &empty);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "recorded: hook trailers MSG FILE\n"
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "baton hook: no baton on PATH; running {}, which installed this hook\n",
                recorded.display()
            )
        );
        let quiet = hook_script("test", "hook trailers \"$1\"", &recorded, false);
        assert!(run(&quiet, &empty).stderr.is_empty());

        std::fs::remove_file(&recorded).unwrap();
        let out = run(&script, &empty);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(why.contains(&recorded.display().to_string()), "{why}");
        assert!(why.contains("no baton on PATH"), "{why}");
    }
}
