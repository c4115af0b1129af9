"""docs/architecture.md's layer tables say what tests/foundation/test_layers.py enforces.

The layers test is the rule; the document is what a newcomer reads. This reads the
document's two tables (which package sits in which layer, which feature may import which)
and its table of what each package owns, and fails when they and the rule disagree: a
package moved, added or allowed a new import in one place and not in the other.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.foundation.test_layers import COMPOSITION, FEATURE_IMPORTS, FEATURES, FOUNDATION, RANK

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
LAYERS = {"foundation": FOUNDATION, "features": FEATURES, "composition": COMPOSITION}
_NAME = re.compile(r"`([a-z_]+)(?:\.py|/)?`")


def table_under(heading: str, text: str) -> list[list[str]]:
    """Return the body rows (cells stripped) of the first Markdown table after `heading`."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table under {heading!r}"
    return rows[2:]  # the header and the |---| line


def names(cell: str) -> set[str]:
    """Return the package names a cell spells in backticks (`threads`, `app.py`, `db/`)."""
    return set(_NAME.findall(cell))


def layers_in_doc(text: str) -> dict[str, set[str]]:
    """Return the document's layers: layer name -> packages."""
    return {row[0]: names(row[1]) for row in table_under("### Which package sits in which layer", text)}


def feature_imports_in_doc(text: str) -> dict[str, set[str]]:
    """Return the document's feature order: feature -> the features it may import."""
    return {next(iter(names(row[0]))): names(row[1]) for row in table_under("### Which feature may import which", text)}


def described_in_doc(text: str) -> set[str]:
    """Return the packages the table of what each package owns describes."""
    return set().union(*(names(row[0]) for row in table_under("### What each package owns", text)))


def test_the_layers_are_the_ones_the_layers_test_enforces() -> None:
    assert layers_in_doc(DOC.read_text("utf-8")) == {layer: set(units) for layer, units in LAYERS.items()}


def test_the_feature_order_is_the_one_the_layers_test_enforces() -> None:
    expected = {feature: set(allowed) for feature, allowed in FEATURE_IMPORTS.items()}
    assert feature_imports_in_doc(DOC.read_text("utf-8")) == expected


def test_every_package_is_described() -> None:
    assert described_in_doc(DOC.read_text("utf-8")) == set(RANK)


def test_the_reader_notices_a_disagreement() -> None:
    # The checks above pass on today's document; a changed row must not.
    text = DOC.read_text("utf-8")
    moved = text.replace(
        "| `threads` | `agent` `budgets` `memory` `recall` `retrieval` `tracing` |",
        "| `threads` | `agent` `budgets` `retrieval` |",
    )
    assert feature_imports_in_doc(moved)["threads"] == {"agent", "budgets", "retrieval"}
    assert layers_in_doc(text.replace("`app` `services`", "`services`"))["composition"] == set(COMPOSITION) - {"app"}
