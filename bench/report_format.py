"""Table-cell formatting shared by the benchmark page's sections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["_ratio", "_table", "_verdict", "fmt"]


def fmt(value: Any, digits: int = 1, unit: str = "") -> str:
    """A number for a table cell; '—' for null."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}{unit}"
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _verdict(passed: bool | None) -> str:
    return {True: "**pass**", False: "**FAIL**", None: "not measured"}[passed]


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "—"
    return f"{a / b:,.1f}×"
