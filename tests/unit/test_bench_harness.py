"""The benchmark harness without the engines: the plan (bench/scenarios.toml) and the CLI
over it, the page rendered from the committed results, the seeding arithmetic, the
cassandra-stress arguments, the latency proxy on real sockets, the /proc and Prometheus
probes, how a checkout's supervised services are named, the curves' arithmetic, and the
HTTP hop floor's servers and client on real sockets."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import bare, openloop, probes, report, rows, run, seed, stats, targets
from bench.context import topic_prefixes
from bench.scenarios.celebrity import crossover
from bench.scenarios.fanout import _cpu_between, steady_rate, summarize
from bench.scenarios.hops import mix_floor
from bench.system import CliSystem
from deploy.local.system import MODULES

REPO = Path(__file__).resolve().parents[2]
LATEST = REPO / "bench" / "results" / "latest.json"


def test_every_scenario_in_order_is_a_coroutine_of_its_module_and_quick_only_shrinks() -> None:
    order, full = run.load_plan(False)
    _, quick = run.load_plan(True)
    assert len(set(order)) == len(order)
    for name in order:
        module = importlib.import_module(f"bench.scenarios.{full[name]['module']}")
        assert inspect.iscoroutinefunction(getattr(module, name)), name
    raw = tomllib.loads(run.PLAN.read_text())["quick"]
    for table, overrides in raw.items():  # a quick override names an existing parameter
        assert set(overrides) <= set(full[table]), table
        assert all(quick[table][k] == v for k, v in overrides.items())
    assert quick["post_latency"]["curve"] == [] and full["post_latency"]["curve"] == [100000]
    assert quick["baseline_ref"]["rounds"] == 1 and full["baseline_ref"]["rounds"] >= stats.MIN_REPEATS


def test_the_teardown_deletes_faust_s_topics_too_and_no_other_run_s() -> None:
    env = run.load_plan(False)[1]["system"]["env"]
    prefixes = topic_prefixes(env, "2228b0")
    ours = [env[k].format(run="2228b0") for k in ("FANLINE_EVENTS_TOPIC", "FANLINE_DLQ_TOPIC")]
    ours += [ours[0] + ".chunks", env["FANLINE_WORKER_GROUP"].format(run="2228b0") + "-__assignor-__leader"]
    assert all(t.startswith(prefixes) for t in ours), (prefixes, ours)
    names = ("FANLINE_EVENTS_TOPIC", "FANLINE_WORKER_GROUP")
    others = [env[k].format(run=r) for k in names for r in ("2228", "2228b1", "97da")]
    assert not any(t.startswith(prefixes) for t in others), (prefixes, others)


def test_set_overrides_parse_toml_values_and_refuse_unknown_keys() -> None:
    _, params = run.load_plan(True, ["celebrity.counts=[1000, 2000]", "mixed.rate=7.5", "read_path.rate=abc"])
    assert params["celebrity"]["counts"] == [1000, 2000] and params["mixed"]["rate"] == 7.5
    assert params["read_path"]["rate"] == "abc"  # not TOML: the text as given
    with pytest.raises(SystemExit, match=r"no parameter mixed\.rat"):
        run.load_plan(False, ["mixed.rat=1"])
    with pytest.raises(SystemExit, match="unknown scenario"):
        run.main(["--only", "mixed,nonesuch"])


def test_the_targets_name_measured_rows_and_judge_the_committed_results() -> None:
    order, _ = run.load_plan(False)
    specs = tomllib.loads((REPO / "bench" / "targets.toml").read_text())["target"]
    assert len({t["key"] for t in specs}) == len(specs)
    for t in specs:
        for side in (t["measured"], t["bound"]):
            for term in str(side).split()[::2]:
                assert ":" not in term or term.split(":", 1)[0] in order, (t["key"], term)
    verdicts = {v.key: v for v in targets.evaluate(rows.Results(rows.load(LATEST)))}
    assert set(verdicts) == {t["key"] for t in specs}
    judged = [v for v in verdicts.values() if v.passed is not None]
    assert len(judged) >= 15 and any(v.passed is False for v in judged)  # the committed run has failing targets
    assert "sync_curve" in verdicts and "mastodon_home" in verdicts


@pytest.fixture(scope="module")
def plotted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """The committed results rendered once with their plots (matplotlib takes seconds)."""
    page = tmp_path_factory.mktemp("page") / "benchmarks.md"
    return page, report.render(rows.load(LATEST), page, LATEST)


@pytest.fixture
def no_drawing(plotted: tuple[Path, list[Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Later renders name the same plots without drawing them again."""
    names = [p.stem for p in plotted[1][1:]]
    monkeypatch.setattr(report, "make_plots", lambda _r, out: {n: out / f"{n}.png" for n in names})


