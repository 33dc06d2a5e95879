"""Group commit: many requests, one transaction.

A writer thread takes every item queued while it was committing the previous batch (at most
:attr:`GroupCommit.MAX_BATCH`) and commits them together: one transaction, one fsync, for many
requests. Each caller waits until *its* batch has committed (or failed) and only then answers,
so an acknowledged request is durable. Callers are threads (:meth:`GroupCommit.submit`) or
coroutines (:meth:`GroupCommit.submit_async`, which never blocks the event loop); the thread
wakes each event loop once per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Committable(Protocol):
    """An item the commit function answers: it sets ``error`` when this item is refused."""

    error: BaseException | None


T = TypeVar("T", bound=Committable)
_Waiter = threading.Event | tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class GroupCommit(Generic[T]):
    """Queues items for ``commit`` (called on the writer thread with each batch, in arrival
    order; if it raises, every item of the batch without an error gets the exception)."""

    MAX_BATCH = 1000

    def __init__(self, commit: Callable[[list[T]], None], name: str = "group-commit") -> None:
        self._commit = commit
        self._name = name
        self._cond = threading.Condition()
        self._queue: list[tuple[T, _Waiter]] = []
        self._thread: threading.Thread | None = None
        self._closing = False

    def submit(self, item: T) -> T:
        """Queue ``item`` and wait until its batch is committed; ``item`` (see its ``error``)."""
        done = threading.Event()
        self._put(item, done)
        done.wait()
        return item

    async def submit_async(self, item: T) -> T:
        """:meth:`submit` for a coroutine: the event loop runs on while the batch commits."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._put(item, (loop, future))
        # a cancelled caller leaves its item queued: it commits, unacknowledged
        await asyncio.shield(future)
        return item

    @property
    def queued(self) -> int:
        """Items waiting for the next batch."""
        return len(self._queue)

    def close(self) -> None:
        """Commit what is queued, then stop the writer thread (a later item starts it again)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _put(self, item: T, waiter: _Waiter) -> None:
        with self._cond:
            self._queue.append((item, waiter))
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._closing:
                        self._thread = None
                        return
                    self._cond.wait()
                batch = self._queue[: self.MAX_BATCH]
                del self._queue[: self.MAX_BATCH]
            items = [item for item, _ in batch]
            try:
                self._commit(items)
            except BaseException as exc:  # the whole batch failed: tell each of them
                for item in items:
                    if item.error is None:
                        item.error = exc
            finally:
                _wake([waiter for _, waiter in batch])


def _wake(waiters: list[_Waiter]) -> None:
    """Release the threads, and each event loop's futures with one call per loop."""
    futures: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = defaultdict(list)
    for waiter in waiters:
        if isinstance(waiter, threading.Event):
            waiter.set()
        else:
            futures[waiter[0]].append(waiter[1])
    for loop, pending in futures.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(_settle, pending)


def _settle(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)
