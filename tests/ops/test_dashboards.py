"""Every Grafana panel's PromQL returns data from a real Prometheus scraping a
running Fanline under load.

For each backend a real Prometheus (Debian's ``prometheus`` binary, scrape
interval 1 s, the repository's alerts.yml loaded) scrapes the four services
of a running system. The fixture then generates a little load through the
public API (sign-ups, follows, posts, timeline reads, a 404, an unfollow, a
delete) and produces one poison message to the events topic so the
dead-letter series have data. Each test then evaluates one panel target --
template variables substituted as Grafana would (``$instance`` = the
worker's real instance, ``$__rate_interval`` = 1m, ``$__range`` = 10m) --
through ``/api/v1/query`` and asserts a non-empty result.

Which targets run where:

* targets on ``fanline_cassandra_*`` need the Cassandra backend: they run
  against the real-engine system (``real_infra``; mandatory in CI);
* targets on ``fanline_sqlite_*`` run against the embedded system;
* everything else runs against both;
* targets on ``kafka_consumergroup_*`` come from the kafka-exporter of the
  compose deployment, which cannot be installed offline (its Go module is
  not served by the module proxy): they are reported as skipped, and
  ``test_only_exporter_targets_are_left_out`` keeps that list from growing.
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.local.system import METRICS_PORT_OFFSET, System
from e2e.client import eventually
from e2e.conftest import make_system

from .conftest import OPS_REAL_BASE_PORT
from .support import REPO, LoadReport, Prometheus, generate_load, produce_poison

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DASHBOARD_DIR = REPO / "deploy" / "grafana" / "dashboards"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
JOBS = {"api": "api", "social-graph": "social-graph", "tweet-store": "tweet-store", "fanout-worker": "fanout-worker"}
EXPORTER_METRIC = re.compile(r"\bkafka_consumergroup_\w+")


def free_port() -> int:
    """A port nothing listens on now: fixed ones (21090, 21190) collided with
    the systems' own under FANLINE_TEST_PORT_OFFSET=90 (21000 + 90)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    ref: str
    expr: str

    @property
    def id(self) -> str:
        return f"{self.dashboard}:{self.panel}:{self.ref}"

    def backends(self) -> tuple[str, ...]:
        if "fanline_cassandra_" in self.expr:
            return ("real",)
        if "fanline_sqlite_" in self.expr:
            return ("embedded",)
        return ("embedded", "real")


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        if panel.get("type") == "row":
            yield from _panels(panel.get("panels", []))
        else:
            yield panel


def all_targets() -> list[Target]:
    found = []
    for path in sorted(DASHBOARD_DIR.glob("*.json")):
        for panel in _panels(json.loads(path.read_text())["panels"]):
            for target in panel.get("targets", []):
                found.append(Target(path.stem, panel["title"], target["refId"], target["expr"]))
    return found


def substitute(expr: str, instance: str) -> str:
    """What Grafana sends: template variables and interval macros filled in."""
    return (
        expr.replace("$__rate_interval", "1m")
        .replace("$__range", "10m")
        .replace("$__interval", "5s")
        .replace("$instance", instance)
    )


def cases() -> list[Any]:
    params = []
    for backend in ("embedded", "real"):
        marks = [pytest.mark.real_infra] if backend == "real" else []
        for target in all_targets():
            if backend not in target.backends():
                continue
            case_marks = list(marks)
            if EXPORTER_METRIC.search(target.expr):
                case_marks.append(
                    pytest.mark.skip(
                        reason="kafka-exporter metric: the exporter runs in compose only and cannot be installed offline"
                    )
                )
            params.append(pytest.param(backend, target, id=f"{backend}:{target.id}", marks=case_marks))
    return params


# --------------------------------------------------------------------------
# the observed system: Fanline + Prometheus + load
# --------------------------------------------------------------------------


@dataclass
class Observed:
    system: System
    prometheus: Prometheus
    load: LoadReport
    poison_key: str

    @property
    def worker_instance(self) -> str:
        return f"127.0.0.1:{self.system.ports['fanout-worker'] + METRICS_PORT_OFFSET}"


