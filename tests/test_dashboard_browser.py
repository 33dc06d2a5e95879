"""The dashboard in a real browser: Debian's chromium, driven by Selenium through Debian's
chromedriver, against a real ``fleetshare serve``. The page asks for a token and shows
nothing without a valid one; a team's numbers on the page are the API's; a submission
through the API shows up on the page through the event stream, without a reload.

Without chromium, chromedriver or selenium these tests are skipped, and the test summary
says so loudly (``tests/conftest.py``); ``.ci/run`` installs them. ``FLEETSHARE_CHROMIUM``
and ``FLEETSHARE_CHROMEDRIVER`` name other binaries.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fleetshare.service.auth import create_token
from fleetshare.service.store import Store
from tests.service_helpers import Server, job, start_server

CHROMIUM = os.environ.get("FLEETSHARE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = (
    os.environ.get("FLEETSHARE_CHROMEDRIVER")
    or shutil.which("chromedriver")
    or "/usr/bin/chromedriver"
)
BROWSER_SKIP = "BROWSER TESTS SKIPPED"

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - selenium is a dev extra
    webdriver = None

missing = [
    what
    for what, present in (
        ("selenium (pip install -e '.[dev]')", webdriver is not None),
        ("chromium (apt-get install chromium)", shutil.which(CHROMIUM) is not None),
        ("chromedriver (apt-get install chromium-driver)", shutil.which(CHROMEDRIVER) is not None),
    )
    if not present
]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"{BROWSER_SKIP}: missing {', '.join(missing)}"),
]

# Chromium as root in a sandboxed, closed network (docs: the machine notes on chromium):
# no sandbox, no GPU, and none of the background connections the closed network refuses.
# Every request but loopback's goes to a proxy that is not there: the pages must work offline.
CHROMIUM_FLAGS = [
    "--proxy-server=http://127.0.0.1:9",
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1600",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("dashboard")
    srv = start_server(f"sqlite:///{workdir / 'fleetshare.db'}", workdir)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    store = Store(server.db)
    out = {s: create_token(store, s)[1] for s in ("admin", "team:team-b")}
    store.close()
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="fleetshare-chromium-")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def wait(driver: WebDriver, predicate: Any, timeout: float = 30.0) -> Any:
    def check(d: WebDriver) -> Any:
        try:
            return predicate(d)
        except StaleElementReferenceException:  # re-rendered under us: ask again
            return False

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(check)


def sign_in(driver: WebDriver, server: Server, token: str) -> None:
    driver.get(f"{server.url}/")
    driver.execute_script("sessionStorage.clear()")
    driver.get(f"{server.url}/")

    def form(d: WebDriver) -> Any:
        """The token field once the sign-in form shows (after the page's script ran, slow on a
        loaded machine); a page still signed in from the test before is signed out first."""
        if not d.find_element(By.ID, "login").is_displayed():
            out = d.find_elements(By.ID, "signout")
            if out and out[0].is_displayed():
                out[0].click()
            return False
        field = d.find_element(By.ID, "token")
        return field if field.is_displayed() and field.is_enabled() else False

    field = wait(driver, form)
    field.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()


def page_numbers(driver: WebDriver, team: str) -> dict[tuple[str, str], float]:
    """The team's quota, used and borrowed cells, read in one go (the page re-renders)."""
    cells = driver.execute_script(
        'return [...document.querySelectorAll(`#teams td[data-team="${arguments[0]}"]`)]'
        ".map(c => [c.dataset.resource, c.dataset.kind, Number(c.dataset.value)])",
        team,
    )
    return {(resource, kind): float(value) for resource, kind, value in cells}


def api_numbers(client: httpx.Client, team: str) -> dict[tuple[str, str], float]:
    data = client.get(f"/api/v1/teams/{team}").json()
    resources = set(data["quota"]) | set(data["used"])
    return {
        (r, kind): float(data[kind].get(r, 0))
        for r in resources
        for kind in ("quota", "used", "borrowed")
    }


