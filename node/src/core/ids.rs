//! Who and what the core's commands name: holders, sessions, request ids, fencing tokens. A
//! leaf of the core: every other module may use it, it uses none of them.

use serde::{Deserialize, Serialize};

/// A fencing token: the revision of the write that granted a lease.
pub type FencingToken = u64;

/// Who holds, or wants, a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Human-readable claimant name, e.g. `claude@host-a`.
    pub name: String,
    /// Random per-process id: two processes with the same name are different holders.
    pub client_id: String,
}

/// Who really sent a command, as its history event records it: the holder name it acted as,
/// its client id (the session), and, with auth on, the authenticated principal. Client ids
/// are public, so with auth off the client id identifies an honest client and binds nothing
/// more; with auth on, the principal is what the node verified.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// The holder name the request acted as: the claimant's, the lease holder's for a write
    /// with its token, the dispatcher's (`by`) for an assignment; empty for operator calls
    /// (revoke), which act as no holder.
    pub name: String,
    /// The requester's client id: its request id's, the session it acted from.
    pub client_id: String,
    /// The principal the node authenticated (certificate common name or bearer token's
    /// name); `None` with auth off or for an anonymous request.
    pub principal: Option<String>,
}

/// Makes a mutating request exactly-once across retries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestId {
    pub client_id: String,
    pub seq: u64,
}

/// Who sent a client command, as the node that took the request established it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// The session the request acts as: the client id leases are bound to (a claim's holder
    /// client id). Not the request id's client id, which only names a retry slot (a process
    /// gets a fresh one, while its session may span processes: `BATON_CLIENT_ID`).
    pub client_id: String,
    /// The principal the node authenticated; `None` with auth off or for an anonymous
    /// request. What it may do was checked at the edge; the core records it.
    pub principal: Option<String>,
}
