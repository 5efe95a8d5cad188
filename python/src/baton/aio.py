"""`baton.aio.Client`: the client for asyncio code, over `grpc.aio`.

    from baton import Held
    from baton.aio import Client

    async def main():
        async with Client(["10.0.0.1:7001", "10.0.0.2:7001"], holder="agent@a") as client:
            try:
                async with client.lease("tasks/42", ttl=30) as lease:
                    lease.check()                  # raises LeaseLost once not provably held
                    await write(fencing_token=lease.token)
            except Held as held:
                print(f"{held.holder} holds it")

Every call of the blocking `Client` is a coroutine here, with
the same arguments, results, typed errors and rules (they are written once, in `_ops`):
retries with the same request id, the leader hint, `TLSError` once every endpoint failed its
TLS handshake. `client.lease(...)` is an `async with` whose renewals run as a task on the
loop. `client.watch(...)` and `client.observe(...)` are async iterators (`async for`): the
blocking client's `Watch` and `Observe`, each read by a thread of its own that hands what it
reads to the loop, at most `STREAM_BUFFER` items ahead of the reader. The session's endings stream, which tells a lease at once that it ended and a wait in
line that the line granted it the key, is read by a thread of the session, as in the blocking
client (`blocking`, a blocking `Client` of the same session, owns it): what it hears reaches
the loop with `call_soon_threadsafe`.

One `aio.Client` belongs to the event loop it is first used in (grpc.aio's channels do);
`await client.close()` (or leave its `async with`) before the loop ends. A coroutine
cancelled during a write may still have had the write applied, as a request cut off by the
network may: a claim's lease then ends at its TTL.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from typing import Optional, Sequence

import grpc

from ._ops import DEFAULT_ENDPOINT, Call, Ops
from ._transport import STUBS, Attempts, Transport, _writes
from .client import TLS
from .client import Client as BlockingClient
from .errors import BatonError
from .lease import LeaseRules
from .types import Loss

__all__ = ["Client", "Lease", "Stream", "STREAM_BUFFER"]

#: Items a `Stream`'s thread reads ahead of the loop, at most: past it the thread waits for the
#: reader (and the node's stream waits for the thread), so a slow reader holds no more.
STREAM_BUFFER = 256

#: How often a `Stream`'s thread, waiting for room, looks whether the stream was closed.
_CLOSE_CHECK = 0.2


def awaitable_of(op):
    """The coroutine method of the generator `op` (named `_op_NAME`): NAME, with its
    signature and docstring, running the generator with the client's `_run`."""

    async def method(self, *args, **kwargs):
        return await self._run(op(self, *args, **kwargs))

    functools.update_wrapper(method, op)
    method.__name__ = op.__name__[len("_op_"):]
    return method


