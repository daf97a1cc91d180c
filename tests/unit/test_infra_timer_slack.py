"""The launcher starts Cassandra with a larger Linux timer slack
(deploy/local/infra/engine.py ``timer_slack``): the process it starts, and
every thread that process creates, must carry it; 0 keeps the default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from deploy.local.infra import InfraConfig
from deploy.local.infra.cassandra import _Cassandra
from deploy.local.infra.engine import timer_slack

CHILD = """
import threading
from pathlib import Path
def slack():
    return int(Path(f"/proc/{threading.get_native_id()}/timerslack_ns").read_text())
seen = []
t = threading.Thread(target=lambda: seen.append(slack()))
t.start(); t.join()
print(slack(), seen[0])
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/timerslack_ns").exists(), reason="Linux timer slack only")


def run_child(microseconds: int) -> list[int]:
    out = subprocess.run([sys.executable, "-c", CHILD], preexec_fn=timer_slack(microseconds), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return [int(v) for v in out.stdout.split()]


def test_the_process_and_its_threads_carry_the_slack() -> None:
    assert run_child(700) == [700_000, 700_000]


def test_zero_keeps_the_default() -> None:
    assert timer_slack(0) is None
    default = int(Path("/proc/self/timerslack_ns").read_text())
    assert run_child(0) == [default, default]


def test_cassandra_gets_the_configured_slack_and_kafka_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FANLINE_CASSANDRA_TIMER_SLACK_US", raising=False)
    assert _Cassandra(InfraConfig.from_env(state_dir=tmp_path)).timer_slack_us() == 500
    monkeypatch.setenv("FANLINE_CASSANDRA_TIMER_SLACK_US", "0")
    assert _Cassandra(InfraConfig.from_env(state_dir=tmp_path)).timer_slack_us() == 0
    from deploy.local.infra.kafka import _Kafka

    assert _Kafka(InfraConfig.from_env(state_dir=tmp_path)).timer_slack_us() == 0
    monkeypatch.delenv("FANLINE_CASSANDRA_TIMER_SLACK_US")
    # The three-node cluster keeps the kernel's default (config.CLUSTER_DEFAULTS says why).
    assert _Cassandra(InfraConfig.from_env(state_dir=tmp_path, nodes=3), node=1).timer_slack_us() == 0
