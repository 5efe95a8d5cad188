//! `baton hook` in real git repositories against a real 3-node cluster: the hooks
//! `baton hook install` writes are run by `git commit` itself, as two agents' sessions
//! (client ids) take turns on one case file.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{cli_bin, free_port, parse_json, AuthNode, Cluster};

/// `git ARGS` in `dir` as session `session` (None: no BATON_CLIENT_ID) of `cluster`, with
/// the `baton` under test first on PATH, which the hooks run.
fn git(cluster: &Cluster, dir: &Path, session: Option<&str>, args: &[&str]) -> Output {
    let mut path = vec![cli_bin().parent().unwrap().to_owned()];
    path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap()));
    let mut command = Command::new("git");
    command
        .args(args)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("BATON_ENDPOINTS", cluster.endpoints.join(","))
        .env_remove("BATON_CLIENT_ID")
        .env_remove("BATON_HOOK_ALLOW_OFFLINE")
        .env_remove("BATON_GUARD_ALLOW_OFFLINE")
        .env("GIT_AUTHOR_NAME", "agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.com")
        .env("GIT_COMMITTER_NAME", "agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.com");
    if let Some(session) = session {
        command.env("BATON_CLIENT_ID", session);
    }
    command.output().unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `baton --output json ARGS` as `session`, in `dir`.
fn baton(cluster: &Cluster, dir: &Path, session: &str, args: &[&str]) -> serde_json::Value {
    let out = cluster
        .command(&[&["--output", "json"], args].concat())
        .env("BATON_CLIENT_ID", session)
        .current_dir(dir)
        .output()
        .unwrap();
    parse_json(&out)
}

/// Writes `text` to `path` in the repo, stages it and commits as `session`.
fn commit(cluster: &Cluster, dir: &Path, session: Option<&str>, path: &str, text: &str) -> Output {
    let file = dir.join(path);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, text).unwrap();
    ok(git(cluster, dir, session, &["add", path]));
    git(
        cluster,
        dir,
        session,
        &["commit", "-q", "-m", &format!("edit {path}")],
    )
}

fn head_count(cluster: &Cluster, dir: &Path) -> usize {
    ok(git(cluster, dir, None, &["rev-list", "--count", "HEAD"]))
        .trim()
        .parse()
        .unwrap()
}

fn head_message(cluster: &Cluster, dir: &Path) -> String {
    ok(git(cluster, dir, None, &["log", "-1", "--format=%B"]))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A repository whose incidents are guarded, with baton's hooks installed.
fn guarded_repo(cluster: &Cluster) -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    ok(git(cluster, dir, None, &["init", "-q", "-b", "main"]));
    std::fs::create_dir_all(dir.join(".baton")).unwrap();
    std::fs::write(
        dir.join(".baton/hook.toml"),
        "[paths]\n\"docs/incidents/*.md\" = \"incidents/{stem}\"\n",
    )
    .unwrap();
    ok(git(cluster, dir, None, &["add", ".baton/hook.toml"]));
    ok(git(
        cluster,
        dir,
        None,
        &["commit", "-q", "-m", "guard the incidents"],
    ));
    let out = cluster
        .command(&["hook", "install"])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = ok(out);
    assert!(
        text.contains("pre-commit") && text.contains("commit-msg"),
        "{text}"
    );
    repo
}

