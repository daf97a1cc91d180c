"""Cassandra paused (SIGSTOP) for 30 s, then killed and restarted, under a
posting and reading user: the gateway answers every request within its
request deadline (``policies.GATEWAY_REQUEST``, 2 s) — 503 with Retry-After
while Cassandra is stalled or down, never a hang — loses nothing it
acknowledged, and recovers by itself once Cassandra is back, without any
service being restarted (issue 14: before the deadline, every request hung
until Cassandra came back, up to 30 s, and none carried Retry-After).

Stops the shared engine: run it under the engines' flock (HELPERS.md).
Cassandra is resumed and, if it is not running, started again in a
``finally`` whatever happens, before the test returns.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any

import pytest

from deploy.local.system import System

from .client import Api, eventually
from .cluster import setup_users, verify
from .faultkit import FaultRow, TimedLoad, record, restore_engine

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra, pytest.mark.fault]

PAUSE_S = 30.0
DOWN_S = 5.0
DEADLINE_S = 2.0  # policies.GATEWAY_REQUEST, the default
SLACK_S = 0.75  # scheduling on a shared 2-core machine


def control_of(real_infra: Any) -> Any:
    if real_infra.control is None:
        pytest.fail("Cassandra is external (FANLINE_TEST_CASSANDRA): this test needs to stop and start it")
    assert real_infra.control.cassandra.pid(), "no running Cassandra found by the launcher"
    return real_infra.control


def test_cassandra_paused_then_killed_is_refused_within_the_deadline_and_nothing_acknowledged_is_lost(
    fault_system: System, real_infra: Any
) -> None:
    control = control_of(real_infra)
    api = Api(fault_system.url())
    posters, readers = setup_users(api, posters=1, readers=1)
    load = TimedLoad(
        fault_system.url(),
        posters,
        readers,
        post_interval_s=0.5,
        read_interval_s=1.0,
        op_deadline_s=300.0,
        deadline_s=DEADLINE_S + SLACK_S,
    ).start()
    marks: dict[str, float] = {}
    try:
        time.sleep(5)
        acked_before = len(load.acked)
        control.signal_node("cassandra", 1, signal.SIGSTOP)
        marks["paused"] = time.monotonic()
        time.sleep(PAUSE_S)
        control.signal_node("cassandra", 1, signal.SIGKILL)  # a stopped process still dies
        marks["killed"] = time.monotonic()
        time.sleep(DOWN_S)
        restore_engine(control, "cassandra")
        marks["restarted"] = time.monotonic()
        refused_by_then = load.refused
        acked_at_restart = len(load.acked)
        eventually(
            lambda: len(load.acked) > acked_at_restart,
            timeout=120,
            interval=0.5,
            what="posting works again after Cassandra's restart, no service restarted",
        )
        marks["recovered"] = time.monotonic()
        time.sleep(5)
    finally:
        load.stop()
        # Never leave the shared engine paused or down.
        pid = control.cassandra.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                control.signal_node("cassandra", 1, signal.SIGCONT)
        if pid is None or not control.cassandra.ready():
            restore_engine(control, "cassandra")
    lost, duplicated = verify(api, load, timeout=180)
    slowest = load.slowest()
    unavailable_s = marks["recovered"] - marks["paused"]
    record(
        FaultRow(
            f"Cassandra paused (SIGSTOP) {PAUSE_S:.0f} s, then SIGKILLed, restarted after {DOWN_S:.0f} s",
            load.sent,
            load.failed + len(load.unexpected),
            len(load.acked),
            lost,
            duplicated,
            f"{refused_by_then} refused with 503 + Retry-After while stalled or down, slowest answer "
            f"{slowest[2]:.2f} s (deadline {DEADLINE_S:.0f} s); Cassandra back in "
            f"{marks['restarted'] - marks['killed']:.0f} s, posts succeed {marks['recovered'] - marks['restarted']:.0f} s "
            f"later; refused posts retried with their key",
        )
    )
    assert acked_before > 0
    assert load.refused > 0, "Cassandra's pause was never noticed"
    assert not load.unexpected, load.unexpected[:10]
    assert load.transport_errors == 0, load.errors[:10]
    assert load.failed == 0, load.errors[:10]
    assert (lost, duplicated) == (0, 0)
    print(f"\nCassandra unavailable {unavailable_s:.0f} s: {load.sent} requests, {load.refused} refused, slowest {slowest}")
    api.close()
