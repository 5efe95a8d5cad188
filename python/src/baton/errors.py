"""What baton's calls raise: a refusal carries its facts as attributes, never as text to parse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

__all__ = [
    "BatonError",
    "Unavailable",
    "InvalidArgument",
    "PermissionDenied",
    "Unauthenticated",
    "CredentialsRequired",
    "TLSError",
    "Compacted",
    "Refused",
    "Held",
    "NothingClaimable",
    "Blocked",
    "StillWaiting",
    "Lost",
    "LeaseLost",
]


class BatonError(Exception):
    """Anything baton's client raises."""


class Unavailable(BatonError):
    """No node answered within the retry deadline (down, no quorum, no leader)."""


class InvalidArgument(BatonError):
    """Bad input: nothing changed. The message says what to fix."""


class PermissionDenied(BatonError):
    """The principal may not do this under this key."""


class Unauthenticated(BatonError):
    """No credentials, or ones the cluster does not take (a token it does not know). The
    message is the node's; `presented_certificate` and `presented_token` say what this
    client gave (a client certificate in its `TLS`, a bearer `token`)."""

    def __init__(self, message: str, presented_certificate: bool = False, presented_token: bool = False):
        super().__init__(message)
        self.presented_certificate = presented_certificate
        self.presented_token = presented_token


class CredentialsRequired(Unauthenticated):
    """The cluster requires credentials and this client gave none: neither a client
    certificate (`TLS(ca=..., cert=..., key=...)`, for a cluster with `--tls-client-auth`)
    nor a bearer `token` (`--auth-tokens`). The message is the node's, which names the one
    it requires ("this node requires a client certificate ..."), then what to give here."""


class TLSError(BatonError):
    """No TLS connection could be made to any of the client's endpoints: every one failed
    in the TLS handshake, which retrying cannot mend (raised at once, not after the retry
    deadline). `reason` says why, as the client's TLS library reported it at the last one:

    - `untrusted_certificate`: the node's certificate did not verify against the client's
      CA (`TLS(ca=...)` is not the CA that signed the nodes' certificates, or the
      certificate is not for the host dialed);
    - `client_certificate_rejected`: the node refused the client's certificate (one its CA
      did not sign) at the end of the handshake;
    - `plaintext_node`: the node does not speak TLS (drop `tls=`, or turn TLS on at it);
    - `handshake_failed`: another handshake failure (`detail` has the library's words).

    `endpoints` lists each endpoint that failed and `detail` is the last failure's text."""

    def __init__(self, message: str, reason: str, endpoints=(), detail: str = ""):
        super().__init__(message)
        self.reason = reason
        self.endpoints = list(endpoints)
        self.detail = detail


class Compacted(BatonError):
    """A watch asked for events older than every node's window: read again, watch from there."""

    def __init__(self, message: str, requested: int = 0, first_available: int = 0):
        super().__init__(message)
        self.requested = requested
        self.first_available = first_available


class Refused(BatonError):
    """The cluster refused the request; nothing changed.

    `reason` is the cluster's word for it (`stale_token`, `wrong_session`, `frozen`,
    `offer_pending`, `no_offer`, `not_addressee`, `offer_to_holder`, `quarantined`,
    `key_limit`, `format_pending`, `exists`, `line_full`, or a newer one), and the attributes
    are its facts: `key`, `holder` / `holder_client_id` / `token` / `since_unix_ms` /
    `free_in` of the current lease when the key is held, `client_id` (the requester's
    session), `offer_to`, `quarantine_remaining` (seconds), `nodes`, `data_format`, `status`
    (the record's, for `exists`), and for `line_full` `waiters` (how many wait already) and
    `waiters_max` (the limit): of the key's line, or with `whole_cluster` of all lines together;
    for `permits_mismatch` `permits` (a `KeyHolders`: the key's N and holders, `shared` when
    they share it) and `asked_permits` (the claim's N; 0 with `asked_shared`: it asked to
    share the key); for `not_exclusive` `permits` (N; `shared` for a shared holder) and
    `presented_token`; for `holder_limit` `permit_holders` and `permit_holders_max`.
    """

    def __init__(self, message: str, reason: str = "", key: str = "", lease: Optional["LeaseInfo"] = None, **facts):
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.key = key
        self.lease = lease
        self.holder = lease.holder if lease else None
        self.holder_client_id = lease.holder_client_id if lease else None
        self.token = lease.token if lease else None
        self.since_unix_ms = lease.held_since_unix_ms if lease else None
        self.free_in = lease.remaining if lease else None
        self.presented_token = facts.pop("presented_token", 0)
        self.client_id = facts.pop("client_id", "")
        self.offer_to = facts.pop("offer_to", "")
        self.quarantine_remaining = facts.pop("quarantine_remaining", 0.0)
        self.nodes = facts.pop("nodes", [])
        self.data_format = facts.pop("data_format", 0)
        self.status = facts.pop("status", "")
        self.waiters = facts.pop("waiters", 0)
        self.waiters_max = facts.pop("waiters_max", 0)
        self.whole_cluster = facts.pop("whole_cluster", False)
        self.permits = facts.pop("permits", None)
        self.asked_permits = facts.pop("asked_permits", 0)
        self.asked_shared = facts.pop("asked_shared", False)
        self.permit_holders = facts.pop("permit_holders", 0)
        self.permit_holders_max = facts.pop("permit_holders_max", 0)
        self.facts = facts


