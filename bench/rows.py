"""Measurements as tidy rows ``(run, scenario, metric, value, unit)``.

A metric is a name with optional labels, written like a Prometheus series with
its labels sorted (``latency_ms{followers="10000",stat="p99"}``); a name ends
with its unit (``unit_of``). A value is a number, a string (versions, why
something was not measured) or null. ``Recorder`` collects a run's rows and
appends each to a JSON-lines log as measured, so a crash keeps them; ``write``
stores rows once, a JSON array with one row per line; ``merge`` folds a partial
run (``--only``) into earlier results: the scenarios it ran replace theirs,
every other row keeps the run that measured it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from . import stats

Value = float | str | None
META = "run"  # the scenario of a run's own facts: start, mode, versions, machine, durations
UNITS = dict(  # a metric name ends with its unit
    item.split(":")
    for item in "per_1k_rows:CPU-s per 1,000 rows|per_1k:CPU-s per 1,000|rows_per_s:rows/s|ops_per_s:ops/s|_per_s:1/s|"
    "_ms:ms|_us:µs|_s:s|_mb:MB|_kib:KiB|_bytes:B|_percent:%|_rows:rows".split("|")
)


def unit_of(name: str) -> str:
    return "ratio" if "_vs_" in name else next((unit for suffix, unit in UNITS.items() if name.endswith(suffix)), "")


def metric(name: str, /, **labels: object) -> str:
    """``name{k="v",...}`` with the labels sorted: the canonical form."""
    quoted = (k + '="' + str(v).replace('"', "'") + '"' for k, v in sorted(labels.items()))
    return name + "{" + ",".join(quoted) + "}" if labels else name


def parse(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition("{")
    return name, dict(re.findall(r'(\w+)="([^"]*)"', rest))


@dataclass(frozen=True)
class Row:
    run: str
    scenario: str
    metric: str
    value: Value
    unit: str = ""


class Recorder:
    """The rows of one run; ``log``: a JSON-lines file each row is appended to."""

    def __init__(self, run: str, log: Path | None = None) -> None:
        self.run, self._log = run, log
        self.rows: list[Row] = []

    def add(self, scenario: str, name: str, value: object, unit: str | None = None, /, **labels: object) -> None:
        if isinstance(value, bool | int | float):
            value = round(float(value), 6) if math.isfinite(value) else None
        elif value is not None and not isinstance(value, str):
            raise TypeError(f"not a measurement: {value!r}")
        self.rows.append(row := Row(self.run, scenario, metric(name, **labels), value, unit_of(name) if unit is None else unit))
        if self._log is not None:
            self._log.parent.mkdir(parents=True, exist_ok=True)
            with self._log.open("a") as fh:
                fh.write(json.dumps(asdict(row)) + "\n")

    def scope(self, scenario: str, /, **labels: object) -> Scope:
        return Scope(self, scenario, labels)


@dataclass
class Scope:
    """A recorder bound to a scenario and labels: ``s("rows_per_s", 12.0, workers=2)``."""

    rec: Recorder
    scenario: str
    labels: dict[str, object]

    def __call__(self, name: str, value: object, unit: str | None = None, /, **labels: object) -> None:
        self.rec.add(self.scenario, name, value, unit, **self.labels, **labels)

    def note(self, text: str) -> None:
        """Something the reader must know (a refusal, a shortfall, a failure)."""
        self("note", text, n=sum(r.scenario == self.scenario and r.metric.startswith("note{") for r in self.rec.rows) + 1)

    def dist(
        self, name: str, values: Sequence[float], keep: Sequence[str] = ("n", "p50", "p99", "max"), /, **labels: object
    ) -> dict[str, float]:
        """A distribution as ``name{stat=...}`` rows (none when empty); returns its summary."""
        summary = stats.summary(values)
        for stat in keep if summary else ():
            self(name, summary[stat], "" if stat == "n" else None, stat=stat, **labels)
        return summary

    def repeated(self, name: str, nums: Sequence[float | None], dens: Sequence[float | None], least: Sequence[int] = ()) -> None:
        """A headline ratio measured round by round (issue 18): each round's value, its median,
        min, max and n, and the fewest samples behind a percentile (of ``least``). Targets judge the median."""
        values = [stats.ratio(a, b) for a, b in zip(nums, dens, strict=True)]
        for i, v in enumerate(values):
            self(name, v, round=i + 1)
        if got := [v for v in values if v is not None]:
            for stat, v in {"median": stats.percentile(got, 50), "min": min(got), "max": max(got)}.items():
                self(name, v, stat=stat)
        self(name, len(got), "", stat="n")
        if least:
            self(name, min(least), "", stat="min_samples")


class Results:
    """Rows indexed for reading: ``value(scenario, name, **labels)``."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self.rows = list(rows)
        self._index = {(r.scenario, r.metric): r.value for r in self.rows}

    def value(self, scenario: str, name: str, /, **labels: object) -> Value:
        return self._index.get((scenario, metric(name, **labels)))

    def num(self, scenario: str, name: str, /, **labels: object) -> float | None:
        return v if isinstance(v := self.value(scenario, name, **labels), float) else None

    def ref(self, text: str) -> Value:
        """``scenario:metric{labels}``, labels in any order (as targets write them)."""
        scenario, _, text = text.partition(":")
        name, labels = parse(text)
        return self.value(scenario, name, **labels)

    def select(self, scenario: str, name: str, /, **fixed: object) -> list[tuple[dict[str, str], Value]]:
        """Every row of ``name`` whose labels include ``fixed``, in the order measured."""
        rows = ((parse(r.metric), r.value) for r in self.rows if r.scenario == scenario)
        return [(labels, v) for (n, labels), v in rows if n == name and all(labels.get(k) == str(x) for k, x in fixed.items())]

    def labels(self, scenario: str, name: str, key: str, /, **fixed: object) -> list[str]:
        """The distinct values of label ``key`` (numbers in numeric order)."""
        found = dict.fromkeys(lab[key] for lab, _ in self.select(scenario, name, **fixed) if key in lab)
        return sorted(found, key=lambda s: (0, float(s), "") if re.fullmatch(r"-?[\d.]+", s) else (1, 0.0, s))

    def notes(self) -> list[tuple[str, str]]:
        return [(r.scenario, str(r.value)) for r in self.rows if r.metric.startswith("note{")]

    def runs(self) -> list[str]:
        return list(dict.fromkeys(r.run for r in self.rows))


def load(path: Path) -> list[Row]:
    """The rows of a results file (a JSON array of rows); [] if absent."""
    if not path.exists():
        return []
    if not isinstance(data := json.loads(path.read_text()), list):
        raise ValueError(f"{path}: not a list of rows (results of the old harness?)")
    return [Row(**item) for item in data]


def write(rows: Sequence[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[\n" + ",\n".join(json.dumps(asdict(r), ensure_ascii=False) for r in rows) + "\n]\n")


def merge(previous: Sequence[Row], run: Sequence[Row]) -> list[Row]:
    """``previous`` with every scenario ``run`` measured replaced by its rows; an earlier
    run's meta rows stay while a row of that run does."""
    measured = {r.scenario for r in run} | {META}
    kept = [r for r in previous if r.scenario not in measured]
    runs = {r.run for r in kept} - {r.run for r in run}
    meta = [r for r in previous if r.scenario == META and r.run in runs] + [r for r in run if r.scenario == META]
    return [*meta, *kept, *(r for r in run if r.scenario != META)]
