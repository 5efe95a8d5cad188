//! Who is asking (identity): with `--tls-client-auth`, a request's principal is the
//! common name of the client certificate the CA signed; with `--auth-tokens`, the principal
//! its bearer token is listed for (`crate::tokens`). With either on, a request that shows
//! neither is refused unless `--allow-anonymous`, and a client may act only as itself:
//! a claim, accept or decline must name the principal as holder, and a renew, release,
//! update, offer or cancel must present a token the principal holds. Nodes (certificates
//! whose common name starts with [`NODE_CN_PREFIX`], as `baton-node certs` makes them) may
//! forward a client's request with its principal in [`PRINCIPAL_METADATA_KEY`] (binary;
//! empty, or missing: anonymous); from anyone else that header is ignored. A node is bound by
//! no permission only when it asks for itself (no `x-baton-forwarded`).

use baton_proto::v1 as pb;
use tonic::{Request, Status};

use crate::core::access::{self, Permission};
use crate::store::StateMachine;

pub use crate::tls::{common_name, NODE_CN_PREFIX};
/// The header a node forwards a client's principal in.
pub const PRINCIPAL_METADATA_KEY: &str = "x-baton-principal-bin";

/// What a request does as whom.
pub enum Acting<'a> {
    /// Acts as this holder name (claim, accept, decline; an assignment's dispatcher).
    Holder(&'a str),
    /// Acts with this token on this key (renew, release, update, offer, cancel).
    Token(&'a str, u64),
    /// Reads, and operator calls: only their permission is checked.
    Other,
}

/// Requests say what they act as, and what permission they need where (a key, or a
/// prefix for calls about many keys; `""` for the whole cluster).
pub trait Acts {
    fn acting(&self) -> Acting<'_>;
    fn needs(&self) -> (Permission, &str);
    /// More keys it needs the same permission on (a claim of a set: every key after the
    /// first).
    fn also_needs(&self) -> &[String] {
        &[]
    }
    /// Whether it is a write (counted by the per-principal write limit).
    fn writes(&self) -> bool {
        true
    }
}

macro_rules! acts {
    (holder, $perm:ident, $field:ident: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                self.holder.as_ref().map_or(Acting::Holder(""), |h| Acting::Holder(&h.name))
            }
            fn needs(&self) -> (Permission, &str) {
                (Permission::$perm, &self.$field)
            }
        }
    )*};
    (token, $perm:ident, $field:ident: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                Acting::Token(&self.key, self.token)
            }
            fn needs(&self) -> (Permission, &str) {
                (Permission::$perm, &self.$field)
            }
        }
    )*};
    (read, $perm:ident, $field:ident: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                Acting::Other
            }
            fn needs(&self) -> (Permission, &str) {
                (Permission::$perm, &self.$field)
            }
            fn writes(&self) -> bool {
                false
            }
        }
    )*};
    (other, $perm:ident, $field:ident: $($t:ty),*) => {$(
        impl Acts for $t {
            fn acting(&self) -> Acting<'_> {
                Acting::Other
            }
            fn needs(&self) -> (Permission, &str) {
                (Permission::$perm, &self.$field)
            }
        }
    )*};
}

acts!(holder, Claim, key: pb::ClaimRequest, pb::AcceptRequest, pb::DeclineRequest,
    pb::WaitRequest, pb::LeaveLineRequest);
// A right over the prefix as a key is a right over every key under it (rules are prefixes).
acts!(holder, Claim, prefix: pb::ClaimNextRequest);
/// A claim of a set needs `claim` on every key of it.
impl Acts for pb::ClaimSetRequest {
    fn acting(&self) -> Acting<'_> {
        self.holder
            .as_ref()
            .map_or(Acting::Holder(""), |h| Acting::Holder(&h.name))
    }
    fn needs(&self) -> (Permission, &str) {
        (
            Permission::Claim,
            self.keys.first().map_or("", String::as_str),
        )
    }
    fn also_needs(&self) -> &[String] {
        self.keys.get(1..).unwrap_or_default()
    }
}

acts!(token, Claim, key: pb::RenewRequest, pb::ReleaseRequest, pb::UpdateRequest,
    pb::OfferRequest, pb::CancelRequest);
acts!(read, Read, key: pb::ProbeRequest, pb::CheckTokenRequest, pb::GetRecordRequest,
    pb::HistoryRequest);
acts!(read, Read, prefix: pb::BoardRequest);

/// An assignment is signed by its dispatcher (`by`): with auth on, the principal's own name.
impl Acts for pb::AssignRequest {
    fn acting(&self) -> Acting<'_> {
        Acting::Holder(&self.by)
    }
    fn needs(&self) -> (Permission, &str) {
        (Permission::Assign, &self.key)
    }
}

