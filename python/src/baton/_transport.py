"""How a client reaches the cluster: one channel per node, which node to ask (the leader it
last heard of, else the next one not suspected), and the retry loop of one logical request.
Private to the package: the client, its watches and its endings stream share one
`Transport`, handed to them by the client."""

from __future__ import annotations

import random
import threading
import time
from typing import Dict, List, Optional, Tuple

import grpc

from ._convert import error, metadata_value
from .errors import BatonError, CredentialsRequired, InvalidArgument, TLSError, Unauthenticated, Unavailable
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
#: Sent with every attempt after one that may have reached the cluster: the cluster applies
#: such a retry only if it can match it to its first attempt, else refuses it as too old
#: (`UNKNOWN`), never applying it afresh (data format 15).
RETRY_METADATA = (("x-baton-retry", "1"),)
#: Trailing metadata of a failure a node answers knowing it proposed nothing of the request:
#: the next attempt is still a first one.
UNPROPOSED_METADATA_KEY = "x-baton-unproposed"
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
        #: Whether a write of this client was answered: the cluster then knows its retry
        #: id, and retries are marked from then on (see `Attempts.next`).
        self.answered_write = False

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
                channel = self._open(endpoint, options)
                if len(self._channels) >= CHANNELS_MAX:
                    _, old = self._channels.popitem()
                    self._discard(old)
                self._channels[endpoint] = channel
            return channel

    def _open(self, endpoint: str, options) -> grpc.Channel:
        if self._tls is not None:
            return grpc.secure_channel(endpoint, self._tls.credentials, options)
        return grpc.insecure_channel(endpoint, options)

    def _discard(self, channel) -> None:
        channel.close()

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
        attempts = Attempts(self, deadline, writes=_writes(request))
        while True:
            endpoint, timeout, metadata = attempts.next()
            stub = STUBS[service](self.channel(endpoint))
            try:
                response, call = getattr(stub, method).with_call(request, timeout=timeout, metadata=metadata)
            except grpc.RpcError as e:
                time.sleep(attempts.failed(endpoint, e))
                continue
            attempts.answered()
            self.learn_leader(call.initial_metadata())
            return response

    def tls_failed(self, failed: Dict[str, Tuple[str, str]], endpoint: str, details: str) -> bool:
        """Whether an attempt's failure at `endpoint` (grpc's `details`) was its TLS
        handshake's: if so it is noted in `failed` (endpoint -> (reason, text), one request's
        or one watch's) and the endpoint is suspected, and once every endpoint has failed so,
        `TLSError` is raised."""
        tls = self._tls
        reason = tls_failure(details, tls.has_certificate) if tls is not None else None
        if reason is None:
            return False
        failed[endpoint] = (reason, details)
        self.failed(endpoint, suspect=True)
        if len(failed) >= len(self.endpoints):
            raise TLSError(
                f"no TLS connection to {', '.join(failed)}: {_TLS_ADVICE[reason]} ({details})",
                reason,
                failed,
                details,
            ) from None
        return True

    def presented(self) -> Dict[str, bool]:
        """What credentials this client gives (facts of an `Unauthenticated`)."""
        return {
            "presented_certificate": self._tls is not None and self._tls.has_certificate,
            "presented_token": any(k == "authorization" for k, _ in self.metadata),
        }

    def error(self, e: grpc.RpcError) -> BatonError:
        """The typed error of a status no retry can change, with what this client presented
        when the cluster asks for credentials."""
        typed = error(e)
        if isinstance(typed, Unauthenticated):
            presented = self.presented()
            if not any(presented.values()):
                return CredentialsRequired(
                    f"{typed}; this client gave no credentials: for a client certificate give "
                    "tls=TLS(ca=..., cert=..., key=...), for a bearer token token=...",
                    **presented,
                )
            return Unauthenticated(str(typed), **presented)
        return typed


#: The stub class of each service `Transport.call` takes.
STUBS = {"baton": rpc.BatonStub, "cluster": rpc.ClusterStub}


def tls_failure(details: str, client_certificate: bool) -> Optional[str]:
    """The `TLSError.reason` of a failed attempt whose text (grpc's: it gives the handshake's
    failure only as text) says the TLS handshake failed, else None."""
    text = details.lower()
    if "handshake failed" in text:
        if "wrong_version_number" in text:
            return "plaintext_node"
        if "certificate" in text:
            return "untrusted_certificate"
        return "handshake_failed"
    if "verification check failed" in text:
        # grpc's check of the certificate's host names, after the handshake.
        return "untrusted_certificate"
    if client_certificate and "tsi_data_corrupted" in text:
        # The node's alert after it checked the client's certificate (TLS 1.3 sends it after
        # the handshake), which grpc reads as a record it cannot decrypt.
        return "client_certificate_rejected"
    return None