class Held(Refused):
    """A claim lost: someone else holds the key. Stand down.

    `holder`, `holder_client_id`, `token`, `since_unix_ms` and `free_in` (seconds, the
    answering node's estimate) name the lease that won; `assignment` is who a dispatcher
    wanted, if anyone.
    """

    def __init__(
        self, key: str, lease: "LeaseInfo", same_name_other_process: bool = False, assignment=None, permits=None
    ):
        if permits is None:
            message = (
                f"{key} is held by {lease.holder} (client {lease.holder_client_id}) with token "
                f"{lease.token}; free in {lease.remaining:.1f}s; stand down"
            )
        elif permits.shared:
            message = (
                f"{key} is held shared by {len(permits.holders)}; the first frees in "
                f"{lease.remaining:.1f}s at the latest; stand down"
            )
        else:
            message = (
                f"{len(permits.holders)} permits of {key} are held ({permits.free} free); the first "
                f"frees in {lease.remaining:.1f}s at the latest; stand down"
            )
        super().__init__(message, reason="held", key=key, lease=lease)
        self.same_name_other_process = same_name_other_process
        self.assignment = assignment
        # Set when permits or shared holders hold the key: a `KeyHolders` naming every holder
        # (`shared` when they share it; `lease` is then the one whose permit ends first).
        self.permits = permits


class NothingClaimable(Refused):
    """`claim_next` found no claimable task under `prefix`: no work for this taker now.
    `counts` says why each task was passed by (`scanned`, `held`, `quarantined`,
    `finished`, `unmatched`, `assigned_elsewhere`, `truncated`); a cluster all on data
    format 14 passes finished tasks by unseen (`finished` 0, not in `scanned`)."""

    def __init__(self, prefix: str, counts: Dict[str, int]):
        super().__init__(
            f"nothing claimable under {prefix}: {counts}",
            reason="nothing_claimable",
            key=prefix,
        )
        self.prefix = prefix
        self.counts = counts


class Blocked(Refused):
    """A `claim_set` granted nothing: `blocked` lists every key that blocked it (a
    `BlockedKey` each: held by someone else, with its lease, or quarantined), in the order
    asked. Stand down on all of them."""

    def __init__(self, keys, blocked):
        named = ", ".join(
            f"{b.key} (held by {b.lease.holder})" if b.lease else f"{b.key} ({b.reason})" for b in blocked
        )
        super().__init__(
            f"none of {len(keys)} keys granted: {named}; stand down",
            reason="blocked",
            key=blocked[0].key if blocked else "",
            lease=blocked[0].lease if blocked else None,
        )
        self.keys = list(keys)
        self.blocked = list(blocked)


class StillWaiting(Refused):
    """`wait_in_line` timed out: the key was not granted to this session in time, and the
    session has left the line. `in_line` is its last place (an `InLine`: `position`,
    `waiters`, `blocked`, ...); `holder`, `token`, ... name the lease it waited behind, when
    the key was held (`in_line.blocked` says what else blocked it: a quarantine)."""

    def __init__(self, in_line, waited: float):
        blocked = in_line.blocked
        behind = (
            f"held by {blocked.lease.holder} with token {blocked.lease.token}"
            if blocked.lease
            else blocked.reason
        )
        super().__init__(
            f"{in_line.key}: not granted after waiting {waited:g}s in line (position "
            f"{in_line.position} of {in_line.waiters}; {behind}); left the line",
            reason="still_waiting",
            key=in_line.key,
            lease=blocked.lease,
        )
        self.in_line = in_line
        self.waited = waited
        self.position = in_line.position
        self.waiters = in_line.waiters


class Lost(Refused):
    """A renew, release or write with a token that is no longer current: the caller lost the
    key. `lease` (and `holder`, `token`, ...) is who holds it now, or None when it is free."""

    def __init__(self, key: str, token: int, current: Optional["LeaseInfo"]):
        who = f"held by {current.holder} with token {current.token}" if current else "free"
        super().__init__(
            f"token {token} is not current for {key}: {who}",
            reason="stale_token",
            key=key,
            lease=current,
            presented_token=token,
        )


class LeaseLost(BatonError):
    """A `lease()` block's lease ended before the block did (`lease.check()` raises it).
    `loss` is how (a `Loss`: `what`, `by`, `reason`, ...)."""

    def __init__(self, message: str, loss=None):
        super().__init__(message)
        self.loss = loss


@dataclass(frozen=True)
class LeaseInfo:
    """A live lease as the cluster reported it. `remaining` is the answering node's estimate
    of the seconds left when it answered; `ttl` is in seconds."""

    key: str
    holder: str
    holder_client_id: str
    token: int
    ttl: float
    held_since_unix_ms: int
    renewed_at_unix_ms: int
    remaining: float
    basis: int