#[tokio::test]
async fn only_the_holders_session_commits_a_case_file_and_the_commit_names_its_stint() {
    let cluster = Cluster::start(3).await;
    let repo = guarded_repo(&cluster);
    let dir = repo.path();

    let claim = baton(
        &cluster,
        dir,
        "s-a",
        &[
            "claim",
            "incidents/42",
            "--holder",
            "claude@a",
            "--ttl",
            "60s",
        ],
    );
    assert_eq!(claim["outcome"], "granted", "{claim}");
    let token_a = claim["lease"]["token"].as_u64().unwrap();
    let before = head_count(&cluster, dir);

    // Another session's commit of the case file is refused, naming holder and token.
    let refused = commit(
        &cluster,
        dir,
        Some("s-b"),
        "docs/incidents/42.md",
        "b was here\n",
    );
    assert!(!refused.status.success());
    let why = stderr(&refused);
    assert!(
        why.contains(&format!(
            "docs/incidents/42.md belongs to incidents/42, held by claude@a (client s-a) with token {token_a}"
        )),
        "{why}"
    );
    assert!(why.contains("stand down or ask for a handoff"), "{why}");
    assert_eq!(head_count(&cluster, dir), before, "nothing committed");
    // A file no rule guards commits as usual.
    ok(git(&cluster, dir, None, &["reset", "-q"]));
    ok(commit(&cluster, dir, Some("s-b"), "README.md", "hello\n"));
    assert_eq!(head_count(&cluster, dir), before + 1);

    // The holder's session commits, and the message names the stint.
    ok(commit(
        &cluster,
        dir,
        Some("s-a"),
        "docs/incidents/42.md",
        "a's finding\n",
    ));
    let message = head_message(&cluster, dir);
    for trailer in [
        "Baton-Key: incidents/42".to_owned(),
        format!("Baton-Token: {token_a}"),
        "Baton-Holder: claude@a".to_owned(),
    ] {
        assert!(message.contains(&trailer), "{trailer} missing:\n{message}");
    }

    // After a handoff the giver is refused and the taker commits under its new token.
    let offer = baton(
        &cluster,
        dir,
        "s-a",
        &[
            "handoff",
            "offer",
            "incidents/42",
            "--token",
            &token_a.to_string(),
            "--to",
            "codex@b",
            "--done",
            "found it",
            "--remaining",
            "write up",
            "--first-step",
            "read 42.md",
        ],
    );
    assert_eq!(offer["outcome"], "offered", "{offer}");
    let accepted = baton(
        &cluster,
        dir,
        "s-b",
        &[
            "handoff",
            "accept",
            "incidents/42",
            "--holder",
            "codex@b",
            "--ttl",
            "60s",
        ],
    );
    assert_eq!(accepted["outcome"], "accepted", "{accepted}");
    let token_b = accepted["lease"]["token"].as_u64().unwrap();
    assert!(token_b > token_a);

    let refused = commit(
        &cluster,
        dir,
        Some("s-a"),
        "docs/incidents/42.md",
        "a again\n",
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(&format!(
            "held by codex@b (client s-b) with token {token_b}"
        )),
        "{}",
        stderr(&refused)
    );
    ok(git(&cluster, dir, None, &["reset", "-q", "--hard"]));
    ok(commit(
        &cluster,
        dir,
        Some("s-b"),
        "docs/incidents/42.md",
        "b's write-up\n",
    ));
    assert!(head_message(&cluster, dir).contains(&format!("Baton-Token: {token_b}")));
}

