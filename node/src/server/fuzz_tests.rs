//! Hostile bytes at the node's edges (issue 8): mutated and random bytes decoded as every
//! write request, run through the same validation the server uses and, when it passes,
//! applied to a lease table; decoded as the Raft messages peers send; and read as a backup.
//! Nothing may panic, and a request that passes validation must apply without an `Invalid`
//! outcome (validation and the core agree on what is valid). Likewise the texts an operator
//! hands a node: permissions policies (also inside `SetAccess` requests) and tokens files; a
//! policy that parses must print and parse back the same and apply.
//!
//! The inputs start from valid encodings of each request (the corpus below) and are mutated
//! by bit flips, truncation, random insertions and splices, plus purely random bytes.
//! `BATON_FUZZ_ROUNDS=N` runs longer (CI runs [`ROUNDS_DEFAULT`], about a second).

use baton_proto::v1 as pb;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::convert::{self, TtlBounds};
use crate::core::{LeaseTable, LogCommand, Op, Outcome, RequestId};
use crate::raft_types::TypeConfig;
use crate::store::decode;

const ROUNDS_DEFAULT: u64 = 20_000;
const TTL: TtlBounds = TtlBounds {
    min_ms: 2_000,
    max_ms: 3_600_000,
};

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
    })
}

fn holder() -> Option<pb::Holder> {
    Some(pb::Holder {
        name: "ann@h1".into(),
        client_id: "0123456789abcdef0123456789abcdef".into(),
    })
}

/// The corpus kept in the repo, `node/fuzz/corpus/TARGET/`: every file is an input, run as
/// it is and mutated like the built-in seeds. It holds the seeds (`cargo test -p baton-node
/// --lib write_fuzz_corpus -- --ignored` writes them again) and is where an input that once
/// found a bug goes, so that every later run tries it first.
fn kept_corpus(target: &str) -> Vec<(&'static str, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
        .into_iter()
        .map(|path| ("kept", std::fs::read(path).unwrap()))
        .collect()
}

#[test]
#[ignore = "writes the seeds into node/fuzz/corpus; run by hand when they change"]
fn write_fuzz_corpus() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (target, seeds, ext) in [
        ("requests", corpus(), "bin"),
        ("texts", text_corpus(), "txt"),
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
    ]
}

