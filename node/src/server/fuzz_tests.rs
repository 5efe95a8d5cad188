//! Hostile bytes at the node's edges: mutated and random bytes decoded as every
//! write request, run through the same validation the server uses and, when it passes,
//! applied to a lease table; decoded as the Raft messages peers send; and read as a backup.
//! Nothing may panic, and a request that passes validation must apply without an `Invalid`
//! outcome (validation and the core agree on what is valid). Likewise the texts an operator
//! hands a node: permissions policies (also inside `SetAccess` requests) and tokens files; a
//! policy that parses must print and parse back the same and apply.
//!
//! The inputs start from valid encodings of each request (the corpus below) and are mutated
//! by bit flips, truncation, random insertions and splices, plus purely random bytes.
//! `BATON_FUZZ_ROUNDS=N` runs longer (CI runs [`ROUNDS_DEFAULT`], about a second). What one
//! input is checked for is `crate::fuzzing`, which the libFuzzer targets in `node/fuzz` run
//! too, from the same corpora.

use baton_proto::v1 as pb;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::fuzzing::{decode_all, kept_corpus, Requests, Texts};

const ROUNDS_DEFAULT: u64 = 20_000;

/// `BATON_FUZZ_ROUNDS`, or [`ROUNDS_DEFAULT`].
fn rounds() -> u64 {
    std::env::var("BATON_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ROUNDS_DEFAULT)
}

fn rid(seq: u64) -> Option<pb::RequestId> {
    Some(pb::RequestId {
        client_id: "0123456789abcdef0123456789abcdef".into(),
        seq,
        session: "0123456789abcdef0123456789abcdef".into(),
    })
}

fn holder() -> Option<pb::Holder> {
    Some(pb::Holder {
        name: "ann@h1".into(),
        client_id: "0123456789abcdef0123456789abcdef".into(),
    })
}

#[test]
#[ignore = "writes the seeds into node/fuzz/corpus; run by hand when they change"]
fn write_fuzz_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut rng = StdRng::seed_from_u64(0x5e9);
    let sequences = (0..3)
        .map(|i| {
            let len = [64, 800, 4_800][i];
            let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            (["short", "medium", "long"][i], bytes)
        })
        .collect();
    for (target, seeds, ext) in [
        ("requests", corpus(), "bin"),
        ("texts", text_corpus(), "txt"),
        ("sequences", sequences, "bin"),
    ] {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds {
            std::fs::write(dir.join(format!("seed-{name}.{ext}")), bytes).unwrap();
        }
    }
}

/// Valid encodings of every write request: where mutation starts.
fn corpus() -> Vec<(&'static str, Vec<u8>)> {
    let key = || "tasks/a".to_owned();
    vec![
        (
            "claim",
            pb::ClaimRequest {
                permits: 0,
                shared: true,
                key: key(),
                holder: holder(),
                ttl_ms: 30_000,
                request_id: rid(1),
            }
            .encode_to_vec(),
        ),
        (
            "renew",
            pb::RenewRequest {
                key: key(),
                token: 1,
                request_id: rid(2),
            }
            .encode_to_vec(),
        ),
        (
            "release",
            pb::ReleaseRequest {
                key: key(),
                token: 1,
                request_id: rid(3),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "update",
            pb::UpdateRequest {
                key: key(),
                token: 1,
                request_id: rid(4),
                patch: Some(pb::RecordPatch {
                    status: Some("in_progress".into()),
                    ..Default::default()
                }),
            }
            .encode_to_vec(),
        ),
        (
            "offer",
            pb::OfferRequest {
                key: key(),
                token: 1,
                to: "bob@h2".into(),
                note: Some(pb::HandoffNote {
                    done: "half".into(),
                    changed_files: vec!["src/a.rs".into()],
                    ..Default::default()
                }),
                offer_ttl_ms: 60_000,
                request_id: rid(5),
            }
            .encode_to_vec(),
        ),
        (
            "accept",
            pb::AcceptRequest {
                key: key(),
                holder: holder(),
                ttl_ms: 30_000,
                request_id: rid(6),
            }
            .encode_to_vec(),
        ),
        (
            "assign",
            pb::AssignRequest {
                key: key(),
                to: "bob@h2".into(),
                by: "dispatcher".into(),
                reason: "load".into(),
                request_id: rid(7),
                clear: false,
            }
            .encode_to_vec(),
        ),
        (
            "quarantine",
            pb::SetQuarantineRequest {
                prefix: "tasks/".into(),
                delay_ms: 5_000,
                request_id: rid(8),
            }
            .encode_to_vec(),
        ),
        (
            "post",
            pb::PostRequest {
                key: key(),
                patch: Some(pb::RecordPatch {
                    summary: Some("a task".into()),
                    set_fields: [("role".to_owned(), "coder".to_owned())].into(),
                    ..Default::default()
                }),
                to: "bob@h2".into(),
                by: "dispatcher".into(),
                update: false,
                request_id: rid(9),
            }
            .encode_to_vec(),
        ),
        (
            "claim-next",
            pb::ClaimNextRequest {
                prefix: "tasks/".into(),
                holder: holder(),
                ttl_ms: 30_000,
                any: false,
                r#where: vec![pb::FieldIs {
                    field: "role".into(),
                    value: "coder".into(),
                }],
                request_id: rid(10),
            }
            .encode_to_vec(),
        ),
        (
            "claim-set",
            pb::ClaimSetRequest {
                keys: vec!["tasks/a".into(), "tasks/b".into()],
                holder: holder(),
                ttl_ms: 30_000,
                request_id: rid(11),
            }
            .encode_to_vec(),
        ),
    ]
}