def test_nothing_is_shown_without_a_valid_token(browser: WebDriver, server: Server) -> None:
    sign_in(browser, server, "fs_not-a-token")
    message = wait(browser, lambda d: d.find_element(By.ID, "login-error").text)
    assert "refused" in message
    assert not browser.find_element(By.ID, "app").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "#teams .team") == []
    assert browser.execute_script("return sessionStorage.getItem('fleetshare-token')") is None


def test_the_page_shows_the_apis_numbers_and_follows_submissions(
    browser: WebDriver, server: Server, tokens: dict[str, str]
) -> None:
    with server.client(tokens["admin"]) as admin:
        assert admin.post("/api/v1/workloads", json=job("first", "team-a")).status_code == 201
        sign_in(browser, server, tokens["admin"])
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#teams [data-team="team-a"]'))
        wait(browser, lambda d: d.find_element(By.ID, "live").text == "live")
        # the page's team-a numbers are the API's
        wait(browser, lambda d: page_numbers(d, "team-a") == api_numbers(admin, "team-a"))
        assert page_numbers(browser, "team-a")[("nvidia.com/gpu", "quota")] == 2
        assert browser.find_element(By.CSS_SELECTOR, "#whatif-card").is_displayed()
        assert "ml.g5.8xlarge" in browser.find_element(By.ID, "node-groups").text
        # a submission through the API reaches the page by the event stream, without a reload
        before = page_numbers(browser, "team-a")[("nvidia.com/gpu", "used")]
        marker = browser.execute_script("window.__same_page = true; return 1")
        for i in range(3):  # quota 2 and borrowing 1: three more make four, one waits
            response = admin.post("/api/v1/workloads", json=job(f"more-{i}", "team-a"))
            assert response.status_code == 201
        admitted = '#events li[data-kind="admit"][data-workload="more-1"]'
        try:
            wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, admitted), timeout=8)
            wait(
                browser,
                lambda d: page_numbers(d, "team-a") == api_numbers(admin, "team-a"),
                timeout=8,
            )
        except TimeoutException:  # pragma: no cover - the message says what the page showed
            raise AssertionError(browser.find_element(By.ID, "app").text) from None
        after = page_numbers(browser, "team-a")
        assert after[("nvidia.com/gpu", "used")] == before + 2 == 3
        assert after[("nvidia.com/gpu", "borrowed")] == 1
        assert browser.execute_script("return window.__same_page") is True and marker == 1
        waiting = '#pending tr[data-workload="more-2"]'
        pending = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, waiting))
        assert "borrow limit" in pending[0].text
        for name in ("first", "more-0", "more-1", "more-2"):
            admin.delete(f"/api/v1/workloads/{name}")


def test_a_team_token_sees_its_team_only(
    browser: WebDriver, server: Server, tokens: dict[str, str]
) -> None:
    sign_in(browser, server, tokens["team:team-b"])
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#teams [data-team="team-b"]'))
    assert browser.find_elements(By.CSS_SELECTOR, '#teams [data-team="team-a"]') == []
    assert not browser.find_element(By.ID, "whatif-card").is_displayed()
    time.sleep(0.5)
    events = browser.find_elements(By.CSS_SELECTOR, "#events li[data-workload]")
    names = {e.get_attribute("data-workload") for e in events}
    assert not names & {"first", "more-0", "more-1", "more-2"}  # team-a's
    browser.find_element(By.ID, "signout").click()
    assert wait(browser, lambda d: d.find_element(By.ID, "login").is_displayed())
    assert browser.find_elements(By.CSS_SELECTOR, "#teams .team") == []


def test_the_api_docs_render_offline(browser: WebDriver, server: Server) -> None:
    """/docs (Swagger UI) lists every operation of the API, with nothing fetched from
    anywhere but the server."""
    spec = httpx.get(f"{server.url}/openapi.json").json()
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    browser.get(f"{server.url}/docs")
    shown = "return new Set([...document.querySelectorAll('.opblock')].map(e => e.id)).size"
    wait(browser, lambda d: d.execute_script(shown) == len(operations))
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert f"{server.url}/openapi.json" in fetched
    assert all(url.startswith(server.url) for url in fetched), fetched