def test_the_plots_are_drawn(plotted: tuple[Path, list[Path]]) -> None:
    page, written = plotted
    assert written[0] == page and report.BEGIN in page.read_text() and report.PLACEHOLDER in page.read_text()
    assert {p.name for p in written[1:]} >= {"post_latency.png", "saturation.png", "cost.png", "ceiling.png", "scaling.png"}
    assert all(p.stat().st_size > 1000 for p in written[1:])


@pytest.mark.usefixtures("no_drawing")
def test_the_page_keeps_the_hand_written_block(tmp_path: Path) -> None:
    page, data = tmp_path / "benchmarks.md", rows.load(LATEST)
    report.render(data, page, LATEST)
    text = page.read_text()
    assert report.BEGIN in text and report.PLACEHOLDER in text and "## Targets" in text
    mine = "What the numbers say, written by a person.\n\n- with a list"
    page.write_text(text.replace(report.PLACEHOLDER, mine))
    report.render(data, page, LATEST)
    again = page.read_text()
    assert mine in again and report.PLACEHOLDER not in again and again.count(report.BEGIN) == 1
    assert run.main(["--render", "--out", str(LATEST.parent), "--docs", str(tmp_path / "x.md")]) == 0
    assert (tmp_path / "x.md").read_text().startswith("# Benchmarks")


@pytest.mark.usefixtures("no_drawing")
def test_the_committed_page_is_what_the_committed_results_render(tmp_path: Path) -> None:
    committed = REPO / "docs" / "benchmarks.md"
    page = tmp_path / "benchmarks.md"
    page.write_text(committed.read_text())  # the same hand-written block
    report.render(rows.load(LATEST), page, LATEST)
    link = os.path.relpath(LATEST, tmp_path)
    assert page.read_text().replace(link, "../bench/results/latest.json") == committed.read_text()


def test_the_seeded_graph_gives_disjoint_ranges_and_distinct_follow_sets() -> None:
    g = seed.Graph("t")
    g.followers["shared"] = 3
    g.add_disjoint("a", 2)
    g.add_disjoint("b", 4)
    assert g.followers_of("shared") == ["ft_00000", "ft_00001", "ft_00002"]
    assert g.followers_of("a") == ["ft_00003", "ft_00004"] and g.followers_of("b")[0] == "ft_00005"
    assert g.pool_size == 9 and len(g.edges()) == 9 and g.edges(["a"]) == [("ft_00003", "a"), ("ft_00004", "a")]
    readers, authors = [f"r{i}" for i in range(20)], [f"a{i}" for i in range(8)]
    sets = seed.distinct_follow_sets(readers, authors, 3)
    assert len({tuple(s) for s in sets.values()}) == 20 and all(len(set(s)) == 3 for s in sets.values())
    assert {a for s in sets.values() for a in s} == set(authors)  # every author is read
    with pytest.raises(ValueError):
        seed.distinct_follow_sets([f"r{i}" for i in range(11)], authors[:5], 2)  # only 10 pairs


