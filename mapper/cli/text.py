"""What every command prints of a slice's assessment: its rows (mapper.report.answer), one per line."""

from __future__ import annotations

import mapper


def print_answer(doc: dict) -> None:
    """The assessment's rows as `map`, `serve` and `review` print them."""
    for row in mapper.answer_rows(doc):
        print(f"{row.name}: {row.text}")
