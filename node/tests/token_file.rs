//! `baton-node token --out FILE`, as a shell runs it under the usual umask 022: the token
//! goes to a new file only its owner can read (a shell's `> FILE` would make it readable by
//! everyone), nothing of it on stdout, and a second run onto the same file is refused before
//! anything is added to the tokens file.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// `baton-node token --principal ops --file tokens --out ops.token` in `dir`, through
/// `sh -c` with `umask 022` first, so the outcome does not hang on the test's own umask.
fn make_token(dir: &Path) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(r#"umask 022 && exec "$0" token --principal ops --file tokens --out ops.token"#)
        .arg(env!("CARGO_BIN_EXE_baton-node"))
        .current_dir(dir)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn token_out_writes_a_new_file_only_its_owner_can_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = make_token(dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "", "the token went to stdout too");
    assert!(
        text(&out.stderr).contains("ops.token (mode 0600)"),
        "{}",
        text(&out.stderr)
    );

    let token_file = dir.path().join("ops.token");
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "ops.token is mode {mode:o}");
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token = token.trim();
    assert!(token.starts_with("baton_"), "{token:?}");
    let tokens = std::fs::read_to_string(dir.path().join("tokens")).unwrap();
    let book = baton_node::tokens::TokenBook::parse(&tokens).unwrap();
    assert_eq!(book.principal(token), Some("ops"));

    // The same file again: refused, the token kept, no line added.
    let again = make_token(dir.path());
    assert_eq!(again.status.code(), Some(1), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("already exists"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), token);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tokens")).unwrap(),
        tokens
    );
}
