"""docs/fields.md is generated from the importers' field tables (issue 27: "docs list every
Kueue and HyperPod field with 'as Kueue / as HyperPod', 'differs: how' or 'refused: why',
generated from the importers' own tables so it cannot drift")."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fleetshare.cli import app
from fleetshare.manifests.kueue_keys import KEYS
from fleetshare.policy import hyperpod_fields, kueue_fields
from fleetshare.scenario.fields import SECTIONS, field_docs

DOCS = Path(__file__).parents[1] / "docs" / "fields.md"


def test_docs_fields_md_is_what_the_tables_generate() -> None:
    """Regenerate: ``fleetshare policy fields > docs/fields.md``."""
    assert DOCS.read_text() == field_docs(), "run: fleetshare policy fields > docs/fields.md"


def test_every_table_of_every_importer_is_in_the_docs() -> None:
    listed = [table for _, _, tables in SECTIONS for table in tables]
    assert listed == [*kueue_fields.TABLES, KEYS, *hyperpod_fields.TABLES]
    text = DOCS.read_text()
    for table in listed:
        assert f"### {table.title}\n" in text
        for rule in table.rules:
            assert f"| `{rule.path}` |" in text, f"{table.name} {rule.path}"


def test_the_check_option_says_whether_the_file_is_current(tmp_path: Path) -> None:
    runner = CliRunner()
    current = runner.invoke(app, ["policy", "fields", "--check", str(DOCS)])
    assert current.exit_code == 0 and "up to date" in current.output, current.output
    stale = tmp_path / "fields.md"
    stale.write_text(DOCS.read_text().replace("as Kueue", "as Kueue?", 1))
    result = runner.invoke(app, ["policy", "fields", "--check", str(stale)])
    assert result.exit_code == 1


def test_the_json_format_has_a_row_per_rule() -> None:
    result = CliRunner().invoke(app, ["policy", "fields", "--format", "json"])
    assert result.exit_code == 0

    rows = json.loads(result.output)
    assert len(rows) == sum(len(t.rules) for _, _, tables in SECTIONS for t in tables)
    assert {"table", "source", "path", "verdict", "note"} == set(rows[0])
