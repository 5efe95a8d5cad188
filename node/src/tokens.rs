//! Bearer tokens (identity): a tokens file lists, one per line, a principal and the
//! SHA-256 of its token, so the file holds no secret a reader could replay:
//!
//! ```text
//! # comments and blank lines are ignored
//! agent-a sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! ```
//!
//! `baton-node token --principal NAME --file FILE [--out TOKEN_FILE]` makes a token, appends
//! its line, and prints the token once or writes it to a new file only its owner can read. A
//! client sends it as `authorization: Bearer TOKEN`; the node hashes what it gets and looks
//! the hash up. Deleting a line and sending the node SIGHUP revokes the token without a
//! restart (a file that does not load is logged and the tokens in use stay).

use crate::limits::{PRINCIPAL_BYTES_MAX, TOKENS_MAX};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// What a token starts with, so that a leaked one is recognisable (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "baton_";
/// Random bytes in a token made by `baton-node token` (hex-encoded after the prefix).
pub const TOKEN_RANDOM_BYTES: usize = 32;
/// Longest `authorization` value a node hashes; longer ones are refused unread (a wire
/// limit, in `baton_proto::limits`).
pub use baton_proto::limits::TOKEN_BYTES_MAX;

/// Why a tokens file, or a principal's name, cannot be used: which file or line, and what is
/// wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read or written.
    #[error("{}: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was read, but a line of it is wrong.
    #[error("{}: {source}", file.display())]
    InFile {
        file: PathBuf,
        #[source]
        source: LineError,
    },
    /// The file a token was to be written to exists already: a token is written only to a
    /// new file, so that no one else's file, and no file someone else could already read, gets
    /// it.
    #[error(
        "{}: already exists; a token is written only to a new file (remove it or pick another \
         name)",
        file.display()
    )]
    Exists { file: PathBuf },
    #[error(transparent)]
    Line(#[from] LineError),
    #[error(transparent)]
    Principal(#[from] PrincipalError),
}

/// A tokens file's line that is wrong: which (from 1), and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct LineError {
    pub line: usize,
    pub problem: LineProblem,
}

/// What is wrong with a tokens file's line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    #[error("expected `PRINCIPAL sha256:HEX`")]
    Shape,
    #[error(transparent)]
    Principal(#[from] PrincipalError),
    #[error("the hash must be `sha256:` and 64 hex digits")]
    Hash,
    #[error("this hash is listed twice")]
    Repeated,
    #[error("more than {TOKENS_MAX} tokens (TOKENS_MAX)")]
    TooMany,
}

/// Why a name cannot be a principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("a principal is 1 to {PRINCIPAL_BYTES_MAX} bytes, got {bytes}")]
    Length { bytes: usize },
    #[error("principal {name:?} has a space or control character")]
    Space { name: String },
    #[error(
        "principal {name:?} is reserved (\"*\", \"anonymous\", \"group:...\", \"baton node ...\")"
    )]
    Reserved { name: String },
}

/// SHA-256 of a token.
pub type TokenHash = [u8; 32];

/// The tokens a node accepts: hash → principal.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TokenBook {
    by_hash: HashMap<TokenHash, String>,
}

