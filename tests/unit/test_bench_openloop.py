"""The open-loop benchmark's logic (bench/openloop.py, loadgen.py, the
issue-18 targets), without engines or processes: the population is
heavy-tailed with distinct follow sets, the request list follows the mix in
vegeta's format, vegeta's CSV is read right, a saturation step holds only
when every bound does, the capacity is the last rate that held, the
services' histograms are read like Prometheus reads them, and the targets
judge the overload run."""

from __future__ import annotations

import base64
import json
import os
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import loadgen, openloop, results  # noqa: E402

from .test_bench_report import fake_result, fake_step  # noqa: E402


def test_population_is_heavy_tailed_with_distinct_follow_sets_and_no_self_follows() -> None:
    pop = openloop.zipf_population("t1", 300, 15, random.Random(1))
    assert len(pop.users) == 300 and all(len(u) <= 15 for u in pop.users)
    sets = [frozenset(f) for f in pop.follows.values()]
    assert len(set(sets)) == len(sets)
    assert all(me not in followees for me, followees in pop.follows.items())
    assert all(len(f) == len(set(f)) >= 1 for f in pop.follows.values())
    counts = sorted(pop.followers().values(), reverse=True)
    # Zipf-like: the most followed has many times the median, the top 10 % hold a large share.
    assert counts[0] >= 10 * max(1, counts[len(counts) // 2])
    assert sum(counts[:30]) >= 0.4 * sum(counts)
    assert pop.users[0] == "t1u0" and pop.followers()["t1u0"] == counts[0]


def test_population_refuses_names_longer_than_usernames_allow() -> None:
    with pytest.raises(ValueError):
        openloop.zipf_population("much_too_long_", 20, 3, random.Random(1))


def test_targets_follow_the_mix_in_vegeta_json_format() -> None:
    pop = openloop.zipf_population("t2", 50, 5, random.Random(2))
    tokens = {u: f"tok-{u}" for u in pop.users}
    targets = openloop.make_targets(pop, tokens, "http://127.0.0.1:9", 5000, random.Random(3), "pw")
    assert len(targets) == 5000
    kinds = Counter(openloop.route_of(t["method"], t["url"]) for t in targets)
    for kind, share in openloop.MIX.items():
        assert abs(kinds[kind] / 5000 - share) < 0.03, (kind, kinds[kind])
    post = next(t for t in targets if t["method"] == "POST" and t["url"].endswith("/v1/tweets"))
    assert post["header"]["Authorization"][0].startswith("Bearer tok-")
    assert json.loads(base64.b64decode(post["body"]))["body"].startswith("open-loop tweet")
    sign_in = next(t for t in targets if t["url"].endswith("/v1/sessions"))
    assert "Authorization" not in sign_in["header"] and json.loads(base64.b64decode(sign_in["body"]))["password"] == "pw"
    for t in targets:
        if t["method"] in ("PUT", "DELETE"):
            me, other = t["url"].split("/v1/users/")[1].split("/following/")
            assert me != other and t["header"]["Authorization"] == [f"Bearer tok-{me}"]
    lines = openloop.targets_jsonl(targets[:3]).splitlines()
    assert [json.loads(line) for line in lines] == targets[:3]


@pytest.mark.parametrize(
    ("method", "url", "route"),
    [
        ("POST", "http://h:1/v1/tweets", "post"),
        ("GET", "http://h:1/v1/timeline?limit=20", "home"),
        ("GET", "http://h:1/v1/users/bob/tweets?limit=20", "userline"),
        ("PUT", "http://h:1/v1/users/a/following/b", "follow"),
        ("DELETE", "http://h:1/v1/users/a/following/b", "unfollow"),
        ("POST", "http://h:1/v1/sessions", "sign_in"),
        ("GET", "http://h:1/v1/tweets", "other"),
    ],
)
def test_route_of(method: str, url: str, route: str) -> None:
    assert openloop.route_of(method, url) == route


def _csv_row(ts: int, code: int, latency_ms: float, method: str, url: str, headers: str = "", error: str = "") -> str:
    encoded = base64.b64encode(headers.encode()).decode()
    return f'{ts},{code},{int(latency_ms * 1e6)},10,20,"{error}",,,0,{method},{url},{encoded}\n'


def test_vegeta_csv_is_summarized_per_route_with_refusals_and_errors_apart() -> None:
    text = "".join(
        [
            *(_csv_row(i * 10_000_000, 201, 10 + i, "POST", "http://h/v1/tweets") for i in range(100)),
            *(
                _csv_row(
                    1_000_000_000 + i,
                    503,
                    5.0,
                    "GET",
                    "http://h/v1/timeline",
                    "Retry-After: 1\r\nContent-Type: application/json\r\n",
                )
                for i in range(9)
            ),
            _csv_row(1_000_000_009, 503, 7.0, "GET", "http://h/v1/timeline"),  # no Retry-After
            _csv_row(1_000_000_010, 500, 3.0, "GET", "http://h/v1/users/x/tweets"),
            _csv_row(1_000_000_011, 0, 30000.0, "GET", "http://h/v1/users/x/tweets", error="timeout"),
        ]
    )
    s = openloop.summarize(openloop.parse_vegeta_csv(text))
    total = s["total"]
    assert (total["requests"], total["accepted"], total["refused"], total["errors"]) == (112, 100, 10, 2)
    assert total["refused_without_retry_after"] == 1
    assert total["error_statuses"] == {"500": 1, "no answer": 1}
    assert s["routes"]["post"]["accepted_ms"]["p50"] == pytest.approx(59.5)
    assert s["routes"]["post"]["accepted_ms"]["max"] == 109.0
    assert s["routes"]["home"]["refused_ms"]["max"] == 7.0
    assert total["achieved_rate_per_s"] == pytest.approx(111 / 1.000000011, rel=1e-3)


def test_a_step_holds_only_within_every_bound() -> None:
    good = fake_step(40, 60.0, 900.0)["client"]
    assert openloop.step_held(good, 900.0, 40) == (True, "held")
    assert not openloop.step_held(fake_step(40, 150.0, 900.0)["client"], 900.0, 40)[0]  # post p99
    assert not openloop.step_held(good, 2500.0, 40)[0]  # lag
    assert not openloop.step_held(good, None, 40)[0]
    assert not openloop.step_held(fake_step(40, 60.0, 900.0, refused=10)["client"], 900.0, 40)[0]  # > 1 % refused
    held, why = openloop.step_held(good, 900.0, 100)  # the generator fell behind: not the system's figure
    assert not held and "generator" in why


def test_capacity_is_the_last_rate_that_held_before_the_first_that_did_not() -> None:
    steps = [
        {"rate_per_s": 20, "held": True},
        {"rate_per_s": 40, "held": True},
        {"rate_per_s": 80, "held": False},
        {"rate_per_s": 160, "held": True},
    ]
    assert openloop.capacity(steps) == 40
    assert openloop.capacity([{"rate_per_s": 20, "held": False}]) is None
    assert openloop.saturation_rates(25, 1.5, 4) == [25, 37.5, 56.2, 84.4]
    with pytest.raises(ValueError):
        openloop.saturation_rates(25, 1.0, 3)


def test_histogram_quantile_reads_the_increase_like_prometheus() -> None:
    def scrape(counts: dict[str, float]) -> dict[str, float]:
        return {f'm_bucket{{le="{le}",route="/a"}}': v for le, v in counts.items()} | {
            'm_bucket{le="0.1",route="/b"}': 1000.0,
            'm_bucket{le="+Inf",route="/b"}': 1000.0,
        }

    before = scrape({"0.01": 10, "0.1": 10, "1.0": 10, "+Inf": 10})
    after = scrape({"0.01": 60, "0.1": 100, "1.0": 110, "+Inf": 110})  # +50, +40, +10 in the buckets
    assert openloop.histogram_quantile(before, after, "m", 0.5, ('route="/a"',)) == pytest.approx(0.01)
    # rank 90 of 100: in (0.01, 0.1], 40 of 50 through it
    assert openloop.histogram_quantile(before, after, "m", 0.9, ('route="/a"',)) == pytest.approx(0.01 + 0.09 * 40 / 40)
    assert openloop.histogram_quantile(before, after, "m", 0.99, ('route="/a"',)) == pytest.approx(0.1 + 0.9 * 0.9)
    assert openloop.histogram_quantile(before, before, "m", 0.99, ('route="/a"',)) is None  # nothing observed
    assert openloop.counter_increase({'c{a="1"}': 2.0}, {'c{a="1"}': 5.0, 'c{a="2"}': 1.0, "cx": 9.0}, "c") == 4.0


def test_cpu_per_1k_requests_and_a_process_clock_that_moves() -> None:
    per = openloop.cpu_per_1k({"api": 10.0, "tweet-store": 5.0}, {"api": 13.0, "tweet-store": 6.0}, 2000)
    assert per == {"api": 1.5, "tweet-store": 0.5, "total": 2.0}
    assert openloop.cpu_per_1k({}, {"api": 1.0}, 0) == {}
    before = loadgen.process_cpu_s(os.getpid())
    assert before is not None
    sum(i * i for i in range(2_000_000))
    after = loadgen.process_cpu_s(os.getpid())
    assert after is not None and after > before
    assert loadgen.process_cpu_s(2**22 + 12345) is None


@pytest.mark.parametrize(
    ("change", "key", "expected"),
    [
        ({}, "overload_accepted_p99", True),
        ({"accepted_p99_ms": 130.0}, "overload_accepted_p99", False),  # > 2 x 60 ms at capacity
        ({"refused_max_ms": 101.0}, "overload_refusals_fast", False),
        ({"errors": 3}, "overload_no_errors", False),
        ({"accepted_p99_ms": None}, "overload_accepted_p99", None),
    ],
)
def test_overload_targets(change: dict[str, object], key: str, expected: bool | None) -> None:
    doc = fake_result()
    doc["overload"].update(change)
    verdict = {t.key: t.passed for t in results.evaluate_targets(doc)}
    assert verdict[key] is expected


def test_server_view_sums_every_workers_lag_and_reads_the_gateway_per_route() -> None:
    from bench import workload

    lag = "fanline_delivery_lag_seconds"
    before = {
        "fanout-worker": {f'{lag}_bucket{{le="1.0"}}': 1.0, f'{lag}_bucket{{le="+Inf"}}': 1.0, f"{lag}_count": 1.0},
        "api": {},
    }
    after = {
        "fanout-worker": {f'{lag}_bucket{{le="1.0"}}': 5.0, f'{lag}_bucket{{le="+Inf"}}': 6.0, f"{lag}_count": 6.0},
        "fanout-worker-2": {f'{lag}_bucket{{le="1.0"}}': 4.0, f'{lag}_bucket{{le="+Inf"}}': 4.0, f"{lag}_count": 4.0},
        "api": {
            'fanline_http_request_duration_seconds_bucket{le="0.01",method="POST",route="/v1/tweets",service="api"}': 10.0,
            'fanline_http_request_duration_seconds_bucket{le="+Inf",method="POST",route="/v1/tweets",service="api"}': 10.0,
            'fanline_admission_shed_total{reason="deadline",route="/v1/timeline",service="api"}': 7.0,
        },
    }
    view = workload.server_view(before, after)
    assert view["delivery_lag_ms"] == {"p50": 562.5, "p99": 1000.0, "tweets": 9}  # 8 of 9 within 1 s
    assert view["gateway_route_ms"]["post"] == {"p50": 5.0, "p99": 9.9}
    assert view["gateway_route_ms"]["home"] == {"p50": None, "p99": None}
    assert view["admission"]["api"]["shed"] == 7


@pytest.mark.parametrize(
    ("rate", "flag"),
    [
        (60, "60/1s"),
        (37.5, "75/2s"),
        (56.25, "225/4s"),
        (126.5625, "2025/16s"),
        (1 / 3, "333/1000s"),
        (0.5, "1/2s"),
    ],
)
def test_every_saturation_rate_is_a_rate_vegeta_accepts(rate: float, flag: str) -> None:
    # vegeta exits 2 (usage) on -rate=37.5/1s: the curve's second step failed.
    assert loadgen.rate_flag(rate) == flag
    count, per = flag.split("/")
    assert int(count) / int(per.removesuffix("s")) == pytest.approx(rate, rel=2e-3)


def test_gate_sampler_reads_each_services_gate_every_interval() -> None:
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from bench.workload import GateSampler

    page = (
        '# HELP fanline_admission_limit x\nfanline_admission_limit{service="api"} 12.0\n'
        'fanline_admission_limit_other{service="api"} 99.0\n'
        'fanline_admission_in_flight{service="api"} 7.0\nfanline_admission_waiting{service="api"} 2.0\n'
    )

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        with GateSampler({"api": url, "fanout-worker": url}, every_s=0.05) as gates:
            time.sleep(0.4)
    finally:
        server.shutdown()
    assert len(gates.samples) >= 3
    # limit, in flight, waiting; a metric that only starts with the name is not it; workers have no gate
    assert all(s["api"] == [12.0, 7.0, 2.0] and "fanout-worker" not in s for s in gates.samples)
    assert [s["t"] for s in gates.samples] == sorted(s["t"] for s in gates.samples)
