"""`Watch`: the watch stream across node failures, as the Rust client's."""

from __future__ import annotations

import random
import threading
import time
from typing import Optional

import grpc

from ._convert import event
from ._transport import BACKOFF_INITIAL, BACKOFF_MAX, PROGRESS_KIND, RETRYABLE, Transport
from .errors import Unavailable
from .v1 import baton_pb2 as pb
from .v1 import baton_pb2_grpc as rpc

#: A stream that lasted this long before it broke was healthy: reconnect at once.
STREAM_HEALTHY_AFTER = BACKOFF_MAX


class Watch:
    """Iterates events of keys under a prefix in revision order. Any node serves a watch;
    when one fails the iterator connects to the next endpoint and asks for the revision
    after the last one it gave: no gap, no repeat. It ends with `Unavailable` when no node
    accepts the watch for the client's retry deadline, `Compacted` when every node says the
    revision is older than its window, or a typed error retrying cannot change.
    `next_revision` is where to resume a new watch."""

    def __init__(self, client, transport: Transport, prefix: str, from_revision: int):
        self._client = client
        self._transport = transport
        self.prefix = prefix
        self.next_revision = from_revision
        self._call = None
        self._closed = False
        self._lock = threading.Lock()
        self._cursor = random.randrange(len(client.endpoints))
        self._compacted_at: set = set()

    def __iter__(self):
        return self._events()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._call is not None:
                self._call.cancel()

    def _events(self):
        client = self._client
        if self.next_revision == 0:
            # "From now": the revision of a linearizable read, so that a reconnect before
            # the first event still starts from there.
            self.next_revision = client.board(self.prefix, limit=1).revision + 1
        backoff = BACKOFF_INITIAL
        outage_since: Optional[float] = None
        last = "no attempt was made"
        #: Endpoint -> (reason, text) of its failed TLS handshake since the last message.
        tls_failed: dict = {}
        while not self._closed:
            endpoint = client.endpoints[self._cursor % len(client.endpoints)]
            stub = rpc.BatonStub(self._transport.channel(endpoint))
            started = time.monotonic()
            with self._lock:
                if self._closed:
                    return
                self._call = stub.Watch(
                    pb.WatchRequest(prefix=self.prefix, from_revision=self.next_revision),
                    metadata=self._transport.metadata,
                )
            try:
                for message in self._call:
                    outage_since = None
                    backoff = BACKOFF_INITIAL
                    self._compacted_at.clear()
                    tls_failed.clear()
                    if message.revision < self.next_revision:
                        continue
                    self.next_revision = message.revision + 1
                    if message.kind == PROGRESS_KIND:
                        continue
                    yield event(message)
                last = f"{endpoint}: the stream ended"
            except grpc.RpcError as e:
                if self._closed or e.code() == grpc.StatusCode.CANCELLED:
                    return
                if e.code() == grpc.StatusCode.OUT_OF_RANGE:
                    self._compacted_at.add(endpoint)
                    if len(self._compacted_at) >= len(client.endpoints):
                        raise self._transport.error(e) from None
                elif e.code() not in RETRYABLE:
                    raise self._transport.error(e) from None
                else:
                    # Raises TLSError once every endpoint failed its TLS handshake.
                    self._transport.tls_failed(tls_failed, endpoint, e.details() or "")
                last = f"{endpoint}: {e.code().name}: {e.details()}"
            # Next endpoint; wait unless the stream was healthy for a while.
            self._cursor += 1
            now = time.monotonic()
            if outage_since is None:
                outage_since = now
            elif now - outage_since > client.retry_deadline:
                raise Unavailable(f"no node accepted the watch for {client.retry_deadline} s: {last}")
            if now - started < STREAM_HEALTHY_AFTER:
                time.sleep(backoff * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, BACKOFF_MAX)


def _looks(view):
    """What an observer compares to tell a change: the holder (session, token) and the
    record; a renewal changes neither."""
    holder = (view.lease.holder_client_id, view.lease.token) if view.lease is not None else None
    return holder, view.record


class Observe:
    """`Client.observe(key)`: the key's `RecordView` now, then at every change of its holder
    or record (see there)."""

    def __init__(self, client, key: str):
        self._client = client
        self.key = key
        self._watch: Optional[Watch] = None
        self._closed = False
        self._lock = threading.Lock()

    def __iter__(self):
        return self._views()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._watch is not None:
                self._watch.close()

    def _views(self):
        view = self._client.record(self.key)
        yield view
        last = _looks(view)
        with self._lock:
            if self._closed:
                return
            self._watch = self._client.watch(self.key, view.revision + 1)
        for event in self._watch:
            if event.key != self.key:
                continue  # the watch is of a prefix
            view = self._client.record(self.key)
            if _looks(view) != last:
                last = _looks(view)
                yield view