def test_cassandra_stress_arguments_and_its_home_timeline_profile(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    write = bare.stress_args("write", "ks_w", 1000, 8, tmp_path)
    assert write[:2] == ["write", "n=1000"] and "keyspace=ks_w" in write and "threads=8" in write
    home = bare.stress_args("home_timeline", "ks_h", 1000, 8, tmp_path, batch_rows=10)
    assert home[0] == "user" and "n=100" in home  # batches of 10 rows
    profile = yaml.safe_load(Path(home[1].split("=", 1)[1]).read_text())
    assert profile["keyspace"] == "ks_h" and profile["table"] == "home_timeline"


@pytest.fixture
def echo_server() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))

    def serve_one() -> None:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    threading.Thread(target=serve_one, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def test_the_latency_proxy_adds_its_delay_each_way(echo_server: int) -> None:
    """As the benchmark and the e2e fault tests start it: its own process, from its flags."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = f"--listen 127.0.0.1:{port} --target 127.0.0.1:{echo_server} --delay-ms 50"
    proxy = subprocess.Popen([sys.executable, "-m", "bench.latency_proxy", *flags.split()])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline and proxy.poll() is None
                time.sleep(0.1)
        with conn:
            started = time.monotonic()
            conn.sendall(b"ping")
            assert conn.recv(16) == b"ping"
            assert 0.1 <= time.monotonic() - started < 0.5  # 50 ms out, 50 ms back
    finally:
        proxy.terminate()
        assert proxy.wait(10) == 0  # SIGTERM: a clean stop


def test_prometheus_increases_quantiles_and_means() -> None:
    h = 'fanline_http_request_duration_seconds_bucket{route="/v1/tweets",le="%s"}'
    before = {h % "0.01": 10.0, h % "0.1": 10.0, h % "+Inf": 10.0, "c_total": 5.0}
    after = {h % "0.01": 60.0, h % "0.1": 110.0, h % "+Inf": 110.0, "c_total": 9.0}
    assert probes.increase(before, after, "c_total") == 4.0
    assert probes.quantile(before, after, probes.HTTP, 0.5, 'route="/v1/tweets"') == pytest.approx(0.01)
    assert probes.quantile(before, after, probes.HTTP, 0.75, 'route="/v1/tweets"') == pytest.approx(0.055)
    assert probes.quantile(before, after, probes.HTTP, 0.5, 'route="/other"') is None
    s = 'x_seconds_%s{op="a"}'
    got = probes.means({s % "sum": 1.0, s % "count": 10.0}, {s % "sum": 3.0, s % "count": 30.0}, "x_seconds")
    assert got == [('x_seconds{op="a"}', 20, pytest.approx(100.0))]


def test_statements_count_each_process_once() -> None:
    """Pages of services hosted in one process (one registry, one start time) are counted once;
    a second process (the worker) adds its own; a page that did not answer counts nothing."""
    c = 'fanline_cassandra_statement_duration_seconds_count{statement="%s"}'
    gateway = {"process_start_time_seconds": 100.25}
    worker = {"process_start_time_seconds": 100.26}
    before = {n: gateway | {c % "home_slice": 10.0} for n in ("api", "tweet-store", "social-graph")}
    before["fanout-worker"] = worker | {c % "home_add": 5.0}
    after = {n: gateway | {c % "home_slice": 40.0, c % "tweet_get": 3.0} for n in ("api", "tweet-store", "social-graph")}
    after["fanout-worker"] = worker | {c % "home_add": 25.0, c % "home_slice": 1.0}
    after["gone"] = {}
    assert probes.statements(before, after) == {"home_add": 20.0, "home_slice": 31.0, "tweet_get": 3.0}


def test_statements_count_two_processes_started_in_the_same_tick_apart() -> None:
    """Separate processes (``--no-colocate``) that started in the same 1/100 s are still two:
    they host other services; one registry's pages name the same ones."""
    c = 'fanline_cassandra_statement_duration_seconds_count{statement="%s"}'
    info = 'fanline_build_info{service="%s",version="0.3.0"}'
    hosts = {info % s: 1.0 for s in ("api", "tweet-store", "social-graph")}
    colocated = {n: {"process_start_time_seconds": 100.25, **hosts, c % "home_slice": 7.0} for n in ("api", "tweet-store")}
    assert probes.statements({}, colocated) == {"home_slice": 7.0}
    apart = {n: {"process_start_time_seconds": 100.25, info % n: 1.0, c % "home_add": 5.0} for n in ("api", "tweet-store")}
    assert probes.statements({}, apart) == {"home_add": 10.0}


def test_proc_cpu_children_and_cost_per_thousand() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    time.sleep(0.5)  # past its start-up
    try:
        assert probes.children(os.getpid())[child.pid].startswith(sys.executable)
        clocks = probes.cpu_clocks({"me": os.getpid(), "gone": 2**22 + 7})
        assert set(clocks) == {"me"} and clocks["me"] > 0
        assert (probes.status_kib(child.pid, "VmRSS") or 0) > 1000
    finally:
        child.kill()
    cost = probes.cpu_per_1k({"api": 1.0, "cassandra": 10.0}, {"api": 3.0, "cassandra": 14.0, "kafka": 1.0}, 500)
    assert cost == {"api": 4.0, "cassandra": 8.0, "kafka": 2.0, "fanline": 4.0, "engines": 10.0, "all": 14.0}
    assert probes.cpu_per_1k({}, {"api": 1.0}, 0) == {}


def test_idle_cost_is_each_process_share_of_a_core_and_its_part_of_a_request_at_the_rate() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    calm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    time.sleep(0.5)  # past their start-up
    rec = rows.Recorder("r")
    target = openloop.Target("", lambda: {}, lambda: {"api": busy.pid, "cassandra": calm.pid}, openloop.Population({}, {}))
    try:
        openloop.idle(rec.scope("mixed"), target, 1.0, 50.0)
    finally:
        busy.kill()
        calm.kill()
    got = rows.Results(rec.rows)
    assert 0.9 <= (got.num("mixed", "idle_s") or 0) < 2
    busy_percent, calm_percent = (got.num("mixed", "idle_cpu_percent", process=p) or 0 for p in ("api", "cassandra"))
    # A spinning process is (most of) a core; with CI's other phases on both
    # cores beside it (tests/run_suite.py) it got less than half of one here.
    assert 20 < busy_percent <= 101 and calm_percent < 5
    assert got.num("mixed", "idle_cpu_percent", process="fanline") == busy_percent
    # at 50 requests/s, 1 % of a core is 10 ms/s / 50 = 0.2 CPU-s per 1,000 requests
    assert got.num("mixed", "idle_cpu_s_per_1k", process="api") == pytest.approx(busy_percent / 5, rel=1e-3)


def test_workers_are_drained_once_one_reports_its_lag_and_none_has_any(monkeypatch: pytest.MonkeyPatch) -> None:
    lag = "fanline_consumer_lag_messages"
    pages = iter([{}, {"up": 1.0}, {f'{lag}{{partition="0"}}': 3.0}, {f'{lag}{{partition="0"}}': 0.0}, {}])
    seen = []
    monkeypatch.setattr(openloop.probes, "scrape", lambda url: seen.append(url) or next(pages))
    monkeypatch.setattr(openloop.time, "sleep", lambda s: None)
    urls = {"api": "http://api/metrics", "fanout-worker": "http://w/metrics"}
    # joined but not fetching yet (no lag series), then lag, then none: four looks, not one
    openloop.drain_workers(urls, 60.0)
    assert seen == ["http://w/metrics"] * 4
    # nobody ever reports: given up after ``unreported_s``, not ``timeout_s``
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(openloop.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(openloop.probes, "scrape", lambda url: {})
    openloop.drain_workers(urls, 600.0, unreported_s=30.0)
    assert next(clock) == 40  # the clock read at 0 (start), 10, 20 and 30, where it gave up
    openloop.drain_workers({"api": "http://api/metrics"}, 600.0)  # no worker: nothing to wait for


def test_paired_steps_begin_their_load_together_and_count_each_systems_own_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``paired_cost``: two ``run_step``s sharing a barrier start their attacks together, even
    when one system's drain of what came before takes longer; each counts its own processes."""
    a = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # system "busy": a spinning process
    b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started: dict[str, float] = {}

    def drain(urls: dict[str, str], timeout_s: float) -> None:
        if urls.get("late") and timeout_s > 60:  # the first drain of one system only
            time.sleep(0.5)

    def attack(targets: Path, rate: float, seconds: float) -> tuple[list[openloop.Outcome], float]:
        started[targets.read_text().split('"url": "', 1)[1].split("/", 3)[2]] = time.monotonic()
        time.sleep(seconds)
        return [(0, 200, 1.0, "home", False)], 0.0

    monkeypatch.setattr(openloop, "drain_workers", drain)
    monkeypatch.setattr(openloop, "attack", attack)
    monkeypatch.setattr(probes, "scrape", lambda url: {})
    rec, pop = rows.Recorder("r"), openloop.Population({"u": ()}, {"u": "t"})
    systems = {
        "busy": openloop.Target("http://busy", lambda: {"late": "x"}, lambda: {"api": a.pid}, pop),
        "calm": openloop.Target("http://calm", lambda: {}, lambda: {"api": b.pid}, pop),
    }
    together = threading.Barrier(2)
    try:
        steps = [
            threading.Thread(
                target=openloop.run_step, args=(rec.scope("paired_cost", system=n), t, 2.0, 1.0, {"home": 1.0}, together)
            )
            for n, t in systems.items()
        ]
        for t in steps:
            t.start()
        for t in steps:
            t.join(10)
    finally:
        a.kill()
        b.kill()
    assert abs(started["busy"] - started["calm"]) < 0.1  # not the 0.5 s one drain took longer
    got = rows.Results(rec.rows)
    busy, calm = (got.num("paired_cost", "cpu_s_per_1k", process="fanline", system=n) or 0 for n in systems)
    assert busy > 100 * max(calm, 0.001)  # 2 requests: the spinning process's second is ~500 CPU-s per 1,000


def test_a_checkouts_services_are_named_as_its_launcher_names_them(tmp_path: Path) -> None:
    """Each child of the supervisor by the module it runs; a second store is its fan-out replica."""
    sleeper = "import time; time.sleep(60)"
    spawn_all = "; ".join(
        f"subprocess.Popen([sys.executable, '-c', {sleeper!r}, '-m', {m!r}])"
        for m in (MODULES["api"], MODULES["tweet-store"], MODULES["tweet-store"], MODULES["fanout-worker"])
    )
    code = f"import subprocess, sys, time; {spawn_all}; time.sleep(60)"
    system = CliSystem(tmp_path, 1, {}, tmp_path / "log")
    system.proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(pids := system.pids()) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert set(pids) == {"api", "tweet-store", "tweet-store-fanout", "fanout-worker"}
        assert pids["tweet-store"] < pids["tweet-store-fanout"]
    finally:
        os.killpg(system.proc.pid, 9)
        system.proc.wait()
    assert system.metrics_urls()["fanout-worker"] == "http://127.0.0.1:4/metrics"


def test_curves_crossings_and_the_steady_rate() -> None:
    assert stats.crossing([(0.0, 0.0), (1.0, 10.0), (2.0, 30.0)], 20) == 1.5
    assert stats.crossing([(0.0, 0.0), (1.0, 5.0)], 20) is None
    assert stats.interleaved(["a", "b"], 2) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    assert crossover([(1000, 0.2), (10000, 1.2)]) == pytest.approx(1000 + 9000 * 0.8 / 1.0)
    assert crossover([(1000, 0.2), (10000, 0.6)]) == pytest.approx(10000 + 9000 * 0.4 / 0.4)  # extrapolated
    assert crossover([(1000, 0.5)]) is None
    series = [(float(t), 100.0 * t) for t in range(11)]  # 100 rows/s, 1,000 expected
    assert steady_rate(series, 1000, 0.0) == pytest.approx(100.0)
    assert steady_rate(series, 1000, 8.0) is None  # ready too late: under a fifth of the rows left
    assert stats.value_at(series, 2.5) == pytest.approx(250.0)
    assert stats.value_at(series, 3.0) == 300.0
    assert stats.value_at(series, -1.0) is None and stats.value_at(series, 11.0) is None


def test_the_drains_cpu_per_row_counts_only_its_steady_span() -> None:
    series = [(float(t), 100.0 * t) for t in range(11)]  # 100 rows/s
    # Start-up (t < 1) costs the worker 5 s of CPU; then 0.2 s per second (2 s per 1,000 rows).
    samples = [
        (t, {"fanout-worker": 5.0 + 0.2 * t, "fanout-worker-2": 0.1 * t, "cassandra": 0.3 * t, "api": 9.0 * t})
        for t in (0.0, 1.0, 2.0, 5.0, 9.0, 10.0)
    ]
    per_1k = _cpu_between(samples, series, 1.0, 9.0)
    assert per_1k == pytest.approx({"fanout-worker": 3.0, "cassandra": 3.0})  # 0.2 + 0.1 per 100 rows; api left out
    assert _cpu_between(samples, series, 2.5, 4.0) == {}  # fewer than two samples inside the span


def test_a_py_spy_profile_is_summed_by_area_and_function() -> None:
    raw = "\n".join(
        [
            "process 1;thread 2;main (app.py:3);execute (cassandra/cluster.py:10) 30",
            "process 1;thread 2;main (app.py:3);dumps (json/encoder.py:5) 10",
            "process 1;thread 2;handle (fanline_api/app.py:9) 60",
        ]
    )
    total, areas, functions = summarize(raw, {"cassandra/": "driver", "fanline_": "fanline code"})
    assert total == 100 and areas == {"fanline code": 60, "driver": 30, "other": 10}
    assert functions["execute (cassandra/cluster.py)"] == 30


def test_the_committed_results_are_tidy_rows() -> None:
    data = json.loads(LATEST.read_text())
    assert data and all(set(r) == {"run", "scenario", "metric", "value", "unit"} for r in data)
    # each figure once; each run merged in (--only) keeps its own meta rows
    keys = {(r["run"] if r["scenario"] == "run" else "", r["scenario"], r["metric"]) for r in data}
    assert len(keys) == len(data)


def test_the_mix_floor_weighs_each_routes_hops() -> None:
    hops = {"home": [2, 1], "post": [4, 3]}
    servers, calls, floor = mix_floor(hops, {"home": 0.75, "post": 0.25}, server_us=100.0, client_us=50.0)
    assert (servers, calls) == (2.5, 1.5)
    assert floor == pytest.approx((2.5 * 100 + 1.5 * 50) / 1000)  # CPU-s per 1,000 requests
    with pytest.raises(Exception, match="sign_in"):
        mix_floor(hops, {"home": 0.5, "sign_in": 0.5}, 1.0, 1.0)


@pytest.mark.parametrize("kind", ["starlette", "raw"])
def test_a_hop_server_answers_the_services_client(kind: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "bench.hop", "server", kind, str(port)], cwd=REPO)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, f"{kind} hop server did not start"
                time.sleep(0.1)
        client = [sys.executable, "-m", "bench.hop", "client", str(port), "200", "40"]
        got = json.loads(subprocess.run(client, cwd=REPO, capture_output=True, check=True, timeout=60).stdout)
        assert got["requests"] == 40 and got["cpu_s"] > 0 and 0 < got["p50_ms"] < 1000
    finally:
        server.terminate()
        server.wait(10)


def test_the_gateway_cost_tool_drives_the_real_gateway_app() -> None:
    """``python -m bench.gateway_cost``: both routes answer 200 through every
    middleware against its canned peer (it exits with the status otherwise),
    and it prints a CPU figure per route."""
    run = [sys.executable, "-m", "bench.gateway_cost", "--requests", "60", "--rounds", "1"]
    out = subprocess.run(run, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = re.findall(r"round 1: (GET \S+)\s+(\d+) µs", out.stdout)
    assert [route for route, _ in figures] == ["GET /v1/timeline", "GET /v1/users/{username}/tweets"], out.stdout
    assert all(int(us) > 0 for _, us in figures)


def test_the_bare_gateway_parses_requests_in_pieces_and_answers_each_in_order() -> None:
    """``bench.bare_mix``'s HTTP/1.1 (the cost floor's gateway): a request split across
    reads, a body by ``Content-Length``, the next request waiting behind the answer of the
    one before, the bearer token handed on, and a failing handler answered 500."""
    from bench.bare_mix import Http

    seen: list[tuple[str, str, str | None, bytes]] = []

    class Gateway:
        async def handle(self, method: str, path: str, token: str | None, body: bytes) -> tuple[int, bytes]:
            seen.append((method, path, token, body))
            await asyncio.sleep(0.01)
            if path == "/boom":
                raise RuntimeError("boom")
            return 200, b'{"n":%d}' % len(seen)

    class Transport:
        def __init__(self) -> None:
            self.written: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.written.append(data)

    async def main() -> list[bytes]:
        proto, transport = Http(Gateway()), Transport()  # type: ignore[arg-type]
        proto.connection_made(transport)  # type: ignore[arg-type]
        first = b'POST /v1/tweets HTTP/1.1\r\nAuthorization: Bearer tok\r\nContent-Length: 13\r\n\r\n{"body":"hi"}'
        for piece in (first[:20], first[20:70], first[70:] + b"GET /boom HTTP/1.1\r\n\r\nGET /v1/timeline HTTP/1.1\r\n\r\n"):
            proto.data_received(piece)
        for _ in range(100):
            if len(transport.written) == 3:
                break
            await asyncio.sleep(0.01)
        return transport.written

    written = asyncio.run(main())
    assert seen == [
        ("POST", "/v1/tweets", "tok", b'{"body":"hi"}'),
        ("GET", "/boom", None, b""),
        ("GET", "/v1/timeline", None, b""),
    ]
    assert [w.split(b"\r\n", 1)[0] for w in written] == [b"HTTP/1.1 200 OK", b"HTTP/1.1 500 Error", b"HTTP/1.1 200 OK"]
    assert written[0].endswith(b'{"n":1}') and written[2].endswith(b'{"n":3}')


@pytest.mark.parametrize(("followers", "reads"), [(2000, 2), (2001, 3), (999, 1), (0, 1)])
def test_the_drain_ceiling_reads_follower_pages_as_social_graph_does(
    monkeypatch: pytest.MonkeyPatch, followers: int, reads: int
) -> None:
    """A page asks for one row more than it keeps; the next starts after its last kept name:
    2,000 followers in pages of 1,000 are two reads, as the drain's ``followers_active`` count."""
    names = [f"F_{i:05d}" for i in range(followers)]
    asked: list[tuple[str, str, int]] = []

    async def execute(session: object, stmt: object, bound: tuple[str, str, int], name: str) -> list[object]:
        asked.append(bound)
        return [type("Row", (), {"follower": n})() for n in names if n.lower() > bound[1]][: bound[2]]

    monkeypatch.setattr(bare.cql, "prepare", lambda session, text: text)
    monkeypatch.setattr(bare.cql, "execute", execute)
    reader = bare.FollowerReader(object(), "ks", page_size=1000)  # type: ignore[arg-type]
    assert asyncio.run(reader.followers("Author")) == names
    assert len(asked) == reads and all(b[0] == "author" and b[2] == 1001 for b in asked)
    assert [b[1] for b in asked[1:]] == [names[i].lower() for i in (999, 1999) if i < followers][: reads - 1]
