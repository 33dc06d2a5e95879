"""Leader election: a lease row in the store (``leases``), for SQLite and PostgreSQL alike.

One row per lease (``control-loop``): holder, term, expiry. A replica acquires it when the
row is missing, expired, or held by a process that is certainly dead (same host, same boot,
same PID namespace, and that PID is gone: a restart after kill -9 takes over at once instead
of waiting out the TTL). Acquiring increments the term. The holder renews it every
``ttl / 4`` seconds; every write the leader makes for the loop checks, in the same
transaction, that the row still names it with its term (:meth:`Lease.check`), and extends
it. Writers are serialized (``Store.write``), so a replica that lost the lease (paused longer
than the TTL, cut off from the database) can never commit a decision after another took over:
that is the fencing. Expiry is judged on the acquiring replica's clock: replicas' clocks must
agree to well within the TTL (NTP).

Every change of the term this replica holds is counted where it is decided, in
``fleetshare_lease_transitions_total{to}`` (:attr:`Lease.transitions`): ``acquired`` when it
takes the lease (a term of its own), ``lost`` when it finds the lease gone to another replica
(a check, a renewal or an acquire attempt that sees another holder), ``released`` when it
gives the lease up (a clean stop).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Literal

from prometheus_client import Counter
from sqlalchemy import Connection, select

from fleetshare.service import store as tables
from fleetshare.service.store import Store

LOOP_LEASE = "control-loop"
DEFAULT_TTL = 4.0
Transition = Literal["acquired", "lost", "released"]
TRANSITIONS: tuple[Transition, ...] = ("acquired", "lost", "released")


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "?"


def local_identity() -> str:
    """``host/boot id/pid namespace/pid``: this process, as far as another can tell."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}/{boot}/{_pid_namespace()}/{os.getpid()}"


def certainly_dead(holder: str) -> bool:
    """True when ``holder`` is a process on this host, boot and PID namespace that no longer
    exists (never guessed: anything else is alive until its lease expires)."""
    parts = holder.split("/")
    if len(parts) != 5 or "?" in parts[:3]:
        return False
    mine = local_identity().split("/")
    if parts[:3] != mine[:3] or not parts[3].isdigit():
        return False
    pid = int(parts[3])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    with contextlib.suppress(IndexError):
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    return False


class Lease:
    """This replica's view of one lease (see the module docstring)."""

    def __init__(self, store: Store, name: str = LOOP_LEASE, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.name = name
        self.ttl = ttl
        self.holder = f"{local_identity()}/{secrets.token_hex(4)}"
        self.term: int | None = None
        """The term we hold, or None (set through :meth:`_hold`)."""
        self.transitions = Counter(
            "fleetshare_lease_transitions",
            "Changes of this replica's hold on the loop's lease: acquired, lost (to another "
            "replica) or released (a clean stop).",
            ["to"],
            registry=None,
        )
        """See the module docstring; on no registry until the metrics put it on one."""
        for to in TRANSITIONS:
            self.transitions.labels(to)

    @property
    def held(self) -> bool:
        return self.term is not None

    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired or its holder is certainly dead; True when we
        hold it now."""
        t = tables.leases
        now = time.time()
        with self.store.write("lease-acquire") as conn:
            row = conn.execute(select(t).where(t.c.name == self.name)).first()
            if row is None:
                conn.execute(
                    t.insert().values(
                        name=self.name,
                        holder=self.holder,
                        term=1,
                        acquired_at=now,
                        expires_at=now + self.ttl,
                    )
                )
                self._hold(1)
                return True
            if row.holder == self.holder and row.term == self.term:
                conn.execute(
                    t.update().where(t.c.name == self.name).values(expires_at=now + self.ttl)
                )
                return True
            if row.expires_at >= now and not certainly_dead(row.holder):
                self._hold(None)
                return False
            term = int(row.term) + 1
            conn.execute(
                t.update()
                .where(t.c.name == self.name, t.c.term == row.term)
                .values(holder=self.holder, term=term, acquired_at=now, expires_at=now + self.ttl)
            )
            self._hold(term)
            return True

    def _hold(self, term: int | None, released: bool = False) -> None:
        """We hold ``term`` now (None: no term); counts the transition, if any."""
        before, self.term = self.term, term
        if before == term:
            return
        if before is not None:
            self.transitions.labels("released" if released else "lost").inc()
        if term is not None:
            self.transitions.labels("acquired").inc()

    def check(self, conn: Connection) -> bool:
        """In a write transaction: do we still hold the lease? Extends it when we do."""
        if self.term is None:
            return False
        t = tables.leases
        updated = conn.execute(
            t.update()
            .where(t.c.name == self.name, t.c.holder == self.holder, t.c.term == self.term)
            .values(expires_at=time.time() + self.ttl)
        ).rowcount
        if not updated:
            self._hold(None)
        return bool(updated)

    def renew(self) -> bool:
        """Extend the lease; False when it is not ours any more."""
        with self.store.write("lease-renew") as conn:
            return self.check(conn)

    def release(self) -> None:
        """Give the lease up (a clean stop: another replica takes over at once)."""
        if self.term is None:
            return
        t = tables.leases
        with self.store.write("lease-release") as conn:
            conn.execute(
                t.update()
                .where(t.c.name == self.name, t.c.holder == self.holder, t.c.term == self.term)
                .values(expires_at=0.0)
            )
        self._hold(None, released=True)

    def current(self) -> tuple[str, int, float] | None:
        """(holder, term, expires_at) as stored."""
        t = tables.leases
        with self.store.read("lease-read") as conn:
            row = conn.execute(select(t).where(t.c.name == self.name)).first()
        return None if row is None else (row.holder, int(row.term), float(row.expires_at))
