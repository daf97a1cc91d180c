"""The open-loop workload (bench/openloop.py): the population, the request list vegeta
sends, its results, the saturation rules, and — with the real vegeta when ``make
bench-tools`` built it — one attack against a local server that answers 201 or 503."""

from __future__ import annotations

import asyncio
import base64
import http.server
import json
import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import openloop
from bench.openloop import Population
from bench.rows import Recorder, Results
from bench.scenarios import open_loop


def population(users: int = 30, mean: int = 4) -> Population:
    follows = openloop.zipf_follows("t", users, mean, random.Random(7))
    return Population(follows, {u: f"tok-{u}" for u in follows})


def test_population_is_zipf_like_and_every_follow_set_distinct() -> None:
    follows = population(200, 6).follows
    assert len({frozenset(f) for f in follows.values()}) == 200
    assert all(me not in them and 1 <= len(them) <= 11 for me, them in follows.items())
    followers = Counter(f for them in follows.values() for f in them)
    most, median = followers.most_common(1)[0][1], sorted(followers.values())[len(followers) // 2]
    assert followers["tu0"] == most and most > 5 * median  # a few authors have most followers
    with pytest.raises(ValueError):
        openloop.zipf_follows("a-long-prefix", 3000, 2, random.Random(1))


def test_requests_follow_the_mix_in_vegetas_format() -> None:
    pop = population()
    targets = openloop.make_targets(pop, "http://h:1", 5000, random.Random(3))
    kinds = Counter(openloop.route_of(t["method"], t["url"]) for t in targets)
    assert set(kinds) == set(openloop.MIX)
    for kind, share in openloop.MIX.items():
        assert abs(kinds[kind] / 5000 - share) < 0.03
    post = next(t for t in targets if t["method"] == "POST" and t["url"].endswith("/v1/tweets"))
    assert post["header"]["Authorization"][0].startswith("Bearer tok-")
    assert json.loads(base64.b64decode(post["body"]))["body"].startswith("open-loop tweet")
    sign_in = next(t for t in targets if t["url"].endswith("/v1/sessions"))
    assert "Authorization" not in sign_in["header"]
    assert json.loads(base64.b64decode(sign_in["body"]))["password"] == openloop.PASSWORD


def test_a_follow_only_mix_follows_new_pairs_once_each() -> None:
    pop = population()
    pairs = [t["url"].split("/v1/users/")[1] for t in openloop.make_targets(pop, "", 300, random.Random(1), {"follow": 1.0})]
    assert len(set(pairs)) == 300
    for pair in pairs:
        me, _, other = pair.partition("/following/")
        assert other not in pop.follows[me] and other != me


def test_routes_and_rates() -> None:
    assert openloop.route_of("DELETE", "http://x/v1/users/a/following/b") == "unfollow"
    assert openloop.route_of("GET", "http://x/v1/users/a/tweets?limit=20") == "userline"
    assert openloop.route_of("GET", "http://x/v1/users/a") == "other"
    assert openloop.rates(25, 1.5, 4) == [25.0, 37.5, 56.2, 84.4]
    assert [openloop.rate_flag(r) for r in (60, 37.5, 56.25, 84.4)] == ["60/1s", "75/2s", "225/4s", "422/5s"]
    with pytest.raises(ValueError):
        openloop.rate_flag(0)


def test_refining_steps_bisect_between_the_last_rate_that_held_and_the_first_that_did_not() -> None:
    """The curve's 1.5x steps alone cannot tell 190/s from 280/s: ``refine`` more steps
    between the bracket (geometric means) narrow it to 1.5^(1/2^refine)."""
    assert openloop.between(190, 285) == 232.7
    with pytest.raises(ValueError):
        openloop.between(285, 190)

    class Ctx:
        def __init__(self) -> None:
            self.rec = Recorder("t")

        def lookup(self, scenario: str, name: str, /, **labels: object) -> float | None:
            return Results(self.rec.rows).num(scenario, name, **labels)

    tried: list[float] = []

    async def step(
        ctx: Ctx, scenario: str, offered: float, /, *_: object, **labels: object
    ) -> tuple[dict[str, dict[str, object]], float]:
        tried.append(offered)
        ctx.rec.add(scenario, "accepted_ms", offered / 10, route="all", stat="p99", **labels)
        return _summary([50.0 if offered <= 250 else 500.0], achieved=offered), 10.0

    p = {"start": 25.0, "factor": 1.5, "steps": 10, "step_s": 1, "refine": 2}
    real, open_loop.step = open_loop.step, step  # type: ignore[assignment]
    try:
        ctx = Ctx()
        capacity = asyncio.run(open_loop.curve(ctx, "saturation", p))  # type: ignore[arg-type]
    finally:
        open_loop.step = real  # type: ignore[assignment]
    # 25 … 189.8 hold, 284.8 does not; then 232.5 holds and 257.3 does not
    assert tried == [25.0, 37.5, 56.2, 84.4, 126.6, 189.8, 284.8, 232.5, 257.3]
    assert capacity == 232.5
    got = Results(ctx.rec.rows)
    assert got.num("saturation", "capacity_per_s") == 232.5
    assert got.num("saturation", "capacity_accepted_p99_ms") == 23.25


def _summary(post_ms: list[float], refused: int = 0, errors: int = 0, achieved: float = 100.0) -> dict[str, dict[str, object]]:
    total = {"requests": 1000, "accepted": [], "refused": [1.0] * refused, "errors": errors, "achieved_per_s": achieved}
    return {"all": total, "post": {"accepted": post_ms}}


def test_a_saturation_step_holds_only_within_every_bound() -> None:
    fast = [10.0] * 200
    assert openloop.held(_summary(fast), 500, 100) == (True, "held")
    assert openloop.held(_summary([10.0] * 197 + [300.0] * 3), 500, 100)[1].startswith("post p99")
    assert openloop.held(_summary(fast), 2500, 100)[1].startswith("delivery lag p99")
    assert openloop.held(_summary(fast), None, 100)[0] is False
    assert openloop.held(_summary(fast, refused=8, errors=3), 500, 100)[1] == "11 of 1000 requests refused or failed"
    assert openloop.held(_summary(fast, achieved=85.0), 500, 100)[1].startswith("generator achieved")
    assert openloop.held(_summary([]), 500, 100) == (False, "no post accepted")


def test_vegeta_csv_becomes_outcomes_per_route() -> None:
    header = base64.b64encode(b"Retry-After: 1\r\nContent-Type: text/plain\r\n").decode()
    lines = [
        f"1000000000,201,5000000,10,20,,,,0,POST,http://h/v1/tweets,{header}",
        "1500000000,503,2000000,10,20,,,,1,GET,http://h/v1/timeline?limit=20,",
        "2000000000,0,30000000000,0,0,timeout,,,2,GET,http://h/v1/timeline,",
    ]
    summary = openloop.summarize(openloop.parse_csv("\n".join(lines)))
    assert summary["all"]["requests"] == 3 and summary["all"]["achieved_per_s"] == 2.0
    assert summary["post"]["accepted"] == [5.0]
    assert summary["home"]["refused"] == [2.0] and summary["home"]["refused_without_retry_after"] == 1
    assert summary["home"]["errors"] == 1


class _Handler(http.server.BaseHTTPRequestHandler):
    """201 to posts; 503 with Retry-After to everything else."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(201 if self.command == "POST" else 503)
        if self.command != "POST":
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_one_step_with_the_real_vegeta(server: str, tmp_path: Path) -> None:
    try:
        openloop.attack  # noqa: B018
        vegeta = Path(openloop.__file__).with_name(".tools") / f"vegeta-{openloop.VEGETA}"
        if not vegeta.exists():
            pytest.skip("vegeta not built: make bench-tools")
    except FileNotFoundError:
        pytest.skip("vegeta not built")
    rec = Recorder("r")
    target = openloop.Target(server, dict, lambda: {"me": __import__("os").getpid()}, population())
    summary, lag = openloop.run_step(rec.scope("mixed"), target, 40, 2)
    r = Results(rec.rows)
    assert lag is None  # no worker: no delivery lag
    assert 70 <= r.num("mixed", "requests", route="all") <= 90  # type: ignore[operator]
    accepted = len(summary["all"]["accepted"])  # posts and sign-ins: 201
    assert r.num("mixed", "refused", route="all") == summary["all"]["requests"] - accepted
    assert r.num("mixed", "refused_without_retry_after") == 0 and r.num("mixed", "errors", route="all") == 0
    assert r.num("mixed", "achieved_per_s") == pytest.approx(40, rel=0.1)
    assert r.num("mixed", "cpu_s_per_1k", process="fanline") is not None and r.num("mixed", "generator_cpu_s_per_1k")
