"""HiGHS (through scipy) with its output kept off stdout.

HiGHS writes some messages (``HighsMipSolverData::...``) with C ``printf`` whatever scipy's
``disp`` option says, so they would land in front of ``fleetshare plan --json``'s JSON. Every
solve of the provisioner goes through :func:`lp` or :func:`mip`, which pass ``disp=False`` and
point file descriptor 1 at ``/dev/null`` for the duration of the call (Python's own
``sys.stdout`` is flushed first and is untouched otherwise). One lock serialises the
redirection, so two threads never interleave their save and restore.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from scipy.optimize import linprog, milp

_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """File descriptor 1 goes to ``/dev/null`` inside the block (C-level output included)."""
    with _LOCK:
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stdout.flush()
        try:
            saved = os.dup(1)
        except OSError:  # no fd 1 at all: nothing to protect
            yield
            return
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, 1)
            finally:
                os.close(null)
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def lp(*args: Any, **kwargs: Any) -> Any:
    """``scipy.optimize.linprog`` with HiGHS, silent."""
    options = {"disp": False, **kwargs.pop("options", {})}
    with quiet_stdout():
        return linprog(*args, method="highs", options=options, **kwargs)


def mip(*args: Any, **kwargs: Any) -> Any:
    """``scipy.optimize.milp``, silent."""
    options = {"disp": False, **kwargs.pop("options", {})}
    with quiet_stdout():
        return milp(*args, options=options, **kwargs)
