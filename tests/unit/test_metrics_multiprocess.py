"""``metrics.render()`` aggregates across processes in multiprocess mode.

A service run with several worker processes (e.g. ``uvicorn --workers 4``)
gets one scrape per request from *some* worker; with
``PROMETHEUS_MULTIPROC_DIR`` set every process writes its values to files
there and ``render()`` merges them. This test starts real processes (the
values class is chosen when prometheus_client is imported, so it cannot be
faked in this process): two "workers" record metrics and exit, a third
renders, and the totals must be the sums.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

WORKER = textwrap.dedent(
    """
    import os, sys
    from fanline_shared import metrics
    n = int(sys.argv[1])
    metrics.set_build_info("api", "9.9.9")
    metrics.TWEETS_POSTED.inc(n)
    for _ in range(n):
        metrics.HTTP_LATENCY.labels("api", "POST", "/v1/tweets").observe(0.004)
        metrics.HTTP_REQUESTS.labels("api", "POST", "/v1/tweets", "201").inc()
    metrics.CONSUMER_LAG.labels("fanline.events", "0").set(n * 10)
    print(os.getpid())
    """
)

RENDER = textwrap.dedent(
    """
    import sys
    from fanline_shared import metrics
    if len(sys.argv) > 1:  # the first worker "died": forget its live gauges
        from prometheus_client import multiprocess
        multiprocess.mark_process_dead(int(sys.argv[1]))
    payload, content_type = metrics.render()
    sys.stdout.write(payload.decode())
    """
)


def run(code: str, multiproc_dir: Path, *args: str) -> str:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_histograms_and_gauges_aggregate_across_processes(tmp_path: Path) -> None:
    first = int(run(WORKER, tmp_path, "4"))
    run(WORKER, tmp_path, "3")
    assert len(list(tmp_path.glob("*.db"))) >= 2, "each process writes its own files"

    got = samples(run(RENDER, tmp_path))
    route = (("method", "POST"), ("route", "/v1/tweets"), ("service", "api"))
    assert got[("fanline_tweets_posted_total", ())] == 7
    assert got[("fanline_http_requests_total", (*route[:2], ("service", "api"), ("status", "201")))] == 7
    assert got[("fanline_http_request_duration_seconds_count", route)] == 7
    assert got[("fanline_http_request_duration_seconds_bucket", (("le", "0.005"), *route))] == 7
    assert got[("fanline_http_request_duration_seconds_bucket", (("le", "0.0025"), *route))] == 0
    # build info survives multiprocess mode (an Info would vanish) and is not summed
    assert got[("fanline_build_info", (("service", "api"), ("version", "9.9.9")))] == 1
    # consumer lag is "livemax": the larger of the live processes' values
    lag = (("partition", "0"), ("topic", "fanline.events"))
    assert got[("fanline_consumer_lag_messages", lag)] == 40

    # once a process is marked dead its live gauges drop out; counters stay
    after = samples(run(RENDER, tmp_path, str(first)))
    assert after[("fanline_consumer_lag_messages", lag)] == 30
    assert after[("fanline_tweets_posted_total", ())] == 7


def test_without_the_directory_render_uses_the_process_registry(tmp_path: Path) -> None:
    code = "from fanline_shared import metrics; metrics.TWEETS_POSTED.inc(2); print(metrics.render()[0].decode())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    got = samples(done.stdout)
    assert got[("fanline_tweets_posted_total", ())] == 2
    assert ("process_resident_memory_bytes", ()) in got or sys.platform != "linux"
