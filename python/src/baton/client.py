"""`Client`: baton's calls over gRPC, blocking, with the Rust client's rules.

- Every write carries a `RequestId` (this process's retry slot, a sequence number, and the
  session = `client_id`); a retry reuses it, so the cluster applies the write at most once.
  The first attempt alone carries `x-baton-first-attempt`, as the Rust client's does.
- Each attempt goes to the leader when a node named it (`x-baton-leader`), else to the
  endpoints in rotation; a node that failed is skipped for a while. UNAVAILABLE, deadline
  and abort are retried with jittered backoff (50 ms doubling to 1 s) until the retry
  deadline; everything else is raised at once, typed (`errors`), and so is `TLSError` once
  every endpoint failed its TLS handshake.
- A grant's `safe_until` is the send time of the first attempt + TTL × (1 − drift margin),
  on `time.monotonic()`.

The calls themselves are written once, in `_ops`, for this client and `aio.Client`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import grpc

from ._ops import (
    CLAIM_SET_KEYS_MAX,
    DEFAULT_ENDPOINT,
    PERMITS_MAX,
    SHARED_HOLDERS_MAX,
    WAITERS_PER_KEY_MAX,
    Call,
    Ops,
    call_of,
)
from ._transport import Transport
from .errors import InvalidArgument

__all__ = [
    "Client",
    "TLS",
    "DEFAULT_ENDPOINT",
    "CLAIM_SET_KEYS_MAX",
    "WAITERS_PER_KEY_MAX",
    "PERMITS_MAX",
    "SHARED_HOLDERS_MAX",
]


class TLS:
    """TLS to the nodes: `ca` (PEM bytes or a path) to verify them, and optionally a client
    certificate and its key (PEM bytes or paths, both or neither) for mutual TLS: a cluster
    with `--tls-client-auth` takes the certificate's common name as the principal. A file
    that cannot be read, or a certificate without its key, raises `InvalidArgument`."""

    def __init__(self, ca, cert=None, key=None):
        if ca is None:
            raise InvalidArgument("TLS needs ca=: the CA that signed the nodes' certificates")
        if (cert is None) != (key is None):
            raise InvalidArgument("TLS takes a client certificate with its key: give both cert= and key=, or neither")

        def read(what, v):
            if v is None or isinstance(v, bytes):
                return v
            try:
                with open(v, "rb") as f:
                    return f.read()
            except OSError as e:
                raise InvalidArgument(f"TLS {what}: cannot read {v}: {e.strerror}") from None

        #: Whether the client shows a certificate (mutual TLS).
        self.has_certificate = cert is not None
        self.credentials = grpc.ssl_channel_credentials(
            root_certificates=read("ca", ca), private_key=read("key", key), certificate_chain=read("cert", cert)
        )


class Client(Ops):
    """A client of one baton cluster. Thread-safe: share one per process.

    `client_id` is the session every write acts as (leases answer to it only); an agent
    keeps one for its whole session (`BATON_CLIENT_ID`). `holder` is the default holder
    name of claims. `token` is a bearer token (with auth on), `tls` a `TLS`.
    """

    def __init__(
        self,
        endpoints: Sequence[str] | str = (DEFAULT_ENDPOINT,),
        client_id: Optional[str] = None,
        holder: Optional[str] = None,
        tls: Optional[TLS] = None,
        token: Optional[str] = None,
        retry_deadline: float = 10.0,
        request_timeout: float = 5.0,
        drift_margin: float = 0.05,
    ):
        metadata = self._configure(
            endpoints, client_id, holder, tls, token, retry_deadline, request_timeout, drift_margin
        )
        #: Channels, routing and retries, shared with this client's watches and its endings
        #: stream.
        self._transport = Transport(self.endpoints, tls, metadata, retry_deadline, request_timeout)
        from .endings import Feed

        #: The session's endings stream, shared by its `Lease`s.
        self._feed = Feed(self, self._transport)

    # ---- transport ------------------------------------------------------------------------

    def close(self) -> None:
        self._feed.close()
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def leader_hint(self) -> Optional[str]:
        return self._transport.leader

    def _call(self, service: str, method: str, request, deadline: Optional[float] = None):
        """One logical request until an answer, a non-retryable error, or the deadline."""
        return self._transport.call(service, method, request, deadline)

    def _run(self, op):
        """Runs the call `op` (an `_ops` generator) to its result: each `Call` through the
        transport, each `Hear` on the endings stream; a failure is thrown into `op`."""
        answer, failure = None, None
        while True:
            try:
                step = op.throw(failure) if failure is not None else op.send(answer)
            except StopIteration as done:
                return done.value
            answer, failure = None, None
            try:
                if isinstance(step, Call):
                    answer = self._transport.call(*step)
                else:
                    answer = step.listening.heard.wait(step.timeout)
            except BaseException as e:  # noqa: BLE001 - thrown into `op`, which re-raises it
                failure = e

    claim = call_of(Ops._op_claim)
    claim_set = call_of(Ops._op_claim_set)
    renew = call_of(Ops._op_renew)
    release = call_of(Ops._op_release)
    probe = call_of(Ops._op_probe)
    board = call_of(Ops._op_board)
    check = call_of(Ops._op_check)
    revoke = call_of(Ops._op_revoke)
    wait_once = call_of(Ops._op_wait_once)
    leave_line = call_of(Ops._op_leave_line)
    wait_in_line = call_of(Ops._op_wait_in_line)
    update = call_of(Ops._op_update)
    assign = call_of(Ops._op_assign)
    unassign = call_of(Ops._op_unassign)
    post = call_of(Ops._op_post)
    claim_next = call_of(Ops._op_claim_next)
    record = call_of(Ops._op_record)
    history = call_of(Ops._op_history)
    offer = call_of(Ops._op_offer)
    accept = call_of(Ops._op_accept)
    decline = call_of(Ops._op_decline)
    cancel = call_of(Ops._op_cancel)

    # ---- watch and lease ------------------------------------------------------------------

    def watch(self, prefix: str = "", from_revision: int = 0) -> "Watch":
        """Every event of keys under `prefix` from `from_revision` (0: from now), in order,
        resuming on another node after a failure with no gap and no repeat. An iterator;
        `close()` it (or leave the `with` block) to stop."""
        from .watch import Watch

        return Watch(self, self._transport, prefix, from_revision)

    def observe(self, key: str):
        """Leader election's observe (docs/election.md): yields `key`'s `RecordView` now (its
        holder, if any, and its record), then again after every change of its holder or of its
        record, each a linearizable read made after the watch told of the change (views never
        go back; changes close together may come as one view; renewals are not changes).
        An iterator; it ends by raising what ends the watch (`Compacted`: observe again).
        `close()` it (from any thread) or leave its `with` block to stop."""
        from .watch import Observe

        return Observe(self, key)

    def lease(self, key: str, ttl: float = 30.0, holder: Optional[str] = None, status: str = ""):
        """`with client.lease(key, ttl=30) as lease:` claims `key` (raising `Held` instead
        of entering the block when another holds it), renews it in the background every
        TTL/3, and releases it on exit (setting the record's final `status` if given, or
        `lease.status` set in the block). `lease.lost` is set at once when the cluster
        pushes that the lease ended (`lease.loss` says how, by whom and why), else at a
        refused renewal or the safe deadline. Past `endings.LEASES_PER_SESSION_MAX` leases
        in the block at once, raises `InvalidArgument` before claiming."""
        from .lease import Lease

        return Lease(self, self._feed, key, ttl, holder, status)

