"""docs/ops.md's op tables are the registry's (fuserlite.ops.tables): a new op, or a
changed rule, shows there once `pytest --update-golden` has written them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuserlite.ops.registry import all_ops
from fuserlite.ops.tables import BEGIN, END, tables, with_tables

DOC = Path(__file__).resolve().parents[1] / "docs" / "ops.md"


def test_the_op_tables_of_the_docs_are_generated_from_the_registry(request) -> None:
    doc = DOC.read_text()
    if request.config.getoption("--update-golden"):
        DOC.write_text(with_tables(doc))
        return
    held = doc.split(BEGIN)[1].split(END)[0]
    if held != "\n" + tables():
        pytest.fail(
            "docs/ops.md's op tables differ from the registry's; run `pytest "
            "--update-golden` and review `git diff docs/ops.md`",
            pytrace=False,
        )


def test_every_op_has_a_row() -> None:
    text = tables()
    assert all(f"| `{d.name}` |" in text for d in all_ops())
