//! Who acted is always true, on real 3-node clusters through the `baton` CLI as a
//! user meets it, plain, with bearer tokens, and with mTLS:
//!
//! - the takeover: a claim that carries the holder's public client id under another name
//!   is refused naming the holder, and renames nothing (it used to be granted bob's token
//!   and rename the lease to the claimant);
//! - a write with the right token from another session (renew, release, update, offer,
//!   cancel) is refused, exit 3, naming the holder's client id and the requester's, and
//!   changes nothing (it used to be applied and credited to the holder);
//! - with auth on, another principal presenting the holder's client id and token is refused
//!   as well;
//! - every event records who really acted: its client id, holder name, and principal (with
//!   auth on), assignments and operator revokes included;
//! - `baton run` passes its session to the child as `BATON_CLIENT_ID`, so the child's own
//!   `baton update --token $BATON_TOKEN` acts as the holder.
//!
//! Each of these failed on the code before leases were bound to sessions (see docs/guarantees.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{new_token, node_bin, serial, text, Cluster};
use serde_json::Value;

/// How the cluster knows who is asking.
enum Auth {
    /// No authentication: client ids identify honest clients, they bind nothing more.
    Plain,
    /// `--auth-tokens`: each user's bearer token.
    Tokens(Vec<(&'static str, String)>),
    /// `--tls-client-auth`: each user's certificate under this directory.
    Mtls(PathBuf),
}

/// A running cluster and how each user reaches it.
struct Setup {
    cluster: Cluster,
    auth: Auth,
}

const USERS: [&str; 3] = ["bob", "alice", "ops"];

impl Setup {
    async fn start(kind: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap().keep();
        match kind {
            "plain" => Setup {
                cluster: Cluster::start(3).await,
                auth: Auth::Plain,
            },
            "tokens" => {
                let file = dir.join("tokens");
                let tokens: Vec<(&str, String)> =
                    USERS.iter().map(|u| (*u, new_token(&file, u))).collect();
                let flags = ["--auth-tokens", file.to_str().unwrap()];
                let cluster = Cluster::start_with_token(3, &flags, &tokens[2].1).await;
                Setup {
                    cluster,
                    auth: Auth::Tokens(tokens),
                }
            }
            _ => {
                certs(&dir);
                let f = |name: &str| dir.join(name).display().to_string();
                let flags = [
                    "--tls-cert".to_owned(),
                    f("node-{id}.pem"),
                    "--tls-key".into(),
                    f("node-{id}-key.pem"),
                    "--tls-ca".into(),
                    f("ca.pem"),
                    "--tls-client-auth".into(),
                ];
                let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
                let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
                let tls = baton_client::ClientTls {
                    ca_pem: read("ca.pem"),
                    identity: Some((read("client-ops.pem"), read("client-ops-key.pem"))),
                };
                Setup {
                    cluster: Cluster::start_tls(3, &flags, tls).await,
                    auth: Auth::Mtls(dir),
                }
            }
        }
    }

    fn auth_on(&self) -> bool {
        !matches!(self.auth, Auth::Plain)
    }

    /// `baton` as `user` from session `client_id`, JSON output: (exit code, JSON, stderr).
    fn baton(&self, user: &str, client_id: &str, args: &[&str]) -> (i32, Value, String) {
        let mut cmd = Command::new(node_bin().with_file_name("baton"));
        cmd.arg("--endpoints")
            .arg(self.cluster.endpoints().join(","))
            .args(["--client-id", client_id, "--output", "json"])
            .env_remove("BATON_ENDPOINTS")
            .env_remove("BATON_CLIENT_ID")
            .env_remove("BATON_AUTH_TOKEN")
            .env_remove("BATON_AUTH_TOKEN_FILE")
            .env_remove("BATON_HOLDER")
            .env_remove("BATON_TLS_CA")
            .env_remove("BATON_TLS_CLIENT_CERT")
            .env_remove("BATON_TLS_CLIENT_KEY")
            // A `baton run` child finds `baton` beside `baton-node`.
            .env("PATH", path_with_bins());
        self.credentials(&mut cmd, user);
        let out = cmd.args(args).output().unwrap();
        parse(&out)
    }

    fn credentials(&self, cmd: &mut Command, user: &str) {
        match &self.auth {
            Auth::Plain => {}
            Auth::Tokens(tokens) => {
                let token = &tokens.iter().find(|(u, _)| *u == user).unwrap().1;
                cmd.env("BATON_AUTH_TOKEN", token);
            }
            // As variables, which a `baton run` child inherits.
            Auth::Mtls(dir) => {
                cmd.env("BATON_TLS_CA", dir.join("ca.pem"))
                    .env(
                        "BATON_TLS_CLIENT_CERT",
                        dir.join(format!("client-{user}.pem")),
                    )
                    .env(
                        "BATON_TLS_CLIENT_KEY",
                        dir.join(format!("client-{user}-key.pem")),
                    );
            }
        }
    }

    /// The principal the cluster records for `user`: its name with auth on, none without.
    fn principal(&self, user: &str) -> Value {
        match self.auth_on() {
            true => Value::from(user),
            false => Value::Null,
        }
    }
}

/// `PATH` with the built binaries first.
fn path_with_bins() -> std::ffi::OsString {
    let bins = node_bin().parent().unwrap().to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bins).chain(std::env::split_paths(&rest))).unwrap()
}

