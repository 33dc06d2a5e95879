"""The store's latency and errors, per operation, as Prometheus metrics.

Every transaction of :class:`~fleetshare.service.store.Store` names its operation (an
:data:`Operation`: what it is for, not its SQL), and is measured:

- ``fleetshare_store_operation_duration_seconds{operation}``: a histogram of the time from
  asking the store for the transaction to its end (committed, or rolled back), on a monotonic
  clock. For a write that includes the wait for the writer lock (other writers of this and
  every other process: writes are serialized) and the work the caller does inside the
  transaction; that is the time the operation held the caller up. Every transaction counts
  once, whether it commits or not.
- ``fleetshare_store_errors_total{operation, error}``: transactions that failed in the
  database or its driver (connecting, a statement, the commit), by ``error``: the PEP 249
  class of the failure (:data:`ERRORS`: ``OperationalError`` for a database that is away,
  locked or read-only, ``IntegrityError`` for a constraint...), or ``other`` for another error
  of SQLAlchemy or the driver. An exception of the caller's own (a refusal raised inside a
  transaction, which rolls it back) is no store error.

The metrics belong to the store object from its creation (so the schema migration and the
first lease are counted too); :meth:`StoreMetrics.register` puts them on a registry.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy.exc import SQLAlchemyError

Operation = Literal[
    "migrate",
    "lease-acquire",
    "lease-renew",
    "lease-release",
    "lease-read",
    "take-over",
    "loop-tail",
    "loop-write",
    "follower-refresh",
    "submit",
    "cancel",
    "policy-read",
    "policy-write",
    "nodepools-read",
    "nodepools-write",
    "node-action",
    "workloads-read",
    "events-read",
    "token-read",
    "token-write",
    "services-read",
    "services-write",
    "what-if-read",
]
"""What a transaction is for (the ``operation`` label; a fixed set, so the label's values are
bounded). ``migrate``: the schema upgrade at every start and reading its revision;
``lease-*``: the loop's lease (:mod:`fleetshare.service.lease`); ``take-over``: loading the
store into memory under a new lease term; ``loop-tail``: the leader reading the event log;
``loop-write``: one transaction of the leader's step (at most ``WRITE_CHUNK`` changes);
``follower-refresh``: a follower's view read from the store; ``submit``: one group commit of
submissions; the rest: the API's reads and writes of that kind."""

OPERATIONS: tuple[Operation, ...] = get_args(Operation)

ERRORS = (
    "OperationalError",
    "IntegrityError",
    "ProgrammingError",
    "DataError",
    "InternalError",
    "NotSupportedError",
    "InterfaceError",
    "DatabaseError",
)
"""PEP 249's error classes, most specific first (each of the later ones is a base of some
earlier): SQLAlchemy's wrappers, psycopg's and sqlite3's errors are named by them."""

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""From 0.5 ms (a read of one row) to 10 s (a take-over of a large store)."""


def error_kind(exc: BaseException) -> str | None:
    """The ``error`` label of a failed transaction's exception, or None when it is not the
    database's or its driver's (see the module docstring)."""
    if not isinstance(exc, SQLAlchemyError | psycopg.Error | sqlite3.Error):
        return None
    names = {cls.__name__ for cls in type(exc).__mro__}
    return next((name for name in ERRORS if name in names), "other")


class StoreMetrics:
    """The two metrics of one store (see the module docstring), on no registry until
    :meth:`register`."""

    def __init__(self) -> None:
        self.duration = Histogram(
            "fleetshare_store_operation_duration_seconds",
            "Time from asking the store for a transaction to its commit or rollback "
            "(a write's wait for the writer lock included), by operation.",
            ["operation"],
            buckets=BUCKETS,
            registry=None,
        )
        self.errors = Counter(
            "fleetshare_store_errors",
            "Transactions that failed in the database or its driver, by operation and "
            "PEP 249 error class.",
            ["operation", "error"],
            registry=None,
        )

    def register(self, registry: CollectorRegistry) -> None:
        """Expose both on ``registry``."""
        registry.register(self.duration)
        registry.register(self.errors)

    @contextmanager
    def measured(self, operation: Operation) -> Iterator[None]:
        """Time the block as ``operation``, counting a database error that leaves it."""
        started = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            kind = error_kind(exc)
            if kind is not None:
                self.errors.labels(operation, kind).inc()
            raise
        finally:
            self.duration.labels(operation).observe(time.perf_counter() - started)
