"""The control loop in a process of its own, started and supervised by ``fleetshare serve``.

A reconcile at thousands of workloads holds the GIL for tens of milliseconds; requests that
arrive meanwhile wait for it. So by default ``fleetshare serve`` runs the loop in a child
process (``fleetshare serve --role loop``, same config and store) and serves the API as a
follower that never runs a reconcile (:class:`~fleetshare.service.plane.ControlPlane` in
``api`` mode). The two talk over the child's standard streams:

- **parent to child** (its stdin): one byte per commit the loop acts on (a submission batch,
  a cancellation, a policy change...) wakes the loop at once instead of at its next poll
  (0.1 s). End of file (the parent exited, or was killed: the kernel closes the pipe) stops
  the child cleanly: it finishes its step and gives the lease up, so no loop outlives its
  server and another replica can take over at once.
- **child to parent** (its stdout): a JSON line about every :data:`STATUS_SECONDS`, and a
  last one as it exits: ``{"leader": bool, "lease_held": bool, "failed": str | null,
  "metrics": text}``, where ``metrics`` is the loop's counters and histograms in Prometheus'
  text format (admissions, admission wait, preemptions, evictions, reconcile duration, its
  store's operations and errors, its lease's transitions), which the parent's ``/metrics``
  serves merged with its own; the last report of every earlier loop process is added in, so
  the counters do not start again at 0 when a loop process is started again
  (:mod:`fleetshare.service.merged_metrics`). The child's logging goes to stderr, as the
  parent's does.

Leader election is unchanged: the child takes the lease as a one-process server would (a
second ``fleetshare serve`` on the store has a child that follows, trying for the lease every
second), and the parent reports its replica as the leader while its child holds it.

Supervision (:class:`LoopProcess`): a child that exits while the parent runs (a crash, a lost
lease, a failed step) is started again after a back-off (0.5 s, doubling to 10 s while it
keeps failing within a minute); meanwhile ``/healthz`` answers 503 naming the exit. The new
child rebuilds from the store as a restart does (a kill -9'd holder on the same host is
recognised as dead, so it takes the lease at once).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from prometheus_client.core import Metric

from fleetshare.service.merged_metrics import cumulative, merge, parse
from fleetshare.service.metrics import LoopMetrics
from fleetshare.service.plane import STALE_SECONDS, ControlPlane

log = logging.getLogger("fleetshare.service")

STATUS_SECONDS = 0.25
"""The loop process reports its status and metrics this often."""
START_SECONDS = 120.0
"""How long the parent waits for a (re)started loop process's first report."""
BACKOFF_SECONDS = (0.5, 10.0)
"""First and longest wait before starting a loop process again after it exited."""
HEALTHY_SECONDS = 60.0
"""A loop process that ran this long resets the back-off."""


# -- the child ---------------------------------------------------------------------------------


def run_child(plane: ControlPlane) -> int:
    """Run ``plane`` (in ``loop`` mode) until stdin ends or SIGTERM; the exit status: 0 after
    a clean stop, 1 when the loop failed (the parent starts a new process)."""
    report = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # nothing else may write the reports
    metrics = LoopMetrics(plane)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops us (stdin ends)

    def wakes() -> None:
        stdin = sys.stdin.fileno()
        while os.read(stdin, 4096):
            plane.wake()
        stop.set()  # the parent is gone or stopping

    threading.Thread(target=wakes, name="fleetshare-wakes", daemon=True).start()

    def tell() -> None:
        status = {
            "leader": plane.leader,
            "lease_held": plane.lease.held,
            "failed": plane.failed or plane.stalled,
            "metrics": metrics.render().decode(),
        }
        with contextlib.suppress(OSError):  # the parent went away: stdin ends too
            report.write(json.dumps(status) + "\n")

    plane.start()
    try:
        while True:
            failed = plane.failed  # read before the report: a failure after it is told below
            tell()
            if failed is not None or stop.wait(STATUS_SECONDS):  # (stalled: go on)
                break
    finally:
        plane.close()
        tell()  # the last word: counts up to the end (a lost or released lease among them)
    return 1 if plane.failed is not None else 0


# -- the parent --------------------------------------------------------------------------------


