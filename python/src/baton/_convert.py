"""Conversion between the wire (`baton.v1` messages, gRPC errors) and the package's values.
Private to the package: every module that reads the wire converts through here."""

from __future__ import annotations

from typing import Mapping, Optional

import grpc

from .errors import (
    BatonError,
    Compacted,
    InvalidArgument,
    LeaseInfo,
    Lost,
    PermissionDenied,
    Refused,
    Unauthenticated,
)
from .types import (
    Actor,
    Assigned,
    Assignment,
    BlockedKey,
    Event,
    HandoffNote,
    InLine,
    KeyHolders,
    KeyLine,
    Offer,
    Quarantine,
    Record,
    VolatileFact,
    Waiter,
)
from .v1 import baton_pb2 as pb


def lease(p) -> LeaseInfo:
    return LeaseInfo(
        key=p.key,
        holder=p.holder.name,
        holder_client_id=p.holder.client_id,
        token=p.token,
        ttl=p.ttl_ms / 1000,
        held_since_unix_ms=p.held_since_unix_ms,
        renewed_at_unix_ms=p.renewed_at_unix_ms,
        remaining=p.remaining_ms / 1000,
        basis=p.basis,
    )


def key_holders(p) -> KeyHolders:
    return KeyHolders(p.permits, [lease(l) for l in p.holders], p.shared)


def maybe(msg, field: str, convert):
    """`convert` of the message field `field`, or None when it is absent."""
    return convert(getattr(msg, field)) if msg.HasField(field) else None


def assigned(key: str, answer) -> Assigned:
    return Assigned(record(key, answer.record), maybe_lease(answer, "lease"), answer.revision)


def maybe_lease(msg, field: str) -> Optional[LeaseInfo]:
    return maybe(msg, field, lease)


def assignment(p) -> Assignment:
    return Assignment(p.to, p.by, p.reason, p.assigned_at_unix_ms, p.revision)


def maybe_assignment(msg, field: str) -> Optional[Assignment]:
    return maybe(msg, field, assignment)


def blocked_key(p) -> BlockedKey:
    """One key of a `claim_set`'s refusal: held (its lease) or quarantined (its facts)."""
    if p.HasField("held"):
        return BlockedKey(
            key=p.key,
            reason="held",
            lease=lease(p.held.lease),
            same_name_other_process=p.held.same_name_other_process,
            assignment=maybe_assignment(p.held, "assignment"),
        )
    q = p.quarantined
    return BlockedKey(
        key=p.key,
        reason="quarantined",
        quarantine_revision=q.quarantine_revision,
        quarantine_delay=q.quarantine_delay_ms / 1000,
        quarantine_remaining=q.quarantine_remaining_ms / 1000,
        quarantine_revoked=q.quarantine_revoked,
    )


def key_line(p) -> KeyLine:
    """A key's line (a probe's, a record view's, a board's): its length and first waiters."""
    return KeyLine(
        waiters=p.waiters,
        first=[
            Waiter(
                holder_name=w.holder.name,
                holder_client_id=w.holder.client_id,
                joined_revision=w.joined_revision,
                joined_unix_ms=w.joined_unix_ms,
                ttl=w.ttl_ms / 1000,
                waited=w.waited_ms / 1000,
            )
            for w in p.first
        ],
    )


def in_line(key: str, p, revision: int) -> InLine:
    """A `Wait` answered `in_line`: this session's place in `key`'s line."""
    return InLine(
        key=key,
        position=p.position,
        waiters=p.waiters,
        joined_revision=p.joined_revision,
        blocked=blocked_key(p.blocked),
        revision=revision,
    )


def quarantine(p) -> Quarantine:
    return Quarantine(p.revision, p.delay_ms / 1000, p.remaining_ms / 1000)