/// Posting a task is a dispatcher's act, signed like an assignment (`by`).
impl Acts for pb::PostRequest {
    fn acting(&self) -> Acting<'_> {
        Acting::Holder(&self.by)
    }
    fn needs(&self) -> (Permission, &str) {
        (Permission::Assign, &self.key)
    }
}

acts!(other, Admin, key: pb::RevokeRequest);
acts!(other, Admin, prefix: pb::SetQuarantineRequest);

/// The policy is about every key: changing or reading it needs `admin` on `""`.
impl Acts for pb::SetAccessRequest {
    fn acting(&self) -> Acting<'_> {
        Acting::Other
    }
    fn needs(&self) -> (Permission, &str) {
        (Permission::Admin, "")
    }
}

/// The quarantine rules are about prefixes of every key: reading them needs `read` on `""`.
impl Acts for pb::GetQuarantineRequest {
    fn acting(&self) -> Acting<'_> {
        Acting::Other
    }
    fn needs(&self) -> (Permission, &str) {
        (Permission::Read, "")
    }
    fn writes(&self) -> bool {
        false
    }
}

impl Acts for pb::GetAccessRequest {
    fn acting(&self) -> Acting<'_> {
        Acting::Other
    }
    fn needs(&self) -> (Permission, &str) {
        (Permission::Admin, "")
    }
    fn writes(&self) -> bool {
        false
    }
}

/// Whether `principal` is a node (or an operator holding a node's certificate): nodes run
/// the cluster, so the permissions do not bind them.
pub fn is_node(principal: Option<&str>) -> bool {
    principal.is_some_and(|p| p.starts_with(NODE_CN_PREFIX))
}

/// Refuses what `principal` (`None`: anonymous) may not do under the cluster's permissions
/// (`crate::core::access`): `permission` on `target`, and, for a client request, acting as
/// anyone but itself (or a name the policy lets it use).
pub fn authorize(
    auth: &Auth,
    principal: Option<&str>,
    acting: Acting<'_>,
    (permission, target): (Permission, &str),
    sm: &StateMachine,
) -> Result<(), Status> {
    if !auth.on() || is_node(principal) {
        return Ok(());
    }
    sm.read(|s| {
        let policy = s.access.in_force(auth.bootstrap.as_deref());
        access::check(policy, s.access.version, principal, permission, target)
            .map_err(|denied| Status::permission_denied(denied.to_string()))?;
        let Some(principal) = principal else {
            return Ok(());
        };
        match acting {
            Acting::Holder(name) => access::check_name(policy, principal, name)
                .map_err(|denied| Status::permission_denied(denied.to_string())),
            Acting::Token(key, token) => {
                // A token names one grant, so one holder: the current lease's, if it has
                // it. A token that is not current changes nothing anyway (the write answers
                // "lost"), and cannot become current later, since tokens are revisions and
                // never repeat, unless it is a revision still to come: a guess at the grant
                // another's claim is about to get. That is refused here (a lagging node
                // refuses too, and the leader, which has applied every grant it answered,
                // decides again).
                if token > s.revision {
                    return Err(Status::permission_denied(format!(
                        "you are {principal:?}: token {token} of {key} was never granted \
                         (the cluster is at revision {})",
                        s.revision
                    )));
                }
                let permit = || {
                    let held = s.table.holders(key)?;
                    held.position_of_token(token).map(|at| &held.leases[at])
                };
                match s
                    .table
                    .lease(key)
                    .filter(|l| l.token == token)
                    .or_else(permit)
                {
                    Some(l) if access::check_name(policy, principal, &l.holder.name).is_err() => {
                        Err(Status::permission_denied(format!(
                            "you are {principal:?}: token {token} of {key} is {:?}'s",
                            l.holder.name
                        )))
                    }
                    _ => Ok(()),
                }
            }
            Acting::Other => Ok(()),
        }
    })
}

/// What a watch was allowed on, checked again as it runs: the token it showed must still be
/// listed, and the principal must still have `read` on the prefix.
pub struct WatchGrant {
    auth: Auth,
    principal: Option<String>,
    /// The bearer token the principal came from, if it did.
    token: Option<String>,
}

impl WatchGrant {
    pub fn of<T>(auth: &Auth, req: &Request<T>) -> Result<WatchGrant, Status> {
        let principal = auth.principal(req)?;
        let token = req
            .metadata()
            .get(AUTHORIZATION_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|t| t.trim().to_owned())
            // Only when the principal came from it (not from a certificate).
            .filter(|t| {
                principal.is_some()
                    && auth.tokens.as_ref().and_then(|b| b.principal(t)) == principal
            });
        Ok(WatchGrant {
            auth: auth.clone(),
            principal,
            token,
        })
    }

    pub fn check(&self, prefix: &str, sm: &StateMachine) -> Result<(), Status> {
        if let (Some(tokens), Some(token)) = (&self.auth.tokens, &self.token) {
            if tokens.principal(token) != self.principal {
                return Err(Status::unauthenticated(
                    "the token of this watch was revoked",
                ));
            }
        }
        authorize_call(
            &self.auth,
            self.principal.as_deref(),
            Permission::Read,
            prefix,
            sm,
        )
    }
}

