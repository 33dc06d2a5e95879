"""Reading the fields of one Kubernetes object, each checked, each error naming its field.

Kubernetes objects carry many fields fleetshare has no use for; those are never looked at (a
manifest is not validated against the whole Kubernetes schema). The fields that *are* read go
through :class:`Fields`, which checks their type and range and raises :class:`ManifestError`
naming the document, the object and the field path
(``jobs.yaml document 2 (Job default/train): spec.parallelism: ...``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetshare.inputs import InputError
from fleetshare.model.quantity import QuantityError, parse_quantity


class ManifestError(InputError):
    """A manifest that cannot become a workload; the message names the document, the object
    (kind, namespace/name) and the field."""


def join(path: str, key: str | int) -> str:
    """``spec.template`` + ``spec`` -> ``spec.template.spec``; an int is an index."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@dataclass(frozen=True, slots=True)
class Fields:
    """Checked reads of one object's fields; ``where`` names the document and object."""

    where: str

    def error(self, path: str, why: str) -> ManifestError:
        """The error for field ``path`` (empty: the object as a whole)."""
        return ManifestError(self.where, f"{path}: {why}" if path else why)

    def mapping(self, value: Any, path: str, *, required: bool = False) -> dict[str, Any]:
        """A mapping with string keys (absent or null: empty, unless ``required``)."""
        if value is None:
            if required:
                raise self.error(path, "is required")
            return {}
        if not isinstance(value, dict):
            raise self.error(path, f"must be a mapping, got {_kind(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(path, f"keys must be strings, got {key!r}")
        return value

    def items(self, value: Any, path: str, *, required: bool = False) -> list[Any]:
        """A list (absent or null: empty, unless ``required``)."""
        if value is None:
            if required:
                raise self.error(path, "is required")
            return []
        if not isinstance(value, list):
            raise self.error(path, f"must be a list, got {_kind(value)}")
        return value

    def text(self, value: Any, path: str, *, required: bool = False) -> str | None:
        """A string (absent or null: None, unless ``required``; empty counts as absent)."""
        if value is None or value == "":
            if required:
                raise self.error(path, "is required")
            return None
        if not isinstance(value, str):
            raise self.error(path, f"must be a string, got {_kind(value)} {value!r}")
        return value

    def whole(self, value: Any, path: str, *, default: int, minimum: int = 0) -> int:
        """A whole number at least ``minimum`` (absent or null: ``default``)."""
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(path, f"must be a whole number, got {value!r}")
        if value < minimum:
            raise self.error(path, f"must be at least {minimum}, got {value}")
        return value

    def strings(self, value: Any, path: str) -> dict[str, str]:
        """A string-to-string mapping (labels, annotations, a node selector). Kubernetes
        stores the values as strings: an unquoted ``600`` or ``true`` is refused, as the API
        server refuses it."""
        out: dict[str, str] = {}
        for key, item in self.mapping(value, path).items():
            if not isinstance(item, str):
                raise self.error(
                    join(path, key),
                    f"must be a string (Kubernetes stores these as strings; quote it: "
                    f'"{item}"), got {_kind(item)}',
                )
            out[key] = item
        return out

    def quantities(self, value: Any, path: str) -> dict[str, int]:
        """Resource name -> milli-units (zeros kept: a zero request is still a request)."""
        out: dict[str, int] = {}
        for name, amount in self.mapping(value, path).items():
            if amount is None or isinstance(amount, (dict, list)):
                raise self.error(join(path, name), f"must be a quantity, got {amount!r}")
            try:
                out[name] = parse_quantity(amount)
            except QuantityError as exc:
                raise self.error(join(path, name), str(exc)) from None
        return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
