//! `Op::fingerprint`: a stable digest of an operation, kept with each remembered answer.

use super::types::Op;

impl Op {
    /// A stable 64-bit fingerprint of the operation (FNV-1a over a fixed encoding), kept with
    /// each remembered answer so that a request id reused for a *different* operation is
    /// refused instead of answered with another request's outcome. Hand-rolled, not
    /// `std::hash`, because every node must compute the same value whatever it was built with.
    pub fn fingerprint(&self) -> u64 {
        const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut hash = OFFSET;
        let mut feed = |bytes: &[u8]| {
            for b in bytes.iter().chain(&[0xff]) {
                hash ^= u64::from(*b);
                hash = hash.wrapping_mul(PRIME);
            }
        };
        match self {
            // A retry is the same request as its first attempt.
            Op::Retry { op } => return op.fingerprint(),
            Op::Claim {
                key,
                holder,
                ttl_ms,
            } => {
                feed(b"claim");
                feed(key.as_bytes());
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
                feed(&ttl_ms.to_le_bytes());
            }
            Op::Renew { key, token } => {
                feed(b"renew");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
            }
            Op::Release {
                key,
                token,
                final_status,
            } => {
                feed(b"release");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
                feed(final_status.as_deref().unwrap_or("").as_bytes());
            }
            Op::Expire { key, token, basis } => {
                feed(b"expire");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
                feed(&basis.to_le_bytes());
            }
            Op::Revoke { key, reason } => {
                feed(b"revoke");
                feed(key.as_bytes());
                feed(reason.as_bytes());
            }
            Op::RevokeHeld { key, reason } => {
                feed(b"revoke-held");
                feed(key.as_bytes());
                feed(reason.as_bytes());
            }
            // The remaining operations are told apart by kind, key and their identifying
            // fields; a request id reused for another operation of the same kind on the same
            // key with the same identity is not worth a full encoding.
            Op::Update { key, token, .. } => {
                feed(b"update");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
            }
            Op::Assign { key, to, by, .. } => {
                feed(b"assign");
                feed(key.as_bytes());
                feed(to.as_bytes());
                feed(by.as_bytes());
            }
            Op::Offer { key, token, to, .. } => {
                feed(b"offer");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
                feed(to.as_bytes());
            }
            Op::Accept { key, holder, .. } => {
                feed(b"accept");
                feed(key.as_bytes());
                feed(holder.client_id.as_bytes());
            }
            Op::Decline { key, holder } => {
                feed(b"decline");
                feed(key.as_bytes());
                feed(holder.client_id.as_bytes());
            }
            Op::Cancel { key, token } => {
                feed(b"cancel");
                feed(key.as_bytes());
                feed(&token.to_le_bytes());
            }
            Op::SetQuarantine { prefix, delay_ms } => {
                feed(b"set-quarantine");
                feed(prefix.as_bytes());
                feed(&delay_ms.to_le_bytes());
            }
            Op::EndQuarantine { key, revision } => {
                feed(b"end-quarantine");
                feed(key.as_bytes());
                feed(&revision.to_le_bytes());
            }
            Op::Lapse {
                key,
                offer_revision,
            } => {
                feed(b"lapse");
                feed(key.as_bytes());
                feed(&offer_revision.to_le_bytes());
            }
            Op::Unassign { key, by, .. } => {
                feed(b"unassign");
                feed(key.as_bytes());
                feed(by.as_bytes());
            }
            Op::Post {
                key,
                to,
                by,
                update,
                ..
            } => {
                feed(b"post");
                feed(key.as_bytes());
                feed(to.as_deref().unwrap_or("").as_bytes());
                feed(by.as_bytes());
                feed(&[u8::from(*update)]);
            }
            // One request, whichever walk the leader proposed it with: a retry proposed
            // after the upgrade to format 14 is the same request as its first attempt.
            Op::ClaimNext {
                prefix,
                holder,
                ttl_ms,
                any,
                wheres,
            }
            | Op::ClaimNextUnfinished {
                prefix,
                holder,
                ttl_ms,
                any,
                wheres,
            } => {
                feed(b"claim-next");
                feed(prefix.as_bytes());
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
                feed(&ttl_ms.to_le_bytes());
                feed(&[u8::from(*any)]);
                for (field, value) in wheres {
                    feed(field.as_bytes());
                    feed(value.as_bytes());
                }
            }
            Op::ClaimSet {
                keys,
                holder,
                ttl_ms,
            } => {
                feed(b"claim-set");
                for key in keys {
                    feed(key.as_bytes());
                }
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
                feed(&ttl_ms.to_le_bytes());
            }
            Op::ClaimPermit {
                key,
                holder,
                ttl_ms,
                sharing,
            }
            | Op::WaitPermit {
                key,
                holder,
                ttl_ms,
                sharing,
            } => {
                feed(match self {
                    Op::ClaimPermit { .. } => b"claim-permit",
                    _ => b"wait-permit",
                });
                feed(key.as_bytes());
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
                feed(&ttl_ms.to_le_bytes());
                match sharing {
                    crate::core::Sharing::Permits(n) => feed(&n.to_le_bytes()),
                    crate::core::Sharing::Shared => feed(b"shared"),
                }
            }
            Op::Wait {
                key,
                holder,
                ttl_ms,
            } => {
                feed(b"wait");
                feed(key.as_bytes());
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
                feed(&ttl_ms.to_le_bytes());
            }
            Op::LeaveLine { key, holder } => {
                feed(b"leave-line");
                feed(key.as_bytes());
                feed(holder.name.as_bytes());
                feed(holder.client_id.as_bytes());
            }
            Op::HandOn { key, basis } => {
                feed(b"hand-on");
                feed(key.as_bytes());
                feed(&basis.to_le_bytes());
            }
            Op::DropWaiter {
                key,
                client_id,
                basis,
            } => {
                feed(b"drop-waiter");
                feed(key.as_bytes());
                feed(client_id.as_bytes());
                feed(&basis.to_le_bytes());
            }
            Op::SetAccess { policy, by } => {
                feed(b"set-access");
                feed(by.as_bytes());
                // bincode's encoding of the policy: fixed by its fields, whatever the build.
                feed(&bincode::serialize(policy).expect("a policy serializes"));
            }
        }
        hash
    }
}
