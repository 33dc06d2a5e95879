"""Reading the files users give: one layer, one set of checks, one kind of error.

Every file fleetshare reads from a user (policies, Kueue and HyperPod imports, scenarios, node
pools, pending work, traces) goes through here:

- the path must name a readable regular file (not a directory, a pipe or a device), at most
  :data:`MAX_BYTES` long, so ``/dev/zero`` or a named pipe with no writer cannot hang a run;
- text must be UTF-8; a bad byte is reported with its offset;
- YAML is parsed safely, rejecting duplicate keys (the second would silently win), nesting
  deeper than :data:`MAX_DEPTH`, non-finite numbers (``.inf``, ``.nan``), and aliases that
  expand to more values than the text holds (a "billion laughs");
- JSON likewise (``NaN`` and ``Infinity`` are not JSON numbers).

Problems raise :class:`InputError`, whose message names the file and, where there is one, the
place: ``error: policy.yaml: line 4: duplicate key 'teams'``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import stat
import unicodedata
import zlib
from collections.abc import Hashable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt

MAX_BYTES = 256 * 2**20
"""The largest file read (256 MiB): far above any real policy or bundled trace."""
MAX_DEPTH = 64
"""The deepest nesting of mappings and lists accepted."""


MAX_COUNT = 100_000
"""The most of anything a file counts: nodes of one kind, pods of one workload, instances of
one group, reservation or headroom (Kubernetes supports 5,000 nodes and 150,000 pods in a
cluster); a count of 10^9 would build a billion nodes or place pods one by one for hours."""
MAX_TOTAL_NODES = 100_000
"""The most nodes a scenario's cluster (and ``--nodes`` file) may list in all."""
MAX_TOTAL_PODS = 1_000_000
"""The most pods a scenario's (or ``--pending`` file's) workloads may have in all."""


def check_count(value: int) -> int:
    """``value`` if at most :data:`MAX_COUNT`, else ValueError saying why."""
    if value > MAX_COUNT:
        raise ValueError(
            f"{value:,} is more than {MAX_COUNT:,}, the most fleetshare accepts (far above "
            "real clusters: Kubernetes supports 5,000 nodes and 150,000 pods)"
        )
    return value


Count = Annotated[StrictInt, AfterValidator(check_count)]
"""A whole number (not a bool or a float) of at most :data:`MAX_COUNT`; give the lower bound
with ``Field(ge=...)``."""

MAX_NAME = 253
"""The longest name (a Kubernetes object name's limit)."""


def check_name(value: str) -> str:
    """``value`` if it can name something (a team, a workload, a node, a pool, a flavor, a
    priority class) everywhere it is shown and used, else ValueError saying why: at most
    :data:`MAX_NAME` characters, not ``.`` or ``..`` (URLs and paths resolve them away), no
    control characters (NUL, newlines: they forge log lines and break terminals) and no
    invisible formatting characters (right-to-left marks, zero-width ones: a name that reads
    as another)."""
    if not value:
        raise ValueError("a name may not be empty")
    if len(value) > MAX_NAME:
        raise ValueError(f"a name has at most {MAX_NAME} characters, this one {len(value)}")
    if value in (".", ".."):
        raise ValueError(f"a name may not be {value!r}")
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise ValueError(
                f"{value!r}: a name may not hold U+{ord(char):04X} "
                f"({unicodedata.name(char, 'a control character')})"
            )
    return value


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME), AfterValidator(check_name)]
"""A name (:func:`check_name`); its schema says how long it may be."""


