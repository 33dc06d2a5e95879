"""The API's documentation page of a real ``fleetshare serve`` works offline: ``/docs``
(Swagger UI) loads its script and styles from the server itself, not from a CDN. (That it
renders in a browser with the network closed: tests/test_dashboard_browser.py.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.service_helpers import Server, page_links, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("docs")
    srv = start_server(
        f"sqlite:///{workdir / 'fleetshare.db'}", workdir, extra=("--loop-in-process",)
    )
    yield srv
    srv.stop()


def test_the_docs_page_loads_everything_from_the_server(server: Server) -> None:
    with server.client() as http:
        html = http.get("/docs")
        assert html.status_code == 200, html.text
        assert not re.findall(r"(?:https?:)?//[\w.-]+", html.text), "the page names another host"
        assert "'/openapi.json'" in html.text  # this server's spec
        found = page_links(html.text)
        for name, marker in {
            "swagger-ui-bundle.js": "SwaggerUIBundle",
            "swagger-ui.css": ".swagger-ui",
        }.items():
            (url,) = [u for u in found if u.endswith(name)]
            assert url.startswith("/"), url
            asset = http.get(url)
            assert asset.status_code == 200 and marker in asset.text, url
        assert all(http.get(u).status_code == 200 for u in found)


def test_there_is_no_redoc_page(server: Server) -> None:
    """ReDoc's bundle loads its vendor's logo from a CDN whatever its options: not served."""
    with server.client() as http:
        assert http.get("/redoc").status_code == 404
