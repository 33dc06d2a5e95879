"""The service under load: submissions through the HTTP API on loopback, from other processes.

For each store (SQLite; PostgreSQL when installed, started here with its default, durable
settings: ``fsync`` and ``synchronous_commit`` on) this starts ``fleetshare serve`` on a
cluster of ``--nodes`` m5.8xlarge nodes shared by ten teams (the server runs its loop in a
process of its own, as by default; with ``--loop-in-process`` as a thread of the API's
process; with ``--replicas N``, N servers on the one store: the first's loop leads, and the
client processes are spread over them, with ``--loop-alone`` over the others only), then:

1. **fill**: submits ``--active`` workloads (1 CPU, 2 GiB, no duration: they keep running) in
   steps of ``--step``, waits after each step until all are admitted, and records the loop's
   reconcile time (``fleetshare_loop_reconcile_duration_seconds``) per step: the loop's cycle
   time as the cluster grows;
2. **burst**: ``--procs`` client processes, each with ``--concurrency`` requests in flight
   (bare HTTP/1.1 over asyncio streams, one connection per request in flight), submit for
   ``--seconds`` seconds
   (workloads of 2 s duration, on top of the ``--active`` running ones; capacity exists for
   all): submissions/s (201s per second of wall time), p50/p99 latency of a submission, and
   the admission lag (the store's ``first_admitted_at - submitted_at``, both stamped by the
   server) of every workload submitted in the burst; the server processes' CPU time per
   acknowledged submission.

``python bench/service_throughput.py --out bench/results/service_throughput.json``;
``... --loop-in-process --out bench/results/service_throughput_loop_in_process.json``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from run_info import ROOT, machine

sys.path[:0] = [str(ROOT), str(ROOT / "src")]

TEAMS = [f"team-{i}" for i in range(10)]


def config(nodes: int) -> dict[str, Any]:
    share = max(1, nodes // len(TEAMS))
    return {
        "name": "throughput",
        "cluster": {"nodes": [{"instance_type": "m5.8xlarge", "count": nodes, "zone": "z1"}]},
        "policy": {
            "cluster": {"idle_resource_sharing": True},
            "teams": [
                {"name": t, "quota": [{"instance_type": "m5.8xlarge", "count": share}]}
                for t in TEAMS
            ],
        },
    }


def spec(name: str, team: str, duration: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "team": team,
        "pods": 1,
        "requests": {"cpu": 1, "memory": "2Gi"},
    }
    if duration is not None:
        out["duration"] = duration
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the clients (separate processes) ---------------------------------------------------------


async def _post(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
) -> int:
    """One HTTP/1.1 POST on a kept-alive connection; the response's status (body read)."""
    writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
    status = int((await reader.readline()).split(b" ", 2)[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status


async def _client(
    url: str,
    token: str,
    prefix: str,
    concurrency: int,
    until: float,
    duration: float | None,
    count: int | None,
    rate: float | None = None,
) -> dict[str, Any]:
    """``concurrency`` connections, each posting one submission after another. A bare
    HTTP/1.1 client (keep-alive, Content-Length): the load generator shares the machine's
    cores with the server, so it should cost little CPU.

    With ``rate`` (submissions/s of this process) the load is open: the i-th submission is
    due at ``i / rate`` s after the start, a connection sends it then (or at once when it is
    late), and its latency counts from when it was due, so time spent waiting for a free
    connection counts too (no coordinated omission)."""
    cpu = time.process_time()
    start = time.perf_counter()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    counter = iter(range(10**9))
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /api/v1/workloads HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        "Content-Length: "
    ).encode()

    async def worker() -> None:
        connection = None
        while time.time() < until:
            i = next(counter)
            if count is not None and i >= count:
                break
            body = json.dumps(spec(f"{prefix}-{i}", TEAMS[i % len(TEAMS)], duration)).encode()
            started = time.perf_counter()
            if rate is not None:
                due = start + i / rate
                if due > started:
                    await asyncio.sleep(due - started)
                started = due
                if time.time() >= until:
                    break
            try:
                if connection is None:
                    connection = await asyncio.open_connection(host, int(port))
                status = await asyncio.wait_for(_post(*connection, head, body), 60)
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                connection = None
                continue
            except TimeoutError:
                errors["timeout"] = errors.get("timeout", 0) + 1
                connection = None
                continue
            if status == 201:
                latencies.append(time.perf_counter() - started)
            else:
                errors[str(status)] = errors.get(str(status), 0) + 1
        if connection is not None:
            connection[1].close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"latencies": latencies, "errors": errors, "cpu": time.process_time() - cpu}


