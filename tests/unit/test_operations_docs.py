"""The operator's documentation stays in step with the code, wherever that
can be checked mechanically:

* every dashboard panel, alert and CLI command is described (docs/operations/);
* every metric declared in shared/ is in the metrics reference, and every
  metric there is declared;
* every ``FANLINE_*`` setting in the README's Configuration table is read by
  some code, and every one the services and the CLI read is in the table;
* the capacity model is the one bench/results/latest.json gives;
* every relative link in the docs and the README reaches a file, and its
  ``#anchor`` a heading there.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OPS = REPO / "docs" / "operations"
DASHBOARDS = sorted((REPO / "deploy" / "grafana" / "dashboards").glob("*.json"))
PRODUCT = ("shared/src", "services/*/src", "tools/*/src")  # what the README's table documents
ELSEWHERE = ("deploy/local", "tests", "bench")  # launcher and test knobs the table also lists


def page(name: str) -> str:
    return (OPS / name).read_text()


# --------------------------------------------------------------------------
# dashboards, alerts, CLI
# --------------------------------------------------------------------------


def panels(path: Path) -> list[dict[str, object]]:
    return [p for p in json.loads(path.read_text())["panels"] if p.get("type") != "row"]


def section(text: str, title: str) -> str:
    """The text from the heading that names a dashboard to the next one."""
    start = text.index(f'("{title}"')
    nxt = text.find("\n### ", start + 1)
    return text[start : nxt if nxt != -1 else None]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_is_described_under_its_dashboard(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    text = section(page("monitor.md"), dashboard["title"])
    missing = [p["title"] for p in panels(path) if f"**{p['title']}**" not in text]
    assert not missing, f"docs/operations/monitor.md does not describe these {path.name} panels: {missing}"


def test_every_alert_has_a_section() -> None:
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
    names = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    missing = [n for n in names if not re.search(rf"^### {n}$", page("alerts.md"), re.M)]
    assert not missing


@pytest.mark.parametrize(
    "command",
    [
        "migrate",
        "topics ensure",
        "topics verify",
        "dlq inspect",
        "dlq replay",
        "rebuild-home",
        "sample-data",
        "backup",
        "restore",
    ],
)
def test_every_cli_command_is_documented(command: str) -> None:
    assert f"`fanline {command}" in page("cli.md")


# --------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------


def declared_metrics() -> set[str]:
    """Every metric a Prometheus client constructor in shared/ or a service declares."""
    names: set[str] = set()
    for pattern in ("shared/src/**/*.py", "services/*/src/**/*.py"):
        for path in REPO.glob(pattern):
            names |= set(
                re.findall(r'(?:Counter|Gauge|Histogram|Summary|Info|Enum)\(\s*"(fanline_[a-z0-9_]+)"', path.read_text())
            )
    return names


def referenced_metrics() -> set[str]:
    text = page("monitor.md")
    reference = text[text.index("## Metrics reference") :]
    reference = reference[: reference.find("\n## ", 1) if "\n## " in reference[1:] else None]
    names: set[str] = set()
    for line in reference.splitlines():
        if line.startswith("| `fanline_"):
            names |= set(re.findall(r"`(fanline_[a-z0-9_]+)`", line.split("|")[1]))
    return names


def test_the_metrics_reference_lists_every_declared_metric_and_nothing_else() -> None:
    declared, referenced = declared_metrics(), referenced_metrics()
    assert len(declared) > 40, "the declarations were not found"
    assert not declared - referenced, f"declared but not in docs/operations/monitor.md: {sorted(declared - referenced)}"
    assert not referenced - declared, f"in the metrics reference but declared nowhere: {sorted(referenced - declared)}"


# --------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------


def readme_settings() -> set[str]:
    """Variables in the README's Configuration table. A row may abbreviate a
    second name by its tail: `FANLINE_API_HOST` / `_PORT` is also
    FANLINE_API_PORT (the tail replaces as many trailing words)."""
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## Configuration") :]
    table = table[: table.index("\n#", 1)]
    names: set[str] = set()
    for line in table.splitlines():
        if not line.startswith("| `FANLINE_"):
            continue
        cell = line.split("|")[1]
        full = re.findall(r"`(FANLINE_[A-Z0-9_]+)`", cell)
        names |= set(full)
        for tail in re.findall(r"`(_[A-Z0-9_]+)`", cell):
            words = full[0].split("_")
            names.add("_".join(words[: len(words) - tail.count("_")]) + tail)
    return names


class Recording(dict[str, str]):
    """An environment that remembers every variable read from it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