class LoopProcess:
    """Starts the loop process, reads its reports, wakes it, starts it again when it exits,
    and stops it (see the module docstring). ``command`` runs the child (``fleetshare serve
    --role loop`` with the parent's config); ``env`` its environment (the store's URL)."""

    def __init__(
        self, command: list[str], env: dict[str, str], stale_seconds: float = STALE_SECONDS
    ) -> None:
        self.command = command
        self.env = env
        self.stale_seconds = stale_seconds
        self.reported_at = time.monotonic()
        """When the loop process last reported (monotonic)."""
        self.plane: ControlPlane | None = None
        """The API's plane: told whether its loop process leads or failed."""
        self._metrics = b""
        """The running loop process's latest report of its metrics (Prometheus text)."""
        self._carried: list[Metric] = []
        """The counters and histograms of the loop processes that exited, summed."""
        self.leader = False
        self.lease_held = False
        self.failed: str | None = None
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._stdin: IO[bytes] | None = None
        self._reported = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._supervisor: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """The running loop process's id."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> None:
        """Start the loop process (then :meth:`wait_ready`)."""
        self._spawn()

    def wait_ready(self, timeout: float = START_SECONDS) -> None:
        """Wait for the loop process's first report (it has loaded the store, or follows
        another replica's loop), then supervise it; RuntimeError when it exits or stays
        silent."""
        if not self._wait_first(timeout):
            self._kill()
            raise RuntimeError(f"the loop process did not start: {self.failed or 'no report'}")
        self._supervisor = threading.Thread(
            target=self._supervise, name="fleetshare-loop-process", daemon=True
        )
        self._supervisor.start()
        threading.Thread(target=self._watch, name="fleetshare-loop-watch", daemon=True).start()

    def attach(self, plane: ControlPlane) -> None:
        """Report to ``plane`` (the API's, in ``api`` mode) and let it wake the loop."""
        self.plane = plane
        plane.notify_loop = self.wake
        self._tell_plane()

    def metrics(self) -> list[Metric]:
        """The loop's counters and histograms: the running loop process's latest report plus
        the last reports of those before it."""
        with self._lock:
            carried, latest = self._carried, self._metrics
        return merge(carried, parse(latest))

    def wake(self) -> None:
        """Wake the loop process (after a commit it acts on); never blocks."""
        stdin = self._stdin
        if stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):  # full (a wake is queued) or closed
            os.write(stdin.fileno(), b"w")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop process: close its stdin (it finishes its step and gives the lease
        up), SIGKILL it if it has not exited within ``timeout``; no restart after this."""
        self._stopping.set()
        with self._lock:
            process, stdin = self._process, self._stdin
            self._stdin = None
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        if process is not None:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)

    # -- inside ------------------------------------------------------------------------------

    def _spawn(self) -> None:
        process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
        )
        assert process.stdin is not None and process.stdout is not None
        os.set_blocking(process.stdin.fileno(), False)  # a wake never waits
        self._reported.clear()
        with self._lock:
            self._process, self._stdin = process, process.stdin
        threading.Thread(
            target=self._read, args=(process,), name="fleetshare-loop-reports", daemon=True
        ).start()

    def _wait_first(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        process = self._process
        while not self._reported.wait(0.1):
            if process is None or process.poll() is not None or time.monotonic() > deadline:
                return False
        return True

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        """Take the child's reports until its stdout ends."""
        assert process.stdout is not None
        last = b""
        for line in process.stdout:
            try:
                status: dict[str, Any] = json.loads(line)
            except ValueError:
                continue
            last = str(status.get("metrics", "")).encode()
            with self._lock:
                if process is not self._process:  # a successor runs already (never so far)
                    continue
                self._metrics = last
            self.reported_at = time.monotonic()
            self.leader = bool(status.get("leader"))
            self.lease_held = bool(status.get("lease_held"))
            failed = status.get("failed")
            self.failed = f"the loop process failed: {failed}" if failed else None
            self._reported.set()
            self._tell_plane()
        with self._lock:  # it exited: its counts carry over to the next one
            self._carried = cumulative(merge(self._carried, parse(last)))
            if process is self._process:
                self._metrics = b""

    def _tell_plane(self) -> None:
        if self.plane is not None:
            self.plane.loop_process_leads = self.leader
            self.plane.loop_process_holds_lease = self.lease_held
            self.plane.failed = self.failed

    def _watch(self) -> None:
        """A loop process that stopped reporting (stopped with SIGSTOP, or hung) is neither
        running nor leading: after ``stale_seconds`` without a report, ``/healthz`` says so
        (503) and the metrics read 0, until reports come again."""
        while not self._stopping.wait(1.0):
            age = time.monotonic() - self.reported_at
            process = self._process
            if age > self.stale_seconds and process is not None and process.poll() is None:
                self.leader = self.lease_held = False  # not known any more
                self.failed = (
                    f"the loop process (pid {process.pid}) has not reported for {age:.0f} s "
                    "(stopped or hung)"
                )
                self._tell_plane()

    def _supervise(self) -> None:
        backoff = BACKOFF_SECONDS[0]
        while not self._stopping.is_set():
            process = self._process
            assert process is not None
            started = time.monotonic()
            code = process.wait()
            if self._stopping.is_set():
                return
            self.leader = self.lease_held = False
            self.failed = f"the loop process exited ({_exit(code)}); starting it again"
            self._tell_plane()
            log.error("%s", self.failed)
            if time.monotonic() - started >= HEALTHY_SECONDS:
                backoff = BACKOFF_SECONDS[0]
            if self._stopping.wait(backoff):
                return
            backoff = min(BACKOFF_SECONDS[1], 2 * backoff)
            with self._lock:
                if self._stopping.is_set():
                    return
                self._spawn()
            self.restarts += 1

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _exit(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"status {code}"


def child_command(config: Path | None, stale_seconds: float = STALE_SECONDS) -> list[str]:
    """The command line of a loop process for ``config``."""
    command = [sys.executable, "-m", "fleetshare.cli", "serve", "--role", "loop"]
    command += ["--stale-seconds", f"{stale_seconds:g}"]
    if config is not None:
        command += ["--config", str(config.resolve())]
    return command