class StrictModel(BaseModel):
    """The base of every schema a user's file is validated against: unknown fields are errors
    (a typo is not silently ignored), fields may be given by name or alias, and floats must be
    finite (``.inf`` and ``.nan`` are refused)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class InputError(ValueError):
    """A file that cannot be used as input; the message names it and says why."""

    def __init__(self, source: str, why: str) -> None:
        self.source = source
        self.why = why
        super().__init__(f"{source}: {why}")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        """Picklable with its own arguments (a worker process's error reaches the caller)."""
        return (type(self), (self.source, self.why))


def check_file(path: Path, source: str | None = None) -> int:
    """The size of ``path``, or :class:`InputError` when it is no readable regular file."""
    name = source or str(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(name, "no such file") from None
    except OSError as exc:
        raise InputError(name, exc.strerror or str(exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(name, "is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(name, "is not a regular file (a pipe, socket or device?)")
    if info.st_size > MAX_BYTES:
        raise InputError(name, f"is {info.st_size:,} bytes; at most {MAX_BYTES:,} are read")
    if not os.access(path, os.R_OK):
        raise InputError(name, "is not readable")
    return info.st_size


def read_bytes(path: Path, source: str | None = None) -> bytes:
    """The contents of a checked file (see :func:`check_file`)."""
    check_file(path, source)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(source or str(path), exc.strerror or str(exc)) from None
    if len(data) > MAX_BYTES:
        raise InputError(source or str(path), f"is longer than {MAX_BYTES:,} bytes")
    return data


def decode(data: bytes, source: str) -> str:
    """UTF-8 text, or :class:`InputError` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            source, f"is not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r})"
        ) from None


def read_text(path: Path, source: str | None = None) -> str:
    """A checked file's UTF-8 text."""
    return decode(read_bytes(path, source), source or str(path))


def read_gzip_text(path: Path, source: str | None = None) -> str:
    """A checked gzip file's UTF-8 text (a corrupt or truncated archive is an input error)."""
    name = source or str(path)
    data = read_bytes(path, name)
    try:
        raw = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(name, f"is not a readable gzip file ({exc})") from None
    if len(raw) > 8 * MAX_BYTES:
        raise InputError(name, "unpacks to more than 2 GiB")
    return decode(raw, name)


# -- YAML ----------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """Safe YAML that refuses duplicate keys.

    PyYAML's scanner walks every saved possible simple key at every token: quadratic in the
    depth of flow nesting (``[[[[...``: 0.85 s for 5,000 levels, which a hostile input has).
    A key is saved at the end (one replaced is removed first) and its position and token
    number only grow, so the stale keys are the first ones and the first key is the nearest:
    the two methods below stop there. The same tokens, the same errors, in linear time."""

    def next_possible_simple_key(self) -> int | None:
        for key in self.possible_simple_keys.values():
            return int(key.token_number)  # the first saved: the nearest
        return None

    def stale_possible_simple_keys(self) -> None:
        keys = self.possible_simple_keys
        stale = []
        for level, key in keys.items():
            if key.line == self.line and self.index - key.index <= 1024:
                break  # this one and every later one are still possible
            if key.required:
                raise yaml.scanner.ScannerError(
                    "while scanning a simple key", key.mark,
                    "could not find expected ':'", self.get_mark(),
                )  # fmt: skip
            stale.append(level)
        for level in stale:
            del keys[level]


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    if mark is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return str(problem)


def _depth_and_numbers(data: Any, source: str, limit: int | None = None) -> int:
    """Reject nesting deeper than :data:`MAX_DEPTH` and non-finite numbers (iteratively);
    with ``limit``, more than that many values (YAML aliases expanding: a "billion laughs")."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    seen = 0
    while stack:
        value, depth, where = stack.pop()
        seen += 1
        if limit is not None and seen > limit:
            raise InputError(source, "aliases expand to more values than the text holds")
        if depth > MAX_DEPTH:
            at = f" at {where}" if where else ""
            raise InputError(source, f"nested more than {MAX_DEPTH} levels deep{at}")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(source, f"{where or 'value'}: {value} is not a finite number")
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                stack.append((item, depth + 1, f"{where}[{i}]"))
    return seen


def parse_yaml_all(text: str, source: str) -> list[Any]:
    """Every document of a YAML stream (empty documents dropped), checked as above."""
    try:
        docs = [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except RecursionError:
        raise InputError(source, f"nested more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        raise InputError(source, f"not valid YAML: {_where(exc)}") from None
    # Without aliases a value takes at least one character of text; with them, a few lines
    # can expand to billions of values: refuse expansion past what the text could hold.
    limit = len(text) + 1000
    for doc in docs:
        limit -= _depth_and_numbers(doc, source, limit)
    return docs


def parse_yaml(text: str, source: str) -> Any:
    """One YAML document (None when empty), checked as above."""
    docs = parse_yaml_all(text, source)
    if len(docs) > 1:
        raise InputError(source, f"holds {len(docs)} YAML documents; one was expected")
    return docs[0] if docs else None


def load_yaml(path: Path, source: str | None = None) -> Any:
    """A YAML file, read and checked."""
    name = source or str(path)
    return parse_yaml(read_text(path, name), name)


# -- JSON ----------------------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_json(text: str, source: str) -> Any:
    """A JSON document, checked as above."""
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique)
    except RecursionError:
        raise InputError(source, f"nested more than {MAX_DEPTH} levels deep") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            source, f"not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise InputError(source, f"not valid JSON: {exc}") from None
    _depth_and_numbers(data, source)
    return data


def load_json(path: Path, source: str | None = None) -> Any:
    """A JSON file, read and checked."""
    name = source or str(path)
    return parse_json(read_text(path, name), name)


def value_kind(value: Any, mapping: str = "a mapping") -> str:
    """What a reader of YAML or JSON calls ``value``'s type, for messages: null, the boolean
    true, the number 3, the string 'x', a list, or ``mapping`` (JSON says "an object")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    return mapping if isinstance(value, dict) else type(value).__name__