def observe(system: System, backend: str, workdir: Path) -> Iterator[Observed]:
    prometheus = Prometheus(
        port=free_port(),
        workdir=workdir,
        # Each service's metrics port: its own port serves no /metrics.
        targets={job: f"127.0.0.1:{system.ports[service] + METRICS_PORT_OFFSET}" for job, service in JOBS.items()},
        rule_files=[ALERTS],
    )
    prometheus.start()
    try:
        eventually(lambda: len(prometheus.query("up == 1")) == len(JOBS), timeout=30, what="every target up")
        # let Prometheus see the pre-load values (e.g. the dead-letter counter at 0)
        eventually(
            lambda: prometheus.has('fanline_events_dead_lettered_total{reason="invalid_event"}'),
            timeout=30,
            what="the dead-letter counter exported at 0",
        )
        dead = 'fanline_events_dead_lettered_total{reason="invalid_event"}'
        before = float(prometheus.query(dead)[0]["value"][1])  # other tests may have dead-lettered already
        load = generate_load(system.url())
        key = f"poison-{uuid.uuid4().hex[:8]}"
        produce_poison(system.bootstrap, system.env().get("FANLINE_EVENTS_TOPIC", "fanline.events"), key)
        checks = [
            f"{dead} > {before}",
            "fanline_consumer_lag_messages",
            "rate(fanline_timeline_rows_removed_total[1m]) > 0",
            "rate(fanline_fanout_page_duration_seconds_count[1m]) > 0",
            # Counted when an event is finished, after its pages: on a slow
            # machine the panels were queried before Prometheus had the
            # second sample a rate() needs. (Not "> 0": a series born with
            # its final value between two scrapes never shows an increase.)
            "rate(fanline_events_consumed_total[1m])",
            "rate(fanline_fanout_duration_seconds_count[1m])",
        ]
        for check in checks:
            eventually(lambda check=check: prometheus.has(check), timeout=60, what=f"Prometheus has {check}")
        yield Observed(system, prometheus, load, key)
    finally:
        prometheus.stop()


@pytest.fixture(scope="module")
def observed_embedded(ops_system: System, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    yield from observe(ops_system, "embedded", tmp_path_factory.mktemp("prometheus-embedded"))


@pytest.fixture(scope="module")
def observed_real(real_infra: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    system = make_system("real", OPS_REAL_BASE_PORT, tmp_path_factory.mktemp("ops-real"), real_infra)
    system.start(timeout=180)
    try:
        yield from observe(system, "real", tmp_path_factory.mktemp("prometheus-real"))
    finally:
        system.stop()


# --------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------


def test_the_dashboards_have_targets() -> None:
    targets = all_targets()
    assert {t.dashboard for t in targets} >= {"overview", "fanout-workers"}
    assert len(targets) > 40


def test_only_exporter_targets_are_left_out() -> None:
    """Every target is checked against at least one backend, except the
    kafka-exporter ones (and those are only on the overview)."""
    skipped = [t.id for t in all_targets() if EXPORTER_METRIC.search(t.expr)]
    assert skipped == ["overview:Consumer-group lag (kafka-exporter):A"]


@pytest.mark.parametrize(("backend", "target"), cases())
def test_panel_query_returns_data(backend: str, target: Target, request: pytest.FixtureRequest) -> None:
    observed: Observed = request.getfixturevalue(f"observed_{backend}")
    expr = substitute(target.expr, observed.worker_instance)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    result = observed.prometheus.query(expr)
    assert result, f"{target.id} returned no data:\n{expr}"


@pytest.mark.parametrize("backend", ["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def test_the_replica_variable_lists_the_worker(backend: str, request: pytest.FixtureRequest) -> None:
    """The fan-out dashboard's `instance` variable (label_values of this
    selector) finds the running worker replica."""
    observed: Observed = request.getfixturevalue(f"observed_{backend}")
    variable = next(
        v
        for v in json.loads((DASHBOARD_DIR / "fanout-workers.json").read_text())["templating"]["list"]
        if v["name"] == "instance"
    )
    selector = re.fullmatch(r"label_values\((.+), instance\)", variable["query"]["query"])
    assert selector, variable
    instances = {r["metric"]["instance"] for r in observed.prometheus.query(selector.group(1))}
    assert instances == {observed.worker_instance}


@pytest.mark.parametrize("backend", ["embedded", pytest.param("real", marks=pytest.mark.real_infra)])
def test_alert_rules_evaluate_and_the_poison_message_fires_the_dlq_alert(backend: str, request: pytest.FixtureRequest) -> None:
    observed: Observed = request.getfixturevalue(f"observed_{backend}")
    prometheus = observed.prometheus

    def dlq_alert_firing() -> bool:
        return prometheus.has('ALERTS{alertname="FanlineEventsDeadLettered", alertstate="firing", reason="invalid_event"}')

    eventually(dlq_alert_firing, timeout=30, what="FanlineEventsDeadLettered firing")
    rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
    assert len(rules) >= 10
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not broken, broken
    # a healthy, loaded system must not page anyone
    firing = {r["metric"]["alertname"] for r in prometheus.query('ALERTS{alertstate="firing"}')}
    assert firing == {"FanlineEventsDeadLettered"}, firing