/// `authorize` for a call that acts as no holder: `permission` on `target`.
pub fn authorize_call(
    auth: &Auth,
    principal: Option<&str>,
    permission: Permission,
    target: &str,
    sm: &StateMachine,
) -> Result<(), Status> {
    authorize(auth, principal, Acting::Other, (permission, target), sm)
}

/// The metadata key of a bearer token: `authorization: Bearer TOKEN`.
pub const AUTHORIZATION_METADATA_KEY: &str = "authorization";

/// How a node learns who is asking.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    /// Client certificates name principals (`--tls-client-auth`).
    pub certs: bool,
    /// Bearer tokens (`--auth-tokens`).
    pub tokens: Option<crate::tokens::Tokens>,
    /// With auth on, requests that show neither are served as anonymous
    /// (`--allow-anonymous`) instead of refused.
    pub anonymous: bool,
    /// The policy this node enforces until the cluster has one (`--access-policy`).
    pub bootstrap: Option<std::sync::Arc<crate::core::access::Policy>>,
}

impl Auth {
    /// Whether requests are bound to principals at all.
    pub fn on(&self) -> bool {
        self.certs || self.tokens.is_some()
    }

    /// The principal of `req`: `None` when auth is off or the request is anonymous and that
    /// is allowed. In order: a node forwarding a client's request names it (from a node
    /// certificate only; empty for an anonymous one); a client certificate's common name;
    /// a bearer token's principal. A token that is not listed is refused, never anonymous.
    pub fn principal<T>(&self, req: &Request<T>) -> Result<Option<String>, Status> {
        if !self.on() {
            return Ok(None);
        }
        let conn = req.extensions().get::<crate::tls::ConnInfo>();
        if let Some(conn) = conn {
            let Some(cn) = conn.common_name.as_deref() else {
                return self.by_token(req);
            };
            if cn.starts_with(NODE_CN_PREFIX) && !conn.node {
                // A node's name from a CA that does not sign nodes' (the client CA, when
                // nodes have their own): no one may be called that.
                return Err(Status::permission_denied(format!(
                    "{cn:?} is a node's name, and this certificate is not a node's: node \
                     certificates are signed by the peer CA"
                )));
            }
            if conn.node {
                // A node asking for itself: a joining node, or an operator holding a node's
                // certificate.
                if !req
                    .metadata()
                    .contains_key(baton_proto::FORWARDED_METADATA_KEY)
                {
                    return Ok(Some(cn.to_string()));
                }
                // A node forwarding a client's request: the client's principal, or, with
                // none named (anonymous, or a node with auth off), no one.
                let named = req
                    .metadata()
                    .get_bin(PRINCIPAL_METADATA_KEY)
                    .and_then(|v| v.to_bytes().ok())
                    .and_then(|b| String::from_utf8(b.to_vec()).ok())
                    .filter(|p| !p.is_empty());
                return match named {
                    Some(p) => Ok(Some(p)),
                    None if self.anonymous => Ok(None),
                    None => Err(Status::unauthenticated(
                        "a forwarded request names no principal, and this cluster refuses \
                         anonymous requests",
                    )),
                };
            }
            if self.certs {
                return Ok(Some(cn.to_string()));
            }
        }
        self.by_token(req)
    }

    /// The principal of a bearer token, or anonymous when allowed.
    fn by_token<T>(&self, req: &Request<T>) -> Result<Option<String>, Status> {
        if let (Some(tokens), Some(value)) =
            (&self.tokens, req.metadata().get(AUTHORIZATION_METADATA_KEY))
        {
            let token = value
                .to_str()
                .ok()
                .filter(|v| v.len() <= crate::tokens::TOKEN_BYTES_MAX)
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    Status::unauthenticated("the authorization header must be `Bearer TOKEN`")
                })?;
            return match tokens.principal(token.trim()) {
                Some(p) => Ok(Some(p)),
                None => Err(Status::unauthenticated(
                    "unknown or revoked token: ask the operator for a token of yours",
                )),
            };
        }
        if self.anonymous {
            return Ok(None);
        }
        Err(Status::unauthenticated(
            match (self.certs, self.tokens.is_some()) {
                (true, true) => {
                    "this node requires a client certificate (give --tls-cert and --tls-key) \
                     or a bearer token (BATON_AUTH_TOKEN or --auth-token-file)"
                }
                (true, false) => {
                    "this node requires a client certificate with a common name: give \
                     --tls-cert and --tls-key (BATON_TLS_CLIENT_CERT, BATON_TLS_CLIENT_KEY)"
                }
                _ => "this cluster requires a bearer token (BATON_AUTH_TOKEN or --auth-token-file)",
            },
        ))
    }
}
