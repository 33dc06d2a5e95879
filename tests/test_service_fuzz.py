"""The API fuzzed from its own OpenAPI spec with schemathesis, in process (the ASGI app over a
plane on a temporary store, its loop running): no 500s, responses as the spec says, bodies
the spec forbids refused, every 422 naming its field. Deterministic (derandomized) and
bounded (a few dozen examples per operation); the event stream is left out (it never ends).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import schemathesis.specs.openapi.checks  # registers the OpenAPI checks by name
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import CHECKS

from fleetshare.service.api import create_app
from fleetshare.service.auth import create_token
from fleetshare.service.config import load_config
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import Store

pytestmark = pytest.mark.slow

# The schema is read at import (schemathesis parametrizes at collection); the loop runs only
# while this module's tests do.
_WORKDIR = Path(tempfile.mkdtemp(prefix="fleetshare-fuzz-"))
_PLANE = ControlPlane(load_config(None), Store(f"sqlite:///{_WORKDIR / 'fleetshare.db'}"))
_TOKEN = create_token(_PLANE.store, "admin")[1]
schema = schemathesis.openapi.from_asgi(
    "/openapi.json", create_app(_PLANE, start_loop=False)
).exclude(path="/api/v1/events/stream")


@pytest.fixture(scope="module", autouse=True)
def loop() -> Iterator[None]:
    _PLANE.start()
    yield
    _PLANE.stop()
    _PLANE.store.close()
    shutil.rmtree(_WORKDIR, ignore_errors=True)


CHOSEN = [
    CHECKS.get_by_names([name])[0]
    for name in (
        "not_a_server_error",
        "response_schema_conformance",
        "content_type_conformance",
        "negative_data_rejection",
    )
]


def names_the_field(body: Any) -> bool:
    """A 422's detail: a message, or a list of {loc, msg} naming where."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return bool(detail.strip())
    return bool(detail) and all(
        isinstance(item, dict) and item.get("msg") and isinstance(item.get("loc"), list)
        for item in detail
    )


@schema.parametrize()
@settings(
    max_examples=15,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_from_its_spec(case: Any) -> None:
    response = case.call_and_validate(headers={"Authorization": f"Bearer {_TOKEN}"}, checks=CHOSEN)
    assert response.status_code < 500, response.text
    if response.status_code == 422:
        assert names_the_field(json.loads(response.text)), response.text
