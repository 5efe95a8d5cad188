"""`Lease`: `with client.lease(key, ttl=30) as lease:` — the Rust `LeaseGuard`'s rules.

The lease is held until its safe deadline: the send time of the latest successful grant or
renewal + TTL × (1 − drift margin), on `time.monotonic()`. Only a successful renewal moves
it. It is lost
- when the cluster pushes that it ended (revoked, handed off, expired): at once, as the
  ending entry applies on the leader, through the session's one endings stream (`endings`);
- when a renewal is refused (the token is no longer current, or another refusal);
- when the safe deadline passes without a renewal, whatever the cluster answers later:
  each renewal is retried only until the safe deadline, and for at most TTL / 4.
`lease.lost` is set at that moment and `lease.loss` (a `Loss`) says how; `lease.check()`
compares the deadline with the clock itself, so it raises at the deadline even if the
renewing thread has not run.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Optional

from .errors import BatonError, LeaseLost, Lost, Refused
from .types import REFUSED, TAKEN, UNCONFIRMED, Loss

#: Renewals per TTL when all goes well.
RENEWALS_PER_TTL = 3
#: Fraction of the renew interval drawn at random either way.
RENEW_JITTER_FRACTION = 0.1
#: After a failed renewal, try again every TTL / 10, but not more often than every 50 ms.
RENEW_RETRIES_PER_TTL = 10
RENEW_RETRY_INTERVAL_MIN = 0.05
#: One renewal call (all its attempts) gets at most TTL / 4.
RENEW_CALL_TTL_DIVISOR = 4


class LeaseRules:
    """What the blocking `Lease` and the asyncio `aio.Lease` share: the state, when the lease
    is held, when to renew, and what a renewal's outcome means. Each has its own `lost` and
    `_stop` events and its own `_lose`."""

    def _setup(self, client, feed, key: str, ttl: float, holder: Optional[str], status: str) -> None:
        self._client = client
        #: The session's endings stream (`endings.Feed`), handed over by the client.
        self._feed = feed
        self.key = key
        self.ttl = ttl
        self.holder = holder
        #: The record's final status on release (set it in the block, e.g. "done").
        self.status = status
        self.token = 0
        self.safe_until = 0.0
        self.grant = None
        #: How it was lost (a `Loss`), once it is.
        self.loss: Optional[Loss] = None
        self._following = None

    def _granted(self, grant) -> None:
        self.grant = grant
        self.token = grant.token
        self.safe_until = grant.safe_until

    def held(self) -> bool:
        """True while the lease is provably this session's (before its safe deadline)."""
        return not self.lost.is_set() and time.monotonic() < self.safe_until

    def check(self) -> None:
        """Raises `LeaseLost` unless the lease is still provably held: call it before each
        step that acts on the key."""
        if not self.held():
            self._lose(Loss(UNCONFIRMED, reason="no renewal was answered"))
            raise LeaseLost(f"lost {self.key} (token {self.token}): {self.loss}", self.loss)

    def _next_renewal(self) -> float:
        """Seconds to the next renewal when all goes well: TTL / 3, ± 10 %."""
        interval = self.ttl / RENEWALS_PER_TTL
        return interval * (1 + random.uniform(-RENEW_JITTER_FRACTION, RENEW_JITTER_FRACTION))

    def _until_renewal(self, wait: float) -> float:
        """How long to sleep: `wait`, or to the safe deadline if that is sooner."""
        return max(0.0, min(wait, self.safe_until - time.monotonic()))

    def _renewal_due(self) -> Optional[float]:
        """Woken to renew: the deadline of the renewal call's attempts, or None (and the
        lease lost) when the safe deadline has passed."""
        if time.monotonic() >= self.safe_until:
            self._lose(Loss(UNCONFIRMED, reason="no renewal was answered"))
            return None
        return min(self.safe_until, time.monotonic() + self.ttl / RENEW_CALL_TTL_DIVISOR)

    def _renewed(self, safe_until: Optional[float], failure: Optional[BatonError]) -> Optional[float]:
        """After a renewal that answered `safe_until` or failed with `failure`: seconds to the
        next one, or None when the lease is lost (and `_lose` was told how)."""
        if isinstance(failure, Lost):
            self._lose(Loss(TAKEN, new_holder=failure.holder, new_token=failure.token))
            return None
        if isinstance(failure, Refused):
            # Final: another session's token cannot become ours by retrying.
            self._lose(Loss(REFUSED, reason=str(failure)))
            return None
        if failure is not None:
            if time.monotonic() >= self.safe_until:
                self._lose(Loss(UNCONFIRMED, reason=f"the last renewal failed: {failure}"))
                return None
            return max(self.ttl / RENEW_RETRIES_PER_TTL, RENEW_RETRY_INTERVAL_MIN)
        if time.monotonic() >= self.safe_until:
            # The answer came too late to count: the window had already closed.
            self._lose(Loss(UNCONFIRMED, reason="the renewal was answered too late"))
            return None
        self.safe_until = safe_until
        return self._next_renewal()

    def _release_failed(self, failure: BatonError, exc) -> None:
        """A release on leaving the block failed: a `Lost` is a loss; otherwise the lease ends
        at its TTL anyway, and an exception from the block wins."""
        if isinstance(failure, Lost):
            self._lose(Loss(TAKEN, reason="found at the release", new_holder=failure.holder, new_token=failure.token))
        elif exc is None:
            raise failure

    def _lose(self, loss: Loss) -> None:
        raise NotImplementedError


class Lease(LeaseRules):
    def __init__(self, client, feed, key: str, ttl: float, holder: Optional[str], status: str):
        self._setup(client, feed, key, ttl, holder, status)
        #: Set when the lease is lost (pushed ending, refused renewal, safe deadline).
        self.lost = threading.Event()
        #: Set when renewing should stop: the block ended, or the lease is lost.
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def __enter__(self) -> "Lease":
        feed = self._feed
        feed.room()
        # Raises Held (naming the holder) instead of entering the block.
        self._granted(self._client.claim(self.key, self.ttl, self.holder))
        self._following = feed.follow(self.key, self.token, self._lose)
        self._thread = threading.Thread(target=self._renew_loop, name=f"baton-lease {self.key}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.held():
                self._client.release(self.key, self.token, self.status)
        except BatonError as e:
            self._release_failed(e, exc)
        finally:
            self._feed.unfollow(self._following)

    def _lose(self, loss: Loss) -> None:
        """Records the first loss; called by the renewing thread, the feed, or `check()`."""
        with self._lock:
            if not self.lost.is_set():
                self.loss = loss
                self.lost.set()
        self._stop.set()

    def _renew_loop(self) -> None:
        wait = self._next_renewal()
        while True:
            # Wake for the next renewal, or at the safe deadline, whichever is first.
            if self._stop.wait(self._until_renewal(wait)):
                return
            deadline = self._renewal_due()
            if deadline is None:
                return
            safe_until, failure = None, None
            try:
                _, safe_until = self._client.renew(self.key, self.token, deadline=deadline)
            except BatonError as e:
                failure = e
            wait = self._renewed(safe_until, failure)
            if wait is None:
                return
