"""A soak at steady mixed load (issue 14, fault-injection suite): posts,
home, public and userline reads, follows and unfollows for
``FANLINE_SOAK_S`` seconds (default 600; 60 while developing) on real
Cassandra + Kafka. Afterwards: no request failed or was retried, the
resident memory of every service process grew less than 10 % after the
warm-up, the worker never got stuck (``/readyz`` is 200 and its lag returns
to 0), and every acknowledged tweet is in its author's userline and every
follower's home timeline exactly once.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from deploy.local.system import System

from .client import Api, eventually
from .cluster import setup_users, verify
from .conftest import running
from .faultkit import FaultRow, TimedLoad, group_lag, record, service_rss_kib, topics_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra, pytest.mark.fault, pytest.mark.soak]

SOAK_S = float(os.environ.get("FANLINE_SOAK_S", "600"))
WARM_UP_S = min(120.0, SOAK_S / 5)
MAX_GROWTH = 0.10
DEADLINE_S = 2.0 + 0.75  # policies.GATEWAY_REQUEST, plus scheduling slack on a shared machine


@pytest.fixture(scope="module")
def soak_system(real_infra: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    # Home timelines keep every row, so every soak tweet can be checked in them.
    yield from running("real", 23200, tmp_path_factory, real_infra, FANLINE_HOME_MAX_ROWS="1000000")


@dataclass
class SoakLoad(TimedLoad):
    """``TimedLoad`` plus a user who follows and unfollows the posters in
    turn and reads their userlines."""

    churner: tuple[str, str] = ("", "")
    churn_interval_s: float = 1.0
    churned: int = 0
    _churn_thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> SoakLoad:
        super().start()
        self._churn_thread = threading.Thread(target=self._churn, daemon=True)
        self._churn_thread.start()
        return self

    def stop(self) -> None:
        super().stop()
        if self._churn_thread is not None:
            self._churn_thread.join(self.op_deadline_s + 30)

    def _churn(self) -> None:
        name, token = self.churner
        following = False
        i = 0
        with httpx.Client(base_url=self.api_url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as c:
            while not self._stop.is_set():
                target = self.posters[i % len(self.posters)][0]
                method = "DELETE" if following else "PUT"
                r = self._attempt(c, method, f"/v1/users/{name}/following/{target}")
                if r is not None and r.status_code == 204:
                    with self._lock:
                        self.churned += 1
                elif r is not None:
                    with self._lock:
                        self.failed += 1
                        self.errors.append(f"{method} following: {r.status_code} {r.text[:120]}")
                r = self._attempt(c, "GET", f"/v1/users/{target}/tweets", params={"limit": 20})
                if r is not None and r.status_code != 200:
                    with self._lock:
                        self.failed += 1
                        self.errors.append(f"GET userline: {r.status_code} {r.text[:120]}")
                if following:
                    i += 1
                following = not following
                self._stop.wait(self.churn_interval_s)


def test_soak_at_steady_mixed_load(soak_system: System) -> None:
    system = soak_system
    api = Api(system.url())
    posters, readers = setup_users(api, posters=3, readers=3)
    churner = api.user("c")
    load = SoakLoad(
        system.url(), posters, readers, post_interval_s=1.0, read_interval_s=1.0, deadline_s=DEADLINE_S, churner=churner
    ).start()
    events, chunks, _ = topics_of(system)
    group = system.env()["FANLINE_WORKER_GROUP"]
    started = time.monotonic()
    lags: list[int] = []
    rss_samples: list[dict[str, int]] = []
    try:
        time.sleep(WARM_UP_S)
        warm = service_rss_kib(system)
        while time.monotonic() - started < SOAK_S:
            time.sleep(min(30.0, max(0.0, SOAK_S - (time.monotonic() - started))))
            rss_samples.append(service_rss_kib(system))
            lags.append(group_lag(system.bootstrap, group, [events, chunks]))
    finally:
        load.stop()
    final = service_rss_kib(system)
    ready = httpx.get(system.url("fanout-worker") + "/readyz", timeout=10)
    eventually(
        lambda: group_lag(system.bootstrap, group, [events, chunks]) == 0,
        timeout=60,
        interval=1,
        what="consumer lag back to 0 after the soak",
    )
    lost, duplicated = verify(api, load, timeout=180)
    growth = {name: (final[name] - warm[name]) / warm[name] for name in warm if name in final}
    worst = max(growth, key=lambda n: growth[n])
    peak = {name: max(s.get(name, 0) for s in [warm, *rss_samples]) for name in warm}
    home_p50, home_p99, _ = load.quantiles("GET /v1/timeline")
    post_p50, post_p99, _ = load.quantiles("POST /v1/tweets")
    record(
        FaultRow(
            f"soak: {SOAK_S / 60:.0f} min steady mixed load (posts, home/public/userline reads, follows/unfollows)",
            load.sent,
            load.failed + len(load.unexpected) + load.retried,
            len(load.acked) + load.churned,
            lost,
            duplicated,
            f"{len(load.acked)} tweets + {load.churned} follows/unfollows acknowledged; "
            f"RSS growth after {WARM_UP_S:.0f} s warm-up: "
            + ", ".join(f"{n} {growth[n] * 100:+.1f} % ({final[n] // 1024} MiB)" for n in sorted(growth))
            + f"; max lag sampled {max(lags, default=0)}, 0 at the end; p50/p99 post {post_p50 * 1000:.0f}/"
            f"{post_p99 * 1000:.0f} ms, home {home_p50 * 1000:.0f}/{home_p99 * 1000:.0f} ms",
        )
    )
    assert load.retried == 0 and load.failed == 0, load.errors[:10]
    assert not load.unexpected, load.unexpected[:10]
    assert ready.status_code == 200, ready.text
    assert (lost, duplicated) == (0, 0)
    assert growth[worst] < MAX_GROWTH, f"{worst} grew {growth[worst] * 100:.1f} % (warm {warm}, final {final}, peak {peak})"
    api.close()
