"""What every call of baton does, written once for the blocking `Client` and the asyncio
`aio.Client`: each call is a generator that builds its request, yields a `Call` (one logical
request, which the client's transport sends with its retries) or a `Hear` (wait for the
session's endings stream to tell a wait in line of its grant, at most `timeout` seconds),
is sent the answer (or has the failure thrown in), and returns the typed result.

- Every write carries a `RequestId` (this process's retry slot, a sequence number, and the
  session = `client_id`); a retry reuses it, so the cluster applies the write at most once.
- A grant's `safe_until` is the send time of the first attempt + TTL × (1 − drift margin),
  on `time.monotonic()`.
"""

from __future__ import annotations

import functools
import getpass
import itertools
import os
import secrets
import socket
import time
from dataclasses import replace
from typing import Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from .errors import (
    Blocked,
    Held,
    InvalidArgument,
    LeaseInfo,
    Lost,
    NothingClaimable,
    StillWaiting,
)
from .types import (
    Accepted,
    Assigned,
    Board,
    Grant,
    HandoffNote,
    History,
    InLine,
    Offer,
    Posted,
    Probe,
    Record,
    RecordView,
    TokenCheck,
)
from ._convert import (
    lease as _lease,
    maybe as _maybe,
    assigned as _assigned,
    maybe_lease as _maybe_lease,
    assignment as _assignment,
    maybe_assignment as _maybe_assignment,
    blocked_key as _blocked_key,
    in_line as _in_line,
    key_holders as _key_holders,
    key_line as _key_line,
    quarantine as _quarantine,
    note as _note,
    note_pb as _note_pb,
    offer as _offer,
    record as _record,
    event as _event,
)
from ._transport import normalize
from .v1 import baton_pb2 as pb

DEFAULT_ENDPOINT = "127.0.0.1:7001"
#: Most endpoints one client takes (the Rust client's ENDPOINTS_MAX).
ENDPOINTS_MAX = 64

#: Most keys one `claim_set` may name (the cluster's CLAIM_SET_KEYS_MAX: it refuses more as
#: `InvalidArgument`, as the Rust client leaves it to).
CLAIM_SET_KEYS_MAX = 64

#: Most claimants that may wait in one key's line (the cluster's WAITERS_PER_KEY_MAX: it
#: refuses one more with `Refused`, reason `line_full`).
WAITERS_PER_KEY_MAX = 1024
#: Most permits one key may have (`claim(key, permits=N)`: N is 1, a plain claim, to this; the
#: cluster's PERMITS_MAX).
PERMITS_MAX = 1024
#: Most holders that may share one key at once (`claim(key, shared=True)`; the cluster's
#: SHARED_HOLDERS_MAX: one more is told `Held`, as a permit claim past N is).
SHARED_HOLDERS_MAX = 1024
#: `wait_in_line` renews its place every TTL / 3, but not more often than every 50 ms.
PLACE_RENEWALS_PER_TTL = 3
PLACE_RENEW_INTERVAL_MIN = 0.05


class Call(NamedTuple):
    """One logical request for the client's transport: answered, or raised typed."""

    service: str
    method: str
    request: object
    deadline: Optional[float] = None


class Hear(NamedTuple):
    """Wait until the endings stream tells `listening` (an `endings.Listening`), for at most
    `timeout` seconds: sent back whether it did."""

    listening: object
    timeout: float


def call_of(op):
    """The client method of the generator `op` (named `_op_NAME`): NAME, with its signature
    and docstring, running the generator with the client's `_run`."""

    def method(self, *args, **kwargs):
        return self._run(op(self, *args, **kwargs))

    functools.update_wrapper(method, op)
    method.__name__ = op.__name__[len("_op_"):]
    return method


def _default_holder() -> str:
    return os.environ.get("BATON_HOLDER") or f"{getpass.getuser()}@{socket.gethostname()}"


