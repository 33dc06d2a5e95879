"""Field tables: how an importer treats each field of a foreign format, in one typed place.

An importer decides by its tables which fields it reads (``as`` the source does, or
``differs``, saying how), which it ``refused`` (the reason is noted when one is present) and
which are ``bookkeeping`` (names, times, observed state: no policy); docs/fields.md is
generated from the same tables (:func:`markdown`), so the two cannot drift apart. The importer
reads a mapping of the input through a :class:`FieldView`, which raises
:class:`UnlistedFieldError` when the code reads a key its table does not let it read: a bug,
found by the first test that takes that path, not a field silently read behind the table's back.

Paths are dotted from the table's root; ``[]`` steps into a list's items and ``*`` stands for
any key with no rule of its own beside it. A rule with no rules below it covers its subtree.
A flat table (``nested=False``: label and annotation keys, which hold dots) has no subtrees; a
path ending in ``*`` there stands for every key it begins.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["as", "differs", "refused", "bookkeeping"]
READ: frozenset[Verdict] = frozenset({"as", "differs"})
"""The verdicts of fields the importer reads and carries into the policy."""
READABLE: frozenset[Verdict] = READ | {"bookkeeping"}
"""What the importer may look at: bookkeeping too (a failure reason shown in a note)."""


class UnlistedFieldError(RuntimeError):
    """The importer read a field its table does not let it read (a bug in fleetshare)."""


@dataclass(frozen=True, slots=True)
class FieldRule:
    """How one field is treated: ``note`` says what it becomes (``as``), how it differs, why
    it is refused, or what the bookkeeping is."""

    path: str
    verdict: Verdict
    note: str = ""


def join(scope: str, key: str) -> str:
    """``spec`` + ``cohort`` -> ``spec.cohort`` (the root scope is ``""``)."""
    return f"{scope}.{key}" if scope else key


def parent(path: str) -> str:
    """``spec.resourceGroups[].flavors`` -> ``spec.resourceGroups[]``; a root key -> ``""``."""
    return path.rsplit(".", 1)[0] if "." in path else ""


class FieldTable:
    """The rules of one kind of document (a Kueue kind, a HyperPod document), in order."""

    __slots__ = (
        "_by_path",
        "_parents",
        "bookkeeping_noted",
        "name",
        "nested",
        "rules",
        "source",
        "title",
    )

    def __init__(
        self,
        name: str,
        source: str,
        rules: Iterable[FieldRule],
        *,
        title: str = "",
        bookkeeping_noted: bool = True,
        nested: bool = True,
    ) -> None:
        self.name = name
        self.source = source
        """Whose semantics ``as`` means: ``Kueue``, ``HyperPod``."""
        self.title = title or name
        self.bookkeeping_noted = bookkeeping_noted
        """Whether bookkeeping present in the input is noted (Kueue's metadata and status,
        which users write) or passed over in silence (HyperPod's ARNs, ids and times)."""
        self.nested = nested
        self.rules = tuple(rules)
        self._by_path: dict[str, FieldRule] = {}
        for rule in self.rules:
            if rule.path in self._by_path:
                raise ValueError(f"{name}: {rule.path} has two rules")
            self._by_path[rule.path] = rule
        self._parents = {parent(r.path).removesuffix("[]") for r in self.rules} if nested else set()
        for rule in self.rules if nested else ():
            above = parent(rule.path).removesuffix("[]")
            if above and above not in self._by_path:
                raise ValueError(f"{name}: {rule.path} has no rule for {above}")

    def rule(self, path: str) -> FieldRule | None:
        """The rule of the field at ``path`` (a ``*`` rule beside it when it has none)."""
        found = self._by_path.get(path)
        if found is not None:
            return found
        if self.nested:
            return self._by_path.get(join(parent(path), "*"))
        prefixes = [r for r in self.rules if r.path.endswith("*") and path.startswith(r.path[:-1])]
        return prefixes[0] if prefixes else None

    def covering(self, path: str) -> FieldRule | None:
        """The rule that accounts for ``path``: its own, or a rule above it with no rules
        below (which covers its subtree)."""
        found = self.rule(path)
        if found is not None or not self.nested:
            return found
        above = parent(path)
        while above:
            rule = self.rule(above.removesuffix("[]"))
            if rule is not None:
                return rule if rule.path not in self._parents else None
            above = parent(above)
        return None

    def read(self) -> list[FieldRule]:
        """The rules of fields the importer reads and carries over."""
        return [r for r in self.rules if r.verdict in READ]


class FieldView(Mapping[str, Any]):
    """A mapping of the input, read under ``table`` at ``scope``.

    Reading a key whose rule is not readable (refused, or none) raises
    :class:`UnlistedFieldError`; each read is recorded in ``reads`` (as ``Table:path``) so a
    test can check that every field the table says is read is read. Iterate :attr:`raw` for
    what the input holds.
    """

    __slots__ = ("_data", "_reads", "_scope", "_table")

    def __init__(
        self, data: Mapping[str, Any], table: FieldTable, scope: str, reads: set[str] | None = None
    ) -> None:
        self._data = data
        self._table = table
        self._scope = scope
        self._reads = reads

    @property
    def raw(self) -> Mapping[str, Any]:
        """The mapping itself, unchecked."""
        return self._data

    def __getitem__(self, key: str) -> Any:
        path = join(self._scope, key)
        rule = self._table.rule(path)
        if rule is None or rule.verdict not in READABLE:
            verdict = rule.verdict if rule else "no rule"
            raise UnlistedFieldError(f"{self._table.name}: {path} is not read ({verdict})")
        if self._reads is not None:
            self._reads.add(f"{self._table.name}:{rule.path}")
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


# --- docs --------------------------------------------------------------------------------------


def verdict_text(rule: FieldRule, source: str) -> str:
    """``as Kueue``, ``differs: how``, ``refused: why``, ``bookkeeping: what``."""
    head = f"as {source}" if rule.verdict == "as" else rule.verdict
    return f"{head}: {rule.note}" if rule.note else head


def markdown(groups: Iterable[tuple[str, str, Iterable[FieldTable]]]) -> str:
    """docs/fields.md: per group (heading, introduction, tables) a table of every field."""
    out = [
        "# Fields of the imported formats",
        "",
        "<!-- generated by `fleetshare policy fields --format markdown`; do not edit -->",
        "",
        "Every field fleetshare's importers know, from the tables they decide by: read *as*",
        "the source does it, read but *differs* (how), *refused* (why: noted when present, or",
        "an error where the row says so), or *bookkeeping* (no policy). `[]` marks a list's",
        "items and `*` any other key; a row covers the fields below it that have no row of",
        "their own. A field no row names is noted as unknown and ignored.",
    ]
    for heading, intro, tables in groups:
        out += ["", f"## {heading}", "", intro]
        for table in tables:
            out += ["", f"### {table.title}", "", "| Field | Verdict |", "|---|---|"]
            out += [f"| `{r.path}` | {_cell(verdict_text(r, table.source))} |" for r in table.rules]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")
