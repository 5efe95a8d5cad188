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
]


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
class Grant:
    """A claim won. `safe_until` (on `time.monotonic()`) is the send time of the claim +
    TTL × (1 − drift margin): act on the key only before it."""

    lease: LeaseInfo
    already_held: bool
    revision: int
    safe_until: float
    assignment: Optional[Assignment] = None

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def token(self) -> int:
        return self.lease.token


@dataclass(frozen=True)
class Probe:
    lease: Optional[LeaseInfo]
    revision: int


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


@dataclass(frozen=True)
class TokenCheck:
    current: bool
    lease: Optional[LeaseInfo]
    revision: int


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
class RecordView:
    key: str
    record: Record
    lease: Optional[LeaseInfo]
    revision: int
    quarantine: Optional[Quarantine]


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
