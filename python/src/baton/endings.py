"""Hearing at once that a lease ended: one `Endings` stream per client session from the
leader, shared by every `Lease` of the `Client`, as the Rust client's `endings` module.

When a lease ends other than by its holder's own release (revoked, handed off, expired),
the leader pushes the facts to the session that held it as the ending entry applies. The
feed keeps one stream per session however many leases it follows, open while any is
followed, and hands each ending to the leases of its key and token. After a break (a node died,
the leader changed, the stream went quiet for `ENDINGS_SILENCE`) it resumes at the leader
it can find from where it was, so no ending is missed; past the leader's window it re-reads
each followed lease linearizably and tells the ones that are gone.

The same stream tells the session's waits in line (`Client.wait_in_line`) that the line
granted them their key, as the granting entry applies on the leader (`grants` in the
request: the leader sends them only to a stream that asks).

The stream only speeds the news up: a lease still renews and still stops at its safe
deadline, which is what holds when no news can arrive (a holder cut off from the cluster).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

import grpc

from ._convert import actor, key_holders, maybe, maybe_assignment
from ._transport import BACKOFF_INITIAL, BACKOFF_MAX, Transport
from .errors import BatonError, InvalidArgument
from .types import EXPIRED, GONE, HANDED_OFF, REVOKED, Loss
from .v1 import baton_pb2 as pb
from .v1 import baton_pb2_grpc as rpc

#: Leases one session follows through its stream; a lease beyond it is refused
#: (`InvalidArgument`) before anything is claimed.
LEASES_PER_SESSION_MAX = 100_000
#: Endings kept for tokens no lease follows yet (a lease ended in the moment between its
#: grant's answer and its following); the oldest is dropped first.
EARLY_ENDINGS_MAX = 1024
#: Grants from a line kept for a wait that is not listening yet; the oldest is dropped first.
EARLY_GRANTS_MAX = 1024
#: `LeaseEnding.what` of a grant from a key's line (baton_proto::GRANTED_FROM_LINE).
GRANTED_FROM_LINE = "granted"
#: After a node answered that it does not know the call (a node older than this client),
#: the stream is tried again after this long (seconds); the leases renew as before.
ENDINGS_UNSUPPORTED_RETRY = 30.0
#: `LeaseEnding.what` of the leader's progress markers (baton_proto::ENDINGS_PROGRESS): no
#: ending, only the revision the stream is up to date with.
ENDINGS_PROGRESS = "progress"
#: The leader sends a marker every 500 ms while it hears from a quorum; hearing nothing for
#: this long (seconds, baton_proto::ENDINGS_SILENCE_MS) means the node is cut off or no
#: longer leads, so the feed looks for the leader again.
ENDINGS_SILENCE = 2.0

_PUSHED = (REVOKED, HANDED_OFF, EXPIRED)


def _loss(m) -> Loss:
    return Loss(
        what=m.what if m.what in _PUSHED else GONE,
        by=maybe(m, "by", actor),
        reason=m.reason,
        new_holder=m.new_holder or None,
        new_token=m.new_token or None,
        revision=m.revision,
        at_unix_ms=m.at_unix_ms,
    )


class Following:
    """A lease's place at the feed: `tell` is called once, with its ending."""

    def __init__(self, key: str, token: int, tell: Callable[[Loss], None]):
        self.key = key
        self.token = token
        self.tell = tell


class LineGrant:
    """A grant a key's line made to this session, as the leader pushed it."""

    def __init__(self, key: str, token: int, revision: int, at_unix_ms: int, assignment=None, permits=None):
        self.key = key
        self.token = token
        self.revision = revision
        self.at_unix_ms = at_unix_ms
        # The key's assignment (`Assignment`), if it has one.
        self.assignment = assignment
        # For a permit or a share: the key's holders (`KeyHolders`), this grant among them,
        # as the leader read them when it pushed it; None from an older node.
        self.permits = permits