def note(p) -> HandoffNote:
    return HandoffNote(
        commit=p.commit,
        branch=p.branch,
        done=p.done,
        remaining=p.remaining,
        blocked=p.blocked,
        rebuild=p.rebuild,
        first_step=p.first_step,
        changed_files=list(p.changed_files),
        dirty_files=list(p.dirty_files),
        volatile_facts=[VolatileFact(f.name, f.claimed_value, f.check_command) for f in p.volatile_facts],
    )


def note_pb(note) -> "pb.HandoffNote":
    if isinstance(note, Mapping):
        facts = note.get("volatile_facts", [])
        note = HandoffNote(**{**note, "volatile_facts": [
            f if isinstance(f, VolatileFact) else VolatileFact(**f) for f in facts
        ]})
    return pb.HandoffNote(
        commit=note.commit,
        branch=note.branch,
        done=note.done,
        remaining=note.remaining,
        blocked=note.blocked,
        rebuild=note.rebuild,
        first_step=note.first_step,
        changed_files=list(note.changed_files),
        dirty_files=list(note.dirty_files),
        volatile_facts=[
            pb.VolatileFact(name=f.name, claimed_value=f.claimed_value, check_command=f.check_command)
            for f in note.volatile_facts
        ],
    )


def offer(key: str, p) -> Offer:
    return Offer(
        key=key,
        from_holder=getattr(p, "from").name,
        from_client_id=getattr(p, "from").client_id,
        from_token=p.from_token,
        to=p.to,
        note=note(p.note),
        offer_ttl=p.offer_ttl_ms / 1000,
        offered_at_unix_ms=p.offered_at_unix_ms,
        revision=p.revision,
        remaining=p.remaining_ms / 1000,
    )


def record(key: str, p) -> Record:
    return Record(
        status=p.status,
        summary=p.summary,
        fields=dict(p.fields),
        assigned_to=maybe_assignment(p, "assigned_to"),
        pending_offer=maybe(p, "pending_offer", lambda o: offer(key, o)),
        last_note=maybe(p, "last_note", note),
        updated_revision=p.updated_revision,
    )


def event(p) -> Event:
    actor = p.actor if p.HasField("actor") else None
    return Event(
        revision=p.revision,
        key=p.key,
        kind=p.kind,
        actor_name=actor.name if actor else None,
        actor_client_id=actor.client_id if actor else None,
        actor_principal=(actor.principal or None) if actor else None,
        token=p.token,
        at_unix_ms=p.at_unix_ms,
        detail=p.detail,
        status_set=p.status_set or None,
    )


def actor(p) -> Actor:
    return Actor(p.name, p.client_id, p.principal or None)


def metadata_value(pairs, name: str):
    for k, v in pairs or ():
        if k == name:
            return v
    return None


def error(e: grpc.RpcError) -> BatonError:
    """The typed error for a status the retry loop does not retry."""
    code, message = e.code(), e.details() or ""
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(message)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return PermissionDenied(message)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(message)
    details = metadata_value(e.trailing_metadata(), "grpc-status-details-bin")
    if code == grpc.StatusCode.OUT_OF_RANGE:
        c = pb.Compacted()
        if details:
            c.ParseFromString(details)
        return Compacted(message, c.requested, c.first_available)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        r = pb.Refusal()
        if details:
            r.ParseFromString(details)
        if r.reason == "stale_token":
            return Lost(r.key, r.token, maybe_lease(r, "lease"))
        return Refused(
            r.message or message,
            reason=r.reason,
            key=r.key,
            lease=maybe_lease(r, "lease"),
            presented_token=r.token,
            client_id=r.client_id,
            offer_to=r.offer_to,
            quarantine_remaining=r.quarantine_remaining_ms / 1000,
            nodes=list(r.nodes),
            data_format=r.data_format,
            status=r.status,
            waiters=r.waiters,
            waiters_max=r.waiters_max,
            whole_cluster=r.whole_cluster,
            permits=maybe(r, "permits", key_holders),
            asked_permits=r.asked_permits,
            asked_shared=r.asked_shared,
            permit_holders=r.permit_holders,
            permit_holders_max=r.permit_holders_max,
        )
    return BatonError(f"{code.name}: {message}")