class AsyncTransport(Transport):
    """`Transport` over grpc.aio channels: the same routing and retries (`Attempts`), each
    attempt awaited."""

    def __init__(self, *args):
        super().__init__(*args)
        #: Closes of channels evicted past `CHANNELS_MAX`, kept until they finish.
        self._closing: set = set()

    def _open(self, endpoint: str, options):
        if self._tls is not None:
            return grpc.aio.secure_channel(endpoint, self._tls.credentials, options)
        return grpc.aio.insecure_channel(endpoint, options)

    def _discard(self, channel) -> None:
        task = asyncio.get_running_loop().create_task(channel.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def acall(self, service: str, method: str, request, deadline: Optional[float] = None):
        """One logical request until an answer, a non-retryable error, or the deadline."""
        attempts = Attempts(self, deadline, writes=_writes(request))
        while True:
            endpoint, timeout, metadata = attempts.next()
            stub = STUBS[service](self.channel(endpoint))
            call = getattr(stub, method)(request, timeout=timeout, metadata=metadata)
            try:
                response = await call
            except grpc.RpcError as e:
                await asyncio.sleep(attempts.failed(endpoint, e))
                continue
            attempts.answered()
            self.learn_leader(await call.initial_metadata())
            return response

    async def aclose(self) -> None:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for channel in channels:
            await channel.close()


async def _hear(listening, timeout: float) -> bool:
    """Waits until the endings stream tells `listening`, for at most `timeout` seconds."""
    loop = asyncio.get_running_loop()
    woke = asyncio.Event()

    def notify() -> None:
        try:
            loop.call_soon_threadsafe(woke.set)
        except RuntimeError:
            pass  # the loop has closed: no one waits any more

    listening.notify = notify
    try:
        if listening.heard.is_set():
            return True
        try:
            await asyncio.wait_for(woke.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return listening.heard.is_set()
    finally:
        listening.notify = None


class Stream:
    """An async iterator over a blocking one (the blocking client's `Watch` or `Observe`),
    opened by `open` (a coroutine function) when the stream starts: on entering its `async
    with`, or at the first `__anext__`. A thread of its own then reads it and hands each item
    to the loop, at most `STREAM_BUFFER` ahead. What ends the blocking iterator ends this
    one: its end, or the error it raised (`Compacted`, `Unavailable`, ...). `await
    stream.aclose()` (or leave its `async with`) to stop; the thread then ends too."""

    _END = object()

    def __init__(self, open):
        self._open = open
        self._blocking = None
        self._queue: Optional[asyncio.Queue] = None
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __aiter__(self) -> "Stream":
        return self

    async def __aenter__(self) -> "Stream":
        await self._start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _start(self) -> None:
        if self._queue is not None or self._closed.is_set():
            return
        queue: asyncio.Queue = asyncio.Queue(STREAM_BUFFER)
        self._blocking = await self._open()
        self._queue = queue
        loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._read, args=(loop, queue), name="baton-aio-stream", daemon=True
        )
        self._thread.start()

    async def __anext__(self):
        await self._start()
        if self._queue is None:
            raise StopAsyncIteration  # closed before it started
        item = await self._queue.get()
        if item is Stream._END:
            self._queue.put_nowait(item)  # every later call ends too
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._queue.put_nowait(Stream._END)
            raise item
        return item

    def _read(self, loop, queue) -> None:
        """The thread: reads the blocking iterator into `queue` until it ends or is closed."""
        last = Stream._END
        try:
            for item in self._blocking:
                if not self._put(loop, queue, item):
                    return
        except BaseException as e:  # noqa: BLE001 - the reader raises it
            last = e
        if not self._closed.is_set():
            self._put(loop, queue, last)

    def _put(self, loop, queue, item) -> bool:
        """Waits for room and puts `item`; False once closed (or the loop is gone)."""
        try:
            put = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        except RuntimeError:
            return False  # the loop has closed
        while not self._closed.is_set() and not loop.is_closed():
            try:
                put.result(_CLOSE_CHECK)
                return True
            except concurrent.futures.TimeoutError:
                continue
            except (concurrent.futures.CancelledError, RuntimeError):
                return False
        put.cancel()
        return False

    async def aclose(self) -> None:
        self._closed.set()
        if self._blocking is not None:
            self._blocking.close()
        thread = self._thread
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join)
        if self._queue is not None:
            while not self._queue.empty():
                self._queue.get_nowait()
            self._queue.put_nowait(Stream._END)


