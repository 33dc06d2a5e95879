"""Kubernetes resource quantities, parsed exactly.

Every amount is kept as an integer number of *milli-units* (Kubernetes' ``MilliValue``):
``"500m"`` cpu is 500, ``"2"`` GPUs are 2000, ``"16Gi"`` memory is 16 * 2**30 * 1000.
Integers make the quota arithmetic exact; sub-milli amounts round up, as Kubernetes does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

MILLI = 1000

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


MAX_MILLI = 10**18
"""The largest quantity accepted, in milli-units (10^15 base units: a petabyte of memory, a
quadrillion CPUs): sums over a cluster stay within 64-bit integers."""


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> int:
    """Parse a Kubernetes quantity (``"500m"``, ``"16Gi"``, ``1.5``) into milli-units.

    >>> parse_quantity("500m"), parse_quantity("1.5"), parse_quantity("1Ki")
    (500, 1500, 1024000)
    """
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise QuantityError(f"quantity must not be negative: {value!r}")
        if value * MILLI > MAX_MILLI:
            raise QuantityError(f"quantity too large: {value!r} (at most {MAX_MILLI // MILLI})")
        return value * MILLI
    text = repr(value) if isinstance(value, float) else str(value).strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"not a Kubernetes quantity: {value!r} (examples: 500m, 2, 1.5, 16Gi)")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"not a Kubernetes quantity: {value!r}") from exc
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        scaled = number * _BINARY[suffix]
    elif suffix in _DECIMAL:
        scaled = number * _DECIMAL[suffix]
    else:  # exponent form, e.g. 1e3
        scaled = number * (Decimal(10) ** int(suffix[1:]))
    if scaled < 0:
        raise QuantityError(f"quantity must not be negative: {value!r}")
    milli = int((scaled * MILLI).to_integral_value(rounding=ROUND_CEILING))
    if milli > MAX_MILLI:
        raise QuantityError(f"quantity too large: {value!r} (at most {MAX_MILLI // MILLI})")
    return milli


def to_number(milli: int) -> int | float:
    """Milli-units as a plain number in base units: an int when whole, else a float."""
    whole, frac = divmod(milli, MILLI)
    return whole if frac == 0 else milli / MILLI


def format_quantity(milli: int, resource: str = "") -> str:
    """Render milli-units for people: ``16Gi`` for memory, ``500m`` or ``2`` otherwise."""
    if resource in ("memory", "ephemeral-storage") or resource.endswith("memory"):
        value = milli / MILLI
        for suffix in ("Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if value >= unit:
                amount = value / unit
                return f"{amount:g}{suffix}" if amount == int(amount) else f"{amount:.2f}{suffix}"
        return f"{value:g}"
    if milli % MILLI == 0:
        return str(milli // MILLI)
    if milli < MILLI:
        return f"{milli}m"
    return f"{milli / MILLI:g}"


def format_amounts(amounts: Mapping[str, int | float]) -> str:
    """Amounts in base units (bytes, cores, devices: what the API and events carry) for people,
    each as :func:`format_quantity` renders it: ``cpu=1, memory=1Gi, nvidia.com/gpu=1``."""
    return ", ".join(
        f"{name}={format_quantity(round(value * MILLI), name)}" for name, value in amounts.items()
    )


def check_quantities(values: Mapping[str, str | int | float]) -> None:
    """Raise ValueError naming the first entry that is not a quantity (for validators)."""
    for name, amount in values.items():
        try:
            parse_quantity(amount)
        except QuantityError as exc:
            raise ValueError(f"{name}: {exc}") from None


def _checked_quantities(value: dict[str, str | int | float]) -> dict[str, str | int | float]:
    check_quantities(value)
    return value


def _no_booleans(value: Any) -> Any:
    """Before pydantic's lax mode turns ``true``/``false`` into 1/0: a boolean is no amount."""
    if isinstance(value, Mapping):
        for name, amount in value.items():
            if isinstance(amount, bool):
                raise ValueError(f"{name}: not a quantity: {amount!r}")
    return value


Quantities = Annotated[
    dict[str, str | int | float],
    BeforeValidator(_no_booleans),
    AfterValidator(_checked_quantities),
]
"""Named amounts (a pod's requests, a node's allocatable) as a schema field: each a
Kubernetes quantity, not negative, not infinite, not absurdly large (one check for every way
work enters: files, the API, services)."""
