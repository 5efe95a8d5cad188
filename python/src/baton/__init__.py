"""baton: single-winner claims, fencing tokens and recorded handoffs on a Raft cluster.

    from baton import Client, Held

    client = Client(["10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"], holder="etl@host-a")
    try:
        with client.lease("tasks/42", ttl=30) as lease:
            for chunk in work():
                lease.check()            # raises LeaseLost once the lease is not provably held
                write(chunk, fencing_token=lease.token)
            lease.status = "done"        # the record's final status, set on release
    except Held as held:
        print(f"{held.holder} holds it (token {held.token}), free in {held.free_in:.0f}s")
"""

from .client import (
    CLAIM_SET_KEYS_MAX,
    DEFAULT_ENDPOINT,
    PERMITS_MAX,
    SHARED_HOLDERS_MAX,
    TLS,
    WAITERS_PER_KEY_MAX,
    Client,
)
from .errors import (
    BatonError,
    Blocked,
    Compacted,
    CredentialsRequired,
    Held,
    InvalidArgument,
    LeaseInfo,
    LeaseLost,
    Lost,
    NothingClaimable,
    PermissionDenied,
    Refused,
    StillWaiting,
    TLSError,
    Unauthenticated,
    Unavailable,
)
from .lease import Lease
from .types import (
    Accepted,
    Actor,
    Assigned,
    Assignment,
    BlockedKey,
    Board,
    Event,
    Grant,
    HandoffNote,
    History,
    InLine,
    KeyHolders,
    KeyLine,
    Loss,
    Offer,
    Posted,
    Probe,
    Quarantine,
    Record,
    RecordView,
    TokenCheck,
    VolatileFact,
    Waiter,
)
from .watch import Watch
from . import aio  # noqa: F401 - `from baton import aio`; the module is baton.aio

__all__ = [
    "Client",
    "TLS",
    "DEFAULT_ENDPOINT",
    "CLAIM_SET_KEYS_MAX",
    "WAITERS_PER_KEY_MAX",
    "PERMITS_MAX",
    "SHARED_HOLDERS_MAX",
    "Lease",
    "Watch",
    "aio",
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
    "Blocked",
    "StillWaiting",
    "Lost",
    "NothingClaimable",
    "LeaseLost",
    "LeaseInfo",
    "Accepted",
    "Actor",
    "Assigned",
    "Assignment",
    "BlockedKey",
    "Board",
    "Event",
    "Grant",
    "HandoffNote",
    "History",
    "InLine",
    "KeyHolders",
    "KeyLine",
    "Loss",
    "Offer",
    "Posted",
    "Probe",
    "Quarantine",
    "Record",
    "RecordView",
    "TokenCheck",
    "VolatileFact",
    "Waiter",
]
__version__ = "0.1.0"
