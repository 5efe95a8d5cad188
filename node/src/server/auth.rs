//! Who is asking (issue 8, identity): with `--tls-client-auth`, a request's principal is the
//! common name of the client certificate the CA signed, and a client may act only as itself:
//! a claim, accept or decline must name the principal as holder, and a renew, release,
//! update, offer or cancel must present a token the principal holds. Nodes (certificates
//! whose common name starts with [`NODE_CN_PREFIX`], as `baton-node certs` makes them) may
//! forward a client's request with its principal in [`PRINCIPAL_METADATA_KEY`]; from anyone
//! else that header is ignored.

use baton_proto::v1 as pb;
use tonic::{Request, Status};

use crate::store::StateMachine;

/// The common-name prefix of node certificates.
pub const NODE_CN_PREFIX: &str = "baton node ";
/// The header a node forwards a client's principal in.
pub const PRINCIPAL_METADATA_KEY: &str = "x-baton-principal";

/// What a request does as whom.
pub enum Acting<'a> {
    /// Acts as this holder name (claim, accept, decline).
    Holder(&'a str),
    /// Acts with this token on this key (renew, release, update, offer, cancel).
    Token(&'a str, u64),
    /// Reads, and operator calls (their permissions are not checked yet).
    Other,
}

/// Requests say what they act as.
pub trait Acts {
    fn acting(&self) -> Acting<'_>;
}

macro_rules! acts {
    (holder: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                self.holder.as_ref().map_or(Acting::Holder(""), |h| Acting::Holder(&h.name))
            }
        }
    )*};
    (token: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                Acting::Token(&self.key, self.token)
            }
        }
    )*};
    (other: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                Acting::Other
            }
        }
    )*};
}

acts!(holder: pb::ClaimRequest, pb::AcceptRequest, pb::DeclineRequest);
acts!(token: pb::RenewRequest, pb::ReleaseRequest, pb::UpdateRequest, pb::OfferRequest, pb::CancelRequest);
acts!(other: pb::ProbeRequest, pb::BoardRequest, pb::CheckTokenRequest, pb::RevokeRequest,
    pb::AssignRequest, pb::GetRecordRequest, pb::HistoryRequest, pb::SetQuarantineRequest);

/// The common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// The principal of `req` when auth is on: the certificate's common name, or, from a node,
/// the principal it forwards. `None` when auth is off.
pub fn principal<T>(req: &Request<T>, auth: bool) -> Result<Option<String>, Status> {
    if !auth {
        return Ok(None);
    }
    let cn = req
        .peer_certs()
        .and_then(|certs| certs.first().and_then(|c| common_name(c)))
        .ok_or_else(|| {
            Status::unauthenticated("a client certificate with a common name is required")
        })?;
    if cn.starts_with(NODE_CN_PREFIX) {
        if let Some(p) = req
            .metadata()
            .get(PRINCIPAL_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
        {
            return Ok(Some(p.to_owned()));
        }
    }
    Ok(Some(cn))
}

/// Refuses a request that acts as someone other than `principal`.
pub fn authorize(principal: &str, acting: Acting<'_>, sm: &StateMachine) -> Result<(), Status> {
    match acting {
        Acting::Holder(name) if name != principal => Err(Status::permission_denied(format!(
            "you are {principal:?}: you cannot act as holder {name:?}"
        ))),
        Acting::Token(key, token) => {
            // A token names one grant, so one holder: the current lease's, if it has it. A
            // token that is not current changes nothing anyway (the write answers "lost").
            let holder = sm.read(|s| {
                s.table
                    .lease(key)
                    .filter(|l| l.token == token)
                    .map(|l| l.holder.name.clone())
            });
            match holder {
                Some(h) if h != principal => Err(Status::permission_denied(format!(
                    "you are {principal:?}: token {token} of {key} is {h:?}'s"
                ))),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}
