"""The container image (deploy/Containerfile): what it runs is the real CLI, the Helm chart
names the image the build tags, and, where buildah is installed (Debian's package; as root),
the built image serves the API and runs the operator against a real API server, as uid 65532
and without pip. ``tools/image/build.sh`` builds it (a no-op when it is up to date; cold, a
few minutes: debootstrap, then the dependencies from PyPI); ``.ci/run`` installs buildah and
debootstrap and builds it before the tests."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

import fleetshare
from fleetshare.cli import app
from tests.service_helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parent.parent
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
CHART = ROOT / "deploy" / "helm" / "fleetshare"
BUILD = ROOT / "tools" / "image" / "build.sh"
BUILDAH = ROOT / "tools" / "image" / "buildah.sh"


def _instruction(name: str) -> list[str]:
    """The JSON form of the Containerfile's (last) ENTRYPOINT or CMD."""
    lines = [ln for ln in CONTAINERFILE.read_text().splitlines() if ln.startswith(name + " ")]
    value: list[str] = json.loads(lines[-1].removeprefix(name + " "))
    return value


def test_the_image_runs_the_projects_commands() -> None:
    """The entrypoint is the wheel's console script and the default command, ``serve`` with
    its options, is one the CLI takes, as are the chart's ``operator`` args."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert _instruction("ENTRYPOINT") == ["fleetshare"] and "fleetshare" in scripts
    command = _instruction("CMD")
    assert command[0] == "serve"
    runner = CliRunner()
    serve = runner.invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert all(opt in serve.output for opt in command[1:] if opt.startswith("--"))
    template = (CHART / "templates" / "deployment.yaml").read_text()
    operator = runner.invoke(app, ["operator", "--help"], env={"COLUMNS": "200"})
    chart_args = [ln.split("-", 1)[1].strip() for ln in template.splitlines()
                  if ln.strip().startswith("- --")]  # fmt: skip
    assert chart_args and "- operator" in template
    for arg in chart_args:
        assert arg.split("=")[0].split()[0] in operator.output, arg


def test_the_chart_names_the_image_the_build_tags() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == fleetshare.__version__
    image = f"{values['image']['repository']}:{values['image']['tag'] or chart['appVersion']}"
    where = subprocess.run(["bash", str(BUILD), "--where"], capture_output=True, text=True)
    assert where.stdout.strip() == image


# -- the built image (buildah) -----------------------------------------------------------------

MISSING = (
    "buildah is not installed (apt-get install buildah debootstrap)"
    if shutil.which("buildah") is None or shutil.which("debootstrap") is None
    else "building the image needs root (debootstrap, buildah's storage)"
    if os.geteuid() != 0
    else None
)


def buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(BUILDAH), *args], capture_output=True, text=True,
                          check=check)  # fmt: skip


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    """A working container of the image, built (or found up to date) first."""
    if MISSING:
        pytest.skip(MISSING)
    built = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True,
                           env={**os.environ, "PYTHON": sys.executable})  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    name = buildah("from", built.stdout.strip()).stdout.strip()
    yield name
    buildah("rm", name, check=False)


def run(container: str, *command: str, mounts: tuple[str, ...] = ()) -> list[str]:
    """``buildah run`` (chroot isolation, the host's network) as the image's user."""
    volumes = [f"--volume={m}" for m in mounts]
    return ["bash", str(BUILDAH), "run", "--isolation", "chroot", *volumes, container, "--",
            *command]  # fmt: skip


def output(container: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(run(container, *command), capture_output=True, text=True)


def test_the_built_image_is_the_containerfiles(container: str) -> None:
    config = json.loads(buildah("inspect", container).stdout)["OCIv1"]["config"]
    assert config["Entrypoint"] == _instruction("ENTRYPOINT")
    assert config["Cmd"] == _instruction("CMD")
    assert config["User"] == "65532:65532"
    assert output(container, "fleetshare", "--version").stdout.strip() == (
        f"fleetshare {fleetshare.__version__}"
    )
    assert output(container, "id", "-u").stdout.strip() == "65532"
    for tool in (["python3", "-m", "pip", "--version"], ["python3", "-m", "ensurepip"],
                 ["sh", "-c", "command -v gcc cc make"]):  # fmt: skip
        assert output(container, *tool).returncode != 0, tool


class _Running:
    """A command of the image running in the background, in a session of its own."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # fmt: skip

    def stop(self) -> None:
        """SIGTERM to its session (buildah and what it runs), SIGKILL after 15 s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=15)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_image_serves_the_api(container: str, tmp_path: Path) -> None:
    """Its default command with another port: the API, the offline docs page, the store in
    the image's data directory."""
    port = free_port()
    server = _Running(run(container, "fleetshare", "serve", "--host", "127.0.0.1",
                          "--port", str(port)), tmp_path / "serve.log")  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/healthz") or server.proc.poll() is not None, 120, 0.2)
        assert server.proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
        assert httpx.get(f"{url}/healthz").json() == {"ok": True, "loop": "running"}
        assert _answers(f"{url}/docs-assets/swagger-ui-bundle.js")
    finally:
        server.stop()
    assert (
        "store sqlite:////var/lib/fleetshare/fleetshare.db" in (tmp_path / "serve.log").read_text()
    )


@pytest.mark.slow
def test_the_image_runs_the_operator_against_a_real_api_server(
    container: str, kube: Any, ns: str, tmp_path: Path
) -> None:
    """``fleetshare operator`` with the chart's arguments (no webhook: that needs the chart's
    Secret), the kubeconfig mounted: it becomes ready (/readyz on the metrics port)."""
    config = json.loads(Path(kube.kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    ca = Path(cluster.pop("certificate-authority")).read_bytes()
    cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    kubeconfig.chmod(0o644)
    port = free_port()
    args = ["fleetshare", "operator", "--kubeconfig", "/etc/fleetshare/kubeconfig",
            "--no-install-crds", f"--lease-namespace={ns}", "--cloud=none",
            "--registration-timeout=900", f"--metrics-port={port}", "--stale-seconds=60",
            f"--namespace={ns}"]  # fmt: skip
    mount = f"{kubeconfig}:/etc/fleetshare/kubeconfig:ro"
    operator = _Running(run(container, *args, mounts=(mount,)), tmp_path / "operator.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/readyz") or operator.proc.poll() is not None, 120, 0.2)
        assert operator.proc.poll() is None, (tmp_path / "operator.log").read_text()[-3000:]
        assert _answers(f"{url}/healthz")
        assert "fleetshare_" in httpx.get(f"{url}/metrics").text
    finally:
        operator.stop()