impl TokenBook {
    /// Parses a tokens file's text. Errors name the line.
    pub fn parse(text: &str) -> Result<TokenBook, LineError> {
        let mut by_hash = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |problem: LineProblem| LineError {
                line: n + 1,
                problem,
            };
            let mut parts = line.split_whitespace();
            let (Some(principal), Some(hash), None) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(at(LineProblem::Shape));
            };
            check_principal(principal).map_err(|e| at(e.into()))?;
            let hash = hash
                .strip_prefix("sha256:")
                .and_then(parse_hex)
                .ok_or_else(|| at(LineProblem::Hash))?;
            if by_hash.insert(hash, principal.to_owned()).is_some() {
                return Err(at(LineProblem::Repeated));
            }
            if by_hash.len() > TOKENS_MAX {
                return Err(at(LineProblem::TooMany));
            }
        }
        Ok(TokenBook { by_hash })
    }

    /// Reads and parses a tokens file.
    pub fn load(path: &Path) -> Result<TokenBook, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokensError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        TokenBook::parse(&text).map_err(|source| TokensError::InFile {
            file: path.to_path_buf(),
            source,
        })
    }

    /// The principal a token stands for, if it is listed.
    pub fn principal(&self, token: &str) -> Option<&str> {
        self.by_hash.get(&hash(token)).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// A principal name: what a holder name may be, and no spaces (the file is space-separated).
pub fn check_principal(name: &str) -> Result<(), PrincipalError> {
    if name.is_empty() || name.len() > PRINCIPAL_BYTES_MAX {
        return Err(PrincipalError::Length { bytes: name.len() });
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(PrincipalError::Space {
            name: name.to_owned(),
        });
    }
    // Names with a meaning of their own: a node (never bound by permissions), and what a
    // policy's `who` uses for anyone, the unauthenticated and groups.
    let reserved = [crate::tls::NODE_CN_PREFIX.trim_end(), "group:"];
    if name == "*" || name == "anonymous" || reserved.iter().any(|r| name.starts_with(r)) {
        return Err(PrincipalError::Reserved {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// SHA-256 of `token`.
pub fn hash(token: &str) -> TokenHash {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(text: &str) -> Option<TokenHash> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A new random token.
pub fn new_token() -> String {
    let bytes: [u8; TOKEN_RANDOM_BYTES] = rand::random();
    format!("{TOKEN_PREFIX}{}", hex(&bytes))
}

/// The tokens-file line for `principal` and `token`.
pub fn line(principal: &str, token: &str) -> String {
    format!("{principal} sha256:{}", hex(&hash(token)))
}

/// Makes a token for `principal`, appends its line to `file` (created readable by its owner
/// only) and returns the token.
pub fn add(file: &Path, principal: &str) -> Result<String, TokensError> {
    check_principal(principal)?;
    let token = new_token();
    append(file, principal, &token)?;
    Ok(token)
}

/// Makes a token for `principal`, writes it to `out` (a new file, created readable by its
/// owner only, whatever the umask: a shell's `> out` would make it readable by everyone
/// under the usual umask 022), then appends its line to `file`. An `out` that exists is
/// refused before anything is written; if the line cannot be appended, `out` is removed, so
/// no line in `file` stands for a token no one has.
pub fn add_to(file: &Path, principal: &str, out: &Path) -> Result<(), TokensError> {
    check_principal(principal)?;
    let token = new_token();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let io = |source| TokensError::Io {
        file: out.to_path_buf(),
        source,
    };
    let mut f = options.open(out).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => TokensError::Exists {
            file: out.to_path_buf(),
        },
        _ => io(e),
    })?;
    let written = writeln!(f, "{token}")
        .and_then(|()| f.sync_all())
        .map_err(io)
        .and_then(|()| append(file, principal, &token));
    if written.is_err() {
        let _ = std::fs::remove_file(out);
    }
    written
}

/// Appends `principal`'s line for `token` to `file` (created readable by its owner only),
/// synced.
fn append(file: &Path, principal: &str, token: &str) -> Result<(), TokensError> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let io = |source| TokensError::Io {
        file: file.to_path_buf(),
        source,
    };
    let mut f = options.open(file).map_err(io)?;
    writeln!(f, "{}", line(principal, token))
        .and_then(|()| f.sync_all())
        .map_err(io)
}

/// The node's tokens, shared by the request handlers and replaced on SIGHUP.
#[derive(Debug, Clone)]
pub struct Tokens {
    pub file: PathBuf,
    book: Arc<RwLock<TokenBook>>,
}

impl Tokens {
    /// Loads `file`; a node does not start on a file that does not load.
    pub fn load(file: PathBuf) -> Result<Tokens, TokensError> {
        let book = TokenBook::load(&file)?;
        Ok(Tokens {
            file,
            book: Arc::new(RwLock::new(book)),
        })
    }

    pub fn principal(&self, token: &str) -> Option<String> {
        self.book
            .read()
            .expect("tokens lock")
            .principal(token)
            .map(str::to_owned)
    }

    /// Reads the file again; on an error the tokens in use stay.
    pub fn reload(&self) -> Result<usize, TokensError> {
        let book = TokenBook::load(&self.file)?;
        let n = book.len();
        *self.book.write().expect("tokens lock") = book;
        Ok(n)
    }

    /// Reloads the file on every SIGHUP, logging the outcome.
    pub fn reload_on_sighup(&self) -> std::io::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangups = signal(SignalKind::hangup())?;
        let tokens = self.clone();
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                match tokens.reload() {
                    Ok(n) => tracing::info!(
                        file = %tokens.file.display(), tokens = n, "reloaded the tokens file"
                    ),
                    Err(e) => tracing::error!(
                        error = %e, "could not reload the tokens file; keeping the tokens in use"
                    ),
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_token_names_its_principal_and_nothing_else_does() {
        let a = new_token();
        let b = new_token();
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 64);
        assert_ne!(a, b);
        let text = format!(
            "# agents\n\n{}\n  {}  \n",
            line("agent-a", &a),
            line("agent-b", &b)
        );
        let book = TokenBook::parse(&text).unwrap();
        assert_eq!(book.len(), 2);
        assert_eq!(book.principal(&a), Some("agent-a"));
        assert_eq!(book.principal(&b), Some("agent-b"));
        assert_eq!(book.principal(&new_token()), None);
        assert_eq!(book.principal(""), None);
        // The file holds hashes, not tokens.
        assert!(!text.contains(&a[TOKEN_PREFIX.len()..]));
    }

    #[test]
    fn add_to_writes_the_token_to_a_new_owner_only_file_and_never_over_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        let out = dir.path().join("ops.token");
        add_to(&file, "ops", &out).unwrap();
        let token = std::fs::read_to_string(&out).unwrap();
        let tokens = Tokens::load(file.clone()).unwrap();
        assert_eq!(tokens.principal(token.trim()).as_deref(), Some("ops"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&out).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
        // An existing file is refused, typed, and nothing is appended.
        let before = std::fs::read_to_string(&file).unwrap();
        let e = add_to(&file, "ops", &out).unwrap_err();
        assert!(
            matches!(&e, TokensError::Exists { file: f } if *f == out),
            "{e:?}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), token);
        // A line that cannot be appended (the tokens "file" is a directory) leaves no token
        // file behind.
        let lost = dir.path().join("lost.token");
        let e = add_to(dir.path(), "ops", &lost).unwrap_err();
        assert!(matches!(&e, TokensError::Io { .. }), "{e:?}");
        assert!(!lost.exists());
        // A bad principal is refused before any file is made.
        assert!(add_to(&file, "has space", &lost).is_err());
        assert!(!lost.exists());
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        let good = line("agent-a", "t");
        for (text, want) in [
            ("agent-a".to_owned(), "line 1: expected"),
            ("agent-a sha256:abc".to_owned(), "line 1: the hash"),
            ("agent-a md5:00 x".to_owned(), "line 1: expected"),
            (
                format!("{good}\n{}", good.replace("agent-a", "agent-b")),
                "line 2: this hash is listed twice",
            ),
            (
                format!(
                    "#\n{}",
                    good.replace("agent-a", &"x".repeat(PRINCIPAL_BYTES_MAX + 1))
                ),
                "line 2: a principal is",
            ),
            (
                format!("agent\u{7} sha256:{}", "0".repeat(64)),
                "control character",
            ),
            (
                format!("agent-a sha256:{}", "g".repeat(64)),
                "64 hex digits",
            ),
        ] {
            let err = TokenBook::parse(&text).unwrap_err();
            assert!(err.to_string().contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn add_appends_a_line_the_book_reads_and_keeps_the_file_private() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        let a = add(&file, "agent-a").unwrap();
        let b = add(&file, "agent-b").unwrap();
        let tokens = Tokens::load(file.clone()).unwrap();
        assert_eq!(tokens.principal(&a).as_deref(), Some("agent-a"));
        assert_eq!(tokens.principal(&b).as_deref(), Some("agent-b"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(add(&file, "has space").is_err());
        for reserved in ["*", "anonymous", "group:ops"] {
            let e = add(&file, reserved).unwrap_err();
            assert!(e.to_string().contains("reserved"), "{reserved}: {e}");
            assert!(
                matches!(&e, TokensError::Principal(PrincipalError::Reserved { name }) if name == reserved),
                "{e:?}"
            );
        }
        // A node's name has a space: no token can ever stand for a node.
        assert!(add(&file, "baton node 1").is_err());

        // Revoke a: rewrite the file without its line; a reload drops it.
        std::fs::write(&file, format!("{}\n", line("agent-b", &b))).unwrap();
        assert_eq!(tokens.reload().unwrap(), 1);
        assert_eq!(tokens.principal(&a), None);
        assert_eq!(tokens.principal(&b).as_deref(), Some("agent-b"));
        // A broken file keeps the book in use.
        std::fs::write(&file, "nonsense\n").unwrap();
        let e = tokens.reload().unwrap_err();
        assert!(e.to_string().contains("line 1"));
        assert!(
            matches!(
                &e,
                TokensError::InFile { file: f, source: LineError { line: 1, problem: LineProblem::Shape } } if *f == file
            ),
            "{e:?}"
        );
        assert_eq!(tokens.principal(&b).as_deref(), Some("agent-b"));
    }
}
