"""Start a real ``fleetshare serve`` process on loopback, on a temporary SQLite store."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx

SRC = Path(__file__).resolve().parent.parent / "src"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cli_env() -> dict[str, str]:
    """The environment for a fleetshare subprocess running this checkout's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    env.pop("FLEETSHARE_SERVER", None)
    env.pop("FLEETSHARE_TOKEN", None)
    return env


@dataclass
class Server:
    """A running server process."""

    process: subprocess.Popen[bytes]
    url: str
    db: str
    log: Path
    verify: ssl.SSLContext | bool = True
    """How an https server's certificate is checked (its CA's context)."""

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30, verify=self.verify)

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(
    db: str,
    workdir: Path,
    config: Path | None = None,
    timeout: float = 90,
    extra: tuple[str, ...] = (),
    ca: Path | None = None,
) -> Server:
    """Start ``fleetshare serve`` and wait until it answers /healthz (two processes start:
    the API and its loop process; on a loaded 2-core machine that can take half a minute).
    ``ca``: the server serves https (``extra`` gives its ``--tls-cert``), signed by this CA."""
    port = free_port()
    log = workdir / f"server-{port}.log"
    command = [
        sys.executable,
        "-m",
        "fleetshare.cli",
        "serve",
        "--db",
        db,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    if config is not None:
        command += ["--config", str(config)]
    command += extra
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=cli_env(), cwd=workdir
        )
    verify = ssl.create_default_context(cafile=str(ca)) if ca else True
    scheme = "https" if ca else "http"
    server = Server(process, f"{scheme}://127.0.0.1:{port}", db, log, verify)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1, verify=verify).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    server.kill()
    raise RuntimeError(f"server did not start in {timeout} s:\n{log.read_text()}")


def wait_for(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate()`` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting ({timeout} s)")
        time.sleep(interval)


def sample_value(text: str, name: str, **labels: str) -> float:
    """The value of the first sample ``name`` with (at least) ``labels`` in Prometheus text (0
    when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


GPU_JOB: dict[str, Any] = {"pods": 1, "requests": {"nvidia.com/gpu": 1, "cpu": 4, "memory": "16Gi"}}


def job(name: str, team: str, **extra: Any) -> dict[str, Any]:
    """A one-GPU workload spec."""
    return {"name": name, "team": team, **GPU_JOB, **extra}


def config_text_listing(servers: dict[str, str]) -> str:
    """The bundled default config with the Prometheus servers live services may query."""
    from importlib.resources import files

    text = (files("fleetshare.service") / "default.yaml").read_text(encoding="utf-8")
    return text + "prometheus_servers:\n" + "".join(f"  {n}: '{u}'\n" for n, u in servers.items())


def config_listing(servers: dict[str, str]) -> Any:
    """The default config (a Scenario) listing ``servers`` (name -> URL)."""
    import yaml

    from fleetshare.scenario.loader import load_scenario_data
    from fleetshare.service.config import check_config

    data = yaml.safe_load(config_text_listing(servers))
    return check_config(load_scenario_data(data, Path("."), "test config"))


def config_file_listing(workdir: Path, servers: dict[str, str]) -> Path:
    """:func:`config_listing` as a file for ``serve --config``."""
    path = workdir / "config-with-prometheus.yaml"
    path.write_text(config_text_listing(servers))
    return path


class _Links(HTMLParser):
    """Every ``src`` and ``href`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


def page_links(html: str) -> list[str]:
    """Every ``src`` and ``href`` of an HTML page, in order."""
    parser = _Links()
    parser.feed(html)
    return parser.links