SERVICE_CONFIGS = ("fanline_api.config", "fanline_social_graph.config", "fanline_tweet_store.config", "fanline_fanout.config")


def settings_the_services_read() -> set[str]:
    """What each service's settings loader reads, run on the embedded and the
    cassandra configurations (names built at run time included)."""
    read: set[str] = set()
    # And with TLS and authentication to both engines, client certificates
    # included: those settings are read only when turned on.
    pem = Path(tempfile.mkdtemp()) / "any.pem"
    pem.write_text("not read: only its existence is checked")
    secure = {"FANLINE_BACKEND": "cassandra", "FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "FANLINE_CASSANDRA_TLS": "true"}
    for engine in ("KAFKA", "CASSANDRA"):
        secure |= {f"FANLINE_{engine}_USERNAME": "fanline", f"FANLINE_{engine}_PASSWORD": "secret"}
        secure |= {f"FANLINE_{engine}_TLS_{part}": str(pem) for part in ("CA", "CERT", "KEY")}
    for module in SERVICE_CONFIGS:
        settings = importlib.import_module(module).Settings
        for values in ({}, {"FANLINE_BACKEND": "cassandra"}, secure):
            env = Recording(values)
            settings.from_env(env)
            read |= env.read
    return {name for name in read if name.startswith("FANLINE_")}


def literal_settings(globs: tuple[str, ...]) -> set[str]:
    names: set[str] = set()
    for pattern in globs:
        for path in REPO.glob(f"{pattern}/**/*.py"):
            names |= set(re.findall(r'"(FANLINE_[A-Z0-9_]*[A-Z0-9])"', path.read_text()))
    return names


def test_every_setting_the_code_reads_is_in_the_readme() -> None:
    read = settings_the_services_read() | literal_settings(PRODUCT)
    assert len(read) > 60, "the settings loaders read almost nothing: the recording is broken"
    missing = read - readme_settings()
    assert not missing, f"read by the services or the CLI but not in README.md's Configuration table: {sorted(missing)}"


def test_every_setting_in_the_readme_is_read_by_some_code() -> None:
    read = settings_the_services_read() | literal_settings(PRODUCT + ELSEWHERE)
    unread = readme_settings() - read
    assert not unread, f"in README.md's Configuration table but read by nothing: {sorted(unread)}"


# --------------------------------------------------------------------------
# the capacity model
# --------------------------------------------------------------------------


def test_the_capacity_model_is_the_one_the_latest_benchmark_gives() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "capacity_model.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------
# links
# --------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_\[\]()]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links() -> Iterator[tuple[Path, str]]:
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(OPS.glob("*.md"))]:
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not re.match(r"[a-z]+:", target):
                yield path, target


@pytest.mark.parametrize(("source", "target"), list(links()), ids=lambda x: str(x).replace(str(REPO) + "/", ""))
def test_relative_links_resolve(source: Path, target: str) -> None:
    file, _, anchor = target.partition("#")
    path = (source.parent / file).resolve() if file else source
    assert path.exists(), f"{source.relative_to(REPO)} links to {file}, which does not exist"
    if anchor and path.suffix == ".md":
        assert anchor in anchors(path), f"{source.relative_to(REPO)} links to #{anchor}, not a heading of {path.name}"
