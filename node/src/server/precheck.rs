//! The checks of a request that need no state, run by the node that receives it before it
//! serves or forwards it (`super::forward`): bad input is refused alike at every node with
//! the same INVALID_ARGUMENT, never forwarded, never mistaken for an outage.
//!
//! Each write's check is its own conversion (`super::convert`), the one the leader runs to
//! build the command, so the two can never disagree. A lease length is checked here only
//! against the core's absolute bounds (`TTL_MS_FLOOR`, `TTL_MS_MAX`): the bounds a node is
//! configured with are the leader's to apply, and its refusal passes through a follower
//! unchanged.

use baton_proto::v1 as pb;
use tonic::Status;

use super::convert::{self, TtlBounds};
use crate::core::limits::{TTL_MS_FLOOR, TTL_MS_MAX};
use crate::core::table::Walk;

/// The widest lease lengths any node may be configured to grant.
const TTL_ANY_NODE: TtlBounds = TtlBounds {
    min_ms: TTL_MS_FLOOR,
    max_ms: TTL_MS_MAX,
};

/// A request's checks that need no state.
pub trait Precheck {
    /// `Err(INVALID_ARGUMENT)` if no node could ever serve it; reads check at the node
    /// that serves them.
    fn precheck(&self) -> Result<(), Status> {
        Ok(())
    }
}

/// A write checked by its conversion: `$convert(req)` or, with `ttl`, `$convert(req, ttl)`.
macro_rules! checked_by {
    ($($t:ty => $convert:ident;)*) => {$(
        impl Precheck for $t {
            fn precheck(&self) -> Result<(), Status> {
                convert::$convert(self.clone()).map(drop)
            }
        }
    )*};
    (ttl: $($t:ty => $convert:ident;)*) => {$(
        impl Precheck for $t {
            fn precheck(&self) -> Result<(), Status> {
                convert::$convert(self.clone(), TTL_ANY_NODE).map(drop)
            }
        }
    )*};
}

checked_by! {
    pb::RenewRequest => renew;
    pb::ReleaseRequest => release;
    pb::RevokeRequest => revoke;
    pb::UpdateRequest => update;
    pb::AssignRequest => assign;
    pb::PostRequest => post;
    pb::OfferRequest => offer;
    pb::DeclineRequest => decline;
    pb::CancelRequest => cancel;
    pb::SetQuarantineRequest => set_quarantine;
    pb::LeaveLineRequest => leave_line;
}

checked_by! { ttl:
    pb::ClaimRequest => claim;
    pb::AcceptRequest => accept;
    pb::ClaimSetRequest => claim_set;
    pb::WaitRequest => wait;
}

/// Either walk checks the same fields.
impl Precheck for pb::ClaimNextRequest {
    fn precheck(&self) -> Result<(), Status> {
        convert::claim_next(self.clone(), TTL_ANY_NODE, Walk::Unfinished).map(drop)
    }
}

/// The policy text and the request id; who may set it is the leader's to decide.
impl Precheck for pb::SetAccessRequest {
    fn precheck(&self) -> Result<(), Status> {
        convert::set_access(self.clone(), crate::core::access::ANONYMOUS.to_owned()).map(drop)
    }
}

impl Precheck for pb::ProbeRequest {}
impl Precheck for pb::BoardRequest {}
impl Precheck for pb::CheckTokenRequest {}
impl Precheck for pb::GetRecordRequest {}
impl Precheck for pb::HistoryRequest {}
impl Precheck for pb::GetAccessRequest {}
impl Precheck for pb::GetQuarantineRequest {}
