"""Prometheus configuration and alerting rules, checked with promtool.

``promtool check config`` (which also checks the rule files it references),
``promtool check rules`` and ``promtool test rules`` on the unit tests in
deploy/prometheus/alerts_test.yml. Plus what promtool cannot know: every
alert is documented in docs/operations/alerts.md (with what it needs),
has a unit test where it fires and one where it stays silent, and only
queries metrics that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .support import REPO, run_tool, tool

PROMETHEUS = REPO / "deploy" / "prometheus"
CONFIG = PROMETHEUS / "prometheus.yml"
RULES = PROMETHEUS / "alerts.yml"
RULE_TESTS = PROMETHEUS / "alerts_test.yml"
RUNBOOKS = REPO / "docs" / "operations" / "alerts.md"
METRICS = REPO / "shared" / "src" / "fanline_shared" / "metrics.py"


def alerts() -> list[dict[str, str]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule]


def promtool(*args: str | Path) -> str:
    done = run_tool([tool("promtool"), *map(str, args)], timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_promtool_check_config_with_the_rule_files() -> None:
    out = promtool("check", "config", CONFIG)
    assert "1 rule files found" in out and "SUCCESS" in out


def test_compose_mounts_the_rules_where_the_config_expects_them() -> None:
    rule_files = yaml.safe_load(CONFIG.read_text())["rule_files"]
    assert rule_files == ["alerts.yml"]
    volumes = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["prometheus"]["volumes"]
    assert "./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in volumes


def test_promtool_check_rules() -> None:
    out = promtool("check", "rules", RULES)
    assert f"SUCCESS: {len(alerts())} rules found" in out


def test_promtool_unit_tests_of_the_alerts() -> None:
    assert "SUCCESS" in promtool("test", "rules", RULE_TESTS)


def rule_test_cases() -> list[dict[str, object]]:
    return [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test.get("alert_rule_test", [])]


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: r["alert"])
def test_every_alert_has_a_firing_and_a_silent_unit_test(rule: dict[str, object]) -> None:
    """A rule that can never fire, or fires on everything, fails one of the two."""
    cases = [case for case in rule_test_cases() if case["alertname"] == rule["alert"]]
    assert any(case.get("exp_alerts") for case in cases), f"no unit test where {rule['alert']} fires"
    assert any(case.get("exp_alerts") == [] for case in cases), f"no unit test where {rule['alert']} stays silent"


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: r["alert"])
def test_every_alert_is_documented_and_labelled(rule: dict[str, object]) -> None:
    name = str(rule["alert"])
    labels, annotations = rule["labels"], rule["annotations"]
    assert isinstance(labels, dict) and isinstance(annotations, dict)
    assert labels["severity"] in {"critical", "warning"}
    assert {"summary", "description", "runbook"} <= set(annotations)
    assert annotations["runbook"] == f"docs/operations/alerts.md#{name.lower()}"
    text = RUNBOOKS.read_text()
    heading = re.search(rf"^### {name}$", text, re.M)
    assert heading, f"docs/operations/alerts.md has no section {name}"
    section = text[heading.end() : text.find("\n### ", heading.end())]
    assert "**Needs:**" in section, f"the {name} section does not say what the alert needs"
    assert "First response" in section, f"the {name} section has no first response"


def test_alerts_query_only_declared_metrics() -> None:
    declared = set(re.findall(r'"(fanline_[a-z0-9_]+)"', METRICS.read_text()))
    for rule in alerts():
        for name in re.findall(r"\bfanline_[a-z0-9_]+", str(rule["expr"])):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in declared or base in declared, f"{rule['alert']} queries {name}, which nothing exports"


def test_rule_files_are_not_in_another_directory() -> None:
    assert Path(yaml.safe_load(RULE_TESTS.read_text())["rule_files"][0]).name == RULES.name