_TLS_ADVICE = {
    "untrusted_certificate": "the node's certificate did not verify against the CA given (TLS(ca=...)): "
    "give the CA that signed the nodes' certificates",
    "client_certificate_rejected": "the node refused this client's certificate: give one that the "
    "nodes' CA signed (TLS(cert=..., key=...))",
    "plaintext_node": "the node does not speak TLS: drop tls=, or turn TLS on at the node",
    "handshake_failed": "the TLS handshake failed",
}


class Attempts:
    """The state of one logical request's attempts, shared by the blocking and the asyncio
    calls: which endpoint next, with what timeout and metadata, what a failure means (raise,
    redirect, or back off), and when to give up."""

    def __init__(self, transport: Transport, deadline: Optional[float], writes: bool = False):
        self.transport = transport
        #: The request carries a request id (a write).
        self.writes = writes
        self.deadline = deadline if deadline is not None else time.monotonic() + transport.retry_deadline
        self.backoff = BACKOFF_INITIAL
        self.redirected = False
        self.last = "no attempt was made"
        self.first = True
        #: Whether an earlier attempt may have reached the cluster (then each is a retry).
        self.maybe_delivered = False
        #: Endpoint -> (reason, text) of its failed TLS handshake in this request.
        self.tls_failed: Dict[str, Tuple[str, str]] = {}

    def next(self) -> Tuple[str, float, tuple]:
        """(endpoint, timeout, metadata) of the next attempt; raises `Unavailable` past the
        deadline."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise Unavailable(f"cluster unavailable: {self.last}{self._hint()}")
        t = self.transport
        metadata = t.metadata + FIRST_ATTEMPT_METADATA if self.first else t.metadata
        # Only once a write of this client was answered: before that the cluster knows nothing
        # of its retry id, and could not tell a lost first attempt from one never applied.
        if self.maybe_delivered and t.answered_write:
            metadata = metadata + RETRY_METADATA
        self.first = False
        return t.pick(), min(remaining, t.request_timeout), metadata

    def failed(self, endpoint: str, e: grpc.RpcError) -> float:
        """After a failed attempt at `endpoint`: raises the typed error if retrying cannot
        help, else returns how long to wait before the next attempt (0: at once)."""
        t = self.transport
        if e.code() not in RETRYABLE:
            self.answered()
            t.learn_leader(e.trailing_metadata())
            raise t.error(e) from None
        details = e.details() or ""
        self.last = f"{endpoint}: {e.code().name}: {details}"
        tls_failed = t.tls_failed(self.tls_failed, endpoint, details)
        if not (tls_failed or _never_proposed(e, details)):
            self.maybe_delivered = True
        if tls_failed:
            leader = None
        else:
            leader = t.learn_leader(e.trailing_metadata()) or t.learn_leader(e.initial_metadata())
            if leader is None:
                t.failed(endpoint, suspect=e.code() != grpc.StatusCode.ABORTED)
        if leader is not None and leader != endpoint and not self.redirected:
            self.redirected = True
            return 0.0
        self.redirected = False
        delay = min(self.backoff * (0.5 + random.random() / 2), max(0.0, self.deadline - time.monotonic()))
        self.backoff = min(self.backoff * 2, BACKOFF_MAX)
        return delay

    def answered(self) -> None:
        """A node answered the request (not an outage): for a write, the cluster knows this
        client's retry id from now on."""
        if self.writes:
            self.transport.answered_write = True

    def _hint(self) -> str:
        """What the last failure suggests about TLS, if anything."""
        if self.transport._tls is None and "socket closed" in self.last.lower():
            # A TLS node closes a plaintext client's connection ("a client spoke plaintext to
            # this TLS port", its log says).
            return " (if the nodes speak TLS, give the client their CA: tls=TLS(ca=...))"
        if self.tls_failed:
            reason, _ = next(reversed(self.tls_failed.values()))
            return f" (TLS: {_TLS_ADVICE[reason]})"
        return ""


def _never_proposed(e: grpc.RpcError, details: str) -> bool:
    """Whether a failed attempt certainly proposed nothing: the connection was refused (grpc
    says so only in its text), or the node said so in its trailing metadata. Anything else (a
    timeout, a reset, an outage answered by a node) may have reached the log."""
    if "connection refused" in details.lower():
        return True
    return any(key == UNPROPOSED_METADATA_KEY for key, _ in (e.trailing_metadata() or ()))


def _writes(request) -> bool:
    """Whether `request` carries a request id (a write)."""
    descriptor = getattr(request, "DESCRIPTOR", None)
    return descriptor is not None and "request_id" in descriptor.fields_by_name