def _check_sharing(permits: int, shared: bool) -> None:
    """Refuses a number of permits out of range, or permits with `shared`."""
    if not 1 <= permits <= PERMITS_MAX:
        raise InvalidArgument(f"permits {permits}: give 1 (a plain claim) to {PERMITS_MAX}")
    if shared and permits > 1:
        raise InvalidArgument(f"permits {permits} and shared: claim one of a key's permits or share it, not both")


class Ops:
    """The calls, as generators (see the module's docstring); `Client` and `aio.Client` run
    them. Holds the settings both share."""

    def _configure(
        self,
        endpoints,
        client_id: Optional[str],
        holder: Optional[str],
        tls,
        token: Optional[str],
        retry_deadline: float,
        request_timeout: float,
        drift_margin: float,
    ) -> tuple:
        """Checks and keeps the settings; returns the metadata every request carries."""
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        if not endpoints:
            raise InvalidArgument("no endpoints: give at least one host:port")
        if len(endpoints) > ENDPOINTS_MAX:
            raise InvalidArgument(f"{len(endpoints)} endpoints: at most {ENDPOINTS_MAX} (ENDPOINTS_MAX)")
        normalized = [normalize(e) for e in endpoints]
        if any(t for _, t in normalized) and tls is None:
            raise InvalidArgument("an https:// endpoint needs tls=TLS(ca=...)")
        if not 0.0 <= drift_margin < 1.0:
            raise InvalidArgument(f"drift_margin must be at least 0 and below 1, got {drift_margin}")
        if retry_deadline <= 0 or request_timeout <= 0:
            raise InvalidArgument("retry_deadline and request_timeout must be above zero")
        self.endpoints: List[str] = [e for e, _ in normalized]
        self.client_id = client_id or os.environ.get("BATON_CLIENT_ID") or secrets.token_hex(16)
        if not 1 <= len(self.client_id.encode()) <= 64:
            raise InvalidArgument("client_id must be 1 to 64 bytes")
        self.holder = holder or _default_holder()
        self.retry_deadline = retry_deadline
        self.request_timeout = request_timeout
        self.drift_margin = drift_margin
        self._retry_id = secrets.token_hex(16)
        self._seq = itertools.count(1)
        return (("authorization", f"Bearer {token}"),) if token else ()

    def _holder(self, holder: Optional[str]) -> "pb.Holder":
        """This session as `holder` (the client's own name if None)."""
        return pb.Holder(name=holder or self.holder, client_id=self.client_id)

    def _sharing_request(self, key: str, ttl: float, holder: Optional[str], permits: int, shared: bool) -> dict:
        """The fields a claim and a wait share: the key, this session as `holder`, the TTL, a
        request id, and the permits or share asked (refused here when out of range)."""
        _check_sharing(permits, shared)
        return dict(
            key=key,
            holder=self._holder(holder),
            ttl_ms=int(ttl * 1000),
            request_id=self._request_id(),
            permits=0 if shared else permits,
            shared=shared,
        )

    def _request_id(self) -> "pb.RequestId":
        return pb.RequestId(client_id=self._retry_id, seq=next(self._seq), session=self.client_id)

    def _safe_until(self, sent: float, ttl: float) -> float:
        return sent + ttl * (1.0 - self.drift_margin)

    def _grant(self, granted, revision: int, sent: float) -> Grant:
        """A `Granted` answer (of a claim, a claim_next or one key of a claim_set) as a `Grant`."""
        lease = _lease(granted.lease)
        return Grant(
            lease=lease,
            already_held=granted.already_held,
            revision=revision,
            safe_until=self._safe_until(sent, lease.ttl),
            assignment=_maybe_assignment(granted, "assignment"),
            permits=_maybe(granted, "permits", _key_holders),
        )

    # ---- leases ---------------------------------------------------------------------------

    def _op_claim(
        self, key: str, ttl: float = 30.0, holder: Optional[str] = None, permits: int = 1, shared: bool = False
    ) -> Grant:
        """Claims `key` for `ttl` seconds. Returns the `Grant`; raises `Held` (naming the
        holder, token, since and free-in) when someone else holds it: stand down.

        A claim of a key this session already holds keeps its token and renews it.

        With `permits` N (2 to `PERMITS_MAX`), one of the key's N permits: up to N holders at
        once, each with its own lease and token (`Grant.permits` names every holder). `Held`
        then names every holder (`permits`) and, as the lease, the one whose permit ends
        first. N is fixed by the first holder while any holds: another N raises `Refused`,
        reason `permits_mismatch`, naming the key's.

        With `shared`, share the key (many readers or one writer): granted while no exclusive
        holder holds it and no exclusive claimant waits in its line (a writer in line stops new
        shared grants), up to `SHARED_HOLDERS_MAX` at once, each with its own lease and token
        (`Grant.permits.shared`). An exclusive claim of a key held shared raises `Held` naming
        every shared holder; a permit claim of it, or a shared claim of a key held by permits,
        raises `Refused`, reason `permits_mismatch`. Only an exclusive holder may write the
        key's record (a shared holder is refused, reason `not_exclusive`)."""
        request = pb.ClaimRequest(**self._sharing_request(key, ttl, holder, permits, shared))
        sent = time.monotonic()
        answer = (yield Call("baton", "Claim", request))
        if answer.WhichOneof("outcome") == "held":
            raise Held(
                key,
                _lease(answer.held.lease),
                answer.held.same_name_other_process,
                _maybe_assignment(answer.held, "assignment"),
                _maybe(answer.held, "permits", _key_holders),
            )
        return self._grant(answer.granted, answer.revision, sent)

    def _op_claim_set(self, keys: Sequence[str], ttl: float = 30.0, holder: Optional[str] = None) -> List[Grant]:
        """Claims every key in `keys` for `ttl` seconds, or none, in one log entry (1 to
        `CLAIM_SET_KEYS_MAX` distinct keys; the cluster refuses none, more or a key named twice
        with `InvalidArgument`). Returns a `Grant` per key, in the order asked; the keys
        granted together share the entry's revision as their token (a key this session already
        holds keeps its own). Raises `Blocked` naming every key held by someone else or
        quarantined: then nothing was granted. Renew and release the keys one by one."""
        request = pb.ClaimSetRequest(
            keys=list(keys),
            holder=self._holder(holder),
            ttl_ms=int(ttl * 1000),
            request_id=self._request_id(),
        )
        sent = time.monotonic()
        answer = (yield Call("baton", "ClaimSet", request))
        if answer.WhichOneof("outcome") == "blocked":
            raise Blocked(keys, [_blocked_key(b) for b in answer.blocked.blocked])
        return [self._grant(g, answer.revision, sent) for g in answer.granted.granted]

    def _op_renew(self, key: str, token: int, deadline: Optional[float] = None) -> Tuple[LeaseInfo, float]:
        """Renews the lease `token` of `key`: (the lease, its new `safe_until`). Raises
        `Lost` when the token is no longer current."""
        request = pb.RenewRequest(key=key, token=token, request_id=self._request_id())
        sent = time.monotonic()
        answer = (yield Call("baton", "Renew", request, deadline))
        if answer.WhichOneof("outcome") == "lost":
            raise Lost(key, token, _maybe_lease(answer.lost, "current"))
        lease = _lease(answer.renewed)
        return lease, self._safe_until(sent, lease.ttl)

    def _op_release(self, key: str, token: int, status: str = "") -> LeaseInfo:
        """Releases the lease `token` of `key` (setting the record's status in the same
        entry, if given). Raises `Lost` when the token is no longer current."""
        request = pb.ReleaseRequest(key=key, token=token, final_status=status, request_id=self._request_id())
        answer = (yield Call("baton", "Release", request))
        if answer.WhichOneof("outcome") == "lost":
            raise Lost(key, token, _maybe_lease(answer.lost, "current"))
        return _lease(answer.released)

    def _op_probe(self, key: str, stale: bool = False) -> Probe:
        """Who holds `key` now, and who waits in its line (linearizable unless `stale`)."""
        answer = (yield Call("baton", "Probe", pb.ProbeRequest(key=key, stale=stale)))
        return Probe(
            _maybe_lease(answer, "lease"),
            answer.revision,
            _maybe(answer, "line", _key_line),
            _maybe(answer, "permits", _key_holders),
        )

    def _op_board(self, prefix: str = "", limit: int = 0, start_after: str = "", stale: bool = False) -> Board:
        """Held keys under `prefix`, in key order; page on with the last key while
        `truncated`. `unclaimed`: the keys a dispatcher assigned that no one holds yet."""
        answer = (yield Call(
            "baton", "Board", pb.BoardRequest(prefix=prefix, limit=limit, start_after=start_after, stale=stale)
        ))
        return Board(
            leases=[_lease(l) for l in answer.leases],
            truncated=answer.truncated,
            revision=answer.revision,
            assignments={k: _assignment(a) for k, a in answer.assignments.items()},
            quarantines={k: _quarantine(q) for k, q in answer.quarantines.items()},
            unclaimed={k: _assignment(a) for k, a in answer.unclaimed.items()},
            unclaimed_truncated=answer.unclaimed_truncated,
            open=list(answer.open),
            open_truncated=answer.open_truncated,
            lines={k: _key_line(l) for k, l in answer.lines.items()},
            permits={k: _key_holders(p) for k, p in answer.permits.items()},
        )

    def _op_check(self, key: str, token: int) -> TokenCheck:
        """Whether `token` is `key`'s current one (what a fenced resource asks). Always
        linearizable."""
        answer = (yield Call("baton", "CheckToken", pb.CheckTokenRequest(key=key, token=token)))
        return TokenCheck(answer.current, _maybe_lease(answer, "lease"), answer.revision, answer.permits, answer.shared)

    def _op_revoke(self, key: str, reason: str, now: bool = False) -> Optional[LeaseInfo]:
        """Operator force-release, with the reason recorded. The lease ends at once (its holder
        is told); unless `now`, the key stays unclaimable for the lease's TTL, until the revoked
        holder's lease would have expired (a holder cut off from the cluster may still believe
        it holds it until then). `now` frees it at once: for resources that check fencing
        tokens."""
        answer = (yield Call(
            "baton", "Revoke", pb.RevokeRequest(key=key, reason=reason, request_id=self._request_id(), now=now)
        ))
        return _maybe_lease(answer, "revoked")

    # ---- waiting in line -----------------------------------------------------------------

    def _op_wait_once(
        self, key: str, ttl: float = 30.0, holder: Optional[str] = None, permits: int = 1, shared: bool = False
    ) -> Union[Grant, InLine]:
        """One step of waiting in `key`'s line: if nothing blocks the key, claims it (as
        `claim`) and returns the `Grant`; otherwise puts this session in the key's line, or,
        if it waits there already, renews its place, and returns its `InLine` place
        (`position` 1 is the head). A place not renewed within `ttl` lapses. When the key is
        freed, the line's head is granted it in the same log entry (token = that entry's
        revision): its next `wait_once` returns that `Grant`, with `already_held` (and the
        lease renewed). Raises `Refused` with reason `line_full` (`waiters`, `waiters_max`,
        `whole_cluster`) when the line is full (`WAITERS_PER_KEY_MAX`), or the cluster's.

        With `permits` N or `shared` (as `claim`; data format 13 on every member), it waits
        for one of the key's permits, or a share, in the same line: the head is granted a
        permit in the write that frees one."""
        request = pb.WaitRequest(**self._sharing_request(key, ttl, holder, permits, shared))
        sent = time.monotonic()
        answer = (yield Call("baton", "Wait", request))
        if answer.WhichOneof("outcome") == "in_line":
            return _in_line(key, answer.in_line, answer.revision)
        return self._grant(answer.granted, answer.revision, sent)

    def _op_leave_line(self, key: str, holder: Optional[str] = None) -> Tuple[bool, Optional[LeaseInfo]]:
        """Takes this session out of `key`'s line: (whether it waited there, the lease it
        holds on the key if the line granted it the key first: release it if it is no longer
        wanted)."""
        request = pb.LeaveLineRequest(
            key=key,
            holder=self._holder(holder),
            request_id=self._request_id(),
        )
        answer = (yield Call("baton", "LeaveLine", request))
        return answer.was_waiting, _maybe_lease(answer, "holds")

    def _op_wait_in_line(
        self,
        key: str,
        ttl: float = 30.0,
        timeout: float = 30.0,
        holder: Optional[str] = None,
        permits: int = 1,
        shared: bool = False,
    ) -> Grant:
        """Waits in `key`'s line until the cluster grants the key to this session, for at most
        `timeout` seconds, and returns the `Grant` (a free key is granted at once, as
        `claim`; a key this session holds already keeps its token, `already_held`). Waiters
        are granted in the order they joined, each in the entry that frees the key; the place
        is renewed here every `ttl` / 3 (it lapses `ttl` after the last renewal, e.g. if this
        process dies).

        The leader pushes the grant on this session's `Endings` stream as the granting entry
        applies (the stream `Lease` uses); no further round trip: the grant's entry comes
        after the apply of this session's latest wait that answered "in line" (a grant of a
        lower revision is an earlier one, since ended, and is ignored), so `safe_until` counts
        from that wait's send time. If the stream cannot tell (a cluster that does not push, a session away longer than the
        leader's window), the next renewal of the place finds the grant.

        On timeout the session leaves the line and `StillWaiting` is raised with its last
        place (`in_line`); if the line granted it the key meanwhile, that grant is returned
        instead. Raises `Refused` (`line_full`, ...) as `wait_once` does.

        With `permits` N or `shared`, waits for one of the key's permits, or a share (see
        `wait_once`); the grant heard on the stream names every holder (`Grant.permits`): from
        an older node, whose push does not, it is confirmed with one more wait."""
        deadline = time.monotonic() + timeout
        sent = time.monotonic()
        sharing = dict(permits=permits, shared=shared)
        first = yield from self._op_wait_once(key, ttl, holder, **sharing)
        if isinstance(first, Grant):
            return first
        place = first
        renew_every = max(ttl / PLACE_RENEWALS_PER_TTL, PLACE_RENEW_INTERVAL_MIN)
        listening = self._feed.listen_line(key, place.revision)
        try:
            while True:
                renew_at = min(time.monotonic() + renew_every, deadline)
                # Wake for a grant to this session, or to renew the place, or at the deadline.
                heard = yield Hear(listening, max(0.0, renew_at - time.monotonic()))
                if heard:
                    grant = listening.grant
                    if grant is not None and grant.revision > place.revision:
                        if (permits > 1 or shared) and grant.permits is None:
                            # A permit pushed without its holders (an older node): the renewal
                            # that confirms it names every one.
                            confirmed = yield from self._op_wait_once(key, ttl, holder, **sharing)
                            if isinstance(confirmed, Grant):
                                return replace(confirmed, already_held=False)
                            place = confirmed
                            listening = self._feed.listen_line(key, place.revision)
                            continue
                        return self._granted_from_line(key, holder, ttl, grant, sent)
                    listening = self._feed.listen_line(key, place.revision)
                    if grant is not None:
                        continue  # An earlier wait's grant: listen on.
                    # The stream could not say: ask the cluster now.
                if not heard and time.monotonic() >= deadline:
                    return (yield from self._op_stop_waiting(key, ttl, holder, place, timeout, **sharing))
                sending = time.monotonic()
                outcome = yield from self._op_wait_once(key, ttl, holder, **sharing)
                if isinstance(outcome, Grant):
                    return replace(outcome, already_held=False)
                place = outcome
                sent = sending
        finally:
            self._feed.stop_listening(listening)

    def _granted_from_line(self, key: str, holder: Optional[str], ttl: float, grant, sent: float) -> Grant:
        """The grant the stream told this session of, `safe_until` counted from `sent`: when
        this session sent its latest wait that answered "in line"."""
        lease = LeaseInfo(
            key=key,
            holder=holder or self.holder,
            holder_client_id=self.client_id,
            token=grant.token,
            ttl=ttl,
            held_since_unix_ms=grant.at_unix_ms,
            renewed_at_unix_ms=grant.at_unix_ms,
            remaining=max(0.0, sent + ttl - time.monotonic()),
            basis=grant.revision,
        )
        return Grant(
            lease=lease,
            already_held=False,
            revision=grant.revision,
            safe_until=self._safe_until(sent, ttl),
            assignment=grant.assignment,
            permits=grant.permits,
        )

    def _op_stop_waiting(
        self,
        key: str,
        ttl: float,
        holder: Optional[str],
        place: InLine,
        waited: float,
        permits: int = 1,
        shared: bool = False,
    ) -> Grant:
        """Leaves the line at the end of a wait: raises `StillWaiting` with the last place, or,
        if the line granted the key meanwhile, returns that grant (renewed, so its
        `safe_until` is this client's own)."""
        _, holds = yield from self._op_leave_line(key, holder)
        if holds is not None:
            outcome = yield from self._op_wait_once(key, ttl, holder, permits=permits, shared=shared)
            if isinstance(outcome, Grant):
                return replace(outcome, already_held=False)
            # The lease ended before the confirming wait, which put the session back in line.
            place = outcome
            yield from self._op_leave_line(key, holder)
        raise StillWaiting(place, waited)

    # ---- the case file --------------------------------------------------------------------

    def _op_update(
        self,
        key: str,
        token: int,
        status: Optional[str] = None,
        summary: Optional[str] = None,
        set_fields: Optional[Mapping[str, str]] = None,
        remove_fields: Iterable[str] = (),
    ) -> Record:
        """A fenced write to `key`'s record with the current `token` of this session."""
        patch = pb.RecordPatch(set_fields=dict(set_fields or {}), remove_fields=list(remove_fields))
        if status is not None:
            patch.status = status
        if summary is not None:
            patch.summary = summary
        answer = (yield Call(
            "baton", "Update", pb.UpdateRequest(key=key, token=token, patch=patch, request_id=self._request_id())
        ))
        return _record(key, answer.record)

    def _op_assign(self, key: str, to: str, by: Optional[str] = None, reason: str = "") -> Assigned:
        """Records who a dispatcher (`by`, default this client's holder) wants on `key`; the
        answer says who holds the key now (an assignment reserves nothing)."""
        request = pb.AssignRequest(key=key, to=to, by=by or self.holder, reason=reason, request_id=self._request_id())
        return _assigned(key, (yield Call("baton", "Assign", request)))

    def _op_unassign(self, key: str, by: Optional[str] = None, reason: str = "") -> Assigned:
        """Clears `key`'s assignment (recorded as `unassigned`)."""
        request = pb.AssignRequest(key=key, clear=True, by=by or self.holder, reason=reason, request_id=self._request_id())
        return _assigned(key, (yield Call("baton", "Assign", request)))

    # ---- the task board -------------------------------------------------------------------

    def _op_post(
        self,
        key: str,
        summary: Optional[str] = None,
        status: Optional[str] = None,
        fields: Optional[Mapping[str, str]] = None,
        to: Optional[str] = None,
        by: Optional[str] = None,
        update: bool = False,
    ) -> Posted:
        """Puts a task on the board: `key` gets a record (status `open` unless given) and, with
        `to`, an assignment, without a claim; recorded as `posted` by `by` (default this
        client's holder). A key already on the board raises `Refused` (reason `exists`, its
        `status` and holder) unless `update`, which patches its record instead."""
        patch = pb.RecordPatch(set_fields=dict(fields or {}))
        if status is not None:
            patch.status = status
        if summary is not None:
            patch.summary = summary
        request = pb.PostRequest(
            key=key, patch=patch, to=to or "", by=by or self.holder, update=update, request_id=self._request_id()
        )
        answer = (yield Call("baton", "Post", request))
        return Posted(key, _record(key, answer.record), answer.created, answer.revision)

    def _op_claim_next(
        self,
        prefix: str,
        ttl: float = 30.0,
        holder: Optional[str] = None,
        where: Optional[Mapping[str, str]] = None,
        any: bool = False,
    ) -> Grant:
        """Claims the first claimable task under `prefix` in one log entry: a key with a
        record that is not held, not quarantined, not finished (status done, cancelled or
        closed), has every `where` field, and is assigned to no one or to this holder (anyone
        with `any`); this holder's assignments first, then key order. Returns the `Grant`
        (`grant.key` is the task); raises `NothingClaimable` with why each task was passed by."""
        request = pb.ClaimNextRequest(
            prefix=prefix,
            holder=self._holder(holder),
            ttl_ms=int(ttl * 1000),
            any=any,
            request_id=self._request_id(),
        )
        request.where.extend(pb.FieldIs(field=f, value=v) for f, v in (where or {}).items())
        sent = time.monotonic()
        answer = (yield Call("baton", "ClaimNext", request))
        if answer.WhichOneof("outcome") == "nothing":
            n = answer.nothing
            counts = {
                "scanned": n.scanned,
                "held": n.held,
                "quarantined": n.quarantined,
                "finished": n.finished,
                "unmatched": n.unmatched,
                "assigned_elsewhere": n.assigned_elsewhere,
                "truncated": n.truncated,
            }
            raise NothingClaimable(prefix, counts)
        return self._grant(answer.granted, answer.revision, sent)

    def _op_record(self, key: str, stale: bool = False) -> RecordView:
        answer = (yield Call("baton", "GetRecord", pb.GetRecordRequest(key=key, stale=stale)))
        return RecordView(
            key=key,
            record=_record(key, answer.record),
            lease=_maybe_lease(answer, "lease"),
            revision=answer.revision,
            quarantine=_maybe(answer, "quarantine", _quarantine),
            line=_maybe(answer, "line", _key_line),
            permits=_maybe(answer, "permits", _key_holders),
        )

    def _op_history(self, key: str, stale: bool = False) -> History:
        answer = (yield Call("baton", "History", pb.HistoryRequest(key=key, stale=stale)))
        return History(key, [_event(e) for e in answer.events], answer.dropped, answer.revision)

    # ---- handoffs -------------------------------------------------------------------------

    def _op_offer(self, key: str, token: int, to: str, note=None, ttl: float = 600.0) -> Offer:
        """Offers `key` (held with `token`) to holder name `to`, with a status note (a
        `HandoffNote` or a dict of its fields). The record is frozen until the offer ends."""
        request = pb.OfferRequest(
            key=key,
            token=token,
            to=to,
            note=_note_pb(note or HandoffNote()),
            offer_ttl_ms=int(ttl * 1000),
            request_id=self._request_id(),
        )
        return _offer(key, (yield Call("baton", "Offer", request)).offer)

    def _op_accept(self, key: str, ttl: float = 30.0, holder: Optional[str] = None) -> Accepted:
        """Takes the offer of `key` addressed to `holder`: the key is this session's with a
        new token; the giver's is dead."""
        request = pb.AcceptRequest(
            key=key,
            holder=self._holder(holder),
            ttl_ms=int(ttl * 1000),
            request_id=self._request_id(),
        )
        sent = time.monotonic()
        answer = (yield Call("baton", "Accept", request))
        lease = _lease(answer.lease)
        giver = getattr(answer, "from")
        return Accepted(
            lease=lease,
            note=_note(answer.note),
            from_holder=giver.name,
            from_client_id=giver.client_id,
            revision=answer.revision,
            safe_until=self._safe_until(sent, lease.ttl),
        )

    def _op_decline(self, key: str, holder: Optional[str] = None) -> int:
        request = pb.DeclineRequest(
            key=key, holder=self._holder(holder), request_id=self._request_id()
        )
        return (yield Call("baton", "Decline", request)).revision

    def _op_cancel(self, key: str, token: int) -> int:
        request = pb.CancelRequest(key=key, token=token, request_id=self._request_id())
        return (yield Call("baton", "Cancel", request)).revision
