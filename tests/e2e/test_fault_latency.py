"""Fixed latency between the services and Cassandra (issue 14,
fault-injection suite): ``slow_system``'s services reach Cassandra through a
TCP proxy adding 20 ms each way (``bench/latency_proxy.py``; their contact
point is the proxy's port). The same steady load runs against it and against
``fault_system`` (direct): every request still succeeds within the gateway's
deadline, nothing acknowledged is lost or duplicated, and the table reports
p50/p99 of posts and home-timeline reads with and without the latency.
"""

from __future__ import annotations

import time

import pytest

from deploy.local.system import System

from .client import Api
from .cluster import setup_users, verify
from .conftest import SLOW_DELAY_MS
from .faultkit import FaultRow, TimedLoad, record

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra, pytest.mark.fault]

LOAD_S = 20.0
DEADLINE_S = 2.0  # policies.GATEWAY_REQUEST
SLACK_S = 0.75


def measure(system: System) -> tuple[TimedLoad, int, int]:
    api = Api(system.url())
    posters, readers = setup_users(api, posters=1, readers=1)
    load = TimedLoad(
        system.url(), posters, readers, post_interval_s=0.1, read_interval_s=0.1, deadline_s=DEADLINE_S + SLACK_S
    ).start()
    time.sleep(LOAD_S)
    load.stop()
    lost, duplicated = verify(api, load, timeout=120)
    api.close()
    return load, lost, duplicated


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def test_latency_to_cassandra_costs_time_but_no_request(fault_system: System, slow_system: System) -> None:
    base, _, _ = measure(fault_system)
    slow, lost, duplicated = measure(slow_system)
    b_post, s_post = base.quantiles("POST /v1/tweets"), slow.quantiles("POST /v1/tweets")
    b_home, s_home = base.quantiles("GET /v1/timeline"), slow.quantiles("GET /v1/timeline")
    record(
        FaultRow(
            f"{SLOW_DELAY_MS:.0f} ms added each way between every service and Cassandra (TCP proxy)",
            slow.sent,
            slow.failed + len(slow.unexpected),
            len(slow.acked),
            lost,
            duplicated,
            f"p50/p99 post {ms(s_post[0])}/{ms(s_post[1])} ms (direct: {ms(b_post[0])}/{ms(b_post[1])}), "
            f"home read {ms(s_home[0])}/{ms(s_home[1])} ms (direct: {ms(b_home[0])}/{ms(b_home[1])}); "
            f"{s_post[2]} posts, {s_home[2]} home reads in {LOAD_S:.0f} s (direct: {b_post[2]}, {b_home[2]})",
        )
    )
    for load in (base, slow):
        assert load.retried == 0 and load.failed == 0, load.errors[:10]
        assert not load.unexpected, load.unexpected[:10]
    assert (lost, duplicated) == (0, 0)
    # The proxy really sits in the path: a post makes several round trips.
    assert s_post[0] > b_post[0] + 2 * SLOW_DELAY_MS / 1000, (s_post, b_post)
