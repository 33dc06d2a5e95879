"""The API fuzzed from its own OpenAPI spec with schemathesis, in process (the ASGI app over a
plane on a temporary store, its loop running): no 500s, responses as the spec says, bodies
the spec forbids refused, every 422 naming its field. The event stream is left out (it never
ends).

Found every run, not on lucky ones: ``?after=2**63`` answered 500 (SQLite's INTEGER is 64-bit)
only when a random draw happened to be that large. So every integer a request carries is
bounded for the fuzzer, and schemathesis's coverage phase sends each bound and one past it on
every run: the parameters' bounds are stated in the API's own spec (a test below holds every
one to that), and an integer in a body without a stated maximum is fuzzed as the 64-bit
integer a store holds. The seed is fixed (``FLEETSHARE_FUZZ_SEED`` searches others by hand).

No stateful run: the links schemathesis infers all start from a submission or a service
registration, and the bodies it draws from the spec are refused (the spec cannot say "requests
or podsets"), so in 100 sequences of 10 calls it stored nothing for a link to follow; the
sequences a user makes are the service tests' (test_service_api.py and others).
"""

from __future__ import annotations

import copy
import json
import os
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
from schemathesis.core.parameters import ParameterLocation

from fleetshare.service.api import create_app
from fleetshare.service.auth import create_token
from fleetshare.service.config import load_config
from fleetshare.service.plane import ControlPlane
from fleetshare.service.store import MAX_ID, Store

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("FLEETSHARE_FUZZ_SEED", "20261206"))
INT64 = (-(2**63), 2**63 - 1)

# The schema is read at import (schemathesis parametrizes at collection); the loop runs only
# while this module's tests do.
_WORKDIR = Path(tempfile.mkdtemp(prefix="fleetshare-fuzz-"))
_PLANE = ControlPlane(load_config(None), Store(f"sqlite:///{_WORKDIR / 'fleetshare.db'}"))
_TOKEN = create_token(_PLANE.store, "admin")[1]
_APP = create_app(_PLANE, start_loop=False)
SPEC: dict[str, Any] = _APP.openapi()


def schemas_in_requests(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema a request's parameters and bodies hold, nested ones and those reached
    through ``$ref`` included, with where it is."""
    components = spec.get("components", {}).get("schemas", {})

    def walk(schema: Any, where: str, seen: frozenset[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        if not isinstance(schema, dict):
            return
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                yield from walk(components[name], f"{where} ({name})", seen | {name})
            return
        yield where, schema
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in schema.get(key, []):
                yield from walk(sub, where, seen)
        for name, sub in (schema.get("properties") or {}).items():
            yield from walk(sub, f"{where}.{name}", seen)
        for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
            yield from walk(schema.get(key), f"{where}{suffix}", seen)

    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            for param in op.get("parameters", []):
                where = f"{method.upper()} {path} {param['in']} {param['name']}"
                yield from walk(param.get("schema"), where, frozenset())
            for media, body in op.get("requestBody", {}).get("content", {}).items():
                yield from walk(body.get("schema"), f"{method.upper()} {path} {media}", frozenset())


def is_integer(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "integer" or (isinstance(kind, list) and "integer" in kind)


def int64_where_unbounded(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as the fuzzer reads it: an integer in a body with no stated maximum is the
    64-bit integer the stores hold, so the coverage phase sends 2^63 - 1 and 2^63 (and the
    same below) on every run."""
    fuzzed = copy.deepcopy(spec)
    for _, schema in schemas_in_requests(fuzzed):
        if is_integer(schema) and "format" not in schema and "maximum" not in schema:
            schema["format"] = "int64"
    return fuzzed


schema = schemathesis.openapi.from_dict(
    int64_where_unbounded(SPEC), config=schemathesis.Config(seed=SEED)
).exclude(path="/api/v1/events/stream")
schema.app = _APP
schema.location = "/openapi.json"


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
AUTH = {"Authorization": f"Bearer {_TOKEN}"}


def names_the_field(body: Any) -> bool:
    """A 422's detail: a message, or a list of {loc, msg} naming where."""
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return bool(detail.strip())
    return bool(detail) and all(
        isinstance(item, dict) and item.get("msg") and isinstance(item.get("loc"), list)
        for item in detail
    )


def test_every_integer_parameter_states_its_bounds() -> None:
    """A position, a page size or an id in a query, path or header is compared in SQL: the
    spec says how far it goes (ids: 0 to 2^63 - 1), so the coverage phase tries both ends
    and one past them on every run."""
    parameters = [
        (where, sub)
        for where, sub in schemas_in_requests(SPEC)
        if is_integer(sub) and where.split()[2] in ("query", "path", "header", "cookie")
    ]
    assert [where for where, sub in parameters if not bounded(sub)] == []
    afters = [sub for where, sub in parameters if where.endswith(" query after")]
    assert len(afters) == 3 and all(s["maximum"] == MAX_ID for s in afters), afters


def bounded(schema: dict[str, Any]) -> bool:
    return bool({"minimum", "exclusiveMinimum"} & schema.keys()) and bool(
        {"maximum", "exclusiveMaximum"} & schema.keys()
    )


@schema.parametrize()
@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_from_its_spec(case: Any) -> None:
    # a case whose headers are the invalid part (no Authorization, say) is sent as drawn: the
    # admin's token would make it valid, and its 200 read as invalid data accepted
    negative_headers = case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER)
    response = case.call_and_validate(headers={} if negative_headers else AUTH, checks=CHOSEN)
    assert response.status_code < 500, response.text
    if response.status_code == 422:
        assert names_the_field(json.loads(response.text)), response.text
