"""The targets of ``targets.toml`` judged against a set of rows.

A target is ``measured op bound``; each side a number or ``term [op term]...``
(``+ - * /``, left to right) over numbers and row references
``scenario:metric{labels}``. A repeated ratio's median (``stat="median"``) is
judged only when the same ratio has ``stat="n"`` >= ``MIN_REPEATS`` and, where
recorded, ``stat="min_samples"`` >= ``MIN_P99_SAMPLES``; ``requires``
(``ref op number``) must hold too; otherwise the target is reported, not
judged. ``explain`` names a row whose text says why a figure is absent.
"""

from __future__ import annotations

import operator
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .rows import Results, metric, parse
from .stats import MIN_P99_SAMPLES, MIN_REPEATS

OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
OPS |= {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


@dataclass(frozen=True)
class Verdict:
    key: str
    text: str
    issue: str
    measured: float | None
    op: str
    bound: float | None
    measured_is: str
    bound_is: str
    passed: bool | None  # None: not measured, or not under the target's conditions (``note``)
    note: str = ""

    @property
    def result(self) -> str:
        return {True: "pass", False: "FAIL", None: "not judged" if self.measured is not None else "not measured"}[self.passed]


def evaluate_expr(expr: str | float, results: Results) -> float | None:
    if isinstance(expr, int | float):
        return float(expr)
    tokens = [results.num(*_split(t)) if ":" in t else float(t) for t in expr.split()[::2]]
    value = tokens[0]
    for op, right in zip(expr.split()[1::2], tokens[1:], strict=True):
        if value is None or right is None or (op == "/" and right == 0):
            return None
        value = OPS[op](value, right)
    return value


def _split(ref: str, **extra: str) -> tuple[str, str]:
    scenario, _, text = ref.partition(":")
    name, labels = parse(text)
    return scenario, metric(name, **labels, **extra)


def _problems(target: dict[str, Any], results: Results) -> list[str]:
    """Why a measured target is not judged ([] if it is)."""
    out, measured = [], str(target["measured"])
    if 'stat="median"' in measured:
        scenario, name = _split(measured)
        labels = {k: v for k, v in parse(name)[1].items() if k != "stat"}
        n, least = (results.num(scenario, parse(name)[0], stat=s, **labels) for s in ("n", "min_samples"))
        if n is None or n < MIN_REPEATS:
            out.append(f"measured {n} times (needs {MIN_REPEATS})")
        if least is not None and least < MIN_P99_SAMPLES:
            out.append(f"{least:.0f} samples behind a percentile (needs {MIN_P99_SAMPLES})")
    for condition in target.get("requires", []):
        ref, op, number = condition.split()
        if (value := evaluate_expr(ref, results)) is None or not OPS[op](value, float(number)):
            out.append(f"{ref.split(':', 1)[1]} is {value} (needs {op} {number})")
    return out


def evaluate(results: Results, path: Path = Path(__file__).with_name("targets.toml")) -> list[Verdict]:
    out = []
    for t in tomllib.loads(path.read_text())["target"]:
        measured, bound = evaluate_expr(t["measured"], results), evaluate_expr(t["bound"], results)
        problems = _problems(t, results) if measured is not None else []
        if measured is None and isinstance(why := results.ref(t.get("explain", ":")), str):
            problems = [why]
        passed = None if measured is None or bound is None or problems else bool(OPS[t["op"]](measured, bound))
        labels = (t.get("measured_is", ""), t.get("bound_is", str(t["bound"])))
        head = (t["key"], t["text"], str(t.get("issue", "")), measured, t["op"], bound)
        out.append(Verdict(*head, *labels, passed, "; ".join(problems)))
    return out