/// `baton-node certs`: nodes 1 to 3 and a client certificate for each user.
fn certs(dir: &Path) {
    let mut cmd = Command::new(node_bin());
    cmd.args(["certs", "--dir"]).arg(dir);
    for id in 1..=3 {
        cmd.args(["--node", &format!("{id}=127.0.0.1")]);
    }
    for user in USERS {
        cmd.args(["--client", user]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

fn parse(out: &Output) -> (i32, Value, String) {
    let stdout = text(&out.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), json, text(&out.stderr))
}

/// Bob claims `key` from session `bob-proc`: the token.
fn bob_claims(s: &Setup, key: &str) -> u64 {
    let (code, granted, err) = s.baton(
        "bob",
        "bob-proc",
        &["claim", key, "--holder", "bob", "--ttl", "60s"],
    );
    assert_eq!(code, 0, "{granted} {err}");
    granted["lease"]["token"].as_u64().unwrap()
}

/// Hole 1 (before leases were bound to sessions): a claim with the holder's public client id under another name.
fn no_takeover_through_the_holders_client_id(s: &Setup) {
    let alice = |client: &str, args: &[&str]| s.baton("alice", client, args);
    let token = bob_claims(s, "who/k");
    let t = token.to_string();

    // Alice reads bob's client id: it is public.
    let (code, probe, _) = alice("alice-proc", &["probe", "who/k"]);
    assert_eq!(code, 0);
    assert_eq!(probe["lease"]["holder_client_id"], "bob-proc");

    // The takeover: alice claims with bob's client id under her own name. Refused (exit 3),
    // naming bob; nothing renamed.
    let (code, held, err) = alice("bob-proc", &["claim", "who/k", "--holder", "alice"]);
    assert_eq!(code, 3, "{held} {err}");
    assert_eq!(held["outcome"], "held");
    assert_eq!(held["lease"]["holder_name"], "bob");
    assert_eq!(held["lease"]["token"], token);

    let (_, probe, _) = alice("alice-proc", &["probe", "who/k"]);
    assert_eq!(probe["lease"]["holder_name"], "bob");
    assert_eq!(probe["lease"]["holder_client_id"], "bob-proc");
    let (code, check, _) = alice("alice-proc", &["check", "who/k", "--token", &t]);
    assert_eq!((code, &check["current"]), (0, &Value::from(true)));
    // Bob's own renew still works: the lease is his.
    let (code, renewed, err) = s.baton("bob", "bob-proc", &["renew", "who/k", "--token", &t]);
    assert_eq!(
        (code, &renewed["outcome"]),
        (0, &Value::from("renewed")),
        "{err}"
    );
}

/// Hole 2 (before leases were bound to sessions): writes with the right token from another session, and who the
/// history credits.
fn writes_are_bound_to_the_session_and_credited_to_their_sender(s: &Setup) {
    let bob = |client: &str, args: &[&str]| s.baton("bob", client, args);
    let alice = |client: &str, args: &[&str]| s.baton("alice", client, args);
    let token = bob_claims(s, "who/k");
    let t = token.to_string();

    // The right token from another session of bob's own principal: refused, exit 3, the
    // facts as fields.
    for args in [
        vec!["renew", "who/k", "--token", &t],
        vec!["update", "who/k", "--token", &t, "--status", "done"],
        vec![
            "handoff",
            "offer",
            "who/k",
            "--token",
            &t,
            "--to",
            "carol",
            "--done",
            "x",
            "--remaining",
            "y",
            "--first-step",
            "z",
        ],
        vec!["handoff", "cancel", "who/k", "--token", &t],
        vec!["release", "who/k", "--token", &t],
    ] {
        let (code, refused, err) = bob("bob-other", &args);
        assert_eq!(code, 3, "{args:?}: {refused} {err}");
        assert_eq!(refused["outcome"], "refused", "{args:?}");
        assert_eq!(refused["reason"], "wrong_session", "{args:?}: {refused}");
        let facts = &refused["refusal"];
        assert_eq!(facts["client_id"], "bob-other", "{refused}");
        assert_eq!(facts["lease"]["holder_client_id"], "bob-proc", "{refused}");
        assert_eq!(facts["lease"]["holder_name"], "bob", "{refused}");
        let message = refused["message"].as_str().unwrap();
        assert!(
            message.contains("client bob-proc") && message.contains("client bob-other"),
            "{message}"
        );
    }
    if s.auth_on() {
        // Another principal with bob's client id and token: not allowed to act as bob.
        let (code, _, err) = alice(
            "bob-proc",
            &["update", "who/k", "--token", &t, "--status", "done"],
        );
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("permission denied"), "{err}");
    }

    // Nothing changed: bob holds with his token, and it is still current for third parties.
    let (_, probe, _) = alice("alice-proc", &["probe", "who/k"]);
    assert_eq!(probe["lease"]["holder_name"], "bob");
    assert_eq!(probe["lease"]["holder_client_id"], "bob-proc");
    let (code, check, _) = alice("alice-proc", &["check", "who/k", "--token", &t]);
    assert_eq!((code, &check["current"]), (0, &Value::from(true)));
    let (_, record, _) = alice("alice-proc", &["record", "who/k"]);
    assert_eq!(record["record"]["status"], "", "{record}");

    // Bob's own session acts; a dispatcher assigns; an operator revokes.
    assert_eq!(bob("bob-proc", &["renew", "who/k", "--token", &t]).0, 0);
    let (code, _, err) = bob(
        "bob-proc",
        &["update", "who/k", "--token", &t, "--status", "in_progress"],
    );
    assert_eq!(code, 0, "{err}");
    let by = if s.auth_on() { "ops" } else { "dispatcher" };
    let (code, _, err) = s.baton(
        "ops",
        "ops-proc",
        &["assign", "who/k", "--to", "alice", "--by", by],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = s.baton(
        "ops",
        "ops-proc",
        &["revoke", "who/k", "--reason", "rotation"],
    );
    assert_eq!(code, 0, "{err}");

    let (code, history, err) = alice("alice-proc", &["history", "who/k", "--events"]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<(String, Value)> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap().to_owned(), e["actor"].clone()))
        .collect();
    let actor = |name: &str, client: &str, user: &str| serde_json::json!({"name": name, "client_id": client, "principal": s.principal(user)});
    assert_eq!(
        events,
        vec![
            ("claimed".to_owned(), actor("bob", "bob-proc", "bob")),
            ("updated".to_owned(), actor("bob", "bob-proc", "bob")),
            ("assigned".to_owned(), actor(by, "ops-proc", "ops")),
            ("revoked".to_owned(), actor("", "ops-proc", "ops")),
        ],
        "{history}"
    );
    assert!(history["events"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["recorded_before_format_4"] == false));

    // `baton run` hands its session to the child: the child's own update acts as the holder.
    let (code, ran, err) = bob(
        "bob-runner",
        &[
            "run",
            "who/r",
            "--holder",
            "bob",
            "--",
            "sh",
            "-c",
            // The child has bob's credentials through the environment `baton run` and
            // this harness give it (`BATON_ENDPOINTS`, the token or TLS variables).
            "baton update \"$BATON_KEY\" --token \"$BATON_TOKEN\" --status done --output json \
             && test \"$BATON_CLIENT_ID\" = bob-runner",
        ],
    );
    assert_eq!(code, 0, "{ran} {err}");
    let (_, history, _) = alice("alice-proc", &["history", "who/r", "--events"]);
    let updated = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "updated")
        .unwrap_or_else(|| panic!("the child's update is missing: {history}"))
        .clone();
    assert_eq!(updated["actor"]["client_id"], "bob-runner", "{updated}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_a_claim_never_takes_over_a_lease_through_its_client_id() {
    let _serial = serial().await;
    no_takeover_through_the_holders_client_id(&Setup::start("plain").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_writes_are_bound_to_the_holders_session_and_credited_to_their_sender() {
    let _serial = serial().await;
    writes_are_bound_to_the_session_and_credited_to_their_sender(&Setup::start("plain").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_a_claim_never_takes_over_a_lease_through_its_client_id() {
    let _serial = serial().await;
    no_takeover_through_the_holders_client_id(&Setup::start("tokens").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_writes_are_bound_to_the_session_and_events_name_the_principal() {
    let _serial = serial().await;
    writes_are_bound_to_the_session_and_credited_to_their_sender(&Setup::start("tokens").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mtls_a_claim_never_takes_over_a_lease_through_its_client_id() {
    let _serial = serial().await;
    no_takeover_through_the_holders_client_id(&Setup::start("mtls").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mtls_writes_are_bound_to_the_session_and_events_name_the_principal() {
    let _serial = serial().await;
    writes_are_bound_to_the_session_and_credited_to_their_sender(&Setup::start("mtls").await);
}
