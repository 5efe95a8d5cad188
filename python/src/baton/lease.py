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


class Lease:
    def __init__(self, client, feed, key: str, ttl: float, holder: Optional[str], status: str):
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
        #: Set when the lease is lost (pushed ending, refused renewal, safe deadline).
        self.lost = threading.Event()
        #: How it was lost (a `Loss`), once it is.
        self.loss: Optional[Loss] = None
        #: Set when renewing should stop: the block ended, or the lease is lost.
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._following = None
        self._lock = threading.Lock()

    def __enter__(self) -> "Lease":
        feed = self._feed
        feed.room()
        # Raises Held (naming the holder) instead of entering the block.
        self.grant = self._client.claim(self.key, self.ttl, self.holder)
        self.token = self.grant.token
        self.safe_until = self.grant.safe_until
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
        except Lost as e:
            self._lose(Loss(TAKEN, reason="found at the release", new_holder=e.holder, new_token=e.token))
        except BatonError:
            # The lease ends at its TTL anyway; an exception from the block wins.
            if exc is None:
                raise
        finally:
            self._feed.unfollow(self._following)

    def held(self) -> bool:
        """True while the lease is provably this session's (before its safe deadline)."""
        return not self.lost.is_set() and time.monotonic() < self.safe_until

    def check(self) -> None:
        """Raises `LeaseLost` unless the lease is still provably held: call it before each
        step that acts on the key."""
        if not self.held():
            self._lose(Loss(UNCONFIRMED, reason="no renewal was answered"))
            raise LeaseLost(f"lost {self.key} (token {self.token}): {self.loss}", self.loss)

    def _lose(self, loss: Loss) -> None:
        """Records the first loss; called by the renewing thread, the feed, or `check()`."""
        with self._lock:
            if not self.lost.is_set():
                self.loss = loss
                self.lost.set()
        self._stop.set()

    def _renew_loop(self) -> None:
        interval = self.ttl / RENEWALS_PER_TTL
        retry = max(self.ttl / RENEW_RETRIES_PER_TTL, RENEW_RETRY_INTERVAL_MIN)
        wait = interval * (1 + random.uniform(-RENEW_JITTER_FRACTION, RENEW_JITTER_FRACTION))
        while True:
            # Wake for the next renewal, or at the safe deadline, whichever is first.
            until_deadline = self.safe_until - time.monotonic()
            if self._stop.wait(max(0.0, min(wait, until_deadline))):
                return
            if time.monotonic() >= self.safe_until:
                self._lose(Loss(UNCONFIRMED, reason="no renewal was answered"))
                return
            deadline = min(self.safe_until, time.monotonic() + self.ttl / RENEW_CALL_TTL_DIVISOR)
            try:
                _, safe_until = self._client.renew(self.key, self.token, deadline=deadline)
            except Lost as e:
                self._lose(Loss(TAKEN, new_holder=e.holder, new_token=e.token))
                return
            except Refused as e:
                # Final: another session's token cannot become ours by retrying.
                self._lose(Loss(REFUSED, reason=str(e)))
                return
            except BatonError as e:
                if time.monotonic() >= self.safe_until:
                    self._lose(Loss(UNCONFIRMED, reason=f"the last renewal failed: {e}"))
                    return
                wait = retry
                continue
            if time.monotonic() >= self.safe_until:
                # The answer came too late to count: the window had already closed.
                self._lose(Loss(UNCONFIRMED, reason="the renewal was answered too late"))
                return
            self.safe_until = safe_until
            wait = interval * (1 + random.uniform(-RENEW_JITTER_FRACTION, RENEW_JITTER_FRACTION))
