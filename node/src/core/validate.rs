//! Input validation shared by the gRPC edge (before proposing) and the core (when applying).
//!
//! Each error message names the field, the rule and the value's size so that a person can
//! fix the request without reading the code.

use super::limits::*;
use super::types::{Holder, Op, RequestId};

/// A request that breaks a rule. Maps to gRPC `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

fn invalid(message: String) -> Result<(), InvalidInput> {
    Err(InvalidInput(message))
}

fn check_text(field: &str, value: &str, max_bytes: usize) -> Result<(), InvalidInput> {
    if value.is_empty() {
        return invalid(format!("{field} is empty: give 1 to {max_bytes} bytes"));
    }
    if value.len() > max_bytes {
        return invalid(format!(
            "{field} is {} bytes: the limit is {max_bytes} bytes",
            value.len()
        ));
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| c.is_control()) {
        return invalid(format!(
            "{field} has a control character {:?} at byte {at}: use printable text",
            c
        ));
    }
    Ok(())
}

pub fn key(key: &str) -> Result<(), InvalidInput> {
    check_text("key", key, KEY_BYTES_MAX)
}

pub fn holder(holder: &Holder) -> Result<(), InvalidInput> {
    check_text("holder name", &holder.name, HOLDER_NAME_BYTES_MAX)?;
    client_id(&holder.client_id)
}

pub fn client_id(id: &str) -> Result<(), InvalidInput> {
    check_text("client id", id, CLIENT_ID_BYTES_MAX)?;
    if !id.is_ascii() || id.contains(' ') {
        return invalid(format!(
            "client id {id:?} must be printable ASCII without spaces"
        ));
    }
    Ok(())
}

pub fn request_id(id: &RequestId) -> Result<(), InvalidInput> {
    client_id(&id.client_id)?;
    if id.seq == 0 {
        return invalid("request seq is 0: sequence numbers start at 1".into());
    }
    Ok(())
}

/// Checks a TTL against the given bounds (the core uses the absolute ones, the edge the
/// node's configured ones, which lie inside them).
pub fn ttl_ms(ttl_ms: u64, min_ms: u64, max_ms: u64) -> Result<(), InvalidInput> {
    if ttl_ms < min_ms || ttl_ms > max_ms {
        return invalid(format!(
            "ttl {ttl_ms} ms is out of range: give {min_ms} to {max_ms} ms"
        ));
    }
    Ok(())
}

pub fn token(token: u64) -> Result<(), InvalidInput> {
    if token == 0 {
        return invalid("token 0 is never issued: pass the token your claim returned".into());
    }
    Ok(())
}

pub fn reason(reason: &str) -> Result<(), InvalidInput> {
    check_text("reason", reason, REASON_BYTES_MAX)
}

pub fn prefix(prefix: &str) -> Result<(), InvalidInput> {
    if prefix.is_empty() {
        return Ok(());
    }
    check_text("prefix", prefix, PREFIX_BYTES_MAX)
}

/// Validates an operation against the core's absolute limits.
pub fn op(op: &Op) -> Result<(), InvalidInput> {
    key(op.key())?;
    match op {
        Op::Claim {
            holder: h,
            ttl_ms: t,
            ..
        } => {
            holder(h)?;
            ttl_ms(*t, TTL_MS_FLOOR, TTL_MS_MAX)
        }
        Op::Renew { token: t, .. } | Op::Release { token: t, .. } => token(*t),
        Op::Expire {
            token: t, basis, ..
        } => {
            token(*t)?;
            if basis < t {
                return invalid(format!("expire basis {basis} is before token {t}"));
            }
            Ok(())
        }
        Op::Revoke { reason: r, .. } => reason(r),
    }
}
