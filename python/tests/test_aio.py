"""`baton.aio.Client` against a real 3-node cluster (conftest.py): the calls as coroutines on
one event loop, `async with client.lease(...)`, waiting in line, TLS, and the loop never
blocked by a wait. Each test runs its coroutine with `asyncio.run`."""

from __future__ import annotations

import asyncio
import time

import pytest

from baton import Grant, Held, LeaseLost, Lost, StillWaiting, TLSError, aio


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_claim_renew_probe_release_as_coroutines_and_a_race_has_one_winner(cluster):
    async def main():
        async with aio.Client(cluster.endpoints, holder="async@a") as client:
            grant = await client.claim("aio/one", ttl=30)
            assert isinstance(grant, Grant) and grant.lease.holder == "async@a"
            probe = await client.probe("aio/one")
            assert probe.lease.token == grant.token
            lease, safe_until = await client.renew("aio/one", grant.token)
            assert lease.token == grant.token and safe_until > grant.safe_until
            released = await client.release("aio/one", grant.token, status="done")
            assert released.token == grant.token
            assert (await client.probe("aio/one")).lease is None
            assert (await client.record("aio/one")).record.status == "done"
            with pytest.raises(Lost):
                await client.release("aio/one", grant.token)
        # Sixteen sessions on one loop race for one key: one winner, the rest told who.
        racers = [aio.Client(cluster.endpoints, holder=f"racer-{i}") for i in range(16)]
        try:
            outcomes = await asyncio.gather(
                *(r.claim("aio/race", ttl=30) for r in racers), return_exceptions=True
            )
        finally:
            for r in racers:
                await r.close()
        winners = [o for o in outcomes if isinstance(o, Grant)]
        assert len(winners) == 1, outcomes
        held = [o for o in outcomes if isinstance(o, Held)]
        assert len(held) == 15 and {h.token for h in held} == {winners[0].token}, outcomes

    run(main())


def test_an_async_lease_renews_as_a_task_hears_a_revoke_at_once_and_releases(cluster):
    async def main():
        client = aio.Client(cluster.endpoints, holder="async@lease")
        operator = aio.Client(cluster.endpoints, holder="ops")
        try:
            async with client.lease("aio/renewed", ttl=2, status="done") as lease:
                first_deadline = lease.safe_until
                await asyncio.sleep(4.0)  # two TTLs: only the renewing task keeps it
                lease.check()
                assert lease.safe_until > first_deadline + 1.0
                assert (await operator.probe("aio/renewed")).lease.token == lease.token
            probe = await operator.probe("aio/renewed")
            assert probe.lease is None, "released on leaving the block"
            assert (await operator.record("aio/renewed")).record.status == "done"
            with pytest.raises(Held) as held:
                async with operator.lease("aio/taken"):
                    async with client.lease("aio/taken"):
                        raise AssertionError("entered the block of a held key")
            assert held.value.holder == "ops"
            # A 60 s TTL: the first renewal is 20 s away, so only the pushed ending can tell.
            async with client.lease("aio/revoked", ttl=60) as lease:
                await operator.revoke("aio/revoked", "reassigning")
                await asyncio.wait_for(lease.lost.wait(), 5)
                assert (lease.loss.what, lease.loss.reason) == ("revoked", "reassigning")
                assert lease.loss.by.client_id == operator.client_id
                with pytest.raises(LeaseLost):
                    lease.check()
        finally:
            await client.close()
            await operator.close()

    run(main())


def test_wait_in_line_is_granted_from_the_stream_without_blocking_the_loop(cluster):
    async def main():
        holder = aio.Client(cluster.endpoints, holder="holder")
        waiter = aio.Client(cluster.endpoints, holder="waiter")
        try:
            held = await holder.claim("aio/line", ttl=30)
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.get_running_loop().create_task(tick())
            waiting = asyncio.get_running_loop().create_task(waiter.wait_in_line("aio/line", ttl=30, timeout=20))
            while (await holder.probe("aio/line")).line is None:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            assert not waiting.done()
            release_sent = time.monotonic()
            await holder.release("aio/line", held.token)
            grant = await waiting
            heard = time.monotonic() - release_sent
            ticker.cancel()
            # Its place renews every 10 s: heard long before, from the pushed grant.
            assert heard < 5, f"heard after {heard:.1f}s"
            assert isinstance(grant, Grant) and grant.lease.holder == "waiter" and grant.token > held.token
            # The loop ran on while the wait waited (one tick per 10 ms, for over a second).
            assert ticks > 50, ticks
            with pytest.raises(StillWaiting) as still:
                await holder.wait_in_line("aio/line", ttl=2, timeout=1.0)
            assert still.value.holder == "waiter" and still.value.in_line.position == 1
            assert (await waiter.probe("aio/line")).line is None, "the timed-out wait left the line"
            assert waiter._feed._waiting == 0 and holder._feed._waiting == 0
        finally:
            await holder.close()
            await waiter.close()

    run(main())


def test_watch_and_observe_are_async_iterators_read_ahead_at_most_the_buffer(cluster, monkeypatch):
    async def main():
        async with aio.Client(cluster.endpoints, holder="watcher") as client, aio.Client(
            cluster.endpoints, holder="writer"
        ) as writer:
            # Every event of the prefix in order, the actor the writer's session.
            async with client.watch("aio/watched/") as events:
                grant = await writer.claim("aio/watched/a", ttl=30)
                await writer.release("aio/watched/a", grant.token)
                seen = []
                async for event in events:
                    seen.append((event.kind, event.key, event.actor_client_id))
                    if len(seen) == 2:
                        break
            assert seen == [
                ("claimed", "aio/watched/a", writer.client_id),
                ("released", "aio/watched/a", writer.client_id),
            ]
            assert not events._thread.is_alive(), "closing ended the reading thread"
            # The thread reads at most STREAM_BUFFER items ahead of a reader that waits.
            monkeypatch.setattr(aio, "STREAM_BUFFER", 3)
            start = (await client.probe("aio/buffered/a")).revision + 1
            for i in range(5):
                grant = await writer.claim(f"aio/buffered/{i}", ttl=30)
            async with client.watch("aio/buffered/", start) as events:
                first = await events.__anext__()
                await asyncio.sleep(1.0)
                assert events._queue.qsize() == 3 and events._thread.is_alive()
                rest = [await events.__anext__() for _ in range(4)]
            assert [e.key for e in [first, *rest]] == [f"aio/buffered/{i}" for i in range(5)]
            # Observe: the view now, then the view after the holder changed.
            async with client.observe("aio/observed") as views:
                now = await views.__anext__()
                assert now.lease is None
                await writer.claim("aio/observed", ttl=30)
                then = await asyncio.wait_for(views.__anext__(), 10)
                assert then.lease.holder == "writer" and then.revision > now.revision

    run(main())


def test_async_over_mutual_tls_and_a_wrong_ca_is_a_tls_error_at_once(mtls_cluster):
    async def main():
        async with aio.Client(mtls_cluster.endpoints, holder="agent", tls=mtls_cluster.client_tls("agent")) as client:
            async with client.lease("aio/mtls", ttl=30) as lease:
                assert (await client.probe("aio/mtls")).lease.token == lease.token
        wrong = aio.Client(mtls_cluster.endpoints, tls=mtls_cluster.client_tls("agent", pki=mtls_cluster.other_pki))
        started = time.monotonic()
        with pytest.raises(TLSError) as error:
            await wrong.probe("aio/mtls")
        assert error.value.reason == "untrusted_certificate"
        assert time.monotonic() - started < 3
        await wrong.close()

    run(main())
