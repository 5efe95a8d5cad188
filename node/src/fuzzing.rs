//! What one fuzz input is checked for (hostile input), shared by the seeded
//! mutation tests that run in CI (`server/fuzz_tests.rs`, `core/sequences.rs`) and the
//! coverage-guided libFuzzer targets in `node/fuzz` (nightly: `cargo +nightly fuzz run
//! TARGET`). Each target has a corpus kept in the repo, `node/fuzz/corpus/TARGET/`, which both
//! start from.
//!
//! - `requests`: bytes decoded as every write request and validated as the server does; what
//!   passes is applied, and must not be refused as invalid (validation and the core agree).
//!   The same bytes are decoded as the Raft messages peers send and read as a backup.
//! - `texts`: bytes read as a tokens file and as a permissions policy (also inside a
//!   `SetAccess` request); a policy that parses prints and parses back the same and applies.
//! - `sequences`: bytes drive the choices of a command sequence against the core
//!   (`core::sequences`): never a panic, and every invariant holds.
//!
//! Nothing here may panic but a failed check: a panic is a finding. Built for tests, and with
//! the `fuzzing` feature (the libFuzzer crate turns it on); not in the node binary.

use baton_proto::v1 as pb;
use prost::Message;

use crate::core::access::{self, AccessState, Permission, Policy};
use crate::core::table::Walk;
use crate::core::{LeaseTable, LogCommand, Op, Outcome, RequestId};
use crate::raft_types::TypeConfig;
use crate::server::convert::{self, TtlBounds};
use crate::store::decode;

/// The TTL bounds requests are validated against.
const TTL: TtlBounds = TtlBounds {
    min_ms: 2_000,
    max_ms: 3_600_000,
};

/// The corpus kept in the repo for `target` (`node/fuzz/corpus/TARGET/`), by file name: the
/// seeds (`cargo test -p baton-node --lib write_fuzz_corpus -- --ignored` writes them again)
/// and where an input that once found a bug goes, so that every later run tries it first.
pub fn kept_corpus(target: &str) -> Vec<(String, Vec<u8>)> {
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
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(path).unwrap())
        })
        .collect()
}

/// Decodes `bytes` as every write request and validates each as the server does; returns the
/// operations that passed.
pub fn decode_all(bytes: &[u8]) -> Vec<(Option<convert::Origin>, Op)> {
    let mut ok = Vec::new();
    let mut keep = |r: Result<(Option<convert::Origin>, Op), tonic::Status>| {
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
    if let Ok(r) = pb::PostRequest::decode(bytes) {
        keep(convert::post(r));
    }
    if let Ok(r) = pb::ClaimNextRequest::decode(bytes) {
        keep(convert::claim_next(r.clone(), TTL, Walk::EveryCaseFile));
        keep(convert::claim_next(r, TTL, Walk::Unfinished));
    }
    if let Ok(r) = pb::ClaimSetRequest::decode(bytes) {
        keep(convert::claim_set(r, TTL));
    }
    ok
}

/// What a peer's Raft message decodes to must never panic the node.
fn decode_raft(bytes: &[u8]) {
    let _ = decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>(bytes);
    let _ = decode::<openraft::raft::VoteRequest<u64>>(bytes);
    let _ = decode::<openraft::raft::InstallSnapshotRequest<TypeConfig>>(bytes);
    let _ = crate::store::format3::append_entries(bytes);
    let _ = crate::store::format3::unguard(bytes)
        .map(decode::<openraft::raft::AppendEntriesRequest<TypeConfig>>);
}

/// The `requests` target: a lease table that inputs' valid requests are applied to, in turn.
#[derive(Default)]
pub struct Requests {
    table: LeaseTable,
    revision: u64,
    /// Requests that passed validation and were applied.
    pub passed: u64,
}

impl Requests {
    pub fn input(&mut self, bytes: &[u8]) {
        for (origin, op) in decode_all(bytes) {
            self.revision += 1;
            self.passed += 1;
            // A fresh seq each: a reused request id is refused as such, not as bad input.
            let (request_id, sender) = match origin {
                Some(o) => (
                    Some(RequestId {
                        seq: self.revision,
                        ..o.id
                    }),
                    Some(crate::core::Sender {
                        client_id: o.session.into(),
                        principal: None,
                    }),
                ),
                None => (None, None),
            };
            let cmd = LogCommand {
                request_id,
                leader_unix_ms: 1_700_000_000_000,
                op,
                sender,
            };
            let outcome = self.table.apply(self.revision, &cmd);
            assert!(
                !matches!(outcome, Outcome::Invalid { .. }),
                "validation passed but the core refused {cmd:?}: {outcome:?}"
            );
        }
        decode_raft(bytes);
        let _ = crate::backup::read_backup(bytes);
    }
}

/// The `texts` target: the access state and lease table that inputs' valid policies are
/// applied to, in turn.
#[derive(Default)]
pub struct Texts {
    state: AccessState,
    table: LeaseTable,
    revision: u64,
    /// Policies that parsed and were applied.
    pub valid: u64,
}

impl Texts {
    pub fn input(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let _ = crate::tokens::TokenBook::parse(&text);
        let mut texts = vec![text.into_owned()];
        if let Ok(r) = pb::SetAccessRequest::decode(bytes) {
            texts.push(r.policy);
        }
        for text in texts {
            let Ok(policy) = Policy::parse(&text) else {
                continue;
            };
            self.valid += 1;
            // What parses, prints and parses back the same, and applies as one command.
            assert_eq!(Policy::parse(&policy.to_text()).as_ref(), Ok(&policy));
            let _ = policy.leaves_an_admin();
            for who in [Some("agent-a"), Some("ops"), None] {
                let _ = access::check(Some(&policy), 1, who, Permission::Claim, "tasks/x");
            }
            self.revision += 1;
            let cmd = LogCommand {
                request_id: None,
                leader_unix_ms: 1,
                sender: None,
                op: Op::SetAccess {
                    policy: Some(policy),
                    by: "ops".into(),
                },
            };
            let outcome = self.table.apply_tracked(
                self.revision,
                &cmd,
                &mut crate::core::Changes::default(),
                &mut self.state,
            );
            assert!(
                matches!(outcome, Outcome::AccessSet { .. }),
                "a parsed policy was refused: {outcome:?}"
            );
        }
        assert_eq!(self.state.version, self.valid);
    }
}

/// Fuzz input as a source of randomness: its bytes in order, then zeros. Every choice the
/// sequence generator makes is so decided by the input, which is what lets a coverage-guided
/// fuzzer steer it.
pub struct FuzzBytes<'a> {
    bytes: &'a [u8],
}

impl<'a> FuzzBytes<'a> {
    pub fn new(bytes: &'a [u8]) -> FuzzBytes<'a> {
        FuzzBytes { bytes }
    }
}

impl rand::RngCore for FuzzBytes<'_> {
    fn next_u32(&mut self) -> u32 {
        let mut b = [0; 4];
        self.fill_bytes(&mut b);
        u32::from_le_bytes(b)
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0; 8];
        self.fill_bytes(&mut b);
        u64::from_le_bytes(b)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        let n = dest.len().min(self.bytes.len());
        dest[..n].copy_from_slice(&self.bytes[..n]);
        dest[n..].fill(0);
        self.bytes = &self.bytes[n..];
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

/// The `sequences` target: one command sequence whose choices `bytes` make, about one
/// command per 8 bytes (2 to `STEPS_MAX`).
pub fn sequence(bytes: &[u8], what: &str) {
    let steps = (bytes.len() / 8) as u64;
    crate::core::sequences::run(&mut FuzzBytes::new(bytes), steps, what);
}
