"""The Python client against a real 3-node cluster (conftest.py)."""

from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest

from baton import (
    CLAIM_SET_KEYS_MAX,
    PERMITS_MAX,
    SHARED_HOLDERS_MAX,
    WAITERS_PER_KEY_MAX,
    Actor,
    Blocked,
    Client,
    Grant,
    HandoffNote,
    Held,
    InLine,
    InvalidArgument,
    LeaseLost,
    Loss,
    Lost,
    NothingClaimable,
    PermissionDenied,
    Refused,
    StillWaiting,
    Unauthenticated,
    VolatileFact,
)
from baton import _convert, endings
from baton.v1 import baton_pb2 as pb


def test_a_race_of_many_claimants_has_one_winner(cluster):
    results = []
    barrier = threading.Barrier(16)

    def claimant(i):
        client = cluster.client(holder=f"agent-{i}")
        barrier.wait()
        try:
            results.append(("won", client.claim("tasks/race", ttl=30)))
        except Held as held:
            results.append(("held", held))

    threads = [threading.Thread(target=claimant, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for kind, r in results if kind == "won"]
    losers = [r for kind, r in results if kind == "held"]
    assert len(winners) == 1, results
    assert len(losers) == 15
    winner = winners[0]
    # Every loser was told who won, with the winning token.
    assert all(h.holder == winner.lease.holder and h.token == winner.token for h in losers)
    assert all(h.free_in > 20 and h.since_unix_ms > 0 for h in losers)


def test_racers_on_claim_next_take_one_posted_task_each(cluster):
    dispatcher = cluster.client(holder="dispatch@ci")
    for i in range(4):
        posted = dispatcher.post(f"board/{i}", summary=f"task {i}", fields={"role": "coder"})
        assert posted.created and posted.record.status == "open"
    board = dispatcher.board("board/")
    assert board.open == [f"board/{i}" for i in range(4)] and not board.open_truncated
    with pytest.raises(Refused) as exists:
        dispatcher.post("board/0")
    assert exists.value.reason == "exists" and exists.value.status == "open"
    results = []
    barrier = threading.Barrier(8)

    def taker(i):
        client = cluster.client(holder=f"agent-{i}")
        barrier.wait()
        try:
            results.append(("won", client.claim_next("board/", ttl=30, where={"role": "coder"})))
        except NothingClaimable as nothing:
            results.append(("nothing", nothing))

    threads = [threading.Thread(target=taker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = sorted(g.key for kind, g in results if kind == "won")
    nothing = [n for kind, n in results if kind == "nothing"]
    assert won == [f"board/{i}" for i in range(4)], results
    assert len(nothing) == 4
    assert all(n.counts["held"] == 4 and n.counts["scanned"] == 4 for n in nothing)


def test_a_set_is_granted_whole_or_not_at_all_naming_what_blocked(cluster):
    bob = cluster.client(holder="bob@h2")
    ann = cluster.client(holder="ann@h1")
    held = bob.claim("set/b", ttl=30)
    keys = ["set/a", "set/b", "set/c"]
    with pytest.raises(Blocked) as blocked:
        ann.claim_set(keys, ttl=30)
    assert [b.key for b in blocked.value.blocked] == ["set/b"]
    b = blocked.value.blocked[0]
    assert b.reason == "held" and b.lease.holder == "bob@h2" and b.lease.token == held.token
    assert ann.probe("set/a").lease is None and ann.probe("set/c").lease is None
    bob.release("set/b", held.token)
    grants = ann.claim_set(keys, ttl=30)
    assert [g.key for g in grants] == keys
    assert len({g.token for g in grants}) == 1 and grants[0].token > held.token
    assert all(ann.probe(k).lease.token == grants[0].token for k in keys)
    # The cluster refuses a set of no key, of more than CLAIM_SET_KEYS_MAX or naming one twice.
    for bad in ([], [f"set/{i}" for i in range(CLAIM_SET_KEYS_MAX + 1)], ["set/x", "set/x"]):
        with pytest.raises(InvalidArgument):
            ann.claim_set(bad)
    assert ann.probe("set/x").lease is None
    for k in keys:
        ann.release(k, grants[0].token)


def test_racers_on_three_permits_get_three_each_with_its_own_token_and_the_rest_are_told_every_holder(cluster):
    results = []
    barrier = threading.Barrier(8)

    def racer(i):
        client = cluster.client(holder=f"racer-{i}")
        barrier.wait()
        try:
            results.append(("won", client.claim("gpu/runner", ttl=30, permits=3), client))
        except Held as held:
            results.append(("held", held, client))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [(g, c) for kind, g, c in results if kind == "won"]
    held = [h for kind, h, _ in results if kind == "held"]
    assert len(won) == 3 and len(held) == 5, results
    tokens = {g.token for g, _ in won}
    assert len(tokens) == 3, "each holder its own token"
    assert all(g.permits is not None and g.permits.permits == 3 for g, _ in won)
    assert all(h.permits is not None and {l.token for l in h.permits.holders} == tokens for h in held)
    assert all(h.permits.free == 0 and h.token in tokens for h in held)
    probe = won[0][1].probe("gpu/runner")
    assert probe.permits.permits == 3 and {l.token for l in probe.permits.holders} == tokens
    assert won[0][1].board("gpu/").permits["gpu/runner"].permits == 3
    check = won[0][1].check("gpu/runner", won[0][0].token)
    assert check.current and check.permits == 3
    # Another N is refused, naming the key's.
    with pytest.raises(Refused) as mismatch:
        cluster.client(holder="late").claim("gpu/runner", permits=4)
    assert mismatch.value.reason == "permits_mismatch"
    assert mismatch.value.permits.permits == 3 and mismatch.value.asked_permits == 4
    with pytest.raises(InvalidArgument):
        cluster.client(holder="late").claim("gpu/runner", permits=PERMITS_MAX + 1)
    # A released permit is free again for the next claimant, with a new token.
    grant, client = won[0]
    client.release("gpu/runner", grant.token)
    late = cluster.client(holder="late").claim("gpu/runner", ttl=30, permits=3)
    assert late.token > max(tokens) and late.permits.free == 0


def test_readers_share_a_key_each_with_its_own_token_and_a_writer_is_told_every_shared_holder(cluster):
    results = []
    barrier = threading.Barrier(5)

    def reader(i):
        client = cluster.client(holder=f"reader-{i}")
        barrier.wait()
        results.append((client.claim("docs/manual", ttl=30, shared=True), client))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 5, results
    tokens = {g.token for g, _ in results}
    assert len(tokens) == 5, "each shared holder its own token"
    assert all(g.permits is not None and g.permits.shared for g, _ in results)
    assert all(g.permits.permits == SHARED_HOLDERS_MAX for g, _ in results)
    # An exclusive claim is told every shared holder.
    writer = cluster.client(holder="writer")
    with pytest.raises(Held) as held:
        writer.claim("docs/manual", ttl=30)
    assert held.value.permits is not None and held.value.permits.shared, held.value
    assert {l.token for l in held.value.permits.holders} == tokens
    assert held.value.token in tokens and "shared" in str(held.value)
    grant, reader = results[0]
    probe = reader.probe("docs/manual")
    assert probe.permits.shared and {l.token for l in probe.permits.holders} == tokens
    assert reader.board("docs/").permits["docs/manual"].shared
    assert reader.record("docs/manual").permits.shared
    check = reader.check("docs/manual", grant.token)
    assert check.current and check.shared and check.permits == SHARED_HOLDERS_MAX
    # Only an exclusive holder writes the case file.
    with pytest.raises(Refused) as refused:
        reader.update("docs/manual", grant.token, summary="a reader's note")
    assert refused.value.reason == "not_exclusive", refused.value
    assert refused.value.permits is not None and refused.value.permits.shared
    # A permit claim of a key held shared, and a shared claim of a key held by permits, are
    # refused naming how the key is held.
    with pytest.raises(Refused) as mismatch:
        writer.claim("docs/manual", permits=3)
    assert mismatch.value.reason == "permits_mismatch" and mismatch.value.permits.shared
    assert mismatch.value.asked_permits == 3 and not mismatch.value.asked_shared
    cluster.client(holder="gpu-user").claim("gpu/shared-test", ttl=30, permits=2)
    with pytest.raises(Refused) as mismatch:
        writer.claim("gpu/shared-test", shared=True)
    assert mismatch.value.reason == "permits_mismatch" and mismatch.value.asked_shared
    assert mismatch.value.permits.permits == 2 and not mismatch.value.permits.shared
    with pytest.raises(InvalidArgument):
        writer.claim("docs/manual", permits=2, shared=True)
    # Once every shared holder is gone, the writer holds the key alone.
    for g, c in results:
        c.release("docs/manual", g.token)
    alone = writer.claim("docs/manual", ttl=30)
    assert alone.permits is None and alone.token > max(tokens)
    writer.update("docs/manual", alone.token, summary="the writer's note")


def test_waiters_join_the_line_in_order_and_the_head_is_granted_the_freed_key(cluster):
    holder = cluster.client(holder="holder@h0")
    first = cluster.client(holder="first@h1")
    second = cluster.client(holder="second@h2")
    held = holder.claim("line/gpu", ttl=30)
    places = [first.wait_once("line/gpu", ttl=30), second.wait_once("line/gpu", ttl=30)]
    assert all(isinstance(p, InLine) for p in places), places
    assert [(p.position, p.waiters) for p in places] == [(1, 1), (2, 2)]
    assert places[0].joined_revision < places[1].joined_revision
    blocked = places[1].blocked
    assert blocked.reason == "held" and blocked.lease.token == held.token
    line = holder.probe("line/gpu").line
    assert line.waiters == 2
    assert [(w.holder_name, w.holder_client_id) for w in line.first] == [
        ("first@h1", first.client_id),
        ("second@h2", second.client_id),
    ]
    assert line.first[0].ttl == 30 and line.first[0].waited >= 0
    view = holder.record("line/gpu").line
    assert view.waiters == 2 and [w.holder_name for w in view.first] == ["first@h1", "second@h2"]
    assert holder.board("line/").lines["line/gpu"].waiters == 2
    # The head waits (renewing its place every 10 s); the holder releases: the head is granted
    # the key in the release's entry and hears it pushed on its session's stream, long before
    # its next renewal would tell it, with the key's assignment as a claim's answer gives it.
    assigned = holder.assign("line/gpu", "first@h1", by="dispatch", reason="next in line")
    result = []

    def wait():
        grant = first.wait_in_line("line/gpu", ttl=30, timeout=20)
        result.append((grant, time.monotonic()))

    waiter = threading.Thread(target=wait)
    waiter.start()
    # Its first wait (a renewal of its place) is an entry: after it, it is watching.
    end = time.monotonic() + 10
    while holder.probe("line/gpu").revision == assigned.revision and time.monotonic() < end:
        time.sleep(0.05)
    released_at = holder.probe("line/gpu").revision + 1
    release_sent = time.monotonic()
    holder.release("line/gpu", held.token)
    waiter.join(20)
    assert result, "the head was not granted the key"
    grant, heard = result[0]
    assert heard - release_sent < 8, "heard at its renewal, not from the push"
    assert isinstance(grant, Grant) and not grant.already_held
    assert grant.token > held.token and grant.token >= released_at
    assert grant.lease.holder == "first@h1" and grant.lease.holder_client_id == first.client_id
    assert grant.assignment is not None and (grant.assignment.to, grant.assignment.by) == ("first@h1", "dispatch")
    probe = holder.probe("line/gpu")
    assert probe.lease.token == grant.token
    assert probe.line.waiters == 1 and probe.line.first[0].holder_name == "second@h2"
    # The release and the grant are one entry.
    at = [e.kind for e in holder.history("line/gpu").events if e.revision == grant.token]
    assert at == ["released", "claimed"]
    second.leave_line("line/gpu")
    first.release("line/gpu", grant.token)


def test_waiters_for_permits_are_granted_each_freed_permit_in_the_order_they_came(cluster):
    holders = [cluster.client(holder=f"h{i}@a") for i in range(2)]
    grants = [c.claim("line/gpus", ttl=30, permits=2) for c in holders]
    waiters = [cluster.client(holder=f"w{i}@b") for i in range(2)]
    places = [w.wait_once("line/gpus", ttl=30, permits=2) for w in waiters]
    assert [(p.position, p.waiters) for p in places] == [(1, 1), (2, 2)], places
    assert places[0].blocked.reason == "held", places[0].blocked
    with pytest.raises(Refused) as refused:
        cluster.client().wait_once("line/gpus", ttl=30, permits=3)
    assert refused.value.reason == "permits_mismatch"
    result = []

    def wait(i):
        result.append((i, waiters[i].wait_in_line("line/gpus", ttl=30, timeout=20, permits=2)))

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    # Both listen on their streams before the first release: a release applied before a
    # waiter's first wait would make that wait answer "already held", renewing the grant.
    deadline = time.monotonic() + 10
    while not all(w._feed._waiting == 1 for w in waiters):
        assert time.monotonic() < deadline, [w._feed._waiting for w in waiters]
        time.sleep(0.01)
    for holder, grant in zip(holders, grants):
        holder.release("line/gpus", grant.token)
        time.sleep(0.3)
    for t in threads:
        t.join(20)
    granted = dict(result)
    assert sorted(granted) == [0, 1], result
    # Each waiter is granted in the release that freed its permit, in the order they came.
    assert granted[0].token < granted[1].token
    for i, grant in granted.items():
        assert grant.permits is not None and grant.permits.permits == 2, grant
        assert grant.token in [lease.token for lease in grant.permits.holders], grant
        kinds = [e.kind for e in waiters[i].history("line/gpus").events if e.revision == grant.token]
        assert kinds == ["released", "claimed"], kinds
    assert holders[0].probe("line/gpus").line is None
    # The grant heard on the stream named every holder: no confirming wait renewed it (its
    # release would say "renewed 1 time").
    for i, grant in granted.items():
        waiters[i].release("line/gpus", grant.token)
        ended = [
            e for e in waiters[i].history("line/gpus").events if e.token == grant.token and e.kind == "released"
        ]
        assert len(ended) == 1 and "renewed" not in ended[0].detail, ended


def test_a_wait_that_times_out_leaves_the_line_and_raises_still_waiting(cluster):
    holder = cluster.client(holder="holder")
    waiter = cluster.client(holder="impatient")
    held = holder.claim("line/slow", ttl=60)
    started = time.monotonic()
    with pytest.raises(StillWaiting) as still:
        waiter.wait_in_line("line/slow", ttl=2, timeout=1.5)
    assert time.monotonic() - started >= 1.5
    assert isinstance(still.value, Refused) and still.value.reason == "still_waiting"
    place = still.value.in_line
    assert place.key == "line/slow" and place.position == 1 and place.waiters == 1
    assert still.value.holder == "holder" and still.value.token == held.token
    probe = holder.probe("line/slow")
    assert probe.line is None, "it left the line"
    assert probe.lease.token == held.token
    assert waiter.leave_line("line/slow") == (False, None)
    # The wait stopped listening on the session's stream.
    assert waiter._feed._waiting == 0 and not waiter._feed._waits


def test_waiting_for_a_key_one_holds_or_a_free_one_grants_it(cluster):
    client = cluster.client(holder="owner")
    grant = client.claim("line/mine", ttl=30)
    again = client.wait_once("line/mine", ttl=30)
    assert isinstance(again, Grant) and again.already_held and again.token == grant.token
    assert client.wait_in_line("line/mine", ttl=30, timeout=1).already_held
    assert client.probe("line/mine").line is None
    free = client.wait_in_line("line/free", ttl=30, timeout=1)
    assert not free.already_held and client.probe("line/free").lease.token == free.token
    # A waiter whose key was granted to it by the line learns so from leave_line.
    other = cluster.client(holder="other")
    assert isinstance(other.wait_once("line/mine", ttl=30), InLine)
    client.release("line/mine", grant.token)
    was_waiting, holds = other.leave_line("line/mine")
    assert not was_waiting and holds.holder == "other" and holds.token > grant.token


def test_an_ending_is_told_to_the_lease_of_its_key_not_to_another_key_of_the_same_token():
    # Every key of a claimed set has the set's one token: the feed once keyed its listeners
    # by token alone, so two lease() blocks over keys of one set heard each other's endings.
    feed = endings.Feed(None, None)
    told = {}
    for key in ("set/a", "set/b"):
        following = endings.Following(key, 7, lambda loss, key=key: told.setdefault(key, loss))
        feed._followers[(key, 7)] = [following]
        feed._count += 1
    feed._deliver("set/a", 7, Loss("expired"))
    assert list(told) == ["set/a"]
    assert told["set/a"].what == "expired"
    assert feed._count == 1


def test_an_attempt_after_one_that_may_have_reached_the_cluster_says_it_is_a_retry():
    from baton import _transport

    class Failure(grpc.RpcError):
        def __init__(self, trailing=()):
            self._trailing = trailing

        def trailing_metadata(self):
            return self._trailing

    assert _transport._never_proposed(Failure(), "failed to connect: Connection refused")
    assert _transport._never_proposed(Failure(((_transport.UNPROPOSED_METADATA_KEY, "1"),)), "not the leader")
    assert not _transport._never_proposed(Failure(), "the write did not commit within 5000 ms")

    class Transport:
        retry_deadline = 5.0
        request_timeout = 1.0
        metadata = ()
        answered_write = False

        def pick(self):
            return "127.0.0.1:1"

    t = Transport()
    attempts = _transport.Attempts(t, None, writes=True)
    _, _, first = attempts.next()
    assert dict(first) == {"x-baton-first-attempt": "1"}
    _, _, second = attempts.next()
    assert "x-baton-retry" not in dict(second), "nothing may have reached the cluster yet"
    attempts.maybe_delivered = True
    _, _, third = attempts.next()
    assert "x-baton-retry" not in dict(third), "the cluster knows nothing of this client yet"
    attempts.answered()
    assert t.answered_write
    _, _, fourth = attempts.next()
    assert dict(fourth) == {"x-baton-retry": "1"}
    assert _transport._writes(pb.ClaimRequest()) and not _transport._writes(pb.ProbeRequest())


def test_a_full_line_is_refused_with_its_facts():
    class Failed(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.FAILED_PRECONDITION

        def details(self):
            return "the line of gpu/1 is full"

        def trailing_metadata(self):
            refusal = pb.Refusal(
                reason="line_full", key="gpu/1", waiters=WAITERS_PER_KEY_MAX, waiters_max=WAITERS_PER_KEY_MAX
            )
            return (("grpc-status-details-bin", refusal.SerializeToString()),)

    refused = _convert.error(Failed())
    assert isinstance(refused, Refused) and refused.reason == "line_full" and refused.key == "gpu/1"
    assert (refused.waiters, refused.waiters_max, refused.whole_cluster) == (1024, 1024, False)


def test_refusals_carry_their_facts_as_attributes(cluster):
    alice = cluster.client(holder="alice")
    bob = cluster.client(holder="bob")
    grant = alice.claim("tasks/facts", ttl=30)
    with pytest.raises(Held) as held:
        bob.claim("tasks/facts", ttl=30)
    assert (held.value.holder, held.value.token) == ("alice", grant.token)
    assert held.value.holder_client_id == alice.client_id
    # Alice's token from Bob's session: refused, naming the holder and the requester.
    with pytest.raises(Refused) as refused:
        bob.renew("tasks/facts", grant.token)
    assert refused.value.reason == "wrong_session"
    assert refused.value.holder == "alice" and refused.value.client_id == bob.client_id
    # A token that is not current: Lost, naming who holds the key.
    with pytest.raises(Lost) as lost:
        alice.release("tasks/facts", grant.token + 1000)
    assert lost.value.token == grant.token and lost.value.presented_token == grant.token + 1000
    # Bad input: InvalidArgument, nothing changed.
    with pytest.raises(InvalidArgument):
        alice.claim("", ttl=30)
    assert alice.probe("tasks/facts").lease.token == grant.token


def test_a_claim_of_a_held_key_spends_no_revision(cluster):
    # The first attempt says so (x-baton-first-attempt): the leader answers it from a read,
    # with no log entry. Without the header, each of these 20 would be an entry and a revision.
    alice = cluster.client(holder="alice")
    bob = cluster.client(holder="bob")
    grant = alice.claim("tasks/quiet", ttl=30)
    before = alice.probe("tasks/quiet").revision
    for _ in range(20):
        with pytest.raises(Held) as held:
            bob.claim("tasks/quiet", ttl=30)
        assert held.value.token == grant.token
    spent = alice.probe("tasks/quiet").revision - before
    # Another test's lease may expire meanwhile (an entry of the leader's); 20 would not.
    assert spent < 20, f"20 refused claims spent {spent} revisions"


def test_a_retried_write_is_applied_once(cluster):
    client = cluster.client(holder="once")
    # The same request (same RequestId) sent twice: the second gets the first's answer,
    # even after the lease was released in between.
    request = pb.ClaimRequest(
        key="tasks/once",
        holder=pb.Holder(name="once", client_id=client.client_id),
        ttl_ms=30_000,
        request_id=client._request_id(),
    )
    first = client._call("baton", "Claim", request)
    client.release("tasks/once", first.granted.lease.token)
    again = client._call("baton", "Claim", request)
    assert again.granted.lease.token == first.granted.lease.token
    assert client.probe("tasks/once").lease is None, "the retry granted nothing new"


def test_a_lease_survives_a_leader_kill_and_renews_on(cluster):
    client = cluster.client(holder="survivor", retry_deadline=20)
    with client.lease("tasks/survive", ttl=6) as lease:
        token = lease.token
        cluster.kill(cluster.leader())
        # Two TTLs: renewals must have gone through the new leader.
        end = time.monotonic() + 12
        while time.monotonic() < end:
            lease.check()
            time.sleep(0.2)
        assert not lease.lost.is_set()
        assert lease.token == token
        assert client.probe("tasks/survive").lease.token == token
        lease.status = "done"
    assert client.probe("tasks/survive").lease is None
    assert client.record("tasks/survive").record.status == "done"


def test_a_frozen_cluster_makes_lost_fire_at_the_safe_deadline_before_anyone_else_is_granted(cluster):
    client = cluster.client(holder="frozen", retry_deadline=20)
    rival = cluster.client(holder="rival", retry_deadline=30)
    with client.lease("tasks/frozen", ttl=3) as lease:
        cluster.signal_all(signal.SIGSTOP)
        try:
            assert lease.lost.wait(10), "lost never fired"
            lost_at = time.monotonic()
            # At the safe deadline, not before and not much after.
            assert lost_at >= lease.safe_until - 0.01
            assert lost_at - lease.safe_until < 0.5
            with pytest.raises(LeaseLost):
                lease.check()
        finally:
            cluster.signal_all(signal.SIGCONT)
        while True:
            try:
                granted = rival.claim("tasks/frozen", ttl=30)
                break
            except Held:
                time.sleep(0.1)
        granted_at = time.monotonic()
        assert lost_at < granted_at
        assert granted.token != lease.token


def test_a_revoked_lease_hears_at_once_who_revoked_it_and_why(cluster):
    holder = cluster.client(holder="agent@a")
    operator = cluster.client(holder="ops")
    # A 60 s TTL: the first renewal is 20 s away, so only the pushed ending can tell in time.
    with holder.lease("tasks/revoked", ttl=60) as lease:
        operator.revoke("tasks/revoked", "reassigning")
        assert lease.lost.wait(5), "the revoke was not pushed"
        loss = lease.loss
        assert (loss.what, loss.reason) == ("revoked", "reassigning")
        assert loss.by.client_id == operator.client_id
        with pytest.raises(LeaseLost) as lost:
            lease.check()
        assert lost.value.loss is loss
        assert "revoked by operator" in str(lost.value) and "reassigning" in str(lost.value)
    # No lease is followed any more: the session's stream stops.
    end = time.monotonic() + 5
    while holder._feed._thread is not None and time.monotonic() < end:
        time.sleep(0.05)
    assert holder._feed._thread is None


def test_a_handed_off_lease_hears_who_took_it(cluster):
    giver = cluster.client(holder="codex@b")
    taker = cluster.client(holder="claude@a")
    with giver.lease("tasks/given", ttl=60) as lease:
        giver.offer("tasks/given", lease.token, "claude@a", HandoffNote(done="all of it"))
        accepted = taker.accept("tasks/given", ttl=30)
        assert lease.lost.wait(5), "the handoff was not pushed"
        assert lease.loss.what == "handed_off"
        assert (lease.loss.new_holder, lease.loss.new_token) == ("claude@a", accepted.token)
        assert lease.loss.by.client_id == taker.client_id
    # The giver's exit released nothing: the key stays the taker's.
    assert taker.probe("tasks/given").lease.token == accepted.token


def test_endings_follow_the_leader_across_a_leader_kill(cluster):
    holder = cluster.client(holder="agent@a", retry_deadline=20)
    operator = cluster.client(holder="ops", retry_deadline=20)
    with holder.lease("tasks/failover", ttl=60) as lease:
        # The stream is open at the old leader by then: it has to find the new one.
        time.sleep(1)
        cluster.kill(cluster.leader())
        cluster.leader()
        operator.revoke("tasks/failover", "moved")
        assert lease.lost.wait(10), "the revoke was not pushed after the leader changed"
        assert (lease.loss.what, lease.loss.reason) == ("revoked", "moved")


def test_a_lease_past_the_session_limit_is_refused_before_claiming(cluster, monkeypatch):
    monkeypatch.setattr(endings, "LEASES_PER_SESSION_MAX", 1)
    client = cluster.client(holder="busy")
    with client.lease("tasks/first", ttl=30):
        with pytest.raises(InvalidArgument, match="LEASES_PER_SESSION_MAX"):
            with client.lease("tasks/second", ttl=30):
                pass
        assert client.probe("tasks/second").lease is None


def test_a_loss_reads_as_what_by_whom_and_why():
    operator = Actor("", "ops-session", "ops")
    assert (
        str(Loss("revoked", by=operator, reason="stuck", revision=9))
        == "revoked by operator (client ops-session, principal ops): stuck (revision 9)"
    )
    assert str(Loss("expired", revision=4)) == "expired: no renewal reached the cluster in time (revision 4)"
    taken = Loss("taken", new_holder="bob", new_token=12)
    assert str(taken) == "the token is no longer current; held by bob (token 12) now"
    gone = Loss("gone", revision=30)
    assert str(gone) == "ended while this session was not listening; the key is free (revision 30)"


def test_watch_resumes_across_a_node_kill_with_no_gap_and_no_repeat(cluster):
    writer = cluster.client(holder="writer")
    watcher = cluster.client(holder="watcher", retry_deadline=20)
    start = writer.board("jobs/").revision + 1
    watch = watcher.watch("jobs/", start)
    seen = []
    done = threading.Event()

    def read():
        for event in watch:
            seen.append(event)
            if len([e for e in seen if e.kind == "claimed"]) == 20:
                break
        done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    granted = []
    for i in range(10):
        granted.append(writer.claim(f"jobs/{i}", ttl=60).revision)
    # The node the watch reads from dies.
    time.sleep(0.5)
    watched = watcher.endpoints[watch._cursor % len(watcher.endpoints)]
    cluster.kill(watcher.endpoints.index(watched) + 1)
    for i in range(10, 20):
        granted.append(writer.claim(f"jobs/{i}", ttl=60).revision)
    assert done.wait(30), f"the watch stopped at {[e.revision for e in seen]}"
    watch.close()
    revisions = [e.revision for e in seen]
    assert revisions == sorted(set(revisions)), "in order, no repeat"
    assert [e.revision for e in seen if e.kind == "claimed"] == granted, "no gap"
    assert all(e.actor_name == "writer" for e in seen)


def test_handoff_moves_the_key_with_its_note(cluster):
    giver = cluster.client(holder="codex@b")
    taker = cluster.client(holder="claude@a")
    grant = giver.claim("tasks/handoff", ttl=30)
    note = HandoffNote(done="half", remaining="the rest", volatile_facts=[VolatileFact("rows", "4", "echo 4")])
    offer = giver.offer("tasks/handoff", grant.token, "claude@a", note, ttl=60)
    assert offer.to == "claude@a" and offer.note.done == "half"
    accepted = taker.accept("tasks/handoff", ttl=30)
    assert accepted.token > grant.token and accepted.from_holder == "codex@b"
    assert accepted.note.volatile_facts[0].check_command == "echo 4"
    with pytest.raises(Lost):
        giver.update("tasks/handoff", grant.token, status="done")
    taker.update("tasks/handoff", accepted.token, status="in_progress", set_fields={"pr": "7"})
    events = taker.history("tasks/handoff").events
    assert [e.kind for e in events] == ["claimed", "offered", "accepted", "updated"]
    # The status each event set, typed (never read out of the detail).
    assert [e.status_set for e in events] == [None, None, None, "in_progress"]


def test_the_board_lists_assigned_keys_nobody_holds(cluster):
    dispatcher = cluster.client(holder="dispatcher")
    dispatcher.assign("queue/1", to="claude@a", reason="triage")
    dispatcher.assign("queue/2", to="claude@a")
    board = dispatcher.board("queue/")
    assert sorted(board.unclaimed) == ["queue/1", "queue/2"] and not board.unclaimed_truncated
    assert board.unclaimed["queue/1"].to == "claude@a" and board.unclaimed["queue/1"].reason == "triage"
    cluster.client(holder="claude@a").claim("queue/1", ttl=30)
    board = dispatcher.board("queue/")
    assert list(board.unclaimed) == ["queue/2"] and [l.key for l in board.leases] == ["queue/1"]
    # An assignment of a key someone else holds says who holds it.
    again = dispatcher.assign("queue/1", to="codex@b")
    assert again.record.assigned_to.to == "codex@b" and again.lease.holder == "claude@a"


def test_a_client_needs_endpoints_and_a_sane_configuration():
    with pytest.raises(InvalidArgument):
        Client([])
    with pytest.raises(InvalidArgument):
        Client(["nohost"])
    with pytest.raises(InvalidArgument):
        Client(["https://127.0.0.1:7001"])
    with pytest.raises(InvalidArgument):
        Client(["127.0.0.1:7001"], drift_margin=1.0)


def test_with_tokens_the_principal_is_who_acts(secured_cluster):
    endpoints = secured_cluster.endpoints
    with pytest.raises(Unauthenticated):
        Client(endpoints, holder="alice").probe("tasks/secure")
    alice = Client(endpoints, holder="alice", token=secured_cluster.tokens["alice"])
    grant = alice.claim("tasks/secure", ttl=30)
    # Mallory cannot act as alice, not even with her public client id.
    mallory = Client(
        endpoints, holder="alice", client_id=alice.client_id, token=secured_cluster.tokens["mallory"]
    )
    with pytest.raises((PermissionDenied, Refused)):
        mallory.release("tasks/secure", grant.token)
    assert alice.probe("tasks/secure").lease.token == grant.token
    events = alice.history("tasks/secure").events
    assert [(e.kind, e.actor_principal) for e in events] == [("claimed", "alice")]


def test_observe_yields_the_leader_now_and_at_every_change(cluster):
    """Leader election's observe: the holder and its record now, then a view at every change
    of holder or record; a renewal and another key under the same prefix are not changes."""
    alice = cluster.client(holder="alice")
    bob = cluster.client(holder="bob")
    observer = cluster.client(holder="observer")
    key = "svc/scheduler"
    won = alice.claim(key, ttl=30)
    alice.update(key, won.token, set_fields={"endpoint": "10.0.0.1"})
    views = observer.observe(key)
    seen = []

    def read():
        for view in views:
            seen.append(view)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()

    def next_view(n):
        end = time.monotonic() + 10
        while len(seen) < n and time.monotonic() < end:
            time.sleep(0.02)
        assert len(seen) >= n, f"no view {n}: {seen}"
        return seen[n - 1]

    now = next_view(1)
    assert now.lease.holder == "alice" and now.lease.token == won.token
    assert now.record.fields["endpoint"] == "10.0.0.1"
    alice.renew(key, won.token)
    alice.claim("svc/scheduler2", ttl=30)
    time.sleep(0.7)
    assert len(seen) == 1, f"a renewal or another key made a view: {seen}"
    alice.update(key, won.token, set_fields={"endpoint": "10.0.0.2"})
    proclaimed = next_view(2)
    assert proclaimed.record.fields["endpoint"] == "10.0.0.2" and proclaimed.revision > now.revision
    alice.release(key, won.token)
    assert next_view(3).lease is None
    elected = bob.claim(key, ttl=30)
    view = next_view(4)
    assert view.lease.holder == "bob" and view.lease.token == elected.token > won.token
    views.close()
    thread.join(10)
    assert not thread.is_alive(), "close() stops the iteration"