def _client_process(args: tuple[Any, ...]) -> dict[str, Any]:
    return asyncio.run(_client(*args))


def submit_from_processes(
    urls: list[str],
    token: str,
    prefix: str,
    procs: int,
    concurrency: int,
    seconds: float,
    duration: float | None = None,
    total: int | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    """``procs`` processes submitting at once (process ``p`` to ``urls[p % len(urls)]``),
    as fast as they are answered or, with ``rate``, at that many submissions/s in all;
    their latencies and errors, and the wall time."""
    until = time.time() + seconds
    per = None if total is None else -(-total // procs)
    each = None if rate is None else rate / procs
    jobs = [
        (urls[p % len(urls)], token, f"{prefix}{p}", concurrency, until, duration, per, each)
        for p in range(procs)
    ]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        results = pool.map(_client_process, jobs)
    wall = time.perf_counter() - started
    latencies = [x for r in results for x in r["latencies"]]
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    cpu = sum(r["cpu"] for r in results)
    return {"latencies": latencies, "errors": errors, "wall": wall, "client_cpu": cpu}


# -- the server --------------------------------------------------------------------------------


def start_server(
    db: str, workdir: Path, nodes: int, loop_in_process: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config(nodes)))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    log = open(workdir / f"server-{port}.log", "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetshare.cli",
            "serve",
            "--db",
            db,
            "--config",
            str(path),
            "--port",
            str(port),
            "--log-level",
            "warning",
            *(["--loop-in-process"] if loop_in_process else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=workdir,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError((workdir / f"server-{port}.log").read_text())
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes started by ``pid`` (its loop process; Linux ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def servers_cpu(pids: list[int]) -> float | None:
    """CPU seconds of the server processes and their loop processes together."""
    each = [cpu_seconds(p) for pid in pids for p in (pid, *children(pid))]
    return None if None in each else sum(x for x in each if x is not None)


def reconcile_totals(client: httpx.Client) -> tuple[float, float]:
    """(sum, count) of the loop's reconcile-duration histogram."""
    total = count = 0.0
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("fleetshare_loop_reconcile_duration_seconds_sum"):
            total = float(line.split()[-1])
        elif line.startswith("fleetshare_loop_reconcile_duration_seconds_count"):
            count = float(line.split()[-1])
    return total, count


def wait_admitted(store: Any, expected: int, timeout: float = 600) -> float:
    """Seconds until ``expected`` workloads are admitted (polling the store)."""
    from sqlalchemy import func, select

    from fleetshare.service import store as tables

    w = tables.workloads
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        with store.read("workloads-read") as conn:
            done = conn.execute(
                select(func.count()).select_from(w).where(w.c.state == "admitted")
            ).scalar_one()
        if done >= expected:
            return time.perf_counter() - started
        time.sleep(0.05)
    raise RuntimeError(f"only {done} of {expected} admitted after {timeout} s")


def run_one(db: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from sqlalchemy import select

    from fleetshare.service import store as tables
    from fleetshare.service.auth import create_token
    from fleetshare.service.store import Store

    store = Store(db)
    store.create()
    token = create_token(store, "admin")[1]
    # one after the other: the first takes the lease (runs the loop), the others follow
    servers = [
        start_server(db, workdir, args.nodes, args.loop_in_process) for _ in range(args.replicas)
    ]
    url = servers[0][1]
    # with --loop-alone the leader (the first) serves no submissions: its process runs the loop
    urls = [u for _, u in servers[1 if args.loop_alone else 0 :]]
    pids = [process.pid for process, _ in servers]
    result: dict[str, Any] = {
        "nodes": args.nodes,
        "replicas": args.replicas,
        "loop_alone": args.loop_alone,
        "loop_in_process": args.loop_in_process,
    }
    try:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        growth = []
        submitted = 0
        while submitted < args.active:
            batch = min(args.step, args.active - submitted)
            before = reconcile_totals(client)
            sub = submit_from_processes(
                urls, token, f"fill{submitted}-", args.procs, args.concurrency, 600, total=batch
            )
            submitted += len(sub["latencies"])
            settle = wait_admitted(store, submitted)
            time.sleep(0.5)  # the loop process reports its metrics every 0.25 s
            after = reconcile_totals(client)
            steps = after[1] - before[1]
            growth.append(
                {
                    "active": submitted,
                    "submissions_per_s": round(len(sub["latencies"]) / sub["wall"], 1),
                    "reconciles": int(steps),
                    "reconcile_mean_ms": round(1000 * (after[0] - before[0]) / steps, 2)
                    if steps
                    else None,
                    "all_admitted_after_s": round(settle, 2),
                }
            )
            print(f"  fill: {growth[-1]}", flush=True)
        result["growth"] = growth

        before = reconcile_totals(client)
        cpu_before = servers_cpu(pids)
        started = time.time()
        burst = submit_from_processes(
            urls,
            token,
            "burst",
            args.procs,
            args.concurrency,
            args.seconds,
            duration=2.0,
            rate=args.rate,
        )
        cpu_burst = servers_cpu(pids)
        time.sleep(3)
        after = reconcile_totals(client)
        w = tables.workloads
        with store.read("workloads-read") as conn:
            rows = conn.execute(
                select(w.c.submitted_at, w.c.first_admitted_at, w.c.state).where(
                    w.c.name.like("burst%"), w.c.submitted_at >= started - 1
                )
            ).all()
        lags = [r.first_admitted_at - r.submitted_at for r in rows if r.first_admitted_at]
        latencies = burst["latencies"]
        steps = after[1] - before[1]
        result["burst"] = {
            "procs": args.procs,
            "concurrency_per_proc": args.concurrency,
            "offered_rate_per_s": args.rate,
            "seconds": round(burst["wall"], 2),
            "acknowledged": len(latencies),
            "errors": burst["errors"],
            "submissions_per_s": round(len(latencies) / burst["wall"], 1),
            "latency_ms": {
                "p50": round(1000 * percentile(latencies, 0.5), 1),
                "p99": round(1000 * percentile(latencies, 0.99), 1),
                "max": round(1000 * max(latencies, default=float("nan")), 1),
                "mean": round(1000 * statistics.fmean(latencies), 1) if latencies else None,
            },
            "admission_lag_s": {
                "admitted": len(lags),
                "never_admitted": len(rows) - len(lags),
                "p50": round(percentile(lags, 0.5), 3),
                "p99": round(percentile(lags, 0.99), 3),
                "max": round(max(lags, default=float("nan")), 3),
            },
            "reconciles": int(steps),
            "reconcile_mean_ms": round(1000 * (after[0] - before[0]) / steps, 2) if steps else None,
            "server_cpu_ms_per_submission": round(
                1000 * (cpu_burst - cpu_before) / max(1, len(latencies)), 3
            )
            if cpu_before is not None and cpu_burst is not None
            else None,
            "client_cpu_ms_per_submission": round(
                1000 * burst["client_cpu"] / max(1, len(latencies)), 3
            ),
        }
        print(f"  burst: {result['burst']}", flush=True)
        client.close()
    finally:
        for process, _ in reversed(servers):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        store.close()
    return result


def versions(*names: str) -> dict[str, str | None]:
    """Installed versions of the server's libraries (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--active", type=int, default=5000)
    parser.add_argument("--step", type=int, default=1000)
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="fleetshare serve processes on the one store: the first runs the loop, the "
        "client processes are spread over all",
    )
    parser.add_argument(
        "--loop-alone",
        action="store_true",
        help="with --replicas 2 or more: the clients submit to the followers only, so the "
        "leader's process runs the control loop and serves nothing but /metrics",
    )
    parser.add_argument(
        "--loop-in-process",
        action="store_true",
        help="run each server with --loop-in-process: the loop as a thread of the API's process "
        "(by default each server runs it in a process of its own)",
    )
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--rate",
        type=float,
        help="the burst as an open load of this many submissions/s in all (latency counted "
        "from each submission's due time); by default the clients submit as fast as answered",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.loop_alone and args.replicas < 2:
        parser.error("--loop-alone needs --replicas 2 or more")

    from tests import postgres

    results: dict[str, Any] = {
        "machine": machine(**versions("fastapi", "uvicorn", "uvloop", "httptools", "psycopg")),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "targets": {
            "submissions_per_s": 1000,
            "p99_latency_ms": 50,
            "admission_lag_s": 1.0,
            "at": "5,000 active workloads, 1,000 nodes",
        },
        "runs": {},
    }
    for database in args.databases.split(","):
        with tempfile.TemporaryDirectory(prefix="fs-bench-") as tmp:
            workdir = Path(tmp)
            server = None
            if database == "postgresql":
                why = postgres.unavailable()
                if why is not None:
                    print(f"{database}: skipped ({why})")
                    results["runs"][database] = {"skipped": why}
                    continue
                server = postgres.start()  # durable defaults: fsync, synchronous_commit on
                db = server.database("bench")
            else:
                db = f"sqlite:///{workdir / 'fleetshare.db'}"
            print(f"{database}:", flush=True)
            try:
                results["runs"][database] = run_one(db, args, workdir)
            finally:
                if server is not None:
                    server.stop()
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