#[tokio::test]
async fn a_free_key_or_no_session_is_refused_with_what_to_do() {
    let cluster = Cluster::start(3).await;
    let repo = guarded_repo(&cluster);
    let dir = repo.path();

    let free = commit(&cluster, dir, Some("s-a"), "docs/incidents/7.md", "x\n");
    assert!(!free.status.success());
    assert!(
        stderr(&free).contains("belongs to incidents/7, which nobody holds: claim it first"),
        "{}",
        stderr(&free)
    );

    let claim = baton(
        &cluster,
        dir,
        "s-a",
        &["claim", "incidents/7", "--holder", "claude@a"],
    );
    assert_eq!(claim["outcome"], "granted", "{claim}");
    // Holding it is not enough without saying which session this commit is.
    let anonymous = git(&cluster, dir, None, &["commit", "-q", "-m", "who?"]);
    assert!(!anonymous.status.success());
    assert!(
        stderr(&anonymous).contains("BATON_CLIENT_ID is not set"),
        "{}",
        stderr(&anonymous)
    );
    // The JSON verdict carries the facts typed.
    let out = cluster
        .command(&["--output", "json", "hook", "check", "docs/incidents/7.md"])
        .env("BATON_CLIENT_ID", "s-b")
        .current_dir(dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let verdict = parse_json(&out);
    assert_eq!(verdict["outcome"], "refused", "{verdict}");
    assert_eq!(verdict["keys"][0]["verdict"], "other", "{verdict}");
    assert_eq!(
        verdict["keys"][0]["lease"]["holder_client_id"], "s-a",
        "{verdict}"
    );
    assert_eq!(
        verdict["keys"][0]["lease"]["token"], claim["lease"]["token"],
        "{verdict}"
    );
}

/// A commit that touches the files of several keys needs every one of them: a set claimed
/// together (`baton claim K1 K2`, one token) passes; with one of them held by another
/// session, the commit is refused naming that key.
#[tokio::test]
async fn a_commit_touching_several_keys_needs_every_one_and_a_set_claimed_together_passes() {
    let cluster = Cluster::start(3).await;
    let repo = guarded_repo(&cluster);
    let dir = repo.path();
    let other = baton(
        &cluster,
        dir,
        "s-b",
        &["claim", "incidents/9", "--holder", "codex@b"],
    );
    assert_eq!(other["outcome"], "granted", "{other}");
    let blocked = baton(
        &cluster,
        dir,
        "s-a",
        &[
            "claim",
            "incidents/8",
            "incidents/9",
            "--holder",
            "claude@a",
        ],
    );
    assert_eq!(blocked["outcome"], "blocked", "{blocked}");
    assert_eq!(blocked["blocked"][0]["key"], "incidents/9", "{blocked}");
    let mine = baton(
        &cluster,
        dir,
        "s-a",
        &["claim", "incidents/8", "--holder", "claude@a"],
    );
    assert_eq!(mine["outcome"], "granted", "{mine}");
    // Holding one of the two keys is not enough.
    for (path, text) in [
        ("docs/incidents/8.md", "a\n"),
        ("docs/incidents/9.md", "b\n"),
    ] {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, text).unwrap();
        ok(git(&cluster, dir, Some("s-a"), &["add", path]));
    }
    let before = head_count(&cluster, dir);
    let half = git(&cluster, dir, Some("s-a"), &["commit", "-q", "-m", "both"]);
    assert!(!half.status.success());
    assert!(stderr(&half).contains("incidents/9"), "{}", stderr(&half));
    assert_eq!(head_count(&cluster, dir), before);
    // Once the other session lets go, the set is claimed together and the commit passes.
    let token = other["lease"]["token"].to_string();
    let released = baton(
        &cluster,
        dir,
        "s-b",
        &["release", "incidents/9", "--token", &token],
    );
    assert_eq!(released["outcome"], "released", "{released}");
    let mine_token = mine["lease"]["token"].to_string();
    let freed = baton(
        &cluster,
        dir,
        "s-a",
        &["release", "incidents/8", "--token", &mine_token],
    );
    assert_eq!(freed["outcome"], "released", "{freed}");
    let set = baton(
        &cluster,
        dir,
        "s-a",
        &[
            "claim",
            "incidents/8",
            "incidents/9",
            "--holder",
            "claude@a",
        ],
    );
    assert_eq!(set["outcome"], "granted", "{set}");
    ok(git(
        &cluster,
        dir,
        Some("s-a"),
        &["commit", "-q", "-m", "both"],
    ));
    assert_eq!(head_count(&cluster, dir), before + 1);
    let message = head_message(&cluster, dir);
    for key in ["incidents/8", "incidents/9"] {
        assert!(message.contains(key), "{message}");
    }
}

