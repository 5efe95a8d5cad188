"""How a client reaches the cluster: one channel per node, which node to ask (the leader it
last heard of, else the next one not suspected), and the retry loop of one logical request.
Private to the package: the client, its watches and its endings stream share one
`Transport`, handed to them by the client."""

from __future__ import annotations

import random
import threading
import time
from typing import Dict, List, Optional

import grpc

from ._convert import error, metadata_value
from .errors import InvalidArgument, Unavailable
from .v1 import baton_pb2_grpc as rpc

#: Most channels one client keeps open: its endpoints plus leaders it was pointed to.
CHANNELS_MAX = 64
BACKOFF_INITIAL = 0.05
BACKOFF_MAX = 1.0
#: How long a node that failed is not adopted as leader on another node's word.
SUSPECT_FOR = 3.0
LEADER_METADATA_KEY = "x-baton-leader"
#: Sent with a request's first attempt only: the leader may then answer a claim of a held
#: key from a read (no log entry), safe only while no other copy of the request exists.
FIRST_ATTEMPT_METADATA = (("x-baton-first-attempt", "1"),)
#: `Event.kind` of a node's watch progress markers (not events; they move the resume point).
PROGRESS_KIND = "progress"
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED}
#: The largest gRPC message this client accepts (a board page, a history).
MESSAGE_BYTES_MAX = 64 * 1024 * 1024


def normalize(endpoint: str):
    """`host:port`, `http://host:port`, `https://host:port` -> (`host:port`, is_tls)."""
    raw = endpoint.strip()
    tls = raw.startswith("https://")
    for scheme in ("http://", "https://"):
        if raw.startswith(scheme):
            raw = raw[len(scheme):]
    raw = raw.rstrip("/")
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgument(f"invalid endpoint {endpoint!r}: give host:port")
    return raw, tls


class Transport:
    """Channels, routing and retries for one client. Thread-safe."""

    def __init__(self, endpoints: List[str], tls, metadata, retry_deadline: float, request_timeout: float):
        self.endpoints = endpoints
        #: Sent with every request (the bearer token, if any).
        self.metadata = metadata
        self.retry_deadline = retry_deadline
        self.request_timeout = request_timeout
        self._tls = tls
        self._lock = threading.Lock()
        self._channels: Dict[str, grpc.Channel] = {}
        self._cursor = 0
        self._leader: Optional[str] = None
        self._suspects: Dict[str, float] = {}

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()

    @property
    def leader(self) -> Optional[str]:
        return self._leader

    def channel(self, endpoint: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(endpoint)
            if channel is None:
                options = [
                    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
                    ("grpc.enable_retries", 0),
                ]
                if self._tls is not None:
                    channel = grpc.secure_channel(endpoint, self._tls.credentials, options)
                else:
                    channel = grpc.insecure_channel(endpoint, options)
                if len(self._channels) >= CHANNELS_MAX:
                    _, old = self._channels.popitem()
                    old.close()
                self._channels[endpoint] = channel
            return channel

    def pick(self) -> str:
        """The node to ask: the leader last heard of, else the next one not suspected."""
        with self._lock:
            if self._leader is not None:
                return self._leader
            now = time.monotonic()
            for _ in range(len(self.endpoints)):
                endpoint = self.endpoints[self._cursor % len(self.endpoints)]
                if now - self._suspects.get(endpoint, -1e9) >= SUSPECT_FOR:
                    return endpoint
                self._cursor += 1
            return self.endpoints[self._cursor % len(self.endpoints)]

    def failed(self, endpoint: str, suspect: bool) -> None:
        """`endpoint` did not answer: ask another next (and, if `suspect`, take no node's
        word that it leads for `SUSPECT_FOR`)."""
        with self._lock:
            if suspect:
                self._suspects[endpoint] = time.monotonic()
            if self._leader == endpoint:
                self._leader = None
            if self.endpoints[self._cursor % len(self.endpoints)] == endpoint:
                self._cursor += 1

    def learn_leader(self, metadata) -> Optional[str]:
        """The leader a node named in `metadata`, adopted unless it is suspected."""
        raw = metadata_value(metadata, LEADER_METADATA_KEY)
        if not raw:
            return None
        try:
            leader, _ = normalize(raw)
        except InvalidArgument:
            return None
        with self._lock:
            if time.monotonic() - self._suspects.get(leader, -1e9) < SUSPECT_FOR:
                return None
            self._leader = leader
        return leader

    def call(self, service: str, method: str, request, deadline: Optional[float] = None):
        """One logical request until an answer, a non-retryable error, or the deadline."""
        deadline = deadline if deadline is not None else time.monotonic() + self.retry_deadline
        backoff = BACKOFF_INITIAL
        redirected = False
        last = "no attempt was made"
        first = True
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Unavailable(f"cluster unavailable: {last}")
            metadata = self.metadata + FIRST_ATTEMPT_METADATA if first else self.metadata
            first = False
            endpoint = self.pick()
            stub_class = rpc.BatonStub if service == "baton" else rpc.ClusterStub
            stub = stub_class(self.channel(endpoint))
            timeout = min(remaining, self.request_timeout)
            try:
                response, call = getattr(stub, method).with_call(
                    request, timeout=timeout, metadata=metadata
                )
                self.learn_leader(call.initial_metadata())
                return response
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE:
                    self.learn_leader(e.trailing_metadata())
                    raise error(e) from None
                last = f"{endpoint}: {e.code().name}: {e.details()}"
                leader = self.learn_leader(e.trailing_metadata()) or self.learn_leader(
                    e.initial_metadata()
                )
                if leader is None:
                    self.failed(endpoint, suspect=e.code() != grpc.StatusCode.ABORTED)
            if leader is not None and leader != endpoint and not redirected:
                redirected = True
                continue
            redirected = False
            time.sleep(min(backoff * (0.5 + random.random() / 2), max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, BACKOFF_MAX)
