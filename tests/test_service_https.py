"""``fleetshare serve`` over https (``--tls-cert``/``--tls-key``) and behind a reverse proxy
(``--forwarded-allow-ips``, ``--root-path``), as real servers on loopback; the CLI trusting
the server's CA (``--ca-cert``). Certificates are made here (trustme)."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme
from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.service.auth import create_token
from fleetshare.service.store import Store
from tests.service_helpers import Server, page_links, start_server

runner = CliRunner(env={"COLUMNS": "200"})


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    other_ca: Path
    """A CA that signed nothing here."""
    other_key: Path
    """The key of another certificate."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    issued.private_key_pem.write_to_path(str(d / "server.key"))
    (d / "server.crt").write_bytes(b"".join(p.bytes() for p in issued.cert_chain_pems))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    other.cert_pem.write_to_path(str(d / "other-ca.pem"))
    other.issue_cert("127.0.0.1").private_key_pem.write_to_path(str(d / "other.key"))
    return Pki(d / "ca.pem", d / "server.crt", d / "server.key", d / "other-ca.pem",
               d / "other.key")  # fmt: skip


@pytest.fixture(scope="module")
def https(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two processes (the API and its loop), the API on https; it believes forwarded
    headers only from 192.0.2.1 (not loopback, where the tests' requests come from)."""
    workdir = tmp_path_factory.mktemp("https")
    tls = ("--tls-cert", str(pki.cert), "--tls-key", str(pki.key))
    extra = (*tls, "--forwarded-allow-ips", "192.0.2.1")
    srv = start_server(f"sqlite:///{workdir / 'fs.db'}", workdir, extra=extra, ca=pki.ca)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def admin_token(https: Server) -> str:
    store = Store(https.db)
    token = create_token(store, "admin")[1]
    store.close()
    return token


def test_serve_answers_https_with_its_certificate_only(https: Server, pki: Pki) -> None:
    with https.client() as client:
        assert client.get("/healthz").json()["ok"] is True
    other = ssl.create_default_context(cafile=str(pki.other_ca))
    for untrusted in (True, other):  # the system's CAs; a CA that signed nothing
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{https.url}/healthz", verify=untrusted)
    with pytest.raises(httpx.HTTPError):  # nothing in clear
        httpx.get(https.url.replace("https:", "http:") + "/healthz")


def test_the_cli_trusts_the_ca_it_is_given(https: Server, pki: Pki, admin_token: str) -> None:
    command = ["team", "list", "--server", https.url, "--token", admin_token, "--json"]
    given = runner.invoke(app, [*command, "--ca-cert", str(pki.ca)])
    assert given.exit_code == 0, given.output
    assert {t["name"] for t in json.loads(given.stdout)} == {"team-a", "team-b"}
    from_env = runner.invoke(app, command, env={"FLEETSHARE_CA_CERT": str(pki.ca)})
    assert from_env.exit_code == 0, from_env.output
    for refused in (runner.invoke(app, command),
                    runner.invoke(app, [*command, "--ca-cert", str(pki.other_ca)])):  # fmt: skip
        assert refused.exit_code == 1
        (line,) = refused.output.strip().splitlines()
        assert "CERTIFICATE_VERIFY_FAILED" in line and "--ca-cert" in line


def test_forwarded_headers_from_an_address_not_allowed_change_nothing(https: Server) -> None:
    """A trailing-slash redirect names the scheme the server believes it is reached by."""
    with https.client() as client:
        moved = client.get("/dashboard", headers={"X-Forwarded-Proto": "http"})
    assert moved.status_code == 307
    assert moved.headers["location"] == f"{https.url}/dashboard/"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Plain http behind a proxy serving it under /fleetshare (the proxy strips the prefix)
    from this host (loopback: believed by default)."""
    workdir = tmp_path_factory.mktemp("proxied")
    extra = ("--loop-in-process", "--root-path", "/fleetshare")
    srv = start_server(f"sqlite:///{workdir / 'fs.db'}", workdir, extra=extra)
    yield srv
    srv.stop()


def test_a_proxy_terminating_tls_is_believed(proxied: Server) -> None:
    """A redirect sends the browser back through the proxy, by https."""
    with proxied.client() as client:
        moved = client.get("/dashboard", headers={"X-Forwarded-Proto": "https"})
    assert moved.status_code == 307
    assert moved.headers["location"].startswith("https://")
    assert moved.headers["location"].endswith("/fleetshare/dashboard/")


def test_pages_under_a_prefix_link_through_it(proxied: Server) -> None:
    """The docs page loads its assets and the spec under the prefix, the spec's server is the
    prefix (Swagger UI's requests go through the proxy) and the dashboard's links are
    relative."""
    with proxied.client() as client:
        docs = client.get("/docs").text
        assert "'/fleetshare/openapi.json'" in docs
        for link in page_links(docs):
            assert link.startswith("/fleetshare/docs-assets/"), link
            assert client.get(link.removeprefix("/fleetshare")).status_code == 200
        assert client.get("/openapi.json").json()["servers"] == [{"url": "/fleetshare"}]
        page = client.get("/")
        assert page.status_code == 200
        links = [u for u in page_links(page.text) if not u.startswith("data:")]
        assert links and all(not u.startswith("/") for u in links), links
        assert all(client.get(f"/{u}").status_code == 200 for u in links)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--tls-cert", "{cert}"], "--tls-cert: give --tls-key with it"),
        (["serve", "--tls-key", "{key}"], "--tls-key: give --tls-cert with it"),
        (["serve", "--tls-cert", "{cert}", "--tls-key", "{dir}/none.key"],
         "--tls-key: cannot read {dir}/none.key: No such file or directory"),
        (["serve", "--tls-cert", "{dir}", "--tls-key", "{key}"],
         "--tls-cert: cannot read {dir}: Is a directory"),
        (["serve", "--tls-cert", "{cert}", "--tls-key", "{other_key}"],
         "--tls-cert/--tls-key: {cert} and {other_key} are not a PEM certificate and its "
         "unencrypted private key"),
        (["serve", "--forwarded-allow-ips", "127.0.0.1,proxy.local"],
         "--forwarded-allow-ips: 'proxy.local' is not an IP address, a network (CIDR) or *"),
        (["serve", "--root-path", "fleetshare/"],
         "--root-path: 'fleetshare/' is not a path prefix such as /fleetshare"),
        (["team", "list", "--ca-cert", "{dir}/none.pem"],
         "--ca-cert: cannot read {dir}/none.pem: No such file or directory"),
        (["team", "list", "--ca-cert", "{key}"], "--ca-cert: {key} holds no PEM certificate"),
    ],
)  # fmt: skip
def test_unusable_tls_and_proxy_options_are_one_line_naming_the_option(
    pki: Pki, tmp_path: Path, args: list[str], message: str
) -> None:
    paths = {"cert": pki.cert, "key": pki.key, "other_key": pki.other_key, "dir": pki.cert.parent}
    if args[0] == "serve":
        args = [*args, "--db", f"sqlite:///{tmp_path / 'fs.db'}"]
    result = runner.invoke(app, [a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: " + message.format(**paths)), line
    assert not (tmp_path / "fs.db").exists()  # refused before anything started
