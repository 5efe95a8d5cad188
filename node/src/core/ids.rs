//! Who and what the core's commands name: holders, sessions, request ids, fencing tokens. A
//! leaf of the core: every other module may use it, it uses none of them.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A fencing token: the revision of the write that granted a lease.
pub type FencingToken = u64;

/// A holder name, client id or principal as the table keeps it: one allocation shared by
/// every copy (a claim's lease and its event name the same holder and session), cloned by
/// reference count. It reads, compares, prints and serializes exactly as the string, so the
/// log, snapshots and the wire are unchanged. Measured with `baton-scale`: a `String` per copy
/// cost about 110 B per held lease at a million leases (`docs/performance.md`, "Holding many leases").
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

impl Name {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `other` is this very allocation (not merely the same text).
    pub fn is_shared_with(&self, other: &Name) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Name {
        Name(Arc::from(s))
    }
}

impl From<Name> for String {
    fn from(n: Name) -> String {
        n.0.to_string()
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        **self == *other.0
    }
}

impl Serialize for Name {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Name, D::Error> {
        String::deserialize(deserializer).map(Name::from)
    }
}

/// Who holds, or wants, a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Human-readable claimant name, e.g. `claude@host-a`.
    pub name: Name,
    /// Random per-process id: two processes with the same name are different holders.
    pub client_id: Name,
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
    pub name: Name,
    /// The requester's client id: its request id's, the session it acted from.
    pub client_id: Name,
    /// The principal the node authenticated (certificate common name or bearer token's
    /// name); `None` with auth off or for an anonymous request.
    pub principal: Option<Name>,
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
    pub client_id: Name,
    /// The principal the node authenticated; `None` with auth off or for an anonymous
    /// request. What it may do was checked at the edge; the core records it.
    pub principal: Option<Name>,
}
