//! Conversions between the wire types (`baton_proto::v1`) and the core's, in one place.
//! Request conversions validate: a bad field becomes `INVALID_ARGUMENT` before anything is
//! proposed, so nothing changes.

use baton_proto::v1 as pb;
use tonic::Status;

use crate::core::validate::{self, InvalidInput};
use crate::core::{Holder, Lease, Op, RequestId};
use crate::expiry::Countdowns;

/// Turns a validation failure into the gRPC error clients see.
pub fn invalid(e: InvalidInput) -> Status {
    Status::invalid_argument(e.0)
}

/// Every mutating request must carry a request id: without one a retry could apply twice
/// (a repeated revoke would free whoever claimed in between).
pub fn request_id(id: Option<pb::RequestId>) -> Result<Option<RequestId>, Status> {
    let Some(id) = id else {
        return Err(Status::invalid_argument(
            "request_id is missing: every write needs a (client_id, seq) so retries apply once",
        ));
    };
    let id = RequestId {
        client_id: id.client_id,
        seq: id.seq,
    };
    validate::request_id(&id).map_err(invalid)?;
    Ok(Some(id))
}

/// The TTL bounds this node's configuration allows (inside the core's absolute ones).
#[derive(Debug, Clone, Copy)]
pub struct TtlBounds {
    pub min_ms: u64,
    pub max_ms: u64,
}

pub fn claim(req: pb::ClaimRequest, ttl: TtlBounds) -> Result<(Option<RequestId>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    let holder = req
        .holder
        .ok_or_else(|| Status::invalid_argument("holder is missing: give a name and client id"))?;
    let holder = Holder {
        name: holder.name,
        client_id: holder.client_id,
    };
    validate::holder(&holder).map_err(invalid)?;
    validate::ttl_ms(req.ttl_ms, ttl.min_ms, ttl.max_ms).map_err(invalid)?;
    let op = Op::Claim {
        key: req.key,
        holder,
        ttl_ms: req.ttl_ms,
    };
    Ok((request_id(req.request_id)?, op))
}

pub fn renew(req: pb::RenewRequest) -> Result<(Option<RequestId>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::token(req.token).map_err(invalid)?;
    let op = Op::Renew {
        key: req.key,
        token: req.token,
    };
    Ok((request_id(req.request_id)?, op))
}

pub fn release(req: pb::ReleaseRequest) -> Result<(Option<RequestId>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::token(req.token).map_err(invalid)?;
    let op = Op::Release {
        key: req.key,
        token: req.token,
    };
    Ok((request_id(req.request_id)?, op))
}

pub fn revoke(req: pb::RevokeRequest) -> Result<(Option<RequestId>, Op), Status> {
    validate::key(&req.key).map_err(invalid)?;
    validate::reason(&req.reason).map_err(invalid)?;
    let op = Op::Revoke {
        key: req.key,
        reason: req.reason,
    };
    Ok((request_id(req.request_id)?, op))
}

/// A lease as clients see it, with this node's estimate of its remaining time.
pub fn lease(lease: &Lease, countdowns: &Countdowns) -> pb::Lease {
    let remaining = countdowns
        .remaining(&lease.key, lease.basis)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(lease.ttl_ms);
    pb::Lease {
        key: lease.key.clone(),
        holder: Some(pb::Holder {
            name: lease.holder.name.clone(),
            client_id: lease.holder.client_id.clone(),
        }),
        token: lease.token,
        ttl_ms: lease.ttl_ms,
        held_since_unix_ms: lease.since_unix_ms,
        renewed_at_unix_ms: lease.renewed_unix_ms,
        remaining_ms: remaining,
        basis: lease.basis,
    }
}
