"""docs/benchmarks.md from a set of rows: ``benchmarks.md.j2`` (jinja2) for the
figures, matplotlib (Agg) for the plots. The interpretation is written by a
person between the ``BEGIN``/``END`` markers of the page; rendering keeps that
block as it was."""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import jinja2

from . import targets
from .rows import META, Results, Row, Value

BEGIN = "<!-- BEGIN interpretation: written by a person; `make bench` keeps this block as it is -->"
END = "<!-- END interpretation -->"
PLACEHOLDER = "*Not yet written for this run: what the figures mean, and why each failing target fails.*"
PROCESSES = "api social-graph social-graph-fanout tweet-store tweet-store-fanout fanout-worker broker cassandra kafka".split()


def fmt(value: Value, digits: int = 1) -> str:
    """A table cell: thousands separated, '—' for null."""
    if value is None or isinstance(value, str):
        return "—" if value is None else value
    return f"{value:,.0f}" if digits == 0 or abs(value) >= 1000 else f"{value:,.{digits}f}"


def render(rows: Sequence[Row], page: Path, results_file: Path) -> list[Path]:
    """Write the plots and the page (the hand-written block kept): the files written."""
    results, old = Results(rows), page.read_text() if page.exists() else ""
    kept = old.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") if BEGIN in old and END in old else PLACEHOLDER
    try:
        plots = {k: os.path.relpath(p, page.parent) for k, p in make_plots(results, page.parent / page.stem).items()}
    except ImportError:
        plots = {}

    def view(scenario: str) -> SimpleNamespace:
        return SimpleNamespace(**{m: functools.partial(getattr(results, m), scenario) for m in ("value", "labels", "select")})

    loader = jinja2.PackageLoader("bench", ".")
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["f"] = fmt
    runs = {run: {r.metric: r.value for r in rows if r.run == run and r.scenario == META} for run in results.runs()}
    contributed = {run: sorted({r.scenario for r in rows if r.run == run} - {META}) for run in runs}
    text = env.get_template("benchmarks.md.j2").render(
        R=view, runs=runs, contributed=contributed, verdicts=targets.evaluate(results), plots=plots, notes=results.notes(),
        results_link=os.path.relpath(results_file, page.parent), interpretation=f"{BEGIN}\n{kept}\n{END}",
    )  # fmt: skip
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return [page, *(page.parent / p for p in plots.values())]


def make_plots(r: Results, out: Path) -> dict[str, Path]:
    """Every plot the rows have data for (``plots.toml``, and the cost by process): {name: path}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}
    for name, spec in tomllib.loads(Path(__file__).with_name("plots.toml").read_text()).items():
        fig, ax = plt.subplots(figsize=(7, 4))
        by = spec["by"]
        for label, fixed in spec["series"].items():
            free = {by, *fixed, *spec.get("ignore", ())}  # the labels a point may have
            found = r.select(spec["scenario"], spec["metric"], **fixed)
            pts = [(lab[by], v) for lab, v in found if isinstance(v, float) and by in lab and set(lab) <= free]
            if pts and all(re.fullmatch(r"[\d.]+", x) for x, _ in pts):
                pts.sort(key=lambda p: float(p[0]))
            if pts:
                ax.plot([x for x, _ in pts], [v for _, v in pts], marker="o", label=label)
        if ax.has_data():
            ax.set(title=spec["title"], xlabel=by, ylabel=spec["ylabel"], yscale=spec.get("yscale", "log"))
            ax.legend(fontsize=8)
            fig.savefig(made.setdefault(name, out / f"{name}.png"), dpi=110, bbox_inches="tight")
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(8, 4))
    steps = {"mix": ("mixed", {}), **{a: ("route_cost", {"alone": a}) for a in r.labels("route_cost", "cpu_s_per_1k", "alone")}}
    bottom = [0.0] * len(steps)
    for process in PROCESSES:
        if any(vals := [r.num(s, "cpu_s_per_1k", process=process, **lab) or 0.0 for s, lab in steps.values()]):
            ax.bar(list(steps), vals, bottom=bottom, label=process)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    if ax.has_data():
        ax.set(title="CPU-seconds per 1,000 requests, by process", ylabel="CPU-s per 1,000 requests")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
        fig.savefig(made.setdefault("cost", out / "cost.png"), dpi=110, bbox_inches="tight")
    plt.close(fig)
    return made