/// One mutation of `input`.
fn mutate(rng: &mut StdRng, input: &[u8], corpus: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.gen_range(1..4) {
        match rng.gen_range(0..6) {
            0 if !out.is_empty() => {
                let i = rng.gen_range(0..out.len());
                out[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !out.is_empty() => out.truncate(rng.gen_range(0..out.len())),
            2 => {
                let i = rng.gen_range(0..=out.len());
                let junk: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
                out.splice(i..i, junk);
            }
            3 => {
                let other = &corpus[rng.gen_range(0..corpus.len())].1;
                let at = rng.gen_range(0..=other.len());
                out.extend_from_slice(&other[at..]);
            }
            4 if !out.is_empty() => {
                // An extreme varint where a length or number was.
                let i = rng.gen_range(0..out.len());
                out.splice(
                    i..=i,
                    [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                );
            }
            _ => out = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
        }
    }
    out
}

#[test]
fn mutated_requests_raft_messages_and_backups_never_panic_and_valid_ones_apply() {
    let rounds = rounds();
    let mut corpus: Vec<(String, Vec<u8>)> = corpus()
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), bytes))
        .collect();
    // Every seed is valid as its own request.
    for (name, bytes) in &corpus {
        assert!(!decode_all(bytes).is_empty(), "{name} does not validate");
    }
    corpus.extend(kept_corpus("requests"));
    let backup = crate::backup::encode_backup("fuzz", &crate::store::SmState::default());
    let mut rng = StdRng::seed_from_u64(0xba70);
    let mut target = Requests::default();
    for (_, bytes) in &corpus {
        target.input(bytes);
    }
    target.input(&backup);
    for _ in 0..rounds {
        let base = &corpus[rng.gen_range(0..corpus.len())].1;
        target.input(&mutate(&mut rng, base, &corpus));
        target.input(&mutate(&mut rng, &backup, &corpus));
    }
    // Mutation keeps many inputs valid: the apply path was really exercised.
    assert!(
        target.passed > rounds / 20,
        "only {} of {rounds} inputs passed validation",
        target.passed
    );
}

/// Valid texts of the files and requests an operator hands a node: a policy, a tokens file,
/// and `SetAccess` requests carrying them.
fn text_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let policy = "[groups]\nagents = [\"agent-a\", \"agent-b\"]\n\n[[rule]]\n\
                  who = [\"group:agents\", \"*\"]\nprefixes = [\"tasks/\", \"\"]\n\
                  can = [\"read\", \"claim\", \"assign\"]\n\n[[rule]]\nwho = [\"ops\", \
                  \"anonymous\"]\nprefixes = [\"\"]\ncan = [\"admin\"]\n\n[names]\n\
                  agent-b = [\"agent-b/worker-1\"]\n";
    let tokens = format!(
        "# tokens\n{}\n{}\n",
        crate::tokens::line("agent-a", "baton_aa"),
        crate::tokens::line("ops", "baton_bb")
    );
    vec![
        ("policy", policy.as_bytes().to_vec()),
        ("tokens", tokens.into_bytes()),
        (
            "set-access",
            pb::SetAccessRequest {
                policy: policy.into(),
                clear: false,
                request_id: rid(9),
            }
            .encode_to_vec(),
        ),
    ]
}

#[test]
fn mutated_policies_and_tokens_files_never_panic_and_valid_policies_apply() {
    use crate::core::access::Policy;
    let rounds = rounds();
    let mut corpus: Vec<(String, Vec<u8>)> = text_corpus()
        .into_iter()
        .map(|(name, bytes)| (name.to_owned(), bytes))
        .collect();
    assert!(Policy::parse(std::str::from_utf8(&corpus[0].1).unwrap()).is_ok());
    assert_eq!(
        crate::tokens::TokenBook::parse(std::str::from_utf8(&corpus[1].1).unwrap())
            .unwrap()
            .len(),
        2
    );
    corpus.extend(kept_corpus("texts"));
    let mut rng = StdRng::seed_from_u64(0xacce55);
    let mut target = Texts::default();
    for _ in 0..rounds {
        let base = &corpus[rng.gen_range(0..corpus.len())].1;
        target.input(&mutate(&mut rng, base, &corpus));
    }
    assert!(
        target.valid > rounds / 50,
        "only {} of {rounds} policies parsed",
        target.valid
    );
}
