"""Kubernetes quantities are parsed exactly, as Kubernetes does."""

import pytest

from fleetshare.model.quantity import QuantityError, format_quantity, parse_quantity, to_number
from fleetshare.model.resources import parse_resources, render


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        (2, 2000),
        (0.25, 250),
        ("16Gi", 16 * 2**30 * 1000),
        ("1Ki", 1024 * 1000),
        ("1k", 1000 * 1000),
        ("1M", 10**6 * 1000),
        ("1e3", 10**6),
        ("100Mi", 100 * 2**20 * 1000),
        ("0.1m", 1),  # sub-milli rounds up, like Kubernetes
        (".5", 500),
        ("1500u", 2),
    ],
)
def test_parses_kubernetes_quantities_exactly(text: str | int | float, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("bad", ["abc", "1.2.3", "5 Gi", "-1", "1Xi", "", True])
def test_rejects_what_is_not_a_quantity(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)  # type: ignore[arg-type]


def test_renders_for_people() -> None:
    assert format_quantity(parse_quantity("16Gi"), "memory") == "16Gi"
    assert format_quantity(500, "cpu") == "500m"
    assert format_quantity(2000, "nvidia.com/gpu") == "2"
    assert to_number(1500) == 1.5 and to_number(2000) == 2
    assert render(parse_resources({"cpu": "2", "memory": "8Gi"})) == "cpu=2, memory=8Gi"


def test_zero_amounts_are_dropped_from_resource_vectors() -> None:
    assert parse_resources({"cpu": 0, "nvidia.com/gpu": 1}) == {"nvidia.com/gpu": 1000}


def test_a_boolean_is_no_amount() -> None:
    """Issue 28 item 5 (found by the API fuzz once teams could be added over the API): JSON
    ``false`` as a request was taken as 0 by pydantic's lax mode and accepted."""
    from pydantic import TypeAdapter, ValidationError

    from fleetshare.model.quantity import Quantities

    adapter = TypeAdapter(Quantities)
    assert adapter.validate_python({"cpu": 1}) == {"cpu": 1}
    for flag in (False, True):
        with pytest.raises(ValidationError, match="x: not a quantity"):
            adapter.validate_python({"x": flag})