#[tokio::test]
async fn with_no_cluster_the_hook_fails_closed_unless_told_otherwise() {
    let cluster = Cluster::start(1).await;
    let repo = guarded_repo(&cluster);
    let dir = repo.path();
    let nobody = format!("127.0.0.1:{}", free_port());
    // `allow`: the variable that lets the commit through (its old name still works).
    let check = |allow: Option<&str>| {
        let mut command = Command::new(cli_bin());
        command
            .args([
                "--endpoints",
                &nobody,
                "--timeout",
                "1s",
                "hook",
                "check",
                "docs/incidents/1.md",
            ])
            .env("BATON_CLIENT_ID", "s-a")
            .env_remove("BATON_HOOK_ALLOW_OFFLINE")
            .env_remove("BATON_GUARD_ALLOW_OFFLINE")
            .current_dir(dir);
        if let Some(name) = allow {
            command.env(name, "1");
        }
        command.output().unwrap()
    };
    let closed = check(None);
    assert_eq!(closed.status.code(), Some(4), "{closed:?}");
    assert!(
        stderr(&closed).contains("fails closed"),
        "{}",
        stderr(&closed)
    );
    assert!(
        stderr(&closed).contains("BATON_HOOK_ALLOW_OFFLINE=1"),
        "{}",
        stderr(&closed)
    );
    for name in ["BATON_HOOK_ALLOW_OFFLINE", "BATON_GUARD_ALLOW_OFFLINE"] {
        let open = check(Some(name));
        assert_eq!(open.status.code(), Some(0), "{name}: {open:?}");
        assert!(stderr(&open).contains("unchecked"), "{}", stderr(&open));
    }
}

#[tokio::test]
async fn with_auth_on_the_holders_public_client_id_does_not_pass_for_another_principal() {
    let node = AuthNode::start(&["alice", "mallory"]);
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    std::fs::create_dir_all(dir.join(".baton")).unwrap();
    std::fs::write(
        // The rules file's old name, which this release still reads (as it still takes
        // `baton guard`, below).
        dir.join(".baton/guard.toml"),
        "[paths]\n\"docs/incidents/*.md\" = \"incidents/{stem}\"\n",
    )
    .unwrap();
    ok(Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .output()
        .unwrap());

    let claim = node.baton(
        "alice",
        "s-alice",
        &[
            "--output",
            "json",
            "claim",
            "incidents/42",
            "--holder",
            "alice",
        ],
    );
    assert_eq!(parse_json(&claim)["outcome"], "granted", "{claim:?}");
    let check = |who: &str| {
        node.command(
            who,
            "s-alice",
            &["--output", "json", "guard", "check", "docs/incidents/42.md"],
        )
        .current_dir(dir)
        .output()
        .unwrap()
    };
    // Mallory shows alice's session id, which the board prints for anyone: refused.
    let stolen = check("mallory");
    assert_eq!(stolen.status.code(), Some(3), "{stolen:?}");
    let verdict = parse_json(&stolen);
    assert_eq!(verdict["keys"][0]["verdict"], "refused", "{verdict}");
    assert!(
        !verdict["keys"][0]["detail"].as_str().unwrap().is_empty(),
        "{verdict}"
    );
    // Alice herself passes.
    let own = check("alice");
    assert_eq!(own.status.code(), Some(0), "{own:?}");
    assert_eq!(parse_json(&own)["keys"][0]["verdict"], "held");
}

#[tokio::test]
async fn install_replaces_baton_s_hooks_old_and_new_but_not_anothers() {
    let cluster = Cluster::start(1).await;
    let repo = tempfile::tempdir().unwrap();
    let dir = repo.path();
    ok(git(&cluster, dir, None, &["init", "-q"]));
    let hooks = dir.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let install = |force: bool| {
        let mut args = vec!["hook", "install"];
        if force {
            args.push("--force");
        }
        cluster.command(&args).current_dir(dir).output().unwrap()
    };
    // A hook `baton guard install` wrote (the command's old name) is baton's: replaced.
    std::fs::write(
        hooks.join("pre-commit"),
        "#!/bin/sh\n# baton guard hook: refuses a commit\nexec baton guard check --staged\n",
    )
    .unwrap();
    let text = ok(install(false));
    assert!(text.contains("no .baton/hook.toml yet"), "{text}");
    let written = std::fs::read_to_string(hooks.join("pre-commit")).unwrap();
    assert!(written.contains("# baton hook:"), "{written}");
    assert!(written.contains(" hook check --staged"), "{written}");
    // Someone else's hook is kept unless --force.
    std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\nmake lint\n").unwrap();
    let refused = install(false);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        stderr(&refused).contains("is not baton's"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit")).unwrap(),
        "#!/bin/sh\nmake lint\n"
    );
    ok(install(true));
    let written = std::fs::read_to_string(hooks.join("pre-commit")).unwrap();
    assert!(written.contains("# baton hook:"), "{written}");
}