class Client(Ops):
    """A client of one baton cluster for asyncio code: the blocking `baton.Client`'s calls as
    coroutines, `async for` over `watch` and `observe`, and `async with client.lease(...)`.
    The arguments are the blocking client's."""

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
        self._transport = AsyncTransport(self.endpoints, tls, metadata, retry_deadline, request_timeout)
        #: A blocking client of the same session: it reads the session's endings stream on
        #: its thread; `watch` and `observe` read through it, each on a thread of its own.
        self.blocking = BlockingClient(
            self.endpoints,
            client_id=self.client_id,
            holder=self.holder,
            tls=tls,
            token=token,
            retry_deadline=retry_deadline,
            request_timeout=request_timeout,
            drift_margin=drift_margin,
        )
        self._feed = self.blocking._feed

    async def close(self) -> None:
        self.blocking.close()
        await self._transport.aclose()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @property
    def leader_hint(self) -> Optional[str]:
        return self._transport.leader

    async def _run(self, op):
        """Runs the call `op` (an `_ops` generator) to its result: each `Call` awaited on the
        transport, each `Hear` on the endings stream; a failure (a cancellation too) is
        thrown into `op`."""
        answer, failure = None, None
        while True:
            try:
                step = op.throw(failure) if failure is not None else op.send(answer)
            except StopIteration as done:
                return done.value
            answer, failure = None, None
            try:
                if isinstance(step, Call):
                    answer = await self._transport.acall(*step)
                else:
                    answer = await _hear(step.listening, step.timeout)
            except BaseException as e:  # noqa: BLE001 - thrown into `op`, which re-raises it
                failure = e

    claim = awaitable_of(Ops._op_claim)
    claim_set = awaitable_of(Ops._op_claim_set)
    renew = awaitable_of(Ops._op_renew)
    release = awaitable_of(Ops._op_release)
    probe = awaitable_of(Ops._op_probe)
    board = awaitable_of(Ops._op_board)
    check = awaitable_of(Ops._op_check)
    revoke = awaitable_of(Ops._op_revoke)
    wait_once = awaitable_of(Ops._op_wait_once)
    leave_line = awaitable_of(Ops._op_leave_line)
    wait_in_line = awaitable_of(Ops._op_wait_in_line)
    update = awaitable_of(Ops._op_update)
    assign = awaitable_of(Ops._op_assign)
    unassign = awaitable_of(Ops._op_unassign)
    post = awaitable_of(Ops._op_post)
    claim_next = awaitable_of(Ops._op_claim_next)
    record = awaitable_of(Ops._op_record)
    history = awaitable_of(Ops._op_history)
    offer = awaitable_of(Ops._op_offer)
    accept = awaitable_of(Ops._op_accept)
    decline = awaitable_of(Ops._op_decline)
    cancel = awaitable_of(Ops._op_cancel)

    def watch(self, prefix: str = "", from_revision: int = 0) -> Stream:
        """`async with client.watch(prefix) as events: async for event in events`: the
        blocking client's `watch` (every event of keys under `prefix` from `from_revision`, in
        order, resuming on another node after a failure with no gap and no repeat), read by a
        thread of its own. `from_revision` 0 is from when the stream starts (entering its
        `async with`, or the first `__anext__`): the revision of a linearizable read then.
        `await` its `aclose()` (or leave its `async with`) to stop."""

        async def open():
            start = from_revision
            if start == 0:
                start = (await self.board(prefix, limit=1)).revision + 1
            return self.blocking.watch(prefix, start)

        return Stream(open)

    def observe(self, key: str) -> Stream:
        """`async with client.observe(key) as views: async for view in views`: the blocking
        client's `observe` (leader election's observe, docs/election.md: `key`'s `RecordView`
        now, then after every change of its holder or record), read by a thread of its own."""

        async def open():
            return self.blocking.observe(key)

        return Stream(open)

    def lease(self, key: str, ttl: float = 30.0, holder: Optional[str] = None, status: str = "") -> "Lease":
        """`async with client.lease(key, ttl=30) as lease:` as the blocking client's `lease`:
        claims `key` (raising `Held` instead of entering the block), renews it every TTL/3 in
        a task on the loop, releases it on exit (with `lease.status`). `lease.lost` is an
        `asyncio.Event` (`await lease.lost.wait()`), set at once when the cluster pushes that
        the lease ended, else at a refused renewal or the safe deadline; `lease.check()`
        raises `LeaseLost` from then on."""
        return Lease(self, self._feed, key, ttl, holder, status)


class Lease(LeaseRules):
    """`async with client.lease(key, ttl)`: the blocking `Lease`'s rules (`LeaseRules`),
    renewed by a task on the event loop."""

    def __init__(self, client: Client, feed, key: str, ttl: float, holder: Optional[str], status: str):
        self._setup(client, feed, key, ttl, holder, status)
        #: Set when the lease is lost (pushed ending, refused renewal, safe deadline).
        self.lost = asyncio.Event()
        #: Set when renewing should stop: the block ended, or the lease is lost.
        self._stop = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def __aenter__(self) -> "Lease":
        self._loop = asyncio.get_running_loop()
        self._feed.room()
        # Raises Held (naming the holder) instead of entering the block.
        self._granted(await self._client.claim(self.key, self.ttl, self.holder))
        self._following = self._feed.follow(self.key, self.token, self._told)
        self._task = self._loop.create_task(self._renew_loop())
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._task is not None:
            # A renewal in flight is cut short; the release below carries the same token.
            self._task.cancel()
            await asyncio.wait([self._task])
        try:
            if self.held():
                await self._client.release(self.key, self.token, self.status)
        except BatonError as e:
            self._release_failed(e, exc)
        finally:
            self._feed.unfollow(self._following)

    def _told(self, loss: Loss) -> None:
        """The endings stream's news, from its thread (or this one): handed to the loop."""
        if self._loop is None:
            return
        try:
            if self._loop is _running_loop():
                self._lose(loss)
            else:
                self._loop.call_soon_threadsafe(self._lose, loss)
        except RuntimeError:
            pass  # the loop has closed: the block is long over

    def _lose(self, loss: Loss) -> None:
        """Records the first loss; on the loop only."""
        if not self.lost.is_set():
            self.loss = loss
            self.lost.set()
        self._stop.set()

    async def _renew_loop(self) -> None:
        wait = self._next_renewal()
        while True:
            # Wake for the next renewal, or at the safe deadline, whichever is first.
            try:
                await asyncio.wait_for(self._stop.wait(), self._until_renewal(wait))
                return
            except asyncio.TimeoutError:
                pass
            deadline = self._renewal_due()
            if deadline is None:
                return
            safe_until, failure = None, None
            try:
                _, safe_until = await self._client.renew(self.key, self.token, deadline=deadline)
            except BatonError as e:
                failure = e
            wait = self._renewed(safe_until, failure)
            if wait is None:
                return


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    """The event loop running in this thread, if any."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
