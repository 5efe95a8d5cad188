"""The values baton's calls return. Times left are seconds, as the answering node estimated
them; `*_unix_ms` are the leader's wall clock, for people; `safe_until` is on
`time.monotonic()`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .errors import LeaseInfo

__all__ = [
    "LeaseInfo",
    "Assignment",
    "Grant",
    "Probe",
    "Board",
    "TokenCheck",
    "VolatileFact",
    "HandoffNote",
    "Offer",
    "Record",
    "RecordView",
    "Event",
    "History",
    "Accepted",
    "Quarantine",
    "Actor",
    "Loss",
    "InLine",
    "KeyLine",
    "Waiter",
    "KeyHolders",
]

#: `Loss.what` as the cluster pushed it (the endings stream): an operator revoked the lease,
#: the taker of a handoff accepted it, the leader expired it (no renewal reached it in time).
REVOKED = "revoked"
HANDED_OFF = "handed_off"
EXPIRED = "expired"
#: `Loss.what` when a linearizable read found the lease ended while the session was not
#: listening (away longer than the leader's window); the key's history says how.
GONE = "gone"
#: `Loss.what` from the renewals: the token is no longer current; no renewal was confirmed
#: before the safe deadline (the lease may still exist, but can no longer be proven); the
#: cluster refused a renewal for another reason than the token.
TAKEN = "taken"
UNCONFIRMED = "unconfirmed"
REFUSED = "refused"


@dataclass(frozen=True)
class Assignment:
    """Who a dispatcher wanted on a key. Routing metadata: it reserves nothing."""

    to: str
    by: str
    reason: str
    assigned_at_unix_ms: int
    revision: int


@dataclass(frozen=True)
class Quarantine:
    revision: int
    delay: float
    remaining: float


@dataclass(frozen=True)
class KeyHolders:
    """A key held by permits (`Client.claim(key, permits=N)`): up to `permits` holders at once,
    each with its own lease and fencing token; `holders` in order of token (of grant). With
    `shared` (`Client.claim(key, shared=True)`) the holders share the key, as many as
    `permits` (then `SHARED_HOLDERS_MAX`)."""

    permits: int
    holders: List[LeaseInfo] = field(default_factory=list)
    shared: bool = False

    @property
    def free(self) -> int:
        """How many permits are free now."""
        return max(0, self.permits - len(self.holders))

    @property
    def first_to_free(self) -> Optional[LeaseInfo]:
        """The holder whose permit ends first (by the answering node's countdowns): the next
        permit frees by then at the latest."""
        return min(self.holders, key=lambda l: l.remaining, default=None)


@dataclass(frozen=True)
class Grant:
    """A claim won. `safe_until` (on `time.monotonic()`) is the send time of the claim +
    TTL × (1 − drift margin): act on the key only before it."""

    lease: LeaseInfo
    already_held: bool
    revision: int
    safe_until: float
    assignment: Optional[Assignment] = None
    # A permit or shared claim's grant (`lease` is this session's own): the key's N (`shared`
    # when its holders share it) and every holder now, this one included. None for an
    # exclusive claim.
    permits: Optional[KeyHolders] = None

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def token(self) -> int:
        return self.lease.token


@dataclass(frozen=True)
class BlockedKey:
    """One key that kept a `claim_set` from being granted. `reason` is `held` (`lease` is the
    holder's, `assignment` who a dispatcher wanted) or `quarantined` (`quarantine_*`: its
    revision, length and the answering node's estimate of the time left, in seconds)."""

    key: str
    reason: str
    lease: Optional[LeaseInfo] = None
    same_name_other_process: bool = False
    assignment: Optional[Assignment] = None
    quarantine_revision: int = 0
    quarantine_delay: float = 0.0
    quarantine_remaining: float = 0.0
    quarantine_revoked: bool = False


@dataclass(frozen=True)
class Waiter:
    """One claimant waiting in a key's line: its holder name and session, the revision that
    put it in line (the line is in this order) and the leader's wall clock then, the TTL of
    its place (and of the lease it will be granted) and how long it has waited, in seconds
    (by the answering node's wall clock: informational)."""

    holder_name: str
    holder_client_id: str
    joined_revision: int
    joined_unix_ms: int
    ttl: float
    waited: float


@dataclass(frozen=True)
class KeyLine:
    """A key's line of waiters, as a probe, a record view or a board shows it: how many wait,
    and the first of them (at most 16), oldest first: the head is granted the key next."""

    waiters: int
    first: List[Waiter] = field(default_factory=list)


@dataclass(frozen=True)
class InLine:
    """Where this session stands in `key`'s line (`Client.wait_once`): `position` 1 is the
    head (granted the key next), `waiters` how many wait (this session included),
    `joined_revision` the revision that put it in line, `blocked` what the line waits for (a
    `BlockedKey`: the holder's `lease`, or the key's quarantine), `revision` the revision the
    answer reflects."""

    key: str
    position: int
    waiters: int
    joined_revision: int
    blocked: BlockedKey
    revision: int


@dataclass(frozen=True)
class Probe:
    """Who holds the key (`lease`, None when free) and who waits in its line (`line`, None
    when no one does)."""

    lease: Optional[LeaseInfo]
    revision: int
    line: Optional[KeyLine] = None
    # Set when permits or shared holders hold the key: every holder (`lease` is then the first
    # of them).
    permits: Optional[KeyHolders] = None


@dataclass(frozen=True)
class Board:
    leases: List[LeaseInfo]
    truncated: bool
    revision: int
    assignments: Dict[str, Assignment]
    quarantines: Dict[str, Quarantine]
    # Keys assigned by a dispatcher that no one holds yet (key -> assignment).
    unclaimed: Dict[str, Assignment]
    unclaimed_truncated: bool
    # Keys claim_next could grant to anyone: not held, not quarantined, not finished,
    # assigned to no one (open tasks).
    open: List[str] = field(default_factory=list)
    open_truncated: bool = False
    # Keys where someone waits in line (key -> line): held or quarantined keys.
    lines: Dict[str, KeyLine] = field(default_factory=dict)
    # Keys held by permits or shared (key -> every holder); `leases` does not list them.
    permits: Dict[str, KeyHolders] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenCheck:
    current: bool
    lease: Optional[LeaseInfo]
    revision: int
    # When permits hold the key: how many (the token, if current, holds one); else 0.
    permits: int = 0
    # The key is held shared (`permits` is then the shared holders' limit): the token, if
    # current, is one shared holder's.
    shared: bool = False


@dataclass(frozen=True)
class VolatileFact:
    """A claim in a handoff note, with the command that re-checks it: needs verification."""

    name: str
    claimed_value: str
    check_command: str


@dataclass(frozen=True)
class HandoffNote:
    commit: str = ""
    branch: str = ""
    done: str = ""
    remaining: str = ""
    blocked: str = ""
    rebuild: str = ""
    first_step: str = ""
    changed_files: List[str] = field(default_factory=list)
    dirty_files: List[str] = field(default_factory=list)
    volatile_facts: List[VolatileFact] = field(default_factory=list)


@dataclass(frozen=True)
class Offer:
    key: str
    from_holder: str
    from_client_id: str
    from_token: int
    to: str
    note: HandoffNote
    offer_ttl: float
    offered_at_unix_ms: int
    revision: int
    remaining: float


@dataclass(frozen=True)
class Record:
    status: str
    summary: str
    fields: Dict[str, str]
    assigned_to: Optional[Assignment]
    pending_offer: Optional[Offer]
    last_note: Optional[HandoffNote]
    updated_revision: int


@dataclass(frozen=True)
class Assigned:
    """The answer to `assign`/`unassign`: the record after it, and who holds the key (read
    right after it applied; None when no one does). An assignment reserves nothing."""

    record: Record
    lease: Optional[LeaseInfo]
    revision: int


@dataclass(frozen=True)
class Posted:
    """The answer to `post`: the task's record after it; `created` when the key had none
    before (else `update` patched it)."""

    key: str
    record: Record
    created: bool
    revision: int


@dataclass(frozen=True)
class RecordView:
    key: str
    record: Record
    lease: Optional[LeaseInfo]
    revision: int
    quarantine: Optional[Quarantine]
    # Who waits in the key's line (None when no one does).
    line: Optional[KeyLine] = None
    # Set when permits or shared holders hold the key: every holder (`lease` is then the first
    # of them).
    permits: Optional[KeyHolders] = None


@dataclass(frozen=True)
class Event:
    """One history event. `actor` is who really did it: (name, client_id, principal), or
    None for the leader's own (expired, lapsed)."""

    revision: int
    key: str
    kind: str
    actor_name: Optional[str]
    actor_client_id: Optional[str]
    actor_principal: Optional[str]
    token: int
    at_unix_ms: int
    detail: str
    # The status the event set on the key's record (updated, released with a final status,
    # posted), typed: read it here, never out of `detail`. None when it set none, or when
    # the node that answered is older than this field.
    status_set: Optional[str] = None


@dataclass(frozen=True)
class History:
    key: str
    events: List[Event]
    dropped: int
    revision: int


@dataclass(frozen=True)
class Accepted:
    """A handoff taken: the caller holds the key with a new token; the giver's is dead."""

    lease: LeaseInfo
    note: HandoffNote
    from_holder: str
    from_client_id: str
    revision: int
    safe_until: float

    @property
    def token(self) -> int:
        return self.lease.token


@dataclass(frozen=True)
class Actor:
    """Who really made a change: the holder name it acted as ("" for an operator), its
    session, and the principal the node authenticated (None with auth off)."""

    name: str
    client_id: str
    principal: Optional[str] = None

    def __str__(self) -> str:
        principal = f", principal {self.principal}" if self.principal else ""
        return f"{self.name or 'operator'} (client {self.client_id}{principal})"


@dataclass(frozen=True)
class Loss:
    """How a `lease()` lost its key. `what` is `revoked`, `handed_off`, `expired` (pushed by
    the cluster as the ending applied), `gone` (a read found it ended while the session was
    not listening), or from the renewals: `taken`, `unconfirmed`, `refused`. `by` is who
    ended it (the operator who revoked, the taker who accepted; None otherwise), `reason`
    the operator's reason or the client's words, `new_holder` / `new_token` who holds the
    key now when known, `revision` the entry (or read) that told it (0: none)."""

    what: str
    by: Optional[Actor] = None
    reason: str = ""
    new_holder: Optional[str] = None
    new_token: Optional[int] = None
    revision: int = 0
    at_unix_ms: int = 0

    def __str__(self) -> str:
        by = f" by {self.by}" if self.by else ""
        text = {
            REVOKED: f"revoked{by}",
            HANDED_OFF: f"handed off, accepted{by}",
            EXPIRED: "expired: no renewal reached the cluster in time",
            GONE: "ended while this session was not listening",
            TAKEN: "the token is no longer current",
            UNCONFIRMED: "not confirmed before the safe deadline",
            REFUSED: "a renewal was refused",
        }.get(self.what, self.what)
        if self.reason:
            text += f": {self.reason}"
        if self.what in (GONE, TAKEN) and self.new_holder:
            text += f"; held by {self.new_holder} (token {self.new_token}) now"
        elif self.what in (GONE, TAKEN):
            text += "; the key is free"
        if self.revision:
            text += f" (revision {self.revision})"
        return text
