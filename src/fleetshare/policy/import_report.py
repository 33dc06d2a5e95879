"""What an importer collects while mapping a foreign policy.

Every field of the input ends in one of four places, named by its path (``Kind/name.spec.x``,
list items as ``[i]``): *mapped* into the policy, *noted* (present, not carried over, with the
reason in ``Policy.notes``), *skipped* (bookkeeping its table says is passed over in silence)
or a *problem* (invalid: the import fails naming it). A path recorded for a mapping or a list
accounts for everything under it. :meth:`account` tells which holds a path, so tests can check
that nothing in an input is dropped silently. :meth:`fields` decides the first three by the
importer's field table (:mod:`fleetshare.fields`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetshare.fields import READ, FieldTable, FieldView, join

Outcome = Literal["mapped", "noted", "skipped", "rejected"]


@dataclass
class ImportReport:
    """Notes (what could not be mapped), problems (why the input is invalid) and the paths of
    what was mapped."""

    notes: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    mapped: set[str] = field(default_factory=set)
    """Paths of fields carried into the policy."""
    noted: dict[str, str] = field(default_factory=dict)
    """Paths of fields not carried over, with the note's text."""
    skipped: set[str] = field(default_factory=set)
    """Paths of bookkeeping passed over without a note."""
    reads: set[str] = field(default_factory=set)
    """The table rules (``Table:path``) the importer read a field by."""

    def fields(
        self, doc: Mapping[str, Any], where: str, table: FieldTable, scope: str = ""
    ) -> FieldView:
        """Account for each key of ``doc`` (at ``where`` in the input, ``scope`` in
        ``table``) by its rule, and return the view the importer reads it through.

        A field read (``as``, ``differs``) is mapped here when it holds a value or a list of
        values (one holding mappings is accounted for by whoever reads them); a refused field
        is noted with the rule's reason, bookkeeping noted or skipped as the table says, and
        a key with no rule noted as unknown."""
        for key, value in doc.items():
            path = join(where, str(key))
            rule = table.rule(join(scope, str(key)))
            shown = f"{path} = {value}" if isinstance(value, str | int | float) else path
            if rule is None:
                self.note(shown, "unknown field; ignored", path)
            elif rule.verdict in READ:
                if not _nested(value):
                    self.map(path)
            elif rule.verdict == "refused" or table.bookkeeping_noted:
                self.note(shown, f"{rule.note}; ignored", path)
            else:
                self.skipped.add(path)
        return FieldView(doc, table, scope, self.reads)

    def note(self, where: str, text: str, path: str | None = None) -> None:
        """Record something present in the input that fleetshare does not carry over
        (``path``: the field, when ``where`` shows more, such as its value)."""
        self.notes.append(f"{where}: {text}")
        self.noted.setdefault(path or where, text)

    def remark(self, where: str, text: str) -> None:
        """Record how something was mapped (a note about fields that are accounted for
        otherwise, so it accounts for none)."""
        self.notes.append(f"{where}: {text}")

    def problem(self, where: str, reason: str) -> None:
        """Record an invalid field and why."""
        self.problems.append((where, reason))

    def map(self, path: str) -> None:
        """Record a field carried into the policy."""
        self.mapped.add(path)

    def account(self, path: str) -> Outcome | None:
        """Where the field at ``path`` (or a field above it) went; None if nowhere."""
        rejected = {where for where, _ in self.problems}
        for prefix in _prefixes(path):
            if prefix in rejected:
                return "rejected"
            if prefix in self.mapped:
                return "mapped"
            if prefix in self.noted:
                return "noted"
            if prefix in self.skipped:
                return "skipped"
        return None


def _nested(value: Any) -> bool:
    """A mapping, or a list holding mappings or lists."""
    return isinstance(value, dict) or (
        isinstance(value, list) and any(isinstance(v, dict | list) for v in value)
    )


def _prefixes(path: str) -> list[str]:
    """``a.b[0].c`` -> ``a.b[0].c``, ``a.b[0]``, ``a.b``, ``a`` (longest first)."""
    out = [path]
    end = len(path)
    while end > 0:
        cut = max(path.rfind(".", 0, end), path.rfind("[", 0, end))
        if cut <= 0:
            break
        end = cut
        out.append(path[:end])
    return out
