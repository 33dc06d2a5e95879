"""A throwaway PostgreSQL server for tests and benchmarks: Debian's ``initdb`` and ``pg_ctl``
into a temporary directory, on a random loopback port, its unix socket in that directory,
stopped by PID.

PostgreSQL refuses to run as root; as root the data directory is given to an unprivileged user
(``postgres`` when it exists, else ``nobody``) and the server runs as that user. Where the
binaries are: ``$FLEETSHARE_PG_BIN``, else ``initdb`` on ``PATH``, else the newest
``/usr/lib/postgresql/*/bin``. ``$FLEETSHARE_TEST_POSTGRESQL_URL`` names an existing server
instead (databases are created in it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

URL_ENV = "FLEETSHARE_TEST_POSTGRESQL_URL"
BIN_ENV = "FLEETSHARE_PG_BIN"


def find_bin() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    env = os.environ.get(BIN_ENV)
    if env:
        return Path(env)
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def unavailable() -> str | None:
    """Why no PostgreSQL can be started here (None: one can)."""
    if os.environ.get(URL_ENV):
        return None
    bin_dir = find_bin()
    if bin_dir is None or not (bin_dir / "pg_ctl").exists():
        return "PostgreSQL is not installed (no initdb/pg_ctl; apt-get install postgresql)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """A running server; :meth:`database` makes a fresh database and returns its URL."""

    url: str  # of the maintenance database "postgres"
    directory: Path | None = None
    pid: int | None = None
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def database(self, prefix: str = "fs") -> str:
        import psycopg

        name = f"{prefix}_{os.getpid()}_{next(self._counter)}"
        with psycopg.connect(self.url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def stop(self) -> None:
        """Immediate shutdown by PID (SIGQUIT: the data is thrown away), SIGKILL if it lingers;
        the directory is removed."""
        if self.pid is not None:
            _stop_pid(self.pid)
            self.pid = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def _stop_pid(pid: int, timeout: float = 30.0) -> None:
    for sig, wait in ((signal.SIGQUIT, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)


def start(settings: dict[str, str] | None = None, attempts: int = 3) -> PostgresServer:
    """Start a server (``settings`` are ``-c`` options, e.g. ``{"fsync": "off"}``)."""
    url = os.environ.get(URL_ENV)
    if url:
        return PostgresServer(url)
    bin_dir = find_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed")
    directory = Path(tempfile.mkdtemp(prefix="fleetshare-pg-"))
    user: dict[str, int] = {}
    if os.geteuid() == 0:  # initdb and postgres refuse root
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            entry = pwd.getpwnam("nobody")
        os.chown(directory, entry.pw_uid, entry.pw_gid)
        os.chmod(directory, 0o700)
        user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    data = directory / "data"
    subprocess.run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        cwd=directory,
        **user,  # type: ignore[arg-type]
    )
    options = {"listen_addresses": "127.0.0.1", "unix_socket_directories": str(directory)}
    options |= {"max_connections": "200", **(settings or {})}
    last = ""
    for _ in range(attempts):
        port = _free_port()
        flags = " ".join([f"-p {port}", *(f"-c {k}={v}" for k, v in options.items())])
        result = subprocess.run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                flags,
                "-l",
                str(directory / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            capture_output=True,
            text=True,
            cwd=directory,
            **user,  # type: ignore[arg-type]
        )
        if result.returncode == 0:
            pid = int((data / "postmaster.pid").read_text().splitlines()[0])
            url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
            return PostgresServer(url, directory, pid)
        last = result.stdout + result.stderr
        log = directory / "server.log"
        if log.exists():
            last += log.read_text()[-2000:]
    shutil.rmtree(directory, ignore_errors=True)
    raise RuntimeError(f"PostgreSQL did not start:\n{last}")