class Listening:
    """A wait's place at the feed: `heard` is set once, with `grant` (a `LineGrant`, maybe
    of an earlier wait: the waiter compares revisions) or with `grant` None (the stream
    could not say: ask the cluster)."""

    def __init__(self, key: str):
        self.key = key
        self.grant: Optional[LineGrant] = None
        self.heard = threading.Event()
        #: Called (from the stream's thread) after `heard` is set, if given: how an asyncio
        #: wait (`aio`) is woken. Whoever sets it checks `heard` afterwards.
        self.notify: Optional[Callable[[], None]] = None

    def tell(self, grant: Optional[LineGrant]) -> None:
        self.grant = grant
        self.heard.set()
        notify = self.notify
        if notify is not None:
            notify()


# How one stream's life ended.
_IDLE, _COMPACTED, _UNSUPPORTED, _RETRY_NOW, _RETRY_LATER = range(5)


class Feed:
    """The session's stream and the leases that listen to it. Thread-safe."""

    def __init__(self, client, transport: Transport):
        self._client = client
        self._transport = transport
        self._lock = threading.Lock()
        #: (Key, token) -> its followers (a claim of a key already held keeps the token, so
        #: two leases may share one). The key too: every key of a claimed set has the set's
        #: one token, and the ending of one is no news for the others.
        self._followers: Dict[Tuple[str, int], List[Following]] = {}
        self._count = 0
        #: Endings for leases nobody followed yet, newest last.
        self._early: Deque[Tuple[Tuple[str, int], Loss]] = deque()
        #: Key -> the waits in its line listening for their grant.
        self._waits: Dict[str, List[Listening]] = {}
        self._waiting = 0
        #: Grants for keys no wait listened to, newest last.
        self._early_grants: Deque[LineGrant] = deque()
        self._thread: Optional[threading.Thread] = None
        #: The revision the stream resumes from.
        self._next = 0
        self._call = None
        self._closed = False
        #: Set when no lease is followed any more, or the client closed: cuts waits short.
        self._idle = threading.Event()

    def room(self) -> None:
        """Raises `InvalidArgument` if another lease would be one too many for the session."""
        with self._lock:
            if self._count >= LEASES_PER_SESSION_MAX:
                raise InvalidArgument(
                    f"this session follows {self._count} leases already (LEASES_PER_SESSION_MAX); "
                    "release some, or use another Client (another session)"
                )

    def follow(self, key: str, token: int, tell: Callable[[Loss], None]) -> Optional[Following]:
        """Follows the lease `token` of `key`, starting the stream if it is not running.
        None past `LEASES_PER_SESSION_MAX` (the renewals still decide)."""
        following = Following(key, token, tell)
        early = None
        with self._lock:
            if self._count >= LEASES_PER_SESSION_MAX or self._closed:
                return None
            for i, (t, loss) in enumerate(self._early):
                if t == (key, token):
                    early = loss
                    del self._early[i]
                    break
            else:
                self._followers.setdefault((key, token), []).append(following)
                self._count += 1
                self._idle.clear()
            if self._thread is None:
                # Nothing ran, so nothing was heard: this lease's ending comes after its
                # grant, at `token` + 1 or later.
                self._next = token + 1
                self._thread = threading.Thread(
                    target=self._run, name=f"baton-endings {self._client.client_id}", daemon=True
                )
                self._thread.start()
        if early is not None:
            tell(early)
        return following

    def listen_line(self, key: str, after: int) -> Listening:
        """Listens for the line's grant of `key` to this session, whose latest wait answered
        "in line" at revision `after`, starting the stream if it is not running. A grant heard
        before, of a later revision, is told at once."""
        listening = Listening(key)
        early = None
        with self._lock:
            kept: Deque[LineGrant] = deque()
            for grant in self._early_grants:
                if grant.key != key:
                    kept.append(grant)
                elif grant.revision > after and early is None:
                    early = grant
            self._early_grants = kept
            if early is None and not self._closed:
                self._waits.setdefault(key, []).append(listening)
                self._waiting += 1
                self._idle.clear()
            if self._thread is None and not self._closed:
                # The grant comes in an entry after the wait's.
                self._next = after + 1
                self._thread = threading.Thread(
                    target=self._run, name=f"baton-endings {self._client.client_id}", daemon=True
                )
                self._thread.start()
        if early is not None:
            listening.tell(early)
        return listening

    def stop_listening(self, listening: Listening) -> None:
        with self._lock:
            waits = self._waits.get(listening.key, [])
            if listening in waits:
                waits.remove(listening)
                self._waiting -= 1
                if not waits:
                    del self._waits[listening.key]
            if self._count == 0 and self._waiting == 0:
                self._stop_stream()

    def _deliver_grant(self, grant: LineGrant) -> None:
        """Tells the waits in `grant`'s key's line, or keeps it for one that listens late."""
        with self._lock:
            waits = self._waits.pop(grant.key, [])
            self._waiting -= len(waits)
            if not waits:
                if len(self._early_grants) >= EARLY_GRANTS_MAX:
                    self._early_grants.popleft()
                self._early_grants.append(grant)
        for listening in waits:
            listening.tell(grant)

    def _recheck_waits(self) -> None:
        """Tells every wait that the stream missed what it was to hear: each asks the cluster."""
        with self._lock:
            waits = [w for ws in self._waits.values() for w in ws]
            self._waits.clear()
            self._waiting = 0
            self._early_grants.clear()
        for listening in waits:
            listening.tell(None)

    def unfollow(self, following: Optional[Following]) -> None:
        if following is None:
            return
        with self._lock:
            followed = (following.key, following.token)
            followers = self._followers.get(followed, [])
            if following in followers:
                followers.remove(following)
                self._count -= 1
                if not followers:
                    del self._followers[followed]
            if self._count == 0 and self._waiting == 0:
                self._stop_stream()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_stream()

    def _stop_stream(self) -> None:
        # Under the lock.
        self._idle.set()
        if self._call is not None:
            self._call.cancel()

    def _deliver(self, key: str, token: int, loss: Loss) -> None:
        """Tells the followers of `key`'s lease `token`, or keeps the ending for one that
        follows late."""
        ended = (key, token)
        with self._lock:
            followers = self._followers.pop(ended, [])
            self._count -= len(followers)
            if not followers and all(t != ended for t, _ in self._early):
                if len(self._early) >= EARLY_ENDINGS_MAX:
                    self._early.popleft()
                self._early.append((ended, loss))
        for following in followers:
            following.tell(loss)

    def _done(self) -> bool:
        """Whether the stream should stop; if so, the thread is no longer running."""
        with self._lock:
            if (self._count == 0 and self._waiting == 0) or self._closed:
                self._thread = None
                return True
            return False

    def _run(self) -> None:
        backoff = BACKOFF_INITIAL
        try:
            while not self._done():
                broke, healthy = self._stream_once()
                if healthy:
                    backoff = BACKOFF_INITIAL
                if broke == _COMPACTED and self._recheck():
                    continue
                if broke == _UNSUPPORTED:
                    self._idle.wait(ENDINGS_UNSUPPORTED_RETRY)
                elif broke in (_COMPACTED, _RETRY_LATER):
                    self._idle.wait(backoff * (0.5 + random.random() / 2))
                    backoff = min(backoff * 2, BACKOFF_MAX)
        finally:
            # Should this thread die of an error, the next lease followed starts another.
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _stream_once(self) -> Tuple[int, bool]:
        """Reads one stream at the leader (as far as the client knows it) until it breaks or
        no lease is followed: how it broke, and whether it lived past the silence limit."""
        client = self._client
        endpoint = self._transport.pick()
        with self._lock:
            if (self._count == 0 and self._waiting == 0) or self._closed:
                return _IDLE, False
            request = pb.EndingsRequest(client_id=client.client_id, from_revision=self._next, grants=True)
            channel = self._transport.channel(endpoint)
            call = rpc.BatonStub(channel).Endings(request, metadata=self._transport.metadata)
            self._call = call
        # grpc's blocking iterator has no timeout: a helper thread reads, this one waits on
        # the queue for at most the silence limit. The helper ends with the call.
        inbox: "queue.Queue" = queue.Queue()
        threading.Thread(target=_pump, args=(call, inbox), name="baton-endings-read", daemon=True).start()
        opened = time.monotonic()
        healthy = False
        try:
            while True:
                try:
                    message, error = inbox.get(timeout=ENDINGS_SILENCE)
                except queue.Empty:
                    self._transport.failed(endpoint, suspect=False)
                    return _RETRY_NOW, healthy
                if message is None:
                    return self._broke(endpoint, error), healthy
                healthy = healthy or time.monotonic() - opened > ENDINGS_SILENCE
                if message.what == ENDINGS_PROGRESS:
                    with self._lock:
                        self._next = max(self._next, message.revision + 1)
                    continue
                if message.what == GRANTED_FROM_LINE:
                    self._deliver_grant(
                        LineGrant(
                            message.key,
                            message.token,
                            message.revision,
                            message.at_unix_ms,
                            maybe_assignment(message, "assignment"),
                            _own_holders(message),
                        )
                    )
                else:
                    self._deliver(message.key, message.token, _loss(message))
                with self._lock:
                    # Resume from this revision, not the next: one entry may end several
                    # leases of the session, and a repeat is harmless (a token is told once).
                    self._next = max(self._next, message.revision)
                    if self._count == 0 and self._waiting == 0:
                        return _IDLE, healthy
        finally:
            call.cancel()
            with self._lock:
                if self._call is call:
                    self._call = None

    def _broke(self, endpoint: str, error: Optional[grpc.RpcError]) -> int:
        """What the end of a stream (at its open, or later) means."""
        code = error.code() if error is not None else None
        if code == grpc.StatusCode.CANCELLED:
            # Only the feed cancels its calls: no lease is followed, or the client closed.
            return _IDLE
        if code == grpc.StatusCode.OUT_OF_RANGE:
            return _COMPACTED
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return _UNSUPPORTED
        leader = None
        if error is not None:
            leader = self._transport.learn_leader(error.trailing_metadata()) or self._transport.learn_leader(
                error.initial_metadata()
            )
        if leader is not None and leader != endpoint:
            return _RETRY_NOW
        self._transport.failed(endpoint, suspect=False)
        return _RETRY_LATER

    def _recheck(self) -> bool:
        """Past the leader's window: tells each wait to renew its place (its answer says if the
        line granted the key), reads each followed lease linearizably, tells the followers of
        the ones that are gone, and resumes from before the earliest read. With waits, the
        first read comes before they are told: a grant after it is on the stream, one before
        it in the renewal's answer (as the Rust client). With nothing to read, from the
        leader's current revision. False if a read failed (the stream is tried again later;
        renewals go on meanwhile)."""
        with self._lock:
            waited = next(iter(self._waits), None)
        resume = None
        if waited is not None:
            try:
                resume = self._client.probe(waited).revision
            except BatonError:
                return False
        self._recheck_waits()
        with self._lock:
            leases = [followed for followed, f in self._followers.items() if f]
        for key, token in leases:
            try:
                probe = self._client.probe(key)
            except BatonError:
                return False
            resume = probe.revision if resume is None else min(resume, probe.revision)
            current = probe.lease
            if _still_held(probe, token):
                continue
            self._deliver(
                key,
                token,
                Loss(
                    what=GONE,
                    new_holder=current.holder if current else None,
                    new_token=current.token if current else None,
                    revision=probe.revision,
                ),
            )
        with self._lock:
            self._next = 0 if resume is None else resume + 1
        return True


def _still_held(probe, token: int) -> bool:
    """Whether `token` still holds the probed key: its one lease, or any of its permit or
    shared holders (`probe.lease` is then only the first of them)."""
    if probe.lease is not None and probe.lease.token == token:
        return True
    return probe.permits is not None and any(h.token == token for h in probe.permits.holders)


def _pump(call, inbox: "queue.Queue") -> None:
    """Moves a stream's messages to `inbox`, then (None, the error or None) at its end."""
    try:
        for message in call:
            inbox.put((message, None))
        inbox.put((None, None))
    except grpc.RpcError as e:
        inbox.put((None, e))


def _own_holders(message):
    """A pushed grant's holders (`KeyHolders`) if they name the granted lease, else None (the
    waiter then confirms with a wait)."""
    holders = maybe(message, "permits", key_holders)
    if holders is None or not any(lease.token == message.token for lease in holders.holders):
        return None
    return holders
