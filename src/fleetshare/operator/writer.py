"""Admission writes in the background (Kueue's "assume, then apply asynchronously").

The loop decides and hands each admission's write to an :class:`AdmissionWriter`; it counts
the workload as admitted at once (an *assumption*: its quota reserved, no longer pending) and
goes on. Worker threads send the writes in the order they were handed over (up to
``threads`` at a time) and keep the answers until the loop takes them (:meth:`take`) at its
next refresh: a landed write confirms the assumption, a refused one undoes it. At most
``limit`` writes are outstanding (handed over and not yet taken back with their answer): the
loop asks :meth:`room` before handing more, so it never piles up unbounded writes.

Nothing here decides anything: the writer only carries out, in order, what it is given. The
state stays in the API server (each write is conditional on the object the decision saw and
carries the admission record), so writes dropped at shutdown or lost with the process leave
their workloads pending there, and nothing is admitted twice.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("fleetshare.operator")

Send = Callable[[list[dict[str, Any]]], None]
"""One admission's write: sends its requests, appending each object the API answered with
(several for a gang of bare pods); raises on a refusal (what landed before stays appended)."""


class NotLeader(Exception):
    """The write was not sent: leadership was lost before its turn."""


@dataclass
class Answer:
    """What became of one handed-over write."""

    name: str
    written: list[dict[str, Any]] = field(default_factory=list)
    """The objects as the API answered, in the order written (empty: nothing landed)."""
    error: Exception | None = None
    """Why (the rest of) the write was refused; None: it landed whole."""


def send_now(name: str, send: Send) -> Answer:
    """Send one write here and now; its answer (a refusal is an answer, not an exception)."""
    answer = Answer(name)
    try:
        send(answer.written)
    except Exception as exc:  # the loop decides what a refusal means
        answer.error = exc
    return answer


class AdmissionWriter:
    """Sends admission writes in order on ``threads`` threads; at most ``limit`` outstanding.

    ``may_send`` is asked before each write is sent (False: leadership lost; the write is
    answered with :class:`NotLeader` without being sent). ``wake`` is called (from a worker
    thread) when the loop should come and take answers: a write was refused, or the writer
    had been full (:meth:`full`) and half its room is free again."""

    def __init__(
        self,
        *,
        threads: int,
        limit: int,
        may_send: Callable[[], bool] = lambda: True,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        if threads < 1 or limit < 1:
            raise ValueError(f"admission writer: threads {threads} and limit {limit} must be >= 1")
        self.threads = threads
        self.limit = limit
        self.may_send = may_send
        self.wake = wake
        self._lock = threading.Condition()
        self._queue: deque[tuple[str, Send]] = deque()
        self._sending: set[str] = set()
        self._answers: list[Answer] = []
        self._outstanding: set[str] = set()
        self._full = False
        self._closed = False
        self._workers: list[threading.Thread] = []

    # -- the loop's side ---------------------------------------------------------------------

    def room(self) -> int:
        """How many more writes may be handed over now."""
        with self._lock:
            return max(0, self.limit - len(self._outstanding))

    def outstanding(self) -> int:
        with self._lock:
            return len(self._outstanding)

    def idle(self) -> bool:
        """Nothing queued or being sent (answers may wait to be taken)."""
        with self._lock:
            return not self._queue and not self._sending

    def submit(self, name: str, send: Send) -> None:
        """Hand over workload ``name``'s write (sent after those handed over before)."""
        with self._lock:
            if name in self._outstanding:
                raise ValueError(f"a write for {name} is already outstanding")
            if len(self._outstanding) >= self.limit:
                raise ValueError(f"admission writer full ({self.limit} outstanding)")
            self._outstanding.add(name)
            self._queue.append((name, send))
            if len(self._workers) < self.threads:
                worker = threading.Thread(
                    target=self._work, name=f"admission-write-{len(self._workers)}", daemon=True
                )
                self._workers.append(worker)
                worker.start()
            self._lock.notify()

    def full(self) -> None:
        """The loop left admissions undone for want of room: wake it when half is free."""
        with self._lock:
            self._full = True

    def cancel(self, name: str) -> bool:
        """Withdraw ``name``'s write if it was not sent yet (True); False when it is being
        sent or was answered (its answer will tell)."""
        with self._lock:
            for i, (queued, _) in enumerate(self._queue):
                if queued == name:
                    del self._queue[i]
                    self._outstanding.discard(name)
                    return True
            return False

    def take(self) -> list[Answer]:
        """The answers received since the last call, in the order they came."""
        with self._lock:
            answers, self._answers = self._answers, []
            for answer in answers:
                self._outstanding.discard(answer.name)
            return answers

    def close(self) -> None:
        """Stop: writes not sent yet are dropped (their workloads stay pending in the API
        server); writes being sent finish in their threads."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._lock.notify_all()

    # -- the workers' side -------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                name, send = self._queue.popleft()
                self._sending.add(name)
            if self.may_send():
                answer = send_now(name, send)
            else:
                answer = Answer(name, error=NotLeader("not the leader: not sent"))
            with self._lock:
                self._sending.discard(name)
                self._answers.append(answer)
                busy = len(self._queue) + len(self._sending)
                wake = answer.error is not None or (self._full and busy <= self.limit // 2)
                if wake:
                    self._full = False
            if wake:
                try:
                    self.wake()
                except Exception as exc:  # never lose the worker to a wake-up
                    log.debug("wake after an admission write failed: %s", exc)