/// One mutation of `input`.
fn mutate(rng: &mut StdRng, input: &[u8], corpus: &[(&str, Vec<u8>)]) -> Vec<u8> {
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

/// Decodes `bytes` as every write request; validates as the server does. Returns the
/// operations that passed.
fn decode_all(bytes: &[u8]) -> Vec<(Option<RequestId>, Op)> {
    let mut ok = Vec::new();
    let mut keep = |r: Result<(Option<RequestId>, Op), tonic::Status>| {
        if let Ok(x) = r {
            ok.push(x);
        }
    };
    if let Ok(r) = pb::ClaimRequest::decode(bytes) {
        keep(convert::claim(r, TTL));
    }
    if let Ok(r) = pb::RenewRequest::decode(bytes) {
        keep(convert::renew(r));
    }
    if let Ok(r) = pb::ReleaseRequest::decode(bytes) {
        keep(convert::release(r));
    }
    if let Ok(r) = pb::RevokeRequest::decode(bytes) {
        keep(convert::revoke(r));
    }
    if let Ok(r) = pb::UpdateRequest::decode(bytes) {
        keep(convert::update(r));
    }
    if let Ok(r) = pb::AssignRequest::decode(bytes) {
        keep(convert::assign(r));
    }
    if let Ok(r) = pb::OfferRequest::decode(bytes) {
        keep(convert::offer(r));
    }
    if let Ok(r) = pb::AcceptRequest::decode(bytes) {
        keep(convert::accept(r, TTL));
    }
    if let Ok(r) = pb::DeclineRequest::decode(bytes) {
        keep(convert::decline(r));
    }
    if let Ok(r) = pb::CancelRequest::decode(bytes) {
        keep(convert::cancel(r));
    }
    if let Ok(r) = pb::SetQuarantineRequest::decode(bytes) {
        keep(convert::set_quarantine(r));
    }
    ok
}

/// What a peer's Raft message decodes to must never panic the node.
fn decode_raft(bytes: &[u8]) {
    let _ = decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>(bytes);
    let _ = decode::<openraft::raft::VoteRequest<u64>>(bytes);
    let _ = decode::<openraft::raft::InstallSnapshotRequest<TypeConfig>>(bytes);
}

#[test]
fn mutated_requests_raft_messages_and_backups_never_panic_and_valid_ones_apply() {
    let rounds = rounds();
    let mut corpus = corpus();
    // Every seed is valid as its own request.
    for (name, bytes) in &corpus {
        assert!(!decode_all(bytes).is_empty(), "{name} does not validate");
    }
    let kept = kept_corpus("requests");
    for (_, bytes) in &kept {
        decode_all(bytes);
        decode_raft(bytes);
    }
    corpus.extend(kept);
    let backup = crate::backup::encode_backup("fuzz", &crate::store::SmState::default());
    let mut rng = StdRng::seed_from_u64(0xba70);
    let mut table = LeaseTable::default();
    let (mut passed, mut revision) = (0u64, 0u64);
    for _ in 0..rounds {
        let base = &corpus[rng.gen_range(0..corpus.len())].1;
        let bytes = mutate(&mut rng, base, &corpus);
        for (request_id, op) in decode_all(&bytes) {
            revision += 1;
            passed += 1;
            // A fresh seq each: a reused request id is refused as such, not as bad input.
            let request_id = request_id.map(|id| RequestId {
                seq: revision,
                ..id
            });
            let cmd = LogCommand {
                request_id,
                leader_unix_ms: 1_700_000_000_000,
                op,
            };
            let outcome = table.apply(revision, &cmd);
            assert!(
                !matches!(outcome, Outcome::Invalid { .. }),
                "validation passed but the core refused {cmd:?}: {outcome:?}"
            );
        }
        decode_raft(&bytes);
        let damaged = mutate(&mut rng, &backup, &corpus);
        let _ = crate::backup::read_backup(&damaged);
    }
    // Mutation keeps many inputs valid: the apply path was really exercised.
    assert!(
        passed > rounds / 20,
        "only {passed} of {rounds} inputs passed validation"
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
    use crate::core::access::{self, AccessState, Permission, Policy};
    let rounds = rounds();
    let mut corpus = text_corpus();
    assert!(Policy::parse(std::str::from_utf8(&corpus[0].1).unwrap()).is_ok());
    assert_eq!(
        crate::tokens::TokenBook::parse(std::str::from_utf8(&corpus[1].1).unwrap())
            .unwrap()
            .len(),
        2
    );
    corpus.extend(kept_corpus("texts"));
    let mut rng = StdRng::seed_from_u64(0xacce55);
    let mut state = AccessState::default();
    let mut table = LeaseTable::default();
    let (mut valid, mut revision) = (0u64, 0u64);
    for _ in 0..rounds {
        let base = &corpus[rng.gen_range(0..corpus.len())].1;
        let bytes = mutate(&mut rng, base, &corpus);
        let text = String::from_utf8_lossy(&bytes);
        let _ = crate::tokens::TokenBook::parse(&text);
        let mut texts = vec![text.into_owned()];
        if let Ok(r) = pb::SetAccessRequest::decode(&bytes[..]) {
            texts.push(r.policy);
        }
        for text in texts {
            let Ok(policy) = Policy::parse(&text) else {
                continue;
            };
            valid += 1;
            // What parses, prints and parses back the same, and applies as one command.
            assert_eq!(Policy::parse(&policy.to_text()).as_ref(), Ok(&policy));
            for who in [Some("agent-a"), Some("ops"), None] {
                let _ = access::check(Some(&policy), 1, who, Permission::Claim, "tasks/x");
            }
            revision += 1;
            let cmd = LogCommand {
                request_id: None,
                leader_unix_ms: 1,
                op: Op::SetAccess {
                    policy: Some(policy),
                    by: "ops".into(),
                },
            };
            let outcome = table.apply_tracked(
                revision,
                &cmd,
                &mut crate::core::Changes::default(),
                &mut state,
            );
            assert!(
                matches!(outcome, Outcome::AccessSet { .. }),
                "a parsed policy was refused: {outcome:?}"
            );
        }
    }
    assert!(
        valid > rounds / 50,
        "only {valid} of {rounds} policies parsed"
    );
    assert_eq!(state.version, valid);
}
